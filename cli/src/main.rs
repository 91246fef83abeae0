//! The `fgtrace` command: reads saved traces (and Zephyr dumps) and renders
//! them. A thin layer: parse flags into the library's option structs, stream
//! the file through a view, print one clear line on error.

mod board;
mod control;
mod gdb;
mod html;
mod inputs;
#[cfg(unix)]
mod launch;
mod plot;
mod pprof;
mod progress;
#[cfg(unix)]
mod received;
mod rtt;
mod session;
mod views;
mod zephyr;

use clap::{Parser, Subcommand};
use fgtrace_trace::TraceError;
use fgtrace_view as view;
use fgtrace_view::human::human_duration;
use fgtrace_view::{
    self, Column, GraphOptions, ReportOptions, ReportStyle, ThreadColumn, ThreadSel,
};
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "fgtrace",
    version,
    about = "Function-graph tracer and stack sampler for Rust: views over saved traces",
    after_help = "Examples:\n  \
        fgtrace graph run.fgt                     ftrace function_graph text\n  \
        fgtrace graph run.fgt --thread worker-1 --depth 3 --tail\n  \
        fgtrace report run.fgt --sort self        per-function statistics\n  \
        fgtrace info run.fgt                      what the trace holds\n  \
        fgtrace flame run.fgt -o run.svg          flamegraph: traced + sampled\n  \
        fgtrace chrome run.fgt -o run.json        for Perfetto UI\n  \
        fgtrace perfetto run.fgt -o run.pftrace   native Perfetto (ui.perfetto.dev)\n  \
        fgtrace firefox run.fgt -o run.json.gz    Firefox Profiler (profiler.firefox.com)\n  \
        fgtrace diff before.fgt after.fgt         per-function changes\n  \
        fgtrace pprof run.fgt -o run.pb.gz        samples for go tool pprof\n  \
        fgtrace plot run.fgt -f parse -o p.svg    per-call durations, slowest calls\n  \
        fgtrace html run.fgt -o report.html       everything in one page\n  \
        fgtrace zephyr perf_data.txt zephyr.elf   Zephyr perf dump -> folded stacks\n  \
        fgtrace board -o run.fgt --elf fw.elf -- qemu-system-riscv64 ...   a board's stream\n  \
        fgtrace record -o run.fgt -- ./my_program     a program, from start to exit\n  \
        fgtrace record --pid 4242 --duration 2s -o run.fgt     a running process (FGTRACE_CONTROL=1)\n  \
        fgtrace ctl 4242 dump -o last.fgt          its flight recorder, on demand\n  \
        fgtrace ps                                processes that can be controlled"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the function graph in ftrace's function_graph format.
    #[command(
        after_help = "Examples:\n  fgtrace graph run.fgt\n  fgtrace graph run.fgt --abstime --proc --tail\n  \
        fgtrace graph run.fgt --thread 4242 --thresh 100us"
    )]
    Graph(GraphArgs),
    /// Per-function statistics: calls, total, self, avg, min, max, p50, p99, s^2.
    #[command(
        after_help = "Examples:\n  fgtrace report run.fgt\n  fgtrace report run.fgt --sort calls\n  \
        fgtrace report run.fgt --ftrace --thread main\n  \
        fgtrace report run.fgt --long-poll 2ms       polls that held their thread over 2 ms\n  \
        fgtrace report traces/*.fgt                  several traces merged per function"
    )]
    Report(ReportArgs),
    /// Summary of a trace: program, clock, threads, calls, losses (in constant time where the file has its summary).
    #[command(after_help = "Examples:\n  fgtrace info run.fgt\n  \
        fgtrace info --check run.fgt > /dev/null && echo intact   reads every chunk")]
    Info {
        /// Trace file written by `Trace::save`.
        file: PathBuf,
        /// Also read every event, so damage anywhere is found.
        #[arg(long)]
        check: bool,
    },
    /// Zephyr `perf printbuf` dump + ELF -> folded stacks or a flamegraph.
    #[command(
        after_help = "Examples:\n  fgtrace zephyr perf_data.txt build/zephyr/zephyr.elf > out.folded\n  \
        fgtrace zephyr perf_data.txt zephyr.elf --inline --svg perf.svg\n  \
        fgtrace zephyr - zephyr.elf --aggregate < console.log"
    )]
    Zephyr(zephyr::ZephyrArgs),
    /// Flamegraph SVG or folded stacks: traced (exact ns), sampled, or combined.
    #[command(
        after_help = "Examples:\n  fgtrace flame run.fgt -o run.svg              combined if the trace has samples\n  \
        fgtrace flame run.fgt --traced --folded       folded stacks, ns of self time\n  \
        fgtrace flame run.fgt --chart -o chart.svg    time order per thread\n  \
        fgtrace flame run.fgt --sampled --per-thread -o samples.svg"
    )]
    Flame(views::FlameArgs),
    /// Chrome Trace Event JSON for Perfetto UI and chrome://tracing.
    #[command(after_help = "Examples:\n  fgtrace chrome run.fgt -o run.json\n  \
        fgtrace chrome run.fgt --thread worker-* --no-samples -o workers.json")]
    Chrome(views::ChromeArgs),
    /// Native Perfetto protobuf: thread tracks, a track per future, counters, samples, losses.
    #[command(
        after_help = "Examples:\n  fgtrace perfetto run.fgt -o run.pftrace     open in ui.perfetto.dev\n  \
        fgtrace perfetto run.fgt --thread worker-* --no-samples -o workers.pftrace\n  \
        fgtrace perfetto run.fgt --from 1.5s --to 2s --min-duration 10us -o part.pftrace"
    )]
    Perfetto(views::PerfettoArgs),
    /// The Firefox Profiler's processed format, gzipped: samples, calls as markers, futures.
    #[command(
        after_help = "Examples:\n  fgtrace firefox run.fgt -o run.json.gz      open in profiler.firefox.com\n  \
        fgtrace firefox run.fgt --json -o run.json"
    )]
    Firefox(views::FirefoxArgs),
    /// Compare two traces per function (calls, total, self); --flame for a differential flamegraph.
    #[command(after_help = "Examples:\n  fgtrace diff before.fgt after.fgt\n  \
        fgtrace diff before.fgt after.fgt --sort self\n  \
        fgtrace diff before.fgt after.fgt --flame -o diff.svg")]
    Diff(views::DiffArgs),
    /// The samples as a gzipped pprof profile (profile.proto), symbolized.
    #[command(
        after_help = "Examples:\n  fgtrace pprof run.fgt -o run.pb.gz && go tool pprof -top run.pb.gz\n  \
        fgtrace pprof run.fgt --thread worker-* -o workers.pb.gz"
    )]
    Pprof(pprof::PprofArgs),
    /// One function's per-call durations (SVG: by start time, histogram with p50/p99); slowest calls on stdout.
    #[command(
        after_help = "Examples:\n  fgtrace plot run.fgt --function parse -o parse.svg\n  \
        fgtrace plot run.fgt -f my_crate::parser::Parser::parse --top 20 -o parse.svg\n  \
        fgtrace plot run.fgt -f handle --thread worker-* -o handle.svg"
    )]
    Plot(plot::PlotArgs),
    /// Decode a board's stream (bare-metal firmware with fgtrace-board) into traces.
    #[command(
        after_help = "Examples:\n  fgtrace board -o run.fgt --elf fw.elf -c 'record 0 2000' -- \\\n              qemu-system-riscv64 -machine virt -bios none -display none -monitor none -serial stdio -kernel fw.elf\n          fgtrace board -o run.fgt --elf fw.elf -c 'record 2000 999' /dev/ttyUSB0\n          fgtrace board -o run.fgt --elf fw.elf --tcp 127.0.0.1:4444\n          fgtrace board -o run.fgt --elf fw.elf capture.bin"
    )]
    Board(board::BoardArgs),
    /// One self-contained HTML page: summary, sortable table, flamegraph, duration plots, graph.
    #[command(after_help = "Examples:\n  fgtrace html run.fgt -o report.html\n  \
        fgtrace html run.fgt --thread worker-* --rows 50 -o workers.html")]
    Html(html::HtmlArgs),
    /// Record a command from its start to its exit, or a running process that listens for control (FGTRACE_CONTROL=1).
    #[command(
        after_help = "Examples:\n  fgtrace record -o run.fgt -- ./target/release/my_program args\n  \
        fgtrace record --dir traces -- cargo test     one trace per test binary\n  \
        fgtrace record --sample timer:999 --offcpu -- ./my_server\n  \
        fgtrace record --pid 4242 --duration 2s -o run.fgt\n  \
        fgtrace record -p 4242 --sample timer:999 --filter 'parse*'     until Ctrl-C\n  \
        fgtrace record -p 4242 -d 500ms --flight 10000 -o last.fgt"
    )]
    Record(control::RecordArgs),
    /// Control a running process: status, start/stop a background session, dump its flight recorder.
    #[command(after_help = "Examples:\n  fgtrace ctl 4242 status\n  \
        fgtrace ctl 4242 start --flight 100000      a flight recorder that runs until stop\n  \
        fgtrace ctl 4242 dump -o last.fgt          its last calls per thread, still running\n  \
        fgtrace ctl 4242 stop -o run.fgt")]
    Ctl(control::CtlArgs),
    /// List the processes that can be controlled (stale sockets of dead processes are removed).
    Ps,
}

