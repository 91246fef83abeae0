//! Session configuration: recording mode, buffer sizes and the ftrace/uftrace
//! style filters, set in code or from `FGTRACE_*` environment variables.
//!
//! | variable | meaning | ftrace / uftrace |
//! |---|---|---|
//! | `FGTRACE_FILTER=a,b*` | record only matching functions (others are invisible, their callees still recorded) | `set_ftrace_filter`, `-F` |
//! | `FGTRACE_EXCLUDE=a*` | never record matching functions (callees still recorded) | `set_ftrace_notrace` |
//! | `FGTRACE_GRAPH_FUNCTION=main_loop` | record only inside these functions | `set_graph_function` |
//! | `FGTRACE_NOTRACE=noisy*` | hide these functions and their whole subtree | `set_graph_notrace`, `-N` |
//! | `FGTRACE_DEPTH=N` | record calls at depth < N only | `max_graph_depth`, `-D` |
//! | `FGTRACE_THRESHOLD=10us` | record calls lasting at least this long | `tracing_thresh`, `-t` |
//! | `FGTRACE_AUTO_EXCLUDE=50ns` | a function whose first 1,024 calls on a thread average at most this long is only counted there from then on ([`Config::auto_exclude`]) | LLVM XRay's instruction threshold, at run time |
//! | `FGTRACE_MODE=stream` or `flight:N` | every call, or the last N per thread | |
//! | `FGTRACE_STACK=N` | shadow-stack capacity per thread (overruns past it) | |
//! | `FGTRACE_SAMPLE=timer:999` | also sample stacks: `timer`, `wall` or a perf event (`cycles:100000`) | `perf record -F/-c` |
//! | `FGTRACE_OFFCPU=1` | also record off-CPU time per call (`0`: off; `required`: a refusal is an error; `unavailable`: act as if refused) | ftrace `sleep-time`, uftrace `-E sched` |
//! | `FGTRACE_MAX_SIZE=200MB` | the most a recording to a file writes ([`Config::max_size`]; default: a quarter of the free space, at most 4 GB; `unlimited`) | `perf record --max-size`, uftrace `--max-size` |
//! | `FGTRACE_ON_FULL=ring` | at the size budget keep the run's end, not its start ([`Config::on_full`]; default `stop`) | `perf record --overwrite`, `--switch-output` |
//! | `FGTRACE_DUMP_ON_PANIC=panic.fgt` | on a panic, write the last calls of every thread there ([`Config::dump_on_panic`]) | |
//!
//! A pattern with `::` matches the full path (`my_crate::parser::parse*`);
//! otherwise it matches the display name (`parse*`, `Parser::*`). `*` and `?`
//! are wildcards; lists are comma separated. Exclusion wins over inclusion.

use crate::buffer::MAX_DEPTH;
mod size;
use fgtrace_trace::RecordMode;
pub use size::{
    default_max_size, free_space, parse_size, OnFull, DEFAULT_FREE_SHARE, DEFAULT_MAX_SIZE_CAP,
};
/// The largest flight recorder per thread: 2^30 calls (16 GiB of records).
pub const MAX_FLIGHT_CALLS: usize = 1 << 30;
/// Recorded calls of a function on a thread over which
/// [`Config::auto_exclude`] takes their mean (its first ones, then each
/// following window of as many until the function is switched).
pub const AUTO_EXCLUDE_CALLS: u64 = 1024;
pub(crate) use fgtrace_core::site::Decision;
use std::time::Duration;
use wildmatch::WildMatch;

