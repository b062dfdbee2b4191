//! Function probes never change what a traced program computes, whatever the pattern: each
//! program here runs untraced and then under `watch 'fn:*'`, and must print the same and
//! exit the same. The cases are the ones a return probe breaks: `_start` (argc where a return
//! address would be), gcc's `.cold` fragments (jumped to), `setjmp`/`longjmp` over traced
//! frames, C++ exceptions thrown through traced frames, and whole real programs and libc.
//! Every printed span must be paired with its own end: where the program knows the answer
//! (a leaf's result from its arguments), the test checks it span by span.
use std::path::Path;
use usdt_trace_tests::fn_run::{plain, spans, summary, traced, Redis, REDIS_SERVER};
use usdt_trace_tests::watch_util::build_c;

const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

/// gcc -O2: `accumulate.cold` (jumped to), `setjmp` returning twice, `longjmp` out of two
/// traced frames, a leaf, a tail call, `_start`. Same output traced as untraced (argc intact), every leaf
/// span ends with its own result, and the two frames each longjmp leaves are counted as
/// unmatched starts, no more.
#[test]
#[ignore = "needs root"]
fn fn_star_on_a_program_with_cold_fragments_and_longjmp_computes_the_same() {
    let bin = build_c("fn_harm", &["-O2"]);
    let b = bin.to_str().unwrap();
    let want = plain(&[b, "20"]);
    assert!(want.stdout.starts_with("argc=2 "), "{want:?}");
    for mode in ["auto", "ret-insn"] {
        let (got, recs, stderr) = traced(b, &["fn:*"], &["--fn-returns", mode], &[b, "20"]);
        assert_eq!(got, want, "{mode}: {stderr}");
        // Refused with their reasons, on stderr.
        assert!(
            stderr.contains("(_start): the program's entry point"),
            "{stderr}"
        );
        assert!(
            stderr.contains("(accumulate.cold): a .cold fragment of accumulate"),
            "{stderr}"
        );
        let leaf = spans(&recs, "leaf_mul");
        assert_eq!(leaf.len(), 20 * 2000 + 20, "{mode}");
        for s in &leaf {
            let (a, b) = (
                s["args"][0].as_i64().unwrap(),
                s["args"][1].as_i64().unwrap(),
            );
            assert_eq!(s["end_args"][0].as_i64(), Some(a * b + 1), "{mode}: {s}");
        }
        // r = 0, 3, ..., 18: seven longjmps, each out of escape() and jumper().
        let sum = summary(&recs);
        assert_eq!(sum["unmatched"], 14, "{mode}: {sum}");
        assert_eq!(sum["unmatched_end"], 0, "{mode}: {sum}");
        assert_eq!(spans(&recs, "jumper").len(), 13, "{mode}");
        assert_eq!(spans(&recs, "accumulate").len(), 20, "{mode}");
        assert_eq!(spans(&recs, "main").len(), 1, "{mode}");
        // wrapper(x) is `jmp twice`: its call ends at twice's `ret` with twice's result; the
        // direct calls of twice pass the same `ret` and close nothing of wrapper's.
        let wrap = spans(&recs, "wrapper");
        assert_eq!(wrap.len(), 20, "{mode}");
        for s in &wrap {
            let x = s["args"][0].as_i64().unwrap();
            assert_eq!(s["end_args"][0].as_i64(), Some(2 * (x + 1)), "{mode}: {s}");
        }
        let tw = spans(&recs, "twice");
        assert_eq!(tw.len(), 40, "{mode}");
    }
}

/// A C++ exception thrown through traced functions reaches its handler: the unwinder finds
/// real return addresses, so the program catches all 25 and prints the same.
#[test]
#[ignore = "needs root"]
fn fn_star_on_cpp_code_that_throws_through_traced_frames_computes_the_same() {
    let bin = build_c("fn_throw", &["-O2"]);
    let b = bin.to_str().unwrap();
    let want = plain(&[b, "100"]);
    assert_eq!(want.stdout, "sum=11325 caught=25\n");
    let (got, recs, stderr) = traced(b, &["fn:*"], &[], &[b, "100"]);
    assert_eq!(got, want, "{stderr}");
    // The 25 calls that threw never returned: unmatched starts, their spans not printed.
    let inner = spans(&recs, "inner(long)");
    assert_eq!(inner.len(), 75);
    for s in &inner {
        let n = s["args"][0].as_i64().unwrap();
        assert_eq!(s["end_args"][0].as_i64(), Some(3 * n), "{s}");
    }
    assert_eq!(summary(&recs)["unmatched"], 50);
}

