//! A multithreaded target: 4 threads x N overlapping spans, paired per thread.
use std::collections::BTreeMap;
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::build_c;

#[test]
#[ignore = "needs root"]
fn four_threads_overlapping_spans_pair_per_thread() {
    let bin = build_c("watch_threads", &["-O2", "-pthread"]);
    const N: i64 = 10;
    let cmd = format!("{} {N}", bin.display());
    let out = watch::Watch::start(&["-c", &cmd, bin.to_str().unwrap()]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    assert_eq!(spans.len() as i64, 4 * N, "{:?}", out.records);
    let pid = spans[0]["pid"].as_u64().unwrap();
    let mut by_tid: BTreeMap<u64, Vec<(i64, i64)>> = BTreeMap::new();
    for s in &spans {
        assert_eq!(s["pid"], pid);
        assert_eq!(s["name"], "op");
        assert_eq!(
            s["args"], s["end_args"],
            "start and end of one thread's span: {s}"
        );
        assert!(
            s.get("start_tid").is_none(),
            "started on another thread: {s}"
        );
        by_tid.entry(s["tid"].as_u64().unwrap()).or_default().push((
            s["args"][0].as_i64().unwrap(),
            s["args"][1].as_i64().unwrap(),
        ));
    }
    assert_eq!(by_tid.len(), 4, "four distinct tids");
    assert!(
        !by_tid.contains_key(&pid),
        "workers are not the main thread"
    );
    let mut ks: Vec<i64> = Vec::new();
    for (tid, v) in &by_tid {
        let k = v[0].0;
        ks.push(k);
        assert!(
            v.iter().all(|&(kk, _)| kk == k),
            "tid {tid} mixed threads: {v:?}"
        );
        let is: Vec<i64> = v.iter().map(|&(_, i)| i).collect();
        assert_eq!(is, (0..N).collect::<Vec<_>>(), "tid {tid}");
    }
    ks.sort();
    assert_eq!(ks, vec![0, 1, 2, 3]);
    let sum = out.summary();
    assert_eq!(sum["spans"].as_i64(), Some(4 * N));
    assert_eq!(sum["unmatched"], 0);
    assert_eq!(sum["unmatched_end"], 0);
}
