//! Automatic exclusion of tiny functions (`Config::auto_exclude`), the
//! collector's side: it sees every thread's calls as they arrive in
//! batches, sums the durations of each function's calls per thread in
//! windows of [`AUTO_EXCLUDE_CALLS`], and switches a function whose mean
//! over a window is at most the limit to count-only on that thread (one
//! atomic `fetch_or` on the thread's table, see `buffer::CountTable`). At
//! stop the tables say how many calls each switched function made since.
//!
//! The first window decides for a function that is tiny from its first
//! call on; later windows are looked at too, so that a few slow first calls
//! (cold caches, page faults, a preemption in the middle of a getter) do
//! not keep a tiny function recorded for good.

use crate::active::Active;
use crate::buffer::{kind, RawCall, ThreadBuf};
use crate::config::AUTO_EXCLUDE_CALLS;
use fgtrace_core::site::{site_by_id, Decision};
use fgtrace_trace::build;
use fgtrace_trace::clock::Calibration;
use fgtrace_trace::recorded::SiteMap;
use fgtrace_trace::CountOnly;
use std::sync::Arc;
use std::time::Duration;

/// One function's calls on one thread.
#[derive(Clone, Copy, Default)]
struct Acc {
    /// Calls seen, and those of the current window with their summed ticks.
    seen: u64,
    window: u64,
    ticks: u64,
    /// Switched (or found never to be switchable): its later calls are not
    /// looked at.
    done: bool,
}

/// A function switched to count-only on one thread.
struct Switch {
    thread: u32,
    /// The core's site id.
    site: u32,
    /// When, in ticks.
    at: u64,
    /// The calls seen before the switch.
    seen: u64,
    /// The summed ticks of the window that decided (its last
    /// [`AUTO_EXCLUDE_CALLS`] calls).
    ticks: u64,
}

/// The collector's auto-exclude state.
pub(super) struct AutoExclude {
    /// The largest sum of [`AUTO_EXCLUDE_CALLS`] durations, in ticks, that
    /// switches a function (its mean is then at most the limit).
    max_ticks: u64,
    /// The session: its generation (the sites' decisions) and its threads'
    /// buffers, which own the tables.
    active: Arc<Active>,
    /// Per thread index, per site id.
    threads: Vec<Vec<Acc>>,
    switches: Vec<Switch>,
}

impl AutoExclude {
    pub(super) fn new(limit: Duration, cal: &Calibration, active: Arc<Active>) -> AutoExclude {
        let total = limit.as_nanos() as f64 * cal.ticks_per_ns * AUTO_EXCLUDE_CALLS as f64;
        AutoExclude {
            max_ticks: total.min(u64::MAX as f64) as u64,
            active,
            threads: Vec::new(),
            switches: Vec::new(),
        }
    }

    /// Looks at a batch of thread `thread`'s records (completed calls, in
    /// the order they ended).
    pub(super) fn observe(&mut self, thread: u32, recs: &[RawCall]) {
        let i = thread as usize;
        if self.threads.len() <= i {
            self.threads.resize_with(i + 1, Vec::new);
        }
        let accs = &mut self.threads[i];
        let mut due = Vec::new();
        for r in recs {
            // Plain calls only (extension records and losses have another
            // kind; polls belong to async fns, which are always recorded).
            if r.kind() != kind::CALL {
                continue;
            }
            let site = r.site() as usize;
            if accs.len() <= site {
                accs.resize(site + 1, Acc::default());
            }
            let a = &mut accs[site];
            if a.done {
                continue;
            }
            a.seen += 1;
            a.window += 1;
            a.ticks = a.ticks.saturating_add(r.dur());
            if a.window >= AUTO_EXCLUDE_CALLS {
                if a.ticks <= self.max_ticks {
                    a.done = true;
                    due.push((site as u32, a.seen, a.ticks));
                }
                a.window = 0;
                a.ticks = 0;
            }
        }
        for (site, seen, ticks) in due {
            self.switch(thread, site, seen, ticks);
        }
    }

    /// Switches `site` to count-only on thread `thread`, if it is a plain
    /// recorded function and the session still runs.
    fn switch(&mut self, thread: u32, site: u32, seen: u64, ticks: u64) {
        let plain = site_by_id(site)
            .is_some_and(|s| !s.is_async && s.decision(self.active.gen) == Some(Decision::Record));
        if !plain {
            return;
        }
        // The buffer (and its table) is held while the bit is set; a
        // stopping session has no list, and switches nothing.
        let buf = self
            .active
            .threads
            .lock()
            .as_ref()
            .and_then(|t| t.get(thread as usize).cloned());
        let Some(table) = buf.as_ref().and_then(|b| b.count_only.as_ref()) else {
            return;
        };
        if table.switch(site) {
            self.switches.push(Switch {
                thread,
                site,
                at: fgtrace_core::clock::ticks(),
                seen,
                ticks,
            });
        }
    }

    /// The switches with the calls counted since (read from the threads'
    /// tables now), on the trace's sites. `bufs`: the session's buffers, by
    /// thread index.
    pub(super) fn count_only(
        &self,
        cal: &Calibration,
        bufs: &[Arc<ThreadBuf>],
        sites: &mut SiteMap,
    ) -> Vec<CountOnly> {
        self.switches
            .iter()
            .filter_map(|s| {
                let buf = bufs.iter().find(|b| b.index == s.thread)?;
                let after = buf.count_only.as_ref()?.counted(s.site)?;
                Some(CountOnly {
                    thread: s.thread,
                    site: sites.map(s.site, &build::registered_site),
                    calls_after: after,
                    switched_at_ns: cal.ns(s.at),
                    calls_before: s.seen,
                    mean_ns_before: cal.dur_ns(s.ticks) / AUTO_EXCLUDE_CALLS,
                })
            })
            .collect()
    }
}
