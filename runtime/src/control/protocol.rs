//! The control protocol: length-prefixed JSON frames over a Unix socket.
//!
//! A request is one frame: a 4-byte big-endian length, then that many bytes
//! of JSON (at most [`MAX_REQUEST`]), for example
//! `{"cmd":"record","duration_ms":2000,"sample":"timer:999"}`. Every reply
//! starts with a JSON frame ([`Reply`]); when it says `trace_bytes: N`, an
//! 8-byte big-endian length and the trace file's bytes follow.
//!
//! `record` holds the connection for the length of the recording: the
//! target acknowledges the start with a reply, then sends the final reply
//! and the trace when the duration is over, when the client sends
//! `{"cmd":"stop"}` on the same connection, or when the process exits.

use crate::config::Config;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// The largest request frame a target reads.
pub const MAX_REQUEST: usize = 64 * 1024;
/// The largest reply header a client reads (the trace comes separately).
pub const MAX_REPLY: usize = 1024 * 1024;
/// Protocol version, in every status reply.
pub const VERSION: u32 = 1;

/// Session settings a client sends with `record` and `start`: the same
/// values as the `FGTRACE_*` variables, checked the same way.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// `record`: stop after this long (none: until `stop` or the client hangs up).
    pub duration_ms: Option<u64>,
    /// `FGTRACE_MODE`: `stream` or `flight:N`.
    pub mode: Option<String>,
    /// `FGTRACE_SAMPLE`: `timer:999`, `wall:99`, `cycles:100000`, ...
    pub sample: Option<String>,
    /// `FGTRACE_FILTER`: record only functions matching these globs.
    pub filter: Vec<String>,
    /// `FGTRACE_EXCLUDE`: do not record functions matching these globs.
    pub exclude: Vec<String>,
    /// `FGTRACE_GRAPH_FUNCTION`: record only the calls made under these
    /// functions (with them).
    pub graph_function: Vec<String>,
    /// `FGTRACE_NOTRACE`: do not record these functions nor anything they call.
    pub notrace: Vec<String>,
    /// `FGTRACE_DEPTH`.
    pub depth: Option<u32>,
    /// `FGTRACE_THRESHOLD`: `10us`, `1.5ms`, ...
    pub threshold: Option<String>,
    /// `FGTRACE_AUTO_EXCLUDE`: `50ns`, ... (stream mode only).
    pub auto_exclude: Option<String>,
}

impl Settings {
    /// The session configuration these settings describe (no `FGTRACE_*`
    /// variable of the target is read), or every problem found.
    pub fn config(&self, default_mode: &str) -> Result<Config, String> {
        let join = |v: &[String]| (!v.is_empty()).then(|| v.join(","));
        let mode = self.mode.clone().unwrap_or_else(|| default_mode.into());
        let get = |k: &str| match k {
            "FGTRACE_MODE" => Some(mode.clone()),
            "FGTRACE_SAMPLE" => self.sample.clone(),
            "FGTRACE_FILTER" => join(&self.filter),
            "FGTRACE_EXCLUDE" => join(&self.exclude),
            "FGTRACE_GRAPH_FUNCTION" => join(&self.graph_function),
            "FGTRACE_NOTRACE" => join(&self.notrace),
            "FGTRACE_DEPTH" => self.depth.map(|d| d.to_string()),
            "FGTRACE_THRESHOLD" => self.threshold.clone(),
            "FGTRACE_AUTO_EXCLUDE" => self.auto_exclude.clone(),
            _ => None,
        };
        let mut c = Config::builtin();
        c.apply_env(get);
        if c.auto_exclude.is_some() && c.mode == fgtrace_trace::RecordMode::FlightRecorder {
            c.errors
                .push("auto_exclude needs stream mode (mode: stream)".into());
        }
        if c.errors.is_empty() {
            Ok(c)
        } else {
            Err(c
                .errors
                .join("; ")
                .replace("FGTRACE_MODE", "mode")
                .replace("FGTRACE_SAMPLE", "sample")
                .replace("FGTRACE_DEPTH", "depth")
                .replace("FGTRACE_THRESHOLD", "threshold")
                .replace("FGTRACE_AUTO_EXCLUDE", "auto_exclude"))
        }
    }
}

