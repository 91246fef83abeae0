//! The hot path: the per-thread (per-hart) state, the shadow stack, the
//! entry/exit guard and the record writer.
//!
//! Cost model, when recording: entry is one relaxed load of the control word,
//! two relaxed loads of the site (decision word, id), a thread-local access,
//! a shadow-stack push and one clock read; exit is one clock read, a pop,
//! one 16-byte record store and one release store of the record count. No
//! allocation, no lock, no syscall. When recording is off, entry is one
//! relaxed load and a branch, and the guard's drop is a branch on a zero slot.
//!
//! Sessions with a per-call counter or with automatic exclusion of tiny
//! functions tag the thread's generation ([`GEN_COUNTED`], [`GEN_AUTO`]), so
//! that their calls miss the inlined check and take an out-of-line path;
//! other sessions never run any of that code. A call of a function switched
//! to count-only on its thread is one lookup in the thread's table and one
//! increment there: no clock read, no frame, no record.
//!
//! Everything that needs more (a thread's first call in a session, a site's
//! first filter decision, handing a full buffer over, releasing a thread's
//! buffers when it exits) is asked of the [`Hooks`] the layer above installs,
//! on `#[cold]` paths. While a hook runs, the thread's state is marked busy
//! ([`GEN_BUSY`]): any traced call it makes (a traced global allocator, a
//! traced function in a signal handler) is not recorded, so fgtrace never
//! recurses into itself and never waits on itself.
//!
//! Re-entrancy on the hot path itself (a signal or interrupt handler that
//! runs traced code between two instructions of a probe): `push` reserves
//! its shadow-stack slot, and `write` its record slot, before filling them,
//! so a nested probe uses the next slot and leaves both intact. Every frame
//! carries a serial, and a guard pops only the frame with its own serial, so
//! a stale guard (a stackful coroutine resumed on another stack, a leaked
//! guard) never pops or records somebody else's call.
//!
//! Boards (`irq-mask`, no `std`) differ in six places: each hart's state
//! and shadow stack are the core's own statics (`board`), hart 0's at a
//! constant address; the common entry compares the site's decision word
//! with one word of the hart's state and pushes a plain frame, no serial
//! (`board::enter_board`); hooks that run busy run with interrupts masked,
//! so an interrupt handler's traced call never meets a busy probe; the exit
//! pops and writes its record with interrupts masked (the common case in
//! one stretch, `board::exit_fast`), so an interrupt's records nest in exit
//! order; a full buffer is handed over not busy, before and after, so the
//! board sends it while recording goes on in a second buffer; and a counted
//! call reads its counter right after the clock and asks the platform for
//! its further counters.

#[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
use crate::control_word::{CONTROL, ON_MASK};
use crate::record::{AllocCounts, RawCall};
use crate::site::{Decision, Site};
use core::marker::PhantomData;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::*};

#[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
pub mod board;
mod cold;
mod enter;
mod exit;
mod future;
#[cfg(any(test, all(feature = "irq-mask", not(feature = "std"))))]
mod guard_word;
mod inspect;
#[cfg(test)]
mod irq_sim;
mod marker;
mod stretch;
mod values;
#[cfg(any(feature = "std", test))]
mod wake;

#[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
use board::exit;
use enter::busy;
pub use enter::capture_site_id;
#[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
use enter::enter_other;
#[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
use enter::{caller_state, enter_out};
use enter::{enter_on, stack_pointer};
pub(crate) use exit::count_alloc;
#[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
use exit::exit;
#[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
use exit::handoff;
#[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
use exit::{exit_board, exit_board_counted};
use exit::{write, write_other};
pub use future::{FutureTimes, TracedFuture};
pub use inspect::{current_depth, open_frames, shadow_top, OpenFrame};
pub use marker::marker;
pub use stretch::exit_poll;
pub use values::{
    enter_poll, enter_values, exit_with_values, record_future_values, ValuesFuture, ValuesGuard,
};

