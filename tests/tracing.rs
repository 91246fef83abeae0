//! `tracing` spans as fgtrace calls (`fgtrace::tracing`, feature `tracing`):
//! through a `Registry` with the `fmt` layer beside fgtrace's, and through
//! the standalone subscriber. The recorded call trees are compared with what
//! the code does (names, order, nesting depth), sessions' filters are
//! applied to spans, async spans are polled on tokio, and the subscriber's
//! spans are counted for allocations.

use fgtrace::testing::{self, Capture};
use fgtrace::{traced, Config, Session, Trace};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tracing::instrument::WithSubscriber;
use tracing::{debug_span, info_span, instrument, Dispatch, Level};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer as _;

// ------------------------------------------------------------ allocations

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to `System`; the count is a plain thread-local.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Allocations `f` made on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(|a| a.get());
    f();
    ALLOCS.with(|a| a.get()) - before
}

// ------------------------------------------------------------ the workload

#[traced]
#[inline(never)]
fn parse(req: u32) -> u32 {
    black_box(req) * 2
}

#[instrument]
#[inline(never)]
fn handle(req: u32) -> u32 {
    tracing::info!("handling");
    parse(req) + 1
}

#[traced]
#[inline(never)]
fn serve() -> u32 {
    handle(1) + handle(2)
}

/// What `serve` must record: its spans between its traced calls.
fn serve_shape() -> Vec<(String, u32)> {
    shape_of(&[
        ("serve", 0),
        ("handle", 1),
        ("parse", 2),
        ("handle", 1),
        ("parse", 2),
    ])
}

#[instrument(skip_all)]
fn recurse(n: u32) -> u32 {
    if n == 0 {
        return parse(0);
    }
    recurse(n - 1) + 1
}

/// Spans entered inside a traced fn, one of them exited before the span
/// entered after it.
#[traced]
fn out_of_order() {
    let a = info_span!("a").entered();
    let b = info_span!("b").entered();
    parse(1);
    drop(a); // b is still entered: it ends here too
    parse(2);
    drop(b); // nothing left to end
    info_span!("c").in_scope(|| parse(3));
}

fn out_of_order_shape() -> Vec<(String, u32)> {
    shape_of(&[
        ("out_of_order", 0),
        ("a", 1),
        ("b", 2),
        ("parse", 3),
        ("parse", 1),
        ("c", 1),
        ("parse", 2),
    ])
}

// ------------------------------------------------------------ helpers

fn shape_of(s: &[(&str, u32)]) -> Vec<(String, u32)> {
    s.iter().map(|(n, d)| (n.to_string(), *d)).collect()
}

/// (name, depth) of the recorded calls of `thread` (all threads: `None`),
/// in pre-order.
fn shape(t: &Trace, thread: Option<u32>) -> Vec<(String, u32)> {
    t.calls()
        .filter(|c| thread.is_none_or(|th| c.thread == th))
        .map(|c| (t.meta().site_name(c.site).to_string(), c.depth))
        .collect()
}

/// Every call of `inner` lies within a call of `outer` one level up.
fn assert_enclosed(t: &Trace, inner: &str, outer: &str) {
    let calls: Vec<_> = t.calls().collect();
    let name = |c: &fgtrace::Call| t.meta().site_name(c.site).to_string();
    let mut seen = 0;
    for c in calls.iter().filter(|c| name(c) == inner) {
        seen += 1;
        let parent = calls
            .iter()
            .filter(|p| p.thread == c.thread && p.depth + 1 == c.depth)
            .filter(|p| p.start_ns <= c.start_ns && c.end_ns() <= p.end_ns())
            .find(|p| name(p) == outer);
        assert!(parent.is_some(), "{inner} {c:?} not inside a {outer}");
    }
    assert!(seen > 0, "no call of {inner}");
}

/// A `fmt` layer's output, kept.
#[derive(Clone, Default)]
struct Out(Arc<Mutex<Vec<u8>>>);

