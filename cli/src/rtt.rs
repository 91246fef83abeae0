//! `fgtrace board --gdb`: a board's RTT up-channel read through a GDB
//! server. Each poll halts the target (GDB servers in all-stop mode, qemu's
//! among them, read memory only from a stopped target), reads the
//! up-channel's new bytes, moves its read offset past them, writes pending
//! host commands into the down-channel, and lets the target run again. The
//! bytes go to the same decoder as a UART's.

use crate::gdb::{Gdb, Stop};
use fgtrace_import::board_stream::rtt::{
    CHANNEL_SIZE, ID, OFF_BUFFER, OFF_CHANNELS, OFF_FLAGS, OFF_MAX_DOWN, OFF_MAX_UP, OFF_READ,
    OFF_SIZE, OFF_WRITE,
};
use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the firmware has to set its control block up.
const FIND_FOR: Duration = Duration::from_secs(10);
/// The pause between polls that found nothing new.
const IDLE: Duration = Duration::from_millis(2);

/// Where to look for the control block.
#[derive(Clone, Debug)]
pub enum Where {
    /// The address of `_SEGGER_RTT`.
    Symbol(u64),
    /// The ELF's writable segments, searched for the id.
    Scan(Vec<(u64, u64)>),
}

/// Reads where the control block is from the firmware's ELF.
pub fn locate(elf: &Path) -> Result<Where, String> {
    use object::{Object, ObjectSegment, ObjectSymbol, SegmentFlags};
    let data = std::fs::read(elf).map_err(|e| format!("{}: {e}", elf.display()))?;
    let obj = object::File::parse(&*data)
        .map_err(|e| format!("{}: not an ELF file ({e})", elf.display()))?;
    if let Some(s) = obj.symbols().find(|s| s.name() == Ok("_SEGGER_RTT")) {
        return Ok(Where::Symbol(s.address()));
    }
    // PF_W: the segments the firmware writes (its RAM).
    let ram: Vec<(u64, u64)> = obj
        .segments()
        .filter(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & 2 != 0))
        .map(|s| (s.address(), s.size()))
        .filter(|&(_, n)| n > 0)
        .collect();
    if ram.is_empty() {
        return Err(format!(
            "{}: no `_SEGGER_RTT` symbol and no writable segment to search for an RTT control block",
            elf.display()
        ));
    }
    Ok(Where::Scan(ram))
}

/// One channel's buffer.
#[derive(Clone, Copy, Debug)]
struct Channel {
    /// The descriptor's address.
    desc: u64,
    buffer: u64,
    size: u32,
}

/// The up-channel as a byte stream.
pub struct RttReader {
    gdb: Gdb<TcpStream>,
    at: Where,
    up: Option<(Channel, Option<Channel>)>,
    /// The up-channel's mode to set when it is found (flags bits 0-1).
    mode: Option<u32>,
    /// Host commands not yet in the down-channel.
    commands: Arc<Mutex<Vec<u8>>>,
    started: Instant,
    /// Read, not yet handed out.
    ready: Vec<u8>,
    /// How the target ended (the stream then ends).
    pub ended: Option<Stop>,
    /// Why reading stopped early (the stream then ends, so what was
    /// decoded is kept; the caller reports it).
    pub error: Option<String>,
    /// Bytes read, and the time spent polling: the rate the polling sustains.
    pub bytes: u64,
    /// Polls made.
    pub polls: u64,
    /// Polls that found the up-channel full: the firmware was waiting for
    /// the host (blocking mode) or dropping frames.
    pub full: u64,
}

impl RttReader {
    /// Connects to the GDB server at `addr` and lets the target run.
    pub fn connect(
        addr: &str,
        at: Where,
        mode: Option<u32>,
        commands: Arc<Mutex<Vec<u8>>>,
    ) -> Result<RttReader, String> {
        let mut gdb = Gdb::connect(addr, Duration::from_secs(5))?;
        match gdb.halt_reason()? {
            Stop::Signal(_) => {}
            s => return Err(format!("--gdb {addr}: the target has ended ({s:?})")),
        }
        gdb.resume()?;
        Ok(RttReader {
            gdb,
            at,
            up: None,
            mode,
            commands,
            started: Instant::now(),
            ready: Vec::new(),
            ended: None,
            error: None,
            bytes: 0,
            polls: 0,
            full: 0,
        })
    }