/// Frame flag: one poll of an async fn.
const F_POLL: u32 = 1;
/// Frame flag: a graph function (recording enabled below it).
const F_GRAPH: u32 = 2;
/// Frame flag: hidden with its subtree (nothing recorded).
const F_HIDE: u32 = 4;
/// Frame flag: the counting allocator counted something in this call, so its
/// entry in `ThreadState::allocs` is live (set by [`count_alloc`], never by
/// `push`: the hot path pays nothing for allocation counting; a fresh frame's
/// tag has the flag clear).
const F_ALLOC: u32 = 8;
const SERIAL_MASK: u32 = 0xff_ffff;

/// One open call on the shadow stack (32 bytes).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ShadowFrame {
    /// Entry ticks.
    pub start: u64,
    /// Stack pointer at entry: the sampler compares sampled frame addresses with it.
    pub sp: usize,
    /// Counter reading at entry; written only by captures with counters.
    pub ctr: u64,
    /// Site id.
    pub site: u32,
    /// `serial << 8 | flags`.
    pub tag: u32,
}

impl ShadowFrame {
    /// An empty frame, to fill shadow stacks with.
    pub const ZERO: ShadowFrame = ShadowFrame {
        start: 0,
        sp: 0,
        ctr: 0,
        site: 0,
        tag: 0,
    };
}

/// `ThreadState::gen` of a thread that never joined a session (or left it).
pub const GEN_NONE: u32 = u32::MAX;
/// `ThreadState::gen` while fgtrace's own code runs on the thread: probes are off.
pub const GEN_BUSY: u32 = u32::MAX - 1;
/// `ThreadState::gen` of a thread that is exiting, or of one of fgtrace's
/// own threads: probes stay off for good.
pub const GEN_DEAD: u32 = u32::MAX - 2;
/// `ThreadState::gen` of a thread recording into a capture.
pub const GEN_CAPTURE: u32 = u32::MAX - 3;
/// `ThreadState::gen` bit of a thread recording into session `gen & !GEN_COUNTED`
/// with a per-call counter (`ThreadState::counter`): the session fast path's
/// generation check fails on purpose, so only counted sessions take the
/// out-of-line path that reads the counter (generations have 21 bits).
pub const GEN_COUNTED: u32 = 1 << 30;
/// `ThreadState::gen` bit of a thread recording into session `gen & !GEN_AUTO`
/// with automatic exclusion of tiny functions (`ThreadState::count_only`
/// is set): as with [`GEN_COUNTED`], the fast path's generation check fails
/// on purpose, so only such sessions take the out-of-line path that looks a
/// site up in the thread's table. Composes with [`GEN_COUNTED`].
pub const GEN_AUTO: u32 = 1 << 29;
/// The tag bits a session's generation may carry in `ThreadState::gen`.
pub const GEN_TAGS: u32 = GEN_COUNTED | GEN_AUTO;
/// Bit of an entry of `ThreadState::count_only`: the site is no longer
/// recorded on this thread, only counted; the low bits are its calls since.
/// Only the layer above sets it (once per entry, one atomic `fetch_or`);
/// after that only the owning thread writes the entry.
#[cfg(target_has_atomic = "64")]
pub const COUNT_ONLY: u64 = 1 << 63;
/// See the 64-bit one: targets without 64-bit atomics (boards, which have no
/// auto-exclude) keep 32-bit entries.
#[cfg(not(target_has_atomic = "64"))]
pub const COUNT_ONLY: u32 = 1 << 31;
/// An entry of a count-only table (`ThreadState::count_only`): 64 bits
/// wherever the target has 64-bit atomics (every target of the std runtime).
#[cfg(target_has_atomic = "64")]
pub type CountWord = core::sync::atomic::AtomicU64;
/// An entry of a count-only table: 32 bits on targets without 64-bit atomics.
#[cfg(not(target_has_atomic = "64"))]
pub type CountWord = core::sync::atomic::AtomicU32;

/// How to read a per-call counter (a perf event, a CSR) that captures and
/// sessions with counters read at entry and exit of every call: the
/// functions and what they read. (`fgtrace::pmu::Counter` names the events.)
pub struct CounterReader {
    /// Reads the counter. Must be cheap, re-entrant and lock-free.
    pub read: unsafe fn(&CounterReader) -> u64,
    /// The counter's mapped page (perf_event: the `perf_event_mmap_page`).
    pub page: *const u8,
    /// Its file descriptor (the fallback `read`).
    pub fd: i32,
    /// Runs `f` without charging its cost to the calls open on this thread.
    pub uncounted: unsafe fn(&CounterReader, f: &mut dyn FnMut()),
}

