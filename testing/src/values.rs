//! Per-call values (`#[traced(values(..))]`, `ret`) in a capture, and the
//! growth assertion: how a function's cost grows with one of its values.

use super::captured::*;
use fgtrace_trace::Value;
use fgtrace_view::growth::{fit_power, furthest_above, Fit};
use std::time::Duration;

/// One call in a capture: its recorded values and what it cost (what
/// [`Capture::values`] returns).
#[derive(Clone, Debug, PartialEq)]
pub struct CapturedCall {
    /// Inclusive duration (for an `async fn`: first poll to completion).
    pub duration: Duration,
    /// `(name, value)` in the order the attribute names them (`ret` last).
    pub values: Vec<(String, Value)>,
    /// Allocations in the call, callees included (counting allocator only).
    pub allocations: Option<u64>,
    /// Retired instructions, callees included (where counted).
    pub instructions: Option<u64>,
    /// The trace's string table, which string values index.
    strings: std::sync::Arc<[String]>,
}

impl CapturedCall {
    /// The value named `name`.
    pub fn get(&self, name: &str) -> Option<Value> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// The text of the string value named `name` (a `&'static str`, also
    /// inside `Ok`/`Err`/`Some`).
    pub fn text(&self, name: &str) -> Option<&str> {
        self.get(name)?.text(&self.strings)
    }

    /// The value named `name` as the graph prints it: `83`, `Ok(3)`,
    /// strings as Rust spells them (`"ident"`, `Err("bad digit")`).
    pub fn shown(&self, name: &str) -> Option<String> {
        Some(self.get(name)?.shown(&self.strings).to_string())
    }

    /// `name=value` for each value, as [`CapturedCall::shown`] prints them.
    pub fn pairs(&self) -> Vec<String> {
        self.values
            .iter()
            .map(|(n, v)| format!("{n}={}", v.shown(&self.strings)))
            .collect()
    }
}

/// A complexity class for [`Capture::assert_growth`]: the largest fitted
/// exponent it allows (before the tolerance).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Growth {
    /// Cost independent of the value: exponent 0.
    Constant,
    /// `n log n` and below: exponent 1 (`log n` adds about 0.1 over the
    /// sizes a test uses, inside the default tolerance of 0.25).
    Linear,
    /// Exponent 2.
    Quadratic,
    /// Any other exponent.
    Power(f64),
}

impl Growth {
    /// The class's exponent.
    pub fn exponent(self) -> f64 {
        match self {
            Growth::Constant => 0.0,
            Growth::Linear => 1.0,
            Growth::Quadratic => 2.0,
            Growth::Power(k) => k,
        }
    }
}

/// What [`Capture::assert_growth_of`] fits against the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Inclusive duration.
    Duration,
    /// Allocations, callees included (needs the counting allocator).
    Allocations,
    /// Retired instructions, callees included (needs a PMU; see [`super::Counters`]).
    Instructions,
}

/// Default tolerance of [`Capture::assert_growth`]: the fitted exponent may
/// exceed the class's by this much. Timer noise and constant per-call costs
/// move an exponent fitted over one decade of sizes by a few hundredths;
/// the next class up is a whole step (1.0) away.
pub const GROWTH_TOLERANCE: f64 = 0.25;

impl Capture {
    /// Each call of the functions `name` matches that recorded values (for
    /// an `async fn`, each whole future), in trace order.
    pub fn values(&self, name: &str) -> Vec<CapturedCall> {
        let mask = self.site_mask(name);
        let sites = &self.trace.meta().sites;
        let strings: std::sync::Arc<[String]> = self.trace.meta().strings.clone().into();
        let named = |site: u32, vals: &[Value]| -> Vec<(String, Value)> {
            let names = &sites[site as usize].values;
            vals.iter()
                .map(|v| {
                    let n = names
                        .get(v.slot as usize)
                        .cloned()
                        .unwrap_or_else(|| "?".into());
                    (n, *v)
                })
                .collect()
        };
        let mut out = Vec::new();
        for (i, s) in self.spans.iter().enumerate() {
            if !mask[s.call.site as usize] || s.call.is_poll() {
                continue;
            }
            if sites[s.call.site as usize].values.is_empty() {
                out.push(CapturedCall {
                    duration: ns(s.call.dur_ns),
                    values: Vec::new(),
                    allocations: s.allocs.map(|a| a.allocs),
                    instructions: s.instr,
                    strings: strings.clone(),
                });
                continue;
            }
            let Some(v) = self.span_values.get(&i) else {
                continue;
            };
            out.push(CapturedCall {
                duration: ns(s.call.dur_ns),
                values: named(s.call.site, v),
                allocations: s.allocs.map(|a| a.allocs),
                instructions: s.instr,
                strings: strings.clone(),
            });
        }
        for (i, f) in self.futures.iter().enumerate() {
            if !mask[f.site as usize] {
                continue;
            }
            if let Some(v) = self.future_values.get(&i) {
                out.push(CapturedCall {
                    duration: ns(f.dur_ns),
                    values: named(f.site, v),
                    allocations: None,
                    instructions: None,
                    strings: strings.clone(),
                });
            }
        }
        out
    }

