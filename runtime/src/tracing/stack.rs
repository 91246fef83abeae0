//! The spans open on this thread, each with the probe's guard of its call.
//!
//! `tracing` enters and exits a span through two callbacks, while the probe
//! ends a call when its [`Guard`] is dropped; the guard of each entered span
//! waits here, in a fixed-capacity thread-local array (no allocation per
//! span, and no destructor to register: the array is plain data), keyed by
//! who entered it (a layer or subscriber instance: span ids are per
//! subscriber) and the span id.
//!
//! A span's values (its fields, see [`super::values`]) go with its entry:
//! the values given when a span is made wait in a small ring of pending
//! values, keyed like the entries, until the span is entered on this thread;
//! a later `record` updates the open entry (or the pending values); the
//! exit writes them after the call's record. A span made on one thread and
//! first entered on another has no values there.
//!
//! An exit pops the innermost entry with its key. Spans are normally exited
//! in the reverse order of their entries; when one is exited while spans
//! entered after it are still open (`tracing` allows it), those are ended
//! first, innermost first, at the same instant, so the shadow stack stays a
//! tree (their own exits later find nothing and do nothing). An exit with no
//! entry (a span entered while nothing recorded, or past the capacity) does
//! nothing.

use super::values::{Values, NONE};
use fgtrace_core::control_word::{CONTROL, ON_MASK};
use fgtrace_core::probe::{enter as probe_enter, enter_poll, exit_poll, exit_with_values, Guard};
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

/// Spans made on this thread whose values wait for their first entry.
const PENDING: usize = 8;

const NO_KEY: Key = Key { owner: 0, id: 0 };

struct Stack {
    len: usize,
    keys: [Key; CAPACITY],
    /// `guards[..len]` are initialised.
    guards: [MaybeUninit<Guard>; CAPACITY],
    /// The entry's site records values: its exit writes `values[i]`.
    has_values: [bool; CAPACITY],
    /// The entry is a poll of a future: its exit writes the span's id after
    /// the poll's record.
    poll: [bool; CAPACITY],
    /// The entry's callsite index (noted with its exit).
    callsites: [u32; CAPACITY],
    values: [Values; CAPACITY],
    /// Values of spans made and not yet entered (owner 0: a free slot),
    /// replaced oldest first.
    pending_keys: [Key; PENDING],
    pending: [Values; PENDING],
    pending_next: usize,
    /// Pending slots in use (none: `forget` and `take` skip the scan).
    pending_used: usize,
    /// The last spans exited on this thread and not closed here, with
    /// their callsite's index (see [`exited_before`]), oldest replaced first.
    exited: [(Key, u32); EXITED],
    exited_next: usize,
}

/// Spans remembered as exited per thread.
const EXITED: usize = 8;

std::thread_local! {
    static STACK: RefCell<Stack> = const {
        RefCell::new(Stack {
            len: 0,
            keys: [NO_KEY; CAPACITY],
            guards: [const { MaybeUninit::uninit() }; CAPACITY],
            has_values: [false; CAPACITY],
            poll: [false; CAPACITY],
            callsites: [0; CAPACITY],
            values: [NONE; CAPACITY],
            pending_keys: [NO_KEY; PENDING],
            pending: [NONE; PENDING],
            pending_next: 0,
            pending_used: 0,
            exited: [(NO_KEY, 0); EXITED],
            exited_next: 0,
        })
    };
}

impl Stack {
    fn pending_slot(&self, key: Key) -> Option<usize> {
        if self.pending_used == 0 {
            return None;
        }
        self.pending_keys.iter().position(|k| *k == key)
    }
}

/// Keeps `values` for the first entry of `id` on this thread (a span just
/// made); replaces what an earlier span with the same key left.
pub(crate) fn set_pending(owner: u32, id: u64, values: &Values) {
    let key = Key { owner, id };
    STACK.with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return;
        };
        let i = match s.pending_slot(key) {
            Some(i) => i,
            None => {
                let i = s.pending_next;
                s.pending_next = (i + 1) % PENDING;
                if s.pending_keys[i] == NO_KEY {
                    s.pending_used += 1;
                }
                s.pending_keys[i] = key;
                i
            }
        };
        s.pending[i] = *values;
    })
}

