//! The `Trace` model: what a session recorded, independent of how it was
//! captured, and the one thing every view reads.
//!
//! A trace is metadata ([`TraceMeta`]: sites, threads, clock, loss totals) plus
//! a stream of [`Event`]s in chunks. Calls of one thread come in *pre-order*
//! (a parent before its children, siblings in time order) with their depth, so
//! a view can print a call graph while reading, without holding the trace in
//! memory. Chunks of different threads are interleaved in time order.
//!
//! In memory the events are kept in the same compact encoding as on disk
//! (about 5 bytes per call), so a 10M-call trace costs tens of MB, not GBs.
//! Samples (timestamp, thread, raw addresses) live beside the calls as their
//! own event kind, on the same clock (nanoseconds since session start).

#![warn(missing_docs)]

// The runtime's side of the model: how recorded chunks become a trace, and
// the writer a recording session appends to. Public for the runtime crate and
// the board decoder, not a stable API.
#[doc(hidden)]
pub mod build;
pub mod buildid;
pub mod clock;
pub mod encoding;
pub mod file;
pub mod json;
pub mod maps;
pub mod merge;
pub mod parallel;
mod pread;
#[doc(hidden)]
pub mod recorded;
mod value;
pub use value::{Shown, Value};

pub use build::TraceBuilder;
pub use encoding::TraceError;
pub use file::{Events, TraceReader};
pub mod offcpu;
pub use offcpu::{OffCpu, OffCpuThread, OffInterval, OffKind, OffTime};

use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;

/// A function (or async fn, or named scope) that `#[traced]` instrumented.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteInfo {
    /// Display name: the fn name (`Type::method` for methods) or the `name = ".."` override.
    pub name: String,
    /// The fn's module path (`module_path!()` at the fn), empty where unknown
    /// (imported traces).
    pub module_path: String,
    /// The source file, as `file!()` spelled it at the fn.
    pub file: String,
    /// The fn's line in `file`, 1-based.
    pub line: u32,
    /// True for `async fn`: its calls are polls, and it also has whole-future spans.
    #[serde(default)]
    pub is_async: bool,
    /// Names of the values each call records (`#[traced(values(..))]`, and
    /// `ret` last when it records the return value): the slots of
    /// [`CallValues`]. Empty for most functions, and in files written
    /// before values existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl SiteInfo {
    /// `module::path::name`, the name filters and `testing` queries match against.
    pub fn full_name(&self) -> String {
        if self.module_path.is_empty() {
            self.name.clone()
        } else {
            format!("{}::{}", self.module_path, self.name)
        }
    }
}

/// A thread that recorded something.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadInfo {
    /// OS thread id (`gettid`).
    pub tid: u32,
    /// `std::thread` name, or `tid-N` where the thread has none.
    pub name: String,
    /// Calls recorded (kept in the trace).
    pub calls: u64,
    /// Calls completed but lost: dropped batches (stream mode) or overwritten
    /// (flight-recorder mode).
    pub lost: u64,
    /// Calls not recorded because the shadow stack was full (ftrace's overruns).
    pub overruns: u64,
    /// Samples taken on this thread and kept.
    #[serde(default)]
    pub samples: u64,
    /// Samples lost (full sample buffer, or `PERF_RECORD_LOST`).
    #[serde(default)]
    pub samples_lost: u64,
}

/// How the calls were kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordMode {
    /// Every call, handed to the collector in batches.
    #[default]
    Stream,
    /// Only the last N calls per thread.
    FlightRecorder,
}

/// The clock the trace was taken with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockInfo {
    /// `tsc`, `rdtime`, `cntvct_el0` or `monotonic`.
    pub source: String,
    /// Ticks per nanosecond, as calibrated at session start (1.0 for the
    /// `monotonic` source).
    pub ticks_per_ns: f64,
    /// The system's monotonic clock at session start (nanosecond 0 of the
    /// trace): `CLOCK_MONOTONIC` on Unix, `QueryPerformanceCounter` on Windows.
    pub start_mono_ns: u64,
    /// Unix time at session start.
    pub start_unix_ns: u64,
}

