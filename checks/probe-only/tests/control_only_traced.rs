//! `FGTRACE_CONTROL=1` on a program that only adds `#[traced]`
//! (`src/bin/traced_only.rs`): the constructor opens the endpoint although
//! the program never calls fgtrace, a recording from outside gets its calls
//! (2 `leaf` per `step`), the flight recorder can be dumped, and the
//! program's own output is what it is without control.

use fgtrace::control::{Client, Settings};
use std::os::unix::fs::DirBuilderExt;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_traced_only");

#[test]
fn a_program_with_only_traced_can_be_recorded_from_outside() {
    let xdg = std::env::temp_dir().join(format!("fgtrace-only-traced-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&xdg);
    std::fs::DirBuilder::new().mode(0o700).create(&xdg).unwrap();
    let plain = Command::new(BIN)
        .arg("1500")
        .env_remove("FGTRACE_CONTROL")
        .output()
        .unwrap();
    assert!(plain.status.success());

    let child = Command::new(BIN)
        .arg("1500")
        .env("FGTRACE_CONTROL", "1")
        // A whole-program recording would take the flight recorder's place.
        .env_remove("FGTRACE_RECORD")
        .env("XDG_RUNTIME_DIR", &xdg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let socket = xdg.join("fgtrace").join(format!("{pid}.sock"));
    let until = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(Instant::now() < until, "the constructor opened no endpoint");
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = Client::connect_path(&socket, pid)
        .unwrap()
        .status()
        .unwrap();
    assert_eq!(status.pid, pid);

    let rec = Client::connect_path(&socket, pid)
        .unwrap()
        .record(
            Settings {
                duration_ms: Some(300),
                ..Settings::default()
            },
            &AtomicBool::new(false),
            || {},
        )
        .unwrap();
    let trace = fgtrace::Trace::read_from(&rec.bytes[..]).unwrap();
    let count = |name: &str| {
        trace
            .calls()
            .filter(|c| trace.meta().site_name(c.site) == name)
            .count() as i64
    };
    let (step, leaf) = (count("step"), count("leaf"));
    assert!(step > 50, "{step} steps in 300 ms");
    assert!((leaf - 2 * step).abs() <= 2, "{leaf} leaf for {step} step");

    // FGTRACE_CONTROL=1 keeps a flight recorder running: it comes back
    // after the recording, and a dump has the last calls.
    let mut dumped = None;
    for _ in 0..200 {
        if let Ok(d) = Client::connect_path(&socket, pid).unwrap().dump() {
            let t = fgtrace::Trace::read_from(&d.bytes[..]).unwrap();
            if t.meta().total_calls() > 0 {
                dumped = Some(t);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let dumped = dumped.expect("a dump with calls");
    assert!(dumped
        .calls()
        .all(|c| matches!(dumped.meta().site_name(c.site), "step" | "leaf")));

    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "the program's output changed under control"
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert!(!socket.exists(), "the socket is removed at exit");
    let _ = std::fs::remove_dir_all(&xdg);
}
