//! A time window and a minimum duration for the timeline exports (Chrome,
//! Perfetto, Firefox): what a viewer can load is far less than what a long
//! trace holds, so an export can keep only part of it.
//!
//! - a call or a future is kept when it overlaps `[from, to)` and lasts at
//!   least `min_dur`. A parent overlaps wherever its children do and lasts at
//!   least as long, so a kept call's callers are kept too and the nesting
//!   stays whole;
//! - a sample or a loss is kept when it falls inside `[from, to)`;
//! - a call's counters go with the call;
//! - an off-CPU stretch is kept when it overlaps the window.
//!
//! What is left out is counted ([`LeftOut`]) so each export can say so in
//! its metadata. [`Window::default`] keeps everything, and the exports then
//! write exactly what they wrote without a window.
//!
//! [`estimate`] and [`size_warning`] guess an export's size before it is
//! written, from the metadata's per-thread call counts, so the CLI can warn
//! when the file will be more than its viewer loads.

use crate::threads::{shown, thread_mask, ThreadSel};
use fgtrace_trace::{Event, TraceMeta};

/// Which part of the trace an export keeps. Times are nanoseconds since the
/// trace's start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// Start of the window (none: the trace's start).
    pub from_ns: Option<u64>,
    /// End of the window, exclusive (none: the trace's end).
    pub to_ns: Option<u64>,
    /// Calls and futures shorter than this are left out.
    pub min_dur_ns: u64,
}

impl Window {
    /// Whether this window keeps everything (no bound, no minimum).
    pub fn is_all(&self) -> bool {
        *self == Window::default()
    }

    pub(crate) fn from(&self) -> u64 {
        self.from_ns.unwrap_or(0)
    }

    pub(crate) fn to(&self) -> u64 {
        self.to_ns.unwrap_or(u64::MAX)
    }

    /// Whether `[start, end)` overlaps the window. A zero-length span counts
    /// as a point, kept when inside.
    pub fn overlaps(&self, start: u64, end: u64) -> bool {
        start < self.to() && (end > self.from() || start >= self.from())
    }

    /// Whether the instant `at` is inside the window.
    pub fn contains(&self, at: u64) -> bool {
        at >= self.from() && at < self.to()
    }

    /// Whether a span of `[start, start + dur)` is kept: in the window and
    /// long enough.
    pub fn keeps_span(&self, start: u64, dur: u64) -> bool {
        dur >= self.min_dur_ns && self.overlaps(start, start.saturating_add(dur))
    }

    /// Whether `ev` is kept, taken alone. A `Counters` event belongs to the
    /// call before it, so this keeps it; [`WindowFilter`] drops it with its call.
    pub fn keeps(&self, ev: &Event) -> bool {
        match ev {
            Event::Call(c) => self.keeps_span(c.start_ns, c.dur_ns),
            Event::Future(f) => self.keeps_span(f.start_ns, f.dur_ns),
            Event::Sample(s) => self.contains(s.ts_ns),
            Event::Lost(l) => self.contains(l.at_ns),
            Event::Marker(m) => self.contains(m.ts_ns),
            Event::Wake(w) => self.contains(w.ts_ns),
            Event::Counters(_) | Event::Values(_) | Event::FutureId(_) | Event::FutureTimes(_) => {
                true
            }
        }
    }

    /// The window as text, for the exports' metadata: `from 1.500000s to
    /// 2.000000s, at least 10.000us` (the parts that are set).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(f) = self.from_ns {
            parts.push(format!("from {}", seconds(f)));
        }
        if let Some(t) = self.to_ns {
            parts.push(format!("to {}", seconds(t)));
        }
        if self.min_dur_ns > 0 {
            parts.push(format!(
                "at least {}.{:03}us",
                self.min_dur_ns / 1000,
                self.min_dur_ns % 1000
            ));
        }
        if parts.is_empty() {
            "everything".into()
        } else {
            parts.join(", ")
        }
    }
}

