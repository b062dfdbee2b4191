//! The `/metrics` endpoint: a `TcpListener` on a thread of its own that hands each scrape to
//! `watch`'s loop, which reads the kernel maps and answers (the maps are read in one place,
//! by the thread that owns the tracer). One connection at a time, each bounded in size and
//! time, so a slow or hostile client costs at most [`CLIENT_TIMEOUT`] of the endpoint and
//! nothing of the tracing.

use crate::wake::Wake;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest request head read; anything longer is refused (a scrape's is a few hundred bytes).
pub const MAX_REQUEST: usize = 8192;
/// How long a client has to send its request, and each write of the answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a scrape waits for `watch`'s loop (which answers between batches, every 50 ms).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--prometheus {0:?}: expected HOST:PORT, e.g. 127.0.0.1:9435 or [::]:9435")]
    Addr(String),
    #[error("--prometheus {addr}: cannot listen: {source}")]
    Bind { addr: String, source: io::Error },
}

/// `HOST:PORT` (a name is resolved once, its first address used).
pub fn parse_addr(s: &str) -> Result<SocketAddr, ServeError> {
    s.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| ServeError::Addr(s.to_string()))
}

/// A scrape waiting for its answer.
pub struct Scrape {
    reply: SyncSender<String>,
}

impl Scrape {
    /// Sends the exposition back to the client (dropped if it has given up).
    pub fn answer(self, body: String) {
        let _ = self.reply.send(body);
    }
}

/// The listening endpoint; dropping it stops the thread.
pub struct Server {
    requests: Receiver<Scrape>,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// The connection being served, so that stopping need not wait out its timeouts.
    current: Arc<Mutex<Option<TcpStream>>>,
    thread: Option<JoinHandle<()>>,
    /// Rung when a scrape is queued: for the owner's poll ([`Server::wake_fd`]).
    wake: Arc<Wake>,
}

impl Server {
    pub fn bind(addr: SocketAddr) -> Result<Server, ServeError> {
        let listener = TcpListener::bind(addr).map_err(|source| ServeError::Bind {
            addr: addr.to_string(),
            source,
        })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: addr.to_string(),
            source,
        })?;
        // One scrape in flight: the thread serves one connection at a time.
        let (tx, requests) = mpsc::sync_channel(1);
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let current: Arc<Mutex<Option<TcpStream>>> = Arc::default();
        let current2 = current.clone();
        let wake = Arc::new(Wake::new().map_err(|source| ServeError::Bind {
            addr: addr.to_string(),
            source,
        })?);
        let wake2 = wake.clone();
        let thread = std::thread::Builder::new()
            .name("prometheus".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::Relaxed) {
                        break;
                    }
                    // Accept errors (a reset before accept, out of descriptors) end only
                    // that connection.
                    if let Ok(c) = conn {
                        if let Ok(mut slot) = current2.lock() {
                            *slot = c.try_clone().ok();
                        }
                        let _ = handle(c, &tx, &wake2);
                        if let Ok(mut slot) = current2.lock() {
                            *slot = None;
                        }
                    }
                }
            })
            .map_err(|source| ServeError::Bind {
                addr: addr.to_string(),
                source,
            })?;
        Ok(Server {
            requests,
            addr,
            stop,
            current,
            thread: Some(thread),
            wake,
        })
    }

    /// Where it listens (the port the kernel chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Readable while a scrape waits: for a poll that should end when one comes.
    pub fn wake_fd(&self) -> i32 {
        self.wake.fd()
    }

    /// A scrape waiting to be answered, if any.
    pub fn pending(&self) -> Option<Scrape> {
        // Cleared before the queue is read: a scrape queued after this rings it again.
        self.wake.clear();
        self.requests.try_recv().ok()
    }

    /// Waits up to `timeout` for a scrape.
    pub fn wait(&self, timeout: Duration) -> Option<Scrape> {
        self.wake.clear();
        self.requests.recv_timeout(timeout).ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // A client being served is cut off (a slow one would hold the join for its whole
        // timeout), a scrape waiting for its answer gets none (503), and the accept is woken.
        if let Some(c) = self.current.lock().ok().and_then(|mut c| c.take()) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        drop(std::mem::replace(
            &mut self.requests,
            mpsc::sync_channel(1).1,
        ));
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The request line's method and path, once the head is complete; Err when it is not a
/// request at all.
pub fn request_line(head: &[u8]) -> Option<(&str, &str)> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let mut parts = line.split(' ');
    let method = parts.next()?;
    let target = parts.next()?;
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return None;
    }
    let path = target.split('?').next().unwrap_or(target);
    Some((method, path))
}

