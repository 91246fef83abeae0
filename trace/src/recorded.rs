//! Calls as a session keeps them while it records: in exit order (how probes
//! write them), one delta-coded *raw chunk* per batch, about 4 to 6 bytes per
//! call. The collector encodes each batch as it arrives (a tight loop, no
//! reordering), so neither the collector nor `Session::stop` sorts anything;
//! the pre-order rebuild that views need ([`build`](super::build)) runs when
//! something first reads the trace's events.
//!
//! ```text
//! raw chunk payload: one entry per record, state reset per chunk
//!   header varint  zigzag(depth - prev_depth) << 4 | same_site << 3 | unwound << 2 | kind
//!   site varint    (only when not same_site) the trace's site index
//!   gap varint     zigzag(start - prev_end), ticks since the session origin
//!   dur varint     ticks (a count for a lost-records marker)
//! extension record (kind 3 with the unwound bit: figures of the call before it)
//!   header varint  3 | 1 << 2 (depth unchanged)
//!   sub varint, a varint, b varint   (see `fgtrace_core::record::ext`)
//! ```
//!
//! Times stay in ticks relative to the session origin, so a recording can be
//! written before the session's clock rate is final (it is refined at stop).

use super::encoding::{unzigzag, zigzag, TraceError};
use super::SiteInfo;
use fgtrace_core::record::{kind, RawCall, DUR_MAX, MAX_DEPTH, START_MASK};
use fgtrace_core::values::tag;

/// One record, decoded: times in nanoseconds since the session start, the
/// site as the trace's index.
#[derive(Clone, Copy, Debug)]
pub struct Rec {
    pub start_ns: u64,
    pub end_ns: u64,
    /// The raw duration field: ticks, or a count for a lost-records marker.
    pub count: u64,
    pub depth: u32,
    pub site: u32,
    pub kind: u8,
    pub unwound: bool,
    /// An extension record (`kind` is lost, `unwound` set): its subkind is
    /// in `site`, its values in `count` and `b`.
    pub b: u64,
}

/// A sample as the sampler hands it over: (ns since session start, shadow
/// depth, cut, frames).
pub type RawSample = (u64, u32, Option<u32>, Vec<u64>);

/// Memory that encoded chunks are written into while a session keeps them:
/// one mapping for many chunks, so keeping 10M calls costs a few mappings
/// and (with transparent huge pages) a few dozen page faults, not one
/// allocation, copy and a page fault or more per chunk.
pub struct Arena {
    ptr: *mut u8,
    cap: usize,
    #[cfg(not(target_os = "linux"))]
    _owned: Vec<u8>,
}

// SAFETY: the bytes of a handed-out range are never written again; the
// encoder that owns the arena writes only past every handed-out range.
unsafe impl Send for Arena {}
unsafe impl Sync for Arena {}

/// Smallest and largest arena: a thread that records little keeps little.
const ARENA_MIN: usize = 256 << 10;
const ARENA_MAX: usize = 8 << 20;

impl Arena {
    fn new(cap: usize) -> Option<Arena> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: a fresh anonymous private mapping; checked below.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    cap,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                return None;
            }
            if cap >= 2 << 20 {
                // SAFETY: advice on our own mapping; failure only means small pages.
                unsafe { libc::madvise(ptr, cap, libc::MADV_HUGEPAGE) };
            }
            Some(Arena {
                ptr: ptr.cast(),
                cap,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let mut v = vec![0u8; cap];
            Some(Arena {
                ptr: v.as_mut_ptr(),
                cap,
                _owned: v,
            })
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        // SAFETY: our own mapping, no range of it is referenced any more
        // (every `Payload` holds the arena alive).
        unsafe {
            libc::munmap(self.ptr.cast(), self.cap);
        }
    }
}

/// The bytes of an encoded chunk: its own, or a range of an arena.
#[derive(Clone)]
pub enum Payload {
    Owned(Vec<u8>),
    Shared {
        arena: std::sync::Arc<Arena>,
        start: usize,
        len: usize,
    },
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Payload::Owned(v) => v,
            // SAFETY: the range was written before the payload was made and
            // lies inside the arena, which this payload keeps alive.
            Payload::Shared { arena, start, len } => unsafe {
                std::slice::from_raw_parts(arena.ptr.add(*start), *len)
            },
        }
    }
}

