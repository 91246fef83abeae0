//! What each fuzz target does with its input, shared with the replay test
//! (`tests/fuzz_replay.rs`), so the committed corpus and crash inputs go
//! through exactly the fuzzed code paths in every CI run.
//!
//! Each function returns `Err(message)` when the input was rejected, so the
//! replay test can check that a crash input now gets a clear error.
//! The temporary file `symbolizer` writes is one per process and thread,
//! rewritten for each input.

use fgtrace::bridge::elf::{FuncSymbols, Inliner};
use fgtrace::bridge::zephyr::{collapse, CollapseOptions, Dump};
use fgtrace::symbolize::Symbolizer;
use fgtrace::trace::{Mapping, Trace, TraceReader};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Streams every event with [`TraceReader`], then loads the whole file with
/// [`Trace::read_from`] and walks its events. Returns the number of events.
pub fn trace_reader(data: &[u8]) -> Result<usize, String> {
    let mut streamed = 0;
    let mut stream_err = None;
    match TraceReader::new(data) {
        Ok(r) => {
            let _ = r.meta().total_calls();
            for ev in r.events() {
                match ev {
                    Ok(_) => streamed += 1,
                    Err(e) => stream_err = Some(e.to_string()),
                }
            }
        }
        Err(e) => stream_err = Some(e.to_string()),
    }
    match Trace::read_from(data) {
        Ok(t) => {
            // A file damaged after its metadata loads up to the damage.
            assert_eq!(
                t.damage().is_some(),
                stream_err.is_some(),
                "streamed: {stream_err:?}; loaded with damage {:?}",
                t.damage()
            );
            let n = t.events().count();
            assert_eq!(n, streamed, "loaded and streamed event counts differ");
            for c in t.calls() {
                let _ = (
                    t.meta().site_name(c.site),
                    t.meta().thread_label(c.thread),
                    c.end_ns(),
                    t.off_cpu_of(&c),
                );
            }
            // Off-CPU time (the final metadata's, or a cut file's off-CPU
            // sections): what the views read of it.
            if let Some(o) = &t.meta().off_cpu {
                let _ = (o.reason(), o.lost());
                for th in &o.threads {
                    let _ = (th.total(), th.overlapping(0, u64::MAX).len());
                }
            }
            match t.damage() {
                Some(d) => Err(d.to_string()),
                None => Ok(n),
            }
        }
        Err(e) => {
            let e = e.to_string();
            assert!(
                stream_err.is_some(),
                "loading failed ({e}) but streaming did not"
            );
            Err(e)
        }
    }
}

/// Parses a Zephyr `perf printbuf` dump and collapses it, every option,
/// against a small fixed symbol table and against the x86-64 fixture ELF's
/// (the corpus holds dumps of that program). Returns the number of samples.
pub fn zephyr_dump(data: &[u8]) -> Result<usize, String> {
    static TABLES: OnceLock<[FuncSymbols; 2]> = OnceLock::new();
    let tables = TABLES.get_or_init(|| {
        [
            FuncSymbols::from_table([
                (0x1000, 0x100, "main"),
                (0x1100, 0x80, "work"),
                (0x1140, 0x10, "inner"),
                (0x8000_0000, 0x1000, "high"),
                (u64::MAX - 0x10, 0x20, "top"),
            ]),
            FuncSymbols::from_elf(include_bytes!("../tests/fixtures/zephyr/x86_64/prog.elf"))
                .expect("the fixture ELF reads"),
        ]
    });
    let dump = Dump::parse(data).map_err(|e| e.to_string())?;
    let _ = (
        dump.header_line(),
        dump.announced_words(),
        dump.warnings().len(),
    );
    let mut result = Ok(dump.len());
    for syms in tables {
        for merge in [true, false] {
            for aggregate in [true, false] {
                match collapse(&dump, syms, None, CollapseOptions { merge, aggregate }) {
                    Ok(f) => {
                        let _ = (f.to_text(), f.total(), f.aggregated());
                    }
                    Err(e) => result = Err(e.to_string()),
                }
            }
        }
    }
    result
}

/// A file of this process's own, rewritten for each input: the symbolizer
/// and the inliner take paths (addr2line opens files itself).
fn scratch_file() -> PathBuf {
    // Per thread too: the replay test's threads must not rewrite a file
    // another one has mapped (addr2line maps it: that would be a SIGBUS).
    let thread = format!("{:?}", std::thread::current().id());
    let thread: String = thread.chars().filter(char::is_ascii_digit).collect();
    std::env::temp_dir().join(format!("fgtrace-fuzz-elf-{}-{thread}", std::process::id()))
}

/// Reads the bytes as an ELF symbol table ([`FuncSymbols::from_elf`]) and
/// looks up addresses in it, in memory. Returns the number of names.
pub fn elf_symbols(data: &[u8]) -> Result<usize, String> {
    let syms = FuncSymbols::from_elf(data).map_err(|e| e.to_string())?;
    let _ = syms.info().map(|i| i.code_alignment());
    for a in probes(data, Some(&syms)) {
        let _ = (
            syms.lookup(a),
            syms.segment_start(a),
            syms.follows_call(a),
            syms.in_text(a),
        );
    }
    Ok(syms.names().len())
}

