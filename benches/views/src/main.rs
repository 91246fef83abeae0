//! `fgtrace-views-bench ROUNDS THREADS`: each thread calls `top` ROUNDS
//! times; `top` calls `mid` 4 times and `mid` calls `leaf` 8 times, so the
//! run records 37 x ROUNDS x THREADS calls. Run under `FGTRACE_RECORD=DIR`.

use std::hint::black_box;

#[fgtrace::traced]
#[inline(never)]
fn leaf(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

#[fgtrace::traced]
#[inline(never)]
fn mid(x: u64) -> u64 {
    (0..8).map(|i| leaf(x + i)).sum()
}

#[fgtrace::traced]
#[inline(never)]
fn top(x: u64) -> u64 {
    (0..4).map(|i| mid(x + i)).sum()
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let rounds = args.next().and_then(Result::ok).unwrap_or(1_000_000);
    let threads = args.next().and_then(Result::ok).unwrap_or(2);
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::Builder::new()
                .name(format!("w{t}"))
                .spawn(move || (0..rounds).map(top).sum::<u64>())
                .expect("a worker thread")
        })
        .collect();
    for w in workers {
        black_box(w.join().expect("the worker ran"));
    }
}
