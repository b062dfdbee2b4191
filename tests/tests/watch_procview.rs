//! Seeing a process through /proc: a binary replaced on disk while the old process runs (its
//! objects read through `/proc/PID/map_files/...`), and a process in another mount namespace
//! whose binary the host cannot see (read through `/proc/PID/root/...`). Both use `-p PID`
//! without a TARGET, so every object comes from `/proc/PID/maps`.
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, Target};

/// A directory of our own under the temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("usdt-procview-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        TempDir(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The old build: pv:tick(42, seq) at one offset.
fn old_build() -> PathBuf {
    build_c("procview_tick", &["-O2"])
}

/// Another build: pv:tick(7, seq) at another file offset.
fn new_build() -> PathBuf {
    build_c("procview_tick", &["-O2", "-DPAD", "-DTICK_ARG=7"])
}

/// The `path` column of `/proc/PID/maps` lines that mention `needle`.
fn maps_lines(pid: u32, needle: &str) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .expect("read maps")
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// `list --json -p PID` must show pv:tick with the old build's constant 42, under `shown`.
fn check_list(pid: u32, shown: &str) {
    let pid_s = pid.to_string();
    let out = watch::run(&["list", "--json", "-p", &pid_s]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "list -p {pid}: {stderr}");
    let sites: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON ({e}): {l}")))
        .filter(|v: &Value| v["provider"] == "pv")
        .collect();
    assert_eq!(sites.len(), 1, "list -p {pid}: {stdout}\n{stderr}");
    let s = &sites[0];
    assert_eq!(s["name"], "tick");
    assert_eq!(s["path"], shown, "{s}");
    assert_eq!(s["pid"], pid);
    assert_eq!(s["args"], "-4@$42 -8@%rbx", "{s}");
    assert_eq!(s["insn"], "nop", "{s}");
    // The plain listing names the probe too.
    let out = watch::run(&["list", "-p", &pid_s]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("pv:tick"), "{text}");
    assert!(text.contains(shown), "{text}");
}

/// `watch --json -p PID pv:tick` (no TARGET) must see the running process's ticks with 42 and
/// consecutive sequence numbers.
fn check_watch(pid: u32) {
    check_watch_with(pid, None);
}

/// As [`check_watch`]; with `named`, the binary is named as a TARGET, by the path the process
/// sees (which the host may not have).
fn check_watch_with(pid: u32, named: Option<&str>) {
    let pid_s = pid.to_string();
    let mut args = vec!["-p", pid_s.as_str()];
    args.extend(named);
    args.push("pv:tick");
    let mut w = watch::Watch::start(&args);
    // About 50 ticks a second: 10 of them arrive in 0.2 s; the bound only stops a hang.
    let mut n = 0;
    let got = w.wait_for(Duration::from_secs(20), |r| {
        if r["type"] == "event" && r["pid"] == pid {
            n += 1;
        }
        n >= 10
    });
    let out = w.stop();
    assert!(
        got,
        "no ticks from {pid}: {:?}\n{}",
        out.records, out.stderr
    );
    assert!(out.status.success(), "{}", out.stderr);
    let events = out.events();
    assert!(events.len() >= 10, "{:?}", out.records);
    let mut prev: Option<i64> = None;
    for e in &events {
        assert_eq!(e["provider"], "pv");
        assert_eq!(e["name"], "tick");
        assert_eq!(e["pid"], pid);
        assert_eq!(e["tid"], pid);
        assert_eq!(e["args"][0], 42, "{e}");
        let seq = e["args"][1].as_i64().expect("seq");
        if let Some(p) = prev {
            assert_eq!(seq, p + 1, "ticks are consecutive: {e}");
        }
        prev = Some(seq);
    }
    let sum = out.summary();
    assert_eq!(sum["events"], events.len() as u64);
    assert_eq!(sum["lost"], 0);
}

#[test]
#[ignore = "needs root"]
fn binary_replaced_on_disk_old_process_traced_through_map_files() {
    let (old, new) = (old_build(), new_build());
    let dir = TempDir::new("replaced");
    let bin = dir.path().join("procview_tick");
    std::fs::copy(&old, &bin).expect("copy old build");
    let (target, ready) = Target::spawn(&bin, &[]);
    let pid = target.pid();
    assert_eq!(ready, format!("ready {pid}"));
    // Replace the file: the new build goes to a temp name and is renamed over the path, so the
    // running process keeps the old, now unlinked, inode.
    let tmp = dir.path().join(".procview_tick.new");
    std::fs::copy(&new, &tmp).expect("copy new build");
    std::fs::rename(&tmp, &bin).expect("rename over");
    let shown = bin.display().to_string();
    let mapped = maps_lines(pid, &shown);
    assert!(
        !mapped.is_empty() && mapped.iter().all(|l| l.ends_with(" (deleted)")),
        "{mapped:?}"
    );
    check_list(pid, &format!("{shown} (deleted)"));
    check_watch(pid);
    assert!(target.quit().success());
}

#[test]
#[ignore = "needs root"]
fn process_in_another_mount_namespace_traced_through_proc_root() {
    let old = old_build();
    let dir = TempDir::new("mntns");
    // An empty directory on the host; inside the namespace a tmpfs holding the binary.
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir mnt");
    let script =
        r#"mount -t tmpfs none "$1" && cp "$2" "$1/procview_tick" && exec "$1/procview_tick""#;
    let (target, ready) = Target::spawn(
        Path::new("unshare"),
        &[
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            mnt.to_str().unwrap(),
            old.to_str().unwrap(),
        ],
    );
    // unshare and sh both exec, so the child we spawned is the target itself.
    let pid = target.pid();
    assert_eq!(ready, format!("ready {pid}"));
    let inner = mnt.join("procview_tick");
    let shown = inner.display().to_string();
    assert!(!inner.exists(), "the host must not see {shown}");
    let mapped = maps_lines(pid, &shown);
    assert!(
        !mapped.is_empty() && mapped.iter().all(|l| l.ends_with(&shown)),
        "{mapped:?}"
    );
    check_list(pid, &shown);
    check_watch(pid);
    // Named as the process sees it: found through its mappings, though the host has no such
    // file.
    check_watch_with(pid, Some(&shown));
    assert!(target.quit().success());
}

#[test]
#[ignore = "needs root"]
fn a_target_the_process_does_not_map_is_said_not_silently_traced() {
    let old = old_build();
    let (target, ready) = Target::spawn(&old, &[]);
    let pid = target.pid();
    assert_eq!(ready, format!("ready {pid}"));
    let pid_s = pid.to_string();
    // A file that exists but that the process does not map: traced (it may load it later),
    // with a warning that says so.
    let other = new_build();
    let mut w = watch::Watch::start(&["-p", &pid_s, other.to_str().unwrap(), "pv:tick"]);
    std::thread::sleep(Duration::from_millis(300));
    let _ = w.wait_for(Duration::from_millis(100), |_| false);
    let out = w.stop();
    assert!(
        out.stderr.contains("is not mapped by process"),
        "{}",
        out.stderr
    );
    assert_eq!(out.summary()["events"], 0, "{:?}", out.records);
    // A path that neither the host nor the process has: an error, one line.
    let out = watch::run(&["watch", "-p", &pid_s, "/nonexistent/usdt/app"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("/nonexistent/usdt/app is not mapped by process"),
        "{err}"
    );
    assert!(target.quit().success());
}
