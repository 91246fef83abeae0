//! Folded stacks and flamegraphs through the public API: traced (exact ns of
//! self time), sampled, combined (samples joined to the traced call they
//! interrupted), the flame chart, and the SVGs' colours and tooltips.

#[path = "../../tests/support/cli.rs"]
mod cli_support;

use cli_support::{fgtrace, tempdir};

use fgtrace_trace::{Event, Sample, SiteInfo, Trace, TraceBuilder, TraceError, TraceMeta};
use fgtrace_view::chart::ChartBuilder;
use fgtrace_view::folded::{combined_folded, traced_folded, FoldedBuilder, FoldedOptions, Origin};
use fgtrace_view::join::{Cut, NameCut, SampleStack};
use fgtrace_view::ok_events;
use fgtrace_view::FnResolve;
use std::collections::BTreeMap;

#[path = "../../tests/support/traces.rs"]
mod traces;
use traces::{call, site};

fn meta() -> TraceMeta {
    let mut m = traces::meta(
        &["run", "parse", "fib"],
        &[(4242, "main"), (4243, "worker")],
    );
    m.duration_ns = 2_000_000;
    m.sampling = Some("cpu-clock@1000Hz".into());
    m.threads[1].samples_lost = 2;
    m
}

// Code addresses of the synthetic program, resolved by `resolver()`.
const HELPER: u64 = 0x1000;
const HELPER_INLINED: u64 = 0x1100; // app::helper_inner inlined into app::helper
const PARSE: u64 = 0x2000;
const FIB: u64 = 0x3000;
const RUN: u64 = 0x4000;
const START: u64 = 0x5000;

fn names(addr: u64) -> Vec<String> {
    let v: &[&str] = match addr {
        HELPER => &["app::helper"],
        HELPER_INLINED => &["app::helper_inner", "app::helper"],
        PARSE => &["app::parse"],
        FIB => &["app::fib::h0123456789abcdef"],
        RUN => &["app::run"],
        START => &["std::rt::lang_start"],
        _ => &[],
    };
    v.iter().map(|s| s.to_string()).collect()
}

fn resolver() -> FnResolve<impl FnMut(u64, bool) -> Vec<String>> {
    FnResolve(|a, _| names(a))
}

fn sample(thread: u32, ts_ns: u64, shadow_depth: u32, cut: Option<u32>, frames: &[u64]) -> Event {
    Event::Sample(Sample {
        thread,
        ts_ns,
        shadow_depth,
        cut,
        frames: frames.to_vec(),
    })
}

/// On thread 0 (main):
///   run [0, 1 ms) {
///     parse [10 us, 310 us)                          self 300 us
///     fib [400 us, 900 us) {                         self 200 us
///       fib [450 us, 750 us) {                       self 200 us
///         fib [500 us, 600 us)                       self 100 us
///   } } }                                            run self 200 us
/// Samples, with the helper (an untraced function both parents call):
///   in parse: 30 in helper (half of them through an inlined frame), 10 in parse itself;
///   in the middle fib: 20 in helper; in the innermost fib: 5 in helper, 5 in fib itself;
///   one after run returned (outside any traced call).
/// Thread 1 (worker) runs one parse [100 us, 200 us) with no samples.
fn workload() -> Trace {
    let mut b = TraceBuilder::new(meta());
    b.push(call(0, 0, 0, 0, 1_000_000));
    b.push(call(0, 1, 1, 10_000, 300_000));
    let mut ts = 11_000;
    for i in 0..40u64 {
        let ev = match i % 4 {
            // parse itself (the PC is in parse), cut recorded by the sampler
            0 => sample(0, ts, 2, Some(0), &[PARSE, RUN, START]),
            // helper; odd ones without a recorded cut (name matching finds parse)
            1 => sample(0, ts, 2, Some(1), &[HELPER, PARSE, RUN, START]),
            2 => sample(0, ts, 2, None, &[HELPER_INLINED, PARSE, RUN, START]),
            _ => sample(0, ts, 2, None, &[HELPER, PARSE, RUN, START]),
        };
        b.push(ev);
        ts += 7_000;
    }
    b.push(call(1, 1, 0, 100_000, 100_000));
    b.push(call(0, 2, 1, 400_000, 500_000));
    b.push(call(0, 2, 2, 450_000, 300_000));
    for i in 0..10u64 {
        b.push(sample(
            0,
            452_000 + i * 4_000,
            3,
            None,
            &[HELPER, FIB, FIB, RUN, START],
        ));
    }
    b.push(call(0, 2, 3, 500_000, 100_000));
    for i in 0..10u64 {
        let ts = 505_000 + i * 9_000;
        if i % 2 == 0 {
            b.push(sample(0, ts, 4, None, &[HELPER, FIB, FIB, FIB, RUN, START]));
        } else {
            b.push(sample(0, ts, 4, None, &[FIB, FIB, FIB, RUN, START]));
        }
    }
    for i in 0..10u64 {
        b.push(sample(
            0,
            610_000 + i * 10_000,
            3,
            None,
            &[HELPER, FIB, FIB, RUN, START],
        ));
    }
    b.push(sample(0, 1_500_000, 0, None, &[START]));
    b.finish()
}

