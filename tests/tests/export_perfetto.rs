//! `watch --perfetto FILE`: the file decodes with Perfetto's own protobuf definitions (the
//! `perfetto` Python package, installed by scripts/setup.sh) and shows what the NDJSON of the
//! same run shows: tracks per process and thread, nested slices, a span that crossed threads
//! on its own track, instants for events, arguments and the time split (with a polled span's idle time, polls and
//! threads) as annotations. The traces of the demo servers under load are also loaded into
//! Perfetto's own trace processor (tests/scripts/tp_query.js), whose tables must say the same.
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use usdt_trace_tests::perfetto::trace_processor;
use usdt_trace_tests::proc::{output_within, RUN_TIMEOUT};
use usdt_trace_tests::testprogs;
use usdt_trace_tests::watch::{self, Output};
use usdt_trace_tests::watch_util::{build_c, named};

fn trace_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("usdt-trace-{tag}-{}.pftrace", std::process::id()))
}

/// The trace as tests/scripts/perfetto_dump.py sees it.
fn dump(path: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/perfetto_dump.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(path)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "perfetto_dump.py failed (is the perfetto Python package installed? scripts/setup.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("dump JSON")
}

/// `watch --perfetto TRACE ... -c CMD` for the demo program.
fn demo_args<'a>(cmd: &'a str, trace: &'a str) -> Vec<&'a str> {
    vec![
        "--perfetto",
        trace,
        "--str",
        "ex:inner__start:1",
        "--span",
        "ex:job__start=ex:job__end",
        "--key",
        "0",
        "-c",
        cmd,
    ]
}

fn track<'a>(d: &'a Value, uuid: &Value) -> &'a Value {
    d["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| &t["uuid"] == uuid)
        .unwrap_or_else(|| panic!("no track {uuid}"))
}

