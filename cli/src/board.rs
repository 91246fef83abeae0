//! `fgtrace board`: reads a board's framed stream (a file, a serial device, a
//! TCP socket, a child command's stdout such as qemu's `-serial stdio`,
//! or a board's RTT up-channel through a GDB server), sends it host commands, prints its console text, and writes each
//! recording session as an ordinary trace.

use fgtrace_import::board_stream::{elf_mappings, Decoder, ElfStrings, Output};
use fgtrace_trace::recorded::TextOf;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Decode a board's stream into traces.
#[derive(clap::Args, Debug, Clone)]
pub struct BoardArgs {
    /// Where the trace goes; a second session goes to OUT-2.fgt, and so on.
    #[arg(short = 'o', long = "output", value_name = "OUT.fgt")]
    pub output: PathBuf,
    /// The firmware's ELF: sampled addresses are symbolized against it.
    #[arg(long, value_name = "FIRMWARE")]
    pub elf: Option<PathBuf>,
    /// A command line to send to the board first (repeatable), e.g.
    /// `record 2000 999` (ms, Hz), `flight 999`, `dump`, `stop`.
    #[arg(long = "command", short = 'c', value_name = "LINE")]
    pub commands: Vec<String>,
    /// Read from this TCP address (qemu `-serial tcp:HOST:PORT,server`).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "input")]
    pub tcp: Option<String>,
    /// Read the board's RTT up-channel through the GDB server at this
    /// address (qemu `-gdb tcp::PORT`, OpenOCD, probe-rs, a J-Link GDB
    /// server), polling it, and send commands on its down-channel. Needs
    /// --elf (its `_SEGGER_RTT` symbol, or its RAM to search).
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["input", "tcp", "child"])]
    pub gdb: Option<String>,
    /// With --gdb: set the RTT up-channel's mode when the host finds it:
    /// `block` (the board waits for the host), `skip` (a frame that does not
    /// fit is dropped, and counted) or `trim`. By default the firmware's.
    #[arg(long, value_name = "MODE", requires = "gdb", value_parser = ["block", "skip", "trim"])]
    pub rtt_mode: Option<String>,
    /// Read a file or a serial device (`-` is stdin); or give a command after `--`.
    #[arg(value_name = "INPUT")]
    pub input: Option<PathBuf>,
    /// Run this command and read its stdout (commands go to its stdin).
    #[arg(last = true, value_name = "COMMAND")]
    pub child: Vec<String>,
}