/// Every prefix of every line with the sum of the counts below it: the width
/// each frame gets in a flamegraph.
fn frame_totals(lines: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut t = BTreeMap::new();
    for (stack, &n) in lines {
        let frames: Vec<&str> = stack.split(';').collect();
        for k in 1..=frames.len() {
            *t.entry(frames[..k].join(";")).or_insert(0) += n;
        }
    }
    t
}

fn parse_text(out: &[u8]) -> BTreeMap<String, u64> {
    String::from_utf8(out.to_vec())
        .unwrap()
        .lines()
        .map(|l| {
            let (s, n) = l.rsplit_once(' ').expect("stack count");
            (s.to_string(), n.parse().expect("integer count"))
        })
        .collect()
}

#[test]
fn traced_folded_is_exact_self_time_root_first() {
    let t = workload();
    let mut out = Vec::new();
    traced_folded(
        t.meta(),
        ok_events(t.events()),
        &FoldedOptions::default(),
        &mut out,
    )
    .unwrap();
    let got = parse_text(&out);
    let want: BTreeMap<String, u64> = [
        ("app::run", 200_000),
        ("app::run;app::parse", 300_000),
        ("app::run;app::fib", 200_000),
        ("app::run;app::fib;app::fib", 200_000),
        ("app::run;app::fib;app::fib;app::fib", 100_000),
        ("app::parse", 100_000), // the worker's parse, merged with nothing else
    ]
    .into_iter()
    .map(|(s, n)| (s.to_string(), n))
    .collect();
    assert_eq!(got, want);

    // Per thread: prefixed by `name-tid`, and the two parses stay apart.
    let opts = FoldedOptions {
        per_thread: true,
        short_names: true,
        ..FoldedOptions::default()
    };
    let mut out = Vec::new();
    traced_folded(t.meta(), ok_events(t.events()), &opts, &mut out).unwrap();
    let got = parse_text(&out);
    assert_eq!(got.get("main-4242;run;parse"), Some(&300_000));
    assert_eq!(got.get("worker-4243;parse"), Some(&100_000));
    assert_eq!(got.get("main-4242;run;fib;fib;fib"), Some(&100_000));
}

#[test]
fn combined_puts_helper_samples_under_the_right_parent_in_proportion() {
    let t = workload();
    let opts = FoldedOptions::default();
    let mut out = Vec::new();
    combined_folded(t.meta(), ok_events(t.events()), resolver(), &opts, &mut out).unwrap();
    let combined = parse_text(&out);
    let c = |s: &str| combined.get(s).copied().unwrap_or(0);

    // parse: 30 helper samples : 10 own samples over 300 us of self time.
    assert_eq!(c("app::run;app::parse;app::helper"), 150_000);
    assert_eq!(
        c("app::run;app::parse;app::helper;app::helper_inner"),
        75_000
    );
    assert_eq!(c("app::run;app::parse"), 75_000);
    // Middle fib: all of its 200 us self time to the helper (20 samples, none own).
    assert_eq!(c("app::run;app::fib;app::fib;app::helper"), 200_000);
    assert_eq!(c("app::run;app::fib;app::fib"), 0);
    // Innermost fib (the innermost of three `fib` frames in the stack): 5:5.
    assert_eq!(c("app::run;app::fib;app::fib;app::fib;app::helper"), 50_000);
    assert_eq!(c("app::run;app::fib;app::fib;app::fib"), 50_000);
    // Outer fib and run: no samples in their self time, which stays theirs.
    assert_eq!(c("app::run;app::fib"), 200_000);
    assert_eq!(c("app::run"), 200_000);
    // Nothing under a wrong parent.
    assert!(!combined
        .keys()
        .any(|k| k.contains("app::helper;app::fib") || k.ends_with("app::run;app::helper")));
    // The one sample outside any traced call: its whole stack, one period (1 kHz).
    assert_eq!(c("std::rt::lang_start"), 1_000_000);

    // Traced totals equal the traced-only totals exactly, frame by frame.
    let mut out = Vec::new();
    traced_folded(t.meta(), ok_events(t.events()), &opts, &mut out).unwrap();
    let traced = frame_totals(&parse_text(&out));
    let both = frame_totals(&combined);
    for (frame, total) in &traced {
        assert_eq!(both.get(frame), Some(total), "total of {frame}");
    }

    // The same numbers through the builder, with the join's bookkeeping.
    let mut b = FoldedBuilder::combined(t.meta(), &opts, resolver());
    b.extend(ok_events(t.events())).unwrap();
    let f = b.finish();
    let s = f.summary();
    assert_eq!(
        (s.samples, s.unmatched, s.untraced, s.depth_mismatches),
        (71, 0, 1, 0)
    );
    let parse = f.stats(&["app::run", "app::parse"]).unwrap();
    assert_eq!(parse.origin, Some(Origin::Traced));
    assert_eq!(
        (parse.calls, parse.total_ns, parse.self_ns, parse.samples),
        (1, 300_000, 300_000, 40)
    );
    assert_eq!(parse.width, 300_000);
    let helper = f.stats(&["app::run", "app::parse", "app::helper"]).unwrap();
    assert_eq!((helper.origin, helper.samples), (Some(Origin::Sampled), 30));
    assert!(f.subtitle().contains("71 samples"), "{}", f.subtitle());
}

