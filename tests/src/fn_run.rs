//! Programs run untraced and then under `watch TARGET 'fn:*'`, for the tests that prove function
//! probes harmless (`watch_fn_safety`, `watch_fn_unwind`): what each run printed and how it
//! ended, watch's NDJSON records, and a throwaway redis-server.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::proc::{self, output_within, RUN_TIMEOUT};
use crate::watch::usdt_trace_bin;

/// What a run printed and how it ended.
#[derive(Debug, PartialEq, Eq)]
pub struct Run {
    pub stdout: String,
    pub code: Option<i32>,
}

/// Runs `argv` untraced.
pub fn plain(argv: &[&str]) -> Run {
    let out = output_within(Command::new(argv[0]).args(&argv[1..]), RUN_TIMEOUT);
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        code: out.status.code(),
    }
}

/// A directory of its own for one run: the tests of a file run at once.
pub fn scratch_dir(what: &str) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "usdt-{what}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `watch TARGET PATTERNS... -c ARGV`: the program's own run, watch's records (written with
/// `-o` so that stdout is the program's alone), and watch's stderr (the program's included).
pub fn traced(
    target: &str,
    patterns: &[&str],
    extra: &[&str],
    argv: &[&str],
) -> (Run, Vec<Value>, String) {
    traced_within(target, patterns, extra, argv, RUN_TIMEOUT)
}

/// [`traced`] with a bound of its own on the whole run (attaching included).
pub fn traced_within(
    target: &str,
    patterns: &[&str],
    extra: &[&str],
    argv: &[&str],
    timeout: Duration,
) -> (Run, Vec<Value>, String) {
    let dir = scratch_dir("fn-safety");
    let rec = dir.join(format!(
        "{}.ndjson",
        patterns.join("_").replace(['/', '*', ':'], "_")
    ));
    let cmd = argv
        .iter()
        .map(|a| shlex_quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    let mut c = Command::new(usdt_trace_bin());
    c.arg("watch")
        .arg("--json")
        .arg("-o")
        .arg(&rec)
        .args(extra)
        .arg(target)
        .args(patterns)
        .arg("-c")
        .arg(cmd);
    let out = output_within(&mut c, timeout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let records: Vec<Value> = std::fs::read_to_string(&rec)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    (
        Run {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            code: out.status.code(),
        },
        records,
        stderr,
    )
}

/// `s` quoted for the shell that `watch -c` runs.
pub fn shlex_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-=".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The span records named `name`.
pub fn spans<'a>(recs: &'a [Value], name: &str) -> Vec<&'a Value> {
    recs.iter()
        .filter(|r| r["type"] == "span" && r["name"] == name)
        .collect()
}

/// The run's summary record.
pub fn summary(recs: &[Value]) -> &Value {
    recs.iter()
        .find(|r| r["type"] == "summary")
        .expect("a summary record")
}

/// `NAME=INTEGER` from a line a test program printed (`calls=121000 jumped=40000 ...`).
pub fn field(line: &str, name: &str) -> i64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
        .parse()
        .unwrap_or_else(|e| panic!("{name} in {line:?}: {e}"))
}

pub const REDIS_SERVER: &str = "/usr/bin/redis-server";

/// A throwaway redis-server (no persistence) on its own port, killed however the test ends.
pub struct Redis {
    pub child: Child,
    pub port: u16,
}

impl Redis {
    /// Starts one on a port nobody holds and waits (20 s at most) until it answers PING.
    ///
    /// The port is one the kernel just handed out and we let go of; a server that still
    /// cannot bind it (another program took it in between) exits, and the next try takes
    /// another port. What the server printed is kept for the failure message: a fixed
    /// port derived from the test's pid once collided in CI and the test only said "did not
    /// start".
    pub fn start() -> Redis {
        assert!(
            Path::new(REDIS_SERVER).exists(),
            "redis-server missing: run scripts/setup.sh"
        );
        let dir = scratch_dir("redis");
        let mut last = String::new();
        for attempt in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let log = dir.join(format!("redis-{attempt}.log"));
            let out = std::fs::File::create(&log).unwrap();
            let child = proc::spawn(
                Command::new(REDIS_SERVER)
                    .args([
                        "--port",
                        &port.to_string(),
                        "--bind",
                        "127.0.0.1",
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                        "--daemonize",
                        "no",
                    ])
                    .stdin(Stdio::null())
                    .stdout(out.try_clone().unwrap())
                    .stderr(out),
            );
            let mut r = Redis { child, port };
            let t0 = Instant::now();
            loop {
                if r.cli(&["ping"]).trim() == "PONG" {
                    return r;
                }
                if let Ok(Some(status)) = r.child.try_wait() {
                    last = format!(
                        "redis-server on port {port} ended ({status}): {}",
                        std::fs::read_to_string(&log).unwrap_or_default().trim()
                    );
                    break;
                }
                assert!(
                    t0.elapsed().as_secs() < 20,
                    "redis did not answer PING on port {port} in 20 s: {}",
                    std::fs::read_to_string(&log).unwrap_or_default().trim()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("redis did not start in 5 tries; the last: {last}");
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `redis-cli -p PORT ARGS...`: its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let p = self.port.to_string();
        String::from_utf8_lossy(
            &output_within(
                Command::new("redis-cli").args(["-p", &p]).args(args),
                RUN_TIMEOUT,
            )
            .stdout,
        )
        .into_owned()
    }

    /// Every line of `script` as one command (redis-cli's own quoting), on one connection, in
    /// order; the replies as `redis-cli --no-raw` prints them.
    pub fn cli_script(&self, script: &str) -> String {
        let dir = scratch_dir("redis-cli");
        let file = dir.join("commands");
        std::fs::write(&file, script).unwrap();
        let out = output_within(
            Command::new("sh").arg("-c").arg(format!(
                "exec redis-cli --no-raw -p {} < {}",
                self.port,
                file.display()
            )),
            RUN_TIMEOUT,
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "redis-cli: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        proc::kill_and_reap(&mut self.child);
    }
}
