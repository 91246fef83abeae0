//! The host side of fgtrace on a board: decodes the framed stream a board
//! sends (`fgtrace_board::wire`) into ordinary [`Trace`]s, one per recording
//! session, so every view works on a board run.
//!
//! The decoder takes bytes as they come (from a file, a serial device, a
//! socket or a child's stdout), resynchronises after garbage, flipped,
//! dropped or inserted bytes, and counts what it lost: bytes skipped, frames
//! missing from the sequence, and, from the board's own counters, calls and
//! samples that never arrived. Those losses are in the trace (per hart), so
//! every view shows them. Console text the board sends comes out as it is.

/// The RTT control block's layout, which `fgtrace board --gdb` reads.
pub use fgtrace_board::rtt;
use fgtrace_board::wire::{self, Reader, Scan};
use fgtrace_core::record::{ext, kind, RawCall, MAX_DEPTH};
use fgtrace_trace::build::{self, MetaBase, ThreadInput};
use fgtrace_trace::clock::{Calibration, ClockPoint};
use fgtrace_trace::recorded::{full_ticks, TextOf};
use fgtrace_trace::{saturating_sum, Mapping, RecordMode, SiteInfo, Trace};
use std::collections::{BTreeMap, HashMap};

/// What the decoder saw of the transport.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Bytes received.
    pub bytes: u64,
    /// Bytes that were not part of a valid frame (garbage, damaged frames).
    pub skipped_bytes: u64,
    /// Valid frames.
    pub frames: u64,
    /// Frames missing from the sequence numbers.
    pub missing_frames: u64,
    /// Valid frames whose payload did not parse (a newer format?).
    pub bad_payloads: u64,
    /// Data frames of a session whose metadata never arrived.
    pub orphan_frames: u64,
    /// What was wrong with bad payloads, where the decoder can say (the
    /// first 16).
    pub bad_payload_reasons: Vec<String>,
}

/// Something the decoder has for the caller as soon as it is decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Console text from the board.
    Text(String),
    /// A recording session ended on the board.
    SessionEnded(u32),
}

/// The board's own counters for one hart (a `STATS` frame).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HartStats {
    /// Calls written to the hart's buffer (all of them, in flight mode).
    pub written: u64,
    /// Calls dropped on the board (stream: refused; flight: overwritten).
    pub dropped: u64,
    /// Timer samples taken.
    pub samples_taken: u64,
    /// Samples dropped on the board (full queue).
    pub samples_dropped: u64,
    /// Calls deeper than the shadow stack.
    pub overruns: u64,
    /// Bytes the sink refused.
    pub refused_bytes: u64,
    /// Calls open on the hart when the session stopped (from wire version
    /// 4; 0 before): they ended after it, so it never recorded them.
    pub open_at_stop: u64,
    /// Lean calls written (the first hart of a board with a cycle clock;
    /// flight: all of them; from wire version 4).
    pub lean_written: u64,
    /// Lean calls dropped on the board (stream: refused or no buffer free).
    pub lean_dropped: u64,
    /// Records among `written` that are not calls (extension records,
    /// whole futures, markers; from wire version 6, 0 before): the records
    /// that never arrived are calls but for these.
    pub non_calls: u64,
}

/// How a hart's records arrived against the board's numbering of them.
#[derive(Default)]
struct Numbering {
    /// Index of the next record expected.
    next: u64,
    /// Records skipped over in the numbering: sent, never received.
    gaps: u64,
    /// The first record's number that arrived.
    first: Option<u64>,
}

impl Numbering {
    /// `n` records numbered from `first` arrived: false for a repeat (the
    /// first copy is kept).
    fn arrive(&mut self, first: u64, n: usize) -> bool {
        if first < self.next {
            return false;
        }
        self.first.get_or_insert(first);
        self.gaps = self.gaps.saturating_add(first - self.next);
        self.next = first.saturating_add(n as u64);
        true
    }
}

#[derive(Default)]
struct Hart {
    records: Vec<RawCall>,
    /// The records' numbering (the board numbers them per hart).
    numbered: Numbering,
    /// (ticks, depth, cut, frames)
    samples: Vec<(u64, u32, Option<u32>, Vec<u64>)>,
    /// Per sample, the frame pointer of each frame's record (empty: the
    /// board sent none).
    sample_fps: Vec<Vec<u64>>,
    /// Lean calls (entry and exit times, no depth: nested by time).
    lean: Vec<wire::LeanRecord>,
    /// Lean calls' numbering (apart from the other records').
    lean_numbered: Numbering,
    /// Lean calls open at stop that ended after it ([`wire::LATE`]).
    late: u64,
    /// Records received that are not calls ([`RawCall::non_calls`](fgtrace_core::record::RawCall::non_calls)).
    non_calls: u64,
    stats: Option<HartStats>,
}

struct Session {
    gen: u32,
    /// The wire version its META gave.
    version: u8,
    mode: u8,
    ticks_per_sec: u64,
    start_ticks: u64,
    sample_hz: u32,
    /// The counter the board's probe reads (`rdtime`, `mcycle`, `tsc`).
    clock: String,
    /// The per-call counters the records carry (`instructions`).
    counters: Vec<String>,
    name: String,
    harts: BTreeMap<u8, Hart>,
    ended: bool,
    /// Frames lost while this session was current (spread over its harts).
    missing_frames: u64,
}

/// A decoded session, ready to become a trace.
pub struct BoardSession {
    session: Session,
    sites: HashMap<u32, SiteInfo>,
}

impl BoardSession {
    /// The board's session number.
    pub fn id(&self) -> u32 {
        self.session.gen
    }
    /// It ended with an `END` frame (else the stream was cut).
    pub fn ended(&self) -> bool {
        self.session.ended
    }
    /// The board's counters per hart, where a `STATS` frame arrived.
    pub fn stats(&self) -> Vec<(u8, HartStats)> {
        (self.session.harts.iter())
            .filter_map(|(h, x)| x.stats.map(|s| (*h, s)))
            .collect()
    }

    /// The trace: one thread per hart, calls in pre-order, samples, losses;
    /// `mappings` lets the views symbolize sampled addresses (the firmware's
    /// ELF, see [`elf_mappings`]). String values are placeholders (see
    /// [`BoardSession::into_trace_with`]).
    pub fn into_trace(self, mappings: Vec<Mapping>) -> Trace {
        self.into_trace_with(mappings, None)
    }