fn seconds(ns: u64) -> String {
    format!("{}.{:09}s", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// What a window left out of an export, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// Calls outside the window or shorter than its minimum.
    pub calls: u64,
    /// Futures outside the window or shorter than its minimum.
    pub futures: u64,
    /// Samples outside the window.
    pub samples: u64,
    /// Loss markers outside the window.
    pub losses: u64,
    /// Instant markers and wakes outside the window.
    pub markers: u64,
    /// Off-CPU stretches outside the window.
    pub off_cpu: u64,
}

impl LeftOut {
    /// `12 calls, 3 samples left out` (the kinds with any); `nothing left out`.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = [
            (self.calls, "calls"),
            (self.futures, "futures"),
            (self.samples, "samples"),
            (self.losses, "losses"),
            (self.markers, "markers"),
            (self.off_cpu, "off-CPU stretches"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        if parts.is_empty() {
            "nothing left out".into()
        } else {
            format!("{} left out", parts.join(", "))
        }
    }
}

/// A [`Window`] applied to a stream of events, in trace order: decides each
/// event and counts what it leaves out. Per thread it remembers whether the
/// last call was kept, so the call's `Counters` follow it.
#[derive(Clone, Debug, Default)]
pub struct WindowFilter {
    window: Window,
    /// Per thread: the last call was left out.
    dropped_call: Vec<bool>,
    /// What was left out so far.
    pub left_out: LeftOut,
}

impl WindowFilter {
    /// A filter keeping what `window` keeps.
    pub fn new(window: Window) -> Self {
        WindowFilter {
            window,
            ..Default::default()
        }
    }

    /// The window it applies.
    pub fn window(&self) -> &Window {
        &self.window
    }

    /// Whether the export takes `ev`; counts it when not.
    pub fn admit(&mut self, ev: &Event) -> bool {
        if self.window.is_all() {
            return true;
        }
        let t = ev.thread() as usize;
        if let Event::Counters(_) | Event::Values(_) | Event::FutureId(_) | Event::FutureTimes(_) =
            ev
        {
            return !self.dropped_call.get(t).copied().unwrap_or(false);
        }
        let keep = self.window.keeps(ev);
        // A marker's values go with it as a call's do, and a future's values,
        // id and times with it.
        if let Event::Call(_) | Event::Marker(_) | Event::Future(_) = ev {
            if self.dropped_call.len() <= t {
                self.dropped_call.resize(t + 1, false);
            }
            self.dropped_call[t] = !keep;
        }
        if !keep {
            let n = match ev {
                Event::Call(_) => &mut self.left_out.calls,
                Event::Future(_) => &mut self.left_out.futures,
                Event::Sample(_) => &mut self.left_out.samples,
                Event::Lost(_) => &mut self.left_out.losses,
                Event::Marker(_) | Event::Wake(_) => &mut self.left_out.markers,
                Event::Counters(_)
                | Event::Values(_)
                | Event::FutureId(_)
                | Event::FutureTimes(_) => {
                    unreachable!("decided above")
                }
            };
            *n += 1;
        }
        keep
    }

    /// Whether the export takes an off-CPU stretch; counts it when not.
    pub fn admit_off_cpu(&mut self, start_ns: u64, end_ns: u64) -> bool {
        let keep = self.window.overlaps(start_ns, end_ns);
        if !keep {
            self.left_out.off_cpu += 1;
        }
        keep
    }
}

/// The viewers the exports are for, with how much each can load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Viewer {
    /// Native Perfetto protobuf in ui.perfetto.dev.
    Perfetto,
    /// Chrome Trace Event JSON in ui.perfetto.dev or chrome://tracing.
    Chrome,
    /// The Firefox Profiler's processed format.
    Firefox,
}

/// What the Perfetto UI loads in a browser: it keeps the trace in the tab's
/// memory (WebAssembly, at most 4 GB, and in practice about 2 GB of trace);
/// half of that leaves room for its own tables.
pub const PERFETTO_LIMIT_BYTES: u64 = 1 << 30;
/// What the Perfetto UI and chrome://tracing load as JSON: the JSON parser
/// holds the text and every event's object, so about 500 MB.
pub const CHROME_LIMIT_BYTES: u64 = 500 << 20;
/// What the Firefox Profiler loads: about 1 GB of JSON (it parses the whole
/// profile into the tab's JavaScript heap).
pub const FIREFOX_LIMIT_BYTES: u64 = 1 << 30;

