//! The combined flamegraph on a real sampled run: two traced parents (one
//! recursive) call the same untraced helper, one with three times the work
//! of the other. The helper's samples must land under the right parent in
//! the right proportion, and every traced total must equal the traced-only
//! total exactly.
#![cfg(all(target_os = "linux", target_arch = "x86_64", feature = "cli"))]

use fgtrace::sampler::Sampling;
use fgtrace::symbolize::Symbolizer;
use fgtrace::view::folded::{combined_folded, traced_folded, FoldedOptions};
use fgtrace::view::ok_events;
use fgtrace::{Config, Session};
use std::collections::BTreeMap;
use std::hint::black_box;

#[inline(never)]
fn helper(units: u64) -> u64 {
    let mut x = units;
    for i in 0..units * 1500 {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    x
}

#[fgtrace::traced]
#[inline(never)]
fn parent_a(units: u64) -> u64 {
    helper(3 * units)
}

#[fgtrace::traced]
#[inline(never)]
fn parent_b(level: u32, units: u64) -> u64 {
    if level > 0 {
        return black_box(parent_b(level - 1, units));
    }
    helper(units)
}

#[fgtrace::traced]
fn workload(ms: u64) -> u64 {
    let t = std::time::Instant::now();
    let mut r = 0x2545f4914f6cdd1du64;
    let mut acc = 0;
    while t.elapsed().as_millis() < ms as u128 {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        let units = 1 + r % 30;
        acc ^= parent_a(units);
        acc ^= parent_b(3, units);
    }
    acc
}

/// Sum of the counts of every line whose stack starts with `prefix`.
fn prefix_sums(text: &str) -> BTreeMap<String, u64> {
    let mut sums = BTreeMap::new();
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        for i in 1..=frames.len() {
            *sums.entry(frames[..i].join(";")).or_insert(0) += n;
        }
    }
    sums
}

#[test]
fn combined_view_puts_the_helper_under_the_right_parent_and_keeps_traced_totals() {
    let session = Session::start(Config::builtin().sampling(Sampling::timer(10_000))).unwrap();
    workload(1500);
    let trace = session.stop().unwrap();
    let meta = trace.meta();
    let opts = FoldedOptions {
        short_names: true,
        ..FoldedOptions::default()
    };

    let mut traced = Vec::new();
    traced_folded(meta, ok_events(trace.events()), &opts, &mut traced).unwrap();
    let traced = String::from_utf8(traced).unwrap();
    let mut combined = Vec::new();
    let sym = Symbolizer::new(&meta.mappings);
    combined_folded(meta, ok_events(trace.events()), sym, &opts, &mut combined).unwrap();
    let combined = String::from_utf8(combined).unwrap();

    // The helper's share under each parent (ns of the parents' self time the
    // samples attribute to it).
    let (mut under_a, mut under_b, mut elsewhere) = (0u64, 0u64, 0u64);
    for line in combined.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        let Some(h) = frames.iter().position(|f| f.ends_with("helper")) else {
            continue;
        };
        match frames[..h]
            .iter()
            .rev()
            .find(|f| **f == "parent_a" || **f == "parent_b")
        {
            Some(&"parent_a") => under_a += n,
            Some(_) => under_b += n,
            None => elsewhere += n,
        }
    }
    let ratio = under_a as f64 / under_b.max(1) as f64;
    println!("helper under parent_a: {under_a} ns, under parent_b: {under_b} ns, elsewhere {elsewhere} ns; ratio {ratio:.2}");
    assert!(
        (ratio / 3.0 - 1.0).abs() < 0.1,
        "ratio {ratio:.2}, expected 3"
    );
    assert!(
        elsewhere * 20 < under_a + under_b,
        "helper samples outside the parents: {elsewhere}"
    );
    // Under parent_b the helper hangs below the innermost recursion level.
    assert!(combined
        .lines()
        .any(|l| l.contains("parent_b;parent_b;parent_b;parent_b;") && l.contains("helper")));

    // Every traced path has the same total in both views.
    let t = prefix_sums(&traced);
    let c = prefix_sums(&combined);
    for (path, total) in &t {
        assert_eq!(c.get(path), Some(total), "traced total of {path}");
    }
    assert!(t.contains_key("workload;parent_a"));
}
