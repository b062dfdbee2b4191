//! `demo-httpserver`: a static file server on hyper and a multi-threaded tokio runtime,
//! instrumented with usdt-markers spans (see the crate docs for the probes).
//!
//! A request's span is opened in the service future and closed when hyper drops the response
//! body, often on another worker thread than the one that opened it: tracers pair the two
//! probes by span id. Its polls are marked (`request__enter`/`request__exit`): the handler's
//! own, and those of the connection future while it serves the request (writing the response),
//! so a tracer can tell on which threads the request ran and how long it waited in between.
use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use demo_httpserver::{mime_type, Args};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE, SERVER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use usdt_markers::{poll_markers, span, trace_context, PollMarkers, Span};

static NEXT_REQUEST_ID: AtomicU64 = AtomicU64::new(1);

const NOT_FOUND: &str = "<!DOCTYPE html><title>404 Not Found</title><h1>404 Not Found</h1>\n";
const NOT_ALLOWED: &str =
    "<!DOCTYPE html><title>405 Method Not Allowed</title><h1>405 Method Not Allowed</h1>\n";

fn request_polls() -> PollMarkers {
    poll_markers!(httpserver, request)
}

/// The span id of the request a connection is serving, 0 between requests (or untraced).
type Current = Arc<AtomicU64>;

/// A connection future whose polls count for the request it is serving: between the handler's
/// return and the end of the response, hyper's writing is the request's work.
struct ConnPolls<F> {
    inner: Pin<Box<F>>,
    current: Current,
}

impl<F: Future> Future for ConnPolls<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _entered = request_polls().enter(self.current.load(Ordering::Relaxed));
        self.inner.as_mut().poll(cx)
    }
}

/// The response body. It owns both open spans, so they end when hyper is done with it: after the
/// last frame was written, or when the connection dropped it (HEAD, errors).
struct TracedBody {
    data: Option<Bytes>,
    len: u64,
    sent: u64,
    status: u16,
    request: Option<Span<(u16, u64)>>,
    send: Option<Span<(u64,)>>,
    current: Current,
}

impl TracedBody {
    fn finish(&mut self) {
        if let Some(send) = self.send.take() {
            send.end(self.sent);
        }
        if let Some(request) = self.request.take() {
            // The connection is done with this request: its next polls are not this span's.
            let _ = self.current.compare_exchange(
                request.id(),
                0,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            request.end(self.status, self.sent);
        }
    }
}

impl Body for TracedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        match this.data.take() {
            Some(data) => {
                this.sent += data.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            None => {
                this.finish();
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

impl Drop for TracedBody {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Maps a request path to a file under `root`; `None` for anything that could escape it.
fn resolve(root: &Path, path: &str) -> Option<PathBuf> {
    let raw = path.as_bytes();
    let mut decoded = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hex = std::str::from_utf8(raw.get(i + 1..i + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(raw[i]);
            i += 1;
        }
    }
    let decoded = String::from_utf8(decoded).ok()?;
    let mut out = root.to_path_buf();
    for part in decoded.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p if p.contains('\0') || p.contains('\\') => return None,
            p => out.push(p),
        }
    }
    if decoded.ends_with('/') || decoded.is_empty() {
        out.push("index.html");
    }
    Some(out)
}

/// `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>` (W3C Trace Context, version 00).
fn parse_traceparent(v: &str) -> Option<(u128, u64)> {
    let mut it = v.trim().split('-');
    let (version, trace, parent, _flags) = (it.next()?, it.next()?, it.next()?, it.next()?);
    if version != "00" || trace.len() != 32 || parent.len() != 16 {
        return None;
    }
    let trace = u128::from_str_radix(trace, 16).ok()?;
    let parent = u64::from_str_radix(parent, 16).ok()?;
    // All-zero ids are invalid.
    (trace != 0 && parent != 0).then_some((trace, parent))
}

async fn handle(
    req: Request<Incoming>,
    root: Arc<PathBuf>,
    current: Current,
) -> Result<Response<TracedBody>, Infallible> {
    let req_id = NEXT_REQUEST_ID.fetch_add(1, Ordering::Relaxed);
    // Explicit parent: this span lives across `.await`s, so it must not become the worker
    // thread's current span.
    let request = span!(httpserver, request, req_id; parent = 0; end(u16, u64));
    // A caller that propagates W3C trace context gets the kernel-measured spans in its trace.
    if let Some((trace_id, parent)) = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_traceparent)
    {
        trace_context!(httpserver, request.id(), trace_id, parent);
    }
    current.store(request.id(), Ordering::Relaxed);
    // The handler's polls are the request's from here on (the connection's own polls enter it
    // from its next poll; nested enters of one span fire once).
    let id = request.id();
    request_polls()
        .instrument(id, respond(req, root, req_id, request, current))
        .await
}

async fn respond(
    req: Request<Incoming>,
    root: Arc<PathBuf>,
    req_id: u64,
    request: Span<(u16, u64)>,
    current: Current,
) -> Result<Response<TracedBody>, Infallible> {
    let mut allow = false;
    let (status, content_type, body) = match *req.method() {
        Method::GET | Method::HEAD => {
            let file = match resolve(&root, req.uri().path()) {
                Some(path) => tokio::fs::read(&path).await.ok().map(|b| (path, b)),
                None => None,
            };
            match file {
                Some((path, bytes)) => (
                    StatusCode::OK,
                    mime_type(&path.to_string_lossy()),
                    Bytes::from(bytes),
                ),
                None => (
                    StatusCode::NOT_FOUND,
                    "text/html; charset=utf-8",
                    Bytes::from_static(NOT_FOUND.as_bytes()),
                ),
            }
        }
        _ => {
            allow = true;
            (
                StatusCode::METHOD_NOT_ALLOWED,
                "text/html; charset=utf-8",
                Bytes::from_static(NOT_ALLOWED.as_bytes()),
            )
        }
    };

    let send = span!(httpserver, send_message, req_id; parent = request.id(); end(u64));
    let len = body.len() as u64;
    let mut response = Response::new(TracedBody {
        data: Some(body),
        len,
        sent: 0,
        status: status.as_u16(),
        request: Some(request),
        send: Some(send),
        current,
    });
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(SERVER, HeaderValue::from_static("demo-httpserver"));
    if allow {
        headers.insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    Ok(response)
}

fn main() {
    let args = Args::from_env();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_io()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("demo-httpserver: cannot start the runtime: {e}");
            std::process::exit(1)
        }
    };
    let root = Arc::new(args.root.clone());
    let result: std::io::Result<()> = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
        eprintln!(
            "demo-httpserver: serving {} on http://127.0.0.1:{}/",
            root.display(),
            args.port
        );
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors and the like: keep serving the connections we have.
                    eprintln!("demo-httpserver: accept: {e}");
                    tokio::task::yield_now().await;
                    continue;
                }
            };
            let root = root.clone();
            let current = Current::default();
            let conn_current = current.clone();
            let service = service_fn(move |req| handle(req, root.clone(), current.clone()));
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::spawn(async move {
                // Malformed requests and resets end up here; they only end this connection.
                let _ = ConnPolls {
                    inner: Box::pin(conn),
                    current: conn_current,
                }
                .await;
            });
        }
    });
    if let Err(e) = result {
        eprintln!("demo-httpserver: {e}");
        std::process::exit(1);
    }
}