/// Everything about a trace except its events.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceMeta {
    /// Program that was traced (`argv[0]`).
    pub program: String,
    /// Process id of the traced program; 0 for a merged trace of several
    /// processes.
    pub pid: u32,
    /// The clock the trace's times were read with.
    pub clock: ClockInfo,
    /// Session length in nanoseconds.
    pub duration_ns: u64,
    /// Whether every call was kept or only the last ones of each thread.
    pub mode: RecordMode,
    /// The filters in force while recording, as text (for the header of views).
    pub filters: String,
    /// Indexed by `Call::site`.
    pub sites: Vec<SiteInfo>,
    /// Indexed by `Call::thread`.
    pub threads: Vec<ThreadInfo>,
    /// Per-call counters recorded beside each call (names such as `instructions`), if any.
    #[serde(default)]
    pub counters: Vec<String>,
    /// How samples were taken, if any (`cpu-clock@999Hz`, ...).
    #[serde(default)]
    pub sampling: Option<String>,
    /// Which path took the samples: `perf ring (kernel call chains ...)` or
    /// `signal (...)`, with the reason where the ring was refused.
    /// `None` in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler: Option<String>,
    /// Executable mappings of the traced process at stop (from
    /// `/proc/self/maps`), so sampled addresses can be symbolized later
    /// against the binary and its shared libraries.
    #[serde(default)]
    pub mappings: Vec<Mapping>,
    /// What went wrong while the trace was written or read (a file whose
    /// recording never finished, ...): views show these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Off-CPU time per thread (`Config::off_cpu`), or why it is unavailable;
    /// `None`: not asked for (and every file written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_cpu: Option<OffCpu>,
    /// Functions a session switched to count-only on a thread
    /// (`Config::auto_exclude`): their calls there were tiny, so after the
    /// switch they were counted and no longer recorded. Empty without
    /// auto-exclude (and in every file written before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub count_only: Vec<CountOnly>,
    /// Functions a compile-time plan made count-only (`FGTRACE_PLAN`,
    /// `cargo fgtrace plan`): built without a probe, their calls while the
    /// session recorded were counted exactly, in the whole process, and
    /// none recorded. Empty without a plan (and in every file written
    /// before plans existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counted: Vec<PlannedCount>,
    /// The texts of the string values calls recorded (`&'static str`): a
    /// string [`Value`]'s bits index this table. Empty without string
    /// values (and in every file written before them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strings: Vec<String>,
    /// Where a recording to a file stopped keeping calls before its end:
    /// its size budget was reached or its file system was full. `None`:
    /// the file holds the whole run (and every file written before it
    /// existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_short: Option<CutShort>,
    /// The size budget of a recording that kept the run's end (`ring` at
    /// the budget, in bytes; with several processes, the budget they
    /// shared): the file is its last segment, and each
    /// thread's calls before it are counted as overwritten. In the header
    /// of every segment, so a file whose process was killed says it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<u64>,
    /// A ring's file read with the segment before it (`FILE.prev` beside
    /// it, see [`file::segment_before`]): the calls that segment holds,
    /// counted in the threads' calls rather than as overwritten. `None`:
    /// the file was read alone. Said by the reader, never written.
    #[serde(skip)]
    pub ring_before: Option<u64>,
}

/// A recording to a file that stopped keeping calls before its end; the
/// file was completed there (footer and final metadata) and the calls after
/// it counted in each thread's [`ThreadInfo::lost`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutShort {
    /// Why: `budget` (the size limit) or `disk-full` (the file system).
    pub reason: CutReason,
    /// The size limit in bytes the recording had (`--max-size`,
    /// `FGTRACE_MAX_SIZE`, `Config::max_size`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Time of the cut, in ns from the start of the session.
    pub at_ns: u64,
    /// Calls that completed after the cut: counted, not kept.
    pub calls_after: u64,
    /// Samples taken but not kept because of the cut.
    #[serde(default)]
    pub samples_after: u64,
}

/// Why a recording was [cut short](CutShort).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CutReason {
    /// The file reached its size budget.
    #[default]
    Budget,
    /// Writing failed because the file system was full (`ENOSPC`).
    DiskFull,
}

