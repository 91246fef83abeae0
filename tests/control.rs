//! The control endpoint (`fgtrace::control`) from outside a running target:
//! recording over the socket, flight-recorder dumps, a busy endpoint, a
//! target that exits while recording, bad requests, other uids, stale
//! sockets, directory checks; and `Config::dump_on_panic` in this process.
//!
//! The targets are this test binary run again (`tests/support/control.rs`).

#[path = "support/control.rs"]
mod control_support;
#[path = "support/tools.rs"]
mod tools;

use control_support::*;
use fgtrace::control::protocol::{self, Reply, Settings};
use fgtrace::control::{Client, ControlError};
use fgtrace::Trace;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

#[test]
#[ignore = "not a test: the target and intruder processes of the other tests"]
fn zz_child_process() {
    match std::env::var(ROLE).as_deref() {
        Ok("target") => run_target(),
        Ok("intruder") => intruder(),
        _ => {}
    }
}

fn client(t: &Target) -> Client {
    Client::connect_path(&t.socket, t.pid()).expect("connect to the target")
}

fn record_ms(t: &Target, ms: u64) -> (Trace, String) {
    let settings = Settings {
        duration_ms: Some(ms),
        ..Settings::default()
    };
    let r = client(t)
        .record(settings, &AtomicBool::new(false), || {})
        .expect("record");
    (
        Trace::read_from(&r.bytes[..]).expect("a complete trace"),
        r.note,
    )
}

/// Records until each of the target's threads has done `n` rounds in the
/// recording (a client's `stop`, as Ctrl-C sends): however little CPU the
/// target gets, the trace holds that many rounds.
fn record_rounds(t: &Target, n: u64) -> (Trace, String) {
    let stop = AtomicBool::new(false);
    let r = client(t)
        .record(Settings::default(), &stop, || {
            t.wait_rounds(t.progress.rounds(), n);
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        })
        .expect("record");
    assert!(r.note.contains("stopped by the client"), "{}", r.note);
    (
        Trace::read_from(&r.bytes[..]).expect("a complete trace"),
        r.note,
    )
}

fn wait_for_session(t: &Target, want: &str) {
    t.wait_until(&format!("the target's session to become `{want}`"), |t| {
        client(t).status().unwrap().session == want
    });
}

#[test]
fn record_gets_the_calls_in_proportion_and_the_target_runs_on() {
    let dir = runtime_dir("record");
    let t = Target::start(&dir, "listen", None, true);
    // Socket and directory are private.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&t.socket), 0o600);
    assert_eq!(mode(t.socket.parent().unwrap()), 0o700);
    let s = client(&t).status().unwrap();
    assert_eq!((s.pid, s.session.as_str()), (t.pid(), "idle"));

    let (trace, note) = record_ms(&t, 400);
    assert!(note.contains("duration over"), "{note}");
    assert_eq!(trace.meta().pid, t.pid());
    let names: Vec<_> = trace
        .meta()
        .threads
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(names.iter().any(|n| n == "worker"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("fgtrace")),
        "fgtrace's own threads recorded: {names:?}"
    );
    assert_in_proportion(&counts(&trace));
    // The session is over, the target carries on and can record again.
    assert_eq!(client(&t).status().unwrap().session, "idle");
    let (again, _) = record_rounds(&t, 20);
    assert_in_proportion(&counts(&again));
    let (ok, out, err) = t.finish();
    assert!(ok, "{err}");
    assert_eq!(target_lines(&out), ["target: stopped"], "{out}");
    assert!(!err.contains("fgtrace"), "{err}");
    assert!(std::fs::read_dir(dir.join("fgtrace"))
        .unwrap()
        .next()
        .is_none());
}

