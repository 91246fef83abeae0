//! The board probe on Cortex-M: the first hart's plain entry and exit in
//! assembly, each one call from the traced fn that keeps every register
//! but `r12`, `lr` and, at entry, `r3` (where it returns the guard's slot).
//!
//! Armv7-M has 13 general registers, and the extended clock's read (its
//! high word, the counter's address and direction, then the counter) with
//! the plain push or pop inlined into a traced fn made it save more
//! registers in its prologue, which every call paid, recording or not; a
//! call the compiler sees makes it keep its live values in saved
//! registers. So the traced fn tests the session word, and while one
//! records makes one call at entry and one at exit, which save what they
//! use with one `push` (one instruction for any number of registers) and
//! run the common case straight through:
//!
//! * **entry** (`__fgtrace_cm_enter`, the site in `r12`): the site's
//!   decision word against the hart's `fast` word, the depth against the
//!   shadow stack's, the slot reserved, then the frame (site, no tag, the
//!   traced fn's stack pointer, the clock); the guard back in `r3` (slot)
//!   and `r12` (serial), where the exit takes it.
//! * **exit** (`__fgtrace_cm_exit`, the guard in `r3` and `r12`): the
//!   clock, then with interrupts masked (PRIMASK) the checks of the common
//!   exit (`exit_fast`: the guard's frame on top, room in the buffer, a
//!   duration the record holds), the pop and the record.
//!
//! Anything else calls the Rust general entry or exit (`enter_general`,
//! `exit_general`), as on the other boards. One CPU: the first hart's
//! state is the only one.

use super::{enter_general, exit_general, Guard, Hart, Site, States, STACK_DEPTH, STATES};
use crate::probe::{ShadowFrame, ThreadState};
use crate::record::{RawCall, DUR_MAX};
use core::mem::{offset_of, size_of};

/// A guard's slot bit, set by the entry on every guard it did not push
/// itself (the general entry's, with a frame): such a slot is never the
/// depth, so the exit's first test, the depth against the slot, sends it
/// to the general exit, and no test of the serial is needed. Bit 31 is a
/// counted call's; slots are far smaller. [`Guard::slot`] leaves it out.
pub(in crate::probe) const GENERAL: u32 = 1 << 30;

/// The first hart's state in [`STATES`].
const HART0: usize = offset_of!(States, harts);
/// Its frames, from [`STATES`].
const FRAMES: usize = HART0 + offset_of!(Hart, frames);
const _: () = assert!(
    size_of::<ShadowFrame>() == 32
        && offset_of!(ShadowFrame, start) == 0
        && offset_of!(ShadowFrame, sp) == 8
        && offset_of!(ShadowFrame, site) == 24
        && offset_of!(ShadowFrame, tag) == 28
        && STACK_DEPTH <= 255
);
const _: () = assert!(size_of::<RawCall>() == 16);
// The clock's three words at the states' address.
const _: () = assert!(offset_of!(States, counter) == 0);

// The clock's name for `clock::cortex_m`: the states' address.
core::arch::global_asm!(
    ".globl __fgtrace_clock",
    ".set __fgtrace_clock, {states}",
    states = sym STATES,
);
const _: () = assert!(
    offset_of!(ThreadState, count) == offset_of!(ThreadState, buf) + 4
        && offset_of!(ThreadState, mask) == offset_of!(ThreadState, buf) + 8
        && offset_of!(ThreadState, limit) == offset_of!(ThreadState, buf) + 12
);
// A record's duration is below 2^43 ticks: its high word below 2^11.
const _: () = assert!(DUR_MAX == (1 << 43) - 1);

/// The session word ([`super::on_word`]) in `r3`, where the entry returns
/// the guard's slot: the slot is in one low register on every path, which
/// the traced fn tests with one `cbz` at its exit.
#[inline(always)]
pub(in crate::probe) fn on_word() -> u32 {
    let mut on = super::on_word() as u32;
    // SAFETY: an empty `asm!`: no instruction, only the register.
    unsafe { core::arch::asm!("", inout("r3") on, options(nomem, nostack, preserves_flags, pure)) };
    on
}

/// The serial of a guard whose slot is 0, which nothing reads: whatever
/// `r12` holds, where the exit takes a serial, so that the path that
/// records nothing sets no register for it.
#[inline(always)]
pub(in crate::probe) fn no_serial() -> u32 {
    let any: u32;
    // SAFETY: an empty `asm!`: no instruction, only the register.
    unsafe { core::arch::asm!("", out("r12") any, options(nomem, nostack, preserves_flags, pure)) };
    any
}

