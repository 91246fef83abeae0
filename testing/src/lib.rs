//! Timing assertions for tests: capture what a closure called, then assert on
//! call counts, nesting, order, durations and retired instructions, with the
//! function graph of the offending call in the failure message.
//!
//! ```
//! use std::time::Duration;
//!
//! #[fgtrace::traced]
//! fn parse_headers(s: &str) -> usize { s.lines().count() }
//!
//! #[fgtrace::traced]
//! fn handle(req: &str) -> usize { parse_headers(req) }
//!
//! let cap = fgtrace::testing::capture(|| handle("a: 1\nb: 2"));
//! assert_eq!(cap.calls("parse_headers"), 1);
//! assert!(cap.max("parse_headers") < Duration::from_millis(200));
//! // The same, but a failure prints the call graph of the slowest call:
//! cap.assert_max("parse_headers", Duration::from_millis(200));
//! cap.assert_inside("parse_headers", "handle");
//! ```
//!
//! **Isolation.** A capture records only the calling thread, into a private
//! buffer: tests running in parallel in one binary never see each other's
//! calls, and no [`Session`](fgtrace_runtime::Session) is needed (one may run at the same
//! time). Threads the closure starts join the capture only when asked:
//! through [`spawn`], or [`link`] + [`Link::run`] (scoped threads, pools).
//! Test bodies that a harness runs on another thread (rstest/ntest
//! `#[timeout]`) capture on that thread like any other.
//!
//! **Names.** A query matches a function by its display name (`parse`,
//! `Parser::parse`), by its full path (`my_crate::parser::parse`), or by a
//! path suffix that ends at a `::` boundary (`parser::parse`). Every function
//! a name matches counts.
//!
//! **Async.** [`capture_async`] captures a future's polls on whichever thread
//! polls it. For an `async fn`, [`Capture::calls`] and the duration queries
//! count whole futures (first poll to completion); [`Capture::polls`] counts
//! polls, and nesting queries see the polls.
//!
//! **Noise.** Durations vary from run to run; [`repeat`] runs the closure
//! several times after a warm-up, and [`Runs::median`] / [`Runs::min`] assert
//! on the median or fastest run. Relative budgets ([`Capture::assert_ratio`])
//! survive a slower machine. Retired instructions
//! ([`Counters`], [`Capture::assert_instructions`]) are deterministic where
//! the CPU exposes them; where it does not, those assertions are skipped with
//! a message on stderr, or fail if counters are [`Counters::Required`].
//!
//! **Allocations.** With [`Counting`](fgtrace_runtime::alloc::Counting) as the global
//! allocator, [`Capture::allocations`], [`Capture::self_allocations`],
//! [`Capture::allocated_bytes`] and [`Capture::assert_allocations`] give exact
//! counts per function, the same on every machine; without it the queries
//! return `None` and the assertions panic naming the fix.
//!
//! **Snapshots.** [`Capture::assert_snapshot`] keeps calls and allocation
//! counts per function in `tests/snapshots/<name>.fgsnap` and fails with a
//! diff when they change (`FGTRACE_UPDATE=1` rewrites; see the module
//! source for the rules on new snapshots under `CI`).
//! **Off-CPU time.** With [`Options::off_cpu`], each call also gets the
//! time its thread was switched out, blocked or preempted
//! ([`Capture::off_cpu`], [`Capture::blocked`]), and
//! [`Capture::assert_no_blocking`] checks that code never blocks (an async
//! handler on its executor's thread). Skipped with the reason where the
//! kernel refuses `perf_event_open`.
//!
//! **Long polls.** [`Capture::assert_no_long_polls`] fails when a poll
//! of an `async fn` held its thread longer than a limit (a blocking call
//! inside it), with that poll's future, thread and graph.
//!
//! **Markers.** With `fgtrace::tracing`'s layer or subscriber, `tracing`
//! events are instant markers: [`Capture::markers`] by the event's name,
//! [`Capture::markers_inside`] by the call they happened in, each a
//! [`CapturedMarker`] with its time, depth, enclosing call and values.
//!
//! **Attribute.** [`budget`] puts a test's limits on the test fn itself.

#![warn(missing_docs)]

// Hidden: what `#[budget]` expands to calls it; not an API to call by hand.
#[doc(hidden)]
#[path = "budget.rs"]
pub mod __budget;
mod allocs;
mod captured;
pub(crate) mod counters;
mod markers;
mod offcpu;
mod polls;
mod query;
mod render;
mod runs;
mod scheduled;
mod snapshot;
mod switches;
mod values;

