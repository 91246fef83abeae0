//! fgtrace: a function-graph tracer and stack sampler for Rust.
//!
//! This crate is the facade users add: it re-exports the crates below at
//! stable paths, and has no code of its own.
//!
//! ```
//! #[fgtrace::traced]
//! fn handle(req: &str) -> usize { parse(req) }
//! #[fgtrace::traced]
//! fn parse(req: &str) -> usize { req.lines().count() }
//!
//! // Record every `#[traced]` call of the process, then print its function
//! // graph (feature `views`), as `fgtrace graph trace.fgt` would.
//! let session = fgtrace::Session::start(fgtrace::Config::default())?;
//! handle("GET /\nHost: x");
//! let trace = session.stop()?;
//! # #[cfg(feature = "views")] {
//! use fgtrace::view::{GraphOptions, TraceViews};
//! let mut graph = Vec::new();
//! trace.write_graph(&GraphOptions::default(), &mut graph)?;
//! let graph = String::from_utf8(graph)?;
//! assert!(graph.contains("handle() {") && graph.contains("parse();"), "{graph}");
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! In tests, `fgtrace::testing` (feature `testing`) captures one closure's
//! calls and asserts on them; the user guide (`docs/` in the repository)
//! covers the rest.
//!
//! Data flows one way: `#[traced]` probes (the `no_std` core,
//! [`fgtrace_core`]) push and pop a per-thread shadow stack and write
//! fixed-size call records into per-thread buffers ([`buffer`]); the
//! [`collector`] gathers them into a [`Trace`], which is saved and loaded in
//! the fgtrace file format ([`trace::file`]) and rendered by the views
//! (feature `views`). The sampler joins at the `Trace`: same clock, same
//! threads.
//!
//! Layers, each importing only the ones below it; each is a crate, so the
//! compiler enforces it:
//!
//! | layer | crate | feature |
//! |---|---|---|
//! | recording core: clock, sites, control word, shadow stack, guard, records, unwinders | `fgtrace-core` (`no_std`) | always |
//! | the attributes `#[traced]`, `#[notrace]`, `#[budget]` | `fgtrace-macros` | always |
//! | the trace model and file format | `fgtrace-trace` | always |
//! | runtime: [`Session`], [`Config`], collector, buffers, sampler, off-CPU, counters, control | `fgtrace-runtime` | always |
//! | symbols: ELF symbols and the symbolizer | `fgtrace-symbols` | `symbolize` |
//! | views: graph, report, flamegraphs, exports, diff, HTML, plots | `fgtrace-view` | `views`, `flame`, `html`, ... |
//! | importers: Zephyr dumps, span bridges, the board stream decoder | `fgtrace-import` | `symbolize`, `board`, `minitrace`, `fastrace` |
//! | `testing`: captures and assertions (renders failures with the views) | `fgtrace-testing` | `testing` |
//! | the `fgtrace` and `cargo fgtrace` commands | `fgtrace-cli` | |

#![warn(missing_docs)]

#[cfg(feature = "tracing")]
pub use fgtrace_runtime::tracing;
pub use fgtrace_runtime::{alloc, buffer, collector, config, control, dump, launch, pmu, sampler};
#[cfg(feature = "testing")]
pub use fgtrace_testing as testing;

/// The trace model and file format (the `fgtrace-trace` crate).
pub use fgtrace_trace as trace;
/// The trace clock: ticks, calibration to nanoseconds.
pub use fgtrace_trace::clock;

/// Decoding a board's stream into traces.
#[cfg(feature = "board")]
pub use fgtrace_import::board_stream;
/// Other tools' data as traces, and traces as other tools' data: Zephyr
/// dumps, minitrace and fastrace spans.
#[cfg(any(feature = "symbolize", feature = "minitrace", feature = "fastrace"))]
pub use fgtrace_import::bridge;
/// Addresses to function names, from the binary's own ELF and DWARF.
#[cfg(feature = "symbolize")]
pub use fgtrace_symbols::symbolize;
/// The views (the `fgtrace-view` crate): graph, report, folded stacks,
/// flamegraphs, exports, diff.
#[cfg(feature = "views")]
pub use fgtrace_view as view;
#[cfg(feature = "pprof")]
pub use fgtrace_view::pprof;

pub use fgtrace_runtime::{Counter, Error, Session};

pub use fgtrace_runtime::Config;
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
    pub use fgtrace_core::counted::{count, planned, Counted};
    pub use fgtrace_core::probe::{enter, enter_values, Guard, TracedFuture, ValuesFuture};
    pub use fgtrace_core::site::Site;
    pub use fgtrace_core::values::{
        call_once, shape, tag, value, Inner, InnerOther, InnerValue, RawValue, Shape, MAX_STR,
    };
    pub use fgtrace_runtime::live_counts;
}
