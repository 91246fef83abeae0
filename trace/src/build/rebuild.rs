//! One thread's records, in exit order as the probes wrote them, rebuilt
//! into the pre-order call stream views read, in memory bounded by a budget
//! of records and the thread's open depth, never by its number of calls.
//!
//! A record's subtree is found in exit order: it adopts the finished
//! subtrees on the stack that are deeper and started no earlier (the time
//! check keeps orphans of a lost parent from being adopted by a later
//! sibling of that parent). A depth-0 entry is never adopted, so once one is
//! on the stack, the stack up to it is final: those roots are walked in
//! pre-order (roots left to right, children left to right), with the
//! samples put before the first call that starts after them, exactly as a
//! walk of the whole thread at its end would.
//!
//! A call open for long (a test thread's body) has every record below it
//! before its own, and none of them can be written before it. Where the
//! records can be read again ([`RawSeq`]: the raw chunks in memory or in
//! the file), the subtrees waiting on the stack are let go once a frame
//! holds its budget of records: each run of them becomes a [`Run`], the
//! range of records it spans, kept with the depth and starts adoption
//! needs. When the walk reaches a run, its records are read again and
//! rebuilt the same way, one level deeper ([`Replay`]); so each record is
//! read once more for each ancestor that outgrew the budget. The walk is
//! written out a chunk at a time ([`ThreadBuilder::fill`]), so a tree of a
//! billion calls never waits whole as chunks either.

use super::alloc_figures::Attach;
use super::CounterLayout;
use crate::encoding::{Chunk, ChunkEncoder, TraceError};
use crate::recorded::{self, RawChunk, RawSample, Rec, TickScale};
use crate::{flags, Call, Event, FutureSpan, LossKind, Lost};
use fgtrace_core::record::kind;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// One thread's records (exit order) as pre-order chunks, with its samples
/// merged in by time; returns the chunks and the number of calls.
pub fn build_thread(
    t: u32,
    recs: &[Rec],
    samples: Vec<RawSample>,
    overwritten: u64,
    layout: CounterLayout,
) -> (Vec<Chunk>, u64) {
    let mut b = ThreadBuilder::new(t, samples, overwritten, layout);
    b.push(recs);
    b.finish()
}

/// A thread's raw chunks where they can be read again: in memory, then in
/// the file (checked against what was read at open).
pub struct RawSeq {
    mem: Vec<RawChunk>,
    in_file: Vec<super::RawAt>,
    /// The files `in_file` names ([`super::RawAt::file`]).
    files: Vec<Arc<std::fs::File>>,
    n_sites: usize,
    scale: TickScale,
    /// `starts[k]`: the index of chunk `k`'s first record; then the total.
    starts: Vec<usize>,
}

impl RawSeq {
    pub(super) fn new(
        mem: Vec<RawChunk>,
        in_file: Vec<super::RawAt>,
        files: Vec<Arc<std::fs::File>>,
        n_sites: usize,
        scale: TickScale,
    ) -> RawSeq {
        let counts = mem
            .iter()
            .map(|c| c.count)
            .chain(in_file.iter().map(|c| c.count));
        let mut starts = vec![0usize];
        let mut n = 0usize;
        for c in counts {
            n += c as usize;
            starts.push(n);
        }
        RawSeq {
            mem,
            in_file,
            files,
            n_sites,
            scale,
            starts,
        }
    }

    /// Raw chunks.
    pub(super) fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Chunk `k`'s records into `out` (emptied first).
    pub(super) fn decode(&self, k: usize, out: &mut Vec<Rec>) -> Result<(), TraceError> {
        out.clear();
        if let Some(c) = self.mem.get(k) {
            return recorded::decode(c, self.n_sites, self.scale, out);
        }
        let at = &self.in_file[k - self.mem.len()];
        let Some(file) = self.files.get(at.file as usize) else {
            return Err(TraceError::Io(std::io::Error::other(
                "a raw chunk left in a file that is not open",
            )));
        };
        recorded::decode(&at.read(file)?, self.n_sites, self.scale, out)
    }
}

/// Records `next..end` of a thread, read again a raw chunk at a time.
struct Cursor {
    next: usize,
    end: usize,
    recs: Vec<Rec>,
    /// The index of `recs[0]`.
    at: usize,
}

impl Cursor {
    fn new(next: usize, end: usize) -> Cursor {
        Cursor {
            next,
            end,
            recs: Vec::new(),
            at: 0,
        }
    }

    fn next(&mut self, seq: &RawSeq) -> Option<Result<(usize, Rec), TraceError>> {
        if self.next >= self.end {
            return None;
        }
        let i = self.next;
        if i < self.at || i >= self.at + self.recs.len() {
            let k = self.starts_chunk(seq, i);
            if let Err(e) = seq.decode(k, &mut self.recs) {
                self.end = self.next;
                return Some(Err(e));
            }
            self.at = seq.starts[k];
            if i >= self.at + self.recs.len() {
                self.end = self.next;
                return Some(Err(TraceError::Corrupt {
                    offset: 0,
                    what: format!("record {i} is not where it was when the trace was read"),
                }));
            }
        }
        self.next += 1;
        Some(Ok((i, self.recs[i - self.at])))
    }