    /// One poll, with the target halted: finds the block, reads, writes
    /// commands. `Ok(false)`: the target has ended.
    fn poll(&mut self) -> Result<bool, String> {
        self.polls += 1;
        match self.gdb.interrupt()? {
            Stop::Signal(_) => {}
            s => {
                if self.up.is_none() {
                    return Err(format!(
                        "the target ended ({}) before it set an RTT control block up{}",
                        describe(&s),
                        self.where_text()
                    ));
                }
                self.ended = Some(s);
                return Ok(false);
            }
        }
        if self.up.is_none() {
            self.up = self.find()?;
            if let (Some((up, _)), Some(mode)) = (self.up, self.mode) {
                let f = self.gdb.read_mem(up.desc + OFF_FLAGS, 4)?;
                let f = u32::from_le_bytes(f[..4].try_into().unwrap());
                self.gdb
                    .write_mem(up.desc + OFF_FLAGS, &((f & !3) | mode).to_le_bytes())?;
            }
            if self.up.is_none() && self.started.elapsed() > FIND_FOR {
                return Err(format!(
                    "no RTT control block{} after {} s: is the firmware built with RTT (fgtrace-board's `rtt` feature, `rtt::init`) and is it the one running?",
                    self.where_text(),
                    FIND_FOR.as_secs()
                ));
            }
        }
        if let Some((up, down)) = self.up {
            self.read_up(up)?;
            if let Some(down) = down {
                self.write_down(down)?;
            }
        }
        self.gdb.resume()?;
        Ok(true)
    }