impl Default for Payload {
    fn default() -> Self {
        Payload::Owned(Vec::new())
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Self {
        Payload::Owned(v)
    }
}

impl PartialEq for Payload {
    fn eq(&self, o: &Payload) -> bool {
        **self == **o
    }
}

impl Eq for Payload {}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({} bytes)", self.len())
    }
}

/// One batch of one thread, encoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawChunk {
    pub thread: u32,
    pub count: u32,
    pub payload: Payload,
    /// Byte offset of the payload in the file it came from (0 in memory).
    pub offset: u64,
}

/// Reads the text of a string value from its address and length (at most
/// [`MAX_STR`](fgtrace_core::values::MAX_STR) bytes of it): `Err` holds the
/// placeholder shown instead when the address cannot be read.
pub type TextOf = Box<dyn Fn(u64, u32) -> Result<String, String> + Send + Sync>;

/// Registry site ids to the trace's site indices, in order of first use;
/// and the trace's string table (the texts of string values, in order of
/// first use), which records refer to by index once encoded.
#[derive(Default)]
pub struct SiteMap {
    index: Vec<u32>,
    pub sites: Vec<SiteInfo>,
    /// The trace's string table ([`TraceMeta::strings`](super::TraceMeta::strings)).
    pub strings: Vec<String>,
    /// String values whose text could not be read (see [`TextOf`]).
    pub strings_unreadable: u64,
    /// How string values' texts are read; `None`: none can be (each is a placeholder).
    pub text_of: Option<TextOf>,
    by_addr: std::collections::HashMap<(u64, u32), u32>,
    by_text: std::collections::HashMap<String, u32>,
}

impl SiteMap {
    /// A map that reads string values with `text_of`.
    pub fn with_text(text_of: TextOf) -> SiteMap {
        SiteMap {
            text_of: Some(text_of),
            ..SiteMap::default()
        }
    }

    /// The string table index of the string value at `addr` (`len` bytes
    /// long): its text is read the first time the address is seen.
    #[cold]
    pub fn string(&mut self, addr: u64, len: u32) -> u32 {
        if let Some(&i) = self.by_addr.get(&(addr, len)) {
            return i;
        }
        let text = match &self.text_of {
            Some(f) => f(addr, len),
            None => Err(format!("<str {addr:#x}+{len} unreadable>")),
        };
        let text = text.unwrap_or_else(|placeholder| {
            self.strings_unreadable += 1;
            placeholder
        });
        let i = match self.by_text.get(&text) {
            Some(&i) => i,
            None => {
                self.strings.push(text.clone());
                let i = self.strings.len() as u32 - 1;
                self.by_text.insert(text, i);
                i
            }
        };
        self.by_addr.insert((addr, len), i);
        i
    }

    #[inline]
    pub fn map(&mut self, id: u32, site_of: &impl Fn(u32) -> Option<SiteInfo>) -> u32 {
        match self.index.get(id as usize) {
            Some(&i) if i != u32::MAX => i,
            _ => self.add(id, site_of),
        }
    }

    #[cold]
    fn add(&mut self, id: u32, site_of: &impl Fn(u32) -> Option<SiteInfo>) -> u32 {
        if self.index.len() <= id as usize {
            self.index.resize(id as usize + 1, u32::MAX);
        }
        let info = site_of(id).unwrap_or_else(|| SiteInfo {
            name: format!("[site {id}]"),
            module_path: String::new(),
            file: String::new(),
            line: 0,
            is_async: false,
            values: Vec::new(),
        });
        self.sites.push(info);
        let i = self.sites.len() as u32 - 1;
        self.index[id as usize] = i;
        i
    }
}

/// Encodes records of one thread into raw chunks. Counts what it encodes.
#[derive(Default)]
pub struct RawEncoder {
    /// Calls (and polls) encoded: what the thread's `calls` will say.
    pub calls: u64,
    scratch: Vec<u8>,
    /// Keep chunks in arenas (a session in memory) rather than in a
    /// scratch buffer copied out (chunks that are written and dropped).
    pub retain: bool,
    arena: Option<(std::sync::Arc<Arena>, usize)>,
}

