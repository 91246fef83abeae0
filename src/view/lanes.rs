//! Async lanes: which future each poll belongs to, so the exports can draw
//! every future on a lane of its own with its polls, linked to the threads
//! that polled it.
//!
//! The recording does not tag a poll with its future: a poll is a call (flag
//! [`POLL`](crate::trace::flags::POLL)) on the polling thread, and the whole
//! future ([`FutureSpan`]) is recorded once, when it completes or is dropped.
//! The first poll starts after the future's start and the last poll ends
//! before its end (the probe reads the clock around the polls), and the polls
//! of one future never overlap. So polls are matched by site and time: a
//! future takes the earliest pending polls of its site that lie inside it, up
//! to its poll count. Futures of one function that run at the same time can
//! trade polls between them; futures that do not overlap are matched exactly.
//!
//! Memory: the polls of futures not yet completed (the `FutureSpan` comes at
//! the end). Polls whose future never shows up (lost, or still running at
//! stop) stay until [`PollMatcher::unmatched`].

use crate::trace::{Call, FutureSpan};
use std::collections::HashMap;

/// `FutureSpan::polls` saturates here: a future at the cap takes every poll inside it.
const POLLS_CAP: u32 = 1023;

/// A poll waiting for its future, with the id the export gave it (a flow id
/// that links the thread's slice to the lane's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingPoll {
    pub call: Call,
    pub id: u64,
}

/// Pending polls per site, matched to futures as they complete.
#[derive(Debug, Default)]
pub struct PollMatcher {
    pending: HashMap<u32, Vec<PendingPoll>>,
    next_id: u64,
    held: usize,
}

impl PollMatcher {
    pub fn new() -> Self {
        PollMatcher {
            next_id: 1,
            ..Default::default()
        }
    }

    /// Keeps a poll until its future comes; returns the poll's id (never 0).
    pub fn poll(&mut self, call: &Call) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.pending
            .entry(call.site)
            .or_default()
            .push(PendingPoll { call: *call, id });
        self.held += 1;
        id
    }

    /// The polls of `f`, in time order, removed from the pending ones.
    pub fn future(&mut self, f: &FutureSpan) -> Vec<PendingPoll> {
        let Some(list) = self.pending.get_mut(&f.site) else {
            return Vec::new();
        };
        let end = f.start_ns.saturating_add(f.dur_ns);
        let inside = |p: &PendingPoll| p.call.start_ns >= f.start_ns && p.call.end_ns() <= end;
        let mut idx: Vec<usize> = (0..list.len()).filter(|&i| inside(&list[i])).collect();
        idx.sort_by_key(|&i| (list[i].call.start_ns, list[i].id));
        if f.polls < POLLS_CAP {
            idx.truncate(f.polls as usize);
        }
        // Polls of one future never overlap: skip any that would.
        let mut taken: Vec<usize> = Vec::with_capacity(idx.len());
        let mut last_end = 0u64;
        for i in idx {
            if taken.is_empty() || list[i].call.start_ns >= last_end {
                last_end = list[i].call.end_ns();
                taken.push(i);
            }
        }
        let mut out: Vec<PendingPoll> = taken.iter().map(|&i| list[i]).collect();
        taken.sort_unstable_by(|a, b| b.cmp(a));
        for i in taken {
            list.swap_remove(i);
        }
        self.held -= out.len();
        out.sort_by_key(|p| p.call.start_ns);
        out
    }

    /// Polls held, waiting for their future.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Drains the polls no future claimed.
    pub fn unmatched(&mut self) -> Vec<PendingPoll> {
        self.held = 0;
        let mut v: Vec<PendingPoll> = self.pending.drain().flat_map(|(_, v)| v).collect();
        v.sort_by_key(|p| (p.call.start_ns, p.id));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::flags;

    fn poll(thread: u32, site: u32, start_ns: u64, dur_ns: u64) -> Call {
        Call {
            thread,
            site,
            depth: 0,
            start_ns,
            dur_ns,
            flags: flags::POLL,
        }
    }

    fn fut(site: u32, start_ns: u64, dur_ns: u64, polls: u32) -> FutureSpan {
        FutureSpan {
            thread: 0,
            site,
            start_ns,
            dur_ns,
            polls,
            cancelled: false,
        }
    }

    #[test]
    fn polls_go_to_the_future_around_them() {
        let mut m = PollMatcher::new();
        let a = m.poll(&poll(0, 1, 100, 10));
        let b = m.poll(&poll(1, 1, 500, 10)); // another thread polled it later
        let other_site = m.poll(&poll(0, 2, 120, 5));
        let later = m.poll(&poll(0, 1, 2_000, 10));
        let got: Vec<u64> = m
            .future(&fut(1, 100, 500, 2))
            .iter()
            .map(|p| p.id)
            .collect();
        assert_eq!(got, [a, b]);
        assert_eq!(m.held(), 2);
        let got: Vec<u64> = m
            .future(&fut(1, 1_990, 100, 1))
            .iter()
            .map(|p| p.id)
            .collect();
        assert_eq!(got, [later]);
        let left: Vec<u64> = m.unmatched().iter().map(|p| p.id).collect();
        assert_eq!(left, [other_site]);
        assert_eq!(m.held(), 0);
    }

    #[test]
    fn poll_count_bounds_what_a_future_takes() {
        let mut m = PollMatcher::new();
        for i in 0..3 {
            m.poll(&poll(0, 1, 100 + i * 20, 10));
        }
        assert_eq!(m.future(&fut(1, 100, 100, 2)).len(), 2);
        assert_eq!(m.held(), 1);
        // Saturated count: everything inside.
        for i in 0..5 {
            m.poll(&poll(0, 1, 1_000 + i * 20, 10));
        }
        assert_eq!(m.future(&fut(1, 1_000, 200, POLLS_CAP)).len(), 5);
    }
}
