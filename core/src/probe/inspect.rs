//! Reading this thread's shadow stack from outside the probe: the sampler's
//! signal handler, a panic hook's dump, tests. None of it is on the hot path.

use super::{with_state, F_HIDE, F_POLL};

/// For the sampler's signal handler (on this thread): the shadow-stack depth
/// and the stack pointer the innermost open traced call recorded at entry.
pub fn shadow_top() -> (u32, u64) {
    with_state(|st| {
        let d = st.depth.min(st.stack_cap);
        if d == 0 || st.frames.is_null() {
            (0, u64::MAX)
        } else {
            // SAFETY: d <= stack_cap.
            (d, unsafe { (*st.frames.add(d as usize - 1)).sp } as u64)
        }
    })
}

/// One call open on this thread's shadow stack (see [`open_frames`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenFrame {
    /// Site id.
    pub site: u32,
    /// Depth on the shadow stack (0 = outermost).
    pub depth: u32,
    /// Entry ticks.
    pub start: u64,
    /// The call is a poll of a traced future.
    pub poll: bool,
}

/// The calls open on this thread's shadow stack, innermost first (the order
/// they will end in), hidden ones (`notrace`) left out: written to the
/// front of `out` (as many as fit), their number returned. Nothing is
/// allocated while the thread's state is borrowed. Cold: for a panic hook's
/// dump of what led to the panic.
pub fn open_frames(out: &mut [OpenFrame]) -> usize {
    with_state(|st| {
        let mut k = 0;
        if st.frames.is_null() || st.capture {
            return 0;
        }
        let n = st.depth.min(st.stack_cap);
        for i in (0..n).rev() {
            if k == out.len() {
                break;
            }
            // SAFETY: i < stack_cap.
            let f = unsafe { *st.frames.add(i as usize) };
            if f.tag & F_HIDE == 0 {
                out[k] = OpenFrame {
                    site: f.site,
                    depth: i,
                    start: f.start,
                    poll: f.tag & F_POLL != 0,
                };
                k += 1;
            }
        }
        k
    })
}

/// Shadow-stack depth of the current thread.
pub fn current_depth() -> u32 {
    with_state(|st| st.depth)
}
