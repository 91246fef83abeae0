//! What a traced future measures of itself on tokio, and its wakes: exact
//! polls per future (past the record's saturating count too), busy time in
//! polls, and scheduled time, from a wake to the poll after it, which is
//! where a future waits while its worker runs something else.

use fgtrace::trace::{Event, FutureTimes};
use fgtrace::view::chrome::{write_chrome, ChromeOptions};
use fgtrace::view::perfetto::{write_perfetto, PerfettoOptions};
use fgtrace::view::report::ReportOptions;
use fgtrace::view::{ok_events, HexResolve, TraceViews};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Sessions are process-wide: the tests here take turns recording.
fn one_session() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Yields to the executor `n` times: `n + 1` polls, `n` wakes.
#[fgtrace::traced]
async fn yields(n: u32) -> u32 {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
    n
}

/// The whole futures of `site` with what they measured, in the order they
/// ended.
fn futures_of(trace: &fgtrace::Trace, name: &str) -> Vec<FutureTimes> {
    let meta = trace.meta();
    let mut last_was = false;
    let mut out = Vec::new();
    for e in trace.events() {
        match e {
            Event::Future(f) => last_was = meta.site_name(f.site) == name,
            Event::FutureTimes(t) if last_was => out.push(t),
            _ => {}
        }
    }
    out
}

#[test]
fn each_future_counts_its_polls_and_wakes_exactly() {
    let _one = one_session();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // 2,000 yields: past the 1,023 polls a whole future's record can say.
    let counts = [0u32, 1, 2, 3, 7, 2000];
    let session = fgtrace::Session::start(fgtrace::Config::builtin()).unwrap();
    rt.block_on(async {
        let hs: Vec<_> = counts.iter().map(|&n| tokio::spawn(yields(n))).collect();
        for h in hs {
            h.await.unwrap();
        }
    });
    let trace = session.stop().unwrap();
    let mut got: Vec<(u64, u64)> = futures_of(&trace, "yields")
        .iter()
        .map(|t| (t.polls, t.waits.expect("a host watches wakes").wakes))
        .collect();
    got.sort();
    let want: Vec<(u64, u64)> = counts.iter().map(|&n| (n as u64 + 1, n as u64)).collect();
    assert_eq!(got, want, "(polls, wakes) per future");

    let report = trace.report(&ReportOptions::default());
    let f = report.futures.iter().find(|f| f.name == "yields").unwrap();
    assert_eq!(f.futures, counts.len() as u64);
    let polls: u64 = counts.iter().map(|&n| n as u64 + 1).sum();
    assert_eq!(f.polls, polls, "the report's polls are exact");
    assert_eq!(f.wakes, Some(polls - counts.len() as u64));
    let busy = f.busy.as_ref().unwrap();
    assert_eq!(busy.futures, counts.len() as u64);
    assert!(
        busy.total_ns <= f.total_ns,
        "busy within the futures' lengths"
    );
    // Every wake of these futures was recorded where it happened.
    let meta = trace.meta();
    let wakes = trace
        .events()
        .filter(|e| matches!(e, Event::Wake(w) if meta.site_name(w.site) == "yields"))
        .count() as u64;
    assert_eq!(wakes, polls - counts.len() as u64);
}

/// A one-shot signal: pending until `fire`, which wakes the waiter.
#[derive(Clone, Default)]
struct Signal(Arc<Mutex<(bool, Option<Waker>)>>);

impl Signal {
    fn fire(&self) {
        let mut s = self.0.lock().unwrap();
        s.0 = true;
        if let Some(w) = s.1.take() {
            w.wake();
        }
    }
}

