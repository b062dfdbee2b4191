//! Function probes in a Go program: a net/http server built here with Debian's Go toolchain,
//! traced at `net/http.serverHandler.ServeHTTP` (one span per request) and at a recursive
//! handler whose stack grows while traced. A return probe would crash it; the Go path puts
//! ordinary uprobes on `ret` instructions instead, so the server must keep serving.
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{named, Target};

/// `tests/testprogs/gohttp/main.go` built with `go build` (cached by Go itself).
fn build_gohttp() -> PathBuf {
    build_go("gohttp")
}

/// `tests/testprogs/NAME/main.go` built with `go build` (cgo on: gcc is part of the setup),
/// once per test process: `go build -o` rewrites its output even when nothing changed, and a
/// file written while another test traces it is detached by that test's `watch` (as it must
/// be: its contents changed in place).
fn build_go(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let p = build_go_now(name);
    built.push((name.to_string(), p.clone()));
    p
}

fn build_go_now(name: &str) -> PathBuf {
    let src = usdt_trace_tests::testprogs::testprogs_dir().join(format!("{name}/main.go"));
    let dir = usdt_trace_tests::testprogs::cache_dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(name);
    let st = Command::new("go")
        .env("CGO_ENABLED", "1")
        .arg("build")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .env("GO111MODULE", "off")
        .status()
        .expect("go (golang-go) not installed: run scripts/setup.sh");
    assert!(st.success(), "go build failed");
    out
}

fn get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.0 200"), "{resp}");
    resp.split("\r\n\r\n").nth(1).unwrap_or("").to_string()
}

/// What the server's deep(n) returns.
fn deep(n: u64) -> u64 {
    (1..=n).map(|k| k % 256).sum()
}

#[test]
#[ignore = "needs root"]
fn go_server_spans_per_request_and_survives_stack_growth() {
    let bin = build_gohttp();
    let b = bin.to_str().unwrap();
    let list = watch::run(&["list", "--functions", "--json", b, "main.deep"]);
    let f: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(f["go"], true);
    assert!(
        f["go_layout"]["entry_offset"].as_u64() > f["file_offset"].as_u64(),
        "{f}"
    );
    assert_eq!(
        f["go_layout"]["ret_offsets"].as_array().unwrap().len(),
        2,
        "{f}"
    );

    let (server, port) = Target::spawn(&bin, &[]);
    let port: u16 = port.trim().parse().unwrap();
    // net/url.parse(rawURL string) gets each request's URL: a Go string (pointer, length).
    let w = watch::Watch::start(&[
        "-p",
        &server.pid().to_string(),
        b,
        "fn:net/http.serverHandler.ServeHTTP",
        "fn:main.deep",
        "fn:net/url.parse",
        "--str",
        "fn:net/url.parse:0",
    ]);
    assert!(
        // An entry and one site per `ret` each (how many rets depends on the Go release).
        w.attached_line.contains(" in 1 object (3 span names)"),
        "{}",
        w.attached_line
    );
    for i in 0..20 {
        assert_eq!(get(port, &format!("/r/{i}")), format!("ok /r/{i}\n"));
    }
    assert_eq!(get(port, "/deep?n=3"), "deep 6\n");
    // 5000 frames of ~0.5 KB: the goroutine's stack is copied several times while traced.
    for _ in 0..5 {
        assert_eq!(get(port, "/deep?n=5000"), format!("deep {}\n", deep(5000)));
    }
    let out = w.stop();
    assert_eq!(get(port, "/after"), "ok /after\n", "still serving");
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    let serve = named(&spans, "net/http.serverHandler.ServeHTTP");
    assert_eq!(serve.len(), 26, "one span per request: {:?}", out.summary());
    let mut urls: Vec<String> = named(&spans, "net/url.parse")
        .iter()
        .map(|s| {
            // The string, then its length as the next argument.
            let u = s["args"][0].as_str().unwrap_or_else(|| panic!("{s}"));
            assert_eq!(s["args"][1], u.len(), "{s}");
            u.to_string()
        })
        .collect();
    urls.sort();
    let mut want: Vec<String> = (0..20).map(|i| format!("/r/{i}")).collect();
    want.push("/deep?n=3".into());
    want.extend(std::iter::repeat_n("/deep?n=5000".to_string(), 5));
    want.sort();
    assert_eq!(urls, want);
    // deep(3): four calls, innermost first, each with its n (RAX) and result (RAX).
    let d: Vec<&Value> = named(&spans, "main.deep")
        .into_iter()
        .filter(|s| s["args"][0].as_u64() <= Some(3) && s["end_args"][0].as_u64() <= Some(6))
        .collect();
    let got: Vec<(Value, Value)> = d
        .iter()
        .take(4)
        .map(|s| (s["args"][0].clone(), s["end_args"][0].clone()))
        .collect();
    assert_eq!(
        got,
        [
            (json!(0), json!(0)),
            (json!(1), json!(1)),
            (json!(2), json!(3)),
            (json!(3), json!(6))
        ]
    );
    drop(server);
}

