//! `watch --otlp URL`: spans of a real traced program arrive at an OTLP/HTTP receiver (a tiny
//! HTTP server on loopback, decoding with opentelemetry-proto's own messages) with every field
//! the NDJSON of the same run has; a receiver that dies mid-run costs dropped spans, counted:
//! exported + dropped = spans.
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value as Any, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use usdt_trace_tests::proc::wait_until;
use usdt_trace_tests::watch::{self, Output};
use usdt_trace_tests::watch_util::build_c;

/// Held by the tests that start the Rust demo server: `watch` traces every process running
/// that binary, so two of them at once would each see the other's spans.
static DEMO_SERVER: Mutex<()> = Mutex::new(());

fn one_demo_server() -> std::sync::MutexGuard<'static, ()> {
    DEMO_SERVER.lock().unwrap_or_else(|e| e.into_inner())
}

/// One POST as received.
struct Request {
    path: String,
    content_type: String,
    /// Content-Encoding (the body is decoded).
    encoding: String,
    /// Every header, names in lower case.
    headers: Vec<(String, String)>,
    body: ExportTraceServiceRequest,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Receiver {
    port: u16,
    stop: Arc<AtomicBool>,
    got: Arc<Mutex<Vec<Request>>>,
    thread: Option<JoinHandle<()>>,
}

/// How a [`Receiver::answering`] receiver answers each POST, after reading all of it.
#[derive(Clone, Copy)]
struct Answer {
    delay: Duration,
    status: u16,
}

impl Receiver {
    /// A collector that reads each POST whole, on its own thread, and answers `a.status`
    /// after `a.delay`: what it read counts as received whether or not it answered in time.
    fn answering(a: Answer) -> Receiver {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind receiver");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let got = Arc::new(Mutex::new(Vec::new()));
        let (s, g) = (stop.clone(), got.clone());
        let thread = std::thread::spawn(move || {
            let mut served = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => {
                        let g = g.clone();
                        served.push(std::thread::spawn(move || {
                            if let Some((r, c)) = read_request(c) {
                                g.lock().unwrap().push(r);
                                std::thread::sleep(a.delay);
                                let _ = answer(c, a.status);
                            }
                        }));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for t in served {
                t.join().unwrap();
            }
        });
        Receiver {
            port,
            stop,
            got,
            thread: Some(thread),
        }
    }

    /// Listens on 127.0.0.1:`port` (0: any free port).
    fn start(port: u16) -> Receiver {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind receiver");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let got = Arc::new(Mutex::new(Vec::new()));
        let (s, g) = (stop.clone(), got.clone());
        let thread = std::thread::spawn(move || {
            // One connection at a time, each served to the end: stopping never cuts a request
            // that was read (the exporter would retry it and count it twice).
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => {
                        if let Some(r) = serve(c) {
                            g.lock().unwrap().push(r);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Receiver {
            port,
            stop,
            got,
            thread: Some(thread),
        }
    }

    /// Stops accepting and closes the port (connections are refused until a restart).
    fn kill(mut self) -> Vec<Request> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.got.lock().unwrap())
    }

    fn spans(&self) -> usize {
        count(&self.got.lock().unwrap())
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Every span the collector received, in arrival order.
fn received(reqs: &[Request]) -> Vec<&Span> {
    reqs.iter()
        .flat_map(|r| &r.body.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .collect()
}

fn count(reqs: &[Request]) -> usize {
    received(reqs).len()
}

fn serve(c: TcpStream) -> Option<Request> {
    let (r, c) = read_request(c)?;
    answer(c, 200).ok()?;
    Some(r)
}

/// Through the system's gzip (the tests have no inflate crate).
fn gunzip(gz: &[u8]) -> Vec<u8> {
    use std::process::{Command, Stdio};
    let mut child = Command::new("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gzip");
    let mut stdin = child.stdin.take().unwrap();
    let gz = gz.to_vec();
    let feed = std::thread::spawn(move || stdin.write_all(&gz));
    let out = child.wait_with_output().expect("gzip -dc");
    feed.join().unwrap().expect("gzip's stdin");
    assert!(out.status.success(), "gzip -dc failed");
    out.stdout
}

fn answer(mut c: TcpStream, status: u16) -> std::io::Result<()> {
    write!(
        c,
        "HTTP/1.1 {status} X\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
}

fn read_request(c: TcpStream) -> Option<(Request, TcpStream)> {
    c.set_nonblocking(false).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut r = BufReader::new(c);
    let req = parse_request(&mut r)?;
    Some((req, r.into_inner()))
}

/// One request from `r`; `None` at the end of the connection.
fn parse_request(r: &mut impl BufRead) -> Option<Request> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    assert_eq!(parts.next(), Some("POST"), "{line}");
    let path = parts.next()?.to_string();
    let (mut len, mut content_type, mut encoding) = (0usize, String::new(), String::new());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
        match k.to_ascii_lowercase().as_str() {
            "content-length" => len = v.trim().parse().ok()?,
            "content-type" => content_type = v.trim().to_string(),
            "content-encoding" => encoding = v.trim().to_string(),
            _ => {}
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    // A real collector forwarding to us (rotel) gzips whatever it is told.
    if encoding == "gzip" {
        body = gunzip(&body);
    }
    let body = <ExportTraceServiceRequest as prost::Message>::decode(body.as_slice())
        .unwrap_or_else(|e| {
            panic!("not an ExportTraceServiceRequest ({content_type}, encoding {encoding:?}): {e}")
        });
    Some(Request {
        path,
        content_type,
        encoding,
        headers,
        body,
    })
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Any> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn int(attrs: &[KeyValue], key: &str) -> Option<i64> {
    match attr(attrs, key) {
        Some(Any::IntValue(v)) => Some(*v),
        _ => None,
    }
}

fn string<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attr(attrs, key) {
        Some(Any::StringValue(v)) => Some(v),
        _ => None,
    }
}

/// `(exported, dropped)` from the line `otlp: exported N spans to URL, dropped M...`.
fn totals(stderr: &str) -> (u64, u64) {
    let t = all_totals(stderr);
    (t.exported, t.dropped)
}

#[derive(Debug, PartialEq, Eq)]
struct Totals {
    exported: u64,
    dropped: u64,
    unanswered: u64,
    refused: u64,
}

/// The whole totals line: `..., unanswered U (...)` and `, refused R (...)` when any.
fn all_totals(stderr: &str) -> Totals {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("otlp: exported "))
        .unwrap_or_else(|| panic!("no otlp totals line: {stderr}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |w: &str| -> u64 {
        words
            .iter()
            .position(|x| *x == w)
            .map(|i| {
                words[i + 1]
                    .trim_end_matches(|c: char| !c.is_ascii_digit())
                    .parse()
                    .unwrap()
            })
            .unwrap_or(0)
    };
    Totals {
        exported: words[2].parse().unwrap(),
        dropped: after("dropped"),
        unanswered: after("unanswered"),
        refused: after("refused"),
    }
}

fn run_demo(cmd: &str, url: &str, extra: &[&str]) -> watch::Watch {
    let mut args = vec![
        "--otlp",
        url,
        "--str",
        "ex:inner__start:1",
        "--span",
        "ex:job__start=ex:job__end",
        "--key",
        "0",
        "-c",
        cmd,
    ];
    args.extend_from_slice(extra);
    watch::Watch::start(&args)
}

fn check_span(s: &Span, j: &Value, zero: u64) {
    let a = &s.attributes;
    assert_eq!(
        s.start_time_unix_nano,
        zero + j["start_ns"].as_u64().unwrap()
    );
    assert_eq!(s.end_time_unix_nano, zero + j["end_ns"].as_u64().unwrap());
    assert_eq!(s.trace_id.len(), 16);
    assert_eq!(s.span_id.len(), 8);
    assert_eq!(s.kind, 1, "internal");
    assert_eq!(int(a, "thread.id"), j["tid"].as_i64());
    assert_eq!(string(a, "thread.name"), j["comm"].as_str());
    assert_eq!(string(a, "usdt.provider"), j["provider"].as_str());
    assert_eq!(string(a, "usdt.start"), j["start"].as_str());
    assert_eq!(string(a, "usdt.end"), j["end"].as_str());
    assert_eq!(int(a, "usdt.start_tid"), j["start_tid"].as_i64());
    for (prefix, key) in [("arg", "args"), ("end_arg", "end_args")] {
        for (i, v) in j[key].as_array().unwrap().iter().enumerate() {
            let k = format!("{prefix}{i}");
            match v {
                Value::String(sv) => assert_eq!(string(a, &k), Some(sv.as_str()), "{k}"),
                Value::Null => assert!(attr(a, &k).is_none(), "{k}"),
                n => assert_eq!(int(a, &k), n.as_i64(), "{k}"),
            }
        }
    }
    for k in watch::SPLIT_FIELDS {
        assert_eq!(int(a, &format!("usdt.{k}")), j[k].as_i64(), "{k}");
    }
    // What the sleep and io waited on: the NDJSON's `waits`, and no attribute for a kind it
    // has not.
    for kind in ["lock", "net", "timer", "disk", "fault"] {
        let w = &j["waits"][kind];
        assert_eq!(
            int(a, &format!("usdt.wait.{kind}_ns")),
            w["ns"].as_i64(),
            "{kind}"
        );
        assert_eq!(
            int(a, &format!("usdt.wait.{kind}_count")),
            w["n"].as_i64(),
            "{kind}"
        );
    }
    match j.get("waker") {
        Some(w) => {
            let shown = watch::waker_label(w);
            assert_eq!(string(a, "usdt.waker"), Some(shown.as_str()));
            assert_eq!(int(a, "usdt.waker_off_ns"), w["off_ns"].as_i64());
        }
        None => assert!(attr(a, "usdt.waker").is_none()),
    }
}

fn zero(out: &Output) -> u64 {
    out.of_type("start").next().expect("start record")["clock_zero_unix_ns"]
        .as_u64()
        .unwrap()
}

#[test]
#[ignore = "needs root"]
fn spans_arrive_with_every_field() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let rx = Receiver::start(0);
    let url = format!("http://127.0.0.1:{}", rx.port);
    let out = run_demo(bin.to_str().unwrap(), &url, &["--otlp-service", "demo-svc"]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let reqs = rx.kill();
    let spans = out.spans();
    assert_eq!(spans.len(), 4, "{:?}", out.records);
    assert_eq!(totals(&out.stderr), (4, 0), "{}", out.stderr);
    assert!(!reqs.is_empty());
    for r in &reqs {
        assert_eq!(r.path, "/v1/traces");
        assert_eq!(r.content_type, "application/x-protobuf");
    }
    let pid = spans[0]["pid"].as_i64().unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let mut got: Vec<&Span> = Vec::new();
    for rs in reqs.iter().flat_map(|r| &r.body.resource_spans) {
        let res = &rs.resource.as_ref().expect("resource").attributes;
        assert_eq!(string(res, "service.name"), Some("demo-svc"));
        assert_eq!(string(res, "host.name"), Some(host.trim()));
        assert_eq!(int(res, "process.pid"), Some(pid));
        let exe = std::fs::canonicalize(&bin).unwrap();
        assert_eq!(
            string(res, "process.executable.path"),
            exe.to_str(),
            "{res:?}"
        );
        for ss in &rs.scope_spans {
            assert_eq!(ss.scope.as_ref().unwrap().name, "usdt-trace");
            got.extend(&ss.spans);
        }
    }
    assert_eq!(got.len(), 4);
    let z = zero(&out);
    let find = |n: &str| *got.iter().find(|s| s.name == n).unwrap();
    for j in &spans {
        let name = format!(
            "{}:{}",
            j["provider"].as_str().unwrap(),
            j["name"].as_str().unwrap()
        );
        check_span(find(&name), j, z);
    }
    let (outer, inner, job, work) = (
        find("ex:outer"),
        find("ex:inner"),
        find("ex:job"),
        find("ex:work"),
    );
    // inner ran inside outer on one thread: its child, in its trace.
    assert_eq!(inner.parent_span_id, outer.span_id);
    assert_eq!(inner.trace_id, outer.trace_id);
    for root in [outer, job, work] {
        assert!(root.parent_span_id.is_empty(), "{}", root.name);
    }
    assert_ne!(job.trace_id, outer.trace_id);
    assert_eq!(string(&inner.attributes, "arg1"), Some("hello"));
    assert_eq!(int(&outer.attributes, "arg1"), Some(-5));
    let mut ids: Vec<&Vec<u8>> = got.iter().map(|s| &s.span_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "span ids are distinct");
}

/// The kinds of wait arrive as attributes equal to the NDJSON's `waits` of the same run
/// (`why_scen lock`: each span waits ~10 ms for a mutex another thread holds).
#[test]
#[ignore = "needs root"]
fn wait_kinds_arrive_as_the_ndjson_has_them() {
    let bin = build_c("why_scen", &["-O2", "-pthread"]);
    let rx = Receiver::start(0);
    let url = format!("http://127.0.0.1:{}", rx.port);
    let cmd = format!("{} lock 3", bin.display());
    let out = watch::Watch::start(&["--otlp", &url, "-c", &cmd]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let reqs = rx.kill();
    let spans = out.spans();
    assert_eq!(spans.len(), 3, "{:?}", out.records);
    let got = received(&reqs);
    assert_eq!(got.len(), 3);
    let z = zero(&out);
    for j in &spans {
        let s = got
            .iter()
            .find(|s| s.start_time_unix_nano == z + j["start_ns"].as_u64().unwrap())
            .expect("the span of that start");
        check_span(s, j, z);
        let a = &s.attributes;
        let ns = int(a, "usdt.wait.lock_ns").expect("a lock wait");
        eprintln!("usdt.wait.lock_ns {ns}, NDJSON {}", j["waits"]);
        assert!(ns > 5_000_000, "{ns}");
        assert_eq!(int(a, "usdt.wait.lock_count"), Some(1));
    }
}

/// A span whose polls were marked (attrib_poll.c: one job polled on two threads) carries its
/// idle time, polls and threads as attributes, as the NDJSON of the same run does.
#[test]
#[ignore = "needs root"]
fn polled_span_has_idle_polls_and_threads() {
    let inc = usdt_trace_tests::markers::workspace_root().join("usdt-markers/include");
    let bin = usdt_trace_tests::watch_util::build_c(
        "attrib_poll",
        &["-O2", "-pthread", "-I", inc.to_str().unwrap()],
    );
    let rx = Receiver::start(0);
    let url = format!("http://127.0.0.1:{}", rx.port);
    let out = watch::Watch::start(&["--otlp", &url, "-c", bin.to_str().unwrap()]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let reqs = rx.kill();
    let spans = out.spans();
    assert_eq!(spans.len(), 1, "{:?}", out.records);
    let got = received(&reqs);
    assert_eq!(got.len(), 1);
    check_span(got[0], spans[0], zero(&out));
    let a = &got[0].attributes;
    assert_eq!(
        (int(a, "usdt.polls"), int(a, "usdt.threads")),
        (Some(2), Some(2))
    );
    assert!(int(a, "usdt.idle_ns").unwrap() > 0);
}

#[test]
#[ignore = "needs root"]
fn a_collector_that_dies_and_comes_back_costs_counted_spans() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let rx = Receiver::start(0);
    let port = rx.port;
    let url = format!("http://127.0.0.1:{port}/v1/traces");
    let cmd = format!("{} 100000", bin.display());
    let w = run_demo(&cmd, &url, &["--otlp-queue", "64"]);
    wait_until("the first spans arrive", Duration::from_secs(20), || {
        rx.spans() > 0
    });
    let mut before = rx.kill();
    // Down long enough for the 64-span queue to overflow (the demo ends ~700 spans a second).
    std::thread::sleep(Duration::from_millis(1500));
    let rx = Receiver::start(port);
    wait_until(
        "spans arrive after the restart",
        Duration::from_secs(20),
        || rx.spans() > 0,
    );
    std::thread::sleep(Duration::from_millis(500));
    let out = w.stop();
    before.extend(rx.kill());
    let received = count(&before) as u64;
    let (exported, dropped) = totals(&out.stderr);
    let spans = out.spans().len() as u64;
    eprintln!("{spans} spans: {exported} exported, {dropped} dropped");
    assert_eq!(out.summary()["spans"].as_u64(), Some(spans));
    assert_eq!(exported, received, "{}", out.stderr);
    assert_eq!(exported + dropped, spans, "{}", out.stderr);
    assert!(
        dropped > 0,
        "the outage overflowed the queue: {}",
        out.stderr
    );
    assert!(
        out.stderr.contains("retrying"),
        "the outage was reported: {}",
        out.stderr
    );
    // The default service name is the executable's.
    let res = &before[0].body.resource_spans[0]
        .resource
        .as_ref()
        .unwrap()
        .attributes;
    assert_eq!(string(res, "service.name"), Some("export_demo"));
}

/// The Rust demo server's spans carry usdt-markers ids: `send_message` names its `request` as
/// parent (argument 1), even when the request started on another worker thread.
#[test]
#[ignore = "needs root"]
fn markers_parent_ids_link_spans_across_threads() {
    let _one = one_demo_server();
    use usdt_trace_tests::markers::{demo_servers, free_port, http_request, start_server};
    let bin = &demo_servers().0;
    let port = free_port();
    let _server = start_server(bin, port, None);
    let rx = Receiver::start(0);
    let url = format!("http://127.0.0.1:{}", rx.port);
    let w = watch::Watch::start(&["--otlp", &url, bin.to_str().unwrap()]);
    for _ in 0..10 {
        let r = http_request(
            port,
            "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.status, Some(200));
    }
    // watch drains the ring after detaching: nothing is missed by stopping now.
    let out = w.stop();
    let reqs = rx.kill();
    let spans = out.spans();
    assert_eq!(spans.len(), 20, "{:?}", out.records);
    assert_eq!(totals(&out.stderr), (20, 0), "{}", out.stderr);
    let got = received(&reqs);
    let requests: Vec<&Span> = got
        .iter()
        .copied()
        .filter(|s| s.name == "httpserver:request")
        .collect();
    assert_eq!(requests.len(), 10);
    for send in got.iter().filter(|s| s.name == "httpserver:send_message") {
        let parent_id = int(&send.attributes, "arg1").unwrap();
        let parent = requests
            .iter()
            .find(|r| int(&r.attributes, "arg0") == Some(parent_id))
            .unwrap_or_else(|| panic!("no request {parent_id}"));
        assert_eq!(send.parent_span_id, parent.span_id);
        assert_eq!(send.trace_id, parent.trace_id);
        assert!(parent.parent_span_id.is_empty());
    }
    let traces: std::collections::HashSet<&Vec<u8>> =
        requests.iter().map(|r| &r.trace_id).collect();
    assert_eq!(traces.len(), 10, "one trace per request");
}

/// A request that arrives with a W3C `traceparent` header: the demo server hands its trace id
/// and parent span id to the request span (`trace_context!`), so the kernel-measured request
/// and its nested send_message join the caller's trace under the caller's span.
#[test]
#[ignore = "needs root"]
fn w3c_trace_context_from_the_application_places_spans_in_its_trace() {
    let _one = one_demo_server();
    use usdt_trace_tests::markers::{demo_servers, free_port, http_request, start_server};
    let bin = &demo_servers().0;
    let port = free_port();
    let _server = start_server(bin, port, None);
    let rx = Receiver::start(0);
    let url = format!("http://127.0.0.1:{}", rx.port);
    let w = watch::Watch::start(&["--otlp", &url, bin.to_str().unwrap()]);
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let with_context = format!(
        "GET / HTTP/1.1\r\nHost: localhost\r\ntraceparent: 00-{trace}-{parent}-01\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(http_request(port, &with_context).status, Some(200));
    // And one without: its trace id is generated.
    let plain = "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    assert_eq!(http_request(port, plain).status, Some(200));
    let out = w.stop();
    let reqs = rx.kill();
    assert_eq!(totals(&out.stderr), (4, 0), "{}", out.stderr);
    let got = received(&reqs);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let requests: Vec<&&Span> = got
        .iter()
        .filter(|s| s.name == "httpserver:request")
        .collect();
    assert_eq!(requests.len(), 2);
    let traced = requests
        .iter()
        .find(|r| hex(&r.trace_id) == trace)
        .unwrap_or_else(|| panic!("no request in trace {trace}"));
    assert_eq!(hex(&traced.parent_span_id), parent);
    let other = requests.iter().find(|r| hex(&r.trace_id) != trace).unwrap();
    assert!(other.parent_span_id.is_empty());
    assert_eq!(other.trace_id.len(), 16);
    // The nested send_message follows its request into the caller's trace.
    let sends: Vec<&&Span> = got
        .iter()
        .filter(|s| s.name == "httpserver:send_message" && s.parent_span_id == traced.span_id)
        .collect();
    assert_eq!(sends.len(), 1);
    assert_eq!(hex(&sends[0].trace_id), trace);
}

/// A collector slower than `--otlp-timeout` (it reads each POST at once and answers 2 s
/// later, the timeout is 1 s): nothing is acknowledged, every batch it read is counted as
/// unanswered and never sent again (no span arrives twice), and the warning says the timeout
/// as set. Before, a timed-out POST was retried (each batch arrived three times) and the run
/// said "exported 0 ... dropped" for spans the collector had.
#[test]
#[ignore = "needs root"]
fn a_collector_slower_than_the_timeout_gets_each_span_once_and_counts_them_unanswered() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let rx = Receiver::answering(Answer {
        delay: Duration::from_secs(2),
        status: 200,
    });
    let url = format!("http://127.0.0.1:{}", rx.port);
    let cmd = format!("{} 100000", bin.display());
    let w = run_demo(&cmd, &url, &["--otlp-timeout", "1"]);
    wait_until("the first POST arrives", Duration::from_secs(20), || {
        rx.spans() > 0
    });
    std::thread::sleep(Duration::from_millis(1500));
    let out = w.stop();
    // Every POST the collector read is in `got` as soon as it was read; let the last answer.
    std::thread::sleep(Duration::from_millis(2500));
    let reqs = rx.kill();
    let got = received(&reqs);
    let t = all_totals(&out.stderr);
    let spans = out.spans().len() as u64;
    eprintln!("{spans} spans: {t:?}, {} received", got.len());
    assert_eq!(t.exported, 0, "{}", out.stderr);
    assert_eq!(t.refused, 0, "{}", out.stderr);
    assert_eq!(t.unanswered, got.len() as u64, "{}", out.stderr);
    assert_eq!(t.unanswered + t.dropped, spans, "{}", out.stderr);
    let mut ids: Vec<&Vec<u8>> = got.iter().map(|s| &s.span_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), got.len(), "no span was sent twice");
    assert!(
        out.stderr
            .contains("no answer, timed out after 1 s; not resent"),
        "{}",
        out.stderr
    );
    assert_eq!(
        out.stderr.matches("no answer, timed out").count(),
        1,
        "said once: {}",
        out.stderr
    );
}

/// A collector that refuses every batch (HTTP 400): said once, with the count at the end,
/// not one line per batch; refused + dropped = the spans of the run.
#[test]
#[ignore = "needs root"]
fn a_refusing_collector_is_reported_once_and_counted() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let rx = Receiver::answering(Answer {
        delay: Duration::ZERO,
        status: 400,
    });
    let url = format!("http://127.0.0.1:{}", rx.port);
    let cmd = format!("{} 100000", bin.display());
    let w = run_demo(&cmd, &url, &[]);
    wait_until("two POSTs arrive", Duration::from_secs(20), || {
        rx.got.lock().unwrap().len() >= 2
    });
    let out = w.stop();
    let reqs = rx.kill();
    let t = all_totals(&out.stderr);
    let spans = out.spans().len() as u64;
    eprintln!("{spans} spans in {} POSTs: {t:?}", reqs.len());
    assert!(reqs.len() >= 2);
    assert_eq!(t.exported, 0, "{}", out.stderr);
    assert_eq!(t.refused, count(&reqs) as u64, "{}", out.stderr);
    assert_eq!(t.refused + t.dropped, spans, "{}", out.stderr);
    assert_eq!(
        out.stderr.matches("(HTTP 400); not retried").count(),
        1,
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains(&format!("refused {} (HTTP 400)", t.refused)),
        "{}",
        out.stderr
    );
}

/// The README's bound: after the run ends the exporter takes at most 3 s, even with a
/// collector that reads every POST and never answers and a timeout far above it.
#[test]
#[ignore = "needs root"]
fn the_exporter_stops_within_3_s_of_the_end_whatever_the_collector() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let rx = Receiver::answering(Answer {
        delay: Duration::from_secs(30),
        status: 200,
    });
    let url = format!("http://127.0.0.1:{}", rx.port);
    let cmd = format!("{} 100000", bin.display());
    let w = run_demo(&cmd, &url, &["--otlp-timeout", "60"]);
    wait_until("the first POST arrives", Duration::from_secs(20), || {
        rx.spans() > 0
    });
    let asked = std::time::Instant::now();
    let out = w.stop();
    // Ctrl-C to exit: detaching and draining take well under the margin on an idle run.
    let took = asked.elapsed();
    eprintln!("{}\nCtrl-C to exit: {took:?}", out.stderr);
    assert!(took <= Duration::from_millis(3700), "{took:?}");
    assert!(
        took >= Duration::from_millis(2900),
        "it waited for the answers: {took:?}"
    );
    let t = all_totals(&out.stderr);
    assert_eq!(t.exported, 0);
    assert!(t.unanswered > 0, "{}", out.stderr);
    assert_eq!(t.unanswered + t.dropped, out.spans().len() as u64);
    assert!(
        out.stderr
            .contains("no answer, cut at the end of the 3 s the exporter gets after the run"),
        "{}",
        out.stderr
    );
    rx.stop.store(true, Ordering::Relaxed);
}

/// rotel's agent binary (`python3 -m pip install rotel`; scripts/setup.sh installs it).
fn rotel() -> Option<std::path::PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), 'rotel-agent'))",
        ])
        .output()
        .ok()?;
    let p = std::path::PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && p.is_file()).then_some(p)
}

