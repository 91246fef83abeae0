//! Captures under `#[tokio::test]`: a sync capture inside an async test, and
//! `capture_async`, which records a future's polls only, so other tasks on
//! the same runtime (and thread) stay out.

use fgtrace::testing;
use std::time::Duration;

#[fgtrace::traced]
fn parse(s: &str) -> usize {
    s.len()
}

#[fgtrace::traced]
async fn fetch(n: usize) -> usize {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
    parse("abc")
}

#[fgtrace::traced]
async fn handler() -> usize {
    fetch(2).await + fetch(0).await
}

#[tokio::test]
async fn a_sync_capture_inside_an_async_test() {
    let cap = testing::capture(|| parse("hello") + parse("x"));
    cap.assert_calls("parse", 2);
    cap.assert_max("parse", Duration::from_secs(1));
}

#[tokio::test]
async fn futures_are_counted_whole_and_polls_apart() {
    let (v, cap) = testing::capture_async(handler()).await;
    assert_eq!(v, 6);
    // Calls of an async fn are its futures; polls are counted apart.
    assert_eq!(cap.calls("handler"), 1);
    assert_eq!(cap.calls("fetch"), 2);
    assert_eq!(
        cap.polls("fetch"),
        4,
        "fetch(2) is polled 3 times, fetch(0) once"
    );
    assert_eq!(cap.calls("parse"), 2);
    // Nesting is seen through the polls.
    cap.assert_inside("parse", "fetch");
    cap.assert_inside("fetch", "handler");
    // A future's duration spans its polls and the time between them.
    let polls: u64 = cap.calls_of("fetch").iter().map(|c| c.dur_ns).sum();
    assert!(cap.total("fetch") >= Duration::from_nanos(polls));
    cap.assert_max("handler", Duration::from_secs(5));
}

#[tokio::test]
async fn other_tasks_on_the_same_thread_stay_out() {
    let other = tokio::spawn(async {
        for _ in 0..20 {
            parse("other task");
            tokio::task::yield_now().await;
        }
    });
    let (_, cap) = testing::capture_async(async {
        for _ in 0..5 {
            parse("ours");
            tokio::task::yield_now().await;
        }
    })
    .await;
    other.await.unwrap();
    cap.assert_calls("parse", 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_future_may_move_between_worker_threads() {
    let task = tokio::spawn(testing::capture_async(async {
        let mut n = 0;
        for _ in 0..50 {
            n += fetch(1).await;
        }
        n
    }));
    let noise = tokio::spawn(async {
        for _ in 0..50 {
            parse("noise");
            tokio::task::yield_now().await;
        }
    });
    let (n, cap) = task.await.unwrap();
    noise.await.unwrap();
    assert_eq!(n, 150);
    assert_eq!(cap.calls("fetch"), 50);
    assert_eq!(cap.calls("parse"), 50);
    cap.assert_inside("parse", "fetch");
}

#[tokio::test]
async fn a_failing_budget_in_async_code_shows_the_polls() {
    let (_, cap) = testing::capture_async(handler()).await;
    let err =
        std::panic::catch_unwind(|| cap.assert_max("fetch", Duration::from_nanos(1))).unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains("`fetch` took"), "{msg}");
    assert!(
        msg.contains("fetch() {") && msg.contains("parse();"),
        "{msg}"
    );
}
