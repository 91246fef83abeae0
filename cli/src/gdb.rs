//! A minimal client of GDB's remote serial protocol: what reading a board's
//! RAM through any GDB server needs (qemu's `-gdb`, OpenOCD, probe-rs, a
//! J-Link GDB server). Packets are `$DATA#CS` (CS: the sum of DATA's bytes
//! mod 256, two hex digits), each acknowledged with `+` (or `-`: send it
//! again). The requests used: `?` (why the target stopped), `m ADDR,LEN`
//! (read memory, answered in hex), `M ADDR,LEN:HEX` (write), `c`
//! (continue: answered by a stop reply when the target stops), and the byte
//! 0x03 (interrupt a running target). Stop replies: `S`/`T` (stopped, with a
//! signal), `W` (exited, with a status), `X` (killed by a signal); `O`
//! packets are the target's console output.
//!
//! No crate on crates.io does the client side (`gdbstub` and `gdb-protocol`
//! are servers), and this much is small.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Why the target is not running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Stopped with this signal (`S05`, `T02...`): it can continue.
    Signal(u8),
    /// Exited with this status (`W00`).
    Exited(u8),
    /// Killed by this signal (`X0b`).
    Killed(u8),
}

/// Bytes of memory one `m` or `M` packet carries (hex doubles them; every
/// server takes packets of this size).
const CHUNK: usize = 1024;

/// A connection to a GDB server.
pub struct Gdb<S> {
    s: S,
    /// Received, not yet parsed.
    pending: Vec<u8>,
    /// Where, for messages.
    name: String,
}

impl Gdb<TcpStream> {
    /// Connects to `addr`, waiting up to `wait` for a server to listen
    /// there (one started at the same time).
    pub fn connect(addr: &str, wait: Duration) -> Result<Gdb<TcpStream>, String> {
        let deadline = Instant::now() + wait;
        let addrs: Vec<_> = addr
            .to_socket_addrs()
            .map_err(|e| format!("--gdb {addr}: not a HOST:PORT address ({e})"))?
            .collect();
        let s = loop {
            let mut last = None;
            let mut got = None;
            for a in &addrs {
                match TcpStream::connect(a) {
                    Ok(s) => {
                        got = Some(s);
                        break;
                    }
                    Err(e) => last = Some(e),
                }
            }
            match got {
                Some(s) => break s,
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                None => {
                    let e = last.map_or_else(|| "no address".into(), |e| e.to_string());
                    return Err(format!(
                        "no GDB server at {addr} ({e}, for {:.1} s): start one there (qemu -gdb tcp::PORT, openocd, probe-rs gdb, JLinkGDBServer)",
                        wait.as_secs_f64()
                    ));
                }
            }
        };
        s.set_nodelay(true).ok();
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| format!("--gdb {addr}: {e}"))?;
        Ok(Gdb::new(s, addr))
    }
}

impl<S: Read + Write> Gdb<S> {
    /// A client on a connected stream.
    pub fn new(s: S, name: &str) -> Gdb<S> {
        Gdb {
            s,
            pending: Vec::new(),
            name: name.to_string(),
        }
    }

