//! `fgtrace html` over a recorded trace, checked in a real browser: the page
//! loads in headless Chromium with no script errors, inferno's flamegraph
//! script runs inline, the table sorts, and a screenshot renders.
//!
//! Needs Debian's `chromium` package (CI installs it); without it the
//! browser tests fail, saying so. `FGTRACE_CHROMIUM` names another binary.

#[path = "../../tests/support/cli.rs"]
mod cli_support;
#[path = "../../tests/support/tools.rs"]
mod tools;

use cli_support::{fgtrace, on_thread, tempdir, text};
use fgtrace_view::html::HtmlOptions;
use fgtrace_view::TraceViews;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

#[fgtrace::traced]
fn driver(n: u64) -> u64 {
    (0..n).map(step).sum()
}

#[fgtrace::traced]
fn step(i: u64) -> u64 {
    leaf(i) + leaf(i + 1)
}

#[fgtrace::traced]
fn leaf(i: u64) -> u64 {
    std::hint::black_box(i * 3)
}

/// The slowest root call: its subtree is the page's function graph.
#[fgtrace::traced]
fn slow_root() -> u64 {
    std::thread::sleep(Duration::from_millis(6));
    render() + leaf(7)
}

/// A name with markup in it, to see it escaped everywhere.
#[fgtrace::traced(name = "render<T>")]
fn render() -> u64 {
    std::thread::sleep(Duration::from_millis(1));
    1
}

/// 2 threads: the test's own (driver(40), slow_root) and `helper` (driver(10)).
fn record(dir: &Path) -> (fgtrace_trace::Trace, PathBuf) {
    cli_support::record(dir, || {
        driver(40);
        slow_root();
        on_thread("helper", || driver(10));
    })
}

fn write_report(dir: &Path, path: &Path) -> PathBuf {
    let html = dir.join("report.html");
    let out = fgtrace(&["html", path.to_str().unwrap(), "-o", html.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    html
}

/// The `<tr>` of the function table whose name cell is `name` (escaped).
fn row<'h>(html: &'h str, name: &str) -> &'h str {
    let table = &html[html.find("id=\"fn-table\"").expect("function table")..];
    let at = table
        .find(&format!("<td class=\"name\" data-v=\"{name}\">"))
        .unwrap_or_else(|| panic!("no row for {name}"));
    let row = &table[at..];
    &row[..row.find("</tr>").unwrap()]
}

/// The numbers of a row's cells (`data-v`), after the name.
fn cells(row: &str) -> Vec<u64> {
    row.split("<td data-v=\"")
        .skip(1)
        .map(|c| c[..c.find('"').unwrap()].parse().unwrap())
        .collect()
}

