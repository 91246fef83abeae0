//! Two traces compared function by function (uftrace `report --diff`): calls,
//! total and self time before and after, with the change in percent, sorted
//! by the size of the change. Functions are matched by full name
//! (`module::name`), so sites may be numbered differently in the two traces;
//! a function only one trace has is shown as added or removed.
//!
//! With the `flame` feature, also a differential flamegraph: the traced
//! folded stacks (self time, ns) of both traces through inferno's
//! `differential` module, drawn with the "after" widths, red where time grew
//! and blue where it shrank.

use super::human::{human_duration, uftrace_time};
use super::report::{ReportBuilder, ReportOptions};
use crate::consume::feed;
use crate::threads::ThreadSel;
use fgtrace_trace::{Event, TraceError, TraceMeta};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::str::FromStr;

/// What the rows are sorted by: the absolute change of a column, largest first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiffSort {
    /// Inclusive time.
    #[default]
    Total,
    /// Self time (inclusive minus the recorded callees').
    SelfTime,
    /// Number of calls.
    Calls,
    /// A to Z.
    Name,
}

impl FromStr for DiffSort {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "total" | "time" => DiffSort::Total,
            "self" => DiffSort::SelfTime,
            "calls" | "call" | "hit" => DiffSort::Calls,
            "name" | "func" | "function" => DiffSort::Name,
            _ => {
                return Err(format!(
                    "unknown sort column `{s}` (total, self, calls, name)"
                ))
            }
        })
    }
}

/// Diff options; `Default` sorts by the change of total time, all threads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffOptions {
    /// What the rows are sorted by.
    pub sort: DiffSort,
    /// Only these threads (in both traces; empty: all).
    pub threads: Vec<ThreadSel>,
}

/// One function's numbers in one trace; durations in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Side {
    /// Recorded calls.
    pub calls: u64,
    /// Sum of the calls' inclusive durations.
    pub total_ns: u64,
    /// Sum of the calls' self durations.
    pub self_ns: u64,
    /// Allocations, callees included (`None`: the trace has no allocation figures).
    pub allocs: Option<u64>,
    /// Bytes allocated, callees included.
    pub alloc_bytes: Option<u64>,
    /// Retired instructions, callees included (`None`: not counted).
    pub instructions: Option<u64>,
}

/// One function, before and after. `None`: the function is not in that trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiffRow {
    /// `module::name`.
    pub name: String,
    /// Its numbers in the first trace.
    pub before: Option<Side>,
    /// Its numbers in the second trace.
    pub after: Option<Side>,
}

impl DiffRow {
    fn get(&self, col: DiffSort) -> (i128, i128) {
        let f = |s: &Option<Side>| -> i128 {
            s.map_or(0, |s| match col {
                DiffSort::Total | DiffSort::Name => s.total_ns as i128,
                DiffSort::SelfTime => s.self_ns as i128,
                DiffSort::Calls => s.calls as i128,
            })
        };
        (f(&self.before), f(&self.after))
    }

    /// After minus before in `col` (absent counts as zero).
    pub fn change(&self, col: DiffSort) -> i128 {
        let (b, a) = self.get(col);
        a - b
    }

    /// The function is only in the second trace.
    pub fn added(&self) -> bool {
        self.before.is_none() && self.after.is_some()
    }

    /// The function is only in the first trace.
    pub fn removed(&self) -> bool {
        self.before.is_some() && self.after.is_none()
    }
}

/// Whole-trace numbers for the header.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiffSummary {
    /// The traced program (`TraceMeta::program`).
    pub program: String,
    /// Calls recorded (in the selected threads).
    pub calls: u64,
    /// Session length, nanoseconds.
    pub duration_ns: u64,
}

/// The comparison, rows sorted as asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diff {
    /// The first trace's header numbers.
    pub before: DiffSummary,
    /// The second trace's header numbers.
    pub after: DiffSummary,
    /// One row per function in either trace.
    pub rows: Vec<DiffRow>,
}

