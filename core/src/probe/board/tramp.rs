//! The trampolines: the general entry and exit (and a full lean buffer's
//! record) called from the traced fn so that it keeps every register but the
//! call's own, and saves none of its own for the probe.

#[cfg(all(fgtrace_lean, not(test)))]
use super::platform;
use super::{enter_general, exit_general, Guard};
use crate::site::Site;

/// `asm!` for a call through a trampoline on RISC-V: with the F or D
/// extension, the FP registers the C ABI lets the callee change are
/// clobbered too, and with V every vector register (the trampoline saves
/// only integer registers).
#[cfg(any(target_arch = "riscv64", target_arch = "riscv32"))]
macro_rules! fp_clobbering_call {
    ($($t:tt)*) => {{
        #[cfg(all(target_feature = "f", not(target_feature = "v")))]
        core::arch::asm!(
            $($t)*
            out("ft0") _, out("ft1") _, out("ft2") _, out("ft3") _, out("ft4") _,
            out("ft5") _, out("ft6") _, out("ft7") _, out("ft8") _, out("ft9") _,
            out("ft10") _, out("ft11") _, out("fa0") _, out("fa1") _, out("fa2") _,
            out("fa3") _, out("fa4") _, out("fa5") _, out("fa6") _, out("fa7") _,
        );
        #[cfg(target_feature = "v")]
        core::arch::asm!(
            $($t)*
            out("ft0") _, out("ft1") _, out("ft2") _, out("ft3") _, out("ft4") _,
            out("ft5") _, out("ft6") _, out("ft7") _, out("ft8") _, out("ft9") _,
            out("ft10") _, out("ft11") _, out("fa0") _, out("fa1") _, out("fa2") _,
            out("fa3") _, out("fa4") _, out("fa5") _, out("fa6") _, out("fa7") _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
            out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _,
            out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _,
            out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _,
            out("v30") _, out("v31") _,
        );
        #[cfg(not(target_feature = "f"))]
        core::arch::asm!($($t)*);
    }};
}

/// `asm!` for a call through a trampoline on x86_64: on a target with SSE
/// (or AVX-512), the vector registers the C ABI lets the callee change are
/// clobbered too (the trampoline saves only general registers; the bare-metal
/// targets' soft-float ABI has none).
#[cfg(target_arch = "x86_64")]
macro_rules! vector_clobbering_call {
    ($($t:tt)*) => {{
        #[cfg(all(target_feature = "sse", not(target_feature = "avx512f")))]
        core::arch::asm!(
            $($t)*
            out("xmm0") _, out("xmm1") _, out("xmm2") _, out("xmm3") _,
            out("xmm4") _, out("xmm5") _, out("xmm6") _, out("xmm7") _,
            out("xmm8") _, out("xmm9") _, out("xmm10") _, out("xmm11") _,
            out("xmm12") _, out("xmm13") _, out("xmm14") _, out("xmm15") _,
        );
        #[cfg(target_feature = "avx512f")]
        core::arch::asm!(
            $($t)*
            out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
            out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
            out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
            out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
            out("zmm16") _, out("zmm17") _, out("zmm18") _, out("zmm19") _,
            out("zmm20") _, out("zmm21") _, out("zmm22") _, out("zmm23") _,
            out("zmm24") _, out("zmm25") _, out("zmm26") _, out("zmm27") _,
            out("zmm28") _, out("zmm29") _, out("zmm30") _, out("zmm31") _,
            out("k1") _, out("k2") _, out("k3") _, out("k4") _,
            out("k5") _, out("k6") _, out("k7") _,
        );
        #[cfg(not(target_feature = "sse"))]
        core::arch::asm!($($t)*);
    }};
}

