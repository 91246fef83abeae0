//! fgtrace on a board: `#[traced]` firmware records into static per-hart
//! buffers and streams framed records, samples and its site table over any
//! byte sink (a UART); the host's `fgtrace board` decodes the stream into an
//! ordinary trace.
//!
//! * [`wire`]: the framed format, shared by the target's encoder and the
//!   host's decoder: a sync word, a sequence number, a length and a CRC per
//!   frame, so a host that attaches late or loses bytes resynchronises.
//! * [`rtt`]: a SEGGER RTT control block, so a debug probe (or any GDB
//!   server) reads the stream from RAM; with the feature `rtt`, the
//!   firmware's `_SEGGER_RTT`.
//! * `runtime` (feature `riscv`: RISC-V machine mode; feature `x86_64`:
//!   x86_64 bare metal, ring 0, one CPU; feature `cortex-m`: Armv7-M,
//!   thumbv7m and thumbv7em): the recording runtime: per-hart
//!   state and double buffers, the core's hooks, stream and flight recorder
//!   modes, the timer-interrupt sampler, host commands.
#![no_std]
#![warn(missing_docs)]

pub mod rtt;
#[cfg(any(
    all(
        feature = "riscv",
        any(target_arch = "riscv32", target_arch = "riscv64")
    ),
    all(feature = "x86_64", target_arch = "x86_64", target_os = "none"),
    all(feature = "cortex-m", target_arch = "arm", target_os = "none")
))]
pub mod runtime;
pub mod wire;

pub use fgtrace_core as core;
pub use fgtrace_macros::{notrace, traced};

/// What `#[traced]` expands to (firmware depends on this crate under the name
/// `fgtrace`, so `#[fgtrace::traced]` reads the same as on a host). Not a
/// public API.
#[doc(hidden)]
pub mod __private {
    pub use fgtrace_core::probe::{enter, Guard, TracedFuture};
    pub use fgtrace_core::site::Site;
}