/// Per full name, the summed report rows of one trace; stops at a read error.
fn side(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    threads: &[ThreadSel],
) -> (BTreeMap<String, Side>, DiffSummary, Option<TraceError>) {
    let ropts = ReportOptions {
        threads: threads.to_vec(),
        ..ReportOptions::default()
    };
    let mut b = ReportBuilder::new(meta, &ropts);
    let Ok(failed) = feed(&mut b, events);
    let (by_name, summary) = side_of(meta, &b.finish());
    (by_name, summary, failed)
}

/// [`side`] from a trace file's reader, whose threads a recorded file has
/// read apart ([`ReportBuilder::from_reader`]).
fn side_from<R: std::io::Read>(
    meta: &TraceMeta,
    reader: fgtrace_trace::TraceReader<R>,
    threads: &[ThreadSel],
) -> (BTreeMap<String, Side>, DiffSummary, Option<TraceError>) {
    let ropts = ReportOptions {
        threads: threads.to_vec(),
        ..ReportOptions::default()
    };
    let (report, read) = ReportBuilder::from_reader(meta, &ropts, reader);
    let (by_name, summary) = side_of(meta, &report);
    (by_name, summary, read.err())
}

/// Per full name, the summed rows of `report`.
fn side_of(meta: &TraceMeta, report: &crate::Report) -> (BTreeMap<String, Side>, DiffSummary) {
    let mut by_name: BTreeMap<String, Side> = BTreeMap::new();
    for f in &report.functions {
        let name = meta
            .sites
            .get(f.site as usize)
            .map_or_else(|| f.name.clone(), |s| s.full_name());
        let s = by_name.entry(name).or_default();
        s.calls += f.calls;
        s.total_ns = s.total_ns.saturating_add(f.total_ns);
        s.self_ns = s.self_ns.saturating_add(f.self_ns);
        let counter = |n: &str| {
            report
                .counter_names
                .iter()
                .position(|c| c == n)
                .map(|i| f.counters.get(i).copied().unwrap_or(0))
        };
        let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
        s.allocs = add(s.allocs, counter("allocs"));
        s.alloc_bytes = add(s.alloc_bytes, counter("alloc_bytes"));
        s.instructions = add(s.instructions, counter("instructions"));
    }
    let summary = DiffSummary {
        program: meta.program.clone(),
        calls: report.calls,
        duration_ns: meta.duration_ns,
    };
    (by_name, summary)
}

/// [`diff_with_error`] of two trace files' readers: each file's threads
/// are read apart on its cores (see
/// [`TraceReader::feed_threads`](fgtrace_trace::TraceReader::feed_threads)),
/// the files one after the other on every core when each has a thread per
/// core, else side by side on half the cores each.
pub fn diff_readers<RA: std::io::Read, RB: std::io::Read + Send>(
    meta_a: &TraceMeta,
    reader_a: fgtrace_trace::TraceReader<RA>,
    meta_b: &TraceMeta,
    reader_b: fgtrace_trace::TraceReader<RB>,
    opts: &DiffOptions,
) -> (Diff, Option<TraceError>) {
    let cores = fgtrace_trace::parallel::threads();
    let ((a, sa, ea), (b, sb, eb)) =
        if cores > 1 && meta_a.threads.len() >= cores && meta_b.threads.len() >= cores {
            // Each file has a thread for every core to read apart: one file
            // after the other, each on all of them, so that the slower file
            // does not leave a core idle while it finishes.
            (
                side_from(meta_a, reader_a, &opts.threads),
                side_from(meta_b, reader_b, &opts.threads),
            )
        } else {
            // Each file gets half the cores: two readers on one core each
            // take less work than two on every core (no handing events
            // between cores).
            fgtrace_trace::parallel::both(
                || side_from(meta_a, reader_a, &opts.threads),
                || side_from(meta_b, reader_b, &opts.threads),
            )
        };
    (compare(a, sa, b, sb, opts), ea.or(eb))
}

/// Compares two event streams. On a read error in either, the comparison of
/// what was read is returned with the first error.
pub fn diff_with_error(
    meta_a: &TraceMeta,
    events_a: impl IntoIterator<Item = Result<Event, TraceError>>,
    meta_b: &TraceMeta,
    events_b: impl IntoIterator<Item = Result<Event, TraceError>> + Send,
    opts: &DiffOptions,
) -> (Diff, Option<TraceError>) {
    // The two traces are read side by side when there is a core for each.
    let ((a, sa, ea), (b, sb, eb)) = fgtrace_trace::parallel::both(
        || side(meta_a, events_a, &opts.threads),
        || side(meta_b, events_b, &opts.threads),
    );
    (compare(a, sa, b, sb, opts), ea.or(eb))
}

