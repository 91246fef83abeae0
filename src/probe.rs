//! The hot path: per-site descriptors, entry/exit guards and the per-thread
//! shadow stack.
//!
//! Cost model, when recording: entry is one relaxed load of the control word,
//! one relaxed load of the site's cached filter decision, a thread-local
//! access, a shadow-stack push and one clock read; exit is one clock read, a
//! pop, one 16-byte record store and one release store of the record count.
//! No allocation, no lock, no syscall: everything that needs one (first call of
//! a thread or site in a session, handing a full batch to the collector) is in
//! `#[cold]` functions that run once per thread, per site or per batch.
//! When recording is off, entry is one relaxed load and a branch, and the
//! guard's drop is a branch on a zero slot.

use crate::buffer::{self, kind, RawCall, ThreadBuf, MAX_SITES};
use crate::clock::ticks;
use crate::collector::{self, Active};
use crate::config::Decision;
use std::cell::{Cell, UnsafeCell};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::task::{Context, Poll};

/// `generation << 2 | session recording << 1 | anything on`. The generation
/// changes with every session, so per-site and per-thread caches made for an
/// earlier session are redone. "Anything on" is also set while a thread-local
/// capture (`fgtrace::testing`) runs.
pub(crate) static CONTROL: AtomicU32 = AtomicU32::new(0);
pub(crate) const ON: u32 = 1;
pub(crate) const SESSION_ON: u32 = 2;
/// Thread-local captures running.
static CAPTURES: AtomicU32 = AtomicU32::new(0);
/// `ThreadState::gen` of a capturing thread: never a session generation.
const CAPTURE_GEN: u32 = u32::MAX - 1;

/// Clears the session bit (and the "on" bit unless a capture runs).
pub(crate) fn control_session_off() {
    let _ = CONTROL.fetch_update(Release, Relaxed, |c| {
        let on = (CAPTURES.load(Relaxed) > 0) as u32;
        Some((c & !(SESSION_ON | ON)) | on)
    });
}

/// A static descriptor of one instrumented function, made by `#[traced]`.
pub struct Site {
    pub name: &'static str,
    pub module_path: &'static str,
    pub file: &'static str,
    pub line: u32,
    pub is_async: bool,
    /// `generation << 32 | (site id + 1) << 8 | Decision`; 0 = never seen.
    cache: AtomicU64,
}

impl Site {
    pub const fn new(
        name: &'static str,
        module_path: &'static str,
        file: &'static str,
        line: u32,
        is_async: bool,
    ) -> Site {
        Site {
            name,
            module_path,
            file,
            line,
            is_async,
            cache: AtomicU64::new(0),
        }
    }

    /// The process-wide id of this site, assigned on first use.
    pub(crate) fn id(&'static self) -> u32 {
        let c = self.cache.load(Relaxed);
        let id = ((c >> 8) & 0xff_ffff) as u32;
        if id != 0 {
            return id - 1;
        }
        collector::register_site(self)
    }

    pub(crate) fn set_cache(&self, gen: u32, id: u32, d: Decision) {
        self.cache.store(
            (gen as u64) << 32 | ((id as u64 + 1) << 8) | d as u64,
            Relaxed,
        );
    }

    pub(crate) fn set_id(&self, id: u32) {
        self.cache.store((id as u64 + 1) << 8, Relaxed);
    }
}

/// Kind of a shadow-stack frame.
const F_RECORD: u8 = 0;
const F_POLL: u8 = 1;
const F_HIDE: u8 = 2;
const F_GRAPH: u8 = 3;

/// One open call on the shadow stack.
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Frame {
    pub start: u64,
    /// Stack pointer at entry: the sampler compares sampled frame addresses with it.
    pub sp: usize,
    pub site: u32,
    pub kind: u8,
    /// Counter reading at entry; written only by captures with counters.
    pub ctr: u64,
}

impl Frame {
    const ZERO: Frame = Frame {
        start: 0,
        sp: 0,
        site: 0,
        kind: 0,
        ctr: 0,
    };
}

