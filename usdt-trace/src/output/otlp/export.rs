//! The exporter's background half: the [`Exporter`] thread links parents and encodes
//! batches; [`SENDERS`] [`Sender`] threads POST them, retry what was not delivered, and count
//! what became of each span in the [`Stats`] the sink reads at the end.

use super::http::{self, Client, Endpoint, Posted};
use super::tree::Assembler;
use super::{kv_int, Msg, Stats, BACKOFF, BATCH, BATCH_AGE, FINISH_WAIT, SENDERS};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The background half: parents, batches; [`Sender`]s POST them.
pub(super) struct Exporter {
    endpoint: Endpoint,
    client: Arc<Client>,
    timeout: Duration,
    stats: Arc<Stats>,
    processes: HashMap<u32, Resource>,
    tree: Assembler,
    /// Spans released by the tree, waiting to be sent, oldest first.
    ready: Vec<(u32, Span)>,
}

impl Exporter {
    pub(super) fn new(
        endpoint: Endpoint,
        client: Client,
        timeout: Duration,
        stats: Arc<Stats>,
    ) -> Exporter {
        Exporter {
            endpoint,
            client: Arc::new(client),
            timeout,
            stats,
            processes: HashMap::new(),
            tree: Assembler::default(),
            ready: Vec::new(),
        }
    }
}

/// One encoded batch.
struct Batch {
    spans: u64,
    body: Vec<u8>,
}

impl Exporter {
    pub(super) fn run(mut self, rx: Receiver<Msg>) {
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