/// How a session records. `Config::default()` reads the `FGTRACE_*`
/// environment variables; builder methods override them.
/// [`Config::builtin`] is the same defaults without the environment.
///
/// ```
/// #[fgtrace::traced]
/// fn handle() -> u32 { parse() + log() }
/// #[fgtrace::traced]
/// fn parse() -> u32 { 1 }
/// #[fgtrace::traced]
/// fn log() -> u32 { 2 }
///
/// let config = fgtrace::Config::builtin()
///     .flight_recorder(1024) // only the last 1,024 calls of each thread
///     .exclude(["log"]) // never record `log` (its callees would be)
///     .max_depth(2); // nothing deeper than `handle`'s callees
/// let session = fgtrace::Session::start(config)?;
/// assert_eq!(handle(), 3);
/// let trace = session.stop()?;
///
/// let names: Vec<&str> = trace.calls().map(|c| trace.meta.site_name(c.site)).collect();
/// assert_eq!(names, ["handle", "parse"]);
/// assert_eq!(trace.meta.mode, fgtrace::trace::RecordMode::FlightRecorder);
///
/// // A setting out of range is an error from `Session::start`, naming it.
/// let too_big = fgtrace::Config::builtin().flight_recorder(usize::MAX);
/// let err = fgtrace::Session::start(too_big).err().unwrap();
/// assert!(matches!(err, fgtrace::Error::Config(_)), "{err}");
/// # Ok::<(), fgtrace::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) mode: RecordMode,
    pub(crate) flight_calls: usize,
    pub(crate) batch_calls: usize,
    pub(crate) max_batches_in_flight: usize,
    pub(crate) block_when_full: bool,
    pub(crate) stack_depth: u32,
    pub(crate) max_depth: Option<u32>,
    pub(crate) threshold: Option<Duration>,
    /// Count-only switch of tiny functions (`Config::auto_exclude`).
    pub(crate) auto_exclude: Option<Duration>,
    pub(crate) filter: Vec<String>,
    pub(crate) exclude: Vec<String>,
    pub(crate) graph_functions: Vec<String>,
    pub(crate) notrace: Vec<String>,
    pub(crate) sampling: Option<crate::sampler::Sampling>,
    /// Per-call hardware counters asked for (`Config::counters`).
    pub(crate) counters: Vec<crate::pmu::Counter>,
    /// Write the trace file here while recording.
    pub(crate) output: Option<std::path::PathBuf>,
    /// The most the output file may take, in bytes (`u64::MAX`: no limit;
    /// `None`: the default, see [`default_max_size`]).
    pub(crate) max_size: Option<u64>,
    /// What the output file does at its budget.
    pub(crate) on_full: OnFull,
    /// The budget is shared by every recording into the output file's
    /// directory (`FGTRACE_RECORD`).
    pub(crate) shared_budget: bool,
    /// Off-CPU time per call (context-switch records, see `offcpu`).
    pub(crate) off_cpu: bool,
    /// Problems found in environment variables, reported by `Session::start`.
    pub(crate) errors: Vec<String>,
    /// Where the panic hook writes the last calls of every thread.
    pub(crate) dump_on_panic: Option<std::path::PathBuf>,
}

impl Default for Config {
    /// Stream mode, 4096-call batches, 256 batches in flight (16 MiB), a
    /// 512-frame shadow stack, no filters; then `FGTRACE_*` variables applied.
    fn default() -> Self {
        let mut c = Config::builtin();
        c.apply_env(|k| std::env::var(k).ok());
        c
    }
}

fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect()
}

/// Parses `10us`, `1.5ms`, `2s`, `500ns` (a bare number is microseconds, as ftrace's `tracing_thresh`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (try 10us, 1.5ms, 2s)"))?;
    let ns = match unit.trim() {
        "ns" => v,
        "" | "us" | "µs" => v * 1e3,
        "ms" => v * 1e6,
        "s" => v * 1e9,
        u => return Err(format!("`{s}`: unknown unit `{u}` (use ns, us, ms or s)")),
    };
    Ok(Duration::from_nanos(ns as u64))
}

