//! The combined flamegraph of a program built as cargo builds it by default:
//! release, no frame pointers in the program's own code. A fixture crate
//! (tests/support/no_fp_fixture.rs, the hidden 3:1 split of
//! tests/support/split.rs) is built in its own workspace with `RUSTFLAGS`
//! empty (this repository's `.cargo/config.toml` adds frame pointers to what
//! it builds) and records itself; the test reads the trace and joins it.
//!
//! Without frame pointers the walk skips every function of the program, so
//! samples in dense traced code cannot be placed (46% of all in one run,
//! as on a whole-traced real crate); with the `unwind` feature both sampler
//! paths (the perf ring's copies, the signal handler's) unwind them through
//! `.eh_frame`.
#![cfg(all(target_os = "linux", target_arch = "x86_64", feature = "symbolize"))]

#[path = "support/tools.rs"]
mod tools;

use fgtrace::symbolize::Symbolizer;
use fgtrace::trace::SiteInfo;
use fgtrace::trace::{Event, TraceBuilder};
use fgtrace::view::folded::{FoldedBuilder, FoldedOptions};
use fgtrace::view::join::{ChainCut, Cut, SampleStack};
use fgtrace::view::ok_events;
use fgtrace::Trace;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

/// Builds the fixture (once per target dir; cargo keeps it up to date) and
/// returns its executable.
fn fixture() -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-fp-fixture");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let main = std::fs::read_to_string(repo.join("tests/support/no_fp_fixture.rs"))
        .unwrap()
        .replace(
            "\"split.rs\"",
            &format!("{:?}", repo.join("tests/support/split.rs")),
        );
    write_if_changed(&dir.join("src/main.rs"), &main);
    let manifest = format!(
        "[package]\nname = \"no-fp-fixture\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
         [dependencies]\nfgtrace = {{ path = {:?}, features = [\"unwind\"] }}\nlibc = \"0.2\"\n\n\
         [workspace]\n",
        repo.display().to_string()
    );
    write_if_changed(&dir.join("Cargo.toml"), &manifest);
    let lock = repo.join("Cargo.lock");
    if !dir.join("Cargo.lock").exists() {
        // The workspace's resolved versions: no registry lookup for the fixture.
        std::fs::copy(&lock, dir.join("Cargo.lock")).unwrap();
    }
    // Cargo's default release profile exactly: no flags, no debug info.
    let out = Command::new(env!("CARGO"))
        .args(["build", "--release", "--quiet", "--offline"])
        .current_dir(&dir)
        .env("RUSTFLAGS", "")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_PROFILE_RELEASE_DEBUG")
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the fixture does not build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("target/release/no-fp-fixture")
}

fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).unwrap();
    }
}

/// Runs the fixture with `sample` (`FGTRACE_SAMPLE`'s syntax) and reads its trace.
fn record(exe: &Path, sample: &str, test: &str) -> Option<Trace> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("no-fp-{sample}"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.fgt");
    let out = Command::new(exe)
        .arg(&file)
        .arg(sample)
        .arg("2000")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        return tools::missing(test, &format!("the perf ring is refused here: {stderr}"));
    }
    assert!(out.status.success(), "the fixture failed: {stderr}");
    let trace = Trace::load(&file).unwrap();
    // What the samples cost in the file: its size against the same trace
    // saved without them.
    let bare = dir.join("bare.fgt");
    let mut b = TraceBuilder::new(trace.meta().clone());
    for e in trace.events() {
        if !matches!(e, Event::Sample(_)) {
            b.push(e);
        }
    }
    b.finish().save(&bare).unwrap();
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    let samples = trace
        .events()
        .filter(|e| matches!(e, Event::Sample(_)))
        .count();
    println!(
        "{sample}: {} bytes per sample in the file ({samples} samples)",
        (size(&file) - size(&bare)) / samples.max(1) as u64
    );
    std::fs::remove_dir_all(&dir).ok();
    Some(trace)
}