/// Everything a thread needs on the hot path, in one const-initialised
/// thread-local (no lazy-init check, no destructor registration per access).
///
/// The layer above fills it in [`Hooks::join`] and [`Hooks::handoff`]; the
/// hot path only moves `depth`, `count` and the counters.
#[derive(Debug)]
#[repr(C)]
pub struct ThreadState {
    /// The session generation this state belongs to, or one of `GEN_*`.
    pub gen: u32,
    /// Recording into a thread-local capture rather than a session.
    pub capture: bool,
    /// The session has graph functions: record only below one.
    pub has_graph: bool,
    /// Frames on the shadow stack.
    pub depth: u32,
    /// Open hidden frames.
    pub hide: u32,
    /// Open graph-function frames.
    pub graph: u32,
    /// Shadow-stack capacity; deeper calls count as overruns.
    pub stack_cap: u32,
    /// Calls at this depth or deeper are not recorded.
    pub max_depth: u32,
    /// Serial of the last frame pushed.
    pub serial: u32,
    /// The shadow stack: `stack_cap` frames.
    pub frames: *mut ShadowFrame,
    /// Calls shorter than this many ticks are not recorded.
    pub threshold: u64,
    /// Where records go; null: nowhere (the buffer was closed).
    pub buf: *mut RawCall,
    /// Records written to `buf` (stream) or ever (a ring: `mask` < capacity).
    pub count: usize,
    /// Index mask into `buf`: all ones for a straight buffer, capacity - 1 for a ring.
    pub mask: usize,
    /// `count` at which [`Hooks::handoff`] runs (`usize::MAX`: never).
    pub limit: usize,
    /// Where `count` is published (release) for readers on other threads.
    pub published: *const AtomicUsize,
    /// Calls deeper than `stack_cap`, counted.
    pub overruns: *const AtomicUsize,
    /// Calls a nested handler could not record (see `write`), counted.
    pub dropped: *const AtomicUsize,
    /// A record is being written (see `write`).
    pub writing: bool,
    /// The layer above's per-thread object (its buffer), opaque here.
    pub owner: *const (),
    /// A per-call counter, or null.
    pub counter: *const CounterReader,
    /// Counter deltas parallel to `buf` (`limit` slots), or null.
    pub side: *mut u64,
    /// Allocation figures parallel to `frames` (`stack_cap` entries), or null:
    /// allocated by the layer above when the counting allocator is installed
    /// ([`crate::alloc::installed`]); an entry is live while its frame has
    /// the allocation flag.
    pub allocs: *mut AllocCounts,
    /// Sessions with automatic exclusion of tiny functions: one word per
    /// site id ([`MAX_SITES`](crate::record::MAX_SITES) entries), 0 while the site is recorded,
    /// [`COUNT_ONLY`] plus its calls since once it only counts. Null
    /// otherwise. Set by the layer above in [`Hooks::join`], alive while the
    /// thread's buffer (`owner`) is.
    pub count_only: *const CountWord,
    /// Boards: the decision word (`generation << 3 | Record`) a site must
    /// have for a call to take the board's plain entry, or a value no
    /// decision word takes (`u32::MAX`). Set when the hart joins a session
    /// whose steady state allows it (see `board`); unused elsewhere.
    pub fast: u32,
    /// `serial` when the state last joined a session: a guard with a
    /// serial after it (up to `serial`) was pushed in this session, so a
    /// frame of its that is gone is this session's loss (see `lost_exit`).
    pub joined_serial: u32,
    /// The records written since the thread joined that are not calls,
    /// weighed by [`RawCall::non_calls`](crate::record::RawCall::non_calls).
    /// A flight recorder's ring overwrites them as it does calls: whoever
    /// counts the overwritten calls subtracts the overwritten non-calls.
    pub non_calls: usize,
    /// Where `non_calls` is published for readers on other threads (stored
    /// before `published` covers the record): never null, so that a write
    /// stores it without a test; [`NON_CALLS_UNREAD`] when nobody reads it.
    pub non_calls_out: *const AtomicUsize,
}

