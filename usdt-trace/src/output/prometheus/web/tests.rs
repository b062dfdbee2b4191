use super::*;

/// `htpasswd -nbB alice secret` (cost 5, as htpasswd writes it).
const ALICE: &str = "$2y$05$tGKlVk.ilf3SXftTTG5IMeNu6GQJNs5S2PeTl5Dl7412SLNpSXoBC";

fn check(text: &str) -> Result<Settings, String> {
    parse(Path::new("/etc/usdt-trace/web.yml"), text).map_err(|e| e.to_string())
}

#[test]
fn a_good_file_becomes_settings() {
    let s = check(&format!(
        "# who may scrape\ntls_server_config:\n  cert_file: server.crt\n  key_file: /keys/server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  min_version: TLS13\nbasic_auth_users:\n  alice: {ALICE}\n  bob: '$2b$04$j/tpnMw1tRPnCO2NsUtAQu.vGTFu3DGpMV00ZCHpfCmogPGzKkL3C'\n"
    ))
    .expect("good");
    let t = s.tls.expect("tls");
    // Relative to the file's directory, as exporter-toolkit resolves them.
    assert_eq!(t.cert_file, Path::new("/etc/usdt-trace/server.crt"));
    assert_eq!(t.key_file, Path::new("/keys/server.key"));
    assert_eq!(
        t.client_ca_file.as_deref(),
        Some(Path::new("/etc/usdt-trace/ca.crt"))
    );
    assert_eq!(t.client_auth, ClientAuth::Required);
    assert_eq!(
        (t.min_version, t.max_version),
        (TlsVersion::Tls13, TlsVersion::Tls13)
    );
    let names: Vec<&str> = s.users.iter().map(|u| u.0.as_str()).collect();
    assert_eq!(names, ["alice", "bob"]);
    // Empty, or only comments: nothing asked (exporter-toolkit reads it so too).
    for empty in ["", "# nothing\n", "{}\n"] {
        let s = check(empty).expect("empty");
        assert!(s.tls.is_none() && s.users.is_empty(), "{empty:?}");
    }
}

