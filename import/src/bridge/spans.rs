//! Spans in the minitrace/fastrace model (trace id, span id, parent id, unix
//! begin time, duration, name, properties, events), in a neutral form that
//! both bridges convert to and from at their edges, so the tree logic lives
//! here once.
//!
//! **Export** ([`export_spans`]): every traced call becomes a span whose parent
//! is the enclosing call of the same thread; a depth-0 call starts a new trace
//! (as a request would), or one trace id covers a thread or the whole session
//! ([`TraceIdScope`]). Whole-future spans ([`Event::Future`]) become root spans
//! marked [`keys::KIND`]` = "future"` with their poll count: which calls were
//! their polls is not recorded (polls may run on other threads), so they are
//! not linked into the call tree. A `LOST` gap becomes a span event named
//! `lost` on the enclosing call, or, where no call encloses it, a zero-length
//! span named `[lost]`. Samples are not exported. Events are read in one pass
//! and a span is handed over when its last child has been seen, so memory is
//! bounded by call depth times threads plus one batch.
//!
//! **Import** ([`SpanCollector`], [`spans_to_trace`]): spans carry no thread,
//! so each *root's* tree goes to the thread named by the root's `thread.id`
//! property when it has one (fgtrace's own exports, or spans a program tagged
//! itself), and otherwise to one pseudo-thread per trace id, named by the
//! trace id in hex (unpadded, so the short name columns of views tell
//! small ids apart). Trees are rebuilt from parent ids, children ordered by
//! begin time, times made relative to the earliest span. A span whose parent
//! was not received (still open at flush, dropped, or in another process)
//! becomes a root and is counted in [`ImportSummary::orphans`]. The markers
//! fgtrace's export writes (`lost`, futures, `unwound`, `poll`, `code.*`)
//! are read back, so export then import keeps sites, flags and losses.

use fgtrace_trace::{
    flags, ClockInfo, Event, FutureSpan, LossKind, Lost, SiteInfo, ThreadInfo, Trace, TraceBuilder,
    TraceMeta,
};
use fgtrace_view::consume::{feed, ok_events, Consume};
use parking_lot::Mutex;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;

/// A property: key and value, as both crates store them.
pub type Property = (Cow<'static, str>, Cow<'static, str>);

/// One span, neutral between minitrace's and fastrace's `SpanRecord`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// The trace the span belongs to.
    pub trace_id: u128,
    /// Nonzero.
    pub span_id: u64,
    /// 0 for a root.
    pub parent_id: u64,
    /// Start, in nanoseconds since the Unix epoch.
    pub begin_unix_ns: u64,
    /// Length in nanoseconds.
    pub duration_ns: u64,
    /// The span's name (a traced call's function name).
    pub name: Cow<'static, str>,
    /// Key-value properties (see [`keys`] for those fgtrace writes).
    pub properties: Vec<Property>,
    /// Point events inside the span.
    pub events: Vec<SpanEvent>,
}

/// A point event inside a span (`EventRecord` in both crates).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanEvent {
    /// The event's name.
    pub name: Cow<'static, str>,
    /// When it happened, in nanoseconds since the Unix epoch.
    pub timestamp_unix_ns: u64,
    /// Key-value properties.
    pub properties: Vec<Property>,
}

impl Span {
    /// The value of the first property named `key`.
    pub fn property(&self, key: &str) -> Option<&str> {
        find(&self.properties, key)
    }
}

fn find<'a>(props: &'a [Property], key: &str) -> Option<&'a str> {
    props
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_ref())
}

