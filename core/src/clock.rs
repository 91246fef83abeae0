//! The trace clock a probe reads: a raw cycle or time counter, one
//! instruction, no syscall, no lock. Calibration to nanoseconds happens in the
//! layers above, off the hot path.

#[cfg(any(test, all(target_arch = "arm", not(feature = "std"))))]
pub mod cortex_m;

/// Reads the raw tick counter: `rdtsc` on x86/x86_64, `rdtime` on RISC-V
/// (`mcycle` with the `mcycle` feature: machine-mode firmware), `cntvct_el0`
/// on AArch64, and on Cortex-M (Arm without `std`) the 32-bit counter the
/// board's runtime names, extended (`clock::cortex_m`, built on Cortex-M
/// only). About 10 ns on the VMs we measure on.
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc is available on every x86_64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(target_arch = "x86")]
    {
        // SAFETY: every i586+ CPU has rdtsc; Rust's i686 targets require it.
        unsafe { core::arch::x86::_rdtsc() }
    }
    #[cfg(all(target_arch = "riscv64", feature = "mcycle"))]
    {
        let t: u64;
        // SAFETY: reads the machine cycle counter (machine mode, the feature's promise).
        unsafe { core::arch::asm!("csrr {}, mcycle", out(reg) t, options(nomem, nostack)) };
        t
    }
    #[cfg(all(target_arch = "riscv32", feature = "mcycle"))]
    {
        // As with rdtime below: the high half may tick over between reads.
        loop {
            let (hi, lo, hi2): (u32, u32, u32);
            // SAFETY: reads the machine cycle counter halves, machine mode.
            unsafe {
                core::arch::asm!(
                    "csrr {0}, mcycleh", "csrr {1}, mcycle", "csrr {2}, mcycleh",
                    out(reg) hi, out(reg) lo, out(reg) hi2,
                    options(nomem, nostack)
                )
            };
            if hi == hi2 {
                return (hi as u64) << 32 | lo as u64;
            }
        }
    }
    #[cfg(all(target_arch = "riscv64", not(feature = "mcycle")))]
    {
        let t: u64;
        // SAFETY: rdtime reads the time CSR (readable from user mode on Linux,
        // and in machine mode on boards).
        unsafe { core::arch::asm!("rdtime {}", out(reg) t, options(nomem, nostack)) };
        t
    }
    #[cfg(all(target_arch = "riscv32", not(feature = "mcycle")))]
    {
        // The high half may tick over between the two reads: read it again
        // until it agrees.
        loop {
            let (hi, lo, hi2): (u32, u32, u32);
            // SAFETY: reads the time CSR halves, no memory access.
            unsafe {
                core::arch::asm!(
                    "rdtimeh {0}", "rdtime {1}", "rdtimeh {2}",
                    out(reg) hi, out(reg) lo, out(reg) hi2,
                    options(nomem, nostack)
                )
            };
            if hi == hi2 {
                return (hi as u64) << 32 | lo as u64;
            }
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let t: u64;
        // SAFETY: the virtual counter is readable from EL0 on Linux, macOS
        // and Windows.
        unsafe { core::arch::asm!("mrs {}, cntvct_el0", out(reg) t, options(nomem, nostack)) };
        t
    }
    #[cfg(all(target_arch = "arm", not(feature = "std")))]
    {
        cortex_m::ticks()
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "riscv64",
        target_arch = "riscv32",
        target_arch = "aarch64",
        all(target_arch = "arm", not(feature = "std"))
    )))]
    {
        fallback_ticks()
    }
}

/// Name of the counter [`ticks`] reads, stored in traces.
pub const SOURCE: &str = if cfg!(any(target_arch = "x86_64", target_arch = "x86")) {
    "tsc"
} else if cfg!(all(
    any(target_arch = "riscv64", target_arch = "riscv32"),
    feature = "mcycle"
)) {
    "mcycle"
} else if cfg!(any(target_arch = "riscv64", target_arch = "riscv32")) {
    "rdtime"
} else if cfg!(target_arch = "aarch64") {
    "cntvct_el0"
} else if cfg!(all(target_arch = "arm", not(feature = "std"))) {
    "counter32"
} else {
    "monotonic"
};

#[cfg(all(
    feature = "std",
    not(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "riscv64",
        target_arch = "riscv32",
        target_arch = "aarch64"
    ))
))]
fn fallback_ticks() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[cfg(all(
    not(feature = "std"),
    not(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "riscv64",
        target_arch = "riscv32",
        target_arch = "aarch64",
        target_arch = "arm"
    ))
))]
fn fallback_ticks() -> u64 {
    extern "Rust" {
        /// A counter the platform supplies where the core knows none.
        fn __fgtrace_ticks() -> u64;
    }
    // SAFETY: the platform's function, with no preconditions.
    unsafe { __fgtrace_ticks() }
}