/// The rows of two sides, sorted as `opts` asks.
fn compare(
    a: BTreeMap<String, Side>,
    sa: DiffSummary,
    b: BTreeMap<String, Side>,
    sb: DiffSummary,
    opts: &DiffOptions,
) -> Diff {
    let mut rows: Vec<DiffRow> = Vec::new();
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        rows.push(DiffRow {
            name: name.clone(),
            before: a.get(name).copied(),
            after: b.get(name).copied(),
        });
    }
    let col = opts.sort;
    rows.sort_by(|x, y| {
        let primary = match col {
            DiffSort::Name => std::cmp::Ordering::Equal,
            _ => y.change(col).abs().cmp(&x.change(col).abs()),
        };
        primary.then_with(|| x.name.cmp(&y.name))
    });
    Diff {
        before: sa,
        after: sb,
        rows,
    }
}

/// Compares two event streams; fails on the first read error.
///
/// ```
/// use fgtrace::view::diff::{diff, DiffOptions, DiffSort};
/// use fgtrace::view::ok_events;
///
/// #[fgtrace::traced]
/// fn step() -> u32 { 1 }
///
/// let record = |n: usize| -> Result<fgtrace::Trace, fgtrace::Error> {
///     let session = fgtrace::Session::start(fgtrace::Config::builtin())?;
///     (0..n).for_each(|_| { step(); });
///     session.stop()
/// };
/// let (before, after) = (record(2)?, record(5)?);
///
/// let opts = DiffOptions { sort: DiffSort::Calls, ..Default::default() };
/// let d = diff(&before.meta, ok_events(before.events()), &after.meta, ok_events(after.events()), &opts)?;
/// let row = d.rows.iter().find(|r| r.name.ends_with("step")).unwrap();
/// assert_eq!((row.before.unwrap().calls, row.after.unwrap().calls), (2, 5));
/// assert_eq!(row.change(DiffSort::Calls), 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn diff(
    meta_a: &TraceMeta,
    events_a: impl IntoIterator<Item = Result<Event, TraceError>>,
    meta_b: &TraceMeta,
    events_b: impl IntoIterator<Item = Result<Event, TraceError>> + Send,
    opts: &DiffOptions,
) -> Result<Diff, TraceError> {
    match diff_with_error(meta_a, events_a, meta_b, events_b, opts) {
        (d, None) => Ok(d),
        (_, Some(e)) => Err(e),
    }
}

/// `+12.34%`, `-3.00%`, `+inf%` from nothing.
fn pct(before: u64, after: u64) -> String {
    if before == 0 {
        return if after == 0 {
            "+0.00%".into()
        } else {
            "+inf%".into()
        };
    }
    let p = (after as f64 - before as f64) / before as f64 * 100.0;
    format!("{p:+.2}%")
}

