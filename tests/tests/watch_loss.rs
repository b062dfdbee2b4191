//! A flood into a tiny ring: records are lost, and the summary accounts for every one of them.
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::build_c;

#[test]
#[ignore = "needs root"]
fn flood_tiny_ring_lost_equals_hits_minus_printed() {
    let bin = build_c("watch_flood", &["-O2"]);
    let n = 200_000u64;
    let cmd = format!("{} {n}", bin.display());
    let out = watch::Watch::start(&["--ring-kib", "4", "-c", &cmd, bin.to_str().unwrap()]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let printed = (out.events().len() + out.spans().len()) as u64;
    let sum = out.summary();
    let hits = sum["events"].as_u64().unwrap() + sum["spans"].as_u64().unwrap();
    let lost = sum["lost"].as_u64().unwrap();
    assert_eq!(hits, n + 1, "the kernel counts every hit: {sum}");
    assert!(lost > 0, "a 4 KiB ring cannot hold {n} records: {sum}");
    assert!(printed > 0, "{sum}");
    assert_eq!(
        printed + lost,
        hits,
        "printed {printed} + lost {lost} != hits {hits}"
    );
    assert!(
        out.stderr
            .contains(&format!("warning: {lost} records were lost")),
        "{}",
        out.stderr
    );
    // What was printed is in order and intact.
    let idx: Vec<u64> = out
        .events()
        .iter()
        .filter(|e| e["name"] == "flood")
        .map(|e| e["args"][0].as_u64().unwrap())
        .collect();
    assert!(idx.windows(2).all(|w| w[0] < w[1]), "out of order");
}

#[test]
#[ignore = "needs root"]
fn flood_default_ring_loses_nothing() {
    let bin = build_c("watch_flood", &["-O2"]);
    let cmd = format!("{} 20000", bin.display());
    let out = watch::Watch::start(&["-c", &cmd, bin.to_str().unwrap()]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let sum = out.summary();
    assert_eq!(sum["lost"], 0, "{sum}");
    assert_eq!(sum["events"], 20001);
    assert_eq!(out.events().len(), 20001);
    let last = out.events().last().cloned().cloned().unwrap();
    assert_eq!(last["name"], "done");
    assert_eq!(last["args"][0], 20000);
}
