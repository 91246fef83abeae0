//! Folded stacks (`root;child;leaf count`, Brendan Gregg's format) from a
//! trace, three ways:
//!
//! - **traced**: the recorded calls, each path weighted by its exact self time
//!   in nanoseconds (duration minus the recorded children's durations);
//! - **sampled**: every sample's stack, resolved through a [`Resolve`]r, root
//!   first, one count per sample;
//! - **combined**: each sample joined to the innermost traced call open on its
//!   thread, its frames *below* that call hung under the exact traced path.
//!   Traced frames keep their exact time; the samples below a traced frame
//!   share out that frame's self time (the time no traced child accounts for)
//!   in proportion to their counts, in integer nanoseconds with a
//!   largest-remainder split, so every traced frame's total in the combined
//!   output equals its total in the traced output exactly.
//!
//! Plus a **flame chart** of the traced calls
//! ([`ChartBuilder`](crate::chart::ChartBuilder)): one line per stretch of a
//! call's self time, in time order per thread, so that with inferno's
//! `flame_chart` the x axis is time.
//!
//! Memory is one node per distinct stack (plus, for the chart, one entry per
//! line, which inferno holds anyway): what a flamegraph needs, never the
//! trace. On a mid-stream read error everything read so far is rendered and
//! the error returned, as in the other views.
//!
//! The join of samples to calls is [`crate::join`]; names come from the
//! caller's [`Resolve`]r.

use crate::consume::{collect, Consume};
use crate::human::human_duration;
use crate::join::{Cut, RecordedCut, SampleStack};
use crate::resolve::{FrameInfo, HexResolve, Resolve};
use crate::threads::{shown, thread_mask, ThreadSel};
use fgtrace_trace::{Call, Event, Lost, Sample, SiteInfo, TraceError, TraceMeta};
use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{self, Write};

mod tree;
pub(crate) use tree::{Tree, NONE};

const UNKNOWN: &str = "[unknown]";

/// Where a frame of a stack came from; the flamegraph colours it by this.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The thread a stack ran on (`--per-thread`).
    Thread,
    /// A recorded call: exact time and call count.
    Traced,
    /// A frame of a sample.
    Sampled,
    /// A marker fgtrace inserted (`[unknown below <fn>]`, `[unknown]`).
    Marker,
}

/// Options shared by the traced, sampled and combined stacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoldedOptions {
    /// Start every stack with its thread (`name-tid`).
    pub per_thread: bool,
    /// Only these threads (empty: all).
    pub threads: Vec<ThreadSel>,
    /// Traced frames as `Type::method` rather than `crate::module::Type::method`.
    pub short_names: bool,
    /// Combined: when the sampler's `shadow_depth` disagrees with the calls
    /// open at the sample's time, believe the sampler (the default).
    pub trust_shadow_depth: bool,
    /// Combined: nanoseconds one sample outside any traced call stands for;
    /// `None` takes the period from `meta.sampling` (`...@999Hz`).
    pub sample_period_ns: Option<u64>,
}

impl Default for FoldedOptions {
    fn default() -> Self {
        FoldedOptions {
            per_thread: false,
            threads: Vec::new(),
            short_names: false,
            trust_shadow_depth: true,
            sample_period_ns: None,
        }
    }
}

/// What was counted, for subtitles and for checking the join.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoldedSummary {
    /// Traced calls read.
    pub calls: u64,
    /// Samples read.
    pub samples: u64,
    /// Samples lost while recording (metadata, selected threads).
    pub samples_lost: u64,
    /// Call records lost (metadata and `Lost` events, selected threads).
    pub records_lost: u64,
    /// `meta.sampling`.
    pub sampling: Option<String>,
    /// Combined: samples whose traced frame was not found in their stack
    /// (or fitted more than one way): placed under their innermost open call
    /// as `[unknown below <fn>];<leaf>`, without a join.
    pub unmatched: u64,
    /// Combined: samples taken while no traced call was open.
    pub untraced: u64,
    /// Combined: samples whose `shadow_depth` disagreed with the open calls
    /// (and were not `late_exits`).
    pub depth_mismatches: u64,
    /// Combined: samples whose time is past the end of a call the sampler
    /// still saw open, taken in that call's exit probe (the handler read the
    /// clock late): joined to that call.
    pub late_exits: u64,
    /// Combined: nanoseconds one untraced sample weighs.
    pub period_ns: u64,
    /// The period was not known from the trace and was assumed (1 ms).
    pub period_assumed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Traced,
    Sampled,
    Combined,
}

/// Numbers of one frame (all nodes with the same path of names, summed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameStats {
    /// Origin of the first node with this path (traced before sampled).
    pub origin: Option<Origin>,
    /// Traced calls at this path.
    pub calls: u64,
    /// Their exact inclusive time.
    pub total_ns: u64,
    /// Their exact self time (before samples took their share).
    pub self_ns: u64,
    /// Samples at or below this frame.
    pub samples: u64,
    /// The frame's width in the output's unit (ns or samples): its own count
    /// plus everything above it.
    pub width: u64,
    /// The count of the folded line that ends at this frame.
    pub weight: u64,
}

/// Built stacks, ready to print as folded lines or draw.
#[derive(Clone, Debug)]
pub struct Folded {
    pub(crate) tree: Tree,
    count_name: &'static str,
    summary: FoldedSummary,
    pub(crate) mode_name: &'static str,
}

