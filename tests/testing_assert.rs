//! `fgtrace::testing` assertions: budgets that hold pass, budgets that are
//! exceeded fail with the offending call's function graph in the message.
//! Durations come from busy-waits of known length and are compared with
//! generous or relative budgets, so nothing here depends on machine speed.

use fgtrace::testing::{self, Options};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[fgtrace::traced]
fn slow_part() {
    spin(Duration::from_millis(3));
}

#[fgtrace::traced]
fn fast_part() -> u32 {
    std::hint::black_box(7)
}

#[fgtrace::traced]
fn parse_headers(slow: bool) -> u32 {
    if slow {
        slow_part();
    }
    fast_part() + fast_part()
}

#[fgtrace::traced]
fn handle(slow: bool) -> u32 {
    parse_headers(slow) + fast_part()
}

/// The panic message of `f`, which must panic.
fn panic_message(f: impl FnOnce()) -> String {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("the assertion should have failed");
    match (err.downcast_ref::<String>(), err.downcast_ref::<&str>()) {
        (Some(s), _) => s.clone(),
        (_, Some(s)) => s.to_string(),
        _ => panic!("a panic without a message"),
    }
}

/// The body lines of the first function graph in a message.
fn graph_lines(msg: &str) -> Vec<&str> {
    msg.lines()
        .skip_while(|l| !l.contains("FUNCTION CALLS"))
        .skip(2)
        .take_while(|l| !l.is_empty())
        .collect()
}

#[test]
fn budgets_that_hold_pass() {
    let (v, cap) = testing::capture_with(|| handle(false));
    assert_eq!(v, 21);
    assert_eq!(cap.calls("parse_headers"), 1);
    assert_eq!(cap.calls("fast_part"), 3);
    assert_eq!(cap.calls("slow_part"), 0);
    assert!(cap.max("parse_headers") < Duration::from_secs(1));
    assert!(cap.total("fast_part") <= cap.total("handle"));
    assert!(cap.self_total("handle") <= cap.total("handle"));
    assert!(cap.min("fast_part") <= cap.percentile("fast_part", 50.0));
    assert!(cap.percentile("fast_part", 50.0) <= cap.max("fast_part"));
    assert_eq!(cap.percentile("fast_part", 100.0), cap.max("fast_part"));
    cap.assert_calls("parse_headers", 1);
    cap.assert_calls("slow_part", 0);
    cap.assert_calls_at_most("fast_part", 3);
    cap.assert_max("parse_headers", Duration::from_secs(1));
    cap.assert_total("fast_part", Duration::from_secs(1));
    cap.assert_self_total("handle", Duration::from_secs(1));
    cap.assert_percentile("fast_part", 99.0, Duration::from_secs(1));
}

#[test]
fn an_exceeded_max_fails_with_the_graph_of_the_slowest_call() {
    let cap = testing::capture(|| {
        handle(false);
        handle(true);
        handle(false);
    });
    let msg = panic_message(|| cap.assert_max("parse_headers", Duration::from_micros(200)));
    assert!(msg.starts_with("fgtrace: `parse_headers` took "), "{msg}");
    assert!(
        msg.contains("over its budget of 200 us (1 of 3 calls over)"),
        "{msg}"
    );
    assert!(msg.contains("at handle > parse_headers (thread "), "{msg}");
    // The ftrace function graph of that one call, slow callee included.
    assert!(msg.contains("# tracer: function_graph"), "{msg}");
    let graph = graph_lines(&msg);
    assert_eq!(graph.len(), 5, "{msg}");
    assert!(graph[0].ends_with("|  parse_headers() {"), "{msg}");
    assert!(graph[1].ends_with("|    slow_part();"), "{msg}");
    assert!(
        graph[2].ends_with("|    fast_part();") && graph[3].ends_with("|    fast_part();"),
        "{msg}"
    );
    assert!(graph[4].ends_with("|  } /* parse_headers */"), "{msg}");
    // The slow callee's line carries its duration: at least the 3 ms spun.
    let us: f64 = graph[1]
        .split(" us")
        .next()
        .unwrap()
        .trim_start_matches([' ', '+', '!', '#', '*', '@', '$'])
        .trim()
        .parse()
        .unwrap();
    assert!(us >= 3000.0, "{msg}");
    // And the callee table names it first.
    let table = msg
        .split("direct callees of this call, most time first:\n")
        .nth(1)
        .expect(&msg);
    assert!(table.lines().next().unwrap().contains("slow_part"), "{msg}");
}

