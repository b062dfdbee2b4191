//! The uprobe program's size against the verifier's budget. The kernel refuses a program whose
//! verification processes more than 1,000,000 instructions, and every feature on the span path
//! adds to that count; past the budget `watch` cannot attach at all. This keeps a margin so that
//! the next addition fails here, with the figure, rather than on a user's machine with a
//! slightly different kernel.
use std::process::{Command, Stdio};
use usdt_trace_tests::proc;
use usdt_trace_tests::watch::usdt_trace_bin;
use usdt_trace_tests::watch_util::build_c;

/// What the budget leaves for kernels whose verifier explores a little more than this one.
const CEILING: u64 = 900_000;

#[test]
#[ignore = "needs root"]
fn uprobe_program_verifies_with_headroom() {
    let bin = build_c("watch_smoke", &["-O2", "-DVERIFIER_BUDGET"]);
    let out = proc::output_within(
        Command::new(usdt_trace_bin())
            .args(["watch", "--hist", "-d", "0.1"])
            .arg(&bin)
            .env("USDT_TRACE_VERIFIER_STATS", "1")
            .stdin(Stdio::null()),
        proc::RUN_TIMEOUT,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("verifier: usdt_site: "))
        .unwrap_or_else(|| panic!("no verifier line: {stderr}"));
    let Some(n) = line
        .strip_prefix("verifier: usdt_site: ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
    else {
        // An old kernel without verified_insns: nothing to hold the program to.
        assert!(line.contains("does not report"), "{line}");
        eprintln!("skipped: {line}");
        return;
    };
    eprintln!("{line}");
    assert!(
        n < CEILING,
        "the uprobe program needs {n} verifier instructions, past the {CEILING} this project \
         keeps (the kernel's budget is 1000000): move the new span-path code into an \
         #[inline(never)] subprogram or a global function"
    );
}
