//! Session lifecycle: start recording, gather the threads' batches on a
//! collector thread, and turn everything into a [`Trace`] at stop.

use crate::buffer::{self, Batch, RawCall, Storage, ThreadBuf};
use crate::clock::{self, Calibration, ClockPoint};
use crate::config::{Config, Filters};
use crate::probe::{self, Site, CONTROL, ON, SESSION_ON};
use crate::trace::{build, RecordMode, Trace};
use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::{Mutex, RwLock};
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
        }
    }
}

impl std::error::Error for Error {}

/// What the hot path needs to know about the running session.
pub(crate) struct Active {
    pub gen: u32,
    pub filters: Filters,
    pub has_graph: bool,
    pub flight: bool,
    pub capacity: usize,
    pub stack_depth: u32,
    pub max_depth: u32,
    pub threshold_ticks: u64,
    pub block_when_full: bool,
    /// Stacks are sampled too: threads register with the sampler on first use.
    pub sampling: bool,
    pub batches: Sender<Batch>,
    pub recycle_tx: Sender<Storage>,
    pub recycle_rx: Receiver<Storage>,
    threads: Mutex<Vec<Arc<ThreadBuf>>>,
}

impl Active {
    /// A buffer for the calling thread (slow path, once per thread per session).
    pub fn register_thread(&self) -> Arc<ThreadBuf> {
        let (tid, name) = (os_tid(), thread_name());
        let mut threads = self.threads.lock();
        let b = Arc::new(ThreadBuf::new(
            threads.len() as u32,
            tid,
            name,
            self.capacity,
        ));
        threads.push(b.clone());
        b
    }
}

static ACTIVE: RwLock<Option<Arc<Active>>> = RwLock::new(None);
static NEXT_GEN: AtomicU32 = AtomicU32::new(1);
static SITES: Mutex<Vec<&'static Site>> = Mutex::new(Vec::new());

/// The session of generation `gen`, if it is still the active one.
pub(crate) fn active(gen: u32) -> Option<Arc<Active>> {
    ACTIVE.read().as_ref().filter(|a| a.gen == gen).cloned()
}

/// Assigns a process-wide id to a site (slow path, once per site).
pub(crate) fn register_site(site: &'static Site) -> u32 {
    let mut sites = SITES.lock();
    if let Some(i) = sites.iter().position(|s| std::ptr::eq(*s, site)) {
        return i as u32;
    }
    let id = sites.len() as u32;
    sites.push(site);
    site.set_id(id);
    id
}

pub(crate) fn site_by_id(id: u32) -> Option<&'static Site> {
    SITES.lock().get(id as usize).copied()
}

/// The calling thread's `std::thread` name, or `tid-N`.
pub(crate) fn thread_name() -> String {
    std::thread::current()
        .name()
        .map(String::from)
        .unwrap_or_else(|| format!("tid-{}", os_tid()))
}

/// The calling thread's OS id.
pub(crate) fn os_tid() -> u32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) as u32 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        thread_local!(static TID: u32 = NEXT.fetch_add(1, Relaxed));
        TID.with(|t| *t)
    }
}

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
    sampler: Option<crate::sampler::Sampler>,
}

impl Session {
    /// Starts recording every `#[traced]` call that passes `config`'s filters.
    pub fn start(config: Config) -> Result<Session, Error> {
        if !config.errors.is_empty() {
            return Err(Error::Config(config.errors.join("; ")));
        }
        let rate = clock::process_rate();
        let mut slot = ACTIVE.write();
        if slot.is_some() {
            return Err(Error::AlreadyRunning);
        }
        let gen = NEXT_GEN.fetch_add(1, Relaxed) & (u32::MAX >> 2);
        let flight = config.mode == RecordMode::FlightRecorder;
        let capacity = if flight {
            config.flight_calls.next_power_of_two()
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
        let active = Arc::new(Active {
            gen,
            has_graph: filters.has_graph_functions(),
            filters,
            flight,
            capacity,
            stack_depth: config.stack_depth,
            max_depth: config.max_depth.unwrap_or(u32::MAX),
            threshold_ticks: config.threshold.map(|d| cal.ticks_for(d)).unwrap_or(0),
            block_when_full: config.block_when_full,
            sampling: config.sampling.is_some(),
            batches,
            recycle_tx,
            recycle_rx,
            threads: Mutex::new(Vec::new()),
        });
        *slot = Some(active.clone());
        drop(slot);
        let stop = Arc::new(AtomicBool::new(false));
        let collector = if flight {
            None
        } else {
            let (rx, stop, act) = (batches_rx.clone(), stop.clone(), active.clone());
            let h = std::thread::Builder::new()
                .name("fgtrace-collector".into())
                .spawn(move || collect(rx, stop, act))
                .map_err(|e| Error::Collector(e.to_string()))?;
            Some(h)
        };
        #[cfg(target_os = "linux")]
        let sampler = match &config.sampling {
            Some(s) => match crate::sampler::Sampler::start(s) {
                Ok(s) => Some(s),
                Err(e) => {
                    ACTIVE.write().take();
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
            ACTIVE.write().take();
            return Err(Error::Sampler("sampling needs Linux".into()));
        }
        CONTROL.store(gen << 2 | SESSION_ON | ON, Release);
        Ok(Session {
            active,
            cal,
            config,
            stop,
            collector,
            batches_rx,
            #[cfg(target_os = "linux")]
            sampler,
        })
    }

    /// Pauses recording (ftrace's `tracing_on = 0`); probes cost one load and a branch.
    pub fn pause(&self) {
        probe::control_session_off();
    }

    /// Resumes recording after [`Session::pause`].
    pub fn resume(&self) {
        CONTROL.store(self.active.gen << 2 | SESSION_ON | ON, Release);
    }

    /// Stops recording and returns the trace.
    pub fn stop(mut self) -> Result<Trace, Error> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<Trace, Error> {
        let end = ClockPoint::now();
        probe::control_session_off();
        ACTIVE.write().take();
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
        let sampled: Option<crate::sampler::Sampled> = None;
        let threads = self.active.threads.lock().clone();
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
                dropped: t.dropped.load(Relaxed),
                overruns: t.overruns.load(Relaxed),
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
        let mut trace = build::build(meta_base, inputs, site_by_id);
        trace.meta.sampling = sampling;
        trace.meta.mappings = mappings;
        Ok(trace)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.collector.is_some()
            || ACTIVE
                .read()
                .as_ref()
                .is_some_and(|a| a.gen == self.active.gen)
        {
            let _ = self.shutdown();
        }
    }
}

const MIN_NAP: Duration = Duration::from_micros(500);
const MAX_NAP: Duration = Duration::from_millis(10);

/// The collector thread: polls for batches (so traced threads never have to
/// wake it with a syscall), keeps their records, recycles their storage.
fn collect(rx: Receiver<Batch>, stop: Arc<AtomicBool>, active: Arc<Active>) -> Gathered {
    let mut g = Gathered::default();
    // Poll fast while batches arrive, back off to 10 ms while idle: an idle
    // session should cost (almost) nothing, a busy one never waits long.
    let mut nap = MIN_NAP;
    loop {
        let mut got = false;
        while let Ok(b) = rx.try_recv() {
            let s = g.add(b);
            let _ = active.recycle_tx.try_send(s);
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
