//! `#[fgtrace::testing::budget(..)]`: per-test budgets as an attribute.

use fgtrace::testing::budget;
use std::time::{Duration, Instant};

#[fgtrace::traced]
fn parse_headers(s: &str) -> usize {
    s.lines().count()
}

#[fgtrace::traced]
fn slow_part() {
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(2) {
        std::hint::spin_loop();
    }
}

#[fgtrace::traced]
fn handle(s: &str, slow: bool) -> usize {
    if slow {
        slow_part();
    }
    parse_headers(s)
}

#[fgtrace::traced]
async fn handle_async(s: &str) -> usize {
    tokio::task::yield_now().await;
    handle(s, false)
}

#[test]
#[budget(parse_headers(calls = 1, max = "1s", p99 = "1s", inside = handle), handle(total = "2s", max_calls = 1))]
fn a_budget_that_holds() {
    assert_eq!(handle("a\nb", false), 2);
}

#[test]
#[budget(parse_headers(calls = 2))]
#[budget(handle(not_inside = parse_headers))]
fn stacked_budgets_share_one_capture() {
    handle("a", false);
    handle("b", false);
}

#[test]
#[budget(handle(max = "500us"))]
#[should_panic(expected = "fgtrace: `handle` took")]
fn an_exceeded_budget_fails() {
    handle("x", true);
}

#[test]
#[should_panic(expected = "`parse_headers` was called 2 times, expected 1")]
#[budget(parse_headers(calls = 1))]
fn a_wrong_count_fails() {
    handle("x", false);
    parse_headers("y");
}

#[test]
#[budget(
    runs = 5,
    stat = "min",
    handle(max = "1s", calls = 1),
    parse_headers(instructions = 10_000_000)
)]
fn repeated_runs() {
    handle("a\nb\nc", false);
}

#[test]
#[budget("testing_budget::parse_headers"(calls = 1))]
fn names_by_path() -> Result<(), std::num::ParseIntError> {
    let n: usize = "1".parse()?;
    assert_eq!(handle("a", false), n);
    Ok(())
}

#[test]
#[budget(handle(instructions = 10_000_000, instructions_total = 20_000_000))]
fn instruction_budgets_count_or_skip() {
    handle("a\nb", false);
}

// Below `#[tokio::test]`: the budget captures the runtime's whole `block_on`.
#[tokio::test]
#[budget(handle_async(calls = 1), handle(calls = 1, inside = handle_async))]
async fn under_tokio_test() {
    assert_eq!(handle_async("a").await, 1);
}

// Above it: the async body itself is captured, poll by poll.
#[budget(handle_async(calls = 1, max = "5s"), parse_headers(calls = 1))]
#[tokio::test]
async fn above_tokio_test() {
    handle_async("a").await;
}
