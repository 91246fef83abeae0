//! A program that does nothing for fgtrace but put `#[traced]` on its
//! functions: run it with `FGTRACE_CONTROL=1` and control it from outside.
//!
//! ```sh
//! FGTRACE_CONTROL=1 cargo run --release --example controlled -- 100000 &   # rounds (about 25 s)
//! fgtrace ps                                      # it is listed
//! fgtrace record --pid $! --duration 2s -o run.fgt && fgtrace report run.fgt
//! ```
//! `FGTRACE_CONTROL=1` also keeps a flight recorder running all the time:
//! `fgtrace ctl PID dump -o last.fgt` writes its last calls per thread.
//!
//! Each round calls `tick` once, `parse` 3 times and `checksum` 12 times
//! (4 per parse), on the main thread and on a worker: the counts in a
//! recording are in the proportion 1 : 3 : 12. Every 100 rounds each thread
//! prints a line with a running checksum: the output is the same with and
//! without control (the lines of the two threads may interleave differently).

use std::time::Duration;

#[fgtrace::traced]
fn checksum(data: &[u8]) -> u32 {
    data.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

#[fgtrace::traced]
fn parse(line: &str) -> u32 {
    let mut h = 0u32;
    for part in line.split(' ').take(4) {
        h = h.wrapping_add(checksum(part.as_bytes()));
    }
    h
}

#[fgtrace::traced]
fn tick(round: u64) -> u32 {
    let mut h = 0u32;
    for i in 0..3 {
        let line = format!("GET /item/{} HTTP/1.1 {}", round * 3 + i, round % 7);
        h = h.wrapping_add(parse(&line));
    }
    h
}

fn run(name: &'static str, rounds: u64) -> u32 {
    let mut round = 0u64;
    let mut sum = 0u32;
    while round < rounds {
        sum = sum.wrapping_add(tick(round));
        round += 1;
        if round % 100 == 0 {
            println!("{name}: round {round} checksum {sum:08x}");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    sum
}

fn main() {
    let rounds: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let worker = std::thread::Builder::new()
        .name("worker".into())
        .spawn(move || run("worker", rounds))
        .expect("spawn the worker");
    let a = run("main", rounds);
    let b = worker.join().expect("the worker panicked");
    println!("done: {:08x}", a ^ b);
}
