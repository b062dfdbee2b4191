//! Semaphores under lld's packed layout (`-z noseparate-code`): the file page holding
//! `.probes` is also mapped by the RELRO segment, and for processes started after attach the
//! kernel raises that copy instead of the real semaphore. `list` flags such sites and `watch`
//! counts the real semaphores itself through /proc/PID/mem (the kernel is given no
//! `ref_ctr_offset` for them), in every process, then lowers them on detach; the kernel log
//! gains no `ref_ctr` or `leaking uprobe` line about the binary.
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;
use usdt_trace_tests::kmsg::{inode, KernelLog};
use usdt_trace_tests::markers::rust_lld_dir;
use usdt_trace_tests::scenarios::{check_sema_events, sema_back_to_zero, sema_becomes};
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, list_json, Target};

/// tests/testprogs/watch_sema.c linked by the rust-lld that ships with rustc, packed.
fn lld_sema_bin(opt: &str) -> PathBuf {
    let dir = rust_lld_dir().expect("rustc ships rust-lld (gcc-ld/ld.lld)");
    let b = format!("-B{}", dir.display());
    build_c(
        "watch_sema",
        &[opt, "-fuse-ld=lld", &b, "-Wl,-z,noseparate-code"],
    )
}

#[test]
fn list_flags_semaphores_on_a_shared_page() {
    let bin = lld_sema_bin("-O2");
    let sites = list_json(&bin);
    assert!(!sites.is_empty());
    for s in &sites {
        assert_eq!(s["semaphore_relro_shared"], json!(true), "{s}");
    }
    let out = watch::run(&["list", bin.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(relro-shared)"), "{text}");
    // GNU ld keeps the data segment on pages of its own: no flag.
    let plain = build_c("watch_sema", &["-O2"]);
    for s in list_json(&plain) {
        assert!(s.get("semaphore_relro_shared").is_none(), "{s}");
    }
}

#[test]
#[ignore = "needs root"]
fn lld_packed_semaphores_raised_in_processes_started_after_attach() {
    let bin = lld_sema_bin("-O1");
    let mut log = KernelLog::start();
    let (mut before, _) = Target::spawn(&bin, &[]);
    assert_eq!(before.ask("sema"), "sema 0 0");

    let mut w = watch::Watch::start(&[bin.to_str().unwrap()]);
    let wpid = w.pid();
    // Started before attach: raised by watch too (the kernel, which would count once per
    // breakpoint here, counts none of these), once per site, before it says it is attached.
    assert_eq!(before.ask("sema"), "sema 1 2");
    // Started after attach: watch finds it within its scan period and raises them.
    let (mut after, _) = Target::spawn(&bin, &[]);
    let raised = sema_becomes(&mut after, "raised", |a, b| a > 0 && b > 0);
    assert_eq!(raised, "sema 1 2");
    assert!(before.ask("fire").starts_with("fired "));
    assert_eq!(after.ask("fire"), raised.replace("sema", "fired"));
    let after_pid = after.pid() as u64;
    assert!(
        w.wait_for(Duration::from_secs(30), |r| r["pid"] == after_pid
            && r["name"] == "two"
            && r["args"][0] == -1),
        "the process started after attach fires its probes"
    );
    let out = w.stop();
    assert!(out.status.success(), "{:?} {}", out.status, out.stderr);
    assert!(
        out.stderr.contains("wsem:one") && out.stderr.contains("lld's packed layout"),
        "{}",
        out.stderr
    );

    sema_back_to_zero(&mut before);
    sema_back_to_zero(&mut after);
    log.assert_clean("lld semaphores", &[inode(&bin)], &[wpid]);

    check_sema_events(&out, &[(&before, 1), (&after, 1)]);
    for t in [before, after] {
        assert!(t.quit().success());
    }
}

/// `-c`: the command starts after attach, so only watch's own raising lets it see its probe.
#[test]
#[ignore = "needs root"]
fn lld_packed_semaphore_raised_in_the_command() {
    let dir = rust_lld_dir().expect("rustc ships rust-lld (gcc-ld/ld.lld)");
    let b = format!("-B{}", dir.display());
    let bin = build_c(
        "sema_wait",
        &["-O2", "-fuse-ld=lld", &b, "-Wl,-z,noseparate-code"],
    );
    assert_eq!(list_json(&bin)[0]["semaphore_relro_shared"], json!(true));
    let mut log = KernelLog::start();
    let w = watch::Watch::start(&["-c", bin.to_str().unwrap()]);
    let wpid = w.pid();
    let out = w.finish();
    log.assert_clean("lld semaphore in the command", &[inode(&bin)], &[wpid]);
    assert!(
        out.status.success(),
        "the command saw its semaphore raised: {:?} {}",
        out.status,
        out.stderr
    );
    let events = out.events();
    assert_eq!(events.len(), 1, "{:?}", out.records);
    assert_eq!(events[0]["name"], "go");
    assert_eq!(events[0]["args"], json!([42, -7]));
}
