//! `fgtrace pprof` and the sampled section of `fgtrace report`, on a sampled
//! session of a workload with known proportions (`work_three` does three
//! times the work of `work_one`, both in their own code, no callees).
//!
//! The profile is decoded here with a minimal protobuf reader and checked
//! field by field; then `go tool pprof -top` must read it and name
//! `work_three` as the top function. That step needs Go (`apt-get install
//! golang-go`) and fails, saying so, without it.
#![cfg(target_os = "linux")]

#[path = "../../tests/support/cli.rs"]
mod cli_support;
#[path = "../../tests/support/tools.rs"]
mod tools;

use cli_support::{fgtrace, record_as, tempdir, text};
use fgtrace::sampler::Sampling;
use fgtrace::{Config, Trace};
use std::collections::HashMap;
use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

#[inline(never)]
fn work_three(units: u64) -> u64 {
    let (mut x, mut i, n) = (units | 1, 0u64, 3 * units * 4000);
    while i < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i += 1;
    }
    x
}

#[inline(never)]
fn work_one(units: u64) -> u64 {
    let (mut x, mut i, n) = (units | 1, 0u64, units * 4000);
    while i < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i += 1;
    }
    x
}

#[inline(never)]
fn busy(ms: u64, seed: u64) -> u64 {
    let t = std::time::Instant::now();
    let (mut r, mut acc) = (seed | 1, 0);
    while t.elapsed().as_millis() < u128::from(ms) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        let units = 1 + r % 40;
        acc ^= work_three(black_box(units));
        acc ^= work_one(black_box(units));
    }
    acc
}

/// One sampled recording (two busy threads, 1 kHz, 1 s), shared by the tests.
fn recorded() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let config = Config::builtin().sampling(Sampling::timer(1000));
        let (_, path) = record_as(&tempdir("rec"), "run.fgt", config, || {
            let workers: Vec<_> = (0..2u64)
                .map(|i| {
                    std::thread::Builder::new()
                        .name(format!("busy-{i}"))
                        .spawn(move || busy(1000, 0x9e37_79b9_7f4a_7c15 ^ i))
                        .unwrap()
                })
                .collect();
            for w in workers {
                black_box(w.join().unwrap());
            }
        });
        path
    })
}

/// A protobuf field: varint or length-delimited (all profile.proto uses).
#[derive(Clone, Copy, Debug)]
enum Val<'a> {
    Int(u64),
    Bytes(&'a [u8]),
}

fn varint(b: &mut &[u8]) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (byte, rest) = b.split_first().expect("varint runs past the end");
        *b = rest;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return v;
        }
    }
    panic!("varint longer than 10 bytes")
}

fn fields(mut b: &[u8]) -> Vec<(u64, Val<'_>)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        let v = match key & 7 {
            0 => Val::Int(varint(&mut b)),
            2 => {
                let n = varint(&mut b) as usize;
                let (v, rest) = b.split_at(n);
                b = rest;
                Val::Bytes(v)
            }
            w => panic!("wire type {w} is not used by profile.proto"),
        };
        out.push((key >> 3, v));
    }
    out
}

fn int(fs: &[(u64, Val<'_>)], n: u64) -> u64 {
    fs.iter()
        .find_map(|(f, v)| match (f, v) {
            (f, Val::Int(x)) if *f == n => Some(*x),
            _ => None,
        })
        .unwrap_or(0)
}

/// A repeated integer field, packed or not.
fn ints(fs: &[(u64, Val<'_>)], n: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for (_, v) in fs.iter().filter(|(f, _)| *f == n) {
        match v {
            Val::Int(x) => out.push(*x),
            Val::Bytes(mut b) => {
                while !b.is_empty() {
                    out.push(varint(&mut b));
                }
            }
        }
    }
    out
}

fn msgs<'a>(fs: &[(u64, Val<'a>)], n: u64) -> Vec<Vec<(u64, Val<'a>)>> {
    fs.iter()
        .filter_map(|(f, v)| match v {
            Val::Bytes(b) if *f == n => Some(fields(b)),
            _ => None,
        })
        .collect()
}

/// (mapping id, address, [(function id, line)]), innermost line first.
type Location = (u64, u64, Vec<(u64, u64)>);

#[derive(Debug)]
struct Profile {
    strings: Vec<String>,
    sample_types: Vec<(String, String)>,
    /// (location ids, values, thread label)
    samples: Vec<(Vec<u64>, Vec<u64>, String)>,
    locations: HashMap<u64, Location>,
    /// id -> (name, file)
    functions: HashMap<u64, (String, String)>,
    /// (id, start, limit, file, build id)
    mappings: Vec<(u64, u64, u64, String, String)>,
    time_nanos: u64,
    duration_nanos: u64,
    period_type: (String, String),
    period: u64,
}

