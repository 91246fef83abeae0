//! `fgtrace plot` and `view::plot` over a recorded trace: the slowest calls
//! with their call paths, the SVG's two panels, name resolution, and one
//! clear error line for bad input.

use fgtrace_view::ok_events;
use fgtrace_view::plot::{write_plot, PlotOptions};
#[path = "../../tests/support/cli.rs"]
mod cli_support;

use cli_support::{assert_one_line_failure, fgtrace, on_thread, tempdir, text};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[fgtrace::traced]
fn driver(n: u64) -> u64 {
    (0..n)
        .map(|i| if i == n / 2 { slow_path(i) } else { step(i) })
        .sum()
}

#[fgtrace::traced]
fn slow_path(_i: u64) -> u64 {
    step(SLOW)
}

const SLOW: u64 = u64::MAX / 4;

/// Nanoseconds, except once (3 ms, under `slow_path`).
#[fgtrace::traced]
fn step(i: u64) -> u64 {
    if i == SLOW {
        std::thread::sleep(Duration::from_millis(3));
    }
    std::hint::black_box(i.wrapping_mul(3))
}

#[fgtrace::traced]
fn nap() {
    std::thread::sleep(Duration::from_millis(2));
}

/// `driver` on the test's thread, then `step` on `helper`; one `step` runs
/// under `slow_path` and takes 3 ms, all others take ns: a wide range.
fn record(dir: &Path, calls: u64) -> (fgtrace_trace::Trace, PathBuf) {
    cli_support::record(dir, || {
        driver(calls);
        for _ in 0..4 {
            nap();
        }
        on_thread("helper", || {
            std::thread::sleep(Duration::from_millis(1));
            for i in 0..20 {
                step(i);
            }
        });
    })
}