/// [`enter_general`], called so that the traced fn keeps every register
/// but the argument ones across it: a trampoline saves and restores the
/// others. A call the compiler sees would make the traced fn keep its live
/// values in saved registers, whose saving and restoring every call pays,
/// recording or not.
#[inline(always)]
pub(super) fn enter_out(site: &'static Site, sp: usize) -> Guard {
    let (slot, serial): (u32, u32);
    #[cfg(target_arch = "riscv64")]
    {
        let v: u64;
        // SAFETY: the trampoline keeps every register but t5, t6 and ra
        // (and, with the D extension, the caller-saved FP registers). Its
        // arguments and results in t5 and t6, not the argument registers:
        // the traced fn's own arguments stay where they came in, with no
        // move on the plain path to make room for the call.
        unsafe {
            fp_clobbering_call!(
                "call {t}",
                t = sym __fgtrace_enter_tramp,
                inout("t5") site => _,
                inout("t6") sp => v,
                out("ra") _,
            )
        };
        (slot, serial) = (v as u32, (v >> 32) as u32);
    }
    #[cfg(target_arch = "riscv32")]
    // SAFETY: as above.
    unsafe {
        fp_clobbering_call!(
            "call {t}",
            t = sym __fgtrace_enter_tramp,
            inout("t5") site => serial,
            inout("t6") sp => slot,
            out("ra") _,
        )
    };
    #[cfg(target_arch = "x86_64")]
    {
        let v: u64;
        // SAFETY: the trampoline keeps every register but r10, r11 and rax
        // (no FP or vector registers on these targets' soft-float ABI); the
        // site and the stack pointer go in r10 and r11, so that the traced
        // fn's arguments stay where they came in.
        unsafe {
            vector_clobbering_call!(
                "call {t}",
                t = sym __fgtrace_enter_tramp,
                inout("r10") site => _,
                inout("r11") sp => _,
                out("rax") v,
            )
        };
        (slot, serial) = (v as u32, (v >> 32) as u32);
    }
    #[cfg(not(any(
        target_arch = "riscv64",
        target_arch = "riscv32",
        target_arch = "x86_64"
    )))]
    {
        let v = enter_general(site, sp);
        (slot, serial) = (v as u32, (v >> 32) as u32);
    }
    #[allow(unused_mut)]
    let mut g = Guard::new(slot, serial);
    // The traced fn's site on this path too: one constant for its drop.
    #[cfg(all(fgtrace_lean, not(test)))]
    {
        g.site = site;
    }
    g
}

/// [`exit_general`], called as [`enter_out`] calls [`enter_general`].
// Cortex-M exits through its own (`cortex_m::exit_call`).
#[cfg_attr(target_arch = "arm", allow(dead_code))]
#[inline(always)]
pub(super) fn exit_out(slot: u32, serial: u32, end: u64) {
    #[cfg(target_arch = "riscv64")]
    // SAFETY: the trampoline keeps every register but a0 to a2 and ra (and
    // the caller-saved FP registers).
    unsafe {
        fp_clobbering_call!(
            "call {t}",
            t = sym __fgtrace_exit_tramp,
            // Sign-extended, as the C ABI passes 32-bit values in 64-bit
            // registers (the callee relies on it).
            inout("a0") slot as i32 as i64 => _,
            inout("a1") serial as i32 as i64 => _,
            inout("a2") end => _,
            out("ra") _,
        )
    };
    #[cfg(target_arch = "riscv32")]
    // SAFETY: as above, a0 to a3 (the C ABI's register pair for `end`).
    unsafe {
        fp_clobbering_call!(
            "call {t}",
            t = sym __fgtrace_exit_tramp,
            inout("a0") slot => _,
            inout("a1") serial => _,
            inout("a2") end as u32 => _,
            inout("a3") (end >> 32) as u32 => _,
            out("ra") _,
        )
    };
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the trampoline keeps every register but rdi, rsi, rdx, rax.
    unsafe {
        vector_clobbering_call!(
            "call {t}",
            t = sym __fgtrace_exit_tramp,
            inout("rdi") slot as u64 => _,
            inout("rsi") serial as u64 => _,
            inout("rdx") end => _,
            out("rax") _,
        )
    };
    #[cfg(not(any(
        target_arch = "riscv64",
        target_arch = "riscv32",
        target_arch = "x86_64"
    )))]
    exit_general(slot, serial, end);
}

