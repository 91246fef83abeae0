//! Per-call durations of one function, drawn with `plotters` as one SVG with
//! two panels: every call's duration against its start time (a scatter
//! series per thread, log-scale y when the durations span a wide range), and
//! a histogram of the durations with p50 and p99 marked. Beside it, the
//! slowest calls with their call paths (`root;...;fn`) as text.
//!
//! Memory does not grow with the function's calls: their count, min and
//! max, a log-linear histogram of their durations (the percentiles, within
//! 1%, and the histogram panel), the `top` slowest calls with their paths,
//! the open calls of each thread (bounded by call depth, for the paths),
//! and for the scatter the longest call per cell of a grid over time and
//! duration finer than the plot's pixels, made coarser past a fixed number
//! of cells. The scatter draws one dot per occupied pixel and thread, so a
//! million calls do not make a million SVG elements. Only a fit against a
//! recorded value (`plot --x`) keeps every call.
//!
//! Text is written as SVG `<text>` with a generic font family: no font file
//! is read at render time (plotters' `ttf` feature is off).

use super::human::{human_duration, uftrace_time};
use crate::consume::{collect, Consume};
use crate::report::Histogram;
use crate::threads::{shown, thread_mask, ThreadSel};
use fgtrace_trace::{Call, Event, Lost, SiteInfo, TraceError, TraceMeta, Value};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::convert::Infallible;
use std::fmt;
use std::io::{self, Write};

/// Memory [`DurationsBuilder::keeping_calls`] takes per call of its
/// function (`plot --x`): its thread, start and duration, and the values
/// it recorded (on a 22M-call trace, 237 MB peak for the 8.0M calls of one
/// function). Without it a plot's memory does not grow with its calls.
pub const PLOT_MEMORY_PER_CALL: u64 = 32;

/// Columns of the scatter's grid over the trace's duration (a plot is
/// about 1,100 pixels wide).
const X_CELLS: u64 = 4096;
/// Most cells of the scatter's grid kept at once (one call each, about 40
/// bytes): past it the grid is made coarser, durations first.
const MAX_CELLS: usize = 1 << 19;
/// How far the grid can be made coarser: a duration cell is then a whole
/// power of two, a time column 1/4 of the trace.
const MAX_Y_SHIFT: u32 = 10;
const MAX_X_SHIFT: u32 = 10;

/// A duration's row in the scatter's grid at full resolution: exact below
/// 1,024 ns, above it each power of two split in 1,024 rows (0.1%).
fn duration_row(ns: u64) -> u32 {
    if ns < 1024 {
        return ns as u32;
    }
    let e = 63 - ns.leading_zeros(); // >= 10
    let sub = ((ns >> (e - 10)) & 1023) as u32;
    1024 + (e - 10) * 1024 + sub
}

/// What to plot and how big.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlotOptions {
    /// Display name (`parse`, `Parser::parse`) or full path
    /// (`my_crate::parser::Parser::parse`).
    pub function: String,
    /// How many of the slowest calls to keep with their call paths.
    pub top: usize,
    /// Only these threads (empty: all).
    pub threads: Vec<ThreadSel>,
    /// SVG size in pixels (both panels).
    pub width: u32,
    /// Height of the SVG, pixels.
    pub height: u32,
    /// Headline; `None`: "Durations of `<full name>`".
    pub title: Option<String>,
}

impl Default for PlotOptions {
    fn default() -> Self {
        PlotOptions {
            function: String::new(),
            top: 10,
            threads: Vec::new(),
            width: 1200,
            height: 800,
            title: None,
        }
    }
}

