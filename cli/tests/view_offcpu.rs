//! Off-CPU time in every view, on a hand-made trace whose
//! answers are known: `main` (0..100 us) calls `read` (10..50 us, blocked
//! 30 us of it) and `compute` (60..90 us, preempted 5 us); 20 us blocked at
//! 92..112 us straddles `main`'s end. And a trace where off-CPU time was
//! refused: every view says so, none shows zeros.

#[path = "../../tests/support/cli.rs"]
mod cli_support;
#[path = "../../tests/support/traces.rs"]
mod traces;
use cli_support::fgtrace;
use traces::site;
#[path = "../../tests/support/tools.rs"]
mod tools;

use fgtrace_trace::{
    Call, Event, OffCpu, OffCpuThread, OffInterval, OffKind, ThreadInfo, Trace, TraceBuilder,
    TraceMeta,
};
use fgtrace_view::offcpu::{OffCpuFoldedBuilder, OffCpuFoldedOptions};
use fgtrace_view::{ok_events, Consume, ReportBuilder, ReportOptions};
use std::path::PathBuf;
use std::process::{Command, Output};

fn iv(start_ns: u64, dur_ns: u64, kind: OffKind) -> OffInterval {
    OffInterval {
        start_ns,
        dur_ns,
        kind,
    }
}

fn trace(off: OffCpu) -> Trace {
    let meta = TraceMeta {
        program: "app".into(),
        pid: 77,
        duration_ns: 200_000,
        sites: vec![site("main"), site("read"), site("compute")],
        threads: vec![ThreadInfo {
            calls: 3,
            ..traces::thread(77, "main")
        }],
        off_cpu: Some(off),
        ..Default::default()
    };
    let call = |site, depth, start_ns, dur_ns| {
        Event::Call(Call {
            thread: 0,
            site,
            depth,
            start_ns,
            dur_ns,
            flags: if site == 0 { 2 } else { 0 },
        })
    };
    let mut b = TraceBuilder::new(meta);
    for e in [
        call(0, 0, 0, 100_000),
        call(1, 1, 10_000, 40_000),
        call(2, 1, 60_000, 30_000),
    ] {
        b.push(e);
    }
    b.finish()
}

fn recorded() -> Trace {
    trace(OffCpu {
        unavailable: None,
        threads: vec![OffCpuThread {
            thread: 0,
            lost: 0,
            intervals: vec![
                iv(15_000, 30_000, OffKind::Blocked),
                iv(70_000, 5_000, OffKind::Preempted),
                iv(92_000, 20_000, OffKind::Blocked),
            ],
        }],
    })
}

fn refused() -> Trace {
    trace(OffCpu::unavailable(
        "perf_event_open(context switches of this thread) failed: Permission denied",
    ))
}

/// A test's scratch directory, removed when the test ends.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("fgtrace-offcpu-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn save(&self, t: &Trace, name: &str) -> PathBuf {
        let p = self.0.join(name);
        t.save(&p).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn report_has_on_and_off_cpu_totals_and_self() {
    let t = recorded();
    let opts = ReportOptions::default();
    let mut r = ReportBuilder::new(t.meta(), &opts);
    for e in t.events() {
        let Ok(()) = r.push(&e);
    }
    let r = r.finish();
    let row = |n: &str| r.functions.iter().find(|f| f.name == n).unwrap().clone();
    let main = row("main");
    let off = main.off_cpu.unwrap();
    // 30 us blocked in read, 5 us preempted in compute, 8 us of the last stretch.
    assert_eq!(off.total.blocked_ns, 38_000);
    assert_eq!(off.total.preempted_ns, 5_000);
    assert_eq!(off.self_.total_ns(), 8_000);
    assert_eq!(main.on_cpu_ns(), Some(57_000));
    assert_eq!(main.self_on_cpu_ns(), Some(30_000 - 8_000));
    assert_eq!(row("read").on_cpu_ns(), Some(10_000));
    assert_eq!(row("compute").off_cpu.unwrap().total.preempted_ns, 5_000);

    let d = Dir::new("report");
    let f = d.save(&t, "r.fgt");
    let text = stdout(&fgtrace(&["report", f.to_str().unwrap()]));
    assert!(
        text.contains("On-CPU total") && text.contains("Off-CPU self"),
        "{text}"
    );
    let line = text.lines().find(|l| l.ends_with("  read")).unwrap();
    assert!(
        line.contains("10.000 us") && line.contains("30.000 us"),
        "{line}"
    );
    let sorted = stdout(&fgtrace(&[
        "report",
        "--sort",
        "offcpu",
        f.to_str().unwrap(),
    ]));
    let order: Vec<&str> = sorted
        .lines()
        .filter_map(|l| l.rsplit("  ").next())
        .filter(|n| ["main", "read", "compute"].contains(n))
        .collect();
    assert_eq!(order, ["main", "read", "compute"]);
}

