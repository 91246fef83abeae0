//! Per-call values (`#[traced(values(..))]`, `ret`): recorded beside each
//! call, read back from a capture and shown by the views.

use fgtrace::testing::{capture, Growth, Measure, GROWTH_TOLERANCE};
use fgtrace::traced;
use std::hint::black_box;

#[derive(Debug, PartialEq)]
pub struct BadLine;

#[traced(values(len = input.len()), ret)]
fn parse_line(input: &str) -> Result<usize, BadLine> {
    if input.starts_with('#') {
        return Err(BadLine);
    }
    Ok(input.split(',').count())
}

#[traced(values(depth, big = depth > 2, first = 'x'))]
fn nested(depth: u32) -> u32 {
    if depth == 0 {
        0
    } else {
        nested(depth - 1) + 1
    }
}

#[traced(ret)]
fn find(v: &[u8], x: u8) -> Option<usize> {
    v.iter().position(|&b| b == x)
}

struct Parser {
    seen: u64,
}

#[traced]
impl Parser {
    #[traced(values(n = self.seen, neg = -(n as i64)))]
    fn feed(&mut self, n: u64) -> u64 {
        self.seen += n;
        self.seen
    }
    fn plain(&self) -> u64 {
        self.seen
    }
}

#[traced(values(len = input.len()), ret)]
async fn parse_async(input: String) -> Option<u32> {
    input.parse().ok()
}

/// Deterministic work proportional to `len` (linear) or `len²` (quadratic).
#[traced(values(len = n))]
fn linear(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n * 64 {
        acc = black_box(acc.wrapping_add(i));
    }
    acc
}

#[traced(values(len = n))]
fn quadratic(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n * n {
        acc = black_box(acc.wrapping_add(i));
    }
    acc
}

fn value_strings(cap: &fgtrace::testing::Capture, name: &str) -> Vec<String> {
    cap.values(name)
        .into_iter()
        .map(|c| {
            c.values
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn values_and_return_values_are_recorded_per_call() {
    let cap = capture(|| {
        for line in ["a,b,c", "#comment", "x"] {
            let _ = parse_line(line);
        }
        nested(3);
        find(b"hello", b'l');
        find(b"hello", b'z');
        let mut p = Parser { seen: 1 };
        p.feed(5);
        p.plain();
    });
    assert_eq!(
        value_strings(&cap, "parse_line"),
        ["len=5 ret=Ok(3)", "len=8 ret=Err", "len=1 ret=Ok(1)"]
    );
    assert_eq!(
        value_strings(&cap, "nested"),
        [
            // Pre-order: the outermost call first.
            "depth=3 big=true first='x'",
            "depth=2 big=false first='x'",
            "depth=1 big=false first='x'",
            "depth=0 big=false first='x'"
        ]
    );
    assert_eq!(value_strings(&cap, "find"), ["ret=Some(2)", "ret=None"]);
    assert_eq!(value_strings(&cap, "Parser::feed"), ["n=1 neg=-5"]);
    assert_eq!(value_strings(&cap, "Parser::plain"), [""]);
}

#[test]
fn async_fns_record_values_at_first_poll_and_ret_at_completion() {
    let cap = capture(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            parse_async("42".into()).await;
            parse_async("x".into()).await;
        });
    });
    assert_eq!(
        value_strings(&cap, "parse_async"),
        ["len=2 ret=Some(42)", "len=1 ret=None"]
    );
}

/// Ten sizes, each a few times (the fit takes the fastest call of each size).
fn sizes(f: fn(u64) -> u64) -> fgtrace::testing::Capture {
    capture(|| {
        for _ in 0..3 {
            for len in (1..=10).map(|k| k * 40) {
                black_box(f(black_box(len)));
            }
        }
    })
}

#[test]
fn assert_growth_passes_a_linear_function() {
    let cap = sizes(linear);
    let fit = cap.assert_growth("linear", "len", Growth::Linear);
    assert!((fit.exponent - 1.0).abs() < 0.1, "{fit:?}");
    assert_eq!(fit.sizes, 10);
}

#[test]
fn assert_growth_fails_a_quadratic_function_naming_the_fit() {
    let cap = sizes(quadratic);
    let fit = cap.assert_growth("quadratic", "len", Growth::Quadratic);
    assert!((fit.exponent - 2.0).abs() < 0.1, "{fit:?}");
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cap.assert_growth("quadratic", "len", Growth::Linear);
    }))
    .expect_err("a quadratic function passed as linear");
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains("grows faster than Linear in `len`"), "{msg}");
    assert!(msg.contains("duration ~ len^"), "{msg}");
    assert!(msg.contains("calls furthest above the fit"), "{msg}");
}

#[test]
fn growth_on_allocation_counts_says_why_when_not_counted() {
    let cap = sizes(linear);
    let err = cap
        .assert_growth_of(
            "linear",
            "len",
            Growth::Linear,
            Measure::Allocations,
            GROWTH_TOLERANCE,
        )
        .unwrap_err();
    assert!(err.contains("fgtrace::alloc::Counting"), "{err}");
}
