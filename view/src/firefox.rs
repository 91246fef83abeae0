//! The Firefox Profiler's processed profile format (profiler.firefox.com),
//! written through `fxprof-processed-profile` (samply's crate), gzipped.
//!
//! - one process, one profiler thread per traced thread (tid, name; the
//!   thread whose tid is the pid is selected when the profile opens);
//! - samples: on their thread, with symbolized stacks (root first, inlined
//!   frames included) as label frames, so the call tree, the flame graph and
//!   the stack chart work without symbol files;
//! - every traced call: an interval marker named after the function on its
//!   thread (category `Call`, fields: module, file, depth, duration), so the
//!   marker chart shows the call graph in time and the marker table lists
//!   every call; losses are instant markers `LOST N records`; instant
//!   markers (`tracing` events) are instant markers named after their site,
//!   kind `event`, with their values; a future's wake is an instant
//!   marker `wake: fn` on the waking thread, kind `wake`, with the future's
//!   id;
//! - async lanes: a thread `async futures` holds every future as an interval
//!   marker named `fn #n`, and its polls (matched by [`lanes`](super::lanes))
//!   as markers of the same name with the polling thread's tid: the marker
//!   chart gives each name a row, so each future has a lane of its own.
//!
//! - off-CPU time (when the trace has it, unless `off_cpu` is off): each
//!   stretch a thread spent switched out is an interval marker on it named
//!   `blocked` (it waited: sleep, lock, I/O) or `preempted` (runnable, but
//!   another task ran), category `Off-CPU`, as the Chrome and Perfetto
//!   exports name their slices ([`off_cpu_slices`]); they show in the
//!   thread's track too. A thread without off-CPU time in a trace that
//!   recorded it gets an instant marker `off-CPU unavailable` saying why.
//!
//! - a time window and a minimum duration (`window`, see
//!   [`window`](super::window)): only what it keeps goes in, and the
//!   profile's `meta.product` (the name the profiler shows at the top) says
//!   what the window was and what it left out.
//!
//! The crate builds the whole profile in memory before writing it (the
//! format's tables are columnar), so this view costs memory per call,
//! unlike the streaming Chrome and Perfetto exports.

use super::lanes::PollMatcher;
use super::offcpu::{off_cpu_slices, OffSlice};
use crate::consume::{feed, Consume};
use crate::resolve::Resolve;
use crate::threads::{shown, thread_mask, ThreadSel};
use crate::window::{LeftOut, Window, WindowFilter};
use fgtrace_trace::{
    Call, CallValues, Event, FutureSpan, LossKind, Lost, Marker, OffKind, Sample, TraceError,
    TraceMeta,
};
use fxprof_processed_profile::{
    CategoryColor, CategoryHandle, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo,
    MarkerFieldFlags, MarkerFieldFormat, MarkerLocations, MarkerTiming, ProcessHandle, Profile,
    ReferenceTimestamp, SamplingInterval, StaticSchemaMarker, StaticSchemaMarkerField,
    StringHandle, ThreadHandle, Timestamp,
};
use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{self, Write};
use std::time::Duration;

/// What to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirefoxOptions {
    /// Only these threads (empty: all).
    pub threads: Vec<ThreadSel>,
    /// Gzip the JSON (what the profiler's "load from file" expects as `.json.gz`; it reads plain JSON too).
    pub gzip: bool,
    /// Off-CPU stretches as markers (where the trace has them).
    pub off_cpu: bool,
    /// Only what this time window and minimum duration keep (default: everything).
    pub window: Window,
}

impl Default for FirefoxOptions {
    fn default() -> Self {
        FirefoxOptions {
            threads: Vec::new(),
            gzip: true,
            off_cpu: true,
            window: Window::default(),
        }
    }
}

/// What was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FirefoxStats {
    /// Threads written (those selected that have anything).
    pub threads: u64,
    /// Samples written.
    pub samples: u64,
    /// Call markers.
    pub calls: u64,
    /// Future markers, one per `async fn` future.
    pub futures: u64,
    /// Poll markers on the futures' lanes.
    pub lane_polls: u64,
    /// Markers for lost records.
    pub losses: u64,
    /// Off-CPU markers.
    pub off_cpu: u64,
    /// Instant markers (`tracing` events).
    pub markers: u64,
    /// Wakes of futures, instant markers `wake: fn` on the waking threads.
    pub wakes: u64,
    /// What the window left out.
    pub left_out: LeftOut,
}

