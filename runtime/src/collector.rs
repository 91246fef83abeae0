//! Session lifecycle: start recording, gather the threads' batches on a
//! collector thread, and turn everything into a [`Trace`] at stop.

mod auto;
mod budget;
mod pool;
pub use pool::POOL_FILE;
mod gathered;
mod live_dump;
mod output;
mod planned;
mod ring;
#[cfg(test)]
mod tests;

use crate::active::{Active, ACTIVE, LIVE_SESSIONS};
use crate::buffer::{self, Batch, Outlet};
use crate::config::{Config, Filters};
use crate::recorder;
use crossbeam_channel::{bounded, Receiver};
use fgtrace_core::control_word;
use fgtrace_trace::build::{CallStore, Recorded, RecordedThread};
use fgtrace_trace::clock::{self, Calibration, ClockPoint};
use fgtrace_trace::recorded::RawSample;
use fgtrace_trace::{RecordMode, ThreadInfo, Trace, TraceMeta};
#[cfg(target_os = "linux")]
use gathered::OffCpuOut;
use gathered::{base_meta, finish_output, open_output, Gathered};
use live_dump::dump_running;
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
    /// A per-call hardware counter of `Config::counters` cannot be recorded
    /// (no PMU, not permitted, ...): the message names it.
    Counters(String),
    /// The output file (`Config::output`) could not be created or written.
    Output(String),
    /// Off-CPU time was required (`FGTRACE_OFFCPU=required`) and the
    /// kernel refused it, or its reader thread could not start.
    OffCpu(String),
    /// `stop` in a child process forked while the session recorded: the
    /// session belongs to the parent; the child recorded nothing.
    Forked {
        /// The process that started the session.
        session_pid: u32,
        /// The child that called `stop`.
        pid: u32,
    },
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
            Error::Counters(e) => write!(f, "fgtrace: {e}"),
            Error::Output(e) => write!(f, "fgtrace trace file: {e}"),
            Error::OffCpu(e) => write!(f, "fgtrace cannot record off-CPU time: {e}"),
            Error::Forked { session_pid, pid } => write!(
                f,
                "this fgtrace session belongs to process {session_pid}; process {pid} is a child made by fork(), which records nothing and has nothing to stop"
            ),
        }
    }
}

impl std::error::Error for Error {}

static NEXT_GEN: AtomicU32 = AtomicU32::new(1);

/// Why auto-exclude cannot run with a flight recorder.
const AUTO_EXCLUDE_NEEDS_STREAM: &str =
    "auto-exclude (FGTRACE_AUTO_EXCLUDE, Config::auto_exclude) needs stream mode: \
     a flight recorder has no collector to see which functions are tiny";

/// A recording in progress. Start one with [`Session::start`], end it with
/// [`Session::stop`] to get the [`Trace`]. One session records at a time per
/// process; dropping a session stops it and discards what it recorded.
///
/// ```
/// #[fgtrace::traced]
/// fn parse(line: &str) -> usize { line.split(',').count() }
///
/// let session = fgtrace::Session::start(fgtrace::Config::default())?;
/// assert_eq!(parse("a,b,c"), 3);
/// let trace = session.stop()?;
///
/// // One call, with its site's name, entry time and duration (ns).
/// let calls: Vec<fgtrace::Call> = trace.calls().collect();
/// assert_eq!(calls.len(), 1);
/// assert_eq!(trace.meta.site_name(calls[0].site), "parse");
/// assert_eq!(calls[0].depth, 0);
///
/// // Saved in the fgtrace file format (`fgtrace graph parse.fgt` reads it).
/// let path = std::env::temp_dir().join(format!("parse-{}.fgt", std::process::id()));
/// trace.save(&path)?;
/// assert_eq!(fgtrace::Trace::load(&path)?.calls().count(), 1);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A second session while one records is an error, never a silent
/// restart:
///
/// ```
/// let first = fgtrace::Session::start(fgtrace::Config::builtin())?;
/// let second = fgtrace::Session::start(fgtrace::Config::builtin());
/// assert!(matches!(second, Err(fgtrace::Error::AlreadyRunning)));
/// first.stop()?;
/// # Ok::<(), fgtrace::Error>(())
/// ```
pub struct Session {
    active: Arc<Active>,
    cal: Calibration,
    config: Config,
    stop: Arc<AtomicBool>,
    collector: Option<JoinHandle<Gathered>>,
    /// Flight recorder (no collector thread): where the records go at stop.
    idle_gathered: Option<Gathered>,
    batches_rx: Receiver<Batch>,
    #[cfg(target_os = "linux")]
    sampler: Option<crate::sampler::Sampler>,
    /// The process that started the session (a forked child is another).
    pid: u32,
}

