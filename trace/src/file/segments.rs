//! A ring's file read with the segment before it. A recording that keeps
//! the run's end (`ring` at its size budget) writes its file in segments:
//! when one is full it moves to `FILE.prev` and `FILE` starts again, its
//! threads' calls before it counted as overwritten. Right after a switch
//! `FILE` holds few calls and the run's end is mostly in `FILE.prev`, so a
//! reader given `FILE` reads `FILE.prev` first: its raw chunks come before
//! the file's, thread by thread, as they were recorded, and its calls are
//! counted as kept rather than overwritten.
//!
//! Every segment starts with the same header (the recording's provisional
//! metadata, its clock origin included), and site, string and thread
//! indices run on across segments. A `FILE.prev` whose header differs
//! from the file's is another recording's: it is not read, and a warning
//! says so.

use super::{TraceReader, VERSION_RECORDED};
use crate::build::{InFile, Recorded};
use crate::encoding::TraceError;
use crate::TraceMeta;
use std::io;
use std::path::{Path, PathBuf};

/// The segment a ring recording kept before the one at `path`:
/// `FILE.prev` beside it, where there is one.
pub fn segment_before(path: &Path) -> Option<PathBuf> {
    let mut s = path.as_os_str().to_owned();
    s.push(".prev");
    let p = PathBuf::from(s);
    p.is_file().then_some(p)
}

/// What the warning says when `before` is not read.
fn not_read(before: &Path, why: impl std::fmt::Display) -> String {
    let name = before.file_name().unwrap_or(before.as_os_str());
    format!(
        "{} beside it was not read ({why}): the calls it holds are counted as overwritten",
        name.to_string_lossy()
    )
}

/// Whether `before` starts with the first `head` bytes of `file` (the
/// header every segment of one recording repeats).
fn same_recording(file: &std::fs::File, before: &std::fs::File, head: u64) -> io::Result<bool> {
    let mut a = vec![0u8; head as usize];
    let mut b = vec![0u8; head as usize];
    crate::pread::read_exact_at(file, &mut a, 0)?;
    match crate::pread::read_exact_at(before, &mut b, 0) {
        Ok(()) => Ok(a == b),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// Counts the segment before's calls (`before`: its metadata) as the
/// file's: kept, no longer overwritten.
fn add_meta(meta: &mut TraceMeta, before: &TraceMeta) {
    if before.threads.len() > meta.threads.len() {
        // Threads the file has not announced again (it ended soon after
        // the switch).
        let n = meta.threads.len();
        meta.threads
            .extend(before.threads[n..].iter().map(|t| crate::ThreadInfo {
                calls: 0,
                lost: 0,
                samples: 0,
                ..t.clone()
            }));
    }
    // Indices run on across segments: the longer list holds the other.
    if before.sites.len() > meta.sites.len() {
        meta.sites = before.sites.clone();
    }
    if before.strings.len() > meta.strings.len() {
        meta.strings = before.strings.clone();
    }
    let mut calls = 0u64;
    for (t, b) in meta.threads.iter_mut().zip(&before.threads) {
        t.calls = t.calls.saturating_add(b.calls);
        t.lost = t.lost.saturating_sub(b.calls);
        t.samples = t.samples.saturating_add(b.samples);
        calls = calls.saturating_add(b.calls);
    }
    meta.ring_before = Some(calls);
}

/// Reads the segment before a ring's file into what the file's reader
/// found: `meta`, `rec` and `in_file` (the file's raw chunks, left in it).
/// `head`: the length of the file's header. Where `before` cannot be read
/// or is another recording's, a warning says so and nothing changes.
pub(super) fn join_before(
    meta: &mut TraceMeta,
    rec: &mut Recorded,
    in_file: &mut Option<InFile>,
    before: &Path,
    head: u64,
) {
    if meta.ring.is_none() {
        return;
    }
    let Some(f) = in_file.as_mut() else {
        return;
    };
    let read = || -> Result<Option<(TraceMeta, Recorded, InFile)>, TraceError> {
        let b = std::fs::File::open(before)?;
        if !same_recording(&f.files[0], &b, head)? {
            return Ok(None);
        }
        let (mut r, version) =
            TraceReader::header(io::BufReader::with_capacity(1 << 16, b.try_clone()?))?;
        if version != VERSION_RECORDED {
            return Ok(None);
        }
        let (m, rec, in_file) = r.scan_recorded(Some(b))?;
        Ok(in_file.map(|i| (m, rec, i)))
    };
    let (bm, brec, bin) = match read() {
        Ok(Some(x)) => x,
        Ok(None) => {
            meta.warnings.push(not_read(
                before,
                "it is another recording's: its header is not this file's",
            ));
            return;
        }
        Err(e) => {
            meta.warnings.push(not_read(before, e));
            return;
        }
    };
    add_meta(meta, &bm);
    let n = meta.threads.len();
    rec.threads.resize_with(n, Default::default);
    f.chunks.resize_with(n, Vec::new);
    let index = f.files.len() as u32;
    f.files.extend(bin.files);
    let mut bchunks = bin.chunks;
    bchunks.resize_with(n, Vec::new);
    for (t, ((th, chunks), (bth, mut bc))) in rec
        .threads
        .iter_mut()
        .zip(f.chunks.iter_mut())
        .zip(brec.threads.into_iter().zip(bchunks))
        .enumerate()
    {
        for c in &mut bc {
            c.file += index;
        }
        bc.append(chunks);
        *chunks = bc;
        // Calls before the segment before: still overwritten.
        let calls = bm.threads.get(t).map_or(0, |x| x.calls);
        th.overwritten = th.overwritten.saturating_sub(calls);
        let mut samples = bth.samples;
        samples.append(&mut th.samples);
        samples.sort_by_key(|s| s.0);
        th.samples = samples;
    }
}

/// [`join_before`] for the metadata alone (`fgtrace info`): the counts of
/// the segment before the ring's file at `path`, read through.
pub(super) fn join_meta(meta: &mut TraceMeta, path: &Path) {
    if meta.ring.is_none() {
        return;
    }
    let Some(before) = segment_before(path) else {
        return;
    };
    let read = || -> Result<Option<TraceMeta>, TraceError> {
        let f = std::fs::File::open(path)?;
        let (r, _) = TraceReader::header(io::BufReader::new(f.try_clone()?))?;
        let b = std::fs::File::open(&before)?;
        if !same_recording(&f, &b, r.offset)? {
            return Ok(None);
        }
        super::read_meta_alone(&before).map(Some)
    };
    match read() {
        Ok(Some(bm)) => add_meta(meta, &bm),
        Ok(None) => meta.warnings.push(not_read(
            &before,
            "it is another recording's: its header is not this file's",
        )),
        Err(e) => meta.warnings.push(not_read(&before, e)),
    }
}
