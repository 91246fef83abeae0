//! The function graph in the Linux kernel's `function_graph` text format, so
//! that people (and scripts) used to ftrace read it without a second thought.
//!
//! Layout per line (`kernel/trace/trace_functions_graph.c`): optional absolute
//! time, the thread column where ftrace has its CPU column (` 4242) `), optional
//! `name-tid` centred in 14 columns (`funcgraph-proc`), the duration column with
//! its overhead mark, then 2 spaces of indent per depth and `f();`, `f() {` or
//! `}`. Where consecutive lines come from different threads, the kernel's
//! context-switch block separates them.
//!
//! Deliberate differences from the kernel, all because fgtrace has threads
//! where ftrace has CPUs: the first column holds the thread id (header `TID`
//! instead of `CPU`, width of the largest id shown; `THR` for thread indexes),
//! and the context-switch block's number is the thread switched to.
//! Additions: loss totals in the header, uftrace's `/* LOST N records!! */`
//! where records are missing, and `(unwound)` on calls a panic ended (leaf:
//! `f(); /* unwound */`, exit: `} /* f (unwound) */`), and instant markers
//! (`tracing` events) as comment lines at their place in the tree, as
//! ftrace prints `trace_printk` (`/* name: n=3 */`, the marker's site name
//! and values; not in the threshold layout). Future spans and samples are
//! not drawn (the report shows futures); an `async fn`'s values, which
//! belong to its whole future, go on its polls ([`PollValues`]): its
//! arguments on the first poll's line, its return value on the last's.
//! A poll longer than [`GraphOptions::long_poll_ns`] (10 ms by default)
//! held its thread: `f() { /* [long poll] 20.104 ms */` and `} /* f [long poll] */`.
//!
//! `thresh_ns` reproduces `tracing_thresh`: only calls at or above it, each as
//! its exit line `} /* name */`, in exit order (children before parents). It
//! is kept byte-compatible with ftrace rather than drawn as a tree, so output
//! of both can be compared directly. `LOST` lines still appear: a loss is
//! never hidden by a filter other than the thread filter.

use super::human::{
    abs_time, counter_note, human_duration, loss_lines, overhead_mark, push_centered,
    push_ftrace_duration,
};
use crate::consume::{feed, Consume};
use crate::threads::{shown, thread_mask, ThreadSel};
use fgtrace_trace::{Call, Event, Lost, Marker, OffTime, TraceError, TraceMeta};
use std::io::{self, Write};

mod poll_values;
pub use poll_values::{PollValues, PollValuesBuilder};

/// What the first column (ftrace's CPU column) shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThreadColumn {
    /// The OS thread id.
    #[default]
    Tid,
    /// The thread's index in the trace (0, 1, ...): as compact as ftrace's CPU numbers.
    Index,
    /// No first column (`nofuncgraph-cpu`).
    Off,
}

/// Rendering options; `Default` is ftrace's defaults (thread column, overhead
/// marks and durations on; proc, abstime and tail comments off; no filters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphOptions {
    /// What the first column shows (ftrace's CPU column).
    pub thread_column: ThreadColumn,
    /// `funcgraph-proc`: `name-tid` centred in 14 columns, then ` | `.
    pub proc: bool,
    /// `funcgraph-abstime`: seconds.microseconds since session start.
    pub abstime: bool,
    /// `funcgraph-duration`.
    pub duration: bool,
    /// `funcgraph-overhead`: the `+ ! # * @ $` marks.
    pub overhead: bool,
    /// `funcgraph-tail`: every `}` says whose it is.
    pub tail: bool,
    /// Only these threads (empty: all).
    pub threads: Vec<ThreadSel>,
    /// `max_graph_depth` at render time: hide calls at depth >= N (0: unlimited).
    /// A call whose children are all hidden prints as a leaf.
    pub max_depth: u32,
    /// `tracing_thresh` at render time, in nanoseconds (0: off). See the module doc.
    pub thresh_ns: u64,
    /// Off-CPU time (ftrace's `nosleep-time`, the other way round): the
    /// duration column shows on-CPU time, and a call that was switched out
    /// ends in `/* wall W, off-CPU X (blocked B, preempted P) */`. Where the
    /// trace has no off-CPU time the header says why and durations stay wall.
    pub off_cpu: bool,
    /// The values of `async fn`s' futures, to print on their polls (see
    /// [`PollValues`]); `None`: polls show none. [`crate::TraceViews::write_graph`]
    /// and `fgtrace graph` collect them when the trace has such values.
    pub poll_values: Option<std::sync::Arc<PollValues>>,
    /// Polls longer than this (ns) are tagged `[long poll]`: they held
    /// their thread that long; `None`: no tag. Default 10 ms.
    pub long_poll_ns: Option<u64>,
}

impl Default for GraphOptions {
    fn default() -> Self {
        GraphOptions {
            thread_column: ThreadColumn::Tid,
            proc: false,
            abstime: false,
            duration: true,
            overhead: true,
            tail: false,
            threads: Vec::new(),
            max_depth: 0,
            thresh_ns: 0,
            off_cpu: false,
            poll_values: None,
            long_poll_ns: Some(crate::report::DEFAULT_LONG_POLL_NS),
        }
    }
}

/// Kernel `TRACE_GRAPH_PROCINFO_LENGTH`.
const PROC_WIDTH: usize = 14;
/// Kernel's `print_graph_proc` keeps 7 characters of the command name.
const PROC_NAME_CHARS: usize = 7;
const SEPARATOR: &str = " ------------------------------------------\n";
/// The duration column of a line that has no duration.
const NO_DURATION: &str = "              |  ";