impl Diff {
    /// The table as text: per function, total, self and calls before, after,
    /// and the change; `-` where the function is absent.
    pub fn write(&self, mut w: impl Write) -> io::Result<()> {
        let mut out = String::new();
        let summary = |s: &DiffSummary| {
            format!(
                "{} ({} calls, session {})",
                s.program,
                s.calls,
                human_duration(s.duration_ns)
            )
        };
        out.push_str(&format!(
            "# fgtrace diff: before {}\n",
            summary(&self.before)
        ));
        out.push_str(&format!(
            "#               after  {}\n",
            summary(&self.after)
        ));
        let added = self.rows.iter().filter(|r| r.added()).count();
        let removed = self.rows.iter().filter(|r| r.removed()).count();
        out.push_str(&format!(
            "# {} functions: {} in both, {added} added, {removed} removed\n#\n",
            self.rows.len(),
            self.rows.len() - added - removed
        ));
        let headers = [
            "Total before",
            "Total after",
            "Total diff",
            "Self before",
            "Self after",
            "Self diff",
            "Calls before",
            "Calls after",
            "Calls diff",
        ];
        let dash = || "-".to_string();
        let with_allocs = self.has(Metric::Allocs);
        let mut headers = headers.to_vec();
        if with_allocs {
            headers.extend(["Allocs before", "Allocs after", "Allocs diff"]);
        }
        let rows: Vec<(Vec<String>, String)> = self
            .rows
            .iter()
            .map(|r| {
                let b = r.before.unwrap_or_default();
                let a = r.after.unwrap_or_default();
                let (dt, ds, dc) = match (&r.before, &r.after) {
                    (None, Some(_)) => ("added".into(), "added".into(), format!("+{}", a.calls)),
                    (Some(_), None) => {
                        ("removed".into(), "removed".into(), format!("-{}", b.calls))
                    }
                    _ => (
                        pct(b.total_ns, a.total_ns),
                        pct(b.self_ns, a.self_ns),
                        format!("{:+}", a.calls as i128 - b.calls as i128),
                    ),
                };
                let cell =
                    |s: &Option<Side>, f: fn(&Side) -> String| s.as_ref().map_or_else(dash, f);
                let cells = vec![
                    cell(&r.before, |s| uftrace_time(s.total_ns)),
                    cell(&r.after, |s| uftrace_time(s.total_ns)),
                    dt,
                    cell(&r.before, |s| uftrace_time(s.self_ns)),
                    cell(&r.after, |s| uftrace_time(s.self_ns)),
                    ds,
                    cell(&r.before, |s| s.calls.to_string()),
                    cell(&r.after, |s| s.calls.to_string()),
                    dc,
                ];
                let mut cells = cells;
                if with_allocs {
                    let v = |s: &Option<Side>| s.and_then(|s| s.allocs);
                    cells.push(v(&r.before).map_or_else(dash, |v| v.to_string()));
                    cells.push(v(&r.after).map_or_else(dash, |v| v.to_string()));
                    cells.push(match (v(&r.before), v(&r.after)) {
                        (Some(b), Some(a)) => format!("{:+}", a as i128 - b as i128),
                        _ => dash(),
                    });
                }
                (cells, r.name.clone())
            })
            .collect();
        let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
        for (cells, _) in &rows {
            for (wd, c) in widths.iter_mut().zip(cells) {
                *wd = (*wd).max(c.len());
            }
        }
        for (h, wd) in headers.iter().zip(&widths) {
            out.push_str(&format!("  {h:>wd$}"));
        }
        out.push_str("  Function\n");
        for wd in &widths {
            out.push_str(&format!("  {}", "=".repeat(*wd)));
        }
        out.push_str("  ========\n");
        for (cells, name) in rows {
            for (c, wd) in cells.iter().zip(&widths) {
                out.push_str(&format!("  {c:>wd$}"));
            }
            out.push_str(&format!("  {name}\n"));
        }
        w.write_all(out.as_bytes())?;
        w.flush()
    }
}

// ---------------------------------------------------------------- the CI gate

/// What a regression gate compares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Inclusive time (the default).
    #[default]
    Total,
    /// Self time.
    SelfTime,
    /// Number of calls: deterministic, holds on any machine.
    Calls,
    /// Allocations, callees included (`fgtrace::alloc::Counting`): deterministic.
    Allocs,
    /// Bytes allocated, callees included.
    AllocBytes,
    /// Retired instructions, callees included (needs a PMU).
    Instructions,
}

impl FromStr for Metric {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "total" | "time" => Metric::Total,
            "self" => Metric::SelfTime,
            "calls" | "call" => Metric::Calls,
            "allocs" | "allocations" => Metric::Allocs,
            "alloc_bytes" | "bytes" => Metric::AllocBytes,
            "instructions" | "instr" => Metric::Instructions,
            _ => {
                return Err(format!(
                    "unknown metric `{s}` (total, self, calls, allocs, alloc_bytes, instructions)"
                ))
            }
        })
    }
}

