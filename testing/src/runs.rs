//! Repeated captures, for clocks that are noisy from run to run: each
//! metric is computed per run, then the median (or minimum, or maximum) run
//! is what the assertion sees, and a failure shows that run's graph.

use super::captured::{fail, nanos, Capture, CounterCheck, Unit};
use super::render;
use fgtrace_view::human::human_duration;
use std::time::Duration;

/// Which run a [`Summary`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stat {
    /// The smallest value: the run least disturbed by the machine.
    Min,
    /// The lower median: an actual run's value, robust to outliers.
    Median,
    /// The largest value.
    Max,
}

impl Stat {
    fn label(self) -> &'static str {
        match self {
            Stat::Min => "minimum",
            Stat::Median => "median",
            Stat::Max => "maximum",
        }
    }
}

/// The captures of [`repeat`](super::repeat) /
/// [`Options::repeat`](super::Options::repeat), warm-up excluded.
#[derive(Debug)]
pub struct Runs {
    runs: Vec<Capture>,
}

impl Runs {
    pub(super) fn new(runs: Vec<Capture>) -> Runs {
        Runs { runs }
    }

    /// Number of runs kept (the warm-up runs excluded).
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// No run was kept.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Each run's capture, in the order they ran.
    pub fn runs(&self) -> &[Capture] {
        &self.runs
    }

    /// Queries and assertions on the median run of each metric.
    pub fn median(&self) -> Summary<'_> {
        self.stat(Stat::Median)
    }

    /// Queries and assertions on the fastest (smallest) run of each metric.
    pub fn min(&self) -> Summary<'_> {
        self.stat(Stat::Min)
    }

    /// Queries and assertions on the run at `stat` of each metric.
    pub fn stat(&self, stat: Stat) -> Summary<'_> {
        Summary {
            runs: &self.runs,
            stat,
        }
    }
}

/// One statistic over the runs: every query is computed per run, and the
/// run at the [`Stat`] is returned. Assertions fail with that run's graph.
#[derive(Clone, Copy, Debug)]
pub struct Summary<'a> {
    runs: &'a [Capture],
    stat: Stat,
}

