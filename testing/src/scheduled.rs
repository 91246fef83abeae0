//! Scheduled time of an async fn's futures: how long each waited, woken
//! and ready, for a poll (a busy or blocked executor). Futures measure it
//! themselves while recording (`Event::FutureTimes`); the failure message
//! finds the longest single wait from the wakes and polls, and shows what
//! the thread that polled the future next ran meanwhile.

use super::captured::{fail, nanos, ns, Capture};
use super::render;
use fgtrace_trace::{Event, FutureSpan, FutureTimes};
use fgtrace_view::human::human_duration;
use std::fmt::Write;
use std::time::Duration;

/// One future of the asked fn: its span, id and times.
struct Timed {
    span: FutureSpan,
    id: Option<u64>,
    times: FutureTimes,
}

impl Capture {
    /// The futures of `name` with what they measured of themselves.
    fn timed_futures(&self, name: &str) -> Vec<Timed> {
        let mask = self.site_mask(name);
        let mut out: Vec<Timed> = Vec::new();
        let mut last: Option<(FutureSpan, Option<u64>)> = None;
        for e in self.trace.events() {
            match e {
                Event::Future(f) => {
                    last = mask
                        .get(f.site as usize)
                        .copied()
                        .unwrap_or(false)
                        .then_some((f, None));
                }
                Event::FutureId(x) => {
                    if let Some((_, id)) = &mut last {
                        id.get_or_insert(x.id);
                    }
                }
                Event::FutureTimes(times) => {
                    if let Some((span, id)) = last.take() {
                        out.push(Timed { span, id, times });
                    }
                }
                Event::Values(_) | Event::Counters(_) => {}
                _ => last = None,
            }
        }
        out
    }

    /// The most scheduled time of one future of the async fn `name`: from
    /// each wake to the poll after it, summed over the future's wakes.
    /// `None` when no future of it measured it (no such fn was polled while
    /// recording, or its wakes were not watched: a `tracing` span).
    pub fn max_scheduled(&self, name: &str) -> Option<Duration> {
        self.timed_futures(name)
            .iter()
            .filter_map(|t| t.times.waits.map(|w| w.scheduled_ns))
            .max()
            .map(ns)
    }

    /// Fails if a future of the async fn `name` spent more than `budget`
    /// scheduled: woken (ready to run) but not yet polled, summed over its
    /// wakes. A future waits so while its executor's threads run other
    /// tasks, or while one of them blocks. The message names the longest
    /// single wait and shows what the thread that then polled the future
    /// ran meanwhile. Fails too when no future of `name` measured its
    /// scheduled time (a misspelt name, a `tracing` future).
    #[track_caller]
    pub fn assert_scheduled_below(&self, name: &str, budget: Duration) {
        let futures = self.timed_futures(name);
        let worst = futures
            .iter()
            .filter_map(|t| Some((t, t.times.waits?)))
            .max_by_key(|(_, w)| w.scheduled_ns);
        let Some((t, w)) = worst else {
            fail(format!(
                "scheduled-time budget of `{name}`: no future of `{name}` measured its scheduled \
                 time ({} of its futures recorded; wakes are watched for `#[traced] async fn`s \
                 on a host, not for `tracing` spans)\n\n{}",
                futures.len(),
                render::whole(self, 60)
            ));
        };
        if w.scheduled_ns <= nanos(budget) {
            return;
        }
        let over = futures
            .iter()
            .filter(|t| {
                t.times
                    .waits
                    .is_some_and(|w| w.scheduled_ns > nanos(budget))
            })
            .count();
        let mut msg = format!(
            "a future of `{name}` waited {}, woken, for its polls (scheduled time), over its \
             budget of {} ({over} of {} futures over; this one: {} wakes, {} polls, {} busy in \
             them, {} long)\n",
            human_duration(w.scheduled_ns),
            human_duration(nanos(budget)),
            futures.len(),
            w.wakes,
            t.times.polls,
            human_duration(t.times.busy_ns),
            human_duration(t.span.dur_ns),
        );
        msg.push_str(&self.longest_wait(t, w.scheduled_ns));
        fail(msg)
    }

    /// The longest single wait of a future, from a wake to the poll after
    /// it, and what ran on that poll's thread meanwhile.
    fn longest_wait(&self, t: &Timed, scheduled_ns: u64) -> String {
        let (f, Some(id)) = (t.span, t.id) else {
            return String::new();
        };
        let end = f.start_ns + f.dur_ns;
        let within = |at: u64| at >= f.start_ns && at <= end;
        // Its polls (by the id after each) and its wakes, in time.
        let mut polls = Vec::new();
        let mut wakes = Vec::new();
        let mut last_poll = None;
        for e in self.trace.events() {
            match e {
                Event::Call(c) if c.is_poll() && c.site == f.site && within(c.start_ns) => {
                    last_poll = Some(c)
                }
                Event::FutureId(x) => {
                    if let Some(c) = last_poll.take().filter(|_| x.id == id) {
                        polls.push(c);
                    }
                }
                Event::Wake(x) if x.site == f.site && x.id == id && within(x.ts_ns) => {
                    wakes.push(x.ts_ns)
                }
                Event::Values(_) | Event::Counters(_) => {}
                _ => last_poll = None,
            }
        }
        polls.sort_by_key(|c| c.start_ns);
        wakes.sort_unstable();
        // As the future measured it: the first wake since a poll began,
        // from that poll's end at the earliest, to the next poll's start.
        let longest = polls
            .windows(2)
            .filter_map(|p| {
                let w = *wakes
                    .iter()
                    .find(|&&w| w >= p[0].start_ns && w < p[1].start_ns)?;
                let from = w.max(p[0].end_ns());
                Some((p[1].start_ns.saturating_sub(from), from, p[1]))
            })
            .max_by_key(|x| x.0);
        let Some((wait, from, next)) = longest else {
            return String::new();
        };
        // The poll's record starts a few instructions after the future's
        // own clock read: never more than the sum it measured.
        let wait = wait.min(scheduled_ns);
        let meta = self.trace.meta();
        let mut out = format!(
            "\nits longest wait: {}, from {} to its next poll on thread {}, which ran meanwhile:\n",
            human_duration(wait),
            human_duration(from),
            meta.thread_label(next.thread)
        );
        // The outermost calls of that thread overlapping the wait.
        let busy: Vec<usize> = (0..self.spans.len())
            .filter(|&i| {
                let c = self.spans[i].call;
                c.thread == next.thread
                    && self.spans[i].parent.is_none()
                    && c.start_ns < next.start_ns
                    && c.end_ns() > from
            })
            .collect();
        if busy.is_empty() {
            out.push_str("  no traced call\n");
            return out;
        }
        for &i in busy.iter().take(8) {
            let c = self.spans[i].call;
            let _ = writeln!(
                out,
                "  {} {}",
                self.site_of(i).name,
                human_duration(c.dur_ns)
            );
        }
        if let Some(&i) = busy.iter().max_by_key(|&&i| self.spans[i].call.dur_ns) {
            out.push('\n');
            out.push_str(&render::tree(self, i, &[]));
        }
        out
    }
}
