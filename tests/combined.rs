//! The combined flamegraph on a real sampled run: two traced parents (one
//! recursive) call the same untraced helper, one with three times the work
//! of the other. The helper's samples must land under the right parent in
//! the right proportion, and every traced total must equal the traced-only
//! total exactly.
#![cfg(all(target_os = "linux", target_arch = "x86_64", feature = "symbolize"))]

use fgtrace::sampler::Sampling;
use fgtrace::symbolize::Symbolizer;
use fgtrace::view::folded::{combined_folded, traced_folded, FoldedOptions};
use fgtrace::view::ok_events;
use fgtrace::{Config, Session};
use std::collections::BTreeMap;

#[path = "support/split.rs"]
mod split;
use split::split_workload;

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
    split_workload(1500);
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
    // The truth, in the same wall-clock ns: the traced totals of the two
    // parents (the helper is nearly all of their time). It is 3 on a quiet
    // machine; on a loaded one a preempted call carries its wait in its wall
    // time, and a few 10 ms waits move the truth itself (2.4 in one run on
    // two cores under four busy loops). The view is judged against it.
    let t = prefix_sums(&traced);
    let truth = t["split_workload;parent_a"] as f64 / t["split_workload;parent_b"] as f64;
    let ratio = under_a as f64 / under_b.max(1) as f64;
    println!("helper under parent_a: {under_a} ns, under parent_b: {under_b} ns, elsewhere {elsewhere} ns; ratio {ratio:.2}, traced parents' ratio {truth:.2}");
    assert!(
        (ratio / truth - 1.0).abs() < 0.1,
        "ratio {ratio:.2}, the traced parents' {truth:.2}"
    );
    assert!(
        (truth / 3.0 - 1.0).abs() < 0.4,
        "the workload no longer has a 3:1 split: {truth:.2}"
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
    let c = prefix_sums(&combined);
    for (path, total) in &t {
        assert_eq!(c.get(path), Some(total), "traced total of {path}");
    }
    assert!(t.contains_key("split_workload;parent_a"));
}
