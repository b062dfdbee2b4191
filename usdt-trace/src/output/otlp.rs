//! `--otlp URL`: spans exported over OTLP/HTTP (protobuf, the OpenTelemetry project's own
//! message definitions from `opentelemetry-proto`).
//!
//! The tracing loop only converts a span and offers it to a bounded queue; a background
//! thread links parents ([`tree`]) and encodes batches, and `SENDERS` threads POST them,
//! several at once (a collector's answer takes longer than encoding the next batch). A batch
//! that was not delivered (collector down, 429, 5xx) is retried with backoff; one sent whole
//! that got no answer within `--otlp-timeout` is never resent (the collector may have it:
//! sending it again could duplicate its spans) and is counted as unanswered. When the
//! collector is down the queue fills and further spans are dropped and counted: memory stays
//! bounded and the loop never waits. At the end the exporter gets [`FINISH_WAIT`] to send what
//! it has, every POST included; the totals go to stderr: acknowledged (exported), unanswered,
//! refused, dropped, adding up to the spans of the run.
//!
//! Events (probes that pair with nothing) are not exported: OTLP has no place for an event
//! outside a span.

pub mod http;
pub mod settings;
pub mod tls;
pub mod tree;

use super::decode::cstr;
use super::sink::{Sink, View};
use super::{arg_key, arg_value, str_value, ArgValue, RunInfo, SiteInfo, Summary};
use http::{Client, Endpoint, Posted};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, ResourceSpans, ScopeSpans, Span};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tls::CaCerts;
use tree::{Assembler, Item};
use usdt_trace_common::{SpanRecord, StrSet, MAX_ARGS};

/// `--otlp` settings (built by `cli` from the flags and the environment: [`settings`]).
#[derive(Clone, Debug)]
pub struct OtlpConfig {
    pub endpoint: Endpoint,
    /// `service.name` (`--otlp-service`, `OTEL_SERVICE_NAME`, ...): else the traced
    /// executable's file name.
    pub service: Option<String>,
    /// `OTEL_RESOURCE_ATTRIBUTES` (but `service.name`): on every process's resource.
    pub resource: Vec<(String, String)>,
    /// Request headers (`--otlp-header`, `OTEL_EXPORTER_OTLP_HEADERS`).
    pub headers: settings::Headers,
    pub compression: settings::Compression,
    /// `--otlp-ca`: trusted instead of the system's roots.
    pub ca: Option<CaCerts>,
    /// `--otlp-queue`: spans that may wait for the exporter before new ones are dropped.
    pub queue: usize,
    /// `--otlp-timeout`: how long a POST may take, connecting to answer.
    pub timeout: Duration,
}

pub const DEFAULT_QUEUE: usize = 8192;
pub const DEFAULT_TIMEOUT: Duration = settings::DEFAULT_TIMEOUT;
/// POSTs in flight at once, each on its own connection.
const SENDERS: usize = 4;
/// Spans per request.
const BATCH: usize = 512;
/// A batch not full is sent after this long.
const BATCH_AGE: Duration = Duration::from_millis(500);
/// Backoff between retries of a failed POST: doubles from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));
/// At the end: how long the exporter may still take to send what it has. POSTs are cut at
/// this deadline too, so `finish` returns within it (and a little scheduling).
pub const FINISH_WAIT: Duration = Duration::from_secs(3);

/// Per-process resource attributes, sent once with the first span of the process.
struct Process {
    pid: u32,
    resource: Resource,
}

// Spans are nearly every message: boxing them would cost an allocation each.
#[allow(clippy::large_enum_variant)]
enum Msg {
    Process(Process),
    Span(Item),
}

/// Spans by what became of their POST; one lock, so that a reading is never between two
/// categories (a few batches a second take it).
#[derive(Default, Clone)]
struct Counts {
    /// Acknowledged by the collector (2xx).
    exported: u64,
    /// Sent whole, no answer in time: not resent.
    unanswered: u64,
    /// Refused by the collector (4xx but 429) or its certificate not accepted, and the last
    /// reason (`HTTP 400`).
    refused: u64,
    refused_why: String,
    /// In a POST right now (counted as unanswered if the run ends before it returns).
    in_flight: u64,
}