impl<'a> Summary<'a> {
    /// The run at the statistic for per-run `values`, and its value.
    fn pick<T: PartialOrd + Copy>(&self, values: &[T]) -> (usize, T) {
        let mut idx: Vec<usize> = (0..values.len()).collect();
        idx.sort_by(|&a, &b| {
            values[a]
                .partial_cmp(&values[b])
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let k = match self.stat {
            Stat::Min => 0,
            Stat::Median => (idx.len() - 1) / 2,
            Stat::Max => idx.len() - 1,
        };
        (idx[k], values[idx[k]])
    }

    fn each<T: PartialOrd + Copy>(&self, f: impl Fn(&Capture) -> T) -> (usize, T, Vec<T>) {
        let v: Vec<T> = self.runs.iter().map(f).collect();
        let (i, x) = self.pick(&v);
        (i, x, v)
    }

    /// The run a statistic picked, e.g. to look at its graph.
    pub fn run(&self, f: impl Fn(&Capture) -> u64) -> &'a Capture {
        &self.runs[self.each(f).0]
    }

    /// The statistic of each run's number of calls of `name`.
    pub fn calls(&self, name: &str) -> usize {
        self.each(|c| c.calls(name)).1
    }

    /// The statistic of each run's total inclusive time of `name`.
    pub fn total(&self, name: &str) -> Duration {
        self.each(|c| c.total(name)).1
    }

    /// The statistic of each run's total self time of `name` (its traced callees'
    /// time excluded).
    pub fn self_total(&self, name: &str) -> Duration {
        self.each(|c| c.self_total(name)).1
    }

    /// The statistic of each run's slowest call.
    pub fn max(&self, name: &str) -> Duration {
        self.each(|c| c.max(name)).1
    }

    /// The statistic of each run's `p`-th percentile (0 to 100, nearest rank) of
    /// the durations of `name`'s calls.
    pub fn percentile(&self, name: &str, p: f64) -> Duration {
        self.each(|c| c.percentile(name, p)).1
    }

    /// The statistic of each run's `total(a) / total(b)`.
    pub fn ratio(&self, a: &str, b: &str) -> f64 {
        self.each(|c| c.ratio(a, b)).1
    }

    /// The statistic of each run's total instructions of `name`.
    pub fn instructions(&self, name: &str) -> Option<u64> {
        self.each(|c| c.instructions(name)).1
    }

    /// The statistic of each run's most expensive call of `name`, in retired
    /// instructions; `None` without counts.
    pub fn instructions_max(&self, name: &str) -> Option<u64> {
        self.each(|c| c.instructions_max(name)).1
    }

    #[track_caller]
    fn called(&self, name: &str) {
        for r in self.runs {
            r.called(name);
        }
    }

    /// Fails when the statistic exceeds the budget, with the picked run's
    /// offending call.
    #[track_caller]
    fn check(
        &self,
        what: &str,
        budget: u64,
        show: impl Fn(u64) -> String,
        value: impl Fn(&Capture) -> u64,
        offender: impl Fn(&Capture) -> Option<Unit>,
    ) {
        let (i, v, all) = self.each(&value);
        if v > budget {
            let (lo, hi) = (
                all.iter().min().copied().unwrap_or(0),
                all.iter().max().copied().unwrap_or(0),
            );
            let detail =
                offender(&self.runs[i]).map_or(String::new(), |u| render::unit(&self.runs[i], &u));
            fail(format!(
                "the {} over {} runs of {what} is {}, over its budget of {} (runs ranged {} to {}); run {} shown:\n\n{detail}",
                self.stat.label(),
                self.runs.len(),
                show(v),
                show(budget),
                show(lo),
                show(hi),
                i + 1,
            ));
        }
    }

    /// Fails if the statistic of each run's slowest call of `name` exceeds `budget`.
    #[track_caller]
    pub fn assert_max(&self, name: &str, budget: Duration) {
        self.called(name);
        self.check(
            &format!("the slowest call of `{name}`"),
            nanos(budget),
            |v| human_duration(v).to_string(),
            |c| nanos(c.max(name)),
            |c| c.units(name).into_iter().max_by_key(|u| u.dur_ns),
        );
    }

    /// Fails if the statistic of each run's total time of `name` exceeds `budget`.
    #[track_caller]
    pub fn assert_total(&self, name: &str, budget: Duration) {
        self.called(name);
        self.check(
            &format!("the total time of `{name}`"),
            nanos(budget),
            |v| human_duration(v).to_string(),
            |c| nanos(c.total(name)),
            |c| c.units(name).into_iter().max_by_key(|u| u.dur_ns),
        );
    }

    /// Fails if the statistic of each run's self time of `name` exceeds `budget`.
    #[track_caller]
    pub fn assert_self_total(&self, name: &str, budget: Duration) {
        self.called(name);
        self.check(
            &format!("the self time of `{name}`"),
            nanos(budget),
            |v| human_duration(v).to_string(),
            |c| nanos(c.self_total(name)),
            |c| c.units(name).into_iter().max_by_key(|u| u.self_ns),
        );
    }

    /// Fails if the statistic of each run's `p`-th percentile exceeds `budget`.
    #[track_caller]
    pub fn assert_percentile(&self, name: &str, p: f64, budget: Duration) {
        self.called(name);
        self.check(
            &format!("p{p} of `{name}`"),
            nanos(budget),
            |v| human_duration(v).to_string(),
            |c| nanos(c.percentile(name, p)),
            |c| c.rank(name, p).map(|r| r.0),
        );
    }

    /// Fails if the statistic of each run's `total(a) / total(b)` exceeds `max`.
    #[track_caller]
    pub fn assert_ratio(&self, a: &str, b: &str, max: f64) {
        self.called(a);
        self.called(b);
        let (i, v, _) = self.each(|c| c.ratio(a, b));
        if v > max {
            let r = &self.runs[i];
            let detail = r
                .units(a)
                .into_iter()
                .max_by_key(|u| u.dur_ns)
                .map_or(String::new(), |u| render::unit(r, &u));
            fail(format!(
                "the {} over {} runs of `{a}` / `{b}` is {v:.3}, over the allowed ratio {max}; run {} (`{a}` {}, `{b}` {}), the longest call of `{a}`:\n\n{detail}",
                self.stat.label(),
                self.runs.len(),
                i + 1,
                human_duration(nanos(r.total(a))),
                human_duration(nanos(r.total(b))),
            ));
        }
    }

    /// Fails if the statistic of each run's most expensive call of `name`
    /// exceeds `max` instructions; skips like
    /// [`Capture::assert_instructions`].
    #[track_caller]
    pub fn assert_instructions(&self, name: &str, max: u64) -> CounterCheck {
        if let Err(skip) =
            self.runs[0].counter_gate(&format!("instruction budget of `{name}` ({max} per call)"))
        {
            return skip;
        }
        self.called(name);
        self.check(
            &format!("the instructions of the most expensive call of `{name}`"),
            max,
            |v| format!("{v} instructions"),
            |c| c.instructions_max(name).unwrap_or(0),
            |c| c.units(name).into_iter().max_by_key(|u| u.instr),
        );
        CounterCheck::Passed
    }

    /// Like [`Summary::assert_instructions`], on each run's total.
    #[track_caller]
    pub fn assert_instructions_total(&self, name: &str, max: u64) -> CounterCheck {
        if let Err(skip) =
            self.runs[0].counter_gate(&format!("instruction budget of `{name}` ({max} in total)"))
        {
            return skip;
        }
        self.called(name);
        self.check(
            &format!("the total instructions of `{name}`"),
            max,
            |v| format!("{v} instructions"),
            |c| c.instructions(name).unwrap_or(0),
            |c| c.units(name).into_iter().max_by_key(|u| u.instr),
        );
        CounterCheck::Passed
    }
}