/// A call printed as `f() {` (or, with a threshold, waiting for its exit line).
struct Open {
    site: u32,
    depth: u32,
    end_ns: u64,
    dur_ns: u64,
    unwound: bool,
    /// Its counters (allocations, instructions) for the exit line's comment.
    note: Option<String>,
    /// Its return value (`#[traced(ret)]`), for the exit line.
    ret: Option<String>,
    off: Option<OffTime>,
    /// A poll longer than `GraphOptions::long_poll_ns`.
    long: bool,
}

/// Where the counters of the call just drawn go (they follow its `Call`).
#[derive(Clone, Copy)]
enum Due {
    /// At the end of the last line in the buffer (a leaf).
    Leaf,
    /// Into the top open call's exit line.
    Open,
}

const LINE_BUF: usize = 64 * 1024;

/// Streams events into function-graph text. Holds only the open calls of each
/// thread (bounded by call depth), so memory does not grow with the trace.
pub struct GraphWriter<'a, W: Write> {
    meta: &'a TraceMeta,
    opts: &'a GraphOptions,
    w: W,
    mask: Vec<bool>,
    num_width: usize,
    /// Per thread: calls whose exit line is still to come, outermost first.
    open: Vec<Vec<Open>>,
    /// Thread of the last line written, for the context-switch block.
    last: Option<u32>,
    /// Lines not yet written (flushed in 64 KiB blocks: one `write` per line
    /// would dominate on an unbuffered writer).
    line: String,
    /// ` N) ` per thread.
    numbers: Vec<String>,
    /// The thread of the call just drawn and where its counters go.
    due: Option<(u32, Due)>,
    /// Where the values of the call just drawn go, when its function records
    /// values: its thread and site, the offset in `line` inside its `()`,
    /// and that of its `;` (a leaf) or `None` (an open call, whose return
    /// value goes to its exit line). The line stays in the buffer until they
    /// come (right after the call, after its counters).
    vals_at: Option<(u32, u32, usize, Option<usize>)>,
    /// A marker line kept in the buffer for its values: (thread, site,
    /// where its values go).
    marker_at: Option<(u32, u32, usize)>,
}

impl<'a, W: Write> GraphWriter<'a, W> {
    /// Writes the header and returns a writer ready for events.
    pub fn new(meta: &'a TraceMeta, opts: &'a GraphOptions, w: W) -> io::Result<Self> {
        let mask = thread_mask(meta, &opts.threads);
        let num_width = meta
            .threads
            .iter()
            .enumerate()
            .filter(|&(i, _)| mask[i])
            .map(|(i, t)| {
                digits(if opts.thread_column == ThreadColumn::Index {
                    i as u64
                } else {
                    t.tid as u64
                })
            })
            .max()
            .unwrap_or(1);
        let mut g = GraphWriter {
            meta,
            opts,
            w,
            mask,
            num_width,
            open: Vec::new(),
            last: None,
            line: String::with_capacity(LINE_BUF + 1024),
            numbers: Vec::new(),
            due: None,
            vals_at: None,
            marker_at: None,
        };
        g.header()?;
        Ok(g)
    }

    fn header(&mut self) -> io::Result<()> {
        let o = self.opts;
        let mut h = String::from("# tracer: function_graph\n#\n");
        let losses = loss_lines(self.meta, &self.mask, &[]);
        for l in &losses {
            h.push_str("# ");
            h.push_str(l);
            h.push('\n');
        }
        if !losses.is_empty() {
            h.push_str("#\n");
        }
        // Functions auto-exclude switched to count-only on the shown threads:
        // their calls after the switch are not in the graph.
        let mut switched: Vec<u32> = self
            .meta
            .count_only
            .iter()
            .filter(|c| self.shows(c.thread))
            .map(|c| c.site)
            .collect();
        switched.sort_unstable();
        switched.dedup();
        if !switched.is_empty() {
            let calls = fgtrace_trace::saturating_sum(
                self.meta
                    .count_only
                    .iter()
                    .filter(|c| self.shows(c.thread))
                    .map(|c| c.calls_after),
            );
            let n = switched.len();
            h.push_str(&format!(
                "# {n} function{} switched to count-only (auto-exclude): {calls} later calls counted, not shown (`fgtrace info` lists them)\n#\n",
                if n == 1 { "" } else { "s" }
            ));
        }
        // Functions the build's plan counted: never timed, so never in the graph.
        if !self.meta.counted.is_empty() {
            let n = self.meta.counted.len();
            h.push_str(&format!(
                "# {n} function{} counted by the build's plan, not timed: {} calls, not shown (`fgtrace report` lists them)\n#\n",
                if n == 1 { "" } else { "s" },
                self.meta.total_counted()
            ));
        }
        if o.off_cpu {
            match self.meta.off_cpu.as_ref() {
                Some(oc) if oc.is_available() => {
                    h.push_str("# off-CPU: DURATION is on-CPU time; /* wall, off-CPU (blocked, preempted) */ where switched out\n");
                    if let Some(why) = &oc.unavailable {
                        h.push_str(&format!("# off-CPU unavailable for some threads: {why}\n"));
                    }
                    if oc.lost() > 0 {
                        h.push_str(&format!("# off-CPU: {} context-switch records lost\n", oc.lost()));
                    }
                }
                Some(oc) => h.push_str(&format!("# off-CPU unavailable: {}\n", oc.reason())),
                None => h.push_str("# off-CPU unavailable: not recorded (record with Config::off_cpu(true) or FGTRACE_OFFCPU=1)\n"),
            }
            h.push_str("#\n");
        }
        // Column titles from print_graph_headers_flags, one piece per enabled column.
        let (mut a, mut b) = (String::from("#"), String::from("#"));
        if o.abstime {
            a.push_str("     TIME       ");
            b.push_str("      |         ");
        }
        if o.thread_column != ThreadColumn::Off {
            let label = if o.thread_column == ThreadColumn::Tid {
                "TID"
            } else {
                "THR"
            };
            a.push_str(&format!(" {label:<w$}", w = self.num_width + 2));
            b.push_str(&format!(" {:<w$}", "|", w = self.num_width + 2));
        }
        if o.proc {
            a.push_str("  TASK/PID       ");
            b.push_str("   |    |        ");
        }
        if o.duration {
            a.push_str("  DURATION   ");
            b.push_str("   |   |      ");
        }
        a.push_str("               FUNCTION CALLS\n");
        b.push_str("               |   |   |   |\n");
        h.push_str(&a);
        h.push_str(&b);
        self.w.write_all(h.as_bytes())
    }