/// Why no plot came out.
#[derive(Debug)]
pub enum PlotError {
    /// No traced function has this name.
    UnknownFunction {
        /// The name asked for.
        name: String,
        /// Names that contain the one asked for, to suggest.
        similar: Vec<String>,
    },
    /// The display name belongs to several different functions.
    Ambiguous {
        /// The name asked for.
        name: String,
        /// The full paths of the functions with that name: name one.
        candidates: Vec<String>,
    },
    /// The function was traced but has no calls (in the selected threads).
    NoCalls {
        /// The function's full path.
        name: String,
    },
    /// `--x VALUE`: the function records no value of that name.
    NoValue {
        /// The function's full path.
        name: String,
        /// The value name asked for.
        value: String,
        /// The values it does record.
        recorded: Vec<String>,
    },
    /// `--x VALUE`: the value is a string (`&'static str`) in every call
    /// that records it, so there is no axis to put it on.
    NotANumber {
        /// The function's full path.
        name: String,
        /// The value name asked for.
        value: String,
    },
    /// A fit against a value was asked of calls collected without
    /// [`DurationsBuilder::keeping_calls`].
    CallsNotKept {
        /// The function's full path.
        name: String,
    },
    /// The trace stream failed (after what was read had been drawn).
    Trace(TraceError),
    /// plotters could not draw.
    Draw(String),
    /// Writing the SVG failed.
    Io(io::Error),
}

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlotError::UnknownFunction { name, similar } if similar.is_empty() => {
                write!(f, "no traced function is named `{name}`")
            }
            PlotError::UnknownFunction { name, similar } => write!(
                f,
                "no traced function is named `{name}` (did you mean {}?)",
                quoted(similar)
            ),
            PlotError::Ambiguous { name, candidates } => write!(
                f,
                "`{name}` names {} functions: {}; give the full path",
                candidates.len(),
                quoted(candidates)
            ),
            PlotError::NoCalls { name } => write!(f, "`{name}` has no recorded calls"),
            PlotError::NoValue {
                name,
                value,
                recorded,
            } if recorded.is_empty() => write!(
                f,
                "`{name}` records no values, so none named `{value}`: \
                 add `#[traced(values({value} = ..))]` to it"
            ),
            PlotError::NoValue {
                name,
                value,
                recorded,
            } => write!(
                f,
                "`{name}` records no value named `{value}` (it records {})",
                quoted(recorded)
            ),
            PlotError::NotANumber { name, value } => write!(
                f,
                "`{name}`'s value `{value}` is a string, not a number: `plot --x` needs a \
                 number (group the calls by it with `report --by {value}` instead)"
            ),
            PlotError::CallsNotKept { name } => write!(
                f,
                "the calls of `{name}` were collected without keeping each call, \
                 which a fit against a value needs (DurationsBuilder::keeping_calls)"
            ),
            PlotError::Trace(e) => write!(f, "{e}"),
            PlotError::Draw(e) => write!(f, "cannot draw the plot: {e}"),
            PlotError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PlotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PlotError::Trace(e) => Some(e),
            PlotError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<TraceError> for PlotError {
    fn from(e: TraceError) -> Self {
        PlotError::Trace(e)
    }
}

impl From<io::Error> for PlotError {
    fn from(e: io::Error) -> Self {
        PlotError::Io(e)
    }
}

fn quoted(names: &[String]) -> String {
    let v: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    v.join(", ")
}

/// The sites a name means: all sites whose full path is `name`, else all
/// whose display name is `name` provided they are one function (one full
/// path; a function can have several sites, e.g. one per generic instance).
pub fn find_sites(meta: &TraceMeta, name: &str) -> Result<Vec<u32>, PlotError> {
    let by = |f: &dyn Fn(&SiteInfo) -> bool| -> Vec<u32> {
        meta.sites
            .iter()
            .enumerate()
            .filter(|(_, s)| f(s))
            .map(|(i, _)| i as u32)
            .collect()
    };
    let full = by(&|s| s.full_name() == name);
    if !full.is_empty() {
        return Ok(full);
    }
    let display = by(&|s| s.name == name);
    let mut paths: Vec<String> = display
        .iter()
        .map(|&i| meta.sites[i as usize].full_name())
        .collect();
    paths.sort();
    paths.dedup();
    match paths.len() {
        0 => {
            let lower = name.to_ascii_lowercase();
            let mut similar: Vec<String> = meta
                .sites
                .iter()
                .map(SiteInfo::full_name)
                .filter(|f| !lower.is_empty() && f.to_ascii_lowercase().contains(&lower))
                .collect();
            similar.sort();
            similar.dedup();
            similar.truncate(5);
            Err(PlotError::UnknownFunction {
                name: name.to_string(),
                similar,
            })
        }
        1 => Ok(display),
        _ => Err(PlotError::Ambiguous {
            name: name.to_string(),
            candidates: paths,
        }),
    }
}

/// One call of the plotted function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallPoint {
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// Entry time, nanoseconds since session start.
    pub start_ns: u64,
    /// Duration, nanoseconds.
    pub dur_ns: u64,
}

