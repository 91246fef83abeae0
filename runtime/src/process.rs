//! What this process says about itself in every trace it builds (sessions,
//! dumps of a running session, `testing` captures): its program name and pid,
//! and the tick counter's name. The one place they are read, so every trace
//! agrees.

use fgtrace_trace::build::MetaBase;
use fgtrace_trace::clock::{Calibration, SOURCE};
use fgtrace_trace::RecordMode;

/// The head of a trace's metadata for this process, over `cal` up to
/// `end_ticks`.
pub fn base(
    cal: Calibration,
    end_ticks: u64,
    mode: RecordMode,
    filters: String,
    counters: Vec<String>,
) -> MetaBase {
    MetaBase {
        program: std::env::args().next().unwrap_or_default(),
        pid: std::process::id(),
        clock_source: SOURCE.to_string(),
        cal,
        end_ticks,
        mode,
        filters,
        counters,
    }
}
