use super::super::*;
use crate::test_traces::{async_site, call, flagged_call, meta};
use fgtrace_trace::{flags, FutureId, LossKind};

const MS: u64 = 1_000_000;

fn poll(thread: u32, site: u32, depth: u32, start_ns: u64, dur_ns: u64) -> Event {
    flagged_call(thread, site, depth, start_ns, dur_ns, flags::POLL)
}

fn id(thread: u32, id: u64) -> Event {
    Event::FutureId(FutureId { thread, id })
}

fn demo_meta() -> TraceMeta {
    let mut m = meta(
        &["fetch", "handle", "parse", "rec", "tick"],
        &[(100, "main"), (101, "worker")],
    );
    m.sites[0] = async_site("fetch");
    m.sites[4] = async_site("tick");
    m
}

fn report(m: &TraceMeta, opts: &ReportOptions, evs: &[Event]) -> Report {
    let mut b = ReportBuilder::new(m, opts);
    for e in evs {
        let Ok(()) = b.push(e);
    }
    b.finish()
}

/// A 25 ms poll of `fetch` (future 0x10) on `main`, with `handle { parse,
/// parse }` and a recursive `rec { rec }` inside, then a short poll of
/// `tick`; a 12 ms poll of `tick` on `worker` that lost records inside.
fn demo_events() -> Vec<Event> {
    vec![
        poll(0, 0, 0, MS, 25 * MS),
        id(0, 0x10),
        call(0, 1, 1, 2 * MS, 20 * MS),
        call(0, 2, 2, 3 * MS, 15 * MS),
        call(0, 2, 2, 18 * MS, 3 * MS),
        call(0, 3, 1, 23 * MS, 2 * MS),
        call(0, 3, 2, 23 * MS + 10, MS),
        // A short poll of another future inside: a callee, and its id is
        // not the long poll's.
        poll(0, 4, 2, 24 * MS + 100, 1000),
        id(0, 0x20),
        // After the long poll: outside it.
        poll(0, 4, 0, 30 * MS, 2 * MS),
        id(0, 0x30),
        call(0, 2, 1, 30 * MS + 10, 1000),
        poll(1, 4, 0, 40 * MS, 12 * MS),
        id(1, 0x40),
        call(1, 2, 1, 40 * MS + 5, 1000),
        Event::Lost(fgtrace_trace::Lost {
            thread: 1,
            depth: 1,
            at_ns: 45 * MS,
            count: 7,
            kind: LossKind::Dropped,
        }),
        // The whole future's record and id: no poll's.
        Event::Future(fgtrace_trace::FutureSpan {
            thread: 1,
            site: 4,
            start_ns: 40 * MS,
            dur_ns: 13 * MS,
            polls: 1,
            cancelled: false,
        }),
        id(1, 0x40),
    ]
}