/// Writes the bytes to a file and symbolizes addresses in it as a mapped
/// file, through the [`Symbolizer`] (program headers, symbols, DWARF) and the
/// [`Inliner`]. Slower than [`elf_symbols`]: files and addr2line. Returns the
/// number of frames that got a name.
pub fn symbolizer(data: &[u8]) -> Result<usize, String> {
    let syms = FuncSymbols::from_elf(data).ok();
    let probes = probes(data, syms.as_ref());
    let path = scratch_file();
    std::fs::write(&path, data).expect("writing the scratch file");
    let named = symbolize(&path, &probes);
    if let Ok(inl) = Inliner::open(&path) {
        for &a in &probes {
            let _ = inl.inlined_at(a);
        }
    }
    let _ = std::fs::remove_file(&path);
    Ok(named)
}

/// Addresses to look up: fixed ones, and around each code section.
fn probes(data: &[u8], syms: Option<&FuncSymbols>) -> Vec<u64> {
    let mut probes: Vec<u64> = vec![0, 1, 0x40, 0x1000, data.len() as u64 / 2, u64::MAX];
    if let Some(syms) = syms {
        probes.extend(
            syms.text_ranges()
                .flat_map(|r| [r.start, r.end, r.start.wrapping_add(5)]),
        );
    }
    probes
}

fn symbolize(path: &Path, probes: &[u64]) -> usize {
    let mapping = |start: u64, offset: u64| Mapping {
        start,
        end: start.saturating_add(0x10_0000),
        offset,
        path: path.to_str().expect("utf-8 temp path").to_owned(),
        build_id: None,
    };
    // Mapped at 0x1_0000_0000 from offset 0, and at 0x1000 from an offset
    // that overflows when added to.
    let base = 0x1_0000_0000u64;
    let mut s =
        Symbolizer::new(&[mapping(base, 0), mapping(0x1000, u64::MAX - 0x800)]).verbose(true);
    let mut named = 0;
    for &p in probes {
        let a = base + (p & 0xf_ffff);
        named += s
            .stack(&[a, a + 1, 0x1900])
            .iter()
            .filter(|f| !f.is_unknown())
            .count();
        // The call-frame information (`.eh_frame`) the combined join asks about.
        let _ = s.frame_record(a, false);
        let _ = s.frame_record(a + 1, true);
    }
    named
}

/// A board's byte stream (`fgtrace board`): decoded in uneven pieces, every
/// session turned into a trace and its events walked. Returns the calls.
pub fn board_stream(data: &[u8]) -> Result<usize, String> {
    let mut d = fgtrace::board_stream::Decoder::new();
    // Pieces of 1..=64 bytes, chosen by the input itself.
    let mut at = 0;
    while at < data.len() {
        let n = 1 + (data[at] as usize % 64);
        let end = (at + n).min(data.len());
        let _ = d.push(&data[at..end]);
        at = end;
    }
    let (sessions, stats) = d.finish();
    assert!(stats.skipped_bytes <= stats.bytes, "{stats:?}");
    let mut calls = 0;
    for s in sessions {
        let t = s.into_trace(Vec::new());
        calls += t.calls().count();
        for c in t.calls() {
            let _ = (t.meta().site_name(c.site), c.end_ns());
        }
        let _ = t.meta().total_lost();
    }
    if calls == 0 {
        return Err("no calls decoded".into());
    }
    Ok(calls)
}

/// Sends the bytes to this process's own control endpoint as a client
/// would (one connection, then its write side closed), reads whatever comes
/// back, and checks that the endpoint still serves: a `status` is answered
/// and no session is left running (a `stop` ends one an input started).
/// Returns the reply's length, or the error the endpoint replied with.
pub fn control_request(data: &[u8]) -> Result<usize, String> {
    use fgtrace::control::{protocol, Client, Reply};
    static SOCKET: OnceLock<PathBuf> = OnceLock::new();
    let socket = SOCKET.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("fgtrace-fuzz-control-{}", std::process::id()));
        fgtrace::control::listen_in(&dir).expect("listen")
    });
    let pid = std::process::id();
    let mut s = UnixStream::connect(socket).expect("the endpoint accepts");
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let _ = s.write_all(data);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    drop(s);
    let status = Client::connect_path(socket, pid)
        .and_then(Client::status)
        .expect("the endpoint still serves after this input");
    if status.session != "idle" {
        let _ = Client::connect_path(socket, pid).and_then(Client::stop);
    }
    let first = protocol::read_frame(&mut &reply[..], protocol::MAX_REPLY)
        .map_err(|e| format!("no reply: {e}"))?;
    let r: Reply = serde_json::from_slice(&first).expect("replies are JSON");
    match r.error {
        Some(e) => Err(e),
        None => Ok(reply.len()),
    }
}
