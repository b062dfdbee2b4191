//! Kernel-side filters: `--min` drops short spans before a record is made, and `--hist` still
//! counts every span; `--filter` predicates are evaluated in the kernel, and one that cannot be
//! compiled (or names no traced probe) is a one-line error.
use serde_json::json;
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, named, single_error_line};

#[test]
#[ignore = "needs root"]
fn min_drops_short_spans_in_the_kernel() {
    // watch_nest: inner >= 1 ms, outer >= 3 ms, rec spans 0.4 ms (depth 1) to 2 ms (depth 5).
    let bin = build_c("watch_nest", &["-O2"]);
    let b = bin.to_str().unwrap();
    let out = watch::Watch::start(&["--min", "1ms", "-c", b, b]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    for s in &spans {
        assert!(s["duration_ns"].as_u64().unwrap() >= 1_000_000, "{s}");
    }
    assert_eq!(named(&spans, "inner").len(), 1, "{:?}", out.records);
    assert_eq!(named(&spans, "outer").len(), 1, "{:?}", out.records);
    let sum = out.summary();
    // Every span closed in the kernel is counted; those below --min are counted as filtered.
    assert_eq!(sum["spans"], 7, "{sum}");
    // Which spans fall under 1 ms depends on the machine's load; the accounting must add up.
    let filtered = sum.get("filtered").and_then(|f| f.as_u64()).unwrap_or(0);
    assert_eq!(filtered as usize, 7 - spans.len(), "{sum}");
    // Longer than anything: nothing is recorded, everything is counted.
    let out = watch::Watch::start(&["--min", "1h", "-c", b, b]).finish();
    assert!(out.spans().is_empty(), "{:?}", out.spans());
    assert_eq!(out.summary()["spans"], 7);
    assert_eq!(out.summary()["filtered"], 7);
}

#[test]
#[ignore = "needs root"]
fn min_leaves_histograms_whole() {
    let bin = build_c("watch_nest", &["-O2"]);
    let b = bin.to_str().unwrap();
    let out = watch::Watch::start(&["--hist", "--min", "1s", "-c", b, b]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let rec: Vec<_> = out.of_type("hist").filter(|h| h["name"] == "rec").collect();
    assert_eq!(rec.len(), 1, "{:?}", out.records);
    assert_eq!(rec[0]["duration"]["count"], 5, "{}", rec[0]);
    assert!(out.summary().get("filtered").is_none(), "{}", out.summary());
}

#[test]
#[ignore = "needs root"]
fn filter_on_a_span_argument_leaves_other_spans_alone() {
    let bin = build_c("watch_nest", &["-O2"]);
    let b = bin.to_str().unwrap();
    let out = watch::Watch::start(&["--filter", "rec:arg0 >= 3", "-c", b, b]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    let rec: Vec<_> = named(&spans, "rec")
        .iter()
        .map(|s| s["args"].clone())
        .collect();
    assert_eq!(
        rec,
        [json!([3]), json!([4]), json!([5])],
        "{:?}",
        out.records
    );
    assert_eq!(named(&spans, "inner").len(), 1);
    assert_eq!(named(&spans, "outer").len(), 1);
    assert_eq!(out.summary()["filtered"], 2, "{}", out.summary());
}

#[test]
#[ignore = "needs root"]
fn filter_on_pid_comm_and_or() {
    let bin = build_c("watch_nest", &["-O2"]);
    let b = bin.to_str().unwrap();
    // No process has pid 1 here but init: nothing of watch_nest passes.
    let out = watch::Watch::start(&["--filter", "pid == 1", "-c", b, b]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.spans().is_empty(), "{:?}", out.spans());
    assert_eq!(out.summary()["filtered"], 7, "{}", out.summary());
    // comm matches; && binds tighter: (pid == 1 && comm == x) || comm == watch_nest.
    let out = watch::Watch::start(&[
        "--filter",
        "pid == 1 && comm == x || comm == watch_nest",
        "-c",
        b,
        b,
    ])
    .finish();
    assert_eq!(out.spans().len(), 7, "{:?}", out.records);
    // In histograms too.
    let out =
        watch::Watch::start(&["--hist", "--filter", "comm != watch_nest", "-c", b, b]).finish();
    for h in out.of_type("hist") {
        assert_eq!(h["duration"]["count"], 0, "{h}");
    }
}

#[test]
#[ignore = "needs root"]
fn filters_that_cannot_be_compiled_are_errors() {
    let bin = build_c("watch_nest", &["-O2"]);
    let b = bin.to_str().unwrap();
    for (filter, want) in [
        (
            "nosuch:arg0 > 1",
            "matches no traced event, span or span start",
        ),
        ("str0 == 'SELECT'", "cannot be compiled for the kernel"),
        ("arg0 >", "expected a value"),
    ] {
        let out = watch::run(&["watch", "--filter", filter, b]);
        let line = single_error_line(&out);
        assert!(line.contains(want), "{filter}: {line}");
    }
    // `--hist` with a filter on arguments is compiled now (watch_hist_filter.rs).
}
