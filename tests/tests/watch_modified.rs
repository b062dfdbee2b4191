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
