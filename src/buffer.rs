//! Per-thread record buffers: the compact 16-byte call record, and the
//! buffer a thread writes into and the collector reads from.
//!
//! A thread owns one [`ThreadBuf`] per session. It writes records into the
//! current storage with plain stores and publishes the count with a release
//! store (a plain `mov` on x86). Storage is swapped only under a spin flag
//! that the owner takes once per batch and the collector takes once at stop,
//! so the per-call path has no lock and no read-modify-write.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Kind of a raw record (2 bits).
pub(crate) mod kind {
    /// A completed call.
    pub const CALL: u64 = 0;
    /// One poll of an async fn.
    pub const POLL: u64 = 1;
    /// A whole future, first poll to completion (depth field = poll count).
    pub const FUTURE: u64 = 2;
    /// Records were lost here (duration field = count).
    pub const LOST: u64 = 3;
}

const START_BITS: u32 = 54;
const DEPTH_BITS: u32 = 10;
const DUR_BITS: u32 = 43;
const SITE_BITS: u32 = 18;
pub(crate) const START_MASK: u64 = (1 << START_BITS) - 1;
pub(crate) const MAX_DEPTH: u32 = (1 << DEPTH_BITS) - 1;
pub(crate) const DUR_MAX: u64 = (1 << DUR_BITS) - 1;
/// Most sites a process can have (site ids fit in 18 bits).
pub(crate) const MAX_SITES: u32 = 1 << SITE_BITS;

/// One call as the hot path writes it: 16 bytes.
///
/// * word 0: entry ticks (low 54 bits; the collector restores the high bits
///   from the session origin) | depth (10 bits)
/// * word 1: duration in ticks (43 bits, about 49 minutes at 3 GHz; longer
///   calls saturate) | site id (18 bits) | unwound (1 bit) | kind (2 bits)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct RawCall(pub u64, pub u64);

impl RawCall {
    #[inline(always)]
    pub(crate) fn pack(
        start: u64,
        depth: u32,
        dur: u64,
        site: u32,
        unwound: bool,
        kind: u64,
    ) -> RawCall {
        let dur = if dur > DUR_MAX { DUR_MAX } else { dur };
        RawCall(
            (start & START_MASK) | ((depth as u64) << START_BITS),
            dur | ((site as u64) << DUR_BITS) | ((unwound as u64) << 61) | (kind << 62),
        )
    }
    pub(crate) fn start_low(self) -> u64 {
        self.0 & START_MASK
    }
    pub(crate) fn depth(self) -> u32 {
        (self.0 >> START_BITS) as u32
    }
    pub(crate) fn dur(self) -> u64 {
        self.1 & DUR_MAX
    }
    pub(crate) fn site(self) -> u32 {
        ((self.1 >> DUR_BITS) & (MAX_SITES as u64 - 1)) as u32
    }
    pub(crate) fn unwound(self) -> bool {
        self.1 >> 61 & 1 != 0
    }
    pub(crate) fn kind(self) -> u64 {
        self.1 >> 62
    }
}

pub(crate) type Storage = Box<[MaybeUninit<RawCall>]>;

pub(crate) fn new_storage(n: usize) -> Storage {
    let mut v = Vec::with_capacity(n);
    v.resize(n, MaybeUninit::uninit());
    v.into_boxed_slice()
}

/// A full batch on its way to the collector.
pub(crate) struct Batch {
    pub thread: u32,
    pub storage: Storage,
    pub len: usize,
}

/// The buffer one thread writes during one session, shared with the collector.
pub(crate) struct ThreadBuf {
    /// Index of the thread in the session's thread table.
    pub index: u32,
    pub tid: u32,
    pub name: String,
    /// True while the owner or the collector swaps or reads `storage`.
    lock: AtomicBool,
    storage: UnsafeCell<Storage>,
    /// Stream mode: records valid in `storage`. Flight recorder: records ever written.
    pub published: AtomicU64,
    pub overruns: AtomicU64,
    /// Calls lost in dropped batches.
    pub dropped: AtomicU64,
}