#[test]
fn shares_are_exact_integers_with_awkward_ratios() {
    // 1_000_001 ns of self time over samples 1 : 1 : 1 (own, a, b).
    let mut m = meta();
    m.sites = vec![site("work")];
    let mut b = TraceBuilder::new(m);
    b.push(call(0, 0, 0, 0, 1_000_001));
    b.push(sample(0, 10, 1, None, &[RUN, START])); // no `work` frame: not joined
    b.push(sample(0, 20, 1, Some(1), &[HELPER, RUN]));
    b.push(sample(0, 30, 1, Some(0), &[PARSE]));
    let t = b.finish();
    let mut out = Vec::new();
    combined_folded(
        t.meta(),
        ok_events(t.events()),
        resolver(),
        &FoldedOptions::default(),
        &mut out,
    )
    .unwrap();
    let got = parse_text(&out);
    // The recorded cuts are trusted: frames[1] (run) is `work`'s frame, frames[0] is too.
    // Remainder ns go to the earliest entries: the call's own share first.
    assert_eq!(got.get("app::work"), Some(&333_334));
    assert_eq!(
        got.get("app::work;[unknown below app::work];app::run"),
        Some(&333_334)
    );
    assert_eq!(got.get("app::work;app::helper"), Some(&333_333));
    assert_eq!(got.values().sum::<u64>(), 1_000_001);
}

#[test]
fn a_sample_that_cannot_be_joined_goes_under_its_innermost_open_call() {
    // outer [0, 1 ms) { inner [100 us, 900 us) }, and samples inside inner
    // whose stacks hold neither function (no symbols for them, a frame the
    // walk skipped): where they ran below the open calls is unknown.
    let mut m = meta();
    m.sites = vec![site("outer"), site("inner")];
    let mut b = TraceBuilder::new(m);
    b.push(call(0, 0, 0, 0, 1_000_000));
    b.push(call(0, 1, 1, 100_000, 800_000));
    b.push(sample(0, 200_000, 2, None, &[HELPER, RUN, START]));
    b.push(sample(0, 300_000, 2, None, &[HELPER_INLINED, RUN, START]));
    // After both calls returned: no open call, so its own stack from the root.
    b.push(sample(0, 1_500_000, 0, None, &[PARSE, RUN, START]));
    let t = b.finish();
    let opts = FoldedOptions::default();
    let mut fb = FoldedBuilder::combined(t.meta(), &opts, resolver());
    fb.extend(ok_events(t.events())).unwrap();
    let f = fb.finish();
    let lines: BTreeMap<String, u64> = f.lines().into_iter().collect();
    // The open calls, the marker naming the innermost one, the leaf function
    // (the innermost name of the first frame: the inlined one).
    assert_eq!(
        lines.get("app::outer;app::inner;[unknown below app::inner];app::helper"),
        Some(&400_000)
    );
    assert_eq!(
        lines.get("app::outer;app::inner;[unknown below app::inner];app::helper_inner"),
        Some(&400_000)
    );
    // No second copy of those stacks from the root; the untraced sample keeps
    // its own.
    let from_root: Vec<&String> = lines
        .keys()
        .filter(|k| k.starts_with("std::rt::lang_start"))
        .collect();
    assert_eq!(
        from_root,
        ["std::rt::lang_start;app::run;app::parse"],
        "{lines:?}"
    );
    assert!(
        !lines.keys().any(|k| k.contains("[unmatched]")),
        "{lines:?}"
    );
    let s = f.summary();
    assert_eq!((s.samples, s.unmatched, s.untraced), (3, 2, 1));
    assert!(
        f.subtitle()
            .contains("2 samples placed under their innermost call without a join"),
        "{}",
        f.subtitle()
    );
}