#[test]
fn graph_offcpu_shows_on_cpu_durations_and_the_split() {
    let d = Dir::new("graph");
    let f = d.save(&recorded(), "g.fgt");
    let text = stdout(&fgtrace(&["graph", "--offcpu", f.to_str().unwrap()]));
    assert!(
        text.contains("# off-CPU: DURATION is on-CPU time"),
        "{text}"
    );
    assert!(
        text.contains(" 10.000 us   |    read(); /* wall 40 us, off-CPU 30 us (blocked 30 us, preempted 0 ns) */"),
        "{text}"
    );
    assert!(
        text.contains(
            "+ 57.000 us   |  } /* wall 100 us, off-CPU 43 us (blocked 38 us, preempted 5 us) */"
        ),
        "{text}"
    );
    // Without the flag: ftrace's output, wall durations, no comments.
    let plain = stdout(&fgtrace(&["graph", f.to_str().unwrap()]));
    assert!(plain.contains("+ 40.000 us   |    read();\n"), "{plain}");
    assert!(!plain.contains("off-CPU"), "{plain}");
}

#[test]
fn offcpu_flame_is_weighted_by_time_switched_out() {
    let t = recorded();
    let mut b = OffCpuFoldedBuilder::new(t.meta(), &OffCpuFoldedOptions::default()).unwrap();
    b.extend(ok_events(t.events())).unwrap();
    let (lines, summary) = b.finish();
    assert_eq!(
        lines,
        [
            ("app::main;[blocked]".to_string(), 8_000),
            ("app::main;app::compute;[preempted]".to_string(), 5_000),
            ("app::main;app::read;[blocked]".to_string(), 30_000),
        ]
    );
    assert_eq!(summary.untraced_ns, 12_000);
    let d = Dir::new("flame");
    let f = d.save(&t, "f.fgt");
    let folded = stdout(&fgtrace(&[
        "flame",
        "--offcpu",
        "--folded",
        "--blocked-only",
        f.to_str().unwrap(),
    ]));
    assert_eq!(
        folded,
        "app::main;[blocked] 8000\napp::main;app::read;[blocked] 30000\n"
    );
    let svg = f.with_extension("svg");
    stdout(&fgtrace(&[
        "flame",
        "--offcpu",
        f.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]));
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(
        svg.contains("[blocked]") && svg.contains("Off-CPU flame graph"),
        "SVG"
    );
}

