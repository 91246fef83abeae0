//! fgtrace on Cortex-M: qemu's mps2-an385 (Cortex-M3, thumbv7m-none-eabi)
//! and mps2-an386 (Cortex-M4F, thumbv7em-none-eabihf), no OS.
//!
//! The workload is the other examples' (`../common/workload.rs`): the same
//! traced functions, the same ground truth (`truth NAME CALLS`), the same
//! traced calls from the timer interrupt, here at two priorities: SysTick
//! (low) runs `irq_low`, which pends a higher-priority interrupt that
//! preempts it and runs `irq_tick`, so every `irq_low` call holds one
//! `irq_tick` call made at the higher priority.
//!
//! Board support, all in `firmware.rs`: a vector table and a reset handler;
//! the CMSDK UART at 0x4000_4000 is the sink and the command input; the
//! CMSDK timer0 at 0x4000_0000, free-running down from 0xFFFF_FFFF at
//! 25 MHz, is the probe's clock (qemu's DWT does not count: the `dwt`
//! binary names it and gets the runtime's refusal); SysTick at the
//! session's rate drives the timer interrupt; semihosting `SYS_EXIT_EXTENDED`
//! ends the run with a status.
#![no_std]
#![no_main]

/// Whether the probe's clock is DWT CYCCNT (which qemu does not count:
/// `src/bin/dwt.rs` names it, and gets the runtime's refusal).
const DWT_CLOCK: bool = false;
/// Whether the stream and the commands go over RTT (`src/bin/rtt.rs`)
/// rather than the UART.
const RTT: bool = false;

include!("firmware.rs");
