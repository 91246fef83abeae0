//! `fgtrace html`: the whole trace on one self-contained page.

use super::{io_err, progress, threads};
use fgtrace_symbols::symbolize::Symbolizer;
use fgtrace_trace::{Event, TraceError};
use fgtrace_view::html::{write_html, HtmlOptions};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct HtmlArgs {
    /// Trace file written by `Trace::save`.
    file: PathBuf,
    /// Write the page here.
    #[arg(short = 'o', long = "output", value_name = "OUT.html")]
    output: PathBuf,
    /// Only these threads (tid, or name glob); repeat for several.
    #[arg(long = "thread", short = 't')]
    threads: Vec<String>,
    /// Rows of the function table (by total time).
    #[arg(long, default_value_t = 100)]
    rows: usize,
    /// How many of the top functions get a duration plot.
    #[arg(long, default_value_t = 3)]
    plots: usize,
    /// Most calls shown in the slowest root call's graph.
    #[arg(long, default_value_t = 2000)]
    graph_calls: usize,
    /// Page title.
    #[arg(long)]
    title: Option<String>,
}

type Events = Box<dyn Iterator<Item = Result<Event, TraceError>>>;

pub fn run(a: &HtmlArgs) -> Result<(), Option<String>> {
    let name = a
        .file
        .file_name()
        .unwrap_or(a.file.as_os_str())
        .to_string_lossy()
        .into_owned();
    // Two passes over the file: one bar for both.
    let bar = progress::bar(
        2 * progress::file_len(&a.file),
        &format!("reading {name} (2 passes)"),
    );
    let first = progress::open_with_bar(&a.file, Some(&bar))
        .map_err(|e| Some(format!("{}: {e}", a.file.display())))?;
    let meta = first.meta().clone();
    let mut first = Some(first);
    let events = || -> Events {
        match first.take() {
            Some(r) => Box::new(r.events()),
            None => match progress::open_with_bar(&a.file, Some(&bar)) {
                Ok(r) => Box::new(r.events()),
                Err(e) => Box::new(std::iter::once(Err(e))),
            },
        }
    };
    let opts = HtmlOptions {
        title: a.title.clone(),
        source: Some(name),
        rows: a.rows,
        plots: a.plots,
        graph_calls: a.graph_calls,
        threads: threads(&a.threads),
        ..HtmlOptions::default()
    };
    let mut sym = Symbolizer::new(&meta.mappings);
    // Rendered in memory (the page is built there anyway), so a write error
    // is never mistaken for a read error of the trace.
    let mut page = Vec::new();
    let read = write_html(&meta, events, &mut sym, &opts, &mut page);
    progress::finish(&bar);
    for w in sym.warnings() {
        eprintln!("fgtrace: warning: {w}");
    }
    std::fs::write(&a.output, &page)
        .map_err(|e| Some(format!("cannot write {}: {e}", a.output.display())))?;
    read.map_err(|e| io_err(&a.file, e))
}
