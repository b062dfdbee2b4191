//! `--str PROBE:N`: string arguments as JSON strings, escaped so every line stays valid JSON.
use serde_json::json;
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, named};

#[test]
#[ignore = "needs root"]
fn str_args_escaped_whole_pointer_when_null_and_on_span_start() {
    let bin = build_c("watch_str", &["-O2"]);
    let b = bin.to_str().unwrap();
    // Watch::finish parses every stdout line as JSON: invalid escapes fail right there.
    let out = watch::Watch::start(&["--str", "ws:msg:0", "--str", "ws:req__start:0", "-c", b, b])
        .finish();
    assert!(out.status.success(), "{}", out.stderr);
    let events = out.events();
    let msgs = named(&events, "msg");
    assert_eq!(msgs.len(), 6, "{:?}", out.records);
    // Strings are kept up to --str-max (256 by default): the long one is whole.
    let mut long = "a".repeat(126);
    long.push_str("ZY");
    long.push_str(&"a".repeat(72));
    let want = [
        json!("hello"),
        json!("q\"b\\s\nn\tt\r\u{1}\u{7f} end"),
        // Bytes that are not UTF-8 are escaped (the backslashes of a string that has any are
        // doubled), never replaced by U+FFFD.
        json!("\\xff\\xfe bad \\xc3( ok \u{e9}"),
        json!(""),
        // A NULL string argument shows its value: never null for a value that exists.
        json!(0),
        json!(long),
    ];
    for (i, (m, w)) in msgs.iter().zip(want.iter()).enumerate() {
        assert_eq!(m["args"][1], i as i64, "order");
        assert_eq!(&m["args"][0], w, "string #{i}");
    }
    assert_eq!(msgs[2]["escaped"], json!(["arg0"]));
    assert!(msgs.iter().all(|m| m.get("truncated").is_none()));
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