    /// [`BoardSession::into_trace`], with the texts of string values read
    /// by `text_of` (the firmware's ELF, [`ElfStrings::text_of`]); `None`:
    /// each is a placeholder naming its address and length, counted in
    /// the trace's warnings.
    pub fn into_trace_with(self, mappings: Vec<Mapping>, text_of: Option<TextOf>) -> Trace {
        let s = self.session;
        let tps = s.ticks_per_sec.max(1);
        let ticks_per_ns = tps as f64 / 1e9;
        let ns = |t: u64| -> u64 {
            (t.saturating_sub(s.start_ticks) as u128 * 1_000_000_000 / tps as u128)
                .min(u64::MAX as u128) as u64
        };
        let mut end_ticks = s.start_ticks;
        let mut inputs = Vec::new();
        let mut warnings = Vec::new();
        for (id, mut h) in s.harts {
            let flight = s.mode == wire::MODE_FLIGHT;
            let (trimmed, overlapped) = nest_by_time(&mut h, s.start_ticks, flight);
            if overlapped > 0 {
                warnings.push(format!(
                    "hart {id}: {} began inside another call and ended after it (a task \
                     switch?): not nested, counted lost",
                    calls(overlapped)
                ));
            }
            for r in &h.records {
                let start = full_ticks(r.start_low(), s.start_ticks);
                end_ticks = end_ticks.max(start.saturating_add(r.dur()));
            }
            if let Some(x) = h.samples.last() {
                end_ticks = end_ticks.max(x.0);
            }
            // Records are numbered per hart: gaps in the numbering, and a
            // tail the counters say was sent, never arrived.
            // Calls open at stop never ended in the session: counted with
            // its losses (every view shows them), and named in its warnings.
            let (overwritten, dropped, samples_lost, overruns) = match h.stats {
                Some(st) => {
                    // Lean calls are numbered apart: the same accounting.
                    let lean_tail = st.lean_written.saturating_sub(h.lean_numbered.next);
                    let (lean_over, lean_lost) = if flight {
                        // The ring's first kept record's number: those before
                        // it were overwritten on the board.
                        let over = h.lean_numbered.first.unwrap_or(h.lean_numbered.next);
                        (over, h.lean_numbered.gaps.saturating_sub(over) + lean_tail)
                    } else {
                        (0, st.lean_dropped + h.lean_numbered.gaps + lean_tail)
                    };
                    let tail = st.written.saturating_sub(h.numbered.next);
                    let kept_samples = st.samples_taken.saturating_sub(st.samples_dropped);
                    let samples_lost =
                        st.samples_dropped + kept_samples.saturating_sub(h.samples.len() as u64);
                    // Lean calls have no frame to count at stop: theirs arrive
                    // as they end.
                    let open_at_stop = st.open_at_stop.saturating_add(h.late);
                    if open_at_stop > 0 {
                        warnings.push(format!(
                            "hart {id}: {} still open at stop: not recorded (they ended after \
                             the session), counted lost",
                            calls(open_at_stop)
                        ));
                    }
                    // Written on the board (numbered, or counted in
                    // `written`), never received: frames lost on the way,
                    // or records still in the hart's buffer when the
                    // session stopped on another hart (counted `written`
                    // there, never sent).
                    let gaps = if flight {
                        // The ring's first kept record is numbered `dropped`:
                        // everything before it was overwritten on the board.
                        h.numbered.gaps.saturating_sub(st.dropped)
                    } else {
                        h.numbered.gaps
                    };
                    // Of the records that never arrived, those that are not
                    // calls (a future's, a marker's, an extension record)
                    // are not lost calls: in flight mode the ring overwrote
                    // most of them (its `dropped` counts records), the rest
                    // are in the gaps and the tail.
                    let mut k = st.non_calls.saturating_sub(h.non_calls);
                    let mut calls_of = |records: u64| {
                        let not = records.min(k);
                        k -= not;
                        records - not
                    };
                    let ring_over = if flight {
                        calls_of(st.dropped)
                    } else {
                        st.dropped
                    };
                    let gaps = calls_of(gaps);
                    let tail = calls_of(tail);
                    let lean_unarrived = if flight {
                        lean_lost
                    } else {
                        h.lean_numbered.gaps + lean_tail
                    };
                    let unarrived = saturating_sum([gaps, tail, lean_unarrived]);
                    if unarrived > 0 {
                        warnings.push(format!(
                            "hart {id}: {} written on the board never arrived (their frames \
                             lost, or still in the hart's buffer when the session stopped), \
                             counted lost",
                            calls(unarrived)
                        ));
                    }
                    if flight {
                        let lost =
                            saturating_sum([gaps, tail, open_at_stop, lean_lost, overlapped]);
                        let over = saturating_sum([ring_over, lean_over, trimmed]);
                        (over, lost, samples_lost, st.overruns)
                    } else {
                        let lost = saturating_sum([
                            ring_over,
                            gaps,
                            tail,
                            open_at_stop,
                            lean_lost,
                            overlapped,
                        ]);
                        (0, lost, samples_lost, st.overruns)
                    }
                }
                // No counters arrived: the numbering still shows the gaps; a
                // frame missing at the end shows as at least one call.
                None => (
                    trimmed,
                    saturating_sum([
                        h.numbered.gaps,
                        h.lean_numbered.gaps,
                        h.late,
                        overlapped,
                        (s.missing_frames > 0 && h.numbered.gaps == 0) as u64,
                    ]),
                    0,
                    0,
                ),
            };
            let samples = h
                .samples
                .into_iter()
                .map(|(t, d, c, f)| (ns(t), d, c, f))
                .collect();
            inputs.push(ThreadInput {
                tid: id as u32,
                name: format!("hart {id}"),
                records: h.records,
                overwritten,
                dropped,
                overruns,
                samples,
                samples_lost,
            });
        }
        let base = MetaBase {
            program: s.name,
            pid: 0,
            clock_source: s.clock.clone(),
            cal: Calibration {
                origin: ClockPoint {
                    ticks: s.start_ticks,
                    mono_ns: 0,
                    unix_ns: 0,
                },
                ticks_per_ns,
            },
            end_ticks,
            mode: if s.mode == wire::MODE_FLIGHT {
                RecordMode::FlightRecorder
            } else {
                RecordMode::Stream
            },
            filters: String::new(),
            counters: s.counters,
        };
        let sites = self.sites;
        let mut trace = build::build(base, inputs, |id| sites.get(&id).cloned(), text_of);
        trace.meta.warnings.extend(warnings);
        trace.meta.sampling = (s.sample_hz > 0).then(|| format!("board-timer@{}Hz", s.sample_hz));
        trace.meta.mappings = mappings;
        trace
    }
}

/// A hart's calls with lean ones among them (a board whose clock never
/// reads the same twice): every call is nested by time, lean or not, since
/// a lean call carries no depth and the others' depths count only the calls
/// on the shadow stack. With such a clock a callee's entry is after its
/// caller's and its exit before, and two calls that do not nest do not
/// overlap, so containment is exact; an interrupt's calls nest under the
/// call they interrupted, as on the shadow stack. The records come back in
/// exit order (a call's extension records after it), and each sample's
/// depth and cut are those of the innermost call open at its time: the cut
/// of a lean call is the first of the sample's frames whose record lies at
/// or above the call's stack pointer (where the shadow stack cuts too).
///
/// A flight recorder keeps the last lean calls and the last other calls in
/// two rings, which reach back to different times: what ended before the
/// later of the two rings' oldest exits is dropped, so that the trace holds
/// every call since (a window with no holes); returns how many calls that
/// drops, which count as overwritten.
///
/// A call that begins inside another and ends after it (two tasks' calls
/// interleaved by a task switch) nests in neither: it is left out and
/// counted (the second number returned), as the shadow stack loses such a
/// call.
fn nest_by_time(h: &mut Hart, origin: u64, flight: bool) -> (u64, u64) {
    if h.lean.is_empty() {
        return (0, 0);
    }
    struct Unit {
        start: u64,
        end: u64,
        /// Nests (a call or a poll), else ordered after the call before it.
        interval: bool,
        recs: Vec<RawCall>,
        /// A lean call's stack pointer (the sample's cut).
        sp: Option<u64>,
    }
    let mut units = Vec::with_capacity(h.records.len() + h.lean.len());
    let general = std::mem::take(&mut h.records);
    let mut last_end = origin;
    let mut i = 0;
    while i < general.len() {
        let r = general[i];
        let mut j = i + 1;
        while j < general.len() && general[j].is_ext() {
            j += 1;
        }
        let interval = !r.is_ext() && matches!(r.kind(), kind::CALL | kind::POLL);
        let (start, end) = if interval {
            let s = full_ticks(r.start_low(), origin);
            (s, s.saturating_add(r.dur()))
        } else {
            (last_end, last_end)
        };
        if interval {
            last_end = end;
        }
        units.push(Unit {
            start,
            end,
            interval,
            recs: general[i..j].to_vec(),
            sp: None,
        });
        i = j;
    }
    for l in std::mem::take(&mut h.lean) {
        let start = full_ticks(l.start, origin);
        units.push(Unit {
            start,
            end: start.saturating_add(l.dur),
            interval: true,
            recs: vec![RawCall::pack(l.start, 0, l.dur, l.site, false, kind::CALL)],
            sp: Some(l.sp),
        });
    }
    let mut trimmed = 0;
    if flight {
        let oldest = |lean: bool| {
            (units.iter())
                .filter(|u| u.interval && u.sp.is_some() == lean)
                .map(|u| u.end)
                .min()
        };
        let lean_over = h.lean_numbered.first.is_some_and(|f| f > 0);
        let other_over = h.stats.is_some_and(|st| st.dropped > 0);
        let cutoff = [(lean_over, oldest(true)), (other_over, oldest(false))]
            .into_iter()
            .filter_map(|(over, end)| end.filter(|_| over))
            .max();
        if let Some(c) = cutoff {
            units.retain(|u| {
                let keep = u.end >= c;
                // A call or a poll: a whole future, a marker (its
                // zero-length record and its extension) and a count of
                // lost records are records the ring took, but no calls.
                let head = u.recs[0];
                let marker = (u.recs.iter()).any(|r| r.is_ext() && r.ext_sub() == ext::MARKER);
                if !keep && head.non_calls() == 0 && !marker {
                    trimmed += 1;
                }
                keep
            });
        }
    }
    // Pre-order: by entry, the longer first.
    let mut pre: Vec<usize> = (0..units.len()).filter(|&u| units[u].interval).collect();
    pre.sort_by_key(|&u| (units[u].start, std::cmp::Reverse(units[u].end)));
    let contains = |o: &Unit, u: &Unit| u.start < o.end && u.end <= o.end;
    let mut depth = vec![0u32; units.len()];
    let mut overlapping = vec![false; units.len()];
    let mut open: Vec<usize> = Vec::new();
    for &u in &pre {
        while let Some(&o) = open.last() {
            if contains(&units[o], &units[u]) {
                break;
            }
            if units[u].start < units[o].end {
                overlapping[u] = true;
                break;
            }
            open.pop();
        }
        if !overlapping[u] {
            depth[u] = open.len() as u32;
            open.push(u);
        }
    }
    let overlapped = overlapping.iter().filter(|&&x| x).count() as u64;
    let pre: Vec<usize> = pre.into_iter().filter(|&u| !overlapping[u]).collect();
    // Each sample against the calls open at its time.
    let mut order: Vec<usize> = (0..h.samples.len()).collect();
    order.sort_by_key(|&k| h.samples[k].0);
    let (mut next, mut open) = (0, Vec::<usize>::new());
    for k in order {
        let t = h.samples[k].0;
        while next < pre.len() && units[pre[next]].start <= t {
            let u = pre[next];
            while open
                .last()
                .is_some_and(|&o| !contains(&units[o], &units[u]))
            {
                open.pop();
            }
            open.push(u);
            next += 1;
        }
        while open.last().is_some_and(|&o| units[o].end <= t) {
            open.pop();
        }
        let s = &mut h.samples[k];
        match open.last() {
            None => {
                s.1 = 0;
                s.2 = None;
            }
            Some(&o) => {
                s.1 = depth[o] + 1;
                if let Some(sp) = units[o].sp {
                    let fps = h.sample_fps.get(k).map_or(&[][..], |v| &v[..]);
                    s.2 = fps
                        .iter()
                        .position(|&f| f != 0 && f >= sp)
                        .map(|i| i as u32);
                }
            }
        }
    }
    for (u, unit) in units.iter_mut().enumerate() {
        if unit.interval {
            let r = unit.recs[0];
            unit.recs[0] = RawCall::pack(
                r.start_low(),
                depth[u].min(MAX_DEPTH),
                r.dur(),
                r.site(),
                r.unwound(),
                r.kind(),
            );
        }
    }
    // Exit order; what does not nest stays after the call it followed.
    let mut units: Vec<Unit> = (units.into_iter().zip(overlapping))
        .filter(|(_, x)| !x)
        .map(|(u, _)| u)
        .collect();
    units.sort_by_key(|u| (u.end, !u.interval));
    h.records = units.into_iter().flat_map(|u| u.recs).collect();
    (trimmed, overlapped)
}

