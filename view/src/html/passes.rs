//! The HTML page's two passes over the events (see [`super`]): what each
//! collects, and the slowest root call and longest off-CPU stretches they
//! find for the page.

use crate::consume::Consume;
use crate::folded::{Folded, FoldedBuilder};
use crate::graph::{GraphOptions, GraphWriter, PollValuesBuilder};
use crate::offcpu::OffCpuFoldedBuilder;
use crate::plot::DurationsBuilder;
use crate::report::ReportBuilder;
use crate::resolve::Resolve;
use crate::threads::shown;
use fgtrace_trace::{Call, Event, OffInterval, TraceMeta};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::io;

/// Which stacks the flamegraph shows.
pub(super) enum Flame<'a, R: Resolve> {
    Traced(FoldedBuilder<'a>),
    Other(FoldedBuilder<'a, R>, &'static str),
}

impl<R: Resolve> Consume for Flame<'_, R> {
    type Error = Infallible;

    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        match self {
            Flame::Traced(b) => b.push(ev),
            Flame::Other(b, _) => b.push(ev),
        }
    }
}

impl<R: Resolve> Flame<'_, R> {
    pub(super) fn finish(self) -> (Folded, &'static str) {
        match self {
            Flame::Traced(b) => (b.finish(), "traced"),
            Flame::Other(b, what) => (b.finish(), what),
        }
    }
}

/// The outermost call that lasted longest.
#[derive(Clone, Copy)]
pub(super) struct Root {
    pub(super) thread: u32,
    pub(super) site: u32,
    pub(super) start_ns: u64,
    pub(super) dur_ns: u64,
}

/// The first pass over the events: the report, the flamegraph's and the
/// off-CPU stacks, the call each off-CPU stretch started in, the slowest
/// root call of a shown thread, and the values of `async fn`s to show on
/// their polls in that call's graph (when some `async fn` records values).
pub(super) struct FirstPass<'a, R: Resolve> {
    pub(super) mask: &'a [bool],
    pub(super) filtered: bool,
    pub(super) report: ReportBuilder<'a>,
    pub(super) flame: Flame<'a, R>,
    pub(super) off_stacks: Option<OffCpuFoldedBuilder<'a>>,
    pub(super) stretches: Vec<Stretch>,
    pub(super) root: Option<Root>,
    pub(super) poll_values: Option<PollValuesBuilder<'a>>,
}

impl<R: Resolve> Consume for FirstPass<'_, R> {
    type Error = Infallible;

    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        self.report.push(ev)?;
        self.flame.push(ev)?;
        if let Some(b) = self.off_stacks.as_mut() {
            b.push(ev)?;
        }
        if let Some(b) = self.poll_values.as_mut() {
            b.push(ev)?;
        }
        if let Event::Call(c) = ev {
            for s in self.stretches.iter_mut() {
                if s.thread == c.thread
                    && (c.start_ns..c.end_ns()).contains(&s.iv.start_ns)
                    && s.call.is_none_or(|(_, d)| c.depth >= d)
                {
                    s.call = Some((c.site, c.depth));
                }
            }
            if c.depth == 0
                && shown(self.mask, self.filtered, c.thread)
                && self.root.is_none_or(|r| c.dur_ns > r.dur_ns)
            {
                self.root = Some(Root {
                    thread: c.thread,
                    site: c.site,
                    start_ns: c.start_ns,
                    dur_ns: c.dur_ns,
                });
            }
        }
        Ok(())
    }
}

/// The second pass over the events: the plotted functions' calls and the
/// slowest root call's subtree.
pub(super) struct SecondPass<'a> {
    pub(super) plots: Vec<DurationsBuilder<'a>>,
    pub(super) graph: Subtree<'a>,
}

impl Consume for SecondPass<'_> {
    type Error = io::Error;

    fn push(&mut self, ev: &Event) -> io::Result<()> {
        for p in &mut self.plots {
            let Ok(()) = p.push(ev);
        }
        self.graph.push(ev)
    }

    /// Without plots, the pass ends with the subtree.
    fn done(&self) -> bool {
        self.plots.is_empty() && self.graph.done
    }
}

