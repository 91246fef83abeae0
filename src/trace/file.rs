//! Trace files: writing (whole traces, and the version-2 file a session
//! writes while it records) and reading, streaming where the layout allows,
//! with errors that name the byte offset of the damage. The event encoding
//! inside chunks is [`format`](super::format)'s; see there for the layout.
//!
//! ```text
//! version 2 (written while recording), after the same header:
//! section*     kind u8, payload_len varint, u32le crc32(payload), payload:
//!              2 site: index, SiteInfo JSON | 3 thread: index, tid, name
//!              4 raw: thread, count, exit-order records (see `recorded`)
//!              5 samples: thread, count, events | 7 overwritten: thread, count
//!              6 meta: the final TraceMeta JSON (last, when the session stopped)
//! end          kind=0xFF u8, section_count varint, "END!"
//! ```

use super::format::{
    put_varint, Chunk, Decoder, TraceError, MAGIC, MAX_PAYLOAD, VERSION, VERSION_RECORDED,
};
use super::{Event, TraceMeta};
use std::io::{self, Read, Write};
use std::path::Path;

const KIND_EVENTS: u8 = 1;
const KIND_END: u8 = 0xFF;
const END_MARK: &[u8; 4] = b"END!";
const MAX_META: u32 = 256 << 20;
const CHUNK_EVENTS: usize = super::format::CHUNK_EVENTS;

// Sections of a version-2 file: kind u8, payload_len varint, u32le crc32, payload.
const SEC_SITE: u8 = 2;
const SEC_THREAD: u8 = 3;
const SEC_RAW: u8 = 4;
const SEC_SAMPLES: u8 = 5;
const SEC_META: u8 = 6;
const SEC_OVERWRITTEN: u8 = 7;

pub(crate) fn write_trace(mut w: impl Write, meta: &TraceMeta, chunks: &[Chunk]) -> io::Result<()> {
    let json = serde_json::to_vec(meta).map_err(io::Error::other)?;
    w.write_all(MAGIC)?;
    w.write_all(&VERSION.to_le_bytes())?;
    w.write_all(&(json.len() as u32).to_le_bytes())?;
    w.write_all(&json)?;
    w.write_all(&crc32fast::hash(&json).to_le_bytes())?;
    let mut head = Vec::with_capacity(32);
    for c in chunks {
        head.clear();
        head.push(KIND_EVENTS);
        put_varint(&mut head, c.thread as u64);
        put_varint(&mut head, c.count as u64);
        put_varint(&mut head, c.first_ns);
        put_varint(&mut head, c.payload.len() as u64);
        head.extend_from_slice(&crc32fast::hash(&c.payload).to_le_bytes());
        w.write_all(&head)?;
        w.write_all(&c.payload)?;
    }
    head.clear();
    head.push(KIND_END);
    put_varint(&mut head, chunks.len() as u64);
    head.extend_from_slice(END_MARK);
    w.write_all(&head)
}

/// Writes a version-2 file while a session records: a provisional header,
/// then sites, threads, raw chunks and samples as they come, then the final
/// metadata and the end marker. Every section is checksummed, so a file
/// whose writer was killed reads up to its last complete section.
pub(crate) struct RecordingWriter<W: Write> {
    w: W,
    sections: u64,
    head: Vec<u8>,
    /// Bytes written so far.
    pub written: u64,
}

impl<W: Write> RecordingWriter<W> {
    pub fn new(mut w: W, meta: &TraceMeta) -> io::Result<Self> {
        let json = serde_json::to_vec(meta).map_err(io::Error::other)?;
        w.write_all(MAGIC)?;
        w.write_all(&VERSION_RECORDED.to_le_bytes())?;
        w.write_all(&(json.len() as u32).to_le_bytes())?;
        w.write_all(&json)?;
        w.write_all(&crc32fast::hash(&json).to_le_bytes())?;
        Ok(RecordingWriter {
            w,
            sections: 0,
            head: Vec::with_capacity(32),
            written: 20 + json.len() as u64,
        })
    }

