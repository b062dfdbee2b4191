//! Run `usdt-trace watch --json` against real processes from a test.
//!
//! [`Watch::start`] spawns the CLI, waits for its `Attached ...` readiness line on stderr (so
//! the probes are live before the test starts its target), and collects stdout. [`Watch::stop`]
//! sends SIGINT, waits for exit, and returns every JSON record, the summary included.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The `usdt-trace` binary built next to the running test (`cargo build` puts it in the same
/// profile directory as the test executables' `deps/`).
pub fn usdt_trace_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    let bin = dir.join("usdt-trace");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build -p usdt-trace, or scripts/test.sh)",
        bin.display()
    );
    bin
}

/// True when running as root (the e2e tests need it: CI runs as root).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Skip (return early) unless root. Tests print why, so a non-root run is not silently green.
#[macro_export]
macro_rules! require_root {
    () => {
        if !$crate::watch::is_root() {
            eprintln!("skipped: needs root (CAP_BPF + CAP_PERFMON)");
            return;
        }
    };
}

pub struct Watch {
    child: Child,
    stdout: mpsc::Receiver<String>,
    pub attached_line: String,
    stderr_rest: std::thread::JoinHandle<String>,
}

/// Output of a finished `watch`.
#[derive(Debug)]
pub struct Output {
    pub records: Vec<Value>,
    pub stderr: String,
    pub status: std::process::ExitStatus,
}

impl Output {
    pub fn of_type<'a>(&'a self, t: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.records.iter().filter(move |r| r["type"] == t)
    }
    pub fn spans(&self) -> Vec<&Value> {
        self.of_type("span").collect()
    }
    pub fn events(&self) -> Vec<&Value> {
        self.of_type("event").collect()
    }
    pub fn summary(&self) -> &Value {
        self.of_type("summary").last().expect("a summary record")
    }
}

impl Watch {
    /// Start `usdt-trace watch --json ARGS...` and wait until it is attached.
    pub fn start(args: &[&str]) -> Watch {
        Self::start_with(args, true)
    }

    pub fn start_with(args: &[&str], json: bool) -> Watch {
        let mut cmd = Command::new(usdt_trace_bin());
        cmd.arg("watch");
        if json {
            cmd.arg("--json");
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn usdt-trace");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let attached_line;
        let mut early = String::new();
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap_or(0) == 0 {
                let status = child.wait().expect("wait");
                panic!("usdt-trace exited ({status}) before attaching: {early}");
            }
            if line.starts_with("Attached") {
                attached_line = line.trim_end().to_string();
                break;
            }
            early.push_str(&line);
        }
        let stderr_rest = std::thread::spawn(move || {
            let mut s = early;
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Watch {
            child,
            stdout: rx,
            attached_line,
            stderr_rest,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait until `pred` holds for some stdout record, or `timeout` passes; returns the records
    /// seen so far (they are also kept for [`Watch::stop`]).
    pub fn wait_for(&mut self, timeout: Duration, mut pred: impl FnMut(&Value) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        let mut ok = false;
        while Instant::now() < deadline {
            match self.stdout.recv_timeout(Duration::from_millis(20)) {
                Ok(line) => {
                    if let Ok(v) = serde_json::from_str::<Value>(&line) {
                        if pred(&v) {
                            ok = true;
                        }
                    }
                    seen.push(line);
                    if ok {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => break,
            }
        }
        // Put them back in order for stop().
        let (tx, rx) = mpsc::channel();
        for l in seen {
            let _ = tx.send(l);
        }
        while let Ok(l) = self.stdout.try_recv() {
            let _ = tx.send(l);
        }
        let old = std::mem::replace(&mut self.stdout, rx);
        std::thread::spawn(move || {
            while let Ok(l) = old.recv() {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        ok
    }

    /// SIGINT, wait for exit, parse every line (each must be valid JSON).
    pub fn stop(self) -> Output {
        // SAFETY: signalling our own child.
        unsafe { libc_kill(self.child.id() as i32, 2) };
        self.finish()
    }

    /// Wait for a `watch` that ends by itself (-c, --duration).
    pub fn finish(mut self) -> Output {
        let status = self.child.wait().expect("wait");
        let mut records = Vec::new();
        while let Ok(line) = self.stdout.recv_timeout(Duration::from_secs(5)) {
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("invalid JSON line from watch ({e}): {line}"));
            records.push(v);
        }
        let stderr = self.stderr_rest.join().unwrap_or_default();
        Output {
            records,
            stderr,
            status,
        }
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Run `usdt-trace ARGS...` to completion (for commands that end by themselves).
pub fn run(args: &[&str]) -> std::process::Output {
    Command::new(usdt_trace_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run usdt-trace")
}
