//! [`Layer`]: spans as calls, beside the other layers of a `Registry`.

use super::values::{Collect, NONE};
use super::{sites, stack};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Interest, Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// A [`tracing_subscriber::Layer`] that records every entry of a span, to
/// its exit, as a call of the running fgtrace session or capture: on the
/// thread's shadow stack, nested with the `#[traced]` calls around and
/// inside it, named by the span's name, with its target as the module path
/// and its file and line. See the [module docs](super).
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

impl<S> tracing_subscriber::Layer<S> for Layer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// Makes the callsite's site now (once per callsite), so that span
    /// entries find it without a lock. Never narrows what other layers see.
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        sites::get(meta);
        Interest::always()
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

    /// Keeps the values of a span with fields for its first entry.
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        let Some(c) = sites::lookup(attrs.metadata()) else {
            return;
        };
        if !c.has_values() {
            return;
        }
        if !stack::recording() {
            // A span of an id closed before may have left values.
            stack::forget(self.owner, id.into_u64());
            return;
        }
        let mut values = NONE;
        attrs.record(&mut Collect {
            callsite: c,
            values: &mut values,
        });
        stack::set_pending(self.owner, id.into_u64(), &values);
    }

    /// Fields recorded after the span was made: into its open entry.
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if !stack::recording() {
            return;
        }
        let Some(c) = ctx.metadata(id).and_then(sites::lookup) else {
            return;
        };
        if c.has_values() {
            stack::record(self.owner, id.into_u64(), |v| {
                values.record(&mut Collect {
                    callsite: c,
                    values: v,
                })
            });
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if ctx
            .metadata(&id)
            .and_then(sites::lookup)
            .is_some_and(|c| c.has_values())
        {
            stack::forget(self.owner, id.into_u64());
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if !stack::recording() {
            return;
        }
        let Some(meta) = ctx.metadata(id) else {
            return;
        };
        if let Some(c) = sites::get(meta) {
            stack::enter(self.owner, id.into_u64(), &c.site);
        }
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        stack::exit(self.owner, id.into_u64());
    }
}