/// One of the slowest calls, with the sites of its call path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlowCall {
    /// Its thread, start and duration.
    pub call: CallPoint,
    /// Sites from the thread's outermost recorded call down to the call itself.
    pub path: Vec<u32>,
    /// The values the call recorded (`#[traced(values(..))]`), if any.
    pub values: Vec<Value>,
}

impl SlowCall {
    /// `root;...;fn` with display names.
    pub fn path_names(&self, meta: &TraceMeta) -> String {
        let names: Vec<&str> = self.path.iter().map(|&s| meta.site_name(s)).collect();
        names.join(";")
    }

    /// Its values as `len=83, ret=Ok(3)` (empty when it has none).
    pub fn values_text(&self, meta: &TraceMeta) -> String {
        values_text(meta, self.path.last().copied(), &self.values)
    }
}

/// `len=83, ret=Ok(3)`: `values` with the names of `site`.
pub fn values_text(meta: &TraceMeta, site: Option<u32>, values: &[Value]) -> String {
    let Some(info) = site.and_then(|s| meta.sites.get(s as usize)) else {
        return String::new();
    };
    let v = fgtrace_trace::CallValues {
        thread: 0,
        values: values.to_vec(),
    };
    let parts: Vec<String> = v
        .named(info, &meta.strings)
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    parts.join(", ")
}

/// The calls of one function, as collected from a trace: their statistics,
/// the slowest with their paths, and a sample of them for the scatter, in
/// memory that does not grow with the number of calls.
#[derive(Clone, Debug)]
pub struct CallDurations {
    /// Full path of the function.
    pub name: String,
    /// The function's sites (one function can have several, e.g. one per
    /// generic instance).
    pub sites: Vec<u32>,
    /// How many calls were read.
    pub count: u64,
    /// Calls per thread (index into `TraceMeta::threads`), in thread order.
    pub per_thread: Vec<(u32, u64)>,
    /// The scatter's dots: per thread and cell of a grid over time and
    /// duration (finer than the plot's pixels), the longest call in it.
    pub dots: Vec<CallPoint>,
    /// Every duration, in a log-linear histogram (each within 1%).
    pub histogram: Histogram,
    /// Every call, in stream order: only when the builder kept them
    /// ([`DurationsBuilder::keeping_calls`], for `plot --x`); else empty.
    pub calls: Vec<CallPoint>,
    /// The values each call recorded, parallel to `calls` (empty where
    /// none); empty when calls are not kept or no call recorded any.
    pub values: Vec<Vec<Value>>,
    /// The slowest calls, slowest first (ties: earlier first).
    pub slowest: Vec<SlowCall>,
    /// Nearest-rank percentiles of the durations, within 1% (the
    /// histogram's, as `report`'s).
    pub p50_ns: u64,
    /// 99th percentile, nanoseconds (nearest rank, within 1%).
    pub p99_ns: u64,
    /// Shortest call, nanoseconds (exact).
    pub min_ns: u64,
    /// Longest call, nanoseconds (exact).
    pub max_ns: u64,
    /// Call records lost on the selected threads (the plot may miss calls).
    pub lost: u64,
}

impl CallDurations {
    /// Threads (indexes) with at least one call, in order.
    pub fn threads(&self) -> Vec<u32> {
        self.per_thread.iter().map(|&(t, _)| t).collect()
    }
}

/// Heap entry: ordered by duration, then earlier start first, then arrival.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Slow {
    dur_ns: u64,
    start: Reverse<u64>,
    seq: Reverse<u64>,
    thread: u32,
    path: Vec<u32>,
}

#[derive(Clone, Copy)]
struct Open {
    site: u32,
    depth: u32,
}

/// The scatter's grid: per thread and cell the longest call in it. Cells
/// are columns of the trace's duration and rows of [`duration_row`],
/// shifted right as the grid is made coarser to stay under [`MAX_CELLS`].
struct Grid {
    span_ns: u64,
    x_shift: u32,
    y_shift: u32,
    cells: HashMap<(u32, u32, u32), CallPoint>,
}

impl Grid {
    fn new(span_ns: u64) -> Self {
        Grid {
            span_ns: span_ns.max(1),
            x_shift: 0,
            y_shift: 0,
            cells: HashMap::new(),
        }
    }

    fn key(&self, p: &CallPoint) -> (u32, u32, u32) {
        let x = (u128::from(p.start_ns) * u128::from(X_CELLS) / u128::from(self.span_ns))
            .min(u128::from(X_CELLS - 1)) as u32;
        (
            p.thread,
            x >> self.x_shift,
            duration_row(p.dur_ns) >> self.y_shift,
        )
    }

