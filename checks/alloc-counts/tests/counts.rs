//! Exact allocation counts per function, seen from a crate that uses fgtrace
//! the way its users do.

use fgtrace::alloc::Counting;
use fgtrace::testing::{self, budget};
use fgtrace::view::TraceViews;
use fgtrace_alloc_counts::{parse, run};
use std::alloc::System;

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

const LINES: [&str; 3] = ["a bb ccc", "dd e", "f"];

#[test]
fn every_function_allocates_exactly_as_written() {
    let cap = testing::capture(|| run(&LINES));
    // split: 1 per line; own: words + 1 per line (3+1, 2+1, 1+1); parse: the sum.
    assert_eq!(cap.allocations("split"), Some(3));
    assert_eq!(cap.allocations("own"), Some(4 + 3 + 2));
    assert_eq!(cap.allocations("parse"), Some(3 + 9));
    assert_eq!(cap.self_allocations("parse"), Some(0));
    assert_eq!(cap.allocations("checksum"), Some(0));
    assert_eq!(cap.allocations("run"), Some(1 + 12));
    assert_eq!(cap.self_allocations("run"), Some(1));
    assert_eq!(cap.allocations_of("own"), Some(vec![4, 3, 2]));
    cap.assert_allocations("run", 13);
    cap.assert_allocations("fgtrace_alloc_counts::own", 9);
    // Bytes: run's Vec<usize> of 3, split's Vec<&str> (len/2 + 1) per line,
    // own's Vec<String> per line and one byte per character of each word.
    let word = std::mem::size_of::<&str>() as u64;
    let string = std::mem::size_of::<String>() as u64;
    let split_bytes = (5 + 3 + 1) * word;
    let own_bytes = 6 * string + 10; // "a bb ccc dd e f": 10 characters
    assert_eq!(cap.allocated_bytes("split"), Some(split_bytes));
    assert_eq!(cap.allocated_bytes("own"), Some(own_bytes));
    assert_eq!(
        cap.allocated_bytes("run"),
        Some(3 * 8 + split_bytes + own_bytes)
    );
}

#[test]
#[budget(
    parse(allocs = 5, calls = 3),
    run(allocs_total = 13, alloc_bytes = 4096),
    checksum(allocs = 0)
)]
fn budgets_hold_at_the_exact_counts() {
    run(&LINES);
}

#[test]
fn a_budget_one_below_fails_naming_the_call() {
    let cap = testing::capture(|| parse("x y z"));
    let err = std::panic::catch_unwind(|| cap.assert_allocations_per_call("parse", 4))
        .expect_err("parse allocates 5 times");
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(
        msg.contains("`parse` allocated 5 times in its most allocating call"),
        "{msg}"
    );
}

#[test]
fn the_committed_snapshot_holds() {
    testing::capture(|| run(&LINES)).assert_snapshot("run");
}

#[test]
fn sessions_carry_the_same_counts() {
    let session = fgtrace::Session::start(fgtrace::Config::builtin()).unwrap();
    std::thread::spawn(|| run(&LINES)).join().unwrap();
    let trace = session.stop().unwrap();
    let r = trace.report(&fgtrace::view::report::ReportOptions::default());
    let allocs = r.counter_names.iter().position(|n| n == "allocs").unwrap();
    let of = |n: &str| {
        let f = r.functions.iter().find(|f| f.name == n).unwrap();
        (f.calls, f.counters[allocs], f.self_counters[allocs])
    };
    assert_eq!(of("run"), (1, 13, 1));
    assert_eq!(of("parse"), (3, 12, 0));
    assert_eq!(of("own"), (3, 9, 9));
    assert_eq!(of("split"), (3, 3, 3));
}
