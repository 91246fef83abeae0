//! `cargo fgtrace`: builds a cargo project with chosen crates instrumented
//! (every free fn and impl block `#[traced]`), without editing any of its
//! files, and runs a cargo command recording every process, or prints the
//! executables built. See docs/src/recording/cargo-fgtrace.md and, for how, the guide's
//! Architecture page.
//!
//! Unix only (Linux and macOS): it records through the whole-program
//! launcher (`FGTRACE_RECORD`), which needs `atexit` and the stop signals.
//! Elsewhere it says it is not supported.

#[cfg(unix)]
mod cargo_args;
#[cfg(unix)]
mod compile;
// Shared with the `fgtrace` command; `plan` reads traces as its views do
// and uses part of these.
#[cfg(unix)]
#[allow(dead_code)]
#[path = "../inputs.rs"]
mod inputs;
#[cfg(unix)]
#[path = "../launch.rs"]
mod launch;
#[cfg(unix)]
mod manifest;
#[cfg(unix)]
mod metadata;
#[cfg(unix)]
mod plan;
#[cfg(unix)]
mod prepare;
#[cfg(unix)]
#[allow(dead_code)]
#[path = "../progress.rs"]
mod progress;
#[cfg(unix)]
#[path = "../session.rs"]
mod session;
#[cfg(unix)]
mod tree;

#[cfg(unix)]
use cargo_args::CargoArgs;
#[cfg(unix)]
use clap::{Parser, Subcommand};
#[cfg(unix)]
use std::path::PathBuf;
use std::process::ExitCode;

#[cfg(unix)]
#[derive(Parser)]
#[command(
    name = "cargo fgtrace",
    bin_name = "cargo fgtrace",
    version,
    about = "Trace a cargo project's crates without editing them: every free fn and impl block \
             of the chosen crates traced, in copies under target/fgtrace/",
    after_help = "Examples:\n  \
        cargo fgtrace record -- run --release                 the workspace's own crates\n  \
        cargo fgtrace record --crate regex -- run --release -- input.txt\n  \
        cargo fgtrace record --dir traces -- test --release    one trace per test binary\n  \
        cargo fgtrace build --crate serde_json -- build --release\n  \
        fgtrace report fgtrace.fgt                             what was called, how often, how long"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[cfg(unix)]
