//! Several traces read as one: a whole test suite's binaries, or every
//! process of a command (`fgtrace record --dir`), reported per function.
//!
//! Functions are the same function when their name, module path, file and
//! line agree; threads stay apart, each named by its process
//! (`program[pid]/thread`). Times are placed on one axis by each session's
//! start (wall clock), so a merged timeline keeps the processes' order.
//! Samples are left out: their addresses belong to different processes'
//! address spaces, which one trace's mappings cannot describe.

use crate::{Event, TraceError, TraceMeta};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// How each trace's sites and threads map into the merged trace.
pub struct Merge {
    meta: TraceMeta,
    /// Per trace: its site index -> the merged index.
    sites: Vec<Vec<u32>>,
    /// Per trace: its string table index -> the merged one.
    strings: Vec<Vec<u32>>,
    /// Per trace: the merged index of its first thread.
    thread_base: Vec<u32>,
    /// Per trace: nanoseconds added to its times.
    shift_ns: Vec<u64>,
    /// Per-call counters are kept only where every trace has the same ones.
    keep_counters: bool,
    /// Samples that were left out.
    samples_left_out: u64,
}

fn program_name(m: &TraceMeta) -> String {
    Path::new(&m.program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "program".into())
}

impl Merge {
    /// The merged metadata of `metas` (in the order their events will come).
    pub fn new(metas: &[TraceMeta]) -> Merge {
        let mut meta = TraceMeta::default();
        let first = metas.first().cloned().unwrap_or_default();
        let origin = metas
            .iter()
            .map(|m| m.clock.start_unix_ns)
            .min()
            .unwrap_or(0);
        meta.clock = first.clock.clone();
        meta.clock.start_unix_ns = origin;
        meta.mode = first.mode;
        let keep_counters = metas.iter().all(|m| m.counters == first.counters);
        if keep_counters {
            meta.counters = first.counters.clone();
        }
        let names: Vec<String> = metas
            .iter()
            .map(|m| format!("{}[{}]", program_name(m), m.pid))
            .collect();
        meta.program = format!("{} traces: {}", metas.len(), names.join(", "));
        let filters: Vec<&str> = metas.iter().map(|m| m.filters.as_str()).collect();
        if filters.iter().all(|f| *f == filters[0]) {
            meta.filters = first.filters.clone();
        }
        let mut by_key: HashMap<(String, String, String, u32, bool), u32> = HashMap::new();
        let (mut sites, mut thread_base, mut shift_ns) = (Vec::new(), Vec::new(), Vec::new());
        let mut samples_left_out = 0u64;
        let mut by_text: HashMap<String, u32> = HashMap::new();
        let mut strings = Vec::new();
        for (m, name) in metas.iter().zip(&names) {
            let map: Vec<u32> = m
                .sites
                .iter()
                .map(|s| {
                    let key = (
                        s.name.clone(),
                        s.module_path.clone(),
                        s.file.clone(),
                        s.line,
                        s.is_async,
                    );
                    *by_key.entry(key).or_insert_with(|| {
                        meta.sites.push(s.clone());
                        (meta.sites.len() - 1) as u32
                    })
                })
                .collect();
            let string_map: Vec<u32> = m
                .strings
                .iter()
                .map(|t| {
                    *by_text.entry(t.clone()).or_insert_with(|| {
                        meta.strings.push(t.clone());
                        (meta.strings.len() - 1) as u32
                    })
                })
                .collect();
            strings.push(string_map);
            let base = meta.threads.len() as u32;
            let shift = m.clock.start_unix_ns.saturating_sub(origin);
            // Count-only functions, on the merged threads and sites (an
            // entry naming a site or thread its trace lacks is left out).
            for c in &m.count_only {
                if let (Some(&site), true) = (
                    map.get(c.site as usize),
                    (c.thread as usize) < m.threads.len(),
                ) {
                    meta.count_only.push(crate::CountOnly {
                        thread: c.thread.saturating_add(base),
                        site,
                        switched_at_ns: c.switched_at_ns.saturating_add(shift),
                        ..c.clone()
                    });
                }
            }
            // Planned counts, on the merged sites (the same function in
            // two processes adds up).
            for c in &m.counted {
                if let Some(&site) = map.get(c.site as usize) {
                    match meta.counted.iter_mut().find(|k| k.site == site) {
                        Some(k) => k.calls = k.calls.saturating_add(c.calls),
                        None => meta.counted.push(crate::PlannedCount { site, ..*c }),
                    }
                }
            }
            sites.push(map);
            thread_base.push(base);
            shift_ns.push(shift);
            meta.duration_ns = meta.duration_ns.max(shift.saturating_add(m.duration_ns));
            for t in &m.threads {
                let mut t = t.clone();
                t.name = format!("{name}/{}", t.name);
                samples_left_out = samples_left_out.saturating_add(t.samples);
                t.samples = 0;
                t.samples_lost = 0;
                meta.threads.push(t);
            }
            for w in &m.warnings {
                meta.warnings.push(format!("{name}: {w}"));
            }
            if let Some(c) = &m.cut_short {
                meta.warnings
                    .push(format!("{name}: recording cut short {}", c.describe()));
            }
        }
        if samples_left_out > 0 {
            meta.warnings.push(format!(
                "{samples_left_out} samples left out: the traces come from different processes, \
                 whose addresses one view cannot symbolize together (read each file alone to see them)"
            ));
        }
        if !keep_counters {
            meta.warnings.push(
                "per-call counters left out: the traces did not record the same counters".into(),
            );
        }
        if metas.iter().any(|m| m.off_cpu.is_some()) {
            meta.warnings
                .push("off-CPU time left out: read each file alone to see it".into());
        }
        Merge {
            meta,
            sites,
            strings,
            thread_base,
            shift_ns,
            keep_counters,
            samples_left_out,
        }
    }

