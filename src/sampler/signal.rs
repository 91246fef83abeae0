//! The signal handler and the per-thread sample buffers it writes.
//!
//! Like Zephyr's timer interrupt, the handler runs on the sampled thread. It
//! reads PC, FP, SP (and LR/RA) from the `ucontext`, walks the frame-pointer
//! chain with every read bounded by the thread's stack range, notes the
//! thread's traced shadow-stack depth, and writes one fixed-size slot into a
//! preallocated buffer. No allocation, no lock, no syscall, no `backtrace`.

use super::unwind::{self, Regs, StackBounds};
use crate::clock::ticks;
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
    /// Handlers currently using this buffer: the sampler waits for zero
    /// after deactivating it, before draining or reusing it.
    pub busy: AtomicU32,
    /// Stack range `[lo, hi)` once known; 0 = look it up by SP.
    lo: AtomicU64,
    hi: AtomicU64,
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
}

impl SampleBuf {
    pub fn new(slots: usize, ring: bool) -> SampleBuf {
        let n = Self::slots_for(slots);
        SampleBuf {
            active: AtomicBool::new(false),
            ring,
            slots: (0..n).map(|_| UnsafeCell::new([0; SLOT_WORDS])).collect(),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            busy: AtomicU32::new(0),
            lo: AtomicU64::new(0),
            hi: AtomicU64::new(0),
        }
    }

    pub fn set_bounds(&self, b: StackBounds) {
        self.lo.store(b.lo, Relaxed);
        self.hi.store(b.hi, Release);
    }

    fn cap(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Slots a buffer asked for `samples` gets.
    pub fn slots_for(samples: usize) -> usize {
        samples.next_power_of_two().max(16)
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
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
    pub fn drain(&self, out: &mut Vec<RawSample>) {
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
            out.push(RawSample {
                ticks: s[0],
                shadow_depth: (meta >> 32) as u32,
                cut: cut.checked_sub(1),
                frames: s[2..2 + n.min(MAX_FRAMES)].to_vec(),
            });
            tail += 1;
        }
        self.tail.store(tail, Release);
    }
}

/// Buffers by perf-event file descriptor (the handler finds its buffer from
/// `si_fd`; POSIX timers pass the pointer in `si_value` instead).
pub const MAX_FDS: usize = 1 << 16;
static BY_FD: [AtomicPtr<SampleBuf>; MAX_FDS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_FDS];

pub fn bind_fd(fd: i32, buf: &'static SampleBuf) -> bool {
    match BY_FD.get(fd as usize) {
        Some(slot) => {
            slot.store(buf as *const _ as *mut _, Release);
            true
        }
        None => false,
    }
}

pub fn unbind_fd(fd: i32) {
    if let Some(slot) = BY_FD.get(fd as usize) {
        slot.store(std::ptr::null_mut(), Release);
    }
}

/// Address ranges the handler may consult: executable text (to accept return
/// addresses) and writable anonymous/stack mappings (to bound stack reads of
/// threads registered from outside). A seqlock: the sampler thread writes,
/// handlers read and retry if a write overlapped.
pub struct Ranges {
    seq: AtomicU64,
    len: AtomicUsize,
    r: [UnsafeCell<(u64, u64)>; RANGES],
}

const RANGES: usize = 2048;

// SAFETY: seqlock protocol; readers validate with `seq`.
unsafe impl Sync for Ranges {}

impl Ranges {
    const fn new() -> Ranges {
        Ranges {
            seq: AtomicU64::new(0),
            len: AtomicUsize::new(0),
            r: [const { UnsafeCell::new((0, 0)) }; RANGES],
        }
    }

    /// Replaces the ranges (sorted by start) — sampler thread only.
    pub fn publish(&self, sorted: &[(u64, u64)]) {
        self.seq.fetch_add(1, AcqRel);
        let n = sorted.len().min(RANGES);
        for (i, &r) in sorted[..n].iter().enumerate() {
            // SAFETY: the single writer; readers retry on a seq change.
            unsafe { std::ptr::write_volatile(self.r[i].get(), r) };
        }
        self.len.store(n, Release);
        self.seq.fetch_add(1, AcqRel);
    }

