//! The runtime's side of the recording core: the [`Hooks`] the core calls on
//! its cold paths (a thread joining a session, a site's filter decision, a
//! full buffer, a thread exiting), and thread-local captures for
//! `fgtrace::testing`, which swap a private [`ThreadState`] in and out.
//!
//! Every hook runs with the thread marked busy by the core, so it may
//! allocate, lock and call traced code (a traced global allocator) without
//! being recorded or recursing.

use crate::active;
use crate::buffer::{self, Batch, Outlet, RawCall, Swap, ThreadBuf};
use fgtrace_core::probe::CounterReader;
use fgtrace_core::probe::{self as core_probe, Hooks, ShadowFrame, ThreadState, NON_CALLS_UNREAD};
use fgtrace_core::record::AllocCounts;
use fgtrace_core::site::{Decision, Site};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::Arc;

static HOOKS: Hooks = Hooks {
    join,
    decide,
    handoff,
    release,
    uncounted,
};

/// Installs the hooks (idempotent; before any session or capture starts).
pub(crate) fn install() {
    core_probe::install_hooks(&HOOKS);
}

/// Shadow stacks alive in the process (for tests: they are freed when their
/// thread exits).
pub(crate) static LIVE_STACKS: AtomicUsize = AtomicUsize::new(0);

fn alloc_frames(n: u32) -> *mut ShadowFrame {
    LIVE_STACKS.fetch_add(1, Relaxed);
    Box::into_raw(vec![ShadowFrame::ZERO; n as usize].into_boxed_slice()) as *mut ShadowFrame
}

/// # Safety
/// `frames` came from `alloc_frames(n)`.
unsafe fn free_frames(frames: *mut ShadowFrame, n: u32) {
    if !frames.is_null() {
        LIVE_STACKS.fetch_sub(1, Relaxed);
        drop(Box::from_raw(ptr::slice_from_raw_parts_mut(
            frames, n as usize,
        )));
    }
}

/// Allocation figures beside a shadow stack of `n` frames, when the counting
/// allocator is installed (`fgtrace::alloc::Counting`); null otherwise.
fn alloc_counts(n: u32) -> *mut AllocCounts {
    if !fgtrace_core::alloc::installed() {
        return ptr::null_mut();
    }
    Box::into_raw(vec![AllocCounts::ZERO; n as usize].into_boxed_slice()) as *mut AllocCounts
}

/// # Safety
/// `a` came from `alloc_counts(n)`.
unsafe fn free_alloc_counts(a: *mut AllocCounts, n: u32) {
    if !a.is_null() {
        drop(Box::from_raw(ptr::slice_from_raw_parts_mut(a, n as usize)));
    }
}

/// The calling thread's own per-call counter for sessions with
/// `Config::counters`: opened at its first join into such a session, kept
/// for the thread's life (captures and later sessions reuse it).
struct SessionCounter {
    which: crate::pmu::Counter,
    _open: crate::pmu::SelfCounter,
    core: Box<CounterReader>,
}

impl Drop for SessionCounter {
    fn drop(&mut self) {
        // The thread is exiting: no probe of it may read the counter after
        // its fd closes.
        let me: *const CounterReader = &*self.core;
        // SAFETY: this thread's state, outside any probe (TLS teardown).
        unsafe {
            core_probe::with_thread_state(|st| {
                if st.counter == me {
                    st.counter = ptr::null();
                    st.gen = core_probe::GEN_DEAD;
                }
            })
        };
    }
}

std::thread_local! {
    static SESSION_COUNTER: std::cell::RefCell<Option<SessionCounter>> =
        const { std::cell::RefCell::new(None) };
}

/// [`crate::pmu::read_self`] as the core's [`CounterReader`] calls it.
unsafe fn read_session_counter(c: &CounterReader) -> u64 {
    crate::pmu::read_self(c.page, c.fd)
}

unsafe fn uncounted_plain(_: &CounterReader, f: &mut dyn FnMut()) {
    f()
}

/// This thread's counter `which` for the core, opened if needed; null when
/// it cannot be opened here (the thread's calls then carry no delta).
fn session_counter(which: crate::pmu::Counter) -> *const CounterReader {
    SESSION_COUNTER
        .try_with(|sc| {
            let mut sc = sc.borrow_mut();
            if sc.as_ref().is_none_or(|c| c.which != which) {
                *sc = crate::pmu::open_self(which)
                    .ok()
                    .map(|open| SessionCounter {
                        which,
                        core: Box::new(CounterReader {
                            read: read_session_counter,
                            page: open.page as *const u8,
                            fd: open.fd,
                            uncounted: uncounted_plain,
                        }),
                        _open: open,
                    });
            }
            sc.as_ref()
                .map_or(ptr::null(), |c| &*c.core as *const CounterReader)
        })
        .unwrap_or(ptr::null())
}