    /// The merged metadata.
    pub fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    /// Samples the merge leaves out.
    pub fn samples_left_out(&self) -> u64 {
        self.samples_left_out
    }

    /// Event `ev` of trace `i` in the merged trace, or `None` where the
    /// merge leaves it out. An index the trace's metadata does not have is
    /// an error naming it, never a panic.
    pub fn map(&self, i: usize, ev: Event) -> Option<Result<Event, TraceError>> {
        let base = self.thread_base[i];
        let shift = self.shift_ns[i];
        let bad = |what: String| {
            Some(Err(TraceError::Corrupt {
                offset: 0,
                what: format!("trace {} of the merge: {what}", i + 1),
            }))
        };
        let site = |s: u32| self.sites[i].get(s as usize).copied();
        Some(Ok(match ev {
            Event::Call(mut c) => {
                let Some(s) = site(c.site) else {
                    return bad(format!("a call names site {}, which it lacks", c.site));
                };
                c.site = s;
                c.thread = c.thread.saturating_add(base);
                c.start_ns = c.start_ns.saturating_add(shift);
                Event::Call(c)
            }
            Event::Future(mut f) => {
                let Some(s) = site(f.site) else {
                    return bad(format!("a future names site {}, which it lacks", f.site));
                };
                f.site = s;
                f.thread = f.thread.saturating_add(base);
                f.start_ns = f.start_ns.saturating_add(shift);
                Event::Future(f)
            }
            Event::Lost(mut l) => {
                l.thread = l.thread.saturating_add(base);
                l.at_ns = l.at_ns.saturating_add(shift);
                Event::Lost(l)
            }
            Event::Counters(mut c) if self.keep_counters => {
                c.thread = c.thread.saturating_add(base);
                Event::Counters(c)
            }
            Event::Values(mut v) => {
                v.thread = v.thread.saturating_add(base);
                for x in &mut v.values {
                    if x.tag & fgtrace_core::values::tag::TYPE == fgtrace_core::values::tag::STR {
                        // An index its trace's table lacks stays out of the merged table's range.
                        x.bits = self.strings[i]
                            .get(x.bits as usize)
                            .map_or(u64::MAX, |&s| s as u64);
                    }
                }
                Event::Values(v)
            }
            Event::Marker(mut m) => {
                let Some(s) = site(m.site) else {
                    return bad(format!("a marker names site {}, which it lacks", m.site));
                };
                m.site = s;
                m.thread = m.thread.saturating_add(base);
                m.ts_ns = m.ts_ns.saturating_add(shift);
                Event::Marker(m)
            }
            Event::FutureId(mut f) => {
                f.thread = f.thread.saturating_add(base);
                // Ids are addresses and span ids, which another process may
                // use too: each trace's are moved apart by its index in the
                // top byte (user-space addresses leave it clear).
                f.id ^= (i as u64) << 56;
                Event::FutureId(f)
            }
            Event::Wake(mut w) => {
                let Some(s) = site(w.site) else {
                    return bad(format!("a wake names site {}, which it lacks", w.site));
                };
                w.site = s;
                w.thread = w.thread.saturating_add(base);
                w.ts_ns = w.ts_ns.saturating_add(shift);
                // As the future ids it names.
                w.id ^= (i as u64) << 56;
                Event::Wake(w)
            }
            Event::FutureTimes(mut f) => {
                f.thread = f.thread.saturating_add(base);
                Event::FutureTimes(f)
            }
            Event::Counters(_) | Event::Sample(_) => return None,
        }))
    }

