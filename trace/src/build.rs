//! Turns the raw records a session gathered into a [`Trace`]: restores full
//! timestamps, converts ticks to nanoseconds, and reorders each thread's calls
//! from exit order (how probes write them) to pre-order (how views read them).

use super::format::{self, Chunk, ChunkEncoder, TraceError};
use super::recorded::{self, decode, RawChunk, RawEncoder, RawSample, Rec, SiteMap, TickScale};
use super::{
    flags, Call, ClockInfo, Event, FutureSpan, LossKind, Lost, RecordMode, SiteInfo, ThreadInfo,
    Trace, TraceMeta,
};
use crate::clock::Calibration;
use fgtrace_core::record::{kind, RawCall};
use fgtrace_core::site::Site;

/// One thread's records as gathered, oldest first.
pub struct ThreadInput {
    pub tid: u32,
    pub name: String,
    pub records: Vec<RawCall>,
    /// Flight recorder: calls overwritten before the snapshot.
    pub overwritten: u64,
    /// Stream: calls in dropped batches.
    pub dropped: u64,
    pub overruns: u64,
    /// (ns since session start, shadow depth, cut, frames), in time order.
    pub samples: Vec<(u64, u32, Option<u32>, Vec<u64>)>,
    pub samples_lost: u64,
}

impl ThreadInput {
    /// A thread with samples but no traced calls.
    pub fn empty(tid: u32, name: String) -> ThreadInput {
        ThreadInput {
            tid,
            name,
            records: Vec::new(),
            overwritten: 0,
            dropped: 0,
            overruns: 0,
            samples: Vec::new(),
            samples_lost: 0,
        }
    }
}

/// What a trace says about who recorded it and how, before its threads and
/// sites: the one place a [`TraceMeta`]'s head is built ([`MetaBase::meta`]),
/// for a session, a snapshot, a capture or a board alike.
pub struct MetaBase {
    /// The traced program (`argv[0]`, or a board's firmware name).
    pub program: String,
    /// Its process id (0 on a board).
    pub pid: u32,
    /// The tick counter's name (`tsc`, `rdtime`, ...).
    pub clock_source: String,
    pub cal: Calibration,
    pub end_ticks: u64,
    pub mode: RecordMode,
    pub filters: String,
    /// Names of the per-call counters the records carry (`Config::counters`).
    pub counters: Vec<String>,
}

impl MetaBase {
    /// The metadata's head: program, clock, duration, mode, filters, and the
    /// per-call counters (the allocation figures first when `with_allocs`).
    pub fn meta(self, with_allocs: bool) -> TraceMeta {
        let cal = self.cal;
        TraceMeta {
            program: self.program,
            pid: self.pid,
            clock: ClockInfo {
                source: self.clock_source,
                ticks_per_ns: cal.ticks_per_ns,
                start_mono_ns: cal.origin.mono_ns,
                start_unix_ns: cal.origin.unix_ns,
            },
            duration_ns: cal.ns(self.end_ticks),
            mode: self.mode,
            filters: self.filters,
            counters: counter_names(with_allocs, self.counters.iter().map(|s| s.as_str())),
            ..TraceMeta::default()
        }
    }
}

/// Builds a [`Trace`] incrementally from already-decoded events: what importers
/// (Zephyr dumps, span bridges) and tests use.
#[derive(Default)]
pub struct TraceBuilder {
    meta: TraceMeta,
    events: Vec<Vec<Event>>,
}

impl TraceBuilder {
    pub fn new(meta: TraceMeta) -> Self {
        let n = meta.threads.len();
        TraceBuilder {
            meta,
            events: vec![Vec::new(); n],
        }
    }

    /// Adds an event; events of one thread must come in pre-order (calls) and
    /// time order (everything else). `HAS_CHILDREN` is computed here.
    pub fn push(&mut self, e: Event) {
        let t = e.thread() as usize;
        if self.events.len() <= t {
            self.events.resize(t + 1, Vec::new());
        }
        self.events[t].push(e);
    }

    pub fn meta_mut(&mut self) -> &mut TraceMeta {
        &mut self.meta
    }

    pub fn finish(self) -> Trace {
        let mut chunks = Vec::new();
        for (t, evs) in self.events.into_iter().enumerate() {
            let mut enc = ChunkEncoder::new(t as u32);
            let n = evs.len();
            for i in 0..n {
                let mut e = evs[i].clone();
                if let Event::Call(c) = &mut e {
                    let next_deeper = evs[i + 1..]
                        .iter()
                        .find_map(|n| match n {
                            Event::Call(n) => Some(n.depth > c.depth),
                            Event::Lost(l) => Some(l.depth > c.depth),
                            _ => None,
                        })
                        .unwrap_or(false);
                    c.flags = (c.flags & !flags::HAS_CHILDREN)
                        | if next_deeper { flags::HAS_CHILDREN } else { 0 };
                }
                enc.push(&e);
            }
            chunks.extend(enc.finish());
        }
        Trace::from_chunks(self.meta, format::interleave(chunks))
    }
}

/// The registered site with id `id`, as a trace describes it.
pub fn registered_site(id: u32) -> Option<SiteInfo> {
    fgtrace_core::site::site_by_id(id).map(site_info)
}

/// Reads a string value recorded in this process: the text of the
/// `&'static str` whose address and length it holds (see [`text_of_bytes`]).
///
/// # Safety
///
/// The reader may only see records this process's probes wrote (its
/// buffers, through the collector, a capture or a dump): only `Value`'s impl
/// for `&'static str` makes a string value there, so the address is one of
/// a string that lives as long as the process. Records from anywhere else (a
/// board, a file, records made by hand) may hold any address.
pub unsafe fn registered_text() -> super::recorded::TextOf {
    Box::new(|addr, len| {
        let n = (len as usize).min(fgtrace_core::values::MAX_STR);
        // SAFETY: see above: `addr` is the start of a `&'static str` of
        // `len` bytes or more, so its first `n` bytes are readable for ever.
        let bytes = unsafe { std::slice::from_raw_parts(addr as usize as *const u8, n) };
        Ok(text_of_bytes(bytes, len))
    })
}

/// The text of a string value from its first bytes (at most
/// [`MAX_STR`](fgtrace_core::values::MAX_STR)) and its whole length: cut at
/// the last whole character, with `…` when the string was longer. Bytes
/// that are not UTF-8 (an address that was not a string's) are replaced.
pub fn text_of_bytes(bytes: &[u8], len: u32) -> String {
    let bytes = &bytes[..bytes.len().min(fgtrace_core::values::MAX_STR)];
    let mut text = match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        // A character cut by the limit: keep what is whole.
        Err(e) if e.error_len().is_none() => {
            String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned()
        }
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    };
    if len as usize > bytes.len() {
        text.push('…');
    }
    text
}

fn site_info(s: &Site) -> SiteInfo {
    SiteInfo {
        name: s.name.to_string(),
        module_path: s.module_path.to_string(),
        file: s.file.to_string(),
        line: s.line,
        is_async: s.is_async,
        values: s.values.iter().map(|v| v.to_string()).collect(),
    }
}

