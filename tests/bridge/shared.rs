// The bridge tests, shared by tests/bridge_minitrace.rs and
// tests/bridge_fastrace.rs (the two crates have the same model and API); the
// including file brings `tracer` (the span crate), `bridge` (fgtrace's bridge
// module for it), `TRACER` (its name) and `Keep`'s `Reporter` impl.

use fgtrace::view::TraceViews;
use bridge::{export, export_events, ExportOptions, SpanCollector, TraceIdScope};
use fgtrace::trace::{Event, SiteInfo, Trace, TraceReader};
use fgtrace::view::{GraphOptions, ReportOptions};
use fgtrace::{traced, Config, Session};
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tracer::collector::{SpanContext, SpanId, SpanRecord, TraceId};
use tracer::Span;

/// fgtrace sessions and the span crate's collector are process-wide: tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn spin(us: u64) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_micros(us) {
        std::hint::spin_loop();
    }
}

/// A reporter that keeps what it is given, batch by batch (its `Reporter`
/// impl is in the including file: the crates' signatures differ).
#[derive(Default)]
struct Keep {
    batches: Vec<Vec<SpanRecord>>,
}

#[traced]
fn outer() {
    spin(40);
    middle();
    middle();
    leaf();
}

#[traced]
fn middle() {
    spin(30);
    leaf();
}

#[traced]
fn leaf() {
    spin(20);
}

#[traced]
fn boom() {
    panic!("unwinds through a traced fn on purpose");
}

#[traced]
async fn two_polls() -> u32 {
    tokio::task::yield_now().await;
    7
}

/// Two requests on this thread, one on a thread named `worker`.
fn record() -> Trace {
    let session = Session::start(Config::builtin()).unwrap();
    outer();
    outer();
    std::thread::Builder::new()
        .name("worker".into())
        .spawn(outer)
        .unwrap()
        .join()
        .unwrap();
    session.stop().unwrap()
}

type Key = (u32, String, u64);

/// Every call keyed by (tid, name, start) with its enclosing call's key.
fn call_tree(trace: &Trace) -> (HashMap<Key, Option<Key>>, HashMap<Key, u64>) {
    let meta = trace.meta();
    let mut parents = HashMap::new();
    let mut durs = HashMap::new();
    let mut open: Vec<Vec<(u32, Key)>> = vec![Vec::new(); meta.threads.len()];
    for c in trace.calls() {
        let stack = &mut open[c.thread as usize];
        while stack.last().is_some_and(|(d, _)| *d >= c.depth) {
            stack.pop();
        }
        let key = (
            meta.threads[c.thread as usize].tid,
            meta.site_name(c.site).to_string(),
            c.start_ns,
        );
        parents.insert(key.clone(), stack.last().map(|(_, k)| k.clone()));
        durs.insert(key.clone(), c.dur_ns);
        stack.push((c.depth, key));
    }
    (parents, durs)
}