/// Everything a thread needs on the hot path, in one const-initialised
/// thread-local (no lazy-init check, no destructor registration per access).
pub(crate) struct ThreadState {
    gen: u32,
    /// Recording into a thread-local capture rather than a session.
    capture: bool,
    /// Frames on the shadow stack.
    pub depth: u32,
    hide: u32,
    graph: u32,
    stack_cap: u32,
    max_depth: u32,
    has_graph: bool,
    pub frames: *mut Frame,
    threshold: u64,
    buf: *mut RawCall,
    /// Records written to `buf` (stream) or ever (flight recorder).
    count: u64,
    /// Index mask into `buf`: all ones in stream mode, capacity - 1 in a flight ring.
    mask: u64,
    /// `count` at which the buffer is handed off (never, in flight mode).
    limit: u64,
    shared: *const ThreadBuf,
    active: *const Active,
}

impl ThreadState {
    const EMPTY: ThreadState = ThreadState {
        gen: 0,
        capture: false,
        depth: 0,
        hide: 0,
        graph: 0,
        stack_cap: 0,
        max_depth: 0,
        has_graph: false,
        frames: ptr::null_mut(),
        threshold: 0,
        buf: ptr::null_mut(),
        count: 0,
        mask: 0,
        limit: 0,
        shared: ptr::null(),
        active: ptr::null(),
    };
}

thread_local! {
    pub(crate) static STATE: UnsafeCell<ThreadState> = const { UnsafeCell::new(ThreadState::EMPTY) };
    /// Releases the thread's buffers when it exits (registered on first use).
    static EXIT: Cell<Option<ExitHook>> = const { Cell::new(None) };
}

struct ExitHook;

impl Drop for ExitHook {
    fn drop(&mut self) {
        let _ = STATE.try_with(|c| {
            // SAFETY: the owning thread, no probe is running during TLS teardown.
            let st = unsafe { &mut *c.get() };
            release(st);
            // Further probes on this thread (from other TLS destructors) stay off.
            st.gen = u32::MAX;
        });
    }
}

/// Drops the thread's references to its session buffers; the records stay
/// in the session's `ThreadBuf` for the collector.
fn release(st: &mut ThreadState) {
    if !st.shared.is_null() {
        // SAFETY: created by Arc::into_raw in `sync_thread`.
        unsafe { drop(Arc::from_raw(st.shared)) };
        st.shared = ptr::null();
    }
    if !st.active.is_null() {
        unsafe { drop(Arc::from_raw(st.active)) };
        st.active = ptr::null();
    }
    st.buf = ptr::null_mut();
    st.count = 0;
    st.limit = 0;
}

/// Records the exit of a call when dropped (also during unwinding, which
/// marks the call as unwound).
#[must_use = "the call ends when the guard is dropped"]
pub struct Guard {
    /// Shadow-stack slot + 1, or 0 when nothing was pushed.
    slot: u32,
    _not_send: PhantomData<*const ()>,
}

impl Guard {
    const OFF: Guard = Guard {
        slot: 0,
        _not_send: PhantomData,
    };
}

impl Drop for Guard {
    #[inline(always)]
    fn drop(&mut self) {
        if self.slot != 0 {
            exit(self.slot);
        }
    }
}

/// Entry probe: what `#[traced]` calls first in every instrumented fn.
#[inline(always)]
pub fn enter(site: &'static Site) -> Guard {
    let c = CONTROL.load(Relaxed);
    if c & ON == 0 {
        return Guard::OFF;
    }
    enter_on(site, c, F_RECORD)
}

#[inline(always)]
fn enter_on(site: &'static Site, c: u32, kind: u8) -> Guard {
    let cache = site.cache.load(Relaxed);
    let gen = c >> 2;
    STATE.with(|cell| {
        // SAFETY: only this thread touches its state; a signal handler only reads it.
        let st = unsafe { &mut *cell.get() };
        if c & SESSION_ON != 0 && st.gen == gen && (cache >> 32) as u32 == gen {
            return push(st, cache, kind);
        }
        enter_other(st, site, c, kind)
    })
}

