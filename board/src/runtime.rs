//! The recording runtime on a board without an OS: RISC-V machine mode
//! (feature `riscv`) or x86_64 in ring 0 on one CPU (feature `x86_64`).
//!
//! * **State per hart.** Each hart has a static slot here (two record
//!   buffers, a sample ring, counters) and one in the core
//!   (`probe::board::STATES`: its `ThreadState` and shadow stack). The core
//!   asks which hart runs through `__fgtrace_hart` (`mhartid`; on x86_64
//!   the one CPU, 0), and masks interrupts only from a
//!   call's pop to the end of its record and while a hook runs
//!   (`__fgtrace_irq_save`/`restore`), so a traced interrupt handler neither
//!   corrupts the interrupted code's records nor meets a busy probe.
//! * **Stream mode**: a full buffer becomes [`CALLS`] frames on the sink,
//!   sent with interrupts as they were while the probe records into the
//!   hart's other buffer (a traced interrupt handler is recorded wherever it
//!   lands); what the sink refuses, or what no buffer can take, is counted. **Flight recorder**: the buffer is a
//!   ring of the last [`BUF_CALLS`] calls, sent on [`dump`] (a host command,
//!   or the panic handler).
//! * **Lean calls** (a clock that never repeats: `mcycle`, the TSC): the
//!   first hart's plain calls are written by the core into two buffers of
//!   their own (the flight recorder's ring the first), handed over through
//!   `__fgtrace_lean_full` and sent as [`LEAN_CALLS`]; those open at
//!   [`stop`] are counted as they end ([`LATE`]).
//! * The site table and the clock ([`META`], [`SITE`]) go out when a session
//!   starts, are repeated every [`REPEAT_EVERY`] frames, and again at stop, so
//!   a host that attaches late can still decode.
//! * **Sampler**: the firmware's timer interrupt calls [`sample`] with the
//!   trapped `pc`, `ra`, `s0` and `sp` (x86_64: `rip`, `rbp`, `rsp`); it
//!   walks the frame pointers with the core's unwinder, records where the innermost traced frame sits
//!   (the cut), and queues the stack; queued stacks go out as [`SAMPLES`]
//!   frames from the interrupted code's side, never from the interrupt.
//! * **Host commands** over the same link ([`poll`]): `record <ms> <hz>`,
//!   `flight <hz>`, `stop`, `dump`, as Zephyr's shell `perf record` does.

use commands::LineBuf;
pub use commands::{parse, poll, Command};
pub use counters::__fgtrace_more_counters;
use counters::{counter_names, CounterCell, Csr, MoreCell, NamesCell};
#[cfg(any(target_arch = "riscv32", target_arch = "riscv64"))]
use counters::{read_minstret, run_uncounted};
pub use lean::__fgtrace_lean_full;
use lean::{dump_lean, flush_lean, lean_join, lean_written, Lean};
pub use output::{text, textf};
use output::{with_out, with_out_open, NameCell, Out, OutCell};
use sampler::flush_samples;
pub use sampler::{flush, sample};

use crate::wire::{self, *};
use core::cell::UnsafeCell;
use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering::*};
use fgtrace_core::probe::board::{lean_writer, LeanCall};
use fgtrace_core::probe::{self, CounterReader, Hooks, ThreadState, GEN_TAGS};
use fgtrace_core::record::RawCall;
use fgtrace_core::site::{self, Decision, Site};
use fgtrace_core::{clock, control_word, unwind};

/// Harts with a slot of their own (others share the last one's: give each
/// hart its own by raising this, in the core, where their states are).
pub const MAX_HARTS: usize = probe::board::HARTS;
/// Shadow-stack depth per hart.
pub const STACK_DEPTH: usize = probe::board::STACK_DEPTH;
/// Records per hart: a stream batch, or the flight recorder's ring.
pub const BUF_CALLS: usize = 256;
/// Sampled stacks queued per hart between flushes.
pub const SAMPLE_SLOTS: usize = 32;
/// META and the site table are sent again after this many frames.
pub const REPEAT_EVERY: u32 = 64;

/// Where the stream goes: the one thing a board supplies (a UART, a buffer
/// in RAM, a debug probe's channel).
pub trait Sink {
    /// Writes `bytes`; returns how many were taken (the rest is counted as lost).
    fn write(&mut self, bytes: &[u8]) -> usize;
    /// Called with `true` before a session's last frames (its statistics
    /// and END, at [`stop`]) and `false` after: a sink that may refuse bytes
    /// (an RTT channel in a non-blocking mode) should take these whole,
    /// waiting if it must, as the host counts the losses from them.
    fn closing(&mut self, _on: bool) {}
}

/// Where host commands come from (the UART's receive side).
pub trait CommandInput {
    /// The next byte, if one has arrived.
    fn read(&mut self) -> Option<u8>;
}

