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

use fgtrace_core::record::{kind, RawCall};
use fgtrace_trace::file::Mark;
use fgtrace_trace::CutReason;

/// Bytes written between two marks at most.
pub(super) const MARK_EVERY: u64 = 256 << 10;

/// What an announced thread takes of the file's completion: its loss
/// marker and its entry in the final metadata (its name aside).
pub(super) const THREAD_ROOM: u64 = 512;

/// What listing a thread not announced yet takes of the file: its
/// announcement, and its share of the completion ([`THREAD_ROOM`]); the
/// name is written twice, in the announcement and in the final metadata.
pub(super) fn thread_room(name: &str) -> u64 {
    64 + THREAD_ROOM + 2 * name.len() as u64
}

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
    pub(super) mark: (Mark, usize, usize, usize),
    /// Calls of the raw chunks written since the mark: (thread, calls).
    pub(super) pending: Vec<(u32, u64)>,
    /// Where calls stopped being kept: why, and when (ticks).
    pub(super) cut: Option<(CutReason, u64)>,
    /// Calls not kept after the cut, by thread index.
    pub(super) lost_after: Vec<u64>,
    /// Calls the encoder counted (in its thread's calls) that the file
    /// does not keep, by thread index.
    pub(super) encoded_lost: Vec<u64>,
    /// Samples not kept after the cut.
    pub(super) samples_after: u64,
    /// `ring` at the budget: the file is written in segments of half of
    /// it, the one before kept beside it (`FILE.prev`).
    pub(super) ring: bool,
    /// Segments begun after the first (`ring`).
    pub(super) rotations: u64,
    /// Calls of each thread before the current segment, by thread index
    /// (`ring`): counted in the file as overwritten.
    pub(super) ring_dropped: Vec<u64>,
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
/// size limit) has no room left: ENOSPC, EDQUOT and EFBIG on Unix, the
/// disk-full errors on Windows, as std sorts them.
pub(super) fn is_full(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{FileTooLarge, QuotaExceeded, StorageFull};
    matches!(e.kind(), StorageFull | QuotaExceeded | FileTooLarge)
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
    /// `threads`: those announced; one more is always reserved, the entry
    /// that stands for the threads the budget has no room to list
    /// ([`thread_room`], `Gathered::list_threads`).
    pub(super) fn finish_reserve(&self, threads: usize) -> u64 {
        (16 << 10) + self.repeated.saturating_mul(3) + THREAD_ROOM * (threads as u64 + 1)
    }

    /// Calls of thread `t` before the current segment.
    pub(super) fn dropped(&self, t: usize) -> u64 {
        self.ring_dropped.get(t).copied().unwrap_or(0)
    }

    pub(super) fn total_lost(&self) -> u64 {
        self.lost_after.iter().sum()
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
