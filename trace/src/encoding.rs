//! The fgtrace file format (version 1): streaming write and read, with errors
//! that name the byte offset of the damage.
//!
//! ```text
//! "FGTRACE\0"  u32le version  u32le meta_len  meta (JSON)  u32le crc32(meta)
//! chunk*       kind=1 u8, thread varint, count varint, first_ns varint,
//!              payload_len varint, u32le crc32(payload), payload
//! end          kind=0xFF u8, chunk_count varint, "END!"
//! ```
//!
//! A chunk holds up to [`CHUNK_EVENTS`] events of one thread. Each event starts
//! with a header varint `zigzag(depth - prev_depth) << 5 | flags << 2 | kind`,
//! then, all varints, times delta-coded against the previous event of the chunk:
//!
//! | kind | fields |
//! |---|---|
//! | 0 call | site, zigzag(start - prev_start), dur |
//! | 1 future | site, zigzag(start - prev_start), dur, polls (flag bit 0 = cancelled) |
//! | 2 lost | zigzag(at - prev_start), count, loss kind |
//! | 3 extension | subkind, then: |
//! | 3.0 sample | zigzag(ts - prev_start), shadow depth, cut + 1 (0 = none), n, frame0, zigzag(frame_i - frame_{i-1})... |
//! | 3.1 counters | n, value... (entry-to-exit deltas of the previous call) |
//! | 3.2 values | n, then per value: slot, tag, bits (the values the previous call, future or marker recorded) |
//! | 3.3 marker | zigzag(ts - prev_start), site, depth (an instant marker; depth state unchanged) |
//! | 3.4 values with strings | as 3.2; a string value's bits index `TraceMeta::strings` (so a reader older than string values stops at it instead of showing an index) |
//!
//! New kinds are added as extension subkinds without a version change: a
//! file with them reads whole here, and a reader older than the subkind
//! stops at the first chunk holding one (a damaged-file error naming
//! "unknown event kind 3.N" at its offset), keeping every chunk before it.
//!
//! A typical call takes 4 to 6 bytes. Chunks are independent (deltas restart),
//! so a reader can stop at a damaged chunk and keep everything before it.

use super::{
    Call, CallCounters, CallValues, Event, FutureId, FutureSpan, FutureTimes, LossKind, Lost,
    Marker, Sample, Value, Waits, Wake,
};
use std::fmt;
use std::io;

/// The first 8 bytes of every trace file.
pub const MAGIC: &[u8; 8] = b"FGTRACE\0";
/// A whole trace written at once: calls in pre-order, in chunks.
pub const VERSION: u32 = 1;
/// A file written while recording: calls in exit order (see `recorded`).
pub const VERSION_RECORDED: u32 = 2;
/// Events per chunk: bounds the memory a streaming reader needs.
pub const CHUNK_EVENTS: usize = 8192;
/// The largest section or chunk payload a reader accepts, in bytes (64 MiB),
/// and the most records one raw chunk may claim: a length above it is
/// corruption, not a reason to allocate.
pub const MAX_PAYLOAD: u64 = 64 << 20;

const EV_CALL: u64 = 0;
const EV_FUTURE: u64 = 1;
const EV_LOST: u64 = 2;
const EV_EXT: u64 = 3;
const EXT_SAMPLE: u64 = 0;
const EXT_COUNTERS: u64 = 1;
const EXT_VALUES: u64 = 2;
const EXT_MARKER: u64 = 3;
const EXT_STR_VALUES: u64 = 4;
const EXT_FUTURE_ID: u64 = 5;
const EXT_WAKE: u64 = 6;
const EXT_FUTURE_TIMES: u64 = 7;

/// What went wrong reading a trace file.
#[derive(Debug)]
pub enum TraceError {
    /// The file could not be opened or read.
    Io(io::Error),
    /// The file does not start with the fgtrace magic.
    NotATrace,
    /// Written by a newer fgtrace.
    UnsupportedVersion(u32),
    /// The file ends in the middle of something.
    Truncated {
        /// Byte offset in the file where the missing part starts.
        offset: u64,
        /// What was being read: `header`, `chunk payload` ...
        what: &'static str,
    },
    /// The bytes at `offset` are not what the format says.
    Corrupt {
        /// Byte offset in the file of the bad bytes.
        offset: u64,
        /// What is wrong with them.
        what: String,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Io(e) => write!(f, "{e}"),
            TraceError::NotATrace => write!(f, "not an fgtrace trace file (bad magic at byte 0)"),
            TraceError::UnsupportedVersion(v) => {
                write!(f, "trace file format version {v} is not supported (this fgtrace reads version {VERSION})")
            }
            TraceError::Truncated { offset, what } => {
                write!(f, "trace file is truncated at byte {offset} (in {what})")
            }
            TraceError::Corrupt { offset, what } => {
                write!(f, "trace file is corrupt at byte {offset}: {what}")
            }
        }
    }
}

impl std::error::Error for TraceError {}

impl From<io::Error> for TraceError {
    fn from(e: io::Error) -> Self {
        TraceError::Io(e)
    }
}

/// A run of encoded events of one thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    /// The thread (index into `TraceMeta::threads`) whose events these are.
    pub thread: u32,
    /// Number of events encoded in `payload`.
    pub count: u32,
    /// Time of the first event, used to interleave threads.
    pub first_ns: u64,
    /// The encoded events (varints; times as zigzag deltas from the previous
    /// event's, restarting at 0 in each chunk).
    pub payload: Vec<u8>,
    /// Byte offset of the payload in the file it came from (0 if built in memory).
    pub offset: u64,
    /// The events themselves, when the chunk was built in this process only
    /// to be read (a recorded file rebuilt for a view: see
    /// [`ChunkEncoder::decoded`]); its payload is then empty. Never written.
    pub events: Vec<Event>,
}

