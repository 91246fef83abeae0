//! Copies of source trees under `target/fgtrace/`: a file is rewritten only
//! when what it should hold changed, so cargo's fingerprints (mtimes) of the
//! rest stay fresh and a second build recompiles only what changed.
//!
//! Each copy keeps a stamp file beside it: per file, the source's size and
//! mtime and what was done to it (the key). A file whose stamp matches is
//! not even read again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// What to do with the files of one tree.
pub struct Tree<'a> {
    /// The original.
    pub from: &'a Path,
    /// The copy.
    pub to: &'a Path,
    /// The stamp file (outside `to`).
    pub stamp: PathBuf,
    /// Directories not copied (target directories, `.git`).
    pub skip_dirs: Vec<PathBuf>,
    /// Files (relative) to rewrite, and how; the rest is copied as it is.
    pub edit: &'a dyn Fn(&Path) -> Option<Edit>,
    /// Files of the copy that are not the original's and stay (relative).
    pub keep: Vec<PathBuf>,
}

/// A rewriting of a file's text; `key` says which (it changes when the
/// rewriting would give another text).
pub struct Edit {
    pub key: String,
    #[allow(clippy::type_complexity)]
    pub apply: Box<dyn Fn(&str) -> Result<String, String>>,
}

/// What a sync did.
#[derive(Default)]
pub struct Synced {
    /// Files written (new or changed).
    pub written: usize,
    /// Files looked at.
    pub files: usize,
    /// Edits that failed (the file is then copied as it is), and why.
    pub failed: Vec<(PathBuf, String)>,
}

struct Stamp {
    size: u64,
    mtime_ns: u128,
    key: String,
}

fn read_stamps(path: &Path) -> HashMap<PathBuf, Stamp> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return HashMap::new();
    };
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(4, '\t');
            let size = f.next()?.parse().ok()?;
            let mtime_ns = f.next()?.parse().ok()?;
            let key = f.next()?.to_string();
            let rel = PathBuf::from(f.next()?);
            Some((
                rel,
                Stamp {
                    size,
                    mtime_ns,
                    key,
                },
            ))
        })
        .collect()
}

fn write_stamps(path: &Path, stamps: &BTreeMap<PathBuf, Stamp>) -> io::Result<()> {
    let mut text = String::new();
    for (rel, s) in stamps {
        text += &format!(
            "{}\t{}\t{}\t{}\n",
            s.size,
            s.mtime_ns,
            s.key.replace(['\t', '\n'], " "),
            rel.display()
        );
    }
    std::fs::write(path, text)
}

/// Writes `bytes` to `path` unless it holds them already.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // A copy of a registry crate is read-only: replace, do not write through.
    let _ = std::fs::remove_file(path);
    std::fs::write(path, bytes)?;
    Ok(true)
}

/// Brings `t.to` up to date with `t.from`.
pub fn sync(t: &Tree) -> Result<Synced, String> {
    let old = read_stamps(&t.stamp);
    let mut stamps = BTreeMap::new();
    let mut done = Synced::default();
    let mut seen = BTreeSet::new();
    let mut stack = vec![PathBuf::new()];
    let io = |p: &Path, e: io::Error| format!("{}: {e}", p.display());
    while let Some(rel_dir) = stack.pop() {
        let dir = t.from.join(&rel_dir);
        let entries = std::fs::read_dir(&dir).map_err(|e| io(&dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io(&dir, e))?;
            let path = entry.path();
            let rel = rel_dir.join(entry.file_name());
            let meta = std::fs::symlink_metadata(&path).map_err(|e| io(&path, e))?;
            let dest = t.to.join(&rel);
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).map_err(|e| io(&path, e))?;
                if std::fs::read_link(&dest).ok().as_ref() != Some(&target) {
                    let _ = std::fs::remove_file(&dest);
                    if let Some(d) = dest.parent() {
                        std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
                    }
                    std::os::unix::fs::symlink(&target, &dest).map_err(|e| io(&dest, e))?;
                }
                seen.insert(rel);
                continue;
            }
            if meta.is_dir() {
                let skip = entry.file_name() == ".git"
                    || t.skip_dirs.contains(&path)
                    // Cargo marks its target directories so.
                    || path.join("CACHEDIR.TAG").exists();
                if !skip {
                    stack.push(rel);
                }
                continue;
            }
            done.files += 1;
            seen.insert(rel.clone());
            let edit = (t.edit)(&rel);
            let stamp = Stamp {
                size: meta.len(),
                mtime_ns: meta
                    .modified()
                    .ok()
                    .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos()),
                key: edit.as_ref().map_or("copy".into(), |e| e.key.clone()),
            };
            let fresh = old.get(&rel).is_some_and(|o| {
                o.size == stamp.size && o.mtime_ns == stamp.mtime_ns && o.key == stamp.key
            }) && dest.exists();
            if !fresh {
                let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
                let out = match (&edit, std::str::from_utf8(&bytes)) {
                    (Some(edit), Ok(text)) => match (edit.apply)(text) {
                        Ok(out) => out.into_bytes(),
                        Err(why) => {
                            done.failed.push((rel.clone(), why));
                            bytes
                        }
                    },
                    _ => bytes,
                };
                if write_if_changed(&dest, &out).map_err(|e| io(&dest, e))? {
                    done.written += 1;
                }
            }
            stamps.insert(rel, stamp);
        }
    }
    remove_stale(t.to, Path::new(""), &seen, &t.keep);
    if let Some(d) = t.stamp.parent() {
        std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
    }
    write_stamps(&t.stamp, &stamps).map_err(|e| io(&t.stamp, e))?;
    Ok(done)
}

