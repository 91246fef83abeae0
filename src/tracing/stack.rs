//! The spans open on this thread, each with the probe's guard of its call.
//!
//! `tracing` enters and exits a span through two callbacks, while the probe
//! ends a call when its [`Guard`] is dropped; the guard of each entered span
//! waits here, in a fixed-capacity thread-local array (no allocation per
//! span, and no destructor to register: the array is plain data), keyed by
//! who entered it (a layer or subscriber instance: span ids are per
//! subscriber) and the span id.
//!
//! An exit pops the innermost entry with its key. Spans are normally exited
//! in the reverse order of their entries; when one is exited while spans
//! entered after it are still open (`tracing` allows it), those are ended
//! first, innermost first, at the same instant, so the shadow stack stays a
//! tree (their own exits later find nothing and do nothing). An exit with no
//! entry (a span entered while nothing recorded, or past the capacity) does
//! nothing.

use fgtrace_core::control::{CONTROL, ON_MASK};
use fgtrace_core::probe::{enter as probe_enter, Guard};
use fgtrace_core::site::Site;
use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// Spans open at once per thread; deeper ones are not recorded (their
/// callees still are).
pub(crate) const CAPACITY: usize = 128;

#[derive(Clone, Copy, PartialEq, Eq)]
struct Key {
    owner: u32,
    id: u64,
}

struct Stack {
    len: usize,
    keys: [Key; CAPACITY],
    /// `guards[..len]` are initialised.
    guards: [MaybeUninit<Guard>; CAPACITY],
}

std::thread_local! {
    static STACK: RefCell<Stack> = const {
        RefCell::new(Stack {
            len: 0,
            keys: [Key { owner: 0, id: 0 }; CAPACITY],
            guards: [const { MaybeUninit::uninit() }; CAPACITY],
        })
    };
}

/// A fresh owner tag for a layer or subscriber instance (never 0).
pub(crate) fn new_owner() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Relaxed).max(1)
}

/// Anything records (a session or a capture): the probe's own first test.
/// While nothing does, span entries cost this load and a branch.
#[inline(always)]
pub(crate) fn recording() -> bool {
    CONTROL.load(Relaxed) & ON_MASK != 0
}

/// Enters `site` on the probe and keeps its guard for the exit of `id`.
#[inline]
pub(crate) fn enter(owner: u32, id: u64, site: &'static Site) {
    STACK.with(|s| {
        // Borrowed already: a span entered from inside this module (the
        // probe's cold paths run fgtrace's own code): not recorded.
        let Ok(mut s) = s.try_borrow_mut() else {
            return;
        };
        let i = s.len;
        if i == CAPACITY {
            return;
        }
        // The probe reads the clock last: what follows is inside the call.
        let g = probe_enter(site);
        s.keys[i] = Key { owner, id };
        s.guards[i].write(g);
        s.len = i + 1;
    })
}

/// Ends the call of the innermost entry of `id` (and of any still open
/// above it, innermost first).
#[inline]
pub(crate) fn exit(owner: u32, id: u64) {
    STACK.with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return;
        };
        let key = Key { owner, id };
        let n = s.len;
        if n == 0 {
            return;
        }
        let at = if s.keys[n - 1] == key {
            n - 1
        } else {
            match s.keys[..n].iter().rposition(|k| *k == key) {
                Some(at) => at,
                None => return,
            }
        };
        while s.len > at {
            let i = s.len - 1;
            s.len = i;
            // SAFETY: i < len was initialised; `len` no longer covers it, so
            // it is read out exactly once.
            let g = unsafe { s.guards[i].assume_init_read() };
            drop(g);
        }
    })
}

/// Entries open on this thread (tests).
#[cfg(test)]
pub(crate) fn depth() -> usize {
    STACK.with(|s| s.borrow().len)
}

#[cfg(test)]
mod tests {
    use super::*;

    static SITE: Site = Site::new("s", "m", "f.rs", 1, false);

    #[test]
    fn exits_pop_to_their_entry_and_capacity_is_kept() {
        let owner = new_owner();
        // Past the capacity: the extra entries are not kept.
        for id in 1..=CAPACITY as u64 + 2 {
            enter(owner, id, &SITE);
        }
        assert_eq!(depth(), CAPACITY);
        // Unknown ids, and another owner's, change nothing.
        exit(owner, CAPACITY as u64 + 2);
        exit(new_owner(), 3);
        assert_eq!(depth(), CAPACITY);
        // An exit below the top ends everything above it.
        exit(owner, 6);
        assert_eq!(depth(), 5);
        exit(owner, 5);
        assert_eq!(depth(), 4);
        // The innermost entry of a repeated id goes first.
        enter(owner, 2, &SITE);
        exit(owner, 2);
        assert_eq!(depth(), 4);
        exit(owner, 1);
        assert_eq!(depth(), 0);
    }
}