    /// The events of several traces as one stream: `streams[i]` are trace
    /// `i`'s, in order; the first error ends the stream.
    pub fn events<I>(
        self: Arc<Self>,
        streams: Vec<I>,
    ) -> impl Iterator<Item = Result<Event, TraceError>>
    where
        I: Iterator<Item = Result<Event, TraceError>>,
    {
        streams
            .into_iter()
            .enumerate()
            .flat_map(move |(i, s)| {
                let m = self.clone();
                s.filter_map(move |e| match e {
                    Ok(ev) => m.map(i, ev),
                    Err(e) => Some(Err(e)),
                })
            })
            .scan(false, |failed, e| {
                if *failed {
                    return None;
                }
                *failed = e.is_err();
                Some(e)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Call, Sample, SiteInfo, ThreadInfo};

    fn site(name: &str, line: u32) -> SiteInfo {
        SiteInfo {
            name: name.into(),
            module_path: "m".into(),
            file: "f.rs".into(),
            line,
            is_async: false,
            values: Vec::new(),
        }
    }

    fn meta(program: &str, pid: u32, start: u64, sites: Vec<SiteInfo>) -> TraceMeta {
        let mut m = TraceMeta {
            program: format!("/x/{program}"),
            pid,
            sites,
            threads: vec![ThreadInfo {
                tid: pid,
                name: "main".into(),
                calls: 1,
                samples: 2,
                ..ThreadInfo::default()
            }],
            duration_ns: 100,
            ..TraceMeta::default()
        };
        m.clock.start_unix_ns = start;
        m
    }

    fn call(site: u32, start_ns: u64) -> Event {
        Event::Call(Call {
            thread: 0,
            site,
            depth: 0,
            start_ns,
            dur_ns: 5,
            flags: 0,
        })
    }

    #[test]
    fn string_values_index_the_merged_string_table() {
        use fgtrace_core::values::tag;
        let mut a = meta("a", 1, 1_000, vec![site("lex", 1)]);
        a.strings = vec!["ident".into(), "number".into()];
        let mut b = meta("b", 2, 1_000, vec![site("lex", 1)]);
        b.strings = vec!["number".into(), "bad digit".into()];
        let m = Merge::new(&[a, b]);
        assert_eq!(m.meta().strings, ["ident", "number", "bad digit"]);
        let values = |bits: u64| {
            Event::Values(crate::CallValues {
                thread: 0,
                values: vec![crate::Value {
                    slot: 0,
                    tag: tag::ERR | tag::STR,
                    bits,
                }],
            })
        };
        let text = |ev: Event| match ev {
            Event::Values(v) => v.values[0].shown(&m.meta().strings).to_string(),
            _ => unreachable!(),
        };
        assert_eq!(
            text(m.map(1, values(0)).unwrap().unwrap()),
            "Err(\"number\")"
        );
        assert_eq!(
            text(m.map(1, values(1)).unwrap().unwrap()),
            "Err(\"bad digit\")"
        );
        assert_eq!(
            text(m.map(0, values(0)).unwrap().unwrap()),
            "Err(\"ident\")"
        );
        // An index its trace's table lacks stays unresolved, never another string.
        assert!(text(m.map(1, values(7)).unwrap().unwrap()).starts_with("Err(<str #"));
    }

    #[test]
    fn the_same_function_in_two_traces_is_one_site_and_threads_stay_apart() {
        let a = meta("a", 1, 1_000, vec![site("parse", 1), site("run", 9)]);
        let b = meta("b", 2, 1_500, vec![site("run", 9), site("other", 3)]);
        let m = Arc::new(Merge::new(&[a, b]));
        let names: Vec<&str> = m.meta().sites.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["parse", "run", "other"]);
        assert_eq!(m.meta().threads[0].name, "a[1]/main");
        assert_eq!(m.meta().threads[1].name, "b[2]/main");
        assert_eq!(m.meta().duration_ns, 600);
        let s1 = vec![Ok(call(1, 10))].into_iter();
        let s2 = vec![
            Ok(call(0, 10)),
            Ok(Event::Sample(Sample {
                thread: 0,
                ts_ns: 1,
                shadow_depth: 0,
                cut: None,
                frames: vec![1],
            })),
        ]
        .into_iter();
        let evs: Vec<Event> = m.clone().events(vec![s1, s2]).map(Result::unwrap).collect();
        // "run" of b is the merged site 1, on the merged thread 1, 500 ns later.
        assert_eq!(
            evs,
            [call(1, 10), {
                let Event::Call(mut c) = call(1, 510) else {
                    unreachable!()
                };
                c.thread = 1;
                Event::Call(c)
            }]
        );
        assert_eq!(m.samples_left_out(), 4);
        assert!(m
            .meta()
            .warnings
            .iter()
            .any(|w| w.contains("4 samples left out")));
    }

    #[test]
    fn planned_counts_add_up_on_the_merged_sites() {
        let mut a = meta("a", 1, 1_000, vec![site("len", 1)]);
        let mut b = meta("b", 2, 1_500, vec![site("other", 3), site("len", 1)]);
        a.counted = vec![crate::PlannedCount { site: 0, calls: 10 }];
        b.counted = vec![
            crate::PlannedCount { site: 1, calls: 20 },
            crate::PlannedCount { site: 0, calls: 5 },
            // Names a site b does not have: left out.
            crate::PlannedCount { site: 9, calls: 7 },
        ];
        let m = Merge::new(&[a, b]);
        let meta = m.meta();
        let mut got: Vec<(&str, u64)> = meta
            .counted
            .iter()
            .map(|c| (meta.site_name(c.site), c.calls))
            .collect();
        got.sort();
        assert_eq!(got, [("len", 30), ("other", 5)]);
        assert_eq!(meta.total_counted(), 35);
    }

    #[test]
    fn count_only_functions_move_to_the_merged_threads_sites_and_times() {
        let mut a = meta("a", 1, 1_000, vec![site("len", 1)]);
        let mut b = meta("b", 2, 1_500, vec![site("other", 3), site("len", 1)]);
        a.count_only = vec![crate::CountOnly {
            thread: 0,
            site: 0,
            calls_after: 10,
            switched_at_ns: 5,
            calls_before: 1024,
            mean_ns_before: 3,
        }];
        b.count_only = vec![
            crate::CountOnly {
                thread: 0,
                site: 1,
                calls_after: 20,
                switched_at_ns: 7,
                calls_before: 1024,
                mean_ns_before: 4,
            },
            // Names a site b does not have: left out.
            crate::CountOnly {
                thread: 0,
                site: 9,
                ..crate::CountOnly::default()
            },
        ];
        let m = Merge::new(&[a, b]);
        let got: Vec<(u32, u32, u64, u64)> = m
            .meta()
            .count_only
            .iter()
            .map(|c| (c.thread, c.site, c.calls_after, c.switched_at_ns))
            .collect();
        // "len" is merged site 0 in both; b's thread is merged thread 1,
        // its times 500 ns later.
        assert_eq!(got, [(0, 0, 10, 5), (1, 0, 20, 507)]);
        assert_eq!(m.meta().count_only_calls(1, 0), 20);
    }

    #[test]
    fn a_site_a_trace_lacks_is_an_error_and_ends_the_stream() {
        let m = Arc::new(Merge::new(&[meta("a", 1, 0, vec![site("f", 1)])]));
        let s = vec![Ok(call(7, 0)), Ok(call(0, 1))].into_iter();
        let evs: Vec<_> = m.events(vec![s]).collect();
        assert_eq!(evs.len(), 1);
        let e = evs[0].as_ref().unwrap_err().to_string();
        assert!(e.contains("site 7"), "{e}");
    }
}
