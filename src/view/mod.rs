//! Views: render a trace's event stream as text.
//!
//! Every view reads a [`TraceMeta`] and a stream of `Result<Event, TraceError>`
//! (a [`TraceReader`](crate::trace::TraceReader)'s events, or
//! [`Trace::events`](crate::Trace::events) through [`ok_events`]) and keeps only
//! per-thread and per-function state, so a trace of any size renders in bounded
//! memory. When the stream fails part-way, a view still renders everything read
//! before the damage, then returns the error.

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
pub mod lanes;
pub mod offcpu;
#[cfg(feature = "perfetto")]
pub mod perfetto;
#[cfg(feature = "plot")]
pub mod plot;
pub mod report;
pub mod sampled;

pub use graph::{write_graph, GraphOptions, GraphWriter, ThreadColumn};
pub use report::{
    write_report, Column, FunctionStats, FutureStats, OffStats, Report, ReportBuilder,
    ReportOptions, ReportStyle, ThreadLoss,
};

use crate::trace::{Event, TraceError, TraceMeta};
use std::io;
use std::str::FromStr;

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
    use crate::trace::ThreadInfo;

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
