//! The entry paths past the control word's test: the session's steady state
//! (`push`), and out of line everything else: a capturing thread, a counted
//! session, automatic exclusion, a first call (joining a session, a site's
//! decision). Last, a capture's entry.

#[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
use super::guard_word;
#[cfg(not(any(feature = "std", test)))]
use super::platform;
#[cfg(any(feature = "std", test))]
use super::STATE;
use super::{
    decision, hooks, join, with_state, CountWord, Guard, ThreadState, COUNT_ONLY, F_GRAPH, F_HIDE,
    F_POLL, GEN_AUTO, GEN_BUSY, GEN_COUNTED, GEN_DEAD, GEN_TAGS, SERIAL_MASK,
};
use crate::clock::ticks;
use crate::control_word::{self, SESSION_ON};
use crate::record::MAX_SITES;
use crate::site::{Decision, Site};
#[cfg(not(any(feature = "std", test, feature = "irq-mask")))]
use core::ptr;
use core::sync::atomic::{compiler_fence, Ordering::*};

/// This thread's state, read in the traced fn itself where that is cheap
/// (std: a thread-local), null where [`enter_out`] asks the platform.
///
/// Not in `enter_out`: a thread-local of another crate is reached through
/// `__tls_get_addr`, a call the linker later rewrites into one load from
/// `%fs`, but a call when the compiler allocates registers: there
/// `enter_out` would save and restore six registers around it on every
/// call. The traced fn makes calls anyway.
#[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
#[inline(always)]
pub(super) fn caller_state() -> *mut ThreadState {
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
/// fn), it would make a whole traced crate several times slower, even when
/// not recording. `sp` is the traced fn's own stack pointer, read inline.
#[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
#[inline(never)]
pub(super) fn enter_out(site: &'static Site, c: u32, sp: usize, st: *mut ThreadState) -> Guard {
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
pub(super) fn enter_on(site: &'static Site, c: u32, flags: u32, sp: usize) -> Guard {
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
    let gen = control_word::generation(c);
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
pub(super) fn enter_other(
    site: &'static Site,
    c: u32,
    sp: usize,
    st: &mut ThreadState,
    flags: u32,
) -> Guard {
    let gen = control_word::generation(c);
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
    let serial = serial | guard_word::OTHER;
    Guard::new(d + 1, serial)
}

#[inline(always)]
pub(super) fn stack_pointer() -> usize {
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
    #[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
    // SAFETY: as above.
    unsafe {
        core::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "riscv64",
        target_arch = "riscv32",
        target_arch = "aarch64",
        target_arch = "arm"
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
pub(super) fn busy<R>(st: &mut ThreadState, f: impl FnOnce(&mut ThreadState) -> R) -> R {
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

// Captures (`fgtrace::testing`): a thread recording into a capture of its
// own, with an optional per-call counter read at entry and exit.

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