/// Through a real OpenTelemetry collector (rotel, forwarding over OTLP/HTTP to the test
/// receiver): watch's totals say every span of the run was acknowledged, and each arrives at
/// the far side exactly once, with the parent links the NDJSON's markers ids name.
#[test]
#[ignore = "needs root"]
fn spans_pass_through_a_real_collector_each_once_with_their_parents() {
    let _one = one_demo_server();
    use usdt_trace_tests::markers::{demo_servers, free_port, http_request, start_server};
    let Some(rotel) = rotel() else {
        eprintln!("skipped: rotel not installed (python3 -m pip install rotel)");
        return;
    };
    let rx = Receiver::answering(Answer {
        delay: Duration::ZERO,
        status: 200,
    });
    let (http, grpc) = (free_port(), free_port());
    let mut cmd = std::process::Command::new(rotel);
    cmd.args([
        "start",
        "--otlp-http-endpoint",
        &format!("127.0.0.1:{http}"),
        "--otlp-grpc-endpoint",
        &format!("127.0.0.1:{grpc}"),
        "--exporter",
        "otlp",
        "--otlp-exporter-endpoint",
        &format!("http://127.0.0.1:{}", rx.port),
        "--otlp-exporter-protocol",
        "http",
        "--otlp-exporter-compression",
        "none",
        "--batch-timeout",
        "100ms",
    ])
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    let mut collector = usdt_trace_tests::proc::spawn(&mut cmd);
    wait_until("rotel listens", Duration::from_secs(20), || {
        TcpStream::connect(("127.0.0.1", http)).is_ok()
    });
    let bin = &demo_servers().0;
    let port = free_port();
    let _server = start_server(bin, port, None);
    let url = format!("http://127.0.0.1:{http}");
    let w = watch::Watch::start(&["--otlp", &url, bin.to_str().unwrap()]);
    for _ in 0..200 {
        let r = http_request(
            port,
            "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.status, Some(200));
    }
    let out = w.stop();
    let spans = out.spans();
    assert_eq!(spans.len(), 400, "{}", out.stderr);
    assert_eq!(
        all_totals(&out.stderr),
        Totals {
            exported: 400,
            dropped: 0,
            unanswered: 0,
            refused: 0
        },
        "{}",
        out.stderr
    );
    wait_until(
        "the collector forwards them all",
        Duration::from_secs(20),
        || rx.spans() >= 400,
    );
    std::thread::sleep(Duration::from_millis(500));
    usdt_trace_tests::proc::kill_and_reap(&mut collector);
    let reqs = rx.kill();
    let got = received(&reqs);
    assert_eq!(got.len(), 400, "each span once");
    let mut ids: Vec<&Vec<u8>> = got.iter().map(|s| &s.span_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 400);
    let by_marker: std::collections::HashMap<i64, &Span> = got
        .iter()
        .filter(|s| s.name == "httpserver:request")
        .map(|s| (int(&s.attributes, "arg0").unwrap(), *s))
        .collect();
    assert_eq!(by_marker.len(), 200);
    for send in got.iter().filter(|s| s.name == "httpserver:send_message") {
        let parent = by_marker[&int(&send.attributes, "arg1").unwrap()];
        assert_eq!(send.parent_span_id, parent.span_id);
        assert_eq!(send.trace_id, parent.trace_id);
    }
}

/// A certificate authority and a collector certificate for 127.0.0.1 and localhost that it
/// signed, made for this run (rcgen).
struct TestPki {
    ca_pem: String,
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
}

fn test_pki(name: &str) -> TestPki {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, format!("usdt-trace test CA {name}"));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, "usdt-trace test collector");
    let cert = leaf.signed_by(&key, &*ca).unwrap();
    TestPki {
        ca_pem: ca.pem(),
        cert_der: cert.der().to_vec(),
        key_der: key.serialize_der(),
    }
}

