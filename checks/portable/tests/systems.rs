//! What fgtrace does on the system the tests run on. Everywhere: a
//! `Session` records `#[traced]` calls on several threads with the calibrated
//! clock, and the trace saves, loads and renders. Where something needs
//! Linux (sampling, off-CPU time, hardware counters) or Unix (the control
//! endpoint, whole-program recording), it works there and elsewhere fails
//! with an error that says it is not supported on this system, leaving
//! nothing running. `.ci/run` runs these on Linux (x86_64) and on Windows
//! (`x86_64-pc-windows-gnu`, under Wine).

use fgtrace::view::graph::GraphOptions;
use fgtrace::view::TraceViews;
use fgtrace::{Config, Error, Session, Trace};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// One session per process: the tests that start one take turns.
static ONE_SESSION: Mutex<()> = Mutex::new(());

const UNSUPPORTED: &str = "not supported on this system";

#[fgtrace::traced]
fn leaf(x: u64) -> u64 {
    x.wrapping_mul(31) ^ 7
}

#[fgtrace::traced]
fn branch(n: u64) -> u64 {
    (0..n).map(leaf).fold(0, u64::wrapping_add)
}

#[fgtrace::traced]
fn nap(d: Duration) {
    std::thread::sleep(d);
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("fgtrace-portable-{}-{name}", std::process::id()))
}

fn calls_of<'a>(t: &'a Trace, name: &'a str) -> impl Iterator<Item = fgtrace::Call> + 'a {
    t.calls().filter(move |c| {
        let n = t.meta().site_name(c.site);
        n == name || n.ends_with(&format!("::{name}"))
    })
}

#[test]
fn a_session_records_threads_on_the_calibrated_clock_and_the_trace_reads_back() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let session = Session::start(Config::default()).expect("a session starts");
    let here = branch(10);
    let there = std::thread::Builder::new()
        .name("worker".into())
        .spawn(|| branch(5))
        .unwrap()
        .join()
        .unwrap();
    nap(Duration::from_millis(50));
    let trace = session.stop().expect("the session stops");
    assert_eq!(here, (0..10).map(leaf).fold(0, u64::wrapping_add));
    assert_eq!(there, (0..5).map(leaf).fold(0, u64::wrapping_add));

    let path = temp("session.fgt");
    trace.save(&path).expect("the trace saves");
    let back = Trace::load(&path).expect("the trace loads");
    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        back.calls().collect::<Vec<_>>(),
        trace.calls().collect::<Vec<_>>()
    );

    // Two threads: 10 leaves under `branch` on this one, 5 on the worker.
    let threads = &back.meta().threads;
    let worker = threads
        .iter()
        .position(|t| t.name == "worker")
        .unwrap_or_else(|| panic!("no worker thread in {threads:?}")) as u32;
    let branches: Vec<_> = calls_of(&back, "branch").collect();
    let leaves: Vec<_> = calls_of(&back, "leaf").collect();
    assert_eq!(branches.len(), 2, "{branches:?}");
    assert_eq!(leaves.len(), 15);
    for (on_worker, n) in [(false, 10), (true, 5)] {
        let b = branches
            .iter()
            .find(|b| (b.thread == worker) == on_worker)
            .expect("a branch on each thread");
        let inside: Vec<_> = leaves
            .iter()
            .filter(|l| l.thread == b.thread)
            .inspect(|l| {
                assert_eq!(l.depth, b.depth + 1);
                assert!(l.start_ns >= b.start_ns && l.end_ns() <= b.end_ns());
            })
            .collect();
        assert_eq!(inside.len(), n);
    }

    // The tick counter is calibrated against the system's monotonic clock:
    // a 50 ms sleep lasts 50 ms (more if the system sleeps longer).
    let naps: Vec<_> = calls_of(&back, "nap").collect();
    assert_eq!(naps.len(), 1);
    let ms = naps[0].dur_ns as f64 / 1e6;
    assert!((49.0..2000.0).contains(&ms), "a 50 ms nap took {ms:.3} ms");

    let mut graph = Vec::new();
    back.write_graph(&GraphOptions::default(), &mut graph)
        .unwrap();
    let graph = String::from_utf8(graph).unwrap();
    assert!(graph.contains("branch() {"), "{graph}");
    assert_eq!(graph.matches("leaf();").count(), 15, "{graph}");
}

