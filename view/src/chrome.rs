//! Chrome Trace Event format (JSON), for Perfetto UI, `chrome://tracing` and
//! speedscope.
//!
//! - every traced call: a complete event (`"ph":"X"`), `ts`/`dur` in
//!   microseconds written with all nanosecond digits (`1234.567`), on the
//!   thread's OS tid, args `file` (`path:line`), `module`, `depth`, `unwound`,
//!   `poll` for async polls, and the call's counters when recorded;
//! - thread and process names: metadata events (`thread_name`, `process_name`);
//! - an `async fn`'s whole future: an async begin/end pair (`"ph":"b"`/`"e"`,
//!   `cat` `future`). Ids are lanes per function, reused once a lane's future
//!   has ended, so Perfetto draws one track per concurrent future rather than
//!   one per future;
//! - async lanes: each future's polls (matched by [`lanes`](super::lanes)) as
//!   async `poll` slices nested in the future's begin/end pair, so they sit
//!   on the future's lane, with the polling thread's tid in `args.tid`; the
//!   poll's complete event on its thread and the lane's copy share
//!   `args.poll_id` (the JSON format's flows bind to thread slices only, so
//!   the link is by these args; the Perfetto export draws it as a flow);
//! - samples: thread-scoped instant events (`"ph":"i"`, `cat` `sample`), named
//!   after the innermost frame, with the resolved stack (root first) in
//!   `args.stack`. The `stackFrames`/`samples` sections of the format are not
//!   used: Perfetto's JSON importer skips them;
//! - losses: instant events named `LOST N records`;
//! - instant markers (`tracing` events): thread-scoped instant events
//!   (`"ph":"i"`, `"s":"t"`, `cat` `event`) named after their site, args
//!   `file`, `module`, `depth` and their values;
//! - off-CPU time (when recorded): a track per thread, `name (off-CPU)`
//!   (tid `0x40000000 | tid`, sorted right below its thread), with a
//!   complete event per stretch the thread was switched out, named `blocked`
//!   or `preempted` (`cat` `off-cpu`); where it is unavailable,
//!   `otherData.off_cpu` says why.
//!
//! - a time window and a minimum duration (`window`, see
//!   [`window`](super::window)): only what it keeps is written, and
//!   `otherData.window` and `otherData.left_out` say what it was and what it
//!   left out. With a window, `otherData` comes after `traceEvents` (the
//!   counts are known at the end); without one, the file is as before.
//!
//! A call's recorded values (`#[traced(values(..))]`) are args under their
//! own names (`len`, `ret`; `value.depth` where a name is one of the args
//! above), numbers as JSON numbers, the rest (`Ok(3)`, `'x'`) as strings.
//!
//! Written as it is read: one pending call per thread (its counters and
//! values follow it), lanes per async function, resolved names cached per address. Strings
//! go through the JSON writer for escaping; no event has an array at its top
//! level (Perfetto's tokenizer rejects those), `args` holds the stack.

use super::lanes::PollMatcher;
use super::offcpu::{off_cpu_slices, off_cpu_threads};
use crate::consume::{feed, Consume};
use crate::resolve::Resolve;
use crate::threads::{shown, thread_mask, ThreadSel};
use crate::window::{LeftOut, Window, WindowFilter};
use fgtrace_trace::{
    Call, CallCounters, CallValues, Event, FutureSpan, LossKind, Lost, Marker, Sample, TraceError,
    TraceMeta,
};
use std::collections::HashMap;
use std::io::{self, Write};

/// What to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChromeOptions {
    /// Only these threads (empty: all).
    pub threads: Vec<ThreadSel>,
    /// Samples as instant events with their stacks.
    pub samples: bool,
    /// Whole futures as async events.
    pub futures: bool,
    /// Off-CPU stretches on a track per thread (when the trace has them).
    pub off_cpu: bool,
    /// Only what this time window and minimum duration keep (default: everything).
    pub window: Window,
}

impl Default for ChromeOptions {
    fn default() -> Self {
        ChromeOptions {
            threads: Vec::new(),
            samples: true,
            futures: true,
            off_cpu: true,
            window: Window::default(),
        }
    }
}