/// What a ring recording kept, for views' headers: `the file keeps the
/// run's last calls within its size budget of 200.0 kB; older calls LOST
/// (overwritten)`, with `(and FILE.prev: N calls)` where the segment
/// before the file was read with it. `None` where the trace is no ring or
/// lost nothing to it and was read alone.
pub fn ring_text(meta: &TraceMeta) -> Option<String> {
    let l = meta.ring?;
    let lost = meta.total_lost() > 0;
    if !lost && meta.ring_before.is_none() {
        return None;
    }
    let mut s = format!(
        "the file keeps the run's last calls within a size budget of {}",
        size_text(l)
    );
    if let Some(n) = meta.ring_before {
        s += &format!(" (read with FILE.prev beside it: {n} calls of the segment before)");
    }
    if lost {
        s += "; older calls LOST (overwritten)";
    }
    Some(s)
}

impl CutShort {
    /// What happened, for views' headers: `at 1.234 s: its size budget of
    /// 200.0 MB was reached; 12345 later calls LOST`.
    pub fn describe(&self) -> String {
        let why = match (self.reason, self.limit) {
            (CutReason::Budget, Some(l)) => {
                format!("its size budget of {} was reached", size_text(l))
            }
            (CutReason::Budget, None) => "its size budget was reached".to_string(),
            (CutReason::DiskFull, _) => "the file system was full".to_string(),
        };
        let mut s = format!(
            "at {:.3} s: {why}; {} later calls LOST",
            self.at_ns as f64 / 1e9,
            self.calls_after
        );
        if self.samples_after > 0 {
            s += &format!(", {} samples", self.samples_after);
        }
        s
    }
}

/// `n` bytes as text in decimal units (`200.0 MB`), as sizes are given.
pub fn size_text(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "kB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} bytes")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// One function switched to count-only on one thread: after the switch its
/// calls there were counted, exactly, and not recorded (no timestamps, no
/// durations; their callees were still recorded). Its recorded calls are
/// those from before the switch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountOnly {
    /// Index into [`TraceMeta::threads`].
    pub thread: u32,
    /// Index into [`TraceMeta::sites`].
    pub site: u32,
    /// Calls counted, not recorded, after the switch.
    pub calls_after: u64,
    /// When the switch happened, nanoseconds since session start.
    pub switched_at_ns: u64,
    /// The recorded calls the session had seen on the thread when it
    /// decided (the last 1,024 of them decided).
    pub calls_before: u64,
    /// The mean duration of the calls that decided, nanoseconds.
    pub mean_ns_before: u64,
}

/// One function a compile-time plan made count-only, and its calls
/// ([`TraceMeta::counted`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedCount {
    /// Index into [`TraceMeta::sites`].
    pub site: u32,
    /// Calls while the session recorded, on every thread of the process.
    pub calls: u64,
}

/// One executable mapping of the traced process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    /// Address range `[start, end)` in the process.
    pub start: u64,
    /// End of the address range (exclusive).
    pub end: u64,
    /// File offset mapped at `start`.
    pub offset: u64,
    /// Path of the mapped file (`[vdso]` and similar for anonymous ones).
    pub path: String,
    /// GNU build id of the file, hex, when it has one (to detect a rebuilt binary).
    #[serde(default)]
    pub build_id: Option<String>,
}

/// A sum of counts that came from a file: saturates instead of overflowing.
pub fn saturating_sum(counts: impl IntoIterator<Item = u64>) -> u64 {
    counts.into_iter().fold(0, u64::saturating_add)
}

/// Totals saturate: the counts come from a file and may be anything.
impl TraceMeta {
    /// Says in the warnings that `n` string values could not be read (their
    /// placeholders stand in the string table instead).
    pub fn note_unreadable_strings(&mut self, n: u64) {
        if n > 0 {
            self.warnings.push(format!(
                "{n} string value{} could not be read (shown as `<str ADDRESS+LEN ..>`)",
                if n == 1 { "" } else { "s" }
            ));
        }
    }

    /// The program and its pid as the views title a trace: `prog (pid 42)`,
    /// or the program alone for a merged trace (pid 0: several processes,
    /// each named with its pid in `program`).
    pub fn program_and_pid(&self) -> String {
        if self.pid == 0 {
            self.program.clone()
        } else {
            format!("{} (pid {})", self.program, self.pid)
        }
    }