/// Everything but a recording session's steady state: a capturing thread, a
/// paused session while another thread captures, or a first call.
#[inline(never)]
fn enter_other(st: &mut ThreadState, site: &'static Site, c: u32, kind: u8) -> Guard {
    if st.capture {
        let id = capture_site_id(site, false);
        if id >= MAX_SITES {
            return Guard::OFF;
        }
        return capture_push(st, ((id as u64 + 1) << 8) | Decision::Record as u64, kind);
    }
    if c & SESSION_ON == 0 {
        return Guard::OFF;
    }
    enter_slow(st, site, c >> 2, kind)
}

#[inline(always)]
fn push(st: &mut ThreadState, cache: u64, mut kind: u8) -> Guard {
    if st.hide != 0 {
        return Guard::OFF;
    }
    match (cache & 0xff) as u8 {
        d if d == Decision::Record as u8 => {
            if st.has_graph && st.graph == 0 {
                return Guard::OFF;
            }
        }
        d if d == Decision::GraphRoot as u8 => kind = F_GRAPH,
        d if d == Decision::Hide as u8 => kind = F_HIDE,
        _ => return Guard::OFF,
    }
    let d = st.depth;
    if d >= st.max_depth {
        return Guard::OFF;
    }
    if d >= st.stack_cap {
        overrun(st);
        return Guard::OFF;
    }
    // SAFETY: d < stack_cap, the frames array has stack_cap entries.
    let f = unsafe { &mut *st.frames.add(d as usize) };
    f.site = ((cache >> 8) & 0xff_ffff) as u32 - 1;
    f.kind = kind;
    f.sp = stack_pointer();
    // The sampler's signal handler may read this frame as soon as `depth`
    // covers it: keep the compiler from sinking the stores below.
    std::sync::atomic::compiler_fence(Release);
    st.depth = d + 1;
    match kind {
        F_HIDE => st.hide += 1,
        F_GRAPH => st.graph += 1,
        _ => {}
    }
    // The clock is read last on entry and first on exit, so the probe's own
    // bookkeeping is outside the measured duration.
    f.start = ticks();
    Guard {
        slot: d + 1,
        _not_send: PhantomData,
    }
}

#[inline(always)]
fn stack_pointer() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let sp: usize;
        // SAFETY: reads rsp, no memory access.
        unsafe {
            core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
        };
        sp
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let marker = 0u8;
        ptr::addr_of!(marker) as usize
    }
}

#[cold]
#[inline(never)]
fn overrun(st: &mut ThreadState) {
    if let Some(s) = unsafe { st.shared.as_ref() } {
        s.overruns.fetch_add(1, Relaxed);
    }
}

/// First call of a site or thread in this session: assign ids, evaluate the
/// filters, set up the thread's shadow stack and buffer.
#[cold]
#[inline(never)]
fn enter_slow(st: &mut ThreadState, site: &'static Site, gen: u32, kind: u8) -> Guard {
    let Some(active) = collector::active(gen) else {
        return Guard::OFF;
    };
    if st.gen != gen && !sync_thread(st, &active) {
        return Guard::OFF;
    }
    let id = site.id();
    if id >= MAX_SITES {
        return Guard::OFF;
    }
    let d = active.filters.decide(site.name, site.module_path);
    site.set_cache(gen, id, d);
    push(st, site.cache.load(Relaxed), kind)
}

