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

mod export;
pub mod http;
pub mod settings;
pub mod tls;
pub mod tree;

use super::sink::Sink;
use super::{arg_key, arg_value, str_value, ArgValue, RunInfo, SiteInfo, Summary};
use crate::plan::record::cstr;
use crate::plan::view::View;
use export::Exporter;
use http::{Client, Endpoint};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, Span};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tls::CaCerts;
use tree::Item;
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
    /// Set by a second Ctrl-C: the end of the run waits no longer for the collector.
    now: &'static AtomicBool,
}

/// The probe name usdt-markers' `trace_context!` fires.
const TRACE_CONTEXT: &str = "trace__context";
/// Contexts remembered for spans that have not ended; past this many (spans that never end),
/// the table starts over.
const MAX_CONTEXTS: usize = 65536;

impl OtlpSink {
    /// `marked[start_site]`: see the field; `now`: see the field (the driver's flag, set by
    /// its signal handler). Starts the exporter thread.
    pub fn new(
        cfg: OtlpConfig,
        marked: Vec<bool>,
        now: &'static AtomicBool,
    ) -> io::Result<OtlpSink> {
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
        let exporter = Exporter::new(cfg.endpoint.clone(), client, cfg.timeout, stats.clone());
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
            now,
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
                ("usdt.steal_ns", a.steal),
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
        // Every POST is cut at the deadline: a little more is scheduling, not a collector. A
        // second Ctrl-C ends the wait at once (looked at every 20 ms).
        let give_up = Instant::now() + FINISH_WAIT + Duration::from_millis(250);
        // Said once the wait is long enough to be noticed, so that the second Ctrl-C is known.
        let mut say_at = Some(Instant::now() + Duration::from_secs(1));
        let mut cut = false;
        let finished = self.done.take().is_some_and(|d| loop {
            if say_at.is_some_and(|t| Instant::now() >= t) {
                say_at = None;
                eprintln!(
                    "otlp: waiting for {} (at most {} more); Ctrl-C to stop waiting",
                    self.cfg.endpoint,
                    http::secs(FINISH_WAIT - Duration::from_secs(1)),
                );
            }
            if self.now.load(Ordering::Relaxed) {
                cut = true;
                // The exporter and its POSTs stop too, for as long as the process lasts.
                self.stats.stop_within(Duration::ZERO);
                break false;
            }
            let left = give_up.saturating_duration_since(Instant::now());
            match d.recv_timeout(left.min(Duration::from_millis(20))) {
                Ok(()) | Err(RecvTimeoutError::Disconnected) => break true,
                Err(RecvTimeoutError::Timeout) if left.is_zero() => break false,
                Err(RecvTimeoutError::Timeout) => {}
            }
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
                cut,
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
    cut: bool,
) -> String {
    // Whatever was not acknowledged, left unanswered or refused by now never will be: the
    // queue was full, or it was still waiting for a dead collector at the end (or a second
    // Ctrl-C ended that wait: `cut`).
    let dropped = spans.saturating_sub(exported + unanswered + refused);
    let mut line = format!("otlp: exported {exported} spans to {url}, dropped {dropped}");
    if dropped > 0 && cut {
        line.push_str(" (not sent: a Ctrl-C ended the wait for the collector)");
    } else if dropped > 0 {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The four categories add up to the spans of the run; the timeout is said as set.
    #[test]
    fn totals_line_counts_unanswered_and_refused_apart_from_dropped() {
        let url = "http://127.0.0.1:4318/v1/traces";
        assert_eq!(
            totals_line(url, 10, 10, 0, (0, ""), false),
            "otlp: exported 10 spans to http://127.0.0.1:4318/v1/traces, dropped 0"
        );
        assert_eq!(
            totals_line(url, 2000, 0, 1536, (0, ""), false),
            "otlp: exported 0 spans to http://127.0.0.1:4318/v1/traces, dropped 464 (not sent: the queue was full, or the collector was unreachable), unanswered 1536 (sent, no answer in time: not resent, the collector may have them)"
        );
        assert_eq!(
            totals_line(url, 700, 100, 0, (600, "HTTP 400"), false),
            "otlp: exported 100 spans to http://127.0.0.1:4318/v1/traces, dropped 0, refused 600 (HTTP 400)"
        );
        assert_eq!(
            totals_line(url, 3000, 0, 2048, (0, ""), true),
            "otlp: exported 0 spans to http://127.0.0.1:4318/v1/traces, dropped 952 (not sent: a Ctrl-C ended the wait for the collector), unanswered 2048 (sent, no answer in time: not resent, the collector may have them)"
        );
    }
}
