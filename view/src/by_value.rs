//! `report --by VALUE`: one function's calls grouped by one of the values
//! it records (`#[traced(values(len = ..))]`, or `ret`): a row per distinct
//! value, or per power-of-two bucket of an integer value when it has more
//! distinct values than rows, with calls, total, average, min and max.

use crate::consume::{collect, Consume};
use crate::human::uftrace_time;
use crate::threads::{shown, thread_mask, ThreadSel};
use fgtrace_trace::{Event, TraceError, TraceMeta, Value};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt;
use std::io::{self, Write};

/// What to group and how.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ByValueOptions {
    /// The value's name.
    pub value: String,
    /// The function (display name or full path); `None`: the one function
    /// that records `value` (an error when several do).
    pub function: Option<String>,
    /// Only these threads (empty: all).
    pub threads: Vec<ThreadSel>,
    /// Most rows before an integer value is grouped in power-of-two buckets
    /// (0: the default, 24).
    pub max_rows: usize,
}

/// Why no table came out.
#[derive(Debug)]
pub enum ByValueError {
    /// No function (or not the one named) records a value of that name.
    NoValue {
        /// The value name asked for.
        value: String,
        /// The functions that record values, to suggest: `name(value, value)`.
        recording: Vec<String>,
    },
    /// Several functions record it: name one.
    Ambiguous {
        /// The value name asked for.
        value: String,
        /// The functions that record a value of that name.
        functions: Vec<String>,
    },
    /// The trace stream failed.
    Trace(TraceError),
    /// Writing the table failed.
    Io(io::Error),
}

impl fmt::Display for ByValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ByValueError::NoValue { value, recording } if recording.is_empty() => write!(
                f,
                "no function records a value named `{value}` (none records values: \
                 add `#[traced(values({value} = ..))]`)"
            ),
            ByValueError::NoValue { value, recording } => write!(
                f,
                "no function records a value named `{value}`; recorded: {}",
                recording.join(", ")
            ),
            ByValueError::Ambiguous { value, functions } => write!(
                f,
                "several functions record `{value}`: {}; name one with --function",
                functions.join(", ")
            ),
            ByValueError::Trace(e) => write!(f, "{e}"),
            ByValueError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ByValueError {}

/// A row's key: an integer (or a power-of-two bucket of them), or text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Int(i128),
    Text(String),
}

#[derive(Default, Clone, Copy)]
struct Stats {
    calls: u64,
    total: u64,
    min: u64,
    max: u64,
}

impl Stats {
    fn add(&mut self, d: u64) {
        if self.calls == 0 || d < self.min {
            self.min = d;
        }
        self.max = self.max.max(d);
        self.calls += 1;
        self.total = self.total.saturating_add(d);
    }
    fn merge(&mut self, o: &Stats) {
        if o.calls == 0 {
            return;
        }
        if self.calls == 0 || o.min < self.min {
            self.min = o.min;
        }
        self.max = self.max.max(o.max);
        self.calls += o.calls;
        self.total = self.total.saturating_add(o.total);
    }
}

struct Builder<'a> {
    /// The trace's string table (string values are grouped by their text).
    strings: &'a [String],
    /// Per site: the slot of the value, for the sites grouped.
    slot: Vec<Option<u8>>,
    mask: Vec<bool>,
    filtered: bool,
    /// Per thread: the duration of its last call of a grouped site, until
    /// its values come.
    pending: Vec<Option<(u32, u64)>>,
    rows: BTreeMap<Key, Stats>,
    without: u64,
}

impl Consume for Builder<'_> {
    type Error = Infallible;
    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        let t = ev.thread() as usize;
        if !shown(&self.mask, self.filtered, t as u32) {
            return Ok(());
        }
        if self.pending.len() <= t {
            self.pending.resize(t + 1, None);
        }
        let wanted = |site: u32| self.slot.get(site as usize).copied().flatten().is_some();
        match ev {
            Event::Counters(_) => return Ok(()),
            Event::Values(v) => {
                if let Some((site, dur)) = self.pending[t].take() {
                    let slot = self.slot[site as usize];
                    match v.values.iter().find(|x| Some(x.slot) == slot) {
                        Some(x) => self.rows.entry(key(x, self.strings)).or_default().add(dur),
                        None => self.without += 1,
                    }
                }
                return Ok(());
            }
            _ => {}
        }
        if self.pending[t].take().is_some() {
            self.without += 1;
        }
        match ev {
            Event::Call(c) if wanted(c.site) && !c.is_poll() => {
                self.pending[t] = Some((c.site, c.dur_ns));
            }
            Event::Future(f) if wanted(f.site) => self.pending[t] = Some((f.site, f.dur_ns)),
            _ => {}
        }
        Ok(())
    }
}

