//! Turns the raw records a session gathered into a [`Trace`]: restores full
//! timestamps, converts ticks to nanoseconds, and reorders each thread's calls
//! from exit order (how probes write them) to pre-order (how views read them).

use super::encoding::{self, Chunk, ChunkEncoder, TraceError};
use super::recorded::{self, decode, RawChunk, RawEncoder, RawSample, Rec, SiteMap, TickScale};
use super::{flags, ClockInfo, Event, RecordMode, SiteInfo, ThreadInfo, Trace, TraceMeta};
use crate::clock::Calibration;
use fgtrace_core::record::RawCall;
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
        Trace::from_chunks(self.meta, encoding::interleave(chunks))
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

/// What the trace keeps of a site of this process.
pub fn site_info(s: &Site) -> SiteInfo {
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
    Trace::from_chunks(meta, encoding::interleave(chunks))
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

mod rebuild;
use rebuild::RawSeq;
pub use rebuild::{build_thread, ThreadBuilder};

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
    /// [`ThreadBuilder`] (a budget of records per level, the others read
    /// again from the raw chunks when written out), and only a few built
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
        let (files, mut left) = match in_file {
            Some(f) => (f.files, f.chunks),
            None => (Vec::new(), Vec::new()),
        };
        left.resize_with(self.threads.len(), Vec::new);
        // Cores beyond one per thread decode raw chunks ahead of the builders.
        let spare = workers > left.len();
        let streams: Vec<ThreadStream> = (0u32..)
            .zip(self.threads)
            .zip(left)
            .map(|((t, th), left)| {
                let seq =
                    std::sync::Arc::new(RawSeq::new(th.raw, left, files.clone(), n_sites, scale));
                let raw = RawChunks {
                    seq: seq.clone(),
                    next: 0,
                };
                let builder = ThreadBuilder::new(t, th.samples, th.overwritten, layout)
                    .rereading(seq, held_budget(1));
                ThreadStream {
                    builder: Some(builder),
                    records: if spare {
                        Records::ahead(raw)
                    } else {
                        Records::Here(raw)
                    },
                    ready: std::collections::VecDeque::new(),
                    failed: None,
                    recs: Vec::new(),
                    ended: false,
                }
            })
            .collect();
        Built::new(streams, workers)
    }
}

/// Raw chunks left in a finished file, to be read again when their thread
/// is rebuilt: a view holds a few of them at a time, not the file.
pub struct InFile {
    /// The file, after the segment before it where a ring's file is read
    /// with its `FILE.prev` ([`RawAt::file`] indexes them).
    pub files: Vec<std::sync::Arc<std::fs::File>>,
    /// By thread, in the files' order.
    pub chunks: Vec<Vec<RawAt>>,
}

impl InFile {
    /// Reads `at` again from its file.
    pub fn read(&self, at: &RawAt) -> Result<RawChunk, TraceError> {
        match self.files.get(at.file as usize) {
            Some(f) => at.read(f),
            None => Err(TraceError::Io(std::io::Error::other(
                "a raw chunk left in a file that is not open",
            ))),
        }
    }
}

/// Where a raw chunk's section is in a file, and what it held when the
/// file was opened.
#[derive(Clone, Copy, Debug)]
pub struct RawAt {
    /// Which of [`InFile::files`] holds it.
    pub file: u32,
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
        // The prefix and the records are read apart (the records straight
        // into the buffer they are decoded from: no copy), and checked
        // together.
        let prefix = (self.prefix as usize).min(self.len as usize);
        let mut head = vec![0u8; prefix];
        let mut records = vec![0u8; self.len as usize - prefix];
        let cut_short = |e: std::io::Error| -> TraceError {
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
        };
        crate::pread::read_exact_at(file, &mut head, self.offset).map_err(cut_short)?;
        crate::pread::read_exact_at(file, &mut records, self.offset + prefix as u64)
            .map_err(cut_short)?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&head);
        crc.update(&records);
        if crc.finalize() != self.crc {
            return Err(TraceError::Corrupt {
                offset: self.offset,
                what: "raw chunk changed since the file was opened (checksum mismatch)".into(),
            });
        }
        Ok(RawChunk {
            thread: self.thread,
            count: self.count,
            payload: records.into(),
            offset: self.offset + self.prefix as u64,
        })
    }
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
    /// Every record was pushed.
    ended: bool,
}

