//! A flame chart of the traced calls ([`ChartBuilder`]): one line per
//! stretch of a call's self time, in time order per thread, so that with
//! inferno's `flame_chart` the x axis is time. Memory is one entry per line,
//! which inferno holds anyway: a [`Window`] bounds it, keeping the calls
//! that overlap it and last long enough, cut at its edges.

use crate::consume::{collect, Consume};
use crate::folded::{FoldedOptions, FoldedSummary, Origin, Tree, NONE};
use crate::threads::{shown, thread_mask};
use crate::window::Window;
use fgtrace_trace::{Call, Event, TraceError, TraceMeta};
use std::convert::Infallible;
use std::io::{self, Write};

/// One traced call as the chart drew it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChartCall {
    /// Index into `TraceMeta::sites`.
    pub site: u32,
    /// Entry time, nanoseconds since session start.
    pub start_ns: u64,
    /// Duration, nanoseconds.
    pub dur_ns: u64,
    /// The call ended by unwinding (a panic passed through it).
    pub unwound: bool,
}

#[derive(Clone, Copy)]
struct ChartOpen {
    node: u32,
    depth: u32,
    end: u64,
    /// Time up to which this call's self time has been drawn.
    cursor: u64,
    had_child: bool,
}

#[derive(Default)]
struct ChartThread {
    root: Option<u32>,
    cursor: u64,
    stack: Vec<ChartOpen>,
    lines: Vec<(u32, u64)>,
    /// Calls pushed whose frame starts at the next line: (position in the path, call).
    pending: Vec<(u32, ChartCall)>,
    /// (line index in `lines`, position in the path, call).
    starts: Vec<(u32, u32, ChartCall)>,
}

/// A flame chart of traced calls: per thread, in time order.
#[derive(Clone, Debug)]
pub struct Chart {
    pub(crate) tree: Tree,
    /// (stack node, ns), threads one after the other.
    pub(crate) lines: Vec<(u32, u64)>,
    /// Where each call's frame begins: (line index, position in its path, call).
    /// Read by the SVG renderer (feature `flame`) for the tooltips.
    #[cfg_attr(not(feature = "flame"), allow(dead_code))]
    pub(crate) starts: Vec<(u32, u32, ChartCall)>,
    summary: FoldedSummary,
}

impl Chart {
    /// Folded lines in time order (inferno's `flame_chart` keeps the order).
    /// Zero counts separate consecutive calls of the same function, which
    /// inferno would otherwise draw as one frame.
    pub fn lines(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        self.lines.iter().map(|&(n, c)| (self.tree.line(n), c))
    }

    /// Writes [`Chart::lines`] as folded text, `stack count` a line (the input of
    /// inferno's `--flamechart`).
    pub fn write_to(&self, mut w: impl Write) -> io::Result<()> {
        for (stack, count) in self.lines() {
            writeln!(w, "{stack} {count}")?;
        }
        w.flush()
    }

    /// Sum of all counts: per thread, session start to its last event (or the
    /// session's end), so the x axis is time.
    pub fn total(&self) -> u64 {
        self.lines.iter().map(|l| l.1).sum()
    }

    /// What went into the chart and what was left out.
    pub fn summary(&self) -> &FoldedSummary {
        &self.summary
    }
}

/// Builds a [`Chart`] from events pushed one at a time. Every stack starts with
/// its thread; the thread's frame fills the time between its root calls, so
/// within a thread x is nanoseconds since session start.
pub struct ChartBuilder<'a> {
    meta: &'a TraceMeta,
    opts: FoldedOptions,
    mask: Vec<bool>,
    tree: Tree,
    threads: Vec<ChartThread>,
    site_names: Vec<u32>,
    summary: FoldedSummary,
    window: Window,
}

impl<'a> ChartBuilder<'a> {
    /// A builder for `meta`'s trace with `opts` (threads, per-thread roots); the
    /// whole session unless [`ChartBuilder::window`] narrows it.
    pub fn new(meta: &'a TraceMeta, opts: &FoldedOptions) -> Self {
        ChartBuilder {
            meta,
            opts: opts.clone(),
            mask: thread_mask(meta, &opts.threads),
            tree: Tree::default(),
            threads: Vec::new(),
            site_names: Vec::new(),
            summary: FoldedSummary::default(),
            window: Window::default(),
        }
    }

    /// Only the calls `window` keeps ([`Window::keeps_span`]), drawn from
    /// its start to its end: a call that crosses an edge is cut there, a
    /// call left out is its caller's self time, and x is time since the
    /// window's start.
    pub fn window(mut self, window: Window) -> Self {
        self.window = window;
        self
    }

    /// As [`FoldedBuilder::extend`](crate::folded::FoldedBuilder::extend).
    pub fn extend(
        &mut self,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
    ) -> Result<(), TraceError> {
        collect(self, events)
    }

