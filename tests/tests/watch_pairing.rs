//! Pairing that a per-thread stack gets wrong: a start with several possible ends
//! (commit or abort), and overlapping instances that end in start order (paired by a key).
use serde_json::{json, Value};
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::build_c;

fn run(mode: &str, extra: &[&str]) -> watch::Output {
    let bin = build_c("watch_pairing", &["-O2"]);
    let b = bin.to_str().unwrap();
    let cmd = format!("{b} {mode}");
    let mut args = vec!["-c", cmd.as_str(), b];
    args.extend_from_slice(extra);
    watch::Watch::start(&args).finish()
}

#[test]
#[ignore = "needs root"]
fn a_transaction_ends_in_commit_or_abort_and_says_which() {
    let out = run("txn", &[]);
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    let got: Vec<(Value, &str, Value)> = spans
        .iter()
        .map(|s| {
            (
                s["args"].clone(),
                s["end"].as_str().unwrap(),
                s["end_args"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (json!([1]), "txn__commit", json!([1])),
            (json!([2]), "txn__abort", json!([2, 5])),
            (json!([3]), "txn__commit", json!([3])),
        ],
        "{:?}",
        out.records
    );
    for s in &spans {
        assert_eq!(s["name"], "txn");
        assert!(s["duration_ns"].as_u64().unwrap() >= 1_000_000, "{s}");
        // end_ns is the end probe's time.
        assert_eq!(
            s["end_ns"].as_u64().unwrap(),
            s["start_ns"].as_u64().unwrap() + s["duration_ns"].as_u64().unwrap()
        );
    }
    let sum = out.summary();
    assert_eq!(
        (sum["spans"].as_u64(), sum["events"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(
        (sum["unmatched"].as_u64(), sum["unmatched_end"].as_u64()),
        (Some(0), Some(0))
    );
}

#[test]
#[ignore = "needs root"]
fn text_mode_names_the_end_that_closed_each_span() {
    let bin = build_c("watch_pairing", &["-O2"]);
    let b = bin.to_str().unwrap();
    let cmd = format!("{b} txn");
    let out = watch::run(&["watch", "-c", &cmd, b]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = stdout.lines().filter(|l| l.contains("wp:txn")).collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    assert!(rows[0].contains("(1) -> txn__commit(1)"), "{}", rows[0]);
    assert!(rows[1].contains("(2) -> txn__abort(2, 5)"), "{}", rows[1]);
    assert!(rows[2].contains("(3) -> txn__commit(3)"), "{}", rows[2]);
}

#[test]
#[ignore = "needs root"]
fn explicit_rules_give_one_start_two_ends() {
    let out = run(
        "txn",
        &[
            "--no-auto-span",
            "--span",
            "txn__start=txn__commit",
            "--span",
            "txn__start=txn__abort",
        ],
    );
    assert!(out.status.success(), "{}", out.stderr);
    let ends: Vec<&str> = out
        .spans()
        .iter()
        .map(|s| s["end"].as_str().unwrap())
        .collect();
    assert_eq!(ends, ["txn__commit", "txn__abort", "txn__commit"]);
    assert!(out.events().is_empty(), "{:?}", out.events());
}

#[test]
#[ignore = "needs root"]
fn overlapping_instances_pair_by_key_not_by_stack() {
    let out = run("pools", &["--span", "pool__begin=pool__end", "--key", "0"]);
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    assert_eq!(spans.len(), 3, "{:?}", out.records);
    for (i, s) in spans.iter().enumerate() {
        let pool = i as u64 + 1;
        assert_eq!(s["args"], json!([pool]), "{s}");
        assert_eq!(s["end_args"], json!([pool]), "{s}");
        // Each pool's span is about 10 ms (begin and end both 2 ms apart); a stack would
        // pair pool 3's begin with pool 1's end (~6 ms) and pool 1's begin with pool 3's
        // end (~14 ms).
        let d = s["duration_ns"].as_u64().unwrap();
        assert!((9_000_000..60_000_000).contains(&d), "pool {pool}: {d} ns");
    }
    // Without the key the same run mispairs: that is what --key is for.
    let lifo = run("pools", &["--span", "pool__begin=pool__end"]);
    let firsts: Vec<Value> = lifo.spans().iter().map(|s| s["args"].clone()).collect();
    assert_eq!(firsts[0], json!([3]), "{:?}", lifo.records);
}

#[test]
fn a_key_beyond_the_probe_arguments_is_an_error() {
    let bin = build_c("watch_pairing", &["-O2"]);
    let b = bin.to_str().unwrap();
    let out = watch::run(&["watch", b, "--span", "pool__begin=pool__end", "--key", "3"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--key 3: wp:pool__begin has 1 argument"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root"]
fn json_starts_with_a_start_record_that_places_times_in_wall_clock() {
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let out = run("txn", &[]);
    let first = &out.records[0];
    assert_eq!(first["type"], "start", "{first}");
    assert_eq!(first["schema"], 2);
    assert_eq!(first["clock"], "monotonic");
    assert_eq!(first["span_names"], 2, "txn and pool");
    assert!(first["command"]
        .as_str()
        .unwrap()
        .ends_with("watch_pairing txn"));
    let zero = first["clock_zero_unix_ns"].as_u64().unwrap();
    let t0 = first["start_ns"].as_u64().unwrap();
    // The first span, placed in wall time, falls after we started and within a minute.
    let s = out.spans()[0];
    let wall = zero + s["start_ns"].as_u64().unwrap();
    assert!(s["start_ns"].as_u64().unwrap() >= t0);
    assert!(
        wall >= before && wall < before + 60_000_000_000,
        "{wall} vs {before}"
    );
    assert_eq!(out.of_type("start").count(), 1);
}