/// Joins this thread to the active session: a fresh buffer, the session's
/// limits, and a shadow stack that keeps any frames still open from before.
#[cold]
fn sync_thread(st: &mut ThreadState, active: &Arc<Active>) -> bool {
    if st.gen == u32::MAX {
        return false; // thread is exiting
    }
    if EXIT
        .try_with(|e| {
            if let Some(h) = e.replace(None) {
                e.set(Some(h));
            } else {
                e.set(Some(ExitHook));
            }
        })
        .is_err()
    {
        return false;
    }
    release(st);
    let cap = active.stack_depth;
    if st.frames.is_null() || st.stack_cap < cap {
        let new = Box::into_raw(vec![Frame::ZERO; cap as usize].into_boxed_slice()) as *mut Frame;
        if !st.frames.is_null() {
            unsafe {
                ptr::copy_nonoverlapping(st.frames, new, st.depth.min(cap) as usize);
                drop(Box::from_raw(ptr::slice_from_raw_parts_mut(
                    st.frames,
                    st.stack_cap as usize,
                )));
            }
        }
        st.frames = new;
        st.stack_cap = cap;
    }
    st.depth = st.depth.min(st.stack_cap);
    let shared = active.register_thread();
    let (buf, len) = shared.storage_ptr();
    st.buf = buf;
    st.count = 0;
    if active.flight {
        st.mask = len as u64 - 1;
        st.limit = u64::MAX;
    } else {
        st.mask = u64::MAX;
        st.limit = len as u64;
    }
    st.max_depth = active.max_depth;
    st.threshold = active.threshold_ticks;
    st.has_graph = active.has_graph;
    st.shared = Arc::into_raw(shared);
    st.active = Arc::into_raw(active.clone());
    st.gen = active.gen;
    #[cfg(target_os = "linux")]
    if active.sampling {
        crate::sampler::register_current_thread();
    }
    true
}

#[inline(always)]
fn exit(slot: u32) {
    let end = ticks();
    STATE.with(|c| {
        // SAFETY: see `enter_on`.
        let st = unsafe { &mut *c.get() };
        if st.depth != slot {
            // A capture with counters marks its guards, so it lands here and
            // costs the session path nothing.
            if slot & COUNTED != 0 {
                return exit_counted(st, slot & !COUNTED, end);
            }
            if st.depth < slot {
                return; // the frame is gone (thread state was reset)
            }
            drop_leaked(st, slot);
        }
        // SAFETY: slot <= depth <= stack_cap.
        let f = unsafe { *st.frames.add(slot as usize - 1) };
        st.depth = slot - 1;
        let k = match f.kind {
            F_HIDE => {
                st.hide -= 1;
                return;
            }
            F_GRAPH => {
                st.graph -= 1;
                kind::CALL
            }
            F_POLL => kind::POLL,
            _ => kind::CALL,
        };
        let dur = end.wrapping_sub(f.start);
        if dur < st.threshold {
            return;
        }
        write(
            st,
            RawCall::pack(f.start, slot - 1, dur, f.site, std::thread::panicking(), k),
        );
    })
}

/// Pops frames whose guards were leaked (`mem::forget`) so nothing is mis-paired.
#[cold]
fn drop_leaked(st: &mut ThreadState, slot: u32) {
    while st.depth > slot {
        st.depth -= 1;
        match unsafe { (*st.frames.add(st.depth as usize)).kind } {
            F_HIDE => st.hide -= 1,
            F_GRAPH => st.graph -= 1,
            _ => {}
        }
    }
}

#[inline(always)]
fn write(st: &mut ThreadState, rec: RawCall) {
    if st.buf.is_null() {
        return;
    }
    let i = st.count;
    // SAFETY: i & mask < capacity (stream: i < limit = capacity; flight: ring mask).
    unsafe { st.buf.add((i & st.mask) as usize).write(rec) };
    st.count = i + 1;
    // SAFETY: `shared` is alive while `buf` is set.
    unsafe { (*st.shared).published.store(i + 1, Release) };
    if i + 1 == st.limit {
        handoff(st, rec.depth());
    }
}

