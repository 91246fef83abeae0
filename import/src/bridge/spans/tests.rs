use super::*;
use fgtrace_trace::Call;

fn span(trace: u128, id: u64, parent: u64, begin: u64, dur: u64, name: &'static str) -> Span {
    Span {
        trace_id: trace,
        span_id: id,
        parent_id: parent,
        begin_unix_ns: begin,
        duration_ns: dur,
        name: name.into(),
        ..Default::default()
    }
}

fn shape(t: &Trace) -> Vec<String> {
    t.events()
        .map(|e| match e {
            Event::Call(c) => format!(
                "{}:{}{}@{}",
                c.thread,
                "  ".repeat(c.depth as usize),
                t.meta().site_name(c.site),
                c.start_ns
            ),
            Event::Lost(l) => format!(
                "{}:{}lost{}",
                l.thread,
                "  ".repeat(l.depth as usize),
                l.count
            ),
            Event::Future(f) => format!("{}:future {}", f.thread, t.meta().site_name(f.site)),
            _ => "?".into(),
        })
        .collect()
}

/// Children come out of order and a parent arrives after its children
/// (as reporters deliver them); trees are rebuilt per trace id.
#[test]
fn rebuilds_trees_per_trace_id_in_time_order() {
    let spans = vec![
        span(7, 3, 1, 1_030, 5, "b"),
        span(7, 2, 1, 1_010, 10, "a"),
        span(9, 5, 0, 1_005, 50, "other"),
        span(7, 4, 2, 1_012, 2, "a1"),
        span(7, 1, 0, 1_000, 100, "root"),
    ];
    let (t, s) = spans_to_trace(&spans);
    assert_eq!(
        shape(&t),
        vec![
            "0:root@0",
            "0:  a@10",
            "0:    a1@12",
            "0:  b@30",
            "1:other@5"
        ],
        "{:?}",
        shape(&t)
    );
    assert_eq!(t.meta().threads.len(), 2);
    assert_eq!(t.meta().threads[0].name, "7");
    assert_eq!(t.meta().clock.start_unix_ns, 1_000);
    assert_eq!(t.meta().duration_ns, 100);
    assert_eq!(
        s,
        ImportSummary {
            spans: 5,
            traces: 2,
            threads: 2,
            ..Default::default()
        }
    );
}

#[test]
fn orphans_cycles_and_duplicates_do_not_break_the_import() {
    let spans = vec![
        span(1, 10, 0, 100, 50, "root"),
        span(1, 11, 99, 110, 5, "orphan"), // parent never received
        span(1, 12, 13, 120, 5, "cyc1"),
        span(1, 13, 12, 121, 5, "cyc2"),
        span(1, 14, 14, 130, 5, "self"),
        span(1, 10, 0, 140, 5, "dup"),
        span(1, 15, 10, 105, 1, "child"),
    ];
    let (t, s) = spans_to_trace(&spans);
    assert_eq!(s.orphans, 1);
    assert_eq!(s.duplicates, 1);
    assert_eq!(s.cycles, 2);
    assert_eq!(t.calls().count(), 7);
    assert_eq!(
        shape(&t),
        vec![
            "0:root@0",
            "0:  child@5",
            "0:orphan@10",
            "0:cyc1@20",
            "0:  cyc2@21",
            "0:self@30",
            "0:dup@40"
        ]
    );
    let (empty, s) = spans_to_trace(&[]);
    assert_eq!(empty.calls().count(), 0);
    assert_eq!(s, ImportSummary::default());
}

fn meta_two_threads() -> TraceMeta {
    TraceMeta {
        pid: 42,
        clock: ClockInfo {
            start_unix_ns: 1_000_000,
            ..Default::default()
        },
        sites: ["main", "work", "leaf", "fut"]
            .iter()
            .map(|n| SiteInfo {
                name: n.to_string(),
                module_path: "demo".into(),
                file: "demo.rs".into(),
                line: 3,
                is_async: *n == "fut",
                values: Vec::new(),
            })
            .collect(),
        threads: vec![
            ThreadInfo {
                tid: 100,
                name: "main".into(),
                ..Default::default()
            },
            ThreadInfo {
                tid: 101,
                name: "worker".into(),
                ..Default::default()
            },
        ],
        counters: vec!["instructions".into()],
        ..Default::default()
    }
}

use crate::test_traces::call;

fn sample_trace() -> Trace {
    let mut b = TraceBuilder::new(meta_two_threads());
    b.push(Event::Lost(Lost {
        thread: 0,
        depth: 0,
        at_ns: 1,
        count: 3,
        kind: LossKind::Overwritten,
    }));
    b.push(call(0, 0, 0, 10, 100));
    b.push(call(0, 1, 1, 20, 30));
    b.push(Event::Counters(fgtrace_trace::CallCounters {
        thread: 0,
        values: vec![777],
    }));
    b.push(call(0, 2, 2, 25, 5));
    b.push(Event::Lost(Lost {
        thread: 0,
        depth: 1,
        at_ns: 60,
        count: 2,
        kind: LossKind::Dropped,
    }));
    b.push(Event::Call(Call {
        thread: 0,
        site: 1,
        depth: 1,
        start_ns: 70,
        dur_ns: 20,
        flags: flags::UNWOUND,
    }));
    b.push(call(0, 0, 0, 200, 10));
    b.push(call(1, 1, 0, 15, 40));
    b.push(Event::Call(Call {
        thread: 1,
        site: 3,
        depth: 1,
        start_ns: 16,
        dur_ns: 3,
        flags: flags::POLL,
    }));
    b.push(Event::Future(FutureSpan {
        thread: 1,
        site: 3,
        start_ns: 16,
        dur_ns: 30,
        polls: 2,
        cancelled: false,
    }));
    b.finish()
}

