//! The exit paths and the record writer: popping a guard's frame (or
//! finding it gone), the call's record and its extension records, the
//! writer's re-entrancy guard, and handing a full buffer over. Last, the
//! exit of a call whose entry read a counter.

#[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
use super::busy;
#[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
use super::{guard_word, platform};
use super::{
    hooks, with_state, ShadowFrame, ThreadState, COUNTED, F_ALLOC, F_GRAPH, F_HIDE, F_POLL,
    GEN_BUSY, GEN_DEAD, SERIAL_MASK,
};
#[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
use crate::clock::ticks;
use crate::control_word::{CONTROL, ON_MASK};
use crate::record::{ext, kind, AllocCounts, RawCall};
use core::ptr;
use core::sync::atomic::{compiler_fence, Ordering::*};

// Out of line: inlined too, the exit's registers would make every traced fn
// save more of them in its prologue, which every call pays, recording or not
// (checks/probe-cost counts 35 instructions per call off that way, 27 so).
// Boards have their own (`board::exit`).
#[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
#[inline(never)]
pub(super) fn exit(slot: u32, serial: u32) {
    let end = ticks();
    with_state(|st| exit_in(st, slot, serial, end));
}

/// Ends the call of a guard's `slot` and `serial` as [`exit`] does, and runs
/// `then` on the thread's state right after the call's record, if it was
/// written (a poll's future id follows it): one visit to the state.
#[cfg(not(any(test, all(feature = "irq-mask", not(feature = "std")))))]
#[inline(always)]
pub(super) fn exit_and_then(slot: u32, serial: u32, then: impl FnOnce(&mut ThreadState)) {
    let end = ticks();
    with_state(|st| {
        let before = (st.count, st.buf);
        exit_in(st, slot, serial, end);
        if (st.count, st.buf) != before {
            then(st);
        }
    });
}

/// A board's counted call: the counter first, right after the clock (see
/// `push_counted`), then the rest.
#[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
#[inline(never)]
// The state last: the board's plain exit calls it with the guard's fields
// still in the argument registers they came in.
pub(super) fn exit_board_counted(slot: u32, serial: u32, end: u64, st: &mut ThreadState) {
    // All counters with interrupts masked (see `push_counted`).
    // SAFETY: the platform's functions, paired below.
    let saved = unsafe { platform::__fgtrace_irq_save() };
    // SAFETY: as in `capture_push`.
    let read = unsafe { st.counter.as_ref() }.map(|c| unsafe { (c.read)(c) });
    let mut more = [0; platform::MORE_COUNTERS];
    // SAFETY: the platform's function, for the slot this guard pushed.
    let n = unsafe { platform::__fgtrace_more_counters(slot & !COUNTED, true, &mut more) };
    // SAFETY: as above.
    unsafe { platform::__fgtrace_irq_restore(saved) };
    let n = n.min(platform::MORE_COUNTERS);
    // Room for the call's record and all its counters in this buffer, so
    // they arrive together (the board hands over a buffer this close to
    // full, see `Hooks::handoff`).
    if st.count + 2 + n > st.limit && !st.buf.is_null() {
        handoff(st);
    }
    // SAFETY: the platform's functions, paired below.
    let saved = unsafe { platform::__fgtrace_irq_save() };
    let count = st.count;
    exit_counted_read(st, slot & !COUNTED, serial, end, read);
    if read.is_some() && st.count != count {
        // The call's record and its first counter were written: the further
        // counters follow them, numbered after it.
        for (k, &d) in more[..n].iter().enumerate() {
            write_other(st, RawCall::ext(ext::COUNTER, d, k as u64 + 1));
        }
    }
    // SAFETY: as above.
    unsafe { platform::__fgtrace_irq_restore(saved) };
    if st.count >= st.limit && !st.buf.is_null() {
        handoff(st);
    }
}

/// A board's exit other than [`exit_fast`]'s (out of line, so that the
/// common exit saves few registers).
#[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
#[inline(never)]
// The state last, as in `exit_board_counted`.
pub(super) fn exit_board(slot: u32, serial: u32, end: u64, st: &mut ThreadState) {
    if st.count >= st.limit && !st.buf.is_null() {
        handoff(st);
    }
    // SAFETY: the platform's functions, paired below.
    let saved = unsafe { platform::__fgtrace_irq_save() };
    exit_in(st, slot, serial, end);
    // SAFETY: as above.
    unsafe { platform::__fgtrace_irq_restore(saved) };
    if st.count >= st.limit && !st.buf.is_null() {
        handoff(st);
    }
}

