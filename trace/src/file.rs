//! Trace files: writing (whole traces, and the version-2 file a session
//! writes while it records) and reading, streaming where the layout allows,
//! with errors that name the byte offset of the damage. The event encoding
//! inside chunks is [`encoding`](super::encoding)'s; see there for the layout.
//!
//! ```text
//! version 2 (written while recording), after the same header:
//! section*     kind u8, payload_len varint, u32le crc32(payload), payload:
//!              2 site: index, SiteInfo JSON | 3 thread: index, tid, name
//!              4 raw: thread, count, exit-order records (see `recorded`)
//!              5 samples: thread, count, events | 7 overwritten: thread, count
//!              6 meta: the final TraceMeta JSON (last, when the session stopped)
//!              8 off-CPU: thread, lost, count, count x (gap, dur, kind): the
//!                thread's off-CPU intervals closed since its last such
//!                section (times in ns; `gap` from the previous interval's
//!                end, the first from 0; kind 0 blocked, 1 preempted)
//!              9 string: index, UTF-8 text (an entry of the string table
//!                string values index, written before the first raw chunk
//!                that refers to it; readers older than string values stop
//!                at it: "unknown section kind 0x09")
//! end          kind=0xFF u8, section_count varint, "END!"
//! ```
//!
//! Off-CPU time of a version-2 file: the provisional header's metadata says
//! whether it is recorded (`off_cpu` with no threads yet, or why not), the
//! collector writes off-CPU sections as it goes, and the final metadata
//! repeats everything (calibrated at stop). A file that has no final
//! metadata (its writer was killed) gets its off-CPU time from the sections.

use super::encoding::{
    put_varint, Chunk, Decoder, TraceError, MAGIC, MAX_PAYLOAD, VERSION, VERSION_RECORDED,
};
use super::{Event, TraceMeta};
use std::io::{self, Read, Write};
use std::path::Path;

const KIND_EVENTS: u8 = 1;
const KIND_END: u8 = 0xFF;
const END_MARK: &[u8; 4] = b"END!";
/// The last 8 bytes of a version-2 file whose writer finished, after the
/// byte offset (u64 LE) of its final metadata section.
const FOOTER_MAGIC: &[u8; 8] = b"FGTFOOT1";

/// Where [`read_meta`] found a file's metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaFrom {
    /// The header of a saved file (version 1): complete, in constant time.
    Header,
    /// The final metadata a recording wrote at its end (version 2), found
    /// through the footer: in constant time.
    Footer,
    /// A file without a footer (its writer never finished, or it predates
    /// footers): every section was read.
    ReadThrough,
}

/// The metadata of the trace file at `path`, in constant time where the
/// file allows it (see [`MetaFrom`]): what `fgtrace info` prints. The
/// events are not checked; [`TraceReader`] reads them.
pub fn read_meta(path: impl AsRef<Path>) -> Result<(TraceMeta, MetaFrom), TraceError> {
    use std::io::{Seek, SeekFrom};
    let path = path.as_ref();
    let (t, version) = TraceReader::header(io::BufReader::new(std::fs::File::open(path)?))?;
    if version != VERSION_RECORDED {
        t.check_off_cpu()?;
        return Ok((t.meta, MetaFrom::Header));
    }
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let footer = (|| -> io::Result<Option<u64>> {
        if len < 16 {
            return Ok(None);
        }
        f.seek(SeekFrom::Start(len - 16))?;
        let mut b = [0u8; 16];
        f.read_exact(&mut b)?;
        let at = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        Ok((&b[8..] == FOOTER_MAGIC && at < len - 16).then_some(at))
    })()?;
    if let Some(at) = footer {
        f.seek(SeekFrom::Start(at))?;
        let mut t = TraceReader {
            r: io::BufReader::new(f),
            offset: at,
            meta: TraceMeta::default(),
            chunks: 0,
            done: false,
            served: None,
            meta_at: at,
            split: None,
        };
        let mut kind = [0u8; 1];
        t.exact(&mut kind, "final metadata")?;
        if kind[0] != SEC_META {
            return Err(TraceError::Corrupt {
                offset: at,
                what: format!(
                    "the footer points at a section of kind {}, not the final metadata",
                    kind[0]
                ),
            });
        }
        let payload = t.section_payload(at)?;
        let meta: TraceMeta =
            crate::json::from_slice(&payload).map_err(|e| TraceError::Corrupt {
                offset: at,
                what: format!("final metadata is not valid: {e}"),
            })?;
        t.meta = meta;
        t.check_off_cpu()?;
        let mut meta = t.meta;
        segments::join_meta(&mut meta, path);
        return Ok((meta, MetaFrom::Footer));
    }
    Ok((TraceReader::open(path)?.meta, MetaFrom::ReadThrough))
}

/// [`read_meta`] of the file alone (a ring's segment before it not read).
fn read_meta_alone(path: &Path) -> Result<TraceMeta, TraceError> {
    let f = std::fs::File::open(path)?;
    let again = f.try_clone()?;
    Ok(TraceReader::with_file(io::BufReader::with_capacity(1 << 16, f), again)?.meta)
}

/// What reading a version-2 file's sections gives: its metadata, and its
/// calls as recorded (left in the file where it was given).
type Scanned = (
    TraceMeta,
    super::build::Recorded,
    Option<super::build::InFile>,
);

const MAX_META: u32 = 256 << 20;
const CHUNK_EVENTS: usize = super::encoding::CHUNK_EVENTS;

// Sections of a version-2 file: kind u8, payload_len varint, u32le crc32, payload.
const SEC_SITE: u8 = 2;
const SEC_THREAD: u8 = 3;
const SEC_RAW: u8 = 4;
const SEC_SAMPLES: u8 = 5;
const SEC_META: u8 = 6;
const SEC_OVERWRITTEN: u8 = 7;
const SEC_OFFCPU: u8 = 8;
const SEC_STRING: u8 = 9;

mod events;
mod segments;
mod write;
use events::Ahead;
pub use events::Events;
pub use segments::segment_before;
pub use write::{write_trace, Mark, RecordingWriter};