impl Chunk {
    /// Decodes the chunk's events.
    pub fn decode(&self) -> Result<Vec<Event>, TraceError> {
        let mut out = Vec::new();
        self.decode_into(&mut out).map(|()| out)
    }

    /// The chunk holds its events already decoded (and no payload).
    pub fn is_decoded(&self) -> bool {
        !self.events.is_empty()
    }

    /// The chunk's events: those it holds decoded, as they are, or its
    /// payload decoded into `buf`'s storage.
    pub fn into_events(self, mut buf: Vec<Event>) -> Result<Vec<Event>, TraceError> {
        if self.is_decoded() {
            return Ok(self.events);
        }
        self.decode_into(&mut buf).map(|()| buf)
    }

    /// Decodes the chunk's events into `out` (emptied first), so a reader
    /// can reuse one buffer for chunk after chunk.
    pub fn decode_into(&self, out: &mut Vec<Event>) -> Result<(), TraceError> {
        out.clear();
        if self.is_decoded() {
            out.extend_from_slice(&self.events);
            return Ok(());
        }
        out.reserve(self.count as usize);
        let mut d = Decoder {
            buf: &self.payload,
            pos: 0,
            base: self.offset,
        };
        let mut depth: i64 = 0;
        let mut start: u64 = 0;
        for _ in 0..self.count {
            let h = d.varint()?;
            let kind = h & 3;
            let fl = ((h >> 2) & 7) as u8;
            let dd = unzigzag(h >> 5);
            match kind {
                EV_CALL | EV_FUTURE => {
                    depth = d.add_depth(depth, dd)?;
                    let site = d.u32()?;
                    start = d.add_time(start)?;
                    let dur = d.duration(start)?;
                    if kind == EV_CALL {
                        out.push(Event::Call(Call {
                            thread: self.thread,
                            site,
                            depth: d.check_depth(depth)?,
                            start_ns: start,
                            dur_ns: dur,
                            flags: fl,
                        }));
                    } else {
                        let polls = d.u32()?;
                        out.push(Event::Future(FutureSpan {
                            thread: self.thread,
                            site,
                            start_ns: start,
                            dur_ns: dur,
                            polls,
                            cancelled: fl & 1 != 0,
                        }));
                    }
                }
                EV_LOST => {
                    depth = d.add_depth(depth, dd)?;
                    start = d.add_time(start)?;
                    let count = d.varint()?;
                    let kind = match d.varint()? {
                        0 => LossKind::Dropped,
                        _ => LossKind::Overwritten,
                    };
                    out.push(Event::Lost(Lost {
                        thread: self.thread,
                        depth: d.check_depth(depth)?,
                        at_ns: start,
                        count,
                        kind,
                    }));
                }
                _ => match d.varint()? {
                    EXT_SAMPLE => {
                        start = d.add_time(start)?;
                        let shadow_depth = d.u32()?;
                        let cut = d.u32()?.checked_sub(1);
                        let n = d.varint()?;
                        if n > 4096 {
                            return Err(d.corrupt(format!("sample with {n} frames")));
                        }
                        let mut frames = Vec::with_capacity(n as usize);
                        let mut prev: i64 = 0;
                        for i in 0..n {
                            let v = d.varint()?;
                            let a = if i == 0 {
                                v as i64
                            } else {
                                prev.wrapping_add(unzigzag(v))
                            };
                            frames.push(a as u64);
                            prev = a;
                        }
                        out.push(Event::Sample(Sample {
                            thread: self.thread,
                            ts_ns: start,
                            shadow_depth,
                            cut,
                            frames,
                        }));
                    }
                    EXT_COUNTERS => {
                        let n = d.varint()?;
                        if n > 64 {
                            return Err(d.corrupt(format!("{n} counters on one call")));
                        }
                        let values = (0..n).map(|_| d.varint()).collect::<Result<Vec<_>, _>>()?;
                        out.push(Event::Counters(CallCounters {
                            thread: self.thread,
                            values,
                        }));
                    }
                    EXT_VALUES | EXT_STR_VALUES => {
                        let n = d.varint()?;
                        if n > fgtrace_core::values::MAX_VALUES as u64 {
                            return Err(d.corrupt(format!("{n} values on one call")));
                        }
                        let mut values = Vec::with_capacity(n as usize);
                        for _ in 0..n {
                            let slot = d.varint()?;
                            let tag = d.varint()?;
                            if slot >= fgtrace_core::values::MAX_VALUES as u64 || tag > 0xff {
                                return Err(d.corrupt(format!("value slot {slot} tag {tag}")));
                            }
                            let bits = d.varint()?;
                            values.push(Value {
                                slot: slot as u8,
                                tag: tag as u8,
                                bits,
                            });
                        }
                        out.push(Event::Values(CallValues {
                            thread: self.thread,
                            values,
                        }));
                    }
                    EXT_MARKER => {
                        start = d.add_time(start)?;
                        let site = d.u32()?;
                        let depth = d.u32()?;
                        if depth > fgtrace_core::record::MAX_DEPTH {
                            return Err(d.corrupt(format!("marker at depth {depth}")));
                        }
                        out.push(Event::Marker(Marker {
                            thread: self.thread,
                            site,
                            depth,
                            ts_ns: start,
                        }));
                    }
                    EXT_FUTURE_ID => {
                        let id = d.varint()?;
                        out.push(Event::FutureId(FutureId {
                            thread: self.thread,
                            id,
                        }));
                    }
                    EXT_FUTURE_TIMES => {
                        let busy_ns = d.varint()?;
                        let polls = d.varint()?;
                        let waits = match d.varint()? {
                            0 => None,
                            s => Some(Waits {
                                scheduled_ns: s - 1,
                                wakes: d.varint()?,
                            }),
                        };
                        out.push(Event::FutureTimes(FutureTimes {
                            thread: self.thread,
                            busy_ns,
                            polls,
                            waits,
                        }));
                    }
                    EXT_WAKE => {
                        start = d.add_time(start)?;
                        let site = d.u32()?;
                        let depth = d.u32()?;
                        if depth > fgtrace_core::record::MAX_DEPTH {
                            return Err(d.corrupt(format!("wake at depth {depth}")));
                        }
                        let id = d.varint()?;
                        out.push(Event::Wake(Wake {
                            thread: self.thread,
                            site,
                            depth,
                            ts_ns: start,
                            id,
                        }));
                    }
                    k => return Err(d.corrupt(format!("unknown event kind 3.{k}"))),
                },
            }
        }
        if d.pos != d.buf.len() {
            return Err(d.corrupt(format!(
                "{} bytes left over after {} events",
                d.buf.len() - d.pos,
                self.count
            )));
        }
        Ok(())
    }
}

