//! A program that only adds `#[traced]`: `tests/systems.rs` runs it with
//! `FGTRACE_RECORD` and `FGTRACE_CONTROL` in its environment, to see what
//! the runtime's constructor does with them on this system.

#[fgtrace::traced]
fn leaf(x: u64) -> u64 {
    x.wrapping_mul(31) ^ 7
}

#[fgtrace::traced]
fn branch(n: u64) -> u64 {
    (0..n).map(leaf).fold(0, u64::wrapping_add)
}

fn main() {
    let rounds: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4);
    let sum = (0..rounds).map(|_| branch(3)).fold(0, u64::wrapping_add);
    println!("{rounds} rounds: {sum}");
}
