//! The board probe (`irq-mask`, no `std`): where each hart's state lives,
//! and the common entry and exit, short enough to sit near the floor of two
//! clock reads, a push, a pop and one 16-byte record.
//!
//! * **State.** Each hart's [`ThreadState`] and shadow stack are one static
//!   slot here ([`STATES`], [`HARTS`] of them), found by the platform's hart
//!   index (`__fgtrace_hart`); hart 0's is a constant address, so the common
//!   case is one index read and one branch, no arithmetic. The same static
//!   starts with the byte that says a session records ([`on`]): a traced
//!   fn's first test, whose address is hart 0's state's too.
//! * **Entry** (`enter_board`): one compare of the site's cached decision
//!   word with the hart's `fast` word (`generation << 3 | Record` while the
//!   hart's session state allows the plain path: joined, no per-call
//!   counter, no threshold, no depth limit, no count-only sites; otherwise a
//!   value no decision word takes), one bound check, then the frame: site,
//!   no flags, stack pointer, clock. No serial: nested interrupt handlers
//!   leave the shadow stack as they found it, and a board unwinds no stack
//!   (`panic = "abort"`), so a guard's frame is the top one when it drops;
//!   a guard whose frame is not on top takes the general path, which finds
//!   its frame by slot (the fast frames' tag is 0, their guards' serial
//!   the `FAST0` bit on the first hart, `FAST` on others, with serial 0).
//! * **Exit** (`exit_fast`): with interrupts masked, the pop and the
//!   record (so an interrupt's records nest in exit order), then the
//!   buffer's handoff with interrupts as they were, as before. Anything
//!   else (a counted call, a frame not on top, a full buffer) takes the
//!   general board exit. A guard the first hart's plain entry pushed
//!   (`FAST0`, the sign bit) exits through `exit_first`: no hart lookup,
//!   the state at a constant address. The record is written in the
//!   board's layout of a plain call (`RawCall::board_call`: word 0 is
//!   `start << 10 | depth`), which packs in two instructions.
use super::{
    enter_other, platform, stack_pointer, Frame, Guard, ThreadState, COUNTED, SERIAL_MASK,
};
use crate::clock::ticks;
use crate::control::CONTROL;
use crate::record::{RawCall, DUR_MAX, MAX_DEPTH};
use crate::site::{Decision, Site};
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::sync::atomic::{compiler_fence, AtomicBool, Ordering::*};

/// Harts with a state of their own (a hart index at or past this shares the
/// last one's: give each hart its own by raising it).
pub const HARTS: usize = 4;
/// Shadow-stack depth per hart.
pub const STACK_DEPTH: usize = 64;
const _: () = assert!(STACK_DEPTH <= MAX_DEPTH as usize + 1);
/// `ThreadState::fast` while the hart's calls must take the general path.
pub const FAST_OFF: u32 = u32::MAX;
/// A guard's serial bit: pushed by `enter_board` on any hart but the first
/// (its frame's tag is 0).
pub(super) const FAST: u32 = 1 << 30;
/// A guard's serial bit: pushed by `enter_board` on the first hart, whose
/// exit the guard's drop inlines (the sign bit: one branch tells it).
pub(super) const FAST0: u32 = 1 << 31;

/// The guard's serial says its frame was pushed by the first hart's plain
/// entry.
#[inline(always)]
pub(super) fn is_first(serial: u32) -> bool {
    (serial as i32) < 0
}

/// One hart's state and shadow stack.
#[repr(C)]
pub struct Hart {
    st: UnsafeCell<ThreadState>,
    frames: UnsafeCell<[Frame; STACK_DEPTH]>,
}

// SAFETY: each slot is used by its own hart (and that hart's interrupt
// handlers, which the probe's slot reservation and masking make safe).
unsafe impl Sync for Hart {}

/// Every hart's state, after the byte that says a session records: one
/// static, so that the traced fn's first test and its hart-0 state share
/// one base address.
#[repr(C)]
pub struct States {
    on: AtomicBool,
    harts: [Hart; HARTS],
}

impl core::ops::Index<usize> for States {
    type Output = Hart;
    fn index(&self, i: usize) -> &Hart {
        &self.harts[i]
    }
}

impl States {
    /// Every hart's slot.
    pub fn iter(&self) -> core::slice::Iter<'_, Hart> {
        self.harts.iter()
    }
}

/// Every hart's state.
pub static STATES: States = States {
    on: AtomicBool::new(false),
    harts: [const {
        Hart {
            st: UnsafeCell::new(ThreadState::EMPTY),
            frames: UnsafeCell::new([Frame::ZERO; STACK_DEPTH]),
        }
    }; HARTS],
};

/// A session records: what a board's probe tests first (the runtime sets
/// it with the control word's session bit).
#[inline(always)]
pub fn on() -> bool {
    STATES.on.load(Relaxed)
}