    fn add(&mut self, p: CallPoint) {
        let key = self.key(&p);
        self.keep(key, p);
        if self.cells.len() > MAX_CELLS && self.coarser() {
            let old = std::mem::take(&mut self.cells);
            for p in old.into_values() {
                self.keep(self.key(&p), p);
            }
        }
    }

    /// The longest call of a cell (of equal ones, the earlier).
    fn keep(&mut self, key: (u32, u32, u32), p: CallPoint) {
        let e = self.cells.entry(key).or_insert(p);
        if (p.dur_ns, Reverse(p.start_ns)) > (e.dur_ns, Reverse(e.start_ns)) {
            *e = p;
        }
    }

    fn coarser(&mut self) -> bool {
        if self.y_shift < MAX_Y_SHIFT {
            self.y_shift += 1;
        } else if self.x_shift < MAX_X_SHIFT {
            self.x_shift += 1;
        } else {
            return false;
        }
        true
    }

    fn dots(self) -> Vec<CallPoint> {
        let mut d: Vec<CallPoint> = self.cells.into_values().collect();
        d.sort_unstable_by_key(|p| (p.thread, p.start_ns, p.dur_ns));
        d
    }
}

/// Collects a function's calls from events pushed one at a time.
pub struct DurationsBuilder<'a> {
    meta: &'a TraceMeta,
    name: String,
    want: Vec<bool>,
    sites: Vec<u32>,
    mask: Vec<bool>,
    filtered: bool,
    top: usize,
    stacks: Vec<Vec<Open>>,
    count: u64,
    min: u64,
    max: u64,
    per_thread: BTreeMap<u32, u64>,
    histogram: Histogram,
    grid: Grid,
    keep_calls: bool,
    calls: Vec<CallPoint>,
    /// Min-heap (through `Reverse`) of the `top` slowest so far.
    heap: BinaryHeap<Reverse<Slow>>,
    /// The values of calls that entered the heap, by arrival (pruned to
    /// the heap's now and then).
    slow_values: HashMap<u64, Vec<Value>>,
    seq: u64,
    lost_events: Vec<u64>,
    values: Vec<Vec<Value>>,
    /// The thread of the last event, and whether it was a wanted call (its
    /// values, which follow it after its counters, go to that call).
    last_wanted: Option<u32>,
    /// Whether the last wanted call entered the heap.
    last_in_heap: bool,
}

impl<'a> DurationsBuilder<'a> {
    /// Resolves `opts.function` (see [`find_sites`]).
    pub fn new(meta: &'a TraceMeta, opts: &PlotOptions) -> Result<Self, PlotError> {
        let sites = find_sites(meta, &opts.function)?;
        Ok(Self::for_sites(meta, &sites, opts.top, &opts.threads))
    }

    /// Collects the calls of these sites (one function), keeping the `top` slowest with paths.
    pub fn for_sites(
        meta: &'a TraceMeta,
        sites: &[u32],
        top: usize,
        threads: &[ThreadSel],
    ) -> Self {
        let mut want = vec![false; meta.sites.len()];
        for &s in sites {
            if let Some(w) = want.get_mut(s as usize) {
                *w = true;
            }
        }
        let name = sites
            .first()
            .and_then(|&s| meta.sites.get(s as usize))
            .map_or_else(|| "[unknown site]".to_string(), SiteInfo::full_name);
        DurationsBuilder {
            meta,
            name,
            want,
            sites: sites.to_vec(),
            mask: thread_mask(meta, threads),
            filtered: !threads.is_empty(),
            top,
            stacks: Vec::new(),
            count: 0,
            min: u64::MAX,
            max: 0,
            per_thread: BTreeMap::new(),
            histogram: Histogram::default(),
            grid: Grid::new(meta.duration_ns),
            keep_calls: false,
            calls: Vec::new(),
            heap: BinaryHeap::new(),
            slow_values: HashMap::new(),
            seq: 0,
            lost_events: Vec::new(),
            values: Vec::new(),
            last_wanted: None,
            last_in_heap: false,
        }
    }

    /// Also keeps every call and its values ([`CallDurations::calls`]), as
    /// a fit against a recorded value needs: [`PLOT_MEMORY_PER_CALL`]
    /// bytes per call.
    pub fn keeping_calls(mut self) -> Self {
        self.keep_calls = true;
        self
    }

