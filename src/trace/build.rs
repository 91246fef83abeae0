//! Turns the raw records a session gathered into a [`Trace`]: restores full
//! timestamps, converts ticks to nanoseconds, and reorders each thread's calls
//! from exit order (how probes write them) to pre-order (how views read them).

use super::format::{self, ChunkEncoder};
use super::{
    flags, Call, ClockInfo, Event, FutureSpan, LossKind, Lost, RecordMode, SiteInfo, ThreadInfo,
    Trace, TraceMeta,
};
use crate::buffer::{kind, RawCall, START_MASK};
use crate::clock::{self, Calibration};
use fgtrace_core::site::Site;
use std::collections::HashMap;

/// One thread's records as gathered, oldest first.
pub(crate) struct ThreadInput {
    pub tid: u32,
    pub name: String,
    pub records: Vec<RawCall>,
    /// Flight recorder: calls overwritten before the snapshot.
    pub overwritten: u64,
    /// Stream: calls in dropped batches.
    pub dropped: u64,
    pub overruns: u64,
    /// (ns since session start, shadow depth, cut, frames), in time order.
    pub samples: Vec<(u64, u32, Option<u32>, Vec<u64>)>,
    pub samples_lost: u64,
}

impl ThreadInput {
    /// A thread with samples but no traced calls.
    pub fn empty(tid: u32, name: String) -> ThreadInput {
        ThreadInput {
            tid,
            name,
            records: Vec::new(),
            overwritten: 0,
            dropped: 0,
            overruns: 0,
            samples: Vec::new(),
            samples_lost: 0,
        }
    }
}

pub(crate) struct MetaBase {
    pub cal: Calibration,
    pub end_ticks: u64,
    pub mode: RecordMode,
    pub filters: String,
}

/// Builds a [`Trace`] incrementally from already-decoded events: what importers
/// (Zephyr dumps, span bridges) and tests use.
#[derive(Default)]
pub struct TraceBuilder {
    meta: TraceMeta,
    events: Vec<Vec<Event>>,
}

impl TraceBuilder {
    pub fn new(meta: TraceMeta) -> Self {
        let n = meta.threads.len();
        TraceBuilder {
            meta,
            events: vec![Vec::new(); n],
        }
    }

    /// Adds an event; events of one thread must come in pre-order (calls) and
    /// time order (everything else). `HAS_CHILDREN` is computed here.
    pub fn push(&mut self, e: Event) {
        let t = e.thread() as usize;
        if self.events.len() <= t {
            self.events.resize(t + 1, Vec::new());
        }
        self.events[t].push(e);
    }

    pub fn meta_mut(&mut self) -> &mut TraceMeta {
        &mut self.meta
    }

    pub fn finish(self) -> Trace {
        let mut chunks = Vec::new();
        for (t, evs) in self.events.into_iter().enumerate() {
            let mut enc = ChunkEncoder::new(t as u32);
            let n = evs.len();
            for i in 0..n {
                let mut e = evs[i].clone();
                if let Event::Call(c) = &mut e {
                    let next_deeper = evs[i + 1..]
                        .iter()
                        .find_map(|n| match n {
                            Event::Call(n) => Some(n.depth > c.depth),
                            Event::Lost(l) => Some(l.depth > c.depth),
                            _ => None,
                        })
                        .unwrap_or(false);
                    c.flags = (c.flags & !flags::HAS_CHILDREN)
                        | if next_deeper { flags::HAS_CHILDREN } else { 0 };
                }
                enc.push(&e);
            }
            chunks.extend(enc.finish());
        }
        Trace {
            meta: self.meta,
            chunks: format::interleave(chunks),
            damage: None,
        }
    }
}

/// Full tick value of a 54-bit start, taken as the one nearest the origin.
fn full_ticks(low: u64, origin: u64) -> u64 {
    let diff = low.wrapping_sub(origin) & START_MASK;
    if diff < (START_MASK >> 1) {
        origin.wrapping_add(diff)
    } else {
        origin.wrapping_sub((origin.wrapping_sub(low)) & START_MASK)
    }
}

/// The registered site with id `id`, as a trace describes it.
pub(crate) fn registered_site(id: u32) -> Option<SiteInfo> {
    fgtrace_core::site::site_by_id(id).map(site_info)
}

fn site_info(s: &Site) -> SiteInfo {
    SiteInfo {
        name: s.name.to_string(),
        module_path: s.module_path.to_string(),
        file: s.file.to_string(),
        line: s.line,
        is_async: s.is_async,
    }
}