/// Removes files of the copy the original no longer has.
fn remove_stale(root: &Path, rel_dir: &Path, seen: &BTreeSet<PathBuf>, keep: &[PathBuf]) {
    let Ok(entries) = std::fs::read_dir(root.join(rel_dir)) else {
        return;
    };
    for entry in entries.flatten() {
        let rel = rel_dir.join(entry.file_name());
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir {
            remove_stale(root, &rel, seen, keep);
        } else if !seen.contains(&rel) && !keep.contains(&rel) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_sync_writes_only_what_changed_and_removes_what_went() {
        let base = std::env::temp_dir().join(format!("cargo-fgtrace-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (from, to) = (base.join("from"), base.join("to"));
        std::fs::create_dir_all(from.join("src")).unwrap();
        std::fs::create_dir_all(from.join("target/debug")).unwrap();
        std::fs::write(from.join("target/CACHEDIR.TAG"), "x").unwrap();
        std::fs::write(from.join("src/a.rs"), "fn a() {}\n").unwrap();
        std::fs::write(from.join("src/b.rs"), "fn b() {}\n").unwrap();
        std::fs::write(from.join("README"), "r").unwrap();
        let edit = |rel: &Path| {
            (rel.extension().is_some_and(|e| e == "rs")).then(|| Edit {
                key: "upper".into(),
                apply: Box::new(|t: &str| Ok(t.to_uppercase())),
            })
        };
        let tree = Tree {
            from: &from,
            to: &to,
            stamp: base.join("stamp"),
            skip_dirs: vec![],
            edit: &edit,
            keep: vec![PathBuf::from("Cargo.lock")],
        };
        let s = sync(&tree).unwrap();
        assert_eq!((s.files, s.written), (3, 3));
        assert_eq!(
            std::fs::read_to_string(to.join("src/a.rs")).unwrap(),
            "FN A() {}\n"
        );
        assert!(!to.join("target").exists());
        std::fs::write(to.join("Cargo.lock"), "kept").unwrap();
        std::fs::write(to.join("stale"), "gone").unwrap();
        let s = sync(&tree).unwrap();
        assert_eq!((s.files, s.written), (3, 0));
        std::fs::write(from.join("src/a.rs"), "fn a2() {}\n").unwrap();
        std::fs::remove_file(from.join("src/b.rs")).unwrap();
        let s = sync(&tree).unwrap();
        assert_eq!((s.files, s.written), (2, 1));
        assert_eq!(
            std::fs::read_to_string(to.join("src/a.rs")).unwrap(),
            "FN A2() {}\n"
        );
        assert!(!to.join("src/b.rs").exists());
        assert!(!to.join("stale").exists());
        assert!(to.join("Cargo.lock").exists());
        let _ = std::fs::remove_dir_all(&base);
    }
}
