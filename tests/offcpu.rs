//! Off-CPU time per call, recorded by a session: the intervals a
//! thread spent switched out, blocked or preempted, and what each call gets.
//!
//! The truth each test compares with is measured beside the traced call:
//! the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) across the call is its
//! on-CPU time, wall time minus that its off-CPU time. So the tolerances
//! only need to cover the clocks' disagreement, not the machine's load.

#[path = "support/cpu.rs"]
mod cpu;
#[path = "support/tools.rs"]
mod tools;

use cpu::{close, compute, join_session, measured};
use fgtrace::trace::{OffCpu, Trace};
use fgtrace::Config;
use std::sync::{Arc, Mutex};
use std::time::Duration;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[fgtrace::traced]
fn compute_then_sleep() -> u64 {
    let x = compute(Duration::from_millis(10));
    std::thread::sleep(Duration::from_millis(10));
    x
}

#[fgtrace::traced]
fn compute_only() -> u64 {
    compute(Duration::from_millis(10))
}

/// The off-CPU data of a trace, or a visible skip (failure under
/// `FGTRACE_REQUIRE_TOOLS=1`) naming why the kernel refused.
fn off_cpu_of<'a>(t: &'a Trace, test: &str) -> Option<&'a OffCpu> {
    let o = t
        .meta()
        .off_cpu
        .as_ref()
        .expect("off_cpu was asked for: the trace must say");
    if !o.is_available() {
        return tools::missing(test, &format!("off-CPU unavailable: {}", o.reason()));
    }
    Some(o)
}

/// (on-CPU ns, off-CPU blocked ns, preempted ns) of the one call of `name`.
fn call_of(t: &Trace, o: &OffCpu, name: &str) -> (u64, u64, u64) {
    let calls: Vec<_> = t
        .calls()
        .filter(|c| t.meta().site_name(c.site) == name)
        .collect();
    assert_eq!(calls.len(), 1, "{name}: {calls:?}");
    let c = calls[0];
    let off = t
        .off_cpu_of(&c)
        .expect("the calling thread has off-CPU data");
    assert_eq!(o.within(c.thread, c.start_ns, c.end_ns()), Some(off));
    (c.dur_ns - off.total_ns(), off.blocked_ns, off.preempted_ns)
}

#[test]
fn compute_then_sleep_splits_into_on_and_off_cpu() {
    let _s = serial();
    let session = fgtrace::Session::start(Config::builtin().off_cpu(true)).unwrap();
    join_session();
    let (_, truth) = measured(compute_then_sleep);
    let t = session.stop().unwrap();
    let Some(o) = off_cpu_of(&t, "compute_then_sleep_splits_into_on_and_off_cpu") else {
        return;
    };
    let (on, blocked, preempted) = call_of(&t, o, "compute_then_sleep");
    let off = blocked + preempted;
    let (true_on, true_off) = (truth.cpu, truth.off());
    eprintln!(
        "compute_then_sleep: on {on} ns (truth {true_on}), off {off} ns (truth {true_off}): blocked {blocked}, preempted {preempted}"
    );
    // About 10 ms each way; a broken feature reports 0 or double.
    assert!(
        close(on, true_on, 0.15, 1_000_000),
        "on-CPU {on} vs {true_on}"
    );
    assert!(
        close(off, true_off, 0.15, 1_000_000),
        "off-CPU {off} vs {true_off}"
    );
    assert!(
        blocked >= 9_000_000 && blocked <= off,
        "a 10 ms sleep (and the wait to run again once woken, long on a loaded machine) is blocked time: {blocked} ns"
    );
}

