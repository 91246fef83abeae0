//! Hardware counters a thread opens on itself (`perf_event_open`, user space
//! only, self-monitoring): what `testing`'s per-call instruction counts and
//! `Config::counters` for sessions share. Opening checks that the counter
//! exists and moves, so a machine without a PMU (a VM, a container, a CI
//! runner) is an error naming the counter, never zeros.

use std::fmt;
use std::str::FromStr;

/// A per-call hardware counter (uftrace's `read:pmu-*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Retired instructions (`PERF_COUNT_HW_INSTRUCTIONS`).
    Instructions,
    /// CPU cycles (`PERF_COUNT_HW_CPU_CYCLES`).
    Cycles,
    /// Last-level cache misses (`PERF_COUNT_HW_CACHE_MISSES`).
    CacheMisses,
    /// Mispredicted branches (`PERF_COUNT_HW_BRANCH_MISSES`).
    BranchMisses,
    /// CPU time of the thread in ns (`PERF_COUNT_SW_TASK_CLOCK`): a software
    /// counter, there on every Linux machine, read with a syscall (slow:
    /// about a microsecond per read; for CPU time per call where no PMU is).
    TaskClock,
}

impl Counter {
    /// The name traces and views use (`instructions`, `cycles`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Counter::Instructions => "instructions",
            Counter::Cycles => "cycles",
            Counter::CacheMisses => "cache-misses",
            Counter::BranchMisses => "branch-misses",
            Counter::TaskClock => "task-clock",
        }
    }

    /// `(perf type, config)`.
    #[cfg(target_os = "linux")]
    pub(crate) fn perf_event(self) -> (u32, u64) {
        use perf_event_open_sys::bindings as b;
        let hw = |c: u32| (b::PERF_TYPE_HARDWARE, c as u64);
        match self {
            Counter::Instructions => hw(b::PERF_COUNT_HW_INSTRUCTIONS),
            Counter::Cycles => hw(b::PERF_COUNT_HW_CPU_CYCLES),
            Counter::CacheMisses => hw(b::PERF_COUNT_HW_CACHE_MISSES),
            Counter::BranchMisses => hw(b::PERF_COUNT_HW_BRANCH_MISSES),
            Counter::TaskClock => (b::PERF_TYPE_SOFTWARE, b::PERF_COUNT_SW_TASK_CLOCK as u64),
        }
    }
}

impl fmt::Display for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Counter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "instructions" | "instr" => Counter::Instructions,
            "cycles" | "cpu-cycles" => Counter::Cycles,
            "cache-misses" => Counter::CacheMisses,
            "branch-misses" => Counter::BranchMisses,
            "task-clock" => Counter::TaskClock,
            _ => {
                return Err(format!(
                    "unknown counter `{s}` (instructions, cycles, cache-misses, branch-misses, task-clock)"
                ))
            }
        })
    }
}

/// One counter open on the calling thread, with its metadata page mapped
/// (for `rdpmc`). Closed when dropped.
#[derive(Debug)]
pub struct SelfCounter {
    /// The `perf_event_open` file descriptor.
    pub fd: i32,
    /// The counter's metadata page (`perf_event_mmap_page`), mapped read-only:
    /// `rdpmc` reads need its index and offset.
    pub page: *mut libc::c_void,
}

#[cfg(target_os = "linux")]
impl Drop for SelfCounter {
    fn drop(&mut self) {
        // SAFETY: mapped and opened in `open_self`; no reader uses it any more.
        unsafe {
            libc::munmap(self.page, page_size());
            libc::close(self.fd);
        }
    }
}

#[cfg(target_os = "linux")]
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Opens `c` on the calling thread (user space only) and maps its page;
/// `Err` says why not (no PMU, not permitted, a virtual PMU that reads 0).
#[cfg(target_os = "linux")]
pub fn open_self(c: Counter) -> Result<SelfCounter, String> {
    use perf_event_open_sys as sys;
    let mut a = sys::bindings::perf_event_attr::default();
    (a.type_, a.config) = c.perf_event();
    a.set_exclude_kernel(1);
    a.set_exclude_hv(1);
    // The calling thread (tid 0); the error names the counter and says why.
    let fd = crate::perf_ring::open(&mut a, 0, c.name())
        .map_err(|e| e.to_string())?
        .into_raw();
    // SAFETY: maps the event's metadata page read-only.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page_size(),
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if page == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        // SAFETY: our fd.
        unsafe { libc::close(fd) };
        return Err(format!("mmap of the perf_event page of {c} failed: {e}"));
    }
    let t = SelfCounter { fd, page };
    // A vPMU that accepts the event but never counts would make every
    // figure zero: check that the counter moves.
    let a = read_fd(t.fd);
    std::hint::black_box((0..64u64).fold(0u64, |s, i| {
        s.wrapping_mul(31).wrapping_add(std::hint::black_box(i))
    }));
    let b = read_fd(t.fd);
    if b.wrapping_sub(a) == 0 || b.wrapping_sub(a) > 1 << 40 {
        return Err(format!(
            "the {c} counter does not count here (a virtual PMU that reads 0)"
        ));
    }
    Ok(t)
}

