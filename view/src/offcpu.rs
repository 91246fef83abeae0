//! The off-CPU flamegraph (Brendan Gregg's): folded stacks of traced calls
//! weighted by the time they spent switched out, rather than running.
//!
//! Each call's own off-CPU time (its off-CPU time minus its recorded
//! children's) goes to its traced path, under a last frame that says why:
//! `[blocked]` (switched out voluntarily: sleep, lock, I/O) or
//! `[preempted]` (switched out while runnable). Time a thread spent off the
//! CPU outside every traced call is not drawn, only counted in the summary.
//! Streams like the other views: a stack of open calls per thread.
//!
//! Also the off-CPU stretches the timeline exports draw (Chrome, Perfetto,
//! Firefox Profiler): [`off_cpu_threads`] and [`off_cpu_slices`].

use crate::consume::{collect, Consume};
use crate::threads::{shown, thread_mask, ThreadSel};
use fgtrace_trace::{
    Call, Event, OffCpuThread, OffKind, OffTime, ThreadInfo, TraceError, TraceMeta,
};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::{self, Write};

/// Leaf frame of blocked time.
pub const BLOCKED: &str = "[blocked]";
/// Leaf frame of preempted time.
pub const PREEMPTED: &str = "[preempted]";

/// One stretch a shown thread spent off the CPU, as the timeline exports
/// (Chrome, Perfetto, Firefox Profiler) draw it: named by [`OffKind::name`],
/// `blocked` or `preempted`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffSlice {
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// Nanoseconds since session start.
    pub start_ns: u64,
    /// Nanoseconds since session start, exclusive.
    pub end_ns: u64,
    /// Blocked or preempted.
    pub kind: OffKind,
}

impl OffSlice {
    /// Length, nanoseconds.
    pub fn dur_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
}

/// The threads with off-CPU intervals that `mask` shows (`filtered`: a
/// thread filter is set), with their intervals.
fn shown_off_cpu<'a>(
    meta: &'a TraceMeta,
    mask: &'a [bool],
    filtered: bool,
) -> impl Iterator<Item = (&'a ThreadInfo, &'a OffCpuThread)> + 'a {
    meta.off_cpu
        .iter()
        .flat_map(|o| &o.threads)
        .filter(move |th| shown(mask, filtered, th.thread))
        .filter_map(move |th| Some((meta.threads.get(th.thread as usize)?, th)))
}

/// The threads a timeline export gives an off-CPU track: those with
/// off-CPU intervals recorded that `mask` shows, as (index, thread).
pub fn off_cpu_threads<'a>(
    meta: &'a TraceMeta,
    mask: &'a [bool],
    filtered: bool,
) -> impl Iterator<Item = (u32, &'a ThreadInfo)> + 'a {
    shown_off_cpu(meta, mask, filtered).map(|(info, th)| (th.thread, info))
}

/// Every off-CPU stretch of the threads [`off_cpu_threads`] gives, thread
/// by thread, each thread's in time order.
pub fn off_cpu_slices<'a>(
    meta: &'a TraceMeta,
    mask: &'a [bool],
    filtered: bool,
) -> impl Iterator<Item = OffSlice> + 'a {
    shown_off_cpu(meta, mask, filtered).flat_map(|(_, th)| {
        th.intervals.iter().map(move |i| OffSlice {
            thread: th.thread,
            start_ns: i.start_ns,
            end_ns: i.end_ns(),
            kind: i.kind,
        })
    })
}

/// Options of the off-CPU stacks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OffCpuFoldedOptions {
    /// Start every stack with its thread (`name-tid`).
    pub per_thread: bool,
    /// Only these threads (empty: all).
    pub threads: Vec<ThreadSel>,
    /// Traced frames as `Type::method` rather than `crate::module::Type::method`.
    pub short_names: bool,
    /// Leave preempted time out: width is blocked time only.
    pub blocked_only: bool,
}

/// What the stacks hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OffCpuSummary {
    /// Calls in the shown threads (the stacks' traced frames).
    pub calls: u64,
    /// Inside traced calls.
    pub traced: OffTime,
    /// Off-CPU time of the shown threads outside every traced call.
    pub untraced_ns: u64,
    /// Context-switch records lost (off-CPU time may be missing there).
    pub lost: u64,
}

struct Open {
    site: u32,
    depth: u32,
    off: OffTime,
    children: OffTime,
}

/// Builds off-CPU folded stacks from events.
pub struct OffCpuFoldedBuilder<'a> {
    meta: &'a TraceMeta,
    opts: OffCpuFoldedOptions,
    mask: Vec<bool>,
    stacks: Vec<Vec<Open>>,
    lines: BTreeMap<String, u64>,
    summary: OffCpuSummary,
}

