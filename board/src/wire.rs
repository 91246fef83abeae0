//! The wire format between a board and the host.
//!
//! ```text
//! frame   := SYNC[4] seq:u16 kind:u8 hart:u8 len:u16 payload[len] crc:u32
//! ```
//! All integers little-endian. `crc` is CRC-32 (IEEE) over `seq..payload`.
//! `seq` counts frames per stream (wrapping), so the host sees gaps. Payloads
//! are at most [`MAX_PAYLOAD`] bytes; a receiver that finds a bad length or
//! CRC skips one byte and scans for the next sync word.
//!
//! | kind | payload |
//! |---|---|
//! | [`META`] | version u8, mode u8, harts u8, ticks per second u64, session start ticks u64, session u32, sampling Hz u32, clock name (`len:u16 bytes`) and per-call counters (n u8, then n names, each `len:u16 bytes`: their deltas follow each call's record as extension records) from version 2, firmware name |
//! | [`SITE`] | id u32, line u32, async u8, then name, module path, file, each `len:u16 bytes`, then the names of its recorded values (n u8, n x `len:u16 bytes`; absent from older firmware: none) |
//! | [`CALLS`] | index of the first record in the hart's session u64, then n x 16-byte records (the core's `RawCall`, two u64); sent by firmware before version 3 |
//! | [`CALLS_PACKED`] | index of the first record u64, then the records packed (version 3, see [`pack_calls`]): a plain call in about 6 bytes, anything else (counters, values) as its 16 bytes |
//! | [`SAMPLES`] | repeated: ticks u64, depth u16, cut u16 (`0xffff`: none), n u8, n x address u64 |
//! | [`LEAN_CALLS`] | index of the first lean record in the hart's session u64, then the records packed (version 4; from version 5 a record's stack pointer only when it moved, see [`pack_lean`]): calls with their entry and exit times and no depth, which the host nests by time |
//! | [`SAMPLES_FP`] | as [`SAMPLES`], then for each of the n addresses the frame pointer its frame record was read at, as a varint (see [`FpCoder`]), so the host can cut a sample below a lean call (version 4) |
//! | [`STATS`] | calls written u64, calls dropped u64, samples taken u64, samples dropped u64, overruns u64, bytes the sink refused u64 (per hart), then from version 4 calls still open when the session stopped u64 (they end after it: never recorded), lean calls written u64 and lean calls dropped u64 (0 but on the first hart), then from version 6 the records among those written that are not calls u64 (see [`RawCall::non_calls`]) |
//! | [`LATE`] | session u32, calls u64: the first hart's lean calls open when that session stopped that have ended since, a running total (version 4) |
//! | [`TEXT`] | UTF-8 console text |
//! | [`END`] | session u32: the session ended; its STATS came before |

use fgtrace_core::record::{kind, RawCall, DUR_MAX, MAX_DEPTH, MAX_SITES, START_MASK};

/// Marks the start of every frame.
pub const SYNC: [u8; 4] = [0xA5, 0x5A, 0xF6, 0x7E];
/// Bytes before the payload.
pub const HEADER: usize = 10;
/// Bytes after the payload.
pub const TRAILER: usize = 4;
/// The largest payload.
pub const MAX_PAYLOAD: usize = 1024;
/// Format version in [`META`] (3: call records go out as [`CALLS_PACKED`];
/// 4: [`STATS`] ends with the calls still open at stop and the lean calls'
/// counters, the first hart's plain calls go as [`LEAN_CALLS`] on a board
/// with a cycle clock, samples as [`SAMPLES_FP`]; 5: a lean record's
/// stack pointer only when it moved, see [`pack_lean`]; 6: [`STATS`] ends
/// with the records written that are not calls). A host refuses a META of
/// a version it does not know, so that it never reads a newer stream as if
/// nothing were missing from it.
pub const VERSION: u8 = 6;

/// Session metadata: clock rate, mode, harts.
pub const META: u8 = 1;
/// One call site.
pub const SITE: u8 = 2;
/// Call records.
pub const CALLS: u8 = 3;
/// Sampled stacks.
pub const SAMPLES: u8 = 4;
/// Loss and volume counters of one hart.
pub const STATS: u8 = 5;
/// Console text.
pub const TEXT: u8 = 6;
/// The session ended.
pub const END: u8 = 7;
/// Call records, packed (see [`pack_calls`]).
pub const CALLS_PACKED: u8 = 8;
/// A sample's frame pointers in [`SAMPLES_FP`]: each one a varint, 0 for
/// none, else its zigzag difference from the sample's previous one (the
/// first from 0) plus 1: about 2 bytes a frame where the pointer has 8.
#[derive(Default)]
pub struct FpCoder {
    prev: u64,
}