pub use captured::{Capture, CounterCheck};
pub use counters::{CounterStatus, Counters};
pub use markers::CapturedMarker;
pub use runs::{Runs, Stat, Summary};
pub use values::{CapturedCall, Growth, Measure, GROWTH_TOLERANCE};

/// A test's performance budget as an attribute: the test body runs inside a
/// capture, then every limit is checked, and a failure shows the offending
/// call's graph. Shorter than a capture plus one assertion per line:
///
/// ```
/// # use std::time::Duration;
/// #[fgtrace::traced]
/// fn parse_headers(s: &str) -> usize { s.lines().count() }
/// #[fgtrace::traced]
/// fn handle(s: &str) -> usize { parse_headers(s) }
///
/// #[fgtrace::testing::budget(
///     parse_headers(calls = 1, max = "50ms", inside = handle),
///     handle(instructions = 10_000_000),
/// )]
/// fn handler_stays_cheap() {
///     handle("a: 1\nb: 2");
/// }
/// # handler_stays_cheap();
/// ```
///
/// Limits, per function (`name(..)`, or `"path::to::name"(..)`):
/// `calls = N`, `max_calls = N`; `max`, `total`, `self_total`, `p50`, `p99`
/// (any `pNN`) `= "200us"` (units `ns`, `us`, `ms`, `s`); `instructions = N`
/// (per call), `instructions_total = N`; `off_cpu = "1ms"`, `blocked =
/// "0ns"` (per call; the capture then records off-CPU time, see
/// [`Options::off_cpu`]); `inside = g`, `not_inside = g`.
/// Options: `runs = N` (sync fns; repeats the body, time and instruction
/// limits then apply to the median run), `warmup = N` (default 1 with
/// `runs`), `stat = "median" | "min" | "max"`, `counters = "auto" |
/// "required" | "off"` (default `auto` when an instruction limit is given),
/// `crate = path` where fgtrace is not `::fgtrace` (a renamed dependency:
/// `#[fgt::testing::budget(crate = fgt, ..)]`).
/// Several `#[budget]`s on one fn are merged into one capture. With
/// `#[tokio::test]` put either attribute first: below it the budget wraps
/// the runtime's `block_on` (one thread, captured whole); above it, the
/// async body is captured with [`capture_async`].
pub use fgtrace_macros::budget;

use fgtrace_runtime::recorder::{self, CaptureOut, SavedState, Suspended};
use fgtrace_trace::clock::ClockPoint;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Shadow-stack depth of a capture: deeper calls are counted as overruns.
const CAPTURE_STACK: u32 = 1023;

/// Runs `f` on this thread and records every `#[traced]` call it makes.
///
/// ```
/// #[fgtrace::traced]
/// fn fetch(id: u32) -> u32 { lookup(id) }
/// #[fgtrace::traced]
/// fn lookup(id: u32) -> u32 { id + 1 }
///
/// let cap = fgtrace::testing::capture(|| (0..3).map(fetch).sum::<u32>());
/// assert_eq!(cap.calls("lookup"), 3);
/// // Assertions fail with the function graph of the offending call.
/// cap.assert_calls("fetch", 3);
/// cap.assert_inside("lookup", "fetch");
/// ```
///
/// A broken expectation panics, naming what was expected and found:
///
/// ```should_panic
/// #[fgtrace::traced]
/// fn lookup() {}
///
/// let cap = fgtrace::testing::capture(|| { lookup(); lookup(); });
/// cap.assert_calls("lookup", 1); // two calls: panics
/// ```
pub fn capture<R>(f: impl FnOnce() -> R) -> Capture {
    Options::new().capture(f)
}

/// Like [`capture`], and also returns what `f` returned.
pub fn capture_with<R>(f: impl FnOnce() -> R) -> (R, Capture) {
    Options::new().capture_with(f)
}

/// Like [`capture`], with retired-instruction counts per call where the CPU
/// allows ([`Counters::Auto`]).
///
/// ```
/// #[fgtrace::traced]
/// fn sum(n: u64) -> u64 { (0..n).sum() }
///
/// let cap = fgtrace::testing::capture_counted(|| sum(std::hint::black_box(1000)));
/// // Passes where counters work; elsewhere prints why it was skipped.
/// cap.assert_instructions("sum", 1_000_000);
/// ```
pub fn capture_counted<R>(f: impl FnOnce() -> R) -> Capture {
    Options::new().counters(Counters::Auto).capture(f)
}