/// Every bad file is one line naming the file and what is wrong; an unknown key is named.
#[test]
fn bad_files_are_one_line_errors() {
    let tls = "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n";
    for (text, want) in [
        ("bogus: 1\n".to_string(), "unknown field `bogus`"),
        (format!("{tls}  bogus: 1\n"), "unknown field `bogus`"),
        ("basic_auth_users:\n  alice: secret\n".into(), "alice: not a bcrypt hash ($2y$, $2b$ or $2a$): make one with `htpasswd -nbB alice PASSWORD`"),
        ("basic_auth_users:\n  alice: $2y$05$short\n".into(), "alice: not a valid bcrypt hash"),
        ("basic_auth_users:\n  alice: $1$abc$def\n".into(), "alice: not a bcrypt hash"),
        (format!("basic_auth_users:\n  alice: {}\n", ALICE.replace("$05$", "$16$")), "alice: bcrypt cost 16: expected 4 to 15"),
        (format!("basic_auth_users:\n  alice: {}\n", ALICE.replace("$05$", "$03$")), "alice: bcrypt cost 3: expected 4 to 15"),
        (format!("basic_auth_users:\n  alice: {ALICE}\n  alice: {ALICE}\n"), "duplicate"),
        (format!("basic_auth_users:\n  'a:b': {ALICE}\n"), "user \"a:b\": a name is not empty and has no ':'"),
        ("basic_auth_users:\n  alice: 5\n".into(), "alice: the value is a bcrypt hash"),
        ("basic_auth_users: [a, b]\n".into(), "basic_auth_users: invalid type"),
        ("tls_server_config:\n  cert_file: a.crt\n".into(), "tls_server_config: key_file is missing"),
        ("tls_server_config:\n  key_file: a.key\n".into(), "tls_server_config: cert_file is missing"),
        (format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n"), "client_ca_file is missing"),
        (format!("{tls}  client_ca_file: ca.crt\n"), "client_ca_file without client_auth_type"),
        (format!("{tls}  client_auth_type: RequireAnyClientCert\n"), "not supported (it takes a certificate without verifying it)"),
        (format!("{tls}  client_auth_type: Sometimes\n"), "client_auth_type \"Sometimes\": expected NoClientCert"),
        (format!("{tls}  min_version: TLS10\n"), "min_version TLS10: not supported"),
        (format!("{tls}  min_version: TLS13\n  max_version: TLS12\n"), "min_version is above max_version"),
        (format!("{tls}  cipher_suites: [TLS_AES_128_GCM_SHA256]\n"), "cipher_suites: not supported"),
        ("http_server_config:\n  http2: false\n".into(), "http_server_config: not supported"),
        ("tls_server_config: [\n".into(), "web config /etc/usdt-trace/web.yml: "),
    ] {
        let e = check(&text).err().unwrap_or_else(|| panic!("accepted:\n{text}"));
        assert!(e.starts_with("web config /etc/usdt-trace/web.yml: "), "{e}");
        assert!(e.contains(want), "{e:?} lacks {want:?}");
        assert!(!e.contains('\n'), "{e:?}");
    }
}

#[test]
fn a_missing_file_names_itself() {
    let e = Web::load(Path::new("/nonexistent/web.yml")).expect_err("missing");
    assert!(
        e.to_string()
            .starts_with("web config /nonexistent/web.yml: cannot read: "),
        "{e}"
    );
    let e = Web::load(Path::new("/dev/zero")).expect_err("device");
    assert_eq!(
        e.to_string(),
        "web config /dev/zero: refused: a character device, not a regular file"
    );
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// Right password: allowed, and from then on from the cache (no bcrypt: a fraction of the
/// first check's time). Wrong password, unknown user, no or malformed header: refused, a wrong
/// password and an unknown user at the price of a bcrypt each time. Times are the least of 3
/// (a loaded machine only adds to them).
#[test]
fn basic_auth_checks_and_remembers_only_successes() {
    use std::time::{Duration, Instant};
    let hash = bcrypt::hash("secret", 6).expect("hash");
    let users = || {
        vec![
            ("alice".into(), hash.clone()),
            ("carol".into(), ALICE.into()),
        ]
    };
    let least = |f: &dyn Fn() -> Verdict, want: Verdict| -> Duration {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                assert_eq!(f(), want);
                t.elapsed()
            })
            .min()
            .unwrap_or_default()
    };
    let right = basic("alice", "secret");
    // The first check of a fresh instance: a bcrypt.
    let first = least(
        &|| BasicAuth::new(users()).check(Some(&right)),
        Verdict::Allowed,
    );
    let auth = BasicAuth::new(users());
    assert_eq!(auth.check(Some(&right)), Verdict::Allowed);
    let cached = least(&|| auth.check(Some(&right)), Verdict::Allowed);
    eprintln!("first check {first:?}, cached {cached:?}");
    assert!(cached * 10 < first, "{first:?} then {cached:?}");
    assert_eq!(
        auth.check(Some(&basic("carol", "secret"))),
        Verdict::Allowed
    );
    for refused in [
        Some(basic("alice", "Secret")),
        Some(basic("mallory", "secret")),
        Some(basic("", "")),
        Some("Basic !!!".to_string()),
        Some("Bearer abc".to_string()),
        Some(format!("Basic {}", "YWxpY2U=")), // "alice", no colon
        None,
    ] {
        assert_eq!(
            auth.check(refused.as_deref()),
            Verdict::Refused,
            "{refused:?}"
        );
    }
    // A wrong password is never cached: it costs a bcrypt each time, as the first right one.
    let wrong = least(
        &|| auth.check(Some(&basic("alice", "Secret"))),
        Verdict::Refused,
    );
    // An unknown user costs a bcrypt too (against the costliest hash, alice's): its timing
    // does not say that the user does not exist.
    let unknown = least(
        &|| auth.check(Some(&basic("mallory", "x"))),
        Verdict::Refused,
    );
    eprintln!("wrong password {wrong:?}, unknown user {unknown:?}");
    // A bcrypt each (tens of ms here), where a cache hit is microseconds: the margins leave
    // room for a loaded machine.
    for t in [wrong, unknown] {
        assert!(
            t * 4 > first && t > cached * 50,
            "{t:?} vs {first:?}, {cached:?}"
        );
    }
}

