//! A log-processing pipeline, traced end to end.
//!
//! A producer generates web-server log lines; four worker threads parse them
//! (tokenize, parse the timestamp, the request line and the status), evaluate
//! a small filter expression against each record (an expression parser and
//! evaluator), and aggregate per-path statistics; the main thread merges the
//! results. Every interesting fn carries `#[fgtrace::traced]`.
//!
//! `cargo run --release --example pipeline [lines]` (100000 by default) records it, saves the trace to
//! `target/fgtrace-demo/pipeline.fgt`, writes the function graph and the
//! per-function report next to it, and prints an excerpt of the graph.

use fgtrace::view::TraceViews;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc;

// ---------------------------------------------------------------- input

/// Deterministic pseudo-random numbers (xorshift), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

#[fgtrace::traced]
fn generate_logs(n: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed);
    let paths = [
        "/",
        "/api/users",
        "/api/orders",
        "/static/app.js",
        "/login",
        "/api/search?q=rust",
    ];
    let methods = ["GET", "GET", "GET", "POST", "PUT", "DELETE"];
    let statuses = ["200", "200", "200", "304", "404", "500", "302"];
    (0..n)
        .map(|i| {
            format!(
                "10.0.{}.{} - - [21/Nov/2026:01:{:02}:{:02} +0000] \"{} {} HTTP/1.1\" {} {} {}",
                rng.next() % 256,
                rng.next() % 256,
                (i / 60) % 60,
                i % 60,
                rng.pick(&methods),
                rng.pick(&paths),
                rng.pick(&statuses),
                rng.next() % 50_000,
                rng.next() % 900 + 1,
            )
        })
        .collect()
}

// ---------------------------------------------------------------- parsing

#[derive(Debug, Clone)]
struct Record {
    ip: String,
    seconds: u32,
    method: String,
    path: String,
    status: u16,
    bytes: u64,
    micros: u64,
}

#[derive(Debug)]
enum ParseError {
    Missing(&'static str),
    Bad(&'static str, String),
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::Missing(what) => write!(f, "missing {what}"),
            ParseError::Bad(what, v) => write!(f, "bad {what} `{v}`"),
        }
    }
}

struct LineParser;

#[fgtrace::traced]
impl LineParser {
    fn tokenize(line: &str) -> Vec<&str> {
        let mut out = Vec::with_capacity(10);
        let mut rest = line;
        while !rest.is_empty() {
            rest = rest.trim_start();
            let (tok, tail) = match rest.as_bytes().first() {
                Some(b'"') => Self::quoted(rest, '"'),
                Some(b'[') => Self::quoted(rest, ']'),
                Some(_) => rest.split_at(rest.find(' ').unwrap_or(rest.len())),
                None => break,
            };
            out.push(tok);
            rest = tail;
        }
        out
    }

    #[fgtrace::notrace]
    fn quoted(s: &str, close: char) -> (&str, &str) {
        match s[1..].find(close) {
            Some(end) => (&s[1..end + 1], &s[end + 2..]),
            None => (s, ""),
        }
    }

    fn parse_timestamp(ts: &str) -> Result<u32, ParseError> {
        // 21/Nov/2026:01:02:03 +0000 -> seconds within the day
        let time = ts.split(':').skip(1).take(3).collect::<Vec<_>>();
        if time.len() != 3 {
            return Err(ParseError::Bad("timestamp", ts.to_string()));
        }
        let mut secs = 0u32;
        for part in time {
            let v: u32 = part
                .split(' ')
                .next()
                .unwrap_or("")
                .parse()
                .map_err(|_| ParseError::Bad("timestamp", ts.to_string()))?;
            secs = secs * 60 + v;
        }
        Ok(secs)
    }

    fn parse_request(req: &str) -> Result<(String, String), ParseError> {
        let mut it = req.split(' ');
        let method = it.next().ok_or(ParseError::Missing("method"))?;
        let path = it.next().ok_or(ParseError::Missing("path"))?;
        Ok((
            method.to_string(),
            path.split('?').next().unwrap_or(path).to_string(),
        ))
    }

    fn parse_line(line: &str) -> Result<Record, ParseError> {
        let toks = Self::tokenize(line);
        if toks.len() < 8 {
            return Err(ParseError::Missing("fields"));
        }
        let seconds = Self::parse_timestamp(toks[3])?;
        let (method, path) = Self::parse_request(toks[4])?;
        let num = |i: usize, what: &'static str| {
            toks[i]
                .parse::<u64>()
                .map_err(|_| ParseError::Bad(what, toks[i].to_string()))
        };
        Ok(Record {
            ip: toks[0].to_string(),
            seconds,
            method,
            path,
            status: num(5, "status")? as u16,
            bytes: num(6, "bytes")?,
            micros: num(7, "latency")?,
        })
    }
}

