//! One size budget shared by every recording into a directory (the
//! processes `FGTRACE_RECORD` records, `fgtrace record --dir`): a file there,
//! [`POOL_FILE`], says the budget and what each trace file has claimed of
//! it. Recordings claim room in grants as they write and give back what
//! they did not use when they end; a trace file that was deleted frees its
//! claim. The file is read and rewritten under an exclusive `flock`, so the
//! claims of all processes together never pass the budget.

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

pub(super) struct Pool {
    file: std::fs::File,
    dir: PathBuf,
    /// This recording's trace file name, as the pool names it.
    name: String,
    /// What this recording holds of the pool.
    pub(super) claimed: u64,
    /// The pool's budget.
    pub(super) total: u64,
    /// The most this recording claims (a ring: see [`Pool::cap_at_half`]).
    cap: u64,
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
            cap: u64::MAX,
        };
        p.update(|_, _| 0)?;
        Ok(p)
    }

    /// Caps this recording's claims at half of what the pool has free now:
    /// a ring would otherwise claim the whole pool before it starts
    /// dropping its oldest calls, and the processes after it (the run's
    /// end) would find no room.
    pub(super) fn cap_at_half(&mut self) {
        let mut cap = u64::MAX;
        let _ = self.update(|mine, free| {
            cap = (mine + free) / 2;
            mine
        });
        self.cap = cap;
    }

    /// Claims `want` more bytes, or what is left (up to the cap); returns
    /// what was granted.
    pub(super) fn claim(&mut self, want: u64) -> u64 {
        let before = self.claimed;
        let want = want.max(GRANT);
        let cap = self.cap;
        self.update(|mine, free| (mine + want.min(free)).min(cap.max(mine)))
            .map_or(0, |now| now.saturating_sub(before))
    }

    /// Keeps `used` bytes of the claim and gives the rest back.
    pub(super) fn settle(&mut self, used: u64) {
        let _ = self.update(|_, _| used);
    }

    /// Under the lock: reads the pool, sets this recording's claim to
    /// `f(claim, free)` and writes it back. Returns the new claim.
    fn update(&mut self, f: impl FnOnce(u64, u64) -> u64) -> std::io::Result<u64> {
        let lock = Lock::take(&self.file)?;
        let mut text = String::new();
        (&self.file).seek(SeekFrom::Start(0))?;
        (&self.file).read_to_string(&mut text)?;
        let mut total = self.total;
        let mut others = Vec::new();
        for line in text.lines() {
            let mut w = line.rsplitn(2, ' ');
            let (Some(n), Some(key)) = (w.next().and_then(|n| n.parse::<u64>().ok()), w.next())
            else {
                continue;
            };
            if key == "budget" {
                total = n;
            } else if key != self.name && self.dir.join(key).exists() {
                // A claim counts while its trace file is there.
                others.push((key.to_string(), n));
            }
        }
        let used: u64 = others.iter().map(|o| o.1).sum();
        let free = total.saturating_sub(used).saturating_sub(self.claimed);
        let mine = f(self.claimed, free).min(total.saturating_sub(used));
        let mut out = format!("budget {total}\n");
        for (k, n) in &others {
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
    /// A recording that ends keeps what its file takes (with a ring's
    /// segment kept beside it) and gives the rest back.
    fn drop(&mut self) {
        let path = self.dir.join(&self.name);
        let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let used = len(&path) + len(&beside(&path, ".prev"));
        self.settle(used);
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
