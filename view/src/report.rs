//! Per-function statistics (uftrace `report`, ftrace's function profiler):
//! calls, total (inclusive) and self time, average, min, max, p50, p99 and the
//! sample variance s², plus async futures' whole spans in their own section.
//!
//! Built in one streaming pass: each thread keeps a stack of its open calls
//! (pre-order plus depth says who is inside whom), so a call's self time, its
//! duration minus the durations of its recorded children, is known when the
//! next call at its depth or above arrives. Memory is per function, never per
//! call. Recursive calls count at every level, as in ftrace's profiler, so a
//! recursive function's total can exceed the session.

use super::format::{human_duration, loss_lines, push_ftrace_duration, uftrace_time};
use crate::consume::Consume;
use crate::threads::{shown, thread_mask, ThreadSel};
use fgtrace_trace::{Call, Event, FutureSpan, Lost, OffTime, TraceError, TraceMeta};
use serde::Serialize;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::str::FromStr;

/// What the rows are sorted by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Column {
    Calls,
    /// Inclusive time (the default, like uftrace and ftrace's profiler).
    #[default]
    Total,
    SelfTime,
    Avg,
    Min,
    Max,
    P50,
    P99,
    /// s², the sample variance.
    Variance,
    /// On-CPU total time (inclusive time minus off-CPU time).
    OnCpu,
    /// Off-CPU total time (switched out: blocked or preempted).
    OffCpu,
    Name,
}

impl FromStr for Column {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "calls" | "call" | "hit" => Column::Calls,
            "total" | "time" => Column::Total,
            "self" => Column::SelfTime,
            "avg" => Column::Avg,
            "min" => Column::Min,
            "max" => Column::Max,
            "p50" | "median" => Column::P50,
            "p99" => Column::P99,
            "s2" | "s^2" | "var" | "variance" => Column::Variance,
            "oncpu" | "on-cpu" => Column::OnCpu,
            "offcpu" | "off-cpu" => Column::OffCpu,
            "name" | "func" | "function" => Column::Name,
            _ => {
                return Err(format!(
                "unknown sort column `{s}` (calls, total, self, avg, min, max, p50, p99, s2, oncpu, offcpu, name)"
            ))
            }
        })
    }
}

/// Text layout of [`Report::write`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReportStyle {
    /// Every column, durations in uftrace's units (`%3d.%03d us/ms/s`).
    #[default]
    Table,
    /// Exactly ftrace's `trace_stat/function<N>` layout: Function, Hit, Time, Avg, s^2.
    Ftrace,
    /// JSON (every field of [`Report`], durations in ns), for machine consumers.
    Json,
}

/// Report options; `Default` sorts by total time, largest first, all threads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportOptions {
    pub sort_by: Column,
    /// Smallest first (names: Z to A).
    pub reverse: bool,
    /// Only these threads (empty: all).
    pub threads: Vec<ThreadSel>,
    pub style: ReportStyle,
}

/// One function's numbers; durations in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionStats {
    pub site: u32,
    pub name: String,
    /// Every call: the recorded ones plus `count_only`.
    pub calls: u64,
    /// Calls counted but not recorded: the function was switched to
    /// count-only on a thread (`Config::auto_exclude`, see
    /// `TraceMeta::count_only`). The durations and counters below are
    /// those of the recorded calls (before the switch).
    pub count_only: u64,
    /// Sum of inclusive durations.
    pub total_ns: u64,
    /// Sum of (duration minus the recorded children's durations).
    pub self_ns: u64,
    /// `total_ns` / the recorded calls, truncated.
    pub avg_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// Median, from a log-bucketed histogram (within 1%, see [`Histogram`]).
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// Sample variance (n - 1 in the denominator) of the durations, ns²; 0 for one call.
    pub variance_ns2: f64,
    /// Calls ended by a panic unwinding through them.
    pub unwound: u64,
    /// Per-call counters summed over the calls, callees included (recursion
    /// counted at every level, as for `total_ns`), one per
    /// [`Report::counter_names`]: allocation figures, instructions.
    pub counters: Vec<u64>,
    /// The same, minus the recorded children's: the function's own.
    pub self_counters: Vec<u64>,
    /// Off-CPU time of the calls, where the trace has it for every thread
    /// they ran on (else `None`: never zeros that look real).
    pub off_cpu: Option<OffStats>,
}

/// A function's off-CPU time: inclusive (`total`) and its own (`self_`,
/// minus what its recorded children spent off the CPU). On-CPU time is the
/// duration minus these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OffStats {
    pub total: OffTime,
    pub self_: OffTime,
}

/// One async fn's whole futures (first poll to completion); durations in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FutureStats {
    pub site: u32,
    pub name: String,
    pub futures: u64,
    pub polls: u64,
    /// Dropped before completion.
    pub cancelled: u64,
    pub total_ns: u64,
    pub avg_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub variance_ns2: f64,
}

/// A thread that lost records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadLoss {
    pub thread: u32,
    /// `name-tid`.
    pub label: String,
    /// Records lost: the larger of the metadata's count and the `Lost` events' sum.
    pub lost: u64,
    /// Calls not recorded because the shadow stack was full.
    pub overruns: u64,
}

