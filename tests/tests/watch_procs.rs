//! Many processes: short-lived ones started after attach, and PID filtering (-p).
use serde_json::json;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;
use usdt_trace_tests::watch_util::{build_c, Target};
use usdt_trace_tests::{proc, watch};

#[test]
#[ignore = "needs root"]
fn fifty_short_lived_processes_after_attach_all_seen() {
    let bin = build_c("watch_procs", &["-O2"]);
    let w = watch::Watch::start(&[bin.to_str().unwrap(), "wp:job__*"]);
    let mut expected_pids = BTreeSet::new();
    for id in 0..50 {
        let mut child = proc::spawn(Command::new(&bin).args(["once", &id.to_string()]));
        expected_pids.insert(child.id() as u64);
        let st = proc::wait_within(&mut child, Duration::from_secs(10));
        assert!(st.is_some_and(|s| s.success()), "job {id}: {st:?}");
    }
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    assert_eq!(spans.len(), 50, "{}", out.stderr);
    let mut ids = BTreeSet::new();
    let mut pids = BTreeSet::new();
    for s in &spans {
        assert_eq!(s["name"], "job");
        let pid = s["pid"].as_u64().unwrap();
        assert_eq!(
            s["args"][1].as_u64(),
            Some(pid),
            "pid argument matches the record's pid"
        );
        assert_eq!(s["args"][0], s["end_args"][0]);
        assert_eq!(s["tid"], pid);
        ids.insert(s["args"][0].as_i64().unwrap());
        pids.insert(pid);
    }
    assert_eq!(ids, (0..50).collect::<BTreeSet<i64>>());
    assert_eq!(pids, expected_pids);
    let sum = out.summary();
    assert_eq!(sum["spans"], 50);
    assert_eq!(sum["unmatched"], 0);
    assert_eq!(sum["unmatched_end"], 0);
    assert_eq!(sum["lost"], 0);
}

/// Three servers; fire each 3 times, interleaved; returns them.
fn three_servers(bin: &std::path::Path) -> Vec<Target> {
    (0..3)
        .map(|_| {
            let (t, ready) = Target::spawn(bin, &["serve"]);
            assert_eq!(ready, format!("ready {}", t.pid()));
            t
        })
        .collect()
}

fn fire_all(ts: &mut [Target]) {
    for round in 1..=3 {
        for t in ts.iter_mut() {
            assert_eq!(t.ask("fire"), format!("fired {round}"));
        }
    }
}

fn pid_filter(with_target: bool, which: &[usize]) {
    let bin = build_c("watch_procs", &["-O2"]);
    let mut ts = three_servers(&bin);
    let mut args: Vec<String> = Vec::new();
    for &i in which {
        args.push("-p".into());
        args.push(ts[i].pid().to_string());
    }
    if with_target {
        args.push(bin.to_str().unwrap().into());
    }
    args.push("wp:ping".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut w = watch::Watch::start(&args);
    fire_all(&mut ts);
    // Each process answered after its probe fired; wait until the last one is in.
    let last = ts[*which.last().unwrap()].pid() as u64;
    assert!(w.wait_for(Duration::from_secs(30), |r| r["pid"] == last
        && r["args"][1] == 3));
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    let events = out.events();
    assert_eq!(events.len(), 3 * which.len(), "{:?}", out.records);
    for &i in which {
        let pid = ts[i].pid() as u64;
        let mine: Vec<_> = events.iter().filter(|e| e["pid"] == pid).collect();
        let ns: Vec<_> = mine.iter().map(|e| e["args"].clone()).collect();
        assert_eq!(
            ns,
            vec![json!([pid, 1]), json!([pid, 2]), json!([pid, 3])],
            "pid {pid}"
        );
    }
    assert_eq!(out.summary()["events"], 3 * which.len() as u64);
    for t in ts {
        assert!(t.quit().success());
    }
}

#[test]
#[ignore = "needs root"]
fn pid_filter_with_target_only_that_pid() {
    pid_filter(true, &[1]);
}

#[test]
#[ignore = "needs root"]
fn pid_filter_without_target_traces_mapped_objects() {
    pid_filter(false, &[1]);
}

#[test]
#[ignore = "needs root"]
fn two_pid_filters_with_target() {
    pid_filter(true, &[0, 2]);
}

#[test]
#[ignore = "needs root"]
fn two_pid_filters_without_target() {
    pid_filter(false, &[2, 0]);
}
