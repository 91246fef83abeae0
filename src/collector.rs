//! Session lifecycle: start recording, gather the threads' batches on a
//! collector thread, and turn everything into a [`Trace`] at stop.

use crate::active::{Active, ACTIVE, LIVE_SESSIONS};
use crate::buffer::{self, Batch, Outlet, RawCall, Storage};
use crate::clock::{self, Calibration, ClockPoint};
use crate::config::{Config, Filters};
use crate::recorder;
use crate::trace::build;
use crate::trace::build::{Recorded, RecordedThread, Source};
use crate::trace::file::RecordingWriter;
use crate::trace::format::ChunkEncoder;
use crate::trace::recorded::RawSample;
use crate::trace::recorded::{RawChunk, RawEncoder, SiteMap};
use crate::trace::{Event, RecordMode, Sample, ThreadInfo, Trace, TraceMeta};
use crossbeam_channel::{bounded, Receiver};
use fgtrace_core::control;
use parking_lot::Mutex;
use std::fmt;
use std::path::PathBuf;
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

/// What the collector keeps: each thread's calls encoded as raw chunks, one
/// per batch, as they arrive (or appended to the output file).
struct Gathered {
    origin: u64,
    sites: SiteMap,
    threads: Vec<Gathering>,
    out: Option<Output>,
    /// Off-CPU time going to the file while recording.
    #[cfg(target_os = "linux")]
    off_cpu: Option<OffCpuOut>,
}

/// The collector's side of off-CPU time in a file (issue 14): every few ms
/// the intervals the recorder closed since are written in off-CPU
/// sections, so a process killed while recording keeps them.
#[cfg(target_os = "linux")]
struct OffCpuOut {
    rec: Arc<crate::offcpu::Recorder>,
    cal: Calibration,
    /// Per thread index: the end of its last interval written.
    written_end: Vec<u64>,
    last: std::time::Instant,
}

/// How often off-CPU sections are written (a killed process loses this
/// much, plus the reader's 5 ms, of its off-CPU time).
#[cfg(target_os = "linux")]
const OFF_CPU_EVERY: Duration = Duration::from_millis(10);

#[derive(Default)]
struct Gathering {
    enc: RawEncoder,
    raw: Vec<RawChunk>,
    /// Batches received (a dump waits for those handed before it).
    batches: u64,
}

/// The file a session writes while it records.
struct Output {
    w: RecordingWriter<std::io::BufWriter<std::fs::File>>,
    path: PathBuf,
    sites_written: usize,
    threads_written: usize,
    /// The first write that failed; nothing is written after it.
    error: Option<String>,
    dirty: bool,
}

impl Output {
    fn check(&mut self, r: std::io::Result<()>) {
        if let Err(e) = r {
            if self.error.is_none() {
                self.error = Some(format!(
                    "writing {} failed after {} bytes: {e}",
                    self.path.display(),
                    self.w.written
                ));
            }
        }
    }
}

impl Gathered {
    fn new(origin: u64, out: Option<Output>) -> Gathered {
        Gathered {
            origin,
            sites: SiteMap::default(),
            threads: Vec::new(),
            out,
            #[cfg(target_os = "linux")]
            off_cpu: None,
        }
    }

    /// Announces threads up to index `i` in the file.
    fn announce(
        o: &mut Output,
        i: usize,
        who: &dyn Fn(u32) -> (u32, String),
    ) -> std::io::Result<()> {
        while o.threads_written <= i {
            let (tid, name) = who(o.threads_written as u32);
            o.w.thread(o.threads_written as u32, tid, &name)?;
            o.threads_written += 1;
        }
        Ok(())
    }