impl Write for Out {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Out {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// A `Registry` with `fmt` (into `out`) and fgtrace's layer.
fn registry_with_fmt(out: &Out) -> Dispatch {
    let out = out.clone();
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(move || out.clone());
    Dispatch::new(
        tracing_subscriber::registry()
            .with(fmt)
            .with(fgtrace::tracing::Layer::new()),
    )
}

fn capture_under<R>(d: &Dispatch, f: impl FnOnce() -> R) -> Capture {
    tracing::dispatcher::with_default(d, || testing::capture(f))
}

// ------------------------------------------------------------ the layer

#[test]
fn layer_spans_nest_with_traced_calls_and_fmt_still_prints() {
    let out = Out::default();
    let d = registry_with_fmt(&out);
    let cap = capture_under(&d, serve);
    assert_eq!(shape(cap.trace(), None), serve_shape(), "{}", cap.graph());
    cap.assert_calls("handle", 2);
    cap.assert_inside("parse", "handle");
    cap.assert_inside("handle", "serve");
    // The span's full path is its target (the module) and its name.
    assert_eq!(cap.calls("tracing::handle"), 2);
    assert_enclosed(cap.trace(), "parse", "handle");
    assert_enclosed(cap.trace(), "handle", "serve");
    assert!(cap.max("handle") >= cap.max("parse"));

    let site = cap
        .trace()
        .meta()
        .sites
        .iter()
        .find(|s| s.name == "handle")
        .unwrap();
    assert_eq!(site.module_path, module_path!());
    assert!(site.file.ends_with("tracing.rs"), "{}", site.file);
    assert!(site.line > 0 && !site.is_async);

    // `fmt` printed both events inside their spans, with the span's fields.
    let text = out.text();
    assert!(text.contains("handle{req=1}"), "{text}");
    assert!(text.contains("handle{req=2}"), "{text}");
    assert_eq!(text.matches("handling").count(), 2, "{text}");
}

#[test]
fn layer_keeps_the_tree_when_spans_exit_out_of_order() {
    let d = Dispatch::new(tracing_subscriber::registry().with(fgtrace::tracing::Layer::new()));
    let cap = capture_under(&d, out_of_order);
    assert_eq!(
        shape(cap.trace(), None),
        out_of_order_shape(),
        "{}",
        cap.graph()
    );
    let calls = cap.trace().calls().collect::<Vec<_>>();
    // `b` ended when `a` did.
    assert!(calls[2].end_ns() <= calls[1].end_ns());
    assert_enclosed(cap.trace(), "b", "a");
}

#[test]
fn recursive_spans_of_one_callsite_nest() {
    let expect = shape_of(&[
        ("recurse", 0),
        ("recurse", 1),
        ("recurse", 2),
        ("recurse", 3),
        ("parse", 4),
    ]);
    let layer = Dispatch::new(tracing_subscriber::registry().with(fgtrace::tracing::Layer::new()));
    let cap = capture_under(&layer, || recurse(3));
    assert_eq!(shape(cap.trace(), None), expect, "{}", cap.graph());
    let sub = Dispatch::new(fgtrace::tracing::Subscriber::new());
    let cap = capture_under(&sub, || recurse(3));
    assert_eq!(shape(cap.trace(), None), expect, "{}", cap.graph());
}

#[test]
fn a_per_layer_filter_narrows_what_the_layer_records() {
    let layer =
        fgtrace::tracing::Layer::new().with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.name() != "noisy"
        }));
    let d = Dispatch::new(tracing_subscriber::registry().with(layer));
    let cap = capture_under(&d, || {
        info_span!("noisy").in_scope(|| info_span!("kept").in_scope(|| parse(1)))
    });
    assert_eq!(
        shape(cap.trace(), None),
        shape_of(&[("kept", 0), ("parse", 1)]),
        "{}",
        cap.graph()
    );
}

// ------------------------------------------------------------ the subscriber