/// The whole report as numbers, sorted as the options asked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub program: String,
    pub pid: u32,
    pub duration_ns: u64,
    /// Calls counted (of the selected threads), count-only ones included.
    pub calls: u64,
    /// Of these, the calls of functions switched to count-only: counted,
    /// not recorded (see [`FunctionStats::count_only`]).
    pub count_only: u64,
    /// Selected threads that recorded at least one call or future.
    pub threads: usize,
    /// The losses (loss lines), one per thread with any non-zero counter.
    pub losses: Vec<ThreadLoss>,
    /// Text of the loss lines, as both views print them.
    pub loss_lines: Vec<String>,
    pub functions: Vec<FunctionStats>,
    pub futures: Vec<FutureStats>,
    /// Names of the per-call counters (`allocs`, `alloc_bytes`, ...,
    /// `instructions`), as in the trace.
    pub counter_names: Vec<String>,
    /// The trace's clock counts cycles (a board's `mcycle`): its ticks per
    /// nanosecond, so a duration is a cycle count and, with `instructions`,
    /// the table shows IPC (a trace with a `cycles` counter shows it too).
    pub cycles_per_ns: Option<f64>,
    /// Whether the rows have off-CPU time: `Ok(())`, or why not
    /// (`None`: the trace was recorded without it).
    pub off_cpu: Option<Result<(), String>>,
}

/// Unsigned 256-bit numbers as (high, low) halves: just what an exact
/// variance needs.
mod wide {
    pub type U256 = (u128, u128);

    /// `a * b`, exactly.
    pub fn mul(a: u128, b: u128) -> U256 {
        let (a1, a0) = (a >> 64, a & u128::from(u64::MAX));
        let (b1, b0) = (b >> 64, b & u128::from(u64::MAX));
        let (mid, carry_mid) = (a0 * b1).overflowing_add(a1 * b0);
        let (lo, carry_lo) = (a0 * b0).overflowing_add(mid << 64);
        let hi = a1 * b1 + (mid >> 64) + (u128::from(carry_mid) << 64) + u128::from(carry_lo);
        (hi, lo)
    }

    /// `a - b`, or 0 when `b` is larger.
    pub fn sub(a: U256, b: U256) -> U256 {
        if a < b {
            return (0, 0);
        }
        let (lo, borrow) = a.1.overflowing_sub(b.1);
        (a.0 - b.0 - u128::from(borrow), lo)
    }

    pub fn to_f64(a: U256) -> f64 {
        a.0 as f64 * 2f64.powi(128) + a.1 as f64
    }
}

/// Log-linear histogram for percentiles in bounded memory: values below 128 ns
/// are exact; above, each power of two is split in 64 buckets, so a bucket is
/// at most 1/64 of its lower bound wide and its midpoint is within 1/128
/// (0.8%) of any value in it. The midpoint is then clamped to the smallest and
/// largest value the bucket saw, which only brings it closer (and makes it
/// exact when the bucket holds one distinct value). Buckets are stored
/// sparsely: memory grows with the spread of a function's durations, not
/// with its number of calls.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    /// Counts of the exact values below [`Histogram::EXACT`], by value,
    /// grown to the largest seen (most calls of small functions land
    /// here: no tree walk for them).
    exact: Vec<u64>,
    /// The buckets above.
    buckets: BTreeMap<u16, Bucket>,
    n: u64,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    count: u64,
    min: u64,
    max: u64,
}

impl Histogram {
    const EXACT: u64 = 128;
    const SUB_BITS: u32 = 6;

    pub fn add(&mut self, v: u64) {
        if v < Self::EXACT {
            let i = v as usize;
            if self.exact.len() <= i {
                self.exact.resize(i + 1, 0);
            }
            self.exact[i] += 1;
            self.n += 1;
            return;
        }
        let b = self.buckets.entry(Self::index(v)).or_insert(Bucket {
            count: 0,
            min: v,
            max: v,
        });
        b.count += 1;
        b.min = b.min.min(v);
        b.max = b.max.max(v);
        self.n += 1;
    }

    /// Adds every value of `o`.
    pub fn merge(&mut self, o: &Histogram) {
        if self.exact.len() < o.exact.len() {
            self.exact.resize(o.exact.len(), 0);
        }
        for (a, b) in self.exact.iter_mut().zip(&o.exact) {
            *a += b;
        }
        for (&i, b) in &o.buckets {
            match self.buckets.entry(i) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(*b);
                }
                std::collections::btree_map::Entry::Occupied(mut e) => {
                    let m = e.get_mut();
                    m.count += b.count;
                    m.min = m.min.min(b.min);
                    m.max = m.max.max(b.max);
                }
            }
        }
        self.n += o.n;
    }

    fn index(v: u64) -> u16 {
        if v < Self::EXACT {
            return v as u16;
        }
        let e = 63 - v.leading_zeros(); // >= 7
        let sub = (v >> (e - Self::SUB_BITS)) & ((1 << Self::SUB_BITS) - 1);
        (Self::EXACT + (e as u64 - 7) * (1 << Self::SUB_BITS) + sub) as u16
    }

    /// The midpoint of bucket `i`.
    fn midpoint(i: u16) -> u64 {
        let i = i as u64;
        if i < Self::EXACT {
            return i;
        }
        let e = (i - Self::EXACT) / (1 << Self::SUB_BITS) + 7;
        let sub = (i - Self::EXACT) % (1 << Self::SUB_BITS);
        let shift = e as u32 - Self::SUB_BITS;
        let lo = ((1 << Self::SUB_BITS) + sub) << shift;
        lo + ((1u64 << shift) >> 1)
    }

    /// Nearest-rank quantile (`q` in 0..=1): the value of rank ceil(q n), within 1%.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (v, &count) in self.exact.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return v as u64;
            }
        }
        for (&i, b) in &self.buckets {
            seen += b.count;
            if seen >= rank {
                return Self::midpoint(i).clamp(b.min, b.max);
            }
        }
        0
    }
}

