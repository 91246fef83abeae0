//! `fgtrace record --pid`, `fgtrace ctl`, `fgtrace ps`: a running process's
//! control endpoint (`fgtrace::control`), one library call each.
//!
//! Unix only (Linux and macOS): the endpoint is a Unix socket, and a
//! whole-program recording needs `atexit` and the stop signals. Elsewhere
//! the three commands say they are not supported.

#[cfg(unix)]
use fgtrace::config::parse_duration;
#[cfg(unix)]
use fgtrace::control::{self, Client, ControlError};
#[cfg(unix)]
use std::path::Path;
use std::path::PathBuf;
#[cfg(unix)]
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(unix)]
use std::sync::Arc;

use crate::session::SessionArgs;

#[derive(clap::Args)]
pub struct RecordArgs {
    /// The process to record (it listens: FGTRACE_CONTROL=1 or fgtrace::control::listen()).
    #[arg(long, short = 'p', required_unless_present = "command", conflicts_with_all = ["command", "dir", "offcpu"])]
    pid: Option<u32>,
    /// How long to record (2s, 500ms); without it, until Ctrl-C.
    #[arg(long, short = 'd', requires = "pid")]
    duration: Option<String>,
    /// With a command: one trace per process that links fgtrace, in this
    /// directory, named PROGRAM-PID.fgt.
    #[arg(long, conflicts_with = "output")]
    dir: Option<PathBuf>,
    /// With a command: also record off-CPU time per call.
    #[arg(long)]
    offcpu: bool,
    /// The command to run and record from its start to its exit (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
    /// Keep only the last N calls per thread (a flight recorder) instead of every call.
    #[arg(long)]
    flight: Option<usize>,
    #[command(flatten)]
    session: SessionArgs,
    /// Where to write the trace (default: fgtrace-PID.fgt with --pid,
    /// fgtrace.fgt with a command; a command's other processes' traces go
    /// beside it).
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct CtlArgs {
    /// The process to control.
    pid: u32,
    #[command(subcommand)]
    action: CtlAction,
}

#[derive(clap::Subcommand)]
enum CtlAction {
    /// The process, its fgtrace session, the endpoint.
    Status,
    /// Start a session that runs until `stop`: a flight recorder (--flight N, default 65536 calls per thread) or --stream.
    Start {
        /// Calls kept per thread.
        #[arg(long, conflicts_with = "stream")]
        flight: Option<usize>,
        /// Keep every call (the trace comes at `stop`).
        #[arg(long)]
        stream: bool,
        #[command(flatten)]
        session: Box<SessionArgs>,
    },
    /// Stop the session `start` began and write its trace.
    Stop {
        /// Where to write the trace (default: fgtrace-PID.fgt).
        #[arg(long, short = 'o')]
        output: Option<PathBuf>,
    },
    /// Write the running flight recorder's last calls per thread, without stopping it.
    Dump {
        /// Where to write the trace (default: fgtrace-PID-dump.fgt).
        #[arg(long, short = 'o')]
        output: Option<PathBuf>,
    },
}

#[cfg(unix)]
fn err(e: ControlError) -> Option<String> {
    Some(e.to_string())
}

/// Writes a received trace (within `limit` bytes, where there is one: see
/// [`crate::received`]) and says what it holds (on stderr).
#[cfg(unix)]
fn save(
    received: control::client::Received,
    path: &Path,
    limit: Option<u64>,
) -> Result<(), Option<String>> {
    let sent = received.bytes.len() as u64;
    let cut = match limit {
        Some(l) => crate::received::within(&received.bytes, l).map_err(Some)?,
        None => None,
    };
    let bytes = match &cut {
        Some((b, calls, samples)) => {
            eprintln!(
                "fgtrace: the trace the target sent takes {}, over its size budget of {} (--max-size): {} keeps the run's start, complete; {calls} later calls{} are counted as lost, not kept",
                fgtrace_trace::size_text(sent),
                fgtrace_trace::size_text(limit.unwrap_or(0)),
                path.display(),
                if *samples > 0 {
                    format!(" and {samples} samples")
                } else {
                    String::new()
                }
            );
            &b[..]
        }
        None => &received.bytes[..],
    };
    std::fs::write(path, bytes)
        .map_err(|e| Some(format!("cannot write {}: {e}", path.display())))?;
    let summary = match fgtrace_trace::Trace::read_from(bytes) {
        Ok(t) => {
            let m = t.meta();
            format!(
                "{} calls of {} functions in {} threads, {} lost, {} samples",
                m.total_calls(),
                m.sites.len(),
                m.threads.len(),
                m.total_lost(),
                m.total_samples()
            )
        }
        Err(e) => return Err(Some(format!("the target sent a damaged trace: {e}"))),
    };
    eprintln!(
        "fgtrace: wrote {} ({summary}; {})",
        path.display(),
        received.note
    );
    Ok(())
}

#[cfg(unix)]
pub fn record(a: &RecordArgs) -> Result<(), Option<String>> {
    let duration_ms = match &a.duration {
        Some(d) => Some(parse_duration(d).map_err(|e| Some(format!("--duration: {e}")))?),
        None => None,
    }
    .map(|d| d.as_millis() as u64);
    let mode = a.flight.map(|n| format!("flight:{n}"));
    let settings = a.session.settings(mode, duration_ms);
    let Some(pid) = a.pid else {
        let code = crate::launch::run(&crate::launch::Launch {
            command: &a.command,
            settings,
            off_cpu: a.offcpu,
            dir: a.dir.as_deref(),
            output: a.output.as_deref(),
            max_size: a.session.max_size.as_deref(),
            on_full: a.session.on_full.as_deref(),
        })?;
        std::process::exit(code);
    };
    let out = a
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("fgtrace-{pid}.fgt")));
    if a.session.on_full.as_deref() == Some("ring") {
        return Err(Some(
            "--on-full ring does not apply to `record --pid`: the target sends its trace \
             when it stops, rebuilt in the order calls began, so the calls that ended last \
             cannot be chosen to fit the size; keep the run's end with --flight N (the last \
             N calls per thread, in the target's memory) or record the program from its start \
             (`record --max-size SIZE --on-full ring -- COMMAND`)"
                .into(),
        ));
    }
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let (limit, said) = crate::launch::budget_line(a.session.max_size.as_deref(), dir)?;
    let limit = limit.parse::<u64>().ok();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .map_err(|e| Some(format!("cannot catch Ctrl-C: {e}")))?;
    let received = Client::connect(pid)
        .and_then(|c| {
            c.record(settings, &stop, || match duration_ms {
                Some(ms) => eprintln!(
                    "fgtrace: recording pid {pid} for {ms} ms (Ctrl-C stops sooner); {} takes {said}",
                    out.display()
                ),
                None => eprintln!(
                    "fgtrace: recording pid {pid} until Ctrl-C; {} takes {said}",
                    out.display()
                ),
            })
        })
        .map_err(err)?;
    save(received, &out, limit)
}

