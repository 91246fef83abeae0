//! [`Capture`]: the recorded calls as a tree, queries by function name, and
//! assertions whose failure message shows the offending call's graph.

use super::counters::{self, CounterStatus};
use super::render;
use super::Part;
use crate::buffer::{kind, RawCall};
use crate::clock::{self, Calibration, ClockPoint};
use crate::collector;
use crate::trace::build::{self, MetaBase, ThreadInput};
use crate::trace::{
    Call, CallCounters, Event, FutureSpan, RecordMode, SiteInfo, Trace, TraceBuilder,
};
use crate::view::format::human_duration;
use std::io::Write;
use std::time::Duration;

/// One recorded call (or poll) with its place in the tree.
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    pub call: Call,
    /// One past the last span of its subtree (spans of a thread are in pre-order).
    pub end: usize,
    pub parent: Option<usize>,
    /// Duration minus the children's.
    pub self_ns: u64,
    /// Retired instructions, callees included, probes excluded.
    pub instr: Option<u64>,
    /// `instr` minus the children's.
    pub self_instr: Option<u64>,
}

/// One measured call of a query: a call of a sync fn, or a whole future of
/// an `async fn`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Unit {
    pub dur_ns: u64,
    pub self_ns: u64,
    pub instr: Option<u64>,
    pub self_instr: Option<u64>,
    /// The span to show for it: the call, or the future's first poll.
    pub span: Option<usize>,
    /// Inside another call the same query matches (recursion): counted in
    /// `calls`, not added to totals a second time.
    pub nested: bool,
    /// For a future: its polls (the spans shown).
    pub polls: Option<(usize, usize)>,
}

/// What a closure called: the trace, plus queries and assertions by function
/// name (see the [module docs](super) for how names match).
///
/// Queries return plain values; the `assert_*` methods panic with the
/// function graph of the offending call (durations, and instructions where
/// counted) so the reader sees which callee blew the budget. A budget
/// assertion on a function that was never called fails (a misspelt name
/// must not pass); `assert_calls(name, 0)` is how to require that a function
/// is not called.
pub struct Capture {
    trace: Trace,
    pub(super) spans: Vec<Span>,
    futures: Vec<FutureSpan>,
    status: CounterStatus,
}

/// The outcome of an instruction assertion that did not fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CounterCheck {
    /// Counted and within the budget.
    Passed,
    /// Not checked: this machine cannot count (the reason, also printed on
    /// stderr past the test harness's output capture).
    Skipped(String),
}

impl CounterCheck {
    pub fn passed(&self) -> bool {
        *self == CounterCheck::Passed
    }
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("calls", &self.spans.len())
            .field("futures", &self.futures.len())
            .field("counters", &self.status)
            .finish()
    }
}

