//! `--str PROBE:N`: string arguments as JSON strings, escaped so every line stays valid JSON.
use serde_json::json;
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, named};

#[test]
#[ignore = "needs root"]
fn str_args_escaped_truncated_null_and_on_span_start() {
    let bin = build_c("watch_str", &["-O2"]);
    let b = bin.to_str().unwrap();
    // Watch::finish parses every stdout line as JSON: invalid escapes fail right there.
    let out = watch::Watch::start(&["--str", "ws:msg:0", "--str", "ws:req__start:0", "-c", b, b])
        .finish();
    assert!(out.status.success(), "{}", out.stderr);
    let events = out.events();
    let msgs = named(&events, "msg");
    assert_eq!(msgs.len(), 6, "{:?}", out.records);
    let mut long = "a".repeat(126);
    long.push('Z');
    let want = [
        json!("hello"),
        json!("q\"b\\s\nn\tt\r\u{1}\u{7f} end"),
        json!("\u{fffd}\u{fffd} bad \u{fffd}( ok \u{e9}"),
        json!(""),
        json!(null),
        json!(long),
    ];
    for (i, (m, w)) in msgs.iter().zip(want.iter()).enumerate() {
        assert_eq!(m["args"][1], i as i64, "order");
        assert_eq!(&m["args"][0], w, "string #{i}");
    }
    let spans = out.spans();
    assert_eq!(spans.len(), 1, "{:?}", out.records);
    assert_eq!(spans[0]["name"], "req");
    assert_eq!(spans[0]["args"], json!(["GET /x", 7]));
    assert_eq!(spans[0]["end_args"], json!([200]));
}

/// Without --str the pointer is a plain unsigned number.
#[test]
#[ignore = "needs root"]
fn str_arg_without_flag_is_a_number() {
    let bin = build_c("watch_str", &["-O2"]);
    let b = bin.to_str().unwrap();
    let out = watch::Watch::start(&["-c", b, b, "ws:msg"]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let events = out.events();
    assert_eq!(events.len(), 6, "{:?}", out.records);
    assert!(events[0]["args"][0].as_u64().unwrap() > 0x1000);
    assert_eq!(events[4]["args"][0], 0, "the NULL pointer");
}