fn collect(t: &Trace, opts: &ExportOptions) -> (Vec<Span>, ExportSummary, Vec<usize>) {
    let mut out = Vec::new();
    let mut sizes = Vec::new();
    let sum = export_spans(
        t,
        opts,
        |s| s,
        |b: &mut Vec<Span>| {
            sizes.push(b.len());
            out.append(b);
        },
    );
    (out, sum, sizes)
}

#[test]
fn export_links_parents_batches_and_marks_losses() {
    let t = sample_trace();
    let opts = ExportOptions {
        batch: 3,
        first_trace_id: Some(500),
        ..Default::default()
    };
    let (spans, sum, sizes) = collect(&t, &opts);
    // 7 calls + 1 future + 1 root-level loss span.
    assert_eq!(spans.len(), 9);
    assert_eq!(sizes, vec![3, 3, 3]);
    assert_eq!(
        sum,
        ExportSummary {
            spans: 9,
            traces: 5,
            batches: 3,
            losses: 2
        }
    );
    let ids: std::collections::HashSet<u64> = spans.iter().map(|s| s.span_id).collect();
    assert_eq!(ids.len(), 9);
    assert!(!ids.contains(&0));
    let by_name = |n: &str, begin: u64| {
        spans
            .iter()
            .find(|s| s.name == n && s.begin_unix_ns == 1_000_000 + begin)
            .unwrap()
    };
    let main = by_name("main", 10);
    let work = by_name("work", 20);
    let leaf = by_name("leaf", 25);
    assert_eq!(main.parent_id, 0);
    assert_eq!(main.trace_id, 501, "the root-level loss took 500");
    assert_eq!((work.parent_id, work.trace_id), (main.span_id, 501));
    assert_eq!(leaf.parent_id, work.span_id);
    assert_eq!(work.property("counter.instructions"), Some("777"));
    assert_eq!(leaf.property(keys::CODE_LINENO), Some("3"));
    assert_eq!(leaf.property(keys::THREAD_ID), Some("100"));
    assert_eq!(by_name("work", 70).property(keys::UNWOUND), Some("true"));
    assert_eq!(main.events.len(), 1);
    assert_eq!(main.events[0].timestamp_unix_ns, 1_000_060);
    assert_eq!(find(&main.events[0].properties, keys::LOST), Some("2"));
    let lost = spans.iter().find(|s| s.name == keys::LOST_SPAN).unwrap();
    assert_eq!(
        (
            lost.trace_id,
            lost.property(keys::LOST),
            lost.property(keys::LOST_KIND)
        ),
        (500, Some("3"), Some("overwritten"))
    );
    assert_eq!(by_name("main", 200).trace_id, 502);
    let fut = spans
        .iter()
        .find(|s| s.property(keys::KIND) == Some("future"))
        .unwrap();
    assert_eq!((fut.property(keys::POLLS), fut.parent_id), (Some("2"), 0));

    for (scope, traces) in [(TraceIdScope::Thread, 2), (TraceIdScope::Session, 1)] {
        let (spans, sum, _) = collect(
            &t,
            &ExportOptions {
                trace_ids: scope,
                ..Default::default()
            },
        );
        let distinct: std::collections::HashSet<u128> = spans.iter().map(|s| s.trace_id).collect();
        assert_eq!(
            (sum.traces, distinct.len() as u64),
            (traces, traces),
            "{scope:?}"
        );
    }
    // Default ids are derived from the session: stable across exports.
    let a = collect(&t, &ExportOptions::default()).0;
    let b = collect(&t, &ExportOptions::default()).0;
    assert_eq!(a, b);
}

#[test]
fn export_then_import_gives_back_the_events() {
    let t = sample_trace();
    let (spans, _, _) = collect(&t, &ExportOptions::default());
    let (back, s) = spans_to_trace(&spans);
    assert_eq!(s.orphans, 0);
    let strip = |t: &Trace| -> Vec<Event> {
        t.events()
            .filter(|e| !matches!(e, Event::Counters(_)))
            .map(|e| match e {
                Event::Call(mut c) => {
                    c.start_ns += 1;
                    Event::Call(c)
                }
                Event::Future(mut f) => {
                    f.start_ns += 1;
                    Event::Future(f)
                }
                Event::Lost(mut l) => {
                    l.at_ns += 1;
                    Event::Lost(l)
                }
                e => e,
            })
            .collect()
    };
    // Times come back relative to the earliest span (the loss at 1 ns).
    let orig: Vec<Event> = t
        .events()
        .filter(|e| !matches!(e, Event::Counters(_)))
        .collect();
    assert_eq!(strip(&back).len(), orig.len());
    let mut want = orig.clone();
    want.sort_by_key(|e| e.thread());
    let mut got = strip(&back);
    got.sort_by_key(|e| e.thread());
    assert_eq!(got, want);
    assert_eq!(back.meta().sites, t.meta().sites);
    assert_eq!(back.meta().threads[0].name, "main");
    assert_eq!(back.meta().threads[1].tid, 101);
    assert_eq!(back.meta().threads[0].lost, 5);
}
