//! [`Subscriber`]: spans as calls and nothing else, without a `Registry`.

use super::{sites, stack};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Interest, LevelFilter, Metadata};

/// The id of a span the subscriber does not record (above its level).
const UNRECORDED: u64 = u64::MAX;

/// A standalone [`tracing_core::Subscriber`] for timings alone: every entry
/// of a span, to its exit, is a call of the running fgtrace session or
/// capture, as with [`Layer`](super::Layer), without the `Registry`'s span
/// storage.
///
/// ```
/// tracing::subscriber::set_global_default(fgtrace::tracing::Subscriber::new())
///     .expect("no other global subscriber");
/// ```
///
/// A span's id is its callsite's (spans of one callsite share it: `tracing`
/// leaves id uniqueness to the subscriber), so creating, entering and
/// exiting a span allocates nothing, takes no lock, and touches no state
/// shared with other threads beyond reading the callsite tables. Fields and
/// events are ignored (events are disabled at their callsite), `clone_span`
/// and `try_close` keep no counts, and `current_span` is left unknown (the
/// trait's default: a library that asks gets `Span::none()`, as under any
/// subscriber that does not track it).
#[derive(Debug)]
pub struct Subscriber {
    owner: u32,
    max_level: LevelFilter,
}

impl Subscriber {
    /// Records spans of every level.
    pub fn new() -> Subscriber {
        Subscriber {
            owner: stack::new_owner(),
            max_level: LevelFilter::TRACE,
        }
    }

    /// Records only spans at `level` or above (`LevelFilter::INFO`: info,
    /// warn and error spans); the others are disabled at their callsite and
    /// cost what a disabled span costs.
    pub fn with_max_level(mut self, level: impl Into<LevelFilter>) -> Subscriber {
        self.max_level = level.into();
        self
    }

    #[inline(always)]
    fn wants(&self, meta: &Metadata<'_>) -> bool {
        meta.is_span() && *meta.level() <= self.max_level
    }
}

impl Default for Subscriber {
    fn default() -> Subscriber {
        Subscriber::new()
    }
}

impl tracing_core::Subscriber for Subscriber {
    /// Makes the callsite's site now (once per callsite).
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.wants(meta) && sites::get(meta).is_some() {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        self.wants(meta)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max_level)
    }

    /// The callsite's id. Another dispatcher's interest can enable a span
    /// this subscriber does not want: it gets an id that records nothing.
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let meta = span.metadata();
        let id = match self.wants(meta).then(|| sites::get(meta)).flatten() {
            Some(c) => c.index as u64 + 1,
            None => UNRECORDED,
        };
        Id::from_u64(id)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event_enabled(&self, _event: &Event<'_>) -> bool {
        false
    }

    fn event(&self, _event: &Event<'_>) {}

    fn enter(&self, span: &Id) {
        if !stack::recording() {
            return;
        }
        if let Some(c) = sites::by_index(span.into_u64() - 1) {
            stack::enter(self.owner, span.into_u64(), &c.site);
        }
    }

    fn exit(&self, span: &Id) {
        stack::exit(self.owner, span.into_u64());
    }
}
