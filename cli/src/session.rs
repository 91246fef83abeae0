//! The session settings `fgtrace record`, `fgtrace ctl start` and `cargo
//! fgtrace record` take as flags (the `FGTRACE_*` variables' values).

use fgtrace::control::Settings;

/// Session settings sent to the target (the `FGTRACE_*` variables' values).
#[derive(clap::Args, Clone, Default)]
pub struct SessionArgs {
    /// Also sample stacks: timer:HZ, wall:HZ or a perf event (cycles:100000).
    #[arg(long)]
    sample: Option<String>,
    /// Record only these functions (globs; repeat or comma-separate).
    #[arg(long, value_delimiter = ',')]
    filter: Vec<String>,
    /// Never record these functions.
    #[arg(long, value_delimiter = ',')]
    exclude: Vec<String>,
    /// Record only inside these functions.
    #[arg(long = "graph-function", value_delimiter = ',')]
    graph_function: Vec<String>,
    /// Hide these functions and everything they call.
    #[arg(long, value_delimiter = ',')]
    notrace: Vec<String>,
    /// Only calls at depth < N.
    #[arg(long, short = 'D')]
    depth: Option<u32>,
    /// Only calls lasting at least this long (10us, 1.5ms).
    #[arg(long)]
    threshold: Option<String>,
    /// Only count (no longer record) a function on a thread once its first
    /// 1,024 calls there average at most this long (50ns). Stream mode only.
    #[arg(long = "auto-exclude")]
    auto_exclude: Option<String>,
    /// The most a recording to a file writes (200MB, 1.5GB, 512MiB or
    /// unlimited; default: a quarter of the free space there, at most 4 GB).
    /// At the limit the file is completed and later calls are counted as lost
    /// (with `--on-full ring`, the file keeps the run's end instead).
    #[arg(long = "max-size", value_name = "SIZE")]
    pub max_size: Option<String>,
    /// What a recording to a file does at --max-size: `stop` (the default)
    /// keeps the run's start and counts later calls as lost; `ring` keeps
    /// the run's end, as the flight recorder does in memory: FILE holds the
    /// last calls, FILE.prev the segment before (together within SIZE), and
    /// older calls are counted as overwritten.
    #[arg(long = "on-full", value_name = "WHAT", value_parser = ["stop", "ring"])]
    pub on_full: Option<String>,
}

impl SessionArgs {
    /// `--max-size` where only a recording to a file has a budget: an
    /// error naming `where_` when it was given.
    // Not used by `cargo fgtrace`, whose recordings all go to files.
    #[allow(dead_code)]
    pub fn no_max_size(&self, where_: &str) -> Result<(), Option<String>> {
        match self.max_size.as_ref().or(self.on_full.as_ref()) {
            Some(_) => Err(Some(format!(
                "--max-size and --on-full apply to recordings written to a file \
                 (`record -- COMMAND`, `record --pid`), not to {where_}: its trace is kept \
                 in the process's memory until `ctl stop`"
            ))),
            None => Ok(()),
        }
    }

    /// The settings these flags ask for. Unused where the control endpoint
    /// and the launcher are not supported (Windows).
    #[cfg_attr(not(unix), allow(dead_code))]
    pub fn settings(&self, mode: Option<String>, duration_ms: Option<u64>) -> Settings {
        Settings {
            duration_ms,
            mode,
            sample: self.sample.clone(),
            filter: self.filter.clone(),
            exclude: self.exclude.clone(),
            graph_function: self.graph_function.clone(),
            notrace: self.notrace.clone(),
            depth: self.depth,
            threshold: self.threshold.clone(),
            auto_exclude: self.auto_exclude.clone(),
        }
    }
}
