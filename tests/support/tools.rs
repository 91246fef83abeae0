// Outside tools some tests run (Go's pprof, Chromium, cross compilers, qemu-user).
//
// Included by the tests that need one (`#[path = "support/tools.rs"] mod tools;`).
// A missing tool is a visible skip on a developer's machine and a failure where
// `FGTRACE_REQUIRE_TOOLS=1` is set, as `.ci/run` sets it: CI never skips one.

use std::io::{ErrorKind, Write};
use std::process::Command;

/// The variable that turns a missing tool from a skip into a failure.
pub const REQUIRE: &str = "FGTRACE_REQUIRE_TOOLS";

/// Whether missing tools fail the tests (`FGTRACE_REQUIRE_TOOLS` set, not `0`).
pub fn required() -> bool {
    std::env::var_os(REQUIRE).is_some_and(|v| !v.is_empty() && v != "0")
}

/// `program` if running it with `args` works. Otherwise: with
/// `FGTRACE_REQUIRE_TOOLS` set, a panic naming the Debian `package`; without
/// it, a `SKIPPED` line on the terminal (written past libtest's capture, so it
/// shows for a passing test) and `None`.
#[allow(dead_code)]
pub fn tool(program: &str, args: &[&str], package: &str, test: &str) -> Option<String> {
    let why = match Command::new(program).args(args).output() {
        Ok(out) if out.status.success() => return Some(program.to_owned()),
        Ok(out) => format!(
            "`{program} {}` failed ({})",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => format!("`{program}` is not installed"),
        Err(e) => format!("`{program}` cannot run ({e})"),
    };
    missing(
        test,
        &format!("{why}; install it with `apt-get install -y {package}`"),
    )
}

/// Reports an outside tool as missing for `test`: a panic where tools are
/// required, a visible skip otherwise (see [`tool`]).
#[allow(dead_code)]
pub fn missing<T>(test: &str, why: &str) -> Option<T> {
    if required() {
        panic!("{test}: {why} ({REQUIRE} is set, so this test does not skip)");
    }
    // Straight to the stream: libtest captures `eprintln!`, not this.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} (set {REQUIRE}=1 to make this a failure)"
    );
    None
}
