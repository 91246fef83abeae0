//! Off-CPU time in `fgtrace::testing` captures: queries,
//! `assert_no_blocking`, the `#[budget]` limits, async captures.
//!
//! Truth is measured beside each call: the thread's CPU time across the call
//! is its on-CPU time, wall minus CPU its off-CPU time, so the tolerances
//! cover clock disagreement, not the load of the machine.

#[path = "support/cpu.rs"]
mod cpu;
#[path = "support/tools.rs"]
mod tools;

use cpu::{compute, join_session, measured};
use fgtrace::testing::{budget, Capture, CounterCheck, Options};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[fgtrace::traced]
fn compute_then_sleep() -> u64 {
    let x = compute(Duration::from_millis(10));
    std::thread::sleep(Duration::from_millis(10));
    x
}

#[fgtrace::traced]
fn compute_only() -> u64 {
    compute(Duration::from_millis(10))
}

fn close(got: Duration, want_ns: u64, rel: f64, abs_ns: u64) -> bool {
    cpu::close(got.as_nanos() as u64, want_ns, rel, abs_ns)
}

/// `Some(cap)` where off-CPU time was recorded; else a visible skip (a
/// failure under `FGTRACE_REQUIRE_TOOLS=1`).
fn recorded(cap: Capture, test: &str) -> Option<Capture> {
    match cap.off_cpu_unavailable() {
        None => Some(cap),
        Some(why) => tools::missing(test, &format!("off-CPU unavailable: {why}")),
    }
}

#[test]
fn capture_splits_compute_and_sleep() {
    let mut truth = cpu::Truth::default();
    let cap = Options::new().off_cpu(true).capture(|| {
        join_session();
        truth = measured(compute_then_sleep).1
    });
    let Some(cap) = recorded(cap, "capture_splits_compute_and_sleep") else {
        return;
    };
    let (wall, cpu) = (truth.wall, truth.cpu);
    let (on, off) = (
        cap.on_cpu("compute_then_sleep").unwrap(),
        cap.off_cpu("compute_then_sleep").unwrap(),
    );
    let blocked = cap.blocked("compute_then_sleep").unwrap();
    eprintln!(
        "capture: on {on:?} (truth {cpu} ns), off {off:?} (truth {} ns), blocked {blocked:?}",
        wall - cpu
    );
    assert!(close(on, cpu, 0.15, 1_000_000), "on-CPU {on:?} vs {cpu} ns");
    assert!(
        close(off, wall - cpu, 0.15, 1_000_000),
        "off-CPU {off:?} vs {} ns",
        wall - cpu
    );
    assert!(
        blocked >= Duration::from_millis(9),
        "the 10 ms sleep is blocked time: {blocked:?}"
    );
    // It also holds the wait to run again once woken (long on a loaded
    // machine); off-CPU against the truth above is what rules out doubling.
    assert!(blocked <= off, "{blocked:?} of {off:?}");
    assert_eq!(cap.off_cpu_max("compute_then_sleep"), Some(off));
    // The sleep is a voluntary switch: the no-blocking check fails, and says where.
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cap.assert_no_blocking("compute_then_sleep");
    }))
    .expect_err("a sleeping call blocks");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("`compute_then_sleep` blocked"), "{msg}");
    assert!(
        msg.contains("blocked for") && msg.contains("into the call"),
        "{msg}"
    );
}

#[test]
fn compute_only_is_not_blocked() {
    let mut truth = cpu::Truth::default();
    let cap = Options::new().off_cpu(true).capture(|| {
        join_session();
        truth = measured(compute_only).1
    });
    let Some(cap) = recorded(cap, "compute_only_is_not_blocked") else {
        return;
    };
    let (wall, cpu) = (truth.wall, truth.cpu);
    let off = cap.off_cpu("compute_only").unwrap();
    eprintln!("compute only: off {off:?} (truth {} ns)", wall - cpu);
    assert!(
        close(off, wall - cpu, 0.15, 1_000_000),
        "off {off:?} vs {} ns",
        wall - cpu
    );
    assert_eq!(cap.blocked("compute_only"), Some(Duration::ZERO));
    assert_eq!(cap.assert_no_blocking("compute_only"), CounterCheck::Passed);
}

