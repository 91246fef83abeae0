//! What `#[fgtrace::testing::budget(..)]` expands to: a static [`Spec`] and
//! one call that captures the test body and checks every limit. Not a public
//! API: may change in any release.

use super::{Capture, Counters, Options, Runs, Stat};
use std::future::Future;
use std::time::Duration;

/// One limit on the calls of one function.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    Calls(usize),
    MaxCalls(usize),
    Max(Duration),
    Total(Duration),
    SelfTotal(Duration),
    Percentile(f64, Duration),
    Instructions(u64),
    InstructionsTotal(u64),
    /// Allocations per call, callees included (at most).
    Allocs(u64),
    /// Allocations of all calls together (at most).
    AllocsTotal(u64),
    /// Bytes allocated per call, callees included (at most).
    AllocBytes(u64),
    Inside(&'static str),
    NotInside(&'static str),
    /// Off-CPU time (blocked and preempted) of any one call.
    OffCpu(Duration),
    /// Blocked time of any one call (`"0ns"`: never blocks).
    Blocked(Duration),
    /// The measure grows at most as `value^exponent` (see
    /// [`Capture::assert_growth_of`]), with the default tolerance.
    /// The measure: 0 duration, 1 allocations, 2 instructions.
    Growth(&'static str, f64, u8),
}

/// A test's budget: how to capture, and the limits per function name.
#[derive(Debug)]
pub struct Spec {
    pub counters: Counters,
    /// Record off-CPU time (an `off_cpu` or `blocked` limit asks for it).
    pub off_cpu: bool,
    pub runs: usize,
    pub warmup: usize,
    pub stat: Stat,
    pub limits: &'static [(&'static str, Limit)],
}

impl Spec {
    fn options(&self) -> Options {
        Options::new()
            .counters(self.counters)
            .off_cpu(self.off_cpu)
            .warmup(self.warmup)
            .runs(self.runs)
    }

    /// Captures the body once and checks it.
    #[track_caller]
    pub fn once<R>(&self, f: impl FnOnce() -> R) -> R {
        let (r, cap) = self.options().capture_with(f);
        self.check(&cap);
        r
    }

    /// Warm-up runs, then `runs` captured runs; time and instruction limits
    /// apply to the statistic over the runs, the others to every run.
    #[track_caller]
    pub fn repeat<R>(&self, mut f: impl FnMut() -> R) -> R {
        let opts = self.options();
        for _ in 0..self.warmup {
            let _ = opts.capture(&mut f);
        }
        let mut last = None;
        let mut caps = Vec::with_capacity(self.runs);
        for _ in 0..self.runs.max(1) {
            let (r, c) = opts.capture_with(&mut f);
            last = Some(r);
            caps.push(c);
        }
        let runs = Runs::new(caps);
        let summary = runs.stat(self.stat);
        for &(name, limit) in self.limits {
            match limit {
                Limit::Max(d) => summary.assert_max(name, d),
                Limit::Total(d) => summary.assert_total(name, d),
                Limit::SelfTotal(d) => summary.assert_self_total(name, d),
                Limit::Percentile(p, d) => summary.assert_percentile(name, p, d),
                Limit::Instructions(n) => {
                    let _ = summary.assert_instructions(name, n);
                }
                Limit::InstructionsTotal(n) => {
                    let _ = summary.assert_instructions_total(name, n);
                }
                other => runs.runs().iter().for_each(|c| check_one(c, name, other)),
            }
        }
        last.expect("at least one run")
    }

    /// Captures an async body (its polls) and checks it.
    pub async fn future<F: Future>(&self, fut: F) -> F::Output {
        let (r, cap) = self.options().capture_async(fut).await;
        self.check(&cap);
        r
    }

    #[track_caller]
    fn check(&self, cap: &Capture) {
        for &(name, limit) in self.limits {
            check_one(cap, name, limit);
        }
    }
}

#[track_caller]
fn check_one(cap: &Capture, name: &str, limit: Limit) {
    match limit {
        Limit::Calls(n) => cap.assert_calls(name, n),
        Limit::MaxCalls(n) => cap.assert_calls_at_most(name, n),
        Limit::Max(d) => cap.assert_max(name, d),
        Limit::Total(d) => cap.assert_total(name, d),
        Limit::SelfTotal(d) => cap.assert_self_total(name, d),
        Limit::Percentile(p, d) => cap.assert_percentile(name, p, d),
        Limit::Instructions(n) => {
            let _ = cap.assert_instructions(name, n);
        }
        Limit::InstructionsTotal(n) => {
            let _ = cap.assert_instructions_total(name, n);
        }
        Limit::Allocs(n) => cap.assert_allocations_per_call(name, n),
        Limit::AllocsTotal(n) => cap.assert_allocations_at_most(name, n),
        Limit::AllocBytes(n) => cap.assert_allocated_bytes_per_call(name, n),
        Limit::Inside(g) => cap.assert_inside(name, g),
        Limit::NotInside(g) => cap.assert_not_inside(name, g),
        Limit::OffCpu(d) => {
            let _ = cap.assert_off_cpu(name, d);
        }
        Limit::Blocked(d) => {
            let _ = cap.assert_blocked_at_most(name, d);
        }
        Limit::Growth(value, k, measure) => {
            let measure = match measure {
                0 => super::Measure::Duration,
                1 => super::Measure::Allocations,
                _ => super::Measure::Instructions,
            };
            let growth = super::Growth::Power(k);
            let tol = super::GROWTH_TOLERANCE;
            match cap.assert_growth_of(name, value, growth, measure, tol) {
                Ok(_) => {}
                // No PMU: skipped and said, as instruction budgets are.
                Err(why) if measure == super::Measure::Instructions => {
                    let _ = super::captured::skipped(why);
                }
                Err(why) => panic!("fgtrace: {why}"),
            }
        }
    }
}
