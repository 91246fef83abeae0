//! Native Perfetto protobuf (`perfetto_trace.proto`), for ui.perfetto.dev and
//! `trace_processor`.
//!
//! - a `TrackDescriptor` for the process and one per thread (pid, tid, name);
//! - every traced call: a `TYPE_SLICE_BEGIN`/`TYPE_SLICE_END` pair on its
//!   thread's track, the name and source location interned per site
//!   (`InternedData.event_names`, `source_locations`); ends are written in
//!   stack order, so nesting on a track is exactly the recorded one (a call
//!   that would outlive its parent in a damaged trace is cut at the parent's end);
//! - async lanes: one track per future (parent: the process), named
//!   `fn #n`, with the whole future as a slice and its polls (matched by
//!   [`lanes`](super::lanes)) nested in it as `poll` slices; each poll slice
//!   on a thread carries a flow id that the lane's copy terminates, so the UI
//!   draws an arrow from the polling thread to the future's lane;
//! - per-call counters: a counter track per thread and counter, one value
//!   (the call's delta) at each call's end, and the values as debug
//!   annotations on the call's slice;
//! - samples: `PerfSample` packets (pid, tid, interned callstack of
//!   symbolized frames, root first);
//! - losses: instant events named `LOST N records` on the thread's track;
//! - instant markers (`tracing` events): instant events on the thread's
//!   track, named after their site (interned like a call's name and source
//!   location), category `event`, with `depth` and their values;
//! - off-CPU time (when recorded): a child track `off-CPU` under each
//!   thread's track, with a `blocked` or `preempted` slice per stretch the
//!   thread was switched out (they may start in one call and end in another,
//!   so they get their own track).
//! - a time window and a minimum duration (`window`, see
//!   [`window`](super::window)): only what it keeps is written, and a track
//!   `fgtrace window` under the process holds one instant event at the
//!   window's start, named after the window and what it left out, with the
//!   counts as debug annotations (the UI shows them when it is selected).
//!
//! One packet sequence (`trusted_packet_sequence_id` 1) whose first packet
//! clears the incremental state; interned data is written the first time a
//! name, frame or stack is used. Packets are written as they are made, each
//! length-delimited as field 1 of `Trace`, so memory is per thread, per site
//! and per distinct stack, never the trace.
//!
//! The messages are hand-written prost structs carrying only the fields used,
//! with the field numbers and types of upstream `perfetto_trace.proto`, copied
//! from the descriptors in the PyPI `perfetto` package (0.59.1); the CLI tests
//! decode the output with that package's `perfetto_trace_pb2`, so a wrong
//! number or wire type shows up as a missing field there.

use super::lanes::{PendingPoll, PollMatcher};
use super::offcpu::{off_cpu_slices, off_cpu_threads};
use crate::consume::{feed, Consume};
use crate::resolve::Resolve;
use crate::threads::{shown, thread_mask, ThreadSel};
use crate::window::{LeftOut, Window, WindowFilter};
use fgtrace_trace::{
    Call, CallCounters, CallValues, Event, FutureSpan, LossKind, Lost, Marker, Sample, TraceError,
    TraceMeta,
};
use prost::Message;
use std::collections::HashMap;
use std::io::{self, Write};

pub mod proto;

use proto::*;

/// What to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfettoOptions {
    /// Only these threads (empty: all).
    pub threads: Vec<ThreadSel>,
    /// Samples as `PerfSample`s with their stacks.
    pub samples: bool,
    /// A track per future, with its polls.
    pub futures: bool,
    /// An off-CPU track under each thread (when the trace has off-CPU time).
    pub off_cpu: bool,
    /// Only what this time window and minimum duration keep (default: everything).
    pub window: Window,
}

impl Default for PerfettoOptions {
    fn default() -> Self {
        PerfettoOptions {
            threads: Vec::new(),
            samples: true,
            futures: true,
            off_cpu: true,
            window: Window::default(),
        }
    }
}

