//! The board probe (`irq-mask`, no `std`): where each hart's state lives,
//! and the common entry and exit, short enough to sit near the floor of two
//! clock reads, a push, a pop and one 16-byte record.
//!
//! * **State.** Each hart's [`ThreadState`] and shadow stack are one static
//!   slot here ([`STATES`], [`HARTS`] of them), found by the platform's hart
//!   index (`__fgtrace_hart`); hart 0's is a constant address, so the common
//!   case is one index read and one branch, no arithmetic. The same static
//!   starts with the word that says a session records ([`on`],
//!   [`on_word`]): a traced fn's first test, whose address is hart 0's
//!   state's too; with lean calls, the off path's guard is that word.
//! * **Entry** (`enter_board`): one compare of the site's cached decision
//!   word with the hart's `fast` word (`generation << 3 | Record` while the
//!   hart's session state allows the plain path: joined, no per-call
//!   counter, no threshold, no depth limit, no count-only sites; otherwise a
//!   value no decision word takes), one bound check, then the frame: site,
//!   no flags, stack pointer, clock. No serial: nested interrupt handlers
//!   leave the shadow stack as they found it, and a board unwinds no stack
//!   (`panic = "abort"`), so a guard's frame is the top one when it drops;
//!   a guard whose frame is not on top takes the general path, which finds
//!   its frame by slot (the fast frames' tag is 0; their guards' serial
//!   word is the hart's `fast` word, which names the session, with the
//!   `OTHER | FAST` bits on other harts). A guard whose frame is gone is
//!   counted lost if the hart's state still records the session its
//!   serial word names (a hart's state is never reset or swapped on a
//!   board: another exit popped it).
//! * **Exit** (`exit_fast`): with interrupts masked, the pop and the
//!   record (so an interrupt's records nest in exit order). Anything else
//!   (a counted call, a frame not on top, a record that would fill the
//!   buffer) takes the general board exit, which writes the record and
//!   hands the full buffer over with interrupts as they were, so a plain
//!   exit never leaves a full buffer behind for the writers that do not
//!   hand one over (markers, values, whole futures). A guard the first hart's plain entry pushed
//!   (the sign bit clear) exits inline in the traced fn
//!   (`exit_inline`): no hart lookup, the state at a constant address,
//!   no call. The record is written in the board's layout of a plain call
//!   (`RawCall::board_call`: word 0 is `start << 10 | depth`), which packs
//!   in two instructions.
//! * **Lean calls** (`fgtrace_lean`: a clock that never reads the same
//!   value twice, `mcycle` or the TSC): the first hart's plain call pushes
//!   no frame; its guard is its entry time, and its exit (`exit_lean`)
//!   writes one [`LeanCall`] through the [`LeanWriter`] with interrupts
//!   masked. The host nests such calls by time; the stack pointer in the
//!   record lets it cut a sample below the call.
//! * **Everything else** (another hart, a general entry or exit) is one
//!   call through a trampoline (`enter_out`, `exit_out`) that keeps every
//!   register but the call's own, so that the traced fn keeps its values in
//!   the registers they are in, and saves no register of its own for the
//!   probe: what it saves, every call pays, recording or not.

#[cfg(target_arch = "arm")]
mod cortex_m;
#[cfg(all(fgtrace_lean, not(test)))]
mod lean;
mod tramp;

#[cfg(target_arch = "arm")]
pub(super) use cortex_m::{
    exit_call, no_serial as cortex_m_no_serial, on_word as cortex_m_on_word,
    GENERAL as CORTEX_M_GENERAL,
};
#[cfg(all(fgtrace_lean, not(test)))]
pub(super) use lean::exit_lean;
use tramp::{enter_out, exit_out};

#[cfg(not(all(fgtrace_lean, not(test))))]
use super::guard_word::is_first;
pub(super) use super::guard_word::OTHER;
use super::guard_word::{is_plain, FAST};
use super::{enter_other, platform, stack_pointer, Guard, ShadowFrame, ThreadState, COUNTED};
use crate::clock::ticks;
use crate::control_word::CONTROL;
use crate::record::{RawCall, DUR_MAX, MAX_DEPTH};
use crate::site::{Decision, Site};
use core::cell::UnsafeCell;
use core::sync::atomic::{compiler_fence, AtomicIsize, Ordering::*};