    /// Writes the off-CPU intervals closed since the last time (every
    /// [`OFF_CPU_EVERY`] at most), announcing their threads first.
    /// `tids()`: the session's threads' tids, by index.
    #[cfg(target_os = "linux")]
    fn write_off_cpu(&mut self, who: &dyn Fn(u32) -> (u32, String), tids: &dyn Fn() -> Vec<u32>) {
        let (Some(o), Some(oc)) = (&mut self.out, &mut self.off_cpu) else {
            return;
        };
        if o.error.is_some() || oc.last.elapsed() < OFF_CPU_EVERY {
            return;
        }
        oc.last = std::time::Instant::now();
        let (rec, cal, written_end) = (&oc.rec, &oc.cal, &mut oc.written_end);
        // Taken under the recorder's lock, written after it (the reader
        // thread and joining threads wait for that lock).
        let mut news = Vec::new();
        let tids = tids();
        rec.publish(|tid, ivs, lost| {
            // A thread not registered yet (or gone from the list): next time.
            let Some(i) = tids.iter().position(|&t| t == tid) else {
                return false;
            };
            if written_end.len() <= i {
                written_end.resize(i + 1, 0);
            }
            let ivs = crate::offcpu::to_trace_after(cal, written_end[i], u64::MAX, ivs);
            if let Some(l) = ivs.last() {
                written_end[i] = l.end_ns();
            }
            news.push((i, lost, ivs));
            true
        });
        let mut r = Ok(());
        for (i, lost, ivs) in news {
            r = r
                .and_then(|_| Self::announce(o, i, who))
                .and_then(|_| o.w.off_cpu(i as u32, lost, &ivs));
            o.dirty = true;
        }
        o.check(r);
    }

    /// Encodes one thread's records; `who` names thread `i` (tid, name) for
    /// the file.
    fn add_records(&mut self, thread: u32, recs: &[RawCall], who: &dyn Fn(u32) -> (u32, String)) {
        let i = thread as usize;
        if self.threads.len() <= i {
            // Chunks kept in memory go into arenas; chunks written to the
            // file are encoded in a scratch buffer and dropped.
            let retain = self.out.is_none();
            self.threads.resize_with(i + 1, || {
                let mut g = Gathering::default();
                g.enc.retain = retain;
                g
            });
        }
        if recs.is_empty() {
            return;
        }
        let c = self.threads[i].enc.encode(
            thread,
            recs,
            self.origin,
            &mut self.sites,
            &build::registered_site,
        );
        match &mut self.out {
            None => self.threads[i].raw.push(c),
            Some(o) if o.error.is_some() => self.threads[i].raw.push(c),
            Some(o) => {
                let mut r = Ok(());
                while r.is_ok() && o.sites_written < self.sites.sites.len() {
                    r =
                        o.w.site(o.sites_written as u32, &self.sites.sites[o.sites_written]);
                    o.sites_written += 1;
                }
                let r = r
                    .and_then(|_| Self::announce(o, i, who))
                    .and_then(|_| o.w.raw(&c));
                let failed = r.is_err();
                o.check(r);
                o.dirty = true;
                if failed {
                    // Kept in memory instead; `stop` reports the error.
                    self.threads[i].raw.push(c);
                }
            }
        }
    }

    fn add(&mut self, b: Batch, who: &dyn Fn(u32) -> (u32, String)) -> Storage {
        // SAFETY: the first `len` slots of a handed-off batch were written.
        let recs = unsafe {
            std::slice::from_raw_parts(
                b.storage.as_ptr() as *const RawCall,
                b.len.min(b.storage.len()),
            )
        };
        self.add_records(b.thread, recs, who);
        if let Some(t) = self.threads.get_mut(b.thread as usize) {
            t.batches += 1;
        }
        b.storage
    }

    fn batches(&self, thread: u32) -> u64 {
        self.threads.get(thread as usize).map_or(0, |t| t.batches)
    }