impl Folded {
    /// `ns` (traced, combined) or `samples`.
    pub fn count_name(&self) -> &'static str {
        self.count_name
    }

    /// What went into the stacks and what was left out.
    pub fn summary(&self) -> &FoldedSummary {
        &self.summary
    }

    /// Sum of all counts.
    pub fn total(&self) -> u64 {
        self.tree.nodes.iter().map(|n| n.weight).sum()
    }

    /// Folded lines, sorted, identical stacks merged, zero counts left out.
    pub fn lines(&self) -> Vec<(String, u64)> {
        let mut lines: Vec<(String, u64)> = self
            .tree
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.weight > 0)
            .map(|(i, n)| (self.tree.line(i as u32), n.weight))
            .collect();
        lines.sort();
        lines.dedup_by(|b, a| {
            if a.0 == b.0 {
                a.1 += b.1;
                true
            } else {
                false
            }
        });
        lines
    }

    /// Writes `stack count` lines.
    pub fn write_to(&self, mut w: impl Write) -> io::Result<()> {
        for (stack, count) in self.lines() {
            writeln!(w, "{stack} {count}")?;
        }
        w.flush()
    }

    /// The numbers of the frame at `path` (names, root first), if any.
    pub fn stats(&self, path: &[&str]) -> Option<FrameStats> {
        let mut found: Option<FrameStats> = None;
        for (i, n) in self.tree.nodes.iter().enumerate() {
            if n.name as usize >= self.tree.names.len() {
                continue;
            }
            let p = self.tree.path(i as u32);
            if p.len() != path.len()
                || p.iter()
                    .zip(path)
                    .any(|(&id, name)| self.tree.name(id) != *name)
            {
                continue;
            }
            let s = found.get_or_insert_with(FrameStats::default);
            if s.origin.is_none() || n.origin == Origin::Traced {
                s.origin = Some(n.origin);
            }
            s.calls += n.calls;
            s.total_ns += n.total_ns;
            s.self_ns += n.self_ns;
            s.samples += n.samples;
            s.width += n.width;
            s.weight += n.weight;
        }
        found
    }

    /// One line saying what the counts are and what was lost or not joined.
    pub fn subtitle(&self) -> String {
        let s = &self.summary;
        let mut parts = Vec::new();
        let how = |extra: String| match &s.sampling {
            Some(x) => format!("{x}, {extra}"),
            None => extra,
        };
        match self.mode_name {
            "traced" => parts.push(format!("{} traced calls, exact self time in ns", s.calls)),
            "sampled" => parts.push(format!(
                "{} samples ({})",
                s.samples,
                how(format!("{} lost", s.samples_lost))
            )),
            _ => {
                parts.push(format!(
                    "{} traced calls (exact ns), {} samples ({}) sharing their self time",
                    s.calls,
                    s.samples,
                    how(format!("{} lost", s.samples_lost))
                ));
                if s.unmatched > 0 {
                    parts.push(format!(
                        "{} sample{} placed under {} innermost call without a join",
                        s.unmatched,
                        if s.unmatched == 1 { "" } else { "s" },
                        if s.unmatched == 1 { "its" } else { "their" }
                    ));
                }
                if s.depth_mismatches > 0 {
                    parts.push(format!("{} shadow-depth mismatches", s.depth_mismatches));
                }
                if s.untraced > 0 {
                    parts.push(format!(
                        "{} outside traced calls at {}{} each",
                        s.untraced,
                        human_duration(s.period_ns),
                        if s.period_assumed { " (assumed)" } else { "" }
                    ));
                }
            }
        }
        if s.records_lost > 0 {
            parts.push(format!("LOST {} records", s.records_lost));
        }
        parts.join(", ")
    }
}

#[derive(Clone, Copy, Debug)]
struct Open {
    node: u32,
    site: u32,
    depth: u32,
    end: u64,
    dur: u64,
    children: u64,
}

#[derive(Default)]
struct ThreadState {
    root: Option<u32>,
    stack: Vec<Open>,
    /// Calls closed since the last call was opened, innermost first: a
    /// chain that was open together, for a sample whose handler saw them
    /// still open (see `late_exits`).
    recent: Vec<Open>,
}

/// Builds [`Folded`] stacks from events pushed one at a time.
pub struct FoldedBuilder<'a, R = HexResolve, C = RecordedCut> {
    meta: &'a TraceMeta,
    opts: FoldedOptions,
    mode: Mode,
    resolver: R,
    cut: C,
    mask: Vec<bool>,
    tree: Tree,
    threads: Vec<ThreadState>,
    site_names: Vec<u32>,
    cache: HashMap<(u64, bool), Vec<u32>>,
    info_cache: HashMap<(u64, bool), FrameInfo>,
    summary: FoldedSummary,
    lost_events: Vec<u64>,
}

impl<'a> FoldedBuilder<'a> {
    /// Traced calls, weighted by exact self time (ns).
    pub fn traced(meta: &'a TraceMeta, opts: &FoldedOptions) -> Self {
        Self::new(meta, opts, Mode::Traced, HexResolve)
    }

    /// The traced stacks of `events`, built on up to
    /// [`threads`](fgtrace_trace::parallel::threads) cores: one builder per
    /// group of the trace's threads (a builder's state is per thread), merged
    /// at the end. The lines and numbers are those of one builder on one
    /// core. Everything read before a read error is kept, and the error
    /// comes back beside it.
    pub fn traced_on_cores(
        meta: &'a TraceMeta,
        opts: &FoldedOptions,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
    ) -> (Folded, Result<(), TraceError>) {
        let groups = fgtrace_trace::parallel::threads().min(meta.threads.len());
        Self::traced_in_groups(meta, opts, events, groups)
    }