#[test]
fn page_is_self_contained_and_complete() {
    let dir = tempdir("static");
    let (_, path) = record(&dir);
    let html = std::fs::read_to_string(write_report(&dir, &path)).unwrap();

    // Nothing to fetch: no external scripts, styles, images or imports.
    for bad in [
        "<script src",
        "<link",
        "<img",
        "<iframe",
        "@import",
        "url(http",
        "href=\"http",
        "src=\"http",
    ] {
        assert!(!html.contains(bad), "{bad}");
    }
    // The summary.
    assert!(html.contains("<dt>Calls</dt><dd>"), "summary");
    assert!(html.contains("<dt>Threads</dt><dd>2 ("), "two threads");
    assert!(html.contains("helper-"), "thread names");
    assert!(
        html.contains("<dt>Losses</dt><dd>0 call records lost, 0 overruns, 0 samples lost</dd>")
    );
    // The table: call counts per function, and the markup in a name escaped.
    assert_eq!(cells(row(&html, "driver"))[0], 2);
    assert_eq!(cells(row(&html, "step"))[0], 50);
    assert_eq!(cells(row(&html, "leaf"))[0], 101);
    let r = cells(row(&html, "render&lt;T&gt;"));
    assert_eq!(r[0], 1);
    assert!(r[1] >= 1_000_000, "render sleeps 1 ms: {r:?}");
    assert!(!html.contains("render<T>"), "unescaped name");
    // The flamegraph comes first among the SVGs (inferno's script takes the
    // first), then the three plots of the top functions.
    let first_svg = &html[html.find("<svg").unwrap()..];
    assert!(
        first_svg.starts_with("<svg version=\"1.1\""),
        "inferno's SVG first"
    );
    assert!(first_svg[..400].contains("onload=\"init(evt)\""));
    assert!(!html.contains("<?xml"), "no XML prolog inside HTML");
    assert!(
        html.contains("#flame text {"),
        "inferno's text style scoped to the flamegraph"
    );
    assert_eq!(
        html.matches("<div class=\"plot\"><svg").count(),
        3,
        "three duration plots"
    );
    // Top by total time: slow_root (6+ ms), then render<T> or driver.
    let plots = &html[html.find("id=\"durations\"").unwrap()..];
    assert!(plots.contains("<h3>slow_root</h3>"), "slow_root plotted");
    // The graph of the slowest root call: slow_root and only its subtree.
    let graph = &html[html.find("<pre class=\"graph\">").unwrap()..];
    let graph = &graph[..graph.find("</pre>").unwrap()];
    assert!(graph.contains("slow_root() {"), "{graph}");
    assert!(graph.contains("render&lt;T&gt;();"), "{graph}");
    assert!(graph.contains("leaf();"), "{graph}");
    assert!(
        !graph.contains("driver"),
        "only the slowest root's subtree: {graph}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn library_page_from_an_in_memory_trace() {
    let dir = tempdir("lib");
    let (trace, _) = record(&dir);
    let mut page = Vec::new();
    let opts = HtmlOptions {
        rows: 2,
        plots: 1,
        ..HtmlOptions::default()
    };
    let names = fgtrace_symbols::symbolize::Symbolizer::new(&trace.meta().mappings);
    trace.write_html(names, &opts, &mut page).unwrap();
    let html = String::from_utf8(page).unwrap();
    assert!(html.contains("2 of 5 functions"), "rows cap");
    assert_eq!(html.matches("<div class=\"plot\"><svg").count(), 1);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn damaged_trace_still_renders_and_fails() {
    let dir = tempdir("damaged");
    let (_, path) = record(&dir);
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.join("cut.fgt");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let html = dir.join("cut.html");
    let out = fgtrace(&["html", cut.to_str().unwrap(), "-o", html.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("truncated at byte"), "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("id=\"damaged\""), "the page says so");
    assert!(page.contains("id=\"fn-table\""), "and shows what was read");

    let missing = dir.join("missing.fgt");
    let (m, h) = (missing.to_str().unwrap(), html.to_str().unwrap());
    let out = fgtrace(&["html", m, "-o", h]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("missing.fgt: "),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(dir).ok();
}

// --- in the browser ---

/// Chromium (Debian's `chromium`, or `FGTRACE_CHROMIUM`), or a visible skip.
fn chromium() -> Option<String> {
    let bin = std::env::var("FGTRACE_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    tools::tool(
        &bin,
        &["--version"],
        "chromium",
        "view_html::loads_in_chromium_without_errors",
    )
}

/// Runs headless Chromium on `url` with `extra` flags; each run gets its own profile.
fn browse(dir: &Path, tag: &str, url: &str, extra: &[&str]) -> Output {
    let profile = dir.join(format!("profile-{tag}"));
    let mut cmd = Command::new(chromium().expect("checked by the test"));
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
        // Run timers (inferno's setTimeout, the error check) before dumping.
        "--virtual-time-budget=5000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(extra)
    .arg(url);
    let out = cmd.output().expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        text(&out.stderr)
    );
    out
}

fn dump_dom(dir: &Path, tag: &str, url: &str) -> (String, String) {
    let out = browse(dir, tag, url, &["--dump-dom"]);
    (text(&out.stdout), text(&out.stderr))
}

fn file_url(p: &Path) -> String {
    format!("file://{}", p.canonicalize().unwrap().display())
}

/// Rows of the function table in DOM order, by name.
fn table_order(dom: &str) -> Vec<String> {
    let table = &dom[dom.find("id=\"fn-table\"").unwrap()..];
    let body = &table[table.find("<tbody>").unwrap()..table.find("</tbody>").unwrap()];
    body.split("<td class=\"name\" data-v=\"")
        .skip(1)
        .map(|c| c[..c.find('"').unwrap()].to_string())
        .collect()
}

#[test]
fn loads_in_chromium_without_errors() {
    if chromium().is_none() {
        return;
    }
    let dir = tempdir("chromium");
    let (_, path) = record(&dir);
    let html = write_report(&dir, &path);
    let url = file_url(&html);

    let (dom, stderr) = dump_dom(&dir, "load", &url);
    assert!(
        dom.contains("data-fg-errors=\"none\""),
        "page reported errors: {}",
        &dom[..dom.len().min(600)]
    );
    assert!(!stderr.contains("Uncaught"), "{stderr}");
    // inferno's init() ran inline: in fluid mode it drops the width attribute
    // of the flamegraph's <svg> and sizes the frames to the page.
    let flame = &dom[dom.find("<svg").unwrap()..];
    let tag = &flame[..flame.find('>').unwrap()];
    assert!(tag.contains("onload=\"init(evt)\""), "{tag}");
    assert!(
        !tag.contains("width="),
        "inferno's script did not run: {tag}"
    );
    assert!(dom.contains("id=\"frames\""), "flamegraph frames");
    assert!(
        dom.contains("<table class=\"sortable\" id=\"fn-table\">"),
        "table"
    );
    // Server order: total time, largest first.
    assert_eq!(table_order(&dom)[0], "slow_root");

    // The sort script, driven by the URL: most calls first; names A to Z.
    let (dom, _) = dump_dom(&dir, "calls", &format!("{url}#sort=calls"));
    assert_eq!(table_order(&dom)[0], "leaf", "sorted by calls");
    assert!(dom.contains("data-key=\"calls\" data-type=\"num\" aria-sort=\"descending\""));
    let (dom, _) = dump_dom(&dir, "name", &format!("{url}#sort=name"));
    let order = table_order(&dom);
    let mut sorted = order.clone();
    sorted.sort_by_key(|n| n.to_lowercase());
    assert_eq!(order, sorted, "sorted by name");

    // The detector detects: a page with a failing script is not "none".
    let broken = dir.join("broken.html");
    let page = std::fs::read_to_string(&html).unwrap();
    std::fs::write(
        &broken,
        page.replace("</main>", "<script>no_such_function();</script></main>"),
    )
    .unwrap();
    let (dom, _) = dump_dom(&dir, "broken", &file_url(&broken));
    assert!(
        dom.contains("no_such_function is not defined"),
        "{}",
        &dom[..dom.len().min(400)]
    );

    // A screenshot renders: a PNG of the window's size with real content.
    let png = dir.join("shot.png");
    browse(
        &dir,
        "shot",
        &url,
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1400,2000",
        ],
    );
    let bytes = std::fs::read(&png).expect("screenshot written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let (w, h) = (
        u32::from_be_bytes(bytes[16..20].try_into().unwrap()),
        u32::from_be_bytes(bytes[20..24].try_into().unwrap()),
    );
    assert_eq!((w, h), (1400, 2000));
    assert!(
        bytes.len() > 50_000,
        "a blank page compresses to a few KB: {} bytes",
        bytes.len()
    );
    std::fs::remove_dir_all(dir).ok();
}
