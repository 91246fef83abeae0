//! `fgtrace pprof FILE -o profile.pb.gz`: a trace's samples as a gzipped
//! pprof profile, symbolized here against the binaries the trace recorded.

use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;

use fgtrace_symbols::symbolize::Symbolizer;
use fgtrace_view::pprof::{write_pprof, PprofError, PprofOptions};

/// Export the samples for `go tool pprof`, pprof's web UI, and the tools that read profile.proto.
#[derive(clap::Args, Debug, Clone)]
pub struct PprofArgs {
    /// Trace file written by `Trace::save`, recorded with sampling on.
    pub file: PathBuf,
    /// Where to write the gzipped profile (`-` for stdout).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "OUT",
        default_value = "profile.pb.gz"
    )]
    pub output: PathBuf,
    /// Only these threads (tid, or name glob); repeat for several.
    #[arg(long = "thread", short = 't')]
    pub threads: Vec<String>,
}

/// Reads the whole trace before creating the output, so a failed export
/// leaves no half-written profile behind.
pub fn run(a: &PprofArgs) -> Result<(), Option<String>> {
    let r = super::open_trace(&a.file)?;
    let meta = r.meta().clone();
    let opts = PprofOptions {
        threads: super::threads(&a.threads),
    };
    let mut sym = Symbolizer::new(&meta.mappings);
    let mut bytes = Vec::new();
    let res = write_pprof(&meta, r.events(), &opts, &mut sym, &mut bytes);
    for w in sym.warnings() {
        eprintln!("fgtrace: warning: {w}");
    }
    let summary = res.map_err(|e| match e {
        PprofError::Trace(e) => super::io_err(&a.file, e),
        e => Some(format!("{}: {e}", a.file.display())),
    })?;
    let out = a.output.display();
    if a.output.as_os_str() == "-" {
        let mut stdout = io::stdout().lock();
        match stdout.write_all(&bytes).and_then(|()| stdout.flush()) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Err(None),
            Err(e) => return Err(Some(format!("cannot write the profile to stdout: {e}"))),
            Ok(()) => {}
        }
    } else {
        fs::write(&a.output, &bytes).map_err(|e| Some(format!("cannot write {out}: {e}")))?;
    }
    eprintln!(
        "fgtrace: wrote {}: {} samples, {} stacks, {} locations ({} unnamed), {} functions",
        if a.output.as_os_str() == "-" {
            "stdout".into()
        } else {
            out.to_string()
        },
        summary.samples,
        summary.stacks,
        summary.locations,
        summary.unknown_locations,
        summary.functions
    );
    Ok(())
}

/// The sampled section of `fgtrace report`: a second, streaming pass over
/// the file, per-function self and total sample counts, rows ordered like
/// the report's (`--sort total`, `self`, `name`; by self for the others).
pub fn report_samples(
    file: &std::path::Path,
    known: &fgtrace_trace::TraceMeta,
    opts: &fgtrace_view::ReportOptions,
    mut out: impl Write,
) -> Result<(), Option<String>> {
    use fgtrace_view::sampled::{write_sampled, SampledOptions, SampledSort};
    use fgtrace_view::Column;
    // The metadata the report read says whether there are samples: a file
    // without them is not opened again.
    let no_samples = |m: &fgtrace_trace::TraceMeta| {
        m.sampling.is_none() && m.threads.iter().all(|t| t.samples == 0)
    };
    if no_samples(known) {
        return Ok(());
    }
    let r = super::open_trace(file)?;
    let meta = r.meta().clone();
    if no_samples(&meta) {
        return Ok(());
    }
    let sort = match opts.sort_by {
        Column::Total => SampledSort::Total,
        Column::Name => SampledSort::Name,
        _ => SampledSort::SelfSamples,
    };
    let sopts = SampledOptions {
        threads: opts.threads.clone(),
        sort,
        limit: 0,
    };
    let mut sym = Symbolizer::new(&meta.mappings);
    writeln!(out).map_err(|e| super::io_err(file, e.into()))?;
    let res = write_sampled(&meta, r.events(), &sopts, &mut sym, out);
    for w in sym.warnings() {
        eprintln!("fgtrace: warning: {w}");
    }
    res.map(drop).map_err(|e| super::io_err(file, e))
}
