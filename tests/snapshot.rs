//! `Capture::assert_snapshot`: per-function calls and allocation counts kept
//! in `tests/snapshots/<name>.fgsnap` under `CARGO_MANIFEST_DIR`; a changed
//! count fails with a readable diff, `FGTRACE_UPDATE=1` rewrites, a missing
//! file is written except under `CI`. One test: it changes the process's
//! environment step by step.

use fgtrace::alloc::Counting;
use fgtrace::testing;
use fgtrace::traced;
use std::alloc::System;
use std::hint::black_box;
use std::panic::{catch_unwind, AssertUnwindSafe};

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

#[traced]
fn tokenize(n: usize) -> usize {
    (0..n).map(|i| black_box(Box::new(i)).as_ref() + 1).sum()
}

#[traced]
fn parse(extra: bool) -> usize {
    let v: Vec<u32> = black_box(Vec::with_capacity(4));
    let n = tokenize(3) + if extra { tokenize(1) } else { 0 };
    n + v.capacity()
}

fn panic_text(r: Result<(), Box<dyn std::any::Any + Send>>) -> String {
    let e = r.expect_err("the snapshot assertion should fail");
    e.downcast_ref::<String>().cloned().unwrap_or_default()
}

#[test]
fn snapshots_are_written_compared_and_updated() {
    let dir = std::env::temp_dir().join(format!("fgtrace-snap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // SAFETY (edition 2021: safe fns): the only test of this binary.
    std::env::set_var("CARGO_MANIFEST_DIR", &dir);
    std::env::remove_var("CI");
    std::env::remove_var("FGTRACE_UPDATE");
    let file = dir.join("tests/snapshots/parse.fgsnap");

    // First run: written, passes.
    testing::capture(|| parse(false)).assert_snapshot("parse");
    let text = std::fs::read_to_string(&file).unwrap();
    let line = |name: &str| {
        text.lines()
            .find(|l| l.ends_with(&format!("::{name}")))
            .unwrap_or_else(|| panic!("{name} in {text}"))
            .split_whitespace()
            .take(4)
            .collect::<Vec<_>>()
            .join(" ")
    };
    // calls, allocs (inclusive), self allocs, bytes (inclusive)
    assert_eq!(line("parse"), "1 4 1 40", "{text}");
    assert_eq!(line("tokenize"), "1 3 3 24", "{text}");

    // Same figures: passes, file untouched.
    testing::capture(|| parse(false)).assert_snapshot("parse");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);

    // A changed count fails with a diff naming the function and the figure.
    let cap = testing::capture(|| parse(true));
    let msg = panic_text(catch_unwind(AssertUnwindSafe(|| {
        cap.assert_snapshot("parse")
    })));
    assert!(msg.contains("snapshot `parse`"), "{msg}");
    let row = |f: &str, fig: &str| {
        msg.lines()
            .find(|l| l.contains(f) && l.split_whitespace().nth(1) == Some(fig))
            .unwrap_or_else(|| panic!("no {fig} row for {f}: {msg}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("snapshot::parse", "allocs")[2..],
        ["4", "5", "+1,", "+25.0%"],
        "{msg}"
    );
    assert_eq!(
        row("snapshot::tokenize", "calls")[2..],
        ["1", "2", "+1,", "+100.0%"],
        "{msg}"
    );
    assert!(msg.contains("FGTRACE_UPDATE=1"), "{msg}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        text,
        "a failure does not rewrite"
    );

    // FGTRACE_UPDATE=1 rewrites; afterwards the new figures pass.
    std::env::set_var("FGTRACE_UPDATE", "1");
    cap.assert_snapshot("parse");
    std::env::remove_var("FGTRACE_UPDATE");
    let updated = std::fs::read_to_string(&file).unwrap();
    assert_ne!(updated, text);
    cap.assert_snapshot("parse");
    let old = catch_unwind(AssertUnwindSafe(|| {
        testing::capture(|| parse(false)).assert_snapshot("parse")
    }));
    assert!(panic_text(old).contains("changed"));

    // Under CI a missing snapshot fails and is not written.
    std::env::set_var("CI", "true");
    let msg = panic_text(catch_unwind(AssertUnwindSafe(|| {
        cap.assert_snapshot("fresh")
    })));
    assert!(
        msg.contains("does not exist") && msg.contains("CI"),
        "{msg}"
    );
    assert!(!dir.join("tests/snapshots/fresh.fgsnap").exists());
    // ... but FGTRACE_UPDATE=1 writes it there too.
    std::env::set_var("FGTRACE_UPDATE", "1");
    cap.assert_snapshot("fresh");
    assert!(dir.join("tests/snapshots/fresh.fgsnap").exists());
    std::env::remove_var("FGTRACE_UPDATE");
    std::env::remove_var("CI");

    // A bad name and a damaged file are clear failures.
    let msg = panic_text(catch_unwind(AssertUnwindSafe(|| {
        cap.assert_snapshot("../x")
    })));
    assert!(msg.contains("plain file name"), "{msg}");
    std::fs::write(&file, "1 2 three 4 5 parse\n").unwrap();
    let msg = panic_text(catch_unwind(AssertUnwindSafe(|| {
        cap.assert_snapshot("parse")
    })));
    assert!(msg.contains("`three` is not a count"), "{msg}");
    std::fs::remove_dir_all(&dir).ok();
}
