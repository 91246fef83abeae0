//! Per-call values through a recording session, the trace file and the
//! command line: `info`, `graph`, `report --by` and `plot --x`.

#[path = "../../tests/support/cli.rs"]
mod cli_support;

use cli_support::{assert_one_line_failure, fgtrace, fgtrace_ok, tempdir, text};
use std::hint::black_box;

/// Work linear in `len` (deterministic: a loop, no sleep).
#[fgtrace::traced(values(len = input.len()), ret)]
fn parse_line(input: &[u8]) -> Result<u64, ()> {
    if input.is_empty() {
        return Err(());
    }
    let mut sum = 0u64;
    for _ in 0..64 {
        for &b in input {
            sum = black_box(sum.wrapping_add(b as u64));
        }
    }
    Ok(sum % 7)
}

/// Work quadratic in `len`.
#[fgtrace::traced(values(len = n))]
fn pairs(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n * n {
        acc = black_box(acc.wrapping_add(i));
    }
    acc
}

#[fgtrace::traced]
fn plain() {}

fn exponent(stdout: &str) -> f64 {
    let at = stdout.find("duration ~ len^").expect(stdout) + "duration ~ len^".len();
    stdout[at..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_recorded_trace_shows_values_in_info_graph_report_and_plot() {
    let dir = tempdir("values");
    let (_, path) = cli_support::record(&dir, || {
        for _ in 0..3 {
            for k in 1..=10u64 {
                black_box(parse_line(&vec![b'x'; k as usize * 100])).ok();
                black_box(pairs(k * 40));
            }
        }
        let _ = parse_line(b"");
        plain();
    });
    let p = path.to_str().unwrap();

    let info = text(&fgtrace_ok(&["info", p]).stdout);
    assert!(
        info.contains("values:    2 functions record values: parse_line(len, ret), pairs(len)"),
        "{info}"
    );

    let graph = text(&fgtrace_ok(&["graph", p]).stdout);
    assert!(graph.contains("parse_line(len=1000) = Ok("), "{graph}");
    assert!(graph.contains("parse_line(len=0) = Err;"), "{graph}");
    assert!(graph.contains("pairs(len=400);"), "{graph}");
    assert!(graph.contains("plain();"), "{graph}");

    let by = text(&fgtrace_ok(&["report", p, "--by", "ret"]).stdout);
    assert!(by.contains("parse_line by ret: 31 calls"), "{by}");
    assert!(
        by.lines().any(|l| l.trim_start().starts_with("Err ")),
        "{by}"
    );
    let err = fgtrace(&["report", p, "--by", "len"]);
    assert_one_line_failure(&err, "several functions record `len`");
    let by = text(&fgtrace_ok(&["report", p, "--by", "len", "-f", "pairs"]).stdout);
    assert!(by.contains("pairs by len: 30 calls"), "{by}");
    assert_eq!(
        by.lines()
            .filter(|l| l.trim_start().starts_with("400 "))
            .count(),
        1,
        "{by}"
    );

    let svg = dir.join("lin.svg");
    let lin = text(
        &fgtrace_ok(&[
            "plot",
            p,
            "-f",
            "parse_line",
            "--x",
            "len",
            "-o",
            svg.to_str().unwrap(),
        ])
        .stdout,
    );
    let k = exponent(&lin);
    assert!((k - 1.0).abs() < 0.1, "linear: {lin}");
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("duration ~ len^"));
    let quad = text(
        &fgtrace_ok(&[
            "plot",
            p,
            "-f",
            "pairs",
            "--x",
            "len",
            "-o",
            svg.to_str().unwrap(),
        ])
        .stdout,
    );
    let k = exponent(&quad);
    assert!((k - 2.0).abs() < 0.1, "quadratic: {quad}");
    assert!(
        quad.contains("# furthest above the fit:") || quad.contains("10 sizes"),
        "{quad}"
    );

    let bad = fgtrace(&[
        "plot",
        p,
        "-f",
        "pairs",
        "--x",
        "size",
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert_one_line_failure(&bad, "records no value named `size` (it records `len`)");
    let none = fgtrace(&[
        "plot",
        p,
        "-f",
        "plain",
        "--x",
        "len",
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert_one_line_failure(&none, "records no values, so none named `len`");
    std::fs::remove_dir_all(&dir).ok();
}

/// A tokenizer step that records a string (`kind`) and returns one on error.
#[fgtrace::traced(values(kind), ret)]
fn token(kind: &'static str, input: &str) -> Result<u32, &'static str> {
    input.parse().map_err(|_| "bad digit")
}

#[test]
fn string_values_in_a_file_written_while_recording_show_in_info_graph_report_and_fail_plot() {
    let dir = tempdir("strvalues");
    let live = dir.join("live.fgt");
    // The session writes the file as it records (version 2: the string
    // table goes as sections beside the raw chunks).
    let _ = cli_support::record_as(
        &dir,
        "saved.fgt",
        fgtrace::Config::builtin().output(&live),
        || {
            for (kind, input) in [("ident", "1"), ("number", "x"), ("ident", "2")] {
                let _ = black_box(token(kind, input));
            }
        },
    );
    // The same file cut before its final metadata (a recording killed
    // before it stopped): the string table comes from its sections.
    let bytes = std::fs::read(&live).unwrap();
    let final_meta = bytes
        .windows(10)
        .rposition(|w| w == b"{\"program\"")
        .unwrap();
    assert!(final_meta > 16, "no final metadata after the header's");
    let cut = dir.join("cut.fgt");
    std::fs::write(&cut, &bytes[..final_meta - 1]).unwrap();
    let graph = text(&fgtrace_ok(&["graph", cut.to_str().unwrap()]).stdout);
    assert!(
        graph.contains(r#"token(kind="number") = Err("bad digit");"#),
        "cut: {graph}"
    );
    for file in [live, dir.join("saved.fgt")] {
        let p = file.to_str().unwrap();
        let info = text(&fgtrace_ok(&["info", p]).stdout);
        assert!(
            info.contains("strings:   3 distinct string values (`&'static str`)"),
            "{p}: {info}"
        );
        let graph = text(&fgtrace_ok(&["graph", p]).stdout);
        assert!(
            graph.contains(r#"token(kind="number") = Err("bad digit");"#),
            "{p}: {graph}"
        );
        assert!(
            graph.contains(r#"token(kind="ident") = Ok(2);"#),
            "{p}: {graph}"
        );
        let by = text(&fgtrace_ok(&["report", p, "--by", "kind"]).stdout);
        assert!(by.contains("token by kind: 3 calls"), "{p}: {by}");
        let row = |k: &str| {
            by.lines()
                .find(|l| l.trim_start().starts_with(k))
                .unwrap_or_else(|| panic!("no row {k} in {by}"))
                .split_whitespace()
                .nth(1)
                .map(String::from)
        };
        assert_eq!(row("\"ident\"").as_deref(), Some("2"), "{by}");
        assert_eq!(row("\"number\"").as_deref(), Some("1"), "{by}");
        let svg = dir.join("kind.svg");
        let bad = fgtrace(&[
            "plot",
            p,
            "-f",
            "token",
            "--x",
            "kind",
            "-o",
            svg.to_str().unwrap(),
        ]);
        assert_one_line_failure(&bad, "value `kind` is a string, not a number");
    }
    // Firefox's markers and the HTML report's slowest calls carry them too.
    let p = dir.join("saved.fgt");
    let p = p.to_str().unwrap();
    let ff = dir.join("ff.json");
    fgtrace_ok(&["firefox", p, "--json", "-o", ff.to_str().unwrap()]);
    let ff = std::fs::read_to_string(&ff).unwrap();
    assert!(
        ff.contains(r#"kind=\"number\", ret=Err(\"bad digit\")"#),
        "no string values in the Firefox markers"
    );
    let html = dir.join("run.html");
    fgtrace_ok(&["html", p, "-o", html.to_str().unwrap()]);
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(
        html.contains("token(kind=&quot;number&quot;, ret=Err(&quot;bad digit&quot;))")
            || html.contains(r#"token(kind="number", ret=Err("bad digit"))"#),
        "no string values in the HTML slowest calls"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Pending once, then ready: an `async fn` awaiting it is polled twice.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

#[fgtrace::traced(values(id), ret)]
async fn fetch(id: u32) -> Result<u32, &'static str> {
    YieldOnce(false).await;
    if id == 0 {
        Err("not found")
    } else {
        Ok(id * 100)
    }
}

/// Polls `f` to completion on this thread.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

#[test]
fn graph_prints_an_async_fns_values_on_its_polls_from_a_file() {
    let dir = tempdir("asyncvalues");
    let (_, path) = cli_support::record(&dir, || {
        block_on(fetch(3)).ok();
        block_on(fetch(0)).ok();
    });
    let graph = text(&fgtrace_ok(&["graph", path.to_str().unwrap()]).stdout);
    let lines: Vec<&str> = graph
        .lines()
        .filter_map(|l| l.split_once("|  ").map(|(_, f)| f.trim()))
        .filter(|f| f.starts_with("fetch"))
        .collect();
    // The first poll wakes its future (`YieldOnce`): the wake is a line
    // inside it, so it opens.
    assert_eq!(
        lines,
        [
            "fetch(id=3) {",
            "fetch() = Ok(300);",
            "fetch(id=0) {",
            r#"fetch() = Err("not found");"#
        ],
        "{graph}"
    );
    assert_eq!(graph.matches("/* wake: fetch */").count(), 2, "{graph}");
    std::fs::remove_dir_all(&dir).ok();
}

/// One root call around both futures: the slowest root call, whose graph the
/// HTML page draws.
#[fgtrace::traced]
fn fetch_both() {
    block_on(fetch(3)).ok();
    block_on(fetch(0)).ok();
}

/// The `fetch` lines of a graph's text, without the columns before them.
fn fetch_lines(graph: &str) -> Vec<String> {
    graph
        .lines()
        .filter_map(|l| l.split_once("|  ").map(|(_, f)| f.trim()))
        .filter(|f| f.starts_with("fetch("))
        .map(String::from)
        .collect()
}

#[test]
fn the_html_pages_graph_prints_an_async_fns_values_on_its_polls_as_graph_does() {
    let dir = tempdir("asynchtml");
    let (_, path) = cli_support::record(&dir, fetch_both);
    let p = path.to_str().unwrap();
    // Each first poll holds its future's wake (see above).
    let expected = [
        "fetch(id=3) {",
        "fetch() = Ok(300);",
        "fetch(id=0) {",
        r#"fetch() = Err("not found");"#,
    ];
    let graph = text(&fgtrace_ok(&["graph", p]).stdout);
    assert_eq!(fetch_lines(&graph), expected, "{graph}");
    let html = dir.join("run.html");
    fgtrace_ok(&["html", p, "-o", html.to_str().unwrap()]);
    let html = std::fs::read_to_string(&html).unwrap();
    let section = html
        .split_once("<section id=\"graph\">")
        .and_then(|(_, s)| s.split_once("</section>"))
        .map(|(s, _)| s)
        .unwrap_or_else(|| panic!("no graph section: {html}"));
    assert!(section.contains("<code>fetch_both</code>"), "{section}");
    let shown = section
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    assert_eq!(fetch_lines(&shown), expected, "{section}");
    std::fs::remove_dir_all(&dir).ok();
}
