//! Polls that block: a tokio task whose `#[traced] async fn` sleeps 20 ms
//! inside one poll (`std::thread::sleep`, the commonest async performance
//! bug) is flagged as a long poll, with its future, the worker thread it
//! held and the calls inside it, by `report` (table and JSON), by `graph`,
//! and by `Capture::assert_no_long_polls`; the same program without the
//! sleep is not.

use fgtrace::testing;
use fgtrace::trace::{Event, Trace};
use fgtrace::view::{GraphOptions, ReportOptions, ReportStyle, TraceViews};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const SLEEP: Duration = Duration::from_millis(20);
const LIMIT: Duration = Duration::from_millis(10);

/// One test at a time: a session records every thread of the process, so
/// another test's sleeping poll would be in its trace.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The OS thread that slept, as the trace names threads.
static SLEPT_ON: AtomicU32 = AtomicU32::new(0);

fn tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The blocking call: it holds the worker thread.
#[fgtrace::traced]
fn block_here(d: Duration) {
    std::thread::sleep(d);
}

#[fgtrace::traced]
fn step(k: u64) -> u64 {
    std::hint::black_box(k)
}

/// Three polls; with `sleep`, the second one blocks.
#[fgtrace::traced(values(k))]
async fn serve(k: u64, sleep: bool) -> u64 {
    let mut sum = step(k);
    tokio::task::yield_now().await;
    if sleep {
        SLEPT_ON.store(tid(), Ordering::Relaxed);
        block_here(SLEEP);
    }
    sum += step(k);
    tokio::task::yield_now().await;
    sum + step(k)
}

/// Four tasks on a two-worker runtime, task 1 sleeping if `sleep`.
fn record(sleep: bool) -> Trace {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let session = fgtrace::Session::start(fgtrace::Config::builtin()).unwrap();
    let sums = rt.block_on(async {
        let hs: Vec<_> = (0..4)
            .map(|k| tokio::spawn(serve(k, sleep && k == 1)))
            .collect();
        let mut sums = Vec::new();
        for h in hs {
            sums.push(h.await.unwrap());
        }
        sums
    });
    let trace = session.stop().unwrap();
    drop(rt);
    assert_eq!(sums, [0, 3, 6, 9]);
    trace
}

/// The id of `serve(k)`'s future: the `FutureId` after its whole-future
/// record, whose value is `k`.
fn future_id_of_task(trace: &Trace, k: u64) -> u64 {
    let serve = trace
        .meta()
        .sites
        .iter()
        .position(|s| s.name == "serve")
        .unwrap() as u32;
    let (mut in_future, mut is_k) = (false, false);
    for e in trace.events() {
        match e {
            Event::Future(f) => (in_future, is_k) = (f.site == serve, false),
            Event::Values(v) if in_future => is_k = v.values[0].bits == k,
            Event::FutureId(x) if in_future && is_k => return x.id,
            Event::FutureId(_) => in_future = false,
            _ => in_future = false,
        }
    }
    panic!("no future of serve({k}) with an id");
}

