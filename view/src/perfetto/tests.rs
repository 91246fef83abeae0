use super::*;
use crate::ok_events;
use crate::resolve::HexResolve;
use fgtrace_trace::{flags, SiteInfo, ThreadInfo};
use std::collections::HashMap;

fn meta() -> TraceMeta {
    let site = |name: &str, is_async| SiteInfo {
        name: name.into(),
        module_path: "app".into(),
        file: "src/app.rs".into(),
        line: 3,
        is_async,
        values: Vec::new(),
    };
    TraceMeta {
        program: "app".into(),
        pid: 10,
        sites: vec![site("run", false), site("fetch", true)],
        threads: vec![
            ThreadInfo {
                tid: 10,
                name: "main".into(),
                ..Default::default()
            },
            ThreadInfo {
                tid: 11,
                name: "w".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

use crate::test_traces::flagged_call as call;

/// The packets of a `Trace` message.
fn packets(mut b: &[u8]) -> Vec<TracePacket> {
    let mut out = Vec::new();
    while !b.is_empty() {
        assert_eq!(b[0], 0x0a, "Trace.packet, length-delimited");
        b = &b[1..];
        let len = prost::encoding::decode_varint(&mut b).unwrap() as usize;
        out.push(TracePacket::decode(&b[..len]).unwrap());
        b = &b[len..];
    }
    out
}

#[test]
fn slices_nest_per_track_and_futures_get_tracks_with_their_polls() {
    let events = vec![
        call(0, 0, 0, 100, 1_000, 0),
        call(0, 0, 1, 100, 1_000, 0), // same start and end as its parent
        call(0, 1, 2, 200, 50, flags::POLL),
        call(1, 1, 0, 500, 50, flags::POLL), // the same future, polled on w
        Event::Future(FutureSpan {
            thread: 1,
            site: 1,
            start_ns: 190,
            dur_ns: 400,
            polls: 2,
            cancelled: false,
        }),
        call(0, 0, 0, 1_100, 10, 0),
    ];
    let mut out = Vec::new();
    let stats = write_perfetto(
        &meta(),
        ok_events(events),
        HexResolve,
        &PerfettoOptions::default(),
        &mut out,
    )
    .unwrap();
    assert_eq!((stats.calls, stats.futures, stats.lane_polls), (5, 1, 2));
    let ps = packets(&out);
    assert_eq!(ps.len() as u64, stats.packets);
    assert_eq!(out.len() as u64, stats.bytes);
    assert_eq!(ps[0].incremental_state_cleared, Some(true));
    assert!(ps.iter().all(|p| p.trusted_packet_sequence_id == Some(SEQ)));
    let mut open: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut begins: HashMap<u64, u64> = HashMap::new();
    let mut max_depth: HashMap<u64, usize> = HashMap::new();
    for p in &ps {
        let Some(e) = &p.track_event else { continue };
        let (u, ts) = (e.track_uuid.unwrap(), p.timestamp.unwrap());
        let st = open.entry(u).or_default();
        match e.r#type {
            Some(TYPE_SLICE_BEGIN) => {
                st.push(ts);
                *begins.entry(u).or_default() += 1;
                let d = max_depth.entry(u).or_default();
                *d = (*d).max(st.len());
            }
            Some(TYPE_SLICE_END) => assert!(st.pop().unwrap() <= ts),
            _ => {}
        }
    }
    assert!(open.values().all(Vec::is_empty));
    assert_eq!(begins[&thread_uuid(0)], 4);
    assert_eq!(max_depth[&thread_uuid(0)], 3);
    assert_eq!(begins[&thread_uuid(1)], 1);
    // The future's lane: the future and its two polls nested in it.
    assert_eq!(begins[&future_uuid(1)], 3);
    assert_eq!(max_depth[&future_uuid(1)], 2);
    let lane = ps
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref())
        .find(|d| d.uuid == Some(future_uuid(1)))
        .unwrap();
    assert_eq!(lane.parent_uuid, Some(PROCESS_UUID));
    assert_eq!(lane.name.as_deref(), Some("fetch #1"));
    // Flows: both thread polls start one the lane ends.
    let started: Vec<u64> = ps
        .iter()
        .filter_map(|p| p.track_event.as_ref())
        .flat_map(|e| e.flow_ids.clone())
        .collect();
    let ended: Vec<u64> = ps
        .iter()
        .filter_map(|p| p.track_event.as_ref())
        .flat_map(|e| e.terminating_flow_ids.clone())
        .collect();
    let (mut started, mut ended) = (started, ended);
    started.sort_unstable();
    ended.sort_unstable();
    assert_eq!(started.len(), 2);
    assert_eq!(started, ended);
    // Names interned once per site.
    let names: Vec<&EventName> = ps
        .iter()
        .filter_map(|p| p.interned_data.as_ref())
        .flat_map(|d| &d.event_names)
        .collect();
    assert_eq!(names.len(), 2);
}

#[test]
fn a_damaged_stream_still_gives_a_complete_trace_then_the_error() {
    let events = vec![
        Ok(call(0, 0, 0, 100, 1_000, 0)),
        Ok(call(0, 0, 1, 200, 100, 0)),
        Err(TraceError::Corrupt {
            offset: 64,
            what: "bad varint".into(),
        }),
        Ok(call(0, 0, 0, 5_000, 10, 0)),
    ];
    let mut out = Vec::new();
    let err = write_perfetto(
        &meta(),
        events,
        HexResolve,
        &PerfettoOptions::default(),
        &mut out,
    )
    .unwrap_err();
    assert!(matches!(err, TraceError::Corrupt { offset: 64, .. }));
    let ps = packets(&out);
    let types: Vec<i32> = ps
        .iter()
        .filter_map(|p| p.track_event.as_ref()?.r#type)
        .collect();
    // Both calls begun and ended, nothing after the damage.
    assert_eq!(
        types,
        [
            TYPE_SLICE_BEGIN,
            TYPE_SLICE_BEGIN,
            TYPE_SLICE_END,
            TYPE_SLICE_END
        ]
    );
}

#[test]
fn a_window_keeps_the_calls_it_overlaps_and_a_track_says_what_it_left_out() {
    let events = vec![
        call(0, 0, 0, 0, 10_000, 0),    // around the window: kept
        call(0, 0, 1, 100, 200, 0),     // before it
        call(0, 0, 1, 2_000, 500, 0),   // inside
        call(0, 0, 2, 2_100, 5, 0),     // inside, but shorter than the minimum
        call(0, 0, 1, 8_000, 1_000, 0), // after it
        call(1, 0, 0, 2_900, 400, 0),   // overlaps its end
    ];
    let opts = PerfettoOptions {
        window: Window {
            from_ns: Some(1_000),
            to_ns: Some(3_000),
            min_dur_ns: 10,
        },
        ..PerfettoOptions::default()
    };
    let mut out = Vec::new();
    let stats = write_perfetto(&meta(), ok_events(events), HexResolve, &opts, &mut out).unwrap();
    assert_eq!(stats.calls, 3);
    assert_eq!(stats.left_out.calls, 3);
    let ps = packets(&out);
    let begins: Vec<(u64, u64)> = ps
        .iter()
        .filter_map(|p| {
            let e = p.track_event.as_ref()?;
            (e.r#type == Some(TYPE_SLICE_BEGIN))
                .then(|| (p.timestamp.unwrap(), e.track_uuid.unwrap()))
        })
        .collect();
    assert_eq!(
        begins,
        [
            (0, thread_uuid(0)),
            (2_000, thread_uuid(0)),
            (2_900, thread_uuid(1))
        ]
    );
    let track = ps
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref())
        .find(|d| d.uuid == Some(WINDOW_UUID))
        .expect("a window track");
    assert_eq!(track.name.as_deref(), Some("fgtrace window"));
    let instant = ps
        .iter()
        .filter_map(|p| Some((p.timestamp, p.track_event.as_ref()?)))
        .find(|(_, e)| e.track_uuid == Some(WINDOW_UUID))
        .expect("the window's instant");
    assert_eq!(instant.0, Some(1_000));
    assert_eq!(
        instant.1.name.as_deref(),
        Some("window: from 0.000001000s, to 0.000003000s, at least 0.010us; 3 calls left out")
    );
    let left = instant
        .1
        .debug_annotations
        .iter()
        .find(|a| a.name.as_deref() == Some("left_out_calls"))
        .unwrap();
    assert_eq!(left.uint_value, Some(3));

    // Without a window: no window track, nothing counted.
    let mut all = Vec::new();
    let events = vec![call(0, 0, 0, 0, 10, 0)];
    let stats = write_perfetto(
        &meta(),
        ok_events(events),
        HexResolve,
        &PerfettoOptions::default(),
        &mut all,
    )
    .unwrap();
    assert_eq!(stats.left_out, LeftOut::default());
    assert!(packets(&all).iter().all(|p| p
        .track_descriptor
        .as_ref()
        .is_none_or(|d| d.uuid != Some(WINDOW_UUID))));
}