    /// Calls recorded on every thread (saturating).
    pub fn total_calls(&self) -> u64 {
        self.threads
            .iter()
            .fold(0, |n, t| n.saturating_add(t.calls))
    }
    /// Calls lost on every thread: dropped or overwritten (saturating).
    pub fn total_lost(&self) -> u64 {
        self.threads.iter().fold(0, |n, t| n.saturating_add(t.lost))
    }
    /// Samples kept on every thread (saturating).
    pub fn total_samples(&self) -> u64 {
        saturating_sum(self.threads.iter().map(|t| t.samples))
    }
    /// Samples lost on every thread (saturating).
    pub fn total_samples_lost(&self) -> u64 {
        saturating_sum(self.threads.iter().map(|t| t.samples_lost))
    }
    /// Calls not recorded because a shadow stack was full, on every thread
    /// (saturating).
    pub fn total_overruns(&self) -> u64 {
        self.threads
            .iter()
            .fold(0, |n, t| n.saturating_add(t.overruns))
    }
    /// `name-tid`, ftrace's `comm-pid` form.
    pub fn thread_label(&self, thread: u32) -> String {
        match self.threads.get(thread as usize) {
            Some(t) => format!("{}-{}", t.name, t.tid),
            None => format!("?-{thread}"),
        }
    }
    /// Calls of `site` on `thread` that were counted, not recorded
    /// ([`TraceMeta::count_only`]).
    pub fn count_only_calls(&self, thread: u32, site: u32) -> u64 {
        saturating_sum(
            self.count_only
                .iter()
                .filter(|c| c.thread == thread && c.site == site)
                .map(|c| c.calls_after),
        )
    }
    /// Calls counted, not recorded, on every thread.
    pub fn total_count_only(&self) -> u64 {
        saturating_sum(self.count_only.iter().map(|c| c.calls_after))
    }
    /// Calls of the functions a compile-time plan made count-only
    /// ([`TraceMeta::counted`]).
    pub fn total_counted(&self) -> u64 {
        saturating_sum(self.counted.iter().map(|c| c.calls))
    }
    /// The display name of site `site`, or `[unknown site]` for an index the
    /// trace does not have.
    pub fn site_name(&self, site: u32) -> &str {
        self.sites
            .get(site as usize)
            .map(|s| s.name.as_str())
            .unwrap_or("[unknown site]")
    }
}

/// Flags of a call record.
pub mod flags {
    /// The call ended by unwinding (a panic passed through it).
    pub const UNWOUND: u8 = 1;
    /// The call has at least one recorded child (the next event of its thread is deeper).
    pub const HAS_CHILDREN: u8 = 2;
    /// The call is one poll of an `async fn`'s future.
    pub const POLL: u8 = 4;
}

/// One recorded call: entry and exit on one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// Index into `TraceMeta::sites`.
    pub site: u32,
    /// Nesting depth among recorded calls; the outermost is 0.
    pub depth: u32,
    /// Entry time, nanoseconds since session start.
    pub start_ns: u64,
    /// Exit minus entry, nanoseconds.
    pub dur_ns: u64,
    /// See [`flags`].
    pub flags: u8,
}

impl Call {
    /// Exit time, nanoseconds since session start (`start_ns + dur_ns`).
    pub fn end_ns(&self) -> u64 {
        self.start_ns + self.dur_ns
    }
    /// The call ended by unwinding: a panic passed through it ([`flags::UNWOUND`]).
    pub fn unwound(&self) -> bool {
        self.flags & flags::UNWOUND != 0
    }
    /// The call has at least one recorded child ([`flags::HAS_CHILDREN`]).
    pub fn has_children(&self) -> bool {
        self.flags & flags::HAS_CHILDREN != 0
    }
    /// The call is one poll of an `async fn`'s future ([`flags::POLL`]).
    pub fn is_poll(&self) -> bool {
        self.flags & flags::POLL != 0
    }
}

/// An `async fn`'s whole future, from first poll to completion (possibly across threads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FutureSpan {
    /// Thread that saw it complete (or dropped it).
    pub thread: u32,
    /// Index into `TraceMeta::sites` (the `async fn`).
    pub site: u32,
    /// First poll, nanoseconds since session start.
    pub start_ns: u64,
    /// First poll to completion (or drop), nanoseconds.
    pub dur_ns: u64,
    /// Number of polls (saturates at 1023).
    pub polls: u32,
    /// Dropped before completion.
    pub cancelled: bool,
}

