//! Allocation queries and assertions on a [`Capture`]: exact counts per
//! function, from the counting global allocator (`fgtrace::alloc::Counting`).
//!
//! Inclusive figures (`allocations`, `allocated_bytes`) count a call's
//! callees too and count recursion once, as `total` does; self figures
//! (`self_allocations`) leave the traced callees' out. Where the counting
//! allocator is not installed the queries return `None` and the assertions
//! panic saying how to install it: never zeros that look real.

use super::captured::*;
use super::render;
use fgtrace_core::record::AllocCounts;

/// How to install the counting allocator, for failure messages.
pub(super) const HOW_TO_INSTALL: &str = "allocation counts need the counting global allocator: \
     add `#[global_allocator] static ALLOC: fgtrace::alloc::Counting<std::alloc::System> = \
     fgtrace::alloc::Counting::new(std::alloc::System);` to the test crate (one per binary, e.g. \
     at the top of the test file)";

impl Capture {
    /// Whether this capture has allocation figures (the counting allocator is installed).
    pub fn counts_allocations(&self) -> bool {
        fgtrace_runtime::alloc::installed() || self.spans.iter().any(|s| s.allocs.is_some())
    }

    /// Spans of `name` that are not inside another span of `name`.
    fn outer_spans(&self, name: &str) -> Vec<usize> {
        let mask = self.site_mask(name);
        (0..self.spans.len())
            .filter(|&i| mask[self.spans[i].call.site as usize])
            .filter(|&i| {
                !self
                    .ancestors(i)
                    .any(|a| mask[self.spans[a].call.site as usize])
            })
            .collect()
    }

    fn alloc_sum(&self, name: &str, f: impl Fn(&AllocCounts) -> u64) -> Option<u64> {
        if !self.counts_allocations() {
            return None;
        }
        Some(
            self.outer_spans(name)
                .into_iter()
                .filter_map(|i| self.spans[i].allocs.as_ref().map(&f))
                .sum(),
        )
    }

    /// Allocations made by the calls of `name`, their callees included
    /// (recursion counted once, as for [`Capture::total`]); `None` without
    /// the counting allocator.
    pub fn allocations(&self, name: &str) -> Option<u64> {
        self.alloc_sum(name, |a| a.allocs)
    }

    /// Allocations made by the calls of `name` in their own code (traced
    /// callees excluded).
    pub fn self_allocations(&self, name: &str) -> Option<u64> {
        let spans = self.alloc_spans(name)?;
        Some(spans.filter_map(|s| s.self_allocs.map(|a| a.allocs)).sum())
    }

    /// Bytes allocated by the calls of `name`, callees included (a
    /// reallocation adds its new size).
    pub fn allocated_bytes(&self, name: &str) -> Option<u64> {
        self.alloc_sum(name, |a| a.alloc_bytes)
    }

    /// Bytes freed by the calls of `name`, callees included.
    pub fn freed_bytes(&self, name: &str) -> Option<u64> {
        self.alloc_sum(name, |a| a.freed_bytes)
    }

    /// Reallocations by the calls of `name`, callees included.
    pub fn reallocations(&self, name: &str) -> Option<u64> {
        self.alloc_sum(name, |a| a.reallocs)
    }

    /// All allocation figures of the calls of `name`, callees included.
    pub fn alloc_counts(&self, name: &str) -> Option<AllocCounts> {
        if !self.counts_allocations() {
            return None;
        }
        let mut t = AllocCounts::ZERO;
        for i in self.outer_spans(name) {
            if let Some(a) = &self.spans[i].allocs {
                t.add(a);
            }
        }
        Some(t)
    }

    /// Allocations of each call of `name` (callees included), in trace order.
    pub fn allocations_of(&self, name: &str) -> Option<Vec<u64>> {
        let spans = self.alloc_spans(name)?;
        Some(spans.map(|s| s.allocs.map_or(0, |a| a.allocs)).collect())
    }