#[cfg(any(
    target_arch = "riscv64",
    target_arch = "riscv32",
    target_arch = "x86_64"
))]
extern "C" {
    /// Calls [`enter_general`], every register but its arguments, its
    /// result and the return address kept.
    fn __fgtrace_enter_tramp();
    /// Calls [`exit_general`], as above.
    fn __fgtrace_exit_tramp();
    /// Calls [`lean_full`], as above.
    #[cfg(all(fgtrace_lean, not(test)))]
    fn __fgtrace_lean_tramp();
}

// The trampolines: a frame record (so that the frame-pointer unwinder walks
// through them to the traced fn), the caller-saved registers the call's
// `asm!` does not name saved around the call, then back. RISC-V: t0 to t6
// and a2 to a7 (a0, a1 and ra are the `asm!`'s; a2, a3 also carry the exit's
// `end`, restored harmlessly); x86_64: rcx, rdx, r8 to r11 (rdi, rsi and rax
// are the `asm!`'s), the stack 16-byte aligned at the call.
#[cfg(any(target_arch = "riscv64", target_arch = "riscv32"))]
macro_rules! riscv_trampoline {
    ($name:literal, $target:path, $st:literal, $ld:literal, $w:literal) => {
        core::arch::global_asm!(
            concat!(".section .text.", $name, ",\"ax\",@progbits"),
            concat!(".globl ", $name),
            ".p2align 2",
            concat!($name, ":"),
            concat!("addi sp, sp, -16*", $w),
            concat!($st, " ra, 15*", $w, "(sp)"),
            concat!($st, " s0, 14*", $w, "(sp)"),
            concat!("addi s0, sp, 16*", $w),
            concat!($st, " t0, 0*", $w, "(sp)"),
            concat!($st, " t1, 1*", $w, "(sp)"),
            concat!($st, " t2, 2*", $w, "(sp)"),
            concat!($st, " t3, 3*", $w, "(sp)"),
            concat!($st, " t4, 4*", $w, "(sp)"),
            concat!($st, " t5, 5*", $w, "(sp)"),
            concat!($st, " t6, 6*", $w, "(sp)"),
            concat!($st, " a2, 7*", $w, "(sp)"),
            concat!($st, " a3, 8*", $w, "(sp)"),
            concat!($st, " a4, 9*", $w, "(sp)"),
            concat!($st, " a5, 10*", $w, "(sp)"),
            concat!($st, " a6, 11*", $w, "(sp)"),
            concat!($st, " a7, 12*", $w, "(sp)"),
            "call {f}",
            concat!($ld, " t0, 0*", $w, "(sp)"),
            concat!($ld, " t1, 1*", $w, "(sp)"),
            concat!($ld, " t2, 2*", $w, "(sp)"),
            concat!($ld, " t3, 3*", $w, "(sp)"),
            concat!($ld, " t4, 4*", $w, "(sp)"),
            concat!($ld, " t5, 5*", $w, "(sp)"),
            concat!($ld, " t6, 6*", $w, "(sp)"),
            concat!($ld, " a2, 7*", $w, "(sp)"),
            concat!($ld, " a3, 8*", $w, "(sp)"),
            concat!($ld, " a4, 9*", $w, "(sp)"),
            concat!($ld, " a5, 10*", $w, "(sp)"),
            concat!($ld, " a6, 11*", $w, "(sp)"),
            concat!($ld, " a7, 12*", $w, "(sp)"),
            concat!($ld, " ra, 15*", $w, "(sp)"),
            concat!($ld, " s0, 14*", $w, "(sp)"),
            concat!("addi sp, sp, 16*", $w),
            "ret",
            f = sym $target,
        );
    };
}
// The entry's trampoline: as above, but its `asm!` passes the site and
// the stack pointer in t5 and t6 and takes the guard back in them (riscv64:
// one word in t6; riscv32: slot in t6, serial in t5: the site's address
// stays in t5 for the plain path, no move), so that it keeps
// every argument register: t0 to t4 and a0 to a7 saved around the call.
#[cfg(any(target_arch = "riscv64", target_arch = "riscv32"))]
macro_rules! riscv_enter_trampoline {
    ($name:literal, $target:path, $st:literal, $ld:literal, $w:literal) => {
        core::arch::global_asm!(
            concat!(".section .text.", $name, ",\"ax\",@progbits"),
            concat!(".globl ", $name),
            ".p2align 2",
            concat!($name, ":"),
            concat!("addi sp, sp, -16*", $w),
            concat!($st, " ra, 15*", $w, "(sp)"),
            concat!($st, " s0, 14*", $w, "(sp)"),
            concat!("addi s0, sp, 16*", $w),
            concat!($st, " t0, 0*", $w, "(sp)"),
            concat!($st, " t1, 1*", $w, "(sp)"),
            concat!($st, " t2, 2*", $w, "(sp)"),
            concat!($st, " t3, 3*", $w, "(sp)"),
            concat!($st, " t4, 4*", $w, "(sp)"),
            concat!($st, " a0, 5*", $w, "(sp)"),
            concat!($st, " a1, 6*", $w, "(sp)"),
            concat!($st, " a2, 7*", $w, "(sp)"),
            concat!($st, " a3, 8*", $w, "(sp)"),
            concat!($st, " a4, 9*", $w, "(sp)"),
            concat!($st, " a5, 10*", $w, "(sp)"),
            concat!($st, " a6, 11*", $w, "(sp)"),
            concat!($st, " a7, 12*", $w, "(sp)"),
            "mv a0, t5",
            "mv a1, t6",
            "call {f}",
            "mv t6, a0",
            "mv t5, a1",
            concat!($ld, " t0, 0*", $w, "(sp)"),
            concat!($ld, " t1, 1*", $w, "(sp)"),
            concat!($ld, " t2, 2*", $w, "(sp)"),
            concat!($ld, " t3, 3*", $w, "(sp)"),
            concat!($ld, " t4, 4*", $w, "(sp)"),
            concat!($ld, " a0, 5*", $w, "(sp)"),
            concat!($ld, " a1, 6*", $w, "(sp)"),
            concat!($ld, " a2, 7*", $w, "(sp)"),
            concat!($ld, " a3, 8*", $w, "(sp)"),
            concat!($ld, " a4, 9*", $w, "(sp)"),
            concat!($ld, " a5, 10*", $w, "(sp)"),
            concat!($ld, " a6, 11*", $w, "(sp)"),
            concat!($ld, " a7, 12*", $w, "(sp)"),
            concat!($ld, " ra, 15*", $w, "(sp)"),
            concat!($ld, " s0, 14*", $w, "(sp)"),
            concat!("addi sp, sp, 16*", $w),
            "ret",
            f = sym $target,
        );
    };
}
#[cfg(target_arch = "riscv64")]
riscv_enter_trampoline!("__fgtrace_enter_tramp", enter_general, "sd", "ld", "8");
#[cfg(target_arch = "riscv64")]
riscv_trampoline!("__fgtrace_exit_tramp", exit_general, "sd", "ld", "8");
#[cfg(target_arch = "riscv32")]
riscv_enter_trampoline!("__fgtrace_enter_tramp", enter_general, "sw", "lw", "4");
#[cfg(target_arch = "riscv32")]
riscv_trampoline!("__fgtrace_exit_tramp", exit_general, "sw", "lw", "4");

