//! The call record the hot path writes: 16 bytes, no pointers, so a buffer of
//! them can be copied, shipped over a wire or dumped as it is.

/// Kind of a raw record (2 bits).
pub mod kind {
    /// A completed call.
    pub const CALL: u64 = 0;
    /// One poll of an async fn.
    pub const POLL: u64 = 1;
    /// A whole future, first poll to completion (depth field = poll count).
    pub const FUTURE: u64 = 2;
    /// Records were lost here (duration field = count). With the unwound bit
    /// set, an extension record instead (see [`RawCall::ext`](super::RawCall::ext)).
    pub const LOST: u64 = 3;
}

/// Subkinds of extension records: allocation figures of the call record just
/// before it (written by `probe` when the global allocator counts, see
/// [`crate::alloc`]). Each carries two values: `a` (64 bits) and `b` (56 bits,
/// saturating).
pub mod ext {
    /// a = allocations, b = bytes allocated (reallocations' new sizes included).
    pub const ALLOCS: u64 = 0;
    /// a = frees, b = bytes freed (reallocations' old sizes included).
    pub const FREES: u64 = 1;
    /// a = reallocations, b = 0.
    pub const REALLOCS: u64 = 2;
    /// a = the call's delta of a per-call counter (entry to exit, callees
    /// included), b = the counter's index in the session's list.
    pub const COUNTER: u64 = 3;
    /// a = the bits of one value `#[traced(values(..))]` recorded for the
    /// call, b = its slot (low 3 bits: an index into the site's value
    /// names) | its tag (the next 8 bits, see [`crate::values::tag`]) | a
    /// string's length (the next 32 bits; a string's `a` is its address).
    /// Written only for calls whose site has values.
    pub const VALUE: u64 = 4;
    /// The record just before is not a call but an instant marker (a
    /// `tracing` event): a zero-length record at the marker's time and depth,
    /// its site the marker's. a = b = 0. Its values follow this one.
    pub const MARKER: u64 = 5;
    /// a = the id of the future the record just before belongs to (a poll's
    /// record, or a whole future's): the address of a `#[traced]` future,
    /// pinned from its first poll until it is dropped, or a `tracing` span's
    /// id, unique among open spans. Two futures of one site with the same id
    /// never overlap in time, so a poll belongs to the future of its site and
    /// id whose first poll to end holds it. b = 0. Comes before the record's
    /// values.
    pub const FUTURE: u64 = 6;
    /// The record two before this one (a marker: a zero-length record, then
    /// [`MARKER`]) is a wake of a future, not an instant marker: on the
    /// waking thread, at the wake's time, at that thread's depth; its site
    /// is the future's. a = the future's id (as [`FUTURE`] gives it), b = 0.
    pub const WAKE: u64 = 7;
    /// After a whole future's [`FUTURE`]: a = the ticks its polls took while
    /// recording (its busy time), b = its polls, all of them (the record's
    /// poll count saturates).
    pub const FUTURE_BUSY: u64 = 8;
    /// After [`FUTURE_BUSY`], when the future's wakes were watched: a = the
    /// ticks from each wake to the start of the poll after it (from the
    /// poll's end, for a wake during a poll), summed: its scheduled time;
    /// b = its wakes.
    pub const FUTURE_WAKES: u64 = 9;
    /// The largest subkind a reader accepts.
    pub const LAST: u64 = FUTURE_WAKES;
}

/// Allocation figures of one call, callees included (see [`crate::alloc`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct AllocCounts {
    /// Allocations (`alloc`, `alloc_zeroed`).
    pub allocs: u64,
    /// Deallocations.
    pub frees: u64,
    /// Reallocations.
    pub reallocs: u64,
    /// Bytes allocated (a reallocation adds its new size).
    pub alloc_bytes: u64,
    /// Bytes freed (a reallocation adds its old size).
    pub freed_bytes: u64,
}