    /// [`FoldedBuilder::traced_on_cores`] from a trace file's reader, on every core
    /// ([`collect_reader`](crate::consume::collect_reader)): a recorded
    /// file's threads are read apart, each group's on a core of its own.
    pub fn traced_from_reader<R: std::io::Read>(
        meta: &'a TraceMeta,
        opts: &FoldedOptions,
        reader: fgtrace_trace::TraceReader<R>,
    ) -> (Folded, Result<(), TraceError>) {
        let (sinks, read) = crate::consume::collect_reader(reader, || Self::traced(meta, opts));
        (Self::merged(sinks, meta, opts), read)
    }

    /// One builder's stacks from several, the first's first.
    fn merged(sinks: Vec<Self>, meta: &'a TraceMeta, opts: &FoldedOptions) -> Folded {
        let mut sinks = sinks.into_iter();
        let mut all = sinks.next().unwrap_or_else(|| Self::traced(meta, opts));
        for s in sinks {
            all.absorb(s);
        }
        all.finish()
    }

    /// [`FoldedBuilder::traced_on_cores`] with `groups` builders.
    fn traced_in_groups(
        meta: &'a TraceMeta,
        opts: &FoldedOptions,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
        groups: usize,
    ) -> (Folded, Result<(), TraceError>) {
        let sinks = (0..groups.max(1))
            .map(|_| Self::traced(meta, opts))
            .collect();
        let (sinks, read) = crate::consume::collect_by_thread(sinks, events);
        (Self::merged(sinks, meta, opts), read)
    }
}

impl<'a, R: Resolve> FoldedBuilder<'a, R> {
    /// Samples, one count each.
    pub fn sampled(meta: &'a TraceMeta, opts: &FoldedOptions, resolver: R) -> Self {
        Self::new(meta, opts, Mode::Sampled, resolver)
    }

    /// Traced calls with the samples below them (ns; see the module doc).
    pub fn combined(meta: &'a TraceMeta, opts: &FoldedOptions, resolver: R) -> Self {
        Self::new(meta, opts, Mode::Combined, resolver)
    }

    fn new(meta: &'a TraceMeta, opts: &FoldedOptions, mode: Mode, resolver: R) -> Self {
        let (period_ns, period_assumed) = match opts.sample_period_ns {
            Some(p) => (p.max(1), false),
            None => match meta.sampling.as_deref().and_then(sampling_hz) {
                Some(hz) => (((1e9 / hz).round() as u64).max(1), false),
                None => (1_000_000, true),
            },
        };
        FoldedBuilder {
            meta,
            opts: opts.clone(),
            mode,
            resolver,
            cut: RecordedCut,
            mask: thread_mask(meta, &opts.threads),
            tree: Tree::default(),
            threads: Vec::new(),
            site_names: Vec::new(),
            cache: HashMap::new(),
            info_cache: HashMap::new(),
            summary: FoldedSummary {
                sampling: meta.sampling.clone(),
                period_ns,
                period_assumed,
                ..Default::default()
            },
            lost_events: Vec::new(),
        }
    }
}

impl<'a, 'r, S: Resolve + Send> FoldedBuilder<'a, crate::resolve::Shared<'r, S>> {
    /// The sampled stacks of a trace file's reader on every core, as
    /// [`FoldedBuilder::traced_from_reader`] reads the traced ones: one
    /// builder per group of threads, `resolver` shared by all of them
    /// ([`Shared`](crate::resolve::Shared)). The lines and numbers are those
    /// of one builder on one core.
    pub fn sampled_from_reader<Rd: std::io::Read>(
        meta: &'a TraceMeta,
        opts: &FoldedOptions,
        reader: fgtrace_trace::TraceReader<Rd>,
        resolver: &'r std::sync::Mutex<S>,
    ) -> (Folded, Result<(), TraceError>) {
        Self::mode_from_reader(meta, opts, Mode::Sampled, reader, resolver)
    }

    /// The combined stacks (traced calls with the samples below them) of a
    /// trace file's reader on every core, `resolver` shared as for
    /// [`FoldedBuilder::sampled_from_reader`]: samples are joined to the
    /// calls of their own thread, so each group joins its threads' alone.
    pub fn combined_from_reader<Rd: std::io::Read>(
        meta: &'a TraceMeta,
        opts: &FoldedOptions,
        reader: fgtrace_trace::TraceReader<Rd>,
        resolver: &'r std::sync::Mutex<S>,
    ) -> (Folded, Result<(), TraceError>) {
        Self::mode_from_reader(meta, opts, Mode::Combined, reader, resolver)
    }

    fn mode_from_reader<Rd: std::io::Read>(
        meta: &'a TraceMeta,
        opts: &FoldedOptions,
        mode: Mode,
        reader: fgtrace_trace::TraceReader<Rd>,
        resolver: &'r std::sync::Mutex<S>,
    ) -> (Folded, Result<(), TraceError>) {
        let make = || Self::new(meta, opts, mode, crate::resolve::Shared(resolver));
        let (sinks, read) = crate::consume::collect_reader(reader, make);
        let mut sinks = sinks.into_iter();
        let mut all = sinks.next().unwrap_or_else(make);
        for s in sinks {
            all.absorb(s);
        }
        (all.finish(), read)
    }
}

