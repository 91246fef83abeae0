//! Allocation figures (`fgtrace::alloc::Counting`) and per-call
//! counter deltas (`Config::counters`): the core writes them as extension
//! records right after the record of the call they belong to; here they
//! become an `Event::Counters` after that call (values as
//! [`counter_names`](super::counter_names) lays them out; callees included).

use super::{CounterLayout, ThreadInput};
use crate::recorded::Rec;
use crate::{CallCounters, Event};
use fgtrace_core::record::kind;
use fgtrace_core::record::{ext, AllocCounts};
use std::collections::HashMap;

/// Whether the records carry allocation figures: the counting allocator
/// is installed in this process, or some record has them.
pub fn recorded(inputs: &[ThreadInput]) -> bool {
    fgtrace_core::alloc::installed()
        || inputs.iter().any(|t| {
            t.records
                .iter()
                .any(|r| r.is_ext() && r.ext_sub() <= ext::REALLOCS)
        })
}

/// One thread's figures by the index of their call's record.
#[derive(Default)]
pub struct Attach {
    allocs: HashMap<usize, AllocCounts>,
    /// Counter deltas by record, by counter index.
    counters: HashMap<usize, Vec<Option<u64>>>,
    /// Values by record (a call's, a poll's or a whole future's).
    values: HashMap<usize, Vec<crate::Value>>,
    /// Future ids by record (a poll's or a whole future's).
    futures: HashMap<usize, u64>,
    /// What whole futures measured of themselves, by record.
    times: HashMap<usize, crate::FutureTimes>,
    /// Woken futures' ids by marker record (the marker is a wake).
    wakes: HashMap<usize, u64>,
    /// Records that are instant markers (their extension said so).
    markers: std::collections::HashSet<usize>,
    last_call: Option<usize>,
    last_with_values: Option<usize>,
}

impl Attach {
    /// No figures, but what the next extension records attach to: for
    /// the records after a flush, which the last record's may follow.
    pub fn fresh(&self) -> Attach {
        Attach {
            last_call: self.last_call,
            last_with_values: self.last_with_values,
            ..Attach::default()
        }
    }

    /// Takes record `i` if it is an extension record, attaching it to the
    /// call just before (one whose call is gone, overwritten or in a
    /// dropped batch, is dropped with it).
    pub fn take(&mut self, i: usize, r: &Rec) -> bool {
        let is_ext = r.kind as u64 == kind::LOST && r.unwound;
        if !is_ext {
            self.last_call = match r.kind as u64 {
                kind::CALL | kind::POLL => Some(i),
                _ => None,
            };
            self.last_with_values = match r.kind as u64 {
                kind::CALL | kind::POLL | kind::FUTURE => Some(i),
                _ => None,
            };
            return false;
        }
        if r.site as u64 == ext::MARKER {
            if let Some(c) = self.last_with_values {
                self.markers.insert(c);
            }
            // A marker has no figures of its own to take.
            self.last_call = None;
            return true;
        }
        if r.site as u64 == ext::FUTURE {
            if let Some(c) = self.last_with_values {
                self.futures.insert(c, r.count);
            }
            return true;
        }
        if r.site as u64 == ext::WAKE {
            if let Some(c) = self.last_with_values.filter(|c| self.markers.contains(c)) {
                self.wakes.insert(c, r.count);
            }
            return true;
        }
        if r.site as u64 == ext::FUTURE_BUSY || r.site as u64 == ext::FUTURE_WAKES {
            if let Some(c) = self.last_with_values {
                let t = self.times.entry(c).or_insert(crate::FutureTimes {
                    thread: 0,
                    busy_ns: 0,
                    polls: 0,
                    waits: None,
                });
                if r.site as u64 == ext::FUTURE_BUSY {
                    (t.busy_ns, t.polls) = (r.count, r.b);
                } else {
                    t.waits = Some(crate::Waits {
                        scheduled_ns: r.count,
                        wakes: r.b,
                    });
                }
            }
            return true;
        }
        if r.site as u64 == ext::VALUE {
            if let Some(c) = self.last_with_values {
                let slot = r.b & 7;
                let tag = (r.b >> 3) & 0xff;
                if slot < fgtrace_core::values::MAX_VALUES as u64 {
                    self.values.entry(c).or_default().push(crate::Value {
                        slot: slot as u8,
                        tag: tag as u8,
                        bits: r.count,
                    });
                }
            }
            return true;
        }
        let Some(c) = self.last_call else {
            return true;
        };
        let (x, y) = (r.count, r.b);
        match r.site as u64 {
            ext::ALLOCS => {
                let a = self.allocs.entry(c).or_default();
                (a.allocs, a.alloc_bytes) = (x, y);
            }
            ext::FREES => {
                let a = self.allocs.entry(c).or_default();
                (a.frees, a.freed_bytes) = (x, y);
            }
            ext::REALLOCS => self.allocs.entry(c).or_default().reallocs = x,
            ext::COUNTER if y < 64 => {
                let v = self.counters.entry(c).or_default();
                if v.len() <= y as usize {
                    v.resize(y as usize + 1, None);
                }
                v[y as usize] = Some(x);
            }
            _ => {}
        }
        true
    }