/// Events written, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChromeStats {
    /// Complete (`X`) events, one per call.
    pub calls: u64,
    /// Async begin/end pairs (`"ph":"b"`/`"e"`), one per future.
    pub futures: u64,
    /// Samples, as instant events (category `sample`).
    pub samples: u64,
    /// Instant events marking lost records.
    pub losses: u64,
    /// Polls drawn on their future's lane.
    pub lane_polls: u64,
    /// Off-CPU stretches.
    pub off_cpu: u64,
    /// Instant markers (`tracing` events).
    pub markers: u64,
    /// Wakes of futures, instant events on the waking threads.
    pub wakes: u64,
    /// What the window left out.
    pub left_out: LeftOut,
}

/// The tid of a thread's off-CPU track: above every Linux tid (at most 2^22).
pub const OFF_CPU_TID: u32 = 0x4000_0000;

/// Microseconds with exactly the nanosecond digits: `1234567` ns -> `1234.567`.
fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// A recorded value as JSON: integers and `bool`s as they are, a string as
/// its text, the rest (`'x'`, `Ok(3)`, `Err("bad digit")`, `None`) as strings.
pub fn value_json(v: &fgtrace_trace::Shown<'_>) -> String {
    use fgtrace_core::values::tag;
    match (v.tag & tag::VARIANT, v.tag & tag::TYPE) {
        (0, tag::BOOL) => (v.bits != 0).to_string(),
        (0, tag::SIGNED | tag::UNSIGNED) => v.to_string(),
        (0, tag::STR) => match v.text() {
            Some(t) => js(t),
            None => js(&v.to_string()),
        },
        _ => js(&v.to_string()),
    }
}

fn js(s: &str) -> String {
    fgtrace_trace::json::to_string(&s).expect("strings always serialize")
}

struct Writer<'a, W: Write, R: Resolve> {
    meta: &'a TraceMeta,
    opts: &'a ChromeOptions,
    w: W,
    resolver: R,
    mask: Vec<bool>,
    first: bool,
    pid: u32,
    /// Per thread: the last call (and its poll id), waiting for its counters.
    pending: Vec<Option<(Call, u64, Option<CallCounters>)>>,
    /// The last future, until its values could follow.
    pending_future: Option<FutureSpan>,
    /// The held future\'s values (its id follows them).
    pending_future_values: Option<CallValues>,
    /// The last instant marker, until its values could follow.
    pending_marker: Option<Marker>,
    polls: PollMatcher,
    /// Per site: end time of each async lane's last future.
    lanes: HashMap<u32, Vec<u64>>,
    names: HashMap<(u64, bool), Vec<String>>,
    stats: ChromeStats,
    buf: String,
    filter: WindowFilter,
}