#[test]
fn slowest_calls_with_paths_and_both_panels() {
    let dir = tempdir("ok");
    let (_, path) = record(&dir, 200);
    let svg_path = dir.join("step.svg");
    let out = fgtrace(&[
        "plot",
        path.to_str().unwrap(),
        "--function",
        "step",
        "--top",
        "3",
        "-o",
        svg_path.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // 200 on main (one of them under slow_path) + 20 on helper.
    assert!(
        stdout.starts_with("# view_plot::step: 220 calls, p50 "),
        "{stdout}"
    );
    let rows: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    // Slowest first, with the callers open at that moment.
    assert!(rows[0].ends_with(" driver;slow_path;step"), "{stdout}");
    assert!(
        rows[0].split_whitespace().nth(1) == Some("ms"),
        "3 ms: {stdout}"
    );
    assert!(!rows[0].contains("helper-"), "{stdout}");
    for r in &rows[1..] {
        let path = r.split_whitespace().last().unwrap();
        // helper's calls are roots; the test thread's are under driver.
        let ok = (path == "driver;step" && !r.contains("helper-"))
            || (path == "step" && r.contains("helper-"));
        assert!(ok, "{r}");
    }

    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
    assert!(svg.contains("Durations of view_plot::step"));
    assert!(
        svg.contains("220 calls on 2 threads: duration against start time"),
        "scatter caption"
    );
    assert!(svg.contains("histogram"), "histogram caption");
    // p50 and p99 are marked on the histogram with their values.
    assert!(
        svg.contains("p50 ") && svg.contains("p99 "),
        "percentile labels"
    );
    // One legend entry per thread, with its call count.
    assert!(svg.contains("(200)") && svg.contains("helper-"), "legend");
    // No font is needed: text stays text.
    assert!(svg.contains("<text"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn full_path_wide_ranges_go_log_narrow_ones_stay_linear() {
    let dir = tempdir("scale");
    let (trace, _) = record(&dir, 50);
    let meta = trace.meta();
    let plot = |f: &str| {
        let mut svg = Vec::new();
        let mut txt = Vec::new();
        let opts = PlotOptions {
            function: f.into(),
            ..PlotOptions::default()
        };
        let d = write_plot(meta, ok_events(trace.events()), &opts, &mut svg, &mut txt).unwrap();
        (
            d,
            String::from_utf8(svg).unwrap(),
            String::from_utf8(txt).unwrap(),
        )
    };
    // `step`: ns, and once 3 ms. Found by its full path too.
    let (d, svg, txt) = plot("view_plot::step");
    assert_eq!(d.count, 70);
    assert!(d.max_ns >= 3_000_000 && d.p50_ns < 1_000_000, "{txt}");
    assert!(d.p50_ns <= d.p99_ns && d.p99_ns <= d.max_ns);
    assert_eq!(d.slowest.len(), 10);
    assert_eq!(d.slowest[0].call.dur_ns, d.max_ns);
    assert!(
        svg.contains("(log scale)"),
        "a wide range gets a log y axis"
    );
    // `nap` sleeps 2 ms each time: a narrow range, linear axes.
    let (d, svg, txt) = plot("nap");
    assert_eq!(d.count, 4);
    assert!(d.min_ns >= 2_000_000, "{}", d.min_ns);
    assert!(!svg.contains("(log scale)"), "{txt}");
    assert!(txt.contains("# view_plot::nap: 4 calls"), "{txt}");
    assert_eq!(
        txt.lines().filter(|l| l.ends_with(" nap")).count(),
        4,
        "{txt}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn many_calls_draw_one_dot_per_pixel() {
    let dir = tempdir("many");
    let (trace, _) = record(&dir, 30_000);
    let opts = PlotOptions {
        function: "step".into(),
        width: 600,
        height: 400,
        ..PlotOptions::default()
    };
    let (mut svg, mut txt) = (Vec::new(), Vec::new());
    let d = write_plot(
        trace.meta(),
        ok_events(trace.events()),
        &opts,
        &mut svg,
        &mut txt,
    )
    .unwrap();
    assert_eq!(d.count, 30_020);
    assert!(d.calls.is_empty() && d.dots.len() < 30_020);
    let svg = String::from_utf8(svg).unwrap();
    let dots = svg.matches("<circle").count();
    // Far fewer elements than calls, but every thread is drawn.
    assert!(dots > 2 && dots < 30_020 / 3, "{dots} dots for 30020 calls");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_names_and_damaged_files_are_one_clear_error() {
    let dir = tempdir("bad");
    let (_, path) = record(&dir, 20_000);
    let p = path.to_str().unwrap();
    let svg = dir.join("x.svg");
    let s = svg.to_str().unwrap();

    let out = fgtrace(&["plot", p, "-f", "nope", "-o", s]);
    assert_one_line_failure(&out, "no traced function is named `nope`");
    let out = fgtrace(&["plot", p, "-f", "ste", "-o", s]);
    assert_one_line_failure(&out, "did you mean `view_plot::step`");
    // Traced, but not on this thread.
    let out = fgtrace(&["plot", p, "-f", "nap", "--thread", "helper", "-o", s]);
    assert_one_line_failure(&out, "`view_plot::nap` has no recorded calls");
    assert!(!svg.exists(), "no SVG for a failed plot");
    let out = fgtrace(&[
        "plot",
        p,
        "-f",
        "step",
        "-o",
        dir.join("no/such/dir.svg").to_str().unwrap(),
    ]);
    assert_one_line_failure(&out, "cannot write");

    // Cut in the middle: the calls before the damage are plotted, the
    // error names the byte, the exit is non-zero.
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.join("cut.fgt");
    std::fs::write(&cut, &bytes[..bytes.len() * 3 / 4]).unwrap();
    let out = fgtrace(&["plot", cut.to_str().unwrap(), "-f", "step", "-o", s]);
    assert_one_line_failure(&out, "truncated at byte");
    assert!(
        text(&out.stdout).starts_with("# view_plot::step: "),
        "{}",
        text(&out.stdout)
    );
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("Durations of view_plot::step"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn help_shows_examples() {
    for sub in ["plot", "html", "graph", "report", "info", "flame", "zephyr"] {
        let out = fgtrace(&[sub, "--help"]);
        assert!(out.status.success());
        let h = text(&out.stdout);
        assert!(h.contains("Examples:\n  fgtrace "), "{sub}: {h}");
    }
    let h = text(&fgtrace(&["--help"]).stdout);
    assert!(
        h.contains("fgtrace plot ") && h.contains("fgtrace html "),
        "{h}"
    );
}

#[test]
fn no_progress_bar_when_stderr_is_piped() {
    let dir = tempdir("quiet");
    let (_, path) = record(&dir, 20_000);
    for args in [
        vec!["info", path.to_str().unwrap()],
        vec!["report", path.to_str().unwrap()],
    ] {
        let out = fgtrace(&args);
        assert!(out.status.success());
        assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    }
    std::fs::remove_dir_all(dir).ok();
}
