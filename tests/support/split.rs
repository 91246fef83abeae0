//! The hidden 3:1 split, shared by tests/combined.rs and tests/perf_join.rs:
//! two traced parents (one recursive) call the same untraced helper, one with
//! three times the other's work. Runs by the thread's CPU time, so a loaded
//! machine does not starve it of samples.
#![allow(dead_code)]

use std::hint::black_box;

#[inline(never)]
pub fn helper(units: u64) -> u64 {
    let mut x = units;
    for i in 0..units * 1500 {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    x
}

#[fgtrace::traced]
#[inline(never)]
pub fn parent_a(units: u64) -> u64 {
    helper(3 * units)
}

#[fgtrace::traced]
#[inline(never)]
pub fn parent_b(level: u32, units: u64) -> u64 {
    if level > 0 {
        return black_box(parent_b(level - 1, units));
    }
    helper(units)
}

/// The calling thread's CPU time, ms: the workloads run for a fixed amount
/// of CPU, so a loaded machine does not starve them of samples.
pub fn thread_cpu_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Until the thread has spent `cpu_ms` of CPU (or a minute has passed).
pub fn keep_going(cpu0: u64, wall: std::time::Instant, cpu_ms: u64) -> bool {
    thread_cpu_ms() - cpu0 < cpu_ms && wall.elapsed().as_secs() < 60
}

/// Every units value in turn (so the mix adds no noise of its own), parent_a doing three
/// times parent_b's work in the same helper.
#[fgtrace::traced]
pub fn split_workload(cpu_ms: u64) -> u64 {
    let (t, cpu0) = (std::time::Instant::now(), thread_cpu_ms());
    let mut acc = 0;
    let mut k = 0u64;
    // The clock is read every 16 rounds (about 1.6 ms of work): reading
    // the thread's CPU time is a system call, and samples taken in it are
    // no part of the split.
    while k % 16 != 0 || keep_going(cpu0, t, cpu_ms) {
        let units = 1 + (k * 7) % 30;
        acc ^= parent_a(units);
        acc ^= parent_b(3, units);
        k += 1;
    }
    acc
}