#[inline(always)]
fn exit_in(st: &mut ThreadState, slot: u32, serial: u32, end: u64) {
    if st.depth == slot {
        // SAFETY: slot <= depth <= stack_cap.
        let f = unsafe { *st.frames.add(slot as usize - 1) };
        if f.tag >> 8 == frame_serial(serial) {
            st.depth = slot - 1;
            return finish(st, f, slot - 1, end);
        }
    }
    exit_other(st, slot, serial, end)
}

/// The serial a guard's frame carries: the guard's own, or on boards 0 for
/// a plain guard, whose serial word says its session instead (see `board`).
#[inline(always)]
fn frame_serial(serial: u32) -> u32 {
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    {
        guard_word::frame_serial(serial)
    }
    #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
    {
        serial
    }
}

/// Everything but the matching top frame: a counted capture call, leaked
/// guards above this one, or a stale guard whose frame is gone.
#[inline(never)]
fn exit_other(st: &mut ThreadState, slot: u32, serial: u32, end: u64) {
    if slot & COUNTED != 0 {
        return exit_counted(st, slot & !COUNTED, serial, end);
    }
    match pop_to(st, slot, serial) {
        Some(f) => finish(st, f, slot - 1, end),
        None => lost_exit(st, serial),
    }
}

/// A guard whose frame is gone (another exit popped it, or a call reuses
/// its slot): its call cannot be recorded. If this state's session pushed
/// it, the call is lost and counted with the state's other losses
/// (`dropped`); a guard pushed before the state joined its session (a call
/// begun in an earlier session, or in another state, a capture's) is no
/// loss of this one.
#[cold]
#[inline(never)]
fn lost_exit(st: &mut ThreadState, serial: u32) {
    if pushed_in_session(st, serial) {
        write_dropped(st);
    }
}

/// The guard with this serial was pushed since the state joined its
/// session: its serial comes after `joined_serial`, up to `serial`
/// (serials wrap at 24 bits). On boards a plain guard carries its
/// session's generation instead, compared with the state's.
#[inline(always)]
fn pushed_in_session(st: &ThreadState, serial: u32) -> bool {
    let since_join = |serial: u32| serial_since_join(st, serial);
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    {
        guard_word::pushed_in_session(st.gen, serial, since_join)
    }
    #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
    {
        since_join(serial)
    }
}

/// A frame serial the state issued since it joined its session.
#[inline(always)]
fn serial_since_join(st: &ThreadState, serial: u32) -> bool {
    let since = serial.wrapping_sub(st.joined_serial) & SERIAL_MASK;
    let pushed = st.serial.wrapping_sub(st.joined_serial) & SERIAL_MASK;
    since != 0 && since <= pushed
}

/// Pops frames down to `slot` if the frame there is this guard's (frames
/// above it belong to leaked guards); `None` for a stale guard.
#[cold]
fn pop_to(st: &mut ThreadState, slot: u32, serial: u32) -> Option<ShadowFrame> {
    if st.depth < slot {
        return None; // the frame is gone (thread state was reset)
    }
    // SAFETY: slot <= depth <= stack_cap.
    let f = unsafe { *st.frames.add(slot as usize - 1) };
    if f.tag >> 8 != frame_serial(serial) {
        return None; // another call reuses the slot: not ours to pop
    }
    while st.depth > slot {
        st.depth -= 1;
        // SAFETY: depth < stack_cap.
        let tag = unsafe { (*st.frames.add(st.depth as usize)).tag };
        unflag(st, tag);
    }
    st.depth = slot - 1;
    Some(f)
}

#[inline(always)]
fn unflag(st: &mut ThreadState, tag: u32) {
    if tag & F_HIDE != 0 {
        st.hide -= 1;
    }
    if tag & F_GRAPH != 0 {
        st.graph -= 1;
    }
}

/// The popped frame's record.
#[inline(always)]
fn finish(st: &mut ThreadState, f: ShadowFrame, depth: u32, end: u64) {
    if f.tag & (F_HIDE | F_GRAPH | F_ALLOC) != 0 {
        return finish_flagged(st, f, depth, end, None);
    }
    let k = if f.tag & F_POLL != 0 {
        kind::POLL
    } else {
        kind::CALL
    };
    let dur = end.wrapping_sub(f.start);
    if dur < st.threshold {
        return;
    }
    write(
        st,
        RawCall::pack(f.start, depth, dur, f.site, panicking(), k),
    );
}

