//! The endpoint (`http://` or `https://`) and one POST per batch, through `ureq` (HTTP/1.1,
//! keep-alive, rustls on ring for TLS; no OpenSSL). A POST is sorted into what it means for the
//! spans: delivered, refused (retrying cannot help), not delivered (retry) or sent whole
//! without an answer (never resent: the collector may have them).

use super::tls::{certificate_problem, CaCerts, TlsConnector};
use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Where OTLP/HTTP requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `https://`.
    pub tls: bool,
    pub host: String,
    pub port: u16,
    pub path: String,
}

/// A URL that is not one; `.0` is where it was given (`--otlp` or a variable's name).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UrlError {
    #[error("{0} {1}: only http:// and https:// URLs are supported")]
    Scheme(&'static str, String),
    #[error("{0} {1}: no host")]
    Host(&'static str, String),
    #[error("{0} {1}: bad port")]
    Port(&'static str, String),
    #[error("{0} {1}: control characters in a URL (a CR or LF would end the request line)")]
    Control(&'static str, String),
    #[error("{0} {1}: not a valid URL ({2})")]
    Invalid(&'static str, String, String),
}

impl Endpoint {
    /// `--otlp http[s]://host[:port][/path]`: port 4318 (OTLP/HTTP's) for http, 443 for
    /// https; path `/v1/traces` when there is none.
    pub fn parse_flag(url: &str) -> Result<Endpoint, UrlError> {
        let mut e = Endpoint::parse("--otlp", url, 4318)?;
        if e.path.is_empty() || e.path == "/" {
            e.path = "/v1/traces".to_string();
        }
        Ok(e)
    }

    /// A URL from the SDKs' environment, with a URL's own default ports (80, 443). `base`:
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, to which `/v1/traces` is appended; else
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, used as is (`/` if it has no path).
    pub fn parse_env(var: &'static str, url: &str, base: bool) -> Result<Endpoint, UrlError> {
        let mut e = Endpoint::parse(var, url, 80)?;
        if base {
            e.path = format!("{}/v1/traces", e.path.trim_end_matches('/'));
        } else if e.path.is_empty() {
            e.path = "/".to_string();
        }
        Ok(e)
    }

    /// The path as given (maybe empty).
    fn parse(src: &'static str, given: &str, http_port: u16) -> Result<Endpoint, UrlError> {
        // Errors show the URL escaped: it may hold anything, and they go to a terminal.
        let url = &*crate::util::terminal::clean(given);
        if given.chars().any(char::is_control) {
            return Err(UrlError::Control(src, url.to_string()));
        }
        let (tls, rest) = if let Some(r) = given.strip_prefix("http://") {
            (false, r)
        } else if let Some(r) = given.strip_prefix("https://") {
            (true, r)
        } else {
            return Err(UrlError::Scheme(src, url.to_string()));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        // `[::1]:4318` or `host:4318` or `host`.
        let (host, port) = if let Some(r) = authority.strip_prefix('[') {
            let (h, after) = r
                .split_once(']')
                .ok_or_else(|| UrlError::Host(src, url.into()))?;
            match after {
                "" => (h, None),
                a => (
                    h,
                    Some(
                        a.strip_prefix(':')
                            .ok_or_else(|| UrlError::Port(src, url.into()))?,
                    ),
                ),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() || host.contains(['@', ' ']) {
            return Err(UrlError::Host(src, url.to_string()));
        }
        let port = match port {
            None if tls => 443,
            None => http_port,
            Some(p) => p
                .parse()
                .map_err(|_| UrlError::Port(src, url.to_string()))?,
        };
        let ep = Endpoint {
            tls,
            host: host.to_string(),
            port,
            path: path.to_string(),
        };
        // What ureq would refuse at every POST is refused now, once: a run that cannot send
        // a span must not look like one that sent them all.
        if let Err(e) = ep.to_string().parse::<ureq::http::Uri>() {
            return Err(UrlError::Invalid(src, url.to_string(), e.to_string()));
        }
        if tls && rustls::pki_types::ServerName::try_from(ep.host.as_str()).is_err() {
            return Err(UrlError::Host(src, url.to_string()));
        }
        Ok(ep)
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        if self.host.contains(':') {
            write!(f, "{scheme}://[{}]:{}{}", self.host, self.port, self.path)
        } else {
            write!(f, "{scheme}://{}:{}{}", self.host, self.port, self.path)
        }
    }
}

/// How a POST went.
#[derive(Debug)]
pub enum Posted {
    Ok,
    /// Refused, and retrying cannot help: the collector refused the data itself (4xx other
    /// than 429: `HTTP 400`), or its TLS certificate was not accepted.
    Rejected(String),
    /// Not delivered — unreachable, cut before the whole body was written, 429 or 5xx (the
    /// collector answered that it did not take it): sending it again cannot duplicate it.
    Retry(String),
    /// Sent whole but no answer came (timed out, or the connection closed first): the
    /// collector may have the spans, so sending them again could duplicate them.
    Unanswered(String),
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A response longer than this is not a collector's; stop reading.
const MAX_RESPONSE: u64 = 1 << 20;

/// One collector: the connection pool, TLS roots and what every request carries. Shared by
/// the sender threads (each POST on its own connection; idle ones are kept for the next).
pub struct Client {
    agent: ureq::Agent,
    url: String,
    headers: Vec<(String, String)>,
    gzip: bool,
}

impl Client {
    /// `ca`: trust only these; else the system's certificate store (Mozilla's roots, built
    /// in, when it has none).
    pub fn new(
        ep: &Endpoint,
        ca: Option<&CaCerts>,
        headers: Vec<(String, String)>,
        gzip: bool,
    ) -> Result<Client, String> {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .user_agent(format!("usdt-trace/{}", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(CONNECT_TIMEOUT))
            // One kept per sender thread (ureq keeps 3 by default).
            .max_idle_connections_per_host(8)
            .build();
        let agent = if ep.tls {
            // ureq's chain (a CONNECT proxy when the environment names one, then TCP) with our
            // TLS on top: its own builds a verifier from root certificates alone.
            use ureq::unversioned::resolver::DefaultResolver;
            use ureq::unversioned::transport::{ConnectProxyConnector, Connector, TcpConnector};
            let connector =
                ().chain(ConnectProxyConnector::default())
                    .chain(TcpConnector::default())
                    .chain(TlsConnector::new(&ep.host, ca)?);
            ureq::Agent::with_parts(config, connector, DefaultResolver::default())
        } else {
            config.new_agent()
        };
        Ok(Client {
            agent,
            url: ep.to_string(),
            headers,
            gzip,
        })
    }

    /// The body as sent: gzipped when asked.
    pub fn encode(&self, body: Vec<u8>) -> Vec<u8> {
        if !self.gzip {
            return body;
        }
        let mut gz = flate2::write::GzEncoder::new(
            Vec::with_capacity(body.len() / 4),
            flate2::Compression::fast(),
        );
        match io::Write::write_all(&mut gz, &body).and_then(|_| gz.finish()) {
            Ok(z) => z,
            // Writing to a Vec does not fail.
            Err(_) => body,
        }
    }

    /// POSTs `body` (already [`Client::encode`]d). Gives up at `deadline`; `timed_out` is
    /// what reaching it is reported as.
    pub fn post(
        &self,
        content_type: &str,
        body: &[u8],
        deadline: Instant,
        timed_out: &str,
    ) -> Posted {
        let Some(left) = left(deadline) else {
            return Posted::Retry(timed_out.to_string());
        };
        let mut req = self
            .agent
            .post(&self.url)
            .config()
            .timeout_global(Some(left))
            .timeout_connect(Some(CONNECT_TIMEOUT.min(left)))
            .build()
            .header("Content-Type", content_type)
            .header("Content-Length", body.len());
        if self.gzip {
            req = req.header("Content-Encoding", "gzip");
        }
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let sent = AtomicBool::new(false);
        let mut reader = Whole {
            rest: body,
            sent: &sent,
        };
        let res = req.send(ureq::SendBody::from_reader(&mut reader));
        let sent = sent.load(Ordering::Relaxed);
        match res {
            Ok(mut resp) => {
                let code = resp.status().as_u16();
                // Read the (small) answer whole so that the connection can serve the next.
                let _ = resp
                    .body_mut()
                    .with_config()
                    .limit(MAX_RESPONSE)
                    .read_to_vec();
                match code {
                    200..=299 => Posted::Ok,
                    429 | 500.. => Posted::Retry(format!("HTTP {code}")),
                    _ => Posted::Rejected(format!("HTTP {code}")),
                }
            }
            Err(e) => failed(e, sent, timed_out),
        }
    }
}

/// The body, noting when its last byte has been taken: ureq writes each piece it reads to the
/// connection before it reads the next, and the last one right after it is taken. A POST
/// that fails after that went out whole (or, seldom, failed writing its last piece): it is
/// not resent, as the collector may have it.
struct Whole<'a> {
    rest: &'a [u8],
    sent: &'a AtomicBool,
}

impl Read for Whole<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.rest.len().min(buf.len());
        buf[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        if self.rest.is_empty() {
            self.sent.store(true, Ordering::Relaxed);
        }
        Ok(n)
    }
}

/// A failed POST: a certificate that is not accepted is refused (trying again cannot help);
/// otherwise it was delivered whole (`sent`: unanswered) or not (retry).
fn failed(e: ureq::Error, sent: bool, timed_out: &str) -> Posted {
    if let Some(why) = certificate_problem(&e) {
        return Posted::Rejected(why);
    }
    let why = match &e {
        ureq::Error::Timeout(_) => timed_out.to_string(),
        ureq::Error::Io(io) if matches!(io.kind(), io::ErrorKind::TimedOut) => {
            timed_out.to_string()
        }
        ureq::Error::HostNotFound => "host not found".to_string(),
        ureq::Error::Io(io) => io.to_string(),
        e => e.to_string(),
    };
    if sent {
        Posted::Unanswered(why)
    } else {
        Posted::Retry(why)
    }
}

/// `5 s`, `1.5 s`.
pub fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// What is left until `deadline`, `None` once it has passed.
fn left(deadline: Instant) -> Option<Duration> {
    Some(deadline.saturating_duration_since(Instant::now())).filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(port: u16) -> Endpoint {
        Endpoint {
            tls: false,
            host: "127.0.0.1".into(),
            port,
            path: "/v1/traces".into(),
        }
    }

    #[test]
    fn urls() {
        let e = Endpoint::parse_flag("http://localhost:4318").unwrap();
        assert_eq!(
            e,
            Endpoint {
                tls: false,
                host: "localhost".into(),
                port: 4318,
                path: "/v1/traces".into()
            }
        );
        assert_eq!(e.to_string(), "http://localhost:4318/v1/traces");
        let e = Endpoint::parse_flag("http://10.0.0.1/otlp/v1/traces").unwrap();
        assert_eq!((e.port, e.path.as_str()), (4318, "/otlp/v1/traces"));
        let e = Endpoint::parse_flag("http://[::1]:9000/").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 9000));
        assert_eq!(e.to_string(), "http://[::1]:9000/v1/traces");
        let e = Endpoint::parse_flag("https://api.example.com").unwrap();
        assert!(e.tls);
        assert_eq!(e.to_string(), "https://api.example.com:443/v1/traces");
        let e = Endpoint::parse_flag("https://[::1]/x?k=v").unwrap();
        assert_eq!(e.to_string(), "https://[::1]:443/x?k=v");
        assert_eq!(
            Endpoint::parse_flag("ftp://x").unwrap_err().to_string(),
            "--otlp ftp://x: only http:// and https:// URLs are supported"
        );
        assert!(matches!(
            Endpoint::parse_flag("localhost:4318"),
            Err(UrlError::Scheme(..))
        ));
        assert!(matches!(
            Endpoint::parse_flag("http://:80"),
            Err(UrlError::Host(..))
        ));
        assert!(matches!(
            Endpoint::parse_flag("http://user@x"),
            Err(UrlError::Host(..))
        ));
        assert!(matches!(
            Endpoint::parse_flag("http://x:port"),
            Err(UrlError::Port(..))
        ));
        assert!(matches!(
            Endpoint::parse_flag("http://x:70000"),
            Err(UrlError::Port(..))
        ));
        assert!(matches!(
            Endpoint::parse_flag("http://[::1]x"),
            Err(UrlError::Port(..))
        ));
    }

    /// A CR/LF (or any control character) in the endpoint is refused at start, the URL shown
    /// escaped on the one line; so is what ureq would refuse at every POST. Before, the run
    /// started, every POST failed, and it exited 0.
    #[test]
    fn urls_that_no_post_could_use_are_refused_at_start() {
        for (url, says) in [
            (
                "http://127.0.0.1:4318/v1/traces\r\nX-Injected: 1",
                "--otlp http://127.0.0.1:4318/v1/traces\\u{d}\\u{a}X-Injected: 1: control characters in a URL (a CR or LF would end the request line)",
            ),
            (
                "http://x/\u{1b}]0;t\u{7}",
                "--otlp http://x/\\u{1b}]0;t\\u{7}: control characters in a URL (a CR or LF would end the request line)",
            ),
            ("http://x/a b", "--otlp http://x/a b: not a valid URL ("),
            ("http://x\"y/", "--otlp http://x\"y/: not a valid URL ("),
            ("https://a_b!/", "--otlp https://a_b!/: no host"),
        ] {
            let e = Endpoint::parse_flag(url).unwrap_err().to_string();
            assert!(e.starts_with(says), "{url:?}: {e}");
            assert!(!e.chars().any(char::is_control), "{e:?}");
        }
        let e = Endpoint::parse_env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x\n", true);
        assert!(matches!(e, Err(UrlError::Control(..))), "{e:?}");
    }

    #[test]
    fn gzip_is_applied_when_asked() {
        let body = vec![7u8; 10_000];
        let plain = Client::new(&ep(1), None, vec![], false).unwrap();
        assert_eq!(plain.encode(body.clone()), body);
        let gz = Client::new(&ep(1), None, vec![], true)
            .unwrap()
            .encode(body.clone());
        assert!(
            gz.len() < 200 && gz.starts_with(&[0x1f, 0x8b]),
            "{}",
            gz.len()
        );
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(gz.as_slice())
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, body);
    }

    #[test]
    fn post_to_a_closed_port_is_retried() {
        // Bind then drop: the port is (almost certainly) closed now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(1);
        let c = Client::new(&ep(port), None, vec![], false).unwrap();
        let t = Duration::from_secs(1);
        let got = c.post("x", b"", Instant::now() + t, "timed out");
        assert!(matches!(got, Posted::Retry(_)), "{got:?}");
    }

    /// A collector that reads the whole request and never answers: the spans may be there,
    /// so the POST is unanswered (not retried), and the timeout is said as the user set it.
    /// The headers asked for are sent.
    #[test]
    fn post_that_gets_no_answer_is_unanswered_and_says_the_timeout() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let held = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut all = Vec::new();
            let mut b = [0u8; 4096];
            while !all.ends_with(b"body") {
                let n = c.read(&mut b).unwrap();
                all.extend_from_slice(&b[..n]);
            }
            std::thread::sleep(Duration::from_millis(600));
            String::from_utf8(all).unwrap()
        });
        let headers = vec![("x-api-key".to_string(), "s3cret".to_string())];
        let c = Client::new(&ep(port), None, headers, false).unwrap();
        let t = Duration::from_millis(300);
        let started = Instant::now();
        let got = c.post("x", b"body", Instant::now() + t, "timed out after 0.3 s");
        let took = started.elapsed();
        match got {
            Posted::Unanswered(why) => assert_eq!(why, "timed out after 0.3 s"),
            other => panic!("{other:?}"),
        }
        assert!(took < Duration::from_millis(500), "{took:?}");
        let req = held.join().unwrap();
        assert!(req.starts_with("POST /v1/traces HTTP/1.1\r\n"), "{req}");
        let lower = req.to_ascii_lowercase();
        assert!(lower.contains("\r\nx-api-key: s3cret\r\n"), "{req}");
        assert!(lower.contains("\r\ncontent-length: 4\r\n"), "{req}");
        assert!(!lower.contains("transfer-encoding"), "{req}");
        assert!(req.ends_with("\r\n\r\nbody"), "{req}");
    }

    /// Statuses: 2xx delivered, 429 and 5xx retried, any other refused.
    #[test]
    fn statuses_are_sorted() {
        for (status, want) in [
            (200, "Ok"),
            (503, "Retry"),
            (429, "Retry"),
            (400, "Rejected"),
        ] {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let t = std::thread::spawn(move || {
                let (mut c, _) = l.accept().unwrap();
                let mut all = Vec::new();
                let mut b = [0u8; 4096];
                while !all.ends_with(b"body") {
                    let n = c.read(&mut b).unwrap();
                    all.extend_from_slice(&b[..n]);
                }
                let _ = io::Write::write_all(
                    &mut c,
                    format!("HTTP/1.1 {status} X\r\nContent-Length: 2\r\n\r\nok").as_bytes(),
                );
            });
            let c = Client::new(&ep(port), None, vec![], false).unwrap();
            let got = c.post("x", b"body", Instant::now() + Duration::from_secs(5), "t");
            t.join().unwrap();
            assert!(format!("{got:?}").starts_with(want), "{status}: {got:?}");
        }
    }
}