impl Metric {
    fn of(self, s: &Side) -> Option<u64> {
        match self {
            Metric::Total => Some(s.total_ns),
            Metric::SelfTime => Some(s.self_ns),
            Metric::Calls => Some(s.calls),
            Metric::Allocs => s.allocs,
            Metric::AllocBytes => s.alloc_bytes,
            Metric::Instructions => s.instructions,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Metric::Total => "total time",
            Metric::SelfTime => "self time",
            Metric::Calls => "calls",
            Metric::Allocs => "allocations",
            Metric::AllocBytes => "bytes allocated",
            Metric::Instructions => "instructions",
        }
    }

    fn show(self, v: u64) -> String {
        match self {
            Metric::Total | Metric::SelfTime => uftrace_time(v),
            _ => v.to_string(),
        }
    }
}

/// A limit of the gate: `10%` for every function, or `parse=5%` for the
/// functions a name matches (display name, full path, a path suffix at a
/// `::` boundary, or a glob on the full path or such a suffix).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Limit {
    /// `None`: every function.
    pub function: Option<String>,
    /// Largest growth allowed, in percent.
    pub percent: f64,
}

impl FromStr for Limit {
    type Err = String;
    /// `10%`, `10`, `parse=5%`, `my_crate::parse=2.5%`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (function, pct) = match s.rsplit_once('=') {
            Some((f, p)) if !f.trim().is_empty() => (Some(f.trim().to_string()), p),
            Some(_) => return Err(format!("`{s}`: a function name goes before `=`")),
            None => (None, s),
        };
        let num = pct.trim().trim_end_matches('%').trim();
        let percent: f64 = num
            .parse()
            .ok()
            .filter(|p: &f64| p.is_finite() && *p >= 0.0)
            .ok_or_else(|| {
                format!("`{s}`: the limit is a percentage such as `10%` or `parse=5%`")
            })?;
        Ok(Limit { function, percent })
    }
}

fn name_matches(full: &str, pat: &str) -> bool {
    if full == pat
        || full.rsplit("::").next() == Some(pat)
        || (full.ends_with(pat) && full[..full.len() - pat.len()].ends_with("::"))
    {
        return true;
    }
    if !pat.contains(['*', '?']) {
        return false;
    }
    // A glob, on the full path or on any part of it that starts at a `::`
    // boundary, as a plain name matches a path suffix (`LineParser::*`).
    let glob = wildmatch::WildMatch::new(pat);
    glob.matches(full)
        || full
            .match_indices("::")
            .any(|(i, _)| glob.matches(&full[i + 2..]))
}

/// One function checked by the gate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateRow {
    /// `module::name`.
    pub name: String,
    /// The metric in the first trace (nanoseconds, calls, allocations, bytes or
    /// instructions, by [`GateResult::metric`]).
    pub before: u64,
    /// The metric in the second trace.
    pub after: u64,
    /// Growth in percent (`inf` from zero).
    pub change_percent: f64,
    /// The largest growth the limit allows, in percent.
    pub limit_percent: f64,
    /// `change_percent` is over `limit_percent`.
    pub regressed: bool,
}

/// The gate's verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateResult {
    /// What was compared.
    pub metric: Metric,
    /// Every function with a limit that both traces have.
    pub rows: Vec<GateRow>,
    /// Limits naming functions neither trace has both of (a misspelt name
    /// must not pass): an error.
    pub unmatched: Vec<String>,
    /// The metric is not in the traces (no allocation figures, no counters).
    pub unavailable: bool,
}

impl GateResult {
    /// Whether the gate passes.
    pub fn passed(&self) -> bool {
        !self.unavailable && self.unmatched.is_empty() && !self.rows.iter().any(|r| r.regressed)
    }

