//! The one way a view takes a trace's events: every builder and writer
//! implements [`Consume`], and [`feed`] is the only loop that reads a stream
//! of events into one.
//!
//! A stream of `Result<Event, TraceError>` (a
//! [`TraceReader`](fgtrace_trace::TraceReader)'s events, or an in-memory
//! trace's through [`ok_events`]) can fail part-way. [`feed`] stops at the
//! first read error and hands it back instead of returning early, so the
//! caller still finishes the view with everything read before the damage and
//! then reports the error.

use fgtrace_trace::{Event, TraceError};
use std::convert::Infallible;

/// A view that takes a trace's events one at a time, in trace order.
pub trait Consume {
    /// What taking an event can fail with: [`Infallible`] for the builders,
    /// which only collect, [`std::io::Error`] for the writers, which write as
    /// they go.
    type Error;

    /// Takes the next event.
    fn push(&mut self, ev: &Event) -> Result<(), Self::Error>;

    /// Whether the view needs no more events, so [`feed`] can stop reading
    /// early (a view that renders one part of the trace, say). Most views
    /// need the whole stream.
    fn done(&self) -> bool {
        false
    }
}

/// Pushes every event of `events` into `sink` until the stream ends, fails to
/// read, or the sink is [`done`](Consume::done). A read error stops the feed
/// and comes back as `Ok(Some(error))`, so the caller finishes the view and
/// then reports it; the sink's own error (a writer's write error) returns at
/// once.
pub fn feed<C: Consume + ?Sized>(
    sink: &mut C,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
) -> Result<Option<TraceError>, C::Error> {
    for ev in events {
        match ev {
            Ok(ev) => sink.push(&ev)?,
            Err(e) => return Ok(Some(e)),
        }
        if sink.done() {
            break;
        }
    }
    Ok(None)
}

/// [`feed`] for the builders, whose pushes cannot fail: what was read is
/// kept either way, and the read error, if any, comes back.
pub fn collect<C: Consume<Error = Infallible> + ?Sized>(
    sink: &mut C,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
) -> Result<(), TraceError> {
    let Ok(failed) = feed(sink, events);
    failed.map_or(Ok(()), Err)
}

/// In-memory events as the fallible stream the views take.
pub fn ok_events<I: IntoIterator<Item = Event>>(
    events: I,
) -> impl Iterator<Item = Result<Event, TraceError>> {
    events.into_iter().map(Ok)
}
