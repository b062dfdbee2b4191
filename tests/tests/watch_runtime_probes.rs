//! Probes defined at run time (usdt-markers-dyn through Python's ctypes): the example HTTP
//! server's memfd object is listed by `list -p`, traced by `watch -p` whether it was loaded
//! before or after `watch` started (and again after an unload and a new load), one span per
//! request with the path and the status, and its semaphores read from the process are raised
//! only while traced.
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use usdt_trace_tests::proc::{self, Lines};
use usdt_trace_tests::watch::{self, Watch};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Debian's interpreter, else whatever `python3` is: the module needs nothing but ctypes.
fn python() -> Option<PathBuf> {
    let debian = PathBuf::from("/usr/bin/python3.11");
    if debian.exists() {
        return Some(debian);
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("python3"))
            .find(|p| p.exists())
    })
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../usdt-markers-dyn/python/http_server.py")
}

/// The library `cargo build --workspace` put next to the usdt-trace binary.
fn library() -> PathBuf {
    let lib = watch::usdt_trace_bin().with_file_name("libusdt_markers_dyn.so");
    assert!(
        lib.exists(),
        "{} is missing: cargo build --workspace",
        lib.display()
    );
    lib
}

struct Server {
    child: Child,
    _out: Lines,
    pid: u32,
    port: u16,
    /// request__start's semaphore, when the probes were loaded at start.
    sema: Option<u64>,
}

impl Server {
    fn spawn(py: &PathBuf, lazy: bool) -> Server {
        Self::spawn_as(py, lazy, "pyhttp")
    }

    /// With its own provider name: a test tracing every interpreter by name must not attach
    /// to the other tests' servers (nor they to its).
    fn spawn_as(py: &PathBuf, lazy: bool, provider: &str) -> Server {
        let mut cmd = Command::new(py);
        cmd.arg(script())
            .args(["--port", "0", "--provider", provider]);
        if lazy {
            cmd.arg("--lazy");
        }
        let mut child = proc::spawn(
            cmd.env("USDT_DYN_LIB", library())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
        );
        let mut out = Lines::new(child.stdout.take().expect("stdout"));
        let mut sema = None;
        loop {
            let line = match out.next_within(TIMEOUT) {
                Ok(l) => l,
                Err(e) => {
                    proc::kill_and_reap(&mut child);
                    panic!("no readiness line from the server within {TIMEOUT:?} ({e:?})");
                }
            };
            if let Some(a) = line.strip_prefix("probes loaded semaphore 0x") {
                sema = Some(u64::from_str_radix(a, 16).expect("address"));
            } else if let Some(rest) = line.strip_prefix("listening on ") {
                let (port, pid) = rest.split_once(" pid ").expect("port and pid");
                return Server {
                    pid: pid.parse().expect("pid"),
                    port: port.parse().expect("port"),
                    child,
                    _out: out,
                    sema,
                };
            }
        }
    }

    /// One GET: (status, body).
    fn get(&self, path: &str) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .expect("request");
        let mut resp = String::new();
        s.read_to_string(&mut resp).expect("response");
        let status = resp
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {resp:?}"));
        let body = resp.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, body.to_string())
    }

    /// A 2-byte semaphore read from the process's memory.
    fn sema(&self, addr: u64) -> u16 {
        let mem = std::fs::File::open(format!("/proc/{}/mem", self.pid)).expect("mem");
        let mut b = [0u8; 2];
        mem.read_exact_at(&mut b, addr).expect("read semaphore");
        u16::from_ne_bytes(b)
    }

    fn sema_becomes(&self, addr: u64, want: u16) {
        proc::wait_until(
            &format!("semaphore at {addr:#x} == {want}"),
            TIMEOUT,
            || self.sema(addr) == want,
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        proc::kill_and_reap(&mut self.child);
    }
}