impl AllocCounts {
    /// Nothing counted.
    pub const ZERO: AllocCounts = AllocCounts {
        allocs: 0,
        frees: 0,
        reallocs: 0,
        alloc_bytes: 0,
        freed_bytes: 0,
    };
    /// Adds `o` (wrapping: a sum that wraps a u64 is beyond any real run).
    #[inline]
    pub fn add(&mut self, o: &AllocCounts) {
        self.allocs = self.allocs.wrapping_add(o.allocs);
        self.frees = self.frees.wrapping_add(o.frees);
        self.reallocs = self.reallocs.wrapping_add(o.reallocs);
        self.alloc_bytes = self.alloc_bytes.wrapping_add(o.alloc_bytes);
        self.freed_bytes = self.freed_bytes.wrapping_add(o.freed_bytes);
    }
}

/// Largest `b` value of an extension record; larger ones saturate.
pub const EXT_B_MAX: u64 = (1 << 56) - 1;
const UNWOUND_BIT: u64 = 1 << 61;

const START_BITS: u32 = 54;
const DEPTH_BITS: u32 = 10;
const DUR_BITS: u32 = 43;
const SITE_BITS: u32 = 18;
/// The bits of the entry time a record keeps.
pub const START_MASK: u64 = (1 << START_BITS) - 1;
/// The deepest depth (or poll count) a record can say.
pub const MAX_DEPTH: u32 = (1 << DEPTH_BITS) - 1;
/// The longest duration a record can say, in ticks; longer calls saturate.
pub const DUR_MAX: u64 = (1 << DUR_BITS) - 1;
/// Most sites a process can have (site ids fit in 18 bits).
pub const MAX_SITES: u32 = 1 << SITE_BITS;

/// One call as the hot path writes it: 16 bytes.
///
/// * word 0: entry ticks (low 54 bits; the collector restores the high bits
///   from the session origin) | depth (10 bits)
/// * word 1: duration in ticks (43 bits, about 49 minutes at 3 GHz; longer
///   calls saturate) | site id (18 bits) | unwound (1 bit) | kind (2 bits)
///
/// On a board (`irq-mask` without `std`) a plain call (kind CALL, not
/// unwound) keeps word 0 as `start << 10 | depth` instead: the same bits,
/// two instructions to pack where the mask and the shift at bit 54 take
/// seven. Only the board runtime reads a board's buffers, through these
/// accessors, and it sends plain calls as varints and every other record
/// (whose layout is the common one) as its 16 bytes, so no host sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct RawCall(pub u64, pub u64);

