//! The instrumented copies and the cargo flags that build them: the
//! workspace copied to `<target>/fgtrace/ws/`, chosen dependencies to
//! `<target>/fgtrace/crates/`, patches and flags for cargo (see the guide's
//! Architecture page, docs/src/architecture.md, "cargo fgtrace").

use crate::cargo_args::CargoArgs;
use crate::manifest::{self, ManifestEdit};
use crate::metadata::{self, Metadata, Package};
use crate::tree::{self, Edit, Tree};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use wildmatch::WildMatch;

/// What the user asked to trace.
pub struct Selection<'a> {
    /// `--crate` names; empty: every workspace member.
    pub crates: &'a [String],
    /// `--skip` globs over item paths.
    pub skip: &'a [String],
}

/// A package built instrumented.
#[derive(Debug, Clone)]
pub struct Instrumented {
    pub name: String,
    pub label: String,
    pub krate: String,
    /// The package's directory in the original and in the copy.
    pub orig_dir: PathBuf,
    pub copy_dir: PathBuf,
    /// Directories (relative to the package's) whose files are instrumented.
    pub src_dirs: Vec<PathBuf>,
}

/// Everything a cargo command needs to build the copy.
pub struct Prepared {
    pub cargo: String,
    /// `--config` flags, before the subcommand.
    pub globals: Vec<String>,
    /// Environment for cargo (`CARGO_TARGET_DIR`, maybe `CARGO_ENCODED_RUSTFLAGS`).
    pub env: Vec<(String, String)>,
    /// The copy of the manifest cargo would have used.
    pub manifest: PathBuf,
    /// `<target>/fgtrace`.
    pub dir: PathBuf,
    /// The workspace's copy.
    pub ws_copy: PathBuf,
    pub instrumented: Vec<Instrumented>,
}

/// The `fgtrace` package the copies depend on: `FGTRACE_SOURCE`, else the
/// sources this command was built from.
pub fn fgtrace_source() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("FGTRACE_SOURCE") {
        let dir = PathBuf::from(dir);
        return if manifest::is_fgtrace_package(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "FGTRACE_SOURCE={}: no Cargo.toml of the package `fgtrace` there",
                dir.display()
            ))
        };
    }
    let cli = Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates = [cli.join(".."), cli.join("../runtime")];
    for c in &candidates {
        if manifest::is_fgtrace_package(c) {
            return Ok(manifest::normalize(c));
        }
    }
    Err(format!(
        "cannot find the fgtrace sources this command was built from (looked in {}): \
         set FGTRACE_SOURCE to the directory of fgtrace's Cargo.toml",
        candidates
            .iter()
            .map(|c| manifest::normalize(c).display().to_string())
            .collect::<Vec<_>>()
            .join(" and ")
    ))
}

/// The manifest cargo would use: `--manifest-path`, else the nearest
/// `Cargo.toml` from the current directory up.
fn user_manifest(args: &CargoArgs) -> Result<PathBuf, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    if let Some(m) = &args.manifest {
        return Ok(manifest::normalize(&cwd.join(m)));
    }
    let mut dir = cwd.as_path();
    loop {
        let m = dir.join("Cargo.toml");
        if m.is_file() {
            return Ok(m);
        }
        dir = dir.parent().ok_or_else(|| {
            format!(
                "no Cargo.toml in {} or any directory above it",
                cwd.display()
            )
        })?;
    }
}

/// The `.rs` files a package's instrumenting covers (relative to `root`),
/// with their module paths; and its source directories.
fn rust_files_of(p: &Package, root: &Path) -> (BTreeMap<PathBuf, String>, Vec<PathBuf>) {
    let pkg_dir = p.dir();
    let krate = p.crate_name();
    let others: Vec<&Path> = p
        .targets
        .iter()
        .filter(|t| !p.code_targets().any(|c| c.src_path == t.src_path))
        .map(|t| t.src_path.as_path())
        .collect();
    let mut files = BTreeMap::new();
    let mut dirs = Vec::new();
    // The library first: its module paths win where directories overlap.
    let mut targets: Vec<_> = p.code_targets().collect();
    targets.sort_by_key(|t| !t.kinds.iter().any(|k| k.ends_with("lib")));
    for t in targets {
        let Some(src) = t.src_path.parent() else {
            continue;
        };
        if let Ok(rel) = src.strip_prefix(pkg_dir) {
            if !dirs.iter().any(|d: &PathBuf| rel.starts_with(d)) {
                dirs.push(rel.to_path_buf());
            }
        }
        let mut found = Vec::new();
        let _ = walk(src, src == pkg_dir, &mut found);
        for f in found {
            if others.contains(&f.as_path()) {
                continue;
            }
            let (Ok(in_src), Ok(in_root)) = (f.strip_prefix(src), f.strip_prefix(root)) else {
                continue;
            };
            files
                .entry(in_root.to_path_buf())
                .or_insert_with(|| fgtrace_instrument::module_path(&krate, in_src));
        }
    }
    (files, dirs)
}

