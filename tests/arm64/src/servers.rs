//! The demo servers on arm64 (`demo-httpserver`, Rust on tokio/hyper; `demo-httpserver-c`,
//! forking C), each serving a document root made here on loopback under `watch --json`: the
//! Rust server by `-p PID`; the C server, which serves each connection in a forked child, by
//! its file (every process running it: `-p` names one process, not its children). The runner
//! sends requests one after another (GETs of files of distinct sizes, one path over 300 bytes,
//! one non-ASCII path sent percent-encoded, a missing file, a POST) and keeps each answer. The
//! answers are the oracle: one `request` and one `send_message` span per request, in the
//! order sent, each with the status and the body bytes the client received (the size names
//! the file, so the path served), inside the wall time the client saw; the ids as each server
//! makes them (the C server's carry the pid of the child that served).
//!
//! Probes (provider `httpserver`): `request__start(span id, 0, request id)`,
//! `request__end(span id, status, bytes)`, `send_message__start(span id, parent span id,
//! request id)`, `send_message__end(span id, bytes)`.

use crate::{check, json_lines, of_type, summary, tracer_background, u, wait_until, Background};
use crate::{kill, PROGS, TIMEOUT};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Requests per server.
const N: usize = 28;

/// The files served: (path as sent, file under the root, size). Sizes distinct, so a span's
/// bytes say which path it served.
fn files() -> Vec<(String, String, usize)> {
    let long_dir = "d".repeat(120);
    let long_name = format!("{}.txt", "long-file-name-".repeat(12));
    vec![
        ("/".into(), "index.html".into(), 611),
        ("/a.txt".into(), "a.txt".into(), 1),
        ("/big.bin".into(), "big.bin".into(), 150_001),
        (
            format!("/{long_dir}/{long_name}"),
            format!("{long_dir}/{long_name}"),
            4_097,
        ),
        (
            // "/été-日本.txt", percent-encoded UTF-8 as a client sends it.
            "/%C3%A9t%C3%A9-%E6%97%A5%E6%9C%AC.txt".into(),
            "été-日本.txt".into(),
            333,
        ),
    ]
}

/// A document root under /tmp with [`files`], each filled with a pattern of its own size.
fn make_root(dir: &str) -> Result<(), String> {
    for (_, rel, size) in files() {
        let path = format!("{dir}/{rel}");
        if let Some((parent, _)) = path.rsplit_once('/') {
            std::fs::create_dir_all(parent).map_err(|e| format!("{parent}: {e}"))?;
        }
        let body: Vec<u8> = (0..size).map(|i| b"0123456789abcdef\n"[i % 17]).collect();
        std::fs::write(&path, body).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}

/// CLOCK_MONOTONIC, the clock of the spans' timestamps (bpf_ktime_get_ns).
fn mono_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clk: i32, ts: *mut Timespec) -> i32;
    }
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer; 1 is CLOCK_MONOTONIC.
    unsafe { clock_gettime(1, &mut ts) };
    ts.sec as u64 * 1_000_000_000 + ts.nsec as u64
}

/// What one request was and what the client got.
struct Exchange {
    raw: String,
    want_status: u16,
    /// The file's bytes for a 200.
    want_body: Option<Vec<u8>>,
    status: u16,
    body_len: u64,
    /// CLOCK_MONOTONIC before connecting and after the server closed.
    t0: u64,
    t1: u64,
}

/// A planned request: (raw request, expected status, the file's bytes for a 200).
type Planned = (String, u16, Option<Vec<u8>>);