/// `site_of` names the sites that records refer to by id (the process's
/// registry, or a site table that came with the records).
pub(crate) fn build(
    base: MetaBase,
    inputs: Vec<ThreadInput>,
    site_of: impl Fn(u32) -> Option<SiteInfo>,
) -> Trace {
    let cal = base.cal;
    let origin = cal.origin.ticks;
    let mut sites: Vec<SiteInfo> = Vec::new();
    let mut site_index: HashMap<u32, u32> = HashMap::new();
    let mut map_site = |id: u32| -> u32 {
        *site_index.entry(id).or_insert_with(|| {
            let info = match site_of(id) {
                Some(s) => s,
                None => SiteInfo {
                    name: format!("[site {id}]"),
                    module_path: String::new(),
                    file: String::new(),
                    line: 0,
                    is_async: false,
                },
            };
            sites.push(info);
            sites.len() as u32 - 1
        })
    };
    let mut threads = Vec::new();
    let mut chunks = Vec::new();
    for (t, mut input) in inputs.into_iter().enumerate() {
        let t = t as u32;
        let samples = std::mem::take(&mut input.samples);
        let n_samples = samples.len() as u64;
        let mut samples = samples.into_iter().peekable();
        // Samples go into the pre-order call stream by time: before the first
        // call that starts after them.
        let mut emit_samples_before = |enc: &mut ChunkEncoder, until: u64| {
            while let Some(s) = samples.next_if(|s| s.0 < until) {
                enc.push(&Event::Sample(super::Sample {
                    thread: t,
                    ts_ns: s.0,
                    shadow_depth: s.1,
                    cut: s.2,
                    frames: s.3,
                }));
            }
        };
        let recs = &input.records;
        let n = recs.len();
        // Restore full timestamps; separate whole-future records from the call tree.
        let mut start = Vec::with_capacity(n);
        let mut tree: Vec<u32> = Vec::with_capacity(n);
        let mut futures = Vec::new();
        for (i, r) in recs.iter().enumerate() {
            let s = full_ticks(r.start_low(), origin);
            start.push(s);
            if r.kind() == kind::FUTURE {
                futures.push(i as u32);
            } else {
                tree.push(i as u32);
            }
        }
        // Subtree sizes in exit order: a record adopts the finished subtrees
        // above it on the stack that are deeper and started no earlier (the
        // time check keeps orphans of a lost parent from being adopted by a
        // later sibling of that parent).
        let m = tree.len();
        let mut size = vec![1u32; m];
        let mut stack: Vec<u32> = Vec::new();
        for k in 0..m {
            let r = recs[tree[k] as usize];
            let (d, s) = (r.depth(), start[tree[k] as usize]);
            let mut sz = 1u32;
            while let Some(&top) = stack.last() {
                let tr = recs[tree[top as usize] as usize];
                if tr.depth() > d && start[tree[top as usize] as usize] >= s {
                    sz += size[top as usize];
                    stack.pop();
                } else {
                    break;
                }
            }
            size[k] = sz;
            stack.push(k as u32);
        }
        let mut enc = ChunkEncoder::new(t);
        let mut calls = 0u64;
        if input.overwritten > 0 {
            let at = recs
                .first()
                .map(|r| cal.ns(full_ticks(r.start_low(), origin)))
                .unwrap_or(0);
            enc.push(&Event::Lost(Lost {
                thread: t,
                depth: 0,
                at_ns: at,
                count: input.overwritten,
                kind: LossKind::Overwritten,
            }));
        }
        // Pre-order walk: roots left to right, children left to right.
        let mut work: Vec<u32> = Vec::new();
        for &root in stack.iter() {
            work.push(root);
            while let Some(k) = work.pop() {
                let r = recs[tree[k as usize] as usize];
                let s = start[tree[k as usize] as usize];
                let start_ns = cal.ns(s);
                emit_samples_before(&mut enc, start_ns);
                match r.kind() {
                    kind::LOST => enc.push(&Event::Lost(Lost {
                        thread: t,
                        depth: r.depth(),
                        at_ns: start_ns,
                        count: r.dur(),
                        kind: LossKind::Dropped,
                    })),
                    rk => {
                        calls += 1;
                        let mut fl = 0;
                        if r.unwound() {
                            fl |= flags::UNWOUND;
                        }
                        if rk == kind::POLL {
                            fl |= flags::POLL;
                        }
                        if size[k as usize] > 1 {
                            fl |= flags::HAS_CHILDREN;
                        }
                        enc.push(&Event::Call(Call {
                            thread: t,
                            site: map_site(r.site()),
                            depth: r.depth(),
                            start_ns,
                            dur_ns: cal.ns(s.wrapping_add(r.dur())) - start_ns,
                            flags: fl,
                        }));
                    }
                }
                let sz = size[k as usize];
                if sz > 1 {
                    let lo = k + 1 - sz;
                    let mut c = k - 1;
                    loop {
                        work.push(c);
                        let csz = size[c as usize];
                        if c < lo + csz {
                            break;
                        }
                        c -= csz;
                    }
                }
            }
        }
        emit_samples_before(&mut enc, u64::MAX);
        futures.sort_by_key(|&i| start[i as usize]);
        for &i in &futures {
            let r = recs[i as usize];
            let s = start[i as usize];
            let start_ns = cal.ns(s);
            enc.push(&Event::Future(FutureSpan {
                thread: t,
                site: map_site(r.site()),
                start_ns,
                dur_ns: cal.ns(s.wrapping_add(r.dur())) - start_ns,
                polls: r.depth(),
                cancelled: r.unwound(),
            }));
        }
        chunks.extend(enc.finish());
        threads.push(ThreadInfo {
            tid: input.tid,
            name: input.name,
            calls,
            lost: input.dropped + input.overwritten,
            overruns: input.overruns,
            samples: n_samples,
            samples_lost: input.samples_lost,
        });
    }
    let meta = TraceMeta {
        program: std::env::args().next().unwrap_or_default(),
        pid: std::process::id(),
        clock: ClockInfo {
            source: clock::SOURCE.to_string(),
            ticks_per_ns: cal.ticks_per_ns,
            start_mono_ns: cal.origin.mono_ns,
            start_unix_ns: cal.origin.unix_ns,
        },
        duration_ns: cal.ns(base.end_ticks),
        mode: base.mode,
        filters: base.filters,
        sites,
        threads,
        counters: Vec::new(),
        sampling: None,
        mappings: Vec::new(),
    };
    Trace {
        meta,
        chunks: format::interleave(chunks),
        damage: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ClockPoint;

    #[test]
    fn full_ticks_restores_high_bits_on_both_sides_of_the_origin() {
        let origin = (7u64 << 54) + 1000;
        assert_eq!(full_ticks((origin + 5) & START_MASK, origin), origin + 5);
        assert_eq!(full_ticks((origin - 5) & START_MASK, origin), origin - 5);
        let origin = (3u64 << 54) + 2;
        assert_eq!(full_ticks((origin - 10) & START_MASK, origin), origin - 10);
    }

    fn cal() -> Calibration {
        Calibration {
            origin: ClockPoint {
                ticks: 1_000_000,
                mono_ns: 0,
                unix_ns: 0,
            },
            ticks_per_ns: 1.0,
        }
    }

    fn rec(start: u64, depth: u32, dur: u64, site: u32) -> RawCall {
        RawCall::pack(1_000_000 + start, depth, dur, site, false, kind::CALL)
    }

    /// Exit order in, pre-order out, with a lost parent whose children must
    /// not be adopted by its later sibling.
    #[test]
    fn exit_order_becomes_pre_order() {
        // main(0..100) { a(10..40) { b(20..30) } lost(50) c(60..90) { d(70..80) } }
        // where the parent of x(52..54) was lost.
        let records = vec![
            rec(20, 2, 10, 2),                                         // b
            rec(10, 1, 30, 1),                                         // a
            rec(52, 3, 2, 5),                                          // x (orphan, parent lost)
            RawCall::pack(1_000_000 + 55, 1, 7, 0, false, kind::LOST), // lost marker
            rec(70, 2, 10, 4),                                         // d
            rec(60, 1, 30, 3),                                         // c
            rec(0, 0, 100, 0),                                         // main
        ];
        let input = ThreadInput {
            records,
            dropped: 7,
            ..ThreadInput::empty(1, "t".into())
        };
        let base = MetaBase {
            cal: cal(),
            end_ticks: 1_000_200,
            mode: RecordMode::Stream,
            filters: String::new(),
        };
        let t = build(base, vec![input], |_| None);
        let got: Vec<String> = t
            .events()
            .map(|e| match e {
                Event::Call(c) => format!(
                    "{}{}@{}{}",
                    "  ".repeat(c.depth as usize),
                    c.site,
                    c.start_ns,
                    if c.has_children() { "{" } else { "" }
                ),
                Event::Lost(l) => format!("{}lost{}", "  ".repeat(l.depth as usize), l.count),
                _ => "?".into(),
            })
            .collect();
        // Site indices are assigned in order of appearance: main=0, a=1, b=2, x=3, c=4, d=5.
        assert_eq!(
            got,
            vec![
                "0@0{",
                "  1@10{",
                "    2@20",
                "      3@52",
                "  lost7",
                "  4@60{",
                "    5@70"
            ]
        );
        assert_eq!(t.meta().threads[0].calls, 6);
        assert_eq!(t.meta().threads[0].lost, 7);
    }
}