impl ThreadState {
    /// A thread that has not recorded yet.
    pub const EMPTY: ThreadState = ThreadState {
        gen: GEN_NONE,
        capture: false,
        has_graph: false,
        depth: 0,
        hide: 0,
        graph: 0,
        stack_cap: 0,
        max_depth: 0,
        serial: 0,
        frames: ptr::null_mut(),
        threshold: 0,
        buf: ptr::null_mut(),
        count: 0,
        mask: 0,
        limit: 0,
        published: ptr::null(),
        overruns: ptr::null(),
        dropped: ptr::null(),
        writing: false,
        owner: ptr::null(),
        counter: ptr::null(),
        side: ptr::null_mut(),
        allocs: ptr::null_mut(),
        count_only: ptr::null(),
        fast: u32::MAX,
        joined_serial: 0,
        non_calls: 0,
        non_calls_out: &NON_CALLS_UNREAD,
    };
}

/// Where a thread's [`ThreadState::non_calls`] goes when no reader takes it
/// (boards, captures, a thread between sessions): written, never read.
pub static NON_CALLS_UNREAD: AtomicUsize = AtomicUsize::new(0);

/// What the core asks of the layer above (the `fgtrace` runtime, a board's
/// firmware support). Every hook runs on a cold path with the thread marked
/// busy, so it may allocate, lock and call traced code: nothing it does is
/// recorded (on boards, with interrupts masked too; except `handoff` there,
/// see below).
pub struct Hooks {
    /// The thread's first traced call in session generation `gen` (or after
    /// its state was reset): set up `st` (shadow stack, buffer, limits) and
    /// return `true`, or `false` to record nothing now. The core sets
    /// `st.gen` afterwards.
    pub join: fn(st: &mut ThreadState, gen: u32) -> bool,
    /// A site's filter decision in generation `gen` (cached in the site by
    /// the core); `None` when that session is gone.
    pub decide: fn(site: &'static Site, gen: u32) -> Option<Decision>,
    /// `st.count` reached `st.limit`: hand the buffer over and set `buf`,
    /// `count` (and `side`) anew. Leaving `buf` null stops recording on
    /// this thread. With `irq-mask` (boards) it runs not busy, with
    /// interrupts as they were, and may be entered again by an interrupt
    /// handler on the same hart (see `handoff`); it also runs when a
    /// counted call's records (the call, its counters) would not all fit
    /// in the rest of the buffer: a board hands over a buffer with fewer
    /// than `platform::MORE_COUNTERS + 2` free records left.
    pub handoff: fn(st: &mut ThreadState),
    /// The thread exits (or is detached): release what `join` set up.
    pub release: fn(st: &mut ThreadState),
    /// Runs `f` so that its cost is not charged to the counters of the calls
    /// open on this thread (captures with counters); otherwise just `f()`.
    pub uncounted: fn(f: &mut dyn FnMut()),
}

static HOOKS: AtomicPtr<Hooks> = AtomicPtr::new(ptr::null_mut());

/// Installs the layer above's hooks (once per process, before recording).
pub fn install_hooks(h: &'static Hooks) {
    HOOKS.store(h as *const Hooks as *mut Hooks, Release);
}

#[inline]
fn hooks() -> Option<&'static Hooks> {
    // SAFETY: only `&'static Hooks` are stored.
    unsafe { HOOKS.load(Acquire).as_ref() }
}

/// Joins this thread to session `gen` through [`Hooks::join`].
#[cold]
fn join(st: &mut ThreadState, gen: u32) -> bool {
    let Some(h) = hooks() else {
        return false;
    };
    #[cfg(any(feature = "std", test))]
    {
        let armed = busy(st, |_| {
            EXIT.try_with(|e| {
                if let Some(x) = e.take() {
                    e.set(Some(x));
                } else {
                    e.set(Some(ExitHook));
                }
            })
            .is_ok()
        });
        if !armed {
            return false; // the thread is exiting
        }
    }
    let ok = busy(st, |st| (h.join)(st, gen));
    if ok {
        // A session with a per-call counter: every call goes through
        // `enter_counted`; with count-only sites, through `enter_auto`.
        let counted = if st.counter.is_null() { 0 } else { GEN_COUNTED };
        let auto = if st.count_only.is_null() { 0 } else { GEN_AUTO };
        st.gen = gen | counted | auto;
        st.joined_serial = st.serial;
        #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
        board::set_fast(st, gen);
    }
    ok
}