#[test]
fn exported_spans_follow_the_call_tree_with_exact_times() {
    let _s = serial();
    let trace = record();
    let start_unix = trace.meta().clock.start_unix_ns;
    let mut keep = Keep::default();
    let opts = ExportOptions {
        batch: 4,
        ..Default::default()
    };
    let summary = export(&trace, &mut keep, &opts);
    let spans: Vec<SpanRecord> = keep.batches.iter().flatten().cloned().collect();

    // 3 requests of outer { middle { leaf } middle { leaf } leaf }.
    assert_eq!(spans.len(), 18);
    assert_eq!(trace.calls().count(), 18);
    assert_eq!(summary.spans, 18);
    assert_eq!(summary.batches as usize, keep.batches.len());
    assert_eq!(keep.batches.len(), 18usize.div_ceil(4));
    assert!(keep.batches.iter().all(|b| !b.is_empty() && b.len() <= 4));

    let ids: HashSet<u64> = spans.iter().map(|s| s.span_id.0).collect();
    assert_eq!(ids.len(), 18, "span ids are unique");
    assert!(!ids.contains(&0), "span ids are nonzero");

    // Parent links, begin times and durations are the recorded call tree's, exactly.
    let by_id: HashMap<u64, &SpanRecord> = spans.iter().map(|s| (s.span_id.0, s)).collect();
    let prop = |s: &SpanRecord, k: &str| {
        s.properties
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.to_string())
    };
    let key = |s: &SpanRecord| -> Key {
        let tid = prop(s, "thread.id").unwrap().parse().unwrap();
        (tid, s.name.to_string(), s.begin_time_unix_ns - start_unix)
    };
    let (want_parents, want_durs) = call_tree(&trace);
    let mut got_parents = HashMap::new();
    let mut got_durs = HashMap::new();
    for s in &spans {
        let parent = (s.parent_id.0 != 0).then(|| key(by_id[&s.parent_id.0]));
        if let Some(p) = (s.parent_id.0 != 0).then(|| by_id[&s.parent_id.0]) {
            assert_eq!(p.trace_id, s.trace_id, "a child is in its parent's trace");
            assert!(s.begin_time_unix_ns >= p.begin_time_unix_ns);
            assert!(s.begin_time_unix_ns + s.duration_ns <= p.begin_time_unix_ns + p.duration_ns);
        }
        got_parents.insert(key(s), parent);
        got_durs.insert(key(s), s.duration_ns);
    }
    assert_eq!(got_parents, want_parents);
    assert_eq!(got_durs, want_durs);

    // One trace per request, nonzero, parent_id 0 at the roots.
    let roots: Vec<&SpanRecord> = spans.iter().filter(|s| s.parent_id == SpanId(0)).collect();
    assert_eq!(roots.len(), 3);
    assert!(roots.iter().all(|r| r.name == "outer" && r.trace_id.0 != 0));
    assert_eq!(
        roots
            .iter()
            .map(|r| r.trace_id)
            .collect::<HashSet<_>>()
            .len(),
        3
    );
    assert_eq!(summary.traces, 3);

    // Properties: the thread, and where the fn is.
    let worker: Vec<&SpanRecord> = spans
        .iter()
        .filter(|s| prop(s, "thread.name").as_deref() == Some("worker"))
        .collect();
    assert_eq!(worker.len(), 6);
    let leaf_span = spans.iter().find(|s| s.name == "leaf").unwrap();
    assert!(prop(leaf_span, "code.filepath").unwrap().ends_with(file!()));
    assert_eq!(
        prop(leaf_span, "code.namespace").as_deref(),
        Some(module_path!())
    );
    assert!(
        prop(leaf_span, "code.lineno")
            .unwrap()
            .parse::<u32>()
            .unwrap()
            > 0
    );
    assert!(spans
        .iter()
        .filter(|s| s.name == "leaf")
        .all(|s| s.duration_ns >= 20_000));

    // Other scopes: one trace per thread, or one for everything.
    for (scope, want) in [(TraceIdScope::Thread, 2), (TraceIdScope::Session, 1)] {
        let mut keep = Keep::default();
        export(
            &trace,
            &mut keep,
            &ExportOptions {
                trace_ids: scope,
                ..Default::default()
            },
        );
        let ids: HashSet<TraceId> = keep.batches.iter().flatten().map(|s| s.trace_id).collect();
        assert_eq!(ids.len(), want, "{scope:?}");
        assert_eq!(keep.batches.len(), 1, "18 spans fit one default batch");
    }
}

#[tracer::trace]
fn mt_outer() {
    mt_mid();
    mt_mid();
    mt_leaf();
}

#[tracer::trace]
fn mt_mid() {
    spin(30);
    mt_leaf();
}

#[tracer::trace(short_name = true)]
fn mt_leaf() {
    spin(20);
}

fn request(id: u128) {
    let root = Span::root("request", SpanContext::new(TraceId(id), SpanId::default()));
    let _g = root.set_local_parent();
    mt_outer();
}

/// The global collector reports into one `SpanCollector` for the whole binary.
fn global() -> &'static SpanCollector {
    static C: OnceLock<SpanCollector> = OnceLock::new();
    C.get_or_init(|| {
        let c = SpanCollector::new();
        tracer::set_reporter(c.clone(), tracer::collector::Config::default());
        c
    })
}

