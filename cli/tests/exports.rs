//! `fgtrace perfetto` and `fgtrace firefox` on a real recording with traced
//! calls on several threads, async futures polled on two threads (one
//! cancelled), and timer samples; plus a synthetic trace for counters,
//! losses and calls sharing their parent's start and end.
//!
//! The Perfetto file is read with the upstream schema: the PyPI package
//! `perfetto`'s `perfetto_trace_pb2`, through `support/perfetto_check.py`
//! (`.ci/run` installs it; without it these tests skip visibly, and fail
//! where `FGTRACE_REQUIRE_TOOLS=1`). The Firefox profile is gunzipped and
//! its processed-format tables checked with serde_json.
#![cfg(target_os = "linux")]

#[path = "../../tests/support/cli.rs"]
mod cli_support;
#[path = "../../tests/support/traces.rs"]
mod traces;
use cli_support::{fgtrace_ok as fgtrace, tempdir};
use traces::call;
#[path = "../../tests/support/tools.rs"]
mod tools;

use fgtrace::sampler::Sampling;
use fgtrace::{Config, Session, Trace};
use fgtrace_trace::{CallCounters, Event, LossKind, Lost, TraceBuilder};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

// ------------------------------------------------------------ the workload

#[inline(never)]
fn spin(units: u64) -> u64 {
    let (mut x, mut i) = (units | 1, 0u64);
    while i < units * 2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i += 1;
    }
    x
}

#[fgtrace::traced]
#[inline(never)]
fn leaf(units: u64) -> u64 {
    spin(units)
}

#[fgtrace::traced]
#[inline(never)]
fn middle(units: u64) -> u64 {
    leaf(units) ^ leaf(units / 2 + 1)
}

#[fgtrace::traced]
fn busy(ms: u64) -> u64 {
    let t = std::time::Instant::now();
    let mut acc = 0;
    let mut n = 0u64;
    while t.elapsed().as_millis() < ms as u128 {
        n += 1;
        acc ^= middle(1 + n % 20);
    }
    acc
}

/// Pending once, then ready: a future that needs two polls.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

#[fgtrace::traced]
async fn fetch(units: u64) -> u64 {
    let a = leaf(units);
    YieldOnce(false).await;
    a ^ leaf(units + 1)
}

type Task = Pin<Box<dyn Future<Output = u64> + Send>>;

fn poll_once(f: &mut Task) -> Poll<u64> {
    f.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

const FUTURES: usize = 6;

struct Recorded {
    path: PathBuf,
    trace: Trace,
}

/// Two busy threads and the main one, sampled at 1 kHz; `FUTURES` futures of
/// `fetch` first polled on the main thread and finished on a worker, one more
/// polled once and dropped.
fn recorded() -> &'static Recorded {
    static R: OnceLock<Recorded> = OnceLock::new();
    R.get_or_init(|| {
        let session = Session::start(Config::builtin().sampling(Sampling::timer(1000)))
            .expect("session starts");
        let workers: Vec<_> = (0..2u64)
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("busy-{i}"))
                    .spawn(move || busy(300 + 50 * i))
                    .unwrap()
            })
            .collect();
        let mut tasks: Vec<Task> = (0..FUTURES as u64)
            .map(|i| Box::pin(fetch(i + 3)) as Task)
            .collect();
        for t in &mut tasks {
            assert!(poll_once(t).is_pending());
        }
        let poller = std::thread::Builder::new()
            .name("poller".into())
            .spawn(move || {
                let mut acc = 0;
                for mut t in tasks {
                    match poll_once(&mut t) {
                        Poll::Ready(v) => acc ^= v,
                        Poll::Pending => panic!("second poll is ready"),
                    }
                }
                acc
            })
            .unwrap();
        black_box(poller.join().unwrap());
        let mut dropped: Task = Box::pin(fetch(2));
        assert!(poll_once(&mut dropped).is_pending());
        drop(dropped);
        black_box(busy(200));
        for w in workers {
            black_box(w.join().unwrap());
        }
        let trace = session.stop().unwrap();
        let path = tempdir("rec").join("run.fgt");
        trace.save(&path).unwrap();
        Recorded { path, trace }
    })
}