impl Config {
    /// The defaults without reading the environment.
    pub fn builtin() -> Self {
        Config {
            mode: RecordMode::Stream,
            flight_calls: 65536,
            batch_calls: 4096,
            max_batches_in_flight: 256,
            block_when_full: false,
            stack_depth: 512,
            max_depth: None,
            threshold: None,
            auto_exclude: None,
            filter: Vec::new(),
            exclude: Vec::new(),
            graph_functions: Vec::new(),
            notrace: Vec::new(),
            sampling: None,
            counters: Vec::new(),
            output: None,
            max_size: None,
            on_full: OnFull::Stop,
            shared_budget: false,
            off_cpu: false,
            errors: Vec::new(),
            dump_on_panic: None,
        }
    }

    /// Applies `FGTRACE_*` settings from `get` (the environment, or a map in tests).
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) {
        if let Some(v) = get("FGTRACE_FILTER") {
            self.filter = list(&v);
        }
        if let Some(v) = get("FGTRACE_EXCLUDE") {
            self.exclude = list(&v);
        }
        if let Some(v) = get("FGTRACE_GRAPH_FUNCTION") {
            self.graph_functions = list(&v);
        }
        if let Some(v) = get("FGTRACE_NOTRACE") {
            self.notrace = list(&v);
        }
        if let Some(v) = get("FGTRACE_DEPTH") {
            match v.trim().parse::<u32>() {
                Ok(0) => self.max_depth = None,
                Ok(n) => self.max_depth = Some(n),
                Err(_) => self
                    .errors
                    .push(format!("FGTRACE_DEPTH=`{v}` is not a number")),
            }
        }
        if let Some(v) = get("FGTRACE_THRESHOLD") {
            match parse_duration(&v) {
                Ok(d) => self.threshold = Some(d),
                Err(e) => self.errors.push(format!("FGTRACE_THRESHOLD: {e}")),
            }
        }
        if let Some(v) = get("FGTRACE_AUTO_EXCLUDE") {
            match v.trim() {
                "" | "0" | "off" => self.auto_exclude = None,
                t => match parse_duration(t) {
                    Ok(d) => self.auto_exclude = Some(d),
                    Err(e) => self.errors.push(format!("FGTRACE_AUTO_EXCLUDE: {e}")),
                },
            }
        }
        if let Some(v) = get("FGTRACE_STACK") {
            match v.trim().parse::<u32>() {
                Ok(n) if (1..=MAX_DEPTH).contains(&n) => self.stack_depth = n,
                _ => self.errors.push(format!(
                    "FGTRACE_STACK=`{v}` must be a number from 1 to {MAX_DEPTH}"
                )),
            }
        }
        if let Some(v) = get("FGTRACE_SAMPLE") {
            match crate::sampler::Sampling::parse(&v) {
                Ok(s) => self.sampling = Some(s),
                Err(e) => self.errors.push(format!("FGTRACE_SAMPLE: {e}")),
            }
        }
        if let Some(v) = get("FGTRACE_OUTPUT") {
            if v.trim().is_empty() {
                self.errors
                    .push("FGTRACE_OUTPUT is set but empty: name the trace file to write".into());
            } else {
                self.output = Some(v.into());
            }
        }
        if let Some(v) = get("FGTRACE_MAX_SIZE") {
            if !v.trim().is_empty() {
                match parse_size(&v) {
                    Ok(n) => self.max_size = Some(n),
                    Err(e) => self.errors.push(format!("FGTRACE_MAX_SIZE: {e}")),
                }
            }
        }
        if let Some(v) = get("FGTRACE_ON_FULL") {
            if !v.trim().is_empty() {
                match OnFull::parse(&v) {
                    Ok(f) => self.on_full = f,
                    Err(e) => self.errors.push(format!("FGTRACE_ON_FULL: {e}")),
                }
            }
        }
        if let Some(v) = get("FGTRACE_DUMP_ON_PANIC") {
            let v = v.trim();
            if !v.is_empty() {
                self.dump_on_panic = Some(v.into());
            }
        }
        if let Some(v) = get("FGTRACE_OFFCPU") {
            match v.trim().to_ascii_lowercase().as_str() {
                "1" | "on" | "yes" | "true" | "required" | "require" | "unavailable" => {
                    self.off_cpu = true
                }
                "0" | "off" | "no" | "false" | "" => self.off_cpu = false,
                _ => self.errors.push(format!(
                    "FGTRACE_OFFCPU=`{v}`: use 1, 0, required or unavailable"
                )),
            }
        }
        if let Some(v) = get("FGTRACE_MODE") {
            let v = v.trim();
            if v == "stream" {
                self.mode = RecordMode::Stream;
            } else if let Some(n) = v.strip_prefix("flight") {
                self.mode = RecordMode::FlightRecorder;
                if let Some(n) = n.strip_prefix(':') {
                    match n.parse::<usize>() {
                        Ok(n) if n > 0 && n <= MAX_FLIGHT_CALLS => self.flight_calls = n,
                        Ok(n) if n > 0 => self.errors.push(format!(
                            "FGTRACE_MODE=`{v}`: a flight recorder keeps at most \
                             {MAX_FLIGHT_CALLS} calls per thread, not {n}"
                        )),
                        _ => self.errors.push(format!(
                            "FGTRACE_MODE=`{v}`: expected flight:<calls per thread> \
                             (1 to {MAX_FLIGHT_CALLS})"
                        )),
                    }
                }
            } else {
                self.errors.push(format!(
                    "FGTRACE_MODE=`{v}`: expected `stream` or `flight[:N]`"
                ));
            }
        }
    }

    /// Writes the trace file at `path` while recording (`FGTRACE_OUTPUT`):
    /// the collector appends each batch as it arrives, so memory stays
    /// bounded however long the session runs, and [`Session::stop`]
    /// returns with the file complete. A process that crashes or is killed
    /// leaves a file that reads up to its last complete section, with a
    /// note that it was cut short. The returned [`Trace`](fgtrace_trace::Trace)
    /// reads its events back from the file when a view asks for them.
    ///
    /// ```
    /// #[fgtrace::traced]
    /// fn step(i: u32) -> u32 { i * 2 }
    ///
    /// let path = std::env::temp_dir().join(format!("steps-{}.fgt", std::process::id()));
    /// let session = fgtrace::Session::start(fgtrace::Config::builtin().output(&path))?;
    /// let sum: u32 = (0..100).map(step).sum();
    /// let trace = session.stop()?;
    /// assert_eq!(sum, 9900);
    /// // The file is complete: it loads with every call.
    /// assert_eq!(fgtrace::Trace::load(&path)?.calls().count(), 100);
    /// assert_eq!(trace.calls().count(), 100);
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`Session::stop`]: crate::Session::stop
    pub fn output(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.output = Some(path.into());
        self
    }

    /// The most the file of [`Config::output`] may take, in bytes
    /// (`FGTRACE_MAX_SIZE`; `u64::MAX`: no limit). When the next batch
    /// would pass it, the file is completed there (final metadata and
    /// footer, within the budget) and the calls after it are counted as
    /// lost, not kept: the trace's
    /// [`cut_short`](fgtrace_trace::TraceMeta::cut_short) says when and how
    /// many. A full file system ends the file the same way. Without it, a
    /// recording gets a quarter of the space free where its file goes, at
    /// most 4 GB ([`default_max_size`]).
    pub fn max_size(mut self, bytes: u64) -> Self {
        self.max_size = Some(bytes.max(1));
        self
    }

    /// What the file of [`Config::output`] does when it reaches
    /// [`Config::max_size`] (`FGTRACE_ON_FULL=stop|ring`): [`OnFull::Stop`]
    /// (the default) keeps the run's start, [`OnFull::Ring`] its end.
    ///
    /// With `Ring` the file is written in segments of half the budget; when
    /// one is full it becomes `FILE.prev` (replacing the one before) and a
    /// new one starts at `FILE`, so the two never take more than the
    /// budget. `FILE` always holds the run's last calls, and stays readable
    /// however the process ends; the calls before its segment are counted
    /// in it as overwritten, as the flight recorder counts them. Readers
    /// given `FILE` read `FILE.prev` first, as the start of the same trace.
    pub fn on_full(mut self, what: OnFull) -> Self {
        self.on_full = what;
        self
    }

    /// The budget in bytes a recording to a file in `dir` gets: the one
    /// set, or the default there; `None`: no limit.
    pub fn max_size_for(&self, dir: &std::path::Path) -> Option<u64> {
        match self.max_size {
            Some(u64::MAX) => None,
            Some(n) => Some(n),
            None => Some(default_max_size(dir).map_or(DEFAULT_MAX_SIZE_CAP, |(b, _)| b)),
        }
    }

    /// Keep every call, handing batches to the collector (the default).
    pub fn stream(mut self) -> Self {
        self.mode = RecordMode::Stream;
        self
    }
    /// Keep only the last `calls_per_thread` calls of each thread (at most
    /// [`MAX_FLIGHT_CALLS`]; more is an error from `Session::start`).
    pub fn flight_recorder(mut self, calls_per_thread: usize) -> Self {
        self.mode = RecordMode::FlightRecorder;
        if calls_per_thread > MAX_FLIGHT_CALLS {
            self.errors.push(format!(
                "flight_recorder({calls_per_thread}): a flight recorder keeps at most \
                 {MAX_FLIGHT_CALLS} calls per thread"
            ));
        } else {
            self.flight_calls = calls_per_thread.max(1);
        }
        self
    }
    /// Calls per batch handed to the collector (stream mode).
    pub fn batch_calls(mut self, n: usize) -> Self {
        self.batch_calls = n.max(16);
        self
    }
    /// Batches that may wait for the collector before new ones are dropped (and counted).
    pub fn max_batches_in_flight(mut self, n: usize) -> Self {
        self.max_batches_in_flight = n.max(1);
        self
    }
    /// Block the traced thread instead of dropping when the collector falls behind.
    pub fn block_when_full(mut self, yes: bool) -> Self {
        self.block_when_full = yes;
        self
    }
    /// Shadow-stack capacity per thread; deeper calls are counted as overruns.
    pub fn stack_depth(mut self, n: u32) -> Self {
        self.stack_depth = n.clamp(1, MAX_DEPTH);
        self
    }
    /// Record only calls at depth < `n` (0 = unlimited).
    pub fn max_depth(mut self, n: u32) -> Self {
        self.max_depth = (n > 0).then_some(n);
        self
    }
    /// Record only calls lasting at least `d`.
    pub fn threshold(mut self, d: Duration) -> Self {
        self.threshold = Some(d);
        self
    }
    /// Automatic exclusion of tiny functions (`FGTRACE_AUTO_EXCLUDE=50ns`):
    /// once a function's first [`AUTO_EXCLUDE_CALLS`] recorded calls on a
    /// thread average at most `d`, it stops being recorded on that thread
    /// and is only counted there, exactly. (If those were slower, each
    /// following window of as many calls is looked at too: a few cold or
    /// preempted first calls do not keep a getter recorded for good.) Its
    /// callees are still recorded (one level up, as below an excluded
    /// function). `report` adds the counted calls to its calls and marks it
    /// `count only` (its times are those of the calls recorded before the
    /// switch); `fgtrace info` lists each switch with its time.
    ///
    /// The collector decides, from the batches it receives, so a switch
    /// comes one batch after the calls that decided it. Every call of the
    /// session's threads then takes the probe's slower out-of-line path (a
    /// table lookup per call); sessions without it are not affected. Plain
    /// calls only: graph functions and async fns are always recorded. Stream
    /// mode only (a flight recorder has no collector to decide): with a
    /// flight recorder, `Session::start` fails.
    pub fn auto_exclude(mut self, d: Duration) -> Self {
        self.auto_exclude = Some(d);
        self
    }
    /// Record only functions matching these patterns.
    pub fn filter<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.filter = patterns.into_iter().map(Into::into).collect();
        self
    }
    /// Never record functions matching these patterns.
    pub fn exclude<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.exclude = patterns.into_iter().map(Into::into).collect();
        self
    }
    /// Record only inside these functions.
    pub fn graph_functions<S: Into<String>>(
        mut self,
        patterns: impl IntoIterator<Item = S>,
    ) -> Self {
        self.graph_functions = patterns.into_iter().map(Into::into).collect();
        self
    }
    /// A per-call counter, as uftrace's `read:pmu-*`:
    /// `.counters([Counter::Instructions])`. Each call's delta (entry to exit,
    /// callees included) is recorded beside it. `Session::start` fails with
    /// an error naming the counter where it cannot be counted (no PMU: most
    /// VMs, containers and CI runners), never zeros; and, for now, when more
    /// than one counter is asked for.
    pub fn counters(mut self, counters: impl IntoIterator<Item = crate::pmu::Counter>) -> Self {
        self.counters = counters.into_iter().collect();
        self
    }

    /// Also sample stacks (see [`crate::sampler`]): `Sampling::timer(999)`,
    /// `Sampling::perf(PerfEvent::Cycles, 100_000)`, ...
    pub fn sampling(mut self, s: crate::sampler::Sampling) -> Self {
        self.sampling = Some(s);
        self
    }
    /// Also record when each thread was off the CPU (switched out: blocked
    /// or preempted), so that every call gets its off-CPU time. Needs
    /// `perf_event_open` on the own threads (works at
    /// `perf_event_paranoid` 2); where the kernel refuses, the session still
    /// records, says so in one line on stderr, and the trace says why
    /// off-CPU time is unavailable. `FGTRACE_OFFCPU=1` sets it.
    pub fn off_cpu(mut self, yes: bool) -> Self {
        self.off_cpu = yes;
        self
    }
    /// Hide these functions and everything they call.
    pub fn notrace<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.notrace = patterns.into_iter().map(Into::into).collect();
        self
    }

    /// On a panic in any thread while this session records, write the last
    /// calls of every thread to `path` (an fgtrace file: `fgtrace graph
    /// path`) before the default panic hook prints the message. With a
    /// flight recorder these are the last N calls per thread; in stream mode,
    /// the calls not yet handed to the collector (at most a batch per
    /// thread). The calls open on the panicking thread (the one that panics
    /// and its callers) are included as unwound calls ending at the panic.
    /// The session keeps recording; a second panic rewrites the file.
    pub fn dump_on_panic(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.dump_on_panic = Some(path.into());
        self
    }

    /// One line describing the filters, stored in the trace.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        let mut add = |k: &str, v: &[String]| {
            if !v.is_empty() {
                parts.push(format!("{k}={}", v.join(",")));
            }
        };
        add("filter", &self.filter);
        add("exclude", &self.exclude);
        add("graph_function", &self.graph_functions);
        add("notrace", &self.notrace);
        if let Some(d) = self.max_depth {
            parts.push(format!("depth={d}"));
        }
        if let Some(t) = self.threshold {
            parts.push(format!("threshold={t:?}"));
        }
        if let Some(d) = self.auto_exclude {
            parts.push(format!("auto_exclude={d:?}"));
        }
        parts.join(" ")
    }
}