/// `cpu-clock@999Hz` -> 999, `10kHz` -> 10000.
fn sampling_hz(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    let end = lower.find("hz")?;
    let head = lower[..end].trim_end();
    let (head, scale) = match head.strip_suffix('k') {
        Some(h) => (h, 1e3),
        None => match head.strip_suffix('m') {
            Some(h) => (h, 1e6),
            None => (head, 1.0),
        },
    };
    let start = head
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(0, |i| i + 1);
    let hz: f64 = head[start..].parse().ok()?;
    (hz > 0.0).then_some(hz * scale)
}

impl<'a, R: Resolve, C: Cut> FoldedBuilder<'a, R, C> {
    /// Replaces the step that finds the traced frame in a sample (combined).
    pub fn with_cut<C2: Cut>(self, cut: C2) -> FoldedBuilder<'a, R, C2> {
        FoldedBuilder {
            meta: self.meta,
            opts: self.opts,
            mode: self.mode,
            resolver: self.resolver,
            cut,
            mask: self.mask,
            tree: self.tree,
            threads: self.threads,
            site_names: self.site_names,
            cache: self.cache,
            info_cache: self.info_cache,
            summary: self.summary,
            lost_events: self.lost_events,
        }
    }

    /// Pushes events until the stream ends or fails; the state read so far is
    /// kept either way, so `finish` renders what came before the damage.
    pub fn extend(
        &mut self,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
    ) -> Result<(), TraceError> {
        collect(self, events)
    }

    fn thread(&mut self, t: u32) -> &mut ThreadState {
        let t = t as usize;
        if self.threads.len() <= t {
            self.threads.resize_with(t + 1, ThreadState::default);
        }
        &mut self.threads[t]
    }

    /// The node stacks of thread `t` hang from: its thread frame, or the top.
    fn root(&mut self, t: u32) -> u32 {
        if !self.opts.per_thread {
            return NONE;
        }
        if let Some(r) = self.thread(t).root {
            return r;
        }
        let label = self.meta.thread_label(t);
        let name = self.tree.intern(&label);
        let r = self.tree.child(NONE, name, Origin::Thread);
        self.thread(t).root = Some(r);
        r
    }

    fn site_name(&mut self, site: u32) -> u32 {
        let short = self.opts.short_names;
        self.tree
            .site_name(&mut self.site_names, &self.meta.sites, short, site)
    }

    fn call(&mut self, c: &Call) {
        self.pop_to(c.thread, c.depth);
        let root = self.root(c.thread);
        let name = self.site_name(c.site);
        let parent = match self.thread(c.thread).stack.last_mut() {
            // The nearest open call is the parent (past a loss, an ancestor,
            // whose time includes this call all the same).
            Some(p) => {
                p.children = p.children.saturating_add(c.dur_ns);
                p.node
            }
            None => root,
        };
        let node = self.tree.child(parent, name, Origin::Traced);
        let n = &mut self.tree.nodes[node as usize];
        n.calls += 1;
        n.total_ns = n.total_ns.saturating_add(c.dur_ns);
        self.thread(c.thread).recent.clear();
        self.thread(c.thread).stack.push(Open {
            node,
            site: c.site,
            depth: c.depth,
            end: c.end_ns(),
            dur: c.dur_ns,
            children: 0,
        });
        self.summary.calls += 1;
    }

    fn lost(&mut self, l: &Lost) {
        if self.mode != Mode::Sampled {
            self.pop_to(l.thread, l.depth);
            // Calls are missing around the loss: no chain to reopen.
            if let Some(ts) = self.threads.get_mut(l.thread as usize) {
                ts.recent.clear();
            }
        }
        let t = l.thread as usize;
        if self.lost_events.len() <= t {
            self.lost_events.resize(t + 1, 0);
        }
        self.lost_events[t] += l.count;
    }

    fn close(tree: &mut Tree, o: Open) {
        let n = &mut tree.nodes[o.node as usize];
        n.self_ns = n.self_ns.saturating_add(o.dur.saturating_sub(o.children));
    }

    fn pop_to(&mut self, t: u32, depth: u32) {
        let Some(ts) = self.threads.get_mut(t as usize) else {
            return;
        };
        while ts.stack.last().is_some_and(|o| o.depth >= depth) {
            let o = ts.stack.pop().expect("checked above");
            ts.recent.push(o);
            Self::close(&mut self.tree, o);
        }
    }

    /// Resolved name ids of a sample (innermost first) and the raw frame each came from.
    fn resolve(&mut self, s: &Sample) -> (Vec<u32>, Vec<u32>) {
        let mut names = Vec::new();
        let mut frame_of = Vec::new();
        for (i, &addr) in s.frames.iter().enumerate() {
            let key = (addr, i > 0);
            if !self.cache.contains_key(&key) {
                let resolved = self.resolver.frames(addr, i > 0);
                let ids: Vec<u32> = if resolved.is_empty() {
                    vec![self.tree.intern(&format!("{addr:#x}"))]
                } else {
                    resolved.iter().map(|n| self.tree.intern(n)).collect()
                };
                self.cache.insert(key, ids);
            }
            let ids = &self.cache[&key];
            names.extend_from_slice(ids);
            frame_of.extend(std::iter::repeat_n(i as u32, ids.len()));
        }
        (names, frame_of)
    }

    /// Hangs `names` (root first) under `from`; the last node gets the sample.
    fn attach(&mut self, from: u32, names: impl IntoIterator<Item = (u32, Origin)>, anchor: u32) {
        let mut node = from;
        for (name, origin) in names {
            node = self.tree.child(node, name, origin);
            self.tree.nodes[node as usize].anchor = anchor;
        }
        if node == NONE {
            let name = self.tree.intern(UNKNOWN);
            node = self.tree.child(NONE, name, Origin::Marker);
        }
        self.tree.nodes[node as usize].own_samples += 1;
    }

    fn sample(&mut self, s: &Sample) {
        self.summary.samples += 1;
        let (names, frame_of) = self.resolve(s);
        let root = self.root(s.thread);
        if self.mode == Mode::Sampled {
            let path: Vec<(u32, Origin)> =
                names.iter().rev().map(|&n| (n, Origin::Sampled)).collect();
            let path = if path.is_empty() {
                vec![(self.tree.intern(UNKNOWN), Origin::Marker)]
            } else {
                path
            };
            self.attach(root, path, NONE);
            return;
        }
        let info: Vec<FrameInfo> = s
            .frames
            .iter()
            .enumerate()
            .map(|(k, &addr)| {
                *self
                    .info_cache
                    .entry((addr, k > 0))
                    .or_insert_with(|| self.resolver.frame_info(addr, k > 0))
            })
            .collect();
        // Close the calls that ended by the sample's time.
        let tree = &mut self.tree;
        let st = {
            let t = s.thread as usize;
            if self.threads.len() <= t {
                self.threads.resize_with(t + 1, ThreadState::default);
            }
            &mut self.threads[t]
        };
        while st.stack.last().is_some_and(|o| o.end <= s.ts_ns) {
            let o = st.stack.pop().expect("checked above");
            st.recent.push(o);
            Self::close(tree, o);
        }
        let live = st.stack.last().map_or(0, |o| o.depth + 1);
        // The handler saw more calls open than the sample's time says, and
        // the sample ran in a probe leaving a call: its time is late (the
        // handler reads the clock after the signal arrived), and the calls
        // closed last, at the depths the handler still saw, are the ones it
        // interrupted. They are reopened for this sample.
        let mut reopened = 0;
        if self.opts.trust_shadow_depth && s.shadow_depth > live {
            let below = s.cut.map_or(1, |c| c.max(1));
            // Names of the probe's frames as line tables give them (no path)
            // get the probe's path: the symbolizer told them by source file.
            let leaf: Vec<String> = names
                .iter()
                .zip(&frame_of)
                .filter(|&(_, &f)| f < below)
                .map(|(&n, &f)| {
                    let n = tree.names[n as usize].as_str();
                    let probe = info.get(f as usize).is_some_and(|i| i.in_probe);
                    if probe && !n.contains("::") {
                        format!("fgtrace_core::probe::{n}")
                    } else {
                        n.to_string()
                    }
                })
                .collect();
            let leaf: Vec<&str> = leaf.iter().map(String::as_str).collect();
            let chain: Vec<Open> = st
                .recent
                .iter()
                .rev()
                .filter(|o| o.depth >= live && o.depth < s.shadow_depth)
                .copied()
                .collect();
            let whole = chain.len() == (s.shadow_depth - live) as usize
                && chain
                    .iter()
                    .enumerate()
                    .all(|(k, o)| o.depth == live + k as u32);
            if whole && crate::join::leaving_probe(&leaf) {
                reopened = chain.len();
                st.stack.extend(chain);
                self.summary.late_exits += 1;
            }
        }
        let mut chosen = st.stack.len().checked_sub(1);
        if s.shadow_depth != live && reopened == 0 {
            self.summary.depth_mismatches += 1;
            if self.opts.trust_shadow_depth && s.shadow_depth < live {
                chosen = st.stack.iter().rposition(|o| o.depth < s.shadow_depth);
            }
        }
        let Some(i) = chosen else {
            self.summary.untraced += 1;
            let path: Vec<(u32, Origin)> =
                names.iter().rev().map(|&n| (n, Origin::Sampled)).collect();
            let path = if path.is_empty() {
                vec![(self.tree.intern(UNKNOWN), Origin::Marker)]
            } else {
                path
            };
            self.attach(root, path, NONE);
            return;
        };
        let open = st.stack[i];
        let st = &self.threads[s.thread as usize];
        let cut = match self.meta.sites.get(open.site as usize) {
            Some(site) => {
                let strs: Vec<&str> = names
                    .iter()
                    .map(|&n| self.tree.names[n as usize].as_str())
                    .collect();
                let open: Vec<&SiteInfo> = st.stack[..=i]
                    .iter()
                    .filter_map(|o| self.meta.sites.get(o.site as usize))
                    .collect();
                let stack = SampleStack {
                    sample: s,
                    names: &strs,
                    frame_of: &frame_of,
                    open: &open,
                    info: &info,
                    sites: &self.meta.sites,
                };
                self.cut.cut(site, &stack).filter(|&j| j <= names.len())
            }
            None => None,
        };
        match cut {
            Some(j) => {
                let below = names[..j].iter().rev().map(|&n| (n, Origin::Sampled));
                self.attach(open.node, below.collect::<Vec<_>>(), open.node);
            }
            None => {
                // The call's frame is not in the stack (or fits more than one
                // way), so which frames ran below it is unknown. The sample
                // still ran inside every open call: it goes under the
                // innermost one as `[unknown below <fn>]` with only its leaf
                // function, rather than a second copy of its stack from the
                // root that would misstate the frames between them.
                self.summary.unmatched += 1;
                let marker = format!("[unknown below {}]", self.tree.name(open.node));
                let marker = self.tree.intern(&marker);
                let path: Vec<(u32, Origin)> = std::iter::once((marker, Origin::Marker))
                    .chain(names.first().map(|&n| (n, Origin::Sampled)))
                    .collect();
                self.attach(open.node, path, open.node);
            }
        }
        if reopened > 0 {
            let st = &mut self.threads[s.thread as usize];
            st.stack.truncate(st.stack.len() - reopened);
        }
    }

    /// Adds what `other` built (from other threads' events) to this
    /// builder: its calls are closed, and its stacks join the same stacks
    /// here. The lines and numbers [`finish`](Self::finish) gives are then
    /// those of one builder fed both streams.
    fn absorb(&mut self, mut other: Self) {
        for t in 0..other.threads.len() {
            other.pop_to(t as u32, 0);
        }
        let names: Vec<u32> = other
            .tree
            .names
            .iter()
            .map(|n| self.tree.intern(n))
            .collect();
        // Parents come before their children, so each parent is mapped
        // by the time a child needs it.
        let mut map: Vec<u32> = Vec::with_capacity(other.tree.nodes.len());
        for n in &other.tree.nodes {
            let parent = if n.parent == NONE {
                NONE
            } else {
                map[n.parent as usize]
            };
            let id = self.tree.child(parent, names[n.name as usize], n.origin);
            let m = &mut self.tree.nodes[id as usize];
            m.calls += n.calls;
            m.total_ns = m.total_ns.saturating_add(n.total_ns);
            m.self_ns = m.self_ns.saturating_add(n.self_ns);
            m.own_samples += n.own_samples;
            if n.anchor != NONE {
                m.anchor = map[n.anchor as usize];
            }
            map.push(id);
        }
        let (s, o) = (&mut self.summary, &other.summary);
        s.calls += o.calls;
        s.samples += o.samples;
        s.unmatched += o.unmatched;
        s.untraced += o.untraced;
        s.depth_mismatches += o.depth_mismatches;
        s.late_exits += o.late_exits;
        if self.lost_events.len() < other.lost_events.len() {
            self.lost_events.resize(other.lost_events.len(), 0);
        }
        for (a, b) in self.lost_events.iter_mut().zip(&other.lost_events) {
            *a = a.saturating_add(*b);
        }
    }

    /// Closes the open calls, shares self time out to samples, sums subtrees.
    /// Reads `events`, then writes the folded text to `out`: everything read
    /// before a stream error is written, then the error is returned.
    pub fn write(
        mut self,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
        out: impl Write,
    ) -> Result<(), TraceError> {
        let read = self.extend(events);
        self.finish().write_to(out)?;
        read
    }

    /// Closes the calls still open, shares their self time out to the samples
    /// inside them and sums the subtrees: the folded stacks.
    pub fn finish(mut self) -> Folded {
        for t in 0..self.threads.len() {
            self.pop_to(t as u32, 0);
        }
        let tree = &mut self.tree;
        match self.mode {
            Mode::Traced => {
                for n in &mut tree.nodes {
                    n.weight = n.self_ns;
                }
            }
            Mode::Sampled => {
                for n in &mut tree.nodes {
                    n.weight = n.own_samples;
                }
            }
            Mode::Combined => share_self_time(tree, self.summary.period_ns),
        }
        tree.sum_up();
        for (i, t) in self.meta.threads.iter().enumerate() {
            if shown(&self.mask, !self.opts.threads.is_empty(), i as u32) {
                // Counts from the file's metadata: saturate.
                self.summary.samples_lost =
                    self.summary.samples_lost.saturating_add(t.samples_lost);
                self.summary.records_lost = self
                    .summary
                    .records_lost
                    .saturating_add(t.lost.max(self.lost_events.get(i).copied().unwrap_or(0)));
            }
        }
        let (count_name, mode_name) = match self.mode {
            Mode::Traced => ("ns", "traced"),
            Mode::Sampled => ("samples", "sampled"),
            Mode::Combined => ("ns", "combined"),
        };
        Folded {
            tree: self.tree,
            count_name,
            summary: self.summary,
            mode_name,
        }
    }
}

