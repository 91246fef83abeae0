//! The running session as the hooks see it: its generation, filters and
//! limits, where its batches go, and its threads' buffers. Below the
//! collector (which creates and stops sessions) and the recorder (the core's
//! hooks, which look sessions up by generation).

use crate::buffer::{CountTable, Outlet, ThreadBuf};
use crate::config::Filters;
use crate::thread;
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::Arc;

/// What the hooks need to know about the running session.
pub(crate) struct Active {
    pub gen: u32,
    pub filters: Filters,
    pub has_graph: bool,
    pub flight: bool,
    pub capacity: usize,
    pub stack_depth: u32,
    pub max_depth: u32,
    pub threshold_ticks: u64,
    /// Automatic exclusion of tiny functions: each thread gets a count-only
    /// table at join.
    pub auto_exclude: bool,
    /// Stacks are sampled too: threads register with the sampler on first use.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub sampling: bool,
    /// A per-call hardware counter each thread opens on itself at join.
    pub counter: Option<crate::pmu::Counter>,
    /// Off-CPU time is recorded: threads open their switch ring on first use.
    #[cfg(target_os = "linux")]
    pub off_cpu: Option<Arc<crate::offcpu::Recorder>>,
    pub outlet: Arc<Outlet>,
    /// The threads' buffers; `None` once the session is stopping.
    pub(crate) threads: Mutex<Option<Vec<Arc<ThreadBuf>>>>,
    /// What a snapshot of the running session needs (`crate::dump`).
    pub(crate) dump: DumpInfo,
    /// Dumps of a running stream-mode session, asked of its collector.
    pub(crate) dumps: Dumps,
}

/// Where a dump of a running stream-mode session is answered.
pub(crate) type DumpReply = crossbeam_channel::Sender<Result<fgtrace_trace::Trace, String>>;

/// Requests for dumps of a running stream-mode session: only the collector
/// holds what was gathered, so it answers them between batches.
pub(crate) struct Dumps {
    pub tx: crossbeam_channel::Sender<DumpReply>,
    pub rx: crossbeam_channel::Receiver<DumpReply>,
}

impl Default for Dumps {
    fn default() -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        Dumps { tx, rx }
    }
}

/// What a snapshot of a running session (a flight-recorder dump on demand
/// or on panic) needs to build a [`Trace`](fgtrace_trace::Trace) without stopping it.
pub(crate) struct DumpInfo {
    pub cal: fgtrace_trace::clock::Calibration,
    /// Calls kept per thread (flight recorder).
    pub keep: usize,
    pub mode: fgtrace_trace::RecordMode,
    /// `Config::describe()`.
    pub filters: String,
    /// `Config::dump_on_panic`.
    pub dump_on_panic: Option<std::path::PathBuf>,
}

/// Sessions whose state is still allocated (for tests: a stopped session is
/// freed even while threads that recorded into it idle).
pub(crate) static LIVE_SESSIONS: AtomicUsize = AtomicUsize::new(0);

impl Drop for Active {
    fn drop(&mut self) {
        LIVE_SESSIONS.fetch_sub(1, Relaxed);
    }
}

impl Active {
    /// A buffer for the calling thread (slow path, once per thread per
    /// session); `None` once the session is stopping.
    pub fn register_thread(&self) -> Option<Arc<ThreadBuf>> {
        let (tid, name) = (thread::os_tid(), thread::name());
        // Mapped before the lock is taken (a system call).
        let table = self.auto_exclude.then(CountTable::new).flatten();
        let mut threads = self.threads.lock();
        let threads = threads.as_mut()?;
        let b = Arc::new(
            ThreadBuf::new(
                threads.len() as u32,
                tid,
                name,
                self.capacity,
                Arc::downgrade(&self.outlet),
            )
            .with_count_table(table),
        );
        threads.push(b.clone());
        Some(b)
    }

    /// Closes every thread's buffer (no more batches) and returns them; no
    /// thread registers after this.
    pub(crate) fn close(&self) -> Vec<Arc<ThreadBuf>> {
        let threads = self.threads.lock().take().unwrap_or_default();
        for t in &threads {
            t.close();
        }
        threads
    }
}

pub(crate) static ACTIVE: RwLock<Option<Arc<Active>>> = RwLock::new(None);

/// Set in a child process forked while a session recorded (the atfork child
/// handler): that session belongs to the parent, and the child records
/// nothing into it. Cleared when the child starts a session of its own.
pub(crate) static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Registers (once) the handler that runs in the child after `fork()`.
pub(crate) fn watch_forks() {
    #[cfg(unix)]
    static ONCE: std::sync::Once = std::sync::Once::new();
    #[cfg(unix)]
    ONCE.call_once(|| {
        // SAFETY: registers an async-signal-safe child handler.
        unsafe { libc::pthread_atfork(None, None, Some(in_forked_child)) };
    });
}

/// The child of a `fork()`: only the forking thread exists, none of
/// fgtrace's threads. Recording stops (one atomic store each: nothing here
/// may take a lock another thread held at the fork).
#[cfg(unix)]
extern "C" fn in_forked_child() {
    if fgtrace_core::control_word::session_is_on() || ACTIVE.try_read().is_none_or(|a| a.is_some())
    {
        FORKED.store(true, SeqCst);
        fgtrace_core::counted::session_off();
        #[cfg(target_os = "linux")]
        crate::sampler::forked_child();
    }
}
/// The session of generation `gen`, if it is still the active one.
pub(crate) fn active(gen: u32) -> Option<Arc<Active>> {
    ACTIVE.read().as_ref().filter(|a| a.gen == gen).cloned()
}

/// Sessions that run in the background (the control endpoint's always-on
/// flight recorder, the whole-program recording of `FGTRACE_RECORD`)
/// register how to stop them here, so that a session the program starts
/// itself takes their place instead of failing (`Session::start` calls
/// [`yield_background`] first).
static BACKGROUND_YIELD: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Registers `f` to run when the program starts a session of its own.
pub(crate) fn on_yield(f: fn()) {
    BACKGROUND_YIELD.lock().push(f);
}

/// Stops the background sessions, if any run.
pub(crate) fn yield_background() {
    let fs = BACKGROUND_YIELD.lock().clone();
    for f in fs {
        f();
    }
}

/// Sessions above the collector that must know when a session of the
/// program's own ended (the whole-program recording of `FGTRACE_RECORD`
/// writes its trace and records on): `Session::stop` passes the trace,
/// a dropped session `None`.
static SESSION_END: Mutex<Vec<SessionEnd>> = Mutex::new(Vec::new());

/// What runs after a session ends: its trace, or `None` if it was dropped.
type SessionEnd = fn(Option<&fgtrace_trace::Trace>);

/// Registers `f` to run after every session stops or is dropped.
pub(crate) fn on_session_end(f: SessionEnd) {
    SESSION_END.lock().push(f);
}

/// Runs what [`on_session_end`] registered.
pub(crate) fn session_ended(trace: Option<&fgtrace_trace::Trace>) {
    let fs = SESSION_END.lock().clone();
    for f in fs {
        f(trace);
    }
}