#[test]
fn dump_gives_the_flight_recorders_last_calls_without_stopping_it() {
    let dir = runtime_dir("dump");
    let t = Target::start(&dir, "flight:64", None, true);
    wait_for_session(&t, "background");
    // Enough rounds (16 calls each) to go round the 64-call rings.
    t.wait_rounds(t.progress.rounds(), 10);
    let d = client(&t).dump().unwrap();
    let trace = Trace::read_from(&d.bytes[..]).unwrap();
    assert_eq!(trace.meta().threads.len(), 2, "{:?}", trace.meta().threads);
    for th in &trace.meta().threads {
        assert!(th.calls > 0 && th.calls <= 64, "{th:?}");
        assert!(th.lost > 0, "older calls overwritten are counted: {th:?}");
    }
    // Still running: a later dump has later calls.
    let status = client(&t).status().unwrap();
    assert_eq!(
        (status.session.as_str(), status.mode.as_deref()),
        ("background", Some("flight:64"))
    );
    let last = |t: &Trace| {
        t.calls()
            .map(|c| c.start_ns + t.meta().clock.start_mono_ns)
            .max()
    };
    let since = t.progress.rounds();
    t.wait_rounds(since, 2);
    let d2 = Trace::read_from(&client(&t).dump().unwrap().bytes[..]).unwrap();
    assert!(
        last(&d2) > last(&trace),
        "no later calls in a dump taken after {:?} -> {:?} rounds",
        since,
        t.progress.rounds()
    );
    // A client's recording takes the flight recorder's place; it comes back.
    let (rec, _) = record_rounds(&t, 20);
    assert_in_proportion(&counts(&rec));
    wait_for_session(&t, "background");
    t.wait_rounds(t.progress.rounds(), 2);
    // `stop` ends it and sends what it holds; a dump then has nothing.
    let stopped = Trace::read_from(&client(&t).stop().unwrap().bytes[..]).unwrap();
    assert!(stopped.meta().total_calls() > 0);
    match client(&t).dump() {
        Err(ControlError::Target(e)) => assert!(e.contains("no fgtrace session"), "{e}"),
        other => panic!("{other:?}"),
    }
    let (ok, _, err) = t.finish();
    assert!(ok, "{err}");
}

/// A program that runs its own stream-mode session: a dump has every call
/// it recorded so far, from both threads, and the program's session and
/// output go on as before.
#[test]
fn dump_gives_the_programs_own_stream_session_so_far() {
    let dir = runtime_dir("own");
    let t = Target::start_with(
        &dir,
        "listen",
        None,
        true,
        &[("FGTRACE_TEST_OWN_SESSION", "1")],
    );
    wait_for_session(&t, "program");
    let before = t.wait_rounds(t.progress.rounds(), 20);
    let d = client(&t).dump().unwrap();
    let after = t.progress.rounds();
    let trace = Trace::read_from(&d.bytes[..]).unwrap();
    assert!(
        trace
            .meta()
            .warnings
            .iter()
            .any(|w| w.contains("running session")),
        "{:?}",
        trace.meta().warnings
    );
    assert_in_proportion(&counts(&trace));
    // Every round since the start, per thread: 16 calls a round, the ones
    // done before the dump at least, the ones done after it at most.
    let meta = trace.meta();
    assert_eq!(meta.threads.len(), 2, "{:?}", meta.threads);
    for (i, name) in ["main", "worker"].iter().enumerate() {
        let th = meta
            .threads
            .iter()
            .find(|t| (t.name == "worker") == (*name == "worker"))
            .unwrap();
        assert!(
            th.calls >= 16 * before[i] && th.calls <= 16 * (after[i] + 1),
            "{name}: {} calls, {:?}..{:?} rounds",
            th.calls,
            before,
            after
        );
        assert_eq!(th.lost, 0, "{th:?}");
    }
    // The session runs on: a later dump has more.
    t.wait_rounds(t.progress.rounds(), 2);
    let d2 = Trace::read_from(&client(&t).dump().unwrap().bytes[..]).unwrap();
    assert!(d2.meta().total_calls() > meta.total_calls());
    let (ok, out, err) = t.finish();
    assert!(ok, "{err}");
    let lines = target_lines(&out);
    assert!(
        lines.iter().any(|l| l.starts_with("target: own session ")),
        "{out}"
    );
}