#[test]
fn the_authorization_header_is_found_whatever_its_case() {
    let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nauthorization:  Basic YTpi \r\n\r\n";
    assert_eq!(authorization(head), Some("Basic YTpi"));
    assert_eq!(authorization(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), None);
    // The request line is no header, whatever it holds.
    assert_eq!(
        authorization(b"GET /Authorization:x HTTP/1.1\r\n\r\n"),
        None
    );
}

/// A fresh directory of mode 0755 with a self-signed certificate and key made by openssl
/// for each of `names` (`NAME.crt`, `NAME.key`); None where openssl is not installed.
fn certs(tag: &str, names: &[&str]) -> Option<PathBuf> {
    let d = std::env::temp_dir().join(format!("usdt-webcfg-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    for name in names {
        let out = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout"])
            .arg(d.join(format!("{name}.key")))
            .arg("-out")
            .arg(d.join(format!("{name}.crt")))
            .output();
        if !out.is_ok_and(|o| o.status.success()) {
            eprintln!("skipped: openssl is not installed");
            return None;
        }
    }
    Some(d)
}

/// TLS files: a certificate and key made by openssl load; a key of another certificate, a
/// file with no certificate and a missing file are one line each.
#[test]
fn tls_files_load_or_say_what_is_wrong() {
    let Some(d) = certs("files", &["a", "b"]) else {
        return;
    };
    let web = d.join("web.yml");
    let write = |text: &str| std::fs::write(&web, text).expect("write");
    write("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n");
    let w = Web::load(&web).expect("loads");
    assert_eq!(w.scheme(), "https");
    assert_eq!(w.describe(), "TLS");
    assert!(!w.authenticates());
    assert!(exposed(Some(&w)).is_some_and(|m| m.contains("TLS encrypts them")));
    write(&format!("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: b.crt\nbasic_auth_users:\n  alice: {ALICE}\n"));
    let w = Web::load(&web).expect("loads");
    assert_eq!(
        w.describe(),
        "TLS, client certificates, basic auth (1 user)"
    );
    assert!(w.authenticates() && exposed(Some(&w)).is_none());
    write("tls_server_config:\n  cert_file: a.crt\n  key_file: b.key\n");
    let e = Web::load(&web).expect_err("mismatch").to_string();
    assert!(
        e.ends_with("a.crt and ") || e.contains("the key does not match the certificate"),
        "{e}"
    );
    write("tls_server_config:\n  cert_file: a.key\n  key_file: a.key\n");
    let e = Web::load(&web).expect_err("no cert").to_string();
    assert!(e.contains("a.key: no certificate in it"), "{e}");
    write("tls_server_config:\n  cert_file: a.crt\n  key_file: a.crt\n");
    let e = Web::load(&web).expect_err("no key").to_string();
    assert!(e.contains("a.crt: no private key in it"), "{e}");
    write("tls_server_config:\n  cert_file: nope.crt\n  key_file: a.key\n");
    let e = Web::load(&web).expect_err("missing").to_string();
    assert!(e.contains("nope.crt: cannot read: "), "{e}");
    // A key others may change is refused as the config file would be.
    std::fs::set_permissions(
        d.join("a.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .expect("chmod");
    write("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n");
    let e = Web::load(&web).expect_err("0666").to_string();
    assert!(
        e.contains("a.key: refused: it is writable by group or others"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A malformed handshake gets a TLS alert and the end of the connection, never an HTTP
/// answer, at once.
#[test]
fn a_malformed_handshake_is_closed_with_an_alert() {
    use std::io::{Read, Write};
    let Some(d) = certs("alert", &["a"]) else {
        return;
    };
    let web = d.join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n",
    )
    .expect("write");
    let w = Web::load(&web).expect("loads");
    let server = super::super::serve::Server::bind_with(
        "127.0.0.1:0".parse::<std::net::SocketAddr>().expect("addr"),
        Some(w),
    )
    .expect("bind");
    let addr = server.local_addr().expect("tcp");
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    // A handshake record holding a ClientHello of length 0.
    c.write_all(b"\x16\x03\x01\x00\x04\x01\x00\x00\x00")
        .expect("write");
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    assert_eq!(got.first(), Some(&0x15), "not a TLS alert: {got:?}");
    assert!(!got.windows(4).any(|w| w == b"HTTP"), "{got:?}");
    drop(server);
    let _ = std::fs::remove_dir_all(&d);
}