impl<R: Resolve, C: Cut> Consume for FoldedBuilder<'_, R, C> {
    type Error = Infallible;

    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        if !shown(&self.mask, !self.opts.threads.is_empty(), ev.thread()) {
            return Ok(());
        }
        match ev {
            Event::Call(c) if self.mode != Mode::Sampled => self.call(c),
            Event::Lost(l) => self.lost(l),
            Event::Sample(s) => self.sample(s),
            _ => {}
        }
        Ok(())
    }
}

/// Combined weights: each traced node's self time split among its own samples
/// (which stay with it) and the sampled stacks anchored to it; samples outside
/// traced calls weigh one period each.
fn share_self_time(tree: &mut Tree, period_ns: u64) {
    let mut groups: HashMap<u32, Vec<u32>> = HashMap::new();
    for (i, n) in tree.nodes.iter().enumerate() {
        if n.origin != Origin::Traced && n.own_samples > 0 {
            if n.anchor == NONE {
                continue;
            }
            groups.entry(n.anchor).or_default().push(i as u32);
        }
    }
    for i in 0..tree.nodes.len() {
        let n = &tree.nodes[i];
        match n.origin {
            Origin::Traced => {
                let members = groups.remove(&(i as u32)).unwrap_or_default();
                let mut counts = vec![n.own_samples];
                counts.extend(members.iter().map(|&m| tree.nodes[m as usize].own_samples));
                let shares = largest_remainder(n.self_ns, &counts);
                tree.nodes[i].weight = shares[0];
                for (m, share) in members.iter().zip(&shares[1..]) {
                    tree.nodes[*m as usize].weight = *share;
                }
            }
            _ if n.anchor == NONE => {
                tree.nodes[i].weight = n.own_samples.saturating_mul(period_ns);
            }
            _ => {}
        }
    }
}

