//! Per-thread record buffers: the buffer a thread writes into and the
//! collector reads from (the record itself is the core's [`RawCall`]).
//!
//! A thread owns one `ThreadBuf` per session. It writes records into the
//! current storage with plain stores and publishes the count with a release
//! store (a plain `mov` on x86). Storage is swapped only under a spin flag
//! that the owner takes once per batch (in the core's handoff hook, with the
//! thread marked busy) and the collector takes at stop, so the per-call path
//! has no lock and no read-modify-write.
//!
//! Stop protocol: the session first turns the control word off, then
//! `close`s every buffer under its flag. A handoff that
//! comes after that sends nothing (it would go into a channel nobody reads)
//! and stops the thread's recording; one that came before has already sent
//! its batch, which the session drains after closing. So no batch is lost at
//! stop, and what the snapshot copies is never swapped away under it.

pub use fgtrace_core::record::{kind, RawCall, DUR_MAX, MAX_DEPTH, MAX_SITES, START_MASK};

mod count_only;
pub(crate) use count_only::CountTable;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

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

/// Where a session's full batches go, and where fresh storage comes from.
/// Threads hold it weakly: once the session is gone, a handoff stops.
pub(crate) struct Outlet {
    pub batches: crossbeam_channel::Sender<Batch>,
    pub recycle_tx: crossbeam_channel::Sender<Storage>,
    pub recycle_rx: crossbeam_channel::Receiver<Storage>,
    /// Wait for the collector instead of dropping a batch.
    pub block_when_full: bool,
}

/// The buffer one thread writes during one session, shared with the collector.
pub(crate) struct ThreadBuf {
    /// The session's outlet (weak: an idle thread does not keep a stopped
    /// session alive).
    pub outlet: std::sync::Weak<Outlet>,
    /// Index of the thread in the session's thread table.
    pub index: u32,
    pub tid: u32,
    pub name: String,
    /// True while the owner or the collector swaps or reads `storage`.
    lock: AtomicBool,
    storage: UnsafeCell<Storage>,
    /// Set under `lock` at stop: no more batches.
    closed: UnsafeCell<bool>,
    /// `published` when the buffer was closed: what the session keeps.
    final_count: UnsafeCell<usize>,
    /// `non_calls` when the buffer was closed.
    final_non_calls: UnsafeCell<usize>,
    /// Stream mode: records valid in `storage`. Flight recorder: records ever written.
    pub published: AtomicUsize,
    /// The records ever written that are not calls, weighed as the core
    /// does (`ThreadState::non_calls`, stored before `published` covers
    /// them): of the records a flight recorder's ring overwrote, the calls
    /// are those less these.
    pub non_calls: AtomicUsize,
    pub overruns: AtomicUsize,
    /// Calls lost in dropped batches.
    pub dropped: AtomicU64,
    /// Batches handed to the collector (counted under `lock`, as they are
    /// sent): a dump of a running session knows which batches it must wait
    /// for and which records are still only here.
    pub sent: AtomicU64,
    /// Calls a signal handler made inside a write that had taken the last
    /// slot (the core's `ThreadState::dropped`).
    pub nested_dropped: AtomicUsize,
    /// The thread's count-only table (`Config::auto_exclude`): it lives as
    /// long as the buffer, so the thread (which holds the buffer while it
    /// records into it) and the collector (which switches sites through
    /// the session's list of buffers) never outlive it.
    pub count_only: Option<CountTable>,
}

// SAFETY: `storage`, `closed` and `final_count` are only touched under
// `lock`; the owner writes slots at or above `published`, the collector reads
// slots below it (release/acquire).
unsafe impl Sync for ThreadBuf {}
unsafe impl Send for ThreadBuf {}