#[test]
fn exports_carry_off_cpu_slices() {
    let d = Dir::new("exports");
    let f = d.save(&recorded(), "e.fgt");
    let json = stdout(&fgtrace(&["chrome", f.to_str().unwrap()]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    let off: Vec<_> = evs.iter().filter(|e| e["cat"] == "off-cpu").collect();
    assert_eq!(off.len(), 3);
    assert_eq!(off[0]["name"], "blocked");
    assert_eq!(off[0]["ts"].as_f64(), Some(15.0));
    assert_eq!(off[0]["dur"].as_f64(), Some(30.0));
    assert_eq!(off[1]["name"], "preempted");
    assert!(evs.iter().any(|e| e["args"]["name"] == "main (off-CPU)"));
    let none = stdout(&fgtrace(&["chrome", "--no-offcpu", f.to_str().unwrap()]));
    assert!(!none.contains("off-cpu"));

    let pf = f.with_extension("pftrace");
    stdout(&fgtrace(&[
        "perfetto",
        f.to_str().unwrap(),
        "-o",
        pf.to_str().unwrap(),
    ]));
    let bytes = std::fs::read(&pf).unwrap();
    // Slice names are plain strings in the packets.
    assert_eq!(count(&bytes, b"preempted"), 1);
    assert_eq!(count(&bytes, b"blocked"), 2);
    assert_eq!(count(&bytes, b"off-CPU"), 1);

    let html = f.with_extension("html");
    stdout(&fgtrace(&[
        "html",
        f.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]));
    let html = std::fs::read_to_string(html).unwrap();
    assert!(html.contains("<h2>Off-CPU time</h2>"));
    assert!(html.contains("On-CPU self"));
    assert!(
        html.contains("app::main &gt; app::read &gt; [blocked]"),
        "stack table"
    );
    assert!(
        html.contains("off-CPU 30 us (blocked 30 us"),
        "graph of the slowest call"
    );
}

/// The Perfetto export read with the upstream schema (PyPI `perfetto`,
/// through `support/perfetto_check.py`): the off-CPU track is a child of the
/// thread's, its slices well formed, named by kind.
#[test]
fn perfetto_off_cpu_track_parses_with_the_upstream_schema() {
    let test = "perfetto_off_cpu_track_parses_with_the_upstream_schema";
    let ok = Command::new("python3")
        .args([
            "-c",
            "import perfetto.protos.perfetto.trace.perfetto_trace_pb2",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        tools::missing::<()>(
            test,
            "python3 cannot import perfetto.protos.perfetto.trace.perfetto_trace_pb2; \
             install it with `pip install perfetto==0.59.1`",
        );
        return;
    }
    let d = Dir::new("schema");
    let f = d.save(&recorded(), "s.fgt");
    let pf = d.0.join("s.pftrace");
    stdout(&fgtrace(&[
        "perfetto",
        f.to_str().unwrap(),
        "-o",
        pf.to_str().unwrap(),
    ]));
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/perfetto_check.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&pf)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["errors"], serde_json::json!([]), "{:#}", v["errors"]);
    let tracks = v["tracks"].as_object().unwrap();
    let (uuid, off) = tracks
        .iter()
        .find(|(_, t)| t["name"] == "off-CPU")
        .expect("an off-CPU track");
    let thread = tracks
        .iter()
        .find(|(_, t)| t["kind"] == "thread" && t["tid"] == 77)
        .map(|(u, _)| u.parse::<u64>().unwrap())
        .unwrap();
    assert_eq!(off["parent"], thread);
    let s = &v["slices"][uuid];
    assert_eq!(s["count"], 3);
    assert_eq!(s["max_depth"], 1);
    assert_eq!(
        s["names"],
        serde_json::json!({"blocked": 2, "preempted": 1})
    );
}

/// `fgtrace firefox` of the trace in `f` (extra `args`), gunzipped: the
/// markers of thread `main` as (name, start ms, end ms, data).
fn firefox_markers(
    f: &std::path::Path,
    args: &[&str],
) -> Vec<(String, f64, f64, serde_json::Value)> {
    use std::io::Read;
    let out = f.with_extension("json.gz");
    let mut a = vec!["firefox", f.to_str().unwrap(), "-o", out.to_str().unwrap()];
    a.extend_from_slice(args);
    stdout(&fgtrace(&a));
    let mut s = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&out).unwrap())
        .read_to_string(&mut s)
        .unwrap();
    let p: serde_json::Value = serde_json::from_str(&s).unwrap();
    let main = p["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "main")
        .expect("thread main");
    let strings = main["stringArray"]
        .as_array()
        .or_else(|| p["shared"]["stringArray"].as_array())
        .unwrap();
    let m = &main["markers"];
    let string = |v: &serde_json::Value| match v.as_u64() {
        Some(i) => strings[i as usize].as_str().unwrap().to_string(),
        None => v.as_str().unwrap_or_default().to_string(),
    };
    (0..m["length"].as_u64().unwrap() as usize)
        .map(|i| {
            let mut data = m["data"][i].clone();
            if let Some(w) = data.get("why").cloned() {
                data["why"] = string(&w).into();
            }
            (
                string(&m["name"][i]),
                m["startTime"][i].as_f64().unwrap_or(f64::NAN),
                m["endTime"][i].as_f64().unwrap_or(f64::NAN),
                data,
            )
        })
        .collect()
}

