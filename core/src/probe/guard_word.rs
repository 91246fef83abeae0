//! A board guard's serial word: what it says of the guard's frame and of
//! the session that pushed it (the board probe's encoding, apart from
//! `board` so that the host's tests check it too).
//!
//! The first hart's plain guards carry the hart's `fast` word as it is
//! (`generation << 3 | Record`, below 2^24); every other guard has
//! [`OTHER`], the sign bit: the plain exit inlined in a traced fn tells
//! them apart with one branch. A plain guard on another hart has [`FAST`]
//! too, beside its hart's `fast` word; a general guard has its frame's
//! serial (24 bits).

use super::{GEN_TAGS, SERIAL_MASK};

/// A guard's serial bit: pushed by anything but the first hart's plain
/// entry (whose guards' serial word is the hart's `fast` word, so that
/// no instruction makes it).
pub(super) const OTHER: u32 = 1 << 31;
/// With [`OTHER`], a guard's serial bit: pushed by the plain entry on any
/// hart but the first (its frame's tag is 0; the low bits are the hart's
/// `fast` word).
pub(super) const FAST: u32 = 1 << 30;

/// The guard's serial says its frame was pushed by the first hart's plain
/// entry.
#[inline(always)]
pub(super) fn is_first(serial: u32) -> bool {
    (serial as i32) >= 0
}

/// The guard's frame was pushed by a plain entry (tag 0, no serial).
#[inline(always)]
pub(super) fn is_plain(serial: u32) -> bool {
    is_first(serial) || serial & FAST != 0
}

/// The serial the guard's frame carries: 0 for a plain guard.
#[inline(always)]
pub(super) fn frame_serial(serial: u32) -> u32 {
    if is_plain(serial) {
        0
    } else {
        serial & SERIAL_MASK
    }
}

/// A plain guard's session generation (its serial word is the `fast` word
/// the hart had when it pushed: `generation << 3 | Record`).
#[inline(always)]
pub(super) fn plain_generation(serial: u32) -> Option<u32> {
    if is_plain(serial) {
        Some((serial & SERIAL_MASK) >> 3)
    } else {
        None
    }
}

/// A board guard whose frame is gone was pushed in the session its hart
/// records now: a plain guard names its session, compared with the
/// state's `gen`; any other guard is judged by its frame's serial
/// (`since_join`: the host's rule).
#[inline(always)]
pub(super) fn pushed_in_session(gen: u32, serial: u32, since_join: impl Fn(u32) -> bool) -> bool {
    match plain_generation(serial) {
        Some(g) => gen & !GEN_TAGS == g,
        None => since_join(frame_serial(serial)),
    }
}
