//! The signal handler and the per-thread sample buffers it writes.
//!
//! Like Zephyr's timer interrupt, the handler runs on the sampled thread. It
//! reads PC, FP, SP (and LR/RA) from the `ucontext`, walks the frame-pointer
//! chain with every read bounded by the thread's own stack (its
//! `pthread_getattr_np` bounds, recorded at registration), notes the thread's
//! traced shadow-stack depth through a pointer kept in the buffer (never a
//! thread-local), and writes one fixed-size slot into a preallocated buffer.
//! No allocation, no lock, no syscall, no `backtrace`.
//!
//! The handler only writes into buffers it finds in [`SLOTS`], the registry
//! of the sampler's own buffers: a POSIX timer's signal must carry the exact
//! key its slot holds, a `perf_event` signal must come from a descriptor
//! bound to a slot. Any other `SIGPROF` (another library's timer or
//! `setitimer`, a `kill`) goes to the handler that was installed before
//! fgtrace's, as `sigaction` returned it.

use super::perf::Cfi;
use super::unwind::{self, Regs, StackBounds};
use fgtrace_core::probe::ThreadState;
use fgtrace_trace::clock::ticks;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};

/// Frames kept per sample (innermost first); deeper stacks are truncated.
pub const MAX_FRAMES: usize = 127;
const SLOT_WORDS: usize = MAX_FRAMES + 2;

/// One thread's sample slots: a single-producer (the handler) ring drained
/// by the sampler thread, or, in ring mode, overwritten and read at stop.
pub struct SampleBuf {
    pub active: AtomicBool,
    /// Overwrite the oldest slot when full (flight recorder) instead of
    /// counting the new sample as lost (Zephyr's behaviour).
    pub ring: bool,
    slots: Box<[UnsafeCell<[u64; SLOT_WORDS]>]>,
    pub head: AtomicU64,
    pub tail: AtomicU64,
    pub lost: AtomicU64,
    /// The thread's stack `[lo, hi)` (`pthread_getattr_np`); `hi == 0`: not
    /// known yet, and samples are the interrupted PC alone (no memory read).
    lo: AtomicU64,
    hi: AtomicU64,
    /// The thread's probe state (shadow stack), set when the thread registers
    /// itself; null: depth 0. Read by the handler instead of a thread-local.
    state: AtomicPtr<ThreadState>,
    /// While the bounds are unknown: `pthread_self()` and SP as the handler
    /// saw them, for the sampler thread to look the bounds up.
    pub seen_self: AtomicUsize,
    pub seen_sp: AtomicU64,
    /// Stack copies for the `.eh_frame` unwinder (feature `unwind`, stop
    /// mode only): sample `h` copies into entry `h % COPIES`, which the
    /// drainer reads while sample `h` still owns it. Empty: no copies.
    #[cfg(feature = "unwind")]
    copies: Box<[UnsafeCell<StackCopy>]>,
}

/// Bytes of stack a signal sample copies from its SP up (feature `unwind`).
#[cfg(feature = "unwind")]
pub const STACK_COPY: usize = 8192;
/// Stack copies per thread: 2 MiB, about 25 ms of samples at 10 kHz (the
/// sampler thread drains every 5 ms). A sample whose copy was overwritten
/// before the drain keeps the handler's frame-pointer walk.
#[cfg(feature = "unwind")]
const COPIES: usize = 256;

/// One sample's registers and top of stack, a seqlock: `seq` is the sample
/// number + 1 once written, 0 while the handler writes it.
#[cfg(feature = "unwind")]
pub struct StackCopy {
    seq: AtomicU64,
    /// IP, SP, FP, LR (0 where the architecture has none).
    regs: [u64; 4],
    len: u64,
    bytes: [u8; STACK_COPY],
}

// SAFETY: slots below `head` are only read after the release store of
// `head`; slots at `head` are only written by the owning thread's handler.
unsafe impl Sync for SampleBuf {}

/// A sample copied out of a buffer.
pub struct RawSample {
    pub ticks: u64,
    pub shadow_depth: u32,
    pub cut: Option<u32>,
    pub frames: Vec<u64>,
    /// The `.eh_frame` chain of the sample's stack copy (feature `unwind`).
    pub unwound: Option<Vec<u64>>,
}