    fn starts_chunk(&self, seq: &RawSeq, i: usize) -> usize {
        seq.starts.partition_point(|&s| s <= i).saturating_sub(1)
    }
}

/// A node of a frame's forest: a record it holds, or a run it let go.
#[derive(Clone, Copy, Debug)]
enum Node {
    Rec(usize),
    Run(u32),
}

/// Finished sibling subtrees let go before their parent came: records
/// `lo..end`, whose roots all have depth `depth` and start, in order, from
/// `first_start` to `last_start` (never earlier than the one before).
#[derive(Clone, Copy, Debug)]
struct Run {
    lo: usize,
    end: usize,
    depth: u32,
    first_start: u64,
    last_start: u64,
}

/// Records being rebuilt: the thread's (floor 0) or a run's, read again
/// (floor: its roots' depth). Once its stack's top is a root at the floor,
/// the stack is final and is written out when the next record comes.
struct Frame {
    floor: u32,
    /// Records since the last flush or spill; `buf[k]` is record `base + k`.
    buf: Vec<Rec>,
    base: usize,
    /// The forest's nodes in exit order, their subtree sizes, and the stack
    /// of subtrees not yet adopted (indices into `tree`).
    tree: Vec<Node>,
    size: Vec<u32>,
    stack: Vec<u32>,
    runs: Vec<Run>,
    figures: Attach,
}

impl Frame {
    fn new(floor: u32, base: usize, figures: Attach) -> Frame {
        Frame {
            floor,
            buf: Vec::new(),
            base,
            tree: Vec::new(),
            size: Vec::new(),
            stack: Vec::new(),
            runs: Vec::new(),
            figures,
        }
    }

    fn next_index(&self) -> usize {
        self.base + self.buf.len()
    }

    fn rec(&self, i: usize) -> &Rec {
        &self.buf[i - self.base]
    }

    /// A node's root depth, and the starts of its first and last roots.
    fn head(&self, n: Node) -> (u32, u64, u64) {
        match n {
            Node::Rec(i) => {
                let r = self.rec(i);
                (r.depth, r.start_ns, r.start_ns)
            }
            Node::Run(x) => {
                let r = &self.runs[x as usize];
                (r.depth, r.first_start, r.last_start)
            }
        }
    }

    /// The first record a node's subtree spans.
    fn lo(&self, n: Node) -> usize {
        match n {
            Node::Rec(i) => i,
            Node::Run(x) => self.runs[x as usize].lo,
        }
    }

    fn top_at_floor(&self) -> bool {
        self.stack
            .last()
            .is_some_and(|&k| self.head(self.tree[k as usize]).0 == self.floor)
    }

    /// Takes record `r` (the frame's next). Returns the forest made final
    /// by it (to be written before anything after), having let the frame's
    /// subtrees go first if it held `budget` records.
    fn take(
        &mut self,
        r: &Rec,
        budget: usize,
        seq: Option<&RawSeq>,
    ) -> Result<(Option<Walk>, bool), TraceError> {
        let i = self.next_index();
        // Extension records belong to the call before them: a finished
        // tree is written out only when the next record that is not one
        // arrives, so its last call has its figures by then.
        if self.figures.take(i, r) {
            self.buf.push(*r);
            return Ok((None, false));
        }
        let mut walk = None;
        if self.top_at_floor() {
            walk = Some(self.flush());
        } else if seq.is_some() && self.buf.len() >= budget {
            self.spill();
        }
        self.buf.push(*r);
        if r.kind as u64 == kind::FUTURE {
            return Ok((walk, true));
        }
        self.add(i, r, seq)?;
        Ok((walk, false))
    }

    /// Puts tree record `i` on the stack, adopting its children.
    fn add(&mut self, i: usize, r: &Rec, seq: Option<&RawSeq>) -> Result<(), TraceError> {
        let mut sz = 1u32;
        while let Some(&top) = self.stack.last() {
            let node = self.tree[top as usize];
            let (depth, first, last) = self.head(node);
            if depth <= r.depth || last < r.start_ns {
                break;
            }
            match node {
                Node::Run(x) if first < r.start_ns => {
                    // Only the run's later roots started within `r`: they
                    // become its children, the earlier ones stay.
                    let seq = seq.ok_or_else(|| {
                        TraceError::Io(std::io::Error::other("a run without its records"))
                    })?;
                    let (a, b) = split(self.runs[x as usize], r.start_ns, seq)?;
                    self.runs[x as usize] = a;
                    self.runs.push(b);
                    // The later part goes right after the earlier one,
                    // before the subtrees `r` adopted already (nothing on
                    // the stack is after it).
                    let at = top as usize + 1;
                    self.tree.insert(at, Node::Run(self.runs.len() as u32 - 1));
                    self.size.insert(at, 1);
                    sz += 1;
                }
                _ => {
                    sz += self.size[top as usize];
                    self.stack.pop();
                }
            }
        }
        let k = self.tree.len();
        self.tree.push(Node::Rec(i));
        self.size.push(sz);
        self.stack.push(k as u32);
        Ok(())
    }