#[test]
fn exceeded_total_percentile_and_self_budgets_fail() {
    let cap = testing::capture(|| {
        for slow in [false, true, false, false] {
            handle(slow);
        }
    });
    let msg = panic_message(|| cap.assert_total("slow_part", Duration::from_micros(10)));
    assert!(
        msg.contains("`slow_part` took") && msg.contains("in 1 calls, over its budget of 10 us"),
        "{msg}"
    );
    assert!(msg.contains("slow_part();"), "{msg}");
    let msg =
        panic_message(|| cap.assert_percentile("parse_headers", 100.0, Duration::from_micros(100)));
    assert!(
        msg.contains("p100 of `parse_headers` over 4 calls is"),
        "{msg}"
    );
    assert!(msg.contains("    slow_part();"), "{msg}");
    // The self time of `parse_headers` excludes the slow callee.
    cap.assert_self_total("parse_headers", Duration::from_millis(2));
    let msg = panic_message(|| cap.assert_self_total("slow_part", Duration::from_micros(10)));
    assert!(msg.contains("`slow_part` spent"), "{msg}");
}

#[test]
fn wrong_call_counts_fail_with_the_callers_and_the_graph() {
    let cap = testing::capture(|| {
        handle(false);
        parse_headers(false);
    });
    let msg = panic_message(|| cap.assert_calls("parse_headers", 1));
    assert!(
        msg.starts_with("fgtrace: `parse_headers` was called 2 times, expected 1"),
        "{msg}"
    );
    assert!(
        msg.contains("1 x  handle") && msg.contains("1 x  (the captured closure)"),
        "{msg}"
    );
    assert!(
        msg.contains("handle() {") && msg.contains("} /* handle */"),
        "{msg}"
    );
    let msg = panic_message(|| cap.assert_calls_at_most("fast_part", 2));
    assert!(
        msg.contains("`fast_part` was called 5 times, at most 2 allowed"),
        "{msg}"
    );
}

#[test]
fn a_budget_on_a_function_never_called_fails() {
    let cap = testing::capture(|| handle(false));
    let msg = panic_message(|| cap.assert_max("parse_header", Duration::from_secs(1)));
    assert!(
        msg.contains("`parse_header` was never called in this capture"),
        "{msg}"
    );
    assert!(
        msg.contains("`handle`, `parse_headers`, `fast_part`"),
        "{msg}"
    );
}

struct Parser;

#[fgtrace::traced]
impl Parser {
    fn parse(&self) -> u32 {
        fast_part()
    }
}

#[test]
fn names_match_display_name_full_path_or_path_suffix() {
    let cap = testing::capture(|| Parser.parse());
    assert_eq!(cap.calls("Parser::parse"), 1);
    assert_eq!(cap.calls("testing_assert::Parser::parse"), 1);
    assert_eq!(cap.calls("parse"), 1); // suffix at a `::` boundary
    assert_eq!(cap.calls("arse"), 0); // not at a boundary
    assert_eq!(cap.calls("testing_assert::fast_part"), 1);
    assert_eq!(cap.calls("other_crate::fast_part"), 0);
}

#[fgtrace::traced]
fn open() {}
#[fgtrace::traced]
fn write() {}
#[fgtrace::traced]
fn close() {}

#[test]
fn containment_and_order() {
    let cap = testing::capture(|| {
        open();
        handle(false);
        write();
        write();
        close();
    });
    assert!(cap.always_inside("parse_headers", "handle"));
    assert!(!cap.always_inside("write", "handle"));
    assert!(cap.never_inside("write", "handle"));
    cap.assert_inside("parse_headers", "handle");
    cap.assert_inside("fast_part", "handle");
    cap.assert_not_inside("open", "handle");
    cap.assert_before("open", "write");
    cap.assert_before("write", "close");
    assert_eq!(
        cap.sequence(&["close", "write", "open"]),
        ["open", "write", "write", "close"]
    );

    let cap = testing::capture(|| {
        handle(false);
        fast_part();
        write();
        open();
    });
    let msg = panic_message(|| cap.assert_inside("fast_part", "handle"));
    assert!(
        msg.contains("`fast_part` was called outside `handle` (1 of 4 calls)"),
        "{msg}"
    );
    assert!(msg.contains("fast_part();   <== outside"), "{msg}");
    let msg = panic_message(|| cap.assert_not_inside("fast_part", "parse_headers"));
    assert!(
        msg.contains("`fast_part` was called inside `parse_headers` (2 of 4 calls)"),
        "{msg}"
    );
    assert!(
        msg.contains("at handle > parse_headers > fast_part"),
        "{msg}"
    );
    assert!(
        msg.contains("parse_headers() {") && msg.contains("fast_part();   <== inside"),
        "{msg}"
    );
    let msg = panic_message(|| cap.assert_before("open", "write"));
    assert!(
        msg.contains("`open` was called after `write` had started"),
        "{msg}"
    );
    assert!(
        msg.contains("write();   <== this") && msg.contains("open();   <== and this"),
        "{msg}"
    );
}