impl<'a> OffCpuFoldedBuilder<'a> {
    /// `Err(reason)` where the trace has no off-CPU time: the view says so
    /// rather than drawing nothing that looks like "never blocked".
    pub fn new(meta: &'a TraceMeta, opts: &OffCpuFoldedOptions) -> Result<Self, String> {
        match &meta.off_cpu {
            Some(o) if o.is_available() => {}
            Some(o) => return Err(format!("off-CPU unavailable: {}", o.reason())),
            None => {
                return Err("off-CPU unavailable: not recorded (record with Config::off_cpu(true) or FGTRACE_OFFCPU=1)".into())
            }
        }
        Ok(OffCpuFoldedBuilder {
            meta,
            opts: opts.clone(),
            mask: thread_mask(meta, &opts.threads),
            stacks: Vec::new(),
            lines: BTreeMap::new(),
            summary: OffCpuSummary::default(),
        })
    }

    /// Every event of `events`; stops at the first read error (what was read
    /// is kept) and returns it.
    pub fn extend(
        &mut self,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
    ) -> Result<(), TraceError> {
        collect(self, events)
    }

    fn shows(&self, t: u32) -> bool {
        shown(&self.mask, !self.opts.threads.is_empty(), t)
    }

    fn call(&mut self, c: &Call) {
        self.pop_to(c.thread, c.depth);
        let off = self
            .meta
            .off_cpu
            .as_ref()
            .and_then(|o| o.within(c.thread, c.start_ns, c.end_ns()))
            .unwrap_or_default();
        let t = c.thread as usize;
        if self.stacks.len() <= t {
            self.stacks.resize_with(t + 1, Vec::new);
        }
        match self.stacks[t].last_mut() {
            Some(p) => p.children.add(off),
            None => self.summary.traced.add(off),
        }
        self.stacks[t].push(Open {
            site: c.site,
            depth: c.depth,
            off,
            children: OffTime::default(),
        });
        self.summary.calls += 1;
    }

    fn pop_to(&mut self, t: u32, depth: u32) {
        loop {
            let Some(stack) = self.stacks.get(t as usize) else {
                return;
            };
            if stack.last().is_none_or(|o| o.depth < depth) {
                return;
            }
            let mut own = stack.last().map(|o| o.off).unwrap_or_default();
            own.sub(stack.last().map(|o| o.children).unwrap_or_default());
            if own.total_ns() > 0 {
                let path = self.path(t);
                let mut add = |leaf: &str, ns: u64| {
                    if ns > 0 {
                        let e = self.lines.entry(format!("{path};{leaf}")).or_insert(0);
                        *e = e.saturating_add(ns);
                    }
                };
                add(BLOCKED, own.blocked_ns);
                if !self.opts.blocked_only {
                    add(PREEMPTED, own.preempted_ns);
                }
            }
            self.stacks[t as usize].pop();
        }
    }

    fn path(&self, t: u32) -> String {
        let mut parts: Vec<String> = Vec::new();
        if self.opts.per_thread {
            parts.push(self.meta.thread_label(t));
        }
        for o in &self.stacks[t as usize] {
            parts.push(match self.meta.sites.get(o.site as usize) {
                Some(s) if self.opts.short_names => s.name.clone(),
                Some(s) => s.full_name(),
                None => format!("[site {}]", o.site),
            });
        }
        parts.join(";")
    }

    /// Closes the open calls; returns the stacks and the summary.
    pub fn finish(mut self) -> (Vec<(String, u64)>, OffCpuSummary) {
        for t in 0..self.stacks.len() {
            self.pop_to(t as u32, 0);
        }
        if let Some(o) = &self.meta.off_cpu {
            let mut all = 0u64;
            for th in &o.threads {
                if self.shows(th.thread) {
                    all = all.saturating_add(th.total().total_ns());
                    self.summary.lost = self.summary.lost.saturating_add(th.lost);
                }
            }
            self.summary.untraced_ns = all.saturating_sub(self.summary.traced.total_ns());
        }
        (self.lines.into_iter().collect(), self.summary)
    }
}

impl Consume for OffCpuFoldedBuilder<'_> {
    type Error = Infallible;

    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        if !self.shows(ev.thread()) {
            return Ok(());
        }
        match ev {
            Event::Call(c) => self.call(c),
            Event::Lost(l) => self.pop_to(l.thread, l.depth),
            _ => {}
        }
        Ok(())
    }
}

/// Writes folded lines (`a;b;[blocked] 1234`).
pub fn write_folded(lines: &[(String, u64)], mut w: impl Write) -> io::Result<()> {
    for (s, n) in lines {
        writeln!(w, "{s} {n}")?;
    }
    w.flush()
}

