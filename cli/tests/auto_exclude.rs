//! `fgtrace info`, `report` and `graph` over a trace whose session switched
//! a tiny function to count-only (`Config::auto_exclude`).

#[path = "../../tests/support/cli.rs"]
mod cli_support;

use cli_support::{fgtrace_ok, on_thread, tempdir, text};
use std::time::Duration;

#[fgtrace::traced]
#[inline(never)]
fn getter(x: u64) -> u64 {
    std::hint::black_box(x) + 1
}

#[fgtrace::traced]
#[inline(never)]
fn work(rounds: u64) -> u64 {
    let mut s = 0;
    for r in 0..rounds {
        for i in 0..1000 {
            s += getter(i);
        }
        // The collector switches the getter once it has seen a batch.
        if r % 5 == 4 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    s
}

#[test]
fn info_report_and_graph_show_the_count_only_functions() {
    let dir = tempdir("auto");
    let config = fgtrace::Config::builtin()
        .batch_calls(1024)
        .auto_exclude(Duration::from_nanos(50));
    let (trace, path) = cli_support::record_as(&dir, "auto.fgt", config, || {
        on_thread("getters", || work(50));
    });
    assert_eq!(
        trace.meta().count_only.len(),
        1,
        "{:?}",
        trace.meta().count_only
    );
    let p = path.to_str().unwrap();

    let info = text(&fgtrace_ok(&["info", p]).stdout);
    assert!(
        info.contains("count-only: 1 switch by auto-exclude"),
        "{info}"
    );
    let line = info
        .lines()
        .find(|l| l.contains("getter") && l.contains("after"))
        .unwrap_or_else(|| panic!("{info}"));
    assert!(line.trim_start().starts_with("getters-"), "{line}");
    assert!(
        line.contains(" calls of ") && line.contains(" avg, then "),
        "{line}"
    );
    assert!(info.contains("auto_exclude=50ns"), "{info}");

    let report = text(&fgtrace_ok(&["report", p]).stdout);
    let row = report
        .lines()
        .find(|l| l.ends_with("getter [count only]"))
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(row.split_whitespace().next(), Some("50000"), "{report}");
    assert!(
        report.contains("marked [count only] were counted"),
        "{report}"
    );

    let graph = text(&fgtrace_ok(&["graph", p]).stdout);
    assert!(
        graph.contains("# 1 function switched to count-only (auto-exclude)"),
        "{graph}"
    );
    if std::env::var_os("FGTRACE_SHOW").is_some() {
        println!("{info}\n{report}\n{graph}");
    }
    std::fs::remove_dir_all(dir).ok();
}
