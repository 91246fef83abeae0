//! `perf_event_open` on the own process: per-thread events, used two ways.
//!
//! * As a timer: a `cpu-clock`/`task-clock` software event (hrtimer based, so
//!   it reaches 10 kHz per thread where tick-driven POSIX CPU timers cap at
//!   the 250 Hz scheduler tick) whose overflow is delivered as a signal to the
//!   thread itself (`F_SETOWN_EX` with `F_OWNER_TID`, `F_SETSIG`); the
//!   signal handler then walks the frame pointers (see `signal`).
//! * As a sampler: any software or hardware event with
//!   `PERF_SAMPLE_IP | TID | TIME | CALLCHAIN` into an mmap ring buffer that
//!   a background thread drains; the kernel walks the user call chain.
//!   With the feature `unwind` the samples also carry the user registers
//!   and a copy of the stack, unwound through `.eh_frame` as they are drained.

use perf_event_open_sys as sys;
use std::io;

/// The `perf_event` events fgtrace can sample on, by their `perf` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfEvent {
    /// `cpu-clock`: a software timer (hrtimer) that fires while the thread
    /// runs; its rate is in Hz.
    CpuClock,
    /// `task-clock`: the same on the task's own CPU-time clock; rate in Hz.
    TaskClock,
    /// `page-faults`: one sample every N page faults.
    PageFaults,
    /// `context-switches`: one sample every N switches out.
    ContextSwitches,
    /// `cycles`: one sample every N CPU cycles (needs a PMU).
    Cycles,
    /// `instructions`: one sample every N retired instructions (needs a PMU).
    Instructions,
    /// `cache-misses`: one sample every N last-level cache misses (needs a PMU).
    CacheMisses,
    /// `branch-misses`: one sample every N mispredicted branches (needs a PMU).
    BranchMisses,
}

impl PerfEvent {
    /// Every event: the clocks, the software events, then the hardware ones.
    pub const ALL: [PerfEvent; 8] = [
        PerfEvent::CpuClock,
        PerfEvent::TaskClock,
        PerfEvent::PageFaults,
        PerfEvent::ContextSwitches,
        PerfEvent::Cycles,
        PerfEvent::Instructions,
        PerfEvent::CacheMisses,
        PerfEvent::BranchMisses,
    ];

    /// The `perf` name: `cpu-clock`, `cycles` ...
    pub fn name(self) -> &'static str {
        match self {
            PerfEvent::CpuClock => "cpu-clock",
            PerfEvent::TaskClock => "task-clock",
            PerfEvent::PageFaults => "page-faults",
            PerfEvent::ContextSwitches => "context-switches",
            PerfEvent::Cycles => "cycles",
            PerfEvent::Instructions => "instructions",
            PerfEvent::CacheMisses => "cache-misses",
            PerfEvent::BranchMisses => "branch-misses",
        }
    }

    /// The event `perf` calls `s`; `None` for a name not in [`PerfEvent::ALL`].
    pub fn from_name(s: &str) -> Option<PerfEvent> {
        PerfEvent::ALL.into_iter().find(|e| e.name() == s)
    }

    /// Clock events take a frequency in Hz; counted events a period.
    pub fn is_clock(self) -> bool {
        matches!(self, PerfEvent::CpuClock | PerfEvent::TaskClock)
    }

    fn type_config(self) -> (u32, u64) {
        use sys::bindings as b;
        let sw = |c: u32| (b::PERF_TYPE_SOFTWARE, c as u64);
        let hw = |c: u32| (b::PERF_TYPE_HARDWARE, c as u64);
        match self {
            PerfEvent::CpuClock => sw(b::PERF_COUNT_SW_CPU_CLOCK),
            PerfEvent::TaskClock => sw(b::PERF_COUNT_SW_TASK_CLOCK),
            PerfEvent::PageFaults => sw(b::PERF_COUNT_SW_PAGE_FAULTS),
            PerfEvent::ContextSwitches => sw(b::PERF_COUNT_SW_CONTEXT_SWITCHES),
            PerfEvent::Cycles => hw(b::PERF_COUNT_HW_CPU_CYCLES),
            PerfEvent::Instructions => hw(b::PERF_COUNT_HW_INSTRUCTIONS),
            PerfEvent::CacheMisses => hw(b::PERF_COUNT_HW_CACHE_MISSES),
            PerfEvent::BranchMisses => hw(b::PERF_COUNT_HW_BRANCH_MISSES),
        }
    }
}

/// How often an event samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Every {
    /// Nanoseconds of the clock event (clock events only).
    Nanos(u64),
    /// Events per sample.
    Events(u64),
}

pub use crate::perf_ring::{disable, enable, Fd};
use crate::perf_ring::{open, MmapRing};