#[derive(clap::Args)]
struct GraphArgs {
    /// Trace file written by `Trace::save`.
    file: PathBuf,
    /// Only these threads (tid, or name glob); repeat for several.
    #[arg(long = "thread", short = 't')]
    threads: Vec<String>,
    /// Hide calls at depth >= N (0 = all).
    #[arg(long, short = 'D', default_value_t = 0)]
    depth: u32,
    /// Only calls lasting at least this long, printed as ftrace's tracing_thresh does (e.g. 100us).
    #[arg(long, value_parser = parse_duration)]
    thresh: Option<u64>,
    /// Print `} /* name */` on every exit (funcgraph-tail).
    #[arg(long)]
    tail: bool,
    /// Absolute time column, seconds since session start (funcgraph-abstime).
    #[arg(long)]
    abstime: bool,
    /// `name-tid` column (funcgraph-proc).
    #[arg(long)]
    proc: bool,
    /// Show thread indexes instead of OS thread ids in the first column.
    #[arg(long)]
    thread_index: bool,
    /// Off-CPU time (ftrace's nosleep-time): DURATION is on-CPU time, and a
    /// call that was switched out ends in `/* wall, off-CPU (blocked, preempted) */`.
    #[arg(long)]
    offcpu: bool,
    /// Tag polls longer than this `[long poll]` (they held their thread); `off`: no tag.
    #[arg(long, value_name = "DURATION|off", default_value = "10ms", value_parser = parse_long_poll)]
    long_poll: LongPoll,
}