impl<W: Write, R: Resolve> Writer<'_, W, R> {
    fn tid(&self, t: u32) -> u32 {
        self.meta.threads.get(t as usize).map_or(t, |i| i.tid)
    }

    fn event(&mut self) -> io::Result<()> {
        if !self.first {
            self.w.write_all(b",\n")?;
        }
        self.first = false;
        self.w.write_all(self.buf.as_bytes())?;
        self.buf.clear();
        Ok(())
    }

    /// The `otherData` object: the trace's metadata, and with a window, the
    /// window and what it left out.
    fn other_data(&self) -> String {
        let m = self.meta;
        let mut other = format!(
            "{{\"program\":{},\"clock\":{},\"duration_ns\":{},\"calls\":{},\"lost\":{},\"overruns\":{}",
            js(&m.program),
            js(&m.clock.source),
            m.duration_ns,
            m.total_calls(),
            m.total_lost(),
            m.total_overruns()
        );
        if let Some(s) = &m.sampling {
            other.push_str(&format!(",\"sampling\":{}", js(s)));
        }
        let samples_lost: u64 = m.total_samples_lost();
        other.push_str(&format!(",\"samples_lost\":{samples_lost}"));
        if let Some(o) = &m.off_cpu {
            let v = match (o.is_available(), &o.unavailable) {
                (true, None) => "recorded".to_string(),
                (true, Some(why)) => format!("recorded; unavailable for some threads: {why}"),
                (false, _) => format!("unavailable: {}", o.reason()),
            };
            other.push_str(&format!(",\"off_cpu\":{}", js(&v)));
        }
        let w = self.filter.window();
        if !w.is_all() {
            let opt = |v: Option<u64>| v.map_or("null".to_string(), |v| v.to_string());
            let l = &self.filter.left_out;
            other.push_str(&format!(
                ",\"window\":{{\"from_ns\":{},\"to_ns\":{},\"min_duration_ns\":{},\"text\":{}}},\"left_out\":{{\"calls\":{},\"futures\":{},\"samples\":{},\"losses\":{},\"off_cpu\":{},\"text\":{}}}",
                opt(w.from_ns),
                opt(w.to_ns),
                w.min_dur_ns,
                js(&w.describe()),
                l.calls,
                l.futures,
                l.samples,
                l.losses,
                l.off_cpu,
                js(&l.describe()),
            ));
        }
        other.push('}');
        other
    }

    fn header(&mut self) -> io::Result<()> {
        let m = self.meta;
        if self.filter.window().is_all() {
            let other = self.other_data();
            writeln!(
                self.w,
                "{{\"displayTimeUnit\":\"ns\",\"otherData\":{other},\"traceEvents\":["
            )?;
        } else {
            // The left-out counts are known at the end: `otherData` follows the events.
            writeln!(self.w, "{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[")?;
        }
        self.buf = format!(
            "{{\"ph\":\"M\",\"ts\":0,\"pid\":{},\"tid\":{},\"name\":\"process_name\",\"args\":{{\"name\":{}}}}}",
            self.pid,
            self.pid,
            js(&m.program)
        );
        self.event()?;
        for (i, t) in m.threads.iter().enumerate() {
            if !shown(&self.mask, !self.opts.threads.is_empty(), i as u32) {
                continue;
            }
            self.buf = format!(
                "{{\"ph\":\"M\",\"ts\":0,\"pid\":{},\"tid\":{},\"name\":\"thread_name\",\"args\":{{\"name\":{}}}}}",
                self.pid,
                t.tid,
                js(&t.name)
            );
            self.event()?;
        }
        if self.opts.off_cpu {
            self.off_cpu()?;
        }
        Ok(())
    }

    /// Each thread's off-CPU stretches on a track of its own (they may start
    /// in one call and end in another, so they cannot nest in the calls').
    fn off_cpu(&mut self) -> io::Result<()> {
        let (meta, mask, filtered) = (self.meta, self.mask.clone(), !self.opts.threads.is_empty());
        for (t, info) in off_cpu_threads(meta, &mask, filtered) {
            let tid = OFF_CPU_TID | info.tid;
            self.buf = format!(
                "{{\"ph\":\"M\",\"ts\":0,\"pid\":{},\"tid\":{tid},\"name\":\"thread_name\",\"args\":{{\"name\":{}}}}}",
                self.pid,
                js(&format!("{} (off-CPU)", info.name))
            );
            self.event()?;
            for (tid, k) in [(info.tid, 0u64), (tid, 1)] {
                self.buf = format!(
                    "{{\"ph\":\"M\",\"ts\":0,\"pid\":{},\"tid\":{tid},\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{}}}}}",
                    self.pid,
                    t as u64 * 2 + k
                );
                self.event()?;
            }
        }
        for s in off_cpu_slices(meta, &mask, filtered) {
            if !self.filter.admit_off_cpu(s.start_ns, s.end_ns) {
                continue;
            }
            let tid = meta.threads[s.thread as usize].tid;
            self.buf = format!(
                "{{\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{},\"tid\":{},\"cat\":\"off-cpu\",\"name\":\"{}\",\"args\":{{\"thread\":{tid}}}}}",
                us(s.start_ns),
                us(s.dur_ns()),
                self.pid,
                OFF_CPU_TID | tid,
                s.kind.name(),
            );
            self.event()?;
            self.stats.off_cpu += 1;
        }
        Ok(())
    }

    fn flush_call(&mut self, t: u32, values: Option<&CallValues>) -> io::Result<()> {
        let Some((c, poll_id, counters)) = self.pending.get_mut(t as usize).and_then(Option::take)
        else {
            return Ok(());
        };
        let counters = counters.as_ref();
        let m = self.meta;
        let (name, module, file) = site_head(m, c.site);
        let mut args = format!(
            "\"file\":{},\"module\":{},\"depth\":{},\"unwound\":{}",
            js(&file),
            js(module),
            c.depth,
            c.unwound()
        );
        if c.is_poll() {
            args.push_str(",\"poll\":true");
        }
        if poll_id != 0 {
            args.push_str(&format!(",\"poll_id\":{poll_id}"));
        }
        if let Some(cs) = counters {
            for (i, v) in cs.values.iter().enumerate() {
                let key = m
                    .counters
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("counter{i}"));
                args.push_str(&format!(",{}:{v}", js(&key)));
            }
        }
        value_args(&mut args, m, c.site, values, |name| {
            matches!(
                name,
                "file" | "module" | "depth" | "unwound" | "poll" | "poll_id"
            ) || m.counters.iter().any(|k| k == name)
        });
        self.buf = format!(
            "{{\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{},\"tid\":{},\"cat\":\"call\",\"name\":{},\"args\":{{{args}}}}}",
            us(c.start_ns),
            us(c.dur_ns),
            self.pid,
            self.tid(t),
            js(name)
        );
        self.stats.calls += 1;
        self.event()
    }

    /// Writes the instant marker held until its values could follow: an
    /// instant event on its thread (`"ph":"i","s":"t"`), category `event`.
    fn flush_marker(&mut self, values: Option<&CallValues>) -> io::Result<()> {
        let Some(mk) = self.pending_marker.take() else {
            return Ok(());
        };
        let m = self.meta;
        let (name, module, file) = site_head(m, mk.site);
        let mut args = format!(
            "\"file\":{},\"module\":{},\"depth\":{}",
            js(&file),
            js(module),
            mk.depth
        );
        value_args(&mut args, m, mk.site, values, |name| {
            matches!(name, "file" | "module" | "depth")
        });
        self.buf = format!(
            "{{\"ph\":\"i\",\"s\":\"t\",\"ts\":{},\"pid\":{},\"tid\":{},\"cat\":\"event\",\"name\":{},\"args\":{{{args}}}}}",
            us(mk.ts_ns),
            self.pid,
            self.tid(mk.thread),
            js(name)
        );
        self.stats.markers += 1;
        self.event()
    }

    /// A wake of a future: an instant event on the waking thread
    /// (`"ph":"i","s":"t"`), category `wake`, named `wake: fn`, with the
    /// future's id.
    fn wake(&mut self, w: &fgtrace_trace::Wake) -> io::Result<()> {
        let (name, _, _) = site_head(self.meta, w.site);
        self.buf = format!(
            "{{\"ph\":\"i\",\"s\":\"t\",\"ts\":{},\"pid\":{},\"tid\":{},\"cat\":\"wake\",\"name\":{},\"args\":{{\"future\":\"{:#x}\",\"depth\":{}}}}}",
            us(w.ts_ns),
            self.pid,
            self.tid(w.thread),
            js(&format!("wake: {name}")),
            w.id,
            w.depth
        );
        self.stats.wakes += 1;
        self.event()
    }

    /// Writes the future held until its values and its id (which follow it) were seen.
    fn flush_future(&mut self, id: Option<u64>) -> io::Result<()> {
        let values = self.pending_future_values.take();
        match self.pending_future.take() {
            Some(f) => self.future(&f, values.as_ref(), id),
            None => Ok(()),
        }
    }

    fn future(
        &mut self,
        f: &FutureSpan,
        values: Option<&CallValues>,
        future_id: Option<u64>,
    ) -> io::Result<()> {
        let lanes = self.lanes.entry(f.site).or_default();
        let end = f.start_ns.saturating_add(f.dur_ns);
        let lane = match lanes.iter().position(|&e| e <= f.start_ns) {
            Some(l) => {
                lanes[l] = end;
                l
            }
            None => {
                lanes.push(end);
                lanes.len() - 1
            }
        };
        let name = js(self.meta.site_name(f.site));
        let id = js(&format!("future-{}-{lane}", f.site));
        let tid = self.tid(f.thread);
        let mut vals = String::new();
        if let (Some(vs), Some(site)) = (values, self.meta.sites.get(f.site as usize)) {
            for (n, v) in vs.named(site, &self.meta.strings) {
                let key = if matches!(n, "polls" | "cancelled") {
                    format!("value.{n}")
                } else {
                    n.to_string()
                };
                vals.push_str(&format!(",{}:{}", js(&key), value_json(&v)));
            }
        }
        self.buf = format!(
            "{{\"ph\":\"b\",\"ts\":{},\"pid\":{},\"tid\":{tid},\"cat\":\"future\",\"id\":{id},\"name\":{name},\"args\":{{\"polls\":{},\"cancelled\":{}{vals}}}}}",
            us(f.start_ns),
            self.pid,
            f.polls,
            f.cancelled
        );
        self.event()?;
        for p in self.polls.future_of(f, future_id) {
            let (c, poll_id) = (p.call, p.id);
            let ptid = self.tid(c.thread);
            self.buf = format!(
                "{{\"ph\":\"b\",\"ts\":{},\"pid\":{},\"tid\":{tid},\"cat\":\"future\",\"id\":{id},\"name\":\"poll\",\"args\":{{\"tid\":{ptid},\"poll_id\":{poll_id}}}}}",
                us(c.start_ns),
                self.pid,
            );
            self.event()?;
            self.buf = format!(
                "{{\"ph\":\"e\",\"ts\":{},\"pid\":{},\"tid\":{tid},\"cat\":\"future\",\"id\":{id},\"name\":\"poll\"}}",
                us(c.end_ns()),
                self.pid,
            );
            self.event()?;
            self.stats.lane_polls += 1;
        }
        self.buf = format!(
            "{{\"ph\":\"e\",\"ts\":{},\"pid\":{},\"tid\":{tid},\"cat\":\"future\",\"id\":{id},\"name\":{name}}}",
            us(end),
            self.pid
        );
        self.stats.futures += 1;
        self.event()
    }

    fn sample(&mut self, s: &Sample) -> io::Result<()> {
        let mut names: Vec<&str> = Vec::new();
        for (i, &a) in s.frames.iter().enumerate() {
            let key = (a, i > 0);
            if !self.names.contains_key(&key) {
                let mut r = self.resolver.frames(a, i > 0);
                if r.is_empty() {
                    r.push(format!("{a:#x}"));
                }
                self.names.insert(key, r);
            }
        }
        for (i, &a) in s.frames.iter().enumerate() {
            names.extend(self.names[&(a, i > 0)].iter().map(String::as_str));
        }
        let leaf = names.first().copied().unwrap_or("[no frames]");
        let mut stack = String::from("[");
        for (i, n) in names.iter().rev().enumerate() {
            if i > 0 {
                stack.push(',');
            }
            stack.push_str(&js(n));
        }
        stack.push(']');
        self.buf = format!(
            "{{\"ph\":\"i\",\"s\":\"t\",\"ts\":{},\"pid\":{},\"tid\":{},\"cat\":\"sample\",\"name\":{},\"args\":{{\"shadow_depth\":{},\"stack\":{stack}}}}}",
            us(s.ts_ns),
            self.pid,
            self.tid(s.thread),
            js(leaf),
            s.shadow_depth
        );
        self.stats.samples += 1;
        self.event()
    }

    fn lost(&mut self, l: &Lost) -> io::Result<()> {
        let kind = match l.kind {
            LossKind::Dropped => "dropped",
            LossKind::Overwritten => "overwritten",
        };
        self.buf = format!(
            "{{\"ph\":\"i\",\"s\":\"t\",\"ts\":{},\"pid\":{},\"tid\":{},\"cat\":\"lost\",\"name\":\"LOST {} records\",\"args\":{{\"kind\":\"{kind}\",\"depth\":{}}}}}",
            us(l.at_ns),
            self.pid,
            self.tid(l.thread),
            l.count,
            l.depth
        );
        self.stats.losses += 1;
        self.event()
    }

    fn finish(&mut self) -> io::Result<()> {
        self.flush_future(None)?;
        self.flush_marker(None)?;
        for t in 0..self.pending.len() {
            self.flush_call(t as u32, None)?;
        }
        if self.filter.window().is_all() {
            self.w.write_all(b"\n]}\n")?;
        } else {
            let other = self.other_data();
            writeln!(self.w, "\n],\"otherData\":{other}}}")?;
        }
        self.w.flush()
    }
}

