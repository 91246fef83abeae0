//! Allocation counts per traced call: [`Counting`], a global allocator that
//! wraps another one (usually [`std::alloc::System`]).
//!
//! ```no_run
//! use std::alloc::System;
//! #[global_allocator]
//! static ALLOC: fgtrace::alloc::Counting<System> = fgtrace::alloc::Counting::new(System);
//! ```
//!
//! Every allocation, reallocation and deallocation is charged to the
//! innermost traced call open on the thread (self figures); when that call
//! returns its figures are added to its caller's (inclusive figures: a call's
//! figures include its callees', as a duration does). Sessions and
//! `fgtrace::testing` captures record them beside each call: the trace's
//! per-call counters [`NAMES`] (`allocs`, `alloc_bytes`, `frees`,
//! `freed_bytes`, `reallocs`), shown by `graph`, `report` and `html`, and
//! queried by `cap.allocations(name)` and friends.
//!
//! It takes no lock and allocates nothing; while fgtrace's own code runs on a
//! thread (its cold paths: joining a session, handing a buffer over, a
//! filter decision) nothing is counted, so fgtrace's allocations never show
//! up in a call's figures. Allocations outside every traced call, or while
//! nothing records, are not counted anywhere (they cost one relaxed load).

use std::alloc::{GlobalAlloc, Layout};

/// Names of the per-call allocation counters in a trace
/// ([`TraceMeta::counters`](fgtrace_trace::TraceMeta::counters)), in this order.
pub use fgtrace_core::alloc::NAMES;

/// A global allocator that counts what `A` does per traced call (see the
/// [module docs](self)).
#[derive(Debug, Default, Clone, Copy)]
pub struct Counting<A> {
    inner: A,
}

impl<A> Counting<A> {
    /// Wraps `inner`: `static A: Counting<System> = Counting::new(System);`.
    pub const fn new(inner: A) -> Self {
        Counting { inner }
    }

    /// The wrapped allocator.
    pub const fn inner(&self) -> &A {
        &self.inner
    }
}

// SAFETY: every method forwards to `A` unchanged; the counting beside it
// neither allocates nor touches the memory.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = self.inner.alloc(layout);
        if !p.is_null() {
            fgtrace_core::alloc::allocated(layout.size());
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = self.inner.alloc_zeroed(layout);
        if !p.is_null() {
            fgtrace_core::alloc::allocated(layout.size());
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.inner.dealloc(ptr, layout);
        fgtrace_core::alloc::freed(layout.size());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = self.inner.realloc(ptr, layout, new_size);
        if !p.is_null() {
            fgtrace_core::alloc::reallocated(layout.size(), new_size);
        }
        p
    }
}

/// Whether a [`Counting`] allocator is the process's global allocator (it
/// has run: a Rust program allocates before `main`).
pub fn installed() -> bool {
    fgtrace_core::alloc::installed()
}
