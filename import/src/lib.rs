//! fgtrace's importers: other tools' data read into an fgtrace
//! [`Trace`](fgtrace_trace::Trace), and traces handed back to other tools.
//!
//! - [`bridge::zephyr`]: Zephyr's `perf printbuf` dumps, named from the
//!   firmware's ELF;
//! - [`bridge::minitrace`] and [`bridge::fastrace`] (features of the same
//!   names): spans read as calls, and traces exported to those crates'
//!   reporters;
//! - [`board_stream`] (feature `board`): the framed stream a board running
//!   `fgtrace-board` sends, decoded into one trace per session.
//!
//! It stands on the trace model and on the symbols crate (ELF reading); only
//! the span exporters use the views' event loop.

#![warn(missing_docs)]

#[cfg(feature = "board")]
pub mod board_stream;
pub mod bridge;

// The unit tests build small traces with the integration tests' helpers.
#[cfg(test)]
#[path = "../../tests/support/traces.rs"]
mod test_traces;