/// [`super::enter_board`] on Cortex-M: `__fgtrace_cm_enter`.
#[inline(always)]
pub(super) fn enter_first(site: &'static Site) -> Guard {
    let (slot, serial): (u32, u32);
    // SAFETY: the entry keeps every register but r3, r12 and lr (FP
    // registers included: its general path saves the caller-saved ones),
    // and the stack below the traced fn's.
    unsafe {
        core::arch::asm!(
            "bl {t}",
            t = sym __fgtrace_cm_enter,
            inout("r12") site => serial,
            lateout("r3") slot,
            lateout("lr") _,
        )
    };
    Guard::new(slot, serial)
}

/// A guard's exit on Cortex-M: `__fgtrace_cm_exit`.
#[inline(always)]
pub(in crate::probe) fn exit_call(slot: u32, serial: u32) {
    // SAFETY: the exit keeps every register but r12 and lr, as above.
    unsafe {
        core::arch::asm!(
            "bl {t}",
            t = sym __fgtrace_cm_exit,
            in("r3") slot,
            inout("r12") serial => _,
            lateout("lr") _,
        )
    };
}

extern "C" {
    fn __fgtrace_cm_enter();
    fn __fgtrace_cm_exit();
}

/// Saves the FP registers the C ABI lets a callee change around a call to
/// Rust, where there is an FPU (the probe's general paths only):
/// `vpush {s0-s15}`, encoded, as the module's assembler is not told of the
/// FPU.
#[cfg(any(target_abi = "eabihf", target_feature = "vfp2"))]
macro_rules! fp_save {
    () => {
        ".inst.w 0xed2d0a10"
    };
}
/// `vpop {s0-s15}`, as above.
#[cfg(any(target_abi = "eabihf", target_feature = "vfp2"))]
macro_rules! fp_restore {
    () => {
        ".inst.w 0xecbd0a10"
    };
}
#[cfg(not(any(target_abi = "eabihf", target_feature = "vfp2")))]
macro_rules! fp_save {
    () => {
        ""
    };
}
#[cfg(not(any(target_abi = "eabihf", target_feature = "vfp2")))]
macro_rules! fp_restore {
    () => {
        ""
    };
}

// The entry. In: r12 = the site. Out: r3 = the guard's slot, r12 = its
// serial (where the exit takes it). The traced fn's stack pointer is sp + 24 after the push.
//
// r0: the states (and the clock, their first field); r4: the frame (less
// `FRAMES`); r1, r5, r12: scratch; r2: the hart's `fast` word (a plain
// guard's serial); r3: the slot (depth + 1).
core::arch::global_asm!(
    ".section .text.__fgtrace_cm_enter,\"ax\",%progbits",
    ".globl __fgtrace_cm_enter",
    ".type __fgtrace_cm_enter,%function",
    ".thumb_func",
    ".p2align 2",
    "__fgtrace_cm_enter:",
    "push {{r0, r1, r2, r4, r5, lr}}",
    "ldr r0, ={states}",
    "ldr r1, [r12, #{decision}]",
    "ldr r2, [r0, #{fast}]",
    "cmp r1, r2",
    "bne 2f",
    "ldr r1, [r0, #{depth}]",
    "cmp r1, #{stack_depth}",
    "bhs 2f",
    // Reserved before it is filled: a handler that interrupts from here on
    // pushes above it, and pops back.
    "adds r3, r1, #1",
    "str r3, [r0, #{depth}]",
    "add.w r4, r0, r1, lsl #5",
    // The site's id (the site holds id + 1) and a zero tag.
    "ldr r1, [r12, #{id}]",
    "subs r1, #1",
    "movs r5, #0",
    "strd r1, r5, [r4, #{frames} + 24]",
    "add r1, sp, #24",
    "str r1, [r4, #{frames} + 8]",
    // The clock, at the states' address: the extension's word, the
    // counter's address and direction, then the counter (see
    // `clock::cortex_m::ticks`).
    "ldm r0, {{r1, r5, r12}}",
    "ldr r5, [r5]",
    "eor r5, r5, r12",
    "eors r12, r1, r5",
    "bmi 3f",
    "1:",
    "bic r1, r1, #0x80000000",
    "strd r5, r1, [r4, #{frames}]",
    "mov r12, r2",
    "pop {{r0, r1, r2, r4, r5, pc}}",
    // A half period crossed: the extension moves on (`clock::cortex_m::cross`).
    "3:",
    "eor r12, r1, #0x80000000",
    "add.w r1, r12, r1, lsr #31",
    "str r1, [r0]",
    "b 1b",
    // Anything else: the general entry.
    "2:",
    "mov r0, r12",
    "add r1, sp, #24",
    fp_save!(),
    "bl {general}",
    fp_restore!(),
    "cbz r0, 4f",
    "orr r0, r0, #{general_bit}",
    "4:",
    "mov r3, r0",
    "mov r12, r1",
    "pop {{r0, r1, r2, r4, r5, pc}}",
    ".size __fgtrace_cm_enter, . - __fgtrace_cm_enter",
    // The addresses `ldr =` loads (one instruction, where `movw` and
    // `movt` are two).
    ".ltorg",
    states = sym STATES,
    general = sym enter_general,
    decision = const Site::DECISION_OFFSET,
    id = const Site::ID_OFFSET,
    fast = const HART0 + offset_of!(ThreadState, fast),
    depth = const HART0 + offset_of!(ThreadState, depth),
    frames = const FRAMES,
    stack_depth = const STACK_DEPTH,
    general_bit = const GENERAL,
);

