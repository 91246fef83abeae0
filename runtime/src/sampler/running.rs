//! The Linux sampler at work: per-thread timers, perf events and rings,
//! the sampler thread that registers threads and drains their buffers, and
//! what it hands the session at stop.

use super::signal::{self, RawSample, SampleBuf};
use super::unwind::StackBounds;
use super::{maps, perf, Backend, SampleSource, Sampled, Sampling, ThreadSamples};
use fgtrace_core::probe::ThreadState;
use fgtrace_trace::clock::Calibration;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Sample buffers alive (see `live_buffers`).
pub(super) static LIVE_BUFS: AtomicUsize = AtomicUsize::new(0);

/// How long a retiring buffer waits for a handler still inside it
/// (preempted mid-sample) before it is kept rather than freed.
const PATIENCE: Duration = Duration::from_secs(2);

/// A sample buffer registered in the handler's registry.
struct Owned {
    buf: *mut SampleBuf,
    index: usize,
    key: usize,
}

// SAFETY: the buffer is shared with the handler through the registry
// protocol (`signal::claim`/`release`); only the owner frees it.
unsafe impl Send for Owned {}

impl Owned {
    /// `copies`: the handler also copies each sample's stack for the
    /// `.eh_frame` unwinder (feature `unwind`).
    fn new(s: &Sampling, copies: bool) -> io::Result<Owned> {
        let buf = SampleBuf::new(s.buffer, s.ring);
        #[cfg(feature = "unwind")]
        let buf = if copies { buf.with_stack_copies() } else { buf };
        #[cfg(not(feature = "unwind"))]
        let _ = copies;
        let buf = Box::into_raw(Box::new(buf));
        LIVE_BUFS.fetch_add(1, SeqCst);
        match signal::claim(buf) {
            Some(c) => Ok(Owned {
                buf,
                index: c.index,
                key: c.timer_key,
            }),
            None => {
                // SAFETY: never published.
                drop(unsafe { Box::from_raw(buf) });
                LIVE_BUFS.fetch_sub(1, SeqCst);
                Err(io::Error::other(format!(
                    "more than {} threads sampled at once",
                    signal::MAX_THREADS
                )))
            }
        }
    }

    fn buf(&self) -> &SampleBuf {
        // SAFETY: alive until `retire`.
        unsafe { &*self.buf }
    }

    /// Takes the buffer out of the registry, waits until no handler is
    /// inside it, copies out what it holds, and frees it.
    fn retire(self, raw: &mut Vec<RawSample>, lost: &mut u64, cfi: Option<&mut perf::Cfi>) {
        let b = self.buf();
        b.active.store(false, SeqCst);
        let free = signal::release(self.index, PATIENCE);
        b.drain(raw, cfi);
        *lost += b.lost.load(SeqCst);
        if free {
            // SAFETY: out of the registry and no handler inside: ours alone.
            drop(unsafe { Box::from_raw(self.buf) });
            LIVE_BUFS.fetch_sub(1, SeqCst);
        } else {
            eprintln!(
                "fgtrace: a sampling signal handler did not finish within {PATIENCE:?}; \
                 its buffer is kept rather than freed"
            );
        }
    }
}

enum Hook {
    Perf(perf::Fd),
    Posix(PosixTimer),
    Ring(perf::Ring),
    /// Retired: the thread exited (or the session stopped).
    Done,
}

/// A POSIX timer id (a kernel handle, not a pointer to memory).
struct PosixTimer(libc::timer_t);
// SAFETY: timer ids may be used from any thread of the process.
unsafe impl Send for PosixTimer {}

struct Registered {
    tid: u32,
    name: String,
    buf: Option<Owned>,
    hook: Hook,
    raw: Vec<RawSample>,
    ring_samples: Vec<perf::RingSample>,
    lost: u64,
    /// Lookups of the bounds from outside (see `resolve_bounds`).
    tries: u8,
}

impl Registered {
    /// Stops the thread's timer or event and frees its buffer, keeping
    /// the samples it holds.
    fn retire(&mut self, mut cfi: Option<&mut perf::Cfi>) {
        match std::mem::replace(&mut self.hook, Hook::Done) {
            Hook::Perf(fd) => {
                perf::disable(&fd);
                signal::unbind_fd(fd.0);
                drop(fd);
            }
            Hook::Posix(tm) => {
                // SAFETY: deleting the timer we created.
                unsafe { libc::timer_delete(tm.0) };
            }
            Hook::Ring(mut r) => {
                perf::disable(&r.fd);
                self.lost += r.drain(&mut self.ring_samples, cfi.as_deref_mut());
            }
            Hook::Done => {}
        }
        if let Some(o) = self.buf.take() {
            o.retire(&mut self.raw, &mut self.lost, cfi);
        }
    }
}