/// `site_of` names the sites that records refer to by id (the process's
/// registry, or a site table that came with the records).
///
/// `text_of` reads the texts of string values ([`registered_text`] for
/// records of this process; `None`: they are placeholders).
pub fn build(
    base: MetaBase,
    inputs: Vec<ThreadInput>,
    site_of: impl Fn(u32) -> Option<SiteInfo>,
    text_of: Option<super::recorded::TextOf>,
) -> Trace {
    let cal = base.cal;
    let origin = cal.origin.ticks;
    let scale = TickScale::new(cal.ticks_per_ns);
    let mut sites = SiteMap::default();
    sites.text_of = text_of;
    let mut threads = Vec::new();
    let mut chunks = Vec::new();
    let with_allocs = alloc_figures::recorded(&inputs);
    let head = base.meta(with_allocs);
    let counters = head.counters.clone();
    let layout = CounterLayout::of(&counters);
    for (t, input) in inputs.into_iter().enumerate() {
        let t = t as u32;
        let mut enc = RawEncoder::default();
        let raw = enc.encode(t, &input.records, origin, &mut sites, &site_of);
        let mut recs = Vec::with_capacity(input.records.len());
        drop(input.records);
        recorded::decode(&raw, sites.sites.len(), scale, &mut recs)
            .expect("records encoded here decode");
        let n_samples = input.samples.len() as u64;
        let (c, calls) = build_thread(t, &recs, input.samples, input.overwritten, layout);
        chunks.extend(c);
        threads.push(ThreadInfo {
            tid: input.tid,
            name: input.name,
            calls,
            lost: input.dropped + input.overwritten,
            overruns: input.overruns,
            samples: n_samples,
            samples_lost: input.samples_lost,
        });
    }
    let mut meta = TraceMeta {
        sites: sites.sites,
        threads,
        strings: sites.strings,
        ..head
    };
    meta.note_unreadable_strings(sites.strings_unreadable);
    Trace::from_chunks(meta, format::interleave(chunks))
}

/// The per-call counters of a trace: the allocation figures
/// (`fgtrace_core::alloc::NAMES`) when recorded, then the session's counters.
pub fn counter_names<'a>(with_allocs: bool, session: impl Iterator<Item = &'a str>) -> Vec<String> {
    let allocs = fgtrace_core::alloc::NAMES
        .iter()
        .filter(|_| with_allocs)
        .copied();
    allocs.chain(session).map(String::from).collect()
}

/// How a trace's `Counters` values are laid out (see [`counter_names`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct CounterLayout {
    pub with_allocs: bool,
    /// Counters after the allocation figures.
    pub n_counters: usize,
}

impl CounterLayout {
    pub fn of(names: &[String]) -> CounterLayout {
        let with_allocs = names.len() >= 5 && names[..5] == fgtrace_core::alloc::NAMES;
        CounterLayout {
            with_allocs,
            n_counters: names.len() - if with_allocs { 5 } else { 0 },
        }
    }
}

/// One thread's records (exit order) as pre-order chunks, with its samples
/// merged in by time; returns the chunks and the number of calls.
pub fn build_thread(
    t: u32,
    recs: &[Rec],
    samples: Vec<RawSample>,
    overwritten: u64,
    layout: CounterLayout,
) -> (Vec<super::format::Chunk>, u64) {
    let mut b = ThreadBuilder::new(t, samples, overwritten, layout);
    b.push(recs);
    b.finish()
}

/// One thread's records, in exit order as the probes wrote them, rebuilt
/// into the pre-order call stream views read, as they come: records are
/// [`push`](Self::push)ed a batch at a time (a raw chunk's), and every
/// finished top-level call tree is written out and dropped. Memory holds
/// the records of the tree still open (a thread whose whole run is one
/// traced call keeps them all), the encoded chunks, and the futures.
///
/// A record's subtree is found in exit order: it adopts the finished
/// subtrees on the stack that are deeper and started no earlier (the time
/// check keeps orphans of a lost parent from being adopted by a later
/// sibling of that parent). A depth-0 entry is never adopted, so once one is
/// on the stack, the stack up to it is final: those roots are walked in
/// pre-order (roots left to right, children left to right), with the
/// samples put before the first call that starts after them, exactly as a
/// walk of the whole thread at its end would.
pub struct ThreadBuilder {
    t: u32,
    samples: std::iter::Peekable<std::vec::IntoIter<RawSample>>,
    overwritten: u64,
    layout: CounterLayout,
    /// Records since the last flush; `buf[k]` is record `base + k`.
    buf: Vec<Rec>,
    base: usize,
    /// Tree records (not futures, not extension records) by index, their
    /// subtree sizes, and the stack of subtrees not yet adopted (indices
    /// into `tree`): all since the last flush.
    tree: Vec<usize>,
    size: Vec<u32>,
    stack: Vec<u32>,
    /// Whole-future records with their indices, emitted at the end by start.
    futures: Vec<(usize, Rec)>,
    figures: alloc_figures::Attach,
    /// The (depth, end) of the calls emitted so far that may still be open.
    open: Vec<(u32, u64)>,
    enc: ChunkEncoder,
    calls: u64,
    /// The first record's start (the overwritten marker's time).
    first_start: Option<u64>,
    started: bool,
}

impl ThreadBuilder {
    pub fn new(t: u32, samples: Vec<RawSample>, overwritten: u64, layout: CounterLayout) -> Self {
        ThreadBuilder {
            t,
            samples: samples.into_iter().peekable(),
            overwritten,
            layout,
            buf: Vec::new(),
            base: 0,
            tree: Vec::new(),
            size: Vec::new(),
            stack: Vec::new(),
            futures: Vec::new(),
            figures: alloc_figures::Attach::default(),
            open: Vec::new(),
            enc: ChunkEncoder::new(t),
            calls: 0,
            first_start: None,
            started: false,
        }
    }

    /// Keeps the built chunks' events decoded (see
    /// [`ChunkEncoder::decoded`]): before the first push.
    pub fn keep_events(&mut self, buffers: &super::format::EventBuffers) {
        if !self.enc.keeps_events() {
            self.enc = ChunkEncoder::decoded(self.t, buffers.clone());
        }
    }

    /// The next records of the thread, in the order they were written.
    pub fn push(&mut self, recs: &[Rec]) {
        for r in recs {
            self.first_start.get_or_insert(r.start_ns);
            let i = self.base + self.buf.len();
            // Extension records belong to the call before them: a finished
            // tree is written out only when the next record that is not one
            // arrives, so its last call has its figures by then.
            if self.figures.take(i, r) {
                self.buf.push(*r);
                continue;
            }
            if self
                .stack
                .last()
                .is_some_and(|&top| self.rec(self.tree[top as usize]).depth == 0)
            {
                self.flush();
            }
            let i = self.base + self.buf.len();
            self.buf.push(*r);
            if r.kind as u64 == kind::FUTURE {
                self.futures.push((i, *r));
                continue;
            }
            let k = self.tree.len();
            self.tree.push(i);
            let mut sz = 1u32;
            while let Some(&top) = self.stack.last() {
                let tr = self.rec(self.tree[top as usize]);
                if tr.depth > r.depth && tr.start_ns >= r.start_ns {
                    sz += self.size[top as usize];
                    self.stack.pop();
                } else {
                    break;
                }
            }
            self.size.push(sz);
            self.stack.push(k as u32);
        }
    }