/// Captures a future: each poll is captured on the thread that polls it, so
/// other tasks of the runtime stay out. Resolves to the future's output and
/// the capture.
///
/// ```
/// #[fgtrace::traced]
/// async fn fetch() -> u32 { 7 }
///
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let (v, cap) = fgtrace::testing::capture_async(fetch()).await;
/// assert_eq!((v, cap.calls("fetch"), cap.polls("fetch")), (7, 1, 1));
/// # });
/// ```
pub fn capture_async<F: Future>(fut: F) -> CaptureFuture<F> {
    Options::new().capture_async(fut)
}

/// Runs `f` once as a warm-up, then `runs` times, each run captured.
///
/// ```
/// use std::time::Duration;
/// #[fgtrace::traced]
/// fn step() { std::hint::black_box(0); }
///
/// let runs = fgtrace::testing::repeat(9, || step());
/// runs.median().assert_max("step", Duration::from_millis(50));
/// assert_eq!(runs.min().calls("step"), 1);
/// ```
pub fn repeat<R>(runs: usize, f: impl FnMut() -> R) -> Runs {
    Options::new().runs(runs).repeat(f)
}

/// How to capture: counters, and repetitions for [`Options::repeat`].
///
/// ```
/// use fgtrace::testing::{Counters, Options};
/// #[fgtrace::traced]
/// fn work() -> u64 { (0..100u64).map(std::hint::black_box).sum() }
///
/// let runs = Options::new().counters(Counters::Auto).warmup(2).runs(5).repeat(work);
/// assert_eq!(runs.len(), 5);
/// runs.min().assert_instructions("work", 100_000);
/// ```
#[derive(Clone, Debug)]
pub struct Options {
    counters: Counters,
    off_cpu: bool,
    warmup: usize,
    runs: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            counters: Counters::Off,
            off_cpu: false,
            warmup: 1,
            runs: 11,
        }
    }
}

impl Options {
    /// No counters; for `repeat`: 1 warm-up run, then 11 runs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Count retired instructions per call ([`Counters::Auto`] or `Required`).
    pub fn counters(mut self, c: Counters) -> Self {
        self.counters = c;
        self
    }

    /// Also record when each captured thread was off the CPU, so that
    /// [`Capture::off_cpu`], [`Capture::blocked`] and
    /// [`Capture::assert_no_blocking`] work. Each thread of the capture
    /// opens a context-switch `perf_event` on itself; where the kernel
    /// refuses, those queries return `None` and the assertions are
    /// SKIPPED with the reason (`FGTRACE_OFFCPU=required`: panic instead).
    ///
    /// ```
    /// #[fgtrace::traced]
    /// fn nap() { std::thread::sleep(std::time::Duration::from_millis(2)); }
    ///
    /// let cap = fgtrace::testing::Options::new().off_cpu(true).capture(nap);
    /// // `None` where the kernel refused (the reason: `cap.off_cpu_unavailable()`).
    /// if let Some(blocked) = cap.blocked("nap") {
    ///     assert!(blocked >= std::time::Duration::from_millis(1));
    /// }
    /// // `cap.assert_no_blocking("nap")` would fail: sleeping is blocking.
    /// ```
    pub fn off_cpu(mut self, yes: bool) -> Self {
        self.off_cpu = yes;
        self
    }

    /// Runs made and thrown away before `repeat` starts measuring (caches,
    /// lazy statics, first-call registrations).
    pub fn warmup(mut self, n: usize) -> Self {
        self.warmup = n;
        self
    }

    /// Measured runs of `repeat` (at least 1).
    pub fn runs(mut self, n: usize) -> Self {
        self.runs = n.max(1);
        self
    }

    /// Runs `f` on this thread and records every `#[traced]` call it makes.
    #[track_caller]
    pub fn capture<R>(&self, f: impl FnOnce() -> R) -> Capture {
        self.capture_with(f).1
    }

    /// Like [`Options::capture`], and also returns what `f` returned.
    #[track_caller]
    pub fn capture_with<R>(&self, f: impl FnOnce() -> R) -> (R, Capture) {
        let sink = Sink::new(self.counters, self.off_cpu);
        let origin = ClockPoint::now();
        let (r, part, status) = run_part(self.counters, &sink, f);
        let end = ClockPoint::now();
        let mut parts = vec![part];
        parts.extend(sink.close());
        (r, Capture::build(origin, end, parts, status))
    }