#[test]
fn compute_only_is_almost_never_off_cpu() {
    let _s = serial();
    let session = fgtrace::Session::start(Config::builtin().off_cpu(true)).unwrap();
    join_session();
    let (_, truth) = measured(compute_only);
    let t = session.stop().unwrap();
    let Some(o) = off_cpu_of(&t, "compute_only_is_almost_never_off_cpu") else {
        return;
    };
    let (on, blocked, preempted) = call_of(&t, o, "compute_only");
    let (true_on, true_off) = (truth.cpu, truth.off());
    eprintln!("compute_only: on {on} (truth {true_on}), blocked {blocked}, preempted {preempted} (truth off {true_off})");
    assert!(
        close(on, true_on, 0.15, 1_000_000),
        "on-CPU {on} vs {true_on}"
    );
    // Never blocks; preempted only as long as the machine's load says.
    assert!(blocked < 500_000, "compute blocked for {blocked} ns");
    assert!(
        close(preempted, true_off, 0.15, 1_000_000),
        "preempted {preempted} vs {true_off}"
    );
}

#[fgtrace::traced]
fn hold_lock(m: &Mutex<u64>, locked: std::sync::mpsc::Sender<()>) {
    let mut g = m.lock().unwrap();
    locked.send(()).unwrap();
    *g = g.wrapping_add(compute(Duration::from_millis(15)));
}

#[fgtrace::traced]
fn wait_for_lock(m: &Mutex<u64>) {
    *m.lock().unwrap() += 1;
}

#[test]
fn mutex_contention_is_blocked_time_of_the_waiter_only() {
    let _s = serial();
    let session = fgtrace::Session::start(Config::builtin().off_cpu(true)).unwrap();
    let m = Arc::new(Mutex::new(0u64));
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let holder = {
        let m = m.clone();
        std::thread::Builder::new()
            .name("holder".into())
            .spawn(move || hold_lock(&m, locked_tx))
            .unwrap()
    };
    locked_rx.recv().unwrap();
    join_session();
    let (_, truth) = measured(|| wait_for_lock(&m));
    holder.join().unwrap();
    let t = session.stop().unwrap();
    let Some(o) = off_cpu_of(&t, "mutex_contention_is_blocked_time_of_the_waiter_only") else {
        return;
    };
    let (_, w_blocked, _) = call_of(&t, o, "wait_for_lock");
    let (_, h_blocked, _) = call_of(&t, o, "hold_lock");
    let true_off = truth.off();
    eprintln!(
        "waiter blocked {w_blocked} ns (truth off {true_off}), holder blocked {h_blocked} ns"
    );
    assert!(
        w_blocked > 5_000_000,
        "the waiter waited about 15 ms: {w_blocked} ns"
    );
    assert!(
        close(w_blocked, true_off, 0.15, 1_000_000),
        "{w_blocked} vs {true_off}"
    );
    assert!(
        h_blocked < 500_000,
        "the holder never waits: {h_blocked} ns"
    );
}

#[test]
fn off_cpu_survives_a_file_round_trip() {
    let _s = serial();
    let session = fgtrace::Session::start(Config::builtin().off_cpu(true)).unwrap();
    compute_then_sleep();
    let t = session.stop().unwrap();
    let mut bytes = Vec::new();
    t.write_to(&mut bytes).unwrap();
    let back = Trace::read_from(&bytes[..]).unwrap();
    assert_eq!(back.meta().off_cpu, t.meta().off_cpu);
    assert!(t.meta().off_cpu.is_some());
}

#[test]
fn without_off_cpu_the_trace_says_nothing_about_it() {
    let _s = serial();
    let session = fgtrace::Session::start(Config::builtin()).unwrap();
    compute_only();
    let t = session.stop().unwrap();
    assert_eq!(t.meta().off_cpu, None);
}

#[fgtrace::traced]
fn short_nap() {
    std::thread::sleep(Duration::from_millis(1));
}

