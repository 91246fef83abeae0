//! `fgtrace zephyr DUMP ELF`: Zephyr `perf printbuf` output to folded stacks or
//! a flamegraph, replacing `stackcollapse.py` + `flamegraph.pl`.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use fgtrace_import::bridge::zephyr::{collapse, CollapseOptions, Dump, Folded, WarningKind};
use fgtrace_symbols::elf::{FuncSymbols, Inliner};
use fgtrace_view::flame::{render_svg, FlameOptions};

/// Skipped-line warnings printed before they are only counted: a paste with
/// interleaved logging would otherwise bury the output.
const MAX_SKIPPED_SHOWN: usize = 5;

/// Import a Zephyr `perf printbuf` dump: folded stacks identical to Zephyr's
/// `stackcollapse.py`, tolerant of console noise, optionally as an SVG.
#[derive(clap::Args, Debug, Clone)]
pub struct ZephyrArgs {
    /// `perf printbuf` output as copied from the console (`-` reads stdin).
    /// Prompts, colours, CRLF and log lines around or inside it are skipped.
    pub dump: PathBuf,
    /// The unstripped ELF the dump came from (e.g. build/zephyr/zephyr.elf).
    pub elf: PathBuf,
    /// Keep adjacent repeated frames (`fib;fib;fib`), like the older stackcollapse.py.
    #[arg(long)]
    pub no_merge: bool,
    /// One line per distinct stack with its sample count, sorted, instead of
    /// one line per sample in buffer order.
    #[arg(long)]
    pub aggregate: bool,
    /// Expand functions inlined into each frame, from the ELF's DWARF.
    #[arg(long)]
    pub inline: bool,
    /// Also render a flamegraph SVG to this file.
    #[arg(long, value_name = "OUT")]
    pub svg: Option<PathBuf>,
    /// Write the folded stacks to this file (default: stdout, unless --svg is given).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
}

/// Runs the import; warnings go to stderr, the error is one line.
pub fn run(args: &ZephyrArgs) -> Result<(), String> {
    let dump_name = display_name(&args.dump);
    let dump_bytes =
        read_input(&args.dump).map_err(|e| format!("cannot read dump {dump_name}: {e}"))?;
    let elf_bytes =
        fs::read(&args.elf).map_err(|e| format!("cannot read ELF {}: {e}", args.elf.display()))?;

    let dump = Dump::parse(&dump_bytes).map_err(|e| format!("{dump_name}: {e}"))?;
    let syms =
        FuncSymbols::from_elf(&elf_bytes).map_err(|e| format!("{}: {e}", args.elf.display()))?;
    let inliner = match args.inline {
        true => Some(Inliner::open(&args.elf).map_err(|e| format!("{}: {e}", args.elf.display()))?),
        false => None,
    };
    let opts = CollapseOptions {
        merge: !args.no_merge,
        aggregate: args.aggregate,
    };
    let folded = collapse(&dump, &syms, inliner.as_ref(), opts)
        .map_err(|e| format!("{dump_name} with {}: {e}", args.elf.display()))?;
    report_warnings(&dump_name, &folded);

    if let Some(path) = &args.output {
        let file =
            fs::File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        folded
            .write_to(file)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    } else if args.svg.is_none() {
        match folded.write_to(io::stdout().lock()) {
            Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
                return Err(format!("cannot write folded stacks to stdout: {e}"))
            }
            _ => {}
        }
    }

    if let Some(path) = &args.svg {
        write_svg(path, &folded, &dump_name, &args.elf)?;
    }
    Ok(())
}

fn write_svg(path: &Path, folded: &Folded, dump_name: &str, elf: &Path) -> Result<(), String> {
    let title_name = Path::new(dump_name).file_name().map_or_else(
        || dump_name.to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    let opts = FlameOptions {
        title: format!("Zephyr perf: {title_name}"),
        subtitle: Some(format!(
            "{} samples, symbols from {}",
            folded.total(),
            elf.file_name().unwrap_or(elf.as_os_str()).to_string_lossy()
        )),
        count_name: "samples".into(),
        ..FlameOptions::default()
    };
    let lines: Vec<String> = folded
        .aggregated()
        .stacks
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut svg = Vec::new();
    render_svg(&lines, &opts, &mut svg).map_err(|e| format!("{}: {e}", path.display()))?;
    fs::File::create(path)
        .and_then(|mut f| f.write_all(&svg))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn report_warnings(dump_name: &str, folded: &Folded) {
    let mut skipped = 0;
    for w in &folded.warnings {
        if w.kind == WarningKind::SkippedLine {
            skipped += 1;
            if skipped > MAX_SKIPPED_SHOWN {
                continue;
            }
        }
        eprintln!("warning: {dump_name}: {w}");
    }
    if skipped > MAX_SKIPPED_SHOWN {
        eprintln!(
            "warning: {dump_name}: {} more non-data lines skipped inside the dump",
            skipped - MAX_SKIPPED_SHOWN
        );
    }
    let cut = folded.warnings.iter().any(|w| {
        matches!(
            w.kind,
            WarningKind::Truncated { .. } | WarningKind::IncompleteSample { .. }
        )
    });
    if cut {
        eprintln!(
            "warning: {dump_name}: kept the {} complete samples before the cut",
            folded.total()
        );
    }
}

fn display_name(path: &Path) -> String {
    if path == Path::new("-") {
        "<stdin>".into()
    } else {
        path.display().to_string()
    }
}

fn read_input(path: &Path) -> io::Result<Vec<u8>> {
    if path == Path::new("-") {
        let mut buf = Vec::new();
        io::stdin().lock().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        fs::read(path)
    }
}