#[test]
fn a_second_client_is_told_busy() {
    let dir = runtime_dir("busy");
    let t = Target::start(&dir, "listen", None, true);
    let stop = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    std::thread::scope(|s| {
        let first = s.spawn(|| {
            client(&t).record(Settings::default(), &stop, || {
                started.store(true, std::sync::atomic::Ordering::SeqCst)
            })
        });
        t.wait_until("the first client's recording to start", |_| {
            started.load(std::sync::atomic::Ordering::SeqCst)
        });
        let since = t.progress.rounds();
        match client(&t).record(Settings::default(), &AtomicBool::new(false), || {}) {
            Err(ControlError::Busy(e)) => assert!(e.contains("busy"), "{e}"),
            other => panic!("the second client was not told busy: {other:?}"),
        }
        match client(&t).dump() {
            Err(ControlError::Busy(_)) => {}
            other => panic!("{other:?}"),
        }
        // A status is still answered.
        assert_eq!(client(&t).status().unwrap().session, "recording");
        // The first client's recording goes on meanwhile.
        t.wait_rounds(since, 20);
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let r = first
            .join()
            .unwrap()
            .expect("the first client gets its trace");
        assert!(r.note.contains("stopped by the client"), "{}", r.note);
        assert_in_proportion(&counts(&Trace::read_from(&r.bytes[..]).unwrap()));
    });
    let (ok, _, err) = t.finish();
    assert!(ok, "{err}");
}

#[test]
fn a_target_that_exits_while_recording_sends_a_complete_trace() {
    let dir = runtime_dir("exit");
    let mut t = Target::start(&dir, "listen", None, true);
    let c = client(&t);
    let stdin = t.stdin.take();
    let target = &t;
    let r = c
        .record(Settings::default(), &AtomicBool::new(false), move || {
            // Recording: once some rounds are in, the program ends on its own.
            target.wait_rounds(target.progress.rounds(), 20);
            writeln!(stdin.unwrap(), "exit").unwrap();
        })
        .expect("the trace arrives although the target exits");
    assert!(r.note.contains("the process is exiting"), "{}", r.note);
    let trace = Trace::read_from(&r.bytes[..]).expect("complete");
    assert_in_proportion(&counts(&trace));
    let (ok, out, err) = t.finish();
    assert!(ok, "{err}");
    assert_eq!(target_lines(&out), ["target: stopped"]);
    // The socket went with the process.
    assert!(std::fs::read_dir(dir.join("fgtrace"))
        .unwrap()
        .next()
        .is_none());
}