/// Under load (wrk, 3 s) while traced: every request answered, the server alive after, one
/// span per request except those whose goroutine moved threads (counted as unmatched).
#[test]
#[ignore = "needs root"]
fn go_server_under_wrk_serves_every_request_while_traced() {
    let bin = build_gohttp();
    let b = bin.to_str().unwrap();
    let (server, port) = Target::spawn(&bin, &[]);
    let port: u16 = port.trim().parse().unwrap();
    let w = watch::Watch::start(&[
        "--hist",
        "-p",
        &server.pid().to_string(),
        b,
        "fn:net/http.serverHandler.ServeHTTP",
    ]);
    let out = Command::new("wrk")
        .args([
            "-t2",
            "-c10",
            "-d3s",
            &format!("http://127.0.0.1:{port}/load"),
        ])
        .output()
        .expect("wrk not installed: run scripts/setup.sh");
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{report}");
    assert!(
        !report.contains("Non-2xx") && !report.contains("Socket errors"),
        "{report}"
    );
    let requests: u64 = report
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .and_then(|(n, _)| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no request count: {report}"));
    assert!(requests > 1000, "{report}");
    let out = w.stop();
    assert_eq!(get(port, "/after"), "ok /after\n", "still serving");
    assert!(out.status.success(), "{}", out.stderr);
    let sum = out.summary();
    let spans = sum["spans"].as_u64().unwrap();
    let unmatched = sum["unmatched"].as_u64().unwrap();
    // Requests in flight when wrk stopped may still end; each is a span or an unmatched start.
    assert!(
        spans + unmatched >= requests && spans <= requests + 20,
        "{requests} requests, {sum}"
    );
    drop(server);
}

/// A goroutine that parks mid-call resumes on whichever thread the scheduler picks: spans are
/// paired by goroutine frame, not by thread, so each `blocker(id)` span ends with its own
/// return value (id), once per request, and lasts at least what blocker measured itself.
#[test]
#[ignore = "needs root"]
fn go_spans_pair_by_goroutine_when_goroutines_move_threads() {
    let bin = build_gohttp();
    let b = bin.to_str().unwrap();
    let (server, port) = Target::spawn(&bin, &[]);
    let port: u16 = port.trim().parse().unwrap();
    let w = watch::Watch::start(&["-p", &server.pid().to_string(), b, "fn:main.blocker"]);
    const CLIENTS: u64 = 8;
    const EACH: u64 = 40;
    let took: Vec<(u64, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..CLIENTS)
            .map(|c| {
                s.spawn(move || {
                    (0..EACH)
                        .map(|k| {
                            let id = c * 1000 + k + 1;
                            let body = get(port, &format!("/block?id={id}"));
                            let f: Vec<u64> = body
                                .split_whitespace()
                                .skip(1)
                                .map(|x| x.parse().unwrap())
                                .collect();
                            assert_eq!(f[0], id, "{body}");
                            (id, f[1])
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    let blk = named(&spans, "main.blocker");
    assert_eq!(blk.len() as u64, CLIENTS * EACH, "{:?}", out.summary());
    let mut moved = 0;
    for s in &blk {
        // The start's first argument (RAX) and the end's result (RAX) are the same id.
        let id = s["args"][0].as_u64().unwrap();
        assert_eq!(
            s["end_args"][0].as_u64(),
            Some(id),
            "paired with another call: {s}"
        );
        // A goroutine's span has no thread time split: its threads ran other goroutines.
        assert!(s.get("oncpu_ns").is_none(), "{s}");
        let self_ns = took.iter().find(|t| t.0 == id).unwrap().1;
        let dur = s["duration_ns"].as_u64().unwrap();
        assert!(
            dur >= self_ns,
            "span {dur} ns < blocker's own {self_ns} ns: {s}"
        );
        if s["start_tid"]
            .as_u64()
            .is_some_and(|t| Some(t) != s["tid"].as_u64())
        {
            moved += 1;
        }
    }
    let mut ids: Vec<u64> = blk.iter().map(|s| s["args"][0].as_u64().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len() as u64, CLIENTS * EACH, "each request once");
    assert_eq!(out.summary()["unmatched_end"], 0);
    eprintln!(
        "{moved} of {} spans ended on another thread than they started",
        blk.len()
    );
    assert!(
        moved > 0,
        "no goroutine moved threads: the test did not exercise migration"
    );
    drop(server);
}

/// C code in a Go binary (cgo) follows the C calling convention: `cmul(i, 3)` reads (i, 3)
/// and returns 3i, not Go's registers.
#[test]
#[ignore = "needs root"]
fn c_functions_in_a_cgo_binary_use_the_c_calling_convention() {
    let bin = build_go("gocgo");
    let b = bin.to_str().unwrap();
    let out = watch::Watch::start(&["-c", b, b, "fn:cmul"]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    let got: Vec<(Value, Value, Value)> = named(&spans, "cmul")
        .iter()
        .map(|s| {
            (
                s["args"][0].clone(),
                s["args"][1].clone(),
                s["end_args"][0].clone(),
            )
        })
        .collect();
    let want: Vec<(Value, Value, Value)> =
        (0..5).map(|i| (json!(i), json!(3), json!(3 * i))).collect();
    assert_eq!(got, want);
}

/// A stripped Go program (as distributions ship them) has no `.symtab`: its functions come
/// from the runtime's own `.gopclntab`, at the same addresses with the same `ret`s.
#[test]
#[ignore = "needs root"]
fn a_stripped_go_program_lists_its_functions_from_gopclntab() {
    let bin = build_gohttp();
    let stripped = bin.with_file_name("gohttp-stripped");
    std::fs::copy(&bin, &stripped).unwrap();
    assert!(Command::new("strip")
        .arg(&stripped)
        .status()
        .unwrap()
        .success());
    let list = |p: &std::path::Path| -> Value {
        let out = watch::run(&[
            "list",
            "--functions",
            "--json",
            p.to_str().unwrap(),
            "main.deep",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let (full, bare) = (list(&bin), list(&stripped));
    assert_eq!(bare["table"], "gopclntab");
    assert_eq!(full["table"], "symtab");
    for k in ["address", "file_offset", "go_layout", "end"] {
        assert_eq!(bare[k], full[k], "{k}");
    }
    let out = watch::run(&[
        "list",
        "--functions",
        stripped.to_str().unwrap(),
        "main.deep",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Go functions from .gopclntab"), "{text}");
}

/// The whole cgo binary (`fn:*`, Go runtime and C alike): it prints what it prints untraced,
/// and `cmul`'s spans are still right among them.
#[test]
#[ignore = "needs root"]
fn fn_star_on_a_cgo_binary_computes_the_same() {
    let bin = build_go("gocgo");
    let b = bin.to_str().unwrap();
    let plain = Command::new(b).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "30\n");
    // watch's records to a file: on one shared stdout, the program's "30" can land inside
    // one of watch's lines (they are written in blocks, not lines).
    let recs_file = bin.with_file_name("fn_star.ndjson");
    let out = std::process::Command::new(usdt_trace_tests::watch::usdt_trace_bin())
        .args([
            "watch",
            "--json",
            "-o",
            recs_file.to_str().unwrap(),
            "-c",
            b,
            b,
            "fn:*",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}; the program printed {stdout:?}; {stderr}",
        out.status
    );
    // The program's own output, exactly as untraced.
    assert_eq!(stdout, "30\n", "{stderr}");
    let recs: Vec<Value> = std::fs::read_to_string(&recs_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let cmul: Vec<(Value, Value)> = recs
        .iter()
        .filter(|r| r["type"] == "span" && r["name"] == "cmul")
        .map(|r| (r["args"][0].clone(), r["end_args"][0].clone()))
        .collect();
    assert_eq!(
        cmul,
        (0..5).map(|i| (json!(i), json!(3 * i))).collect::<Vec<_>>()
    );
    // Functions that never return are refused, not left as starts without ends.
    assert!(!recs.iter().any(|r| r["type"] == "event"), "{stderr}");
}