/// Property keys fgtrace writes and reads. Thread and code keys follow the
/// OpenTelemetry semantic conventions, so Jaeger and OTLP backends show them
/// in their usual places.
pub mod keys {
    /// The OS thread id the call ran on.
    pub const THREAD_ID: &str = "thread.id";
    /// The thread's name.
    pub const THREAD_NAME: &str = "thread.name";
    /// The function's module path.
    pub const CODE_NAMESPACE: &str = "code.namespace";
    /// The function's source file.
    pub const CODE_FILEPATH: &str = "code.filepath";
    /// The function's line in its source file.
    pub const CODE_LINENO: &str = "code.lineno";
    /// `"true"` when a panic unwound through the call.
    pub const UNWOUND: &str = "unwound";
    /// `"true"` when the call is one poll of an `async fn`'s future.
    pub const POLL: &str = "poll";
    /// Polls of a whole-future span.
    pub const POLLS: &str = "polls";
    /// `"true"` when the future was dropped before completion.
    pub const CANCELLED: &str = "cancelled";
    /// `"future"` or `"lost"`: spans that are not calls.
    pub const KIND: &str = "fgtrace.kind";
    /// Number of records lost (on `lost` events and `[lost]` spans).
    pub const LOST: &str = "lost";
    /// `"dropped"` or `"overwritten"`.
    pub const LOST_KIND: &str = "lost.kind";
    /// Prefix of per-call counter properties (`counter.instructions`).
    pub const COUNTER_PREFIX: &str = "counter.";
    /// Name of the span event (and, with brackets, the span) of a loss.
    pub const LOST_EVENT: &str = "lost";
    /// Name of the span that stands for a loss.
    pub const LOST_SPAN: &str = "[lost]";
}

/// What one trace id covers on export.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TraceIdScope {
    /// Each depth-0 call (and each future, and each root-level loss) is its
    /// own trace, as a request would be: backends list and sample them apart.
    #[default]
    Root,
    /// One trace per thread.
    Thread,
    /// One trace for the whole session.
    Session,
}

/// How [`export_spans`] names and batches spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportOptions {
    /// Which calls share a trace id.
    pub trace_ids: TraceIdScope,
    /// First trace id; later ones count up from it. `None`: derived from the
    /// session's pid and start time, so exporting the same trace twice gives
    /// the same ids (backends deduplicate) and different sessions differ.
    pub first_trace_id: Option<u128>,
    /// Spans per `Reporter::report` call (at least 1).
    pub batch: usize,
    /// Thread, code location and counter properties (flags and markers are always written).
    pub properties: bool,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            trace_ids: TraceIdScope::Root,
            first_trace_id: None,
            batch: 4096,
            properties: true,
        }
    }
}

/// What an export handed over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportSummary {
    /// Spans handed to the reporter.
    pub spans: u64,
    /// Distinct trace ids used.
    pub traces: u64,
    /// `report` calls.
    pub batches: u64,
    /// Losses written (as span events or `[lost]` spans).
    pub losses: u64,
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Hands out nonzero ids counting up from a seed.
struct Ids {
    next_trace: u128,
    span_base: u64,
    span_seq: u64,
    traces: u64,
}

impl Ids {
    fn new(meta: &TraceMeta, first: Option<u128>) -> Self {
        let seed = first.unwrap_or_else(|| {
            let a = splitmix64(meta.clock.start_unix_ns ^ ((meta.pid as u64) << 32));
            let b = splitmix64(a ^ meta.clock.start_mono_ns);
            ((a as u128) << 64) | b as u128
        });
        Ids {
            next_trace: seed,
            span_base: splitmix64(seed as u64 ^ (seed >> 64) as u64),
            span_seq: 0,
            traces: 0,
        }
    }

    fn trace(&mut self) -> u128 {
        if self.next_trace == 0 {
            self.next_trace = 1;
        }
        let id = self.next_trace;
        self.next_trace = self.next_trace.wrapping_add(1);
        self.traces += 1;
        id
    }

    /// Unique within one export for fewer than 2^64 spans.
    fn span(&mut self) -> u64 {
        loop {
            self.span_seq = self.span_seq.wrapping_add(1);
            let id = self.span_base.wrapping_add(self.span_seq);
            if id != 0 {
                return id;
            }
        }
    }
}

/// A call whose span waits for its children (for `lost` events and counters).
struct Open {
    depth: u32,
    span: Span,
}

#[derive(Default)]
struct ThreadState {
    stack: Vec<Open>,
    /// The thread's trace id under [`TraceIdScope::Thread`].
    trace_id: Option<u128>,
}

struct Exporter<'a, R, C, F> {
    meta: &'a TraceMeta,
    opts: &'a ExportOptions,
    ids: Ids,
    session_trace: Option<u128>,
    threads: Vec<ThreadState>,
    thread_props: Vec<Option<Vec<Property>>>,
    site_props: Vec<Option<Vec<Property>>>,
    batch: Vec<R>,
    conv: C,
    report: F,
    summary: ExportSummary,
}

