//! Helpers for the `watch_*` end-to-end tests: `list --json`, interactive targets driven over
//! stdin, and small assertions on records.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::watch::{usdt_trace_bin, Output};

/// `usdt-trace list --json PATH`: one JSON object per site.
pub fn list_json(path: &Path) -> Vec<Value> {
    let out = Command::new(usdt_trace_bin())
        .args(["list", "--json"])
        .arg(path)
        .output()
        .expect("run usdt-trace list");
    assert!(
        out.status.success(),
        "list --json {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON ({e}): {l}")))
        .collect()
}

/// Records (spans or events) named `name`.
pub fn named<'a>(recs: &[&'a Value], name: &str) -> Vec<&'a Value> {
    recs.iter().copied().filter(|r| r["name"] == name).collect()
}

/// Every span's and event's pid.
pub fn pids(out: &Output) -> Vec<u64> {
    out.records
        .iter()
        .filter(|r| r["type"] == "span" || r["type"] == "event")
        .map(|r| r["pid"].as_u64().expect("pid"))
        .collect()
}

/// A target process driven line by line: commands go to its stdin, its stdout lines come back.
pub struct Target {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Target {
    /// Spawns `bin args...` and waits for its first stdout line (the program's "ready").
    pub fn spawn(bin: &Path, args: &[&str]) -> (Target, String) {
        let mut child = spawn_retrying_etxtbsy(
            Command::new(bin)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
        )
        .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut t = Target {
            child,
            stdin,
            lines: rx,
        };
        let first = t.line();
        (t, first)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `cmd` and returns the next stdout line.
    pub fn ask(&mut self, cmd: &str) -> String {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{cmd}").expect("write to target");
        stdin.flush().expect("flush");
        self.line()
    }

    /// The next stdout line (panics after 10 s).
    pub fn line(&mut self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(10))
            .expect("target line within 10 s")
    }

    /// Closes stdin and waits for exit.
    pub fn quit(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("target did not exit after stdin closed");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The one stderr line of a failed run: asserts non-zero exit, no panic, and exactly one line
/// that starts with `usdt-trace: error:`. Returns that line.
pub fn single_error_line(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got {:?}; stderr: {stderr}",
        out.status
    );
    assert_eq!(
        out.status.code().map(|c| c != 101),
        Some(true),
        "panic exit? {stderr}"
    );
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "expected exactly one stderr line, got: {stderr:?}"
    );
    assert!(
        lines[0].starts_with("usdt-trace: error:"),
        "unexpected stderr: {stderr:?}"
    );
    lines[0].to_string()
}

/// [`crate::testprogs::build_c`] serialized within this test process. Two tests building the
/// same program at once both rename their output into place, so the second rename swaps the
/// inode under a `watch` the first test already attached; serializing means only one builds.
pub fn build_c(name: &str, extra_args: &[&str]) -> std::path::PathBuf {
    let _g = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    crate::testprogs::build_c(name, extra_args)
}

/// [`crate::testprogs::build_shared`], serialized like [`build_c`].
pub fn build_shared(name: &str, extra_args: &[&str]) -> std::path::PathBuf {
    let _g = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    crate::testprogs::build_shared(name, extra_args)
}

static BUILD_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// [`Watch::stop`](crate::watch::Watch::stop) after a short pause. watch installs its SIGINT
/// handler just after printing the readiness line, so a SIGINT sent at once can kill it
/// (pinned by `watch_signals::bug_sigint_right_after_attached_line_kills_watch`); tests about
/// other things pause so that race does not make them flaky.
pub fn stop(w: crate::watch::Watch) -> Output {
    std::thread::sleep(Duration::from_millis(100));
    w.stop()
}

/// Spawn, retrying while the executable is "busy".
///
/// Regression (binary_replaced_on_disk... failed with ETXTBSY): a test that has just written an
/// executable can't run it while a child forked at the same moment by another test thread
/// still holds an inherited (close-on-exec, but not yet exec'd) descriptor of the file open
/// for writing. That lasts only until the child execs, so a short retry is the fix.
pub fn spawn_retrying_etxtbsy(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(26) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}
