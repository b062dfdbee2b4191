//! `usdt-trace serve` attacked as a hostile local user and a hostile peer on 127.0.0.1
//! (issue 31): a config file others could change (its mode, its owner, a symlink planted in
//! /tmp), a FIFO or a device as config (`--check` and a SIGHUP reload with one must neither
//! hang nor change anything); SIGHUPs while the daemon starts; clients dripping their
//! requests beside a scrape; the HTTP details (absolute-form targets, `Allow` on a 405); a
//! Unix socket as the endpoint, and the warning when string keys are exported on TCP; hostile
//! strings as label values, and `max-keys` as a bound on the series.
//!
//! The definitions name binaries that do not exist: nothing attaches (so no root is needed
//! where no file is chowned), and the daemon's own series (`usdt_definition_up`) are there
//! to scrape.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use usdt_trace_tests::markers::free_port;
use usdt_trace_tests::proc;
use usdt_trace_tests::serve::Daemon;
use usdt_trace_tests::watch::usdt_trace_bin;
use usdt_trace_tests::watch_util::single_error_line;

const SIGHUP: i32 = 1;
const SIGTERM: i32 = 15;
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A fresh directory of mode 0755 under /tmp (sticky, so files in it may be judged).
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("usdt-serve-hostile-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

/// A config of `n` definitions, none of which can attach (their binaries are missing).
fn config(listen: &str, n: usize, extra: &str) -> String {
    let mut s = format!("listen = \"{listen}\"\nretry-seconds = 60\n");
    for i in 0..n {
        s += &format!(
            "\n[[definition]]\nname = \"d{i}\"\ntargets = [\"/nonexistent-usdt-hostile/bin{i}\"]\npatterns = [\"sv:*\"]\n{extra}\n"
        );
    }
    s
}

fn check(path: &Path) -> std::process::Output {
    proc::output_within(
        Command::new(usdt_trace_bin())
            .args(["serve", "--check", "--config"])
            .arg(path),
        Duration::from_secs(10),
    )
}

/// `serve --check` refuses the file with one line containing `want`, exit status 1.
fn refused(path: &Path, want: &str) {
    let out = check(path);
    let line = single_error_line(&out);
    assert_eq!(out.status.code(), Some(1), "{line}");
    assert!(
        line.starts_with(&format!("usdt-trace: error: {}: refused: ", path.display())),
        "{line}"
    );
    assert!(line.contains(want), "{line:?} lacks {want:?}");
}

/// One request, the whole answer (the server closes the connection).
fn http(addr: &str, req: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    c.write_all(req).expect("write");
    let mut s = String::new();
    c.read_to_string(&mut s).expect("read");
    s
}

/// Before: a 0666 file, one owned by `nobody` and a symlink `nobody` planted in /tmp were
/// loaded by root without a word; `--check` on a FIFO hung, `/dev/zero` was read until memory
/// ran out. Now each is one line and exit status 1, at once.
#[test]
#[ignore = "needs root"]
fn config_files_others_could_change_are_refused() {
    let d = scratch("files");
    let good = d.join("serve.toml");
    std::fs::write(&good, config("127.0.0.1:1", 1, "")).expect("config");
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = check(&good);
    assert!(out.status.success(), "{out:?}");

    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    refused(&good, "it is writable by group or others (mode 0666)");
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o644)).expect("chmod");

    let theirs = d.join("theirs.toml");
    std::fs::copy(&good, &theirs).expect("copy");
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
    refused(
        &theirs,
        "it is owned by uid 65534, neither root nor the daemon's user (uid 0)",
    );

    // A symlink nobody planted in a sticky directory, naming a good file.
    let sticky = d.join("sticky");
    std::fs::create_dir(&sticky).expect("dir");
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let link = sticky.join("serve.toml");
    std::os::unix::fs::symlink(&good, &link).expect("symlink");
    assert!(check(&link).status.success());
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).expect("lchown");
    refused(
        &link,
        &format!("the symlink {} is owned by uid 65534", link.display()),
    );

    // A directory nobody may write to, on the way.
    let open_dir = d.join("open");
    std::fs::create_dir(&open_dir).expect("dir");
    std::fs::copy(&good, open_dir.join("serve.toml")).expect("copy");
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    refused(
        &open_dir.join("serve.toml"),
        "is writable by group or others (mode 0777)",
    );

    let fifo = d.join("fifo.toml");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo")
        .success());
    let t = Instant::now();
    refused(&fifo, "a FIFO, not a regular file");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    refused(
        Path::new("/dev/zero"),
        "a character device, not a regular file",
    );
    let big = d.join("big.toml");
    std::fs::write(&big, vec![b'#'; 2 << 20]).expect("big");
    refused(&big, "such a file is at most 1048576 (1 MiB)");
    let _ = std::fs::remove_dir_all(&d);
}

