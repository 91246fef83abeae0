//! `fgtrace::alloc::Counting`: exact allocation counts per traced call, self
//! and inclusive, in captures and in sessions; fgtrace's own allocations are
//! never counted.

use fgtrace::alloc::Counting;
use fgtrace::testing::{self, budget};
use fgtrace::view::TraceViews;
use fgtrace::{traced, Config, Event, Session};
use std::alloc::System;
use std::hint::black_box;

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

/// Sessions are process-wide: the tests here take turns recording.
fn one_session() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Allocates exactly `n` boxes of 64 bytes and frees them.
#[traced]
fn leaf(n: usize) -> usize {
    let mut total = 0;
    for i in 0..n {
        let b = black_box(Box::new([i as u8; 64]));
        total += b[0] as usize;
    }
    total
}

/// Two allocations of its own (a Vec with capacity 8, then a String of 5
/// bytes), then `leaf(3)` twice: 2 self, 8 inclusive.
#[traced]
fn parent() -> usize {
    let v: Vec<u64> = black_box(Vec::with_capacity(8));
    let s = black_box(String::from("hello"));
    let n = leaf(3) + leaf(3);
    n + v.capacity() + s.len()
}

/// Grows a Vec by reallocation: 1 allocation, then reallocations.
#[traced]
#[allow(clippy::let_and_return)] // on purpose, see below
fn grows() -> usize {
    let mut v: Vec<u8> = Vec::with_capacity(1);
    v.push(1);
    v.reserve_exact(100); // 1 -> 101 bytes: a realloc
    v.push(2);
    // Not `black_box(v).len()`: a tail expression's temporaries are dropped
    // after the fn's locals, the probe's guard among them (the free would
    // then be the caller's).
    let n = black_box(&v).len();
    n
}

#[traced]
fn none() -> u64 {
    black_box(41) + 1
}

#[traced]
fn recurse(d: u32) -> usize {
    let b = black_box(Box::new(d));
    if d == 0 {
        *b as usize
    } else {
        recurse(d - 1) + 1
    }
}

#[test]
fn a_capture_sees_exact_counts_self_and_inclusive() {
    let cap = testing::capture(|| {
        parent();
        none();
    });
    assert_eq!(cap.calls("leaf"), 2);
    assert_eq!(cap.allocations("leaf"), Some(6));
    assert_eq!(cap.self_allocations("leaf"), Some(6));
    assert_eq!(cap.allocated_bytes("leaf"), Some(6 * 64));
    assert_eq!(cap.freed_bytes("leaf"), Some(6 * 64));
    assert_eq!(cap.allocations("parent"), Some(8));
    assert_eq!(cap.self_allocations("parent"), Some(2));
    assert_eq!(cap.allocated_bytes("parent"), Some(6 * 64 + 8 * 8 + 5));
    assert_eq!(cap.allocations("none"), Some(0));
    assert_eq!(cap.allocations_of("leaf"), Some(vec![3, 3]));
    cap.assert_allocations("parent", 8);
    cap.assert_allocations("leaf", 6);
    cap.assert_allocations("none", 0);
}

#[test]
fn the_same_code_counts_the_same_every_time() {
    let counts: Vec<_> = (0..5)
        .map(|_| testing::capture(parent).alloc_counts("parent"))
        .collect();
    assert!(counts.iter().all(|c| *c == counts[0]), "{counts:?}");
}

#[test]
fn reallocations_and_recursion() {
    let cap = testing::capture(|| {
        grows();
        recurse(4);
    });
    assert_eq!(cap.allocations("grows"), Some(1));
    assert_eq!(cap.reallocations("grows"), Some(1));
    assert_eq!(cap.allocated_bytes("grows"), Some(1 + 101));
    // Five calls, one box each; recursion counted once inclusive.
    assert_eq!(cap.calls("recurse"), 5);
    assert_eq!(cap.allocations("recurse"), Some(5));
    assert_eq!(cap.self_allocations("recurse"), Some(5));
}

