//! `--long-poll` on `fgtrace report` and `fgtrace graph`: a poll that
//! sleeps 20 ms is listed (table and JSON) and tagged at the default 10 ms,
//! not over a higher threshold, nor with `off`; a bad value is one clear
//! error.

#[path = "../../tests/support/cli.rs"]
mod cli_support;

use cli_support::{assert_clean_failure, fgtrace_ok, tempdir, text};
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

#[fgtrace::traced]
fn block_here() {
    std::thread::sleep(Duration::from_millis(20));
}

/// One poll, which blocks its thread.
#[fgtrace::traced]
async fn slow() -> u32 {
    block_here();
    7
}

#[test]
fn long_polls_are_listed_and_tagged_over_the_threshold() {
    let dir = tempdir("long-polls");
    let (_, path) = cli_support::record(&dir, || {
        let mut f = std::pin::pin!(slow());
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(f.as_mut().poll(&mut cx), Poll::Ready(7));
    });
    let p = path.to_str().unwrap();

    let out = text(&fgtrace_ok(&["report", p]).stdout);
    assert!(
        out.contains("# long polls: 1 poll longer than 10 ms held its thread"),
        "{out}"
    );
    assert!(out.contains(" slow (future 0x"), "{out}");
    assert!(out.contains("  block_here  1 call, 20."), "{out}");
    let out = text(&fgtrace_ok(&["report", p, "--long-poll", "50ms"]).stdout);
    assert!(
        out.contains("# long polls: none longer than 50 ms"),
        "{out}"
    );
    let out = text(&fgtrace_ok(&["report", p, "--long-poll", "off"]).stdout);
    assert!(!out.contains("long poll"), "{out}");

    let out = fgtrace_ok(&["report", p, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["long_polls_total"], 1, "{v}");
    assert_eq!(v["long_polls"][0]["name"], "slow", "{v}");
    assert!(v["long_polls"][0]["dur_ns"].as_u64().unwrap() >= 20_000_000);
    assert_eq!(v["long_polls"][0]["callees"][0]["name"], "block_here");

    let out = text(&fgtrace_ok(&["graph", p]).stdout);
    assert!(out.contains("slow() { /* [long poll] "), "{out}");
    assert!(out.contains("} /* slow [long poll] */"), "{out}");
    let out = text(&fgtrace_ok(&["graph", p, "--long-poll", "off"]).stdout);
    assert!(!out.contains("[long poll]"), "{out}");

    for cmd in ["report", "graph"] {
        let out = cli_support::fgtrace(&[cmd, p, "--long-poll", "soon"]);
        assert_clean_failure(&out, "--long-poll");
    }
    std::fs::remove_dir_all(dir).ok();
}