/// A 64-bit counter without 64-bit atomics (riscv32 has none): every
/// access masks interrupts on this hart, and each counter belongs to one hart.
struct AtomicU64(UnsafeCell<u64>);

// SAFETY: see above.
unsafe impl Sync for AtomicU64 {}

impl AtomicU64 {
    const fn new(v: u64) -> Self {
        AtomicU64(UnsafeCell::new(v))
    }
    fn load(&self, _: core::sync::atomic::Ordering) -> u64 {
        let saved = __fgtrace_irq_save();
        // SAFETY: interrupts masked, the owning hart.
        let v = unsafe { core::ptr::read_volatile(self.0.get()) };
        __fgtrace_irq_restore(saved);
        v
    }
    fn store(&self, v: u64, _: core::sync::atomic::Ordering) {
        let saved = __fgtrace_irq_save();
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(self.0.get(), v) };
        __fgtrace_irq_restore(saved);
    }
    fn fetch_add(&self, d: u64, _: core::sync::atomic::Ordering) -> u64 {
        let saved = __fgtrace_irq_save();
        // SAFETY: as above.
        let v = unsafe { core::ptr::read_volatile(self.0.get()) };
        unsafe { core::ptr::write_volatile(self.0.get(), v.wrapping_add(d)) };
        __fgtrace_irq_restore(saved);
        v
    }
}

#[derive(Clone, Copy)]
struct Sample {
    ticks: u64,
    depth: u16,
    cut: u16,
    n: u8,
    frames: [u64; MAX_FRAMES],
    /// The frame pointer each frame's record was read at (0: none).
    fps: [u64; MAX_FRAMES],
}

impl Sample {
    const EMPTY: Sample = Sample {
        ticks: 0,
        depth: 0,
        cut: NO_CUT,
        n: 0,
        frames: [0; MAX_FRAMES],
        fps: [0; MAX_FRAMES],
    };
}

/// A hart's buffers and counters (its state and shadow stack are the
/// core's, `probe::board::STATES`).
struct Hart {
    /// Two record buffers: the probe writes one while the other is sent
    /// (the flight recorder's ring is the first).
    bufs: UnsafeCell<[[RawCall; BUF_CALLS]; 2]>,
    /// A buffer is being sent from this hart (the other one records).
    sending: AtomicBool,
    /// Further counters' readings at entry, per shadow-stack slot.
    more: UnsafeCell<[[u64; MORE_COUNTERS]; STACK_DEPTH]>,
    published: AtomicUsize,
    overruns: AtomicUsize,
    nested_dropped: AtomicUsize,
    /// Calls open on the hart when the session stopped: they end after it,
    /// so the session never records them (sent in [`STATS`]).
    open_at_stop: AtomicUsize,
    /// Another hart's records still in its buffer (never handed over) when
    /// the session stopped on this one: they never go out, and are sent
    /// in [`STATS`] among the records written (`written` counts only those
    /// handed over), so that the host counts them lost. Set by the
    /// stopping hart.
    unsent: AtomicUsize,
    written: AtomicU64,
    /// Records among those handed over that are not calls (see
    /// [`RawCall::non_calls`](fgtrace_core::record::RawCall::non_calls)), sent in [`STATS`].
    non_calls: AtomicU64,
    dropped: AtomicU64,
    samples: UnsafeCell<[Sample; SAMPLE_SLOTS]>,
    /// Samples queued: written by the interrupt, drained with interrupts masked.
    queued: AtomicUsize,
    samples_taken: AtomicU64,
    samples_dropped: AtomicU64,
}

// SAFETY: each slot is used by its own hart; the interrupt side and the
// drain never run at once on a hart (interrupts are masked while draining).
unsafe impl Sync for Hart {}

impl Hart {
    const fn new() -> Hart {
        Hart {
            bufs: UnsafeCell::new([[RawCall(0, 0); BUF_CALLS]; 2]),
            sending: AtomicBool::new(false),
            more: UnsafeCell::new([[0; MORE_COUNTERS]; STACK_DEPTH]),
            published: AtomicUsize::new(0),
            overruns: AtomicUsize::new(0),
            nested_dropped: AtomicUsize::new(0),
            open_at_stop: AtomicUsize::new(0),
            unsent: AtomicUsize::new(0),
            written: AtomicU64::new(0),
            non_calls: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            samples: UnsafeCell::new([Sample::EMPTY; SAMPLE_SLOTS]),
            queued: AtomicUsize::new(0),
            samples_taken: AtomicU64::new(0),
            samples_dropped: AtomicU64::new(0),
        }
    }
}

static HARTS: [Hart; MAX_HARTS] = [const { Hart::new() }; MAX_HARTS];

// The parts in files of their own are declared where they sit in the
// runtime's order, each followed by its statics: all of the runtime's
// memory is declared in this file, in that order, and each static keeps the
// path (`runtime::LEAN`) the firmware's symbols and layout know it by.
mod lean;

