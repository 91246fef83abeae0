//! Instant markers in a capture: the `tracing` events recorded inside the
//! captured code (with `fgtrace::tracing`'s layer), queried by name or by
//! the call they happened in.

use super::captured::{ns, Capture, MarkerRecord};
use fgtrace_trace::Value;
use std::time::Duration;

/// One instant marker in a capture (a `tracing` event such as
/// `info!(n = 3, "..")`), with where and when it happened.
#[derive(Clone, Debug, PartialEq)]
pub struct CapturedMarker {
    /// Its site's name: the event's `name:` if it has one, else `tracing`'s
    /// `event file:line`.
    pub name: String,
    /// The event's target (by default its module path).
    pub module_path: String,
    /// When, since the capture began.
    pub at: Duration,
    /// The depth a call made there would have.
    pub depth: u32,
    /// The name of the call it happened in (a `#[traced]` fn or a span),
    /// `None` at the top level.
    pub inside: Option<String>,
    /// Its integer and bool fields, by name, in the callsite's order.
    pub values: Vec<(String, Value)>,
}

impl CapturedMarker {
    /// The value of the field `name`.
    pub fn get(&self, name: &str) -> Option<Value> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

impl Capture {
    /// The instant markers whose site matches `name` (as calls match: the
    /// name, or a path ending in `::name`), in trace order. An event's name
    /// is the `name:` it was given (`info!(name: "cache_miss", ..)`), else
    /// `tracing`'s own `event file:line`; [`Capture::markers_inside`] finds
    /// events by the call they happened in instead.
    pub fn markers(&self, name: &str) -> Vec<CapturedMarker> {
        let mask = self.site_mask(name);
        self.markers
            .iter()
            .filter(|m| mask.get(m.marker.site as usize).copied().unwrap_or(false))
            .map(|m| self.marker(m))
            .collect()
    }

    /// Every instant marker, in trace order.
    pub fn all_markers(&self) -> Vec<CapturedMarker> {
        self.markers.iter().map(|m| self.marker(m)).collect()
    }

    /// The instant markers that happened directly inside a call of `call`
    /// (not in its callees), in trace order.
    pub fn markers_inside(&self, call: &str) -> Vec<CapturedMarker> {
        let mask = self.site_mask(call);
        self.markers
            .iter()
            .filter(|m| {
                m.span
                    .is_some_and(|s| mask[self.spans[s].call.site as usize])
            })
            .map(|m| self.marker(m))
            .collect()
    }

    fn marker(&self, m: &MarkerRecord) -> CapturedMarker {
        let meta = self.trace.meta();
        let site = meta.sites.get(m.marker.site as usize);
        CapturedMarker {
            name: site.map_or_else(String::new, |s| s.name.clone()),
            module_path: site.map_or_else(String::new, |s| s.module_path.clone()),
            at: ns(m.marker.ts_ns),
            depth: m.marker.depth,
            inside: m
                .span
                .map(|s| meta.site_name(self.spans[s].call.site).to_string()),
            values: m
                .values
                .iter()
                .map(|v| {
                    let n = site
                        .and_then(|s| s.values.get(v.slot as usize))
                        .cloned()
                        .unwrap_or_else(|| "?".into());
                    (n, *v)
                })
                .collect(),
        }
    }
}
