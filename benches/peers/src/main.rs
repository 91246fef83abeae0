//! Recording cost end to end, fgtrace beside its peers: each peer and workload
//! runs in a process of its own (so peak RSS and process CPU are its own), in
//! rounds that interleave the peers, and the table shows medians.
//!
//! ```text
//! cargo run --release --manifest-path benches/peers/Cargo.toml -- [--rounds 5] [--calls 10000000]
//!     [--peers fgtrace,fgtrace-file,tracy,puffin,minitrace,fastrace,untraced] [--workloads leaf,fib,threads]
//! ```
//!
//! Per peer and workload:
//! * `thread ns/call`: CPU time of the traced thread(s) while calling, per call;
//! * `wall ns/call`: from before the session starts to after it is stopped and
//!   flushed (fgtrace: `Session::stop` returned the trace, or the file is
//!   complete; minitrace/fastrace: the reporter got every span; puffin: the
//!   last frame is closed; Tracy has no flush without a viewer: the loop),
//!   per call;
//! * `CPU ns/call`: user + system time of the whole process over the same
//!   span (collector and reporter threads included), per call;
//! * `peak RSS`: the process's high-water mark (`ru_maxrss`), and per call
//!   above the `untraced` run's.
//!
//! Workloads: `leaf` (a loop calling an empty instrumented fn), `fib`
//! (`fib(17)` again and again, 5,167 calls each, up to about the same number
//! of calls), `threads` (two threads, half the calls each). The work comes in
//! units (10,000 leaf calls, or one `fib(17)`): minitrace and fastrace get a
//! root span per unit (their local span queue holds 10,240 spans; a longer
//! trace under one root loses the rest), puffin a frame per unit.

use std::hint::black_box;
use std::process::Command;
use std::time::Instant;

