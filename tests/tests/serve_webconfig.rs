//! Who may scrape `/metrics` (issue 31): Prometheus' web-config file (`serve`'s `web-config`,
//! `watch --web-config`) with basic auth and TLS, checked from outside with curl and a real
//! Prometheus. Basic auth: no credentials, a wrong password or an unknown user get a 401 that
//! asks for Basic credentials, the right ones the metrics. TLS: curl trusting only the test's
//! own CA (made here with openssl) gets the metrics; plain HTTP to the TLS port is answered
//! at once with a 400 saying so; clients stuck in their handshake neither delay another scrape
//! nor outlive the request head's deadline; client certificates are required when asked. A
//! SIGHUP applies a changed web config to the next connections. The string-key warning is
//! silent once a client must prove who it is, and says TLS alone does not.
//!
//! The first tests' definitions name binaries that do not exist (nothing attaches, no root
//! needed); the real Prometheus test traces a real program, as root, and so does the last,
//! which runs `watch --web-config` with a string key behind TLS and basic auth.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use usdt_trace_tests::markers::free_port;
use usdt_trace_tests::proc;
use usdt_trace_tests::prometheus::Prometheus;
use usdt_trace_tests::serve::Daemon;
use usdt_trace_tests::watch::usdt_trace_bin;
use usdt_trace_tests::watch_util::single_error_line;

const SIGHUP: i32 = 1;
const SIGTERM: i32 = 15;
const START_TIMEOUT: Duration = Duration::from_secs(30);
const PASSWORD: &str = "s3cret pass";

/// A fresh directory of mode 0755 (the files in it are judged as the config file is).
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("usdt-webcfg-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = proc::output_within(
        Command::new("openssl").args(args).current_dir(dir),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// In `dir`: a CA (`ca.crt`) and a server certificate it signed for localhost and 127.0.0.1
/// (`server.crt`, `server.key`); a second CA for clients (`client-ca.crt`) and a client
/// certificate it signed (`client.crt`, `client.key`). EC P-256 keys: quick to make.
fn make_pki(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    for (name, cn, ext) in [
        (
            "server",
            "localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        ),
        ("client", "scraper", "extendedKeyUsage=clientAuth\n"),
    ] {
        let ca = if name == "server" { "ca" } else { "client-ca" };
        let mut a = vec!["req", "-x509"];
        a.extend(ec);
        let subj = format!("/CN=usdt-trace test {ca}");
        let (cak, c) = (format!("{ca}.key"), format!("{ca}.crt"));
        a.extend(["-days", "2", "-subj", &subj, "-keyout", &cak, "-out", &c]);
        openssl(dir, &a);
        std::fs::write(dir.join(format!("{name}.ext")), ext).expect("ext");
        let mut a = vec!["req"];
        a.extend(ec);
        let subj = format!("/CN={cn}");
        let (k, csr) = (format!("{name}.key"), format!("{name}.csr"));
        a.extend(["-subj", &subj, "-keyout", &k, "-out", &csr]);
        openssl(dir, &a);
        let (crt, extf) = (format!("{name}.crt"), format!("{name}.ext"));
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &c,
                "-CAkey",
                &cak,
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &extf,
                "-out",
                &crt,
            ],
        );
    }
}

/// A CA and server certificate in `dir` and a web config beside them asking for both TLS and
/// the password of user `prometheus`: what the real-Prometheus and `watch` tests serve behind.
fn tls_and_auth(dir: &Path) -> std::path::PathBuf {
    make_pki(dir);
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prometheus: {}\n",
            hash()
        ),
    )
    .expect("web.yml");
    web
}

fn hash() -> String {
    bcrypt::hash(PASSWORD, 5).expect("bcrypt")
}

/// A config of `n` definitions keyed by a string, none of which can attach.
fn config(listen: &str, web: &Path, n: usize) -> String {
    let mut s = format!(
        "listen = \"{listen}\"\nretry-seconds = 60\nweb-config = \"{}\"\n",
        web.display()
    );
    for i in 0..n {
        s += &format!(
            "\n[[definition]]\nname = \"d{i}\"\ntargets = [\"/nonexistent-usdt-webcfg/bin{i}\"]\npatterns = [\"sv:*\"]\nstr = [\"q__start:0\"]\nby = \"str0\"\n"
        );
    }
    s
}