#[derive(clap::Args)]
struct ReportArgs {
    /// Trace file(s); several are merged per function (a whole test suite's, from `record --dir`).
    #[arg(required = true, num_args = 1..)]
    files: Vec<PathBuf>,
    /// Sort by: calls, total, self, avg, min, max, p50, p99, s2, oncpu, offcpu, name.
    #[arg(long, short = 's', default_value = "total")]
    sort: String,
    /// Reverse the order.
    #[arg(long, short = 'r')]
    reverse: bool,
    /// Only these threads (tid, or name glob); repeat for several.
    #[arg(long = "thread", short = 't')]
    threads: Vec<String>,
    /// ftrace's trace_stat/function layout (Function, Hit, Time, Avg, s^2).
    #[arg(long)]
    ftrace: bool,
    /// Output: table, ftrace (as --ftrace) or json (every field, durations in ns).
    #[arg(long, default_value = "table")]
    format: String,
    /// Group one function's calls by a value it records (`#[traced(values(len = ..))]`,
    /// or `ret`): a row per distinct value, or per power-of-two bucket when there are many.
    #[arg(long = "by", value_name = "VALUE")]
    by: Option<String>,
    /// With --by: the function (display name or full path), when several record the value.
    #[arg(long = "function", short = 'f', requires = "by")]
    function: Option<String>,
    /// List the polls longer than this, with their future, thread and the
    /// calls inside (they held their thread); `off`: none.
    #[arg(long, value_name = "DURATION|off", default_value = "10ms", value_parser = parse_long_poll)]
    long_poll: LongPoll,
}

