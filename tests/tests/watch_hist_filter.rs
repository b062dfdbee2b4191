//! `--hist --filter` on arguments, in the kernel, as bpftrace's `/arg0 >= 100/ { @ =
//! hist(...) }`: `tests/testprogs/follow_load.c` makes spans `sv:job(i)` for i = 0..400; the
//! histogram counts exactly the 300 spans whose start argument passes, and a filter on pid
//! and arguments together counts them too. Before, an argument comparison with `--hist` was
//! refused ("argument comparisons are not compiled").
use usdt_trace_tests::watch::Watch;
use usdt_trace_tests::watch_util::build_c;

fn hist_count(filter: &str) -> u64 {
    let bin = build_c("follow_load", &[]);
    let dir = std::env::temp_dir().join(format!("usdt-hist-filter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("input");
    std::fs::write(&input, "400\n").unwrap();
    // Its "done 400" to /dev/null: stdout is watch's NDJSON.
    let cmd = format!("{} < {} > /dev/null", bin.display(), input.display());
    let out = Watch::start(&["--hist", "--filter", filter, "-c", &cmd]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let h: Vec<_> = out.of_type("hist").filter(|h| h["name"] == "job").collect();
    assert_eq!(h.len(), 1, "{:?}", out.records);
    let sum = out.summary();
    let n = h[0]["duration"]["count"].as_u64().unwrap();
    // What the filter turned away is counted, and the two add up to every span made.
    assert_eq!(
        n + sum["filtered"].as_u64().unwrap_or(0),
        400,
        "{sum}\n{}",
        out.stderr
    );
    n
}

#[test]
#[ignore = "needs root"]
fn hist_counts_only_the_spans_whose_arguments_pass_the_filter() {
    assert_eq!(hist_count("arg0 >= 100"), 300);
    assert_eq!(hist_count("arg0 < 10 || arg0 == 399"), 11);
    assert_eq!(hist_count("pid > 0 && arg0 >= 200"), 200);
}