/// Why records are missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LossKind {
    /// A batch was dropped because the collector fell behind (stream mode).
    Dropped,
    /// Older calls were overwritten (flight-recorder mode).
    Overwritten,
}

/// Records missing at this point of a thread's stream (uftrace's `LOST` lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lost {
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// Depth of the calls around the gap.
    pub depth: u32,
    /// Where the gap is, nanoseconds since session start.
    pub at_ns: u64,
    /// Calls missing there.
    pub count: u64,
    /// Why they are missing.
    pub kind: LossKind,
}

/// The shadow depth a sample carries when the sampler could not record it
/// (kernel call chains from a perf ring): [`build`] fills it in from the
/// traced calls open at the sample's time.
pub const SHADOW_DEPTH_FROM_TRACE: u32 = u32::MAX;

/// A stack sample: raw return addresses, innermost first (`frames[0]` is the
/// interrupted PC), with the traced shadow-stack depth at that moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// When the sample was taken, nanoseconds since session start.
    pub ts_ns: u64,
    /// Number of traced calls open on the thread when the sample was taken.
    pub shadow_depth: u32,
    /// How many of `frames` (from the innermost) ran below the innermost open
    /// traced call, found by comparing frame addresses with the stack pointer
    /// that call recorded at entry; `frames[cut]` is in the traced function
    /// itself. `None` when no traced call was open or the walk did not reach it.
    pub cut: Option<u32>,
    /// Return addresses in the process's address space, innermost first
    /// (`frames[0]` is the interrupted program counter).
    pub frames: Vec<u64>,
}

/// Counter deltas, entry to exit, of the call just before this event on the
/// same thread: one value per name in [`TraceMeta::counters`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallCounters {
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// Entry-to-exit deltas, in the order of [`TraceMeta::counters`].
    pub values: Vec<u64>,
}

/// The values the call just before this event on the same thread recorded
/// (`#[traced(values(..))]`), in slot order; present only for calls that have
/// values. Follows a `Call` or a `Future` (an `async fn`'s values belong to
/// its whole future).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallValues {
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// The values, each with its slot.
    pub values: Vec<Value>,
}

impl CallValues {
    /// `name=value` pairs, with the names of `site` (and the trace's string
    /// table, [`TraceMeta::strings`], to show strings). A value whose slot the
    /// site does not name (a board's site table carries no names) is left out.
    pub fn named<'a>(
        &'a self,
        site: &'a SiteInfo,
        strings: &'a [String],
    ) -> impl Iterator<Item = (&'a str, Shown<'a>)> + 'a {
        self.values.iter().filter_map(move |v| {
            Some((site.values.get(v.slot as usize)?.as_str(), v.shown(strings)))
        })
    }

    /// `len=83, depth=2` and, apart, the return value (`Ok`), as `graph` prints them.
    pub fn split_display(&self, site: &SiteInfo, strings: &[String]) -> (String, Option<String>) {
        let mut args = Vec::new();
        let mut ret = None;
        for (n, v) in self.named(site, strings) {
            if n == "ret" && v.slot as usize + 1 == site.values.len() {
                ret = Some(v.to_string());
            } else {
                args.push(format!("{n}={v}"));
            }
        }
        (args.join(", "), ret)
    }
}

/// An instant marker: a point in time on a thread (a `tracing` event such as
/// `info!(..)`), among the calls of its thread in pre-order at its time and
/// at the depth a call made there would have (so it is a child of the call
/// open around it). Its values, if any, follow it as [`Event::Values`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// Index into `TraceMeta::sites` (the event's callsite).
    pub site: u32,
    /// The depth a call made at that point would have.
    pub depth: u32,
    /// Nanoseconds since session start.
    pub ts_ns: u64,
}

/// The future a poll or a whole future belongs to. Follows the poll's
/// [`Call`] or the [`FutureSpan`], after its counters and values (so a view
/// that ignores it sees them as before), in traces recorded since futures
/// name themselves; older ones have none, and their polls are matched by
/// time.
///
/// The id is a `#[traced]` future's address (pinned from its first poll
/// until it is dropped) or a `tracing` span's id (unique among open spans):
/// two futures of one site with the same id never overlap in time, so a
/// poll belongs to the future of its site and id whose first poll to end
/// holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FutureId {
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// The future's id.
    pub id: u64,
}