/// The off-CPU time of a version-2 file without its final metadata: what
/// the header said (recorded, or why not) with the intervals of its off-CPU
/// sections. Threads without a section have none in the file, and say why.
fn merge_off_cpu(meta: &mut TraceMeta, off: std::collections::BTreeMap<u32, super::OffCpuThread>) {
    if meta.off_cpu.is_none() && off.is_empty() {
        return;
    }
    let o = meta.off_cpu.get_or_insert_with(Default::default);
    o.threads = off.into_values().collect();
    // The session lasted at least until its last stretch ended.
    let last = o.threads.iter().filter_map(|t| t.intervals.last());
    meta.duration_ns = last.map(|i| i.end_ns()).fold(meta.duration_ns, u64::max);
    if o.unavailable.is_none() {
        if o.threads.is_empty() {
            o.unavailable = Some(
                "the recording did not finish before any off-CPU time reached the file".into(),
            );
        } else if o.threads.len() < meta.threads.len() {
            o.unavailable = Some(
                "some threads have no off-CPU time in the file (the recording did not finish)"
                    .into(),
            );
        }
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
    served: Option<super::build::Built>,
    /// Where the metadata starts (for errors that name it).
    meta_at: u64,
    /// A saved file (version 1) opened from a file: the file again, and
    /// where its chunks start, for reading its threads apart
    /// ([`TraceReader::feed_threads`]).
    split: Option<(std::fs::File, u64)>,
}

impl TraceReader<io::BufReader<std::fs::File>> {
    /// Opens a trace file and reads its metadata; a ring's file is read
    /// with the segment before it ([`TraceReader::with_file_and_before`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref();
        let f = std::fs::File::open(path)?;
        let again = f.try_clone()?;
        TraceReader::with_file_and_before(
            io::BufReader::with_capacity(1 << 16, f),
            again,
            segment_before(path).as_deref(),
        )
    }
}

impl<R: Read> TraceReader<R> {
    /// Reads the header and metadata from `r`.
    pub fn new(r: R) -> Result<Self, TraceError> {
        Self::read(r, None)
    }

    /// [`TraceReader::new`] over `r`, the contents of `file` from its start:
    /// the raw chunks of a finished recorded file are then read again from
    /// `file` as its threads are rebuilt, instead of being held in memory
    /// from the open on.
    pub fn with_file(r: R, file: std::fs::File) -> Result<Self, TraceError> {
        Self::read(r, Some(file))
    }

    /// [`TraceReader::with_file`], and where the file is a ring's last
    /// segment, the segment before it, `before` (`FILE.prev`, see
    /// [`segment_before`]), read first: its calls are the file's, not
    /// counted as overwritten ([`TraceMeta::ring_before`]). A `before` that
    /// is not that segment (another recording's) is not read, and a warning
    /// in the metadata says why.
    pub fn with_file_and_before(
        r: R,
        file: std::fs::File,
        before: Option<&Path>,
    ) -> Result<Self, TraceError> {
        Self::read_with(r, Some(file), before)
    }

    fn read(r: R, file: Option<std::fs::File>) -> Result<Self, TraceError> {
        Self::read_with(r, file, None)
    }

    fn read_with(
        r: R,
        file: Option<std::fs::File>,
        before: Option<&Path>,
    ) -> Result<Self, TraceError> {
        let (mut t, version) = Self::header(r)?;
        if version == VERSION_RECORDED {
            let head = t.offset;
            t.load_recorded(file, before.map(|b| (b, head)))?;
        } else {
            t.split = file.map(|f| (f, t.offset));
        }
        t.check_off_cpu()?;
        Ok(t)
    }