fn key(v: &Value, strings: &[String]) -> Key {
    use fgtrace_core::values::tag;
    match (v.tag & tag::VARIANT, v.integer()) {
        (0, Some(i)) if v.tag & tag::TYPE != tag::CHAR && v.tag & tag::TYPE != tag::BOOL => {
            Key::Int(i)
        }
        _ => Key::Text(v.shown(strings).to_string()),
    }
}

/// `[lo, hi)` power-of-two bucket of `i` (0 alone; negatives mirrored).
fn bucket(i: i128) -> (i128, i128) {
    if i == 0 {
        return (0, 1);
    }
    let m = i.unsigned_abs();
    let lo = 1u128 << (127 - m.leading_zeros());
    let (lo, hi) = (lo as i128, (lo as i128).saturating_mul(2));
    if i > 0 {
        (lo, hi)
    } else {
        (-hi + 1, -lo + 1)
    }
}

/// Reads `events` and writes the table. On a read error, what was read is
/// written and the error is returned.
pub fn write_by_value(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    opts: &ByValueOptions,
    mut w: impl Write,
) -> Result<(), ByValueError> {
    let mut slot = vec![None; meta.sites.len()];
    let mut names = Vec::new();
    for (i, s) in meta.sites.iter().enumerate() {
        let matches = opts
            .function
            .as_ref()
            .is_none_or(|f| s.name == *f || s.full_name() == *f);
        if let (true, Some(p)) = (matches, s.values.iter().position(|n| *n == opts.value)) {
            slot[i] = Some(p as u8);
            names.push(s.full_name());
        }
    }
    names.sort();
    names.dedup();
    if names.is_empty() {
        let mut recording: Vec<String> = meta
            .sites
            .iter()
            .filter(|s| !s.values.is_empty())
            .map(|s| format!("{}({})", s.name, s.values.join(", ")))
            .collect();
        recording.dedup();
        return Err(ByValueError::NoValue {
            value: opts.value.clone(),
            recording,
        });
    }
    if names.len() > 1 {
        return Err(ByValueError::Ambiguous {
            value: opts.value.clone(),
            functions: names,
        });
    }
    let mut b = Builder {
        strings: &meta.strings,
        slot,
        mask: thread_mask(meta, &opts.threads),
        filtered: !opts.threads.is_empty(),
        pending: Vec::new(),
        rows: BTreeMap::new(),
        without: 0,
    };
    let read = collect(&mut b, events);
    let max_rows = if opts.max_rows == 0 {
        24
    } else {
        opts.max_rows
    };
    let bucketed = b.rows.len() > max_rows && b.rows.keys().all(|k| matches!(k, Key::Int(_)));
    let mut rows: Vec<(String, Stats)> = Vec::new();
    if bucketed {
        let mut by: BTreeMap<(i128, i128), Stats> = BTreeMap::new();
        for (k, s) in &b.rows {
            if let Key::Int(i) = k {
                by.entry(bucket(*i)).or_default().merge(s);
            }
        }
        for ((lo, hi), s) in by {
            let label = if hi - lo == 1 {
                lo.to_string()
            } else {
                format!("{lo}..{hi}")
            };
            rows.push((label, s));
        }
    } else {
        for (k, s) in &b.rows {
            let label = match k {
                Key::Int(i) => i.to_string(),
                Key::Text(t) => t.clone(),
            };
            rows.push((label, *s));
        }
    }
    let io = |e: io::Error| ByValueError::Io(e);
    let calls: u64 = rows.iter().map(|r| r.1.calls).sum();
    writeln!(
        w,
        "# {} by {}: {calls} call{}{}{}",
        names[0],
        opts.value,
        if calls == 1 { "" } else { "s" },
        if bucketed {
            format!(", {} distinct values in power-of-two buckets", b.rows.len())
        } else {
            String::new()
        },
        if b.without > 0 {
            format!(", {} without the value", b.without)
        } else {
            String::new()
        }
    )
    .map_err(io)?;
    let width = rows
        .iter()
        .map(|r| r.0.len())
        .max()
        .unwrap_or(0)
        .max(opts.value.len());
    writeln!(
        w,
        "  {:>width$}  {:>8}  {:>12}  {:>12}  {:>12}  {:>12}",
        opts.value.to_uppercase(),
        "CALLS",
        "TOTAL",
        "AVG",
        "MIN",
        "MAX"
    )
    .map_err(io)?;
    for (label, s) in &rows {
        writeln!(
            w,
            "  {label:>width$}  {:>8}  {:>12}  {:>12}  {:>12}  {:>12}",
            s.calls,
            uftrace_time(s.total),
            uftrace_time(s.total / s.calls.max(1)),
            uftrace_time(s.min),
            uftrace_time(s.max)
        )
        .map_err(io)?;
    }
    w.flush().map_err(io)?;
    read.map_err(ByValueError::Trace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume::ok_events;
    use crate::test_traces::{call, meta};
    use fgtrace_core::values::tag;
    use fgtrace_trace::CallValues;

    /// `n` calls of `parse` (site 0, records `len`), call `i` with len `lens(i)`
    /// and duration `10 * (i + 1)`, and one of `other` (site 1, no values).
    fn table(lens: impl Fn(u64) -> u64, n: u64, opts: &ByValueOptions) -> Result<String, String> {
        let mut m = meta(&["parse", "other"], &[(900, "main")]);
        m.sites[0].values = vec!["len".into()];
        let mut events = Vec::new();
        for i in 0..n {
            events.push(call(0, 0, 0, i * 1000, 10 * (i + 1)));
            events.push(Event::Values(CallValues {
                thread: 0,
                values: vec![Value {
                    slot: 0,
                    tag: tag::UNSIGNED,
                    bits: lens(i),
                }],
            }));
        }
        events.push(call(0, 1, 0, n * 1000, 5));
        let mut out = Vec::new();
        write_by_value(&m, ok_events(events), opts, &mut out).map_err(|e| e.to_string())?;
        Ok(String::from_utf8(out).unwrap())
    }

    fn opts(value: &str) -> ByValueOptions {
        ByValueOptions {
            value: value.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_row_per_value_then_power_of_two_buckets_when_there_are_many() {
        let few = table(|i| i % 3, 9, &opts("len")).unwrap();
        assert!(few.contains("parse by len: 9 calls\n"), "{few}");
        let row = few
            .lines()
            .find(|l| l.trim_start().starts_with("2 "))
            .unwrap();
        // Calls 2, 5, 8: 30 + 60 + 90 ns.
        assert!(row.contains(" 3 ") && row.contains("0.180 us"), "{few}");
        let many = table(|i| i, 100, &opts("len")).unwrap();
        assert!(
            many.contains("100 distinct values in power-of-two buckets"),
            "{many}"
        );
        let b = many
            .lines()
            .find(|l| l.trim_start().starts_with("64..128"))
            .unwrap();
        assert!(b.contains(" 36 "), "64..99 is 36 calls: {many}");
        assert!(
            many.lines().any(|l| l.trim_start().starts_with("0 ")),
            "{many}"
        );
    }

    #[test]
    fn a_value_no_function_records_is_an_error_naming_what_is_recorded() {
        let e = table(|i| i, 3, &opts("size")).unwrap_err();
        assert!(
            e.contains("no function records a value named `size`; recorded: parse(len)"),
            "{e}"
        );
        let mut o = opts("len");
        o.function = Some("other".into());
        assert!(table(|i| i, 3, &o).is_err());
    }

    #[test]
    fn buckets_are_powers_of_two() {
        use super::bucket;
        assert_eq!(bucket(0), (0, 1));
        assert_eq!(bucket(1), (1, 2));
        assert_eq!(bucket(83), (64, 128));
        assert_eq!(bucket(128), (128, 256));
        assert_eq!(bucket(-5), (-7, -3));
    }
}
