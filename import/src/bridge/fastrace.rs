//! fastrace 0.7 (minitrace's maintained successor): export a [`Trace`] to any
//! fastrace [`Reporter`] (Jaeger, Datadog, OpenTelemetry) and import spans
//! from `#[fastrace::trace]` code through [`SpanCollector`]. The mapping in
//! both directions is described in [`super::spans`].

// A fastrace reporter owns the records it is given.
span_crate_bridge!(fastrace, owned);