/// The first hart's lean records.
static LEAN: Lean = Lean {
    bufs: UnsafeCell::new(
        [[LeanCall {
            start: 0,
            end: 0,
            site: 0,
            sp: 0,
        }; BUF_CALLS]; 2],
    ),
    sending: AtomicBool::new(false),
    written: AtomicU64::new(0),
    dropped: AtomicU64::new(0),
    late: AtomicU64::new(0),
};

/// The running hart's index (0 in a firmware built for one hart).
#[cfg(all(
    any(target_arch = "riscv32", target_arch = "riscv64"),
    feature = "single-hart"
))]
#[inline(always)]
pub fn hart_id() -> usize {
    0
}

/// The running hart's index.
#[cfg(all(
    any(target_arch = "riscv32", target_arch = "riscv64"),
    not(feature = "single-hart")
))]
#[inline(always)]
pub fn hart_id() -> usize {
    let id: usize;
    // SAFETY: reads a CSR, machine mode.
    unsafe { core::arch::asm!("csrr {}, mhartid", out(reg) id, options(nomem, nostack)) };
    id.min(MAX_HARTS - 1)
}

/// The running CPU's index: x86_64 and Cortex-M boards run on one CPU.
#[cfg(any(target_arch = "x86_64", target_arch = "arm"))]
#[inline(always)]
pub fn hart_id() -> usize {
    0
}

fn hart() -> &'static Hart {
    &HARTS[hart_id()]
}

/// The core asks which hart runs (its state is the core's, per hart).
#[no_mangle]
pub fn __fgtrace_hart() -> usize {
    hart_id()
}

#[cfg(target_arch = "arm")]
mod cortex_m;
#[cfg(target_arch = "arm")]
pub use cortex_m::{
    __fgtrace_irq_restore, __fgtrace_irq_save, clock_refusal, ClockRefused, Direction,
};

/// Masks machine interrupts; returns the old `mstatus`.
#[cfg(any(target_arch = "riscv32", target_arch = "riscv64"))]
#[no_mangle]
pub fn __fgtrace_irq_save() -> usize {
    let old: usize;
    // SAFETY: clears mstatus.MIE, machine mode.
    unsafe { core::arch::asm!("csrrci {}, mstatus, 8", out(reg) old, options(nostack)) };
    old
}

/// Restores what [`__fgtrace_irq_save`] returned.
#[cfg(any(target_arch = "riscv32", target_arch = "riscv64"))]
#[no_mangle]
pub fn __fgtrace_irq_restore(old: usize) {
    // SAFETY: sets mstatus.MIE back if it was set (no branch: setting no
    // bit is no change), machine mode.
    unsafe { core::arch::asm!("csrs mstatus, {}", in(reg) old & 8, options(nostack)) };
}

/// Masks interrupts (`cli`); returns the old `rflags`.
#[cfg(target_arch = "x86_64")]
#[no_mangle]
pub fn __fgtrace_irq_save() -> usize {
    let old: usize;
    // SAFETY: reads rflags and clears IF, ring 0.
    unsafe { core::arch::asm!("pushfq", "pop {}", "cli", out(reg) old) };
    old
}

/// Restores what [`__fgtrace_irq_save`] returned (`sti` if IF was set).
#[cfg(target_arch = "x86_64")]
#[no_mangle]
pub fn __fgtrace_irq_restore(old: usize) {
    // SAFETY: puts rflags back as they were (IF with them; no branch),
    // ring 0.
    unsafe { core::arch::asm!("push {}", "popfq", in(reg) old) };
}
mod output;

/// The output: one frame at a time, to the board's sink.
static OUT: OutCell = OutCell(UnsafeCell::new(Out {
    scratch: [0; HEADER + MAX_PAYLOAD + TRAILER],
    sink: None,
    seq: 0,
    since_meta: 0,
}));
/// The output's owner: 0 when free, else the owning hart's index + 1.
static OUT_OWNER: AtomicUsize = AtomicUsize::new(0);
/// Bytes the sink refused.
static REFUSED: AtomicU64 = AtomicU64::new(0);
/// A site's first call could not announce it (the output was busy on its
/// hart): the whole site table goes out at the next flush.
static SITES_PENDING: AtomicBool = AtomicBool::new(false);
/// The board's name and its clock's, for META (set once in `init`).
static NAME: NameCell = NameCell(UnsafeCell::new(""));
static CLOCK_NAME: NameCell = NameCell(UnsafeCell::new(""));

// ----------------------------------------------------------------- session

struct Session {
    gen: AtomicU32,
    mode: AtomicU8,
    ticks_per_sec: AtomicU64,
    start_ticks: AtomicU64,
    /// 0: no deadline.
    deadline: AtomicU64,
    sample_hz: AtomicU32,
    /// Calls record their retired instructions (`minstret` deltas).
    instructions: AtomicBool,
    stack_lo: AtomicUsize,
    stack_hi: AtomicUsize,
    text_lo: AtomicUsize,
    text_hi: AtomicUsize,
}

