//! Chrome Trace Event export: valid JSON, the fields each phase needs, calls
//! nesting per thread, names, futures, samples with stacks, losses.

use fgtrace_trace::{
    CallCounters, Event, FutureSpan, LossKind, Lost, Sample, Trace, TraceBuilder, TraceError,
};
use fgtrace_view::chrome::{write_chrome, ChromeOptions};
use fgtrace_view::ok_events;
use fgtrace_view::resolve::{FnResolve, HexResolve};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

#[path = "../../tests/support/cli.rs"]
mod cli_support;
#[path = "../../tests/support/traces.rs"]
mod traces;
use cli_support::{fgtrace, fgtrace_ok, tempdir};
use traces::{async_site, call};

fn trace() -> Trace {
    let mut meta = traces::meta(
        &["run", "Conn::query", "fetch"],
        &[(901, "main"), (902, "worker \u{2603}")],
    );
    meta.program = "app \"quoted\"".into();
    meta.pid = 900;
    meta.duration_ns = 10_000_000;
    meta.counters = vec!["instructions".into()];
    meta.sampling = Some("cpu-clock@999Hz".into());
    meta.sites[2] = async_site("fetch");
    for s in &mut meta.sites {
        s.line = 7;
    }
    meta.threads[1].lost = 7;
    let mut b = TraceBuilder::new(meta);
    // main: run [1234.567 us, +5 ms) { query x2, the second with a child query }
    b.push(call(0, 0, 0, 1_234_567, 5_000_000));
    b.push(Event::Counters(CallCounters {
        thread: 0,
        values: vec![123_456],
    }));
    b.push(call(0, 1, 1, 1_300_000, 1_000_000));
    b.push(Event::Sample(Sample {
        thread: 0,
        ts_ns: 1_500_000,
        shadow_depth: 2,
        cut: Some(1),
        frames: vec![0x10, 0x20, 0x30],
    }));
    b.push(call(0, 1, 1, 2_300_000, 2_000_000));
    b.push(call(0, 1, 2, 2_300_000, 2_000_000)); // same start and end as its parent
                                                 // worker: futures of `fetch`, two overlapping and one after, then a loss.
    b.push(call(1, 2, 0, 100_000, 50_000));
    b.push(Event::Future(FutureSpan {
        thread: 1,
        site: 2,
        start_ns: 100_000,
        dur_ns: 900_000,
        polls: 3,
        cancelled: false,
    }));
    b.push(Event::Future(FutureSpan {
        thread: 1,
        site: 2,
        start_ns: 200_000,
        dur_ns: 100_000,
        polls: 1,
        cancelled: true,
    }));
    b.push(Event::Future(FutureSpan {
        thread: 1,
        site: 2,
        start_ns: 2_000_000,
        dur_ns: 100_000,
        polls: 1,
        cancelled: false,
    }));
    b.push(Event::Lost(Lost {
        thread: 1,
        depth: 0,
        at_ns: 3_000_000,
        count: 7,
        kind: LossKind::Dropped,
    }));
    b.finish()
}

fn resolver() -> FnResolve<impl FnMut(u64, bool) -> Vec<String>> {
    FnResolve(|a, _| match a {
        0x10 => vec!["app::encode".to_string()],
        0x20 => vec!["app::Conn::query".to_string()],
        0x30 => vec!["app::run".to_string()],
        _ => vec![],
    })
}