/// Compiled name patterns.
pub(crate) struct Filters {
    filter: Vec<Pattern>,
    exclude: Vec<Pattern>,
    graph: Vec<Pattern>,
    notrace: Vec<Pattern>,
}

struct Pattern {
    full_path: bool,
    m: WildMatch,
}

impl Pattern {
    fn new(p: &str) -> Pattern {
        Pattern {
            full_path: p.contains("::") && !p.starts_with('*'),
            m: WildMatch::new(p),
        }
    }
    fn matches(&self, name: &str, full: &str) -> bool {
        if self.full_path {
            self.m.matches(full)
        } else {
            self.m.matches(name) || self.m.matches(full)
        }
    }
}

impl Filters {
    pub fn new(c: &Config) -> Filters {
        let compile = |v: &[String]| v.iter().map(|p| Pattern::new(p)).collect();
        Filters {
            filter: compile(&c.filter),
            exclude: compile(&c.exclude),
            graph: compile(&c.graph_functions),
            notrace: compile(&c.notrace),
        }
    }

    pub fn has_graph_functions(&self) -> bool {
        !self.graph.is_empty()
    }

    pub fn decide(&self, name: &str, module_path: &str) -> Decision {
        let full = format!("{module_path}::{name}");
        let any = |ps: &[Pattern]| ps.iter().any(|p| p.matches(name, &full));
        if any(&self.notrace) {
            Decision::Hide
        } else if any(&self.exclude) || (!self.filter.is_empty() && !any(&self.filter)) {
            Decision::Skip
        } else if any(&self.graph) {
            Decision::GraphRoot
        } else {
            Decision::Record
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Config {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut c = Config::builtin();
        c.apply_env(|k| m.get(k).cloned());
        c
    }

    #[test]
    fn environment_sets_filters_and_reports_bad_values() {
        let c = env(&[
            ("FGTRACE_FILTER", "parse*, eval"),
            ("FGTRACE_DEPTH", "3"),
            ("FGTRACE_THRESHOLD", "1.5ms"),
            ("FGTRACE_MODE", "flight:100"),
        ]);
        assert_eq!(c.filter, vec!["parse*", "eval"]);
        assert_eq!(c.max_depth, Some(3));
        assert_eq!(c.threshold, Some(Duration::from_micros(1500)));
        assert_eq!((c.mode, c.flight_calls), (RecordMode::FlightRecorder, 100));
        assert!(c.errors.is_empty());
        let bad = env(&[
            ("FGTRACE_DEPTH", "deep"),
            ("FGTRACE_THRESHOLD", "3 parsecs"),
            ("FGTRACE_MODE", "x"),
        ]);
        assert_eq!(bad.errors.len(), 3, "{:?}", bad.errors);
    }

    #[test]
    fn auto_exclude_reads_a_duration_and_a_bad_one_is_an_error_naming_the_variable() {
        let c = env(&[("FGTRACE_AUTO_EXCLUDE", "50ns")]);
        assert_eq!(c.auto_exclude, Some(Duration::from_nanos(50)));
        assert!(
            c.describe().contains("auto_exclude=50ns"),
            "{}",
            c.describe()
        );
        assert_eq!(env(&[("FGTRACE_AUTO_EXCLUDE", "off")]).auto_exclude, None);
        assert_eq!(env(&[("FGTRACE_AUTO_EXCLUDE", "0")]).auto_exclude, None);
        let bad = env(&[("FGTRACE_AUTO_EXCLUDE", "bogus")]);
        assert_eq!(bad.auto_exclude, None);
        assert_eq!(bad.errors.len(), 1, "{:?}", bad.errors);
        assert!(
            bad.errors[0].contains("FGTRACE_AUTO_EXCLUDE") && bad.errors[0].contains("bogus"),
            "{:?}",
            bad.errors
        );
    }

    #[test]
    fn decisions_follow_ftrace_precedence() {
        let c = Config::builtin()
            .filter(["parse*", "app::eval::*"])
            .exclude(["parse_ws"])
            .notrace(["parse_comment"])
            .graph_functions(["parse_expr"]);
        let f = Filters::new(&c);
        assert_eq!(f.decide("parse_term", "app::parser"), Decision::Record);
        assert_eq!(f.decide("run", "app::eval"), Decision::Record);
        assert_eq!(f.decide("run", "app::main"), Decision::Skip);
        assert_eq!(f.decide("parse_ws", "app::parser"), Decision::Skip);
        assert_eq!(f.decide("parse_comment", "app::parser"), Decision::Hide);
        assert_eq!(f.decide("parse_expr", "app::parser"), Decision::GraphRoot);
    }
}
