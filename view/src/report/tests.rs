use super::*;
use fgtrace_trace::{flags, LossKind, SiteInfo, ThreadInfo};

fn meta(sites: &[&str]) -> TraceMeta {
    let mut m = TraceMeta {
        program: "demo".into(),
        pid: 7,
        duration_ns: 2_000_000_000,
        ..Default::default()
    };
    m.sites = sites
        .iter()
        .map(|n| SiteInfo {
            name: n.to_string(),
            module_path: String::new(),
            file: "x.rs".into(),
            line: 1,
            is_async: false,
            values: Vec::new(),
        })
        .collect();
    m.threads.push(ThreadInfo {
        tid: 100,
        name: "main".into(),
        ..Default::default()
    });
    m.threads.push(ThreadInfo {
        tid: 101,
        name: "worker".into(),
        lost: 5,
        overruns: 2,
        ..Default::default()
    });
    m
}

use crate::test_traces::call;

fn build(meta: &TraceMeta, opts: &ReportOptions, events: &[Event]) -> Report {
    let mut b = ReportBuilder::new(meta, opts);
    for e in events {
        let Ok(()) = b.push(e);
    }
    b.finish()
}

fn row<'r>(r: &'r Report, name: &str) -> &'r FunctionStats {
    r.functions
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no row {name}"))
}

#[test]
fn self_time_subtracts_recorded_children_only() {
    let m = meta(&["parent", "a", "b", "c"]);
    // parent [0, 100us) { a [10, 30us) { c [12, 17us) }  b [50, 80us) }, twice,
    // interleaved with an unrelated thread whose stack must not mix in.
    let mut evs = Vec::new();
    for k in 0..2u64 {
        let t0 = k * 1_000_000;
        evs.extend([
            call(0, 0, 0, t0, 100_000),
            call(0, 1, 1, t0 + 10_000, 20_000),
            call(1, 0, 0, t0 + 11_000, 7_000),
            call(0, 3, 2, t0 + 12_000, 5_000),
            call(0, 2, 1, t0 + 50_000, 30_000),
        ]);
    }
    let r = build(&m, &ReportOptions::default(), &evs);
    let parent = row(&r, "parent");
    assert_eq!(parent.calls, 4);
    assert_eq!(parent.total_ns, 2 * (100_000 + 7_000));
    // Each main-thread parent: 100 - (20 + 30) = 50 us; the worker's has no children.
    assert_eq!(parent.self_ns, 2 * ((100_000 - 20_000 - 30_000) + 7_000));
    assert_eq!(row(&r, "a").self_ns, 2 * (20_000 - 5_000));
    assert_eq!(row(&r, "b").self_ns, 2 * 30_000);
    assert_eq!(row(&r, "c").self_ns, 2 * 5_000);
    assert_eq!(r.calls, 10);
    assert_eq!(r.threads, 2);
}

