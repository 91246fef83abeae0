//! A trace's samples as a pprof profile (`profile.proto`, gzip-compressed),
//! for `go tool pprof`, pprof's web UI, and the many tools that read it.
//!
//! Samples with the same thread and stack are merged into one pprof sample
//! with values `[count, count x period]`; every distinct address becomes a
//! location whose lines are its symbolized frames (inlined functions
//! innermost first, as pprof expects) and which points at the mapping it
//! fell in. Mappings are marked as symbolized, so pprof shows our names
//! rather than re-symbolizing; addresses nothing could name keep no lines,
//! and pprof shows them as hex. The protobuf encoding is written by hand:
//! profile.proto needs only varints and length-delimited fields.

use crate::consume::{collect, Consume};
use crate::threads::{shown, thread_mask, ThreadSel};
use fgtrace_symbols::symbolize::Symbolizer;
use fgtrace_trace::{Event, Sample, TraceError, TraceMeta};
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::io::{self, Write};

/// What goes into the profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PprofOptions {
    /// Only these threads; empty means all.
    pub threads: Vec<ThreadSel>,
}

/// What a written profile holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PprofSummary {
    /// Samples in the profile.
    pub samples: u64,
    /// Distinct (thread, stack) pairs: pprof `Sample` messages.
    pub stacks: usize,
    /// pprof `Location` messages: distinct addresses.
    pub locations: usize,
    /// pprof `Function` messages: distinct names.
    pub functions: usize,
    /// Locations with no name (pprof shows their addresses).
    pub unknown_locations: usize,
}

/// Why no profile was written.
#[derive(Debug)]
pub enum PprofError {
    /// Reading the trace failed.
    Trace(TraceError),
    /// The trace (or the selected threads) holds no samples.
    NoSamples,
    /// Writing the profile failed.
    Io(io::Error),
}

impl fmt::Display for PprofError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PprofError::Trace(e) => write!(f, "{e}"),
            PprofError::NoSamples => write!(
                f,
                "no samples to export (record with FGTRACE_SAMPLE=timer:999 or Config::sampling, \
                 and check the --thread selection)"
            ),
            PprofError::Io(e) => write!(f, "cannot write the profile: {e}"),
        }
    }
}

impl std::error::Error for PprofError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PprofError::Trace(e) => Some(e),
            PprofError::Io(e) => Some(e),
            PprofError::NoSamples => None,
        }
    }
}

impl From<io::Error> for PprofError {
    fn from(e: io::Error) -> Self {
        PprofError::Io(e)
    }
}

/// Merges samples by (thread, stack) as they stream by; memory is one entry
/// per distinct stack.
pub struct ProfileBuilder<'m> {
    meta: &'m TraceMeta,
    mask: Vec<bool>,
    filtered: bool,
    stacks: HashMap<(u32, Vec<u64>), u64>,
    samples: u64,
}

impl<'m> ProfileBuilder<'m> {
    /// A profile builder for `meta`'s trace; of `opts`, the thread selection
    /// applies here.
    pub fn new(meta: &'m TraceMeta, opts: &PprofOptions) -> Self {
        ProfileBuilder {
            meta,
            mask: thread_mask(meta, &opts.threads),
            filtered: !opts.threads.is_empty(),
            stacks: HashMap::new(),
            samples: 0,
        }
    }

    /// Counts one sample on its stack; samples without frames and of threads not
    /// selected are left out.
    pub fn sample(&mut self, s: &Sample) {
        if s.frames.is_empty() || !shown(&self.mask, self.filtered, s.thread) {
            return;
        }
        self.samples += 1;
        *self.stacks.entry((s.thread, s.frames.clone())).or_default() += 1;
    }

    /// Samples merged so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The uncompressed `Profile` message, names from `sym`.
    pub fn encode(self, sym: &mut Symbolizer) -> (Vec<u8>, PprofSummary) {
        encode(self, sym)
    }
}

impl Consume for ProfileBuilder<'_> {
    type Error = Infallible;

    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        if let Event::Sample(s) = ev {
            self.sample(s);
        }
        Ok(())
    }
}

/// Reads the samples of `events`, symbolizes them and writes a gzipped pprof
/// profile to `out`. Nothing is written when reading fails or there are no samples.
pub fn write_pprof<W: Write>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    opts: &PprofOptions,
    sym: &mut Symbolizer,
    out: W,
) -> Result<PprofSummary, PprofError> {
    let mut b = ProfileBuilder::new(meta, opts);
    collect(&mut b, events).map_err(PprofError::Trace)?;
    if b.samples == 0 {
        return Err(PprofError::NoSamples);
    }
    let (bytes, summary) = b.encode(sym);
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&bytes)?;
    gz.finish()?.flush()?;
    Ok(summary)
}

