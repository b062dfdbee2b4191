//! The `-c` command's life: it ends when tracing ends, and its exit status is watch's.
use std::time::{Duration, Instant};
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::build_c;

fn watch_c(mode: &str, extra: &[&str]) -> (std::process::Output, Duration) {
    let bin = build_c("watch_pairing", &["-O2"]);
    let b = bin.to_str().unwrap();
    let cmd = format!("{b} {mode}");
    let mut args = vec!["watch", "-c", cmd.as_str(), b];
    args.extend_from_slice(extra);
    let t = Instant::now();
    let out = watch::run(&args);
    (out, t.elapsed())
}

#[test]
#[ignore = "needs root"]
fn the_commands_exit_status_is_watchs() {
    let (out, _) = watch_c("exit 7", &[]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (out, _) = watch_c("exit 0", &[]);
    assert_eq!(out.status.code(), Some(0));
    // Killed by a signal: 128 + signal, as a shell reports it.
    let (out, _) = watch_c("kill", &[]);
    assert_eq!(out.status.code(), Some(128 + 9));
    // ... and said, as a shell says it: a crash of the traced program is never silent.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(") was killed by SIGKILL"), "{stderr}");
}

#[test]
#[ignore = "needs root"]
fn duration_ends_a_command_that_would_run_forever() {
    let (out, took) = watch_c("wait", &["--duration", "0.5"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It printed what it saw, then ended the command (SIGTERM ends it at once).
    assert!(stdout.contains("wp:txn"), "{stdout}");
    assert!(stdout.contains("1 spans"), "{stdout}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

#[test]
#[ignore = "needs root"]
fn leave_running_leaves_the_command_running() {
    let bin = build_c("watch_pairing", &["-O2"]);
    let b = bin.to_str().unwrap();
    // A unique argument names our command among the machine's processes.
    let tag = format!("wait-{}", std::process::id());
    let cmd = format!("{b} wait {tag}");
    // Output to /dev/null: the command that runs on holds watch's stdout open.
    let status = std::process::Command::new(watch::usdt_trace_bin())
        .args([
            "watch",
            "-c",
            &cmd,
            b,
            "--duration",
            "0.3",
            "--leave-running",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let alive = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok().map(|c| (e, c)))
        .find(|(_, c)| c.split(|&b| b == 0).any(|a| a == tag.as_bytes()));
    let (entry, _) = alive.expect("the command still runs");
    let pid: i32 = entry.file_name().to_str().unwrap().parse().unwrap();
    // SAFETY: ending the process this test started.
    unsafe { libc_kill(pid, 9) };
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// `watch --json -c prog` with both on one stdout (a pipe, as `| jq` makes it): every line
/// is either one of watch's records, whole, or one of the program's, whole.
#[test]
#[ignore = "needs root"]
fn records_and_the_commands_own_lines_never_split_each_other() {
    let bin = build_c("shared_stdout", &["-O2"]);
    let b = bin.to_str().unwrap();
    let n = 20000;
    let cmd = format!("{b} {n}");
    let out = watch::run(&["watch", "--json", "-c", &cmd, b]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (mut own, mut events) = (0, 0);
    for l in stdout.lines() {
        if let Some(i) = l.strip_prefix("line ") {
            assert_eq!(
                i.parse::<u64>().ok(),
                Some(own),
                "line {own} of the program: {l:?}"
            );
            own += 1;
            continue;
        }
        let rec: serde_json::Value = serde_json::from_str(l)
            .unwrap_or_else(|e| panic!("a line neither watch's nor the program's ({e}): {l:?}"));
        if rec["type"] == "event" {
            assert_eq!(rec["args"][0], events, "{l}");
            events += 1;
        }
    }
    assert_eq!((own, events), (n, n), "{stderr}");
}