/// Hands a full buffer to the collector and continues in a fresh one; if the
/// collector has fallen behind, drops the batch, counts it, and leaves a
/// `LOST` marker in its place.
#[cold]
#[inline(never)]
fn handoff(st: &mut ThreadState, depth: u32) {
    if st.capture {
        capture_handoff(st);
        return;
    }
    // SAFETY: both set together in `sync_thread`.
    let (shared, active) = unsafe { (&*st.shared, &*st.active) };
    let len = st.count as usize;
    let fresh = active
        .recycle_rx
        .try_recv()
        .unwrap_or_else(|_| buffer::new_storage(len));
    let full = shared.swap_storage(fresh);
    let mut batch = buffer::Batch {
        thread: shared.index,
        storage: full,
        len,
    };
    let mut lost = 0;
    loop {
        match active.batches.try_send(batch) {
            Ok(()) => break,
            Err(crossbeam_channel::TrySendError::Full(b)) if active.block_when_full => {
                batch = b;
                std::thread::yield_now();
            }
            Err(crossbeam_channel::TrySendError::Full(b)) => {
                // A batch that starts with the marker of an earlier drop
                // carries that count forward, so one marker covers the run.
                // SAFETY: slot 0 of a full batch was written.
                let first = unsafe { b.storage[0].assume_init() };
                let carried = if first.kind() == kind::LOST {
                    first.dur()
                } else {
                    0
                };
                let calls = b.len as u64 - (carried > 0) as u64;
                shared.dropped.fetch_add(calls, Relaxed);
                lost = calls + carried;
                let _ = active.recycle_tx.try_send(b.storage);
                break;
            }
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => break,
        }
    }
    let (buf, _) = shared.storage_ptr();
    st.buf = buf;
    st.count = 0;
    if lost > 0 {
        write(
            st,
            RawCall::pack(ticks(), depth, lost, 0, false, kind::LOST),
        );
    }
}

/// Records an async fn's whole future (first poll to completion or drop).
#[cold]
fn record_future(site: &'static Site, start: u64, polls: u32, cancelled: bool) {
    let end = ticks();
    let c = CONTROL.load(Relaxed);
    if c & ON == 0 {
        return;
    }
    let gen = c >> 2;
    STATE.with(|cell| {
        let st = unsafe { &mut *cell.get() };
        if !st.capture {
            if c & SESSION_ON == 0 {
                return;
            }
            if st.gen != gen {
                let Some(active) = collector::active(gen) else {
                    return;
                };
                if !sync_thread(st, &active) {
                    return;
                }
            }
            let Some(active) = (unsafe { st.active.as_ref() }) else {
                return;
            };
            if active.filters.decide(site.name, site.module_path) == Decision::Skip {
                return;
            }
        }
        let id = site.id();
        if st.hide != 0 || id >= MAX_SITES {
            return;
        }
        let polls = polls.min(buffer::MAX_DEPTH);
        write(
            st,
            RawCall::pack(
                start,
                polls,
                end.wrapping_sub(start),
                id,
                cancelled,
                kind::FUTURE,
            ),
        );
    })
}

/// An `async fn`'s future, instrumented by `#[traced]`: every poll is a call
/// on the polling thread's shadow stack (never held across `.await`), and the
/// whole future, first poll to completion, is recorded once, on whichever
/// thread finishes it.
pub struct TracedFuture<F> {
    site: &'static Site,
    first: u64,
    polls: u32,
    done: bool,
    inner: F,
}

impl<F> TracedFuture<F> {
    pub fn new(site: &'static Site, inner: F) -> Self {
        TracedFuture {
            site,
            first: 0,
            polls: 0,
            done: false,
            inner,
        }
    }
}

impl<F: Future> Future for TracedFuture<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `inner` is structurally pinned: never moved out, not even in Drop.
        let this = unsafe { self.get_unchecked_mut() };
        let c = CONTROL.load(Relaxed);
        if this.first == 0 && c & ON != 0 {
            this.first = ticks();
        }
        let guard = if c & ON == 0 {
            Guard::OFF
        } else {
            enter_on(this.site, c, F_POLL)
        };
        this.polls += 1;
        let r = unsafe { Pin::new_unchecked(&mut this.inner) }.poll(cx);
        drop(guard);
        if r.is_ready() {
            this.done = true;
            if this.first != 0 {
                record_future(this.site, this.first, this.polls, false);
            }
        }
        r
    }
}

impl<F> Drop for TracedFuture<F> {
    fn drop(&mut self) {
        if !self.done && self.first != 0 {
            record_future(self.site, self.first, self.polls, true);
        }
    }
}