#[derive(Subcommand)]
enum Cmd {
    /// Build instrumented, then run the cargo command with every process recording.
    #[command(after_help = "Examples:\n  \
        cargo fgtrace record -- run --release\n  \
        cargo fgtrace record --crate regex --crate regex-syntax -o re.fgt -- run --release\n  \
        cargo fgtrace record --auto-exclude 50ns -- test --release\n  \
        cargo fgtrace record --crate regex --skip 'regex::*::Cache*' -- run --example demo")]
    Record(Box<RecordArgs>),
    /// Build instrumented and print `executable: PATH` for each executable built.
    #[command(after_help = "Examples:\n  \
        cargo fgtrace build -- build --release\n  \
        cargo fgtrace build --crate regex -- test --release --no-run")]
    Build(BuildArgs),
    /// Write a plan from traces: the functions a build should count, not time.
    #[command(after_help = "Examples:\n  \
        cargo fgtrace record --auto-exclude 50ns -o auto.fgt -- run --release\n  \
        cargo fgtrace plan auto.fgt -o fgtrace.plan\n  \
        cargo fgtrace plan traces/*.fgt --below 50ns -o fgtrace.plan\n  \
        cargo fgtrace record --plan fgtrace.plan -- run --release\n\n\
        The plan names, one path a line, the functions the traces switched to\n\
        count-only (auto-exclude), those a plan already counted, and with --below\n\
        those whose recorded calls averaged under the threshold. Built with\n\
        --plan, each gets an exact count instead of the timing probe, and\n\
        inlines as the published build does; `fgtrace report` marks them\n\
        [counted]. With --uncounted they get neither probe nor count (lines\n\
        `uncounted PATH`). async fns and fns recording values keep their probe.")]
    Plan(PlanArgs),
}

#[cfg(unix)]
#[derive(clap::Args)]
struct PlanArgs {
    /// Traces to read (several are merged).
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Also plan the functions whose recorded calls averaged under this
    /// (`50ns`, `1us`).
    #[arg(long, value_name = "DURATION")]
    below: Option<String>,
    /// Leave the planned functions without probe or count (as if not traced:
    /// the published build's speed, their time in their callers' self time)
    /// instead of counting them.
    #[arg(long)]
    uncounted: bool,
    /// The plan file to write.
    #[arg(long, short = 'o', default_value = "fgtrace.plan")]
    output: PathBuf,
}

#[cfg(unix)]
#[derive(clap::Args)]
struct Select {
    /// A package to instrument (workspace member, or a dependency from a
    /// registry or git); repeat for several. Default: every workspace member.
    #[arg(long = "crate", value_name = "NAME")]
    crates: Vec<String>,
    /// Leave out the items whose path matches (`regex_syntax::ast::*`,
    /// `mycrate::Parser::next`: a free fn, an impl block by its type, or one method).
    #[arg(long, value_name = "PATH_GLOB")]
    skip: Vec<String>,
    /// Build the functions this plan names (`cargo fgtrace plan`) with an
    /// exact count instead of the timing probe.
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
}

#[cfg(unix)]
#[derive(clap::Args)]
struct RecordArgs {
    #[command(flatten)]
    select: Select,
    /// Where to write the trace (default fgtrace.fgt; the command's other
    /// processes' traces go beside it).
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
    /// One trace per process that links fgtrace, in this directory.
    #[arg(long, conflicts_with = "output")]
    dir: Option<PathBuf>,
    /// Also record off-CPU time per call.
    #[arg(long)]
    offcpu: bool,
    /// Keep only the last N calls per thread (a flight recorder) instead of every call.
    #[arg(long)]
    flight: Option<usize>,
    #[command(flatten)]
    session: session::SessionArgs,
    /// The cargo command (after `--`): `run --release [-- ARGS]`, `test`, `bench`, ...
    #[arg(last = true, required = true, value_name = "CARGO_ARGS")]
    cargo: Vec<String>,
}

#[cfg(unix)]
#[derive(clap::Args)]
struct BuildArgs {
    #[command(flatten)]
    select: Select,
    /// The cargo command (after `--`): `build --release`, `test --no-run`, ...
    #[arg(last = true, required = true, value_name = "CARGO_ARGS")]
    cargo: Vec<String>,
}

#[cfg(unix)]
fn selection(s: &Select) -> prepare::Selection<'_> {
    prepare::Selection {
        crates: &s.crates,
        skip: &s.skip,
    }
}

/// Prepares and builds; the build-only command for `args`.
#[cfg(unix)]
fn prepare_and_build(
    select: &Select,
    args: &CargoArgs,
    record: bool,
) -> Result<(prepare::Prepared, Option<compile::Built>), (i32, String)> {
    let mut prep = prepare::prepare(args, &selection(select)).map_err(|e| (1, e))?;
    plan::give(&mut prep, select.plan.as_deref()).map_err(|e| (1, e))?;
    let built = match args.build_only() {
        Some((sub, extra)) => {
            let mut more = vec!["--message-format=json"];
            more.extend(extra);
            // A `build` keeps whatever follows `--` (nothing cargo takes);
            // `run`'s and `test`'s arguments are for the program.
            let line = args.line(&prep.globals, sub, &prep.manifest, &more, !record);
            Some(compile::build(&prep, &line)?)
        }
        None if record => None,
        None => {
            return Err((
                1,
                format!(
                    "`cargo {}` builds nothing cargo fgtrace knows of: use build, test \
                     --no-run, bench --no-run or run",
                    args.sub
                ),
            ))
        }
    };
    Ok((prep, built))
}

#[cfg(unix)]
fn run(cli: Cli) -> Result<i32, (i32, String)> {
    match cli.cmd {
        Cmd::Build(b) => {
            let args = CargoArgs::parse(&b.cargo).map_err(|e| (1, e))?;
            let (_, built) = prepare_and_build(&b.select, &args, false)?;
            for exe in built.map(|b| b.executables).unwrap_or_default() {
                println!("executable: {}", exe.display());
            }
            Ok(0)
        }
        Cmd::Plan(p) => {
            let below = match &p.below {
                None => None,
                Some(d) => Some(
                    fgtrace::config::parse_duration(d)
                        .map(|d| d.as_nanos() as u64)
                        .map_err(|e| (1, format!("--below: {e}")))?,
                ),
            };
            plan::write_plan(&p.traces, below, p.uncounted, &p.output).map_err(|e| (1, e))?;
            Ok(0)
        }
        Cmd::Record(r) => {
            let args = CargoArgs::parse(&r.cargo).map_err(|e| (1, e))?;
            let (prep, _) = prepare_and_build(&r.select, &args, true)?;
            let mut command = vec![prep.cargo.clone()];
            command.extend(args.line(&prep.globals, &args.sub, &prep.manifest, &[], true));
            for (k, v) in &prep.env {
                std::env::set_var(k, v);
            }
            let mode = r.flight.map(|n| format!("flight:{n}"));
            launch::run(&launch::Launch {
                command: &command,
                settings: r.session.settings(mode, None),
                off_cpu: r.offcpu,
                dir: r.dir.as_deref(),
                output: r.output.as_deref(),
                max_size: r.session.max_size.as_deref(),
                on_full: r.session.on_full.as_deref(),
            })
            .map_err(|e| (1, e.unwrap_or_default()))
        }
    }
}

#[cfg(unix)]
fn main() -> ExitCode {
    // This tool links fgtrace (the launcher): it neither listens nor records.
    fgtrace::control::close();
    fgtrace::launch::discard();
    // As a cargo subcommand it is run as `cargo-fgtrace fgtrace ARGS`.
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "fgtrace") {
        argv.remove(1);
    }
    match run(Cli::parse_from(argv)) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err((code, msg)) => {
            if !msg.is_empty() {
                eprintln!("cargo fgtrace: {msg}");
            }
            ExitCode::from(code.clamp(1, 255) as u8)
        }
    }
}

#[cfg(not(unix))]
fn main() -> ExitCode {
    eprintln!(
        "cargo fgtrace: not supported on this system ({}): it records through the \
         whole-program launcher, which needs Linux or macOS",
        std::env::consts::OS
    );
    ExitCode::from(2)
}