    fn rec(&self, i: usize) -> &Rec {
        &self.buf[i - self.base]
    }

    /// Records held (those of the call trees not yet written out).
    pub fn held(&self) -> usize {
        self.buf.len()
    }

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
            self.enc.push_event(Event::Sample(super::Sample {
                thread: self.t,
                ts_ns: s.0.min(recorded::MAX_NS),
                shadow_depth,
                cut: s.2,
                frames: s.3,
            }));
        }
    }

    /// Walks every root on the stack in pre-order and drops what it held.
    fn flush(&mut self) {
        self.start();
        let t = self.t;
        let stack = std::mem::take(&mut self.stack);
        let mut work: Vec<u32> = Vec::new();
        for &root in &stack {
            work.push(root);
            while let Some(k) = work.pop() {
                let i = self.tree[k as usize];
                let r = *self.rec(i);
                self.samples_before(r.start_ns);
                while self.open.last().is_some_and(|o| o.0 >= r.depth) {
                    self.open.pop();
                }
                if self.figures.is_marker(i) {
                    self.enc.push_event(Event::Marker(super::Marker {
                        thread: t,
                        site: r.site,
                        depth: r.depth,
                        ts_ns: r.start_ns,
                    }));
                    if let Some(e) = self.figures.values_event(t, i) {
                        self.enc.push_event(e);
                    }
                    continue;
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
                        if self.size[k as usize] > 1 {
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
                        if let Some(e) = self.figures.event(t, i, self.layout) {
                            self.enc.push_event(e);
                        }
                        if let Some(e) = self.figures.values_event(t, i) {
                            self.enc.push_event(e);
                        }
                    }
                }
                let sz = self.size[k as usize];
                if sz > 1 {
                    let lo = k + 1 - sz;
                    let mut c = k - 1;
                    loop {
                        work.push(c);
                        let csz = self.size[c as usize];
                        if c < lo + csz {
                            break;
                        }
                        c -= csz;
                    }
                }
            }
        }
        self.base += self.buf.len();
        self.buf.clear();
        self.tree.clear();
        self.size.clear();
        self.stack = stack;
        self.stack.clear();
    }

    /// Writes what is left: the last trees, the samples after them, the
    /// futures by start. Returns the thread's chunks and its calls.
    pub fn finish(mut self) -> (Vec<super::format::Chunk>, u64) {
        self.flush();
        self.samples_before(u64::MAX);
        let t = self.t;
        let mut futures = std::mem::take(&mut self.futures);
        futures.sort_by_key(|(_, r)| r.start_ns);
        // The whole futures go in chunks of their own, placed among the
        // threads by the latest end of them: a future's polls may run on
        // other threads, and a view matching polls to futures (the exports'
        // async lanes) then has every poll before its future.
        let (sealed, latest) = self.enc.seal();
        let key = futures
            .iter()
            .map(|(_, r)| r.end_ns)
            .max()
            .unwrap_or(0)
            .max(latest);
        for (i, r) in &futures {
            self.enc.push_event(Event::Future(FutureSpan {
                thread: t,
                site: r.site,
                start_ns: r.start_ns,
                dur_ns: r.end_ns - r.start_ns,
                polls: r.depth,
                cancelled: r.unwound,
            }));
            if let Some(e) = self.figures.values_event(t, *i) {
                self.enc.push_event(e);
            }
        }
        let mut chunks = self.enc.finish();
        for c in chunks.iter_mut().skip(sealed) {
            c.first_ns = key;
        }
        (chunks, self.calls)
    }
}

/// Where a trace's calls are until something reads them.
#[derive(Debug)]
pub enum CallStore {
    /// Kept by the session in memory.
    Memory(Recorded),
    /// Written to this file while recording (`Config::output`).
    File(std::path::PathBuf),
}

impl CallStore {
    /// The pre-order chunks views read.
    pub fn chunks(&self, meta: &TraceMeta) -> Result<Vec<Chunk>, TraceError> {
        match self {
            CallStore::Memory(r) => r.build(meta.sites.len(), &meta.counters),
            CallStore::File(p) => Ok(super::Trace::load(p)?.into_chunks()),
        }
    }
}

/// A session's calls as recorded, per thread (indexed like `TraceMeta::threads`).
#[derive(Debug, Default)]
pub struct Recorded {
    pub ticks_per_ns: f64,
    pub threads: Vec<RecordedThread>,
}

#[derive(Debug, Default)]
pub struct RecordedThread {
    pub raw: Vec<RawChunk>,
    /// In time order.
    pub samples: Vec<RawSample>,
    /// Flight recorder: calls overwritten before the snapshot.
    pub overwritten: u64,
}

impl Recorded {
    /// Rebuilds every thread in pre-order ([`ThreadBuilder`]: a raw chunk's
    /// records and the open call tree in memory at a time) and interleaves
    /// the threads' chunks by time as [`Built`] does. Threads are rebuilt on
    /// up to [`crate::parallel::threads`] cores at once.
    pub fn build(&self, n_sites: usize, counters: &[String]) -> Result<Vec<Chunk>, TraceError> {
        let layout = CounterLayout::of(counters);
        let scale = TickScale::new(self.ticks_per_ns);
        let indexed: Vec<(u32, &RecordedThread)> = (0u32..).zip(&self.threads).collect();
        let built: Vec<Result<Vec<Chunk>, TraceError>> =
            crate::parallel::map(&indexed, |&(t, th)| {
                let mut b = ThreadBuilder::new(t, th.samples.clone(), th.overwritten, layout);
                let mut recs = Vec::new();
                for c in &th.raw {
                    recs.clear();
                    decode(c, n_sites, scale, &mut recs)?;
                    b.push(&recs);
                }
                Ok(b.finish().0)
            });
        // The first error in thread order: what the threads one after the
        // other give.
        let mut threads = Vec::new();
        for c in built {
            threads.push(c?.into_iter());
        }
        let mut heads: Vec<Option<Chunk>> = threads.iter_mut().map(|t| t.next()).collect();
        let mut out = Vec::new();
        while let Some(t) = earliest(&heads) {
            out.extend(heads[t].take());
            heads[t] = threads[t].next();
        }
        Ok(out)
    }

    /// The pre-order chunks of every thread, interleaved by time, built as
    /// they are read ([`Built`]): each thread's raw chunks are rebuilt by a
    /// [`ThreadBuilder`] (the open call tree in memory), and only a few built
    /// chunks per thread wait to be read.
    pub fn stream(self, n_sites: usize, counters: &[String], in_file: Option<InFile>) -> Built {
        self.stream_on(n_sites, counters, in_file, crate::parallel::threads())
    }

