//! Session lifecycle: start recording, gather the threads' batches on a
//! collector thread, and turn everything into a [`Trace`] at stop.

use crate::active::{Active, ACTIVE, LIVE_SESSIONS};
use crate::buffer::{self, Batch, Outlet, RawCall, Storage};
use crate::clock::{self, Calibration, ClockPoint};
use crate::config::{Config, Filters};
use crate::recorder;
use crate::trace::{build, RecordMode, Trace};
use crossbeam_channel::{bounded, Receiver};
use fgtrace_core::control;
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Why a session could not start or stop.
#[derive(Debug)]
pub enum Error {
    /// Another session is recording in this process.
    AlreadyRunning,
    /// A bad setting (from `Config` or an `FGTRACE_*` variable).
    Config(String),
    /// The collector thread failed.
    Collector(String),
    /// Sampling could not start (the kernel refused perf_event, ...).
    Sampler(String),
    /// `stop` in a child process forked while the session recorded: the
    /// session belongs to the parent; the child recorded nothing.
    Forked { session_pid: u32, pid: u32 },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::AlreadyRunning => {
                write!(f, "an fgtrace session is already recording in this process")
            }
            Error::Config(e) => write!(f, "bad fgtrace configuration: {e}"),
            Error::Collector(e) => write!(f, "fgtrace collector failed: {e}"),
            Error::Sampler(e) => write!(f, "fgtrace cannot sample: {e}"),
            Error::Forked { session_pid, pid } => write!(
                f,
                "this fgtrace session belongs to process {session_pid}; process {pid} is a child made by fork(), which records nothing and has nothing to stop"
            ),
        }
    }
}

impl std::error::Error for Error {}

static NEXT_GEN: AtomicU32 = AtomicU32::new(1);

/// Records of one thread gathered so far.
#[derive(Default)]
struct Gathered {
    records: Vec<Vec<RawCall>>,
}

impl Gathered {
    fn add(&mut self, b: Batch) -> Storage {
        let i = b.thread as usize;
        if self.records.len() <= i {
            self.records.resize_with(i + 1, Vec::new);
        }
        // SAFETY: the first `len` slots of a handed-off batch were written.
        self.records[i].extend(
            b.storage[..b.len]
                .iter()
                .map(|r| unsafe { r.assume_init() }),
        );
        b.storage
    }
}

/// A recording in progress. Start one with [`Session::start`], end it with
/// [`Session::stop`] to get the [`Trace`]. One session records at a time per
/// process; dropping a session stops it and discards what it recorded.
pub struct Session {
    active: Arc<Active>,
    cal: Calibration,
    config: Config,
    stop: Arc<AtomicBool>,
    collector: Option<JoinHandle<Gathered>>,
    batches_rx: Receiver<Batch>,
    #[cfg(target_os = "linux")]
    sampler: Option<crate::sampling::Sampler>,
    /// The process that started the session (a forked child is another).
    pid: u32,
}

impl Session {
    /// Starts recording every `#[traced]` call that passes `config`'s filters.
    pub fn start(config: Config) -> Result<Session, Error> {
        Self::start_with(config, spawn_collector)
    }

