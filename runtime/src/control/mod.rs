//! Runtime control of a running process: `fgtrace record --pid`,
//! `fgtrace ctl PID status|start|stop|dump`, `fgtrace ps`.
//!
//! (The recording core's control *word*, which probes load, is
//! [`fgtrace::core::control_word`](fgtrace_core::control_word); this module is the
//! control *endpoint* a process opens for tools outside it.)
//!
//! Opt-in: [`listen()`] in the program, or `FGTRACE_CONTROL` in its
//! environment, read once at process start (a constructor in `.init_array`,
//! so a program that only adds `#[traced]` needs no code for it):
//! `FGTRACE_CONTROL=1` listens and keeps a flight recorder running all the
//! time (the last [`DEFAULT_FLIGHT_CALLS`] calls per thread, or N with
//! `FGTRACE_MODE=flight:N` or `FGTRACE_CONTROL=flight:N`), so that
//! `fgtrace ctl PID dump` always has something to show;
//! `FGTRACE_CONTROL=listen` only listens (no probe records until a client
//! starts a session). The flight recorder makes way for any other session:
//! a client's `record` (it starts again afterwards, empty) or the program's
//! own `Session::start`.
//!
//! Unix only (Linux and macOS); elsewhere [`listen()`] returns an error that
//! says the endpoint is not supported on this system.
//!
//! * **Where.** A Unix socket named by the pid, `<pid>.sock`, in
//!   `$XDG_RUNTIME_DIR/fgtrace/` (or `/tmp/fgtrace-<uid>/` where that is
//!   unset). The directory is created with mode 0700; one that exists is
//!   used only if it is a real directory (not a symlink) owned by this uid
//!   with no permission for group or others. The socket gets mode 0600; it
//!   is bound as `.<pid>.sock.new` and renamed once it listens with that
//!   mode, so a socket found under its name always accepts connections.
//! * **Who.** Every connection's peer is checked with `SO_PEERCRED`
//!   (`getpeereid` on macOS): the same uid as the process, or root. Anyone
//!   else gets an error reply (and what it sent is read before the
//!   connection closes, so it gets the reply rather than a broken pipe).
//! * **How.** One thread (`fgtrace-control`, marked as fgtrace's own, so
//!   nothing it does is recorded) sleeps in `poll` until a client connects;
//!   traced threads never wait for it or wake it. Requests and replies are
//!   length-prefixed JSON ([`protocol`]); a bad or oversized request gets an
//!   error reply and the process carries on. While one client is served, a
//!   second one gets a `busy` reply (a `status` is still answered).
//! * **Exit.** If the process exits (returns from `main`, or calls
//!   `std::process::exit`) while a client records, an `atexit` handler
//!   stops the session and sends the trace first: the client gets a complete
//!   file up to that point. The socket is removed at exit; one left by a
//!   process that was killed is removed by the next `listen` in that
//!   directory or by `fgtrace ps`.

#[cfg(unix)]
pub mod client;
pub mod protocol;
#[cfg(unix)]
mod server;

use std::io;
#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[cfg(unix)]
pub use client::{Client, ControlError, ProcessInfo};
pub use protocol::{Reply, Request, Settings, Status};

/// The variable read at process start.
pub const ENV: &str = "FGTRACE_CONTROL";

/// The directory this process's socket goes in:
/// `$XDG_RUNTIME_DIR/fgtrace`, or `/tmp/fgtrace-<uid>`.
#[cfg(unix)]
pub fn socket_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if Path::new(&d).is_absolute() => Path::new(&d).join("fgtrace"),
        // SAFETY: geteuid cannot fail.
        _ => PathBuf::from(format!("/tmp/fgtrace-{}", unsafe { libc::geteuid() })),
    }
}

/// The socket of process `pid` in `dir`.
pub fn socket_path_in(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.sock"))
}

/// Creates the socket directory (mode 0700) or checks the one there:
/// a directory, not a symlink, owned by this uid, no access for others.
#[cfg(unix)]
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // `$XDG_RUNTIME_DIR` itself is missing: create the path, the
            // last component private.
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::DirBuilder::new().mode(0o700).create(dir)?;
        }
        Err(e) => return Err(e),
    }
    check_private_dir(dir)
}