    /// [`Recorded::stream`] on `workers` cores (1: on the reading thread).
    fn stream_on(
        self,
        n_sites: usize,
        counters: &[String],
        in_file: Option<InFile>,
        workers: usize,
    ) -> Built {
        let layout = CounterLayout::of(counters);
        let scale = TickScale::new(self.ticks_per_ns);
        let (file, mut left) = match in_file {
            Some(f) => (Some(f.file), f.chunks),
            None => (None, Vec::new()),
        };
        left.resize_with(self.threads.len(), Vec::new);
        // Cores beyond one per thread decode raw chunks ahead of the builders.
        let spare = workers > left.len();
        let streams: Vec<ThreadStream> = (0u32..)
            .zip(self.threads)
            .zip(left)
            .map(|((t, th), left)| {
                let raw = RawChunks {
                    raw: th.raw.into_iter(),
                    in_file: left.into_iter(),
                    file: file.clone(),
                    n_sites,
                    scale,
                };
                ThreadStream {
                    builder: Some(ThreadBuilder::new(t, th.samples, th.overwritten, layout)),
                    records: if spare {
                        Records::ahead(raw)
                    } else {
                        Records::Here(raw)
                    },
                    ready: std::collections::VecDeque::new(),
                    failed: None,
                    recs: Vec::new(),
                }
            })
            .collect();
        Built::new(streams, workers)
    }
}

/// Raw chunks left in a finished file, to be read again when their thread
/// is rebuilt: a view holds a few of them at a time, not the file.
pub struct InFile {
    pub file: std::sync::Arc<std::fs::File>,
    /// By thread, in the file's order.
    pub chunks: Vec<Vec<RawAt>>,
}

/// Where a raw chunk's section is in a file, and what it held when the
/// file was opened.
#[derive(Clone, Copy, Debug)]
pub struct RawAt {
    pub thread: u32,
    pub count: u32,
    /// The section's payload: its offset and length in the file, and its
    /// checksum.
    pub offset: u64,
    pub len: u32,
    pub crc: u32,
    /// Bytes of the payload before the records (the thread and the count).
    pub prefix: u32,
}

impl RawAt {
    /// Reads the chunk again, checking it is what was read at open.
    pub(crate) fn read(&self, file: &std::fs::File) -> Result<RawChunk, TraceError> {
        let mut payload = vec![0u8; self.len as usize];
        read_at(file, &mut payload, self.offset).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                // Cut short since it was opened (rewritten, truncated).
                TraceError::Corrupt {
                    offset: self.offset,
                    what: "raw chunk changed since the file was opened (the file ends \
                           before it now)"
                        .into(),
                }
            } else {
                e.into()
            }
        })?;
        if crc32fast::hash(&payload) != self.crc {
            return Err(TraceError::Corrupt {
                offset: self.offset,
                what: "raw chunk changed since the file was opened (checksum mismatch)".into(),
            });
        }
        let records = payload.split_off(self.prefix as usize);
        Ok(RawChunk {
            thread: self.thread,
            count: self.count,
            payload: records.into(),
            offset: self.offset + self.prefix as u64,
        })
    }
}

#[cfg(unix)]
fn read_at(file: &std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, at)
}

#[cfg(not(unix))]
fn read_at(file: &std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek};
    let mut f = file;
    f.seek(std::io::SeekFrom::Start(at))?;
    f.read_exact(buf)
}

/// One thread's pre-order chunks, rebuilt from its raw chunks one raw chunk
/// at a time as they are asked for.
struct ThreadStream {
    builder: Option<ThreadBuilder>,
    records: Records,
    ready: std::collections::VecDeque<Chunk>,
    /// A raw chunk that does not decode ends the thread: what was built
    /// before it is read first.
    failed: Option<TraceError>,
    recs: Vec<Rec>,
}

/// A thread's raw chunks, from memory and then from the file.
struct RawChunks {
    raw: std::vec::IntoIter<RawChunk>,
    /// Raw chunks still in the file (after those in `raw`).
    in_file: std::vec::IntoIter<RawAt>,
    file: Option<std::sync::Arc<std::fs::File>>,
    n_sites: usize,
    scale: TickScale,
}

impl RawChunks {
    /// Decodes the next raw chunk into `recs`; `None` after the last.
    fn next_into(&mut self, recs: &mut Vec<Rec>) -> Option<Result<(), TraceError>> {
        let c = match self.raw.next() {
            Some(c) => c,
            None => match self.in_file.next()?.read(self.file.as_ref()?) {
                Ok(c) => c,
                Err(e) => return Some(Err(e)),
            },
        };
        recs.clear();
        Some(decode(&c, self.n_sites, self.scale, recs))
    }
}

/// Where a thread's builder gets its records.
enum Records {
    /// Decoded here, raw chunk by raw chunk.
    Here(RawChunks),
    /// Decoded a few raw chunks ahead on a thread of their own (a spare
    /// core's), whose buffers go back to it once pushed.
    Ahead {
        decoded: std::sync::mpsc::Receiver<Result<Vec<Rec>, TraceError>>,
        back: std::sync::mpsc::Sender<Vec<Rec>>,
        decoder: Option<std::thread::JoinHandle<()>>,
    },
}

impl Records {
    /// Decodes `raw` on a thread of its own, or here if none can start.
    fn ahead(mut raw: RawChunks) -> Records {
        use std::sync::mpsc;
        let (tx, decoded) = mpsc::sync_channel(2);
        let (back, back_rx) = mpsc::channel::<Vec<Rec>>();
        let spawned = std::thread::Builder::new()
            .name("fgtrace-decode-raw".into())
            .spawn(move || loop {
                let mut recs = back_rx.try_recv().unwrap_or_default();
                let Some(r) = raw.next_into(&mut recs) else {
                    return;
                };
                let failed = r.is_err();
                if tx.send(r.map(|()| recs)).is_err() || failed {
                    return;
                }
            });
        match spawned {
            Ok(h) => Records::Ahead {
                decoded,
                back,
                decoder: Some(h),
            },
            // The chunks went with the failed spawn: the thread's calls are
            // then an error naming the reason, not lost silently.
            Err(e) => {
                let (tx, decoded) = mpsc::sync_channel(1);
                let _ = tx.send(Err(TraceError::Io(e)));
                Records::Ahead {
                    decoded,
                    back,
                    decoder: None,
                }
            }
        }
    }

    /// The next raw chunk's records into `recs`; `None` after the last.
    fn next_into(&mut self, recs: &mut Vec<Rec>) -> Option<Result<(), TraceError>> {
        match self {
            Records::Here(raw) => raw.next_into(recs),
            Records::Ahead { decoded, back, .. } => {
                let got = decoded.recv().ok()?;
                Some(got.map(|v| {
                    let _ = back.send(std::mem::replace(recs, v));
                }))
            }
        }
    }
}

impl Drop for Records {
    fn drop(&mut self) {
        if let Records::Ahead {
            decoded, decoder, ..
        } = self
        {
            // The decoder stops at its next send once the channel is gone.
            let (_, empty) = std::sync::mpsc::sync_channel(1);
            drop(std::mem::replace(decoded, empty));
            if let Some(h) = decoder.take() {
                let _ = h.join();
            }
        }
    }
}