/// `n` zeroed slots straight from the allocator (`calloc`: fresh pages are
/// zero already), so registering a thread does not write 4 MiB.
fn zeroed_slots(n: usize) -> Box<[UnsafeCell<[u64; SLOT_WORDS]>]> {
    // SAFETY: all-zero bytes are valid `u64`s.
    unsafe { zeroed(n) }
}

/// # Safety
/// All-zero bytes are a valid `T`.
unsafe fn zeroed<T>(n: usize) -> Box<[UnsafeCell<T>]> {
    let layout = std::alloc::Layout::array::<UnsafeCell<T>>(n.max(1)).expect("sample buffer size");
    // SAFETY: a non-zero-sized layout; all-zero bytes are a valid `T` (the
    // caller's word), and `UnsafeCell` has the layout of what it holds; the
    // Box frees it with the same layout.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut UnsafeCell<T>;
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n.max(1)))
    }
}

impl SampleBuf {
    pub fn new(slots: usize, ring: bool) -> SampleBuf {
        let n = Self::slots_for(slots);
        SampleBuf {
            active: AtomicBool::new(false),
            ring,
            slots: zeroed_slots(n),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            lo: AtomicU64::new(0),
            hi: AtomicU64::new(0),
            state: AtomicPtr::new(std::ptr::null_mut()),
            seen_self: AtomicUsize::new(0),
            seen_sp: AtomicU64::new(0),
            #[cfg(feature = "unwind")]
            copies: Box::new([]),
        }
    }

    /// The buffer with stack copies for the `.eh_frame` unwinder (not in
    /// ring mode: its samples wait for the stop, the copies would not).
    #[cfg(feature = "unwind")]
    pub fn with_stack_copies(mut self) -> SampleBuf {
        if !self.ring {
            // SAFETY: all-zero bytes are a valid `StackCopy` (seq 0: empty).
            self.copies = unsafe { zeroed(COPIES) };
        }
        self
    }

    /// Handler side: copies the stack from `regs.sp` up to the end of the
    /// thread's stack (`hi`, at most `STACK_COPY` bytes) and the registers
    /// for sample `h`. Reads only `[sp, hi)`, inside the thread's bounds.
    #[cfg(feature = "unwind")]
    unsafe fn copy_stack(&self, h: u64, regs: &Regs, hi: u64) {
        if self.copies.is_empty() || hi <= regs.sp {
            return;
        }
        let c = &mut *self.copies[(h % self.copies.len() as u64) as usize].get();
        c.seq.store(0, Relaxed);
        std::sync::atomic::fence(Release);
        let len = ((hi - regs.sp) as usize).min(STACK_COPY);
        std::ptr::copy_nonoverlapping(regs.sp as *const u8, c.bytes.as_mut_ptr(), len);
        c.regs = [regs.pc, regs.sp, regs.fp, regs.lr.unwrap_or(0)];
        c.len = len as u64;
        c.seq.store(h + 1, Release);
    }

    /// Drainer side: sample `h`'s stack copy unwound by `cfi`, if the copy
    /// is still sample `h`'s (not overwritten by a later one meanwhile).
    #[cfg(feature = "unwind")]
    fn unwind_copy(&self, h: u64, cfi: &mut Cfi, scratch: &mut Vec<u8>) -> Option<Vec<u64>> {
        if self.copies.is_empty() {
            return None;
        }
        let c = self.copies[(h % self.copies.len() as u64) as usize].get();
        // SAFETY: a seqlock read: the fields are copied out, then the
        // sequence is checked again; a copy torn by a handler writing
        // meanwhile is thrown away.
        let regs = unsafe {
            if (*c).seq.load(Acquire) != h + 1 {
                return None;
            }
            let regs = std::ptr::read_volatile(&(*c).regs);
            let len = (std::ptr::read_volatile(&(*c).len) as usize).min(STACK_COPY);
            scratch.clear();
            scratch.extend_from_slice(std::slice::from_raw_parts((*c).bytes.as_ptr(), len));
            std::sync::atomic::fence(Acquire);
            if (*c).seq.load(Relaxed) != h + 1 {
                return None;
            }
            regs
        };
        let regs = super::cfi::Regs {
            ip: regs[0],
            sp: regs[1],
            fp: regs[2],
            lr: regs[3],
        };
        let mut frames = Vec::new();
        cfi.unwind(regs, scratch, &mut frames).then_some(frames)
    }