    /// A call's counters, as a tail comment on its leaf line or exit line.
    fn counters(&mut self, due: Due, t: u32, values: &[u64]) -> io::Result<()> {
        let Some(note) = counter_note(&self.meta.counters, values) else {
            return Ok(());
        };
        match due {
            Due::Leaf => {
                if self.line.ends_with('\n') {
                    self.line.pop();
                    self.line.push_str(" /* ");
                    self.line.push_str(&note);
                    self.line.push_str(" */");
                    if self.vals_at.is_some_and(|v| v.0 == t) {
                        // Its values are still to be inserted.
                        self.line.push('\n');
                    } else {
                        self.end_line()?;
                    }
                }
            }
            Due::Open => {
                if let Some(o) = self.stack(t).last_mut() {
                    o.note = Some(note);
                }
            }
        }
        Ok(())
    }

    /// Closes every open call (their durations are known) and flushes. The
    /// thread of the last line goes first, so no context switch is needed for it.
    pub fn finish(mut self) -> io::Result<W> {
        let order = self.last.into_iter().chain(0..self.open.len() as u32);
        for t in order.collect::<Vec<_>>() {
            self.close_to(t, 0)?;
        }
        self.w.write_all(self.line.as_bytes())?;
        self.line.clear();
        self.w.flush()?;
        Ok(self.w)
    }

    fn call(&mut self, c: &Call) -> io::Result<()> {
        let o = self.opts;
        if !self.shows(c.thread) || (o.max_depth != 0 && c.depth >= o.max_depth) {
            return Ok(());
        }
        self.close_to(c.thread, c.depth)?;
        let off = if o.off_cpu {
            self.meta
                .off_cpu
                .as_ref()
                .and_then(|oc| oc.within(c.thread, c.start_ns, c.end_ns()))
        } else {
            None
        };
        let long = c.is_poll() && o.long_poll_ns.is_some_and(|t| c.dur_ns > t);
        let open = Open {
            site: c.site,
            depth: c.depth,
            end_ns: c.end_ns(),
            dur_ns: c.dur_ns,
            unwound: c.unwound(),
            note: None,
            ret: None,
            off,
            long,
        };
        // A poll has no values of its own (its future has), so none follow
        // it; those of its future it shows are known already.
        let has_values = !c.is_poll()
            && self
                .meta
                .sites
                .get(c.site as usize)
                .is_some_and(|s| !s.values.is_empty());
        let poll_values = match (&o.poll_values, c.is_poll()) {
            (Some(p), true) => p.of(c),
            _ => None,
        };
        if o.thresh_ns > 0 {
            if c.dur_ns >= o.thresh_ns {
                self.stack(c.thread).push(open);
                self.due = Some((c.thread, Due::Open));
            }
            return Ok(());
        }
        let children_shown = c.has_children() && (o.max_depth == 0 || c.depth + 1 < o.max_depth);
        self.prologue(c.thread, c.start_ns)?;
        if children_shown {
            self.no_duration();
            self.indent(c.depth);
            self.line.push_str(self.meta.site_name(c.site));
            self.line.push('(');
            let args_at = self.line.len();
            self.line.push_str(") {");
            self.stack(c.thread).push(open);
            self.due = Some((c.thread, Due::Open));
            if let Some(v) = poll_values {
                self.insert_values(c.thread, c.site, args_at, None, v);
            }
            if long {
                self.long_tag(c.dur_ns);
            }
            if has_values {
                self.vals_at = Some((c.thread, c.site, args_at, None));
                self.line.push('\n');
                return Ok(());
            }
        } else {
            self.duration(on_cpu(c.dur_ns, off));
            self.indent(c.depth);
            self.line.push_str(self.meta.site_name(c.site));
            self.line.push('(');
            let args_at = self.line.len();
            self.line.push_str(");");
            if has_values {
                let semi = self.line.len() - 1;
                self.vals_at = Some((c.thread, c.site, args_at, Some(semi)));
            }
            if let Some(v) = poll_values {
                let semi = self.line.len() - 1;
                self.insert_values(c.thread, c.site, args_at, Some(semi), v);
            }
            if c.unwound() {
                self.line.push_str(" /* unwound */");
            }
            if long {
                self.long_tag(c.dur_ns);
            }
            if has_values {
                self.off_comment(c.dur_ns, off);
                self.line.push('\n');
                if !self.meta.counters.is_empty() {
                    self.due = Some((c.thread, Due::Leaf));
                }
                return Ok(());
            }
            if !self.meta.counters.is_empty() {
                // Keep the line in the buffer: its counters may follow.
                self.line.push('\n');
                self.due = Some((c.thread, Due::Leaf));
                return Ok(());
            }
            self.off_comment(c.dur_ns, off);
        }
        self.end_line()
    }

    /// `/* name */` at the marker's depth; its values, if they follow,
    /// become `/* name: n=3, ok=true */`.
    fn marker(&mut self, m: &Marker) -> io::Result<()> {
        let o = self.opts;
        if !self.shows(m.thread) || o.thresh_ns > 0 || (o.max_depth != 0 && m.depth >= o.max_depth)
        {
            return Ok(());
        }
        self.close_to(m.thread, m.depth)?;
        self.prologue(m.thread, m.ts_ns)?;
        self.no_duration();
        self.indent(m.depth);
        self.line.push_str("/* ");
        self.line.push_str(self.meta.site_name(m.site));
        let has_values = self
            .meta
            .sites
            .get(m.site as usize)
            .is_some_and(|s| !s.values.is_empty());
        if has_values {
            self.marker_at = Some((m.thread, m.site, self.line.len()));
        }
        self.line.push_str(" */");
        if has_values {
            // Kept in the buffer: its values may follow.
            self.line.push('\n');
            return Ok(());
        }
        self.end_line()
    }