impl<W: Write, R: Resolve> Consume for Writer<'_, W, R> {
    type Error = io::Error;

    fn push(&mut self, ev: &Event) -> io::Result<()> {
        let t = ev.thread();
        if !shown(&self.mask, !self.opts.threads.is_empty(), t) || !self.filter.admit(ev) {
            return Ok(());
        }
        match ev {
            Event::Counters(c) => {
                // Held with its call: values may follow.
                if let Some(Some(p)) = self.pending.get_mut(t as usize) {
                    p.2 = Some(c.clone());
                }
                return Ok(());
            }
            Event::Values(v) if self.pending_future.is_some_and(|f| f.thread == v.thread) => {
                // Held: the future's id follows its values.
                self.pending_future_values = Some(v.clone());
                return Ok(());
            }
            Event::FutureId(x) => {
                if self.pending_future.is_some_and(|f| f.thread == x.thread) {
                    return self.flush_future(Some(x.id));
                }
                self.polls.name_last(x);
                return Ok(());
            }
            Event::Values(v) if self.pending_marker.is_some_and(|m| m.thread == v.thread) => {
                return self.flush_marker(Some(v));
            }
            Event::Values(v) => return self.flush_call(t, Some(v)),
            _ => {}
        }
        self.flush_future(None)?;
        self.flush_marker(None)?;
        self.flush_call(t, None)?;
        match ev {
            Event::Call(c) => {
                let i = t as usize;
                if self.pending.len() <= i {
                    self.pending.resize(i + 1, None);
                }
                let id = if c.is_poll() && self.opts.futures {
                    self.polls.poll(c)
                } else {
                    0
                };
                self.pending[i] = Some((*c, id, None));
                Ok(())
            }
            Event::Future(f) if self.opts.futures => {
                // Held: its values (an async fn's) may follow.
                self.pending_future = Some(*f);
                Ok(())
            }
            Event::Marker(m) => {
                self.pending_marker = Some(*m);
                Ok(())
            }
            Event::Wake(w) => self.wake(w),
            Event::Sample(s) if self.opts.samples => self.sample(s),
            Event::Lost(l) => self.lost(l),
            _ => Ok(()),
        }
    }
}