struct Stats {
    counts: std::sync::Mutex<Counts>,
    /// Messages in the channel, and spans the exporter took from it and has not done with
    /// (held for their parent, batched, in a POST): `--otlp-queue` bounds them all, so a
    /// collector that is down fills it as fast as it did with one POST at a time (and a full
    /// queue costs no conversion).
    queued: AtomicUsize,
    /// Once the run has ended: nanoseconds after `base` when everything stops (0: running).
    stop_at_ns: AtomicU64,
    base: Instant,
    /// Warnings said once: unreachable (until it answers again), no answer, refused.
    warned_retry: AtomicBool,
    warned_unanswered: AtomicBool,
    warned_refused: AtomicBool,
}

impl Stats {
    fn new() -> Stats {
        Stats {
            counts: Default::default(),
            queued: AtomicUsize::new(0),
            stop_at_ns: AtomicU64::new(0),
            base: Instant::now(),
            warned_retry: AtomicBool::new(false),
            warned_unanswered: AtomicBool::new(false),
            warned_refused: AtomicBool::new(false),
        }
    }

    fn stop_at(&self) -> Option<Instant> {
        match self.stop_at_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(self.base + Duration::from_nanos(ns)),
        }
    }

    fn stop_within(&self, d: Duration) {
        let ns = (Instant::now() + d).duration_since(self.base).as_nanos() as u64;
        self.stop_at_ns.store(ns.max(1), Ordering::Relaxed);
    }

    fn count(&self, f: impl FnOnce(&mut Counts)) {
        if let Ok(mut c) = self.counts.lock() {
            f(&mut c)
        }
    }

    fn counts(&self) -> Counts {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    fn stopped(&self) -> bool {
        self.stop_at().is_some_and(|s| Instant::now() >= s)
    }
}

pub struct OtlpSink {
    cfg: OtlpConfig,
    /// Per start site: the span is paired by a usdt-markers id (arg 0) with the parent's id
    /// in arg 1.
    marked: Vec<bool>,
    tx: Option<SyncSender<Msg>>,
    stats: Arc<Stats>,
    thread: Option<JoinHandle<()>>,
    done: Option<Receiver<()>>,
    /// Processes whose resource was handed to the exporter.
    known: HashSet<u32>,
    host: String,
    zero_unix_ns: u64,
    fallback_exe: Option<String>,
    rng: tree::Rng,
    /// Spans seen, and dropped because the queue was full.
    spans: u64,
    dropped: u64,
    /// W3C contexts handed to open spans: (pid, markers span id) → (trace id, parent id).
    contexts: std::collections::HashMap<(u32, u64), ([u8; 16], [u8; 8])>,
}

/// The probe name usdt-markers' `trace_context!` fires.
const TRACE_CONTEXT: &str = "trace__context";
/// Contexts remembered for spans that have not ended; past this many (spans that never end),
/// the table starts over.
const MAX_CONTEXTS: usize = 65536;

impl OtlpSink {
    /// `marked[start_site]`: see the field. Starts the exporter thread.
    pub fn new(cfg: OtlpConfig, marked: Vec<bool>) -> io::Result<OtlpSink> {
        let (tx, rx) = mpsc::sync_channel(cfg.queue);
        let (done_tx, done) = mpsc::channel();
        let stats = Arc::new(Stats::new());
        let client = Client::new(
            &cfg.endpoint,
            cfg.ca.as_ref(),
            cfg.headers.0.clone(),
            cfg.compression == settings::Compression::Gzip,
        )
        .map_err(io::Error::other)?;
        let exporter = Exporter {
            endpoint: cfg.endpoint.clone(),
            client: Arc::new(client),
            timeout: cfg.timeout,
            stats: stats.clone(),
            processes: HashMap::new(),
            tree: Assembler::default(),
            ready: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || {
                exporter.run(rx);
                let _ = done_tx.send(());
            })?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        Ok(OtlpSink {
            cfg,
            marked,
            tx: Some(tx),
            stats,
            thread: Some(thread),
            done: Some(done),
            known: HashSet::new(),
            host,
            zero_unix_ns: 0,
            fallback_exe: None,
            rng: tree::Rng::new(),
            spans: 0,
            dropped: 0,
            contexts: std::collections::HashMap::new(),
        })
    }

