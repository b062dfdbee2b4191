//! The smallest end-to-end check: attach to a C program built with <sys/sdt.h>, run it with -c,
//! and read back exact values.
use usdt_trace_tests::{testprogs, watch};

#[test]
#[ignore = "needs root"]
fn c_program_spans_and_events_with_exact_args() {
    let bin = testprogs::build_c("watch_smoke", &["-O2"]);
    let cmd = format!("{} 5", bin.display());
    let out = watch::Watch::start(&["-c", &cmd]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    assert_eq!(spans.len(), 5, "{:?}", out.records);
    for (i, s) in spans.iter().enumerate() {
        assert_eq!(s["provider"], "smoke");
        assert_eq!(s["name"], "op");
        assert_eq!(s["start"], "op__start");
        assert_eq!(s["end"], "op__end");
        assert_eq!(s["args"][0], i as u64);
        assert_eq!(s["args"][1], -5);
        assert_eq!(s["end_args"][1], -77);
        assert!(s["duration_ns"].as_u64().unwrap() >= 1_000_000);
    }
    let events = out.events();
    assert_eq!(events.len(), 5);
    assert_eq!(events[4]["args"][0], 12);
    let sum = out.summary();
    assert_eq!(sum["spans"], 5);
    assert_eq!(sum["events"], 5);
    assert_eq!(sum["lost"], 0);
    assert_eq!(sum["unmatched"], 0);
}
