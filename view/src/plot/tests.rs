use super::*;
use fgtrace_trace::{flags, SiteInfo, ThreadInfo};

fn meta() -> TraceMeta {
    let site = |m: &str, n: &str| SiteInfo {
        name: n.into(),
        module_path: m.into(),
        file: "x.rs".into(),
        line: 1,
        is_async: false,
        values: Vec::new(),
    };
    TraceMeta {
        duration_ns: 1_000_000,
        sites: vec![
            site("a", "main"),
            site("a", "parse"),
            site("b", "parse"),
            site("a", "leaf"),
        ],
        threads: vec![
            ThreadInfo {
                tid: 1,
                name: "main".into(),
                ..Default::default()
            },
            ThreadInfo {
                tid: 2,
                name: "w".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

fn call(thread: u32, site: u32, depth: u32, start_ns: u64, dur_ns: u64) -> Event {
    let has_children = flags::HAS_CHILDREN;
    crate::test_traces::flagged_call(thread, site, depth, start_ns, dur_ns, has_children)
}

#[test]
fn names_resolve_by_full_path_or_unique_display_name() {
    let m = meta();
    assert_eq!(find_sites(&m, "a::parse").unwrap(), [1]);
    assert_eq!(find_sites(&m, "leaf").unwrap(), [3]);
    let e = find_sites(&m, "parse").unwrap_err().to_string();
    assert!(e.contains("`a::parse`, `b::parse`"), "{e}");
    let e = find_sites(&m, "pars").unwrap_err().to_string();
    assert!(e.contains("no traced function is named `pars`"), "{e}");
    assert!(e.contains("did you mean"), "{e}");
}

#[test]
fn paths_percentiles_and_top_n() {
    let m = meta();
    let opts = PlotOptions {
        function: "leaf".into(),
        top: 2,
        ..Default::default()
    };
    let mut b = DurationsBuilder::new(&m, &opts).unwrap();
    let evs = [
        call(0, 0, 0, 0, 1000),
        call(0, 1, 1, 10, 500),
        call(0, 3, 2, 20, 100),
        call(0, 3, 1, 600, 300), // parse closed: path main;leaf
        call(1, 2, 0, 0, 900),
        call(1, 3, 1, 5, 200),
    ];
    b.extend(evs.iter().cloned().map(Ok)).unwrap();
    let d = b.finish().unwrap();
    assert_eq!(d.count, 3);
    assert_eq!(d.per_thread, [(0, 2), (1, 1)]);
    assert!(d.calls.is_empty(), "calls are kept only when asked");
    assert_eq!((d.min_ns, d.p50_ns, d.max_ns), (100, 200, 300));
    assert_eq!(d.slowest.len(), 2);
    assert_eq!(d.slowest[0].path_names(&m), "main;leaf");
    assert_eq!(d.slowest[0].call.dur_ns, 300);
    assert_eq!(d.slowest[1].path_names(&m), "parse;leaf");
    assert_eq!(d.slowest[1].call.thread, 1);

    // Running text takes human durations; the table keeps uftrace's
    // aligned columns.
    let mut txt = Vec::new();
    write_slowest(&d, &m, &mut txt).unwrap();
    let txt = String::from_utf8(txt).unwrap();
    assert!(
        txt.lines()
            .next()
            .unwrap()
            .ends_with(": 3 calls, p50 200 ns, p99 300 ns, max 300 ns"),
        "{txt}"
    );
    assert!(
        txt.contains("\n    0.300 us      0.600 us  main-1  main;leaf\n"),
        "{txt}"
    );
    let svg = durations_svg(&d, &m, &PlotOptions::default()).unwrap();
    assert!(
        svg.contains("histogram: p50 200 ns, p99 300 ns, min 100 ns, max 300 ns"),
        "{svg}"
    );
}

#[test]
fn no_calls_is_an_error() {
    let m = meta();
    let b = DurationsBuilder::for_sites(&m, &[1], 5, &[]);
    assert!(matches!(b.finish(), Err(PlotError::NoCalls { .. })));
}

#[test]
fn log_ticks_are_human_durations() {
    assert_eq!(log_tick(&0.0), "0 ns");
    assert_eq!(log_tick(&-3.0), "0 ns");
    assert_eq!(log_tick(&100.0), "100 ns");
    // Ticks computed as powers land a hair off the round value.
    assert_eq!(log_tick(&999.999_999_9), "1 us");
    assert_eq!(log_tick(&1500.0), "1.5 us");
    assert_eq!(log_tick(&250e6), "250 ms");
    assert_eq!(log_tick(&12.34e9), "12.34 s");
}

#[test]
fn a_million_calls_keep_a_bounded_sample_and_exact_figures() {
    let m = meta();
    let mut b = DurationsBuilder::for_sites(&m, &[3], 3, &[]);
    let n: u64 = 1_000_000;
    // Durations spread over four decades, starts over the whole trace: every
    // call would get a cell of its own at full resolution.
    let evs = (0..n).map(|i| {
        let dur = 100 + (i * 7919) % 1_000_000;
        Ok(call(0, 3, 0, i % 1_000_000, dur))
    });
    b.extend(evs).unwrap();
    let d = b.finish().unwrap();
    assert_eq!(d.count, n);
    assert!(d.calls.is_empty());
    assert!(
        d.dots.len() <= MAX_CELLS,
        "{} dots for {n} calls",
        d.dots.len()
    );
    assert!(d.dots.len() > 10_000, "{} dots", d.dots.len());
    // The extremes are exact, and the longest calls are among the dots.
    assert_eq!((d.min_ns, d.max_ns), (100, 100 + 999_999));
    assert!(d.dots.iter().any(|c| c.dur_ns == d.max_ns));
    assert_eq!(d.slowest[0].call.dur_ns, d.max_ns);
    // Percentiles within 1% of the exact ones.
    let mut all: Vec<u64> = (0..n).map(|i| 100 + (i * 7919) % 1_000_000).collect();
    all.sort_unstable();
    let rank = |q: f64| all[((q * n as f64).ceil() as usize).clamp(1, all.len()) - 1];
    for (got, q) in [(d.p50_ns, 0.5), (d.p99_ns, 0.99)] {
        let want = rank(q) as f64;
        assert!(
            (got as f64 - want).abs() <= want * 0.01,
            "p{q}: {got} vs {want}"
        );
    }
    // The histogram panel counts every call.
    assert_eq!(d.histogram.counts().map(|(_, c)| c).sum::<u64>(), n);
}

#[test]
fn the_slowest_calls_keep_their_values_without_keeping_calls() {
    let mut m = meta();
    m.sites[3].values = vec!["len".into()];
    let mut b = DurationsBuilder::for_sites(&m, &[3], 2, &[]);
    let mut evs = Vec::new();
    for i in 0..100u64 {
        evs.push(call(0, 3, 0, i * 10, i + 1));
        evs.push(Event::Values(fgtrace_trace::CallValues {
            thread: 0,
            values: vec![Value {
                slot: 0,
                tag: fgtrace_core::values::tag::UNSIGNED,
                bits: i,
            }],
        }));
    }
    b.extend(evs.into_iter().map(Ok)).unwrap();
    let d = b.finish().unwrap();
    assert!(d.values.is_empty());
    let shown: Vec<String> = d.slowest.iter().map(|s| s.values_text(&m)).collect();
    assert_eq!(shown, ["len=99", "len=98"]);
    // A fit needs every call: asked of a builder that did not keep them,
    // it says so instead of fitting nothing.
    let e = growth::growth_points(&d, &m, "len").unwrap_err();
    assert!(matches!(e, PlotError::CallsNotKept { .. }), "{e}");
}

#[test]
fn many_threads_get_nine_legend_lines_and_one_for_the_others() {
    let mut m = meta();
    m.threads = (0..12)
        .map(|i| ThreadInfo {
            tid: 100 + i,
            name: format!("t{i}"),
            ..Default::default()
        })
        .collect();
    let mut b = DurationsBuilder::for_sites(&m, &[3], 1, &[]);
    // Thread i makes i + 1 calls: threads 3 to 11 have the most.
    let evs =
        (0..12u32).flat_map(|t| (0..=t).map(move |k| Ok(call(t, 3, 0, u64::from(k) * 10, 5))));
    b.extend(evs).unwrap();
    let d = b.finish().unwrap();
    let svg = durations_svg(&d, &m, &PlotOptions::default()).unwrap();
    assert!(svg.contains("t11-111 (12)"), "{svg}");
    assert!(svg.contains("t3-103 (4)"), "{svg}");
    assert!(!svg.contains("t2-102"), "{svg}");
    assert!(svg.contains("3 other threads (6)"), "{svg}");
}