/// A wake of a future: on the waking thread, at its time, among that
/// thread's calls in pre-order at the depth a call made there would have
/// (so it is a child of the call that woke the future). Recorded for
/// `#[traced]` async fns on hosts, while a session records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wake {
    /// Index into `TraceMeta::threads` (the waking thread).
    pub thread: u32,
    /// Index into `TraceMeta::sites` (the future's `async fn`).
    pub site: u32,
    /// The depth a call made at that point would have.
    pub depth: u32,
    /// Nanoseconds since session start.
    pub ts_ns: u64,
    /// The woken future's id (see [`FutureId`]).
    pub id: u64,
}

/// What a future measured of itself. Follows its [`FutureSpan`], after its
/// [`FutureId`], in traces recorded since futures measure themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FutureTimes {
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// Time in its polls while recording (busy), nanoseconds.
    pub busy_ns: u64,
    /// Its polls, exactly (the span's `polls` saturates).
    pub polls: u64,
    /// From each wake to the start of the poll after it, summed (scheduled
    /// time), nanoseconds, with its wakes: where its wakes were watched (a
    /// `#[traced]` async fn on a host; not a board's, not a `tracing` span's).
    pub waits: Option<Waits>,
}

/// A future's scheduled time and wakes (see [`FutureTimes::waits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waits {
    /// From each wake to the start of the poll after it (from that poll's
    /// end, for a wake during a poll), summed, nanoseconds.
    pub scheduled_ns: u64,
    /// Wakes, all of them.
    pub wakes: u64,
}

/// One item of a trace's event stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A traced call.
    Call(Call),
    /// An `async fn`'s whole future.
    Future(FutureSpan),
    /// Calls missing at this point of the thread's stream.
    Lost(Lost),
    /// A stack sample.
    Sample(Sample),
    /// Follows the `Call` it belongs to.
    Counters(CallCounters),
    /// Follows the `Call` (or `Future`, or `Marker`) it belongs to (after
    /// its `Counters`).
    Values(CallValues),
    /// An instant marker, in pre-order among the calls.
    Marker(Marker),
    /// Follows a poll's `Call` or a `Future` (after its `Counters` and
    /// `Values`): the future it belongs to.
    FutureId(FutureId),
    /// A wake of a future, in pre-order among the waking thread's calls.
    Wake(Wake),
    /// Follows a `Future`'s `FutureId`: what the future measured of itself.
    FutureTimes(FutureTimes),
}

impl Event {
    /// The thread (index into `TraceMeta::threads`) the event belongs to.
    pub fn thread(&self) -> u32 {
        match self {
            Event::Call(c) => c.thread,
            Event::Future(f) => f.thread,
            Event::Lost(l) => l.thread,
            Event::Sample(s) => s.thread,
            Event::Counters(c) => c.thread,
            Event::Values(v) => v.thread,
            Event::Marker(m) => m.thread,
            Event::FutureId(f) => f.thread,
            Event::Wake(w) => w.thread,
            Event::FutureTimes(f) => f.thread,
        }
    }
}