impl Session {
    /// Starts recording every `#[traced]` call that passes `config`'s filters.
    /// A flight recorder the control endpoint keeps running in the background
    /// (`FGTRACE_CONTROL=1`, see [`crate::control`]) is stopped to make way.
    pub fn start(config: Config) -> Result<Session, Error> {
        Self::start_with(config, spawn_collector)
    }

    fn start_with(
        config: Config,
        spawn: impl FnOnce(
            Receiver<Batch>,
            Arc<AtomicBool>,
            Arc<Active>,
            Gathered,
        ) -> std::io::Result<JoinHandle<Gathered>>,
    ) -> Result<Session, Error> {
        if !config.errors.is_empty() {
            return Err(Error::Config(config.errors.join("; ")));
        }
        if config.auto_exclude.is_some() && config.mode == RecordMode::FlightRecorder {
            return Err(Error::Config(AUTO_EXCLUDE_NEEDS_STREAM.into()));
        }
        // Per-call hardware counters: fail early, naming the counter.
        crate::pmu::check_session_counters(&config.counters).map_err(Error::Counters)?;
        // What needs Linux's perf_event fails here, before anything starts.
        #[cfg(not(target_os = "linux"))]
        if let Some(s) = &config.sampling {
            return Err(Error::Sampler(crate::unsupported(&format!(
                "stack sampling ({s})"
            ))));
        }
        #[cfg(not(target_os = "linux"))]
        if config.off_cpu {
            return Err(Error::OffCpu(crate::unsupported(
                "off-CPU time (the kernel's context switches, from perf_event)",
            )));
        }
        // A session the control endpoint runs in the background (an
        // always-on flight recorder) makes way for the program's own; the
        // panic hook of `Config::dump_on_panic`.
        crate::active::yield_background();
        if config.dump_on_panic.is_some() {
            crate::dump::install_panic_hook();
        }
        recorder::install();
        crate::active::watch_forks();
        let rate = clock::process_rate();
        let mut slot = ACTIVE.write();
        if slot.is_some() {
            return Err(Error::AlreadyRunning);
        }
        let gen = NEXT_GEN.fetch_add(1, Relaxed) & control_word::GEN_MASK;
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
        // Off-CPU time: the recorder opens this thread's ring now,
        // every other thread's when it joins (`recorder::join`). Before the
        // output file, whose header says whether it is recorded.
        #[cfg(target_os = "linux")]
        let off_cpu = match config.off_cpu {
            true => Some(crate::offcpu::Recorder::start().map_err(Error::OffCpu)?),
            false => None,
        };
        #[cfg(target_os = "linux")]
        let cancel_off_cpu = || off_cpu.as_ref().map(|o| o.cancel());
        #[cfg(target_os = "linux")]
        let off_cpu_said = off_cpu.as_ref().map(|o| fgtrace_trace::OffCpu {
            unavailable: o.refused(),
            threads: Vec::new(),
        });
        #[cfg(not(target_os = "linux"))]
        let off_cpu_said = None;
        // The output file before anything else runs: nothing else has
        // started if it cannot be created.
        let out = match &config.output {
            Some(path) => match open_output(path, &cal, &config, off_cpu_said) {
                Ok(o) => Some(o),
                Err(e) => {
                    #[cfg(target_os = "linux")]
                    cancel_off_cpu();
                    return Err(Error::Output(e));
                }
            },
            None => None,
        };
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
            auto_exclude: config.auto_exclude.is_some(),
            sampling: config.sampling.is_some(),
            counter: config.counters.first().copied(),
            #[cfg(target_os = "linux")]
            off_cpu: off_cpu.clone(),
            outlet: Arc::new(Outlet {
                batches,
                recycle_tx,
                recycle_rx,
                block_when_full: config.block_when_full,
            }),
            threads: Mutex::new(Some(Vec::new())),
            // ---- what `crate::dump` needs (dumps on demand and on panic).
            dump: crate::active::DumpInfo {
                cal,
                keep: config.flight_calls,
                mode: config.mode,
                filters: config.describe(),
                dump_on_panic: config.dump_on_panic.clone(),
            },
            dumps: Default::default(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        // Everything that can fail comes before the session is published:
        // a failure leaves no session behind.
        #[allow(unused_mut)]
        let mut gathered = Gathered::new(cal.origin.ticks, out);
        gathered.auto = config
            .auto_exclude
            .map(|d| auto::AutoExclude::new(d, &cal, active.clone()));
        #[cfg(target_os = "linux")]
        if gathered.out.is_some() {
            gathered.off_cpu = off_cpu.as_ref().map(|rec| OffCpuOut {
                rec: rec.clone(),
                cal,
                written_end: Vec::new(),
                last: std::time::Instant::now(),
            });
        }
        let (collector, idle_gathered) = if flight {
            (None, Some(gathered))
        } else {
            let h =
                spawn(batches_rx.clone(), stop.clone(), active.clone(), gathered).map_err(|e| {
                    #[cfg(target_os = "linux")]
                    cancel_off_cpu();
                    Error::Collector(format!("cannot start the collector thread: {e}"))
                })?;
            (Some(h), None)
        };
        #[cfg(target_os = "linux")]
        let sampler = match &config.sampling {
            Some(s) => match crate::sampler::Sampler::start(s) {
                Ok(s) => Some(s),
                Err(e) => {
                    stop.store(true, Release);
                    #[cfg(target_os = "linux")]
                    cancel_off_cpu();
                    if let Some(h) = collector {
                        let _ = h.join();
                    }
                    if let Some(p) = &config.output {
                        let _ = std::fs::remove_file(p);
                    }
                    return Err(Error::Sampler(e.to_string()));
                }
            },
            None => None,
        };
        *slot = Some(active.clone());
        drop(slot);
        crate::active::FORKED.store(false, SeqCst);
        // Planned functions count only while a session records: from zero.
        fgtrace_core::counted::reset_all();
        fgtrace_core::counted::session_on(gen);
        Ok(Session {
            active,
            cal,
            config,
            stop,
            collector,
            idle_gathered,
            batches_rx,
            #[cfg(target_os = "linux")]
            sampler,
            pid: std::process::id(),
        })
    }

    /// Pauses recording (ftrace's `tracing_on = 0`); probes cost one load and a branch.
    pub fn pause(&self) {
        fgtrace_core::counted::session_off();
    }

    /// Resumes recording after [`Session::pause`].
    pub fn resume(&self) {
        // Not in a forked child: the session is the parent's.
        if self.pid == std::process::id() {
            fgtrace_core::counted::session_on(self.active.gen);
        }
    }

    /// Stops recording and returns the trace: every call that completed
    /// while the session recorded (calls still open on a thread at stop are
    /// not in it), the samples, and the loss counts of each thread
    /// ([`TraceMeta`]). With [`Config::output`] the file is complete when
    /// this returns.
    ///
    /// Errors: the collector thread failed, the output file could not be
    /// written, or [`Error::Forked`] in a child forked while recording.
    pub fn stop(mut self) -> Result<Trace, Error> {
        let t = self.shutdown();
        // A whole-program recording (`FGTRACE_RECORD`) this session took
        // over from keeps its trace and goes on.
        crate::active::session_ended(t.as_ref().ok());
        t
    }

    fn shutdown(&mut self) -> Result<Trace, Error> {
        if self.pid != std::process::id() {
            return Err(self.forsake());
        }
        let end = ClockPoint::now();
        fgtrace_core::counted::session_off();
        ACTIVE.write().take();
        // Close every buffer before the collector stops and the channel is
        // drained: a handoff either sent its batch before (drained below)
        // or finds its buffer closed and sends nothing.
        let threads = self.active.close();
        self.stop.store(true, Release);
        let mut g = match self.collector.take() {
            Some(h) => h
                .join()
                .map_err(|_| Error::Collector("collector thread panicked".into()))?,
            None => match self.idle_gathered.take() {
                Some(g) => g,
                None => return Err(Error::Collector("the session was already stopped".into())),
            },
        };
        let who = |i: u32| {
            threads
                .get(i as usize)
                .map(|t| (t.tid, t.name.clone()))
                .unwrap_or_default()
        };
        while let Ok(b) = self.batches_rx.try_recv() {
            g.add(b, &who);
        }
        self.cal.refine(end);
        #[cfg(target_os = "linux")]
        let sampled = self.sampler.take().map(|s| s.stop(&self.cal));
        #[cfg(not(target_os = "linux"))]
        let sampled: Option<crate::sampler::Sampled> = None;
        let mut infos = Vec::with_capacity(threads.len());
        let mut overwritten = Vec::with_capacity(threads.len());
        let mut tails = Vec::with_capacity(threads.len());
        for t in &threads {
            let (tail, lost) = t.snapshot(self.active.flight, self.config.flight_calls);
            g.add_records(t.index, &tail, &who);
            tails.push(lost);
        }
        // Every record is in: the file is flushed whole (its losses are
        // marked once every thread's figures are known, below).
        g.flush_output();
        let after = |i: usize| {
            g.out
                .as_ref()
                .and_then(|o| o.budget.lost_after.get(i).copied())
                .unwrap_or(0)
        };
        // With `ring`, the calls before the file's last segment.
        let dropped = |i: usize| g.out.as_ref().map_or(0, |o| o.budget.dropped(i));
        for (t, lost) in threads.iter().zip(tails) {
            overwritten.push(lost + dropped(t.index as usize));
            infos.push(ThreadInfo {
                tid: t.tid,
                name: t.name.clone(),
                calls: 0,
                lost: t.dropped.load(Relaxed)
                    + t.nested_dropped.load(Relaxed) as u64
                    + lost
                    + after(t.index as usize)
                    + dropped(t.index as usize),
                overruns: t.overruns.load(Relaxed) as u64,
                samples: 0,
                samples_lost: 0,
            });
        }
        let mut samples: Vec<Vec<RawSample>> = vec![Vec::new(); infos.len()];
        let mut sampling = None;
        let mut sampler = None; // which path sampled
        let mut mappings = Vec::new();
        if let Some(sampled) = sampled {
            for ts in sampled.threads {
                let i = match infos.iter().position(|i| i.tid == ts.tid) {
                    Some(i) => i,
                    None => {
                        infos.push(ThreadInfo {
                            tid: ts.tid,
                            name: ts.name,
                            ..ThreadInfo::default()
                        });
                        samples.push(Vec::new());
                        infos.len() - 1
                    }
                };
                infos[i].samples = ts.samples.len() as u64;
                infos[i].samples_lost = ts.lost;
                samples[i] = ts.samples;
            }
            sampling = Some(sampled.description);
            mappings = sampled.mappings;
            sampler = sampled.backend;
        }
        g.threads.resize_with(infos.len(), Default::default);
        let unkept = |i: usize| {
            g.out
                .as_ref()
                .and_then(|o| o.budget.encoded_lost.get(i).copied())
                .unwrap_or(0)
        };
        for (i, (info, th)) in infos.iter_mut().zip(&g.threads).enumerate() {
            // Calls encoded but not kept (at a cut) are counted as lost.
            // and those before a ring's last segment are not in the file.
            info.calls = th
                .enc
                .calls
                .saturating_sub(unkept(i))
                .saturating_sub(dropped(i));
        }
        // The file ends on its last complete section, with the threads it
        // has room to list and the losses of a cut marked.
        g.close_output(&mut infos, &mut samples, &mut overwritten, end.ticks);
        // Functions switched to count-only, with their calls since (before
        // the sites are taken: a switch names its site).
        let count_only = match &g.auto {
            Some(a) => a.count_only(&self.cal, &threads, &mut g.sites),
            None => Vec::new(),
        };
        let counted = planned::planned_counts(&mut g.sites, true);
        #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
        let mut meta = TraceMeta {
            count_only,
            counted,
            sites: std::mem::take(&mut g.sites.sites),
            strings: std::mem::take(&mut g.sites.strings),
            threads: infos,
            sampling,
            sampler,
            mappings,
            ..base_meta(&self.cal, end.ticks, &self.config)
        };
        // Off-CPU time: the threads' switch intervals, or why not.
        #[cfg(target_os = "linux")]
        if let Some(o) = &self.active.off_cpu {
            meta.off_cpu = Some(o.finish(&self.cal, meta.duration_ns, &meta.threads));
        }
        match g.out.take() {
            None => {
                let threads = g
                    .threads
                    .into_iter()
                    .zip(samples)
                    .zip(overwritten.into_iter().chain(std::iter::repeat(0)))
                    .map(|((th, samples), overwritten)| RecordedThread {
                        raw: th.raw,
                        samples,
                        overwritten,
                    })
                    .collect();
                Ok(Trace::from_source(
                    meta,
                    CallStore::Memory(Recorded {
                        ticks_per_ns: self.cal.ticks_per_ns,
                        threads,
                    }),
                ))
            }
            Some(mut o) => {
                finish_output(
                    &mut o,
                    &mut meta,
                    &g.threads,
                    samples,
                    &overwritten,
                    end.ticks,
                );
                if o.budget.rotations > 0 {
                    meta.ring = o.header.ring;
                }
                if let Some((reason, at)) = o.budget.cut {
                    meta.cut_short = Some(fgtrace_trace::CutShort {
                        reason,
                        limit: o.shown_limit(),
                        at_ns: self.cal.ns(at),
                        calls_after: o.budget.total_lost(),
                        samples_after: o.budget.samples_after,
                    });
                }
                if let Some(e) = o.error {
                    return Err(Error::Output(format!(
                        "{e}; the file holds what was written before (readable up to its last complete section)"
                    )));
                }
                match o.w.finish(&meta) {
                    Ok(w) => {
                        if let Ok(f) = w.into_inner() {
                            budget::release(&f);
                        }
                        Ok(Trace::from_source(meta, CallStore::File(o.path)))
                    }
                    Err(e) => Err(Error::Output(format!(
                        "finishing {} failed: {e}",
                        o.path.display()
                    ))),
                }
            }
        }
    }
}

impl Session {
    /// In a forked child: the collector and sampler threads are the parent's
    /// and do not exist here, so nothing is joined or drained; their handles
    /// are forgotten, the session slot is freed if nobody held its lock at
    /// the fork (so the child can start a session of its own).
    fn forsake(&mut self) -> Error {
        fgtrace_core::counted::session_off();
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
pub fn record(duration: Duration, frequency_hz: u64) -> Result<Trace, Error> {
    let session =
        Session::start(Config::builtin().sampling(crate::sampler::Sampling::timer(frequency_hz)))?;
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
            crate::active::session_ended(None);
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
    g: Gathered,
) -> std::io::Result<JoinHandle<Gathered>> {
    std::thread::Builder::new()
        .name("fgtrace-collector".into())
        .spawn(move || collect(rx, stop, active, g))
}

fn collect(
    rx: Receiver<Batch>,
    stop: Arc<AtomicBool>,
    active: Arc<Active>,
    mut g: Gathered,
) -> Gathered {
    // Nothing this thread does (and no traced allocator it calls) is recorded.
    fgtrace_core::probe::mark_internal_thread();
    let who = |i: u32| {
        active
            .threads
            .lock()
            .as_ref()
            .and_then(|t| t.get(i as usize).map(|t| (t.tid, t.name.clone())))
            .unwrap_or_default()
    };
    #[cfg(target_os = "linux")]
    let tids = || {
        active
            .threads
            .lock()
            .as_ref()
            .map(|t| t.iter().map(|t| t.tid).collect())
            .unwrap_or_default()
    };
    // Poll fast while batches arrive, back off to 10 ms while idle: an idle
    // session should cost (almost) nothing, a busy one never waits long.
    let mut nap = MIN_NAP;
    loop {
        let mut got = false;
        // Before the batches that came meanwhile: a dump waits for the ones
        // handed before it anyway (and its test sees that it does).
        while let Ok(reply) = active.dumps.rx.try_recv() {
            let _ = reply.send(dump_running(&rx, &active, &mut g, &who));
            got = true;
        }
        while let Ok(b) = rx.try_recv() {
            let s = g.add(b, &who);
            let _ = active.outlet.recycle_tx.try_send(s);
            got = true;
        }
        if stop.load(Acquire) {
            while let Ok(reply) = active.dumps.rx.try_recv() {
                let _ = reply.send(Err(
                    "the session stopped meanwhile: its trace went to whoever stopped it".into(),
                ));
            }
            return g;
        }
        #[cfg(target_os = "linux")]
        g.write_off_cpu(&who, &tids);
        if got {
            nap = MIN_NAP;
        } else {
            g.idle();
            std::thread::sleep(nap);
            nap = (nap * 2).min(MAX_NAP);
        }
    }
}
