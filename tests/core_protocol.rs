//! The recording core's protocol under the conditions a review found it
//! broken in: huge flight recorders, calls still open at stop, concurrent
//! captures, idle threads after stop, async graph functions and filtered
//! futures. Each test reproduced its defect before the fix.

use fgtrace::trace::{Call, Event, Trace};
use fgtrace::{testing, traced, Config, Session};
use std::hint::black_box;
use std::sync::{mpsc, Barrier, Mutex};

/// Sessions are process-wide: tests in this binary take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn calls_named<'a>(trace: &'a Trace, name: &'a str) -> impl Iterator<Item = Call> + 'a {
    trace
        .calls()
        .filter(move |c| trace.meta().site_name(c.site) == name)
}

// ------------------------------------------------ 2: flight recorder sizes

#[test]
fn a_flight_recorder_too_large_to_allocate_is_a_config_error() {
    let _s = serial();
    for n in [
        usize::MAX,
        (1usize << 63) + 1,
        fgtrace::config::MAX_FLIGHT_CALLS + 1,
    ] {
        match Session::start(Config::builtin().flight_recorder(n)) {
            Err(fgtrace::Error::Config(e)) => assert!(e.contains("at most"), "{e}"),
            Err(e) => panic!("flight_recorder({n}): {e}"),
            Ok(_) => panic!("flight_recorder({n}) started"),
        }
    }
    // The largest allowed size is accepted by the configuration (not started:
    // 16 GiB a thread), and a session still starts afterwards.
    let s = Session::start(Config::builtin().flight_recorder(1000)).unwrap();
    leaf(1);
    let t = s.stop().unwrap();
    assert_eq!(calls_named(&t, "leaf").count(), 1);
}

#[test]
fn fgtrace_mode_with_a_huge_flight_size_is_a_config_error() {
    let _s = serial();
    let mut c = Config::builtin();
    c.apply_env(|k| (k == "FGTRACE_MODE").then(|| "flight:9223372036854775809".to_string()));
    match Session::start(c) {
        Err(fgtrace::Error::Config(e)) => assert!(e.contains("FGTRACE_MODE"), "{e}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("started"),
    }
}

// ------------------------------------------- 3: calls still open at stop

#[traced]
fn leaf(x: u64) -> u64 {
    black_box(x + 1)
}

#[traced]
fn deep(n: u32, park: &Barrier, go: &Barrier) -> u64 {
    if n == 0 {
        park.wait();
        go.wait();
        return 1;
    }
    black_box(deep(n - 1, park, go)) + 1
}

/// A thread 60 records short of a full batch, parked 100 calls deep, is
/// released while `stop` runs (0 to 11 ms into it, with wall sampling on, so
/// some rounds land while the sampler stops, after the collector's batches
/// were drained): its 100 exits fill the batch mid-stop. Every call that
/// completed before `stop` must be in the trace.
#[test]
fn calls_completed_before_stop_are_kept_when_open_calls_fill_a_batch_during_stop() {
    let _s = serial();
    const BATCH: usize = 256;
    const BEFORE: usize = BATCH - 60;
    for round in 0..12u64 {
        let session = Session::start(
            Config::builtin()
                .batch_calls(BATCH)
                .sampling(fgtrace::sampler::Sampling::wall(1000)),
        )
        .unwrap();
        let park = Barrier::new(2);
        let go = Barrier::new(2);
        let trace = std::thread::scope(|s| {
            let h = s.spawn(|| {
                for i in 0..BEFORE as u64 {
                    leaf(i);
                }
                deep(100, &park, &go);
            });
            park.wait();
            let stopper = s.spawn(|| session.stop().unwrap());
            std::thread::sleep(std::time::Duration::from_millis(round));
            go.wait();
            h.join().unwrap();
            stopper.join().unwrap()
        });
        let kept = calls_named(&trace, "leaf").count();
        let lost: u64 = trace.meta().threads.iter().map(|t| t.lost).sum();
        assert_eq!(
            kept, BEFORE,
            "round {round}: {kept} of {BEFORE} leaf calls kept, {lost} counted lost"
        );
    }
}

// ------------------------------------------------ 4: concurrent captures

#[traced]
fn work(x: u64) -> u64 {
    black_box(x * 3)
}

/// Captures on 4 threads at once: none may see its recording switched off by
/// another one ending.
#[test]
fn concurrent_captures_never_switch_each_other_off() {
    let _s = serial();
    const PER_THREAD: usize = 20_000;
    let missed: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                s.spawn(move || {
                    (0..PER_THREAD)
                        .filter(|&i| {
                            let cap = testing::capture(|| work((t * PER_THREAD + i) as u64));
                            cap.calls("work") != 1
                        })
                        .count()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(
        missed,
        0,
        "{missed} of {} captures missed their call",
        4 * PER_THREAD
    );
}

/// A session paused and resumed while captures run keeps them recording.
#[test]
fn pausing_a_session_does_not_switch_running_captures_off() {
    let _s = serial();
    let session = Session::start(Config::builtin()).unwrap();
    let cap = testing::capture(|| {
        session.pause();
        work(1);
        session.resume();
        work(2);
    });
    assert_eq!(cap.calls("work"), 2);
    let trace = session.stop().unwrap();
    assert_eq!(
        calls_named(&trace, "work").count(),
        0,
        "captured calls stay in the capture"
    );
}

// --------------------------------- 5: flight recorder written during stop

#[traced]
fn spin(n: u32) -> u64 {
    if n == 0 {
        return leaf(7);
    }
    black_box(spin(n - 1)) + 1
}

/// Threads keep calling while a flight-recorder session stops: every kept
/// call is whole (a known site, a sane duration, nested inside its parent).
#[test]
fn a_flight_recorder_stopped_under_writers_keeps_only_whole_records() {
    let _s = serial();
    for _ in 0..20 {
        let session = Session::start(Config::builtin().flight_recorder(64)).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let trace = std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        spin(20);
                    }
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            let t = session.stop().unwrap();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            t
        });
        let meta = trace.meta();
        for th in 0..meta.threads.len() as u32 {
            let calls: Vec<Call> = trace.calls().filter(|c| c.thread == th).collect();
            assert!(calls.len() <= 64, "{} calls kept of 64", calls.len());
            let mut open: Vec<Call> = Vec::new();
            for c in calls {
                let name = meta.site_name(c.site);
                assert!(["spin", "leaf"].contains(&name), "torn site: {c:?}");
                assert!(c.dur_ns < 5_000_000_000, "torn duration: {c:?}");
                assert!(
                    c.end_ns() <= meta.duration_ns + 1_000_000,
                    "torn time: {c:?}"
                );
                // A parent may be missing (overwritten, or still open at
                // stop); one that is there encloses its child.
                while open.last().is_some_and(|p| p.depth >= c.depth) {
                    open.pop();
                }
                if let Some(p) = open.last() {
                    if c.start_ns >= p.start_ns && c.start_ns < p.end_ns() {
                        assert!(c.end_ns() <= p.end_ns(), "{c:?} overlaps {p:?}");
                    }
                }
                open.push(c);
            }
        }
    }
}

