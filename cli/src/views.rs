//! `fgtrace flame`, `fgtrace chrome` and `fgtrace diff`: flag parsing into the
//! library's options, one clear line on error.

use super::{io_err, open_trace, threads};
use fgtrace_symbols::symbolize::Symbolizer;
use fgtrace_trace::parallel;
use fgtrace_trace::{TraceError, TraceMeta};
use fgtrace_view::chart::ChartBuilder;
use fgtrace_view::chrome::{write_chrome, ChromeOptions};
use fgtrace_view::diff::{
    diff_readers, differential_folded, differential_svg, DiffOptions, DiffSort, Limit, Metric,
};
use fgtrace_view::firefox::{write_firefox, FirefoxOptions};
use fgtrace_view::flame::{render_svg, FlameOptions};
use fgtrace_view::flame_svg::{chart_svg, folded_svg};
use fgtrace_view::folded::{Folded, FoldedBuilder, FoldedOptions, FoldedSummary};
use fgtrace_view::human::human_duration;
use fgtrace_view::join::{
    eh_frame_unwinding, missing_debug_lines_note, missing_frame_pointers_note,
};
use fgtrace_view::offcpu::{
    self as offcpu_view, write_folded as write_offcpu_folded, OffCpuFoldedBuilder,
    OffCpuFoldedOptions,
};
use fgtrace_view::perfetto::{write_perfetto, PerfettoOptions};
use fgtrace_view::window::{
    estimate, memory_warning, size_warning, Viewer, Window, CHART_FOLDED_MEMORY_PER_CALL,
    CHART_SVG_MEMORY_PER_CALL, FIREFOX_MEMORY_PER_CALL, MEMORY_WARN_BYTES,
};
use fgtrace_view::ThreadSel;
use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
#[command(
    mut_arg("from", |a| a.requires("chart")),
    mut_arg("to", |a| a.requires("chart")),
    mut_arg("min_duration", |a| a.requires("chart"))
)]
pub struct FlameArgs {
    /// Trace file written by `Trace::save`.
    file: PathBuf,
    /// More trace files: merged per function with the first (traced calls only).
    more: Vec<PathBuf>,
    /// Traced calls only, weighted by exact self time (ns).
    #[arg(long, conflicts_with_all = ["sampled", "combined"])]
    traced: bool,
    /// Samples only, one count each.
    #[arg(long, conflicts_with_all = ["traced", "combined"])]
    sampled: bool,
    /// Traced calls (exact ns) with the sampled frames below each one sharing
    /// its self time. The default when the trace has both calls and samples.
    #[arg(long, conflicts_with_all = ["traced", "sampled"])]
    combined: bool,
    /// Print folded stacks (`root;child;leaf count`) instead of an SVG.
    #[arg(long)]
    folded: bool,
    /// A flame chart of the traced calls: time order per thread, x = time.
    #[arg(long, conflicts_with_all = ["sampled", "combined"])]
    chart: bool,
    /// Start every stack with its thread (`name-tid`).
    #[arg(long)]
    per_thread: bool,
    /// Only these threads (tid, or name glob); repeat for several.
    #[arg(long = "thread", short = 't')]
    threads: Vec<String>,
    /// Traced frames as `Type::method` instead of `crate::module::Type::method`.
    #[arg(long)]
    short_names: bool,
    /// Combined: join samples to calls by time alone, ignoring the sampler's
    /// count of open traced calls.
    #[arg(long)]
    by_time: bool,
    /// Title of the SVG.
    #[arg(long)]
    title: Option<String>,
    /// SVG width in pixels.
    #[arg(long)]
    width: Option<usize>,
    /// Icicle graph: roots at the top.
    #[arg(long)]
    inverted: bool,
    /// Off-CPU flamegraph: traced stacks weighted by the time their calls
    /// were switched out, under a `[blocked]` or `[preempted]` frame.
    #[arg(long, conflicts_with_all = ["sampled", "combined", "chart"])]
    offcpu: bool,
    /// With --offcpu: blocked time only (leave preemption out).
    #[arg(long, requires = "offcpu")]
    blocked_only: bool,
    /// With --chart: the part of the trace drawn (a chart holds every call it draws).
    #[command(flatten)]
    window: WindowArgs,
    /// Write here instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: Option<PathBuf>,
}