/// A popped frame with flags: a hidden or graph-function frame, or one the
/// counting allocator counted in, or a counted session call (`counter`: its
/// delta). Its allocation figures (callees included) go to its parent frame;
/// the figures and the counter delta follow its record as extension records.
#[inline(never)]
fn finish_flagged(
    st: &mut ThreadState,
    f: ShadowFrame,
    depth: u32,
    end: u64,
    counter: Option<u64>,
) {
    unflag(st, f.tag);
    let counts = if f.tag & F_ALLOC != 0 && !st.allocs.is_null() {
        // SAFETY: depth < stack_cap, `allocs` has stack_cap entries.
        let c = unsafe { *st.allocs.add(depth as usize) };
        if depth > 0 {
            let i = depth as usize - 1;
            // SAFETY: i < depth < stack_cap.
            let (pf, pa) = unsafe { (&mut *st.frames.add(i), &mut *st.allocs.add(i)) };
            if pf.tag & F_ALLOC == 0 {
                *pa = c;
                pf.tag |= F_ALLOC;
            } else {
                pa.add(&c);
            }
        }
        Some(c)
    } else {
        None
    };
    if f.tag & F_HIDE != 0 {
        return;
    }
    let k = if f.tag & F_POLL != 0 {
        kind::POLL
    } else {
        kind::CALL
    };
    let dur = end.wrapping_sub(f.start);
    if dur < st.threshold {
        return;
    }
    let (count, buf) = (st.count, st.buf);
    write(
        st,
        RawCall::pack(f.start, depth, dur, f.site, panicking(), k),
    );
    if st.count == count && st.buf == buf {
        return; // the call's record was not written: neither are its figures
    }
    if let Some(d) = counter {
        write_other(st, RawCall::ext(ext::COUNTER, d, 0));
    }
    let Some(c) = counts else {
        return;
    };
    if c.allocs != 0 || c.alloc_bytes != 0 {
        write_other(st, RawCall::ext(ext::ALLOCS, c.allocs, c.alloc_bytes));
    }
    if c.frees != 0 || c.freed_bytes != 0 {
        write_other(st, RawCall::ext(ext::FREES, c.frees, c.freed_bytes));
    }
    if c.reallocs != 0 {
        write_other(st, RawCall::ext(ext::REALLOCS, c.reallocs, 0));
    }
}

/// Adds what `add` says to the innermost open call of this thread, for the
/// counting allocator ([`crate::alloc`]). Does nothing while fgtrace's own
/// code runs on the thread (busy: its allocations are never counted), on
/// fgtrace's own threads, outside any traced call, or when nothing records.
/// No allocation, no lock; `add` runs on a plain per-thread entry.
#[inline]
pub(crate) fn count_alloc(add: impl FnOnce(&mut AllocCounts)) {
    if CONTROL.load(Relaxed) & ON_MASK == 0 {
        return;
    }
    with_state(|st| {
        if st.gen == GEN_BUSY || st.gen == GEN_DEAD || st.allocs.is_null() {
            return;
        }
        // SAFETY (volatile): as in `write`, a signal handler may move it.
        let d = unsafe { ptr::read_volatile(&st.depth) };
        if d == 0 || d > st.stack_cap {
            return;
        }
        let i = d as usize - 1;
        // SAFETY: i < stack_cap; both arrays have stack_cap entries.
        let (f, a) = unsafe { (&mut *st.frames.add(i), &mut *st.allocs.add(i)) };
        let tag = unsafe { ptr::read_volatile(&f.tag) };
        if tag & F_ALLOC == 0 {
            *a = AllocCounts::ZERO;
            unsafe { ptr::write_volatile(&mut f.tag, tag | F_ALLOC) };
        }
        add(a);
    })
}

#[inline(always)]
fn panicking() -> bool {
    #[cfg(any(feature = "std", test))]
    {
        std::thread::panicking()
    }
    #[cfg(not(any(feature = "std", test)))]
    {
        false
    }
}

/// Appends a call's or a poll's record.
#[inline(always)]
pub(super) fn write(st: &mut ThreadState, rec: RawCall) {
    write_weighed(st, rec, 0)
}

/// Appends a record that is not a call (an extension record, a whole
/// future, a marker's extension), counted in `non_calls` with its weight
/// ([`RawCall::non_calls`]) once written: a flight recorder's ring
/// overwrites these as it does calls, and whoever counts the overwritten
/// calls subtracts them. At each call site the record's kind is known, so
/// the weight is a constant.
#[inline(always)]
pub(super) fn write_other(st: &mut ThreadState, rec: RawCall) {
    write_weighed(st, rec, rec.non_calls() as usize)
}

