//! minitrace 0.6: export a [`Trace`] to any minitrace [`Reporter`] (Jaeger,
//! Datadog, OpenTelemetry) and import spans from `#[minitrace::trace]` code
//! through [`SpanCollector`]. minitrace is unmaintained (RUSTSEC-2024-0390):
//! new code should prefer [`fastrace`](super::fastrace), which has the same
//! model. The mapping in both directions is described in [`super::spans`].

use super::spans::{self, Span, SpanEvent};
use fgtrace_trace::{Event, Trace, TraceMeta};
use minitrace::collector::{EventRecord, Reporter, SpanId, SpanRecord, TraceId};

pub use super::spans::{ExportOptions, ExportSummary, ImportSummary, SpanCollector, TraceIdScope};

/// Hands every traced call of `trace` to `reporter` as `SpanRecord`s, in
/// batches of `opts.batch`, without holding all of them in memory.
pub fn export<R: Reporter + ?Sized>(
    trace: &Trace,
    reporter: &mut R,
    opts: &ExportOptions,
) -> ExportSummary {
    spans::export_spans(trace, opts, to_record, |batch| reporter.report(batch))
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
    spans::export_event_spans(meta, events, opts, to_record, |batch| {
        reporter.report(batch)
    })
}

/// Builds a [`Trace`] from records already at hand (a test reporter's, say).
pub fn import(records: &[SpanRecord]) -> (Trace, ImportSummary) {
    let spans: Vec<Span> = records.iter().map(from_record).collect();
    spans::spans_to_trace(&spans)
}

impl Reporter for SpanCollector {
    fn report(&mut self, spans: &[SpanRecord]) {
        self.extend("minitrace", spans.iter().map(from_record));
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
    }
}

/// The neutral span of a record.
pub fn from_record(r: &SpanRecord) -> Span {
    Span {
        trace_id: r.trace_id.0,
        span_id: r.span_id.0,
        parent_id: r.parent_id.0,
        begin_unix_ns: r.begin_time_unix_ns,
        duration_ns: r.duration_ns,
        name: r.name.clone(),
        properties: r.properties.clone(),
        events: r
            .events
            .iter()
            .map(|e| SpanEvent {
                name: e.name.clone(),
                timestamp_unix_ns: e.timestamp_unix_ns,
                properties: e.properties.clone(),
            })
            .collect(),
    }
}