/// The site's decision in `gen`: cached, or asked of [`Hooks::decide`].
#[inline]
fn decision(st: &mut ThreadState, site: &'static Site, gen: u32) -> Option<Decision> {
    if let Some(d) = site.decision(gen) {
        return Some(d);
    }
    let h = hooks()?;
    let d = busy(st, |_| (h.decide)(site, gen))?;
    // A site the board's plain path cannot record (hidden, a graph
    // function): every call of the hart takes the general path from now on.
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    if d != Decision::Record {
        st.fast = board::FAST_OFF;
    }
    site.set_decision(gen, d);
    Some(d)
}

#[cfg(any(feature = "std", test))]
std::thread_local! {
    static STATE: core::cell::UnsafeCell<ThreadState> =
        const { core::cell::UnsafeCell::new(ThreadState::EMPTY) };
    /// Releases the thread's buffers when it exits (armed on its first join).
    static EXIT: core::cell::Cell<Option<ExitHook>> = const { core::cell::Cell::new(None) };
}

/// Where the state of the running hart is, on targets without `std`.
///
/// The platform (a board's firmware support) defines
/// `#[no_mangle] fn __fgtrace_hart() -> usize` returning the running hart's
/// index; with `irq-mask` the core keeps each hart's state (`board::STATES`),
/// without it the platform defines `__fgtrace_state() -> *mut ThreadState`.
/// Interrupt handlers on a hart share its state, which the hot path's slot
/// reservation makes safe.
#[cfg(not(any(feature = "std", test)))]
pub mod platform {
    #[cfg(not(feature = "irq-mask"))]
    use super::ThreadState;
    extern "Rust" {
        /// The running hart's state (platforms without `irq-mask`).
        #[cfg(not(feature = "irq-mask"))]
        pub fn __fgtrace_state() -> *mut ThreadState;
        /// The running hart's index (boards, `irq-mask`): 0 on the first.
        #[cfg(feature = "irq-mask")]
        pub fn __fgtrace_hart() -> usize;
        /// Masks interrupts on this hart; returns what to restore (feature `irq-mask`).
        #[cfg(feature = "irq-mask")]
        pub fn __fgtrace_irq_save() -> usize;
        /// Restores what [`__fgtrace_irq_save`] returned.
        #[cfg(feature = "irq-mask")]
        pub fn __fgtrace_irq_restore(saved: usize);
        /// A lean call's record that the first hart's full buffer could
        /// not take (boards with a cycle clock): the platform hands the
        /// buffer over and keeps the record, or counts it lost.
        #[cfg(all(fgtrace_lean, not(test)))]
        pub fn __fgtrace_lean_full(start: u64, end: u64, site: usize, sp: usize);
        /// A counted call's further counters (after the thread's
        /// `CounterReader`), feature `irq-mask`: at entry (`exit` false) the
        /// platform reads and keeps them for shadow-stack slot `slot`; at
        /// exit it puts their deltas since into `out` and returns how many.
        #[cfg(feature = "irq-mask")]
        pub fn __fgtrace_more_counters(
            slot: u32,
            exit: bool,
            out: &mut [u64; MORE_COUNTERS],
        ) -> usize;
    }

    /// Most further counters per call on a board.
    pub const MORE_COUNTERS: usize = 7;
}

/// A number that tells the running thread from every other live thread,
/// never 0. Counters of planned functions use it to let one thread count
/// without an atomic read-modify-write (see `crate::counted`).
///
/// On Linux x86_64 and aarch64 it is the thread pointer, read in one
/// instruction (`%fs:0`, the TCB's pointer to itself; `tpidr_el0`): an
/// access to a `thread_local!` from a library crate is a call to
/// `__tls_get_addr` until the linker relaxes it, and LLVM keeps registers
/// around that call, which costs more than the count in the tiny functions
/// a plan counts. Elsewhere, the address of the thread's state.
#[cfg(any(feature = "std", test))]
#[inline(always)]
pub fn thread_token() -> usize {
    #[cfg(all(
        target_arch = "x86_64",
        any(target_os = "linux", target_os = "android")
    ))]
    {
        let tp: usize;
        // SAFETY: reads the thread pointer's first word, which the x86_64
        // TLS ABI keeps pointing at itself; touches nothing else.
        unsafe {
            core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp,
                options(nostack, preserves_flags, readonly, pure));
        }
        tp
    }
    #[cfg(all(
        target_arch = "aarch64",
        any(target_os = "linux", target_os = "android")
    ))]
    {
        let tp: usize;
        // SAFETY: reads the thread pointer register.
        unsafe {
            core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp,
                options(nomem, nostack, preserves_flags, pure));
        }
        tp
    }
    #[cfg(not(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        any(target_os = "linux", target_os = "android")
    )))]
    {
        STATE.with(|c| c.get() as usize)
    }
}

