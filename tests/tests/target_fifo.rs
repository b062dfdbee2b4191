//! A FIFO named as the target of `list` or `watch` is refused at once, for what it is: nothing
//! opens it blocking (the `#!` script check used to, and waited for a writer forever).
use std::process::Command;
use std::time::{Duration, Instant};
use usdt_trace_tests::proc;
use usdt_trace_tests::testprogs;
use usdt_trace_tests::watch::usdt_trace_bin;
use usdt_trace_tests::watch_util::single_error_line;

#[test]
fn a_fifo_target_is_refused_without_blocking() {
    let dir = testprogs::cache_dir().join(format!("target_fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("f");
    let _ = std::fs::remove_file(&fifo);
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // Bare (a file here, like `list prog`), with a path, and as list --functions' file.
    for args in [
        &["list", "f"][..],
        &["list", "./f"],
        &["list", "--functions", "./f"],
        &["watch", "--duration", "1", "f"],
        &["watch", "--duration", "1", "./f"],
    ] {
        let t = Instant::now();
        let out = proc::output_within(
            Command::new(usdt_trace_bin()).args(args).current_dir(&dir),
            Duration::from_secs(30),
        );
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{args:?} took {:?}",
            t.elapsed()
        );
        let e = single_error_line(&out);
        let shown = args.last().unwrap();
        assert_eq!(
            e,
            format!("usdt-trace: error: {shown}: not a regular file (a FIFO)"),
            "{args:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