    /// The forest held, to be written out; the frame goes on empty.
    fn flush(&mut self) -> Walk {
        let base = self.next_index();
        let figures = self.figures.fresh();
        let frame = std::mem::replace(self, Frame::new(self.floor, base, figures));
        Walk {
            roots: frame.stack.clone(),
            frame,
            next_root: 0,
            work: Vec::new(),
        }
    }

    /// Lets every subtree on the stack go, as runs of the records they span.
    fn spill(&mut self) {
        let end = self.next_index();
        let n = self.stack.len();
        let first_lo = |f: &Frame, k: usize| f.lo(f.tree[k + 1 - f.size[k] as usize]);
        let mut runs: Vec<Run> = Vec::new();
        for j in 0..n {
            let k = self.stack[j] as usize;
            let lo = first_lo(self, k);
            let to = match self.stack.get(j + 1) {
                Some(&k2) => first_lo(self, k2 as usize),
                None => end,
            };
            let (depth, first, last) = self.head(self.tree[k]);
            match runs.last_mut() {
                Some(p) if p.depth == depth && first >= p.last_start && p.end == lo => {
                    p.end = to;
                    p.last_start = last;
                }
                _ => runs.push(Run {
                    lo,
                    end: to,
                    depth,
                    first_start: first,
                    last_start: last,
                }),
            }
        }
        let m = runs.len() as u32;
        self.buf.clear();
        self.base = end;
        self.tree = (0..m).map(Node::Run).collect();
        self.size = vec![1; m as usize];
        self.stack = (0..m).collect();
        self.runs = runs;
        self.figures = self.figures.fresh();
    }

    /// Records held.
    fn held(&self) -> usize {
        self.buf.len()
    }
}

/// `run` cut before its first root that starts at `at` or later (there is
/// one, and one before it): the records of each part, read again.
fn split(run: Run, at: u64, seq: &RawSeq) -> Result<(Run, Run), TraceError> {
    let mut cur = Cursor::new(run.lo, run.end);
    // Where the entry being read began: after the last root and its
    // extension records.
    let mut entry = run.lo;
    let mut after_root = false;
    let mut prev_start = None;
    while let Some(x) = cur.next(seq) {
        let (i, r) = x?;
        if r.kind as u64 == kind::LOST && r.unwound {
            continue;
        }
        if after_root {
            entry = i;
            after_root = false;
        }
        if r.kind as u64 == kind::FUTURE || r.depth != run.depth {
            continue;
        }
        if r.start_ns >= at {
            if let Some(p) = prev_start {
                let a = Run {
                    end: entry,
                    last_start: p,
                    ..run
                };
                let b = Run {
                    lo: entry,
                    first_start: r.start_ns,
                    ..run
                };
                return Ok((a, b));
            }
        }
        prev_start = Some(r.start_ns);
        after_root = true;
    }
    Err(TraceError::Corrupt {
        offset: 0,
        what: format!(
            "records {}..{} are not what they were when the trace was read",
            run.lo, run.end
        ),
    })
}

/// A final forest being written out in pre-order.
struct Walk {
    frame: Frame,
    roots: Vec<u32>,
    next_root: usize,
    work: Vec<u32>,
}

impl Walk {
    fn next(&mut self) -> Option<u32> {
        loop {
            if let Some(k) = self.work.pop() {
                return Some(k);
            }
            let r = *self.roots.get(self.next_root)?;
            self.next_root += 1;
            self.work.push(r);
        }
    }

    fn held(&self) -> usize {
        self.frame.held()
    }
}

/// A run's records read again and rebuilt, as the walk reached it.
struct Replay {
    frame: Frame,
    cur: Cursor,
}

enum Task {
    Walk(Walk),
    Replay(Replay),
}

/// Where the rebuilt events go, and what writing them needs.
struct Out {
    t: u32,
    samples: std::iter::Peekable<std::vec::IntoIter<RawSample>>,
    overwritten: u64,
    layout: CounterLayout,
    /// The (depth, end) of the calls emitted so far that may still be open.
    open: Vec<(u32, u64)>,
    enc: ChunkEncoder,
    calls: u64,
    /// The first record's start (the overwritten marker's time).
    first_start: Option<u64>,
    started: bool,
}

impl Out {
    /// The overwritten calls' marker, before anything else of the thread.
    fn start(&mut self) {
        if self.started {
            return;
        }
        self.started = true;
        if self.overwritten > 0 {
            self.enc.push_event(Event::Lost(Lost {
                thread: self.t,
                depth: 0,
                at_ns: self.first_start.unwrap_or(0),
                count: self.overwritten,
                kind: LossKind::Overwritten,
            }));
        }
    }

