//! Replays the fuzzing corpus and every input a fuzzer ever crashed on
//! (`fuzz/corpus/<target>/`, `fuzz/artifacts/<target>/`) through the same
//! code the fuzz targets run (`fuzz/harness.rs`), so CI keeps them fixed
//! without cargo-fuzz or a nightly compiler. See docs/src/contributing.md.

#[path = "../fuzz/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};

type Target = fn(&[u8]) -> Result<usize, String>;

const TARGETS: [(&str, Target); 6] = [
    ("trace_reader", harness::trace_reader),
    ("zephyr_dump", harness::zephyr_dump),
    ("elf_symbols", harness::elf_symbols),
    ("symbolizer", harness::symbolizer),
    ("board_stream", harness::board_stream),
    ("control_request", harness::control_request),
];

fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs one input, naming it if the target panics.
fn run(target: Target, input: &Path) -> Result<usize, String> {
    let data = std::fs::read(input).unwrap();
    std::panic::catch_unwind(|| target(&data))
        .unwrap_or_else(|_| panic!("{} panicked (see the message above)", input.display()))
}

#[test]
fn the_corpus_replays_without_a_panic() {
    for (name, target) in TARGETS {
        let mut corpus = inputs("corpus", name);
        if name == "symbolizer" {
            // Its corpus holds only what adds to the other ELF target's.
            corpus.extend(inputs("corpus", "elf_symbols"));
        }
        assert!(
            corpus.len() >= 3,
            "fuzz/corpus/{name} should hold the committed corpus"
        );
        let ok = corpus.iter().filter(|p| run(target, p).is_ok()).count();
        // The seeds are real files: some inputs must be accepted, or the
        // target no longer reaches the code behind its parser.
        assert!(ok > 0, "no input of fuzz/corpus/{name} was accepted");
    }
}

#[test]
fn every_crash_found_is_fixed() {
    for (name, target) in TARGETS {
        for input in inputs("artifacts", name) {
            let result = run(target, &input);
            // A bad trace file is an error naming the byte it is wrong at.
            if name == "trace_reader" {
                let err = result.expect_err(&format!("{} was accepted", input.display()));
                assert!(err.contains(" byte "), "{}: {err}", input.display());
            }
        }
    }
}