/// The helper's samples below each parent, by the chain join.
#[derive(Default)]
struct Split {
    a: u64,
    b: u64,
}

struct Count(Rc<RefCell<Split>>);

impl Cut for Count {
    fn cut(&mut self, site: &SiteInfo, stack: &SampleStack<'_>) -> Option<usize> {
        let j = ChainCut.cut(site, stack);
        if let Some(j) = j.filter(|&j| j > 0) {
            if stack.names[j - 1].ends_with("helper") {
                let mut s = self.0.borrow_mut();
                if site.name.ends_with("parent_a") {
                    s.a += 1;
                } else if site.name.ends_with("parent_b") {
                    s.b += 1;
                }
            }
        }
        j
    }
}

/// Unplaced share at most 1%, and the hidden split within 4 sigma of 3:1.
fn check(trace: &Trace, what: &str) {
    let meta = trace.meta();
    let program = meta
        .mappings
        .iter()
        .find(|m| m.path.ends_with("no-fp-fixture"));
    let mut sym = Symbolizer::new(&meta.mappings);
    let path = program.expect("the fixture's mapping").path.clone();
    assert_eq!(
        sym.frame_pointers(&path),
        Some(false),
        "the fixture was built with frame pointers: it tests nothing"
    );
    let split = Rc::new(RefCell::new(Split::default()));
    let opts = FoldedOptions {
        short_names: true,
        ..FoldedOptions::default()
    };
    let mut b = FoldedBuilder::combined(meta, &opts, sym).with_cut(Count(split.clone()));
    b.extend(ok_events(trace.events())).unwrap();
    let s = b.finish().summary().clone();
    let Split { a, b } = *split.borrow();
    // Unplaced: under `[unknown below <fn>]`, as checks/real-join counts them.
    // (A signal sample whose handler saw other calls open than its time
    // says, on a loaded machine a late clock, is a depth mismatch, placed
    // under the calls the handler saw: shown, not counted.)
    let unplaced = s.unmatched;
    let share = a as f64 / (a + b).max(1) as f64;
    let sigma4 = 4.0 * (0.75 * 0.25 / (a + b).max(1) as f64).sqrt();
    println!(
        "{what}: {} samples, {unplaced} unplaced ({:.2}%), {} depth mismatches, helper under \
         a:b = {a}:{b} = {share:.3} (0.75 +- {sigma4:.3}); sampler: {}",
        s.samples,
        100.0 * unplaced as f64 / s.samples.max(1) as f64,
        s.depth_mismatches,
        meta.sampler.as_deref().unwrap_or("-"),
    );
    assert!(s.samples > 2_000, "{what}: too few samples: {}", s.samples);
    assert!(
        unplaced * 100 <= s.samples,
        "{what}: {unplaced} of {} samples unplaced",
        s.samples
    );
    assert!(
        (share - 0.75).abs() <= sigma4.max(0.03),
        "{what}: the hidden split is off: {a}:{b} = {share:.3}"
    );
}

#[test]
fn perf_ring_samples_of_a_build_without_frame_pointers_are_joined() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let test = "perf_ring_samples_of_a_build_without_frame_pointers_are_joined";
    let exe = fixture();
    let Some(trace) = record(&exe, "timer-ring:2000", test) else {
        return;
    };
    let sampler = trace.meta().sampler.clone().unwrap_or_default();
    assert!(sampler.starts_with("perf ring"), "{sampler}");
    check(&trace, "perf ring");
}

#[test]
fn signal_samples_of_a_build_without_frame_pointers_are_joined() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let test = "signal_samples_of_a_build_without_frame_pointers_are_joined";
    let exe = fixture();
    let trace = record(&exe, "timer-signal:2000", test).expect("the signal path starts");
    let sampler = trace.meta().sampler.clone().unwrap_or_default();
    assert!(sampler.starts_with("signal"), "{sampler}");
    check(&trace, "signal");
}
