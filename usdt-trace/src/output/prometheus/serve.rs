//! The `/metrics` endpoint: a listener on a thread of its own that hands each scrape to its
//! owner (`watch`'s loop, or `serve`'s), which reads the kernel maps and answers (the maps are
//! read in one place, by the thread that owns the tracer). Each connection is served on a
//! thread of its own, at most [`MAX_CONNECTIONS`] at once, each bounded in size and time: a
//! slow or hostile client (one dripping its request, one never reading its answer) costs its
//! own connection and never delays another's scrape, nor the tracing. With a web config
//! ([`super::web`]) a connection is TLS (its handshake under the request head's deadline) and
//! a request without the right credentials gets a 401.

use super::listen::{poke, Conn, ListenAddr, Listener};
use super::stream::Stream;
use super::web::{self, Verdict, Web};
use crate::util::wake::Wake;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest request head read; anything longer is refused (a scrape's is a few hundred bytes).
pub const MAX_REQUEST: usize = 8192;
/// How long a client has to send its whole request head.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the whole answer may take to write: Prometheus' default `scrape_timeout`, after
/// which it has given up on the scrape anyway. A client that stops reading is cut off then.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a scrape waits for its owner (`watch` answers between batches, every 50 ms).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once. At the bound, one is cut off for the new one: the one that has
/// waited longest for its request head (a real scrape sends its head at once), else the
/// oldest (a real scrape is answered in milliseconds). So a new scrape always gets in, and
/// clients holding every connection (dripping, or never reading) cannot lock it out.
pub const MAX_CONNECTIONS: usize = 32;

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
    reply: SyncSender<Arc<String>>,
}

impl Scrape {
    /// Sends the exposition back to the client (dropped if it has given up).
    pub fn answer(self, body: String) {
        self.answer_shared(Arc::new(body));
    }

    /// The same exposition for several scrapes that waited together: rendered once, one copy.
    pub fn answer_shared(self, body: Arc<String>) {
        let _ = self.reply.send(body);
    }
}

/// What a connection is doing, for choosing which one to cut off at the bound.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Head,
    Answer,
}

/// The connections being served: a handle on each, to cut one off at the bound or all of
/// them when the server stops (a slow one would otherwise live out its timeouts).
#[derive(Default)]
struct Conns {
    next: u64,
    open: Vec<(u64, Conn, Instant, Phase)>,
}

type Shared = Arc<Mutex<Conns>>;

/// The web config in force: each new connection takes the one current when it is accepted
/// (`serve`'s reload replaces it; connections already open keep theirs).
type SharedWeb = Arc<Mutex<Option<Arc<Web>>>>;

fn set_phase(conns: &Shared, id: u64, p: Phase) {
    if let Ok(mut c) = conns.lock() {
        if let Some(e) = c.open.iter_mut().find(|e| e.0 == id) {
            e.3 = p;
        }
    }
}

/// The listening endpoint; dropping it stops the thread and cuts off every client.
pub struct Server {
    requests: Receiver<Scrape>,
    addr: ListenAddr,
    stop: Arc<AtomicBool>,
    conns: Shared,
    web: SharedWeb,
    thread: Option<JoinHandle<()>>,
    /// Rung when a scrape is queued: for the owner's poll ([`Server::wake_fd`]).
    wake: Arc<Wake>,
}

impl Server {
    /// Plain HTTP, no authentication.
    pub fn bind(addr: impl Into<ListenAddr>) -> Result<Server, ServeError> {
        Server::bind_with(addr, None)
    }

    /// With a web config: TLS and/or basic auth as it says.
    pub fn bind_with(
        addr: impl Into<ListenAddr>,
        web: Option<Arc<Web>>,
    ) -> Result<Server, ServeError> {
        let addr = addr.into();
        let bind_err = |source| ServeError::Bind {
            addr: addr.to_string(),
            source,
        };
        let (listener, local) = Listener::bind(&addr).map_err(bind_err)?;
        // Room for a scrape from every connection: queuing one never blocks its thread.
        let (tx, requests) = mpsc::sync_channel(MAX_CONNECTIONS);
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Shared = Arc::default();
        let wake = Arc::new(Wake::new().map_err(bind_err)?);
        let web: SharedWeb = Arc::new(Mutex::new(web));
        let (stop2, conns2, wake2, web2) = (stop.clone(), conns.clone(), wake.clone(), web.clone());
        let thread = std::thread::Builder::new()
            .name("prometheus".into())
            .spawn(move || accept_loop(listener, &stop2, &conns2, tx, wake2, &web2))
            .map_err(bind_err)?;
        Ok(Server {
            requests,
            addr: local,
            stop,
            conns,
            web,
            thread: Some(thread),
            wake,
        })
    }