    fn thread(&mut self, t: u32) -> &mut ChartThread {
        let i = t as usize;
        if self.threads.len() <= i {
            self.threads.resize_with(i + 1, ChartThread::default);
        }
        if self.threads[i].root.is_none() {
            let name = self.tree.intern(&self.meta.thread_label(t));
            self.threads[i].root = Some(self.tree.child(NONE, name, Origin::Thread));
            self.threads[i].cursor = self.window.from();
        }
        &mut self.threads[i]
    }

    fn emit(th: &mut ChartThread, node: u32, ns: u64) {
        let line = th.lines.len() as u32;
        for (pos, call) in th.pending.drain(..) {
            th.starts.push((line, pos, call));
        }
        th.lines.push((node, ns));
    }

    fn pop_to(&mut self, t: u32, depth: u32) {
        let Some(th) = self.threads.get_mut(t as usize) else {
            return;
        };
        while th.stack.last().is_some_and(|o| o.depth >= depth) {
            let o = th.stack.pop().expect("checked above");
            Self::emit(th, o.node, o.end.saturating_sub(o.cursor));
            match th.stack.last_mut() {
                Some(p) => p.cursor = p.cursor.max(o.end),
                None => th.cursor = th.cursor.max(o.end),
            }
        }
    }

    fn site_name(&mut self, site: u32) -> u32 {
        let short = self.opts.short_names;
        self.tree
            .site_name(&mut self.site_names, &self.meta.sites, short, site)
    }

    fn call(&mut self, c: &Call) {
        self.pop_to(c.thread, c.depth);
        if !self.window.keeps_span(c.start_ns, c.dur_ns) {
            // Its callees are left out too: none lasts longer or reaches further.
            return;
        }
        // Cut at the window's edges.
        let start = c.start_ns.max(self.window.from());
        let end = c.end_ns().min(self.window.to()).max(start);
        let name = self.site_name(c.site);
        self.summary.calls += 1;
        let th = self.thread(c.thread);
        let root = th.root.expect("set by thread()");
        let parent = match th.stack.last_mut() {
            Some(p) => {
                let gap = start.saturating_sub(p.cursor);
                // A zero-length stretch still separates two children of the same name.
                let (node, had_child) = (p.node, p.had_child);
                p.cursor = p.cursor.max(start);
                p.had_child = true;
                if gap > 0 || had_child {
                    Self::emit(th, node, gap);
                }
                node
            }
            None => {
                let gap = start.saturating_sub(th.cursor);
                if gap > 0 || !th.lines.is_empty() {
                    Self::emit(th, root, gap);
                }
                th.cursor = th.cursor.max(start);
                root
            }
        };
        let pos = th.stack.len() as u32 + 1;
        let node = self.tree.child(parent, name, Origin::Traced);
        let n = &mut self.tree.nodes[node as usize];
        n.calls += 1;
        n.total_ns = n.total_ns.saturating_add(c.dur_ns);
        let th = &mut self.threads[c.thread as usize];
        th.pending.push((
            pos,
            ChartCall {
                site: c.site,
                start_ns: c.start_ns,
                dur_ns: c.dur_ns,
                unwound: c.unwound(),
            },
        ));
        th.stack.push(ChartOpen {
            node,
            depth: c.depth,
            end,
            cursor: start,
            had_child: false,
        });
    }

    /// Closes open calls, pads each thread to the session's end (or the
    /// window's), and joins the threads.
    pub fn finish(mut self) -> Chart {
        for t in 0..self.threads.len() {
            self.pop_to(t as u32, 0);
        }
        let end = self.meta.duration_ns.min(self.window.to());
        let mut lines = Vec::new();
        let mut starts = Vec::new();
        for th in &mut self.threads {
            let Some(root) = th.root else { continue };
            if th.lines.is_empty() {
                continue;
            }
            if end > th.cursor {
                Self::emit(th, root, end - th.cursor);
            }
            let base = lines.len() as u32;
            starts.extend(th.starts.drain(..).map(|(l, p, c)| (l + base, p, c)));
            lines.append(&mut th.lines);
        }
        Chart {
            tree: self.tree,
            lines,
            starts,
            summary: self.summary,
        }
    }
}

impl Consume for ChartBuilder<'_> {
    type Error = Infallible;

    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        if !shown(&self.mask, !self.opts.threads.is_empty(), ev.thread()) {
            return Ok(());
        }
        match ev {
            Event::Call(c) => self.call(c),
            Event::Lost(l) => {
                self.pop_to(l.thread, l.depth);
                self.summary.records_lost += l.count;
            }
            _ => {}
        }
        Ok(())
    }
}

/// A flame chart of traced calls as folded text in time order, into `out`.
pub fn traced_chart_folded<W: Write>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    opts: &FoldedOptions,
    out: W,
) -> Result<(), TraceError> {
    let mut b = ChartBuilder::new(meta, opts);
    let read = b.extend(events);
    b.finish().write_to(out)?;
    read
}