    /// Flushes the file while the collector idles, so a crash loses little.
    fn idle(&mut self) {
        if let Some(o) = &mut self.out {
            if o.dirty && o.error.is_none() {
                let r = o.w.flush();
                o.check(r);
                o.dirty = false;
            }
        }
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
        // [issue 17] per-call hardware counters: fail early, naming the counter.
        crate::pmu::check_session_counters(&config.counters).map_err(Error::Counters)?;
        // ---- issue 15: a session the control endpoint runs in the
        // background (an always-on flight recorder) makes way for the
        // program's own; the panic hook of `Config::dump_on_panic`.
        crate::active::yield_background();
        if config.dump_on_panic.is_some() {
            crate::dump::install_panic_hook();
        }
        // ---- end issue 15
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
        // Off-CPU time (issue 14): the recorder opens this thread's ring now,
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
        let off_cpu_said = off_cpu.as_ref().map(|o| crate::trace::OffCpu {
            unavailable: o.refused(),
            threads: Vec::new(),
        });
        #[cfg(not(target_os = "linux"))]
        let off_cpu_said = config
            .off_cpu
            .then(|| crate::trace::OffCpu::unavailable("off-CPU time needs Linux (perf_event)"));
        // The output file before anything else runs: nothing else has
        // started if it cannot be created.
        let out = match &config.output {
            Some(path) => match open_output(path, &cal, &config, off_cpu_said) {
                Ok(o) => Some(o),
                Err(e) => {
                    #[cfg(target_os = "linux")]
                    cancel_off_cpu();
                    return Err(e);
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
            idle_gathered,
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
        for t in &threads {
            let (tail, lost) = t.snapshot(self.active.flight, self.config.flight_calls);
            g.add_records(t.index, &tail, &who);
            overwritten.push(lost);
            infos.push(ThreadInfo {
                tid: t.tid,
                name: t.name.clone(),
                calls: 0,
                lost: t.dropped.load(Relaxed) + t.nested_dropped.load(Relaxed) as u64 + lost,
                overruns: t.overruns.load(Relaxed) as u64,
                samples: 0,
                samples_lost: 0,
            });
        }
        let mut samples: Vec<Vec<RawSample>> = vec![Vec::new(); infos.len()];
        let mut sampling = None;
        let mut sampler = None; // issue 18
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
            sampler = sampled.backend; // issue 18: which path sampled
        }
        g.threads.resize_with(infos.len(), Default::default);
        for (info, th) in infos.iter_mut().zip(&g.threads) {
            info.calls = th.enc.calls;
        }
        let mut meta = TraceMeta {
            sites: std::mem::take(&mut g.sites.sites),
            threads: infos,
            sampling,
            sampler, // issue 18
            mappings,
            ..base_meta(&self.cal, end.ticks, &self.config)
        };
        // Off-CPU time (issue 14): the threads' switch intervals, or why not.
        #[cfg(target_os = "linux")]
        if let Some(o) = &self.active.off_cpu {
            meta.off_cpu = Some(o.finish(&self.cal, meta.duration_ns, &meta.threads));
        }
        #[cfg(not(target_os = "linux"))]
        if self.config.off_cpu {
            meta.off_cpu = Some(crate::trace::OffCpu::unavailable(
                "off-CPU time needs Linux (perf_event)",
            ));
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
                    Source::Memory(Recorded {
                        ticks_per_ns: self.cal.ticks_per_ns,
                        threads,
                    }),
                ))
            }
            Some(mut o) => {
                finish_output(&mut o, &meta, &g.threads, samples, &overwritten);
                if let Some(e) = o.error {
                    return Err(Error::Output(format!(
                        "{e}; the file holds what was written before (readable up to its last complete section)"
                    )));
                }
                match o.w.finish(&meta) {
                    Ok(_) => Ok(Trace::from_source(meta, Source::File(o.path))),
                    Err(e) => Err(Error::Output(format!(
                        "finishing {} failed: {e}",
                        o.path.display()
                    ))),
                }
            }
        }
    }
}

/// What every trace of this session says about itself, before threads and sites.
fn base_meta(cal: &Calibration, end_ticks: u64, config: &Config) -> TraceMeta {
    meta_of(
        cal,
        end_ticks,
        config.mode,
        config.describe(),
        config.counters.iter().map(|c| c.name()),
    )
}

fn meta_of<'a>(
    cal: &Calibration,
    end_ticks: u64,
    mode: RecordMode,
    filters: String,
    counters: impl Iterator<Item = &'a str>,
) -> TraceMeta {
    // Per-call figures beside each call (extension records): allocations
    // when the counting allocator is installed, then the session's counter.
    crate::process::base(
        *cal,
        end_ticks,
        mode,
        filters,
        counters.map(String::from).collect(),
    )
    .meta(fgtrace_core::alloc::installed())
}

/// Creates the output file and writes its provisional header (with
/// `off_cpu`: whether off-CPU time is recorded, or why not).
fn open_output(
    path: &std::path::Path,
    cal: &Calibration,
    config: &Config,
    off_cpu: Option<crate::trace::OffCpu>,
) -> Result<Output, Error> {
    let f = std::fs::File::create(path)
        .map_err(|e| Error::Output(format!("cannot create {}: {e}", path.display())))?;
    let meta = TraceMeta {
        off_cpu,
        ..base_meta(cal, cal.origin.ticks, config)
    };
    // The header reaches the file at once: a process killed before its
    // first batch leaves a file that reads (no calls, and what the header
    // says, such as why off-CPU time is missing).
    let w = RecordingWriter::new(std::io::BufWriter::with_capacity(1 << 16, f), &meta)
        .and_then(|mut w| w.flush().map(|()| w))
        .map_err(|e| Error::Output(format!("cannot write {}: {e}", path.display())))?;
    Ok(Output {
        w,
        path: path.to_path_buf(),
        sites_written: 0,
        threads_written: 0,
        error: None,
        dirty: false,
    })
}