/// Streams `events` into `out` as a Chrome Trace Event JSON object. On a read
/// error, everything before it is written as a complete, valid file, then the
/// error is returned.
///
/// ```
/// use fgtrace::view::chrome::{write_chrome, ChromeOptions};
/// use fgtrace::view::{ok_events, HexResolve};
///
/// #[fgtrace::traced]
/// fn outer() -> u32 { inner() + inner() }
/// #[fgtrace::traced]
/// fn inner() -> u32 { 1 }
///
/// let session = fgtrace::Session::start(fgtrace::Config::builtin())?;
/// outer();
/// let trace = session.stop()?;
///
/// // For chrome://tracing, ui.perfetto.dev or speedscope.
/// let mut out = Vec::new();
/// let stats = write_chrome(&trace.meta, ok_events(trace.events()), HexResolve, &ChromeOptions::default(), &mut out)?;
/// assert_eq!(stats.calls, 3);
/// let json = String::from_utf8(out)?;
/// assert!(json.starts_with('{') && json.contains(r#""ph":"X""#), "{json}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_chrome<W: Write, R: Resolve>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    resolver: R,
    opts: &ChromeOptions,
    out: W,
) -> Result<ChromeStats, TraceError> {
    let mut w = Writer {
        meta,
        opts,
        w: io::BufWriter::with_capacity(1 << 16, out),
        resolver,
        mask: thread_mask(meta, &opts.threads),
        first: true,
        pid: meta.pid,
        pending: Vec::new(),
        pending_future: None,
        pending_future_values: None,
        pending_marker: None,
        polls: PollMatcher::new(),
        lanes: HashMap::new(),
        names: HashMap::new(),
        stats: ChromeStats::default(),
        buf: String::new(),
        filter: WindowFilter::new(opts.window),
    };
    w.header()?;
    let failed = feed(&mut w, events)?;
    w.finish()?;
    w.stats.left_out = w.filter.left_out.clone();
    failed.map_or(Ok(w.stats), Err)
}