/// Runs the decoder to the end of the stream.
pub fn run(args: &BoardArgs) -> Result<(), String> {
    let mappings = match &args.elf {
        Some(elf) => elf_mappings(elf)?,
        None => Vec::new(),
    };
    // Checked now, so a bad ELF fails before the board runs.
    if let Some(elf) = &args.elf {
        ElfStrings::read(elf)?;
    }
    let mut commands = String::new();
    for c in &args.commands {
        if c.contains('\n') || c.len() > 60 {
            return Err(format!("--command `{c}`: one line of at most 60 bytes"));
        }
        commands.push_str(c);
        commands.push('\n');
    }
    let mut child = None;
    let mut rtt = None;
    let (mut input, mut control): (Box<dyn Read>, Option<Box<dyn Write + Send>>) =
        if !args.child.is_empty() {
            let mut c = Command::new(&args.child[0])
                .args(&args.child[1..])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot run `{}`: {e}", args.child[0]))?;
            let out = c.stdout.take().expect("piped");
            let inp = c.stdin.take().expect("piped");
            child = Some(c);
            (Box::new(out), Some(Box::new(inp)))
        } else if let Some(addr) = &args.gdb {
            let Some(elf) = &args.elf else {
                return Err("--gdb needs --elf FIRMWARE: where its RTT control block is".into());
            };
            let at = crate::rtt::locate(elf)?;
            let queue = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let mode = args.rtt_mode.as_deref().map(|m| match m {
                "skip" => 0,
                "trim" => 1,
                _ => 2,
            });
            rtt = Some(crate::rtt::RttReader::connect(
                addr,
                at,
                mode,
                queue.clone(),
            )?);
            (
                Box::new(std::io::empty()),
                Some(Box::new(crate::rtt::CommandQueue(queue))),
            )
        } else if let Some(addr) = &args.tcp {
            let s = TcpStream::connect(addr).map_err(|e| format!("--tcp {addr}: {e}"))?;
            let w = s.try_clone().map_err(|e| format!("--tcp {addr}: {e}"))?;
            (Box::new(s), Some(Box::new(w)))
        } else {
            match args.input.as_deref() {
                None => return Err("give an INPUT, --tcp, --gdb, or a command after `--`".into()),
                Some(p) if p == Path::new("-") => (Box::new(std::io::stdin()), None),
                Some(p) => {
                    let f = std::fs::File::open(p)
                        .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                    // A serial device takes commands on the same file.
                    let w = std::fs::OpenOptions::new().write(true).open(p).ok();
                    // (A Unix character device; on other systems, use --tcp.)
                    #[cfg(unix)]
                    let is_char = std::fs::metadata(p).map(|m| {
                        use std::os::unix::fs::FileTypeExt;
                        m.file_type().is_char_device()
                    });
                    #[cfg(not(unix))]
                    let is_char = Ok::<bool, std::io::Error>(false);
                    let control = match (w, is_char) {
                        (Some(w), Ok(true)) => Some(Box::new(w) as Box<dyn Write + Send>),
                        _ => None,
                    };
                    (Box::new(f), control)
                }
            }
        };
    // The commands go once the board has sent its first frame, or after a
    // second of silence (a board that spoke before the host listened): a
    // board may set its UART up at boot, and the example boards' turning
    // their FIFOs on clears whatever they had received.
    let (heard, hear) = std::sync::mpsc::channel::<()>();
    let sender = if commands.is_empty() {
        None
    } else {
        let Some(mut w) = control.take() else {
            return Err(
                "--command needs a board to talk to (a child, --tcp, --gdb or a serial device)"
                    .into(),
            );
        };
        Some(std::thread::spawn(move || {
            let _ = hear.recv_timeout(std::time::Duration::from_secs(1));
            let sent = w.write_all(commands.as_bytes()).and_then(|_| w.flush());
            (w, sent)
        }))
    };
    let mut heard = Some(heard);
    let mut dec = Decoder::new();
    let mut buf = vec![0u8; 1 << 16];
    let stdout = std::io::stdout();
    let input: &mut dyn Read = match rtt.as_mut() {
        Some(r) => r,
        None => &mut *input,
    };
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading the board's stream: {e}")),
        };
        let outputs = dec.push(&buf[..n]);
        if dec.stats().frames > 0 {
            if let Some(h) = heard.take() {
                let _ = h.send(());
            }
        }
        for o in outputs {
            match o {
                Output::Text(t) => {
                    let mut out = stdout.lock();
                    let _ = writeln!(out, "{t}");
                    let _ = out.flush();
                }
                Output::SessionEnded(_) => {}
            }
        }
    }
    drop(heard);
    // Its stdin stays open until the board has ended (qemu reads EOF there).
    if let Some(s) = sender {
        match s.join() {
            Ok((w, Ok(()))) => drop(w),
            Ok((w, Err(e))) => {
                drop(w);
                eprintln!("fgtrace board: cannot send commands to the board: {e}");
            }
            Err(_) => eprintln!("fgtrace board: the thread sending commands panicked"),
        }
    }
    drop(control);
    if let Some(mut c) = child {
        let st = c
            .wait()
            .map_err(|e| format!("waiting for the board: {e}"))?;
        if !st.success() {
            eprintln!("fgtrace board: `{}` exited with {st}", args.child[0]);
        }
    }
    // Reading RTT stopped on an error: what was decoded is still written,
    // then the error is reported.
    let mut rtt_error = None;
    if let Some(r) = &rtt {
        let secs = r.elapsed();
        eprintln!(
            "fgtrace board: RTT: {} bytes in {} polls over {secs:.2} s ({:.0} bytes/s); the channel was full at {} polls",
            r.bytes,
            r.polls,
            r.bytes as f64 / secs.max(1e-9),
            r.full
        );
        match &r.ended {
            Some(crate::gdb::Stop::Exited(0)) => {}
            Some(s) => eprintln!("fgtrace board: the target {}", crate::rtt::describe(s)),
            None => {}
        }
        rtt_error = r.error.clone();
    }
    let (sessions, stats) = dec.finish();
    eprintln!(
        "fgtrace board: {} bytes, {} frames, {} bytes skipped, {} frames missing, {} bad payloads, {} frames with no session",
        stats.bytes,
        stats.frames,
        stats.skipped_bytes,
        stats.missing_frames,
        stats.bad_payloads,
        stats.orphan_frames
    );
    for why in &stats.bad_payload_reasons {
        eprintln!("fgtrace board: bad payload: {why}");
    }
    if sessions.is_empty() {
        return Err(rtt_error.unwrap_or_else(|| "no recording session in the stream".into()));
    }
    for (i, s) in sessions.into_iter().enumerate() {
        let path = if i == 0 {
            args.output.clone()
        } else {
            let stem = args.output.with_extension("");
            PathBuf::from(format!("{}-{}.fgt", stem.display(), i + 1))
        };
        let ended = s.ended();
        let id = s.id();
        // String values are read from the firmware's read-only data.
        let text_of = match &args.elf {
            Some(elf) => Some(ElfStrings::read(elf)?.text_of()),
            None => Some(Box::new(|addr, len| {
                Err(format!("<str {addr:#x}+{len}: give --elf to read it>"))
            }) as TextOf),
        };
        let trace = s.into_trace_with(mappings.clone(), text_of);
        let meta = trace.meta();
        let lost = meta.total_lost();
        let samples = meta.total_samples();
        let samples_lost = meta.total_samples_lost();
        trace
            .save(&path)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!(
            "fgtrace board: session {id}{}: {} calls ({lost} lost), {samples} samples ({samples_lost} lost) -> {}",
            if ended { "" } else { " (cut short: no END frame)" },
            meta.total_calls(),
            path.display()
        );
        // What the losses were, where the trace says (calls still open at
        // stop, string values it could not read).
        for w in &meta.warnings {
            eprintln!("fgtrace board: session {id}: {w}");
        }
    }
    match rtt_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
