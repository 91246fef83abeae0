//! The workload of `benches/whole_crate/run.sh`: the `regex` crate searching
//! a generated text for captures. The same source builds two programs: one
//! against the crates as published, one against copies with every fn and
//! impl block carrying `#[fgtrace::traced]` (`[patch]` in its manifest).
//!
//! `driver [ROUNDS] [KB]`: searches KB kilobytes ROUNDS times and prints
//! `MS GROUPS FIRST_MS` (the best round's milliseconds, the capture groups
//! found, the first round's milliseconds). With `FGTRACE_RECORD` set, the
//! whole run is recorded.

use std::hint::black_box;
use std::time::Instant;

/// Words, numbers and e-mail addresses: the pattern's two alternatives both
/// match, and most positions start a thread in the Pike VM that dies soon.
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

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let kb: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let text = text(kb * 1000);
    let mut best = f64::INFINITY;
    let mut first = None;
    let mut groups = 0;
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        let re = regex::Regex::new(PATTERN).expect("pattern");
        groups = re
            .captures_iter(black_box(&text))
            .map(|c| c.len())
            .sum::<usize>();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        first.get_or_insert(ms);
        best = best.min(ms);
    }
    println!("{best:.2} {groups} {:.2}", first.unwrap_or(best));
}