#[test]
fn a_wrong_count_fails_with_the_graph_of_the_call() {
    let cap = testing::capture(parent);
    let err =
        std::panic::catch_unwind(|| cap.assert_allocations("parent", 7)).expect_err("8 is not 7");
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains("`parent` allocated 8 times"), "{msg}");
    assert!(msg.contains("expected exactly 7"), "{msg}");
    assert!(
        msg.contains("3 allocs 192 B"),
        "tail comment of a leaf call: {msg}"
    );
    assert!(msg.contains("/* parent: 8 allocs"), "closing brace: {msg}");
}

fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let err = std::panic::catch_unwind(f).expect_err("the assertion fails");
    err.downcast_ref::<String>().unwrap().clone()
}

#[test]
fn budgets_on_bytes_and_totals_fail_naming_the_figure() {
    let cap = testing::capture(parent);
    let msg = panic_message(|| cap.assert_allocated_bytes_per_call("leaf", 100));
    assert!(
        msg.contains(
            "`leaf` allocated 192 bytes in its most allocating call, over its budget of 100 bytes per call (2 calls)"
        ),
        "{msg}"
    );
    assert!(msg.contains("3 allocs 192 B"), "graph of the call: {msg}");
    let msg = panic_message(|| cap.assert_allocations_at_most("leaf", 5));
    assert!(
        msg.contains(
            "`leaf` allocated 6 times in 2 calls, over its budget of 5; the call that allocated most (3):"
        ),
        "{msg}"
    );
    let msg = panic_message(|| cap.assert_allocations_per_call("parent", 7));
    assert!(
        msg.contains("`parent` allocated 8 times in its most allocating call, over its budget of 7 per call (1 calls)"),
        "{msg}"
    );
    // At the limits they hold.
    cap.assert_allocated_bytes_per_call("leaf", 192);
    cap.assert_allocations_at_most("leaf", 6);
    cap.assert_allocations("leaf", 6);
    cap.assert_allocations_per_call("leaf", 3);
}

#[test]
#[budget(
    parent(allocs = 8, alloc_bytes = 4096),
    leaf(allocs = 3, allocs_total = 6)
)]
fn a_budget_on_allocations_passes_at_the_limit() {
    parent();
}

#[test]
#[should_panic(
    expected = "`leaf` allocated 3 times in its most allocating call, over its budget of 2 per call"
)]
#[budget(leaf(allocs = 2))]
fn a_budget_on_allocations_fails_above_it() {
    parent();
}

#[test]
fn a_session_records_the_figures_beside_each_call() {
    let _one = one_session();
    let session = Session::start(Config::builtin()).unwrap();
    std::thread::spawn(|| {
        parent();
        grows();
    })
    .join()
    .unwrap();
    let trace = session.stop().unwrap();
    let meta = trace.meta();
    assert_eq!(meta.counters, fgtrace::alloc::NAMES);
    let mut last = None;
    let mut seen = Vec::new();
    for e in trace.events() {
        match e {
            Event::Call(c) => last = Some(meta.site_name(c.site).to_string()),
            Event::Counters(c) => seen.push((last.take().unwrap(), c.values)),
            _ => {}
        }
    }
    let of = |n: &str| -> Vec<Vec<u64>> {
        seen.iter()
            .filter(|(s, _)| s == n)
            .map(|(_, v)| v.clone())
            .collect()
    };
    // allocs, alloc_bytes, frees, freed_bytes, reallocs; callees included.
    assert_eq!(of("leaf"), vec![vec![3, 192, 3, 192, 0]; 2]);
    assert_eq!(
        of("parent"),
        vec![vec![8, 384 + 64 + 5, 8, 384 + 64 + 5, 0]]
    );
    assert_eq!(of("grows"), vec![vec![1, 102, 1, 102, 1]]);
    // The file keeps them.
    let mut buf = Vec::new();
    trace.write_to(&mut buf).unwrap();
    let back = fgtrace::Trace::read_from(&buf[..]).unwrap();
    assert_eq!(back.meta().counters, fgtrace::alloc::NAMES);
    assert_eq!(
        back.events()
            .filter(|e| matches!(e, Event::Counters(_)))
            .count(),
        seen.len()
    );
}