/// `pem` in a file of its own, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let p = std::env::temp_dir().join(format!("usdt-trace-otlp-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        TempFile(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl TempFile {
    /// A FIFO no one writes to.
    fn fifo(name: &str) -> TempFile {
        let p = std::env::temp_dir().join(format!("usdt-trace-otlp-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let made = std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .unwrap();
        assert!(made.success());
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Receiver {
    /// An OTLP/HTTPS collector (rustls on ring) with `pki`'s certificate: each connection on
    /// its own thread, kept alive across requests, each answered 200. `handshakes_failed`
    /// counts clients that gave up in the TLS handshake.
    fn tls(pki: &TestPki) -> (Receiver, Arc<std::sync::atomic::AtomicUsize>) {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(pki.cert_der.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.key_der.clone())),
            )
            .unwrap();
        let cfg = Arc::new(cfg);
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind receiver");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let got = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (s, g, f) = (stop.clone(), got.clone(), failed.clone());
        let thread = std::thread::spawn(move || {
            let mut served = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => {
                        let (g, f, cfg) = (g.clone(), f.clone(), cfg.clone());
                        served.push(std::thread::spawn(move || serve_tls(c, cfg, &g, &f)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for t in served {
                t.join().unwrap();
            }
        });
        let rx = Receiver {
            port,
            stop,
            got,
            thread: Some(thread),
        };
        (rx, failed)
    }
}

fn serve_tls(
    c: TcpStream,
    cfg: Arc<rustls::ServerConfig>,
    got: &Mutex<Vec<Request>>,
    failed: &std::sync::atomic::AtomicUsize,
) {
    let _ = c.set_nonblocking(false);
    let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
    let mut conn = rustls::ServerConnection::new(cfg).unwrap();
    let mut c = c;
    while conn.is_handshaking() {
        if conn.complete_io(&mut c).is_err() {
            failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    let mut r = BufReader::new(rustls::StreamOwned::new(conn, c));
    while let Some(req) = parse_request(&mut r) {
        got.lock().unwrap().push(req);
        let s = r.get_mut();
        let ok = s
            .write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
            )
            .and_then(|_| s.flush());
        if ok.is_err() {
            return;
        }
    }
}

/// OTLP over TLS to a collector whose certificate a CA made for this test signed, trusted with
/// --otlp-ca: every span of the run arrives once, each POST with the headers --otlp-header
/// asked for and gzipped as --otlp-compression asked, and the run's totals say all were
/// acknowledged.
#[test]
#[ignore = "needs root"]
fn tls_with_a_given_ca_headers_and_gzip_every_span_arrives() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let pki = test_pki("tls");
    let ca = TempFile::new("ca.pem", &pki.ca_pem);
    let (rx, failed) = Receiver::tls(&pki);
    let url = format!("https://127.0.0.1:{}", rx.port);
    let cmd = format!("{} 300", bin.display());
    let started = std::time::Instant::now();
    let out = run_demo(
        &cmd,
        &url,
        &[
            "--otlp-ca",
            ca.path(),
            "--otlp-header",
            "x-api-key=s3cret",
            "--otlp-header",
            "x-tenant=team a",
            "--otlp-compression",
            "gzip",
        ],
    )
    .finish();
    let took = started.elapsed();
    assert!(out.status.success(), "{}", out.stderr);
    // Every POST was answered before watch exited.
    let reqs = rx.kill();
    let spans = out.spans().len() as u64;
    let t = all_totals(&out.stderr);
    eprintln!(
        "{spans} spans in {} POSTs over TLS in {took:?}: {t:?}",
        reqs.len()
    );
    assert_eq!(spans, 1200, "{}", out.stderr);
    assert_eq!(
        t,
        Totals {
            exported: spans,
            dropped: 0,
            unanswered: 0,
            refused: 0
        },
        "{}",
        out.stderr
    );
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no handshake failed");
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    for r in &reqs {
        assert_eq!(r.path, "/v1/traces");
        assert_eq!(r.content_type, "application/x-protobuf");
        assert_eq!(r.encoding, "gzip");
        assert_eq!(r.header("x-api-key"), Some("s3cret"));
        assert_eq!(r.header("x-tenant"), Some("team a"));
    }
    let got = received(&reqs);
    assert_eq!(got.len() as u64, spans, "every span arrived");
    let mut ids: Vec<&Vec<u8>> = got.iter().map(|s| &s.span_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len() as u64, spans, "each once");
}

/// A collector whose certificate is not trusted (signed by a CA other than the one --otlp-ca
/// names, or by none the system trusts): no span is sent in clear or retried forever; the
/// reason is said once, on one line, naming the certificate problem; the spans are counted
/// as refused; and watch exits at once.
#[test]
#[ignore = "needs root"]
fn an_untrusted_certificate_is_refused_said_once_and_counted() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let pki = test_pki("server");
    let other = test_pki("other");
    let other_ca = TempFile::new("other-ca.pem", &other.ca_pem);
    let (rx, failed) = Receiver::tls(&pki);
    let url = format!("https://127.0.0.1:{}", rx.port);
    let says = "TLS: the collector's certificate was not accepted (signed by an unknown authority: not trusted; see --otlp-ca)";
    // Another CA given: a long run, stopped once the refusal was said.
    let cmd = format!("{} 100000", bin.display());
    let mut w = run_demo(&cmd, &url, &["--otlp-ca", other_ca.path()]);
    let warned = w.wait_stderr(Duration::from_secs(20), |l| l.contains("not accepted"));
    assert!(warned.is_some(), "the refusal is said while running");
    std::thread::sleep(Duration::from_millis(1000));
    let asked = std::time::Instant::now();
    let out = w.stop();
    let took = asked.elapsed();
    let t = all_totals(&out.stderr);
    let spans = out.spans().len() as u64;
    eprintln!(
        "{spans} spans, {t:?}; Ctrl-C to exit: {took:?}\n{}",
        out.stderr
    );
    assert_eq!(t.exported, 0, "{}", out.stderr);
    assert_eq!(t.unanswered, 0, "{}", out.stderr);
    assert!(t.refused > 0, "{}", out.stderr);
    assert_eq!(t.refused + t.dropped, spans, "{}", out.stderr);
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("not accepted"))
        .collect();
    // The warning once, and the totals line naming the reason.
    assert_eq!(lines.len(), 2, "{}", out.stderr);
    assert!(
        lines[0].starts_with(&format!("otlp: warning: POST {url}/v1/traces: {says}; ")),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].ends_with(&format!("refused {} ({says})", t.refused)),
        "{}",
        lines[1]
    );
    // Nothing is waited for once the run is over (the 3 s grace is for POSTs out).
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert!(failed.load(Ordering::Relaxed) > 0);

    // No --otlp-ca: the system's roots do not know the test CA either.
    let started = std::time::Instant::now();
    let out = run_demo(bin.to_str().unwrap(), &url, &[]).finish();
    let took = started.elapsed();
    assert!(out.status.success(), "{}", out.stderr);
    let t = all_totals(&out.stderr);
    eprintln!("system roots: {t:?} in {took:?}");
    assert_eq!(
        (t.exported, t.refused, t.dropped),
        (0, 4, 0),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains(says), "{}", out.stderr);
    assert!(rx.kill().is_empty(), "nothing got through");
}

/// The OpenTelemetry SDKs' environment, end to end: `--otlp env` sends to
/// OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces with OTEL_EXPORTER_OTLP_HEADERS (percent-decoded),
/// the compression, OTEL_SERVICE_NAME over the service.name of OTEL_RESOURCE_ATTRIBUTES, and
/// the other resource attributes; flags given win over the environment.
#[test]
#[ignore = "needs root"]
fn the_sdk_environment_is_honoured_end_to_end() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let rx = Receiver::start(0);
    let base = format!("http://127.0.0.1:{}/base/", rx.port);
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", base.as_str()),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-api-key=from%20env, x-team=obs",
        ),
        ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "4000"),
        ("OTEL_SERVICE_NAME", "env-svc"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=not-this,deployment.environment=test%20env",
        ),
    ];
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--span",
            "ex:job__start=ex:job__end",
            "--key",
            "0",
            "-c",
            bin.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        watch::Watch::start_env(&args, true, &env).finish()
    };
    let out = run(&["--otlp", "env"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(totals(&out.stderr), (4, 0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("to http://127.0.0.1:{}/base/v1/traces", rx.port)),
        "{}",
        out.stderr
    );
    let reqs = std::mem::take(&mut *rx.got.lock().unwrap());
    assert_eq!(count(&reqs), 4);
    for r in &reqs {
        assert_eq!(r.path, "/base/v1/traces");
        assert_eq!(r.header("x-api-key"), Some("from env"));
        assert_eq!(r.header("x-team"), Some("obs"));
        assert_eq!(r.encoding, "gzip");
        for rs in &r.body.resource_spans {
            let res = &rs.resource.as_ref().unwrap().attributes;
            assert_eq!(string(res, "service.name"), Some("env-svc"));
            assert_eq!(string(res, "deployment.environment"), Some("test env"));
            assert!(string(res, "process.executable.path").is_some());
        }
    }
    // Flags win: the URL, the headers (all of them: the variable's are not added) and the
    // compression.
    let url = format!("http://127.0.0.1:{}", rx.port);
    let out = run(&[
        "--otlp",
        &url,
        "--otlp-header",
        "x-api-key=from-flag",
        "--otlp-compression",
        "none",
        "--otlp-service",
        "flag-svc",
    ]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(totals(&out.stderr), (4, 0), "{}", out.stderr);
    let reqs = rx.kill();
    assert_eq!(count(&reqs), 4);
    for r in &reqs {
        assert_eq!(r.path, "/v1/traces");
        assert_eq!(r.header("x-api-key"), Some("from-flag"));
        assert_eq!(r.header("x-team"), None);
        assert_eq!(r.encoding, "");
        let res = &r.body.resource_spans[0]
            .resource
            .as_ref()
            .unwrap()
            .attributes;
        assert_eq!(string(res, "service.name"), Some("flag-svc"));
    }
}

/// Bad --otlp input stops watch before it attaches (no root needed): one line on stderr
/// naming the flag or variable, a non-zero exit status, never a panic.
#[test]
fn bad_otlp_input_is_a_one_line_error() {
    let dir = std::env::temp_dir();
    let not_pem = TempFile::new("not-a-ca.pem", "hello\n");
    let fifo = TempFile::fifo("ca-fifo.pem");
    let big = TempFile::new("big-ca.pem", "");
    std::fs::File::options()
        .write(true)
        .open(&big.0)
        .unwrap()
        .set_len(5 << 20)
        .unwrap();
    // (flags, environment, what the error says)
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec!["--otlp", "ftp://x"],
            vec![],
            "--otlp ftp://x: only http:// and https:// URLs are supported",
        ),
        (
            vec!["--otlp", "https://x", "--otlp-header", "no-equals"],
            vec![],
            "--otlp-header \"no-equals\": expected KEY=VALUE",
        ),
        (
            vec!["--otlp", "https://x", "--otlp-compression", "zstd"],
            vec![],
            "--otlp-compression \"zstd\": unsupported compression (expected gzip or none)",
        ),
        (
            vec!["--otlp", "https://x", "--otlp-ca", "/nonexistent/ca.pem"],
            vec![],
            "--otlp-ca /nonexistent/ca.pem: No such file or directory",
        ),
        (
            vec!["--otlp", "https://x", "--otlp-ca", not_pem.path()],
            vec![],
            "no certificate in it",
        ),
        (
            vec!["--otlp", "env"],
            vec![("OTEL_EXPORTER_OTLP_HEADERS", "api-key")],
            "OTEL_EXPORTER_OTLP_HEADERS: \"api-key\": expected key=value pairs",
        ),
        (
            vec!["--otlp", "env"],
            vec![("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "localhost:4318")],
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT localhost:4318: only http:// and https://",
        ),
        // Refused at start, shown escaped. Before: accepted, every POST failed, exit 0.
        (
            vec!["--otlp", "http://127.0.0.1:4318/v1/traces\r\nX-Injected: 1"],
            vec![],
            "--otlp http://127.0.0.1:4318/v1/traces\\u{d}\\u{a}X-Injected: 1: control characters in a URL",
        ),
        (
            vec!["--otlp", "env"],
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x/\x1b[2J")],
            "OTEL_EXPORTER_OTLP_ENDPOINT http://x/\\u{1b}[2J: control characters in a URL",
        ),
        // Not waited on (a FIFO without a writer hung), not read (/dev/zero grew ~1.3 GB/s).
        (
            vec!["--otlp", "https://x", "--otlp-ca", fifo.path()],
            vec![],
            ": not a regular file",
        ),
        (
            vec!["--otlp", "https://x", "--otlp-ca", "/dev/zero"],
            vec![],
            "--otlp-ca /dev/zero: not a regular file",
        ),
        (
            vec!["--otlp", "https://x"],
            vec![("OTEL_EXPORTER_OTLP_CERTIFICATE", fifo.path())],
            "OTEL_EXPORTER_OTLP_CERTIFICATE ",
        ),
        (
            vec!["--otlp", "https://x", "--otlp-ca", big.path()],
            vec![],
            ": larger than 4 MiB: not a PEM file of certificates",
        ),
    ];
    for (args, env, says) in cases {
        let started = std::time::Instant::now();
        let mut cmd = std::process::Command::new(watch::usdt_trace_bin());
        cmd.arg("watch")
            .args(&args)
            .arg("/bin/true")
            .envs(env.iter().copied());
        cmd.current_dir(&dir);
        let out = usdt_trace_tests::proc::output_within(&mut cmd, Duration::from_secs(20));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        // One error line (a usage error adds its `hint: see '... --help'`).
        let lines = err
            .trim_end()
            .lines()
            .filter(|l| !l.starts_with("hint: see '"));
        assert_eq!(lines.count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{args:?}: {:?}",
            started.elapsed()
        );
    }
}

/// A certificate made the usual way, `openssl req -x509 -newkey rsa:2048 -nodes` for
/// 127.0.0.1 (self-signed, and CA:TRUE as openssl makes them), its key, and the PEM file.
fn openssl_self_signed(name: &str) -> (TestPki, TempFile) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let dir = std::env::temp_dir();
    let stem = format!("usdt-trace-otlp-{}-{name}", std::process::id());
    let (cert, key) = (
        dir.join(format!("{stem}.pem")),
        dir.join(format!("{stem}.key")),
    );
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(out.status.success(), "{out:?}");
    let pem = std::fs::read_to_string(&cert).unwrap();
    let key_pem = std::fs::read(&key).unwrap();
    let _ = std::fs::remove_file(&key);
    let key_der = match PrivateKeyDer::from_pem_slice(&key_pem).unwrap() {
        PrivateKeyDer::Pkcs8(k) => k.secret_pkcs8_der().to_vec(),
        other => panic!("openssl wrote a key that is not PKCS#8: {other:?}"),
    };
    let pki = TestPki {
        cert_der: CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec(),
        ca_pem: pem,
        key_der,
    };
    (pki, TempFile(cert))
}

/// Whether `curl --cacert CA` completes a POST to `url` (None: no curl here).
fn curl_accepts(ca: &str, url: &str) -> Option<bool> {
    let out = std::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "--max-time", "10", "--cacert", ca])
        .args([
            "-H",
            "Content-Type: application/x-protobuf",
            "--data-binary",
            "",
        ])
        .arg(url)
        .output()
        .ok()?;
    eprintln!(
        "curl --cacert {ca}: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Some(out.status.success())
}

/// A self-signed certificate made with `openssl req -x509` (CA:TRUE) given as --otlp-ca is
/// trusted, as `curl --cacert` trusts it: every span arrives. Before, rustls refused it with a
/// debug dump (`Other(OtherError(CaUsedAsEndEntity))`). Another self-signed certificate of
/// the same name given instead is refused in words (it was "bad signature"), and so is the
/// collector's own without --otlp-ca.
#[test]
#[ignore = "needs root"]
fn a_self_signed_certificate_given_to_otlp_ca_is_trusted_as_curl_trusts_it() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let (pki, cert) = openssl_self_signed("self");
    let (_, other) = openssl_self_signed("other");
    let (rx, _) = Receiver::tls(&pki);
    let url = format!("https://127.0.0.1:{}", rx.port);
    // The oracle: curl takes the one and refuses the other.
    if let Some(ok) = curl_accepts(cert.path(), &format!("{url}/v1/traces")) {
        assert!(ok, "curl --cacert refused the collector's own certificate");
        assert_eq!(
            curl_accepts(other.path(), &format!("{url}/v1/traces")),
            Some(false)
        );
    }
    rx.got.lock().unwrap().clear();

    let cmd = format!("{} 300", bin.display());
    let out = run_demo(&cmd, &url, &["--otlp-ca", cert.path()]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans().len() as u64;
    assert_eq!(spans, 1200, "{}", out.stderr);
    assert_eq!(
        all_totals(&out.stderr),
        Totals {
            exported: spans,
            dropped: 0,
            unanswered: 0,
            refused: 0
        },
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    assert_eq!(count(&rx.got.lock().unwrap()), 1200);

    for (args, says) in [
        (
            vec!["--otlp-ca", other.path()],
            "TLS: the collector's certificate was not accepted (not trusted: self-signed, and not the certificate given to --otlp-ca)",
        ),
        (
            vec![],
            "TLS: the collector's certificate was not accepted (not trusted: self-signed; give it to --otlp-ca to trust it)",
        ),
    ] {
        let out = run_demo(bin.to_str().unwrap(), &url, &args).finish();
        eprintln!("{args:?}:\n{}", out.stderr);
        assert!(out.status.success(), "{}", out.stderr);
        assert!(out.stderr.contains(says), "{}", out.stderr);
        assert!(!out.stderr.contains("Other("), "{}", out.stderr);
        assert!(!out.stderr.contains("bad signature"), "{}", out.stderr);
        let t = all_totals(&out.stderr);
        assert_eq!((t.exported, t.refused), (0, 4), "{}", out.stderr);
    }
    assert_eq!(count(&rx.kill()), 1200, "nothing more got through");
}

const SIGINT: i32 = 2;

/// How long after `since` the process `pid` (our unreaped child) exited: a zombie then. Not
/// through `Watch::finish`, which also reads and parses every record it printed (hundreds of
/// ms for thousands beside a CPU hog).
fn exited_within(pid: u32, since: std::time::Instant) -> Duration {
    let zombie = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
        })
    };
    wait_until("watch exits", Duration::from_secs(10), zombie);
    since.elapsed()
}