/// What [`ThreadBuf::swap_if_open`] did.
pub(crate) enum Swap {
    /// The full storage, to send; the fresh one is in place.
    Full(Storage),
    /// The buffer is closed: nothing was swapped, `fresh` comes back.
    Closed(#[allow(dead_code)] Storage),
}

impl ThreadBuf {
    pub fn new(
        index: u32,
        tid: u32,
        name: String,
        capacity: usize,
        outlet: std::sync::Weak<Outlet>,
    ) -> ThreadBuf {
        ThreadBuf {
            outlet,
            index,
            tid,
            name,
            lock: AtomicBool::new(false),
            storage: UnsafeCell::new(new_storage(capacity)),
            closed: UnsafeCell::new(false),
            final_count: UnsafeCell::new(0),
            final_non_calls: UnsafeCell::new(0),
            published: AtomicUsize::new(0),
            non_calls: AtomicUsize::new(0),
            overruns: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            nested_dropped: AtomicUsize::new(0),
            count_only: None,
        }
    }

    /// With a count-only table (a session with auto-exclude).
    pub fn with_count_table(mut self, t: Option<CountTable>) -> ThreadBuf {
        self.count_only = t;
        self
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

    /// Runs `f` under the flag.
    pub fn locked<R>(&self, f: impl FnOnce() -> R) -> R {
        self.lock();
        let r = f();
        self.unlock();
        r
    }

    /// The owner's write pointer into the current storage.
    pub fn storage_ptr(&self) -> (*mut RawCall, usize) {
        self.locked(|| {
            // SAFETY: under the lock nobody swaps the storage.
            let s = unsafe { &mut *self.storage.get() };
            (s.as_mut_ptr() as *mut RawCall, s.len())
        })
    }

    /// Owner only, under the flag taken with [`locked`](Self::locked): swaps
    /// in `fresh` unless the buffer is closed.
    ///
    /// # Safety
    /// The caller holds the flag.
    pub unsafe fn swap_if_open(&self, fresh: Storage) -> Swap {
        if *self.closed.get() {
            return Swap::Closed(fresh);
        }
        let old = std::mem::replace(&mut *self.storage.get(), fresh);
        self.published.store(0, Ordering::Release);
        Swap::Full(old)
    }

    /// Owner only (captures): the records published so far, and the count reset.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub fn take_published(&self) -> Vec<RawCall> {
        self.locked(|| {
            let n = self.published.load(Ordering::Acquire);
            // SAFETY: under the lock; slots below `n` were written.
            let s = unsafe { &*self.storage.get() };
            let out = s[..n.min(s.len())]
                .iter()
                .map(|r| unsafe { r.assume_init() })
                .collect();
            self.published.store(0, Ordering::Release);
            out
        })
    }

    /// Session stop: no more batches from this buffer; returns nothing, the
    /// records stay for [`snapshot`](Self::snapshot).
    pub fn close(&self) {
        self.locked(|| unsafe {
            *self.closed.get() = true;
            *self.final_count.get() = self.published.load(Ordering::Acquire);
            // A record written between the two loads (a call open at stop,
            // ending now) may be counted here and not above: one record's
            // weight, in that instant only.
            *self.final_non_calls.get() = self.non_calls.load(Ordering::Acquire);
        })
    }

    /// Copies out what was published when the buffer was closed (or now,
    /// if it never was). `flight` = ring semantics: the last `keep` records
    /// in order, and how many older ones were overwritten. The owner may
    /// still be writing the ring (a call that was open at stop): records it
    /// may have overwritten while they were copied are dropped and counted
    /// as overwritten, never returned torn.
    pub fn snapshot(&self, flight: bool, keep: usize) -> (Vec<RawCall>, u64) {
        // SAFETY: under the flag.
        self.locked(|| unsafe { self.copy_locked(flight, keep) })
    }

    /// A running stream-mode session: the records not yet handed to the
    /// collector, and how many batches were handed before them, read
    /// together under the flag (a handoff sends its batch under it).
    /// `None` if the flag is taken: the owner may be waiting, flag held, for
    /// room in the channel only the caller (the collector) empties.
    pub fn try_unhanded(&self) -> Option<(Vec<RawCall>, u64)> {
        self.lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // SAFETY: under the flag.
        let (recs, _) = unsafe { self.copy_locked(false, 0) };
        let sent = self.sent.load(Ordering::Relaxed);
        self.unlock();
        Some((recs, sent))
    }