    /// The range containing `addr` (binary search), if any.
    pub fn find(&self, addr: u64) -> Option<(u64, u64)> {
        for _ in 0..4 {
            let s0 = self.seq.load(Acquire);
            if s0 & 1 == 1 {
                continue;
            }
            let n = self.len.load(Acquire);
            let (mut lo, mut hi) = (0usize, n);
            let mut found = None;
            while lo < hi {
                let mid = (lo + hi) / 2;
                // SAFETY: index < RANGES; validated by the seq re-check.
                let (a, b) = unsafe { std::ptr::read_volatile(self.r[mid].get()) };
                if addr < a {
                    hi = mid;
                } else if addr >= b {
                    lo = mid + 1;
                } else {
                    found = Some((a, b));
                    break;
                }
            }
            if self.seq.load(Acquire) == s0 {
                return found;
            }
        }
        None
    }
}

pub static TEXT: Ranges = Ranges::new();
pub static STACKS: Ranges = Ranges::new();

/// The signal the sampler uses.
pub fn signal_number() -> i32 {
    libc::SIGPROF
}

/// Installs the handler (idempotent).
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
        if libc::sigaction(signal_number(), &sa, std::ptr::null_mut()) != 0 {
            DONE.store(false, Release);
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

const SI_TIMER: i32 = -2;
const POLL_IN: i32 = 1;
const POLL_HUP: i32 = 6;
/// Offset of `si_fd` (SIGPOLL) and `si_value` (timers) in `siginfo_t`.
const SI_WORD: usize = if cfg!(target_pointer_width = "64") {
    24
} else {
    12
};

extern "C" fn on_signal(_sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: errno is thread-local; restore it so the interrupted code sees no change.
    let errno = unsafe { *libc::__errno_location() };
    unsafe { take_sample(info, uc) };
    unsafe { *libc::__errno_location() = errno };
}

unsafe fn take_sample(info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    if info.is_null() || uc.is_null() {
        return;
    }
    let t = ticks();
    let code = (*info).si_code;
    let word = std::ptr::read_unaligned((info as *const u8).add(SI_WORD) as *const usize);
    let buf: *const SampleBuf = match code {
        SI_TIMER => word as *const SampleBuf,
        POLL_IN | POLL_HUP => match BY_FD.get(word as u32 as usize) {
            Some(p) => p.load(Acquire),
            None => return,
        },
        _ => return,
    };
    let Some(buf) = buf.as_ref() else { return };
    buf.busy.fetch_add(1, AcqRel);
    if buf.active.load(Acquire) {
        fill(buf, t, uc);
    }
    buf.busy.fetch_sub(1, Release);
}

unsafe fn fill(buf: &SampleBuf, t: u64, uc: *mut libc::c_void) {
    let Some(regs) = regs_of(uc) else { return };
    let mut bounds = StackBounds {
        lo: buf.lo.load(Relaxed),
        hi: buf.hi.load(Acquire),
    };
    if bounds.hi == 0 || regs.sp < bounds.lo || regs.sp >= bounds.hi {
        match STACKS.find(regs.sp) {
            Some((lo, hi)) => bounds = StackBounds { lo, hi },
            None => {
                bounds = StackBounds {
                    lo: regs.sp,
                    hi: regs.sp,
                }
            }
        }
    }
    let (depth, split_sp) = fgtrace_core::probe::shadow_top();
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
        b.drain(&mut out);
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
        r.drain(&mut out);
        assert_eq!(
            out.iter().map(|s| s.ticks).collect::<Vec<_>>(),
            (4..20).collect::<Vec<_>>()
        );
        assert_eq!(r.lost.load(Relaxed), 4);
    }
}
