//! The probes of calls that record values (`#[traced(values(..))]`, `ret`):
//! a separate guard and future, so that calls without values keep the plain
//! [`Guard`] and [`TracedFuture`](super::TracedFuture) and pay nothing for
//! this.
//!
//! The values (evaluated by the expansion before entry, so outside the
//! measured duration) ride in the guard; at exit, once the call's own record
//! is written, each present value follows it as an extension record
//! ([`ext::VALUE`]). A call whose record is not written (filtered, under the
//! threshold, dropped) writes no values either.

use super::cold::write_values;
use super::future::{record_future, Follow, FutureTimes, FUTURE_RECORDS};
use super::stretch::{exit_then, one_stretch};
use super::{enter_not_lean, enter_on, stack_pointer, Guard, F_POLL};
use crate::control_word::{CONTROL, ON_MASK};
use crate::site::Site;
use crate::values::RawValue;
use core::future::Future;
use core::pin::Pin;
use core::sync::atomic::Ordering::Relaxed;
use core::task::{Context, Poll};

/// The guard of a call with values: a [`Guard`] plus the values (the last
/// one the return value, set by [`ValuesGuard::set_ret`], when the site
/// records it).
#[must_use = "the call ends when the guard is dropped"]
pub struct ValuesGuard<const N: usize> {
    guard: Guard,
    values: [RawValue; N],
}

/// Entry probe of a call with values.
#[inline(always)]
pub fn enter_values<const N: usize>(site: &'static Site, values: [RawValue; N]) -> ValuesGuard<N> {
    ValuesGuard {
        guard: enter_not_lean(site),
        values,
    }
}

impl<const N: usize> ValuesGuard<N> {
    /// Sets the return value (the last slot), just before the guard drops.
    #[inline(always)]
    pub fn set_ret(&mut self, v: RawValue) {
        if let Some(last) = self.values.last_mut() {
            *last = v;
        }
    }
}

impl<const N: usize> Drop for ValuesGuard<N> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.guard.slot() != 0 {
            exit_values(&mut self.guard, &self.values);
        }
    }
}

/// Ends the call of `g` (what dropping it does) and writes `values` after
/// its record, as a [`ValuesGuard`] would: for callers that learn a call's
/// values between its entry and its exit (a `tracing` span's fields, set
/// when the span is made and by later `record` calls). Slot `i` of `values`
/// is name `i` of the site's [`Site::values`]; absent values are not written.
#[inline]
pub fn exit_with_values(mut g: Guard, values: &[RawValue]) {
    if g.slot() != 0 {
        exit_values(&mut g, values);
    }
}

/// The exit of a call with values: the call's record, then its values.
#[inline(never)]
fn exit_values(g: &mut Guard, values: &[RawValue]) {
    exit_then(g, values.len(), |st| write_values(st, values));
}

/// Entry probe of one poll of a future its caller follows itself (a
/// `tracing` span entered once per poll): a call flagged as a poll, as
/// [`TracedFuture`](super::TracedFuture)'s polls are; the caller records the
/// whole future with [`record_future_values`].
#[inline]
pub fn enter_poll(site: &'static Site) -> Guard {
    let c = CONTROL.load(Relaxed);
    if c & ON_MASK == 0 {
        return Guard::OFF;
    }
    enter_on(site, c, F_POLL, stack_pointer())
}

/// Records a whole future its caller followed (see [`enter_poll`]): from
/// `first` (the [`ticks`](crate::clock::ticks) of its first poll) to now, with its poll count,
/// then its id (the one its polls' [`exit_poll`](super::exit_poll) gave), its `times` and its
/// present `values`, exactly as a [`ValuesFuture`] records its own (in one stretch,
/// masked on a board).
pub fn record_future_values(
    site: &'static Site,
    id: u64,
    first: u64,
    polls: u32,
    cancelled: bool,
    times: Option<FutureTimes>,
    values: &[RawValue],
) {
    one_stretch(FUTURE_RECORDS + values.len(), || {
        record_future(site, id, first, polls, cancelled, times, |st| {
            write_values(st, values)
        })
    });
}

/// An `async fn` with values, instrumented by `#[traced]`: as
/// [`TracedFuture`](super::TracedFuture) (every poll a call, the whole future
/// recorded once), with the values (evaluated at the first poll) and the
/// return value (at completion, by `ret`) after the whole future's record.
pub struct ValuesFuture<F: Future, const N: usize> {
    follow: Follow,
    values: [RawValue; N],
    ret: Option<fn(&F::Output) -> RawValue>,
    inner: F,
}

impl<F: Future, const N: usize> ValuesFuture<F, N> {
    /// Wraps `inner` (an `async fn`'s body) with the values taken at its
    /// first poll.
    pub fn new(site: &'static Site, values: [RawValue; N], inner: F) -> Self {
        ValuesFuture {
            follow: Follow::new(site),
            values,
            ret: None,
            inner,
        }
    }

    /// Records the return value too (the last slot of the values), given by `ret`.
    pub fn with_ret(mut self, ret: fn(&F::Output) -> RawValue) -> Self {
        self.ret = Some(ret);
        self
    }
}

impl<F: Future, const N: usize> Future for ValuesFuture<F, N> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `inner` is structurally pinned: never moved out, not even in Drop.
        let this = unsafe { self.get_unchecked_mut() };
        let id = this as *const Self as u64;
        let inner = &mut this.inner;
        // SAFETY: see above.
        let r = this
            .follow
            .poll(id, cx, |cx| unsafe { Pin::new_unchecked(inner) }.poll(cx));
        if let Poll::Ready(out) = &r {
            this.follow.done = true;
            if let (Some(ret), Some(last)) = (this.ret, this.values.last_mut()) {
                *last = ret(out);
            }
            // The whole future's record and its values in one stretch, as
            // a call's (see `exit_then`).
            let values = &this.values;
            this.follow
                .record(id, false, N, |st| write_values(st, values));
        }
        r
    }
}

impl<F: Future, const N: usize> Drop for ValuesFuture<F, N> {
    fn drop(&mut self) {
        if !self.follow.done {
            let (values, id) = (&self.values, self as *const Self as u64);
            self.follow
                .record(id, true, N, |st| write_values(st, values));
        }
    }
}