/// Joins this thread to the session `gen`: a buffer, the session's limits,
/// and a shadow stack that keeps any frames still open from before.
fn join(st: &mut ThreadState, gen: u32) -> bool {
    let Some(active) = active::active(gen) else {
        return false;
    };
    let Some(shared) = active.register_thread() else {
        return false; // the session is stopping
    };
    drop_buffer(st);
    let cap = active.stack_depth;
    if st.frames.is_null() || st.stack_cap < cap {
        let new = alloc_frames(cap);
        let new_allocs = alloc_counts(cap);
        if !st.frames.is_null() {
            // SAFETY: both hold at least `depth.min(cap)` frames.
            unsafe {
                ptr::copy_nonoverlapping(st.frames, new, st.depth.min(cap) as usize);
                free_frames(st.frames, st.stack_cap);
                if !st.allocs.is_null() && !new_allocs.is_null() {
                    let n = st.depth.min(cap) as usize;
                    ptr::copy_nonoverlapping(st.allocs, new_allocs, n);
                }
                free_alloc_counts(st.allocs, st.stack_cap);
            }
        }
        st.frames = new;
        st.allocs = new_allocs;
        st.stack_cap = cap;
    } else if st.allocs.is_null() {
        st.allocs = alloc_counts(st.stack_cap);
    }
    st.depth = st.depth.min(st.stack_cap);
    let (buf, len) = shared.storage_ptr();
    st.buf = buf;
    st.count = 0;
    if active.flight {
        st.mask = len - 1;
        st.limit = usize::MAX;
    } else {
        st.mask = usize::MAX;
        st.limit = len;
    }
    st.max_depth = active.max_depth;
    st.threshold = active.threshold_ticks;
    // With a counter, the core sends every call through its counted path.
    st.counter = active.counter.map_or(ptr::null(), session_counter);
    st.has_graph = active.has_graph;
    // Auto-exclude: the core sends every call through its auto path, which
    // reads this thread's table (alive as long as `shared`, held in `owner`).
    st.count_only = shared
        .count_only
        .as_ref()
        .map_or(ptr::null(), |t| t.as_ptr());
    st.published = &shared.published;
    st.non_calls = 0;
    st.non_calls_out = &shared.non_calls;
    st.overruns = &shared.overruns;
    st.dropped = &shared.nested_dropped;
    st.owner = Arc::into_raw(shared) as *const ();
    #[cfg(target_os = "linux")]
    if active.sampling {
        crate::sampler::register_current_thread(st as *mut ThreadState);
    }
    #[cfg(target_os = "linux")]
    if let Some(o) = &active.off_cpu {
        o.register_current_thread(); // off-CPU time: this thread's switch ring
    }
    true
}

fn decide(site: &'static Site, gen: u32) -> Option<Decision> {
    let active = active::active(gen)?;
    Some(active.filters.decide(site.name, site.module_path))
}

/// Drops the thread's reference to its session buffer (the records stay in
/// the session's `ThreadBuf` for the collector).
fn drop_buffer(st: &mut ThreadState) {
    if !st.capture {
        st.count_only = ptr::null(); // it goes with the buffer
    }
    if !st.owner.is_null() && !st.capture {
        // SAFETY: made by Arc::into_raw in `join`.
        unsafe { drop(Arc::from_raw(st.owner as *const ThreadBuf)) };
    }
    st.owner = ptr::null();
    st.buf = ptr::null_mut();
    st.published = ptr::null();
    st.non_calls_out = &NON_CALLS_UNREAD;
    st.overruns = ptr::null();
    st.dropped = ptr::null();
    st.count = 0;
    st.limit = 0;
}