/// Streaming accumulator of one duration series.
///
/// The variance comes from exact integer sums (of the durations and of
/// their squares), so it does not depend on the order the durations came
/// in: a series accumulated in parts on several cores and merged gives the
/// same figure, to the bit, as one accumulated in order.
#[derive(Clone, Debug, Default)]
struct Durations {
    n: u64,
    total: u64,
    min: u64,
    max: u64,
    /// Σx and Σx² (the latter saturates past 2^128 ns², a sum no real
    /// series reaches: 2^28 calls of 12 days each).
    sum: u128,
    sum_sq: u128,
    hist: Histogram,
}

impl Durations {
    fn add(&mut self, ns: u64) {
        self.min = if self.n == 0 { ns } else { self.min.min(ns) };
        self.max = self.max.max(ns);
        self.n += 1;
        self.total = self.total.saturating_add(ns);
        let x = u128::from(ns);
        self.sum += x;
        self.sum_sq = self.sum_sq.saturating_add(x * x);
        self.hist.add(ns);
    }

    /// Adds another series of the same function.
    fn merge(&mut self, o: &Durations) {
        if o.n == 0 {
            return;
        }
        self.min = if self.n == 0 {
            o.min
        } else {
            self.min.min(o.min)
        };
        self.max = self.max.max(o.max);
        self.n += o.n;
        self.total = self.total.saturating_add(o.total);
        self.sum += o.sum;
        self.sum_sq = self.sum_sq.saturating_add(o.sum_sq);
        self.hist.merge(&o.hist);
    }

    /// The sample variance, (nΣx² − (Σx)²) / (n(n − 1)), its numerator
    /// computed exactly in 256 bits.
    fn variance(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let n = u128::from(self.n);
        let num = wide::sub(wide::mul(n, self.sum_sq), wide::mul(self.sum, self.sum));
        wide::to_f64(num) / (self.n as f64 * (self.n - 1) as f64)
    }

    fn quantile(&self, q: f64) -> u64 {
        self.hist.quantile(q)
    }
}

#[derive(Default)]
struct SiteAcc {
    d: Durations,
    self_ns: u64,
    unwound: u64,
    counters: Vec<u64>,
    self_counters: Vec<u64>,
    off: OffStats,
    /// A call ran on a thread without off-CPU data.
    off_missing: bool,
}

#[derive(Default)]
struct FutureAcc {
    d: Durations,
    polls: u64,
    cancelled: u64,
}

impl SiteAcc {
    fn merge(&mut self, o: &SiteAcc) {
        self.d.merge(&o.d);
        self.self_ns = self.self_ns.saturating_add(o.self_ns);
        self.unwound += o.unwound;
        add_all(&mut self.counters, &o.counters);
        add_all(&mut self.self_counters, &o.self_counters);
        self.off.total.add(o.off.total);
        self.off.self_.add(o.off.self_);
        self.off_missing |= o.off_missing;
    }
}

impl FutureAcc {
    fn merge(&mut self, o: &FutureAcc) {
        self.d.merge(&o.d);
        self.polls += o.polls;
        self.cancelled += o.cancelled;
    }
}

/// An open call on a thread's stack: its self time is final when it is popped.
struct Open {
    site: u32,
    depth: u32,
    dur_ns: u64,
    children_ns: u64,
    /// Its counters (empty until its `Counters` event), and its children's.
    counters: Vec<u64>,
    children_counters: Vec<u64>,
    off: OffTime,
    children_off: OffTime,
}

/// `a[i] += b[i]`, growing `a` as needed.
fn add_all(a: &mut Vec<u64>, b: &[u64]) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_add(*y);
    }
}

/// Builds a [`Report`] from events pushed one at a time.
pub struct ReportBuilder<'a> {
    meta: &'a TraceMeta,
    opts: &'a ReportOptions,
    mask: Vec<bool>,
    sites: Vec<SiteAcc>,
    futures: Vec<FutureAcc>,
    stacks: Vec<Vec<Open>>,
    lost_events: Vec<u64>,
    active: Vec<bool>,
    calls: u64,
    /// Per thread: the last event was a call (its counters may follow).
    counters_due: Vec<bool>,
}

impl<'a> ReportBuilder<'a> {
    pub fn new(meta: &'a TraceMeta, opts: &'a ReportOptions) -> Self {
        ReportBuilder {
            meta,
            opts,
            mask: thread_mask(meta, &opts.threads),
            sites: Vec::new(),
            futures: Vec::new(),
            stacks: Vec::new(),
            lost_events: Vec::new(),
            active: Vec::new(),
            calls: 0,
            counters_due: Vec::new(),
        }
    }