    /// [`snapshot`](Self::snapshot)'s copy.
    ///
    /// # Safety
    /// The caller holds the flag.
    unsafe fn copy_locked(&self, flight: bool, keep: usize) -> (Vec<RawCall>, u64) {
        {
            // SAFETY: under the lock.
            let (closed, fin, fin_non_calls) = unsafe {
                (
                    *self.closed.get(),
                    *self.final_count.get(),
                    *self.final_non_calls.get(),
                )
            };
            // A running ring: a record the owner writes between these loads
            // may be weighed without being counted (see `close`).
            let (n, non_calls) = if closed {
                (fin, fin_non_calls)
            } else {
                let n = self.published.load(Ordering::Acquire);
                (n, self.non_calls.load(Ordering::Acquire))
            };
            // SAFETY: under the lock nobody swaps the storage.
            let s = unsafe { &*self.storage.get() };
            let cap = s.len();
            if cap == 0 {
                return (Vec::new(), 0);
            }
            let read = |i: usize| {
                // SAFETY: slot written before `published` covered it; a
                // volatile read, since the owner may be rewriting it (ring).
                unsafe { std::ptr::read_volatile(s[i % cap].as_ptr()) }
            };
            if !flight {
                return ((0..n.min(cap)).map(read).collect(), 0);
            }
            let keep = keep.min(cap);
            let first = n.saturating_sub(keep);
            let out: Vec<RawCall> = (first..n).map(read).collect();
            // The owner may be writing index `now` (reserved before it is
            // published), which reuses the slot of `now - cap`.
            let now = self.published.load(Ordering::Acquire);
            let valid_from = (now + 1).saturating_sub(cap).max(first);
            let skip = valid_from.saturating_sub(first).min(out.len());
            let kept = &out[skip..];
            // The records before the kept ones are gone; those that were
            // not calls (values, counters, futures, markers) are all the
            // written ones less the kept ones.
            let kept_non_calls: u64 = kept.iter().map(|r| r.non_calls()).sum();
            let gone_non_calls = (non_calls as u64).saturating_sub(kept_non_calls);
            let gone_calls = ((first + skip) as u64).saturating_sub(gone_non_calls);
            (kept.to_vec(), gone_calls)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flight_snapshot_keeps_the_last_records_in_order() {
        let b = ThreadBuf::new(0, 1, "t".into(), 4, std::sync::Weak::new());
        let (p, cap) = b.storage_ptr();
        for i in 0..10usize {
            unsafe { p.add(i % cap).write(RawCall(i as u64, 0)) };
            b.published.store(i + 1, Ordering::Release);
        }
        let (recs, lost) = b.snapshot(true, 4);
        // Index 6 shares its slot with index 10, which the owner may be
        // writing: only 7, 8, 9 are safe to keep.
        assert_eq!(recs.iter().map(|r| r.0).collect::<Vec<_>>(), vec![7, 8, 9]);
        assert_eq!(lost, 7);
        let (recs, lost) = b.snapshot(true, 3);
        assert_eq!((recs.len(), lost), (3, 7));
    }

    #[test]
    fn a_closed_buffer_keeps_what_was_published_at_close() {
        let b = ThreadBuf::new(0, 1, "t".into(), 8, std::sync::Weak::new());
        let (p, _) = b.storage_ptr();
        for i in 0..3usize {
            unsafe { p.add(i).write(RawCall(i as u64, 0)) };
            b.published.store(i + 1, Ordering::Release);
        }
        b.close();
        // A call that was open at stop ends afterwards.
        unsafe { p.add(3).write(RawCall(3, 0)) };
        b.published.store(4, Ordering::Release);
        let (recs, _) = b.snapshot(false, 0);
        assert_eq!(recs.len(), 3);
        let fresh = new_storage(8);
        assert!(matches!(
            b.locked(|| unsafe { b.swap_if_open(fresh) }),
            Swap::Closed(_)
        ));
    }
}