/// A marker type's `name` and `category`: its fields of those names.
macro_rules! name_and_category {
    () => {
        fn name(&self, _profile: &mut Profile) -> StringHandle {
            self.name
        }
        fn category(&self, _profile: &mut Profile) -> CategoryHandle {
            self.category
        }
    };
}

/// A marker's duration in microseconds (the profiler shows its own, in ms).
const DUR_FIELD: StaticSchemaMarkerField = StaticSchemaMarkerField {
    key: "dur",
    label: "Duration (us)",
    format: MarkerFieldFormat::Decimal,
    flags: MarkerFieldFlags::empty(),
};

/// The OS thread id a marker belongs to.
const TID_FIELD: StaticSchemaMarkerField = StaticSchemaMarkerField {
    key: "tid",
    label: "Thread",
    format: MarkerFieldFormat::Integer,
    flags: MarkerFieldFlags::empty(),
};

/// A traced call (or a future, or a poll on a future's lane).
struct CallMarker {
    name: StringHandle,
    category: CategoryHandle,
    module: StringHandle,
    file: StringHandle,
    kind: StringHandle,
    depth: f64,
    dur_us: f64,
    tid: f64,
    /// Its recorded values, `len=83, ret=Ok(3)` (empty without).
    values: StringHandle,
}

impl StaticSchemaMarker for CallMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "fgtraceCall";
    const DESCRIPTION: Option<&'static str> =
        Some("A call traced by fgtrace (exact entry and exit)");
    const CHART_LABEL: Option<&'static str> = Some("{marker.name}");
    const TOOLTIP_LABEL: Option<&'static str> = Some("{marker.name} ({marker.data.kind})");
    const TABLE_LABEL: Option<&'static str> = Some("{marker.name} {marker.data.file}");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[
        StaticSchemaMarkerField {
            key: "kind",
            label: "Kind",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
        StaticSchemaMarkerField {
            key: "module",
            label: "Module",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
        StaticSchemaMarkerField {
            key: "file",
            label: "Source",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
        StaticSchemaMarkerField {
            key: "depth",
            label: "Depth",
            format: MarkerFieldFormat::Integer,
            flags: MarkerFieldFlags::empty(),
        },
        DUR_FIELD,
        TID_FIELD,
        StaticSchemaMarkerField {
            key: "values",
            label: "Values",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
    ];

    name_and_category!();
    fn string_field_value(&self, field_index: u32) -> StringHandle {
        match field_index {
            0 => self.kind,
            1 => self.module,
            6 => self.values,
            _ => self.file,
        }
    }
    fn number_field_value(&self, field_index: u32) -> f64 {
        match field_index {
            3 => self.depth,
            4 => self.dur_us,
            _ => self.tid,
        }
    }
}

/// A stretch a thread spent off the CPU (or, as an instant marker, why a
/// thread has none).
struct OffCpuMarker {
    name: StringHandle,
    category: CategoryHandle,
    why: StringHandle,
    dur_us: f64,
    tid: f64,
}

impl StaticSchemaMarker for OffCpuMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "fgtraceOffCpu";
    const DESCRIPTION: Option<&'static str> = Some(
        "The thread was switched out (fgtrace off-CPU time, from the kernel's context switches)",
    );
    const LOCATIONS: MarkerLocations = MarkerLocations::MARKER_CHART
        .union(MarkerLocations::MARKER_TABLE)
        .union(MarkerLocations::TIMELINE_OVERVIEW);
    const CHART_LABEL: Option<&'static str> = Some("{marker.name}");
    const TOOLTIP_LABEL: Option<&'static str> = Some("{marker.name}: {marker.data.why}");
    const TABLE_LABEL: Option<&'static str> = Some("{marker.name}: {marker.data.why}");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[
        StaticSchemaMarkerField {
            key: "why",
            label: "Why",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
        DUR_FIELD,
        TID_FIELD,
    ];

    name_and_category!();
    fn string_field_value(&self, _field_index: u32) -> StringHandle {
        self.why
    }
    fn number_field_value(&self, field_index: u32) -> f64 {
        match field_index {
            1 => self.dur_us,
            _ => self.tid,
        }
    }
}