    /// A wake of a future, where it happened: `/* wake: name */` among
    /// the waking thread's calls, as a marker is shown.
    fn wake(&mut self, w: &fgtrace_trace::Wake) -> io::Result<()> {
        let o = self.opts;
        if !self.shows(w.thread) || o.thresh_ns > 0 || (o.max_depth != 0 && w.depth >= o.max_depth)
        {
            return Ok(());
        }
        self.close_to(w.thread, w.depth)?;
        self.prologue(w.thread, w.ts_ns)?;
        self.no_duration();
        self.indent(w.depth);
        self.line.push_str("/* wake: ");
        self.line.push_str(self.meta.site_name(w.site));
        self.line.push_str(" */");
        self.end_line()
    }

    fn lost(&mut self, l: &Lost) -> io::Result<()> {
        if !self.shows(l.thread) {
            return Ok(());
        }
        self.close_to(l.thread, l.depth)?;
        self.prologue(l.thread, l.at_ns)?;
        self.no_duration();
        self.indent(l.depth);
        self.line
            .push_str(&format!("/* LOST {} records!! */", l.count));
        self.end_line()
    }

    /// Prints the exit lines of thread `t`'s open calls at `depth` or deeper.
    fn close_to(&mut self, t: u32, depth: u32) -> io::Result<()> {
        while let Some(o) = self.pop_open(t, depth) {
            self.prologue(t, o.end_ns)?;
            self.duration(on_cpu(o.dur_ns, o.off));
            self.indent(o.depth);
            let unwound = match (o.unwound, o.long) {
                (true, true) => " (unwound) [long poll]",
                (true, false) => " (unwound)",
                (false, true) => " [long poll]",
                (false, false) => "",
            };
            let name = match &o.ret {
                Some(r) => format!("{} = {r}", self.meta.site_name(o.site)),
                None => self.meta.site_name(o.site).to_string(),
            };
            if let Some(note) = &o.note {
                self.line
                    .push_str(&format!("}} /* {name}{unwound}: {note} */"));
            } else if self.opts.thresh_ns > 0
                || self.opts.tail
                || o.unwound
                || o.long
                || o.ret.is_some()
            {
                self.line.push_str(&format!("}} /* {name}{unwound} */"));
            } else {
                self.line.push('}');
            }
            self.off_comment(o.dur_ns, o.off);
            self.end_line()?;
        }
        Ok(())
    }

    /// ` /* [long poll] 20.104 ms */` on a long poll's line.
    fn long_tag(&mut self, dur_ns: u64) {
        use std::fmt::Write as _;
        let _ = write!(self.line, " /* [long poll] {} */", human_duration(dur_ns));
    }

    /// ` /* wall W, off-CPU X (blocked B, preempted P) */` for a call that
    /// was switched out.
    fn off_comment(&mut self, dur_ns: u64, off: Option<OffTime>) {
        let Some(t) = off.filter(|t| t.total_ns() > 0) else {
            return;
        };
        use std::fmt::Write as _;
        let _ = write!(
            self.line,
            " /* wall {}, off-CPU {} (blocked {}, preempted {}) */",
            human_duration(dur_ns),
            human_duration(t.total_ns()),
            human_duration(t.blocked_ns),
            human_duration(t.preempted_ns)
        );
    }

    fn pop_open(&mut self, t: u32, depth: u32) -> Option<Open> {
        let stack = self.open.get_mut(t as usize)?;
        if stack.last()?.depth >= depth {
            stack.pop()
        } else {
            None
        }
    }

    fn shows(&self, t: u32) -> bool {
        shown(&self.mask, !self.opts.threads.is_empty(), t)
    }

    fn stack(&mut self, t: u32) -> &mut Vec<Open> {
        let t = t as usize;
        if self.open.len() <= t {
            self.open.resize_with(t + 1, Vec::new);
        }
        &mut self.open[t]
    }

    /// Starts a line of thread `t` at time `ts`: the context-switch block if
    /// the previous line was another thread's, then the leading columns.
    fn prologue(&mut self, t: u32, ts: u64) -> io::Result<()> {
        if self.last != Some(t) {
            if let Some(prev) = self.last {
                self.separator(prev, t)?;
            }
            self.last = Some(t);
        }
        if self.opts.abstime {
            self.line.push_str(&abs_time(ts));
            self.line.push_str(" |  ");
        }
        if self.opts.thread_column != ThreadColumn::Off {
            self.thread_number(t);
        }
        if self.opts.proc {
            let label = self.proc_label(t);
            push_centered(&mut self.line, &label, PROC_WIDTH);
            self.line.push_str(" | ");
        }
        Ok(())
    }

    /// The kernel's `verif_pid` block: dashes, ` N)  prev  =>  next`, dashes, blank line.
    fn separator(&mut self, prev: u32, next: u32) -> io::Result<()> {
        self.line.push_str(SEPARATOR);
        self.thread_number(next);
        let (p, n) = (self.proc_label(prev), self.proc_label(next));
        push_centered(&mut self.line, &p, PROC_WIDTH);
        self.line.push_str(" => ");
        push_centered(&mut self.line, &n, PROC_WIDTH);
        self.line.push('\n');
        self.line.push_str(SEPARATOR);
        self.line.push('\n');
        Ok(())
    }