    /// The report of `events`, built on up to
    /// [`threads`](fgtrace_trace::parallel::threads) cores: one builder per
    /// group of the trace's threads (a builder's open calls are per thread),
    /// merged at the end. Every figure is that of one builder on one core.
    /// Everything read before a read error is kept, and the error comes
    /// back beside it.
    pub fn on_cores(
        meta: &'a TraceMeta,
        opts: &'a ReportOptions,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
    ) -> (Report, Result<(), TraceError>) {
        let groups = fgtrace_trace::parallel::threads().min(meta.threads.len());
        Self::in_groups(meta, opts, events, groups)
    }

    /// [`ReportBuilder::on_cores`] from a trace file's reader, on every core
    /// ([`collect_reader`](crate::consume::collect_reader)): a recorded
    /// file's threads are read apart, each group's on a core of its own.
    pub fn from_reader<R: std::io::Read>(
        meta: &'a TraceMeta,
        opts: &'a ReportOptions,
        reader: fgtrace_trace::TraceReader<R>,
    ) -> (Report, Result<(), TraceError>) {
        let (sinks, read) = crate::consume::collect_reader(reader, || Self::new(meta, opts));
        (Self::merged(sinks, meta, opts), read)
    }

    /// One builder's report from several, the first's first.
    fn merged(sinks: Vec<Self>, meta: &'a TraceMeta, opts: &'a ReportOptions) -> Report {
        let mut sinks = sinks.into_iter();
        let mut all = sinks.next().unwrap_or_else(|| Self::new(meta, opts));
        for s in sinks {
            all.absorb(s);
        }
        all.finish()
    }

    /// [`ReportBuilder::on_cores`] with `groups` builders.
    fn in_groups(
        meta: &'a TraceMeta,
        opts: &'a ReportOptions,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
        groups: usize,
    ) -> (Report, Result<(), TraceError>) {
        let sinks = (0..groups.max(1)).map(|_| Self::new(meta, opts)).collect();
        let (sinks, read) = crate::consume::collect_by_thread(sinks, events);
        (Self::merged(sinks, meta, opts), read)
    }

    /// Adds what `other` built (from other threads' events): its open
    /// calls are closed first.
    fn absorb(&mut self, mut other: Self) {
        for t in 0..other.stacks.len() {
            other.pop_to(t as u32, 0);
        }
        for (i, s) in other.sites.iter().enumerate() {
            grow(&mut self.sites, i).merge(s);
        }
        for (i, f) in other.futures.iter().enumerate() {
            grow(&mut self.futures, i).merge(f);
        }
        for (i, &n) in other.lost_events.iter().enumerate() {
            let l = grow(&mut self.lost_events, i);
            *l = l.saturating_add(n);
        }
        for (i, &a) in other.active.iter().enumerate() {
            *grow(&mut self.active, i) |= a;
        }
        self.calls = self.calls.saturating_add(other.calls);
    }

    /// The counters of the thread's last call.
    fn counters(&mut self, t: u32, values: &[u64]) {
        if !self.shows(t) || !std::mem::take(grow(&mut self.counters_due, t as usize)) {
            return;
        }
        let Some(stack) = self.stacks.get_mut(t as usize) else {
            return;
        };
        let n = stack.len();
        let Some(top) = stack.last_mut() else {
            return;
        };
        top.counters = values.to_vec();
        let site = top.site;
        if n >= 2 {
            add_all(&mut stack[n - 2].children_counters, values);
        }
        add_all(&mut grow(&mut self.sites, site as usize).counters, values);
    }

    fn shows(&self, t: u32) -> bool {
        shown(&self.mask, !self.opts.threads.is_empty(), t)
    }

    fn call(&mut self, c: &Call) {
        if !self.shows(c.thread) {
            return;
        }
        self.pop_to(c.thread, c.depth);
        let stack = grow(&mut self.stacks, c.thread as usize);
        // The nearest open call above is the parent (or, past a loss, an ancestor,
        // whose time includes this call all the same).
        let off = match self.meta.off_cpu.as_ref().filter(|o| o.is_available()) {
            Some(o) => o.within(c.thread, c.start_ns, c.end_ns()),
            None => Some(OffTime::default()),
        };
        if let Some(parent) = stack.last_mut() {
            parent.children_ns = parent.children_ns.saturating_add(c.dur_ns);
            parent.children_off.add(off.unwrap_or_default());
        }
        stack.push(Open {
            site: c.site,
            depth: c.depth,
            dur_ns: c.dur_ns,
            children_ns: 0,
            counters: Vec::new(),
            children_counters: Vec::new(),
            off: off.unwrap_or_default(),
            children_off: OffTime::default(),
        });
        *grow(&mut self.counters_due, c.thread as usize) = true;
        let s = grow(&mut self.sites, c.site as usize);
        s.off.total.add(off.unwrap_or_default());
        s.off_missing |= off.is_none();
        s.d.add(c.dur_ns);
        s.unwound += c.unwound() as u64;
        *grow(&mut self.active, c.thread as usize) = true;
        self.calls += 1;
    }

    fn future(&mut self, f: &FutureSpan) {
        if !self.shows(f.thread) {
            return;
        }
        let a = grow(&mut self.futures, f.site as usize);
        a.d.add(f.dur_ns);
        a.polls += f.polls as u64;
        a.cancelled += f.cancelled as u64;
        *grow(&mut self.active, f.thread as usize) = true;
    }