/// `cpu-clock@999Hz` -> the interval between samples; 1 ms when unknown.
fn interval(sampling: Option<&str>) -> SamplingInterval {
    sampling
        .and_then(|s| s.rsplit('@').next())
        .and_then(|s| s.strip_suffix("Hz"))
        .and_then(|hz| hz.parse::<f32>().ok())
        .filter(|&hz| hz > 0.0)
        .map_or(SamplingInterval::from_millis(1), SamplingInterval::from_hz)
}

fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos_since_reference(ns)
}

struct Builder<'a, R: Resolve> {
    meta: &'a TraceMeta,
    mask: Vec<bool>,
    filtered: bool,
    resolver: R,
    profile: Profile,
    process: ProcessHandle,
    threads: Vec<Option<ThreadHandle>>,
    async_thread: Option<ThreadHandle>,
    lanes: PollMatcher,
    names: HashMap<(u64, bool), Vec<String>>,
    sample_cat: CategoryPairHandle,
    call_cat: CategoryHandle,
    future_cat: CategoryHandle,
    lost_cat: CategoryHandle,
    last_sample: Vec<u64>,
    stats: FirefoxStats,
    filter: WindowFilter,
    /// The last call, held until its values (which follow it) are seen.
    pending: Option<(Call, &'static str)>,
    /// The last future, held the same way (an async fn's values follow
    /// it), with its values and then its id, which follows them.
    pending_future: Option<FutureSpan>,
    pending_future_values: Option<CallValues>,
    /// An instant marker held until its values could follow.
    pending_marker: Option<Marker>,
}

