//! The example firmware with its stream on an RTT up-channel and its
//! commands on the down-channel (run.sh with TRANSPORT=rtt: the host reads
//! them through qemu's GDB server, `fgtrace board --gdb`). The up-channel
//! blocks when full, so nothing is lost, and the firmware waits for the host
//! to read it all before it exits.
#![no_std]
#![no_main]

/// The probe's clock is the timer.
const DWT_CLOCK: bool = false;
/// Over RTT.
const RTT: bool = true;

include!("../firmware.rs");