struct State {
    sampling: Sampling,
    threads: Vec<Registered>,
    known: HashSet<u32>,
    warned_fallback: bool,
    paths: Paths,
    /// The `.eh_frame` unwinder of ring samples' stack copies (feature
    /// `unwind`), made when the first ring that copies stacks opens.
    cfi: Option<perf::Cfi>,
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
    pub(super) fn describe(&self, source: SampleSource) -> Option<String> {
        let ring = "perf ring (kernel call chains; shadow depth and cut joined from the trace)";
        let signal = "signal (frame-pointer walk in the handler)";
        let posix = match source {
            SampleSource::Wall => "signal (wall-clock POSIX timers: sees blocked threads)",
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
}

/// The stack of thread `t` as glibc allocated it (`pthread_getattr_np`).
fn stack_of(t: libc::pthread_t) -> Option<StackBounds> {
    // SAFETY: `t` is a live thread of this process (callers make sure).
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(t, &mut attr) != 0 {
            return None;
        }
        let mut addr = std::ptr::null_mut();
        let mut size = 0usize;
        let r = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        let lo = addr as u64;
        (r == 0 && size > 0).then(|| StackBounds {
            lo,
            hi: lo.saturating_add(size as u64),
        })
    }
}

/// Whether thread `tid` of this process still runs.
fn alive(tid: u32) -> bool {
    // SAFETY: signal 0 only checks that the thread exists.
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            tid as libc::c_int,
            0 as libc::c_int,
        ) == 0
    }
}

/// What a thread registering itself knows about itself.
#[derive(Clone, Copy)]
struct Own {
    bounds: Option<StackBounds>,
    state: *mut ThreadState,
}

fn esrch(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ESRCH)
}

/// Bytes of stack a ring sample copies for the `.eh_frame` unwinder
/// (feature `unwind`): see the guide's Performance page (docs/src/performance.md)
/// for size against cost.
#[cfg(feature = "unwind")]
const STACK_COPY: u32 = 8192;

impl State {
    /// The stack copy a new ring asks for: `STACK_COPY` with the feature
    /// `unwind` (the unwinder made on first use), else none.
    fn stack_copy(&mut self) -> u32 {
        #[cfg(feature = "unwind")]
        {
            self.cfi.get_or_insert_with(perf::Cfi::new);
            STACK_COPY
        }
        #[cfg(not(feature = "unwind"))]
        0
    }

