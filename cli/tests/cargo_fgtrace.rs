//! `cargo fgtrace` on a scratch project that has no fgtrace anywhere: a
//! workspace whose package `app` uses a small path crate (`helper`, a member)
//! and a registry crate (`adler2`, `no_std` without its default features, in
//! this repository's own lock, so it is in cargo's cache after the first
//! fetch; not one fgtrace itself depends on, which cannot be traced). The tests record and build it,
//! read the traces' reports, and check that the project's files are the same
//! bytes afterwards.
//!
//! The tests take turns with one project directory and one target
//! directory: the path remaps in the build flags then stay the same, and
//! fgtrace and its dependencies are built once for all of them.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// One test at a time has the project.
static PROJECT: Mutex<()> = Mutex::new(());

const ROOT_MANIFEST: &str = r#"[package]
name = "app"
version = "0.1.0"
edition = "2021"

[dependencies]
helper = { path = "helper" }
adler2 = { version = "=2.0.1", default-features = false }

[workspace]
"#;

const APP: &str = r#"//! Calls `helper::work` and `adler2::adler32_slice` ROUNDS times, then
//! exits with status EXIT.
fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: u64 = args.next().unwrap().parse().unwrap();
    let exit: i32 = args.next().unwrap().parse().unwrap();
    let mut total = 0;
    for i in 0..rounds {
        total += helper::work(i);
        total += (adler2::adler32_slice(b"abc") == 0x024d_0127) as u64;
        // Long runs pause now and then, so that the recording's collector
        // reads (and auto-exclude decides) while the program runs.
        if i % 10_000 == 9_999 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    println!("total {total}");
    std::process::exit(exit);
}

#[test]
fn app_test() {
    assert_eq!(helper::work(1), 1 + 2 + 3);
}
"#;

const HELPER_MANIFEST: &str = r#"[package]
name = "helper"
version = "0.1.0"
edition = "2021"
"#;

const HELPER: &str = r#"//! A path crate standing in for a dependency.

/// Three leaves per call.
pub fn work(i: u64) -> u64 {
    leaf(i) + leaf(i + 1) + leaf(i + 2)
}

fn leaf(i: u64) -> u64 {
    std::hint::black_box(i)
}

pub struct Counter(pub u64);

