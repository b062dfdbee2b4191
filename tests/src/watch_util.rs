//! Helpers for the `watch_*` end-to-end tests: `list --json`, interactive targets driven over
//! stdin, and small assertions on records.

use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crate::proc::{self, Lines};
use crate::watch::{run, Output};

/// How long a target may take to answer one command.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// `usdt-trace list --json PATH`: one JSON object per site.
pub fn list_json(path: &Path) -> Vec<Value> {
    let path_str = path.to_str().expect("UTF-8 path");
    let out = run(&["list", "--json", path_str]);
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
    lines: Lines,
}

impl Target {
    /// Spawns `bin args...` and waits for its first stdout line (the program's "ready").
    pub fn spawn(bin: &Path, args: &[&str]) -> (Target, String) {
        let mut child = proc::spawn(
            Command::new(bin)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
        );
        let lines = Lines::new(child.stdout.take().expect("stdout"));
        let stdin = child.stdin.take();
        let mut t = Target {
            child,
            stdin,
            lines,
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
        let pid = self.pid();
        self.lines
            .expect_within(REPLY_TIMEOUT, &format!("target {pid}"))
    }

    /// Closes stdin and waits for exit.
    pub fn quit(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        proc::wait_within(&mut self.child, REPLY_TIMEOUT)
            .unwrap_or_else(|| panic!("target {} did not exit after stdin closed", self.pid()))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.stdin.take());
        proc::kill_and_reap(&mut self.child);
    }
}

/// The one error line of a failed run: asserts non-zero exit, no panic, and exactly one line
/// that starts with `usdt-trace: error:` (and, after a usage error, a `hint:`). Returns it.
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
    // One error line; a usage error (exit 2) adds one `hint:` line naming the --help to read.
    let lines: Vec<&str> = stderr.lines().collect();
    let hint = lines.len() == 2 && lines[1].starts_with("hint: ");
    assert!(
        lines.len() == 1 || hint,
        "expected exactly one stderr line (and at most one hint), got: {stderr:?}"
    );
    assert!(
        lines[0].starts_with("usdt-trace: error:"),
        "unexpected stderr: {stderr:?}"
    );
    lines[0].to_string()
}

/// The one way to build a C test program, here for the watch tests' imports. It needs no
/// lock: a build publishes with a hard link that never replaces a file a test may already be
/// tracing (see [`crate::testprogs`]).
pub use crate::testprogs::{build_c, build_shared};