    fn lost(&mut self, l: &Lost) {
        if !self.shows(l.thread) {
            return;
        }
        self.pop_to(l.thread, l.depth);
        *grow(&mut self.lost_events, l.thread as usize) += l.count;
    }

    /// Finalises the self time of thread `t`'s open calls at `depth` or deeper.
    fn pop_to(&mut self, t: u32, depth: u32) {
        let Some(stack) = self.stacks.get_mut(t as usize) else {
            return;
        };
        while stack.last().is_some_and(|o| o.depth >= depth) {
            let o = stack.pop().expect("checked above");
            let s = grow(&mut self.sites, o.site as usize);
            s.self_ns = s
                .self_ns
                .saturating_add(o.dur_ns.saturating_sub(o.children_ns));
            if !o.counters.is_empty() {
                let own: Vec<u64> = o
                    .counters
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        v.saturating_sub(o.children_counters.get(i).copied().unwrap_or(0))
                    })
                    .collect();
                add_all(&mut s.self_counters, &own);
            }
            let mut own = o.off;
            own.sub(o.children_off);
            s.off.self_.add(own);
        }
    }

    /// Closes every open call and sorts the rows.
    pub fn finish(mut self) -> Report {
        for t in 0..self.stacks.len() {
            self.pop_to(t as u32, 0);
        }
        let meta = self.meta;
        let off_cpu = meta.off_cpu.as_ref().map(|o| {
            if o.is_available() {
                Ok(())
            } else {
                Err(o.reason().to_string())
            }
        });
        let has_off = off_cpu == Some(Ok(()));
        // Calls of functions switched to count-only, per site, on the
        // selected threads.
        let mut counted: Vec<u64> = Vec::new();
        for c in &meta.count_only {
            if self.shows(c.thread) {
                let n = grow(&mut counted, c.site as usize);
                *n = n.saturating_add(c.calls_after);
                grow(&mut self.sites, c.site as usize);
                *grow(&mut self.active, c.thread as usize) = true;
            }
        }
        let count_only = fgtrace_trace::saturating_sum(counted.iter().copied());
        let mut functions: Vec<FunctionStats> = self
            .sites
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s, counted.get(i).copied().unwrap_or(0)))
            .filter(|(_, s, counted)| s.d.n > 0 || *counted > 0)
            .map(|(i, s, counted)| FunctionStats {
                site: i as u32,
                name: meta.site_name(i as u32).to_string(),
                calls: s.d.n.saturating_add(counted),
                count_only: counted,
                total_ns: s.d.total,
                self_ns: s.self_ns,
                avg_ns: s.d.total / s.d.n.max(1),
                min_ns: s.d.min,
                max_ns: s.d.max,
                p50_ns: s.d.quantile(0.50),
                p99_ns: s.d.quantile(0.99),
                variance_ns2: s.d.variance(),
                unwound: s.unwound,
                counters: padded(&s.counters, meta.counters.len()),
                self_counters: padded(&s.self_counters, meta.counters.len()),
                off_cpu: (has_off && !s.off_missing).then_some(s.off),
            })
            .collect();
        let mut futures: Vec<FutureStats> = self
            .futures
            .iter()
            .enumerate()
            .filter(|(_, f)| f.d.n > 0)
            .map(|(i, f)| FutureStats {
                site: i as u32,
                name: meta.site_name(i as u32).to_string(),
                futures: f.d.n,
                polls: f.polls,
                cancelled: f.cancelled,
                total_ns: f.d.total,
                avg_ns: f.d.total / f.d.n,
                min_ns: f.d.min,
                max_ns: f.d.max,
                p50_ns: f.d.quantile(0.50),
                p99_ns: f.d.quantile(0.99),
                variance_ns2: f.d.variance(),
            })
            .collect();
        let (col, rev) = (self.opts.sort_by, self.opts.reverse);
        functions.sort_by(|a, b| {
            order(
                rev,
                a.key(col),
                b.key(col),
                (&a.name, a.site),
                (&b.name, b.site),
            )
        });
        futures.sort_by(|a, b| {
            order(
                rev,
                a.key(col),
                b.key(col),
                (&a.name, a.site),
                (&b.name, b.site),
            )
        });
        let losses = meta
            .threads
            .iter()
            .enumerate()
            .filter(|&(i, _)| self.shows(i as u32))
            .map(|(i, t)| ThreadLoss {
                thread: i as u32,
                label: meta.thread_label(i as u32),
                lost: t.lost.max(self.lost_events.get(i).copied().unwrap_or(0)),
                overruns: t.overruns,
            })
            .filter(|l| l.lost > 0 || l.overruns > 0)
            .collect();
        Report {
            program: meta.program.clone(),
            pid: meta.pid,
            duration_ns: meta.duration_ns,
            calls: self.calls.saturating_add(count_only),
            count_only,
            threads: self.active.iter().filter(|&&a| a).count(),
            losses,
            loss_lines: loss_lines(meta, &self.mask, &self.lost_events),
            functions,
            futures,
            counter_names: meta.counters.clone(),
            cycles_per_ns: (meta.clock.source == "mcycle").then_some(meta.clock.ticks_per_ns),
            off_cpu,
        }
    }
}