    /// One section: `prefix` (varints) then `body`.
    fn section(&mut self, kind: u8, prefix: &[u64], body: &[u8]) -> io::Result<()> {
        let mut pre = Vec::with_capacity(prefix.len() * 4);
        for &v in prefix {
            put_varint(&mut pre, v);
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(&pre);
        crc.update(body);
        self.head.clear();
        self.head.push(kind);
        put_varint(&mut self.head, (pre.len() + body.len()) as u64);
        self.head.extend_from_slice(&crc.finalize().to_le_bytes());
        self.w.write_all(&self.head)?;
        self.w.write_all(&pre)?;
        self.w.write_all(body)?;
        self.sections += 1;
        self.written += (self.head.len() + pre.len() + body.len()) as u64;
        Ok(())
    }

    pub fn site(&mut self, index: u32, info: &super::SiteInfo) -> io::Result<()> {
        let json = serde_json::to_vec(info).map_err(io::Error::other)?;
        self.section(SEC_SITE, &[index as u64], &json)
    }

    pub fn thread(&mut self, index: u32, tid: u32, name: &str) -> io::Result<()> {
        self.section(SEC_THREAD, &[index as u64, tid as u64], name.as_bytes())
    }

    pub fn raw(&mut self, c: &super::recorded::RawChunk) -> io::Result<()> {
        self.section(SEC_RAW, &[c.thread as u64, c.count as u64], &c.payload)
    }

    /// A chunk of sample events of one thread.
    pub fn samples(&mut self, c: &Chunk) -> io::Result<()> {
        self.section(SEC_SAMPLES, &[c.thread as u64, c.count as u64], &c.payload)
    }

    /// Flight recorder: calls of `thread` overwritten before the snapshot.
    pub fn overwritten(&mut self, thread: u32, count: u64) -> io::Result<()> {
        self.section(SEC_OVERWRITTEN, &[thread as u64, count], &[])
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// The final metadata and the end marker; returns the writer.
    pub fn finish(mut self, meta: &TraceMeta) -> io::Result<W> {
        let json = serde_json::to_vec(meta).map_err(io::Error::other)?;
        self.section(SEC_META, &[], &json)?;
        self.head.clear();
        self.head.push(KIND_END);
        put_varint(&mut self.head, self.sections);
        self.head.extend_from_slice(END_MARK);
        self.w.write_all(&self.head)?;
        self.w.flush()?;
        Ok(self.w)
    }
}

/// Streams a trace file chunk by chunk: memory stays at one chunk whatever the
/// file size.
pub struct TraceReader<R> {
    r: R,
    offset: u64,
    meta: TraceMeta,
    chunks: u64,
    done: bool,
    /// A version-2 file, already rebuilt in pre-order.
    served: Option<std::vec::IntoIter<Chunk>>,
}

impl TraceReader<io::BufReader<std::fs::File>> {
    /// Opens a trace file and reads its metadata.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let f = std::fs::File::open(path.as_ref())?;
        TraceReader::new(io::BufReader::with_capacity(1 << 16, f))
    }
}

impl<R: Read> TraceReader<R> {
    /// Reads the header and metadata from `r`.
    pub fn new(r: R) -> Result<Self, TraceError> {
        let mut t = TraceReader {
            r,
            offset: 0,
            meta: TraceMeta::default(),
            chunks: 0,
            done: false,
            served: None,
        };
        let mut magic = [0u8; 8];
        let n = t.read_up_to(&mut magic)?;
        if n < 8 || &magic != MAGIC {
            if n < 8 && MAGIC.starts_with(&magic[..n]) && n > 0 {
                return Err(TraceError::Truncated {
                    offset: n as u64,
                    what: "file header",
                });
            }
            return Err(TraceError::NotATrace);
        }
        let version = t.u32le("file header")?;
        if version != VERSION && version != VERSION_RECORDED {
            return Err(TraceError::UnsupportedVersion(version));
        }
        let len_at = t.offset;
        let len = t.u32le("file header")?;
        if len > MAX_META {
            return Err(TraceError::Corrupt {
                offset: len_at,
                what: format!("metadata length {len} is implausible"),
            });
        }
        let meta_at = t.offset;
        let mut json = vec![0u8; len as usize];
        t.exact(&mut json, "metadata")?;
        let crc = t.u32le("metadata checksum")?;
        if crc != crc32fast::hash(&json) {
            return Err(TraceError::Corrupt {
                offset: meta_at,
                what: "metadata checksum mismatch".into(),
            });
        }
        t.meta = serde_json::from_slice(&json).map_err(|e| TraceError::Corrupt {
            offset: meta_at,
            what: format!("metadata is not valid: {e}"),
        })?;
        if version == VERSION_RECORDED {
            t.load_recorded()?;
        }
        if let Some(o) = &t.meta.off_cpu {
            o.validate(t.meta.threads.len())
                .map_err(|e| TraceError::Corrupt {
                    offset: meta_at,
                    what: format!("metadata is not valid: {e}"),
                })?;
        }
        Ok(t)
    }