impl<R: Resolve> Builder<'_, R> {
    fn thread(&mut self, t: u32) -> ThreadHandle {
        let i = t as usize;
        if self.threads.len() <= i {
            self.threads.resize(i + 1, None);
        }
        if let Some(h) = self.threads[i] {
            return h;
        }
        let (tid, name) = match self.meta.threads.get(i) {
            Some(ti) => (ti.tid, ti.name.clone()),
            None => (t, format!("thread-{t}")),
        };
        // Not flagged as the process's main thread: the format would show
        // the process name instead of the thread's. Selected first instead.
        let h = self.profile.add_thread(self.process, tid, ts(0), false);
        self.profile.set_thread_name(h, &name);
        self.profile.add_initial_visible_thread(h);
        if tid == self.meta.pid {
            self.profile.add_initial_selected_thread(h);
        }
        self.threads[i] = Some(h);
        self.stats.threads += 1;
        h
    }

    fn call_marker(&mut self, c: &Call, kind: &str) -> CallMarker {
        let (name, module, file) = match self.meta.sites.get(c.site as usize) {
            Some(s) => (
                s.name.clone(),
                s.module_path.clone(),
                format!("{}:{}", s.file, s.line),
            ),
            None => ("[unknown site]".into(), String::new(), String::new()),
        };
        let tid = self
            .meta
            .threads
            .get(c.thread as usize)
            .map_or(c.thread, |i| i.tid);
        CallMarker {
            name: self.profile.intern_string(&name),
            category: self.call_cat,
            module: self.profile.intern_string(&module),
            file: self.profile.intern_string(&file),
            kind: self.profile.intern_string(kind),
            depth: c.depth as f64,
            dur_us: c.dur_ns as f64 / 1000.0,
            tid: tid as f64,
            values: self.profile.intern_string(""),
        }
    }

    /// Adds the marker of the call held until its values could follow.
    fn flush_call(&mut self, values: Option<&CallValues>) {
        self.flush_future(None);
        if let Some(mk) = self.pending_marker.take() {
            let h = self.thread(mk.thread);
            let mut m = self.call_marker(&instant(mk.thread, mk.site, mk.depth, mk.ts_ns), "event");
            if let Some(v) = self.values_string(mk.site, values) {
                m.values = v;
            }
            self.profile
                .add_marker(h, MarkerTiming::Instant(ts(mk.ts_ns)), m);
            self.stats.markers += 1;
        }
        let Some((c, kind)) = self.pending.take() else {
            return;
        };
        let h = self.thread(c.thread);
        let mut m = self.call_marker(&c, kind);
        if let Some(v) = self.values_string(c.site, values) {
            m.values = v;
        }
        self.profile
            .add_marker(h, MarkerTiming::Interval(ts(c.start_ns), ts(c.end_ns())), m);
        self.stats.calls += 1;
    }

    /// A future's wake: an instant marker `wake: fn` where it happened (on
    /// the waking thread, at the depth a call there would have), with the
    /// future's id in its values.
    fn wake(&mut self, w: &fgtrace_trace::Wake) {
        let h = self.thread(w.thread);
        let mut m = self.call_marker(&instant(w.thread, w.site, w.depth, w.ts_ns), "wake");
        let name = self
            .meta
            .sites
            .get(w.site as usize)
            .map_or("[unknown site]", |s| s.name.as_str());
        m.name = self.profile.intern_string(&format!("wake: {name}"));
        m.values = self.profile.intern_string(&format!("future={:#x}", w.id));
        self.profile
            .add_marker(h, MarkerTiming::Instant(ts(w.ts_ns)), m);
        self.stats.wakes += 1;
    }

    /// `len=83, ret=Ok(3)` of a call or future of `site`.
    fn values_string(&mut self, site: u32, values: Option<&CallValues>) -> Option<StringHandle> {
        let (v, info) = (values?, self.meta.sites.get(site as usize)?);
        let text: Vec<String> = v
            .named(info, &self.meta.strings)
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        Some(self.profile.intern_string(&text.join(", ")))
    }

    /// Adds the future held until its values and its id could follow.
    fn flush_future(&mut self, id: Option<u64>) {
        if let Some(f) = self.pending_future.take() {
            let values = self.pending_future_values.take();
            self.future(&f, values.as_ref(), id);
        }
    }

    fn future(&mut self, f: &FutureSpan, values: Option<&CallValues>, id: Option<u64>) {
        let h = match self.async_thread {
            Some(h) => h,
            None => {
                // A tid no real thread has: the profile needs one per thread.
                let tid = self.meta.threads.iter().map(|t| t.tid).max().unwrap_or(0) + 1;
                let h = self.profile.add_thread(self.process, tid, ts(0), false);
                self.profile.set_thread_name(h, "async futures");
                self.profile.add_initial_visible_thread(h);
                self.async_thread = Some(h);
                h
            }
        };
        self.stats.futures += 1;
        let label = format!("{} #{}", self.meta.site_name(f.site), self.stats.futures);
        let end = f.start_ns.saturating_add(f.dur_ns);
        let whole = Call {
            thread: f.thread,
            site: f.site,
            depth: 0,
            start_ns: f.start_ns,
            dur_ns: f.dur_ns,
            flags: 0,
        };
        let kind = if f.cancelled {
            format!("future, {} polls, cancelled", f.polls)
        } else {
            format!("future, {} polls", f.polls)
        };
        let mut m = self.call_marker(&whole, &kind);
        if let Some(v) = self.values_string(f.site, values) {
            m.values = v;
        }
        let name = self.profile.intern_string(&label);
        m.name = name;
        m.category = self.future_cat;
        self.profile
            .add_marker(h, MarkerTiming::Interval(ts(f.start_ns), ts(end)), m);
        for p in self.lanes.future_of(f, id) {
            let mut m = self.call_marker(&p.call, "poll");
            m.name = name;
            m.category = self.future_cat;
            m.depth = 1.0;
            self.profile.add_marker(
                h,
                MarkerTiming::Interval(ts(p.call.start_ns), ts(p.call.end_ns())),
                m,
            );
            self.stats.lane_polls += 1;
        }
    }

    fn sample(&mut self, s: &Sample) {
        let h = self.thread(s.thread);
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
        // Root first: outermost address first, and for one address its
        // caller-most inlined frame first (the resolver lists innermost first).
        let mut labels: Vec<StringHandle> = Vec::new();
        for (i, &a) in s.frames.iter().enumerate().rev() {
            for n in self.names[&(a, i > 0)].iter().rev() {
                labels.push(self.profile.intern_string(n));
            }
        }
        let cat = self.sample_cat;
        let stack = self.profile.intern_stack_frames(
            h,
            labels.into_iter().map(|l| FrameInfo {
                frame: Frame::Label(l),
                category_pair: cat,
                flags: FrameFlags::empty(),
            }),
        );
        let i = s.thread as usize;
        if self.last_sample.len() <= i {
            self.last_sample.resize(i + 1, 0);
        }
        let cpu = s.ts_ns.saturating_sub(self.last_sample[i]);
        self.last_sample[i] = s.ts_ns;
        self.profile
            .add_sample(h, ts(s.ts_ns), stack, CpuDelta::from_nanos(cpu), 1);
        self.stats.samples += 1;
    }

    /// Every off-CPU stretch of the shown threads as a marker; a shown
    /// thread without any in a trace that recorded off-CPU time says why.
    fn off_cpu(&mut self, category: CategoryHandle) {
        let Some(o) = &self.meta.off_cpu else {
            return;
        };
        let mask = self.mask.clone();
        let mut why = HashMap::new();
        for s in off_cpu_slices(self.meta, &mask, self.filtered) {
            if !self.filter.admit_off_cpu(s.start_ns, s.end_ns) {
                continue;
            }
            let OffSlice { thread, kind, .. } = s;
            let h = self.thread(thread);
            let name = self.profile.intern_string(kind.name());
            let text = *why.entry(kind).or_insert_with(|| {
                self.profile.intern_string(match kind {
                    OffKind::Blocked => "switched out voluntarily (sleep, lock, I/O)",
                    OffKind::Preempted => "switched out while runnable (another task ran)",
                })
            });
            let m = OffCpuMarker {
                name,
                category,
                why: text,
                dur_us: s.dur_ns() as f64 / 1000.0,
                tid: self.meta.threads[thread as usize].tid as f64,
            };
            self.profile
                .add_marker(h, MarkerTiming::Interval(ts(s.start_ns), ts(s.end_ns)), m);
            self.stats.off_cpu += 1;
        }
        for t in 0..self.meta.threads.len() as u32 {
            if !shown(&mask, self.filtered, t) || o.thread(t).is_some() {
                continue;
            }
            let h = self.thread(t);
            let name = self.profile.intern_string("off-CPU unavailable");
            let why = self.profile.intern_string(o.reason());
            let m = OffCpuMarker {
                name,
                category,
                why,
                dur_us: 0.0,
                tid: self.meta.threads[t as usize].tid as f64,
            };
            self.profile.add_marker(h, MarkerTiming::Instant(ts(0)), m);
        }
    }

    fn lost(&mut self, l: &Lost) {
        let h = self.thread(l.thread);
        let kind = match l.kind {
            LossKind::Dropped => "lost (dropped)",
            LossKind::Overwritten => "lost (overwritten)",
        };
        let tid = self
            .meta
            .threads
            .get(l.thread as usize)
            .map_or(l.thread, |i| i.tid);
        let name = self
            .profile
            .intern_string(&format!("LOST {} records", l.count));
        let empty = self.profile.intern_string("");
        let kind = self.profile.intern_string(kind);
        self.profile.add_marker(
            h,
            MarkerTiming::Instant(ts(l.at_ns)),
            CallMarker {
                name,
                category: self.lost_cat,
                module: empty,
                file: empty,
                kind,
                depth: l.depth as f64,
                dur_us: 0.0,
                tid: tid as f64,
                values: empty,
            },
        );
        self.stats.losses += 1;
    }
}

