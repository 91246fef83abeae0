//! The example firmware with DWT CYCCNT as the probe's clock: under qemu,
//! whose DWT does not count, the runtime refuses to record and says why on
//! the stream (run.sh with CLOCK=dwt; `cli/tests/board.rs` checks it).
#![no_std]
#![no_main]

/// The probe's clock is DWT CYCCNT.
const DWT_CLOCK: bool = true;
/// Over the UART.
const RTT: bool = false;

include!("../firmware.rs");
