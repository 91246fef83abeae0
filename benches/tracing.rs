//! What a `tracing` span costs, side by side in one process: 1000 spans per
//! iteration (`info_span!("leaf").in_scope(..)`: create, enter, exit,
//! close), the figure per span is the iteration time divided by 1000.
//!
//! * `no_subscriber`: `tracing`'s own floor (a disabled span, `Dispatch::none`),
//! * `registry`: `tracing_subscriber::Registry` with no layer (bimodal
//!   from sample to sample on the 2-core VM; `registry_noop`, the Registry
//!   with `layer::Identity`, does the same work and is stable),
//! * `registry_timing`: the Registry and the cheapest layer that times spans
//!   the way `tracing-subscriber`'s `fmt` does for `FmtSpan::CLOSE` (busy
//!   time kept in the span's extensions, folded into a sum on close; no
//!   output),
//! * `registry_clock`: the Registry and a layer that only reads the clock on
//!   entry and exit into a thread-local stack (no per-span storage: the
//!   least any timing layer can do),
//! * `registry_fgtrace` / `registry_fgtrace_off`: the Registry and
//!   `fgtrace::tracing::Layer`, recording (flight recorder, so memory stays
//!   bounded however long divan runs) / with the session paused,
//! * `registry_chrome`: the Registry and `tracing-chrome` (its writer thread
//!   writing to `io::sink`),
//! * `subscriber` / `subscriber_off`: `fgtrace::tracing::Subscriber` alone,
//!   recording / paused,
//! * `traced`: a `#[traced]` fn doing the same work, recording.
//!
//! The dispatcher is the thread's scoped default (`with_default`), the same
//! for every row. Run: `cargo bench --features tracing --bench tracing`.

use divan::black_box;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tracing::span::{Attributes, Id};
use tracing::{info_span, Dispatch, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

const SPANS: usize = 1000;

fn main() {
    divan::main();
}

/// One session for the whole run, resumed for the recording rows and
/// paused for the `_off` rows.
fn session() -> &'static fgtrace::Session {
    static SESSION: OnceLock<fgtrace::Session> = OnceLock::new();
    SESSION.get_or_init(|| {
        fgtrace::Session::start(fgtrace::Config::builtin().flight_recorder(1 << 16))
            .expect("session")
    })
}

/// Busy time summed over every closed span (keeps the timing layers' work
/// observable).
static BUSY_NS: AtomicU64 = AtomicU64::new(0);

/// Per-span timing in the span's extensions, as `fmt` keeps it.
struct Timing;

struct Busy {
    busy: Duration,
    entered: Option<Instant>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Timing {
    fn on_new_span(&self, _attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("span");
        span.extensions_mut().insert(Busy {
            busy: Duration::ZERO,
            entered: None,
        });
    }
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(b) = span.extensions_mut().get_mut::<Busy>() {
                b.entered = Some(Instant::now());
            }
        }
    }
    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(b) = span.extensions_mut().get_mut::<Busy>() {
                if let Some(t) = b.entered.take() {
                    b.busy += t.elapsed();
                }
            }
        }
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            if let Some(b) = span.extensions().get::<Busy>() {
                BUSY_NS.fetch_add(b.busy.as_nanos() as u64, Relaxed);
            }
        }
    }
}

/// Two clock reads per span entry, kept on a thread-local stack.
struct Clock;

thread_local! {
    static ENTRIES: RefCell<Vec<Instant>> = const { RefCell::new(Vec::new()) };
}

impl<S: Subscriber> Layer<S> for Clock {
    fn on_enter(&self, _id: &Id, _ctx: Context<'_, S>) {
        ENTRIES.with(|e| e.borrow_mut().push(Instant::now()));
    }
    fn on_exit(&self, _id: &Id, _ctx: Context<'_, S>) {
        if let Some(t) = ENTRIES.with(|e| e.borrow_mut().pop()) {
            BUSY_NS.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
        }
    }
}