/// What was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfettoStats {
    /// Slices on thread tracks, one per call.
    pub calls: u64,
    /// Future tracks.
    pub futures: u64,
    /// Polls placed on a future's track.
    pub lane_polls: u64,
    /// `PerfSample` packets.
    pub samples: u64,
    /// Instant events for lost records.
    pub losses: u64,
    /// Values on counter tracks (one per call and counter).
    pub counter_values: u64,
    /// Off-CPU slices.
    pub off_cpu: u64,
    /// Instant markers (`tracing` events) on thread tracks.
    pub markers: u64,
    /// Wakes of futures, instant events on the waking threads' tracks.
    pub wakes: u64,
    /// Packets written.
    pub packets: u64,
    /// Bytes written, each packet's field tag and length prefix included.
    pub bytes: u64,
    /// What the window left out.
    pub left_out: LeftOut,
}

const SEQ: u32 = 1;
const PROCESS_UUID: u64 = 1;
const MAPPING_IID: u64 = 1;

fn thread_uuid(t: u32) -> u64 {
    0x1_0000_0000 + t as u64
}

fn counter_uuid(t: u32, k: usize) -> u64 {
    0x2_0000_0000 + ((t as u64) << 8) + k as u64
}

fn off_cpu_uuid(t: u32) -> u64 {
    0x3_0000_0000 + t as u64
}

/// The track that describes the window.
const WINDOW_UUID: u64 = 0x4_0000_0000;

fn future_uuid(n: u64) -> u64 {
    0x1_0000_0000_0000 + n
}

fn ann_u(name: &str, v: u64) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(name.into()),
        uint_value: Some(v),
        ..Default::default()
    }
}

/// A recorded value: integers and `bool`s typed, a string as its text, the
/// rest (`'x'`, `Ok(3)`, `Err("bad digit")`) as strings.
fn ann_value(name: &str, v: &fgtrace_trace::Shown<'_>) -> DebugAnnotation {
    use fgtrace_core::values::tag;
    let mut a = DebugAnnotation {
        name: Some(name.into()),
        ..Default::default()
    };
    match (v.tag & tag::VARIANT, v.tag & tag::TYPE) {
        (0, tag::BOOL) => a.bool_value = Some(v.bits != 0),
        (0, tag::SIGNED) => a.int_value = Some(v.bits as i64),
        (0, tag::UNSIGNED) => a.uint_value = Some(v.bits),
        (0, tag::STR) if v.text().is_some() => a.string_value = v.text().map(String::from),
        _ => a.string_value = Some(v.to_string()),
    }
    a
}

fn ann_b(name: &str, v: bool) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(name.into()),
        bool_value: Some(v),
        ..Default::default()
    }
}

#[derive(Default)]
struct ThreadState {
    described: bool,
    /// Open slices: (depth, end_ns).
    open: Vec<(u32, u64)>,
    /// The last call, waiting for its counters and values.
    pending: Option<(Call, u64, Option<CallCounters>)>,
    counters_described: Vec<bool>,
}

struct Writer<'a, W: Write, R: Resolve> {
    meta: &'a TraceMeta,
    opts: &'a PerfettoOptions,
    w: W,
    resolver: R,
    mask: Vec<bool>,
    threads: Vec<ThreadState>,
    sites_interned: Vec<bool>,
    lanes: PollMatcher,
    /// Resolved names per (address, is-return-address), as frame iids.
    frames: HashMap<(u64, bool), Vec<u64>>,
    function_names: HashMap<String, u64>,
    callstacks: HashMap<Vec<u64>, u64>,
    next_iid: u64,
    mapping_written: bool,
    stats: PerfettoStats,
    buf: Vec<u8>,
    filter: WindowFilter,
    /// The last future, until its values (an async fn's) could follow.
    pending_future: Option<FutureSpan>,
    /// The held future\'s values (its id follows them).
    pending_future_values: Option<CallValues>,
    /// The last instant marker, until its values could follow.
    pending_marker: Option<Marker>,
}

