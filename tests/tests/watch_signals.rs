//! Signals: Ctrl-C (SIGINT) and SIGTERM end `watch` cleanly with a summary, however soon after
//! the readiness line they arrive.
use std::process::Command;
use usdt_trace_tests::watch_util::build_c;
use usdt_trace_tests::{require_root, watch};

/// watch prints `Attached ...` (the readiness line tools and this harness wait for) *before*
/// `install_signal_handlers()` runs (usdt-trace/src/watch.rs, `run`), so a SIGINT sent as soon
/// as the line appears kills watch with the default action: no summary, exit by signal 2.
#[test]
fn bug_sigint_right_after_attached_line_kills_watch() {
    require_root!();
    let bin = build_c("watch_procs", &["-O2"]);
    for i in 0..40 {
        let w = watch::Watch::start(&[bin.to_str().unwrap(), "wp:ping"]);
        let out = w.stop();
        assert!(
            out.status.success(),
            "try {i}: {:?} {}",
            out.status,
            out.stderr
        );
        assert_eq!(out.summary()["events"], 0);
    }
}

#[test]
fn sigint_and_sigterm_after_settling_print_summary() {
    require_root!();
    let bin = build_c("watch_procs", &["-O2"]);
    for sig in ["-INT", "-TERM", "-HUP"] {
        let w = watch::Watch::start(&[bin.to_str().unwrap(), "wp:ping"]);
        std::thread::sleep(std::time::Duration::from_millis(100));
        let st = Command::new("kill")
            .args([sig, &w.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let out = w.finish();
        assert!(
            out.status.success(),
            "{sig}: {:?} {}",
            out.status,
            out.stderr
        );
        assert_eq!(out.summary()["events"], 0, "{sig}");
    }
}