impl<R, C: FnMut(Span) -> R, F: FnMut(&mut Vec<R>)> Exporter<'_, R, C, F> {
    fn origin(&self) -> u64 {
        self.meta.clock.start_unix_ns
    }

    fn root_trace(&mut self, thread: usize) -> u128 {
        match self.opts.trace_ids {
            TraceIdScope::Root => self.ids.trace(),
            TraceIdScope::Thread => match self.threads[thread].trace_id {
                Some(t) => t,
                None => {
                    let t = self.ids.trace();
                    self.threads[thread].trace_id = Some(t);
                    t
                }
            },
            TraceIdScope::Session => match self.session_trace {
                Some(t) => t,
                None => {
                    let t = self.ids.trace();
                    self.session_trace = Some(t);
                    t
                }
            },
        }
    }

    fn state(&mut self, thread: u32) -> usize {
        let t = thread as usize;
        if self.threads.len() <= t {
            self.threads.resize_with(t + 1, ThreadState::default);
        }
        t
    }

    fn thread_props(&mut self, t: usize) -> Vec<Property> {
        if !self.opts.properties {
            return Vec::new();
        }
        if self.thread_props.len() <= t {
            self.thread_props.resize(t + 1, None);
        }
        let meta = self.meta;
        self.thread_props[t]
            .get_or_insert_with(|| match meta.threads.get(t) {
                Some(info) => vec![
                    (keys::THREAD_ID.into(), info.tid.to_string().into()),
                    (keys::THREAD_NAME.into(), info.name.clone().into()),
                ],
                None => Vec::new(),
            })
            .clone()
    }

    fn site_props(&mut self, site: u32) -> Vec<Property> {
        if !self.opts.properties {
            return Vec::new();
        }
        let s = site as usize;
        if self.site_props.len() <= s {
            self.site_props.resize(s + 1, None);
        }
        let meta = self.meta;
        self.site_props[s]
            .get_or_insert_with(|| {
                let mut p: Vec<Property> = Vec::new();
                if let Some(info) = meta.sites.get(s) {
                    if !info.module_path.is_empty() {
                        p.push((keys::CODE_NAMESPACE.into(), info.module_path.clone().into()));
                    }
                    if !info.file.is_empty() {
                        p.push((keys::CODE_FILEPATH.into(), info.file.clone().into()));
                    }
                    if info.line > 0 {
                        p.push((keys::CODE_LINENO.into(), info.line.to_string().into()));
                    }
                }
                p
            })
            .clone()
    }

    fn emit(&mut self, span: Span) {
        self.summary.spans += 1;
        self.batch.push((self.conv)(span));
        if self.batch.len() >= self.opts.batch.max(1) {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if !self.batch.is_empty() {
            self.summary.batches += 1;
            (self.report)(&mut self.batch);
            self.batch.clear();
        }
    }

    /// Closes the open calls at `depth` and deeper.
    fn close_to(&mut self, t: usize, depth: u32) {
        while self.threads[t]
            .stack
            .last()
            .is_some_and(|o| o.depth >= depth)
        {
            if let Some(o) = self.threads[t].stack.pop() {
                self.emit(o.span);
            }
        }
    }

    fn new_span(&mut self, t: usize, site: u32, start_ns: u64, dur_ns: u64) -> Span {
        let mut properties = self.thread_props(t);
        properties.extend(self.site_props(site));
        Span {
            trace_id: 0,
            span_id: self.ids.span(),
            parent_id: 0,
            begin_unix_ns: self.origin().saturating_add(start_ns),
            duration_ns: dur_ns,
            name: self.meta.site_name(site).to_string().into(),
            properties,
            events: Vec::new(),
        }
    }

    fn finish(mut self) -> ExportSummary {
        for t in 0..self.threads.len() {
            self.close_to(t, 0);
        }
        self.flush();
        self.summary.traces = self.ids.traces;
        self.summary
    }
}

