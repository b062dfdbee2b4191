//! Nested and recursive spans pair per thread as a stack; unmatched starts and ends are counted.
use serde_json::{json, Value};
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, named};

fn end_ns(s: &Value) -> u64 {
    s["start_ns"].as_u64().unwrap() + s["duration_ns"].as_u64().unwrap()
}

/// `outer` strictly contains `inner`.
fn contains(outer: &Value, inner: &Value) -> bool {
    outer["start_ns"].as_u64() < inner["start_ns"].as_u64() && end_ns(outer) > end_ns(inner)
}

#[test]
#[ignore = "needs root"]
fn nested_recursive_and_unmatched_spans() {
    let bin = build_c("watch_nest", &["-O2"]);
    let out = watch::Watch::start(&["-c", bin.to_str().unwrap(), bin.to_str().unwrap()]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    let names: Vec<&str> = spans.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["inner", "outer", "rec", "rec", "rec", "rec", "rec"],
        "{:?}",
        out.records
    );
    let (inner, outer) = (spans[0], spans[1]);
    assert_eq!(inner["args"], json!([2]));
    assert_eq!(inner["end_args"], json!([-2]));
    assert_eq!(outer["args"], json!([1]));
    assert_eq!(outer["end_args"], json!([-1]));
    assert!(contains(outer, inner), "{outer}\n{inner}");
    assert!(inner["duration_ns"].as_u64().unwrap() >= 1_000_000);
    assert!(outer["duration_ns"].as_u64().unwrap() >= 3_000_000);

    let rec = named(&spans, "rec");
    for (i, s) in rec.iter().enumerate() {
        let d = i as i64 + 1; // innermost ends first
        assert_eq!(s["args"], json!([d]), "{s}");
        assert_eq!(s["end_args"], json!([d * 100]), "{s}");
        if i > 0 {
            assert!(
                contains(s, rec[i - 1]),
                "depth {d} contains depth {}",
                d - 1
            );
        }
    }
    // lone__end and orphan__start are span sites, so they are not events.
    assert!(out.events().is_empty(), "{:?}", out.events());
    let sum = out.summary();
    assert_eq!(sum["spans"], 7);
    assert_eq!(sum["unmatched"], 1, "orphan__start never ended");
    assert_eq!(sum["unmatched_end"], 1, "lone__end never started");
    assert_eq!(sum["events"], 0);
}