impl Consume for ReportBuilder<'_> {
    type Error = Infallible;

    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        match ev {
            Event::Call(c) => self.call(c),
            Event::Future(f) => self.future(f),
            Event::Lost(l) => self.lost(l),
            Event::Counters(c) => self.counters(c.thread, &c.values),
            Event::Sample(_) | Event::Values(_) | Event::Marker(_) => {}
        }
        if !matches!(ev, Event::Call(_) | Event::Counters(_) | Event::Values(_)) {
            *grow(&mut self.counters_due, ev.thread() as usize) = false;
        }
        Ok(())
    }
}

/// `v` with exactly `n` values (calls without counters count 0).
fn padded(v: &[u64], n: usize) -> Vec<u64> {
    let mut v = v.to_vec();
    v.resize(n, 0);
    v
}

fn grow<T: Default>(v: &mut Vec<T>, i: usize) -> &mut T {
    if v.len() <= i {
        v.resize_with(i + 1, T::default);
    }
    &mut v[i]
}

/// A sort key: numbers sort largest first, names A to Z.
enum Key<'a> {
    Num(f64),
    Name(&'a str),
}

/// Compares two rows by their keys, then by name and site so the order is total.
fn order(
    reverse: bool,
    a: Key,
    b: Key,
    ta: (&String, u32),
    tb: (&String, u32),
) -> std::cmp::Ordering {
    let primary = match (a, b) {
        (Key::Num(a), Key::Num(b)) => b.total_cmp(&a),
        (Key::Name(a), Key::Name(b)) => a.cmp(b),
        _ => std::cmp::Ordering::Equal,
    };
    let primary = if reverse { primary.reverse() } else { primary };
    primary.then_with(|| ta.cmp(&tb))
}

impl FunctionStats {
    fn key(&self, col: Column) -> Key<'_> {
        Key::Num(match col {
            Column::Calls => self.calls as f64,
            Column::Total => self.total_ns as f64,
            Column::SelfTime => self.self_ns as f64,
            Column::Avg => self.avg_ns as f64,
            Column::Min => self.min_ns as f64,
            Column::Max => self.max_ns as f64,
            Column::P50 => self.p50_ns as f64,
            Column::P99 => self.p99_ns as f64,
            Column::Variance => self.variance_ns2,
            Column::OnCpu => self.on_cpu_ns().map_or(-1.0, |v| v as f64),
            Column::OffCpu => self.off_cpu.map_or(-1.0, |o| o.total.total_ns() as f64),
            Column::Name => return Key::Name(&self.name),
        })
    }

    /// Inclusive time on a CPU: total minus off-CPU time.
    pub fn on_cpu_ns(&self) -> Option<u64> {
        self.off_cpu
            .map(|o| self.total_ns.saturating_sub(o.total.total_ns()))
    }

    /// Own time on a CPU: self time minus own off-CPU time.
    pub fn self_on_cpu_ns(&self) -> Option<u64> {
        self.off_cpu
            .map(|o| self.self_ns.saturating_sub(o.self_.total_ns()))
    }
}

impl FutureStats {
    /// Futures have no self time: `SelfTime` sorts them by total.
    fn key(&self, col: Column) -> Key<'_> {
        Key::Num(match col {
            Column::Calls => self.futures as f64,
            Column::Total | Column::SelfTime => self.total_ns as f64,
            Column::Avg => self.avg_ns as f64,
            Column::Min => self.min_ns as f64,
            Column::Max => self.max_ns as f64,
            Column::P50 => self.p50_ns as f64,
            Column::P99 => self.p99_ns as f64,
            Column::Variance => self.variance_ns2,
            Column::OnCpu | Column::OffCpu => -1.0,
            Column::Name => return Key::Name(&self.name),
        })
    }
}

/// s² as ftrace's profiler prints it: ns² / 1000 through the duration printer,
/// which makes the number us² (labelled `us^2` here; ftrace says `us`).
fn push_variance(out: &mut String, ns2: f64) {
    push_ftrace_duration(out, (ns2 / 1000.0) as u64);
}

fn variance_text(ns2: f64) -> String {
    let mut s = String::new();
    push_variance(&mut s, ns2);
    format!("{}^2", s.trim_end())
}

/// Right-aligned columns, two spaces apart, the name last and left-aligned (uftrace's look).
fn write_table(
    out: &mut String,
    headers: &[&str],
    rows: &[(Vec<String>, String)],
    name_header: &str,
) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for (cells, _) in rows {
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.len());
        }
    }
    let name_width = rows
        .iter()
        .map(|(_, n)| n.chars().count())
        .max()
        .unwrap_or(0)
        .max(name_header.len());
    for (h, w) in headers.iter().zip(&widths) {
        let _ = write!(out, "  {h:>w$}");
    }
    let _ = writeln!(out, "  {name_header}");
    for w in &widths {
        let _ = write!(out, "  {}", "=".repeat(*w));
    }
    let _ = writeln!(out, "  {}", "=".repeat(name_width));
    for (cells, name) in rows {
        for (c, w) in cells.iter().zip(&widths) {
            let _ = write!(out, "  {c:>w$}");
        }
        let _ = writeln!(out, "  {name}");
    }
}

