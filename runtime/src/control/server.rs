//! The serving thread of the control endpoint, the sessions it runs, and
//! the `atexit` handler that finishes a recording when the process exits.

use super::protocol::{self, FrameError, Reply, Request, Settings, Status};
use crate::collector::{Error as SessionError, Session};
use fgtrace_trace::{RecordMode, Trace};
use parking_lot::Mutex;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a client has to send its request once connected.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// A second client, while one is served, gets this long to say what it wants.
const BUSY_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a reply (a trace) may take to reach a client that stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// A client's `record` in progress: its session and its connection.
struct Recording {
    session: Session,
    stream: UnixStream,
    started: Instant,
}

/// The recording a client waits for. Whoever finishes it (the serving
/// thread, or the `atexit` handler) holds the lock until the trace is sent,
/// so the process cannot exit halfway through.
static RECORDING: Mutex<Option<Recording>> = Mutex::new(None);
/// The session `start` (or `FGTRACE_CONTROL=flight`) runs in the background.
static BACKGROUND: Mutex<Option<Session>> = Mutex::new(None);
/// Its settings, to start it again after a client's `record` took its place.
static BACKGROUND_SETTINGS: Mutex<Option<Settings>> = Mutex::new(None);
/// Where this process's socket is, for the `atexit` handler.
static SOCKET: OnceLock<PathBuf> = OnceLock::new();
/// Set by [`close`]: the serving thread ends, no session starts again.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// The listening socket's descriptor, for [`close`] to wake `accept`.
static LISTENER_FD: AtomicI32 = AtomicI32::new(-1);
/// The process that listens: a child forked from it inherits the `atexit`
/// registration (and the recording's connection) but must touch neither.
static OWNER: OnceLock<u32> = OnceLock::new();

/// Binds the socket in `dir` (checked or created private), cleans up stale
/// sockets there, and starts the serving thread.
pub(super) fn start(dir: &Path, background: Option<Settings>) -> io::Result<PathBuf> {
    super::ensure_private_dir(dir)?;
    super::clean_stale(dir);
    let path = super::socket_path_in(dir, std::process::id());
    // A socket with our pid can only be left by a dead process whose pid
    // was reused: nobody listens on it.
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = bind_listening(dir, &path)?;
    let _ = SOCKET.set(path.clone());
    let _ = OWNER.set(std::process::id());
    LISTENER_FD.store(listener.as_raw_fd(), Ordering::SeqCst);
    // SAFETY: registers a plain extern "C" fn.
    unsafe { libc::atexit(at_exit) };
    crate::active::on_yield(yield_background);
    *BACKGROUND_SETTINGS.lock() = background;
    std::thread::Builder::new()
        .name("fgtrace-control".into())
        .spawn(move || serve(listener))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })?;
    Ok(SOCKET.get().cloned().unwrap_or_default())
}