    fn where_text(&self) -> String {
        match &self.at {
            Where::Symbol(a) => format!(" at _SEGGER_RTT ({a:#x})"),
            Where::Scan(r) => format!(
                " in the firmware's RAM ({})",
                r.iter()
                    .map(|(a, n)| format!("{a:#x}+{n:#x}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// The block, once its id is there.
    fn find(&mut self) -> Result<Option<(Channel, Option<Channel>)>, String> {
        let addr = match &self.at {
            Where::Symbol(a) => {
                let id = self.gdb.read_mem(*a, 16)?;
                if id[..] != ID[..] {
                    return Ok(None);
                }
                *a
            }
            Where::Scan(ranges) => {
                let mut found = None;
                for &(start, len) in &ranges.clone() {
                    let mem = self.gdb.read_mem(start, len as usize)?;
                    if let Some(i) = mem.windows(16).position(|w| w == ID) {
                        found = Some(start + i as u64);
                        break;
                    }
                }
                match found {
                    Some(a) => a,
                    None => return Ok(None),
                }
            }
        };
        let counts = self.gdb.read_mem(addr + OFF_MAX_UP, 8)?;
        let max_up = i32::from_le_bytes(counts[0..4].try_into().unwrap());
        let max_down = i32::from_le_bytes(counts[4..8].try_into().unwrap());
        debug_assert_eq!(OFF_MAX_DOWN, OFF_MAX_UP + 4);
        if !(1..=255).contains(&max_up) || !(0..=255).contains(&max_down) {
            return Err(format!(
                "the RTT control block at {addr:#x} is not one: {max_up} up-channels, {max_down} down-channels"
            ));
        }
        let channel = |g: &mut Gdb<TcpStream>, desc: u64| -> Result<Channel, String> {
            let d = g.read_mem(desc, CHANNEL_SIZE as usize)?;
            let word =
                |o: u64| u32::from_le_bytes(d[o as usize..o as usize + 4].try_into().unwrap());
            let c = Channel {
                desc,
                buffer: word(OFF_BUFFER) as u64,
                size: word(OFF_SIZE),
            };
            if c.size < 2 || c.size > 1 << 24 {
                return Err(format!(
                    "the RTT channel at {desc:#x} has a buffer of {} bytes",
                    c.size
                ));
            }
            Ok(c)
        };
        let up = channel(&mut self.gdb, addr + OFF_CHANNELS)?;
        let down = if max_down > 0 {
            Some(channel(
                &mut self.gdb,
                addr + OFF_CHANNELS + max_up as u64 * CHANNEL_SIZE,
            )?)
        } else {
            None
        };
        Ok(Some((up, down)))
    }

    fn offsets(&mut self, c: Channel) -> Result<(u32, u32), String> {
        let d = self.gdb.read_mem(c.desc + OFF_WRITE, 8)?;
        debug_assert_eq!(OFF_READ, OFF_WRITE + 4);
        let wr = u32::from_le_bytes(d[0..4].try_into().unwrap());
        let rd = u32::from_le_bytes(d[4..8].try_into().unwrap());
        if wr >= c.size || rd >= c.size {
            return Err(format!(
                "the RTT channel at {:#x} has offsets past its {} bytes (write {wr}, read {rd}): the control block is overwritten",
                c.desc, c.size
            ));
        }
        Ok((wr, rd))
    }

    fn read_up(&mut self, up: Channel) -> Result<(), String> {
        let (wr, rd) = self.offsets(up)?;
        if wr == rd {
            return Ok(());
        }
        if (wr + 1) % up.size == rd {
            self.full += 1;
        }
        let start = self.ready.len();
        if wr > rd {
            let b = self
                .gdb
                .read_mem(up.buffer + rd as u64, (wr - rd) as usize)?;
            self.ready.extend_from_slice(&b);
        } else {
            let b = self
                .gdb
                .read_mem(up.buffer + rd as u64, (up.size - rd) as usize)?;
            self.ready.extend_from_slice(&b);
            if wr > 0 {
                let b = self.gdb.read_mem(up.buffer, wr as usize)?;
                self.ready.extend_from_slice(&b);
            }
        }
        self.bytes += (self.ready.len() - start) as u64;
        self.gdb.write_mem(up.desc + OFF_READ, &wr.to_le_bytes())
    }

    fn write_down(&mut self, down: Channel) -> Result<(), String> {
        let queue = self.commands.clone();
        let mut cmds = queue.lock().unwrap_or_else(|p| p.into_inner());
        if cmds.is_empty() {
            return Ok(());
        }
        let (mut wr, rd) = self.offsets(down)?;
        let mut sent = 0;
        // One byte stays free: a full ring would read as empty. At most two
        // pieces: to the buffer's end, then from its start.
        while sent < cmds.len() {
            let free = if rd > wr {
                rd - wr - 1
            } else {
                down.size - 1 - (wr - rd)
            };
            let n = (free.min(down.size - wr) as usize).min(cmds.len() - sent);
            if n == 0 {
                break;
            }
            self.gdb
                .write_mem(down.buffer + wr as u64, &cmds[sent..sent + n])?;
            wr = (wr + n as u32) % down.size;
            sent += n;
        }
        cmds.drain(..sent);
        drop(cmds);
        if sent > 0 {
            self.gdb
                .write_mem(down.desc + OFF_WRITE, &wr.to_le_bytes())?;
        }
        Ok(())
    }

    /// Seconds since the target was let run.
    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

/// How a target ended, in words.
pub fn describe(s: &Stop) -> String {
    match s {
        Stop::Exited(c) => format!("exited with status {c}"),
        Stop::Killed(sig) => format!("killed by signal {sig}"),
        Stop::Signal(sig) => format!("stopped with signal {sig}"),
    }
}

impl Read for RttReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if !self.ready.is_empty() {
                let n = buf.len().min(self.ready.len());
                buf[..n].copy_from_slice(&self.ready[..n]);
                self.ready.drain(..n);
                return Ok(n);
            }
            if self.ended.is_some() || self.error.is_some() {
                return Ok(0);
            }
            match self.poll() {
                Ok(true) => {
                    if self.ready.is_empty() {
                        std::thread::sleep(IDLE);
                    }
                }
                Ok(false) => {}
                Err(e) => {
                    self.error = Some(e);
                    self.gdb.detach();
                }
            }
        }
    }
}

/// Host commands for the down-channel, queued until the next poll.
pub struct CommandQueue(pub Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CommandQueue {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
