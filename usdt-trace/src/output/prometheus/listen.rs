//! Where the `/metrics` endpoint listens: a TCP address, or a Unix socket whose file
//! permissions say who may scrape (what the exposition holds, strings of traced programs
//! among it, is then readable by the daemon's user and group only).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

/// Mode of the Unix socket made: its user and group may connect, no one else (connecting to a
/// Unix socket needs write permission on it).
pub const UNIX_SOCKET_MODE: u32 = 0o660;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    /// `unix:/PATH`.
    Unix(PathBuf),
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl From<SocketAddr> for ListenAddr {
    fn from(a: SocketAddr) -> ListenAddr {
        ListenAddr::Tcp(a)
    }
}

impl ListenAddr {
    /// The URL a scrape would use, for the log.
    pub fn url(&self) -> String {
        match self {
            ListenAddr::Tcp(a) => format!("http://{a}/metrics"),
            ListenAddr::Unix(p) => format!("http://localhost/metrics over unix:{}", p.display()),
        }
    }
}

/// `HOST:PORT` (a name is resolved once, its first address used), or `unix:/ABSOLUTE/PATH`.
/// `None` when it is neither.
pub fn parse_listen(s: &str) -> Option<ListenAddr> {
    if let Some(p) = s.strip_prefix("unix:") {
        let p = PathBuf::from(p);
        return p.is_absolute().then_some(ListenAddr::Unix(p));
    }
    s.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(ListenAddr::Tcp)
}

pub(super) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

/// A Unix socket's path: a socket left there by a daemon that is gone is replaced; one a
/// live daemon answers on, or a file of another kind, is an error.
fn bind_unix(path: &std::path::Path) -> io::Result<UnixListener> {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is there",
            ));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(io::ErrorKind::AddrInUse.into());
        }
        std::fs::remove_file(path)?;
    }
    // Made with its final mode, never wider for a moment: the umask is set around the bind
    // (the listener binds before any other thread of the daemon starts).
    // SAFETY: umask takes a mode and cannot fail.
    let old = unsafe { libc::umask(0o777 & !UNIX_SOCKET_MODE) };
    let l = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    l
}

impl Listener {
    pub(super) fn bind(addr: &ListenAddr) -> io::Result<(Listener, ListenAddr)> {
        match addr {
            ListenAddr::Tcp(a) => {
                let l = TcpListener::bind(a)?;
                let local = l.local_addr()?;
                Ok((Listener::Tcp(l), ListenAddr::Tcp(local)))
            }
            ListenAddr::Unix(p) => {
                let l = bind_unix(p)?;
                Ok((Listener::Unix(l, p.clone()), addr.clone()))
            }
        }
    }

    pub(super) fn accept(&self) -> io::Result<Conn> {
        match self {
            Listener::Tcp(l) => l.accept().map(|(c, _)| Conn::Tcp(c)),
            Listener::Unix(l, _) => l.accept().map(|(c, _)| Conn::Unix(c)),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Connects to `addr` briefly: wakes a thread blocked accepting on it.
pub(super) fn poke(addr: &ListenAddr) {
    match addr {
        ListenAddr::Tcp(a) => {
            let _ = TcpStream::connect_timeout(a, Duration::from_millis(200));
        }
        ListenAddr::Unix(p) => {
            let _ = UnixStream::connect(p);
        }
    }
}

/// One client's connection.
pub(super) enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Conn {
    pub(super) fn try_clone(&self) -> io::Result<Conn> {
        match self {
            Conn::Tcp(c) => c.try_clone().map(Conn::Tcp),
            Conn::Unix(c) => c.try_clone().map(Conn::Unix),
        }
    }

    pub(super) fn shutdown(&self) {
        let _ = match self {
            Conn::Tcp(c) => c.shutdown(Shutdown::Both),
            Conn::Unix(c) => c.shutdown(Shutdown::Both),
        };
    }

    pub(super) fn set_read_timeout(&self, t: Duration) -> io::Result<()> {
        match self {
            Conn::Tcp(c) => c.set_read_timeout(Some(t)),
            Conn::Unix(c) => c.set_read_timeout(Some(t)),
        }
    }

    pub(super) fn set_write_timeout(&self, t: Duration) -> io::Result<()> {
        match self {
            Conn::Tcp(c) => c.set_write_timeout(Some(t)),
            Conn::Unix(c) => c.set_write_timeout(Some(t)),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(c) => c.read(buf),
            Conn::Unix(c) => c.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(c) => c.write(buf),
            Conn::Unix(c) => c.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