/// Splits `total` in proportion to `counts` in integers that sum to `total`
/// exactly: floors first, then one more to the largest remainders (earlier
/// entries first on ties). All zero counts: everything to the first entry.
pub fn largest_remainder(total: u64, counts: &[u64]) -> Vec<u64> {
    let sum: u128 = counts.iter().map(|&c| c as u128).sum();
    let mut out = vec![0u64; counts.len()];
    if counts.is_empty() {
        return out;
    }
    if sum == 0 {
        out[0] = total;
        return out;
    }
    let mut rems: Vec<(u128, usize)> = Vec::with_capacity(counts.len());
    let mut given: u64 = 0;
    for (i, &c) in counts.iter().enumerate() {
        let p = total as u128 * c as u128;
        out[i] = (p / sum) as u64;
        given += out[i];
        rems.push((p % sum, i));
    }
    rems.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in rems.iter().take((total - given) as usize) {
        out[i] += 1;
    }
    out
}

/// Traced stacks as folded text (ns of self time), into `out`: one line per
/// distinct stack, `frame;frame;frame count`, the input of flamegraph tools
/// (inferno, `flamegraph.pl`, speedscope).
///
/// ```
/// use fgtrace::view::folded::{traced_folded, FoldedOptions};
/// use fgtrace::view::ok_events;
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
/// traced_folded(&trace.meta, ok_events(trace.events()), &FoldedOptions::default(), &mut out)?;
/// let text = String::from_utf8(out)?;
/// // Frames are full paths (`my_crate::module::outer`); here, their last part.
/// let mut stacks: Vec<String> = text
///     .lines()
///     .filter_map(|l| l.rsplit_once(' '))
///     .map(|(stack, _)| stack.split(';').map(|f| f.rsplit("::").next().unwrap()).collect::<Vec<_>>().join(";"))
///     .collect();
/// stacks.sort();
/// assert_eq!(stacks, ["outer", "outer;inner"], "{text}");
/// // The counts add up to the outermost call's duration, in nanoseconds.
/// let total: u64 = text.lines().filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok()).sum();
/// assert_eq!(total, trace.calls().find(|c| c.depth == 0).unwrap().dur_ns);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn traced_folded<W: Write>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    opts: &FoldedOptions,
    out: W,
) -> Result<(), TraceError> {
    FoldedBuilder::traced(meta, opts).write(events, out)
}