    /// The header and the metadata it holds (provisional in a version-2
    /// file), and the file's version; nothing after them is read.
    fn header(r: R) -> Result<(Self, u32), TraceError> {
        let mut t = TraceReader {
            r,
            offset: 0,
            meta: TraceMeta::default(),
            chunks: 0,
            done: false,
            served: None,
            meta_at: 0,
            split: None,
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
        t.meta = crate::json::from_slice(&json).map_err(|e| TraceError::Corrupt {
            offset: meta_at,
            what: format!("metadata is not valid: {e}"),
        })?;
        t.meta_at = meta_at;
        Ok((t, version))
    }

    /// The off-CPU part of the metadata must fit its threads.
    fn check_off_cpu(&self) -> Result<(), TraceError> {
        if let Some(o) = &self.meta.off_cpu {
            o.validate(self.meta.threads.len())
                .map_err(|e| TraceError::Corrupt {
                    offset: self.meta_at,
                    what: format!("metadata is not valid: {e}"),
                })?;
        }
        Ok(())
    }

    /// A file written while recording (version 2): reads it whole (after
    /// `before`, a ring's segment before it, where it is: the path, and the
    /// length of this file's header, which that segment's repeats), keeps
    /// everything up to the first damage or the end of a file whose writer
    /// never finished (with a note in [`TraceMeta::warnings`]), and rebuilds
    /// the calls in pre-order, so callers see what a version-1 file gives.
    fn load_recorded(
        &mut self,
        file: Option<std::fs::File>,
        before: Option<(&Path, u64)>,
    ) -> Result<(), TraceError> {
        let (mut meta, mut rec, mut in_file) = self.scan_recorded(file)?;
        if let Some((path, head)) = before {
            segments::join_before(&mut meta, &mut rec, &mut in_file, path, head);
        }
        let built = rec.stream(meta.sites.len(), &meta.counters, in_file);
        self.meta = meta;
        self.served = Some(built);
        Ok(())
    }

    /// Reads a version-2 file's sections (see [`TraceReader::load_recorded`]):
    /// its metadata, and its calls as recorded, left in the file where
    /// `file` is given.
    fn scan_recorded(&mut self, file: Option<std::fs::File>) -> Result<Scanned, TraceError> {
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
        let mut strings: Vec<String> = Vec::new();
        let mut threads: Vec<super::ThreadInfo> = Vec::new();
        let mut final_meta: Option<TraceMeta> = None;
        // Off-CPU sections, by thread (used where the final metadata is missing).
        let mut off: std::collections::BTreeMap<u32, super::OffCpuThread> = Default::default();
        let mut calls: Vec<u64> = Vec::new();
        let mut end_ns = 0u64;
        let mut sections = 0u64;
        let scale = super::recorded::TickScale::new(ticks_per_ns);
        let mut scratch = Vec::new();
        // Raw chunks in the file's order: (thread, index in its list).
        let mut order: Vec<(usize, usize)> = Vec::new();
        // A file read from a file (finished or not: every raw chunk is
        // checked against its checksum when read again) leaves its raw
        // chunks there until its threads are rebuilt.
        let mut in_file = file.map(|f| super::build::InFile {
            files: vec![std::sync::Arc::new(f)],
            chunks: Vec::new(),
        });
        let mut failure = loop {
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
                        let info = crate::json::from_slice(&payload[d.pos..])
                            .map_err(|e| d.corrupt(format!("site is not valid: {e}")))?;
                        sites.push(info);
                    }
                    SEC_STRING => {
                        let i = d.varint()?;
                        if i != strings.len() as u64 {
                            return Err(d.corrupt(format!(
                                "string {i} announced after {} strings",
                                strings.len()
                            )));
                        }
                        strings.push(String::from_utf8_lossy(&payload[d.pos..]).into_owned());
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
                        match &mut in_file {
                            Some(f) => {
                                f.chunks.resize_with(threads.len(), Vec::new);
                                let th = &mut f.chunks[t as usize];
                                order.push((t as usize, th.len()));
                                th.push(super::build::RawAt {
                                    file: 0,
                                    thread: t as u32,
                                    count: count as u32,
                                    offset: base,
                                    len: payload.len() as u32,
                                    crc: crc32fast::hash(&payload),
                                    prefix: d.pos as u32,
                                });
                            }
                            None => {
                                let th = &mut rec.threads[t as usize].raw;
                                order.push((t as usize, th.len()));
                                th.push(super::recorded::RawChunk {
                                    thread: t as u32,
                                    count: count as u32,
                                    payload: payload[d.pos..].to_vec().into(),
                                    offset: base + d.pos as u64,
                                });
                            }
                        }
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
                            events: Vec::new(),
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
                    SEC_OFFCPU => {
                        let t = d.varint()?;
                        let lost = d.varint()?;
                        let count = d.varint()?;
                        // Each interval takes at least 3 bytes.
                        if t >= threads.len() as u64 || count > (payload.len() / 3) as u64 {
                            return Err(d.corrupt(format!(
                                "off-CPU section of thread {t} ({count} intervals) in a file of {} threads",
                                threads.len()
                            )));
                        }
                        // All of a section or none of it: decoded aside first.
                        let floor = off
                            .get(&(t as u32))
                            .and_then(|th| th.intervals.last())
                            .map_or(0, |i| i.end_ns());
                        let mut new = Vec::with_capacity(count as usize);
                        let mut prev_end = 0u64;
                        for k in 0..count {
                            let at = d.pos;
                            let gap = d.varint()?;
                            let dur = d.varint()?;
                            let kind = d.varint()?;
                            let start = prev_end.checked_add(gap);
                            let end = start.and_then(|s| s.checked_add(dur));
                            let (Some(start), Some(end)) = (start, end) else {
                                d.pos = at;
                                return Err(d.corrupt(format!(
                                    "off-CPU interval {k} of thread {t} ends past every valid time"
                                )));
                            };
                            if start < floor.max(prev_end) {
                                d.pos = at;
                                return Err(d.corrupt(format!(
                                    "off-CPU interval {k} of thread {t} starts at {start} ns, before the end of the one before ({floor} ns)"
                                )));
                            }
                            let kind = match kind {
                                0 => super::OffKind::Blocked,
                                1 => super::OffKind::Preempted,
                                k => return Err(d.corrupt(format!("unknown off-CPU kind {k}"))),
                            };
                            new.push(super::OffInterval {
                                start_ns: start,
                                dur_ns: dur,
                                kind,
                            });
                            prev_end = end;
                        }
                        if d.pos != payload.len() {
                            return Err(d.corrupt(format!(
                                "{} bytes after the off-CPU intervals of thread {t}",
                                payload.len() - d.pos
                            )));
                        }
                        let th = off.entry(t as u32).or_insert_with(|| super::OffCpuThread {
                            thread: t as u32,
                            ..Default::default()
                        });
                        th.lost = th.lost.saturating_add(lost);
                        th.intervals.append(&mut new);
                    }
                    SEC_META => {
                        let m: TraceMeta = crate::json::from_slice(&payload)
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
        // A file its writer finished says its counts in the final metadata:
        // its raw chunks are decoded once, by whoever reads the calls (an
        // undecodable one is an error there, after everything before it).
        // A file without one is counted here, and ends at its first raw
        // chunk that does not decode.
        if final_meta.is_none() || failure.is_some() {
            for (pos, &(t, i)) in order.iter().enumerate() {
                scratch.clear();
                let decoded = match &in_file {
                    Some(f) => f.read(&f.chunks[t][i]).and_then(|c| {
                        super::recorded::decode(&c, sites.len(), scale, &mut scratch)
                    }),
                    None => super::recorded::decode(
                        &rec.threads[t].raw[i],
                        sites.len(),
                        scale,
                        &mut scratch,
                    ),
                };
                if let Err(e) = decoded {
                    for &(t, i) in order[pos..].iter().rev() {
                        match &mut in_file {
                            Some(f) => f.chunks[t].truncate(i),
                            None => rec.threads[t].raw.truncate(i),
                        }
                    }
                    failure = Some(e);
                    break;
                }
                for r in &scratch {
                    if r.kind as u64 != fgtrace_core::record::kind::LOST
                        && r.kind as u64 != fgtrace_core::record::kind::FUTURE
                    {
                        calls[t] += 1;
                    }
                    end_ns = end_ns.max(r.end_ns);
                }
            }
        }
        match final_meta {
            Some(m) if failure.is_none() => meta = m,
            _ => {
                meta.sites = sites;
                meta.strings = strings;
                for (t, c) in threads.iter_mut().zip(&calls) {
                    t.calls = *c;
                }
                for (t, r) in threads.iter_mut().zip(&rec.threads) {
                    t.samples = r.samples.len() as u64;
                    // Calls overwritten before the file's calls (a ring's
                    // segment says so as it starts) are lost calls.
                    t.lost = t.lost.max(r.overwritten);
                }
                meta.threads = threads;
                meta.duration_ns = end_ns;
                merge_off_cpu(&mut meta, off);
            }
        }
        if let Some(e) = failure {
            meta.warnings.push(format!(
                "{e}: the recording did not finish (the process crashed or was killed, or the file was cut); kept the {} calls before it",
                meta.total_calls()
            ));
        }
        Ok((meta, rec, in_file))
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

    /// The trace's metadata, as read from the file's header (version 1) or its
    /// final metadata section (version 2).
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
            return served.next().transpose();
        }
        let mut none = Vec::new();
        Ok(self.next_chunk_for(|_| true, &mut none)?.flatten())
    }

    /// The next chunk of a version-1 file when `want` takes its thread;
    /// `Some(None)` for a chunk of another thread, whose payload is read
    /// into `skipped` (no allocation once it is as large as a chunk) and
    /// checked, so that every reader of the file fails where one reading it
    /// whole would; `None` at the end.
    fn next_chunk_for(
        &mut self,
        want: impl Fn(u32) -> bool,
        skipped: &mut Vec<u8>,
    ) -> Result<Option<Option<Chunk>>, TraceError> {
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
        let wanted = want(thread as u32);
        let mut payload = Vec::new();
        let buf = if wanted { &mut payload } else { &mut *skipped };
        buf.clear();
        buf.resize(len as usize, 0);
        self.exact(buf, "chunk payload")?;
        if crc32fast::hash(buf) != crc {
            return Err(TraceError::Corrupt {
                offset: payload_at,
                what: "chunk checksum mismatch".into(),
            });
        }
        self.chunks += 1;
        Ok(Some(wanted.then(|| Chunk {
            thread: thread as u32,
            count: count as u32,
            first_ns,
            payload,
            offset: payload_at,
            events: Vec::new(),
        })))
    }

    /// Streams every event; stops at the first error (after yielding everything before it).
    ///
    /// Chunks are decoded ahead on up to [`crate::parallel::threads`] worker
    /// threads while the caller takes the events of the one before, and come
    /// back in the file's order: the stream is the same as one decoded on the
    /// calling thread (`FGTRACE_THREADS=1`), and at most a few chunks per
    /// worker are held at once.
    pub fn events(self) -> Events<R> {
        self.events_on(crate::parallel::threads())
    }

    /// For a file none of whose events were read: every thread's events fed
    /// to `sinks[t % sinks.len()]`, each sink on a core of its own. A
    /// recorded file (version 2) is rebuilt one thread after another (see
    /// [`Built::feed_threads`](crate::build::Built::feed_threads)); a saved
    /// file (version 1) opened with [`TraceReader::open`] is read by each
    /// sink's core by itself, from a shared file at its own offset, taking
    /// its threads' chunks. Other streams (not a file, partly read, one
    /// sink) come back with the sinks, to be read with [`events`](Self::events).
    #[allow(clippy::type_complexity)]
    pub fn feed_threads<S: Send>(
        mut self,
        sinks: Vec<S>,
        push: impl Fn(&mut S, &Event) + Sync,
    ) -> Result<(Vec<S>, Result<(), TraceError>), Box<(Self, Vec<S>)>> {
        if self.served.is_none() && self.chunks == 0 && sinks.len() > 1 {
            if let Some((file, at)) = self.split.take() {
                return Ok(self.feed_split(&file, at, sinks, &push));
            }
        }
        let Some(built) = self.served.take() else {
            return Err(Box::new((self, sinks)));
        };
        built.feed_threads(sinks, push).map_err(|back| {
            let (built, sinks) = *back;
            self.served = Some(built);
            Box::new((self, sinks))
        })
    }

    /// A saved file's threads fed to `sinks[t % sinks.len()]`, each sink on
    /// a core of its own reading the file from `at` on by itself: it decodes
    /// the chunks of its threads and checks and skips the others. Every
    /// reader sees a damaged header or checksum where the sequential read
    /// would stop, so the sinks get what it gives; the first error in the
    /// file comes back. A chunk whose checksum holds but whose events do not
    /// decode (written so on purpose) stops only its own threads' reader.
    /// Each reader holds one chunk's payload and events at a time.
    fn feed_split<S: Send>(
        &self,
        file: &std::fs::File,
        at: u64,
        sinks: Vec<S>,
        push: &(impl Fn(&mut S, &Event) + Sync),
    ) -> (Vec<S>, Result<(), TraceError>) {
        let groups = sinks.len();
        let (threads, meta_at) = (&self.meta.threads, self.meta_at);
        let jobs: Vec<(usize, S)> = sinks.into_iter().enumerate().collect();
        let results = crate::parallel::each(jobs, |(g, mut sink)| {
            let read = crate::pread::ReadAt { file, at };
            let mut r = TraceReader {
                r: io::BufReader::with_capacity(1 << 16, read),
                offset: at,
                meta: TraceMeta {
                    threads: threads.clone(),
                    ..TraceMeta::default()
                },
                chunks: 0,
                done: false,
                served: None,
                meta_at,
                split: None,
            };
            let (mut skipped, mut events) = (Vec::new(), Vec::new());
            loop {
                let before = r.offset;
                let chunk = match r.next_chunk_for(|t| t as usize % groups == g, &mut skipped) {
                    Ok(Some(Some(c))) => c,
                    Ok(Some(None)) => continue,
                    Ok(None) => return (sink, None),
                    Err(e) => return (sink, Some((before, e))),
                };
                if let Err(e) = chunk.decode_into(&mut events) {
                    return (sink, Some((before, e)));
                }
                for ev in &events {
                    push(&mut sink, ev);
                }
            }
        });
        let mut first: Option<(u64, TraceError)> = None;
        let mut sinks = Vec::with_capacity(groups);
        for (sink, failed) in results {
            sinks.push(sink);
            if let Some((at, e)) = failed {
                if first.as_ref().is_none_or(|f| at < f.0) {
                    first = Some((at, e));
                }
            }
        }
        (sinks, first.map_or(Ok(()), |(_, e)| Err(e)))
    }

    /// [`TraceReader::events`] decoding on `workers` threads (1: on the caller's).
    fn events_on(mut self, workers: usize) -> Events<R> {
        // A recorded file's rebuilt chunks are read here only: they keep
        // their events rather than being encoded to be decoded again.
        let buffers = self.served.as_mut().and_then(|b| b.keep_events());
        Events {
            buffers,
            reader: self,
            pending: Vec::new(),
            pos: 0,
            failed: false,
            ahead: (workers > 1).then(|| Ahead::new(workers)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{OffCpu, OffCpuThread, OffInterval, OffKind, ThreadInfo, Trace};

    const fn iv(start_ns: u64, dur_ns: u64, kind: OffKind) -> OffInterval {
        OffInterval::new(start_ns, dur_ns, kind)
    }

    /// Ten chunks of calls. With `bad`, chunk 5 says it holds more events
    /// than it does (its checksum holds: only the decoder finds it); with
    /// `cut`, the file ends inside chunk 8.
    fn ten_chunks(bad: bool, cut: bool) -> Vec<u8> {
        use crate::encoding::ChunkEncoder;
        use crate::{Call, SiteInfo, ThreadInfo};
        let mut enc = ChunkEncoder::new(0);
        for i in 0..10 * 8192u64 {
            enc.push(&Event::Call(Call {
                thread: 0,
                site: 0,
                depth: (i % 3) as u32,
                start_ns: i * 40,
                dur_ns: 15 + i % 20,
                flags: 0,
            }));
        }
        let mut chunks = enc.finish();
        assert_eq!(chunks.len(), 10);
        if bad {
            chunks[5].count += 3;
        }
        let mut meta = header();
        meta.sites.push(SiteInfo {
            name: "f".into(),
            module_path: "m".into(),
            file: "f.rs".into(),
            line: 1,
            is_async: false,
            values: Vec::new(),
        });
        meta.threads.push(ThreadInfo::default());
        let mut bytes = Vec::new();
        write_trace(&mut bytes, &meta, &chunks).unwrap();
        if cut {
            let mut r = TraceReader::new(&bytes[..]).unwrap();
            for _ in 0..8 {
                r.next_chunk().unwrap();
            }
            let at = r.offset() as usize + 40;
            bytes.truncate(at);
        }
        bytes
    }

    #[test]
    fn events_decoded_on_several_threads_are_the_sequential_stream_errors_included() {
        // (damage, chunks read before the error, what the error says)
        for (bad, cut, kept, says) in [
            (true, false, 5, "corrupt"),
            (false, true, 8, "truncated"),
            (false, false, 10, ""),
        ] {
            let bytes = ten_chunks(bad, cut);
            let read = |workers| -> Vec<Result<Event, String>> {
                let r = TraceReader::new(&bytes[..]).unwrap();
                r.events_on(workers)
                    .map(|e| e.map_err(|e| e.to_string()))
                    .collect()
            };
            let one = read(1);
            let ok = kept * 8192;
            assert!(one[..ok].iter().all(|e| e.is_ok()));
            if says.is_empty() {
                assert_eq!(one.len(), ok);
            } else {
                assert_eq!(one.len(), ok + 1);
                assert!(
                    one[ok].as_ref().is_err_and(|e| e.contains(says)),
                    "{:?}",
                    one[ok]
                );
            }
            for workers in [2, 3, 8] {
                assert!(
                    read(workers) == one,
                    "{workers} workers, bad {bad}, cut {cut}"
                );
            }
        }
    }

    /// A saved file of three threads whose chunks alternate, written to a
    /// temporary file: with `damage`, a payload byte of thread 1's second
    /// chunk is flipped (its checksum fails) or that chunk says it holds
    /// more events than it does (only the decoder finds it).
    fn three_threads_saved(name: &str, damage: Option<&str>) -> std::path::PathBuf {
        use crate::encoding::ChunkEncoder;
        use crate::{Call, SiteInfo, ThreadInfo};
        let mut per_thread: Vec<Vec<Chunk>> = (0..3u32)
            .map(|t| {
                let mut enc = ChunkEncoder::new(t);
                for i in 0..3 * 8192u64 + 100 * u64::from(t) {
                    enc.push(&Event::Call(Call {
                        thread: t,
                        site: 0,
                        depth: (i % 3) as u32,
                        start_ns: i * 40 + u64::from(t),
                        dur_ns: 15 + i % 20,
                        flags: 0,
                    }));
                }
                enc.finish()
            })
            .collect();
        if damage == Some("count") {
            per_thread[1][1].count += 3;
        }
        let mut chunks = Vec::new();
        for k in 0..4 {
            for t in per_thread.iter_mut() {
                if k < t.len() {
                    chunks.push(std::mem::take(&mut t[k]));
                }
            }
        }
        let mut meta = TraceMeta::default();
        meta.clock.ticks_per_ns = 1.0;
        meta.sites.push(SiteInfo {
            name: "f".into(),
            module_path: "m".into(),
            file: "f.rs".into(),
            line: 1,
            is_async: false,
            values: Vec::new(),
        });
        meta.threads = vec![ThreadInfo::default(); 3];
        let mut bytes = Vec::new();
        write_trace(&mut bytes, &meta, &chunks).unwrap();
        if damage == Some("checksum") {
            let mut r = TraceReader::new(&bytes[..]).unwrap();
            let second = std::iter::from_fn(|| r.next_chunk().unwrap())
                .filter(|c| c.thread == 1)
                .nth(1)
                .unwrap();
            bytes[second.offset as usize + 7] ^= 0x55;
        }
        let dir = std::env::temp_dir().join(format!("fgtrace-split-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn a_saved_file_is_read_apart_by_thread_as_the_sequential_read_gives_it() {
        for damage in [None, Some("checksum"), Some("count")] {
            // A name every file system takes (no quotes: Windows refuses them).
            let name = format!("{}.fgt", damage.unwrap_or("intact"));
            let path = three_threads_saved(&name, damage);
            let one: Vec<Result<Event, String>> = TraceReader::open(&path)
                .unwrap()
                .events_on(1)
                .map(|e| e.map_err(|e| e.to_string()))
                .collect();
            let error = one.iter().find_map(|e| e.as_ref().err().cloned());
            for groups in [2usize, 3] {
                let sinks: Vec<Vec<Event>> = vec![Vec::new(); groups];
                let (sinks, read) = TraceReader::open(&path)
                    .unwrap()
                    .feed_threads(sinks, |s, ev| s.push(ev.clone()))
                    .unwrap_or_else(|_| panic!("a saved file is read apart"));
                assert_eq!(read.err().map(|e| e.to_string()), error, "{damage:?}");
                for (g, got) in sinks.iter().enumerate() {
                    let want: Vec<Event> = one
                        .iter()
                        .filter_map(|e| e.as_ref().ok())
                        .filter(|e| e.thread() as usize % groups == g)
                        .cloned()
                        .collect();
                    if damage == Some("count") && g != 1 % groups {
                        // Only the reader of the undecodable chunk's thread
                        // finds it (its checksum holds); the others read on,
                        // past it.
                        assert!(got.starts_with(&want), "{damage:?} group {g}");
                    } else {
                        assert!(*got == want, "{damage:?}, {groups} groups, group {g}");
                    }
                }
            }
            // A stream that is not a file cannot be read apart.
            let bytes = std::fs::read(&path).unwrap();
            let r = TraceReader::new(&bytes[..]).unwrap();
            assert!(r.feed_threads(vec![0u64; 2], |n, _| *n += 1).is_err());
        }
    }

    /// A finished recorded file with a raw chunk whose checksum holds but
    /// whose records do not decode: the calls before it are read, then an
    /// error naming the chunk; with the final metadata cut off, the file is
    /// counted up to that chunk and says so.
    #[test]
    fn an_undecodable_raw_chunk_ends_the_calls_after_everything_before_it() {
        use crate::recorded::{RawChunk, RawEncoder, SiteMap};
        use fgtrace_core::record::{kind, RawCall};
        let mut sites = SiteMap::default();
        let mut enc = RawEncoder::default();
        let good: Vec<RawChunk> = (0..3u64)
            .map(|c| {
                let recs: Vec<RawCall> = (0..100u64)
                    .map(|k| RawCall::pack(1_000 + (c * 100 + k) * 50, 0, 20, 0, false, kind::CALL))
                    .collect();
                enc.encode(0, &recs, 1_000, &mut sites, &|_| None)
            })
            .collect();
        let bad = RawChunk {
            thread: 0,
            count: 5,
            payload: vec![0xff; 4].into(),
            offset: 0,
        };
        let mut meta = header();
        meta.sites = sites.sites.clone();
        let mut w = RecordingWriter::new(Vec::new(), &meta).unwrap();
        w.site(0, &meta.sites[0]).unwrap();
        w.thread(0, 11, "main").unwrap();
        for c in &good[..2] {
            w.raw(c).unwrap();
        }
        w.raw(&bad).unwrap();
        w.raw(&good[2]).unwrap();
        let mut fin = meta.clone();
        fin.threads = vec![crate::ThreadInfo {
            tid: 11,
            name: "main".into(),
            calls: 300,
            ..Default::default()
        }];
        let bytes = w.finish(&fin).unwrap();
        let calls = |evs: &[Result<Event, TraceError>]| {
            evs.iter()
                .filter(|e| matches!(e, Ok(Event::Call(_))))
                .count()
        };
        for workers in [1, 2] {
            let r = TraceReader::new(&bytes[..]).unwrap();
            let evs: Vec<_> = r.events_on(workers).collect();
            assert_eq!(calls(&evs), 200, "{workers} workers");
            let last = evs.last().unwrap().as_ref().unwrap_err().to_string();
            assert!(last.contains("corrupt at byte"), "{last}");
        }
        // Read from a file, the raw chunks are read again as the thread is
        // rebuilt: the same calls, the same error.
        let dir = std::env::temp_dir().join(format!("fgtrace-lazy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad-chunk.fgt");
        std::fs::write(&path, &bytes).unwrap();
        let evs: Vec<_> = TraceReader::open(&path).unwrap().events().collect();
        assert_eq!(calls(&evs), 200);
        assert!(evs.last().unwrap().is_err());
        // A file that changes under its reader is an error, not other calls.
        let r = TraceReader::open(&path).unwrap();
        let mut changed = bytes.clone();
        let at = changed.len() - 300;
        changed[at] ^= 0x10;
        std::fs::write(&path, &changed).unwrap();
        let evs: Vec<_> = r.events().collect();
        let last = evs.last().unwrap().as_ref().unwrap_err().to_string();
        assert!(
            last.contains("changed since the file was opened") || last.contains("corrupt"),
            "{last}"
        );
        // Cut short under its reader, before the bad chunk (so that chunk
        // is never read whole; where a fixed share of the file falls depends
        // on the header's length): the same, not a bare read error.
        std::fs::write(&path, &bytes).unwrap();
        let r = TraceReader::open(&path).unwrap();
        let bad_at = bytes
            .windows(4)
            .position(|w| w == [0xff; 4])
            .expect("the bad chunk's payload is in the file");
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(bad_at as u64 / 2)
            .unwrap();
        let evs: Vec<_> = r.events().collect();
        std::fs::remove_dir_all(&dir).unwrap();
        // The stream ends at a chunk cut off ("changed since the file was
        // opened") or, when the workers reach it first, at the bad chunk
        // found at open: damage either way, never an I/O error.
        let last = evs.last().unwrap().as_ref().unwrap_err();
        assert!(matches!(last, TraceError::Corrupt { .. }), "{last}");
        assert_eq!(calls(&evs), evs.len() - 1, "calls, then the error alone");
        // Without its end, the file is counted here, up to the bad chunk.
        let cut = &bytes[..bytes.len() - 200];
        let r = TraceReader::new(cut).unwrap();
        assert_eq!(r.meta().total_calls(), 200);
        assert!(
            r.meta()
                .warnings
                .iter()
                .any(|w| w.contains("kept the 200 calls")),
            "{:?}",
            r.meta().warnings
        );
        let evs: Vec<_> = r.events().collect();
        assert_eq!(calls(&evs), 200);
        assert!(evs.iter().all(|e| e.is_ok()));
    }

    /// A recorded file's threads fed apart, to any number of sinks: each
    /// sink gets its threads' events in their order, the events the merged
    /// stream has for those threads; a thread with an undecodable raw chunk
    /// is read up to it while the others are read whole, and its error
    /// comes back, the same with any number of sinks.
    #[test]
    fn threads_fed_apart_are_the_merged_streams_threads_each_to_its_own_damage() {
        use crate::recorded::{RawChunk, RawEncoder, SiteMap};
        use fgtrace_core::record::{kind, RawCall};
        let mut sites = SiteMap::default();
        let mut enc = RawEncoder::default();
        let mut meta = header();
        let mut raw: Vec<RawChunk> = Vec::new();
        for t in 0..3u32 {
            for c in 0..4u64 {
                let recs: Vec<RawCall> = (0..100u64)
                    .map(|k| {
                        let at = 1_000 + (c * 100 + k) * 50 + u64::from(t) * 7;
                        RawCall::pack(at, 0, 20 + u64::from(t), 0, false, kind::CALL)
                    })
                    .collect();
                raw.push(enc.encode(t, &recs, 1_000, &mut sites, &|_| None));
            }
        }
        meta.sites = sites.sites.clone();
        let write = |bad_thread: Option<u32>| {
            let mut w = RecordingWriter::new(Vec::new(), &meta).unwrap();
            w.site(0, &meta.sites[0]).unwrap();
            for t in 0..3u32 {
                w.thread(t, 11 + t, &format!("t{t}")).unwrap();
            }
            for (i, c) in raw.iter().enumerate() {
                if Some(c.thread) == bad_thread && i % 4 == 2 {
                    w.raw(&RawChunk {
                        thread: c.thread,
                        count: 5,
                        payload: vec![0xff; 4].into(),
                        offset: 0,
                    })
                    .unwrap();
                }
                w.raw(c).unwrap();
            }
            let mut fin = meta.clone();
            fin.threads = (0..3u32)
                .map(|t| crate::ThreadInfo {
                    tid: 11 + t,
                    name: format!("t{t}"),
                    calls: 400,
                    ..Default::default()
                })
                .collect();
            w.finish(&fin).unwrap()
        };
        let whole = write(None);
        let merged: Vec<Event> = TraceReader::new(&whole[..])
            .unwrap()
            .events()
            .collect::<Result<_, _>>()
            .unwrap();
        let of = |evs: &[Event], t: u32| -> Vec<Event> {
            evs.iter().filter(|e| e.thread() == t).cloned().collect()
        };
        let feed = |bytes: &[u8], groups: usize| {
            let r = TraceReader::new(bytes).unwrap();
            let sinks = vec![Vec::<Event>::new(); groups];
            match r.feed_threads(sinks, |s, e| s.push(e.clone())) {
                Ok(done) => done,
                Err(_) => panic!("a recorded file is fed by thread"),
            }
        };
        for groups in [1, 2, 3, 5] {
            let (sinks, read) = feed(&whole, groups);
            assert!(read.is_ok());
            for t in 0..3u32 {
                let sink = &sinks[t as usize % groups];
                assert_eq!(of(sink, t), of(&merged, t), "thread {t}, {groups} sinks");
                assert_eq!(of(sink, t).len(), 400);
            }
        }
        // Thread 1 damaged: threads 0 and 2 whole, thread 1 up to its
        // damage (two raw chunks: 200 calls), with any number of sinks.
        let damaged = write(Some(1));
        for groups in [1, 2, 3] {
            let (sinks, read) = feed(&damaged, groups);
            let e = read.expect_err("the damage comes back").to_string();
            assert!(e.contains("corrupt"), "{e}");
            let got: Vec<Event> = sinks.concat();
            assert_eq!(of(&got, 0), of(&merged, 0));
            assert_eq!(of(&got, 2), of(&merged, 2));
            assert_eq!(
                of(&got, 1),
                of(&merged, 1)[..200].to_vec(),
                "{groups} sinks"
            );
        }
        // Any other file comes back to be read in order.
        let pre_order = ten_chunks(false, false);
        let r = TraceReader::new(&pre_order[..]).unwrap();
        assert!(r.feed_threads(vec![0u32; 2], |_, _| {}).is_err());
    }

    fn header() -> TraceMeta {
        let mut m = TraceMeta::default();
        m.clock.ticks_per_ns = 1.0;
        // What a session recording off-CPU time says before any thread.
        m.off_cpu = Some(OffCpu::default());
        m
    }

    /// The truth the sections below hold.
    fn full() -> OffCpu {
        OffCpu {
            unavailable: None,
            threads: vec![
                OffCpuThread {
                    lost: 2,
                    ..crate::offcpu::tests::thread()
                },
                OffCpuThread {
                    thread: 1,
                    lost: 0,
                    intervals: Vec::new(),
                },
            ],
        }
    }

    /// A version-2 file as a session with off-CPU time writes it, without
    /// its end (the writer was killed), and the offsets where its sections
    /// end.
    fn killed() -> (Vec<u8>, Vec<usize>) {
        let mut w = RecordingWriter::new(Vec::new(), &header()).unwrap();
        let mut ends = vec![w.written as usize];
        let mut step = |w: &mut RecordingWriter<Vec<u8>>, r: io::Result<()>| {
            r.unwrap();
            ends.push(w.written as usize);
        };
        let r = w.thread(0, 11, "main");
        step(&mut w, r);
        let r = w.off_cpu(0, 0, &[iv(100, 50, OffKind::Blocked)]);
        step(&mut w, r);
        let r = w.thread(1, 12, "worker");
        step(&mut w, r);
        let r = w.off_cpu(1, 0, &[]);
        step(&mut w, r);
        let r = w.off_cpu(
            0,
            2,
            &[
                iv(200, 10, OffKind::Preempted),
                iv(300, 100, OffKind::Blocked),
            ],
        );
        step(&mut w, r);
        (w.w, ends)
    }

    #[test]
    fn a_killed_file_keeps_the_off_cpu_time_of_its_sections() {
        let (bytes, _) = killed();
        let t = Trace::read_from(&bytes[..]).unwrap();
        assert!(
            t.meta().warnings.join("").contains("did not finish"),
            "{:?}",
            t.meta().warnings
        );
        assert_eq!(t.meta().off_cpu, Some(full()));
        // No calls: the session lasted until its last stretch ended.
        assert_eq!(t.meta().duration_ns, 400);
        // Finished, the final metadata is the truth (the sections repeat it).
        let mut w = RecordingWriter::new(Vec::new(), &header()).unwrap();
        w.thread(0, 11, "main").unwrap();
        w.off_cpu(0, 0, &[iv(100, 50, OffKind::Blocked)]).unwrap();
        w.thread(1, 12, "worker").unwrap();
        let mut fin = header();
        fin.threads = vec![
            ThreadInfo {
                tid: 11,
                name: "main".into(),
                ..Default::default()
            },
            ThreadInfo {
                tid: 12,
                name: "worker".into(),
                ..Default::default()
            },
        ];
        fin.off_cpu = Some(full());
        let bytes = w.finish(&fin).unwrap();
        let t = Trace::read_from(&bytes[..]).unwrap();
        assert!(t.meta().warnings.is_empty(), "{:?}", t.meta().warnings);
        assert_eq!(t.meta().off_cpu, Some(full()));
    }

    #[test]
    fn info_finds_the_final_metadata_through_the_footer_and_reads_through_without_it() {
        let dir = std::env::temp_dir().join(format!("fgtrace-footer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut w = RecordingWriter::new(Vec::new(), &header()).unwrap();
        w.thread(0, 11, "main").unwrap();
        let mut fin = header();
        fin.program = "final".into();
        fin.threads = vec![ThreadInfo {
            tid: 11,
            name: "main".into(),
            calls: 0,
            ..Default::default()
        }];
        let finished = w.finish(&fin).unwrap();
        let path = dir.join("finished.fgt");
        std::fs::write(&path, &finished).unwrap();
        let (m, from) = read_meta(&path).unwrap();
        assert_eq!((m.program.as_str(), from), ("final", MetaFrom::Footer));
        // What reading the whole file gives is the same metadata.
        assert_eq!(Trace::load(&path).unwrap().meta().program, "final");
        // Killed: no footer; the sections are read.
        let (killed, _) = killed();
        std::fs::write(&path, &killed).unwrap();
        let (m, from) = read_meta(&path).unwrap();
        assert_eq!(from, MetaFrom::ReadThrough);
        assert!(m.warnings.join("").contains("did not finish"));
        // A footer pointing anywhere else is an error naming it, never a panic.
        for at in [0u64, 5, 20, finished.len() as u64 - 17, u64::MAX] {
            let mut bad = finished.clone();
            let n = bad.len();
            bad[n - 16..n - 8].copy_from_slice(&at.to_le_bytes());
            std::fs::write(&path, &bad).unwrap();
            match read_meta(&path) {
                Ok((_, from)) => assert_eq!(from, MetaFrom::ReadThrough, "{at}"),
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
        // A saved file (version 1): the header is the metadata.
        let mut saved = Vec::new();
        write_trace(&mut saved, &fin, &[]).unwrap();
        std::fs::write(&path, &saved).unwrap();
        assert_eq!(read_meta(&path).unwrap().1, MetaFrom::Header);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_cut_anywhere_keeps_the_off_cpu_time_before_the_cut() {
        let (bytes, ends) = killed();
        let mut last = 0;
        for cut in ends[0]..=bytes.len() {
            let t = Trace::read_from(&bytes[..cut])
                .unwrap_or_else(|e| panic!("cut at {cut} of {}: {e}", bytes.len()));
            let o = t
                .meta()
                .off_cpu
                .as_ref()
                .expect("the header says it is recorded");
            let n: usize = o.threads.iter().map(|t| t.intervals.len()).sum();
            assert!(
                n >= last,
                "cut at {cut}: {n} intervals, a shorter cut had {last}"
            );
            last = n;
            // Exactly what the complete sections before the cut hold.
            let whole = ends.iter().filter(|&&e| e <= cut).count() - 1;
            let want = [0, 0, 1, 1, 1, 3][whole];
            assert_eq!(n, want, "cut at {cut} after {whole} sections: {o:?}");
            if whole == 0 {
                assert!(!o.is_available());
                assert!(o.reason().contains("did not finish"), "{}", o.reason());
            }
            if whole >= 2 {
                assert!(o.is_available(), "cut at {cut}: {o:?}");
                assert_eq!(o.threads[0].intervals[0], iv(100, 50, OffKind::Blocked));
            }
            // Only the main thread's section so far: the worker's is missing, and said so.
            if whole == 3 {
                assert!(o
                    .unavailable
                    .as_deref()
                    .unwrap_or("")
                    .contains("some threads"));
            }
        }
        assert_eq!(last, 3);
    }

    /// Rewrites the checksum of the section starting at `at` after its
    /// payload was changed, so the reader decodes the damage itself.
    fn fix_crc(bytes: &mut [u8], at: usize) {
        let mut d = Decoder::new(&bytes[at + 1..], 0);
        let len = d.varint().unwrap() as usize;
        let crc_at = at + 1 + d.pos;
        let payload = crc_at + 4;
        let crc = crc32fast::hash(&bytes[payload..payload + len]);
        bytes[crc_at..payload].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn a_damaged_off_cpu_section_is_a_warning_naming_its_byte_and_what_came_before_stays() {
        let (bytes, ends) = killed();
        // The last section: main's second off-CPU section. Its payload ends
        // with the last interval's kind byte.
        let (at, end) = (ends[4], ends[5]);
        for (k, bad) in [(end - 1, 7u8), (end - 4, 0x80)] {
            let mut b = bytes.clone();
            b[k] = bad;
            fix_crc(&mut b, at);
            let t = Trace::read_from(&b[..]).unwrap();
            let w = t.meta().warnings.join("\n");
            assert!(w.contains(" byte ") && w.contains("off-CPU"), "{w}");
            let o = t.meta().off_cpu.as_ref().unwrap();
            assert_eq!(o.threads[0].intervals, [iv(100, 50, OffKind::Blocked)]);
        }
        // Without the checksum fixed: the checksum says it.
        let mut b = bytes.clone();
        b[end - 1] ^= 1;
        let w = Trace::read_from(&b[..]).unwrap().meta().warnings.join("");
        assert!(w.contains("checksum") && w.contains(" byte "), "{w}");
        // An interval before the end of the thread's previous one.
        let mut w = RecordingWriter::new(Vec::new(), &header()).unwrap();
        w.thread(0, 11, "main").unwrap();
        w.off_cpu(0, 0, &[iv(100, 50, OffKind::Blocked)]).unwrap();
        w.off_cpu(0, 0, &[iv(120, 5, OffKind::Blocked)]).unwrap();
        let t = Trace::read_from(&w.w[..]).unwrap();
        let warn = t.meta().warnings.join("");
        assert!(warn.contains("before the end of the one before"), "{warn}");
        // A thread the file never announced.
        let mut w = RecordingWriter::new(Vec::new(), &header()).unwrap();
        w.off_cpu(3, 0, &[]).unwrap();
        let t = Trace::read_from(&w.w[..]).unwrap();
        let warn = t.meta().warnings.join("");
        assert!(warn.contains("off-CPU section of thread 3"), "{warn}");
    }
}