/// The thread exits: its buffer reference and its shadow stack go.
fn release(st: &mut ThreadState) {
    if st.capture {
        return; // a capture's buffers belong to the capture
    }
    // Sampling of this thread ends before its shadow stack goes (the
    // sampler's handler reads the depth through a pointer to `st`).
    #[cfg(target_os = "linux")]
    crate::sampler::unregister_current_thread();
    drop_buffer(st);
    st.counter = ptr::null();
    // SAFETY: made by `alloc_frames(stack_cap)` and `alloc_counts(stack_cap)`.
    unsafe {
        free_frames(st.frames, st.stack_cap);
        free_alloc_counts(st.allocs, st.stack_cap);
    }
    st.frames = ptr::null_mut();
    st.allocs = ptr::null_mut();
    st.stack_cap = 0;
    st.depth = 0;
}

/// Runs `f` outside the counts of the capture's counter, if it has one.
fn uncounted(f: &mut dyn FnMut()) {
    #[cfg(feature = "testing")]
    {
        let counter = EXTRA.with(|x| {
            // SAFETY: this thread's extras; read only.
            unsafe {
                (*x.get())
                    .counter
                    .as_deref()
                    .map(|c| c as *const CounterReader)
            }
        });
        if let Some(c) = counter {
            // SAFETY: the counter lives as long as the capture in place.
            return unsafe { ((*c).uncounted)(&*c, f) };
        }
    }
    f()
}

/// A full buffer: hand it to the collector and continue in a fresh one. If
/// the collector has fallen behind, drop the batch, count it, and leave a
/// `LOST` marker in its place. After the session closed the buffer, stop.
fn handoff(st: &mut ThreadState) {
    if st.capture {
        #[cfg(feature = "testing")]
        capture_handoff(st);
        return;
    }
    if active::FORKED.load(Relaxed) {
        // A forked child: the session is the parent's and nobody collects
        // here. Stop recording on this thread (never wait for a collector).
        st.buf = ptr::null_mut();
        return;
    }
    // SAFETY: set in `join`, alive while `buf` is.
    let shared = unsafe { &*(st.owner as *const ThreadBuf) };
    let Some(outlet) = shared.outlet.upgrade() else {
        st.buf = ptr::null_mut();
        return;
    };
    let len = st.count;
    let fresh = outlet
        .recycle_rx
        .try_recv()
        .unwrap_or_else(|_| buffer::new_storage(len));
    let lost = shared.locked(|| {
        // SAFETY: under the flag.
        match unsafe { shared.swap_if_open(fresh) } {
            Swap::Closed(_) => None,
            Swap::Full(full) => Some(send(&outlet, shared, full, len)),
        }
    });
    let Some(lost) = lost else {
        // Closed: the session kept what was published; calls that end
        // from here on end after the session did.
        st.buf = ptr::null_mut();
        return;
    };
    let (buf, _) = shared.storage_ptr();
    st.buf = buf;
    st.count = 0;
    if lost > 0 {
        let depth = st.depth.min(buffer::MAX_DEPTH);
        let marker = RawCall::pack(
            fgtrace_core::clock::ticks(),
            depth,
            lost,
            0,
            false,
            buffer::kind::LOST,
        );
        // SAFETY: the fresh storage has room; nothing is published yet.
        unsafe { buf.write(marker) };
        st.count = 1;
        shared.published.store(1, Release);
    }
}

/// Sends a full batch (under the buffer's flag, so that stop, which closes
/// every buffer before it drains the channel, cannot miss it). Returns the
/// number of calls lost when the channel was full.
fn send(outlet: &Outlet, shared: &ThreadBuf, full: buffer::Storage, len: usize) -> u64 {
    let mut batch = Batch {
        thread: shared.index,
        storage: full,
        len,
    };
    loop {
        match outlet.batches.try_send(batch) {
            Ok(()) => {
                shared.sent.fetch_add(1, Relaxed);
                return 0;
            }
            Err(crossbeam_channel::TrySendError::Full(b)) if outlet.block_when_full => {
                batch = b;
                std::thread::yield_now();
            }
            Err(crossbeam_channel::TrySendError::Full(b))
            | Err(crossbeam_channel::TrySendError::Disconnected(b)) => {
                // A batch that starts with the marker of an earlier drop
                // carries that count forward, so one marker covers the run.
                // SAFETY: slot 0 of a full batch was written.
                let first = unsafe { b.storage[0].assume_init() };
                let carried = if first.kind() == buffer::kind::LOST && !first.is_ext() {
                    first.dur()
                } else {
                    0
                };
                // Extension records (allocation figures) are not calls.
                // SAFETY: the first `len` slots of a full batch were written.
                let exts = b.storage[..b.len]
                    .iter()
                    .filter(|r| unsafe { r.assume_init() }.is_ext())
                    .count() as u64;
                let calls = b.len as u64 - (carried > 0) as u64 - exts;
                shared.dropped.fetch_add(calls, Relaxed);
                let _ = outlet.recycle_tx.try_send(b.storage);
                return calls + carried;
            }
        }
    }
}