impl<R: Resolve> Consume for Builder<'_, R> {
    type Error = Infallible;

    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        let t = ev.thread();
        if !shown(&self.mask, self.filtered, t) || !self.filter.admit(ev) {
            return Ok(());
        }
        match ev {
            Event::FutureId(x) => {
                if self.pending_future.is_some_and(|f| f.thread == x.thread) {
                    self.flush_future(Some(x.id));
                } else {
                    self.lanes.name_last(x);
                }
                return Ok(());
            }
            Event::Values(v) if self.pending_future.is_some_and(|f| f.thread == v.thread) => {
                // Held: the future's id follows its values.
                self.pending_future_values = Some(v.clone());
                return Ok(());
            }
            Event::Values(v)
                if self.pending.is_some_and(|p| p.0.thread == v.thread)
                    || self.pending_marker.is_some_and(|m| m.thread == v.thread) =>
            {
                self.flush_call(Some(v));
                return Ok(());
            }
            Event::Counters(_) => return Ok(()),
            _ => self.flush_call(None),
        }
        match ev {
            Event::Call(c) => {
                let kind = if c.is_poll() {
                    self.lanes.poll(c);
                    "poll"
                } else if c.unwound() {
                    "call (unwound)"
                } else {
                    "call"
                };
                self.pending = Some((*c, kind));
            }
            Event::Future(f) => self.pending_future = Some(*f),
            Event::Marker(m) => self.pending_marker = Some(*m),
            Event::Sample(s) => self.sample(s),
            Event::Lost(l) => self.lost(l),
            Event::Wake(w) => self.wake(w),
            Event::Counters(_) | Event::Values(_) | Event::FutureId(_) | Event::FutureTimes(_) => {}
        }
        Ok(())
    }
}

