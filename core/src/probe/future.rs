//! Async fns: [`TracedFuture`] makes each poll a call on the polling
//! thread's shadow stack and records the whole future once, first poll to
//! completion (or drop), on whichever thread finishes it.

use super::cold::kept_site;
use super::stretch::{exit_poll, one_stretch};
use super::{enter_on, stack_pointer, with_state, write_other, F_POLL};
use crate::clock::ticks;
use crate::control_word::{CONTROL, ON_MASK};
use crate::record::{ext, kind, RawCall, MAX_DEPTH};
use crate::site::Site;
use core::future::Future;
use core::pin::Pin;
use core::sync::atomic::Ordering::Relaxed;
use core::task::{Context, Poll};

/// What a traced future measured of itself, written after its whole
/// record (see [`ext::FUTURE_BUSY`], [`ext::FUTURE_WAKES`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FutureTimes {
    /// Ticks its polls took while recording (busy time).
    pub busy: u64,
    /// Its polls, all of them.
    pub polls: u64,
    /// Ticks from each wake to the start of the poll after it, summed
    /// (scheduled time), and its wakes; `None` where its wakes were not
    /// watched (a board, a `tracing` span).
    pub waits: Option<(u64, u64)>,
}

/// Records an async fn's whole future (first poll to completion or drop),
/// under the same filters as a call at the current depth, with no allocation
/// once the site's decision is cached, then its id (see [`ext::FUTURE`]) and
/// its `times`. Calls `then` on the thread's state right after those, only
/// if the record was written (the values of a future that has them follow
/// it). Nothing masks interrupts here: the caller runs this in a masked
/// stretch (see `values::one_stretch`) of [`FUTURE_RECORDS`] records and
/// what `then` writes, since an interrupt handler's record between the
/// future's and its id would take the id.
#[cold]
pub(super) fn record_future(
    site: &'static Site,
    id: u64,
    start: u64,
    polls: u32,
    cancelled: bool,
    times: Option<FutureTimes>,
    then: impl FnOnce(&mut super::ThreadState),
) {
    let end = ticks();
    let c = CONTROL.load(Relaxed);
    if c & ON_MASK == 0 {
        return;
    }
    let written = with_state(|st| {
        let Some(site_id) = kept_site(st, site, c) else {
            return false;
        };
        let dur = end.wrapping_sub(start);
        if dur < st.threshold {
            return false;
        }
        let polls = polls.min(MAX_DEPTH);
        let (count, buf) = (st.count, st.buf);
        write_other(
            st,
            RawCall::pack(start, polls, dur, site_id, cancelled, kind::FUTURE),
        );
        let written = st.count != count || st.buf != buf;
        if written {
            write_other(st, RawCall::ext(ext::FUTURE, id, 0));
            if let Some(t) = times {
                write_other(st, RawCall::ext(ext::FUTURE_BUSY, t.busy, t.polls));
                if let Some((scheduled, wakes)) = t.waits {
                    write_other(st, RawCall::ext(ext::FUTURE_WAKES, scheduled, wakes));
                }
            }
        }
        written
    });
    // Where an interrupt lands between the record and what follows it,
    // unless the caller masked them.
    #[cfg(test)]
    super::irq_sim::point();
    if written {
        with_state(then);
    }
}

/// The most records [`record_future`] writes itself: the future's, its id
/// and its times.
pub(super) const FUTURE_RECORDS: usize = 4;

/// What a traced future keeps of itself from poll to poll, and the poll
/// around its inner future: [`TracedFuture`]'s and `ValuesFuture`'s.
pub(super) struct Follow {
    pub(super) site: &'static Site,
    /// Ticks at its first poll while recording; 0 before that.
    pub(super) first: u64,
    /// Its polls, all of them.
    polls: u32,
    /// Completed.
    pub(super) done: bool,
    /// Ticks its polls took while recording.
    #[cfg(any(feature = "std", test))]
    busy: u64,
    /// The end of its last poll while recording, in ticks.
    #[cfg(any(feature = "std", test))]
    last_end: u64,
    /// Ticks from wakes to the polls after them.
    #[cfg(any(feature = "std", test))]
    scheduled: u64,
    /// The waker it hands its inner future while recording, which sees
    /// its wakes (see `wake`).
    #[cfg(any(feature = "std", test))]
    watch: Option<super::wake::Watch>,
}

impl Follow {
    pub(super) fn new(site: &'static Site) -> Follow {
        Follow {
            site,
            first: 0,
            polls: 0,
            done: false,
            #[cfg(any(feature = "std", test))]
            busy: 0,
            #[cfg(any(feature = "std", test))]
            last_end: 0,
            #[cfg(any(feature = "std", test))]
            scheduled: 0,
            #[cfg(any(feature = "std", test))]
            watch: None,
        }
    }

