//! The views read a trace of hundreds of threads and tens of millions of
//! calls in bounded memory: the peak RSS of the `fgtrace` process (its own
//! `getrusage`, through `wait4`) stays far below what holding the calls
//! would take. The trace is written as a recording writes it
//! (`FGTRACE_RECORD`: raw chunks in exit order, a version-2 file), by the
//! trace crate's writers, in seconds.
//!
//! Its shape is a traced test suite's: each thread is one test whose body
//! is one traced call open for the whole thread, so none of its calls can be
//! put in pre-order before the body's record, the thread's last, is read;
//! the threads run side by side. Two threads are large (`BIG_ITERS` loop
//! iterations each), the others small.
//!
//! The flame chart holds every call it draws, so it is read here through a
//! window (its memory without one is announced before it starts, as the
//! Firefox export's is: see cli/tests/exports.rs).

#[path = "../../tests/support/cli.rs"]
mod cli_support;

use cli_support::{tempdir, text};
use fgtrace_core::record::{kind, RawCall};
use fgtrace_trace::file::RecordingWriter;
use fgtrace_trace::recorded::{RawEncoder, SiteMap};
use fgtrace_trace::{ClockInfo, RecordMode, SiteInfo, ThreadInfo, TraceMeta};
use std::path::{Path, PathBuf};
use std::process::Command;

const THREADS: u32 = 300;
/// Loop iterations of the two large threads (4 calls each, 1 in 64 with a 5th).
const BIG_ITERS: u64 = 2_000_000;
/// Loop iterations of each other thread.
const SMALL_ITERS: u64 = 5_000;
const ORIGIN: u64 = 1_000_000;
/// Records per raw chunk, as a collector's batches.
const BATCH: usize = 4096;
const NAMES: [&str; 6] = ["test_body", "insert", "hash", "probe", "eq", "reserve"];

fn iters(t: u32) -> u64 {
    if t < 2 {
        BIG_ITERS
    } else {
        SMALL_ITERS
    }
}

/// Calls of `n` iterations and their test body.
fn calls(n: u64) -> u64 {
    n * 4 + n.div_ceil(64) + 1
}

fn site(id: u32) -> Option<SiteInfo> {
    Some(SiteInfo {
        name: NAMES.get(id as usize)?.to_string(),
        module_path: "suite".into(),
        file: "src/suite.rs".into(),
        line: 10 + id,
        is_async: false,
        values: Vec::new(),
    })
}

/// One thread's records in exit order, a batch at a time: iteration `i`
/// is `insert { hash, probe { eq }, reserve (1 in 64) }` at depth 1, all
/// under one `test_body` at depth 0 that ends last.
struct ThreadRecords {
    base: u64,
    next: u64,
    n: u64,
    done: bool,
}

impl ThreadRecords {
    fn batch(&mut self, out: &mut Vec<RawCall>) {
        let rec = |start: u64, depth: u32, dur: u64, site: u32| {
            RawCall::pack(ORIGIN + start, depth, dur, site, false, kind::CALL)
        };
        while out.len() + 6 <= BATCH && self.next < self.n {
            let s = self.base + 10 + self.next * 100;
            out.push(rec(s + 5, 2, 10, 2));
            out.push(rec(s + 30, 3, 10, 4));
            out.push(rec(s + 20, 2, 50, 3));
            if self.next % 64 == 0 {
                out.push(rec(s + 72, 2, 6, 5));
            }
            out.push(rec(s, 1, 80, 1));
            self.next += 1;
        }
        if self.next == self.n && out.len() < BATCH && !self.done {
            out.push(rec(self.base, 0, self.n * 100 + 20, 0));
            self.done = true;
        }
    }
}

