//! `Config::counters`: a session that asks for a per-call counter records
//! each call's delta beside it, or fails to start with an error naming the
//! counter; never zeros.

use fgtrace::view::graph::GraphOptions;
use fgtrace::view::report::ReportOptions;
use fgtrace::view::TraceViews;
use fgtrace::{Config, Counter, Event, Session};

/// Sessions are process-wide: the tests here take turns recording.
fn one_session() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Spins until this thread has used `ms` of CPU time.
#[fgtrace::traced]
fn spin(ms: u64) -> u64 {
    let end = thread_cpu_ns() + ms * 1_000_000;
    let mut x = 0u64;
    while thread_cpu_ns() < end {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    x
}

#[fgtrace::traced]
fn outer() -> u64 {
    spin(3) + spin(6)
}

#[fgtrace::traced]
fn work() -> u64 {
    std::hint::black_box(7)
}

/// (name, counter value) of every call, in trace order.
fn deltas(t: &fgtrace::Trace) -> Vec<(String, u64)> {
    let meta = t.meta();
    let mut last = None;
    let mut out = Vec::new();
    for e in t.events() {
        match e {
            Event::Call(c) => last = Some(meta.site_name(c.site).to_string()),
            Event::Counters(c) => out.push((last.take().expect("after a call"), c.values[0])),
            _ => {}
        }
    }
    out
}

#[test]
fn a_session_records_each_calls_counter_delta() {
    let _one = one_session();
    let s = Session::start(Config::builtin().counters([Counter::TaskClock])).unwrap();
    std::thread::spawn(outer).join().unwrap();
    let t = s.stop().unwrap();
    assert_eq!(t.meta().counters, ["task-clock"]);
    let d = deltas(&t);
    let names: Vec<&str> = d.iter().map(|x| x.0.as_str()).collect();
    assert_eq!(names, ["outer", "spin", "spin"]);
    // CPU time per call: what each spin waited for (the kernel's task clock
    // and the thread's CPU clock agree within a few µs), callees included in
    // the caller's.
    let (o, s3, s6) = (d[0].1, d[1].1, d[2].1);
    assert!((2_950_000..60_000_000).contains(&s3), "{d:?}");
    assert!((5_950_000..60_000_000).contains(&s6), "{d:?}");
    assert!(o >= s3 + s6, "{d:?}");

    let mut g = Vec::new();
    t.write_graph(&GraphOptions::default(), &mut g).unwrap();
    let g = String::from_utf8(g).unwrap();
    assert!(g.contains(&format!("spin(); /* {s3} task-clock */")), "{g}");
    assert!(
        g.contains(&format!("}} /* outer: {o} task-clock */")),
        "{g}"
    );
    let r = t.report(&ReportOptions::default());
    let row = r.functions.iter().find(|f| f.name == "spin").unwrap();
    assert_eq!(row.counters, [s3 + s6]);
    let outer_row = r.functions.iter().find(|f| f.name == "outer").unwrap();
    assert_eq!(outer_row.self_counters, [o - s3 - s6]);
}

#[test]
fn hardware_counters_are_recorded_or_refused_with_the_reason() {
    let _one = one_session();
    for c in [
        Counter::Instructions,
        Counter::Cycles,
        Counter::CacheMisses,
        Counter::BranchMisses,
    ] {
        match Session::start(Config::builtin().counters([c])) {
            Err(err) => {
                // No PMU (this machine, most CI runners): the reason, naming the counter.
                let msg = err.to_string();
                assert!(matches!(err, fgtrace::Error::Counters(_)), "{msg}");
                assert!(
                    msg.contains(&format!("cannot record the `{c}` counter")),
                    "{msg}"
                );
                assert!(
                    msg.contains("perf_event_open") || msg.contains("does not count"),
                    "{msg}"
                );
            }
            Ok(s) => {
                // A PMU: every call carries its delta.
                std::thread::spawn(outer).join().unwrap();
                let t = s.stop().unwrap();
                assert_eq!(t.meta().counters, [c.name()]);
                let d = deltas(&t);
                assert_eq!(d.len(), 3, "{d:?}");
                if c == Counter::Instructions {
                    assert!(d.iter().all(|x| x.1 > 0), "{d:?}");
                }
            }
        }
    }
    // Nothing was left running: a session without counters starts and records.
    let s = Session::start(Config::builtin()).unwrap();
    std::thread::spawn(work).join().unwrap();
    let t = s.stop().unwrap();
    assert_eq!(t.calls().count(), 1);
    assert!(t.meta().counters.is_empty());
    assert!(deltas(&t).is_empty());
}

#[test]
fn more_than_one_counter_is_refused_for_now() {
    let err = Session::start(Config::builtin().counters([Counter::TaskClock, Counter::Cycles]))
        .err()
        .expect("one counter per session");
    assert!(
        err.to_string().contains("sessions record one for now"),
        "{err}"
    );
}

#[test]
fn counter_names_parse() {
    assert_eq!("instructions".parse::<Counter>(), Ok(Counter::Instructions));
    assert_eq!("cycles".parse::<Counter>(), Ok(Counter::Cycles));
    assert_eq!("Cache-Misses".parse::<Counter>(), Ok(Counter::CacheMisses));
    assert_eq!("task-clock".parse::<Counter>(), Ok(Counter::TaskClock));
    let e = "flops".parse::<Counter>().unwrap_err();
    assert!(e.contains("unknown counter `flops`"), "{e}");
}