/// Appends a record of `non_calls` weight ([`write`], [`write_other`]).
///
/// Re-entrancy: a signal or interrupt handler on this thread may run traced
/// code at any instruction. A write marks itself in progress (`writing`);
/// a record made while one is (or while a full buffer waits for its
/// handoff) is dropped and counted in `dropped`, never written over another
/// or past the buffer. A handler that runs before the mark is set makes its
/// whole write first; the interrupted write then reads the count and buffer
/// afresh.
#[inline(always)]
fn write_weighed(st: &mut ThreadState, rec: RawCall, non_calls: usize) {
    if st.buf.is_null() {
        return;
    }
    // On boards, `exit` masks interrupts around this (and hands a full
    // buffer over itself, after unmasking).
    // SAFETY (volatile): plain fields of this thread's state, read and
    // written as the instructions a signal handler may interrupt.
    if unsafe { ptr::read_volatile(&st.writing) } {
        return write_dropped(st);
    }
    unsafe { ptr::write_volatile(&mut st.writing, true) };
    compiler_fence(SeqCst);
    let i = unsafe { ptr::read_volatile(&st.count) };
    if i >= st.limit {
        // A full buffer whose handoff has not run yet: this interrupted it.
        unsafe { ptr::write_volatile(&mut st.writing, false) };
        return write_dropped(st);
    }
    // SAFETY: i & mask < capacity (straight: i < limit <= capacity; ring: mask).
    unsafe { st.buf.add(i & st.mask).write(rec) };
    unsafe { ptr::write_volatile(&mut st.count, i + 1) };
    if non_calls != 0 {
        st.non_calls = st.non_calls.wrapping_add(non_calls);
        // SAFETY: never null (see the field), alive while the buffer is.
        unsafe { (*st.non_calls_out).store(st.non_calls, Relaxed) };
    }
    // SAFETY: `published` is alive while `buf` is set.
    unsafe { (*st.published).store(i + 1, Release) };
    compiler_fence(SeqCst);
    unsafe { ptr::write_volatile(&mut st.writing, false) };
    #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
    if i + 1 >= st.limit {
        handoff(st);
    }
}

/// A record made inside another write (see `write`): counted, not written.
#[cold]
#[inline(never)]
fn write_dropped(st: &mut ThreadState) {
    // SAFETY: set with the buffer by the layer above.
    if let Some(d) = unsafe { st.dropped.as_ref() } {
        d.fetch_add(1, Relaxed);
    }
}

/// A full buffer: [`Hooks::handoff`] swaps in the next one.
///
/// On boards the hook runs with the thread not busy and interrupts as they
/// were: it swaps in a second buffer with interrupts masked, then sends the
/// full one while a traced interrupt handler records into the new one (the
/// sink's own calls, if it is traced, are recorded too).
#[cold]
#[inline(never)]
pub(super) fn handoff(st: &mut ThreadState) {
    match hooks() {
        #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
        Some(h) => (h.handoff)(st),
        #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
        Some(h) => busy(st, |st| (h.handoff)(st)),
        None => {
            st.buf = ptr::null_mut();
            // The board's plain exit checks only the limit.
            #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
            {
                st.limit = 0;
            }
        }
    }
}

/// A counted call's exit: the counter first, then what `exit` does. Capture
/// frames are never hidden or graph roots (captures have no filters).
#[inline(never)]
fn exit_counted(st: &mut ThreadState, slot: u32, serial: u32, end: u64) {
    // SAFETY: as in `capture_push`.
    let read = unsafe { st.counter.as_ref() }.map(|c| unsafe { (c.read)(c) });
    exit_counted_read(st, slot, serial, end, read)
}

/// [`exit_counted`] once the counter is read (`None`: the thread has none).
#[inline(always)]
fn exit_counted_read(st: &mut ThreadState, slot: u32, serial: u32, end: u64, read: Option<u64>) {
    let now = read.unwrap_or(0);
    let Some(f) = pop_to(st, slot, serial) else {
        return lost_exit(st, serial);
    };
    if !st.capture {
        // A session: the delta follows the call's record (none if the
        // thread lost its counter meanwhile).
        let delta = read.map(|v| v.wrapping_sub(f.ctr));
        return finish_flagged(st, f, slot - 1, end, delta);
    }
    if !st.side.is_null() && st.count < st.limit {
        // SAFETY: `write` puts this record at index `count` < limit, and
        // `side` has `limit` slots.
        unsafe { *st.side.add(st.count) = now.wrapping_sub(f.ctr) };
    }
    finish(st, f, slot - 1, end);
}