/// Bytes each call adds to a Perfetto export (a begin and an end packet,
/// names interned): 48.7 on a 100M-call trace (4.87 GB), 49.0 on a
/// 200k-call synthetic one.
pub const PERFETTO_BYTES_PER_CALL: u64 = 49;
/// Bytes each call adds to a Chrome JSON export (a complete event with its
/// name, `file`, `module` and `depth` args): 202 on a 200k-call synthetic
/// trace with names like `serialize_response`, modules like
/// `myservice::server::mod3`, timestamps in seconds and 6-digit tids. Longer
/// paths and names make it more.
pub const CHROME_BYTES_PER_CALL: u64 = 200;
/// Bytes each call adds to a Firefox export's JSON (a marker in the columnar
/// tables with its data object), before gzip: what the profiler parses. 121
/// on the same trace (gzipped, the file is about 7.4 B per call).
pub const FIREFOX_BYTES_PER_CALL: u64 = 120;

impl Viewer {
    /// The viewer's name, as the warning says it.
    pub fn name(self) -> &'static str {
        match self {
            Viewer::Perfetto => "the Perfetto UI",
            Viewer::Chrome => "the Perfetto UI or chrome://tracing",
            Viewer::Firefox => "the Firefox Profiler",
        }
    }

    /// How much the viewer loads, in bytes.
    pub fn limit_bytes(self) -> u64 {
        match self {
            Viewer::Perfetto => PERFETTO_LIMIT_BYTES,
            Viewer::Chrome => CHROME_LIMIT_BYTES,
            Viewer::Firefox => FIREFOX_LIMIT_BYTES,
        }
    }

    /// Bytes per call of the export (what the estimate multiplies).
    pub fn bytes_per_call(self) -> u64 {
        match self {
            Viewer::Perfetto => PERFETTO_BYTES_PER_CALL,
            Viewer::Chrome => CHROME_BYTES_PER_CALL,
            Viewer::Firefox => FIREFOX_BYTES_PER_CALL,
        }
    }

    /// What the size counts: the Firefox export is gzipped, but the profiler
    /// loads the JSON inside.
    fn measure(self) -> &'static str {
        match self {
            Viewer::Firefox => " of JSON",
            Viewer::Perfetto | Viewer::Chrome => "",
        }
    }
}

/// The calls an export of the threads `threads` (empty: all) keeps in
/// `window`'s time range, assuming calls are spread evenly over the trace:
/// the metadata counts calls per thread, not per time. The minimum duration
/// is not counted (the metadata cannot say how long calls are).
pub fn estimate(meta: &TraceMeta, threads: &[ThreadSel], window: &Window) -> u64 {
    let (mask, filtered) = (thread_mask(meta, threads), !threads.is_empty());
    let calls: u64 = (0..meta.threads.len())
        .filter(|&t| shown(&mask, filtered, t as u32))
        .map(|t| meta.threads[t].calls)
        .fold(0, u64::saturating_add);
    calls_in(meta, calls, window)
}

/// `calls` spread over the trace's duration: how many fall in the window.
fn calls_in(meta: &TraceMeta, calls: u64, window: &Window) -> u64 {
    let dur = meta.duration_ns;
    if dur == 0 {
        return calls;
    }
    let from = window.from().min(dur);
    let to = window.to().min(dur);
    let span = to.saturating_sub(from);
    (calls as u128 * span as u128 / dur as u128) as u64
}

/// `3.2 GB`, `512 MB`, `900 kB`, `12 B`: decimal units, as file managers say
/// (the text views' [`human_bytes`](crate::human::human_bytes) counts in KiB).
pub fn decimal_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.0} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.0} kB", b / 1e3)
    } else {
        format!("{b} B")
    }
}

/// `20.5M`, `3.1k`, `12`.
fn human_count(n: u64) -> String {
    let f = n as f64;
    if f >= 1e6 {
        format!("{:.1}M", f / 1e6)
    } else if f >= 1e3 {
        format!("{:.1}k", f / 1e3)
    } else {
        n.to_string()
    }
}

