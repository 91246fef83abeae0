//! The bridge to one span crate, written once for minitrace and fastrace:
//! fastrace is minitrace's successor with the same collector API
//! (`SpanRecord`, `EventRecord`, `Reporter`), except that its reporter owns
//! the records it is given (`Vec<SpanRecord>`) where minitrace's borrows them
//! (`&[SpanRecord]`). `span_crate_bridge!` expands to the body of
//! `bridge::minitrace` or `bridge::fastrace`.

/// Expands to a bridge module's items for the span crate `$krate`.
/// `owned`: its `Reporter` takes `Vec<SpanRecord>`, and `from_record` and
/// `import` take records by value; `borrowed`: it takes `&[SpanRecord]`, and
/// they take references.
macro_rules! span_crate_bridge {
    // What a reporter receives.
    (@records owned) => { Vec<SpanRecord> };
    (@records borrowed) => { &[SpanRecord] };
    // What `from_record` takes.
    (@record owned) => { SpanRecord };
    (@record borrowed) => { &SpanRecord };
    // The record itself, from what `from_record` took.
    (@own owned, $r:ident) => { $r };
    (@own borrowed, $r:ident) => { $r.clone() };
    // The export's batch as the reporter takes it: an owning reporter gets
    // the batch and the export a fresh one of the same capacity.
    (@batch owned, $batch:ident, $opts:ident) => {
        std::mem::replace($batch, Vec::with_capacity($opts.batch.clamp(1, 1 << 16)))
    };
    (@batch borrowed, $batch:ident, $opts:ident) => {
        $batch
    };

    ($krate:ident, $records:ident) => {
        use ::$krate::collector::{EventRecord, Reporter, SpanId, SpanRecord, TraceId};
        use $crate::bridge::spans::{self, Span, SpanEvent};
        use fgtrace_trace::{Event, Trace, TraceMeta};

        pub use $crate::bridge::spans::{
            ExportOptions, ExportSummary, ImportSummary, SpanCollector, TraceIdScope,
        };

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
            spans::export_event_spans(meta, events, opts, to_record, |batch| {
                reporter.report(span_crate_bridge!(@batch $records, batch, opts))
            })
        }

        /// Builds a [`Trace`] from records already at hand (a test reporter's, say).
        pub fn import(records: span_crate_bridge!(@records $records)) -> (Trace, ImportSummary) {
            let spans: Vec<Span> = records.into_iter().map(from_record).collect();
            spans::spans_to_trace(&spans)
        }

        impl Reporter for SpanCollector {
            fn report(&mut self, spans: span_crate_bridge!(@records $records)) {
                self.extend(stringify!($krate), spans.into_iter().map(from_record));
            }
        }

        /// The record a reporter takes, from a neutral span.
        // fastrace's record has fields minitrace's lacks (`links`, 0.7.19, and
        // whatever later 0.7 releases add): they keep their defaults.
        #[allow(clippy::needless_update)]
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
                ..Default::default()
            }
        }

        /// The neutral span of a record. Span links (fastrace 0.7.19) have no
        /// place in a call tree and are dropped.
        pub fn from_record(r: span_crate_bridge!(@record $records)) -> Span {
            let r: SpanRecord = span_crate_bridge!(@own $records, r);
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
    };
}