impl Iterator for ThreadStream {
    type Item = Result<Chunk, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(c) = self.ready.pop_front() {
                return Some(Ok(c));
            }
            if let Some(e) = self.failed.take() {
                return Some(Err(e));
            }
            let b = self.builder.as_mut()?;
            match self.records.next_into(&mut self.recs) {
                Some(Ok(())) => {
                    b.push(&self.recs);
                    self.ready.extend(b.enc.take_done());
                }
                Some(Err(e)) => {
                    // What was built before it is read first.
                    if let Some(b) = self.builder.take() {
                        self.ready.extend(b.finish().0);
                    }
                    self.failed = Some(e);
                }
                None => {
                    let b = self.builder.take()?;
                    self.ready.extend(b.finish().0);
                }
            }
        }
    }
}

/// Built chunks of one thread, from where they are built.
enum Feed {
    /// Built on the reading thread when asked for.
    Here(Box<ThreadStream>),
    /// Built on a thread of its own, a few chunks ahead.
    Ahead(std::sync::mpsc::Receiver<Result<Chunk, TraceError>>),
}

/// Every thread's built chunks, interleaved by the time of their first
/// event (the lower thread index first on a tie), each thread's in its own
/// order. Built on up to [`crate::parallel::threads`] cores while the reader
/// takes them; the order does not depend on how many.
pub struct Built {
    /// Until the first chunk is asked for: the threads and the cores to
    /// build them on (so the reader can still choose decoded chunks).
    waiting: Option<(Vec<ThreadStream>, usize)>,
    feeds: Vec<Feed>,
    heads: Vec<Option<Chunk>>,
    /// Threads with nothing more to give.
    ended: Vec<bool>,
    producers: Vec<std::thread::JoinHandle<()>>,
}

/// Most threads a trace may have to be rebuilt by one producer thread each;
/// more are rebuilt on the reading thread.
const MAX_PRODUCERS: usize = 256;

impl Built {
    fn new(streams: Vec<ThreadStream>, workers: usize) -> Built {
        let n = streams.len();
        Built {
            waiting: Some((streams, workers)),
            feeds: Vec::new(),
            heads: vec![None; n],
            ended: vec![false; n],
            producers: Vec::new(),
        }
    }

    /// The chunks keep their events decoded ([`Chunk::events`]) rather
    /// than encoded, for a reader that only wants the events: neither
    /// encoded here nor decoded there. Only before the first chunk is taken.
    ///
    /// Returns where the reader gives the emptied buffers back.
    pub fn keep_events(&mut self) -> Option<super::format::EventBuffers> {
        let (streams, _) = self.waiting.as_mut()?;
        let buffers = super::format::EventBuffers::default();
        for b in streams.iter_mut().filter_map(|s| s.builder.as_mut()) {
            b.keep_events(&buffers);
        }
        Some(buffers)
    }

    /// Feeds every thread's events to `sinks[t % sinks.len()]`, each
    /// sink on a thread of its own (but one: the calling thread's), a
    /// sink's threads one after another, each in its own order: for views
    /// whose state is per thread, which then need no merge by time. Each
    /// thread is read up to its own damage, whatever the number of sinks;
    /// the error that comes back is that of the lowest-numbered thread that
    /// has one. `Err` gives everything back when building has started
    /// already.
    #[allow(clippy::type_complexity)]
    pub fn feed_threads<S: Send>(
        mut self,
        sinks: Vec<S>,
        push: impl Fn(&mut S, &Event) + Sync,
    ) -> Result<(Vec<S>, Result<(), TraceError>), Box<(Built, Vec<S>)>> {
        let Some((streams, _)) = self.waiting.take().filter(|_| !sinks.is_empty()) else {
            return Err(Box::new((self, sinks)));
        };
        let groups = sinks.len();
        let buffers = super::format::EventBuffers::default();
        let mut by_group: Vec<Vec<(usize, ThreadStream)>> =
            (0..groups).map(|_| Vec::new()).collect();
        for (t, mut st) in streams.into_iter().enumerate() {
            if let Some(b) = st.builder.as_mut() {
                b.keep_events(&buffers);
            }
            by_group[t % groups].push((t, st));
        }
        let push = &push;
        let buffers = &buffers;
        let run = move |mut sink: S, threads: Vec<(usize, ThreadStream)>| {
            let mut failed: Option<(usize, TraceError)> = None;
            for (t, st) in threads {
                for chunk in st {
                    let evs = match chunk.and_then(|c| c.into_events(Vec::new())) {
                        Ok(evs) => evs,
                        Err(e) => {
                            if failed.is_none() {
                                failed = Some((t, e));
                            }
                            break;
                        }
                    };
                    for ev in &evs {
                        push(&mut sink, ev);
                    }
                    buffers.give(evs);
                }
            }
            (sink, failed)
        };
        let results: Vec<(S, Option<(usize, TraceError)>)> = std::thread::scope(|scope| {
            let mut work = sinks.into_iter().zip(by_group);
            let here = work.next();
            let handles: Vec<_> = work
                .map(|(sink, threads)| {
                    // A thread that cannot start leaves its work to this one.
                    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some((sink, threads))));
                    let taken = slot.clone();
                    let spawned = std::thread::Builder::new()
                        .name("fgtrace-view".into())
                        .spawn_scoped(scope, move || {
                            let job = taken.lock().unwrap_or_else(|e| e.into_inner()).take();
                            job.map(|(sink, threads)| run(sink, threads))
                        });
                    (spawned.ok(), slot)
                })
                .collect();
            let mut out = Vec::with_capacity(groups);
            out.extend(here.map(|(sink, threads)| run(sink, threads)));
            for (h, slot) in handles {
                let done = match h.map(|h| h.join()) {
                    Some(Ok(done)) => done,
                    Some(Err(p)) => std::panic::resume_unwind(p),
                    None => None,
                };
                let job = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
                out.extend(done.or_else(|| job.map(|(sink, threads)| run(sink, threads))));
            }
            out
        });
        let mut first: Option<(usize, TraceError)> = None;
        let mut sinks = Vec::with_capacity(groups);
        for (sink, failed) in results {
            sinks.push(sink);
            if let Some((t, e)) = failed {
                if first.as_ref().is_none_or(|f| t < f.0) {
                    first = Some((t, e));
                }
            }
        }
        Ok((sinks, first.map_or(Ok(()), |(_, e)| Err(e))))
    }

    /// Starts building, on the first chunk asked for.
    fn start(&mut self) {
        let Some((streams, workers)) = self.waiting.take() else {
            return;
        };
        let n = streams.len();
        let mut producers = Vec::new();
        let feeds = if workers > 1 && (1..=MAX_PRODUCERS).contains(&n) {
            // At most `workers` threads build at once; a producer gives its
            // turn back before it waits for the reader to take a chunk, so
            // the reader can always get the next chunk of every thread.
            let turns =
                std::sync::Arc::new((std::sync::Mutex::new(workers), std::sync::Condvar::new()));
            streams
                .into_iter()
                .map(|st| {
                    let (tx, rx) = std::sync::mpsc::sync_channel(2);
                    let turns = turns.clone();
                    // The producer takes the stream; if it cannot start,
                    // the stream is still here to be built on this thread.
                    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(st)));
                    let taken = slot.clone();
                    let spawned = std::thread::Builder::new()
                        .name("fgtrace-build".into())
                        .spawn(move || {
                            let st = taken.lock().unwrap_or_else(|e| e.into_inner()).take();
                            let Some(mut st) = st else { return };
                            loop {
                                let (free, cv) = &*turns;
                                let mut f = free.lock().unwrap_or_else(|e| e.into_inner());
                                while *f == 0 {
                                    f = cv.wait(f).unwrap_or_else(|e| e.into_inner());
                                }
                                *f -= 1;
                                drop(f);
                                let next = st.next();
                                *free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                                cv.notify_one();
                                let Some(next) = next else { break };
                                if tx.send(next).is_err() {
                                    break;
                                }
                            }
                        });
                    match spawned {
                        Ok(h) => {
                            producers.push(h);
                            Feed::Ahead(rx)
                        }
                        // A thread that did not start never took the stream.
                        Err(_) => slot
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .take()
                            .map_or(Feed::Ahead(rx), |st| Feed::Here(Box::new(st))),
                    }
                })
                .collect()
        } else {
            streams
                .into_iter()
                .map(|s| Feed::Here(Box::new(s)))
                .collect()
        };
        self.feeds = feeds;
        self.producers = producers;
    }
}