const PEERS: &[&str] = &[
    "untraced",
    "fgtrace",
    "fgtrace-file",
    "tracy",
    "puffin",
    "minitrace",
    "fastrace",
];
const WORKLOADS: &[&str] = &["leaf", "fib", "threads"];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let peer = &args[2];
        let workload = &args[3];
        let calls: u64 = args[4].parse().expect("calls");
        child(peer, workload, calls);
        return;
    }
    let mut rounds = 5usize;
    let mut calls = 10_000_000u64;
    let mut peers: Vec<String> = PEERS.iter().map(|s| s.to_string()).collect();
    let mut workloads: Vec<String> = WORKLOADS.iter().map(|s| s.to_string()).collect();
    let mut i = 1;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--rounds" => rounds = v.parse().expect("--rounds N"),
            "--calls" => calls = v.parse().expect("--calls N"),
            "--peers" => peers = v.split(',').map(str::to_string).collect(),
            "--workloads" => workloads = v.split(',').map(str::to_string).collect(),
            "--bench" => {
                i += 1;
                continue;
            }
            a => panic!("unknown argument {a}"),
        }
        i += 2;
    }
    for p in &peers {
        assert!(
            PEERS.contains(&p.as_str()),
            "unknown peer {p}; peers: {PEERS:?}"
        );
    }
    for w in &workloads {
        assert!(
            WORKLOADS.contains(&w.as_str()),
            "unknown workload {w}; workloads: {WORKLOADS:?}"
        );
    }
    let exe = std::env::current_exe().expect("own path");
    let mut results: Vec<Vec<Vec<Run>>> = vec![vec![Vec::new(); peers.len()]; workloads.len()];
    for round in 0..rounds {
        for (wi, w) in workloads.iter().enumerate() {
            // Rotate the order each round, so no peer always runs first.
            for k in 0..peers.len() {
                let pi = (k + round) % peers.len();
                let out = Command::new(&exe)
                    .args(["--child", &peers[pi], w, &calls.to_string()])
                    .output()
                    .expect("run child");
                if !out.status.success() {
                    panic!(
                        "{} {w} failed: {}\n{}",
                        peers[pi],
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                let line = String::from_utf8_lossy(&out.stdout);
                let run =
                    Run::parse(line.trim()).unwrap_or_else(|| panic!("bad child output {line:?}"));
                eprintln!("round {} {w:8} {:13} {run:?}", round + 1, peers[pi]);
                results[wi][pi].push(run);
            }
        }
    }
    println!(
        "\n{rounds} rounds, {calls} calls per workload, medians (`cargo run --release --manifest-path benches/peers/Cargo.toml -- --rounds {rounds} --calls {calls}`)\n"
    );
    for (wi, w) in workloads.iter().enumerate() {
        let med: Vec<Run> = results[wi].iter().map(|r| Run::median(r)).collect();
        let base_rss = peers
            .iter()
            .position(|p| p == "untraced")
            .map(|i| med[i].rss_kib)
            .unwrap_or(0.0);
        println!("### {w}\n");
        println!("| peer | thread ns/call | wall ns/call (incl. stop/flush) | CPU ns/call (process) | stop ms | peak RSS MiB | RSS B/call | calls kept |");
        println!("|---|---|---|---|---|---|---|---|");
        for (pi, p) in peers.iter().enumerate() {
            let m = &med[pi];
            println!(
                "| {p} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {:.0} |",
                m.thread_ns,
                m.wall_ns,
                m.cpu_ns,
                m.stop_ms,
                m.rss_kib / 1024.0,
                ((m.rss_kib - base_rss).max(0.0) * 1024.0) / calls as f64,
                m.kept
            );
        }
        let find = |name: &str| peers.iter().position(|p| p == name).map(|i| &med[i]);
        if let Some(f) = find("fgtrace") {
            let cheapest = peers
                .iter()
                .enumerate()
                .filter(|(_, p)| !p.starts_with("fgtrace") && p.as_str() != "untraced")
                .map(|(i, p)| (med[i].cpu_ns, p.as_str()))
                .fold(None::<(f64, &str)>, |a, b| match a {
                    Some(a) if a.0 <= b.0 => Some(a),
                    _ => Some(b),
                });
            println!();
            println!(
                "fgtrace: process CPU / traced thread = {:.2}; stop = {:.1} ms",
                f.cpu_ns / f.thread_ns,
                f.stop_ms
            );
            if let Some((c, p)) = cheapest {
                println!(
                    "fgtrace CPU/call vs cheapest peer ({p}): {:.2}",
                    f.cpu_ns / c
                );
            }
            if let Some(t) = find("tracy") {
                let per = |m: &Run| (m.rss_kib - base_rss).max(1.0);
                println!(
                    "fgtrace peak RSS above untraced vs Tracy's: {:.3}",
                    per(f) / per(t)
                );
            }
            if let Some(ff) = find("fgtrace-file") {
                println!(
                    "fgtrace-file: process CPU / traced thread = {:.2}; stop = {:.1} ms; RSS above untraced {:.1} MiB",
                    ff.cpu_ns / ff.thread_ns,
                    ff.stop_ms,
                    (ff.rss_kib - base_rss) / 1024.0
                );
            }
        }
        println!();
    }
}

#[derive(Clone, Debug, Default)]
struct Run {
    thread_ns: f64,
    wall_ns: f64,
    cpu_ns: f64,
    stop_ms: f64,
    rss_kib: f64,
    kept: f64,
}

impl Run {
    fn parse(s: &str) -> Option<Run> {
        let v: Vec<f64> = s
            .split_whitespace()
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        let [thread_ns, wall_ns, cpu_ns, stop_ms, rss_kib, kept] = v[..] else {
            return None;
        };
        Some(Run {
            thread_ns,
            wall_ns,
            cpu_ns,
            stop_ms,
            rss_kib,
            kept,
        })
    }

    fn median(runs: &[Run]) -> Run {
        fn med(mut v: Vec<f64>) -> f64 {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
        }
        Run {
            thread_ns: med(runs.iter().map(|r| r.thread_ns).collect()),
            wall_ns: med(runs.iter().map(|r| r.wall_ns).collect()),
            cpu_ns: med(runs.iter().map(|r| r.cpu_ns).collect()),
            stop_ms: med(runs.iter().map(|r| r.stop_ms).collect()),
            rss_kib: med(runs.iter().map(|r| r.rss_kib).collect()),
            kept: med(runs.iter().map(|r| r.kept).collect()),
        }
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Usage {
    cpu_ns: u64,
    maxrss_kib: u64,
}

fn usage() -> Usage {
    // SAFETY: zeroed rusage is a valid out-value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    Usage {
        cpu_ns: tv(ru.ru_utime) + tv(ru.ru_stime),
        maxrss_kib: ru.ru_maxrss as u64,
    }
}

/// Calls of `fib(n)`: 2 F(n+1) - 1.
fn fib_calls(n: u32) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n + 1 {
        (a, b) = (b, a + b);
    }
    2 * a - 1
}

/// Instrumented leaf and fib for one peer, named `<peer>_leaf`, `<peer>_fib`.
macro_rules! workload_fns {
    ($leaf:ident, $fib:ident, [$($attr:meta),*], $($body_prefix:stmt;)*) => {
        $(#[$attr])*
        #[inline(never)]
        fn $leaf(x: u64) -> u64 {
            $($body_prefix;)*
            black_box(x).wrapping_add(1)
        }

        $(#[$attr])*
        #[inline(never)]
        fn $fib(n: u32) -> u64 {
            $($body_prefix;)*
            if n < 2 {
                return n as u64;
            }
            $fib(n - 1).wrapping_add($fib(n - 2))
        }
    };
}

workload_fns!(untraced_leaf, untraced_fib, [],);
workload_fns!(fgtrace_leaf, fgtrace_fib, [fgtrace::traced],);
workload_fns!(minitrace_leaf, minitrace_fib, [minitrace::trace],);
workload_fns!(fastrace_leaf, fastrace_fib, [fastrace::trace],);
workload_fns!(tracy_leaf, tracy_fib, [], let _s = tracy_client::span!("leaf"););
workload_fns!(puffin_leaf, puffin_fib, [], puffin::profile_function!(););

/// Calls per unit of work: a request handler would be one root span (the
/// peers that need a root per trace get one per unit, puffin a frame).
const LEAF_UNIT: u64 = 10_000;
/// `fib(FIB_N)` per unit: 5,167 calls, 17 deep.
const FIB_N: u32 = 17;

/// Runs the workload on the calling thread (two threads for `threads`),
/// `around` each unit; returns the CPU time of the thread(s) that called.
fn run_workload(
    workload: &str,
    calls: u64,
    leaf: fn(u64) -> u64,
    fib: fn(u32) -> u64,
    around: &(dyn Fn(&mut dyn FnMut()) + Sync),
) -> u64 {
    let leaves = |n: u64| {
        let t0 = thread_cpu_ns();
        let mut done = 0;
        while done < n {
            let k = LEAF_UNIT.min(n - done);
            around(&mut || {
                let mut acc = 0u64;
                for i in done..done + k {
                    acc = acc.wrapping_add(leaf(i));
                }
                black_box(acc);
            });
            done += k;
        }
        thread_cpu_ns() - t0
    };
    match workload {
        "leaf" => leaves(calls),
        "fib" => {
            let t0 = thread_cpu_ns();
            for _ in 0..fib_units(calls) {
                around(&mut || {
                    black_box(fib(black_box(FIB_N)));
                });
            }
            thread_cpu_ns() - t0
        }
        "threads" => std::thread::scope(|s| {
            let a = s.spawn(|| leaves(calls / 2));
            let b = s.spawn(|| leaves(calls / 2));
            a.join().expect("a") + b.join().expect("b")
        }),
        w => panic!("unknown workload {w}"),
    }
}

fn fib_units(calls: u64) -> u64 {
    (calls / fib_calls(FIB_N)).max(1)
}

fn actual_calls(workload: &str, calls: u64) -> u64 {
    match workload {
        "fib" => fib_units(calls) * fib_calls(FIB_N),
        "threads" => calls / 2 * 2,
        _ => calls,
    }
}

fn plain(f: &mut dyn FnMut()) {
    f()
}

fn child(peer: &str, workload: &str, calls: u64) {
    let n = actual_calls(workload, calls);
    let u0 = usage();
    let w0 = Instant::now();
    let mut stop_ns = 0u64;
    let mut kept = n as f64;
    let thread_ns = match peer {
        "untraced" => run_workload(workload, calls, untraced_leaf, untraced_fib, &plain),
        "fgtrace" | "fgtrace-file" => {
            let mut config = fgtrace::Config::builtin();
            let path =
                std::env::temp_dir().join(format!("fgtrace-peers-{}.fgt", std::process::id()));
            if peer == "fgtrace-file" {
                config = config.output(&path);
            }
            let session = fgtrace::Session::start(config).expect("session");
            let t = run_workload(workload, calls, fgtrace_leaf, fgtrace_fib, &plain);
            let s0 = Instant::now();
            let trace = session.stop().expect("stop");
            stop_ns = s0.elapsed().as_nanos() as u64;
            kept = trace.meta().total_calls() as f64;
            drop(trace);
            let _ = std::fs::remove_file(&path);
            t
        }
        "minitrace" => {
            use minitrace::collector::{Config, Reporter, SpanRecord};
            struct Count(std::sync::Arc<std::sync::atomic::AtomicU64>);
            impl Reporter for Count {
                fn report(&mut self, spans: &[SpanRecord]) {
                    self.0
                        .fetch_add(spans.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
            }
            let got = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            minitrace::set_reporter(Count(got.clone()), Config::default());
            let around = |f: &mut dyn FnMut()| {
                let root = minitrace::Span::root("root", minitrace::prelude::SpanContext::random());
                let _g = root.set_local_parent();
                f();
            };
            let t = run_workload(workload, calls, minitrace_leaf, minitrace_fib, &around);
            let s0 = Instant::now();
            minitrace::flush();
            stop_ns = s0.elapsed().as_nanos() as u64;
            kept = got.load(std::sync::atomic::Ordering::Relaxed) as f64;
            t
        }
        "fastrace" => {
            use fastrace::collector::{Config, Reporter, SpanRecord};
            struct Count(std::sync::Arc<std::sync::atomic::AtomicU64>);
            impl Reporter for Count {
                fn report(&mut self, spans: Vec<SpanRecord>) {
                    self.0
                        .fetch_add(spans.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
            }
            let got = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            fastrace::set_reporter(Count(got.clone()), Config::default());
            let around = |f: &mut dyn FnMut()| {
                let root = fastrace::Span::root("root", fastrace::prelude::SpanContext::random());
                let _g = root.set_local_parent();
                f();
            };
            let t = run_workload(workload, calls, fastrace_leaf, fastrace_fib, &around);
            let s0 = Instant::now();
            fastrace::flush();
            stop_ns = s0.elapsed().as_nanos() as u64;
            kept = got.load(std::sync::atomic::Ordering::Relaxed) as f64;
            t
        }
        "tracy" => {
            // `manual-lifetime`: Tracy starts here, not in every child process.
            let _client = tracy_client::Client::start();
            run_workload(workload, calls, tracy_leaf, tracy_fib, &plain)
        }
        "puffin" => {
            puffin::set_scopes_on(true);
            // A frame per unit, as a program with a frame loop would: puffin
            // hands finished frames to its sinks (none here) and drops them.
            let around = |f: &mut dyn FnMut()| {
                f();
                puffin::GlobalProfiler::lock().new_frame();
            };
            run_workload(workload, calls, puffin_leaf, puffin_fib, &around)
        }
        p => panic!("unknown peer {p}"),
    };
    let wall = w0.elapsed().as_nanos() as f64;
    let u1 = usage();
    let nf = n as f64;
    println!(
        "{} {} {} {} {} {}",
        thread_ns as f64 / nf,
        wall / nf,
        (u1.cpu_ns - u0.cpu_ns) as f64 / nf,
        stop_ns as f64 / 1e6,
        u1.maxrss_kib,
        kept
    );
}
