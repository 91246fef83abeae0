//! What per-call values cost, side by side in one process (flight-recorder
//! session, recording):
//!
//! * `no_values`: `#[traced]`, the call as it is without values,
//! * `one_value`: `#[traced(values(x))]`,
//! * `four_values`: `#[traced(values(x, y = x + 1, odd = x & 1 == 1, c = 'v'))]`,
//! * `one_str`: `#[traced(values(kind))]`, `kind` a `&'static str`,
//! * `str_and_ret`: `#[traced(values(kind), ret)]` returning `Result<u64, &'static str>`
//!   (two values: a string, and `Ok(n)` or `Err("bad digit")`).
//!
//! Each iteration runs 1000 leaf calls; divide by 1000 for the figure per
//! call. The target is at most 2 ns per value over `no_values`.
//! Run: `cargo bench --bench values`.

use divan::black_box;
use std::sync::OnceLock;

const CALLS: u64 = 1000;

fn main() {
    session();
    divan::main();
}

fn session() -> &'static fgtrace::Session {
    static SESSION: OnceLock<fgtrace::Session> = OnceLock::new();
    SESSION.get_or_init(|| {
        fgtrace::Session::start(fgtrace::Config::builtin().flight_recorder(1 << 16))
            .expect("session")
    })
}

#[fgtrace::traced]
#[inline(never)]
fn no_values(x: u64) -> u64 {
    black_box(x) + 1
}

#[fgtrace::traced(values(x))]
#[inline(never)]
fn one_value(x: u64) -> u64 {
    black_box(x) + 1
}

#[fgtrace::traced(values(x, y = x + 1, odd = x & 1 == 1, c = 'v'))]
#[inline(never)]
fn four_values(x: u64) -> u64 {
    black_box(x) + 1
}

/// The strings the string benches record, in turn.
static KINDS: [&str; 2] = ["ident", "number"];

#[fgtrace::traced(values(kind = KINDS[(x & 1) as usize]))]
#[inline(never)]
fn one_str(x: u64) -> u64 {
    black_box(x) + 1
}

#[fgtrace::traced(values(kind = KINDS[(x & 1) as usize]), ret)]
#[inline(never)]
fn str_and_ret(x: u64) -> Result<u64, &'static str> {
    if black_box(x) % 3 == 0 {
        Err("bad digit")
    } else {
        Ok(x + 1)
    }
}

#[divan::bench_group(name = "leaf x1000, recording")]
mod leaf {
    use super::*;

    #[divan::bench]
    fn a_no_values(b: divan::Bencher) {
        session().resume();
        b.bench(|| (0..CALLS).map(no_values).sum::<u64>());
    }

    #[divan::bench]
    fn b_one_value(b: divan::Bencher) {
        session().resume();
        b.bench(|| (0..CALLS).map(one_value).sum::<u64>());
    }

    #[divan::bench]
    fn c_four_values(b: divan::Bencher) {
        session().resume();
        b.bench(|| (0..CALLS).map(four_values).sum::<u64>());
    }

    #[divan::bench]
    fn d_one_str(b: divan::Bencher) {
        session().resume();
        b.bench(|| (0..CALLS).map(one_str).sum::<u64>());
    }

    #[divan::bench]
    fn e_str_and_ret(b: divan::Bencher) {
        session().resume();
        b.bench(|| (0..CALLS).map(|x| str_and_ret(x).unwrap_or(0)).sum::<u64>());
    }

    /// `a_no_values` again, last: the first bench of a run also pays the
    /// session's warm-up (its buffers' first pages), so the baseline is
    /// measured at both ends.
    #[divan::bench]
    fn f_no_values_again(b: divan::Bencher) {
        session().resume();
        b.bench(|| (0..CALLS).map(no_values).sum::<u64>());
    }
}