/// Ctrl-C against a collector that takes every POST and never answers: the first starts the
/// exporter's bounded wait (3 s), a second ends the run at once, and the totals count the
/// spans not sent. Before, the second changed nothing: 3.1–3.4 s either way. A run that ended
/// by itself says, once the wait is a second long, that a Ctrl-C cuts it short, and one does.
#[test]
#[ignore = "needs root"]
fn a_second_ctrl_c_ends_the_wait_for_a_silent_collector_at_once_counting_what_was_not_sent() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let rx = Receiver::answering(Answer {
        delay: Duration::from_secs(60),
        status: 200,
    });
    let url = format!("http://127.0.0.1:{}", rx.port);
    let cmd = format!("{} 100000", bin.display());
    let mut w = run_demo(&cmd, &url, &["--otlp-timeout", "60"]);
    // Every sender is held in a POST; then spans pile up behind them.
    wait_until("four POSTs arrive", Duration::from_secs(20), || {
        rx.got.lock().unwrap().len() >= 4
    });
    std::thread::sleep(Duration::from_millis(1500));
    let first = std::time::Instant::now();
    usdt_trace_tests::proc::signal(w.pid(), SIGINT);
    // Inside the 3 s the first one grants: once the wait has said how to cut it short (1 s
    // into it, past detaching and draining the ring, which a second Ctrl-C does not skip).
    let said = w.wait_stderr(Duration::from_secs(10), |l| {
        l.starts_with("otlp: waiting for")
    });
    assert!(said.is_some(), "the wait is said");
    // The wait is said 1 s after it began: the rest is the run's end before it.
    eprintln!("the first Ctrl-C to the wait said: {:?}", first.elapsed());
    let second = std::time::Instant::now();
    usdt_trace_tests::proc::signal(w.pid(), SIGINT);
    let took = exited_within(w.pid(), second);
    let out = w.finish();
    let t = all_totals(&out.stderr);
    let spans = out.spans().len() as u64;
    eprintln!(
        "{spans} spans, {t:?}; exit {took:?} after the second Ctrl-C\n{}",
        out.stderr
    );
    assert!(took < Duration::from_millis(500), "{took:?}");
    assert_eq!(t.exported, 0, "{}", out.stderr);
    assert!(t.unanswered > 0, "{}", out.stderr);
    assert!(t.dropped > 0, "{}", out.stderr);
    assert_eq!(t.unanswered + t.dropped, spans, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "dropped {} (not sent: a Ctrl-C ended the wait for the collector)",
            t.dropped
        )),
        "{}",
        out.stderr
    );

    // A run that ended by itself (its command exited): the wait says how to cut it short,
    // and one Ctrl-C does.
    let cmd = format!("{} 300", bin.display());
    let mut w = run_demo(&cmd, &url, &["--otlp-timeout", "60"]);
    let said = w.wait_stderr(Duration::from_secs(20), |l| {
        l.starts_with("otlp: waiting for")
    });
    assert_eq!(
        said.as_deref(),
        Some(
            format!("otlp: waiting for {url}/v1/traces (at most 2 s more); Ctrl-C to stop waiting")
                .as_str()
        )
    );
    let first = std::time::Instant::now();
    usdt_trace_tests::proc::signal(w.pid(), SIGINT);
    let took = exited_within(w.pid(), first);
    let out = w.finish();
    eprintln!(
        "ended by itself: exit {took:?} after one Ctrl-C\n{}",
        out.stderr
    );
    assert!(took < Duration::from_millis(500), "{took:?}");
    let t = all_totals(&out.stderr);
    assert_eq!(
        t.unanswered + t.dropped,
        out.spans().len() as u64,
        "{}",
        out.stderr
    );
    rx.stop.store(true, Ordering::Relaxed);
}