/// `.rs` files under `dir`, not in other packages (a directory with its
/// own `Cargo.toml`), nor in `tests/`, `benches/`, `examples/` or `target/`
/// when `dir` is the package's own.
fn walk(dir: &Path, package_root: bool, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            let name = path.file_name().unwrap_or_default();
            let skip = path.join("Cargo.toml").exists()
                || (package_root
                    && ["tests", "benches", "examples", "target"]
                        .iter()
                        .any(|n| name == *n));
            if !skip {
                walk(&path, false, out)?;
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && !(package_root && path.file_name().is_some_and(|n| n == "build.rs"))
        {
            out.push(path);
        }
    }
    Ok(())
}

/// The skip globs, and a key that changes with them.
struct Skips(Vec<WildMatch>, String);

impl Skips {
    fn new(globs: &[String]) -> Skips {
        Skips(
            globs.iter().map(|g| WildMatch::new(g)).collect(),
            globs.join(","),
        )
    }
}

/// One tree to copy: what to instrument in it, which manifests get fgtrace.
struct Plan<'a> {
    rust: BTreeMap<PathBuf, String>,
    fgtrace_manifests: Vec<PathBuf>,
    from: &'a Path,
    own_workspace: bool,
    fgtrace: &'a Path,
    skips: &'a std::sync::Arc<Skips>,
}

impl Plan<'_> {
    fn edit(&self, rel: &Path) -> Option<Edit> {
        if rel.file_name().is_some_and(|n| n == "Cargo.toml") {
            let m = ManifestEdit {
                dir: self.from.join(rel.parent().unwrap_or(Path::new(""))),
                root: self.from.to_path_buf(),
                fgtrace: self
                    .fgtrace_manifests
                    .iter()
                    .any(|f| f == rel)
                    .then(|| self.fgtrace.to_path_buf()),
                own_workspace: self.own_workspace && rel == Path::new("Cargo.toml"),
            };
            return Some(Edit {
                key: m.key(),
                apply: Box::new(move |t| m.apply(t)),
            });
        }
        let module = self.rust.get(rel)?.clone();
        let skips = self.skips.clone();
        Some(Edit {
            key: format!("instrument {module} skip {}", skips.1),
            apply: Box::new(move |text| {
                let skip = |p: &str| skips.0.iter().any(|g| g.matches(p));
                fgtrace_instrument::instrument_source(text, &module, &skip)
                    .map(|(out, _)| out)
                    .map_err(|e| {
                        let at = e.span().start();
                        format!(
                            "{}:{}: does not parse as a module: {e}",
                            at.line,
                            at.column + 1
                        )
                    })
            }),
        })
    }
}

fn sync(plan: &Plan, to: &Path, stamp: PathBuf, skip_dirs: Vec<PathBuf>) -> Result<(), String> {
    let edit = |rel: &Path| plan.edit(rel);
    let done = tree::sync(&Tree {
        from: plan.from,
        to,
        stamp,
        skip_dirs,
        edit: &edit,
        keep: vec![PathBuf::from("Cargo.lock")],
    })?;
    for (rel, why) in &done.failed {
        // A file `include!`d as an expression, say: left as it is.
        eprintln!(
            "cargo fgtrace: {}: left as it is: {why}",
            plan.from.join(rel).display()
        );
    }
    Ok(())
}

/// The key of `[patch.KEY]` for a package from `source`.
fn patch_source(source: &str) -> Option<String> {
    if source == "registry+https://github.com/rust-lang/crates.io-index"
        || source == "sparse+https://index.crates.io/"
    {
        return Some("crates-io".into());
    }
    if let Some(url) = source.strip_prefix("registry+") {
        return Some(url.into());
    }
    if source.starts_with("sparse+") {
        return Some(source.into());
    }
    let url = source.strip_prefix("git+")?;
    Some(url.split(['?', '#']).next().unwrap_or(url).to_string())
}

