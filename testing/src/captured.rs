//! [`Capture`]'s data: the recorded calls of a capture as a tree of spans,
//! built from the raw records, and the small accessors the renderer and the
//! queries share. The queries and assertions are in `query`.

use super::counters::{self, CounterStatus};
use super::Part;
use fgtrace_core::record::AllocCounts;
use fgtrace_runtime::buffer::{kind, RawCall};
use fgtrace_trace::build::{self, ThreadInput};
use fgtrace_trace::clock::{self, Calibration, ClockPoint};
use fgtrace_trace::{
    Call, CallCounters, Event, FutureSpan, RecordMode, SiteInfo, Trace, TraceBuilder,
};
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
    /// Allocation figures, callees included (`None`: no counting allocator).
    pub allocs: Option<AllocCounts>,
    /// `allocs` minus the children's.
    pub self_allocs: Option<AllocCounts>,
    /// Off-CPU time within the call, where recorded (`Options::off_cpu`).
    pub off: Option<fgtrace_trace::OffTime>,
    /// For a poll: the id of its future, where recorded.
    pub future: Option<u64>,
}

/// An instant marker (a `tracing` event) as the capture keeps it.
#[derive(Clone, Debug)]
pub(super) struct MarkerRecord {
    pub marker: fgtrace_trace::Marker,
    /// The call it happened in (its span index), if any was recorded.
    pub span: Option<usize>,
    pub values: Vec<fgtrace_trace::Value>,
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
    pub(super) trace: Trace,
    pub(super) spans: Vec<Span>,
    pub(super) futures: Vec<FutureSpan>,
    pub(super) status: CounterStatus,
    /// Values recorded by calls (`#[traced(values(..))]`), by span index.
    pub(super) span_values: std::collections::HashMap<usize, Vec<fgtrace_trace::Value>>,
    /// Values recorded by `async fn`s, by index in `futures`.
    pub(super) future_values: std::collections::HashMap<usize, Vec<fgtrace_trace::Value>>,
    /// The futures' ids, where recorded, by index in `futures`.
    pub(super) future_ids: std::collections::HashMap<usize, u64>,
    /// Instant markers (`tracing` events), in trace order, with the span
    /// index of the call each happened in.
    pub(super) markers: Vec<MarkerRecord>,
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
    /// Whether the budget was checked and held (`false`: skipped, with the reason
    /// in [`CounterCheck::Skipped`]).
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
        let mut off = Vec::new();
        for mut p in parts {
            off.push(p.off.take());
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
        let base = fgtrace_runtime::process::base(
            cal,
            end.ticks,
            RecordMode::Stream,
            String::new(),
            Vec::new(),
        );
        let mut trace = build::build(
            base,
            inputs,
            build::registered_site,
            // SAFETY: a capture's records are this process's probes'.
            Some(unsafe { build::registered_text() }),
        );
        trace.meta.off_cpu = super::switches::to_meta(&cal, trace.meta.duration_ns, off);

        let with_allocs = trace.meta().counters == fgtrace_runtime::alloc::NAMES;
        let mut per_thread: Vec<Vec<Call>> = vec![Vec::new(); trace.meta().threads.len()];
        let mut thread_allocs: Vec<Vec<AllocCounts>> = vec![Vec::new(); per_thread.len()];
        let mut futures = Vec::new();
        // The event each thread's values would belong to: a call (its index
        // among the thread's calls) or a future (its index in `futures`).
        let mut last: Vec<Option<Result<usize, usize>>> = vec![None; per_thread.len()];
        let mut call_values: Vec<(usize, usize, Vec<fgtrace_trace::Value>)> = Vec::new();
        let mut future_values = std::collections::HashMap::new();
        // Future ids: of polls by (thread, index among its calls), of
        // whole futures by index in `futures`.
        let mut poll_ids = std::collections::HashMap::new();
        let mut future_ids = std::collections::HashMap::new();
        // Markers, with (thread, index among the thread's calls) of the
        // call each is in; the calls open on each thread, for that.
        let mut markers: Vec<(MarkerRecord, Option<(usize, usize)>)> = Vec::new();
        let mut open_calls: Vec<Vec<(u32, usize)>> = vec![Vec::new(); per_thread.len()];
        let mut last_marker: Vec<Option<usize>> = vec![None; per_thread.len()];
        for e in trace.events() {
            let t = e.thread() as usize;
            if !matches!(e, Event::Values(_) | Event::Counters(_)) {
                last_marker[t] = None;
            }
            match e {
                Event::Call(c) => {
                    let o = &mut open_calls[t];
                    while o.last().is_some_and(|&(d, _)| d >= c.depth) {
                        o.pop();
                    }
                    o.push((c.depth, per_thread[t].len()));
                    last[t] = Some(Ok(per_thread[t].len()));
                    per_thread[t].push(c);
                }
                Event::Marker(m) => {
                    last[t] = None;
                    let o = &mut open_calls[t];
                    while o.last().is_some_and(|&(d, _)| d >= m.depth) {
                        o.pop();
                    }
                    let inside = o
                        .last()
                        .filter(|&&(d, _)| d + 1 == m.depth)
                        .map(|&(_, i)| (t, i));
                    last_marker[t] = Some(markers.len());
                    markers.push((
                        MarkerRecord {
                            marker: m,
                            span: None,
                            values: Vec::new(),
                        },
                        inside,
                    ));
                }
                Event::Values(v) if last_marker[t].is_some() => {
                    if let Some(k) = last_marker[t].take() {
                        markers[k].0.values = v.values;
                    }
                }
                Event::Future(f) => {
                    last[t] = Some(Err(futures.len()));
                    futures.push(f);
                }
                Event::Values(v) => match last[t] {
                    Some(Ok(i)) => call_values.push((t, i, v.values)),
                    Some(Err(i)) => {
                        future_values.insert(i, v.values);
                    }
                    None => {}
                },
                Event::FutureId(x) => match last[t] {
                    Some(Ok(i)) => {
                        poll_ids.insert((t, i), x.id);
                    }
                    Some(Err(i)) => {
                        future_ids.insert(i, x.id);
                    }
                    None => {}
                },
                Event::Counters(c) if with_allocs && c.values.len() == 5 => {
                    let v = &c.values;
                    thread_allocs[c.thread as usize].push(AllocCounts {
                        allocs: v[0],
                        alloc_bytes: v[1],
                        frees: v[2],
                        freed_bytes: v[3],
                        reallocs: v[4],
                    });
                }
                _ => {}
            }
        }
        let mut spans: Vec<Span> = Vec::new();
        let mut thread_base = Vec::with_capacity(per_thread.len());
        for (t, calls) in per_thread.into_iter().enumerate() {
            thread_base.push(spans.len());
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
                let allocs = if with_allocs {
                    thread_allocs[t].get(i).copied()
                } else {
                    None
                };
                if let (Some(p), Some(a)) = (parent, allocs) {
                    if let Some(ps) = spans[p].self_allocs.as_mut() {
                        ps.allocs = ps.allocs.saturating_sub(a.allocs);
                        ps.frees = ps.frees.saturating_sub(a.frees);
                        ps.reallocs = ps.reallocs.saturating_sub(a.reallocs);
                        ps.alloc_bytes = ps.alloc_bytes.saturating_sub(a.alloc_bytes);
                        ps.freed_bytes = ps.freed_bytes.saturating_sub(a.freed_bytes);
                    }
                }
                spans.push(Span {
                    call: *c,
                    end: 0,
                    parent,
                    self_ns: c.dur_ns,
                    instr,
                    self_instr: None,
                    allocs,
                    self_allocs: allocs,
                    off: None,
                    future: poll_ids.get(&(t, i)).copied(),
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
        if let Some(o) = trace.meta.off_cpu.as_ref().filter(|o| o.is_available()) {
            for s in spans.iter_mut() {
                s.off = o.within(s.call.thread, s.call.start_ns, s.call.end_ns());
            }
        }
        let trace = if spans.iter().any(|s| s.instr.is_some()) {
            with_counters(trace, &spans)
        } else {
            trace
        };
        let span_values = call_values
            .into_iter()
            .map(|(t, i, v)| (thread_base[t] + i, v))
            .collect();
        let markers = markers
            .into_iter()
            .map(|(mut m, inside)| {
                m.span = inside.map(|(t, i)| thread_base[t] + i);
                m
            })
            .collect();
        Capture {
            trace,
            spans,
            futures,
            status,
            span_values,
            future_values,
            future_ids,
            markers,
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
        let meta = self.trace.meta();
        let mut first: Vec<Option<u64>> = vec![None; meta.sites.len()];
        for c in self.trace.calls() {
            if let Some(f) = first.get_mut(c.site as usize) {
                if f.is_none_or(|t| c.start_ns < t) {
                    *f = Some(c.start_ns);
                }
            }
        }
        let mut order: Vec<(u64, usize)> = first
            .iter()
            .enumerate()
            .map(|(i, t)| (t.unwrap_or(u64::MAX), i))
            .collect();
        order.sort();
        order
            .into_iter()
            .map(|(_, i)| meta.sites[i].name.as_str())
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
}

pub(super) fn ns(n: u64) -> Duration {
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
    // Allocation figures, if any, come first; instructions after them.
    let others = meta.counters.len();
    meta.counters.push("instructions".to_string());
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
    // Per thread, the call waiting for its counters.
    let mut pending: Vec<Option<(usize, Vec<u64>)>> = vec![None; n];
    let flush = |b: &mut TraceBuilder, t: u32, p: Option<(usize, Vec<u64>)>| {
        if let Some((i, mut values)) = p {
            match spans.get(i).and_then(|s| s.instr) {
                Some(v) => values.push(v),
                None if others == 0 => return,
                None => values.push(0),
            }
            values.resize(others + 1, 0);
            b.push(Event::Counters(CallCounters { thread: t, values }));
        }
    };
    for e in trace.events() {
        match e {
            Event::Counters(c) => {
                if let Some(p) = pending[c.thread as usize].as_mut() {
                    p.1 = c.values;
                }
            }
            Event::Call(c) => {
                let t = c.thread;
                flush(&mut b, t, pending[t as usize].take());
                b.push(Event::Call(c));
                let i = base[t as usize] + next[t as usize];
                next[t as usize] += 1;
                pending[t as usize] = Some((i, Vec::new()));
            }
            e => {
                let t = e.thread();
                flush(&mut b, t, pending[t as usize].take());
                b.push(e);
            }
        }
    }
    for (t, p) in pending.into_iter().enumerate() {
        flush(&mut b, t as u32, p);
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
