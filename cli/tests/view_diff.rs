//! Two synthetic traces with known differences, compared per function and as
//! a differential flamegraph.

#[path = "../../tests/support/cli.rs"]
mod cli_support;

use cli_support::{fgtrace, tempdir};

use fgtrace_trace::{Event, Trace, TraceBuilder, TraceError, TraceMeta};
use fgtrace_view::diff::{diff, write_diff, Diff, DiffOptions, DiffSort, Side};
use fgtrace_view::ok_events;

#[path = "../../tests/support/traces.rs"]
mod traces;

/// A call on the one thread.
fn call(site: u32, depth: u32, start_ns: u64, dur_ns: u64) -> Event {
    traces::call(0, site, depth, start_ns, dur_ns)
}

fn meta(program: &str, sites: &[&str]) -> TraceMeta {
    TraceMeta {
        program: program.into(),
        duration_ns: 1_000_000,
        ..traces::meta(sites, &[(1, "main")])
    }
}

/// Before: handle (100 us) x2, each with parse (30 us); old (80 us).
fn before() -> Trace {
    let mut b = TraceBuilder::new(meta("v1", &["handle", "parse", "old"]));
    b.push(call(0, 0, 0, 100_000));
    b.push(call(1, 1, 10_000, 30_000));
    b.push(call(0, 0, 200_000, 100_000));
    b.push(call(1, 1, 210_000, 30_000));
    b.push(call(2, 0, 400_000, 80_000));
    b.finish()
}

/// After (sites numbered differently): handle (150 us) x2, each with parse
/// (50 us); no old; new (10 us).
fn after() -> Trace {
    let mut b = TraceBuilder::new(meta("v2", &["new", "parse", "handle"]));
    b.push(call(2, 0, 0, 150_000));
    b.push(call(1, 1, 10_000, 50_000));
    b.push(call(2, 0, 200_000, 150_000));
    b.push(call(1, 1, 210_000, 50_000));
    b.push(call(0, 0, 400_000, 10_000));
    b.finish()
}

fn side(calls: u64, total_ns: u64, self_ns: u64) -> Option<Side> {
    Some(Side {
        calls,
        total_ns,
        self_ns,
        ..Side::default()
    })
}

/// The diff of two in-memory traces.
fn diff_of(a: &Trace, b: &Trace, opts: &DiffOptions) -> Diff {
    let (ea, eb) = (ok_events(a.events()), ok_events(b.events()));
    diff(a.meta(), ea, b.meta(), eb, opts).unwrap()
}

#[test]
fn functions_match_by_full_name_and_sort_by_the_size_of_the_change() {
    let (a, b) = (before(), after());
    let opts = DiffOptions::default();
    let d = diff_of(&a, &b, &opts);
    let names: Vec<&str> = d.rows.iter().map(|r| r.name.as_str()).collect();
    // Total changes: handle +100 us, old -80 us, parse +40 us, new +10 us.
    assert_eq!(names, ["app::handle", "app::old", "app::parse", "app::new"]);
    let row = |n: &str| d.rows.iter().find(|r| r.name == n).unwrap();
    assert_eq!(row("app::handle").before, side(2, 200_000, 140_000));
    assert_eq!(row("app::handle").after, side(2, 300_000, 200_000));
    assert_eq!(row("app::handle").change(DiffSort::Total), 100_000);
    assert!(row("app::old").removed() && row("app::new").added());
    assert_eq!(row("app::new").before, None);

    // By self time: old's 80 us beats handle's +60 us.
    let opts = DiffOptions {
        sort: DiffSort::SelfTime,
        ..DiffOptions::default()
    };
    let d = diff_of(&a, &b, &opts);
    let names: Vec<&str> = d.rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["app::old", "app::handle", "app::parse", "app::new"]);
}