    /// The thread's real stack bounds (its own `pthread_getattr_np`).
    pub fn set_bounds(&self, b: StackBounds) {
        self.lo.store(b.lo, Relaxed);
        self.hi.store(b.hi, Release);
    }

    pub fn bounds(&self) -> StackBounds {
        StackBounds {
            lo: self.lo.load(Relaxed),
            hi: self.hi.load(Acquire),
        }
    }

    /// The thread's probe state, set by the thread itself (null to forget it
    /// before the state's memory goes).
    pub fn set_state(&self, st: *mut ThreadState) {
        self.state.store(st, Release);
    }

    fn cap(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Slots a buffer asked for `samples` gets.
    pub fn slots_for(samples: usize) -> usize {
        samples.next_power_of_two().max(16)
    }

    /// Handler side: the next slot to fill, or `None` when full (stop mode).
    fn reserve(&self) -> Option<(u64, *mut [u64; SLOT_WORDS])> {
        let h = self.head.load(Relaxed);
        if !self.ring && h - self.tail.load(Acquire) >= self.cap() {
            self.lost.fetch_add(1, Relaxed);
            return None;
        }
        // The caller is the single producer; the consumer never reads slot
        // `h` before `head` passes it.
        Some((h, self.slots[(h % self.cap()) as usize].get()))
    }

    /// Drainer side: copies out complete samples (stop mode), or at stop the
    /// newest `cap` ones (ring mode, with the overwritten ones counted lost).
    /// With `cfi` (feature `unwind`), samples whose stack copy is intact
    /// also carry its `.eh_frame` chain (`RawSample::unwound`).
    pub fn drain(&self, out: &mut Vec<RawSample>, mut cfi: Option<&mut Cfi>) {
        #[cfg(feature = "unwind")]
        let mut scratch = Vec::new();
        let head = self.head.load(Acquire);
        let mut tail = self.tail.load(Relaxed);
        if self.ring && head - tail > self.cap() {
            self.lost.fetch_add(head - tail - self.cap(), Relaxed);
            tail = head - self.cap();
        }
        while tail < head {
            // SAFETY: slot below head, fully written before head was released.
            let s = unsafe { &*self.slots[(tail % self.cap()) as usize].get() };
            let meta = s[1];
            let n = (meta & 0xffff) as usize;
            let cut = ((meta >> 16) & 0xffff) as u32;
            #[cfg(feature = "unwind")]
            let unwound = match cfi.as_deref_mut() {
                Some(u) => self.unwind_copy(tail, u, &mut scratch),
                None => None,
            };
            #[cfg(not(feature = "unwind"))]
            let unwound = cfi.as_deref_mut().map(|u| match *u {});
            out.push(RawSample {
                ticks: s[0],
                shadow_depth: (meta >> 32) as u32,
                cut: cut.checked_sub(1),
                frames: s[2..2 + n.min(MAX_FRAMES)].to_vec(),
                unwound,
            });
            tail += 1;
        }
        self.tail.store(tail, Release);
    }
}

// ------------------------------------------------------------ the registry

/// Sampled threads at once, at most.
pub const MAX_THREADS: usize = 8192;
const INDEX_BITS: u32 = 13;
const _: () = assert!(1 << INDEX_BITS == MAX_THREADS);

/// One registry entry: which buffer a signal carrying `key` may write.
/// Entries are static and never freed, so a handler can always touch
/// `busy`, even while the buffer behind `buf` is being retired.
pub struct Slot {
    buf: AtomicPtr<SampleBuf>,
    key: AtomicUsize,
    /// Handlers inside this entry; a buffer is freed only after its entry
    /// was cleared and `busy` read zero.
    busy: AtomicU32,
}

pub static SLOTS: [Slot; MAX_THREADS] = [const {
    Slot {
        buf: AtomicPtr::new(std::ptr::null_mut()),
        key: AtomicUsize::new(0),
        busy: AtomicU32::new(0),
    }
}; MAX_THREADS];

/// The tag of every POSIX-timer key (its top bits), so that a stale signal
/// of ours is told apart from a foreign one.
#[cfg(target_pointer_width = "64")]
const TIMER_TAG: usize = 0xf9_7a << 48;
#[cfg(target_pointer_width = "64")]
const TAG_MASK: usize = 0xffff << 48;
#[cfg(not(target_pointer_width = "64"))]
const TIMER_TAG: usize = 0xf9 << 24;
#[cfg(not(target_pointer_width = "64"))]
const TAG_MASK: usize = 0xff << 24;
/// Keys of perf-event registrations: the tag and the descriptor.
const FD_TAG: usize = 1 << 31;

static NONCE: AtomicUsize = AtomicUsize::new(1);

/// A claimed registry entry.
#[derive(Debug)]
pub struct Claim {
    pub index: usize,
    /// What a POSIX timer's `sigev_value` carries.
    pub timer_key: usize,
}

/// Claims a free entry for `buf` (the caller keeps `buf` alive until
/// [`release`]). `None` when every entry is taken.
pub fn claim(buf: *const SampleBuf) -> Option<Claim> {
    for (index, s) in SLOTS.iter().enumerate() {
        if s.buf
            .compare_exchange(std::ptr::null_mut(), buf as *mut _, SeqCst, Relaxed)
            .is_ok()
        {
            let nonce = NONCE.fetch_add(1, Relaxed) & (!TAG_MASK >> INDEX_BITS);
            let timer_key = TIMER_TAG | nonce << INDEX_BITS | index;
            s.key.store(timer_key, SeqCst);
            return Some(Claim { index, timer_key });
        }
    }
    None
}

/// Binds the entry to a perf-event descriptor instead of a timer key.
pub fn bind_fd(fd: i32, index: usize) -> bool {
    match BY_FD.get(fd as usize) {
        Some(e) => {
            SLOTS[index].key.store(FD_TAG | fd as usize, SeqCst);
            e.store(index as u32 + 1, SeqCst);
            true
        }
        None => false,
    }
}

/// Forgets a descriptor: later signals from it are dropped as stale.
pub fn unbind_fd(fd: i32) {
    if let Some(e) = BY_FD.get(fd as usize) {
        e.store(STALE_FD, SeqCst);
    }
}

/// Clears an entry and waits (up to `patience`) until no handler is inside
/// it. `true`: nothing can write the buffer any more, it may be freed.
pub fn release(index: usize, patience: std::time::Duration) -> bool {
    let s = &SLOTS[index];
    s.key.store(0, SeqCst);
    let deadline = std::time::Instant::now() + patience;
    loop {
        if s.busy.load(SeqCst) == 0 {
            // A handler entering from here on reads the cleared key (it
            // counts itself in `busy` before it reads the key) and leaves
            // without touching `buf`.
            s.buf.store(std::ptr::null_mut(), SeqCst);
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::yield_now();
    }
}

/// Registry entries (+1) by perf-event file descriptor: the handler finds
/// its entry from `si_fd`.
pub const MAX_FDS: usize = 1 << 16;
const STALE_FD: u32 = u32::MAX;
static BY_FD: [AtomicU32; MAX_FDS] = [const { AtomicU32::new(0) }; MAX_FDS];

/// Address ranges the handler may consult: executable text (to accept return
/// addresses). Two copies, each a seqlock (a "latch", as Linux's
/// `seqcount_latch`): a writer fills the copy readers are not directed to,
/// then points them at it, so a writer preempted halfway never holds a
/// reader up (a handler that found no table would record the PC alone).
/// Writers take turns (`writing`): two interleaved writers could let a
/// reader accept an entry half from one table, half from the other.
pub struct Ranges {
    writing: AtomicBool,
    current: AtomicUsize,
    copies: [Copy; 2],
}

struct Copy {
    seq: AtomicU64,
    len: AtomicUsize,
    r: [UnsafeCell<(u64, u64)>; RANGES],
}

const RANGES: usize = 2048;

impl Copy {
    const fn new() -> Copy {
        Copy {
            seq: AtomicU64::new(0),
            len: AtomicUsize::new(0),
            r: [const { UnsafeCell::new((0, 0)) }; RANGES],
        }
    }
}

// SAFETY: seqlock protocol per copy; readers validate with `seq`, writers
// exclude each other with `writing`.
unsafe impl Sync for Ranges {}

impl Ranges {
    pub const fn new() -> Ranges {
        Ranges {
            writing: AtomicBool::new(false),
            current: AtomicUsize::new(0),
            copies: [Copy::new(), Copy::new()],
        }
    }

    /// Replaces the ranges (sorted by start). Any thread; writers take turns.
    pub fn publish(&self, sorted: &[(u64, u64)]) {
        while self
            .writing
            .compare_exchange_weak(false, true, Acquire, Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        let next = 1 - self.current.load(Relaxed);
        let c = &self.copies[next];
        let s = c.seq.load(Relaxed);
        c.seq.store(s + 1, Relaxed);
        std::sync::atomic::fence(Release);
        let n = sorted.len().min(RANGES);
        for (i, &r) in sorted[..n].iter().enumerate() {
            // SAFETY: the only writer (odd sequence); readers retry on a change.
            unsafe { std::ptr::write_volatile(c.r[i].get(), r) };
        }
        c.len.store(n, Release);
        c.seq.store(s + 2, Release);
        self.current.store(next, Release);
        self.writing.store(false, Release);
    }

    /// The range containing `addr` (binary search), if any.
    pub fn find(&self, addr: u64) -> Option<(u64, u64)> {
        for _ in 0..64 {
            let c = &self.copies[self.current.load(Acquire) & 1];
            let s0 = c.seq.load(Acquire);
            if s0 & 1 == 1 {
                // Directed here just before a writer took this copy again.
                std::hint::spin_loop();
                continue;
            }
            let n = c.len.load(Acquire).min(RANGES);
            let (mut lo, mut hi) = (0usize, n);
            let mut found = None;
            while lo < hi {
                let mid = (lo + hi) / 2;
                // SAFETY: index < RANGES; validated by the seq re-check.
                let (a, b) = unsafe { std::ptr::read_volatile(c.r[mid].get()) };
                if addr < a {
                    hi = mid;
                } else if addr >= b {
                    lo = mid + 1;
                } else {
                    found = Some((a, b));
                    break;
                }
            }
            std::sync::atomic::fence(Acquire);
            if c.seq.load(Relaxed) == s0 {
                return found;
            }
        }
        None
    }
}

impl Default for Ranges {
    fn default() -> Self {
        Ranges::new()
    }
}

pub static TEXT: Ranges = Ranges::new();

/// The signal the sampler uses.
pub fn signal_number() -> i32 {
    libc::SIGPROF
}

/// The `SIGPROF` action before fgtrace's (`sa_sigaction` or `sa_handler`
/// as a word, and its flags), for signals that are not fgtrace's.
static PREV_ACTION: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PREV_FLAGS: AtomicUsize = AtomicUsize::new(0);

/// Installs the handler (idempotent), keeping the previous action to chain to.
///
/// `SA_RESTART`: the wall sampler interrupts blocked threads, and restartable
/// system calls (`read` on a pipe or socket, `write`, `wait`, `open` of a
/// FIFO, `flock`, futex waits) resume instead of failing with `EINTR`. Calls
/// that signal(7) lists as never restarted (timeouts: `poll`, `epoll_wait`,
/// `select`, `nanosleep`, `sigtimedwait`, `io_getevents`, SysV IPC, sockets
/// with `SO_RCVTIMEO`/`SO_SNDTIMEO`, `inotify` reads) still return `EINTR`
/// when a sample lands in them (see docs/src/recording/sampling.md).
pub fn install() -> std::io::Result<()> {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, AcqRel) {
        return Ok(());
    }
    // SAFETY: a plain sigaction with a handler that is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        // Publish the old action before ours can run: read it first.
        if libc::sigaction(signal_number(), std::ptr::null(), &mut old) != 0 {
            DONE.store(false, Release);
            return Err(std::io::Error::last_os_error());
        }
        let prev = if old.sa_sigaction == on_signal as *const () as usize {
            libc::SIG_IGN
        } else {
            old.sa_sigaction
        };
        PREV_FLAGS.store(old.sa_flags as usize, Release);
        PREV_ACTION.store(prev, Release);
        if libc::sigaction(signal_number(), &sa, &mut old) != 0 {
            DONE.store(false, Release);
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

const SI_TIMER: i32 = -2;
const POLL_IN: i32 = 1;
const POLL_HUP: i32 = 6;
/// Offset of the `siginfo_t` union (after signo, errno, code).
const UNION: usize = if cfg!(target_pointer_width = "64") {
    16
} else {
    12
};
/// `si_value` of a timer signal: after `si_tid` and `si_overrun`.
const SI_VALUE: usize = UNION + 8;
/// `si_fd` of a SIGPOLL-style signal: after `si_band` (a long).
const SI_FD: usize = UNION + std::mem::size_of::<usize>();

/// Whose signal it is.
enum From {
    /// One of ours: the registry entry and the key it must hold.
    Ours(usize, usize),
    /// Ours, but from a timer or descriptor already retired: dropped.
    Stale,
    /// Somebody else's: chained to the previous action.
    Foreign,
}

unsafe fn whose(info: *const libc::siginfo_t) -> From {
    let code = (*info).si_code;
    let word = |off: usize| std::ptr::read_unaligned((info as *const u8).add(off) as *const usize);
    match code {
        SI_TIMER => {
            let v = word(SI_VALUE);
            if v & TAG_MASK != TIMER_TAG {
                return From::Foreign;
            }
            From::Ours(v & (MAX_THREADS - 1), v)
        }
        POLL_IN | POLL_HUP => {
            let fd = std::ptr::read_unaligned((info as *const u8).add(SI_FD) as *const i32);
            match BY_FD.get(fd as usize).map(|e| e.load(SeqCst)) {
                None | Some(0) => From::Foreign,
                Some(STALE_FD) => From::Stale,
                Some(i) => From::Ours(i as usize - 1, FD_TAG | fd as usize),
            }
        }
        _ => From::Foreign,
    }
}

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: errno is thread-local (a register-relative address, never
    // allocated); restore it so the interrupted code sees no change.
    let errno = unsafe { *libc::__errno_location() };
    if info.is_null() || uc.is_null() {
        return;
    }
    // SAFETY: the kernel's siginfo for this signal.
    match unsafe { whose(info) } {
        From::Ours(index, key) => unsafe { take_sample(index, key, uc) },
        From::Stale => {}
        From::Foreign => unsafe { chain(sig, info, uc) },
    }
    unsafe { *libc::__errno_location() = errno };
}

/// Hands a signal that is not fgtrace's to the action installed before.
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    let prev = PREV_ACTION.load(Acquire);
    match prev {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // SIGPROF's default action ends the process: do what would have
            // happened without fgtrace. (The signal is blocked in here; the
            // re-raised one arrives with the default action once we return.)
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
            libc::raise(sig);
        }
        f if PREV_FLAGS.load(Acquire) & libc::SA_SIGINFO as usize != 0 => {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(f);
            f(sig, info, uc)
        }
        f => {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(f);
            f(sig)
        }
    }
}

unsafe fn take_sample(index: usize, key: usize, uc: *mut libc::c_void) {
    let t = ticks();
    let slot = &SLOTS[index];
    slot.busy.fetch_add(1, SeqCst);
    if slot.key.load(SeqCst) == key {
        if let Some(buf) = slot.buf.load(SeqCst).as_ref() {
            if buf.active.load(Acquire) {
                fill(buf, t, uc);
            }
        }
    }
    slot.busy.fetch_sub(1, SeqCst);
}

/// The traced shadow-stack depth and the innermost open call's SP, from the
/// state the thread registered (the handler runs on that thread).
unsafe fn shadow_top(buf: &SampleBuf) -> (u32, u64) {
    let Some(st) = buf.state.load(Acquire).as_ref() else {
        return (0, u64::MAX);
    };
    let d = std::ptr::read_volatile(&st.depth).min(std::ptr::read_volatile(&st.stack_cap));
    let frames = std::ptr::read_volatile(&st.frames);
    if d == 0 || frames.is_null() {
        (0, u64::MAX)
    } else {
        (d, (*frames.add(d as usize - 1)).sp as u64)
    }
}

unsafe fn fill(buf: &SampleBuf, t: u64, uc: *mut libc::c_void) {
    let Some(regs) = regs_of(uc) else { return };
    let known = buf.bounds();
    // Read only the thread's own stack, from SP up: below SP nothing is a
    // frame, and outside the stack (a coroutine's, an alternate signal
    // stack, a stack not known yet) the sample is the PC alone.
    let bounds = if known.hi != 0 && regs.sp >= known.lo && regs.sp < known.hi {
        StackBounds {
            lo: regs.sp,
            hi: known.hi,
        }
    } else {
        if known.hi == 0 && buf.seen_self.load(Relaxed) == 0 {
            buf.seen_sp.store(regs.sp, Relaxed);
            buf.seen_self.store(libc::pthread_self() as usize, Release);
        }
        StackBounds {
            lo: regs.sp,
            hi: regs.sp,
        }
    };
    let (depth, split_sp) = shadow_top(buf);
    let Some((h, slot)) = buf.reserve() else {
        return;
    };
    // SAFETY: see `reserve`: this handler is the slot's only writer.
    let slot = &mut *slot;
    let Some(arch) = unwind::Arch::host() else {
        return;
    };
    let mem = unwind::RawMemory::new(bounds);
    let is_text = |a: u64| TEXT.find(a).is_some();
    let (header, frames) = slot.split_at_mut(2);
    let (walk, cut) = unwind::walk_split(arch, &regs, bounds, &mem, is_text, frames, split_sp);
    let cut = if depth == 0 {
        0
    } else {
        cut.map_or(0, |c| c as u64 + 1).min(0xffff)
    };
    #[cfg(feature = "unwind")]
    buf.copy_stack(h, &regs, bounds.hi);
    header[0] = t;
    header[1] = (depth as u64) << 32 | cut << 16 | walk.len as u64;
    // Publish only if nobody reset the buffer meanwhile.
    let _ = buf.head.compare_exchange(h, h + 1, Release, Relaxed);
}
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
unsafe fn regs_of(uc: *mut libc::c_void) -> Option<Regs> {
    let uc = &*(uc as *const libc::ucontext_t);
    let g = &uc.uc_mcontext.gregs;
    Some(Regs {
        pc: g[libc::REG_RIP as usize] as u64,
        fp: g[libc::REG_RBP as usize] as u64,
        sp: g[libc::REG_RSP as usize] as u64,
        lr: None,
    })
}

#[cfg(all(target_os = "linux", target_arch = "x86"))]
unsafe fn regs_of(uc: *mut libc::c_void) -> Option<Regs> {
    let uc = &*(uc as *const libc::ucontext_t);
    let g = &uc.uc_mcontext.gregs;
    Some(Regs {
        pc: g[libc::REG_EIP as usize] as u32 as u64,
        fp: g[libc::REG_EBP as usize] as u32 as u64,
        sp: g[libc::REG_ESP as usize] as u32 as u64,
        lr: None,
    })
}

#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
unsafe fn regs_of(uc: *mut libc::c_void) -> Option<Regs> {
    let uc = &*(uc as *const libc::ucontext_t);
    let m = &uc.uc_mcontext;
    Some(Regs {
        pc: m.pc,
        fp: m.regs[29],
        sp: m.sp,
        lr: Some(m.regs[30]),
    })
}

#[cfg(all(target_os = "linux", target_arch = "riscv64"))]
unsafe fn regs_of(uc: *mut libc::c_void) -> Option<Regs> {
    let uc = &*(uc as *const libc::ucontext_t);
    let g = &uc.uc_mcontext.__gregs;
    // __gregs: pc, ra, sp, gp, tp, t0-t2, s0/fp, ...
    Some(Regs {
        pc: g[0],
        fp: g[8],
        sp: g[2],
        lr: Some(g[1]),
    })
}

#[cfg(not(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )
)))]
unsafe fn regs_of(_uc: *mut libc::c_void) -> Option<Regs> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_find_by_binary_search() {
        static R: Ranges = Ranges::new();
        R.publish(&[(0x1000, 0x2000), (0x3000, 0x3100), (0x8000, 0x9000)]);
        assert_eq!(R.find(0x1000), Some((0x1000, 0x2000)));
        assert_eq!(R.find(0x30ff), Some((0x3000, 0x3100)));
        assert_eq!(R.find(0x2000), None);
        assert_eq!(R.find(0x9000), None);
        assert_eq!(R.find(0x10), None);
    }

    /// Several threads publish (the sampler thread and every thread that
    /// registers itself): a reader must never accept an entry torn between
    /// two tables. Table A holds `[8k, 8k + 1)`, table B `[8k + 2, 8k + 5)`
    /// (in units of 0x10000): a torn read shows up as a range of neither shape.
    #[test]
    fn concurrent_publishers_never_tear_an_entry() {
        static R: Ranges = Ranges::new();
        const U: u64 = 0x10000;
        let a: Vec<(u64, u64)> = (0..1500).map(|k| (k * 8 * U, k * 8 * U + U)).collect();
        let b: Vec<(u64, u64)> = (0..1500)
            .map(|k| (k * 8 * U + 2 * U, k * 8 * U + 5 * U))
            .collect();
        R.publish(&a);
        let stop = AtomicBool::new(false);
        let torn = std::thread::scope(|s| {
            for t in [&a, &b] {
                let stop = &stop;
                s.spawn(move || {
                    while !stop.load(Relaxed) {
                        R.publish(t);
                    }
                });
            }
            let reader = s.spawn(|| {
                let mut torn = 0u64;
                let mut x = 1u64;
                let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
                while std::time::Instant::now() < deadline {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let addr = (x % 1500) * 8 * U + if x & 1 == 0 { U / 2 } else { 3 * U };
                    if let Some((lo, hi)) = R.find(addr) {
                        let a = lo % (8 * U) == 0 && hi.wrapping_sub(lo) == U;
                        let b = lo % (8 * U) == 2 * U && hi.wrapping_sub(lo) == 3 * U;
                        if !(a || b) {
                            torn += 1;
                        }
                    }
                }
                torn
            });
            let torn = reader.join().unwrap();
            stop.store(true, Relaxed);
            torn
        });
        assert_eq!(torn, 0, "{torn} torn entries accepted");
    }

    /// A writer stopped halfway (preempted, or interrupted by the handler
    /// on its own thread) never keeps readers from the last complete table.
    #[test]
    fn a_writer_stopped_halfway_does_not_hold_readers_up() {
        static R: Ranges = Ranges::new();
        R.publish(&[(0x1000, 0x2000)]);
        // Halfway through the next publish: the writer holds the turn and
        // its copy's sequence is odd.
        R.writing.store(true, Relaxed);
        let next = 1 - R.current.load(Relaxed);
        R.copies[next].seq.fetch_add(1, Relaxed);
        assert_eq!(R.find(0x1800), Some((0x1000, 0x2000)));
        R.copies[next].seq.fetch_add(1, Relaxed);
        R.writing.store(false, Relaxed);
        R.publish(&[(0x3000, 0x4000)]);
        assert_eq!(R.find(0x1800), None);
        assert_eq!(R.find(0x3800), Some((0x3000, 0x4000)));
    }

    #[test]
    fn stop_mode_counts_lost_samples_and_ring_mode_keeps_the_newest() {
        let b = SampleBuf::new(16, false);
        for i in 0..20u64 {
            if let Some((h, s)) = b.reserve() {
                let s = unsafe { &mut *s };
                s[0] = i;
                s[1] = 1;
                b.head.store(h + 1, Release);
            }
        }
        let mut out = Vec::new();
        b.drain(&mut out, None);
        assert_eq!(out.len(), 16);
        assert_eq!(b.lost.load(Relaxed), 4);
        let r = SampleBuf::new(16, true);
        for i in 0..20u64 {
            let (h, s) = r.reserve().unwrap();
            let s = unsafe { &mut *s };
            s[0] = i;
            s[1] = 0;
            r.head.store(h + 1, Release);
        }
        let mut out = Vec::new();
        r.drain(&mut out, None);
        assert_eq!(
            out.iter().map(|s| s.ticks).collect::<Vec<_>>(),
            (4..20).collect::<Vec<_>>()
        );
        assert_eq!(r.lost.load(Relaxed), 4);
    }
}
