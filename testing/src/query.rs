//! [`Capture`]: the recorded calls as a tree, queries by function name, and
//! assertions whose failure message shows the offending call's graph.

use super::captured::*;
use super::counters::CounterStatus;
use super::render;
use fgtrace_trace::Call;
use fgtrace_view::human::human_duration;
use std::time::Duration;

impl Capture {
    /// Spans (calls and polls) of the functions `name` matches.
    fn spans_of(&self, name: &str) -> Vec<usize> {
        let mask = self.site_mask(name);
        (0..self.spans.len())
            .filter(|&i| mask[self.spans[i].call.site as usize])
            .collect()
    }

    pub(super) fn units(&self, name: &str) -> Vec<Unit> {
        let mask = self.site_mask(name);
        // Polls count through their future (an `async fn`'s, or a `tracing`
        // span's entered once per poll), not one by one.
        let counted =
            |i: usize| mask[self.spans[i].call.site as usize] && !self.spans[i].call.is_poll();
        let mut out: Vec<Unit> = (0..self.spans.len())
            .filter(|&i| counted(i))
            .map(|i| {
                let s = &self.spans[i];
                Unit {
                    dur_ns: s.call.dur_ns,
                    self_ns: s.self_ns,
                    instr: s.instr,
                    self_instr: s.self_instr,
                    span: Some(i),
                    nested: self.ancestors(i).any(counted),
                    polls: None,
                }
            })
            .collect();
        for (k, f) in self
            .futures
            .iter()
            .enumerate()
            .filter(|(_, f)| mask[f.site as usize])
        {
            // Its polls: by its id, on whichever threads polled it; where
            // no id was recorded, its site's polls within it on its thread.
            let id = self.future_ids.get(&k).copied();
            let polls: Vec<usize> = (0..self.spans.len())
                .filter(|&i| {
                    let s = &self.spans[i];
                    let c = &s.call;
                    c.site == f.site
                        && c.start_ns >= f.start_ns
                        && c.end_ns() <= f.start_ns + f.dur_ns
                        && match (id, s.future) {
                            (Some(id), Some(p)) => p == id,
                            _ => c.thread == f.thread,
                        }
                })
                .collect();
            let sum = |g: fn(&Span) -> Option<u64>| {
                polls
                    .iter()
                    .map(|&i| g(&self.spans[i]))
                    .sum::<Option<u64>>()
            };
            out.push(Unit {
                dur_ns: f.dur_ns,
                self_ns: polls.iter().map(|&i| self.spans[i].self_ns).sum(),
                instr: sum(|s| s.instr),
                self_instr: sum(|s| s.self_instr),
                span: polls.first().copied(),
                nested: false,
                polls: polls.first().zip(polls.last()).map(|(&a, &b)| (a, b)),
            });
        }
        out
    }

    /// Every recorded call of the functions `name` matches (for an `async
    /// fn`: its polls), in trace order.
    pub fn calls_of(&self, name: &str) -> Vec<Call> {
        self.spans_of(name)
            .into_iter()
            .map(|i| self.spans[i].call)
            .collect()
    }

    /// Number of calls (for an `async fn`: futures completed or dropped
    /// within the capture).
    pub fn calls(&self, name: &str) -> usize {
        self.units(name).len()
    }

    /// Number of polls of an `async fn` (of a sync fn: its calls).
    pub fn polls(&self, name: &str) -> usize {
        self.spans_of(name).len()
    }

    /// Sum of the calls' inclusive durations; a call nested in another call
    /// of the same function (recursion) is already part of that one's.
    pub fn total(&self, name: &str) -> Duration {
        ns(self
            .units(name)
            .iter()
            .filter(|u| !u.nested)
            .map(|u| u.dur_ns)
            .sum())
    }

    /// Sum of the calls' self durations (inclusive minus traced callees).
    pub fn self_total(&self, name: &str) -> Duration {
        ns(self.units(name).iter().map(|u| u.self_ns).sum())
    }

    /// Longest call (zero if never called).
    pub fn max(&self, name: &str) -> Duration {
        ns(self.units(name).iter().map(|u| u.dur_ns).max().unwrap_or(0))
    }

    /// Shortest call (zero if never called).
    pub fn min(&self, name: &str) -> Duration {
        ns(self.units(name).iter().map(|u| u.dur_ns).min().unwrap_or(0))
    }

    /// The `p`-th percentile (0 to 100, nearest rank) of the calls'
    /// durations: `percentile(name, 50.0)` is the (lower) median, 100 the max.
    #[track_caller]
    pub fn percentile(&self, name: &str, p: f64) -> Duration {
        ns(self.rank(name, p).map_or(0, |(u, _)| u.dur_ns))
    }

