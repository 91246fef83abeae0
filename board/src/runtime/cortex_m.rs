//! Cortex-M (Armv7-M, privileged, one CPU): interrupts masked with PRIMASK,
//! and the probe's clock, a 32-bit counter the firmware names (DWT
//! `CYCCNT`, or a timer's or SysTick's count by address and direction),
//! which the core extends to 64 bits (`fgtrace_core::clock::cortex_m`).
//!
//! `init` checks that the named counter advances, and refuses to record
//! with a clear message when it does not: some cores (and qemu) have a DWT
//! whose `CYCCNT` reads 0 and ignores writes while `DWT_CTRL.NOCYCCNT`
//! reads clear, so the register's word is not trusted.

use super::*;
use core::fmt;
use fgtrace_core::clock::cortex_m as counter;

/// The Debug Exception and Monitor Control Register (`TRCENA`: bit 24).
const DEMCR: *mut u32 = 0xE000_EDFC as *mut u32;
/// The DWT's control register (`CYCCNTENA`: bit 0).
const DWT_CTRL: *mut u32 = 0xE000_1000 as *mut u32;
/// The DWT's cycle counter.
const DWT_CYCCNT: *mut u32 = 0xE000_1004 as *mut u32;
/// Reads of a counter at `init` before it is declared stopped: enough for
/// a counter 10,000 times slower than the CPU (a 32 kHz timer on a 320 MHz
/// core), a few milliseconds of start-up.
const CHECK_READS: u32 = 100_000;

/// Which way a counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Up (DWT `CYCCNT`, most free-running timers).
    Up,
    /// Down (SysTick's current value, the CMSDK and many vendor timers):
    /// the probe reads its complement.
    Down,
}

/// The counter a Cortex-M clock reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Counter {
    /// DWT `CYCCNT`, enabled by `init`.
    Dwt,
    /// A 32-bit counter at an address, set up and running before `init`.
    At { addr: usize, down: bool },
}

impl Clock {
    /// DWT `CYCCNT`, the core's cycle counter, at `hz` (the core clock):
    /// `init` enables it (`DEMCR.TRCENA`, `DWT_CTRL.CYCCNTENA`) and checks
    /// that it counts.
    pub const fn dwt_cyccnt(hz: u64) -> Clock {
        Clock {
            name: "cyccnt",
            ticks_per_sec: hz,
            counter: Counter::Dwt,
        }
    }

    /// A free-running counter at `addr` that wraps through all 32 bits (a
    /// timer's count register; not SysTick's 24-bit one), counting
    /// `direction` at `hz`, named `name` in the trace. The firmware starts
    /// it before `init`, which checks that it counts.
    pub const fn counter(name: &'static str, addr: usize, direction: Direction, hz: u64) -> Clock {
        Clock {
            name,
            ticks_per_sec: hz,
            counter: Counter::At {
                addr,
                down: matches!(direction, Direction::Down),
            },
        }
    }
}

/// The clock did not advance at `init`: the runtime records nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockRefused {
    /// The clock's name.
    pub clock: &'static str,
    /// What the counter read, every time.
    pub reading: u32,
}

impl fmt::Display for ClockRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fgtrace: the clock `{}` does not advance (it read {:#x} {} times): nothing is \
             recorded. ",
            self.clock, self.reading, CHECK_READS
        )?;
        if self.clock == "cyccnt" {
            f.write_str(
                "This core's DWT has no working cycle counter (qemu's reads 0): name a \
                 running timer with Clock::counter instead.",
            )
        } else {
            f.write_str("Start the timer before init, or name another counter.")
        }
    }
}

/// Set when `init` found the clock stopped.
static REFUSED: AtomicBool = AtomicBool::new(false);
static REFUSED_READING: AtomicU32 = AtomicU32::new(0);

/// Why the runtime refuses to record, if it does: the clock named at
/// `init` did not advance.
pub fn clock_refusal() -> Option<ClockRefused> {
    REFUSED.load(Relaxed).then(|| ClockRefused {
        // SAFETY: written once in `init`.
        clock: unsafe { *CLOCK_NAME.0.get() },
        reading: REFUSED_READING.load(Relaxed),
    })
}

/// Sets the core's counter from the clock and checks that it advances;
/// says why on the stream if it does not.
pub(super) fn init_clock(c: &Clock) {
    let (addr, down) = match c.counter {
        Counter::Dwt => {
            // SAFETY: the architecture's debug registers (Armv7-M), read
            // and written in privileged mode.
            unsafe {
                DEMCR.write_volatile(DEMCR.read_volatile() | 1 << 24);
                DWT_CYCCNT.write_volatile(0);
                DWT_CTRL.write_volatile(DWT_CTRL.read_volatile() | 1);
            }
            (DWT_CYCCNT as *const u32, false)
        }
        Counter::At { addr, down } => (addr as *const u32, down),
    };
    // SAFETY: the architecture's register, or the firmware's (its promise
    // in `Clock::counter`).
    unsafe { counter::set_counter(addr, down) };
    let first = counter::raw();
    let advanced = (0..CHECK_READS).any(|_| counter::raw() != first);
    REFUSED_READING.store(first ^ if down { !0 } else { 0 }, Relaxed);
    REFUSED.store(!advanced, Relaxed);
    if let Some(r) = clock_refusal() {
        textf(format_args!("{r}"));
    }
}

/// `start` while the clock is refused: says so again, records nothing.
pub(super) fn refuse_start() -> bool {
    match clock_refusal() {
        Some(r) => {
            textf(format_args!("{r}"));
            true
        }
        None => false,
    }
}

/// Masks interrupts (`cpsid i`); returns the old PRIMASK.
#[no_mangle]
pub fn __fgtrace_irq_save() -> usize {
    let old: usize;
    // SAFETY: reads PRIMASK and sets it, privileged mode; a compiler
    // barrier (no `nomem`), as the masked section's accesses must stay
    // inside it.
    unsafe { core::arch::asm!("mrs {}, primask", "cpsid i", out(reg) old, options(nostack)) };
    old
}

/// Restores what [`__fgtrace_irq_save`] returned (PRIMASK as it was).
#[no_mangle]
pub fn __fgtrace_irq_restore(old: usize) {
    // SAFETY: writes PRIMASK back, privileged mode; a compiler barrier.
    unsafe { core::arch::asm!("msr primask, {}", in(reg) old, options(nostack)) };
}