/// Most bytes one record can take: header, site, gap, duration (an
/// extension record: header, subkind, two values).
const MAX_RECORD_BYTES: usize = 4 * 10 + 5;

impl RawEncoder {
    /// One chunk of `recs` (oldest first), with starts relative to `origin`.
    pub fn encode(
        &mut self,
        thread: u32,
        recs: &[RawCall],
        origin: u64,
        sites: &mut SiteMap,
        site_of: &impl Fn(u32) -> Option<SiteInfo>,
    ) -> RawChunk {
        let need = recs.len() * MAX_RECORD_BYTES;
        let arena_at = if self.retain {
            self.arena_room(need)
        } else {
            None
        };
        let base = match (arena_at, &self.arena) {
            // SAFETY: `arena_room` made sure `used + need` fits the arena.
            (Some(used), Some((arena, _))) => unsafe { arena.ptr.add(used) },
            _ => {
                self.scratch.clear();
                self.scratch.reserve(need);
                self.scratch.as_mut_ptr()
            }
        };
        let mut p = base;
        let mut prev_depth = 0u32;
        let mut prev_site = u32::MAX;
        let mut prev_end = 0u64;
        let mut calls = 0u64;
        let (mut last_id, mut last_site) = (u32::MAX, u32::MAX);
        for (n, r) in recs.iter().enumerate() {
            let k = r.kind();
            if r.is_ext() {
                // Figures of the call before: no time, no depth change.
                let (mut a, b) = r.ext_values();
                if r.ext_sub() == fgtrace_core::record::ext::VALUE
                    && (b >> 3) as u8 & tag::TYPE == tag::STR
                {
                    // A string's address becomes its index in the string table.
                    a = sites.string(a, (b >> 11) as u32) as u64;
                }
                // SAFETY: as below.
                unsafe {
                    put_raw(&mut p, 1 << 2 | kind::LOST);
                    put_raw(&mut p, r.ext_sub());
                    put_raw(&mut p, a);
                    put_raw(&mut p, b);
                }
                continue;
            }
            // A lost-records marker names no site.
            let site = if k == kind::LOST {
                prev_site
            } else {
                let id = r.site();
                if id != last_id {
                    last_id = id;
                    last_site = sites.map(id, site_of);
                }
                last_site
            };
            let depth = r.depth();
            // A marker (a zero-length record its extension names) is no call.
            let marker = recs
                .get(n + 1)
                .is_some_and(|x| x.is_ext() && x.ext_sub() == fgtrace_core::record::ext::MARKER);
            calls += ((k == kind::CALL || k == kind::POLL) && !marker) as u64;
            // Ticks since the origin: the 54-bit difference, sign-extended
            // (the start nearest the origin, as `full_ticks` takes it).
            let start =
                (((r.start_low().wrapping_sub(origin) & START_MASK) << 10) as i64 >> 10) as u64;
            let dur = r.dur();
            let dd = depth as i64 - prev_depth as i64;
            let same = (site == prev_site || k == kind::LOST) as u64;
            // SAFETY: `reserve` above made room for MAX_RECORD_BYTES per
            // record, and one record writes at most that many.
            unsafe {
                put_raw(
                    &mut p,
                    zigzag(dd) << 4 | same << 3 | (r.unwound() as u64) << 2 | k,
                );
                if same == 0 {
                    put_raw(&mut p, site as u64);
                }
                put_raw(&mut p, zigzag(start.wrapping_sub(prev_end) as i64));
                put_raw(&mut p, dur);
            }
            prev_depth = depth;
            prev_site = site;
            prev_end = start.wrapping_add(dur);
        }
        // SAFETY: `p` moved forward from `base` within one reservation.
        let len = unsafe { p.offset_from(base) } as usize;
        self.calls += calls;
        let payload = if let (Some(used), Some((arena, u))) = (arena_at, self.arena.as_mut()) {
            *u = used + len;
            Payload::Shared {
                arena: arena.clone(),
                start: used,
                len,
            }
        } else {
            // SAFETY: every byte up to `p` was written, within the reservation.
            unsafe { self.scratch.set_len(len) };
            Payload::Owned(self.scratch.as_slice().to_vec())
        };
        RawChunk {
            thread,
            count: recs.len() as u32,
            payload,
            offset: 0,
        }
    }

