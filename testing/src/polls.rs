//! Polls that block their executor: a poll of an `async fn` holds the thread
//! that polls it until it returns, so no other task runs there meanwhile.
//! [`Capture::assert_no_long_polls`] fails on the longest poll over a limit,
//! with its future, thread and graph.

use super::captured::{fail, nanos, Capture, Unit};
use super::render;
use fgtrace_trace::{Call, Event};
use fgtrace_view::human::human_duration;
use std::time::Duration;

impl Capture {
    /// Fails if any poll of a traced `async fn` (or `tracing` future) in the
    /// capture took longer than `limit`: it held its executor's thread that
    /// long, and no other task ran there meanwhile (`std::thread::sleep`, a
    /// blocking lock or read, a long computation inside an `async fn`). The
    /// message names the longest such poll's future (the `async fn` and its
    /// future's id), thread and duration, with the graph of the calls inside
    /// it.
    ///
    /// Fails too when the capture holds no poll at all: a check of nothing
    /// must not pass (the `async fn` not `#[traced]`, or its tasks polled on
    /// threads the capture did not join).
    ///
    /// ```
    /// # use std::time::Duration;
    /// #[fgtrace::traced]
    /// async fn handle(n: u64) -> u64 {
    ///     tokio::task::yield_now().await;
    ///     n + 1
    /// }
    ///
    /// let cap = fgtrace::testing::capture(|| {
    ///     let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    ///     rt.block_on(handle(1))
    /// });
    /// cap.assert_no_long_polls(Duration::from_millis(100));
    /// ```
    #[track_caller]
    pub fn assert_no_long_polls(&self, limit: Duration) {
        let polls: Vec<usize> = (0..self.spans.len())
            .filter(|&i| self.spans[i].call.is_poll())
            .collect();
        if polls.is_empty() {
            fail(format!(
                "no-long-polls check ({}): no poll was captured (is the async fn \
                 `#[traced]`, and were its tasks polled on a captured thread?)",
                human_duration(nanos(limit))
            ));
        }
        let dur = |i: usize| self.spans[i].call.dur_ns;
        let over: Vec<usize> = polls
            .iter()
            .copied()
            .filter(|&i| dur(i) > nanos(limit))
            .collect();
        // The longest; of two as long, the first.
        let Some(worst) = over
            .iter()
            .copied()
            .max_by_key(|&i| (dur(i), std::cmp::Reverse(i)))
        else {
            return;
        };
        let s = &self.spans[worst];
        let meta = self.trace.meta();
        let id = self
            .future_id(&s.call)
            .map_or(String::new(), |id| format!(" (future {id:#x})"));
        let unit = Unit {
            dur_ns: s.call.dur_ns,
            self_ns: s.self_ns,
            instr: s.instr,
            self_instr: s.self_instr,
            span: Some(worst),
            nested: false,
            polls: None,
        };
        fail(format!(
            "a poll of `{}`{id} held thread {} for {}, over the long-poll limit of {} \
             ({} of {} polls over): no other task ran on that thread meanwhile\n\n{}",
            meta.site_name(s.call.site),
            meta.thread_label(s.call.thread),
            human_duration(s.call.dur_ns),
            human_duration(nanos(limit)),
            over.len(),
            polls.len(),
            render::unit(self, &unit)
        ));
    }

    /// The id of the future a poll belongs to: the `FutureId` right after
    /// it (after its counters and values), where the trace has one.
    fn future_id(&self, poll: &Call) -> Option<u64> {
        let mut after = false;
        for e in self.trace.events() {
            match e {
                Event::Call(c) if c == *poll => after = true,
                Event::FutureId(x) if after && x.thread == poll.thread => return Some(x.id),
                Event::Counters(_) | Event::Values(_) => {}
                e if after && e.thread() == poll.thread => return None,
                _ => {}
            }
        }
        None
    }
}
