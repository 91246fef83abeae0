//! Recording a whole program from its start, with no code in it:
//! `fgtrace record -- COMMAND` sets `FGTRACE_RECORD=DIR` in COMMAND's
//! environment, and every process of COMMAND's tree that links fgtrace
//! writes its own trace, `DIR/<program>-<pid>.fgt`.
//!
//! The protocol is the variable alone, so it works without the command too
//! (`FGTRACE_RECORD=traces cargo test`):
//!
//! * **When.** The runtime's constructor (`startup.rs`) reads `FGTRACE_RECORD` before
//!   `main`. If it names a directory, a session starts at once with the
//!   settings of the other `FGTRACE_*` variables (`FGTRACE_SAMPLE`,
//!   `FGTRACE_FILTER`, `FGTRACE_MODE=flight:N`, ...; see [`crate::config`]),
//!   streaming to the file ([`Config::output`]): a process that is killed
//!   keeps what was written, readable up to its last complete section.
//! * **Until.** The exit: return from `main`, `std::process::exit` and a
//!   panic in `main` all end in `exit`, where an `atexit` handler stops the
//!   session and completes the file. SIGINT, SIGTERM and SIGHUP, where the
//!   program left them at their default, are caught: the trace is completed,
//!   then the signal is raised again with its default action, so the
//!   process still dies of it (its parent sees the same status).
//! * **Making way.** A session the program starts itself (`Session::start`,
//!   a `fgtrace::testing` capture, `fgtrace record --pid`) takes over while
//!   it runs: the part recorded so far is completed (removed if it holds no
//!   call), the program's session's trace is written as the next part when
//!   it stops (`PROGRAM-PID.2.fgt`, ...), and recording goes on in the part
//!   after it. Merged, the parts cover the whole run.
//! * **Problems** (a directory that cannot be written, a bad `FGTRACE_*`
//!   value) are one line on stderr; the program runs on unrecorded.
//!
//! The session is started on a thread of fgtrace's own (the constructor
//! waits for it): code run before `main` must not create the main thread's
//! `std::thread` handle, and that thread's calls are never recorded.
//!
//! Unix only (Linux and macOS): it needs `atexit` to run at every exit and
//! the stop signals. Elsewhere the variable gets a line on stderr saying it
//! is not supported, and nothing is recorded.

// Where the recording is not supported, only the file naming and the
// variable's parsing are used (by `fgtrace record`, the tests).
#![cfg_attr(not(unix), allow(dead_code))]

use crate::{Config, Session};
use parking_lot::Mutex;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
#[cfg(unix)]
use std::sync::atomic::AtomicI32;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;

/// The variable read at process start: the directory the trace goes in.
pub const ENV: &str = "FGTRACE_RECORD";

/// The recording this process runs for `FGTRACE_RECORD`, and its file.
static RECORDING: Mutex<Option<(Session, PathBuf)>> = Mutex::new(None);
/// Where its first part goes.
static PATH: OnceLock<PathBuf> = OnceLock::new();
/// A session of the program's own runs in its place.
static HANDED_OVER: AtomicBool = AtomicBool::new(false);
/// The number of the next part.
static NEXT_PART: AtomicU32 = AtomicU32::new(2);
/// The process that started it: a child forked without `exec` inherits the
/// `atexit` registration and the signal handlers, not the session.
static OWNER: OnceLock<u32> = OnceLock::new();
/// The write end of the pipe the signal handler wakes the watcher through.
#[cfg(unix)]
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// The signals whose default action ends the process and that a user sends
/// to stop a program: the trace is completed before it dies of them.
#[cfg(unix)]
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The trace file of process `pid` running `program` in `dir`:
/// `<program>-<pid>.fgt`, the program's file name with anything but
/// letters, digits, `-`, `_` and `.` replaced by `_`.
pub fn trace_path(dir: &Path, program: &str, pid: u32) -> PathBuf {
    let base = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "program".into());
    let base: String = base
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect();
    dir.join(format!("{base}-{pid}.fgt"))
}

/// What `FGTRACE_RECORD=v` asks for: nothing (unset, empty or `0`), or a
/// recording into directory `v`.
pub fn parse_env(v: &str) -> Option<PathBuf> {
    match v.trim() {
        "" | "0" => None,
        d => Some(PathBuf::from(d)),
    }
}

/// The file this process's `FGTRACE_RECORD` recording writes first, if one
/// runs or ran.
pub fn recording_path() -> Option<PathBuf> {
    PATH.get().cloned()
}

