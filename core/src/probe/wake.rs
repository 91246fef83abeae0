//! Wakes of traced futures, on hosts: while a session records, a traced
//! future polls what it wraps with a waker of its own, which records each
//! wake (on the waking thread, at its time) and passes it on to the
//! executor's waker.
//!
//! A future gets one cell at its first poll that records (an `Arc`: the one
//! allocation, made with the thread marked busy so that a counting
//! allocator never counts it as the program's), holding its id, the
//! executor's waker in an [`AtomicWaker`] and the time of its first wake
//! since its last poll. Its [`Waker`] is made once and lent to every poll:
//! no clone and no allocation per poll; a clone an inner future keeps is a
//! reference count. While nothing records, a future passes the executor's
//! context through untouched.

use super::{busy, marker::wake_marker, with_state};
use crate::clock::ticks;
use crate::site::Site;
use atomic_waker::AtomicWaker;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Wake, Waker};

/// What one future's waker shares between its polls and its wakers.
struct Cell {
    site: &'static Site,
    /// The future's id (its pinned address).
    id: u64,
    /// The executor's waker, as the last poll passed it.
    executor: AtomicWaker,
    /// Ticks of the first wake since the last poll began; 0 for none.
    woken: AtomicU64,
    /// Wakes, all of them.
    wakes: AtomicU64,
}

impl Wake for Cell {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Only the first wake before a poll starts the wait: later ones
        // find the future already scheduled.
        let now = ticks().max(1);
        let _ = self.woken.compare_exchange(0, now, Relaxed, Relaxed);
        self.wakes.fetch_add(1, Relaxed);
        wake_marker(self.site, self.id, now);
        self.executor.wake();
    }
}

/// A future's cell and the waker made of it.
pub(super) struct Watch {
    cell: Arc<Cell>,
    waker: Waker,
}

impl Watch {
    /// The cell of the future `id` of `site`.
    #[cold]
    #[inline(never)]
    pub(super) fn new(site: &'static Site, id: u64) -> Watch {
        with_state(|st| {
            busy(st, |_| {
                let cell = Arc::new(Cell {
                    site,
                    id,
                    executor: AtomicWaker::new(),
                    woken: AtomicU64::new(0),
                    wakes: AtomicU64::new(0),
                });
                Watch {
                    waker: Waker::from(cell.clone()),
                    cell,
                }
            })
        })
    }

    /// At a poll's start: keeps the executor's waker (a clone only when it
    /// is another than the kept one), and returns the ticks of the first
    /// wake since the last poll began (0 for none).
    #[inline]
    pub(super) fn before_poll(&self, executor: &Waker) -> u64 {
        self.cell.executor.register(executor);
        self.cell.woken.swap(0, Relaxed)
    }

    /// The waker to poll the inner future with.
    #[inline(always)]
    pub(super) fn waker(&self) -> &Waker {
        &self.waker
    }

    /// Wakes so far.
    pub(super) fn wakes(&self) -> u64 {
        self.cell.wakes.load(Relaxed)
    }
}