    /// ` N) ` right-aligned like the kernel's `%*d)` CPU number (formatted
    /// once per thread: it starts every line).
    fn thread_number(&mut self, t: u32) {
        let t = t as usize;
        if self.numbers.len() <= t {
            let (opts, meta, w) = (self.opts, self.meta, self.num_width);
            self.numbers.extend((self.numbers.len()..=t).map(|i| {
                let n = match opts.thread_column {
                    ThreadColumn::Index => i as u64,
                    _ => meta.threads.get(i).map_or(i as u64, |th| th.tid as u64),
                };
                format!(" {n:>w$}) ")
            }));
        }
        self.line.push_str(&self.numbers[t]);
    }

    /// `comm-pid` with the comm cut to 7 characters, as `print_graph_proc` does.
    fn proc_label(&self, t: u32) -> String {
        match self.meta.threads.get(t as usize) {
            Some(i) => format!(
                "{}-{}",
                i.name.chars().take(PROC_NAME_CHARS).collect::<String>(),
                i.tid
            ),
            None => self.meta.thread_label(t),
        }
    }

    fn duration(&mut self, ns: u64) {
        if self.opts.duration {
            self.line.push(if self.opts.overhead {
                overhead_mark(ns)
            } else {
                ' '
            });
            self.line.push(' ');
            push_ftrace_duration(&mut self.line, ns);
            self.line.push_str("|  ");
        }
    }

    fn no_duration(&mut self) {
        if self.opts.duration {
            self.line.push_str(NO_DURATION);
        }
    }

    fn indent(&mut self, depth: u32) {
        for _ in 0..depth {
            self.line.push_str("  ");
        }
    }

    fn end_line(&mut self) -> io::Result<()> {
        self.line.push('\n');
        if self.line.len() >= LINE_BUF {
            self.w.write_all(self.line.as_bytes())?;
            self.line.clear();
        }
        Ok(())
    }
}

impl<W: Write> Consume for GraphWriter<'_, W> {
    type Error = io::Error;

    /// Renders one event (calls and losses; futures and samples are skipped).
    fn push(&mut self, ev: &Event) -> io::Result<()> {
        let due = self.due.take();
        if let Some((t, site, at)) = self.marker_at.take() {
            if let Event::Values(v) = ev {
                if v.thread == t {
                    if let Some(info) = self.meta.sites.get(site as usize) {
                        let args: Vec<String> = v
                            .named(info, &self.meta.strings)
                            .map(|(n, x)| format!("{n}={x}"))
                            .collect();
                        if !args.is_empty() {
                            self.line.insert_str(at, &format!(": {}", args.join(", ")));
                        }
                    }
                    return self.end_pending();
                }
            }
            self.end_pending()?;
        }
        if !matches!(ev, Event::Counters(_)) {
            // Values come right after their call (after its counters).
            if let Some(at) = self.vals_at.take() {
                if let Event::Values(v) = ev {
                    if v.thread == at.0 {
                        return self.values(at, v);
                    }
                }
                self.end_pending()?;
            }
        }
        match ev {
            Event::Call(c) => self.call(c),
            Event::Lost(l) => self.lost(l),
            Event::Counters(c) => match due {
                Some((t, d)) if t == c.thread => self.counters(d, t, &c.values),
                _ => Ok(()),
            },
            Event::Marker(m) => self.marker(m),
            Event::Future(_)
            | Event::Sample(_)
            | Event::Values(_)
            | Event::FutureId(_)
            | Event::FutureTimes(_) => Ok(()),
            Event::Wake(w) => self.wake(w),
        }
    }
}

impl<W: Write> GraphWriter<'_, W> {
    /// The values of the call just drawn: `name(len=83, depth=2)` on its
    /// line, `= Ok` before a leaf's `;` or on an open call's exit line.
    fn values(
        &mut self,
        (t, site, args_at, semi): (u32, u32, usize, Option<usize>),
        v: &fgtrace_trace::CallValues,
    ) -> io::Result<()> {
        self.insert_values(t, site, args_at, semi, v);
        self.end_pending()
    }

    /// Puts `v` on the line just drawn (see [`Self::values`]).
    fn insert_values(
        &mut self,
        t: u32,
        site: u32,
        args_at: usize,
        semi: Option<usize>,
        v: &fgtrace_trace::CallValues,
    ) {
        if let Some(info) = self.meta.sites.get(site as usize) {
            let (args, ret) = v.split_display(info, &self.meta.strings);
            match (semi, ret) {
                (Some(at), Some(r)) => self.line.insert_str(at, &format!(" = {r}")),
                (None, Some(r)) => {
                    if let Some(o) = self.stack(t).last_mut() {
                        o.ret = Some(r);
                    }
                }
                _ => {}
            }
            self.line.insert_str(args_at, &args);
        }
    }

    /// Flushes a line kept in the buffer for values that did not come.
    fn end_pending(&mut self) -> io::Result<()> {
        if self.line.len() >= LINE_BUF {
            self.w.write_all(self.line.as_bytes())?;
            self.line.clear();
        }
        Ok(())
    }
}

/// The duration shown with off-CPU time on: wall minus off-CPU.
fn on_cpu(dur_ns: u64, off: Option<OffTime>) -> u64 {
    dur_ns.saturating_sub(off.map_or(0, |t| t.total_ns()))
}

fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Renders `events` as a function graph into `w` (buffered here). On a read
/// error, everything before it is rendered and its open calls closed, then the
/// error is returned; write errors return at once.
///
/// ```
/// use fgtrace::view::{ok_events, write_graph, GraphOptions};
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
/// let mut out = Vec::new();
/// write_graph(&trace.meta, ok_events(trace.events()), &GraphOptions::default(), &mut out)?;
/// let text = String::from_utf8(out)?;
/// // ftrace's layout: a parent's `{`, its children indented, its `}` with
/// // the duration; a leaf on one line.
/// assert!(text.contains("outer() {"), "{text}");
/// assert_eq!(text.matches("inner();").count(), 2, "{text}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_graph<W: Write>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    opts: &GraphOptions,
    w: W,
) -> Result<(), TraceError> {
    let mut g = GraphWriter::new(meta, opts, io::BufWriter::with_capacity(1 << 16, w))?;
    let failed = feed(&mut g, events)?;
    g.finish()?;
    failed.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TraceViews;
    use fgtrace_trace::encoding::{interleave, ChunkEncoder};
    use fgtrace_trace::{flags, LossKind, SiteInfo, ThreadInfo, Trace};

    const MAIN: u32 = 0;
    const WORKER: u32 = 1;

    fn site(name: &str) -> SiteInfo {
        SiteInfo {
            name: name.into(),
            module_path: "demo".into(),
            file: "demo.rs".into(),
            line: 1,
            is_async: false,
            values: Vec::new(),
        }
    }

    use crate::test_traces::flagged_call as call;

    fn encode(thread: u32, events: &[Event]) -> Vec<fgtrace_trace::encoding::Chunk> {
        let mut enc = ChunkEncoder::new(thread);
        for e in events {
            enc.push(e);
        }
        enc.finish()
    }

    /// The golden trace. Thread `main` (tid 4242) runs a `sys_open` tree whose
    /// durations hit every number width (1.382, 49.370, 1837.709, 33998.59,
    /// 119760.2, 3594274 us) and both sides of every overhead-mark boundary;
    /// thread `worker` (tid 4243) has a gap of 42 lost records. Main's events
    /// come in two chunks with the worker's chunk between them (chunks are
    /// ordered by their first timestamp), which forces two context switches.
    fn golden_trace() -> Trace {
        let names = [
            "sys_open",      // 0
            "do_sys_open",   // 1
            "__might_sleep", // 2
            "getname",       // 3
            "alloc_fd",      // 4
            "expand_files",  // 5
            "spin_lock",     // 6
            "spin_unlock",   // 7
            "do_filp_open",  // 8
            "fd_install",    // 9
            "fsnotify",      // 10
            "audit",         // 11
            "kfree",         // 12
            "kmem",          // 13
            "rcu",           // 14
            "sched",         // 15
            "wait",          // 16
            "panicky",       // 17
            "worker_loop",   // 18
            "recv",          // 19
            "send",          // 20
        ];
        let mut meta = TraceMeta {
            program: "demo".into(),
            pid: 4242,
            duration_ns: 4_000_000_000,
            sites: names.iter().map(|n| site(n)).collect(),
            ..Default::default()
        };
        meta.threads.push(ThreadInfo {
            tid: 4242,
            name: "main".into(),
            calls: 18,
            overruns: 3,
            ..Default::default()
        });
        meta.threads.push(ThreadInfo {
            tid: 4243,
            name: "worker".into(),
            calls: 3,
            lost: 42,
            ..Default::default()
        });
        let k = flags::HAS_CHILDREN;
        let main_1 = [
            call(MAIN, 0, 0, 1_000_000, 3_594_274_999, k),
            call(MAIN, 1, 1, 1_100_000, 119_760_299, k),
            call(MAIN, 2, 2, 1_200_000, 1_382, 0),
            call(MAIN, 3, 2, 1_300_000, 49_370, 0),
            call(MAIN, 4, 2, 1_400_000, 33_998_599, k),
            call(MAIN, 5, 3, 1_500_000, 1_837_709, 0),
            call(MAIN, 6, 3, 3_400_000, 10_000, 0),
            call(MAIN, 7, 3, 3_500_000, 10_001, 0),
        ];
        let worker = [
            call(WORKER, 18, 0, 2_000_000, 5_000, k),
            call(WORKER, 19, 1, 2_001_000, 1_000, 0),
            Event::Lost(Lost {
                thread: WORKER,
                depth: 1,
                at_ns: 2_003_000,
                count: 42,
                kind: LossKind::Dropped,
            }),
            call(WORKER, 20, 1, 2_004_500, 500, 0),
        ];
        let main_2 = [
            call(MAIN, 8, 2, 40_000_000, 100_000, 0),
            call(MAIN, 9, 2, 40_200_000, 100_001, 0),
            call(MAIN, 10, 1, 130_000_000, 1_000_000, 0),
            call(MAIN, 11, 1, 140_000_000, 1_000_001, 0),
            call(MAIN, 12, 1, 150_000_000, 10_000_000, 0),
            call(MAIN, 13, 1, 170_000_000, 10_000_001, 0),
            call(MAIN, 14, 1, 190_000_000, 100_000_000, 0),
            call(MAIN, 15, 1, 300_000_000, 100_000_001, 0),
            call(MAIN, 16, 1, 500_000_000, 1_000_000_000, 0),
            call(MAIN, 17, 1, 1_600_000_000, 2_000, flags::UNWOUND),
        ];
        let mut chunks = encode(MAIN, &main_1);
        chunks.extend(encode(MAIN, &main_2));
        chunks.extend(encode(WORKER, &worker));
        Trace::from_chunks(meta, interleave(chunks))
    }

    fn render(t: &Trace, opts: &GraphOptions) -> String {
        let mut out = Vec::new();
        t.write_graph(opts, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Compares line by line first, for a readable failure, then byte for byte.
    fn assert_golden(got: &str, want: &str) {
        for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            assert_eq!(g, w, "line {} differs\n--- got:\n{got}", i + 1);
        }
        assert_eq!(got, want, "--- got:\n{got}");
    }

    #[test]
    fn chunks_interleave_as_the_golden_files_assume() {
        let t = golden_trace();
        let order: Vec<(u32, u64)> = t.chunks().iter().map(|c| (c.thread, c.first_ns)).collect();
        assert_eq!(
            order,
            [(MAIN, 1_000_000), (WORKER, 2_000_000), (MAIN, 40_000_000)]
        );
    }

    // How the golden files (tests/golden/graph_*.txt, typed by hand) follow
    // from the kernel's code, trace_functions_graph.c and trace_output.c:
    //
    // Header: "# tracer: function_graph", "#", our loss lines (from the thread
    // metadata: main has 3 overruns, worker lost 42) and "#", then the two
    // print_graph_headers_flags lines, one piece per enabled column: "#", the
    // CPU piece widened to the tid width (" TID" + 3 spaces: the 4-digit tid
    // column " 4242) " is 7 wide where the kernel's " 0) " is 4; second line
    // " |" + 5 spaces), "  DURATION   " / "   |   |      ", then
    // "               FUNCTION CALLS" / "               |   |   |   |".
    // With abstime and proc the "     TIME       " / "      |         " and
    // "  TASK/PID       " / "   |    |        " pieces come first and after
    // the CPU piece.
    //
    // Body lines: " 4242) " (print_graph_cpu, "%*d) " with width 4), then the
    // duration column: an entry with children prints 14 spaces + "|  "
    // (FLAGS_FILL_FULL); a leaf or exit prints trace_find_mark (strict >), a
    // space, trace_print_graph_duration (whole us, ".%03lu" cut to keep 7
    // digits, " us ", spaces up to 8 characters of number), "|  "; then two
    // spaces per depth and "f();", "f() {" or "}".
    //   __might_sleep 1382 ns  -> "  1.382 us    " (no mark, 3 pad spaces)
    //   getname 49370          -> "+ 49.370 us   " (> 10000 ns)
    //   expand_files 1837709   -> "# 1837.709 us " (> 1 ms, 8 digits, no pad)
    //   spin_lock 10000        -> "  10.000 us   " (exactly 10 us: no '+')
    //   spin_unlock 10001      -> "+ 10.001 us   "
    //   alloc_fd 33998599      -> "* 33998.59 us " (5 integer digits, 2 decimals, cut not rounded)
    //   do_filp_open 100000    -> "+ 100.000 us  " (exactly 100 us: '+' not '!')
    //   fd_install 100001      -> "! 100.001 us  "
    //   do_sys_open 119760299  -> "@ 119760.2 us " (6 digits, 1 decimal, > 100 ms)
    //   fsnotify 1000000       -> "! 1000.000 us " (exactly 1 ms: '!' not '#')
    //   audit 1000001          -> "# 1000.001 us "
    //   kfree 10000000         -> "# 10000.00 us " (exactly 10 ms: '#' not '*')
    //   kmem 10000001          -> "* 10000.00 us "
    //   rcu 100000000          -> "* 100000.0 us " (exactly 100 ms: '*' not '@')
    //   sched 100000001        -> "@ 100000.0 us "
    //   wait 1000000000        -> "@ 1000000 us  " (exactly 1 s: '@' not '$'; 7 digits, no decimals, 1 pad)
    //   sys_open 3594274999    -> "$ 3594274 us  "
    // Nesting: the HAS_CHILDREN flag opens "f() {"; a call's "}" comes when
    // its thread's next call at its depth or above arrives (alloc_fd's at
    // do_filp_open, do_sys_open's at fsnotify) or at the end (sys_open, then
    // worker_loop, whose thread goes last). panicky is UNWOUND: "panicky();
    // /* unwound */". The worker's Lost event (depth 1) prints
    // "/* LOST 42 records!! */" with the no-duration fill and 2 spaces.
    //
    // Context switches: verif_pid's block, " " + 42 dashes, then
    // print_graph_cpu of the thread switched to, print_graph_proc of the old
    // and new thread (comm-pid centred in 14: "main-4242" is 9 long, so 2
    // spaces before and 3 after; "worker-4243" is 11, so 1 before and 2
    // after), " => " between them, the dashes again and an empty line.
    //
    // Threshold (1 ms): only calls >= 1 ms, each as "} /* name */" at its
    // depth when it ends, children first (fsnotify at exactly 1 ms is in);
    // the worker has no such call, but its LOST line still appears, with the
    // context switches around it.
    //
    // Abstime/proc/tail, max depth 2, thread "main": every line starts with
    // "%5lu.%06lu |  " of the line's time (entry for "{" and leaves, exit for
    // "}": sys_open ends at 1000000 + 3594274999 ns = 3.595274 s), then
    // " 4242) ", "  main-4242   " + " | ". do_sys_open's children are at depth
    // 2, all hidden, so it prints as a leaf; the "}" has "/* sys_open */".
    #[test]
    fn golden_default() {
        let got = render(&golden_trace(), &GraphOptions::default());
        assert_golden(&got, include_str!("../../tests/golden/graph_default.txt"));
    }

    #[test]
    fn golden_thresh() {
        let opts = GraphOptions {
            thresh_ns: 1_000_000,
            ..Default::default()
        };
        let got = render(&golden_trace(), &opts);
        assert_golden(&got, include_str!("../../tests/golden/graph_thresh.txt"));
    }

    #[test]
    fn golden_abstime_proc_tail_depth_thread() {
        let opts = GraphOptions {
            abstime: true,
            proc: true,
            tail: true,
            max_depth: 2,
            threads: vec!["main".parse().unwrap()],
            ..Default::default()
        };
        let got = render(&golden_trace(), &opts);
        assert_golden(
            &got,
            include_str!("../../tests/golden/graph_abstime_proc_tail.txt"),
        );
    }

    #[test]
    fn thread_filter_by_tid_hides_other_threads_and_their_losses() {
        let opts = GraphOptions {
            threads: vec![ThreadSel::Tid(4243)],
            ..Default::default()
        };
        let got = render(&golden_trace(), &opts);
        assert!(!got.contains("4242"), "{got}");
        assert!(
            !got.contains("-----"),
            "one thread needs no context switch\n{got}"
        );
        assert!(
            got.contains("# LOST 42 records on thread worker-4243\n"),
            "{got}"
        );
        assert!(
            got.contains(" 4243)               |    /* LOST 42 records!! */\n"),
            "{got}"
        );
        assert!(got.ends_with(" 4243)   5.000 us    |  }\n"), "{got}");
    }

    #[test]
    fn index_column_and_no_duration() {
        let opts = GraphOptions {
            thread_column: ThreadColumn::Index,
            duration: false,
            ..Default::default()
        };
        let got = render(&golden_trace(), &opts);
        let mut lines = got.lines();
        assert_eq!(
            lines.find(|l| l.starts_with("# THR")),
            Some("# THR               FUNCTION CALLS")
        );
        // Without the duration column the kernel prints nothing between the
        // CPU column and the indent.
        assert!(
            got.contains("\n 0) sys_open() {\n 0)   do_sys_open() {\n 0)     __might_sleep();\n"),
            "{got}"
        );
        assert!(
            got.contains("\n 1)   main-4242    =>  worker-4243  \n"),
            "{got}"
        );
    }

    #[test]
    fn read_error_keeps_what_was_read_and_closes_open_calls() {
        let t = golden_trace();
        let events: Vec<_> = t
            .events()
            .take(3)
            .map(Ok)
            .chain([Err(TraceError::NotATrace)])
            .collect();
        let mut out = Vec::new();
        let err = write_graph(&t.meta, events, &GraphOptions::default(), &mut out).unwrap_err();
        assert!(matches!(err, TraceError::NotATrace));
        let got = String::from_utf8(out).unwrap();
        let body: Vec<&str> = got.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            body,
            [
                " 4242)               |  sys_open() {",
                " 4242)               |    do_sys_open() {",
                " 4242)   1.382 us    |      __might_sleep();",
                " 4242) @ 119760.2 us |    }",
                " 4242) $ 3594274 us  |  }",
            ]
        );
    }

    #[test]
    fn a_parent_whose_children_are_all_hidden_is_a_leaf() {
        let opts = GraphOptions {
            max_depth: 1,
            ..Default::default()
        };
        let got = render(&golden_trace(), &opts);
        let body: Vec<&str> = got.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            body,
            [
                " 4242) $ 3594274 us  |  sys_open();",
                " ------------------------------------------",
                " 4243)   main-4242    =>  worker-4243  ",
                " ------------------------------------------",
                "",
                " 4243)   5.000 us    |  worker_loop();",
                // Losses are always shown, even below the depth limit.
                " 4243)               |    /* LOST 42 records!! */",
            ]
        );
    }

    #[test]
    fn the_header_says_how_many_functions_were_switched_to_count_only() {
        let mut t = golden_trace();
        let plain = render(&t, &GraphOptions::default());
        assert!(!plain.contains("count-only"), "{plain}");
        let co = |thread, site, calls_after| fgtrace_trace::CountOnly {
            thread,
            site,
            calls_after,
            ..Default::default()
        };
        t.meta.count_only = vec![co(0, 6, 10), co(1, 6, 5), co(1, 20, 7)];
        let got = render(&t, &GraphOptions::default());
        assert!(
            got.contains("# 2 functions switched to count-only (auto-exclude): 22 later calls counted, not shown"),
            "{got}"
        );
        let opts = GraphOptions {
            threads: vec!["main".parse().unwrap()],
            ..Default::default()
        };
        let got = render(&t, &opts);
        assert!(
            got.contains("# 1 function switched to count-only (auto-exclude): 10 later calls"),
            "{got}"
        );
    }

    #[test]
    fn the_header_says_how_many_functions_the_plan_counted() {
        let mut t = golden_trace();
        assert!(!render(&t, &GraphOptions::default()).contains("plan"));
        t.meta.counted = vec![
            fgtrace_trace::PlannedCount { site: 3, calls: 40 },
            fgtrace_trace::PlannedCount { site: 4, calls: 2 },
        ];
        let got = render(&t, &GraphOptions::default());
        assert!(
            got.contains(
                "# 2 functions counted by the build's plan, not timed: 42 calls, not shown"
            ),
            "{got}"
        );
    }

    /// A poll over the long-poll threshold is tagged on its line (a leaf's
    /// or an open call's) and on its exit line, in the tree and in the
    /// threshold layout; a shorter poll, or a plain call as long, is not.
    #[test]
    fn long_polls_are_tagged_on_their_lines() {
        use crate::test_traces::{flagged_call, meta};
        let m = meta(&["fetch", "parse"], &[(4242, "main")]);
        const MS: u64 = 1_000_000;
        let evs = vec![
            flagged_call(0, 0, 0, 0, 15 * MS, flags::POLL),
            flagged_call(0, 0, 0, 20 * MS, 12 * MS, flags::POLL | flags::HAS_CHILDREN),
            flagged_call(0, 1, 1, 21 * MS, 11 * MS, 0),
            flagged_call(0, 0, 0, 40 * MS, MS, flags::POLL),
        ];
        let graph = |opts: &GraphOptions| {
            let mut out = Vec::new();
            write_graph(&m, crate::ok_events(evs.clone()), opts, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let got = graph(&GraphOptions::default());
        for want in [
            "|  fetch(); /* [long poll] 15 ms */\n",
            "|  fetch() { /* [long poll] 12 ms */\n",
            "|    parse();\n",
            "|  } /* fetch [long poll] */\n",
        ] {
            assert!(got.contains(want), "{want:?} in\n{got}");
        }
        assert_eq!(got.matches("[long poll]").count(), 3, "{got}");
        let thresh = GraphOptions {
            thresh_ns: 5 * MS,
            ..Default::default()
        };
        let got = graph(&thresh);
        assert_eq!(got.matches("} /* fetch [long poll] */").count(), 2, "{got}");
        assert!(got.contains("} /* parse */"), "{got}");
        let off = GraphOptions {
            long_poll_ns: None,
            ..Default::default()
        };
        assert!(!graph(&off).contains("long poll"));
    }
}
