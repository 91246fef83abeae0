//! The views stream: rendering 300k calls allocates a bounded amount,
//! measured with a counting global allocator (alone in this test binary so
//! nothing else allocates meanwhile).

use fgtrace::trace::{flags, Call, Event, SiteInfo, ThreadInfo, TraceMeta};
use fgtrace::view::{write_graph, write_report, GraphOptions, ReportOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        CURRENT.fetch_sub(l.size(), Ordering::Relaxed);
        System.dealloc(p, l)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Counts lines without keeping them.
struct LineCounter(u64);
impl io::Write for LineCounter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0 += b.iter().filter(|&&c| c == b'\n').count() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

const CALLS: u64 = 300_000;

/// Calls generated on the fly, two threads, depth cycling 0..4 (no Vec of events).
fn events() -> impl Iterator<Item = Result<Event, fgtrace::trace::TraceError>> {
    (0..CALLS).map(|i| {
        let depth = (i / 2 % 4) as u32;
        let has_children = if depth < 3 { flags::HAS_CHILDREN } else { 0 };
        Ok(Event::Call(Call {
            thread: (i % 2) as u32,
            site: (i % 50) as u32,
            depth,
            start_ns: i * 100,
            dur_ns: 1_000 * (4 - depth as u64),
            flags: has_children,
        }))
    })
}

#[test]
fn many_calls_render_in_bounded_memory() {
    let meta = TraceMeta {
        sites: (0..50)
            .map(|i| SiteInfo {
                name: format!("f{i}"),
                module_path: String::new(),
                file: String::new(),
                line: 0,
                is_async: false,
                values: Vec::new(),
            })
            .collect(),
        threads: vec![
            ThreadInfo {
                tid: 1,
                name: "a".into(),
                calls: CALLS / 2,
                ..Default::default()
            },
            ThreadInfo {
                tid: 2,
                name: "b".into(),
                calls: CALLS / 2,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let mut out = LineCounter(0);
    write_graph(&meta, events(), &GraphOptions::default(), &mut out).unwrap();
    let graph_peak = PEAK.load(Ordering::Relaxed) - base;
    // Every call is one line, plus a `}` for each of the 3/4 that have children,
    // plus the header and a context-switch block (4 lines) per alternation.
    assert!(out.0 > CALLS + CALLS / 2, "{} lines", out.0);

    PEAK.store(CURRENT.load(Ordering::Relaxed), Ordering::Relaxed);
    let base = CURRENT.load(Ordering::Relaxed);
    let mut out = LineCounter(0);
    write_report(&meta, events(), &ReportOptions::default(), &mut out).unwrap();
    let report_peak = PEAK.load(Ordering::Relaxed) - base;
    assert_eq!(
        out.0,
        3 + 2 + 50,
        "header, column titles, one row per function"
    );

    // 300k calls held in memory would be about 10 MB; the views stay in
    // their buffers (64 KiB output buffer, a line, stacks, per-function stats).
    assert!(graph_peak < 512 << 10, "graph peak {graph_peak} bytes");
    assert!(report_peak < 512 << 10, "report peak {report_peak} bytes");
}