    /// Fits the duration of `name`'s calls against their value `value`
    /// (`y ~ c * value^k`, see [`fgtrace_view::growth`]) and fails when the
    /// exponent exceeds `growth`'s by more than [`GROWTH_TOLERANCE`]. The
    /// message has the fit and the calls furthest above it. Returns the fit.
    ///
    /// Calls over a decade or more of sizes give a steady exponent; use work
    /// that takes microseconds or more per call (below that the probe's own
    /// cost is part of the duration), or [`Measure::Instructions`] /
    /// [`Measure::Allocations`], which are exact.
    #[track_caller]
    pub fn assert_growth(&self, name: &str, value: &str, growth: Growth) -> Fit {
        self.assert_growth_of(name, value, growth, Measure::Duration, GROWTH_TOLERANCE)
            .unwrap_or_else(|why| fail(why))
    }

    /// [`Capture::assert_growth`] with the measure and tolerance chosen.
    /// `Err` (not a panic) only when the measure is not available on this
    /// machine or in this capture, with the reason (instructions without a
    /// PMU, allocations without the counting allocator); a growth beyond
    /// the class panics.
    #[track_caller]
    pub fn assert_growth_of(
        &self,
        name: &str,
        value: &str,
        growth: Growth,
        measure: Measure,
        tolerance: f64,
    ) -> Result<Fit, String> {
        let calls = self.values(name);
        if calls.is_empty() {
            fail(format!(
                "assert_growth: no call of `{name}` recorded values"
            ));
        }
        let y = |c: &CapturedCall| -> Option<f64> {
            match measure {
                Measure::Duration => Some(c.duration.as_nanos() as f64),
                Measure::Allocations => c.allocations.map(|a| a as f64),
                Measure::Instructions => c.instructions.map(|a| a as f64),
            }
        };
        if calls.iter().all(|c| y(c).is_none()) {
            return Err(match measure {
                Measure::Instructions => format!(
                    "assert_growth: no instruction counts for `{name}`: {}",
                    match self.counters() {
                        super::CounterStatus::Unavailable(why) => why.as_str(),
                        _ => "counters were not requested (capture with `Counters::Auto`)",
                    }
                ),
                _ => format!(
                    "assert_growth: no allocation counts for `{name}`: install \
                     `fgtrace::alloc::Counting` as the global allocator"
                ),
            });
        }
        let mut points = Vec::new();
        for c in &calls {
            let Some(v) = c.get(value) else {
                fail(format!(
                    "assert_growth: `{name}` records no value `{value}` (it records: {})",
                    c.values
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            };
            let Some(x) = v.number() else {
                fail(format!(
                    "assert_growth: `{name}`'s `{value}` is {}, not a number",
                    c.shown(value).unwrap_or_default()
                ));
            };
            points.push((x, y(c).unwrap_or(0.0)));
        }
        let what = match measure {
            Measure::Duration => "duration",
            Measure::Allocations => "allocations",
            Measure::Instructions => "instructions",
        };
        let Some(fit) = fit_power(&points) else {
            fail(format!(
                "assert_growth: `{name}` needs calls with at least two distinct positive \
                 `{value}` values and a nonzero {what} to fit a growth"
            ));
        };
        let limit = growth.exponent() + tolerance;
        if fit.exponent > limit {
            let mut msg = format!(
                "`{name}` grows faster than {growth:?} in `{value}`: {} (allowed: exponent <= {:.2} \
                 = {:.2} + tolerance {tolerance:.2})\ncalls furthest above the fit:",
                fit.describe(what, value),
                limit,
                growth.exponent()
            );
            for (i, ratio) in furthest_above(&points, &fit, 5) {
                let c = &calls[i];
                let vals = c.pairs();
                msg.push_str(&format!(
                    "\n  {name}({}): {what} {} ({ratio:.1}x the fit)",
                    vals.join(", "),
                    points[i].1
                ));
            }
            fail(msg);
        }
        Ok(fit)
    }
}