/// For the sampler's signal handler (on this thread): the shadow-stack depth
/// and the stack pointer the innermost open traced call recorded at entry.
pub(crate) fn shadow_top() -> (u32, u64) {
    STATE.with(|c| {
        // SAFETY: read-only; frames below `depth` are fully written (see `push`).
        let st = unsafe { &*c.get() };
        let d = st.depth.min(st.stack_cap);
        if d == 0 || st.frames.is_null() {
            (0, u64::MAX)
        } else {
            (d, unsafe { (*st.frames.add(d as usize - 1)).sp } as u64)
        }
    })
}

/// Shadow-stack depth of the current thread (for the sampler and tests).
pub fn current_depth() -> u32 {
    STATE.with(|c| unsafe { (*c.get()).depth })
}

// ---------------------------------------------------------------- captures

/// Marks the guard of a call whose entry read a counter (bit 31 of the slot:
/// shadow stacks are far shallower).
const COUNTED: u32 = 1 << 31;

/// Capture buffers: large enough that most captures never hand off.
const CAPTURE_BUFFER: usize = 1 << 14;

/// The per-thread state of a running capture that the hot path does not need.
struct CaptureExtra {
    /// The thread's perf counter (see `testing::counters`); null: no counters.
    page: *const u8,
    fd: i32,
    /// Counter deltas, parallel to the record buffer (`CAPTURE_BUFFER` slots).
    side: *mut u64,
    /// Full record buffers handed off so far, oldest first.
    batches: Vec<RawCall>,
    /// Their counter deltas.
    side_batches: Vec<u64>,
}

impl CaptureExtra {
    const EMPTY: CaptureExtra = CaptureExtra {
        page: ptr::null(),
        fd: -1,
        side: ptr::null_mut(),
        batches: Vec::new(),
        side_batches: Vec::new(),
    };
}

thread_local! {
    static EXTRA: UnsafeCell<CaptureExtra> = const { UnsafeCell::new(CaptureExtra::EMPTY) };
}

/// `site.id()`; a first call's registration is kept out of the counts (and
/// `first` takes that path for calibration). One out-of-line copy, so that
/// its cost is the one calibrated.
#[inline(never)]
pub(crate) fn capture_site_id(site: &'static Site, first: bool) -> u32 {
    // Not `&&`: the calibration's forced path must load the cache too.
    let known = (site.cache.load(Relaxed) >> 8) & 0xff_ffff != 0;
    if known & !first {
        return site.id();
    }
    capture_register(site)
}

/// The first call of a site: registration, uncounted.
#[cold]
#[inline(never)]
fn capture_register(site: &'static Site) -> u32 {
    let mut id = 0;
    capture_uncounted(&mut || id = site.id());
    id
}

/// Runs `f` without charging its instructions to the open calls (see
/// `testing::counters::uncounted`). Not generic: one copy, one cost.
#[cold]
#[inline(never)]
pub(crate) fn capture_uncounted(f: &mut dyn FnMut()) {
    let (page, fd) = EXTRA.with(|x| unsafe { ((*x.get()).page, (*x.get()).fd) });
    if page.is_null() {
        return f();
    }
    // SAFETY: this thread's counter, mapped while the capture runs.
    unsafe { crate::testing::counters::uncounted(page, fd, f) }
}

/// A capture's entry: with counters, the counter is read before `push` (whose
/// clock read comes last), so neither measurement sees the other's probe.
#[inline(always)]
fn capture_push(st: &mut ThreadState, cache: u64, kind: u8) -> Guard {
    let (page, fd) = EXTRA.with(|x| unsafe { ((*x.get()).page, (*x.get()).fd) });
    if page.is_null() {
        return push(st, cache, kind);
    }
    // SAFETY: the page stays mapped while the capture runs (`testing::counters`).
    let ctr = unsafe { crate::testing::counters::read(page, fd) };
    let mut g = push(st, cache, kind);
    if g.slot != 0 {
        // SAFETY: `push` just filled this slot.
        unsafe { (*st.frames.add(g.slot as usize - 1)).ctr = ctr };
        g.slot |= COUNTED;
    }
    g
}