/// Feeds the slowest root call and its subtree to a [`GraphWriter`].
pub(super) struct Subtree<'a> {
    pub(super) root: Option<Root>,
    pub(super) w: GraphWriter<'a, Vec<u8>>,
    pub(super) inside: bool,
    pub(super) done: bool,
    pub(super) limit: usize,
    pub(super) shown: usize,
    pub(super) hidden: u64,
    /// The last call was drawn (so its counters go to the graph).
    pub(super) last_shown: bool,
}

impl<'a> Subtree<'a> {
    pub(super) fn new(
        meta: &'a TraceMeta,
        opts: &'a GraphOptions,
        root: Option<Root>,
        limit: usize,
    ) -> io::Result<Self> {
        Ok(Subtree {
            root,
            w: GraphWriter::new(meta, opts, Vec::new())?,
            inside: false,
            done: root.is_none(),
            limit,
            shown: 0,
            hidden: 0,
            last_shown: false,
        })
    }

    fn is_root(&self, c: &Call) -> bool {
        self.root.is_some_and(|r| {
            c.thread == r.thread && c.depth == 0 && c.start_ns == r.start_ns && c.site == r.site
        })
    }
}

impl Consume for Subtree<'_> {
    type Error = io::Error;

    fn push(&mut self, ev: &Event) -> io::Result<()> {
        let Some(r) = self.root else { return Ok(()) };
        if self.done || ev.thread() != r.thread {
            return Ok(());
        }
        match ev {
            Event::Call(c) if !self.inside && self.is_root(c) => {
                self.inside = true;
                self.shown += 1;
                self.last_shown = true;
                self.w.push(ev)?;
            }
            _ if !self.inside => {}
            Event::Call(c) if c.depth == 0 => self.done = true,
            Event::Call(_) if self.shown >= self.limit => {
                self.hidden += 1;
                self.last_shown = false;
            }
            Event::Call(_) => {
                self.shown += 1;
                self.last_shown = true;
                self.w.push(ev)?;
            }
            // A shown call's counters (allocations, instructions): tail comments.
            Event::Counters(_) | Event::Values(_) if self.last_shown => self.w.push(ev)?,
            Event::Lost(_) => self.w.push(ev)?,
            _ => {}
        }
        Ok(())
    }
}

impl Subtree<'_> {
    pub(super) fn finish(self) -> io::Result<String> {
        let mut text = String::from_utf8_lossy(&self.w.finish()?).into_owned();
        if self.hidden > 0 {
            let _ = writeln!(
                text,
                "# ... {} more calls of this subtree not shown (fgtrace graph shows them all)",
                self.hidden
            );
        }
        Ok(text)
    }
}

/// One of the longest off-CPU stretches, and the innermost traced call it
/// started in (site, depth).
pub(super) struct Stretch {
    pub(super) thread: u32,
    pub(super) iv: OffInterval,
    pub(super) call: Option<(u32, u32)>,
}

pub(super) fn longest_stretches(
    meta: &TraceMeta,
    mask: &[bool],
    filtered: bool,
    n: usize,
) -> Vec<Stretch> {
    let Some(o) = meta.off_cpu.as_ref() else {
        return Vec::new();
    };
    let mut all: Vec<Stretch> = o
        .threads
        .iter()
        .filter(|t| shown(mask, filtered, t.thread))
        .flat_map(|t| {
            t.intervals.iter().map(|iv| Stretch {
                thread: t.thread,
                iv: *iv,
                call: None,
            })
        })
        .collect();
    all.sort_by(|a, b| {
        b.iv.dur_ns
            .cmp(&a.iv.dur_ns)
            .then(a.iv.start_ns.cmp(&b.iv.start_ns))
    });
    all.truncate(n);
    all
}