/// A recorded trace: metadata plus encoded events. Returned by
/// `fgtrace::Session::stop`, saved with [`Trace::save`], read
/// back with [`Trace::load`] (or streamed with [`TraceReader`]).
///
/// A trace a session just returned holds its calls as recorded (exit order,
/// see `recorded`); the pre-order events views read are built from them the
/// first time something reads events, so `stop` itself never sorts.
///
/// ```
/// use fgtrace::{Event, Trace};
///
/// #[fgtrace::traced]
/// fn outer() -> u32 { inner() + inner() }
/// #[fgtrace::traced]
/// fn inner() -> u32 { 1 }
///
/// let session = fgtrace::Session::start(fgtrace::Config::builtin())?;
/// outer();
/// let trace = session.stop()?;
///
/// // Events in pre-order: a parent before its children, with their depth.
/// let calls: Vec<(&str, u32)> = trace
///     .events()
///     .filter_map(|e| match e {
///         Event::Call(c) => Some((trace.meta.site_name(c.site), c.depth)),
///         _ => None,
///     })
///     .collect();
/// assert_eq!(calls, [("outer", 0), ("inner", 1), ("inner", 1)]);
///
/// // The file format, to a file (`save`, `load`) or any writer and reader.
/// let mut bytes = Vec::new();
/// trace.write_to(&mut bytes)?;
/// let back = Trace::read_from(&bytes[..])?;
/// assert!(back.damage().is_none());
/// assert_eq!(back.calls().collect::<Vec<_>>(), trace.calls().collect::<Vec<_>>());
/// assert_eq!(back.meta.total_calls(), 3);
///
/// // What is not a trace is an error, not a panic.
/// assert!(Trace::read_from(&b"not a trace"[..]).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Everything but the events: sites, threads, clock, loss totals.
    pub meta: TraceMeta,
    chunks: std::sync::OnceLock<Vec<encoding::Chunk>>,
    source: Option<std::sync::Arc<build::CallStore>>,
    /// Where a loaded file was damaged (`None`: read whole, or built here).
    pub damage: Option<Damage>,
}

/// Where a trace file was found damaged by [`Trace::load`]: the trace holds
/// every chunk before that point (each checked against its CRC) and nothing
/// from it on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset in the file where the damage starts.
    pub offset: u64,
    /// What is wrong there (the reader's error, with its own byte offset).
    pub error: String,
    /// Chunks and events kept, all from before `offset`.
    pub chunks_kept: u64,
    /// Events in the chunks kept.
    pub events_kept: u64,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the trace file is damaged from byte {}: {}; kept the {} chunks ({} events) before it, \
             nothing after",
            self.offset, self.error, self.chunks_kept, self.events_kept
        )
    }
}

impl Trace {
    /// A trace whose events are already in pre-order chunks.
    pub fn from_chunks(meta: TraceMeta, chunks: Vec<encoding::Chunk>) -> Trace {
        Trace {
            meta,
            chunks: std::sync::OnceLock::from(chunks),
            source: None,
            damage: None,
        }
    }

    /// A trace whose events are built from `source` when first read.
    pub fn from_source(meta: TraceMeta, source: build::CallStore) -> Trace {
        Trace {
            meta,
            chunks: std::sync::OnceLock::new(),
            source: Some(std::sync::Arc::new(source)),
            damage: None,
        }
    }

    /// The pre-order chunks, built on first use.
    pub fn chunks(&self) -> &[encoding::Chunk] {
        self.chunks.get_or_init(|| match &self.source {
            None => Vec::new(),
            Some(s) => s.chunks(&self.meta).unwrap_or_else(|e| {
                eprintln!("fgtrace: cannot read the recorded calls: {e}");
                Vec::new()
            }),
        })
    }

    /// The pre-order chunks, taken out of the trace (built first if needed).
    pub fn into_chunks(mut self) -> Vec<encoding::Chunk> {
        self.chunks();
        self.chunks.take().unwrap_or_default()
    }

