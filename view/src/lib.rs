//! fgtrace's analysis side: the views that render a trace, and what they
//! need to name and import things (symbolizer, ELF reading, bridges, the
//! board stream decoder). It depends on the trace model (`fgtrace-trace`),
//! never on the recording runtime: whatever reads a trace file can use it.
//!
//! Every view reads a [`TraceMeta`] and a stream of `Result<Event, TraceError>`
//! (a [`TraceReader`](fgtrace_trace::TraceReader)'s events, or
//! [`Trace::events`](fgtrace_trace::Trace::events) through [`ok_events`]) and keeps only
//! per-thread and per-function state, so a trace of any size renders in bounded
//! memory. When the stream fails part-way, a view still renders everything read
//! before the damage, then returns the error.

#[cfg(feature = "board")]
pub mod board_stream;
#[cfg(any(feature = "symbolize", feature = "minitrace", feature = "fastrace"))]
pub mod bridge;
pub mod chart;
pub mod chrome;
pub mod diff;
#[cfg(feature = "firefox")]
pub mod firefox;
#[cfg(feature = "flame")]
pub mod flame;
#[cfg(feature = "flame")]
pub mod flame_svg;
pub mod folded;
pub mod format;
pub mod graph;
#[cfg(feature = "html")]
pub mod html;
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
#[cfg(feature = "symbolize")]
pub mod symbolize;

// The unit tests build small traces with the integration tests' helpers.
#[cfg(test)]
#[path = "../../tests/support/traces.rs"]
mod test_traces;

pub use resolve::{FnResolve, FrameInfo, HexResolve, Resolve};

pub use graph::{write_graph, GraphOptions, GraphWriter, ThreadColumn};
pub use report::{
    write_report, Column, FunctionStats, FutureStats, OffStats, Report, ReportBuilder,
    ReportOptions, ReportStyle, ThreadLoss,
};

use fgtrace_trace::{Event, TraceError, TraceMeta};
use std::io;
use std::str::FromStr;

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
    /// `resolver` (a [`symbolize::Symbolizer`] of the traced process's
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
        write_graph(self.meta(), ok_events(self.events()), opts, w).map_err(into_io)
    }

    fn report(&self, opts: &ReportOptions) -> Report {
        let mut b = ReportBuilder::new(self.meta(), opts);
        for ev in self.events() {
            b.push(&ev);
        }
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

/// Selects threads by OS thread id or by name, for the views' thread filters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ThreadSel {
    /// OS thread id (`ThreadInfo::tid`).
    Tid(u32),
    /// A glob (`*`, `?`) matched against the thread name or its `name-tid` label.
    Name(String),
}

impl FromStr for ThreadSel {
    type Err = std::convert::Infallible;
    /// All digits is a tid; anything else is a name glob.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.parse::<u32>() {
            Ok(tid) => ThreadSel::Tid(tid),
            Err(_) => ThreadSel::Name(s.to_string()),
        })
    }
}

/// Which threads (by index into `meta.threads`) pass `sels`; empty `sels` means all.
pub(crate) fn thread_mask(meta: &TraceMeta, sels: &[ThreadSel]) -> Vec<bool> {
    meta.threads
        .iter()
        .enumerate()
        .map(|(i, t)| {
            sels.is_empty()
                || sels.iter().any(|s| match s {
                    ThreadSel::Tid(tid) => t.tid == *tid,
                    ThreadSel::Name(glob) => {
                        let m = wildmatch::WildMatch::new(glob);
                        m.matches(&t.name) || m.matches(&meta.thread_label(i as u32))
                    }
                })
        })
        .collect()
}

/// Whether thread `t` passes the mask; threads the metadata does not list pass
/// only when there is no filter (so a damaged index never hides data silently).
pub(crate) fn shown(mask: &[bool], filtered: bool, t: u32) -> bool {
    mask.get(t as usize).copied().unwrap_or(!filtered)
}

/// Hands every event of `events` to `push` until the stream ends or fails
/// (and returns the failure): what the builders' `extend` do, so that what was
/// read before damage is kept and rendered.
pub(crate) fn push_all(
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    mut push: impl FnMut(&Event),
) -> Result<(), TraceError> {
    for ev in events {
        push(&ev?);
    }
    Ok(())
}

/// In-memory events as the fallible stream the views take.
pub fn ok_events<I: IntoIterator<Item = Event>>(
    events: I,
) -> impl Iterator<Item = Result<Event, TraceError>> {
    events.into_iter().map(Ok)
}

/// For the `io::Result` convenience methods on `Trace`: an in-memory trace has
/// no decode errors, so only write errors come back.
pub(crate) fn into_io(e: TraceError) -> io::Error {
    match e {
        TraceError::Io(e) => e,
        other => io::Error::new(io::ErrorKind::InvalidData, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fgtrace_trace::ThreadInfo;

    #[test]
    fn thread_selectors() {
        let mut meta = TraceMeta::default();
        for (tid, name) in [(10, "main"), (11, "worker-1"), (12, "worker-2")] {
            meta.threads.push(ThreadInfo {
                tid,
                name: name.into(),
                ..Default::default()
            });
        }
        let sel = |s: &[&str]| {
            thread_mask(
                &meta,
                &s.iter().map(|s| s.parse().unwrap()).collect::<Vec<_>>(),
            )
        };
        assert_eq!(sel(&[]), [true, true, true]);
        assert_eq!(sel(&["11"]), [false, true, false]);
        assert_eq!(sel(&["main"]), [true, false, false]);
        assert_eq!(sel(&["worker-*"]), [false, true, true]);
        assert_eq!(sel(&["worker-2-12", "10"]), [true, false, true]);
        assert_eq!(sel(&["nope"]), [false, false, false]);
    }
}