    /// The verdict as text: regressions (and what passed) in a table.
    pub fn write(&self, mut w: impl Write) -> io::Result<()> {
        let mut out = String::new();
        out.push_str(&format!(
            "
# gate on {}:",
            self.metric.label()
        ));
        if self.unavailable {
            out.push_str(&format!(
                " FAILED: the traces have no {} (record with {})
",
                self.metric.label(),
                match self.metric {
                    Metric::Allocs | Metric::AllocBytes =>
                        "fgtrace::alloc::Counting as the global allocator",
                    _ => "Config::counters",
                }
            ));
            w.write_all(out.as_bytes())?;
            return w.flush();
        }
        let bad = self.rows.iter().filter(|r| r.regressed).count();
        if self.passed() {
            out.push_str(&format!(
                " passed ({} functions within their limits)
",
                self.rows.len()
            ));
        } else {
            out.push_str(&format!(
                " FAILED ({bad} of {} functions over their limits{})
",
                self.rows.len(),
                if self.unmatched.is_empty() {
                    String::new()
                } else {
                    format!(", {} limits match nothing", self.unmatched.len())
                }
            ));
        }
        for u in &self.unmatched {
            out.push_str(&format!(
                "#   no function in both traces matches `{u}` (is the name right?)
"
            ));
        }
        let mut rows: Vec<&GateRow> = self.rows.iter().collect();
        rows.sort_by(|a, b| {
            b.regressed
                .cmp(&a.regressed)
                .then(b.change_percent.total_cmp(&a.change_percent))
                .then(a.name.cmp(&b.name))
        });
        let cells: Vec<[String; 6]> = rows
            .iter()
            .map(|r| {
                [
                    if r.regressed { "REGRESSED" } else { "ok" }.to_string(),
                    self.metric.show(r.before),
                    self.metric.show(r.after),
                    if r.change_percent.is_infinite() {
                        "+inf%".to_string()
                    } else {
                        format!("{:+.2}%", r.change_percent)
                    },
                    format!("{:.2}%", r.limit_percent),
                    r.name.clone(),
                ]
            })
            .collect();
        let head = ["", "Before", "After", "Change", "Limit", "Function"].map(String::from);
        let mut wd = [0usize; 5];
        for c in std::iter::once(&head).chain(&cells) {
            for i in 0..5 {
                wd[i] = wd[i].max(c[i].len());
            }
        }
        for c in std::iter::once(&head).chain(&cells) {
            out.push_str(&format!(
                "  {:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {:>w4$}  {}
",
                c[0],
                c[1],
                c[2],
                c[3],
                c[4],
                c[5],
                w0 = wd[0],
                w1 = wd[1],
                w2 = wd[2],
                w3 = wd[3],
                w4 = wd[4]
            ));
        }
        w.write_all(out.as_bytes())?;
        w.flush()
    }
}

impl Diff {
    /// Whether both traces have `metric` for some function.
    pub fn has(&self, metric: Metric) -> bool {
        self.rows.iter().any(|r| {
            r.before.as_ref().and_then(|s| metric.of(s)).is_some()
                || r.after.as_ref().and_then(|s| metric.of(s)).is_some()
        })
    }

    /// The CI gate: every function both traces have is checked against the
    /// last limit that names it (or the limit for every function, if any);
    /// it regresses when `metric` grew by more than that percentage.
    /// Functions only one trace has are not checked (the table shows them).
    pub fn gate(&self, metric: Metric, limits: &[Limit]) -> GateResult {
        let mut rows = Vec::new();
        let unavailable = !self.has(metric);
        let mut used = vec![false; limits.len()];
        for r in &self.rows {
            let (Some(b), Some(a)) = (
                r.before.as_ref().and_then(|s| metric.of(s)),
                r.after.as_ref().and_then(|s| metric.of(s)),
            ) else {
                continue;
            };
            let limit = limits
                .iter()
                .enumerate()
                .rev()
                .find(|(_, l)| {
                    l.function
                        .as_deref()
                        .is_some_and(|f| name_matches(&r.name, f))
                })
                .or_else(|| {
                    limits
                        .iter()
                        .enumerate()
                        .rev()
                        .find(|(_, l)| l.function.is_none())
                });
            let Some((i, limit)) = limit else {
                continue;
            };
            used[i] = true;
            let change = if b == 0 {
                if a == 0 {
                    0.0
                } else {
                    f64::INFINITY
                }
            } else {
                (a as f64 - b as f64) / b as f64 * 100.0
            };
            rows.push(GateRow {
                name: r.name.clone(),
                before: b,
                after: a,
                change_percent: change,
                limit_percent: limit.percent,
                regressed: change > limit.percent,
            });
        }
        let unmatched = limits
            .iter()
            .zip(&used)
            .filter(|(l, u)| l.function.is_some() && !**u)
            .map(|(l, _)| l.function.clone().unwrap_or_default())
            .collect();
        GateResult {
            metric,
            rows,
            unmatched,
            unavailable,
        }
    }