#[cfg(unix)]
pub fn ctl(a: &CtlArgs) -> Result<(), Option<String>> {
    let client = Client::connect(a.pid).map_err(err)?;
    match &a.action {
        CtlAction::Status => {
            let s = client.status().map_err(err)?;
            println!("pid:      {}", s.pid);
            println!("program:  {}", s.program);
            println!("session:  {}", s.session);
            if let Some(m) = &s.mode {
                println!("mode:     {m}");
                println!("threads:  {}", s.threads);
            }
            println!("fgtrace:  {} (protocol {})", s.fgtrace, s.protocol);
            Ok(())
        }
        CtlAction::Start {
            flight,
            stream,
            session,
        } => {
            let mode = if *stream {
                Some("stream".to_string())
            } else {
                flight.map(|n| format!("flight:{n}"))
            };
            session.no_max_size("`ctl start`")?;
            client.start(session.settings(mode, None)).map_err(err)?;
            eprintln!(
                "fgtrace: pid {} records (fgtrace ctl {} dump|stop)",
                a.pid, a.pid
            );
            Ok(())
        }
        CtlAction::Stop { output } => {
            let r = client.stop().map_err(err)?;
            let out = output
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("fgtrace-{}.fgt", a.pid)));
            save(r, &out, None)
        }
        CtlAction::Dump { output } => {
            let r = client.dump().map_err(err)?;
            let out = output
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("fgtrace-{}-dump.fgt", a.pid)));
            save(r, &out, None)
        }
    }
}

#[cfg(unix)]
pub fn ps() -> Result<(), Option<String>> {
    println!("{:>8}  {:<11} {:<14} PROGRAM", "PID", "SESSION", "MODE");
    for p in control::client::list() {
        match p.status {
            Ok(s) => println!(
                "{:>8}  {:<11} {:<14} {}",
                p.pid,
                s.session,
                s.mode.as_deref().unwrap_or("-"),
                s.program
            ),
            Err(e) => println!("{:>8}  {:<11} {:<14} ({e})", p.pid, "?", "-"),
        }
    }
    Ok(())
}

/// What `record`, `ctl` and `ps` say where they are not supported.
#[cfg(not(unix))]
fn unsupported(what: &str) -> Result<(), Option<String>> {
    Err(Some(format!(
        "{what} is not supported on this system ({}): it needs Unix (Linux or macOS); \
         record with a `Session` in the program instead",
        std::env::consts::OS
    )))
}

#[cfg(not(unix))]
pub fn record(a: &RecordArgs) -> Result<(), Option<String>> {
    match a.pid {
        Some(_) => unsupported("`fgtrace record --pid` (the control endpoint, a Unix socket)"),
        None => unsupported("`fgtrace record -- COMMAND` (whole-program recording)"),
    }
}

#[cfg(not(unix))]
pub fn ctl(_: &CtlArgs) -> Result<(), Option<String>> {
    unsupported("`fgtrace ctl` (the control endpoint, a Unix socket)")
}

#[cfg(not(unix))]
pub fn ps() -> Result<(), Option<String>> {
    unsupported("`fgtrace ps` (the control endpoint, a Unix socket)")
}