#[cfg(target_arch = "x86_64")]
macro_rules! x86_64_trampoline {
    ($name:literal, $target:path) => {
        core::arch::global_asm!(
            concat!(".section .text.", $name, ",\"ax\",@progbits"),
            concat!(".globl ", $name),
            ".p2align 4",
            concat!($name, ":"),
            "push rbp",
            "mov rbp, rsp",
            "push rcx",
            "push rdx",
            "push r8",
            "push r9",
            "push r10",
            "push r11",
            "call {f}",
            "pop r11",
            "pop r10",
            "pop r9",
            "pop r8",
            "pop rdx",
            "pop rcx",
            "pop rbp",
            "ret",
            f = sym $target,
        );
    };
}
// The entry's: the site and the stack pointer come in r10 and r11 (the
// callee may change them), and rdi, rsi, rcx, rdx, r8 and r9, the argument
// registers, are kept.
#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".section .text.__fgtrace_enter_tramp,\"ax\",@progbits",
    ".globl __fgtrace_enter_tramp",
    ".p2align 4",
    "__fgtrace_enter_tramp:",
    "push rbp",
    "mov rbp, rsp",
    "push rdi",
    "push rsi",
    "push rcx",
    "push rdx",
    "push r8",
    "push r9",
    "mov rdi, r10",
    "mov rsi, r11",
    "call {f}",
    "pop r9",
    "pop r8",
    "pop rdx",
    "pop rcx",
    "pop rsi",
    "pop rdi",
    "pop rbp",
    "ret",
    f = sym enter_general,
);
#[cfg(target_arch = "x86_64")]
x86_64_trampoline!("__fgtrace_exit_tramp", exit_general);
#[cfg(all(target_arch = "x86_64", all(fgtrace_lean, not(test))))]
x86_64_trampoline!("__fgtrace_lean_tramp", lean_full);
#[cfg(all(target_arch = "riscv64", all(fgtrace_lean, not(test))))]
riscv_trampoline!("__fgtrace_lean_tramp", lean_full, "sd", "ld", "8");
#[cfg(all(target_arch = "riscv32", all(fgtrace_lean, not(test))))]
riscv_trampoline!("__fgtrace_lean_tramp", lean_full, "sw", "lw", "4");

