//! The board probe on Cortex-M: the entry out of line.
//!
//! Armv7-M has 13 general registers, and the extended clock's read (its
//! counter's address, its direction and its high word, three loads before
//! the counter's) with the plain push inlined into a traced fn made it save
//! three more registers in its prologue, which every call paid, recording
//! or not. Out of line, what a traced fn pays while nothing records is the
//! session word's test and the guard's.

use super::{enter_out, enter_plain, hart_index, Guard, Site, STATES};

/// [`super::enter_board`] on Cortex-M: the first hart's plain push, else
/// the general entry.
#[inline(never)]
pub(super) fn enter_first(site: &'static Site, sp: usize) -> Guard {
    if hart_index() == 0 {
        if let Some(g) = enter_plain(&STATES[0], site, 0, sp) {
            return g;
        }
    }
    enter_out(site, sp)
}