/// A counted call's exit: the counter first, then what `exit` does. Capture
/// frames are never hidden or graph roots (captures have no filters).
#[inline(never)]
fn exit_counted(st: &mut ThreadState, slot: u32, end: u64) {
    let (now, side) = EXTRA.with(|x| unsafe {
        let x = &*x.get();
        (
            if x.page.is_null() {
                0
            } else {
                crate::testing::counters::read(x.page, x.fd)
            },
            x.side,
        )
    });
    if st.depth != slot {
        if st.depth < slot {
            return;
        }
        drop_leaked(st, slot);
    }
    // SAFETY: slot <= depth <= stack_cap.
    let f = unsafe { *st.frames.add(slot as usize - 1) };
    st.depth = slot - 1;
    let k = if f.kind == F_POLL {
        kind::POLL
    } else {
        kind::CALL
    };
    if !side.is_null() && (st.count as usize) < CAPTURE_BUFFER {
        // SAFETY: `write` puts this record at index `count` < CAPTURE_BUFFER.
        unsafe { *side.add(st.count as usize) = now.wrapping_sub(f.ctr) };
    }
    write(
        st,
        RawCall::pack(
            f.start,
            slot - 1,
            end.wrapping_sub(f.start),
            f.site,
            std::thread::panicking(),
            k,
        ),
    );
}

/// A full capture buffer: its records (and counter deltas) move to the
/// thread's batches, and recording continues at the start of the buffer.
#[cold]
fn capture_handoff(st: &mut ThreadState) {
    capture_uncounted(&mut || {
        // SAFETY: set in `capture_begin`, alive until `capture_end`.
        let shared = unsafe { &*st.shared };
        let (recs, _) = shared.snapshot(false, 0);
        EXTRA.with(|x| {
            let x = unsafe { &mut *x.get() };
            if !x.side.is_null() {
                // SAFETY: `side` has CAPTURE_BUFFER slots, `count` <= CAPTURE_BUFFER.
                x.side_batches.extend_from_slice(unsafe {
                    std::slice::from_raw_parts(x.side, st.count as usize)
                });
            }
            x.batches.extend(recs);
        });
        shared.published.store(0, Release);
        st.count = 0;
    })
}

/// A thread's capture-related state, parked while another one is in place.
struct Parked {
    st: ThreadState,
    extra: CaptureExtra,
}

/// The thread's state from before a capture, restored when it ends.
pub(crate) struct SavedState(Parked);

/// A capture taken off its thread between polls of a captured future.
pub(crate) struct Suspended(Option<Parked>);

// SAFETY: a suspended capture is in place on no thread: its buffers (owned
// through raw pointers) are reachable only through this value, and the
// counter page it names is replaced by the resuming thread's own.
unsafe impl Send for Suspended {}

impl Suspended {
    /// A placeholder that holds no capture.
    pub(crate) fn empty() -> Suspended {
        Suspended(None)
    }
}

/// A capture's counter source: the thread's perf event page and fd.
#[derive(Clone, Copy)]
pub(crate) struct CounterSrc {
    pub page: *const u8,
    pub fd: i32,
}

/// What a capture recorded on one thread.
pub(crate) struct CaptureOut {
    /// Oldest first (exit order).
    pub records: Vec<RawCall>,
    pub overruns: u64,
    /// Counter deltas parallel to `records` (meaningless for future records).
    pub counters: Option<Vec<u64>>,
}

/// Puts `p` in place on this thread and returns what was there.
fn swap_in(p: Parked) -> Parked {
    STATE.with(|cell| {
        EXTRA.with(|x| {
            // SAFETY: this thread's state; no probe runs while we swap.
            let (st, x) = unsafe { (&mut *cell.get(), &mut *x.get()) };
            Parked {
                st: std::mem::replace(st, p.st),
                extra: std::mem::replace(x, p.extra),
            }
        })
    })
}