/// A config swapped for a FIFO, then for a file of another owner: each SIGHUP is one line and
/// the daemon keeps its definitions, answers scrapes and stops on SIGTERM. Before, the FIFO
/// hung the daemon (scrapes 503 after 10 s, SIGTERM ignored).
#[test]
#[ignore = "needs root"]
fn a_bad_config_on_sighup_keeps_the_old_one() {
    let d = scratch("reload");
    let path = d.join("serve.toml");
    let addr = format!("127.0.0.1:{}", free_port());
    std::fs::write(&path, config(&addr, 2, "")).expect("config");
    let mut daemon = Daemon::start(&path);
    daemon.wait_log("listening on", START_TIMEOUT);
    let fifo = d.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo")
        .success());
    std::fs::rename(&fifo, &path).expect("swap in the FIFO");
    daemon.signal(SIGHUP);
    let line = daemon.wait_log("reload refused", Duration::from_secs(5));
    assert!(
        line.ends_with("refused: a FIFO, not a regular file"),
        "{line}"
    );
    let t = Instant::now();
    let r = http(&addr, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
    assert_eq!(r.matches("usdt_definition_up{").count(), 2, "{r}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());

    std::fs::remove_file(&path).expect("rm");
    std::fs::write(&path, config(&addr, 3, "")).expect("config");
    std::os::unix::fs::chown(&path, Some(65534), None).expect("chown");
    daemon.signal(SIGHUP);
    let line = daemon.wait_log("owned by uid 65534", Duration::from_secs(5));
    assert!(
        line.contains("reload refused, the running definitions are kept"),
        "{line}"
    );
    let r = http(&addr, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(r.matches("usdt_definition_up{").count(), 2, "{r}");

    daemon.signal(SIGTERM);
    let st = proc::wait_within(&mut daemon.child, Duration::from_secs(20)).expect("exits");
    assert_eq!(st.code(), Some(0), "{:?}", daemon.log);
    let _ = std::fs::remove_dir_all(&d);
}

/// The signals a process catches (`SigCgt` in /proc/PID/status: bit N-1 for signal N).
fn caught(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hex = s.lines().find_map(|l| l.strip_prefix("SigCgt:"))?.trim();
    u64::from_str_radix(hex, 16).ok()
}

/// SIGHUPs every millisecond from just after `main` starts through the load of 64 definitions: the
/// daemon stays up and serves. Before, the handler was installed after the load and the
/// bind, and a SIGHUP 2.5 to 30 ms after the start killed it 6 times in 6.
#[test]
fn sighup_while_starting_is_not_fatal() {
    let d = scratch("hup");
    let path = d.join("serve.toml");
    for run in 0..3 {
        let addr = format!("127.0.0.1:{}", free_port());
        std::fs::write(&path, config(&addr, 64, "")).expect("config");
        let mut daemon = Daemon::start(&path);
        let pid = daemon.child.id();
        // From the moment Rust's runtime has started (it catches SIGSEGV for its stack
        // overflow check just before `main`): a SIGHUP before `main` is any program's death.
        // Polled tightly: proc::wait_until's 20 ms would miss the start.
        let deadline = Instant::now() + Duration::from_secs(10);
        while caught(pid).is_none_or(|m| m & (1 << (11 - 1)) == 0) {
            assert!(Instant::now() < deadline, "run {run}: no start");
            std::thread::sleep(Duration::from_micros(100));
        }
        // Then until `main` has caught SIGHUP (its first act), or 20 ms: a fixed 1 ms was not
        // always enough for `main` to be reached beside a CPU hog (the SIGHUP then killed the
        // daemon before it ran any of our code, as it would any program); the daemon of the
        // bug installed it only after loading its 64 definitions, far later than 20 ms
        // (SIGHUPs 2.5-30 ms after the start killed it 6 of 6 times).
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(20)
            && caught(pid).is_none_or(|m| m & (1 << (1 - 1)) == 0)
        {
            std::thread::sleep(Duration::from_micros(100));
        }
        let t = Instant::now();
        let mut sent = 0;
        while t.elapsed() < Duration::from_millis(150) {
            daemon.signal(SIGHUP);
            sent += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        daemon.wait_log("listening on", START_TIMEOUT);
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            daemon.child.try_wait().expect("wait").is_none(),
            "run {run}: the daemon died of {sent} SIGHUPs during its start: {:?}",
            daemon.log
        );
        let r = http(&addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert_eq!(r.matches("usdt_definition_up{").count(), 64, "run {run}");
        daemon.signal(SIGTERM);
        let st = proc::wait_within(&mut daemon.child, Duration::from_secs(30)).expect("exits");
        assert_eq!(st.code(), Some(0), "run {run}: {:?}", daemon.log);
        eprintln!("run {run}: {sent} SIGHUPs during the start, the daemon stayed up");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// 4 clients dripping request heads (and 36 more holding connections open) beside scrapes
/// of the real daemon: each scrape takes milliseconds. Before, 4 drippers made 4 of 4
/// scrapes time out at 10 s. And an absolute-form request is answered, a 405 says `Allow`.
#[test]
fn slow_clients_do_not_starve_a_scrape() {
    let d = scratch("starve");
    let path = d.join("serve.toml");
    let addr = format!("127.0.0.1:{}", free_port());
    std::fs::write(&path, config(&addr, 2, "")).expect("config");
    let mut daemon = Daemon::start(&path);
    daemon.wait_log("listening on", START_TIMEOUT);
    let mut drippers: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut c = TcpStream::connect(&addr).expect("connect");
            c.write_all(b"GET /metr").expect("drip");
            c
        })
        .collect();
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        for c in drippers.iter_mut().take(4) {
            let _ = c.write_all(b"i");
        }
        let t = Instant::now();
        let r = http(&addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        worst = worst.max(t.elapsed());
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("slowest of 10 scrapes beside 4 drippers and 36 idle connections: {worst:?}");
    assert!(worst < Duration::from_millis(500), "{worst:?}");
    drop(drippers);

    let r = http(
        &addr,
        format!("GET http://{addr}/metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    );
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("usdt_definition_up{"), "{r}");
    let r = http(&addr, b"DELETE /metrics HTTP/1.1\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 405 "), "{r}");
    assert!(r.contains("\r\nAllow: GET, HEAD\r\n"), "{r}");
    daemon.signal(SIGTERM);
    let st = proc::wait_within(&mut daemon.child, Duration::from_secs(20)).expect("exits");
    assert_eq!(st.code(), Some(0), "{:?}", daemon.log);
    let _ = std::fs::remove_dir_all(&d);
}

/// `listen = "unix:/PATH"`: a socket of mode 0660 (its user and group may scrape, no one
/// else), answered over curl's `--unix-socket`, removed at the stop. String keys exported on
/// TCP are warned about, once per definition; on the Unix socket they are not.
#[test]
fn a_unix_socket_endpoint_and_the_string_key_warning() {
    let d = scratch("unix");
    let path = d.join("serve.toml");
    let sock = d.join("metrics.sock");
    let strs = "str = [\"query__start:0\"]\nby = \"str0\"\n";
    std::fs::write(&path, config(&format!("unix:{}", sock.display()), 2, strs)).expect("config");
    let mut daemon = Daemon::start(&path);
    daemon.wait_log("listening on", START_TIMEOUT);
    let mode = std::fs::metadata(&sock)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o660, "{mode:o}");
    let out = proc::output_within(
        Command::new("curl")
            .args(["-s", "-f", "--max-time", "10", "--unix-socket"])
            .arg(&sock)
            .arg("http://localhost/metrics"),
        Duration::from_secs(15),
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("usdt_definition_up{").count(), 2, "{text}");
    daemon.signal(SIGTERM);
    let st = proc::wait_within(&mut daemon.child, Duration::from_secs(20)).expect("exits");
    assert_eq!(st.code(), Some(0), "{:?}", daemon.log);
    daemon.drain();
    assert!(
        !daemon.log.iter().any(|l| l.contains("warning")),
        "{:?}",
        daemon.log
    );
    assert!(!sock.exists(), "the socket stays after the daemon");

    let addr = format!("127.0.0.1:{}", free_port());
    std::fs::write(&path, config(&addr, 2, strs)).expect("config");
    let mut daemon = Daemon::start(&path);
    daemon.wait_log("listening on", START_TIMEOUT);
    let line = daemon.wait_log("[d1] warning", Duration::from_secs(5));
    assert!(
        line.contains("its keys are strings the traced programs hold, exported at 127.0.0.1:")
            && line.contains(", readable by anyone who can connect there; a web config with basic_auth_users or client certificates, or a unix: socket, limits who can"),
        "{line}"
    );
    assert!(daemon.log.iter().any(|l| l.contains("[d0] warning")));
    let _ = std::fs::remove_dir_all(&d);
}

/// Program strings as label values, through the real daemon: the bytes 0x80 0xff and the text
/// `\x80\xff`, a backslash and the text `\\`, ESC and CR: six strings, six series of one span
/// each, and no control byte in the exposition. Before, the first two were one series
/// (count 2) and ESC and CR went out raw.
#[test]
#[ignore = "needs root"]
fn string_keys_stay_distinct_and_carry_no_control_bytes() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use usdt_trace_tests::watch_util::build_c;
    let bin = build_c("strs_argv", &[]);
    let d = scratch("labels");
    let path = d.join("serve.toml");
    let addr = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        &path,
        format!(
            "listen = \"{addr}\"\n[[definition]]\nname = \"s\"\ntargets = [\"{}\"]\npatterns = [\"as:*\"]\nstr = [\"q__start:1\"]\nby = \"str0\"\n",
            bin.display()
        ),
    )
    .expect("config");
    let mut daemon = Daemon::start(&path);
    daemon.wait_log("[s] attached", Duration::from_secs(90));
    let strings: [&[u8]; 6] = [
        b"\x80\xff",
        br"\x80\xff",
        b"a\\b",
        br"a\\b",
        b"esc\x1b[2Jx",
        b"cr\rx",
    ];
    let out = proc::output_within(
        Command::new(&bin).args(strings.iter().map(|s| OsStr::from_bytes(s))),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{out:?}");
    // The spans are counted in the kernel when they end; a scrape shows them at once.
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        text = http(&addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        if text.contains("usdt_spans_total{definition=\"s\"} 6") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let counts: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("usdt_span_duration_seconds_count{definition=\"s\"") && l.contains("key=")
        })
        .collect();
    eprintln!("{}", counts.join("\n"));
    // Label values as the text format writes them: each backslash of the value doubled.
    for key in [
        r"\\x80\\xff",
        r"\\\\x80\\\\xff",
        r"a\\\\b",
        r"a\\\\\\\\b",
        r"esc\\x1b[2Jx",
        r"cr\\x0dx",
    ] {
        let want = format!("key=\"{key}\"}} 1");
        assert!(
            counts.iter().any(|l| l.ends_with(&want)),
            "no {want} in {counts:#?}"
        );
    }
    assert_eq!(counts.len(), 6, "{counts:#?}");
    let body = &text[text.find("\r\n\r\n").expect("head") + 4..];
    assert!(
        !body.bytes().any(|b| b == 0x1b || b == b'\r'),
        "a control byte in the exposition"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `watch --prometheus` with a string key says, as `serve` does, that the strings are
/// readable by whoever can connect.
#[test]
#[ignore = "needs root"]
fn watch_warns_when_it_exports_string_keys_on_tcp() {
    use usdt_trace_tests::watch_util::build_c;
    let bin = build_c("strs_argv", &[]);
    let addr = format!("127.0.0.1:{}", free_port());
    let cmd = format!("{} secret", bin.display());
    let out = usdt_trace_tests::watch::run(&[
        "watch",
        "--hist",
        "--str",
        "q__start:1",
        "--by",
        "str0",
        "--prometheus",
        &addr,
        "-c",
        &cmd,
        "as:*",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let want = format!("warning: --by str0: strings the traced programs hold are exported at http://{addr}/metrics, readable by anyone who can connect there");
    assert!(err.contains(&want), "{err}");
}

/// `max-keys = 20` in 6 definitions over a program making 200 spans of 200 keys: each exports
/// 20 keys at most, and its other 180 spans under `key="other"`, every span counted once.
/// Before, the kernel's 32-key reserve came on top: 47 to 52 keys per definition.
#[test]
#[ignore = "needs root"]
fn max_keys_bounds_the_series_of_every_definition() {
    use usdt_trace_tests::watch_util::build_c;
    let bin = build_c("strs_argv", &[]);
    let d = scratch("maxkeys");
    let path = d.join("serve.toml");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut text = format!("listen = \"{addr}\"\n");
    for i in 0..6 {
        text += &format!(
            "\n[[definition]]\nname = \"d{i}\"\ntargets = [\"{}\"]\npatterns = [\"as:*\"]\nby = \"arg0\"\nmax-keys = 20\n",
            bin.display()
        );
    }
    std::fs::write(&path, text).expect("config");
    let mut daemon = Daemon::start(&path);
    for i in 0..6 {
        daemon.wait_log(&format!("[d{i}] attached"), Duration::from_secs(120));
    }
    let args: Vec<String> = (1..=200).map(|i| i.to_string()).collect();
    let out = proc::output_within(Command::new(&bin).args(&args), Duration::from_secs(30));
    assert!(out.status.success(), "{out:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut m = String::new();
    while Instant::now() < deadline {
        m = http(&addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        if (0..6).all(|i| m.contains(&format!("usdt_spans_total{{definition=\"d{i}\"}} 200"))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for i in 0..6 {
        let prefix = format!("usdt_span_duration_seconds_count{{definition=\"d{i}\",");
        let rows: Vec<(&str, f64)> = m
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| {
                let (series, v) = l.rsplit_once(' ')?;
                Some((series, v.parse().ok()?))
            })
            .collect();
        let keys = rows
            .iter()
            .filter(|(s, _)| !s.contains("other=\"true\"") && !s.contains("unkeyed=\"true\""))
            .count();
        let total: f64 = rows.iter().map(|(_, v)| v).sum();
        eprintln!("d{i}: {keys} keys, {total} spans");
        assert!(keys <= 20, "d{i}: {keys} keys exported with max-keys = 20");
        assert_eq!(total, 200.0, "d{i}: {rows:#?}");
    }
    daemon.signal(SIGTERM);
    let st = proc::wait_within(&mut daemon.child, Duration::from_secs(60)).expect("exits");
    assert_eq!(st.code(), Some(0));
    let _ = std::fs::remove_dir_all(&d);
}