// ---------------------------------------------------------------- filter expressions

#[derive(Debug, Clone)]
enum Expr {
    Num(f64),
    Field(String),
    Bin(Box<Expr>, char, Box<Expr>),
    Cmp(Box<Expr>, &'static str, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
}

struct ExprParser<'a> {
    toks: Vec<&'a str>,
    pos: usize,
}

#[fgtrace::traced]
impl<'a> ExprParser<'a> {
    fn new(src: &'a str) -> Self {
        ExprParser {
            toks: src.split_whitespace().collect(),
            pos: 0,
        }
    }
    fn peek(&self) -> Option<&'a str> {
        self.toks.get(self.pos).copied()
    }
    fn parse_and(&mut self) -> Expr {
        let mut lhs = self.parse_cmp();
        while self.peek() == Some("&&") {
            self.pos += 1;
            lhs = Expr::And(Box::new(lhs), Box::new(self.parse_cmp()));
        }
        lhs
    }
    fn parse_cmp(&mut self) -> Expr {
        let lhs = self.parse_sum();
        match self.peek() {
            Some(op @ ("<" | ">" | "==" | ">=")) => {
                let op: &'static str = match op {
                    "<" => "<",
                    ">" => ">",
                    ">=" => ">=",
                    _ => "==",
                };
                self.pos += 1;
                Expr::Cmp(Box::new(lhs), op, Box::new(self.parse_sum()))
            }
            _ => lhs,
        }
    }
    fn parse_sum(&mut self) -> Expr {
        let mut lhs = self.parse_atom();
        while let Some(op @ ("+" | "-" | "*" | "/")) = self.peek() {
            self.pos += 1;
            lhs = Expr::Bin(
                Box::new(lhs),
                op.chars().next().unwrap(),
                Box::new(self.parse_atom()),
            );
        }
        lhs
    }
    fn parse_atom(&mut self) -> Expr {
        let t = self.peek().unwrap_or("0");
        self.pos += 1;
        t.parse()
            .map(Expr::Num)
            .unwrap_or_else(|_| Expr::Field(t.to_string()))
    }
}

#[fgtrace::traced]
fn eval(e: &Expr, r: &Record) -> f64 {
    match e {
        Expr::Num(v) => *v,
        Expr::Field(f) => match f.as_str() {
            "status" => r.status as f64,
            "bytes" => r.bytes as f64,
            "latency" => r.micros as f64,
            "seconds" => r.seconds as f64,
            _ => 0.0,
        },
        Expr::Bin(a, op, b) => {
            let (a, b) = (eval(a, r), eval(b, r));
            match op {
                '+' => a + b,
                '-' => a - b,
                '*' => a * b,
                _ => a / b,
            }
        }
        Expr::Cmp(a, op, b) => {
            let (a, b) = (eval(a, r), eval(b, r));
            let t = match *op {
                "<" => a < b,
                ">" => a > b,
                ">=" => a >= b,
                _ => a == b,
            };
            t as u8 as f64
        }
        Expr::And(a, b) => (eval(a, r) != 0.0 && eval(b, r) != 0.0) as u8 as f64,
    }
}

// ---------------------------------------------------------------- aggregation

#[derive(Default, Debug)]
struct PathStats {
    hits: u64,
    errors: u64,
    bytes: u64,
    slow: u64,
}

#[fgtrace::traced]
fn aggregate(stats: &mut HashMap<String, PathStats>, r: &Record, slow: bool) {
    let s = stats.entry(format!("{} {}", r.method, r.path)).or_default();
    s.hits += 1;
    s.bytes += r.bytes;
    s.errors += (r.status >= 500) as u64;
    s.slow += slow as u64;
    let _ = &r.ip;
}

#[fgtrace::traced]
fn process_batch(lines: &[String], filter: &Expr) -> (HashMap<String, PathStats>, Vec<String>) {
    let mut stats = HashMap::new();
    let mut bad = Vec::new();
    for line in lines {
        match LineParser::parse_line(line) {
            Ok(r) => {
                let slow = eval(filter, &r) != 0.0;
                aggregate(&mut stats, &r, slow);
            }
            Err(e) => bad.push(format!("{e}: {line}")),
        }
    }
    (stats, bad)
}

