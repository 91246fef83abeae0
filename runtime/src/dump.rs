//! Dumps of a running session without stopping it, as a [`Trace`]: the
//! flight recorder's last calls of every thread, or a stream-mode session's
//! calls so far (built by its collector, `crate::collector`), on demand
//! (`fgtrace ctl PID dump`, [`running`]); and from a panic hook
//! ([`Config::dump_on_panic`](crate::Config::dump_on_panic)).
//!
//! A snapshot copies each thread's ring under the buffer's flag (the owner
//! takes it only once per batch, never per call) with the same check the stop
//! protocol uses: a slot the owner may be rewriting while it is copied is
//! dropped and counted as overwritten, never returned torn. The session keeps
//! recording meanwhile.

use crate::active::{Active, ACTIVE};
use fgtrace_trace::clock::ClockPoint;
use fgtrace_trace::{build, RecordMode, Trace};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Once};

/// Why there is nothing to dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DumpError {
    /// No session records in this process.
    NoSession,
    /// A stream-mode session could not give its calls so far (it writes a
    /// file as it records, or it stopped meanwhile): the reason.
    Unavailable(String),
}

impl std::fmt::Display for DumpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DumpError::NoSession => write!(
                f,
                "no fgtrace session is recording in this process (start one with \
                 `fgtrace ctl PID start`, or run the program with FGTRACE_CONTROL=1, which \
                 keeps a flight recorder running)"
            ),
            DumpError::Unavailable(why) => write!(f, "no snapshot: {why}"),
        }
    }
}

impl std::error::Error for DumpError {}

/// What the running session recorded so far, without stopping it: a flight
/// recorder's last calls of every thread; or, in stream mode, every call
/// recorded since the session started (the collector's chunks, shared, plus
/// what each thread has not handed over yet) but the calls still open. A
/// stream-mode snapshot has no samples and no off-CPU time: those come with
/// the trace at stop (its [`TraceMeta::warnings`](fgtrace_trace::TraceMeta) say so).
pub fn running() -> Result<Trace, DumpError> {
    let active = ACTIVE.read().clone().ok_or(DumpError::NoSession)?;
    if active.flight {
        return Ok(snapshot_of(&active));
    }
    let (tx, rx) = crossbeam_channel::bounded(1);
    let asked = active.dumps.tx.send(tx).is_ok();
    // The session may stop meanwhile; the collector then answers that.
    drop(active);
    if !asked {
        return Err(DumpError::NoSession);
    }
    match rx.recv_timeout(std::time::Duration::from_secs(10)) {
        Ok(r) => r.map_err(DumpError::Unavailable),
        Err(_) => Err(DumpError::Unavailable(
            "the session's collector did not answer within 10 s".into(),
        )),
    }
}

/// Builds a trace from what the session's buffers hold now: a flight
/// recorder's rings (the last `keep` calls per thread), or in stream mode
/// the records not yet handed to the collector.
pub(crate) fn snapshot_of(active: &Active) -> Trace {
    snapshot_inner(active, None)
}

/// `open`: records to append to the thread with this tid (its open calls).
fn snapshot_inner(active: &Active, open: Option<(u32, Vec<crate::buffer::RawCall>)>) -> Trace {
    let end = ClockPoint::now();
    let mut open = open;
    let threads: Vec<Arc<crate::buffer::ThreadBuf>> =
        active.threads.lock().as_ref().cloned().unwrap_or_default();
    let mut inputs = Vec::with_capacity(threads.len());
    for t in &threads {
        let (mut records, overwritten) = t.snapshot(active.flight, active.dump.keep);
        if open.as_ref().is_some_and(|(tid, _)| *tid == t.tid) {
            records.extend(open.take().map(|(_, r)| r).unwrap_or_default());
        }
        inputs.push(build::ThreadInput {
            tid: t.tid,
            name: t.name.clone(),
            records,
            overwritten,
            dropped: t.dropped.load(Relaxed) + t.nested_dropped.load(Relaxed) as u64,
            overruns: t.overruns.load(Relaxed) as u64,
            samples: Vec::new(),
            samples_lost: 0,
        });
    }
    let mut cal = active.dump.cal;
    cal.refine(end);
    let base = crate::process::base(
        cal,
        end.ticks,
        if active.flight {
            RecordMode::FlightRecorder
        } else {
            active.dump.mode
        },
        active.dump.filters.clone(),
        active
            .counter
            .iter()
            .map(|c| c.name().to_string())
            .collect(),
    );
    build::build(
        base,
        inputs,
        build::registered_site,
        // SAFETY: the records are this process's probes' (its buffers).
        Some(unsafe { build::registered_text() }),
    )
}

/// [`snapshot_of`], plus the calls still open on the calling thread (the
/// panicking one: its call and the callers that led to it), as calls that
/// end now, marked unwound.
fn snapshot_with_open_calls(active: &Active) -> Trace {
    use crate::buffer::{kind, RawCall};
    use fgtrace_core::probe::{open_frames, OpenFrame};
    let mut open = vec![OpenFrame::default(); active.stack_depth as usize];
    let n = open_frames(&mut open);
    let now = fgtrace_core::clock::ticks();
    let extra: Vec<RawCall> = open[..n]
        .iter()
        .map(|f| {
            let dur = now.wrapping_sub(f.start);
            let k = if f.poll { kind::POLL } else { kind::CALL };
            RawCall::pack(f.start, f.depth, dur, f.site, true, k)
        })
        .filter(|r| r.dur() >= active.threshold_ticks)
        .collect();
    snapshot_inner(active, Some((crate::thread::os_tid(), extra)))
}

/// Installs (once per process) the panic hook behind
/// [`Config::dump_on_panic`](crate::Config::dump_on_panic): it writes a
/// snapshot of the running session to the session's path, says where on
/// stderr, then runs the hook that was installed before (the default one
/// prints the message).
pub(crate) fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            dump_for_panic();
            previous(info);
        }));
    });
}

fn dump_for_panic() {
    // Never wait on a lock here: the panic may come from code that holds it.
    let Some(active) = ACTIVE.try_read().and_then(|a| a.clone()) else {
        return;
    };
    let Some(path) = active.dump.dump_on_panic.clone() else {
        return;
    };
    let trace = snapshot_with_open_calls(&active);
    let msg = match trace.save(&path) {
        Ok(()) => format!(
            "fgtrace: the last {} calls of {} threads before this panic are in {} (fgtrace graph {})",
            trace.meta().total_calls(),
            trace.meta().threads.len(),
            path.display(),
            path.display()
        ),
        Err(e) => format!(
            "fgtrace: cannot write the panic dump to {}: {e}",
            path.display()
        ),
    };
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}
