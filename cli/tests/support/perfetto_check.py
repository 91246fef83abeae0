#!/usr/bin/env python3
"""Reads a Perfetto protobuf trace with the upstream schema (the PyPI
`perfetto` package's perfetto_trace_pb2) and prints what it holds as JSON:
tracks, slices per track with a nesting check, instants, counters, samples
with their symbolized stacks, flows. Used by cli/tests/view_perfetto.rs.

Usage: perfetto_check.py TRACE.pftrace
"""
import json
import sys
from collections import Counter, defaultdict

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

TE = pb.TrackEvent


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())

    errors = []
    tracks = {}
    names = {}  # iid -> event name
    locations = {}  # iid -> (file, function, line)
    strings = {}  # function_names iid -> str
    frames = {}  # iid -> function name iid
    callstacks = {}  # iid -> [frame iids], root first
    open_ = defaultdict(list)  # track uuid -> stack of (name, ts)
    last_ts = defaultdict(int)
    slices = defaultdict(lambda: {"count": 0, "names": Counter(), "max_depth": 0,
                                  "top_level": 0, "locations": 0})
    instants = defaultdict(list)
    counters = defaultdict(list)
    samples = Counter()
    leafs = defaultdict(Counter)
    roots = defaultdict(Counter)
    stack_depths = []
    flows_begun, flows_ended = set(), set()
    seqs = set()
    cleared = False

    for i, p in enumerate(trace.packet):
        seqs.add(p.trusted_packet_sequence_id)
        if p.incremental_state_cleared:
            if i != 0:
                errors.append(f"packet {i}: state cleared again")
            cleared = True
        if p.HasField("interned_data"):
            if not cleared:
                errors.append(f"packet {i}: interned data before the state was cleared")
            d = p.interned_data
            for n in d.event_names:
                names[n.iid] = n.name
            for l in d.source_locations:
                locations[l.iid] = (l.file_name, l.function_name, l.line_number)
            for s in d.function_names:
                strings[s.iid] = s.str.decode("utf-8", "replace")
            for fr in d.frames:
                frames[fr.iid] = fr.function_name_id
            for cs in d.callstacks:
                callstacks[cs.iid] = list(cs.frame_ids)
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            t = {"name": d.name, "parent": d.parent_uuid if d.HasField("parent_uuid") else None}
            if d.HasField("process"):
                t.update(kind="process", pid=d.process.pid, name=d.process.process_name)
            elif d.HasField("thread"):
                t.update(kind="thread", pid=d.thread.pid, tid=d.thread.tid,
                         name=d.thread.thread_name)
            elif d.HasField("counter"):
                t.update(kind="counter")
            else:
                t.update(kind="track")
            if d.uuid in tracks:
                errors.append(f"track {d.uuid} described twice")
            tracks[d.uuid] = t
        if p.HasField("track_event"):
            e = p.track_event
            u = e.track_uuid
            if u not in tracks:
                errors.append(f"packet {i}: event on undescribed track {u}")
            if p.timestamp < last_ts[u]:
                errors.append(f"track {u}: time goes back at packet {i}")
            last_ts[u] = p.timestamp
            if e.HasField("name_iid"):
                if e.name_iid not in names:
                    errors.append(f"packet {i}: name iid {e.name_iid} not interned")
                name = names.get(e.name_iid, "?")
            else:
                name = e.name
            flows_begun.update(e.flow_ids)
            flows_ended.update(e.terminating_flow_ids)
            if e.type == TE.TYPE_SLICE_BEGIN:
                s = slices[u]
                s["count"] += 1
                s["names"][name] += 1
                if e.HasField("source_location_iid"):
                    if e.source_location_iid in locations:
                        s["locations"] += 1
                    else:
                        errors.append(f"packet {i}: location iid not interned")
                if not open_[u]:
                    s["top_level"] += 1
                open_[u].append((name, p.timestamp))
                s["max_depth"] = max(s["max_depth"], len(open_[u]))
            elif e.type == TE.TYPE_SLICE_END:
                if not open_[u]:
                    errors.append(f"track {u}: end without begin at packet {i}")
                else:
                    n, begin = open_[u].pop()
                    if p.timestamp < begin:
                        errors.append(f"track {u}: {n} ends before it begins")
            elif e.type == TE.TYPE_INSTANT:
                instants[u].append(name)
            elif e.type == TE.TYPE_COUNTER:
                counters[u].append(e.counter_value)
        if p.HasField("perf_sample"):
            s = p.perf_sample
            samples[s.tid] += 1
            cs = callstacks.get(s.callstack_iid)
            if cs is None:
                errors.append(f"packet {i}: callstack {s.callstack_iid} not interned")
                continue
            fnames = [strings.get(frames.get(f), None) for f in cs]
            if None in fnames:
                errors.append(f"packet {i}: frame without a name")
                continue
            stack_depths.append(len(fnames))
            if fnames:
                roots[s.tid][fnames[0]] += 1
                leafs[s.tid][fnames[-1]] += 1

    for u, st in open_.items():
        if st:
            errors.append(f"track {u}: {len(st)} slices never end")

    out = {
        "packets": len(trace.packet),
        "sequences": sorted(seqs),
        "tracks": {str(u): t for u, t in tracks.items()},
        "slices": {str(u): {**s, "names": dict(s["names"])} for u, s in slices.items()},
        "instants": {str(u): v for u, v in instants.items()},
        "counters": {str(u): v for u, v in counters.items()},
        "samples": {str(t): n for t, n in samples.items()},
        "sample_roots": {str(t): dict(c) for t, c in roots.items()},
        "sample_leafs": {str(t): dict(c) for t, c in leafs.items()},
        "flows_begun": len(flows_begun),
        "flows_terminated": len(flows_ended),
        "flows_linked": len(flows_begun & flows_ended),
        "errors": errors[:50],
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
