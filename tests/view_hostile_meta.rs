//! Views over a trace whose metadata claims impossible counts (a file's
//! metadata is checksummed, not trusted): totals saturate, nothing panics.

use fgtrace::trace::{Call, Event, ThreadInfo, TraceBuilder, TraceMeta};
use fgtrace::view::chrome::{write_chrome, ChromeOptions};
use fgtrace::view::html::HtmlOptions;
use fgtrace::view::HexResolve;
use fgtrace::view::TraceViews;

fn hostile() -> fgtrace::Trace {
    let mut meta = TraceMeta::default();
    meta.sites.push(fgtrace::trace::SiteInfo {
        name: "f".into(),
        module_path: "m".into(),
        file: "f.rs".into(),
        line: 1,
        is_async: false,
        values: Vec::new(),
    });
    for tid in [1, 2] {
        meta.threads.push(ThreadInfo {
            tid,
            name: format!("t{tid}"),
            calls: u64::MAX,
            lost: u64::MAX,
            overruns: u64::MAX,
            samples: u64::MAX,
            samples_lost: u64::MAX,
        });
    }
    let mut b = TraceBuilder::new(meta);
    b.push(Event::Call(Call {
        thread: 0,
        site: 0,
        depth: 0,
        start_ns: 0,
        dur_ns: 10,
        flags: 0,
    }));
    b.finish()
}

#[test]
fn totals_of_impossible_counts_saturate() {
    let t = hostile();
    let m = t.meta();
    assert_eq!(m.total_samples(), u64::MAX);
    assert_eq!(m.total_samples_lost(), u64::MAX);
}

#[test]
fn chrome_and_html_render_impossible_counts_without_a_panic() {
    let t = hostile();
    let mut out = Vec::new();
    write_chrome(
        t.meta(),
        t.events().map(Ok),
        HexResolve,
        &ChromeOptions::default(),
        &mut out,
    )
    .unwrap();
    assert!(String::from_utf8_lossy(&out).contains(&u64::MAX.to_string()));
    let mut html = Vec::new();
    t.write_html(HexResolve, &HtmlOptions::default(), &mut html)
        .unwrap();
    assert!(!html.is_empty());
}
