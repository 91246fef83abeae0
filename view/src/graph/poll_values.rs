//! The values of `async fn`s' futures, put on their polls for the graph
//! (see [`PollValues`]).

use crate::consume::{feed, Consume};
use fgtrace_trace::{Call, Event, TraceError, TraceMeta};

/// The values an `async fn` recorded, which belong to its whole future
/// (its arguments at the first poll, `ret` at completion), put on the
/// future's polls, which are what the graph draws: the first poll's line
/// carries the arguments (`fetch(id=3) {`), the last one's the return value
/// (`} /* fetch = Ok(200) */`). Futures come at their thread's end, after
/// every poll, so this is a first pass over the trace ([`PollValues::collect`])
/// before the graph's own; polls are matched to their future as the Chrome
/// export's async lanes match them ([`PollMatcher`](crate::lanes::PollMatcher)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PollValues {
    /// (thread, site, start) of a poll -> the values its line shows.
    by_poll: std::collections::HashMap<(u32, u32, u64), fgtrace_trace::CallValues>,
}

impl PollValues {
    /// Whether any `async fn` in the trace records values (otherwise there is
    /// nothing to collect, and no reason to read the trace twice).
    pub fn wanted(meta: &TraceMeta) -> bool {
        meta.sites
            .iter()
            .any(|s| s.is_async && !s.values.is_empty())
    }

    /// Reads `events` (up to a read error, which the graph's own pass reports).
    pub fn collect(
        meta: &TraceMeta,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
    ) -> PollValues {
        let mut b = PollValuesBuilder::new(meta);
        // A read error ends the pass; the graph's own pass reports it.
        let Ok(_) = feed(&mut b, events);
        b.finish()
    }

    /// The values the poll `c` shows.
    pub(super) fn of(&self, c: &Call) -> Option<&fgtrace_trace::CallValues> {
        self.by_poll.get(&(c.thread, c.site, c.start_ns))
    }
}

/// [`PollValues::collect`] as a [`Consume`], for a view that reads the
/// events in a pass of its own (the HTML page's first pass): the `async fn`s'
/// futures with their values, and the polls they are matched to.
pub struct PollValuesBuilder<'a> {
    meta: &'a TraceMeta,
    /// Per site: an `async fn` recording values.
    wanted: Vec<bool>,
    polls: crate::lanes::PollMatcher,
    /// The futures, with their ids and values.
    futures: Vec<FutureWithValues>,
    /// Per thread: the future just before, waiting for its id and values.
    last_future: Vec<Option<usize>>,
    /// Per thread: the poll just before (site, flow id), waiting for its id.
    last_poll: Vec<Option<(u32, u64)>>,
}

type FutureWithValues = (
    fgtrace_trace::FutureSpan,
    Option<u64>,
    Option<fgtrace_trace::CallValues>,
);

impl<'a> PollValuesBuilder<'a> {
    /// A builder for `meta`'s trace: finds the `async fn`s that record values.
    pub fn new(meta: &'a TraceMeta) -> Self {
        PollValuesBuilder {
            meta,
            wanted: meta
                .sites
                .iter()
                .map(|s| s.is_async && !s.values.is_empty())
                .collect(),
            polls: crate::lanes::PollMatcher::new(),
            futures: Vec::new(),
            last_future: Vec::new(),
            last_poll: Vec::new(),
        }
    }

    fn wants(&self, site: u32) -> bool {
        self.wanted.get(site as usize).copied().unwrap_or(false)
    }

    /// Matches each future to its polls: the arguments go on the first, the
    /// return value on the last.
    pub fn finish(self) -> PollValues {
        let PollValuesBuilder {
            meta,
            mut polls,
            futures,
            ..
        } = self;
        let mut out = PollValues::default();
        for (f, id, values) in futures {
            let found = polls.future_of(&f, id);
            let (Some(values), Some(info)) = (values, meta.sites.get(f.site as usize)) else {
                continue;
            };
            let ret_slot = (info.values.last().map(String::as_str) == Some("ret"))
                .then(|| info.values.len() as u8 - 1);
            let (ret, args): (Vec<_>, Vec<_>) =
                values.values.iter().partition(|v| Some(v.slot) == ret_slot);
            let mut put = |p: &crate::lanes::PendingPoll, vals: &[fgtrace_trace::Value]| {
                out.by_poll
                    .entry((p.call.thread, p.call.site, p.call.start_ns))
                    .or_insert_with(|| fgtrace_trace::CallValues {
                        thread: p.call.thread,
                        values: Vec::new(),
                    })
                    .values
                    .extend_from_slice(vals);
            };
            if let Some(first) = found.first() {
                put(first, &args);
            }
            // The last poll is known for a future that completed, once all
            // of its polls were found (or its only one).
            if !f.cancelled && (found.len() >= 2 || f.polls == 1) {
                if let Some(last) = found.last() {
                    put(last, &ret);
                }
            }
        }
        out
    }
}

impl Consume for PollValuesBuilder<'_> {
    type Error = std::convert::Infallible;

    fn push(&mut self, ev: &Event) -> Result<(), Self::Error> {
        let t = ev.thread() as usize;
        if self.last_future.len() <= t {
            self.last_future.resize(t + 1, None);
            self.last_poll.resize(t + 1, None);
        }
        let waiting = self.last_future[t].take();
        let poll = self.last_poll[t].take();
        match ev {
            Event::Call(c) if c.is_poll() && self.wants(c.site) => {
                self.last_poll[t] = Some((c.site, self.polls.poll(c)));
            }
            Event::Future(f) if self.wants(f.site) => {
                self.futures.push((*f, None, None));
                self.last_future[t] = Some(self.futures.len() - 1);
            }
            // After the future's (or the poll's) values.
            Event::FutureId(x) => match (waiting, poll) {
                (Some(i), _) => self.futures[i].1 = Some(x.id),
                (None, Some((site, flow))) => self.polls.name(site, flow, x.id),
                (None, None) => {}
            },
            Event::Values(v) => {
                if let Some(i) = waiting {
                    self.futures[i].2 = Some(v.clone());
                    // Its id follows its values.
                    self.last_future[t] = Some(i);
                }
                self.last_poll[t] = poll;
            }
            Event::Counters(_) => {
                self.last_future[t] = waiting;
                self.last_poll[t] = poll;
            }
            _ => {}
        }
        Ok(())
    }
}