#[test]
fn a_poll_that_sleeps_is_a_long_poll_in_report_and_graph() {
    let _one = serial();
    let trace = record(true);
    let meta = trace.meta();
    let slept_on = SLEPT_ON.load(Ordering::Relaxed);
    let report = trace.report(&ReportOptions::default());
    assert_eq!(report.long_poll_ns, Some(LIMIT.as_nanos() as u64));
    assert_eq!(report.long_polls_total, 1, "{:#?}", report.long_polls);
    let p = &report.long_polls[0];
    assert_eq!(p.name, "serve");
    assert!(p.dur_ns >= SLEEP.as_nanos() as u64, "{p:?}");
    // The worker that slept, and the sleeping task's own future.
    assert_eq!(meta.threads[p.thread as usize].tid, slept_on, "{p:?}");
    assert!(p.thread_label.starts_with("tokio-"), "a worker: {p:?}");
    let id = future_id_of_task(&trace, 1);
    assert_eq!(p.future_id, Some(id), "{p:?}");
    // Inside it: the blocking call first (most time of its own), then `step`.
    let callees: Vec<(&str, u64)> = p
        .callees
        .iter()
        .map(|c| (c.name.as_str(), c.calls))
        .collect();
    assert_eq!(callees, [("block_here", 1), ("step", 1)], "{p:?}");
    assert!(p.callees[0].self_ns >= SLEEP.as_nanos() as u64, "{p:?}");

    // The table.
    let mut out = Vec::new();
    trace
        .write_report(&ReportOptions::default(), &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let head = "# long polls: 1 poll longer than 10 ms held its thread";
    assert!(text.contains(head), "{text}");
    let line = format!(" serve (future {id:#x}) on {} at ", p.thread_label);
    assert!(text.contains(&line), "{line:?} in\n{text}");
    assert!(text.contains("  block_here  1 call, 20."), "{text}");

    // The JSON.
    let mut out = Vec::new();
    report.write(ReportStyle::Json, &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["long_polls_total"], 1, "{v}");
    let j = &v["long_polls"][0];
    assert_eq!(j["future_id"], id, "{j}");
    assert_eq!(j["thread_label"], p.thread_label.as_str(), "{j}");
    assert!(j["dur_ns"].as_u64().unwrap() >= SLEEP.as_nanos() as u64);
    assert_eq!(j["callees"][0]["name"], "block_here", "{j}");

    // The graph tags that poll, on the worker's lines, around its calls.
    let mut out = Vec::new();
    trace
        .write_graph(&GraphOptions::default(), &mut out)
        .unwrap();
    let graph = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = graph.lines().collect();
    let tagged: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("[long poll]"))
        .collect();
    assert_eq!(
        tagged.len(),
        2,
        "the poll's line and its exit line:\n{graph}"
    );
    let (open, close) = (lines[tagged[0]], lines[tagged[1]]);
    assert!(
        open.trim_start().starts_with(&format!("{slept_on}) ")) && open.contains("serve() {"),
        "{open}"
    );
    assert!(close.ends_with("} /* serve [long poll] */"), "{close}");
    let inside = &lines[tagged[0] + 1..tagged[1]];
    assert!(
        inside.iter().any(|l| l.contains("block_here();")),
        "{inside:#?}"
    );
    // Off: no tag.
    let off = GraphOptions {
        long_poll_ns: None,
        ..GraphOptions::default()
    };
    let mut out = Vec::new();
    trace.write_graph(&off, &mut out).unwrap();
    assert!(!String::from_utf8(out).unwrap().contains("[long poll]"));

    // The same program without the sleep has none.
    let quiet = record(false);
    let report = quiet.report(&ReportOptions::default());
    assert_eq!(report.long_polls_total, 0, "{:#?}", report.long_polls);
    assert!(report
        .futures
        .iter()
        .any(|f| f.name == "serve" && f.polls == 12));
}

#[fgtrace::traced]
fn stall(d: Duration) {
    std::thread::sleep(d);
}

#[fgtrace::traced]
async fn handle_request(k: u64, sleep: bool) -> u64 {
    tokio::task::yield_now().await;
    if sleep {
        stall(SLEEP);
    }
    tokio::task::yield_now().await;
    k
}

/// A tokio program in a capture: three tasks on a current-thread runtime
/// (the capture's thread), task 1 sleeping in a poll if `sleep`.
fn captured(sleep: bool) -> testing::Capture {
    testing::capture(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let hs: Vec<_> = (0..3)
                .map(|k| tokio::spawn(handle_request(k, sleep && k == 1)))
                .collect();
            for h in hs {
                h.await.unwrap();
            }
        })
    })
}

#[test]
fn assert_no_long_polls_fails_on_the_poll_that_sleeps() {
    let _one = serial();
    let cap = captured(true);
    let err = catch_unwind(AssertUnwindSafe(|| cap.assert_no_long_polls(LIMIT)))
        .expect_err("a 20 ms poll is over 10 ms");
    let msg = err.downcast_ref::<String>().unwrap();
    let thread = cap.trace().meta().thread_label(0);
    let head = "fgtrace: a poll of `handle_request` (future 0x";
    assert!(msg.starts_with(head), "{msg}");
    assert!(
        msg.contains(&format!(") held thread {thread} for ")),
        "{msg}"
    );
    assert!(
        msg.contains("over the long-poll limit of 10 ms (1 of 9 polls over)"),
        "{msg}"
    );
    // Its duration, at least the sleep.
    let poll = cap
        .calls_of("handle_request")
        .into_iter()
        .max_by_key(|c| c.dur_ns)
        .unwrap();
    assert!(poll.dur_ns >= SLEEP.as_nanos() as u64);
    let dur = fgtrace::view::human::human_duration(poll.dur_ns).to_string();
    assert!(msg.contains(&format!(" for {dur}, over")), "{dur} in {msg}");
    // The graph of that poll: the blocking call inside it.
    assert!(msg.contains("handle_request() {"), "{msg}");
    assert!(msg.contains("stall();"), "{msg}");
    assert!(msg.contains("} /* handle_request [long poll] */"), "{msg}");
    // A higher limit holds.
    cap.assert_no_long_polls(Duration::from_secs(5));
}

#[test]
fn assert_no_long_polls_passes_without_the_sleep() {
    let _one = serial();
    let cap = captured(false);
    assert_eq!(cap.polls("handle_request"), 9);
    cap.assert_no_long_polls(LIMIT);
}

#[test]
fn assert_no_long_polls_fails_when_nothing_was_polled() {
    let _one = serial();
    let cap = testing::capture(|| step(1));
    let err = catch_unwind(AssertUnwindSafe(|| cap.assert_no_long_polls(LIMIT))).unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains("no poll was captured"), "{msg}");
}