/// curl with `args`, bounded; its output.
fn curl(args: &[&str]) -> Output {
    proc::output_within(
        Command::new("curl")
            .args(["-s", "-S", "-i", "--max-time", "10"])
            .args(args),
        Duration::from_secs(15),
    )
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The daemon's log from line `from` on, once a line containing `what` came.
fn wait_from(d: &mut Daemon, from: usize, what: &str) -> Vec<String> {
    let (lines, hit) = d
        .stderr
        .until(Instant::now() + START_TIMEOUT, |l| l.contains(what));
    d.log.extend(lines);
    assert!(hit, "no {what:?}: {:#?}", d.log);
    d.log[from..].to_vec()
}

/// One daemon, four web configs in turn (SIGHUP between them): basic auth over plain HTTP,
/// then TLS with basic auth, then TLS with client certificates, then TLS alone.
#[test]
fn basic_auth_tls_and_client_certificates_through_curl() {
    if !usdt_trace_tests::markers::have("openssl") || !usdt_trace_tests::markers::have("curl") {
        eprintln!("skipped: openssl or curl not installed");
        return;
    }
    let d = scratch("curl");
    make_pki(&d);
    let web = d.join("web.yml");
    let users = format!("basic_auth_users:\n  prometheus: {}\n", hash());
    std::fs::write(&web, &users).expect("web.yml");
    let path = d.join("serve.toml");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    std::fs::write(&path, config(&addr, &web, 2)).expect("config");
    let mut daemon = Daemon::start(&path);
    let line = daemon.wait_log("listening on", START_TIMEOUT);
    assert!(
        line.contains(&format!("listening on http://{addr}/metrics"))
            && line.ends_with(&format!(
                "web-config {}: basic auth (1 user)",
                web.display()
            )),
        "{line}"
    );
    let url = format!("http://{addr}/metrics");
    let up = "usdt_definition_up{definition=\"d1\"} 0";

    // Basic auth: nothing, a wrong password, an unknown user: 401 asking for Basic.
    let right = format!("prometheus:{PASSWORD}");
    for cred in [None, Some("prometheus:wrong"), Some("mallory:s3cret pass")] {
        let mut a = vec![url.as_str()];
        if let Some(c) = cred {
            a.extend(["-u", c]);
        }
        let r = text(&curl(&a));
        assert!(
            r.starts_with("HTTP/1.1 401 Unauthorized\r\n"),
            "{cred:?}: {r}"
        );
        assert!(
            r.contains("\r\nWWW-Authenticate: Basic realm=\"usdt-trace\"\r\n"),
            "{r}"
        );
        assert!(!r.contains("usdt_definition_up"), "{r}");
    }
    let t = Instant::now();
    let r = text(&curl(&[&url, "-u", &right]));
    eprintln!("first right password (a bcrypt, cost 5): {:?}", t.elapsed());
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains(up), "{r}");
    // Asked before a path is looked at: a 404 is not an oracle either.
    let r = text(&curl(&[&format!("http://{addr}/nothing")]));
    assert!(r.starts_with("HTTP/1.1 401 "), "{r}");
    daemon.drain();
    assert!(
        !daemon.log.iter().any(|l| l.contains("warning")),
        "basic auth asks who scrapes, no warning: {:#?}",
        daemon.log
    );

    // TLS with the same users, applied by a SIGHUP.
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    std::fs::write(&web, format!("{tls}{users}")).expect("web.yml");
    let from = daemon.log.len();
    daemon.signal(SIGHUP);
    let lines = wait_from(&mut daemon, from, "reloaded ");
    assert!(
        lines.iter().any(|l| l.ends_with(&format!(
            "reload: web-config {}: TLS, basic auth (1 user)",
            web.display()
        ))),
        "{lines:#?}"
    );
    let https = format!("https://{addr}/metrics");
    let ca = d.join("ca.crt");
    let ca = ca.to_str().expect("utf-8");
    let r = text(&curl(&["--cacert", ca, &https, "-u", &right]));
    assert!(
        r.starts_with("HTTP/1.1 200 OK\r\n") && r.contains(up),
        "{r}"
    );
    let r = text(&curl(&["--cacert", ca, &https]));
    assert!(r.starts_with("HTTP/1.1 401 "), "{r}");
    // Without trusting the CA, curl refuses the server: it is the CA's certificate.
    let o = curl(&[&https, "-u", &right]);
    assert!(!o.status.success(), "{o:?}");
    // Plain HTTP to the TLS port: a plain 400 at once, as Go's servers answer it.
    let t = Instant::now();
    let o = curl(&[&url, "-u", &right]);
    let took = t.elapsed();
    let r = text(&o);
    assert!(
        r.starts_with("HTTP/1.0 400 Bad Request\r\n")
            && r.ends_with("Client sent an HTTP request to an HTTPS server.\n"),
        "{o:?}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");

    // Clients stuck in their handshake (a TLS record header, then nothing), more of them than
    // the 32 connections served at once: each scrape still takes milliseconds.
    let mut stuck: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut c = TcpStream::connect(&addr).expect("connect");
            c.write_all(b"\x16\x03\x01").expect("write");
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        let t = Instant::now();
        let r = text(&curl(&["--cacert", ca, &https, "-u", &right]));
        worst = worst.max(t.elapsed());
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    }
    eprintln!("slowest of 10 https scrapes (curl's own start included) beside 40 clients stuck in their handshake: {worst:?}");
    assert!(worst < Duration::from_secs(1), "{worst:?}");
    drop(stuck.drain(..));
    // One stuck alone is cut off at the request head's deadline (5 s), not later.
    let mut c = TcpStream::connect(&addr).expect("connect");
    c.write_all(b"\x16\x03\x01").expect("write");
    c.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let t = Instant::now();
    let mut buf = [0u8; 64];
    let _ = c.read(&mut buf);
    let took = t.elapsed();
    eprintln!("a client stuck in its handshake was cut off after {took:?}");
    assert!(
        took > Duration::from_secs(4) && took < Duration::from_secs(7),
        "{took:?}"
    );

    // Client certificates, no password: none, or one of another CA, is no connection.
    std::fs::write(
        &web,
        format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: client-ca.crt\n"),
    )
    .expect("web.yml");
    let from = daemon.log.len();
    daemon.signal(SIGHUP);
    let lines = wait_from(&mut daemon, from, "reloaded ");
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(": TLS, client certificates")),
        "{lines:#?}"
    );
    let (cert, key) = (d.join("client.crt"), d.join("client.key"));
    let (cert, key) = (cert.to_str().expect("utf-8"), key.to_str().expect("utf-8"));
    let r = text(&curl(&[
        "--cacert", ca, &https, "--cert", cert, "--key", key,
    ]));
    assert!(
        r.starts_with("HTTP/1.1 200 OK\r\n") && r.contains(up),
        "{r}"
    );
    let o = curl(&["--cacert", ca, &https]);
    assert!(!o.status.success() && text(&o).is_empty(), "{o:?}");
    let (scert, skey) = (d.join("server.crt"), d.join("server.key"));
    let o = curl(&[
        "--cacert",
        ca,
        &https,
        "--cert",
        scert.to_str().expect("utf-8"),
        "--key",
        skey.to_str().expect("utf-8"),
    ]);
    assert!(!o.status.success() && text(&o).is_empty(), "{o:?}");
    assert!(
        !daemon.log[from..].iter().any(|l| l.contains("warning")),
        "{:#?}",
        daemon.log
    );

    // TLS alone: the strings are encrypted on the way but anyone may connect: said.
    std::fs::write(&web, tls).expect("web.yml");
    let from = daemon.log.len();
    daemon.signal(SIGHUP);
    let lines = wait_from(&mut daemon, from, "reloaded ");
    let (more, _) = daemon
        .stderr
        .until(Instant::now() + Duration::from_secs(5), |l| {
            l.contains("[d1] warning")
        });
    let lines: Vec<String> = lines.into_iter().chain(more).collect();
    let warning = lines
        .iter()
        .find(|l| l.contains("[d1] warning"))
        .unwrap_or_else(|| panic!("no warning: {lines:#?}"));
    assert!(
        warning.contains(&format!("exported at {addr}, readable by anyone who can connect there: TLS encrypts them on the way but asks no one who they are")),
        "{warning}"
    );
    let r = text(&curl(&["--cacert", ca, &https]));
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");

    daemon.signal(SIGTERM);
    let st = proc::wait_within(&mut daemon.child, Duration::from_secs(20)).expect("exits");
    assert_eq!(st.code(), Some(0), "{:#?}", daemon.log);
    let _ = std::fs::remove_dir_all(&d);
}