#[test]
fn subscriber_spans_nest_with_traced_calls() {
    let d = Dispatch::new(fgtrace::tracing::Subscriber::new());
    let cap = capture_under(&d, serve);
    assert_eq!(shape(cap.trace(), None), serve_shape(), "{}", cap.graph());
    cap.assert_calls("handle", 2);
    cap.assert_inside("parse", "handle");
    assert_enclosed(cap.trace(), "parse", "handle");
    assert_enclosed(cap.trace(), "handle", "serve");

    let cap = capture_under(&d, out_of_order);
    assert_eq!(
        shape(cap.trace(), None),
        out_of_order_shape(),
        "{}",
        cap.graph()
    );
}

#[test]
fn subscriber_records_only_spans_at_its_level() {
    let d = Dispatch::new(fgtrace::tracing::Subscriber::new().with_max_level(Level::INFO));
    let cap = capture_under(&d, || {
        info_span!("info").in_scope(|| debug_span!("debug").in_scope(|| parse(1)))
    });
    assert_eq!(
        shape(cap.trace(), None),
        shape_of(&[("info", 0), ("parse", 1)]),
        "{}",
        cap.graph()
    );
}

#[test]
fn subscriber_spans_allocate_nothing() {
    let d = Dispatch::new(fgtrace::tracing::Subscriber::new());
    let mut during = u64::MAX;
    let cap = capture_under(&d, || {
        let span = || info_span!("hot").in_scope(|| black_box(parse(1)));
        // The callsite's site, the thread's capture buffer: made once.
        span();
        during = allocations(|| {
            for _ in 0..1000 {
                span();
            }
        });
    });
    assert_eq!(during, 0, "allocations in 1000 spans");
    cap.assert_calls("hot", 1001);
    cap.assert_inside("parse", "hot");
}

// ------------------------------------------------------------ sessions and filters

/// Sessions are process-wide: the tests that start one take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `work` on a thread of its own under `d`, in a session with
/// `config`; the shape of that thread's calls.
fn session_shape(config: Config, d: &Dispatch, work: fn()) -> Vec<(String, u32)> {
    let session = Session::start(config).expect("session");
    let d = d.clone();
    std::thread::Builder::new()
        .name("spans-under-filters".into())
        .spawn(move || tracing::dispatcher::with_default(&d, work))
        .unwrap()
        .join()
        .unwrap();
    let trace = session.stop().expect("stop");
    let t = trace
        .meta()
        .threads
        .iter()
        .position(|t| t.name == "spans-under-filters")
        .map(|i| i as u32);
    match t {
        Some(t) => shape(&trace, Some(t)),
        None => Vec::new(),
    }
}

fn run_serve() {
    black_box(serve());
}

#[test]
fn session_filters_apply_to_spans() {
    let _s = serial();
    let base = || Config::builtin().flight_recorder(1 << 12);
    for d in [
        registry_with_fmt(&Out::default()),
        Dispatch::new(fgtrace::tracing::Subscriber::new()),
    ] {
        assert_eq!(session_shape(base(), &d, run_serve), serve_shape());
        // exclude: the span goes, its callees stay (one level up).
        assert_eq!(
            session_shape(base().exclude(["handle"]), &d, run_serve),
            shape_of(&[("serve", 0), ("parse", 1), ("parse", 1)])
        );
        // filter by name, and by `target::name`.
        let only_spans = shape_of(&[("handle", 0), ("handle", 0)]);
        assert_eq!(
            session_shape(base().filter(["handle"]), &d, run_serve),
            only_spans
        );
        assert_eq!(
            session_shape(
                base().filter([format!("{}::hand*", module_path!())]),
                &d,
                run_serve
            ),
            only_spans
        );
        // notrace hides the span with its subtree.
        assert_eq!(
            session_shape(base().notrace(["handle"]), &d, run_serve),
            shape_of(&[("serve", 0)])
        );
        // graph functions: only inside the span.
        assert_eq!(
            session_shape(base().graph_functions(["handle"]), &d, run_serve),
            shape_of(&[("handle", 0), ("parse", 1), ("handle", 0), ("parse", 1)])
        );
        // the depth limit.
        assert_eq!(
            session_shape(base().max_depth(2), &d, run_serve),
            shape_of(&[("serve", 0), ("handle", 1), ("handle", 1)])
        );
        // the threshold: only the span that lasts.
        assert_eq!(
            session_shape(base().threshold(Duration::from_millis(2)), &d, || {
                info_span!("quick").in_scope(|| parse(1));
                info_span!("slow").in_scope(|| std::thread::sleep(Duration::from_millis(5)));
            }),
            shape_of(&[("slow", 0)])
        );
    }
}