/// `1 call`, `3 calls`.
fn calls(n: u64) -> String {
    format!("{n} call{}", if n == 1 { "" } else { "s" })
}

/// Decodes a board's byte stream.
#[derive(Default)]
pub struct Decoder {
    pending: Vec<u8>,
    stats: DecodeStats,
    last_seq: Option<u16>,
    sites: HashMap<u32, SiteInfo>,
    current: Option<Session>,
    done: Vec<Session>,
    /// Data frames that came before any META (bounded).
    orphans: Vec<(u8, u8, Vec<u8>)>,
}

impl Decoder {
    /// A decoder with nothing received yet.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Transport counters so far.
    pub fn stats(&self) -> &DecodeStats {
        &self.stats
    }

    /// Feeds received bytes; returns console text and session ends as they
    /// are decoded. Never panics, whatever the bytes.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Output> {
        self.stats.bytes += bytes.len() as u64;
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            match wire::next_frame(&self.pending[at..]) {
                Scan::Frame {
                    frame,
                    skipped,
                    used,
                } => {
                    self.stats.skipped_bytes += skipped as u64;
                    let (seq, kind, hart) = (frame.seq, frame.kind, frame.hart);
                    let payload = frame.payload.to_vec();
                    at += used;
                    self.frame(seq, kind, hart, &payload, &mut out);
                }
                Scan::NeedMore { skipped } => {
                    self.stats.skipped_bytes += skipped as u64;
                    at += skipped;
                    break;
                }
            }
        }
        self.pending.drain(..at);
        out
    }

    /// Ends the stream: what is left unparsed counts as skipped; returns every
    /// session seen (a session cut short is returned too: `ended()` says).
    pub fn finish(mut self) -> (Vec<BoardSession>, DecodeStats) {
        self.stats.skipped_bytes += self.pending.len() as u64;
        self.stats.orphan_frames += self.orphans.len() as u64;
        if let Some(s) = self.current.take() {
            self.done.push(s);
        }
        let sites = self.sites;
        let sessions = self
            .done
            .into_iter()
            .map(|session| BoardSession {
                session,
                sites: sites.clone(),
            })
            .collect();
        (sessions, self.stats)
    }

    /// Keeps a data frame that came before its session's META.
    fn orphan(&mut self, kind: u8, hart: u8, p: &[u8]) -> Option<()> {
        if self.orphans.len() < 4096 {
            self.orphans.push((kind, hart, p.to_vec()));
            Some(())
        } else {
            None
        }
    }

    fn frame(&mut self, seq: u16, kind: u8, hart: u8, p: &[u8], out: &mut Vec<Output>) {
        self.stats.frames += 1;
        if let Some(last) = self.last_seq {
            let gap = seq.wrapping_sub(last).wrapping_sub(1) as u64;
            // A huge gap is a restarted board, not 60,000 lost frames.
            if gap > 0 && gap < 0x8000 {
                self.stats.missing_frames += gap;
                if let Some(s) = &mut self.current {
                    s.missing_frames += gap;
                }
            }
        }
        self.last_seq = Some(seq);
        if self.parse(kind, hart, p, out).is_none() {
            self.stats.bad_payloads += 1;
        }
    }

    /// A hart's records numbered from `first` (a `CALLS` or `CALLS_PACKED`
    /// frame's), or the frame kept for a session yet to come.
    fn calls(
        &mut self,
        kind: u8,
        hart: u8,
        p: &[u8],
        first: u64,
        recs: Vec<RawCall>,
    ) -> Option<()> {
        let Some(s) = self.current.as_mut() else {
            return self.orphan(kind, hart, p);
        };
        let h = s.harts.entry(hart).or_default();
        if !h.numbered.arrive(first, recs.len()) {
            return None;
        }
        h.non_calls += wire::non_calls(&recs);
        h.records.extend(recs);
        Some(())
    }

    /// Why a frame that passed its CRC did not decode (the first 16).
    fn bad_payload(&mut self, why: String) {
        if self.stats.bad_payload_reasons.len() < 16 {
            self.stats.bad_payload_reasons.push(why);
        }
    }

    fn parse(&mut self, kind: u8, hart: u8, p: &[u8], out: &mut Vec<Output>) -> Option<()> {
        let mut r = Reader::new(p);
        match kind {
            wire::META => {
                let version = r.u8()?;
                if version == 0 || version > wire::VERSION {
                    return None;
                }
                let mode = r.u8()?;
                let _harts = r.u8()?;
                let ticks_per_sec = r.u64()?;
                let start_ticks = r.u64()?;
                let gen = r.u32()?;
                let sample_hz = r.u32()?;
                // Version 1 had no clock name: it was always `rdtime`.
                let (clock, counters) = if version >= 2 {
                    let clock = r.str()?.to_owned();
                    let n = r.u8()?;
                    let mut counters = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        counters.push(r.str()?.to_owned());
                    }
                    (clock, counters)
                } else {
                    ("rdtime".to_owned(), Vec::new())
                };
                let name = String::from_utf8_lossy(r.bytes(r.remaining())?).into_owned();
                let same = self.current.as_ref().is_some_and(|s| s.gen == gen);
                let repeat_of_done = self.done.last().is_some_and(|s| s.gen == gen && s.ended);
                if !same && !repeat_of_done {
                    if let Some(prev) = self.current.take() {
                        self.done.push(prev);
                    }
                    let orphans = std::mem::take(&mut self.orphans);
                    self.current = Some(Session {
                        gen,
                        version,
                        mode,
                        ticks_per_sec,
                        start_ticks,
                        sample_hz,
                        clock,
                        counters,
                        name,
                        harts: BTreeMap::new(),
                        ended: false,
                        missing_frames: 0,
                    });
                    // Records that came before this session's first META
                    // (lost or damaged) are this session's.
                    for (k, h, p) in orphans {
                        let mut sink = Vec::new();
                        let _ = self.parse(k, h, &p, &mut sink);
                    }
                }
            }
            wire::SITE => {
                let id = r.u32()?;
                let line = r.u32()?;
                let is_async = r.u8()? != 0;
                let name = r.str()?.to_owned();
                let module_path = r.str()?.to_owned();
                let file = r.str()?.to_owned();
                // Then the names of the site's recorded values (firmware
                // built before values sends none).
                let mut values = Vec::new();
                if r.remaining() > 0 {
                    for _ in 0..r.u8()? {
                        values.push(r.str()?.to_owned());
                    }
                }
                self.sites.insert(
                    id,
                    SiteInfo {
                        name,
                        module_path,
                        file,
                        line,
                        is_async,
                        values,
                    },
                );
            }
            wire::CALLS => {
                if p.len() < 8 || (p.len() - 8) % 16 != 0 {
                    return None;
                }
                let first = r.u64()?;
                let mut recs = Vec::with_capacity(r.remaining() / 16);
                while r.remaining() >= 16 {
                    recs.push(RawCall(r.u64()?, r.u64()?));
                }
                return self.calls(kind, hart, p, first, recs);
            }
            wire::CALLS_PACKED => {
                let first = r.u64()?;
                let mut recs = Vec::new();
                let rest = r.bytes(r.remaining())?;
                if let Err(e) = wire::unpack_calls(rest, |c| recs.push(c)) {
                    // The frame passed its CRC, so the board sent this: a
                    // firmware of another format. Its records are not
                    // guessed at; the board's counters show them as lost.
                    self.bad_payload(format!("CALLS_PACKED frame, records from {first}: {e}"));
                    return None;
                }
                return self.calls(kind, hart, p, first, recs);
            }
            wire::LEAN_CALLS => {
                let first = r.u64()?;
                let mut recs = Vec::new();
                let rest = r.bytes(r.remaining())?;
                let Some(version) = self.current.as_ref().map(|s| s.version) else {
                    return self.orphan(kind, hart, p);
                };
                if let Err(e) = wire::unpack_lean(rest, version, |c| recs.push(c)) {
                    self.bad_payload(format!("LEAN_CALLS frame, records from {first}: {e}"));
                    return None;
                }
                let s = self.current.as_mut()?;
                let h = s.harts.entry(hart).or_default();
                if !h.lean_numbered.arrive(first, recs.len()) {
                    return None;
                }
                h.lean.extend(recs);
            }
            wire::SAMPLES | wire::SAMPLES_FP => {
                // Parsed whole before any is kept: a damaged frame adds none.
                let mut got = Vec::new();
                while r.remaining() > 0 {
                    let ticks = r.u64()?;
                    let depth = r.u16()? as u32;
                    let cut = r.u16()?;
                    let n = r.u8()? as usize;
                    if n > wire::MAX_FRAMES {
                        return None;
                    }
                    let mut frames = Vec::with_capacity(n);
                    for _ in 0..n {
                        frames.push(r.u64()?);
                    }
                    let mut fps = Vec::new();
                    if kind == wire::SAMPLES_FP {
                        let mut fp = wire::FpCoder::default();
                        for _ in 0..n {
                            fps.push(fp.decode(r.varint()?));
                        }
                    }
                    let cut = (cut != wire::NO_CUT).then_some(cut as u32);
                    got.push(((ticks, depth, cut, frames), fps));
                }
                let Some(s) = self.current.as_mut() else {
                    return self.orphan(kind, hart, p);
                };
                let h = s.harts.entry(hart).or_default();
                for (x, fps) in got {
                    h.samples.push(x);
                    h.sample_fps.push(fps);
                }
            }
            wire::STATS => {
                let Some(s) = self.current.as_mut() else {
                    return self.orphan(kind, hart, p);
                };
                let mut st = HartStats {
                    written: r.u64()?,
                    dropped: r.u64()?,
                    samples_taken: r.u64()?,
                    samples_dropped: r.u64()?,
                    overruns: r.u64()?,
                    refused_bytes: r.u64()?,
                    open_at_stop: 0,
                    lean_written: 0,
                    lean_dropped: 0,
                    non_calls: 0,
                };
                // Version 4 counts the calls open at stop and the lean
                // calls: a STATS frame without them is a bad payload, not a
                // session with none.
                if s.version >= 4 {
                    st.open_at_stop = r.u64()?;
                    st.lean_written = r.u64()?;
                    st.lean_dropped = r.u64()?;
                }
                if s.version >= 6 {
                    st.non_calls = r.u64()?;
                }
                s.harts.entry(hart).or_default().stats = Some(st);
            }
            wire::LATE => {
                let gen = r.u32()?;
                let late = r.u64()?;
                // After its END: the session is done, or still current.
                let s = (self.current.iter_mut())
                    .chain(self.done.iter_mut().rev())
                    .find(|s| s.gen == gen)?;
                let h = s.harts.entry(hart).or_default();
                h.late = h.late.max(late);
            }
            wire::TEXT => {
                out.push(Output::Text(String::from_utf8_lossy(p).into_owned()));
            }
            wire::END => {
                let gen = r.u32()?;
                if let Some(mut s) = self.current.take() {
                    if s.gen == gen {
                        s.ended = true;
                        out.push(Output::SessionEnded(gen));
                    }
                    self.done.push(s);
                }
            }
            _ => return None,
        }
        Some(())
    }
}