/// Says whether a session records (with `control::session_on`/`off`).
pub fn set_on(on: bool) {
    STATES.on.store(on, Release);
}

/// The running hart's slot.
#[inline(always)]
pub fn hart() -> &'static Hart {
    // SAFETY: the platform's function, no preconditions.
    let h = unsafe { platform::__fgtrace_hart() };
    if h == 0 {
        &STATES[0]
    } else {
        other_hart(h)
    }
}

/// Any hart but the first (out of line, so that the first's slot stays a
/// constant address rather than an index computation).
#[cold]
#[inline(never)]
fn other_hart(h: usize) -> &'static Hart {
    &STATES[h.min(HARTS - 1)]
}

impl Hart {
    /// The hart's state.
    pub fn state(&self) -> *mut ThreadState {
        self.st.get()
    }
    /// The hart's shadow stack ([`STACK_DEPTH`] frames).
    pub fn frames(&self) -> *mut Frame {
        self.frames.get() as *mut Frame
    }
}

/// Makes every hart's calls take the general path until it joins again (a
/// session starts or stops: the fast word of the last one must not match).
pub fn reset_fast() {
    for h in STATES.iter() {
        // SAFETY: a plain word the hot path only reads; a probe that read
        // the old value finishes its push into the old session's state,
        // which the runtime is about to reset anyway.
        unsafe { core::ptr::write_volatile(&mut (*h.st.get()).fast, FAST_OFF) };
    }
}

/// After a join: the plain path applies while nothing a general push decides
/// can differ (no per-call counter, no count-only table, no threshold, no
/// depth limit below the stack, no graph functions or hidden subtrees).
pub(super) fn set_fast(st: &mut ThreadState, gen: u32) {
    let plain = st.counter.is_null()
        && st.count_only.is_null()
        && st.threshold == 0
        && st.max_depth >= st.stack_cap
        && st.stack_cap as usize <= STACK_DEPTH
        && !st.has_graph
        && st.hide == 0
        && st.graph == 0
        && !st.buf.is_null();
    st.fast = if plain {
        gen << 3 | Decision::Record as u32
    } else {
        FAST_OFF
    };
}

/// A board's entry once the control word says something records.
#[inline(always)]
pub(super) fn enter_board(site: &'static Site) -> Guard {
    // SAFETY: the platform's function, no preconditions.
    let h = unsafe { platform::__fgtrace_hart() };
    if h == 0 {
        enter_on(&STATES[0], site, FAST0)
    } else {
        enter_other_hart(h, site)
    }
}

/// `enter_board` on any hart but the first: out of line, so that a traced
/// fn keeps no value in a saved register around a call for it.
#[cold]
#[inline(never)]
fn enter_other_hart(h: usize, site: &'static Site) -> Guard {
    enter_on(&STATES[h.min(HARTS - 1)], site, FAST)
}

/// `fast`: the guard's serial bit for this hart ([`FAST0`] or [`FAST`]).
#[inline(always)]
fn enter_on(h: &'static Hart, site: &'static Site, fast: u32) -> Guard {
    // SAFETY: this hart's own state (see `Hart`).
    let st = unsafe { &mut *h.st.get() };
    if site.decision_word() == st.fast {
        let d = st.depth;
        if (d as usize) < STACK_DEPTH {
            // Reserved before it is filled, as in `push`: a handler that
            // interrupts from here on pushes above it, and pops back.
            st.depth = d + 1;
            compiler_fence(SeqCst);
            // SAFETY: d < STACK_DEPTH, the hart's own frames (`stack_cap` is
            // STACK_DEPTH whenever `fast` matches, see `set_fast`).
            let f = unsafe { &mut *(h.frames.get() as *mut Frame).add(d as usize) };
            // The site and a zero tag (no flags, no serial) in one store:
            // `tag` follows `site` in the frame.
            // SAFETY: `site` and `tag` are adjacent u32s at an 8-byte
            // aligned offset (`Frame` is `repr(C)`: u64, usize, u64, u32, u32).
            unsafe {
                (core::ptr::addr_of_mut!(f.site) as *mut u64).write(site_word(site.id_decided()))
            };
            f.sp = stack_pointer();
            compiler_fence(Release);
            f.start = ticks();
            return Guard {
                slot: d + 1,
                serial: fast,
                _not_send: PhantomData,
            };
        }
    }
    enter_other(site, CONTROL.load(Relaxed), stack_pointer(), st, 0)
}