fn check(path: &Path) -> Output {
    proc::output_within(
        Command::new(usdt_trace_bin())
            .args(["serve", "--check", "--config"])
            .arg(path),
        Duration::from_secs(10),
    )
}

/// A bad web config (or a file it names) stops `serve --check` and `watch` with one line
/// naming the file and the problem, never a panic.
#[test]
fn bad_web_configs_are_one_line_errors() {
    let d = scratch("bad");
    make_pki(&d);
    let web = d.join("web.yml");
    let path = d.join("serve.toml");
    std::fs::write(&path, config("127.0.0.1:1", &web, 1)).expect("config");
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    let good = format!("{tls}basic_auth_users:\n  prometheus: {}\n", hash());
    std::fs::write(&web, &good).expect("web.yml");
    let out = check(&path);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!(
            "{}: ok: listen 127.0.0.1:1 (web-config {}: TLS, basic auth (1 user)), 1 definition: d0",
            path.display(),
            web.display()
        )
    );
    let file = web.display().to_string();
    for (text, mode, want) in [
        (
            "nonsense: 1\n".to_string(),
            0o644,
            format!("web config {file}: unknown field `nonsense`"),
        ),
        (
            "basic_auth_users:\n  prometheus: plaintext\n".into(),
            0o644,
            format!("web config {file}: basic_auth_users: prometheus: not a bcrypt hash"),
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: client.key\n".into(),
            0o644,
            "the key does not match the certificate".into(),
        ),
        (
            "tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n".into(),
            0o644,
            format!(
                "web config {}: cannot read: ",
                d.join("missing.crt").display()
            ),
        ),
        (
            good.clone(),
            0o666,
            format!("web config {file}: refused: it is writable by group or others (mode 0666)"),
        ),
    ] {
        std::fs::write(&web, &text).expect("web.yml");
        std::fs::set_permissions(&web, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let out = check(&path);
        let line = single_error_line(&out);
        assert_eq!(out.status.code(), Some(1), "{line}");
        assert!(
            line.starts_with(&format!("usdt-trace: error: {}: ", path.display())),
            "{line}"
        );
        assert!(line.contains(&want), "{line:?} lacks {want:?}");
    }
    std::fs::set_permissions(&web, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    // A relative web-config in the daemon's file: its working directory is /.
    std::fs::write(&path, config("127.0.0.1:1", Path::new("web.yml"), 1)).expect("config");
    let line = single_error_line(&check(&path));
    assert!(
        line.contains("web-config \"web.yml\": expected an absolute path"),
        "{line}"
    );
    // watch: the same file, the same line, before anything attaches (no root needed).
    std::fs::write(&web, "basic_auth_users:\n  prometheus: plaintext\n").expect("web.yml");
    let out = proc::output_within(
        Command::new(usdt_trace_bin())
            .args([
                "watch",
                "--hist",
                "--prometheus",
                "127.0.0.1:0",
                "--web-config",
            ])
            .arg(&web)
            .arg("/bin/true"),
        Duration::from_secs(10),
    );
    let line = single_error_line(&out);
    assert!(
        line.starts_with(&format!(
            "usdt-trace: error: web config {file}: basic_auth_users: prometheus: not a bcrypt hash"
        )),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A real Prometheus scrapes the daemon over TLS (trusting the test's CA) with basic auth:
/// `up` is 1 and the span count it stores is the program's own.
#[test]
#[ignore = "needs root"]
fn a_real_prometheus_scrapes_with_basic_auth_and_tls() {
    use usdt_trace_tests::watch_util::build_c;
    if !usdt_trace_tests::markers::have("prometheus") {
        eprintln!("skipped: prometheus not installed (scripts/setup.sh)");
        return;
    }
    let bin = build_c("serve_load", &["-O2", "-DVARIANT=31"]);
    let d = scratch("prom");
    let web = tls_and_auth(&d);
    let path = d.join("serve.toml");
    let addr = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        &path,
        format!(
            "listen = \"{addr}\"\nweb-config = \"{}\"\n[[definition]]\nname = \"a\"\ntargets = [\"{}\"]\npatterns = [\"sv:*\"]\n",
            web.display(),
            bin.display()
        ),
    )
    .expect("config");
    let mut daemon = Daemon::start(&path);
    daemon.wait_log(
        "[a] attached: Attached 2 probe sites",
        Duration::from_secs(90),
    );
    let out = proc::output_within(Command::new(&bin).arg("20"), Duration::from_secs(60));
    assert!(out.status.success(), "{out:?}");
    let prom = Prometheus::start_with(
        &addr,
        &format!(
            "    scheme: https\n    basic_auth:\n      username: prometheus\n      password: '{PASSWORD}'\n    tls_config:\n      ca_file: {}\n",
            d.join("ca.crt").display()
        ),
    );
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs_f64()
    };
    proc::wait_until(
        "an https scrape with basic auth",
        Duration::from_secs(60),
        || prom.query("up{job=\"usdt\"} == 1", now()).len() == 1,
    );
    let at = now();
    assert_eq!(prom.one("up{job=\"usdt\"}", at), 1.0);
    assert_eq!(
        prom.one(
            "sum(usdt_span_duration_seconds_count{definition=\"a\",span=\"job\"})",
            at
        ),
        20.0
    );
    assert_eq!(prom.one("usdt_spans_total{definition=\"a\"}", at), 20.0);
    drop(prom);
    daemon.signal(SIGTERM);
    let st = proc::wait_within(&mut daemon.child, Duration::from_secs(60)).expect("exits");
    assert_eq!(st.code(), Some(0), "{:#?}", daemon.log);
    let _ = std::fs::remove_dir_all(&d);
}

/// `watch --prometheus --web-config`: the same file, the same endpoint. A string key behind
/// TLS and basic auth: no warning, a 401 without the password, the program's string with it.
#[test]
#[ignore = "needs root"]
fn watch_serves_string_keys_behind_tls_and_basic_auth() {
    use usdt_trace_tests::watch::Watch;
    use usdt_trace_tests::watch_util::build_c;
    let bin = build_c("strs_argv", &[]);
    let d = scratch("watch");
    let web = tls_and_auth(&d);
    let addr = format!("127.0.0.1:{}", free_port());
    let w = Watch::start_with(
        &[
            "--hist",
            "--str",
            "q__start:1",
            "--by",
            "str0",
            "--prometheus",
            &addr,
            "--web-config",
            web.to_str().expect("utf-8"),
            bin.to_str().expect("utf-8"),
            "as:*",
        ],
        true,
    );
    let out = proc::output_within(Command::new(&bin).arg("a-secret"), Duration::from_secs(30));
    assert!(out.status.success(), "{out:?}");
    let https = format!("https://{addr}/metrics");
    let ca = d.join("ca.crt");
    let ca = ca.to_str().expect("utf-8");
    let right = format!("prometheus:{PASSWORD}");
    let want = "key=\"a-secret\"} 1";
    let mut r = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        r = text(&curl(&["--cacert", ca, &https, "-u", &right]));
        if r.lines()
            .any(|l| l.starts_with("usdt_span_duration_seconds_count") && l.ends_with(want))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains(want), "{r}");
    let r = text(&curl(&["--cacert", ca, &https]));
    assert!(
        r.starts_with("HTTP/1.1 401 ") && !r.contains("a-secret"),
        "{r}"
    );
    let out = w.stop();
    let err = &out.stderr;
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("warning: --by str0"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}