impl Iterator for Built {
    type Item = Result<Chunk, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.start();
        for t in 0..self.feeds.len() {
            if self.heads[t].is_some() || self.ended[t] {
                continue;
            }
            let got = match &mut self.feeds[t] {
                Feed::Here(s) => s.next(),
                Feed::Ahead(rx) => rx.recv().ok(),
            };
            match got {
                Some(Ok(c)) => self.heads[t] = Some(c),
                Some(Err(e)) => {
                    self.ended[t] = true;
                    return Some(Err(e));
                }
                None => self.ended[t] = true,
            }
        }
        let t = earliest(&self.heads)?;
        self.heads[t].take().map(Ok)
    }
}

/// The thread whose next chunk comes first: the earliest first event, the
/// lower thread index on a tie.
fn earliest(heads: &[Option<Chunk>]) -> Option<usize> {
    (0..heads.len())
        .filter_map(|t| Some((heads[t].as_ref()?.first_ns, t)))
        .min()
        .map(|(_, t)| t)
}

impl Drop for Built {
    fn drop(&mut self) {
        // Producers waiting to hand a chunk over stop when their channel closes.
        self.feeds.clear();
        for p in self.producers.drain(..) {
            let _ = p.join();
        }
    }
}

/// Allocation figures (`fgtrace::alloc::Counting`) and per-call
/// counter deltas (`Config::counters`): the core writes them as extension
/// records right after the record of the call they belong to; here they
/// become an `Event::Counters` after that call (values as [`counter_names`]
/// lays them out; callees included).
mod alloc_figures {
    use super::{CounterLayout, ThreadInput};
    use crate::recorded::Rec;
    use crate::{CallCounters, Event};
    use fgtrace_core::record::kind;
    use fgtrace_core::record::{ext, AllocCounts};
    use std::collections::HashMap;

    /// Whether the records carry allocation figures: the counting allocator
    /// is installed in this process, or some record has them.
    pub fn recorded(inputs: &[ThreadInput]) -> bool {
        fgtrace_core::alloc::installed()
            || inputs.iter().any(|t| {
                t.records
                    .iter()
                    .any(|r| r.is_ext() && r.ext_sub() <= ext::REALLOCS)
            })
    }

    /// One thread's figures by the index of their call's record.
    #[derive(Default)]
    pub struct Attach {
        allocs: HashMap<usize, AllocCounts>,
        /// Counter deltas by record, by counter index.
        counters: HashMap<usize, Vec<Option<u64>>>,
        /// Values by record (a call's, a poll's or a whole future's).
        values: HashMap<usize, Vec<crate::Value>>,
        /// Records that are instant markers (their extension said so).
        markers: std::collections::HashSet<usize>,
        last_call: Option<usize>,
        last_with_values: Option<usize>,
    }

    impl Attach {
        /// Takes record `i` if it is an extension record, attaching it to the
        /// call just before (one whose call is gone, overwritten or in a
        /// dropped batch, is dropped with it).
        pub fn take(&mut self, i: usize, r: &Rec) -> bool {
            let is_ext = r.kind as u64 == kind::LOST && r.unwound;
            if !is_ext {
                self.last_call = match r.kind as u64 {
                    kind::CALL | kind::POLL => Some(i),
                    _ => None,
                };
                self.last_with_values = match r.kind as u64 {
                    kind::CALL | kind::POLL | kind::FUTURE => Some(i),
                    _ => None,
                };
                return false;
            }
            if r.site as u64 == ext::MARKER {
                if let Some(c) = self.last_with_values {
                    self.markers.insert(c);
                }
                // A marker has no figures of its own to take.
                self.last_call = None;
                return true;
            }
            if r.site as u64 == ext::VALUE {
                if let Some(c) = self.last_with_values {
                    let slot = r.b & 7;
                    let tag = (r.b >> 3) & 0xff;
                    if slot < fgtrace_core::values::MAX_VALUES as u64 {
                        self.values.entry(c).or_default().push(crate::Value {
                            slot: slot as u8,
                            tag: tag as u8,
                            bits: r.count,
                        });
                    }
                }
                return true;
            }
            let Some(c) = self.last_call else {
                return true;
            };
            let (x, y) = (r.count, r.b);
            match r.site as u64 {
                ext::ALLOCS => {
                    let a = self.allocs.entry(c).or_default();
                    (a.allocs, a.alloc_bytes) = (x, y);
                }
                ext::FREES => {
                    let a = self.allocs.entry(c).or_default();
                    (a.frees, a.freed_bytes) = (x, y);
                }
                ext::REALLOCS => self.allocs.entry(c).or_default().reallocs = x,
                ext::COUNTER if y < 64 => {
                    let v = self.counters.entry(c).or_default();
                    if v.len() <= y as usize {
                        v.resize(y as usize + 1, None);
                    }
                    v[y as usize] = Some(x);
                }
                _ => {}
            }
            true
        }

        /// The record at `i` is an instant marker (asked once, when it is
        /// written out).
        pub fn is_marker(&mut self, i: usize) -> bool {
            // Most traces have no markers: no hashing per record for them.
            !self.markers.is_empty() && self.markers.remove(&i)
        }

        /// The values event of the call (or future) recorded at `i`, if it has values.
        /// Called once per call, when it is written out: its values go.
        pub fn values_event(&mut self, thread: u32, i: usize) -> Option<Event> {
            // Most traces have no values: no hashing per call for them.
            if self.values.is_empty() {
                return None;
            }
            let values = self.values.remove(&i)?;
            Some(Event::Values(crate::CallValues { thread, values }))
        }