    /// Samples before `until`, each with the traced calls open at its time
    /// where the sampler could not count them (kernel call chains: the
    /// innermost open call's depth + 1).
    fn samples_before(&mut self, until: u64) {
        while let Some(s) = self.samples.next_if(|s| s.0 < until) {
            let shadow_depth = if s.1 == crate::SHADOW_DEPTH_FROM_TRACE {
                self.open
                    .iter()
                    .rev()
                    .find(|o| o.1 > s.0)
                    .map_or(0, |o| o.0.saturating_add(1))
            } else {
                s.1
            };
            self.enc.push_event(Event::Sample(crate::Sample {
                thread: self.t,
                ts_ns: s.0.min(recorded::MAX_NS),
                shadow_depth,
                cut: s.2,
                frames: s.3,
            }));
        }
    }

    /// Writes node `k` of `w`, record `i`, and puts its children to walk.
    fn emit(&mut self, w: &mut Walk, k: u32, i: usize) {
        let t = self.t;
        let f = &mut w.frame;
        let r = *f.rec(i);
        self.samples_before(r.start_ns);
        while self.open.last().is_some_and(|o| o.0 >= r.depth) {
            self.open.pop();
        }
        if f.figures.is_marker(i) {
            if let Some(id) = f.figures.wake_of(i) {
                self.enc.push_event(Event::Wake(crate::Wake {
                    thread: t,
                    site: r.site,
                    depth: r.depth,
                    ts_ns: r.start_ns,
                    id,
                }));
                return;
            }
            self.enc.push_event(Event::Marker(crate::Marker {
                thread: t,
                site: r.site,
                depth: r.depth,
                ts_ns: r.start_ns,
            }));
            if let Some(e) = f.figures.values_event(t, i) {
                self.enc.push_event(e);
            }
            return;
        }
        if r.kind as u64 != kind::LOST {
            self.open.push((r.depth, r.end_ns));
        }
        match r.kind as u64 {
            kind::LOST => self.enc.push_event(Event::Lost(Lost {
                thread: t,
                depth: r.depth,
                at_ns: r.start_ns,
                count: r.count,
                kind: LossKind::Dropped,
            })),
            rk => {
                self.calls += 1;
                let mut fl = 0;
                if r.unwound {
                    fl |= flags::UNWOUND;
                }
                if rk == kind::POLL {
                    fl |= flags::POLL;
                }
                if f.size[k as usize] > 1 {
                    fl |= flags::HAS_CHILDREN;
                }
                self.enc.push_event(Event::Call(Call {
                    thread: t,
                    site: r.site,
                    depth: r.depth,
                    start_ns: r.start_ns,
                    dur_ns: r.end_ns - r.start_ns,
                    flags: fl,
                }));
                if let Some(e) = f.figures.event(t, i, self.layout) {
                    self.enc.push_event(e);
                }
                if let Some(e) = f.figures.values_event(t, i) {
                    self.enc.push_event(e);
                }
                if rk == kind::POLL {
                    if let Some(e) = f.figures.future_id_event(t, i) {
                        self.enc.push_event(e);
                    }
                }
            }
        }
        let sz = f.size[k as usize];
        if sz > 1 {
            let lo = k + 1 - sz;
            let mut c = k - 1;
            loop {
                w.work.push(c);
                let csz = f.size[c as usize];
                if c < lo + csz {
                    break;
                }
                c -= csz;
            }
        }
    }
}

/// One thread's records, in exit order as the probes wrote them, rebuilt
/// into the pre-order call stream views read, as they come: records are
/// [`push`](Self::push)ed a batch at a time (a raw chunk's), every finished
/// top-level call tree is queued to be written out, and
/// [`fill`](Self::fill) writes until a chunk is done. Without a sequence
/// of raw chunks to read them again ([`ThreadBuilder::new`]), the records
/// of the tree still open are all held; with one (as views build threads
/// from a file), a budget of them per level (see the module's
/// documentation).
pub struct ThreadBuilder {
    out: Out,
    top: Frame,
    /// Final forests of `top`, in order, not yet written.
    pending: VecDeque<Walk>,
    /// The forest being written and the runs being read again under it,
    /// innermost last.
    tasks: Vec<Task>,
    /// Whole-future records with their indices, emitted at the end by start.
    futures: Vec<(usize, Rec)>,
    /// Their values, id and times events, in that order, kept as their
    /// frames go.
    future_figures: HashMap<usize, Vec<Event>>,
    seq: Option<Arc<RawSeq>>,
    /// Records a frame holds before it lets its subtrees go.
    budget: usize,
    failed: Option<TraceError>,
    ended: bool,
}

impl ThreadBuilder {
    pub fn new(t: u32, samples: Vec<RawSample>, overwritten: u64, layout: CounterLayout) -> Self {
        ThreadBuilder {
            out: Out {
                t,
                samples: samples.into_iter().peekable(),
                overwritten,
                layout,
                open: Vec::new(),
                enc: ChunkEncoder::new(t),
                calls: 0,
                first_start: None,
                started: false,
            },
            top: Frame::new(0, 0, Attach::default()),
            pending: VecDeque::new(),
            tasks: Vec::new(),
            futures: Vec::new(),
            future_figures: HashMap::new(),
            seq: None,
            budget: usize::MAX,
            failed: None,
            ended: false,
        }
    }

