//! `--str` under overload: a span travels as two ring-buffer records (its strings, then
//! itself), and loss is counted in spans and events, with strings records counted apart.
use serde_json::Value;
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::build_c;

#[test]
#[ignore = "needs root"]
fn lost_strings_are_counted_apart_and_their_spans_marked() {
    let bin = build_c("strs_flood", &["-O2"]);
    let n = 100_000u64;
    let cmd = format!("{} {n}", bin.display());
    let b = bin.to_str().unwrap();
    // A strings record is ~4 KiB: a 64 KiB ring holds about fifteen.
    let out = watch::Watch::start(&[
        "--ring-kib",
        "64",
        "--str",
        "sf:req__start:1",
        "-c",
        &cmd,
        b,
    ])
    .finish();
    assert!(out.status.success(), "{}", out.stderr);
    let sum = out.summary();
    let spans = out.spans();
    let printed = (out.events().len() + spans.len()) as u64;
    let made = sum["spans"].as_u64().unwrap() + sum["events"].as_u64().unwrap();
    let lost = sum["lost"].as_u64().unwrap();
    let strings_lost = sum["strings_lost"].as_u64().unwrap_or(0);
    assert_eq!(sum["spans"], n, "the kernel counts every span: {sum}");
    assert!(
        strings_lost > 0,
        "a 64 KiB ring cannot hold {n} strings: {sum}"
    );
    assert_eq!(
        printed + lost,
        made,
        "printed {printed} + lost {lost} != made {made} ({strings_lost} strings lost): {sum}"
    );
    // Every printed span has its string, or says that it was lost (its argument is then the
    // pointer, a number).
    let marked: Vec<&&Value> = spans.iter().filter(|s| s["strs_lost"] == true).collect();
    for s in &spans {
        let arg = &s["args"][1];
        if s["strs_lost"] == true {
            assert!(arg.is_u64(), "{s}");
        } else {
            let want = format!("item-{}", s["args"][0].as_u64().unwrap() % 10);
            assert_eq!(arg.as_str(), Some(want.as_str()), "{s}");
        }
    }
    assert!(
        !marked.is_empty(),
        "some span fit where its strings did not: {sum}"
    );
    assert!(
        marked.len() as u64 <= strings_lost,
        "{} {sum}",
        marked.len()
    );
    assert!(
        out.stderr.contains(&format!(
            "warning: --str: {strings_lost} strings records were lost"
        )),
        "{}",
        out.stderr
    );
}

/// `--stack` likewise: a span's stack travels just before it, and a stack the ring had no room
/// for is said on its span and counted in `stacks_failed`, not in `lost`.
#[test]
#[ignore = "needs root"]
fn lost_stacks_are_counted_on_their_spans_not_as_lost_spans() {
    let bin = build_c("strs_flood", &["-O2", "-fno-omit-frame-pointer"]);
    let n = 50_000u64;
    let cmd = format!("{} {n}", bin.display());
    let b = bin.to_str().unwrap();
    let out = watch::Watch::start(&["--ring-kib", "64", "--stack", "--min", "1ns", "-c", &cmd, b])
        .finish();
    assert!(out.status.success(), "{}", out.stderr);
    let sum = out.summary();
    let spans = out.spans();
    let printed = (out.events().len() + spans.len()) as u64;
    let made = sum["spans"].as_u64().unwrap() + sum["events"].as_u64().unwrap();
    let lost = sum["lost"].as_u64().unwrap();
    let filtered = sum["filtered"].as_u64().unwrap_or(0);
    assert!(
        lost > 0,
        "a 64 KiB ring cannot hold {n} spans with stacks: {sum}"
    );
    assert_eq!(printed + lost + filtered, made, "{sum}");
    let no_stack = spans.iter().filter(|s| s["stack"].is_null()).count() as u64;
    assert_eq!(
        sum["stacks_failed"].as_u64().unwrap_or(0),
        no_stack,
        "{sum}"
    );
}
