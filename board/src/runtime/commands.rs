//! Host commands over the same link: `record <ms> <hz>`, `flight <hz>`,
//! `stop`, `dump`.

use super::*;

/// A host command, as [`poll`] parsed it (and already carried out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `record <ms> <hz>`: a stream session, sampling at `hz` (0: none), for `ms` (0: until stop).
    Record {
        /// Milliseconds.
        ms: u32,
        /// Sampling rate.
        hz: u32,
    },
    /// `flight <hz>`: a flight-recorder session.
    Flight {
        /// Sampling rate.
        hz: u32,
    },
    /// `stop`.
    Stop,
    /// `dump`: the flight recorder, now.
    Dump,
    /// A line that is none of these (answered with a TEXT frame).
    Unknown,
}

pub(super) struct LineBuf(pub(super) UnsafeCell<([u8; 64], usize)>);
// SAFETY: only the main loop polls.
unsafe impl Sync for LineBuf {}

/// Reads what the host sent; on a whole line, carries the command out and
/// returns it.
pub fn poll(src: &mut dyn CommandInput) -> Option<Command> {
    // SAFETY: see `LineBuf`.
    let (buf, len) = unsafe { &mut *LINE.0.get() };
    while let Some(b) = src.read() {
        if b == b'\n' || b == b'\r' {
            if *len == 0 {
                continue;
            }
            let line = core::str::from_utf8(&buf[..*len]).unwrap_or("");
            let cmd = parse(line);
            *len = 0;
            run(cmd);
            return Some(cmd);
        }
        if *len < buf.len() {
            buf[*len] = b;
            *len += 1;
        }
    }
    None
}

/// Parses one command line.
pub fn parse(line: &str) -> Command {
    let mut words = line.split_ascii_whitespace();
    let num = |w: Option<&str>| w.and_then(|w| w.parse::<u32>().ok());
    match words.next() {
        Some("record") => match (num(words.next()), num(words.next())) {
            (Some(ms), Some(hz)) => Command::Record { ms, hz },
            _ => Command::Unknown,
        },
        Some("flight") => match num(words.next()) {
            Some(hz) => Command::Flight { hz },
            None => Command::Unknown,
        },
        Some("stop") => Command::Stop,
        Some("dump") => Command::Dump,
        _ => Command::Unknown,
    }
}

pub(super) fn run(cmd: Command) {
    match cmd {
        Command::Record { ms, hz } => start(MODE_STREAM, hz, ms),
        Command::Flight { hz } => start(MODE_FLIGHT, hz, 0),
        Command::Stop => {
            if recording() {
                stop()
            }
        }
        Command::Dump => dump(),
        Command::Unknown => text("unknown command (record <ms> <hz> | flight <hz> | stop | dump)"),
    }
}
