//! What the records written outside a call's own exit share: the filters a
//! cold record (a whole future, a marker, a wake) obeys, and the values
//! written after a record.

use super::{
    capture_site_id, decision, join, write_other, ThreadState, GEN_BUSY, GEN_DEAD, GEN_TAGS,
};
use crate::control_word::{self, SESSION_ON};
use crate::record::{ext, RawCall, MAX_SITES};
use crate::site::{Decision, Site};
use crate::values::RawValue;

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

/// Writes the present values as extension records after the record just
/// written (slot `i` is the index of the value's name in the site's list).
#[inline(always)]
pub(super) fn write_values(st: &mut ThreadState, values: &[RawValue]) {
    for (i, v) in values.iter().enumerate() {
        if !v.is_absent() {
            write_other(
                st,
                RawCall::ext(
                    ext::VALUE,
                    v.bits(),
                    i as u64 | (v.tag() as u64) << 3 | (v.str_len() as u64) << 11,
                ),
            );
        }
    }
}
