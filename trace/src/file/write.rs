//! Writing trace files: a whole trace at once ([`write_trace`]), or the
//! version-2 file a session writes while it records ([`RecordingWriter`]).

use super::*;

/// Writes a whole trace in the version-1 layout: magic, version, metadata
/// (JSON), then `chunks` with their checksums, then the end marker.
/// `chunks` must be in pre-order per thread, interleaved by
/// [`interleave`](crate::encoding::interleave). Errors are `w`'s.
pub fn write_trace(mut w: impl Write, meta: &TraceMeta, chunks: &[Chunk]) -> io::Result<()> {
    let json = crate::json::to_vec(meta)?;
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

/// A point in a [`RecordingWriter`]'s file (see [`RecordingWriter::mark`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    /// Bytes of the file up to there.
    pub written: u64,
    sections: u64,
}

/// Writes a version-2 file while a session records: a provisional header,
/// then sites, threads, raw chunks and samples as they come, then the final
/// metadata and the end marker. Every section is checksummed, so a file
/// whose writer was killed reads up to its last complete section.
pub struct RecordingWriter<W: Write> {
    pub(super) w: W,
    sections: u64,
    head: Vec<u8>,
    /// Bytes written so far.
    pub written: u64,
}

impl<W: Write> RecordingWriter<W> {
    /// Writes the magic, the version and a provisional header from `meta` (the
    /// final metadata comes at [`RecordingWriter::finish`]).
    pub fn new(mut w: W, meta: &TraceMeta) -> io::Result<Self> {
        let json = crate::json::to_vec(meta)?;
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

    /// Site `index` of the trace (what `Call::site` indexes).
    pub fn site(&mut self, index: u32, info: &crate::SiteInfo) -> io::Result<()> {
        let json = crate::json::to_vec(info)?;
        self.section(SEC_SITE, &[index as u64], &json)
    }

    /// Entry `index` of the string table.
    pub fn string(&mut self, index: u32, text: &str) -> io::Result<()> {
        self.section(SEC_STRING, &[index as u64], text.as_bytes())
    }

    /// Thread `index` of the trace: its OS thread id and name.
    pub fn thread(&mut self, index: u32, tid: u32, name: &str) -> io::Result<()> {
        self.section(SEC_THREAD, &[index as u64, tid as u64], name.as_bytes())
    }

    /// A chunk of raw call records of one thread, in exit order (see
    /// [`recorded`](crate::recorded)).
    pub fn raw(&mut self, c: &crate::recorded::RawChunk) -> io::Result<()> {
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

    /// Off-CPU intervals of `thread` closed since its last off-CPU section
    /// (sorted, apart, none before the previous section's last), and the
    /// switch records lost since. An empty one says the thread is recorded.
    pub fn off_cpu(
        &mut self,
        thread: u32,
        lost: u64,
        intervals: &[crate::OffInterval],
    ) -> io::Result<()> {
        let mut body = Vec::with_capacity(intervals.len() * 6);
        let mut prev_end = 0u64;
        for i in intervals {
            put_varint(&mut body, i.start_ns.saturating_sub(prev_end));
            put_varint(&mut body, i.dur_ns);
            body.push((i.kind == crate::OffKind::Preempted) as u8);
            prev_end = i.end_ns();
        }
        self.section(
            SEC_OFFCPU,
            &[thread as u64, lost, intervals.len() as u64],
            &body,
        )
    }

    /// Flushes the underlying writer: every section written so far is then in
    /// the file, readable if the writer is killed.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// Where the writer is: after the last section handed to it. A file
    /// cut back to this many bytes and this writer [rewound](Self::rewind)
    /// to it reads as if nothing had been written since.
    pub fn mark(&self) -> Mark {
        Mark {
            written: self.written,
            sections: self.sections,
        }
    }

    /// Takes the writer back to `m` over a new `w` (the file cut back to
    /// `m.written` bytes and positioned there), so the sections written
    /// since count no more.
    pub fn rewind(&mut self, m: Mark, w: W) -> W {
        self.written = m.written;
        self.sections = m.sections;
        std::mem::replace(&mut self.w, w)
    }

    /// The underlying writer.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.w
    }

    /// The final metadata, the end marker and the footer (where the final
    /// metadata starts, so [`read_meta`] finds it without reading the
    /// file); returns the writer.
    pub fn finish(mut self, meta: &TraceMeta) -> io::Result<W> {
        let json = crate::json::to_vec(meta)?;
        let meta_at = self.written;
        self.section(SEC_META, &[], &json)?;
        self.head.clear();
        self.head.push(KIND_END);
        put_varint(&mut self.head, self.sections);
        self.head.extend_from_slice(END_MARK);
        // Readers stop at the end marker: the footer is invisible to them.
        self.head.extend_from_slice(&meta_at.to_le_bytes());
        self.head.extend_from_slice(FOOTER_MAGIC);
        self.w.write_all(&self.head)?;
        self.w.flush()?;
        Ok(self.w)
    }
}