/// The read-only loadable segments of a firmware ELF (link addresses and
/// file bytes): where the host reads a board's string values, which the
/// board records as the address and length of a `&'static str` (in
/// `.rodata`, or wherever the linker put it in a segment that is not
/// writable).
pub struct ElfStrings {
    segments: Vec<(u64, Vec<u8>)>,
}

impl ElfStrings {
    /// The read-only loadable segments of the ELF at `path`.
    pub fn read(path: &std::path::Path) -> Result<ElfStrings, String> {
        use object::{Object, ObjectSegment, SegmentFlags};
        let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let obj = object::File::parse(&*data)
            .map_err(|e| format!("{}: not an ELF file ({e})", path.display()))?;
        const PF_W: u32 = 2;
        let segments = obj
            .segments()
            .filter(|s| !matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & PF_W != 0))
            .filter_map(|s| Some((s.address(), s.data().ok()?.to_vec())))
            .filter(|(_, d)| !d.is_empty())
            .collect();
        Ok(ElfStrings { segments })
    }

    /// The text of the string at `addr`, `len` bytes long (at most
    /// [`MAX_STR`](fgtrace_core::values::MAX_STR) of them, cut with `…`);
    /// `Err` with the placeholder `<str 0x...+N not in ELF>` when the whole
    /// string is not inside one read-only segment.
    pub fn text(&self, addr: u64, len: u32) -> Result<String, String> {
        for (start, data) in &self.segments {
            let Some(off) = addr.checked_sub(*start) else {
                continue;
            };
            if off.saturating_add(len as u64) <= data.len() as u64 {
                let off = off as usize;
                let n = (len as usize).min(fgtrace_core::values::MAX_STR);
                return Ok(build::text_of_bytes(&data[off..off + n], len));
            }
        }
        Err(format!("<str {addr:#x}+{len} not in ELF>"))
    }

    /// [`ElfStrings::text`] as the trace builder takes it.
    pub fn text_of(self) -> TextOf {
        Box::new(move |addr, len| self.text(addr, len))
    }
}