    /// The TCP address it listens on (the port the kernel chose for port 0); None for a
    /// Unix socket.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.addr {
            ListenAddr::Tcp(a) => Some(*a),
            ListenAddr::Unix(_) => None,
        }
    }

    /// Where it listens, TCP or Unix socket.
    pub fn listen_addr(&self) -> &ListenAddr {
        &self.addr
    }

    /// The URL a scrape would use (`https://` with TLS), for the log.
    pub fn url(&self) -> String {
        let url = self.addr.url();
        match self.web() {
            Some(w) if w.tls.is_some() => url.replacen("http://", "https://", 1),
            _ => url,
        }
    }

    /// The web config in force.
    pub fn web(&self) -> Option<Arc<Web>> {
        self.web.lock().ok().and_then(|w| w.clone())
    }

    /// Replaces the web config for the connections accepted from now on (a reload: new
    /// users, a renewed certificate).
    pub fn set_web(&self, web: Option<Arc<Web>>) {
        if let Ok(mut w) = self.web.lock() {
            *w = web;
        }
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
        // Every client being served is cut off (a slow one would live out its timeouts), a
        // scrape waiting for its answer gets none (503), and the accept is woken.
        if let Ok(mut c) = self.conns.lock() {
            for (_, conn, _, _) in c.open.drain(..) {
                conn.shutdown();
            }
        }
        drop(std::mem::replace(
            &mut self.requests,
            mpsc::sync_channel(1).1,
        ));
        poke(&self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(
    listener: Listener,
    stop: &AtomicBool,
    conns: &Shared,
    tx: SyncSender<Scrape>,
    wake: Arc<Wake>,
    web: &SharedWeb,
) {
    loop {
        let conn = listener.accept();
        if stop.load(Ordering::Relaxed) {
            break;
        }
        // Accept errors (a reset before accept, out of descriptors) end only that connection;
        // a pause keeps a persistent one (EMFILE) from spinning.
        let Ok(c) = conn else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let Some(id) = admit(conns, &c) else {
            c.shutdown();
            continue;
        };
        let (tx, wake, conns2) = (tx.clone(), wake.clone(), conns.clone());
        let web = web.lock().ok().and_then(|w| w.clone());
        let spawned = std::thread::Builder::new()
            .name("prometheus-conn".into())
            .spawn(move || {
                let _ = handle(c, id, &conns2, &tx, &wake, web.as_deref());
                if let Ok(mut cs) = conns2.lock() {
                    cs.open.retain(|e| e.0 != id);
                }
            });
        if spawned.is_err() {
            if let Ok(mut cs) = conns.lock() {
                if let Some(i) = cs.open.iter().position(|e| e.0 == id) {
                    cs.open.remove(i).1.shutdown();
                }
            }
        }
    }
}

/// Registers a new connection within [`MAX_CONNECTIONS`], cutting one off if need be (see
/// there which).
fn admit(conns: &Shared, c: &Conn) -> Option<u64> {
    let mut cs = conns.lock().ok()?;
    if cs.open.len() >= MAX_CONNECTIONS {
        let victim = cs
            .open
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| (e.3 != Phase::Head, e.2))
            .map(|(i, _)| i)?;
        cs.open.remove(victim).1.shutdown();
    }
    let id = cs.next;
    cs.next += 1;
    let handle = c.try_clone().ok()?;
    cs.open.push((id, handle, Instant::now(), Phase::Head));
    Some(id)
}

/// The request line's method and path, once the head is complete; None when it is not a
/// request at all. An absolute-form target (`http://host:port/metrics`, what a proxy is sent)
/// is its path.
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
    let target = match target.split_once("://") {
        Some((scheme, rest))
            if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") =>
        {
            rest.find('/').map_or("/", |i| &rest[i..])
        }
        _ => target,
    };
    let path = target.split('?').next().unwrap_or(target);
    Some((method, path))
}

