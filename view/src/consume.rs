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

/// Events handed to a sink on another thread at a time (57 KB of them),
/// so the cost of a channel send is spread over many events.
const BATCH: usize = 1024;

/// [`collect`] into one sink per group of the trace's threads, each group's
/// sink fed on a core of its own: thread `t`'s events go to sink
/// `t % groups`, in their order, so a view whose state is per thread (an
/// open call stack, say) builds the same state as one sink fed everything.
/// The sinks come back in group order for the caller to merge; the read
/// error, if any, comes back after everything before it was fed.
///
/// With one group (or a sink thread that cannot start) the events are fed
/// on the calling thread.
pub fn collect_by_thread<S, I>(mut sinks: Vec<S>, events: I) -> (Vec<S>, Result<(), TraceError>)
where
    S: Consume<Error = Infallible> + Send,
    I: IntoIterator<Item = Result<Event, TraceError>>,
{
    let groups = sinks.len();
    if groups <= 1 {
        let read = match sinks.first_mut() {
            Some(s) => collect(s, events),
            None => events.into_iter().find_map(Result::err).map_or(Ok(()), Err),
        };
        return (sinks, read);
    }
    use std::sync::mpsc;
    std::thread::scope(|scope| {
        // Per group: where its batches go (a thread of its own, or here
        // when the thread did not start), and the emptied batches that
        // come back to be filled again.
        enum To<S> {
            There(mpsc::SyncSender<Vec<Event>>),
            Here(S),
        }
        let mut to = Vec::with_capacity(groups);
        let mut handles = Vec::with_capacity(groups);
        let (back_tx, back) = mpsc::channel::<Vec<Event>>();
        for sink in sinks.drain(..) {
            let (tx, rx) = mpsc::sync_channel::<Vec<Event>>(1);
            // The sink moves to its thread through this slot, so that it is
            // still here if the thread cannot start.
            let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(sink)));
            let taken = slot.clone();
            let back_tx = back_tx.clone();
            let spawned = std::thread::Builder::new()
                .name("fgtrace-view".into())
                .spawn_scoped(scope, move || {
                    let mut sink = taken.lock().unwrap_or_else(|e| e.into_inner()).take()?;
                    for mut batch in rx {
                        for ev in &batch {
                            let Ok(()) = sink.push(ev);
                        }
                        batch.clear();
                        let _ = back_tx.send(batch);
                    }
                    Some(sink)
                });
            match spawned {
                Ok(h) => {
                    handles.push(Some(h));
                    to.push(To::There(tx));
                }
                Err(_) => {
                    handles.push(None);
                    let sink = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
                    to.push(To::Here(
                        sink.expect("a thread that did not start took nothing"),
                    ));
                }
            }
        }
        drop(back_tx);
        let mut bufs: Vec<Vec<Event>> = (0..groups).map(|_| Vec::new()).collect();
        let mut read = Ok(());
        let send = |to: &mut To<S>, buf: &mut Vec<Event>| {
            let full = std::mem::replace(buf, back.try_recv().unwrap_or_default());
            match to {
                To::There(tx) => {
                    // A sink thread that stopped (it panicked) shows when
                    // it is joined.
                    let _ = tx.send(full);
                }
                To::Here(s) => {
                    for ev in &full {
                        let Ok(()) = s.push(ev);
                    }
                }
            }
        };
        for ev in events {
            match ev {
                Ok(ev) => {
                    let g = ev.thread() as usize % groups;
                    let buf = &mut bufs[g];
                    if buf.capacity() == 0 {
                        buf.reserve(BATCH);
                    }
                    buf.push(ev);
                    if buf.len() >= BATCH {
                        send(&mut to[g], buf);
                    }
                }
                Err(e) => {
                    read = Err(e);
                    break;
                }
            }
        }
        for (g, buf) in bufs.iter_mut().enumerate() {
            if !buf.is_empty() {
                send(&mut to[g], buf);
            }
        }
        let mut out = Vec::with_capacity(groups);
        for (t, h) in to.into_iter().zip(handles) {
            match (t, h) {
                (To::Here(s), _) => out.push(s),
                (To::There(tx), Some(h)) => {
                    drop(tx);
                    match h.join() {
                        Ok(Some(s)) => out.push(s),
                        // The sink panicked: the caller's view panics too,
                        // as it would have on one thread.
                        Ok(None) => unreachable!("a started thread takes its sink"),
                        Err(p) => std::panic::resume_unwind(p),
                    }
                }
                (To::There(_), None) => unreachable!("a channel only for a started thread"),
            }
        }
        (out, read)
    })
}

/// [`collect_by_thread`] from a trace file's reader: a file's threads are
/// read apart, each group's on its own core with no merge by time
/// ([`TraceReader::feed_threads`](fgtrace_trace::TraceReader::feed_threads):
/// a recorded file's rebuilt threads, a saved file's chunks by thread);
/// a stream that cannot be read apart goes to the first sink alone.
pub fn collect_reader_by_thread<S, R>(
    sinks: Vec<S>,
    reader: fgtrace_trace::TraceReader<R>,
) -> (Vec<S>, Result<(), TraceError>)
where
    S: Consume<Error = Infallible> + Send,
    R: std::io::Read,
{
    let push = |s: &mut S, ev: &Event| {
        let Ok(()) = s.push(ev);
    };
    match reader.feed_threads(sinks, push) {
        Ok(done) => done,
        Err(back) => {
            // A stream that cannot be read apart (not from a file, or partly
            // read) goes to the first sink alone: handing its events out by
            // thread costs the reading thread about what the other sinks
            // save, and more cores must never be slower than one.
            let (reader, mut sinks) = *back;
            let read = match sinks.first_mut() {
                Some(sink) => collect_batches(sink, reader.events()),
                None => Ok(()),
            };
            (sinks, read)
        }
    }
}

/// A trace file's events into sinks that `make` makes, on every core: one
/// sink for a trace of one thread (rebuilt on one core while the sink takes
/// its events a chunk at a time on another: [`collect_batches`]), one per
/// group of threads otherwise ([`collect_reader_by_thread`]). The sinks come
/// back for the caller to merge, with the read error, if any.
pub fn collect_reader<S, R>(
    reader: fgtrace_trace::TraceReader<R>,
    make: impl Fn() -> S,
) -> (Vec<S>, Result<(), TraceError>)
where
    S: Consume<Error = Infallible> + Send,
    R: std::io::Read,
{
    let threads = reader.meta().threads.len();
    if threads < 2 {
        let mut sink = make();
        let read = collect_batches(&mut sink, reader.events());
        return (vec![sink], read);
    }
    // Each thread is read whole by the sink of its group, which is less work
    // than merging them by time, even on one core, and each event is taken
    // while it is still in that core's cache.
    let groups = fgtrace_trace::parallel::threads().min(threads).max(1);
    collect_reader_by_thread((0..groups).map(|_| make()).collect(), reader)
}

/// [`collect`] from a trace file's events a chunk at a time
/// ([`Events::next_batch`](fgtrace_trace::Events::next_batch)): each event
/// is handed to `sink` where it lies rather than moved out on its own.
pub fn collect_batches<C, R>(
    sink: &mut C,
    mut events: fgtrace_trace::Events<R>,
) -> Result<(), TraceError>
where
    C: Consume<Error = Infallible> + ?Sized,
    R: std::io::Read,
{
    while let Some(batch) = events.next_batch() {
        let batch = batch?;
        for ev in &batch {
            let Ok(()) = sink.push(ev);
            if sink.done() {
                return Ok(());
            }
        }
        events.recycle(batch);
    }
    Ok(())
}