    /// Reads the thread's records again from `seq` (where they are pushed
    /// from, in the same order) rather than hold more than `budget` of them
    /// per level.
    pub(super) fn rereading(mut self, seq: Arc<RawSeq>, budget: usize) -> Self {
        self.seq = Some(seq);
        self.budget = budget.max(1);
        self
    }

    /// Whether the budget is a small share: many threads are rebuilt side
    /// by side.
    pub(super) fn side_by_side(&self) -> bool {
        self.budget < super::HELD_TOTAL / 16
    }

    /// Lets go of the raw chunks decoded to be read again (they are
    /// decoded again when the walk goes on).
    pub(super) fn trim(&mut self) {
        for t in &mut self.tasks {
            if let Task::Replay(r) = t {
                r.cur.recs = Vec::new();
                r.cur.at = 0;
            }
        }
    }

    /// Changes the budget (before the first push).
    pub(super) fn set_budget(&mut self, budget: usize) {
        self.budget = budget.max(1);
    }

    /// Keeps the built chunks' events decoded (see
    /// [`ChunkEncoder::decoded`]): before the first push.
    pub fn keep_events(&mut self, buffers: &crate::encoding::EventBuffers) {
        if !self.out.enc.keeps_events() {
            self.out.enc = ChunkEncoder::decoded(self.out.t, buffers.clone());
        }
    }

    /// The next records of the thread, in the order they were written.
    pub fn push(&mut self, recs: &[Rec]) {
        for r in recs {
            if self.failed.is_some() {
                return;
            }
            self.out.first_start.get_or_insert(r.start_ns);
            self.take_top(r);
        }
    }

    fn take_top(&mut self, r: &Rec) {
        let i = self.top.next_index();
        let is_ext = r.kind as u64 == kind::LOST && r.unwound;
        let lets_go =
            self.top.top_at_floor() || (self.seq.is_some() && self.top.buf.len() >= self.budget);
        if !is_ext && lets_go {
            // A flush or spill may let the frame's figures go: the whole
            // futures' are kept apart first.
            self.keep_future_figures();
        }
        match self.top.take(r, self.budget, self.seq.as_deref()) {
            Ok((walk, future)) => {
                self.pending.extend(walk);
                if future {
                    self.futures.push((i, *r));
                }
            }
            Err(e) => self.failed = Some(e),
        }
    }

    /// Takes the figures of the whole futures the top frame holds (their
    /// values, ids and times) apart from it, before it lets them go.
    fn keep_future_figures(&mut self) {
        let base = self.top.base;
        let t = self.out.t;
        for (fi, _) in self.futures.iter().rev().take_while(|(fi, _)| *fi >= base) {
            let fig = &mut self.top.figures;
            let after = [
                fig.values_event(t, *fi),
                fig.future_id_event(t, *fi),
                fig.future_times_event(t, *fi),
            ];
            let kept: Vec<Event> = after.into_iter().flatten().collect();
            if !kept.is_empty() {
                self.future_figures.insert(*fi, kept);
            }
        }
    }

    /// No more records: what is held is final.
    pub fn end_input(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.keep_future_figures();
        let w = self.top.flush();
        self.pending.push_back(w);
    }

    /// Whether final records wait to be written out.
    pub fn has_work(&self) -> bool {
        self.failed.is_none() && !(self.tasks.is_empty() && self.pending.is_empty())
    }

    /// Writes out what is final until a chunk is done or nothing is left.
    pub fn fill(&mut self) {
        while self.failed.is_none() && !self.out.enc.has_done() {
            if self.tasks.is_empty() {
                match self.pending.pop_front() {
                    Some(w) => {
                        self.out.start();
                        self.tasks.push(Task::Walk(w));
                    }
                    None => return,
                }
            }
            if let Err(e) = self.step() {
                self.failed = Some(e);
            }
        }
    }

    /// One node written, or one record read again.
    fn step(&mut self) -> Result<(), TraceError> {
        enum Next {
            Nothing,
            Pop,
            Push(Task),
            Replace(Task),
        }
        let next = match self.tasks.last_mut() {
            None => Next::Nothing,
            Some(Task::Walk(w)) => match w.next() {
                None => Next::Pop,
                Some(k) => match w.frame.tree[k as usize] {
                    Node::Run(x) => {
                        let run = w.frame.runs[x as usize];
                        let figures = Attach::default();
                        Next::Push(Task::Replay(Replay {
                            frame: Frame::new(run.depth, run.lo, figures),
                            cur: Cursor::new(run.lo, run.end),
                        }))
                    }
                    Node::Rec(i) => {
                        self.out.emit(w, k, i);
                        Next::Nothing
                    }
                },
            },
            Some(Task::Replay(rp)) => {
                let seq = self.seq.as_deref().ok_or_else(|| {
                    TraceError::Io(std::io::Error::other("a run without its records"))
                })?;
                match rp.cur.next(seq) {
                    Some(x) => {
                        let (_, r) = x?;
                        match rp.frame.take(&r, self.budget, Some(seq))? {
                            (Some(w), _) => Next::Push(Task::Walk(w)),
                            (None, _) => Next::Nothing,
                        }
                    }
                    None => Next::Replace(Task::Walk(rp.frame.flush())),
                }
            }
        };
        match next {
            Next::Nothing => {}
            Next::Pop => {
                self.tasks.pop();
            }
            Next::Push(t) => self.tasks.push(t),
            Next::Replace(t) => {
                if let Some(last) = self.tasks.last_mut() {
                    *last = t;
                }
            }
        }
        Ok(())
    }