    /// Captures a future (see [`capture_async`]).
    pub fn capture_async<F: Future>(&self, fut: F) -> CaptureFuture<F> {
        CaptureFuture {
            inner: Box::pin(fut),
            mode: self.counters,
            off_cpu: self.off_cpu,
            state: None,
        }
    }

    /// Warm-up runs, then the measured runs, each captured.
    #[track_caller]
    pub fn repeat<R>(&self, mut f: impl FnMut() -> R) -> Runs {
        for _ in 0..self.warmup {
            let _ = self.capture(&mut f);
        }
        Runs::new((0..self.runs).map(|_| self.capture(&mut f)).collect())
    }
}

/// One thread's share of a capture.
pub(crate) struct Part {
    tid: u32,
    name: String,
    out: CaptureOut,
    /// Its switches, when off-CPU time was asked for.
    pub(crate) off: switches::PartOff,
}

/// Where linked threads leave their parts until the capture ends.
struct Sink {
    counters: Counters,
    off_cpu: bool,
    /// `None` once the capture has ended: later parts are dropped.
    parts: Mutex<Option<Vec<Part>>>,
}

impl Sink {
    fn new(counters: Counters, off_cpu: bool) -> Arc<Sink> {
        Arc::new(Sink {
            counters,
            off_cpu,
            parts: Mutex::new(Some(Vec::new())),
        })
    }

    fn close(&self) -> Vec<Part> {
        self.parts.lock().take().unwrap_or_default()
    }
}

thread_local! {
    /// Captures running on this thread, innermost last (for `link`).
    static CURRENT: RefCell<Vec<Arc<Sink>>> = const { RefCell::new(Vec::new()) };
}

/// Ends the capture (if still running) and leaves `CURRENT` as it was, also
/// when the captured code panics.
struct Running(Option<SavedState>);

impl Running {
    fn start(sink: &Arc<Sink>, saved: SavedState) -> Running {
        CURRENT.with(|c| c.borrow_mut().push(sink.clone()));
        Running(Some(saved))
    }

    fn take(mut self) -> SavedState {
        self.0.take().expect("capture running")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        CURRENT.with(|c| c.borrow_mut().pop());
        if let Some(s) = self.0.take() {
            recorder::capture_end(s);
        }
    }
}

#[track_caller]
fn run_part<R>(
    mode: Counters,
    sink: &Arc<Sink>,
    f: impl FnOnce() -> R,
) -> (R, Part, counters::CounterStatus) {
    let (src, status) = counters::resolve(mode);
    let ring = switches::begin(sink.off_cpu);
    let running = Running::start(sink, recorder::capture_begin(CAPTURE_STACK, src));
    let r = f();
    let out = recorder::capture_end(running.take());
    (
        r,
        Part {
            tid: fgtrace_runtime::thread::os_tid(),
            name: fgtrace_runtime::thread::name(),
            out,
            off: switches::end(ring),
        },
        status,
    )
}

/// A handle on the capture running on some thread, for other threads to
/// record into it. Get one with [`link`]; [`spawn`] uses it for you.
///
/// ```
/// #[fgtrace::traced]
/// fn work() {}
///
/// let cap = fgtrace::testing::capture(|| {
///     let link = fgtrace::testing::link().unwrap();
///     std::thread::scope(|s| {
///         for _ in 0..3 {
///             let link = link.clone();
///             s.spawn(move || link.run(work));
///         }
///     });
/// });
/// assert_eq!(cap.calls("work"), 3);
/// assert_eq!(cap.trace().meta().threads.len(), 4);
/// ```
#[derive(Clone)]
pub struct Link(Arc<Sink>);

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Link")
    }
}

/// The innermost capture running on this thread, if any.
pub fn link() -> Option<Link> {
    CURRENT.with(|c| c.borrow().last().cloned().map(Link))
}

impl Link {
    /// Runs `f` on this thread and adds what it called to the linked capture
    /// (as a thread of its own). Calls made after that capture has ended are
    /// not recorded: join the threads before the captured closure returns.
    #[track_caller]
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let (r, part, _) = run_part(self.0.counters, &self.0, f);
        if let Some(parts) = self.0.parts.lock().as_mut() {
            parts.push(part);
        }
        r
    }
}

