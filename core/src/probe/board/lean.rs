//! Lean calls (`fgtrace_lean`): the first hart's plain call keeps no frame;
//! its exit writes one [`LeanCall`] through the
//! [`LeanWriter`](super::LeanWriter) with interrupts masked, and hands a
//! full buffer to the platform through a trampoline.

#[cfg(not(any(target_arch = "riscv64", target_arch = "riscv32")))]
use super::platform;
use super::tramp::lean_out;
use super::{stack_pointer, LeanCall, STATES};
#[cfg(not(target_arch = "x86_64"))]
use crate::clock::ticks;
use crate::site::Site;

/// A lean call's exit, inlined into the traced fn: the clock, then its
/// record with interrupts masked (an interrupt's calls are before or after
/// it, whole); a full buffer goes to the platform through a trampoline, with
/// interrupts as they were.
#[cfg(all(fgtrace_lean, not(test)))]
#[inline(always)]
pub(in crate::probe) fn exit_lean(start: u64, site: *const Site) {
    let end = EndTicks::read();
    let saved = lean_mask();
    // SAFETY: the first hart's writer (a lean guard is only made there, and
    // a call does not move between harts), interrupts masked.
    let w = unsafe { &mut *STATES.lean.get() };
    let p = w.ptr;
    if p < w.lim {
        // SAFETY: below `lim`, in the runtime's buffer.
        unsafe {
            (*p).start = start;
            end.store(core::ptr::addr_of_mut!((*p).end));
            (*p).site = site as usize;
            store_stack_pointer(p);
            w.ptr = p.add(1);
        }
        lean_unmask(saved);
    } else {
        lean_unmask(saved);
        lean_out(start, end.get(), site as usize, stack_pointer());
    }
}

/// A lean exit's clock. On x86_64 `rdtsc`'s two halves stay apart and are
/// stored as two words: joining them (a shift, an or, a move) would cost
/// more than the second store. Elsewhere the clock as it reads.
#[cfg(all(fgtrace_lean, not(test)))]
#[derive(Clone, Copy)]
struct EndTicks {
    #[cfg(target_arch = "x86_64")]
    lo: u32,
    #[cfg(target_arch = "x86_64")]
    hi: u32,
    #[cfg(not(target_arch = "x86_64"))]
    t: u64,
}

#[cfg(all(fgtrace_lean, not(test)))]
impl EndTicks {
    #[inline(always)]
    fn read() -> EndTicks {
        #[cfg(target_arch = "x86_64")]
        {
            let (lo, hi): (u32, u32);
            // SAFETY: reads the TSC, no memory access.
            unsafe {
                core::arch::asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags))
            };
            EndTicks { lo, hi }
        }
        #[cfg(not(target_arch = "x86_64"))]
        EndTicks { t: ticks() }
    }

    #[inline(always)]
    fn get(self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            (self.hi as u64) << 32 | self.lo as u64
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self.t
        }
    }

    /// # Safety
    /// `to` is valid for a write.
    #[inline(always)]
    unsafe fn store(self, to: *mut u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's; little-endian halves of the u64.
        unsafe {
            (to as *mut u32).write(self.lo);
            (to as *mut u32).add(1).write(self.hi);
        }
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: the caller's.
        unsafe {
            to.write(self.t)
        };
    }
}

/// Masks interrupts for a lean exit; returns what [`lean_unmask`] puts
/// back. On RISC-V the exit does it itself: `csrrci`, and `csrw` of the
/// whole `mstatus` read, which nothing between the two changes (the
/// platform's restore sets the one bit, for stretches that may).
#[cfg(all(fgtrace_lean, not(test)))]
#[inline(always)]
fn lean_mask() -> usize {
    #[cfg(any(target_arch = "riscv64", target_arch = "riscv32"))]
    {
        let old: usize;
        // SAFETY: clears mstatus.MIE, machine mode (the board probe's).
        unsafe { core::arch::asm!("csrrci {}, mstatus, 8", out(reg) old, options(nostack)) };
        old
    }
    #[cfg(not(any(target_arch = "riscv64", target_arch = "riscv32")))]
    // SAFETY: the platform's function, paired in `lean_unmask`.
    unsafe {
        platform::__fgtrace_irq_save()
    }
}

/// Puts back what [`lean_mask`] returned.
#[cfg(all(fgtrace_lean, not(test)))]
#[inline(always)]
fn lean_unmask(saved: usize) {
    #[cfg(any(target_arch = "riscv64", target_arch = "riscv32"))]
    // SAFETY: the mstatus `lean_mask` read, machine mode.
    unsafe {
        core::arch::asm!("csrw mstatus, {}", in(reg) saved, options(nostack))
    };
    #[cfg(not(any(target_arch = "riscv64", target_arch = "riscv32")))]
    // SAFETY: as above.
    unsafe {
        platform::__fgtrace_irq_restore(saved)
    };
}

/// Stores the stack pointer of the function this is inlined into as
/// `rec`'s `sp`, in one instruction: a callee's frame record lies below it,
/// the function's own at or above it (as the shadow stack's frames keep it
/// for the sampler's cut).
///
/// # Safety
/// `rec` is valid for a write.
#[cfg(all(fgtrace_lean, not(test)))]
#[inline(always)]
unsafe fn store_stack_pointer(rec: *mut LeanCall) {
    const SP: usize = core::mem::offset_of!(LeanCall, sp);
    // SAFETY: the caller's.
    #[cfg(target_arch = "riscv64")]
    unsafe {
        core::arch::asm!("sd sp, {sp}({r})", r = in(reg) rec, sp = const SP, options(nostack, preserves_flags))
    };
    // SAFETY: as above.
    #[cfg(target_arch = "riscv32")]
    unsafe {
        core::arch::asm!("sw sp, {sp}({r})", r = in(reg) rec, sp = const SP, options(nostack, preserves_flags))
    };
    // SAFETY: as above.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!("mov [{r} + {sp}], rsp", r = in(reg) rec, sp = const SP, options(nostack, preserves_flags))
    };
}