/// Writes threads `threads` as one recorded file (each thread's body
/// starting 1 µs after the one before, so they all overlap).
fn write_recorded(path: &Path, threads: std::ops::Range<u32>) -> u64 {
    let mut meta = TraceMeta {
        program: "suite".into(),
        pid: 4242 + threads.start,
        clock: ClockInfo {
            source: "tsc".into(),
            ticks_per_ns: 1.0,
            start_mono_ns: 0,
            start_unix_ns: 1_700_000_000_000_000_000,
        },
        mode: RecordMode::Stream,
        ..TraceMeta::default()
    };
    let f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = RecordingWriter::new(f, &meta).unwrap();
    let mut sites = SiteMap::default();
    let mut written_sites = 0;
    let mut gen: Vec<(u32, ThreadRecords, RawEncoder)> = Vec::new();
    for (i, t) in threads.clone().enumerate() {
        let name = format!("suite::test_{t}");
        w.thread(i as u32, 10_000 + t, &name).unwrap();
        meta.threads.push(ThreadInfo {
            tid: 10_000 + t,
            name,
            calls: calls(iters(t)),
            ..ThreadInfo::default()
        });
        let recs = ThreadRecords {
            base: t as u64 * 1000,
            next: 0,
            n: iters(t),
            done: false,
        };
        gen.push((i as u32, recs, RawEncoder::default()));
    }
    let mut batch = Vec::with_capacity(BATCH);
    let mut end = 0u64;
    // Round robin over the threads, as a collector interleaves batches.
    while !gen.is_empty() {
        gen.retain_mut(|(i, recs, enc)| {
            batch.clear();
            recs.batch(&mut batch);
            if batch.is_empty() {
                return false;
            }
            let raw = enc.encode(*i, &batch, ORIGIN, &mut sites, &site);
            for (k, s) in sites.sites.iter().enumerate().skip(written_sites) {
                w.site(k as u32, s).unwrap();
            }
            written_sites = sites.sites.len();
            w.raw(&raw).unwrap();
            end = end.max(recs.base + recs.n * 100 + 20);
            true
        });
    }
    meta.sites = sites.sites.clone();
    meta.duration_ns = end;
    w.finish(&meta).unwrap();
    meta.total_calls()
}

/// Runs `fgtrace args`, its output into `out`; returns its peak RSS in KB,
/// as the kernel counted it for that process alone.
// The child is reaped by `wait4`, which std does not know of.
#[allow(clippy::zombie_processes)]
fn peak_kb(args: &[&str], out: &Path) -> u64 {
    let err_path = out.with_extension("err");
    let child = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(args)
        .env("FGTRACE_THREADS", "2")
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("run fgtrace");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid one to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // The child is reaped here, with its own resource usage; `child` is
    // only dropped (std never waits on drop).
    // SAFETY: `pid` is our child, not yet waited for; both pointers are valid.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    drop(child);
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "fgtrace {args:?} failed (status {status}): {err}"
    );
    eprintln!(
        "fgtrace {}: peak RSS {} KB, {:.1} s of CPU",
        args[..args.len().min(2)].join(" "),
        usage.ru_maxrss,
        usage.ru_utime.tv_sec as f64 + usage.ru_stime.tv_sec as f64
    );
    usage.ru_maxrss as u64
}

/// Most memory a view may take on the trace: a few dozen MB for the
/// program, its threads and the views' tables. Holding the large threads'
/// calls would take well over a GB.
const BOUND_KB: u64 = 150 * 1024;

