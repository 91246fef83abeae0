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

use perf_event_open_sys as sys;
use std::io;
use std::sync::atomic::{fence, Ordering};

/// The `perf_event` events fgtrace can sample on, by their `perf` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfEvent {
    CpuClock,
    TaskClock,
    PageFaults,
    ContextSwitches,
    Cycles,
    Instructions,
    CacheMisses,
    BranchMisses,
}

impl PerfEvent {
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

    pub fn from_name(s: &str) -> Option<PerfEvent> {
        PerfEvent::ALL.into_iter().find(|e| e.name() == s)
    }

    /// Clock events take a frequency in Hz; counted events a period.
    pub fn is_clock(self) -> bool {
        matches!(self, PerfEvent::CpuClock | PerfEvent::TaskClock)
    }

    fn type_config(self) -> (u32, u64) {
        match self {
            PerfEvent::CpuClock => (
                sys::bindings::PERF_TYPE_SOFTWARE,
                sys::bindings::PERF_COUNT_SW_CPU_CLOCK as u64,
            ),
            PerfEvent::TaskClock => (
                sys::bindings::PERF_TYPE_SOFTWARE,
                sys::bindings::PERF_COUNT_SW_TASK_CLOCK as u64,
            ),
            PerfEvent::PageFaults => (
                sys::bindings::PERF_TYPE_SOFTWARE,
                sys::bindings::PERF_COUNT_SW_PAGE_FAULTS as u64,
            ),
            PerfEvent::ContextSwitches => (
                sys::bindings::PERF_TYPE_SOFTWARE,
                sys::bindings::PERF_COUNT_SW_CONTEXT_SWITCHES as u64,
            ),
            PerfEvent::Cycles => (
                sys::bindings::PERF_TYPE_HARDWARE,
                sys::bindings::PERF_COUNT_HW_CPU_CYCLES as u64,
            ),
            PerfEvent::Instructions => (
                sys::bindings::PERF_TYPE_HARDWARE,
                sys::bindings::PERF_COUNT_HW_INSTRUCTIONS as u64,
            ),
            PerfEvent::CacheMisses => (
                sys::bindings::PERF_TYPE_HARDWARE,
                sys::bindings::PERF_COUNT_HW_CACHE_MISSES as u64,
            ),
            PerfEvent::BranchMisses => (
                sys::bindings::PERF_TYPE_HARDWARE,
                sys::bindings::PERF_COUNT_HW_BRANCH_MISSES as u64,
            ),
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

/// An open per-thread event; closed on drop.
pub struct Fd(pub i32);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.0) };
    }
}

/// Explains a refused `perf_event_open`, naming the setting to change.
pub fn explain(err: io::Error, what: &str) -> io::Error {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let hint = match err.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "the kernel refused: kernel.perf_event_paranoid is {paranoid} (user-space self-monitoring needs <= 2; \
             containers often block perf_event_open with seccomp)"
        ),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            "this CPU or VM does not expose that event (no PMU?)".to_string()
        }
        Some(libc::ENOSYS) => "this kernel has no perf_event_open".to_string(),
        _ => String::new(),
    };
    io::Error::new(
        err.kind(),
        format!("perf_event_open({what}) failed: {err}; {hint}"),
    )
}

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

fn open(a: &mut sys::bindings::perf_event_attr, tid: i32, what: &str) -> io::Result<Fd> {
    // SAFETY: valid attr; pid = tid, cpu = -1 (any), no group.
    let fd =
        unsafe { sys::perf_event_open(a, tid, -1, -1, sys::bindings::PERF_FLAG_FD_CLOEXEC as u64) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            // The thread exited: nothing was refused, keep the code for callers.
            return Err(e);
        }
        return Err(explain(e, what));
    }
    Ok(Fd(fd))
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

pub fn enable(fd: &Fd) {
    // SAFETY: ioctls on our descriptor.
    unsafe {
        sys::ioctls::RESET(fd.0, 0);
        sys::ioctls::ENABLE(fd.0, 0);
    }
}

pub fn disable(fd: &Fd) {
    // SAFETY: ioctl on our descriptor.
    unsafe { sys::ioctls::DISABLE(fd.0, 0) };
}

/// A sampled event with its mmap ring buffer (kernel call chains).
pub struct Ring {
    pub fd: Fd,
    base: *mut u8,
    len: usize,
    data_size: u64,
}

// SAFETY: the ring is read by one thread at a time (the drainer).
unsafe impl Send for Ring {}

const RING_PAGES: usize = 64;

/// A raw sample read from a ring.
pub struct RingSample {
    pub ip: u64,
    pub time_mono_ns: u64,
    pub chain: Vec<u64>,
}