// ------------------------------------------------------------ async

#[instrument]
async fn fetch(n: u32) -> u32 {
    tokio::time::sleep(Duration::from_millis(50)).await;
    parse(n)
}

/// The polls of `fetch` on the capture as plain calls (the standalone
/// subscriber, which keeps no state per span, and the first span of the
/// callsite under the layer): the first one ends at the sleep, the second
/// runs `parse`; dropping the completed future enters the span once more
/// (`tracing` drops the inner future inside its span).
fn check_fetch_calls(v: u32, cap: &Capture) {
    assert_eq!(v, 6);
    let polls = cap.calls_of("fetch");
    assert_eq!(polls.len(), 3, "{}", cap.graph());
    assert!(polls.iter().all(|c| c.depth == 0 && !c.is_poll()));
    check_fetch_polls(cap);
}

/// What the polls of `fetch` hold either way: each is short (the 50 ms
/// asleep are between them, not in them), and `parse` ran in the second.
fn check_fetch_polls(cap: &Capture) {
    let polls = cap.calls_of("fetch");
    assert!(
        polls.iter().all(|c| c.dur_ns < 50_000_000),
        "{}",
        cap.graph()
    );
    assert!(polls[1].start_ns >= polls[0].end_ns() + 45_000_000);
    cap.assert_calls("parse", 1);
    let p = cap.calls_of("parse")[0];
    assert_eq!(p.depth, 1);
    assert!(polls[1].start_ns <= p.start_ns && p.end_ns() <= polls[1].end_ns());
}