    fn register(&mut self, tid: u32, own: Option<Own>) -> io::Result<()> {
        let name = comm(tid);
        if name.starts_with("fgtrace-") {
            return Ok(()); // our own threads
        }
        let s = self.sampling.clone();
        let period_ns = 1_000_000_000 / s.rate.max(1);
        let (hook, buf) = match s.source {
            SampleSource::Perf(e) => {
                let every = if e.is_clock() {
                    perf::Every::Nanos(period_ns)
                } else {
                    perf::Every::Events(s.rate)
                };
                let copy = self.stack_copy();
                let ring = perf::Ring::open(e, every, tid as i32, copy)?;
                perf::enable(&ring.fd);
                self.paths.ring += 1;
                (Hook::Ring(ring), None)
            }
            // Kernel call chains from a cpu-clock ring: no signal, so
            // about perf's cost; the signal path below only
            // where the kernel refuses, or for `ring(true)` (keep the
            // newest samples), which only the signal path's buffers do.
            SampleSource::Timer
                if s.backend == Backend::Ring
                    || (s.backend == Backend::Auto
                        && !s.ring
                        && self.paths.ring_refused.is_none()) =>
            {
                let copy = self.stack_copy();
                match perf::Ring::open(
                    perf::PerfEvent::CpuClock,
                    perf::Every::Nanos(period_ns),
                    tid as i32,
                    copy,
                ) {
                    Ok(ring) => {
                        perf::enable(&ring.fd);
                        self.paths.ring += 1;
                        (Hook::Ring(ring), None)
                    }
                    Err(e) if esrch(&e) => return Err(e),
                    Err(e) if s.backend == Backend::Ring => return Err(e),
                    Err(e) => {
                        self.paths.ring_refused = Some(e.to_string());
                        return self.register(tid, own);
                    }
                }
            }
            SampleSource::Timer => {
                let timer = perf::open_signal_timer(
                    perf::PerfEvent::CpuClock,
                    perf::Every::Nanos(period_ns),
                    tid as i32,
                    signal::signal_number(),
                );
                // A thread that exited between the scan and the open:
                // nothing to sample, nothing refused, nothing to say.
                if let Err(e) = &timer {
                    if esrch(e) {
                        return Err(io::Error::from_raw_os_error(libc::ESRCH));
                    }
                }
                let copies = self.stack_copy() > 0;
                let o = Owned::new(&s, copies)?;
                prepare(&o, own);
                match timer {
                    Ok(fd) if signal::bind_fd(fd.0, o.index) => {
                        o.buf().active.store(true, SeqCst);
                        perf::enable(&fd);
                        self.paths.signal += 1;
                        (Hook::Perf(fd), Some(o))
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
                        match posix_timer(clock, tid, &o, period_ns) {
                            Ok(t) => {
                                self.paths.posix += 1;
                                (Hook::Posix(PosixTimer(t)), Some(o))
                            }
                            Err(e) => {
                                o.retire(&mut Vec::new(), &mut 0, None);
                                return Err(e);
                            }
                        }
                    }
                }
            }
            SampleSource::Wall => {
                let copies = self.stack_copy() > 0;
                let o = Owned::new(&s, copies)?;
                prepare(&o, own);
                match posix_timer(libc::CLOCK_MONOTONIC, tid, &o, period_ns) {
                    Ok(t) => {
                        self.paths.posix += 1;
                        (Hook::Posix(PosixTimer(t)), Some(o))
                    }
                    Err(e) => {
                        o.retire(&mut Vec::new(), &mut 0, None);
                        return Err(e);
                    }
                }
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
            tries: 0,
        });
        Ok(())
    }

    fn scan(&mut self, me: u32) -> io::Result<bool> {
        let mut new = false;
        let mut now: HashSet<u32> = tids().into_iter().collect();
        // Threads that exited: stop their timers and free their buffers
        // (their samples stay). A listing of /proc/self/task can skip
        // live threads while others exit, so a thread missing from it is
        // gone only if the kernel says so.
        for t in &mut self.threads {
            if !matches!(t.hook, Hook::Done) && !now.contains(&t.tid) {
                if alive(t.tid) {
                    now.insert(t.tid);
                } else {
                    t.retire(self.cfi.as_mut());
                }
            }
        }
        self.known.retain(|t| now.contains(t) || alive(*t));
        let mut tids: Vec<u32> = now.into_iter().collect();
        tids.sort_unstable();
        for tid in tids {
            if tid == me || !self.known.insert(tid) {
                continue;
            }
            new = true;
            match self.register(tid, None) {
                Ok(()) => {}
                // A thread that exited between the scan and the open.
                Err(e) if esrch(&e) => {}
                Err(e) if self.threads.is_empty() => return Err(e),
                Err(_) => {}
            }
        }
        Ok(new)
    }

    /// Stack bounds of threads registered from outside: the handler
    /// noted `pthread_self()` and SP on the thread's first sample (a
    /// sample of the PC alone); look the stack up while the thread lives,
    /// and keep it only if it holds that SP. (A thread that exits between
    /// the liveness check and `pthread_getattr_np` leaves a descriptor
    /// glibc normally keeps in its stack cache; a thread that runs
    /// traced code tells its bounds itself and never takes this path.)
    fn resolve_bounds(&mut self) {
        for t in &mut self.threads {
            let Some(o) = &t.buf else { continue };
            let b = o.buf();
            if b.bounds().hi != 0 || t.tries >= 3 {
                continue;
            }
            let me = b.seen_self.load(Acquire);
            if me == 0 {
                continue;
            }
            t.tries += 1;
            let sp = b.seen_sp.load(Relaxed);
            if alive(t.tid) {
                if let Some(bounds) = stack_of(me as libc::pthread_t) {
                    if sp >= bounds.lo && sp < bounds.hi {
                        b.set_bounds(bounds);
                        continue;
                    }
                }
            }
            b.seen_self.store(0, Release);
        }
    }

