//! The control word: the one load every probe makes first.
//!
//! `generation << GEN_SHIFT | captures << 1 | session on`. The generation
//! changes with every session, so per-site and per-thread caches made for an
//! earlier session are redone. The number of running thread-local captures
//! (`fgtrace::testing`) lives in the same word, so "is anything recording" is
//! one test of the word against [`ON_MASK`], and a capture that ends can never
//! clear a bit another capture or a session still needs: every change is one
//! atomic read-modify-write of the whole word.

use core::sync::atomic::{AtomicU32, Ordering::*};

/// The word itself.
pub static CONTROL: AtomicU32 = AtomicU32::new(0);

/// A session is recording.
pub const SESSION_ON: u32 = 1;
const CAPTURE_ONE: u32 = 1 << 1;
const CAPTURE_BITS: u32 = 10;
/// Running captures, counted in bits 1..=10.
pub const CAPTURE_MASK: u32 = ((1 << CAPTURE_BITS) - 1) << 1;
/// Anything recording: a session or at least one capture.
pub const ON_MASK: u32 = SESSION_ON | CAPTURE_MASK;
/// Where the generation starts.
pub const GEN_SHIFT: u32 = 1 + CAPTURE_BITS;
/// Generations wrap at this many (21 bits).
pub const GEN_MASK: u32 = u32::MAX >> GEN_SHIFT;
/// Most captures that can run at once in a process.
pub const MAX_CAPTURES: u32 = (1 << CAPTURE_BITS) - 1;

/// The generation in a control word.
#[inline(always)]
pub const fn generation(c: u32) -> u32 {
    c >> GEN_SHIFT
}

/// Turns the session bit on for generation `gen` (captures are kept).
pub fn session_on(gen: u32) {
    session_on_in(&CONTROL, gen)
}

fn session_on_in(word: &AtomicU32, gen: u32) {
    let _ = word.fetch_update(Release, Relaxed, |c| {
        Some(((gen & GEN_MASK) << GEN_SHIFT) | (c & CAPTURE_MASK) | SESSION_ON)
    });
}

/// Turns the session bit off (captures are kept, and so is the generation).
pub fn session_off() {
    session_off_in(&CONTROL)
}

fn session_off_in(word: &AtomicU32) {
    word.fetch_and(!SESSION_ON, Release);
}

/// Whether a session is recording.
pub fn session_is_on() -> bool {
    CONTROL.load(Acquire) & SESSION_ON != 0
}

/// Counts one more running capture. `false` when [`MAX_CAPTURES`] run already.
pub fn capture_begin() -> bool {
    capture_begin_in(&CONTROL)
}

fn capture_begin_in(word: &AtomicU32) -> bool {
    word.fetch_update(Release, Relaxed, |c| {
        ((c & CAPTURE_MASK) >> 1 < MAX_CAPTURES).then_some(c + CAPTURE_ONE)
    })
    .is_ok()
}

/// Counts one capture less (after a successful [`capture_begin`]).
pub fn capture_end() {
    capture_end_in(&CONTROL)
}

fn capture_end_in(word: &AtomicU32) {
    let prev = word.fetch_sub(CAPTURE_ONE, Release);
    debug_assert!(
        prev & CAPTURE_MASK != 0,
        "capture_end without capture_begin"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_and_session_share_the_word_without_clearing_each_other() {
        // A word of its own: the global one belongs to the probe tests.
        let w = AtomicU32::new(0);
        assert!(capture_begin_in(&w));
        assert!(capture_begin_in(&w));
        session_on_in(&w, 5);
        let c = w.load(Relaxed);
        assert_eq!(generation(c), 5);
        assert_eq!((c & CAPTURE_MASK) >> 1, 2);
        capture_end_in(&w);
        session_off_in(&w);
        assert_ne!(w.load(Relaxed) & ON_MASK, 0, "one capture still runs");
        capture_end_in(&w);
        assert_eq!(w.load(Relaxed) & ON_MASK, 0);
        assert_eq!(generation(w.load(Relaxed)), 5);
    }

    #[test]
    fn captures_are_bounded() {
        let w = AtomicU32::new(0);
        for _ in 0..MAX_CAPTURES {
            assert!(capture_begin_in(&w));
        }
        assert!(
            !capture_begin_in(&w),
            "one more would carry into the generation"
        );
        assert_eq!(generation(w.load(Relaxed)), 0);
    }
}
