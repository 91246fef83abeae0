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

use crate::clock::ticks;
use crate::control::{self, CONTROL, ON_MASK, SESSION_ON};
use crate::record::{ext, kind, AllocCounts, RawCall, MAX_SITES};
use crate::site::{Decision, Site};
use core::marker::PhantomData;
use core::ptr;
use core::sync::atomic::{compiler_fence, AtomicPtr, AtomicUsize, Ordering::*};

#[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
pub mod board;
mod future;
#[cfg(any(test, all(feature = "irq-mask", not(feature = "std"))))]
mod guard_word;
mod inspect;
#[cfg(test)]
mod irq_sim;
mod marker;
mod values;

pub use future::TracedFuture;
pub use inspect::{current_depth, open_frames, shadow_top, OpenFrame};
pub use marker::marker;
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
pub struct Frame {
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

impl Frame {
    /// An empty frame, to fill shadow stacks with.
    pub const ZERO: Frame = Frame {
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

/// A per-call counter that captures (and sessions with counters) read at
/// entry and exit of every call.
pub struct Counter {
    /// Reads the counter. Must be cheap, re-entrant and lock-free.
    pub read: unsafe fn(&Counter) -> u64,
    /// The counter's mapped page (perf_event: the `perf_event_mmap_page`).
    pub page: *const u8,
    /// Its file descriptor (the fallback `read`).
    pub fd: i32,
    /// Runs `f` without charging its cost to the calls open on this thread.
    pub uncounted: unsafe fn(&Counter, f: &mut dyn FnMut()),
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
    pub frames: *mut Frame,
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
    pub counter: *const Counter,
    /// Counter deltas parallel to `buf` (`limit` slots), or null.
    pub side: *mut u64,
    /// Allocation figures parallel to `frames` (`stack_cap` entries), or null:
    /// allocated by the layer above when the counting allocator is installed
    /// ([`crate::alloc::installed`]); an entry is live while its frame has
    /// the allocation flag.
    pub allocs: *mut AllocCounts,
    /// Sessions with automatic exclusion of tiny functions: one word per
    /// site id ([`MAX_SITES`] entries), 0 while the site is recorded,
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
    };
}

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
        /// `Counter`), feature `irq-mask`: at entry (`exit` false) the
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

#[inline(always)]
fn with_state<R>(f: impl FnOnce(&mut ThreadState) -> R) -> R {
    #[cfg(any(feature = "std", test))]
    {
        // The closure given to `with` only fetches the address: a small
        // closure is inlined into the probe with `with` itself, where a
        // closure holding the whole push or record was not (in a user's
        // release build `LocalKey::with` stayed a call, its arguments
        // spilled to the stack, on every entry and exit).
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

/// Records the exit of a call when dropped (also during unwinding, which
/// marks the call as unwound).
#[must_use = "the call ends when the guard is dropped"]
pub struct Guard {
    /// Shadow-stack slot + 1 (bit 31: counted), or 0 when nothing was pushed.
    #[cfg(not(all(fgtrace_lean, not(test))))]
    slot: u32,
    /// The frame's serial.
    #[cfg(not(all(fgtrace_lean, not(test))))]
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
            #[cfg(not(all(fgtrace_lean, not(test))))]
            slot,
            #[cfg(not(all(fgtrace_lean, not(test))))]
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
        #[cfg(not(all(fgtrace_lean, not(test))))]
        let s = self.slot;
        #[cfg(all(fgtrace_lean, not(test)))]
        let s = if (self.word as i64) < 0 {
            self.word as u32
        } else {
            0
        };
        s
    }

    /// The frame's serial.
    #[inline(always)]
    fn serial(&self) -> u32 {
        #[cfg(not(all(fgtrace_lean, not(test))))]
        let s = self.serial;
        #[cfg(all(fgtrace_lean, not(test)))]
        let s = (self.word >> 32) as u32;
        s
    }

    /// Marks the pushed slot as a counted call's.
    #[inline(always)]
    fn set_counted(&mut self) {
        #[cfg(not(all(fgtrace_lean, not(test))))]
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
        #[cfg(not(all(fgtrace_lean, not(test))))]
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
        if self.slot != 0 {
            // Boards: the first hart's plain exit is inlined into the traced
            // fn's epilogue (no call frame, no hart lookup).
            #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
            board::exit_inline(self.slot, self.serial);
            #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
            exit(self.slot, self.serial);
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
        // high half took a shift (riscv32imac off: one instruction more).
        #[cfg(all(fgtrace_lean, not(test)))]
        {
            #[cfg_attr(not(target_arch = "riscv32"), allow(unused_mut))]
            let mut on = board::on_word();
            // On riscv32 the word is loaded into t6, where the general
            // entry's trampoline returns the guard's low half: every path
            // then leaves it in one register. Left to itself the compiler
            // gave the single-hart build's guard the argument's register
            // and moved the argument out of it on every path (off 29 -> 28,
            // recording 59 -> 58; no change elsewhere).
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
        #[cfg(not(all(fgtrace_lean, not(test))))]
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

/// This thread's state, read in the traced fn itself where that is cheap
/// (std: a thread-local), null where [`enter_out`] asks the platform.
///
/// Not in `enter_out`: a thread-local of another crate is reached through
/// `__tls_get_addr`, a call the linker later rewrites into one load from
/// `%fs`, but a call when the compiler allocates registers, so `enter_out`
/// saved and restored six registers around it on every call. The traced
/// fn makes calls anyway.
#[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
#[inline(always)]
fn caller_state() -> *mut ThreadState {
    #[cfg(any(feature = "std", test))]
    {
        STATE.with(|c| c.get())
    }
    #[cfg(not(any(feature = "std", test)))]
    {
        ptr::null_mut()
    }
}

/// [`enter`] past its first check, out of line: the probe a traced fn
/// carries inline is only the load and test of the control word, a stack
/// pointer read and this call, small enough that the compiler still
/// inlines small traced fns (getters) into their callers as it inlines them
/// untraced. Inlined whole (the push and the clock read in every traced
/// fn), it made a whole traced crate several times slower even when not
/// recording. `sp` is the traced fn's own stack pointer, read inline.
#[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
#[inline(never)]
fn enter_out(site: &'static Site, c: u32, sp: usize, st: *mut ThreadState) -> Guard {
    #[cfg(not(any(feature = "std", test)))]
    let st = {
        let _ = st;
        // SAFETY: the platform's promise (see `platform`).
        unsafe { platform::__fgtrace_state() }
    };
    // SAFETY: as in `with_state`: this thread's own state, alive while the
    // thread is.
    let st = unsafe { &mut *st };
    enter_on_state(site, c, 0, sp, st)
}

#[inline(always)]
fn enter_on(site: &'static Site, c: u32, flags: u32, sp: usize) -> Guard {
    with_state(|st| enter_on_state(site, c, flags, sp, st))
}

/// The recording fast path: a session's steady state pushes; anything else
/// goes to [`enter_other`].
#[inline(always)]
fn enter_on_state(
    site: &'static Site,
    c: u32,
    flags: u32,
    sp: usize,
    st: &mut ThreadState,
) -> Guard {
    let dw = site.decision_word();
    let id = site.known_id();
    let gen = control::generation(c);
    if c & SESSION_ON != 0 && st.gen == gen && dw >> 3 == gen {
        if let Some(id) = id {
            return push(st, id, dw & 7, flags, sp);
        }
    }
    enter_other(site, c, sp, st, flags)
}

/// Everything but a recording session's steady state: a capturing thread, a
/// busy or exiting thread, or a first call.
#[inline(never)]
fn enter_other(site: &'static Site, c: u32, sp: usize, st: &mut ThreadState, flags: u32) -> Guard {
    let gen = control::generation(c);
    // First, a session with auto-exclude and no counter, the most frequent
    // case here (every call of such a session comes this way): the site's id
    // and decision read as the inlined path reads them, then its entry in the
    // thread's table. Busy, dead and capturing threads never have this
    // generation.
    if c & SESSION_ON != 0 && st.gen == gen | GEN_AUTO && flags & F_POLL == 0 {
        if let Some(id) = site.known_id() {
            if site.decision_word() == gen << 3 | Decision::Record as u32 {
                return enter_auto_known(st, id, flags, sp);
            }
        }
    }
    if st.gen == GEN_BUSY || st.gen == GEN_DEAD {
        return Guard::OFF;
    }
    if st.capture {
        return enter_capture(st, site, flags, sp);
    }
    if c & SESSION_ON == 0 {
        return Guard::OFF;
    }
    if st.gen == gen | GEN_COUNTED {
        return enter_counted(st, site, gen, flags, sp);
    }
    // `gen | GEN_AUTO`, with or without `GEN_COUNTED`.
    if (st.gen ^ gen) | GEN_COUNTED == GEN_TAGS {
        return enter_auto(st, site, gen, flags, sp);
    }
    enter_slow(st, site, gen, flags, sp)
}

/// A capturing thread's call. Out of line, so that [`enter_other`] stays a
/// dispatcher without a frame of its own.
#[inline(never)]
fn enter_capture(st: &mut ThreadState, site: &'static Site, flags: u32, sp: usize) -> Guard {
    let id = capture_site_id(site, false);
    if id >= MAX_SITES {
        return Guard::OFF;
    }
    capture_push(st, id, flags, sp)
}

/// A call in a session with a per-call counter: the counter is read before
/// `push` (whose clock read comes last), and the guard marked counted, so
/// its exit reads the counter again and records the delta.
#[inline(never)]
fn enter_counted(
    st: &mut ThreadState,
    site: &'static Site,
    gen: u32,
    flags: u32,
    sp: usize,
) -> Guard {
    let id = site.id();
    if id >= MAX_SITES {
        return Guard::OFF;
    }
    let Some(d) = decision(st, site, gen) else {
        return Guard::OFF;
    };
    push_counted(st, id, d, flags, sp)
}

/// [`enter_counted`] once the site's id and decision are known.
#[inline(always)]
fn push_counted(st: &mut ThreadState, id: u32, d: Decision, flags: u32, sp: usize) -> Guard {
    // SAFETY: the runtime keeps the counter alive while it is set.
    let Some(ctr) = (unsafe { st.counter.as_ref() }) else {
        return push(st, id, d as u32, flags, sp);
    };
    // SAFETY: the counter's own contract.
    #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
    let v = unsafe { (ctr.read)(ctr) };
    let mut g = push(st, id, d as u32, flags, sp);
    // On boards the counter is read right after the entry's clock read, as
    // `exit` reads it right after the exit's: the two counters then cover
    // the same stretch of the call, and instructions over cycles is its IPC.
    // All of a call's counters are read with interrupts masked, so that an
    // interrupt handler's work falls in all of them or in none.
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    // SAFETY: the platform's functions, paired below.
    let saved = unsafe { platform::__fgtrace_irq_save() };
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    // SAFETY: the counter's own contract.
    let v = unsafe { (ctr.read)(ctr) };
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    if g.slot() != 0 {
        let mut none = [0; platform::MORE_COUNTERS];
        // SAFETY: the platform's function; the slot was just pushed.
        unsafe { platform::__fgtrace_more_counters(g.slot(), false, &mut none) };
    }
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    // SAFETY: as above.
    unsafe {
        platform::__fgtrace_irq_restore(saved)
    };
    if g.slot() != 0 {
        // SAFETY: `push` just filled this slot.
        unsafe { (*st.frames.add(g.slot() as usize - 1)).ctr = v };
        g.set_counted();
    }
    g
}

/// A call in a session with automatic exclusion of tiny functions: a site
/// the layer above switched to count-only on this thread is counted in the
/// thread's table and not pushed (its callees are recorded, as below a
/// skipped function); any other call is recorded as usual by
/// [`enter_auto_record`] (with the counter, in a counted session too).
///
/// Only plain calls of recorded functions are ever counted-only: a graph
/// function's frame enables recording below it, and an async fn's polls
/// also make its future's record.
///
/// Kept small (a count-only call is this session's most frequent call):
/// the site's id and cached decision are read as the inlined fast path
/// reads them; anything else goes on to [`enter_auto_record`].
#[inline(never)]
fn enter_auto(st: &mut ThreadState, site: &'static Site, gen: u32, flags: u32, sp: usize) -> Guard {
    let dw = site.decision_word();
    if let Some(id) = site.known_id() {
        if dw == gen << 3 | Decision::Record as u32 && flags & F_POLL == 0 {
            debug_assert!(id < MAX_SITES && !st.count_only.is_null());
            // SAFETY: the table has MAX_SITES entries (a known id is below
            // that), alive while it is set; `GEN_AUTO` is set only with it.
            let e = unsafe { &*st.count_only.add(id as usize) };
            if e.load(Relaxed) & COUNT_ONLY != 0 {
                // Counted where the call would have been recorded: not
                // inside a hidden subtree, below a graph function if there
                // are any, above the depth limit.
                if st.hide == 0 && (!st.has_graph || st.graph != 0) && st.depth < st.max_depth {
                    count_one(e);
                }
                return Guard::OFF;
            }
        }
    }
    enter_auto_record(st, site, gen, flags, sp)
}

/// [`enter_auto`] from [`enter_other`]'s first check, for a plain call of a recorded
/// site in a session with auto-exclude and no counter: the site's id and
/// decision are known, so this is only the thread's table entry: counted,
/// or pushed as the fast path pushes.
#[inline(always)]
fn enter_auto_known(st: &mut ThreadState, id: u32, flags: u32, sp: usize) -> Guard {
    debug_assert!(id < MAX_SITES && !st.count_only.is_null());
    // SAFETY: as in `enter_auto`.
    let e = unsafe { &*st.count_only.add(id as usize) };
    if e.load(Relaxed) & COUNT_ONLY != 0 {
        if st.hide == 0 && (!st.has_graph || st.graph != 0) && st.depth < st.max_depth {
            count_one(e);
        }
        return Guard::OFF;
    }
    push(st, id, Decision::Record as u32, flags, sp)
}

/// [`enter_auto`]'s recorded calls (and a site's first call or decision).
#[inline(never)]
fn enter_auto_record(
    st: &mut ThreadState,
    site: &'static Site,
    gen: u32,
    flags: u32,
    sp: usize,
) -> Guard {
    let id = site.id();
    if id >= MAX_SITES {
        return Guard::OFF;
    }
    let Some(d) = decision(st, site, gen) else {
        return Guard::OFF;
    };
    if d == Decision::Record && flags & F_POLL == 0 {
        // SAFETY: as in `enter_auto`.
        let e = unsafe { &*st.count_only.add(id as usize) };
        if e.load(Relaxed) & COUNT_ONLY != 0 {
            // The site's first call in this session came after its switch
            // (a decision cached meanwhile): counted as in `enter_auto`.
            if st.hide == 0 && (!st.has_graph || st.graph != 0) && st.depth < st.max_depth {
                count_one(e);
            }
            return Guard::OFF;
        }
    }
    if st.gen & GEN_COUNTED != 0 {
        return push_counted(st, id, d, flags, sp);
    }
    push(st, id, d as u32, flags, sp)
}

/// One more call of a count-only site. Only the owning thread writes the
/// entry once its bit is set, but a signal handler on this thread may run
/// the same site in the middle: the increment is one instruction (x86-64:
/// an `add` to memory, which a signal cannot split and which needs no bus
/// lock, since no other thread writes the word), or an atomic add elsewhere.
#[inline(always)]
fn count_one(e: &CountWord) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `e` is a valid, aligned u64 that only this thread writes (see
    // `COUNT_ONLY`); the aligned 8-byte store cannot tear for a reader on
    // another thread, which only loads it.
    unsafe {
        core::arch::asm!("add qword ptr [{0}], 1", in(reg) e.as_ptr(), options(nostack))
    };
    #[cfg(not(target_arch = "x86_64"))]
    e.fetch_add(1, Relaxed);
}

#[inline(always)]
fn push(st: &mut ThreadState, id: u32, decision: u32, mut flags: u32, sp: usize) -> Guard {
    if st.hide != 0 {
        return Guard::OFF;
    }
    match Decision::from_bits(decision) {
        Some(Decision::Record) => {
            if st.has_graph && st.graph == 0 {
                return Guard::OFF;
            }
        }
        Some(Decision::GraphRoot) => flags |= F_GRAPH,
        Some(Decision::Hide) => flags |= F_HIDE,
        _ => return Guard::OFF,
    }
    let d = st.depth;
    if d >= st.max_depth {
        return Guard::OFF;
    }
    if d >= st.stack_cap {
        // Counted here, not by a call: a call that returns here would make
        // every fn that inlines `push` save callee-saved registers on its
        // recording path.
        // SAFETY: set with the buffer by the layer above, alive while it is.
        if let Some(o) = unsafe { st.overruns.as_ref() } {
            o.fetch_add(1, Relaxed);
        }
        return Guard::OFF;
    }
    if flags & F_HIDE != 0 {
        st.hide += 1;
    }
    if flags & F_GRAPH != 0 {
        st.graph += 1;
    }
    let serial = st.serial.wrapping_add(1) & SERIAL_MASK;
    st.serial = serial;
    // Reserve the slot before filling it: a handler that interrupts us from
    // here on pushes above it.
    st.depth = d + 1;
    compiler_fence(SeqCst);
    // SAFETY: d < stack_cap, the frames array has stack_cap entries.
    let f = unsafe { &mut *st.frames.add(d as usize) };
    f.site = id;
    f.tag = serial << 8 | flags;
    f.sp = sp;
    // The sampler's signal handler may read this frame: keep the compiler
    // from sinking the stores below.
    compiler_fence(Release);
    // The clock is read last on entry and first on exit, so the probe's own
    // bookkeeping is outside the measured duration.
    f.start = ticks();
    // Boards: a general push's guard has the `OTHER` bit, which tells it
    // from the first hart's plain guards (an async fn's polls come here
    // without the board's entry, and must exit as what they are).
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    let serial = serial | board::OTHER;
    Guard::new(d + 1, serial)
}

#[inline(always)]
fn stack_pointer() -> usize {
    let sp: usize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads a register, no memory access.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(target_arch = "x86")]
    // SAFETY: as above.
    unsafe {
        core::arch::asm!("mov {}, esp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(any(target_arch = "riscv64", target_arch = "riscv32"))]
    // SAFETY: as above.
    unsafe {
        core::arch::asm!("mv {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above.
    unsafe {
        core::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "riscv64",
        target_arch = "riscv32",
        target_arch = "aarch64"
    )))]
    {
        let marker = 0u8;
        sp = ptr::addr_of!(marker) as usize;
    }
    sp
}

/// Runs a hook with the thread marked busy, then restores `gen` (or sets
/// what the hook's result says).
///
/// On boards the hook also runs with interrupts masked: a traced call in an
/// interrupt handler would otherwise meet the busy state and go unrecorded;
/// masked, the interrupt waits until the hook is done and records as usual.
#[inline(always)]
fn busy<R>(st: &mut ThreadState, f: impl FnOnce(&mut ThreadState) -> R) -> R {
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    // SAFETY: the platform's functions, paired below.
    let saved = unsafe { platform::__fgtrace_irq_save() };
    let gen = st.gen;
    st.gen = GEN_BUSY;
    let r = f(st);
    st.gen = gen;
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    // SAFETY: as above.
    unsafe {
        platform::__fgtrace_irq_restore(saved)
    };
    r
}

/// First call of a site or thread in this session: join the session, get
/// the site's decision, then push.
#[cold]
#[inline(never)]
fn enter_slow(st: &mut ThreadState, site: &'static Site, gen: u32, flags: u32, sp: usize) -> Guard {
    if st.gen != gen && !join(st, gen) {
        return Guard::OFF;
    }
    if st.gen == gen | GEN_COUNTED {
        return enter_counted(st, site, gen, flags, sp);
    }
    if st.gen & GEN_AUTO != 0 {
        return enter_auto(st, site, gen, flags, sp);
    }
    let id = site.id();
    if id >= MAX_SITES {
        return Guard::OFF;
    }
    match decision(st, site, gen) {
        Some(d) => push(st, id, d as u32, flags, sp),
        None => Guard::OFF,
    }
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

// Out of line: inlined too, the exit's registers made every traced fn save
// more of them in its prologue, which the call pays even when not recording
// (counted by checks/probe-cost: 35 instructions per call off, against 27).
#[inline(never)]
fn exit(slot: u32, serial: u32) {
    let end = ticks();
    #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
    with_state(|st| exit_in(st, slot, serial, end));
    // On boards the pop and the record are one step for an interrupt
    // handler on this hart: one that ran between them would record its
    // calls at the popped frame's depth before that frame's own record, and
    // its records, in exit order, would no longer nest. Interrupts are
    // masked from the pop to the record's end (a few instructions); a full
    // buffer is handed over after, with interrupts as they were. A handler
    // that runs after the record filled the buffer, before its handoff,
    // finds it full here and hands it over itself, before its own record.
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    board::exit_board_any(slot, serial, end)
}

/// A board's counted call: the counter first, right after the clock (see
/// `push_counted`), then the rest.
#[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
#[inline(never)]
// The state last: the board's plain exit calls it with the guard's fields
// still in the argument registers they came in.
fn exit_board_counted(slot: u32, serial: u32, end: u64, st: &mut ThreadState) {
    // All counters with interrupts masked (see `push_counted`).
    // SAFETY: the platform's functions, paired below.
    let saved = unsafe { platform::__fgtrace_irq_save() };
    // SAFETY: as in `capture_push`.
    let read = unsafe { st.counter.as_ref() }.map(|c| unsafe { (c.read)(c) });
    let mut more = [0; platform::MORE_COUNTERS];
    // SAFETY: the platform's function, for the slot this guard pushed.
    let n = unsafe { platform::__fgtrace_more_counters(slot & !COUNTED, true, &mut more) };
    // SAFETY: as above.
    unsafe { platform::__fgtrace_irq_restore(saved) };
    let n = n.min(platform::MORE_COUNTERS);
    // Room for the call's record and all its counters in this buffer, so
    // they arrive together (the board hands over a buffer this close to
    // full, see `Hooks::handoff`).
    if st.count + 2 + n > st.limit && !st.buf.is_null() {
        handoff(st);
    }
    // SAFETY: the platform's functions, paired below.
    let saved = unsafe { platform::__fgtrace_irq_save() };
    let count = st.count;
    exit_counted_read(st, slot & !COUNTED, serial, end, read);
    if read.is_some() && st.count != count {
        // The call's record and its first counter were written: the further
        // counters follow them, numbered after it.
        for (k, &d) in more[..n].iter().enumerate() {
            write(st, RawCall::ext(ext::COUNTER, d, k as u64 + 1));
        }
    }
    // SAFETY: as above.
    unsafe { platform::__fgtrace_irq_restore(saved) };
    if st.count >= st.limit && !st.buf.is_null() {
        handoff(st);
    }
}

/// A board's exit other than [`exit_fast`]'s (out of line, so that the
/// common exit saves few registers).
#[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
#[inline(never)]
// The state last, as in `exit_board_counted`.
fn exit_board(slot: u32, serial: u32, end: u64, st: &mut ThreadState) {
    if st.count >= st.limit && !st.buf.is_null() {
        handoff(st);
    }
    // SAFETY: the platform's functions, paired below.
    let saved = unsafe { platform::__fgtrace_irq_save() };
    exit_in(st, slot, serial, end);
    // SAFETY: as above.
    unsafe { platform::__fgtrace_irq_restore(saved) };
    if st.count >= st.limit && !st.buf.is_null() {
        handoff(st);
    }
}

#[inline(always)]
fn exit_in(st: &mut ThreadState, slot: u32, serial: u32, end: u64) {
    if st.depth == slot {
        // SAFETY: slot <= depth <= stack_cap.
        let f = unsafe { *st.frames.add(slot as usize - 1) };
        if f.tag >> 8 == frame_serial(serial) {
            st.depth = slot - 1;
            return finish(st, f, slot - 1, end);
        }
    }
    exit_other(st, slot, serial, end)
}

/// The serial a guard's frame carries: the guard's own, or on boards 0 for
/// a plain guard, whose serial word says its session instead (see `board`).
#[inline(always)]
fn frame_serial(serial: u32) -> u32 {
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    {
        board::frame_serial(serial)
    }
    #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
    {
        serial
    }
}

/// Everything but the matching top frame: a counted capture call, leaked
/// guards above this one, or a stale guard whose frame is gone.
#[inline(never)]
fn exit_other(st: &mut ThreadState, slot: u32, serial: u32, end: u64) {
    if slot & COUNTED != 0 {
        return exit_counted(st, slot & !COUNTED, serial, end);
    }
    match pop_to(st, slot, serial) {
        Some(f) => finish(st, f, slot - 1, end),
        None => lost_exit(st, serial),
    }
}

/// A guard whose frame is gone (another exit popped it, or a call reuses
/// its slot): its call cannot be recorded. If this state's session pushed
/// it, the call is lost and counted with the state's other losses
/// (`dropped`); a guard pushed before the state joined its session (a call
/// begun in an earlier session, or in another state, a capture's) is no
/// loss of this one.
#[cold]
#[inline(never)]
fn lost_exit(st: &mut ThreadState, serial: u32) {
    if pushed_in_session(st, serial) {
        write_dropped(st);
    }
}

/// The guard with this serial was pushed since the state joined its
/// session: its serial comes after `joined_serial`, up to `serial`
/// (serials wrap at 24 bits). On boards a plain guard carries its
/// session's generation instead, compared with the state's.
#[inline(always)]
fn pushed_in_session(st: &ThreadState, serial: u32) -> bool {
    let since_join = |serial: u32| serial_since_join(st, serial);
    #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
    {
        guard_word::pushed_in_session(st.gen, serial, since_join)
    }
    #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
    {
        since_join(serial)
    }
}

/// A frame serial the state issued since it joined its session.
#[inline(always)]
fn serial_since_join(st: &ThreadState, serial: u32) -> bool {
    let since = serial.wrapping_sub(st.joined_serial) & SERIAL_MASK;
    let pushed = st.serial.wrapping_sub(st.joined_serial) & SERIAL_MASK;
    since != 0 && since <= pushed
}

/// Pops frames down to `slot` if the frame there is this guard's (frames
/// above it belong to leaked guards); `None` for a stale guard.
#[cold]
fn pop_to(st: &mut ThreadState, slot: u32, serial: u32) -> Option<Frame> {
    if st.depth < slot {
        return None; // the frame is gone (thread state was reset)
    }
    // SAFETY: slot <= depth <= stack_cap.
    let f = unsafe { *st.frames.add(slot as usize - 1) };
    if f.tag >> 8 != frame_serial(serial) {
        return None; // another call reuses the slot: not ours to pop
    }
    while st.depth > slot {
        st.depth -= 1;
        // SAFETY: depth < stack_cap.
        let tag = unsafe { (*st.frames.add(st.depth as usize)).tag };
        unflag(st, tag);
    }
    st.depth = slot - 1;
    Some(f)
}

#[inline(always)]
fn unflag(st: &mut ThreadState, tag: u32) {
    if tag & F_HIDE != 0 {
        st.hide -= 1;
    }
    if tag & F_GRAPH != 0 {
        st.graph -= 1;
    }
}

/// The popped frame's record.
#[inline(always)]
fn finish(st: &mut ThreadState, f: Frame, depth: u32, end: u64) {
    if f.tag & (F_HIDE | F_GRAPH | F_ALLOC) != 0 {
        return finish_flagged(st, f, depth, end, None);
    }
    let k = if f.tag & F_POLL != 0 {
        kind::POLL
    } else {
        kind::CALL
    };
    let dur = end.wrapping_sub(f.start);
    if dur < st.threshold {
        return;
    }
    write(
        st,
        RawCall::pack(f.start, depth, dur, f.site, panicking(), k),
    );
}

/// A popped frame with flags: a hidden or graph-function frame, or one the
/// counting allocator counted in, or a counted session call (`counter`: its
/// delta). Its allocation figures (callees included) go to its parent frame;
/// the figures and the counter delta follow its record as extension records.
#[inline(never)]
fn finish_flagged(st: &mut ThreadState, f: Frame, depth: u32, end: u64, counter: Option<u64>) {
    unflag(st, f.tag);
    let counts = if f.tag & F_ALLOC != 0 && !st.allocs.is_null() {
        // SAFETY: depth < stack_cap, `allocs` has stack_cap entries.
        let c = unsafe { *st.allocs.add(depth as usize) };
        if depth > 0 {
            let i = depth as usize - 1;
            // SAFETY: i < depth < stack_cap.
            let (pf, pa) = unsafe { (&mut *st.frames.add(i), &mut *st.allocs.add(i)) };
            if pf.tag & F_ALLOC == 0 {
                *pa = c;
                pf.tag |= F_ALLOC;
            } else {
                pa.add(&c);
            }
        }
        Some(c)
    } else {
        None
    };
    if f.tag & F_HIDE != 0 {
        return;
    }
    let k = if f.tag & F_POLL != 0 {
        kind::POLL
    } else {
        kind::CALL
    };
    let dur = end.wrapping_sub(f.start);
    if dur < st.threshold {
        return;
    }
    let (count, buf) = (st.count, st.buf);
    write(
        st,
        RawCall::pack(f.start, depth, dur, f.site, panicking(), k),
    );
    if st.count == count && st.buf == buf {
        return; // the call's record was not written: neither are its figures
    }
    if let Some(d) = counter {
        write(st, RawCall::ext(ext::COUNTER, d, 0));
    }
    let Some(c) = counts else {
        return;
    };
    if c.allocs != 0 || c.alloc_bytes != 0 {
        write(st, RawCall::ext(ext::ALLOCS, c.allocs, c.alloc_bytes));
    }
    if c.frees != 0 || c.freed_bytes != 0 {
        write(st, RawCall::ext(ext::FREES, c.frees, c.freed_bytes));
    }
    if c.reallocs != 0 {
        write(st, RawCall::ext(ext::REALLOCS, c.reallocs, 0));
    }
}

/// Adds what `add` says to the innermost open call of this thread, for the
/// counting allocator ([`crate::alloc`]). Does nothing while fgtrace's own
/// code runs on the thread (busy: its allocations are never counted), on
/// fgtrace's own threads, outside any traced call, or when nothing records.
/// No allocation, no lock; `add` runs on a plain per-thread entry.
#[inline]
pub(crate) fn count_alloc(add: impl FnOnce(&mut AllocCounts)) {
    if CONTROL.load(Relaxed) & ON_MASK == 0 {
        return;
    }
    with_state(|st| {
        if st.gen == GEN_BUSY || st.gen == GEN_DEAD || st.allocs.is_null() {
            return;
        }
        // SAFETY (volatile): as in `write`, a signal handler may move it.
        let d = unsafe { ptr::read_volatile(&st.depth) };
        if d == 0 || d > st.stack_cap {
            return;
        }
        let i = d as usize - 1;
        // SAFETY: i < stack_cap; both arrays have stack_cap entries.
        let (f, a) = unsafe { (&mut *st.frames.add(i), &mut *st.allocs.add(i)) };
        let tag = unsafe { ptr::read_volatile(&f.tag) };
        if tag & F_ALLOC == 0 {
            *a = AllocCounts::ZERO;
            unsafe { ptr::write_volatile(&mut f.tag, tag | F_ALLOC) };
        }
        add(a);
    })
}

#[inline(always)]
fn panicking() -> bool {
    #[cfg(any(feature = "std", test))]
    {
        std::thread::panicking()
    }
    #[cfg(not(any(feature = "std", test)))]
    {
        false
    }
}

/// Appends a record.
///
/// Re-entrancy: a signal or interrupt handler on this thread may run traced
/// code at any instruction. A write marks itself in progress (`writing`);
/// a record made while one is (or while a full buffer waits for its
/// handoff) is dropped and counted in `dropped`, never written over another
/// or past the buffer. A handler that runs before the mark is set makes its
/// whole write first; the interrupted write then reads the count and buffer
/// afresh.
#[inline(always)]
fn write(st: &mut ThreadState, rec: RawCall) {
    if st.buf.is_null() {
        return;
    }
    // On boards, `exit` masks interrupts around this (and hands a full
    // buffer over itself, after unmasking).
    // SAFETY (volatile): plain fields of this thread's state, read and
    // written as the instructions a signal handler may interrupt.
    if unsafe { ptr::read_volatile(&st.writing) } {
        return write_dropped(st);
    }
    unsafe { ptr::write_volatile(&mut st.writing, true) };
    compiler_fence(SeqCst);
    let i = unsafe { ptr::read_volatile(&st.count) };
    if i >= st.limit {
        // A full buffer whose handoff has not run yet: this interrupted it.
        unsafe { ptr::write_volatile(&mut st.writing, false) };
        return write_dropped(st);
    }
    // SAFETY: i & mask < capacity (straight: i < limit <= capacity; ring: mask).
    unsafe { st.buf.add(i & st.mask).write(rec) };
    unsafe { ptr::write_volatile(&mut st.count, i + 1) };
    // SAFETY: `published` is alive while `buf` is set.
    unsafe { (*st.published).store(i + 1, Release) };
    compiler_fence(SeqCst);
    unsafe { ptr::write_volatile(&mut st.writing, false) };
    #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
    if i + 1 >= st.limit {
        handoff(st);
    }
}

/// A record made inside another write (see `write`): counted, not written.
#[cold]
#[inline(never)]
fn write_dropped(st: &mut ThreadState) {
    // SAFETY: set with the buffer by the layer above.
    if let Some(d) = unsafe { st.dropped.as_ref() } {
        d.fetch_add(1, Relaxed);
    }
}

/// A full buffer: [`Hooks::handoff`] swaps in the next one.
///
/// On boards the hook runs with the thread not busy and interrupts as they
/// were: it swaps in a second buffer with interrupts masked, then sends the
/// full one while a traced interrupt handler records into the new one (the
/// sink's own calls, if it is traced, are recorded too).
#[cold]
#[inline(never)]
fn handoff(st: &mut ThreadState) {
    match hooks() {
        #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
        Some(h) => (h.handoff)(st),
        #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
        Some(h) => busy(st, |st| (h.handoff)(st)),
        None => {
            st.buf = ptr::null_mut();
            // The board's plain exit checks only the limit.
            #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
            {
                st.limit = 0;
            }
        }
    }
}

// ---------------------------------------------------------------- captures

/// Marks the guard of a call whose entry read a counter (bit 31 of the slot:
/// shadow stacks are far shallower).
const COUNTED: u32 = 1 << 31;

/// `site.id()`; a first call's registration is kept out of the counts (and
/// `first` takes that path for calibration). One out-of-line copy, so that
/// its cost is the one calibrated.
#[inline(never)]
pub fn capture_site_id(site: &'static Site, first: bool) -> u32 {
    // Not `&&`: the calibration's forced path must load the id too.
    let known = site.known_id();
    if known.is_some() & !first {
        return site.id();
    }
    capture_register(site)
}

/// The first call of a site: registration, uncounted.
#[cold]
#[inline(never)]
fn capture_register(site: &'static Site) -> u32 {
    let mut id = 0;
    match hooks() {
        Some(h) => (h.uncounted)(&mut || id = site.id()),
        None => id = site.id(),
    }
    id
}

/// A capture's entry: with counters, the counter is read before `push` (whose
/// clock read comes last), so neither measurement sees the other's probe.
#[inline(always)]
fn capture_push(st: &mut ThreadState, id: u32, flags: u32, sp: usize) -> Guard {
    // SAFETY: the counter outlives the capture that set it.
    let Some(ctr) = (unsafe { st.counter.as_ref() }) else {
        return push(st, id, Decision::Record as u32, flags, sp);
    };
    // SAFETY: the counter's own contract.
    let v = unsafe { (ctr.read)(ctr) };
    let mut g = push(st, id, Decision::Record as u32, flags, sp);
    if g.slot() != 0 {
        // SAFETY: `push` just filled this slot.
        unsafe { (*st.frames.add(g.slot() as usize - 1)).ctr = v };
        g.set_counted();
    }
    g
}

/// A counted call's exit: the counter first, then what `exit` does. Capture
/// frames are never hidden or graph roots (captures have no filters).
#[inline(never)]
fn exit_counted(st: &mut ThreadState, slot: u32, serial: u32, end: u64) {
    // SAFETY: as in `capture_push`.
    let read = unsafe { st.counter.as_ref() }.map(|c| unsafe { (c.read)(c) });
    exit_counted_read(st, slot, serial, end, read)
}

/// [`exit_counted`] once the counter is read (`None`: the thread has none).
#[inline(always)]
fn exit_counted_read(st: &mut ThreadState, slot: u32, serial: u32, end: u64, read: Option<u64>) {
    let now = read.unwrap_or(0);
    let Some(f) = pop_to(st, slot, serial) else {
        return lost_exit(st, serial);
    };
    if !st.capture {
        // A session: the delta follows the call's record (none if the
        // thread lost its counter meanwhile).
        let delta = read.map(|v| v.wrapping_sub(f.ctr));
        return finish_flagged(st, f, slot - 1, end, delta);
    }
    if !st.side.is_null() && st.count < st.limit {
        // SAFETY: `write` puts this record at index `count` < limit, and
        // `side` has `limit` slots.
        unsafe { *st.side.add(st.count) = now.wrapping_sub(f.ctr) };
    }
    finish(st, f, slot - 1, end);
}

#[cfg(test)]
mod tests;