impl Capture {
    /// Builds the trace from the threads' records, attaches counter deltas,
    /// and indexes the calls.
    pub(super) fn build(
        origin: ClockPoint,
        end: ClockPoint,
        parts: Vec<Part>,
        status: CounterStatus,
    ) -> Capture {
        let mut cal = Calibration {
            origin,
            ticks_per_ns: clock::process_rate(),
        };
        cal.refine(end);
        let overhead = if status.is_counting() {
            counters::known_overhead()
        } else {
            None
        };
        let mut deltas = Vec::new();
        let mut inputs = Vec::new();
        for p in parts {
            deltas.push(
                p.out
                    .counters
                    .as_ref()
                    .filter(|_| overhead.is_some())
                    .map(|c| preorder_deltas(&p.out.records, c)),
            );
            inputs.push(ThreadInput {
                records: p.out.records,
                overruns: p.out.overruns,
                ..ThreadInput::empty(p.tid, p.name)
            });
        }
        let base = MetaBase {
            cal,
            end_ticks: end.ticks,
            mode: RecordMode::Stream,
            filters: String::new(),
        };
        let trace = build::build(base, inputs, collector::site_by_id);

        let mut per_thread: Vec<Vec<Call>> = vec![Vec::new(); trace.meta().threads.len()];
        let mut futures = Vec::new();
        for e in trace.events() {
            match e {
                Event::Call(c) => per_thread[c.thread as usize].push(c),
                Event::Future(f) => futures.push(f),
                _ => {}
            }
        }
        let mut spans: Vec<Span> = Vec::new();
        for (t, calls) in per_thread.into_iter().enumerate() {
            let raw = deltas
                .get(t)
                .and_then(|d| d.as_ref())
                .filter(|d| d.len() == calls.len());
            let base = spans.len();
            let mut open: Vec<usize> = Vec::new();
            for (i, c) in calls.iter().enumerate() {
                while let Some(&top) = open.last() {
                    if spans[top].call.depth < c.depth {
                        break;
                    }
                    spans[top].end = base + i;
                    open.pop();
                }
                let parent = open.last().copied();
                if let Some(p) = parent {
                    spans[p].self_ns = spans[p].self_ns.saturating_sub(c.dur_ns);
                }
                let instr = raw.map(|r| r[i]);
                spans.push(Span {
                    call: *c,
                    end: 0,
                    parent,
                    self_ns: c.dur_ns,
                    instr,
                    self_instr: None,
                });
                open.push(base + i);
            }
            for s in open {
                spans[s].end = spans.len();
            }
        }
        if let Some(o) = overhead {
            // raw = floor + own + sum over children of (per_call + their own
            // probes' share); so subtracting floor + descendants * per_call
            // leaves what the code itself retired.
            for (i, s) in spans.iter_mut().enumerate() {
                let desc = (s.end - i - 1) as u64;
                s.instr = s
                    .instr
                    .map(|raw| raw.saturating_sub(o.floor + desc * o.per_call));
                s.self_instr = s.instr;
            }
            for i in 0..spans.len() {
                if let (Some(p), Some(v)) = (spans[i].parent, spans[i].instr) {
                    if let Some(ps) = spans[p].self_instr.as_mut() {
                        *ps = ps.saturating_sub(v);
                    }
                }
            }
        }
        let trace = if spans.iter().any(|s| s.instr.is_some()) {
            with_counters(trace, &spans)
        } else {
            trace
        };
        Capture {
            trace,
            spans,
            futures,
            status,
        }
    }

    /// The recorded trace, for the views (`capture.trace().write_graph(..)`)
    /// or to save it. With counters, each call is followed by an
    /// [`Event::Counters`] holding its instructions.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// Whether this capture counted instructions, and if not, why.
    pub fn counters(&self) -> &CounterStatus {
        &self.status
    }

    /// Display names of the functions called, in order of first call.
    pub fn functions(&self) -> Vec<&str> {
        self.trace
            .meta()
            .sites
            .iter()
            .map(|s| s.name.as_str())
            .collect()
    }

    fn matches(site: &SiteInfo, name: &str) -> bool {
        if site.name == name {
            return true;
        }
        let full = site.full_name();
        full == name || (full.ends_with(name) && full[..full.len() - name.len()].ends_with("::"))
    }

    pub(super) fn site_mask(&self, name: &str) -> Vec<bool> {
        self.trace
            .meta()
            .sites
            .iter()
            .map(|s| Self::matches(s, name))
            .collect()
    }

    pub(super) fn site_of(&self, span: usize) -> &SiteInfo {
        &self.trace.meta().sites[self.spans[span].call.site as usize]
    }

    /// Ancestors of a span, innermost first.
    pub(super) fn ancestors(&self, span: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(self.spans[span].parent, move |&p| self.spans[p].parent)
    }

    /// Spans (calls and polls) of the functions `name` matches.
    fn spans_of(&self, name: &str) -> Vec<usize> {
        let mask = self.site_mask(name);
        (0..self.spans.len())
            .filter(|&i| mask[self.spans[i].call.site as usize])
            .collect()
    }