    fn io(&self, what: &str, e: std::io::Error) -> String {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            format!(
                "the GDB server at {} did not answer {what} in 10 s",
                self.name
            )
        } else {
            format!("the GDB server at {}: {what}: {e}", self.name)
        }
    }

    fn fill(&mut self, what: &str) -> Result<(), String> {
        let mut b = [0u8; 4096];
        match self.s.read(&mut b) {
            Ok(0) => Err(format!(
                "the GDB server at {} closed the connection ({what})",
                self.name
            )),
            Ok(n) => {
                self.pending.extend_from_slice(&b[..n]);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(self.io(what, e)),
        }
    }

    /// Sends one packet and waits for its acknowledgement.
    fn send(&mut self, data: &[u8]) -> Result<(), String> {
        let frame = frame(data);
        for _ in 0..3 {
            self.s
                .write_all(&frame)
                .and_then(|_| self.s.flush())
                .map_err(|e| self.io("a request", e))?;
            loop {
                match self.pending.first() {
                    None => self.fill("an acknowledgement")?,
                    Some(b'+') => {
                        self.pending.remove(0);
                        return Ok(());
                    }
                    Some(b'-') => {
                        self.pending.remove(0);
                        break;
                    }
                    // A packet before the ack (a server in no-ack mode, or
                    // a late reply): left for `recv`.
                    Some(b'$') => return Ok(()),
                    Some(_) => {
                        self.pending.remove(0);
                    }
                }
            }
        }
        Err(format!(
            "the GDB server at {} refused a packet three times",
            self.name
        ))
    }

    /// Receives one packet's data (acknowledged), skipping stray bytes.
    fn recv(&mut self, what: &str) -> Result<Vec<u8>, String> {
        loop {
            match parse(&mut self.pending) {
                Parsed::Packet(d) => {
                    // An ack that cannot go is no error: the packet is
                    // here, and a server that exits (after `W`) has closed
                    // the connection already.
                    let _ = self.s.write_all(b"+");
                    return Ok(d);
                }
                Parsed::BadChecksum => {
                    self.s
                        .write_all(b"-")
                        .map_err(|e| self.io("a retransmission request", e))?;
                }
                Parsed::Malformed(why) => {
                    return Err(format!(
                        "the GDB server at {} sent a malformed packet ({why})",
                        self.name
                    ))
                }
                Parsed::Incomplete => self.fill(what)?,
            }
        }
    }

    /// A request and its reply; an `Exx` reply is an error.
    fn ask(&mut self, data: &[u8], what: &str) -> Result<Vec<u8>, String> {
        self.send(data)?;
        let r = self.recv(what)?;
        if r.len() == 3 && r[0] == b'E' {
            return Err(format!(
                "the GDB server at {} refused {what}: error {}",
                self.name,
                String::from_utf8_lossy(&r[1..])
            ));
        }
        Ok(r)
    }

    /// Waits for a stop reply (console output in `O` packets is skipped).
    fn stop_reply(&mut self) -> Result<Stop, String> {
        loop {
            let r = self.recv("with a stop reply")?;
            if let Some(stop) = parse_stop(&r).map_err(|why| {
                format!(
                    "the GDB server at {} sent a malformed stop reply `{}` ({why})",
                    self.name,
                    String::from_utf8_lossy(&r)
                )
            })? {
                return Ok(stop);
            }
        }
    }

    /// `?`: why the target is stopped (a server stops it on connection).
    pub fn halt_reason(&mut self) -> Result<Stop, String> {
        self.send(b"?")?;
        self.stop_reply()
    }

    /// `c`: lets the target run (no reply until it stops).
    pub fn resume(&mut self) -> Result<(), String> {
        self.send(b"c")
    }

    /// Interrupts the running target (0x03) and waits until it stops.
    pub fn interrupt(&mut self) -> Result<Stop, String> {
        self.s
            .write_all(&[3])
            .and_then(|_| self.s.flush())
            .map_err(|e| self.io("an interrupt", e))?;
        self.stop_reply()
    }

    /// `D`: detaches, which lets the target run on (best effort: for a
    /// reader that stops on an error, so the target is not left halted).
    pub fn detach(&mut self) {
        if self.send(b"D").is_ok() {
            let _ = self.recv("detaching");
        }
    }

    /// `m`: reads `len` bytes at `addr`.
    pub fn read_mem(&mut self, addr: u64, len: usize) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let n = (len - out.len()).min(CHUNK);
            let at = addr + out.len() as u64;
            let what = format!("reading {n} bytes at {at:#x}");
            let r = self.ask(format!("m{at:x},{n:x}").as_bytes(), &what)?;
            let bytes = unhex(&r).ok_or_else(|| {
                format!(
                    "the GDB server at {} sent a malformed packet ({what}: not hex)",
                    self.name
                )
            })?;
            if bytes.is_empty() || bytes.len() > n {
                return Err(format!(
                    "the GDB server at {} sent {} bytes {what}",
                    self.name,
                    bytes.len()
                ));
            }
            out.extend_from_slice(&bytes);
        }
        Ok(out)
    }

    /// `M`: writes `data` at `addr`.
    pub fn write_mem(&mut self, addr: u64, data: &[u8]) -> Result<(), String> {
        for (i, chunk) in data.chunks(CHUNK).enumerate() {
            let at = addr + (i * CHUNK) as u64;
            let mut p = format!("M{at:x},{:x}:", chunk.len()).into_bytes();
            for b in chunk {
                p.extend_from_slice(format!("{b:02x}").as_bytes());
            }
            let what = format!("writing {} bytes at {at:#x}", chunk.len());
            let r = self.ask(&p, &what)?;
            if r != b"OK" {
                return Err(format!(
                    "the GDB server at {} answered `{}` {what}",
                    self.name,
                    String::from_utf8_lossy(&r)
                ));
            }
        }
        Ok(())
    }
}

