//! Per-call values on real code: the standard library's sorts and a
//! deliberately quadratic dedup, each call recording its input's length,
//! then the fitted growth of each against it.
//!
//! `cargo run --release --example values` prints, per function,
//! `duration ~ len^k (r² ..)`; `FGTRACE_OUT=run.fgt` also saves the trace
//! (then `fgtrace plot run.fgt -f sort_unstable --x len -o len.svg`).

use fgtrace::testing::capture;
use fgtrace::traced;
use fgtrace::view::growth::fit_power;
use std::hint::black_box;

#[traced(values(len = v.len()))]
fn sort_unstable(v: &mut [u64]) {
    v.sort_unstable();
}

#[traced(values(len = v.len()))]
fn sort_stable(v: &mut [u64]) {
    v.sort();
}

/// Keeps the first of each value, comparing against everything kept so far.
#[traced(values(len = v.len()), ret)]
fn dedup_quadratic(v: &[u64]) -> usize {
    let mut kept: Vec<u64> = Vec::new();
    for &x in v {
        if !kept.contains(&x) {
            kept.push(x);
        }
    }
    kept.len()
}

/// A xorshift stream: the same inputs on every run.
fn input(len: usize, seed: u64) -> Vec<u64> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        })
        .collect()
}

fn main() {
    let cap = capture(|| {
        for round in 0..5 {
            for k in 0..10 {
                // 1000, 1500, 2000, 3000, .. 24000: two sizes per doubling.
                let len = (1000 + (k % 2) * 500) << (k / 2);
                let mut a = input(len, round * 100 + k as u64);
                let mut b = a.clone();
                sort_unstable(black_box(&mut a));
                sort_stable(black_box(&mut b));
                black_box(dedup_quadratic(&input(len / 8, k as u64)));
            }
        }
    });
    for name in ["sort_unstable", "sort_stable", "dedup_quadratic"] {
        let points: Vec<(f64, f64)> = cap
            .values(name)
            .iter()
            .filter_map(|c| Some((c.get("len")?.number()?, c.duration.as_nanos() as f64)))
            .collect();
        match fit_power(&points) {
            Some(f) => println!("{name:>16}: {}", f.describe("duration", "len")),
            None => println!("{name:>16}: too few sizes to fit"),
        }
    }
    if let Ok(path) = std::env::var("FGTRACE_OUT") {
        cap.trace().save(&path).expect("save the trace");
        println!("saved {path}");
    }
}