#[test]
fn what_needs_linux_works_there_and_says_it_is_not_supported_elsewhere() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let sampled =
        Session::start(Config::default().sampling(fgtrace::sampler::Sampling::timer(999)))
            .map(|s| s.stop().map(drop));
    let off_cpu = Session::start(Config::default().off_cpu(true)).map(|s| s.stop().map(drop));
    let counted = Session::start(Config::default().counters([fgtrace::Counter::Instructions]))
        .map(|s| s.stop().map(drop));
    if cfg!(target_os = "linux") {
        sampled
            .expect("sampling starts on Linux")
            .expect("and stops");
        // Off-CPU time is recorded where the kernel allows, else the trace
        // says why: the session records either way.
        off_cpu
            .expect("an off-CPU session starts on Linux")
            .expect("and stops");
        // Counters need a PMU, which many machines lack: only the reason
        // may differ.
        if let Err(e) = counted {
            assert!(!e.to_string().contains(UNSUPPORTED), "{e}");
        }
    } else {
        match sampled {
            Err(Error::Sampler(m)) => assert!(
                m.contains(UNSUPPORTED) && m.contains("sampling") && m.contains("Linux"),
                "{m}"
            ),
            Err(e) => panic!("not the sampler's error: {e}"),
            Ok(_) => panic!("a sampling session started"),
        }
        match off_cpu {
            Err(Error::OffCpu(m)) => assert!(m.contains(UNSUPPORTED), "{m}"),
            Err(e) => panic!("not the off-CPU error: {e}"),
            Ok(_) => panic!("an off-CPU session started"),
        }
        match counted {
            Err(Error::Counters(m)) => assert!(m.contains(UNSUPPORTED), "{m}"),
            Err(e) => panic!("not the counters' error: {e}"),
            Ok(_) => panic!("a session with counters started"),
        }
    }
    // A refused session leaves nothing running: the next one starts.
    Session::start(Config::default())
        .expect("a plain session starts after the refused ones")
        .stop()
        .unwrap();
}

/// The program beside these tests, `src/main.rs`, run with `env`.
fn run_program(env: &[(&str, &std::ffi::OsStr)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fgtrace-portable"));
    cmd.arg("4")
        .env_remove("FGTRACE_RECORD")
        .env_remove("FGTRACE_CONTROL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the program runs");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next(),
        // (Computed untraced: a session of another test may be recording.)
        Some(
            format!(
                "4 rounds: {}",
                4 * (0..3).map(|x: u64| x.wrapping_mul(31) ^ 7).sum::<u64>()
            )
            .as_str()
        )
    );
    out
}

#[test]
fn whole_program_recording_records_on_unix_and_says_it_is_not_supported_elsewhere() {
    let dir = temp("record");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = run_program(&[("FGTRACE_RECORD", dir.as_os_str())]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "fgt"))
        .collect();
    if cfg!(unix) {
        assert_eq!(files.len(), 1, "{files:?}; stderr: {stderr}");
        let t = Trace::load(&files[0]).expect("the program's trace loads");
        assert_eq!(calls_of(&t, "branch").count(), 4);
        assert_eq!(calls_of(&t, "leaf").count(), 12);
    } else {
        assert!(files.is_empty(), "{files:?}");
        assert!(
            stderr.contains("FGTRACE_RECORD") && stderr.contains(UNSUPPORTED),
            "stderr: {stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(unix)]
#[test]
fn the_control_endpoint_answers_on_unix() {
    use std::os::unix::fs::DirBuilderExt;
    let dir = temp("control");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let socket = fgtrace::control::listen_in(&dir).expect("the endpoint opens");
    let status = fgtrace::control::Client::connect_path(&socket, std::process::id())
        .expect("a client connects")
        .status()
        .expect("and gets the status");
    assert_eq!(status.pid, std::process::id());
    fgtrace::control::close();
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(not(unix))]
#[test]
fn the_control_endpoint_says_it_is_not_supported() {
    let e = fgtrace::control::listen().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Other);
    assert!(e.to_string().contains(UNSUPPORTED), "{e}");
    // And at process start, for `FGTRACE_CONTROL`.
    let out = run_program(&[("FGTRACE_CONTROL", std::ffi::OsStr::new("1"))]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("control endpoint not opened") && stderr.contains(UNSUPPORTED),
        "stderr: {stderr}"
    );
}
