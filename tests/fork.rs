//! fork() while a session records. The child is a copy of
//! one thread with none of fgtrace's threads: it records nothing (even with
//! `block_when_full`, where a full buffer used to spin forever waiting for a
//! collector that does not exist in the child), and its `Session::stop`
//! returns at once with an error saying so (it used to wait forever for the
//! parent's collector thread). The parent's session goes on as if nothing
//! happened.
#![cfg(target_os = "linux")]

use fgtrace::sampler::Sampling;
use fgtrace::{traced, Config, Session};
use std::hint::black_box;
use std::time::{Duration, Instant};

#[traced]
fn leaf(x: u64) -> u64 {
    black_box(x.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

#[test]
fn a_forked_child_records_nothing_and_its_stop_returns_at_once() {
    let cfg = Config::builtin()
        .batch_calls(64)
        .max_batches_in_flight(2)
        .block_when_full(true)
        .sampling(Sampling::timer(1000));
    let session = Session::start(cfg).unwrap();
    for i in 0..1000 {
        leaf(i);
    }
    // SAFETY: the child only calls what it needs and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let t = Instant::now();
        // 1M calls: 15,000 full batches with nobody collecting them.
        let mut x = 0;
        for i in 0..1_000_000 {
            x ^= leaf(i);
        }
        black_box(x);
        let code = match session.stop() {
            Err(e) => {
                let e = e.to_string();
                if e.contains("fork") && t.elapsed() < Duration::from_secs(10) {
                    0
                } else {
                    eprintln!("child: unexpected error or too slow: {e}");
                    2
                }
            }
            Ok(trace) => {
                eprintln!(
                    "child: stop returned a trace of {} calls",
                    trace.calls().count()
                );
                3
            }
        };
        // SAFETY: leave without running the parent's atexit handlers or tests.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("the forked child hung (killed after 30 s)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed: status {status:#x} (exit code {}, signal {})",
        libc::WEXITSTATUS(status),
        libc::WTERMSIG(status)
    );
    for i in 0..1000 {
        leaf(i);
    }
    let trace = session.stop().unwrap();
    let meta = trace.meta();
    let n = trace
        .calls()
        .filter(|c| meta.site_name(c.site) == "leaf")
        .count();
    assert_eq!(n, 2000, "the parent's session kept every call of its own");
    assert!(meta.threads.iter().all(|t| t.lost == 0));
}