/// Sampled stacks as folded text (one count per sample), into `out`.
pub fn sampled_folded<W: Write, R: Resolve>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    resolver: R,
    opts: &FoldedOptions,
    out: W,
) -> Result<(), TraceError> {
    FoldedBuilder::sampled(meta, opts, resolver).write(events, out)
}

/// Combined stacks as folded text (ns; see the module doc), into `out`.
pub fn combined_folded<W: Write, R: Resolve>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    resolver: R,
    opts: &FoldedOptions,
    out: W,
) -> Result<(), TraceError> {
    FoldedBuilder::combined(meta, opts, resolver).write(events, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_remainder_sums_exactly() {
        assert_eq!(largest_remainder(10, &[1, 1, 1]), [4, 3, 3]);
        assert_eq!(largest_remainder(100, &[3, 1]), [75, 25]);
        assert_eq!(largest_remainder(7, &[0, 0]), [7, 0]);
        assert_eq!(largest_remainder(0, &[5, 2]), [0, 0]);
        let counts = [7, 13, 1, 29, 3];
        for total in [0u64, 1, 52, 999_999_999_937, u64::MAX / 2] {
            let s = largest_remainder(total, &counts);
            assert_eq!(s.iter().sum::<u64>(), total);
        }
    }

    /// The signal handler reads the clock after the signal arrived, which
    /// can be tens of microseconds after the interrupted instruction (a busy
    /// host, a virtual machine): a sample taken in a call's exit probe, just
    /// after the probe read the call's end time, then carries a time past
    /// that end, while the handler saw the call still on the shadow stack.
    /// The sample belongs to that call: the probe's frames go below it.
    #[test]
    fn a_late_sample_in_a_calls_exit_probe_is_joined_to_that_call() {
        use crate::test_traces::{call, meta};
        use fgtrace_trace::{Sample, TraceBuilder};
        const EXIT: u64 = 0x10;
        const ENTER: u64 = 0x20;
        const HELPER: u64 = 0x30;
        const CHILD: u64 = 0x40;
        const RUN: u64 = 0x50;
        // The exit probe as line tables name it: inlined frames without
        // their path, told to be the probe's by their source file.
        const EXIT_LINES: u64 = 0x60;
        struct Names;
        impl crate::resolve::Resolve for Names {
            fn frames(&mut self, a: u64, _: bool) -> Vec<String> {
                if a == EXIT_LINES {
                    return vec!["ticks".into(), "exit".into()];
                }
                names(a)
            }
            fn frame_info(&mut self, a: u64, _: bool) -> FrameInfo {
                FrameInfo {
                    frame_record: None,
                    in_probe: a == EXIT_LINES,
                }
            }
        }
        fn names(a: u64) -> Vec<String> {
            let n = match a {
                EXIT => "fgtrace_core::probe::exit",
                ENTER => "fgtrace_core::probe::enter_out",
                HELPER => "app::helper",
                CHILD => "app::child",
                RUN => "app::run",
                _ => return vec![],
            };
            vec![n.to_string()]
        }
        let sample = |ts_ns, frames: &[u64]| {
            Event::Sample(Sample {
                thread: 0,
                ts_ns,
                shadow_depth: 2,
                cut: Some(1),
                frames: frames.to_vec(),
            })
        };
        // run [0, 1000) { child [100, 200) }; samples 40 ns after child's end
        // that still saw child open.
        let mut b = TraceBuilder::new(meta(&["run", "child"], &[(1, "main")]));
        b.push(call(0, 0, 0, 0, 1_000));
        b.push(call(0, 1, 1, 100, 100));
        b.push(sample(240, &[EXIT, CHILD, RUN]));
        b.push(sample(250, &[ENTER, RUN]));
        b.push(sample(260, &[HELPER, RUN]));
        b.push(call(0, 1, 1, 300, 100));
        b.push(sample(450, &[EXIT_LINES, CHILD, RUN]));
        let t = b.finish();
        let opts = FoldedOptions::default();
        let mut fb = FoldedBuilder::combined(t.meta(), &opts, Names);
        fb.extend(crate::ok_events(t.events())).unwrap();
        let f = fb.finish();
        let under_child = f
            .stats(&["app::run", "app::child", "fgtrace_core::probe::exit"])
            .map(|s| s.samples);
        assert_eq!(under_child, Some(1), "{:?}", f.lines());
        // In an entry probe or out of the probe, the sample's time is not
        // known to be late: those stay with the calls open at their time.
        let under_run = |leaf| f.stats(&["app::run", leaf]).map(|s| s.samples);
        assert_eq!(under_run("fgtrace_core::probe::enter_out"), Some(1));
        assert_eq!(under_run("app::helper"), Some(1));
        let s = f.summary();
        let lines_exit = f.stats(&["app::run", "app::child", "exit", "ticks"]);
        assert_eq!(lines_exit.map(|s| s.samples), Some(1), "{:?}", f.lines());
        assert_eq!((s.samples, s.late_exits, s.depth_mismatches), (4, 2, 2));
    }

    /// Folding each group of threads on a core of its own and merging gives
    /// the lines and the summary of one builder fed everything, per thread
    /// or not, with a read error kept after what came before it.
    #[test]
    fn stacks_folded_by_thread_group_are_those_folded_at_once() {
        use crate::test_traces::{call, meta};
        use fgtrace_trace::{LossKind, Lost};
        let m = meta(
            &["run", "parse;line", "emit"],
            &[(1, "main"), (2, "w1"), (3, "w2"), (4, "w3")],
        );
        let mut events = Vec::new();
        for round in 0..40u64 {
            for t in 0..4u32 {
                let at = round * 10_000 + u64::from(t) * 7;
                events.push(Some(call(t, 0, 0, at, 5_000 + u64::from(t))));
                events.push(Some(call(t, 1, 1, at + 10, 1_000 + round)));
                if (round + u64::from(t)) % 3 == 0 {
                    events.push(Some(call(t, 2, 2, at + 20, 100)));
                }
                events.push(Some(call(t, 2, 1, at + 2_000, 300 + u64::from(t))));
                if round == 7 && t == 2 {
                    events.push(Some(Event::Lost(Lost {
                        thread: t,
                        depth: 1,
                        at_ns: at + 3_000,
                        count: 5,
                        kind: LossKind::Dropped,
                    })));
                }
            }
        }
        // A read error near the end: `None` here.
        events.insert(events.len() - 9, None);
        let stream = || {
            events.iter().map(|e| {
                e.clone().ok_or(TraceError::Truncated {
                    offset: 99,
                    what: "chunk",
                })
            })
        };
        for per_thread in [false, true] {
            let opts = FoldedOptions {
                per_thread,
                ..FoldedOptions::default()
            };
            let one = FoldedBuilder::traced_in_groups(&m, &opts, stream(), 1);
            assert!(matches!(
                one.1,
                Err(TraceError::Truncated { offset: 99, .. })
            ));
            assert_eq!(one.0.summary().records_lost, 5);
            assert!(one.0.summary().calls > 400, "{:?}", one.0.summary());
            for groups in [2, 3, 4, 8] {
                let got = FoldedBuilder::traced_in_groups(&m, &opts, stream(), groups);
                assert_eq!(got.0.lines(), one.0.lines(), "{groups} groups");
                assert_eq!(got.0.summary(), one.0.summary(), "{groups} groups");
                assert_eq!(got.0.total(), one.0.total());
                assert_eq!(
                    got.0.stats(&["run", "parse,line"]),
                    one.0.stats(&["run", "parse,line"])
                );
                assert!(matches!(
                    got.1,
                    Err(TraceError::Truncated { offset: 99, .. })
                ));
            }
        }
    }

    #[test]
    fn sampling_rates_parse() {
        assert_eq!(sampling_hz("cpu-clock@999Hz"), Some(999.0));
        assert_eq!(sampling_hz("task-clock@10kHz"), Some(10_000.0));
        assert_eq!(sampling_hz("timer 250 Hz"), Some(250.0));
        assert_eq!(sampling_hz("cpu-clock"), None);
    }
}