impl RawCall {
    /// Packs the fields; the duration saturates at [`DUR_MAX`].
    #[inline(always)]
    pub fn pack(start: u64, depth: u32, dur: u64, site: u32, unwound: bool, kind: u64) -> RawCall {
        #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
        return Self::pack_board(start, depth, dur, site, unwound, kind);
        #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
        Self::pack_common(start, depth, dur, site, unwound, kind)
    }
    /// [`RawCall::pack`] in the common layout.
    #[inline(always)]
    fn pack_common(
        start: u64,
        depth: u32,
        dur: u64,
        site: u32,
        unwound: bool,
        kind: u64,
    ) -> RawCall {
        let dur = if dur > DUR_MAX { DUR_MAX } else { dur };
        RawCall(
            (start & START_MASK) | ((depth as u64) << START_BITS),
            dur | ((site as u64) << DUR_BITS) | ((unwound as u64) << 61) | (kind << 62),
        )
    }
    /// [`RawCall::pack`] on a board: a plain call in the board layout,
    /// anything else in the common one.
    #[cfg(any(test, all(feature = "irq-mask", not(feature = "std"))))]
    #[inline(always)]
    fn pack_board(
        start: u64,
        depth: u32,
        dur: u64,
        site: u32,
        unwound: bool,
        kind: u64,
    ) -> RawCall {
        if kind == kind::CALL && !unwound {
            let dur = if dur > DUR_MAX { DUR_MAX } else { dur };
            return Self::board_call(start, depth & MAX_DEPTH, dur, site);
        }
        Self::pack_common(start, depth, dur, site, unwound, kind)
    }
    /// A plain call in the board layout, for a board's plain exit: `depth`
    /// at most [`MAX_DEPTH`], `dur` at most [`DUR_MAX`], `site` below
    /// [`MAX_SITES`].
    #[inline(always)]
    pub fn board_call(start: u64, depth: u32, dur: u64, site: u32) -> RawCall {
        // Sign-extended on 64-bit RISC-V: the depth fits in 10 bits, so
        // this is the zero-extended depth, and RISC-V keeps 32-bit values
        // sign-extended (x86_64 and 32-bit targets need no instruction to
        // zero-extend).
        let depth = if cfg!(target_arch = "riscv64") {
            depth as i32 as i64 as u64
        } else {
            depth as u64
        };
        RawCall(start << DEPTH_BITS | depth, dur | (site as u64) << DUR_BITS)
    }
    /// The low [`START_MASK`] bits of the entry ticks.
    pub fn start_low(self) -> u64 {
        #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
        return self.start_low_board();
        #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
        {
            self.0 & START_MASK
        }
    }
    /// [`RawCall::start_low`] on a board (a plain call's layout differs).
    #[cfg(any(test, all(feature = "irq-mask", not(feature = "std"))))]
    #[inline(always)]
    fn start_low_board(self) -> u64 {
        if self.1 >> 61 == 0 {
            self.0 >> DEPTH_BITS
        } else {
            self.0 & START_MASK
        }
    }
    /// Shadow-stack depth of the call (poll count of a future).
    pub fn depth(self) -> u32 {
        #[cfg(all(feature = "irq-mask", not(any(feature = "std", test))))]
        return self.depth_board();
        #[cfg(not(all(feature = "irq-mask", not(any(feature = "std", test)))))]
        {
            (self.0 >> START_BITS) as u32
        }
    }
    /// [`RawCall::depth`] on a board (a plain call's layout differs).
    #[cfg(any(test, all(feature = "irq-mask", not(feature = "std"))))]
    #[inline(always)]
    fn depth_board(self) -> u32 {
        if self.1 >> 61 == 0 {
            (self.0 & MAX_DEPTH as u64) as u32
        } else {
            (self.0 >> START_BITS) as u32
        }
    }
    /// Duration in ticks (a count for [`kind::LOST`]).
    pub fn dur(self) -> u64 {
        self.1 & DUR_MAX
    }
    /// The site id.
    pub fn site(self) -> u32 {
        ((self.1 >> DUR_BITS) & (MAX_SITES as u64 - 1)) as u32
    }
    /// The call ended by unwinding (a panic), or the future was cancelled.
    pub fn unwound(self) -> bool {
        self.1 >> 61 & 1 != 0
    }
    /// One of [`kind`].
    pub fn kind(self) -> u64 {
        self.1 >> 62
    }
    /// An extension record of subkind `sub` (one of [`ext`]) with values `a`
    /// and `b` (saturating at [`EXT_B_MAX`]): it belongs to the call record
    /// written just before it on the same thread.
    #[inline]
    pub fn ext(sub: u64, a: u64, b: u64) -> RawCall {
        let b = if b > EXT_B_MAX { EXT_B_MAX } else { b };
        RawCall(a, b | (sub & 0x1f) << 56 | UNWOUND_BIT | kind::LOST << 62)
    }
    /// This is an extension record (see [`RawCall::ext`]), not a call or a loss.
    pub fn is_ext(self) -> bool {
        self.kind() == kind::LOST && self.1 & UNWOUND_BIT != 0
    }
    /// An extension record's subkind, one of [`ext`].
    pub fn ext_sub(self) -> u64 {
        (self.1 >> 56) & 0x1f
    }
    /// How many of a thread's records this one stands for that are not
    /// calls: 1 for an extension record, a whole future and a count of lost
    /// records; 2 for a marker's extension ([`ext::MARKER`]), whose
    /// zero-length record before it is not a call either; else 0 (a call, a
    /// poll). Where a numbering says records never arrived (a board's stream
    /// or its flight recorder's ring), this weight summed over those written
    /// and over those received tells how many of them were calls.
    pub fn non_calls(self) -> u64 {
        match self.kind() {
            kind::CALL | kind::POLL => 0,
            _ if self.is_ext() && self.ext_sub() == ext::MARKER => 2,
            _ => 1,
        }
    }
    /// An extension record's values `(a, b)`.
    pub fn ext_values(self) -> (u64, u64) {
        (self.0, self.1 & EXT_B_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_call_packs_every_field() {
        let r = RawCall::pack(
            0x3f_ffff_ffff_1234,
            513,
            1 << 40,
            MAX_SITES - 1,
            true,
            kind::POLL,
        );
        assert_eq!(r.start_low(), 0x3f_ffff_ffff_1234 & START_MASK);
        assert_eq!(r.depth(), 513);
        assert_eq!(r.dur(), 1 << 40);
        assert_eq!(r.site(), MAX_SITES - 1);
        assert!(r.unwound());
        assert_eq!(r.kind(), kind::POLL);
        assert_eq!(
            RawCall::pack(5, 0, u64::MAX, 3, false, kind::CALL).dur(),
            DUR_MAX
        );
        assert_eq!(core::mem::size_of::<RawCall>(), 16);
    }

    #[test]
    fn the_board_layout_keeps_every_field_of_a_plain_call_and_no_other() {
        let start = 0xffff_ffff_ffff_1234;
        let r = RawCall::pack_board(start, 1000, 1 << 42, MAX_SITES - 1, false, kind::CALL);
        assert_eq!(r.start_low_board(), start & START_MASK);
        assert_eq!(r.depth_board(), 1000);
        assert_eq!(r.dur(), 1 << 42);
        assert_eq!(r.site(), MAX_SITES - 1);
        assert!(!r.unwound());
        assert_eq!(r.kind(), kind::CALL);
        assert_eq!(r, RawCall::board_call(start, 1000, 1 << 42, MAX_SITES - 1));
        // The common layout's word 0 differs: the layout did change.
        assert_ne!(
            r.0,
            RawCall::pack_common(start, 1000, 1, 0, false, kind::CALL).0
        );
        // A duration past the record's bits saturates, as in the common
        // layout, and leaves the site alone.
        let long = RawCall::pack_board(start, 1, u64::MAX, 5, false, kind::CALL);
        assert_eq!((long.dur(), long.site()), (DUR_MAX, 5));
        // A depth past the record's bits keeps its low bits, as the common
        // layout does, and leaves the start alone.
        let deep = RawCall::pack_board(7, MAX_DEPTH + 3, 1, 0, false, kind::CALL);
        assert_eq!((deep.start_low_board(), deep.depth_board()), (7, 2));
        // Every other record keeps the common layout, which hosts read.
        for (unwound, k) in [
            (true, kind::CALL),
            (false, kind::POLL),
            (false, kind::FUTURE),
            (false, kind::LOST),
        ] {
            let a = RawCall::pack_board(start, 513, 9, 3, unwound, k);
            assert_eq!(a, RawCall::pack_common(start, 513, 9, 3, unwound, k));
            assert_eq!(
                (a.start_low_board(), a.depth_board()),
                (start & START_MASK, 513)
            );
        }
        let e = RawCall::ext(ext::FREES, 5, 6);
        assert_eq!(
            (e.depth_board(), e.start_low_board()),
            (e.depth(), e.start_low())
        );
    }

    #[test]
    fn extension_records_are_told_from_losses_and_keep_their_values() {
        let e = RawCall::ext(ext::FREES, u64::MAX, 1 << 60);
        assert!(e.is_ext());
        assert_eq!(e.kind(), kind::LOST);
        assert_eq!(e.ext_sub(), ext::FREES);
        assert_eq!(e.ext_values(), (u64::MAX, EXT_B_MAX));
        let lost = RawCall::pack(5, 1, 7, 0, false, kind::LOST);
        assert!(!lost.is_ext());
        assert!(!RawCall::pack(5, 1, 7, 0, true, kind::CALL).is_ext());
    }
}
