//! A traced file overwritten in place (same inode: `cp` over it) keeps its uprobes at offsets
//! that may be mid-instruction in the new content; watch must say so at once.
use std::time::Duration;
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::build_c;

#[test]
#[ignore = "needs root"]
fn a_traced_file_overwritten_in_place_is_reported() {
    let built = build_c("watch_smoke", &["-O2"]);
    let dir = std::env::temp_dir().join(format!("usdt-modified-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("prog");
    std::fs::copy(&built, &bin).unwrap();
    let w = watch::Watch::start(&[bin.to_str().unwrap()]);
    // Overwrite in place: truncate and write, as `cp` does; the inode stays.
    let mut content = std::fs::read(&built).unwrap();
    content.extend_from_slice(b"changed");
    std::fs::write(&bin, &content).unwrap();
    // watch looks about once a second.
    std::thread::sleep(Duration::from_millis(2500));
    let out = w.stop();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("was modified in place while traced"),
        "{}",
        out.stderr
    );
}