    fn drain(&mut self) {
        let mut cfi = self.cfi.as_mut();
        for t in &mut self.threads {
            if let Some(o) = &t.buf {
                if !o.buf().ring {
                    o.buf().drain(&mut t.raw, cfi.as_deref_mut());
                }
            }
            if let Hook::Ring(r) = &mut t.hook {
                t.lost += r.drain(&mut t.ring_samples, cfi.as_deref_mut());
            }
        }
    }
}

/// Bounds and probe state of a thread registering itself.
fn prepare(o: &Owned, own: Option<Own>) {
    if let Some(own) = own {
        if let Some(b) = own.bounds {
            o.buf().set_bounds(b);
        }
        o.buf().set_state(own.state);
    }
}

fn posix_timer(
    clock: libc::clockid_t,
    tid: u32,
    o: &Owned,
    period_ns: u64,
) -> io::Result<libc::timer_t> {
    // SAFETY: timer_create/settime with a sigevent aimed at one thread.
    unsafe {
        let mut ev: libc::sigevent = std::mem::zeroed();
        ev.sigev_notify = libc::SIGEV_THREAD_ID;
        ev.sigev_signo = signal::signal_number();
        // The registry key, not a pointer: the handler checks it.
        ev.sigev_value = libc::sigval {
            sival_ptr: o.key as *mut libc::c_void,
        };
        ev.sigev_notify_thread_id = tid as i32;
        let mut t: libc::timer_t = std::mem::zeroed();
        if libc::timer_create(clock, &mut ev, &mut t) != 0 {
            return Err(io::Error::last_os_error());
        }
        o.buf().active.store(true, SeqCst);
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
        FORKED.store(false, SeqCst);
        refresh_ranges();
        let state = Arc::new(Mutex::new(State {
            sampling: sampling.clone(),
            threads: Vec::new(),
            known: HashSet::new(),
            warned_fallback: false,
            paths: Paths::default(),
            cfi: None,
        }));
        // The starting thread registers itself: exact bounds at once.
        {
            let mut st = state.lock();
            let tid = own_tid();
            st.known.insert(tid);
            // SAFETY: only the address of this thread's state is taken.
            let own = own_info(unsafe {
                fgtrace_core::probe::with_thread_state(|s| s as *mut ThreadState)
            });
            st.register(tid, Some(own))?;
        }
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
                    let mut s = st.lock();
                    s.resolve_bounds();
                    s.drain();
                }
            });
        let handle = match handle {
            Ok(h) => h,
            Err(e) => {
                finish(std::mem::replace(&mut *state.lock(), State::empty()), None);
                return Err(e);
            }
        };
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
        Some(std::mem::replace(&mut *st, State::empty()))
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

impl State {
    fn empty() -> State {
        State {
            sampling: super::Sampling::timer(1),
            threads: Vec::new(),
            known: HashSet::new(),
            warned_fallback: false,
            paths: Paths::default(),
            cfi: None,
        }
    }
}

fn own_info(state: *mut ThreadState) -> Own {
    Own {
        // SAFETY: pthread_self is the calling, live thread.
        bounds: stack_of(unsafe { libc::pthread_self() }),
        state,
    }
}

/// Set in a child forked while a session recorded (see
/// `forked_child`); cleared when a sampler starts.
static FORKED: AtomicBool = AtomicBool::new(false);

/// In a child forked while a session sampled: the sampler (its thread,
/// its locks, its timers) is the parent's; leave it alone.
fn forked() -> bool {
    FORKED.load(Relaxed)
}

/// Called by the atfork child handler (one atomic store).
pub(crate) fn forked_child() {
    FORKED.store(true, SeqCst);
}

/// The running sampler, for threads registering themselves.
static CURRENT: Mutex<Option<Arc<Mutex<State>>>> = Mutex::new(None);