impl FpCoder {
    /// The varint for frame pointer `fp`.
    pub fn encode(&mut self, fp: u64) -> u64 {
        if fp == 0 {
            return 0;
        }
        let d = fp.wrapping_sub(self.prev) as i64;
        self.prev = fp;
        ((d << 1) ^ (d >> 63)) as u64 + 1
    }
    /// The frame pointer a varint stands for.
    pub fn decode(&mut self, v: u64) -> u64 {
        if v == 0 {
            return 0;
        }
        let z = v - 1;
        let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
        self.prev = self.prev.wrapping_add(d as u64);
        self.prev
    }
}

/// Lean call records (see [`pack_lean`]).
pub const LEAN_CALLS: u8 = 9;
/// Sampled stacks with their frame pointers.
pub const SAMPLES_FP: u8 = 10;
/// Lean calls open at a session's stop, ended since.
pub const LATE: u8 = 11;

/// Stream mode in [`META`]: every call, dropped and counted when the sink refuses.
pub const MODE_STREAM: u8 = 0;
/// Flight-recorder mode in [`META`]: the last calls, dumped on demand or on panic.
pub const MODE_FLIGHT: u8 = 1;

/// `cut` in a sample when no traced call was open.
pub const NO_CUT: u16 = 0xffff;
/// Most frames in one sampled stack.
pub const MAX_FRAMES: usize = 32;

