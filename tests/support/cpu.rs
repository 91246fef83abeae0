// The truth off-CPU tests compare with: the thread's CPU clock.
//
// Included by the off-CPU tests and the `offcpu` example
// (`#[path = "support/cpu.rs"] mod cpu;`). Across a call, the thread's CPU
// time (`CLOCK_THREAD_CPUTIME_ID`) is its on-CPU time and wall time minus
// that its off-CPU time, so comparisons hold however loaded the machine is.

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// This thread's CPU time in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Burns `d` of this thread's CPU time (however long that takes on the wall).
pub fn compute(d: Duration) -> u64 {
    let end = thread_cpu_ns() + d.as_nanos() as u64;
    let mut x = 1u64;
    while thread_cpu_ns() < end {
        for _ in 0..500 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

/// What `f` cost this thread: wall and CPU nanoseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Truth {
    pub wall: u64,
    pub cpu: u64,
}

impl Truth {
    /// Wall minus CPU: the time the thread was off the CPU.
    pub fn off(&self) -> u64 {
        self.wall.saturating_sub(self.cpu)
    }
}

/// Joins the calling thread to the running session. A thread's first traced
/// call registers it (a buffer, and with off-CPU time a ring the kernel
/// opens): CPU time the thread spends outside every call's timestamps. Tests
/// call this before `measured`, so that cost is not charged to the truth.
#[fgtrace::traced]
pub fn join_session() {}

pub fn measured<R>(f: impl FnOnce() -> R) -> (R, Truth) {
    let (w, c) = (Instant::now(), thread_cpu_ns());
    let r = f();
    let cpu = thread_cpu_ns() - c;
    (
        r,
        Truth {
            wall: w.elapsed().as_nanos() as u64,
            cpu,
        },
    )
}

/// `got` within `rel` of `want`, or within `abs_ns` for small values.
pub fn close(got: u64, want: u64, rel: f64, abs_ns: u64) -> bool {
    got.abs_diff(want) as f64 <= (want as f64 * rel).max(abs_ns as f64)
}