impl<W: Write, R: Resolve> Writer<'_, W, R> {
    /// Writes the future held until its values and its id were seen.
    fn flush_future(&mut self, id: Option<u64>) -> io::Result<()> {
        let values = self.pending_future_values.take();
        match self.pending_future.take() {
            Some(f) => self.future(&f, values.as_ref(), id),
            None => Ok(()),
        }
    }

    fn tid(&self, t: u32) -> u32 {
        self.meta.threads.get(t as usize).map_or(t, |i| i.tid)
    }

    fn packet(&mut self, mut p: TracePacket) -> io::Result<()> {
        p.trusted_packet_sequence_id = Some(SEQ);
        if p.sequence_flags.is_none() && self.stats.packets > 0 {
            p.sequence_flags = Some(SEQ_NEEDS_INCREMENTAL_STATE);
        }
        self.buf.clear();
        self.buf.push(0x0a); // Trace.packet: field 1, length-delimited
        p.encode_length_delimited(&mut self.buf)
            .expect("a Vec grows as needed");
        self.w.write_all(&self.buf)?;
        self.stats.packets += 1;
        self.stats.bytes += self.buf.len() as u64;
        Ok(())
    }

    fn header(&mut self) -> io::Result<()> {
        let m = self.meta;
        self.packet(TracePacket {
            incremental_state_cleared: Some(true),
            first_packet_on_sequence: Some(true),
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(PROCESS_UUID),
                process: Some(ProcessDescriptor {
                    pid: Some(m.pid as i32),
                    process_name: Some(m.program.clone()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        })?;
        for t in 0..m.threads.len() as u32 {
            if shown(&self.mask, !self.opts.threads.is_empty(), t) {
                self.thread(t)?;
            }
        }
        if self.opts.off_cpu {
            self.off_cpu()?;
        }
        Ok(())
    }

    /// Each thread's off-CPU stretches, on a track under the thread's.
    fn off_cpu(&mut self) -> io::Result<()> {
        let (meta, mask, filtered) = (self.meta, self.mask.clone(), !self.opts.threads.is_empty());
        for (t, _) in off_cpu_threads(meta, &mask, filtered) {
            self.packet(TracePacket {
                track_descriptor: Some(TrackDescriptor {
                    uuid: Some(off_cpu_uuid(t)),
                    parent_uuid: Some(thread_uuid(t)),
                    name: Some("off-CPU".into()),
                    ..Default::default()
                }),
                ..Default::default()
            })?;
        }
        for s in off_cpu_slices(meta, &mask, filtered) {
            if !self.filter.admit_off_cpu(s.start_ns, s.end_ns) {
                continue;
            }
            for (ts, ty) in [(s.start_ns, TYPE_SLICE_BEGIN), (s.end_ns, TYPE_SLICE_END)] {
                let begin = ty == TYPE_SLICE_BEGIN;
                self.packet(TracePacket {
                    timestamp: Some(ts),
                    track_event: Some(TrackEvent {
                        r#type: Some(ty),
                        track_uuid: Some(off_cpu_uuid(s.thread)),
                        name: begin.then(|| s.kind.name().to_string()),
                        categories: if begin {
                            vec!["off-cpu".into()]
                        } else {
                            Vec::new()
                        },
                        ..Default::default()
                    }),
                    ..Default::default()
                })?;
            }
            self.stats.off_cpu += 1;
        }
        Ok(())
    }

    fn state(&mut self, t: u32) -> &mut ThreadState {
        let i = t as usize;
        if self.threads.len() <= i {
            self.threads.resize_with(i + 1, ThreadState::default);
        }
        &mut self.threads[i]
    }

    /// The thread's track descriptor, once.
    fn thread(&mut self, t: u32) -> io::Result<()> {
        if self.state(t).described {
            return Ok(());
        }
        self.state(t).described = true;
        let name = self
            .meta
            .threads
            .get(t as usize)
            .map_or_else(|| format!("thread-{t}"), |i| i.name.clone());
        let tid = self.tid(t);
        self.packet(TracePacket {
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(thread_uuid(t)),
                parent_uuid: Some(PROCESS_UUID),
                thread: Some(ThreadDescriptor {
                    pid: Some(self.meta.pid as i32),
                    tid: Some(tid as i64),
                    thread_name: Some(name),
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// Interned name and source location of `site` (iid = site + 1), the first time.
    fn intern_site(&mut self, site: u32) -> Option<InternedData> {
        let i = site as usize;
        if self.sites_interned.len() <= i {
            self.sites_interned.resize(i + 1, false);
        }
        if self.sites_interned[i] {
            return None;
        }
        self.sites_interned[i] = true;
        let iid = site as u64 + 1;
        let (name, loc) = match self.meta.sites.get(i) {
            Some(s) => (
                s.name.clone(),
                SourceLocation {
                    iid: Some(iid),
                    file_name: Some(s.file.clone()),
                    function_name: Some(s.full_name()),
                    line_number: Some(s.line),
                },
            ),
            None => (
                "[unknown site]".to_string(),
                SourceLocation {
                    iid: Some(iid),
                    ..Default::default()
                },
            ),
        };
        Some(InternedData {
            event_names: vec![EventName {
                iid: Some(iid),
                name: Some(name),
            }],
            source_locations: vec![loc],
            ..Default::default()
        })
    }

    /// Ends the open slices of thread `t` that do not contain a call at
    /// `depth` starting at `at` (all of them with `depth` 0 and `at` MAX).
    fn close(&mut self, t: u32, depth: u32, at: u64) -> io::Result<()> {
        while let Some(&(d, end)) = self.state(t).open.last() {
            if d < depth && end >= at {
                break;
            }
            self.state(t).open.pop();
            self.packet(TracePacket {
                timestamp: Some(end),
                track_event: Some(TrackEvent {
                    r#type: Some(TYPE_SLICE_END),
                    track_uuid: Some(thread_uuid(t)),
                    ..Default::default()
                }),
                ..Default::default()
            })?;
        }
        Ok(())
    }

    fn flush_call(&mut self, t: u32, values: Option<&CallValues>) -> io::Result<()> {
        let Some((c, flow, counters)) = self
            .threads
            .get_mut(t as usize)
            .and_then(|s| s.pending.take())
        else {
            return Ok(());
        };
        let counters = counters.as_ref();
        self.thread(t)?;
        self.close(t, c.depth, c.start_ns)?;
        // A child never outlives its parent on the track.
        let end = match self.state(t).open.last() {
            Some(&(_, pend)) => c.end_ns().min(pend),
            None => c.end_ns(),
        };
        let mut ann = Vec::new();
        if c.unwound() {
            ann.push(ann_b("unwound", true));
        }
        if c.is_poll() {
            ann.push(ann_b("poll", true));
        }
        let m = self.meta;
        if let Some(cs) = counters {
            for (i, &v) in cs.values.iter().enumerate() {
                let key = m
                    .counters
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("counter{i}"));
                ann.push(ann_u(&key, v));
            }
        }
        if let (Some(vs), Some(site)) = (values, m.sites.get(c.site as usize)) {
            // Under their own names (`len`, `ret`), as the JSON export has them.
            for (name, v) in vs.named(site, &m.strings) {
                ann.push(ann_value(name, &v));
            }
        }
        let interned = self.intern_site(c.site);
        self.packet(TracePacket {
            timestamp: Some(c.start_ns),
            interned_data: interned,
            track_event: Some(TrackEvent {
                r#type: Some(TYPE_SLICE_BEGIN),
                track_uuid: Some(thread_uuid(t)),
                name_iid: Some(c.site as u64 + 1),
                source_location_iid: Some(c.site as u64 + 1),
                debug_annotations: ann,
                flow_ids: if flow != 0 { vec![flow] } else { Vec::new() },
                ..Default::default()
            }),
            ..Default::default()
        })?;
        self.state(t).open.push((c.depth, end));
        self.stats.calls += 1;
        if let Some(cs) = counters {
            for (k, &v) in cs.values.iter().enumerate() {
                self.counter(t, k, end, v)?;
            }
        }
        Ok(())
    }

    fn counter(&mut self, t: u32, k: usize, ts: u64, v: u64) -> io::Result<()> {
        let st = self.state(t);
        if st.counters_described.len() <= k {
            st.counters_described.resize(k + 1, false);
        }
        if !st.counters_described[k] {
            st.counters_described[k] = true;
            let name = self
                .meta
                .counters
                .get(k)
                .cloned()
                .unwrap_or_else(|| format!("counter{k}"));
            let label = self.meta.thread_label(t);
            self.packet(TracePacket {
                track_descriptor: Some(TrackDescriptor {
                    uuid: Some(counter_uuid(t, k)),
                    parent_uuid: Some(thread_uuid(t)),
                    name: Some(format!("{name} per call ({label})")),
                    counter: Some(CounterDescriptor {
                        unit_name: Some(name),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })?;
        }
        self.stats.counter_values += 1;
        self.packet(TracePacket {
            timestamp: Some(ts),
            track_event: Some(TrackEvent {
                r#type: Some(TYPE_COUNTER),
                track_uuid: Some(counter_uuid(t, k)),
                counter_value: Some(v.min(i64::MAX as u64) as i64),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn future(
        &mut self,
        f: &FutureSpan,
        values: Option<&CallValues>,
        id: Option<u64>,
    ) -> io::Result<()> {
        let mut vals = Vec::new();
        if let (Some(vs), Some(site)) = (values, self.meta.sites.get(f.site as usize)) {
            vals.extend(
                vs.named(site, &self.meta.strings)
                    .map(|(n, v)| ann_value(n, &v)),
            );
        }
        self.stats.futures += 1;
        let n = self.stats.futures;
        let uuid = future_uuid(n);
        let polls = self.lanes.future_of(f, id);
        let end = f.start_ns.saturating_add(f.dur_ns);
        self.packet(TracePacket {
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(uuid),
                parent_uuid: Some(PROCESS_UUID),
                name: Some(format!("{} #{n}", self.meta.site_name(f.site))),
                ..Default::default()
            }),
            ..Default::default()
        })?;
        let interned = self.intern_site(f.site);
        self.packet(TracePacket {
            timestamp: Some(f.start_ns),
            interned_data: interned,
            track_event: Some(TrackEvent {
                r#type: Some(TYPE_SLICE_BEGIN),
                track_uuid: Some(uuid),
                name_iid: Some(f.site as u64 + 1),
                source_location_iid: Some(f.site as u64 + 1),
                categories: vec!["future".into()],
                debug_annotations: [
                    ann_u("polls", f.polls as u64),
                    ann_b("cancelled", f.cancelled),
                    ann_u("completed_on_tid", self.tid(f.thread) as u64),
                ]
                .into_iter()
                .chain(vals)
                .collect(),
                ..Default::default()
            }),
            ..Default::default()
        })?;
        for PendingPoll { call, id } in polls {
            self.lane_poll(uuid, &call, id)?;
        }
        self.packet(TracePacket {
            timestamp: Some(end),
            track_event: Some(TrackEvent {
                r#type: Some(TYPE_SLICE_END),
                track_uuid: Some(uuid),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn lane_poll(&mut self, uuid: u64, c: &Call, flow: u64) -> io::Result<()> {
        let tid = self.tid(c.thread);
        self.packet(TracePacket {
            timestamp: Some(c.start_ns),
            track_event: Some(TrackEvent {
                r#type: Some(TYPE_SLICE_BEGIN),
                track_uuid: Some(uuid),
                name: Some("poll".into()),
                categories: vec!["poll".into()],
                debug_annotations: vec![ann_u("tid", tid as u64)],
                terminating_flow_ids: vec![flow],
                ..Default::default()
            }),
            ..Default::default()
        })?;
        self.stats.lane_polls += 1;
        self.packet(TracePacket {
            timestamp: Some(c.end_ns()),
            track_event: Some(TrackEvent {
                r#type: Some(TYPE_SLICE_END),
                track_uuid: Some(uuid),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn string_iid(&mut self, name: &str, new: &mut InternedData) -> u64 {
        if let Some(&iid) = self.function_names.get(name) {
            return iid;
        }
        self.next_iid += 1;
        let iid = self.next_iid;
        self.function_names.insert(name.to_string(), iid);
        new.function_names.push(InternedString {
            iid: Some(iid),
            str: Some(name.as_bytes().to_vec()),
        });
        iid
    }

    fn sample(&mut self, s: &Sample) -> io::Result<()> {
        let mut new = InternedData::default();
        if !self.mapping_written {
            self.mapping_written = true;
            self.next_iid += 1;
            let path = self.next_iid;
            new.mapping_paths.push(InternedString {
                iid: Some(path),
                str: Some(self.meta.program.as_bytes().to_vec()),
            });
            new.mappings.push(Mapping {
                iid: Some(MAPPING_IID),
                start: Some(0),
                end: Some(u64::MAX),
                path_string_ids: vec![path],
            });
        }
        // Frame iids, innermost first (inlined frames before their caller).
        let mut ids: Vec<u64> = Vec::new();
        for (i, &a) in s.frames.iter().enumerate() {
            let key = (a, i > 0);
            if !self.frames.contains_key(&key) {
                let mut names = self.resolver.frames(a, i > 0);
                if names.is_empty() {
                    names.push(format!("{a:#x}"));
                }
                let mut fids = Vec::with_capacity(names.len());
                for n in names {
                    let fname = self.string_iid(&n, &mut new);
                    self.next_iid += 1;
                    let fid = self.next_iid;
                    new.frames.push(Frame {
                        iid: Some(fid),
                        function_name_id: Some(fname),
                        mapping_id: Some(MAPPING_IID),
                        rel_pc: Some(a),
                    });
                    fids.push(fid);
                }
                self.frames.insert(key, fids);
            }
            ids.extend_from_slice(&self.frames[&key]);
        }
        ids.reverse(); // Callstack.frame_ids: root first
        let cs = match self.callstacks.get(&ids) {
            Some(&iid) => iid,
            None => {
                self.next_iid += 1;
                let iid = self.next_iid;
                new.callstacks.push(Callstack {
                    iid: Some(iid),
                    frame_ids: ids.clone(),
                });
                self.callstacks.insert(ids, iid);
                iid
            }
        };
        let interned = (new != InternedData::default()).then_some(new);
        let tid = self.tid(s.thread);
        self.stats.samples += 1;
        self.packet(TracePacket {
            timestamp: Some(s.ts_ns),
            interned_data: interned,
            perf_sample: Some(PerfSample {
                cpu: Some(0),
                pid: Some(self.meta.pid),
                tid: Some(tid),
                callstack_iid: Some(cs),
            }),
            ..Default::default()
        })
    }

    /// The instant marker held until its values could follow: an instant
    /// event on its thread's track, named after its site (interned as a
    /// call's), category `event`, its values as annotations.
    fn flush_marker(&mut self, values: Option<&CallValues>) -> io::Result<()> {
        let Some(mk) = self.pending_marker.take() else {
            return Ok(());
        };
        let t = mk.thread;
        self.thread(t)?;
        self.close(t, mk.depth, mk.ts_ns)?;
        let mut ann = vec![ann_u("depth", mk.depth as u64)];
        let m = self.meta;
        if let (Some(vs), Some(site)) = (values, m.sites.get(mk.site as usize)) {
            for (name, v) in vs.named(site, &m.strings) {
                ann.push(ann_value(name, &v));
            }
        }
        let interned = self.intern_site(mk.site);
        self.stats.markers += 1;
        self.packet(TracePacket {
            timestamp: Some(mk.ts_ns),
            interned_data: interned,
            track_event: Some(TrackEvent {
                r#type: Some(TYPE_INSTANT),
                track_uuid: Some(thread_uuid(t)),
                name_iid: Some(mk.site as u64 + 1),
                source_location_iid: Some(mk.site as u64 + 1),
                categories: vec!["event".into()],
                debug_annotations: ann,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// A wake of a future: an instant event on the waking thread's track,
    /// category `wake`, named `wake: fn`, with the future's id.
    fn wake(&mut self, w: &fgtrace_trace::Wake) -> io::Result<()> {
        let t = w.thread;
        self.thread(t)?;
        self.close(t, w.depth, w.ts_ns)?;
        self.stats.wakes += 1;
        self.packet(TracePacket {
            timestamp: Some(w.ts_ns),
            track_event: Some(TrackEvent {
                r#type: Some(TYPE_INSTANT),
                track_uuid: Some(thread_uuid(t)),
                name: Some(format!("wake: {}", self.meta.site_name(w.site))),
                categories: vec!["wake".into()],
                debug_annotations: vec![
                    DebugAnnotation {
                        name: Some("future".into()),
                        string_value: Some(format!("{:#x}", w.id)),
                        ..Default::default()
                    },
                    ann_u("depth", w.depth as u64),
                ],
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn lost(&mut self, l: &Lost) -> io::Result<()> {
        let t = l.thread;
        self.thread(t)?;
        self.close(t, l.depth, l.at_ns)?;
        let kind = match l.kind {
            LossKind::Dropped => "dropped",
            LossKind::Overwritten => "overwritten",
        };
        self.stats.losses += 1;
        self.packet(TracePacket {
            timestamp: Some(l.at_ns),
            track_event: Some(TrackEvent {
                r#type: Some(TYPE_INSTANT),
                track_uuid: Some(thread_uuid(t)),
                name: Some(format!("LOST {} records", l.count)),
                categories: vec!["lost".into()],
                debug_annotations: vec![
                    DebugAnnotation {
                        name: Some("kind".into()),
                        string_value: Some(kind.into()),
                        ..Default::default()
                    },
                    ann_u("count", l.count),
                    ann_u("depth", l.depth as u64),
                ],
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn finish(&mut self) -> io::Result<()> {
        self.flush_future(None)?;
        self.flush_marker(None)?;
        for t in 0..self.threads.len() as u32 {
            self.flush_call(t, None)?;
            self.close(t, 0, u64::MAX)?;
        }
        if !self.filter.window().is_all() {
            self.window_track()?;
        }
        self.w.flush()
    }

    /// The window and what it left out: an instant at the window's start on
    /// a track of its own, where the UI lists it with the threads.
    fn window_track(&mut self) -> io::Result<()> {
        let w = *self.filter.window();
        let l = self.filter.left_out.clone();
        self.packet(TracePacket {
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(WINDOW_UUID),
                parent_uuid: Some(PROCESS_UUID),
                name: Some("fgtrace window".into()),
                ..Default::default()
            }),
            ..Default::default()
        })?;
        let text = |name: &str, v: String| DebugAnnotation {
            name: Some(name.into()),
            string_value: Some(v),
            ..Default::default()
        };
        let mut ann = Vec::new();
        if let Some(f) = w.from_ns {
            ann.push(ann_u("from_ns", f));
        }
        if let Some(t) = w.to_ns {
            ann.push(ann_u("to_ns", t));
        }
        ann.push(ann_u("min_duration_ns", w.min_dur_ns));
        ann.push(ann_u("left_out_calls", l.calls));
        ann.push(ann_u("left_out_futures", l.futures));
        ann.push(ann_u("left_out_samples", l.samples));
        ann.push(ann_u("left_out_losses", l.losses));
        ann.push(ann_u("left_out_off_cpu", l.off_cpu));
        ann.push(text("window", w.describe()));
        self.packet(TracePacket {
            timestamp: Some(w.from_ns.unwrap_or(0)),
            track_event: Some(TrackEvent {
                r#type: Some(TYPE_INSTANT),
                track_uuid: Some(WINDOW_UUID),
                name: Some(format!("window: {}; {}", w.describe(), l.describe())),
                categories: vec!["window".into()],
                debug_annotations: ann,
                ..Default::default()
            }),
            ..Default::default()
        })
    }
}

impl<W: Write, R: Resolve> Consume for Writer<'_, W, R> {
    type Error = io::Error;

    fn push(&mut self, ev: &Event) -> io::Result<()> {
        let t = ev.thread();
        if !shown(&self.mask, !self.opts.threads.is_empty(), t) || !self.filter.admit(ev) {
            return Ok(());
        }
        match ev {
            Event::Counters(c) => {
                // Held with its call: values may follow.
                if let Some(p) = self
                    .threads
                    .get_mut(t as usize)
                    .and_then(|s| s.pending.as_mut())
                {
                    p.2 = Some(c.clone());
                }
                return Ok(());
            }
            Event::Values(v) if self.pending_future.is_some_and(|f| f.thread == v.thread) => {
                // Held: the future's id follows its values.
                self.pending_future_values = Some(v.clone());
                return Ok(());
            }
            Event::FutureId(x) => {
                if self.pending_future.is_some_and(|f| f.thread == x.thread) {
                    return self.flush_future(Some(x.id));
                }
                self.lanes.name_last(x);
                return Ok(());
            }
            Event::Values(v) if self.pending_marker.is_some_and(|m| m.thread == v.thread) => {
                return self.flush_marker(Some(v));
            }
            Event::Values(v) => return self.flush_call(t, Some(v)),
            _ => {}
        }
        self.flush_future(None)?;
        self.flush_marker(None)?;
        self.flush_call(t, None)?;
        match ev {
            Event::Call(c) => {
                let flow = if c.is_poll() && self.opts.futures {
                    self.lanes.poll(c)
                } else {
                    0
                };
                self.state(t).pending = Some((*c, flow, None));
                Ok(())
            }
            Event::Future(f) if self.opts.futures => {
                self.pending_future = Some(*f);
                Ok(())
            }
            Event::Marker(m) => {
                self.pending_marker = Some(*m);
                Ok(())
            }
            Event::Wake(w) => self.wake(w),
            Event::Sample(s) if self.opts.samples => self.sample(s),
            Event::Lost(l) => self.lost(l),
            _ => Ok(()),
        }
    }
}

/// Streams `events` into `out` as a Perfetto protobuf trace (a `Trace`
/// message: length-delimited `TracePacket`s). On a read error, everything
/// before it is written as a complete trace, then the error is returned.
///
/// ```
/// use fgtrace::view::perfetto::{write_perfetto, PerfettoOptions};
/// use fgtrace::view::{ok_events, HexResolve};
///
/// #[fgtrace::traced]
/// fn outer() -> u32 { inner() + inner() }
/// #[fgtrace::traced]
/// fn inner() -> u32 { 1 }
///
/// let session = fgtrace::Session::start(fgtrace::Config::builtin())?;
/// outer();
/// let trace = session.stop()?;
///
/// // For ui.perfetto.dev and `trace_processor`.
/// let mut out = Vec::new();
/// let stats = write_perfetto(&trace.meta, ok_events(trace.events()), HexResolve, &PerfettoOptions::default(), &mut out)?;
/// assert_eq!(stats.calls, 3);
/// assert_eq!(stats.bytes, out.len() as u64);
/// // Every packet is field 1 of the `Trace` message, length-delimited.
/// assert_eq!(out[0], 0x0a);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_perfetto<W: Write, R: Resolve>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    resolver: R,
    opts: &PerfettoOptions,
    out: W,
) -> Result<PerfettoStats, TraceError> {
    let mut w = Writer {
        meta,
        opts,
        w: io::BufWriter::with_capacity(1 << 16, out),
        resolver,
        mask: thread_mask(meta, &opts.threads),
        threads: Vec::new(),
        sites_interned: Vec::new(),
        lanes: PollMatcher::new(),
        frames: HashMap::new(),
        function_names: HashMap::new(),
        callstacks: HashMap::new(),
        next_iid: MAPPING_IID,
        mapping_written: false,
        stats: PerfettoStats::default(),
        buf: Vec::new(),
        filter: WindowFilter::new(opts.window),
        pending_future: None,
        pending_future_values: None,
        pending_marker: None,
    };
    w.header()?;
    let failed = feed(&mut w, events)?;
    w.finish()?;
    w.stats.left_out = w.filter.left_out.clone();
    failed.map_or(Ok(w.stats), Err)
}

#[cfg(test)]
mod tests;
