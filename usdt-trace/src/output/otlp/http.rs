//! `http://` endpoints and one HTTP/1.1 POST per batch over a plain `TcpStream` (no TLS: point
//! `--otlp` at a local collector or agent, which forwards over TLS if it needs to).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

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
    /// Unreachable, timed out, 429 or 5xx: worth retrying.
    Retry(String),
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// A response longer than this is not a collector's; stop reading.
const MAX_RESPONSE: u64 = 1 << 20;

/// POSTs `body` with `Connection: close` (one connection per batch: batches are seconds apart,
/// and reading to EOF needs no chunked-encoding parser).
pub fn post(ep: &Endpoint, content_type: &str, body: &[u8]) -> Posted {
    match try_post(ep, content_type, body) {
        Ok(code) if (200..300).contains(&code) => Posted::Ok,
        Ok(code) if code == 429 || code >= 500 => Posted::Retry(format!("HTTP {code}")),
        Ok(code) => Posted::Rejected(code),
        Err(e) => Posted::Retry(e.to_string()),
    }
}

fn try_post(ep: &Endpoint, content_type: &str, body: &[u8]) -> io::Result<u16> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    let mut stream = None;
    for addr in (ep.host.as_str(), ep.port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let mut s = stream.ok_or(last)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
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
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut resp = Vec::new();
    s.take(MAX_RESPONSE).read_to_end(&mut resp)?;
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
        assert!(matches!(post(&ep, "x", b""), Posted::Retry(_)));
    }
}