/// Drops the pending values of `id` (a span closed, or made while nothing
/// records: an earlier span's values must not be taken for it), and its
/// exit (a closed span's id may be handed to a new span).
pub(crate) fn forget(owner: u32, id: u64) {
    let key = Key { owner, id };
    STACK.with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return;
        };
        if let Some(i) = s.pending_slot(key) {
            s.pending_keys[i] = NO_KEY;
            s.pending_used -= 1;
        }
        for e in s.exited.iter_mut() {
            if e.0 == key {
                e.0 = NO_KEY;
            }
        }
    })
}

/// `id` (of callsite `callsite`) was exited on this thread, and not closed
/// since: an entry now is its second one.
#[inline]
pub(crate) fn exited_before(owner: u32, id: u64, callsite: u32) -> bool {
    let key = Key { owner, id };
    STACK.with(|s| {
        s.try_borrow()
            .is_ok_and(|s| s.exited.contains(&(key, callsite)))
    })
}

/// Updates the values of `id`: its innermost open entry on this thread and
/// its pending values (kept for its later entries). Nothing if neither.
pub(crate) fn record(owner: u32, id: u64, f: impl FnOnce(&mut Values)) {
    let key = Key { owner, id };
    STACK.with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return;
        };
        let n = s.len;
        let open = s.keys[..n].iter().rposition(|k| *k == key);
        let pending = s.pending_slot(key);
        match (open, pending) {
            (Some(i), Some(p)) => {
                f(&mut s.pending[p]);
                // Later entries of the span take the updated values too.
                s.values[i] = s.pending[p];
            }
            (Some(i), None) if s.has_values[i] => f(&mut s.values[i]),
            (None, Some(p)) => f(&mut s.pending[p]),
            _ => {}
        }
    })
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

/// Enters one poll of `site` (a span whose callsite's spans are futures)
/// and keeps its guard for the exit of `id`. A poll records no values (its
/// future does).
#[inline]
pub(crate) fn enter_poll_of(owner: u32, id: u64, site: &'static Site, callsite: u32) {
    STACK.with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return;
        };
        let i = s.len;
        if i == CAPACITY {
            return;
        }
        s.has_values[i] = false;
        s.poll[i] = true;
        s.callsites[i] = callsite;
        let g = enter_poll(site);
        s.keys[i] = Key { owner, id };
        s.guards[i].write(g);
        s.len = i + 1;
    })
}

/// Enters `site` on the probe and keeps its guard for the exit of `id`
/// (with the pending values of `id` when the site records values).
#[inline]
pub(crate) fn enter(owner: u32, id: u64, site: &'static Site, callsite: u32) {
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
        let key = Key { owner, id };
        let has = !site.values.is_empty();
        s.has_values[i] = has;
        s.poll[i] = false;
        s.callsites[i] = callsite;
        if has {
            s.values[i] = match s.pending_slot(key) {
                Some(p) => s.pending[p],
                None => NONE,
            };
        }
        // The probe reads the clock last: what follows is inside the call.
        let g = probe_enter(site);
        s.keys[i] = key;
        s.guards[i].write(g);
        s.len = i + 1;
    })
}

/// Ends the call of the innermost entry of `id` (and of any still open
/// above it, innermost first), and remembers the exit of `id`. Returns
/// whether that entry was a poll.
#[inline]
pub(crate) fn exit(owner: u32, id: u64) -> bool {
    STACK.with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return false;
        };
        let key = Key { owner, id };
        let n = s.len;
        if n == 0 {
            return false;
        }
        let at = if s.keys[n - 1] == key {
            n - 1
        } else {
            match s.keys[..n].iter().rposition(|k| *k == key) {
                Some(at) => at,
                None => return false,
            }
        };
        let poll = s.poll[at];
        // Remembered: a later entry of the same span is its second.
        let e = s.exited_next;
        s.exited_next = (e + 1) % EXITED;
        s.exited[e] = (key, s.callsites[at]);
        while s.len > at {
            let i = s.len - 1;
            s.len = i;
            // SAFETY: i < len was initialised; `len` no longer covers it, so
            // it is read out exactly once.
            let g = unsafe { s.guards[i].assume_init_read() };
            if s.poll[i] {
                exit_poll(g, s.keys[i].id);
            } else if s.has_values[i] {
                exit_with_values(g, &s.values[i]);
            } else {
                drop(g);
            }
        }
        poll
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
            enter(owner, id, &SITE, 0);
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
        enter(owner, 2, &SITE, 0);
        exit(owner, 2);
        assert_eq!(depth(), 4);
        exit(owner, 1);
        assert_eq!(depth(), 0);
    }
}