    pub(super) fn units(&self, name: &str) -> Vec<Unit> {
        let mask = self.site_mask(name);
        let sites = &self.trace.meta().sites;
        let counted = |i: usize| {
            mask[self.spans[i].call.site as usize]
                && !sites[self.spans[i].call.site as usize].is_async
        };
        let mut out: Vec<Unit> = (0..self.spans.len())
            .filter(|&i| counted(i))
            .map(|i| {
                let s = &self.spans[i];
                Unit {
                    dur_ns: s.call.dur_ns,
                    self_ns: s.self_ns,
                    instr: s.instr,
                    self_instr: s.self_instr,
                    span: Some(i),
                    nested: self.ancestors(i).any(counted),
                    polls: None,
                }
            })
            .collect();
        for f in self.futures.iter().filter(|f| mask[f.site as usize]) {
            let polls: Vec<usize> = (0..self.spans.len())
                .filter(|&i| {
                    let c = &self.spans[i].call;
                    c.thread == f.thread
                        && c.site == f.site
                        && c.start_ns >= f.start_ns
                        && c.end_ns() <= f.start_ns + f.dur_ns
                })
                .collect();
            let sum = |g: fn(&Span) -> Option<u64>| {
                polls
                    .iter()
                    .map(|&i| g(&self.spans[i]))
                    .sum::<Option<u64>>()
            };
            out.push(Unit {
                dur_ns: f.dur_ns,
                self_ns: polls.iter().map(|&i| self.spans[i].self_ns).sum(),
                instr: sum(|s| s.instr),
                self_instr: sum(|s| s.self_instr),
                span: polls.first().copied(),
                nested: false,
                polls: polls.first().zip(polls.last()).map(|(&a, &b)| (a, b)),
            });
        }
        out
    }

    /// Every recorded call of the functions `name` matches (for an `async
    /// fn`: its polls), in trace order.
    pub fn calls_of(&self, name: &str) -> Vec<Call> {
        self.spans_of(name)
            .into_iter()
            .map(|i| self.spans[i].call)
            .collect()
    }

    /// Number of calls (for an `async fn`: futures completed or dropped
    /// within the capture).
    pub fn calls(&self, name: &str) -> usize {
        self.units(name).len()
    }

    /// Number of polls of an `async fn` (of a sync fn: its calls).
    pub fn polls(&self, name: &str) -> usize {
        self.spans_of(name).len()
    }

    /// Sum of the calls' inclusive durations; a call nested in another call
    /// of the same function (recursion) is already part of that one's.
    pub fn total(&self, name: &str) -> Duration {
        ns(self
            .units(name)
            .iter()
            .filter(|u| !u.nested)
            .map(|u| u.dur_ns)
            .sum())
    }

    /// Sum of the calls' self durations (inclusive minus traced callees).
    pub fn self_total(&self, name: &str) -> Duration {
        ns(self.units(name).iter().map(|u| u.self_ns).sum())
    }

    /// Longest call (zero if never called).
    pub fn max(&self, name: &str) -> Duration {
        ns(self.units(name).iter().map(|u| u.dur_ns).max().unwrap_or(0))
    }

    /// Shortest call (zero if never called).
    pub fn min(&self, name: &str) -> Duration {
        ns(self.units(name).iter().map(|u| u.dur_ns).min().unwrap_or(0))
    }

    /// The `p`-th percentile (0 to 100, nearest rank) of the calls'
    /// durations: `percentile(name, 50.0)` is the (lower) median, 100 the max.
    #[track_caller]
    pub fn percentile(&self, name: &str, p: f64) -> Duration {
        ns(self.rank(name, p).map_or(0, |(u, _)| u.dur_ns))
    }

    /// `percentile(name, 50.0)`.
    pub fn median(&self, name: &str) -> Duration {
        self.percentile(name, 50.0)
    }

    /// `total(a) / total(b)`: relative budgets survive a slower machine.
    pub fn ratio(&self, a: &str, b: &str) -> f64 {
        self.total(a).as_secs_f64() / self.total(b).as_secs_f64()
    }