/// The request plan: the files in turn, a missing file every 7th, a POST every 11th.
fn plan(root: &str) -> Result<Vec<Planned>, String> {
    let files = files();
    let get = |p: &str| format!("GET {p} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    (0..N)
        .map(|i| {
            Ok(match i % 11 {
                _ if i % 7 == 6 => (get("/no/such/file.html"), 404, None),
                10 => (
                    "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
                    405,
                    None,
                ),
                _ => {
                    let (path, rel, _) = &files[i % files.len()];
                    let f = format!("{root}/{rel}");
                    let body = std::fs::read(&f).map_err(|e| format!("{f}: {e}"))?;
                    (get(path), 200, Some(body))
                }
            })
        })
        .collect()
}

/// Sends `raw` on a connection of its own and reads to the server's close.
fn exchange(port: u16, raw: &str) -> Result<(u16, Vec<u8>, u64, u64), String> {
    let t0 = mono_ns();
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok();
    s.write_all(raw.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).map_err(|e| format!("read: {e}"))?;
    let t1 = mono_ns();
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no header end in {:?}", String::from_utf8_lossy(&buf)))?;
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok((status, buf[end + 4..].to_vec(), t0, t1))
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The Rust server: one process, traced with `-p PID`.
pub fn servers_rust() -> Result<String, String> {
    check_server("demo-httpserver", 18081, true)
}

/// The C server forks a child per connection, which serves the request and fires the probes:
/// `-p` traces only the process named (not its children), so the file is traced, every
/// process running it (as tests/tests/demo_watch.rs does on x86_64).
pub fn servers_c() -> Result<String, String> {
    check_server("demo-httpserver-c", 18082, false)
}

fn check_server(name: &str, port: u16, by_pid: bool) -> Result<String, String> {
    let root = format!("/tmp/www-{name}");
    make_root(&root)?;
    let bin = format!("{PROGS}/{name}");
    let server = Server(
        Command::new(&bin)
            .args(["--port", &port.to_string(), "--root", &root])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{bin}: {e}"))?,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        check(Instant::now() < deadline, || {
            format!("{name}: not listening on {port}")
        })?;
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = server.0.id().to_string();
    let mut args = vec!["watch", "--json"];
    if by_pid {
        args.extend(["-p", &pid]);
    }
    args.extend([bin.as_str(), "httpserver:*"]);
    let Background {
        child: mut w,
        out: wout,
        attached,
    } = tracer_background(&args)?;
    let run = attached.and_then(|_| {
        let t = Instant::now();
        let mut done = Vec::new();
        for (raw, want_status, want_body) in plan(&root)? {
            let (status, body, t0, t1) = exchange(port, &raw)?;
            done.push(Exchange {
                raw,
                want_status,
                want_body,
                status,
                body_len: body.len() as u64,
                t0,
                t1,
            });
            let last = done.last().expect("pushed");
            check(
                status == last.want_status && last.want_body.as_ref().is_none_or(|b| *b == body),
                || {
                    format!(
                        "{name}: {:?} answered {status} with {} bytes, want {} {:?} bytes",
                        last.raw,
                        body.len(),
                        last.want_status,
                        last.want_body.as_ref().map(Vec::len)
                    )
                },
            )?;
        }
        Ok((done, t.elapsed()))
    });
    // Let the last records reach the tracer's reader, then SIGINT: the summary follows.
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on the tracer this function spawned.
    unsafe { kill(w.id() as i32, 2) };
    let st = wait_until(&mut w, Instant::now() + TIMEOUT, "usdt-trace watch -p")?;
    let (done, took) = run?;
    check(st.success(), || format!("watch -p exited {st}"))?;
    let recs = json_lines(
        &wout
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_default(),
    );
    drop(server);
    check_spans(name, &recs, &done)
        .map(|f| format!("{f}; {N} requests in {:.1}s", took.as_secs_f64()))
}

fn check_spans(name: &str, recs: &[Value], done: &[Exchange]) -> Result<String, String> {
    let spans = of_type(recs, "span");
    let mut requests: Vec<&Value> = spans
        .iter()
        .copied()
        .filter(|s| s["name"] == "request")
        .collect();
    let sends: Vec<&Value> = spans
        .iter()
        .copied()
        .filter(|s| s["name"] == "send_message")
        .collect();
    check(
        requests.len() == N && sends.len() == N && spans.len() == 2 * N,
        || {
            format!(
                "{name}: {} request and {} send_message spans of {} for {N} requests",
                requests.len(),
                sends.len(),
                spans.len()
            )
        },
    )?;
    // One request at a time: the spans in start order are the requests in the order sent.
    requests.sort_by_key(|s| s["start_ns"].as_u64().unwrap_or(0));
    let (mut dur_min, mut dur_max, mut slack_min) = (u64::MAX, 0u64, u64::MAX);
    let mut prev_req_id = None;
    for (i, (s, ex)) in requests.iter().zip(done).enumerate() {
        let sid = u(&s["args"][0])?;
        let req_id = u(&s["args"][2])?;
        let start = u(&s["start_ns"])?;
        let dur = u(&s["duration_ns"])?;
        let ok = s["end_args"][0] == s["args"][0]
            && sid != 0
            && s["args"][1] == 0
            && u(&s["end_args"][1])? == ex.status as u64
            && u(&s["end_args"][2])? == ex.body_len;
        check(ok, || {
            format!(
                "{name} request {i} ({:?}): the client got {} with {} bytes; span {s}",
                ex.raw, ex.status, ex.body_len
            )
        })?;
        check(dur > 0 && ex.t0 <= start && start + dur <= ex.t1, || {
            format!(
                "{name} request {i}: span [{start}, {}] outside the client's [{}, {}]: {s}",
                start + dur,
                ex.t0,
                ex.t1
            )
        })?;
        dur_min = dur_min.min(dur);
        dur_max = dur_max.max(dur);
        slack_min = slack_min.min(ex.t1 - ex.t0 - dur);
        // The request ids as each server makes them: the Rust server counts from 1 in the
        // process; the C server's child is (its pid << 32 | its request number), one request
        // per connection here.
        if name == "demo-httpserver-c" {
            check(
                req_id >> 32 == u(&s["pid"])? && req_id & 0xffff_ffff == 1,
                || {
                    format!(
                        "{name} request {i}: request id {req_id:#x} in pid {}",
                        s["pid"]
                    )
                },
            )?;
        } else {
            check(prev_req_id.is_none_or(|p| req_id == p + 1), || {
                format!("{name} request {i}: request id {req_id} after {prev_req_id:?}")
            })?;
        }
        prev_req_id = Some(req_id);
        // Its send_message: parent this span, same request id, same bytes, inside it.
        let send = sends
            .iter()
            .find(|m| m["pid"] == s["pid"] && m["args"][1] == sid)
            .ok_or_else(|| format!("{name} request {i}: no send_message under span {sid}"))?;
        let m_start = u(&send["start_ns"])?;
        let m_end = m_start + u(&send["duration_ns"])?;
        check(
            send["args"][2] == s["args"][2]
                && send["end_args"][0] == send["args"][0]
                && u(&send["end_args"][1])? == ex.body_len
                && start <= m_start
                && m_end <= start + dur,
            || format!("{name} request {i}: send_message {send} for request {s}"),
        )?;
    }
    let sum = summary(recs)?;
    check(
        sum["lost"] == 0 && sum["unmatched"] == 0 && sum["unmatched_end"] == 0,
        || format!("summary {sum}"),
    )?;
    let count = |st: u16| done.iter().filter(|e| e.status == st).count();
    Ok(format!(
        "{N} request + {N} send_message spans = the answers (200 x{}, 404 x{}, 405 x{}; a {}-byte path, a non-ASCII one); durations {:.2}..{:.2} ms, inside the client's wall time by >= {:.2} ms",
        count(200),
        count(404),
        count(405),
        files()[3].0.len(),
        dur_min as f64 / 1e6,
        dur_max as f64 / 1e6,
        slack_min as f64 / 1e6
    ))
}
