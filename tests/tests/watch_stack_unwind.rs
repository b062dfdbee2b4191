//! `--stack=dwarf|fp|auto`: a call chain 12 deep (`stack_deep.c`) built with and without
//! frame pointers, every frame named in both; the frames of a process gone before its stack
//! was read; and the release demo server (no frame pointers) with real named frames.
use serde_json::Value;
use std::time::Duration;
use usdt_trace_tests::watch::Watch;
use usdt_trace_tests::watch_util::{build_c, Target};

/// The chain, innermost first: chain12 (where the span ends) up to chain01, then main.
fn chain() -> Vec<String> {
    (1..=12)
        .rev()
        .map(|i| format!("chain{i:02}"))
        .chain(["main".to_string()])
        .collect()
}

const NO_FP: &[&str] = &["-O2", "-fomit-frame-pointer"];
const FP: &[&str] = &["-O2", "-fno-omit-frame-pointer"];

/// The function names of a span's stack, innermost first ("?" for an unnamed frame), with
/// `run` (main's loop, inlined or not as gcc likes) left out.
fn names(span: &Value) -> Vec<String> {
    span["stack"]
        .as_array()
        .unwrap_or_else(|| panic!("no stack: {span}"))
        .iter()
        .map(|f| f["sym"].as_str().unwrap_or("?").to_string())
        .filter(|n| n != "run")
        .collect()
}

/// Runs `n` spans in a fresh stack_deep built with `cflags`, under `watch --min 1ms ARGS`.
fn traced(cflags: &[&str], args: &[&str], n: usize) -> (Vec<Value>, Value, String) {
    let bin = build_c("stack_deep", cflags);
    let b = bin.to_str().unwrap().to_string();
    let (mut t, ready) = Target::spawn(&bin, &[]);
    assert_eq!(ready, "ready");
    let pid = t.pid().to_string();
    let mut all = vec!["--min", "1ms"];
    all.extend(args);
    all.extend(["-p", &pid, &b]);
    let mut w = Watch::start(&all);
    let done = t.ask(&n.to_string());
    assert!(done.starts_with(&format!("done {n} ")), "{done}");
    let mut seen = 0;
    w.wait_for(Duration::from_secs(20), |r| {
        seen += (r["type"] == "span") as usize;
        seen >= n
    });
    let out = w.stop();
    let summary = out.summary().clone();
    (out.spans().into_iter().cloned().collect(), summary, b)
}

/// Every span's stack names the 12 frames and main, each in the program's file, reached as
/// `how` says (the innermost by the registers).
fn assert_chain(spans: &[Value], summary: &Value, bin: &str, n: usize, how: Option<&str>) {
    assert_eq!(spans.len(), n, "{spans:?}");
    let want = chain();
    for s in spans {
        let got = names(s);
        assert!(got.len() >= want.len(), "{s}");
        assert_eq!(got[..want.len()], want[..], "{s}");
        for f in s["stack"].as_array().unwrap().iter().take(12) {
            assert_eq!(f["object"], bin, "{s}");
            assert!(f["offset"].as_u64().unwrap() > 0, "{f}");
        }
        let unwind: Vec<Option<&str>> = s["stack"]
            .as_array()
            .unwrap()
            .iter()
            .take(13)
            .map(|f| f["unwind"].as_str())
            .collect();
        match how {
            Some(h) => {
                assert_eq!(unwind[0], Some("regs"), "{s}");
                assert!(unwind[1..].iter().all(|u| *u == Some(h)), "{s}");
            }
            None => assert!(unwind.iter().all(Option::is_none), "{s}"),
        }
        assert!(s.get("stack_error").is_none(), "{s}");
    }
    assert!(summary.get("stacks_failed").is_none(), "{summary}");
}

#[test]
#[ignore = "needs root"]
fn dwarf_stack_names_all_12_frames_without_frame_pointers() {
    let (spans, summary, bin) = traced(NO_FP, &["--stack=dwarf"], 3);
    assert_chain(&spans, &summary, &bin, 3, Some("cfi"));
    // ... through main and libc's start to _start: the walk ends where the CFI says the
    // stack ends, not stopped.
    for s in &spans {
        assert!(s.get("stack_stopped").is_none(), "{s}");
        assert_eq!(names(s).last().map(String::as_str), Some("_start"), "{s}");
    }
}