#[fgtrace::traced]
fn short_step() {
    spin(Duration::from_micros(500));
}

#[fgtrace::traced]
fn long_step() {
    spin(Duration::from_millis(40));
}

#[test]
fn ratios_are_relative_budgets() {
    let cap = testing::capture(|| {
        short_step();
        long_step();
    });
    let r = cap.ratio("short_step", "long_step");
    assert!(r > 0.0 && r < 1.0, "{r}");
    // short_step would have to be stalled for 20 ms to break this.
    cap.assert_ratio("short_step", "long_step", 0.5);
    let msg = panic_message(|| cap.assert_ratio("long_step", "short_step", 1.0));
    assert!(
        msg.contains("`long_step` took") && msg.contains("over the allowed ratio 1"),
        "{msg}"
    );
    assert!(msg.contains("long_step();"), "{msg}");
}

#[fgtrace::traced]
fn fib(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        fib(n - 1) + fib(n - 2)
    }
}

#[test]
fn recursion_is_counted_once_in_totals() {
    let cap = testing::capture(|| fib(10));
    assert_eq!(cap.calls("fib"), 177);
    // The outermost call holds all the others.
    assert_eq!(cap.total("fib"), cap.max("fib"));
    assert!(cap.self_total("fib") <= cap.total("fib"));
}

#[test]
fn repetitions_assert_on_the_median_or_the_minimum() {
    let mut n = 0;
    let runs = Options::new().warmup(2).runs(7).repeat(|| {
        n += 1;
        handle(n % 3 == 0)
    });
    assert_eq!(n, 9, "2 warm-up runs, then 7");
    assert_eq!(runs.len(), 7);
    // Runs 3, 6 and 9 were slow: 3 of the 7 measured, so the median is fast.
    let slow = runs
        .runs()
        .iter()
        .filter(|c| c.calls("slow_part") == 1)
        .count();
    assert_eq!(slow, 3);
    assert_eq!(runs.median().calls("slow_part"), 0);
    assert_eq!(runs.stat(testing::Stat::Max).calls("slow_part"), 1);
    let (min, med, max) = (
        runs.min().max("handle"),
        runs.median().max("handle"),
        runs.stat(testing::Stat::Max).max("handle"),
    );
    assert!(min <= med && med <= max && max >= Duration::from_millis(3));
    // The median run is a fast one: a 1 ms budget holds there, not at the max.
    runs.median().assert_max("handle", Duration::from_millis(2));
    runs.min()
        .assert_total("fast_part", Duration::from_millis(2));
    runs.median().assert_ratio("fast_part", "handle", 1.0);
    let msg = panic_message(|| {
        runs.stat(testing::Stat::Max)
            .assert_max("handle", Duration::from_millis(2))
    });
    assert!(
        msg.contains("the maximum over 7 runs of the slowest call of `handle` is"),
        "{msg}"
    );
    assert!(msg.contains("slow_part();"), "{msg}");
    let msg = panic_message(|| runs.median().assert_max("handle", Duration::from_nanos(1)));
    assert!(
        msg.contains("the median over 7 runs of the slowest call of `handle`"),
        "{msg}"
    );
    assert!(msg.contains("handle() {"), "{msg}");
}

#[test]
fn instruction_assertions_need_a_capture_with_counters() {
    let cap = testing::capture(|| handle(false));
    assert_eq!(cap.instructions("handle"), None);
    let msg = panic_message(|| {
        let _ = cap.assert_instructions("handle", 1_000_000);
    });
    assert!(
        msg.contains("this capture was made without counters"),
        "{msg}"
    );
}

#[test]
fn the_whole_graph_is_in_ftrace_format() {
    let cap = testing::capture(|| handle(false));
    let g = cap.graph();
    assert!(g.starts_with("# tracer: function_graph\n"), "{g}");
    let calls: Vec<&str> = g
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(" |  ").nth(1).unwrap())
        .collect();
    assert_eq!(
        calls,
        [
            "handle() {",
            "  parse_headers() {",
            "    fast_part();",
            "    fast_part();",
            "  } /* parse_headers */",
            "  fast_part();",
            "} /* handle */"
        ]
    );
}