/// The firmware ELF's loadable segments as mappings (address = link
/// address), so the views symbolize sampled addresses against it.
pub fn elf_mappings(path: &std::path::Path) -> Result<Vec<Mapping>, String> {
    use object::{Object, ObjectSegment};
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let obj = object::File::parse(&*data)
        .map_err(|e| format!("{}: not an ELF file ({e})", path.display()))?;
    let build_id = obj
        .build_id()
        .ok()
        .flatten()
        .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>());
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let maps: Vec<Mapping> = obj
        .segments()
        .filter(|s| s.size() > 0)
        .map(|s| {
            let (offset, _) = s.file_range();
            Mapping {
                start: s.address(),
                end: s.address() + s.size(),
                offset,
                path: abs.to_string_lossy().into_owned(),
                build_id: build_id.clone(),
            }
        })
        .collect();
    if maps.is_empty() {
        return Err(format!("{}: no loadable segments", path.display()));
    }
    Ok(maps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fgtrace_trace::Event;

    /// Fills a frame's payload.
    type Fill<'f> = &'f dyn Fn(&mut Writer<'_>);

    /// A stream of hart-0 frames, numbered from 0, each payload filled by
    /// its function.
    /// A version-2 stream's META frame: one hart, a 1 GHz `mcycle` clock,
    /// no counters, program `demo`.
    fn mcycle_meta(w: &mut Writer<'_>) {
        w.u8(2)
            .u8(wire::MODE_STREAM)
            .u8(1)
            .u64(1_000_000_000)
            .u64(1000)
            .u32(1)
            .u32(0)
            .str("mcycle")
            .u8(0)
            .bytes(b"demo");
    }

    fn stream_of(frames: &[(u8, Fill<'_>)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (seq, (kind, fill)) in frames.iter().enumerate() {
            let mut p = [0u8; MAX_PAYLOAD];
            let mut w = Writer::new(&mut p);
            fill(&mut w);
            let len = w.len;
            let mut f = [0u8; HEADER + MAX_PAYLOAD + TRAILER];
            let n = encode(&mut f, seq as u16, *kind, 0, &p[..len]);
            out.extend_from_slice(&f[..n]);
        }
        out
    }
    use fgtrace_board::wire::{encode, Writer, HEADER, MAX_PAYLOAD, TRAILER};

    /// A small stream as a board sends it: META, two sites, calls of a
    /// parent and two children, a sample, STATS, TEXT, END.
    fn stream() -> Vec<u8> {
        let mut out = Vec::new();
        let mut seq = 0u16;
        let mut frame = |kind: u8, hart: u8, fill: &dyn Fn(&mut Writer<'_>)| {
            let mut p = [0u8; MAX_PAYLOAD];
            let mut w = Writer::new(&mut p);
            fill(&mut w);
            let len = w.len;
            let mut f = [0u8; HEADER + MAX_PAYLOAD + TRAILER];
            let n = encode(&mut f, seq, kind, hart, &p[..len]);
            seq += 1;
            out.extend_from_slice(&f[..n]);
        };
        frame(wire::META, 0, &|w| {
            w.u8(wire::VERSION)
                .u8(wire::MODE_STREAM)
                .u8(1)
                .u64(10_000_000)
                .u64(1000)
                .u32(1)
                .u32(0)
                .str("mcycle")
                .u8(0)
                .bytes(b"demo");
        });
        for (id, name) in [(0u32, "parent"), (1, "child")] {
            frame(wire::SITE, 0, &|w| {
                w.u32(id).u32(7).u8(0).str(name).str("demo").str("main.rs");
            });
        }
        frame(wire::CALLS, 0, &|w| {
            w.u64(0);
            for r in [
                RawCall::pack(1010, 1, 5, 1, false, 0),
                RawCall::pack(1020, 1, 5, 1, false, 0),
                RawCall::pack(1000, 0, 40, 0, false, 0),
            ] {
                w.u64(r.0).u64(r.1);
            }
        });
        frame(wire::SAMPLES, 0, &|w| {
            w.u64(1015)
                .u16(2)
                .u16(0)
                .u8(2)
                .u64(0x8000_0100)
                .u64(0x8000_0200);
        });
        frame(wire::STATS, 0, &|w| {
            w.u64(3)
                .u64(0)
                .u64(1)
                .u64(0)
                .u64(0)
                .u64(0)
                .u64(0)
                .u64(0)
                .u64(0)
                .u64(0);
        });
        frame(wire::TEXT, 0, &|w| {
            w.bytes(b"truth parent 1");
        });
        frame(wire::END, 0, &|w| {
            w.u32(1);
        });
        out
    }

    /// From wire version 4 a STATS frame ends with the calls still open on
    /// its hart at stop: they count as lost and the trace's warnings name
    /// them; a version 3 STATS has no such field (none counted), and a
    /// version 4 one cut before it is a bad payload, never read as none.
    #[test]
    fn calls_still_open_at_stop_count_as_lost_and_are_named() {
        let frames = |version: u8, stats: &dyn Fn(&mut Writer<'_>)| {
            let meta = move |w: &mut Writer<'_>| {
                w.u8(version)
                    .u8(wire::MODE_STREAM)
                    .u8(1)
                    .u64(1_000_000_000)
                    .u64(1000)
                    .u32(1)
                    .u32(0)
                    .str("mcycle")
                    .u8(0)
                    .bytes(b"demo");
            };
            stream_of(&[
                (wire::META, &meta),
                (wire::SITE, &|w| {
                    w.u32(0).u32(7).u8(0).str("leaf").str("demo").str("main.rs");
                }),
                (wire::CALLS, &|w| {
                    let r = RawCall::pack(1010, 2, 40, 0, false, 0);
                    w.u64(0).u64(r.0).u64(r.1);
                }),
                (wire::STATS, stats),
                (wire::END, &|w| {
                    w.u32(1);
                }),
            ])
        };
        let six = |w: &mut Writer<'_>| {
            w.u64(1).u64(0).u64(0).u64(0).u64(0).u64(0);
        };
        // Version 4: then calls open at stop, lean calls written and dropped.
        let nine = |w: &mut Writer<'_>| {
            six(w);
            w.u64(2).u64(0).u64(0);
        };
        let (sessions, st, _) = decode(&frames(4, &nine), 5);
        assert_eq!(st.bad_payloads, 0);
        assert_eq!(sessions[0].stats()[0].1.open_at_stop, 2);
        let t = sessions.into_iter().next().unwrap().into_trace(Vec::new());
        assert_eq!((t.calls().count(), t.meta().threads[0].lost), (1, 2));
        assert_eq!(
            t.meta().warnings,
            [
                "hart 0: 2 calls still open at stop: not recorded (they ended after the session), \
              counted lost"
            ]
        );

        let (sessions, st, _) = decode(&frames(3, &six), 5);
        assert_eq!(st.bad_payloads, 0);
        let t = sessions.into_iter().next().unwrap().into_trace(Vec::new());
        assert_eq!((t.calls().count(), t.meta().threads[0].lost), (1, 0));
        assert!(t.meta().warnings.is_empty(), "{:?}", t.meta().warnings);

        let (sessions, st, _) = decode(&frames(4, &six), 5);
        assert_eq!(
            st.bad_payloads, 1,
            "a version 4 STATS without its last field"
        );
        assert!(sessions[0].stats().is_empty());
    }

    /// META version 1 (no clock name, no counters) reads as `rdtime`;
    /// version 2 names the clock and the per-call counters, whose extension
    /// records come out as each call's counters.
    #[test]
    fn the_clock_and_counters_come_from_meta() {
        let frames = |meta: &dyn Fn(&mut Writer<'_>), calls: &[RawCall]| {
            stream_of(&[
                (wire::META, meta),
                (wire::SITE, &|w| {
                    w.u32(0).u32(7).u8(0).str("leaf").str("demo").str("main.rs");
                }),
                (wire::CALLS, &|w| {
                    w.u64(0);
                    for r in calls {
                        w.u64(r.0).u64(r.1);
                    }
                }),
                (wire::END, &|w| {
                    w.u32(1);
                }),
            ])
        };
        let head = |w: &mut Writer<'_>, version: u8| {
            w.u8(version)
                .u8(wire::MODE_STREAM)
                .u8(1)
                .u64(1_000_000_000)
                .u64(1000)
                .u32(1)
                .u32(0);
        };
        let call = RawCall::pack(1010, 0, 40, 0, false, 0);
        let v1 = frames(
            &|w| {
                head(w, 1);
                w.bytes(b"demo");
            },
            &[call],
        );
        let t = first_trace(&v1, 5);
        assert_eq!(t.meta().clock.source, "rdtime");
        assert!(t.meta().counters.is_empty());
        assert_eq!(t.calls().count(), 1);

        let counter = RawCall::ext(fgtrace_core::record::ext::COUNTER, 33, 0);
        let v2 = frames(
            &|w| {
                head(w, 2);
                w.str("mcycle").u8(1).str("instructions").bytes(b"demo");
            },
            &[call, counter],
        );
        let t = first_trace(&v2, 5);
        assert_eq!(t.meta().clock.source, "mcycle");
        assert_eq!(t.meta().counters, ["instructions"]);
        let counters: Vec<Vec<u64>> = t
            .events()
            .filter_map(|e| match e {
                fgtrace_trace::Event::Counters(c) => Some(c.values),
                _ => None,
            })
            .collect();
        assert_eq!(counters, [vec![33]], "the call's instructions");
        assert_eq!(t.calls().count(), 1);
    }

    /// A site's value names ride after its file in the SITE frame (firmware
    /// from before values sends none); its calls' values then read with them.
    #[test]
    fn value_names_come_with_the_site_and_name_the_calls_values() {
        let frames = |site: &dyn Fn(&mut Writer<'_>)| {
            stream_of(&[
                (wire::META, &mcycle_meta),
                (wire::SITE, site),
                (wire::CALLS, &|w| {
                    w.u64(0);
                    let call = RawCall::pack(1010, 0, 40, 0, false, 0);
                    // len = 83 (slot 0, unsigned)
                    let len = RawCall::ext(fgtrace_core::record::ext::VALUE, 83, 1 << 3);
                    for r in [call, len] {
                        w.u64(r.0).u64(r.1);
                    }
                }),
                (wire::END, &|w| {
                    w.u32(1);
                }),
            ])
        };
        let named = frames(&|w| {
            w.u32(0)
                .u32(7)
                .u8(0)
                .str("parse")
                .str("demo")
                .str("main.rs")
                .u8(1)
                .str("len");
        });
        let t = first_trace(&named, 7);
        assert_eq!(t.meta().sites[0].values, ["len"]);
        let values: Vec<(String, u64)> = t
            .events()
            .filter_map(|e| match e {
                fgtrace_trace::Event::Values(v) => Some(
                    v.named(&t.meta().sites[0], &t.meta().strings)
                        .map(|(n, v)| (n.to_string(), v.bits))
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(values, [("len".to_string(), 83)]);

        let old = frames(&|w| {
            w.u32(0)
                .u32(7)
                .u8(0)
                .str("parse")
                .str("demo")
                .str("main.rs");
        });
        let t = first_trace(&old, 7);
        assert!(t.meta().sites[0].values.is_empty());
        assert_eq!(t.calls().count(), 1);
    }

    /// A minimal 64-bit little-endian ELF with two loadable segments: `ro`
    /// (read-only) at 0x1000 and `rw` (writable) at 0x2000.
    fn tiny_elf(ro: &[u8], rw: &[u8]) -> Vec<u8> {
        let mut e = Vec::new();
        e.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
        e.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        e.extend_from_slice(&0xf3u16.to_le_bytes()); // RISC-V
        e.extend_from_slice(&1u32.to_le_bytes());
        e.extend_from_slice(&0u64.to_le_bytes()); // entry
        e.extend_from_slice(&64u64.to_le_bytes()); // program headers
        e.extend_from_slice(&0u64.to_le_bytes()); // no section headers
        e.extend_from_slice(&0u32.to_le_bytes());
        for h in [64u16, 56, 2, 64, 0, 0] {
            e.extend_from_slice(&h.to_le_bytes());
        }
        let data_at = 64 + 2 * 56;
        let segs = [
            (4u32, 0x1000u64, ro, data_at),
            (6, 0x2000, rw, data_at + ro.len()),
        ];
        for (flags, addr, bytes, off) in segs {
            e.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
            e.extend_from_slice(&flags.to_le_bytes());
            for v in [
                off as u64,
                addr,
                addr,
                bytes.len() as u64,
                bytes.len() as u64,
                8,
            ] {
                e.extend_from_slice(&v.to_le_bytes());
            }
        }
        e.extend_from_slice(ro);
        e.extend_from_slice(rw);
        e
    }

    #[test]
    fn string_values_are_read_from_the_elfs_read_only_data_or_shown_as_placeholders() {
        use fgtrace_core::values::tag;
        let ro = b"....bad digitident";
        let elf_path = std::env::temp_dir().join(format!("fgtrace-elf-{}", std::process::id()));
        std::fs::write(&elf_path, tiny_elf(ro, b"mutable")).unwrap();
        let elf = ElfStrings::read(&elf_path).unwrap();
        std::fs::remove_file(&elf_path).ok();
        // (address, length): in .rodata, twice the same; another; in the
        // writable segment; running past the read-only segment's end; nowhere.
        let strs = [
            (0x1004u64, 9u32),
            (0x1004, 9),
            (0x100d, 5),
            (0x2000, 7),
            (0x100d, 6),
            (0x9000_0000, 3),
        ];
        let stream = stream_of(&[
            (wire::META, &mcycle_meta),
            (wire::SITE, &|w| {
                w.u32(0)
                    .u32(7)
                    .u8(0)
                    .str("lex")
                    .str("demo")
                    .str("main.rs")
                    .u8(1)
                    .str("kind");
            }),
            (wire::CALLS, &|w| {
                w.u64(0);
                for (i, (addr, len)) in strs.iter().enumerate() {
                    let call = RawCall::pack(1010 + i as u64 * 100, 0, 40, 0, false, 0);
                    let b = (tag::STR as u64) << 3 | (*len as u64) << 11;
                    let v = RawCall::ext(fgtrace_core::record::ext::VALUE, *addr, b);
                    for r in [call, v] {
                        w.u64(r.0).u64(r.1);
                    }
                }
            }),
            (wire::END, &|w| {
                w.u32(1);
            }),
        ]);
        let shown = |t: &Trace| -> Vec<String> {
            t.events()
                .filter_map(|e| match e {
                    fgtrace_trace::Event::Values(v) => Some(
                        v.named(&t.meta().sites[0], &t.meta().strings)
                            .map(|(_, v)| v.to_string())
                            .collect::<Vec<_>>(),
                    ),
                    _ => None,
                })
                .flatten()
                .collect()
        };
        let (sessions, _, _) = decode(&stream, 13);
        let t = sessions
            .into_iter()
            .next()
            .unwrap()
            .into_trace_with(Vec::new(), Some(elf.text_of()));
        assert_eq!(
            shown(&t),
            [
                "\"bad digit\"",
                "\"bad digit\"",
                "\"ident\"",
                "\"<str 0x2000+7 not in ELF>\"",
                "\"<str 0x100d+6 not in ELF>\"",
                "\"<str 0x90000000+3 not in ELF>\""
            ]
        );
        assert_eq!(t.meta().strings.len(), 5, "{:?}", t.meta().strings);
        assert!(
            t.meta()
                .warnings
                .iter()
                .any(|w| w.starts_with("3 string values could not be read")),
            "{:?}",
            t.meta().warnings
        );
        // Without an ELF: every string a placeholder, counted, never a panic.
        let t = first_trace(&stream, 64);
        assert_eq!(shown(&t)[0], "\"<str 0x1004+9 unreadable>\"");
        assert!(t.meta().warnings[0].starts_with("5 string values could not be read"));
    }

    /// The small stream with its CALLS frame sent as CALLS_PACKED (what
    /// firmware sends from wire version 3), its payload made by `pack`.
    fn packed_stream(pack: &dyn Fn(&[RawCall], &mut Writer<'_>)) -> Vec<u8> {
        let recs = [
            RawCall::pack(1010, 1, 5, 1, false, 0),
            RawCall::pack(1020, 1, 5, 1, false, 0),
            RawCall::pack(1000, 0, 40, 0, false, 0),
        ];
        let meta = |w: &mut Writer<'_>| {
            w.u8(3)
                .u8(wire::MODE_STREAM)
                .u8(1)
                .u64(10_000_000)
                .u64(1000)
                .u32(1)
                .u32(0)
                .str("mcycle")
                .u8(0)
                .bytes(b"demo");
        };
        let site = |id: u32, name: &'static str| {
            move |w: &mut Writer<'_>| {
                w.u32(id).u32(7).u8(0).str(name).str("demo").str("main.rs");
            }
        };
        let (parent, child) = (site(0, "parent"), site(1, "child"));
        stream_of(&[
            (wire::META, &meta),
            (wire::SITE, &parent),
            (wire::SITE, &child),
            (wire::CALLS_PACKED, &|w| pack(&recs, w)),
            (wire::STATS, &|w| {
                w.u64(3).u64(0).u64(0).u64(0).u64(0).u64(0);
            }),
            (wire::END, &|w| {
                w.u32(1);
            }),
        ])
    }

    /// Version 3 packs the records: the trace is the one the 16-byte
    /// records make, in any chunking.
    #[test]
    fn packed_calls_decode_as_the_records_they_pack() {
        let bytes = packed_stream(&|recs, w| {
            let mut b = [0u8; 256];
            let (n, used) = wire::pack_calls(&mut b, recs);
            assert_eq!(n, recs.len());
            w.u64(0).bytes(&b[..used]);
        });
        for step in [1, 5, 4096] {
            let (sessions, st, _) = decode(&bytes, step);
            assert_eq!(
                (st.bad_payloads, st.skipped_bytes, st.missing_frames),
                (0, 0, 0)
            );
            let t = sessions.into_iter().next().unwrap().into_trace(Vec::new());
            let calls: Vec<_> = t
                .calls()
                .map(|c| {
                    (
                        t.meta().site_name(c.site).to_string(),
                        c.depth,
                        c.start_ns,
                        c.dur_ns,
                    )
                })
                .collect();
            assert_eq!(
                calls,
                [
                    ("parent".into(), 0, 0, 4000),
                    ("child".into(), 1, 1000, 500),
                    ("child".into(), 1, 2000, 500)
                ]
            );
            assert_eq!(t.meta().threads[0].lost, 0);
        }
    }

    /// A packed payload that passed its CRC but does not decode (cut short,
    /// or bits no firmware writes): a bad payload with its reason, its
    /// records counted lost from the board's own counters, never a panic
    /// and never a record made up.
    #[test]
    fn a_packed_payload_that_does_not_decode_is_a_bad_payload_with_its_reason() {
        let mut whole = [0u8; 256];
        let recs = [
            RawCall::pack(1010, 1, 5, 1, false, 0),
            RawCall::pack(1020, 1, 5, 1, false, 0),
            RawCall::pack(1000, 0, 40, 0, false, 0),
        ];
        let (_, used) = wire::pack_calls(&mut whole, &recs);
        let cuts: Vec<Vec<u8>> = (1..used)
            .filter(|&cut| {
                // Cuts at a record's end are whole records (the STATS
                // frame then counts the rest lost): only the others here.
                (0..=3).all(|k| wire::pack_calls(&mut [0u8; 256], &recs[..k]).1 != cut)
            })
            .map(|cut| whole[..cut].to_vec())
            .chain([vec![3u8], vec![0x80; 12]])
            .collect();
        assert!(cuts.len() > 5);
        for body in cuts {
            let bytes = packed_stream(&|_, w| {
                w.u64(0).bytes(&body);
            });
            let (sessions, st, _) = decode(&bytes, 7);
            assert_eq!(st.bad_payloads, 1, "{body:?}");
            assert_eq!(st.bad_payload_reasons.len(), 1, "{body:?}");
            assert!(
                st.bad_payload_reasons[0].starts_with("CALLS_PACKED frame, records from 0: a "),
                "{:?}",
                st.bad_payload_reasons
            );
            let t = sessions.into_iter().next().unwrap().into_trace(Vec::new());
            assert_eq!(t.calls().count(), 0, "{body:?}");
            assert_eq!(
                t.meta().threads[0].lost,
                3,
                "{body:?}: STATS said 3 were written"
            );
        }
    }

    /// The first session of `bytes` (fed `step` bytes at a time) as a trace.
    fn first_trace(bytes: &[u8], step: usize) -> Trace {
        let (sessions, _, _) = decode(bytes, step);
        sessions.into_iter().next().unwrap().into_trace(Vec::new())
    }

    fn decode(bytes: &[u8], step: usize) -> (Vec<BoardSession>, DecodeStats, Vec<Output>) {
        let mut d = Decoder::new();
        let mut outs = Vec::new();
        for chunk in bytes.chunks(step.max(1)) {
            outs.extend(d.push(chunk));
        }
        let (s, st) = d.finish();
        (s, st, outs)
    }

    #[test]
    fn a_whole_stream_becomes_a_trace_in_any_chunking() {
        for step in [1, 3, 17, 4096] {
            let (sessions, st, outs) = decode(&stream(), step);
            assert_eq!(st.skipped_bytes, 0);
            assert_eq!(st.missing_frames, 0);
            assert!(outs.contains(&Output::Text("truth parent 1".into())));
            assert!(outs.contains(&Output::SessionEnded(1)));
            assert_eq!(sessions.len(), 1);
            assert!(sessions[0].ended());
            let t = sessions.into_iter().next().unwrap().into_trace(Vec::new());
            let calls: Vec<_> = t
                .calls()
                .map(|c| (t.meta().site_name(c.site).to_string(), c.depth))
                .collect();
            assert_eq!(
                calls,
                [
                    ("parent".into(), 0),
                    ("child".into(), 1),
                    ("child".into(), 1)
                ]
            );
            assert_eq!(t.meta().threads[0].lost, 0);
            assert_eq!(t.meta().threads[0].samples, 1);
            assert_eq!(t.meta().clock.source, "mcycle", "the board's clock");
            let first = t.calls().next().unwrap();
            assert_eq!((first.start_ns, first.dur_ns), (0, 4000), "10 MHz ticks");
        }
    }

    #[test]
    fn corrupted_streams_decode_with_losses_counted_never_a_panic() {
        let good = stream();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..2000 {
            let mut b = good.clone();
            for _ in 0..1 + rnd() % 4 {
                let at = (rnd() as usize) % b.len();
                match rnd() % 3 {
                    0 => b[at] ^= 1 << (rnd() % 8),
                    1 => {
                        b.remove(at);
                    }
                    _ => b.insert(at, rnd() as u8),
                }
            }
            let (sessions, st, _) = decode(&b, 1 + (rnd() as usize % 64));
            // Something was lost somewhere, and it shows.
            let lost_calls: u64 = sessions
                .into_iter()
                .map(|s| {
                    let t = s.into_trace(Vec::new());
                    t.meta().threads.iter().map(|t| t.lost).sum::<u64>()
                })
                .sum();
            assert!(
                st.skipped_bytes > 0
                    || st.missing_frames > 0
                    || st.bad_payloads > 0
                    || lost_calls > 0
                    || b == good,
                "round {round}: damage went unnoticed: {st:?}"
            );
        }
    }

    #[test]
    fn a_lost_calls_frame_is_counted_from_the_boards_own_counters() {
        let good = stream();
        // Drop the CALLS frame: find it by decoding frame boundaries.
        let mut frames = Vec::new();
        let mut at = 0;
        while let Scan::Frame { frame, used, .. } = wire::next_frame(&good[at..]) {
            frames.push((at, at + used, frame.kind));
            at += used;
        }
        let (s, e, _) = frames.iter().find(|f| f.2 == wire::CALLS).copied().unwrap();
        let mut b = good[..s].to_vec();
        b.extend_from_slice(&good[e..]);
        let (sessions, st, _) = decode(&b, 7);
        assert_eq!(st.missing_frames, 1);
        let t = sessions.into_iter().next().unwrap().into_trace(Vec::new());
        assert_eq!(t.calls().count(), 0);
        assert_eq!(t.meta().threads[0].lost, 3, "STATS said 3 were written");
        // And says why: calls the board wrote (a lost frame's, or records
        // another hart's stop found unsent in this one's buffer) never came.
        assert_eq!(
            t.meta().warnings,
            [
                "hart 0: 3 calls written on the board never arrived (their frames lost, or \
                 still in the hart's buffer when the session stopped), counted lost"
            ]
        );
    }

    /// Records that are not calls (a whole future, an extension record,
    /// a marker and its extension) in a frame that never arrives are not
    /// lost calls: the board counts them among the records it numbers
    /// (STATS' last field), and the host counts as lost only the calls
    /// among the records it never received, exactly.
    #[test]
    fn records_that_are_not_calls_are_not_counted_as_lost_calls() {
        use fgtrace_core::record::ext;
        let call = |start: u64| RawCall::pack(start, 0, 5, 0, false, kind::CALL);
        let lost_frame = [
            call(1000),
            RawCall::pack(990, 1, 20, 0, false, kind::FUTURE),
            RawCall::ext(ext::FUTURE, 0x2000_0000, 0),
            RawCall::pack(1010, 0, 0, 0, false, kind::CALL),
            RawCall::ext(ext::MARKER, 0, 0),
            call(1020),
        ];
        assert_eq!(wire::non_calls(&lost_frame), 4);
        let arrived = [
            call(1030),
            RawCall::pack(1025, 1, 20, 0, false, kind::FUTURE),
            RawCall::ext(ext::FUTURE, 0x2000_0010, 0),
        ];
        let written = (lost_frame.len() + arrived.len()) as u64;
        let calls_frame = |first: u64, recs: &'static [RawCall]| {
            move |w: &mut Writer<'_>| {
                w.u64(first);
                for r in recs {
                    w.u64(r.0).u64(r.1);
                }
            }
        };
        let lost_frame: &'static [RawCall] = Box::leak(Box::new(lost_frame));
        let arrived: &'static [RawCall] = Box::leak(Box::new(arrived));
        let meta_of = |mode: u8| {
            move |w: &mut Writer<'_>| {
                w.u8(wire::VERSION)
                    .u8(mode)
                    .u8(1)
                    .u64(1_000_000_000)
                    .u64(1000)
                    .u32(1)
                    .u32(0)
                    .str("mcycle")
                    .u8(0)
                    .bytes(b"demo");
            }
        };
        let meta = meta_of(wire::MODE_STREAM);
        let site = |w: &mut Writer<'_>| {
            w.u32(0).u32(7).u8(0).str("f").str("demo").str("main.rs");
        };
        // written, dropped (flight: the ring's first kept record's number),
        // samples taken and dropped, overruns, refused, open at stop, lean
        // written and dropped, and the records that are not calls.
        let stats_of = move |dropped: u64| {
            move |w: &mut Writer<'_>| {
                for v in [written, dropped, 0, 0, 0, 0, 0, 0, 0, 6] {
                    w.u64(v);
                }
            }
        };
        let stats = stats_of(0);
        let end = |w: &mut Writer<'_>| {
            w.u32(1);
        };
        let first = calls_frame(0, lost_frame);
        let second = calls_frame(lost_frame.len() as u64, arrived);
        let whole = stream_of(&[
            (wire::META, &meta),
            (wire::SITE, &site),
            (wire::CALLS, &first),
            (wire::CALLS, &second),
            (wire::STATS, &stats),
            (wire::END, &end),
        ]);
        let t = first_trace(&whole, 4096);
        assert_eq!((t.meta().total_calls(), t.meta().total_lost()), (3, 0));
        // Without the first CALLS frame: its 2 calls lost, not its 6 records.
        let cut = stream_of(&[
            (wire::META, &meta),
            (wire::SITE, &site),
            (wire::CALLS, &second),
            (wire::STATS, &stats),
            (wire::END, &end),
        ]);
        let (sessions, st, _) = decode(&cut, 4096);
        assert_eq!(st.missing_frames, 0, "numbered records, not frames");
        let t = sessions.into_iter().next().unwrap().into_trace(Vec::new());
        assert_eq!((t.meta().total_calls(), t.meta().total_lost()), (1, 2));
        assert_eq!(
            t.meta().warnings,
            [
                "hart 0: 2 calls written on the board never arrived (their frames lost, or \
                 still in the hart's buffer when the session stopped), counted lost"
            ]
        );
        // A flight recorder whose ring overwrote the first frame's records
        // (its first kept record is numbered 6): its 2 calls overwritten,
        // not its 6 records.
        let flight_meta = meta_of(wire::MODE_FLIGHT);
        let flight_stats = stats_of(lost_frame.len() as u64);
        let ring = stream_of(&[
            (wire::META, &flight_meta),
            (wire::SITE, &site),
            (wire::CALLS, &second),
            (wire::STATS, &flight_stats),
            (wire::END, &end),
        ]);
        let t = first_trace(&ring, 4096);
        assert_eq!(t.meta().mode, RecordMode::FlightRecorder);
        assert_eq!((t.meta().total_calls(), t.meta().total_lost()), (1, 2));
        assert!(t.meta().warnings.is_empty(), "{:?}", t.meta().warnings);
    }

    type BoxedFill = Box<dyn Fn(&mut Writer<'_>)>;

    /// A board with a cycle clock: the first hart's plain calls arrive as
    /// lean records (no depth), the others (a counted call, with its
    /// counter) as records whose depth counts only the shadow stack.
    fn lean_stream(
        mode: u8,
        lean_first: u64,
        stats: [u64; 9],
        extra: &[wire::LeanRecord],
        late: Option<u64>,
    ) -> Vec<u8> {
        use fgtrace_core::record::ext;
        let meta = move |w: &mut Writer<'_>| {
            w.u8(wire::VERSION)
                .u8(mode)
                .u8(1)
                .u64(1_000_000_000)
                .u64(1000)
                .u32(1)
                .u32(1000)
                .str("mcycle")
                .u8(1)
                .str("instructions")
                .bytes(b"demo");
        };
        let names = ["outer", "counted", "leaf", "irq", "next"];
        let sites: Vec<_> = (0..names.len() as u32)
            .map(|id| {
                move |w: &mut Writer<'_>| {
                    w.u32(id)
                        .u32(7)
                        .u8(0)
                        .str(names[id as usize])
                        .str("demo")
                        .str("main.rs");
                }
            })
            .collect();
        let lean = |start: u64, end: u64, site: u32, sp: u64| wire::LeanRecord {
            start,
            dur: end - start,
            site,
            sp,
        };
        // In exit order: `leaf` inside `counted` inside `outer`, `irq` (an
        // interrupt's call) inside `counted` after `leaf`, then `next`.
        let mut leans = vec![
            lean(1020, 1030, 2, 0x7f00),
            lean(1040, 1045, 3, 0x7e00),
            lean(1070, 1090, 4, 0x7f80),
            lean(1000, 1100, 0, 0x8000),
        ];
        leans.extend_from_slice(extra);
        let general = [
            RawCall::pack(1010, 0, 50, 1, false, 0),
            RawCall::ext(ext::COUNTER, 44, 0),
        ];
        // Inside `leaf`, under a callee of its own; inside `counted`; after
        // everything.
        let sample = |w: &mut Writer<'_>, t: u64, depth: u16, cut: u16, fps: &[u64]| {
            w.u64(t).u16(depth).u16(cut).u8(fps.len() as u8);
            for (i, _) in fps.iter().enumerate() {
                w.u64(0x100 + i as u64);
            }
            let mut fp = wire::FpCoder::default();
            for &f in fps {
                w.varint(fp.encode(f));
            }
        };
        let mut frames: Vec<(u8, BoxedFill)> = vec![(wire::META, Box::new(meta))];
        for s in sites {
            frames.push((wire::SITE, Box::new(s)));
        }
        frames.push((
            wire::LEAN_CALLS,
            Box::new(move |w: &mut Writer<'_>| {
                let mut b = [0u8; 256];
                let (n, used) = wire::pack_lean(&mut b, &leans, |l| *l);
                assert_eq!(n, leans.len());
                w.u64(lean_first).bytes(&b[..used]);
            }),
        ));
        frames.push((
            wire::CALLS,
            Box::new(move |w: &mut Writer<'_>| {
                // A flight recorder's first kept record is numbered after
                // those overwritten (STATS' `dropped`).
                w.u64(if mode == wire::MODE_FLIGHT {
                    stats[1]
                } else {
                    0
                });
                for r in general {
                    w.u64(r.0).u64(r.1);
                }
            }),
        ));
        frames.push((
            wire::SAMPLES_FP,
            Box::new(move |w: &mut Writer<'_>| {
                sample(w, 1025, 1, 2, &[0x7e80, 0x7f00, 0x7f40, 0x8000]);
                sample(w, 1055, 1, 1, &[0x7e90, 0x7fa0, 0x8000]);
                sample(w, 1200, 0, wire::NO_CUT, &[0x9000]);
            }),
        ));
        frames.push((
            wire::STATS,
            Box::new(move |w: &mut Writer<'_>| {
                for v in stats {
                    w.u64(v);
                }
                // No records but calls among the others.
                w.u64(0);
            }),
        ));
        frames.push((
            wire::END,
            Box::new(|w: &mut Writer<'_>| {
                w.u32(1);
            }),
        ));
        if let Some(n) = late {
            frames.push((
                wire::LATE,
                Box::new(move |w: &mut Writer<'_>| {
                    w.u32(1).u64(n);
                }),
            ));
        }
        let refs: Vec<(u8, Fill<'_>)> =
            frames.iter().map(|(k, f)| (*k, &**f as Fill<'_>)).collect();
        stream_of(&refs)
    }

    fn calls_of(t: &Trace) -> Vec<(String, u32, u64, u64)> {
        t.calls()
            .map(|c| {
                (
                    t.meta().site_name(c.site).to_string(),
                    c.depth,
                    c.start_ns,
                    c.dur_ns,
                )
            })
            .collect()
    }

    #[test]
    fn lean_calls_nest_by_time_with_the_others_and_samples_cut_at_their_frame_pointer() {
        // STATS: 2 written, none dropped, 3 samples, none open at stop,
        // then 4 lean written.
        let bytes = lean_stream(wire::MODE_STREAM, 0, [2, 0, 3, 0, 0, 0, 0, 4, 0], &[], None);
        for step in [1, 9, 4096] {
            let (sessions, st, _) = decode(&bytes, step);
            assert_eq!((st.bad_payloads, st.missing_frames), (0, 0));
            let t = sessions.into_iter().next().unwrap().into_trace(Vec::new());
            assert_eq!(
                calls_of(&t),
                [
                    ("outer".into(), 0, 0, 100),
                    ("counted".into(), 1, 10, 50),
                    ("leaf".into(), 2, 20, 10),
                    ("irq".into(), 2, 40, 5),
                    ("next".into(), 1, 70, 20),
                ]
            );
            // The counted call keeps its counter, right after it.
            let evs: Vec<_> = t.events().collect();
            let at = (evs.iter())
                .position(
                    |e| matches!(e, Event::Call(c) if t.meta().site_name(c.site) == "counted"),
                )
                .unwrap();
            assert!(
                matches!(&evs[at + 1], Event::Counters(c) if c.values == [44]),
                "{:?}",
                evs[at + 1]
            );
            assert_eq!(t.meta().threads[0].lost, 0);
            let samples: Vec<_> = t.samples().map(|s| (s.shadow_depth, s.cut)).collect();
            // In `leaf` (three calls open), cut at the frame whose record is
            // at or above `leaf`'s stack pointer; in `counted` (a shadow-stack call),
            // the board's own cut; outside every call, none.
            assert_eq!(samples, [(3, Some(1)), (2, Some(1)), (0, None)]);
        }
    }

    #[test]
    fn lean_calls_that_never_arrived_are_counted_lost() {
        // 7 lean calls written, 1 dropped on the board; 4 arrived, numbered
        // from 1: one gap at the front, two never sent after.
        let bytes = lean_stream(wire::MODE_STREAM, 1, [2, 0, 3, 0, 0, 0, 0, 7, 1], &[], None);
        let t = first_trace(&bytes, 4096);
        assert_eq!(t.calls().count(), 5);
        assert_eq!(t.meta().threads[0].lost, 1 + 1 + 2);
    }

    #[test]
    fn a_flight_recorders_two_rings_keep_the_window_both_cover() {
        // The general ring dropped 3 (its first kept record is numbered 3),
        // the lean ring 10; the general ring's oldest call (`counted`)
        // ended at 1060, after the lean ring's oldest (`leaf`, 1030) and
        // `irq` (1045): those two are dropped as overwritten too.
        let bytes = lean_stream(
            wire::MODE_FLIGHT,
            10,
            [5, 3, 3, 0, 0, 0, 0, 14, 0],
            &[],
            None,
        );
        let t = first_trace(&bytes, 4096);
        assert_eq!(
            calls_of(&t),
            [
                ("outer".into(), 0, 0, 100),
                ("counted".into(), 1, 10, 50),
                ("next".into(), 1, 70, 20),
            ]
        );
        assert_eq!(t.meta().threads[0].lost, 3 + 10 + 2);
    }

    #[test]
    fn lean_records_round_trip_and_a_damaged_one_is_a_bad_payload() {
        let recs = [
            wire::LeanRecord {
                start: 5,
                dur: 0,
                site: 0,
                sp: 0x8000_0000,
            },
            wire::LeanRecord {
                start: 3,
                dur: 9,
                site: 200_000,
                sp: 0x7fff_ff00,
            },
            wire::LeanRecord {
                start: fgtrace_core::record::START_MASK,
                dur: 1 << 40,
                site: 1,
                sp: 8,
            },
        ];
        let mut b = [0u8; 256];
        let (n, used) = wire::pack_lean(&mut b, &recs, |r| *r);
        assert_eq!(n, 3);
        let mut back = Vec::new();
        let v = wire::VERSION;
        assert_eq!(wire::unpack_lean(&b[..used], v, |r| back.push(r)), Ok(3));
        assert_eq!(back, recs);
        // A record whose stack pointer repeats the one before carries none:
        // a byte shorter than the same record with its pointer moved by 8.
        let same = [
            recs[2],
            wire::LeanRecord {
                start: 7,
                ..recs[2]
            },
        ];
        let moved = [recs[2], wire::LeanRecord { sp: 16, ..same[1] }];
        let (_, short) = wire::pack_lean(&mut b, &same, |r| *r);
        let (_, long) = wire::pack_lean(&mut [0u8; 256], &moved, |r| *r);
        assert_eq!(short + 1, long);
        let mut back = Vec::new();
        assert_eq!(wire::unpack_lean(&b[..short], v, |r| back.push(r)), Ok(2));
        assert_eq!(back, same);
        // The board sends its clock as read; the host keeps a start's low
        // bits, as a shadow-stack record's.
        let past = [wire::LeanRecord {
            start: fgtrace_core::record::START_MASK + 5,
            ..recs[0]
        }];
        let (_, used) = wire::pack_lean(&mut b, &past, |r| *r);
        let mut back = Vec::new();
        assert_eq!(wire::unpack_lean(&b[..used], v, |r| back.push(r)), Ok(1));
        assert_eq!(back[0].start, 4);
        // Site numbers go plus one: a 0 is damage, not the first site.
        let e = wire::unpack_lean(&[0, 0, 0], v, |_| ()).unwrap_err();
        assert!(e.contains("site is 0"), "{e}");
        // Version 4 firmware's records: the site unshifted, every stack
        // pointer's difference.
        let v4 = [1u8, 10, 3, 16, 2, 4, 5, 0];
        let mut back = Vec::new();
        assert_eq!(wire::unpack_lean(&v4, 4, |r| back.push(r)), Ok(2));
        let old = |site, start, dur| wire::LeanRecord {
            start,
            dur,
            site,
            sp: 8,
        };
        assert_eq!(back, [old(1, 5, 3), old(2, 7, 5)]);
        // Cut short: the records before the damage, then the reason.
        let (_, used) = wire::pack_lean(&mut b, &recs, |r| *r);
        let mut some = Vec::new();
        let e = wire::unpack_lean(&b[..used - 1], v, |r| some.push(r)).unwrap_err();
        assert_eq!(some, recs[..2]);
        assert!(e.contains("cut short"), "{e}");
        // Room for one record only.
        let (n, _) = wire::pack_lean(&mut b[..wire::LEAN_MAX + 3], &recs, |r| *r);
        assert_eq!(n, 1);
    }

    #[test]
    fn lean_calls_that_overlap_without_nesting_or_end_after_stop_are_counted_lost() {
        // `late` begins inside `next` and ends after it (a task switch
        // between them); two lean calls open at stop end after it (LATE,
        // after END, a running total: the last one counts).
        let extra = [wire::LeanRecord {
            start: 1080,
            dur: 15,
            site: 1,
            sp: 0x7f40,
        }];
        let mut bytes = lean_stream(
            wire::MODE_STREAM,
            0,
            [2, 0, 3, 0, 0, 0, 1, 5, 0],
            &extra,
            Some(1),
        );
        let more = lean_stream(wire::MODE_STREAM, 0, [0; 9], &[], Some(2));
        // Only the second stream's LATE frame (its last), with a sequence
        // number that follows the first stream's.
        let mut at = 0;
        let mut last = (0, 0);
        while let Scan::Frame { used, .. } = wire::next_frame(&more[at..]) {
            last = (at, at + used);
            at += used;
        }
        let (s0, s1) = last;
        let mut f = more[s0..s1].to_vec();
        let seq = {
            let mut at = 0;
            let mut n = 0u16;
            while let Scan::Frame { used, .. } = wire::next_frame(&bytes[at..]) {
                at += used;
                n += 1;
            }
            n
        };
        let payload = f[HEADER..f.len() - TRAILER].to_vec();
        let mut g = [0u8; HEADER + MAX_PAYLOAD + TRAILER];
        let n = encode(&mut g, seq, wire::LATE, 0, &payload);
        f = g[..n].to_vec();
        bytes.extend_from_slice(&f);
        let (sessions, st, _) = decode(&bytes, 4096);
        assert_eq!((st.bad_payloads, st.missing_frames), (0, 0));
        let t = sessions.into_iter().next().unwrap().into_trace(Vec::new());
        assert_eq!(t.calls().count(), 5, "the overlapping call left out");
        // The overlapping call, and 1 on the shadow stack plus 2 lean calls
        // open at stop.
        assert_eq!(t.meta().threads[0].lost, 1 + 3);
        assert_eq!(
            t.meta().warnings,
            [
                "hart 0: 1 call began inside another call and ended after it (a task switch?): \
                 not nested, counted lost",
                "hart 0: 3 calls still open at stop: not recorded (they ended after the \
                 session), counted lost",
            ]
        );
    }
}