/// The names of the packages the `fgtrace` package at `dir` is built from
/// in a crate that only depends on it (as an instrumented copy does),
/// resolved in a manifest of its own under `work`.
fn fgtrace_dependencies(
    cargo: &str,
    dir: &Path,
    work: &Path,
    extra: &[String],
) -> Result<Vec<String>, String> {
    let manifest = work.join("Cargo.toml");
    let text = format!(
        "[package]\nname = \"fgtrace-dependencies\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
         [lib]\npath = \"lib.rs\"\n\n[dependencies]\nfgtrace = {{ path = {} }}\n\n[workspace]\n",
        toml_str(&dir.display().to_string())
    );
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    tree::write_if_changed(&manifest, text.as_bytes()).map_err(|e| io(&manifest, e))?;
    let lib = work.join("lib.rs");
    tree::write_if_changed(&lib, b"").map_err(|e| io(&lib, e))?;
    let m = metadata::read(cargo, Some(&manifest), false, extra)?;
    let me = m
        .packages
        .iter()
        .find(|p| p.name == "fgtrace" && p.source.is_none())
        .ok_or("fgtrace is not in the graph of a crate that depends on it")?;
    let ids = m.closure(&me.id);
    Ok(m.packages
        .iter()
        .filter(|p| p.id != me.id && ids.contains(&p.id))
        .map(|p| p.name.clone())
        .collect())
}

/// `dir/name.ext` for `dir/name` (names hold dots: `regex-1.13.2`).
fn beside(p: &Path, ext: &str) -> PathBuf {
    let name = p.file_name().unwrap_or_default().to_string_lossy();
    p.with_file_name(format!("{name}.{ext}"))
}

/// Notes beside a directory of copies (`COPIES.from`) where they come
/// from, for the path remaps of later runs.
fn remember_origin(copies: &Path, from: &Path) -> Result<(), String> {
    let note = beside(copies, "from");
    tree::write_if_changed(&note, from.display().to_string().as_bytes())
        .map(|_| ())
        .map_err(|e| format!("{}: {e}", note.display()))
}

/// Every directory of copies under `crates` (and `crates/git`), with its
/// origin, in a stable order.
fn origins(crates: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut found = Vec::new();
    for dir in [crates.to_path_buf(), crates.join("git")] {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(copies) = name.strip_suffix(".from") {
                if let Ok(from) = std::fs::read_to_string(&p) {
                    found.push((dir.join(copies), PathBuf::from(from)));
                }
            }
        }
    }
    found.sort();
    found
}

/// A TOML string.
fn toml_str(s: &str) -> String {
    toml_edit::Value::from(s).to_string().trim().to_string()
}