fn export(t: &Trace) -> (String, Value) {
    let mut out = Vec::new();
    write_chrome(
        t.meta(),
        ok_events(t.events()),
        resolver(),
        &ChromeOptions::default(),
        &mut out,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (text, v)
}

fn ns(v: &Value) -> u64 {
    (v.as_f64().expect("number") * 1000.0).round() as u64
}

/// The fields the Trace Event format requires for each phase we write.
fn check_fields(e: &Value) {
    let o = e.as_object().expect("event is an object");
    let ph = o["ph"].as_str().expect("ph");
    for k in ["name", "pid", "tid", "ts"] {
        assert!(o.contains_key(k), "{k} missing in {e}");
    }
    assert!(
        o["name"].is_string() && o["pid"].is_u64() && o["tid"].is_u64() && o["ts"].is_number(),
        "{e}"
    );
    // Perfetto's tokenizer rejects arrays at an event's top level.
    assert!(o.values().all(|v| !v.is_array()), "{e}");
    match ph {
        "X" => assert!(o["dur"].is_number(), "{e}"),
        "M" => {
            assert!(
                ["thread_name", "process_name"].contains(&o["name"].as_str().unwrap()),
                "{e}"
            );
            assert!(o["args"]["name"].is_string(), "{e}");
        }
        "b" | "e" => {
            assert_eq!(o["cat"], "future", "{e}");
            assert!(o["id"].is_string(), "{e}");
        }
        "i" => assert!(
            ["t", "p", "g"].contains(&o["s"].as_str().unwrap_or("")),
            "{e}"
        ),
        other => panic!("unexpected phase {other}: {e}"),
    }
}

#[test]
fn export_is_valid_trace_event_json() {
    let t = trace();
    let (text, v) = export(&t);
    assert_eq!(v["displayTimeUnit"], "ns");
    let events = v["traceEvents"].as_array().unwrap();
    for e in events {
        check_fields(e);
    }
    // Nanosecond digits survive in microseconds.
    assert!(text.contains("\"ts\":1234.567,\"dur\":5000.000"), "{text}");

    // Names: process and every thread, by OS tid.
    let meta_names: BTreeSet<(u64, String)> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            (
                e["tid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: BTreeSet<(u64, String)> = t
        .meta()
        .threads
        .iter()
        .map(|t| (t.tid as u64, t.name.clone()))
        .collect();
    assert_eq!(meta_names, want);
    let proc = events.iter().find(|e| e["name"] == "process_name").unwrap();
    assert_eq!(proc["args"]["name"], "app \"quoted\"");
    assert_eq!(proc["pid"], 900);

    // Calls: one X each, on the right thread, with their args.
    let xs: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(xs.len(), 5);
    let run = xs.iter().find(|e| e["name"] == "run").unwrap();
    assert_eq!(run["tid"], 901);
    assert_eq!(run["args"]["file"], "src/app.rs:7");
    assert_eq!(run["args"]["depth"], 0);
    assert_eq!(run["args"]["unwound"], false);
    assert_eq!(run["args"]["instructions"], 123_456);
    assert_eq!(xs.iter().filter(|e| e["name"] == "Conn::query").count(), 3);

    // X events nest per thread: children inside parents.
    let mut by_tid: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for e in &xs {
        let (ts, dur) = (ns(&e["ts"]), ns(&e["dur"]));
        by_tid
            .entry(e["tid"].as_u64().unwrap())
            .or_default()
            .push((ts, ts + dur));
    }
    for (tid, mut spans) in by_tid {
        spans.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut open: Vec<(u64, u64)> = Vec::new();
        for s in spans {
            while open.last().is_some_and(|p| p.1 <= s.0 && p.0 < s.0) {
                open.pop();
            }
            if let Some(p) = open.last() {
                assert!(p.0 <= s.0 && s.1 <= p.1, "tid {tid}: {s:?} overlaps {p:?}");
            }
            open.push(s);
        }
    }

    // Futures: b/e pairs; overlapping ones on different ids, the later one reuses a lane.
    let bs: Vec<&Value> = events.iter().filter(|e| e["ph"] == "b").collect();
    let es: Vec<&Value> = events.iter().filter(|e| e["ph"] == "e").collect();
    assert_eq!((bs.len(), es.len()), (3, 3));
    for b in &bs {
        let e = es
            .iter()
            .find(|e| e["id"] == b["id"] && ns(&e["ts"]) > ns(&b["ts"]))
            .unwrap();
        assert_eq!(e["name"], b["name"]);
    }
    assert_ne!(bs[0]["id"], bs[1]["id"]);
    assert_eq!(bs[0]["id"], bs[2]["id"]);
    assert_eq!(bs[1]["args"]["cancelled"], true);

    // The sample: an instant on main with its stack root first.
    let s = events.iter().find(|e| e["cat"] == "sample").unwrap();
    assert_eq!(
        (s["ph"].as_str(), s["s"].as_str(), s["tid"].as_u64()),
        (Some("i"), Some("t"), Some(901))
    );
    assert_eq!(s["name"], "app::encode");
    assert_eq!(
        s["args"]["stack"],
        serde_json::json!(["app::run", "app::Conn::query", "app::encode"])
    );
    assert_eq!(ns(&s["ts"]), 1_500_000);

    // The loss.
    let l = events.iter().find(|e| e["cat"] == "lost").unwrap();
    assert_eq!(
        (l["name"].as_str(), l["tid"].as_u64()),
        (Some("LOST 7 records"), Some(902))
    );
    assert_eq!(v["otherData"]["sampling"], "cpu-clock@999Hz");
}

#[test]
fn options_leave_out_samples_futures_and_threads() {
    let t = trace();
    let opts = ChromeOptions {
        threads: vec!["main".parse().unwrap()],
        samples: false,
        futures: false,
        off_cpu: true,
        ..ChromeOptions::default()
    };
    let mut out = Vec::new();
    let stats = write_chrome(t.meta(), ok_events(t.events()), HexResolve, &opts, &mut out).unwrap();
    assert_eq!(
        (stats.calls, stats.samples, stats.futures, stats.losses),
        (4, 0, 0, 0)
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    assert!(
        events
            .iter()
            .all(|e| e["tid"] == 901 || e["name"] == "process_name"),
        "{v}"
    );
    assert!(events.iter().all(|e| e["ph"] != "i" && e["ph"] != "b"));
}

#[test]
fn a_damaged_stream_still_gives_valid_json_then_the_error() {
    let t = trace();
    let mut events: Vec<Result<Event, TraceError>> = t.events().take(2).map(Ok).collect();
    events.push(Err(TraceError::Corrupt {
        offset: 64,
        what: "bad varint".into(),
    }));
    let mut out = Vec::new();
    let err = write_chrome(
        t.meta(),
        events,
        HexResolve,
        &ChromeOptions::default(),
        &mut out,
    )
    .unwrap_err();
    assert!(matches!(err, TraceError::Corrupt { offset: 64, .. }));
    let v: Value = serde_json::from_slice(&out).expect("complete JSON");
    assert!(v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["ph"] == "X"));
}

#[test]
fn cli_writes_the_file_and_fails_cleanly_on_bad_input() {
    let dir = tempdir("chrome");
    let path = dir.join("t.fgt");
    trace().save(&path).unwrap();
    let json = dir.join("t.json");
    fgtrace_ok(&[
        "chrome",
        path.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(
        v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .count(),
        5
    );

    let bad = dir.join("bad.fgt");
    std::fs::write(&bad, b"not a trace at all").unwrap();
    let out = fgtrace(&["chrome", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && !err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not an fgtrace trace file"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}