// The exit. In: r3 = the guard's slot, r12 = its serial (on the stack at
// sp + 48 from the push on; r7 is pushed for the stack's 8-byte alignment).
//
// r0, r1: the clock's high and low words, then the duration's; r2: the
// states (and the clock, their first field), then the entry time's low
// word; r4: the clock's direction, then the depth; r5, r6, r8, r9: the
// buffer, the count, the index mask and the limit (from `buf` on: adjacent
// in `ThreadState`); r5 then the record's place, r6 the entry time's high
// word, r9 the frame (less `FRAMES` and one frame); r10: the count + 1;
// r11: PRIMASK as it was; r12: the state's `buf` field; r3: the site's id
// once all is checked. `lr` keeps the return address into the traced fn,
// so that a sample taken here finds the traced fn (the entry keeps it
// too).
core::arch::global_asm!(
    ".section .text.__fgtrace_cm_exit,\"ax\",%progbits",
    ".globl __fgtrace_cm_exit",
    ".type __fgtrace_cm_exit,%function",
    ".thumb_func",
    ".p2align 2",
    "__fgtrace_cm_exit:",
    "push {{r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, lr}}",
    "ldr r2, ={states}",
    "ldm r2, {{r0, r1, r4}}",
    "ldr r1, [r1]",
    "eors r1, r4",
    "eors r4, r0, r1",
    "bmi 3f",
    "1:",
    "bic r0, r0, #0x80000000",
    "mrs r11, primask",
    "cpsid i",
    "ldr r4, [r2, #{depth}]",
    "cmp r4, r3",
    "bne 7f",
    "add r12, r2, #{buf}",
    "ldm r12, {{r5, r6, r8, r9}}",
    "add r10, r6, #1",
    "cmp r10, r9",
    "bhs 7f",
    // The record's place: the ring's index (all ones in stream mode).
    "and.w r8, r8, r6",
    "add.w r5, r5, r8, lsl #4",
    "add.w r9, r2, r4, lsl #5",
    "ldrd r2, r6, [r9, #{frames} - 32]",
    "subs r1, r1, r2",
    "sbc r0, r0, r6",
    "cmp.w r0, #{dur_hi_limit}",
    "bhs 6f",
    // The frame is the guard's, the buffer has room, the duration fits:
    // pop, and write the record in the board's layout of a plain call
    // (`RawCall::board_call`: start << 10 | depth, then the duration and
    // the site << 43).
    "subs r4, #1",
    "str r4, [r12, #{depth} - {buf}]",
    "ldr r3, [r9, #{frames} - 8]",
    "orr.w r4, r4, r2, lsl #10",
    "lsl r6, r6, #10",
    "orr.w r6, r6, r2, lsr #22",
    "orr.w r0, r0, r3, lsl #11",
    "strd r4, r6, [r5]",
    "strd r1, r0, [r5, #8]",
    "str r10, [r12, #4]",
    "msr primask, r11",
    "pop {{r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, pc}}",
    // A half period crossed, as at entry.
    "3:",
    "eor r4, r0, #0x80000000",
    "add.w r0, r4, r0, lsr #31",
    "str r0, [r2]",
    "b 1b",
    // A duration the record cannot hold: the exit time back.
    "6:",
    "adds r1, r1, r2",
    "adc r0, r0, r6",
    // Anything else (a guard the general entry made among it, whose slot
    // is marked): the general exit, with interrupts as they were.
    "7:",
    "msr primask, r11",
    "mov r2, r1",
    "mov r1, r3",
    "mov r3, r0",
    "bic r0, r1, #{general_bit}",
    "ldr r1, [sp, #48]",
    fp_save!(),
    "bl {general}",
    fp_restore!(),
    "pop {{r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, pc}}",
    ".size __fgtrace_cm_exit, . - __fgtrace_cm_exit",
    // The addresses `ldr =` loads (one instruction, where `movw` and
    // `movt` are two).
    ".ltorg",
    states = sym STATES,
    general = sym exit_general,
    depth = const HART0 + offset_of!(ThreadState, depth),
    buf = const HART0 + offset_of!(ThreadState, buf),
    frames = const FRAMES,
    dur_hi_limit = const (DUR_MAX + 1) >> 32,
    general_bit = const GENERAL,
);
