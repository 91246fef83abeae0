//! A crate that depends on `fgtrace` with default features and uses only
//! `#[traced]` and `Session` compiles none of the views, symbolize, testing
//! or CLI code: checked on the dependency graph Cargo resolves for it alone
//! (in a workspace build, features are unified across members).

use std::process::Command;

fn tree(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "-p",
            "fgtrace-probe-only",
            "-e",
            "normal",
        ])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn default_features_build_no_analysis_code() {
    let features = tree(&["-f", "{p} [{f}]", "--prefix", "none"]);
    let fgtrace = features
        .lines()
        .find(|l| l.starts_with("fgtrace v"))
        .expect("fgtrace in the tree");
    for f in [
        "views",
        "testing",
        "symbolize",
        "flame",
        "plot",
        "html",
        "pprof",
        "cli",
    ] {
        assert!(
            !fgtrace.contains(&format!("[{f}")) && !fgtrace.contains(&format!(",{f}")),
            "fgtrace is built with `{f}`: {fgtrace}"
        );
    }
    let crates = tree(&["--prefix", "none", "-f", "{p}"]);
    for heavy in [
        "inferno",
        "plotters",
        "object",
        "addr2line",
        "rustc-demangle",
        "flate2",
        "clap",
        "indicatif",
        "fgtrace-view",
        "fgtrace-cli",
        // The `.eh_frame` unwinder of fgtrace's `unwind` feature.
        "framehop",
        "gimli",
        // Its `PartialEq<Value>` impls for std types change type
        // inference in the user's crate (see checks/inference).
        "serde_json",
    ] {
        assert!(
            !crates.lines().any(|l| l.starts_with(&format!("{heavy} v"))),
            "{heavy} is compiled for a #[traced]-only user:\n{crates}"
        );
    }
    assert!(crates.lines().any(|l| l.starts_with("fgtrace-core v")));
    // The trace model is the runtime's own (a session's `Trace`, `Trace::save`).
    assert!(crates.lines().any(|l| l.starts_with("fgtrace-trace v")));
}

#[test]
fn the_traced_program_records_its_calls() {
    let dir = std::env::temp_dir().join(format!("fgtrace-probe-only-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("t.fgt");
    let run = Command::new(env!("CARGO_BIN_EXE_fgtrace-probe-only"))
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("300 fields, 100 calls"), "{stdout}");
    let t = fgtrace::Trace::load(&out).unwrap();
    assert_eq!(t.calls().count(), 100);
    std::fs::remove_dir_all(dir).ok();
}
