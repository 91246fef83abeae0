//! The `fgtrace` binary over a trace recorded here: output, and one clear
//! error line with a non-zero exit for every kind of bad input.

#[path = "../../tests/support/cli.rs"]
mod cli_support;

use cli_support::{assert_clean_failure, fgtrace, on_thread, tempdir, text};
use std::path::{Path, PathBuf};

#[fgtrace::traced]
fn outer(n: u32) -> u32 {
    (0..n).map(inner).sum()
}

#[fgtrace::traced]
fn inner(i: u32) -> u32 {
    std::hint::black_box(i * 2)
}

fn record(dir: &Path) -> PathBuf {
    let (_, path) = cli_support::record(dir, || {
        outer(3);
        on_thread("helper", || outer(2));
    });
    path
}

#[test]
fn graph_report_and_info_render_a_saved_trace() {
    let dir = tempdir("ok");
    let path = record(&dir);
    let p = path.to_str().unwrap();

    let out = fgtrace(&["graph", p]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let g = text(&out.stdout);
    assert!(g.starts_with("# tracer: function_graph\n"));
    assert_eq!(g.matches("outer() {").count(), 2, "{g}");
    assert_eq!(g.matches("inner();").count(), 5, "{g}");

    let out = fgtrace(&["graph", p, "--thread", "helper"]);
    let g = text(&out.stdout);
    assert_eq!(g.matches("inner();").count(), 2, "{g}");

    let out = fgtrace(&["report", p, "--sort", "calls"]);
    assert!(out.status.success());
    let r = text(&out.stdout);
    let inner_line = r
        .lines()
        .find(|l| l.ends_with(" inner"))
        .expect("inner row");
    assert_eq!(inner_line.split_whitespace().next(), Some("5"), "{r}");

    let out = fgtrace(&["info", p]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("calls:     7 (0 lost, 0 overruns)"),
        "{}",
        text(&out.stdout)
    );
    std::fs::remove_dir_all(dir).ok();
}

/// `fgtrace info` says which path took the samples.
#[cfg(target_os = "linux")]
#[test]
fn info_says_which_path_sampled() {
    use fgtrace::sampler::{Backend, Sampling};
    let dir = tempdir("sampler");
    let info = |backend: Backend, name: &str| {
        let sampling = Sampling::timer(1000).backend(backend);
        let config = fgtrace::Config::builtin().sampling(sampling);
        let (_, path) = cli_support::record_as(&dir, name, config, || {
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_millis(30) {
                outer(1000);
            }
        });
        let out = fgtrace(&["info", path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let signal = info(Backend::Signal, "signal.fgt");
    assert!(
        signal.contains(
            "sampling:  timer@1000Hz\nsampler:   signal (frame-pointer walk in the handler)"
        ),
        "{signal}"
    );
    let auto = info(Backend::Auto, "auto.fgt");
    let line = auto
        .lines()
        .find(|l| l.starts_with("sampler:   "))
        .unwrap_or_else(|| panic!("no sampler line: {auto}"));
    // The ring where the kernel allows it; else the signal path, saying why.
    assert!(
        line.starts_with("sampler:   perf ring (kernel call chains")
            || line.contains("perf ring refused: perf_event_open(cpu-clock) failed"),
        "{line}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_input_is_one_clear_error_line_and_a_non_zero_exit() {
    let dir = tempdir("bad");
    let path = record(&dir);
    let bytes = std::fs::read(&path).unwrap();

    let missing = dir.join("missing.fgt");
    let out = fgtrace(&["graph", missing.to_str().unwrap()]);
    assert_clean_failure(&out, "No such file");
    assert_eq!(text(&out.stderr).lines().count(), 1);

    let truncated = dir.join("truncated.fgt");
    std::fs::write(&truncated, &bytes[..bytes.len() - 10]).unwrap();
    let out = fgtrace(&["report", truncated.to_str().unwrap()]);
    assert_clean_failure(&out, "truncated at byte");

    let corrupt = dir.join("corrupt.fgt");
    let mut c = bytes.clone();
    let n = c.len();
    c[n - 20] ^= 0xff;
    std::fs::write(&corrupt, &c).unwrap();
    let out = fgtrace(&["graph", corrupt.to_str().unwrap()]);
    assert_clean_failure(&out, "corrupt at byte");

    let foreign = env!("CARGO_BIN_EXE_fgtrace");
    let out = fgtrace(&["info", foreign]);
    assert_clean_failure(&out, "not an fgtrace trace file");

    let out = fgtrace(&["graph", "--no-such-flag", path.to_str().unwrap()]);
    assert_clean_failure(&out, "unexpected argument '--no-such-flag'");

    let out = fgtrace(&["report", path.to_str().unwrap(), "--sort", "bogus"]);
    assert_clean_failure(&out, "unknown sort column");
    std::fs::remove_dir_all(dir).ok();
}

/// `chrome` and `perfetto` share their flags (ExportArgs) and their runner:
/// the same flags with each one's own help, --thread and -o honoured, and one
/// clear error line for a file that cannot be created or a damaged trace.
#[test]
fn timeline_exports_share_flags_output_and_errors() {
    let dir = tempdir("exports");
    let path = record(&dir);
    let p = path.to_str().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let corrupt = dir.join("corrupt.fgt");
    let mut c = bytes.clone();
    let n = c.len();
    c[n - 20] ^= 0xff;
    std::fs::write(&corrupt, &c).unwrap();

    for (cmd, futures, output) in [
        (
            "chrome",
            "Leave the async futures out\n",
            "Write here instead of stdout\n",
        ),
        (
            "perfetto",
            "Leave the async futures' tracks out\n",
            "Write here instead of stdout (never to a terminal)\n",
        ),
    ] {
        let out = fgtrace(&[cmd, "--help"]);
        assert!(out.status.success());
        // Runs of spaces as one: the column width follows the longest flag.
        let squeeze = |s: &str| {
            s.split(' ')
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let help = squeeze(&text(&out.stdout));
        for flag in [
            "-t, --thread <THREADS> Only these threads (tid, or name glob); repeat for several\n",
            "--no-samples Leave the samples out\n",
            "--no-offcpu Leave the off-CPU tracks out\n",
            "--from <TIME> Leave out what ends before this time",
            "--to <TIME> Leave out what starts at or after this time (as --from)\n",
            "--min-duration <DURATION> Leave out calls and futures shorter than this (e.g. 10us)\n",
            "<FILE> Trace file written by `Trace::save`\n",
        ] {
            assert!(help.contains(flag), "{cmd}: `{flag}` in {help}");
        }
        assert!(
            help.contains(&squeeze(&format!("--no-futures {futures}"))),
            "{help}"
        );
        assert!(
            help.contains(&squeeze(&format!("-o, --output <OUT> {output}"))),
            "{help}"
        );

        let file = dir.join(format!("helper.{cmd}"));
        let out = fgtrace(&[cmd, p, "--thread", "helper", "-o", file.to_str().unwrap()]);
        assert!(out.status.success(), "{cmd}: {}", text(&out.stderr));
        let written = std::fs::read(&file).unwrap();
        let all = dir.join(format!("all.{cmd}"));
        let out = fgtrace(&[cmd, p, "-o", all.to_str().unwrap()]);
        assert!(out.status.success(), "{cmd}: {}", text(&out.stderr));
        let everything = std::fs::read(&all).unwrap();
        assert!(
            !written.is_empty() && written.len() < everything.len(),
            "{cmd}: --thread helper keeps less than the whole trace"
        );
        if cmd == "chrome" {
            let v: serde_json::Value = serde_json::from_slice(&written).unwrap();
            let events = v["traceEvents"].as_array().unwrap();
            let calls = events.iter().filter(|e| e["ph"] == "X").count();
            assert_eq!(calls, 3, "outer(2) and its two inner calls");
        }

        let nowhere = dir.join("no-such-dir").join("x.out");
        let out = fgtrace(&[cmd, p, "-o", nowhere.to_str().unwrap()]);
        assert_clean_failure(&out, "cannot create");
        assert!(text(&out.stderr).contains("no-such-dir"), "{cmd}");
        assert_eq!(text(&out.stderr).lines().count(), 1, "{cmd}");

        let out = fgtrace(&[cmd, corrupt.to_str().unwrap(), "-o", "/dev/null"]);
        assert_clean_failure(&out, "corrupt at byte");
        assert!(text(&out.stderr).contains("corrupt.fgt"), "{cmd}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn report_as_json_parses_and_holds_the_table() {
    let dir = tempdir("json");
    let path = record(&dir);
    let p = path.to_str().unwrap();
    let out = fgtrace(&["report", p, "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report json parses");
    let fns = v["functions"].as_array().unwrap();
    let row = |n: &str| fns.iter().find(|f| f["name"] == n).unwrap().clone();
    assert_eq!(row("outer")["calls"], 2);
    assert_eq!(row("inner")["calls"], 5);
    assert!(
        row("outer")["total_ns"].as_u64().unwrap() >= row("outer")["self_ns"].as_u64().unwrap()
    );
    assert_eq!(v["calls"], 7);
    let out = fgtrace(&["report", p, "--format", "yaml"]);
    assert_clean_failure(&out, "--format: unknown format `yaml`");
    let out = fgtrace(&["report", p, "--format", "json", "--ftrace"]);
    assert_clean_failure(&out, "conflict");
    std::fs::remove_dir_all(dir).ok();
}
