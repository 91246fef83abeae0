//! Stack sampling, on the trace clock, beside the traced calls.
//!
//! Two backends (Linux):
//! * `timer` (per-thread CPU time) and `wall`: a per-thread timer raises a
//!   signal on the thread itself, whose handler walks the frame pointers
//!   ([`unwind`]) into a preallocated per-thread buffer, as Zephyr's timer
//!   interrupt does. CPU time is measured by a `perf_event` `cpu-clock`
//!   counter (hrtimer based: 10 kHz per thread works); where perf_event is
//!   refused it falls back to POSIX thread CPU-time timers, which only fire at
//!   the scheduler tick (250 Hz here) — with a warning that says so.
//! * a `perf_event` event (`cpu-clock`, `cycles`, `cache-misses`, ...): the
//!   kernel samples user-space call chains into an mmap ring buffer.
//!
//! `timer` takes the second path wherever `perf_event_open` allows it (a
//! `cpu-clock` ring with kernel call chains: no signal, about perf's cost) and
//! the signal path only where it does not ([`Backend`]); `wall` always takes
//! the signal path (a CPU-clock event cannot see blocked threads). Ring samples
//! carry neither the shadow depth nor the cut: both are joined from the trace
//! when it is read (`trace::SHADOW_DEPTH_FROM_TRACE`, `view::folded::ChainCut`).
//!
//! A sampler thread registers every thread of the process (rescanning
//! `/proc/self/task`, so threads started later are sampled too), drains the
//! buffers, and hands the samples to the session at stop.

pub use fgtrace_core::unwind;

#[cfg(target_os = "linux")]
mod buildid;
#[cfg(target_os = "linux")]
pub mod maps;
#[cfg(target_os = "linux")]
mod perf;
#[cfg(target_os = "linux")]
mod signal;

#[cfg(target_os = "linux")]
pub use perf::PerfEvent;

use std::fmt;

/// What drives the samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Per-thread CPU-time timer, frame-pointer walk in a signal handler.
    Timer,
    /// Per-thread wall-clock timer (samples blocked threads too: off-CPU time).
    Wall,
    /// A `perf_event` event with kernel-collected call chains.
    #[cfg(target_os = "linux")]
    Perf(PerfEvent),
}

/// How `timer` samples are taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// A `cpu-clock` perf ring with kernel call chains where `perf_event_open`
    /// allows it, the signal path where it does not (the default).
    #[default]
    Auto,
    /// Always the signal handler's frame-pointer walk (records the shadow
    /// depth and the cut at the sample itself).
    Signal,
    /// Always the perf ring; refused is an error.
    Ring,
}

/// How to sample: `Config::default().sampling(Sampling::timer(999))`, or
/// `FGTRACE_SAMPLE=<source>[:<rate>]` in the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sampling {
    pub source: Source,
    /// Hz for clock sources; events per sample (the period) for counted events.
    pub rate: u64,
    /// Samples buffered per thread between drains (or kept, in ring mode).
    pub buffer: usize,
    /// Keep the newest samples when a buffer is full (flight recorder)
    /// instead of counting new ones as lost (Zephyr's behaviour, the default).
    pub ring: bool,
    /// `timer` only: perf ring or signal handler (see [`Backend`]).
    pub backend: Backend,
}