static SESSION: Session = Session {
    gen: AtomicU32::new(0),
    mode: AtomicU8::new(MODE_STREAM),
    ticks_per_sec: AtomicU64::new(0),
    start_ticks: AtomicU64::new(0),
    deadline: AtomicU64::new(0),
    sample_hz: AtomicU32::new(0),
    instructions: AtomicBool::new(false),
    stack_lo: AtomicUsize::new(0),
    stack_hi: AtomicUsize::new(0),
    text_lo: AtomicUsize::new(0),
    text_hi: AtomicUsize::new(0),
};

/// The clock the probe reads and its rate. Which counter it is is chosen
/// when the firmware is built (the probe reads it inline, a few
/// instructions): `rdtime` by default on RISC-V, `mcycle` with this crate's
/// `mcycle` feature (machine mode; every cycle, so calls of a few
/// instructions get a duration; under qemu `-icount shift=0`, one tick per
/// instruction at 1 GHz). Only the matching constructor exists, so the rate
/// always describes the counter the probe reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    name: &'static str,
    ticks_per_sec: u64,
    /// The 32-bit counter a Cortex-M board's probe reads (see
    /// `Clock::dwt_cyccnt` and `Clock::counter`).
    #[cfg(target_arch = "arm")]
    counter: cortex_m::Counter,
}

impl Clock {
    /// `rdtime`, counting `hz` a second (10 MHz on qemu `virt`).
    #[cfg(all(
        not(feature = "mcycle"),
        any(target_arch = "riscv32", target_arch = "riscv64")
    ))]
    pub const fn rdtime(hz: u64) -> Clock {
        Clock {
            name: "rdtime",
            ticks_per_sec: hz,
        }
    }

    /// The TSC, counting `hz` a second (qemu `-icount shift=0`: 1 GHz, one
    /// tick per instruction).
    #[cfg(target_arch = "x86_64")]
    pub const fn tsc(hz: u64) -> Clock {
        Clock {
            name: "tsc",
            ticks_per_sec: hz,
        }
    }

    /// `mcycle`, counting `hz` cycles a second.
    #[cfg(all(
        feature = "mcycle",
        any(target_arch = "riscv32", target_arch = "riscv64")
    ))]
    pub const fn mcycle(hz: u64) -> Clock {
        Clock {
            name: "mcycle",
            ticks_per_sec: hz,
        }
    }

    /// Ticks per second.
    pub const fn ticks_per_sec(&self) -> u64 {
        self.ticks_per_sec
    }

    /// The counter's name, sent in [`META`] (the trace's clock source).
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

/// Reads the probe's clock.
#[inline(always)]
pub fn now() -> u64 {
    clock::ticks()
}

/// What the runtime needs to know about the board.
pub struct Board {
    /// Where the stream goes.
    pub sink: &'static mut dyn Sink,
    /// The clock the probe reads, with its rate.
    pub clock: Clock,
    /// Firmware name, sent in [`META`].
    pub name: &'static str,
    /// The stack the sampler may read: `[lo, hi)`.
    pub stack: (usize, usize),
    /// The code: return addresses outside `[lo, hi)` end a sampled stack.
    pub text: (usize, usize),
    /// Each call also records the instructions it retired (`minstret` at
    /// entry and exit; RISC-V machine mode), named `instructions` in the
    /// stream: `fgtrace report` then shows instructions per function,
    /// inclusive and self, and with a cycle clock (`mcycle`) their IPC. The
    /// probe takes its counted path then (about twice the instructions).
    /// Ignored where there is no such counter (x86_64 boards). With a clock
    /// other than `mcycle`, each call records its `mcycle` delta too, named
    /// `cycles` (IPC then comes from it).
    pub count_instructions: bool,
    /// `mhpmcounter`s the firmware has programmed, `(index 3..=31, name)`:
    /// with `count_instructions`, each call records their deltas too, named
    /// as given (at most [`MORE_COUNTERS`] further counters in all).
    pub hpm_counters: &'static [(u8, &'static str)],
}

/// Most further counters per call, `cycles` included.
pub const MORE_COUNTERS: usize = probe::platform::MORE_COUNTERS;