/// Harts with a state of their own (a hart index at or past this shares the
/// last one's: give each hart its own by raising it).
pub const HARTS: usize = 4;
/// Shadow-stack depth per hart.
pub const STACK_DEPTH: usize = 64;
const _: () = assert!(STACK_DEPTH <= MAX_DEPTH as usize + 1);
/// `ThreadState::fast` while the hart's calls must take the general path.
pub const FAST_OFF: u32 = u32::MAX;
/// One hart's state and shadow stack.
#[repr(C)]
pub struct Hart {
    st: UnsafeCell<ThreadState>,
    frames: UnsafeCell<[ShadowFrame; STACK_DEPTH]>,
}

// SAFETY: each slot is used by its own hart (and that hart's interrupt
// handlers, which the probe's slot reservation and masking make safe).
unsafe impl Sync for Hart {}

/// Every hart's state, after the word that says a session records: one
/// static, so that the traced fn's first test and its hart-0 state share
/// one base address.
#[repr(C)]
pub struct States {
    /// Cortex-M: the probe's clock (`__fgtrace_clock`, see
    /// `board::cortex_m`), one address with the first hart's state.
    #[cfg(target_arch = "arm")]
    counter: crate::clock::cortex_m::Counter32,
    /// 1 while a session records, else 0 (a word, not a bool: see
    /// [`on_word`]).
    on: AtomicIsize,
    lean: UnsafeCell<LeanWriter>,
    harts: [Hart; HARTS],
}

// SAFETY: `lean` is the first hart's (and its interrupt handlers', which
// write it with interrupts masked).
unsafe impl Sync for States {}

/// A lean call's record: what the first hart's plain exit writes on a board
/// whose clock never reads the same value twice (`mcycle`, the TSC). No
/// depth: the host nests calls by time, which such a clock makes exact.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeanCall {
    /// The clock at entry.
    pub start: u64,
    /// The clock at exit.
    pub end: u64,
    /// The site's address (`&'static Site`).
    pub site: usize,
    /// The traced fn's stack pointer: the sampler's cut (the host finds the
    /// innermost traced frame of a sample by it).
    pub sp: usize,
}

/// Where the first hart's lean records go: the next one at `ptr`, room up
/// to `lim` (the runtime's buffer; `ptr == lim` sends the record to the
/// platform's `__fgtrace_lean_full`).
#[repr(C)]
pub struct LeanWriter {
    /// The next record's place.
    pub ptr: *mut LeanCall,
    /// The end of the buffer.
    pub lim: *mut LeanCall,
}

/// The first hart's lean writer (the runtime sets it when the hart joins a
/// session and at every handoff, with interrupts masked).
pub fn lean_writer() -> *mut LeanWriter {
    STATES.lean.get()
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
    #[cfg(target_arch = "arm")]
    counter: crate::clock::cortex_m::Counter32::unconfigured(),
    on: AtomicIsize::new(0),
    lean: UnsafeCell::new(LeanWriter {
        ptr: core::ptr::null_mut(),
        lim: core::ptr::null_mut(),
    }),
    harts: [const {
        Hart {
            st: UnsafeCell::new(ThreadState::EMPTY),
            frames: UnsafeCell::new([ShadowFrame::ZERO; STACK_DEPTH]),
        }
    }; HARTS],
};

/// A session records: what a board's probe tests first (the runtime sets
/// it with the control word's session bit).
#[inline(always)]
pub fn on() -> bool {
    STATES.on.load(Relaxed) != 0
}

/// The word that says a session records: 1 while one does, else 0.
///
/// A lean board's entry tests it with `<= 0` and keeps it, 0 there, as the
/// guard of a call made while nothing records: the register it was loaded
/// into is the guard, and the off path goes into the traced fn's body with
/// nothing to set. Not a `bool` tested with `== 0`: the compiler would
/// know the value after the test and materialise a constant 0 for the
/// guard (`li`, `xor`, and a jump from there to the body), and on riscv64gc
/// move the traced fn's argument out of the register it gives the guard,
/// on every path. A word, not a byte: x86_64 loads it with one `mov` (an
/// atomic byte takes a `movzx`, then a `movsx` for the guard), and the
/// pointers after it pad a byte to a word anyway.
#[inline(always)]
pub fn on_word() -> isize {
    STATES.on.load(Relaxed)
}