    /// The calls of the given functions in the order they started, each as
    /// the name it was asked by: `["lock", "unlock", "lock", "unlock"]`.
    pub fn sequence<'n>(&self, names: &[&'n str]) -> Vec<&'n str> {
        let masks: Vec<Vec<bool>> = names.iter().map(|n| self.site_mask(n)).collect();
        let mut hits: Vec<(u64, usize, &'n str)> = Vec::new();
        for (i, s) in self.spans.iter().enumerate() {
            if let Some(k) = masks.iter().position(|m| m[s.call.site as usize]) {
                hits.push((s.call.start_ns, i, names[k]));
            }
        }
        hits.sort();
        hits.into_iter().map(|(_, _, n)| n).collect()
    }

    /// Whether every call of `f` ran inside a call of `g` (on the same thread).
    pub fn always_inside(&self, f: &str, g: &str) -> bool {
        self.outside(f, g).is_empty()
    }

    /// Whether no call of `f` ran inside a call of `g`.
    pub fn never_inside(&self, f: &str, g: &str) -> bool {
        self.inside(f, g).is_empty()
    }

    /// Calls of `f` with no `g` among their ancestors.
    fn outside(&self, f: &str, g: &str) -> Vec<usize> {
        let gm = self.site_mask(g);
        self.spans_of(f)
            .into_iter()
            .filter(|&i| {
                !self
                    .ancestors(i)
                    .any(|a| gm[self.spans[a].call.site as usize])
            })
            .collect()
    }

    /// Calls of `f` inside a `g`, with that `g` (the innermost).
    fn inside(&self, f: &str, g: &str) -> Vec<(usize, usize)> {
        let gm = self.site_mask(g);
        self.spans_of(f)
            .into_iter()
            .filter_map(|i| {
                self.ancestors(i)
                    .find(|&a| gm[self.spans[a].call.site as usize])
                    .map(|a| (i, a))
            })
            .collect()
    }

    /// Total retired instructions of the calls (recursion counted once, as
    /// for [`Capture::total`]); `None` without counters.
    pub fn instructions(&self, name: &str) -> Option<u64> {
        self.status.is_counting().then(|| {
            self.units(name)
                .iter()
                .filter(|u| !u.nested)
                .filter_map(|u| u.instr)
                .sum()
        })
    }

    /// Instructions of the most expensive call.
    pub fn instructions_max(&self, name: &str) -> Option<u64> {
        self.status.is_counting().then(|| {
            self.units(name)
                .iter()
                .filter_map(|u| u.instr)
                .max()
                .unwrap_or(0)
        })
    }

    /// Instructions of each call, in trace order.
    pub fn instructions_of(&self, name: &str) -> Option<Vec<u64>> {
        self.status
            .is_counting()
            .then(|| self.units(name).iter().filter_map(|u| u.instr).collect())
    }

    /// Sum of the calls' self instructions (traced callees excluded).
    pub fn self_instructions(&self, name: &str) -> Option<u64> {
        self.status
            .is_counting()
            .then(|| self.units(name).iter().filter_map(|u| u.self_instr).sum())
    }

    /// The function graph of everything captured, in ftrace format, with
    /// instructions per call where counted.
    pub fn graph(&self) -> String {
        render::whole(self, usize::MAX)
    }

    // ------------------------------------------------------------ assertions

    /// Fails unless `name` was called exactly `n` times.
    #[track_caller]
    pub fn assert_calls(&self, name: &str, n: usize) {
        let got = self.calls(name);
        if got != n {
            fail(format!(
                "`{name}` was called {got} times, expected {n}\n{}",
                render::callers(self, name)
            ));
        }
    }

    /// Fails if `name` was called more than `n` times.
    #[track_caller]
    pub fn assert_calls_at_most(&self, name: &str, n: usize) {
        let got = self.calls(name);
        if got > n {
            fail(format!(
                "`{name}` was called {got} times, at most {n} allowed\n{}",
                render::callers(self, name)
            ));
        }
    }

    /// Fails if any call of `name` took longer than `budget`.
    #[track_caller]
    pub fn assert_max(&self, name: &str, budget: Duration) {
        let units = self.called(name);
        let worst = *units.iter().max_by_key(|u| u.dur_ns).expect("called");
        if worst.dur_ns > budget.as_nanos() as u64 {
            let over = units
                .iter()
                .filter(|u| u.dur_ns > budget.as_nanos() as u64)
                .count();
            fail(format!(
                "`{name}` took {} in its slowest call, over its budget of {} ({over} of {} calls over)\n\n{}",
                human_duration(worst.dur_ns),
                human_duration(nanos(budget)),
                units.len(),
                render::unit(self, &worst)
            ));
        }
    }

    /// Fails if the calls of `name` took longer than `budget` together.
    #[track_caller]
    pub fn assert_total(&self, name: &str, budget: Duration) {
        let units = self.called(name);
        let total = self.total(name);
        if total > budget {
            let worst = *units.iter().max_by_key(|u| u.dur_ns).expect("called");
            fail(format!(
                "`{name}` took {} in {} calls, over its budget of {}; its longest call ({}):\n\n{}",
                human_duration(nanos(total)),
                units.len(),
                human_duration(nanos(budget)),
                human_duration(worst.dur_ns),
                render::unit(self, &worst)
            ));
        }
    }

    /// Fails if the self time of `name` (its own code, traced callees
    /// excluded) exceeded `budget` over all calls.
    #[track_caller]
    pub fn assert_self_total(&self, name: &str, budget: Duration) {
        let units = self.called(name);
        let total = self.self_total(name);
        if total > budget {
            let worst = *units.iter().max_by_key(|u| u.self_ns).expect("called");
            fail(format!(
                "`{name}` spent {} in its own code over {} calls, over its budget of {}; the call with most ({}):\n\n{}",
                human_duration(nanos(total)),
                units.len(),
                human_duration(nanos(budget)),
                human_duration(worst.self_ns),
                render::unit(self, &worst)
            ));
        }
    }

    /// Fails if the `p`-th percentile (nearest rank) of the durations of
    /// `name` exceeded `budget`.
    #[track_caller]
    pub fn assert_percentile(&self, name: &str, p: f64, budget: Duration) {
        self.called(name);
        let (u, n) = self.rank(name, p).expect("called");
        if u.dur_ns > budget.as_nanos() as u64 {
            fail(format!(
                "p{p} of `{name}` over {n} calls is {}, over its budget of {}; the call at that rank:\n\n{}",
                human_duration(u.dur_ns),
                human_duration(nanos(budget)),
                render::unit(self, &u)
            ));
        }
    }

    /// Fails if `total(a) > max * total(b)`.
    ///
    /// ```
    /// # #[fgtrace::traced] fn lookup() { std::hint::black_box(0); }
    /// # #[fgtrace::traced] fn request() { lookup(); }
    /// let cap = fgtrace::testing::capture(|| request());
    /// cap.assert_ratio("lookup", "request", 1.0); // a callee never exceeds its caller
    /// ```
    #[track_caller]
    pub fn assert_ratio(&self, a: &str, b: &str, max: f64) {
        let units = self.called(a);
        self.called(b);
        let (ta, tb) = (self.total(a), self.total(b));
        if ta.as_secs_f64() > max * tb.as_secs_f64() {
            let worst = *units.iter().max_by_key(|u| u.dur_ns).expect("called");
            fail(format!(
                "`{a}` took {} = {:.3} x `{b}`'s {}, over the allowed ratio {max}; the longest call of `{a}`:\n\n{}",
                human_duration(nanos(ta)),
                ta.as_secs_f64() / tb.as_secs_f64(),
                human_duration(nanos(tb)),
                render::unit(self, &worst)
            ));
        }
    }

    /// Fails unless every call of `f` ran inside a call of `g` (on the same
    /// thread): "`parse` is only ever called by `handle`".
    #[track_caller]
    pub fn assert_inside(&self, f: &str, g: &str) {
        self.called(f);
        let bad = self.outside(f, g);
        if let Some(&i) = bad.first() {
            let root = self.ancestors(i).last().unwrap_or(i);
            fail(format!(
                "`{f}` was called outside `{g}` ({} of {} calls); the first, at {}:\n\n{}",
                bad.len(),
                self.polls(f),
                render::path(self, i),
                render::tree(self, root, &[(i, "<== outside")])
            ));
        }
    }

    /// Fails if any call of `f` ran inside a call of `g`.
    #[track_caller]
    pub fn assert_not_inside(&self, f: &str, g: &str) {
        self.called(f);
        let bad = self.inside(f, g);
        if let Some(&(i, a)) = bad.first() {
            fail(format!(
                "`{f}` was called inside `{g}` ({} of {} calls); the first, at {}:\n\n{}",
                bad.len(),
                self.polls(f),
                render::path(self, i),
                render::tree(self, a, &[(i, "<== inside")])
            ));
        }
    }

    /// Fails unless every call of `a` ended before the first call of `b`
    /// started.
    #[track_caller]
    pub fn assert_before(&self, a: &str, b: &str) {
        self.called(a);
        self.called(b);
        let first_b = *self
            .spans_of(b)
            .iter()
            .min_by_key(|&&i| self.spans[i].call.start_ns)
            .expect("called");
        let late_a = *self
            .spans_of(a)
            .iter()
            .max_by_key(|&&i| self.spans[i].call.end_ns())
            .expect("called");
        if self.spans[late_a].call.end_ns() > self.spans[first_b].call.start_ns {
            fail(format!(
                "`{a}` was called after `{b}` had started: `{b}` at {}, `{a}` at {}\n\n{}",
                render::path(self, first_b),
                render::path(self, late_a),
                render::pair(self, first_b, late_a)
            ));
        }
    }

    /// Fails if a call of `name` retired more than `max` instructions (its
    /// callees included, the probes excluded). Returns
    /// [`CounterCheck::Skipped`] after a message on stderr where counters
    /// are unavailable; panics if the capture was made without counters.
    #[track_caller]
    pub fn assert_instructions(&self, name: &str, max: u64) -> CounterCheck {
        if let Err(skip) =
            self.counter_gate(&format!("instruction budget of `{name}` ({max} per call)"))
        {
            return skip;
        }
        let units: Vec<Unit> = self
            .called(name)
            .into_iter()
            .filter(|u| u.instr.is_some())
            .collect();
        let Some(worst) = units.iter().max_by_key(|u| u.instr).copied() else {
            return skipped(format!("no call of `{name}` was counted"));
        };
        let got = worst.instr.unwrap_or(0);
        if got > max {
            let over = units.iter().filter(|u| u.instr > Some(max)).count();
            fail(format!(
                "`{name}` retired {got} instructions in its most expensive call, over its budget of {max} ({over} of {} calls over)\n\n{}",
                units.len(),
                render::unit(self, &worst)
            ));
        }
        CounterCheck::Passed
    }

    /// Fails if the calls of `name` retired more than `max` instructions
    /// together; skips like [`Capture::assert_instructions`].
    #[track_caller]
    pub fn assert_instructions_total(&self, name: &str, max: u64) -> CounterCheck {
        if let Err(skip) =
            self.counter_gate(&format!("instruction budget of `{name}` ({max} in total)"))
        {
            return skip;
        }
        let units = self.called(name);
        let total = self.instructions(name).unwrap_or(0);
        if total > max {
            let worst = *units.iter().max_by_key(|u| u.instr).expect("called");
            fail(format!(
                "`{name}` retired {total} instructions in {} calls, over its budget of {max}; its most expensive call:\n\n{}",
                units.len(),
                render::unit(self, &worst)
            ));
        }
        CounterCheck::Passed
    }

    /// `Err(Skipped)` (after saying so on stderr) unless counted; panics if
    /// counters were never asked for: that is a mistake in the test.
    #[track_caller]
    pub(super) fn counter_gate(&self, what: &str) -> Result<(), CounterCheck> {
        match &self.status {
            CounterStatus::Instructions => Ok(()),
            CounterStatus::Unavailable(why) => Err(skipped(format!("{what}: {why}"))),
            CounterStatus::Off => fail(format!(
                "{what}: this capture was made without counters; use `capture_counted` or \
                 `Options::new().counters(Counters::Auto)`"
            )),
        }
    }

    /// The units of `name`; fails if there are none.
    #[track_caller]
    pub(super) fn called(&self, name: &str) -> Vec<Unit> {
        let u = self.units(name);
        if u.is_empty() {
            let seen = self.functions();
            let shown = seen
                .iter()
                .take(30)
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ");
            fail(format!(
                "`{name}` was never called in this capture, so its budget cannot be checked \
                 (is the name right, and the fn `#[traced]`?); called: {}",
                if shown.is_empty() {
                    "nothing".to_string()
                } else {
                    shown
                }
            ));
        }
        u
    }

    /// The unit at the `p`-th percentile (nearest rank) and the number of units.
    #[track_caller]
    pub(super) fn rank(&self, name: &str, p: f64) -> Option<(Unit, usize)> {
        assert!(
            (0.0..=100.0).contains(&p),
            "percentile {p} is not within 0..=100"
        );
        let mut units = self.units(name);
        if units.is_empty() {
            return None;
        }
        units.sort_by_key(|u| u.dur_ns);
        let n = units.len();
        let r = ((p / 100.0 * n as f64).ceil() as usize).clamp(1, n);
        Some((units[r - 1], n))
    }
}

fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}

/// Whole nanoseconds of `d`, saturating at `u64::MAX` (584 years).
pub(super) fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// Panics with the fgtrace prefix, at the caller's location.
#[track_caller]
pub(super) fn fail(msg: String) -> ! {
    panic!("fgtrace: {msg}")
}

/// Says on stderr that an assertion was skipped. Written to the stderr
/// handle, not with `eprintln!`, so the test harness does not swallow it in
/// a passing test: a skipped budget must be visible.
pub(super) fn skipped(why: String) -> CounterCheck {
    let _ = writeln!(
        std::io::stderr(),
        "fgtrace: SKIPPED {why} (set FGTRACE_COUNTERS=required to fail instead)"
    );
    CounterCheck::Skipped(why)
}

/// A thread's counter deltas in the pre-order the trace lists its calls
/// (records come in exit order): the same tree walk `trace::build` does.
fn preorder_deltas(recs: &[RawCall], deltas: &[u64]) -> Vec<u64> {
    let tree: Vec<usize> = (0..recs.len())
        .filter(|&i| recs[i].kind() == kind::CALL || recs[i].kind() == kind::POLL)
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); tree.len()];
    let mut stack: Vec<usize> = Vec::new();
    for k in 0..tree.len() {
        let d = recs[tree[k]].depth();
        let at = stack
            .iter()
            .rposition(|&top| recs[tree[top]].depth() <= d)
            .map_or(0, |p| p + 1);
        children[k] = stack.split_off(at);
        stack.push(k);
    }
    let mut out = Vec::with_capacity(tree.len());
    let mut work: Vec<usize> = stack.into_iter().rev().collect();
    while let Some(k) = work.pop() {
        out.push(deltas.get(tree[k]).copied().unwrap_or(0));
        work.extend(children[k].iter().rev());
    }
    out
}