    /// The trace's metadata (same as the `meta` field).
    pub fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    /// All events, chunk by chunk (threads interleaved by time, each thread in pre-order).
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        self.chunks()
            .iter()
            .flat_map(|c| c.decode().expect("in-memory chunks are well formed"))
    }

    /// All calls, in the order of [`Trace::events`].
    pub fn calls(&self) -> impl Iterator<Item = Call> + '_ {
        self.events().filter_map(|e| match e {
            Event::Call(c) => Some(c),
            _ => None,
        })
    }

    /// All samples.
    pub fn samples(&self) -> impl Iterator<Item = Sample> + '_ {
        self.events().filter_map(|e| match e {
            Event::Sample(s) => Some(s),
            _ => None,
        })
    }

    /// Writes the trace in the fgtrace file format.
    pub fn write_to(&self, w: impl io::Write) -> io::Result<()> {
        file::write_trace(w, &self.meta, self.chunks())
    }

    /// Saves the trace to a file (see [`encoding`] for the layout).
    pub fn save(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let f = std::fs::File::create(path.as_ref())?;
        let mut w = io::BufWriter::new(f);
        self.write_to(&mut w)?;
        io::Write::flush(&mut w)
    }

    /// Loads a whole trace file into memory. For large files prefer
    /// [`TraceReader`], which streams.
    ///
    /// A file damaged after its metadata (a bad checksum, a truncated or
    /// undecodable chunk) still loads: the trace holds every chunk before the
    /// damage, and [`Trace::damage`] says where it starts and what was kept.
    /// A file whose header or metadata is damaged (nothing can be read) is
    /// an error.
    pub fn load(path: impl AsRef<Path>) -> Result<Trace, TraceError> {
        Trace::read_all(TraceReader::open(path)?)
    }

    /// Reads a trace from any reader (damage handled as by [`Trace::load`]).
    pub fn read_from(r: impl io::Read) -> Result<Trace, TraceError> {
        Trace::read_all(TraceReader::new(r)?)
    }

    /// Where the file this trace was loaded from is damaged, if it is: the
    /// trace holds only what came before. Check it after [`Trace::load`]
    /// before taking a trace's counts as complete.
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    /// Every chunk is decoded once here: a chunk whose checksum holds but
    /// whose events do not (written by a buggy or hostile program) ends the
    /// trace there, as damage naming its offset, not a panic in
    /// [`Trace::events`] later.
    fn read_all<R: io::Read>(mut r: TraceReader<R>) -> Result<Trace, TraceError> {
        let meta = r.meta().clone();
        let mut chunks = Vec::new();
        let mut events = 0u64;
        let mut damage = None;
        loop {
            let at = r.offset();
            let err = match r.next_chunk() {
                Ok(None) => break,
                Ok(Some(c)) => match c.decode() {
                    Ok(evs) => {
                        events += evs.len() as u64;
                        chunks.push(c);
                        continue;
                    }
                    Err(e) => e,
                },
                Err(e) => e,
            };
            damage = Some(Damage {
                offset: at,
                error: err.to_string(),
                chunks_kept: chunks.len() as u64,
                events_kept: events,
            });
            break;
        }
        Ok(Trace {
            damage,
            ..Trace::from_chunks(meta, chunks)
        })
    }

    /// Size of the encoded events in bytes (what the file holds besides metadata).
    pub fn encoded_len(&self) -> usize {
        self.chunks().iter().map(|c| c.payload.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_count_only() -> TraceMeta {
        TraceMeta {
            program: "p".into(),
            sites: vec![SiteInfo {
                name: "len".into(),
                module_path: "m".into(),
                file: "f.rs".into(),
                line: 1,
                is_async: false,
                values: Vec::new(),
            }],
            threads: vec![ThreadInfo {
                tid: 7,
                name: "main".into(),
                calls: 1024,
                ..ThreadInfo::default()
            }],
            count_only: vec![CountOnly {
                thread: 0,
                site: 0,
                calls_after: 98_976,
                switched_at_ns: 1_500,
                calls_before: 1024,
                mean_ns_before: 12,
            }],
            ..TraceMeta::default()
        }
    }

    #[test]
    fn count_only_switches_survive_a_file_and_old_files_read_without_them() {
        let t = Trace::from_chunks(with_count_only(), Vec::new());
        let mut bytes = Vec::new();
        t.write_to(&mut bytes).unwrap();
        let back = Trace::read_from(&bytes[..]).unwrap();
        assert_eq!(back.meta.count_only, t.meta.count_only);
        assert_eq!(back.meta.count_only_calls(0, 0), 98_976);
        assert_eq!(back.meta.total_count_only(), 98_976);

        // Without switches nothing new is written: the file is what a
        // writer from before count-only made, and it reads the same.
        let mut old = with_count_only();
        old.count_only.clear();
        let json = json::to_string(&old).unwrap();
        assert!(!json.contains("count_only"), "{json}");
        let mut bytes = Vec::new();
        Trace::from_chunks(old.clone(), Vec::new())
            .write_to(&mut bytes)
            .unwrap();
        let back = Trace::read_from(&bytes[..]).unwrap();
        assert_eq!(back.meta, old);
        assert_eq!(back.meta.count_only_calls(0, 0), 0);
        // And metadata with the field reads in a reader that ignores it.
        #[derive(Deserialize)]
        struct OldMeta {
            program: String,
        }
        let new = json::to_vec(&with_count_only()).unwrap();
        let o: OldMeta = json::from_slice(&new).unwrap();
        assert_eq!(o.program, "p");
    }
}