/// `--long-poll`: a threshold in nanoseconds, or `None` (`off`).
#[derive(Clone, Copy, Debug)]
struct LongPoll(Option<u64>);

fn parse_long_poll(s: &str) -> Result<LongPoll, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(LongPoll(None));
    }
    parse_duration(s)
        .map(|ns| LongPoll(Some(ns)))
        .map_err(|e| format!("{e} (or `off`)"))
}

fn parse_duration(s: &str) -> Result<u64, String> {
    fgtrace::config::parse_duration(s).map(|d| d.as_nanos() as u64)
}

fn threads(v: &[String]) -> Vec<ThreadSel> {
    v.iter().map(|s| s.parse().expect("infallible")).collect()
}

fn open_trace(path: &Path) -> Result<progress::Reader, String> {
    progress::open_with_bar(path, None).map_err(|e| match e {
        TraceError::Io(e) => format!("{}: {}", path.display(), e),
        e => format!("{}: {}", path.display(), e),
    })
}

/// A write to a closed pipe (`fgtrace graph x | head`) ends quietly.
fn io_err(path: &Path, e: TraceError) -> Option<String> {
    match e {
        TraceError::Io(e) if e.kind() == io::ErrorKind::BrokenPipe => None,
        e => Some(format!("{}: {}", path.display(), e)),
    }
}