/// Copies and instruments, and says how to build.
pub fn prepare(args: &CargoArgs, sel: &Selection) -> Result<Prepared, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let fgtrace = fgtrace_source()?;
    let offline: Vec<String> = if args.offline() {
        vec!["--offline".into()]
    } else {
        vec![]
    };
    let user_manifest = user_manifest(args)?;
    let ws: Metadata = metadata::read(&cargo, Some(&user_manifest), true, &offline)?;
    let root = ws.root.clone();
    let dir = ws.target_dir.join("fgtrace");
    let ws_copy = dir.join("ws");
    let manifest = ws_copy.join(user_manifest.strip_prefix(&root).map_err(|_| {
        format!(
            "{} is not in its workspace {}",
            user_manifest.display(),
            root.display()
        )
    })?);

    // Workspace members by name; the other names are dependencies.
    let mut chosen_members: Vec<&Package> = Vec::new();
    let mut wanted_deps: Vec<&String> = Vec::new();
    if sel.crates.is_empty() {
        chosen_members.extend(ws.members().filter(|p| !p.is_proc_macro()));
    }
    for name in sel.crates {
        let m: Vec<&Package> = ws
            .members()
            .filter(|p| metadata::same_name(&p.name, name))
            .collect();
        if m.is_empty() {
            wanted_deps.push(name);
        }
        for p in m {
            if p.is_proc_macro() {
                return Err(format!(
                    "--crate {name}: {} is a proc-macro crate: it runs inside the compiler, \
                     where nothing is traced",
                    p.label()
                ));
            }
            chosen_members.push(p);
        }
    }

    let skips = std::sync::Arc::new(Skips::new(sel.skip));
    let mut instrumented = Vec::new();
    let mut plan = Plan {
        rust: BTreeMap::new(),
        fgtrace_manifests: Vec::new(),
        from: &root,
        own_workspace: true,
        fgtrace: &fgtrace,
        skips: &skips,
    };
    for p in &chosen_members {
        let (files, src_dirs) = rust_files_of(p, &root);
        plan.rust.extend(files);
        let rel = p.dir().strip_prefix(&root).unwrap_or(Path::new(""));
        plan.fgtrace_manifests.push(rel.join("Cargo.toml"));
        instrumented.push(Instrumented {
            name: p.name.clone(),
            label: p.label(),
            krate: p.crate_name(),
            orig_dir: p.dir().to_path_buf(),
            copy_dir: ws_copy.join(rel),
            src_dirs,
        });
    }
    sync(
        &plan,
        &ws_copy,
        dir.join("ws.stamp"),
        vec![ws.target_dir.clone()],
    )?;

    // The dependency graph, resolved in the copy (its lock, not the user's).
    let mut patches: Vec<String> = Vec::new();
    let mut remaps = vec![(ws_copy.clone(), root.clone())];
    if !wanted_deps.is_empty() {
        let full = metadata::read(&cargo, Some(&manifest), false, &offline)?;
        // What fgtrace itself is built from cannot depend on fgtrace. Told
        // by name: another major version of such a crate would do, but the
        // user's graph, where fgtrace is not yet, cannot tell which.
        let fgtrace_deps = fgtrace_dependencies(
            &cargo,
            &fgtrace,
            &dir.join("fgtrace-dependencies"),
            &offline,
        )?;
        let mut found: Vec<&Package> = Vec::new();
        for name in &wanted_deps {
            let all: Vec<&Package> = full
                .packages
                .iter()
                .filter(|p| metadata::same_name(&p.name, name))
                .collect();
            if all.is_empty() {
                return Err(format!(
                    "--crate {name}: the build does not depend on a package `{name}` \
                     (`cargo tree` shows what it depends on)"
                ));
            }
            for p in all {
                if p.is_proc_macro() {
                    return Err(format!(
                        "--crate {name}: {} is a proc-macro crate: it runs inside the \
                         compiler, where nothing is traced",
                        p.label()
                    ));
                }
                if fgtrace_deps.iter().any(|d| d == &p.name) {
                    return Err(format!(
                        "--crate {name}: fgtrace itself is built with {}, so that crate \
                         cannot be traced (its instrumented copy would depend on fgtrace: \
                         a cycle)",
                        p.label()
                    ));
                }
                if p.source.is_none() {
                    return Err(format!(
                        "--crate {name}: {} is a path dependency outside the workspace \
                         ({}); cargo fgtrace instruments workspace members and dependencies \
                         from a registry or git",
                        p.label(),
                        p.dir().display()
                    ));
                }
                found.push(p);
            }
        }
        let mut versions: HashMap<(String, String), usize> = HashMap::new();
        for p in &found {
            let key = (p.source.clone().unwrap_or_default(), p.name.clone());
            *versions.entry(key).or_default() += 1;
        }
        for p in found {
            let source = p.source.as_deref().unwrap_or_default();
            let Some(patch) = patch_source(source) else {
                return Err(format!(
                    "--crate {}: {} comes from `{source}`, which cargo cannot patch",
                    p.name,
                    p.label()
                ));
            };
            // A git checkout is copied whole: its members inherit keys from
            // its workspace.
            let tree_root = if source.starts_with("git+") {
                p.dir()
                    .ancestors()
                    .find(|a| {
                        a.parent()
                            .and_then(Path::parent)
                            .and_then(Path::file_name)
                            .is_some_and(|n| n == "checkouts")
                    })
                    .unwrap_or(p.dir())
                    .to_path_buf()
            } else {
                p.dir().to_path_buf()
            };
            // Named as in cargo's own directory, so that one path remap
            // covers every crate of a registry: the flags stay the same
            // when the choice of crates changes, and so does what cargo
            // built with them.
            let (copy_root, origin) = if source.starts_with("git+") {
                let name = tree_root.file_name().unwrap_or_default().to_string_lossy();
                let checkout = tree_root
                    .parent()
                    .and_then(Path::file_name)
                    .unwrap_or_default()
                    .to_string_lossy();
                let root = dir.join("crates/git").join(format!("{checkout}-{name}"));
                (root.clone(), (root, tree_root.clone()))
            } else {
                let registry = tree_root.parent().unwrap_or(&tree_root);
                let name = registry.file_name().unwrap_or_default().to_string_lossy();
                let copies = dir.join("crates").join(&*name);
                (
                    copies.join(tree_root.file_name().unwrap_or_default()),
                    (copies, registry.to_path_buf()),
                )
            };
            remember_origin(&origin.0, &origin.1)?;
            let rel = p.dir().strip_prefix(&tree_root).unwrap_or(Path::new(""));
            let (files, src_dirs) = rust_files_of(p, &tree_root);
            let plan = Plan {
                rust: files,
                fgtrace_manifests: vec![rel.join("Cargo.toml")],
                from: &tree_root,
                own_workspace: false,
                fgtrace: &fgtrace,
                skips: &skips,
            };
            let stamp = beside(&copy_root, "stamp");
            sync(&plan, &copy_root, stamp, vec![])?;
            let copy_dir = copy_root.join(rel);
            let entry = if versions[&(source.to_string(), p.name.clone())] > 1 {
                format!("{}-fgtrace-{}", p.name, p.version)
            } else {
                p.name.clone()
            };
            let at = format!("patch.{}.{}", toml_str(&patch), toml_str(&entry));
            patches.push(format!(
                "{at}.path={}",
                toml_str(&copy_dir.display().to_string())
            ));
            if entry != p.name {
                patches.push(format!("{at}.package={}", toml_str(&p.name)));
            }
            instrumented.push(Instrumented {
                name: p.name.clone(),
                label: p.label(),
                krate: p.crate_name(),
                orig_dir: p.dir().to_path_buf(),
                copy_dir,
                src_dirs,
            });
        }
    }

    let mut globals = Vec::new();
    for p in &patches {
        globals.push("--config".into());
        globals.push(p.clone());
    }
    if args.locked() {
        // The copy's lock takes fgtrace and the patches now, so that the
        // user's `--locked` build finds it up to date.
        metadata::read(
            &cargo,
            Some(&manifest),
            false,
            &[globals.clone(), offline.clone()].concat(),
        )?;
    }
    let mut flags = vec!["-C".to_string(), "force-frame-pointers=yes".to_string()];
    remaps.extend(origins(&dir.join("crates")));
    for (copy, orig) in &remaps {
        flags.push(format!(
            "--remap-path-prefix={}={}",
            copy.display(),
            orig.display()
        ));
    }
    // Where cargo builds: beside the copies, or a directory several
    // projects share (fgtrace and its dependencies are then built once).
    let target = std::env::var_os("CARGO_FGTRACE_TARGET_DIR")
        .map_or_else(|| dir.join("target"), PathBuf::from);
    let mut env = vec![("CARGO_TARGET_DIR".to_string(), target.display().to_string())];
    // RUSTFLAGS in the environment outranks `build.rustflags`: add to it then.
    let from_env = match (
        std::env::var("CARGO_ENCODED_RUSTFLAGS"),
        std::env::var("RUSTFLAGS"),
    ) {
        (Ok(e), _) => Some(e.split('\x1f').map(String::from).collect::<Vec<_>>()),
        (_, Ok(r)) => Some(r.split_whitespace().map(String::from).collect()),
        _ => None,
    };
    if let Some(mut user) = from_env {
        user.retain(|f| !f.is_empty());
        user.extend(flags);
        env.push(("CARGO_ENCODED_RUSTFLAGS".into(), user.join("\x1f")));
    } else {
        let list: Vec<String> = flags.iter().map(|f| toml_str(f)).collect();
        globals.push("--config".into());
        globals.push(format!("build.rustflags=[{}]", list.join(",")));
    }
    let root_manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    for profile in ["release", "bench"] {
        if !manifest::sets_profile_debug(&root_manifest, profile) {
            globals.push("--config".into());
            globals.push(format!("profile.{profile}.debug=\"line-tables-only\""));
        }
    }
    Ok(Prepared {
        cargo,
        globals,
        env,
        manifest,
        dir,
        ws_copy,
        instrumented,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_keys_name_the_source() {
        let crates_io = "registry+https://github.com/rust-lang/crates.io-index";
        assert_eq!(patch_source(crates_io).as_deref(), Some("crates-io"));
        assert_eq!(
            patch_source("sparse+https://index.crates.io/").as_deref(),
            Some("crates-io")
        );
        assert_eq!(
            patch_source("git+https://github.com/a/b?branch=main#0123abc").as_deref(),
            Some("https://github.com/a/b")
        );
        assert_eq!(toml_str("a\"b"), "'a\"b'");
    }
}
