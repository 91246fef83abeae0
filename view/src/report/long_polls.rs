//! Polls that block: every poll of an `async fn` longer than
//! [`ReportOptions::long_poll_ns`] held its executor's thread that long, so
//! no other task ran there meanwhile. The report lists the longest of them
//! ([`LONG_POLLS_KEPT`]) with their future, thread, start and the calls
//! inside them, and counts them all.
//!
//! Memory stays bounded on any trace: per thread, only the long polls still
//! open (their calls come after them, in pre-order) with one row per
//! function called inside; per builder, the longest [`LONG_POLLS_KEPT`]
//! polls. Groups of threads merge by keeping the longest of both lists, so
//! the result is the same however the threads are grouped.

use super::{grow, ReportOptions};
use fgtrace_trace::{Call, Event, TraceMeta};
use serde::Serialize;
use std::collections::HashMap;

/// How many long polls a report lists (the longest); the others are counted
/// in [`Report::long_polls_total`](super::Report::long_polls_total).
pub const LONG_POLLS_KEPT: usize = 20;

/// How many functions called inside a long poll it lists (most time first).
pub const LONG_POLL_CALLEES: usize = 5;

/// The threshold of [`ReportOptions::long_poll_ns`] by default: 10 ms.
pub const DEFAULT_LONG_POLL_NS: u64 = 10_000_000;

/// A poll longer than the threshold: it held its thread that long.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LongPoll {
    /// Index into `TraceMeta::sites`: the `async fn` (or `tracing` future).
    pub site: u32,
    /// Its `module::name`.
    pub name: String,
    /// The id of the future polled (`Event::FutureId`), unique among the
    /// futures alive at the time; `None` in traces written before futures
    /// had ids.
    pub future_id: Option<u64>,
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// `name-tid` of that thread.
    pub thread_label: String,
    /// Its start, nanoseconds since the session's start.
    pub start_ns: u64,
    /// Its length, nanoseconds.
    pub dur_ns: u64,
    /// The poll's own time: its length minus its recorded children's.
    pub self_ns: u64,
    /// Calls recorded inside it (its whole subtree).
    pub calls: u64,
    /// The functions called inside it (at any depth) that spent the most
    /// of its time themselves (self time) first, at most
    /// [`LONG_POLL_CALLEES`]: where the poll's time went, the blocking call
    /// first.
    pub callees: Vec<PollCallee>,
    /// Records lost inside the poll: its calls are then incomplete.
    pub lost: u64,
}

/// A function called inside a long poll.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PollCallee {
    /// Index into `TraceMeta::sites`.
    pub site: u32,
    /// `module::name`.
    pub name: String,
    /// Its calls inside the poll.
    pub calls: u64,
    /// Their inclusive time (a recursive call counted once, at its
    /// outermost level, so this never exceeds the poll's length).
    pub total_ns: u64,
    /// Their own time: inclusive minus their recorded children's.
    pub self_ns: u64,
}

/// A function's figures inside one long poll.
#[derive(Clone, Copy, Default)]
struct Callee {
    calls: u64,
    total_ns: u64,
    self_ns: u64,
}

/// A call open inside a watched poll, for its self time.
struct Inside {
    site: u32,
    depth: u32,
    dur_ns: u64,
    children_ns: u64,
}

/// A long poll whose calls are still coming.
struct Watch {
    poll: Call,
    /// Its future's id may still follow (its `FutureId` comes right after it).
    id_due: bool,
    future_id: Option<u64>,
    children_ns: u64,
    calls: u64,
    lost: u64,
    by_site: HashMap<u32, Callee>,
    /// Its open calls, outermost first.
    open: Vec<Inside>,
}

/// A finished long poll, before names are put on it.
struct Done {
    poll: Call,
    future_id: Option<u64>,
    self_ns: u64,
    calls: u64,
    lost: u64,
    callees: Vec<(u32, Callee)>,
}

impl Done {
    /// The longest first; between two as long, the earlier, then the
    /// lower thread: a total order, so any grouping of threads agrees.
    fn key(&self) -> (std::cmp::Reverse<u64>, u64, u32, u32) {
        let c = &self.poll;
        (std::cmp::Reverse(c.dur_ns), c.start_ns, c.thread, c.depth)
    }
}

/// The long polls of the threads one report builder reads.
#[derive(Default)]
pub(super) struct LongPolls {
    threshold: Option<u64>,
    /// Per thread: its long polls still open, outermost first.
    watching: Vec<Vec<Watch>>,
    /// The longest finished ones, at most [`LONG_POLLS_KEPT`], longest first.
    kept: Vec<Done>,
    total: u64,
}

