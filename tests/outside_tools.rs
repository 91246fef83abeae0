//! The rule for tests that need an outside tool (`tests/support/tools.rs`):
//! present, it is used; missing, the test skips visibly, unless
//! `FGTRACE_REQUIRE_TOOLS` is set (as `.ci/run` sets it), where it fails.

#[path = "support/tools.rs"]
mod tools;

use std::sync::Mutex;

/// The tests below change the process environment: one at a time.
static ENV: Mutex<()> = Mutex::new(());

fn with_require<T>(value: Option<&str>, f: impl FnOnce() -> T) -> T {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let old = std::env::var_os(tools::REQUIRE);
    // SAFETY: the lock above serialises every environment access in this binary.
    unsafe {
        match value {
            Some(v) => std::env::set_var(tools::REQUIRE, v),
            None => std::env::remove_var(tools::REQUIRE),
        }
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    unsafe {
        match old {
            Some(v) => std::env::set_var(tools::REQUIRE, v),
            None => std::env::remove_var(tools::REQUIRE),
        }
    }
    r.unwrap_or_else(|e| std::panic::resume_unwind(e))
}

#[test]
fn a_present_tool_is_used() {
    let found = with_require(Some("1"), || {
        tools::tool("sh", &["-c", "exit 0"], "dash", "present")
    });
    assert_eq!(found.as_deref(), Some("sh"));
}

#[test]
fn a_missing_tool_skips_when_not_required() {
    for v in [None, Some(""), Some("0")] {
        let found = with_require(v, || {
            tools::tool("fgtrace-no-such-tool", &["--version"], "none", "missing")
        });
        assert_eq!(found, None, "{v:?}");
    }
}

#[test]
fn a_missing_or_broken_tool_fails_when_required() {
    for (program, args) in [
        ("fgtrace-no-such-tool", &["--version"][..]),
        ("sh", &["-c", "exit 3"][..]),
    ] {
        let r = with_require(Some("1"), || {
            std::panic::catch_unwind(|| tools::tool(program, args, "pkg-name", "required"))
        });
        let msg = r.expect_err("a required tool that is missing fails the test");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("apt-get install -y pkg-name"), "{msg}");
        assert!(msg.contains("FGTRACE_REQUIRE_TOOLS"), "{msg}");
    }
}
