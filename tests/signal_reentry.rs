//! Traced code in a signal handler that interrupts the traced thread
//! anywhere, including inside fgtrace's own cold paths (a batch handoff,
//! which swaps storage under a spin flag): it must neither hang on that flag
//! nor corrupt the interrupted thread's records.
#![cfg(target_os = "linux")]

use fgtrace::{traced, Config, Session};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};

static HANDLED: AtomicU64 = AtomicU64::new(0);

#[traced]
fn in_handler(x: u64) -> u64 {
    black_box(x ^ 0x5a)
}

extern "C" fn on_signal(_: libc::c_int) {
    in_handler(HANDLED.fetch_add(1, Relaxed));
}

#[traced]
fn work(x: u64) -> u64 {
    black_box(x.wrapping_mul(31))
}

#[test]
fn traced_calls_in_a_signal_handler_never_hang_or_tear_records() {
    // SAFETY: installs a plain handler for SIGUSR1 in this test binary.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
    // Tiny batches: the worker is in a handoff often.
    let session = Session::start(Config::builtin().batch_calls(16)).unwrap();
    let done = AtomicBool::new(false);
    let calls = 200_000u64;
    let tid = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let done = &done;
        let worker = s.spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() }).unwrap();
            for i in 0..calls {
                work(i);
            }
            done.store(true, Relaxed);
        });
        let thread = rx.recv().unwrap();
        let mut sent = 0u64;
        while !done.load(Relaxed) {
            // SAFETY: the worker thread is alive until `done`.
            unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
            sent += 1;
            std::thread::yield_now();
        }
        worker.join().unwrap();
        sent
    });
    let trace = session.stop().unwrap();
    let meta = trace.meta();
    let works = trace
        .calls()
        .filter(|c| meta.site_name(c.site) == "work")
        .count() as u64;
    let lost: u64 = meta.threads.iter().map(|t| t.lost).sum();
    // `lost` also counts handler calls that landed inside a record write.
    assert!(works <= calls, "{works} work calls recorded of {calls}");
    assert!(
        works + lost >= calls,
        "{} work calls neither recorded nor counted ({works} recorded, {lost} lost)",
        calls - works - lost
    );
    let handled = trace
        .calls()
        .filter(|c| meta.site_name(c.site) == "in_handler")
        .count() as u64;
    assert!(
        handled <= HANDLED.load(Relaxed),
        "{handled} handler calls recorded"
    );
    for c in trace.calls() {
        let name = meta.site_name(c.site);
        assert!(name == "work" || name == "in_handler", "torn record: {c:?}");
        assert!(
            c.depth <= 1,
            "a handler's call nests at most under one work call: {c:?}"
        );
    }
    assert!(tid > 0 && HANDLED.load(Relaxed) > 0, "signals were handled");
}
