// Running the `fgtrace` binary from the fgtrace-cli tests: the command, its
// output as text, scratch directories, one recording at a time, and the check
// that a failure is one clear line.
//
// Included by cli/tests (`#[path = "../../tests/support/cli.rs"] mod cli_support;`):
// `CARGO_BIN_EXE_fgtrace` exists only there.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `fgtrace` with `args`.
pub fn fgtrace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(args)
        .output()
        .expect("run fgtrace")
}

/// Runs `fgtrace` with `args`, which must succeed.
pub fn fgtrace_ok(args: &[&str]) -> Output {
    let out = fgtrace(args);
    assert!(
        out.status.success(),
        "fgtrace {args:?}: {}",
        text(&out.stderr)
    );
    out
}

/// An output stream as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh scratch directory for this test binary, this process and `tag`.
pub fn tempdir(tag: &str) -> PathBuf {
    let name = format!(
        "fgtrace-{}-{tag}-{}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    );
    let d = std::env::temp_dir().join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Sessions are process-wide: the tests of a binary take turns recording.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `work` in a session of the built-in configuration (one at a time)
/// and saves the trace as `dir/run.fgt`.
pub fn record(dir: &Path, work: impl FnOnce()) -> (fgtrace::Trace, PathBuf) {
    record_as(dir, "run.fgt", fgtrace::Config::builtin(), work)
}

/// Runs `work` in a session of `config` (one at a time) and saves the trace
/// as `dir/name`.
pub fn record_as(
    dir: &Path,
    name: &str,
    config: fgtrace::Config,
    work: impl FnOnce(),
) -> (fgtrace::Trace, PathBuf) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let session = fgtrace::Session::start(config).unwrap();
    work();
    let trace = session.stop().unwrap();
    let path = dir.join(name);
    trace.save(&path).unwrap();
    (trace, path)
}

/// Runs `f` on a new thread named `name` and waits for it.
pub fn on_thread<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

/// A failed run that did not panic and whose error output contains `expect`.
#[track_caller]
pub fn assert_clean_failure(out: &Output, expect: &str) {
    let err = text(&out.stderr);
    assert!(!out.status.success(), "should fail: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(expect), "expected `{expect}` in: {err}");
}

/// The same, said in one line.
#[track_caller]
pub fn assert_one_line_failure(out: &Output, expect: &str) {
    assert_clean_failure(out, expect);
    let err = text(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
}