impl<R, C: FnMut(Span) -> R, F: FnMut(&mut Vec<R>)> Consume for Exporter<'_, R, C, F> {
    type Error = Infallible;

    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        match ev {
            Event::Call(c) => {
                let t = self.state(c.thread);
                self.close_to(t, c.depth);
                let mut span = self.new_span(t, c.site, c.start_ns, c.dur_ns);
                // A call deeper than its nearest open call lost its parent: it
                // hangs under the nearest one rather than starting a trace.
                match self.threads[t].stack.last() {
                    Some(p) => {
                        span.trace_id = p.span.trace_id;
                        span.parent_id = p.span.span_id;
                    }
                    None => span.trace_id = self.root_trace(t),
                }
                if c.unwound() {
                    span.properties.push((keys::UNWOUND.into(), "true".into()));
                }
                if c.is_poll() {
                    span.properties.push((keys::POLL.into(), "true".into()));
                }
                self.threads[t].stack.push(Open {
                    depth: c.depth,
                    span,
                });
            }
            Event::Lost(l) => {
                let t = self.state(l.thread);
                self.close_to(t, l.depth);
                self.summary.losses += 1;
                let kind = match l.kind {
                    LossKind::Dropped => "dropped",
                    LossKind::Overwritten => "overwritten",
                };
                let props: Vec<Property> = vec![
                    (keys::LOST.into(), l.count.to_string().into()),
                    (keys::LOST_KIND.into(), kind.into()),
                ];
                let at = self.origin().saturating_add(l.at_ns);
                if let Some(p) = self.threads[t].stack.last_mut() {
                    p.span.events.push(SpanEvent {
                        name: keys::LOST_EVENT.into(),
                        timestamp_unix_ns: at,
                        properties: props,
                    });
                } else {
                    let mut properties = self.thread_props(t);
                    properties.push((keys::KIND.into(), "lost".into()));
                    properties.extend(props);
                    let span = Span {
                        trace_id: self.root_trace(t),
                        span_id: self.ids.span(),
                        parent_id: 0,
                        begin_unix_ns: at,
                        duration_ns: 0,
                        name: keys::LOST_SPAN.into(),
                        properties,
                        events: Vec::new(),
                    };
                    self.emit(span);
                }
            }
            Event::Future(f) => {
                let t = self.state(f.thread);
                let mut span = self.new_span(t, f.site, f.start_ns, f.dur_ns);
                span.trace_id = self.root_trace(t);
                span.properties.push((keys::KIND.into(), "future".into()));
                span.properties
                    .push((keys::POLLS.into(), f.polls.to_string().into()));
                if f.cancelled {
                    span.properties
                        .push((keys::CANCELLED.into(), "true".into()));
                }
                self.emit(span);
            }
            Event::Counters(cc) => {
                if !self.opts.properties {
                    return Ok(());
                }
                let t = self.state(cc.thread);
                let names = &self.meta.counters;
                // Counters follow their call, which is the newest open one.
                if let Some(p) = self.threads[t].stack.last_mut() {
                    for (name, v) in names.iter().zip(&cc.values) {
                        p.span.properties.push((
                            format!("{}{name}", keys::COUNTER_PREFIX).into(),
                            v.to_string().into(),
                        ));
                    }
                }
            }
            // Spans of polls and futures are not linked (each is its own span).
            Event::Sample(_)
            | Event::Values(_)
            | Event::Marker(_)
            | Event::FutureId(_)
            | Event::Wake(_)
            | Event::FutureTimes(_) => {}
        }
        Ok(())
    }
}

/// Turns `trace` into spans and hands them to `report` in batches of
/// `opts.batch`, each span converted by `conv` (the bridges' `SpanRecord`
/// constructors). `report` gets the batch and may take it; it is cleared after.
/// Children are handed over before their parents.
pub fn export_spans<R>(
    trace: &Trace,
    opts: &ExportOptions,
    conv: impl FnMut(Span) -> R,
    report: impl FnMut(&mut Vec<R>),
) -> ExportSummary {
    export_event_spans(trace.meta(), trace.events(), opts, conv, report)
}

/// [`export_spans`] over any event stream in trace order, such as a
/// [`TraceReader`](fgtrace_trace::TraceReader)'s, so a trace file is exported
/// without loading it.
pub fn export_event_spans<R>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Event>,
    opts: &ExportOptions,
    conv: impl FnMut(Span) -> R,
    report: impl FnMut(&mut Vec<R>),
) -> ExportSummary {
    let mut ex = Exporter {
        meta,
        opts,
        ids: Ids::new(meta, opts.first_trace_id),
        session_trace: None,
        threads: Vec::new(),
        thread_props: Vec::new(),
        site_props: Vec::new(),
        batch: Vec::with_capacity(opts.batch.clamp(1, 1 << 16)),
        conv,
        report,
        summary: ExportSummary::default(),
    };
    // Events already read have no read error to come back.
    let Ok(_) = feed(&mut ex, ok_events(events));
    ex.finish()
}