fn process_track(d: &Value, pid: &Value) -> Value {
    let t = d["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["process_name"].is_string() && &t["pid"] == pid)
        .collect::<Vec<_>>();
    assert_eq!(t.len(), 1, "one process track for {pid}: {t:?}");
    t[0].clone()
}

/// Each NDJSON argument as the annotation it should be (`null`s are left out).
fn expect_args(args: &Value, prefix: &str, got: &Value) {
    for (i, a) in args.as_array().unwrap().iter().enumerate() {
        let k = format!("{prefix}{i}");
        if a.is_null() {
            assert!(got.get(&k).is_none(), "{k}: {got}");
        } else {
            assert_eq!(&got[&k], a, "{k}: {got}");
        }
    }
}

fn check_against_ndjson(d: &Value, out: &Output) {
    assert!(
        d["errors"].as_array().unwrap().is_empty(),
        "{}",
        d["errors"]
    );
    assert!(d["seq_ids"].as_array().unwrap().iter().all(|s| s == 1));
    assert!(d["event_clock_ids"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c == 3));
    let first = &d["first"];
    assert_eq!(first["sequence_flags"], 1);
    assert_eq!(first["default_clock"], 3);
    assert_eq!(first["primary_clock"], 6);
    // The snapshot's realtime is the run's clock_zero + its monotonic reading.
    let start = out.of_type("start").next().expect("start record");
    let mono = first["clocks"]["3"].as_u64().unwrap();
    assert_eq!(
        first["clocks"]["1"].as_u64().unwrap(),
        start["clock_zero_unix_ns"].as_u64().unwrap() + mono
    );
    assert!(first["clocks"]["6"].as_u64().unwrap() >= mono);

    let slices = d["slices"].as_array().unwrap();
    let spans = out.spans();
    assert_eq!(slices.len(), spans.len(), "one slice per span");
    // Indexed: a busy run has tens of thousands. By name, start and first argument (a span
    // id, where there is one): two requests once started in the same nanosecond on two CPUs.
    let by_start: HashMap<(&str, u64, String), &Value> = slices
        .iter()
        .map(|x| {
            let arg0 = x["args"]
                .get("arg0")
                .map(Value::to_string)
                .unwrap_or_default();
            (
                (x["name"].as_str().unwrap(), x["ts"].as_u64().unwrap(), arg0),
                x,
            )
        })
        .collect();
    let tracks: HashMap<u64, &Value> = d["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["uuid"].as_u64().unwrap(), t))
        .collect();
    let mut waits = 0;
    for s in &spans {
        let name = format!(
            "{}:{}",
            s["provider"].as_str().unwrap(),
            s["name"].as_str().unwrap()
        );
        let arg0 = s["args"]
            .get(0)
            .filter(|a| !a.is_null())
            .map(Value::to_string)
            .unwrap_or_default();
        let sl = *by_start
            .get(&(name.as_str(), s["start_ns"].as_u64().unwrap(), arg0))
            .unwrap_or_else(|| panic!("no slice for {s}"));
        assert_eq!(sl["end"], s["end_ns"], "{s}\n{sl}");
        assert_eq!(sl["categories"], json!([s["provider"]]));
        let t = tracks[&sl["track"].as_u64().unwrap()];
        let proc_track = process_track(d, &s["pid"]);
        assert_eq!(t["parent"], proc_track["uuid"], "{t}");
        if s.get("start_tid").is_some() || s.get("polls").is_some() {
            // Crossed threads, or polled (it left its thread between polls): an async track
            // under the process, not a thread's.
            assert!(t["tid"].is_null(), "{t}");
            let lane = t["name"].as_str().unwrap();
            assert!(lane.starts_with(&format!("{name} (async ")), "{t}");
            let start_tid = s.get("start_tid").unwrap_or(&s["tid"]);
            assert_eq!(&sl["args"]["start_tid"], start_tid);
            assert_eq!(sl["args"]["end_tid"], s["tid"]);
        } else {
            assert_eq!(t["tid"], s["tid"], "{t}");
            assert_eq!(t["pid"], s["pid"], "{t}");
            assert_eq!(t["thread_name"], s["comm"], "{t}");
        }
        let a = &sl["args"];
        expect_args(&s["args"], "arg", a);
        expect_args(&s["end_args"], "end_arg", a);
        assert_eq!(a["end"], s["end"]);
        for k in watch::SPLIT_FIELDS {
            assert_eq!(a.get(k), s.get(k), "{k}: {a}");
        }
        // What the sleep and I/O waited on: as the NDJSON's `waits`, kind by kind.
        for k in ["lock", "net", "timer", "disk"] {
            let w = s.get("waits").and_then(|w| w.get(k));
            assert_eq!(
                a.get(format!("wait_{k}_ns")),
                w.map(|w| &w["ns"]),
                "{k}: {a}"
            );
            assert_eq!(a.get(format!("wait_{k}_n")), w.map(|w| &w["n"]), "{k}: {a}");
            waits += w.is_some() as usize;
        }
        match s.get("waker") {
            Some(w) => {
                assert_eq!(a["waker_off_ns"], w["off_ns"]);
                let shown = watch::waker_label(w);
                assert_eq!(a["waker"], shown.as_str());
            }
            None => assert!(a.get("waker").is_none()),
        }
    }
    eprintln!("{waits} kinds of wait checked");
    check_wait_slices(d, out);
    let instants = d["instants"].as_array().unwrap();
    let events = out.events();
    assert_eq!(instants.len(), events.len());
    for (e, i) in events.iter().zip(instants) {
        assert_eq!(i["ts"], e["ts_ns"]);
        assert_eq!(
            i["name"],
            format!(
                "{}:{}",
                e["provider"].as_str().unwrap(),
                e["name"].as_str().unwrap()
            )
            .as_str()
        );
        assert_eq!(track(d, &i["track"])["tid"], e["tid"]);
        expect_args(&e["args"], "arg", &i["args"]);
    }
}

#[test]
#[ignore = "needs root"]
fn perfetto_trace_matches_the_ndjson_of_the_same_run() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let path = trace_path("perfetto");
    let (b, p) = (bin.to_str().unwrap(), path.to_str().unwrap());
    let out = watch::Watch::start(&demo_args(b, p)).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let d = dump(&path);
    let _ = std::fs::remove_file(&path);
    check_against_ndjson(&d, &out);

    // The shape the test program promises: outer ⊃ inner on the main thread, job on its own
    // track, work on the worker's thread track, tick inside inner.
    let spans = out.spans();
    assert_eq!(spans.len(), 4, "{:?}", out.records);
    let slices = d["slices"].as_array().unwrap();
    let by = |n: &str| slices.iter().find(|s| s["name"] == n).unwrap();
    let (outer, inner, job, work) = (by("ex:outer"), by("ex:inner"), by("ex:job"), by("ex:work"));
    assert_eq!(outer["depth"], 0);
    assert_eq!(inner["depth"], 1);
    assert_eq!(inner["track"], outer["track"]);
    assert_ne!(work["track"], outer["track"]);
    assert_ne!(job["track"], outer["track"]);
    assert_ne!(job["track"], work["track"]);
    assert_eq!(inner["args"]["arg1"], "hello");
    assert_eq!(outer["args"]["arg1"], -5);
    assert!(outer["args"]["oncpu_ns"].is_u64(), "time split: {outer}");
    let main_tid = &named(&spans, "outer")[0]["tid"];
    let threads: Vec<&Value> = d["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["tid"].is_u64())
        .collect();
    assert_eq!(threads.len(), 2, "main and worker: {threads:?}");
    assert!(threads.iter().any(|t| &t["tid"] == main_tid));
    assert_eq!(d["instants"][0]["args"]["arg0"], -3);
}

/// A span whose polls were marked (attrib_poll.c: one job polled on two threads) carries its
/// idle time, polls and threads as annotations, as the NDJSON of the same run does.
#[test]
#[ignore = "needs root"]
fn polled_span_shows_idle_polls_and_threads() {
    let inc = usdt_trace_tests::markers::workspace_root().join("usdt-markers/include");
    let bin = build_c(
        "attrib_poll",
        &["-O2", "-pthread", "-I", inc.to_str().unwrap()],
    );
    let path = trace_path("perfetto-poll");
    let (b, p) = (bin.to_str().unwrap(), path.to_str().unwrap());
    let out = watch::Watch::start(&["--perfetto", p, "-c", b]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let d = dump(&path);
    let _ = std::fs::remove_file(&path);
    check_against_ndjson(&d, &out);
    let slices = d["slices"].as_array().unwrap();
    assert_eq!(slices.len(), 1, "{slices:?}");
    let a = &slices[0]["args"];
    assert_eq!((&a["polls"], &a["threads"]), (&json!(2), &json!(2)), "{a}");
    assert!(a["idle_ns"].as_u64().unwrap() > 0, "{a}");
}

/// Stopped by Ctrl-C in the middle of a busy run, the file is still a whole trace.
#[test]
#[ignore = "needs root"]
fn perfetto_trace_is_valid_after_ctrl_c() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let path = trace_path("perfetto-int");
    let cmd = format!("{} 100000", bin.display());
    let mut w = watch::Watch::start(&demo_args(&cmd, path.to_str().unwrap()));
    assert!(w.wait_for(Duration::from_secs(30), |v| v["name"] == "work"));
    std::thread::sleep(Duration::from_millis(300));
    let out = w.stop();
    let d = dump(&path);
    let _ = std::fs::remove_file(&path);
    assert!(out.spans().len() >= 8, "{}", out.spans().len());
    check_against_ndjson(&d, &out);
}

/// A demo server (`bin`) under concurrent load (wrk, `connections` for 1 s), traced with
/// `--perfetto TRACE`. Returns the NDJSON of the run. The server's own process is traced
/// (`-p`), so that tests running beside this one with the same server stay out of it; one
/// that `forks` a process per connection is traced by its binary.
fn concurrent_run(trace: &Path, bin: &Path, connections: u32, forks: bool) -> Output {
    use usdt_trace_tests::markers::{free_port, start_server};
    assert!(
        usdt_trace_tests::markers::have("wrk"),
        "wrk (scripts/setup.sh)"
    );
    let port = free_port();
    let server = start_server(bin, port, None);
    let pid = server.0.id().to_string();
    let target = if forks {
        vec![bin.to_str().unwrap()]
    } else {
        vec!["-p", pid.as_str()]
    };
    let w = watch::Watch::start(&[&["--perfetto", trace.to_str().unwrap()], &target[..]].concat());
    let wrk = output_within(
        Command::new("wrk").args([
            "-t2",
            &format!("-c{connections}"),
            "-d1s",
            &format!("http://127.0.0.1:{port}/"),
        ]),
        RUN_TIMEOUT,
    );
    assert!(
        wrk.status.success(),
        "{}",
        String::from_utf8_lossy(&wrk.stderr)
    );
    w.stop()
}

/// The Rust demo server under concurrent load (wrk, 16 connections on its multi-threaded
/// runtime): requests interleave on the tokio workers. Checked against the NDJSON of the same
/// run: every slice drawn inside another is inside its own parent (the markers parent id in
/// argument 1 is the enclosing slice's id in argument 0), never inside an unrelated request;
/// a `send_message` not drawn inside its request has a flow arrow from it.
#[test]
#[ignore = "needs root"]
fn concurrent_requests_nest_only_under_their_own_parents() {
    let path = trace_path("perfetto-concurrent");
    let out = concurrent_run(
        &path,
        &usdt_trace_tests::markers::demo_servers().0,
        16,
        false,
    );
    let d = dump(&path);
    let _ = std::fs::remove_file(&path);
    check_against_ndjson(&d, &out);
    let slices = d["slices"].as_array().unwrap();
    let requests = slices
        .iter()
        .filter(|s| s["name"] == "httpserver:request")
        .count();
    assert!(requests >= 1000, "a busy run: {requests} requests");
    // Per markers id: its slice.
    let by_id: HashMap<u64, &Value> = slices
        .iter()
        .filter(|s| s["name"] == "httpserver:request")
        .map(|s| (s["args"]["arg0"].as_u64().unwrap(), s))
        .collect();
    let flows: std::collections::HashSet<(u64, u64)> = d["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f[0].as_u64().unwrap(), f[1].as_u64().unwrap()))
        .collect();
    let (mut nested, mut same_name, mut linked) = (0, 0, 0);
    for s in slices {
        let parent_id = s["args"]["arg1"].as_u64().unwrap();
        if let Some(p) = s["parent"].as_u64() {
            let p = &slices[p as usize];
            assert_eq!(
                p["args"]["arg0"].as_u64(),
                Some(parent_id),
                "{} drawn inside {}, not its parent {parent_id}",
                s,
                p
            );
            nested += 1;
            same_name += (p["name"] == s["name"]) as usize;
        } else if s["name"] == "httpserver:send_message" {
            let req = by_id[&parent_id];
            let from = req["index"].as_u64().unwrap();
            assert!(
                flows.contains(&(from, s["index"].as_u64().unwrap())),
                "{s}: no flow from its request {req}"
            );
            linked += 1;
        }
    }
    eprintln!("{requests} requests: {nested} slices nested, {linked} linked by flows");
    // The Perfetto SQL: select count(*) from slice s join slice p on s.parent_id =
    // p.id where s.name = p.name.
    assert_eq!(same_name, 0);
    assert_eq!(
        nested + linked,
        slices.len() - requests,
        "every send_message is drawn in or linked to its request"
    );
}

/// What [`check_with_trace_processor`] counted.
struct TpCounts {
    slices: usize,
    nested: usize,
    flows: usize,
}

/// The trace of a run loaded into Perfetto's own trace processor (the importer the Perfetto
/// UI runs), checked against the NDJSON of the same run: the importer reports no error or
/// data loss; it makes one slice per span, of the span's duration; a slice sits only under
/// its span's real parent (the usdt-markers parent id, argument 1), and a flow comes only from
/// it; a span whose parent is in the run is nested in it or linked to it. Spans are told
/// apart by process, name and markers span id (argument 0): forked processes reuse ids.
fn check_with_trace_processor(path: &Path, out: &Output) -> TpCounts {
    let res = trace_processor(
        path,
        &[
            "select name, idx, severity, source, value from stats \
             where severity in ('error', 'data_loss') and value > 0",
            // Each slice with its span id and its process (through its thread's track, or
            // the process's for an async track); not the wait or steal slices, nor the trace's
            // note of waits it lacks (category `usdt-trace`, when the run dropped or capped
            // some).
            "select s.id, s.ts, s.dur, s.name, s.parent_id, \
               extract_arg(s.arg_set_id, 'debug.arg0') as span, \
               coalesce(p1.pid, p2.pid) as pid \
             from slice s \
             left join thread_track tt on tt.id = s.track_id \
             left join thread t on t.utid = tt.utid \
             left join process p1 on p1.upid = t.upid \
             left join process_track pt on pt.id = s.track_id \
             left join process p2 on p2.upid = pt.upid \
             where s.category not in ('offcpu', 'steal', 'usdt-trace')",
            // The query: a slice inside another of its own name is inside an
            // unrelated request.
            "select count(*) from slice s join slice p on s.parent_id = p.id \
             where s.name = p.name and s.category not in ('offcpu', 'steal')",
            "select slice_out, slice_in from flow",
        ],
    );
    // Read: a failed check below leaves no file behind.
    let _ = std::fs::remove_file(path);
    let (stats, slices, same_name, flows) = (&res[0], &res[1], &res[2], &res[3]);

    // (1) The importer's own account: nothing it could not read or had to drop.
    assert!(
        stats.is_empty(),
        "trace processor stats with errors or data loss \
         (name, idx, severity, source, value): {stats:?}"
    );

    // (2) One slice per span.
    let spans = out.spans();
    let key = |pid: u64, name: &str, id: u64| (pid, name.to_string(), id);
    let mut by_key: HashMap<(u64, String, u64), &Value> = HashMap::new();
    for s in &spans {
        let name = format!(
            "{}:{}",
            s["provider"].as_str().unwrap(),
            s["name"].as_str().unwrap()
        );
        let id = s["args"][0].as_u64().expect("markers span id");
        let k = key(s["pid"].as_u64().unwrap(), &name, id);
        assert!(by_key.insert(k, s).is_none(), "span id seen twice: {s}");
    }
    assert_eq!(slices.len(), spans.len(), "one slice per span");
    // Per slice id: (its span, its row).
    let mut span_of: HashMap<u64, (&Value, &Vec<Value>)> = HashMap::new();
    let mut offset = None;
    for row in slices {
        let (name, id, pid) = (row[3].as_str().unwrap(), row[5].as_u64(), row[6].as_u64());
        let (Some(id), Some(pid)) = (id, pid) else {
            panic!("slice without a span id or process: {row:?}")
        };
        let s = *by_key
            .get(&key(pid, name, id))
            .unwrap_or_else(|| panic!("slice of no span: {row:?}"));
        // (4) Its duration to the nanosecond; its start, the span's start moved by one
        // offset for all (the importer's clock is BOOTTIME, the records' MONOTONIC).
        let (start, end) = (
            s["start_ns"].as_i64().unwrap(),
            s["end_ns"].as_i64().unwrap(),
        );
        assert_eq!(
            row[2].as_i64(),
            Some(end - start),
            "duration of {s}: {row:?}"
        );
        let off = row[1].as_i64().unwrap() - start;
        assert_eq!(*offset.get_or_insert(off), off, "start of {s}: {row:?}");
        assert!(span_of.insert(row[0].as_u64().unwrap(), (s, row)).is_none());
    }

    // (3) Under its own parent only, and linked only from it.
    assert_eq!(
        same_name[0][0], 0,
        "slices inside a slice of their own name"
    );
    let mut nested = 0;
    for (s, row) in span_of.values() {
        if let Some(p) = row[4].as_u64() {
            let (parent, _) = span_of[&p];
            assert!(
                parent["pid"] == s["pid"] && parent["args"][0] == s["args"][1],
                "{s} drawn inside {parent}, not its parent"
            );
            nested += 1;
        }
    }
    let mut linked = std::collections::HashSet::new();
    for f in flows {
        let (from, to) = (f[0].as_u64().unwrap(), f[1].as_u64().unwrap());
        let (from_span, to_span) = (span_of[&from].0, span_of[&to].0);
        assert!(
            from_span["pid"] == to_span["pid"] && from_span["args"][0] == to_span["args"][1],
            "a flow from {from_span} to {to_span}, not its parent"
        );
        assert!(linked.insert(to), "two flows into {to_span}");
    }
    for (id, (s, row)) in &span_of {
        let parent = s["args"][1].as_u64().unwrap();
        let pid = s["pid"].as_u64().unwrap();
        // A parent lost with a full ring buffer is in neither output.
        let parent_in_run = ["httpserver:request", "httpserver:send_message"]
            .iter()
            .any(|n| by_key.contains_key(&key(pid, n, parent)));
        if parent != 0 && parent_in_run {
            assert!(
                row[4].is_u64() || linked.contains(id),
                "{s}: neither drawn in nor linked to its parent"
            );
        }
    }
    let counts = TpCounts {
        slices: slices.len(),
        nested,
        flows: flows.len(),
    };
    eprintln!(
        "trace processor: {} slices for {} spans ({} lost records), {} nested, {} flows, \
         stats clean",
        counts.slices,
        spans.len(),
        out.summary()["lost"],
        counts.nested,
        counts.flows
    );
    counts
}

/// The off-CPU slices of the trace (perfetto_dump.py's `waits`) against the spans of the same
/// run: each on a thread's track, inside the span slice it nests in; and, for every span drawn
/// on its thread's track, the slices inside it add up, kind by kind, to its time split to the
/// nanosecond (each slice is the interval the kernel's accounting filed, see
/// `OffInterval`), unless the ring buffer lost some (said in the summary).
fn check_wait_slices(d: &Value, out: &Output) {
    let slices = d["slices"].as_array().unwrap();
    let waits = d["waits"].as_array().unwrap();
    let tracks: HashMap<u64, &Value> = d["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["uuid"].as_u64().unwrap(), t))
        .collect();
    let known = ["lock", "net", "timer", "disk", "fault", "other", "runq"];
    for w in waits {
        assert!(known.contains(&w["name"].as_str().unwrap()), "{w}");
        assert!(tracks[&w["track"].as_u64().unwrap()]["tid"].is_u64(), "{w}");
        assert!(w["end"].as_u64() > w["ts"].as_u64(), "{w}");
        if let Some(p) = w["parent"].as_u64() {
            let p = &slices[p as usize];
            assert_eq!(p["track"], w["track"]);
            assert!(p["ts"].as_u64() <= w["ts"].as_u64() && w["end"].as_u64() <= p["end"].as_u64());
        }
    }
    if out.summary().get("waits_lost").is_some() || out.summary()["lost"] != 0 {
        eprintln!("records lost: wait sums not checked: {}", out.summary());
        return;
    }
    // Per thread track, the waits by start: those inside a slice are a range.
    let mut by_track: HashMap<u64, Vec<&Value>> = HashMap::new();
    for w in waits {
        by_track
            .entry(w["track"].as_u64().unwrap())
            .or_default()
            .push(w);
    }
    let mut checked = 0;
    for s in slices {
        let t = tracks[&s["track"].as_u64().unwrap()];
        let a = &s["args"];
        if !t["tid"].is_u64() || !a["runq_ns"].is_u64() {
            continue;
        }
        let (t0, t1) = (s["ts"].as_u64().unwrap(), s["end"].as_u64().unwrap());
        let mut sums: HashMap<&str, u64> = HashMap::new();
        for w in by_track
            .get(&s["track"].as_u64().unwrap())
            .into_iter()
            .flatten()
        {
            let (w0, w1) = (w["ts"].as_u64().unwrap(), w["end"].as_u64().unwrap());
            if w0 >= t0 && w1 <= t1 {
                *sums.entry(w["name"].as_str().unwrap()).or_default() += w1 - w0;
            }
        }
        let get = |k: &str| a.get(k).and_then(Value::as_u64).unwrap_or(0);
        let kinds: u64 = ["lock", "net", "timer", "disk", "fault"]
            .iter()
            .map(|k| get(&format!("wait_{k}_ns")))
            .sum();
        for (k, want) in [
            ("lock", get("wait_lock_ns")),
            ("net", get("wait_net_ns")),
            ("timer", get("wait_timer_ns")),
            ("disk", get("wait_disk_ns")),
            ("fault", get("wait_fault_ns")),
            ("other", get("sleep_ns") + get("io_ns") - kinds),
            ("runq", get("runq_ns")),
        ] {
            let got = sums.get(k).copied().unwrap_or(0);
            assert_eq!(got, want, "{k} slices inside {s}: {sums:?}");
        }
        checked += 1;
    }
    eprintln!(
        "{} off-CPU slices; {checked} thread-track spans add up to their split",
        waits.len()
    );
}

/// The Rust demo server under concurrent load, checked by Perfetto's own trace processor
/// against the NDJSON of the same run. Its requests are polled (poll markers), so each one is
/// on an async track and its `send_message` linked to it by a flow.
#[test]
#[ignore = "needs root"]
fn trace_processor_agrees_with_the_ndjson_rust_server() {
    let path = trace_path("perfetto-tp-rust");
    let out = concurrent_run(
        &path,
        &usdt_trace_tests::markers::demo_servers().0,
        16,
        false,
    );
    let c = check_with_trace_processor(&path, &out);
    let requests = named(&out.spans(), "request").len();
    assert!(requests >= 100, "a busy run: {requests} requests");
    assert!(
        c.flows >= requests / 2,
        "{} flows for {requests} requests",
        c.flows
    );
}

/// The forking C demo server under concurrent load (a process per connection, ids reused
/// across them), checked the same way: its requests are not polled, so each `send_message`
/// is drawn inside its own request.
#[test]
#[ignore = "needs root"]
fn trace_processor_agrees_with_the_ndjson_c_server() {
    let path = trace_path("perfetto-tp-c");
    let out = concurrent_run(&path, &usdt_trace_tests::markers::demo_servers().1, 4, true);
    let c = check_with_trace_processor(&path, &out);
    let requests = named(&out.spans(), "request").len();
    assert!(requests >= 100, "a busy run: {requests} requests");
    assert!(
        c.nested >= requests / 2,
        "{} nested for {requests} requests",
        c.nested
    );
}

/// why_scen's own account of one span (its `truth` line): ns inside pthread_mutex_lock,
/// inside nanosleep or epoll_wait, and inside pread, the preads, and its CPU time inside
/// those calls.
fn why_truths(stderr: &str) -> Vec<(u64, u64, u64, u64, u64)> {
    stderr
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w[..] {
                ["truth", "req", "lock_ns", l, "sleep_ns", s, "pread_ns", p, "preads", n, "call_cpu_ns", c] => {
                    Some((
                        l.parse().ok()?,
                        s.parse().ok()?,
                        p.parse().ok()?,
                        n.parse().ok()?,
                        c.parse().ok()?,
                    ))
                }
                _ => None,
            }
        })
        .collect()
}

/// `why_scen MODE` (6 `why:req` spans whose off-CPU time goes to one known wait) traced with
/// `--perfetto`, the trace loaded into Perfetto's own trace processor. Its tables must show:
/// no import error or data loss; every off-CPU slice a child of its span's slice on the
/// span's thread track, inside it; per span, the slices of each kind adding up to the span's
/// `wait_KIND_ns` annotation and the `runq` slices to its `runq_ns`, to the nanosecond (each
/// slice is one interval exactly as the kernel's accounting filed it); the wait of `kind` in
/// every span, woken by `waker` ("task": a thread of the program itself; else an interrupt's
/// label); and its total within the program's own clock of the time inside the waiting call
/// (as why_diff bounds it: at most that call's off-CPU time, at least that less the run
/// queue, with 10% or 0.1 ms of slack). For `disk` (`waker` "any") as why_diff has it: at most
/// the wall time inside pread, and no wait asked of each span (this VM's host sometimes serves
/// a direct read while the vCPU is stopped, and the reader never sleeps).
fn wait_slices_match_the_split_and_the_programs_clock(mode: &str, kind: &str, waker: &str) {
    let bin = build_c("why_scen", &["-O2", "-pthread"]);
    let cmd = format!("{} {mode}", bin.display());
    // `disk FILE`: the mode is its first word.
    let mode = mode.split_whitespace().next().unwrap();
    let path = trace_path(&format!("perfetto-waits-{mode}"));
    let out = watch::Watch::start(&["--perfetto", path.to_str().unwrap(), "-c", &cmd]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.summary()["lost"], 0, "{}", out.summary());
    assert!(
        out.summary().get("waits_lost").is_none(),
        "{}",
        out.summary()
    );
    let spans = out.spans();
    let truth = why_truths(&out.stderr);
    assert_eq!((spans.len(), truth.len()), (6, 6), "{}", out.stderr);
    let res = trace_processor(
        &path,
        &[
            "select name, idx, severity, source, value from stats \
             where severity in ('error', 'data_loss') and value > 0",
            "select s.id, s.track_id, s.ts, s.dur, \
               extract_arg(s.arg_set_id, 'debug.wait_lock_ns'), \
               extract_arg(s.arg_set_id, 'debug.wait_net_ns'), \
               extract_arg(s.arg_set_id, 'debug.wait_timer_ns'), \
               extract_arg(s.arg_set_id, 'debug.wait_disk_ns'), \
               extract_arg(s.arg_set_id, 'debug.wait_fault_ns'), \
               extract_arg(s.arg_set_id, 'debug.sleep_ns'), \
               extract_arg(s.arg_set_id, 'debug.io_ns'), \
               extract_arg(s.arg_set_id, 'debug.runq_ns'), t.tid, \
               extract_arg(s.arg_set_id, 'debug.steal_ns') \
             from slice s join thread_track tt on tt.id = s.track_id \
             join thread t using (utid) where s.name = 'why:req' order by s.ts",
            "select s.id, s.track_id, s.ts, s.dur, s.name, s.parent_id, \
               extract_arg(s.arg_set_id, 'debug.waker'), \
               extract_arg(s.arg_set_id, 'debug.waker_pid') \
             from slice s where s.category = 'offcpu' order by s.ts",
            "select s.track_id, s.ts, s.dur, s.parent_id, \
               extract_arg(s.arg_set_id, 'debug.steal_ns') \
             from slice s where s.category = 'steal' order by s.ts",
        ],
    );
    let _ = std::fs::remove_file(&path);
    let (stats, span_rows, wait_rows, steal_rows) = (&res[0], &res[1], &res[2], &res[3]);
    assert!(stats.is_empty(), "trace processor stats: {stats:?}");
    assert_eq!(span_rows.len(), 6, "{span_rows:?}");
    let pid = spans[0]["pid"].as_u64().unwrap();
    let u = |v: &Value| v.as_u64().unwrap_or(0);
    for w in wait_rows {
        let parent = w[5].as_u64();
        assert!(
            span_rows.iter().any(|s| s[0].as_u64() == parent),
            "an off-CPU slice not directly under a span: {w:?}"
        );
    }
    let (reads, disk_waits) = (
        truth.iter().map(|t| t.3).sum::<u64>(),
        wait_rows.iter().filter(|w| w[4] == "disk").count() as u64,
    );
    // Not for disk: once a span's 8 reads made no disk slice though the run's others did.
    // Nor for fault, for the same reason (why_fault.rs checks the faults against the program).
    let every_span = kind != "disk" && kind != "fault";
    if kind == "disk" {
        eprintln!("{disk_waits} disk waits for {reads} reads");
    }
    let mut stolen = 0;
    let mut unseen_waker = 0;
    for ((s, ndjson), &(lock_ns, sleep_ns, pread_ns, _, call_cpu)) in
        span_rows.iter().zip(&spans).zip(&truth)
    {
        assert_eq!(u(&s[12]), ndjson["tid"].as_u64().unwrap(), "{s:?}");
        let (t0, t1) = (u(&s[2]), u(&s[2]) + u(&s[3]));
        let mine: Vec<&Vec<Value>> = wait_rows.iter().filter(|w| w[5] == s[0]).collect();
        let mut sums: HashMap<&str, u64> = HashMap::new();
        for w in &mine {
            assert_eq!(w[1], s[1], "on the span's track: {w:?}");
            assert!(
                u(&w[2]) >= t0 && u(&w[2]) + u(&w[3]) <= t1,
                "{w:?} in {s:?}"
            );
            *sums.entry(w[4].as_str().unwrap()).or_default() += u(&w[3]);
        }
        // The host's steal: per span its `steal` slices add up to its `steal_ns`, exactly,
        // each inside it, on its track, and in time the thread was on CPU (no off-CPU slice
        // of the span overlaps one).
        let steals: Vec<&Vec<Value>> = steal_rows.iter().filter(|r| r[3] == s[0]).collect();
        assert_eq!(
            steals.iter().map(|r| u(&r[4])).sum::<u64>(),
            u(&s[13]),
            "steal slices against the span's steal_ns: {s:?}: {steals:?}"
        );
        for r in &steals {
            let (a, b) = (u(&r[1]), u(&r[1]) + u(&r[2]));
            assert!(r[0] == s[1] && a >= t0 && b <= t1, "{r:?} in {s:?}");
            assert!(
                mine.iter()
                    .all(|w| b <= u(&w[2]) || a >= u(&w[2]) + u(&w[3])),
                "a steal slice over an off-CPU one: {r:?} {mine:?}"
            );
        }
        stolen += steals.len();
        let kinds = u(&s[4]) + u(&s[5]) + u(&s[6]) + u(&s[7]) + u(&s[8]);
        for (k, want) in [
            ("lock", u(&s[4])),
            ("net", u(&s[5])),
            ("timer", u(&s[6])),
            ("disk", u(&s[7])),
            ("fault", u(&s[8])),
            ("other", u(&s[9]) + u(&s[10]) - kinds),
            ("runq", u(&s[11])),
        ] {
            assert_eq!(
                sums.get(k).copied().unwrap_or(0),
                want,
                "{k} in {s:?}: {sums:?}"
            );
        }
        // The wait itself, with its waker.
        let waits: Vec<&&Vec<Value>> = mine.iter().filter(|w| w[4] == kind).collect();
        assert!(
            !every_span || !waits.is_empty(),
            "no {kind} slice in {s:?}: {mine:?}"
        );
        for w in &waits {
            let label = w[6].as_str().unwrap_or_default();
            if waker == "any" {
                continue;
            } else if label.is_empty() && unseen_waker == 0 {
                // One wakeup a run may go unseen: the kernel does not enter a tracing program
                // again on a CPU where it runs, so a wakeup from an interrupt that lands while
                // the waking hook runs there for another task is not seen (a timer wait had
                // no waker once, with the whole file's tests running at once). Never a wrong
                // one, and never twice.
                unseen_waker += 1;
                continue;
            } else if waker == "task" {
                // The holder thread: the program's, not the span's own.
                assert_eq!(u(&w[7]), pid, "woken by the program's own thread: {w:?}");
                assert!(label.contains(&format!(" {pid}/")), "{w:?}");
                assert!(!label.ends_with(&format!("/{}", ndjson["tid"])), "{w:?}");
            } else {
                assert_eq!(label, waker, "{w:?}");
            }
        }
        let got = sums.get(kind).copied().unwrap_or(0) as f64;
        if kind == "disk" {
            assert!(
                got <= pread_ns as f64 + 100_000.0,
                "disk: {got} ns of disk slices, the program measured {pread_ns} ns in pread: \
                 {s:?}"
            );
            continue;
        }
        if kind == "fault" {
            // No disk time: the thread faulted outside any syscall.
            assert_eq!(u(&s[7]), 0, "disk time in a fault span: {s:?}");
            continue;
        }
        let inside = if kind == "lock" { lock_ns } else { sleep_ns };
        let want = inside.saturating_sub(call_cpu) as f64;
        let slack = (0.1 * want).max(100_000.0);
        let runq = u(&s[11]) as f64;
        assert!(
            got <= want + slack && got >= want - runq - slack,
            "{kind}: {got} ns of {kind} slices, the program measured {want} ns off CPU in \
             the call: {s:?}"
        );
    }
    eprintln!(
        "{mode}: {} off-CPU slices and {stolen} steal slices under 6 spans, each span's sums \
         exact",
        wait_rows.len()
    );
    // Every steal slice is under a span (none was drawn for a span that is not there).
    assert_eq!(stolen, steal_rows.len(), "{steal_rows:?}");
}

#[test]
#[ignore = "needs root"]
fn lock_wait_slices_nest_in_their_span_and_add_up_to_its_split() {
    wait_slices_match_the_split_and_the_programs_clock("lock", "lock", "task");
}

#[test]
#[ignore = "needs root"]
fn timer_wait_slices_nest_in_their_span_and_add_up_to_its_split() {
    wait_slices_match_the_split_and_the_programs_clock("sleep", "timer", "[timer]");
}

/// epoll_wait ended by its own timeout: a timer wait, named so on the slice although the call
/// is a poll (the kind changes at the wakeup, after the interval began as a network wait).
#[test]
#[ignore = "needs root"]
fn a_poll_its_timeout_ended_is_a_timer_slice() {
    wait_slices_match_the_split_and_the_programs_clock("poll", "timer", "[timer]");
}

/// O_DIRECT reads: `disk` slices (uninterruptible sleep in pread), their sums exact.
#[test]
#[ignore = "needs root"]
fn disk_wait_slices_nest_in_their_span_and_add_up_to_its_split() {
    let Some(file) = testprogs::disk_file(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("perfetto_disk_{}.dat", std::process::id()),
    ) else {
        eprintln!("skipped: no block device for a file here (tmpfs only)");
        return;
    };
    let mode = format!("disk {}", file.display());
    wait_slices_match_the_split_and_the_programs_clock(&mode, "disk", "any");
    let _ = std::fs::remove_file(&file);
}

/// Major page faults on a mapped file whose pages were dropped: `fault` slices (uninterruptible
/// sleep outside any syscall), their sums exact, and no `disk` time.
#[test]
#[ignore = "needs root"]
fn fault_wait_slices_nest_in_their_span_and_add_up_to_its_split() {
    let Some(file) = testprogs::disk_file(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("perfetto_disk_{}.dat", std::process::id()),
    ) else {
        eprintln!("skipped: no block device for a file here (tmpfs only)");
        return;
    };
    let mode = format!("fault {}", file.display());
    wait_slices_match_the_split_and_the_programs_clock(&mode, "fault", "any");
    let _ = std::fs::remove_file(&file);
}

/// A thread in a span that switches 400,000 times (tests/testprogs/bench_pingpong.c: a pipe
/// round trip per span) into a 4 KiB ring: off-CPU records are lost, and the run says so, in
/// the summary (`waits_lost`) and a warning; the trace still loads without errors.
#[test]
#[ignore = "needs root"]
fn lost_wait_records_are_counted_and_said() {
    let bin = build_c("bench_pingpong", &["-O2"]);
    let path = trace_path("perfetto-waits-lost");
    // Its result goes to a file (/dev/null): stdout is the NDJSON.
    let cmd = format!("{} 200000 1 1 /dev/null", bin.display());
    let out = watch::Watch::start(&[
        "--ring-kib",
        "4",
        "--perfetto",
        path.to_str().unwrap(),
        "-c",
        &cmd,
    ])
    .finish();
    assert!(out.status.success(), "{}", out.stderr);
    let lost = out.summary()["waits_lost"].as_u64().unwrap_or(0);
    assert!(lost > 0, "a 4 KiB ring cannot hold them: {}", out.summary());
    assert!(
        out.stderr.contains(&format!(
            "warning: --perfetto: {lost} wait slices dropped so spans were kept"
        )),
        "{}",
        out.stderr
    );
    let res = trace_processor(
        &path,
        &[
            "select name, idx, severity, source, value from stats \
             where severity in ('error', 'data_loss') and value > 0",
            "select count(*) from slice where category = 'offcpu'",
        ],
    );
    let _ = std::fs::remove_file(&path);
    assert!(res[0].is_empty(), "trace processor stats: {:?}", res[0]);
    eprintln!(
        "{lost} off-CPU intervals lost, {} slices drawn",
        res[1][0][0]
    );
}