/// Emptied event buffers, handed back by whoever read a kept chunk's events
/// to the encoders that keep them ([`ChunkEncoder::decoded`]): the next
/// chunk's events then go into memory already mapped, and often still in
/// cache, rather than a fresh half-megabyte allocation per chunk (which the
/// allocator maps and unmaps, and which one thread allocates and another
/// frees).
#[derive(Clone, Debug, Default)]
pub struct EventBuffers(std::sync::Arc<std::sync::Mutex<Vec<Vec<Event>>>>);

impl EventBuffers {
    /// Most buffers kept waiting: a few chunks per core.
    const KEEP: usize = 16;

    /// An empty buffer, reused if one was given back.
    pub fn take(&self) -> Vec<Event> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default()
    }

    /// Gives `v` back, emptied, to be reused (dropped when enough wait).
    pub fn give(&self, mut v: Vec<Event>) {
        if v.capacity() == 0 {
            return;
        }
        v.clear();
        let mut pool = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < Self::KEEP {
            pool.push(v);
        }
    }
}

/// Builds chunks from a thread's events, in order.
pub struct ChunkEncoder {
    thread: u32,
    /// Keep the events as they are rather than encode them, in buffers
    /// from here.
    keep: Option<EventBuffers>,
    chunk: Chunk,
    depth: i64,
    start: i64,
    done: Vec<Chunk>,
    /// The latest first time of the chunks taken out.
    latest_sealed: u64,
}

impl ChunkEncoder {
    /// An encoder for the events of `thread` (index into `TraceMeta::threads`).
    pub fn new(thread: u32) -> Self {
        ChunkEncoder {
            thread,
            keep: None,
            chunk: Chunk {
                thread,
                ..Chunk::default()
            },
            depth: 0,
            start: 0,
            done: Vec::new(),
            latest_sealed: 0,
        }
    }

    /// An encoder whose chunks keep their events decoded ([`Chunk::events`])
    /// instead of encoding them: for chunks built in this process only to be
    /// read, which then cost neither the encoding nor the decoding. They are
    /// cut where encoded chunks would be, with the same first times, so a
    /// reader interleaves threads the same way.
    /// Their buffers come from `buffers` when a reader gave some back.
    pub fn decoded(thread: u32, buffers: EventBuffers) -> Self {
        ChunkEncoder {
            keep: Some(buffers),
            ..ChunkEncoder::new(thread)
        }
    }

    /// Whether the chunks keep their events decoded.
    pub fn keeps_events(&self) -> bool {
        self.keep.is_some()
    }

    /// Starts an event at time `t` that may start a new chunk.
    fn start_event(&mut self, t: u64) {
        if self.chunk.count as usize >= CHUNK_EVENTS {
            self.flush();
        }
        if self.chunk.count == 0 {
            self.chunk.first_ns = t;
        }
    }

    /// Takes an event by value: kept as it is, or encoded.
    pub fn push_event(&mut self, ev: Event) {
        let Some(buffers) = &self.keep else {
            return self.push(&ev);
        };
        if self.chunk.events.capacity() == 0 {
            // A chunk's worth at once (and a few for the figures after its
            // last call), not grown by doubling and copying.
            self.chunk.events = buffers.take();
            self.chunk.events.reserve(CHUNK_EVENTS + 8);
        }
        match &ev {
            // Counters, values, future ids and times stay in their call's
            // chunk, as encoded.
            Event::Counters(_) | Event::Values(_) | Event::FutureId(_) | Event::FutureTimes(_) => {}
            Event::Call(c) => self.start_event(c.start_ns),
            Event::Future(f) => self.start_event(f.start_ns),
            Event::Lost(l) => self.start_event(l.at_ns),
            Event::Marker(m) => self.start_event(m.ts_ns),
            Event::Wake(w) => self.start_event(w.ts_ns),
            Event::Sample(s) => self.start_event(s.ts_ns),
        }
        self.chunk.count += 1;
        self.chunk.events.push(ev);
    }

    fn begin(&mut self, depth: u32, t: u64, kind: u64, fl: u8, changes_depth: bool) {
        self.start_event(t);
        let dd = if changes_depth {
            depth as i64 - self.depth
        } else {
            0
        };
        if changes_depth {
            self.depth = depth as i64;
        }
        put_varint(
            &mut self.chunk.payload,
            zigzag(dd) << 5 | ((fl as u64 & 7) << 2) | kind,
        );
        self.chunk.count += 1;
    }

    fn time(&mut self, t: u64) {
        put_varint(&mut self.chunk.payload, zigzag(t as i64 - self.start));
        self.start = t as i64;
    }

