//! A small "application" with a known number of allocations per function,
//! for `tests/counts.rs`.

#![warn(missing_docs)]

use fgtrace::traced;

/// One `Vec` (one allocation) holding the words: 1 allocation.
#[traced]
pub fn split(line: &str) -> Vec<&str> {
    let mut v = Vec::with_capacity(line.len() / 2 + 1);
    v.extend(line.split(' '));
    v
}

/// One `String` per word: `n` allocations for `n` words.
#[traced]
pub fn own(words: &[&str]) -> Vec<String> {
    let mut out = Vec::with_capacity(words.len()); // + 1
    for w in words {
        out.push(w.to_string()); // + 1 each (words are non-empty)
    }
    out
}

/// `split` (1) + `own` (words + 1), and nothing of its own.
#[traced]
pub fn parse(line: &str) -> usize {
    let words = split(line);
    let owned = own(&words);
    owned.len()
}

/// No allocation.
#[traced]
pub fn checksum(line: &str) -> u64 {
    line.bytes().map(u64::from).sum()
}

/// Parses every line: one `Vec` of results of its own (no reallocation: its
/// capacity is the number of lines).
#[traced]
pub fn run(lines: &[&str]) -> Vec<usize> {
    let mut out = Vec::with_capacity(lines.len());
    for l in lines {
        checksum(l);
        out.push(parse(l));
    }
    out
}
