//! `http://` endpoints and one HTTP/1.1 POST per batch over a plain `TcpStream` (no TLS: point
//! `--otlp` at a local collector or agent, which forwards over TLS if it needs to).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Where OTLP/HTTP requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub path: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UrlError {
    #[error("--otlp {0}: only http:// URLs are supported (no TLS; send to a local collector)")]
    Scheme(String),
    #[error("--otlp {0}: no host")]
    Host(String),
    #[error("--otlp {0}: bad port")]
    Port(String),
}

impl Endpoint {
    /// `http://host[:port][/path]`; port 4318 (OTLP/HTTP's) and path `/v1/traces` by default.
    pub fn parse(url: &str) -> Result<Endpoint, UrlError> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| UrlError::Scheme(url.to_string()))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let path = if path.is_empty() || path == "/" {
            "/v1/traces".to_string()
        } else {
            path.to_string()
        };
        // `[::1]:4318` or `host:4318` or `host`.
        let (host, port) = if let Some(r) = authority.strip_prefix('[') {
            let (h, after) = r
                .split_once(']')
                .ok_or_else(|| UrlError::Host(url.into()))?;
            (h, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() || host.contains('@') {
            return Err(UrlError::Host(url.to_string()));
        }
        let port = match port {
            None => 4318,
            Some(p) => p.parse().map_err(|_| UrlError::Port(url.to_string()))?,
        };
        Ok(Endpoint {
            host: host.to_string(),
            port,
            path,
        })
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "http://[{}]:{}{}", self.host, self.port, self.path)
        } else {
            write!(f, "http://{}:{}{}", self.host, self.port, self.path)
        }
    }
}

/// How a POST went.
#[derive(Debug)]
pub enum Posted {
    Ok,
    /// The collector refused the data itself (4xx other than 429): retrying cannot help.
    Rejected(u16),
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

/// POSTs `body` with `Connection: close` (one connection per batch: reading to EOF needs no
/// chunked-encoding parser; several batches go out at once on their own connections). Gives
/// up at `deadline`; `timed_out` is what reaching it is reported as.
pub fn post(
    ep: &Endpoint,
    content_type: &str,
    body: &[u8],
    deadline: Instant,
    timed_out: &str,
) -> Posted {
    let timed_out = |e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => timed_out.to_string(),
        _ => e.to_string(),
    };
    let mut s = match connect(ep, deadline) {
        Ok(s) => s,
        Err(e) => return Posted::Retry(timed_out(e)),
    };
    if let Err(e) = send(&mut s, ep, content_type, body, deadline) {
        return Posted::Retry(timed_out(e));
    }
    match answer(&mut s, deadline) {
        Ok(code) if (200..300).contains(&code) => Posted::Ok,
        Ok(code) if code == 429 || code >= 500 => Posted::Retry(format!("HTTP {code}")),
        Ok(code) => Posted::Rejected(code),
        Err(e) => Posted::Unanswered(timed_out(e)),
    }
}

/// `5 s`, `1.5 s`.
pub fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// What is left until `deadline`, or a timeout error once it has passed (a zero socket
/// timeout would mean none at all).
fn left(deadline: Instant) -> io::Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"))
    } else {
        Ok(d)
    }
}

fn connect(ep: &Endpoint, deadline: Instant) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for addr in (ep.host.as_str(), ep.port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT.min(left(deadline)?)) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn send(
    s: &mut TcpStream,
    ep: &Endpoint,
    content_type: &str,
    body: &[u8],
    deadline: Instant,
) -> io::Result<()> {
    let host = if ep.host.contains(':') {
        format!("[{}]", ep.host)
    } else {
        ep.host.clone()
    };
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {host}:{}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nUser-Agent: usdt-trace/{}\r\nConnection: close\r\n\r\n",
        ep.path,
        ep.port,
        body.len(),
        env!("CARGO_PKG_VERSION")
    );
    let mut rest: &[u8] = &[head.as_bytes(), body].concat();
    // Written in pieces so that the deadline holds for the whole body, not per write.
    while !rest.is_empty() {
        s.set_write_timeout(Some(left(deadline)?))?;
        let n = s.write(rest)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        rest = &rest[n..];
    }
    Ok(())
}