/// Refuses a directory that someone else could have prepared or can enter.
#[cfg(unix)]
pub fn check_private_dir(dir: &Path) -> io::Result<()> {
    let m = std::fs::symlink_metadata(dir)?;
    let refuse = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refusing the control directory {}: {why}", dir.display()),
        ))
    };
    if m.file_type().is_symlink() {
        return refuse("it is a symlink".into());
    }
    if !m.is_dir() {
        return refuse("it is not a directory".into());
    }
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if m.uid() != me {
        return refuse(format!("it is owned by uid {}, not by uid {me}", m.uid()));
    }
    let mode = m.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return refuse(format!(
            "its mode {mode:03o} lets other users in (it must be 0700)"
        ));
    }
    Ok(())
}

/// Whether process `pid` exists (as any user).
#[cfg(unix)]
pub(crate) fn pid_alive(pid: u32) -> bool {
    let Ok(p) = i32::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(p, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Removes the sockets in `dir` whose process is gone, or that no process
/// listens on any more. Returns how many were removed.
#[cfg(unix)]
pub fn clean_stale(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let path = e.path();
        // A socket being put in place (bound as `.<pid>.sock.new`, renamed
        // once it listens) is left only by a process killed meanwhile.
        if let Some(pid) = pid_of_new_socket(&path) {
            if pid != std::process::id() && !pid_alive(pid) && std::fs::remove_file(&path).is_ok() {
                removed += 1;
            }
            continue;
        }
        let Some(pid) = pid_of_socket(&path) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let stale = !pid_alive(pid)
            || matches!(UnixStream::connect(&path), Err(e) if e.kind() == io::ErrorKind::ConnectionRefused);
        if stale && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The pid a socket's file name stands for (`<pid>.sock`).
#[cfg(unix)]
pub(crate) fn pid_of_socket(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let pid = name.strip_suffix(".sock")?;
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// The pid of a socket not yet in place (`.<pid>.sock.new`).
#[cfg(unix)]
fn pid_of_new_socket(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    pid_of_socket(Path::new(name.strip_prefix('.')?.strip_suffix(".new")?))
}

/// Where the endpoint cannot be had: it is a Unix socket, with its peer
/// checked by the kernel (`SO_PEERCRED`, `getpeereid`).
#[cfg(not(unix))]
mod server {
    use super::Settings;
    use std::io;
    use std::path::{Path, PathBuf};

    pub(super) fn start(_dir: &Path, _background: Option<Settings>) -> io::Result<PathBuf> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "the control endpoint (fgtrace::control, FGTRACE_CONTROL, `fgtrace record \
                 --pid`, `fgtrace ctl`) is not supported on this system ({}): it is a Unix socket",
                std::env::consts::OS
            ),
        ))
    }

    pub(super) fn close() {}
}

/// The socket directory: none where the endpoint is not supported.
#[cfg(not(unix))]
pub fn socket_dir() -> PathBuf {
    PathBuf::new()
}

/// The endpoint of this process, once [`listen`] has opened it.
static LISTENING: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// Opens this process's control endpoint (once; later calls return the
/// same path): the socket, its directory checks, the serving thread.
pub fn listen() -> io::Result<PathBuf> {
    listen_with(None)
}

/// [`listen`] with the socket in `dir` instead of [`socket_dir`] (the
/// same checks apply to `dir`). Once per process, like `listen`.
pub fn listen_in(dir: &Path) -> io::Result<PathBuf> {
    LISTENING
        .get_or_init(|| server::start(dir, None).map_err(|e| e.to_string()))
        .clone()
        .map_err(io::Error::other)
}

fn listen_with(background: Option<Settings>) -> io::Result<PathBuf> {
    LISTENING
        .get_or_init(|| server::start(&socket_dir(), background).map_err(|e| e.to_string()))
        .clone()
        .map_err(io::Error::other)
}

/// Calls per thread the always-on flight recorder of `FGTRACE_CONTROL=1`
/// keeps unless `FGTRACE_MODE=flight:N` says otherwise (64 KiB a thread).
pub const DEFAULT_FLIGHT_CALLS: usize = 4096;

