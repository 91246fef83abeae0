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
}

impl Counter {
    /// The name traces and views use (`instructions`, `cycles`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Counter::Instructions => "instructions",
            Counter::Cycles => "cycles",
            Counter::CacheMisses => "cache-misses",
            Counter::BranchMisses => "branch-misses",
        }
    }

    #[cfg(target_os = "linux")]
    fn perf_config(self) -> u64 {
        use perf_event_open_sys::bindings as b;
        (match self {
            Counter::Instructions => b::PERF_COUNT_HW_INSTRUCTIONS,
            Counter::Cycles => b::PERF_COUNT_HW_CPU_CYCLES,
            Counter::CacheMisses => b::PERF_COUNT_HW_CACHE_MISSES,
            Counter::BranchMisses => b::PERF_COUNT_HW_BRANCH_MISSES,
        }) as u64
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
            _ => {
                return Err(format!(
                    "unknown counter `{s}` (instructions, cycles, cache-misses, branch-misses)"
                ))
            }
        })
    }
}

/// One counter open on the calling thread, with its metadata page mapped
/// (for `rdpmc`). Closed when dropped.
#[derive(Debug)]
pub(crate) struct SelfCounter {
    pub fd: i32,
    pub page: *mut libc::c_void,
}

impl Drop for SelfCounter {
    fn drop(&mut self) {
        // SAFETY: mapped and opened in `open_self`; no reader uses it any more.
        unsafe {
            libc::munmap(self.page, page_size());
            libc::close(self.fd);
        }
    }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Opens `c` on the calling thread (user space only) and maps its page;
/// `Err` says why not (no PMU, not permitted, a virtual PMU that reads 0).
#[cfg(target_os = "linux")]
pub(crate) fn open_self(c: Counter) -> Result<SelfCounter, String> {
    use perf_event_open_sys as sys;
    // SAFETY: a zeroed perf_event_attr is valid; the syscall reads `size` bytes.
    let fd = unsafe {
        let mut a: sys::bindings::perf_event_attr = std::mem::zeroed();
        a.size = std::mem::size_of::<sys::bindings::perf_event_attr>() as u32;
        a.type_ = sys::bindings::PERF_TYPE_HARDWARE;
        a.config = c.perf_config();
        a.set_exclude_kernel(1);
        a.set_exclude_hv(1);
        sys::perf_event_open(
            &mut a,
            0,
            -1,
            -1,
            sys::bindings::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        let hint = match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
                " (no hardware PMU: a VM or container without one)"
            }
            Some(libc::EACCES) | Some(libc::EPERM) => {
                " (not permitted: perf_event_paranoid, or a seccomp filter)"
            }
            _ => "",
        };
        return Err(format!("perf_event_open({c}) failed: {e}{hint}"));
    }
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

#[cfg(not(target_os = "linux"))]
pub(crate) fn open_self(c: Counter) -> Result<SelfCounter, String> {
    Err(format!("the {c} counter needs Linux perf_event"))
}

/// The counter's value by `read(2)` (the fallback when `rdpmc` cannot be used).
#[cfg(target_os = "linux")]
#[cold]
#[inline(never)]
pub(crate) fn read_fd(fd: i32) -> u64 {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes (the count, default read_format) into `v`.
    let n = unsafe { libc::read(fd, &mut v as *mut u64 as *mut libc::c_void, 8) };
    if n == 8 {
        v
    } else {
        0
    }
}

/// What `Session::start` checks for `Config::counters`: every counter opens
/// on this machine. Per-call recording of counters in sessions is not there
/// yet, so where they all open this is an error too (saying so), never a
/// trace without the figures asked for.
pub(crate) fn check_session_counters(counters: &[Counter]) -> Result<(), String> {
    for &c in counters {
        if let Err(why) = open_self(c) {
            return Err(format!("cannot record the `{c}` counter per call: {why}"));
        }
    }
    match counters.first() {
        None => Ok(()),
        Some(c) => Err(format!(
            "this machine can count `{c}`, but per-call hardware counters in sessions are not \
             implemented yet; fgtrace::testing::capture_counted records per-call instructions"
        )),
    }
}
