//! Allocation counting: what a counting global allocator (`fgtrace::alloc::Counting`)
//! calls after each allocation, reallocation and deallocation. The figures go
//! to the innermost open traced call of the thread (an entry beside its
//! shadow-stack frame), are added to its caller's when it returns, and are
//! written after the call's record as extension records
//! ([`RawCall::ext`](crate::record::RawCall::ext)): self and inclusive
//! figures per call, exactly.
//!
//! Nothing here allocates or locks. While fgtrace's own code runs on a thread
//! (a hook: the thread is busy) nothing is counted, so fgtrace's own
//! allocations never show up in a call's figures.

use crate::probe::count_alloc;
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// The per-call figures a counting allocator records, in the order their
/// extension records carry them: the counter names a trace lists first.
pub const NAMES: [&str; 5] = ["allocs", "alloc_bytes", "frees", "freed_bytes", "reallocs"];

static INSTALLED: AtomicBool = AtomicBool::new(false);

#[inline]
fn mark_installed() {
    if !INSTALLED.load(Relaxed) {
        INSTALLED.store(true, Relaxed);
    }
}

/// Whether a counting allocator has run in this process (it is the global
/// allocator: it runs before `main`). The layer above allocates the
/// per-frame figures only then.
pub fn installed() -> bool {
    INSTALLED.load(Relaxed)
}

/// An allocation of `bytes` succeeded.
#[inline]
pub fn allocated(bytes: usize) {
    mark_installed();
    count_alloc(|a| {
        a.allocs = a.allocs.wrapping_add(1);
        a.alloc_bytes = a.alloc_bytes.wrapping_add(bytes as u64);
    });
}

/// A deallocation of `bytes`.
#[inline]
pub fn freed(bytes: usize) {
    mark_installed();
    count_alloc(|a| {
        a.frees = a.frees.wrapping_add(1);
        a.freed_bytes = a.freed_bytes.wrapping_add(bytes as u64);
    });
}

/// A reallocation from `old` to `new` bytes succeeded.
#[inline]
pub fn reallocated(old: usize, new: usize) {
    mark_installed();
    count_alloc(|a| {
        a.reallocs = a.reallocs.wrapping_add(1);
        a.alloc_bytes = a.alloc_bytes.wrapping_add(new as u64);
        a.freed_bytes = a.freed_bytes.wrapping_add(old as u64);
    });
}