/// Counters need Linux's `perf_event`: always `Err`, naming the counter and
/// the system.
#[cfg(not(target_os = "linux"))]
pub fn open_self(c: Counter) -> Result<SelfCounter, String> {
    Err(crate::unsupported(&format!("the {c} counter (perf_event)")))
}

/// The counter's value by `read(2)` (the fallback when `rdpmc` cannot be used).
#[cfg(target_os = "linux")]
#[inline(never)]
pub fn read_fd(fd: i32) -> u64 {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes (the count, default read_format) into `v`.
    let n = unsafe { libc::read(fd, &mut v as *mut u64 as *mut libc::c_void, 8) };
    if n == 8 {
        v
    } else {
        0
    }
}

/// The head of `struct perf_event_mmap_page` (`linux/perf_event.h`), as far
/// as self-monitoring reads it.
#[repr(C)]
#[allow(dead_code)]
struct PageHead {
    version: u32,
    compat_version: u32,
    lock: u32,
    index: u32,
    offset: i64,
    time_enabled: u64,
    time_running: u64,
    capabilities: u64,
    pmc_width: u16,
}

/// `cap_user_rdpmc` in `capabilities`.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const CAP_USER_RDPMC: u64 = 1 << 2;

/// One round of the seqlock protocol of `perf_event_mmap_page`.
pub enum Round {
    /// The counter's value.
    Value(u64),
    /// The kernel moved the counter meanwhile: read again.
    Retry,
    /// Not on a PMU register now (or no user `rdpmc`): `read(2)` the fd.
    NoRdpmc,
}

/// One seqlock round of an `rdpmc` read of a self-monitoring counter;
/// `force = 1` fails the round (for calibration).
///
/// # Safety
/// `page` is the mapped page of a counter open on the calling thread.
#[inline(always)]
pub unsafe fn rdpmc_round(page: *const u8, force: u32) -> Round {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        use std::ptr::{addr_of, read_volatile};
        use std::sync::atomic::{compiler_fence, Ordering::SeqCst};
        let p = page as *const PageHead;
        let seq = read_volatile(addr_of!((*p).lock));
        compiler_fence(SeqCst);
        let idx = read_volatile(addr_of!((*p).index));
        let caps = read_volatile(addr_of!((*p).capabilities));
        if caps & CAP_USER_RDPMC == 0 || idx == 0 {
            return Round::NoRdpmc;
        }
        let offset = read_volatile(addr_of!((*p).offset));
        let width = read_volatile(addr_of!((*p).pmc_width)) as u32;
        let (lo, hi): (u32, u32);
        core::arch::asm!("rdpmc", in("ecx") idx - 1, out("eax") lo, out("edx") hi, options(nostack, preserves_flags));
        let shift = 64u32.saturating_sub(width) & 63;
        let pmc = (((hi as u64) << 32 | lo as u64) << shift) as i64 >> shift;
        compiler_fence(SeqCst);
        if read_volatile(addr_of!((*p).lock)) ^ force == seq {
            return Round::Value(offset.wrapping_add(pmc) as u64);
        }
        Round::Retry
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        let _ = (page, force);
        Round::NoRdpmc
    }
}

/// The value of a counter open on this thread: `rdpmc` where the page
/// allows, else `read(2)`.
///
/// # Safety
/// `page` and `fd` come from a counter open on the calling thread.
pub(crate) unsafe fn read_self(page: *const u8, fd: i32) -> u64 {
    loop {
        match rdpmc_round(page, 0) {
            Round::Value(v) => return v,
            Round::Retry => {}
            Round::NoRdpmc => return read_fd(fd),
        }
    }
}

/// No counter can be open here ([`open_self`] always fails): 0.
#[cfg(not(target_os = "linux"))]
pub fn read_fd(_fd: i32) -> u64 {
    0
}

/// What `Session::start` checks for `Config::counters`: one counter (for
/// now), and it opens on this machine.
pub(crate) fn check_session_counters(counters: &[Counter]) -> Result<(), String> {
    if counters.len() > 1 {
        return Err(format!(
            "{} per-call counters asked for ({}); sessions record one for now",
            counters.len(),
            counters
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for &c in counters {
        if let Err(why) = open_self(c) {
            return Err(format!("cannot record the `{c}` counter per call: {why}"));
        }
    }
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Where the machine has no PMU (or the kernel refuses), opening a
    /// counter is an error that names the counter and says why; where it
    /// has one, the counter opens and moves.
    #[test]
    fn a_counter_that_cannot_open_is_an_error_naming_it() {
        match open_self(Counter::Cycles) {
            Ok(t) => assert!(t.fd >= 0),
            Err(msg) => {
                assert!(
                    msg.starts_with("perf_event_open(cycles) failed: ")
                        || msg.starts_with("the cycles counter does not count here"),
                    "{msg}"
                );
                if msg.starts_with("perf_event_open") {
                    // The errno and what it means here.
                    assert!(msg.contains("os error"), "{msg}");
                    assert!(
                        msg.contains("PMU") || msg.contains("perf_event_paranoid"),
                        "{msg}"
                    );
                }
            }
        }
        // A software counter opens on every Linux machine that allows
        // perf_event_open at all.
        if let Err(msg) = open_self(Counter::TaskClock) {
            assert!(
                msg.starts_with("perf_event_open(task-clock) failed: "),
                "{msg}"
            );
        }
    }
}
