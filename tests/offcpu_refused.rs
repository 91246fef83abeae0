//! The refusal path of off-CPU time, forced:
//! `FGTRACE_OFFCPU=unavailable` makes every `perf_event_open` of a switch
//! ring fail, as a seccomp filter or `perf_event_paranoid` 3 would. Sessions
//! still record calls, the trace says why off-CPU time is missing, queries
//! return `None` and assertions are SKIPPED with the reason, never passed.
//! (A binary of its own: the variable is process-wide.)

use fgtrace::testing::{budget, CounterCheck, Options};
use fgtrace::view::TraceViews;
use std::sync::{Mutex, Once};
use std::time::Duration;

fn force_refusal() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| std::env::set_var("FGTRACE_OFFCPU", "unavailable"));
}

static SERIAL: Mutex<()> = Mutex::new(());

#[fgtrace::traced]
fn nap() {
    std::thread::sleep(Duration::from_millis(2));
}

/// The trace's off-CPU data: none, and the forced refusal as the reason.
fn says_why(t: &fgtrace::Trace) -> &fgtrace::trace::OffCpu {
    let o = t
        .meta()
        .off_cpu
        .as_ref()
        .expect("FGTRACE_OFFCPU asked for it");
    assert!(!o.is_available());
    assert!(o.threads.is_empty(), "no zeros that look measured");
    assert!(
        o.reason().contains("FGTRACE_OFFCPU=unavailable"),
        "{}",
        o.reason()
    );
    o
}

#[test]
fn a_session_records_calls_and_says_why_off_cpu_is_missing() {
    force_refusal();
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let session = fgtrace::Session::start(fgtrace::Config::default()).unwrap();
    nap();
    std::thread::spawn(nap).join().unwrap();
    let t = session.stop().unwrap();
    assert_eq!(t.calls().count(), 2, "calls are recorded all the same");
    says_why(&t);
    // And the file keeps saying so.
    let mut bytes = Vec::new();
    t.write_to(&mut bytes).unwrap();
    let back = fgtrace::Trace::read_from(&bytes[..]).unwrap();
    assert_eq!(back.meta().off_cpu, t.meta().off_cpu);
    let mut report = Vec::new();
    t.write_report(&Default::default(), &mut report).unwrap();
    let report = String::from_utf8(report).unwrap();
    assert!(
        report.contains("# off-CPU unavailable: perf_event_open("),
        "{report}"
    );
}

#[test]
fn capture_queries_are_none_and_assertions_skip_with_the_reason() {
    force_refusal();
    let cap = Options::new().off_cpu(true).capture(nap);
    assert_eq!(cap.calls("nap"), 1);
    let why = cap.off_cpu_unavailable().expect("refused").to_string();
    assert!(why.contains("FGTRACE_OFFCPU=unavailable"), "{why}");
    assert_eq!(cap.off_cpu("nap"), None);
    assert_eq!(cap.blocked("nap"), None);
    assert_eq!(cap.on_cpu("nap"), None);
    // `nap` blocks: were off-CPU time measured, this would fail. Skipped.
    match cap.assert_no_blocking("nap") {
        CounterCheck::Skipped(r) => {
            assert!(r.contains("off-CPU unavailable") && r.contains(&why), "{r}")
        }
        CounterCheck::Passed => panic!("a refused check must not pass"),
    }
    assert!(!cap.assert_off_cpu("nap", Duration::ZERO).passed());
}

/// Would fail if measured (`nap` sleeps 2 ms).
#[budget(nap(blocked = "0ns", off_cpu = "1us"))]
fn napping_without_blocking() {
    nap();
}

#[test]
fn a_budget_on_blocking_is_skipped_not_failed() {
    force_refusal();
    napping_without_blocking();
}

/// A file written while recording says from its first bytes why off-CPU
/// time is missing: read before the session stops (as a killed process
/// leaves it), it says the same as the finished one, not "not recorded".
#[test]
fn a_file_cut_while_recording_says_why_off_cpu_is_missing() {
    force_refusal();
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("fgtrace-refused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cut.fgt");
    let session = fgtrace::Session::start(
        fgtrace::Config::builtin()
            .off_cpu(true)
            .output(&path)
            .batch_calls(16),
    )
    .unwrap();
    // Before any call: the header alone is in the file, and says it.
    let early = std::fs::read(&path).unwrap();
    let t = fgtrace::Trace::read_from(&early[..]).expect("the header is written at start");
    assert_eq!(t.calls().count(), 0);
    says_why(&t);
    for _ in 0..20 {
        nap();
    }
    // The collector writes the batches and flushes while it idles.
    std::thread::sleep(Duration::from_millis(100));
    let cut = std::fs::read(&path).unwrap();
    let t = fgtrace::Trace::read_from(&cut[..]).expect("a file cut while recording loads");
    assert!(
        t.meta().warnings.join("").contains("did not finish"),
        "{:?}",
        t.meta().warnings
    );
    assert!(t.calls().count() >= 16, "the first batch reached the file");
    let o = says_why(&t);
    let done = session.stop().unwrap();
    assert_eq!(done.meta().off_cpu.as_ref().unwrap().reason(), o.reason());
    let _ = std::fs::remove_dir_all(&dir);
}