    /// Every span of `name` in trace order (recursive calls too); `None`
    /// without the counting allocator.
    fn alloc_spans(&self, name: &str) -> Option<impl Iterator<Item = &Span> + '_> {
        if !self.counts_allocations() {
            return None;
        }
        let mask = self.site_mask(name);
        Some(
            self.spans
                .iter()
                .filter(move |s| mask[s.call.site as usize]),
        )
    }

    /// Panics naming the fix unless the counting allocator is installed.
    #[track_caller]
    fn alloc_gate(&self, what: &str) {
        if !self.counts_allocations() {
            fail(format!("{what}: {HOW_TO_INSTALL}"));
        }
    }

    /// The call of `name` with most of `f`, as a unit to render.
    fn worst_by(&self, name: &str, f: impl Fn(&AllocCounts) -> u64) -> (u64, String) {
        let units = self.called(name);
        let worst = units
            .iter()
            .max_by_key(|u| u.span.and_then(|i| self.spans[i].allocs.as_ref().map(&f)))
            .copied()
            .expect("called");
        let v = worst
            .span
            .and_then(|i| self.spans[i].allocs.as_ref().map(&f))
            .unwrap_or(0);
        (v, render::unit(self, &worst))
    }

    /// Fails unless the calls of `name` allocated exactly `n` times in all,
    /// callees included (see [`Capture::allocations`]); the message shows
    /// the graph of the call that allocated most. Panics (naming the fix)
    /// without the counting allocator.
    #[track_caller]
    pub fn assert_allocations(&self, name: &str, n: u64) {
        let gate = format!("allocation count of `{name}`");
        let expected = format!("expected exactly {n}");
        self.assert_allocations_in_all(name, &gate, |got| got == n, &expected);
    }

    /// Fails if the calls of `name` allocated more than `max` times in all.
    #[track_caller]
    pub fn assert_allocations_at_most(&self, name: &str, max: u64) {
        let gate = format!("allocation budget of `{name}`");
        let over = format!("over its budget of {max}");
        self.assert_allocations_in_all(name, &gate, |got| got <= max, &over);
    }

    /// Fails unless the allocations of all calls of `name` pass `holds`;
    /// `failed` says what was expected.
    #[track_caller]
    fn assert_allocations_in_all(
        &self,
        name: &str,
        gate: &str,
        holds: impl Fn(u64) -> bool,
        failed: &str,
    ) {
        self.alloc_gate(gate);
        let units = self.called(name);
        let got = self.allocations(name).unwrap_or(0);
        if !holds(got) {
            let (most, graph) = self.worst_by(name, |a| a.allocs);
            fail(format!(
                "`{name}` allocated {got} times in {} calls, {failed}; the call that allocated most ({most}):\n\n{graph}",
                units.len()
            ));
        }
    }

    /// Fails if a call of `name` allocated more than `max` times (callees
    /// included): `#[budget(name(allocs = N))]`.
    #[track_caller]
    pub fn assert_allocations_per_call(&self, name: &str, max: u64) {
        self.assert_per_call(name, max, |a| a.allocs, ("times", ""));
    }

    /// Fails if a call of `name` allocated more than `max` bytes (callees
    /// included): `#[budget(name(alloc_bytes = N))]`.
    #[track_caller]
    pub fn assert_allocated_bytes_per_call(&self, name: &str, max: u64) {
        self.assert_per_call(name, max, |a| a.alloc_bytes, ("bytes", " bytes"));
    }

    /// Fails if a call of `name` has more than `max` of the figure `f`;
    /// `units`: of the figure, and of the budget.
    #[track_caller]
    fn assert_per_call(
        &self,
        name: &str,
        max: u64,
        f: impl Fn(&AllocCounts) -> u64,
        (unit, max_unit): (&str, &str),
    ) {
        self.alloc_gate(&format!("allocation budget of `{name}`"));
        let units = self.called(name);
        let (most, graph) = self.worst_by(name, f);
        if most > max {
            fail(format!(
                "`{name}` allocated {most} {unit} in its most allocating call, over its budget of {max}{max_unit} per call ({} calls)\n\n{graph}",
                units.len()
            ));
        }
    }
}
