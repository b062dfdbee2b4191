//! Past the kernel side's limits (nesting depth, threads with span state, open id spans),
//! spans are dropped and reported as drops: never mispaired, never counted as unmatched.
use serde_json::{json, Value};
use usdt_trace_tests::watch::{self, Output};
use usdt_trace_tests::watch_util::build_c;

/// `usdt-trace watch --json FLAGS... -c "watch_limits MODE N" watch_limits`.
fn run(mode: &str, n: usize, flags: &[&str]) -> Output {
    let bin = build_c("watch_limits", &["-O2", "-pthread"]);
    let bin = bin.to_str().unwrap();
    let cmd = format!("{bin} {mode} {n}");
    let mut args: Vec<&str> = flags.to_vec();
    args.extend(["-c", &cmd, bin]);
    let out = watch::Watch::start(&args).finish();
    assert!(out.status.success(), "{}", out.stderr);
    out
}

fn dropped(sum: &Value) -> (u64, u64, u64) {
    let d = &sum["dropped"];
    (
        d["threads_full"].as_u64().expect("threads_full"),
        d["id_spans_full"].as_u64().expect("id_spans_full"),
        d["depth"].as_u64().expect("depth"),
    )
}

/// The `ID_SLOTS` slot the kernel gives id `id` of process `pid` (its one span name is pair 0).
fn id_slot(pid: u32, id: u64) -> usize {
    let key = usdt_trace_common::IdKey {
        pair_id: 0,
        tgid: pid,
        span_id: id,
    };
    key.slot() as usize
}

#[test]
#[ignore = "needs root"]
fn recursion_past_the_stack_drops_and_never_mispairs() {
    const N: u64 = 80;
    const STACK: u64 = usdt_trace_common::MAX_DEPTH as u64;
    // The strings live apart from the frames: check each level keeps its own.
    let out = run("depth", N as usize, &["--str", "lim:rec__start:1"]);
    let spans = out.spans();
    let sum = out.summary();
    assert_eq!(dropped(sum), (0, 0, N - STACK), "{sum}");
    assert_eq!(sum["spans"], STACK, "{sum}");
    assert_eq!(sum["unmatched"], 0, "{sum}");
    assert_eq!(sum["unmatched_end"], 0, "{sum}");
    assert_eq!(spans.len() as u64, STACK);
    // Innermost recorded level ends first: STACK, STACK-1, ..., 1.
    for (i, s) in spans.iter().enumerate() {
        let d = STACK - i as u64;
        assert_eq!(s["args"], json!([d, format!("level-{d}")]), "{s}");
        assert_eq!(s["end_args"], json!([d]), "end of level {d} closed it: {s}");
        // Level d holds levels d..N, two 1 ms sleeps each. A mispaired end (an inner level's)
        // would make it shorter.
        let want = 2 * (N - d + 1) * 1_000_000;
        let got = s["duration_ns"].as_u64().unwrap();
        assert!(
            got >= want && got < want + 150_000_000,
            "level {d}: {got} ns, want {want} ns + scheduling slack"
        );
    }
    assert!(
        out.stderr.contains(&format!("deeper than {STACK}")),
        "warning expected: {}",
        out.stderr
    );
}

#[test]
#[ignore = "needs root"]
fn more_threads_than_max_threads_are_dropped_not_unmatched() {
    let out = run("threads", 12, &["--max-threads", "8"]);
    let sum = out.summary();
    assert_eq!(dropped(sum), (4, 0, 0), "{sum}");
    assert_eq!(sum["spans"], 8, "{sum}");
    assert_eq!(sum["unmatched"], 0, "{sum}");
    assert_eq!(sum["unmatched_end"], 0, "the dropped starts' ends: {sum}");
    for s in out.spans() {
        assert_eq!(s["args"], s["end_args"], "{s}");
    }
    assert!(
        out.stderr.contains("--max-threads"),
        "warning expected: {}",
        out.stderr
    );
}

/// One process opens ids 1..=N (all before any end), with room for `--max-open-ids 16`
/// beyond the direct-mapped table every start tries first: a start takes its key's slot if
/// free, else one of the 16 hash entries, else is dropped. Which ids are kept follows from the
/// slot hash, so the test works it out and checks the kernel kept exactly those, paired each
/// with its own end.
#[test]
#[ignore = "needs root"]
fn more_open_ids_than_the_table_and_max_open_ids_are_dropped_not_unmatched() {
    const N: u64 = 6000;
    const HASHED: usize = 16;
    let out = run(
        "ids",
        N as usize,
        &[
            "--no-auto-span",
            "--span",
            "lim:req__start=lim:req__end",
            "--key",
            "0",
            "--max-open-ids",
            "16",
        ],
    );
    let sum = out.summary();
    let spans = out.spans();
    let pid = spans[0]["pid"].as_u64().unwrap() as u32;
    // The one span name is pair 0.
    let mut taken = vec![false; usdt_trace_common::ID_SLOTS as usize];
    let mut hashed = 0;
    let mut kept = Vec::new();
    for id in 1..=N {
        let slot = &mut taken[id_slot(pid, id)];
        if !*slot {
            *slot = true;
            kept.push(id);
        } else if hashed < HASHED {
            hashed += 1;
            kept.push(id);
        }
    }
    assert_eq!(hashed, HASHED, "the ids must overflow the table");
    let dropped_n = N - kept.len() as u64;
    assert_eq!(dropped(sum), (0, dropped_n, 0), "{sum}");
    assert_eq!(sum["spans"], kept.len() as u64, "{sum}");
    assert_eq!(sum["unmatched"], 0, "none reported as never ended: {sum}");
    assert_eq!(
        sum["unmatched_end"], 0,
        "none reported as ended without a start: {sum}"
    );
    let ids: Vec<u64> = spans
        .iter()
        .map(|s| {
            assert_eq!(s["args"], s["end_args"], "closed by its own end: {s}");
            s["args"][0].as_u64().unwrap()
        })
        .collect();
    assert_eq!(ids, kept);
    assert!(
        out.stderr.contains("--max-open-ids"),
        "warning expected: {}",
        out.stderr
    );
}

