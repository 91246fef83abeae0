//! Timing assertions for tests: capture what a closure called, then assert on
//! call counts, durations and nesting.
//!
//! ```
//! #[fgtrace::traced]
//! fn parse_headers(s: &str) -> usize { s.lines().count() }
//!
//! #[fgtrace::traced]
//! fn handle(req: &str) -> usize { parse_headers(req) }
//!
//! let cap = fgtrace::testing::capture(|| handle("a: 1\nb: 2"));
//! assert_eq!(cap.calls("parse_headers"), 1);
//! assert!(cap.max("parse_headers") < std::time::Duration::from_millis(200));
//! ```
//!
//! A capture records only the calling thread, into a private buffer: tests
//! running in parallel in one binary never see each other's calls, and no
//! [`Session`](crate::Session) is needed (one may run at the same time).
//!
//! Names: a query matches a function by its display name (`parse`,
//! `Parser::parse`), or by its full path (`my_crate::parser::parse`), or by a
//! path suffix that ends at a `::` boundary (`parser::parse`).

use crate::clock::{Calibration, ClockPoint};
use crate::collector;
use crate::probe;
use crate::trace::build::{self, MetaBase, ThreadInput};
use crate::trace::{Call, RecordMode, SiteInfo, Trace};
use std::time::Duration;

/// Shadow-stack depth of a capture.
const CAPTURE_STACK: u32 = 1023;

/// Runs `f` on this thread and records every `#[traced]` call it makes.
pub fn capture<R>(f: impl FnOnce() -> R) -> Capture {
    capture_with(f).1
}

/// Like [`capture`], and also returns what `f` returned.
pub fn capture_with<R>(f: impl FnOnce() -> R) -> (R, Capture) {
    struct Restore(Option<probe::SavedState>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(s) = self.0.take() {
                probe::capture_end(s);
            }
        }
    }
    let origin = ClockPoint::now();
    let mut restore = Restore(Some(probe::capture_begin(CAPTURE_STACK)));
    let out = f();
    let end = ClockPoint::now();
    let (records, overruns) = probe::capture_end(restore.0.take().expect("capture state"));
    let mut cal = Calibration { origin, ticks_per_ns: crate::clock::process_rate() };
    cal.refine(end);
    let input = ThreadInput {
        tid: collector::os_tid(),
        name: collector::thread_name(),
        records,
        overwritten: 0,
        dropped: 0,
        overruns,
        samples: Vec::new(),
        samples_lost: 0,
    };
    let base = MetaBase { cal, end_ticks: end.ticks, mode: RecordMode::Stream, filters: String::new() };
    let trace = build::build(base, vec![input], collector::site_by_id);
    (out, Capture { trace })
}

/// What a closure called: the trace plus queries by function name.
pub struct Capture {
    trace: Trace,
}

impl Capture {
    /// The recorded trace (for views: `capture.trace().write_graph(..)`).
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    fn matches(site: &SiteInfo, name: &str) -> bool {
        if site.name == name {
            return true;
        }
        let full = site.full_name();
        full == name || (full.ends_with(name) && full[..full.len() - name.len()].ends_with("::"))
    }

    /// Every recorded call of functions matching `name`.
    pub fn calls_of(&self, name: &str) -> Vec<Call> {
        let sites: Vec<bool> = self.trace.meta().sites.iter().map(|s| Self::matches(s, name)).collect();
        self.trace.calls().filter(|c| sites.get(c.site as usize).copied().unwrap_or(false)).collect()
    }

    /// Number of calls.
    pub fn calls(&self, name: &str) -> usize {
        self.calls_of(name).len()
    }

    /// Sum of the calls' inclusive durations.
    pub fn total(&self, name: &str) -> Duration {
        Duration::from_nanos(self.calls_of(name).iter().map(|c| c.dur_ns).sum())
    }

    /// Longest call (zero if never called).
    pub fn max(&self, name: &str) -> Duration {
        Duration::from_nanos(self.calls_of(name).iter().map(|c| c.dur_ns).max().unwrap_or(0))
    }

    /// The function graph of everything captured, in ftrace format.
    pub fn graph(&self) -> String {
        let mut out = Vec::new();
        let _ = self.trace.write_graph(&Default::default(), &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static LEAF: probe::Site = probe::Site::new("leaf", module_path!(), file!(), line!(), false);
    static ROOT: probe::Site = probe::Site::new("root", module_path!(), file!(), line!(), false);

    fn leaf() {
        let _g = probe::enter(&LEAF);
    }

    fn root(n: usize) {
        let _g = probe::enter(&ROOT);
        for _ in 0..n {
            leaf();
        }
    }

    #[test]
    fn concurrent_captures_see_only_their_own_thread() {
        let handles: Vec<_> = (1..=8)
            .map(|i| {
                std::thread::spawn(move || {
                    let cap = capture(|| {
                        for _ in 0..50 {
                            root(i);
                        }
                    });
                    (i, cap.calls("root"), cap.calls("leaf"), cap.calls("testing::tests::leaf"))
                })
            })
            .collect();
        for h in handles {
            let (i, roots, leaves, by_path) = h.join().unwrap();
            assert_eq!((roots, leaves, by_path), (50, 50 * i, 50 * i));
        }
    }

    #[test]
    fn nested_captures_restore_the_outer_one() {
        let outer = capture(|| {
            root(1);
            let inner = capture(|| root(3));
            assert_eq!(inner.calls("leaf"), 3);
            root(2);
        });
        assert_eq!(outer.calls("root"), 2);
        assert_eq!(outer.calls("leaf"), 3);
    }
}