impl Future for Signal {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.0.lock().unwrap();
        if s.0 {
            Poll::Ready(())
        } else {
            s.1 = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

#[fgtrace::traced]
async fn waiter(signal: Signal) {
    signal.await;
}

/// Wakes the waiter, then holds the one worker thread for `hold`.
#[fgtrace::traced]
async fn hog(signal: Signal, hold: Duration) {
    signal.fire();
    std::thread::sleep(hold);
}

#[test]
fn a_future_woken_while_its_worker_is_busy_shows_the_wait_as_scheduled_time() {
    let _one = one_session();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let hold = Duration::from_millis(30);
    let path = std::env::temp_dir().join(format!("fgtrace-wakes-{}.fgt", std::process::id()));
    let session = fgtrace::Session::start(fgtrace::Config::builtin().output(&path)).unwrap();
    rt.block_on(async {
        let signal = Signal::default();
        let w = tokio::spawn(waiter(signal.clone()));
        // The waiter's first poll (pending) before the hog runs.
        tokio::task::yield_now().await;
        tokio::spawn(hog(signal, hold)).await.unwrap();
        w.await.unwrap();
    });
    let trace = session.stop().unwrap();
    let back = fgtrace::Trace::load(&path).unwrap();
    let mut bytes = Vec::new();
    trace.write_to(&mut bytes).unwrap();
    let saved = fgtrace::Trace::read_from(&bytes[..]).unwrap();
    assert_eq!(
        saved.events().collect::<Vec<_>>(),
        trace.events().collect::<Vec<_>>()
    );
    // The same in memory, in the file written while recording and saved.
    for t in [&trace, &back, &saved] {
        let report = t.report(&ReportOptions::default());
        let row = |name: &str| report.futures.iter().find(|f| f.name == name).unwrap();
        let (w, h) = (row("waiter"), row("hog"));
        assert_eq!((w.polls, w.wakes), (2, Some(1)));
        let scheduled = w.scheduled.as_ref().unwrap();
        assert!(
            scheduled.max_ns >= hold.as_nanos() as u64,
            "the waiter waited the hog's {hold:?} to be polled: {} ns",
            scheduled.max_ns
        );
        assert!(
            w.busy.as_ref().unwrap().max_ns < hold.as_nanos() as u64 / 2,
            "the waiter's polls are short"
        );
        assert!(h.busy.as_ref().unwrap().max_ns >= hold.as_nanos() as u64);
        assert_eq!(h.scheduled.as_ref().unwrap().max_ns, 0, "never woken");
        // The wake happened inside the hog's poll, on its thread: it sits
        // among the hog's calls, one deeper than its poll.
        let meta = t.meta();
        let mut hog_poll = None;
        let mut wakes = Vec::new();
        for e in t.events() {
            match e {
                Event::Call(c) if c.is_poll() && meta.site_name(c.site) == "hog" => {
                    hog_poll = Some(c)
                }
                Event::Wake(x) => wakes.push(x),
                _ => {}
            }
        }
        let p = hog_poll.unwrap();
        assert_eq!(wakes.len(), 1, "{wakes:?}");
        let x = wakes[0];
        assert_eq!(meta.site_name(x.site), "waiter");
        assert_eq!((x.thread, x.depth), (p.thread, p.depth + 1));
        assert!(x.ts_ns >= p.start_ns && x.ts_ns <= p.start_ns + p.dur_ns);
    }
    // The exports show the wake on the hog's thread.
    let meta = trace.meta();
    let mut json = Vec::new();
    let chrome = write_chrome(
        meta,
        ok_events(trace.events()),
        HexResolve,
        &ChromeOptions::default(),
        &mut json,
    )
    .unwrap();
    assert_eq!(chrome.wakes, 1);
    let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let wakes: Vec<&serde_json::Value> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "wake")
        .collect();
    assert_eq!(wakes.len(), 1);
    assert_eq!(wakes[0]["name"], "wake: waiter");
    assert_eq!(wakes[0]["ph"], "i");
    let mut proto = Vec::new();
    let perfetto = write_perfetto(
        meta,
        ok_events(trace.events()),
        HexResolve,
        &PerfettoOptions::default(),
        &mut proto,
    )
    .unwrap();
    assert_eq!(perfetto.wakes, 1);
    let mut profile = Vec::new();
    let opts = fgtrace::view::firefox::FirefoxOptions {
        gzip: false,
        ..Default::default()
    };
    let firefox = fgtrace::view::firefox::write_firefox(
        meta,
        ok_events(trace.events()),
        HexResolve,
        &opts,
        &mut profile,
    )
    .unwrap();
    assert_eq!(firefox.wakes, 1);
    let profile = String::from_utf8(profile).unwrap();
    assert!(
        profile.contains("\"wake: waiter\""),
        "the wake's marker is named"
    );
    // The HTML page's async table has the waiter's scheduled time.
    let mut html = Vec::new();
    trace
        .write_html(
            HexResolve,
            &fgtrace::view::html::HtmlOptions::default(),
            &mut html,
        )
        .unwrap();
    let html = String::from_utf8(html).unwrap();
    let row = html
        .lines()
        .find(|l| l.starts_with("<tr><td class=\"name\">waiter</td>"))
        .expect("a row for waiter");
    let w = trace
        .report(&ReportOptions::default())
        .futures
        .into_iter()
        .find(|f| f.name == "waiter")
        .unwrap();
    let sched = w.scheduled.unwrap().p99_ns;
    assert!(sched >= hold.as_nanos() as u64);
    assert!(row.contains(&format!("<td data-v=\"{sched}\">")), "{row}");
    drop((trace, back, saved));
    std::fs::remove_file(&path).ok();
}

/// The waiter and the hog on one thread, captured.
fn capture_hog(hold: Duration) -> fgtrace::testing::Capture {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    fgtrace::testing::capture(|| {
        rt.block_on(async {
            let signal = Signal::default();
            let w = tokio::spawn(waiter(signal.clone()));
            tokio::task::yield_now().await;
            tokio::spawn(hog(signal, hold)).await.unwrap();
            w.await.unwrap();
        })
    })
}

#[test]
fn assert_scheduled_below_names_the_wait_and_what_held_the_worker() {
    let _one = one_session();
    let cap = capture_hog(Duration::from_millis(30));
    let waited = cap.max_scheduled("waiter").unwrap();
    assert!(waited >= Duration::from_millis(30), "{waited:?}");
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cap.assert_scheduled_below("waiter", Duration::from_millis(10))
    }))
    .expect_err("30 ms scheduled is over 10 ms");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("a future of `waiter` waited"), "{msg}");
    assert!(msg.contains("over its budget of 10 ms"), "{msg}");
    assert!(msg.contains("which ran meanwhile:\n  hog "), "{msg}");
    // The graph of what held the thread: the hog's poll.
    assert!(msg.contains("} /* hog"), "{msg}");
    // Without the hold, the waiter is polled as soon as it is woken.
    let cap = capture_hog(Duration::ZERO);
    assert!(cap.max_scheduled("waiter").unwrap() < Duration::from_millis(10));
    cap.assert_scheduled_below("waiter", Duration::from_millis(10));
    // A name with no measured future fails rather than passing.
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cap.assert_scheduled_below("no_such_fn", Duration::from_secs(1))
    }))
    .expect_err("nothing measured");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("no future of `no_such_fn`"), "{msg}");
}