/// Sets the runtime up (once, before recording).
pub fn init(b: Board) {
    with_out(|o| o.sink = Some(b.sink));
    // SAFETY: before any output reads it.
    unsafe { *NAME.0.get() = b.name };
    let s = &SESSION;
    s.ticks_per_sec.store(b.clock.ticks_per_sec, Relaxed);
    let counting = b.count_instructions && INSTRUCTIONS.is_some();
    s.instructions.store(counting, Relaxed);
    // SAFETY: before any probe or output reads them.
    unsafe {
        let names = &mut *COUNTER_NAMES.0.get();
        let which = &mut *MORE.0.get();
        names.1 = 0;
        which.1 = 0;
        if counting {
            names.0[0] = "instructions";
            names.1 = 1;
            let mut add = |name: &'static str, csr: Csr| {
                if which.1 < MORE_COUNTERS {
                    which.0[which.1] = csr;
                    which.1 += 1;
                    names.0[names.1] = name;
                    names.1 += 1;
                }
            };
            if b.clock.name != "mcycle" {
                add("cycles", Csr::Mcycle);
            }
            for &(i, name) in b.hpm_counters {
                if (3..=31).contains(&i) {
                    add(name, Csr::Hpm(i));
                }
            }
        }
    }
    // SAFETY: before any output reads it.
    unsafe { *CLOCK_NAME.0.get() = b.clock.name };
    s.stack_lo.store(b.stack.0, Relaxed);
    s.stack_hi.store(b.stack.1, Relaxed);
    s.text_lo.store(b.text.0, Relaxed);
    s.text_hi.store(b.text.1, Relaxed);
    probe::install_hooks(&HOOKS);
    #[cfg(target_arch = "arm")]
    cortex_m::init_clock(&b.clock);
}

static HOOKS: Hooks = Hooks {
    join,
    decide,
    handoff,
    release,
    uncounted,
};

mod counters;

/// The instruction counter, where the hart has one (`minstret`).
#[cfg(any(target_arch = "riscv32", target_arch = "riscv64"))]
static INSTRUCTIONS: Option<CounterCell> = Some(CounterCell(CounterReader {
    read: read_minstret,
    page: core::ptr::null(),
    fd: -1,
    uncounted: run_uncounted,
}));
#[cfg(any(target_arch = "x86_64", target_arch = "arm"))]
static INSTRUCTIONS: Option<CounterCell> = None;
/// The per-call counters' names, and how many (set once in `init`).
static COUNTER_NAMES: NamesCell = NamesCell(UnsafeCell::new(([""; 1 + MORE_COUNTERS], 0)));
/// The further counters read per call, and how many (set once in `init`).
static MORE: MoreCell = MoreCell(UnsafeCell::new(([Csr::Mcycle; MORE_COUNTERS], 0)));

fn join(st: &mut ThreadState, _gen: u32) -> bool {
    let h = hart();
    st.counter = match (&INSTRUCTIONS, SESSION.instructions.load(Relaxed)) {
        (Some(c), true) => &c.0,
        _ => core::ptr::null(),
    };
    let flight = SESSION.mode.load(Relaxed) == MODE_FLIGHT;
    st.frames = probe::board::hart().frames();
    st.stack_cap = STACK_DEPTH as u32;
    // The frames still on the shadow stack are calls begun before this
    // session (the hart joins at its first entry in it): the stop that
    // ended theirs counted them as open. Their exits must not record them
    // here too: from depth 0, every such exit finds its slot above the
    // stack (the calls made since, nested inside them, have all returned),
    // so it takes the general exit, which finds no frame and counts nothing
    // (the guard names an earlier session, or a serial from before this
    // join).
    st.depth = 0;
    st.buf = h.bufs.get() as *mut RawCall;
    h.sending.store(false, Relaxed);
    st.count = 0;
    st.non_calls = 0;
    h.published.store(0, Relaxed);
    if flight {
        st.mask = BUF_CALLS - 1;
        st.limit = usize::MAX;
    } else {
        st.mask = usize::MAX;
        st.limit = BUF_CALLS;
    }
    st.max_depth = u32::MAX;
    st.threshold = 0;
    st.has_graph = false;
    st.published = &h.published;
    st.overruns = &h.overruns;
    st.dropped = &h.nested_dropped;
    if hart_id() == 0 {
        lean_join();
    }
    true
}

fn decide(site: &'static Site, _gen: u32) -> Option<Decision> {
    // A site's first call in this session: the host learns its name now (or
    // at the next flush, if this call interrupted the hart's own output).
    if with_out(|o| o.site(site)).is_none() {
        SITES_PENDING.store(true, Relaxed);
    }
    Some(Decision::Record)
}

/// A full stream buffer: sent while recording goes on in the other one
/// (the core calls this with interrupts as they were, see [`drain`]).
fn handoff(st: &mut ThreadState) {
    let id = hart_id();
    if drain(st, id, true) {
        flush_samples(id);
    }
}

