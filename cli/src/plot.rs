//! `fgtrace plot`: one function's per-call durations as an SVG, its slowest
//! calls with their call paths on stdout.

use super::{io_err, open_trace, threads};
use fgtrace_view::plot::{
    durations_svg, growth, write_slowest, DurationsBuilder, PlotError, PlotOptions,
};
use std::io::{self, Write};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct PlotArgs {
    /// Trace file written by `Trace::save`.
    file: PathBuf,
    /// The function: display name (`parse`, `Parser::parse`) or full path (`my_crate::parser::parse`).
    #[arg(long, short = 'f')]
    function: String,
    /// Write the SVG here.
    #[arg(short = 'o', long = "output", value_name = "OUT.svg")]
    output: PathBuf,
    /// How many of the slowest calls to list (with their call paths).
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Only these threads (tid, or name glob); repeat for several.
    #[arg(long = "thread", short = 't')]
    threads: Vec<String>,
    /// SVG width in pixels.
    #[arg(long, default_value_t = 1200)]
    width: u32,
    /// SVG height in pixels.
    #[arg(long, default_value_t = 800)]
    height: u32,
    /// Title of the SVG.
    #[arg(long)]
    title: Option<String>,
    /// Plot duration against this recorded value (`#[traced(values(len = ..))]`)
    /// on log-log axes, with a power-law fit: prints `duration ~ len^1.02 (r² 0.99)`
    /// and the calls furthest above the fit.
    #[arg(long = "x", value_name = "VALUE")]
    x: Option<String>,
}

pub fn run(a: &PlotArgs, mut stdout: impl Write) -> Result<(), Option<String>> {
    let r = open_trace(&a.file)?;
    let meta = r.meta().clone();
    let opts = PlotOptions {
        function: a.function.clone(),
        top: a.top,
        threads: threads(&a.threads),
        width: a.width,
        height: a.height,
        title: a.title.clone(),
    };
    let fail = |e: PlotError| Some(format!("{}: {e}", a.file.display()));
    let mut b = DurationsBuilder::new(&meta, &opts).map_err(fail)?;
    if a.x.is_some() {
        // The fit and the calls furthest above it need every call's value.
        b = b.keeping_calls();
    }
    let read = b.extend(r.events());
    let d = match b.finish() {
        Ok(d) => d,
        // A damaged file says more than "no calls".
        Err(e) => {
            return Err(match read {
                Err(damage) => io_err(&a.file, damage),
                Ok(()) => fail(e),
            })
        }
    };
    let printed = if let Some(x) = &a.x {
        let points = growth::growth_points(&d, &meta, x).map_err(fail)?;
        let fit = growth::growth_fit(&points);
        let svg = growth::growth_svg(&d, x, &points, fit.as_ref(), &opts).map_err(fail)?;
        std::fs::write(&a.output, svg)
            .map_err(|e| Some(format!("cannot write {}: {e}", a.output.display())))?;
        growth::write_growth(&d, &meta, x, &points, fit.as_ref(), a.top, &mut stdout)
    } else {
        let svg = durations_svg(&d, &meta, &opts).map_err(fail)?;
        std::fs::write(&a.output, svg)
            .map_err(|e| Some(format!("cannot write {}: {e}", a.output.display())))?;
        write_slowest(&d, &meta, &mut stdout)
    };
    match printed {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Err(None),
        Err(e) => return Err(Some(format!("cannot write the output: {e}"))),
        Ok(()) => {}
    }
    read.map_err(|e| io_err(&a.file, e))
}