/// An instant (a `tracing` event, a wake) as a call of no length, for
/// [`Builder::call_marker`].
fn instant(thread: u32, site: u32, depth: u32, ts_ns: u64) -> Call {
    Call {
        thread,
        site,
        depth,
        start_ns: ts_ns,
        dur_ns: 0,
        flags: 0,
    }
}

/// Reads `events` into a Firefox Profiler processed profile and writes it to
/// `out` (gzipped JSON unless `opts.gzip` is off). On a read error,
/// everything before it is written as a complete profile, then the error is
/// returned.
///
/// ```
/// use fgtrace::view::firefox::{write_firefox, FirefoxOptions};
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
/// // For profiler.firefox.com (plain JSON here; gzipped by default).
/// let opts = FirefoxOptions { gzip: false, ..Default::default() };
/// let mut out = Vec::new();
/// let stats = write_firefox(&trace.meta, ok_events(trace.events()), HexResolve, &opts, &mut out)?;
/// assert_eq!((stats.threads, stats.calls), (1, 3));
/// assert!(out.starts_with(b"{"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_firefox<W: Write, R: Resolve>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    resolver: R,
    opts: &FirefoxOptions,
    out: W,
) -> Result<FirefoxStats, TraceError> {
    let reference = ReferenceTimestamp::from_duration_since_unix_epoch(Duration::from_nanos(
        meta.clock.start_unix_ns,
    ));
    let mut profile = Profile::new(
        &format!("fgtrace: {}", meta.program),
        reference,
        interval(meta.sampling.as_deref()),
    );
    let process = profile.add_process(&meta.program, meta.pid, ts(0));
    profile.set_process_end_time(process, ts(meta.duration_ns));
    let sample_cat = profile.add_category("Sampled", CategoryColor::Blue).into();
    let call_cat = profile.add_category("Call", CategoryColor::Yellow);
    let future_cat = profile.add_category("Future", CategoryColor::Purple);
    let lost_cat = profile.add_category("Lost", CategoryColor::Red);
    let off_cpu_cat = opts
        .off_cpu
        .then(|| profile.add_category("Off-CPU", CategoryColor::Gray));
    let mut b = Builder {
        meta,
        mask: thread_mask(meta, &opts.threads),
        filtered: !opts.threads.is_empty(),
        resolver,
        profile,
        process,
        threads: Vec::new(),
        async_thread: None,
        lanes: PollMatcher::new(),
        names: HashMap::new(),
        sample_cat,
        call_cat,
        future_cat,
        lost_cat,
        last_sample: Vec::new(),
        stats: FirefoxStats::default(),
        filter: WindowFilter::new(opts.window),
        pending: None,
        pending_future: None,
        pending_future_values: None,
        pending_marker: None,
    };
    // Every thread of the trace, even one with nothing left after filtering.
    for t in 0..meta.threads.len() as u32 {
        if shown(&b.mask, b.filtered, t) {
            b.thread(t);
        }
    }
    if let Some(cat) = off_cpu_cat {
        b.off_cpu(cat);
    }
    let Ok(failed) = feed(&mut b, events);
    b.flush_call(None);
    let mut stats = b.stats;
    let mut profile = b.profile;
    stats.left_out = b.filter.left_out.clone();
    let window = b.filter.window();
    if !window.is_all() {
        // The format's `meta` has no free-form fields this crate writes; the
        // product name is the one the profiler shows, at the top.
        profile.set_product(&format!(
            "fgtrace: {} (window: {}; {})",
            meta.program,
            window.describe(),
            stats.left_out.describe()
        ));
    }
    let mut w = io::BufWriter::with_capacity(1 << 16, out);
    if opts.gzip {
        // serde_json writes in small pieces; deflate wants large ones.
        let gz = flate2::write::GzEncoder::new(&mut w, flate2::Compression::fast());
        let mut buf = io::BufWriter::with_capacity(1 << 18, gz);
        serde_json::to_writer(&mut buf, &profile).map_err(io::Error::from)?;
        buf.into_inner().map_err(|e| e.into_error())?.finish()?;
    } else {
        serde_json::to_writer(&mut w, &profile).map_err(io::Error::from)?;
    }
    w.flush()?;
    match failed {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_interval_from_the_metadata() {
        assert_eq!(interval(Some("cpu-clock@1000Hz")).nanos(), 1_000_000);
        assert_eq!(interval(Some("cpu-clock@999Hz")).nanos(), 1_001_001);
        assert_eq!(interval(None).nanos(), 1_000_000);
        assert_eq!(interval(Some("weird")).nanos(), 1_000_000);
    }
}

#[cfg(test)]
mod window_tests {
    use super::*;
    use crate::consume::ok_events;
    use crate::resolve::HexResolve;
    use crate::test_traces::{call, meta};

    #[test]
    fn a_window_keeps_its_calls_and_the_product_name_says_what_it_left_out() {
        let m = meta(&["run"], &[(900, "main")]);
        let events = vec![
            call(0, 0, 0, 0, 100),     // before
            call(0, 0, 0, 1_000, 100), // inside
            call(0, 0, 0, 1_500, 10),  // inside, too short
            call(0, 0, 0, 3_000, 100), // after
        ];
        let opts = FirefoxOptions {
            gzip: false,
            window: Window {
                from_ns: Some(500),
                to_ns: Some(2_000),
                min_dur_ns: 50,
            },
            ..FirefoxOptions::default()
        };
        let mut out = Vec::new();
        let stats = write_firefox(&m, ok_events(events), HexResolve, &opts, &mut out).unwrap();
        assert_eq!(stats.calls, 1);
        assert_eq!(stats.left_out.calls, 3);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["meta"]["product"],
            "fgtrace: app (window: from 0.000000500s, to 0.000002000s, at least 0.050us; 3 calls left out)"
        );
        let markers = &v["threads"][0]["markers"];
        assert_eq!(markers["length"], 1, "{markers}");
    }
}