    /// `percentile(name, 50.0)`.
    pub fn median(&self, name: &str) -> Duration {
        self.percentile(name, 50.0)
    }

    /// `total(a) / total(b)`: relative budgets survive a slower machine.
    pub fn ratio(&self, a: &str, b: &str) -> f64 {
        self.total(a).as_secs_f64() / self.total(b).as_secs_f64()
    }

    /// The calls of the given functions in the order they started, each as
    /// the name it was asked by: `["lock", "unlock", "lock", "unlock"]`.
    pub fn sequence<'n>(&self, names: &[&'n str]) -> Vec<&'n str> {
        let masks: Vec<Vec<bool>> = names.iter().map(|n| self.site_mask(n)).collect();
        let mut hits: Vec<(u64, usize, &'n str)> = Vec::new();
        for (i, s) in self.spans.iter().enumerate() {
            if let Some(k) = masks.iter().position(|m| m[s.call.site as usize]) {
                hits.push((s.call.start_ns, i, names[k]));
            }
        }
        hits.sort();
        hits.into_iter().map(|(_, _, n)| n).collect()
    }

    /// Whether every call of `f` ran inside a call of `g` (on the same thread).
    pub fn always_inside(&self, f: &str, g: &str) -> bool {
        self.outside(f, g).is_empty()
    }

    /// Whether no call of `f` ran inside a call of `g`.
    pub fn never_inside(&self, f: &str, g: &str) -> bool {
        self.inside(f, g).is_empty()
    }

    /// Calls of `f` with no `g` among their ancestors.
    fn outside(&self, f: &str, g: &str) -> Vec<usize> {
        let gm = self.site_mask(g);
        self.spans_of(f)
            .into_iter()
            .filter(|&i| {
                !self
                    .ancestors(i)
                    .any(|a| gm[self.spans[a].call.site as usize])
            })
            .collect()
    }

    /// Calls of `f` inside a `g`, with that `g` (the innermost).
    fn inside(&self, f: &str, g: &str) -> Vec<(usize, usize)> {
        let gm = self.site_mask(g);
        self.spans_of(f)
            .into_iter()
            .filter_map(|i| {
                self.ancestors(i)
                    .find(|&a| gm[self.spans[a].call.site as usize])
                    .map(|a| (i, a))
            })
            .collect()
    }

    /// Total retired instructions of the calls (recursion counted once, as
    /// for [`Capture::total`]); `None` without counters.
    pub fn instructions(&self, name: &str) -> Option<u64> {
        self.status.is_counting().then(|| {
            self.units(name)
                .iter()
                .filter(|u| !u.nested)
                .filter_map(|u| u.instr)
                .sum()
        })
    }

    /// Instructions of the most expensive call.
    pub fn instructions_max(&self, name: &str) -> Option<u64> {
        self.status.is_counting().then(|| {
            self.units(name)
                .iter()
                .filter_map(|u| u.instr)
                .max()
                .unwrap_or(0)
        })
    }

    /// Instructions of each call, in trace order.
    pub fn instructions_of(&self, name: &str) -> Option<Vec<u64>> {
        self.status
            .is_counting()
            .then(|| self.units(name).iter().filter_map(|u| u.instr).collect())
    }

    /// Sum of the calls' self instructions (traced callees excluded).
    pub fn self_instructions(&self, name: &str) -> Option<u64> {
        self.status
            .is_counting()
            .then(|| self.units(name).iter().filter_map(|u| u.self_instr).sum())
    }

    /// The function graph of everything captured, in ftrace format, with
    /// instructions per call where counted.
    pub fn graph(&self) -> String {
        render::whole(self, usize::MAX)
    }

    // ------------------------------------------------------------ assertions

    /// Fails unless `name` was called exactly `n` times.
    #[track_caller]
    pub fn assert_calls(&self, name: &str, n: usize) {
        let got = self.calls(name);
        if got != n {
            fail(format!(
                "`{name}` was called {got} times, expected {n}\n{}",
                render::callers(self, name)
            ));
        }
    }

    /// Fails if `name` was called more than `n` times.
    #[track_caller]
    pub fn assert_calls_at_most(&self, name: &str, n: usize) {
        let got = self.calls(name);
        if got > n {
            fail(format!(
                "`{name}` was called {got} times, at most {n} allowed\n{}",
                render::callers(self, name)
            ));
        }
    }

    /// Fails if any call of `name` took longer than `budget`.
    #[track_caller]
    pub fn assert_max(&self, name: &str, budget: Duration) {
        let units = self.called(name);
        let worst = *units.iter().max_by_key(|u| u.dur_ns).expect("called");
        if worst.dur_ns > budget.as_nanos() as u64 {
            let over = units
                .iter()
                .filter(|u| u.dur_ns > budget.as_nanos() as u64)
                .count();
            fail(format!(
                "`{name}` took {} in its slowest call, over its budget of {} ({over} of {} calls over)\n\n{}",
                human_duration(worst.dur_ns),
                human_duration(nanos(budget)),
                units.len(),
                render::unit(self, &worst)
            ));
        }
    }

    /// Fails if the calls of `name` took longer than `budget` together.
    #[track_caller]
    pub fn assert_total(&self, name: &str, budget: Duration) {
        let units = self.called(name);
        let total = self.total(name);
        if total > budget {
            let worst = *units.iter().max_by_key(|u| u.dur_ns).expect("called");
            fail(format!(
                "`{name}` took {} in {} calls, over its budget of {}; its longest call ({}):\n\n{}",
                human_duration(nanos(total)),
                units.len(),
                human_duration(nanos(budget)),
                human_duration(worst.dur_ns),
                render::unit(self, &worst)
            ));
        }
    }

    /// Fails if the self time of `name` (its own code, traced callees
    /// excluded) exceeded `budget` over all calls.
    #[track_caller]
    pub fn assert_self_total(&self, name: &str, budget: Duration) {
        let units = self.called(name);
        let total = self.self_total(name);
        if total > budget {
            let worst = *units.iter().max_by_key(|u| u.self_ns).expect("called");
            fail(format!(
                "`{name}` spent {} in its own code over {} calls, over its budget of {}; the call with most ({}):\n\n{}",
                human_duration(nanos(total)),
                units.len(),
                human_duration(nanos(budget)),
                human_duration(worst.self_ns),
                render::unit(self, &worst)
            ));
        }
    }

    /// Fails if the `p`-th percentile (nearest rank) of the durations of
    /// `name` exceeded `budget`.
    #[track_caller]
    pub fn assert_percentile(&self, name: &str, p: f64, budget: Duration) {
        self.called(name);
        let (u, n) = self.rank(name, p).expect("called");
        if u.dur_ns > budget.as_nanos() as u64 {
            fail(format!(
                "p{p} of `{name}` over {n} calls is {}, over its budget of {}; the call at that rank:\n\n{}",
                human_duration(u.dur_ns),
                human_duration(nanos(budget)),
                render::unit(self, &u)
            ));
        }
    }

    /// Fails if `total(a) > max * total(b)`.
    ///
    /// ```
    /// # #[fgtrace::traced] fn lookup() { std::hint::black_box(0); }
    /// # #[fgtrace::traced] fn request() { lookup(); }
    /// let cap = fgtrace::testing::capture(|| request());
    /// cap.assert_ratio("lookup", "request", 1.0); // a callee never exceeds its caller
    /// ```
    #[track_caller]
    pub fn assert_ratio(&self, a: &str, b: &str, max: f64) {
        let units = self.called(a);
        self.called(b);
        let (ta, tb) = (self.total(a), self.total(b));
        if ta.as_secs_f64() > max * tb.as_secs_f64() {
            let worst = *units.iter().max_by_key(|u| u.dur_ns).expect("called");
            fail(format!(
                "`{a}` took {} = {:.3} x `{b}`'s {}, over the allowed ratio {max}; the longest call of `{a}`:\n\n{}",
                human_duration(nanos(ta)),
                ta.as_secs_f64() / tb.as_secs_f64(),
                human_duration(nanos(tb)),
                render::unit(self, &worst)
            ));
        }
    }

    /// Fails unless every call of `f` ran inside a call of `g` (on the same
    /// thread): "`parse` is only ever called by `handle`".
    #[track_caller]
    pub fn assert_inside(&self, f: &str, g: &str) {
        self.called(f);
        let bad = self.outside(f, g);
        if let Some(&i) = bad.first() {
            let root = self.ancestors(i).last().unwrap_or(i);
            fail(format!(
                "`{f}` was called outside `{g}` ({} of {} calls); the first, at {}:\n\n{}",
                bad.len(),
                self.polls(f),
                render::path(self, i),
                render::tree(self, root, &[(i, "<== outside")])
            ));
        }
    }

    /// Fails if any call of `f` ran inside a call of `g`.
    #[track_caller]
    pub fn assert_not_inside(&self, f: &str, g: &str) {
        self.called(f);
        let bad = self.inside(f, g);
        if let Some(&(i, a)) = bad.first() {
            fail(format!(
                "`{f}` was called inside `{g}` ({} of {} calls); the first, at {}:\n\n{}",
                bad.len(),
                self.polls(f),
                render::path(self, i),
                render::tree(self, a, &[(i, "<== inside")])
            ));
        }
    }

    /// Fails unless every call of `a` ended before the first call of `b`
    /// started.
    #[track_caller]
    pub fn assert_before(&self, a: &str, b: &str) {
        self.called(a);
        self.called(b);
        let first_b = *self
            .spans_of(b)
            .iter()
            .min_by_key(|&&i| self.spans[i].call.start_ns)
            .expect("called");
        let late_a = *self
            .spans_of(a)
            .iter()
            .max_by_key(|&&i| self.spans[i].call.end_ns())
            .expect("called");
        if self.spans[late_a].call.end_ns() > self.spans[first_b].call.start_ns {
            fail(format!(
                "`{a}` was called after `{b}` had started: `{b}` at {}, `{a}` at {}\n\n{}",
                render::path(self, first_b),
                render::path(self, late_a),
                render::pair(self, first_b, late_a)
            ));
        }
    }

    /// Fails if a call of `name` retired more than `max` instructions (its
    /// callees included, the probes excluded). Returns
    /// [`CounterCheck::Skipped`] after a message on stderr where counters
    /// are unavailable; panics if the capture was made without counters.
    #[track_caller]
    pub fn assert_instructions(&self, name: &str, max: u64) -> CounterCheck {
        if let Err(skip) =
            self.counter_gate(&format!("instruction budget of `{name}` ({max} per call)"))
        {
            return skip;
        }
        let units: Vec<Unit> = self
            .called(name)
            .into_iter()
            .filter(|u| u.instr.is_some())
            .collect();
        let Some(worst) = units.iter().max_by_key(|u| u.instr).copied() else {
            return skipped(format!("no call of `{name}` was counted"));
        };
        let got = worst.instr.unwrap_or(0);
        if got > max {
            let over = units.iter().filter(|u| u.instr > Some(max)).count();
            fail(format!(
                "`{name}` retired {got} instructions in its most expensive call, over its budget of {max} ({over} of {} calls over)\n\n{}",
                units.len(),
                render::unit(self, &worst)
            ));
        }
        CounterCheck::Passed
    }

    /// Fails if the calls of `name` retired more than `max` instructions
    /// together; skips like [`Capture::assert_instructions`].
    #[track_caller]
    pub fn assert_instructions_total(&self, name: &str, max: u64) -> CounterCheck {
        if let Err(skip) =
            self.counter_gate(&format!("instruction budget of `{name}` ({max} in total)"))
        {
            return skip;
        }
        let units = self.called(name);
        let total = self.instructions(name).unwrap_or(0);
        if total > max {
            let worst = *units.iter().max_by_key(|u| u.instr).expect("called");
            fail(format!(
                "`{name}` retired {total} instructions in {} calls, over its budget of {max}; its most expensive call:\n\n{}",
                units.len(),
                render::unit(self, &worst)
            ));
        }
        CounterCheck::Passed
    }

    /// `Err(Skipped)` (after saying so on stderr) unless counted; panics if
    /// counters were never asked for: that is a mistake in the test.
    #[track_caller]
    pub(super) fn counter_gate(&self, what: &str) -> Result<(), CounterCheck> {
        match &self.status {
            CounterStatus::Instructions => Ok(()),
            CounterStatus::Unavailable(why) => Err(skipped(format!("{what}: {why}"))),
            CounterStatus::Off => fail(format!(
                "{what}: this capture was made without counters; use `capture_counted` or \
                 `Options::new().counters(Counters::Auto)`"
            )),
        }
    }

    /// The units of `name`; fails if there are none.
    #[track_caller]
    pub(super) fn called(&self, name: &str) -> Vec<Unit> {
        let u = self.units(name);
        if u.is_empty() {
            let seen = self.functions();
            let shown = seen
                .iter()
                .take(30)
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ");
            fail(format!(
                "`{name}` was never called in this capture, so its budget cannot be checked \
                 (is the name right, and the fn `#[traced]`?); called: {}",
                if shown.is_empty() {
                    "nothing".to_string()
                } else {
                    shown
                }
            ));
        }
        u
    }

    /// The unit at the `p`-th percentile (nearest rank) and the number of units.
    #[track_caller]
    pub(super) fn rank(&self, name: &str, p: f64) -> Option<(Unit, usize)> {
        assert!(
            (0.0..=100.0).contains(&p),
            "percentile {p} is not within 0..=100"
        );
        let mut units = self.units(name);
        if units.is_empty() {
            return None;
        }
        units.sort_by_key(|u| u.dur_ns);
        let n = units.len();
        let r = ((p / 100.0 * n as f64).ceil() as usize).clamp(1, n);
        Some((units[r - 1], n))
    }
}
