//! One client's connection as the endpoint reads and writes it: plain, or TLS over it, every
//! read and write bounded by a deadline. The TLS handshake is driven record by record under
//! the same deadline as the request head (each socket read's timeout is what is left of it),
//! so a client dripping its handshake costs its own connection for at most
//! [`CLIENT_TIMEOUT`](super::serve::CLIENT_TIMEOUT), as one dripping its request does.

use super::listen::Conn;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::Instant;

/// What Go's net/http answers (and so exporter-toolkit's endpoints): a plain HTTP request to
/// a TLS port gets a plain answer saying so, not a silent close.
const PLAIN_TO_TLS: &[u8] = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// Plaintext written to rustls at a time, then sent: its buffer never holds more.
const CHUNK: usize = 16 * 1024;

fn left(deadline: Instant) -> io::Result<std::time::Duration> {
    let l = deadline.saturating_duration_since(Instant::now());
    if l.is_zero() {
        Err(io::ErrorKind::TimedOut.into())
    } else {
        Ok(l)
    }
}

pub(super) struct TlsConn {
    tls: rustls::ServerConnection,
    sock: Conn,
    eof: bool,
}

pub(super) enum Stream {
    Plain(Conn),
    Tls(Box<TlsConn>),
}

impl Stream {
    /// The connection, with TLS set up by `deadline` when `tls` is given.
    pub(super) fn open(
        mut sock: Conn,
        tls: Option<&Arc<rustls::ServerConfig>>,
        deadline: Instant,
    ) -> io::Result<Stream> {
        let Some(cfg) = tls else {
            return Ok(Stream::Plain(sock));
        };
        let conn = rustls::ServerConnection::new(cfg.clone()).map_err(io::Error::other)?;
        // The first bytes say whether this is TLS at all (a handshake record is 0x16).
        let mut first = [0u8; 512];
        sock.set_read_timeout(left(deadline)?)?;
        let n = loop {
            match sock.read(&mut first) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r?,
            }
        };
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if first[0].is_ascii_uppercase() {
            let mut s = Stream::Plain(sock);
            let _ = s.write_all_by(PLAIN_TO_TLS, deadline);
            return Err(io::Error::other("plain HTTP to the TLS port"));
        }
        let mut t = TlsConn {
            tls: conn,
            sock,
            eof: false,
        };
        let mut rest = &first[..n];
        while !rest.is_empty() {
            t.tls.read_tls(&mut rest)?;
            t.process(deadline)?;
        }
        while t.tls.is_handshaking() {
            t.flush(deadline)?;
            if !t.tls.is_handshaking() {
                break;
            }
            // rustls always wants one or the other mid-handshake; never spin if not.
            if !t.tls.wants_read() {
                return Err(io::Error::other("TLS handshake stalled"));
            }
            if t.fill(deadline)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        t.flush(deadline)?;
        Ok(Stream::Tls(Box::new(t)))
    }

    /// One read, by `deadline`: 0 at the end of the client's data.
    pub(super) fn read_by(&mut self, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
        match self {
            Stream::Plain(c) => {
                c.set_read_timeout(left(deadline)?)?;
                c.read(buf)
            }
            Stream::Tls(t) => t.read_by(buf, deadline),
        }
    }

    /// All of `bytes`, by `deadline`: a client that reads slowly or not at all is cut off
    /// then, however large the answer (a write timeout alone bounds each write, not the whole).
    pub(super) fn write_all_by(&mut self, bytes: &[u8], deadline: Instant) -> io::Result<()> {
        match self {
            Stream::Plain(c) => write_plain(c, bytes, deadline),
            Stream::Tls(t) => {
                for chunk in bytes.chunks(CHUNK) {
                    let mut rest = chunk;
                    while !rest.is_empty() {
                        let n = t.tls.writer().write(rest)?;
                        rest = &rest[n..];
                        t.flush(deadline)?;
                    }
                }
                Ok(())
            }
        }
    }

    /// The end of the answer: TLS says so (close_notify), best effort.
    pub(super) fn finish(&mut self, deadline: Instant) {
        if let Stream::Tls(t) = self {
            t.tls.send_close_notify();
            let _ = t.flush(deadline);
        }
    }
}

pub(super) fn write_plain(c: &mut Conn, mut bytes: &[u8], deadline: Instant) -> io::Result<()> {
    while !bytes.is_empty() {
        c.set_write_timeout(left(deadline)?)?;
        match c.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl TlsConn {
    /// Sends what rustls has to send (handshake messages, records, alerts).
    fn flush(&mut self, deadline: Instant) -> io::Result<()> {
        while self.tls.wants_write() {
            self.sock.set_write_timeout(left(deadline)?)?;
            match self.tls.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Processes what was read; a TLS error sends its alert (briefly) and ends the connection
    /// (not as `InvalidData`, which the caller answers as a request head too large).
    fn process(&mut self, deadline: Instant) -> io::Result<()> {
        if let Err(e) = self.tls.process_new_packets() {
            let _ = self.flush(deadline);
            return Err(io::Error::other(e));
        }
        Ok(())
    }

    /// One socket read into rustls, by `deadline`; 0 at the end of the stream.
    fn fill(&mut self, deadline: Instant) -> io::Result<usize> {
        self.sock.set_read_timeout(left(deadline)?)?;
        let n = loop {
            match self.tls.read_tls(&mut self.sock) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r?,
            }
        };
        self.process(deadline)?;
        Ok(n)
    }

    fn read_by(&mut self, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if self.eof {
                return Ok(0);
            }
            self.flush(deadline)?;
            if self.fill(deadline)? == 0 {
                self.eof = true;
            }
        }
    }
}