#[test]
fn shadow_depth_wins_over_timestamps_and_mismatches_are_counted() {
    let mut b = TraceBuilder::new(meta());
    b.push(call(0, 0, 0, 0, 1_000));
    b.push(call(0, 1, 1, 100, 500));
    // Inside parse by time, but the sampler saw only run open (e.g. taken
    // between parse's shadow push and its timestamp): belongs to run.
    b.push(sample(0, 120, 1, None, &[HELPER, RUN]));
    // Inside parse by time and by depth.
    b.push(sample(0, 300, 2, None, &[HELPER, PARSE, RUN]));
    let t = b.finish();
    let opts = FoldedOptions::default();
    let mut fb = FoldedBuilder::combined(t.meta(), &opts, resolver());
    fb.extend(ok_events(t.events())).unwrap();
    let f = fb.finish();
    assert_eq!(f.summary().depth_mismatches, 1);
    assert_eq!(f.stats(&["app::run", "app::helper"]).unwrap().samples, 1);
    assert_eq!(
        f.stats(&["app::run", "app::parse", "app::helper"])
            .unwrap()
            .samples,
        1
    );

    // By time alone, both belong to parse.
    let opts = FoldedOptions {
        trust_shadow_depth: false,
        ..FoldedOptions::default()
    };
    let mut fb = FoldedBuilder::combined(t.meta(), &opts, resolver());
    fb.extend(ok_events(t.events())).unwrap();
    let f = fb.finish();
    assert!(f.stats(&["app::run", "app::helper"]).is_none());
    // The first one's stack has no parse frame: it hangs under parse, not joined.
    assert_eq!(
        f.stats(&["app::run", "app::parse", "[unknown below app::parse]"])
            .unwrap()
            .samples,
        1
    );
}

/// A cut that always says "the second name": the join's cut is pluggable.
struct SecondName;
impl Cut for SecondName {
    fn cut(&mut self, _: &SiteInfo, stack: &SampleStack<'_>) -> Option<usize> {
        (stack.names.len() > 1).then_some(1)
    }
}

#[test]
fn the_cut_is_pluggable() {
    let mut b = TraceBuilder::new(meta());
    b.push(call(0, 1, 0, 0, 1_000));
    b.push(sample(0, 10, 1, Some(0), &[HELPER, START, RUN]));
    let t = b.finish();
    let opts = FoldedOptions::default();
    let mut fb = FoldedBuilder::combined(t.meta(), &opts, resolver()).with_cut(SecondName);
    fb.extend(ok_events(t.events())).unwrap();
    let f = fb.finish();
    assert_eq!(
        f.lines(),
        vec![("app::parse;app::helper".to_string(), 1_000)]
    );
    // NameCut ignores the recorded cut and finds no `parse` frame.
    let mut fb = FoldedBuilder::combined(t.meta(), &opts, resolver()).with_cut(NameCut);
    fb.extend(ok_events(t.events())).unwrap();
    assert_eq!(fb.finish().summary().unmatched, 1);
}

#[test]
fn recorded_cuts_are_used_unless_names_contradict_them() {
    let mut b = TraceBuilder::new(meta());
    b.push(call(0, 0, 0, 0, 10_000));
    b.push(call(0, 2, 1, 0, 10_000));
    // The sampler's cut says frames[0] is fib itself, but frames[0] is the
    // helper (inlined frames and all): the names win.
    b.push(sample(0, 100, 2, Some(0), &[HELPER_INLINED, FIB, RUN]));
    // fib recursed below the traced call without being recorded (a depth
    // limit): the cut at frames[2] is the traced fib, and the untraced fib
    // above it stays in the sampled part. Name matching alone would cut at
    // frames[1].
    b.push(sample(0, 200, 2, Some(2), &[HELPER, FIB, FIB, RUN]));
    let t = b.finish();
    let mut fb = FoldedBuilder::combined(t.meta(), &FoldedOptions::default(), resolver());
    fb.extend(ok_events(t.events())).unwrap();
    let f = fb.finish();
    let samples = |p: &[&str]| f.stats(p).map(|s| s.samples);
    assert_eq!(
        samples(&["app::run", "app::fib", "app::helper", "app::helper_inner"]),
        Some(1)
    );
    assert_eq!(
        samples(&[
            "app::run",
            "app::fib",
            "app::fib::h0123456789abcdef",
            "app::helper"
        ]),
        Some(1)
    );
    assert_eq!(
        f.stats(&["app::run", "app::fib"]).unwrap().origin,
        Some(Origin::Traced)
    );
}

#[test]
fn sampled_stacks_count_each_sample_once_root_first() {
    let t = workload();
    let opts = FoldedOptions {
        per_thread: true,
        ..FoldedOptions::default()
    };
    let mut b = FoldedBuilder::sampled(t.meta(), &opts, resolver());
    b.extend(ok_events(t.events())).unwrap();
    let f = b.finish();
    assert_eq!(f.count_name(), "samples");
    assert_eq!(f.total(), 71);
    let lines: BTreeMap<String, u64> = f.lines().into_iter().collect();
    let l = |s: &str| lines.get(s).copied().unwrap_or(0);
    assert_eq!(l("main-4242;std::rt::lang_start;app::run;app::parse"), 10);
    assert_eq!(
        l("main-4242;std::rt::lang_start;app::run;app::parse;app::helper"),
        20
    );
    assert_eq!(
        l("main-4242;std::rt::lang_start;app::run;app::parse;app::helper;app::helper_inner"),
        10
    );
    assert_eq!(
        l("main-4242;std::rt::lang_start;app::run;app::fib::h0123456789abcdef;app::fib::h0123456789abcdef;app::helper"),
        20
    );
    assert_eq!(l("main-4242;std::rt::lang_start"), 1);
    let sub = f.subtitle();
    assert!(
        sub.contains("cpu-clock@1000Hz") && sub.contains("71 samples") && sub.contains("2 lost"),
        "{sub}"
    );
}

