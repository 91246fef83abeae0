//! Dumps of a running stream-mode session ([`fgtrace::dump::running`],
//! `fgtrace ctl PID dump`): every call recorded so far, from the collector's
//! chunks and from what each thread has not handed over yet, with no call
//! twice and none missing in between, while a thread keeps recording; the
//! session records on and its trace at stop is whole.

use fgtrace::dump::{running, DumpError};
use fgtrace::{Config, Session, Trace};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex};

/// Sessions are process-wide: the tests here take turns.
static SERIAL: Mutex<()> = Mutex::new(());

#[fgtrace::traced]
#[inline(never)]
fn step(i: u64) -> u64 {
    black_box(i.wrapping_mul(31))
}

#[fgtrace::traced]
#[inline(never)]
fn busy_step(i: u64) -> u64 {
    black_box(i ^ 7)
}

fn thread_calls(t: &Trace, thread: &str, name: &str) -> Vec<u64> {
    let meta = t.meta();
    let Some(ti) = meta.threads.iter().position(|x| x.name == thread) else {
        return Vec::new();
    };
    t.calls()
        .filter(|c| c.thread as usize == ti && meta.site_name(c.site).ends_with(name))
        .map(|c| c.start_ns)
        .collect()
}

/// Strictly increasing starts: no call twice (a call in a dump twice would
/// repeat its start).
fn assert_each_once(starts: &[u64], what: &str) {
    for w in starts.windows(2) {
        assert!(w[0] < w[1], "{what}: starts {} then {}", w[0], w[1]);
    }
}

#[test]
fn a_stream_session_dumps_every_call_so_far_while_it_records() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Batches of 16 calls, so that the busy thread hands batches over all
    // the time, while the collector takes the dump too; none dropped.
    // 10,007 calls: 625 batches handed to the collector, and 7 still in the
    // thread's own buffer when it goes idle.
    const STEPS: u64 = 10_007;
    let config = Config::builtin().batch_calls(16).block_when_full(true);
    let session = Session::start(config).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let busy_done = Arc::new(AtomicU64::new(0));
    let idle = Arc::new(Barrier::new(2));
    let finish = Arc::new(Barrier::new(2));
    let stepper = {
        let (idle, finish) = (idle.clone(), finish.clone());
        std::thread::Builder::new()
            .name("stepper".into())
            .spawn(move || {
                for i in 0..STEPS {
                    step(i);
                }
                idle.wait();
                finish.wait();
            })
            .unwrap()
    };
    // The busy thread records while each dump is taken, but never more than
    // `allowed` calls (a debug build iterates every call of the dumps).
    let allowed = Arc::new(AtomicU64::new(0));
    let busy = {
        let (stop, done, allowed) = (stop.clone(), busy_done.clone(), allowed.clone());
        std::thread::Builder::new()
            .name("busy".into())
            .spawn(move || {
                let mut i = 0;
                while !stop.load(SeqCst) {
                    if i >= allowed.load(SeqCst) {
                        std::thread::yield_now();
                        continue;
                    }
                    busy_step(i);
                    i += 1;
                    done.store(i, SeqCst);
                }
            })
            .unwrap()
    };
    idle.wait();
    let mut last_busy = 0;
    for round in 0..3 {
        // The busy thread hands over a few batches before the dump and
        // goes on recording while it is taken.
        let target = busy_done.load(SeqCst) + 20_000;
        allowed.store(target + 200_000, SeqCst);
        while busy_done.load(SeqCst) < target {
            std::thread::yield_now();
        }
        let before = busy_done.load(SeqCst);
        let dump = running().expect("a stream-mode session dumps");
        let after = busy_done.load(SeqCst);
        // Through the trace format and back, as `fgtrace ctl PID dump` sends it.
        let mut bytes = Vec::new();
        dump.write_to(&mut bytes).unwrap();
        let dump = Trace::read_from(&bytes[..]).expect("a readable dump");
        assert!(
            dump.meta()
                .warnings
                .iter()
                .any(|w| w.contains("running session")),
            "{:?}",
            dump.meta().warnings
        );
        let steps = thread_calls(&dump, "stepper", "step");
        assert_eq!(
            steps.len() as u64,
            STEPS,
            "round {round}: the idle thread's calls, its unfinished batch included"
        );
        assert_each_once(&steps, "stepper");
        let busy = thread_calls(&dump, "busy", "busy_step");
        // A call's record is written before it returns and the count rises:
        // at least `before`, at most one more than `after`.
        let n = busy.len() as u64;
        assert!(
            n >= before && n <= after + 1,
            "round {round}: {n} busy calls in the dump, {before}..={after} made around it"
        );
        assert!(n > last_busy, "a later dump has later calls");
        last_busy = n;
        assert_each_once(&busy, "busy");
    }
    stop.store(true, SeqCst);
    busy.join().unwrap();
    finish.wait();
    stepper.join().unwrap();
    let made = busy_done.load(SeqCst);
    let t = session.stop().unwrap();
    assert_eq!(thread_calls(&t, "stepper", "step").len() as u64, STEPS);
    let busy = thread_calls(&t, "busy", "busy_step");
    assert_eq!(busy.len() as u64, made, "the session's own trace is whole");
    assert_each_once(&busy, "busy at stop");
    assert!(t.meta().warnings.is_empty(), "{:?}", t.meta().warnings);
}

#[test]
fn a_session_writing_a_file_points_to_the_file_and_nothing_runs_without_a_session() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(running().unwrap_err(), DumpError::NoSession);
    let path = std::env::temp_dir().join(format!("fgtrace-dump-{}.fgt", std::process::id()));
    let session = Session::start(Config::builtin().output(&path)).unwrap();
    for i in 0..10_000 {
        step(i);
    }
    match running() {
        Err(DumpError::Unavailable(why)) => {
            assert!(why.contains(path.to_str().unwrap()), "{why}");
            assert!(why.contains("can be read now"), "{why}");
        }
        other => panic!("{:?}", other.map(|t| t.meta().total_calls())),
    }
    // It can: the batches handed over so far are in it, once the collector
    // (a thread of its own, slow on a loaded machine) has written them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let partial = Trace::load(&path).expect("the file reads while the session writes it");
        if partial.meta().total_calls() >= 8192 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after 20 s the file still holds {} calls",
            partial.meta().total_calls()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let t = session.stop().unwrap();
    assert_eq!(t.meta().total_calls(), 10_000);
    let _ = std::fs::remove_file(&path);
}