/// A site's name, module and `file:line` (`[unknown site]` for an index
/// the metadata does not have).
fn site_head(m: &TraceMeta, site: u32) -> (&str, &str, String) {
    match m.sites.get(site as usize) {
        Some(s) => (
            s.name.as_str(),
            s.module_path.as_str(),
            format!("{}:{}", s.file, s.line),
        ),
        None => ("[unknown site]", "", String::new()),
    }
}

/// Appends a call's or a marker's values to its args, each under its name,
/// or `value.NAME` where `taken` says the event's own args use that name.
fn value_args(
    args: &mut String,
    m: &TraceMeta,
    site: u32,
    values: Option<&CallValues>,
    taken: impl Fn(&str) -> bool,
) {
    let (Some(vs), Some(info)) = (values, m.sites.get(site as usize)) else {
        return;
    };
    for (name, v) in vs.named(info, &m.strings) {
        let key = if taken(name) {
            format!("value.{name}")
        } else {
            name.to_string()
        };
        args.push_str(&format!(",{}:{}", js(&key), value_json(&v)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_keep_every_nanosecond() {
        assert_eq!(us(0), "0.000");
        assert_eq!(us(999), "0.999");
        assert_eq!(us(1_234_567), "1234.567");
        assert_eq!(us(5_000), "5.000");
        assert_eq!(us(u64::MAX), "18446744073709551.615");
    }
}

#[cfg(all(test, feature = "json"))]
mod window_tests {
    use super::*;
    use crate::consume::ok_events;
    use crate::resolve::HexResolve;
    use crate::test_traces::{call, meta};
    use fgtrace_trace::CallCounters;
    use serde_json::Value;

    fn export(opts: &ChromeOptions, events: Vec<Event>) -> (ChromeStats, String) {
        let m = meta(&["run", "query"], &[(900, "main"), (902, "worker")]);
        let mut out = Vec::new();
        let stats = write_chrome(&m, ok_events(events), HexResolve, opts, &mut out).unwrap();
        (stats, String::from_utf8(out).unwrap())
    }

    fn events() -> Vec<Event> {
        vec![
            call(0, 0, 0, 0, 50_000), // around the window
            Event::Counters(CallCounters {
                thread: 0,
                values: vec![7],
            }),
            call(0, 1, 1, 1_000, 2_000), // before it
            Event::Counters(CallCounters {
                thread: 0,
                values: vec![8],
            }),
            call(0, 1, 1, 10_000, 20_000), // inside
            call(0, 1, 2, 10_000, 100),    // inside, too short
            call(1, 1, 0, 39_000, 30_000), // overlaps the end
            call(1, 1, 0, 40_000, 30_000), // starts at the end
        ]
    }

    #[test]
    fn a_window_writes_what_it_keeps_and_counts_the_rest_in_other_data() {
        let opts = ChromeOptions {
            window: Window {
                from_ns: Some(5_000),
                to_ns: Some(40_000),
                min_dur_ns: 1_000,
            },
            ..ChromeOptions::default()
        };
        let (stats, text) = export(&opts, events());
        assert_eq!(stats.calls, 3);
        let v: Value = serde_json::from_str(&text).unwrap();
        let calls: Vec<(&str, &Value)> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| (e["ts"].as_str().unwrap_or(""), &e["args"]))
            .collect();
        assert_eq!(calls.len(), 3, "{text}");
        // The kept call's counters stay with it; the left-out call's go with it.
        let first = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["ph"] == "X" && e["name"] == "run")
            .unwrap();
        assert_eq!(first["args"]["counter0"], 7);
        assert!(!text.contains("\"counter0\":8"), "{text}");
        let left = &v["otherData"]["left_out"];
        assert_eq!(left["calls"], 3);
        assert_eq!(left["text"], "3 calls left out");
        assert_eq!(v["otherData"]["window"]["from_ns"], 5_000);
        assert_eq!(v["otherData"]["window"]["to_ns"], 40_000);
        assert_eq!(v["otherData"]["window"]["min_duration_ns"], 1_000);
        assert_eq!(v["otherData"]["program"], "app");
    }

    #[test]
    fn without_a_window_the_file_has_no_window_and_other_data_comes_first() {
        let (stats, text) = export(&ChromeOptions::default(), events());
        assert_eq!(stats.calls, 6);
        assert!(
            text.starts_with("{\"displayTimeUnit\":\"ns\",\"otherData\":{"),
            "{text}"
        );
        assert!(text.ends_with("\n]}\n"));
        assert!(!text.contains("left_out"));
    }
}
