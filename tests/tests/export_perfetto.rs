//! `watch --perfetto FILE`: the file decodes with Perfetto's own protobuf definitions (the
//! `perfetto` Python package, installed by scripts/setup.sh) and shows what the NDJSON of the
//! same run shows: tracks per process and thread, nested slices, a span that crossed threads
//! on its own track, instants for events, arguments and the time split (with a polled span's idle time, polls and
//! threads) as annotations.
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
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
    // Indexed: a busy run has tens of thousands.
    let by_start: HashMap<(&str, u64), &Value> = slices
        .iter()
        .map(|x| ((x["name"].as_str().unwrap(), x["ts"].as_u64().unwrap()), x))
        .collect();
    let tracks: HashMap<u64, &Value> = d["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["uuid"].as_u64().unwrap(), t))
        .collect();
    for s in &spans {
        let name = format!(
            "{}:{}",
            s["provider"].as_str().unwrap(),
            s["name"].as_str().unwrap()
        );
        let sl = *by_start
            .get(&(name.as_str(), s["start_ns"].as_u64().unwrap()))
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
        match s.get("waker") {
            Some(w) => {
                assert_eq!(a["waker_off_ns"], w["off_ns"]);
                let shown = watch::waker_label(w);
                assert_eq!(a["waker"], shown.as_str());
            }
            None => assert!(a.get("waker").is_none()),
        }
    }
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

/// The Rust demo server under concurrent load (wrk, 16 connections on its multi-threaded
/// runtime): requests interleave on the tokio workers. Checked against the NDJSON of the same
/// run: every slice drawn inside another is inside its own parent (the markers parent id in
/// argument 1 is the enclosing slice's id in argument 0), never inside an unrelated request;
/// a `send_message` not drawn inside its request has a flow arrow from it.
#[test]
#[ignore = "needs root"]
fn concurrent_requests_nest_only_under_their_own_parents() {
    use usdt_trace_tests::markers::{demo_servers, free_port, start_server};
    assert!(
        usdt_trace_tests::markers::have("wrk"),
        "wrk (scripts/setup.sh)"
    );
    let bin = &demo_servers().0;
    let port = free_port();
    let _server = start_server(bin, port, None);
    let path = trace_path("perfetto-concurrent");
    let w = watch::Watch::start(&["--perfetto", path.to_str().unwrap(), bin.to_str().unwrap()]);
    let wrk = Command::new("wrk")
        .args(["-t2", "-c16", "-d1s", &format!("http://127.0.0.1:{port}/")])
        .output()
        .expect("wrk");
    assert!(
        wrk.status.success(),
        "{}",
        String::from_utf8_lossy(&wrk.stderr)
    );
    let out = w.stop();
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