/// Many short-lived threads, each with its own ring (rings of exited threads
/// are read and freed as the session goes on): every thread's sleep is
/// there, in flight-recorder mode too.
#[test]
fn every_thread_of_many_short_lived_ones_has_its_blocked_time() {
    let _s = serial();
    for cfg in [
        Config::builtin().off_cpu(true),
        Config::builtin().off_cpu(true).flight_recorder(1024),
    ] {
        let session = fgtrace::Session::start(cfg).unwrap();
        for round in 0..4 {
            let hs: Vec<_> = (0..10).map(|_| std::thread::spawn(short_nap)).collect();
            for h in hs {
                h.join().unwrap();
            }
            if round == 1 {
                // Past the reader's check for exited threads (every 100 ms).
                std::thread::sleep(Duration::from_millis(150));
            }
        }
        let t = session.stop().unwrap();
        let Some(o) = off_cpu_of(
            &t,
            "every_thread_of_many_short_lived_ones_has_its_blocked_time",
        ) else {
            return;
        };
        let naps: Vec<_> = t.calls().collect();
        assert_eq!(naps.len(), 40);
        for c in naps {
            let off = o
                .within(c.thread, c.start_ns, c.end_ns())
                .expect("every thread recorded");
            assert!(off.blocked_ns >= 900_000, "a 1 ms sleep: {off:?}");
        }
        assert_eq!(o.lost(), 0);
    }
}

#[fgtrace::traced]
fn compute_then_nap(n: u64) -> u64 {
    let x = compute(Duration::from_millis(4));
    std::thread::sleep(Duration::from_millis(8 + n % 3));
    x
}

#[fgtrace::traced]
fn pad() {}

/// Work calls each thread of the killed child makes before it dies.
const KILLED_CALLS: usize = 6;

/// `KILLED_CALLS` calls that compute and sleep, each followed by a batch's
/// worth of pads (so it reaches the file), printing each one's truth as
/// `TRUTH thread-name wall-ns cpu-ns`.
fn work_and_report(name: &str) {
    use std::io::Write;
    for n in 0..KILLED_CALLS as u64 {
        join_session();
        let (_, truth) = measured(|| compute_then_nap(n));
        for _ in 0..16 {
            pad();
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "TRUTH {name} {} {}", truth.wall, truth.cpu).unwrap();
        out.flush().unwrap();
    }
}

/// Runs only as the child of `a_killed_recording_keeps_the_off_cpu_time_of_its_calls`:
/// records into a file with off-CPU time; its main thread and a worker
/// make `KILLED_CALLS` calls each that compute and sleep, then it dies by
/// SIGKILL without stopping: no final metadata, no end marker.
#[test]
#[ignore = "not a test: the child process of a_killed_recording_keeps_the_off_cpu_time_of_its_calls"]
fn child_killed_with_off_cpu() {
    let Ok(path) = std::env::var("FGTRACE_TEST_OFFCPU_CHILD") else {
        return;
    };
    // Batches of 16 records: every work call (and the pads after it) reaches
    // the collector, hence the file, as soon as its batch fills.
    let _s = fgtrace::Session::start(Config::builtin().off_cpu(true).output(path).batch_calls(16))
        .unwrap();
    let worker = std::thread::Builder::new()
        .name("worker".into())
        .spawn(|| work_and_report("worker"))
        .unwrap();
    work_and_report("main");
    worker.join().unwrap();
    // The collector writes and flushes while it idles.
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
}

