//! The client side: find a process's socket, send it requests, receive
//! traces (what `fgtrace record --pid`, `fgtrace ctl` and `fgtrace ps` call).

use super::protocol::{self, FrameError, Reply, Request, Settings, Status};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Why a control request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlError {
    /// No control socket for the pid (it does not listen, or is not running).
    NotListening {
        /// The process asked for.
        pid: u32,
        /// The socket paths tried.
        looked_in: Vec<PathBuf>,
    },
    /// The socket or its directory may not be used by this user.
    PermissionDenied(String),
    /// The target serves another client.
    Busy(String),
    /// The target answered with an error.
    Target(String),
    /// The connection failed or broke.
    Io(String),
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::NotListening { pid, looked_in } => {
                let alive = super::pid_alive(*pid);
                write!(
                    f,
                    "pid {pid} {}: no control socket in {} (start it with FGTRACE_CONTROL=1 or \
                     fgtrace::control::listen())",
                    if alive {
                        "does not listen for fgtrace control"
                    } else {
                        "is not running"
                    },
                    looked_in
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
            ControlError::PermissionDenied(m)
            | ControlError::Busy(m)
            | ControlError::Target(m)
            | ControlError::Io(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ControlError {}

fn io_err(what: &str, e: impl std::fmt::Display) -> ControlError {
    ControlError::Io(format!("{what}: {e}"))
}

/// The `$XDG_RUNTIME_DIR` process `pid` was started with, if we may read
/// its environment (the same user, or root).
fn runtime_dir_of(pid: u32) -> Option<PathBuf> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(b"XDG_RUNTIME_DIR="))
        .map(|v| PathBuf::from(std::ffi::OsStr::from_bytes(v)))
        .filter(|p| p.is_absolute())
}

/// The directories the socket of process `pid` (of `uid`) may be in: the one
/// its own environment names, this user's, then the usual ones of `uid`.
fn candidate_dirs(pid: u32, uid: Option<u32>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = runtime_dir_of(pid) {
        dirs.push(d.join("fgtrace"));
    }
    if !dirs.contains(&super::socket_dir()) {
        dirs.push(super::socket_dir());
    }
    if let Some(uid) = uid {
        for d in [
            PathBuf::from(format!("/run/user/{uid}/fgtrace")),
            PathBuf::from(format!("/tmp/fgtrace-{uid}")),
        ] {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    dirs
}

/// The owner of process `pid` (from `/proc`).
fn uid_of(pid: u32) -> Option<u32> {
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

/// The control socket of process `pid`.
pub fn find_socket(pid: u32) -> Result<PathBuf, ControlError> {
    let owner = uid_of(pid);
    let dirs = candidate_dirs(pid, owner);
    let mut denied = None;
    for d in &dirs {
        let p = super::socket_path_in(d, pid);
        match std::fs::symlink_metadata(&p) {
            Ok(_) => return Ok(p),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                denied.get_or_insert(d.clone());
            }
            Err(_) => {}
        }
    }
    if let Some(d) = denied {
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        return Err(ControlError::PermissionDenied(format!(
            "permission denied: pid {pid} belongs to uid {}, whose control directory {} \
             uid {me} may not enter (run as that user or root)",
            owner.map_or("?".into(), |u| u.to_string()),
            d.display()
        )));
    }
    Err(ControlError::NotListening {
        pid,
        looked_in: dirs,
    })
}

/// A connection to one process's control endpoint.
pub struct Client {
    stream: UnixStream,
    pid: u32,
}

/// A trace received from a target, with the target's note on how it ended.
#[derive(Debug)]
pub struct Received {
    /// The trace file's bytes (write them as they are: `out.fgt`).
    pub bytes: Vec<u8>,
    /// How the recording ended, as the target put it (`duration over`,
    /// `stopped`, `the process is exiting` ...).
    pub note: String,
}

impl Client {
    /// Connects to process `pid`'s endpoint.
    pub fn connect(pid: u32) -> Result<Client, ControlError> {
        let path = find_socket(pid)?;
        Client::connect_path(&path, pid)
    }

    /// Connects to the socket at `path` (of process `pid`).
    pub fn connect_path(path: &Path, pid: u32) -> Result<Client, ControlError> {
        let stream = UnixStream::connect(path).map_err(|e| match e.kind() {
            io::ErrorKind::PermissionDenied => ControlError::PermissionDenied(format!(
                "permission denied connecting to {} (pid {pid} belongs to another user: \
                 run as that user or root)",
                path.display()
            )),
            io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound => {
                ControlError::NotListening {
                    pid,
                    looked_in: vec![path.parent().unwrap_or(path).to_path_buf()],
                }
            }
            _ => io_err(&format!("cannot connect to {}", path.display()), e),
        })?;
        let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
        Ok(Client { stream, pid })
    }

    /// The pid this client talks to.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    fn send(&mut self, req: &Request) -> Result<(), ControlError> {
        protocol::write_json(&mut self.stream, req)
            .map_err(|e| io_err(&format!("cannot send the request to pid {}", self.pid), e))
    }

    fn reply(&mut self) -> Result<Reply, ControlError> {
        let body =
            protocol::read_frame(&mut self.stream, protocol::MAX_REPLY).map_err(|e| match e {
                FrameError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => ControlError::Io(
                    format!("pid {} closed the connection without a reply", self.pid),
                ),
                e => io_err(&format!("no reply from pid {}", self.pid), e),
            })?;
        let r: Reply = fgtrace_trace::json::from_slice(&body)
            .map_err(|e| io_err(&format!("pid {} sent a bad reply", self.pid), e))?;
        if r.ok {
            return Ok(r);
        }
        let msg = r.error.unwrap_or_else(|| "failed (no reason given)".into());
        let msg = format!("pid {}: {msg}", self.pid);
        Err(if r.busy {
            ControlError::Busy(msg)
        } else if msg.contains("refused: uid") {
            ControlError::PermissionDenied(msg)
        } else {
            ControlError::Target(msg)
        })
    }

    fn trace(&mut self, r: &Reply) -> Result<Received, ControlError> {
        let n = r
            .trace_bytes
            .ok_or_else(|| ControlError::Io(format!("pid {} replied without a trace", self.pid)))?;
        let _ = self.stream.set_read_timeout(Some(Duration::from_secs(60)));
        let bytes = protocol::read_trace(&mut self.stream, n)
            .map_err(|e| io_err(&format!("receiving the trace from pid {}", self.pid), e))?;
        Ok(Received {
            bytes,
            note: r.note.clone().unwrap_or_default(),
        })
    }

    /// Sends `req` as it is and returns the reply (for tools and tests).
    pub fn request(&mut self, req: &Request) -> Result<Reply, ControlError> {
        let _ = self.stream.set_read_timeout(Some(Duration::from_secs(30)));
        if let Err(e) = protocol::write_json(&mut self.stream, req) {
            let sent = io_err(&format!("cannot send the request to pid {}", self.pid), &e);
            if !matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ) {
                return Err(sent);
            }
            // A target that refuses us (another uid) may have replied and
            // hung up before our request went out: its reply says why.
            let _ = self.stream.set_read_timeout(Some(Duration::from_secs(2)));
            return match self.reply() {
                Err(ControlError::Io(_)) => Err(sent),
                r => r,
            };
        }
        self.reply()
    }

    /// The process's state.
    pub fn status(mut self) -> Result<Status, ControlError> {
        let r = self.request(&Request::Status)?;
        r.status
            .ok_or_else(|| ControlError::Io(format!("pid {} sent no status", self.pid)))
    }

    /// Starts a background session (a flight recorder unless `settings.mode` says `stream`).
    pub fn start(mut self, settings: Settings) -> Result<String, ControlError> {
        let r = self.request(&Request::Start(settings))?;
        Ok(r.note.unwrap_or_default())
    }

    /// Stops the background session and returns its trace.
    pub fn stop(mut self) -> Result<Received, ControlError> {
        let r = self.request(&Request::Stop)?;
        self.trace(&r)
    }

    /// The running flight recorder's last calls per thread, without stopping it.
    pub fn dump(mut self) -> Result<Received, ControlError> {
        let r = self.request(&Request::Dump)?;
        self.trace(&r)
    }

    /// Records with `settings` in the target until `settings.duration_ms`
    /// passes, `stop` becomes true (Ctrl-C), or the target exits; returns
    /// the trace. `started` is called once the target has started recording.
    pub fn record(
        mut self,
        settings: Settings,
        stop: &AtomicBool,
        started: impl FnOnce(),
    ) -> Result<Received, ControlError> {
        // A target that stops answering (stopped with SIGSTOP, hung) is
        // given this long past the end of the recording.
        const GRACE: Duration = Duration::from_secs(60);
        let duration = settings.duration_ms.map(Duration::from_millis);
        self.request(&Request::Record(settings))?;
        started();
        let _ = self.stream.set_read_timeout(None);
        let mut give_up = duration.map(|d| Instant::now() + d + GRACE);
        let mut stop_sent = false;
        loop {
            if !stop_sent && stop.load(Ordering::Relaxed) {
                self.send(&Request::Stop)?;
                stop_sent = true;
                give_up = Some(Instant::now() + GRACE);
            }
            if give_up.is_some_and(|t| Instant::now() > t) {
                return Err(ControlError::Io(format!(
                    "pid {} did not send the trace within {} s of the end of the recording",
                    self.pid,
                    GRACE.as_secs()
                )));
            }
            if readable(&self.stream, Duration::from_millis(100)) {
                let r = self.reply()?;
                if r.trace_bytes.is_some() {
                    return self.trace(&r);
                }
            }
        }
    }
}

fn readable(s: &UnixStream, timeout: Duration) -> bool {
    let mut fd = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut fd, 1, timeout.as_millis() as i32) };
    n > 0 && fd.revents != 0
}