/// `(sample type, unit, period)` of the second value from the trace's
/// sampling description: `timer@999Hz` is CPU time, `wall@..Hz` wall time,
/// `cycles every 100000 events` counts cycles.
fn value_kind(sampling: Option<&str>) -> Option<(String, &'static str, i64)> {
    let s = sampling?;
    if let Some((name, rate)) = s.split_once('@') {
        let hz: u64 = rate.strip_suffix("Hz")?.parse().ok().filter(|&hz| hz > 0)?;
        let kind = if name == "wall" { "wall" } else { "cpu" };
        return Some((kind.to_owned(), "nanoseconds", (1_000_000_000 / hz) as i64));
    }
    let (name, rest) = s.split_once(" every ")?;
    let n: i64 = rest.strip_suffix(" events")?.parse().ok()?;
    Some((name.to_owned(), "count", n))
}

/// A tiny protobuf writer: what profile.proto needs.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }
    /// A varint field; zero is the default and is left out, as proto3 does.
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v);
        }
    }
    fn int(&mut self, field: u32, v: i64) {
        self.uint(field, v as u64);
    }
    fn bool(&mut self, field: u32, v: bool) {
        self.uint(field, u64::from(v));
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn msg(&mut self, field: u32, f: impl FnOnce(&mut Pb)) {
        let mut inner = Pb::default();
        f(&mut inner);
        self.bytes(field, &inner.0);
    }
    fn packed(&mut self, field: u32, vals: impl IntoIterator<Item = u64>) {
        let mut inner = Pb::default();
        for v in vals {
            inner.varint(v);
        }
        if !inner.0.is_empty() {
            self.bytes(field, &inner.0);
        }
    }
}

/// The string table: index 0 is "", as pprof requires.
struct Strings {
    table: Vec<String>,
    ids: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        Strings {
            table: vec![String::new()],
            ids: HashMap::from([(String::new(), 0)]),
        }
    }
    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.ids.insert(s.to_owned(), i);
        i
    }
}

/// `Profile` field numbers (profile.proto).
mod field {
    pub const SAMPLE_TYPE: u32 = 1;
    pub const SAMPLE: u32 = 2;
    pub const MAPPING: u32 = 3;
    pub const LOCATION: u32 = 4;
    pub const FUNCTION: u32 = 5;
    pub const STRING_TABLE: u32 = 6;
    pub const TIME_NANOS: u32 = 9;
    pub const DURATION_NANOS: u32 = 10;
    pub const PERIOD_TYPE: u32 = 11;
    pub const PERIOD: u32 = 12;
    pub const COMMENT: u32 = 13;
}

