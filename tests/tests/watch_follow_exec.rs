//! A deploy loses no span: `watch PATH` follows the path, a new build is renamed over it and
//! started at once with its work already waiting (`tests/testprogs/follow_load.c` reads "400"
//! and makes 400 spans in well under a millisecond). Before, the new file was found by a look
//! every second and all 400 spans were lost; now the kernel stops the process at its exec
//! until its file is attached, and every span of it is traced. The process is let go (its
//! output and exit status are its own), and the run says for how long it was held.
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use usdt_trace_tests::proc;
use usdt_trace_tests::watch::Watch;
use usdt_trace_tests::watch_util::build_c;

/// The process name: at most 15 bytes, as the kernel keeps it.
const NAME: &str = "usdtexechold";

/// Renames a copy of `from` over `to`, the way deploys do (a new inode at the same path).
fn deploy(from: &Path, to: &Path) {
    let tmp = to.with_extension("new");
    std::fs::copy(from, &tmp).expect("copy");
    std::fs::rename(&tmp, to).expect("rename");
}

/// Starts `bin` with `n` already on its stdin and waits for it: its pid and its output.
fn run_at_once(bin: &Path, n: u32) -> (u32, String) {
    let mut child = proc::spawn(
        Command::new(bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let pid = child.id();
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{n}").expect("write");
    drop(stdin);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut out)
        .expect("read");
    let status = proc::wait_within(&mut child, Duration::from_secs(30));
    assert!(status.is_some_and(|s| s.success()), "pid {pid}: {status:?}");
    (pid, out)
}

#[test]
#[ignore = "needs root"]
fn a_new_build_started_at_once_loses_no_span() {
    let dir = std::env::temp_dir().join(format!("usdt-exec-hold-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(NAME);
    let first = build_c("follow_load", &["-DVARIANT=3"]);
    let second = build_c("follow_load", &["-DVARIANT=41"]);
    let third = build_c("follow_load", &["-DVARIANT=11"]);
    deploy(&first, &path);
    let mut w = Watch::start(&[path.to_str().unwrap()]);
    let mut pids = Vec::new();
    // Three deploys, each started the moment it is in place.
    for build in [&second, &third, &first] {
        deploy(build, &path);
        let (pid, out) = run_at_once(&path, 400);
        assert_eq!(out.trim(), "done 400");
        pids.push(pid);
        let held = w.wait_stderr(Duration::from_secs(30), |l| {
            l.starts_with(&format!("Held pid {pid} "))
        });
        let Some(held) = held else {
            let out = w.stop();
            panic!("no hold said for pid {pid}:\n{}", out.stderr);
        };
        eprintln!("{held}");
    }
    // Every span of every process, each process's own.
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    for &pid in &pids {
        let n = out
            .spans()
            .iter()
            .filter(|s| s["pid"] == pid && s["name"] == "job")
            .count();
        assert_eq!(
            n, 400,
            "pid {pid}: spans of a process started at its deploy\n{}",
            out.stderr
        );
    }
    assert_eq!(out.summary()["lost"], 0);
    let _ = std::fs::remove_dir_all(&dir);
}