        /// The counters event of the call recorded at `i`: `None` when the
        /// trace has no allocation figures and the call no counter delta
        /// (a call open before its thread joined a counted session).
        ///
        /// Called once per call, when it is written out: its figures go.
        pub fn event(&mut self, thread: u32, i: usize, layout: CounterLayout) -> Option<Event> {
            if !layout.with_allocs && self.counters.is_empty() {
                return None;
            }
            let ctr = self.counters.remove(&i);
            let ctr = ctr.as_ref();
            if !layout.with_allocs && (ctr.is_none() || layout.n_counters == 0) {
                return None;
            }
            let mut values = Vec::with_capacity(5 + layout.n_counters);
            if layout.with_allocs {
                let a = self.allocs.remove(&i).unwrap_or_default();
                values.extend([a.allocs, a.alloc_bytes, a.frees, a.freed_bytes, a.reallocs]);
            }
            for k in 0..layout.n_counters {
                values.push(ctr.and_then(|v| v.get(k).copied().flatten()).unwrap_or(0));
            }
            Some(Event::Counters(CallCounters { thread, values }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ClockPoint;
    use crate::recorded::full_ticks;
    use fgtrace_core::record::START_MASK;

    #[test]
    fn full_ticks_restores_high_bits_on_both_sides_of_the_origin() {
        let origin = (7u64 << 54) + 1000;
        assert_eq!(full_ticks((origin + 5) & START_MASK, origin), origin + 5);
        assert_eq!(full_ticks((origin - 5) & START_MASK, origin), origin - 5);
        let origin = (3u64 << 54) + 2;
        assert_eq!(full_ticks((origin - 10) & START_MASK, origin), origin - 10);
    }

    fn cal() -> Calibration {
        Calibration {
            origin: ClockPoint {
                ticks: 1_000_000,
                mono_ns: 0,
                unix_ns: 0,
            },
            ticks_per_ns: 1.0,
        }
    }

    /// One event as the rebuilding tests compare them: a call as its site
    /// and start indented by depth (`{` when it has children), a marker,
    /// a call's first value, a loss.
    fn line(e: &Event) -> String {
        match e {
            Event::Call(c) => format!(
                "{}{}@{}{}",
                "  ".repeat(c.depth as usize),
                c.site,
                c.start_ns,
                if c.has_children() { "{" } else { "" }
            ),
            Event::Marker(m) => format!(
                "{}mark{}@{}",
                "  ".repeat(m.depth as usize),
                m.site,
                m.ts_ns
            ),
            Event::Values(v) => format!("values {}", v.values[0].bits),
            Event::Lost(l) => format!("{}lost{}", "  ".repeat(l.depth as usize), l.count),
            _ => "?".into(),
        }
    }

    /// A stream session ending at tick 1,000,200.
    fn stream_base() -> MetaBase {
        MetaBase {
            program: "test".into(),
            pid: 1,
            clock_source: "tsc".into(),
            cal: cal(),
            end_ticks: 1_000_200,
            mode: RecordMode::Stream,
            filters: String::new(),
            counters: Vec::new(),
        }
    }

    #[test]
    fn markers_nest_where_they_were_recorded_and_are_no_calls() {
        use fgtrace_core::record::ext;
        // main(0..100) { mark@5 (v=9) a(10..40) { mark@20 } mark@50 }
        let records = vec![
            rec(5, 1, 0, 7),
            RawCall::ext(ext::MARKER, 0, 0),
            RawCall::ext(
                ext::VALUE,
                9,
                (fgtrace_core::values::tag::UNSIGNED as u64) << 3,
            ),
            rec(20, 2, 0, 8),
            RawCall::ext(ext::MARKER, 0, 0),
            rec(10, 1, 30, 1),
            rec(50, 1, 0, 7),
            RawCall::ext(ext::MARKER, 0, 0),
            rec(0, 0, 100, 0),
        ];
        let input = ThreadInput {
            records,
            ..ThreadInput::empty(1, "t".into())
        };
        let t = build(stream_base(), vec![input], |_| None, None);
        let got: Vec<String> = t.events().map(|e| line(&e)).collect();
        // Sites in order of first record: mark7=0, mark8=1, a=2, main=3.
        assert_eq!(
            got,
            vec![
                "3@0{",
                "  mark0@5",
                "values 9",
                "  2@10{",
                "    mark1@20",
                "  mark0@50",
            ]
        );
        assert_eq!(t.meta().threads[0].calls, 2);
    }

    fn rec(start: u64, depth: u32, dur: u64, site: u32) -> RawCall {
        RawCall::pack(1_000_000 + start, depth, dur, site, false, kind::CALL)
    }

    /// A thread of many top-level calls, pushed a record at a time: only the
    /// open tree is held, and the output is that of the whole thread pushed
    /// at once.
    #[test]
    fn finished_top_level_trees_are_written_out_as_they_close() {
        let scale = TickScale::new(1.0);
        let mut raw = Vec::new();
        // 1000 times: top(0) { mid(1) { leaf(2), leaf(2) } }, in exit order.
        for k in 0..1000u64 {
            let t = k * 100;
            raw.push(rec(t + 2, 2, 3, 2));
            raw.push(rec(t + 6, 2, 3, 2));
            raw.push(rec(t + 1, 1, 10, 1));
            raw.push(rec(t, 0, 20, 0));
        }
        let mut enc = RawEncoder::default();
        let mut sites = SiteMap::default();
        let chunk = enc.encode(0, &raw, 1_000_000, &mut sites, &|_| None);
        let mut recs = Vec::new();
        decode(&chunk, sites.sites.len(), scale, &mut recs).expect("decodes");
        let layout = CounterLayout::of(&[]);
        let mut one = ThreadBuilder::new(0, Vec::new(), 0, layout);
        let mut most = 0;
        for r in &recs {
            one.push(std::slice::from_ref(r));
            most = most.max(one.held());
        }
        assert!(most <= 5, "held up to {most} records");
        let (a, calls) = one.finish();
        let (b, _) = build_thread(0, &recs, Vec::new(), 0, layout);
        assert_eq!(calls, 4000);
        let payloads = |c: &[Chunk]| c.iter().map(|c| c.payload.clone()).collect::<Vec<_>>();
        assert_eq!(payloads(&a), payloads(&b));
    }

    /// Three threads of many raw chunks: built as they are read, on one core
    /// or several, the chunks are those built all at once, in the same order:
    /// each thread's in its own order, the threads interleaved by time.
    #[test]
    fn chunks_built_as_they_are_read_are_those_built_at_once_on_any_number_of_cores() {
        let recorded = || {
            let mut sites = SiteMap::default();
            let threads = (0..3u64)
                .map(|th| {
                    let mut enc = RawEncoder::default();
                    let raw = (0..12u64)
                        .map(|c| {
                            let mut recs = Vec::new();
                            for k in 0..1000u64 {
                                // Threads start apart and interleave.
                                let t = th * 7_000 + (c * 1000 + k) * 40;
                                recs.push(rec(t + 2, 1, 3 + th, 1 + (k % 2) as u32));
                                recs.push(rec(t, 0, 20, 0));
                            }
                            enc.encode(th as u32, &recs, 1_000_000, &mut sites, &|_| None)
                        })
                        .collect();
                    RecordedThread {
                        raw,
                        samples: Vec::new(),
                        overwritten: 0,
                    }
                })
                .collect();
            (
                Recorded {
                    ticks_per_ns: 1.0,
                    threads,
                },
                sites.sites.len(),
            )
        };
        let (r, n_sites) = recorded();
        let at_once = r.build(n_sites, &[]).expect("builds");
        assert!(at_once.len() >= 9, "{} chunks", at_once.len());
        let firsts: Vec<u64> = at_once.iter().map(|c| c.first_ns).collect();
        assert!(firsts.windows(2).all(|w| w[0] <= w[1]), "{firsts:?}");
        assert!(
            at_once.windows(2).any(|w| w[0].thread != w[1].thread),
            "threads interleave"
        );
        for workers in [1, 2, 4] {
            let (r, _) = recorded();
            let read: Vec<Chunk> = r
                .stream_on(n_sites, &[], None, workers)
                .collect::<Result<_, _>>()
                .expect("builds");
            assert!(read == at_once, "{workers} workers");
            // Chunks that keep their events decoded are cut at the same
            // events, with the same first times, and hold what the encoded
            // ones decode to.
            let (r, _) = recorded();
            let mut built = r.stream_on(n_sites, &[], None, workers);
            built.keep_events();
            let kept: Vec<Chunk> = built.collect::<Result<_, _>>().expect("builds");
            assert_eq!(kept.len(), at_once.len());
            for (k, e) in kept.iter().zip(&at_once) {
                assert!(k.is_decoded() && k.payload.is_empty());
                assert_eq!(
                    (k.thread, k.count, k.first_ns),
                    (e.thread, e.count, e.first_ns)
                );
                assert!(
                    k.events == e.decode().expect("decodes"),
                    "{workers} workers"
                );
            }
        }
    }

    /// A future recorded on one thread whose polls ran on another: the
    /// whole future comes after its polls in the merged stream, however early
    /// it began, so a view matching polls to futures has them all.
    #[test]
    fn a_whole_future_comes_after_its_polls_on_every_thread() {
        let mut sites = SiteMap::default();
        let mut enc = RawEncoder::default();
        let poll = |start: u64| RawCall::pack(1_000_000 + start, 0, 50, 0, false, kind::POLL);
        // Thread 0: a poll at 100, the future (3 polls) from 90 to 1000.
        let t0 = vec![
            poll(100),
            RawCall::pack(1_000_000 + 90, 3, 910, 0, false, kind::FUTURE),
        ];
        // Thread 1: its other polls, at 500 and 900.
        let t1 = vec![poll(500), poll(900)];
        let raw0 = enc.encode(0, &t0, 1_000_000, &mut sites, &|_| None);
        let mut enc1 = RawEncoder::default();
        let raw1 = enc1.encode(1, &t1, 1_000_000, &mut sites, &|_| None);
        let thread = |raw| RecordedThread {
            raw: vec![raw],
            samples: Vec::new(),
            overwritten: 0,
        };
        let r = Recorded {
            ticks_per_ns: 1.0,
            threads: vec![thread(raw0), thread(raw1)],
        };
        let n_sites = sites.sites.len();
        let events = |chunks: Vec<Chunk>| -> Vec<Event> {
            chunks.iter().flat_map(|c| c.decode().unwrap()).collect()
        };
        let at_once = events(r.build(n_sites, &[]).unwrap());
        let future_at = at_once
            .iter()
            .position(|e| matches!(e, Event::Future(_)))
            .expect("the future is there");
        let polls_before = at_once[..future_at]
            .iter()
            .filter(|e| matches!(e, Event::Call(c) if c.flags & flags::POLL != 0))
            .count();
        assert_eq!(polls_before, 3, "{at_once:?}");
        let streamed: Vec<Chunk> = r
            .stream_on(n_sites, &[], None, 2)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(events(streamed), at_once);
    }

    /// Exit order in, pre-order out, with a lost parent whose children must
    /// not be adopted by its later sibling.
    #[test]
    fn exit_order_becomes_pre_order() {
        // main(0..100) { a(10..40) { b(20..30) } lost(50) c(60..90) { d(70..80) } }
        // where the parent of x(52..54) was lost.
        let records = vec![
            rec(20, 2, 10, 2),                                         // b
            rec(10, 1, 30, 1),                                         // a
            rec(52, 3, 2, 5),                                          // x (orphan, parent lost)
            RawCall::pack(1_000_000 + 55, 1, 7, 0, false, kind::LOST), // lost marker
            rec(70, 2, 10, 4),                                         // d
            rec(60, 1, 30, 3),                                         // c
            rec(0, 0, 100, 0),                                         // main
        ];
        let input = ThreadInput {
            records,
            dropped: 7,
            ..ThreadInput::empty(1, "t".into())
        };
        let t = build(stream_base(), vec![input], |_| None, None);
        let got: Vec<String> = t.events().map(|e| line(&e)).collect();
        // Site indices are assigned in order of first record (exit order):
        // b=0, a=1, x=2, d=3, c=4, main=5.
        assert_eq!(
            got,
            vec![
                "5@0{",
                "  1@10{",
                "    0@20",
                "      2@52",
                "  lost7",
                "  4@60{",
                "    3@70"
            ]
        );
        assert_eq!(t.meta().threads[0].calls, 6);
        assert_eq!(t.meta().threads[0].lost, 7);
    }

    /// Samples without a shadow depth (kernel call chains) get the
    /// number of traced calls open at their time; recorded depths stand.
    #[test]
    fn samples_from_a_ring_get_their_shadow_depth_from_the_trace() {
        let from_trace = crate::SHADOW_DEPTH_FROM_TRACE;
        // main(0..100) { a(10..40) { b(20..30) } c(60..90) }, then nothing.
        let records = vec![
            rec(20, 2, 10, 2),
            rec(10, 1, 30, 1),
            rec(60, 1, 30, 3),
            rec(0, 0, 100, 0),
        ];
        let samples = vec![
            (5, from_trace, None, vec![1]),
            (25, from_trace, None, vec![2]),
            (35, from_trace, None, vec![3]),
            (45, from_trace, None, vec![4]),
            (70, 7, Some(0), vec![5]),
            (95, from_trace, None, vec![6]),
            (150, from_trace, None, vec![7]),
        ];
        let input = ThreadInput {
            records,
            samples,
            ..ThreadInput::empty(1, "t".into())
        };
        let t = build(stream_base(), vec![input], |_| None, None);
        let got: Vec<(u64, u32)> = t.samples().map(|s| (s.ts_ns, s.shadow_depth)).collect();
        assert_eq!(
            got,
            vec![
                (5, 1),
                (25, 3),
                (35, 2),
                (45, 1),
                (70, 7),
                (95, 1),
                (150, 0)
            ]
        );
    }
}
