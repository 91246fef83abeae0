//! Off-CPU time in captures (`Options::new().off_cpu(true)`): queries and
//! assertions on the time each call spent switched out, blocked or
//! preempted (see `fgtrace_runtime::offcpu` for how it is recorded, `switches` for
//! how a capture does).
//!
//! Where the kernel refuses `perf_event_open`, the queries return `None` and
//! the assertions print `fgtrace: SKIPPED ...` with the reason on stderr and
//! return [`CounterCheck::Skipped`], as instruction budgets do;
//! `FGTRACE_OFFCPU=required` makes the capture panic instead.

use super::captured::{fail, nanos, ns, Capture, CounterCheck, Unit};
use super::render;
use fgtrace_trace::OffTime;
use fgtrace_view::human::human_duration;
use std::io::Write;
use std::time::Duration;

/// Says on stderr that an off-CPU assertion was skipped (past the test
/// harness's output capture: a skipped budget must be visible).
fn skipped(why: String) -> CounterCheck {
    let _ = writeln!(
        std::io::stderr(),
        "fgtrace: SKIPPED {why} (set FGTRACE_OFFCPU=required to fail instead)"
    );
    CounterCheck::Skipped(why)
}

impl Capture {
    /// Why off-CPU time is unavailable in this capture, if it is (`None`
    /// also when it was not asked for).
    pub fn off_cpu_unavailable(&self) -> Option<&str> {
        let o = self.trace.meta().off_cpu.as_ref()?;
        (!o.is_available()).then(|| o.reason())
    }

    /// Off-CPU time of a unit: a call, or the polls of a future.
    fn unit_off(&self, u: &Unit) -> Option<OffTime> {
        match u.polls {
            Some((a, b)) => {
                let first = &self.spans[a].call;
                let mut t = OffTime::default();
                for s in &self.spans[a..=b] {
                    if s.call.site == first.site && s.call.depth == first.depth {
                        t.add(s.off?);
                    }
                }
                Some(t)
            }
            None => self.spans[u.span?].off,
        }
    }

    /// Summed over the calls of `name` (recursion counted once); `None`
    /// where off-CPU time was not recorded.
    fn off_sum(&self, name: &str) -> Option<OffTime> {
        let o = self.trace.meta().off_cpu.as_ref()?;
        if !o.is_available() {
            return None;
        }
        let mut t = OffTime::default();
        for u in self.units(name).iter().filter(|u| !u.nested) {
            t.add(self.unit_off(u)?);
        }
        Some(t)
    }

    /// Time the calls of `name` spent off the CPU (switched out: blocked or
    /// preempted), summed over calls, recursion counted once. `None` where
    /// off-CPU time is unavailable (not asked for, or refused by the kernel).
    pub fn off_cpu(&self, name: &str) -> Option<Duration> {
        self.off_sum(name).map(|t| ns(t.total_ns()))
    }

    /// The part of [`Capture::off_cpu`] the calls were blocked (switched
    /// out voluntarily: sleep, lock, I/O).
    pub fn blocked(&self, name: &str) -> Option<Duration> {
        self.off_sum(name).map(|t| ns(t.blocked_ns))
    }

    /// The part of [`Capture::off_cpu`] the calls were preempted (switched
    /// out while runnable).
    pub fn preempted(&self, name: &str) -> Option<Duration> {
        self.off_sum(name).map(|t| ns(t.preempted_ns))
    }

    /// [`Capture::total`] minus [`Capture::off_cpu`]: the time the calls
    /// ran on a CPU.
    pub fn on_cpu(&self, name: &str) -> Option<Duration> {
        let off = self.off_sum(name)?;
        Some(self.total(name).saturating_sub(ns(off.total_ns())))
    }

    /// The most off-CPU time of any one call of `name`.
    pub fn off_cpu_max(&self, name: &str) -> Option<Duration> {
        let units = self.units(name);
        let mut m = 0;
        for u in &units {
            m = m.max(self.unit_off(u)?.total_ns());
        }
        self.off_sum(name).map(|_| ns(m))
    }

    /// `Err(Skipped)` (after saying so) unless off-CPU time was recorded;
    /// panics if it was never asked for: a mistake in the test.
    #[track_caller]
    fn off_gate(&self, what: &str) -> Result<(), CounterCheck> {
        match &self.trace.meta().off_cpu {
            Some(o) if o.is_available() => Ok(()),
            Some(o) => Err(skipped(format!(
                "{what}: off-CPU unavailable: {}",
                o.reason()
            ))),
            None => fail(format!(
                "{what}: this capture was made without off-CPU time; use \
                 `Options::new().off_cpu(true)`"
            )),
        }
    }