    /// Appends one event; starts a new chunk when the current one holds
    /// [`CHUNK_EVENTS`]. Events must come in the thread's pre-order.
    pub fn push(&mut self, ev: &Event) {
        if self.keep.is_some() {
            return self.push_event(ev.clone());
        }
        match ev {
            Event::Call(c) => {
                self.begin(c.depth, c.start_ns, EV_CALL, c.flags, true);
                put_varint(&mut self.chunk.payload, c.site as u64);
                self.time(c.start_ns);
                put_varint(&mut self.chunk.payload, c.dur_ns);
            }
            Event::Future(f) => {
                let depth = self.depth as u32;
                self.begin(depth, f.start_ns, EV_FUTURE, f.cancelled as u8, true);
                put_varint(&mut self.chunk.payload, f.site as u64);
                self.time(f.start_ns);
                put_varint(&mut self.chunk.payload, f.dur_ns);
                put_varint(&mut self.chunk.payload, f.polls as u64);
            }
            Event::Lost(l) => {
                self.begin(l.depth, l.at_ns, EV_LOST, 0, true);
                self.time(l.at_ns);
                put_varint(&mut self.chunk.payload, l.count);
                put_varint(
                    &mut self.chunk.payload,
                    matches!(l.kind, LossKind::Overwritten) as u64,
                );
            }
            Event::Counters(c) => self.counters(c),
            Event::Values(v) => self.values(v),
            Event::FutureId(f) => {
                // As counters: it stays in its poll's (or future's) chunk.
                self.chunk.count += 1;
                put_varint(&mut self.chunk.payload, EV_EXT);
                put_varint(&mut self.chunk.payload, EXT_FUTURE_ID);
                put_varint(&mut self.chunk.payload, f.id);
            }
            Event::FutureTimes(f) => {
                // As future ids: in its future's chunk.
                self.chunk.count += 1;
                put_varint(&mut self.chunk.payload, EV_EXT);
                put_varint(&mut self.chunk.payload, EXT_FUTURE_TIMES);
                put_varint(&mut self.chunk.payload, f.busy_ns);
                put_varint(&mut self.chunk.payload, f.polls);
                // Scheduled time + 1 and wakes where watched; 0 where not.
                match f.waits {
                    Some(w) => {
                        put_varint(&mut self.chunk.payload, w.scheduled_ns.saturating_add(1));
                        put_varint(&mut self.chunk.payload, w.wakes);
                    }
                    None => put_varint(&mut self.chunk.payload, 0),
                }
            }
            Event::Wake(w) => {
                self.begin(0, w.ts_ns, EV_EXT, 0, false);
                put_varint(&mut self.chunk.payload, EXT_WAKE);
                self.time(w.ts_ns);
                put_varint(&mut self.chunk.payload, w.site as u64);
                put_varint(&mut self.chunk.payload, w.depth as u64);
                put_varint(&mut self.chunk.payload, w.id);
            }
            Event::Marker(m) => {
                self.begin(0, m.ts_ns, EV_EXT, 0, false);
                put_varint(&mut self.chunk.payload, EXT_MARKER);
                self.time(m.ts_ns);
                put_varint(&mut self.chunk.payload, m.site as u64);
                put_varint(&mut self.chunk.payload, m.depth as u64);
            }
            Event::Sample(s) => {
                self.begin(0, s.ts_ns, EV_EXT, 0, false);
                put_varint(&mut self.chunk.payload, EXT_SAMPLE);
                self.time(s.ts_ns);
                put_varint(&mut self.chunk.payload, s.shadow_depth as u64);
                put_varint(&mut self.chunk.payload, s.cut.map_or(0, |c| c as u64 + 1));
                put_varint(&mut self.chunk.payload, s.frames.len() as u64);
                let mut prev = 0i64;
                for (i, &a) in s.frames.iter().enumerate() {
                    let a = a as i64;
                    put_varint(
                        &mut self.chunk.payload,
                        if i == 0 {
                            a as u64
                        } else {
                            zigzag(a.wrapping_sub(prev))
                        },
                    );
                    prev = a;
                }
            }
        }
    }

    fn counters(&mut self, c: &CallCounters) {
        // Counters belong to the previous call, so they stay in its chunk
        // (no `begin`, which may start a new one).
        self.chunk.count += 1;
        put_varint(&mut self.chunk.payload, EV_EXT);
        put_varint(&mut self.chunk.payload, EXT_COUNTERS);
        put_varint(&mut self.chunk.payload, c.values.len() as u64);
        for &v in &c.values {
            put_varint(&mut self.chunk.payload, v);
        }
    }

    fn values(&mut self, v: &CallValues) {
        // As counters: they stay in their call's chunk.
        self.chunk.count += 1;
        put_varint(&mut self.chunk.payload, EV_EXT);
        let strings = v
            .values
            .iter()
            .any(|x| x.tag & fgtrace_core::values::tag::TYPE == fgtrace_core::values::tag::STR);
        put_varint(
            &mut self.chunk.payload,
            if strings { EXT_STR_VALUES } else { EXT_VALUES },
        );
        put_varint(&mut self.chunk.payload, v.values.len() as u64);
        for x in &v.values {
            put_varint(&mut self.chunk.payload, x.slot as u64);
            put_varint(&mut self.chunk.payload, x.tag as u64);
            put_varint(&mut self.chunk.payload, x.bits);
        }
    }

    fn flush(&mut self) {
        if self.chunk.count > 0 {
            let c = std::mem::replace(
                &mut self.chunk,
                Chunk {
                    thread: self.thread,
                    ..Chunk::default()
                },
            );
            self.done.push(c);
        }
        self.depth = 0;
        self.start = 0;
    }

    /// Ends the chunk being written, so what comes next starts a new one;
    /// returns how many finished chunks are held, and the first time of
    /// the last chunk begun (a thread's chunks begin in time order).
    pub fn seal(&mut self) -> (usize, u64) {
        let latest = if self.chunk.count > 0 {
            self.chunk.first_ns
        } else {
            self.done.last().map_or(0, |c| c.first_ns)
        };
        self.flush();
        (self.done.len(), latest.max(self.latest_sealed))
    }