/// Off-CPU stretches in the Firefox Profiler: interval markers on their
/// thread, named by kind like the Chrome and Perfetto slices, at their
/// times; `--no-offcpu` leaves them out; a refusal is a marker saying why.
#[test]
fn firefox_profile_has_off_cpu_markers_at_their_times() {
    let d = Dir::new("firefox");
    let f = d.save(&recorded(), "ff.fgt");
    let markers = firefox_markers(&f, &[]);
    let off: Vec<_> = markers
        .iter()
        .filter(|m| m.3["type"] == "fgtraceOffCpu")
        .collect();
    let got: Vec<(&str, f64, f64)> = off.iter().map(|m| (m.0.as_str(), m.1, m.2)).collect();
    let want = [
        ("blocked", 0.015, 0.045),
        ("preempted", 0.070, 0.075),
        ("blocked", 0.092, 0.112),
    ];
    assert_eq!(got.len(), want.len(), "{markers:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.0, w.0);
        assert!(
            (g.1 - w.1).abs() < 1e-9 && (g.2 - w.2).abs() < 1e-9,
            "{g:?} vs {w:?}"
        );
    }
    assert_eq!(off[0].3["dur"].as_f64(), Some(30.0));
    assert_eq!(off[0].3["tid"].as_f64(), Some(77.0));
    assert!(off[0].3["why"].as_str().unwrap().contains("voluntarily"));
    assert!(off[1].3["why"].as_str().unwrap().contains("runnable"));
    // The calls are markers as before.
    assert_eq!(markers.iter().filter(|m| m.0 == "read").count(), 1);

    let none = firefox_markers(&f, &["--no-offcpu"]);
    assert!(
        none.iter().all(|m| m.3["type"] != "fgtraceOffCpu"),
        "{none:?}"
    );
    assert_eq!(none.len(), markers.len() - 3);

    let u = d.save(&refused(), "u.fgt");
    let refused = firefox_markers(&u, &[]);
    let why: Vec<_> = refused
        .iter()
        .filter(|m| m.0 == "off-CPU unavailable")
        .collect();
    assert_eq!(why.len(), 1, "{refused:?}");
    assert!(
        why[0].3["why"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{why:?}"
    );
    assert!(!refused
        .iter()
        .any(|m| m.0 == "blocked" || m.0 == "preempted"));
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

#[test]
fn every_view_says_off_cpu_is_unavailable_and_why() {
    let d = Dir::new("refused");
    let f = d.save(&refused(), "u.fgt");
    let f = f.to_str().unwrap();
    let why = "off-CPU unavailable: perf_event_open(context switches of this thread) failed: Permission denied";
    let report = stdout(&fgtrace(&["report", f]));
    assert!(report.contains(&format!("# {why}")), "{report}");
    assert!(
        !report.contains("Off-CPU total"),
        "no columns of zeros: {report}"
    );
    let graph = stdout(&fgtrace(&["graph", "--offcpu", f]));
    assert!(graph.contains(&format!("# {why}")), "{graph}");
    assert!(
        graph.contains("+ 40.000 us   |    read();\n"),
        "wall durations: {graph}"
    );
    let flame = fgtrace(&["flame", "--offcpu", "--folded", f]);
    assert!(!flame.status.success());
    assert!(String::from_utf8_lossy(&flame.stderr).contains(why));
    let info = stdout(&fgtrace(&["info", f]));
    assert!(info.contains(why), "{info}");
    let chrome = stdout(&fgtrace(&["chrome", f]));
    assert!(
        chrome.contains(&format!("\"off_cpu\":\"unavailable: {}", &why[21..])),
        "{chrome}"
    );
    let html = d.0.join("u.html");
    stdout(&fgtrace(&["html", f, "-o", html.to_str().unwrap()]));
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(html.contains(why), "html");
}

#[test]
fn a_file_with_bad_off_cpu_intervals_is_an_error_naming_them() {
    let mut t = recorded();
    let mut bytes = Vec::new();
    t.write_to(&mut bytes).unwrap();
    assert!(Trace::read_from(&bytes[..]).is_ok());
    // Overlapping intervals: the metadata is rejected with the reason.
    let meta_off = {
        let mut m = t.meta().clone();
        m.off_cpu.as_mut().unwrap().threads[0].intervals[1].start_ns = 20_000;
        m
    };
    let mut b = TraceBuilder::new(meta_off);
    for e in t.events() {
        b.push(e);
    }
    t = b.finish();
    bytes.clear();
    t.write_to(&mut bytes).unwrap();
    let err = Trace::read_from(&bytes[..]).err().unwrap().to_string();
    assert!(
        err.contains("off-CPU interval 1 of thread 0 overlaps"),
        "{err}"
    );
}