    /// Fails if any call of `name` ever switched out voluntarily (slept,
    /// waited for a lock or for I/O): for code that must not block, such
    /// as an async handler on its executor's thread. Being preempted is not
    /// blocking. Skips (with a message) where off-CPU time is unavailable.
    #[track_caller]
    pub fn assert_no_blocking(&self, name: &str) -> CounterCheck {
        self.assert_blocked_at_most(name, Duration::ZERO)
    }

    /// Fails if any call of `name` was blocked for longer than `budget`.
    #[track_caller]
    pub fn assert_blocked_at_most(&self, name: &str, budget: Duration) -> CounterCheck {
        let what = if budget.is_zero() {
            format!("no-blocking check of `{name}`")
        } else {
            format!(
                "blocked-time budget of `{name}` ({})",
                human_duration(nanos(budget))
            )
        };
        if let Err(skip) = self.off_gate(&what) {
            return skip;
        }
        let units = self.called(name);
        let blocked = |u: &Unit| self.unit_off(u).map_or(0, |t| t.blocked_ns);
        let worst = *units.iter().max_by_key(|u| blocked(u)).expect("called");
        let b = blocked(&worst);
        if b > nanos(budget) {
            let over = units.iter().filter(|u| blocked(u) > nanos(budget)).count();
            let times = self.blocked_switches(&worst);
            fail(format!(
                "`{name}` blocked (switched out voluntarily {times} times) for {} in its worst call, \
                 over its budget of {} ({over} of {} calls blocked)\n\n{}",
                human_duration(b),
                human_duration(nanos(budget)),
                units.len(),
                self.with_off(&worst)
            ));
        }
        CounterCheck::Passed
    }

    /// Fails if any call of `name` spent more than `budget` off the CPU
    /// (blocked and preempted). Skips where off-CPU time is unavailable.
    #[track_caller]
    pub fn assert_off_cpu(&self, name: &str, budget: Duration) -> CounterCheck {
        let what = format!(
            "off-CPU budget of `{name}` ({} per call)",
            human_duration(nanos(budget))
        );
        if let Err(skip) = self.off_gate(&what) {
            return skip;
        }
        let units = self.called(name);
        let off = |u: &Unit| self.unit_off(u).map_or(0, |t| t.total_ns());
        let worst = *units.iter().max_by_key(|u| off(u)).expect("called");
        if off(&worst) > nanos(budget) {
            let over = units.iter().filter(|u| off(u) > nanos(budget)).count();
            fail(format!(
                "`{name}` was off the CPU for {} in its worst call, over its budget of {} ({over} of {} calls over)\n\n{}",
                human_duration(off(&worst)),
                human_duration(nanos(budget)),
                units.len(),
                self.with_off(&worst)
            ));
        }
        CounterCheck::Passed
    }

    /// Voluntary switches within a unit.
    fn blocked_switches(&self, u: &Unit) -> usize {
        let (Some(o), Some(i)) = (self.trace.meta().off_cpu.as_ref(), u.span) else {
            return 0;
        };
        let c = &self.spans[i].call;
        o.thread(c.thread).map_or(0, |t| {
            t.overlapping(c.start_ns, c.end_ns())
                .iter()
                .filter(|iv| iv.kind == fgtrace_trace::OffKind::Blocked)
                .count()
        })
    }

    /// A unit's graph, then its off-CPU split, on-CPU time, and where in
    /// the call it was switched out.
    fn with_off(&self, u: &Unit) -> String {
        let mut s = render::unit(self, u);
        let t = self.unit_off(u).unwrap_or_default();
        s.push_str(&format!(
            "off-CPU in this call: {} ({} blocked, {} preempted); on-CPU {}\n",
            human_duration(t.total_ns()),
            human_duration(t.blocked_ns),
            human_duration(t.preempted_ns),
            human_duration(u.dur_ns.saturating_sub(t.total_ns())),
        ));
        if let (Some(o), Some(i)) = (self.trace.meta().off_cpu.as_ref(), u.span) {
            let c = &self.spans[i].call;
            if let Some(th) = o.thread(c.thread) {
                let all = th.overlapping(c.start_ns, c.end_ns());
                // Blocked stretches first: they are what a budget is about.
                let blocked = all
                    .iter()
                    .filter(|i| i.kind == fgtrace_trace::OffKind::Blocked);
                let preempted = all
                    .iter()
                    .filter(|i| i.kind == fgtrace_trace::OffKind::Preempted);
                let mut shown = 0;
                for iv in blocked.chain(preempted).take(8) {
                    shown += 1;
                    s.push_str(&format!(
                        "  {} for {} at +{} into the call\n",
                        iv.kind.name(),
                        human_duration(iv.dur_ns),
                        human_duration(iv.start_ns.saturating_sub(c.start_ns)),
                    ));
                }
                if all.len() > shown {
                    s.push_str(&format!("  ... and {} more\n", all.len() - shown));
                }
            }
        }
        s
    }
}