fn run(cli: Cli) -> Result<(), Option<String>> {
    let stdout = io::stdout();
    let out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
    // Streamed text on the terminal would interleave with the bar.
    let streams = matches!(cli.cmd, Cmd::Graph(_) | Cmd::Chrome(_));
    progress::set_enabled(!(streams && io::stdout().is_terminal()));
    match cli.cmd {
        Cmd::Graph(a) => {
            let r = open_trace(&a.file)?;
            let meta = r.meta().clone();
            let opts = GraphOptions {
                thread_column: if a.thread_index {
                    ThreadColumn::Index
                } else {
                    ThreadColumn::Tid
                },
                proc: a.proc,
                abstime: a.abstime,
                tail: a.tail,
                threads: threads(&a.threads),
                max_depth: a.depth,
                thresh_ns: a.thresh.unwrap_or(0),
                off_cpu: a.offcpu,
                long_poll_ns: a.long_poll.0,
                // An `async fn`'s values go on its polls: a first pass over
                // the file finds them (only when there are any).
                poll_values: if view::graph::PollValues::wanted(&meta) {
                    Some(std::sync::Arc::new(view::graph::PollValues::collect(
                        &meta,
                        open_trace(&a.file)?.events(),
                    )))
                } else {
                    None
                },
                ..GraphOptions::default()
            };
            view::write_graph(&meta, r.events(), &opts, out).map_err(|e| io_err(&a.file, e))
        }
        Cmd::Report(a) => {
            let sort_by: Column = a.sort.parse().map_err(|e| Some(format!("--sort: {e}")))?;
            let input = inputs::open_inputs(&a.files)?;
            let meta = input.meta;
            if let Some(value) = &a.by {
                let opts = view::by_value::ByValueOptions {
                    value: value.clone(),
                    function: a.function.clone(),
                    threads: threads(&a.threads),
                    max_rows: 0,
                };
                return view::by_value::write_by_value(&meta, input.source.events(), &opts, out)
                    .map_err(|e| match e {
                        view::by_value::ByValueError::Trace(e) => io_err(&input.label, e),
                        view::by_value::ByValueError::Io(e)
                            if e.kind() == io::ErrorKind::BrokenPipe =>
                        {
                            None
                        }
                        e => Some(format!("{}: {e}", input.label.display())),
                    });
            }
            let opts = ReportOptions {
                sort_by,
                reverse: a.reverse,
                threads: threads(&a.threads),
                long_poll_ns: a.long_poll.0,
                style: match (a.ftrace, a.format.as_str()) {
                    (true, "table" | "ftrace") | (false, "ftrace") => ReportStyle::Ftrace,
                    (false, "table") => ReportStyle::Table,
                    (false, "json") => ReportStyle::Json,
                    (true, _) => return Err(Some("--ftrace and --format json conflict".into())),
                    (_, f) => {
                        return Err(Some(format!(
                            "--format: unknown format `{f}` (table, ftrace, json)"
                        )))
                    }
                },
            };
            let mut out = out;
            match input.source {
                inputs::InputEvents::One(r) => view::write_report_from(&meta, *r, &opts, &mut out),
                inputs::InputEvents::Merged(e) => view::write_report(&meta, e, &opts, &mut out),
            }
            .map_err(|e| io_err(&input.label, e))?;
            if opts.style == ReportStyle::Json || input.merged {
                // Samples are not part of the JSON report, nor of a merge
                // (each process's addresses are its own).
                return Ok(());
            }
            pprof::report_samples(&input.label, &meta, &opts, out)
        }
        Cmd::Info { file, check } => {
            if check {
                let r = open_trace(&file)?;
                let meta = r.meta().clone();
                info(&file, &meta, Some(r), out).map_err(|e| io_err(&file, e))
            } else {
                // The summary the file keeps (a saved file's header, a
                // recording's footer): constant time on any size of file.
                let (meta, from) = fgtrace_trace::file::read_meta(&file)
                    .map_err(|e| Some(format!("{}: {e}", file.display())))?;
                for w in &meta.warnings {
                    eprintln!("fgtrace: warning: {}: {w}", file.display());
                }
                let mut out = out;
                info(&file, &meta, None, &mut out).map_err(|e| io_err(&file, e))?;
                let how = match from {
                    fgtrace_trace::file::MetaFrom::ReadThrough => {
                        "every section read (the file has no footer: its recording did not finish)"
                    }
                    _ => "not read (`fgtrace info --check` reads every chunk)",
                };
                writeln!(out, "events:    {how}").map_err(|e| io_err(&file, e.into()))
            }
        }
        Cmd::Zephyr(a) => zephyr::run(&a).map_err(Some),
        Cmd::Pprof(a) => pprof::run(&a),
        Cmd::Flame(a) => views::run_flame(&a, out),
        Cmd::Chrome(a) => views::run_chrome(&a, out),
        Cmd::Perfetto(a) => views::run_perfetto(&a, out),
        Cmd::Firefox(a) => views::run_firefox(&a, out),
        Cmd::Diff(a) => views::run_diff(&a, out),
        Cmd::Plot(a) => plot::run(&a, out),
        Cmd::Html(a) => html::run(&a),
        Cmd::Board(a) => board::run(&a).map_err(Some),
        Cmd::Record(a) => control::record(&a),
        Cmd::Ctl(a) => control::ctl(&a),
        Cmd::Ps => control::ps(),
    }
}