    /// Whether a chunk is finished, to be taken out.
    pub fn has_done(&self) -> bool {
        !self.done.is_empty()
    }

    /// The chunks finished so far, taken out.
    pub fn take_done(&mut self) -> Vec<Chunk> {
        if let Some(c) = self.done.last() {
            self.latest_sealed = self.latest_sealed.max(c.first_ns);
        }
        std::mem::take(&mut self.done)
    }

    /// The finished chunks.
    pub fn finish(mut self) -> Vec<Chunk> {
        self.flush();
        self.done
    }
}

/// Orders chunks of all threads by the time of their first event (stable, so
/// each thread's chunks stay in order).
pub fn interleave(mut chunks: Vec<Chunk>) -> Vec<Chunk> {
    chunks.sort_by_key(|c| c.first_ns);
    chunks
}

/// Reads varints from one encoded buffer, reporting errors at their offset in
/// the file the buffer came from.
pub struct Decoder<'a> {
    buf: &'a [u8],
    /// Position of the next unread byte in the buffer.
    pub pos: usize,
    base: u64,
}

impl Decoder<'_> {
    /// A decoder at the start of `buf`; `base` is the byte offset of `buf` in its
    /// file, added to the offsets of the errors it reports.
    pub fn new(buf: &[u8], base: u64) -> Decoder<'_> {
        Decoder { buf, pos: 0, base }
    }
    /// A [`TraceError::Corrupt`] at the current position, saying `what`.
    pub fn corrupt(&self, what: String) -> TraceError {
        TraceError::Corrupt {
            offset: self.base + self.pos as u64,
            what,
        }
    }
    /// Reads one LEB128 varint (at most 10 bytes). Error: the buffer ends
    /// inside it, or it does not fit in 64 bits.
    #[inline(always)]
    pub fn varint(&mut self) -> Result<u64, TraceError> {
        match varint_fast(self.buf, &mut self.pos) {
            Some(v) => Ok(v),
            None => self.varint_slow(),
        }
    }
    #[inline(never)]
    fn varint_slow(&mut self) -> Result<u64, TraceError> {
        let mut v = 0u64;
        let start = self.pos;
        for shift in (0..70).step_by(7) {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(TraceError::Corrupt {
                    offset: self.base + start as u64,
                    what: "event runs past the end of its chunk".into(),
                });
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                break;
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(TraceError::Corrupt {
            offset: self.base + start as u64,
            what: "overlong number".into(),
        })
    }
    /// Reads a varint that must fit in a `u32` (an index or a count); larger is
    /// [`TraceError::Corrupt`].
    pub fn u32(&mut self) -> Result<u32, TraceError> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| self.corrupt(format!("value {v} out of range")))
    }
    /// The depth after a header's depth delta `dd`.
    fn add_depth(&self, depth: i64, dd: i64) -> Result<i64, TraceError> {
        depth
            .checked_add(dd)
            .ok_or_else(|| self.corrupt(format!("call depth {depth} + {dd} overflows")))
    }
    /// Reads a zigzag time delta and applies it to `start`: times are
    /// nanoseconds, never negative, and must fit in 64 bits.
    fn add_time(&mut self, start: u64) -> Result<u64, TraceError> {
        let at = self.pos;
        let delta = unzigzag(self.varint()?);
        start
            .checked_add_signed(delta)
            .filter(|&t| t <= i64::MAX as u64)
            .ok_or_else(|| TraceError::Corrupt {
                offset: self.base + at as u64,
                what: format!("time {start} ns + delta {delta} ns is out of range"),
            })
    }
    /// Reads the duration of something that began at `start`: it must end
    /// at a valid time too (views compute `start + duration`).
    fn duration(&mut self, start: u64) -> Result<u64, TraceError> {
        let at = self.pos;
        let dur = self.varint()?;
        match start.checked_add(dur) {
            Some(end) if end <= i64::MAX as u64 => Ok(dur),
            _ => Err(TraceError::Corrupt {
                offset: self.base + at as u64,
                what: format!("end time {start} ns + duration {dur} ns is out of range"),
            }),
        }
    }
    fn check_depth(&self, d: i64) -> Result<u32, TraceError> {
        u32::try_from(d).map_err(|_| self.corrupt(format!("negative call depth {d}")))
    }
}

/// A one- or two-byte varint at `*pos` (most of a trace's numbers), or
/// `None` for anything else, the end of `buf` included, which the caller's
/// full reader then reads or reports.
#[inline(always)]
pub fn varint_fast(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let b = *buf.get(*pos)?;
    if b < 0x80 {
        *pos += 1;
        return Some(b as u64);
    }
    let c = *buf.get(*pos + 1)?;
    if c < 0x80 {
        *pos += 2;
        return Some((b & 0x7f) as u64 | (c as u64) << 7);
    }
    None
}

