//! The skip path, forced: `FGTRACE_COUNTERS=off` makes counters unavailable
//! as in a container or a VM without a PMU. Instruction assertions are then
//! skipped with the reason, never passed; `Required` fails instead.
//! (A binary of its own: the variable is process-wide.)

use fgtrace::testing::{self, CounterCheck, CounterStatus, Counters, Options};
use std::panic::catch_unwind;
use std::sync::Once;

/// Sets the variable once, before any test of this binary reads it (every
/// test calls this first, so no thread reads the environment meanwhile).
fn force_off() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| std::env::set_var("FGTRACE_COUNTERS", "off"));
}

#[fgtrace::traced]
fn work(n: u64) -> u64 {
    (0..n).map(std::hint::black_box).sum()
}

#[test]
fn instruction_budgets_are_skipped_with_the_reason() {
    force_off();
    let cap = Options::new()
        .counters(Counters::Auto)
        .capture(|| work(100));
    let why = match cap.counters() {
        CounterStatus::Unavailable(why) => why.clone(),
        other => panic!("counters forced off, but {other:?}"),
    };
    assert!(why.contains("FGTRACE_COUNTERS=off"), "{why}");
    // Time queries still work; instruction queries say "unknown", not 0.
    assert_eq!(cap.calls("work"), 1);
    assert_eq!(cap.instructions("work"), None);
    assert_eq!(cap.instructions_of("work"), None);
    // A budget that could never hold is skipped, not passed.
    let r = cap.assert_instructions("work", 0);
    assert_eq!(
        r,
        CounterCheck::Skipped(format!("instruction budget of `work` (0 per call): {why}"))
    );
    assert!(!r.passed());
    assert!(matches!(
        cap.assert_instructions_total("work", 0),
        CounterCheck::Skipped(_)
    ));
    // No counters event in the trace either.
    assert!(cap.trace().meta().counters.is_empty());
}

#[test]
fn repeated_runs_skip_too() {
    force_off();
    let runs = Options::new()
        .counters(Counters::Auto)
        .runs(3)
        .repeat(|| work(10));
    assert!(matches!(
        runs.median().assert_instructions("work", 0),
        CounterCheck::Skipped(_)
    ));
    assert!(matches!(
        runs.min().assert_instructions_total("work", 0),
        CounterCheck::Skipped(_)
    ));
    assert_eq!(runs.min().instructions("work"), None);
    runs.median()
        .assert_max("work", std::time::Duration::from_secs(5));
}

#[test]
fn required_counters_fail_instead_of_skipping() {
    force_off();
    let err = catch_unwind(|| {
        Options::new()
            .counters(Counters::Required)
            .capture(|| work(10))
    })
    .unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert_eq!(
        msg,
        "fgtrace: instruction counters are required but unavailable: counters forced off by FGTRACE_COUNTERS=off"
    );
    // And the thread is not left capturing.
    assert!(testing::link().is_none());
}

#[test]
fn capture_counted_skips_as_well() {
    force_off();
    let cap = testing::capture_counted(|| work(10));
    assert!(!cap.counters().is_counting());
    assert!(matches!(
        cap.assert_instructions("work", 1),
        CounterCheck::Skipped(_)
    ));
}
