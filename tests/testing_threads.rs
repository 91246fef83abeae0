//! Threads and captures: only the calling thread is recorded, unless the
//! test links others in (`testing::spawn`, `link` + `Link::run`); and a test
//! body that a harness runs on another thread (ntest's `#[timeout]`) captures
//! there like anywhere else.

use fgtrace::testing::{self, Link};
use std::time::Duration;

#[fgtrace::traced]
fn work(n: u32) -> u32 {
    (0..n).map(std::hint::black_box).sum()
}

#[fgtrace::traced]
fn coordinator() {
    work(1);
}

#[test]
fn only_linked_threads_are_recorded() {
    let cap = testing::capture(|| {
        coordinator();
        // Not linked: another thread's calls are not this capture's.
        std::thread::spawn(|| work(2)).join().unwrap();
        // Linked: recorded, as a thread of its own.
        testing::spawn(|| {
            work(3);
            work(4);
        })
        .join()
        .unwrap();
    });
    assert_eq!(cap.calls("work"), 3);
    let threads = &cap.trace().meta().threads;
    assert_eq!(threads.len(), 2);
    assert_eq!(threads.iter().map(|t| t.calls).collect::<Vec<_>>(), [2, 2]);
    // Containment is per thread: the spawned thread's calls are inside nothing.
    assert!(!cap.always_inside("work", "coordinator"));
    // The graph shows both threads.
    let g = cap.graph();
    assert_eq!(g.matches("thread ").count(), 2, "{g}");
}

#[test]
fn scoped_threads_and_pools_join_through_a_link() {
    let cap = testing::capture(|| {
        let link: Link = testing::link().expect("inside a capture");
        std::thread::scope(|s| {
            for i in 0..4 {
                let link = link.clone();
                s.spawn(move || link.run(|| work(i)));
            }
        });
    });
    assert_eq!(cap.calls("work"), 4);
    assert_eq!(cap.trace().meta().threads.len(), 5);
    assert!(testing::link().is_none(), "no capture runs here any more");
}

#[test]
fn a_linked_thread_still_running_after_the_capture_is_not_recorded() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let mut late = None;
    let cap = testing::capture(|| {
        let link = testing::link().unwrap();
        late = Some(std::thread::spawn(move || {
            link.run(|| {
                rx.recv().unwrap();
                work(5)
            })
        }));
    });
    tx.send(()).unwrap();
    assert_eq!(late.unwrap().join().unwrap(), 10);
    assert_eq!(cap.calls("work"), 0);
}

#[test]
fn spawn_outside_a_capture_is_a_plain_thread() {
    assert_eq!(testing::spawn(|| work(4)).join().unwrap(), 6);
}

#[test]
fn nested_links_reach_the_innermost_capture() {
    let outer = testing::capture(|| {
        work(1);
        let inner = testing::capture(|| testing::spawn(|| work(2)).join().unwrap());
        assert_eq!(inner.calls("work"), 1);
        testing::spawn(|| work(3)).join().unwrap();
    });
    assert_eq!(outer.calls("work"), 2);
}

/// ntest runs the body on a thread of its own and waits with a timeout.
#[test]
#[ntest::timeout(10_000)]
fn captures_work_under_an_ntest_timeout() {
    // Not libtest's thread (that one is named after the test).
    assert_ne!(
        std::thread::current().name(),
        Some("captures_work_under_an_ntest_timeout")
    );
    let cap = testing::capture(|| {
        work(10);
        work(20);
    });
    cap.assert_calls("work", 2);
    cap.assert_max("work", Duration::from_secs(5));
    // Recorded on the thread the body runs on.
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    assert_eq!(cap.trace().meta().threads[0].tid, tid);
}