/// `std::thread::spawn`, with the new thread's calls recorded into the
/// capture running on the calling thread (if any).
///
/// ```
/// #[fgtrace::traced]
/// fn work() {}
///
/// let cap = fgtrace::testing::capture(|| {
///     work();
///     fgtrace::testing::spawn(work).join().unwrap();
///     std::thread::spawn(work).join().unwrap(); // not linked: not recorded
/// });
/// assert_eq!(cap.calls("work"), 2);
/// ```
pub fn spawn<F, T>(f: F) -> std::thread::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let link = link();
    std::thread::spawn(move || match link {
        Some(l) => l.run(f),
        None => f(),
    })
}

/// The future of [`capture_async`]: resolves to the output and the capture.
pub struct CaptureFuture<F: Future> {
    inner: Pin<Box<F>>,
    mode: Counters,
    off_cpu: bool,
    state: Option<AsyncState>,
}

/// A started capture between polls.
struct AsyncState {
    parked: Suspended,
    sink: Arc<Sink>,
    origin: ClockPoint,
    status: CounterStatus,
    tid: u32,
    name: String,
    /// Off-CPU time of the polls, on whichever threads ran them.
    off: switches::AsyncOff,
}

impl<F: Future> Future for CaptureFuture<F> {
    type Output = (F::Output, Capture);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let (saved, st) = match this.state.take() {
            None => {
                let origin = ClockPoint::now();
                let (src, status) = counters::resolve(this.mode);
                let saved = recorder::capture_begin(CAPTURE_STACK, src);
                let st = AsyncState {
                    parked: Suspended::empty(),
                    sink: Sink::new(this.mode, this.off_cpu),
                    origin,
                    status,
                    tid: fgtrace_runtime::thread::os_tid(),
                    name: fgtrace_runtime::thread::name(),
                    off: switches::AsyncOff::new(this.off_cpu),
                };
                (saved, st)
            }
            Some(mut st) => {
                let src = if st.status.is_counting() {
                    counters::this_thread()
                } else {
                    None
                };
                let parked = std::mem::replace(&mut st.parked, Suspended::empty());
                (recorder::capture_resume(parked, src), st)
            }
        };
        let mut st = st;
        let window = st.off.poll_begins();
        let running = Running::start(&st.sink, saved);
        let r = this.inner.as_mut().poll(cx);
        let saved = running.take();
        st.off.poll_ends(window);
        match r {
            Poll::Pending => {
                st.parked = recorder::capture_suspend(saved);
                this.state = Some(st);
                Poll::Pending
            }
            Poll::Ready(v) => {
                let out = recorder::capture_end(saved);
                let end = ClockPoint::now();
                let mut parts = vec![Part {
                    tid: st.tid,
                    name: st.name,
                    out,
                    off: st.off.finish(),
                }];
                parts.extend(st.sink.close());
                Poll::Ready((v, Capture::build(st.origin, end, parts, st.status)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static LEAF: fgtrace_core::site::Site =
        fgtrace_core::site::Site::new("leaf", module_path!(), file!(), line!(), false);
    static ROOT: fgtrace_core::site::Site =
        fgtrace_core::site::Site::new("root", module_path!(), file!(), line!(), false);

    fn leaf() {
        let _g = fgtrace_core::probe::enter(&LEAF);
    }

    fn root(n: usize) {
        let _g = fgtrace_core::probe::enter(&ROOT);
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
                    (
                        i,
                        cap.calls("root"),
                        cap.calls("leaf"),
                        cap.calls("fgtrace_testing::tests::leaf"),
                    )
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

    /// More records than one capture buffer holds: the hand-off keeps every
    /// call, and counter deltas stay aligned with their calls.
    #[test]
    fn large_captures_keep_every_call_and_its_counters() {
        let n = 3 * (1 << 14) / 2;
        let cap = Options::new().counters(Counters::Auto).capture(|| root(n));
        assert_eq!(cap.calls("leaf"), n);
        assert_eq!(cap.calls("root"), 1);
        if let Some(v) = cap.instructions_of("leaf") {
            assert_eq!(v.len(), n);
            let (lo, hi) = (v.iter().min().unwrap(), v.iter().max().unwrap());
            assert!(hi - lo < 50, "an empty fn's count varies: {lo}..{hi}");
        }
    }

    #[test]
    fn a_panicking_closure_leaves_the_thread_clean() {
        let r = std::panic::catch_unwind(|| {
            capture(|| {
                root(1);
                panic!("boom")
            })
        });
        assert!(r.is_err());
        assert!(link().is_none());
        assert_eq!(fgtrace_core::probe::current_depth(), 0);
        assert_eq!(capture(|| root(2)).calls("leaf"), 2);
    }
}