fn attr(event: PerfEvent, every: Every) -> sys::bindings::perf_event_attr {
    let mut a = sys::bindings::perf_event_attr::default();
    let (t, c) = event.type_config();
    a.type_ = t;
    a.size = std::mem::size_of::<sys::bindings::perf_event_attr>() as u32;
    a.config = c;
    a.__bindgen_anon_1.sample_period = match every {
        Every::Nanos(n) | Every::Events(n) => n.max(1),
    };
    a.set_disabled(1);
    a.set_exclude_kernel(1);
    a.set_exclude_hv(1);
    a
}

// fcntl(2) constants the libc crate does not export (linux/fcntl.h).
const F_SETSIG: i32 = 10;
const F_SETOWN_EX: i32 = 15;
const F_OWNER_TID: i32 = 0;

#[repr(C)]
struct FOwnerEx {
    type_: i32,
    pid: i32,
}

/// A per-thread clock event that raises `signal` on `tid` at every overflow.
pub fn open_signal_timer(event: PerfEvent, every: Every, tid: i32, signal: i32) -> io::Result<Fd> {
    let mut a = attr(event, every);
    a.__bindgen_anon_2.wakeup_events = 1;
    let fd = open(&mut a, tid, event.name())?;
    let owner = FOwnerEx {
        type_: F_OWNER_TID,
        pid: tid,
    };
    // SAFETY: plain fcntl calls on our descriptor.
    unsafe {
        if libc::fcntl(fd.0, F_SETOWN_EX, &owner) != 0
            || libc::fcntl(fd.0, F_SETSIG, signal) != 0
            || libc::fcntl(fd.0, libc::F_SETFL, libc::O_ASYNC | libc::O_NONBLOCK) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(fd)
}

/// A sampled event with its mmap ring buffer (kernel call chains).
pub struct Ring {
    pub fd: Fd,
    ring: MmapRing,
    /// Whether samples carry the user registers and a copy of the stack
    /// (`Ring::open` with a non-zero `stack_copy`).
    stack: bool,
}

const RING_PAGES: usize = 64;
/// With stack copies: 1 MiB, room for about 120 samples of 8 KiB (12 ms at
/// 10 kHz; the sampler thread drains every 5 ms); `RING_PAGES` where the
/// locked-memory limit refuses that (then samples are lost at high rates,
/// and counted).
const STACK_RING_PAGES: usize = 256;

/// The `.eh_frame` unwinder the ring's samples go through (feature
/// `unwind`); without it, a type with no value.
#[cfg(feature = "unwind")]
pub type Cfi = super::cfi::Unwinder;
#[cfg(not(feature = "unwind"))]
pub enum Cfi {}

/// A raw sample read from a ring.
pub struct RingSample {
    pub ip: u64,
    pub time_mono_ns: u64,
    /// The kernel's frame-pointer walk.
    pub chain: Vec<u64>,
    /// The `.eh_frame` unwinder's chain over the sample's stack copy (IP
    /// first), when the ring copies stacks and the unwinder found more
    /// than the IP.
    pub unwound: Option<Vec<u64>>,
}

impl Ring {
    /// Opens `event` on `tid` with user-space call chains, timestamps on
    /// `CLOCK_MONOTONIC` (the trace clock's reference). With a non-zero
    /// `stack_copy`, samples also carry the user registers the unwinder
    /// starts from and the `stack_copy` bytes above the stack pointer.
    pub fn open(event: PerfEvent, every: Every, tid: i32, stack_copy: u32) -> io::Result<Ring> {
        let mut a = attr(event, every);
        a.sample_type = (sys::bindings::PERF_SAMPLE_IP
            | sys::bindings::PERF_SAMPLE_TID
            | sys::bindings::PERF_SAMPLE_TIME
            | sys::bindings::PERF_SAMPLE_CALLCHAIN) as u64;
        #[cfg(feature = "unwind")]
        if stack_copy > 0 {
            a.sample_type |= (sys::bindings::PERF_SAMPLE_REGS_USER
                | sys::bindings::PERF_SAMPLE_STACK_USER) as u64;
            a.sample_regs_user = super::cfi::PERF_REGS_MASK;
            // The kernel wants a multiple of 8.
            a.sample_stack_user = stack_copy & !7;
        }
        let stack = cfg!(feature = "unwind") && stack_copy > 0;
        a.set_exclude_callchain_kernel(1);
        a.set_use_clockid(1);
        a.clockid = libc::CLOCK_MONOTONIC;
        a.__bindgen_anon_2.wakeup_events = 0;
        let fd = open(&mut a, tid, event.name())?;
        let ring = match stack {
            true => {
                MmapRing::map(&fd, STACK_RING_PAGES).or_else(|_| MmapRing::map(&fd, RING_PAGES))
            }
            false => MmapRing::map(&fd, RING_PAGES),
        }?;
        Ok(Ring { fd, ring, stack })
    }

    /// Reads every complete record; samples go to `out` (their stack copies
    /// unwound by `cfi` at once, and dropped), lost counts are summed.
    pub fn drain(&mut self, out: &mut Vec<RingSample>, mut cfi: Option<&mut Cfi>) -> u64 {
        let mut lost = 0;
        let stack = self.stack;
        self.ring.drain(|r| {
            if r.ty == sys::bindings::PERF_RECORD_SAMPLE {
                // ip, pid/tid, time, nr, chain..., then with stack copies
                // abi, regs..., size, bytes..., dyn_size.
                let (Some(ip), Some(time), Some(nr)) = (r.u64_at(0), r.u64_at(16), r.u64_at(24))
                else {
                    return;
                };
                let unwound = match (stack, cfi.as_deref_mut()) {
                    (true, Some(u)) => unwind(r, nr, u),
                    _ => None,
                };
                let nr = nr
                    .min(1024)
                    .min((r.body.len().saturating_sub(32) / 8) as u64);
                let mut chain = Vec::with_capacity(nr as usize);
                for i in 0..nr as usize {
                    let Some(a) = r.u64_at(32 + i * 8) else { break };
                    if a >= sys::bindings::PERF_CONTEXT_MAX {
                        continue; // context markers (PERF_CONTEXT_USER, ...)
                    }
                    chain.push(a);
                }
                out.push(RingSample {
                    ip,
                    time_mono_ns: time,
                    chain,
                    unwound,
                });
            } else if r.ty == sys::bindings::PERF_RECORD_LOST {
                lost += r.u64_at(8).unwrap_or(0);
            }
        });
        lost
    }
}

/// The registers and stack copy after a sample's `nr`-entry call chain,
/// unwound; `None` where the record is short or holds no copy (a sample in
/// a kernel thread context, or one the kernel could not copy).
#[cfg(feature = "unwind")]
fn unwind(r: &crate::perf_ring::Record<'_>, nr: u64, cfi: &mut Cfi) -> Option<Vec<u64>> {
    use super::cfi::{Regs, PERF_REGS_MASK};
    let mut off = usize::try_from(nr).ok()?.checked_mul(8)?.checked_add(32)?;
    let abi = r.u64_at(off)?;
    off += 8;
    if abi == 0 {
        return None; // no user registers (PERF_SAMPLE_REGS_ABI_NONE)
    }
    let n = PERF_REGS_MASK.count_ones() as usize;
    let mut v = [0u64; 4];
    for (i, x) in v.iter_mut().take(n).enumerate() {
        *x = r.u64_at(off + i * 8)?;
    }
    off += n * 8;
    let regs = Regs::from_perf(&v[..n])?;
    let size = usize::try_from(r.u64_at(off)?).ok()?;
    off += 8;
    let bytes = r.body.get(off..off.checked_add(size)?)?;
    let dyn_size = usize::try_from(r.u64_at(off + size)?).ok()?;
    let mut frames = Vec::new();
    cfi.unwind(regs, &bytes[..dyn_size.min(size)], &mut frames)
        .then_some(frames)
}

#[cfg(not(feature = "unwind"))]
fn unwind(_: &crate::perf_ring::Record<'_>, _: u64, cfi: &mut Cfi) -> Option<Vec<u64>> {
    match *cfi {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_round_trip() {
        for e in PerfEvent::ALL {
            assert_eq!(PerfEvent::from_name(e.name()), Some(e));
        }
        assert_eq!(PerfEvent::from_name("cycels"), None);
    }

    #[test]
    fn events_map_to_their_kernel_type_and_config() {
        use crate::pmu::Counter;
        // The per-call counters name the same kernel events.
        for (e, c) in [
            (PerfEvent::TaskClock, Counter::TaskClock),
            (PerfEvent::Cycles, Counter::Cycles),
            (PerfEvent::Instructions, Counter::Instructions),
            (PerfEvent::CacheMisses, Counter::CacheMisses),
            (PerfEvent::BranchMisses, Counter::BranchMisses),
        ] {
            assert_eq!(e.type_config(), c.perf_event(), "{}", e.name());
        }
        let all: Vec<(u32, u64)> = PerfEvent::ALL.iter().map(|e| e.type_config()).collect();
        for (i, e) in PerfEvent::ALL.iter().enumerate() {
            assert!(!all[..i].contains(&all[i]), "{} repeats an event", e.name());
            let software = matches!(
                e,
                PerfEvent::CpuClock
                    | PerfEvent::TaskClock
                    | PerfEvent::PageFaults
                    | PerfEvent::ContextSwitches
            );
            assert_eq!(
                all[i].0 == sys::bindings::PERF_TYPE_SOFTWARE,
                software,
                "{}",
                e.name()
            );
        }
        assert_eq!(
            PerfEvent::CpuClock.type_config().1,
            sys::bindings::PERF_COUNT_SW_CPU_CLOCK as u64
        );
    }
}