#[test]
fn a_damaged_stream_renders_what_was_read_then_fails() {
    let t = workload();
    let mut events: Vec<Result<Event, TraceError>> = t.events().take(3).map(Ok).collect();
    events.push(Err(TraceError::Truncated {
        offset: 99,
        what: "chunk",
    }));
    let mut out = Vec::new();
    let err = traced_folded(t.meta(), events, &FoldedOptions::default(), &mut out).unwrap_err();
    assert!(matches!(err, TraceError::Truncated { offset: 99, .. }));
    let got = parse_text(&out);
    assert_eq!(got.get("app::run;app::parse"), Some(&300_000), "{got:?}");
}

/// The frames inferno draws from lines in this order (its flame chart keeps
/// it): (depth, start, width, name), merging equal consecutive frames.
fn chart_frames(lines: &[(String, u64)]) -> Vec<(usize, u64, u64, String)> {
    let mut open: Vec<(String, u64)> = Vec::new();
    let mut done = Vec::new();
    let mut x = 0;
    for (stack, n) in lines {
        let frames: Vec<&str> = stack.split(';').collect();
        let shared = open
            .iter()
            .zip(&frames)
            .take_while(|(o, f)| o.0 == **f)
            .count();
        while open.len() > shared {
            let (name, start) = open.pop().unwrap();
            done.push((open.len(), start, x - start, name));
        }
        for f in &frames[shared..] {
            open.push((f.to_string(), x));
        }
        x += n;
    }
    while let Some((name, start)) = open.pop() {
        done.push((open.len(), start, x - start, name));
    }
    done.sort();
    done
}

#[test]
fn the_chart_is_time_ordered_and_each_call_as_wide_as_it_lasted() {
    let mut m = meta();
    m.duration_ns = 1_000;
    let mut b = TraceBuilder::new(m);
    // run [100, 900) { parse [100, 300), parse [300, 500) (back to back), fib [600, 650) }
    b.push(call(0, 0, 0, 100, 800));
    b.push(call(0, 1, 1, 100, 200));
    b.push(call(0, 1, 1, 300, 200));
    b.push(call(0, 2, 1, 600, 50));
    b.push(call(1, 2, 0, 0, 10));
    let t = b.finish();
    let opts = FoldedOptions {
        short_names: true,
        ..FoldedOptions::default()
    };
    let mut cb = ChartBuilder::new(t.meta(), &opts);
    cb.extend(ok_events(t.events())).unwrap();
    let chart = cb.finish();
    let lines: Vec<(String, u64)> = chart.lines().collect();
    // Each thread spans the session: x is ns since session start.
    assert_eq!(chart.total(), 2 * 1_000);
    let frames = chart_frames(&lines);
    let main: Vec<_> = frames.iter().filter(|f| f.1 < 1_000).collect();
    assert_eq!(
        main,
        [
            &(0, 0, 1_000, "main-4242".to_string()),
            &(1, 100, 800, "run".to_string()),
            &(2, 100, 200, "parse".to_string()),
            &(2, 300, 200, "parse".to_string()), // not merged with the first
            &(2, 600, 50, "fib".to_string()),
        ]
    );
    assert!(
        frames.contains(&(1, 1_000, 10, "fib".to_string())),
        "{frames:?}"
    );
}

#[test]
fn a_windowed_chart_cuts_calls_at_its_edges_and_leaves_short_calls_to_their_caller() {
    let mut m = meta();
    m.duration_ns = 1_000;
    let mut b = TraceBuilder::new(m);
    // run [100, 900) { parse [100, 300), parse [300, 500), fib [600, 650) }
    b.push(call(0, 0, 0, 100, 800));
    b.push(call(0, 1, 1, 100, 200));
    b.push(call(0, 1, 1, 300, 200));
    b.push(call(0, 2, 1, 600, 50));
    b.push(call(1, 2, 0, 0, 10));
    let t = b.finish();
    let opts = FoldedOptions {
        short_names: true,
        ..FoldedOptions::default()
    };
    let window = fgtrace_view::window::Window {
        from_ns: Some(200),
        to_ns: Some(700),
        min_dur_ns: 100,
    };
    let mut cb = ChartBuilder::new(t.meta(), &opts).window(window);
    cb.extend(ok_events(t.events())).unwrap();
    let chart = cb.finish();
    let lines: Vec<(String, u64)> = chart.lines().collect();
    // One thread (the other's call ends before the window), x from 200 to 700.
    assert_eq!(chart.total(), 500, "{lines:?}");
    assert_eq!(chart.summary().calls, 3, "fib is shorter than 100 ns");
    let frames = chart_frames(&lines);
    assert_eq!(
        frames,
        [
            (0, 0, 500, "main-4242".to_string()),
            (1, 0, 500, "run".to_string()),
            (2, 0, 100, "parse".to_string()), // [100, 300) cut at 200
            (2, 100, 200, "parse".to_string()), // [300, 500)
        ]
    );
}

