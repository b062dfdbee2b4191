//! More of the `serve` daemon for the long-run and capability tests (beside [`crate::serve`]):
//! started from any command (as root, or through `setpriv` as another user), /metrics scraped
//! in-process (no curl per scrape: a thousand scrapes), a log line waited for from a given
//! point on (the same line comes again after each reload), and the daemon's /proc figures.
use crate::proc::{self, Lines};
use crate::serve::{parse, Daemon, Metrics};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `cmd` (a `usdt-trace serve --config FILE`, possibly behind `setpriv`).
pub fn start(cmd: &mut Command) -> Daemon {
    let mut child = proc::spawn(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let stderr = Lines::new(child.stderr.take().expect("stderr"));
    Daemon {
        child,
        stderr,
        log: Vec::new(),
    }
}

/// Reads the daemon's stderr until a line from index `from` on satisfies `pred`; returns
/// its index. Panics with the log, naming `what`, after `timeout`.
pub fn wait_log_from(
    d: &mut Daemon,
    from: usize,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&str) -> bool,
) -> usize {
    if let Some(i) = d.log.iter().skip(from).position(|l| pred(l)) {
        return from + i;
    }
    let (lines, hit) = d.stderr.until(Instant::now() + timeout, |l| pred(l));
    d.log.extend(lines);
    assert!(
        hit,
        "no {what} on the daemon's stderr within {timeout:?}: {:#?}",
        d.log
    );
    d.log.len() - 1
}

/// GET /metrics from `addr` (host:port) on a new connection; panics on anything but a 200
/// within `timeout`.
pub fn scrape(addr: &str, timeout: Duration) -> Metrics {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(timeout)).expect("timeout");
    s.set_write_timeout(Some(timeout)).expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .expect("send request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("reading /metrics from {addr}: {e}"));
    let raw = String::from_utf8(raw).expect("utf-8 exposition");
    let (head, body) = raw.split_once("\r\n\r\n").expect("HTTP head");
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "/metrics answered {head:?}"
    );
    Metrics {
        samples: parse(body),
        text: body.to_string(),
    }
}

/// The one sample of `name` with these labels, or None when there is none (panics when
/// there are several).
pub fn get(m: &Metrics, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let f = m.find(name, want);
    assert!(f.len() <= 1, "{name} {want:?}: {f:?}");
    f.first().map(|s| s.value)
}

/// A line of /proc/PID/status (`VmRSS:` ...) as its number (kB for sizes).
pub fn status_field(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Resident memory, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmRSS:")
}

/// Open file descriptors.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fd dir")
        .count()
}

/// Threads.
pub fn thread_count(pid: u32) -> u64 {
    status_field(pid, "Threads:")
}

/// utime + stime, in clock ticks (/proc/PID/stat).
pub fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let f: Vec<&str> = s
        .rsplit_once(')')
        .expect("stat")
        .1
        .split_whitespace()
        .collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

extern "C" {
    fn sysconf(name: i32) -> i64;
}

/// Clock ticks per second (the unit of [`cpu_ticks`]).
pub fn clk_tck() -> u64 {
    const SC_CLK_TCK: i32 = 2;
    // SAFETY: sysconf only reads a system constant; an unknown name returns -1.
    let t = unsafe { sysconf(SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Writes `text` to `path` through a temporary file and a rename, so that the daemon never
/// reads half a file.
pub fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write config");
    std::fs::rename(&tmp, path).expect("rename config");
}