/// What a counter column of the table shows.
#[derive(Clone, Copy)]
enum Col {
    /// The counter at this index.
    Counter(usize),
    /// Instructions (index) per cycle: the `cycles` counter's index, or
    /// `None` for the duration in cycles (a cycle clock).
    Ipc(usize, Option<usize>),
}

impl Report {
    /// The counter columns of the table: (title, counter index, self figure).
    /// Allocations show inclusive and self counts and bytes; frees are left
    /// to the JSON output.
    fn counter_columns(&self) -> Vec<(String, Col, bool)> {
        let mut cols = Vec::new();
        let cycles = self.counter_names.iter().position(|n| n == "cycles");
        for (i, n) in self.counter_names.iter().enumerate() {
            match n.as_str() {
                "allocs" => {
                    cols.push(("Allocs".to_string(), Col::Counter(i), false));
                    cols.push(("Self allocs".to_string(), Col::Counter(i), true));
                }
                "alloc_bytes" => cols.push(("Alloc bytes".to_string(), Col::Counter(i), false)),
                "reallocs" => cols.push(("Reallocs".to_string(), Col::Counter(i), false)),
                "frees" | "freed_bytes" => {}
                "instructions" => {
                    cols.push(("Instr".to_string(), Col::Counter(i), false));
                    cols.push(("Self instr".to_string(), Col::Counter(i), true));
                    let ipc = match (cycles, self.cycles_per_ns) {
                        (Some(c), _) => Some(Col::Ipc(i, Some(c))),
                        (None, Some(_)) => Some(Col::Ipc(i, None)),
                        (None, None) => None,
                    };
                    if let Some(ipc) = ipc {
                        cols.push(("IPC".to_string(), ipc, false));
                        cols.push(("Self IPC".to_string(), ipc, true));
                    }
                }
                other => cols.push((other.to_string(), Col::Counter(i), false)),
            }
        }
        cols
    }

    /// The table's note on count-only functions, if any.
    fn count_only_line(&self) -> Option<String> {
        let n = self.functions.iter().filter(|f| f.count_only > 0).count();
        (n > 0).then(|| {
            format!(
                "{} calls of {n} function{} marked [count only] were counted, not recorded \
                 (auto-exclude): their times are of the calls recorded before the switch",
                self.count_only,
                if n == 1 { "" } else { "s" }
            )
        })
    }

    /// The report as JSON, for machine consumers (`fgtrace report --format
    /// json`): every field of [`Report`], durations in nanoseconds.
    pub fn write_json(&self, mut w: impl Write) -> io::Result<()> {
        crate::format::write_pretty_json(&mut w, self)?;
        w.write_all(b"\n")?;
        w.flush()
    }

    /// Writes the report as text in `style`.
    pub fn write(&self, style: ReportStyle, mut w: impl Write) -> io::Result<()> {
        let mut out = String::new();
        match style {
            ReportStyle::Table => self.table(&mut out),
            ReportStyle::Ftrace => self.ftrace(&mut out),
            ReportStyle::Json => return self.write_json(w),
        }
        w.write_all(out.as_bytes())?;
        w.flush()
    }

