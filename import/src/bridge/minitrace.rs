//! minitrace 0.6: export a [`Trace`] to any minitrace [`Reporter`] (Jaeger,
//! Datadog, OpenTelemetry) and import spans from `#[minitrace::trace]` code
//! through [`SpanCollector`]. minitrace is unmaintained (RUSTSEC-2024-0390):
//! new code should prefer [`fastrace`](super::fastrace), which has the same
//! model. The mapping in both directions is described in [`super::spans`].

// A minitrace reporter borrows the records it is given.
span_crate_bridge!(minitrace, borrowed);