    /// The chunks done so far, taken out.
    pub fn take_done(&mut self) -> Vec<Chunk> {
        self.out.enc.take_done()
    }

    /// What went wrong reading records again (the thread ends there).
    pub fn take_error(&mut self) -> Option<TraceError> {
        self.failed.take()
    }

    /// Records held (those of the call trees not yet written out), at every
    /// level.
    pub fn held(&self) -> usize {
        let tasks: usize = self
            .tasks
            .iter()
            .map(|t| match t {
                Task::Walk(w) => w.held(),
                Task::Replay(r) => r.frame.held() + r.cur.recs.len(),
            })
            .sum();
        self.top.held() + self.pending.iter().map(Walk::held).sum::<usize>() + tasks
    }

    /// Writes what is left: the last trees, the samples after them, the
    /// futures by start. Returns the thread's chunks and its calls.
    pub fn finish(mut self) -> (Vec<Chunk>, u64) {
        self.end_input();
        let mut chunks = Vec::new();
        while self.has_work() {
            self.fill();
            chunks.extend(self.out.enc.take_done());
        }
        self.out.start();
        self.out.samples_before(u64::MAX);
        let t = self.out.t;
        let mut futures = std::mem::take(&mut self.futures);
        futures.sort_by_key(|(_, r)| r.start_ns);
        // The whole futures go in chunks of their own, placed among the
        // threads by the latest end of them: a future's polls may run on
        // other threads, and a view matching polls to futures (the exports'
        // async lanes) then has every poll before its future.
        let enc = &mut self.out.enc;
        let (sealed, latest) = enc.seal();
        let key = futures
            .iter()
            .map(|(_, r)| r.end_ns)
            .max()
            .unwrap_or(0)
            .max(latest);
        for (i, r) in &futures {
            enc.push_event(Event::Future(FutureSpan {
                thread: t,
                site: r.site,
                start_ns: r.start_ns,
                dur_ns: r.end_ns - r.start_ns,
                polls: r.depth,
                cancelled: r.unwound,
            }));
            for e in self.future_figures.remove(i).into_iter().flatten() {
                enc.push_event(e);
            }
        }
        let mut rest = self.out.enc.finish();
        for c in rest.iter_mut().skip(sealed) {
            c.first_ns = key;
        }
        chunks.extend(rest);
        (chunks, self.out.calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorded::{RawEncoder, SiteMap};
    use fgtrace_core::record::{ext, RawCall};

    /// A small deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n.max(1)
        }
    }

    const ORIGIN: u64 = 1_000_000;

    /// A call tree at `depth` from `start` in exit order into `out`, with
    /// figures, values, markers and futures here and there; returns its end.
    fn tree(
        rng: &mut Rng,
        depth: u32,
        start: u64,
        budget: &mut i64,
        out: &mut Vec<RawCall>,
    ) -> u64 {
        let mut t = start + 1 + rng.below(3);
        if depth < 12 {
            let kids = if depth < 2 {
                2 + rng.below(40)
            } else {
                rng.below(4)
            };
            for _ in 0..kids {
                if *budget <= 0 {
                    break;
                }
                match rng.below(20) {
                    0 => {
                        // An instant marker, with a value.
                        out.push(RawCall::pack(
                            ORIGIN + t,
                            depth + 1,
                            0,
                            90,
                            false,
                            kind::CALL,
                        ));
                        out.push(RawCall::ext(ext::MARKER, 0, 0));
                        out.push(RawCall::ext(ext::VALUE, t, 1 << 3));
                        t += 1;
                    }
                    1 => {
                        // A whole future, with its id, its times (busy
                        // t + 11, 2 polls; its wakes every other) and a value.
                        out.push(RawCall::pack(ORIGIN + t, 2, 5, 91, false, kind::FUTURE));
                        out.push(RawCall::ext(ext::FUTURE, t + 3, 0));
                        out.push(RawCall::ext(ext::FUTURE_BUSY, t + 11, 2));
                        if t % 2 == 0 {
                            out.push(RawCall::ext(ext::FUTURE_WAKES, t + 5, 1));
                        }
                        out.push(RawCall::ext(ext::VALUE, t + 7, 1 << 3));
                    }
                    2 => {
                        // A wake of the future t + 13.
                        out.push(RawCall::pack(
                            ORIGIN + t,
                            depth + 1,
                            0,
                            91,
                            false,
                            kind::CALL,
                        ));
                        out.push(RawCall::ext(ext::MARKER, 0, 0));
                        out.push(RawCall::ext(ext::WAKE, t + 13, 0));
                        t += 1;
                    }
                    _ => t = tree(rng, depth + 1, t, budget, out) + rng.below(2),
                }
            }
        }
        *budget -= 1;
        let dur = t - start + rng.below(2);
        let site = depth * 3 + rng.below(3) as u32;
        let k = if rng.below(10) == 0 {
            kind::POLL
        } else {
            kind::CALL
        };
        out.push(RawCall::pack(
            ORIGIN + start,
            depth,
            dur,
            site,
            rng.below(30) == 0,
            k,
        ));
        if rng.below(4) == 0 {
            out.push(RawCall::ext(ext::ALLOCS, rng.below(9), rng.below(99)));
        }
        if k == kind::POLL {
            // A poll's future, as its exit writes it (after its figures).
            out.push(RawCall::ext(ext::FUTURE, start * 5 + 1, 0));
        }
        if rng.below(8) == 0 {
            out.push(RawCall::ext(ext::VALUE, rng.below(1000), 1 << 3));
        }
        start + dur
    }