/// What an import found besides the calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportSummary {
    /// Spans read.
    pub spans: u64,
    /// Distinct trace ids.
    pub traces: u64,
    /// Distinct threads the spans name.
    pub threads: u64,
    /// Spans whose parent was not received; imported as roots.
    pub orphans: u64,
    /// Spans repeating a (trace id, span id) already seen; children attach to the first.
    pub duplicates: u64,
    /// Parent-id cycles (bad input), each broken at its earliest span.
    pub cycles: u64,
}

/// A [`Reporter`](https://docs.rs/fastrace/latest/fastrace/collector/trait.Reporter.html)
/// that keeps every span it receives, for [`SpanCollector::to_trace`]. It
/// implements minitrace's and fastrace's `Reporter` (with their features);
/// clones share the spans, so keep one clone and give the other to
/// `set_reporter`.
#[derive(Clone, Debug, Default)]
pub struct SpanCollector {
    inner: Arc<Mutex<Collected>>,
}

#[derive(Debug, Default)]
struct Collected {
    spans: Vec<Span>,
    /// Which crate reported, for the trace's `program` field.
    source: Option<&'static str>,
}

impl SpanCollector {
    /// A collector holding no span.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds spans, from a reporter or from any other source of spans.
    pub fn extend(&self, source: &'static str, spans: impl IntoIterator<Item = Span>) {
        let mut c = self.inner.lock();
        c.source.get_or_insert(source);
        c.spans.extend(spans);
    }

    /// Spans held.
    pub fn len(&self) -> usize {
        self.inner.lock().spans.len()
    }

    /// Whether no span is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every span held.
    pub fn clear(&self) {
        self.inner.lock().spans.clear();
    }

    /// A copy of the spans received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.inner.lock().spans.clone()
    }

    /// The spans received so far as a [`Trace`] (see the module doc for
    /// threads and orphans). The spans are kept.
    pub fn to_trace(&self) -> Trace {
        self.import().0
    }

    /// Like [`to_trace`](Self::to_trace), with what the import found.
    pub fn import(&self) -> (Trace, ImportSummary) {
        let c = self.inner.lock();
        let (mut trace, summary) = spans_to_trace(&c.spans);
        if let Some(src) = c.source {
            trace.meta.program = format!("{src} spans");
        }
        (trace, summary)
    }
}

/// Which thread a root's tree goes to.
#[derive(Clone, PartialEq, Eq, Hash)]
enum ThreadKey {
    Tid(u32),
    Trace(u128),
}

/// One item of the pre-order walk.
enum Work {
    Span {
        idx: usize,
        depth: u32,
    },
    Lost {
        at: u64,
        depth: u32,
        count: u64,
        kind: LossKind,
    },
}

fn parse_loss(props: &[Property]) -> Option<(u64, LossKind)> {
    let count = find(props, keys::LOST)?.parse().ok()?;
    let kind = match find(props, keys::LOST_KIND) {
        Some("overwritten") => LossKind::Overwritten,
        _ => LossKind::Dropped,
    };
    Some((count, kind))
}

