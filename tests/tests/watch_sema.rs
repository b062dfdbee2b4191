//! C semaphores (sys/sdt.h, `.probes`): 0 before attach, raised while attached (for processes
//! started before and after attach; N sites sharing one semaphore count N), 0 after watch exits.
use serde_json::json;
use std::time::Duration;
use usdt_trace_tests::watch_util::{build_c, named, Target};
use usdt_trace_tests::{proc, watch};

/// Asks `sema` until the answer is `want` (the kernel lowers the semaphores as it unregisters
/// the uprobes, which can finish after watch has exited).
fn sema_becomes(t: &mut Target, want: &str) {
    let pid = t.pid();
    let mut got = String::new();
    proc::wait_until(
        &format!("pid {pid}: semaphores {want:?}"),
        Duration::from_secs(30),
        || {
            got = t.ask("sema");
            got == want
        },
    );
}

#[test]
#[ignore = "needs root"]
fn c_semaphores_zero_before_raised_during_zero_after() {
    // Its own flags: a binary (inode) no other test in this process attaches to.
    let bin = build_c("watch_sema", &["-O2"]);
    let (mut before, _) = Target::spawn(&bin, &[]);
    assert_eq!(before.ask("sema"), "sema 0 0");
    assert_eq!(
        before.ask("fire"),
        "fired 0 0",
        "disabled probes do not fire"
    );

    let mut w = watch::Watch::start(&[bin.to_str().unwrap()]);
    // Started before attach: the kernel raised the semaphores while installing the probes.
    assert_eq!(
        before.ask("sema"),
        "sema 1 2",
        "one site / two sites sharing a semaphore"
    );
    // Started after attach.
    let (mut after, _) = Target::spawn(&bin, &[]);
    assert_eq!(after.ask("sema"), "sema 1 2");
    assert_eq!(before.ask("fire"), "fired 1 2");
    assert_eq!(after.ask("fire"), "fired 1 2");
    let after_pid = after.pid() as u64;
    assert!(
        w.wait_for(Duration::from_secs(30), |r| r["pid"] == after_pid
            && r["name"] == "two"
            && r["args"][0] == -1)
    );
    let out = w.stop();
    assert!(out.status.success(), "{:?} {}", out.status, out.stderr);

    sema_becomes(&mut before, "sema 0 0");
    sema_becomes(&mut after, "sema 0 0");
    let (mut later, _) = Target::spawn(&bin, &[]);
    assert_eq!(later.ask("sema"), "sema 0 0");

    let events = out.events();
    for (t, n) in [(&before, 2), (&after, 1)] {
        let pid = t.pid() as u64;
        let mine: Vec<_> = events.iter().copied().filter(|e| e["pid"] == pid).collect();
        assert_eq!(
            named(&mine, "one")
                .iter()
                .map(|e| &e["args"])
                .collect::<Vec<_>>(),
            [&json!([n])]
        );
        let mut two: Vec<i64> = named(&mine, "two")
            .iter()
            .map(|e| e["args"][0].as_i64().unwrap())
            .collect();
        two.sort();
        assert_eq!(two, [-n, n], "pid {pid}");
    }
    assert_eq!(events.len(), 6, "{:?}", out.records);
    for t in [before, after, later] {
        assert!(t.quit().success());
    }
}

/// With -p the semaphore rises only in that process.
#[test]
#[ignore = "needs root"]
fn c_semaphores_with_pid_filter_only_in_that_process() {
    let bin = build_c("watch_sema", &["-O1"]);
    let (mut a, _) = Target::spawn(&bin, &[]);
    let (mut b, _) = Target::spawn(&bin, &[]);
    let pid = a.pid().to_string();
    let w = watch::Watch::start(&["-p", &pid, bin.to_str().unwrap()]);
    assert_eq!(a.ask("sema"), "sema 1 2");
    assert_eq!(b.ask("sema"), "sema 0 0");
    assert_eq!(a.ask("fire"), "fired 1 2");
    assert_eq!(b.ask("fire"), "fired 0 0");
    let out = w.stop();
    assert!(out.status.success(), "{:?} {}", out.status, out.stderr);
    sema_becomes(&mut a, "sema 0 0");
    assert_eq!(out.events().len(), 3, "{:?}", out.records);
    assert!(out.events().iter().all(|e| e["pid"] == a.pid() as u64));
    assert!(a.quit().success());
    assert!(b.quit().success());
}