#[test]
fn graph_report_and_html_show_the_figures() {
    use fgtrace::view::graph::GraphOptions;
    use fgtrace::view::html::HtmlOptions;
    use fgtrace::view::report::ReportOptions;
    let cap = testing::capture(parent);
    let t = cap.trace();

    let mut g = Vec::new();
    t.write_graph(&GraphOptions::default(), &mut g).unwrap();
    let g = String::from_utf8(g).unwrap();
    assert_eq!(
        g.matches("leaf(); /* 3 allocs 192 B, 3 frees 192 B */")
            .count(),
        2,
        "{g}"
    );
    assert!(
        g.contains("} /* parent: 8 allocs 453 B, 8 frees 453 B */"),
        "{g}"
    );

    let r = t.report(&ReportOptions::default());
    let allocs = r.counter_names.iter().position(|n| n == "allocs").unwrap();
    let row = |n: &str| r.functions.iter().find(|f| f.name == n).unwrap();
    assert_eq!(row("parent").counters[allocs], 8);
    assert_eq!(row("parent").self_counters[allocs], 2);
    assert_eq!(row("leaf").counters[allocs], 6);
    let mut text = Vec::new();
    t.write_report(&ReportOptions::default(), &mut text)
        .unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("Allocs  Self allocs  Alloc bytes"), "{text}");
    let parent_line = text.lines().find(|l| l.ends_with("  parent")).unwrap();
    let cells: Vec<&str> = parent_line.split_whitespace().collect();
    // ... s^2, Allocs, Self allocs, Alloc bytes, Reallocs, name
    assert_eq!(
        &cells[cells.len() - 5..],
        ["8", "2", "453", "0", "parent"],
        "{text}"
    );

    let mut html = Vec::new();
    t.write_html(
        fgtrace::view::HexResolve,
        &HtmlOptions::default(),
        &mut html,
    )
    .unwrap();
    let html = String::from_utf8(html).unwrap();
    assert!(
        html.contains(">Self allocs</th>"),
        "allocation columns in the HTML table"
    );
    assert!(
        html.contains("/* parent: 8 allocs"),
        "the graph section's tail comments"
    );
}

/// Calls `none` 1000 times: no allocation of its own.
#[traced]
fn many() -> u64 {
    (0..1000).map(|_| none()).sum()
}

#[test]
fn fgtrace_own_allocations_are_not_counted() {
    // Small batches: while `many` is open its callees' records fill buffers
    // that are handed over (allocating fresh ones) many times, and the
    // thread's join (shadow stack, buffer) happens inside its probe. None of
    // it is charged to the calls.
    let _one = one_session();
    let session = Session::start(Config::builtin().batch_calls(64)).unwrap();
    std::thread::spawn(many).join().unwrap();
    let trace = session.stop().unwrap();
    let meta = trace.meta();
    let mut last = String::new();
    let mut seen = 0;
    for e in trace.events() {
        match e {
            Event::Call(c) => last = meta.site_name(c.site).to_string(),
            Event::Counters(c) => {
                assert_eq!(c.values, [0, 0, 0, 0, 0], "{last}");
                seen += (last == "many") as u32;
            }
            _ => {}
        }
    }
    assert_eq!(seen, 1);
    let cap = testing::capture(many);
    cap.assert_allocations("many", 0);
}

#[test]
fn a_flight_recorder_keeps_the_figures_of_the_calls_it_keeps() {
    let _one = one_session();
    let session = Session::start(Config::builtin().flight_recorder(50)).unwrap();
    std::thread::spawn(|| {
        for _ in 0..100 {
            parent();
        }
    })
    .join()
    .unwrap();
    let trace = session.stop().unwrap();
    let meta = trace.meta();
    let mut last = None;
    let mut calls = 0;
    for e in trace.events() {
        match e {
            Event::Call(c) => {
                calls += 1;
                last = Some(meta.site_name(c.site).to_string());
            }
            Event::Counters(c) => {
                // Every call kept has its own figures; none are a neighbour's.
                let want = match last.take().as_deref() {
                    Some("leaf") => [3, 192, 3, 192, 0],
                    Some("parent") => [8, 453, 8, 453, 0],
                    other => panic!("counters after {other:?}"),
                };
                assert_eq!(c.values, want);
            }
            _ => {}
        }
    }
    assert!(calls > 0 && calls <= 50, "{calls}");
    assert!(meta.threads.iter().map(|t| t.lost).sum::<u64>() > 0);
}

