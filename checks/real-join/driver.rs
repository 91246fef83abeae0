//! The workload of `checks/real-join/run.sh`: on two threads, the `regex`
//! crate (every fn of it and of its four crates traced) searching a text for
//! captures, and the hidden 3:1 split of tests/support/split.rs: two traced
//! parents calling the same untraced helper, one with three times the
//! other's work, which only a join of samples to traced calls can tell
//! apart. Each thread runs for `CPU_MS` of its own CPU time, half in each.
//!
//! `real-join [CPU_MS]` prints the capture groups found.

#[path = "../../tests/support/split.rs"]
mod split;

use std::hint::black_box;

fn text(n: usize) -> String {
    let words = ["alpha", "beta", "gamma", "delta", "x1", "foo_bar", "quux42", "zeta"];
    let mut s = String::with_capacity(n + 64);
    let mut i = 0usize;
    while s.len() < n {
        s.push_str(words[i % words.len()]);
        s.push(' ');
        if i % 7 == 0 {
            s.push_str(&(i * 31 % 1000).to_string());
            s.push(' ');
        }
        if i % 13 == 0 {
            s.push_str("user@example.com\n");
        }
        i += 1;
    }
    s
}

const PATTERN: &str = r"([a-z]+)_?([a-z]*)\s+(\d+)|(\w+)@(\w+)\.com";

/// Regex searches until the thread has spent `cpu_ms` of CPU.
fn search(cpu_ms: u64) -> usize {
    let (t, cpu0) = (std::time::Instant::now(), split::thread_cpu_ms());
    let text = text(20_000);
    let mut groups = 0;
    while split::keep_going(cpu0, t, cpu_ms) {
        let re = regex::Regex::new(PATTERN).expect("pattern");
        groups += re
            .captures_iter(black_box(&text))
            .map(|c| c.len())
            .sum::<usize>();
    }
    groups
}

fn main() {
    let cpu_ms: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let threads: Vec<_> = (0..2)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || {
                    let g = search(cpu_ms / 2);
                    black_box(split::split_workload(cpu_ms / 2));
                    g
                })
                .expect("spawn")
        })
        .collect();
    let groups: usize = threads.into_iter().map(|t| t.join().expect("join")).sum();
    println!("{groups}");
}