/// Ends this process's `FGTRACE_RECORD` recording now, its file complete.
/// Returns the file, if there was a recording.
pub fn finish() -> Option<PathBuf> {
    finish_part().map(|(p, _)| p)
}

/// [`finish`], with the number of calls the part recorded.
fn finish_part() -> Option<(PathBuf, u64)> {
    if OWNER.get() != Some(&std::process::id()) {
        return None;
    }
    let (session, path) = RECORDING.lock().take()?;
    let calls = match session.stop() {
        Ok(t) => t.meta.total_calls(),
        Err(e) => {
            say(&format!("the recording for {ENV} did not end cleanly: {e}"));
            u64::MAX
        }
    };
    // A later part that recorded nothing (the program's session ended just
    // before the exit) is not kept.
    if calls == 0 && PATH.get() != Some(&path) {
        let _ = std::fs::remove_file(&path);
        return None;
    }
    Some((path, calls))
}

/// Ends the recording and removes its file: for programs that must not be
/// recorded whatever their environment says (the `fgtrace` command itself).
pub fn discard() {
    if let Some(p) = finish() {
        let _ = std::fs::remove_file(p);
    }
}

fn say(msg: &str) {
    let _ = writeln!(io::stderr(), "fgtrace: {msg}");
}

/// The file of part `n` of this process's recording: `PROGRAM-PID.fgt`,
/// then `PROGRAM-PID.2.fgt`, ...
fn part_path(n: u32) -> Option<PathBuf> {
    let first = PATH.get()?;
    Some(match n {
        1 => first.clone(),
        n => first.with_extension(format!("{n}.fgt")),
    })
}

/// Starts recording part `n` into its file.
fn start_part(n: u32) -> Result<(), String> {
    let path = part_path(n).ok_or("no recording directory")?;
    let mut config = Config::default().output(&path);
    // Every process recording into the directory shares one budget.
    config.shared_budget = true;
    let session = Session::start(config).map_err(|e| format!("{ENV}: {e}"))?;
    *RECORDING.lock() = Some((session, path));
    Ok(())
}

/// Starts the recording `FGTRACE_RECORD` asks for. Runs on the watcher
/// thread; the constructor waits for it.
fn start(dir: &Path) -> Result<(), String> {
    let program = std::env::args().next().unwrap_or_default();
    let pid = std::process::id();
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("{ENV}: cannot create {}: {e}", dir.display()))?;
    let _ = PATH.set(trace_path(dir, &program, pid));
    let _ = OWNER.set(pid);
    start_part(1)?;
    // The program's own sessions take over from this one while they run.
    crate::active::on_yield(yield_to_program);
    crate::active::on_session_end(after_program_session);
    // SAFETY: registers a plain extern "C" fn.
    #[cfg(unix)]
    unsafe {
        libc::atexit(at_exit)
    };
    Ok(())
}

/// Called by `Session::start` before a session of the program's own starts:
/// the part recorded so far is completed (and removed if it holds no call).
fn yield_to_program() {
    if let Some((path, calls)) = finish_part() {
        if calls == 0 {
            let _ = std::fs::remove_file(&path);
        }
        HANDED_OVER.store(true, Ordering::SeqCst);
    }
}

/// Called when a session of the program's own has stopped (`trace`) or was
/// dropped (`None`): its trace is written as the next part, and recording
/// goes on in the part after it.
fn after_program_session(trace: Option<&fgtrace_trace::Trace>) {
    if !HANDED_OVER.swap(false, Ordering::SeqCst) || OWNER.get() != Some(&std::process::id()) {
        return;
    }
    if let Some(t) = trace.filter(|t| t.meta.total_calls() > 0 || t.meta.total_samples() > 0) {
        let n = NEXT_PART.fetch_add(1, Ordering::SeqCst);
        if let Some(p) = part_path(n) {
            if let Err(e) = t.save(&p) {
                say(&format!(
                    "{ENV}: cannot write the program's session to {}: {e}",
                    p.display()
                ));
            }
        }
    }
    let n = NEXT_PART.fetch_add(1, Ordering::SeqCst);
    if let Err(e) = start_part(n) {
        say(&format!("{ENV}: the recording does not go on: {e}"));
    }
}

extern "C" fn at_exit() {
    // A panic must not unwind out of an atexit handler.
    let _ = std::panic::catch_unwind(finish);
}

