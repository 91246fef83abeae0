//! Which future each poll belongs to, as the exports draw it: several
//! futures of one `async fn` whose polls interleave (the common case: many
//! tasks running the same function) each get exactly their own polls on
//! their lane. Matching by time alone trades the middle polls of such
//! futures; the futures' ids, recorded after every poll, make it exact.

use fgtrace::trace::Event;
use fgtrace::view::chrome::{write_chrome, ChromeOptions};
use fgtrace::view::{ok_events, HexResolve};
use serde_json::Value;
use std::collections::HashMap;

/// Marks which task a poll runs for: its one child call, with the task's number.
#[fgtrace::traced(values(k))]
fn step(k: u64) -> u64 {
    std::hint::black_box(k)
}

#[fgtrace::traced(values(k))]
async fn task(k: u64) -> u64 {
    let mut sum = 0;
    for _ in 0..4 {
        sum += step(k);
        tokio::task::yield_now().await;
    }
    sum + step(k)
}

const TASKS: u64 = 6;

#[test]
fn every_poll_of_interleaved_futures_goes_to_its_own_lane() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let session = fgtrace::Session::start(fgtrace::Config::builtin()).unwrap();
    // One thread, round robin: the polls of the six futures interleave.
    let sums = rt.block_on(async {
        let hs: Vec<_> = (0..TASKS).map(|k| tokio::spawn(task(k))).collect();
        let mut sums = Vec::new();
        for h in hs {
            sums.push(h.await.unwrap());
        }
        sums
    });
    let trace = session.stop().unwrap();
    assert_eq!(sums, (0..TASKS).map(|k| 5 * k).collect::<Vec<_>>());
    let meta = trace.meta();
    let site = |name: &str| meta.sites.iter().position(|s| s.name == name).unwrap() as u32;
    let (task_site, step_site) = (site("task"), site("step"));

    // The truth, from the trace: the task each poll ran for (the value of
    // the `step` call inside it), by the poll's (thread, start).
    let events: Vec<Event> = trace.events().collect();
    let mut truth: HashMap<(u32, u64), u64> = HashMap::new();
    let mut open_poll = None;
    let mut last_step = false;
    let mut ids = 0;
    for e in &events {
        match e {
            Event::Call(c) if c.site == task_site && c.is_poll() => {
                open_poll = Some((c.thread, c.start_ns));
                last_step = false;
            }
            Event::Call(c) => last_step = c.site == step_site,
            Event::Values(v) if last_step => {
                let p = open_poll.expect("a step runs inside a poll");
                truth.insert((meta.threads[p.0 as usize].tid, p.1), v.values[0].bits);
                last_step = false;
            }
            Event::FutureId(_) => ids += 1,
            _ => {}
        }
    }
    assert_eq!(truth.len() as u64, TASKS * 5, "five polls per task");
    assert_eq!(
        ids as u64,
        TASKS * 5 + TASKS,
        "an id after every poll and future"
    );

    // The Chrome export: each future's lane, with its value and its polls.
    let mut out = Vec::new();
    write_chrome(
        meta,
        ok_events(trace.events()),
        HexResolve,
        &ChromeOptions::default(),
        &mut out,
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    // Lanes are reused once a future ends: a lane's polls are those between
    // its future's begin and end.
    let mut open: HashMap<String, u64> = HashMap::new();
    let mut checked = 0;
    for e in evs.iter().filter(|e| e["cat"] == "future") {
        let id = e["id"].as_str().unwrap().to_string();
        match (e["ph"].as_str().unwrap(), e["name"].as_str().unwrap()) {
            ("b", "task") => {
                open.insert(id, e["args"]["k"].as_u64().unwrap());
            }
            ("e", "task") => {
                open.remove(&id);
            }
            ("b", "poll") => {
                let k = open[&id];
                let tid = e["args"]["tid"].as_u64().unwrap() as u32;
                let us = e["ts"].as_f64().unwrap();
                let ran_for = truth
                    .iter()
                    .find(|((t, ns), _)| *t == tid && (*ns as f64 / 1000.0 - us).abs() < 0.0006)
                    .map(|(_, k)| *k);
                assert_eq!(
                    ran_for,
                    Some(k),
                    "a poll at {us} µs on the lane of task {k}"
                );
                checked += 1;
            }
            _ => {}
        }
    }
    assert_eq!(checked, TASKS * 5, "every poll on a lane");
}

#[test]
fn a_capture_gives_each_interleaved_future_its_own_polls() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let cap = fgtrace::testing::capture(|| {
        rt.block_on(async {
            let hs: Vec<_> = (0..TASKS).map(|k| tokio::spawn(task(k))).collect();
            for h in hs {
                h.await.unwrap();
            }
        })
    });
    // Each future's own time is its own five polls' (the polls of the
    // others of its fn run inside its span on the same thread).
    let polls = cap.calls_of("task");
    assert_eq!(polls.len() as u64, TASKS * 5);
    let in_polls: u64 = polls.iter().map(|c| c.dur_ns).sum();
    let steps: u64 = cap.calls_of("step").iter().map(|c| c.dur_ns).sum();
    let own = cap.self_total("task").as_nanos() as u64;
    assert_eq!(
        own,
        in_polls - steps,
        "self time of the futures: their own polls'"
    );
    // A failure shows the future's own polls, not its neighbours'.
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cap.assert_max("task", std::time::Duration::from_nanos(1))
    }))
    .expect_err("over 1 ns");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("its 5 polls:"), "{msg}");
}
