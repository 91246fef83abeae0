//! The probe with allocation counting on: `fgtrace::alloc::Counting` is this
//! program's global allocator, so a session gives every call its
//! allocation figures. Beside it, the same calls in a process without it are
//! `cargo bench --bench probe` (run both, back to back).
//!
//! * `leaf x1000`: a call that allocates nothing: recording, off, and two
//!   raw TSC reads (the floor), as in the probe bench;
//! * `boxed leaf x1000`: a call that allocates and frees one small box:
//!   plain (counted by the allocator, no session), recording (the call's
//!   figures written as extension records after its record).
//!
//! Run: `cargo bench --bench probe_alloc`.

use divan::black_box;
use std::sync::OnceLock;

#[global_allocator]
static ALLOC: fgtrace::alloc::Counting<std::alloc::System> =
    fgtrace::alloc::Counting::new(std::alloc::System);

const CALLS: u64 = 1000;

fn main() {
    divan::main();
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

#[inline(never)]
fn boxed_plain(x: u64) -> u64 {
    *black_box(Box::new(x)) + 1
}

#[fgtrace::traced]
#[inline(never)]
fn boxed_traced(x: u64) -> u64 {
    *black_box(Box::new(x)) + 1
}

fn session() -> &'static fgtrace::Session {
    static SESSION: OnceLock<fgtrace::Session> = OnceLock::new();
    SESSION.get_or_init(|| {
        fgtrace::Session::start(fgtrace::Config::builtin().flight_recorder(1 << 16))
            .expect("session")
    })
}

#[divan::bench_group(name = "leaf x1000")]
mod leaf {
    use super::*;

    #[divan::bench]
    fn two_ticks() -> u64 {
        (0..CALLS)
            .map(|x| {
                let a = fgtrace::clock::ticks();
                let r = leaf_plain(x);
                black_box(fgtrace::clock::ticks().wrapping_sub(a)) ^ r
            })
            .sum()
    }

    #[divan::bench]
    fn fgtrace_off(b: divan::Bencher) {
        session().pause();
        b.bench(|| (0..CALLS).map(leaf_traced).sum::<u64>());
    }

    #[divan::bench]
    fn fgtrace_on(b: divan::Bencher) {
        session().resume();
        b.bench(|| (0..CALLS).map(leaf_traced).sum::<u64>());
    }
}

#[divan::bench_group(name = "boxed leaf x1000")]
mod boxed {
    use super::*;

    #[divan::bench]
    fn plain() -> u64 {
        (0..CALLS).map(boxed_plain).sum()
    }

    #[divan::bench]
    fn fgtrace_on(b: divan::Bencher) {
        session().resume();
        b.bench(|| (0..CALLS).map(boxed_traced).sum::<u64>());
    }
}