impl LongPolls {
    pub(super) fn new(opts: &ReportOptions) -> Self {
        LongPolls {
            threshold: opts.long_poll_ns,
            ..Default::default()
        }
    }

    /// One event of a thread the report shows.
    pub(super) fn push(&mut self, ev: &Event) {
        let Some(threshold) = self.threshold else {
            return;
        };
        match ev {
            Event::Call(c) => {
                self.close_to(c.thread, c.depth);
                if let Some(w) = self.watching.get_mut(c.thread as usize) {
                    for w in w.iter_mut() {
                        w.id_due = false;
                        w.inside(c);
                    }
                }
                if c.is_poll() && c.dur_ns > threshold {
                    grow(&mut self.watching, c.thread as usize).push(Watch {
                        poll: *c,
                        id_due: true,
                        future_id: None,
                        children_ns: 0,
                        calls: 0,
                        lost: 0,
                        by_site: HashMap::new(),
                        open: Vec::new(),
                    });
                }
            }
            Event::Lost(l) => {
                self.close_to(l.thread, l.depth);
                if let Some(w) = self.watching.get_mut(l.thread as usize) {
                    for w in w.iter_mut() {
                        w.id_due = false;
                        w.pop_to(l.depth);
                        w.lost = w.lost.saturating_add(l.count);
                    }
                }
            }
            Event::FutureId(x) => {
                if let Some(w) = self
                    .watching
                    .get_mut(x.thread as usize)
                    .and_then(|w| w.last_mut())
                {
                    if std::mem::take(&mut w.id_due) {
                        w.future_id = Some(x.id);
                    }
                }
            }
            // What follows a call (its counters, values) keeps its id due.
            Event::Counters(_) | Event::Values(_) => {}
            other => {
                if let Some(w) = self.watching.get_mut(other.thread() as usize) {
                    for w in w.iter_mut() {
                        w.id_due = false;
                    }
                }
            }
        }
    }

    /// Ends thread `t`'s long polls at `depth` or deeper: what comes next
    /// on the thread is outside them.
    fn close_to(&mut self, t: u32, depth: u32) {
        loop {
            let Some(stack) = self.watching.get_mut(t as usize) else {
                return;
            };
            if stack.last().is_none_or(|w| w.poll.depth < depth) {
                return;
            }
            let done = stack.pop().expect("checked above").finish();
            self.keep(done);
        }
    }

    /// Ends every open long poll (the threads' events are all read).
    pub(super) fn close_all(&mut self) {
        for t in 0..self.watching.len() {
            self.close_to(t as u32, 0);
        }
    }

    fn keep(&mut self, d: Done) {
        self.total = self.total.saturating_add(1);
        if self.kept.len() == LONG_POLLS_KEPT
            && self.kept.last().is_some_and(|l| l.key() <= d.key())
        {
            return;
        }
        let at = self.kept.partition_point(|k| k.key() < d.key());
        self.kept.insert(at, d);
        self.kept.truncate(LONG_POLLS_KEPT);
    }

    /// Adds another builder's long polls (of other threads).
    pub(super) fn merge(&mut self, mut other: LongPolls) {
        other.close_all();
        let total = self.total.saturating_add(other.total);
        for d in other.kept {
            self.keep(d);
        }
        self.total = total;
    }

    /// The kept long polls, longest first, named; and how many there were.
    pub(super) fn finish(mut self, meta: &TraceMeta) -> (Vec<LongPoll>, u64) {
        self.close_all();
        let list = self
            .kept
            .into_iter()
            .map(|d| LongPoll {
                site: d.poll.site,
                name: meta.site_name(d.poll.site).to_string(),
                future_id: d.future_id,
                thread: d.poll.thread,
                thread_label: meta.thread_label(d.poll.thread),
                start_ns: d.poll.start_ns,
                dur_ns: d.poll.dur_ns,
                self_ns: d.self_ns,
                calls: d.calls,
                callees: d
                    .callees
                    .into_iter()
                    .map(|(site, c)| PollCallee {
                        site,
                        name: meta.site_name(site).to_string(),
                        calls: c.calls,
                        total_ns: c.total_ns,
                        self_ns: c.self_ns,
                    })
                    .collect(),
                lost: d.lost,
            })
            .collect();
        (list, self.total)
    }
}