/// CRC-32 (IEEE) tables for four bytes at a time ("slicing by 4"): table
/// 0 is the classic byte table, table `k` advances a byte's CRC by `k`
/// further zero bytes. 4 KiB; the checksum then costs about a third of the
/// instructions per byte of the byte-at-a-time loop, which a board runs on
/// every byte it streams.
const fn crc_tables() -> [[u32; 256]; 4] {
    let mut t = [[0u32; 256]; 4];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 4 {
        let mut i = 0;
        while i < 256 {
            let p = t[k - 1][i];
            t[k][i] = (p >> 8) ^ t[0][(p & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

static CRC_TABLES: [[u32; 256]; 4] = crc_tables();

/// CRC-32 (IEEE), continued from `crc` (start with 0): `crc32(crc32(0, a),
/// b)` is the CRC of `a` then `b`.
pub fn crc32(crc: u32, bytes: &[u8]) -> u32 {
    let t = &CRC_TABLES;
    let byte = |c: u32, b: u8| t[0][((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    let mut c = !crc;
    // SAFETY: every 4 bytes are a valid u32. Whole words are read at
    // aligned addresses: one load, where assembling 4 bytes takes 7
    // instructions (a hart need not load unaligned words).
    let (head, words, tail) = unsafe { bytes.align_to::<u32>() };
    for &b in head {
        c = byte(c, b);
    }
    for &w in words {
        let v = c ^ u32::from_le(w);
        c = t[3][(v & 0xff) as usize]
            ^ t[2][((v >> 8) & 0xff) as usize]
            ^ t[1][((v >> 16) & 0xff) as usize]
            ^ t[0][(v >> 24) as usize];
    }
    for &b in tail {
        c = byte(c, b);
    }
    !c
}

/// Writes one frame into `out` (which must hold `HEADER + payload + TRAILER`
/// bytes); returns its length.
pub fn encode(out: &mut [u8], seq: u16, kind: u8, hart: u8, payload: &[u8]) -> usize {
    let n = payload.len().min(MAX_PAYLOAD);
    out[HEADER..HEADER + n].copy_from_slice(&payload[..n]);
    seal(out, seq, kind, hart, n)
}

/// Writes the header and CRC around a payload of `len` bytes already at
/// `out[HEADER..]` (which must hold `HEADER + len + TRAILER` bytes); returns
/// the frame's length.
pub fn seal(out: &mut [u8], seq: u16, kind: u8, hart: u8, len: usize) -> usize {
    let n = len.min(MAX_PAYLOAD);
    out[..4].copy_from_slice(&SYNC);
    out[4..6].copy_from_slice(&seq.to_le_bytes());
    out[6] = kind;
    out[7] = hart;
    out[8..10].copy_from_slice(&(n as u16).to_le_bytes());
    let crc = crc32(0, &out[4..HEADER + n]);
    out[HEADER + n..HEADER + n + TRAILER].copy_from_slice(&crc.to_le_bytes());
    HEADER + n + TRAILER
}

/// Most bytes [`pack_calls`] writes for one record: a plain call's
/// varints, `depth << 1` (10 + 1 bits: 2 bytes), site (18 bits: 3), zigzag
/// start difference (55 bits: 8) and duration (43 bits: 7); any other
/// record takes 17.
pub const PACKED_MAX: usize = 2 + 3 + 8 + 7;

/// Packs call records for [`CALLS_PACKED`] into `out`, as many as fit;
/// returns how many records and how many bytes.
///
/// A plain call (kind CALL, not unwound: what the board probe writes for
/// almost every call) is four LEB128 varints: `depth << 1`, the site id,
/// its entry time's difference from the previous plain call's in this
/// frame (zigzag; the first one's from 0), and its duration: about 6 bytes
/// where the record has 16. Any other record (a call's counters or values,
/// a lost-records mark) is the varint 1 and its 16 bytes. Every frame
/// decodes on its own.
pub fn pack_calls(out: &mut [u8], recs: &[RawCall]) -> (usize, usize) {
    pack_calls_counting(out, recs, &mut 0)
}

/// [`pack_calls`], adding to `non_calls` the packed records that are not
/// calls (see [`RawCall::non_calls`]): counted on the way, as only records that are
/// not plain calls can be such, and they take the slow branch anyway.
pub fn pack_calls_counting(
    out: &mut [u8],
    recs: &[RawCall],
    non_calls: &mut u64,
) -> (usize, usize) {
    let mut at = 0;
    let mut prev = 0u64;
    let mut n = 0;
    for r in recs {
        if out.len() - at < PACKED_MAX {
            break;
        }
        let rec = &mut out[at..at + PACKED_MAX];
        if r.1 >> 61 == 0 {
            let start = r.start_low();
            let delta = start.wrapping_sub(prev) as i64;
            prev = start;
            let p = rec.as_mut_ptr();
            // SAFETY: `rec` has PACKED_MAX bytes, the most these four
            // varints take (see `PACKED_MAX`): the board writes every byte
            // it streams through here, unchecked.
            let end = unsafe {
                let q = varint(p, (r.depth() as u64) << 1);
                let q = varint(q, r.site() as u64);
                let q = varint(q, ((delta << 1) ^ (delta >> 63)) as u64);
                varint(q, r.dur())
            };
            // SAFETY: both in `rec`.
            at += unsafe { end.offset_from(p) } as usize;
        } else {
            *non_calls += r.non_calls();
            rec[0] = 1;
            rec[1..9].copy_from_slice(&r.0.to_le_bytes());
            rec[9..17].copy_from_slice(&r.1.to_le_bytes());
            at += 17;
        }
        n += 1;
    }
    (n, at)
}

/// How many of `recs` are not calls, each weighed by
/// [`RawCall::non_calls`]. A board sums them over the records it numbers
/// ([`STATS`], from version 6; a flight recorder over every record its ring
/// took, overwritten or kept), the host over those it receives: of the
/// records the numbering says never arrived, the host counts only the calls
/// as lost (or overwritten) calls.
pub fn non_calls(recs: &[RawCall]) -> u64 {
    recs.iter().map(|r| r.non_calls()).sum()
}

/// A lean call as the wire carries it: entry time, duration, site id and
/// the traced fn's stack pointer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeanRecord {
    /// The clock at entry (unpacked: its low bits, as [`START_MASK`] keeps).
    pub start: u64,
    /// Exit minus entry.
    pub dur: u64,
    /// The site's id.
    pub site: u32,
    /// The traced fn's stack pointer.
    pub sp: u64,
}

/// Most bytes [`pack_lean`] writes for one record: the site and its flag
/// (19 bits: 3), the zigzag start and stack-pointer differences and the
/// duration (10 each).
pub const LEAN_MAX: usize = 3 + 10 + 10 + 10;

/// Packs lean call records for [`LEAN_CALLS`] into `out`, as many as fit
/// (`f` makes each one a [`LeanRecord`]); returns how many records and how
/// many bytes. A record is three or four LEB128 varints:
///
/// * the site id plus one, shifted left by one, its low bit set when the
///   stack pointer differs from the previous record's (a site's id is kept
///   plus one, so the board sends it as it finds it);
/// * the entry time's difference from the previous record's exit time in
///   this frame (zigzag; the first one's from 0), of the clock as read: the
///   host keeps a start's low bits, as a shadow-stack record does;
/// * the duration;
/// * only when that bit is set, the stack pointer's difference from the
///   previous one's (zigzag, the first from 0).
///
/// Records go in exit order, so a call's entry mostly follows the previous
/// exit closely (a sibling's, the gap between two calls) where it follows
/// the previous entry by that call's whole duration; and a loop of calls
/// from one caller repeats its stack pointer, so most records are three
/// short varints. Every frame decodes on its own.
pub fn pack_lean<T>(out: &mut [u8], recs: &[T], f: impl Fn(&T) -> LeanRecord) -> (usize, usize) {
    let Some(room) = out.len().checked_sub(LEAN_MAX) else {
        return (0, 0);
    };
    let base = out.as_mut_ptr();
    // SAFETY: `room` is within `out`: a record started at or before it has
    // LEAN_MAX bytes, the most one takes.
    let last = unsafe { base.add(room) };
    let mut p = base;
    let (mut prev, mut prev_sp) = (0u64, 0u64);
    let zz = |d: i64| ((d << 1) ^ (d >> 63)) as u64;
    // The count comes from the iterator at the end: no counter per record.
    let mut it = recs.iter();
    while p <= last {
        let Some(r) = it.next() else { break };
        let r = f(r);
        let moved = r.sp != prev_sp;
        // SAFETY: `p` is at or before `last`, see above.
        unsafe {
            p = varint(p, (r.site.wrapping_add(1) as u64) << 1 | moved as u64);
            p = varint(p, zz(r.start.wrapping_sub(prev) as i64));
            p = varint(p, r.dur);
            if moved {
                p = varint(p, zz(r.sp.wrapping_sub(prev_sp) as i64));
            }
        }
        prev = r.start.wrapping_add(r.dur);
        prev_sp = r.sp;
    }
    // SAFETY: both in `out`.
    (recs.len() - it.len(), unsafe { p.offset_from(base) }
        as usize)
}

/// Unpacks a [`LEAN_CALLS`] payload's records (after its first index) of a
/// stream of wire `version`, handing each to `f`; `Err` names what is
/// wrong with the first record that does not decode (the records before it
/// were handed over). Version 4 firmware sent every record's stack pointer
/// difference, the site id itself, the entry time's difference from the
/// previous entry, and starts already cut to [`START_MASK`].
pub fn unpack_lean(
    b: &[u8],
    version: u8,
    mut f: impl FnMut(LeanRecord),
) -> Result<usize, &'static str> {
    let mut r = Reader::new(b);
    let (mut prev, mut prev_sp) = (0u64, 0u64);
    let un = |v: u64| ((v >> 1) as i64) ^ -((v & 1) as i64);
    let mut n = 0;
    let v5 = version >= 5;
    while r.remaining() > 0 {
        let head = r.varint().ok_or("a lean call's site is cut short")?;
        let (site, moved) = if v5 {
            let Some(site) = (head >> 1).checked_sub(1) else {
                return Err("a lean call's site is 0, which stands for none");
            };
            (site, head & 1 != 0)
        } else {
            (head, true)
        };
        let delta = r.varint().ok_or("a lean call's start is cut short")?;
        let dur = r.varint().ok_or("a lean call's duration is cut short")?;
        let dsp = if moved {
            r.varint()
                .ok_or("a lean call's stack pointer is cut short")?
        } else {
            0
        };
        if site >= MAX_SITES as u64 {
            return Err("a lean call's site id is past the last site");
        }
        if dur > DUR_MAX {
            return Err("a lean call's duration is past the longest a record holds");
        }
        let clock = prev.wrapping_add(un(delta) as u64);
        if !v5 && clock > START_MASK {
            return Err("a lean call's start is past the ticks a record holds");
        }
        prev = if v5 { clock.wrapping_add(dur) } else { clock };
        prev_sp = prev_sp.wrapping_add(un(dsp) as u64);
        f(LeanRecord {
            start: clock & START_MASK,
            dur,
            site: site as u32,
            sp: prev_sp,
        });
        n += 1;
    }
    Ok(n)
}

/// Writes `$v` (any unsigned integer) as LEB128 at `$p`, a `*mut u8` with
/// room for its bytes (7 bits each); evaluates to the byte after it.
macro_rules! leb128 {
    ($p:expr, $v:expr) => {{
        let (mut p, mut v): (*mut u8, _) = ($p, $v);
        while v >= 0x80 {
            // SAFETY: the caller's room.
            unsafe { p.write(v as u8 | 0x80) };
            v >>= 7;
            // SAFETY: as above.
            p = unsafe { p.add(1) };
        }
        // SAFETY: as above.
        unsafe {
            p.write(v as u8);
            p.add(1)
        }
    }};
}

/// Writes `v` as LEB128 at `p`; returns the byte after it.
///
/// # Safety
/// `p` has room for `v`'s bytes (7 bits each).
#[inline(always)]
unsafe fn varint(p: *mut u8, v: u64) -> *mut u8 {
    // A value that fits a machine word is written in words: on a 32-bit
    // hart, where a u64 takes two registers and every shift of it several
    // instructions, a record's values nearly always fit one.
    #[cfg(not(target_pointer_width = "64"))]
    if v <= usize::MAX as u64 {
        return leb128!(p, v as usize);
    }
    leb128!(p, v)
}

/// Unpacks a [`CALLS_PACKED`] payload's records (after its first index),
/// handing each to `f`; `Err` names what is wrong with the first record
/// that does not decode (the records before it were handed over).
pub fn unpack_calls(b: &[u8], mut f: impl FnMut(RawCall)) -> Result<usize, &'static str> {
    let mut r = Reader::new(b);
    let mut prev = 0u64;
    let mut n = 0;
    while r.remaining() > 0 {
        let head = r.varint().ok_or("a record's header is cut short")?;
        if head & 1 != 0 {
            if head != 1 {
                return Err("a record's header has unknown bits");
            }
            let w0 = r.u64().ok_or("a whole record is cut short")?;
            let w1 = r.u64().ok_or("a whole record is cut short")?;
            f(RawCall(w0, w1));
        } else {
            let depth = head >> 1;
            let site = r.varint().ok_or("a call's site is cut short")?;
            let delta = r.varint().ok_or("a call's start is cut short")?;
            let dur = r.varint().ok_or("a call's duration is cut short")?;
            if depth > MAX_DEPTH as u64 {
                return Err("a call's depth is past the deepest a record holds");
            }
            if site >= MAX_SITES as u64 {
                return Err("a call's site id is past the last site");
            }
            if dur > DUR_MAX {
                return Err("a call's duration is past the longest a record holds");
            }
            let delta = ((delta >> 1) as i64) ^ -((delta & 1) as i64);
            let start = prev.wrapping_add(delta as u64);
            if start > START_MASK {
                return Err("a call's start is past the ticks a record holds");
            }
            prev = start;
            f(RawCall::pack(
                start,
                depth as u32,
                dur,
                site as u32,
                false,
                kind::CALL,
            ));
        }
        n += 1;
    }
    Ok(n)
}

/// One frame found in a byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Sequence number.
    pub seq: u16,
    /// One of the kinds above.
    pub kind: u8,
    /// The hart it came from.
    pub hart: u8,
    /// The payload.
    pub payload: &'a [u8],
}

/// What [`next_frame`] found at the front of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan<'a> {
    /// A whole frame, after `skipped` bytes of garbage; `used` bytes in all.
    Frame {
        /// The frame.
        frame: Frame<'a>,
        /// Garbage bytes before it.
        skipped: usize,
        /// Bytes consumed, garbage included.
        used: usize,
    },
    /// More bytes are needed; `skipped` bytes at the front are garbage and
    /// may be dropped.
    NeedMore {
        /// Garbage bytes at the front.
        skipped: usize,
    },
}

/// Finds the next valid frame in `buf`: scans for the sync word, checks the
/// length and the CRC, and skips one byte past any candidate that fails.
/// Never panics, whatever the bytes.
pub fn next_frame(buf: &[u8]) -> Scan<'_> {
    let mut at = 0;
    loop {
        // Find the sync word from `at`.
        let Some(off) = find_sync(&buf[at..]) else {
            // Keep a possible sync-word prefix at the end.
            let keep = (1..SYNC.len())
                .rev()
                .find(|&k| k <= buf.len() - at && buf[buf.len() - k..] == SYNC[..k])
                .unwrap_or(0);
            return Scan::NeedMore {
                skipped: buf.len() - keep,
            };
        };
        let start = at + off;
        let rest = &buf[start..];
        if rest.len() < HEADER {
            return Scan::NeedMore { skipped: start };
        }
        let len = u16::from_le_bytes([rest[8], rest[9]]) as usize;
        if len > MAX_PAYLOAD {
            at = start + 1;
            continue;
        }
        if rest.len() < HEADER + len + TRAILER {
            return Scan::NeedMore { skipped: start };
        }
        let body = &rest[4..HEADER + len];
        let want = u32::from_le_bytes([
            rest[HEADER + len],
            rest[HEADER + len + 1],
            rest[HEADER + len + 2],
            rest[HEADER + len + 3],
        ]);
        if crc32(0, body) != want {
            at = start + 1;
            continue;
        }
        return Scan::Frame {
            frame: Frame {
                seq: u16::from_le_bytes([rest[4], rest[5]]),
                kind: rest[6],
                hart: rest[7],
                payload: &rest[HEADER..HEADER + len],
            },
            skipped: start,
            used: start + HEADER + len + TRAILER,
        };
    }
}

fn find_sync(b: &[u8]) -> Option<usize> {
    b.windows(SYNC.len()).position(|w| w == SYNC)
}

/// A little-endian reader over a payload that never panics: reads past the
/// end give `None`.
pub struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads `b` from the start.
    pub fn new(b: &'a [u8]) -> Self {
        Reader { b }
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.b.len()
    }
    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.b.len() {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }
    /// A u8.
    pub fn u8(&mut self) -> Option<u8> {
        self.bytes(1).map(|b| b[0])
    }
    /// A u16.
    pub fn u16(&mut self) -> Option<u16> {
        self.bytes(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }
    /// A u32.
    pub fn u32(&mut self) -> Option<u32> {
        self.bytes(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A u64.
    pub fn u64(&mut self) -> Option<u64> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }
    /// A LEB128 varint (at most 10 bytes, no bits past 64).
    pub fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            let bits = (b & 0x7f) as u64;
            if i == 9 && bits > 1 {
                return None;
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    /// A `len:u16` string.
    pub fn str(&mut self) -> Option<&'a str> {
        let n = self.u16()? as usize;
        core::str::from_utf8(self.bytes(n)?).ok()
    }
}

/// A little-endian writer into a fixed buffer; `ok` turns false (and stays)
/// when something did not fit.
pub struct Writer<'a> {
    b: &'a mut [u8],
    /// Bytes written.
    pub len: usize,
    /// Everything fitted.
    pub ok: bool,
}

impl<'a> Writer<'a> {
    /// Writes into `b` from the start.
    pub fn new(b: &'a mut [u8]) -> Self {
        Writer {
            b,
            len: 0,
            ok: true,
        }
    }
    /// Appends bytes.
    pub fn bytes(&mut self, x: &[u8]) -> &mut Self {
        if self.ok && self.len + x.len() <= self.b.len() {
            self.b[self.len..self.len + x.len()].copy_from_slice(x);
            self.len += x.len();
        } else {
            self.ok = false;
        }
        self
    }
    /// Appends a u8.
    pub fn u8(&mut self, x: u8) -> &mut Self {
        self.bytes(&[x])
    }
    /// Appends a u16.
    pub fn u16(&mut self, x: u16) -> &mut Self {
        self.bytes(&x.to_le_bytes())
    }
    /// Appends a u32.
    pub fn u32(&mut self, x: u32) -> &mut Self {
        self.bytes(&x.to_le_bytes())
    }
    /// Appends a u64.
    pub fn u64(&mut self, x: u64) -> &mut Self {
        self.bytes(&x.to_le_bytes())
    }
    /// Appends a LEB128 varint.
    pub fn varint(&mut self, mut x: u64) -> &mut Self {
        while x >= 0x80 {
            self.u8(x as u8 | 0x80);
            x >>= 7;
        }
        self.u8(x as u8)
    }
    /// Appends a `len:u16` string (cut at 255 bytes on a char boundary).
    pub fn str(&mut self, s: &str) -> &mut Self {
        let mut n = s.len().min(255);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.u16(n as u16).bytes(&s.as_bytes()[..n])
    }
}

#[cfg(test)]
mod tests;