    /// Records of a thread: top-level trees, some records lost in batches
    /// (a loss marker in their place, their children orphans), as raw
    /// chunks of `per_chunk` records.
    fn thread(seed: u64, calls: i64, per_chunk: usize) -> (Vec<RawChunk>, usize) {
        let mut rng = Rng(seed);
        let mut all = Vec::new();
        let mut t = 0;
        let mut left = calls;
        while left > 0 {
            t = tree(&mut rng, 0, t, &mut left, &mut all) + 5;
        }
        let mut recs = Vec::new();
        let mut i = 0;
        while i < all.len() {
            if rng.below(500) == 0 && !all[i].is_ext() {
                let n = 1 + rng.below(30) as usize;
                let first = all[i];
                let depth = (first.0 >> 54) as u32;
                let at = first.0 & fgtrace_core::record::START_MASK;
                recs.push(RawCall::pack(at, depth, n as u64, 0, false, kind::LOST));
                i += n;
                // A batch ends at a record, never between a call and its figures.
                while i < all.len() && all[i].is_ext() {
                    i += 1;
                }
                continue;
            }
            recs.push(all[i]);
            i += 1;
        }
        let site_of = |id: u32| {
            Some(crate::SiteInfo {
                name: format!("f{id}"),
                module_path: String::new(),
                file: String::new(),
                line: 0,
                is_async: id == 91,
                values: vec!["v".into()],
            })
        };
        let mut sites = SiteMap::default();
        let mut enc = RawEncoder::default();
        let chunks = recs
            .chunks(per_chunk)
            .map(|c| enc.encode(0, c, ORIGIN, &mut sites, &site_of))
            .collect();
        (chunks, sites.sites.len())
    }

    fn samples(seed: u64, until: u64) -> Vec<RawSample> {
        let mut rng = Rng(seed);
        let mut t = 0;
        let mut out = Vec::new();
        while t < until {
            t += 1 + rng.below(200);
            let depth = if rng.below(2) == 0 {
                crate::SHADOW_DEPTH_FROM_TRACE
            } else {
                rng.below(5) as u32
            };
            out.push((t, depth, None, vec![t]));
        }
        out
    }

    /// Every chunk of a builder, written out as it goes.
    fn run(mut b: ThreadBuilder, seq: &RawSeq) -> (Vec<Chunk>, u64, usize) {
        let mut out = Vec::new();
        let mut recs = Vec::new();
        let mut most = 0;
        for k in 0..seq.len() {
            seq.decode(k, &mut recs).unwrap();
            b.push(&recs);
            loop {
                most = most.max(b.held());
                if !b.has_work() {
                    break;
                }
                b.fill();
                out.extend(b.take_done());
            }
            assert!(b.take_error().is_none());
        }
        let (rest, calls) = b.finish();
        out.extend(rest);
        (out, calls, most)
    }