/// Per OS tid: calls by name, polls, samples; and the futures.
#[derive(Default, Debug)]
struct Expect {
    calls: BTreeMap<u32, BTreeMap<String, u64>>,
    polls: u64,
    samples: BTreeMap<u32, u64>,
    futures: u64,
    cancelled: u64,
}

fn expect(t: &Trace) -> Expect {
    let m = t.meta();
    let tid = |i: u32| m.threads[i as usize].tid;
    let mut e = Expect::default();
    for ev in t.events() {
        match ev {
            Event::Call(c) => {
                *e.calls
                    .entry(tid(c.thread))
                    .or_default()
                    .entry(m.site_name(c.site).to_string())
                    .or_default() += 1;
                e.polls += c.is_poll() as u64;
            }
            Event::Sample(s) => *e.samples.entry(tid(s.thread)).or_default() += 1,
            Event::Future(f) => {
                e.futures += 1;
                e.cancelled += f.cancelled as u64;
            }
            _ => {}
        }
    }
    e
}

// ------------------------------------------------------------ Perfetto

/// `python3` with the `perfetto` package, or a visible skip (a failure where tools are required).
fn perfetto_python(test: &str) -> Option<()> {
    let ok = Command::new("python3")
        .args([
            "-c",
            "import perfetto.protos.perfetto.trace.perfetto_trace_pb2",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Some(())
    } else {
        tools::missing(
            test,
            "python3 cannot import perfetto.protos.perfetto.trace.perfetto_trace_pb2; \
             install it with `pip install perfetto==0.59.1`",
        )
    }
}

fn check_perfetto(path: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/perfetto_check.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "perfetto_check.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["errors"], Value::Array(vec![]), "{:#}", v["errors"]);
    assert_eq!(v["sequences"], serde_json::json!([1]));
    v
}

/// Thread tracks by OS tid: (uuid, name).
fn thread_tracks(v: &Value, pid: u32) -> BTreeMap<u32, (String, String)> {
    let mut out = BTreeMap::new();
    for (uuid, t) in v["tracks"].as_object().unwrap() {
        if t["kind"] == "thread" {
            assert_eq!(t["pid"], pid);
            let tid = t["tid"].as_u64().unwrap() as u32;
            let prev = out.insert(tid, (uuid.clone(), t["name"].as_str().unwrap().to_string()));
            assert!(prev.is_none(), "two tracks for tid {tid}");
        }
    }
    out
}

#[test]
fn perfetto_real_recording_has_a_slice_per_call_a_track_per_future_and_the_samples() {
    let test = "perfetto_real_recording";
    let Some(()) = perfetto_python(test) else {
        return;
    };
    let r = recorded();
    let m = r.trace.meta();
    let e = expect(&r.trace);
    assert_eq!(e.futures, FUTURES as u64 + 1);
    assert_eq!(e.cancelled, 1);
    assert!(e.samples.values().sum::<u64>() > 50, "{:?}", e.samples);
    let out = r.path.with_extension("pftrace");
    fgtrace(&[
        "perfetto",
        r.path.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let v = check_perfetto(&out);

    // The process, then one track per thread, with the trace's names.
    let procs: Vec<&Value> = v["tracks"]
        .as_object()
        .unwrap()
        .values()
        .filter(|t| t["kind"] == "process")
        .collect();
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0]["pid"], m.pid);
    let threads = thread_tracks(&v, m.pid);
    assert_eq!(threads.len(), m.threads.len());
    for t in &m.threads {
        assert_eq!(threads[&t.tid].1, t.name);
    }

    // Every call a slice on its own thread's track, by name; nested as recorded.
    for (tid, (uuid, _)) in &threads {
        let want: BTreeMap<String, u64> = e.calls.get(tid).cloned().unwrap_or_default();
        let s = &v["slices"][uuid];
        let got: BTreeMap<String, u64> = match s["names"].as_object() {
            Some(o) => o
                .iter()
                .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
                .collect(),
            None => BTreeMap::new(),
        };
        assert_eq!(got, want, "thread {tid}");
        if !want.is_empty() {
            assert_eq!(
                s["locations"], s["count"],
                "every call has its source location"
            );
        }
    }
    // busy > middle > leaf on the workers.
    let depth: u64 = threads
        .values()
        .map(|(u, _)| v["slices"][u]["max_depth"].as_u64().unwrap_or(0))
        .max()
        .unwrap();
    assert!(depth >= 3, "max depth {depth}");
    let busy_tracks: Vec<_> = m
        .threads
        .iter()
        .filter(|t| t.name.starts_with("busy-"))
        .collect();
    for t in busy_tracks {
        let s = &v["slices"][&threads[&t.tid].0];
        assert_eq!(s["top_level"], 1, "one busy() at the top of {}", t.name);
        assert_eq!(s["max_depth"], 3);
    }

    // One track per future (child of the process), the future and its polls in it.
    let futures: Vec<(&String, &Value)> = v["tracks"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, t)| t["kind"] == "track" && t["name"].as_str().unwrap().starts_with("fetch #"))
        .collect();
    assert_eq!(futures.len() as u64, e.futures);
    let proc_uuid = v["tracks"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, t)| t["kind"] == "process")
        .unwrap()
        .0
        .parse::<u64>()
        .unwrap();
    let mut lane_polls = 0;
    for (uuid, t) in &futures {
        assert_eq!(t["parent"], proc_uuid);
        let s = &v["slices"][uuid.as_str()];
        assert_eq!(s["top_level"], 1, "one future per lane");
        assert_eq!(s["names"]["fetch"], 1);
        let polls = s["names"]["poll"].as_u64().unwrap_or(0);
        assert!((1..=2).contains(&polls), "{uuid}: {polls} polls");
        lane_polls += polls;
    }
    assert_eq!(lane_polls, e.polls, "every poll on its future's lane");
    // Each lane poll linked to the thread's slice of the same poll.
    assert_eq!(v["flows_linked"], e.polls);

    // Samples per thread, symbolized, rooted in the thread start and ending in our code.
    let samples: BTreeMap<u32, u64> = v["samples"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, n)| (k.parse().unwrap(), n.as_u64().unwrap()))
        .collect();
    assert_eq!(samples, e.samples);
    let leafs = v["sample_leafs"].to_string();
    assert!(leafs.contains("spin"), "{leafs}");
}

