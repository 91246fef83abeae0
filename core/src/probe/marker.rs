//! Instant markers: a point in time on a thread (a `tracing` event), at the
//! depth of the calls open around it, with its site and values.
//!
//! A marker is written as a call record of duration 0 at the current depth
//! (so the trace builders nest it under the open calls exactly as they nest
//! a call made there), followed by an extension record ([`ext::MARKER`])
//! that says the record before it is a marker, then its values
//! ([`ext::VALUE`]). Nothing is pushed on the shadow stack.

use super::future::kept_site;
use super::values::write_values;
use super::{with_state, write};
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
    with_state(|st| {
        let Some(id) = kept_site(st, site, c) else {
            return;
        };
        let (count, buf) = (st.count, st.buf);
        write(
            st,
            RawCall::pack(ticks(), st.depth, 0, id, false, kind::CALL),
        );
        if st.count == count && st.buf == buf {
            return; // not written: neither is the rest
        }
        write(st, RawCall::ext(ext::MARKER, 0, 0));
        write_values(st, values);
    })
}
