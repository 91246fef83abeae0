//! `tracing` spans as fgtrace calls (feature `tracing`).
//!
//! A program already instrumented with the `tracing` crate (`#[instrument]`
//! on its functions, the spans of tokio, hyper, tower, sqlx) gets those spans
//! in the function graph, the flamegraphs, the off-CPU view and the
//! `fgtrace::testing` assertions, beside its `#[traced]` functions:
//!
//! * [`Layer`], a `tracing_subscriber::Layer`: add it to the `Registry` you
//!   have; `fmt`, filters and other layers go on as before.
//! * [`Subscriber`], a standalone subscriber for timings alone: no
//!   `Registry`, no span storage, no allocation per span.
//!
//! ```
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! #[tracing::instrument]
//! fn handle(req: u32) -> u32 { parse(req) }
//!
//! #[fgtrace::traced]
//! fn parse(req: u32) -> u32 { req + 1 }
//!
//! let subscriber = tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink))
//!     .with(fgtrace::tracing::Layer::new());
//! # #[cfg(feature = "testing")]
//! tracing::subscriber::with_default(subscriber, || {
//!     let cap = fgtrace::testing::capture(|| handle(1));
//!     cap.assert_calls("handle", 1);
//!     cap.assert_inside("parse", "handle");
//! });
//! ```
//!
//! **What a span becomes.** Each entry of a span, to its exit, is one call on
//! the entering thread's shadow stack, on fgtrace's clock, exactly like a
//! `#[traced]` call made at that point: a `#[traced]` fn called inside the
//! span is its child, and a span entered inside a `#[traced]` fn is that
//! fn's child. Its site is made once per span callsite: the span's name,
//! its `target` as the module path (by default the module it is in; a
//! `target: ".."` override shows there), its file and line. So the
//! session's filters apply to spans exactly as to functions
//! (`FGTRACE_FILTER`/`exclude` by name or `target::name`, `notrace`,
//! `graph_functions`, the depth limit and the duration threshold), and a
//! test queries them by name: `cap.calls("handle")`.
//!
//! **Fields and events.** A span's integer and bool fields (the first four
//! of its callsite) are its call's values, named by the field names, as
//! `#[traced(values(..))]` records them; a field recorded later, before the
//! exit, lands too. Strings, floats and `Debug` fields are not recorded. An
//! event (`info!(..)`) is an instant marker at its point of the thread's
//! calls, with its integer and bool fields as values.
//!
//! **Async.** A future under `#[instrument]` (or `.instrument(span)`) enters
//! its span once per poll, and once more when it is dropped (`tracing` drops
//! the inner future inside the span). The layer records it as a `#[traced]
//! async fn` is recorded: every entry a poll, and the span, first entry to
//! close, one whole future with its poll count and values. The rule: a span
//! callsite is a future's once one of its spans is entered again after an
//! exit on the same thread, before its close; from then on every span of
//! that callsite made while recording is a future from its first entry (the
//! one that taught it stays calls). The standalone subscriber keeps no state
//! per span: its
//! async spans stay one call per entry.
//!
//! **Entries and exits out of order.** A span exited while spans entered
//! after it on the same thread are still open ends those first, innermost
//! first, at the same instant (the shadow stack is a tree); their own exits
//! then do nothing. At most 128 spans can be open at once on a thread
//! (deeper ones are not recorded; their callees are). Entries made while
//! nothing records are not kept, so a session that starts while a span is
//! entered records it from its next entry.
//!
//! **Cost.** While nothing records, an entry is one relaxed load and a
//! branch beyond what the `Registry` does. While recording, the layer adds
//! one span lookup (for the metadata), one lock-free table lookup and the
//! probe on entry; the probe and a note of the exit on exit; one span lookup
//! and one table lookup on close (and a future's record); on creation, for
//! spans with fields or of future callsites, their values (a future's state
//! goes in the span's extensions: one allocation per future span). The
//! standalone subscriber adds nothing but the probe and the thread-local
//! array to what `tracing` itself costs. Figures: the guide's Performance
//! page (docs/src/performance.md) (`cargo bench --features tracing --bench tracing`).

mod layer;
mod sites;
mod stack;
mod subscriber;
mod values;

pub use layer::Layer;
pub use subscriber::Subscriber;