/// The one-line warning when an export of `calls` calls (from [`estimate`])
/// will be more than `limit` bytes (the viewer's own, or an override), with
/// a window that would fit: `--to` so many seconds after `--from` (or the
/// trace's start), which keeps about as many calls as fit. None when it fits.
pub fn size_warning(
    meta: &TraceMeta,
    calls: u64,
    window: &Window,
    viewer: Viewer,
    limit: u64,
) -> Option<String> {
    let per = viewer.bytes_per_call();
    let bytes = calls.saturating_mul(per);
    if bytes <= limit {
        return None;
    }
    let hint = narrow_hint(meta, calls, window, limit / per);
    Some(format!(
        "fgtrace: this export will be about {}{}, more than {} can load (about {}); \
         narrow it with --from/--to or --min-duration 10us ({hint})",
        decimal_bytes(bytes),
        viewer.measure(),
        viewer.name(),
        decimal_bytes(limit),
    ))
}

/// `--to 2.191s keeps about 1.2M calls`: the window, from `--from` (or the
/// trace's start), that holds `fit` of the `calls` at the window's rate.
fn narrow_hint(meta: &TraceMeta, calls: u64, window: &Window, fit: u64) -> String {
    let from = window.from().min(meta.duration_ns);
    let to = window.to().min(meta.duration_ns);
    let span = to.saturating_sub(from);
    if calls > 0 && span > 0 {
        let narrow = (span as u128 * fit as u128 / calls as u128) as u64;
        let to = from.saturating_add(narrow);
        format!(
            "--to {} keeps about {} calls",
            flag_time(to),
            human_count(fit)
        )
    } else {
        format!("about {} calls fit", human_count(fit))
    }
}

/// Memory above which a view whose output holds every call it shows says
/// so before it starts ([`memory_warning`]).
pub const MEMORY_WARN_BYTES: u64 = 1 << 30;

/// Memory the flame chart's SVG takes per call drawn: the chart's lines and
/// tooltips, and inferno's frames of each (607 B on a 22M-call trace of 300
/// threads: 13.4 GB peak).
pub const CHART_SVG_MEMORY_PER_CALL: u64 = 600;
/// Memory the flame chart's folded text takes per call (its lines and call
/// starts: 131 B on the same trace, 2.9 GB peak).
pub const CHART_FOLDED_MEMORY_PER_CALL: u64 = 130;
/// Memory the Firefox export takes per call: the profile's tables are built
/// whole before they are written (109 B on the same trace, 2.4 GB peak).
pub const FIREFOX_MEMORY_PER_CALL: u64 = 110;

/// The one-line note when a view that holds every call it shows (`what`,
/// `flame --chart`, `firefox`) will take more than `limit` bytes of memory
/// for `calls` calls (from [`estimate`]), with the flags that bound it and
/// a window that fits. None when it fits.
pub fn memory_warning(
    meta: &TraceMeta,
    calls: u64,
    window: &Window,
    what: &str,
    per_call: u64,
    limit: u64,
) -> Option<String> {
    let bytes = calls.saturating_mul(per_call);
    if bytes <= limit {
        return None;
    }
    let hint = narrow_hint(meta, calls, window, limit / per_call.max(1));
    Some(format!(
        "fgtrace: {what} holds every call it shows in memory: about {} for {} calls, \
         more than {}; bound it with --from/--to, --min-duration or --thread ({hint})",
        decimal_bytes(bytes),
        human_count(calls),
        decimal_bytes(limit),
    ))
}

