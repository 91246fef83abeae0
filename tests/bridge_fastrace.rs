//! The fastrace bridge against the real crate: fgtrace traces exported to a
//! fastrace `Reporter`, `#[fastrace::trace]` spans imported through the global
//! collector, and the round trip between the two.
#![cfg(feature = "fastrace")]

use fastrace as tracer;
use fgtrace::bridge::fastrace as bridge;

const TRACER: &str = "fastrace";

include!("bridge/shared.rs");

impl tracer::collector::Reporter for Keep {
    fn report(&mut self, spans: Vec<SpanRecord>) {
        self.batches.push(spans);
    }
}