fn decode(gz: &[u8]) -> Profile {
    assert_eq!(&gz[..2], [0x1f, 0x8b], "gzip magic");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut raw)
        .expect("valid gzip");
    let p = fields(&raw);
    let strings: Vec<String> = p
        .iter()
        .filter_map(|(f, v)| match v {
            Val::Bytes(b) if *f == 6 => Some(String::from_utf8(b.to_vec()).unwrap()),
            _ => None,
        })
        .collect();
    let s = |i: u64| strings[i as usize].clone();
    let vt = |m: &[(u64, Val<'_>)]| (s(int(m, 1)), s(int(m, 2)));
    Profile {
        sample_types: msgs(&p, 1).iter().map(|m| vt(m)).collect(),
        samples: msgs(&p, 2)
            .iter()
            .map(|m| {
                let label = msgs(m, 3)
                    .first()
                    .map(|l| format!("{}={}", s(int(l, 1)), s(int(l, 2))))
                    .unwrap_or_default();
                (ints(m, 1), ints(m, 2), label)
            })
            .collect(),
        locations: msgs(&p, 4)
            .iter()
            .map(|m| {
                let lines = msgs(m, 4).iter().map(|l| (int(l, 1), int(l, 2))).collect();
                (int(m, 1), (int(m, 2), int(m, 3), lines))
            })
            .collect(),
        functions: msgs(&p, 5)
            .iter()
            .map(|m| (int(m, 1), (s(int(m, 2)), s(int(m, 4)))))
            .collect(),
        mappings: msgs(&p, 3)
            .iter()
            .map(|m| (int(m, 1), int(m, 2), int(m, 3), s(int(m, 5)), s(int(m, 6))))
            .collect(),
        time_nanos: int(&p, 9),
        duration_nanos: int(&p, 10),
        period_type: msgs(&p, 11).first().map(|m| vt(m)).unwrap(),
        period: int(&p, 12),
        strings,
    }
}

fn export(name: &str, extra: &[&str]) -> (PathBuf, Output) {
    let out = tempdir(name).join("profile.pb.gz");
    let mut args = vec![
        "pprof",
        recorded().to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    (out.clone(), fgtrace(&args))
}

#[test]
fn the_profile_holds_every_sample_with_symbolized_locations() {
    let (path, out) = export("structure", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("samples"),
        "summary line: {}",
        text(&out.stderr)
    );
    let p = decode(&std::fs::read(&path).unwrap());
    let trace = Trace::load(recorded()).unwrap();
    let meta = trace.meta();

    assert_eq!(
        p.strings[0], "",
        "string table starts with the empty string"
    );
    let st = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        p.sample_types,
        [st("samples", "count"), st("cpu", "nanoseconds")]
    );
    assert_eq!(
        (p.period_type.clone(), p.period),
        (st("cpu", "nanoseconds"), 1_000_000)
    );
    assert_eq!(
        (p.time_nanos, p.duration_nanos),
        (meta.clock.start_unix_ns, meta.duration_ns)
    );

    // Every sample is there once, merged by stack, weighted by the period.
    let total: u64 = p.samples.iter().map(|s| s.1[0]).sum();
    assert_eq!(total, trace.samples().count() as u64);
    assert!(p.samples.iter().all(|s| s.1[1] == s.1[0] * 1_000_000));
    assert!(
        p.samples.iter().any(|s| s.2.starts_with("thread=busy-0-")),
        "thread labels"
    );

    // Mapping 1 is this test binary, with its build id.
    let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
    let main = &p.mappings[0];
    assert_eq!((main.0, Path::new(&main.3)), (1, exe.as_path()));
    assert_eq!(
        Some(main.4.clone()),
        meta.mappings
            .iter()
            .find(|m| Path::new(&m.path) == exe)
            .unwrap()
            .build_id
    );

    // Locations resolve through existing functions; leaf lines name the work.
    let mut by_leaf: HashMap<String, u64> = HashMap::new();
    for (locs, vals, _) in &p.samples {
        for id in locs {
            let (mapping, addr, lines) = &p.locations[id];
            assert!(
                *mapping == 0
                    || p.mappings
                        .iter()
                        .any(|m| m.0 == *mapping && (m.1..m.2).contains(addr))
            );
            for (f, _) in lines {
                assert!(p.functions.contains_key(f), "function {f} of location {id}");
            }
        }
        let (_, _, lines) = &p.locations[&locs[0]];
        let leaf = lines
            .first()
            .map_or("?".to_string(), |(f, _)| p.functions[f].0.clone());
        *by_leaf.entry(leaf).or_default() += vals[0];
    }
    let (three, one) = (by_leaf["pprof::work_three"], by_leaf["pprof::work_one"]);
    let ratio = three as f64 / one as f64;
    assert!(
        (2.2..4.0).contains(&ratio),
        "work_three:work_one = {three}:{one}, {by_leaf:?}"
    );
    let work_fn = p
        .functions
        .values()
        .find(|f| f.0 == "pprof::work_three")
        .unwrap();
    assert!(work_fn.1.ends_with("tests/pprof.rs"), "{work_fn:?}");

    // --thread narrows the profile.
    let (path, out) = export("one-thread", &["--thread", "busy-1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let q = decode(&std::fs::read(&path).unwrap());
    assert!(q.samples.iter().all(|s| s.2.starts_with("thread=busy-1-")));
    assert!(q.samples.iter().map(|s| s.1[0]).sum::<u64>() < total);
}

#[test]
fn go_tool_pprof_reads_it_and_names_the_hot_function() {
    let (path, out) = export("go", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let test = "go_tool_pprof_reads_it_and_names_the_hot_function";
    let Some(go) = tools::tool("go", &["version"], "golang-go", test) else {
        return;
    };
    let go = Command::new(go)
        .args(["tool", "pprof", "-top"])
        .arg(&path)
        .env("PPROF_BINARY_PATH", "/nonexistent")
        .output()
        .unwrap_or_else(|e| panic!("cannot run go: {e}"));
    let top = text(&go.stdout);
    println!("{top}{}", text(&go.stderr));
    assert!(
        go.status.success(),
        "go tool pprof failed: {}",
        text(&go.stderr)
    );
    // Rows follow the `flat  flat%   sum%        cum   cum%` header; the first is the hottest.
    let mut rows = top
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1);
    let first = rows.next().expect("a row under the header");
    assert!(
        first.trim_end().ends_with("pprof::work_three"),
        "top row: {first}"
    );
    let second = rows.next().expect("a second row");
    assert!(
        second.trim_end().ends_with("pprof::work_one"),
        "second row: {second}"
    );
}

#[test]
fn report_gains_sampled_self_and_total_columns() {
    let out = fgtrace(&["report", recorded().to_str().unwrap(), "--sort", "self"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = text(&out.stdout);
    let at = r
        .find("# sampled (timer@1000Hz): ")
        .unwrap_or_else(|| panic!("no sampled section:\n{r}"));
    let section = &r[at..];
    let mut lines = section.lines();
    let head = lines.next().unwrap();
    assert!(head.ends_with(" lost"), "{head}");
    let header: Vec<_> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["Self%", "Self", "Total%", "Total", "Function"]);
    lines.next(); // ====
    let row = |l: &str| -> (u64, u64, String) {
        let c: Vec<_> = l.split_whitespace().collect();
        (
            c[1].parse().unwrap(),
            c[3].parse().unwrap(),
            c[4..].join(" "),
        )
    };
    let (s1, t1, n1) = row(lines.next().unwrap());
    let (s2, _, n2) = row(lines.next().unwrap());
    assert_eq!(
        (n1.as_str(), n2.as_str()),
        ("pprof::work_three", "pprof::work_one"),
        "{section}"
    );
    assert_eq!(s1, t1, "work_three calls nothing");
    assert!((2.2..4.0).contains(&(s1 as f64 / s2 as f64)), "{section}");
    let busy = section
        .lines()
        .find(|l| l.ends_with(" pprof::busy"))
        .map(row)
        .expect("busy row");
    // (A walk cut short by a signal in a prologue may miss a caller.)
    let walked = busy.1 as f64 >= 0.95 * (s1 + s2) as f64;
    assert!(
        busy.0 * 50 < busy.1 && walked,
        "busy mostly calls: {busy:?}"
    );
}

#[test]
fn a_trace_without_samples_is_a_clear_error_and_writes_nothing() {
    let dir = tempdir("empty");
    let (_, path) = record_as(&dir, "plain.fgt", Config::builtin(), || {});
    let out_path = dir.join("never.pb.gz");
    let out = fgtrace(&[
        "pprof",
        path.to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("no samples") && err.contains("plain.fgt"),
        "{err}"
    );
    assert!(!out_path.exists());
    // And report prints no sampled section for it.
    let out = fgtrace(&["report", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("# sampled"));

    let out = fgtrace(&["pprof", dir.join("missing.fgt").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("missing.fgt"));
}
