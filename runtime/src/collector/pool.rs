//! One size budget shared by every recording into a directory (the
//! processes `FGTRACE_RECORD` records, `fgtrace record --dir`): a file there,
//! [`POOL_FILE`], says the budget and what each trace file has claimed of
//! it. Recordings claim room in grants as they write and give back what
//! they did not use when they end; a trace file that was deleted frees its
//! claim. The file is read and rewritten under an exclusive `flock`, so the
//! claims of all processes together never pass the budget.
//!
//! A ring (`--on-full ring`) claims as it writes too, so a lone process
//! gets the whole budget. When it ends, its older segment (`FILE.prev`)
//! gets a claim of its own, which a later recording short of room may take:
//! it removes that file, the oldest such first. The ring's `FILE` stays
//! whole and counts the calls before it as overwritten, so the recording
//! as a whole keeps its last calls, the last process's included.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// `path` with `suffix` appended to its file name (a ring's `FILE.prev`).
pub(super) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The pool's file in the recording directory.
pub const POOL_FILE: &str = ".fgtrace-budget";

/// The least a recording claims at a time.
const GRANT: u64 = 1 << 20;

/// What a pool update does to this recording's claim.
enum Change {
    /// Nothing (joining).
    Keep,
    /// At least `need` more bytes if the pool has them (taking finished
    /// rings' older segments if it must), up to `want`.
    More { need: u64, want: u64 },
    /// The recording ended: its file keeps `file` bytes, and its older
    /// segment, if it has one, `prev` bytes that later recordings may take.
    Settle { file: u64, prev: u64 },
}

pub(super) struct Pool {
    file: std::fs::File,
    dir: PathBuf,
    /// This recording's trace file name, as the pool names it.
    name: String,
    /// What this recording holds of the pool.
    pub(super) claimed: u64,
    /// The pool's budget.
    pub(super) total: u64,
}

impl Pool {
    /// Joins (or starts, with `total`) the pool of the directory of `path`.
    pub(super) fn join(path: &Path, total: u64) -> std::io::Result<Pool> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(POOL_FILE))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut p = Pool {
            file,
            dir,
            name,
            claimed: 0,
            total,
        };
        p.update(Change::Keep)?;
        Ok(p)
    }

    /// Claims `need` more bytes (at least a grant where the pool has it),
    /// or what is left; returns what was granted.
    pub(super) fn claim(&mut self, need: u64) -> u64 {
        let before = self.claimed;
        self.update(Change::More {
            need,
            want: need.max(GRANT),
        })
        .map_or(0, |now| now.saturating_sub(before))
    }

    /// Under the lock: reads the pool, changes this recording's claim and
    /// writes it back. Returns the new claim.
    fn update(&mut self, change: Change) -> std::io::Result<u64> {
        let lock = Lock::take(&self.file)?;
        let mut text = String::new();
        (&self.file).seek(SeekFrom::Start(0))?;
        (&self.file).read_to_string(&mut text)?;
        let mut total = self.total;
        let mut others: Vec<(String, u64)> = Vec::new();
        let prev_name = format!("{}.prev", self.name);
        for line in text.lines() {
            let mut w = line.rsplitn(2, ' ');
            let (Some(n), Some(key)) = (w.next().and_then(|n| n.parse::<u64>().ok()), w.next())
            else {
                continue;
            };
            if key == "budget" {
                total = n;
            } else if key != self.name && key != prev_name && self.dir.join(key).exists() {
                // A claim counts while its trace file is there. This
                // recording's older segment is in its own claim.
                others.push((key.to_string(), n));
            }
        }
        let used = |o: &[(String, u64)]| o.iter().map(|o| o.1).sum::<u64>();
        let free =
            |o: &[(String, u64)], mine: u64| total.saturating_sub(used(o)).saturating_sub(mine);
        let mut extra = Vec::new();
        let mine = match change {
            Change::Keep => self.claimed,
            Change::More { need, want } => {
                // The older segments of finished rings, oldest first, give
                // way where the pool has no room otherwise.
                while free(&others, self.claimed) < need {
                    let Some(i) = others.iter().position(|(k, _)| {
                        k.strip_suffix(".prev")
                            .is_some_and(|f| others.iter().any(|(o, _)| o == f))
                    }) else {
                        break;
                    };
                    let (k, n) = others.remove(i);
                    let path = self.dir.join(&k);
                    match std::fs::remove_file(&path) {
                        Ok(()) => eprintln!(
                            "fgtrace: removed {} ({} bytes, the older segment of a finished ring recording) to make room in the recording's shared size budget",
                            path.display(),
                            n
                        ),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(_) => {
                            // Still there: still counted.
                            others.push((k, n));
                            break;
                        }
                    }
                }
                self.claimed + want.min(free(&others, self.claimed))
            }
            Change::Settle { file, prev } => {
                if prev > 0 {
                    extra.push((prev_name.clone(), prev));
                }
                file
            }
        };
        let mine = mine.min(
            total
                .saturating_sub(used(&others))
                .saturating_sub(used(&extra)),
        );
        let mut out = format!("budget {total}\n");
        for (k, n) in others.iter().chain(&extra) {
            out += &format!("{k} {n}\n");
        }
        out += &format!("{} {mine}\n", self.name);
        (&self.file).seek(SeekFrom::Start(0))?;
        self.file.set_len(0)?;
        (&self.file).write_all(out.as_bytes())?;
        drop(lock);
        self.total = total;
        self.claimed = mine;
        Ok(mine)
    }
}

impl Drop for Pool {
    /// A recording that ends keeps what its file takes, and gives the rest
    /// back; a ring's older segment beside it gets a claim of its own.
    fn drop(&mut self) {
        let path = self.dir.join(&self.name);
        let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let _ = self.update(Change::Settle {
            file: len(&path),
            prev: len(&beside(&path, ".prev")),
        });
    }
}

/// An exclusive `flock` on the pool's file, released on drop. Elsewhere
/// than on Unix it takes no lock: processes that claim space at the same
/// instant may each see the same remainder (the recording command only
/// runs on Unix, so there it is `FGTRACE_RECORD` alone).
struct Lock<'a>(#[cfg_attr(not(unix), allow(dead_code))] &'a std::fs::File);

impl<'a> Lock<'a> {
    #[cfg(unix)]
    fn take(f: &'a std::fs::File) -> std::io::Result<Lock<'a>> {
        use std::os::unix::io::AsRawFd;
        // SAFETY: locks our own open file.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Lock(f))
    }

    #[cfg(not(unix))]
    fn take(f: &'a std::fs::File) -> std::io::Result<Lock<'a>> {
        Ok(Lock(f))
    }
}

impl Drop for Lock<'_> {
    fn drop(&mut self) {
        #[cfg(unix)]
        {
            use std::os::unix::io::AsRawFd;
            // SAFETY: unlocks our own open file.
            unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
        }
    }
}
