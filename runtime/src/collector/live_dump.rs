//! A dump of the running stream-mode session, built on the collector thread
//! between batches (`fgtrace ctl PID dump`, [`crate::dump::running`]).

use super::gathered::{meta_of, Gathered};
use crate::active::Active;
use crate::buffer::{self, Batch, RawCall};
use crossbeam_channel::Receiver;
use fgtrace_trace::build::{self, CallStore, Recorded, RecordedThread};
use fgtrace_trace::clock::ClockPoint;
use fgtrace_trace::recorded::RawEncoder;
use fgtrace_trace::{ThreadInfo, Trace, TraceMeta};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A dump of the running stream-mode session (`fgtrace ctl PID dump`,
/// [`crate::dump::running`]), built by the collector between batches:
/// what it gathered, every batch the threads handed it before the dump, and
/// what each thread holds that it has not handed over yet. A thread's tail
/// and its count of batches sent are read together under its buffer's flag
/// (a handoff sends under it), so no call is in the dump twice or missing
/// in between; batches sent after that wait until the dump is built.
pub(super) fn dump_running(
    rx: &Receiver<Batch>,
    active: &Active,
    g: &mut Gathered,
    who: &dyn Fn(u32) -> (u32, String),
) -> Result<Trace, String> {
    if let Some(o) = &mut g.out {
        if o.error.is_none() {
            let r = o.w.flush();
            o.check(r);
            o.dirty = false;
        }
        let p = o.path.display();
        return Err(format!(
            "this session writes its trace to {p} as it records: that file can be read now \
             (`fgtrace graph {p}`), up to each thread's unfinished batch"
        ));
    }
    let end = ClockPoint::now();
    let threads: Vec<Arc<buffer::ThreadBuf>> =
        active.threads.lock().as_ref().cloned().unwrap_or_default();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut later = Vec::new();
    let mut failed = None;
    // Each thread's tail. A thread may hold its flag while it waits for room
    // in the channel (`block_when_full`), which only this thread empties:
    // take in batches meanwhile (those of threads whose tail is not copied
    // yet came before it; the others' wait until the dump is built).
    let mut tails: Vec<(Vec<RawCall>, u64)> = Vec::with_capacity(threads.len());
    for t in &threads {
        loop {
            if let Some(tail) = t.try_unhanded() {
                tails.push(tail);
                break;
            }
            match rx.try_recv() {
                Ok(b)
                    if tails
                        .get(b.thread as usize)
                        .is_some_and(|t| g.batches(b.thread) >= t.1) =>
                {
                    later.push(b)
                }
                Ok(b) => {
                    let s = g.add(b, who);
                    let _ = active.outlet.recycle_tx.try_send(s);
                }
                Err(_) => std::thread::yield_now(),
            }
        }
    }
    let sent = |thread: u32| tails.get(thread as usize).map_or(0, |t| t.1);
    let behind = |g: &Gathered| (0..tails.len() as u32).any(|i| g.batches(i) < sent(i));
    while behind(g) {
        match rx.recv_deadline(deadline) {
            Ok(b) if g.batches(b.thread) >= sent(b.thread) => later.push(b),
            Ok(b) => {
                let s = g.add(b, who);
                let _ = active.outlet.recycle_tx.try_send(s);
            }
            Err(_) => {
                failed = Some("the threads' batches did not reach the collector within 5 s");
                break;
            }
        }
    }
    let result = match failed {
        Some(why) => Err(why.to_string()),
        None => Ok(dumped_trace(active, g, &threads, tails, end)),
    };
    for b in later {
        let s = g.add(b, who);
        let _ = active.outlet.recycle_tx.try_send(s);
    }
    result
}

/// The trace of [`dump_running`]: the gathered chunks (shared, not copied)
/// and each thread's tail, encoded.
fn dumped_trace(
    active: &Active,
    g: &mut Gathered,
    threads: &[Arc<buffer::ThreadBuf>],
    tails: Vec<(Vec<RawCall>, u64)>,
    end: ClockPoint,
) -> Trace {
    let mut enc = RawEncoder::default();
    let mut recorded = Vec::with_capacity(threads.len());
    let mut infos = Vec::with_capacity(threads.len());
    for (t, (tail, _)) in threads.iter().zip(tails) {
        let gathered = g.threads.get(t.index as usize);
        let mut raw = gathered.map(|th| th.raw.clone()).unwrap_or_default();
        let mut calls = gathered.map_or(0, |th| th.enc.calls);
        if !tail.is_empty() {
            let before = enc.calls;
            let c = enc.encode(
                t.index,
                &tail,
                g.origin,
                &mut g.sites,
                &build::registered_site,
            );
            calls += enc.calls - before;
            raw.push(c);
        }
        recorded.push(RecordedThread {
            raw,
            samples: Vec::new(),
            overwritten: 0,
        });
        infos.push(ThreadInfo {
            tid: t.tid,
            name: t.name.clone(),
            calls,
            lost: t.dropped.load(Relaxed) + t.nested_dropped.load(Relaxed) as u64,
            overruns: t.overruns.load(Relaxed) as u64,
            samples: 0,
            samples_lost: 0,
        });
    }
    let mut cal = active.dump.cal;
    cal.refine(end);
    let count_only = match &g.auto {
        Some(a) => a.count_only(&cal, threads, &mut g.sites),
        None => Vec::new(),
    };
    let counted = super::planned::planned_counts(&mut g.sites, false);
    let mut meta = TraceMeta {
        count_only,
        counted,
        sites: g.sites.sites.clone(),
        strings: g.sites.strings.clone(),
        threads: infos,
        ..meta_of(
            &cal,
            end.ticks,
            active.dump.mode,
            active.dump.filters.clone(),
            active.counter.iter().map(|c| c.name()),
        )
    };
    meta.warnings.push(
        "a dump of a running session: calls still open are not in it; its samples and \
         off-CPU time come with the trace at stop"
            .into(),
    );
    Trace::from_source(
        meta,
        CallStore::Memory(Recorded {
            ticks_per_ns: cal.ticks_per_ns,
            threads: recorded,
        }),
    )
}
