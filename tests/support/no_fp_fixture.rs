//! The program tests/no_frame_pointers.rs builds without frame pointers:
//! on two threads, dense traced calls and then the hidden 3:1 split of
//! split.rs, recorded with the sampler it is given.
//!
//! `no-fp-fixture OUT.fgt SAMPLE CPU_MS` (SAMPLE as `FGTRACE_SAMPLE`); exits
//! with 3 when the sampler cannot start (a refused perf ring).

#[path = "split.rs"]
mod split;

use fgtrace::sampler::Sampling;
use fgtrace::{Config, Session};

// Dense traced code, as in a crate traced whole: small traced functions
// calling each other, so that many samples fall in fgtrace's probe or in a
// traced function's own few instructions, between frames the walk must see.

#[fgtrace::traced]
#[inline(never)]
fn leaf(x: u64) -> u64 {
    x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(7)
}

#[fgtrace::traced]
#[inline]
fn mid(x: u64) -> u64 {
    let mut a = x;
    for i in 0..4 {
        a ^= leaf(std::hint::black_box(a + i));
    }
    a
}

#[fgtrace::traced]
#[inline(never)]
fn top(x: u64) -> u64 {
    let mut a = x;
    for i in 0..4 {
        a = a.wrapping_add(mid(a ^ i));
    }
    a
}

#[fgtrace::traced]
fn dense(cpu_ms: u64) -> u64 {
    let (t, cpu0) = (std::time::Instant::now(), split::thread_cpu_ms());
    let (mut acc, mut k) = (0, 0u64);
    while split::keep_going(cpu0, t, cpu_ms) {
        for _ in 0..64 {
            acc ^= top(k);
            k += 1;
        }
    }
    acc
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (out, sample, cpu_ms) = (&args[1], &args[2], args[3].parse::<u64>().expect("CPU_MS"));
    let sampling = Sampling::parse(sample).expect("a sampler");
    let session = match Session::start(Config::builtin().sampling(sampling)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(3);
        }
    };
    // On two threads of its own, as a program's workers run (the main
    // thread's stack is walked differently: from `_start`).
    let workers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                std::hint::black_box(dense(cpu_ms / 2));
                std::hint::black_box(split::split_workload(cpu_ms / 2))
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let trace = session.stop().expect("stop");
    trace.save(out).expect("save");
}
