//! A simulated interrupt for the core's tests: a handler (traced code) that
//! [`arm`] sets runs at the next [`point`] where interrupts are not masked,
//! as a board's interrupt would land there. The probe's masked stretches
//! (a call's record and its values, a whole future's) mask it.

use std::cell::Cell;

std::thread_local! {
    static MASKED: Cell<u32> = const { Cell::new(0) };
    static PENDING: Cell<Option<fn()>> = const { Cell::new(None) };
}

/// The next unmasked [`point`] runs `handler`.
pub(in crate::probe) fn arm(handler: fn()) {
    PENDING.with(|p| p.set(Some(handler)));
}

/// Where an interrupt may land: runs the pending handler unless masked.
pub(in crate::probe) fn point() {
    if MASKED.with(|m| m.get()) == 0 {
        if let Some(h) = PENDING.with(|p| p.take()) {
            h();
        }
    }
}

/// Masks (nests); returns what [`unmask`] takes.
pub(in crate::probe) fn mask() -> u32 {
    MASKED.with(|m| {
        m.set(m.get() + 1);
        m.get() - 1
    })
}

/// Restores what [`mask`] returned; a handler that became pending while
/// masked runs now, as a real one would once unmasked.
pub(in crate::probe) fn unmask(saved: u32) {
    MASKED.with(|m| m.set(saved));
    point();
}