/// Sends the running hart's stream records. With interrupts masked, the
/// full buffer is swapped for the hart's other one; then it is sent with
/// interrupts as they were, so a traced interrupt handler that runs during
/// the (slow) output records into the other buffer. If that one fills up
/// meanwhile, it is sent next; a handler's records beyond it (the core
/// finds the buffer full while this one is being sent) are counted as
/// dropped. An interrupt handler whose call fills the buffer while this
/// hart is already sending leaves it to the sender. Returns whether this
/// call sent (it is not such a nested call).
/// `full`: only a full buffer (a handoff; the buffer may have been handed
/// over already by an interrupt handler), else any records (a flush).
fn drain(st: &mut ThreadState, id: usize, full: bool) -> bool {
    let h = &HARTS[id];
    let mut once = !full;
    loop {
        let saved = __fgtrace_irq_save();
        // SAFETY (volatile): an interrupt handler on this hart moves
        // `count` and `buf` between our instructions; masked now.
        let (n, buf) = unsafe {
            (
                core::ptr::read_volatile(&st.count),
                core::ptr::read_volatile(&st.buf),
            )
        };
        let nested = h.sending.load(Relaxed);
        // "Full": too full for a counted call's records (the call and its
        // counters), which the core hands over before writing them.
        let more = if once {
            n > 0
        } else {
            n + MORE_COUNTERS + 2 > st.limit
        };
        if nested || !more || buf.is_null() || st.limit == usize::MAX {
            __fgtrace_irq_restore(saved);
            return !nested;
        }
        // Claimed, then the session checked: [`stop`] closes `HANDOFFS`,
        // then waits for every other hart's `sending` to clear (both
        // sequentially consistent), so either this hart sees the stop or
        // the stopping hart sees this send and waits for it (it goes out
        // before END, and is among the `written` the stop then sends).
        h.sending.store(true, SeqCst);
        fence(SeqCst);
        if !HANDOFFS.load(SeqCst) || st.gen & !GEN_TAGS != SESSION.gen.load(Relaxed) {
            // The session these records belong to is over: the stopping
            // hart counted them (and this hart's open calls) and they never
            // go out; the buffer stays closed until the hart joins the next
            // session (its exits meanwhile write nothing).
            h.sending.store(false, Release);
            close_state(st);
            __fgtrace_irq_restore(saved);
            return false;
        }
        once = false;
        let bufs = h.bufs.get() as *mut RawCall;
        // SAFETY: the hart's two buffers, BUF_CALLS records apart.
        let other = if buf == bufs {
            unsafe { bufs.add(BUF_CALLS) }
        } else {
            bufs
        };
        // SAFETY: as above; masked.
        unsafe {
            core::ptr::write_volatile(&mut st.buf, other);
            core::ptr::write_volatile(&mut st.count, 0);
        }
        h.published.store(0, Relaxed);
        let first = h.written.fetch_add(n as u64, Relaxed);
        __fgtrace_irq_restore(saved);
        // SAFETY: the buffer just swapped out; `n` records were written and
        // nothing writes it until the next swap, which waits for `sending`.
        let recs = unsafe { core::slice::from_raw_parts(buf, n) };
        // Records that are not calls are counted apart: the host counts
        // the calls among the numbered records it never received.
        match with_out_open(|o| o.calls(id as u8, first, recs)) {
            Some(k) => h.non_calls.fetch_add(k, Relaxed),
            None => {
                let k = wire::non_calls(recs);
                h.dropped.fetch_add(n as u64 - k, Relaxed);
                h.non_calls.fetch_add(k, Relaxed)
            }
        };
        h.sending.store(false, Release);
        if SITES_PENDING.swap(false, Relaxed) {
            with_out(|o| o.meta());
        }
    }
}

fn release(_: &mut ThreadState) {}

fn uncounted(f: &mut dyn FnMut()) {
    f()
}

/// Starts a session: `mode` is [`MODE_STREAM`] or [`MODE_FLIGHT`]; samples
/// at `sample_hz` (0: none); stops by itself after `ms` milliseconds (0: when
/// [`stop`] is called).
pub fn start(mode: u8, sample_hz: u32, ms: u32) {
    #[cfg(target_arch = "arm")]
    if cortex_m::refuse_start() {
        return;
    }
    let s = &SESSION;
    let gen = (s.gen.load(Relaxed) + 1) & control_word::GEN_MASK;
    s.gen.store(gen, Relaxed);
    s.mode.store(mode, Relaxed);
    s.sample_hz.store(sample_hz, Relaxed);
    let now = clock::ticks();
    s.start_ticks.store(now, Relaxed);
    let tps = s.ticks_per_sec.load(Relaxed);
    let dl = if ms == 0 {
        0
    } else {
        now + tps / 1000 * ms as u64
    };
    s.deadline.store(dl, Relaxed);
    for h in &HARTS {
        h.written.store(0, Relaxed);
        h.non_calls.store(0, Relaxed);
        h.dropped.store(0, Relaxed);
        // The core's own count of what it could not record (a write
        // interrupted, a guard whose frame is gone): this session's only.
        h.nested_dropped.store(0, Relaxed);
        h.samples_taken.store(0, Relaxed);
        h.samples_dropped.store(0, Relaxed);
        h.overruns.store(0, Relaxed);
        h.open_at_stop.store(0, Relaxed);
        h.unsent.store(0, Relaxed);
        h.queued.store(0, Relaxed);
    }
    REFUSED.store(0, Relaxed);
    LEAN.written.store(0, Relaxed);
    LEAN.dropped.store(0, Relaxed);
    with_out(|o| o.meta());
    // Every hart joins the new session on its next call (the plain entry
    // would match the last session's decisions otherwise).
    probe::board::reset_fast();
    HANDOFFS.store(true, SeqCst);
    control_word::session_on(gen);
    probe::board::set_on(true);
}

