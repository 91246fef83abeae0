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

use super::human::{human_duration, loss_lines, push_ftrace_duration, uftrace_time};
use crate::consume::Consume;
use crate::threads::{shown, thread_mask, ThreadSel};
use fgtrace_trace::{Call, Event, FutureSpan, Lost, OffTime, TraceError, TraceMeta};
use serde::Serialize;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::str::FromStr;

mod durations;
mod future_times;
mod long_polls;
mod pending;
mod text;
use durations::Durations;
pub use durations::Histogram;
pub use future_times::Spread;
use future_times::TimesAcc;
pub use long_polls::{
    LongPoll, PollCallee, DEFAULT_LONG_POLL_NS, LONG_POLLS_KEPT, LONG_POLL_CALLEES,
};
use pending::PendingAcc;
pub use pending::{Pending, PendingFuture};

/// What the rows are sorted by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Column {
    /// Number of calls.
    Calls,
    /// Inclusive time (the default, like uftrace and ftrace's profiler).
    #[default]
    Total,
    /// Self time: inclusive minus the recorded children's.
    SelfTime,
    /// Mean duration.
    Avg,
    /// Shortest call.
    Min,
    /// Longest call.
    Max,
    /// Median duration.
    P50,
    /// 99th percentile of the durations.
    P99,
    /// s², the sample variance.
    Variance,
    /// On-CPU total time (inclusive time minus off-CPU time).
    OnCpu,
    /// Off-CPU total time (switched out: blocked or preempted).
    OffCpu,
    /// Function name, A to Z.
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

/// Report options; `Default` sorts by total time, largest first, all
/// threads, and lists polls longer than 10 ms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportOptions {
    /// The column the rows are sorted by, largest first.
    pub sort_by: Column,
    /// Smallest first (names: Z to A).
    pub reverse: bool,
    /// Only these threads (empty: all).
    pub threads: Vec<ThreadSel>,
    /// Text table or JSON.
    pub style: ReportStyle,
    /// Polls longer than this many nanoseconds are listed as long polls
    /// ([`Report::long_polls`]); `None`: none are. Default
    /// [`DEFAULT_LONG_POLL_NS`] (10 ms).
    pub long_poll_ns: Option<u64>,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            sort_by: Column::default(),
            reverse: false,
            threads: Vec::new(),
            style: ReportStyle::default(),
            long_poll_ns: Some(DEFAULT_LONG_POLL_NS),
        }
    }
}

/// One function's numbers; durations in nanoseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FunctionStats {
    /// Index into `TraceMeta::sites`.
    pub site: u32,
    /// `module::name`.
    pub name: String,
    /// The function's module path (`module_path!()`; empty where the trace
    /// does not know it), file and line: with `name`, what tells two
    /// functions of one name apart across traces.
    pub module_path: String,
    /// The source file, as the trace names it.
    pub file: String,
    /// The line of the fn in `file`.
    pub line: u32,
    /// Every call: the recorded ones plus `count_only` and `counted`.
    pub calls: u64,
    /// Calls counted but not recorded: the function was switched to
    /// count-only on a thread (`Config::auto_exclude`, see
    /// `TraceMeta::count_only`). The durations and counters below are
    /// those of the recorded calls (before the switch).
    pub count_only: u64,
    /// Calls counted by a compile-time plan, in the whole process: the
    /// function was built without a probe (`TraceMeta::counted`), so it has
    /// no durations. Only in reports of every thread.
    pub counted: u64,
    /// Sum of inclusive durations.
    pub total_ns: u64,
    /// Sum of (duration minus the recorded children's durations).
    pub self_ns: u64,
    /// `total_ns` / the recorded calls, truncated.
    pub avg_ns: u64,
    /// Shortest recorded call.
    pub min_ns: u64,
    /// Longest recorded call.
    pub max_ns: u64,
    /// Median, from a log-bucketed histogram (within 1%, see [`Histogram`]).
    pub p50_ns: u64,
    /// 99th percentile, from the same histogram (within 1%).
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
    /// Off-CPU time inside the function's calls, callees included.
    pub total: OffTime,
    /// Off-CPU time of the function itself, its recorded children's excluded.
    pub self_: OffTime,
}