    fn table(&self, out: &mut String) {
        // A merged report (pid 0) names each process's pid in `program`.
        if self.pid == 0 {
            let _ = writeln!(out, "# fgtrace report: {}", self.program);
        } else {
            let _ = writeln!(out, "# fgtrace report: {} (pid {})", self.program, self.pid);
        }
        let _ = writeln!(
            out,
            "# {} calls on {} thread{}, session {}",
            self.calls,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            human_duration(self.duration_ns)
        );
        for l in &self.loss_lines {
            let _ = writeln!(out, "# {l}");
        }
        if let Some(l) = self.count_only_line() {
            let _ = writeln!(out, "# {l}");
        }
        let has_off = self.off_cpu == Some(Ok(()));
        match &self.off_cpu {
            Some(Ok(())) => {
                let _ = writeln!(
                    out,
                    "# off-CPU: time switched out (blocked: voluntarily; the rest preempted); on-CPU = time - off-CPU"
                );
            }
            Some(Err(why)) => {
                let _ = writeln!(out, "# off-CPU unavailable: {why}");
            }
            None => {}
        }
        let _ = writeln!(out, "#");
        let mut headers = vec![
            "Calls".to_string(),
            "Total time".into(),
            "Self time".into(),
            "Avg time".into(),
            "Min time".into(),
            "Max time".into(),
            "p50".into(),
            "p99".into(),
            "s^2".into(),
        ];
        // Counter columns: (index, self?) per column shown.
        let ccols = self.counter_columns();
        headers.extend(ccols.iter().map(|c| c.0.clone()));
        if has_off {
            headers.extend(
                [
                    "On-CPU total",
                    "On-CPU self",
                    "Off-CPU total",
                    "Off-CPU self",
                    "Blocked",
                ]
                .map(String::from),
            );
        }
        let rows: Vec<_> = self
            .functions
            .iter()
            .map(|f| {
                let mut cells = vec![
                    f.calls.to_string(),
                    uftrace_time(f.total_ns),
                    uftrace_time(f.self_ns),
                    uftrace_time(f.avg_ns),
                    uftrace_time(f.min_ns),
                    uftrace_time(f.max_ns),
                    uftrace_time(f.p50_ns),
                    uftrace_time(f.p99_ns),
                    variance_text(f.variance_ns2),
                ];
                for (_, col, own) in &ccols {
                    let v = if *own { &f.self_counters } else { &f.counters };
                    let get = |i: usize| v.get(i).copied().unwrap_or(0);
                    cells.push(match *col {
                        Col::Counter(i) => get(i).to_string(),
                        Col::Ipc(instr, cycles) => {
                            let cycles = match cycles {
                                Some(c) => get(c) as f64,
                                None => {
                                    let ns = if *own { f.self_ns } else { f.total_ns };
                                    ns as f64 * self.cycles_per_ns.unwrap_or(0.0)
                                }
                            };
                            if cycles > 0.0 {
                                format!("{:.2}", get(instr) as f64 / cycles)
                            } else {
                                "-".to_string()
                            }
                        }
                    });
                }
                if has_off {
                    // A function that also ran on a thread without off-CPU
                    // data shows `-`, not a zero that looks measured.
                    let t = |v: Option<u64>| v.map_or("-".to_string(), uftrace_time);
                    cells.extend([
                        t(f.on_cpu_ns()),
                        t(f.self_on_cpu_ns()),
                        t(f.off_cpu.map(|o| o.total.total_ns())),
                        t(f.off_cpu.map(|o| o.self_.total_ns())),
                        t(f.off_cpu.map(|o| o.total.blocked_ns)),
                    ]);
                }
                let name = if f.count_only > 0 {
                    format!("{} [count only]", f.name)
                } else {
                    f.name.clone()
                };
                (cells, name)
            })
            .collect();
        let headers: Vec<&str> = headers.iter().map(|h| h.as_str()).collect();
        write_table(out, &headers, &rows, "Function");
        if !self.futures.is_empty() {
            let _ = writeln!(out, "\n# async futures, first poll to completion");
            let headers = [
                "Futures",
                "Polls",
                "Cancelled",
                "Total time",
                "Avg time",
                "Min time",
                "Max time",
                "p50",
                "p99",
                "s^2",
            ];
            let rows: Vec<_> = self
                .futures
                .iter()
                .map(|f| {
                    let cells = vec![
                        f.futures.to_string(),
                        f.polls.to_string(),
                        f.cancelled.to_string(),
                        uftrace_time(f.total_ns),
                        uftrace_time(f.avg_ns),
                        uftrace_time(f.min_ns),
                        uftrace_time(f.max_ns),
                        uftrace_time(f.p50_ns),
                        uftrace_time(f.p99_ns),
                        variance_text(f.variance_ns2),
                    ];
                    (cells, format!("{} [future]", f.name))
                })
                .collect();
            write_table(out, &headers, &rows, "Future");
        }
    }

    /// ftrace's `function_stat_headers` / `function_stat_show`, byte for byte
    /// (trailing spaces included); loss lines, if any, as `#` lines above.
    fn ftrace(&self, out: &mut String) {
        for l in &self.loss_lines {
            let _ = writeln!(out, "# {l}");
        }
        // The layout has no room for a mark: count-only rows are named here.
        for f in self.functions.iter().filter(|f| f.count_only > 0) {
            let _ = writeln!(
                out,
                "# count only: {}: Hit has {} calls counted, not timed; Time and Avg are of its {} recorded calls",
                f.name,
                f.count_only,
                f.calls - f.count_only
            );
        }
        out.push_str(
            "  Function                               Hit    Time            Avg             s^2\n",
        );
        out.push_str(
            "  --------                               ---    ----            ---             ---\n",
        );
        let rows = self.functions.iter().map(|f| {
            (
                f.name.clone(),
                f.calls,
                f.total_ns,
                f.avg_ns,
                f.variance_ns2,
            )
        });
        let futures = self.futures.iter().map(|f| {
            (
                format!("{} [future]", f.name),
                f.futures,
                f.total_ns,
                f.avg_ns,
                f.variance_ns2,
            )
        });
        for (name, hits, total, avg, var) in rows.chain(futures) {
            let name: String = name.chars().take(30).collect();
            let _ = write!(out, "  {name:<30}  {hits:>10}    ");
            push_ftrace_duration(out, total);
            out.push_str("    ");
            push_ftrace_duration(out, avg);
            out.push_str("    ");
            push_variance(out, var);
            out.push('\n');
        }
    }
}

/// [`write_report`] from a trace file's reader (see [`ReportBuilder::from_reader`]).
pub fn write_report_from<R: std::io::Read, W: Write>(
    meta: &TraceMeta,
    reader: fgtrace_trace::TraceReader<R>,
    opts: &ReportOptions,
    w: W,
) -> Result<(), TraceError> {
    let (report, read) = ReportBuilder::from_reader(meta, opts, reader);
    report.write(opts.style, io::BufWriter::new(w))?;
    read
}

/// Reads `events` and writes the report into `w`. On a read error, the report
/// of everything before it is written, then the error is returned.
pub fn write_report<W: Write>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    opts: &ReportOptions,
    w: W,
) -> Result<(), TraceError> {
    let (report, read) = ReportBuilder::on_cores(meta, opts, events);
    report.write(opts.style, io::BufWriter::new(w))?;
    read
}

#[cfg(test)]
mod tests;