impl Ring {
    /// Opens `event` on `tid` with user-space call chains, timestamps on
    /// `CLOCK_MONOTONIC` (the trace clock's reference).
    pub fn open(event: PerfEvent, every: Every, tid: i32) -> io::Result<Ring> {
        let mut a = attr(event, every);
        a.sample_type = (sys::bindings::PERF_SAMPLE_IP
            | sys::bindings::PERF_SAMPLE_TID
            | sys::bindings::PERF_SAMPLE_TIME
            | sys::bindings::PERF_SAMPLE_CALLCHAIN) as u64;
        a.set_exclude_callchain_kernel(1);
        a.set_use_clockid(1);
        a.clockid = libc::CLOCK_MONOTONIC;
        a.__bindgen_anon_2.wakeup_events = 0;
        let fd = open(&mut a, tid, event.name())?;
        let page = page_size();
        let len = page * (RING_PAGES + 1);
        // SAFETY: mapping the event's ring, as perf_event_open(2) describes.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.0,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::other(format!(
                "mmap of the perf ring failed: {} (raise kernel.perf_event_mlock_kb?)",
                io::Error::last_os_error()
            )));
        }
        Ok(Ring {
            fd,
            base: base as *mut u8,
            len,
            data_size: (page * RING_PAGES) as u64,
        })
    }

    fn header(&self) -> *mut sys::bindings::perf_event_mmap_page {
        self.base as *mut _
    }

    /// Reads every complete record; samples go to `out`, lost counts are summed.
    pub fn drain(&mut self, out: &mut Vec<RingSample>) -> u64 {
        let h = self.header();
        // SAFETY: the header page is mapped; data_head is written by the kernel.
        let head = unsafe { std::ptr::read_volatile(&(*h).data_head) };
        fence(Ordering::Acquire);
        let mut tail = unsafe { (*h).data_tail };
        let data = unsafe { self.base.add(page_size()) };
        let mut lost = 0;
        let size = self.data_size;
        let read = |off: u64, buf: &mut [u8]| {
            for (i, b) in buf.iter_mut().enumerate() {
                // SAFETY: index within the data area.
                *b = unsafe { *data.add(((off + i as u64) % size) as usize) };
            }
        };
        let u64_at = |off: u64| {
            let mut b = [0u8; 8];
            read(off, &mut b);
            u64::from_ne_bytes(b)
        };
        while tail + 8 <= head {
            let mut hb = [0u8; 8];
            read(tail, &mut hb);
            let ty = u32::from_ne_bytes([hb[0], hb[1], hb[2], hb[3]]);
            let rec_size = u16::from_ne_bytes([hb[6], hb[7]]) as u64;
            if rec_size < 8 || tail + rec_size > head {
                break;
            }
            let body = tail + 8;
            if ty == sys::bindings::PERF_RECORD_SAMPLE {
                let ip = u64_at(body);
                let time = u64_at(body + 16);
                let nr = u64_at(body + 24).min(1024);
                let mut chain = Vec::with_capacity(nr as usize);
                for i in 0..nr {
                    let a = u64_at(body + 32 + i * 8);
                    if a >= sys::bindings::PERF_CONTEXT_MAX {
                        continue; // context markers (PERF_CONTEXT_USER, ...)
                    }
                    chain.push(a);
                }
                out.push(RingSample {
                    ip,
                    time_mono_ns: time,
                    chain,
                });
            } else if ty == sys::bindings::PERF_RECORD_LOST {
                lost += u64_at(body + 8);
            }
            tail += rec_size;
        }
        fence(Ordering::Release);
        // SAFETY: tells the kernel the space up to `tail` is free.
        unsafe { std::ptr::write_volatile(&mut (*h).data_tail, tail) };
        lost
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping what `open` mapped.
        unsafe { libc::munmap(self.base as *mut _, self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_perf_event_open_names_the_setting() {
        let e = explain(io::Error::from_raw_os_error(libc::EACCES), "cycles");
        let s = e.to_string();
        assert!(
            s.contains("perf_event_open(cycles)") && s.contains("kernel.perf_event_paranoid"),
            "{s}"
        );
        let e = explain(io::Error::from_raw_os_error(libc::ENOENT), "cache-misses").to_string();
        assert!(e.contains("no PMU"), "{e}");
    }

    #[test]
    fn event_names_round_trip() {
        for e in PerfEvent::ALL {
            assert_eq!(PerfEvent::from_name(e.name()), Some(e));
        }
        assert_eq!(PerfEvent::from_name("cycels"), None);
    }
}