#[cfg(test)]
mod values_tests {
    use super::*;
    use crate::consume::ok_events;
    use crate::resolve::HexResolve;
    use crate::test_traces::{call, meta};
    use fgtrace_core::values::tag;
    use fgtrace_trace::Value;

    #[test]
    fn a_calls_and_a_futures_values_are_a_marker_field() {
        let mut m = meta(&["parse", "fetch"], &[(900, "main")]);
        m.sites[0].values = vec!["len".into(), "ret".into()];
        m.sites[1].values = vec!["depth".into()];
        let vals = |values: Vec<Value>| Event::Values(CallValues { thread: 0, values });
        let events = vec![
            call(0, 0, 0, 0, 100),
            vals(vec![
                Value {
                    slot: 0,
                    tag: tag::UNSIGNED,
                    bits: 83,
                },
                Value {
                    slot: 1,
                    tag: tag::OK,
                    bits: 0,
                },
            ]),
            Event::Future(FutureSpan {
                thread: 0,
                site: 1,
                start_ns: 200,
                dur_ns: 50,
                polls: 1,
                cancelled: false,
            }),
            vals(vec![Value {
                slot: 0,
                tag: tag::SIGNED,
                bits: -2i64 as u64,
            }]),
        ];
        let opts = FirefoxOptions {
            gzip: false,
            ..FirefoxOptions::default()
        };
        let mut out = Vec::new();
        write_firefox(&m, ok_events(events), HexResolve, &opts, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\"len=83, ret=Ok\""), "{text}");
        assert!(text.contains("\"depth=-2\""), "{text}");
    }

    #[test]
    fn an_instant_marker_is_an_instant_event_marker_with_its_values() {
        let mut m = meta(&["handle", "cache_miss"], &[(900, "main")]);
        m.sites[1].values = vec!["key".into()];
        let events = vec![
            call(0, 0, 0, 0, 100),
            Event::Marker(Marker {
                thread: 0,
                site: 1,
                depth: 1,
                ts_ns: 40,
            }),
            Event::Values(CallValues {
                thread: 0,
                values: vec![Value {
                    slot: 0,
                    tag: tag::UNSIGNED,
                    bits: 7,
                }],
            }),
        ];
        let opts = FirefoxOptions {
            gzip: false,
            ..FirefoxOptions::default()
        };
        let mut out = Vec::new();
        let stats = write_firefox(&m, ok_events(events), HexResolve, &opts, &mut out).unwrap();
        assert_eq!((stats.calls, stats.markers), (1, 1));
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\"key=7\""), "{text}");
        assert!(text.contains("\"event\""), "{text}");
    }
}