/// (path, status) of every request span of `pid`.
fn request_spans(out: &watch::Output, pid: u32) -> Vec<(String, i64)> {
    out.spans()
        .into_iter()
        .filter(|s| {
            s["pid"] == pid as u64
                && s["provider"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("pyhttp"))
                && s["name"] == "request"
        })
        .map(|s| {
            (
                s["args"][0].as_str().unwrap_or("?").to_string(),
                s["end_args"][0].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

#[test]
#[ignore = "needs root"]
fn python_runtime_probes_are_listed_traced_per_request_and_raised_only_while_traced() {
    let Some(py) = python() else {
        eprintln!("skipped: python3 not installed");
        return;
    };
    let srv = Server::spawn(&py, false);
    let sema = srv.sema.expect("the server loads its probes at start");
    assert_eq!(srv.sema(sema), 0, "not traced yet");
    assert_eq!(srv.get("/untraced").0, 200);

    let list = watch::run(&["list", "-p", &srv.pid.to_string()]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "/memfd:usdt:pyhttp (deleted) (pid {}): 2 sites",
            srv.pid
        )),
        "{text}"
    );
    assert!(text.contains("pyhttp:request__start"), "{text}");
    assert!(text.contains("pyhttp:request__end"), "{text}");

    let mut w = Watch::start(&[
        "-p",
        &srv.pid.to_string(),
        "pyhttp:*",
        "--str",
        "request__start:0",
    ]);
    assert!(w
        .attached_line
        .starts_with("Attached 2 probe sites in 1 object"));
    assert_eq!(srv.sema(sema), 1, "raised while traced");
    let mut sent: Vec<(String, i64)> = (0..20).map(|i| (format!("/item/{i}"), 200)).collect();
    sent.push(("/status/404".into(), 404));
    sent.push(("/status/503".into(), 503));
    for (path, status) in &sent {
        assert_eq!(srv.get(path).0 as i64, *status, "{path}");
    }
    assert!(w.wait_for(TIMEOUT, |r| r["args"][0] == "/status/503"));
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    let mut got = request_spans(&out, srv.pid);
    got.sort();
    sent.sort();
    assert_eq!(got, sent, "one span per request, with its path and status");
    srv.sema_becomes(sema, 0);
}

#[test]
#[ignore = "needs root"]
fn python_probes_defined_after_watch_started_are_attached_late_and_again_after_reload() {
    let Some(py) = python() else {
        eprintln!("skipped: python3 not installed");
        return;
    };
    let srv = Server::spawn(&py, true);
    let pid = srv.pid.to_string();
    // Without --wait-for-probes, a pattern that matches nothing yet is still an error.
    let out = watch::run(&["watch", "-p", &pid, "pyhttp:*"]);
    let err = usdt_trace_tests::watch_util::single_error_line(&out);
    assert!(err.contains("no probe matches pyhttp:*"), "{err}");
    let mut w = Watch::start(&[
        "--wait-for-probes",
        "-p",
        &pid,
        "pyhttp:*",
        "--str",
        "request__start:0",
    ]);
    assert!(
        w.attached_line.starts_with("Attached 0 probe sites"),
        "{}",
        w.attached_line
    );
    let expect_late = |w: &mut Watch| {
        let line = w
            .wait_stderr(TIMEOUT, |l| l.starts_with("Attached 2 new probe sites"))
            .expect("a line saying the late probes were attached");
        assert!(
            line.contains(&format!("/memfd:usdt:pyhttp (deleted) (pid {pid})")),
            "{line}"
        );
    };
    let load = |srv: &Server| {
        let (status, body) = srv.get("/load");
        assert_eq!(status, 200);
        u64::from_str_radix(body.trim_start_matches("0x"), 16).expect("semaphore address")
    };

    let sema = load(&srv);
    expect_late(&mut w);
    assert_eq!(srv.sema(sema), 1, "raised on the late-attached probe");
    for i in 0..10 {
        assert_eq!(srv.get(&format!("/a/{i}")).0, 200);
    }
    // Unloaded, then defined again: a new object, attached again.
    assert_eq!(srv.get("/unload").0, 200);
    let sema2 = load(&srv);
    expect_late(&mut w);
    assert_eq!(srv.sema(sema2), 1);
    for i in 0..5 {
        assert_eq!(srv.get(&format!("/b/{i}")).0, 200);
    }
    assert!(w.wait_for(TIMEOUT, |r| r["args"][0] == "/b/4"));
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    let got = request_spans(&out, srv.pid);
    let count = |prefix: &str| got.iter().filter(|(p, _)| p.starts_with(prefix)).count();
    assert_eq!((count("/a/"), count("/b/")), (10, 5), "{got:?}");
    assert!(got.iter().all(|(_, s)| *s == 200), "{got:?}");
    srv.sema_becomes(sema2, 0);
}

#[test]
#[ignore = "needs root"]
fn python_probes_of_a_process_started_after_watch_by_interpreter_name_are_attached() {
    let Some(py) = python() else {
        eprintln!("skipped: python3 not installed");
        return;
    };
    let exe = std::fs::canonicalize(&py).expect("interpreter path");
    // Traced by name: every process running the interpreter, none of which exists yet. The
    // other tests of this binary run python servers too, with provider `pyhttp`: a provider of
    // its own keeps this watch off their probes (and their semaphores, which they check).
    let mut w = Watch::start(&[
        "--wait-for-probes",
        exe.to_str().expect("utf-8 path"),
        "pyhttp_byname:*",
        "--str",
        "request__start:0",
    ]);
    assert!(
        w.attached_line.starts_with("Attached 0 probe sites"),
        "{}",
        w.attached_line
    );
    let srv = Server::spawn_as(&py, true, "pyhttp_byname");
    let (status, body) = srv.get("/load");
    assert_eq!(status, 200);
    let sema = u64::from_str_radix(body.trim_start_matches("0x"), 16).expect("address");
    let line = w
        .wait_stderr(TIMEOUT, |l| l.starts_with("Attached 2 new probe sites"))
        .expect("a line saying the late probes were attached");
    assert!(
        line.contains(&format!(
            "/memfd:usdt:pyhttp_byname (deleted) (pid {})",
            srv.pid
        )),
        "{line}"
    );
    assert_eq!(srv.sema(sema), 1);
    for i in 0..8 {
        assert_eq!(srv.get(&format!("/n/{i}")).0, 200);
    }
    assert!(w.wait_for(TIMEOUT, |r| r["args"][0] == "/n/7"));
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    let got = request_spans(&out, srv.pid);
    assert_eq!(got.len(), 8, "{got:?}");
    srv.sema_becomes(sema, 0);
}

#[test]
fn waiting_for_probes_with_both_pid_and_target_is_a_usage_error() {
    let out = watch::run(&["watch", "--wait-for-probes", "-p", "1", "/bin/true"]);
    let err = usdt_trace_tests::watch_util::single_error_line(&out);
    assert!(err.contains("--wait-for-probes"), "{err}");
}
