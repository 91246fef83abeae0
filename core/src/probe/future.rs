//! Async fns: [`TracedFuture`] makes each poll a call on the polling
//! thread's shadow stack and records the whole future once, first poll to
//! completion (or drop), on whichever thread finishes it.

use super::stretch::{exit_poll, one_stretch};
use super::{
    capture_site_id, decision, enter_on, join, stack_pointer, with_state, write, Guard,
    ThreadState, F_POLL, GEN_BUSY, GEN_DEAD, GEN_TAGS,
};
use crate::clock::ticks;
use crate::control_word::{self, CONTROL, ON_MASK, SESSION_ON};
use crate::record::{ext, kind, RawCall, MAX_DEPTH, MAX_SITES};
use crate::site::{Decision, Site};
use core::future::Future;
use core::pin::Pin;
use core::sync::atomic::Ordering::Relaxed;
use core::task::{Context, Poll};

/// The id of `site` when a record of it made now, at this thread's current
/// depth, is kept: by a capture, or by the session under its filters (the
/// site's decision, a hidden subtree, graph functions, the depth limit);
/// `None` otherwise. The cold records (whole futures, markers) share it.
pub(super) fn kept_site(st: &mut ThreadState, site: &'static Site, c: u32) -> Option<u32> {
    if st.gen == GEN_BUSY || st.gen == GEN_DEAD {
        return None;
    }
    let (id, d) = if st.capture {
        (capture_site_id(site, false), Decision::Record)
    } else {
        let gen = control_word::generation(c);
        if c & SESSION_ON == 0 || (st.gen & !GEN_TAGS != gen && !join(st, gen)) {
            return None;
        }
        (site.id(), decision(st, site, gen)?)
    };
    if id >= MAX_SITES || st.hide != 0 || st.depth >= st.max_depth {
        return None;
    }
    match d {
        Decision::Skip | Decision::Hide => None,
        Decision::Record if st.has_graph && st.graph == 0 => None,
        _ => Some(id),
    }
}

/// Records an async fn's whole future (first poll to completion or drop),
/// under the same filters as a call at the current depth, with no allocation
/// once the site's decision is cached, and its id after it (see
/// [`ext::FUTURE`]). Calls `then` on the thread's state right after those,
/// only if the record was written (the values of a future that has them
/// follow it). Nothing masks interrupts here: the caller runs this in a
/// masked stretch (see `values::one_stretch`), since an interrupt handler's
/// record between the future's and its id would take the id.
#[cold]
pub(super) fn record_future(
    site: &'static Site,
    id: u64,
    start: u64,
    polls: u32,
    cancelled: bool,
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
        write(
            st,
            RawCall::pack(start, polls, dur, site_id, cancelled, kind::FUTURE),
        );
        let written = st.count != count || st.buf != buf;
        if written {
            write(st, RawCall::ext(ext::FUTURE, id, 0));
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

/// An `async fn`'s future, instrumented by `#[traced]`: every poll is a call
/// on the polling thread's shadow stack (never held across `.await`), and the
/// whole future, first poll to completion, is recorded once, on whichever
/// thread finishes it.
pub struct TracedFuture<F> {
    site: &'static Site,
    first: u64,
    polls: u32,
    done: bool,
    inner: F,
}

impl<F> TracedFuture<F> {
    /// Wraps `inner` (what `#[traced]` does to an `async fn`'s body).
    pub fn new(site: &'static Site, inner: F) -> Self {
        TracedFuture {
            site,
            first: 0,
            polls: 0,
            done: false,
            inner,
        }
    }
}

impl<F: Future> Future for TracedFuture<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `inner` is structurally pinned: never moved out, not even in Drop.
        let this = unsafe { self.get_unchecked_mut() };
        let c = CONTROL.load(Relaxed);
        if this.first == 0 && c & ON_MASK != 0 {
            this.first = ticks();
        }
        let guard = if c & ON_MASK == 0 {
            Guard::OFF
        } else {
            enter_on(this.site, c, F_POLL, stack_pointer())
        };
        this.polls += 1;
        // Pinned: the same address from this poll until the future drops.
        let id = this as *const Self as u64;
        // SAFETY: see above.
        let r = unsafe { Pin::new_unchecked(&mut this.inner) }.poll(cx);
        exit_poll(guard, id);
        if r.is_ready() {
            this.done = true;
            if this.first != 0 {
                let (site, first, polls) = (this.site, this.first, this.polls);
                one_stretch(2, || record_future(site, id, first, polls, false, |_| {}));
            }
        }
        r
    }
}

impl<F> Drop for TracedFuture<F> {
    fn drop(&mut self) {
        if !self.done && self.first != 0 {
            let id = self as *const Self as u64;
            let (site, first, polls) = (self.site, self.first, self.polls);
            one_stretch(2, || record_future(site, id, first, polls, true, |_| {}));
        }
    }
}
