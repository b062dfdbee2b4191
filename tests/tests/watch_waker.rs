//! Who woke a span's thread (the `waker` field).
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, named, Target};

#[test]
#[ignore = "needs root"]
fn waker_is_the_thread_that_wrote_the_pipe() {
    let bin = build_c("watch_waker", &["-O2", "-pthread"]);
    let cmd = format!("{} pipe", bin.display());
    let out =
        watch::Watch::start(&["-c", &cmd, bin.to_str().unwrap(), "wk:wait*", "wk:helper"]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let events = out.events();
    let helper = named(&events, "helper");
    assert_eq!(helper.len(), 1, "{:?}", out.records);
    let spans = out.spans();
    assert_eq!(spans.len(), 1, "{:?}", out.records);
    let s = spans[0];
    assert!(s["duration_ns"].as_u64().unwrap() >= 30_000_000);
    assert!(s["sleep_ns"].as_u64().unwrap() >= 25_000_000, "{s}");
    let w = &s["waker"];
    assert_eq!(w["tid"], helper[0]["tid"], "{s}");
    assert_eq!(w["pid"], s["pid"]);
    assert_eq!(w["comm"], "wk_helper");
}

/// Regression: a thread asleep in nanosleep is woken by a timer interrupt. `sched_waking` then
/// runs in hardirq context on whatever task was interrupted, and the waker used to be taken
/// from `bpf_get_current_pid_tgid()`: an unrelated CPU hog was reported as the waker. Now the
/// interrupt context is tracked per CPU and the waker is `[timer]` with pid 0.
#[test]
#[ignore = "needs root"]
fn timer_wakeup_names_the_timer_not_the_interrupted_task() {
    let bin = build_c("watch_waker", &["-O2", "-pthread"]);
    let (hog, ready) = Target::spawn(&bin, &["hog"]);
    // It spins from before it says "ready".
    assert_eq!(ready, format!("ready {}", hog.pid()));
    let cmd = format!("{} nap 10", bin.display());
    let out = watch::Watch::start(&["-c", &cmd, bin.to_str().unwrap(), "wk:nap*"]).finish();
    drop(hog);
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    assert_eq!(spans.len(), 10);
    let hog_woke: Vec<_> = spans
        .iter()
        .filter(|s| {
            s["waker"]["pid"] != serde_json::Value::Null
                && s["waker"]["pid"] != s["pid"]
                && s["waker"]["pid"] != 0
        })
        .collect();
    assert!(
        hog_woke.is_empty(),
        "woken by another process while in nanosleep: {hog_woke:?}"
    );
    let timer_woke = spans
        .iter()
        .filter(|s| s["waker"]["comm"] == "[timer]" && s["waker"]["pid"] == 0)
        .count();
    assert!(
        timer_woke >= 8,
        "most naps should name the timer as waker: {spans:?}"
    );
}
