//! Several `--str` strings per record (start and end alike), `:len=M` strings, `--str-max` with
//! its truncation marks, bytes that are not UTF-8 kept as escapes, and `--args` names, read
//! back from a real traced process (`watch_strs.c`).
use serde_json::json;
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, named};

const RULES: &[&str] = &[
    "--str",
    "wss:msg:0",
    "--str",
    "wss:sized:0:len=1",
    "--str",
    "wss:req__start:0",
    "--str",
    "wss:req__start:1",
    "--str",
    "wss:req__start:2",
    "--str",
    "wss:req__end:1",
    "--args",
    "wss:req__start=method,path,host,id",
];

fn run(extra: &[&str]) -> watch::Output {
    let bin = build_c("watch_strs", &["-O2"]);
    let b = bin.to_str().unwrap();
    let mut args: Vec<&str> = RULES.to_vec();
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-c", b, b]);
    let out = watch::Watch::start(&args).finish();
    assert!(out.status.success(), "{}", out.stderr);
    out
}

#[test]
#[ignore = "needs root"]
fn several_strings_sized_strings_cut_marks_escapes_and_names() {
    let out = run(&[]);
    let events = out.events();
    let msgs = named(&events, "msg");
    assert_eq!(msgs.len(), 4, "{:?}", out.records);
    // Cut at the default 256 bytes, and said so.
    let mut kept = "a".repeat(255);
    kept.push('Z');
    assert_eq!(msgs[0]["args"], json!([kept, 0]));
    assert_eq!(msgs[0]["truncated"], json!(["arg0"]));
    // Exactly 256 bytes is whole.
    assert_eq!(msgs[1]["args"][0], json!("b".repeat(256)));
    assert!(msgs[1].get("truncated").is_none(), "{}", msgs[1]);
    // Bytes that are not UTF-8 are escaped, the backslash doubled: nothing lost to U+FFFD.
    assert_eq!(msgs[2]["args"][0], json!("\\xff\\xfe ok \\\\ end"));
    assert_eq!(msgs[2]["escaped"], json!(["arg0"]));
    // A NULL string argument shows its value, never null.
    assert_eq!(msgs[3]["args"], json!([0, 3]));
    // Sized strings: exactly the length argument's bytes, garbage after them not read.
    let sized = named(&events, "sized");
    assert_eq!(sized.len(), 2, "{:?}", out.records);
    assert_eq!(sized[0]["args"], json!(["java/lang/Object", 16]));
    assert_eq!(sized[1]["args"], json!(["", 0]));
    // Three strings at the start and one at the end reach the one span record, named.
    let all = out.spans();
    let spans = named(&all, "req");
    assert_eq!(spans.len(), 1, "{:?}", out.records);
    assert_eq!(
        spans[0]["args"],
        json!({"method": "GET", "path": "/index.html", "host": "example.org", "id": 42})
    );
    assert_eq!(spans[0]["end_args"], json!([200, "done"]));
}

/// Spans paired by id keep their start strings under the id: overlapping spans, each with its own.
#[test]
#[ignore = "needs root"]
fn id_paired_spans_keep_their_own_start_and_end_strings() {
    let out = run(&[
        "--span",
        "wss:job__start=wss:job__end",
        "--key",
        "0",
        "--str",
        "wss:job__start:1",
        "--str",
        "wss:job__end:1",
    ]);
    let all = out.spans();
    let jobs = named(&all, "job");
    assert_eq!(jobs.len(), 2, "{:?}", out.records);
    assert_eq!(jobs[0]["args"], json!([2, "job-b"]));
    assert_eq!(jobs[0]["end_args"], json!([2, "ok-b"]));
    assert_eq!(jobs[1]["args"], json!([1, "job-a"]));
    assert_eq!(jobs[1]["end_args"], json!([1, "ok-a"]));
}

#[test]
#[ignore = "needs root"]
fn str_max_cuts_every_string_and_text_marks_it() {
    let out = run(&["--str-max", "10"]);
    let events = out.events();
    let msgs = named(&events, "msg");
    assert_eq!(msgs[0]["args"][0], json!("aaaaaaaaaa"));
    assert_eq!(msgs[0]["truncated"], json!(["arg0"]));
    let all = out.spans();
    let spans = named(&all, "req");
    assert_eq!(spans[0]["args"]["path"], json!("/index.htm"));
    assert_eq!(spans[0]["truncated"], json!(["arg1", "arg2"]));
    // Text: the mark after the closing quote, escapes for bytes that are not UTF-8, names.
    let bin = build_c("watch_strs", &["-O2"]);
    let b = bin.to_str().unwrap();
    let mut args = vec!["watch"];
    args.extend_from_slice(RULES);
    args.extend_from_slice(&["--str-max", "10", "-c", b, b]);
    let text = watch::run(&args);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    assert!(stdout.contains(r#"("aaaaaaaaaa"…, 0)"#), "{stdout}");
    assert!(stdout.contains(r#"("\xff\xfe ok \\ en"…, 2)"#), "{stdout}");
    assert!(
        stdout.contains(
            r#"(method="GET", path="/index.htm"…, host="example.or"…, id=42) -> (200, "done")"#
        ),
        "{stdout}"
    );
}

#[test]
#[ignore = "needs root"]
fn bad_string_and_name_rules_are_errors_even_beside_good_ones() {
    let bin = build_c("watch_strs", &["-O2"]);
    let b = bin.to_str().unwrap();
    let err = |args: &[&str]| {
        let mut all = vec!["watch"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-c", b, b]);
        let out = watch::run(&all);
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).trim().to_string()
    };
    // A good rule does not hide a bad one.
    assert_eq!(
        err(&["--str", "wss:msg:0", "--str", "wss:msg:5"]),
        "usdt-trace: error: --str 'wss:msg:5': wss:msg has 2 arguments"
    );
    assert_eq!(
        err(&["--str", "wss:req__end:0"]),
        "usdt-trace: error: --str 'wss:req__end:0': argument 0 of wss:req__end is a 4-byte value, not a pointer to a string"
    );
    assert!(err(&["--str", "wss:sized:0:len=7"]).contains("length argument 7"));
    assert!(err(&["--str", "nosuch*:0"]).contains("no traced probe matches"));
    assert_eq!(
        err(&["--args", "wss:msg=a,b,c"]),
        "usdt-trace: error: --args 'wss:msg=a,b,c': 3 names for wss:msg, which has 2 arguments"
    );
    assert_eq!(
        err(&["--args", "nosuch=a"]),
        "usdt-trace: error: --args 'nosuch=a': no traced probe matches"
    );
    assert!(err(&["--args", "wss:msg=a b"]).contains("expected PROBE=NAME"));
    assert!(err(&["--str-max", "0"]).contains("--str-max 0: must be between 1 and 1024"));
    assert!(err(&["--str-max", "4096"]).contains("must be between 1 and 1024"));
    // Five strings do not fit in one record.
    let e = err(&[
        "--str",
        "wss:req__start:0",
        "--str",
        "wss:req__start:1",
        "--str",
        "wss:req__start:2",
        "--str",
        "wss:req__end:1",
        "--str",
        "wss:req__start:3",
    ]);
    assert!(e.contains("at most 4"), "{e}");
}