/// `$DATA#CS`, with `$`, `#`, `}` and `*` in DATA escaped.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(data.len() + 4);
    for &b in data {
        if matches!(b, b'$' | b'#' | b'}' | b'*') {
            body.push(b'}');
            body.push(b ^ 0x20);
        } else {
            body.push(b);
        }
    }
    let cs = body.iter().fold(0u8, |a, &b| a.wrapping_add(b));
    let mut f = Vec::with_capacity(body.len() + 4);
    f.push(b'$');
    f.extend_from_slice(&body);
    f.extend_from_slice(format!("#{cs:02x}").as_bytes());
    f
}

/// What the received bytes hold.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    /// A packet's data (escapes and run lengths undone); consumed.
    Packet(Vec<u8>),
    /// A packet whose checksum does not match; consumed.
    BadChecksum,
    /// Not a packet at all.
    Malformed(String),
    /// Not yet a whole packet.
    Incomplete,
}

/// Packets are at most this long (a server sends far less).
const MAX_PACKET: usize = 1 << 20;

/// Takes the first packet off `buf` (acks and other bytes before it are
/// dropped).
fn parse(buf: &mut Vec<u8>) -> Parsed {
    let Some(start) = buf.iter().position(|&b| b == b'$') else {
        // Acks, notifications' stray bytes: nothing to keep.
        buf.clear();
        return Parsed::Incomplete;
    };
    buf.drain(..start);
    let Some(hash) = buf.iter().position(|&b| b == b'#') else {
        if buf.len() > MAX_PACKET {
            buf.clear();
            return Parsed::Malformed(format!("no `#` in {MAX_PACKET} bytes"));
        }
        return Parsed::Incomplete;
    };
    if buf.len() < hash + 3 {
        return Parsed::Incomplete;
    }
    let body: Vec<u8> = buf[1..hash].to_vec();
    let cs = std::str::from_utf8(&buf[hash + 1..hash + 3])
        .ok()
        .and_then(|s| u8::from_str_radix(s, 16).ok());
    buf.drain(..hash + 3);
    let Some(cs) = cs else {
        return Parsed::Malformed("its checksum is not two hex digits".into());
    };
    if body.iter().fold(0u8, |a, &b| a.wrapping_add(b)) != cs {
        return Parsed::BadChecksum;
    }
    // Escapes (`}` then the byte xor 0x20) and run lengths (`X*N`: X
    // repeated N - 29 more times).
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'}' => {
                let Some(&b) = body.get(i + 1) else {
                    return Parsed::Malformed("it ends in an escape".into());
                };
                out.push(b ^ 0x20);
                i += 2;
            }
            b'*' => {
                let (Some(&last), Some(&n)) = (out.last(), body.get(i + 1)) else {
                    return Parsed::Malformed("a run length with nothing to repeat".into());
                };
                if !(29..=126).contains(&n) {
                    return Parsed::Malformed(format!("a run length of {n}"));
                }
                out.extend(std::iter::repeat_n(last, (n - 29) as usize));
                i += 2;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Parsed::Packet(out)
}

/// A stop reply; `None` for console output (`O...`).
fn parse_stop(r: &[u8]) -> Result<Option<Stop>, String> {
    let Some((&kind, rest)) = r.split_first() else {
        return Err("empty".into());
    };
    if kind == b'O' && rest != b"K" {
        return Ok(None);
    }
    let code = rest
        .get(..2)
        .and_then(unhex)
        .and_then(|v| v.first().copied());
    match (kind, code) {
        (b'S' | b'T', Some(c)) => Ok(Some(Stop::Signal(c))),
        (b'W', Some(c)) => Ok(Some(Stop::Exited(c))),
        (b'X', Some(c)) => Ok(Some(Stop::Killed(c))),
        (b'S' | b'T' | b'W' | b'X', None) => Err("no two-digit code".into()),
        _ => Err("not a stop reply".into()),
    }
}

fn unhex(h: &[u8]) -> Option<Vec<u8>> {
    if h.len() % 2 != 0 {
        return None;
    }
    h.chunks(2)
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|s| u8::from_str_radix(s, 16).ok())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A server's side, scripted: what it will send, and what it got.
    struct Script {
        rx: Cursor<Vec<u8>>,
        tx: Vec<u8>,
    }
    impl Read for Script {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.rx.read(b)
        }
    }
    impl Write for Script {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.tx.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    fn client(server_says: &[u8]) -> Gdb<Script> {
        Gdb::new(
            Script {
                rx: Cursor::new(server_says.to_vec()),
                tx: Vec::new(),
            },
            "test",
        )
    }

    #[test]
    fn frames_carry_their_checksum_and_escapes() {
        // Captured from gdb talking to qemu.
        assert_eq!(frame(b"?"), b"$?#3f");
        assert_eq!(frame(b"m20000000,4"), b"$m20000000,4#4f");
        assert_eq!(frame(b"c"), b"$c#63");
        assert_eq!(frame(b"a#b"), b"$a}\x03b#43");
    }

    #[test]
    fn a_memory_read_is_acknowledged_and_decoded() {
        // qemu's answer to `m20000000,4`: an ack, then the packet.
        let mut g = client(b"+$53454747#a7");
        assert_eq!(g.read_mem(0x2000_0000, 4).unwrap(), b"SEGG");
        assert_eq!(g.s.tx, b"$m20000000,4#4f+");
    }

    #[test]
    fn run_lengths_and_retransmission_requests_are_handled() {
        // `0*"` is `0` and five more (`"` is 34 = 29 + 5): six zeros.
        let mut g = client(b"-+$0*\"#7c");
        assert_eq!(g.read_mem(0x10, 3).unwrap(), [0, 0, 0]);
        // Sent twice: the server asked for it again.
        assert_eq!(g.s.tx, b"$m10,3#2d$m10,3#2d+");
    }

    #[test]
    fn a_bad_checksum_is_asked_for_again() {
        let mut g = client(b"+$OK#00$OK#9a");
        g.write_mem(0x20, &[1, 0xab]).unwrap();
        assert_eq!(g.s.tx, b"$M20,2:01ab#6b-+");
    }

    #[test]
    fn stop_replies_say_stopped_exited_or_killed() {
        assert_eq!(client(b"+$S05#b8").halt_reason().unwrap(), Stop::Signal(5));
        assert_eq!(
            client(b"+$T02thread:01;#04").halt_reason().unwrap(),
            Stop::Signal(2)
        );
        // Console output first, then the exit.
        let mut g = client(b"$O6869#2c$W00#b7");
        assert_eq!(g.interrupt().unwrap(), Stop::Exited(0));
        assert_eq!(g.s.tx, b"\x03++");
        assert_eq!(client(b"$X0b#ea").interrupt().unwrap(), Stop::Killed(11));
    }

    #[test]
    fn no_server_at_the_address_is_named() {
        // A port nothing listens on: one the kernel gave, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let e = match Gdb::connect(&addr, Duration::from_millis(200)) {
            Ok(_) => panic!("connected to {addr}"),
            Err(e) => e,
        };
        assert!(e.starts_with(&format!("no GDB server at {addr}")), "{e}");
        let e = match Gdb::connect("nowhere", Duration::ZERO) {
            Ok(_) => panic!("connected to nowhere"),
            Err(e) => e,
        };
        assert!(e.contains("not a HOST:PORT address"), "{e}");
    }

    #[test]
    fn malformed_packets_and_errors_are_named() {
        let e = client(b"+$zz#f4").read_mem(0, 1).unwrap_err();
        assert!(
            e.contains("malformed packet") && e.contains("not hex"),
            "{e}"
        );
        let e = client(b"+$E14#aa").read_mem(0, 1).unwrap_err();
        assert!(
            e.contains("refused reading 1 bytes at 0x0: error 14"),
            "{e}"
        );
        let e = client(b"+$ab#zz").read_mem(0, 1).unwrap_err();
        assert!(e.contains("checksum is not two hex digits"), "{e}");
        let e = client(b"+$Q#51").halt_reason().unwrap_err();
        assert!(e.contains("malformed stop reply `Q`"), "{e}");
        let e = client(b"+").read_mem(0, 1).unwrap_err();
        assert!(e.contains("closed the connection"), "{e}");
    }
}
