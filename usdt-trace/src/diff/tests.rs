use super::compare::*;
use super::read::*;
use super::render::*;
use super::*;
use serde_json::Value;
use std::path::Path;

/// A span line like `watch --json` writes (only the fields diff reads).
fn span(name: &str, oncpu: u64, runq: u64, sleep: u64, io: u64) -> String {
    format!(
        r#"{{"type":"span","provider":"app","name":"{name}","pid":1,"tid":1,"duration_ns":{},"oncpu_ns":{oncpu},"offcpu_ns":{},"runq_ns":{runq},"sleep_ns":{sleep},"io_ns":{io},"args":[]}}"#,
        oncpu + runq + sleep + io,
        runq + sleep + io
    ) + "\n"
}

fn run_of(lines: &[String]) -> String {
    let mut s = String::from(r#"{"type":"start","schema":1}"#);
    s.push('\n');
    for l in lines {
        s.push_str(l);
    }
    s.push_str(r#"{"type":"summary","spans":0}"#);
    s.push('\n');
    s
}

fn diff(before: &str, after: &str) -> Vec<Comparison> {
    diff_readers(
        (Path::new("before"), before.as_bytes()),
        (Path::new("after"), after.as_bytes()),
    )
    .unwrap()
}

/// `n` spans with parts jittered by ±1% so that the significance test sees some noise.
fn many(name: &str, n: u64, oncpu: u64, runq: u64, sleep: u64, io: u64) -> Vec<String> {
    (0..n)
        .map(|i| {
            let j = |x: u64| x + x * (i % 3) / 100;
            span(name, j(oncpu), j(runq), j(sleep), j(io))
        })
        .collect()
}

#[test]
fn sleep_that_doubled_the_mean_is_named_in_words_with_its_size() {
    let b = run_of(&[span("request", 1_000_000, 0, 20_000, 0)]);
    let a = run_of(&[span("request", 1_040_000, 0, 1_000_000, 0)]);
    let c = diff(&b, &a);
    assert_eq!(c.len(), 1);
    let text = to_text(&c[0]);
    assert!(
        text.starts_with("app:request: 1.02ms → 2.04ms: +980.0us sleeping, +40.0us on CPU\n"),
        "{text}"
    );
    // One span each: no variance, the change is 100% of the mean.
    assert_eq!(c[0].verdict.as_ref().unwrap().cause, "waiting", "{text}");
    assert!(text.contains("verdict: waiting: sleep grew"), "{text}");
    assert!(text.contains("(96% of the growth)"), "{text}");
}

#[test]
fn each_part_that_grows_names_its_horseman() {
    for (parts, cause) in [
        ([2_000_000, 0, 0, 0], "more_work"),
        ([1_000_000, 1_000_000, 0, 0], "cpu_contention"),
        ([1_000_000, 0, 1_000_000, 0], "waiting"),
        ([1_000_000, 0, 0, 1_000_000], "more_io"),
    ] {
        let b = run_of(&many("x", 50, 1_000_000, 0, 0, 0));
        let a = run_of(&many("x", 50, parts[0], parts[1], parts[2], parts[3]));
        let c = diff(&b, &a);
        let v = c[0].verdict.as_ref().unwrap();
        assert_eq!(v.cause, cause, "{}", to_text(&c[0]));
        assert!(v.share > 0.95, "{v:?}");
    }
}

#[test]
fn a_faster_run_names_what_shrank() {
    let b = run_of(&many("x", 20, 1_000_000, 500_000, 0, 0));
    let a = run_of(&many("x", 20, 1_000_000, 0, 0, 0));
    let c = diff(&b, &a);
    assert_eq!(c[0].verdict.as_ref().unwrap().cause, "less_cpu_contention");
    // The jitter of `many` makes the before run's run queue 505 µs on average.
    assert!(
        to_text(&c[0]).contains(": -504.8us waiting for a CPU\n"),
        "{}",
        to_text(&c[0])
    );
}

#[test]
fn a_change_within_the_noise_is_no_change() {
    // 2% slower: under the 5% floor.
    let b = run_of(&many("x", 30, 1_000_000, 0, 0, 0));
    let a = run_of(&many("x", 30, 1_020_000, 0, 0, 0));
    assert_eq!(diff(&b, &a)[0].verdict.as_ref().unwrap().cause, "no_change");
    // 20% slower on average, but spans vary from 0.1 ms to 10 ms: within 3 standard errors.
    let wild = |k: u64| -> Vec<String> {
        (0..6)
            .map(|i| {
                span(
                    "x",
                    [100_000, 10_000_000][(i % 2) as usize] * k / 10,
                    0,
                    0,
                    0,
                )
            })
            .collect()
    };
    let c = diff(&run_of(&wild(10)), &run_of(&wild(12)));
    assert_eq!(c[0].verdict.as_ref().unwrap().cause, "no_change", "{c:?}");
}

#[test]
fn count_mean_and_nearest_rank_p99() {
    // 1..=200 µs: mean 100.5 µs, p99 = the 198th value.
    let lines: Vec<String> = (1..=200).map(|i| span("x", i * 1000, 0, 0, 0)).collect();
    let c = diff(&run_of(&lines), &run_of(&lines));
    let s = c[0].before.as_ref().unwrap();
    assert_eq!(s.count, 200);
    assert_eq!(s.mean_ns, 100_500.0);
    assert_eq!(s.p99_ns, 198_000);
    assert_eq!(percentile(&[5], 99), 5);
    assert_eq!(percentile(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 99), 10);
    assert_eq!(percentile(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 50), 5);
}

#[test]
fn part_deltas_add_up_to_the_change_of_the_mean() {
    let b = run_of(&many("x", 10, 300_000, 100_000, 200_000, 50_000));
    let a = run_of(&many("x", 10, 350_000, 400_000, 100_000, 90_000));
    let c = &diff(&b, &a)[0];
    let sum: f64 = c.part_deltas.unwrap().iter().sum();
    let change = c.after.as_ref().unwrap().mean_ns - c.before.as_ref().unwrap().mean_ns;
    assert!((sum - change).abs() < 1e-6, "{sum} vs {change}");
}

#[test]
fn spans_without_a_split_count_in_the_mean_but_explain_nothing() {
    let nosplit = r#"{"type":"span","provider":"app","name":"x","duration_ns":5000000,"start_tid":9,"args":[]}"#;
    let b = run_of(&[span("x", 1_000_000, 0, 0, 0)]);
    let a = run_of(&[span("x", 2_000_000, 0, 0, 0), format!("{nosplit}\n")]);
    let c = &diff(&b, &a)[0];
    let s = c.after.as_ref().unwrap();
    assert_eq!((s.count, s.split_count), (2, 1));
    assert_eq!(s.mean_ns, 3_500_000.0);
    assert_eq!(s.split_mean_ns, 2_000_000.0);
    assert_eq!(c.part_deltas.unwrap()[0], 1_000_000.0);
    assert!(to_text(c).contains("split known for 1 of 2 spans after"));
    // Neither run with a split: the mean changes, the parts are unknown.
    let c = &diff(
        &run_of(&[format!("{nosplit}\n")]),
        &run_of(&[format!("{nosplit}\n")]),
    )[0];
    assert_eq!(c.part_deltas, None);
    assert!(to_text(c).contains("no time split"));
}

#[test]
fn names_in_one_run_only_are_listed_as_such() {
    let b = run_of(&[span("old", 1000, 0, 0, 0)]);
    let a = run_of(&[span("new", 1000, 0, 0, 0)]);
    let c = diff(&b, &a);
    let text: String = c.iter().map(to_text).collect();
    assert_eq!(
        text,
        "app:new: only after (1 spans, mean 1.0us)\napp:old: only before (1 spans, mean 1.0us)\n"
    );
    assert_eq!(to_json(&c[0])["before"], Value::Null);
}

#[test]
fn json_has_both_runs_the_deltas_and_the_verdict() {
    let b = run_of(&[span("request", 1_000_000, 0, 20_000, 0)]);
    let a = run_of(&[span("request", 1_040_000, 0, 1_000_000, 0)]);
    let v = to_json(&diff(&b, &a)[0]);
    assert_eq!(v["span"], "app:request");
    assert_eq!(v["before"]["count"], 1);
    assert_eq!(v["before"]["mean_ns"], 1_020_000);
    assert_eq!(v["after"]["p99_ns"], 2_040_000);
    assert_eq!(v["delta"]["mean_ns"], 1_020_000);
    assert_eq!(v["delta"]["parts"]["sleep_ns"], 980_000);
    assert_eq!(v["delta"]["parts"]["oncpu_ns"], 40_000);
    assert_eq!(v["delta"]["parts"]["runq_ns"], 0);
    assert_eq!(v["verdict"]["cause"], "waiting");
    assert_eq!(v["verdict"]["share"], 0.961);
}

/// A span line with `waits`: (kind, ns, n) triples, inside its sleep and io.
fn span_waits(oncpu: u64, sleep: u64, io: u64, waits: &[(&str, u64, u64)]) -> String {
    let w: Vec<String> = waits
        .iter()
        .map(|(k, ns, n)| format!(r#""{k}":{{"ns":{ns},"n":{n}}}"#))
        .collect();
    format!(
        r#"{{"type":"span","provider":"app","name":"x","duration_ns":{},"oncpu_ns":{oncpu},"offcpu_ns":{},"runq_ns":0,"sleep_ns":{sleep},"io_ns":{io},"waits":{{{}}},"args":[]}}"#,
        oncpu + sleep + io,
        sleep + io,
        w.join(",")
    ) + "\n"
}

#[test]
fn sleep_that_grew_in_futexes_is_lock_contention() {
    let b = run_of(&[span_waits(1_000_000, 20_000, 0, &[("timer", 20_000, 1)])]);
    let a = run_of(&[span_waits(
        1_000_000,
        1_620_000,
        0,
        &[("timer", 20_000, 1), ("lock", 1_600_000, 3)],
    )]);
    let c = &diff(&b, &a)[0];
    let text = to_text(c);
    assert!(
        text.starts_with("app:x: 1.02ms → 2.62ms: +1.60ms sleeping (lock +1.60ms)\n"),
        "{text}"
    );
    // 1.6 of 2.62 ms: 61% of the after run's time.
    assert!(
        text.contains("verdict: lock contention: 61% of the time waiting on futexes (+1.60ms per span) (100% of the growth)"),
        "{text}"
    );
    assert_eq!(c.verdict.as_ref().unwrap().cause, "lock_contention");
    let v = to_json(c);
    assert_eq!(v["delta"]["waits_ns"]["lock"], 1_600_000);
    assert_eq!(v["after"]["waits"]["lock"]["n"], 3.0);
}

#[test]
fn more_disk_waits_is_more_io_and_longer_ones_a_busy_disk() {
    let base = run_of(&many_waits(1_000_000, 8, 100_000));
    // Twice the reads, each as long.
    let more = run_of(&many_waits(1_000_000, 16, 100_000));
    let c = &diff(&base, &more)[0];
    assert_eq!(
        c.verdict.as_ref().unwrap().cause,
        "more_io",
        "{}",
        to_text(c)
    );
    assert!(to_text(c).contains("more I/O: 8.0 → 16.0 disk waits per span, 100.0us each"));
    // As many reads, each 2.5 times as long.
    let busy = run_of(&many_waits(1_000_000, 8, 250_000));
    let c = &diff(&base, &busy)[0];
    assert_eq!(
        c.verdict.as_ref().unwrap().cause,
        "busy_disk",
        "{}",
        to_text(c)
    );
    assert!(to_text(c).contains("a busier disk: each disk wait 100.0us → 250.0us, 8.0 per span"));
}

/// Ten spans of `oncpu` plus `n` disk waits of `each` ns.
fn many_waits(oncpu: u64, n: u64, each: u64) -> Vec<String> {
    many_of("disk", oncpu, n, each)
}

/// Ten spans of `oncpu` plus `n` io waits of `kind` of `each` ns.
fn many_of(kind: &str, oncpu: u64, n: u64, each: u64) -> Vec<String> {
    (0..10)
        .map(|_| span_waits(oncpu, 0, n * each, &[(kind, n * each, n)]))
        .collect()
}

#[test]
fn more_page_faults_and_slower_ones_are_told_apart_and_not_called_disk_waits() {
    let base = run_of(&many_of("fault", 1_000_000, 20, 50_000));
    // Three times the faults (a bigger working set, a colder cache), each as long.
    let more = run_of(&many_of("fault", 1_000_000, 60, 50_000));
    let c = &diff(&base, &more)[0];
    assert_eq!(
        c.verdict.as_ref().unwrap().cause,
        "more_faults",
        "{}",
        to_text(c)
    );
    let t = to_text(c);
    assert!(
        t.contains("more page faults: 20.0 → 60.0 major faults per span, 50.0us each"),
        "{t}"
    );
    assert!(!t.contains("disk wait"), "{t}");
    // As many faults, each 4 times as long.
    let slow = run_of(&many_of("fault", 1_000_000, 20, 200_000));
    let c = &diff(&base, &slow)[0];
    assert_eq!(
        c.verdict.as_ref().unwrap().cause,
        "slower_faults",
        "{}",
        to_text(c)
    );
    let t = to_text(c);
    assert!(
        t.contains("slower page faults (slower paging or a busier disk): each fault 50.0us → 200.0us, 20.0 per span"),
        "{t}"
    );
}

#[test]
fn sleep_in_no_known_kind_stays_plain_waiting() {
    // The sleep grew by 1 ms, its futex part by 0.2 ms: less than half, no kind named.
    let b = run_of(&[span_waits(1_000_000, 0, 0, &[])]);
    let a = run_of(&[span_waits(1_000_000, 1_000_000, 0, &[("lock", 200_000, 1)])]);
    let c = &diff(&b, &a)[0];
    assert_eq!(
        c.verdict.as_ref().unwrap().cause,
        "waiting",
        "{}",
        to_text(c)
    );
}

#[test]
fn bad_input_is_an_error_naming_the_file_and_line() {
    let e = diff_readers(
        (
            Path::new("b.ndjson"),
            "{\"type\":\"start\"}\nnot json\n".as_bytes(),
        ),
        (Path::new("a"), "".as_bytes()),
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with("b.ndjson:2: not a JSON object"),
        "{e}"
    );
    let e = diff_readers(
        (Path::new("b"), run_of(&[span("x", 1, 0, 0, 0)]).as_bytes()),
        (Path::new("a.ndjson"), "{\"type\":\"start\"}\n".as_bytes()),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "a.ndjson: no span lines (record with `usdt-trace watch --json`)"
    );
    let e = diff_readers(
        (Path::new("b"), "{\"type\":\"span\"}\n".as_bytes()),
        (Path::new("a"), "".as_bytes()),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "b:1: span line without a numeric duration_ns"
    );
}

/// A span record as the kernel sends it: `dur` ns long, with this accounting.
fn record(
    dur: u64,
    acct: Option<usdt_trace_common::Acct>,
    idle_polls: (u64, u32),
) -> usdt_trace_common::SpanRecord {
    use usdt_trace_common::*;
    SpanRecord {
        hdr: RecordHeader {
            kind: RecordKind::SPAN,
            site: 1,
            pid: 10,
            tid: 11,
            ts_ns: 5_000_000 + dur,
            comm: *b"app\0\0\0\0\0\0\0\0\0\0\0\0\0",
        },
        start_site: 0,
        start_tid: 11,
        start_ns: 5_000_000,
        acct: acct.unwrap_or_default(),
        acct_valid: acct.is_some() as u32,
        waker_pid: 0,
        waker_tid: 0,
        has_strs: 0,
        longest_off_ns: 0,
        waker_comm: [0; 16],
        args: [0; MAX_ARGS],
        end_args: [0; MAX_ARGS],
        idle_ns: idle_polls.0,
        polls: idle_polls.1,
        threads: idle_polls.1.min(1),
        steal_start: 0,
    }
}

/// The oracle of `watch --baseline`'s numbers: a live span counts as its `watch --json`
/// line would in `diff`, whatever its split, waits and polls.
#[test]
fn a_live_span_counts_as_its_json_line_would() {
    use crate::output::{json::span_json, PairInfo, SiteInfo};
    use usdt_trace_common::*;
    let acct = |waits: &[(u32, u64, u32)]| {
        let mut a = Acct {
            oncpu: 3_000_000,
            runq: 250_000,
            sleep: 1_200_000,
            io: 700_000,
            steal: 80_000,
            ..Acct::default()
        };
        for &(kind, ns, n) in waits {
            a.wait_ns[(kind - 1) as usize] = ns;
            a.waits[(kind - 1) as usize] = n;
        }
        a
    };
    let recs = [
        record(5_150_000, Some(acct(&[])), (0, 0)),
        record(
            5_150_000,
            Some(acct(&[
                (WAIT_LOCK, 1_000_000, 2),
                (WAIT_NET, 100_000, 1),
                (WAIT_TIMER, 50_000, 3),
                (WAIT_DISK, 650_000, 8),
                (WAIT_FAULT, 40_000, 2),
            ])),
            (0, 0),
        ),
        // A polled span: idle time between polls.
        record(
            9_000_000,
            Some(acct(&[(WAIT_DISK, 600_000, 1)])),
            (3_850_000, 3),
        ),
        // No split (crossed threads unmarked, or --no-sched).
        record(7_000, None, (0, 0)),
        // idle_ns without polls is not written, so not counted.
        record(5_150_000, Some(acct(&[])), (99, 0)),
    ];
    let pair = PairInfo {
        provider: "app".into(),
        stem: "request".into(),
        start: "request__start".into(),
        ends: vec!["request__end".into()],
    };
    let site = SiteInfo::for_test("app", "request__start", &[], &[]);
    let (mut live, mut file) = (Run::default(), String::new());
    for r in &recs {
        let mut line = Vec::new();
        span_json(&mut line, &pair, &site, &site, r, None, None);
        let v: Value = serde_json::from_slice(&line).unwrap();
        let from_line = SpanSample::of_json(&v).unwrap().unwrap();
        assert_eq!(SpanSample::of_record(r), from_line, "{v}");
        live.add("app:request", &SpanSample::of_record(r));
        file.push_str(std::str::from_utf8(&line).unwrap());
    }
    assert!(SpanSample::of_record(&recs[1])
        .split
        .unwrap()
        .kinds_n
        .iter()
        .all(|&n| n > 0));
    assert_eq!(
        SpanSample::of_record(&recs[2]).split.unwrap().parts[4],
        3_850_000
    );
    assert_eq!(SpanSample::of_record(&recs[3]).split, None);
    assert_eq!(
        SpanSample::of_record(&recs[0]).split.unwrap().parts[Part::Steal.index()],
        80_000
    );
    // And the summaries, hence every comparison, are the same.
    let from_file = read_run(Path::new("live.ndjson"), file.as_bytes()).unwrap();
    assert_eq!(live.summaries(), from_file);
}

#[test]
fn a_baseline_that_is_missing_not_a_file_or_not_from_watch_is_one_line() {
    let dir = std::env::temp_dir().join(format!("usdt-trace-diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let e = Baseline::read(&dir.join("missing.ndjson")).unwrap_err();
    assert!(
        e.to_string().contains("missing.ndjson: No such file"),
        "{e}"
    );
    let e = Baseline::read(&dir).unwrap_err();
    assert!(e.to_string().ends_with(": not a regular file"), "{e}");
    let text = dir.join("text.out");
    std::fs::write(&text, "END(s) PID TID\n").unwrap();
    let e = Baseline::read(&text).unwrap_err();
    assert!(
        e.to_string().contains("text.out:1: not a JSON object"),
        "{e}"
    );
    assert!(!e.to_string().contains('\n'), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A span name holding escape sequences (set the title, CSI as a C1 byte, a bidi override),
/// a newline and a forged verdict line: `diff`'s text shows it escaped on its own line, so
/// the only `verdict:` line is the tool's; its JSON carries the name exactly, with every
/// character a terminal would obey as a `\u` escape.
#[test]
fn a_name_from_the_file_is_escaped_and_cannot_forge_a_verdict() {
    let hostile =
        r#"x\n  verdict: no significant change (forged)\u001b]0;pwned\u0007\u009b2J\u202e\r"#;
    let line = |oncpu: u64| {
        format!(
            r#"{{"type":"span","provider":"app","name":"{hostile}","duration_ns":{oncpu},"oncpu_ns":{oncpu},"runq_ns":0,"sleep_ns":0,"io_ns":0}}"#
        ) + "\n"
    };
    let before: String = (0..20).map(|i| line(1_000_000 + i)).collect();
    let after: String = (0..20).map(|i| line(2_000_000 + i)).collect();
    let c = diff(&before, &after);
    assert_eq!(c.len(), 1);
    let name = &c[0].name;
    assert!(name.contains('\n') && name.contains('\u{1b}'), "{name:?}");
    let text = to_text(&c[0]);
    assert!(
        !text
            .chars()
            .any(|ch| ch != '\n' && crate::util::terminal::is_unsafe_for_terminal(ch)),
        "{text:?}"
    );
    let verdicts: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("verdict:"))
        .collect();
    assert_eq!(verdicts.len(), 1, "{text}");
    assert!(verdicts[0].starts_with("  verdict: more work"), "{text}");
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.starts_with("app:x\\u{a}  verdict: no significant change (forged)\\u{1b}]0;pwned\\u{7}\\u{9b}2J\\u{202e}\\u{d}: "),
        "{text}"
    );
    let mut out = Vec::new();
    write_comparison(&c[0], true, &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        !out.trim_end_matches('\n')
            .chars()
            .any(crate::util::terminal::is_unsafe_for_terminal),
        "{out:?}"
    );
    assert!(out.contains(r#"\u009b2J\u202e"#), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["span"], name.as_str());
}

/// A line longer than the bound is an error naming the file and the line, read no further
/// than the bound (here 64 bytes; `MAX_LINE`, 16 MiB, in use); a line of exactly the bound
/// is read; a line that is not UTF-8 is a parse error with its line number.
#[test]
fn a_line_past_the_bound_or_not_utf8_is_an_error_naming_its_line() {
    let ok = r#"{"type":"span","provider":"p","name":"n","duration_ns":5}"#;
    let pad = |n: usize| format!("{ok}{}", " ".repeat(n - ok.len()));
    let file = format!("{}\n{}\n", pad(64), "x".repeat(1000));
    let e = read_run_bounded(Path::new("big.ndjson"), file.as_bytes(), 64, MAX_NAMES).unwrap_err();
    assert_eq!(
        e.to_string(),
        "big.ndjson:2: a line longer than 64 bytes: not a run `usdt-trace watch --json` wrote"
    );
    // At the end of the file, without a newline.
    let file = format!("{ok}\n{}", pad(65));
    let e = read_run_bounded(Path::new("f"), file.as_bytes(), 64, MAX_NAMES).unwrap_err();
    assert!(matches!(e, DiffError::LineTooLong { line: 2, .. }), "{e}");
    let file = format!("{ok}\n{}", pad(64));
    let s = read_run_bounded(Path::new("f"), file.as_bytes(), 64, MAX_NAMES).unwrap();
    assert_eq!(s["p:n"].count, 2);
    assert_eq!(
        DiffError::LineTooLong {
            path: "f".into(),
            line: 7,
            max: super::read::MAX_LINE
        }
        .to_string(),
        "f:7: a line longer than 16 MiB: not a run `usdt-trace watch --json` wrote"
    );
    let mut bad = format!("{ok}\n").into_bytes();
    bad.extend_from_slice(b"{\"type\":\"span\",\"provider\":\"p\xff\x1b\",\"duration_ns\":5}\n");
    let e = read_run(Path::new("f"), bad.as_slice()).unwrap_err();
    assert!(e.to_string().starts_with("f:2: not a JSON object: "), "{e}");
}

/// A file of ever new span names is refused at the first past the bound (here 3; `MAX_NAMES`,
/// 65,536, in use), with its line: each name costs memory whatever its spans.
#[test]
fn more_span_names_than_the_bound_is_an_error_naming_the_line() {
    let line =
        |n: usize| format!(r#"{{"type":"span","provider":"p","name":"n{n}","duration_ns":5}}"#);
    let file: String = [0, 1, 0, 2, 1, 3, 4]
        .iter()
        .map(|&n| line(n) + "\n")
        .collect();
    let e = read_run_bounded(Path::new("f"), file.as_bytes(), MAX_LINE, 3).unwrap_err();
    assert_eq!(
        e.to_string(),
        "f:6: more than 3 span names: not runs `usdt-trace watch --json` wrote"
    );
    let s = read_run_bounded(
        Path::new("f"),
        &file.as_bytes()[..file.len() - line(4).len() - 1],
        MAX_LINE,
        4,
    )
    .unwrap();
    assert_eq!(s.len(), 4);
}
