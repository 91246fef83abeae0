//! What futures measured of themselves (`Event::FutureTimes`): per async
//! fn, the spread of their busy time (in polls) and scheduled time (woken,
//! waiting for a poll), their wakes, and exact poll counts.

use super::durations::Durations;
use serde::Serialize;

/// The spread of one figure over an async fn's futures, nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Spread {
    /// Futures that measured it.
    pub futures: u64,
    /// Summed over them.
    pub total_ns: u64,
    /// Median, from a log-bucketed histogram (within 1%).
    pub p50_ns: u64,
    /// 99th percentile, from the same histogram (within 1%).
    pub p99_ns: u64,
    /// The largest.
    pub max_ns: u64,
}

impl Spread {
    fn of(d: &Durations) -> Option<Spread> {
        (d.n > 0).then(|| Spread {
            futures: d.n,
            total_ns: d.total,
            p50_ns: d.quantile(0.50),
            p99_ns: d.quantile(0.99),
            max_ns: d.max,
        })
    }
}

/// One async fn's futures' own figures, as the report accumulates them.
#[derive(Default)]
pub(super) struct TimesAcc {
    busy: Durations,
    scheduled: Durations,
    wakes: u64,
    /// Polls the futures with times counted past what their records say
    /// (a record's count saturates).
    extra_polls: u64,
}

impl TimesAcc {
    pub(super) fn merge(&mut self, o: &TimesAcc) {
        self.busy.merge(&o.busy);
        self.scheduled.merge(&o.scheduled);
        self.wakes = self.wakes.saturating_add(o.wakes);
        self.extra_polls = self.extra_polls.saturating_add(o.extra_polls);
    }

    /// A future's times; `record_polls` is the count its record said.
    pub(super) fn add(&mut self, t: &fgtrace_trace::FutureTimes, record_polls: u32) {
        self.busy.add(t.busy_ns);
        if let Some(w) = t.waits {
            self.scheduled.add(w.scheduled_ns);
            self.wakes = self.wakes.saturating_add(w.wakes);
        }
        self.extra_polls = self
            .extra_polls
            .saturating_add(t.polls.saturating_sub(record_polls as u64));
    }

    /// Polls to add to the records' count.
    pub(super) fn extra_polls(&self) -> u64 {
        self.extra_polls
    }

    /// (busy, scheduled, wakes) as the report shows them.
    pub(super) fn finish(&self) -> (Option<Spread>, Option<Spread>, Option<u64>) {
        let scheduled = Spread::of(&self.scheduled);
        let wakes = scheduled.as_ref().map(|_| self.wakes);
        (Spread::of(&self.busy), scheduled, wakes)
    }
}
