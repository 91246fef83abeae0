//! The file a session writes while it records: its writer, what it has
//! announced, and its size budget at work (see [`budget`](super::budget)).

use super::budget::{is_full, MARK_EVERY};
use fgtrace_core::record::{kind, RawCall};
use fgtrace_trace::file::RecordingWriter;
use fgtrace_trace::recorded::{RawEncoder, SiteMap};
use fgtrace_trace::CutReason;
use std::io::{Seek, SeekFrom};
use std::path::PathBuf;

/// The file a session writes while it records.
pub(super) struct Output {
    pub(super) w: RecordingWriter<std::io::BufWriter<std::fs::File>>,
    pub(super) path: PathBuf,
    pub(super) sites_written: usize,
    /// String table entries written so far.
    pub(super) strings_written: usize,
    pub(super) threads_written: usize,
    /// The first write that failed; nothing is written after it.
    pub(super) error: Option<String>,
    pub(super) dirty: bool,
    /// The size budget, and where calls stopped being kept.
    pub(super) budget: super::budget::Budget,
    /// The provisional header, which each new segment of a ring starts with.
    pub(super) header: fgtrace_trace::TraceMeta,
}

impl Output {
    pub(super) fn check(&mut self, r: std::io::Result<()>) {
        if let Err(e) = r {
            // A full file system ends the file at its last mark, complete.
            if self.error.is_none() && is_full(&e) && self.cut_back() {
                return;
            }
            if self.error.is_none() {
                self.error = Some(format!(
                    "writing {} failed after {} bytes: {e}",
                    self.path.display(),
                    self.w.written
                ));
            }
        }
    }
}

impl Output {
    /// Whether `bytes` more fit the budget, with the file's completion
    /// (claiming more of a shared budget where needed).
    pub(super) fn room_for(&mut self, bytes: u64) -> bool {
        let Some(l) = self.budget.limit else {
            return true;
        };
        // A ring's segment gets half of what the completion leaves: the one
        // before (flushed, never completed) takes the other half.
        let data = (self.w.written + bytes).saturating_mul(if self.budget.ring { 2 } else { 1 });
        let need = data + self.budget.finish_reserve(self.threads_written);
        if need <= l {
            return true;
        }
        match &mut self.budget.pool {
            Some(p) => {
                p.claim(need - l);
                self.budget.limit = Some(p.claimed);
                need <= p.claimed
            }
            None => false,
        }
    }

    /// The budget to name: the shared one, or the file's.
    pub(super) fn shown_limit(&self) -> Option<u64> {
        match &self.budget.pool {
            Some(p) => Some(p.total),
            None => self.budget.limit,
        }
    }

    /// Stops keeping calls from now on (`at`: ticks), saying so once.
    pub(super) fn cut(&mut self, why: CutReason, at: u64) {
        if self.budget.cut.is_some() {
            return;
        }
        self.budget.cut = Some((why, at));
        let what = match (why, self.shown_limit()) {
            (CutReason::Budget, Some(l)) => format!(
                "reached {} size budget of {} (FGTRACE_MAX_SIZE, --max-size)",
                if self.budget.pool.is_some() {
                    "the recording's shared"
                } else {
                    "its"
                },
                fgtrace_trace::size_text(l)
            ),
            _ => "met a full file system".to_string(),
        };
        eprintln!(
            "fgtrace: {} {what}: it ends there, complete; later calls are counted as lost, not kept",
            self.path.display()
        );
    }

    /// A raw chunk of `calls` calls of thread `t` was written.
    pub(super) fn wrote_calls(&mut self, t: u32, calls: u64) {
        self.budget.pending.push((t, calls));
        if self.w.written - self.budget.mark.0.written >= MARK_EVERY {
            self.mark();
        }
    }

    /// Flushes the file whole and takes the mark there (reserving room for
    /// the completion past it).
    pub(super) fn mark(&mut self) {
        if self.error.is_some() {
            return;
        }
        let r = self.w.flush();
        if r.is_err() {
            self.check(r);
            return;
        }
        self.budget.mark = (
            self.w.mark(),
            self.sites_written,
            self.strings_written,
            self.threads_written,
        );
        self.budget.pending.clear();
        self.dirty = false;
        if self.budget.cut.is_none() {
            self.reserve();
        }
    }

    /// Reserves the completion's room past the mark. A file system without
    /// it ends the recording now, while the completion still fits.
    #[cfg(target_os = "linux")]
    fn reserve(&mut self) {
        use std::os::unix::io::AsRawFd;
        let at = self.w.written;
        let mut len = self.budget.finish_reserve(self.threads_written) + MARK_EVERY;
        if let Some(l) = self.budget.limit {
            len = len.min(l.saturating_sub(at));
        }
        if len == 0 {
            return;
        }
        let fd = self.w.get_mut().get_ref().as_raw_fd();
        // SAFETY: allocates blocks of our own open file; the size stays.
        let r = unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_KEEP_SIZE,
                at as libc::off_t,
                len as libc::off_t,
            )
        };
        if r != 0 && is_full(&std::io::Error::last_os_error()) {
            self.cut(
                CutReason::DiskFull,
                fgtrace_trace::clock::ClockPoint::now().ticks,
            );
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn reserve(&mut self) {}

    /// After a write found the file system full: cuts the file back to the
    /// last mark (a complete section), counts the calls written since as
    /// lost, and stops keeping calls. `false` where the file cannot be cut
    /// back (then the write error stands).
    pub(super) fn cut_back(&mut self) -> bool {
        let (m, sites, strings, threads) = self.budget.mark;
        let f = match self.w.get_mut().get_ref().try_clone() {
            Ok(f) => f,
            Err(_) => return false,
        };
        if f.set_len(m.written).is_err() || (&f).seek(SeekFrom::Start(m.written)).is_err() {
            return false;
        }
        let old = self
            .w
            .rewind(m, std::io::BufWriter::with_capacity(1 << 16, f));
        // What the old writer still buffers was after the mark: dropped
        // unwritten.
        let _ = old.into_parts();
        self.sites_written = sites;
        self.strings_written = strings;
        self.threads_written = threads;
        for (t, n) in std::mem::take(&mut self.budget.pending) {
            self.budget.lose_encoded(t, n);
        }
        self.cut(
            CutReason::DiskFull,
            fgtrace_trace::clock::ClockPoint::now().ticks,
        );
        true
    }

    /// Writes one loss marker per thread that lost calls after the cut, at
    /// the cut's time, so every view shows the gap where it is.
    pub(super) fn write_loss_markers(
        &mut self,
        mut encoders: Vec<&mut RawEncoder>,
        origin: u64,
        sites: &mut SiteMap,
    ) {
        let Some((_, at)) = self.budget.cut else {
            return;
        };
        let mut r = Ok(());
        for (i, &n) in self.budget.lost_after.iter().enumerate() {
            if n == 0 || i >= encoders.len() || r.is_err() {
                continue;
            }
            let rec = RawCall::pack(at, 0, n, 0, false, kind::LOST);
            let c = encoders[i].encode(
                i as u32,
                &[rec],
                origin,
                sites,
                &fgtrace_trace::build::registered_site,
            );
            r = self.w.raw(&c);
        }
        self.check(r);
    }
}