    /// A file written while recording (version 2): reads it whole, keeps
    /// everything up to the first damage or the end of a file whose writer
    /// never finished (with a note in [`TraceMeta::warnings`]), and rebuilds
    /// the calls in pre-order, so callers see what a version-1 file gives.
    fn load_recorded(&mut self) -> Result<(), TraceError> {
        let mut meta = self.meta.clone();
        let ticks_per_ns = meta.clock.ticks_per_ns;
        if !(ticks_per_ns.is_finite() && ticks_per_ns > 0.0) {
            return Err(TraceError::Corrupt {
                offset: 12,
                what: format!("clock rate {ticks_per_ns} ticks/ns is not a rate"),
            });
        }
        let mut rec = super::build::Recorded {
            ticks_per_ns,
            threads: Vec::new(),
        };
        let mut sites: Vec<super::SiteInfo> = Vec::new();
        let mut threads: Vec<super::ThreadInfo> = Vec::new();
        let mut final_meta: Option<TraceMeta> = None;
        let mut calls: Vec<u64> = Vec::new();
        let mut end_ns = 0u64;
        let mut sections = 0u64;
        let scale = super::recorded::TickScale::new(ticks_per_ns);
        let mut scratch = Vec::new();
        let failure = loop {
            let at = self.offset;
            let mut kind = [0u8; 1];
            match self.read_up_to(&mut kind) {
                Ok(0) => {
                    break Some(TraceError::Truncated {
                        offset: at,
                        what: "section header (the end marker is missing)",
                    })
                }
                Ok(_) => {}
                Err(e) => break Some(e),
            }
            if kind[0] == KIND_END {
                let r = (|| {
                    let n = self.varint("end marker")?;
                    let mut mark = [0u8; 4];
                    self.exact(&mut mark, "end marker")?;
                    if &mark != END_MARK || n != sections {
                        return Err(TraceError::Corrupt {
                            offset: at,
                            what: format!("end marker says {n} sections, {sections} were read"),
                        });
                    }
                    Ok(())
                })();
                break r.err();
            }
            let payload = match self.section_payload(at) {
                Ok(p) => p,
                Err(e) => break Some(e),
            };
            let base = self.offset - payload.len() as u64;
            let mut d = Decoder::new(&payload, base);
            let r: Result<(), TraceError> = (|| {
                match kind[0] {
                    SEC_SITE => {
                        let i = d.varint()?;
                        if i != sites.len() as u64 {
                            return Err(d.corrupt(format!(
                                "site {i} announced after {} sites",
                                sites.len()
                            )));
                        }
                        let info = serde_json::from_slice(&payload[d.pos..])
                            .map_err(|e| d.corrupt(format!("site is not valid: {e}")))?;
                        sites.push(info);
                    }
                    SEC_THREAD => {
                        let i = d.varint()?;
                        if i != threads.len() as u64 {
                            return Err(d.corrupt(format!(
                                "thread {i} announced after {} threads",
                                threads.len()
                            )));
                        }
                        let tid = d.u32()?;
                        let name = String::from_utf8_lossy(&payload[d.pos..]).into_owned();
                        threads.push(super::ThreadInfo {
                            tid,
                            name,
                            ..Default::default()
                        });
                        calls.push(0);
                        rec.threads.push(Default::default());
                    }
                    SEC_RAW => {
                        let t = d.varint()?;
                        let count = d.varint()?;
                        if t >= threads.len() as u64 || count > MAX_PAYLOAD {
                            return Err(
                                d.corrupt(format!("raw chunk of thread {t} ({count} records)"))
                            );
                        }
                        let c = super::recorded::RawChunk {
                            thread: t as u32,
                            count: count as u32,
                            payload: payload[d.pos..].to_vec().into(),
                            offset: base + d.pos as u64,
                        };
                        scratch.clear();
                        super::recorded::decode(&c, sites.len(), scale, &mut scratch)?;
                        for r in &scratch {
                            if r.kind as u64 != crate::buffer::kind::LOST
                                && r.kind as u64 != crate::buffer::kind::FUTURE
                            {
                                calls[t as usize] += 1;
                            }
                            end_ns = end_ns.max(r.end_ns);
                        }
                        rec.threads[t as usize].raw.push(c);
                    }
                    SEC_SAMPLES => {
                        let t = d.varint()?;
                        let count = d.varint()?;
                        if t >= threads.len() as u64 || count > MAX_PAYLOAD {
                            return Err(
                                d.corrupt(format!("samples of thread {t} ({count} events)"))
                            );
                        }
                        let c = Chunk {
                            thread: t as u32,
                            count: count as u32,
                            first_ns: 0,
                            payload: payload[d.pos..].to_vec(),
                            offset: base + d.pos as u64,
                        };
                        for e in c.decode()? {
                            if let Event::Sample(s) = e {
                                end_ns = end_ns.max(s.ts_ns);
                                rec.threads[t as usize].samples.push((
                                    s.ts_ns,
                                    s.shadow_depth,
                                    s.cut,
                                    s.frames,
                                ));
                            }
                        }
                    }
                    SEC_OVERWRITTEN => {
                        let t = d.varint()?;
                        let count = d.varint()?;
                        if t >= threads.len() as u64 {
                            return Err(d.corrupt(format!("overwritten calls of thread {t}")));
                        }
                        rec.threads[t as usize].overwritten = count;
                    }
                    SEC_META => {
                        let m: TraceMeta = serde_json::from_slice(&payload)
                            .map_err(|e| d.corrupt(format!("final metadata is not valid: {e}")))?;
                        if m.threads.len() != threads.len() || m.sites.len() != sites.len() {
                            return Err(d.corrupt(format!(
                                "final metadata names {} threads and {} sites, the file announced {} and {}",
                                m.threads.len(), m.sites.len(), threads.len(), sites.len()
                            )));
                        }
                        final_meta = Some(m);
                    }
                    k => return Err(d.corrupt(format!("unknown section kind 0x{k:02x}"))),
                }
                Ok(())
            })();
            if let Err(e) = r {
                break Some(e);
            }
            sections += 1;
        };
        for th in &mut rec.threads {
            th.samples.sort_by_key(|s| s.0);
        }
        match final_meta {
            Some(m) if failure.is_none() => meta = m,
            _ => {
                meta.sites = sites;
                for (t, c) in threads.iter_mut().zip(&calls) {
                    t.calls = *c;
                }
                for (t, r) in threads.iter_mut().zip(&rec.threads) {
                    t.samples = r.samples.len() as u64;
                }
                meta.threads = threads;
                meta.duration_ns = end_ns;
            }
        }
        if let Some(e) = failure {
            meta.warnings.push(format!(
                "{e}: the recording did not finish (the process crashed or was killed, or the file was cut); kept the {} calls before it",
                meta.total_calls()
            ));
        }
        let chunks = rec.build(meta.sites.len(), &meta.counters)?;
        self.meta = meta;
        self.served = Some(chunks.into_iter());
        Ok(())
    }