#[test]
#[ignore = "needs root"]
fn auto_stack_picks_dwarf_for_a_build_without_frame_pointers() {
    let (spans, summary, bin) = traced(NO_FP, &["--stack"], 3);
    assert_chain(&spans, &summary, &bin, 3, Some("cfi"));
}

#[test]
#[ignore = "needs root"]
fn dwarf_stack_names_all_12_frames_with_frame_pointers() {
    let (spans, summary, bin) = traced(FP, &["--stack=dwarf"], 3);
    assert_chain(&spans, &summary, &bin, 3, Some("cfi"));
}

#[test]
#[ignore = "needs root"]
fn fp_and_auto_stacks_name_all_12_frames_with_frame_pointers() {
    for args in [&["--stack=fp"][..], &["--stack"]] {
        let (spans, summary, bin) = traced(FP, args, 3);
        // The kernel's walk: no `unwind` field.
        assert_chain(&spans, &summary, &bin, 3, None);
    }
}

#[test]
#[ignore = "needs root"]
fn dwarf_stack_of_a_command_that_exited_is_unwound_in_the_probes_file() {
    // Under -c the process has usually exited by the time its records are read: the probe's
    // file alone is unwound (placed by the probe), and the walk stops, saying so, where it
    // leaves that file (libc's start).
    let bin = build_c("stack_deep", NO_FP);
    let b = bin.to_str().unwrap();
    let cmd = format!("{b} 3");
    let out = Watch::start(&["--min", "1ms", "--stack=dwarf", "-c", &cmd, b]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    assert_eq!(spans.len(), 3, "{:?}", out.records);
    for s in &spans {
        assert_eq!(names(s)[..13], chain()[..], "{s}");
        // Never a garbage frame: every frame is named, and a stop is said.
        for f in s["stack"].as_array().unwrap() {
            assert!(f["sym"].is_string(), "{s}");
        }
    }
}

#[test]
#[ignore = "needs root"]
fn dwarf_stack_of_the_release_demo_server_names_its_frames() {
    use usdt_trace_tests::markers::{demo_server_release, free_port, http_request, start_server};
    let bin = demo_server_release();
    let port = free_port();
    let server = start_server(bin, port, None);
    let pid = server.0.id().to_string();
    let b = bin.to_str().unwrap();
    let mut w = Watch::start(&[
        "--min",
        "1ns",
        "--stack",
        "-p",
        &pid,
        b,
        "httpserver:request*",
    ]);
    let mut seen = 0;
    for _ in 0..3 {
        let r = http_request(
            port,
            "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.status, Some(200));
    }
    w.wait_for(Duration::from_secs(20), |r| {
        seen += (r["type"] == "span") as usize;
        seen >= 3
    });
    let out = w.stop();
    let spans = out.spans();
    assert!(spans.len() >= 3, "{:?}", out.records);
    for s in &spans {
        let stack = s["stack"].as_array().unwrap_or_else(|| panic!("{s}"));
        let got = names(s);
        // Unwound by CFI (auto picked DWARF: the release build keeps no frame pointers), and
        // deeper than the kernel's frame-pointer walk got (the probe and a garbage address).
        assert_eq!(stack[1]["unwind"], "cfi", "{s}");
        assert!(got.len() >= 6, "{got:?}");
        // The frames are the server's own code and tokio's, by name.
        assert!(got.iter().any(|n| n.contains("demo_httpserver")), "{got:?}");
        assert!(got.iter().any(|n| n.contains("tokio")), "{got:?}");
        // Every address shown is named or in a mapped object: none is garbage.
        for f in stack {
            assert!(f["object"].is_string(), "{s}");
        }
    }
}

/// No `.eh_frame` for the program's own code (its CIE/FDEs left out at compile time); with
/// `-g` (what the tests build with) its CFI is in `.debug_frame` instead, with `-g0` nowhere.
const NO_EH_FRAME: &[&str] = &["-fno-asynchronous-unwind-tables", "-fno-unwind-tables"];
const NO_CFI: &[&str] = &[
    "-fno-asynchronous-unwind-tables",
    "-fno-unwind-tables",
    "-g0",
];

#[test]
#[ignore = "needs root"]
fn dwarf_stack_reads_debug_frame_where_there_is_no_eh_frame() {
    let flags: Vec<&str> = NO_FP.iter().chain(NO_EH_FRAME).copied().collect();
    let (spans, summary, bin) = traced(&flags, &["--stack=dwarf"], 2);
    assert_chain(&spans, &summary, &bin, 2, Some("cfi"));
}

#[test]
#[ignore = "needs root"]
fn dwarf_stack_follows_frame_pointers_where_an_object_has_no_cfi() {
    let flags: Vec<&str> = FP.iter().chain(NO_CFI).copied().collect();
    let (spans, summary, bin) = traced(&flags, &["--stack=dwarf"], 2);
    // Every frame above the probe reached by its callee's frame pointer, and named.
    assert_chain(&spans, &summary, &bin, 2, Some("fp"));
    for s in &spans {
        // ... back to CFI in libc (which has it), and on to _start.
        assert!(s.get("stack_stopped").is_none(), "{s}");
        let stack = s["stack"].as_array().unwrap();
        assert!(stack.iter().any(|f| f["unwind"] == "cfi"), "{s}");
    }
}

#[test]
#[ignore = "needs root"]
fn dwarf_stack_without_cfi_or_frame_pointers_says_where_it_stopped() {
    let flags: Vec<&str> = NO_FP.iter().chain(NO_CFI).copied().collect();
    let (spans, summary, _) = traced(&flags, &["--stack=dwarf"], 2);
    assert_eq!(spans.len(), 2);
    for s in &spans {
        // The probe's frame (from the registers), then the reason: never a guessed frame.
        assert_eq!(names(s), ["chain12"], "{s}");
        let why = s["stack_stopped"].as_str().unwrap_or_else(|| panic!("{s}"));
        assert!(why.starts_with("no CFI for 0x"), "{why}");
    }
    assert!(summary.get("stacks_failed").is_none(), "{summary}");
}

/// The forking C demo server (its C code in the Rust binary, each connection served by a
/// child forked after attach): `--stack=dwarf` names the C frames from the probe up to the
/// server's entry, by CFI. `serve_connection`'s frame holds a large buffer: where a page of it
/// was never touched the kernel cannot copy it, and the walk stops there and says so (seen in
/// about 1 run in 10): never a wrong frame, and most spans get the whole chain.
#[test]
#[ignore = "needs root"]
fn dwarf_stack_of_the_c_demo_server_names_its_c_frames() {
    use usdt_trace_tests::markers::{demo_servers, free_port, http_request, start_server};
    let bin = &demo_servers().1;
    let port = free_port();
    let _server = start_server(bin, port, None);
    let b = bin.to_str().unwrap();
    let mut w = Watch::start(&["--min", "1ns", "--stack=dwarf", b, "httpserver:request*"]);
    let mut seen = 0;
    for _ in 0..3 {
        let r = http_request(
            port,
            "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        );
        assert!(r.status.is_some());
    }
    w.wait_for(Duration::from_secs(20), |r| {
        seen += (r["type"] == "span") as usize;
        seen >= 3
    });
    let out = w.stop();
    let spans = out.spans();
    assert!(spans.len() >= 3, "{:?}", out.records);
    let mut whole = 0;
    for s in &spans {
        let stack = s["stack"].as_array().unwrap_or_else(|| panic!("{s}"));
        let got = names(s);
        assert!(got[0].starts_with("serve_connection"), "{got:?}");
        for f in stack {
            assert!(f["object"].is_string(), "{s}");
        }
        let at = |f: &str| got.iter().position(|n| n.starts_with(f));
        match at("demo_httpserver_c_main") {
            Some(main) => {
                assert_eq!(stack[1]["unwind"], "cfi", "{s}");
                assert!(main > 0, "innermost first: {got:?}");
                whole += 1;
            }
            // Stopped short: it says why, and what it shows is right.
            None => assert!(
                s["stack_stopped"]
                    .as_str()
                    .is_some_and(|w| w.contains("stack copy ends")),
                "{s}"
            ),
        }
    }
    assert!(whole > 0, "no span got the whole chain: {spans:?}");
}