#[inline(always)]
fn with_state<R>(f: impl FnOnce(&mut ThreadState) -> R) -> R {
    #[cfg(any(feature = "std", test))]
    {
        // The closure given to `with` only fetches the address: so small,
        // it is inlined into the probe with `with` itself. A closure holding
        // the whole push or record is not: in a user's release build
        // `LocalKey::with` stays a call, its arguments spilled to the
        // stack, on every entry and exit.
        let st = STATE.with(|c| c.get());
        // SAFETY: only this thread touches its state (a signal handler that
        // interrupts it runs on this thread, after the probe's slot
        // reservation); the thread-local outlives this call.
        f(unsafe { &mut *st })
    }
    #[cfg(all(not(any(feature = "std", test)), not(feature = "irq-mask")))]
    {
        // SAFETY: the platform's promise (see `platform`).
        f(unsafe { &mut *platform::__fgtrace_state() })
    }
    #[cfg(all(not(any(feature = "std", test)), feature = "irq-mask"))]
    {
        // SAFETY: this hart's own state (see `board::Hart`).
        f(unsafe { &mut *board::hart().state() })
    }
}

/// Runs `f` on this thread's state. For the layer above's cold paths
/// (captures swap states in and out; tests inspect them).
///
/// # Safety
/// No probe of this thread may run inside `f` with the state half changed;
/// `f` must leave a state the hot path can use.
pub unsafe fn with_thread_state<R>(f: impl FnOnce(&mut ThreadState) -> R) -> R {
    with_state(f)
}

/// Marks the calling thread as one of fgtrace's own (a collector, a sampler):
/// probes on it are off for good, whatever it calls.
pub fn mark_internal_thread() {
    with_state(|st| st.gen = GEN_DEAD);
}

#[cfg(any(feature = "std", test))]
struct ExitHook;

#[cfg(any(feature = "std", test))]
impl Drop for ExitHook {
    fn drop(&mut self) {
        let _ = STATE.try_with(|c| {
            // SAFETY: the owning thread; no probe runs during TLS teardown.
            let st = unsafe { &mut *c.get() };
            st.gen = GEN_DEAD;
            if let Some(h) = hooks() {
                (h.release)(st);
            }
        });
    }
}

/// Marks the guard of a call whose entry read a counter (bit 31 of the slot:
/// shadow stacks are far shallower).
const COUNTED: u32 = 1 << 31;

/// Records the exit of a call when dropped (also during unwinding, which
/// marks the call as unwound).
#[must_use = "the call ends when the guard is dropped"]
pub struct Guard {
    /// Hosts: the shadow-stack slot + 1 (bit 31: counted), or 0 when
    /// nothing was pushed, in the low half; the frame's serial in the high
    /// one. One word, so that the traced fn keeps one value across its body
    /// and the off path sets one (a 32-bit board would pack and unpack it
    /// in pairs of registers: it keeps two).
    #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
    hw: u64,
    /// Boards without lean calls: the shadow-stack slot + 1 (bit 31:
    /// counted), or 0 when nothing was pushed.
    #[cfg(all(
        feature = "irq-mask",
        not(any(feature = "std", test)),
        not(fgtrace_lean)
    ))]
    slot: u32,
    /// The frame's serial.
    #[cfg(all(
        feature = "irq-mask",
        not(any(feature = "std", test)),
        not(fgtrace_lean)
    ))]
    serial: u32,
    /// Boards with a cycle clock: one word, so that the traced fn keeps one
    /// value across its body and its drop tests it alone. 0: nothing to
    /// do; the sign bit set: the slot in the low half and the serial in the
    /// high one (a board's general guard always has the serial's
    /// `OTHER` bit); else a lean call's entry time (see `board::exit_lean`).
    #[cfg(all(fgtrace_lean, not(test)))]
    word: u64,
    /// A lean call's site (the traced fn's on every path of its entry, so
    /// that it is one constant there).
    #[cfg(all(fgtrace_lean, not(test)))]
    site: *const Site,
    _not_send: PhantomData<*const ()>,
}

