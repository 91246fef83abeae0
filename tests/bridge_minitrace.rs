//! The minitrace bridge against the real crate: fgtrace traces exported to a
//! minitrace `Reporter`, `#[minitrace::trace]` spans imported through the global
//! collector, and the round trip between the two.
#![cfg(feature = "minitrace")]

use fgtrace::bridge::minitrace as bridge;
use minitrace as tracer;

const TRACER: &str = "minitrace";

include!("bridge/shared.rs");

impl tracer::collector::Reporter for Keep {
    fn report(&mut self, spans: &[SpanRecord]) {
        self.batches.push(spans.to_vec());
    }
}