/// The time window and minimum duration of the timeline exports (`fgtrace
/// chrome`, `perfetto`, `firefox`) and the flame chart (`fgtrace flame
/// --chart`). Times are offsets from the trace's start
/// (`1.5s`, `250ms`), or microseconds as the views print them (`1234.567`,
/// `1234.567 us`).
#[derive(clap::Args)]
pub struct WindowArgs {
    /// Leave out what ends before this time (offset from the trace's start: 1.5s, 250ms, or microseconds).
    #[arg(long, value_name = "TIME", value_parser = super::parse_duration)]
    from: Option<u64>,
    /// Leave out what starts at or after this time (as --from).
    #[arg(long, value_name = "TIME", value_parser = super::parse_duration)]
    to: Option<u64>,
    /// Leave out calls and futures shorter than this (e.g. 10us).
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration)]
    min_duration: Option<u64>,
}

impl WindowArgs {
    fn window(&self) -> Result<Window, Option<String>> {
        if let (Some(f), Some(t)) = (self.from, self.to) {
            if f >= t {
                return Err(Some(format!(
                    "--from ({f} ns) must come before --to ({t} ns)"
                )));
            }
        }
        Ok(Window {
            from_ns: self.from,
            to_ns: self.to,
            min_dur_ns: self.min_duration.unwrap_or(0),
        })
    }
}

/// Overrides every viewer's size limit (bytes) for the export size warning.
const LIMIT_ENV: &str = "FGTRACE_EXPORT_LIMIT_BYTES";

/// One line on stderr, before anything is written, when the export will be
/// more than its viewer loads: the estimate is the metadata's call count in
/// the window times the export's bytes per call. The export still runs.
fn warn_size(meta: &TraceMeta, threads: &[ThreadSel], window: &Window, viewer: Viewer) {
    let limit = std::env::var(LIMIT_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(viewer.limit_bytes());
    let calls = estimate(meta, threads, window);
    if let Some(w) = size_warning(meta, calls, window, viewer, limit) {
        eprintln!("{w}");
    }
}

/// Overrides the memory above which a view that holds every call it shows
/// says so before it starts (bytes).
const MEMORY_ENV: &str = "FGTRACE_MEMORY_WARN_BYTES";

/// The memory above which a view that holds every call it shows says so:
/// [`MEMORY_WARN_BYTES`], or `FGTRACE_MEMORY_WARN_BYTES`.
pub fn memory_limit() -> u64 {
    std::env::var(MEMORY_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(MEMORY_WARN_BYTES)
}

/// One line on stderr, before anything is read, when `what` (a view that
/// holds every call it shows) will take more memory than [`MEMORY_WARN_BYTES`]
/// for the calls in `threads` and `window`, naming the flags that bound it.
fn warn_memory(
    meta: &TraceMeta,
    threads: &[ThreadSel],
    window: &Window,
    what: &str,
    per_call: u64,
) {
    let limit = memory_limit();
    let calls = estimate(meta, threads, window);
    if let Some(w) = memory_warning(meta, calls, window, what, per_call, limit) {
        eprintln!("{w}");
    }
}

/// The flags the timeline exports share (`fgtrace chrome`, `fgtrace perfetto`).
#[derive(clap::Args)]
pub struct ExportArgs {
    /// Trace file written by `Trace::save`.
    file: PathBuf,
    /// Only these threads (tid, or name glob); repeat for several.
    #[arg(long = "thread", short = 't')]
    threads: Vec<String>,
    /// Leave the samples out.
    #[arg(long)]
    no_samples: bool,
    /// Leave the async futures out.
    #[arg(long)]
    no_futures: bool,
    /// Leave the off-CPU tracks out.
    #[arg(long)]
    no_offcpu: bool,
    #[command(flatten)]
    window: WindowArgs,
    /// Write here instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ChromeArgs {
    #[command(flatten)]
    export: ExportArgs,
}

#[derive(clap::Args)]
#[command(
    mut_arg("no_futures", |a| a.help("Leave the async futures' tracks out")),
    mut_arg("output", |a| a.help("Write here instead of stdout (never to a terminal)"))
)]
pub struct PerfettoArgs {
    #[command(flatten)]
    export: ExportArgs,
}