fn synthetic() -> Trace {
    synthetic_with(|_| ())
}

/// The synthetic trace with its metadata edited first.
fn synthetic_with(edit: impl FnOnce(&mut fgtrace_trace::TraceMeta)) -> Trace {
    let mut meta = traces::meta(&["run", "query"], &[(900, "main"), (902, "worker")]);
    meta.duration_ns = 10_000_000;
    meta.counters = vec!["instructions".into()];
    meta.threads[1].lost = 7;
    edit(&mut meta);
    let mut b = TraceBuilder::new(meta);
    b.push(call(0, 0, 0, 1_000, 5_000));
    b.push(Event::Counters(CallCounters {
        thread: 0,
        values: vec![1234],
    }));
    b.push(call(0, 1, 1, 1_000, 5_000)); // same start and end as its parent
    b.push(Event::Counters(CallCounters {
        thread: 0,
        values: vec![1000],
    }));
    b.push(call(0, 1, 2, 1_000, 5_000)); // and again
    b.push(call(0, 0, 0, 6_000, 1_000)); // right after
    b.push(call(1, 1, 0, 2_000, 100));
    b.push(Event::Lost(Lost {
        thread: 1,
        depth: 0,
        at_ns: 3_000,
        count: 7,
        kind: LossKind::Dropped,
    }));
    b.push(call(1, 1, 0, 4_000, 100));
    b.finish()
}