/// Builds a [`Trace`] from spans (see the module doc for threads, orphans and
/// the markers read back). Never panics on inconsistent input: unknown
/// parents make roots, cycles are broken, duplicate ids are counted.
pub fn spans_to_trace(spans: &[Span]) -> (Trace, ImportSummary) {
    let n = spans.len();
    let mut summary = ImportSummary {
        spans: n as u64,
        ..Default::default()
    };
    let origin = spans.iter().map(|s| s.begin_unix_ns).min().unwrap_or(0);
    let end = spans
        .iter()
        .map(|s| s.begin_unix_ns.saturating_add(s.duration_ns))
        .max()
        .unwrap_or(0);
    let rel = |t: u64| t.saturating_sub(origin);

    // Parent links, scoped by trace id as span ids are.
    let mut index: HashMap<(u128, u64), usize> = HashMap::with_capacity(n);
    for (i, s) in spans.iter().enumerate() {
        if index.insert((s.trace_id, s.span_id), i).is_some() {
            summary.duplicates += 1;
        }
    }
    // Keep the first of duplicates (insert above kept the last).
    for (i, s) in spans.iter().enumerate().rev() {
        index.insert((s.trace_id, s.span_id), i);
    }
    const NONE: usize = usize::MAX;
    let mut parent = vec![NONE; n];
    let mut roots: Vec<usize> = Vec::new();
    for (i, s) in spans.iter().enumerate() {
        if s.parent_id == 0 {
            roots.push(i);
            continue;
        }
        match index.get(&(s.trace_id, s.parent_id)) {
            Some(&p) if p != i => parent[i] = p,
            Some(_) => {
                summary.cycles += 1;
                roots.push(i);
            }
            None => {
                summary.orphans += 1;
                roots.push(i);
            }
        }
    }
    // Children in compressed form, each list in begin-time order.
    let mut start = vec![0usize; n + 1];
    for &p in &parent {
        if p != NONE {
            start[p + 1] += 1;
        }
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut child = vec![0usize; start[n]];
    for (i, &p) in parent.iter().enumerate() {
        if p != NONE {
            child[fill[p]] = i;
            fill[p] += 1;
        }
    }
    let by_time =
        |a: &usize, b: &usize| (spans[*a].begin_unix_ns, *a).cmp(&(spans[*b].begin_unix_ns, *b));
    for i in 0..n {
        child[start[i]..start[i + 1]].sort_by(by_time);
    }
    // Spans not reachable from a root sit on parent cycles: break each at its
    // earliest span.
    let mut seen = vec![false; n];
    let mut stack: Vec<usize> = Vec::new();
    let mark = |r: usize, seen: &mut Vec<bool>, stack: &mut Vec<usize>| {
        stack.push(r);
        while let Some(i) = stack.pop() {
            if !std::mem::replace(&mut seen[i], true) {
                stack.extend(
                    child[start[i]..start[i + 1]]
                        .iter()
                        .copied()
                        .filter(|&c| !seen[c]),
                );
            }
        }
    };
    for &r in &roots {
        mark(r, &mut seen, &mut stack);
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(by_time);
    for &i in &order {
        if !seen[i] {
            summary.cycles += 1;
            roots.push(i);
            mark(i, &mut seen, &mut stack);
        }
    }
    roots.sort_by(by_time);

    // Threads: by the root's `thread.id`, else by trace id.
    let mut thread_of: HashMap<ThreadKey, u32> = HashMap::new();
    let mut threads: Vec<ThreadInfo> = Vec::new();
    let mut sites: Vec<SiteInfo> = Vec::new();
    let mut site_of: HashMap<(String, String, String, u32), u32> = HashMap::new();
    let mut events: Vec<Vec<Event>> = Vec::new();
    let mut futures: Vec<Vec<FutureSpan>> = Vec::new();
    let mut emitted = vec![false; n];
    let mut work: Vec<Work> = Vec::new();
    summary.traces = spans
        .iter()
        .map(|s| s.trace_id)
        .collect::<HashSet<u128>>()
        .len() as u64;

    for &r in &roots {
        let root = &spans[r];
        let key = match root
            .property(keys::THREAD_ID)
            .and_then(|v| v.parse::<u32>().ok())
        {
            Some(tid) => ThreadKey::Tid(tid),
            None => ThreadKey::Trace(root.trace_id),
        };
        let t = *thread_of.entry(key.clone()).or_insert_with(|| {
            let (tid, name) = match key {
                ThreadKey::Tid(tid) => (
                    tid,
                    root.property(keys::THREAD_NAME)
                        .map_or_else(|| format!("tid-{tid}"), str::to_string),
                ),
                ThreadKey::Trace(id) => (threads.len() as u32 + 1, format!("{id:x}")),
            };
            threads.push(ThreadInfo {
                tid,
                name,
                ..Default::default()
            });
            events.push(Vec::new());
            futures.push(Vec::new());
            threads.len() as u32 - 1
        });
        let ti = t as usize;
        work.push(Work::Span { idx: r, depth: 0 });
        while let Some(w) = work.pop() {
            let (idx, depth) = match w {
                Work::Lost {
                    at,
                    depth,
                    count,
                    kind,
                } => {
                    threads[ti].lost = threads[ti].lost.saturating_add(count);
                    events[ti].push(Event::Lost(Lost {
                        thread: t,
                        depth,
                        at_ns: at,
                        count,
                        kind,
                    }));
                    continue;
                }
                Work::Span { idx, depth } => (idx, depth),
            };
            if std::mem::replace(&mut emitted[idx], true) {
                continue;
            }
            let s = &spans[idx];
            let kids = &child[start[idx]..start[idx + 1]];
            let kind = s.property(keys::KIND);
            if kids.is_empty() && kind == Some("lost") {
                let (count, lk) = parse_loss(&s.properties).unwrap_or((0, LossKind::Dropped));
                threads[ti].lost = threads[ti].lost.saturating_add(count);
                events[ti].push(Event::Lost(Lost {
                    thread: t,
                    depth,
                    at_ns: rel(s.begin_unix_ns),
                    count,
                    kind: lk,
                }));
                continue;
            }
            let is_future = kids.is_empty() && kind == Some("future");
            let is_poll = s.property(keys::POLL) == Some("true");
            let line = s
                .property(keys::CODE_LINENO)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let site_key = (
                s.name.to_string(),
                s.property(keys::CODE_NAMESPACE).unwrap_or("").to_string(),
                s.property(keys::CODE_FILEPATH).unwrap_or("").to_string(),
                line,
            );
            let site = *site_of.entry(site_key).or_insert_with_key(|k| {
                sites.push(SiteInfo {
                    name: k.0.clone(),
                    module_path: k.1.clone(),
                    file: k.2.clone(),
                    line: k.3,
                    is_async: false,
                    values: Vec::new(),
                });
                sites.len() as u32 - 1
            });
            if is_future || is_poll {
                sites[site as usize].is_async = true;
            }
            if is_future {
                futures[ti].push(FutureSpan {
                    thread: t,
                    site,
                    start_ns: rel(s.begin_unix_ns),
                    dur_ns: s.duration_ns,
                    polls: s
                        .property(keys::POLLS)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0),
                    cancelled: s.property(keys::CANCELLED) == Some("true"),
                });
                continue;
            }
            let mut fl = 0;
            if s.property(keys::UNWOUND) == Some("true") {
                fl |= flags::UNWOUND;
            }
            if is_poll {
                fl |= flags::POLL;
            }
            threads[ti].calls += 1;
            events[ti].push(Event::Call(fgtrace_trace::Call {
                thread: t,
                site,
                depth,
                start_ns: rel(s.begin_unix_ns),
                dur_ns: s.duration_ns,
                flags: fl,
            }));
            // Children and `lost` events in time order; pushed reversed so
            // the earliest is walked first.
            let d = depth.saturating_add(1);
            let mut items: Vec<(u64, usize, Work)> = kids
                .iter()
                .filter(|&&c| !emitted[c])
                .map(|&c| (spans[c].begin_unix_ns, c, Work::Span { idx: c, depth: d }))
                .collect();
            for e in s.events.iter().filter(|e| e.name == keys::LOST_EVENT) {
                if let Some((count, kind)) = parse_loss(&e.properties) {
                    let at = rel(e.timestamp_unix_ns);
                    items.push((
                        e.timestamp_unix_ns,
                        usize::MAX,
                        Work::Lost {
                            at,
                            depth: d,
                            count,
                            kind,
                        },
                    ));
                }
            }
            items.sort_by_key(|(t, i, _)| (*t, *i));
            work.extend(items.into_iter().rev().map(|(_, _, w)| w));
        }
    }

    summary.threads = threads.len() as u64;
    let meta = TraceMeta {
        program: "spans".into(),
        pid: std::process::id(),
        clock: ClockInfo {
            source: "unix".into(),
            ticks_per_ns: 1.0,
            start_mono_ns: 0,
            start_unix_ns: origin,
        },
        duration_ns: end.saturating_sub(origin),
        sites,
        threads,
        ..Default::default()
    };
    let mut b = TraceBuilder::new(meta);
    for (evs, mut futs) in events.into_iter().zip(futures) {
        for e in evs {
            b.push(e);
        }
        futs.sort_by_key(|f| f.start_ns);
        for f in futs {
            b.push(Event::Future(f));
        }
    }
    (b.finish(), summary)
}

#[cfg(test)]
mod tests;