    /// Pushes events until the stream ends or fails; what was read is kept either way.
    pub fn extend(
        &mut self,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
    ) -> Result<(), TraceError> {
        collect(self, events)
    }

    fn call(&mut self, c: &Call) {
        let t = c.thread as usize;
        if self.stacks.len() <= t {
            self.stacks.resize_with(t + 1, Vec::new);
        }
        let stack = &mut self.stacks[t];
        while stack.last().is_some_and(|o| o.depth >= c.depth) {
            stack.pop();
        }
        if self.want.get(c.site as usize).copied().unwrap_or(false) {
            let p = CallPoint {
                thread: c.thread,
                start_ns: c.start_ns,
                dur_ns: c.dur_ns,
            };
            self.count += 1;
            self.min = self.min.min(c.dur_ns);
            self.max = self.max.max(c.dur_ns);
            *self.per_thread.entry(c.thread).or_default() += 1;
            self.histogram.add(c.dur_ns);
            self.grid.add(p);
            if self.keep_calls {
                self.calls.push(p);
            }
            self.last_wanted = Some(c.thread);
            self.last_in_heap = false;
            self.seq += 1;
            // The path is built only for a call that makes the list.
            let beats = self.heap.len() < self.top
                || self.heap.peek().is_some_and(|Reverse(m)| {
                    (c.dur_ns, Reverse(c.start_ns)) > (m.dur_ns, m.start)
                });
            if self.top > 0 && beats {
                let mut path: Vec<u32> = stack.iter().map(|o| o.site).collect();
                path.push(c.site);
                self.heap.push(Reverse(Slow {
                    dur_ns: c.dur_ns,
                    start: Reverse(c.start_ns),
                    seq: Reverse(self.seq),
                    thread: c.thread,
                    path,
                }));
                if self.heap.len() > self.top {
                    self.heap.pop();
                }
                self.last_in_heap = true;
            }
        }
        stack.push(Open {
            site: c.site,
            depth: c.depth,
        });
    }

    fn lost(&mut self, l: &Lost) {
        let t = l.thread as usize;
        if self.lost_events.len() <= t {
            self.lost_events.resize(t + 1, 0);
        }
        self.lost_events[t] += l.count;
    }

    /// The values of the last wanted call.
    fn values(&mut self, values: &[Value]) {
        if self.keep_calls {
            // Grown to the calls only once some call has values.
            self.values.resize(self.calls.len(), Vec::new());
            if let Some(slot) = self.values.last_mut() {
                *slot = values.to_vec();
            }
        }
        if self.last_in_heap {
            self.slow_values.insert(self.seq, values.to_vec());
            if self.slow_values.len() > 2 * self.top + 16 {
                let kept: HashSet<u64> = self.heap.iter().map(|Reverse(s)| s.seq.0).collect();
                self.slow_values.retain(|seq, _| kept.contains(seq));
            }
        }
    }

    /// The collected calls; [`PlotError::NoCalls`] when there are none.
    pub fn finish(mut self) -> Result<CallDurations, PlotError> {
        if !self.values.is_empty() {
            self.values.resize(self.calls.len(), Vec::new());
        }
        if self.count == 0 {
            return Err(PlotError::NoCalls { name: self.name });
        }
        let lost = self
            .meta
            .threads
            .iter()
            .enumerate()
            .filter(|&(i, _)| shown(&self.mask, self.filtered, i as u32))
            .map(|(i, t)| t.lost.max(self.lost_events.get(i).copied().unwrap_or(0)))
            .fold(0, u64::saturating_add);
        let mut slow_values = self.slow_values;
        let mut slowest: Vec<SlowCall> = self
            .heap
            .into_iter()
            .map(|Reverse(s)| SlowCall {
                call: CallPoint {
                    thread: s.thread,
                    start_ns: s.start.0,
                    dur_ns: s.dur_ns,
                },
                values: slow_values.remove(&s.seq.0).unwrap_or_default(),
                path: s.path,
            })
            .collect();
        slowest.sort_by(|a, b| {
            b.call
                .dur_ns
                .cmp(&a.call.dur_ns)
                .then(a.call.start_ns.cmp(&b.call.start_ns))
        });
        Ok(CallDurations {
            name: self.name,
            sites: self.sites,
            count: self.count,
            per_thread: self.per_thread.into_iter().collect(),
            dots: self.grid.dots(),
            p50_ns: self.histogram.quantile(0.50),
            p99_ns: self.histogram.quantile(0.99),
            histogram: self.histogram,
            min_ns: self.min,
            max_ns: self.max,
            calls: self.calls,
            values: self.values,
            slowest,
            lost,
        })
    }
}