/// Records a thread's builder may hold at each level before it lets
/// subtrees go, when `alive` builders hold theirs at once: a total of
/// [`HELD_TOTAL`], at least [`HELD_MIN`] each.
fn held_budget(alive: usize) -> usize {
    (HELD_TOTAL / alive.max(1)).max(HELD_MIN)
}

/// Records (about 70 bytes each held) all builders that run at once may
/// hold, one level each.
const HELD_TOTAL: usize = 1 << 19;
const HELD_MIN: usize = 1 << 10;

/// Most threads merged by time whose rebuilt chunks keep their events
/// decoded ([`Built::keep_events`]).
const KEEP_DECODED_MAX: usize = 8;

/// A thread's raw chunks, from memory and then from the file, in order.
struct RawChunks {
    seq: std::sync::Arc<RawSeq>,
    next: usize,
}

impl RawChunks {
    /// Decodes the next raw chunk into `recs`; `None` after the last.
    fn next_into(&mut self, recs: &mut Vec<Rec>) -> Option<Result<(), TraceError>> {
        if self.next >= self.seq.len() {
            return None;
        }
        self.next += 1;
        Some(self.seq.decode(self.next - 1, recs))
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
            if let Some(e) = b.take_error() {
                // What was written before it is read first.
                self.ready.extend(b.take_done());
                self.builder = None;
                self.failed = Some(e);
                continue;
            }
            if b.has_work() {
                b.fill();
                self.ready.extend(b.take_done());
                if b.side_by_side() {
                    // Waiting for its turn among many, the thread keeps no
                    // decoded records it can decode again.
                    b.trim();
                    self.recs = Vec::new();
                }
                continue;
            }
            if self.ended {
                let b = self.builder.take()?;
                self.ready.extend(b.finish().0);
                continue;
            }
            match self.records.next_into(&mut self.recs) {
                Some(Ok(())) => {
                    b.push(&self.recs);
                    if b.side_by_side() {
                        self.recs = Vec::new();
                    }
                }
                Some(Err(e)) => {
                    // What was built before it is read first.
                    if let Some(b) = self.builder.take() {
                        self.ready.extend(b.finish().0);
                    }
                    self.failed = Some(e);
                }
                None => {
                    b.end_input();
                    self.ended = true;
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
    pub fn keep_events(&mut self) -> Option<super::encoding::EventBuffers> {
        let (streams, _) = self.waiting.as_mut()?;
        // A kept chunk takes ten times the memory of an encoded one: with
        // many threads side by side, each holding a few, they stay encoded.
        if streams.len() > KEEP_DECODED_MAX {
            return None;
        }
        let buffers = super::encoding::EventBuffers::default();
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
        let buffers = super::encoding::EventBuffers::default();
        let mut by_group: Vec<Vec<(usize, ThreadStream)>> =
            (0..groups).map(|_| Vec::new()).collect();
        for (t, mut st) in streams.into_iter().enumerate() {
            if let Some(b) = st.builder.as_mut() {
                b.keep_events(&buffers);
                // A group rebuilds one thread at a time.
                b.set_budget(held_budget(groups));
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
        let jobs: Vec<_> = sinks.into_iter().zip(by_group).collect();
        let results: Vec<(S, Option<(usize, TraceError)>)> =
            crate::parallel::each(jobs, |(sink, threads)| run(sink, threads));
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
        let Some((mut streams, workers)) = self.waiting.take() else {
            return;
        };
        let n = streams.len();
        // Every thread is rebuilt side by side, each to its next chunk.
        for b in streams.iter_mut().filter_map(|s| s.builder.as_mut()) {
            b.set_budget(held_budget(n));
        }
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

mod alloc_figures;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ClockPoint;
    use crate::recorded::full_ticks;
    use fgtrace_core::record::kind;
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
        let mut a = Vec::new();
        for r in &recs {
            one.push(std::slice::from_ref(r));
            most = most.max(one.held());
            while one.has_work() {
                one.fill();
                a.extend(one.take_done());
            }
        }
        assert!(most <= 5, "held up to {most} records");
        let (rest, calls) = one.finish();
        a.extend(rest);
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