/// Writes what the file still lacks at stop: sites and threads not yet
/// announced, the chunks kept in memory, the samples.
fn finish_output(
    o: &mut Output,
    meta: &TraceMeta,
    threads: &[Gathering],
    samples: Vec<Vec<RawSample>>,
    overwritten: &[u64],
) {
    if o.error.is_some() {
        return;
    }
    let mut r = Ok(());
    while r.is_ok() && o.sites_written < meta.sites.len() {
        r =
            o.w.site(o.sites_written as u32, &meta.sites[o.sites_written]);
        o.sites_written += 1;
    }
    while r.is_ok() && o.threads_written < meta.threads.len() {
        let t = &meta.threads[o.threads_written];
        r = o.w.thread(o.threads_written as u32, t.tid, &t.name);
        o.threads_written += 1;
    }
    for th in threads {
        for c in &th.raw {
            r = r.and_then(|_| o.w.raw(c));
        }
    }
    for (t, s) in samples.into_iter().enumerate() {
        if s.is_empty() {
            continue;
        }
        let mut enc = ChunkEncoder::new(t as u32);
        for (ts, shadow_depth, cut, frames) in s {
            enc.push(&Event::Sample(Sample {
                thread: t as u32,
                ts_ns: ts,
                shadow_depth,
                cut,
                frames,
            }));
        }
        for c in enc.finish() {
            r = r.and_then(|_| o.w.samples(&c));
        }
    }
    for (t, &n) in overwritten.iter().enumerate() {
        if n > 0 {
            r = r.and_then(|_| o.w.overwritten(t as u32, n));
        }
    }
    o.check(r);
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

/// A dump of the running stream-mode session (`fgtrace ctl PID dump`,
/// [`crate::dump::running`]), built by the collector between batches:
/// what it gathered, every batch the threads handed it before the dump, and
/// what each thread holds that it has not handed over yet. A thread's tail
/// and its count of batches sent are read together under its buffer's flag
/// (a handoff sends under it), so no call is in the dump twice or missing
/// in between; batches sent after that wait until the dump is built.
fn dump_running(
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
    let mut meta = TraceMeta {
        sites: g.sites.sites.clone(),
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
        Source::Memory(Recorded {
            ticks_per_ns: cal.ticks_per_ns,
            threads: recorded,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With an output file the collector keeps no records in memory: each
    /// batch is encoded, written and dropped; without one it keeps the
    /// encoded chunk (a few bytes per call), never the 16-byte records.
    #[test]
    fn the_collector_holds_encoded_chunks_in_memory_and_nothing_with_a_file() {
        let recs: Vec<RawCall> = (0..4096u64)
            .map(|i| RawCall::pack(1000 + i * 50, 1, 30, 0, false, buffer::kind::CALL))
            .collect();
        let who = |_| (7, "t".to_string());
        let mut g = Gathered::new(1000, None);
        g.add_records(0, &recs, &who);
        let kept: usize = g.threads[0].raw.iter().map(|c| c.payload.len()).sum();
        assert!(
            kept > 0 && kept <= 4 * recs.len(),
            "{kept} bytes for {} calls",
            recs.len()
        );
        assert_eq!(g.threads[0].enc.calls, 4096);

        let path =
            std::env::temp_dir().join(format!("fgtrace-collector-{}.fgt", std::process::id()));
        let cal = Calibration {
            origin: ClockPoint::now(),
            ticks_per_ns: 1.0,
        };
        let out = open_output(&path, &cal, &Config::builtin(), None).unwrap();
        let mut g = Gathered::new(1000, Some(out));
        for _ in 0..10 {
            g.add_records(0, &recs, &who);
        }
        assert!(g.threads[0].raw.is_empty());
        assert_eq!(g.threads[0].enc.calls, 40960);
        g.idle();
        let o = g.out.as_ref().unwrap();
        assert!(o.error.is_none());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), o.w.written);
        let _ = std::fs::remove_file(&path);
    }

    /// A collector thread that cannot be spawned leaves no session behind:
    /// the next `start` works.
    #[test]
    fn a_failed_collector_spawn_leaves_no_session_running() {
        let failed = Session::start_with(Config::builtin(), |_, _, _, _| {
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