#[test]
fn percentiles_are_within_one_percent_and_variance_is_exact() {
    let m = meta(&["f"]);
    // 1..=1000 us in a scrambled order (7919 is prime, so i -> i*7919 mod 1000 permutes).
    let durs: Vec<u64> = (0..1000u64)
        .map(|i| (i * 7919 % 1000 + 1) * 1000 + i % 7)
        .collect();
    let evs: Vec<Event> = durs
        .iter()
        .enumerate()
        .map(|(i, &d)| call(0, 0, 0, i as u64 * 2_000_000, d))
        .collect();
    let r = build(&m, &ReportOptions::default(), &evs);
    let f = row(&r, "f");
    // Independent answers: nearest rank on the sorted values, two-pass variance.
    let mut sorted = durs.clone();
    sorted.sort_unstable();
    let rank = |q: f64| sorted[((q * 1000.0).ceil() as usize).clamp(1, 1000) - 1];
    let within = |got: u64, want: u64| (got as f64 - want as f64).abs() / want as f64 <= 0.01;
    assert!(
        within(f.p50_ns, rank(0.5)),
        "p50 {} vs {}",
        f.p50_ns,
        rank(0.5)
    );
    assert!(
        within(f.p99_ns, rank(0.99)),
        "p99 {} vs {}",
        f.p99_ns,
        rank(0.99)
    );
    let n = durs.len() as f64;
    let mean = durs.iter().sum::<u64>() as f64 / n;
    let var = durs.iter().map(|&d| (d as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0);
    assert!(
        (f.variance_ns2 - var).abs() / var < 1e-9,
        "{} vs {var}",
        f.variance_ns2
    );
    assert_eq!(f.min_ns, sorted[0]);
    assert_eq!(f.max_ns, sorted[999]);
    assert_eq!(f.total_ns, durs.iter().sum::<u64>());
    assert_eq!(f.avg_ns, f.total_ns / 1000);
}

#[test]
fn histogram_buckets_bound_the_relative_error() {
    for v in (0..200u64)
        .chain((1..2000).map(|i| i * 7_777_777))
        .chain([u64::MAX / 3, u64::MAX])
    {
        let mid = Histogram::midpoint(Histogram::index(v));
        let err = (mid as f64 - v as f64).abs() / (v.max(1) as f64);
        assert!(err <= 1.0 / 128.0 + 1e-12, "{v}: bucket midpoint {mid}");
    }
    let mut h = Histogram::default();
    for v in [5, 1, 3] {
        h.add(v);
    }
    assert_eq!(
        (h.quantile(0.0), h.quantile(0.5), h.quantile(1.0)),
        (1, 3, 5)
    );
}

#[test]
fn single_call_has_zero_variance_and_exact_percentiles() {
    let m = meta(&["once"]);
    let r = build(&m, &ReportOptions::default(), &[call(0, 0, 0, 0, 123_456)]);
    let f = row(&r, "once");
    assert_eq!(
        (f.variance_ns2, f.p50_ns, f.p99_ns),
        (0.0, 123_456, 123_456)
    );
}

#[test]
fn sorting_by_columns_and_reverse() {
    let m = meta(&["few_long", "many_short", "mid"]);
    let mut evs = vec![call(0, 0, 0, 0, 900_000)];
    for i in 0..10 {
        evs.push(call(0, 1, 0, 1_000_000 + i * 10_000, 1_000));
    }
    evs.push(call(0, 2, 0, 2_000_000, 50_000));
    evs.push(call(0, 2, 0, 3_000_000, 150_000));
    let names = |col: Column, reverse: bool| {
        let r = build(
            &m,
            &ReportOptions {
                sort_by: col,
                reverse,
                ..Default::default()
            },
            &evs,
        );
        r.functions
            .iter()
            .map(|f| f.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(Column::Total, false),
        ["few_long", "mid", "many_short"]
    );
    assert_eq!(
        names(Column::Total, true),
        ["many_short", "mid", "few_long"]
    );
    assert_eq!(
        names(Column::Calls, false),
        ["many_short", "mid", "few_long"]
    );
    assert_eq!(
        names(Column::Name, false),
        ["few_long", "many_short", "mid"]
    );
    assert_eq!(names(Column::Name, true), ["mid", "many_short", "few_long"]);
    assert_eq!(names(Column::Variance, false)[0], "mid");
    assert_eq!(names(Column::Min, true)[0], "many_short");
    assert_eq!("self".parse::<Column>(), Ok(Column::SelfTime));
    assert!("bogus".parse::<Column>().is_err());
}

#[test]
fn thread_filter_and_loss_lines() {
    let m = meta(&["f", "g"]);
    let evs = [
        call(0, 0, 0, 0, 1_000),
        call(1, 1, 0, 10, 2_000),
        Event::Lost(Lost {
            thread: 1,
            depth: 0,
            at_ns: 3_000,
            count: 9,
            kind: LossKind::Dropped,
        }),
    ];
    let opts = ReportOptions {
        threads: vec!["worker".parse().unwrap()],
        ..Default::default()
    };
    let r = build(&m, &opts, &evs);
    assert_eq!(
        r.functions
            .iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>(),
        ["g"]
    );
    // The Lost events say 9, the metadata 5: the larger wins, nothing is hidden.
    assert_eq!(
        r.losses,
        [ThreadLoss {
            thread: 1,
            label: "worker-101".into(),
            lost: 9,
            overruns: 2
        }]
    );
    let mut out = Vec::new();
    r.write(ReportStyle::Table, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("# LOST 9 records on thread worker-101\n"),
        "{text}"
    );
    assert!(
        text.contains("# (Overruns: 2) on thread worker-101"),
        "{text}"
    );
    // Filtering to main shows no loss line at all.
    let opts = ReportOptions {
        threads: vec![ThreadSel::Tid(100)],
        ..Default::default()
    };
    let r = build(&m, &opts, &evs);
    assert!(r.losses.is_empty() && r.loss_lines.is_empty());
    assert_eq!(r.functions.len(), 1);
}

#[test]
fn futures_get_their_own_rows() {
    let mut m = meta(&["fetch"]);
    m.sites[0].is_async = true;
    let fut = |start_ns, dur_ns, polls, cancelled| {
        Event::Future(FutureSpan {
            thread: 0,
            site: 0,
            start_ns,
            dur_ns,
            polls,
            cancelled,
        })
    };
    let evs = [
        Event::Call(Call {
            thread: 0,
            site: 0,
            depth: 0,
            start_ns: 0,
            dur_ns: 300,
            flags: flags::POLL,
        }),
        // The longest poll, on the other thread.
        Event::Call(Call {
            thread: 1,
            site: 0,
            depth: 0,
            start_ns: 6_000_000,
            dur_ns: 900_000,
            flags: flags::POLL,
        }),
        fut(0, 5_000_000, 3, false),
        fut(6_000_000, 1_000_000, 2, true),
    ];
    let r = build(&m, &ReportOptions::default(), &evs);
    assert_eq!(r.futures.len(), 1);
    let f = &r.futures[0];
    assert_eq!(
        (
            f.futures,
            f.polls,
            f.cancelled,
            f.total_ns,
            f.min_ns,
            f.max_ns
        ),
        (2, 5, 1, 6_000_000, 1_000_000, 5_000_000)
    );
    let mut out = Vec::new();
    r.write(ReportStyle::Table, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("  fetch [future]\n"), "{text}");
    assert!(text.contains("  3.000 ms  "), "avg of the futures: {text}");
    assert_eq!(
        f.longest_poll,
        Some(LongestPoll {
            dur_ns: 900_000,
            thread: 1,
            thread_label: "worker-101".into(),
            start_ns: 6_000_000,
        })
    );
    assert!(text.contains("900.000 us on worker-101"), "{text}");
}

#[test]
fn table_layout() {
    let m = meta(&["kfree"]);
    let evs = [
        call(0, 0, 0, 0, 1_000),
        call(0, 0, 0, 5_000, 2_000),
        call(0, 0, 0, 9_000, 6_000),
    ];
    let r = build(&m, &ReportOptions::default(), &evs);
    let mut out = Vec::new();
    r.write(ReportStyle::Table, &mut out).unwrap();
    // Written by hand: each column right-aligned to max(header, widest cell),
    // two spaces before each; uftrace times are 10 wide; s^2 = 7e6 ns^2 = 7 us^2.
    let want = "\
# fgtrace report: demo (pid 7)
# 3 calls on 1 thread, session 2 s
# LOST 5 records on thread worker-101
# (Overruns: 2) on thread worker-101: calls not recorded, shadow stack full
#
  Calls  Total time   Self time    Avg time    Min time    Max time         p50         p99         s^2  Function
  =====  ==========  ==========  ==========  ==========  ==========  ==========  ==========  ==========  ========
      3    9.000 us    9.000 us    3.000 us    1.000 us    6.000 us    2.000 us    6.000 us  7.000 us^2  kfree
";
    assert_eq!(String::from_utf8(out).unwrap(), want);
}

#[test]
fn ftrace_profiler_layout() {
    let m = meta(&["kfree"]);
    let evs = [
        call(0, 0, 0, 0, 1_000),
        call(0, 0, 0, 5_000, 2_000),
        call(0, 0, 0, 9_000, 6_000),
    ];
    let r = build(
        &m,
        &ReportOptions {
            threads: vec![ThreadSel::Tid(100)],
            ..Default::default()
        },
        &evs,
    );
    let mut out = Vec::new();
    r.write(ReportStyle::Ftrace, &mut out).unwrap();
    // function_stat_show: "  %-30.30s  %10lu", then "    " before each of Time, Avg
    // and s^2, each printed as "<number> us " padded to 12 (trailing spaces kept).
    // Time 9000 ns, Avg 3000 ns, s^2 = 7e6 ns^2 / 1000 = 7000 -> "7.000".
    let want = "  Function                               Hit    Time            Avg             s^2\n\
                    \x20 --------                               ---    ----            ---             ---\n\
                    \x20 kfree                                    3    9.000 us        3.000 us        7.000 us    \n";
    assert_eq!(String::from_utf8(out).unwrap(), want);
}

#[test]
fn count_only_calls_join_their_function_and_are_marked_in_every_style() {
    let mut m = meta(&["run", "len"]);
    m.count_only = vec![
        fgtrace_trace::CountOnly {
            thread: 0,
            site: 1,
            calls_after: 100,
            switched_at_ns: 50_000,
            calls_before: 2,
            mean_ns_before: 15,
        },
        fgtrace_trace::CountOnly {
            thread: 1,
            site: 1,
            calls_after: 50,
            switched_at_ns: 60_000,
            calls_before: 0,
            mean_ns_before: 0,
        },
    ];
    let evs = [
        call(0, 0, 0, 0, 1_000),
        call(0, 1, 1, 100, 10),
        call(0, 1, 1, 200, 20),
    ];
    let r = build(&m, &ReportOptions::default(), &evs);
    let len = row(&r, "len");
    assert_eq!((len.calls, len.count_only), (152, 150));
    assert_eq!(
        (len.total_ns, len.avg_ns),
        (30, 15),
        "times of the recorded calls"
    );
    assert_eq!(row(&r, "run").count_only, 0);
    assert_eq!((r.calls, r.count_only, r.threads), (153, 150, 2));

    let mut table = Vec::new();
    r.write(ReportStyle::Table, &mut table).unwrap();
    let table = String::from_utf8(table).unwrap();
    assert!(table.contains("# 153 calls on 2 threads"), "{table}");
    assert!(
        table.contains("150 calls of 1 function marked [count only]"),
        "{table}"
    );
    let len_line = table.lines().find(|l| l.contains("len")).unwrap();
    assert!(len_line.trim_start().starts_with("152 "), "{len_line}");
    assert!(len_line.ends_with("len [count only]"), "{len_line}");
    let run_line = table.lines().find(|l| l.ends_with("  run")).unwrap();
    assert!(!run_line.contains("count only"), "{run_line}");

    let mut ftrace = Vec::new();
    r.write(ReportStyle::Ftrace, &mut ftrace).unwrap();
    let ftrace = String::from_utf8(ftrace).unwrap();
    assert!(
        ftrace.contains("# count only: len: Hit has 150 calls counted, not timed; Time and Avg are of its 2 recorded calls"),
        "{ftrace}"
    );
    let hit = ftrace.lines().find(|l| l.starts_with("  len ")).unwrap();
    assert!(hit.contains(" 152 "), "{hit}");

    #[cfg(feature = "json")]
    {
        let mut json = Vec::new();
        r.write(ReportStyle::Json, &mut json).unwrap();
        let json = String::from_utf8(json).unwrap();
        assert!(json.contains("\"count_only\": 150"), "{json}");
    }

    // One thread: only its counted calls; a function with no recorded call
    // there still has its row.
    let worker = ReportOptions {
        threads: vec![ThreadSel::Name("worker".into())],
        ..ReportOptions::default()
    };
    let r = build(&m, &worker, &evs);
    let len = row(&r, "len");
    assert_eq!((len.calls, len.count_only, len.avg_ns), (50, 50, 0));
    assert_eq!(r.functions.len(), 1);
}

/// A trace whose clock counts cycles (a board's `mcycle`) and whose calls
/// carry `instructions`: the table shows IPC, inclusive and self.
#[test]
fn instructions_over_a_cycle_clock_show_ipc_inclusive_and_self() {
    let mut m = meta(&["parent", "child"]);
    m.counters = vec!["instructions".into()];
    m.clock.source = "mcycle".into();
    m.clock.ticks_per_ns = 2.0;
    let counters = |v: u64| {
        Event::Counters(fgtrace_trace::CallCounters {
            thread: 0,
            values: vec![v],
        })
    };
    // parent: 100 ns = 200 cycles, 300 instructions (250 its own, over its
    // own 50 ns = 100 cycles); child: 50 ns = 100 cycles, 50 instructions.
    let evs = [
        call(0, 0, 0, 0, 100),
        counters(300),
        call(0, 1, 1, 10, 50),
        counters(50),
    ];
    let r = build(&m, &ReportOptions::default(), &evs);
    assert_eq!(r.cycles_per_ns, Some(2.0));
    let mut out = Vec::new();
    r.write(ReportStyle::Table, &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    let line = |name: &str| {
        out.lines()
            .find(|l| l.ends_with(name))
            .unwrap_or_else(|| panic!("no {name} in\n{out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(out.contains("Self IPC"), "{out}");
    assert!(line("parent").contains("300 250 1.50 2.50"), "{out}");
    assert!(line("child").contains("50 50 0.50 0.50"), "{out}");
    // Not a cycle clock and no `cycles` counter: no IPC.
    m.clock.source = "rdtime".into();
    let r = build(&m, &ReportOptions::default(), &evs);
    let mut out = Vec::new();
    r.write(ReportStyle::Table, &mut out).unwrap();
    assert!(!String::from_utf8(out).unwrap().contains("IPC"));
}

/// A report built per group of threads on cores of their own and merged is
/// the report of one builder, to the bit: counts, self times, counters,
/// futures, losses, percentiles and variances, in every style.
#[test]
fn reports_built_by_thread_group_are_the_report_built_at_once() {
    let mut m = meta(&["run", "parse", "emit", "serve"]);
    m.counters = vec!["instructions".into()];
    for (tid, name) in [(102, "w2"), (103, "w3")] {
        m.threads.push(ThreadInfo {
            tid,
            name: name.into(),
            ..Default::default()
        });
    }
    let counters = |t: u32, v: u64| {
        Event::Counters(fgtrace_trace::CallCounters {
            thread: t,
            values: vec![v],
        })
    };
    // `None`: a read error at that point.
    let mut evs: Vec<Option<Event>> = Vec::new();
    for round in 0..300u64 {
        for t in 0..4u32 {
            let at = round * 100_000 + u64::from(t) * 13;
            // Durations that differ by thread and round, so that the
            // variance of each function mixes every thread's.
            let d = 20_000 + (round * 7919 + u64::from(t) * 104_729) % 50_000;
            evs.push(Some(call(t, 0, 0, at, d)));
            evs.push(Some(counters(t, 3 * d)));
            evs.push(Some(call(t, 1, 1, at + 10, d / 3 + round % 11)));
            evs.push(Some(counters(t, d)));
            if (round + u64::from(t)) % 4 == 0 {
                evs.push(Some(call(t, 2, 2, at + 20, 100 + u64::from(t))));
            }
            // Polls of `serve`, as long on several threads (the earliest wins).
            evs.push(Some(Event::Call(Call {
                thread: t,
                site: 3,
                depth: 0,
                start_ns: at + 60_000,
                dur_ns: 1_000 + (round * 31) % 97,
                flags: flags::POLL,
            })));
            if round % 50 == 7 {
                evs.push(Some(Event::Lost(Lost {
                    thread: t,
                    depth: 1,
                    at_ns: at + 15_000,
                    count: 3,
                    kind: LossKind::Dropped,
                })));
            }
        }
        evs.push(Some(Event::Future(FutureSpan {
            thread: (round % 4) as u32,
            site: 3,
            start_ns: round * 100_000,
            dur_ns: 90_000 + round * 31,
            polls: 3,
            cancelled: round % 9 == 0,
        })));
    }
    evs.insert(evs.len() - 17, None);
    let stream = || {
        evs.iter().map(|e| {
            e.clone().ok_or(TraceError::Truncated {
                offset: 7,
                what: "chunk",
            })
        })
    };
    let opts = ReportOptions::default();
    let text = |r: &Report| {
        [ReportStyle::Table, ReportStyle::Ftrace].map(|s| {
            let mut out = Vec::new();
            r.write(s, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        })
    };
    let (one, read) = ReportBuilder::in_groups(&m, &opts, stream(), 1);
    assert!(matches!(read, Err(TraceError::Truncated { offset: 7, .. })));
    assert!(one.calls > 2_000 && one.futures.len() == 1, "{one:?}");
    let longest = one.futures[0].longest_poll.as_ref().unwrap();
    assert_eq!((longest.dur_ns, longest.thread), (1_096, 0), "{longest:?}");
    assert!(row(&one, "run").variance_ns2 > 0.0);
    // Each thread lost 6 times 3 calls (more than the metadata's 5).
    assert_eq!(one.losses.iter().map(|l| l.lost).sum::<u64>(), 4 * 6 * 3);
    for groups in [2, 3, 4, 7] {
        let (got, read) = ReportBuilder::in_groups(&m, &opts, stream(), groups);
        assert!(matches!(read, Err(TraceError::Truncated { offset: 7, .. })));
        assert_eq!(got, one, "{groups} groups");
        assert_eq!(text(&got), text(&one), "{groups} groups");
    }
}

/// The variance from exact sums is the two-pass variance of the durations,
/// and does not depend on their order.
#[test]
fn variance_is_exact_and_independent_of_order() {
    let durs: Vec<u64> = (0..2000u64).map(|i| 1_000 + (i * 7919) % 3001).collect();
    let n = durs.len() as f64;
    let mean = durs.iter().sum::<u64>() as f64 / n;
    let want = durs.iter().map(|&d| (d as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let mut a = Durations::default();
    durs.iter().for_each(|&d| a.add(d));
    let mut b = Durations::default();
    durs.iter().rev().for_each(|&d| b.add(d));
    let (mut c, mut c2) = (Durations::default(), Durations::default());
    durs[..700].iter().for_each(|&d| c.add(d));
    durs[700..].iter().for_each(|&d| c2.add(d));
    c.merge(&c2);
    assert!(
        (a.variance() - want).abs() / want < 1e-12,
        "{} vs {want}",
        a.variance()
    );
    assert_eq!(a.variance().to_bits(), b.variance().to_bits());
    assert_eq!(a.variance().to_bits(), c.variance().to_bits());
    // {1000, 3000}: exactly 2,000,000 ns².
    let mut two = Durations::default();
    two.add(1_000);
    two.add(3_000);
    assert_eq!(two.variance(), 2_000_000.0);
    // Days-long durations: (Σx)² is far past 128 bits, and the variance
    // is still exact.
    let mut big = Durations::default();
    for d in [1u64 << 50, (1 << 50) + 2, (1 << 50) + 4] {
        big.add(d);
    }
    assert_eq!(big.variance(), 4.0);
}

#[test]
fn planned_counts_have_rows_marked_counted_on_reports_of_every_thread() {
    let mut m = meta(&["run", "tiny"]);
    m.counted = vec![fgtrace_trace::PlannedCount {
        site: 1,
        calls: 7_000,
    }];
    let evs = [call(0, 0, 0, 0, 1_000)];
    let r = build(&m, &ReportOptions::default(), &evs);
    let tiny = row(&r, "tiny");
    assert_eq!((tiny.calls, tiny.counted, tiny.total_ns), (7_000, 7_000, 0));
    assert_eq!(row(&r, "run").counted, 0);
    assert_eq!((r.calls, r.counted), (7_001, 7_000));

    let mut table = Vec::new();
    r.write(ReportStyle::Table, &mut table).unwrap();
    let table = String::from_utf8(table).unwrap();
    assert!(
        table.contains("7000 calls of 1 function marked [counted] were counted exactly"),
        "{table}"
    );
    let line = table.lines().find(|l| l.contains("tiny")).unwrap();
    assert!(line.trim_start().starts_with("7000 "), "{line}");
    assert!(line.ends_with("tiny [counted]"), "{line}");
    assert!(
        line.contains(" - "),
        "no times for a function never timed: {line}"
    );

    let mut ftrace = Vec::new();
    r.write(ReportStyle::Ftrace, &mut ftrace).unwrap();
    let ftrace = String::from_utf8(ftrace).unwrap();
    assert!(
        ftrace.contains("# counted: tiny: Hit has 7000 calls counted by the build's plan"),
        "{ftrace}"
    );

    // Counted in the whole process: a report of one thread leaves them out.
    let main = ReportOptions {
        threads: vec![ThreadSel::Name("main".into())],
        ..ReportOptions::default()
    };
    let r = build(&m, &main, &evs);
    assert!(r.functions.iter().all(|f| f.name != "tiny"));
    assert_eq!(r.counted, 0);
}

/// Futures pending at the end are found however the threads are grouped:
/// a future's polls, its end and its wakes may each be on another thread,
/// and an id is reused once its future ended.
#[test]
fn pending_futures_are_found_across_groups_of_threads() {
    let mut m = meta(&["serve"]);
    for tid in [102, 103] {
        m.threads.push(ThreadInfo {
            tid,
            name: "w".into(),
            ..Default::default()
        });
    }
    let poll = |t: u32, at: u64, id: u64| {
        [
            Event::Call(Call {
                thread: t,
                site: 0,
                depth: 0,
                start_ns: at,
                dur_ns: 10,
                flags: flags::POLL,
            }),
            Event::FutureId(fgtrace_trace::FutureId { thread: t, id }),
        ]
    };
    let mut evs = Vec::new();
    // Future 1: polled on threads 0 and 1, ended on thread 2.
    evs.extend(poll(0, 100, 1));
    evs.extend(poll(1, 300, 1));
    evs.push(Event::Future(FutureSpan {
        thread: 2,
        site: 0,
        start_ns: 100,
        dur_ns: 400,
        polls: 2,
        cancelled: false,
    }));
    evs.push(Event::FutureId(fgtrace_trace::FutureId {
        thread: 2,
        id: 1,
    }));
    // Future 2: polled on thread 0, woken on thread 3 after: stalled.
    evs.extend(poll(0, 200, 2));
    evs.push(Event::Wake(fgtrace_trace::Wake {
        thread: 3,
        site: 0,
        depth: 0,
        ts_ns: 520,
        id: 2,
    }));
    // Future 3: polled on thread 1, never woken after.
    evs.extend(poll(1, 250, 3));
    // A new future at id 1, after the first ended: pending.
    evs.extend(poll(3, 600, 1));
    let opts = ReportOptions::default();
    for groups in [1, 2, 3, 4] {
        let (r, read) = ReportBuilder::in_groups(&m, &opts, evs.iter().cloned().map(Ok), groups);
        read.unwrap();
        let p = &r.pending;
        assert_eq!((p.futures, p.stalled), (3, 1), "{groups} groups: {p:?}");
        let got: Vec<(u64, u64, u32, Option<u64>)> = p
            .listed
            .iter()
            .map(|f| (f.id, f.last_poll_ns, f.thread, f.woken_ns))
            .collect();
        assert_eq!(
            got,
            [(2, 200, 0, Some(520)), (3, 250, 1, None), (1, 600, 3, None)],
            "{groups} groups"
        );
    }
}