/// [`lean_full`] through its trampoline.
#[cfg(all(fgtrace_lean, not(test)))]
#[inline(always)]
pub(super) fn lean_out(start: u64, end: u64, site: usize, sp: usize) {
    #[cfg(target_arch = "riscv64")]
    // SAFETY: the trampoline keeps every register but a0 to a3 and ra (and
    // the caller-saved FP registers).
    unsafe {
        fp_clobbering_call!(
            "call {t}",
            t = sym __fgtrace_lean_tramp,
            inout("a0") start => _,
            inout("a1") end => _,
            inout("a2") site => _,
            inout("a3") sp => _,
            out("ra") _,
        )
    };
    #[cfg(target_arch = "riscv32")]
    // SAFETY: as above, a0 to a5 (the C ABI's register pairs for the times).
    unsafe {
        fp_clobbering_call!(
            "call {t}",
            t = sym __fgtrace_lean_tramp,
            inout("a0") start as u32 => _,
            inout("a1") (start >> 32) as u32 => _,
            inout("a2") end as u32 => _,
            inout("a3") (end >> 32) as u32 => _,
            inout("a4") site => _,
            inout("a5") sp => _,
            out("ra") _,
        )
    };
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the trampoline keeps every register but rdi, rsi, rdx, rcx
    // and rax.
    unsafe {
        vector_clobbering_call!(
            "call {t}",
            t = sym __fgtrace_lean_tramp,
            inout("rdi") start => _,
            inout("rsi") end => _,
            inout("rdx") site => _,
            inout("rcx") sp => _,
            out("rax") _,
        )
    };
}

/// The record a full lean buffer could not take, to the platform (its
/// handoff). Called through a trampoline: the traced fn keeps its registers.
#[cfg(all(fgtrace_lean, not(test)))]
extern "C" fn lean_full(start: u64, end: u64, site: usize, sp: usize) {
    // SAFETY: the platform's function.
    unsafe { platform::__fgtrace_lean_full(start, end, site, sp) }
}
