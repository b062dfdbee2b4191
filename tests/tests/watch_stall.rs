//! A reader that stops reading must not stall tracing: stopping stays prompt, memory stays
//! bounded, and what could not be written is counted on stderr.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use usdt_trace_tests::proc::{self, Lines};
use usdt_trace_tests::watch::usdt_trace_bin;
use usdt_trace_tests::watch_util::build_c;

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
#[ignore = "needs root"]
fn sigint_with_a_stalled_reader_mid_flood_stops_within_a_second_with_bounded_memory() {
    let bin = build_c("watch_flood", &["-O2"]);
    let b = bin.to_str().unwrap();
    // Far more events than the run lasts: the flood is still going when SIGINT comes.
    let cmd = format!("{b} 2000000000");
    let mut c = Command::new(usdt_trace_bin());
    c.args(["watch", "--json", "-c", &cmd, b])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut w = proc::spawn(&mut c);
    // stdout is held open and never read: the pipe fills within milliseconds.
    let _stalled = w.stdout.take();
    let mut err = Lines::new(w.stderr.take().unwrap());
    let attached = err.expect_within(Duration::from_secs(60), "Attached line");
    assert!(attached.starts_with("Attached"), "{attached}");
    std::thread::sleep(Duration::from_secs(2));
    let rss = rss_kib(w.id());
    proc::signal(w.id(), libc_sigint());
    let t = Instant::now();
    let status = proc::wait_within(&mut w, Duration::from_secs(10));
    let took = t.elapsed();
    if status.is_none() {
        proc::kill_and_reap(&mut w);
    }
    assert!(status.is_some(), "watch did not exit within 10 s of SIGINT");
    // Ending the flooding command takes one SIGTERM; the rest is detaching and a 0.3 s
    // grace for the stalled reader (0.4 s in all, measured here).
    eprintln!("stopped {took:?} after SIGINT, RSS {rss} KiB while flooding");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // The bound the README states: 16 MiB of ring, 16 MiB of output queue, and the rest.
    assert!(
        rss < 150 * 1024,
        "RSS {rss} KiB while flooding into a stalled pipe"
    );
    let (rest, _) = err.rest_until(Instant::now() + Duration::from_secs(10));
    let stderr = rest.join("\n");
    assert!(
        stderr.contains("reader did not keep up") || stderr.contains("could not be written"),
        "stderr: {stderr}"
    );
}

fn libc_sigint() -> i32 {
    2
}
