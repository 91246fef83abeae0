//! Per-call counters: the instruction counter the core reads around a
//! counted call, and the further counters (`mcycle`, `mhpmcounter<n>`) kept
//! per shadow-stack slot.

use super::*;

/// The instruction counter calls read when [`Board::count_instructions`]
/// is set (the core's counted path: read before the entry's clock read and
/// after the exit's, the delta recorded after the call's record).
pub(super) struct CounterCell(pub(super) CounterReader);
// SAFETY: no pointers in it are used (`page` is null); read-only.
unsafe impl Sync for CounterCell {}

#[cfg(target_arch = "riscv64")]
pub(super) unsafe fn read_minstret(_: &CounterReader) -> u64 {
    let v: u64;
    // SAFETY: reads a counter CSR, machine mode.
    unsafe { core::arch::asm!("csrr {}, minstret", out(reg) v, options(nomem, nostack)) };
    v
}

#[cfg(target_arch = "riscv32")]
pub(super) unsafe fn read_minstret(_: &CounterReader) -> u64 {
    loop {
        let (hi, lo, hi2): (u32, u32, u32);
        // SAFETY: reads counter CSRs, machine mode.
        unsafe {
            core::arch::asm!(
                "csrr {0}, minstreth", "csrr {1}, minstret", "csrr {2}, minstreth",
                out(reg) hi, out(reg) lo, out(reg) hi2, options(nomem, nostack)
            )
        };
        if hi == hi2 {
            return (hi as u64) << 32 | lo as u64;
        }
    }
}

#[cfg(any(target_arch = "riscv32", target_arch = "riscv64"))]
pub(super) unsafe fn run_uncounted(_: &CounterReader, f: &mut dyn FnMut()) {
    f()
}

/// A further per-call counter.
#[derive(Clone, Copy)]
// x86_64 and Cortex-M boards have none: nothing reads the index there.
#[cfg_attr(any(target_arch = "x86_64", target_arch = "arm"), allow(dead_code))]
pub(super) enum Csr {
    Mcycle,
    /// `mhpmcounter<n>`, 3..=31.
    Hpm(u8),
}

pub(super) struct NamesCell(pub(super) UnsafeCell<([&'static str; 1 + MORE_COUNTERS], usize)>);
// SAFETY: written once in `init`, before any reader.
unsafe impl Sync for NamesCell {}

pub(super) struct MoreCell(pub(super) UnsafeCell<([Csr; MORE_COUNTERS], usize)>);
// SAFETY: written once in `init`, before any probe reads it.
unsafe impl Sync for MoreCell {}

/// The per-call counters' names, as the stream and the trace call them.
pub(super) fn counter_names() -> &'static [&'static str] {
    // SAFETY: written once in `init`.
    let (names, n) = unsafe { &*COUNTER_NAMES.0.get() };
    &names[..*n]
}

/// Reads a further counter.
#[cfg(any(target_arch = "riscv32", target_arch = "riscv64"))]
fn read_csr(c: Csr) -> u64 {
    macro_rules! csr64 {
        ($lo:expr, $hi:expr) => {{
            #[cfg(target_arch = "riscv64")]
            {
                let _ = $hi;
                let v: u64;
                // SAFETY: reads a counter CSR, machine mode.
                unsafe { core::arch::asm!(concat!("csrr {}, ", $lo), out(reg) v, options(nomem, nostack)) };
                v
            }
            #[cfg(target_arch = "riscv32")]
            loop {
                let (hi, lo, hi2): (u32, u32, u32);
                // SAFETY: reads counter CSRs, machine mode.
                unsafe {
                    core::arch::asm!(
                        concat!("csrr {0}, ", $hi), concat!("csrr {1}, ", $lo), concat!("csrr {2}, ", $hi),
                        out(reg) hi, out(reg) lo, out(reg) hi2, options(nomem, nostack)
                    )
                };
                if hi == hi2 {
                    break (hi as u64) << 32 | lo as u64;
                }
            }
        }};
    }
    macro_rules! hpm {
        ($i:expr, $($n:literal),*) => {
            match $i {
                $($n => csr64!(concat!("mhpmcounter", $n), concat!("mhpmcounter", $n, "h")),)*
                _ => 0,
            }
        };
    }
    match c {
        Csr::Mcycle => csr64!("mcycle", "mcycleh"),
        Csr::Hpm(i) => hpm!(
            i, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
            26, 27, 28, 29, 30, 31
        ),
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "arm"))]
fn read_csr(_: Csr) -> u64 {
    0
}

/// The core's call for a counted call's further counters (see
/// `probe::platform`): at entry their readings are kept per shadow-stack
/// slot, at exit their deltas since go out.
#[no_mangle]
pub fn __fgtrace_more_counters(slot: u32, exit: bool, out: &mut [u64; MORE_COUNTERS]) -> usize {
    // SAFETY: written once in `init`.
    let (which, n) = unsafe { &*MORE.0.get() };
    let h = hart();
    let i = slot as usize;
    if *n == 0 || i == 0 || i > STACK_DEPTH {
        return 0;
    }
    // SAFETY: this hart's table; an interrupt handler's calls use deeper
    // slots, and this slot is this call's until it pops.
    let kept = unsafe { &mut (*h.more.get())[i - 1] };
    for k in 0..*n {
        let v = read_csr(which[k]);
        if exit {
            out[k] = v.wrapping_sub(kept[k]);
        } else {
            kept[k] = v;
        }
    }
    *n
}