/// What a client asks.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(tag = "cmd", rename_all = "lowercase")]
pub enum Request {
    /// The process, its session, the endpoint.
    Status,
    /// Record with these settings for the duration (or until `stop`) and
    /// send the trace back on this connection.
    Record(Settings),
    /// Start a session that runs in the background (a flight recorder
    /// unless `mode` says `stream`) until `stop`.
    Start(Settings),
    /// Stop the background session (or, during a `record`, end it now) and
    /// send its trace.
    Stop,
    /// The running flight recorder's last calls per thread, without stopping it.
    Dump,
}

/// A request as it arrives: the command and the settings beside it, in
/// one object (`{"cmd":"record","duration_ms":2000}`). Read as a plain
/// struct, then checked, because the JSON reader reads only what a type
/// names (no buffering of unknown shapes, as a tagged enum would need).
/// Unknown fields are refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    cmd: String,
    #[serde(default)]
    duration_ms: Option<u64>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    sample: Option<String>,
    #[serde(default)]
    filter: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    graph_function: Vec<String>,
    #[serde(default)]
    notrace: Vec<String>,
    #[serde(default)]
    depth: Option<u32>,
    #[serde(default)]
    threshold: Option<String>,
    #[serde(default)]
    auto_exclude: Option<String>,
}

impl TryFrom<RawRequest> for Request {
    type Error = String;

    fn try_from(r: RawRequest) -> Result<Request, String> {
        let s = Settings {
            duration_ms: r.duration_ms,
            mode: r.mode,
            sample: r.sample,
            filter: r.filter,
            exclude: r.exclude,
            graph_function: r.graph_function,
            notrace: r.notrace,
            depth: r.depth,
            threshold: r.threshold,
            auto_exclude: r.auto_exclude,
        };
        let bare = |req: Request| {
            if s == Settings::default() {
                Ok(req)
            } else {
                Err(format!("`{}` takes no settings", r.cmd))
            }
        };
        match r.cmd.as_str() {
            "status" => bare(Request::Status),
            "stop" => bare(Request::Stop),
            "dump" => bare(Request::Dump),
            "record" => Ok(Request::Record(s)),
            "start" => Ok(Request::Start(s)),
            c => Err(format!(
                "unknown command `{c}` (status, record, start, stop, dump)"
            )),
        }
    }
}

/// The target's answer.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct Reply {
    /// The request was done (`false`: `error` or `busy` says why).
    pub ok: bool,
    /// What went wrong, for a person to read.
    pub error: Option<String>,
    /// The endpoint is serving another client.
    pub busy: bool,
    /// The target's state, for `status` (and `ps`).
    pub status: Option<Status>,
    /// A trace of this many bytes follows (8-byte length, then the bytes).
    pub trace_bytes: Option<u64>,
    /// What happened (`recording`, `duration over`, `the process is exiting`, ...).
    pub note: Option<String>,
}

impl Reply {
    /// A failed reply saying `msg`.
    pub fn error(msg: impl Into<String>) -> Reply {
        Reply {
            error: Some(msg.into()),
            ..Reply::default()
        }
    }
}

/// A target's state.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct Status {
    /// The target's process id.
    pub pid: u32,
    /// The target's program (`argv[0]`).
    pub program: String,
    /// The fgtrace version the target runs.
    pub fgtrace: String,
    /// The control protocol version the target speaks ([`VERSION`]).
    pub protocol: u32,
    /// `idle`, `recording` (a client's `record`), `background` (started by
    /// `start` or `FGTRACE_CONTROL=flight`), `program` (the program's own session).
    pub session: String,
    /// The session's mode (`stream`, `flight:N`), if one runs.
    pub mode: Option<String>,
    /// Threads that recorded into the running session.
    pub threads: usize,
}

/// Why a frame could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// Reading failed or the peer hung up in the middle of a frame.
    Io(io::Error),
    /// The peer announced a frame over the limit.
    TooLarge {
        /// The length the peer announced, in bytes.
        len: u64,
        /// The most this side reads, in bytes.
        max: usize,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::TooLarge { len, max } => {
                write!(f, "a frame of {len} bytes is over the limit of {max} bytes")
            }
        }
    }
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Writes one JSON frame.
pub fn write_json(w: &mut impl Write, v: &impl Serialize) -> io::Result<()> {
    let body = fgtrace_trace::json::to_vec(v)?;
    let len = u32::try_from(body.len()).map_err(io::Error::other)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()
}