#[fgtrace::traced]
fn worker(
    rx: std::sync::Arc<std::sync::Mutex<mpsc::Receiver<Vec<String>>>>,
    filter: Expr,
) -> (HashMap<String, PathStats>, Vec<String>) {
    let mut total = HashMap::new();
    let mut bad = Vec::new();
    loop {
        let batch = match rx.lock().unwrap().recv() {
            Ok(b) => b,
            Err(_) => break,
        };
        let (stats, b) = process_batch(&batch, &filter);
        bad.extend(b);
        merge(&mut total, stats);
    }
    (total, bad)
}

#[fgtrace::traced]
fn merge(into: &mut HashMap<String, PathStats>, from: HashMap<String, PathStats>) {
    for (k, v) in from {
        let e = into.entry(k).or_default();
        e.hits += v.hits;
        e.errors += v.errors;
        e.bytes += v.bytes;
        e.slow += v.slow;
    }
}

/// Runs the whole pipeline on `n` generated lines; returns (requests, malformed lines).
#[fgtrace::traced]
fn run_pipeline(n: usize) -> (u64, Vec<String>) {
    let mut lines = generate_logs(n, 0x5eed);
    lines.push("garbage line".to_string());
    let filter = ExprParser::new("latency > 500 && status >= 200").parse_and();
    let (tx, rx) = mpsc::channel::<Vec<String>>();
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let (rx, f) = (rx.clone(), filter.clone());
            std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || worker(rx, f))
                .unwrap()
        })
        .collect();
    for chunk in lines.chunks(250) {
        tx.send(chunk.to_vec()).unwrap();
    }
    drop(tx);
    let mut total = HashMap::new();
    let mut bad = Vec::new();
    for w in workers {
        let (s, b) = w.join().unwrap();
        bad.extend(b);
        merge(&mut total, s);
    }
    (total.values().map(|s| s.hits).sum(), bad)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let out_dir = PathBuf::from(
        std::env::var("FGTRACE_OUT").unwrap_or_else(|_| "target/fgtrace-demo".into()),
    );
    std::fs::create_dir_all(&out_dir)?;

    // Trace the #[traced] fns and sample stacks at 999 Hz per thread (unless
    // FGTRACE_SAMPLE says otherwise), so every view has something to show.
    let mut config = fgtrace::Config::default();
    if std::env::var_os("FGTRACE_SAMPLE").is_none() {
        config = config.sampling(fgtrace::sampler::Sampling::timer(999));
    }
    let session = fgtrace::Session::start(config)?;
    let (requests, bad) = run_pipeline(n);
    let trace = session.stop()?;

    let trace_path = out_dir.join("pipeline.fgt");
    trace.save(&trace_path)?;
    let graph_path = out_dir.join("graph.txt");
    let report_path = out_dir.join("report.txt");
    let mut graph = Vec::new();
    trace.write_graph(&fgtrace::view::graph::GraphOptions::default(), &mut graph)?;
    std::fs::write(&graph_path, &graph)?;
    let mut report = Vec::new();
    trace.write_report(
        &fgtrace::view::report::ReportOptions::default(),
        &mut report,
    )?;
    std::fs::write(&report_path, &report)?;

    let m = trace.meta();
    println!(
        "pipeline: {requests} requests parsed, {} malformed line(s)",
        bad.len()
    );
    for b in bad.iter().take(3) {
        println!("  malformed: {b}");
    }
    println!(
        "recorded {} calls and {} samples on {} threads in {:.1} ms ({} lost, {} overruns), {} bytes on disk",
        m.total_calls(),
        m.threads.iter().map(|t| t.samples).sum::<u64>(),
        m.threads.len(),
        m.duration_ns as f64 / 1e6,
        m.total_lost(),
        m.total_overruns(),
        std::fs::metadata(&trace_path)?.len()
    );
    println!("trace:  {}", trace_path.display());
    println!("graph:  {}", graph_path.display());
    println!("report: {}", report_path.display());
    println!("\nfunction graph (first 25 lines):");
    for line in String::from_utf8_lossy(&graph).lines().take(25) {
        println!("{line}");
    }
    println!("\nper-function report (first 12 lines):");
    for line in String::from_utf8_lossy(&report).lines().take(12) {
        println!("{line}");
    }
    let t = trace_path.display();
    println!("\nnext, with the fgtrace command (cargo run --release -p fgtrace-cli -- ...):");
    println!("  graph {t} | less          the whole function graph");
    println!("  flame {t} -o flame.svg    combined traced + sampled flamegraph");
    println!("  html {t} -o report.html   everything in one page");
    println!("  plot {t} -f LineParser::parse_line -o durations.svg");
    Ok(())
}
