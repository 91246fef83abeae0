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
    // The exports put them on the whole future.
    let t = cap.trace();
    let mut chrome = Vec::new();
    fgtrace::view::chrome::write_chrome(
        t.meta(),
        t.events().map(Ok),
        fgtrace::view::HexResolve,
        &Default::default(),
        &mut chrome,
    )
    .unwrap();
    let chrome = String::from_utf8(chrome).unwrap();
    assert!(
        chrome.contains("\"cancelled\":false,\"len\":2,\"ret\":\"Some(42)\""),
        "{chrome}"
    );
    let mut pf = Vec::new();
    fgtrace::view::perfetto::write_perfetto(
        t.meta(),
        t.events().map(Ok),
        fgtrace::view::HexResolve,
        &Default::default(),
        &mut pf,
    )
    .unwrap();
    assert!(
        pf.windows(8).any(|w| w == b"Some(42)"),
        "no future value in Perfetto"
    );
}

/// Calls of each size in [`sizes`].
const REPEATS: usize = 7;

/// Ten sizes, each seven times: the fit takes the fastest call of each
/// size, and on a loaded machine (CI's two cores, other builds running) a
/// size's three calls could all be preempted (a fit of len^2.23, r² 0.92,
/// once).
fn sizes(f: fn(u64) -> u64) -> fgtrace::testing::Capture {
    capture(|| {
        for _ in 0..REPEATS {
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
    // Within the documented tolerance; `plot --x` is held to 0.1 on a file
    // (cli/tests/values.rs).
    assert!((fit.exponent - 2.0).abs() < GROWTH_TOLERANCE, "{fit:?}");
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

/// A parser whose work is linear in its input: `parse_line(len=..) = Ok(..)`.
#[traced(values(len = input.len()), ret)]
fn parse_record(input: &[u8]) -> Result<u64, BadLine> {
    if input.is_empty() {
        return Err(BadLine);
    }
    let mut sum = 0u64;
    for _ in 0..64 {
        for &b in input {
            sum = black_box(sum.wrapping_add(b as u64));
        }
    }
    Ok(sum % 100)
}

#[traced]
fn parse_all(inputs: &[Vec<u8>]) -> usize {
    inputs.iter().filter(|i| parse_record(i).is_ok()).count()
}

fn ten_sizes() -> Vec<Vec<u8>> {
    (1..=10).map(|k| vec![b'a'; k * 100]).collect()
}

fn parser_trace() -> fgtrace::Trace {
    let inputs = ten_sizes();
    let cap = capture(|| {
        for _ in 0..3 {
            parse_all(&inputs);
        }
    });
    cap.trace().clone()
}

#[test]
fn graph_prints_values_and_return_values() {
    use fgtrace::view::{GraphOptions, TraceViews};
    let t = parser_trace();
    let mut out = Vec::new();
    t.write_graph(&GraphOptions::default(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    for k in 1..=10 {
        let want = format!("parse_record(len={}) = Ok(", k * 100);
        assert!(text.contains(&want), "no `{want}` in\n{text}");
    }
    assert!(text.contains("parse_all() {"), "{text}");
    // The same after a round trip through the file format.
    let path = std::env::temp_dir().join(format!("fgtrace-values-{}.fgt", std::process::id()));
    t.save(&path).unwrap();
    let back = fgtrace::Trace::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(back.meta.sites, t.meta.sites);
    let mut out2 = Vec::new();
    back.write_graph(&GraphOptions::default(), &mut out2)
        .unwrap();
    assert_eq!(String::from_utf8(out2).unwrap(), text);
}

#[test]
fn perfetto_chrome_and_html_carry_the_values() {
    use fgtrace::view::{HexResolve, TraceViews};
    let t = parser_trace();
    let events = || t.events().map(Ok);
    let mut pf = Vec::new();
    fgtrace::view::perfetto::write_perfetto(
        t.meta(),
        events(),
        HexResolve,
        &Default::default(),
        &mut pf,
    )
    .unwrap();
    // Debug annotations named `len` and `ret`, the ret as text.
    let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    assert!(has(&pf, b"\x52\x03len"), "no `len` annotation name");
    assert!(has(&pf, b"\x52\x03ret"), "no `ret` annotation name");
    assert!(has(&pf, b"Ok("), "no `Ok(..)` return value");
    let mut chrome = Vec::new();
    fgtrace::view::chrome::write_chrome(
        t.meta(),
        events(),
        HexResolve,
        &Default::default(),
        &mut chrome,
    )
    .unwrap();
    let chrome = String::from_utf8(chrome).unwrap();
    for k in 1..=10 {
        assert!(chrome.contains(&format!("\"len\":{}", k * 100)), "{chrome}");
    }
    assert!(chrome.contains("\"ret\":\"Ok("), "{chrome}");
    let mut html = Vec::new();
    t.write_html(HexResolve, &Default::default(), &mut html)
        .unwrap();
    let html = String::from_utf8(html).unwrap();
    assert!(
        html.contains("parse_record(len=1000, ret=Ok("),
        "slowest call without its values"
    );
}

fn growth_of(f: fn(u64) -> u64, name: &str) -> fgtrace::view::growth::Fit {
    use fgtrace::view::plot::{growth, DurationsBuilder, PlotOptions};
    let t = sizes(f).trace().clone();
    let opts = PlotOptions {
        function: name.into(),
        ..Default::default()
    };
    let mut b = DurationsBuilder::new(t.meta(), &opts)
        .unwrap()
        .keeping_calls();
    b.extend(t.events().map(Ok)).unwrap();
    let d = b.finish().unwrap();
    let points = growth::growth_points(&d, t.meta(), "len").unwrap();
    assert_eq!(points.len(), 10 * REPEATS);
    let fit = growth::growth_fit(&points).unwrap();
    let svg = growth::growth_svg(&d, "len", &points, Some(&fit), &opts).unwrap();
    assert!(svg.contains("duration ~ len^"), "{svg}");
    let mut text = Vec::new();
    growth::write_growth(&d, t.meta(), "len", &points, Some(&fit), 3, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains(&format!("duration ~ len^{:.2}", fit.exponent)),
        "{text}"
    );
    let err = growth::growth_points(&d, t.meta(), "size").unwrap_err();
    assert!(
        err.to_string()
            .contains("no value named `size` (it records `len`)"),
        "{err}"
    );
    fit
}

#[test]
fn plot_fits_the_exponent_of_a_linear_and_a_quadratic_function() {
    let lin = growth_of(linear, "linear");
    assert!((lin.exponent - 1.0).abs() < 0.1, "linear: {lin:?}");
    let quad = growth_of(quadratic, "quadratic");
    assert!((quad.exponent - 2.0).abs() < 0.1, "quadratic: {quad:?}");
}

#[test]
#[fgtrace::testing::budget(linear(growth = "len: linear", calls = 30))]
fn budget_accepts_a_growth_class() {
    for _ in 0..3 {
        for len in (1..=10).map(|k| k * 40) {
            black_box(linear(black_box(len)));
        }
    }
}

#[test]
#[should_panic(expected = "`quadratic` grows faster than Power(1.0) in `len`")]
#[fgtrace::testing::budget(quadratic(growth = "len: linear"))]
fn budget_fails_a_quadratic_function_held_to_linear() {
    for _ in 0..3 {
        for len in (1..=10).map(|k| k * 40) {
            black_box(quadratic(black_box(len)));
        }
    }
}

#[test]
fn growth_on_instruction_counts_is_exact_where_counted_and_says_why_where_not() {
    let uncounted = sizes(linear);
    let err = uncounted
        .assert_growth_of("linear", "len", Growth::Linear, Measure::Instructions, 0.05)
        .unwrap_err();
    assert!(err.contains("counters were not requested"), "{err}");
    let counted = fgtrace::testing::capture_counted(|| {
        for len in (1..=10).map(|k| k * 40) {
            black_box(quadratic(black_box(len)));
        }
    });
    match counted.counters() {
        fgtrace::testing::CounterStatus::Instructions => {
            let fit = counted
                .assert_growth_of(
                    "quadratic",
                    "len",
                    Growth::Quadratic,
                    Measure::Instructions,
                    0.05,
                )
                .unwrap();
            assert!((fit.exponent - 2.0).abs() < 0.05, "{fit:?}");
        }
        fgtrace::testing::CounterStatus::Unavailable(why) => {
            // No PMU here: the assertion gives the machine's reason instead of passing.
            let err = counted
                .assert_growth_of(
                    "quadratic",
                    "len",
                    Growth::Quadratic,
                    Measure::Instructions,
                    0.05,
                )
                .unwrap_err();
            assert!(err.contains(why.as_str()), "{err}");
        }
        other => panic!("capture_counted gave {other:?}"),
    }
}

pub struct Buf {
    bytes: Vec<u8>,
}

impl Buf {
    /// `ret` on a method that returns a borrow of `self` (the body runs in a
    /// closure to see the result: it must be free to return `self`'s data).
    #[traced(ret)]
    fn first_mut(&mut self) -> Option<&mut u8> {
        self.bytes.first_mut()
    }
}

#[test]
fn ret_works_on_methods_returning_borrows_of_self() {
    let mut b = Buf { bytes: vec![7] };
    let cap = capture(|| {
        if let Some(x) = b.first_mut() {
            *x += 1;
        }
    });
    assert_eq!(b.bytes, [8]);
    assert_eq!(value_strings(&cap, "first_mut"), ["ret=Some"]);
}

/// Strings a tokenizer names its token kinds and errors with.
#[traced(values(kind), ret)]
fn parse_token(kind: &'static str, input: &str) -> Result<u32, &'static str> {
    input.parse().map_err(|_| "bad digit")
}

#[traced(ret)]
fn token_name(i: u32) -> Option<&'static str> {
    ["ident", "number"].get(i as usize).copied()
}

/// A string longer than the cap the host keeps.
static LONG: &str = concat!(
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "tail that is cut"
);

#[traced(values(s))]
fn long_label(s: &'static str) -> usize {
    s.len()
}

fn string_trace() -> fgtrace::testing::Capture {
    capture(|| {
        for (kind, input) in [
            ("ident", "12"),
            ("number", "x"),
            ("ident", "y"),
            ("ident", "7"),
        ] {
            let _ = parse_token(kind, input);
        }
        token_name(0);
        token_name(5);
        long_label(LONG);
    })
}

#[test]
fn static_str_values_are_recorded_and_read_back_as_text() {
    let cap = string_trace();
    let calls = cap.values("parse_token");
    let shown: Vec<String> = calls.iter().map(|c| c.pairs().join(" ")).collect();
    assert_eq!(
        shown,
        [
            r#"kind="ident" ret=Ok(12)"#,
            r#"kind="number" ret=Err("bad digit")"#,
            r#"kind="ident" ret=Err("bad digit")"#,
            r#"kind="ident" ret=Ok(7)"#
        ]
    );
    assert_eq!(calls[1].text("kind"), Some("number"));
    assert_eq!(calls[1].text("ret"), Some("bad digit"));
    assert_eq!(calls[0].text("ret"), None, "Ok(12) is no string");
    let names: Vec<String> = cap
        .values("token_name")
        .iter()
        .map(|c| c.shown("ret").unwrap())
        .collect();
    assert_eq!(names, [r#"Some("ident")"#, "None"]);
    // Each distinct text once in the trace's string table.
    let strings = &cap.trace().meta.strings;
    for s in ["ident", "number", "bad digit"] {
        assert_eq!(strings.iter().filter(|t| *t == s).count(), 1, "{strings:?}");
    }
    // Growth against a string is refused, naming it.
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cap.assert_growth("parse_token", "kind", Growth::Linear);
    }))
    .expect_err("a growth fitted against a string");
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(
        msg.contains(r#"`parse_token`'s `kind` is "ident", not a number"#),
        "{msg}"
    );
    // Cut at the documented cap, with a marker.
    let long = cap.values("long_label")[0].text("s").unwrap().to_string();
    assert_eq!(long.chars().count(), fgtrace::__private::MAX_STR + 1);
    assert!(long.ends_with('…') && LONG.starts_with(long.trim_end_matches('…')));
}

#[test]
fn string_values_show_in_graph_chrome_perfetto_and_by_value_and_survive_the_file() {
    use fgtrace::view::{GraphOptions, HexResolve, TraceViews};
    let t = string_trace().trace().clone();
    let graph = |t: &fgtrace::Trace| {
        let mut out = Vec::new();
        t.write_graph(&GraphOptions::default(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    let text = graph(&t);
    assert!(
        text.contains(r#"parse_token(kind="number") = Err("bad digit");"#),
        "{text}"
    );
    assert!(
        text.contains(r#"parse_token(kind="ident") = Ok(12);"#),
        "{text}"
    );
    assert!(text.contains(r#"token_name() = Some("ident");"#), "{text}");
    let events = || t.events().map(Ok);
    let mut chrome = Vec::new();
    fgtrace::view::chrome::write_chrome(
        t.meta(),
        events(),
        HexResolve,
        &Default::default(),
        &mut chrome,
    )
    .unwrap();
    let chrome = String::from_utf8(chrome).unwrap();
    assert!(chrome.contains(r#""kind":"number""#), "{chrome}");
    assert!(chrome.contains(r#""ret":"Err(\"bad digit\")""#), "{chrome}");
    let mut pf = Vec::new();
    fgtrace::view::perfetto::write_perfetto(
        t.meta(),
        events(),
        HexResolve,
        &Default::default(),
        &mut pf,
    )
    .unwrap();
    let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    // A string annotation: field 6 (string_value), length 6, "number".
    assert!(has(&pf, b"\x32\x06number"), "no `number` string annotation");
    assert!(
        has(&pf, br#"Err("bad digit")"#),
        "no Err(\"bad digit\") annotation"
    );
    // `--by kind`: a row per distinct string.
    let by = |t: &fgtrace::Trace| {
        let mut out = Vec::new();
        fgtrace::view::by_value::write_by_value(
            t.meta(),
            t.events().map(Ok),
            &fgtrace::view::by_value::ByValueOptions {
                value: "kind".into(),
                function: Some("parse_token".into()),
                threads: Vec::new(),
                max_rows: 0,
            },
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    };
    let table = by(&t);
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no row {name} in\n{table}"))
            .to_string()
    };
    assert!(
        row("\"ident\"").split_whitespace().any(|w| w == "3"),
        "{table}"
    );
    assert!(
        row("\"number\"").split_whitespace().any(|w| w == "1"),
        "{table}"
    );
    // The same after a round trip through the file format.
    let path = std::env::temp_dir().join(format!("fgtrace-strvalues-{}.fgt", std::process::id()));
    t.save(&path).unwrap();
    let back = fgtrace::Trace::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(back.meta.strings, t.meta.strings);
    assert_eq!(graph(&back), text);
    assert_eq!(by(&back), table);
}

/// Returns a borrow of its argument inside a `Result`: not a `&'static str`,
/// so only the variant is recorded (and the fn still compiles).
#[traced(ret)]
fn first_word(s: &str) -> Result<usize, &str> {
    s.find(' ').ok_or(s)
}

#[test]
fn an_inner_str_that_is_not_static_records_only_its_variant() {
    let owned = String::from("no-space");
    let cap = capture(|| {
        let _ = first_word("two words");
        let _ = first_word(&owned);
    });
    assert_eq!(value_strings(&cap, "first_word"), ["ret=Ok(3)", "ret=Err"]);
    assert!(cap.trace().meta.strings.is_empty());
}

/// Two polls: it yields once before it returns.
#[traced(values(id), ret)]
async fn fetch(id: u32) -> Result<u32, &'static str> {
    tokio::task::yield_now().await;
    if id == 0 {
        Err("not found")
    } else {
        Ok(id * 100)
    }
}

#[test]
fn graph_prints_an_async_fns_values_on_its_first_poll_and_ret_on_its_last() {
    use fgtrace::view::{GraphOptions, TraceViews};
    let cap = capture(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            fetch(3).await.ok();
            fetch(0).await.ok();
            parse_async("42".into()).await;
        });
    });
    let t = cap.trace();
    let graph = |t: &fgtrace::Trace| {
        let mut out = Vec::new();
        t.write_graph(&GraphOptions::default(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    let text = graph(t);
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once("|  ").map(|(_, f)| f.trim()))
        .filter(|f| f.starts_with("fetch") || f.starts_with("parse_async"))
        .collect();
    assert_eq!(
        lines,
        [
            "fetch(id=3);",
            r#"fetch() = Ok(300);"#,
            "fetch(id=0);",
            r#"fetch() = Err("not found");"#,
            // One poll: both on it.
            "parse_async(len=2) = Some(42);"
        ],
        "{text}"
    );
    // Without the first pass, the polls show none.
    let mut out = Vec::new();
    fgtrace::view::write_graph(
        t.meta(),
        t.events().map(Ok),
        &GraphOptions::default(),
        &mut out,
    )
    .unwrap();
    let plain = String::from_utf8(out).unwrap();
    assert!(
        plain.contains("fetch();") && !plain.contains("id=3"),
        "{plain}"
    );
    // The same from the file.
    let path = std::env::temp_dir().join(format!("fgtrace-asyncvals-{}.fgt", std::process::id()));
    t.save(&path).unwrap();
    let back = fgtrace::Trace::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(graph(&back), text);
}
