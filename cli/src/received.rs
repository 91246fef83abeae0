//! A trace a target sent over its control endpoint (`record --pid`, `ctl
//! stop|dump`), written within a size budget (`--max-size`). The target
//! keeps its trace in memory and sends it whole when it stops; a trace
//! larger than the budget is written up to the budget, as a recording to a
//! file stops at its budget: the file keeps the run's first calls (its
//! chunks in time order, whole, while they fit) and says where it was cut;
//! the calls after are counted, per thread, as lost, with a loss marker
//! where each thread's calls stop.

use fgtrace_trace::encoding::{Chunk, ChunkEncoder};
use fgtrace_trace::file::{write_trace, TraceReader};
use fgtrace_trace::{CutReason, CutShort, Event, LossKind, Lost, TraceMeta};

/// Bytes a chunk takes in a saved file: kind, four varints, the checksum.
fn chunk_len(c: &Chunk) -> u64 {
    1 + 4 * 10 + 4 + c.payload.len() as u64
}

/// A chunk's events.
fn events_of(c: &Chunk) -> Vec<Event> {
    if c.events.is_empty() {
        c.decode().unwrap_or_default()
    } else {
        c.events.clone()
    }
}

/// `events` of `thread` encoded in chunks.
fn encode(thread: u32, events: &[Event]) -> Vec<Chunk> {
    let mut enc = ChunkEncoder::new(thread);
    for e in events {
        enc.push(e);
    }
    enc.finish()
}

/// The encoded chunk (a chunk a reader rebuilt holds its events instead).
fn encoded(c: Chunk) -> Vec<Chunk> {
    if !c.payload.is_empty() || c.events.is_empty() {
        return vec![c];
    }
    encode(c.thread, &c.events)
}

/// Events not kept, of one thread, from `first_ns` on.
struct Cut {
    thread: u32,
    first_ns: u64,
    events: Vec<Event>,
}

/// `bytes`, a saved trace, cut to at most `limit` bytes; `None` where it
/// fits whole. Returns the file's bytes and what was cut: calls, samples.
pub fn within(bytes: &[u8], limit: u64) -> Result<Option<(Vec<u8>, u64, u64)>, String> {
    if bytes.len() as u64 <= limit {
        return Ok(None);
    }
    let damaged = |e| format!("the target sent a damaged trace: {e}");
    let mut r = TraceReader::new(bytes).map_err(damaged)?;
    let meta: TraceMeta = r.meta().clone();
    let mut chunks = Vec::new();
    while let Some(c) = r.next_chunk().map_err(damaged)? {
        chunks.extend(encoded(c));
    }
    // The header's metadata grows by the cut's counts, and each thread
    // gets a loss marker: room for them.
    let fixed = fgtrace_trace::json::to_vec(&meta)
        .map_err(|e| e.to_string())?
        .len() as u64
        + 20
        + 512
        + 128 * meta.threads.len() as u64;
    let mut room = limit.saturating_sub(fixed);
    loop {
        // Whole chunks in time order while they fit, then as much of the
        // next as fits, cut before a call.
        let mut kept = Vec::new();
        let mut used = 0;
        let mut rest = chunks.iter();
        let mut cut = Vec::new();
        for c in rest.by_ref() {
            if used + chunk_len(c) <= room {
                used += chunk_len(c);
                kept.push(c.clone());
                continue;
            }
            let events = events_of(c);
            let starts: Vec<usize> = (0..events.len())
                .filter(|&k| matches!(events[k], Event::Call(_)))
                .collect();
            let fits = |k: usize| {
                let part = encode(c.thread, &events[..k]);
                (used + part.iter().map(chunk_len).sum::<u64>() <= room).then_some(part)
            };
            // The most calls whose prefix fits (a binary search: a longer
            // prefix takes more).
            let at = match starts.first() {
                Some(&s0) if fits(s0).is_some() => {
                    let (mut lo, mut hi) = (0, starts.len());
                    while hi - lo > 1 {
                        let mid = (lo + hi) / 2;
                        if fits(starts[mid]).is_some() {
                            lo = mid;
                        } else {
                            hi = mid;
                        }
                    }
                    starts[lo]
                }
                _ => 0,
            };
            if let Some(part) = fits(at).filter(|_| at > 0) {
                kept.extend(part);
            }
            let first_ns = events.get(at).map_or(c.first_ns, first_time);
            cut.push(Cut {
                thread: c.thread,
                first_ns,
                events: events[at..].to_vec(),
            });
            break;
        }
        cut.extend(rest.map(|c| Cut {
            thread: c.thread,
            first_ns: c.first_ns,
            events: events_of(c),
        }));
        let (out, m) = cut_file(&meta, kept, cut, limit);
        if out.len() as u64 <= limit || room == 0 {
            let c = m.cut_short.as_ref();
            return Ok(Some((
                out,
                c.map_or(0, |c| c.calls_after),
                c.map_or(0, |c| c.samples_after),
            )));
        }
        // The metadata took more than foreseen.
        room = room.saturating_sub(out.len() as u64 - limit);
    }
}