#[test]
fn futures_pending_at_the_end_are_reported_the_stalled_ones_first() {
    let _one = one_session();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let session = fgtrace::Session::start(fgtrace::Config::builtin()).unwrap();
    let (woken, never) = (Signal::default(), Signal::default());
    rt.block_on(async {
        tokio::spawn(waiter(woken.clone()));
        tokio::spawn(waiter(never.clone()));
        tokio::spawn(yields(2)).await.unwrap();
        // Both waiters were polled once and wait; one is woken now, and
        // the runtime is not driven again while recording.
        woken.fire();
    });
    let trace = session.stop().unwrap();
    drop(rt);
    let report = trace.report(&ReportOptions::default());
    let p = &report.pending;
    assert_eq!((p.futures, p.stalled), (2, 1), "{p:?}");
    assert!(p.listed.iter().all(|f| f.name == "waiter"), "{p:?}");
    let (stalled, waiting) = (&p.listed[0], &p.listed[1]);
    assert!(stalled.woken_ns.unwrap() > stalled.last_poll_ns);
    assert_eq!(waiting.woken_ns, None);
    assert_ne!(stalled.id, waiting.id);
    let mut text = Vec::new();
    trace
        .write_report(&ReportOptions::default(), &mut text)
        .unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains("# async futures pending at the end: 2, 1 stalled"),
        "{text}"
    );
    assert!(text.contains("not polled since (stalled)"), "{text}");
}
