//! Rendering a 10M-call trace: time and peak memory of each view, each in
//! its own child process so its peak RSS is its own.
//!
//! ```text
//! cargo bench --bench render [-- --calls 10000000] [--keep]
//! ```
//!
//! `--keep` leaves the trace file in the temp directory (its path printed),
//! to time the `fgtrace` command on it.
//!
//! The trace is recorded for real (a recursive fib on two threads), saved,
//! then `graph`, `report`, the traced flamegraph (folded stacks and SVG)
//! and the Perfetto protobuf are rendered from the file, streaming, to a sink.

use fgtrace::trace::TraceReader;
use fgtrace::view::flame::FlameOptions;
use fgtrace::view::flame_svg::folded_svg;
use fgtrace::view::folded::{FoldedBuilder, FoldedOptions};
use fgtrace::view::{self, GraphOptions, ReportOptions};
use std::io::{self, Write};
use std::process::Command;
use std::time::Instant;

#[fgtrace::traced]
fn fib(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    fib(n - 1) + fib(n - 2)
}

fn fib_calls(n: u32) -> u64 {
    // calls(n) = calls(n-1) + calls(n-2) + 1
    let (mut a, mut b) = (1u64, 1u64);
    for _ in 1..n {
        (a, b) = (b, a + b + 1);
    }
    b
}

/// Counts bytes, keeps nothing.
struct Sink(u64);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Peak resident memory of this process image (`VmHWM`; unlike rusage's
/// maxrss it starts afresh at exec, so it is the child's own).
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            l.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

fn child(view: &str, path: &str) {
    let t = Instant::now();
    let r = TraceReader::open(path).expect("open");
    let meta = r.meta().clone();
    let mut sink = Sink(0);
    match view {
        "graph" => view::write_graph(&meta, r.events(), &GraphOptions::default(), &mut sink)
            .expect("graph"),
        "report" => view::write_report(&meta, r.events(), &ReportOptions::default(), &mut sink)
            .expect("report"),
        "flame" => {
            // Traced folded stacks (exact ns) and the SVG inferno draws from them.
            let mut b = FoldedBuilder::traced(&meta, &FoldedOptions::default());
            b.extend(r.events()).expect("events");
            let folded = b.finish();
            let opts = FlameOptions {
                title: "render bench".into(),
                count_name: "ns".into(),
                ..FlameOptions::default()
            };
            folded_svg(&folded, &opts, &mut sink).expect("svg");
        }
        "perfetto" => {
            let opts = fgtrace::view::perfetto::PerfettoOptions::default();
            let resolve = fgtrace::view::HexResolve;
            fgtrace::view::perfetto::write_perfetto(&meta, r.events(), resolve, &opts, &mut sink)
                .expect("perfetto");
        }
        "read" => {
            for e in r.events() {
                e.expect("event");
            }
        }
        v => panic!("unknown view {v}"),
    }
    println!("{} {} {}", t.elapsed().as_secs_f64(), peak_rss_kb(), sink.0);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        return child(&args[i + 1], &args[i + 2]);
    }
    let calls: u64 = args
        .iter()
        .position(|a| a == "--calls")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(10_000_000);
    let mut n = 2;
    while fib_calls(n) * 2 < calls {
        n += 1;
    }
    let path = std::env::temp_dir().join(format!("fgtrace-render-{}.fgt", std::process::id()));
    let t = Instant::now();
    let session = fgtrace::Session::start(fgtrace::Config::builtin()).expect("session");
    let h = std::thread::spawn(move || fib(n));
    fib(n);
    h.join().unwrap();
    let trace = session.stop().expect("stop");
    trace.save(&path).expect("save");
    drop(trace);
    let size = std::fs::metadata(&path).unwrap().len();
    let total = 2 * fib_calls(n);
    println!(
        "recorded and saved {total} calls in {:.2} s: {:.1} MB, {:.2} bytes per call",
        t.elapsed().as_secs_f64(),
        size as f64 / 1e6,
        size as f64 / total as f64
    );
    println!(
        "{:<8} {:>9} {:>12} {:>10} {:>12}",
        "view", "seconds", "peak RSS MB", "x file", "output MB"
    );
    for v in ["read", "graph", "report", "flame", "perfetto"] {
        let out = Command::new(&args[0])
            .args(["--child", v, path.to_str().unwrap()])
            .output()
            .expect("child");
        let text = String::from_utf8_lossy(&out.stdout);
        let f: Vec<f64> = text
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() < 3 {
            eprintln!(
                "{v}: child failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            continue;
        }
        let rss = f[1] * 1024.0;
        println!(
            "{v:<8} {:>9.2} {:>12.1} {:>10.2} {:>12.1}",
            f[0],
            rss / 1e6,
            rss / size as f64,
            f[2] / 1e6
        );
    }
    if args.iter().any(|a| a == "--keep") {
        println!("kept {}", path.display());
    } else {
        std::fs::remove_file(&path).ok();
    }
}