/// Appends `v` as an LEB128 varint (7 bits a byte, low bits first; 1 to 10
/// bytes).
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Maps a signed number to an unsigned one with small magnitudes small
/// (0, -1, 1, -2 ... to 0, 1, 2, 3 ...), so deltas encode in few bytes.
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::*;
    use crate::{flags, ThreadInfo, Trace, TraceMeta};

    fn sample_trace() -> Trace {
        let mut meta = TraceMeta::default();
        meta.threads.push(ThreadInfo {
            tid: 7,
            name: "main".into(),
            calls: 3,
            ..Default::default()
        });
        let evs = vec![
            Event::Call(Call {
                thread: 0,
                site: 0,
                depth: 0,
                start_ns: 1000,
                dur_ns: 500,
                flags: flags::HAS_CHILDREN,
            }),
            Event::Call(Call {
                thread: 0,
                site: 1,
                depth: 1,
                start_ns: 1100,
                dur_ns: 20,
                flags: 0,
            }),
            Event::Sample(Sample {
                thread: 0,
                ts_ns: 1130,
                shadow_depth: 1,
                cut: Some(1),
                frames: vec![0x5555_0000_1234, 0x5555_0000_0100, 7],
            }),
            Event::Lost(Lost {
                thread: 0,
                depth: 1,
                at_ns: 1200,
                count: 42,
                kind: LossKind::Dropped,
            }),
            Event::Call(Call {
                thread: 0,
                site: 1,
                depth: 1,
                start_ns: 1300,
                dur_ns: 30,
                flags: flags::UNWOUND,
            }),
            Event::Counters(CallCounters {
                thread: 0,
                values: vec![12345, 0],
            }),
            Event::Future(FutureSpan {
                thread: 0,
                site: 2,
                start_ns: 900,
                dur_ns: 9000,
                polls: 3,
                cancelled: true,
            }),
        ];
        let mut enc = ChunkEncoder::new(0);
        for e in &evs {
            enc.push(e);
        }
        Trace::from_chunks(meta, enc.finish())
    }

    #[test]
    fn events_round_trip_through_the_file_format() {
        let t = sample_trace();
        let mut bytes = Vec::new();
        t.write_to(&mut bytes).unwrap();
        let back = Trace::read_from(&bytes[..]).unwrap();
        assert_eq!(back.meta(), t.meta());
        assert_eq!(
            back.events().collect::<Vec<_>>(),
            t.events().collect::<Vec<_>>()
        );
        assert_eq!(t.events().count(), 7);
    }

    #[test]
    fn values_round_trip_and_older_metadata_reads_without_them() {
        use crate::{CallValues, SiteInfo, Value};
        use fgtrace_core::values::tag;
        let mut t = sample_trace();
        t.meta.sites = vec![SiteInfo {
            name: "parse".into(),
            module_path: "m".into(),
            file: "f.rs".into(),
            line: 1,
            is_async: false,
            values: vec!["len".into(), "ret".into()],
        }];
        let values = CallValues {
            thread: 0,
            values: vec![
                Value {
                    slot: 0,
                    tag: tag::UNSIGNED,
                    bits: 83,
                },
                Value {
                    slot: 1,
                    tag: tag::OK | tag::SIGNED,
                    bits: -2i64 as u64,
                },
            ],
        };
        let call = Event::Call(Call {
            thread: 0,
            site: 0,
            depth: 0,
            start_ns: 5,
            dur_ns: 10,
            flags: 0,
        });
        let mut enc = ChunkEncoder::new(0);
        enc.push(&call);
        enc.push(&Event::Values(values.clone()));
        let t = Trace::from_chunks(t.meta.clone(), enc.finish());
        let mut bytes = Vec::new();
        t.write_to(&mut bytes).unwrap();
        let back = Trace::read_from(&bytes[..]).unwrap();
        assert_eq!(back.meta().sites, t.meta().sites);
        let evs: Vec<Event> = back.events().collect();
        assert_eq!(evs, vec![call.clone(), Event::Values(values.clone())]);
        assert_eq!(
            values.split_display(&t.meta().sites[0], &t.meta().strings),
            ("len=83".to_string(), Some("Ok(-2)".to_string()))
        );
        // No string: the event is 3.2, as before string values; the
        // metadata has no string table.
        let payload = |v: &CallValues| {
            let mut enc = ChunkEncoder::new(0);
            enc.push(&Event::Values(v.clone()));
            enc.finish().remove(0).payload
        };
        assert_eq!(payload(&values)[..2], [EV_EXT as u8, EXT_VALUES as u8]);
        assert!(!crate::json::to_string(t.meta())
            .unwrap()
            .contains("strings"));
        // A string: 3.4 (an older reader stops there), and the table in the
        // metadata, both read back.
        let mut with_str = values.clone();
        with_str.values[1] = Value {
            slot: 1,
            tag: tag::ERR | tag::STR,
            bits: 0,
        };
        assert_eq!(
            payload(&with_str)[..2],
            [EV_EXT as u8, EXT_STR_VALUES as u8]
        );
        let mut meta = t.meta().clone();
        meta.strings = vec!["bad digit".into()];
        let mut enc = ChunkEncoder::new(0);
        enc.push(&call);
        enc.push(&Event::Values(with_str.clone()));
        let t2 = Trace::from_chunks(meta, enc.finish());
        let mut bytes = Vec::new();
        t2.write_to(&mut bytes).unwrap();
        let back = Trace::read_from(&bytes[..]).unwrap();
        assert_eq!(back.meta().strings, ["bad digit"]);
        let evs: Vec<Event> = back.events().collect();
        assert_eq!(evs[1], Event::Values(with_str.clone()));
        assert_eq!(
            with_str.split_display(&back.meta().sites[0], &back.meta().strings),
            ("len=83".to_string(), Some("Err(\"bad digit\")".to_string()))
        );
        // A site as files written before values existed spell it: no list.
        let old = r#"{"name":"f","module_path":"m","file":"f.rs","line":3,"is_async":false}"#;
        let site: SiteInfo = serde_json::from_str(old).unwrap();
        assert!(site.values.is_empty());
        // And a site without values writes no list, as older files had it.
        let mut plain = site.clone();
        plain.values.clear();
        assert!(!serde_json::to_string(&plain).unwrap().contains("values"));
    }

    #[test]
    fn a_value_in_a_slot_no_call_has_is_an_error() {
        let c = Chunk {
            thread: 0,
            count: 1,
            first_ns: 0,
            // ext, values, n = 1, slot 9, tag 1, bits 0
            payload: vec![3, 2, 1, 9, 1, 0],
            offset: 100,
            events: Vec::new(),
        };
        let e = c.decode().unwrap_err().to_string();
        assert!(e.contains("value slot 9"), "{e}");
    }

    #[test]
    fn truncation_and_corruption_report_offsets_and_keep_earlier_chunks() {
        let t = sample_trace();
        let mut bytes = Vec::new();
        t.write_to(&mut bytes).unwrap();
        // Cut off the end marker: the chunk is still readable, then an error.
        let cut = &bytes[..bytes.len() - 3];
        let evs: Vec<_> = TraceReader::new(cut).unwrap().events().collect();
        assert_eq!(evs.iter().filter(|e| e.is_ok()).count(), 7);
        let err = evs.last().unwrap().as_ref().unwrap_err().to_string();
        assert!(err.contains("truncated at byte"), "{err}");
        // Flip a payload byte: checksum mismatch with an offset inside the file.
        let mut bad = bytes.clone();
        let n = bad.len();
        bad[n - 12] ^= 0x55;
        let back = Trace::read_from(&bad[..]).unwrap();
        let err = back.damage().expect("damage noted").to_string();
        assert!(err.contains("corrupt at byte"), "{err}");
        // Foreign file.
        let err = Trace::read_from(&b"\x7fELF\x02\x01\x01\0\0\0\0\0"[..])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an fgtrace"), "{err}");
    }

    /// A file damaged in the middle (one byte of the second of three chunks
    /// flipped, then cut short too): `Trace::load` returns everything before
    /// the damage, exactly as written, with a note naming where it starts.
    #[test]
    fn a_file_damaged_in_the_middle_loads_everything_before_the_damage() {
        let mut enc = ChunkEncoder::new(0);
        let n = 20_000u64;
        for i in 0..n {
            enc.push(&Event::Call(Call {
                thread: 0,
                site: (i % 7) as u32,
                depth: 0,
                start_ns: i * 40,
                dur_ns: 15 + i % 20,
                flags: 0,
            }));
        }
        let t = Trace::from_chunks(sample_trace().meta, enc.finish());
        assert_eq!(t.chunks().len(), 3, "8192 events a chunk");
        let mut bytes = Vec::new();
        t.write_to(&mut bytes).unwrap();
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        let offsets: Vec<u64> = std::iter::from_fn(|| {
            let at = r.offset();
            r.next_chunk().unwrap().map(|_| at)
        })
        .collect();
        assert_eq!(offsets.len(), 3);
        let mid = ((offsets[1] + offsets[2]) / 2) as usize;
        let mut bad = bytes.clone();
        bad[mid] ^= 0x40;
        bad.truncate(bad.len() - 100);
        let dir = std::env::temp_dir().join(format!("fgtrace-damage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("damaged.fgt");
        std::fs::write(&path, &bad).unwrap();
        let back = Trace::load(&path).expect("a damaged file still loads");
        std::fs::remove_dir_all(&dir).unwrap();
        let d = back.damage().expect("the damage is noted").clone();
        assert_eq!(d.offset, offsets[1], "damage starts at the second chunk");
        assert_eq!((d.chunks_kept, d.events_kept), (1, 8192));
        let msg = d.to_string();
        assert!(
            msg.contains(&format!("damaged from byte {}", offsets[1]))
                && msg.contains("checksum")
                && msg.contains("kept the 1 chunks (8192 events)"),
            "{msg}"
        );
        let want: Vec<_> = t.events().take(8192).collect();
        assert_eq!(back.events().collect::<Vec<_>>(), want);
        assert_eq!(back.meta(), t.meta());
        // An intact file has no damage; a damaged header is still an error.
        assert!(Trace::read_from(&bytes[..]).unwrap().damage().is_none());
        let mut head = bytes.clone();
        head[20] ^= 0x40;
        assert!(Trace::read_from(&head[..]).is_err());
    }

    #[test]
    fn calls_encode_compactly() {
        let mut enc = ChunkEncoder::new(0);
        let n = 10_000u64;
        for i in 0..n {
            enc.push(&Event::Call(Call {
                thread: 0,
                site: (i % 7) as u32,
                depth: (i % 3) as u32,
                start_ns: i * 40,
                dur_ns: 15 + i % 50,
                flags: 0,
            }));
        }
        let bytes: usize = enc.finish().iter().map(|c| c.payload.len()).sum();
        assert!(
            bytes as u64 <= 5 * n,
            "{} bytes per call",
            bytes as f64 / n as f64
        );
    }

    /// A file with valid checksums holding a good chunk, then `payload` as a
    /// chunk of `count` events of thread 0.
    fn file_with_chunk(count: u32, payload: Vec<u8>) -> Vec<u8> {
        let t = sample_trace();
        let mut chunks = t.chunks().to_vec();
        chunks.push(Chunk {
            thread: 0,
            count,
            first_ns: 0,
            payload,
            offset: 0,
            events: Vec::new(),
        });
        let mut bytes = Vec::new();
        write_trace(&mut bytes, &t.meta, &chunks).unwrap();
        bytes
    }

    /// Reads `bytes` every way there is: all must fail with a corrupt-at-byte
    /// error naming `what`, and the streaming reader must first return the
    /// good chunk's 7 events.
    fn assert_rejected(bytes: &[u8], what: &str) {
        let evs: Vec<_> = TraceReader::new(bytes).unwrap().events().collect();
        assert_eq!(evs.iter().filter(|e| e.is_ok()).count(), 7);
        let err = evs.last().unwrap().as_ref().unwrap_err().to_string();
        assert!(
            err.contains("corrupt at byte") && err.contains(what),
            "{err}"
        );
        // `Trace::read_from` must not hand out a trace whose `events()` panics:
        // it keeps the good chunk and notes the damage.
        let t = Trace::read_from(bytes).unwrap();
        assert_eq!(t.events().count(), 7);
        let err = t.damage().expect("damage noted").to_string();
        assert!(
            err.contains("corrupt at byte") && err.contains(what),
            "{err}"
        );
    }

    #[test]
    fn a_time_delta_that_overflows_is_an_error_not_a_wrap() {
        // Call at i64::MAX ns, then a call 1 ns later: past every valid time.
        let mut p = Vec::new();
        for delta in [i64::MAX, 1] {
            put_varint(&mut p, EV_CALL);
            put_varint(&mut p, 0);
            put_varint(&mut p, zigzag(delta));
            put_varint(&mut p, 1);
        }
        assert_rejected(&file_with_chunk(2, p), "out of range");
        // Going below zero is as wrong.
        let mut p = Vec::new();
        put_varint(&mut p, EV_LOST);
        put_varint(&mut p, zigzag(-5));
        put_varint(&mut p, 1);
        put_varint(&mut p, 0);
        assert_rejected(&file_with_chunk(1, p), "out of range");
        // And for samples.
        let mut p = Vec::new();
        put_varint(&mut p, EV_EXT);
        put_varint(&mut p, EXT_SAMPLE);
        put_varint(&mut p, zigzag(i64::MIN));
        for v in [0, 0, 0] {
            put_varint(&mut p, v);
        }
        assert_rejected(&file_with_chunk(1, p), "out of range");
    }

    #[test]
    fn a_call_that_ends_past_every_valid_time_is_an_error() {
        // `Call::end_ns` (start + duration) is what every view computes.
        for kind in [EV_CALL, EV_FUTURE] {
            let mut p = Vec::new();
            put_varint(&mut p, kind);
            for v in [0, zigzag(10), u64::MAX - 5, 1] {
                put_varint(&mut p, v);
            }
            if kind == EV_CALL {
                p.pop();
            }
            assert_rejected(&file_with_chunk(1, p), "out of range");
        }
    }

    #[test]
    fn totals_of_implausible_thread_counts_do_not_overflow() {
        // The counts come from the file's metadata, checksummed but not trusted.
        let mut t = sample_trace();
        let mut th = t.meta.threads[0].clone();
        (th.calls, th.lost, th.overruns) = (u64::MAX, u64::MAX, u64::MAX);
        t.meta.threads.push(th);
        let mut bytes = Vec::new();
        t.write_to(&mut bytes).unwrap();
        let back = Trace::read_from(&bytes[..]).unwrap();
        let m = back.meta();
        assert_eq!(
            (m.total_calls(), m.total_lost(), m.total_overruns()),
            (u64::MAX, u64::MAX, u64::MAX)
        );
    }

    #[test]
    fn a_future_depth_delta_that_overflows_is_an_error_not_a_wrap() {
        // Futures do not check their depth; 40 of the largest depth delta
        // a header holds sum past i64::MAX.
        let dd = (u64::MAX >> 5) - 1; // zigzag of 2^58 - 1
        let mut p = Vec::new();
        for _ in 0..40 {
            put_varint(&mut p, dd << 5 | EV_FUTURE);
            for v in [0, 0, 1, 1] {
                put_varint(&mut p, v);
            }
        }
        let bytes = file_with_chunk(40, p);
        assert_rejected(&bytes, "call depth");
    }

    fn marker_chunk() -> (Chunk, Vec<Event>) {
        let evs = vec![
            Event::Call(Call {
                thread: 0,
                site: 0,
                depth: 0,
                start_ns: 100,
                dur_ns: 50,
                flags: flags::HAS_CHILDREN,
            }),
            Event::Marker(Marker {
                thread: 0,
                site: 1,
                depth: 1,
                ts_ns: 120,
            }),
            Event::Values(CallValues {
                thread: 0,
                values: vec![Value {
                    slot: 0,
                    tag: fgtrace_core::values::tag::UNSIGNED,
                    bits: 7,
                }],
            }),
            Event::Call(Call {
                thread: 0,
                site: 2,
                depth: 1,
                start_ns: 130,
                dur_ns: 5,
                flags: 0,
            }),
        ];
        let mut enc = ChunkEncoder::new(0);
        for e in &evs {
            enc.push(e);
        }
        let mut chunks = enc.finish();
        assert_eq!(chunks.len(), 1);
        (chunks.remove(0), evs)
    }

    #[test]
    fn markers_round_trip_between_calls() {
        let (c, evs) = marker_chunk();
        assert_eq!(c.decode().unwrap(), evs);
    }

    #[test]
    fn a_corrupt_or_truncated_marker_is_an_error_not_a_panic() {
        let (c, _) = marker_chunk();
        // The marker's bytes: after the first call's header, site, time, dur.
        let at = c
            .payload
            .windows(2)
            .position(|w| w == [EV_EXT as u8, EXT_MARKER as u8])
            .expect("the marker's header and subkind");
        // Cut anywhere inside or after the marker: an error naming the damage.
        for cut in at + 1..c.payload.len() {
            let mut bad = c.clone();
            bad.payload.truncate(cut);
            assert!(
                matches!(bad.decode(), Err(TraceError::Corrupt { .. })),
                "cut at {cut}"
            );
        }
        // A depth past what records can say.
        let mut enc = ChunkEncoder::new(0);
        enc.push(&Event::Marker(Marker {
            thread: 0,
            site: 0,
            depth: fgtrace_core::record::MAX_DEPTH + 1,
            ts_ns: 5,
        }));
        let bad = enc.finish().remove(0);
        match bad.decode() {
            Err(TraceError::Corrupt { what, .. }) => {
                assert!(what.contains("marker at depth"), "{what}")
            }
            other => panic!("{other:?}"),
        }
        // Every byte of the marker flipped to every value: never a panic.
        for i in at..c.payload.len() {
            for b in 0..=255u8 {
                let mut bad = c.clone();
                bad.payload[i] = b;
                let _ = bad.decode();
            }
        }
    }
}