/// Harts may hand their full buffers over (see [`drain`]): set when a
/// session starts, cleared by [`stop`] once the stopping hart's own records
/// went out.
static HANDOFFS: AtomicBool = AtomicBool::new(false);

/// Whether a session records.
pub fn recording() -> bool {
    control_word::session_is_on()
}

/// The session's duration has run out.
pub fn expired() -> bool {
    let dl = SESSION.deadline.load(Relaxed);
    dl != 0 && clock::ticks() >= dl
}

/// The session's sampling rate in Hz (0: not sampling): the firmware sets
/// its timer from it.
pub fn sample_hz() -> u32 {
    SESSION.sample_hz.load(Relaxed)
}

/// Ends the session: what the running hart still holds goes out (a stream
/// buffer's tail, or the whole flight recorder), then the counters, the site
/// table again, and [`END`].
///
/// The calls open on the running hart at this point (its shadow stack's
/// depth: [`stop`]'s callers, or the code an interrupt handler that stops
/// interrupted) end after the session: they are counted (`STATS`, shown by
/// the host as calls still open at stop) and never recorded, as their
/// records would belong to a session that is over. The hart's buffer is
/// closed for that: their exits pop their frames and write nothing (the
/// plain exit finds no room, the general one no buffer), until the hart
/// joins the next session.
///
/// Every other hart that joined the session may be running, or parked, or
/// halted: its buffer and shadow stack are its own, so they are not
/// touched, only read (see [`count_other_harts`]): its calls open at this
/// point and its records not yet handed over are counted lost on it, never
/// sent; its own next handoff finds the session over and closes its
/// buffer instead (see [`drain`]).
pub fn stop() {
    probe::board::set_on(false);
    control_word::session_off();
    probe::board::reset_fast();
    let id = hart_id();
    let saved = __fgtrace_irq_save();
    // SAFETY: this hart's state, interrupts masked.
    let open = unsafe { probe::with_thread_state(|st| st.depth.min(st.stack_cap)) };
    HARTS[id].open_at_stop.store(open as usize, Relaxed);
    __fgtrace_irq_restore(saved);
    if SESSION.mode.load(Relaxed) == MODE_FLIGHT {
        dump();
    } else {
        flush_calls(id);
        flush_lean();
    }
    close();
    flush_samples(id);
    count_other_harts(id);
    with_out(|o| {
        if let Some(sink) = o.sink.as_deref_mut() {
            sink.closing(true);
        }
        for (h, x) in HARTS.iter().enumerate() {
            if x.written.load(Relaxed) != 0
                || x.unsent.load(Relaxed) != 0
                || x.samples_taken.load(Relaxed) != 0
                || x.open_at_stop.load(Relaxed) != 0
                || (h == 0 && lean_written() != 0)
            {
                o.stats(h);
            }
        }
        o.meta();
        let gen = SESSION.gen.load(Relaxed);
        o.frame(END, 0, |w| {
            w.u32(gen);
        });
        if let Some(sink) = o.sink.as_deref_mut() {
            sink.closing(false);
        }
    });
}

/// What a stop on hart `id` counts for every other hart that joined the
/// session, once those harts can no longer hand a buffer over: the calls
/// open on it (its shadow stack's depth) and its records still in its
/// buffer, never handed over (stream mode: those since its last handoff;
/// a flight recorder's ring: all its records, as only the stopping hart's
/// ring is sent). The host counts both lost on that hart and names them.
///
/// Another hart's state is only read here, never written: it may be
/// recording at this very moment (its exits go on after the stop; its
/// entries stop as soon as it sees the session off). The figures are exact
/// for a hart that makes no traced call or return meanwhile (parked,
/// halted, or in untraced code); for one that does, the reads race with
/// it: a call returning at that instant may be counted twice (open and
/// written) or not at all (its pop read, its record not yet), and a call
/// whose entry read the session on just before the stop, and pushes its
/// frame after this read, is not counted (a window of one entry's few
/// instructions; closing it would take a fence on every entry, which every
/// call would pay). Records written after the read (returns of the calls
/// counted open) never go out, so nothing is counted twice otherwise.
fn count_other_harts(id: usize) {
    // No hart hands a buffer over from here on (see `drain`); wait for the
    // sends that began before, so that they go out before END and their
    // records are among the `written` sent after. Not if this hart holds
    // the output (a stop from an interrupt handler that interrupted this
    // hart's own output): those sends wait for it, and go out after END.
    HANDOFFS.store(false, SeqCst);
    fence(SeqCst);
    let gen = SESSION.gen.load(Relaxed);
    let flight = SESSION.mode.load(Relaxed) == MODE_FLIGHT;
    for (k, x) in HARTS.iter().enumerate() {
        if k == id {
            continue;
        }
        while x.sending.load(SeqCst) && OUT_OWNER.load(Relaxed) != id + 1 {
            core::hint::spin_loop();
        }
        let st = probe::board::STATES[k].state();
        // SAFETY: plain reads of another hart's state (see above): words it
        // writes whole, read whole.
        let (joined, depth, count, non_calls) = unsafe {
            (
                core::ptr::addr_of!((*st).gen).read_volatile(),
                core::ptr::addr_of!((*st).depth).read_volatile(),
                core::ptr::addr_of!((*st).count).read_volatile(),
                core::ptr::addr_of!((*st).non_calls).read_volatile(),
            )
        };
        if joined & !GEN_TAGS != gen {
            // Not in this session (never joined it, or joining right now):
            // its state is another session's.
            continue;
        }
        x.open_at_stop
            .store(depth.min(STACK_DEPTH as u32) as usize, Relaxed);
        // A stream buffer holds at most BUF_CALLS records; a flight
        // recorder's count is all its records, of which those that are not
        // calls are no lost calls.
        let unsent = if flight {
            count.saturating_sub(non_calls)
        } else {
            count.min(BUF_CALLS)
        };
        x.unsent.store(unsent, Relaxed);
    }
}