    fn offer(&mut self, m: Msg) -> bool {
        let Some(tx) = &self.tx else { return false };
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        match tx.try_send(m) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.stats.queued.fetch_sub(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// The resource of a process, read from /proc the first time one of its spans ends (it
    /// is running then, and exec'ed: at `begin` a `-c` child may not be yet).
    fn resource(&self, pid: u32) -> Resource {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .map(|p| p.display().to_string())
            .or_else(|| self.fallback_exe.clone())
            .unwrap_or_default();
        let service = self.cfg.service.clone().unwrap_or_else(|| {
            exe.rsplit('/')
                .next()
                .filter(|s| !s.is_empty())
                .unwrap_or("usdt-trace")
                .to_string()
        });
        let mut attributes = vec![
            kv_str("service.name", service),
            kv_str("host.name", self.host.clone()),
            kv_int("process.pid", pid as i64),
            kv_str("process.executable.path", exe),
        ];
        // OTEL_RESOURCE_ATTRIBUTES: added, or in place of the one of the same key.
        for (k, v) in &self.cfg.resource {
            let a = kv_str(k, v.clone());
            match attributes.iter_mut().find(|a| a.key == *k) {
                Some(old) => *old = a,
                None => attributes.push(a),
            }
        }
        Resource {
            attributes,
            ..Default::default()
        }
    }

    fn span(
        &mut self,
        start: &SiteInfo,
        end: &SiteInfo,
        name: String,
        r: &SpanRecord,
        strs: Option<&StrSet>,
    ) -> Item {
        let h = &r.hdr;
        let mut attrs = Vec::with_capacity(16);
        args_attrs(&mut attrs, "arg", start, &r.args, strs);
        args_attrs(&mut attrs, "end_arg", end, &r.end_args, strs);
        attrs.push(kv_int("thread.id", h.tid as i64));
        attrs.push(kv_str(
            "thread.name",
            String::from_utf8_lossy(cstr(&h.comm)).into_owned(),
        ));
        attrs.push(kv_str("usdt.provider", start.provider.clone()));
        attrs.push(kv_str("usdt.start", start.name.clone()));
        attrs.push(kv_str("usdt.end", end.name.clone()));
        if r.start_tid != h.tid {
            attrs.push(kv_int("usdt.start_tid", r.start_tid as i64));
        }
        if r.acct_valid != 0 {
            let a = &r.acct;
            for (k, v) in [
                ("usdt.oncpu_ns", a.oncpu),
                ("usdt.offcpu_ns", a.runq + a.sleep + a.io),
                ("usdt.runq_ns", a.runq),
                ("usdt.sleep_ns", a.sleep),
                ("usdt.io_ns", a.io),
            ] {
                attrs.push(kv_int(k, v as i64));
            }
            // What the sleep and io above waited on, only the kinds it waited on (as the
            // NDJSON's `waits`): `usdt.wait.lock_ns` and `usdt.wait.lock_count`, and so on.
            for (kind, ns, n, _) in crate::output::wait_kinds(a) {
                if ns == 0 && n == 0 {
                    continue;
                }
                attrs.push(kv_int(&format!("usdt.wait.{kind}_ns"), ns as i64));
                attrs.push(kv_int(&format!("usdt.wait.{kind}_count"), i64::from(n)));
            }
            // A polled span: the split above is its polls' time; the rest was between polls.
            if r.polls > 0 {
                for (k, v) in [
                    ("usdt.idle_ns", r.idle_ns),
                    ("usdt.polls", r.polls as u64),
                    ("usdt.threads", r.threads as u64),
                ] {
                    attrs.push(kv_int(k, v as i64));
                }
            }
            if r.longest_off_ns > 0 && (r.waker_pid != 0 || r.waker_comm[0] != 0) {
                let comm = String::from_utf8_lossy(cstr(&r.waker_comm));
                let w = format!("{comm} {}/{}", r.waker_pid, r.waker_tid);
                attrs.push(kv_str("usdt.waker", w));
                attrs.push(kv_int("usdt.waker_off_ns", r.longest_off_ns as i64));
            }
        }
        let marker = self
            .marked
            .get(r.start_site as usize)
            .copied()
            .unwrap_or(false)
            .then(|| (r.args[0], r.args[1]));
        let (span_id, parent_span_id) = match marker {
            Some((id, parent)) => (
                tree::marker_span_id(h.pid, id),
                if parent != 0 {
                    tree::marker_span_id(h.pid, parent)
                } else {
                    Vec::new()
                },
            ),
            None => (self.rng.next_u64().to_be_bytes().to_vec(), Vec::new()),
        };
        Item {
            pid: h.pid,
            tid: h.tid,
            same_thread: r.start_tid == h.tid,
            start_ns: r.start_ns,
            marker,
            span: Span {
                span_id,
                parent_span_id,
                name,
                kind: SpanKind::Internal as i32,
                start_time_unix_nano: self.zero_unix_ns + r.start_ns,
                end_time_unix_nano: self.zero_unix_ns + h.ts_ns.max(r.start_ns),
                attributes: attrs,
                ..Default::default()
            },
            context: None,
        }
    }
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn kv_str(key: &str, v: String) -> KeyValue {
    kv(key, any_value::Value::StringValue(v))
}

fn kv_int(key: &str, v: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(v))
}

/// `arg0`, ... as ints (OTLP has no unsigned type: an unsigned value above i64::MAX is sent as
/// its decimal string), the captured string as a string, unreadable arguments left out.
fn args_attrs(
    out: &mut Vec<KeyValue>,
    prefix: &str,
    site: &SiteInfo,
    args: &[u64; MAX_ARGS],
    strs: Option<&StrSet>,
) {
    for i in 0..site.args.len().min(MAX_ARGS) {
        let key = arg_key(site, prefix, i);
        match arg_value(site, i, args, strs) {
            ArgValue::Str { bytes, cut, .. } => out.push(kv_str(&key, str_value(bytes, cut))),
            ArgValue::Unsigned(v) => match i64::try_from(v) {
                Ok(v) => out.push(kv_int(&key, v)),
                Err(_) => out.push(kv_str(&key, v.to_string())),
            },
            ArgValue::Signed(v) => out.push(kv_int(&key, v)),
            ArgValue::Unreadable => {}
        }
    }
}

impl Sink for OtlpSink {
    fn begin(&mut self, run: &RunInfo) -> io::Result<()> {
        self.zero_unix_ns = run.clock_zero_unix_ns;
        self.fallback_exe = run.targets.first().cloned();
        Ok(())
    }

    fn record(&mut self, v: &View) -> io::Result<()> {
        let (pair, start, end, rec, strs) = match *v {
            View::Span {
                pair,
                start,
                end,
                rec,
                strs,
                ..
            } => (pair, start, end, rec, strs),
            View::Event { site, rec, .. } => {
                // `trace__context(span_id, trace_id_hi, trace_id_lo, parent_span_id)`, fired
                // by usdt-markers' `trace_context!` (or the C header's USDT_TRACE_CONTEXT)
                // while the span is open: remembered until the span ends.
                if site.name == TRACE_CONTEXT && site.args.len() >= 4 {
                    if self.contexts.len() >= MAX_CONTEXTS {
                        self.contexts.clear();
                    }
                    let a = &rec.args;
                    let mut trace = [0u8; 16];
                    trace[..8].copy_from_slice(&a[1].to_be_bytes());
                    trace[8..].copy_from_slice(&a[2].to_be_bytes());
                    self.contexts
                        .insert((rec.hdr.pid, a[0]), (trace, a[3].to_be_bytes()));
                }
                return Ok(());
            }
        };
        self.spans += 1;
        // Full: drop before paying for the conversion.
        if self.stats.queued.load(Ordering::Relaxed) >= self.cfg.queue {
            self.dropped += 1;
            return Ok(());
        }
        let pid = rec.hdr.pid;
        if !self.known.contains(&pid) {
            let p = Process {
                pid,
                resource: self.resource(pid),
            };
            if !self.offer(Msg::Process(p)) {
                self.dropped += 1;
                return Ok(());
            }
            // Bounded: a long system-wide run sees many short-lived processes; one forgotten
            // is only described again.
            if self.known.len() >= 4096 {
                self.known.clear();
            }
            self.known.insert(pid);
        }
        let name = format!("{}:{}", pair.provider, pair.stem);
        let mut item = self.span(start, end, name, rec, strs);
        if let Some((id, _)) = item.marker {
            item.context = self
                .contexts
                .remove(&(pid, id))
                .filter(|(trace, _)| *trace != [0; 16]);
        }
        if !self.offer(Msg::Span(item)) {
            self.dropped += 1;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn finish(&mut self, _s: &Summary) -> io::Result<()> {
        self.stats.stop_within(FINISH_WAIT);
        // Disconnecting tells the exporter to send what it has and stop.
        self.tx = None;
        // Every POST is cut at the deadline: a little more is scheduling, not a collector.
        let finished = self.done.take().is_some_and(|d| {
            d.recv_timeout(FINISH_WAIT + Duration::from_millis(250))
                .is_ok()
        });
        if finished {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
        let c = self.stats.counts();
        // A POST still out now was sent, or is being sent: the collector may get it.
        let (exported, unanswered) = (c.exported, c.unanswered + c.in_flight);
        let (refused, why) = (c.refused, c.refused_why.as_str());
        eprintln!(
            "{}",
            totals_line(
                &self.cfg.endpoint.to_string(),
                self.spans,
                exported,
                unanswered,
                (refused, why),
            )
        );
        Ok(())
    }
}

/// `otlp: exported N spans to URL, dropped M` and, when there were any, the unanswered and
/// refused ones: the four add up to `spans`.
fn totals_line(
    url: &str,
    spans: u64,
    exported: u64,
    unanswered: u64,
    (refused, why): (u64, &str),
) -> String {
    // Whatever was not acknowledged, left unanswered or refused by now never will be: the
    // queue was full, or it was still waiting for a dead collector at the end.
    let dropped = spans.saturating_sub(exported + unanswered + refused);
    let mut line = format!("otlp: exported {exported} spans to {url}, dropped {dropped}");
    if dropped > 0 {
        line.push_str(" (not sent: the queue was full, or the collector was unreachable)");
    }
    if unanswered > 0 {
        let _ = write!(
            line,
            ", unanswered {unanswered} (sent, no answer in time: not resent, the collector may have them)"
        );
    }
    if refused > 0 {
        let _ = write!(line, ", refused {refused} ({why})");
    }
    line
}

/// The background half: parents, batches; [`Sender`]s POST them.
struct Exporter {
    endpoint: Endpoint,
    client: Arc<Client>,
    timeout: Duration,
    stats: Arc<Stats>,
    processes: HashMap<u32, Resource>,
    tree: Assembler,
    /// Spans released by the tree, waiting to be sent, oldest first.
    ready: Vec<(u32, Span)>,
}

/// One encoded batch.
struct Batch {
    spans: u64,
    body: Vec<u8>,
}

impl Exporter {
    fn run(mut self, rx: Receiver<Msg>) {
        // Bounded: a slow collector holds up the exporter, and then the sink's queue fills.
        let (btx, brx) = mpsc::sync_channel::<Batch>(SENDERS);
        let brx = Arc::new(std::sync::Mutex::new(brx));
        let senders: Vec<JoinHandle<()>> = (0..SENDERS)
            .filter_map(|i| {
                let s = Sender {
                    endpoint: self.endpoint.clone(),
                    client: self.client.clone(),
                    timeout: self.timeout,
                    stats: self.stats.clone(),
                };
                let rx = brx.clone();
                std::thread::Builder::new()
                    .name(format!("otlp-send-{i}"))
                    .spawn(move || s.run(&rx))
                    .ok()
            })
            .collect();
        let mut oldest: Option<Instant> = None;
        let mut open = true;
        while open || !self.ready.is_empty() {
            if open {
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(m) => match m {
                        Msg::Process(p) => {
                            self.stats.queued.fetch_sub(1, Ordering::Relaxed);
                            if self.processes.len() >= 4096 {
                                self.processes.clear();
                            }
                            self.processes.insert(p.pid, p.resource);
                        }
                        Msg::Span(item) => self.tree.add(item, Instant::now(), &mut self.ready),
                    },
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        open = false;
                        self.tree.release_all(&mut self.ready);
                    }
                }
                self.tree.expire(Instant::now(), &mut self.ready);
            }
            if self.ready.is_empty() {
                oldest = None;
                continue;
            }
            let now = Instant::now();
            let since = *oldest.get_or_insert(now);
            if self.ready.len() >= BATCH || now.duration_since(since) >= BATCH_AGE || !open {
                let n = self.ready.len().min(BATCH);
                let batch: Vec<(u32, Span)> = self.ready.drain(..n).collect();
                let mut b = Batch {
                    spans: n as u64,
                    body: prost::Message::encode_to_vec(&self.request(batch)),
                };
                // Wait for a sender, but not past the end of the run's grace period: what is
                // still here then is dropped (the sink counts it).
                loop {
                    match btx.try_send(b) {
                        Ok(()) => break,
                        Err(TrySendError::Full(back)) => b = back,
                        Err(TrySendError::Disconnected(_)) => return,
                    }
                    if self.stats.stopped() {
                        // Dropped: the sink counts what was not exported.
                        drop(btx);
                        for t in senders {
                            let _ = t.join();
                        }
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                oldest = (!self.ready.is_empty()).then(Instant::now);
            }
        }
        drop(btx);
        for t in senders {
            let _ = t.join();
        }
    }

    fn request(&self, batch: Vec<(u32, Span)>) -> ExportTraceServiceRequest {
        let mut by_pid: Vec<(u32, Vec<Span>)> = Vec::new();
        for (pid, s) in batch {
            match by_pid.iter_mut().find(|(p, _)| *p == pid) {
                Some((_, v)) => v.push(s),
                None => by_pid.push((pid, vec![s])),
            }
        }
        let resource_spans = by_pid
            .into_iter()
            .map(|(pid, spans)| ResourceSpans {
                resource: Some(
                    self.processes
                        .get(&pid)
                        .cloned()
                        .unwrap_or_else(|| Resource {
                            attributes: vec![kv_int("process.pid", pid as i64)],
                            ..Default::default()
                        }),
                ),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "usdt-trace".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect();
        ExportTraceServiceRequest { resource_spans }
    }
}

/// One POST at a time, on its own connection.
struct Sender {
    endpoint: Endpoint,
    client: Arc<Client>,
    timeout: Duration,
    stats: Arc<Stats>,
}

impl Sender {
    fn run(self, rx: &std::sync::Mutex<Receiver<Batch>>) {
        loop {
            let b = match rx.lock() {
                Ok(rx) => match rx.recv() {
                    Ok(b) => b,
                    Err(_) => return,
                },
                Err(_) => return,
            };
            let n = b.spans as usize;
            self.send(b);
            self.stats.queued.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// POSTs one batch: retried with backoff while it was not delivered, until the end of
    /// the run's grace period (then the sink counts it as dropped); never resent once it went
    /// out whole without an answer.
    fn send(&self, b: Batch) {
        let (n, st) = (b.spans, &self.stats);
        // Compressed here, once: the senders work in parallel, the exporter thread does not.
        let body = self.client.encode(b.body);
        let mut delay = BACKOFF.0;
        loop {
            let mut deadline = Instant::now() + self.timeout;
            let mut why = format!("timed out after {}", http::secs(self.timeout));
            if let Some(s) = st.stop_at().filter(|&s| s < deadline) {
                deadline = s;
                why = format!(
                    "cut at the end of the {} the exporter gets after the run",
                    http::secs(FINISH_WAIT)
                );
            }
            st.count(|c| c.in_flight += n);
            let posted = self
                .client
                .post("application/x-protobuf", &body, deadline, &why);
            match posted {
                Posted::Ok => {
                    st.count(|c| {
                        c.in_flight -= n;
                        c.exported += n;
                    });
                    if st.warned_retry.swap(false, Ordering::Relaxed) {
                        eprintln!("otlp: {} reachable again", self.endpoint);
                    }
                    return;
                }
                Posted::Rejected(why) => {
                    if !st.warned_refused.swap(true, Ordering::Relaxed) {
                        if why.starts_with("HTTP ") {
                            eprintln!(
                                "otlp: warning: {} refused {n} spans ({why}); not retried (all refusals are counted at the end)",
                                self.endpoint
                            );
                        } else {
                            eprintln!(
                                "otlp: warning: POST {}: {why}; {n} spans not sent, not retried (all refusals are counted at the end)",
                                self.endpoint
                            );
                        }
                    }
                    st.count(|c| {
                        c.in_flight -= n;
                        c.refused += n;
                        c.refused_why = why;
                    });
                    return;
                }
                Posted::Unanswered(why) => {
                    st.count(|c| {
                        c.in_flight -= n;
                        c.unanswered += n;
                    });
                    if !st.warned_unanswered.swap(true, Ordering::Relaxed) {
                        eprintln!(
                            "otlp: warning: POST {}: no answer, {why}; not resent, as the collector may have the spans (counted as unanswered; see --otlp-timeout)",
                            self.endpoint
                        );
                    }
                    return;
                }
                Posted::Retry(why) => {
                    st.count(|c| c.in_flight -= n);
                    if !st.warned_retry.swap(true, Ordering::Relaxed) {
                        eprintln!(
                            "otlp: warning: POST {}: {why}; retrying (spans are dropped while the queue is full)",
                            self.endpoint
                        );
                    }
                }
            }
            // Sleep in steps so the end of the run is noticed.
            let wake = Instant::now() + delay;
            while Instant::now() < wake {
                if st.stopped() {
                    return; // not delivered: the sink counts it as dropped
                }
                std::thread::sleep(Duration::from_millis(20).min(delay));
            }
            delay = (delay * 2).min(BACKOFF.1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The four categories add up to the spans of the run; the timeout is said as set.
    #[test]
    fn totals_line_counts_unanswered_and_refused_apart_from_dropped() {
        let url = "http://127.0.0.1:4318/v1/traces";
        assert_eq!(
            totals_line(url, 10, 10, 0, (0, "")),
            "otlp: exported 10 spans to http://127.0.0.1:4318/v1/traces, dropped 0"
        );
        assert_eq!(
            totals_line(url, 2000, 0, 1536, (0, "")),
            "otlp: exported 0 spans to http://127.0.0.1:4318/v1/traces, dropped 464 (not sent: the queue was full, or the collector was unreachable), unanswered 1536 (sent, no answer in time: not resent, the collector may have them)"
        );
        assert_eq!(
            totals_line(url, 700, 100, 0, (600, "HTTP 400")),
            "otlp: exported 100 spans to http://127.0.0.1:4318/v1/traces, dropped 0, refused 600 (HTTP 400)"
        );
    }
}
