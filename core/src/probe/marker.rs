//! Instant markers: a point in time on a thread (a `tracing` event), at the
//! depth of the calls open around it, with its site and values.
//!
//! A marker is written as a call record of duration 0 at the current depth
//! (so the trace builders nest it under the open calls exactly as they nest
//! a call made there), followed by an extension record ([`ext::MARKER`])
//! that says the record before it is a marker, then its values
//! ([`ext::VALUE`]). Nothing is pushed on the shadow stack.

use super::{capture_site_id, decision, join, with_state, write, GEN_BUSY, GEN_DEAD, GEN_TAGS};
use crate::clock::ticks;
use crate::control::{self, CONTROL, ON_MASK, SESSION_ON};
use crate::record::{ext, kind, RawCall, MAX_SITES};
use crate::site::{Decision, Site};
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
        if st.gen == GEN_BUSY || st.gen == GEN_DEAD {
            return;
        }
        let (id, d) = if st.capture {
            (capture_site_id(site, false), Decision::Record)
        } else {
            let gen = control::generation(c);
            if c & SESSION_ON == 0 || (st.gen & !GEN_TAGS != gen && !join(st, gen)) {
                return;
            }
            let id = site.id();
            match decision(st, site, gen) {
                Some(d) => (id, d),
                None => return,
            }
        };
        if id >= MAX_SITES || st.hide != 0 || st.depth >= st.max_depth {
            return;
        }
        match d {
            Decision::Skip | Decision::Hide => return,
            Decision::Record if st.has_graph && st.graph == 0 => return,
            _ => {}
        }
        let (count, buf) = (st.count, st.buf);
        write(
            st,
            RawCall::pack(ticks(), st.depth, 0, id, false, kind::CALL),
        );
        if st.count == count && st.buf == buf {
            return; // not written: neither is the rest
        }
        write(st, RawCall::ext(ext::MARKER, 0, 0));
        for (i, v) in values.iter().enumerate() {
            if !v.is_absent() {
                write(
                    st,
                    RawCall::ext(ext::VALUE, v.bits, i as u64 | (v.tag as u64) << 3),
                );
            }
        }
    })
}