    fn start_with(
        config: Config,
        spawn: impl FnOnce(
            Receiver<Batch>,
            Arc<AtomicBool>,
            Arc<Active>,
        ) -> std::io::Result<JoinHandle<Gathered>>,
    ) -> Result<Session, Error> {
        if !config.errors.is_empty() {
            return Err(Error::Config(config.errors.join("; ")));
        }
        recorder::install();
        crate::active::watch_forks();
        let rate = clock::process_rate();
        let mut slot = ACTIVE.write();
        if slot.is_some() {
            return Err(Error::AlreadyRunning);
        }
        let gen = NEXT_GEN.fetch_add(1, Relaxed) & control::GEN_MASK;
        let flight = config.mode == RecordMode::FlightRecorder;
        let capacity = if flight {
            // One slot more than kept: the slot a call open at stop may be
            // rewriting is never one the snapshot needs.
            config
                .flight_calls
                .checked_add(1)
                .and_then(usize::checked_next_power_of_two)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "flight recorder of {} calls per thread is too large",
                        config.flight_calls
                    ))
                })?
        } else {
            config.batch_calls
        };
        let (batches, batches_rx) = bounded(config.max_batches_in_flight);
        let pool = config.max_batches_in_flight.min(64);
        let (recycle_tx, recycle_rx) = bounded(pool);
        if !flight {
            for _ in 0..pool.min(4) {
                let _ = recycle_tx.try_send(buffer::new_storage(capacity));
            }
        }
        let cal = Calibration {
            origin: ClockPoint::now(),
            ticks_per_ns: rate,
        };
        let filters = Filters::new(&config);
        LIVE_SESSIONS.fetch_add(1, Relaxed);
        let active = Arc::new(Active {
            gen,
            has_graph: filters.has_graph_functions(),
            filters,
            flight,
            capacity,
            stack_depth: config.stack_depth,
            max_depth: config.max_depth.unwrap_or(u32::MAX),
            threshold_ticks: config.threshold.map(|d| cal.ticks_for(d)).unwrap_or(0),
            sampling: config.sampling.is_some(),
            outlet: Arc::new(Outlet {
                batches,
                recycle_tx,
                recycle_rx,
                block_when_full: config.block_when_full,
            }),
            threads: Mutex::new(Some(Vec::new())),
        });
        let stop = Arc::new(AtomicBool::new(false));
        // Everything that can fail comes before the session is published:
        // a failure leaves no session behind.
        let collector = if flight {
            None
        } else {
            let h = spawn(batches_rx.clone(), stop.clone(), active.clone())
                .map_err(|e| Error::Collector(format!("cannot start the collector thread: {e}")))?;
            Some(h)
        };
        #[cfg(target_os = "linux")]
        let sampler = match &config.sampling {
            Some(s) => match crate::sampling::Sampler::start(s) {
                Ok(s) => Some(s),
                Err(e) => {
                    stop.store(true, Release);
                    if let Some(h) = collector {
                        let _ = h.join();
                    }
                    return Err(Error::Sampler(e.to_string()));
                }
            },
            None => None,
        };
        #[cfg(not(target_os = "linux"))]
        if config.sampling.is_some() {
            return Err(Error::Sampler("sampling needs Linux".into()));
        }
        *slot = Some(active.clone());
        drop(slot);
        crate::active::FORKED.store(false, SeqCst);
        control::session_on(gen);
        Ok(Session {
            active,
            cal,
            config,
            stop,
            collector,
            batches_rx,
            #[cfg(target_os = "linux")]
            sampler,
            pid: std::process::id(),
        })
    }

    /// Pauses recording (ftrace's `tracing_on = 0`); probes cost one load and a branch.
    pub fn pause(&self) {
        control::session_off();
    }

    /// Resumes recording after [`Session::pause`].
    pub fn resume(&self) {
        // Not in a forked child: the session is the parent's.
        if self.pid == std::process::id() {
            control::session_on(self.active.gen);
        }
    }

    /// Stops recording and returns the trace.
    pub fn stop(mut self) -> Result<Trace, Error> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<Trace, Error> {
        if self.pid != std::process::id() {
            return Err(self.forsake());
        }
        let end = ClockPoint::now();
        control::session_off();
        ACTIVE.write().take();
        // Close every buffer before the collector stops and the channel is
        // drained: a handoff either sent its batch before (drained below)
        // or finds its buffer closed and sends nothing.
        let threads = self.active.close();
        self.stop.store(true, Release);
        let mut gathered = match self.collector.take() {
            Some(h) => h
                .join()
                .map_err(|_| Error::Collector("collector thread panicked".into()))?,
            None => Gathered::default(),
        };
        while let Ok(b) = self.batches_rx.try_recv() {
            gathered.add(b);
        }
        self.cal.refine(end);
        #[cfg(target_os = "linux")]
        let sampled = self.sampler.take().map(|s| s.stop(&self.cal));
        #[cfg(not(target_os = "linux"))]
        let sampled: Option<crate::sampling::Sampled> = None;
        let mut inputs = Vec::with_capacity(threads.len());
        for t in &threads {
            let (tail, overwritten) = t.snapshot(self.active.flight, self.config.flight_calls);
            let i = t.index as usize;
            let mut recs = std::mem::take(gathered.records.get_mut(i).unwrap_or(&mut Vec::new()));
            recs.extend(tail);
            inputs.push(build::ThreadInput {
                tid: t.tid,
                name: t.name.clone(),
                records: recs,
                overwritten,
                dropped: t.dropped.load(Relaxed) + t.nested_dropped.load(Relaxed) as u64,
                overruns: t.overruns.load(Relaxed) as u64,
                samples: Vec::new(),
                samples_lost: 0,
            });
        }
        let mut sampling = None;
        let mut mappings = Vec::new();
        if let Some(sampled) = sampled {
            for ts in sampled.threads {
                let input = match inputs.iter_mut().position(|i| i.tid == ts.tid) {
                    Some(i) => &mut inputs[i],
                    None => {
                        inputs.push(build::ThreadInput::empty(ts.tid, ts.name));
                        inputs.last_mut().expect("just pushed")
                    }
                };
                input.samples = ts.samples;
                input.samples_lost = ts.lost;
            }
            sampling = Some(sampled.description);
            mappings = sampled.mappings;
        }
        let meta_base = build::MetaBase {
            cal: self.cal,
            end_ticks: end.ticks,
            mode: self.config.mode,
            filters: self.config.describe(),
        };
        let mut trace = build::build(meta_base, inputs, build::registered_site);
        trace.meta.sampling = sampling;
        trace.meta.mappings = mappings;
        Ok(trace)
    }
}

