//! Automatic exclusion of tiny functions (`Config::auto_exclude`,
//! `FGTRACE_AUTO_EXCLUDE`): a tiny function is switched to count-only on
//! each thread after its first 1,024 calls there, a slow one never is, and
//! every call is still counted exactly.

use fgtrace::core::probe::{with_thread_state, GEN_AUTO, GEN_TAGS};
use fgtrace::trace::Trace;
use fgtrace::view::{ReportOptions, TraceViews};
use fgtrace::{Config, Session};
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sessions are process-wide: the tests here take turns.
static ONE_SESSION: Mutex<()> = Mutex::new(());

const TINY_CALLS: u64 = 100_000;
const SLOW_CALLS: u64 = 2_000;
const THREADS: [&str; 2] = ["auto-a", "auto-b"];

#[fgtrace::traced]
#[inline(never)]
fn tiny(x: u64) -> u64 {
    black_box(x).wrapping_add(1)
}

#[fgtrace::traced]
#[inline(never)]
fn slow() {
    let t = Instant::now();
    while t.elapsed() < Duration::from_micros(6) {
        std::hint::spin_loop();
    }
}

/// One thread's share: the tiny getter and the slow function, interleaved,
/// with pauses that let the collector take the batches in meanwhile (a
/// switch happens after the collector saw the getter's first 1,024 calls).
fn workload() {
    let rounds = 100;
    for round in 0..rounds {
        for i in 0..TINY_CALLS / rounds {
            black_box(tiny(i));
        }
        for _ in 0..SLOW_CALLS / rounds {
            slow();
        }
        if round % 10 == 9 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// `config`'s session over the workload on two threads.
fn run(config: Config) -> Trace {
    let session = Session::start(config.batch_calls(1024)).unwrap();
    let threads: Vec<_> = THREADS
        .iter()
        .map(|name| {
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(workload)
                .unwrap()
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    session.stop().unwrap()
}

fn site(t: &Trace, name: &str) -> u32 {
    t.meta().sites.iter().position(|s| s.name == name).unwrap() as u32
}

/// Calls of `name` on the thread called `thread`: the report's count, and
/// the calls recorded there plus those counted there.
fn calls_on(t: &Trace, thread: &str, name: &str) -> (u64, u64) {
    let opts = ReportOptions {
        threads: vec![thread.parse().unwrap()],
        ..ReportOptions::default()
    };
    let r = t.report(&opts);
    let reported = r.functions.iter().find(|f| f.name == name).unwrap().calls;
    let ti = t
        .meta()
        .threads
        .iter()
        .position(|x| x.name == thread)
        .unwrap() as u32;
    let s = site(t, name);
    let recorded = t.calls().filter(|c| c.thread == ti && c.site == s).count() as u64;
    (reported, recorded + t.meta().count_only_calls(ti, s))
}

#[test]
fn a_tiny_getter_is_switched_on_each_thread_and_every_call_still_counts() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let t = run(Config::builtin().auto_exclude(Duration::from_nanos(50)));
    let m = t.meta();
    let (tiny_site, slow_site) = (site(&t, "tiny"), site(&t, "slow"));
    for name in THREADS {
        let ti = m.threads.iter().position(|x| x.name == name).unwrap() as u32;
        let sw: Vec<_> = m.count_only.iter().filter(|c| c.thread == ti).collect();
        assert_eq!(sw.len(), 1, "{name}: {:?}", m.count_only);
        let c = sw[0];
        assert_eq!(c.site, tiny_site, "only the getter is switched");
        // Its first 1,024 calls decided (or, if the machine preempted the
        // thread in one of them, a later window of 1,024).
        assert!(
            c.calls_before >= 1024 && c.calls_before % 1024 == 0,
            "{c:?}"
        );
        assert!(c.mean_ns_before <= 50, "{c:?}");
        assert!(c.calls_after > 0 && c.calls_after < TINY_CALLS, "{c:?}");
        assert!(
            c.switched_at_ns > 0 && c.switched_at_ns <= m.duration_ns,
            "{c:?}"
        );
        // Exact counts: what the report says, and recorded + counted.
        assert_eq!(calls_on(&t, name, "tiny"), (TINY_CALLS, TINY_CALLS));
        assert_eq!(calls_on(&t, name, "slow"), (SLOW_CALLS, SLOW_CALLS));
    }
    assert!(m.count_only.iter().all(|c| c.site != slow_site));
    let r = t.report(&ReportOptions::default());
    let row = |n: &str| r.functions.iter().find(|f| f.name == n).unwrap().clone();
    assert_eq!(row("tiny").calls, 2 * TINY_CALLS);
    assert_eq!(row("tiny").count_only, m.total_count_only());
    assert_eq!(row("slow").calls, 2 * SLOW_CALLS);
    assert_eq!(row("slow").count_only, 0);
    assert!(m.filters.contains("auto_exclude=50ns"), "{}", m.filters);

    // The switches survive a saved file, and its report counts the same.
    let path = std::env::temp_dir().join(format!("fgtrace-auto-{}.fgt", std::process::id()));
    t.save(&path).unwrap();
    let back = Trace::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(back.meta().count_only, m.count_only);
    let rb = back.report(&ReportOptions::default());
    assert_eq!(
        rb.functions
            .iter()
            .find(|f| f.name == "tiny")
            .unwrap()
            .calls,
        2 * TINY_CALLS
    );
}

#[test]
fn without_auto_exclude_nothing_is_switched_and_the_counts_are_the_same() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let t = run(Config::builtin());
    assert!(t.meta().count_only.is_empty());
    for name in THREADS {
        assert_eq!(calls_on(&t, name, "tiny"), (TINY_CALLS, TINY_CALLS));
        assert_eq!(calls_on(&t, name, "slow"), (SLOW_CALLS, SLOW_CALLS));
    }
    let r = t.report(&ReportOptions::default());
    assert_eq!(r.count_only, 0);
    assert!(r.functions.iter().all(|f| f.count_only == 0));
}

/// Without auto-exclude a thread's generation carries no auto tag (its
/// calls take the inlined fast path, as before); with it, it does.
#[test]
fn only_an_auto_exclude_session_sends_calls_off_the_fast_path() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let state = || {
        std::thread::spawn(|| {
            tiny(1);
            // SAFETY: read only, outside any probe.
            unsafe { with_thread_state(|st| (st.gen & GEN_TAGS, st.count_only.is_null())) }
        })
        .join()
        .unwrap()
    };
    let s = Session::start(Config::builtin()).unwrap();
    assert_eq!(state(), (0, true));
    s.stop().unwrap();
    let s = Session::start(Config::builtin().auto_exclude(Duration::from_nanos(50))).unwrap();
    assert_eq!(state(), (GEN_AUTO, false));
    s.stop().unwrap();
}

/// The session writes its file as it records: the switches reach the
/// file's final metadata.
#[test]
fn a_session_writing_its_file_keeps_the_switches() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let path = std::env::temp_dir().join(format!("fgtrace-auto-out-{}.fgt", std::process::id()));
    let t = run(Config::builtin()
        .auto_exclude(Duration::from_nanos(50))
        .output(&path));
    let back = Trace::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(
        back.meta().count_only.len(),
        2,
        "{:?}",
        back.meta().count_only
    );
    assert_eq!(back.meta().count_only, t.meta().count_only);
    for name in THREADS {
        assert_eq!(calls_on(&back, name, "tiny"), (TINY_CALLS, TINY_CALLS));
    }
}

#[test]
fn a_bad_fgtrace_auto_exclude_is_a_clear_error_and_so_is_a_flight_recorder() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Config::builtin();
    c.apply_env(|k| (k == "FGTRACE_AUTO_EXCLUDE").then(|| "bogus".to_string()));
    let e = Session::start(c).err().expect("a bad value").to_string();
    assert!(
        e.contains("FGTRACE_AUTO_EXCLUDE") && e.contains("`bogus` is not a duration"),
        "{e}"
    );
    let flight = Config::builtin()
        .flight_recorder(1000)
        .auto_exclude(Duration::from_nanos(50));
    let e = Session::start(flight)
        .err()
        .expect("needs stream mode")
        .to_string();
    assert!(e.contains("needs stream mode"), "{e}");
}