impl Watch {
    /// A call of the poll's thread after it: inside it if deeper (the
    /// caller closed the poll otherwise).
    fn inside(&mut self, c: &Call) {
        if c.depth <= self.poll.depth {
            return;
        }
        self.pop_to(c.depth);
        match self.open.last_mut() {
            Some(parent) => parent.children_ns = parent.children_ns.saturating_add(c.dur_ns),
            None => self.children_ns = self.children_ns.saturating_add(c.dur_ns),
        }
        // A recursive call's time is inside its outermost call's already.
        let nested = self.open.iter().any(|o| o.site == c.site);
        let e = self.by_site.entry(c.site).or_default();
        e.calls += 1;
        if !nested {
            e.total_ns = e.total_ns.saturating_add(c.dur_ns);
        }
        self.calls += 1;
        self.open.push(Inside {
            site: c.site,
            depth: c.depth,
            dur_ns: c.dur_ns,
            children_ns: 0,
        });
    }

    /// Finalises the self time of the calls open at `depth` or deeper.
    fn pop_to(&mut self, depth: u32) {
        while self.open.last().is_some_and(|o| o.depth >= depth) {
            let o = self.open.pop().expect("checked above");
            let e = self.by_site.entry(o.site).or_default();
            e.self_ns = e
                .self_ns
                .saturating_add(o.dur_ns.saturating_sub(o.children_ns));
        }
    }

    fn finish(mut self) -> Done {
        self.pop_to(0);
        let mut callees: Vec<(u32, Callee)> = self.by_site.into_iter().collect();
        // By own time: the time of a chain of wrappers around a blocking
        // call is the blocking call's, and only its own time says which.
        callees.sort_by_key(|&(site, c)| {
            (
                std::cmp::Reverse(c.self_ns),
                std::cmp::Reverse(c.total_ns),
                site,
            )
        });
        callees.truncate(LONG_POLL_CALLEES);
        Done {
            self_ns: self.poll.dur_ns.saturating_sub(self.children_ns),
            poll: self.poll,
            future_id: self.future_id,
            calls: self.calls,
            lost: self.lost,
            callees,
        }
    }
}

impl super::Report {
    /// The long polls' section of the table: each poll with its future,
    /// thread and start, then the functions called inside it. Nothing when
    /// long polls are off, or when the trace has no futures and none.
    pub(super) fn long_polls_text(&self, out: &mut String) {
        use crate::human::{human_duration, uftrace_time};
        use std::fmt::Write as _;
        let Some(threshold) = self.long_poll_ns else {
            return;
        };
        if self.long_polls_total == 0 {
            if !self.futures.is_empty() {
                let _ = writeln!(
                    out,
                    "\n# long polls: none longer than {}",
                    human_duration(threshold)
                );
            }
            return;
        }
        let n = self.long_polls_total;
        let _ = write!(
            out,
            "\n# long polls: {n} poll{} longer than {} held {} thread (no other task ran on it meanwhile)",
            if n == 1 { "" } else { "s" },
            human_duration(threshold),
            if n == 1 { "its" } else { "their" },
        );
        if n > self.long_polls.len() as u64 {
            let _ = write!(out, "; the {} longest:", self.long_polls.len());
        }
        out.push_str(
            "\n# under each, where its time went: the functions inside it by their own time\n",
        );
        for p in &self.long_polls {
            let id = p
                .future_id
                .map_or(String::new(), |id| format!(" (future {id:#x})"));
            let _ = writeln!(
                out,
                "  {}  {}{id} on {} at {}, {} call{} inside",
                uftrace_time(p.dur_ns),
                p.name,
                p.thread_label,
                human_duration(p.start_ns),
                p.calls,
                if p.calls == 1 { "" } else { "s" },
            );
            let w = p.callees.iter().map(|c| c.name.chars().count()).max();
            let w = w.unwrap_or(0);
            for c in &p.callees {
                let _ = writeln!(
                    out,
                    "    {}  {:<w$}  {} call{}, {} with its callees",
                    uftrace_time(c.self_ns),
                    c.name,
                    c.calls,
                    if c.calls == 1 { "" } else { "s" },
                    human_duration(c.total_ns),
                );
            }
            let shown: u64 = p.callees.iter().map(|c| c.calls).sum();
            if p.calls > shown {
                let own: u64 = p.callees.iter().map(|c| c.self_ns).sum();
                let rest = p.dur_ns.saturating_sub(p.self_ns).saturating_sub(own);
                let _ = writeln!(
                    out,
                    "    {}  ({} calls of other functions)",
                    uftrace_time(rest),
                    p.calls - shown
                );
            }
            let _ = writeln!(
                out,
                "    {}  (the poll's own time)",
                uftrace_time(p.self_ns)
            );
            if p.lost > 0 {
                let _ = writeln!(
                    out,
                    "    {} records LOST inside this poll: its calls are incomplete",
                    p.lost
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