impl Session {
    /// In a forked child: the collector and sampler threads are the parent's
    /// and do not exist here, so nothing is joined or drained; their handles
    /// are forgotten, the session slot is freed if nobody held its lock at
    /// the fork (so the child can start a session of its own).
    fn forsake(&mut self) -> Error {
        control::session_off();
        if let Some(h) = self.collector.take() {
            std::mem::forget(h);
        }
        #[cfg(target_os = "linux")]
        if let Some(s) = self.sampler.take() {
            std::mem::forget(s);
        }
        if let Some(mut slot) = ACTIVE.try_write() {
            if slot.as_ref().is_some_and(|a| a.gen == self.active.gen) {
                slot.take();
            }
        }
        Error::Forked {
            session_pid: self.pid,
            pid: std::process::id(),
        }
    }
}

/// Samples the whole process for `duration` at `frequency_hz` per thread
/// (CPU time), like Zephyr's `perf record <duration> <frequency>`, and
/// returns the trace (with any traced calls made meanwhile).
/// Also at `fgtrace::sampler::record`.
pub fn record(duration: Duration, frequency_hz: u64) -> Result<Trace, Error> {
    let session =
        Session::start(Config::builtin().sampling(crate::sampling::Sampling::timer(frequency_hz)))?;
    std::thread::sleep(duration);
    session.stop()
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            self.forsake();
            return;
        }
        if self.collector.is_some()
            || ACTIVE
                .read()
                .as_ref()
                .is_some_and(|a| a.gen == self.active.gen)
            || self.active.threads.lock().is_some()
        {
            let _ = self.shutdown();
        }
    }
}

const MIN_NAP: Duration = Duration::from_micros(500);
const MAX_NAP: Duration = Duration::from_millis(10);

/// The collector thread: polls for batches (so traced threads never have to
/// wake it with a syscall), keeps their records, recycles their storage.
fn spawn_collector(
    rx: Receiver<Batch>,
    stop: Arc<AtomicBool>,
    active: Arc<Active>,
) -> std::io::Result<JoinHandle<Gathered>> {
    std::thread::Builder::new()
        .name("fgtrace-collector".into())
        .spawn(move || collect(rx, stop, active))
}

fn collect(rx: Receiver<Batch>, stop: Arc<AtomicBool>, active: Arc<Active>) -> Gathered {
    // Nothing this thread does (and no traced allocator it calls) is recorded.
    fgtrace_core::probe::mark_internal_thread();
    let mut g = Gathered::default();
    // Poll fast while batches arrive, back off to 10 ms while idle: an idle
    // session should cost (almost) nothing, a busy one never waits long.
    let mut nap = MIN_NAP;
    loop {
        let mut got = false;
        while let Ok(b) = rx.try_recv() {
            let s = g.add(b);
            let _ = active.outlet.recycle_tx.try_send(s);
            got = true;
        }
        if stop.load(Acquire) {
            return g;
        }
        if got {
            nap = MIN_NAP;
        } else {
            std::thread::sleep(nap);
            nap = (nap * 2).min(MAX_NAP);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A collector thread that cannot be spawned leaves no session behind:
    /// the next `start` works.
    #[test]
    fn a_failed_collector_spawn_leaves_no_session_running() {
        let failed = Session::start_with(Config::builtin(), |_, _, _| {
            Err(std::io::Error::other("no threads left"))
        });
        match failed {
            Err(Error::Collector(e)) => assert!(e.contains("no threads left"), "{e}"),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("started without a collector"),
        }
        assert!(!control::session_is_on());
        let s = Session::start(Config::builtin()).expect("a later session starts");
        s.stop().unwrap();
    }
}