/// Four threads, each opening 64 id spans at a time then closing them, 150 rounds: starts on
/// two CPUs race for slots of the direct-mapped table (and fall back to the hash when a slot
/// is held). Every span must come out once, closed by its own end, and none be unmatched.
#[test]
#[ignore = "needs root"]
fn id_spans_racing_for_slots_on_many_threads_all_pair_exactly() {
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 150;
    const OPEN: u64 = 64;
    let bin = build_c("id_race", &["-O2", "-pthread"]);
    let bin = bin.to_str().unwrap();
    let cmd = format!("{bin} {THREADS} {ROUNDS} {OPEN}");
    let out = watch::Watch::start(&[
        "--no-auto-span",
        "--span",
        "race:req__start=race:req__end",
        "--key",
        "0",
        "--no-sched",
        "-c",
        &cmd,
        bin,
    ])
    .finish();
    assert!(out.status.success(), "{}", out.stderr);
    let sum = out.summary();
    let n = THREADS * ROUNDS * OPEN;
    assert_eq!(sum["spans"], n, "{sum}");
    assert_eq!(dropped(sum), (0, 0, 0), "{sum}");
    assert_eq!(sum["unmatched"], 0, "{sum}");
    assert_eq!(sum["unmatched_end"], 0, "{sum}");
    let mut ids = std::collections::HashSet::new();
    for s in out.spans() {
        let id = s["args"][0].as_u64().unwrap();
        assert_eq!(s["args"], json!([id, id * 7 + 3]), "{s}");
        assert_eq!(s["end_args"], s["args"], "closed by its own end: {s}");
        assert!(ids.insert(id), "span {id} reported twice");
    }
    assert_eq!(ids.len() as u64, n);
}

/// Id spans keep their start strings in their slot's own entry, or, when another open span
/// holds the slot, in the string hash: 5,000 spans open at once, more than the 4,096 slots
/// (the test works out which share one from the slot hash), and every span must come out with
/// its own string.
#[test]
#[ignore = "needs root"]
fn id_spans_keep_their_start_strings_in_their_slot_or_the_hash() {
    const N: u64 = 5000;
    let out = run(
        "idstrs",
        N as usize,
        &[
            "--no-auto-span",
            "--span",
            "lim:job__start=lim:job__end",
            "--key",
            "0",
            "--str",
            "lim:job__start:1",
            // 5,000 string records of ~4 KB in a burst: room for all of them, so that none is
            // lost while the reader catches up (a lost string record is counted as lost).
            "--ring-kib",
            "65536",
        ],
    );
    let sum = out.summary();
    let spans = out.spans();
    assert_eq!(sum["spans"], N, "{sum}");
    assert_eq!(sum["lost"], 0, "{sum}");
    assert_eq!(dropped(sum), (0, 0, 0), "{sum}");
    let pid = spans[0]["pid"].as_u64().unwrap() as u32;
    let mut taken = vec![false; usdt_trace_common::ID_SLOTS as usize];
    let hashed = (1..=N)
        .filter(|&id| std::mem::replace(&mut taken[id_slot(pid, id)], true))
        .count();
    assert!(hashed > 0, "some ids must share a slot");
    // A start whose slot is taken keeps its strings in the string hash, whose allocator can run
    // dry in a burst like this one: such a span goes on without its string, and is counted.
    let mut without = 0u64;
    for s in &spans {
        let id = s["args"][0].as_u64().unwrap();
        if s["args"][1].is_string() {
            assert_eq!(
                s["args"],
                json!([id, format!("id-{id}")]),
                "its own string: {s}"
            );
        } else {
            without += 1;
        }
        assert_eq!(s["end_args"], json!([id]), "{s}");
    }
    let counted = sum
        .get("strings_dropped")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    eprintln!("{hashed} of {N} ids hashed, {without} spans without their string");
    assert_eq!(
        without, counted,
        "spans without their string are counted: {sum}"
    );
    assert!(
        without <= hashed as u64,
        "a span holding its slot keeps its string in place: {without} without, {hashed} hashed"
    );
}

#[test]
fn bad_limits_are_usage_errors() {
    for flag in ["--max-threads", "--max-open-ids"] {
        let out = watch::run(&["watch", flag, "0", "/bin/true"]);
        let line = usdt_trace_tests::watch_util::single_error_line(&out);
        assert!(line.contains(flag), "{line}");
    }
}