mod svg {
    use super::*;
    use fgtrace_view::flame::{render_svg, FlameOptions};
    use fgtrace_view::flame_svg::{chart_svg, folded_svg, origin_color};

    /// (title, fill, fg:x) of every frame.
    fn frames(svg: &str) -> Vec<(String, String, u64)> {
        let mut out = Vec::new();
        for part in svg.split("<title>").skip(1) {
            let title = part.split("</title>").next().unwrap().to_string();
            let rect = part.split("<rect ").nth(1).unwrap_or("");
            let attr = |k: &str| {
                rect.split(&format!(" {k}=\""))
                    .nth(1)
                    .or_else(|| rect.strip_prefix(&format!("{k}=\"")))
                    .map(|v| v.split('"').next().unwrap().to_string())
            };
            if let (Some(fill), Some(x)) = (attr("fill"), attr("fg:x")) {
                out.push((title, fill, x.parse().unwrap()));
            }
        }
        out
    }

    fn rgb(c: [u8; 3]) -> String {
        format!("rgb({},{},{})", c[0], c[1], c[2])
    }

    #[test]
    fn combined_svg_colours_frames_by_origin_with_exact_tooltips() {
        let t = workload();
        let mut b = FoldedBuilder::combined(t.meta(), &FoldedOptions::default(), resolver());
        b.extend(ok_events(t.events())).unwrap();
        let f = b.finish();
        let opts = FlameOptions {
            title: "combined".into(),
            count_name: f.count_name().into(),
            subtitle: Some(f.subtitle()),
            ..FlameOptions::default()
        };
        let mut out = Vec::new();
        folded_svg(&f, &opts, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        std::fs::write(std::env::temp_dir().join("fgtrace-test-combined.svg"), &svg).ok();
        let fr = frames(&svg);
        let find = |prefix: &str| {
            fr.iter()
                .find(|f| f.0.starts_with(prefix))
                .unwrap_or_else(|| panic!("no frame {prefix}: {fr:?}"))
        };
        let parse = find("app::parse (300,000 ns");
        assert_eq!(parse.1, rgb(origin_color(Origin::Traced, "app::parse")));
        assert!(
            parse
                .0
                .contains("traced: 1 call, total 300 us, self 300 us, 40 samples"),
            "{}",
            parse.0
        );
        let run = find("app::run (");
        assert!(run.0.starts_with("app::run (1,000,000 ns, "), "{}", run.0);
        assert!(
            run.0.contains("traced: 1 call, total 1 ms, self 200 us"),
            "{}",
            run.0
        );
        let helper = fr
            .iter()
            .find(|f| f.0.starts_with("app::helper ("))
            .unwrap();
        assert_eq!(helper.1, rgb(origin_color(Origin::Sampled, "app::helper")));
        assert!(helper.0.contains("sampled: "), "{}", helper.0);
        // Traced and sampled palettes do not overlap: blue against warm.
        let t = origin_color(Origin::Traced, "x");
        let s = origin_color(Origin::Sampled, "x");
        assert!(t[2] > t[0] && s[0] > s[2]);
        assert_ne!(parse.1, helper.1);
    }

    #[test]
    fn chart_svg_draws_time_left_to_right() {
        let mut m = meta();
        m.duration_ns = 1_000;
        let mut b = TraceBuilder::new(m);
        b.push(call(0, 0, 0, 0, 1_000));
        b.push(call(0, 1, 1, 100, 200));
        b.push(call(0, 2, 1, 600, 300));
        let t = b.finish();
        let mut cb = ChartBuilder::new(t.meta(), &FoldedOptions::default());
        cb.extend(ok_events(t.events())).unwrap();
        let chart = cb.finish();
        let mut out = Vec::new();
        let opts = FlameOptions {
            count_name: "ns".into(),
            ..FlameOptions::default()
        };
        chart_svg(&chart, t.meta(), &opts, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        std::fs::write(std::env::temp_dir().join("fgtrace-test-chart.svg"), &svg).ok();
        let fr = frames(&svg);
        let x = |p: &str| fr.iter().find(|f| f.0.starts_with(p)).map(|f| f.2).unwrap();
        assert_eq!(x("app::parse ("), 100);
        assert_eq!(x("app::fib ("), 600);
        let parse = fr.iter().find(|f| f.0.starts_with("app::parse (")).unwrap();
        assert!(
            parse
                .0
                .contains("app::parse (200 ns, 20.00%; app::parse src/app.rs:10: starts at 100 ns, lasts 200 ns)"),
            "{}",
            parse.0
        );
    }

    #[test]
    fn render_svg_flame_chart_keeps_input_order() {
        let mut out = Vec::new();
        let opts = FlameOptions {
            flame_chart: true,
            ..FlameOptions::default()
        };
        render_svg(["a 1", "b 3"], &opts, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        let fr = frames(&svg);
        let x = |p: &str| fr.iter().find(|f| f.0.starts_with(p)).map(|f| f.2).unwrap();
        assert_eq!((x("a ("), x("b (")), (0, 1));
    }
}

#[test]
fn cli_flame_folded_svg_and_errors() {
    let dir = tempdir("flame");
    let path = dir.join("w.fgt");
    workload().save(&path).unwrap();
    let p = path.to_str().unwrap();

    // --traced --folded is the library's traced output, byte for byte.
    let out = fgtrace(&["flame", p, "--traced", "--folded"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = workload();
    let mut want = Vec::new();
    traced_folded(
        t.meta(),
        ok_events(t.events()),
        &FoldedOptions::default(),
        &mut want,
    )
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&want)
    );

    // The default with calls and samples is combined: traced totals kept.
    let out = fgtrace(&["flame", p, "--folded"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let both = frame_totals(&parse_text(&out.stdout));
    for (frame, total) in frame_totals(&parse_text(&want)) {
        assert_eq!(both.get(&frame), Some(&total), "{frame}");
    }

    // SVGs of every kind.
    for args in [
        vec!["--traced"],
        vec!["--sampled", "--per-thread"],
        vec!["--combined"],
        vec!["--chart"],
    ] {
        let svg = dir.join("out.svg");
        let mut a = vec!["flame", p, "-o", svg.to_str().unwrap()];
        a.extend(&args);
        let out = fgtrace(&a);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(
            text.starts_with("<?xml") && text.contains("</svg>"),
            "{args:?}"
        );
    }

    // Nothing to draw, and a trace that is not one: one clear line each.
    let empty = dir.join("empty.fgt");
    TraceBuilder::new(meta()).finish().save(&empty).unwrap();
    let bad = dir.join("bad.fgt");
    std::fs::write(&bad, b"garbage").unwrap();
    let svg = dir.join("x.svg");
    for (args, expect) in [
        (
            vec![
                "flame",
                empty.to_str().unwrap(),
                "--traced",
                "-o",
                svg.to_str().unwrap(),
            ],
            "nothing to draw",
        ),
        (
            vec!["flame", bad.to_str().unwrap(), "--folded"],
            "not an fgtrace trace file",
        ),
    ] {
        let out = fgtrace(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && !err.contains("panicked"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(expect), "{err}");
    }
    let out = fgtrace(&["flame", p, "--chart", "--sampled"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: the argument"));
    std::fs::remove_dir_all(dir).ok();
}

/// A combined view of a program whose file has no line tables (a stripped
/// system binary stands in for it), with samples the join cannot place:
/// `fgtrace flame` says once, on stderr, which profile setting would let
/// them join; with every sample joined, or in a view without a join, it
/// says nothing.
#[test]
fn cli_flame_names_the_profile_setting_when_line_tables_are_missing() {
    use fgtrace_symbols::symbolize::Symbolizer;
    use fgtrace_trace::Mapping;
    const BIN: &str = "/bin/true";
    let mapping = Mapping {
        start: 0x10_0000,
        end: 0x20_0000,
        offset: 0,
        path: BIN.into(),
        build_id: None,
    };
    if !std::path::Path::new(BIN).is_file()
        || Symbolizer::new(std::slice::from_ref(&mapping)).debug_lines(BIN) != Some(false)
    {
        // Every Debian system has it without line tables; CI must not skip.
        assert!(
            std::env::var_os("FGTRACE_REQUIRE_TOOLS").is_none(),
            "{BIN} is missing or has line tables: the test needs a binary without them"
        );
        eprintln!("SKIPPED cli_flame_names_the_profile_setting_when_line_tables_are_missing: {BIN} is missing or has line tables");
        return;
    }
    let trace = |joined: bool| {
        let mut m = meta();
        m.program = "true".into();
        m.sites = vec![site("outer"), site("inner")];
        m.mappings = vec![mapping.clone()];
        let mut b = TraceBuilder::new(m);
        b.push(call(0, 0, 0, 0, 1_000_000));
        b.push(call(0, 1, 1, 100_000, 800_000));
        for i in 0..3 {
            // Recorded cuts are trusted: with one the sample joins below `inner`.
            let cut = joined.then_some(1);
            b.push(sample(
                0,
                200_000 + i * 1_000,
                2,
                cut,
                &[0x10_1000, 0x10_1100],
            ));
        }
        b.finish()
    };
    let dir = tempdir("flame-no-lines");
    let path = dir.join("t.fgt");
    trace(false).save(&path).unwrap();
    let p = path.to_str().unwrap();
    let note = format!(
        "fgtrace: {BIN}: no debug line info, so inlined frames cannot be matched to traced \
         calls; 3 of 3 samples were placed under their innermost call. Build with \
         `[profile.release] debug = \"line-tables-only\"` (or `debug = true`) to join them."
    );
    for args in [&[p, "--folded"][..], &[p][..]] {
        let out = fgtrace(&[&["flame"][..], args].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.lines().filter(|l| *l == note).count(),
            1,
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.matches("no debug line info").count(), 1, "{stderr}");
    }
    let out = fgtrace(&["flame", p, "--folded"]);
    let folded = String::from_utf8_lossy(&out.stdout);
    assert!(
        folded.lines().all(
            |l| l.starts_with("app::outer;app::inner;[unknown below app::inner];")
                || l.starts_with("app::outer ")
        ),
        "{folded}"
    );
    // No join, no note.
    let out = fgtrace(&["flame", p, "--sampled", "--folded"]);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("no debug line info"));
    // Every sample joined: nothing to explain.
    trace(true).save(&path).unwrap();
    let out = fgtrace(&["flame", p, "--folded"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("no debug line info"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A program without frame pointers (the C library, as distributions build
/// it) whose samples were not all joined: the view names the flag, once.
#[test]
fn cli_flame_names_the_flag_when_frame_pointers_are_missing() {
    use fgtrace_trace::Mapping;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let libc = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so"))
        .expect("the C library is mapped")
        .to_string();
    let trace = |joined: bool, sampler: Option<&str>| {
        let mut m = meta();
        m.sampler = sampler.map(str::to_owned);
        m.program = libc.rsplit('/').next().unwrap().into();
        m.sites = vec![site("outer"), site("inner")];
        m.mappings = vec![Mapping {
            start: 0x10_0000,
            end: 0x20_0000,
            offset: 0,
            path: libc.clone(),
            build_id: None,
        }];
        let mut b = TraceBuilder::new(m);
        b.push(call(0, 0, 0, 0, 1_000_000));
        b.push(call(0, 1, 1, 100_000, 800_000));
        for i in 0..2 {
            let cut = joined.then_some(1);
            b.push(sample(
                0,
                200_000 + i * 1_000,
                2,
                cut,
                &[0x10_1000, 0x10_1100],
            ));
        }
        b.finish()
    };
    let dir = tempdir("flame-no-fp");
    let path = dir.join("t.fgt");
    trace(false, None).save(&path).unwrap();
    let p = path.to_str().unwrap();
    let out = fgtrace(&["flame", p, "--folded"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let note = format!(
        "fgtrace: {libc}: no frame pointers, so the stack walk skips functions and open \
         calls may have no frame in a sample; 2 of 2 samples were placed under their \
         innermost call. Record with fgtrace's `unwind` feature (the perf-ring sampler \
         then unwinds stacks through .eh_frame, as `perf record --call-graph dwarf` does), \
         or build with `RUSTFLAGS=\"-C force-frame-pointers=yes\"` (or \
         `[build] rustflags = [\"-C\", \"force-frame-pointers=yes\"]` in .cargo/config.toml), \
         to join them."
    );
    assert_eq!(stderr.lines().filter(|l| *l == note).count(), 1, "{stderr}");
    // Every sample joined: nothing to explain.
    trace(true, None).save(&path).unwrap();
    let out = fgtrace(&["flame", p, "--folded"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("no frame pointers"), "{stderr}");
    // Unwound through .eh_frame by the recorder (feature `unwind`): frame
    // pointers are not what is missing, whatever stayed unplaced.
    let sampler = "perf ring (kernel call chains); 2 of 2 samples unwound through .eh_frame";
    trace(false, Some(sampler)).save(&path).unwrap();
    let out = fgtrace(&["flame", p, "--folded"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("no frame pointers"), "{stderr}");
}

/// The sampled and combined stacks of a saved file read on two cores, one
/// builder per thread and the resolver shared, are those read on one.
#[test]
fn sampled_and_combined_stacks_on_two_cores_are_those_on_one() {
    use fgtrace_trace::TraceReader;
    // The workload, with samples on the worker's thread too.
    let mut b = TraceBuilder::new(meta());
    for ev in workload().events() {
        let worker_call = matches!(&ev, Event::Call(c) if c.thread == 1);
        b.push(ev);
        if worker_call {
            for i in 0..6u64 {
                b.push(sample(
                    1,
                    101_000 + i * 15_000,
                    1,
                    None,
                    &[HELPER, PARSE, START],
                ));
            }
        }
    }
    let dir = tempdir("flame-cores");
    let path = dir.join("w.fgt");
    b.finish().save(&path).unwrap();
    let opts = FoldedOptions::default();
    for combined in [false, true] {
        let run = |cores| {
            fgtrace_trace::parallel::within(cores, || {
                let r = TraceReader::open(&path).unwrap();
                let m = r.meta().clone();
                let shared = std::sync::Mutex::new(resolver());
                let (f, read) = if combined {
                    FoldedBuilder::combined_from_reader(&m, &opts, r, &shared)
                } else {
                    FoldedBuilder::sampled_from_reader(&m, &opts, r, &shared)
                };
                read.unwrap();
                (f.lines(), f.summary().clone())
            })
        };
        let one = run(1);
        // The worker's samples hang under its own parse, at the root.
        assert!(
            one.0.iter().any(|(l, _)| l == "app::parse;app::helper") || !combined,
            "{:?}",
            one.0
        );
        assert!(
            one.0.iter().any(|(l, _)| l.contains("app::helper")),
            "{:?}",
            one.0
        );
        assert_eq!(run(2), one, "combined: {combined}");
    }
    std::fs::remove_dir_all(dir).ok();
}
