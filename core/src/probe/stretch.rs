//! Records that go out together: a call's record and what follows it (its
//! values, a poll's future id) in one stretch, with interrupts masked on a
//! board, so that no traced interrupt handler's record lands between them.
//! Used by the probes of calls with values and of futures.

use super::{exit, with_state, write_other, Guard, ThreadState};
use crate::record::{ext, RawCall};

/// Ends the call of `g` and, if its record was written, runs `then` (which
/// writes at most `extra` records after it: its values, a poll's future id).
///
/// On a board the record and what follows go in one stretch with
/// interrupts masked, as a counted call's record and counters do: a traced
/// interrupt handler that ran between them would write its own record
/// there, and what follows would read as the handler's. Room for all of
/// them is made first (a buffer close to full is handed over, with
/// interrupts as they were), so that no handoff runs masked and they go out
/// together. Elsewhere nothing is masked (a host's signal handlers make no
/// traced calls).
#[inline(always)]
pub(super) fn exit_then(g: &mut Guard, extra: usize, then: impl FnOnce(&mut ThreadState)) {
    let (slot, serial) = (g.slot(), g.serial());
    // The plain guard's own drop does nothing now.
    g.disarm();
    exit_slot_then(slot, serial, extra, then);
}

/// [`exit_then`] for the fields of a guard (slot, serial) taken already.
#[inline(always)]
fn exit_slot_then(slot: u32, serial: u32, extra: usize, then: impl FnOnce(&mut ThreadState)) {
    // The record, what follows it and, for a counted call on a board, its counters.
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    let records = 1
        + extra
        + if slot & super::COUNTED != 0 {
            1 + super::platform::MORE_COUNTERS
        } else {
            0
        };
    #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
    let records = 1 + extra;
    one_stretch(records, || {
        let before = with_state(|st| (st.count, st.buf));
        exit(slot, serial);
        #[cfg(test)]
        super::irq_sim::point();
        with_state(|st| {
            if (st.count, st.buf) != before {
                then(st);
            }
        });
    });
}

/// Ends one poll of the future `id` (see [`ext::FUTURE`]), whose guard had
/// `slot` (not 0) and `serial`: the poll's record, then the future's id
/// after it.
#[inline(never)]
pub(super) fn exit_poll_of(slot: u32, serial: u32, id: u64) {
    let then = |st: &mut ThreadState| write_other(st, RawCall::ext(ext::FUTURE, id, 0));
    // On a host (tests aside, which check the boards' masked stretch) the
    // record and the id are written in one visit to the thread's state.
    #[cfg(not(any(test, all(feature = "irq-mask", not(feature = "std")))))]
    super::exit::exit_and_then(slot, serial, then);
    #[cfg(any(test, all(feature = "irq-mask", not(feature = "std"))))]
    exit_slot_then(slot, serial, 1, then);
}

/// Ends one poll `g` of a future whose id its caller keeps (a `tracing`
/// span's, see [`enter_poll`](super::enter_poll)): the poll's record, then
/// `id` after it, so that a reader knows the future each poll belongs to.
#[inline]
pub fn exit_poll(g: Guard, id: u64) {
    let (slot, serial) = (g.slot(), g.serial());
    // Its fields are taken: its own drop would end the call again.
    core::mem::forget(g);
    if slot != 0 {
        exit_poll_of(slot, serial, id);
    }
}

/// Runs `write` (which writes at most `records` records) with interrupts
/// masked on a board, after making room for them (see [`exit_then`]), and
/// hands a full buffer over after; elsewhere, just runs it.
#[inline(always)]
pub(super) fn one_stretch(records: usize, write: impl FnOnce()) {
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    with_state(|st| {
        if st.count + records > st.limit && !st.buf.is_null() {
            super::handoff(st);
        }
    });
    let _ = records;
    let saved = mask();
    write();
    unmask(saved);
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    with_state(|st| {
        if st.count >= st.limit && !st.buf.is_null() {
            super::handoff(st);
        }
    });
}

/// Masks interrupts on a board (see [`exit_then`]); returns what
/// [`unmask`] restores. Nothing elsewhere.
#[inline(always)]
fn mask() -> usize {
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    // SAFETY: the platform's function, paired with `unmask`.
    return unsafe { super::platform::__fgtrace_irq_save() };
    #[cfg(test)]
    return super::irq_sim::mask() as usize;
    #[allow(unreachable_code)]
    0
}

/// Restores what [`mask`] returned.
#[inline(always)]
fn unmask(saved: usize) {
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    // SAFETY: as in `mask`.
    unsafe {
        super::platform::__fgtrace_irq_restore(saved)
    };
    #[cfg(test)]
    super::irq_sim::unmask(saved as u32);
    let _ = saved;
}
