//! fgtrace: a function-graph tracer and stack sampler for Rust.
//!
//! Data flows one way: `#[traced]` probes ([`probe`]) push and pop a per-thread
//! shadow stack and write fixed-size call records into per-thread buffers
//! ([`buffer`]); the [`collector`] gathers them into a [`Trace`], which is
//! saved and loaded in the fgtrace file format ([`trace::format`]) and rendered
//! by the [`view`]s. The sampler joins at the `Trace`: same clock, same threads.

pub mod buffer;
pub mod clock;
pub mod collector;
pub mod config;
pub mod probe;
pub mod trace;
pub mod view;

#[cfg(any(feature = "symbolize", feature = "minitrace", feature = "fastrace"))]
pub mod bridge;
#[cfg(feature = "pprof")]
pub mod pprof;
pub mod sampler;
#[cfg(feature = "symbolize")]
pub mod symbolize;
pub mod testing;

pub use collector::{Error, Session};
pub use config::Config;
pub use trace::{Call, Event, Trace, TraceMeta};

pub use fgtrace_macros::{notrace, traced};

/// What `#[traced]` expands to. Not a public API: may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::probe::{enter, Guard, Site, TracedFuture};
}
