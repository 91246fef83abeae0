//! Async lanes: which future each poll belongs to, so the exports can draw
//! every future on a lane of its own with its polls, linked to the threads
//! that polled it.
//!
//! A trace recorded since futures name themselves follows every poll and
//! every whole future with its future's id ([`FutureId`]): a poll belongs
//! to the future of its site and id whose first poll to end holds it,
//! exactly (see [`PollMatcher::name`] and [`PollMatcher::future_of`]).
//!
//! Older traces do not tag a poll with its future: a poll is a call (flag
//! [`POLL`](fgtrace_trace::flags::POLL)) on the polling thread, and the whole
//! future ([`FutureSpan`]) is recorded once, when it completes or is dropped.
//! The first poll starts after the future's start and the last poll ends
//! before its end (the probe reads the clock around the polls), and the polls
//! of one future never overlap. So their polls are matched by site and time
//! (see [`PollMatcher::future`]): the first and, for a completed future, the
//! last poll are found exactly even when futures of one function overlap
//! (the common case: many tasks running the same `async fn`); the polls
//! between are the earliest ones that fit, so overlapping futures of one
//! function with three or more polls each can trade middle polls between
//! them.
//!
//! Memory: the polls of futures not yet completed (the `FutureSpan` comes at
//! the end). Polls whose future never shows up (lost, or still running at
//! stop) stay until [`PollMatcher::unmatched`].

use fgtrace_trace::{Call, FutureId, FutureSpan};
use std::collections::HashMap;

/// `FutureSpan::polls` saturates here: a future at the cap takes every poll inside it.
const POLLS_CAP: u32 = 1023;

/// A poll waiting for its future, with the id the export gave it (a flow id
/// that links the thread's slice to the lane's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingPoll {
    /// The poll (a call with [`flags::POLL`](fgtrace_trace::flags::POLL)).
    pub call: Call,
    /// The flow id, unique in the export.
    pub id: u64,
}

/// Pending polls per site, matched to futures as they complete.
#[derive(Debug, Default)]
pub struct PollMatcher {
    /// Polls no id named, by site.
    pending: HashMap<u32, Vec<PendingPoll>>,
    /// Polls by (site, future id).
    named: HashMap<(u32, u64), Vec<PendingPoll>>,
    /// The poll kept last and not named yet: (thread, site, flow id).
    last: Option<(u32, u32, u64)>,
    next_id: u64,
    held: usize,
}

