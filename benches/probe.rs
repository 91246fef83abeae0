//! Probe cost, side by side in one process:
//!
//! * `plain`: the same fns without instrumentation,
//! * `two_ticks`: two raw clock reads, the floor of exact per-call timestamps,
//! * `fgtrace_off`: instrumented, no session running (compiled in but off),
//! * `fgtrace_on`: instrumented and recording (flight-recorder mode, so memory
//!   stays bounded however long divan runs),
//! * `minitrace`: minitrace's `#[trace]` under an active local parent (without
//!   one it records nothing), with a reporter that discards spans.
//!
//! Each benchmark runs a batch of calls per iteration; the figure per call is
//! the iteration time divided by the calls (1000 leaf calls, or fib(15) = 1973
//! calls). Run: `cargo bench --bench probe`.

use divan::black_box;
use minitrace::collector::{Config as MtConfig, Reporter, SpanContext, SpanRecord};
use minitrace::prelude::*;
use std::sync::OnceLock;

const LEAF_CALLS: usize = 1000;
const FIB_N: u32 = 15;

fn main() {
    minitrace::set_reporter(Discard, MtConfig::default());
    divan::main();
}

struct Discard;

impl Reporter for Discard {
    fn report(&mut self, spans: &[SpanRecord]) {
        black_box(spans.len());
    }
}

#[inline(never)]
fn leaf_plain(x: u64) -> u64 {
    black_box(x) + 1
}

#[fgtrace::traced]
#[inline(never)]
fn leaf_traced(x: u64) -> u64 {
    black_box(x) + 1
}

#[minitrace::trace]
#[inline(never)]
fn leaf_minitrace(x: u64) -> u64 {
    black_box(x) + 1
}

#[inline(never)]
fn fib_plain(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    fib_plain(n - 1) + fib_plain(n - 2)
}

#[fgtrace::traced]
#[inline(never)]
fn fib_traced(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    fib_traced(n - 1) + fib_traced(n - 2)
}

#[minitrace::trace]
#[inline(never)]
fn fib_minitrace(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    fib_minitrace(n - 1) + fib_minitrace(n - 2)
}

/// One session for the whole run, resumed for `fgtrace_on` and paused for
/// `fgtrace_off` (paused costs the same as never started: one load and a branch).
/// `FGTRACE_OFFCPU=1` records off-CPU time too (its cost per call must be 0:
/// context switches are read from the kernel's ring, not by the probe).
fn session() -> &'static fgtrace::Session {
    static SESSION: OnceLock<fgtrace::Session> = OnceLock::new();
    SESSION.get_or_init(|| {
        let off_cpu = std::env::var("FGTRACE_OFFCPU").is_ok_and(|v| v == "1");
        fgtrace::Session::start(
            fgtrace::Config::builtin()
                .flight_recorder(1 << 16)
                .off_cpu(off_cpu),
        )
        .expect("session")
    })
}

fn recording() {
    session().resume();
}

fn off() {
    session().pause();
}

#[divan::bench_group(name = "leaf x1000")]
mod leaf {
    use super::*;

    #[divan::bench]
    fn plain() -> u64 {
        (0..LEAF_CALLS as u64).map(leaf_plain).sum()
    }

    #[divan::bench]
    fn two_ticks() -> u64 {
        (0..LEAF_CALLS as u64)
            .map(|x| {
                let a = fgtrace::clock::ticks();
                let r = leaf_plain(x);
                black_box(fgtrace::clock::ticks().wrapping_sub(a)) ^ r
            })
            .sum()
    }

    #[divan::bench]
    fn fgtrace_off(b: divan::Bencher) {
        off();
        b.bench(|| (0..LEAF_CALLS as u64).map(leaf_traced).sum::<u64>());
    }

    #[divan::bench]
    fn fgtrace_on(b: divan::Bencher) {
        recording();
        b.bench(|| (0..LEAF_CALLS as u64).map(leaf_traced).sum::<u64>());
    }

    #[divan::bench]
    fn minitrace(b: divan::Bencher) {
        b.bench(|| {
            let root = Span::root("root", SpanContext::random());
            let _g = root.set_local_parent();
            (0..LEAF_CALLS as u64).map(leaf_minitrace).sum::<u64>()
        });
    }
}

#[divan::bench_group(name = "fib(15) = 1973 calls")]
mod fib {
    use super::*;

    #[divan::bench]
    fn plain() -> u64 {
        fib_plain(black_box(FIB_N))
    }

    #[divan::bench]
    fn fgtrace_off(b: divan::Bencher) {
        off();
        b.bench(|| fib_traced(black_box(FIB_N)));
    }

    #[divan::bench]
    fn fgtrace_on(b: divan::Bencher) {
        recording();
        b.bench(|| fib_traced(black_box(FIB_N)));
    }

    #[divan::bench]
    fn minitrace(b: divan::Bencher) {
        b.bench(|| {
            let root = Span::root("root", SpanContext::random());
            let _g = root.set_local_parent();
            fib_minitrace(black_box(FIB_N))
        });
    }
}
