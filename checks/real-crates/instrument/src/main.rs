//! Puts `#[fgtrace::traced] ` on every free fn and every impl block of a
//! crate's sources, in place: `instrument CRATE_DIR [LABEL]`. The rewriting
//! is `fgtrace-instrument`'s (the one `cargo fgtrace` does on its copies);
//! this command applies it to `CRATE_DIR/src/**/*.rs`.
//!
//! Prints one summary line, prefixed by LABEL (default: the directory name).
//! Exits non-zero if a file does not parse: the crate would be instrumented
//! only in part.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first().map(PathBuf::from) else {
        eprintln!("usage: instrument CRATE_DIR [LABEL]");
        return ExitCode::from(2);
    };
    let label = args.get(1).cloned().unwrap_or_else(|| {
        dir.file_name()
            .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into())
    });
    // The module paths only matter to skip globs, which this command has none of.
    let krate = label.split(' ').next().unwrap_or("crate").replace('-', "_");
    let src = dir.join("src");
    let report = fgtrace_instrument::instrument_dir(&src, &krate, &fgtrace_instrument::NoSkip);
    for (file, e) in &report.io_errors {
        eprintln!("instrument: {}: {e}", file.display());
    }
    for (file, e) in &report.unparsed {
        eprintln!("instrument: {}:{e} (does not parse)", file.display());
    }
    println!("{}", report.counts.summary(&label));
    if report.io_errors.is_empty() && report.unparsed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