// SAFETY: `storage` is only swapped under `lock`; the owner writes slots at or
// above `published`, the collector reads slots below it (release/acquire).
unsafe impl Sync for ThreadBuf {}
unsafe impl Send for ThreadBuf {}

impl ThreadBuf {
    pub fn new(index: u32, tid: u32, name: String, capacity: usize) -> ThreadBuf {
        ThreadBuf {
            index,
            tid,
            name,
            lock: AtomicBool::new(false),
            storage: UnsafeCell::new(new_storage(capacity)),
            published: AtomicU64::new(0),
            overruns: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    fn lock(&self) {
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
    }

    fn unlock(&self) {
        self.lock.store(false, Ordering::Release);
    }

    /// The owner's write pointer into the current storage.
    pub fn storage_ptr(&self) -> (*mut RawCall, usize) {
        self.lock();
        // SAFETY: under the lock nobody swaps the storage.
        let s = unsafe { &mut *self.storage.get() };
        let r = (s.as_mut_ptr() as *mut RawCall, s.len());
        self.unlock();
        r
    }

    /// Owner only: swaps in `fresh` and returns the full storage.
    pub fn swap_storage(&self, fresh: Storage) -> Storage {
        self.lock();
        // SAFETY: under the lock.
        let old = std::mem::replace(unsafe { &mut *self.storage.get() }, fresh);
        self.published.store(0, Ordering::Release);
        self.unlock();
        old
    }

    /// Collector: copies out what is published. `flight` = ring semantics:
    /// returns the last `capacity` records in order and how many were overwritten.
    pub fn snapshot(&self, flight: bool, keep: usize) -> (Vec<RawCall>, u64) {
        self.lock();
        let n = self.published.load(Ordering::Acquire);
        // SAFETY: under the lock; slots below `n` were fully written before
        // `published` was released.
        let s = unsafe { &*self.storage.get() };
        let cap = s.len() as u64;
        let keep = (keep as u64).min(cap);
        let read = |i: u64| unsafe { s[(i % cap) as usize].assume_init() };
        let (out, lost) = if flight {
            let first = n.saturating_sub(keep);
            ((first..n).map(read).collect(), first)
        } else {
            ((0..n.min(cap)).map(read).collect(), 0)
        };
        self.unlock();
        (out, lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_call_packs_every_field() {
        let r = RawCall::pack(
            0x3f_ffff_ffff_1234,
            513,
            1 << 40,
            MAX_SITES - 1,
            true,
            kind::POLL,
        );
        assert_eq!(r.start_low(), 0x3f_ffff_ffff_1234 & START_MASK);
        assert_eq!(r.depth(), 513);
        assert_eq!(r.dur(), 1 << 40);
        assert_eq!(r.site(), MAX_SITES - 1);
        assert!(r.unwound());
        assert_eq!(r.kind(), kind::POLL);
        assert_eq!(
            RawCall::pack(5, 0, u64::MAX, 3, false, kind::CALL).dur(),
            DUR_MAX
        );
        assert_eq!(std::mem::size_of::<RawCall>(), 16);
    }

    #[test]
    fn flight_snapshot_keeps_the_last_records_in_order() {
        let b = ThreadBuf::new(0, 1, "t".into(), 4);
        let (p, cap) = b.storage_ptr();
        for i in 0..10u64 {
            unsafe { p.add((i % cap as u64) as usize).write(RawCall(i, 0)) };
            b.published.store(i + 1, Ordering::Release);
        }
        let (recs, lost) = b.snapshot(true, 4);
        assert_eq!(
            recs.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![6, 7, 8, 9]
        );
        assert_eq!(lost, 6);
        let (recs, lost) = b.snapshot(true, 3);
        assert_eq!((recs.len(), lost), (3, 7));
    }
}