/// A process `fgtrace ps` lists.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    /// The process id.
    pub pid: u32,
    /// Its control socket.
    pub socket: PathBuf,
    /// Its status, or why it could not be had (another user's process, busy, ...).
    pub status: Result<Status, String>,
}

/// The processes that can be controlled: every live socket in this user's
/// directory (and, for root, every user's), stale sockets of dead processes
/// removed on the way. Sorted by pid.
pub fn list() -> Vec<ProcessInfo> {
    let mut dirs = vec![super::socket_dir()];
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        for (base, prefix, suffix) in [("/tmp", "fgtrace-", ""), ("/run/user", "", "fgtrace")] {
            if let Ok(rd) = std::fs::read_dir(base) {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if let Some(rest) = name.strip_prefix(prefix) {
                        if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
                            let d = if suffix.is_empty() {
                                e.path()
                            } else {
                                e.path().join(suffix)
                            };
                            if !dirs.contains(&d) {
                                dirs.push(d);
                            }
                        }
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    for d in dirs {
        super::clean_stale(&d);
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let path = e.path();
            let Some(pid) = super::pid_of_socket(&path) else {
                continue;
            };
            let status = Client::connect_path(&path, pid)
                .and_then(Client::status)
                .map_err(|e| e.to_string());
            out.push(ProcessInfo {
                pid,
                socket: path,
                status,
            });
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}
