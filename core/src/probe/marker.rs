//! Instant markers: a point in time on a thread (a `tracing` event), at the
//! depth of the calls open around it, with its site and values.
//!
//! A marker is written as a call record of duration 0 at the current depth
//! (so the trace builders nest it under the open calls exactly as they nest
//! a call made there), followed by an extension record ([`ext::MARKER`])
//! that says the record before it is a marker, then its values
//! ([`ext::VALUE`]). Nothing is pushed on the shadow stack.

use super::cold::{kept_site, write_values};
use super::{with_state, write, write_other, ThreadState};
use crate::clock::ticks;
use crate::control_word::{CONTROL, ON_MASK};
use crate::record::{ext, kind, RawCall};
use crate::site::Site;
use crate::values::RawValue;
use core::sync::atomic::Ordering::Relaxed;

/// Records a marker of `site` now on this thread, with `values` (slot `i`
/// named by the site's [`Site::values`]`[i]`; absent ones are not written).
///
/// The session's filters apply as to a call made here (the site's own
/// decision, a hidden subtree, graph functions, the depth limit), except the
/// duration threshold: a marker has no duration. No allocation, no lock once
/// the site's decision is cached; does nothing when nothing records.
#[inline]
pub fn marker(site: &'static Site, values: &[RawValue]) {
    let c = CONTROL.load(Relaxed);
    if c & ON_MASK == 0 {
        return;
    }
    marker_on(site, c, values)
}

#[inline(never)]
fn marker_on(site: &'static Site, c: u32, values: &[RawValue]) {
    marker_then(site, c, ticks(), |st| write_values(st, values));
}

/// Writes a marker of `site` at `at` on this thread, then what `then`
/// writes after it, when the session keeps the site here.
#[inline(always)]
fn marker_then(site: &'static Site, c: u32, at: u64, then: impl FnOnce(&mut ThreadState)) {
    with_state(|st| {
        let Some(id) = kept_site(st, site, c) else {
            return;
        };
        let (count, buf) = (st.count, st.buf);
        write(st, RawCall::pack(at, st.depth, 0, id, false, kind::CALL));
        if st.count == count && st.buf == buf {
            return; // not written: neither is the rest
        }
        write_other(st, RawCall::ext(ext::MARKER, 0, 0));
        then(st);
    })
}

/// Records a wake of the future `id` of `site` at `at` (ticks), on this
/// thread (the waking one): a marker of the future's site, said to be a
/// wake by [`ext::WAKE`] after it, in one stretch. Does nothing when
/// nothing records, on a thread busy with fgtrace's own code, or where the
/// session's filters leave the site out here.
#[cfg(any(feature = "std", test))]
#[inline(never)]
pub(super) fn wake_marker(site: &'static Site, id: u64, at: u64) {
    let c = CONTROL.load(Relaxed);
    if c & ON_MASK == 0 {
        return;
    }
    super::stretch::one_stretch(3, || {
        marker_then(site, c, at, |st| {
            write_other(st, RawCall::ext(ext::WAKE, id, 0))
        })
    });
}
