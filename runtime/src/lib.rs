//! fgtrace's std runtime: what records a running program on a host.
//!
//! `#[traced]` probes (the `no_std` core, [`fgtrace_core`]) push and pop a
//! per-thread shadow stack and write fixed-size call records into per-thread
//! buffers ([`buffer`]); a [`Session`] started with a [`Config`] owns the
//! [`collector`] that gathers them into a [`Trace`](fgtrace_trace::Trace)
//! (the `fgtrace-trace` crate: the model and the file format). The
//! [`sampler`], the off-CPU recorder and the counters ([`pmu`], [`alloc`])
//! join at the trace: same clock, same threads. [`control`] lets another
//! process start and stop sessions; [`launch`] is what `fgtrace record --
//! COMMAND` and `FGTRACE_RECORD` use.
//!
//! Users add the `fgtrace` facade, which re-exports this crate at its root;
//! the views and `fgtrace::testing` are crates above this one, so nothing
//! here reaches them.

#![warn(missing_docs)]

mod active;
pub mod alloc;
pub mod buffer;
pub mod collector;
pub mod config;
pub mod control;
pub mod dump;
pub mod launch;
// Hidden: public for `fgtrace-testing` only (a capture's off-CPU switches),
// not an API of `fgtrace` users; it may change in any release.
#[doc(hidden)]
pub mod offcpu;
#[cfg(target_os = "linux")]
mod perf_ring;
pub mod pmu;
// Hidden: public for `fgtrace-testing` only (the process's identity in a
// capture's trace).
#[doc(hidden)]
pub mod process;
// Hidden: public for `fgtrace-testing` only (a capture's own per-thread
// recording state, feature `testing`).
#[doc(hidden)]
pub mod recorder;
pub mod sampler;
mod startup;
// Hidden: public for `fgtrace-testing` only (the thread id and name a
// capture records).
#[doc(hidden)]
pub mod thread;
#[cfg(feature = "tracing")]
pub mod tracing;

pub use collector::{Error, Session};
pub use config::Config;
pub use pmu::Counter;

/// The error for what this system cannot record: names it, the system, and
/// where it is supported (the guide's Platforms page, docs/src/platforms.md, says the same).
#[doc(hidden)]
pub fn unsupported(what: &str) -> String {
    format!(
        "{what} is not supported on this system ({} {}): it needs Linux",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// Sessions whose state is still allocated, and shadow stacks alive in the
/// process (for tests of the stop protocol). Not a public API.
#[doc(hidden)]
pub fn live_counts() -> (usize, usize) {
    use std::sync::atomic::Ordering::Relaxed;
    (
        active::LIVE_SESSIONS.load(Relaxed),
        recorder::LIVE_STACKS.load(Relaxed),
    )
}