#[derive(clap::Args)]
pub struct FirefoxArgs {
    /// Trace file written by `Trace::save`.
    file: PathBuf,
    /// Only these threads (tid, or name glob); repeat for several.
    #[arg(long = "thread", short = 't')]
    threads: Vec<String>,
    /// Plain JSON instead of gzip.
    #[arg(long)]
    json: bool,
    /// Leave the off-CPU markers out.
    #[arg(long)]
    no_offcpu: bool,
    #[command(flatten)]
    window: WindowArgs,
    /// Write here instead of stdout (never gzip to a terminal).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct DiffArgs {
    /// The "before" trace.
    before: PathBuf,
    /// The "after" trace.
    after: PathBuf,
    /// Sort by the absolute change of: total, self, calls; or by name.
    #[arg(long, short = 's', default_value = "total")]
    sort: String,
    /// Only these threads (tid, or name glob), in both traces.
    #[arg(long = "thread", short = 't')]
    threads: Vec<String>,
    /// Draw a differential flamegraph (SVG) of traced self time instead of the table.
    #[arg(long, conflicts_with = "folded")]
    flame: bool,
    /// Print the differential folded stacks (`stack before after`) instead of the table.
    #[arg(long)]
    folded: bool,
    /// CI gate: exit non-zero when a function's metric grew by more than this:
    /// `10%` for every function, `parse=5%` for one (repeatable; the last
    /// limit naming a function wins over the one for all).
    #[arg(long = "fail-above", value_name = "[FUNCTION=]PCT")]
    fail_above: Vec<String>,
    /// What the gate compares: total, self, calls, allocs, alloc_bytes, instructions.
    #[arg(long, default_value = "total")]
    metric: String,
    /// Output: table or json.
    #[arg(long, default_value = "table")]
    format: String,
    /// Write here instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: Option<PathBuf>,
}

/// Opens `-o` (or returns `stdout`); an SVG is not written to a terminal.
fn output<'w>(
    path: Option<&Path>,
    stdout: &'w mut dyn Write,
    svg: bool,
) -> Result<Box<dyn Write + 'w>, Option<String>> {
    match path {
        Some(p) => {
            let f =
                File::create(p).map_err(|e| Some(format!("cannot create {}: {e}", p.display())))?;
            Ok(Box::new(io::BufWriter::new(f)))
        }
        None if svg && io::stdout().is_terminal() => Err(Some(
            "refusing to write an SVG to the terminal: give -o FILE.svg (or --folded)".into(),
        )),
        None => Ok(Box::new(stdout)),
    }
}

fn write_err(path: Option<&Path>, e: io::Error) -> Option<String> {
    match (path, e.kind()) {
        (None, io::ErrorKind::BrokenPipe) => None,
        (Some(p), _) => Some(format!("cannot write {}: {e}", p.display())),
        (None, _) => Some(format!("cannot write the output: {e}")),
    }
}

/// Once per combined view: samples were not joined and the program's file
/// has no line tables, or no frame pointers, which is what the join needed;
/// names the fix.
fn note_missing_debug_lines(sym: &mut Symbolizer, meta: &TraceMeta, s: &FoldedSummary) {
    if s.unmatched == 0 {
        return;
    }
    let Some(path) = sym.program_file(&meta.program).map(str::to_owned) else {
        return;
    };
    // `None`: the file cannot be read, which `warn_symbols` reports.
    let Some(has_lines) = sym.debug_lines(&path) else {
        return;
    };
    if let Some(note) = missing_debug_lines_note(&path, has_lines, s.unmatched, s.samples) {
        eprintln!("fgtrace: {note}");
    }
    // Samples the recorder unwound through `.eh_frame` need no frame pointers.
    let unwound = meta
        .sampler
        .as_deref()
        .and_then(eh_frame_unwinding)
        .is_some_and(|(_, copied)| copied > 0);
    if let Some(fp) = sym.frame_pointers(&path) {
        if let Some(note) = missing_frame_pointers_note(&path, fp, unwound, s.unmatched, s.samples)
        {
            eprintln!("fgtrace: {note}");
        }
    }
}