/// "Data already recorded is never lost": a process killed while it records
/// into a file with off-CPU time leaves a file whose calls keep their
/// off-CPU time (written in sections of their own as the session goes, not
/// only in the final metadata a killed process never writes), and whose
/// views show it rather than "off-CPU unavailable".
#[test]
fn a_killed_recording_keeps_the_off_cpu_time_of_its_calls() {
    let test = "a_killed_recording_keeps_the_off_cpu_time_of_its_calls";
    let dir = std::env::temp_dir().join(format!("fgtrace-offcpu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("killed.fgt");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_killed_with_off_cpu",
            "--nocapture",
            "--ignored",
        ])
        .env("FGTRACE_TEST_OFFCPU_CHILD", &path)
        .output()
        .unwrap();
    assert!(!out.status.success(), "the child was killed: {out:?}");
    let mut truths: std::collections::BTreeMap<String, Vec<(u64, u64)>> = Default::default();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(rest) = l.strip_prefix("TRUTH ") else {
            continue;
        };
        let w: Vec<&str> = rest.split(' ').collect();
        truths
            .entry(w[0].to_string())
            .or_default()
            .push((w[1].parse().unwrap(), w[2].parse().unwrap()));
    }
    assert_eq!(truths.len(), 2, "{out:?}");
    assert!(truths.values().all(|v| v.len() == KILLED_CALLS), "{out:?}");
    let t = Trace::load(&path).expect("a killed recording still loads");
    let w = t.meta().warnings.join("\n");
    assert!(w.contains("did not finish"), "{w}");
    let o = t
        .meta()
        .off_cpu
        .as_ref()
        .expect("off_cpu was asked for: the cut file must say so");
    if !o.is_available() {
        if o.unavailable
            .as_deref()
            .is_some_and(|r| r.contains("perf_event"))
        {
            tools::missing::<()>(test, &format!("off-CPU unavailable: {}", o.reason()));
            return;
        }
        panic!("the cut file lost its off-CPU time: {o:?}");
    }
    let (mut got_sum, mut truth_sum, mut n) = (0u64, 0u64, 0);
    for (name, truths) in &truths {
        let mut calls: Vec<_> = t
            .calls()
            .filter(|c| {
                t.meta().site_name(c.site) == "compute_then_nap"
                    // The main thread of a test is named after the test.
                    && (t.meta().threads[c.thread as usize].name == "worker")
                        == (name == "worker")
            })
            .collect();
        calls.sort_by_key(|c| c.start_ns);
        assert_eq!(
            calls.len(),
            KILLED_CALLS,
            "every work call of {name} reached the file"
        );
        for (c, &(wall, cpu)) in calls.iter().zip(truths) {
            let off = t.off_cpu_of(c).expect("the thread has off-CPU time");
            let true_off = wall.saturating_sub(cpu);
            got_sum += off.total_ns();
            truth_sum += true_off;
            n += 1;
            assert!(
                off.blocked_ns >= 7_000_000,
                "{name}: an 8 ms sleep is blocked time: {off:?}"
            );
            assert!(
                close(off.total_ns(), true_off, 0.15, 1_000_000),
                "{name}: call at {} ns: off-CPU {} ns, truth {true_off} ns",
                c.start_ns,
                off.total_ns()
            );
        }
    }
    eprintln!(
        "killed child: off-CPU recovered from the cut file {got_sum} ns over {n} calls on 2 threads, truth {truth_sum} ns"
    );
    // The views show it: the graph's off-CPU column, not "unavailable".
    let mut text = Vec::new();
    fgtrace::view::graph::write_graph(
        t.meta(),
        t.events().map(Ok),
        &fgtrace::view::graph::GraphOptions {
            off_cpu: true,
            ..Default::default()
        },
        &mut text,
    )
    .unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(!text.contains("unavailable"), "{text}");
    assert!(text.contains("off-CPU"), "{text}");
    // Cut at every section boundary, the file loads and keeps at least the
    // off-CPU time of any shorter cut; it has off-CPU sections of its own.
    let bytes = std::fs::read(&path).unwrap();
    let (mut last, mut off_sections) = (0u64, 0);
    for (kind, at) in sections(&bytes) {
        let t = Trace::read_from(&bytes[..at])
            .unwrap_or_else(|e| panic!("cut at {at} of {}: {e}", bytes.len()));
        let o = t
            .meta()
            .off_cpu
            .as_ref()
            .expect("the header says it is recorded");
        let total: u64 = o.threads.iter().map(|t| t.total().total_ns()).sum();
        assert!(
            total >= last,
            "cut at {at}: {total} ns off-CPU, a shorter cut had {last}"
        );
        assert_eq!(o.is_available(), off_sections > 0, "cut at {at}: {o:?}");
        last = total;
        off_sections += (kind == 8) as usize;
    }
    assert!(off_sections > 0, "the collector wrote no off-CPU section");
    let whole: u64 = o.threads.iter().map(|t| t.total().total_ns()).sum();
    assert!(
        whole >= last && whole >= got_sum,
        "{whole} ns in the file, {last} ns before its last section, {got_sum} ns in the calls"
    );
    eprintln!(
        "killed child: {} bytes, {off_sections} off-CPU sections",
        bytes.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The section walk of a version-2 file: (kind, offset) of every section
/// after the header, up to the end marker.
fn sections(bytes: &[u8]) -> Vec<(u8, usize)> {
    let mut at = 20 + u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let mut out = Vec::new();
    while at < bytes.len() && bytes[at] != 0xFF {
        let (mut len, mut shift, mut i) = (0usize, 0, at + 1);
        loop {
            len |= ((bytes[i] & 0x7f) as usize) << shift;
            i += 1;
            if bytes[i - 1] & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        out.push((bytes[at], at));
        at = i + 4 + len;
    }
    out
}

/// What the collector writes in off-CPU sections while recording is what
/// the session computes at stop: the file without its final metadata (as a
/// killed process leaves it) holds the same intervals, up to the last few
/// ms; finished, the file says exactly what the session returned.
#[test]
fn off_cpu_sections_agree_with_the_final_metadata() {
    let _s = serial();
    let test = "off_cpu_sections_agree_with_the_final_metadata";
    let dir = std::env::temp_dir().join(format!("fgtrace-offcpu-agree-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("agree.fgt");
    let session = fgtrace::Session::start(Config::builtin().off_cpu(true).output(&path)).unwrap();
    compute_then_sleep();
    // Until the collector wrote the sleep's stretch (it writes every 10 ms):
    // the file as it is now (no final metadata yet) has it.
    let waited = std::time::Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(10));
        let now = std::fs::read(&path).unwrap();
        let o = Trace::read_from(&now[..])
            .ok()
            .and_then(|t| t.meta().off_cpu.clone())
            .unwrap_or_default();
        let blocked: u64 = o.threads.iter().map(|t| t.total().blocked_ns).sum();
        // Refused (the header says so): the skip below says why.
        let refused = o.unavailable.is_some_and(|r| r.contains("perf_event"));
        if blocked >= 9_000_000 || refused {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(5),
            "the file shows {blocked} ns blocked 5 s after a 10 ms sleep"
        );
    }
    // And a few writes more, for a preemption between the wake-up and the return.
    std::thread::sleep(Duration::from_millis(50));
    let t = session.stop().unwrap();
    let Some(o) = off_cpu_of(&t, test) else {
        return;
    };
    let loaded = Trace::load(&path).unwrap();
    assert_eq!(loaded.meta().off_cpu.as_ref(), Some(o));
    let bytes = std::fs::read(&path).unwrap();
    let secs = sections(&bytes);
    let meta_at = secs.iter().find(|s| s.0 == 6).expect("final metadata").1;
    assert!(secs.iter().any(|s| s.0 == 8), "off-CPU sections: {secs:?}");
    let cut = Trace::read_from(&bytes[..meta_at]).unwrap();
    let c = cut.meta().off_cpu.as_ref().unwrap();
    assert!(c.is_available(), "{c:?}");
    for th in &c.threads {
        let full = o.thread(th.thread).expect("the session has that thread");
        assert!(
            full.intervals.starts_with(&th.intervals),
            "thread {}: the sections' {:?} are not where the final {:?} begins",
            th.thread,
            th.intervals,
            full.intervals
        );
        assert!(th.lost <= full.lost);
    }
    // The call's own off-CPU time (its stretches were written before stop) is all there.
    let call = |t: &Trace| {
        t.calls()
            .find(|c| t.meta().site_name(c.site) == "compute_then_sleep")
            .unwrap()
    };
    let (a, b) = (call(&t), call(&cut));
    assert_eq!((a.start_ns, a.thread), (b.start_ns, b.thread));
    let (whole, from_sections) = (t.off_cpu_of(&a).unwrap(), cut.off_cpu_of(&b).unwrap());
    eprintln!("compute_then_sleep: off-CPU {whole:?} at stop, {from_sections:?} from the sections");
    assert_eq!(whole, from_sections);
    assert!(whole.blocked_ns >= 9_000_000, "{whole:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