#[test]
fn spans_become_a_trace_every_view_reads() {
    let _s = serial();
    let collector = global();
    tracer::flush();
    collector.clear();
    request(0xA1);
    std::thread::spawn(|| request(0xB2)).join().unwrap();
    tracer::flush();

    let raw = collector.spans();
    assert_eq!(raw.len(), 14);
    let (trace, summary) = collector.import();
    assert_eq!(
        (
            summary.spans,
            summary.traces,
            summary.threads,
            summary.orphans
        ),
        (14, 2, 2, 0)
    );
    let meta = trace.meta();
    assert_eq!(meta.program, format!("{TRACER} spans"));
    // One thread per trace id, named by the id.
    let names: HashSet<String> = meta.threads.iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, HashSet::from(["a1".to_string(), "b2".to_string()]));

    let outer = &format!("{}::mt_outer", module_path!());
    let mid = &format!("{}::mt_mid", module_path!());
    let want = vec![
        ("request", 0),
        (outer, 1),
        (mid, 2),
        ("mt_leaf", 3),
        (mid, 2),
        ("mt_leaf", 3),
        ("mt_leaf", 2),
    ];
    for t in 0..2u32 {
        let got: Vec<(&str, u32)> = trace
            .calls()
            .filter(|c| c.thread == t)
            .map(|c| (meta.site_name(c.site), c.depth))
            .collect();
        assert_eq!(got, want, "thread {t}");
    }
    // Times: relative to the earliest span, durations as reported.
    let origin = raw.iter().map(|s| s.begin_unix_ns).min().unwrap();
    assert_eq!(meta.clock.start_unix_ns, origin);
    let mut want_times: Vec<(String, u64, u64)> = raw
        .iter()
        .map(|s| (s.name.to_string(), s.begin_unix_ns - origin, s.duration_ns))
        .collect();
    let mut got_times: Vec<(String, u64, u64)> = trace
        .calls()
        .map(|c| (meta.site_name(c.site).to_string(), c.start_ns, c.dur_ns))
        .collect();
    want_times.sort();
    got_times.sort();
    assert_eq!(got_times, want_times);

    let mut graph = Vec::new();
    trace
        .write_graph(&GraphOptions::default(), &mut graph)
        .unwrap();
    let graph = String::from_utf8(graph).unwrap();
    assert_eq!(graph.matches("request() {").count(), 2, "{graph}");
    assert_eq!(graph.matches("mt_mid() {").count(), 4, "{graph}");
    assert_eq!(graph.matches("mt_leaf();").count(), 6, "{graph}");

    let report = trace.report(&ReportOptions::default());
    let leaf = report
        .functions
        .iter()
        .find(|f| f.name == "mt_leaf")
        .unwrap();
    assert_eq!(leaf.calls, 6);
    let leaf_total: u64 = raw
        .iter()
        .filter(|s| s.name == "mt_leaf")
        .map(|s| s.duration_ns)
        .sum();
    assert_eq!(leaf.total_ns, leaf_total);
    assert!(leaf.min_ns >= 20_000);
    let mid_stats = report.functions.iter().find(|f| f.name == *mid).unwrap();
    assert_eq!(mid_stats.calls, 4);
    assert!(
        mid_stats.self_ns < mid_stats.total_ns,
        "mt_leaf's time is not mt_mid's own"
    );
    let mut text = Vec::new();
    trace
        .write_report(&ReportOptions::default(), &mut text)
        .unwrap();
    assert!(String::from_utf8(text).unwrap().contains("mt_leaf"));
}

#[test]
fn a_span_whose_parent_never_arrived_becomes_a_root() {
    let _s = serial();
    let collector = global();
    tracer::flush();
    collector.clear();
    {
        // Continues a trace from another process: parent 777 is not ours.
        let root = Span::root("remote-child", SpanContext::new(TraceId(0xC3), SpanId(777)));
        let _g = root.set_local_parent();
        mt_leaf();
    }
    tracer::flush();
    let (trace, summary) = collector.import();
    assert_eq!((summary.spans, summary.orphans), (2, 1));
    let got: Vec<(String, u32)> = trace
        .calls()
        .map(|c| (trace.meta().site_name(c.site).to_string(), c.depth))
        .collect();
    assert_eq!(
        got,
        vec![("remote-child".to_string(), 0), ("mt_leaf".to_string(), 1)]
    );
}