#[test]
fn views_read_hundreds_of_threads_and_tens_of_millions_of_calls_in_bounded_memory() {
    let dir = tempdir("views-memory");
    let one = dir.join("suite.fgt");
    let total = write_recorded(&one, 0..THREADS);
    assert!(total > 15_000_000, "{total} calls");
    // The same suite as two processes' files (`fgtrace report DIR/*.fgt`).
    let halves: Vec<PathBuf> = vec![dir.join("a.fgt"), dir.join("b.fgt")];
    write_recorded(&halves[0], 0..THREADS / 2);
    write_recorded(&halves[1], THREADS / 2..THREADS);

    let s = |p: &Path| p.to_str().unwrap().to_string();
    let report = dir.join("report.txt");
    let kb = peak_kb(&["report", &s(&one)], &report);
    let text_of = |p: &Path| text(&std::fs::read(p).unwrap());
    let r = text_of(&report);
    // Every call was read: `insert` ran once per iteration of every thread.
    let inserts = 2 * BIG_ITERS + (THREADS as u64 - 2) * SMALL_ITERS;
    let insert_line = r
        .lines()
        .find(|l| l.contains("insert"))
        .unwrap_or_else(|| panic!("no insert in the report:\n{r}"));
    let digits: String = insert_line.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(
        digits.replace(',', "").contains(&inserts.to_string()),
        "{insert_line} (expected {inserts} calls)"
    );
    assert!(kb < BOUND_KB, "report of {total} calls: peak RSS {kb} KB");

    let folded = dir.join("folded.txt");
    let kb = peak_kb(&["flame", "--folded", &s(&one)], &folded);
    let f = text_of(&folded);
    assert!(
        f.lines()
            .any(|l| l.starts_with("suite::test_body;suite::insert;suite::probe;suite::eq ")),
        "{}",
        &f[..f.len().min(2000)]
    );
    assert!(
        kb < BOUND_KB,
        "flame --folded of {total} calls: peak RSS {kb} KB"
    );

    let merged = dir.join("merged.txt");
    let kb = peak_kb(&["report", &s(&halves[0]), &s(&halves[1])], &merged);
    assert!(text_of(&merged).contains("insert"));
    assert!(
        kb < BOUND_KB,
        "report of 2 files, {total} calls: peak RSS {kb} KB"
    );

    // A flame chart holds every call it draws: a window bounds it. Only
    // the two large threads run from 100 to 101 ms (10,000 iterations each).
    let chart = dir.join("chart.txt");
    let args = [
        "flame", "--chart", "--folded", "--from", "100ms", "--to", "101ms",
    ];
    let kb = peak_kb(&[&args[..], &[&s(&one)]].concat(), &chart);
    let c = text_of(&chart);
    let mut per_thread = std::collections::BTreeMap::<&str, u64>::new();
    for l in c.lines() {
        let (stack, n) = l.rsplit_once(' ').expect("stack count");
        let thread = stack.split(';').next().unwrap();
        *per_thread.entry(thread).or_default() += n.parse::<u64>().unwrap();
    }
    // Each thread drawn from --from to --to, calls cut at the edges.
    let expected: std::collections::BTreeMap<&str, u64> = [
        ("suite::test_0-10000", 1_000_000),
        ("suite::test_1-10001", 1_000_000),
    ]
    .into();
    assert_eq!(per_thread, expected, "{}", &c[..c.len().min(2000)]);
    let eqs = c.lines().filter(|l| l.contains(";suite::eq ")).count();
    assert!((19_900..=20_100).contains(&eqs), "{eqs} eq calls in 1 ms");
    assert!(kb < BOUND_KB, "flame --chart of 1 ms: peak RSS {kb} KB");

    // A function's duration plot keeps statistics, the slowest calls and a
    // dot per occupied cell of the scatter, never the calls themselves. The first half holds
    // the two large threads: 4.3M calls of `insert`.
    let a = &halves[0];
    let plot_txt = dir.join("plot.txt");
    let svg = dir.join("insert.svg");
    let args = ["plot", "-f", "insert", "-o", &s(&svg), &s(a)];
    let kb = peak_kb(&args, &plot_txt);
    let a_inserts = 2 * BIG_ITERS + (THREADS as u64 / 2 - 2) * SMALL_ITERS;
    let p = text_of(&plot_txt);
    let head = p.lines().next().unwrap_or_default();
    assert!(
        head.ends_with(&format!(
            ": {a_inserts} calls, p50 80 ns, p99 80 ns, max 80 ns"
        )),
        "{p}"
    );
    let drawn = text_of(&svg);
    assert!(
        drawn.contains(&format!("{a_inserts} calls on {} threads", THREADS / 2)),
        "{}",
        &drawn[..drawn.len().min(2000)]
    );
    assert!(kb < BOUND_KB, "plot of {a_inserts} calls: peak RSS {kb} KB");
    // The HTML page plots its top functions with the same builder (70 MB
    // on this file, measured by hand: two more passes are a minute of CI).
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes the test's traces into `$FGTRACE_VIEWS_MEMORY_OUT` and keeps them,
/// to measure views by hand (`/usr/bin/time -f %M fgtrace VIEW DIR/suite.fgt`):
/// `FGTRACE_VIEWS_MEMORY_OUT=DIR cargo test -p fgtrace-cli --test views_memory -- --ignored`.
#[test]
#[ignore = "writes about 100 MB of traces for measuring views by hand"]
fn write_traces_to_measure_by_hand() {
    let dir = PathBuf::from(
        std::env::var_os("FGTRACE_VIEWS_MEMORY_OUT").expect("set FGTRACE_VIEWS_MEMORY_OUT=DIR"),
    );
    std::fs::create_dir_all(&dir).unwrap();
    let total = write_recorded(&dir.join("suite.fgt"), 0..THREADS);
    write_recorded(&dir.join("a.fgt"), 0..THREADS / 2);
    write_recorded(&dir.join("b.fgt"), THREADS / 2..THREADS);
    eprintln!("{total} calls in {}", dir.display());
}
