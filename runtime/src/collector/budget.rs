//! The size budget of the file a session writes while it records, and the
//! end of a full file system: in both, the file is completed where it
//! stops (its last sections, the final metadata and the footer) and the
//! calls after are counted, per thread, as lost.
//!
//! The file is flushed whole at marks (at most [`MARK_EVERY`] apart, and
//! whenever the collector idles). A write that fails because the file
//! system is full cuts the file back to the last mark, so it ends on a
//! complete section; the calls of the raw chunks written since are counted
//! as lost. On Linux each mark also reserves room past the file's end for
//! its completion (`fallocate` keeping the size): a file system that has
//! no room for that reserve ends the recording there, before a write fails.

use super::gathered::Output;
use fgtrace_core::record::{kind, RawCall};
use fgtrace_trace::file::Mark;
use fgtrace_trace::CutReason;
use std::io::{Seek, SeekFrom};

/// Bytes written between two marks at most.
pub(super) const MARK_EVERY: u64 = 256 << 10;

/// What a file's budget keeps track of.
#[derive(Default)]
pub(super) struct Budget {
    /// The most the file may take (`None`: no limit); with a pool, what
    /// it claimed of it so far.
    pub(super) limit: Option<u64>,
    /// The budget this file shares with the other recordings of its
    /// directory, if it does.
    pub(super) pool: Option<super::pool::Pool>,
    /// Where the file was last flushed whole, and the sites, strings and
    /// threads announced up to there.
    mark: (Mark, usize, usize, usize),
    /// Calls of the raw chunks written since the mark: (thread, calls).
    pending: Vec<(u32, u64)>,
    /// Where calls stopped being kept: why, and when (ticks).
    pub(super) cut: Option<(CutReason, u64)>,
    /// Calls not kept after the cut, by thread index.
    pub(super) lost_after: Vec<u64>,
    /// Calls the encoder counted (in its thread's calls) that the file
    /// does not keep, by thread index.
    pub(super) encoded_lost: Vec<u64>,
    /// Samples not kept after the cut.
    pub(super) samples_after: u64,
    /// Bytes of the sections the final metadata repeats (sites, strings,
    /// threads, off-CPU time): what its size is estimated from.
    pub(super) repeated: u64,
}

/// The calls among `recs`, as the encoder counts them: calls and polls,
/// not the zero-length records of instant markers (nor extension records,
/// loss markers, whole futures).
pub(super) fn calls_in(recs: &[RawCall]) -> u64 {
    let marker = |n: usize| {
        recs.get(n + 1)
            .is_some_and(|x| x.is_ext() && x.ext_sub() == fgtrace_core::record::ext::MARKER)
    };
    recs.iter()
        .enumerate()
        .filter(|&(n, r)| {
            !r.is_ext() && (r.kind() == kind::CALL || r.kind() == kind::POLL) && !marker(n)
        })
        .count() as u64
}

/// Whether `e` says the file system (or the user's quota, or the file
/// size limit) has no room left.
pub(super) fn is_full(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG)
    )
}

impl Budget {
    pub(super) fn new(limit: Option<u64>, start: Mark) -> Budget {
        Budget {
            limit,
            mark: (start, 0, 0, 0),
            ..Default::default()
        }
    }

    /// Counts `calls` of thread `t` as lost after the cut.
    pub(super) fn lose(&mut self, t: u32, calls: u64) {
        let t = t as usize;
        if self.lost_after.len() <= t {
            self.lost_after.resize(t + 1, 0);
        }
        self.lost_after[t] = self.lost_after[t].saturating_add(calls);
    }

    /// Counts `calls` of thread `t`, already counted by its encoder, as lost.
    pub(super) fn lose_encoded(&mut self, t: u32, calls: u64) {
        self.lose(t, calls);
        let t = t as usize;
        if self.encoded_lost.len() <= t {
            self.encoded_lost.resize(t + 1, 0);
        }
        self.encoded_lost[t] = self.encoded_lost[t].saturating_add(calls);
    }

    /// What completing the file will take at most: the final metadata
    /// (estimated from the sections it repeats, a few hundred bytes per
    /// thread, 16 KiB for the rest: the clock, the filters, a sampled
    /// process's mappings), the loss markers, the end and the footer.
    pub(super) fn finish_reserve(&self, threads: usize) -> u64 {
        (16 << 10) + self.repeated.saturating_mul(3) + 512 * threads as u64
    }

    pub(super) fn total_lost(&self) -> u64 {
        self.lost_after.iter().sum()
    }
}

impl Output {
    /// Whether `bytes` more fit the budget, with the file's completion
    /// (claiming more of a shared budget where needed).
    pub(super) fn room_for(&mut self, bytes: u64) -> bool {
        let Some(l) = self.budget.limit else {
            return true;
        };
        let need = self.w.written + bytes + self.budget.finish_reserve(self.threads_written);
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
        threads: &mut [super::gathered::Gathering],
        origin: u64,
        sites: &mut fgtrace_trace::recorded::SiteMap,
    ) {
        let Some((_, at)) = self.budget.cut else {
            return;
        };
        let mut r = Ok(());
        for (i, &n) in self.budget.lost_after.iter().enumerate() {
            if n == 0 || i >= threads.len() || r.is_err() {
                continue;
            }
            let rec = RawCall::pack(at, 0, n, 0, false, kind::LOST);
            let c = threads[i].enc.encode(
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

/// Releases the room reserved past the end of a completed file.
pub(super) fn release(f: &std::fs::File) {
    if let Ok(m) = f.metadata() {
        // Blocks allocated past the size go with a truncation below them:
        // the file grows by a byte and shrinks back.
        let n = m.len();
        let _ = f.set_len(n + 1).and_then(|_| f.set_len(n));
    }
}
