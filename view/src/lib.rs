//! fgtrace's views: what renders a trace (function graph, report, folded
//! stacks and flamegraphs, Chrome, Perfetto, Firefox and pprof exports, HTML,
//! plots, diff). It depends on the trace model (`fgtrace-trace`) and, for
//! naming sampled addresses, on the symbolizer (`fgtrace-symbols`, feature
//! `symbolize`), never on the recording runtime or the importers: whatever
//! reads a trace file can use it.
//!
//! Every view reads a [`TraceMeta`](fgtrace_trace::TraceMeta) and a stream
//! of `Result<Event, TraceError>` (a
//! [`TraceReader`](fgtrace_trace::TraceReader)'s events, or
//! [`Trace::events`](fgtrace_trace::Trace::events) through [`ok_events`]) and
//! keeps only per-thread and per-function state, so a trace of any size
//! renders in bounded memory. Each view's builder or writer takes the events
//! through [`Consume`], fed by [`feed`]. When the stream fails part-way, a view
//! still renders everything read before the damage, then returns the error.

#![warn(missing_docs)]

pub mod by_value;
pub mod chart;
pub mod chrome;
pub mod consume;
pub mod diff;
#[cfg(feature = "firefox")]
pub mod firefox;
#[cfg(feature = "flame")]
pub mod flame;
#[cfg(feature = "flame")]
pub mod flame_svg;
pub mod folded;
pub mod graph;
pub mod growth;
#[cfg(feature = "html")]
pub mod html;
pub mod human;
pub mod join;
pub mod lanes;
pub mod offcpu;
#[cfg(feature = "perfetto")]
pub mod perfetto;
#[cfg(feature = "plot")]
pub mod plot;
#[cfg(feature = "pprof")]
pub mod pprof;
pub mod report;
pub mod resolve;
pub mod sampled;
pub mod threads;
pub mod window;

// The unit tests build small traces with the integration tests' helpers.
#[cfg(test)]
#[path = "../../tests/support/traces.rs"]
mod test_traces;

pub use consume::{feed, ok_events, Consume};
pub use resolve::{FnResolve, FrameInfo, HexResolve, Resolve};
pub use threads::ThreadSel;

pub use graph::{write_graph, GraphOptions, GraphWriter, ThreadColumn};
pub use report::{
    write_report, write_report_from, Column, FunctionStats, FutureStats, LongPoll, OffStats,
    PollCallee, Report, ReportBuilder, ReportOptions, ReportStyle, ThreadLoss,
};

use fgtrace_trace::TraceError;
use std::io;

/// The views as methods of an in-memory [`Trace`](fgtrace_trace::Trace)
/// (`use fgtrace::view::TraceViews;`). A trace in memory has no decode
/// errors, so only write errors come back.
pub trait TraceViews {
    /// Writes the trace's function graph (see [`graph`]).
    fn write_graph(&self, opts: &GraphOptions, w: impl io::Write) -> io::Result<()>;
    /// The trace's per-function statistics (see [`report`]).
    fn report(&self, opts: &ReportOptions) -> Report;
    /// Writes the trace's report as text.
    fn write_report(&self, opts: &ReportOptions, w: impl io::Write) -> io::Result<()>;
    /// Writes the trace's HTML report (see [`html`]), naming samples with
    /// `resolver` (a `fgtrace_symbols::symbolize::Symbolizer` of the traced process's
    /// mappings, or [`HexResolve`] for bare addresses).
    #[cfg(feature = "html")]
    fn write_html(
        &self,
        resolver: impl Resolve,
        opts: &html::HtmlOptions,
        w: impl io::Write,
    ) -> io::Result<()>;
}

impl TraceViews for fgtrace_trace::Trace {
    fn write_graph(&self, opts: &GraphOptions, w: impl io::Write) -> io::Result<()> {
        if opts.poll_values.is_none() && graph::PollValues::wanted(self.meta()) {
            // An `async fn`'s values go on its polls: a first pass finds them.
            let opts = GraphOptions {
                poll_values: Some(std::sync::Arc::new(graph::PollValues::collect(
                    self.meta(),
                    ok_events(self.events()),
                ))),
                ..opts.clone()
            };
            return write_graph(self.meta(), ok_events(self.events()), &opts, w).map_err(into_io);
        }
        write_graph(self.meta(), ok_events(self.events()), opts, w).map_err(into_io)
    }

    fn report(&self, opts: &ReportOptions) -> Report {
        let mut b = ReportBuilder::new(self.meta(), opts);
        // Events in memory have no read error to come back.
        let Ok(_) = feed(&mut b, ok_events(self.events()));
        b.finish()
    }

    fn write_report(&self, opts: &ReportOptions, w: impl io::Write) -> io::Result<()> {
        write_report(self.meta(), ok_events(self.events()), opts, w).map_err(into_io)
    }

    #[cfg(feature = "html")]
    fn write_html(
        &self,
        resolver: impl Resolve,
        opts: &html::HtmlOptions,
        w: impl io::Write,
    ) -> io::Result<()> {
        html::write_html(self.meta(), || ok_events(self.events()), resolver, opts, w)
            .map_err(into_io)
    }
}

/// For the `io::Result` convenience methods on `Trace`: an in-memory trace has
/// no decode errors, so only write errors come back.
pub(crate) fn into_io(e: TraceError) -> io::Error {
    match e {
        TraceError::Io(e) => e,
        other => io::Error::new(io::ErrorKind::InvalidData, other),
    }
}