    /// A section's length, checksum and payload (version 2).
    fn section_payload(&mut self, at: u64) -> Result<Vec<u8>, TraceError> {
        let len = self.varint("section header")?;
        let crc = self.u32le("section header")?;
        if len > MAX_PAYLOAD {
            return Err(TraceError::Corrupt {
                offset: at,
                what: format!("implausible section length {len}"),
            });
        }
        let payload_at = self.offset;
        let mut payload = vec![0u8; len as usize];
        self.exact(&mut payload, "section payload")?;
        if crc32fast::hash(&payload) != crc {
            return Err(TraceError::Corrupt {
                offset: payload_at,
                what: "section checksum mismatch".into(),
            });
        }
        Ok(payload)
    }

    pub fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    /// Byte offset of the next unread byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next chunk, or `None` at the end marker. After an error, every
    /// chunk returned before it is intact (checksummed).
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>, TraceError> {
        if let Some(served) = &mut self.served {
            return Ok(served.next());
        }
        if self.done {
            return Ok(None);
        }
        let at = self.offset;
        let mut kind = [0u8; 1];
        if self.read_up_to(&mut kind)? == 0 {
            return Err(TraceError::Truncated {
                offset: at,
                what: "chunk header (the end marker is missing)",
            });
        }
        match kind[0] {
            KIND_EVENTS => {}
            KIND_END => {
                let n = self.varint("end marker")?;
                let mut mark = [0u8; 4];
                self.exact(&mut mark, "end marker")?;
                if &mark != END_MARK || n != self.chunks {
                    return Err(TraceError::Corrupt {
                        offset: at,
                        what: format!("end marker says {n} chunks, {} were read", self.chunks),
                    });
                }
                self.done = true;
                return Ok(None);
            }
            k => {
                return Err(TraceError::Corrupt {
                    offset: at,
                    what: format!("unknown chunk kind 0x{k:02x}"),
                })
            }
        }
        let thread = self.varint("chunk header")?;
        let count = self.varint("chunk header")?;
        let first_ns = self.varint("chunk header")?;
        let len = self.varint("chunk header")?;
        let crc = self.u32le("chunk header")?;
        if thread >= self.meta.threads.len() as u64
            || count > CHUNK_EVENTS as u64 * 4
            || len > MAX_PAYLOAD
        {
            return Err(TraceError::Corrupt {
                offset: at,
                what: format!(
                    "implausible chunk header (thread {thread}, {count} events, {len} bytes)"
                ),
            });
        }
        let payload_at = self.offset;
        let mut payload = vec![0u8; len as usize];
        self.exact(&mut payload, "chunk payload")?;
        if crc32fast::hash(&payload) != crc {
            return Err(TraceError::Corrupt {
                offset: payload_at,
                what: "chunk checksum mismatch".into(),
            });
        }
        self.chunks += 1;
        Ok(Some(Chunk {
            thread: thread as u32,
            count: count as u32,
            first_ns,
            payload,
            offset: payload_at,
        }))
    }

