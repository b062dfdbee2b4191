//! A traced file overwritten in place (same inode: `cp` over it) keeps its uprobes at offsets
//! that may be mid-instruction in the new content; watch must say so at once.
use std::process::{Command, Stdio};
use std::time::Duration;
use usdt_trace_tests::proc::{self, Lines};
use usdt_trace_tests::watch::usdt_trace_bin;
use usdt_trace_tests::watch_util::build_c;

#[test]
#[ignore = "needs root"]
fn a_traced_file_overwritten_in_place_is_reported() {
    let built = build_c("watch_smoke", &["-O2"]);
    let dir = std::env::temp_dir().join(format!("usdt-modified-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("prog");
    std::fs::copy(&built, &bin).unwrap();
    let mut c = Command::new(usdt_trace_bin());
    c.args(["watch", "--json", bin.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut w = proc::spawn(&mut c);
    let mut err = Lines::new(w.stderr.take().unwrap());
    let attached = err.expect_within(Duration::from_secs(60), "Attached line");
    assert!(attached.starts_with("Attached"), "{attached}");
    // Overwrite in place: truncate and write, as `cp` does; the inode stays.
    let mut content = std::fs::read(&built).unwrap();
    content.extend_from_slice(b"changed");
    std::fs::write(&bin, &content).unwrap();
    // watch looks about once a second; the bound only stops a hang on a loaded machine.
    let line = err.expect_within(Duration::from_secs(30), "the modified-file warning");
    proc::signal(w.id(), 2);
    let status = proc::wait_within(&mut w, Duration::from_secs(30));
    if status.is_none() {
        proc::kill_and_reap(&mut w);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        line.contains("was modified in place while traced"),
        "{line}"
    );
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

/// Overwritten in place with content whose code is where it was (the same build, with bytes
/// appended): probes left attached would go on firing in the new file's runs, which is how one
/// can tell that they were detached.
#[test]
#[ignore = "needs root"]
fn a_traced_file_overwritten_in_place_is_detached_at_once() {
    use usdt_trace_tests::watch::Watch;
    let built = build_c("watch_smoke", &["-O2"]);
    let dir = std::env::temp_dir().join(format!("usdt-detached-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("prog");
    std::fs::copy(&built, &bin).unwrap();
    let b = bin.to_str().unwrap();
    let mut w = Watch::start(&[b]);
    let run = || {
        let out = Command::new(&bin).arg("3").output().unwrap();
        assert!(out.status.success(), "{:?}", out.status);
    };
    // Traced: 3 spans and 3 ticks.
    run();
    assert!(w.wait_for(Duration::from_secs(20), |r| r["name"] == "tick"
        && r["args"][0] == 6));
    let mut content = std::fs::read(&built).unwrap();
    content.extend_from_slice(b"changed");
    let written = std::time::Instant::now();
    std::fs::write(&bin, &content).unwrap();
    let line = w
        .wait_stderr(Duration::from_secs(20), |l| l.contains("modified in place"))
        .expect("the modified-file warning");
    // At the write, not at the next once-a-second look.
    let took = written.elapsed();
    assert!(took < Duration::from_millis(500), "{took:?}");
    assert_eq!(
        line,
        format!("warning: {b} was modified in place while traced: its 3 probe sites are detached (they sat at the old offsets, which in the new content may be mid-instruction); the new content is not traced: run watch again to trace it")
    );
    // The new content runs untouched: nothing recorded from it.
    run();
    let out = w.stop();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.spans().len(), 3, "{:?}", out.records);
    assert_eq!(out.events().len(), 3, "{:?}", out.records);
    assert_eq!(out.summary()["spans"], 3, "{}", out.summary());
}