/// One async fn's whole futures (first poll to completion); durations in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FutureStats {
    /// Index into `TraceMeta::sites`.
    pub site: u32,
    /// `module::name`.
    pub name: String,
    /// Futures that completed or were dropped.
    pub futures: u64,
    /// Polls, over all those futures.
    pub polls: u64,
    /// Dropped before completion.
    pub cancelled: u64,
    /// Sum of the futures' lengths (first poll to completion).
    pub total_ns: u64,
    /// `total_ns` / `futures`, truncated.
    pub avg_ns: u64,
    /// Shortest future.
    pub min_ns: u64,
    /// Longest future.
    pub max_ns: u64,
    /// Median length, from a log-bucketed histogram (within 1%).
    pub p50_ns: u64,
    /// 99th percentile, from the same histogram (within 1%).
    pub p99_ns: u64,
    /// Sample variance of the lengths, ns²; 0 for one future.
    pub variance_ns2: f64,
    /// The longest poll of the fn's futures, if a poll was recorded: a poll
    /// that long held its executor's thread that long (a blocking poll).
    pub longest_poll: Option<LongestPoll>,
    /// Per future, the time in its polls, where the futures measured it
    /// (recorded since futures measure themselves).
    pub busy: Option<Spread>,
    /// Per future, from each wake to the poll after it, summed: time spent
    /// ready but not polled (a busy or starved executor), where the futures'
    /// wakes were watched (`#[traced]` async fns on a host).
    pub scheduled: Option<Spread>,
    /// Wakes of these futures, where watched.
    pub wakes: Option<u64>,
}

/// The longest poll of an `async fn`: how long, on which thread, when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LongestPoll {
    /// Its length, nanoseconds.
    pub dur_ns: u64,
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// `name-tid` of that thread.
    pub thread_label: String,
    /// Its start, nanoseconds since the session's start.
    pub start_ns: u64,
}

/// A thread that lost records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadLoss {
    /// Index into `TraceMeta::threads`.
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
    /// The traced program (`TraceMeta::program`).
    pub program: String,
    /// Its process id (0 for a merged trace).
    pub pid: u32,
    /// Session length.
    pub duration_ns: u64,
    /// Calls counted (of the selected threads), count-only ones included.
    pub calls: u64,
    /// Of these, the calls of functions switched to count-only: counted,
    /// not recorded (see [`FunctionStats::count_only`]).
    pub count_only: u64,
    /// Of these, the calls of functions a compile-time plan made
    /// count-only (see [`FunctionStats::counted`]).
    pub counted: u64,
    /// Selected threads that recorded at least one call or future.
    pub threads: usize,
    /// The losses (loss lines), one per thread with any non-zero counter.
    pub losses: Vec<ThreadLoss>,
    /// Text of the loss lines, as both views print them.
    pub loss_lines: Vec<String>,
    /// One row per function with recorded or counted calls.
    pub functions: Vec<FunctionStats>,
    /// One row per `async fn` with futures.
    pub futures: Vec<FutureStats>,
    /// Futures still pending when the recording ended (polled, and not
    /// ended after their last poll), the stalled ones apart: woken after
    /// their last poll and never polled again.
    pub pending: Pending,
    /// The threshold of the long polls ([`ReportOptions::long_poll_ns`]).
    pub long_poll_ns: Option<u64>,
    /// The longest polls over that threshold, longest first (at most
    /// [`LONG_POLLS_KEPT`]).
    pub long_polls: Vec<LongPoll>,
    /// How many polls were over the threshold (all of them, listed or not).
    pub long_polls_total: u64,
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
    times: TimesAcc,
    /// The longest poll seen: (length, start, thread).
    longest: Option<(u64, u64, u32)>,
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
        self.times.merge(&o.times);
        if let Some(p) = o.longest {
            self.poll(p);
        }
    }

    /// Keeps the longer poll (the earlier of two as long, so that groups of
    /// threads merged in any order agree).
    fn poll(&mut self, p: (u64, u64, u32)) {
        let longer = |a: (u64, u64, u32), b: (u64, u64, u32)| {
            (a.0, std::cmp::Reverse((a.1, a.2))) > (b.0, std::cmp::Reverse((b.1, b.2)))
        };
        if self.longest.is_none_or(|l| longer(p, l)) {
            self.longest = Some(p);
        }
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
    /// Per thread: the site and poll count of its last whole future (its
    /// times may follow).
    last_future: Vec<Option<(u32, u32)>>,
    pending: PendingAcc,
    long_polls: long_polls::LongPolls,
}

impl<'a> ReportBuilder<'a> {
    /// A builder for `meta`'s trace with `opts` (threads and sort order).
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
            last_future: Vec::new(),
            pending: PendingAcc::default(),
            long_polls: long_polls::LongPolls::new(opts),
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
        self.pending.merge(other.pending);
        self.long_polls.merge(other.long_polls);
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
        if c.is_poll() {
            grow(&mut self.futures, c.site as usize).poll((c.dur_ns, c.start_ns, c.thread));
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
        *grow(&mut self.last_future, f.thread as usize) = Some((f.site, f.polls));
    }