    /// One poll of the future `id` (its pinned address): `inner` polls what
    /// it wraps, with the context to use. While nothing records, just that.
    #[inline(always)]
    pub(super) fn poll<T>(
        &mut self,
        id: u64,
        cx: &mut Context<'_>,
        inner: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        let c = CONTROL.load(Relaxed);
        self.polls = self.polls.wrapping_add(1);
        if c & ON_MASK == 0 {
            return inner(cx);
        }
        // A host times every poll (busy time); a board reads the clock at
        // the first poll only.
        #[cfg(any(feature = "std", test))]
        let t0 = ticks();
        #[cfg(any(feature = "std", test))]
        if self.first == 0 {
            self.first = t0;
        }
        #[cfg(not(any(feature = "std", test)))]
        if self.first == 0 {
            self.first = ticks();
        }
        let guard = enter_on(self.site, c, F_POLL, stack_pointer());
        #[cfg(any(feature = "std", test))]
        let r = if guard.slot() != 0 {
            self.poll_watched(id, t0, cx, inner)
        } else {
            inner(cx)
        };
        #[cfg(not(any(feature = "std", test)))]
        let r = inner(cx);
        // Busy time: hosts only (see `record`).
        #[cfg(any(feature = "std", test))]
        {
            let t1 = ticks();
            self.busy = self.busy.wrapping_add(t1.wrapping_sub(t0));
            self.last_end = t1;
        }
        exit_poll(guard, id);
        r
    }

    /// The inner poll with the future's own waker in the context: the
    /// executor's waker is kept in it (replaced when another is passed),
    /// and the wait since the first wake after the last poll's start is
    /// scheduled time. The waker is made at the first poll that records
    /// (one allocation per future, never counted as the program's).
    #[cfg(any(feature = "std", test))]
    #[inline(always)]
    fn poll_watched<T>(
        &mut self,
        id: u64,
        t0: u64,
        cx: &mut Context<'_>,
        inner: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        let site = self.site;
        let w = self
            .watch
            .get_or_insert_with(|| super::wake::Watch::new(site, id));
        let woken = w.before_poll(cx.waker());
        if woken != 0 {
            // A wake during the last poll waits from that poll's end.
            let from = woken.max(self.last_end);
            self.scheduled = self.scheduled.wrapping_add(t0.saturating_sub(from));
        }
        inner(&mut Context::from_waker(w.waker()))
    }

    /// Records the whole future `id` (completed, or dropped before when
    /// `cancelled`) if it was polled while recording, in one stretch with
    /// what `then` writes (at most `extra` records).
    #[inline]
    pub(super) fn record(
        &self,
        id: u64,
        cancelled: bool,
        extra: usize,
        then: impl FnOnce(&mut super::ThreadState),
    ) {
        if self.first == 0 {
            return;
        }
        // Hosts only: a board's flight recorder counts the records it
        // overwrites as calls, and the times would be one more per future.
        #[cfg(any(feature = "std", test))]
        let times = Some(FutureTimes {
            busy: self.busy,
            polls: self.polls as u64,
            waits: self.waits(),
        });
        #[cfg(not(any(feature = "std", test)))]
        let times = None;
        let (site, first, polls) = (self.site, self.first, self.polls);
        one_stretch(FUTURE_RECORDS + extra, || {
            record_future(site, id, first, polls, cancelled, times, then)
        });
    }

    /// Scheduled time and wakes, where its wakes were watched.
    #[cfg(any(feature = "std", test))]
    fn waits(&self) -> Option<(u64, u64)> {
        let w = self.watch.as_ref()?;
        Some((self.scheduled, w.wakes()))
    }
}

/// An `async fn`'s future, instrumented by `#[traced]`: every poll is a call
/// on the polling thread's shadow stack (never held across `.await`), and the
/// whole future, first poll to completion, is recorded once, on whichever
/// thread finishes it, with its busy time and, on hosts, its wakes and
/// scheduled time.
pub struct TracedFuture<F> {
    follow: Follow,
    inner: F,
}

impl<F> TracedFuture<F> {
    /// Wraps `inner` (what `#[traced]` does to an `async fn`'s body).
    pub fn new(site: &'static Site, inner: F) -> Self {
        TracedFuture {
            follow: Follow::new(site),
            inner,
        }
    }
}

impl<F: Future> Future for TracedFuture<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `inner` is structurally pinned: never moved out, not even in Drop.
        let this = unsafe { self.get_unchecked_mut() };
        // Pinned: the same address from this poll until the future drops.
        let id = this as *const Self as u64;
        let inner = &mut this.inner;
        // SAFETY: see above.
        let r = this
            .follow
            .poll(id, cx, |cx| unsafe { Pin::new_unchecked(inner) }.poll(cx));
        if r.is_ready() {
            this.follow.done = true;
            this.follow.record(id, false, 0, |_| {});
        }
        r
    }
}

impl<F> Drop for TracedFuture<F> {
    fn drop(&mut self) {
        if !self.follow.done {
            let id = self as *const Self as u64;
            self.follow.record(id, true, 0, |_| {});
        }
    }
}