/// `fetch` recorded as `#[traced] async fn` is: three polls (the last one
/// its drop), each a call flagged as a poll, and one whole future from the
/// first poll to the span's close, with the span's field as its value.
fn check_fetch_future(v: u32, cap: &Capture) {
    assert_eq!(v, 6);
    let polls = cap.calls_of("fetch");
    assert_eq!(polls.len(), 3, "{}", cap.graph());
    assert!(
        polls.iter().all(|c| c.depth == 0 && c.is_poll()),
        "{polls:?}"
    );
    check_fetch_polls(cap);
    // One future, counted as one call, lasting the sleep.
    cap.assert_calls("fetch", 1);
    let futures: Vec<_> = cap
        .trace()
        .events()
        .filter_map(|e| match e {
            fgtrace::trace::Event::Future(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(futures.len(), 1, "{}", cap.graph());
    let f = futures[0];
    assert_eq!(cap.trace().meta().site_name(f.site), "fetch");
    assert_eq!(f.polls, 3);
    assert!(!f.cancelled);
    assert!(f.start_ns <= polls[0].start_ns && polls[2].end_ns() <= f.start_ns + f.dur_ns);
    assert!(
        cap.max("fetch") >= Duration::from_millis(45),
        "{}",
        cap.graph()
    );
    let v = cap.values("fetch");
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].get("n").map(|x| x.bits), Some(3));
    // Each poll and the future name the same future (the span's id).
    let (mut poll_ids, mut future_ids) = (Vec::new(), Vec::new());
    let mut after = None;
    for e in cap.trace().events() {
        use fgtrace::trace::Event;
        match e {
            Event::Call(c) if c.is_poll() => after = Some(true),
            Event::Future(_) => after = Some(false),
            Event::FutureId(x) => match after.take() {
                Some(true) => poll_ids.push(x.id),
                Some(false) => future_ids.push(x.id),
                None => panic!("an id after neither a poll nor a future"),
            },
            Event::Counters(_) | Event::Values(_) => {}
            _ => after = None,
        }
    }
    assert_eq!(future_ids.len(), 1, "{}", cap.graph());
    assert_eq!(poll_ids, [future_ids[0]; 3], "{}", cap.graph());
    // The future's busy time is its polls' (the layer times each from
    // enter to exit), its polls exact; a span sees no wakes.
    let times: Vec<_> = cap
        .trace()
        .events()
        .filter_map(|e| match e {
            fgtrace::trace::Event::FutureTimes(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(times.len(), 1, "{}", cap.graph());
    let (t, in_polls) = (times[0], polls.iter().map(|p| p.dur_ns).sum::<u64>());
    assert_eq!((t.polls, t.waits), (3, None));
    assert!(
        t.busy_ns <= f.dur_ns && t.busy_ns * 10 >= in_polls * 9,
        "busy {} ns, the polls {in_polls} ns",
        t.busy_ns
    );
}

/// Runs `fetch` once under `d`, recording: the layer learns that the
/// callsite's spans are futures (a span of it entered twice).
fn learn_fetch(d: &Dispatch) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    tracing::dispatcher::with_default(d, || rt.block_on(testing::capture_async(fetch(3))));
}

#[test]
fn instrumented_async_fns_are_futures_on_a_current_thread_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let d = Dispatch::new(tracing_subscriber::registry().with(fgtrace::tracing::Layer::new()));
    learn_fetch(&d);
    let (v, cap) =
        tracing::dispatcher::with_default(&d, || rt.block_on(testing::capture_async(fetch(3))));
    check_fetch_future(v, &cap);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instrumented_async_fns_are_futures_on_a_multi_thread_runtime() {
    let d = Dispatch::new(tracing_subscriber::registry().with(fgtrace::tracing::Layer::new()));
    // The span is made when `fetch` is called, under `d`; entering it
    // goes to the subscriber it was made by, on whichever worker polls.
    // The first run teaches the layer that the callsite's spans are futures.
    let run = || {
        let fut = tracing::dispatcher::with_default(&d, || fetch(3));
        tokio::spawn(testing::capture_async(fut).with_subscriber(d.clone()))
    };
    run().await.unwrap();
    let (v, cap) = run().await.unwrap();
    check_fetch_future(v, &cap);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscribers_async_spans_are_a_call_per_poll() {
    let d = Dispatch::new(fgtrace::tracing::Subscriber::new());
    for _ in 0..2 {
        let fut = tracing::dispatcher::with_default(&d, || fetch(3));
        let (v, cap) = tokio::spawn(testing::capture_async(fut).with_subscriber(d.clone()))
            .await
            .unwrap();
        check_fetch_calls(v, &cap);
    }
}

// ------------------------------------------------------------ span fields as values

/// A span's integer and bool fields are its call's values, named by the
/// field names; a field recorded later (`span.record`) before the exit lands
/// too; a string, float or `Debug` field is not recorded (a value is an
/// integer, a bool or a char, and `tracing` has no char fields).
fn fields_work() {
    let span = info_span!(
        "fields",
        len = 83u64,
        neg = -5i32,
        ok = true,
        big = 1u128 << 70
    );
    span.in_scope(|| parse(1));
    let span = info_span!(
        "later",
        n = tracing::field::Empty,
        s = "text",
        f = tracing::field::Empty
    );
    span.in_scope(|| {
        span.record("n", 7u32);
        parse(2)
    });
}

fn check_fields(cap: &Capture) {
    let v = cap.values("fields");
    assert_eq!(v.len(), 1, "{}", cap.graph());
    let show = |v: &testing::CapturedCall| {
        v.values
            .iter()
            .map(|(n, x)| format!("{n}={x}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    assert_eq!(show(&v[0]), "len=83, neg=-5, ok=true");
    let v = cap.values("later");
    assert_eq!(v.len(), 1, "{}", cap.graph());
    assert_eq!(show(&v[0]), "n=7");
    assert_eq!(
        shape(cap.trace(), None),
        shape_of(&[("fields", 0), ("parse", 1), ("later", 0), ("parse", 1)]),
        "{}",
        cap.graph()
    );
    let text = graph_text(cap.trace());
    assert!(text.contains("fields(len=83, neg=-5, ok=true) {"), "{text}");
    assert!(text.contains("later(n=7) {"), "{text}");
}

/// The trace's function graph, as `fgtrace graph` prints it.
fn graph_text(t: &Trace) -> String {
    use fgtrace::view::{GraphOptions, TraceViews};
    let mut out = Vec::new();
    t.write_graph(&GraphOptions::default(), &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn layer_records_span_fields_as_values() {
    let d = Dispatch::new(tracing_subscriber::registry().with(fgtrace::tracing::Layer::new()));
    let cap = capture_under(&d, fields_work);
    check_fields(&cap);
}

#[test]
fn subscriber_records_span_fields_as_values() {
    let d = Dispatch::new(fgtrace::tracing::Subscriber::new());
    let cap = capture_under(&d, fields_work);
    check_fields(&cap);
}

#[test]
fn subscriber_spans_with_fields_allocate_nothing() {
    let d = Dispatch::new(fgtrace::tracing::Subscriber::new());
    let mut during = u64::MAX;
    let cap = capture_under(&d, || {
        let span = |i: u64| {
            info_span!("hot_fields", i, even = i % 2 == 0).in_scope(|| black_box(parse(1)))
        };
        span(0);
        during = allocations(|| {
            for i in 1..=1000 {
                span(i);
            }
        });
    });
    assert_eq!(during, 0, "allocations in 1000 spans with fields");
    let v = cap.values("hot_fields");
    assert_eq!(v.len(), 1001);
    assert_eq!(
        v[1000].get("i").map(|x| x.to_string()).as_deref(),
        Some("1000")
    );
    assert_eq!(
        v[1000].get("even").map(|x| x.to_string()).as_deref(),
        Some("true")
    );
}

// ------------------------------------------------------------ events as instant markers

/// An event inside a span and one inside a `#[traced]` fn, one with a name
/// and fields.
#[traced]
#[inline(never)]
fn noted(k: u64) -> u64 {
    tracing::info!(name: "cache_miss", key = k, hit = false, text = "no", "missed {k}");
    parse(k as u32) as u64
}

fn events_work() {
    serve();
    noted(7);
    tracing::warn!("outside every call");
}

fn check_markers(cap: &Capture) {
    // `handle`'s `info!("handling")`, once per call, inside it, before `parse`.
    let inside = cap.markers_inside("handle");
    assert_eq!(inside.len(), 2, "{}", cap.graph());
    for m in &inside {
        assert!(
            m.name.starts_with("event ") && m.name.contains("tracing.rs:"),
            "{m:?}"
        );
        assert_eq!(m.inside.as_deref(), Some("handle"));
        assert_eq!(m.depth, 2);
        assert!(m.values.is_empty());
    }
    let handles = cap.calls_of("handle");
    assert!(handles[0].start_ns <= inside[0].at.as_nanos() as u64);
    assert!(inside[0].at.as_nanos() as u64 <= handles[0].end_ns());
    let parses = cap.calls_of("parse");
    assert!(inside[0].at.as_nanos() as u64 <= parses[0].start_ns);
    // The named event: its integer and bool fields (not the string).
    let miss = cap.markers("cache_miss");
    assert_eq!(miss.len(), 1);
    assert_eq!(miss[0].inside.as_deref(), Some("noted"));
    assert_eq!(miss[0].depth, 1);
    let show: Vec<String> = miss[0]
        .values
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    assert_eq!(show, ["key=7", "hit=false"]);
    assert_eq!(miss[0].get("key").map(|v| v.bits), Some(7));
    // At the top level: no call around it.
    let all = cap.all_markers();
    assert_eq!(all.len(), 4, "{all:?}");
    let top: Vec<_> = all.iter().filter(|m| m.depth == 0).collect();
    assert_eq!(top.len(), 1, "{all:?}");
    assert_eq!(top[0].inside, None);
    // Markers are no calls.
    assert_eq!(
        cap.trace().calls().count(),
        1 + 2 * 2 + 2,
        "{}",
        cap.graph()
    );
}

#[test]
fn layer_records_events_as_instant_markers() {
    let d = Dispatch::new(tracing_subscriber::registry().with(fgtrace::tracing::Layer::new()));
    let cap = capture_under(&d, events_work);
    check_markers(&cap);
    check_marker_views(cap.trace());
    // The same after a round trip through the file format.
    let path = std::env::temp_dir().join(format!("fgtrace-markers-{}.fgt", std::process::id()));
    cap.trace().save(&path).unwrap();
    let back = fgtrace::Trace::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert!(back.damage.is_none());
    assert_eq!(
        back.events().collect::<Vec<_>>(),
        cap.trace().events().collect::<Vec<_>>()
    );
    check_marker_views(&back);
}

#[test]
fn subscriber_records_events_as_instant_markers() {
    let d = Dispatch::new(fgtrace::tracing::Subscriber::new());
    let cap = capture_under(&d, events_work);
    check_markers(&cap);
    let d = Dispatch::new(fgtrace::tracing::Subscriber::new().with_events(false));
    let cap = capture_under(&d, events_work);
    assert!(cap.markers("cache_miss").is_empty());
    assert!(cap.markers_inside("handle").is_empty());
}

/// The graph, Chrome and Perfetto exports show the markers (Firefox's: in
/// its own tests, behind its feature).
fn check_marker_views(t: &Trace) {
    use fgtrace::view::HexResolve;
    let text = graph_text(t);
    let lines: Vec<&str> = text.lines().collect();
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no `{needle}` in\n{text}"))
    };
    // In the tree: after `handle() {`, before its `parse();`, one deeper.
    let open = at("handle(req=1) {");
    let ev = at("/* event ");
    assert_eq!(ev, open + 1, "{text}");
    assert!(
        lines[ev].contains(&format!("    /* event {}", file!())),
        "{text}"
    );
    assert!(lines[ev + 1].contains("parse();"), "{text}");
    assert!(
        text.contains("/* cache_miss: key=7, hit=false */"),
        "{text}"
    );

    let events = || t.events().map(Ok);
    let mut chrome = Vec::new();
    fgtrace::view::chrome::write_chrome(
        t.meta(),
        events(),
        HexResolve,
        &Default::default(),
        &mut chrome,
    )
    .unwrap();
    let chrome = String::from_utf8(chrome).unwrap();
    assert_eq!(
        chrome.matches("\"ph\":\"i\",\"s\":\"t\"").count(),
        4,
        "{chrome}"
    );
    assert!(
        chrome.contains("\"cat\":\"event\",\"name\":\"cache_miss\",\"args\":{"),
        "{chrome}"
    );
    assert!(chrome.contains("\"key\":7,\"hit\":false"), "{chrome}");

    let mut pf = Vec::new();
    let stats = fgtrace::view::perfetto::write_perfetto(
        t.meta(),
        events(),
        HexResolve,
        &Default::default(),
        &mut pf,
    )
    .unwrap();
    assert_eq!(stats.markers, 4);
    let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    assert!(has(&pf, b"cache_miss"));
    assert!(has(&pf, b"\x52\x03key"), "no `key` annotation");
}

// ------------------------------------------------------------ a tokio service in a session

#[traced]
#[inline(never)]
fn render_page(n: u64) -> u64 {
    (0..200).fold(n, |h, i| black_box(h.rotate_left(5) ^ i))
}

#[instrument]
async fn lookup(id: u64) -> u64 {
    tokio::time::sleep(Duration::from_millis(1)).await;
    id * 3
}

#[instrument]
async fn serve_request(id: u64) -> u64 {
    let user = lookup(id).await;
    tokio::task::yield_now().await;
    let h = render_page(user);
    tracing::info!(user, "served");
    h
}

/// Several concurrent `#[instrument]` handlers on two workers, in a session:
/// one trace in which the `#[traced]` helper is inside a poll of its handler
/// on the thread that ran it, each handler's span after the first is a
/// future with its polls, the events sit inside the polls, and Perfetto puts
/// every future on a lane with its polls.
#[test]
fn a_tokio_service_in_a_session_nests_spans_futures_and_traced_calls() {
    let _s = serial();
    let d = Dispatch::new(tracing_subscriber::registry().with(fgtrace::tracing::Layer::new()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    const N: u64 = 12;
    let session = Session::start(Config::builtin()).expect("session");
    rt.block_on(async {
        let spawn = |id| {
            let fut = tracing::dispatcher::with_default(&d, || serve_request(id));
            tokio::spawn(fut.with_subscriber(d.clone()))
        };
        spawn(0).await.unwrap();
        let tasks: Vec<_> = (1..N).map(spawn).collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let trace = session.stop().expect("stop");
    let name = |site: u32| trace.meta().site_name(site).to_string();
    let calls: Vec<_> = trace.calls().collect();
    // Every helper call: inside a poll of `serve_request`, one level down,
    // on its thread.
    let renders: Vec<_> = calls
        .iter()
        .filter(|c| name(c.site) == "render_page")
        .collect();
    assert_eq!(renders.len() as u64, N);
    let mut in_polls = 0;
    for r in &renders {
        let parent = calls
            .iter()
            .find(|p| {
                p.thread == r.thread
                    && p.depth + 1 == r.depth
                    && p.start_ns <= r.start_ns
                    && r.end_ns() <= p.end_ns()
            })
            .unwrap_or_else(|| panic!("{r:?} has no parent"));
        assert_eq!(name(parent.site), "serve_request");
        in_polls += parent.is_poll() as u64;
    }
    // The first request taught the layer; the others are futures.
    assert_eq!(in_polls, N - 1);
    let futures: Vec<_> = trace
        .events()
        .filter_map(|e| match e {
            fgtrace::trace::Event::Future(f) => Some(f),
            _ => None,
        })
        .collect();
    let of = |n: &str| futures.iter().filter(|f| name(f.site) == n).count() as u64;
    assert_eq!(of("serve_request"), N - 1);
    assert_eq!(of("lookup"), N - 1);
    for f in futures.iter().filter(|f| name(f.site) == "serve_request") {
        // Three polls (at `lookup`'s sleep, at the yield, the rest) and the drop.
        assert_eq!(f.polls, 4, "{f:?}");
        assert!(f.dur_ns >= 1_000_000);
    }
    // The events: inside a poll of their handler, with their field.
    let markers: Vec<_> = trace
        .events()
        .filter_map(|e| match e {
            fgtrace::trace::Event::Marker(m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(markers.len() as u64, N);
    assert!(markers.iter().all(|m| m.depth == 1));
    // Perfetto: a lane per future, every poll of a handler on its lane.
    let mut pf = Vec::new();
    let stats = fgtrace::view::perfetto::write_perfetto(
        trace.meta(),
        trace.events().map(Ok),
        fgtrace::view::HexResolve,
        &Default::default(),
        &mut pf,
    )
    .unwrap();
    assert_eq!(stats.futures, 2 * (N - 1));
    assert_eq!(stats.markers, N);
    assert!(stats.lane_polls >= 4 * (N - 1), "{stats:?}");
}