// ------------------------------------------------- 6: idle threads at stop

/// A thread that recorded and then idles does not keep the stopped session
/// (every thread's buffers, the recycle pool) alive; its shadow stack goes
/// when it exits.
#[test]
fn an_idle_thread_does_not_keep_a_stopped_session_alive() {
    let _s = serial();
    let sessions_before = fgtrace::__private::live_counts().0;
    let session = Session::start(Config::builtin()).unwrap();
    let (tx, rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        leaf(1);
        ready_tx.send(()).unwrap();
        rx.recv().unwrap(); // idle
    });
    ready_rx.recv().unwrap();
    assert_eq!(fgtrace::__private::live_counts().0, sessions_before + 1);
    let trace = session.stop().unwrap();
    assert_eq!(calls_named(&trace, "leaf").count(), 1);
    drop(trace);
    assert_eq!(
        fgtrace::__private::live_counts().0,
        sessions_before,
        "the idle thread keeps the session alive"
    );
    // (Threads of earlier tests may still be exiting: only a drop counts.)
    let stacks_idle = fgtrace::__private::live_counts().1;
    assert!(
        stacks_idle >= 1,
        "the idle thread still has its shadow stack"
    );
    tx.send(()).unwrap();
    h.join().unwrap();
    assert!(
        fgtrace::__private::live_counts().1 < stacks_idle,
        "an exited thread's shadow stack is freed"
    );
}

// ----------------------------------------------------- 9: async and filters

#[traced]
async fn handle(x: u64) -> u64 {
    tokio::task::yield_now().await;
    leaf(x)
}

#[traced]
async fn background(x: u64) -> u64 {
    tokio::task::yield_now().await;
    x
}

fn run_async<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// A graph-function async fn keeps the poll kind of its polls.
#[test]
fn a_graph_root_async_fn_is_recorded_as_polls() {
    let _s = serial();
    let session = Session::start(Config::builtin().graph_functions(["handle"])).unwrap();
    run_async(handle(3));
    let trace = session.stop().unwrap();
    let polls: Vec<Call> = calls_named(&trace, "handle").collect();
    assert_eq!(polls.len(), 2, "{polls:?}");
    assert!(polls.iter().all(|c| c.is_poll()), "{polls:?}");
    assert_eq!(
        calls_named(&trace, "leaf").count(),
        1,
        "recorded below the graph root"
    );
}

/// The record of a whole future obeys notrace, exclude and graph_function,
/// as its polls do.
#[test]
fn whole_future_records_obey_the_filters() {
    let _s = serial();
    let futures = |t: &Trace, name: &str| {
        t.events()
            .filter(|e| matches!(e, Event::Future(f) if t.meta().site_name(f.site) == name))
            .count()
    };
    for (config, kept) in [
        (Config::builtin(), true),
        (Config::builtin().notrace(["background"]), false),
        (Config::builtin().exclude(["background"]), false),
        (Config::builtin().graph_functions(["handle"]), false),
    ] {
        let session = Session::start(config).unwrap();
        run_async(background(1));
        let trace = session.stop().unwrap();
        assert_eq!(futures(&trace, "background") == 1, kept);
        assert_eq!(calls_named(&trace, "background").count() > 0, kept);
    }
}