/// What `info` prints of `m`; with `r`, every event is read too.
fn info(
    path: &Path,
    m: &fgtrace_trace::TraceMeta,
    r: Option<progress::Reader>,
    mut out: impl Write,
) -> Result<(), TraceError> {
    writeln!(out, "file:      {}", path.display())?;
    writeln!(out, "program:   {}", m.program_and_pid())?;
    writeln!(
        out,
        "clock:     {} at {:.4} GHz",
        m.clock.source, m.clock.ticks_per_ns
    )?;
    writeln!(out, "duration:  {}", human_duration(m.duration_ns))?;
    writeln!(out, "mode:      {:?}", m.mode)?;
    if !m.filters.is_empty() {
        writeln!(out, "filters:   {}", m.filters)?;
    }
    if let Some(s) = &m.sampling {
        writeln!(out, "sampling:  {s}")?;
    }
    if let Some(s) = &m.sampler {
        writeln!(out, "sampler:   {s}")?;
    }
    if let Some(o) = &m.off_cpu {
        if o.is_available() {
            let (mut blocked, mut preempted, mut n) = (0u64, 0u64, 0usize);
            for t in &o.threads {
                let x = t.total();
                blocked = blocked.saturating_add(x.blocked_ns);
                preempted = preempted.saturating_add(x.preempted_ns);
                n = n.saturating_add(t.intervals.len());
            }
            writeln!(
                out,
                "off-CPU:   {} stretches on {} threads: {} blocked, {} preempted{}",
                n,
                o.threads.len(),
                human_duration(blocked),
                human_duration(preempted),
                if o.lost() > 0 {
                    format!(", {} switch records LOST", o.lost())
                } else {
                    String::new()
                }
            )?;
            if let Some(why) = &o.unavailable {
                writeln!(out, "off-CPU unavailable for some threads: {why}")?;
            }
        } else {
            writeln!(out, "off-CPU unavailable: {}", o.reason())?;
        }
    }
    writeln!(out, "functions: {}", m.sites.len())?;
    // Functions whose calls record values (`#[traced(values(..))]`, `ret`).
    let with_values: Vec<String> = m
        .sites
        .iter()
        .filter(|s| !s.values.is_empty())
        .map(|s| format!("{}({})", s.name, s.values.join(", ")))
        .collect();
    if !with_values.is_empty() {
        writeln!(
            out,
            "values:    {} function{} record values: {}",
            with_values.len(),
            if with_values.len() == 1 { "" } else { "s" },
            with_values.join(", ")
        )?;
    }
    if !m.strings.is_empty() {
        writeln!(
            out,
            "strings:   {} distinct string value{} (`&'static str`)",
            m.strings.len(),
            if m.strings.len() == 1 { "" } else { "s" }
        )?;
    }
    writeln!(
        out,
        "calls:     {} ({} lost, {} overruns)",
        m.total_calls(),
        m.total_lost(),
        m.total_overruns()
    )?;
    if let Some(c) = &m.cut_short {
        writeln!(out, "cut short: {}", c.describe())?;
    }
    if let Some(r) = fgtrace_trace::ring_text(m) {
        writeln!(out, "ring:      {r}")?;
    }
    for w in &m.warnings {
        writeln!(out, "warning:   {w}")?;
    }
    writeln!(out, "threads:")?;
    for t in &m.threads {
        writeln!(
            out,
            "  {:>8} {:<20} {:>10} calls {:>8} lost {:>6} overruns {:>8} samples",
            t.tid, t.name, t.calls, t.lost, t.overruns, t.samples
        )?;
    }
    // Functions auto-exclude switched to count-only, per thread, in time order.
    if !m.count_only.is_empty() {
        let mut sw: Vec<_> = m.count_only.iter().collect();
        sw.sort_by_key(|c| (c.thread, c.switched_at_ns, c.site));
        writeln!(
            out,
            "count-only: {} switch{} by auto-exclude, {} later calls counted, not recorded:",
            sw.len(),
            if sw.len() == 1 { "" } else { "es" },
            m.total_count_only()
        )?;
        for c in sw {
            writeln!(
                out,
                "  {:<24} {:<32} at {:>10}  after {} calls of {} avg, then {} calls",
                m.thread_label(c.thread),
                m.site_name(c.site),
                human_duration(c.switched_at_ns),
                c.calls_before,
                human_duration(c.mean_ns_before),
                c.calls_after
            )?;
        }
    }
    // Functions the build's plan counted instead of timing.
    if !m.counted.is_empty() {
        writeln!(
            out,
            "counted:   {} calls of {} function{} the build's plan counted, not timed",
            m.total_counted(),
            m.counted.len(),
            if m.counted.len() == 1 { "" } else { "s" }
        )?;
    }
    // Read every chunk so damage anywhere is reported.
    if let Some(r) = r {
        let mut events = 0u64;
        for e in r.events() {
            e?;
            events += 1;
        }
        writeln!(out, "events:    {events} (all chunks intact)")?;
    }
    out.flush()?;
    Ok(())
}

fn main() -> ExitCode {
    // `FGTRACE_CONTROL` in the environment is for the programs being traced,
    // not for this tool (which links fgtrace): no endpoint here.
    fgtrace::control::close();
    // Nor does `FGTRACE_RECORD` record this tool.
    fgtrace::launch::discard();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) | Err(None) => ExitCode::SUCCESS,
        Err(Some(msg)) => {
            eprintln!("fgtrace: {msg}");
            ExitCode::FAILURE
        }
    }
}