/// Reads the request head (up to the blank line) within the size and time bounds.
fn read_head(c: &mut Stream, deadline: Instant) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = c.read_by(&mut buf, deadline)?;
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
    c: &mut Stream,
    status: &str,
    headers: &str,
    body: &str,
    head_only: bool,
) -> io::Result<()> {
    let deadline = Instant::now() + WRITE_TIMEOUT;
    let top = format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    c.write_all_by(top.as_bytes(), deadline)?;
    if !head_only {
        c.write_all_by(body.as_bytes(), deadline)?;
    }
    c.finish(deadline);
    Ok(())
}

fn handle(
    c: Conn,
    id: u64,
    conns: &Shared,
    tx: &SyncSender<Scrape>,
    wake: &Wake,
    web: Option<&Web>,
) -> io::Result<()> {
    let text = "Content-Type: text/plain; charset=utf-8\r\n";
    // One deadline for the TLS handshake and the request head together.
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let tls = web.and_then(|w| w.tls.as_ref()).map(|t| &t.config);
    let mut c = Stream::open(c, tls, deadline)?;
    let head = match read_head(&mut c, deadline) {
        Ok(h) => h,
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            return respond(
                &mut c,
                "431 Request Header Fields Too Large",
                text,
                "request too large\n",
                false,
            );
        }
        Err(e) => return Err(e),
    };
    set_phase(conns, id, Phase::Answer);
    let Some((method, path)) = request_line(&head) else {
        return respond(&mut c, "400 Bad Request", text, "bad request\n", false);
    };
    // Every path, before anything else is said (as exporter-toolkit does).
    if let Some(auth) = web.and_then(|w| w.auth.as_ref()) {
        if auth.check(web::authorization(&head)) == Verdict::Refused {
            return respond(
                &mut c,
                "401 Unauthorized",
                &format!("WWW-Authenticate: Basic realm=\"usdt-trace\"\r\n{text}"),
                "unauthorized\n",
                method == "HEAD",
            );
        }
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return respond(
            &mut c,
            "405 Method Not Allowed",
            &format!("Allow: GET, HEAD\r\n{text}"),
            "only GET and HEAD\n",
            false,
        );
    }
    match path {
        "/metrics" => {
            let (reply, answer) = mpsc::sync_channel(1);
            let body = tx.try_send(Scrape { reply }).ok().and_then(|()| {
                // The owner's poll ends now, not at its next timeout.
                wake.ring();
                answer.recv_timeout(ANSWER_TIMEOUT).ok()
            });
            match body {
                Some(b) => respond(
                    &mut c,
                    "200 OK",
                    &format!("Content-Type: {}\r\n", super::CONTENT_TYPE),
                    &b,
                    head_only,
                ),
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
    use std::io::{Read, Write};
    use std::net::TcpStream;

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
        // Absolute form, as a client speaking to a proxy sends it.
        assert_eq!(
            request_line(b"GET http://127.0.0.1:9435/metrics?x HTTP/1.1\r\n\r\n"),
            Some(("GET", "/metrics"))
        );
        assert_eq!(
            request_line(b"GET HTTP://h HTTP/1.1\r\n\r\n"),
            Some(("GET", "/"))
        );
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
        let server =
            Server::bind("127.0.0.1:0".parse::<SocketAddr>().expect("addr")).expect("bind");
        let addr = server.local_addr().expect("tcp");
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
        let r = get(addr, b"POST /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 405"), "{r}");
        assert!(r.contains("\r\nAllow: GET, HEAD\r\n"), "{r}");
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

    /// Answers every scrape with `body` until dropped, as an owner's loop does.
    fn owner(server: Server, body: String) -> (Arc<AtomicBool>, JoinHandle<Server>) {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let t = std::thread::spawn(move || {
            let body = Arc::new(body);
            while !s2.load(Ordering::Relaxed) {
                if let Some(s) = server.wait(Duration::from_millis(5)) {
                    s.answer_shared(body.clone());
                }
            }
            server
        });
        (stop, t)
    }

    /// Clients dripping their request heads (more of them than the bound on connections) and
    /// one that never reads a large answer: another client's scrape is answered at once all
    /// the same. Before, the endpoint served one connection at a time: 4 drippers held every
    /// scrape for their 5 s head timeout.
    #[test]
    fn slow_clients_do_not_delay_a_scrape() {
        let server =
            Server::bind("127.0.0.1:0".parse::<SocketAddr>().expect("addr")).expect("bind");
        let addr = server.local_addr().expect("tcp");
        let (stop, t) = owner(server, "m 1\n".repeat(2_000_000));
        // One that asks for 8 MB and never reads it.
        let mut stuck = TcpStream::connect(addr).expect("connect");
        stuck
            .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            .expect("write");
        let mut drippers = Vec::new();
        for _ in 0..MAX_CONNECTIONS + 8 {
            let mut c = TcpStream::connect(addr).expect("connect");
            c.write_all(b"GET /met").expect("drip");
            drippers.push(c);
        }
        std::thread::sleep(Duration::from_millis(200));
        let mut worst = Duration::ZERO;
        for _ in 0..5 {
            for c in &mut drippers {
                let _ = c.write_all(b"r");
            }
            let t0 = Instant::now();
            let r = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
            worst = worst.max(t0.elapsed());
            assert!(
                r.starts_with("HTTP/1.1 200 OK\r\n"),
                "{}",
                &r[..r.len().min(200)]
            );
            assert_eq!(r.len() - r.find("\r\n\r\n").expect("head") - 4, 8_000_000);
        }
        eprintln!(
            "slowest scrape beside {} drippers and a non-reader: {worst:?}",
            drippers.len()
        );
        assert!(worst < Duration::from_secs(2), "{worst:?}");
        stop.store(true, Ordering::Relaxed);
        let server = t.join().expect("owner");
        let t0 = Instant::now();
        drop(server);
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        drop(stuck);
    }

    /// Clients holding every connection, each having asked for a large answer it never
    /// reads: a new scrape still gets in (the oldest is cut off for it) and is answered.
    #[test]
    fn non_readers_holding_every_connection_do_not_lock_a_scrape_out() {
        let server =
            Server::bind("127.0.0.1:0".parse::<SocketAddr>().expect("addr")).expect("bind");
        let addr = server.local_addr().expect("tcp");
        let (stop, t) = owner(server, "m 1\n".repeat(1_000_000));
        let mut stuck = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            let mut c = TcpStream::connect(addr).expect("connect");
            c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
                .expect("write");
            stuck.push(c);
        }
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        let r = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        let took = t0.elapsed();
        eprintln!("a scrape beside {} non-readers: {took:?}", stuck.len());
        assert!(
            r.starts_with("HTTP/1.1 200 OK\r\n"),
            "{}",
            &r[..r.len().min(200)]
        );
        assert!(took < Duration::from_secs(2), "{took:?}");
        stop.store(true, Ordering::Relaxed);
        drop(t.join().expect("owner"));
    }

    /// A client that never reads is cut off when the answer's deadline passes, however large
    /// the answer (each write's timeout alone let it hold on for 15 s).
    #[test]
    fn a_write_ends_at_its_deadline() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let mut a = Conn::Unix(a);
        let t0 = Instant::now();
        let big = vec![b'x'; 64 << 20];
        let e = super::super::stream::write_plain(
            &mut a,
            &big,
            Instant::now() + Duration::from_millis(300),
        )
        .expect_err("stuck");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_millis(900),
            "{took:?}"
        );
    }

    /// `unix:/PATH`: a socket only its user and group may connect to, removed at the end.
    #[test]
    fn a_unix_socket_of_mode_0660() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("usdt-prom-unix-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("metrics.sock");
        let addr =
            super::super::listen::parse_listen(&format!("unix:{}", path.display())).expect("unix:");
        let server = Server::bind(addr.clone()).expect("bind");
        assert_eq!(server.listen_addr(), &addr);
        let mode = std::fs::metadata(&path)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o660, "{mode:o}");
        // A second daemon on the same path is refused; the first still answers.
        assert!(Server::bind(addr.clone()).is_err());
        let (stop, t) = owner(server, "m 1\n".into());
        let mut c = std::os::unix::net::UnixStream::connect(&path).expect("connect");
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("write");
        let mut r = String::new();
        c.read_to_string(&mut r).expect("read");
        assert!(
            r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("m 1\n"),
            "{r}"
        );
        stop.store(true, Ordering::Relaxed);
        drop(t.join().expect("owner"));
        assert!(!path.exists(), "the socket stays after the server");
        assert_eq!(super::super::listen::parse_listen("unix:relative"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_addresses() {
        assert!(matches!(parse_addr("nonsense"), Err(ServeError::Addr(_))));
        assert!(parse_addr("127.0.0.1:9435").is_ok());
        let a = Server::bind("127.0.0.1:0".parse::<SocketAddr>().expect("addr")).expect("bind");
        let e = Server::bind(a.local_addr().expect("tcp"))
            .err()
            .expect("in use");
        assert!(e.to_string().contains("cannot listen"), "{e}");
    }
}
