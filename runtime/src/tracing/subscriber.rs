//! [`Subscriber`]: spans as calls and nothing else, without a `Registry`.

use super::values::{Collect, NONE};
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
/// shared with other threads beyond reading the callsite tables. A span's
/// integer and bool fields are its call's values, as with the layer: kept on
/// the thread that made it until the span of that callsite is entered there.
/// Events are instant markers, as with the layer ([`Subscriber::with_events`]
/// turns them off), `clone_span`
/// and `try_close` keep no counts, and `current_span` is left unknown (the
/// trait's default: a library that asks gets `Span::none()`, as under any
/// subscriber that does not track it).
#[derive(Debug)]
pub struct Subscriber {
    owner: u32,
    max_level: LevelFilter,
    events: bool,
}

impl Subscriber {
    /// Records spans of every level.
    pub fn new() -> Subscriber {
        Subscriber {
            owner: stack::new_owner(),
            max_level: LevelFilter::TRACE,
            events: true,
        }
    }

    /// Records only spans at `level` or above (`LevelFilter::INFO`: info,
    /// warn and error spans); the others are disabled at their callsite and
    /// cost what a disabled span costs.
    pub fn with_max_level(mut self, level: impl Into<LevelFilter>) -> Subscriber {
        self.max_level = level.into();
        self
    }

    /// Records events (`info!(..)`) as instant markers (the default), or
    /// not: `false` disables them at their callsite, as before a span's
    /// timings alone mattered.
    pub fn with_events(mut self, yes: bool) -> Subscriber {
        self.events = yes;
        self
    }

    #[inline(always)]
    fn wants(&self, meta: &Metadata<'_>) -> bool {
        (meta.is_span() || (self.events && meta.is_event())) && *meta.level() <= self.max_level
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
        let Some(c) = self.wants(meta).then(|| sites::get(meta)).flatten() else {
            return Id::from_u64(UNRECORDED);
        };
        let id = c.index as u64 + 1;
        if c.has_values() {
            // The values wait for the span's entry on this thread, keyed by
            // the callsite: the latest span made here of that callsite.
            if stack::recording() {
                let mut values = NONE;
                span.record(&mut Collect {
                    callsite: c,
                    values: &mut values,
                });
                stack::set_pending(self.owner, id, &values);
            } else {
                stack::forget(self.owner, id);
            }
        }
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if !stack::recording() {
            return;
        }
        if let Some(c) = sites::by_index(span.into_u64().wrapping_sub(1)) {
            if c.has_values() {
                stack::record(self.owner, span.into_u64(), |v| {
                    values.record(&mut Collect {
                        callsite: c,
                        values: v,
                    })
                });
            }
        }
    }

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event_enabled(&self, event: &Event<'_>) -> bool {
        self.wants(event.metadata())
    }

    /// An instant marker at this point of the thread's calls, with the
    /// event's integer and bool fields as values.
    fn event(&self, event: &Event<'_>) {
        if !stack::recording() || !self.wants(event.metadata()) {
            return;
        }
        if let Some(c) = sites::get(event.metadata()) {
            super::values::marker(c, event);
        }
    }

    fn enter(&self, span: &Id) {
        if !stack::recording() {
            return;
        }
        if let Some(c) = sites::by_index(span.into_u64() - 1) {
            stack::enter(self.owner, span.into_u64(), &c.site, c.index);
        }
    }

    fn exit(&self, span: &Id) {
        stack::exit(self.owner, span.into_u64());
    }
}