    /// Streams every event; stops at the first error (after yielding everything before it).
    pub fn events(self) -> Events<R> {
        Events {
            reader: self,
            pending: Vec::new().into_iter(),
            failed: false,
        }
    }

    fn read_up_to(&mut self, buf: &mut [u8]) -> Result<usize, TraceError> {
        let mut n = 0;
        while n < buf.len() {
            match self.r.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.offset += n as u64;
        Ok(n)
    }

    fn exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), TraceError> {
        let n = self.read_up_to(buf)?;
        if n < buf.len() {
            return Err(TraceError::Truncated {
                offset: self.offset,
                what,
            });
        }
        Ok(())
    }

    fn u32le(&mut self, what: &'static str) -> Result<u32, TraceError> {
        let mut b = [0u8; 4];
        self.exact(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, TraceError> {
        let at = self.offset;
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let mut b = [0u8; 1];
            self.exact(&mut b, what)?;
            if shift == 63 && b[0] > 1 {
                break;
            }
            v |= ((b[0] & 0x7f) as u64) << shift;
            if b[0] & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(TraceError::Corrupt {
            offset: at,
            what: format!("overlong number in {what}"),
        })
    }
}

/// Iterator over a file's events (see [`TraceReader::events`]).
pub struct Events<R> {
    reader: TraceReader<R>,
    pending: std::vec::IntoIter<Event>,
    failed: bool,
}

impl<R: Read> Iterator for Events<R> {
    type Item = Result<Event, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.pending.next() {
                return Some(Ok(e));
            }
            if self.failed {
                return None;
            }
            match self
                .reader
                .next_chunk()
                .and_then(|c| c.map(|c| c.decode()).transpose())
            {
                Ok(Some(evs)) => self.pending = evs.into_iter(),
                Ok(None) => return None,
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}