/// When an event happened (ns from the session's start).
fn first_time(e: &Event) -> u64 {
    match e {
        Event::Call(c) => c.start_ns,
        Event::Sample(s) => s.ts_ns,
        Event::Lost(l) => l.at_ns,
        _ => 0,
    }
}

/// The file of `meta` with the `kept` chunks, the events `cut` counted as
/// lost after the cut; and its metadata.
fn cut_file(meta: &TraceMeta, kept: Vec<Chunk>, cut: Vec<Cut>, limit: u64) -> (Vec<u8>, TraceMeta) {
    let mut meta = meta.clone();
    let n = meta.threads.len();
    // Per thread: calls cut, the time and depth of its first cut call.
    let mut lost = vec![0u64; n];
    let mut at: Vec<Option<(u64, u32)>> = vec![None; n];
    let (mut calls_after, mut samples_after) = (0u64, 0u64);
    let first = cut.first().map_or(meta.duration_ns, |c| c.first_ns);
    for c in &cut {
        let t = c.thread as usize;
        let (mut calls, mut samples, mut depth) = (0u64, 0u64, None);
        for e in &c.events {
            match e {
                Event::Call(x) => {
                    calls += 1;
                    depth.get_or_insert(x.depth);
                }
                Event::Sample(_) => samples += 1,
                _ => {}
            }
        }
        if let Some(th) = meta.threads.get_mut(t) {
            th.calls = th.calls.saturating_sub(calls);
            th.lost = th.lost.saturating_add(calls);
            th.samples = th.samples.saturating_sub(samples);
            th.samples_lost = th.samples_lost.saturating_add(samples);
            lost[t] += calls;
            if at[t].is_none() && calls > 0 {
                at[t] = Some((c.first_ns, depth.unwrap_or(0)));
            }
        }
        calls_after += calls;
        samples_after += samples;
    }
    meta.cut_short = Some(CutShort {
        reason: CutReason::Budget,
        limit: Some(limit),
        at_ns: first,
        calls_after,
        samples_after,
    });
    let mut kept = kept;
    // Where each thread's calls stop, a loss marker, after its last chunk.
    for (t, (&n, at)) in lost.iter().zip(&at).enumerate() {
        let Some((at_ns, depth)) = *at else { continue };
        kept.extend(encode(
            t as u32,
            &[Event::Lost(Lost {
                thread: t as u32,
                depth,
                at_ns,
                count: n,
                kind: LossKind::Dropped,
            })],
        ));
    }
    let kept = fgtrace_trace::encoding::interleave(kept);
    let mut out = Vec::new();
    write_trace(&mut out, &meta, &kept).expect("writing to memory");
    (out, meta)
}