/// Closes this process's endpoint, if one is open: the socket is removed,
/// the always-on flight recorder stopped, the serving thread ends (a client
/// recording now gets its trace first). For programs that must never be
/// controlled whatever their environment says (the `fgtrace` command itself
/// calls it first). [`listen`] does not open it again.
pub fn close() {
    if LISTENING.get().is_some_and(Result::is_ok) {
        server::close();
    }
}

/// What `FGTRACE_CONTROL` asks for: nothing (`0`), listening only
/// (`listen`), or listening with a flight recorder running all the time
/// (`1`: [`DEFAULT_FLIGHT_CALLS`] per thread, or `FGTRACE_MODE=flight:N`'s
/// N; `flight:N`). `mode_env` is `FGTRACE_MODE`.
pub fn parse_env(v: &str, mode_env: Option<&str>) -> Result<Option<Option<Settings>>, String> {
    let v = v.trim();
    let mode = match v {
        "" | "0" | "off" | "no" => return Ok(None),
        "listen" => return Ok(Some(None)),
        "1" | "on" | "yes" | "flight" => match mode_env.map(str::trim) {
            Some(m) if m.starts_with("flight:") => m.to_string(),
            _ => format!("flight:{DEFAULT_FLIGHT_CALLS}"),
        },
        _ if v.starts_with("flight:") => v.to_string(),
        _ => {
            return Err(format!(
                "{ENV}=`{v}`: expected 1 (listen and keep a flight recorder), flight:N \
                 (N calls per thread), listen (listen only) or 0"
            ))
        }
    };
    let s = Settings {
        mode: Some(mode),
        ..Settings::default()
    };
    s.config("stream")
        .map_err(|e| format!("{ENV}=`{v}`: {e}"))?;
    Ok(Some(Some(s)))
}

/// Reads `FGTRACE_CONTROL` and opens the endpoint if asked. Runs at process
/// start; problems are one line on stderr, and the program runs on.
pub(crate) fn init_from_env() {
    let Some(v) = std::env::var_os(ENV) else {
        return;
    };
    let mode = std::env::var("FGTRACE_MODE").ok();
    let r = parse_env(&v.to_string_lossy(), mode.as_deref()).and_then(|want| match want {
        None => Ok(()),
        // A whole-program recording (`FGTRACE_RECORD`) is the session:
        // the endpoint only listens, no flight recorder takes its place.
        Some(_) if recording_whole_program() => {
            listen_with(None).map(drop).map_err(|e| e.to_string())
        }
        Some(bg) => listen_with(bg).map(drop).map_err(|e| e.to_string()),
    });
    if let Err(e) = r {
        use std::io::Write;
        let _ = writeln!(io::stderr(), "fgtrace: control endpoint not opened: {e}");
    }
}

fn recording_whole_program() -> bool {
    std::env::var_os(crate::launch::ENV)
        .is_some_and(|v| crate::launch::parse_env(&v.to_string_lossy()).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_is_parsed_with_clear_errors() {
        assert_eq!(parse_env("0", None).unwrap(), None);
        assert_eq!(parse_env("listen", None).unwrap(), Some(None));
        let bg = parse_env("1", None).unwrap().unwrap().unwrap();
        assert_eq!(bg.mode.as_deref(), Some("flight:4096"));
        let bg = parse_env("1", Some("flight:77")).unwrap().unwrap().unwrap();
        assert_eq!(bg.mode.as_deref(), Some("flight:77"));
        let bg = parse_env("flight:1000", None).unwrap().unwrap().unwrap();
        assert_eq!(bg.mode.as_deref(), Some("flight:1000"));
        assert!(parse_env("flight:0", None)
            .unwrap_err()
            .contains("FGTRACE_CONTROL"));
        assert!(parse_env("maybe", None).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn socket_names_are_pids() {
        assert_eq!(pid_of_socket(Path::new("/x/123.sock")), Some(123));
        assert_eq!(pid_of_socket(Path::new("/x/12a.sock")), None);
        assert_eq!(pid_of_socket(Path::new("/x/.sock")), None);
        assert_eq!(pid_of_socket(Path::new("/x/123")), None);
        assert_eq!(pid_of_socket(Path::new("/x/.123.sock.new")), None);
        assert_eq!(pid_of_new_socket(Path::new("/x/.123.sock.new")), Some(123));
        assert_eq!(pid_of_new_socket(Path::new("/x/123.sock")), None);
    }
}
