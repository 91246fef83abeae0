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
//! Layers, each importing only the ones below it; each is a crate, so the
//! compiler enforces it:
//!
//! | layer | crate | feature |
//! |---|---|---|
//! | recording core: clock, sites, control word, shadow stack, guard, records, unwinders | `fgtrace-core` (`no_std`) | always |
//! | the trace model and file format | `fgtrace-trace` | always |
//! | runtime: [`Session`], [`Config`], collector, buffers, sampler, off-CPU, counters, control | this crate | always |
//! | analysis: views, symbolize, pprof, bridges, board decoder | `fgtrace-view` | `views`, `symbolize`, `pprof`, ... |
//! | `testing`: captures and assertions (renders failures with the views) | this crate | `testing` |
//! | the `fgtrace` command | `fgtrace-cli` | |

mod active;
pub mod alloc;
pub mod buffer;
pub mod collector;
pub mod config;
pub mod control;
pub mod dump;
pub mod launch;
mod offcpu;
#[cfg(target_os = "linux")]
mod perf_ring;
pub mod pmu;
mod process;
mod recorder;
pub mod sampler;
mod startup;
#[cfg(feature = "testing")]
pub mod testing;
mod thread;
#[cfg(feature = "tracing")]
pub mod tracing;

/// The trace model and file format (the `fgtrace-trace` crate).
pub use fgtrace_trace as trace;
/// The trace clock: ticks, calibration to nanoseconds.
pub use fgtrace_trace::clock;

/// The views (the `fgtrace-view` crate): graph, report, folded stacks,
/// flamegraphs, exports, diff.
#[cfg(feature = "views")]
pub use fgtrace_view as view;
/// Decoding a board's stream into traces.
#[cfg(feature = "board")]
pub use fgtrace_view::board_stream;
#[cfg(any(feature = "symbolize", feature = "minitrace", feature = "fastrace"))]
pub use fgtrace_view::bridge;
#[cfg(feature = "pprof")]
pub use fgtrace_view::pprof;
#[cfg(feature = "symbolize")]
pub use fgtrace_view::symbolize;

pub use collector::{Error, Session};

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
    pub use fgtrace_core::probe::{enter, enter_values, Guard, TracedFuture, ValuesFuture};
    pub use fgtrace_core::site::Site;
    pub use fgtrace_core::values::{
        call_once, shape, tag, value, Inner, InnerOther, InnerValue, RawValue, Shape, MAX_STR,
    };

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
