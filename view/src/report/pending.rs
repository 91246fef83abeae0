//! Futures still pending when the recording ended: polled (their polls
//! carry their id) with no whole-future record after their last poll. Of
//! these, a future woken after its last poll and never polled again is
//! stalled (its executor never came back to it); one not woken since is
//! waiting, or leaked (its waker lost).
//!
//! Kept per future (site and id) across a builder's threads: the last poll,
//! the end of the last whole future of that id, and the last wake; builders
//! of other threads are merged at the end, since a future's polls, its end
//! and its wakes may each be on another thread.

use fgtrace_trace::{Call, Event, TraceMeta};
use serde::Serialize;
use std::collections::HashMap;

/// How many pending futures the report lists (all are counted).
pub(super) const LISTED: usize = 20;

/// A future pending at the end of the recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PendingFuture {
    /// Index into `TraceMeta::sites` (its `async fn`).
    pub site: u32,
    /// `module::name`.
    pub name: String,
    /// Its id (see `fgtrace_trace::FutureId`).
    pub id: u64,
    /// Where it was last polled: the poll's start, nanoseconds since the
    /// session's start, and its thread.
    pub last_poll_ns: u64,
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// `name-tid` of that thread.
    pub thread_label: String,
    /// When it was woken after its last poll, if it was: woken and never
    /// polled again (stalled).
    pub woken_ns: Option<u64>,
}

/// The futures pending at the end, as the report shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Pending {
    /// Futures pending at the end.
    pub futures: u64,
    /// Of these, woken after their last poll and never polled again.
    pub stalled: u64,
    /// Up to 20 of them: the stalled first (longest stalled first), then
    /// the others by their last poll, oldest first.
    pub listed: Vec<PendingFuture>,
}

#[derive(Clone, Copy)]
struct LastPoll {
    start_ns: u64,
    thread: u32,
}

/// One builder's view of the futures its threads polled, ended and woke.
#[derive(Default)]
pub(super) struct PendingAcc {
    polls: HashMap<(u32, u64), LastPoll>,
    ended: HashMap<(u32, u64), u64>,
    wakes: HashMap<(u32, u64), u64>,
    /// Per thread: the poll or whole future whose id comes next.
    due: Vec<Option<Due>>,
}

#[derive(Clone, Copy)]
enum Due {
    Poll(Call),
    Future { site: u32, end_ns: u64 },
}

impl PendingAcc {
    /// Follows one event of a thread the report shows (`shown`) or not.
    pub(super) fn push(&mut self, ev: &Event, shown: bool) {
        let t = ev.thread() as usize;
        if self.due.len() <= t {
            self.due.resize(t + 1, None);
        }
        match ev {
            Event::Call(c) if c.is_poll() && shown => self.due[t] = Some(Due::Poll(*c)),
            Event::Future(f) => {
                self.due[t] = Some(Due::Future {
                    site: f.site,
                    end_ns: f.start_ns + f.dur_ns,
                })
            }
            Event::FutureId(x) => match self.due[t].take() {
                Some(Due::Poll(c)) => {
                    let last = LastPoll {
                        start_ns: c.start_ns,
                        thread: c.thread,
                    };
                    let p = self.polls.entry((c.site, x.id)).or_insert(last);
                    if c.start_ns > p.start_ns {
                        *p = last;
                    }
                }
                Some(Due::Future { site, end_ns }) => {
                    let e = self.ended.entry((site, x.id)).or_insert(end_ns);
                    *e = (*e).max(end_ns);
                }
                None => {}
            },
            Event::Wake(w) => {
                let e = self.wakes.entry((w.site, w.id)).or_insert(w.ts_ns);
                *e = (*e).max(w.ts_ns);
            }
            Event::Counters(_) | Event::Values(_) => {}
            _ => self.due[t] = None,
        }
    }

    pub(super) fn merge(&mut self, o: PendingAcc) {
        for (k, p) in o.polls {
            let q = self.polls.entry(k).or_insert(p);
            if p.start_ns > q.start_ns {
                *q = p;
            }
        }
        for (k, e) in o.ended {
            let x = self.ended.entry(k).or_insert(e);
            *x = (*x).max(e);
        }
        for (k, w) in o.wakes {
            let x = self.wakes.entry(k).or_insert(w);
            *x = (*x).max(w);
        }
    }

    /// The futures whose last poll no whole future of their id ended after.
    pub(super) fn finish(&self, meta: &TraceMeta) -> Pending {
        let mut all: Vec<PendingFuture> = self
            .polls
            .iter()
            .filter(|(k, p)| self.ended.get(k).is_none_or(|&e| e < p.start_ns))
            .map(|(&(site, id), p)| PendingFuture {
                site,
                name: meta.site_name(site).to_string(),
                id,
                last_poll_ns: p.start_ns,
                thread: p.thread,
                thread_label: meta.thread_label(p.thread),
                woken_ns: self
                    .wakes
                    .get(&(site, id))
                    .copied()
                    .filter(|&w| w > p.start_ns),
            })
            .collect();
        all.sort_by_key(|f| {
            (
                f.woken_ns.is_none(),
                f.woken_ns.unwrap_or(f.last_poll_ns),
                f.site,
                f.id,
            )
        });
        Pending {
            futures: all.len() as u64,
            stalled: all.iter().filter(|f| f.woken_ns.is_some()).count() as u64,
            listed: all.into_iter().take(LISTED).collect(),
        }
    }
}