    /// What the thread's last whole future measured of itself.
    fn future_times(&mut self, t: &fgtrace_trace::FutureTimes) {
        let Some((site, polls)) = self
            .last_future
            .get_mut(t.thread as usize)
            .and_then(Option::take)
        else {
            return;
        };
        grow(&mut self.futures, site as usize).times.add(t, polls);
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
        let (long_polls, long_polls_total) = std::mem::take(&mut self.long_polls).finish(meta);
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
        // Calls of planned functions: counted in the whole process, so
        // shown only when every thread is.
        let mut planned: Vec<u64> = Vec::new();
        if self.opts.threads.is_empty() {
            for c in &meta.counted {
                let n = grow(&mut planned, c.site as usize);
                *n = n.saturating_add(c.calls);
                grow(&mut self.sites, c.site as usize);
            }
        }
        let planned_total = fgtrace_trace::saturating_sum(planned.iter().copied());
        let mut functions: Vec<FunctionStats> = self
            .sites
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let at = |v: &Vec<u64>| v.get(i).copied().unwrap_or(0);
                (i, s, at(&counted), at(&planned))
            })
            .filter(|(_, s, counted, planned)| s.d.n > 0 || *counted > 0 || *planned > 0)
            .map(|(i, s, counted, planned)| FunctionStats {
                site: i as u32,
                name: meta.site_name(i as u32).to_string(),
                module_path: meta
                    .sites
                    .get(i)
                    .map(|s| s.module_path.clone())
                    .unwrap_or_default(),
                file: meta
                    .sites
                    .get(i)
                    .map(|s| s.file.clone())
                    .unwrap_or_default(),
                line: meta.sites.get(i).map_or(0, |s| s.line),
                calls: s.d.n.saturating_add(counted).saturating_add(planned),
                count_only: counted,
                counted: planned,
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
            .map(|(i, f)| {
                let (busy, scheduled, wakes) = f.times.finish();
                FutureStats {
                    site: i as u32,
                    name: meta.site_name(i as u32).to_string(),
                    futures: f.d.n,
                    polls: f.polls + f.times.extra_polls(),
                    cancelled: f.cancelled,
                    total_ns: f.d.total,
                    avg_ns: f.d.total / f.d.n,
                    min_ns: f.d.min,
                    max_ns: f.d.max,
                    p50_ns: f.d.quantile(0.50),
                    p99_ns: f.d.quantile(0.99),
                    variance_ns2: f.d.variance(),
                    longest_poll: f.longest.map(|(dur_ns, start_ns, thread)| LongestPoll {
                        dur_ns,
                        thread,
                        thread_label: meta.thread_label(thread),
                        start_ns,
                    }),
                    busy,
                    scheduled,
                    wakes,
                }
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
            calls: self
                .calls
                .saturating_add(count_only)
                .saturating_add(planned_total),
            count_only,
            counted: planned_total,
            threads: self.active.iter().filter(|&&a| a).count(),
            losses,
            loss_lines: loss_lines(meta, &self.mask, &self.lost_events),
            functions,
            futures,
            pending: self.pending.finish(meta),
            long_poll_ns: self.opts.long_poll_ns,
            long_polls,
            long_polls_total,
            counter_names: meta.counters.clone(),
            cycles_per_ns: (meta.clock.source == "mcycle").then_some(meta.clock.ticks_per_ns),
            off_cpu,
        }
    }
}

impl Consume for ReportBuilder<'_> {
    type Error = Infallible;

    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        self.pending.push(ev, self.shows(ev.thread()));
        if self.shows(ev.thread()) {
            self.long_polls.push(ev);
        }
        match ev {
            Event::Call(c) => self.call(c),
            Event::Future(f) => self.future(f),
            Event::Lost(l) => self.lost(l),
            Event::Counters(c) => self.counters(c.thread, &c.values),
            Event::FutureTimes(f) => self.future_times(f),
            Event::Sample(_)
            | Event::Values(_)
            | Event::Marker(_)
            | Event::FutureId(_)
            | Event::Wake(_) => {}
        }
        if !matches!(
            ev,
            Event::Call(_)
                | Event::Counters(_)
                | Event::Values(_)
                | Event::FutureId(_)
                | Event::FutureTimes(_)
        ) {
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
///
/// ```
/// use fgtrace::view::{ok_events, write_report, Column, ReportOptions, TraceViews};
///
/// #[fgtrace::traced]
/// fn outer() -> u32 { inner() + inner() }
/// #[fgtrace::traced]
/// fn inner() -> u32 { 1 }
///
/// let session = fgtrace::Session::start(fgtrace::Config::builtin())?;
/// outer();
/// let trace = session.stop()?;
///
/// // The numbers: one row per function, sorted by total time by default.
/// let report = trace.report(&ReportOptions { sort_by: Column::Calls, ..Default::default() });
/// let rows: Vec<(&str, u64)> = report.functions.iter().map(|f| (f.name.as_str(), f.calls)).collect();
/// assert_eq!(rows, [("inner", 2), ("outer", 1)]);
/// let outer = &report.functions[1];
/// assert!(outer.total_ns >= outer.self_ns);
///
/// // The same as a text table.
/// let mut out = Vec::new();
/// write_report(&trace.meta, ok_events(trace.events()), &ReportOptions::default(), &mut out)?;
/// let text = String::from_utf8(out)?;
/// assert!(text.contains("outer") && text.contains("inner"), "{text}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
