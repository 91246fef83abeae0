//! fgtrace: a function-graph tracer and stack sampler for Rust.
//!
//! Data flows one way: `#[traced]` probes (the `no_std` core,
//! [`fgtrace_core`]) push and pop a per-thread shadow stack and write
//! fixed-size call records into per-thread buffers ([`buffer`]); the
//! [`collector`] gathers them into a [`Trace`], which is saved and loaded in
//! the fgtrace file format ([`trace::format`]) and rendered by the views
//! (feature `views`). The sampler joins at the `Trace`: same clock, same
//! threads.
//!
//! Layers, each importing only the ones below it (`tests/layers.rs` checks
//! that no module imports in a cycle):
//!
//! | layer | where | feature |
//! |---|---|---|
//! | recording core: clock, sites, control word, shadow stack, guard, records, unwinders | `fgtrace-core` (`no_std`) | always |
//! | runtime: [`Session`], [`Config`], collector, buffers, sampler, [`Trace`] and its file format | this crate | always |
//! | analysis: views, symbolize, pprof, bridges | this crate | `views`, `symbolize`, `pprof`, ... |
//! | `testing`: captures and assertions | this crate | `testing` |
//! | the `fgtrace` command | `fgtrace-cli` | |

mod active;
pub mod alloc;
pub mod buffer;
pub mod clock;
pub mod collector;
pub mod config;
pub mod control;
mod offcpu;
#[cfg(target_os = "linux")]
mod perf_ring;
pub mod pmu;
mod recorder;
pub mod snapshot;
mod thread;
pub mod trace;

#[cfg(feature = "views")]
pub mod view;

#[cfg(feature = "board")]
pub mod board;
#[cfg(any(feature = "symbolize", feature = "minitrace", feature = "fastrace"))]
pub mod bridge;
#[cfg(feature = "pprof")]
pub mod pprof;
#[path = "sampler/mod.rs"]
mod sampling;
#[cfg(feature = "symbolize")]
pub mod symbolize;
#[cfg(feature = "testing")]
pub mod testing;
// The unit tests build small traces with the integration tests' helpers,
// which name this crate `fgtrace`.
#[cfg(test)]
extern crate self as fgtrace;
#[cfg(test)]
#[path = "../tests/support/traces.rs"]
mod test_traces;

pub use collector::{Error, Session};

/// Stack sampling: sources, the signal handler, the perf_event ring, and
/// [`record`](sampler::record) for a whole-process sampling run.
pub mod sampler {
    pub use crate::collector::record;
    pub use crate::sampling::*;
}
pub use config::Config;
pub use pmu::Counter;
pub use trace::{Call, Event, Trace, TraceMeta};

pub use fgtrace_core as core;
pub use fgtrace_macros::{notrace, traced};

/// The recording core's hot path, for code that instruments itself by hand.
pub mod probe {
    pub use fgtrace_core::probe::{current_depth, enter, Guard, TracedFuture};
    pub use fgtrace_core::site::Site;
}

/// What `#[traced]` expands to. Not a public API: may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use fgtrace_core::probe::{enter, Guard, TracedFuture};
    pub use fgtrace_core::site::Site;

    /// Sessions whose state is still allocated, and shadow stacks alive in
    /// the process (for tests of the stop protocol).
    pub fn live_counts() -> (usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            crate::active::LIVE_SESSIONS.load(Relaxed),
            crate::recorder::LIVE_STACKS.load(Relaxed),
        )
    }
}