/// A time as `--to` takes it, in the largest unit it fills, three decimals
/// at most, trailing zeros cut: `2.191s`, `5ms`, `12.5us`, `800ns`.
fn flag_time(ns: u64) -> String {
    let (scale, unit) = match ns {
        1_000_000_000.. => (1_000_000_000, "s"),
        1_000_000.. => (1_000_000, "ms"),
        1_000.. => (1_000, "us"),
        _ => return format!("{ns}ns"),
    };
    let s = format!("{}.{:03}", ns / scale, ns % scale / (scale / 1000));
    format!("{}{unit}", s.trim_end_matches('0').trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_traces::{call, meta};
    use fgtrace_trace::{CallCounters, FutureSpan, LossKind, Lost, Sample};

    fn future(start_ns: u64, dur_ns: u64) -> Event {
        Event::Future(FutureSpan {
            thread: 0,
            site: 0,
            start_ns,
            dur_ns,
            polls: 1,
            cancelled: false,
        })
    }

    fn sample(ts_ns: u64) -> Event {
        Event::Sample(Sample {
            thread: 0,
            ts_ns,
            shadow_depth: 0,
            cut: None,
            frames: vec![0x1000],
        })
    }

    fn lost(at_ns: u64) -> Event {
        Event::Lost(Lost {
            thread: 0,
            depth: 0,
            at_ns,
            count: 3,
            kind: LossKind::Dropped,
        })
    }

    fn counters(thread: u32, v: u64) -> Event {
        Event::Counters(CallCounters {
            thread,
            values: vec![v],
        })
    }

    fn marker(ts_ns: u64) -> Event {
        Event::Marker(fgtrace_trace::Marker {
            thread: 0,
            site: 0,
            depth: 1,
            ts_ns,
        })
    }

    fn values(bits: u64) -> Event {
        Event::Values(fgtrace_trace::CallValues {
            thread: 0,
            values: vec![fgtrace_trace::Value {
                slot: 0,
                tag: 1,
                bits,
            }],
        })
    }

    /// The events `filter` admits, with the filter after.
    fn run(window: Window, events: &[Event]) -> (Vec<Event>, LeftOut) {
        let mut f = WindowFilter::new(window);
        let kept = events.iter().filter(|e| f.admit(e)).cloned().collect();
        (kept, f.left_out)
    }

    #[test]
    fn the_window_keeps_calls_overlapping_it_and_instants_inside_it() {
        // Window [1000, 2000).
        let w = Window {
            from_ns: Some(1_000),
            to_ns: Some(2_000),
            min_dur_ns: 0,
        };
        let events = vec![
            call(0, 0, 0, 0, 3_000),   // around the window: kept
            call(0, 1, 1, 0, 1_000),   // ends where it starts: out
            call(0, 1, 1, 500, 600),   // starts before, ends inside: kept
            call(0, 1, 1, 1_500, 100), // inside: kept
            call(0, 1, 1, 1_999, 0),   // a point inside: kept
            call(0, 1, 1, 2_000, 10),  // starts at the end: out
            call(0, 1, 1, 1_000, 0),   // a point at the start: kept
            call(0, 1, 1, 2_500, 100), // after: out
            sample(999),               // out
            sample(1_000),             // in
            sample(1_999),             // in
            sample(2_000),             // out
            lost(1_500),               // in
            lost(500),                 // out
            future(0, 999),            // out
            future(1_900, 5_000),      // kept
            marker(1_200),             // in
            marker(2_000),             // out
            values(7),                 // the marker's: out with it
        ];
        let (kept, left) = run(w, &events);
        let expect = [0, 2, 3, 4, 6, 9, 10, 12, 15, 16];
        assert_eq!(
            kept,
            expect
                .iter()
                .map(|&i| events[i].clone())
                .collect::<Vec<_>>()
        );
        assert_eq!(
            left,
            LeftOut {
                calls: 3,
                futures: 1,
                samples: 2,
                losses: 1,
                markers: 1,
                off_cpu: 0
            }
        );
    }

    #[test]
    fn the_minimum_duration_keeps_long_calls_and_their_counters() {
        let w = Window {
            min_dur_ns: 10_000,
            ..Window::default()
        };
        let events = vec![
            call(0, 0, 0, 0, 50_000),   // kept
            counters(0, 1),             // its counters: kept
            call(0, 1, 1, 100, 9_999),  // too short
            counters(0, 2),             // its counters: out with it
            call(1, 1, 0, 100, 10_000), // exactly the minimum: kept
            counters(1, 3),
            call(0, 1, 1, 20_000, 20_000), // kept
            sample(5),                     // samples have no duration: kept
            future(0, 100),                // too short
            future(0, 10_000),             // kept
        ];
        let (kept, left) = run(w, &events);
        let expect = [0, 1, 4, 5, 6, 7, 9];
        assert_eq!(
            kept,
            expect
                .iter()
                .map(|&i| events[i].clone())
                .collect::<Vec<_>>()
        );
        assert_eq!(left.calls, 1);
        assert_eq!(left.futures, 1);
        assert_eq!(left.samples, 0);
    }

    #[test]
    fn no_window_keeps_everything_and_counts_nothing() {
        let events = vec![call(0, 0, 0, 0, 1), sample(5), counters(0, 1), lost(0)];
        let (kept, left) = run(Window::default(), &events);
        assert_eq!(kept, events);
        assert_eq!(left, LeftOut::default());
        assert!(Window::default().is_all());
        assert_eq!(Window::default().describe(), "everything");
    }

    #[test]
    fn times_for_the_hint_in_the_unit_they_fill() {
        assert_eq!(flag_time(2_191_000_000), "2.191s");
        assert_eq!(flag_time(3_000_000_000), "3s");
        assert_eq!(flag_time(5_000_000), "5ms");
        assert_eq!(flag_time(12_500), "12.5us");
        assert_eq!(flag_time(800), "800ns");
    }

    #[test]
    fn describing_the_window_and_what_it_left_out() {
        let w = Window {
            from_ns: Some(1_500_000_000),
            to_ns: Some(2_000_000_000),
            min_dur_ns: 10_000,
        };
        assert_eq!(
            w.describe(),
            "from 1.500000000s, to 2.000000000s, at least 10.000us"
        );
        let l = LeftOut {
            calls: 12,
            samples: 3,
            ..LeftOut::default()
        };
        assert_eq!(l.describe(), "12 calls, 3 samples left out");
        assert_eq!(LeftOut::default().describe(), "nothing left out");
    }

    #[test]
    fn the_estimate_spreads_calls_over_the_trace_and_warns_past_the_limit() {
        let mut m = meta(&["run"], &[(1, "main"), (2, "worker")]);
        m.duration_ns = 10_000_000_000; // 10 s
        m.threads[0].calls = 60_000_000;
        m.threads[1].calls = 40_000_000;
        let all = Window::default();
        assert_eq!(estimate(&m, &[], &all), 100_000_000);
        // One thread only.
        assert_eq!(estimate(&m, &["main".parse().unwrap()], &all), 60_000_000);
        // 1 s of 10: a tenth.
        let w = Window {
            from_ns: Some(2_000_000_000),
            to_ns: Some(3_000_000_000),
            min_dur_ns: 0,
        };
        assert_eq!(estimate(&m, &[], &w), 10_000_000);
        // A window past the end holds nothing.
        let late = Window {
            from_ns: Some(20_000_000_000),
            ..Window::default()
        };
        assert_eq!(estimate(&m, &[], &late), 0);

        // 100M calls at 49 B: 4.9 GB, over the Perfetto UI's 1 GiB.
        let warn = size_warning(
            &m,
            100_000_000,
            &all,
            Viewer::Perfetto,
            PERFETTO_LIMIT_BYTES,
        )
        .expect("over the limit");
        assert!(warn.starts_with("fgtrace: this export will be about 4.9 GB, more than the Perfetto UI can load (about 1.1 GB); narrow it with --from/--to or --min-duration 10us ("), "{warn}");
        // 1 GiB / 49 B = 21.9M calls, 2.19 s of this trace.
        assert!(
            warn.ends_with("(--to 2.191s keeps about 21.9M calls)"),
            "{warn}"
        );
        // Under the limit: nothing to say.
        assert_eq!(
            size_warning(&m, 1_000, &all, Viewer::Perfetto, PERFETTO_LIMIT_BYTES),
            None
        );
        // A lower limit (the CLI's override) warns sooner.
        assert!(size_warning(&m, 1_000, &all, Viewer::Chrome, 1_000).is_some());
        let ff = size_warning(&m, 100_000_000, &all, Viewer::Firefox, FIREFOX_LIMIT_BYTES).unwrap();
        assert!(ff.starts_with("fgtrace: this export will be about 12.0 GB of JSON, more than the Firefox Profiler can load"), "{ff}");
    }
}