impl Sampling {
    /// CPU-time sampling at `hz` per thread.
    pub fn timer(hz: u64) -> Sampling {
        Sampling {
            source: Source::Timer,
            rate: hz.max(1),
            buffer: 4096,
            ring: false,
            backend: Backend::Auto,
        }
    }
    /// Wall-clock sampling at `hz` per thread.
    pub fn wall(hz: u64) -> Sampling {
        Sampling {
            source: Source::Wall,
            ..Sampling::timer(hz)
        }
    }
    /// Sampling on a `perf_event` event: `rate` in Hz for `cpu-clock` and
    /// `task-clock`, events per sample for the others.
    #[cfg(target_os = "linux")]
    pub fn perf(event: PerfEvent, rate: u64) -> Sampling {
        Sampling {
            source: Source::Perf(event),
            ..Sampling::timer(rate)
        }
    }
    /// Per-thread buffer size, in samples.
    pub fn buffer(mut self, samples: usize) -> Sampling {
        self.buffer = samples.max(16);
        self
    }
    /// Keep the newest samples instead of dropping new ones when full.
    pub fn ring(mut self, yes: bool) -> Sampling {
        self.ring = yes;
        self
    }
    /// How `timer` samples are taken (`Backend::Auto` by default).
    pub fn backend(mut self, b: Backend) -> Sampling {
        self.backend = b;
        self
    }

    fn is_clock(&self) -> bool {
        match self.source {
            Source::Timer | Source::Wall => true,
            #[cfg(target_os = "linux")]
            Source::Perf(e) => e.is_clock(),
        }
    }

    /// Parses `FGTRACE_SAMPLE`: `timer`, `wall`, or a perf event name, with
    /// an optional `:rate` (Hz for clocks, period for counted events).
    pub fn parse(s: &str) -> Result<Sampling, String> {
        let s = s.trim();
        let (name, rate) = match s.split_once(':') {
            Some((n, r)) => {
                let r: u64 = r
                    .trim()
                    .parse()
                    .map_err(|_| format!("`{s}`: rate `{r}` is not a positive number"))?;
                if r == 0 {
                    return Err(format!("`{s}`: the rate must be positive"));
                }
                (n.trim(), Some(r))
            }
            None => (s, None),
        };
        let mut sp = match name {
            "timer" => Sampling::timer(999),
            "timer-signal" => Sampling::timer(999).backend(Backend::Signal),
            "timer-ring" => Sampling::timer(999).backend(Backend::Ring),
            "wall" => Sampling::wall(999),
            #[cfg(target_os = "linux")]
            n => match PerfEvent::from_name(n) {
                Some(e) => Sampling::perf(e, default_rate(e)),
                None => {
                    let names: Vec<_> = PerfEvent::ALL.iter().map(|e| e.name()).collect();
                    return Err(format!(
                        "unknown sample source `{n}` (timer, timer-signal, timer-ring, wall, {})",
                        names.join(", ")
                    ));
                }
            },
            #[cfg(not(target_os = "linux"))]
            n => return Err(format!("unknown sample source `{n}` (timer, wall)")),
        };
        if let Some(r) = rate {
            if sp.is_clock() && r > 100_000 {
                return Err(format!(
                    "`{s}`: {r} Hz is more than the 100 kHz fgtrace allows"
                ));
            }
            sp.rate = r;
        }
        Ok(sp)
    }

    /// `timer@999Hz`, `cycles/1000000`: how the trace says it was sampled.
    pub fn describe(&self) -> String {
        let name = match self.source {
            Source::Timer => "timer",
            Source::Wall => "wall",
            #[cfg(target_os = "linux")]
            Source::Perf(e) => e.name(),
        };
        if self.is_clock() {
            format!("{name}@{}Hz", self.rate)
        } else {
            format!("{name} every {} events", self.rate)
        }
    }
}

#[cfg(target_os = "linux")]
fn default_rate(e: PerfEvent) -> u64 {
    match e {
        PerfEvent::CpuClock | PerfEvent::TaskClock => 999,
        PerfEvent::Cycles | PerfEvent::Instructions => 1_000_000,
        PerfEvent::CacheMisses | PerfEvent::BranchMisses => 10_000,
        PerfEvent::PageFaults | PerfEvent::ContextSwitches => 1,
    }
}

impl fmt::Display for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Samples of one thread, converted to the trace clock.
pub(crate) struct ThreadSamples {
    pub tid: u32,
    pub name: String,
    /// (ns since session start, shadow depth, cut, frames innermost first)
    pub samples: Vec<(u64, u32, Option<u32>, Vec<u64>)>,
    pub lost: u64,
}

