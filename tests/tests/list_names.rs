//! `list --names`: one sorted `provider:name` per probe, like `bpftrace -l`; a pattern that
//! matches nothing is an error, as in `watch`.
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, single_error_line};

#[test]
fn names_are_sorted_unique_and_filtered() {
    let bin = build_c("watch_nest", &["-O2"]);
    let b = bin.to_str().unwrap();
    let out = watch::run(&["list", "--names", b]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut sorted = lines.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(lines, sorted);
    assert!(
        lines.contains(&"wn:rec__start") && lines.contains(&"wn:outer__end"),
        "{text}"
    );
    assert!(lines.iter().all(|l| l.starts_with("wn:")), "{text}");

    let out = watch::run(&["list", "--names", b, "wn:rec*"]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "wn:rec__end\nwn:rec__start\n"
    );
}

#[test]
fn a_pattern_that_matches_nothing_fails() {
    let bin = build_c("watch_nest", &["-O2"]);
    let b = bin.to_str().unwrap();
    for args in [
        vec!["list", b, "nosuch*"],
        vec!["list", "--names", b, "nosuch*"],
    ] {
        let out = watch::run(&args);
        let line = single_error_line(&out);
        assert!(line.contains("no probe matches nosuch*"), "{line}");
    }
}
