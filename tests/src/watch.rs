//! Run `usdt-trace watch --json` against real processes from a test.
//!
//! [`Watch::start`] spawns the CLI, waits for its `Attached ...` readiness line on stderr (so
//! the probes are live before the test starts its target), and collects stdout. [`Watch::stop`]
//! sends SIGINT, waits for exit, and returns every JSON record, the summary included.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::proc::{self, Lines, NoLine};

/// How long attaching may take (it parses the targets and loads the eBPF programs; slow on a
/// loaded machine, never minutes).
const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a run may take to end after SIGINT, or by itself (-c, --duration).
const EXIT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the output may keep coming after watch has exited.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

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

pub struct Watch {
    child: Child,
    stdout: Lines,
    stderr: Lines,
    pub attached_line: String,
    /// stderr before the readiness line.
    early_stderr: String,
    /// stdout lines [`Watch::wait_for`] has read, kept for [`Watch::finish`].
    seen: Vec<String>,
    /// The machine's steal (`/proc/stat`) when the run started.
    steal_at_start: u64,
}

/// Output of a finished `watch`.
#[derive(Debug)]
pub struct Output {
    pub records: Vec<Value>,
    pub stderr: String,
    pub status: std::process::ExitStatus,
    /// What the hypervisor stole from this machine's vCPUs during the run, all CPUs together
    /// (`/proc/stat`, 10 ms resolution): tests report it, as they cannot command it.
    pub host_steal_ns: u64,
}

/// The steal of all CPUs since boot, from `/proc/stat`'s `cpu` line (its eighth number, in
/// USER_HZ ticks of 10 ms), in ns; 0 when unreadable.
pub fn host_steal_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    stat.lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(8))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |ticks| ticks * 10_000_000)
}

impl Output {
    /// [`Output::host_steal_ns`] in ms.
    pub fn host_steal_ms(&self) -> f64 {
        self.host_steal_ns as f64 / 1e6
    }

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
        Self::start_env(args, json, &[])
    }

    /// As [`Watch::start_with`], with these variables added to watch's environment.
    pub fn start_env(args: &[&str], json: bool, env: &[(&str, &str)]) -> Watch {
        Self::start_full(args, json, env, ATTACH_TIMEOUT)
    }

    /// As [`Watch::start`], allowing `attach` for attaching (`fn:*` on a large program parses
    /// and decodes every function and attaches thousands of probes).
    pub fn start_within(args: &[&str], attach: Duration) -> Watch {
        Self::start_full(args, true, &[], attach)
    }

    fn start_full(args: &[&str], json: bool, env: &[(&str, &str)], attach: Duration) -> Watch {
        let steal_at_start = host_steal_ns();
        let mut cmd = Command::new(usdt_trace_bin());
        cmd.envs(env.iter().copied());
        cmd.arg("watch");
        if json {
            cmd.arg("--json");
        }
        let mut child = proc::spawn(
            cmd.args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let stdout = Lines::new(child.stdout.take().expect("stdout"));
        let mut stderr = Lines::new(child.stderr.take().expect("stderr"));
        let mut early_stderr = String::new();
        let deadline = Instant::now() + attach;
        let attached_line = loop {
            match stderr.next_within(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.starts_with("Attached") => break line,
                Ok(line) => {
                    early_stderr.push_str(&line);
                    early_stderr.push('\n');
                }
                Err(NoLine::Eof) => {
                    let status = proc::wait_within(&mut child, DRAIN_TIMEOUT);
                    proc::kill_and_reap(&mut child);
                    // Tests that attach are #[ignore = "needs root"]; say so to whoever ran
                    // them anyway (--include-ignored) without it.
                    let hint = if proc::is_root() {
                        ""
                    } else {
                        " (not root: attaching needs root)"
                    };
                    panic!("usdt-trace exited ({status:?}) before attaching{hint}: {early_stderr}");
                }
                Err(NoLine::Timeout) => {
                    proc::kill_and_reap(&mut child);
                    panic!("usdt-trace not attached within {attach:?}: {early_stderr}");
                }
            }
        };
        Watch {
            child,
            stdout,
            stderr,
            attached_line,
            early_stderr,
            seen: Vec::new(),
            steal_at_start,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait until `pred` holds for some stdout record, or `timeout` passes (the records read are
    /// kept for [`Watch::stop`]).
    pub fn wait_for(&mut self, timeout: Duration, mut pred: impl FnMut(&Value) -> bool) -> bool {
        let (lines, ok) = self.stdout.until(Instant::now() + timeout, |line| {
            serde_json::from_str::<Value>(line).is_ok_and(|v| pred(&v))
        });
        self.seen.extend(lines);
        ok
    }

    /// Wait until a stderr line satisfies `pred` (e.g. the line saying probes were attached
    /// late), or `timeout` passes; the lines read are kept for [`Watch::finish`].
    pub fn wait_stderr(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let (lines, ok) = self.stderr.until(Instant::now() + timeout, &pred);
        for l in &lines {
            self.early_stderr.push_str(l);
            self.early_stderr.push('\n');
        }
        ok.then(|| lines.last().cloned()).flatten()
    }

    /// SIGINT, wait for exit, parse every line (each must be valid JSON).
    pub fn stop(self) -> Output {
        proc::signal(self.child.id(), 2);
        self.finish()
    }

    /// Wait for a `watch` that ends by itself (-c, --duration), or has been signalled.
    pub fn finish(mut self) -> Output {
        let Some(status) = proc::wait_within(&mut self.child, EXIT_TIMEOUT) else {
            proc::kill_and_reap(&mut self.child);
            let (err, _) = self.stderr.rest_until(Instant::now() + DRAIN_TIMEOUT);
            panic!(
                "usdt-trace watch did not exit within {EXIT_TIMEOUT:?}; stderr:\n{}{}",
                self.early_stderr,
                err.join("\n")
            );
        };
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        let (rest, _) = self.stdout.rest_until(deadline);
        let records = std::mem::take(&mut self.seen)
            .into_iter()
            .chain(rest)
            .map(|line| {
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("invalid JSON line from watch ({e}): {line}"))
            })
            .collect();
        let (err, _) = self.stderr.rest_until(deadline);
        let mut stderr = std::mem::take(&mut self.early_stderr);
        for l in err {
            stderr.push_str(&l);
            stderr.push('\n');
        }
        Output {
            records,
            stderr,
            status,
            host_steal_ns: host_steal_ns().saturating_sub(self.steal_at_start),
        }
    }
}

/// A test that panics while watch runs must not leave it attached.
impl Drop for Watch {
    fn drop(&mut self) {
        proc::kill_and_reap(&mut self.child);
    }
}

/// Run `usdt-trace ARGS...` to completion (for commands that end by themselves).
pub fn run(args: &[&str]) -> std::process::Output {
    proc::output_within(Command::new(usdt_trace_bin()).args(args), proc::RUN_TIMEOUT)
}

/// The time-split fields of a span record, as every exporter carries them.
pub const SPLIT_FIELDS: [&str; 9] = [
    "oncpu_ns",
    "steal_ns",
    "offcpu_ns",
    "runq_ns",
    "sleep_ns",
    "io_ns",
    "idle_ns",
    "polls",
    "threads",
];

/// How the exporters name a span's waker: `COMM PID/TID` from the JSON record's `waker`.
pub fn waker_label(w: &Value) -> String {
    format!(
        "{} {}/{}",
        w["comm"].as_str().unwrap_or("?"),
        w["pid"],
        w["tid"]
    )
}