/// Reads the request head (up to the blank line) within the size and time bounds.
fn read_head(c: &mut TcpStream) -> io::Result<Vec<u8>> {
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        c.set_read_timeout(Some(left))?;
        let n = c.read(&mut buf)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST {
            return Err(io::ErrorKind::InvalidData.into());
        }
    }
    Ok(head)
}

fn respond(
    c: &mut TcpStream,
    status: &str,
    ctype: &str,
    body: &str,
    head_only: bool,
) -> io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    c.write_all(&out)?;
    c.flush()
}

fn handle(mut c: TcpStream, tx: &SyncSender<Scrape>, wake: &Wake) -> io::Result<()> {
    c.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let head = match read_head(&mut c) {
        Ok(h) => h,
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            return respond(
                &mut c,
                "431 Request Header Fields Too Large",
                "text/plain",
                "request too large\n",
                false,
            );
        }
        Err(e) => return Err(e),
    };
    let text = "text/plain; charset=utf-8";
    let Some((method, path)) = request_line(&head) else {
        return respond(&mut c, "400 Bad Request", text, "bad request\n", false);
    };
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return respond(&mut c, "405 Method Not Allowed", text, "only GET\n", false);
    }
    match path {
        "/metrics" => {
            let (reply, answer) = mpsc::sync_channel(1);
            let body = tx.send(Scrape { reply }).ok().and_then(|()| {
                // The owner's poll ends now, not at its next timeout.
                wake.ring();
                answer.recv_timeout(ANSWER_TIMEOUT).ok()
            });
            match body {
                Some(b) => respond(&mut c, "200 OK", super::CONTENT_TYPE, &b, head_only),
                None => respond(
                    &mut c,
                    "503 Service Unavailable",
                    text,
                    "tracing has stopped\n",
                    head_only,
                ),
            }
        }
        "/" => respond(
            &mut c,
            "200 OK",
            text,
            "usdt-trace: metrics at /metrics\n",
            head_only,
        ),
        _ => respond(
            &mut c,
            "404 Not Found",
            text,
            "not found; metrics are at /metrics\n",
            head_only,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        assert_eq!(
            request_line(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(("GET", "/metrics"))
        );
        assert_eq!(
            request_line(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Some(("GET", "/metrics"))
        );
        assert_eq!(request_line(b"GET /metrics\r\n\r\n"), None);
        assert_eq!(request_line(b"\x16\x03\x01 tls"), None);
    }

    fn get(addr: SocketAddr, req: &[u8]) -> String {
        let mut c = TcpStream::connect(addr).expect("connect");
        c.write_all(req).expect("write");
        let mut s = String::new();
        c.read_to_string(&mut s).expect("read");
        s
    }

    #[test]
    fn serves_scrapes_from_the_owner_and_refuses_the_rest() {
        let server = Server::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = server.local_addr();
        let owner = std::thread::spawn(move || {
            // The owner answers two scrapes, as watch's loop does between batches.
            let mut n = 0;
            while n < 2 {
                match server.pending() {
                    Some(s) => {
                        n += 1;
                        s.answer(format!("m {n}\n"));
                    }
                    None => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            server
        });
        let r = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
        assert!(r.ends_with("\r\n\r\nm 1\n"), "{r}");
        let r = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(r.ends_with("m 2\n"), "{r}");
        assert!(get(addr, b"GET /x HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(get(addr, b"nonsense\r\n\r\n").starts_with("HTTP/1.1 400"));
        let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_REQUEST + 10));
        assert!(get(addr, &big).starts_with("HTTP/1.1 431"));
        let server = owner.join().expect("owner");
        // A client that sends nothing does not hold up stopping for its 5 s.
        let _slow = TcpStream::connect(addr).expect("connect");
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        drop(server);
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        // Dropping it stops listening.
        assert!(TcpStream::connect(addr).is_err());
    }

    #[test]
    fn bad_addresses() {
        assert!(matches!(parse_addr("nonsense"), Err(ServeError::Addr(_))));
        assert!(parse_addr("127.0.0.1:9435").is_ok());
        let a = Server::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let e = Server::bind(a.local_addr()).err().expect("in use");
        assert!(e.to_string().contains("cannot listen"), "{e}");
    }
}