/// Binds and listens under a temporary name, sets mode 0600, then renames
/// the socket to `path`: it appears there only once it accepts connections
/// and has its final mode. (Bound at `path` itself, it would exist for a
/// moment without listening: a client connecting then would be refused, and
/// another process's `clean_stale` would remove it as stale.)
fn bind_listening(dir: &Path, path: &Path) -> io::Result<UnixListener> {
    let tmp = dir.join(format!(".{}.sock.new", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp)?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

fn serve(listener: UnixListener) {
    // Nothing this thread does is recorded, whatever it calls.
    fgtrace_core::probe::mark_internal_thread();
    // The always-on flight recorder, if asked for: started here rather than
    // in the constructor, so the program's start is not delayed.
    restart_background();
    loop {
        let accepted = listener.accept();
        if CLOSED.load(Ordering::SeqCst) {
            return; // the listener is dropped: the socket is closed
        }
        match accepted {
            Ok((stream, _)) => handle(stream, &listener),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Out of descriptors or the like: wait, do not spin.
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn send(stream: &mut UnixStream, reply: &Reply) -> io::Result<()> {
    protocol::write_json(stream, reply)
}

/// The uid of the peer, or why it cannot be had: `SO_PEERCRED` on Linux.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket and a buffer of the size given.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// The uid of the peer, or why it cannot be had: `getpeereid` on macOS and
/// the BSDs (the credentials the peer had when it connected, as
/// `SO_PEERCRED`'s).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    let (mut uid, mut gid) = (0, 0);
    // SAFETY: a valid socket and two valid pointers.
    if unsafe { libc::getpeereid(stream.as_raw_fd(), &mut uid, &mut gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(uid)
}

/// Checks the peer: the same uid, or root. A refused peer gets an error
/// reply naming why.
fn admit(stream: &mut UnixStream) -> bool {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let why = match peer_uid(stream) {
        Ok(uid) if uid == me || uid == 0 => return true,
        Ok(uid) => format!(
            "refused: uid {uid} may not control pid {} (only uid {me} or root may)",
            std::process::id()
        ),
        Err(e) => format!("refused: cannot check who is connecting ({e})"),
    };
    let _ = stream.set_write_timeout(Some(BUSY_TIMEOUT));
    let _ = send(stream, &Reply::error(why));
    // Closing now, before the peer's request arrives, would make the peer's
    // write fail (EPIPE) before it reads the reply. So: no more from us, then
    // read and discard what it sends (bounded in size and time) until it
    // hangs up, having read the reply.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(BUSY_TIMEOUT));
    let _ = io::copy(
        &mut io::Read::take(&mut *stream, protocol::MAX_REQUEST as u64 + 4),
        &mut io::sink(),
    );
    false
}

/// Reads one request, answering a bad or oversized one with an error.
fn read_request(stream: &mut UnixStream) -> Option<Request> {
    let err = match protocol::read_frame(stream, protocol::MAX_REQUEST) {
        Ok(body) => match protocol::parse_request(&body) {
            Ok(r) => return Some(r),
            Err(e) => e,
        },
        Err(FrameError::Io(e))
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            "no request arrived in time".to_string()
        }
        Err(FrameError::Io(_)) => return None, // the client hung up
        Err(e @ FrameError::TooLarge { .. }) => format!("bad request: {e}"),
    };
    let _ = send(stream, &Reply::error(err));
    None
}

fn handle(mut stream: UnixStream, listener: &UnixListener) {
    if !admit(&mut stream) {
        return;
    }
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let Some(req) = read_request(&mut stream) else {
        return;
    };
    let _ = match req {
        Request::Status => send(
            &mut stream,
            &Reply {
                ok: true,
                status: Some(status()),
                ..Reply::default()
            },
        ),
        Request::Record(s) => {
            record(stream, listener, s);
            Ok(())
        }
        Request::Start(s) => {
            let r = match start_background(&s) {
                Ok(()) => {
                    *BACKGROUND_SETTINGS.lock() = Some(s);
                    Reply {
                        ok: true,
                        note: Some("started".into()),
                        ..Reply::default()
                    }
                }
                Err(e) => Reply::error(e),
            };
            send(&mut stream, &r)
        }
        Request::Stop => {
            BACKGROUND_SETTINGS.lock().take();
            let s = BACKGROUND.lock().take();
            match s {
                Some(s) => match s.stop() {
                    Ok(t) => send_trace(&mut stream, &t, "stopped"),
                    Err(e) => send(&mut stream, &Reply::error(e.to_string())),
                },
                None => send(&mut stream, &Reply::error(no_background())),
            }
        }
        Request::Dump => match crate::dump::running() {
            Ok(t) => send_trace(&mut stream, &t, "snapshot"),
            Err(e) => send(&mut stream, &Reply::error(e.to_string())),
        },
    };
}

fn no_background() -> String {
    if crate::active::ACTIVE.read().is_some() {
        "the running session is the program's own: the program stops it \
         (`fgtrace ctl PID dump` snapshots it)"
            .into()
    } else {
        "no session runs: start one with `fgtrace ctl PID start`, or record with `fgtrace record --pid PID`".into()
    }
}

/// Sends a reply announcing the trace, then the trace.
fn send_trace(stream: &mut UnixStream, trace: &Trace, note: &str) -> io::Result<()> {
    let mut bytes = Vec::with_capacity(trace.encoded_len());
    trace.write_to(&mut bytes)?;
    send(
        stream,
        &Reply {
            ok: true,
            trace_bytes: Some(bytes.len() as u64),
            note: Some(note.into()),
            ..Reply::default()
        },
    )?;
    protocol::write_trace(stream, &bytes)
}

fn start_background(s: &Settings) -> Result<(), String> {
    let mut cfg = s.config(protocol::DEFAULT_BACKGROUND_MODE)?;
    // The always-on flight recorder is what a panic dump needs.
    if let Some(p) = std::env::var_os("FGTRACE_DUMP_ON_PANIC").filter(|p| !p.is_empty()) {
        cfg = cfg.dump_on_panic(p);
    }
    // `Session::start` stops a background session already running first.
    let session = Session::start(cfg).map_err(explain)?;
    *BACKGROUND.lock() = Some(session);
    Ok(())
}

/// Starts the background session again if one was asked for and nothing
/// else records now.
fn restart_background() {
    if CLOSED.load(Ordering::SeqCst) {
        return;
    }
    let s = BACKGROUND_SETTINGS.lock().clone();
    if let Some(s) = s {
        if crate::active::ACTIVE.read().is_none() {
            // A session the program started meanwhile has precedence.
            if let Err(e) = start_background(&s).or_else(|e| {
                if crate::active::ACTIVE.read().is_some() {
                    Ok(())
                } else {
                    Err(e)
                }
            }) {
                let _ = writeln!(
                    io::stderr(),
                    "fgtrace: the control endpoint's flight recorder did not start: {e}"
                );
            }
        }
    }
}

/// Called by `Session::start` (through `active::on_yield`): the
/// background session makes way for another one.
fn yield_background() {
    let s = BACKGROUND.lock().take();
    drop(s);
}

fn explain(e: SessionError) -> String {
    match e {
        SessionError::AlreadyRunning => "the program runs its own fgtrace session, and only one \
            records at a time (`fgtrace ctl PID dump` snapshots it)"
            .into(),
        e => e.to_string(),
    }
}

fn status() -> Status {
    let owner = match RECORDING.try_lock() {
        None => "recording",
        Some(r) if r.is_some() => "recording",
        Some(_) if BACKGROUND.lock().is_some() => "background",
        Some(_) => "",
    };
    let active = crate::active::ACTIVE.read().clone();
    let (session, mode, threads) = match &active {
        Some(a) => (
            if owner.is_empty() { "program" } else { owner },
            Some(match (a.flight, a.dump.mode) {
                (true, _) | (_, RecordMode::FlightRecorder) => format!("flight:{}", a.dump.keep),
                _ => "stream".to_string(),
            }),
            a.threads.lock().as_ref().map_or(0, Vec::len),
        ),
        None => ("idle", None, 0),
    };
    Status {
        pid: std::process::id(),
        program: std::env::args_os()
            .next()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default(),
        fgtrace: env!("CARGO_PKG_VERSION").into(),
        protocol: protocol::VERSION,
        session: session.into(),
        mode,
        threads,
    }
}

/// A second client while one is served: a status is answered, anything else
/// gets a clear "busy".
fn refuse_busy(mut stream: UnixStream, since: Instant) {
    if !admit(&mut stream) {
        return;
    }
    let _ = stream.set_read_timeout(Some(BUSY_TIMEOUT));
    let _ = stream.set_write_timeout(Some(BUSY_TIMEOUT));
    let Some(req) = read_request(&mut stream) else {
        return;
    };
    let reply = match req {
        Request::Status => Reply {
            ok: true,
            status: Some(status()),
            ..Reply::default()
        },
        _ => Reply {
            busy: true,
            error: Some(format!(
                "busy: pid {} is recording for another client (for {:.1} s so far); \
                 try again when it is done",
                std::process::id(),
                since.elapsed().as_secs_f64()
            )),
            ..Reply::default()
        },
    };
    let _ = send(&mut stream, &reply);
}

/// Waits until one of the two descriptors is readable, or `timeout` passes.
/// Returns (listener ready, client ready).
fn wait2(a: &UnixListener, b: &UnixStream, timeout: Option<Duration>) -> (bool, bool) {
    let mut fds = [
        libc::pollfd {
            // A closed endpoint's listener is shut down: poll would return at once.
            fd: if CLOSED.load(Ordering::SeqCst) {
                -1
            } else {
                a.as_raw_fd()
            },
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: b.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
    // SAFETY: two valid pollfds.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if n <= 0 {
        return (false, false);
    }
    (fds[0].revents != 0, fds[1].revents != 0)
}

/// A client's `record`: start, acknowledge, wait for the duration, a `stop`
/// or the client leaving, while answering other clients "busy"; then send
/// the trace.
fn record(mut stream: UnixStream, listener: &UnixListener, s: Settings) {
    let cfg = match s.config("stream") {
        Ok(c) => c,
        Err(e) => {
            let _ = send(&mut stream, &Reply::error(e));
            return;
        }
    };
    let session = match Session::start(cfg) {
        Ok(s) => s,
        Err(e) => {
            let _ = send(&mut stream, &Reply::error(explain(e)));
            restart_background();
            return;
        }
    };
    let started = Instant::now();
    let ack = Reply {
        ok: true,
        note: Some("recording".into()),
        ..Reply::default()
    };
    let Ok(clone) = stream.try_clone() else {
        drop(session);
        restart_background();
        return;
    };
    if send(&mut stream, &ack).is_err() {
        drop(session);
        restart_background();
        return;
    }
    *RECORDING.lock() = Some(Recording {
        session,
        stream: clone,
        started,
    });
    let deadline = s.duration_ms.map(|ms| started + Duration::from_millis(ms));
    let reason = loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            break "duration over";
        }
        let (accept, client) = wait2(listener, &stream, left);
        if RECORDING.lock().is_none() {
            return; // the process is exiting: the atexit handler sent the trace
        }
        if accept {
            if let Ok((other, _)) = listener.accept() {
                refuse_busy(other, started);
            }
        }
        if client {
            let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
            match protocol::read_frame(&mut stream, protocol::MAX_REQUEST) {
                Ok(body) => match protocol::parse_request(&body) {
                    Ok(Request::Stop) => break "stopped by the client",
                    Ok(Request::Status) => {
                        let _ = send(
                            &mut stream,
                            &Reply {
                                ok: true,
                                status: Some(status()),
                                ..Reply::default()
                            },
                        );
                    }
                    Ok(_) => {
                        let _ = send(
                            &mut stream,
                            &Reply::error("recording: only `stop` or `status` now"),
                        );
                    }
                    Err(e) => {
                        let _ = send(&mut stream, &Reply::error(e));
                    }
                },
                Err(FrameError::TooLarge { len, max }) => {
                    // The rest of that frame cannot be skipped reliably: end
                    // the recording and send what there is.
                    let _ = (len, max);
                    break "stopped: the client sent an oversized request";
                }
                Err(_) => {
                    // The client went away: nobody wants this recording.
                    let rec = RECORDING.lock().take();
                    drop(rec);
                    restart_background();
                    return;
                }
            }
        }
    };
    let mut g = RECORDING.lock();
    if let Some(rec) = g.take() {
        finish(rec, reason);
    }
    drop(g);
    restart_background();
}

/// Stops the recording and sends its trace to the client.
fn finish(rec: Recording, reason: &str) {
    let Recording {
        session,
        mut stream,
        started,
    } = rec;
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let note = format!("{reason} after {:.3} s", started.elapsed().as_secs_f64());
    let _ = match session.stop() {
        Ok(t) => send_trace(&mut stream, &t, &note),
        Err(e) => send(&mut stream, &Reply::error(e.to_string())),
    };
}

/// At exit: a client's recording is finished and sent first (the lock
/// waits for the serving thread if it is sending one), then the socket goes.
extern "C" fn at_exit() {
    if OWNER.get() != Some(&std::process::id()) {
        return; // a forked child exiting
    }
    let _ = std::panic::catch_unwind(|| {
        let mut g = RECORDING.lock();
        if let Some(rec) = g.take() {
            finish(rec, "the process is exiting");
        }
        drop(g);
        if let Some(p) = SOCKET.get() {
            let _ = std::fs::remove_file(p);
        }
    });
}

/// Closes the endpoint: the socket is removed, the background session
/// stopped (what it held is discarded), the serving thread ends. A
/// recording a client runs is finished and sent first.
pub(super) fn close() {
    if OWNER.get() != Some(&std::process::id()) || CLOSED.swap(true, Ordering::SeqCst) {
        return;
    }
    BACKGROUND_SETTINGS.lock().take();
    yield_background();
    if let Some(p) = SOCKET.get() {
        let _ = std::fs::remove_file(p);
    }
    let fd = LISTENER_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: wakes the serving thread's `accept` (EINVAL); the
        // descriptor itself is closed by the thread dropping the listener.
        unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
    }
}
