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
}

impl SessionArgs {
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