    /// Records let go and read again give the same chunks, event for event,
    /// as records all held, whatever the budget: with losses and their
    /// orphans, figures, values, markers, futures and samples, and raw
    /// chunks cut anywhere.
    #[test]
    fn records_read_again_give_the_chunks_of_records_held() {
        let layout = CounterLayout {
            with_allocs: true,
            n_counters: 0,
        };
        for seed in 1..=12u64 {
            let (chunks, n_sites) = thread(seed * 7919, 3000, 1 + (seed as usize * 37) % 500);
            let seq = Arc::new(RawSeq::new(
                chunks,
                Vec::new(),
                Vec::new(),
                n_sites,
                TickScale::new(1.0),
            ));
            let smp = samples(seed, 200_000);
            let whole = ThreadBuilder::new(0, smp.clone(), 3, layout);
            let (want, want_calls, held_all) = run(whole, &seq);
            assert!(want_calls > 2500, "{want_calls}");
            // Every poll and whole future is followed by its id, after its
            // counters and values: the id of a poll that started at t is
            // 5t + 1, of a future t + 3.
            let events: Vec<Event> = want.iter().flat_map(|c| c.decode().unwrap()).collect();
            let mut named = 0;
            for (k, e) in events.iter().enumerate() {
                let want_id = match e {
                    Event::Call(c) if c.is_poll() => Some(c.start_ns * 5 + 1),
                    Event::Future(f) => Some(f.start_ns + 3),
                    _ => None,
                };
                if let Some(id) = want_id {
                    let next = events[k + 1..]
                        .iter()
                        .find(|x| !matches!(x, Event::Counters(_) | Event::Values(_)));
                    assert!(
                        matches!(next, Some(Event::FutureId(f)) if f.id == id),
                        "seed {seed}: {e:?} is followed by {next:?}"
                    );
                    named += 1;
                }
            }
            assert!(named > 100, "seed {seed}: {named} polls and futures");
            // A whole future's times follow its id; a wake names its future.
            let (mut timed, mut woke) = (0, 0);
            for (k, e) in events.iter().enumerate() {
                match e {
                    Event::Future(f) => {
                        let next = events[k + 1..]
                            .iter()
                            .find(|x| !matches!(x, Event::Values(_) | Event::FutureId(_)));
                        let waits = (f.start_ns % 2 == 0).then_some(crate::Waits {
                            scheduled_ns: f.start_ns + 5,
                            wakes: 1,
                        });
                        let want = crate::FutureTimes {
                            thread: 0,
                            busy_ns: f.start_ns + 11,
                            polls: 2,
                            waits,
                        };
                        assert_eq!(next, Some(&Event::FutureTimes(want)), "seed {seed}");
                        timed += 1;
                    }
                    Event::Wake(w) => {
                        assert_eq!(w.id, w.ts_ns + 13, "seed {seed}");
                        woke += 1;
                    }
                    _ => {}
                }
            }
            assert!(
                timed > 20 && woke > 20,
                "seed {seed}: {timed} futures, {woke} wakes"
            );
            for budget in [1, 2, 3, 5, 17, 64, 400] {
                let b =
                    ThreadBuilder::new(0, smp.clone(), 3, layout).rereading(seq.clone(), budget);
                let (got, calls, held) = run(b, &seq);
                assert_eq!(calls, want_calls, "seed {seed} budget {budget}");
                assert_eq!(got.len(), want.len(), "seed {seed} budget {budget}");
                for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                    if g == w {
                        continue;
                    }
                    let (g, w) = (g.decode().unwrap(), w.decode().unwrap());
                    let at = g.iter().zip(&w).position(|(a, b)| a != b).unwrap_or(0);
                    let lo = at.saturating_sub(4);
                    panic!(
                        "seed {seed} budget {budget}: chunk {k} differs at event {at}:\n{:#?}\n{:#?}",
                        &g[lo..(at + 3).min(g.len())],
                        &w[lo..(at + 3).min(w.len())]
                    );
                }
                if budget <= 64 {
                    assert!(
                        held < held_all,
                        "seed {seed} budget {budget}: {held} of {held_all}"
                    );
                }
            }
        }
    }

    /// One call open around ten million: held, a budget of records per
    /// level and the raw chunk being read, never the calls.
    #[test]
    fn a_call_open_around_millions_is_rebuilt_in_its_budget() {
        let n = 1_000_000u64;
        let mut recs = Vec::with_capacity(4 * n as usize + 1);
        for k in 0..n {
            let s = 10 + k * 50;
            recs.push(RawCall::pack(ORIGIN + s + 2, 2, 5, 2, false, kind::CALL));
            recs.push(RawCall::pack(ORIGIN + s + 9, 2, 5, 3, false, kind::CALL));
            recs.push(RawCall::pack(ORIGIN + s, 1, 30, 1, false, kind::CALL));
        }
        recs.push(RawCall::pack(ORIGIN, 0, n * 50 + 20, 0, false, kind::CALL));
        let mut sites = SiteMap::default();
        let mut enc = RawEncoder::default();
        let chunks: Vec<RawChunk> = recs
            .chunks(4096)
            .map(|c| enc.encode(0, c, ORIGIN, &mut sites, &|_| None))
            .collect();
        let seq = Arc::new(RawSeq::new(
            chunks,
            Vec::new(),
            Vec::new(),
            4,
            TickScale::new(1.0),
        ));
        let layout = CounterLayout::default();
        let b = ThreadBuilder::new(0, Vec::new(), 0, layout).rereading(seq.clone(), 1000);
        let (got, calls, held) = run(b, &seq);
        assert_eq!(calls, 3 * n + 1);
        assert!(held < 3 * 1000 + 2 * 4096, "held {held} records");
        let first = got[0].decode().unwrap();
        assert!(matches!(first[0], Event::Call(c) if c.depth == 0 && c.site == 3));
        let events: usize = got.iter().map(|c| c.count as usize).sum();
        assert_eq!(events as u64, 3 * n + 1);
    }
}
