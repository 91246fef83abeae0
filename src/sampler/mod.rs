//! Stack sampling: frame-pointer unwinding over raw stack memory.

pub mod unwind;