#[test]
fn the_table_shows_before_after_and_change() {
    let (a, b) = (before(), after());
    let mut out = Vec::new();
    write_diff(
        a.meta(),
        ok_events(a.events()),
        b.meta(),
        ok_events(b.events()),
        &DiffOptions::default(),
        &mut out,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    let line = |n: &str| {
        text.lines()
            .find(|l| l.ends_with(&format!("  {n}")))
            .unwrap_or_else(|| panic!("no row {n}:\n{text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        line("app::handle"),
        "200.000 us 300.000 us +50.00% 140.000 us 200.000 us +42.86% 2 2 +0 app::handle"
    );
    assert_eq!(
        line("app::old"),
        "80.000 us - removed 80.000 us - removed 1 - -1 app::old"
    );
    assert_eq!(
        line("app::new"),
        "- 10.000 us added - 10.000 us added - 1 +1 app::new"
    );
    assert!(
        text.contains("4 functions: 2 in both, 1 added, 1 removed"),
        "{text}"
    );
    assert!(
        text.starts_with("# fgtrace diff: before v1 (5 calls"),
        "{text}"
    );
}

#[test]
fn a_damaged_after_trace_shows_what_was_read_and_fails() {
    let (a, b) = (before(), after());
    let mut evs: Vec<Result<Event, TraceError>> = b.events().take(2).map(Ok).collect();
    evs.push(Err(TraceError::Truncated {
        offset: 10,
        what: "chunk",
    }));
    let mut out = Vec::new();
    let err = write_diff(
        a.meta(),
        ok_events(a.events()),
        b.meta(),
        evs,
        &DiffOptions::default(),
        &mut out,
    )
    .unwrap_err();
    assert!(matches!(err, TraceError::Truncated { .. }));
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("app::handle"), "{text}");
}

#[test]
fn differential_flamegraph_of_self_time() {
    use fgtrace_view::diff::{differential_folded, differential_svg};
    use fgtrace_view::flame::FlameOptions;
    use fgtrace_view::folded::{FoldedBuilder, FoldedOptions};
    let (a, b) = (before(), after());
    let opts = FoldedOptions::default();
    let mut fa = FoldedBuilder::traced(a.meta(), &opts);
    fa.extend(ok_events(a.events())).unwrap();
    let mut fb = FoldedBuilder::traced(b.meta(), &opts);
    fb.extend(ok_events(b.events())).unwrap();
    let (fa, fb) = (fa.finish(), fb.finish());
    let mut out = Vec::new();
    differential_folded(&fa, &fb, &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "app::handle 140000 200000\napp::handle;app::parse 60000 100000\napp::new 0 10000\napp::old 80000 0\n"
    );
    let mut svg = Vec::new();
    let fo = FlameOptions {
        count_name: "ns".into(),
        ..FlameOptions::default()
    };
    differential_svg(&fa, &fb, &fo, &mut svg).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    std::fs::write(std::env::temp_dir().join("fgtrace-test-diff.svg"), &svg).ok();
    // Widths from the after trace; the change relative to its total (310 us).
    assert!(
        svg.contains("<title>app::handle (300,000 ns, 96.77%; +19.35%)</title>"),
        "{svg}"
    );
    assert!(
        svg.contains("<title>app::parse (100,000 ns, 32.26%; +12.90%)</title>"),
        "{svg}"
    );
}

#[test]
fn cli_diff_table_flame_and_errors() {
    let dir = tempdir("diff");
    let (pa, pb) = (dir.join("a.fgt"), dir.join("b.fgt"));
    before().save(&pa).unwrap();
    after().save(&pb).unwrap();
    let (a, b) = (pa.to_str().unwrap(), pb.to_str().unwrap());

    let out = fgtrace(&["diff", a, b, "--sort", "self"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().find(|l| l.contains("app::")).unwrap();
    assert!(first.ends_with("app::old"), "{text}");

    let svg = dir.join("d.svg");
    let out = fgtrace(&["diff", a, b, "--flame", "-o", svg.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("app::handle"));

    for (args, expect) in [
        (
            vec!["diff", a, b, "--sort", "avg"],
            "--sort: unknown sort column `avg`",
        ),
        (vec!["diff", a, "/nonexistent/x.fgt"], "/nonexistent/x.fgt"),
    ] {
        let out = fgtrace(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && !err.contains("panicked"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(expect), "{err}");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// Before/after with allocation figures (a `Counters` event after each call,
/// as `fgtrace::alloc::Counting` records them): `parse` allocates 3 times per
/// call before, 4 after.
fn with_allocs(parse_allocs: u64) -> Trace {
    let mut m = meta("v", &["handle", "parse"]);
    m.counters = ["allocs", "alloc_bytes", "frees", "freed_bytes", "reallocs"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut b = TraceBuilder::new(m);
    let counters = |allocs: u64| {
        Event::Counters(fgtrace_trace::CallCounters {
            thread: 0,
            values: vec![allocs, allocs * 16, allocs, allocs * 16, 0],
        })
    };
    for i in 0..2 {
        b.push(call(0, 0, i * 200_000, 100_000));
        b.push(counters(parse_allocs + 1));
        b.push(call(1, 1, i * 200_000 + 10_000, 30_000));
        b.push(counters(parse_allocs));
    }
    b.finish()
}

#[test]
fn the_gate_fails_on_growth_beyond_a_limit_and_passes_within_it() {
    use fgtrace_view::diff::{Limit, Metric};
    let (a, b) = (before(), after());
    let d = diff_of(&a, &b, &DiffOptions::default());
    let lim = |s: &str| s.parse::<Limit>().unwrap();
    // handle: 200 -> 300 us (+50%), parse: 60 -> 100 us (+66.7%).
    let g = d.gate(Metric::Total, &[lim("70%")]);
    assert!(g.passed(), "{g:?}");
    let g = d.gate(Metric::Total, &[lim("70%"), lim("parse=60%")]);
    assert!(!g.passed());
    let bad: Vec<&str> = g
        .rows
        .iter()
        .filter(|r| r.regressed)
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(bad, ["app::parse"]);
    let mut text = Vec::new();
    g.write(&mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains("FAILED (1 of 2 functions over their limits)"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("REGRESSED") && l.contains("+66.67%") && l.ends_with("app::parse")),
        "{text}"
    );
    // Calls did not change: a deterministic gate passes at 0%.
    assert!(d.gate(Metric::Calls, &[lim("0%")]).passed());
    // A misspelt function fails rather than passing unchecked.
    let g = d.gate(Metric::Total, &[lim("prase=5%")]);
    assert_eq!(g.unmatched, ["prase"]);
    assert!(!g.passed());
    // No allocation figures in these traces: a gate on them fails, saying so.
    assert!(d.gate(Metric::Allocs, &[lim("0%")]).unavailable);
    for bad in ["ten", "parse=", "=5%", "-3%"] {
        assert!(bad.parse::<Limit>().is_err(), "{bad}");
    }
}

#[test]
fn the_gate_on_allocations() {
    use fgtrace_view::diff::{Limit, Metric};
    let (a, b) = (with_allocs(3), with_allocs(4));
    let d = diff_of(&a, &b, &DiffOptions::default());
    let parse = d.rows.iter().find(|r| r.name == "app::parse").unwrap();
    assert_eq!(parse.before.unwrap().allocs, Some(6));
    assert_eq!(parse.after.unwrap().allocs, Some(8));
    let g = d.gate(Metric::Allocs, &["10%".parse::<Limit>().unwrap()]);
    assert!(!g.passed());
    assert!(g.rows.iter().all(|r| r.regressed), "{g:?}");
    let same = d.gate(Metric::Allocs, &["40%".parse::<Limit>().unwrap()]);
    assert!(same.passed(), "{same:?}");
}

#[test]
fn cli_gate_exits_non_zero_on_a_regressed_pair_and_zero_on_an_unchanged_one() {
    let dir = tempdir("gate");
    let (pa, pb, pc) = (dir.join("a.fgt"), dir.join("b.fgt"), dir.join("c.fgt"));
    before().save(&pa).unwrap();
    after().save(&pb).unwrap();
    with_allocs(3).save(&pc).unwrap();
    let (a, b, c) = (
        pa.to_str().unwrap(),
        pb.to_str().unwrap(),
        pc.to_str().unwrap(),
    );

    let out = fgtrace(&["diff", a, b, "--fail-above", "10%"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("REGRESSED"), "{stdout}");
    assert!(
        stderr.contains("gate failed: 2 functions regressed"),
        "{stderr}"
    );

    let out = fgtrace(&[
        "diff",
        a,
        b,
        "--fail-above",
        "100%",
        "--fail-above",
        "parse=70%",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = fgtrace(&[
        "diff",
        a,
        b,
        "--fail-above",
        "100%",
        "--fail-above",
        "parse=5%",
    ]);
    assert!(!out.status.success());

    // The same trace against itself: unchanged, exit 0 even at 0%.
    for (x, metric) in [(a, "total"), (c, "allocs"), (c, "calls")] {
        let out = fgtrace(&["diff", x, x, "--fail-above", "0%", "--metric", metric]);
        assert!(
            out.status.success(),
            "{metric}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("passed"));
    }

    // JSON parses, with the gate's verdict.
    let out = fgtrace(&["diff", a, b, "--format", "json", "--fail-above", "10%"]);
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("diff json parses");
    assert_eq!(v["rows"].as_array().unwrap().len(), 4);
    assert_eq!(v["gate"]["rows"][0]["regressed"], true);
    let out = fgtrace(&["diff", a, b, "--format", "json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["gate"].is_null());
    let parse = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "app::parse")
        .unwrap();
    assert_eq!(parse["before"]["total_ns"], 60_000);
    assert_eq!(parse["after"]["calls"], 2);

    for (args, expect) in [
        (
            vec!["diff", a, b, "--fail-above", "lots"],
            "--fail-above: `lots`",
        ),
        (
            vec!["diff", a, b, "--metric", "speed", "--fail-above", "1%"],
            "--metric: unknown metric",
        ),
        (
            vec!["diff", a, b, "--format", "xml"],
            "--format: unknown format",
        ),
        (
            vec!["diff", a, b, "--fail-above", "prase=1%"],
            "no function in both traces matches `prase`",
        ),
    ] {
        let out = fgtrace(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && !err.contains("panicked"), "{err}");
        assert!(err.contains(expect), "{err}");
    }
    std::fs::remove_dir_all(dir).ok();
}