/// Raw frames: what a hostile or broken client can send.
fn raw(t: &Target, bytes: &[u8]) -> Option<Reply> {
    let mut s = UnixStream::connect(&t.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let body = protocol::read_frame(&mut s, protocol::MAX_REPLY).ok()?;
    Some(serde_json::from_slice(&body).expect("replies are JSON"))
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut v = (body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

#[test]
fn bad_and_oversized_requests_get_errors_and_the_target_carries_on() {
    let dir = runtime_dir("bad");
    let t = Target::start(&dir, "listen", None, true);
    let err = |bytes: &[u8]| raw(&t, bytes).expect("a reply").error.expect("an error");
    assert!(err(&frame(b"{not json")).contains("bad request"));
    assert!(err(&frame(br#"{"cmd":"format_disk"}"#)).contains("unknown command `format_disk`"));
    let e = err(&u32::MAX.to_be_bytes());
    assert!(e.contains("over the limit"), "{e}");
    let e = err(&frame(
        br#"{"cmd":"record","sample":"sometimes","depth":2}"#,
    ));
    assert!(e.contains("sample"), "{e}");
    let e = err(&frame(br#"{"cmd":"start","mode":"flight:0"}"#));
    assert!(e.contains("mode"), "{e}");
    // Cut short: a length and half a body, then nothing (the target answers
    // once the client hangs up or its time is over).
    let mut cut = frame(br#"{"cmd":"status"}"#);
    cut.truncate(8);
    assert!(raw(&t, &cut).is_none());
    // A client that connects and says nothing for longer than allowed.
    let mut idle = UnixStream::connect(&t.socket).unwrap();
    let mut b = [0u8; 4];
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    idle.read_exact(&mut b)
        .expect("an error reply after the timeout");
    // Random bytes, framed and unframed.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..200 {
        let n = (i * 7) % 90;
        let bytes: Vec<u8> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let _ = raw(&t, &if i % 2 == 0 { frame(&bytes) } else { bytes });
    }
    let s = client(&t).status().expect("still serving");
    assert_eq!(s.session, "idle");
    let (trace, _) = record_rounds(&t, 5);
    assert!(trace.meta().total_calls() > 0);
    let (ok, out, err) = t.finish();
    assert!(ok, "{err}");
    assert_eq!(target_lines(&out), ["target: stopped"]);
}

/// The intruder: drops to uid 65534 and asks the target for its status,
/// printing what happened. With `FGTRACE_TEST_DAC=1` it keeps
/// CAP_DAC_OVERRIDE, so the file permissions let it reach the socket and
/// only the target's SO_PEERCRED check is left to refuse it.
fn intruder() {
    let socket = std::env::var("FGTRACE_TEST_SOCKET").unwrap();
    let pid: u32 = std::env::var("FGTRACE_TEST_PID").unwrap().parse().unwrap();
    let dac = std::env::var("FGTRACE_TEST_DAC").is_ok();
    // SAFETY: plain syscalls on this process's credentials.
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0);
        assert_eq!(libc::setgid(65534), 0);
        if dac {
            assert_eq!(libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0), 0);
        }
        assert_eq!(libc::setuid(65534), 0);
        if dac {
            // capset(2), version 3: effective and permitted = CAP_DAC_OVERRIDE.
            let header: [u32; 2] = [0x2008_0522, 0];
            const CAP_DAC_OVERRIDE: u32 = 1;
            let data: [u32; 6] = [1 << CAP_DAC_OVERRIDE, 1 << CAP_DAC_OVERRIDE, 0, 0, 0, 0];
            let r = libc::syscall(libc::SYS_capset, header.as_ptr(), data.as_ptr());
            assert_eq!(r, 0, "capset: {}", std::io::Error::last_os_error());
        }
        assert_eq!(libc::getuid(), 65534);
    }
    let r = Client::connect_path(Path::new(&socket), pid).and_then(Client::status);
    println!("intruder: {r:?}");
    if dac {
        // A slow client: the target has refused it and hung up before its
        // request goes out. It must still be told why, not get a broken pipe.
        let r = Client::connect_path(Path::new(&socket), pid).and_then(|c| {
            std::thread::sleep(Duration::from_millis(1500));
            c.status()
        });
        println!("intruder-late: {r:?}");
    }
    // Looking the pid up as `fgtrace ctl PID` does (in the directory its
    // `$XDG_RUNTIME_DIR` names) says why it cannot be reached.
    let r = Client::connect(pid).and_then(Client::status);
    println!("intruder-find: {r:?}");
}

/// How to start a process as root: directly when we are root, through
/// `sudo -n` where that works without a password (a CI runner), else `None`.
fn as_root() -> Option<Vec<String>> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Some(Vec::new());
    }
    let sudo = std::process::Command::new("sudo")
        .args(["-n", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    sudo.then(|| vec!["sudo".into(), "-n".into(), "env".into()])
}

fn intrude(t: &Target, dac: bool, prefix: &[String]) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut vars = vec![
        format!("{ROLE}=intruder"),
        format!("FGTRACE_TEST_SOCKET={}", t.socket.display()),
        format!("FGTRACE_TEST_PID={}", t.pid()),
        format!(
            "XDG_RUNTIME_DIR={}",
            t.socket.parent().unwrap().parent().unwrap().display()
        ),
    ];
    if dac {
        vars.push("FGTRACE_TEST_DAC=1".into());
    }
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = std::process::Command::new(first);
            c.args(rest).args(&vars).arg(&exe);
            c
        }
        None => {
            let mut c = std::process::Command::new(&exe);
            c.envs(vars.iter().map(|v| v.split_once('=').unwrap()));
            c
        }
    };
    cmd.args([
        "--ignored",
        "--exact",
        ENTRY,
        "--nocapture",
        "--test-threads=1",
    ]);
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at = text.find("intruder: ").unwrap_or_else(|| panic!("{text}"));
    text[at..].lines().take(3).collect::<Vec<_>>().join("\n")
}

#[test]
fn another_uid_is_refused() {
    let Some(prefix) = as_root().or_else(|| {
        tools::missing(
            "another_uid_is_refused",
            "switching to uid 65534 needs root or password-less sudo",
        )
    }) else {
        return;
    };
    let dir = runtime_dir("uid");
    let t = Target::start(&dir, "listen", None, true);
    // The private directory keeps uid 65534 away from the socket ...
    let plain = intrude(&t, false, &prefix);
    assert!(
        plain.contains("PermissionDenied") && plain.contains("permission denied"),
        "{plain}"
    );
    // SAFETY: geteuid cannot fail.
    let owner = unsafe { libc::geteuid() };
    assert!(
        plain.contains(&format!(
            "intruder-find: Err(PermissionDenied(\"permission denied: pid {} belongs to uid {owner}",
            t.pid()
        )),
        "{plain}"
    );
    // ... and where file permissions do not (CAP_DAC_OVERRIDE), the target
    // checks the peer's uid itself.
    let dac = intrude(&t, true, &prefix);
    for what in ["intruder: ", "intruder-find: ", "intruder-late: "] {
        let line = dac.lines().find(|l| l.starts_with(what)).unwrap_or("");
        assert!(
            line.contains("PermissionDenied")
                && line.contains("refused: uid 65534 may not control"),
            "{what}{dac}"
        );
    }
    // The target serves its own user as before.
    assert_eq!(client(&t).status().unwrap().session, "idle");
    let (ok, _, err) = t.finish();
    assert!(ok, "{err}");
}

#[test]
fn a_stale_socket_of_a_dead_process_is_cleaned_up() {
    let dir = runtime_dir("stale");
    let sockets = dir.join("fgtrace");
    fgtrace::control::ensure_private_dir(&sockets).unwrap();
    // A process that has exited, and the socket it would have left behind.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = sockets.join(format!("{dead}.sock"));
    drop(UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    // A live process's socket that nobody listens on any more is stale too.
    let orphan = sockets.join(format!("{}.sock", 1));
    drop(UnixListener::bind(&orphan).unwrap());
    let unrelated = sockets.join("notes.txt");
    std::fs::write(&unrelated, "kept").unwrap();
    assert_eq!(fgtrace::control::clean_stale(&sockets), 2);
    assert!(!stale.exists() && !orphan.exists() && unrelated.exists());
    // A target starting in the directory cleans up as well.
    drop(UnixListener::bind(&stale).unwrap());
    let t = Target::start(&dir, "listen", None, true);
    assert!(!stale.exists(), "the target left the stale socket");
    assert!(t.socket.exists());
    let (ok, _, err) = t.finish();
    assert!(ok, "{err}");
}

#[test]
fn a_socket_accepts_connections_as_soon_as_it_appears() {
    // What `fgtrace record --pid` of a program just started does, and what
    // another process's stale-socket cleanup checks: a socket that exists
    // but refuses connections would be reported as not listening, or removed.
    let dir = runtime_dir("appear");
    for _ in 0..5 {
        let t = Target::start(&dir, "listen", None, false);
        let until = std::time::Instant::now() + control_support::PATIENCE;
        while !t.socket.exists() {
            assert!(std::time::Instant::now() < until, "no socket");
            std::hint::spin_loop();
        }
        let c = UnixStream::connect(&t.socket);
        assert!(c.is_ok(), "the socket appeared before it listened: {c:?}");
        let mode = std::fs::metadata(&t.socket).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the socket appeared before its mode was set");
        drop(c);
        let (ok, _, err) = t.finish();
        assert!(ok, "{err}");
    }
}

#[test]
fn a_forked_child_that_exits_leaves_the_endpoint_alone() {
    let dir = runtime_dir("fork");
    // Started: the target forked and reaped its child before its threads
    // went to work.
    let t = Target::start_with(&dir, "listen", None, true, &[("FGTRACE_TEST_FORK", "1")]);
    assert!(t.socket.exists(), "the child removed its parent's socket");
    assert_eq!(client(&t).status().unwrap().pid, t.pid());
    let (ok, out, err) = t.finish();
    assert!(ok, "{err}");
    assert_eq!(target_lines(&out), ["target: forked", "target: stopped"]);
}

#[test]
fn a_directory_other_users_could_use_is_refused() {
    let dir = runtime_dir("perm");
    let sockets = dir.join("fgtrace");
    std::fs::create_dir(&sockets).unwrap();
    std::fs::set_permissions(&sockets, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = fgtrace::control::ensure_private_dir(&sockets).unwrap_err();
    assert!(e.to_string().contains("mode 777"), "{e}");
    // The program runs on, without an endpoint, and says why on stderr.
    let t = Target::start(&dir, "1", Some(500), false);
    let (ok, out, err) = t.finish();
    assert!(ok, "{err}");
    assert!(
        err.contains("control endpoint not opened") && err.contains("mode 777"),
        "{err}"
    );
    assert!(target_lines(&out)
        .last()
        .unwrap()
        .starts_with("target: done"));
    assert!(std::fs::read_dir(&sockets).unwrap().next().is_none());
    // A symlink to a private directory is refused too.
    std::fs::remove_dir(&sockets).unwrap();
    let real = dir.join("real");
    fgtrace::control::ensure_private_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, &sockets).unwrap();
    let e = fgtrace::control::ensure_private_dir(&sockets).unwrap_err();
    assert!(e.to_string().contains("symlink"), "{e}");
    // A bad value of the variable is one line, and the program runs.
    let t = Target::start(&dir, "sometimes", Some(500), false);
    let (ok, _, err) = t.finish();
    assert!(ok && err.contains("FGTRACE_CONTROL=`sometimes`"), "{err}");
}

#[test]
fn a_program_run_with_fgtrace_control_dumps_its_calls_on_a_panic() {
    let dir = runtime_dir("envpanic");
    let path = dir.join("panic.fgt");
    let mut t = Target::start_with(
        &dir,
        "1",
        None,
        true,
        &[("FGTRACE_DUMP_ON_PANIC", path.to_str().unwrap())],
    );
    wait_for_session(&t, "background");
    t.wait_rounds(t.progress.rounds(), 5);
    writeln!(t.stdin.take().unwrap(), "panic").unwrap();
    let out = t.finish();
    assert!(!out.0, "the target panicked");
    assert!(
        out.2.contains("fgtrace: the last") && out.2.contains("panic.fgt"),
        "{}",
        out.2
    );
    let dump = Trace::load(&path).expect("a readable dump");
    let c = counts(&dump);
    assert!(c["tick"] > 0 && c["checksum"] > 0, "{c:?}");
    let unwound: Vec<_> = dump
        .calls()
        .filter(|c| c.unwound())
        .map(|c| dump.meta().site_name(c.site).to_string())
        .collect();
    assert_eq!(unwound, ["explode"]);
    assert_eq!(dump.meta().threads.len(), 2);
}

#[fgtrace::traced]
fn doomed(n: u32) -> u32 {
    if n == 3 {
        panic!("the third call fails");
    }
    checksum(&n.to_le_bytes())
}

#[test]
fn a_panic_dumps_the_last_calls_of_every_thread_first() {
    let dir = runtime_dir("panic");
    let path = dir.join("panic.fgt");
    let session = fgtrace::Session::start(
        fgtrace::Config::builtin()
            .flight_recorder(8)
            .dump_on_panic(&path),
    )
    .unwrap();
    std::thread::Builder::new()
        .name("bystander".into())
        .spawn(|| {
            for i in 0..20 {
                tick(i);
            }
        })
        .unwrap()
        .join()
        .unwrap();
    let r = std::thread::Builder::new()
        .name("victim".into())
        .spawn(|| (0..5).map(doomed).fold(0, u32::wrapping_add))
        .unwrap()
        .join();
    assert!(r.is_err(), "the thread panicked");
    let dump = Trace::load(&path).expect("the panic hook wrote a readable trace");
    let by_thread = |name: &str| {
        let i = dump
            .meta()
            .threads
            .iter()
            .position(|t| t.name == name)
            .unwrap_or_else(|| panic!("no thread {name}: {:?}", dump.meta().threads));
        dump.calls()
            .filter(|c| c.thread == i as u32)
            .map(|c| dump.meta().site_name(c.site).to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(by_thread("bystander").len(), 8, "the last 8 calls");
    // The victim's calls before the panic: doomed(0..=2) and their
    // checksums; and the call that panics, open when the hook ran, as an
    // unwound call.
    let v = by_thread("victim");
    assert_eq!(v.iter().filter(|n| *n == "doomed").count(), 4, "{v:?}");
    let unwound: Vec<_> = dump
        .calls()
        .filter(|c| c.unwound())
        .map(|c| dump.meta().site_name(c.site).to_string())
        .collect();
    assert_eq!(unwound, ["doomed"]);
    // The session records on.
    let trace = session.stop().unwrap();
    assert!(trace.meta().total_calls() >= 8);
}