fn answer(s: &mut TcpStream, deadline: Instant) -> io::Result<u16> {
    let mut resp = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        s.set_read_timeout(Some(left(deadline)?))?;
        let n = s.read(&mut buf)?;
        if n == 0 || resp.len() as u64 > MAX_RESPONSE {
            break;
        }
        resp.extend_from_slice(&buf[..n]);
        // The status line is all that is needed.
        if resp.contains(&b'\n') {
            break;
        }
    }
    status_code(&resp)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no HTTP status line"))
}

/// `HTTP/1.1 200 OK` → 200.
fn status_code(resp: &[u8]) -> Option<u16> {
    let line = resp.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    parts.next().filter(|v| v.starts_with("HTTP/"))?;
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let e = Endpoint::parse("http://localhost:4318").unwrap();
        assert_eq!(
            e,
            Endpoint {
                host: "localhost".into(),
                port: 4318,
                path: "/v1/traces".into()
            }
        );
        assert_eq!(e.to_string(), "http://localhost:4318/v1/traces");
        let e = Endpoint::parse("http://10.0.0.1/otlp/v1/traces").unwrap();
        assert_eq!((e.port, e.path.as_str()), (4318, "/otlp/v1/traces"));
        let e = Endpoint::parse("http://[::1]:9000/").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 9000));
        assert_eq!(e.to_string(), "http://[::1]:9000/v1/traces");
        assert!(matches!(
            Endpoint::parse("https://x"),
            Err(UrlError::Scheme(_))
        ));
        assert!(matches!(
            Endpoint::parse("http://:80"),
            Err(UrlError::Host(_))
        ));
        assert!(matches!(
            Endpoint::parse("http://x:port"),
            Err(UrlError::Port(_))
        ));
        assert!(matches!(
            Endpoint::parse("http://x:70000"),
            Err(UrlError::Port(_))
        ));
    }

    #[test]
    fn status_lines() {
        assert_eq!(status_code(b"HTTP/1.1 200 OK\r\n\r\n"), Some(200));
        assert_eq!(status_code(b"HTTP/1.0 503 Busy\r\n"), Some(503));
        assert_eq!(status_code(b"garbage"), None);
        assert_eq!(status_code(b""), None);
    }

    #[test]
    fn post_to_a_closed_port_is_retried() {
        // Bind then drop: the port is (almost certainly) closed now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(1);
        let ep = Endpoint {
            host: "127.0.0.1".into(),
            port,
            path: "/v1/traces".into(),
        };
        let t = Duration::from_secs(1);
        let got = post(&ep, "x", b"", Instant::now() + t, "timed out");
        assert!(matches!(got, Posted::Retry(_)), "{got:?}");
    }

    /// A collector that reads the whole request and never answers: the spans may be there,
    /// so the POST is unanswered (not retried), and the timeout is said as the user set it.
    #[test]
    fn post_that_gets_no_answer_is_unanswered_and_says_the_timeout() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ep = Endpoint {
            host: "127.0.0.1".into(),
            port: l.local_addr().unwrap().port(),
            path: "/v1/traces".into(),
        };
        let held = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut all = Vec::new();
            let mut b = [0u8; 4096];
            while !all.ends_with(b"body") {
                let n = c.read(&mut b).unwrap();
                all.extend_from_slice(&b[..n]);
            }
            std::thread::sleep(Duration::from_millis(600));
            all
        });
        let t = Duration::from_millis(300);
        let started = Instant::now();
        let got = post(
            &ep,
            "x",
            b"body",
            Instant::now() + t,
            "timed out after 0.3 s",
        );
        let took = started.elapsed();
        match got {
            Posted::Unanswered(why) => assert_eq!(why, "timed out after 0.3 s"),
            other => panic!("{other:?}"),
        }
        assert!(took < Duration::from_millis(500), "{took:?}");
        assert!(held.join().unwrap().ends_with(b"\r\n\r\nbody"));
    }
}
