//! C semaphores (sys/sdt.h, `.probes`): 0 before attach, raised while attached (for processes
//! started before and after attach; N sites sharing one semaphore count N), 0 after watch exits.
use usdt_trace_tests::watch_util::{build_c, Target};
use usdt_trace_tests::{scenarios, watch};

#[test]
#[ignore = "needs root"]
fn c_semaphores_zero_before_raised_during_zero_after() {
    // Its own flags: a binary (inode) no other test in this process attaches to.
    let bin = build_c("watch_sema", &["-O2"]);
    scenarios::semaphores_zero_raised_zero(&bin, &[], |_| {});
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
    scenarios::sema_back_to_zero(&mut a);
    assert_eq!(out.events().len(), 3, "{:?}", out.records);
    assert!(out.events().iter().all(|e| e["pid"] == a.pid() as u64));
    assert!(a.quit().success());
    assert!(b.quit().success());
}