#[fgtrace::traced]
fn hold_lock(m: &Mutex<u64>, locked: std::sync::mpsc::Sender<()>) {
    let mut g = m.lock().unwrap();
    locked.send(()).unwrap();
    *g = g.wrapping_add(compute(Duration::from_millis(15)));
}

#[fgtrace::traced]
fn wait_for_lock(m: &Mutex<u64>) {
    *m.lock().unwrap() += 1;
}

#[test]
fn mutex_contention_blocks_the_waiter_only() {
    let mut truth = cpu::Truth::default();
    let cap = Options::new().off_cpu(true).capture(|| {
        let m = Arc::new(Mutex::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let h = {
            let m = m.clone();
            fgtrace::testing::spawn(move || hold_lock(&m, tx))
        };
        rx.recv().unwrap();
        join_session();
        truth = measured(|| wait_for_lock(&m)).1;
        h.join().unwrap();
    });
    let Some(cap) = recorded(cap, "mutex_contention_blocks_the_waiter_only") else {
        return;
    };
    let (wall, cpu) = (truth.wall, truth.cpu);
    let waited = cap.blocked("wait_for_lock").unwrap();
    eprintln!(
        "waiter blocked {waited:?} (truth off {} ns), holder {:?}",
        wall - cpu,
        cap.blocked("hold_lock")
    );
    assert!(waited > Duration::from_millis(5), "{waited:?}");
    assert!(
        close(waited, wall - cpu, 0.15, 1_000_000),
        "{waited:?} vs {} ns",
        wall - cpu
    );
    assert!(cap.blocked("hold_lock").unwrap() < Duration::from_micros(500));
    assert_eq!(cap.assert_no_blocking("hold_lock"), CounterCheck::Passed);
    assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cap.assert_no_blocking("wait_for_lock");
    }))
    .is_err());
}

#[test]
#[budget(compute_only(blocked = "0ns", off_cpu = "10s"))]
fn budget_attribute_checks_blocking() {
    compute_only();
}

#[budget(compute_then_sleep(off_cpu = "1ms"))]
fn sleeps_over_its_off_cpu_budget() {
    compute_then_sleep();
}

#[test]
fn budget_attribute_fails_a_call_off_cpu_too_long() {
    let r = std::panic::catch_unwind(sleeps_over_its_off_cpu_budget);
    // Where off-CPU is unavailable the budget is skipped, never passed.
    let probe = Options::new().off_cpu(true).capture(|| ());
    if let Some(why) = probe.off_cpu_unavailable() {
        assert!(r.is_ok());
        tools::missing::<()>("budget_attribute_fails_a_call_off_cpu_too_long", why);
        return;
    }
    let err = r.expect_err("10 ms asleep is over a 1 ms off-CPU budget");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("was off the CPU for") && msg.contains("over its budget of 1 ms"),
        "{msg}"
    );
}

#[fgtrace::traced]
async fn handler_that_yields() -> u32 {
    tokio::time::sleep(Duration::from_millis(5)).await;
    compute(Duration::from_millis(1)) as u32
}

#[fgtrace::traced]
async fn handler_that_blocks() -> u32 {
    std::thread::sleep(Duration::from_millis(5));
    1
}

#[tokio::test]
async fn an_async_handler_that_awaits_does_not_block_its_thread() {
    let (_, cap) = Options::new()
        .off_cpu(true)
        .capture_async(async {
            handler_that_yields().await;
            handler_that_blocks().await;
        })
        .await;
    let Some(cap) = recorded(
        cap,
        "an_async_handler_that_awaits_does_not_block_its_thread",
    ) else {
        return;
    };
    // Awaiting a timer parks the executor between polls, not in one.
    assert_eq!(
        cap.assert_no_blocking("handler_that_yields"),
        CounterCheck::Passed
    );
    let b = cap.blocked("handler_that_blocks").unwrap();
    assert!(
        b >= Duration::from_millis(4),
        "std::thread::sleep in a poll blocks: {b:?}"
    );
}

#[test]
fn off_cpu_queries_on_a_capture_without_it_are_none() {
    let cap = fgtrace::testing::capture(compute_only);
    assert_eq!(cap.off_cpu("compute_only"), None);
    assert_eq!(cap.off_cpu_unavailable(), None);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cap.assert_no_blocking("compute_only");
    }));
    let msg = r
        .expect_err("a mistake in the test")
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(msg.contains("without off-CPU time"), "{msg}");
}