#[test]
fn allocation_figures_and_a_session_counter_together() {
    let _one = one_session();
    let session =
        Session::start(Config::builtin().counters([fgtrace::Counter::TaskClock])).unwrap();
    std::thread::spawn(parent).join().unwrap();
    let trace = session.stop().unwrap();
    let meta = trace.meta();
    let mut names: Vec<String> = fgtrace::alloc::NAMES
        .iter()
        .map(|s| s.to_string())
        .collect();
    names.push("task-clock".into());
    assert_eq!(meta.counters, names);
    let mut last = String::new();
    let mut seen = 0;
    for e in trace.events() {
        match e {
            Event::Call(c) => last = meta.site_name(c.site).to_string(),
            Event::Counters(c) => {
                seen += 1;
                assert_eq!(c.values.len(), 6);
                assert!(c.values[5] > 0, "{last}: task-clock {:?}", c.values);
                let allocs = if last == "parent" { 8 } else { 3 };
                assert_eq!(c.values[0], allocs, "{last}");
            }
            _ => {}
        }
    }
    assert_eq!(seen, 3);
}

#[test]
fn a_trace_written_while_recording_keeps_the_figures() {
    let _one = one_session();
    let path = std::env::temp_dir().join(format!("fgtrace-alloc-{}.fgt", std::process::id()));
    let session = Session::start(Config::builtin().output(&path)).unwrap();
    std::thread::spawn(parent).join().unwrap();
    let trace = session.stop().unwrap();
    let back = fgtrace::Trace::load(&path).unwrap();
    for t in [&trace, &back] {
        let meta = t.meta();
        assert_eq!(meta.counters, fgtrace::alloc::NAMES);
        let mut last = String::new();
        let mut got = Vec::new();
        for e in t.events() {
            match e {
                Event::Call(c) => last = meta.site_name(c.site).to_string(),
                Event::Counters(c) => got.push((last.clone(), c.values[0])),
                _ => {}
            }
        }
        let want = [("parent", 8), ("leaf", 3), ("leaf", 3)];
        let want: Vec<(String, u64)> = want.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        assert_eq!(got, want);
    }
    std::fs::remove_file(&path).ok();
}

/// One allocation per element: allocations grow linearly in `len`.
#[traced(values(len = n))]
fn boxes(n: usize) -> usize {
    (0..n).map(|i| *black_box(Box::new(i))).sum()
}

/// One allocation per pair: quadratic in `len`.
#[traced(values(len = n))]
fn pair_boxes(n: usize) -> usize {
    (0..n * n).map(|i| *black_box(Box::new(i))).sum()
}

#[test]
fn growth_of_allocation_counts_is_exact() {
    use fgtrace::testing::{Growth, Measure};
    let cap = testing::capture(|| {
        for len in (1..=10).map(|k| k * 10) {
            boxes(len);
            pair_boxes(len);
        }
    });
    let calls = cap.values("boxes");
    assert_eq!(calls.len(), 10);
    assert_eq!(calls[2].get("len").unwrap().integer(), Some(30));
    assert_eq!(calls[2].allocations, Some(30));
    let lin = cap
        .assert_growth_of("boxes", "len", Growth::Linear, Measure::Allocations, 0.01)
        .unwrap();
    assert!((lin.exponent - 1.0).abs() < 1e-9, "{lin:?}");
    let quad = cap
        .assert_growth_of(
            "pair_boxes",
            "len",
            Growth::Quadratic,
            Measure::Allocations,
            0.01,
        )
        .unwrap();
    assert!((quad.exponent - 2.0).abs() < 1e-9, "{quad:?}");
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cap.assert_growth_of(
            "pair_boxes",
            "len",
            Growth::Linear,
            Measure::Allocations,
            0.25,
        )
    }));
    let msg = failed.expect_err("quadratic allocations passed as linear");
    let msg = msg.downcast_ref::<String>().unwrap();
    assert!(msg.contains("allocations ~ len^2.00"), "{msg}");
}