// ---------------------------------------------------------------- captures

#[cfg(feature = "testing")]
pub use captures::*;

/// Thread-local captures for `fgtrace::testing`.
#[cfg(feature = "testing")]
mod captures {
    use super::*;
    use crate::thread;
    use fgtrace_core::control_word;
    use fgtrace_core::probe::GEN_CAPTURE;

    /// Capture buffers: large enough that most captures never hand off.
    const CAPTURE_BUFFER: usize = 1 << 14;

    /// The per-thread state of a running capture that the hot path does not need.
    pub(super) struct CaptureExtra {
        /// The thread's counter (see `testing::counters`), boxed so the core
        /// can point at it; `None`: no counters.
        pub(super) counter: Option<Box<CounterReader>>,
        /// Counter deltas, parallel to the record buffer (`CAPTURE_BUFFER` slots).
        side: Option<Box<[u64]>>,
        /// Full record buffers handed off so far, oldest first.
        batches: Vec<RawCall>,
        /// Their counter deltas.
        side_batches: Vec<u64>,
        /// The capture's buffer.
        shared: Option<Arc<ThreadBuf>>,
    }

    impl CaptureExtra {
        const EMPTY: CaptureExtra = CaptureExtra {
            counter: None,
            side: None,
            batches: Vec::new(),
            side_batches: Vec::new(),
            shared: None,
        };
    }

    thread_local! {
        pub(super) static EXTRA: std::cell::UnsafeCell<CaptureExtra> =
            const { std::cell::UnsafeCell::new(CaptureExtra::EMPTY) };
    }

    /// A full capture buffer: its records (and counter deltas) move to the
    /// thread's batches, and recording continues at the start of the buffer.
    pub(super) fn capture_handoff(st: &mut ThreadState) {
        uncounted(&mut || {
            EXTRA.with(|x| {
                // SAFETY: this thread's capture extras; no probe runs here (busy).
                let x = unsafe { &mut *x.get() };
                if let Some(side) = &x.side {
                    x.side_batches.extend_from_slice(&side[..st.count]);
                }
                if let Some(shared) = &x.shared {
                    x.batches.extend(shared.take_published());
                }
            });
            st.count = 0;
        })
    }

    /// A thread's capture-related state, parked while another one is in place.
    struct Parked {
        st: ThreadState,
        extra: CaptureExtra,
    }

    /// The thread's state from before a capture, restored when it ends.
    pub struct SavedState(Parked);

    /// A capture taken off its thread between polls of a captured future.
    pub struct Suspended(Option<Parked>);

    // SAFETY: a suspended capture is in place on no thread: its buffers (owned
    // through raw pointers) are reachable only through this value, and the
    // counter it names is replaced by the resuming thread's own.
    unsafe impl Send for Suspended {}

    impl Suspended {
        /// A placeholder that holds no capture.
        pub fn empty() -> Suspended {
            Suspended(None)
        }
    }

    /// A capture's counter source: the thread's perf event page and fd, and how
    /// to read it.
    #[derive(Clone, Copy)]
    pub struct CounterSrc {
        pub page: *const u8,
        pub fd: i32,
        pub read: unsafe fn(&CounterReader) -> u64,
        pub uncounted: unsafe fn(&CounterReader, &mut dyn FnMut()),
    }

    /// What a capture recorded on one thread.
    pub struct CaptureOut {
        /// Oldest first (exit order).
        pub records: Vec<RawCall>,
        pub overruns: u64,
        /// Counter deltas parallel to `records` (meaningless for future records).
        pub counters: Option<Vec<u64>>,
    }

    /// Puts `p` in place on this thread and returns what was there.
    fn swap_in(p: Parked) -> Parked {
        EXTRA.with(|x| {
            // SAFETY: this thread's state; no probe runs while we swap.
            unsafe {
                core_probe::with_thread_state(|st| Parked {
                    st: std::mem::replace(st, p.st),
                    extra: std::mem::replace(&mut *x.get(), p.extra),
                })
            }
        })
    }