fn encode(b: ProfileBuilder<'_>, sym: &mut Symbolizer) -> (Vec<u8>, PprofSummary) {
    let meta = b.meta;
    let mut strings = Strings::new();
    let mut out = Pb::default();

    let kind = value_kind(meta.sampling.as_deref());
    let samples_t = (strings.id("samples"), strings.id("count"));
    let value_t = kind
        .as_ref()
        .map(|(t, u, _)| (strings.id(t), strings.id(u)));
    for (t, u) in std::iter::once(samples_t).chain(value_t) {
        out.msg(field::SAMPLE_TYPE, |m| {
            m.int(1, t);
            m.int(2, u);
        });
    }

    // Mappings: the traced program's own first (pprof treats mapping 1 as
    // the main binary), then the rest in address order.
    let program = std::path::Path::new(&meta.program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let is_main = |path: &str| {
        program.as_deref().is_some_and(|p| {
            std::path::Path::new(path)
                .file_name()
                .is_some_and(|n| *n == *p)
        })
    };
    let mut order: Vec<usize> = (0..sym.mappings().len()).collect();
    order.sort_by_key(|&i| !is_main(&sym.mappings()[i].path));
    let mut mapping_id = vec![0u64; order.len()];
    for (n, &i) in order.iter().enumerate() {
        mapping_id[i] = n as u64 + 1;
    }
    for &i in &order {
        let m = sym.mappings()[i].clone();
        let (file, build_id) = (
            strings.id(&m.path),
            strings.id(m.build_id.as_deref().unwrap_or("")),
        );
        out.msg(field::MAPPING, |p| {
            p.uint(1, mapping_id[i]);
            p.uint(2, m.start);
            p.uint(3, m.end);
            p.uint(4, m.offset);
            p.int(5, file);
            p.int(6, build_id);
            for f in 7..=10 {
                p.bool(f, true); // has_functions, has_filenames, has_line_numbers, has_inline_frames
            }
        });
    }

    // Locations by looked-up address (return addresses minus one), functions by (name, file).
    let mut locations: HashMap<u64, u64> = HashMap::new();
    let mut functions: HashMap<(String, Option<String>), u64> = HashMap::new();
    let mut loc_msgs = Pb::default();
    let mut fn_msgs = Pb::default();
    let mut unknown_locations = 0;
    let mut sample_msgs = Pb::default();
    let period = kind.as_ref().map(|k| k.2);
    let thread_key = strings.id("thread");
    let mut stacks: Vec<_> = b.stacks.into_iter().collect();
    stacks.sort_unstable(); // deterministic output
    for ((thread, addrs), count) in &stacks {
        let mut ids = Vec::with_capacity(addrs.len());
        for (i, &a) in addrs.iter().enumerate() {
            let probe = if i > 0 { a.saturating_sub(1) } else { a };
            if let Some(&id) = locations.get(&probe) {
                ids.push(id);
                continue;
            }
            let id = locations.len() as u64 + 1;
            locations.insert(probe, id);
            ids.push(id);
            let mapping = sym.mapping(probe).map_or(0, |(m, _)| mapping_id[m]);
            let frames = sym.frames(a, i > 0).to_vec();
            let known: Vec<_> = frames.iter().filter(|f| !f.is_unknown()).collect();
            if known.is_empty() {
                unknown_locations += 1;
            }
            let mut lines = Vec::new();
            for f in known {
                let key = (f.name.clone(), f.file.clone());
                let fid = match functions.get(&key) {
                    Some(&fid) => fid,
                    None => {
                        let fid = functions.len() as u64 + 1;
                        let (name, file) = (
                            strings.id(&f.name),
                            strings.id(f.file.as_deref().unwrap_or("")),
                        );
                        fn_msgs.msg(field::FUNCTION, |p| {
                            p.uint(1, fid);
                            p.int(2, name);
                            p.int(3, name);
                            p.int(4, file);
                        });
                        functions.insert(key, fid);
                        fid
                    }
                };
                lines.push((fid, f.line.unwrap_or(0)));
            }
            loc_msgs.msg(field::LOCATION, |p| {
                p.uint(1, id);
                p.uint(2, mapping);
                p.uint(3, probe);
                for (fid, line) in &lines {
                    p.msg(4, |l| {
                        l.uint(1, *fid);
                        l.int(2, i64::from(*line));
                    });
                }
            });
        }
        let label = strings.id(&meta.thread_label(*thread));
        sample_msgs.msg(field::SAMPLE, |p| {
            p.packed(1, ids.iter().copied());
            let values =
                std::iter::once(*count as i64).chain(period.map(|per| *count as i64 * per));
            p.packed(2, values.map(|v| v as u64));
            p.msg(3, |l| {
                l.int(1, thread_key);
                l.int(2, label);
            });
        });
    }
    out.0.extend_from_slice(&sample_msgs.0);
    out.0.extend_from_slice(&loc_msgs.0);
    out.0.extend_from_slice(&fn_msgs.0);

    let comment = strings.id(&format!("fgtrace: {}", meta.program_and_pid()));
    out.uint(field::TIME_NANOS, meta.clock.start_unix_ns);
    out.uint(field::DURATION_NANOS, meta.duration_ns);
    let period_t = value_t.unwrap_or(samples_t);
    out.msg(field::PERIOD_TYPE, |m| {
        m.int(1, period_t.0);
        m.int(2, period_t.1);
    });
    out.int(field::PERIOD, period.unwrap_or(1));
    out.int(field::COMMENT, comment);
    for s in &strings.table {
        out.bytes(field::STRING_TABLE, s.as_bytes());
    }
    let summary = PprofSummary {
        samples: b.samples,
        stacks: stacks.len(),
        locations: locations.len(),
        functions: functions.len(),
        unknown_locations,
    };
    (out.0, summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_types_from_the_sampling_description() {
        assert_eq!(
            value_kind(Some("timer@1000Hz")),
            Some(("cpu".into(), "nanoseconds", 1_000_000))
        );
        assert_eq!(
            value_kind(Some("cpu-clock@999Hz")),
            Some(("cpu".into(), "nanoseconds", 1_001_001))
        );
        assert_eq!(
            value_kind(Some("wall@100Hz")),
            Some(("wall".into(), "nanoseconds", 10_000_000))
        );
        assert_eq!(
            value_kind(Some("cycles every 100000 events")),
            Some(("cycles".into(), "count", 100_000))
        );
        assert_eq!(value_kind(Some("timer@0Hz")), None);
        assert_eq!(value_kind(Some("??")), None);
        assert_eq!(value_kind(None), None);
    }

    #[test]
    fn varints_and_defaults() {
        let mut p = Pb::default();
        p.uint(1, 0); // default: omitted
        p.uint(1, 300);
        p.int(2, -1);
        p.bytes(6, b"");
        assert_eq!(
            p.0,
            [
                0x08, 0xac, 0x02, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                0x32, 0x00
            ]
        );
    }

    #[test]
    fn no_samples_is_an_error_and_writes_nothing() {
        let meta = TraceMeta::default();
        let mut out = Vec::new();
        let r = write_pprof(
            &meta,
            Vec::new(),
            &PprofOptions::default(),
            &mut Symbolizer::new(&[]),
            &mut out,
        );
        assert!(matches!(r, Err(PprofError::NoSamples)));
        assert!(out.is_empty());
    }
}