/// Closes the running hart's buffer once its records went out: nothing is
/// written to it until the hart joins the next session (which sets it
/// anew), so that no exit after [`stop`] leaves a record there for the next
/// session to find.
fn close() {
    let saved = __fgtrace_irq_save();
    // SAFETY: this hart's state, interrupts masked; `drain` and `dump`
    // test for a null buffer.
    unsafe {
        probe::with_thread_state(|st| {
            close_state(st);
            st.count = 0;
        })
    };
    // The lean writer too: a lean call open at stop has no frame to count
    // it by, so its exit finds the writer closed and is counted then
    // (`__fgtrace_lean_full`).
    if hart_id() == 0 {
        // SAFETY: the first hart's writer, interrupts masked.
        unsafe {
            let w = &mut *lean_writer();
            w.ptr = core::ptr::null_mut();
            w.lim = core::ptr::null_mut();
        }
        LEAN.late.store(0, Relaxed);
    }
    __fgtrace_irq_restore(saved);
}

/// Closes a hart's buffer (its own, interrupts masked): a `limit` of 0
/// sends every exit off the plain path, whose only test is the room left;
/// the general exit, finding no buffer, pops the frame and writes nothing.
/// The count stays: it is what the buffer held (see [`count_other_harts`]),
/// until the hart joins the next session.
fn close_state(st: &mut ThreadState) {
    st.buf = core::ptr::null_mut();
    st.limit = 0;
}

/// The running hart's unsent stream records (see [`drain`]).
fn flush_calls(id: usize) {
    // SAFETY: this hart's state; `drain` masks interrupts while it changes it.
    unsafe { probe::with_thread_state(|st| drain(st, id, false)) };
}

/// Sends the flight recorder's ring (the last [`BUF_CALLS`] calls, oldest
/// first) of the running hart, and its counters.
pub fn dump() {
    let id = hart_id();
    let saved = __fgtrace_irq_save();
    // SAFETY: this hart's state, interrupts masked: nothing writes the ring.
    unsafe {
        probe::with_thread_state(|st| {
            if st.buf.is_null() || st.limit != usize::MAX {
                return;
            }
            let total = st.count;
            let first = total.saturating_sub(BUF_CALLS);
            let h = &HARTS[id];
            h.written.store(total as u64, Relaxed);
            h.dropped.store(first as u64, Relaxed);
            // Every record the ring took that is not a call, kept or
            // overwritten: the host subtracts those it never received from
            // the overwritten calls.
            h.non_calls.store(st.non_calls as u64, Relaxed);
            let ring = core::slice::from_raw_parts(st.buf, BUF_CALLS);
            let start = first % BUF_CALLS;
            let n = total - first;
            with_out(|o| {
                let head = &ring[start..(start + n).min(BUF_CALLS)];
                o.calls(id as u8, first as u64, head);
                if start + n > BUF_CALLS {
                    let more = first as u64 + head.len() as u64;
                    o.calls(id as u8, more, &ring[..start + n - BUF_CALLS]);
                }
                if id == 0 {
                    dump_lean(o);
                }
                o.stats(id);
            });
        })
    };
    __fgtrace_irq_restore(saved);
}

/// For the panic handler: stop recording and send what there is.
pub fn on_panic() {
    if recording() {
        stop();
    }
}

mod sampler;

mod commands;

/// The host command being received, and its length so far.
static LINE: LineBuf = LineBuf(UnsafeCell::new(([0; 64], 0)));