/// Registers the calling thread with the running sampler, if any (from
/// the probe's once-per-thread slow path, with the thread's probe state),
/// so a thread is sampled from its first traced call rather than from the
/// next rescan, with its exact stack bounds and a pointer to its shadow
/// stack for the handler.
pub(crate) fn register_current_thread(state: *mut ThreadState) {
    if forked() {
        return;
    }
    let Some(sampler) = CURRENT.lock().clone() else {
        return;
    };
    let tid = own_tid();
    let own = own_info(state);
    let mut st = sampler.lock();
    if st.known.insert(tid) {
        let _ = st.register(tid, Some(own));
        drop(st);
        refresh_ranges();
    } else if let Some(t) = st.threads.iter().find(|t| t.tid == tid && t.buf.is_some()) {
        // Registered by a scan: now the thread tells its bounds itself.
        let o = t.buf.as_ref().expect("checked");
        prepare(o, Some(own));
    }
}

/// The calling thread exits (the probe's release hook, before its shadow
/// stack is freed): stop sampling it and free its buffer.
pub(crate) fn unregister_current_thread() {
    if forked() {
        return;
    }
    let Some(sampler) = CURRENT.lock().clone() else {
        return;
    };
    let tid = own_tid();
    let mut st = sampler.lock();
    let State { threads, cfi, .. } = &mut *st;
    if let Some(t) = threads
        .iter_mut()
        .find(|t| t.tid == tid && !matches!(t.hook, Hook::Done))
    {
        t.retire(cfi.as_mut());
    }
}

pub(super) fn buffered_threads() -> Vec<u32> {
    let Some(sampler) = CURRENT.lock().clone() else {
        return Vec::new();
    };
    let st = sampler.lock();
    st.threads
        .iter()
        .filter(|t| t.buf.is_some())
        .map(|t| t.tid)
        .collect()
}

impl Drop for Sampler {
    fn drop(&mut self) {
        if let Some(st) = self.shut() {
            finish(st, None);
        }
    }
}

fn finish(mut st: State, cal: Option<&Calibration>) -> Sampled {
    for t in &mut st.threads {
        t.retire(st.cfi.as_mut());
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
    // An `.eh_frame` chain (cleaned as above) where it goes further than
    // the frame-pointer walk: in code without frame pointers that walk skips
    // frames or stops. With them the walk is kept where it goes as far (the
    // signal handler's recorded cut indexes it) or further (a stack deeper
    // than the copy).
    let longer = |mut cfi: Vec<u64>, walk: &[u64]| {
        if let Some(k) = cfi.iter().skip(1).position(|&a| !in_text(a)) {
            cfi.truncate(k + 1);
        }
        (cfi.len() > walk.len()).then_some(cfi)
    };
    let mut threads: Vec<ThreadSamples> = Vec::new();
    // Samples with a stack copy, and those whose `.eh_frame` chain was kept.
    let (mut copied, mut unwound) = (0u64, 0u64);
    for t in st.threads {
        let Some(cal) = cal else { continue };
        let mut samples: Vec<(u64, u32, Option<u32>, Vec<u64>)> = t
            .raw
            .into_iter()
            .map(|s| {
                let (mut frames, mut cut) = (s.frames, s.cut);
                if let Some(cfi) = s.unwound {
                    copied += 1;
                    if let Some(cfi) = longer(cfi, &frames) {
                        // The handler's cut indexes its own walk: the
                        // join finds the cut in the new chain instead.
                        unwound += 1;
                        (frames, cut) = (cfi, None);
                    }
                }
                (cal.ns(s.ticks), s.shadow_depth, cut, frames)
            })
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
            if let Some(cfi) = s.unwound {
                copied += 1;
                if let Some(cfi) = longer(cfi, &frames) {
                    unwound += 1;
                    frames = cfi;
                }
            }
            let depth = fgtrace_trace::SHADOW_DEPTH_FROM_TRACE;
            (cal.mono_to_ns(s.time_mono_ns), depth, None, frames)
        }));
        // A thread id registered twice (an id reused by a new thread):
        // one entry, so the session keeps both parts.
        if let Some(same) = threads.iter_mut().find(|x| x.tid == t.tid) {
            same.samples.extend(samples);
            same.samples.sort_by_key(|s| s.0);
            same.lost += t.lost;
            continue;
        }
        samples.sort_by_key(|s| s.0);
        threads.push(ThreadSamples {
            tid: t.tid,
            name: t.name,
            samples,
            lost: t.lost,
        });
    }
    let backend = match backend {
        Some(b) if copied > 0 => Some(format!(
            "{b}; {unwound} of {copied} samples unwound through .eh_frame"
        )),
        b => b,
    };
    Sampled {
        threads,
        mappings,
        description,
        backend,
    }
}

#[cfg(test)]
mod tests;