    /// Switches the calling thread to record into a private buffer, whatever a
    /// session is doing: used by `fgtrace::testing::capture`. Nests. With
    /// `counters`, every call also gets the counter's entry-to-exit delta.
    pub fn capture_begin(stack_depth: u32, counters: Option<CounterSrc>) -> SavedState {
        install();
        assert!(
            control_word::capture_begin(),
            "more than {} fgtrace captures at once",
            control_word::MAX_CAPTURES
        );
        let mut st = ThreadState::EMPTY;
        st.frames = alloc_frames(stack_depth);
        st.allocs = alloc_counts(stack_depth);
        st.stack_cap = stack_depth;
        st.max_depth = u32::MAX;
        let shared = Arc::new(ThreadBuf::new(
            0,
            thread::os_tid(),
            thread::name(),
            CAPTURE_BUFFER,
            std::sync::Weak::new(),
        ));
        let (buf, len) = shared.storage_ptr();
        st.buf = buf;
        st.mask = usize::MAX;
        st.limit = len.min(CAPTURE_BUFFER);
        st.published = &shared.published;
        st.non_calls = 0;
        st.non_calls_out = &shared.non_calls;
        st.overruns = &shared.overruns;
        st.dropped = &shared.nested_dropped;
        st.owner = Arc::as_ptr(&shared) as *const ();
        st.gen = GEN_CAPTURE;
        st.capture = true;
        let mut extra = CaptureExtra::EMPTY;
        extra.shared = Some(shared);
        if let Some(c) = counters {
            let counter = Box::new(CounterReader {
                read: c.read,
                page: c.page,
                fd: c.fd,
                uncounted: c.uncounted,
            });
            st.counter = &*counter;
            extra.counter = Some(counter);
            let mut side = vec![0u64; CAPTURE_BUFFER].into_boxed_slice();
            st.side = side.as_mut_ptr();
            extra.side = Some(side);
            // Fault the buffers in now: a page fault mid-call adds to the count
            // of the calls open at the time (and whether one happens depends on
            // what the allocator had at hand).
            for i in (0..CAPTURE_BUFFER).step_by(256) {
                // SAFETY: the buffer has CAPTURE_BUFFER slots; records are plain
                // data, and these are written again before they are read.
                unsafe { buf.add(i).write(RawCall(0, 0)) };
            }
        }
        SavedState(swap_in(Parked { st, extra }))
    }

    /// Takes the running capture off this thread (restoring the state from before
    /// it), to be resumed later, possibly on another thread.
    pub fn capture_suspend(saved: SavedState) -> Suspended {
        Suspended(Some(swap_in(saved.0)))
    }

    /// Puts a suspended capture back in place on the calling thread; `counters`
    /// must be this thread's (a counter counts only its own thread).
    pub fn capture_resume(mut s: Suspended, counters: Option<CounterSrc>) -> SavedState {
        let mut p = s.0.take().expect("a suspended capture");
        if let Some(counter) = &mut p.extra.counter {
            match counters {
                Some(c) => {
                    counter.page = c.page;
                    counter.fd = c.fd;
                    counter.read = c.read;
                    counter.uncounted = c.uncounted;
                }
                None => {
                    p.st.counter = ptr::null();
                }
            }
        }
        SavedState(swap_in(p))
    }

    /// Ends the capture on this thread: returns its records and restores the
    /// state from before `capture_begin`.
    pub fn capture_end(saved: SavedState) -> CaptureOut {
        finish(swap_in(saved.0))
    }

    impl Drop for Suspended {
        fn drop(&mut self) {
            if let Some(p) = self.0.take() {
                finish(p);
            }
        }
    }

    /// Frees a capture's buffers and returns what it recorded.
    fn finish(mut p: Parked) -> CaptureOut {
        let shared = p.extra.shared.take().expect("a capture has a buffer");
        let mut records = std::mem::take(&mut p.extra.batches);
        records.extend(shared.take_published());
        let counters = p.extra.side.take().map(|side| {
            let mut v = std::mem::take(&mut p.extra.side_batches);
            v.extend_from_slice(&side[..p.st.count.min(side.len())]);
            v
        });
        // SAFETY: made by `alloc_frames(stack_cap)` and `alloc_counts` in `capture_begin`.
        unsafe {
            free_frames(p.st.frames, p.st.stack_cap);
            free_alloc_counts(p.st.allocs, p.st.stack_cap);
        }
        let overruns = shared.overruns.load(Relaxed) as u64;
        control_word::capture_end();
        CaptureOut {
            records,
            overruns,
            counters,
        }
    }
}