/// What the sampler hands the session at stop.
pub(crate) struct Sampled {
    pub threads: Vec<ThreadSamples>,
    pub mappings: Vec<crate::trace::Mapping>,
    pub description: String,
    /// Which path took the samples (`TraceMeta::sampler`).
    pub backend: Option<String>,
}

#[cfg(target_os = "linux")]
pub(crate) use running::{register_current_thread, Sampler};

#[cfg(target_os = "linux")]
mod running {
    use super::signal::{self, RawSample, SampleBuf};
    use super::{maps, perf, Backend, Sampled, Sampling, Source, ThreadSamples};
    use crate::clock::Calibration;
    use parking_lot::Mutex;
    use std::collections::HashMap;
    use std::io;
    use std::sync::atomic::{AtomicBool, Ordering::*};
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    /// Buffers are never freed (a late signal may still hold one); they are
    /// reused by later sessions after a grace period.
    static POOL: Mutex<Vec<&'static SampleBuf>> = Mutex::new(Vec::new());

    fn take_buf(s: &Sampling) -> &'static SampleBuf {
        let mut pool = POOL.lock();
        if let Some(i) = pool
            .iter()
            .position(|b| b.ring == s.ring && b.capacity() == SampleBuf::slots_for(s.buffer))
        {
            return pool.swap_remove(i);
        }
        drop(pool);
        Box::leak(Box::new(SampleBuf::new(s.buffer, s.ring)))
    }

    fn give_back(b: &'static SampleBuf) {
        b.head.store(0, Release);
        b.tail.store(0, Release);
        b.lost.store(0, Release);
        b.set_bounds(super::unwind::StackBounds { lo: 0, hi: 0 });
        POOL.lock().push(b);
    }

    enum Hook {
        Perf(perf::Fd),
        Posix(PosixTimer),
        Ring(perf::Ring),
    }

    /// A POSIX timer id (a kernel handle, not a pointer to memory).
    struct PosixTimer(libc::timer_t);
    // SAFETY: timer ids may be used from any thread of the process.
    unsafe impl Send for PosixTimer {}

    struct Registered {
        tid: u32,
        name: String,
        buf: Option<&'static SampleBuf>,
        hook: Hook,
        raw: Vec<RawSample>,
        ring_samples: Vec<perf::RingSample>,
        lost: u64,
    }

    struct State {
        sampling: Sampling,
        threads: Vec<Registered>,
        known: HashMap<u32, ()>,
        warned_fallback: bool,
        paths: Paths,
    }

    /// Which path sampled how many threads, for `TraceMeta::sampler`.
    #[derive(Clone, Default)]
    pub(super) struct Paths {
        pub(super) ring: u32,
        pub(super) signal: u32,
        pub(super) posix: u32,
        /// Why a `timer` perf ring was refused (then the signal path ran).
        pub(super) ring_refused: Option<String>,
    }

    impl Paths {
        pub(super) fn describe(&self, source: Source) -> Option<String> {
            let ring = "perf ring (kernel call chains; shadow depth and cut joined from the trace)";
            let signal = "signal (frame-pointer walk in the handler)";
            let posix = match source {
                Source::Wall => "signal (wall-clock POSIX timers: sees blocked threads)",
                _ => "signal (POSIX thread CPU-time timers: scheduler tick, at most about 250 Hz)",
            };
            let mut parts = Vec::new();
            let n = self.ring + self.signal + self.posix;
            for (count, what) in [
                (self.ring, ring),
                (self.signal, signal),
                (self.posix, posix),
            ] {
                if count == n && n > 0 {
                    parts.push(what.to_string());
                } else if count > 0 {
                    parts.push(format!("{what} on {count} of {n} threads"));
                }
            }
            if let Some(why) = &self.ring_refused {
                parts.push(format!("perf ring refused: {why}"));
            }
            (!parts.is_empty()).then(|| parts.join("; "))
        }
    }

    /// The running sampler: a thread that registers threads and drains buffers.
    pub(crate) struct Sampler {
        stop: Arc<AtomicBool>,
        handle: Option<JoinHandle<()>>,
        state: Arc<Mutex<State>>,
    }

    fn own_tid() -> u32 {
        crate::thread::os_tid()
    }

    fn comm(tid: u32) -> String {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }

    fn tids() -> Vec<u32> {
        std::fs::read_dir("/proc/self/task")
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The link count of `/proc/self/task` (2 + threads): one `statx`, cheap
    /// enough for every wake-up where a scan reads the whole directory. `None`
    /// where procfs does not tell.
    fn thread_count() -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/task").ok().map(|m| m.nlink())
    }

    fn refresh_ranges() {
        let m = maps::read_self();
        signal::TEXT.publish(&maps::text_ranges(&m));
        signal::STACKS.publish(&maps::stack_ranges(&m));
    }

    impl State {
        fn register(&mut self, tid: u32) -> io::Result<()> {
            let name = comm(tid);
            if name.starts_with("fgtrace-") {
                return Ok(()); // our own threads
            }
            let s = &self.sampling;
            let period_ns = 1_000_000_000 / s.rate.max(1);
            let (hook, buf) = match s.source {
                Source::Perf(e) => {
                    let every = if e.is_clock() {
                        perf::Every::Nanos(period_ns)
                    } else {
                        perf::Every::Events(s.rate)
                    };
                    let ring = perf::Ring::open(e, every, tid as i32)?;
                    perf::enable(&ring.fd);
                    self.paths.ring += 1;
                    (Hook::Ring(ring), None)
                }
                // Kernel call chains from a cpu-clock ring: no signal, so
                // about perf's cost (issue 18); the signal path below only
                // where the kernel refuses.
                Source::Timer
                    if s.backend == Backend::Ring
                        || (s.backend == Backend::Auto && self.paths.ring_refused.is_none()) =>
                {
                    match perf::Ring::open(
                        perf::PerfEvent::CpuClock,
                        perf::Every::Nanos(period_ns),
                        tid as i32,
                    ) {
                        Ok(ring) => {
                            perf::enable(&ring.fd);
                            self.paths.ring += 1;
                            self.threads.push(Registered {
                                tid,
                                name,
                                buf: None,
                                hook: Hook::Ring(ring),
                                raw: Vec::new(),
                                ring_samples: Vec::new(),
                                lost: 0,
                            });
                            return Ok(());
                        }
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(e),
                        Err(e) if s.backend == Backend::Ring => return Err(e),
                        Err(e) => {
                            self.paths.ring_refused = Some(e.to_string());
                            return self.register(tid);
                        }
                    }
                }
                Source::Timer => {
                    let buf = take_buf(s);
                    match perf::open_signal_timer(
                        perf::PerfEvent::CpuClock,
                        perf::Every::Nanos(period_ns),
                        tid as i32,
                        signal::signal_number(),
                    ) {
                        Ok(fd) if signal::bind_fd(fd.0, buf) => {
                            buf.active.store(true, Release);
                            perf::enable(&fd);
                            self.paths.signal += 1;
                            (Hook::Perf(fd), Some(buf))
                        }
                        other => {
                            if let Err(e) = other {
                                if !self.warned_fallback {
                                    eprintln!(
                                        "fgtrace: {e}\nfgtrace: falling back to POSIX thread CPU-time timers, which \
                                         fire only at the scheduler tick: at most about 250 Hz per thread"
                                    );
                                    self.warned_fallback = true;
                                }
                            }
                            let clock = ((!tid as i32) << 3) | 6; // MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)
                            let t = posix_timer(clock, tid, buf, period_ns)?;
                            self.paths.posix += 1;
                            (Hook::Posix(PosixTimer(t)), Some(buf))
                        }
                    }
                }
                Source::Wall => {
                    let buf = take_buf(s);
                    let t = posix_timer(libc::CLOCK_MONOTONIC, tid, buf, period_ns)?;
                    self.paths.posix += 1;
                    (Hook::Posix(PosixTimer(t)), Some(buf))
                }
            };
            self.threads.push(Registered {
                tid,
                name,
                buf,
                hook,
                raw: Vec::new(),
                ring_samples: Vec::new(),
                lost: 0,
            });
            Ok(())
        }

        fn scan(&mut self, me: u32) -> io::Result<bool> {
            let mut new = false;
            for tid in tids() {
                if tid == me || self.known.contains_key(&tid) {
                    continue;
                }
                self.known.insert(tid, ());
                new = true;
                match self.register(tid) {
                    Ok(()) => {}
                    // A thread that exited between the scan and the open.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) if self.threads.is_empty() => return Err(e),
                    Err(_) => {}
                }
            }
            Ok(new)
        }

        fn drain(&mut self) {
            for t in &mut self.threads {
                if let Some(b) = t.buf {
                    if !b.ring {
                        b.drain(&mut t.raw);
                    }
                }
                if let Hook::Ring(r) = &mut t.hook {
                    t.lost += r.drain(&mut t.ring_samples);
                }
            }
        }
    }

    fn posix_timer(
        clock: libc::clockid_t,
        tid: u32,
        buf: &'static SampleBuf,
        period_ns: u64,
    ) -> io::Result<libc::timer_t> {
        // SAFETY: timer_create/settime with a sigevent aimed at one thread.
        unsafe {
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = signal::signal_number();
            ev.sigev_value = libc::sigval {
                sival_ptr: buf as *const _ as *mut _,
            };
            ev.sigev_notify_thread_id = tid as i32;
            let mut t: libc::timer_t = std::mem::zeroed();
            if libc::timer_create(clock, &mut ev, &mut t) != 0 {
                return Err(io::Error::last_os_error());
            }
            buf.active.store(true, Release);
            let ts = libc::timespec {
                tv_sec: (period_ns / 1_000_000_000) as _,
                tv_nsec: (period_ns % 1_000_000_000) as _,
            };
            let spec = libc::itimerspec {
                it_interval: ts,
                it_value: ts,
            };
            if libc::timer_settime(t, 0, &spec, std::ptr::null_mut()) != 0 {
                let e = io::Error::last_os_error();
                libc::timer_delete(t);
                return Err(e);
            }
            Ok(t)
        }
    }

    impl Sampler {
        /// Installs the handler, registers every current thread, and starts
        /// the sampler thread. Fails with a clear error if nothing can be sampled.
        pub fn start(sampling: &Sampling) -> io::Result<Sampler> {
            if super::unwind::Arch::host().is_none() {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "fgtrace cannot sample on this CPU architecture",
                ));
            }
            signal::install()?;
            refresh_ranges();
            let state = Arc::new(Mutex::new(State {
                sampling: sampling.clone(),
                threads: Vec::new(),
                known: HashMap::new(),
                warned_fallback: false,
                paths: Paths::default(),
            }));
            let stop = Arc::new(AtomicBool::new(false));
            let (tx, rx) = std::sync::mpsc::channel();
            let (stop2, st) = (stop.clone(), state.clone());
            let handle = std::thread::Builder::new()
                .name("fgtrace-sampler".into())
                .spawn(move || {
                    // Nothing this thread calls (a traced allocator) is recorded.
                    fgtrace_core::probe::mark_internal_thread();
                    let me = own_tid();
                    let first = st.lock().scan(me);
                    let ok = first.is_ok();
                    let _ = tx.send(first.map(|_| ()));
                    if !ok {
                        return;
                    }
                    let mut last_scan = Instant::now();
                    let mut last_maps = Instant::now();
                    let mut last_count = thread_count();
                    while !stop2.load(Acquire) {
                        std::thread::sleep(Duration::from_millis(5));
                        // Threads that run traced code register themselves on
                        // their first call; the rescan catches the others, at
                        // once when the thread count changed (so a new thread
                        // is sampled within about 5 ms), else periodically (a
                        // thread that replaced one that exited).
                        let count = thread_count();
                        let changed = count.is_some() && count != last_count;
                        if changed || last_scan.elapsed() >= Duration::from_millis(20) {
                            last_count = count;
                            let new = st.lock().scan(me).unwrap_or(false);
                            if new || last_maps.elapsed() >= Duration::from_millis(500) {
                                refresh_ranges();
                                last_maps = Instant::now();
                            }
                            last_scan = Instant::now();
                        }
                        st.lock().drain();
                    }
                })?;
            let sampler = Sampler {
                stop,
                handle: Some(handle),
                state,
            };
            match rx.recv() {
                Ok(Ok(())) => {
                    *CURRENT.lock() = Some(sampler.state.clone());
                    Ok(sampler)
                }
                Ok(Err(e)) => {
                    drop(sampler);
                    Err(e)
                }
                Err(_) => Err(io::Error::other("the sampler thread failed to start")),
            }
        }

        /// Joins the sampler thread and takes the state back.
        fn shut(&mut self) -> Option<State> {
            let h = self.handle.take()?;
            CURRENT.lock().take();
            self.stop.store(true, Release);
            let _ = h.join();
            let mut st = self.state.lock();
            Some(State {
                sampling: st.sampling.clone(),
                threads: std::mem::take(&mut st.threads),
                known: std::mem::take(&mut st.known),
                warned_fallback: st.warned_fallback,
                paths: st.paths.clone(),
            })
        }

        /// Stops every timer and event, drains what is left, converts the
        /// timestamps to the session's clock.
        pub fn stop(mut self, cal: &Calibration) -> Sampled {
            match self.shut() {
                Some(st) => finish(st, Some(cal)),
                None => Sampled {
                    threads: Vec::new(),
                    mappings: Vec::new(),
                    description: String::new(),
                    backend: None,
                },
            }
        }
    }

    /// The running sampler, for threads registering themselves.
    static CURRENT: Mutex<Option<Arc<Mutex<State>>>> = Mutex::new(None);

    /// Registers the calling thread with the running sampler, if any (from
    /// the probe's once-per-thread slow path), so a thread is sampled from its
    /// first traced call rather than from the next rescan.
    pub(crate) fn register_current_thread() {
        let Some(state) = CURRENT.lock().clone() else {
            return;
        };
        let tid = own_tid();
        let mut st = state.lock();
        if st.known.insert(tid, ()).is_none() {
            let _ = st.register(tid);
            drop(st);
            refresh_ranges();
        }
    }

    impl Drop for Sampler {
        fn drop(&mut self) {
            if let Some(st) = self.shut() {
                finish(st, None);
            }
        }
    }

    fn finish(mut st: State, cal: Option<&Calibration>) -> Sampled {
        for t in &st.threads {
            match &t.hook {
                Hook::Perf(fd) => perf::disable(fd),
                Hook::Ring(r) => perf::disable(&r.fd),
                // SAFETY: deleting the timer we created.
                Hook::Posix(tm) => unsafe {
                    libc::timer_delete(tm.0);
                },
            }
            if let Some(b) = t.buf {
                b.active.store(false, Release);
            }
        }
        // Wait for handlers already running (a preempted one can take long).
        let deadline = Instant::now() + Duration::from_millis(500);
        for t in &st.threads {
            if let Some(b) = t.buf {
                while b.busy.load(Acquire) != 0 && Instant::now() < deadline {
                    std::thread::yield_now();
                }
            }
        }
        for t in &mut st.threads {
            if let Some(b) = t.buf {
                b.drain(&mut t.raw);
                t.lost += b.lost.load(Relaxed);
            }
            if let Hook::Ring(r) = &mut t.hook {
                t.lost += r.drain(&mut t.ring_samples);
            }
        }
        let description = st.sampling.describe();
        let backend = st.paths.describe(st.sampling.source);
        let mappings = maps::executable(&maps::read_self());
        // Executable ranges, sorted, for cleaning kernel call chains.
        let mut text: Vec<(u64, u64)> = mappings.iter().map(|m| (m.start, m.end)).collect();
        text.sort_unstable();
        let in_text = |a: u64| {
            let i = text.partition_point(|r| r.0 <= a);
            i > 0 && a < text[i - 1].1
        };
        let mut threads = Vec::new();
        for t in st.threads {
            if let Hook::Perf(fd) = &t.hook {
                signal::unbind_fd(fd.0);
            }
            if let Some(b) = t.buf {
                give_back(b);
            }
            let Some(cal) = cal else { continue };
            let mut samples: Vec<(u64, u32, Option<u32>, Vec<u64>)> = t
                .raw
                .into_iter()
                .map(|s| (cal.ns(s.ticks), s.shadow_depth, s.cut, s.frames))
                .collect();
            samples.extend(t.ring_samples.into_iter().map(|s| {
                let mut frames = s.chain;
                if frames.first() != Some(&s.ip) {
                    frames.insert(0, s.ip);
                }
                // The kernel's walk follows whatever the frame-pointer register
                // holds, also in code built without frame pointers (libc):
                // like the signal handler's walk, the chain ends at the first
                // return address outside executable code (0, a stale stack word).
                if let Some(k) = frames.iter().skip(1).position(|&a| !in_text(a)) {
                    frames.truncate(k + 1);
                }
                let depth = crate::trace::SHADOW_DEPTH_FROM_TRACE;
                (cal.mono_to_ns(s.time_mono_ns), depth, None, frames)
            }));
            samples.sort_by_key(|s| s.0);
            threads.push(ThreadSamples {
                tid: t.tid,
                name: t.name,
                samples,
                lost: t.lost,
            });
        }
        Sampled {
            threads,
            mappings,
            description,
            backend,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_paths_parse_and_describe_alike() {
        let s = Sampling::parse("timer-signal:2000").unwrap();
        assert_eq!(
            (s.source, s.backend, s.rate),
            (Source::Timer, Backend::Signal, 2000)
        );
        assert_eq!(s.describe(), "timer@2000Hz");
        let s = Sampling::parse("timer-ring").unwrap();
        assert_eq!((s.source, s.backend), (Source::Timer, Backend::Ring));
        assert_eq!(Sampling::parse("timer").unwrap().backend, Backend::Auto);
        let e = Sampling::parse("timer-sig").unwrap_err();
        assert!(e.contains("timer-signal, timer-ring"), "{e}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_trace_says_which_path_sampled_and_why() {
        let p = running::Paths {
            ring: 3,
            ..Default::default()
        };
        assert_eq!(
            p.describe(Source::Timer).as_deref(),
            Some("perf ring (kernel call chains; shadow depth and cut joined from the trace)")
        );
        let p = running::Paths {
            signal: 2,
            ring_refused: Some("perf_event_open(cpu-clock) failed: EACCES".into()),
            ..Default::default()
        };
        assert_eq!(
            p.describe(Source::Timer).as_deref(),
            Some(
                "signal (frame-pointer walk in the handler); \
                 perf ring refused: perf_event_open(cpu-clock) failed: EACCES"
            )
        );
        let p = running::Paths {
            ring: 1,
            signal: 1,
            ..Default::default()
        };
        let d = p.describe(Source::Timer).unwrap();
        assert!(d.contains("on 1 of 2 threads; signal"), "{d}");
        assert_eq!(running::Paths::default().describe(Source::Timer), None);
    }
}