    /// The comparison as JSON (every row, durations in ns).
    pub fn write_json(&self, gate: Option<&GateResult>, mut w: impl Write) -> io::Result<()> {
        #[derive(Serialize)]
        struct Out<'a> {
            #[serde(flatten)]
            diff: &'a Diff,
            gate: Option<&'a GateResult>,
        }
        crate::human::write_pretty_json(&mut w, &Out { diff: self, gate })?;
        w.write_all(b"\n")?;
        w.flush()
    }
}

/// Compares two event streams and writes the table. On a read error in
/// either, the table of what was read is written, then the error returned.
pub fn write_diff<W: Write>(
    meta_a: &TraceMeta,
    events_a: impl IntoIterator<Item = Result<Event, TraceError>>,
    meta_b: &TraceMeta,
    events_b: impl IntoIterator<Item = Result<Event, TraceError>> + Send,
    opts: &DiffOptions,
    w: W,
) -> Result<(), TraceError> {
    let (d, failed) = diff_with_error(meta_a, events_a, meta_b, events_b, opts);
    d.write(io::BufWriter::new(w))?;
    failed.map_or(Ok(()), Err)
}

#[cfg(feature = "flame")]
mod differential {
    use super::super::flame::{render_svg, FlameError, FlameOptions};
    use super::super::folded::Folded;
    use std::io::{self, Write};

    /// Differential folded lines (`stack before after`), from two traced
    /// folded stacks (build them without `per_thread`: thread ids differ
    /// between runs), through inferno's `differential` module.
    pub fn differential_folded(
        before: &Folded,
        after: &Folded,
        mut out: impl Write,
    ) -> io::Result<()> {
        let mut a = Vec::new();
        before.write_to(&mut a)?;
        let mut b = Vec::new();
        after.write_to(&mut b)?;
        let mut lines = Vec::new();
        inferno::differential::from_readers(
            inferno::differential::Options::default(),
            &a[..],
            &b[..],
            &mut lines,
        )?;
        // inferno writes them in hash order: sort for stable output.
        let text = String::from_utf8_lossy(&lines);
        let mut sorted: Vec<&str> = text.lines().collect();
        sorted.sort_unstable();
        for l in sorted {
            writeln!(out, "{l}")?;
        }
        out.flush()
    }

    /// A differential flamegraph: widths from `after`, red where self time
    /// grew, blue where it shrank (inferno's colouring of differential input).
    pub fn differential_svg(
        before: &Folded,
        after: &Folded,
        opts: &FlameOptions,
        out: impl Write,
    ) -> Result<(), FlameError> {
        let mut lines = Vec::new();
        differential_folded(before, after, &mut lines)?;
        let text = String::from_utf8_lossy(&lines);
        render_svg(text.lines(), opts, out)
    }
}

#[cfg(feature = "flame")]
pub use differential::{differential_folded, differential_svg};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_changes() {
        assert_eq!(pct(100, 150), "+50.00%");
        assert_eq!(pct(200, 100), "-50.00%");
        assert_eq!(pct(0, 0), "+0.00%");
        assert_eq!(pct(0, 5), "+inf%");
        assert_eq!(pct(3, 3), "+0.00%");
    }

    #[test]
    fn sort_columns_parse() {
        assert_eq!("self".parse::<DiffSort>(), Ok(DiffSort::SelfTime));
        assert_eq!("Total".parse::<DiffSort>(), Ok(DiffSort::Total));
        assert!("avg"
            .parse::<DiffSort>()
            .unwrap_err()
            .contains("unknown sort column"));
    }

    #[test]
    fn gate_names_match_as_the_docs_say() {
        let full = "pipeline::LineParser::parse_line";
        for pat in [
            full,
            "parse_line",
            "LineParser::parse_line",
            "pipeline::*",
            "parse_*",
            "LineParser::*",
            "Line*::parse_line",
            "*::parse_line",
        ] {
            assert!(name_matches(full, pat), "{pat}");
        }
        for pat in [
            "Parser::parse_line",
            "arse_line",
            "Other::*",
            "LineParser",
            "parse",
        ] {
            assert!(!name_matches(full, pat), "{pat}");
        }
    }
}