#[test]
fn long_polls_have_their_future_thread_and_the_calls_inside() {
    let m = demo_meta();
    let r = report(&m, &ReportOptions::default(), &demo_events());
    assert_eq!(r.long_poll_ns, Some(10 * MS));
    assert_eq!(r.long_polls_total, 2);
    let got: Vec<(&str, Option<u64>, &str, u64, u64)> = r
        .long_polls
        .iter()
        .map(|p| {
            (
                p.name.as_str(),
                p.future_id,
                p.thread_label.as_str(),
                p.start_ns,
                p.dur_ns,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("fetch", Some(0x10), "main-100", MS, 25 * MS),
            ("tick", Some(0x40), "worker-101", 40 * MS, 12 * MS),
        ]
    );
    let fetch = &r.long_polls[0];
    // Everything inside: handle, 2 parse, 2 rec, the short poll.
    assert_eq!(fetch.calls, 6);
    // 25 ms minus handle's 20 and rec's 2 (its inner call is inside it).
    assert_eq!(fetch.self_ns, 3 * MS);
    assert_eq!(fetch.lost, 0);
    let callees: Vec<(&str, u64, u64, u64)> = fetch
        .callees
        .iter()
        .map(|c| (c.name.as_str(), c.calls, c.total_ns, c.self_ns))
        .collect();
    assert_eq!(
        callees,
        // By own time; recursion counted once in the total.
        [
            ("parse", 2, 18 * MS, 18 * MS),
            ("handle", 1, 20 * MS, 2 * MS),
            ("rec", 2, 2 * MS, 2 * MS - 1000),
            ("tick", 1, 1000, 1000),
        ]
    );
    let tick = &r.long_polls[1];
    assert_eq!((tick.calls, tick.lost), (1, 7));

    let mut out = Vec::new();
    r.write(ReportStyle::Table, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    for want in [
        "\n# long polls: 2 polls longer than 10 ms held their thread (no other task ran on it meanwhile)\n",
        "   25.000 ms  fetch (future 0x10) on main-100 at 1 ms, 6 calls inside\n",
        "\n# under each, where its time went: the functions inside it by their own time\n",
        "     18.000 ms  parse   2 calls, 18 ms with its callees\n",
        "      2.000 ms  handle  1 call, 20 ms with its callees\n",
        "      1.999 ms  rec     2 calls, 2 ms with its callees\n",
        "      3.000 ms  (the poll's own time)\n",
        "   12.000 ms  tick (future 0x40) on worker-101 at 40 ms, 1 call inside\n",
        "    7 records LOST inside this poll",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
    #[cfg(feature = "json")]
    {
        let mut json = Vec::new();
        r.write(ReportStyle::Json, &mut json).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["long_polls_total"], 2, "{v}");
        assert_eq!(v["long_poll_ns"], 10 * MS, "{v}");
        let p = &v["long_polls"][0];
        assert_eq!(
            (&p["name"], &p["future_id"]),
            (&"fetch".into(), &0x10.into())
        );
        assert_eq!(p["callees"][0]["name"], "parse", "{v}");
    }

    // A higher threshold keeps the 25 ms poll only; `None` lists none.
    let only = ReportOptions {
        long_poll_ns: Some(20 * MS),
        ..Default::default()
    };
    let r = report(&m, &only, &demo_events());
    assert_eq!((r.long_polls_total, r.long_polls.len()), (1, 1));
    let off = ReportOptions {
        long_poll_ns: None,
        ..Default::default()
    };
    let r = report(&m, &off, &demo_events());
    assert_eq!((r.long_polls_total, r.long_polls.len()), (0, 0));
    let mut out = Vec::new();
    r.write(ReportStyle::Table, &mut out).unwrap();
    assert!(!String::from_utf8(out).unwrap().contains("long poll"));
    // The thread filter applies.
    let main = ReportOptions {
        threads: vec!["main".parse().unwrap()],
        ..Default::default()
    };
    let r = report(&m, &main, &demo_events());
    assert_eq!(r.long_polls_total, 1);
    assert_eq!(r.long_polls[0].name, "fetch");
}

/// Many long polls on several threads: the report keeps the longest
/// `LONG_POLLS_KEPT`, counts them all, and is the same however the threads
/// are grouped.
#[test]
fn only_the_longest_are_kept_and_groups_agree() {
    let mut m = meta(&["serve", "work"], &[(100, "a"), (101, "b"), (102, "c")]);
    m.sites[0] = async_site("serve");
    let mut evs = Vec::new();
    let mut durs = Vec::new();
    for k in 0..300u64 {
        let t = (k % 3) as u32;
        // Distinct lengths, some under the threshold, some equal across threads.
        let dur = 5 * MS + (k * 7_919_000) % (40 * MS);
        let at = k * 100 * MS;
        evs.push(Some(poll(t, 0, 0, at, dur)));
        evs.push(Some(id(t, k)));
        evs.push(Some(call(t, 1, 1, at + 10, dur / 2)));
        if dur > 10 * MS {
            durs.push(dur);
        }
    }
    durs.sort_unstable_by(|a, b| b.cmp(a));
    let stream = || evs.iter().map(|e| e.clone().ok_or(TraceError::NotATrace));
    let opts = ReportOptions::default();
    let (one, read) = ReportBuilder::in_groups(&m, &opts, stream(), 1);
    read.unwrap();
    assert_eq!(one.long_polls_total, durs.len() as u64);
    assert_eq!(one.long_polls.len(), LONG_POLLS_KEPT);
    let kept: Vec<u64> = one.long_polls.iter().map(|p| p.dur_ns).collect();
    assert_eq!(kept, durs[..LONG_POLLS_KEPT]);
    for p in &one.long_polls {
        assert_eq!(p.future_id, Some(p.start_ns / (100 * MS)), "{p:?}");
        assert_eq!(p.callees[0].total_ns, p.dur_ns / 2);
    }
    for groups in [2, 3, 5] {
        let (got, read) = ReportBuilder::in_groups(&m, &opts, stream(), groups);
        read.unwrap();
        assert_eq!(got, one, "{groups} groups");
    }
}

/// A poll with more functions inside than are listed: the rest of its time
/// is said in one line.
#[test]
fn the_functions_not_listed_are_summed() {
    let names = ["serve", "f1", "f2", "f3", "f4", "f5", "f6", "f7"];
    let mut m = meta(&names, &[(100, "main")]);
    m.sites[0] = async_site("serve");
    let mut evs = vec![poll(0, 0, 0, 0, 30 * MS)];
    // f1 ... f7 with 7 ms down to 1 ms of their own.
    let mut at = 10;
    for k in 1..=7u64 {
        evs.push(call(0, k as u32, 1, at, (8 - k) * MS));
        at += (8 - k) * MS;
    }
    let r = report(&m, &ReportOptions::default(), &evs);
    let p = &r.long_polls[0];
    let listed: Vec<&str> = p.callees.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(listed, ["f1", "f2", "f3", "f4", "f5"]);
    assert_eq!(p.self_ns, 2 * MS);
    let mut out = Vec::new();
    r.write(ReportStyle::Table, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("\n      3.000 ms  (2 calls of other functions)\n      2.000 ms  (the poll's own time)\n"),
        "{text}"
    );
}