impl OffCpuSummary {
    /// One line for a flamegraph's subtitle.
    pub fn subtitle(&self, blocked_only: bool) -> String {
        use super::human::human_duration;
        let mut s = if blocked_only {
            format!(
                "width = blocked time (ns): {} in {} calls",
                human_duration(self.traced.blocked_ns),
                self.calls
            )
        } else {
            format!(
                "width = off-CPU time (ns): {} blocked, {} preempted, in {} calls",
                human_duration(self.traced.blocked_ns),
                human_duration(self.traced.preempted_ns),
                self.calls
            )
        };
        if self.untraced_ns > 0 {
            s.push_str(&format!(
                "; {} off-CPU outside traced calls not shown",
                human_duration(self.untraced_ns)
            ));
        }
        if self.lost > 0 {
            s.push_str(&format!("; {} context-switch records LOST", self.lost));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fgtrace_trace::{OffCpu, OffCpuThread, OffInterval, OffKind, SiteInfo, ThreadInfo};

    fn meta(off: Option<OffCpu>) -> TraceMeta {
        let site = |n: &str| SiteInfo {
            name: n.into(),
            module_path: String::new(),
            file: String::new(),
            line: 0,
            is_async: false,
            values: Vec::new(),
        };
        TraceMeta {
            sites: vec![site("main"), site("read"), site("compute")],
            threads: vec![ThreadInfo {
                tid: 1,
                name: "m".into(),
                ..Default::default()
            }],
            off_cpu: off,
            ..Default::default()
        }
    }

    /// A call on the one thread.
    fn call(site: u32, depth: u32, start_ns: u64, dur_ns: u64) -> Event {
        crate::test_traces::call(0, site, depth, start_ns, dur_ns)
    }

    #[test]
    fn own_off_cpu_time_goes_to_the_innermost_call_by_kind() {
        let iv = |s, d, kind| OffInterval {
            start_ns: s,
            dur_ns: d,
            kind,
        };
        let off = OffCpu {
            unavailable: None,
            threads: vec![OffCpuThread {
                thread: 0,
                lost: 0,
                intervals: vec![
                    iv(5, 5, OffKind::Blocked),    // main, before read
                    iv(20, 30, OffKind::Blocked),  // read
                    iv(60, 4, OffKind::Preempted), // compute
                    iv(200, 50, OffKind::Blocked), // outside every call
                ],
            }],
        };
        let m = meta(Some(off));
        let mut b = OffCpuFoldedBuilder::new(&m, &OffCpuFoldedOptions::default()).unwrap();
        for e in [call(0, 0, 0, 100), call(1, 1, 15, 40), call(2, 1, 55, 20)] {
            let Ok(()) = b.push(&e);
        }
        let (lines, sum) = b.finish();
        assert_eq!(
            lines,
            [
                ("main;[blocked]".to_string(), 5),
                ("main;compute;[preempted]".to_string(), 4),
                ("main;read;[blocked]".to_string(), 30),
            ]
        );
        assert_eq!(
            sum.traced,
            OffTime {
                blocked_ns: 35,
                preempted_ns: 4
            }
        );
        assert_eq!(sum.untraced_ns, 50);
    }

    #[test]
    fn a_trace_without_off_cpu_time_says_why() {
        let m = meta(None);
        let e = OffCpuFoldedBuilder::new(&m, &OffCpuFoldedOptions::default())
            .err()
            .unwrap();
        assert!(e.starts_with("off-CPU unavailable: not recorded"), "{e}");
        let m = meta(Some(OffCpu::unavailable("the kernel refused: EACCES")));
        let e = OffCpuFoldedBuilder::new(&m, &OffCpuFoldedOptions::default())
            .err()
            .unwrap();
        assert_eq!(e, "off-CPU unavailable: the kernel refused: EACCES");
    }

    #[test]
    fn slices_of_the_shown_threads_that_exist_in_time_order() {
        let iv = |s, d, kind| OffInterval {
            start_ns: s,
            dur_ns: d,
            kind,
        };
        let th = |thread, intervals| OffCpuThread {
            thread,
            lost: 0,
            intervals,
        };
        let mut m = meta(Some(OffCpu {
            unavailable: None,
            threads: vec![
                th(
                    0,
                    vec![iv(5, 5, OffKind::Blocked), iv(20, 3, OffKind::Preempted)],
                ),
                th(1, vec![iv(7, 1, OffKind::Blocked)]),
                // A thread the metadata does not list: nothing to draw it on.
                th(9, vec![iv(1, 1, OffKind::Blocked)]),
            ],
        }));
        m.threads.push(fgtrace_trace::ThreadInfo {
            tid: 2,
            name: "worker".into(),
            ..Default::default()
        });
        let all = [true, true];
        let got: Vec<_> = off_cpu_slices(&m, &all, false)
            .map(|s| (s.thread, s.start_ns, s.end_ns, s.kind, s.dur_ns()))
            .collect();
        assert_eq!(
            got,
            [
                (0, 5, 10, OffKind::Blocked, 5),
                (0, 20, 23, OffKind::Preempted, 3),
                (1, 7, 8, OffKind::Blocked, 1),
            ]
        );
        let threads: Vec<_> = off_cpu_threads(&m, &all, false)
            .map(|(t, i)| (t, i.tid))
            .collect();
        assert_eq!(threads, [(0, m.threads[0].tid), (1, 2)]);
        // A thread filter keeps only its threads.
        let only_worker = [false, true];
        let got: Vec<_> = off_cpu_slices(&m, &only_worker, true)
            .map(|s| s.thread)
            .collect();
        assert_eq!(got, [1]);
        assert_eq!(off_cpu_slices(&meta(None), &all, false).count(), 0);
    }
}