/// The trace re-encoded with a `Counters` event after every counted call.
fn with_counters(trace: Trace, spans: &[Span]) -> Trace {
    let mut meta = trace.meta().clone();
    meta.counters = vec!["instructions".to_string()];
    let n = meta.threads.len();
    // Spans hold thread 0's calls, then thread 1's, ...: where each starts,
    // and how many of each thread's calls have been seen.
    let mut base = vec![0usize; n + 1];
    for s in spans {
        base[s.call.thread as usize + 1] += 1;
    }
    for t in 0..n {
        base[t + 1] += base[t];
    }
    let mut next = vec![0usize; n];
    let mut b = TraceBuilder::new(meta);
    for e in trace.events() {
        let call = if let Event::Call(c) = &e {
            Some(c.thread)
        } else {
            None
        };
        b.push(e);
        if let Some(t) = call {
            let i = base[t as usize] + next[t as usize];
            next[t as usize] += 1;
            if let Some(v) = spans.get(i).and_then(|s| s.instr) {
                b.push(Event::Counters(CallCounters {
                    thread: t,
                    values: vec![v],
                }));
            }
        }
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preorder_of_exit_order() {
        // main { a { b } c } d  in exit order: b a c main d
        let rec = |depth: u32| RawCall::pack(0, depth, 1, 0, false, kind::CALL);
        let recs = [rec(2), rec(1), rec(1), rec(0), rec(0)];
        let deltas = [20, 10, 30, 100, 200]; // b a c main d
        assert_eq!(preorder_deltas(&recs, &deltas), [100, 10, 20, 30, 200]);
        // A future record in between takes no place in the tree.
        let fut = RawCall::pack(0, 1, 1, 0, false, kind::FUTURE);
        let recs = [rec(1), fut, rec(0)];
        assert_eq!(preorder_deltas(&recs, &[1, 99, 2]), [2, 1]);
    }
}