impl Guard {
    const OFF: Guard = Guard::new(0, 0);

    /// A guard for shadow-stack slot `slot` (0: none) with serial `serial`.
    #[inline(always)]
    const fn new(slot: u32, serial: u32) -> Guard {
        Guard {
            #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
            hw: slot as u64 | (serial as u64) << 32,
            #[cfg(all(
                feature = "irq-mask",
                not(any(feature = "std", test)),
                not(fgtrace_lean)
            ))]
            slot,
            #[cfg(all(
                feature = "irq-mask",
                not(any(feature = "std", test)),
                not(fgtrace_lean)
            ))]
            serial,
            #[cfg(all(fgtrace_lean, not(test)))]
            word: if slot == 0 {
                0
            } else {
                slot as u64 | (serial as u64) << 32 | 1 << 63
            },
            #[cfg(all(fgtrace_lean, not(test)))]
            site: ptr::null(),
            _not_send: PhantomData,
        }
    }

    /// The shadow-stack slot + 1 (bit 31: counted), 0 when nothing was
    /// pushed.
    #[inline(always)]
    fn slot(&self) -> u32 {
        #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
        let s = self.hw as u32;
        #[cfg(all(
            feature = "irq-mask",
            not(any(feature = "std", test)),
            not(fgtrace_lean),
            not(target_arch = "arm")
        ))]
        let s = self.slot;
        // Cortex-M marks the slot of a guard its plain exit must not take
        // (see `board::cortex_m::GENERAL`).
        #[cfg(all(
            target_arch = "arm",
            feature = "irq-mask",
            not(any(feature = "std", test))
        ))]
        let s = self.slot & !board::CORTEX_M_GENERAL;
        #[cfg(all(fgtrace_lean, not(test)))]
        let s = if (self.word as i64) < 0 {
            self.word as u32
        } else {
            0
        };
        s
    }

    /// The slot as the guard holds it, Cortex-M's mark included: what the
    /// drop tests, and what Cortex-M's exit takes.
    #[cfg(not(all(fgtrace_lean, not(test))))]
    #[inline(always)]
    fn raw_slot(&self) -> u32 {
        #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
        let s = self.hw as u32;
        #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
        let s = self.slot;
        s
    }

    /// The frame's serial.
    #[inline(always)]
    fn serial(&self) -> u32 {
        #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
        let s = (self.hw >> 32) as u32;
        #[cfg(all(
            feature = "irq-mask",
            not(any(feature = "std", test)),
            not(fgtrace_lean)
        ))]
        let s = self.serial;
        #[cfg(all(fgtrace_lean, not(test)))]
        let s = (self.word >> 32) as u32;
        s
    }

    /// Marks the pushed slot as a counted call's.
    #[inline(always)]
    fn set_counted(&mut self) {
        #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
        {
            self.hw |= COUNTED as u64;
        }
        #[cfg(all(
            feature = "irq-mask",
            not(any(feature = "std", test)),
            not(fgtrace_lean)
        ))]
        {
            self.slot |= COUNTED;
        }
        #[cfg(all(fgtrace_lean, not(test)))]
        {
            self.word |= COUNTED as u64;
        }
    }

    /// Makes the drop do nothing (its exit was made otherwise).
    #[inline(always)]
    fn disarm(&mut self) {
        #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
        {
            self.hw &= !(u32::MAX as u64);
        }
        #[cfg(all(
            feature = "irq-mask",
            not(any(feature = "std", test)),
            not(fgtrace_lean)
        ))]
        {
            self.slot = 0;
        }
        #[cfg(all(fgtrace_lean, not(test)))]
        {
            self.word = 0;
        }
    }
}