fn dispatch(which: &'static str) -> &'static Dispatch {
    macro_rules! once {
        ($e:expr) => {{
            static D: OnceLock<Dispatch> = OnceLock::new();
            D.get_or_init(|| $e)
        }};
    }
    match which {
        "none" => once!(Dispatch::none()),
        "registry" => once!(Dispatch::new(tracing_subscriber::registry())),
        "noop" => once!(Dispatch::new(
            tracing_subscriber::registry().with(tracing_subscriber::layer::Identity::new())
        )),
        "timing" => once!(Dispatch::new(tracing_subscriber::registry().with(Timing))),
        "clock" => once!(Dispatch::new(tracing_subscriber::registry().with(Clock))),
        "fgtrace" => once!(Dispatch::new(
            tracing_subscriber::registry().with(fgtrace::tracing::Layer::new())
        )),
        "chrome" => once!({
            let (layer, guard) = tracing_chrome::ChromeLayerBuilder::new()
                .writer(std::io::sink())
                .build();
            // The writer thread runs for the whole process.
            std::mem::forget(guard);
            Dispatch::new(tracing_subscriber::registry().with(layer))
        }),
        "subscriber" => once!(Dispatch::new(fgtrace::tracing::Subscriber::new())),
        _ => unreachable!("{which}"),
    }
}

#[inline(never)]
fn spans(d: &Dispatch) -> u64 {
    tracing::dispatcher::with_default(d, || {
        (0..SPANS as u64)
            .map(|x| info_span!("leaf").in_scope(|| black_box(x) + 1))
            .sum()
    })
}

/// As [`spans`], each span with two integer fields (recorded as the call's
/// values by fgtrace's layer and subscriber).
#[inline(never)]
fn spans_fields(d: &Dispatch) -> u64 {
    tracing::dispatcher::with_default(d, || {
        (0..SPANS as u64)
            .map(|x| info_span!("leaf_fields", i = x, len = x * 2).in_scope(|| black_box(x) + 1))
            .sum()
    })
}

#[fgtrace::traced]
#[inline(never)]
fn leaf_traced(x: u64) -> u64 {
    black_box(x) + 1
}

#[divan::bench_group(name = "spans x1000")]
mod span {
    use super::*;

    #[divan::bench]
    fn no_subscriber() -> u64 {
        spans(dispatch("none"))
    }

    #[divan::bench]
    fn registry() -> u64 {
        spans(dispatch("registry"))
    }

    #[divan::bench]
    fn registry_noop() -> u64 {
        spans(dispatch("noop"))
    }

    #[divan::bench]
    fn registry_timing() -> u64 {
        spans(dispatch("timing"))
    }

    #[divan::bench]
    fn registry_clock() -> u64 {
        spans(dispatch("clock"))
    }

    #[divan::bench]
    fn registry_fgtrace(b: divan::Bencher) {
        session().resume();
        b.bench(|| spans(dispatch("fgtrace")));
    }

    #[divan::bench]
    fn registry_fgtrace_off(b: divan::Bencher) {
        session().pause();
        b.bench(|| spans(dispatch("fgtrace")));
    }

    #[divan::bench]
    fn registry_chrome() -> u64 {
        spans(dispatch("chrome"))
    }

    #[divan::bench]
    fn subscriber(b: divan::Bencher) {
        session().resume();
        b.bench(|| spans(dispatch("subscriber")));
    }

    #[divan::bench]
    fn subscriber_off(b: divan::Bencher) {
        session().pause();
        b.bench(|| spans(dispatch("subscriber")));
    }

    #[divan::bench]
    fn traced(b: divan::Bencher) {
        session().resume();
        b.bench(|| (0..SPANS as u64).map(leaf_traced).sum::<u64>());
    }

    #[divan::bench]
    fn registry_clock_2_fields() -> u64 {
        spans_fields(dispatch("clock"))
    }

    #[divan::bench]
    fn registry_fgtrace_2_fields(b: divan::Bencher) {
        session().resume();
        b.bench(|| spans_fields(dispatch("fgtrace")));
    }

    #[divan::bench]
    fn subscriber_2_fields(b: divan::Bencher) {
        session().resume();
        b.bench(|| spans_fields(dispatch("subscriber")));
    }
}
