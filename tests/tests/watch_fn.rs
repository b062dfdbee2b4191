//! Function probes (`fn:GLOB`): spans from entry to return with SysV arguments, the return
//! value, recursion paired in the kernel, strings at entry and at return, histograms, both
//! attach paths; `list --functions`.
use serde_json::{json, Value};
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, named};

/// -fcf-protection=full: every function starts with endbr64, so the single-step count is known.
fn bin() -> String {
    build_c("watch_fn", &["-O2", "-fcf-protection=full"])
        .to_str()
        .unwrap()
        .to_string()
}

fn end_ns(s: &Value) -> u64 {
    s["start_ns"].as_u64().unwrap() + s["duration_ns"].as_u64().unwrap()
}

fn check_spans(out: &watch::Output) {
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    assert!(spans.iter().all(|s| s["provider"] == "fn"), "{spans:?}");
    let add = named(&spans, "fn_add6");
    assert_eq!(add.len(), 1, "{:?}", out.records);
    assert_eq!(add[0]["args"], json!([1, 2, 3, 4, 5, 6]));
    assert_eq!(add[0]["end_args"], json!([21]));
    assert_eq!(add[0]["start"], "fn_add6__entry");
    assert_eq!(add[0]["end"], "fn_add6__return");
    assert!(add[0]["duration_ns"].as_u64().unwrap() >= 500_000);
    // Recursion: innermost first, each call's own argument and return value, nested.
    let fact = named(&spans, "fn_fact");
    assert_eq!(fact.len(), 5, "{fact:?}");
    let mut want = 1;
    for (i, s) in fact.iter().enumerate() {
        let n = i as i64 + 1;
        want *= n;
        assert_eq!(s["args"][0], json!(n), "{s}");
        assert_eq!(s["end_args"], json!([want]), "{s}");
        // The probe hits inside: each inner call's entry and return (none in the innermost).
        assert_eq!(s["probe_hits"].as_u64().unwrap_or(0), 2 * i as u64, "{s}");
        let est = s["probe_ns_estimate"].as_u64().unwrap_or(0);
        assert!((est > 0) == (i > 0), "{s}");
        assert!(est <= s["duration_ns"].as_u64().unwrap(), "{s}");
        if i > 0 {
            let inner = fact[i - 1];
            assert!(s["start_ns"].as_u64() < inner["start_ns"].as_u64(), "{s}");
            assert!(end_ns(s) > end_ns(inner), "{s}");
        }
    }
    assert_eq!(named(&spans, "fn_greet").len(), 1);
    let sum = out.summary();
    assert_eq!(sum["spans"], 7);
    assert_eq!(
        (sum["unmatched"].clone(), sum["unmatched_end"].clone()),
        (json!(0), json!(0))
    );
    assert!(out.events().is_empty());
}

#[test]
#[ignore = "needs root"]
fn function_spans_with_args_return_values_recursion_and_return_string() {
    let b = bin();
    for attach in ["multi", "perf"] {
        let w = watch::Watch::start(&[
            "--attach",
            attach,
            "--str",
            "fn:fn_greet:ret",
            "-c",
            &b,
            &b,
            "fn:fn_*",
        ]);
        assert_eq!(
            w.attached_line,
            // Entries past endbr64 on the emulated push; nothing in a C program unwinds, so
            // every end is a return probe at that push: nothing single-stepped.
            "Attached 6 probe sites in 1 object (3 span names); Ctrl-C to stop"
        );
        let out = w.finish();
        check_spans(&out);
        let spans = out.spans();
        let greet = named(&spans, "fn_greet")[0];
        assert_eq!(greet["end_args"], json!(["hello, world"]), "{attach}");
        assert!(greet["args"][0].is_u64(), "no string at entry: {greet}");
    }
}

#[test]
#[ignore = "needs root"]
fn function_string_argument_at_entry_and_histograms() {
    let b = bin();
    let out = watch::Watch::start(&["--str", "fn:fn_greet:0", "-c", &b, &b, "fn:fn_*"]).finish();
    check_spans(&out);
    let spans = out.spans();
    let greet = named(&spans, "fn_greet")[0];
    assert_eq!(greet["args"][0], "world", "{greet}");
    assert!(greet["end_args"][0].is_u64(), "{greet}");

    let out = watch::Watch::start(&["--hist", "-c", &b, &b, "fn:fn_fact"]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let hist: Vec<&Value> = out.of_type("hist").collect();
    assert_eq!(hist.len(), 1, "{:?}", out.records);
    assert_eq!(hist[0]["name"], "fn_fact");
    assert_eq!(hist[0]["duration"]["count"], 5);
    // 0 + 2 + 4 + 6 + 8 hits inside the five nested spans, and their estimated cost.
    assert_eq!(hist[0]["probe_hits"], 20, "{}", hist[0]);
    assert!(
        hist[0]["probe_ns_estimate"].as_u64().unwrap_or(0) > 0,
        "{}",
        hist[0]
    );
}

#[test]
#[ignore = "needs root"]
fn function_patterns_that_match_nothing_are_errors_and_strings_at_both_ends_are_not() {
    let b = bin();
    let out = watch::run(&["watch", &b, "fn:no_such_fn"]);
    let err = usdt_trace_tests::watch_util::single_error_line(&out);
    assert!(err.contains("no probe matches fn:no_such_fn"), "{err}");
    // A string at the entry and one at the return now share the span's record: no clash.
    let out = watch::run(&[
        "watch",
        &b,
        "fn:fn_greet",
        "--str",
        "fn:fn_greet:0",
        "--str",
        "fn:fn_greet:ret",
        "-d",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn list_functions_text_and_json() {
    let b = bin();
    let out = watch::run(&["list", "--functions", "--json", &b, "fn_*"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = recs.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["fn_add6", "fn_fact", "fn_greet"]);
    for r in &recs {
        assert_eq!(r["path"], b.as_str());
        assert_eq!(r["insn"], "single_step");
        assert_eq!(r["go"], false);
        // None is a leaf (each calls usleep, snprintf or itself), but nothing in a C program
        // unwinds: each takes a return probe, and says why.
        assert_eq!(r["end"]["kind"], "return_probe", "{r}");
        assert!(
            r["end_why"]
                .as_str()
                .unwrap()
                .starts_with("a program in which nothing unwinds"),
            "{r}"
        );
        // The entry past endbr64, on the push: with arguments and without.
        assert_eq!(r["entry"]["insn"], "push", "{r}");
        assert_eq!(r["entry"]["skipped"], 1, "{r}");
        assert!(r["size"].as_u64().unwrap() > 0 && r["file_offset"].as_u64().unwrap() > 0);
    }
    let out = watch::run(&["list", "--functions", &b, "fn_fact"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        // The entry goes past endbr64 onto the `push %rbp` this kernel emulates.
        format!("{b}: 1 function, 0 single-stepped at entry")
    );
    assert!(
        lines[1].contains("ADDRESS") && lines[1].contains("OFFSET"),
        "{text}"
    );
    assert!(
        lines[2].ends_with(" emulated (push) return probe fn_fact"),
        "{text}"
    );
}