    /// Makes sure the current arena has `need` bytes free (a new, larger
    /// one if not); `None` if no arena can be mapped (then chunks are copied).
    fn arena_room(&mut self, need: usize) -> Option<usize> {
        if let Some((a, used)) = &self.arena {
            if a.cap - used >= need {
                return Some(*used);
            }
        }
        let last = self.arena.as_ref().map_or(0, |(a, _)| a.cap);
        let cap = (last * 2).clamp(ARENA_MIN, ARENA_MAX).max(need);
        let a = Arena::new(cap)?;
        self.arena = Some((std::sync::Arc::new(a), 0));
        Some(0)
    }
}

/// A varint at `*p`, advancing it.
///
/// # Safety
/// Ten bytes from `*p` must be writable.
#[inline(always)]
unsafe fn put_raw(p: &mut *mut u8, mut v: u64) {
    while v >= 0x80 {
        **p = (v as u8) | 0x80;
        *p = p.add(1);
        v >>= 7;
    }
    **p = v as u8;
    *p = p.add(1);
}

/// Full tick value of a 54-bit start, taken as the one nearest the origin
/// (a board's records, decoded by `fgtrace-view`, carry the same 54-bit starts).
pub fn full_ticks(low: u64, origin: u64) -> u64 {
    let diff = low.wrapping_sub(origin) & START_MASK;
    if diff < (START_MASK >> 1) {
        origin.wrapping_add(diff)
    } else {
        origin.wrapping_sub((origin.wrapping_sub(low)) & START_MASK)
    }
}

/// Converts ticks since the origin to nanoseconds: readings before the
/// origin become 0, and times stay well inside what the event encoding
/// accepts (views add durations to starts), whatever a file says.
#[derive(Clone, Copy)]
pub struct TickScale {
    per_tick: f64,
}

/// Latest time a trace can say: about 73 years in nanoseconds.
pub const MAX_NS: u64 = 1 << 61;

impl TickScale {
    pub fn new(ticks_per_ns: f64) -> TickScale {
        let per_tick = if ticks_per_ns.is_finite() && ticks_per_ns > 0.0 {
            1.0 / ticks_per_ns
        } else {
            1.0
        };
        TickScale { per_tick }
    }
    #[inline]
    pub fn ns(self, rel_ticks: u64) -> u64 {
        if rel_ticks > u64::MAX / 2 {
            return 0;
        }
        // Through i64 (the value is below 2^63 here): x86_64 converts
        // signed integers to and from f64 in one instruction each, unsigned
        // ones in a dozen, and this runs for every recorded call a view reads.
        ((rel_ticks as i64 as f64 * self.per_tick) as i64 as u64).min(MAX_NS)
    }
}

