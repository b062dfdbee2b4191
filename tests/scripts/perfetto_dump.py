#!/usr/bin/env python3
"""Decode a Perfetto trace with Perfetto's own protobuf classes (the `perfetto` Python package)
and print what the export tests check, as one JSON object:

  packets, seq_ids (trusted_packet_sequence_id of every packet), event_clock_ids,
  first (the first packet: sequence flags, default clock, clock snapshot),
  tracks [{uuid, parent, name, pid, tid, process_name, thread_name}],
  slices [{track, name, categories, ts, end, depth, parent, args}] rebuilt from BEGIN/END per
    track as the trace processor does (parent: the index in slices of the enclosing slice),
  flows [[from, to]] (slice indexes) from flow_ids / terminating_flow_ids, linked as the
    trace processor links them: in timestamp order, each id from its last slice to the next,
  instants [{track, name, ts, args}], errors [...],
  waits [{track, name, ts, end, depth, parent, args}]: the off-CPU slices (category "offcpu"),
    kept apart so that `slices` are the spans (parent: the index in slices of the span slice
    enclosing it; a span never begins inside one of these, which is an error)
  steals [likewise]: the host's steal slices (category "steal"), kept apart the same way

Usage: perfetto_dump.py TRACE_FILE
"""
import json
import sys

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent


def annotations(ev):
    out = {}
    for a in ev.debug_annotations:
        kind = a.WhichOneof("value")
        out[a.name] = getattr(a, kind) if kind else None
    return out


def main(path):
    trace = Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    res = {"packets": len(trace.packet), "seq_ids": [], "event_clock_ids": [], "first": None,
           "tracks": [], "slices": [], "instants": [], "errors": [], "waits": [],
           "steals": []}
    events = []  # (ts, file order, track, TrackEvent)
    for i, p in enumerate(trace.packet):
        res["seq_ids"].append(p.trusted_packet_sequence_id)
        if i == 0:
            res["first"] = {
                "sequence_flags": p.sequence_flags,
                "default_clock": p.trace_packet_defaults.timestamp_clock_id,
                "clocks": {str(c.clock_id): c.timestamp for c in p.clock_snapshot.clocks},
                "primary_clock": p.clock_snapshot.primary_trace_clock,
            }
        if p.HasField("track_descriptor"):
            t = p.track_descriptor
            res["tracks"].append({
                "uuid": t.uuid,
                "parent": t.parent_uuid if t.HasField("parent_uuid") else None,
                "name": t.name if t.HasField("name") else None,
                "pid": t.process.pid if t.HasField("process") else (
                    t.thread.pid if t.HasField("thread") else None),
                "tid": t.thread.tid if t.HasField("thread") else None,
                "process_name": t.process.process_name if t.HasField("process") else None,
                "thread_name": t.thread.thread_name if t.HasField("thread") else None,
            })
        if p.HasField("track_event"):
            res["event_clock_ids"].append(p.timestamp_clock_id)
            events.append((p.timestamp, i, p.track_event.track_uuid, p.track_event))
    stacks = {}
    res["flows"] = []
    pending = {}  # flow id -> the slice it was last seen on
    for ts, _, track, ev in sorted(events, key=lambda e: (e[0], e[1])):
        if ev.type == TrackEvent.TYPE_SLICE_BEGIN and list(ev.categories) in (["offcpu"], ["steal"]):
            st = stacks.get(track, [])
            if st and st[-1].get("wait"):
                res["errors"].append(f"{ev.name} slice inside an off-CPU or steal one at {ts}")
            w = {"track": track, "name": ev.name, "ts": ts, "end": None, "depth": len(st),
                 "parent": st[-1]["index"] if st else None, "args": annotations(ev),
                 "wait": True}
            stacks.setdefault(track, []).append(w)
            res["steals" if list(ev.categories) == ["steal"] else "waits"].append(w)
        elif ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            st = stacks.get(track, [])
            if st and st[-1].get("wait"):
                res["errors"].append(f"slice {ev.name} begins inside an off-CPU or steal slice at {ts}")
            s = {"track": track, "name": ev.name, "categories": list(ev.categories), "ts": ts,
                 "end": None, "depth": len(st), "parent": st[-1]["index"] if st else None,
                 "args": annotations(ev), "index": len(res["slices"])}
            stacks.setdefault(track, []).append(s)
            res["slices"].append(s)
            for f in ev.flow_ids:
                if f in pending:
                    res["flows"].append([pending[f], s["index"]])
                pending[f] = s["index"]
            for f in ev.terminating_flow_ids:
                if f in pending:
                    res["flows"].append([pending.pop(f), s["index"]])
        elif ev.type == TrackEvent.TYPE_SLICE_END:
            st = stacks.get(track)
            if not st:
                res["errors"].append(f"END without BEGIN on track {track} at {ts}")
                continue
            st.pop()["end"] = ts
        elif ev.type == TrackEvent.TYPE_INSTANT:
            res["instants"].append({"track": track, "name": ev.name, "ts": ts,
                                    "args": annotations(ev)})
        else:
            res["errors"].append(f"unexpected event type {ev.type}")
    for track, st in stacks.items():
        for s in st:
            res["errors"].append(f"slice {s['name']} on track {track} never ends")
    for w in res["waits"] + res["steals"]:
        del w["wait"]
    json.dump(res, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
