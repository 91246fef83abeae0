//! Eight tests of one binary capture at the same time (libtest runs them on
//! parallel threads) and call the same traced functions: each capture sees
//! exactly its own calls. Each test waits inside its capture until as many
//! tests as libtest runs at once are capturing too, so the captures overlap
//! for real; with fewer test threads than 8, the overlap is what libtest
//! allows (`--test-threads=8` overlaps all eight).

use fgtrace::testing::{self, Counters, Options};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

#[fgtrace::traced]
fn shared(k: u64) -> u64 {
    std::hint::black_box(k)
}

#[fgtrace::traced]
fn waiting() {
    std::thread::sleep(Duration::from_millis(1));
}

#[fgtrace::traced]
fn outer(k: u64, n: u64) -> u64 {
    (0..n).map(|_| shared(k)).sum()
}

/// Tests inside their capture right now, and the most seen at once.
static INSIDE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// How many tests libtest runs at once, capped at 8 (1 under nextest, which
/// runs each test in a process of its own).
fn parallel() -> usize {
    if std::env::var_os("NEXTEST").is_some() {
        return 1;
    }
    let args: Vec<String> = std::env::args().collect();
    let from_args = args.iter().enumerate().find_map(|(i, a)| {
        a.strip_prefix("--test-threads=")
            .map(String::from)
            .or_else(|| {
                (a == "--test-threads")
                    .then(|| args.get(i + 1).cloned())
                    .flatten()
            })
    });
    let n = from_args
        .or_else(|| std::env::var("RUST_TEST_THREADS").ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    n.clamp(1, 8)
}

/// Test `k`: `k` calls of `outer`, each making `10 * k` calls of `shared`,
/// half before and half after waiting for the other tests to capture too;
/// with or without counters (they must not change what is seen).
fn check(k: u64) {
    let (before, after) = (k / 2, k - k / 2);
    let opts = Options::new().counters(if k % 2 == 0 {
        Counters::Auto
    } else {
        Counters::Off
    });
    // Calls outside any capture are not recorded anywhere.
    outer(k, 3);
    let cap = opts.capture(|| {
        for _ in 0..before {
            outer(k, 10 * k);
        }
        let now = INSIDE.fetch_add(1, SeqCst) + 1;
        PEAK.fetch_max(now, SeqCst);
        let deadline = Instant::now() + Duration::from_secs(20);
        while INSIDE.load(SeqCst) < parallel()
            && PEAK.load(SeqCst) < parallel()
            && Instant::now() < deadline
        {
            waiting(); // other tests' captures must not see these either
        }
        for _ in 0..after {
            outer(k, 10 * k);
        }
        INSIDE.fetch_sub(1, SeqCst);
    });
    outer(k, 3);
    assert_eq!(cap.calls("outer"), k as usize, "test {k}");
    assert_eq!(cap.calls("shared"), (10 * k * k) as usize, "test {k}");
    assert!(cap.calls_of("shared").iter().all(|c| c.depth == 1));
    cap.assert_inside("shared", "outer");
    // This test's waits (if it waited) are in its capture, outside `outer`.
    assert!(cap.never_inside("waiting", "outer"));
    // One thread, this one.
    assert_eq!(cap.trace().meta().threads.len(), 1);
    assert_eq!(
        cap.trace().meta().threads[0].name,
        std::thread::current().name().unwrap()
    );
    assert!(
        PEAK.load(SeqCst) >= parallel(),
        "only {} of {} captures overlapped",
        PEAK.load(SeqCst),
        parallel()
    );
    assert!(testing::link().is_none());
}

#[test]
fn capture_1() {
    check(1);
}
#[test]
fn capture_2() {
    check(2);
}
#[test]
fn capture_3() {
    check(3);
}
#[test]
fn capture_4() {
    check(4);
}
#[test]
fn capture_5() {
    check(5);
}
#[test]
fn capture_6() {
    check(6);
}
#[test]
fn capture_7() {
    check(7);
}
#[test]
fn capture_8() {
    check(8);
}