/// Decodes a raw chunk, checking everything (it may come from a file):
/// appends to `out` with times in nanoseconds.
pub fn decode(
    c: &RawChunk,
    n_sites: usize,
    scale: TickScale,
    out: &mut Vec<Rec>,
) -> Result<(), TraceError> {
    let buf = &c.payload[..];
    let mut pos = 0usize;
    let corrupt = |pos: usize, what: String| TraceError::Corrupt {
        offset: c.offset + pos as u64,
        what,
    };
    let varint_slow = |pos: &mut usize| -> Result<u64, TraceError> {
        let at = *pos;
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let Some(&b) = buf.get(*pos) else {
                return Err(corrupt(at, "record runs past the end of its chunk".into()));
            };
            *pos += 1;
            if shift == 63 && b > 1 {
                break;
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(corrupt(at, "overlong number".into()))
    };
    let varint = |pos: &mut usize| -> Result<u64, TraceError> {
        match crate::encoding::varint_fast(buf, pos) {
            Some(v) => Ok(v),
            None => varint_slow(pos),
        }
    };
    out.reserve(c.count as usize);
    let mut prev_depth = 0u32;
    let mut prev_site = None::<u32>;
    let mut prev_end = 0u64;
    for _ in 0..c.count {
        let at = pos;
        let h = varint(&mut pos)?;
        let k = (h & 3) as u8;
        let unwound = h >> 2 & 1 != 0;
        let same = h >> 3 & 1 != 0;
        let dd = unzigzag(h >> 4);
        if k as u64 == kind::LOST && unwound {
            // An extension record.
            let sub = varint(&mut pos)?;
            if sub > fgtrace_core::record::ext::LAST || dd != 0 || same {
                return Err(corrupt(at, format!("extension record {sub} is not one")));
            }
            let mut a = varint(&mut pos)?;
            let b = varint(&mut pos)?;
            if sub == fgtrace_core::record::ext::FUTURE_BUSY
                || sub == fgtrace_core::record::ext::FUTURE_WAKES
            {
                // A future's busy or scheduled ticks: a duration.
                a = scale.ns(a);
            }
            let at_ns = scale.ns(prev_end);
            out.push(Rec {
                start_ns: at_ns,
                end_ns: at_ns,
                count: a,
                depth: prev_depth,
                site: sub as u32,
                kind: k,
                unwound,
                b,
            });
            continue;
        }
        let depth = (prev_depth as i64)
            .checked_add(dd)
            .filter(|d| (0..=MAX_DEPTH as i64).contains(d))
            .ok_or_else(|| {
                corrupt(
                    at,
                    format!("call depth {prev_depth} + {dd} is out of range"),
                )
            })? as u32;
        let site = if k as u64 == kind::LOST {
            prev_site.unwrap_or(0)
        } else if same {
            prev_site.ok_or_else(|| corrupt(at, "repeats the site of no record".into()))?
        } else {
            let s = varint(&mut pos)?;
            if s >= n_sites as u64 {
                return Err(corrupt(at, format!("site {s} of {n_sites}")));
            }
            s as u32
        };
        let start = prev_end.wrapping_add(unzigzag(varint(&mut pos)?) as u64);
        let dur_at = pos;
        let dur = varint(&mut pos)?;
        if dur > DUR_MAX {
            return Err(corrupt(
                dur_at,
                format!("duration {dur} ticks is out of range"),
            ));
        }
        let start_ns = scale.ns(start);
        let end = start.wrapping_add(dur);
        let end_ns = if k as u64 == kind::LOST {
            start_ns
        } else {
            scale.ns(end).max(start_ns)
        };
        out.push(Rec {
            start_ns,
            end_ns,
            count: dur,
            depth,
            site,
            kind: k,
            unwound,
            b: 0,
        });
        prev_depth = depth;
        if k as u64 != kind::LOST {
            prev_site = Some(site);
        }
        prev_end = end;
    }
    if pos != buf.len() {
        return Err(corrupt(
            pos,
            format!(
                "{} bytes left over after {} records",
                buf.len() - pos,
                c.count
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: u32) -> Option<SiteInfo> {
        Some(SiteInfo {
            name: format!("f{id}"),
            module_path: String::new(),
            file: String::new(),
            line: 0,
            is_async: false,
            values: Vec::new(),
        })
    }

    #[test]
    fn raw_chunks_round_trip_every_field() {
        let origin = (5u64 << 54) + 77;
        let recs = vec![
            RawCall::pack(origin + 100, 2, 10, 40, false, kind::CALL),
            RawCall::pack(origin + 115, 2, 12, 40, true, kind::CALL),
            RawCall::pack(origin + 90, 1, 60, 41, false, kind::POLL),
            RawCall::pack(origin + 200, 1, 3, 0, false, kind::LOST),
            RawCall::pack(origin + 50, 0, DUR_MAX, 42, false, kind::FUTURE),
            // Before the origin: a call that began before the session.
            RawCall::pack(origin - 5, 0, 300, 41, false, kind::CALL),
        ];
        let mut sites = SiteMap::default();
        let mut enc = RawEncoder::default();
        let c = enc.encode(3, &recs, origin, &mut sites, &info);
        assert_eq!(enc.calls, 4);
        assert_eq!(sites.sites.len(), 3, "a lost marker names no site");
        assert!(
            c.payload.len() < recs.len() * 8,
            "{} bytes",
            c.payload.len()
        );
        let mut out = Vec::new();
        decode(&c, sites.sites.len(), TickScale::new(1.0), &mut out).unwrap();
        let got: Vec<_> = out
            .iter()
            .map(|r| (r.start_ns, r.end_ns, r.depth, r.site, r.kind, r.unwound))
            .collect();
        assert_eq!(
            got,
            vec![
                (100, 110, 2, 0, 0, false),
                (115, 127, 2, 0, 0, true),
                (90, 150, 1, 1, 1, false),
                (200, 200, 1, 1, 3, false),
                (50, 50 + DUR_MAX, 0, 2, 2, false),
                (0, 295, 0, 1, 0, false),
            ]
        );
        assert_eq!(out[3].count, 3);
    }

    #[test]
    fn extension_records_round_trip_and_leave_the_calls_around_them_intact() {
        use fgtrace_core::record::ext;
        let origin = 1u64 << 40;
        let recs = vec![
            RawCall::pack(origin + 100, 1, 10, 40, false, kind::CALL),
            RawCall::ext(ext::ALLOCS, 3, 192),
            RawCall::ext(ext::COUNTER, u64::MAX, 0),
            RawCall::pack(origin + 90, 0, 30, 41, false, kind::CALL),
        ];
        let mut sites = SiteMap::default();
        let mut enc = RawEncoder::default();
        let c = enc.encode(0, &recs, origin, &mut sites, &info);
        assert_eq!(enc.calls, 2, "extension records are not calls");
        let mut out = Vec::new();
        decode(&c, sites.sites.len(), TickScale::new(1.0), &mut out).unwrap();
        let got: Vec<_> = out
            .iter()
            .map(|r| (r.start_ns, r.depth, r.site, r.kind, r.unwound, r.count, r.b))
            .collect();
        assert_eq!(
            got,
            vec![
                (100, 1, 0, 0, false, 10, 0),
                (110, 1, ext::ALLOCS as u32, 3, true, 3, 192),
                (110, 1, ext::COUNTER as u32, 3, true, u64::MAX, 0),
                (90, 0, 1, 0, false, 30, 0),
            ]
        );
        // A hostile extension record is an error naming it, not a panic.
        let bad = RawChunk {
            thread: 0,
            count: 1,
            payload: vec![0x07, ext::LAST as u8 + 1, 1, 1].into(),
            offset: 0,
        };
        let e = decode(&bad, 2, TickScale::new(1.0), &mut Vec::new()).unwrap_err();
        let want = format!("extension record {}", ext::LAST + 1);
        assert!(e.to_string().contains(&want), "{e}");
    }

    #[test]
    fn hostile_raw_chunks_are_errors() {
        let bad = |payload: Vec<u8>, count: u32| {
            let c = RawChunk {
                thread: 0,
                count,
                payload: payload.into(),
                offset: 1000,
            };
            decode(&c, 2, TickScale::new(1.0), &mut Vec::new())
                .unwrap_err()
                .to_string()
        };
        // Depth goes negative.
        assert!(bad(vec![zigzag(-1) as u8 * 16, 0, 0, 0], 1).contains("depth"));
        // Site beyond the table.
        assert!(bad(vec![0, 9, 0, 0], 1).contains("site 9 of 2"));
        // Repeats a site before any.
        assert!(bad(vec![8, 0, 0], 1).contains("repeats"));
        // Runs past the end.
        assert!(bad(vec![0, 1], 1).contains("past the end"));
        // Left-over bytes.
        assert!(bad(vec![0, 1, 0, 0, 7], 1).contains("left over"));
        // Duration out of range.
        let mut p = vec![0, 1, 0];
        crate::encoding::put_varint(&mut p, DUR_MAX + 1);
        assert!(bad(p, 1).contains("duration"));
    }
}
