//! fastrace 0.7 (minitrace's maintained successor): export a [`Trace`] to any
//! fastrace [`Reporter`] (Jaeger, Datadog, OpenTelemetry) and import spans
//! from `#[fastrace::trace]` code through [`SpanCollector`]. The mapping in
//! both directions is described in [`super::spans`].

use super::spans::{self, Span, SpanEvent};
use fastrace::collector::{EventRecord, Reporter, SpanId, SpanRecord, TraceId};
use fgtrace_trace::{Event, Trace, TraceMeta};

pub use super::spans::{ExportOptions, ExportSummary, ImportSummary, SpanCollector, TraceIdScope};

/// Hands every traced call of `trace` to `reporter` as `SpanRecord`s, in
/// batches of `opts.batch`, without holding all of them in memory.
pub fn export<R: Reporter + ?Sized>(
    trace: &Trace,
    reporter: &mut R,
    opts: &ExportOptions,
) -> ExportSummary {
    export_events(trace.meta(), trace.events(), reporter, opts)
}

/// [`export`] over any event stream in trace order, such as a
/// [`TraceReader`](fgtrace_trace::TraceReader)'s: a trace file is exported
/// without loading it.
pub fn export_events<R: Reporter + ?Sized>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Event>,
    reporter: &mut R,
    opts: &ExportOptions,
) -> ExportSummary {
    let cap = opts.batch.clamp(1, 1 << 16);
    spans::export_event_spans(meta, events, opts, to_record, |batch| {
        reporter.report(std::mem::replace(batch, Vec::with_capacity(cap)));
    })
}

/// Builds a [`Trace`] from records already at hand (a test reporter's, say).
pub fn import(records: Vec<SpanRecord>) -> (Trace, ImportSummary) {
    let spans: Vec<Span> = records.into_iter().map(from_record).collect();
    spans::spans_to_trace(&spans)
}

impl Reporter for SpanCollector {
    fn report(&mut self, spans: Vec<SpanRecord>) {
        self.extend("fastrace", spans.into_iter().map(from_record));
    }
}

/// The record a reporter takes, from a neutral span.
pub fn to_record(s: Span) -> SpanRecord {
    SpanRecord {
        trace_id: TraceId(s.trace_id),
        span_id: SpanId(s.span_id),
        parent_id: SpanId(s.parent_id),
        begin_time_unix_ns: s.begin_unix_ns,
        duration_ns: s.duration_ns,
        name: s.name,
        properties: s.properties,
        events: s
            .events
            .into_iter()
            .map(|e| EventRecord {
                name: e.name,
                timestamp_unix_ns: e.timestamp_unix_ns,
                properties: e.properties,
            })
            .collect(),
        // `links` (0.7.19) and whatever later 0.7 releases add.
        ..Default::default()
    }
}

/// Span links (fastrace 0.7.19) have no place in a call tree and are dropped.
pub fn from_record(r: SpanRecord) -> Span {
    Span {
        trace_id: r.trace_id.0,
        span_id: r.span_id.0,
        parent_id: r.parent_id.0,
        begin_unix_ns: r.begin_time_unix_ns,
        duration_ns: r.duration_ns,
        name: r.name,
        properties: r.properties,
        events: r
            .events
            .into_iter()
            .map(|e| SpanEvent {
                name: e.name,
                timestamp_unix_ns: e.timestamp_unix_ns,
                properties: e.properties,
            })
            .collect(),
    }
}
