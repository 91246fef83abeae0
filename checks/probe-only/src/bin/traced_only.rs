//! A program that uses nothing of fgtrace but `#[traced]`: no session, no
//! call into the library. Run with `FGTRACE_CONTROL=1`, it can still be
//! recorded from outside (`fgtrace record --pid`): the control endpoint is
//! opened by fgtrace's constructor (`tests/control_only_traced.rs`).

use std::time::Duration;

#[fgtrace::traced]
fn leaf(i: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 7
}

#[fgtrace::traced]
fn step(i: u64) -> u64 {
    leaf(i) ^ leaf(i + 1)
}

fn main() {
    let rounds: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let mut sum = 0u64;
    for i in 0..rounds {
        sum = sum.wrapping_add(step(i));
        if i % 500 == 499 {
            println!("round {} sum {sum:016x}", i + 1);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    println!("done {sum:016x}");
}
