//! Kernel-side filters: `--min` drops short spans before a record is made, and `--hist` still
//! counts every span.
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, named};

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
    assert!(
        spans.len() < 7,
        "the depth-1 rec span is well under 1 ms: {spans:?}"
    );
    assert_eq!(
        sum["filtered"].as_u64().unwrap() as usize,
        7 - spans.len(),
        "{sum}"
    );
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