impl PollMatcher {
    /// A matcher holding no poll; flow ids start at 1.
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
        self.last = Some((call.thread, call.site, id));
        id
    }

    /// Names the poll kept last with `x`, the [`FutureId`] that followed it,
    /// if that poll is of `x`'s thread and not named yet; `false` if not
    /// (the id is then a future's: an export that holds a future on that
    /// thread asks this only when it holds none).
    pub fn name_last(&mut self, x: &FutureId) -> bool {
        match self.last {
            Some((thread, site, poll)) if thread == x.thread => {
                self.last = None;
                self.name(site, poll, x.id);
                true
            }
            _ => false,
        }
    }

    /// Names the poll `poll` (the flow id [`poll`](Self::poll) gave it, of
    /// `site`) as one of future `future`: the [`FutureId`] event that
    /// followed it. Nothing if that poll is not pending.
    pub fn name(&mut self, site: u32, poll: u64, future: u64) {
        let Some(list) = self.pending.get_mut(&site) else {
            return;
        };
        // The poll was just kept: it is at the end.
        let Some(i) = list.iter().rposition(|p| p.id == poll) else {
            return;
        };
        let p = list.remove(i);
        if list.is_empty() {
            self.pending.remove(&site);
        }
        self.named.entry((site, future)).or_default().push(p);
    }

    /// The polls of `f`, in time order, removed from the pending ones: with
    /// the future's `id` (its [`FutureId`]), the polls named with that id
    /// inside the future's time (a later future that reused the id keeps its
    /// own); without one (an older trace), those [`future`](Self::future)
    /// matches by time.
    pub fn future_of(&mut self, f: &FutureSpan, id: Option<u64>) -> Vec<PendingPoll> {
        let Some(id) = id else {
            return self.future(f);
        };
        let Some(list) = self.named.get_mut(&(f.site, id)) else {
            return Vec::new();
        };
        let end = f.start_ns.saturating_add(f.dur_ns);
        let inside = |p: &PendingPoll| p.call.start_ns >= f.start_ns && p.call.end_ns() <= end;
        let mut out: Vec<PendingPoll> = list.iter().copied().filter(inside).collect();
        list.retain(|p| !inside(p));
        if list.is_empty() {
            self.named.remove(&(f.site, id));
        }
        self.held -= out.len();
        out.sort_by_key(|p| (p.call.start_ns, p.id));
        out
    }

    /// The polls of `f`, in time order, removed from the pending ones, by
    /// time alone (for traces whose polls name no future).
    ///
    /// Among the pending polls of its site inside the future: the first poll
    /// is the one starting soonest after the future's start (the probe reads
    /// the future's start just before entering its first poll); for a future
    /// that completed, the last poll is the one ending latest before its end
    /// (it is recorded as the last poll returns); the polls between, if any,
    /// are the earliest ones between those two that do not overlap.
    pub fn future(&mut self, f: &FutureSpan) -> Vec<PendingPoll> {
        let Some(list) = self.pending.get_mut(&f.site) else {
            return Vec::new();
        };
        let end = f.start_ns.saturating_add(f.dur_ns);
        let mut idx: Vec<usize> = (0..list.len())
            .filter(|&i| list[i].call.start_ns >= f.start_ns && list[i].call.end_ns() <= end)
            .collect();
        idx.sort_by_key(|&i| (list[i].call.start_ns, list[i].id));
        let want = if f.polls >= POLLS_CAP {
            usize::MAX
        } else {
            f.polls as usize
        };
        let mut taken: Vec<usize> = Vec::new();
        if want > 0 {
            if let Some(&first) = idx.first() {
                taken.push(first);
            }
        }
        // The last poll of a completed future.
        let mut last: Option<usize> = None;
        if !f.cancelled && want >= 2 && idx.len() >= 2 {
            let first_end = list[idx[0]].call.end_ns();
            last = idx[1..]
                .iter()
                .copied()
                .filter(|&i| list[i].call.start_ns >= first_end)
                .max_by_key(|&i| (list[i].call.end_ns(), list[i].id));
        }
        let limit = last.map_or(end, |l| list[l].call.start_ns);
        let mut free_from = taken.first().map_or(f.start_ns, |&i| list[i].call.end_ns());
        let middle_max = want.saturating_sub(taken.len() + last.is_some() as usize);
        let mut middle = 0usize;
        for &i in idx.iter().skip(1) {
            if middle >= middle_max {
                break;
            }
            let c = &list[i].call;
            if Some(i) != last && c.start_ns >= free_from && c.end_ns() <= limit {
                taken.push(i);
                free_from = c.end_ns();
                middle += 1;
            }
        }
        taken.extend(last);
        let mut out: Vec<PendingPoll> = taken.iter().map(|&i| list[i]).collect();
        taken.sort_unstable_by(|a, b| b.cmp(a));
        for i in taken {
            list.swap_remove(i);
        }
        self.held -= out.len();
        out.sort_by_key(|p| (p.call.start_ns, p.id));
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
        v.extend(self.named.drain().flat_map(|(_, v)| v));
        v.sort_by_key(|p| (p.call.start_ns, p.id));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fgtrace_trace::flags;

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
    fn overlapping_futures_of_one_fn_keep_their_first_and_last_polls() {
        // Three tasks started one after the other on thread 0 (first polls),
        // all finished later on thread 1, in order.
        let mut m = PollMatcher::new();
        let firsts: Vec<u64> = (0..3)
            .map(|i| m.poll(&poll(0, 1, 100 + i * 100, 10)))
            .collect();
        let lasts: Vec<u64> = (0..3)
            .map(|i| m.poll(&poll(1, 1, 1_000 + i * 100, 10)))
            .collect();
        for i in 0..3u64 {
            // Start 5 ns before its first poll, end 5 ns after its last one.
            let f = fut(
                1,
                95 + i * 100,
                1_000 + i * 100 + 10 + 5 - (95 + i * 100),
                2,
            );
            let got: Vec<u64> = m.future(&f).iter().map(|p| p.id).collect();
            assert_eq!(got, [firsts[i as usize], lasts[i as usize]], "future {i}");
        }
        assert_eq!(m.held(), 0);
    }

    #[test]
    fn a_cancelled_future_takes_its_first_poll() {
        let mut m = PollMatcher::new();
        let first = m.poll(&poll(0, 1, 100, 10));
        let other = m.poll(&poll(0, 1, 200, 10)); // another future's, later
        let mut f = fut(1, 99, 500, 1);
        f.cancelled = true;
        let got: Vec<u64> = m.future(&f).iter().map(|p| p.id).collect();
        assert_eq!(got, [first]);
        assert_eq!(m.unmatched()[0].id, other);
    }

    /// Two futures of one fn whose polls interleave, three polls each: by
    /// time, the middle polls go to whichever fits first; by id, each future
    /// gets its own, and a later future that reused an id keeps its polls.
    #[test]
    fn named_polls_go_to_their_own_future_however_they_interleave() {
        // Future A (id 7): polls at 100, 300, 500; future B (id 9): 200, 400, 600.
        let (a_polls, b_polls) = ([100, 300, 500], [200, 400, 600]);
        let fa = fut(1, 95, 500 + 10 + 5 - 95, 3);
        let fb = fut(1, 195, 600 + 10 + 5 - 195, 3);
        let run = |named: bool| {
            let mut m = PollMatcher::new();
            let mut ids = (Vec::new(), Vec::new());
            for k in 0..3 {
                let a = m.poll(&poll(0, 1, a_polls[k], 10));
                if named {
                    assert!(m.name_last(&FutureId { thread: 0, id: 7 }));
                }
                let b = m.poll(&poll(1, 1, b_polls[k], 10));
                if named {
                    // Not the last poll's thread: a future's id.
                    assert!(!m.name_last(&FutureId { thread: 0, id: 9 }));
                    m.name(1, b, 9);
                }
                ids.0.push(a);
                ids.1.push(b);
            }
            // A later future that reused A's id, already polled.
            let again = m.poll(&poll(0, 1, 2_000, 10));
            if named {
                m.name(1, again, 7);
            }
            let (na, nb) = named.then_some((7, 9)).unzip();
            let got_a: Vec<u64> = m.future_of(&fa, na).iter().map(|p| p.id).collect();
            let got_b: Vec<u64> = m.future_of(&fb, nb).iter().map(|p| p.id).collect();
            let left: Vec<u64> = m.unmatched().iter().map(|p| p.id).collect();
            (ids, got_a, got_b, left, again)
        };
        let (ids, got_a, got_b, left, again) = run(true);
        assert_eq!(got_a, ids.0);
        assert_eq!(got_b, ids.1);
        assert_eq!(left, [again]);
        // By time alone the middle polls are traded: why ids are recorded.
        let (ids, got_a, _, _, _) = run(false);
        assert_ne!(got_a, ids.0);
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