impl Counter {
    pub fn bump(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bumps() {
        let mut c = super::Counter(0);
        assert_eq!(c.bump() + c.bump(), 3);
    }
}
"#;

/// The scratch project, written afresh for each test.
struct Project {
    dir: PathBuf,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Project {
    fn new(name: &str) -> Project {
        let turn = PROJECT.lock().unwrap_or_else(|e| e.into_inner());
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cargo-fgtrace-project");
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in [
            ("Cargo.toml", ROOT_MANIFEST),
            ("src/main.rs", APP),
            ("helper/Cargo.toml", HELPER_MANIFEST),
            ("helper/src/lib.rs", HELPER),
        ] {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        eprintln!("project for {name}: {}", dir.display());
        Project { dir, _turn: turn }
    }

    /// Every file outside `target/`, with its bytes.
    fn files(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    if p != root.join("target") {
                        walk(root, &p, out);
                    }
                } else {
                    let rel = p.strip_prefix(root).unwrap().to_path_buf();
                    out.insert(rel, std::fs::read(&p).unwrap());
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.dir, &self.dir, &mut out);
        out
    }

    /// `cargo fgtrace ARGS` in the project's directory.
    fn cargo_fgtrace(&self, args: &[&str]) -> Output {
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cargo-fgtrace-target");
        let out = Command::new(env!("CARGO_BIN_EXE_cargo-fgtrace"))
            .arg("fgtrace")
            .args(args)
            .current_dir(&self.dir)
            .env("CARGO_TARGET_DIR", target)
            .env_remove("CARGO_FGTRACE_TARGET_DIR")
            .env_remove("FGTRACE_RECORD")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .output()
            .unwrap();
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        out
    }
}

/// `fgtrace report --format json` of the traces (merged).
fn report_json(traces: &[PathBuf]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(["report", "--format", "json"])
        .args(traces)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Calls per function name in the traces' merged report.
fn report(traces: &[PathBuf]) -> BTreeMap<String, u64> {
    report_json(traces)["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["calls"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn traces_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "fgt"))
        .collect();
    v.sort();
    v
}

#[test]
fn record_traces_a_path_crate_and_a_registry_crate_and_leaves_the_project_as_it_was() {
    let p = Project::new("record");
    let before = p.files();
    let trace = p.dir.with_extension("fgt");
    let out = p.cargo_fgtrace(&[
        "record",
        "--crate",
        "helper",
        "--crate",
        "adler2",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "run",
        "--",
        "7",
        "3",
    ]);
    // The program's status is the command's.
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("total 91"), "{stdout}");
    let calls = report(std::slice::from_ref(&trace));
    // The chosen crates' own functions, with their exact counts; not the
    // app's (not chosen).
    assert_eq!(calls.get("work"), Some(&7), "{calls:?}");
    assert_eq!(calls.get("leaf"), Some(&21), "{calls:?}");
    assert_eq!(calls.get("adler32_slice"), Some(&7), "{calls:?}");
    assert_eq!(calls.get("Adler32::write_slice"), Some(&7), "{calls:?}");
    assert_eq!(calls.get("main"), None, "{calls:?}");
    // No file of the project changed, none appeared outside target/ (not
    // even a Cargo.lock).
    assert_eq!(p.files(), before);
    let _ = std::fs::remove_file(&trace);

    // A second run builds nothing again.
    let out = p.cargo_fgtrace(&[
        "record",
        "--crate",
        "helper",
        "--crate",
        "adler2",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "run",
        "--",
        "2",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("Compiling"), "{stderr}");
    assert_eq!(report(std::slice::from_ref(&trace)).get("work"), Some(&2));
    let _ = std::fs::remove_file(&trace);
}

/// What `fgtrace COMMAND TRACE` prints.
fn fgtrace_stdout(command: &str, trace: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .arg(command)
        .arg(trace)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `fgtrace report --format json`'s rows by name: (calls, counted, total_ns).
fn rows(trace: &Path) -> BTreeMap<String, (u64, u64, u64)> {
    report_json(&[trace.to_path_buf()])["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let n = |k: &str| f[k].as_u64().unwrap();
            let name = f["name"].as_str().unwrap().to_string();
            (name, (n("calls"), n("counted"), n("total_ns")))
        })
        .collect()
}

#[test]
fn a_plan_from_auto_exclude_counts_its_functions_exactly_and_the_rest_keep_their_probe() {
    let p = Project::new("plan");
    let before = p.files();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cargo-fgtrace-plan");
    std::fs::create_dir_all(&tmp).unwrap();
    let (auto, plan, planned) = (
        tmp.join("auto.fgt"),
        tmp.join("plan"),
        tmp.join("planned.fgt"),
    );
    let record = |extra: &[&str], trace: &Path, rounds: &str| {
        let mut args = vec!["record", "--crate", "helper"];
        args.extend(extra);
        args.extend([
            "-o",
            trace.to_str().unwrap(),
            "--",
            "run",
            "--",
            rounds,
            "0",
        ]);
        let out = p.cargo_fgtrace(&args);
        assert_eq!(out.status.code(), Some(0));
    };
    // Any threshold switches a function once 1,024 of its calls decided
    // (the collector decides as it reads: the program pauses every 10,000
    // rounds so that it reads while the program runs).
    record(&["--auto-exclude", "1s"], &auto, "100000");
    let out = p.cargo_fgtrace(&["plan", auto.to_str().unwrap(), "-o", plan.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let text = std::fs::read_to_string(&plan).unwrap();
    let paths: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(paths, ["helper::leaf", "helper::work"], "{text}");

    // A plan of one of them: the other keeps its probe.
    std::fs::write(&plan, text.replace("helper::work", "# helper::work")).unwrap();
    record(&["--plan", plan.to_str().unwrap()], &planned, "1000");
    let got = rows(&planned);
    // leaf: every call counted, none timed; work: every call timed.
    assert_eq!(got.get("leaf"), Some(&(3000, 3000, 0)), "{got:?}");
    let work = got.get("work").copied().unwrap_or_default();
    assert_eq!((work.0, work.1), (1000, 0), "{got:?}");
    assert!(work.2 > 0, "{got:?}");
    let table = fgtrace_stdout("report", &planned);
    assert!(
        table.contains("3000 calls of 1 function marked [counted]"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("   3000 ") && l.ends_with(" leaf [counted]")),
        "{table}"
    );
    let info = fgtrace_stdout("info", &planned);
    assert!(
        info.contains("counted:   3000 calls of 1 function the build's plan counted"),
        "{info}"
    );

    // An `uncounted` line: neither probe nor count, as if not traced.
    std::fs::write(&plan, "uncounted helper::leaf\n").unwrap();
    record(&["--plan", plan.to_str().unwrap()], &planned, "1000");
    let got = rows(&planned);
    assert_eq!(got.get("leaf"), None, "{got:?}");
    assert_eq!(
        got.get("work").map(|w| (w.0, w.1)),
        Some((1000, 0)),
        "{got:?}"
    );

    // The plan is read again when it changes: empty, leaf has its probe.
    std::fs::write(&plan, "# nothing\n").unwrap();
    record(&["--plan", plan.to_str().unwrap()], &planned, "1000");
    let got = rows(&planned);
    let leaf = got.get("leaf").copied().unwrap_or_default();
    assert_eq!((leaf.0, leaf.1), (3000, 0), "{got:?}");
    assert!(leaf.2 > 0, "{got:?}");
    assert_eq!(p.files(), before);
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn record_test_traces_the_workspace_members_in_each_test_binary() {
    let p = Project::new("test");
    let before = p.files();
    let dir = p.dir.with_extension("traces");
    let _ = std::fs::remove_dir_all(&dir);
    let out = p.cargo_fgtrace(&[
        "record",
        "--dir",
        dir.to_str().unwrap(),
        "--",
        "test",
        "--workspace",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let traces = traces_in(&dir);
    // app's and helper's unit tests (and helper's doc tests, none).
    assert!(traces.len() >= 2, "{traces:?}");
    let calls = report(&traces);
    // Without --crate every member is traced: the tests themselves and
    // what they call.
    assert_eq!(calls.get("app_test"), Some(&1), "{calls:?}");
    assert_eq!(calls.get("bumps"), Some(&1), "{calls:?}");
    assert_eq!(calls.get("Counter::bump"), Some(&2), "{calls:?}");
    assert_eq!(calls.get("work"), Some(&1), "{calls:?}");
    assert_eq!(calls.get("leaf"), Some(&3), "{calls:?}");
    assert_eq!(p.files(), before);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_crate_fgtrace_is_built_with_is_an_error_that_says_so() {
    let p = Project::new("cycle");
    let manifest = p.dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("[workspace]", "wildmatch = \"2\"\n\n[workspace]"),
    )
    .unwrap();
    let out = p.cargo_fgtrace(&["build", "--crate", "wildmatch", "--", "build"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--crate wildmatch: fgtrace itself is built with wildmatch"),
        "{stderr}"
    );
}

#[test]
fn build_prints_the_executables_which_record_when_asked() {
    let p = Project::new("build");
    let out = p.cargo_fgtrace(&["build", "--crate", "helper", "--", "build"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let exes: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("executable: "))
        .collect();
    assert_eq!(exes.len(), 1, "{stdout}");
    assert!(exes[0].ends_with("/app"), "{stdout}");
    // Not recording: it just runs.
    let run = Command::new(exes[0]).args(["4", "0"]).output().unwrap();
    assert!(run.status.success());
    assert_eq!(String::from_utf8_lossy(&run.stdout), "total 34\n");
    // Recording.
    let dir = p.dir.with_extension("rec");
    std::fs::create_dir_all(&dir).unwrap();
    let run = Command::new(exes[0])
        .args(["4", "0"])
        .env("FGTRACE_RECORD", &dir)
        .output()
        .unwrap();
    assert!(run.status.success());
    let calls = report(&traces_in(&dir));
    assert_eq!(calls.get("leaf"), Some(&12), "{calls:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_crate_the_build_does_not_use_is_an_error_that_names_it() {
    let p = Project::new("nosuch");
    let out = p.cargo_fgtrace(&["build", "--crate", "nosuch_crate", "--", "build"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--crate nosuch_crate: the build does not depend on a package"),
        "{stderr}"
    );
}

#[test]
fn an_item_that_does_not_compile_instrumented_is_named_with_the_skip_that_leaves_it_out() {
    let p = Project::new("broken");
    // A module of the crate's own named `fgtrace` hides the fgtrace crate
    // from the root module's attributes: `work` and `leaf` there do not
    // compile instrumented, `Counter`'s block (in a module) does.
    let lib = p.dir.join("helper/src/lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap();
    let counter = text.find("pub struct Counter").unwrap();
    let tests = text.find("#[cfg(test)]").unwrap();
    let text = format!(
        "{}pub mod fgtrace {{}}\n\npub mod counter {{\n{}}}\n",
        &text[..counter],
        &text[counter..tests]
    );
    std::fs::write(&lib, text).unwrap();
    let out = p.cargo_fgtrace(&["build", "--crate", "helper", "--", "build"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("helper 0.1.0 does not compile instrumented"),
        "{stderr}"
    );
    assert!(stderr.contains("--skip 'helper::work'"), "{stderr}");
    assert!(stderr.contains("--skip 'helper::leaf'"), "{stderr}");
    assert!(!stderr.contains("helper::counter"), "{stderr}");
    assert!(stderr.contains("build.log"), "{stderr}");
    // Not a wall of rustc errors: one line per item, and the rest in the log.
    assert!(!stderr.contains("-->"), "{stderr}");
    let out = p.cargo_fgtrace(&[
        "build",
        "--crate",
        "helper",
        "--skip",
        "helper::work",
        "--skip",
        "helper::leaf",
        "--",
        "build",
    ]);
    assert!(out.status.success());
}