fn warn_symbols(sym: &Symbolizer) {
    for w in sym.warnings() {
        eprintln!("fgtrace: warning: {w}");
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Traced,
    Sampled,
    Combined,
}

fn kind(a: &FlameArgs, meta: &TraceMeta) -> Kind {
    if a.traced || a.chart {
        return Kind::Traced;
    }
    if a.sampled {
        return Kind::Sampled;
    }
    if a.combined {
        return Kind::Combined;
    }
    let samples: u64 = meta.total_samples();
    // Counts in the metadata, else what it declares (sites, a sampling setup).
    let calls = meta.total_calls() > 0 || !meta.sites.is_empty();
    match (calls, samples > 0 || meta.sampling.is_some()) {
        (true, true) => Kind::Combined,
        (false, true) => Kind::Sampled,
        _ => Kind::Traced,
    }
}

pub fn run_flame(a: &FlameArgs, mut stdout: impl Write) -> Result<(), Option<String>> {
    if a.offcpu {
        return run_offcpu_flame(a, stdout);
    }
    let files: Vec<PathBuf> = std::iter::once(a.file.clone())
        .chain(a.more.iter().cloned())
        .collect();
    if files.len() > 1 && (a.sampled || a.combined) {
        return Err(Some(
            "several files merge their traced calls only: samples of different processes \
             cannot be symbolized together (drop --sampled/--combined, or read one file)"
                .into(),
        ));
    }
    let input = crate::inputs::open_inputs(&files)?;
    let meta = input.meta;
    let source = input.source;
    let kind = if input.merged {
        Kind::Traced
    } else {
        kind(a, &meta)
    };
    let fopts = FoldedOptions {
        per_thread: a.per_thread,
        threads: threads(&a.threads),
        short_names: a.short_names,
        trust_shadow_depth: !a.by_time,
        sample_period_ns: None,
    };
    let name = input
        .label
        .file_name()
        .unwrap_or(input.label.as_os_str())
        .to_string_lossy()
        .into_owned();
    let what = match (kind, a.chart) {
        (_, true) => "Flame chart (traced)",
        (Kind::Traced, _) => "Flame graph (traced)",
        (Kind::Sampled, _) => "Flame graph (sampled)",
        (Kind::Combined, _) => "Flame graph (traced + sampled)",
    };
    let mut flame = FlameOptions {
        title: a.title.clone().unwrap_or_else(|| format!("{what}: {name}")),
        width: a.width,
        inverted: a.inverted,
        ..FlameOptions::default()
    };
    let read: Result<(), TraceError>;
    if a.chart {
        let window = a.window.window()?;
        let (what, per_call) = if a.folded {
            ("the flame chart", CHART_FOLDED_MEMORY_PER_CALL)
        } else {
            ("the flame chart's SVG", CHART_SVG_MEMORY_PER_CALL)
        };
        warn_memory(&meta, &fopts.threads, &window, what, per_call);
        let mut b = ChartBuilder::new(&meta, &fopts).window(window);
        read = b.extend(source.events());
        let chart = b.finish();
        let draw = |svg: &mut Vec<u8>| {
            flame.count_name = "ns".into();
            let since = match window.from_ns {
                Some(f) if f > 0 => format!("--from ({})", human_duration(f)),
                _ => "session start".into(),
            };
            flame.subtitle = Some(format!(
                "{} calls, time order per thread, x = ns since {since}",
                chart.summary().calls
            ));
            chart_svg(&chart, &meta, &flame, svg)
        };
        let damaged = read.as_ref().err();
        write_flame(a, &mut stdout, damaged, |out| chart.write_to(out), draw)?;
    } else {
        let mut sym = Symbolizer::new(&meta.mappings);
        let folded: Folded;
        match kind {
            Kind::Traced => {
                (folded, read) = match source {
                    crate::inputs::InputEvents::One(r) => {
                        FoldedBuilder::traced_from_reader(&meta, &fopts, *r)
                    }
                    crate::inputs::InputEvents::Merged(e) => {
                        FoldedBuilder::traced_on_cores(&meta, &fopts, e)
                    }
                };
            }
            Kind::Sampled | Kind::Combined => {
                // One file (several are refused above): its threads are read
                // on every core, the symbolizer shared between them.
                let shared = std::sync::Mutex::new(sym);
                (folded, read) = match (source, kind) {
                    (crate::inputs::InputEvents::One(r), Kind::Sampled) => {
                        FoldedBuilder::sampled_from_reader(&meta, &fopts, *r, &shared)
                    }
                    (crate::inputs::InputEvents::One(r), _) => {
                        FoldedBuilder::combined_from_reader(&meta, &fopts, *r, &shared)
                    }
                    (merged, _) => {
                        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                        let mut b = match kind {
                            Kind::Sampled => FoldedBuilder::sampled(&meta, &fopts, &mut *s),
                            _ => FoldedBuilder::combined(&meta, &fopts, &mut *s),
                        };
                        let read = b.extend(merged.events());
                        (b.finish(), read)
                    }
                };
                sym = shared.into_inner().unwrap_or_else(|e| e.into_inner());
                if kind == Kind::Combined {
                    note_missing_debug_lines(&mut sym, &meta, folded.summary());
                }
            }
        }
        warn_symbols(&sym);
        let draw = |svg: &mut Vec<u8>| {
            flame.count_name = folded.count_name().into();
            flame.subtitle = Some(folded.subtitle());
            folded_svg(&folded, &flame, svg)
        };
        let damaged = read.as_ref().err();
        write_flame(a, &mut stdout, damaged, |out| folded.write_to(out), draw)?;
    }
    read.map_err(|e| io_err(&input.label, e))
}

/// `fgtrace flame --offcpu`: one library builder, then folded text or an SVG.
fn run_offcpu_flame(a: &FlameArgs, mut stdout: impl Write) -> Result<(), Option<String>> {
    if !a.more.is_empty() {
        return Err(Some(
            "--offcpu reads one file (off-CPU time is not merged)".into(),
        ));
    }
    let r = open_trace(&a.file)?;
    let meta = r.meta().clone();
    let opts = OffCpuFoldedOptions {
        per_thread: a.per_thread,
        threads: threads(&a.threads),
        short_names: a.short_names,
        blocked_only: a.blocked_only,
    };
    let mut b = OffCpuFoldedBuilder::new(&meta, &opts)
        .map_err(|e| Some(format!("{}: {e}", a.file.display())))?;
    let read = b.extend(r.events());
    let (lines, summary) = b.finish();
    let draw = |svg: &mut Vec<u8>| {
        let name = a
            .file
            .file_name()
            .unwrap_or(a.file.as_os_str())
            .to_string_lossy();
        let mut flame = FlameOptions {
            title: a
                .title
                .clone()
                .unwrap_or_else(|| format!("Off-CPU flame graph: {name}")),
            width: a.width,
            inverted: a.inverted,
            count_name: "ns".into(),
            subtitle: Some(summary.subtitle(a.blocked_only)),
            ..FlameOptions::default()
        };
        flame
            .frame_colors
            .insert(offcpu_view::BLOCKED.into(), [70, 110, 220]);
        flame
            .frame_colors
            .insert(offcpu_view::PREEMPTED.into(), [230, 150, 40]);
        let lines = lines.iter().map(|(s, n)| format!("{s} {n}"));
        render_svg(lines, &flame, svg)
    };
    let damaged = read.as_ref().err();
    write_flame(
        a,
        &mut stdout,
        damaged,
        |out| write_offcpu_folded(&lines, out),
        draw,
    )?;
    read.map_err(|e| io_err(&a.file, e))
}

/// `-o` or stdout: the folded text (`--folded`), else the SVG `draw`
/// renders; with nothing to draw, says so (unless the trace was damaged,
/// whose error says more).
fn write_flame(
    a: &FlameArgs,
    stdout: &mut dyn Write,
    damaged: Option<&TraceError>,
    folded: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    draw: impl FnOnce(&mut Vec<u8>) -> Result<(), fgtrace_view::flame::FlameError>,
) -> Result<(), Option<String>> {
    let path = a.output.as_deref();
    let mut out = output(path, stdout, !a.folded)?;
    if a.folded {
        return folded(&mut out).map_err(|e| write_err(path, e));
    }
    let mut svg = Vec::new();
    match draw(&mut svg) {
        Ok(()) => out
            .write_all(&svg)
            .and_then(|()| out.flush())
            .map_err(|e| write_err(path, e)),
        Err(_) if damaged.is_some() => Ok(()),
        Err(e) => Err(Some(format!("{}: {e}", a.file.display()))),
    }
}

pub fn run_chrome(a: &ChromeArgs, stdout: impl Write) -> Result<(), Option<String>> {
    let a = &a.export;
    let opts = ChromeOptions {
        threads: threads(&a.threads),
        samples: !a.no_samples,
        futures: !a.no_futures,
        off_cpu: !a.no_offcpu,
        window: a.window.window()?,
    };
    run_export(a, stdout, None, Viewer::Chrome, |meta, r, sym, out| {
        write_chrome(meta, r.events(), sym, &opts, out).map(drop)
    })
}

pub fn run_perfetto(a: &PerfettoArgs, stdout: impl Write) -> Result<(), Option<String>> {
    let a = &a.export;
    let opts = PerfettoOptions {
        threads: threads(&a.threads),
        samples: !a.no_samples,
        futures: !a.no_futures,
        off_cpu: !a.no_offcpu,
        window: a.window.window()?,
    };
    let refuse = "refusing to write protobuf to the terminal: give -o FILE.pftrace";
    run_export(
        a,
        stdout,
        Some(refuse),
        Viewer::Perfetto,
        |meta, r, sym, out| write_perfetto(meta, r.events(), sym, &opts, out).map(drop),
    )
}

/// One timeline export of `a.file` to `-o` or stdout; `refuse_terminal`: the
/// error when stdout is a terminal and the format is binary.
fn run_export(
    a: &ExportArgs,
    mut stdout: impl Write,
    refuse_terminal: Option<&str>,
    viewer: Viewer,
    write: impl FnOnce(
        &TraceMeta,
        super::progress::Reader,
        &mut Symbolizer,
        Box<dyn Write + '_>,
    ) -> Result<(), TraceError>,
) -> Result<(), Option<String>> {
    let r = open_trace(&a.file)?;
    let meta = r.meta().clone();
    let mut sym = Symbolizer::new(&meta.mappings);
    if let Some(why) = refuse_terminal {
        if a.output.is_none() && io::stdout().is_terminal() {
            return Err(Some(why.into()));
        }
    }
    warn_size(&meta, &threads(&a.threads), &a.window.window()?, viewer);
    let out = output(a.output.as_deref(), &mut stdout, false)?;
    let res = write(&meta, r, &mut sym, out);
    warn_symbols(&sym);
    match res {
        Ok(()) => Ok(()),
        Err(TraceError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => Err(None),
        Err(e) => Err(io_err(&a.file, e)),
    }
}

pub fn run_firefox(a: &FirefoxArgs, mut stdout: impl Write) -> Result<(), Option<String>> {
    let r = open_trace(&a.file)?;
    let meta = r.meta().clone();
    let opts = FirefoxOptions {
        threads: threads(&a.threads),
        gzip: !a.json,
        off_cpu: !a.no_offcpu,
        window: a.window.window()?,
    };
    let mut sym = Symbolizer::new(&meta.mappings);
    if a.output.is_none() && !a.json && io::stdout().is_terminal() {
        return Err(Some(
            "refusing to write gzip to the terminal: give -o FILE.json.gz (or --json)".into(),
        ));
    }
    warn_size(&meta, &opts.threads, &opts.window, Viewer::Firefox);
    warn_memory(
        &meta,
        &opts.threads,
        &opts.window,
        "the Firefox export",
        FIREFOX_MEMORY_PER_CALL,
    );
    let out = output(a.output.as_deref(), &mut stdout, false)?;
    let res = write_firefox(&meta, r.events(), &mut sym, &opts, out);
    warn_symbols(&sym);
    match res {
        Ok(_) => Ok(()),
        Err(TraceError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => Err(None),
        Err(e) => Err(io_err(&a.file, e)),
    }
}

pub fn run_diff(a: &DiffArgs, mut stdout: impl Write) -> Result<(), Option<String>> {
    let sort: DiffSort = a.sort.parse().map_err(|e| Some(format!("--sort: {e}")))?;
    let metric: Metric = a
        .metric
        .parse()
        .map_err(|e| Some(format!("--metric: {e}")))?;
    let limits = a
        .fail_above
        .iter()
        .map(|l| l.parse::<Limit>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Some(format!("--fail-above: {e}")))?;
    let json = match a.format.as_str() {
        "table" => false,
        "json" => true,
        f => {
            return Err(Some(format!(
                "--format: unknown format `{f}` (table, json)"
            )))
        }
    };
    if (json || !limits.is_empty()) && (a.flame || a.folded) {
        return Err(Some(
            "--fail-above and --format json go with the table, not --flame/--folded".into(),
        ));
    }
    // Both files are opened (and a recorded file's calls rebuilt) at once.
    // Each file gets half the cores, to be opened and then read with.
    let (ra, rb) = parallel::both(|| open_trace(&a.before), || open_trace(&a.after));
    let (ra, rb) = (ra?, rb?);
    let (ma, mb) = (ra.meta().clone(), rb.meta().clone());
    let (mut err_a, mut err_b) = (None, None);
    let path = a.output.as_deref();
    if a.flame || a.folded {
        let fopts = FoldedOptions {
            threads: threads(&a.threads),
            ..FoldedOptions::default()
        };
        // Each file's threads, if recorded, are read apart on its cores.
        let ((before, read_a), (after, read_b)) = parallel::both(
            || FoldedBuilder::traced_from_reader(&ma, &fopts, ra),
            || FoldedBuilder::traced_from_reader(&mb, &fopts, rb),
        );
        (err_a, err_b) = (read_a.err(), read_b.err());
        let mut out = output(path, &mut stdout, a.flame)?;
        if a.folded {
            differential_folded(&before, &after, &mut out).map_err(|e| write_err(path, e))?;
        } else {
            let name = |p: &Path| {
                p.file_name()
                    .unwrap_or(p.as_os_str())
                    .to_string_lossy()
                    .into_owned()
            };
            let opts = FlameOptions {
                title: format!(
                    "Differential flame graph: {} -> {}",
                    name(&a.before),
                    name(&a.after)
                ),
                subtitle: Some(
                    "traced self time; widths from the second trace, red grew, blue shrank".into(),
                ),
                count_name: "ns".into(),
                ..FlameOptions::default()
            };
            let mut svg = Vec::new();
            match differential_svg(&before, &after, &opts, &mut svg) {
                Ok(()) => out
                    .write_all(&svg)
                    .and_then(|()| out.flush())
                    .map_err(|e| write_err(path, e))?,
                Err(_) if err_a.is_some() || err_b.is_some() => {}
                Err(e) => {
                    return Err(Some(format!(
                        "{} vs {}: {e}",
                        a.before.display(),
                        a.after.display()
                    )))
                }
            }
        }
    } else {
        let opts = DiffOptions {
            sort,
            threads: threads(&a.threads),
        };
        let mut out = output(path, &mut stdout, false)?;
        let (d, failed) = diff_readers(&ma, ra, &mb, rb, &opts);
        let gate = (!limits.is_empty()).then(|| d.gate(metric, &limits));
        let written = if json {
            d.write_json(gate.as_ref(), &mut out)
        } else {
            d.write(&mut out)
                .and_then(|()| gate.as_ref().map_or(Ok(()), |g| g.write(&mut out)))
        };
        written.map_err(|e| write_err(path, e))?;
        if let Some(e) = failed {
            return Err(match e {
                TraceError::Io(e) => write_err(path, e),
                e => Some(e.to_string()),
            });
        }
        if let Some(g) = gate.filter(|g| !g.passed()) {
            if err_a.is_none() && err_b.is_none() {
                let bad = g.rows.iter().filter(|r| r.regressed).count();
                return Err(Some(if g.unavailable {
                    format!("gate failed: the traces have no {} figures", a.metric)
                } else if !g.unmatched.is_empty() {
                    format!(
                        "gate failed: no function in both traces matches {}",
                        g.unmatched
                            .iter()
                            .map(|u| format!("`{u}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                } else {
                    format!(
                        "gate failed: {bad} function{} regressed beyond {} (see the table above)",
                        if bad == 1 { "" } else { "s" },
                        a.fail_above.join(", ")
                    )
                }));
            }
        }
    }
    if let Some(e) = err_a {
        return Err(io_err(&a.before, e));
    }
    if let Some(e) = err_b {
        return Err(io_err(&a.after, e));
    }
    Ok(())
}
