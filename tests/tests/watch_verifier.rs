//! The uprobe program's size against the verifier's budget. The kernel refuses a program whose
//! verification processes more than 1,000,000 instructions, and every feature on the span path
//! adds to that count; past the budget `watch` cannot attach at all. This keeps a margin so that
//! the next addition fails here, with the figure, rather than on a user's machine with a
//! slightly different kernel.
use std::process::{Command, Stdio};
use usdt_trace_tests::proc;
use usdt_trace_tests::watch::usdt_trace_bin;
use usdt_trace_tests::watch_util::build_c;

/// Far below the budget on purpose: both programs verify in about 32,000 instructions here.
/// They needed 185,000 (and edits anywhere pushed them past the budget) while the frame
/// search's result reached the code after it as a known number, which the verifier then walked
/// once per stack depth; `maps::opaque` hides it. A jump past this ceiling means a state
/// explosion like that one is back, long before it costs a user the attach.
const CEILING: u64 = 300_000;

#[test]
#[ignore = "needs root"]
fn uprobe_programs_verify_with_headroom() {
    // `usdt_site`, and `usdt_site_nosplit` (--no-sched).
    for (prog, extra) in [
        ("usdt_site", &[][..]),
        ("usdt_site_nosplit", &["--no-sched"][..]),
    ] {
        check(prog, extra);
    }
}

fn check(prog: &str, extra: &[&str]) {
    let bin = build_c("watch_smoke", &["-O2", "-DVERIFIER_BUDGET"]);
    let out = proc::output_within(
        Command::new(usdt_trace_bin())
            .args(["watch", "--hist", "-d", "0.1"])
            .args(extra)
            .arg(&bin)
            .env("USDT_TRACE_VERIFIER_STATS", "1")
            .stdin(Stdio::null()),
        proc::RUN_TIMEOUT,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let prefix = format!("verifier: {prog}: ");
    let line = stderr
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no verifier line for {prog}: {stderr}"));
    let Some(n) = line
        .strip_prefix(&prefix)
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
        "{prog} needs {n} verifier instructions, past the {CEILING} this project keeps (the \
         kernel's budget is 1000000): a value the verifier knows exactly may be reaching many \
         paths (hide it with maps::opaque), or move the new span-path code into a global \
         function"
    );
}