impl Drop for Guard {
    #[inline(always)]
    fn drop(&mut self) {
        // Boards with a cycle clock: a lean call's record is written here;
        // any other guard exits as below.
        #[cfg(all(fgtrace_lean, not(test)))]
        {
            let w = self.word;
            if w != 0 {
                if (w as i64) >= 0 {
                    board::exit_lean(w, self.site);
                } else {
                    board::exit_inline(w as u32, (w >> 32) as u32);
                }
            }
        }
        #[cfg(not(all(fgtrace_lean, not(test))))]
        if self.raw_slot() != 0 {
            // Boards: the first hart's plain exit is inlined into the traced
            // fn's epilogue (no call frame, no hart lookup). On Cortex-M it
            // is one call that keeps the traced fn's registers (see
            // `board::cortex_m`).
            #[cfg(all(
                feature = "irq-mask",
                not(any(feature = "std", test)),
                not(target_arch = "arm")
            ))]
            board::exit_inline(self.slot(), self.serial());
            #[cfg(all(
                feature = "irq-mask",
                not(any(feature = "std", test)),
                target_arch = "arm"
            ))]
            board::exit_call(self.raw_slot(), self.serial());
            #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
            exit(self.slot(), self.serial());
        }
    }
}

/// Entry probe: what `#[traced]` calls first in every instrumented fn.
#[inline(always)]
pub fn enter(site: &'static Site) -> Guard {
    // Boards test a word of their own (a session records), which their
    // runtime keeps with the control word: one load and a branch, no mask.
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    {
        // With lean calls the guard is one word, and the session word just
        // loaded, 0 when nothing records, is the off path's guard as it is
        // (see `board::on_word`): no constant to set. Zero-extended on a
        // 32-bit hart, whose guard is two registers: sign-extended, its
        // high half would take a shift (one instruction on riscv32imac's
        // off path).
        #[cfg(all(fgtrace_lean, not(test)))]
        {
            #[cfg_attr(not(target_arch = "riscv32"), allow(unused_mut))]
            let mut on = board::on_word();
            // On riscv32 the word is loaded into t6, where the general
            // entry's trampoline returns the guard's low half: every path
            // then leaves it in one register. Left to itself the compiler
            // gives the single-hart build's guard the argument's register
            // and moves the argument out of it on every path, one
            // instruction per call, recording or not.
            #[cfg(target_arch = "riscv32")]
            // SAFETY: an empty `asm!`: no instruction, only the register.
            unsafe {
                core::arch::asm!("", inout("t6") on, options(nomem, nostack, preserves_flags, pure))
            };
            if on <= 0 {
                return Guard {
                    word: on as usize as u64,
                    site,
                    _not_send: PhantomData,
                };
            }
        }
        // On Cortex-M the off path's guard is a slot of 0 in the register
        // the session word is loaded into, where the entry returns the
        // slot (one `movs` there; tested `<= 0` instead, the word itself
        // would be the slot, but the test is two instructions where `cbz`
        // is one), and a serial nothing reads: whatever the register the
        // exit takes it in holds, so that the recording path, whose entry
        // returns it there, moves nothing.
        #[cfg(target_arch = "arm")]
        {
            let on = board::cortex_m_on_word();
            if on == 0 {
                return Guard::new(on, board::cortex_m_no_serial());
            }
        }
        #[cfg(not(any(all(fgtrace_lean, not(test)), target_arch = "arm")))]
        if !board::on() {
            return Guard::OFF;
        }
        board::enter_board(site)
    }
    #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
    {
        let c = CONTROL.load(Relaxed);
        if c & ON_MASK == 0 {
            return Guard::OFF;
        }
        enter_out(site, c, stack_pointer(), caller_state())
    }
}

/// [`enter`], never a lean call: for guards whose exit writes more than
/// the call's record (values), which a lean exit does not.
#[inline(always)]
pub(crate) fn enter_not_lean(site: &'static Site) -> Guard {
    #[cfg(all(fgtrace_lean, not(test)))]
    {
        if !board::on() {
            return Guard::OFF;
        }
        board::enter_general_board(site)
    }
    #[cfg(not(all(fgtrace_lean, not(test))))]
    enter(site)
}

#[cfg(test)]
pub(crate) mod tests;