impl Consume for DurationsBuilder<'_> {
    type Error = Infallible;

    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        if !shown(&self.mask, self.filtered, ev.thread()) {
            return Ok(());
        }
        let last = self.last_wanted.take();
        match ev {
            Event::Call(c) => self.call(c),
            Event::Lost(l) => self.lost(l),
            Event::Counters(c) => self.last_wanted = last.filter(|&t| t == c.thread),
            Event::Values(v) if last == Some(v.thread) => self.values(&v.values),
            _ => {}
        }
        Ok(())
    }
}

/// The slowest calls as text: duration, start, thread, call path.
pub fn write_slowest(d: &CallDurations, meta: &TraceMeta, mut w: impl Write) -> io::Result<()> {
    writeln!(
        w,
        "# {}: {} call{}, p50 {}, p99 {}, max {}{}",
        d.name,
        d.count,
        if d.count == 1 { "" } else { "s" },
        human_duration(d.p50_ns),
        human_duration(d.p99_ns),
        human_duration(d.max_ns),
        if d.lost > 0 {
            format!(", LOST {} records", d.lost)
        } else {
            String::new()
        }
    )?;
    if d.slowest.is_empty() {
        return w.flush();
    }
    writeln!(w, "# slowest {}:", d.slowest.len())?;
    let width = d
        .slowest
        .iter()
        .map(|s| meta.thread_label(s.call.thread).len())
        .max()
        .unwrap_or(6)
        .max(6);
    writeln!(
        w,
        "#   DURATION         START  {:<width$}  CALL PATH",
        "THREAD"
    )?;
    for s in &d.slowest {
        let vals = s.values_text(meta);
        writeln!(
            w,
            "  {:>10}  {:>12}  {:<width$}  {}{}",
            uftrace_time(s.call.dur_ns),
            uftrace_time(s.call.start_ns),
            meta.thread_label(s.call.thread),
            s.path_names(meta),
            if vals.is_empty() {
                String::new()
            } else {
                format!("({vals})")
            }
        )?;
    }
    w.flush()
}

/// Reads `events`, draws the SVG into `svg` and the slowest calls into
/// `text`. On a read error, what was read is drawn (if it holds any call of
/// the function) and the error is returned.
///
/// ```
/// use fgtrace::view::ok_events;
/// use fgtrace::view::plot::{write_plot, PlotOptions};
///
/// #[fgtrace::traced]
/// fn step(i: u64) -> u64 { (0..i).sum() }
///
/// let session = fgtrace::Session::start(fgtrace::Config::builtin())?;
/// (0..50).for_each(|i| { step(i); });
/// let trace = session.stop()?;
///
/// let opts = PlotOptions { function: "step".into(), top: 3, ..Default::default() };
/// let (mut svg, mut slowest) = (Vec::new(), Vec::new());
/// let d = write_plot(&trace.meta, ok_events(trace.events()), &opts, &mut svg, &mut slowest)?;
/// assert_eq!(d.count, 50);
/// assert!(d.min_ns <= d.p50_ns && d.p50_ns <= d.p99_ns && d.p99_ns <= d.max_ns);
/// assert_eq!(d.slowest.len(), 3);
/// assert!(String::from_utf8(svg)?.contains("<svg"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_plot(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    opts: &PlotOptions,
    mut svg: impl Write,
    text: impl Write,
) -> Result<CallDurations, PlotError> {
    let mut b = DurationsBuilder::new(meta, opts)?;
    let read = b.extend(events);
    let d = match (b.finish(), read) {
        (Ok(d), read) => (d, read),
        (Err(_), Err(e)) => return Err(PlotError::Trace(e)),
        (Err(e), Ok(())) => return Err(e),
    };
    let drawn = durations_svg(&d.0, meta, opts)?;
    svg.write_all(drawn.as_bytes())?;
    svg.flush()?;
    write_slowest(&d.0, meta, text)?;
    d.1?;
    Ok(d.0)
}

mod draw;
pub mod growth;

pub use draw::durations_svg;
use draw::{draw_err, log_tick};

#[cfg(test)]
mod tests;