/// libc's every function (setjmp and longjmp among them) under a program that uses them:
/// the same output; what cannot be traced is named with its reason, the rest is attached.
#[test]
#[ignore = "needs root"]
fn fn_star_on_libc_computes_the_same_and_names_what_it_refuses() {
    if !Path::new(LIBC).exists() {
        eprintln!("skipped: no {LIBC}");
        return;
    }
    let bin = build_c("fn_harm", &["-O2"]);
    let b = bin.to_str().unwrap();
    let want = plain(&[b, "5"]);
    let (got, recs, stderr) = traced(LIBC, &["fn:*"], &["--hist"], &[b, "5"]);
    assert_eq!(got, want, "{stderr}");
    assert!(
        stderr.contains("(pthread_spin_lock): its first instruction is LOCK-prefixed"),
        "{stderr}"
    );
    assert!(stderr.contains("IFUNCs not traced by name"), "{stderr}");
    assert!(stderr.contains("Attached "), "{stderr}");
    assert!(summary(&recs)["spans"].as_u64() > Some(0));
    // The same for a real program.
    let want = plain(&["/usr/bin/ls", "-la", "/usr/share/doc/bash"]);
    let (got, _, stderr) = traced(
        LIBC,
        &["fn:*"],
        &["--hist"],
        &["/usr/bin/ls", "-la", "/usr/share/doc/bash"],
    );
    assert_eq!(got, want, "{stderr}");
}

/// Whole real programs traced with `fn:*`: bash running a script, python3.11 computing, each
/// printing exactly what it prints untraced.
#[test]
#[ignore = "needs root"]
fn fn_star_on_bash_and_python_computes_the_same() {
    let script = "for i in 1 2 3; do echo \"line $i\"; done; x=$((6*7)); echo $x; printf '%s\\n' \"$(echo nested)\"";
    let want = plain(&["/usr/bin/bash", "-c", script]);
    assert_eq!(want.stdout, "line 1\nline 2\nline 3\n42\nnested\n");
    let (got, recs, stderr) = traced(
        "/usr/bin/bash",
        &["fn:*"],
        &["--hist"],
        &["/usr/bin/bash", "-c", script],
    );
    assert_eq!(got, want, "{stderr}");
    assert!(summary(&recs)["spans"].as_u64() > Some(100), "{stderr}");
    let py = "/usr/bin/python3.11";
    if Path::new(py).exists() {
        let code = "import json,re; d={str(i): i*i for i in range(200)}; print(sum(d.values()), len(json.dumps(d)), re.sub('a+','b','caaat'))";
        let want = plain(&[py, "-c", code]);
        let (got, recs, stderr) = traced(py, &["fn:*"], &["--hist"], &[py, "-c", code]);
        assert_eq!(got, want, "{stderr}");
        assert!(summary(&recs)["spans"].as_u64() > Some(1000), "{stderr}");
    }
}

/// redis-server traced whole (`fn:*`) answers as it does untraced, and keeps answering after.
#[test]
#[ignore = "needs root"]
fn fn_star_on_redis_server_keeps_it_answering_right() {
    let redis = Redis::start();
    let cli = |args: &[&str]| redis.cli(args);
    let pid = redis.pid().to_string();
    let w = usdt_trace_tests::watch::Watch::start(&["--hist", "-p", &pid, REDIS_SERVER, "fn:*"]);
    for i in 0..200 {
        assert_eq!(
            cli(&["set", &format!("k{i}"), &format!("v{i}")]).trim(),
            "OK"
        );
    }
    for i in 0..200 {
        assert_eq!(cli(&["get", &format!("k{i}")]).trim(), format!("v{i}"));
    }
    assert_eq!(cli(&["incrby", "ctr", "41"]).trim(), "41");
    assert_eq!(cli(&["incr", "ctr"]).trim(), "42");
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    // Every start is accounted for: a span, or a start dropped past the 59-deep per-thread
    // stack (counted). Redis' event loop can fill that stack with calls that left without a
    // `ret` the tracer saw (a jump through a pointer): then later starts are dropped and
    // counted, never paired wrongly. How many spans that leaves depends on the run.
    let sum = out.summary();
    let accounted =
        sum["spans"].as_u64().unwrap_or(0) + sum["dropped"]["depth"].as_u64().unwrap_or(0);
    assert!(accounted > 1000, "{sum:?}");
    // Detached: still right.
    assert_eq!(cli(&["get", "k7"]).trim(), "v7");
    assert_eq!(cli(&["dbsize"]).trim(), "201");
}