/// (tid, site, depth, start, duration, flags) of a call.
type CallShape = (u32, SiteInfo, u32, u64, u64, u8);
/// (tid, site, start, duration, polls) of a whole future.
type FutureShape = (u32, SiteInfo, u64, u64, u32);

/// Every call and future, times shifted back by `shift`.
fn shape(trace: &Trace, shift: u64) -> (Vec<CallShape>, Vec<FutureShape>) {
    let meta = trace.meta();
    let mut calls = Vec::new();
    let mut futures = Vec::new();
    for e in trace.events() {
        match e {
            Event::Call(c) => calls.push((
                meta.threads[c.thread as usize].tid,
                meta.sites[c.site as usize].clone(),
                c.depth,
                c.start_ns - shift,
                c.dur_ns,
                c.flags,
            )),
            Event::Future(f) => futures.push((
                meta.threads[f.thread as usize].tid,
                meta.sites[f.site as usize].clone(),
                f.start_ns - shift,
                f.dur_ns,
                f.polls,
            )),
            _ => {}
        }
    }
    // Per thread in pre-order; threads in a fixed order.
    calls.sort_by_key(|c| c.0);
    futures.sort_by_key(|f| f.0);
    (calls, futures)
}

#[test]
fn export_then_import_keeps_the_call_tree_sites_flags_and_futures() {
    let _s = serial();
    let session = Session::start(Config::builtin()).unwrap();
    outer();
    assert!(std::panic::catch_unwind(boom).is_err());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(rt.block_on(two_polls()), 7);
    std::thread::Builder::new()
        .name("worker".into())
        .spawn(outer)
        .unwrap()
        .join()
        .unwrap();
    let trace = session.stop().unwrap();
    assert_eq!(
        trace
            .events()
            .filter(|e| matches!(e, Event::Future(_)))
            .count(),
        1
    );
    assert!(trace.calls().any(|c| c.unwound()));

    let collector = SpanCollector::new();
    let summary = export(&trace, &mut collector.clone(), &ExportOptions::default());
    assert_eq!(summary.spans as usize, collector.len());
    let (back, s) = collector.import();
    assert_eq!((s.orphans, s.cycles, s.duplicates), (0, 0, 0));

    // The import's time 0 is the earliest exported span.
    let shift = back.meta().clock.start_unix_ns - trace.meta().clock.start_unix_ns;
    assert_eq!(shape(&back, 0), shape(&trace, shift));
    let threads = |t: &Trace| -> Vec<(u32, String, u64)> {
        let mut v: Vec<_> = t
            .meta()
            .threads
            .iter()
            .map(|t| (t.tid, t.name.clone(), t.calls))
            .collect();
        v.sort();
        v
    };
    assert_eq!(threads(&back), threads(&trace));

    // Straight from a trace file, without loading it: the same spans.
    let mut file = Vec::new();
    trace.write_to(&mut file).unwrap();
    let reader = TraceReader::new(&file[..]).unwrap();
    let meta = reader.meta().clone();
    let mut keep = Keep::default();
    let streamed = export_events(
        &meta,
        reader.events().map(Result::unwrap),
        &mut keep,
        &ExportOptions::default(),
    );
    assert_eq!(streamed, summary);
    let mut from_file: Vec<SpanRecord> = keep.batches.into_iter().flatten().collect();
    let mut direct = Keep::default();
    export(&trace, &mut direct, &ExportOptions::default());
    let mut direct: Vec<SpanRecord> = direct.batches.into_iter().flatten().collect();
    from_file.sort_by_key(|s| s.span_id.0);
    direct.sort_by_key(|s| s.span_id.0);
    assert_eq!(from_file, direct);

    // Without properties spans carry no thread: one pseudo-thread per request.
    let bare = SpanCollector::new();
    export(
        &trace,
        &mut bare.clone(),
        &ExportOptions {
            properties: false,
            ..Default::default()
        },
    );
    let roots = trace.calls().filter(|c| c.depth == 0).count() + 1; // + the future
    assert_eq!(bare.to_trace().meta().threads.len(), roots);
}
