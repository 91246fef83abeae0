//! [`Layer`]: spans as calls, beside the other layers of a `Registry`.

use super::sites::{self, Callsite};
use super::stack;
use super::values::{Collect, Values, NONE};
use fgtrace_core::clock::ticks;
use fgtrace_core::probe::{record_future_values, FutureTimes};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Interest, Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// A [`tracing_subscriber::Layer`] that records every entry of a span, to
/// its exit, as a call of the running fgtrace session or capture: on the
/// thread's shadow stack, nested with the `#[traced]` calls around and
/// inside it, named by the span's name, with its target as the module path
/// and its file and line, its integer and bool fields as the call's values.
/// Events are instant markers; spans entered once per poll are futures.
/// See the [module docs](super).
///
/// ```
/// use tracing_subscriber::layer::SubscriberExt;
///
/// let subscriber = tracing_subscriber::registry().with(fgtrace::tracing::Layer::new());
/// tracing::subscriber::with_default(subscriber, || {
///     // spans entered here are recorded by a session or a capture
/// });
/// ```
///
/// Put it with the layers you keep (`fmt`, an `EnvFilter`): their filters
/// apply to it as to them, and a per-layer filter
/// ([`tracing_subscriber::Layer::with_filter`]) narrows what it sees alone.
#[derive(Debug)]
pub struct Layer {
    owner: u32,
}

impl Layer {
    /// A layer recording into whichever session or capture runs.
    pub fn new() -> Layer {
        Layer {
            owner: stack::new_owner(),
        }
    }
}

impl Default for Layer {
    fn default() -> Layer {
        Layer::new()
    }
}

/// What the layer keeps for a span of a callsite whose spans are futures,
/// in the span's extensions: when its first poll began, its polls, its values.
struct FutureState {
    first: u64,
    polls: u32,
    /// Ticks at the start of the poll under way.
    entered: u64,
    /// Ticks its polls took.
    busy: u64,
    values: Values,
}

impl<S> tracing_subscriber::Layer<S> for Layer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// Makes the callsite's site now (once per callsite), so that span
    /// entries and events find it without a lock. Never narrows what other
    /// layers see.
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        sites::get(meta);
        Interest::always()
    }

    /// Keeps the values of a span with fields for its first entry; a span of
    /// a future callsite gets its future's state (with its values) in its
    /// extensions, for whichever thread polls it.
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        // No fields, no future callsite yet: nothing to keep.
        if attrs.metadata().fields().is_empty() && !sites::any_future() {
            return;
        }
        let Some(c) = sites::lookup(attrs.metadata()) else {
            return;
        };
        if c.is_future() {
            if !stack::recording() {
                return;
            }
            let mut values = NONE;
            collect(c, attrs, &mut values);
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(FutureState {
                    first: 0,
                    polls: 0,
                    entered: 0,
                    busy: 0,
                    values,
                });
            }
            return;
        }
        if !c.has_values() {
            return;
        }
        if !stack::recording() {
            // A span of an id closed before may have left values.
            stack::forget(self.owner, id.into_u64());
            return;
        }
        let mut values = NONE;
        collect(c, attrs, &mut values);
        stack::set_pending(self.owner, id.into_u64(), &values);
    }

    /// Fields recorded after the span was made: into its open entry (a
    /// future's: into its extensions).
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if !stack::recording() {
            return;
        }
        let Some(c) = ctx.metadata(id).and_then(sites::lookup) else {
            return;
        };
        if !c.has_values() {
            return;
        }
        if c.is_future() {
            if let Some(span) = ctx.span(id) {
                if let Some(f) = span.extensions_mut().get_mut::<FutureState>() {
                    values.record(&mut Collect {
                        callsite: c,
                        values: &mut f.values,
                    });
                }
            }
            return;
        }
        stack::record(self.owner, id.into_u64(), |v| {
            values.record(&mut Collect {
                callsite: c,
                values: v,
            })
        });
    }

    /// An event: an instant marker at this point of the thread's calls,
    /// with its integer and bool fields as values.
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if stack::recording() {
            if let Some(c) = sites::get(event.metadata()) {
                super::values::marker(c, event);
            }
        }
    }

    /// A call, or a poll of a future (see the module docs for the rule).
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if !stack::recording() {
            return;
        }
        let Some(meta) = ctx.metadata(id) else {
            return;
        };
        let Some(c) = sites::get(meta) else {
            return;
        };
        // A span made, while recording, after its callsite's spans were
        // known to be futures has a future's state: this entry is a poll.
        // Any other span of such a callsite (the one that taught it, one
        // made while nothing recorded) stays calls, one per entry.
        if c.is_future() {
            if let Some(span) = ctx.span(id) {
                if let Some(f) = span.extensions_mut().get_mut::<FutureState>() {
                    f.entered = ticks();
                    if f.first == 0 {
                        f.first = f.entered;
                    }
                    f.polls = f.polls.saturating_add(1);
                    stack::enter_poll_of(self.owner, id.into_u64(), &c.site, c.index);
                    return;
                }
            }
        }
        if stack::exited_before(self.owner, id.into_u64(), c.index) {
            // Entered again after an exit: this callsite's spans are
            // futures (or long-lived spans entered in stretches) from now on.
            c.learn_future();
        }
        stack::enter(self.owner, id.into_u64(), &c.site, c.index);
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if stack::exit(self.owner, id.into_u64()) {
            // A poll ended: its time is the future's busy time.
            let end = ticks();
            if let Some(span) = ctx.span(id) {
                if let Some(f) = span.extensions_mut().get_mut::<FutureState>() {
                    if f.entered != 0 {
                        f.busy = f.busy.wrapping_add(end.wrapping_sub(f.entered));
                        f.entered = 0;
                    }
                }
            }
        }
    }

    /// A future's whole record (first poll to close), and what the thread
    /// kept for the span goes.
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if !stack::recording() {
            return;
        }
        stack::forget(self.owner, id.into_u64());
        if !sites::any_future() {
            return;
        }
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(c) = sites::lookup(span.metadata()) else {
            return;
        };
        if c.is_future() {
            if let Some(f) = span.extensions().get::<FutureState>() {
                if f.first != 0 {
                    record_future_values(
                        &c.site,
                        id.into_u64(),
                        f.first,
                        f.polls,
                        false,
                        // No wakes: a span does not see its future's waker.
                        Some(FutureTimes {
                            busy: f.busy,
                            polls: f.polls as u64,
                            waits: None,
                        }),
                        &f.values,
                    );
                }
            }
        }
    }
}

/// The values of a span's fields given when it was made.
fn collect(c: &'static Callsite, attrs: &Attributes<'_>, values: &mut Values) {
    if c.has_values() {
        attrs.record(&mut Collect {
            callsite: c,
            values,
        });
    }
}
