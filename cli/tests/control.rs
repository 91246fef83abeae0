//! The judged scenario with the `fgtrace` binary: a program run with
//! `FGTRACE_CONTROL=1` is listed by `fgtrace ps`, recorded by `fgtrace
//! record --pid` (its calls in proportion, Ctrl-C ends a recording without
//! a duration), dumped by `fgtrace ctl PID dump` into a readable graph, and
//! its own output is unchanged. The target is this test binary run again
//! (`tests/support/control.rs`).

#[path = "../../tests/support/control.rs"]
mod control_support;

use control_support::*;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

#[test]
#[ignore = "not a test: the target process of the other tests"]
fn zz_child_process() {
    if std::env::var(ROLE).as_deref() == Ok("target") {
        run_target();
    }
}

fn fgtrace(xdg: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(args)
        .env("XDG_RUNTIME_DIR", xdg)
        .current_dir(xdg)
        .output()
        .expect("run fgtrace")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "fgtrace failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const ROUNDS: u64 = 4_000;
/// The target works on, uncounted, after its rounds until `finish`: the
/// recording and the dump below never find it done, however slow it runs.
const HOLD: &[(&str, &str)] = &[("FGTRACE_TEST_HOLD", "1")];

#[test]
fn record_dump_and_ps_on_a_program_run_with_fgtrace_control() {
    let xdg = runtime_dir("cli");
    let (plain_ok, plain, _) = Target::start_with(&xdg, "0", Some(ROUNDS), false, HOLD).finish();
    assert!(plain_ok);

    let t = Target::start_with(&xdg, "1", Some(ROUNDS), true, HOLD);
    let pid = t.pid().to_string();
    // `fgtrace` itself links fgtrace: with FGTRACE_CONTROL in its
    // environment it still opens no endpoint, so `ps` lists the target alone.
    let ps = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .arg("ps")
        .env("XDG_RUNTIME_DIR", &*xdg)
        .env("FGTRACE_CONTROL", "1")
        .output()
        .unwrap();
    let ps = ok(&ps);
    let rows: Vec<_> = ps.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{ps}");
    assert!(rows[0].trim_start().starts_with(&format!("{pid} ")), "{ps}");

    let rec = fgtrace(
        &xdg,
        &[
            "record",
            "--pid",
            &pid,
            "--duration",
            "300ms",
            "-o",
            "rec.fgt",
        ],
    );
    ok(&rec);
    assert!(String::from_utf8_lossy(&rec.stderr).contains("wrote rec.fgt"));
    let trace = fgtrace_trace::Trace::load(xdg.join("rec.fgt")).unwrap();
    assert_in_proportion(&counts(&trace));
    let report = ok(&fgtrace(&xdg, &["report", "rec.fgt"]));
    for f in ["tick", "parse", "checksum"] {
        assert!(report.contains(f), "{report}");
    }

    // The always-on flight recorder is back after the recording: dump it.
    let mut graph = String::new();
    t.wait_until("a dump with the target's calls", |_| {
        let d = fgtrace(&xdg, &["ctl", &pid, "dump", "-o", "dump.fgt"]);
        if d.status.success() {
            graph = ok(&fgtrace(&xdg, &["graph", "dump.fgt"]));
            if graph.contains("tick() {") {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
        false
    });
    assert!(graph.contains("# tracer: function_graph"), "{graph}");
    assert!(
        graph.contains("tick() {") && graph.contains("checksum();"),
        "{graph}"
    );
    let status = ok(&fgtrace(&xdg, &["ctl", &pid, "status"]));
    // Found from a shell whose $XDG_RUNTIME_DIR differs: the target's own
    // environment says where its socket is.
    let elsewhere = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(["ctl", &pid, "status"])
        .env("XDG_RUNTIME_DIR", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(ok(&elsewhere), status);
    assert!(status.contains("session:  background"), "{status}");

    let (t_ok, out, err) = t.finish();
    assert!(t_ok, "{err}");
    // The same lines (the two threads' lines may interleave differently).
    let sorted = |s: &str| {
        let mut v = target_lines(s);
        v.sort();
        v
    };
    assert_eq!(sorted(&out), sorted(&plain), "the program's output changed");
    assert_eq!(sorted(&out).len() as u64, 2 * ROUNDS / 500 + 1);
    assert!(!err.contains("fgtrace"), "{err}");

    // Gone: a clear error, and `ps` no longer lists it.
    let gone = fgtrace(&xdg, &["ctl", &pid, "status"]);
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("is not running"),
        "{gone:?}"
    );
    assert!(!ok(&fgtrace(&xdg, &["ps"])).contains(&format!("{pid} ")));
}

#[test]
fn record_pid_writes_the_trace_within_max_size_and_counts_the_rest_as_lost() {
    let xdg = runtime_dir("max-size");
    let t = Target::start_with(&xdg, "1", Some(ROUNDS), true, HOLD);
    let pid = t.pid().to_string();
    // The run's end cannot be chosen from a trace sent whole: refused,
    // with the reason and what to do instead.
    let ring = fgtrace(
        &xdg,
        &[
            "record",
            "--pid",
            &pid,
            "-d",
            "1s",
            "--max-size",
            "20kB",
            "--on-full",
            "ring",
        ],
    );
    let e = String::from_utf8_lossy(&ring.stderr);
    assert!(
        !ring.status.success() && e.contains("--on-full ring") && e.contains("--flight"),
        "{e}"
    );
    let limit = 20_000u64;
    let rec = fgtrace(
        &xdg,
        &[
            "record",
            "--pid",
            &pid,
            "--duration",
            "300ms",
            "--max-size",
            "20kB",
            "-o",
            "cut.fgt",
        ],
    );
    ok(&rec);
    let e = String::from_utf8_lossy(&rec.stderr);
    assert!(
        e.lines()
            .next()
            .is_some_and(|l| l.contains("cut.fgt takes at most 20.0 kB")),
        "the first line says the budget: {e}"
    );
    assert!(
        e.contains("over its size budget of 20.0 kB") && e.contains("counted as lost"),
        "{e}"
    );
    let path = xdg.join("cut.fgt");
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len <= limit, "{len} bytes, budget {limit}");
    let trace = fgtrace_trace::Trace::load(&path).unwrap();
    assert!(trace.damage().is_none());
    let meta = trace.meta();
    let cut = meta.cut_short.as_ref().expect("the file says it was cut");
    assert_eq!(cut.reason, fgtrace_trace::CutReason::Budget);
    assert_eq!(cut.limit, Some(limit));
    assert!(cut.calls_after > 0 && meta.total_calls() > 0, "{cut:?}");
    assert_eq!(trace.calls().count() as u64, meta.total_calls());
    // Each thread's cut calls are in its lost count and at its loss marker.
    let markers: u64 = trace
        .events()
        .filter_map(|e| match e {
            fgtrace_trace::Event::Lost(l) => Some(l.count),
            _ => None,
        })
        .sum();
    assert_eq!(markers, cut.calls_after);
    assert!(meta.total_lost() >= cut.calls_after);
    let report = ok(&fgtrace(&xdg, &["report", "cut.fgt"]));
    assert!(
        report.contains("recording cut short")
            && report.contains(&format!("{} later calls LOST", cut.calls_after)),
        "{report}"
    );
    let (t_ok, _, err) = t.finish();
    assert!(t_ok, "{err}");
}

#[test]
fn ctrl_c_ends_a_recording_without_a_duration() {
    let xdg = runtime_dir("ctrlc");
    let t = Target::start(&xdg, "listen", None, true);
    let pid = t.pid().to_string();
    let rec = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args([
            "record",
            "--pid",
            &pid,
            "-o",
            "rec.fgt",
            "--filter",
            "parse,checksum",
        ])
        .env("XDG_RUNTIME_DIR", &*xdg)
        .current_dir(&xdg)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Recording, and the target has done some rounds since: then Ctrl-C.
    t.wait_until("`fgtrace record` to start recording", |t| {
        fgtrace::control::Client::connect_path(&t.socket, t.pid())
            .and_then(fgtrace::control::Client::status)
            .is_ok_and(|s| s.session == "recording")
    });
    t.wait_rounds(t.progress.rounds(), 20);
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let out = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("stopped by the client"), "{err}");
    let trace = fgtrace_trace::Trace::load(xdg.join("rec.fgt")).unwrap();
    let c = counts(&trace);
    assert!(!c.contains_key("tick"), "the filter was applied: {c:?}");
    assert!(
        c["parse"] > 10 && (c["checksum"] as i64 - 4 * c["parse"] as i64).abs() <= 16,
        "{c:?}"
    );
    let (t_ok, _, e) = t.finish();
    assert!(t_ok, "{e}");
}

#[test]
fn bad_flags_and_missing_processes_are_one_clear_line() {
    let xdg = runtime_dir("errors");
    let o = fgtrace(&xdg, &["record", "--pid", "999999999", "-d", "1s"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("pid 999999999 is not running"), "{e}");
    let t = Target::start(&xdg, "listen", None, true);
    let pid = t.pid().to_string();
    let o = fgtrace(
        &xdg,
        &["record", "--pid", &pid, "-d", "1s", "--sample", "sometimes"],
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("sample"), "{e}");
    let o = fgtrace(&xdg, &["ctl", &pid, "dump"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("no fgtrace session"),
        "{e}"
    );
    let o = fgtrace(&xdg, &["record", "--pid", &pid, "-d", "soon"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--duration"));
    let (t_ok, _, e) = t.finish();
    assert!(t_ok, "{e}");
}