#[test]
fn perfetto_counters_losses_and_exact_nesting() {
    let Some(()) = perfetto_python("perfetto_counters_losses_and_exact_nesting") else {
        return;
    };
    let dir = tempdir("syn");
    let path = dir.join("syn.fgt");
    synthetic().save(&path).unwrap();
    let out = dir.join("syn.pftrace");
    fgtrace(&[
        "perfetto",
        path.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let v = check_perfetto(&out);
    let threads = thread_tracks(&v, 900);
    let main = &v["slices"][&threads[&900].0];
    assert_eq!(main["count"], 4);
    assert_eq!(
        main["max_depth"], 3,
        "three calls sharing start and end nest"
    );
    assert_eq!(main["top_level"], 2);
    let worker = &threads[&902].0;
    assert_eq!(v["slices"][worker]["count"], 2);
    assert_eq!(v["instants"][worker], serde_json::json!(["LOST 7 records"]));
    // One counter track (main's instructions), a value per counted call.
    let counters: Vec<(&String, &Value)> = v["tracks"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, t)| t["kind"] == "counter")
        .collect();
    assert_eq!(counters.len(), 1);
    assert!(counters[0].1["name"]
        .as_str()
        .unwrap()
        .starts_with("instructions"));
    assert_eq!(
        v["counters"][counters[0].0],
        serde_json::json!([1234, 1000])
    );

    // --thread keeps one track; --no-futures/--no-samples are accepted.
    let out2 = dir.join("worker.pftrace");
    fgtrace(&[
        "perfetto",
        path.to_str().unwrap(),
        "--thread",
        "worker",
        "--no-samples",
        "--no-futures",
        "-o",
        out2.to_str().unwrap(),
    ]);
    let v = check_perfetto(&out2);
    assert_eq!(
        thread_tracks(&v, 900).keys().copied().collect::<Vec<_>>(),
        [902]
    );
}

/// An instant marker (a `tracing` event) inside a call: an instant on the
/// thread's track between the call's nested slices, named by its site, with
/// its value, read back with the upstream schema; in Chrome JSON a
/// thread-scoped instant event.
#[test]
fn perfetto_and_chrome_put_an_instant_marker_on_its_thread() {
    let Some(()) = perfetto_python("perfetto_and_chrome_put_an_instant_marker_on_its_thread")
    else {
        return;
    };
    let mut meta = traces::meta(&["run", "cache_miss"], &[(900, "main")]);
    meta.duration_ns = 10_000;
    meta.sites[1].values = vec!["key".into()];
    let mut b = TraceBuilder::new(meta);
    b.push(call(0, 0, 0, 1_000, 5_000));
    b.push(Event::Marker(fgtrace_trace::Marker {
        thread: 0,
        site: 1,
        depth: 1,
        ts_ns: 2_000,
    }));
    b.push(Event::Values(fgtrace_trace::CallValues {
        thread: 0,
        values: vec![fgtrace_trace::Value {
            slot: 0,
            tag: 1, // unsigned
            bits: 7,
        }],
    }));
    b.push(call(0, 0, 1, 3_000, 1_000));
    let dir = tempdir("marker");
    let path = dir.join("marker.fgt");
    b.finish().save(&path).unwrap();
    let out = dir.join("marker.pftrace");
    fgtrace(&[
        "perfetto",
        path.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let v = check_perfetto(&out);
    let main = &thread_tracks(&v, 900)[&900].0;
    assert_eq!(v["instants"][main], serde_json::json!(["cache_miss"]));
    assert_eq!(v["slices"][main]["count"], 2);
    assert_eq!(v["slices"][main]["max_depth"], 2);

    let json = dir.join("marker.json");
    fgtrace(&[
        "chrome",
        path.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
    ]);
    let j: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let instants: Vec<&Value> = j["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "i" && e["cat"] == "event")
        .collect();
    assert_eq!(instants.len(), 1);
    assert_eq!(instants[0]["name"], "cache_miss");
    assert_eq!(instants[0]["s"], "t");
    assert_eq!(instants[0]["args"]["key"], 7);
    assert_eq!(instants[0]["args"]["depth"], 1);
}

// ------------------------------------------------------------ Firefox

fn gunzip_json(path: &Path) -> Value {
    let f = std::fs::File::open(path).unwrap();
    let mut s = String::new();
    flate2::read::GzDecoder::new(f)
        .read_to_string(&mut s)
        .unwrap();
    serde_json::from_str(&s).unwrap()
}

/// The processed format's string table (per thread or shared, by version).
fn strings<'a>(profile: &'a Value, thread: &'a Value) -> &'a Vec<Value> {
    thread["stringArray"]
        .as_array()
        .or_else(|| profile["shared"]["stringArray"].as_array())
        .expect("a string table")
}

/// Marker names of a thread, counted.
fn marker_names(profile: &Value, thread: &Value) -> HashMap<String, u64> {
    let s = strings(profile, thread);
    let mut out = HashMap::new();
    for n in thread["markers"]["name"].as_array().unwrap() {
        let name = s[n.as_u64().unwrap() as usize]
            .as_str()
            .unwrap()
            .to_string();
        *out.entry(name).or_default() += 1;
    }
    out
}

#[test]
fn firefox_profile_has_every_thread_its_samples_and_its_markers() {
    let r = recorded();
    let m = r.trace.meta();
    let e = expect(&r.trace);
    let out = r.path.with_extension("json.gz");
    fgtrace(&[
        "firefox",
        r.path.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let p = gunzip_json(&out);
    assert!(p["meta"]["product"].as_str().unwrap().contains("fgtrace"));
    let threads = p["threads"].as_array().unwrap();
    let by_tid: HashMap<u64, &Value> = threads
        .iter()
        .map(|t| {
            (
                t["tid"]
                    .as_u64()
                    .or_else(|| t["tid"].as_str()?.parse().ok())
                    .unwrap(),
                t,
            )
        })
        .collect();
    for t in &m.threads {
        let ft = by_tid
            .get(&(t.tid as u64))
            .unwrap_or_else(|| panic!("thread {} missing", t.name));
        assert_eq!(ft["name"], t.name.as_str());
        // Samples: one per recorded sample, each with a stack.
        let samples = &ft["samples"];
        let want = e.samples.get(&t.tid).copied().unwrap_or(0);
        assert_eq!(samples["length"], want, "samples of {}", t.name);
        let stacks = samples["stack"].as_array().unwrap();
        assert!(
            stacks.iter().all(|s| s.is_u64()),
            "every sample has a stack"
        );
        // Markers: one per traced call, named after the function.
        let want: BTreeMap<String, u64> = e.calls.get(&t.tid).cloned().unwrap_or_default();
        let got: BTreeMap<String, u64> = marker_names(&p, ft).into_iter().collect();
        assert_eq!(got, want, "markers of {}", t.name);
        // Interval markers (phase 1) with their ends.
        let phases = ft["markers"]["phase"].as_array().unwrap();
        assert!(phases.iter().all(|ph| ph == 1));
    }
    // Symbolized: `spin` is a frame name in some sampled thread.
    assert!(p.to_string().contains("spin"));
    // The futures' lanes: one marker name per future, holding the future and its polls.
    let lanes = threads
        .iter()
        .find(|t| t["name"] == "async futures")
        .expect("an async lane thread");
    let names = marker_names(&p, lanes);
    assert_eq!(names.len() as u64, e.futures);
    assert!(names.keys().all(|n| n.starts_with("fetch #")));
    assert_eq!(names.values().sum::<u64>(), e.futures + e.polls);
    // Each completed future's lane: its first poll on the thread that
    // started it, its second on the poller, even though all six overlapped.
    let poller = m.threads.iter().find(|t| t.name == "poller").unwrap().tid as u64;
    let s = strings(&p, lanes);
    let mk = &lanes["markers"];
    let mut by_lane: BTreeMap<String, Vec<(f64, u64)>> = BTreeMap::new();
    let mut cancelled = 0;
    for (i, n) in mk["name"].as_array().unwrap().iter().enumerate() {
        let name = s[n.as_u64().unwrap() as usize]
            .as_str()
            .unwrap()
            .to_string();
        let data = &mk["data"][i];
        let kind = data["kind"]
            .as_str()
            .unwrap_or_else(|| s[data["kind"].as_u64().unwrap() as usize].as_str().unwrap());
        if kind == "poll" {
            let start = mk["startTime"][i].as_f64().unwrap();
            by_lane
                .entry(name)
                .or_default()
                .push((start, data["tid"].as_f64().unwrap() as u64));
        } else if kind.contains("cancelled") {
            cancelled += 1;
        }
    }
    assert_eq!(cancelled, 1);
    let mut two = 0;
    for (lane, mut polls) in by_lane {
        polls.sort_by(|a, b| a.0.total_cmp(&b.0));
        if polls.len() == 2 {
            two += 1;
            assert_ne!(
                polls[0].1, poller,
                "{lane}: first poll where it was created"
            );
            assert_eq!(polls[1].1, poller, "{lane}: second poll on the poller");
        }
    }
    assert_eq!(two, FUTURES);
}

// ------------------------------------------------------------ Chrome JSON lanes

#[test]
fn chrome_json_puts_each_futures_polls_on_its_lane() {
    let r = recorded();
    let e = expect(&r.trace);
    let out = r.path.with_extension("json");
    fgtrace(&[
        "chrome",
        r.path.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    // Thread slices of polls carry a poll id ...
    let thread_polls: HashMap<u64, &Value> = events
        .iter()
        .filter(|x| x["ph"] == "X" && x["args"]["poll"] == true)
        .map(|x| (x["args"]["poll_id"].as_u64().expect("a poll id"), x))
        .collect();
    assert_eq!(thread_polls.len() as u64, e.polls);
    // ... and the lane's copy, inside its future's begin/end, has the same one.
    let lane_polls: Vec<&Value> = events
        .iter()
        .filter(|x| x["ph"] == "b" && x["name"] == "poll")
        .collect();
    assert_eq!(lane_polls.len() as u64, e.polls);
    for p in lane_polls {
        let id = p["args"]["poll_id"].as_u64().unwrap();
        let t = thread_polls[&id];
        assert_eq!(p["args"]["tid"], t["tid"]);
        assert_eq!(p["ts"], t["ts"]);
        let fut = events
            .iter()
            .filter(|x| x["ph"] == "b" && x["name"] == "fetch" && x["id"] == p["id"])
            .count();
        assert!(fut >= 1, "the poll's lane has its future");
    }
}

#[test]
fn firefox_plain_json_with_losses_and_a_thread_filter() {
    let dir = tempdir("ffsyn");
    let path = dir.join("syn.fgt");
    synthetic().save(&path).unwrap();
    let out = dir.join("syn.json");
    fgtrace(&[
        "firefox",
        path.to_str().unwrap(),
        "--json",
        "-o",
        out.to_str().unwrap(),
    ]);
    let p: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let threads = p["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2, "no futures: no async lane thread");
    let by_name = |n: &str| threads.iter().find(|t| t["name"] == n).unwrap();
    let main = marker_names(&p, by_name("main"));
    assert_eq!((main["run"], main["query"]), (2, 2));
    let worker = marker_names(&p, by_name("worker"));
    assert_eq!((worker["query"], worker["LOST 7 records"]), (2, 1));
    assert_eq!(by_name("worker")["samples"]["length"], 0);

    let out = dir.join("worker.json.gz");
    fgtrace(&[
        "firefox",
        path.to_str().unwrap(),
        "--thread",
        "902",
        "-o",
        out.to_str().unwrap(),
    ]);
    let p = gunzip_json(&out);
    let names: Vec<&str> = p["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["worker"]);
}

// ------------------------------------------------------------ windows and sizes

/// Runs `fgtrace` with `FGTRACE_EXPORT_LIMIT_BYTES` set (or not); it must succeed.
fn fgtrace_limit(limit: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fgtrace"));
    c.args(args).env_remove("FGTRACE_EXPORT_LIMIT_BYTES");
    if let Some(l) = limit {
        c.env("FGTRACE_EXPORT_LIMIT_BYTES", l);
    }
    let out = c.output().expect("run fgtrace");
    assert!(
        out.status.success(),
        "fgtrace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn exports_take_a_window_and_a_minimum_duration_and_count_what_they_leave_out() {
    let dir = tempdir("window");
    let path = dir.join("syn.fgt");
    synthetic().save(&path).unwrap();
    let p = path.to_str().unwrap();
    // [1.5us, 5us), at least 1us: main's three nested calls (1us..6us) stay;
    // its call at 6us and worker's two 100 ns calls go.
    let window = [
        "--from",
        "1.5us",
        "--to",
        "5.000 us",
        "--min-duration",
        "1us",
    ];

    let json = dir.join("w.json");
    let mut args = vec!["chrome", p, "-o", json.to_str().unwrap()];
    args.extend(window);
    fgtrace_limit(None, &args);
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let calls: Vec<&Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|c| c["tid"] == 900 && c["ts"] == 1.0));
    let lost: Vec<&Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "lost")
        .collect();
    assert_eq!(lost.len(), 1, "the loss at 3us is inside");
    assert_eq!(v["otherData"]["left_out"]["calls"], 3);
    assert_eq!(v["otherData"]["left_out"]["losses"], 0);
    assert_eq!(v["otherData"]["window"]["from_ns"], 1_500);
    assert_eq!(v["otherData"]["window"]["to_ns"], 5_000);
    assert_eq!(v["otherData"]["window"]["min_duration_ns"], 1_000);

    // A plain number is microseconds, as the Chrome JSON's `ts`.
    let json2 = dir.join("w2.json");
    fgtrace_limit(
        None,
        &["chrome", p, "--from", "6", "-o", json2.to_str().unwrap()],
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&json2).unwrap()).unwrap();
    // main's three calls end at 6us exactly: out; its call at 6us and worker's are before.
    assert_eq!(v["otherData"]["left_out"]["calls"], 5);

    let ff = dir.join("w.ff.json");
    let mut args = vec!["firefox", p, "--json", "-o", ff.to_str().unwrap()];
    args.extend(window);
    fgtrace_limit(None, &args);
    let v: Value = serde_json::from_slice(&std::fs::read(&ff).unwrap()).unwrap();
    let product = v["meta"]["product"].as_str().unwrap();
    assert!(product.ends_with("; 3 calls left out)"), "{product}");

    let pf = dir.join("w.pftrace");
    let mut args = vec!["perfetto", p, "-o", pf.to_str().unwrap()];
    args.extend(window);
    fgtrace_limit(None, &args);
    let bytes = std::fs::read(&pf).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("fgtrace window"), "the window's track");
    assert!(text.contains("3 calls left out"), "the window's instant");

    // --from after --to is refused in one line.
    let out = cli_support::fgtrace(&["chrome", p, "--from", "5us", "--to", "1us"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--from (5000 ns) must come before --to (1000 ns)"));
}

#[test]
fn an_export_past_its_viewers_limit_is_announced_before_it_is_written() {
    let dir = tempdir("limit");
    let path = dir.join("big.fgt");
    // The metadata says 2M calls over the trace's 10 ms (the estimate reads
    // the metadata's counts, not the events).
    synthetic_with(|m| {
        m.threads[0].calls = 1_500_000;
        m.threads[1].calls = 500_000;
    })
    .save(&path)
    .unwrap();
    let p = path.to_str().unwrap();
    for (cmd, out, size) in [
        ("perfetto", "big.pftrace", "about 98 MB,"),
        ("chrome", "big.json", "about 400 MB,"),
        ("firefox", "big.json.gz", "about 240 MB of JSON,"),
    ] {
        let o = dir.join(out);
        let o = o.to_str().unwrap();
        // Under each viewer's own limit: nothing said.
        let quiet = fgtrace_limit(None, &[cmd, p, "-o", o]);
        assert_eq!(String::from_utf8_lossy(&quiet.stderr), "", "{cmd}");
        // Over a limit of 50 MB: one line, and the file is still written.
        std::fs::remove_file(o).unwrap();
        let loud = fgtrace_limit(Some("50000000"), &[cmd, p, "-o", o]);
        let err = String::from_utf8_lossy(&loud.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!(
                "fgtrace: this export will be {size} more than the "
            )),
            "{cmd}: {err}"
        );
        assert!(
            err.contains(
                "can load (about 50 MB); narrow it with --from/--to or --min-duration 10us (--to "
            ),
            "{cmd}: {err}"
        );
        assert!(std::fs::metadata(o).unwrap().len() > 0, "{cmd} still wrote");
        // A window of a tenth of the trace brings it under: no warning.
        let narrow = fgtrace_limit(Some("50000000"), &[cmd, p, "--to", "1ms", "-o", o]);
        assert_eq!(String::from_utf8_lossy(&narrow.stderr), "", "{cmd}");
    }
}

#[test]
fn views_that_hold_every_call_announce_their_memory_and_the_flags_that_bound_it() {
    let dir = tempdir("memory");
    let path = dir.join("big.fgt");
    // The metadata says 2M calls over the trace's 10 ms: a flame chart's
    // folded text takes about 260 MB for them, a Firefox export 220 MB.
    synthetic_with(|m| {
        m.threads[0].calls = 1_500_000;
        m.threads[1].calls = 500_000;
    })
    .save(&path)
    .unwrap();
    let p = path.to_str().unwrap();
    let run = |warn: Option<&str>, args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fgtrace"));
        c.args(args)
            .env_remove("FGTRACE_EXPORT_LIMIT_BYTES")
            .env_remove("FGTRACE_MEMORY_WARN_BYTES");
        if let Some(w) = warn {
            c.env("FGTRACE_MEMORY_WARN_BYTES", w);
        }
        let out = c.output().expect("run fgtrace");
        assert!(out.status.success(), "{args:?}: {out:?}");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let ff = dir.join("big.json.gz");
    let ff = ff.to_str().unwrap();
    for (args, what) in [
        (
            vec!["flame", "--chart", "--folded", p],
            "the flame chart holds",
        ),
        (vec!["firefox", p, "-o", ff], "the Firefox export holds"),
    ] {
        // Under the default of 1 GB: nothing said.
        let (out, err) = run(None, &args);
        assert_eq!(err, "", "{args:?}");
        // Over 50 MB: one line, and the view still runs.
        let (loud, err) = run(Some("50000000"), &args);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!(
                "fgtrace: {what} every call it shows in memory: about "
            )) && err.contains(
                " for 2.0M calls, more than 50 MB; bound it with --from/--to, \
                 --min-duration or --thread (--to "
            ),
            "{err}"
        );
        assert_eq!(loud, out, "{args:?}: the output is the same");
        // A tenth of the trace: under 50 MB, nothing said.
        let narrow = [&args[..], &["--to", "1ms"]].concat();
        let (_, err) = run(Some("50000000"), &narrow);
        assert_eq!(err, "", "{narrow:?}");
    }
    // The window is the chart's only: the other flame graphs take none.
    let out = cli_support::fgtrace(&["flame", "--folded", p, "--to", "1ms"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--chart"));
}
