//! The stack pointer a call records at entry (the sampler's split between a
//! traced call's own frame and its callees' frames, `unwind::walk_split`) is
//! the traced fn's own, whichever way the probe took: a session's steady
//! state, a session with auto-exclude, a capture. A callee's frame record
//! sits below the caller's stack pointer, so a recorded value below it (the
//! stack pointer of a probe function deeper in the stack) puts the first
//! callee's frame on the traced call's side of the split.

#![cfg(target_arch = "x86_64")]

use fgtrace::core::probe::shadow_top;
use fgtrace::{Config, Session};
use std::sync::Mutex;
use std::time::Duration;

static ONE_SESSION: Mutex<()> = Mutex::new(());

fn rsp() -> u64 {
    let sp: u64;
    // SAFETY: reads a register.
    unsafe {
        std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}

/// The stack pointer recorded for this call, and the fn's own (read in its
/// body, where it no longer moves).
#[fgtrace::traced]
#[inline(never)]
fn probe_sp() -> (u64, u64) {
    let here = rsp();
    let (depth, recorded) = shadow_top();
    assert!(depth > 0, "the call is on the shadow stack");
    (recorded, here)
}

fn check(how: &str) {
    let (recorded, here) = probe_sp();
    assert!(
        recorded >= here,
        "{how}: the call recorded sp {recorded:#x}, below its own {here:#x} by {} bytes",
        here - recorded
    );
}

#[test]
fn a_session_records_the_traced_fns_stack_pointer() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let s = Session::start(Config::builtin()).expect("session");
    check("first call");
    check("steady state");
    drop(s.stop().expect("trace"));
}

#[test]
fn a_session_with_auto_exclude_records_the_traced_fns_stack_pointer() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let s =
        Session::start(Config::builtin().auto_exclude(Duration::from_nanos(50))).expect("session");
    check("auto-exclude, first call");
    check("auto-exclude");
    drop(s.stop().expect("trace"));
}

#[test]
fn a_capture_records_the_traced_fns_stack_pointer() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let cap = fgtrace::testing::capture(|| {
        check("capture, first call");
        check("capture");
    });
    assert_eq!(cap.calls("probe_sp"), 2);
}