/// `site` then a zero `tag`, as one u64 in memory order.
#[inline(always)]
fn site_word(id: u32) -> u64 {
    // Sign-extended on 64-bit targets: ids are below `MAX_SITES` (2^18), so
    // this is the zero-extended id, and 64-bit RISC-V needs no instructions
    // for it (32-bit targets need none to zero-extend).
    let id = if cfg!(target_pointer_width = "64") {
        id as i32 as i64 as u64
    } else {
        id as u64
    };
    if cfg!(target_endian = "little") {
        id
    } else {
        id << 32
    }
}

/// A board's exit, the clock read: the first hart's state is a constant
/// address, so its common exit needs no register saved around a call.
#[inline(always)]
pub(super) fn exit_board_any(slot: u32, serial: u32, end: u64) {
    // SAFETY: the platform's function, no preconditions.
    let h = unsafe { platform::__fgtrace_hart() };
    if h == 0 {
        exit_on(&STATES[0], slot, serial, end)
    } else {
        exit_other_hart(h, slot, serial, end)
    }
}

/// `exit_board_any` on any hart but the first.
#[cold]
#[inline(never)]
fn exit_other_hart(h: usize, slot: u32, serial: u32, end: u64) {
    exit_on(&STATES[h.min(HARTS - 1)], slot, serial, end)
}

#[inline(always)]
fn exit_on(h: &'static Hart, slot: u32, serial: u32, end: u64) {
    // SAFETY: this hart's own state.
    let st = unsafe { &mut *h.st.get() };
    if serial & (FAST | FAST0) != 0 && exit_fast(st, h.frames(), slot, end) {
        return;
    }
    exit_general(st, slot, serial, end)
}

/// A board's exit, inlined into the traced fn: the clock, then, for a guard
/// the first hart's plain entry pushed, the plain exit on the first hart's
/// state (a constant address: no hart lookup; a call does not move between
/// harts), or else [`exit_end`]'s, out of line.
#[inline(always)]
pub(super) fn exit_inline(slot: u32, serial: u32) {
    let end = ticks();
    if is_first(serial) {
        let h = &STATES[0];
        // SAFETY: this hart's own state.
        if exit_fast(unsafe { &mut *h.st.get() }, h.frames(), slot, end) {
            return;
        }
    }
    exit_end(slot, serial, end)
}

/// Any exit but the first hart's plain one (out of line, so that the traced
/// fn keeps no more registers for it): the hart's state, the plain exit if
/// the guard is a plain one, else the general one.
#[cold]
#[inline(never)]
fn exit_end(slot: u32, serial: u32, end: u64) {
    exit_board_any(slot, serial, end)
}

#[inline(always)]
fn exit_general(st: &mut ThreadState, slot: u32, serial: u32, end: u64) {
    let serial = serial & SERIAL_MASK;
    if slot & COUNTED != 0 {
        super::exit_board_counted(slot, serial, end, st)
    } else {
        super::exit_board(slot, serial, end, st)
    }
}

/// The common exit, all of it with interrupts masked: this guard's frame on
/// top, room in the buffer, a duration the record holds. Pops it and writes
/// its record. Returns `false`, having changed nothing, for anything else.
///
/// A record that fills the buffer leaves its handoff to the next exit, which
/// finds no room and takes the general exit (it hands the buffer over, then
/// records), or to the runtime's flush: the plain exit then calls nothing.
#[inline(always)]
fn exit_fast(st: &mut ThreadState, frames: *mut Frame, slot: u32, end: u64) -> bool {
    // SAFETY: the platform's functions, paired below.
    let saved = unsafe { platform::__fgtrace_irq_save() };
    let i = st.count;
    // SAFETY: 0 < slot <= STACK_DEPTH: a frame the plain entry pushed, so
    // the hart's own stack (`join` sets `frames` to it on boards); its
    // fields are used only once `depth == slot` says it is this guard's.
    // (Sign-extended: a plain guard's slot is at most STACK_DEPTH, so this
    // is the slot, and 64-bit RISC-V needs no instructions for it.)
    let f = unsafe { &*frames.offset(slot as i32 as isize - 1) };
    let dur = end.wrapping_sub(f.start);
    // A duration the record cannot hold (hours) saturates on the general
    // path.
    let ok = (st.depth == slot) & (i < st.limit) & (dur <= DUR_MAX);
    if ok {
        let depth = slot - 1;
        st.depth = depth;
        // A plain call in the board's layout (what `RawCall::pack` makes
        // of it there): the duration fits, and the depth, below
        // STACK_DEPTH, too.
        let rec = RawCall::board_call(f.start, depth, dur, f.site);
        // SAFETY: i & mask < capacity, as in `write` (`buf` is set while
        // `fast` matches; a handoff that finds no buffer leaves `limit` 0).
        unsafe { st.buf.add(i & st.mask).write(rec) };
        st.count = i + 1;
    }
    // SAFETY: as above.
    unsafe { platform::__fgtrace_irq_restore(saved) };
    ok
}