/// Says whether a session records (with `control_word::session_on`/`off`).
pub fn set_on(on: bool) {
    STATES.on.store(on as isize, Release);
}

/// The running hart's slot.
#[inline(always)]
pub fn hart() -> &'static Hart {
    let h = hart_index();
    if h == 0 {
        &STATES[0]
    } else {
        other_hart(h)
    }
}

/// The running hart's index: the platform's, or 0 in a firmware built
/// for one hart (feature `single-hart`: no hart test on the probe's path).
#[inline(always)]
fn hart_index() -> usize {
    #[cfg(feature = "single-hart")]
    {
        0
    }
    #[cfg(not(feature = "single-hart"))]
    // SAFETY: the platform's function, no preconditions.
    unsafe {
        platform::__fgtrace_hart()
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
    pub fn frames(&self) -> *mut ShadowFrame {
        self.frames.get() as *mut ShadowFrame
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

/// A board's entry once the control word says something records: the
/// first hart's plain push inline, anything else out of line through
/// [`enter_out`].
#[inline(always)]
pub(super) fn enter_board(site: &'static Site) -> Guard {
    #[cfg(target_arch = "arm")]
    return cortex_m::enter_first(site);
    #[cfg_attr(target_arch = "arm", allow(unreachable_code))]
    let h = hart_index();
    #[cfg(not(all(fgtrace_lean, not(test))))]
    if h == 0 {
        if let Some(g) = enter_plain(&STATES[0], site, 0, stack_pointer()) {
            return g;
        }
    }
    // With a clock that never reads the same twice, the first hart's plain
    // call is a lean one: its entry time in the guard, no frame pushed.
    #[cfg(all(fgtrace_lean, not(test)))]
    if h == 0 {
        // SAFETY: this hart's own state (a plain word the runtime changes
        // between sessions).
        let fast = unsafe { (*STATES[0].st.get()).fast };
        if site.decision_word() == fast {
            return Guard {
                word: ticks(),
                site,
                ..Guard::OFF
            };
        }
    }
    enter_rest(site, stack_pointer())
}

/// [`enter_board`]'s general entry: [`enter_out`], cold on x86_64, so that
/// the compiler lays it out of the way and the first hart's lean entry
/// falls through into the traced fn's body instead of jumping over it (one
/// instruction fewer per recorded call). Not on RISC-V: cold there, it
/// costs riscv32imac's off path 4 instructions (the state's address
/// materialised and the traced fn's argument moved ahead of the first
/// test), and on riscv64gc, where it saves the same instruction, most runs
/// of the example then take one sample whose stack shows `split_work` among
/// its own frames, which the board test rejects.
#[cfg_attr(target_arch = "x86_64", cold)]
#[inline(always)]
fn enter_rest(site: &'static Site, sp: usize) -> Guard {
    enter_out(site, sp)
}

/// A board's entry that never makes a lean call (see `enter_not_lean`).
#[cfg(all(fgtrace_lean, not(test)))]
#[inline(always)]
pub(super) fn enter_general_board(site: &'static Site) -> Guard {
    enter_out(site, stack_pointer())
}

/// The plain push on hart `h`, if its state and the site allow it. `bits`:
/// the guard's serial bits for this hart (none on the first, else
/// [`OTHER`] and [`FAST`]), beside the hart's `fast` word; `sp`: the traced
/// fn's stack pointer.
#[inline(always)]
fn enter_plain(h: &'static Hart, site: &'static Site, bits: u32, sp: usize) -> Option<Guard> {
    // SAFETY: this hart's own state (see `Hart`).
    let st = unsafe { &mut *h.st.get() };
    let fast = st.fast;
    if site.decision_word() == fast {
        let d = st.depth;
        if (d as usize) < STACK_DEPTH {
            // Reserved before it is filled, as in `push`: a handler that
            // interrupts from here on pushes above it, and pops back.
            st.depth = d + 1;
            compiler_fence(SeqCst);
            // SAFETY: d < STACK_DEPTH, the hart's own frames (`stack_cap` is
            // STACK_DEPTH whenever `fast` matches, see `set_fast`).
            let f = unsafe { &mut *(h.frames.get() as *mut ShadowFrame).add(d as usize) };
            // The site and a zero tag (no flags, no serial) in one store:
            // `tag` follows `site` in the frame.
            // SAFETY: `site` and `tag` are adjacent u32s at an 8-byte
            // aligned offset (`ShadowFrame` is `repr(C)`: u64, usize, u64, u32, u32).
            unsafe {
                (core::ptr::addr_of_mut!(f.site) as *mut u64).write(site_word(site.id_decided()))
            };
            f.sp = sp;
            compiler_fence(Release);
            f.start = ticks();
            return Some(Guard::new(d + 1, bits | fast));
        }
    }
    None
}

/// Every entry but the first hart's plain one: the plain push on another
/// hart, else the general entry. Its guard comes back as one word, `slot |
/// serial << 32` (two registers on 32-bit targets), through
/// [`enter_out`]'s trampoline.
extern "C" fn enter_general(site: &'static Site, sp: usize) -> u64 {
    let h = hart_index();
    let hs = &STATES[h.min(HARTS - 1)];
    let plain = if h != 0 {
        enter_plain(hs, site, OTHER | FAST, sp)
    } else {
        None
    };
    // SAFETY: this hart's own state.
    let g = plain.unwrap_or_else(|| {
        // Its guard has the `OTHER` bit (see `push`).
        enter_other(
            site,
            CONTROL.load(Relaxed),
            sp,
            unsafe { &mut *hs.st.get() },
            0,
        )
    });
    let v = g.slot() as u64 | (g.serial() as u64) << 32;
    // Its drop is the traced fn's, once rebuilt from the word.
    core::mem::forget(g);
    v
}

/// The exit of every guard but the first hart's plain ones, and of those
/// whose plain exit declined: the hart's state, the plain exit if the guard
/// is a plain one, else the general one.
extern "C" fn exit_general(slot: u32, serial: u32, end: u64) {
    exit_board_any(slot, serial, end)
}

/// `site` then a zero `tag`, as one u64 in memory order.
#[inline(always)]
fn site_word(id: u32) -> u64 {
    // Sign-extended on 64-bit RISC-V: ids are below `MAX_SITES` (2^18), so
    // this is the zero-extended id, and RISC-V keeps 32-bit values
    // sign-extended (x86_64 and 32-bit targets need no instruction to
    // zero-extend).
    let id = if cfg!(target_arch = "riscv64") {
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

/// The exit of a guard that does not exit inline (its drop calls
/// [`exit_inline`]): a value's or a future's. Out of line, as elsewhere.
///
/// The pop and the record are one step for an interrupt handler on this
/// hart: one that ran between them would record its calls at the popped
/// frame's depth before that frame's own record, and its records, in exit
/// order, would no longer nest. Interrupts are masked from the pop to the
/// record's end (a few instructions); a full buffer is handed over after,
/// with interrupts as they were. A handler that runs after the record filled
/// the buffer, before its handoff, finds it full here and hands it over
/// itself, before its own record.
#[inline(never)]
pub(super) fn exit(slot: u32, serial: u32) {
    let end = ticks();
    exit_board_any(slot, serial, end)
}

/// A board's exit, the clock read: the first hart's state is a constant
/// address, so its common exit needs no register saved around a call.
#[inline(always)]
pub(super) fn exit_board_any(slot: u32, serial: u32, end: u64) {
    let h = hart_index();
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
    if is_plain(serial) && exit_fast(st, h.frames(), slot, end) {
        return;
    }
    exit_general_on(st, slot, serial, end)
}

/// A board's exit, inlined into the traced fn: the clock, then, for a guard
/// the first hart's plain entry pushed, the plain exit on the first hart's
/// state (a constant address: no hart lookup; a call does not move between
/// harts), or else [`exit_out`]'s, out of line.
// Cortex-M exits through its own (`cortex_m::exit_call`).
#[cfg_attr(target_arch = "arm", allow(dead_code))]
#[inline(always)]
pub(super) fn exit_inline(slot: u32, serial: u32) {
    let end = ticks();
    #[cfg(not(all(fgtrace_lean, not(test))))]
    if is_first(serial) {
        let h = &STATES[0];
        // SAFETY: this hart's own state.
        if exit_fast(unsafe { &mut *h.st.get() }, h.frames(), slot, end) {
            return;
        }
    }
    exit_out(slot, serial, end)
}

#[inline(always)]
fn exit_general_on(st: &mut ThreadState, slot: u32, serial: u32, end: u64) {
    // The serial word as the guard has it: the general exit finds the
    // frame by `frame_serial`, and tells a loss by the session it names.
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
/// The record that would fill the buffer is left to the general exit, which
/// writes it and then hands the buffer over: the plain exit calls nothing,
/// and leaves no full buffer behind (markers, values and whole futures
/// write without handing one over).
#[inline(always)]
fn exit_fast(st: &mut ThreadState, frames: *mut ShadowFrame, slot: u32, end: u64) -> bool {
    // SAFETY: the platform's functions, paired below.
    let saved = unsafe { platform::__fgtrace_irq_save() };
    let (d, i) = (st.depth, st.count);
    let ok;
    if cfg!(target_arch = "riscv64") {
        // On 64-bit RISC-V the frame is indexed by the depth just loaded,
        // once it is known to be the guard's slot: the load leaves it
        // sign-extended, where the slot, which comes from either of the
        // entry's paths, needs an instruction for it.
        ok = d == slot && i + 1 < st.limit && {
            // SAFETY: 0 < d = slot <= STACK_DEPTH: a frame the plain entry
            // pushed, so the hart's own stack (`join` sets `frames` to it
            // on boards).
            let f = unsafe { &*frames.offset(d as i32 as isize - 1) };
            pop_record(st, f, d, i, end)
        };
    } else {
        // Elsewhere the slot is as cheap, and the tests without branches
        // between them keep fewer registers live (x86_64: two fewer
        // instructions per call, on or off).
        // SAFETY: 0 < slot <= STACK_DEPTH: a frame the plain entry pushed,
        // so the hart's own stack; its fields are used only once
        // `depth == slot` says it is this guard's.
        let f = unsafe { &*frames.offset(slot as i32 as isize - 1) };
        let dur = end.wrapping_sub(f.start);
        ok = (d == slot) & (i + 1 < st.limit) & (dur <= DUR_MAX);
        if ok {
            pop_write(st, f, d, i, dur);
        }
    }
    // SAFETY: as above.
    unsafe { platform::__fgtrace_irq_restore(saved) };
    ok
}

/// [`exit_fast`] once the frame on top is the guard's (at depth `d`) and
/// the buffer has room for record `i`: the record, if its duration fits
/// (a duration the record cannot hold, hours, saturates on the general
/// path).
#[inline(always)]
fn pop_record(st: &mut ThreadState, f: &ShadowFrame, d: u32, i: usize, end: u64) -> bool {
    let dur = end.wrapping_sub(f.start);
    if dur > DUR_MAX {
        return false;
    }
    pop_write(st, f, d, i, dur);
    true
}

/// Pops the frame at depth `d` and writes its record as record `i`.
#[inline(always)]
fn pop_write(st: &mut ThreadState, f: &ShadowFrame, d: u32, i: usize, dur: u64) {
    let depth = d - 1;
    st.depth = depth;
    // A plain call in the board's layout (what `RawCall::pack` makes of it
    // there): the duration fits, and the depth, below STACK_DEPTH, too.
    let rec = RawCall::board_call(f.start, depth, dur, f.site);
    // SAFETY: i & mask < capacity, as in `write` (`buf` is set while
    // `fast` matches; a handoff that finds no buffer leaves `limit` 0).
    unsafe { st.buf.add(i & st.mask).write(rec) };
    st.count = i + 1;
}