/// Reads one frame of at most `max` bytes (a longer one is an error before
/// anything past its length is read).
pub fn read_frame(r: &mut impl Read, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as u64;
    if len > max as u64 {
        return Err(FrameError::TooLarge { len, max });
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    Ok(body)
}

/// Parses a request frame's body: a clear error for anything that is not one.
pub fn parse_request(body: &[u8]) -> Result<Request, String> {
    fgtrace_trace::json::from_slice::<RawRequest>(body)
        .and_then(Request::try_from)
        .map_err(|e| format!("bad request: {e}"))
}

/// Checks a request the way the target does before acting on it: the
/// settings of `record` and `start` must make a valid configuration.
pub fn check_request(req: &Request) -> Result<(), String> {
    match req {
        Request::Record(s) => s.config("stream").map(drop),
        Request::Start(s) => s.config(DEFAULT_BACKGROUND_MODE).map(drop),
        _ => Ok(()),
    }
}

/// The mode of a session `start` runs when the client does not say.
pub const DEFAULT_BACKGROUND_MODE: &str = "flight:65536";

/// Writes the trace that follows a reply with `trace_bytes`.
pub fn write_trace(w: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    w.write_all(&(bytes.len() as u64).to_be_bytes())?;
    w.write_all(bytes)?;
    w.flush()
}

/// Reads the trace that follows a reply with `trace_bytes: expected`.
pub fn read_trace(r: &mut impl Read, expected: u64) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 8];
    r.read_exact(&mut len)?;
    let len = u64::from_be_bytes(len);
    if len != expected {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the target announced {expected} trace bytes but sends {len}"),
        ));
    }
    let mut out = Vec::new();
    r.take(len).read_to_end(&mut out)?;
    if out.len() as u64 != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "the trace ended after {} of {len} bytes (the target went away)",
                out.len()
            ),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_ones_are_errors() {
        let r = Request::Record(Settings {
            duration_ms: Some(2000),
            sample: Some("timer:999".into()),
            filter: vec!["parse*".into()],
            ..Settings::default()
        });
        let mut buf = Vec::new();
        write_json(&mut buf, &r).unwrap();
        let body = read_frame(&mut &buf[..], MAX_REQUEST).unwrap();
        assert_eq!(parse_request(&body).unwrap(), r);
        assert!(parse_request(br#"{"cmd":"reboot"}"#).is_err());
        assert!(parse_request(br#"{"cmd":"record","bogus":1}"#).is_err());
        let e = parse_request(br#"{"cmd":"status","depth":3}"#).unwrap_err();
        assert!(e.contains("takes no settings"), "{e}");
        let e = parse_request(br#"{"cmd":"reboot"}"#).unwrap_err();
        assert!(e.contains("unknown command `reboot`"), "{e}");
        for r in [
            Request::Status,
            Request::Stop,
            Request::Dump,
            Request::Start(Settings::default()),
        ] {
            let body = fgtrace_trace::json::to_vec(&r).unwrap();
            assert_eq!(parse_request(&body).unwrap(), r);
        }
        let big = (MAX_REQUEST as u32 + 1).to_be_bytes();
        assert!(matches!(
            read_frame(&mut &big[..], MAX_REQUEST),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn settings_are_checked_like_the_environment() {
        let bad = Settings {
            sample: Some("sometimes".into()),
            depth: Some(3),
            mode: Some("flight:0".into()),
            ..Settings::default()
        };
        let e = bad.config("stream").unwrap_err();
        assert!(e.contains("sample") && e.contains("mode"), "{e}");
        let good = Settings {
            mode: Some("flight:100".into()),
            threshold: Some("10us".into()),
            ..Settings::default()
        };
        let c = good.config("stream").unwrap();
        assert_eq!(c.flight_calls, 100);
        let auto = Settings {
            auto_exclude: Some("50ns".into()),
            ..Settings::default()
        };
        let c = auto.config("stream").unwrap();
        assert_eq!(c.auto_exclude, Some(std::time::Duration::from_nanos(50)));
        let e = auto.config(DEFAULT_BACKGROUND_MODE).unwrap_err();
        assert!(e.contains("auto_exclude needs stream mode"), "{e}");
        let bad = Settings {
            auto_exclude: Some("soon".into()),
            ..Settings::default()
        };
        let e = bad.config("stream").unwrap_err();
        assert!(e.starts_with("auto_exclude: `soon`"), "{e}");
        let body = br#"{"cmd":"record","auto_exclude":"50ns"}"#;
        assert_eq!(parse_request(body).unwrap(), Request::Record(auto));
    }
}