/// Switches the calling thread to record into a private buffer, whatever a
/// session is doing: used by `fgtrace::testing::capture`. Nests. With
/// `counters`, every call also gets the counter's entry-to-exit delta.
pub(crate) fn capture_begin(stack_depth: u32, counters: Option<CounterSrc>) -> SavedState {
    CAPTURES.fetch_add(1, Relaxed);
    CONTROL.fetch_or(ON, Release);
    let mut st = ThreadState::EMPTY;
    st.frames =
        Box::into_raw(vec![Frame::ZERO; stack_depth as usize].into_boxed_slice()) as *mut Frame;
    st.stack_cap = stack_depth;
    st.max_depth = u32::MAX;
    let shared = Arc::new(ThreadBuf::new(
        0,
        collector::os_tid(),
        collector::thread_name(),
        CAPTURE_BUFFER,
    ));
    let (buf, len) = shared.storage_ptr();
    st.buf = buf;
    st.mask = u64::MAX;
    st.limit = len.min(CAPTURE_BUFFER) as u64;
    st.shared = Arc::into_raw(shared);
    st.gen = CAPTURE_GEN;
    st.capture = true;
    let mut extra = CaptureExtra::EMPTY;
    if let Some(c) = counters {
        extra.page = c.page;
        extra.fd = c.fd;
        extra.side = Box::into_raw(vec![0u64; CAPTURE_BUFFER].into_boxed_slice()) as *mut u64;
        // Fault the buffers in now: a page fault mid-call adds to the count
        // of the calls open at the time (and whether one happens depends on
        // what the allocator had at hand).
        for i in (0..CAPTURE_BUFFER).step_by(256) {
            // SAFETY: both buffers have CAPTURE_BUFFER slots; records are
            // plain data, and these are written again before they are read.
            unsafe {
                buf.add(i).write(RawCall(0, 0));
                extra.side.add(i).write_volatile(0);
            }
        }
    }
    SavedState(swap_in(Parked { st, extra }))
}

/// Takes the running capture off this thread (restoring the state from before
/// it), to be resumed later, possibly on another thread.
pub(crate) fn capture_suspend(saved: SavedState) -> Suspended {
    Suspended(Some(swap_in(saved.0)))
}

/// Puts a suspended capture back in place on the calling thread; `counters`
/// must be this thread's (a counter counts only its own thread).
pub(crate) fn capture_resume(mut s: Suspended, counters: Option<CounterSrc>) -> SavedState {
    let mut p = s.0.take().expect("a suspended capture");
    if !p.extra.side.is_null() {
        let c = counters.unwrap_or(CounterSrc {
            page: ptr::null(),
            fd: -1,
        });
        p.extra.page = c.page;
        p.extra.fd = c.fd;
    }
    SavedState(swap_in(p))
}

/// Ends the capture on this thread: returns its records and restores the
/// state from before `capture_begin`.
pub(crate) fn capture_end(saved: SavedState) -> CaptureOut {
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
    // SAFETY: all three were made in `capture_begin` and are not in place on any thread.
    let shared = unsafe { Arc::from_raw(p.st.shared) };
    let (tail, _) = shared.snapshot(false, 0);
    let mut records = std::mem::take(&mut p.extra.batches);
    records.extend(tail);
    let counters = (!p.extra.side.is_null()).then(|| {
        let side =
            unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(p.extra.side, CAPTURE_BUFFER)) };
        let mut v = std::mem::take(&mut p.extra.side_batches);
        v.extend_from_slice(&side[..p.st.count as usize]);
        v
    });
    unsafe {
        drop(Box::from_raw(ptr::slice_from_raw_parts_mut(
            p.st.frames,
            p.st.stack_cap as usize,
        )))
    };
    let overruns = shared.overruns.load(Relaxed);
    if CAPTURES.fetch_sub(1, Relaxed) == 1 {
        let _ = CONTROL.fetch_update(Release, Relaxed, |c| {
            (c & SESSION_ON == 0 && CAPTURES.load(Relaxed) == 0).then_some(c & !ON)
        });
    }
    CaptureOut {
        records,
        overruns,
        counters,
    }
}