    /// The record at `i` is an instant marker (asked once, when it is
    /// written out).
    pub fn is_marker(&mut self, i: usize) -> bool {
        // Most traces have no markers: no hashing per record for them.
        !self.markers.is_empty() && self.markers.remove(&i)
    }

    /// The woken future's id, if the marker recorded at `i` is a wake
    /// (asked once, when it is written out).
    pub fn wake_of(&mut self, i: usize) -> Option<u64> {
        if self.wakes.is_empty() {
            return None;
        }
        self.wakes.remove(&i)
    }

    /// What the whole future recorded at `i` measured of itself, if it
    /// did. Called once, when it is written out.
    pub fn future_times_event(&mut self, thread: u32, i: usize) -> Option<Event> {
        if self.times.is_empty() {
            return None;
        }
        let t = self.times.remove(&i)?;
        Some(Event::FutureTimes(crate::FutureTimes { thread, ..t }))
    }

    /// The future id of the poll (or future) recorded at `i`, if it has one.
    /// Called once per record, when it is written out: the id goes.
    pub fn future_id_event(&mut self, thread: u32, i: usize) -> Option<Event> {
        // Traces without async fns: no hashing per call for them.
        if self.futures.is_empty() {
            return None;
        }
        let id = self.futures.remove(&i)?;
        Some(Event::FutureId(crate::FutureId { thread, id }))
    }

    /// The values event of the call (or future) recorded at `i`, if it has values.
    /// Called once per call, when it is written out: its values go.
    pub fn values_event(&mut self, thread: u32, i: usize) -> Option<Event> {
        // Most traces have no values: no hashing per call for them.
        if self.values.is_empty() {
            return None;
        }
        let values = self.values.remove(&i)?;
        Some(Event::Values(crate::CallValues { thread, values }))
    }

    /// The counters event of the call recorded at `i`: `None` when the
    /// trace has no allocation figures and the call no counter delta
    /// (a call open before its thread joined a counted session).
    ///
    /// Called once per call, when it is written out: its figures go.
    pub fn event(&mut self, thread: u32, i: usize, layout: CounterLayout) -> Option<Event> {
        if !layout.with_allocs && self.counters.is_empty() {
            return None;
        }
        let ctr = self.counters.remove(&i);
        let ctr = ctr.as_ref();
        if !layout.with_allocs && (ctr.is_none() || layout.n_counters == 0) {
            return None;
        }
        let mut values = Vec::with_capacity(5 + layout.n_counters);
        if layout.with_allocs {
            let a = self.allocs.remove(&i).unwrap_or_default();
            values.extend([a.allocs, a.alloc_bytes, a.frees, a.freed_bytes, a.reallocs]);
        }
        for k in 0..layout.n_counters {
            values.push(ctr.and_then(|v| v.get(k).copied().flatten()).unwrap_or(0));
        }
        Some(Event::Counters(CallCounters { thread, values }))
    }
}