/// The signal handler: one byte (the signal) to the watcher. `write` is
/// async-signal-safe; nothing else runs here.
#[cfg(unix)]
extern "C" fn on_signal(sig: libc::c_int) {
    let fd = WAKE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: writes one byte from the stack to a pipe we own.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// Catches the stop signals the program left at their default action.
/// Returns the pipe's read end, or `None` if none was caught.
#[cfg(unix)]
fn catch_signals() -> Option<libc::c_int> {
    let fds = cloexec_pipe()?;
    WAKE_FD.store(fds[1], Ordering::SeqCst);
    let mut caught = false;
    for sig in SIGNALS {
        // SAFETY: reads and sets the disposition with zeroed, then filled,
        // sigaction structs.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                continue; // ignored or handled already: the program's choice
            }
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as *const () as usize;
            act.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            caught |= libc::sigaction(sig, &act, std::ptr::null_mut()) == 0;
        }
    }
    caught.then_some(fds[0])
}

/// A pipe whose ends are closed by `exec` (the program's children must not
/// keep it): `pipe2(O_CLOEXEC)` where there is one, else `pipe` and then
/// `fcntl` (macOS has no `pipe2`; the constructor runs before the program
/// can start a child, so nothing can exec between the two calls).
#[cfg(unix)]
fn cloexec_pipe() -> Option<[libc::c_int; 2]> {
    let mut fds = [0 as libc::c_int; 2];
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    // SAFETY: creates a pipe into a local array.
    let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0;
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    // SAFETY: creates a pipe into a local array, then sets a flag on its
    // two descriptors (closed again if that fails), ours alone.
    let made = unsafe {
        libc::pipe(fds.as_mut_ptr()) == 0 && {
            let flagged = fds
                .iter()
                .all(|&fd| libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) == 0);
            if !flagged {
                for fd in fds {
                    libc::close(fd);
                }
            }
            flagged
        }
    };
    made.then_some(fds)
}

/// The watcher: waits for a caught signal, completes the trace, then lets
/// the signal take its default course.
#[cfg(unix)]
fn watch(read_fd: libc::c_int) {
    loop {
        let mut b = 0u8;
        // SAFETY: reads one byte into a local from the pipe we own.
        let n = unsafe { libc::read(read_fd, (&mut b as *mut u8).cast(), 1) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n != 1 {
            return;
        }
        let sig = libc::c_int::from(b);
        if OWNER.get() == Some(&std::process::id()) {
            finish();
        }
        // SAFETY: restores the default action and sends the signal again to
        // the process, which now dies of it as it would have.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::kill(libc::getpid(), sig);
        }
    }
}

/// Reads `FGTRACE_RECORD` and starts the recording if asked. Problems are
/// one line on stderr, and the program runs on.
#[cfg(unix)]
pub(crate) fn init_from_env() {
    let Some(dir) = std::env::var_os(ENV).and_then(|v| parse_env(&v.to_string_lossy())) else {
        return;
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("fgtrace-record".into())
        .spawn(move || {
            // Nothing this thread does is recorded.
            fgtrace_core::probe::mark_internal_thread();
            let started = start(&dir);
            let read_fd = started.is_ok().then(catch_signals).flatten();
            let _ = tx.send(started);
            if let Some(fd) = read_fd {
                watch(fd);
            }
        });
    let r = match spawned {
        Ok(_) => rx
            .recv()
            .unwrap_or_else(|_| Err(format!("{ENV}: the recording thread ended early"))),
        Err(e) => Err(format!("{ENV}: cannot start the recording thread: {e}")),
    };
    if let Err(e) = r {
        say(&format!("not recording: {e}"));
    }
}

/// Says that `FGTRACE_RECORD`, if set, records nothing here.
#[cfg(not(unix))]
pub(crate) fn init_from_env() {
    if std::env::var_os(ENV).is_some_and(|v| parse_env(&v.to_string_lossy()).is_some()) {
        say(&format!(
            "not recording: {ENV} (whole-program recording, `fgtrace record -- COMMAND`) \
             is not supported on this system ({}); start a `Session` in the program instead",
            std::env::consts::OS
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_named_by_program_and_pid() {
        let d = Path::new("/t");
        assert_eq!(
            trace_path(d, "/x/target/debug/deps/my_crate-1a2b", 42),
            Path::new("/t/my_crate-1a2b-42.fgt")
        );
        assert_eq!(
            trace_path(d, "odd name*", 7),
            Path::new("/t/odd_name_-7.fgt")
        );
        assert_eq!(trace_path(d, "", 7), Path::new("/t/program-7.fgt"));
    }

    #[test]
    fn the_variable_names_a_directory_or_nothing() {
        assert_eq!(parse_env(""), None);
        assert_eq!(parse_env("0"), None);
        assert_eq!(parse_env(" traces "), Some(PathBuf::from("traces")));
    }
}
