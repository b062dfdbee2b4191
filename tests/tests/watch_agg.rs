//! Aggregation in the kernel: `--by` histograms per key, `--count` per probe and key, `--top`
//! slowest spans, read back from real processes with known keys and durations (agg_keys:
//! 20 spans of 200 us with kind 0 "alpha" status 200, 10 of 500 us kind 1 "beta" status 200,
//! 5 of 1 ms kind 2 "gamma" status 404).
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use usdt_trace_tests::markers::{self as util, demo_servers, free_port, start_server};
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, single_error_line};

/// `hist_by` records of one run: key (as JSON text) → record, in output order.
fn by_rows(out: &watch::Output) -> Vec<(String, Value)> {
    out.of_type("hist_by")
        .map(|r| (r["key"].to_string(), r.clone()))
        .collect()
}

fn counts(rows: &[(String, Value)]) -> Vec<(String, u64)> {
    rows.iter()
        .map(|(k, r)| (k.clone(), r["count"].as_u64().unwrap()))
        .collect()
}

/// `--count --by str0` records of one run that `pick` accepts: string key → hits.
fn string_key_counts(out: &watch::Output, pick: impl Fn(&Value) -> bool) -> BTreeMap<String, u64> {
    out.of_type("count")
        .filter(|r| r.get("key").is_some() && pick(r))
        .map(|r| {
            (
                r["key"].as_str().unwrap_or("").to_string(),
                r["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn agg(args: &[&str]) -> watch::Output {
    let bin = build_c("agg_keys", &["-O2"]);
    let b = bin.to_str().unwrap();
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["-c", b, b]);
    let out = watch::Watch::start(&a).finish();
    assert!(out.status.success(), "{}", out.stderr);
    out
}

#[test]
#[ignore = "needs root"]
fn by_start_argument_counts_each_key_exactly_with_percentiles_in_the_right_bucket() {
    let out = agg(&["--hist", "--by", "arg1"]);
    let rows = by_rows(&out);
    // Sorted by count, largest first.
    assert_eq!(
        counts(&rows),
        [("0".into(), 20), ("1".into(), 10), ("2".into(), 5)],
        "{:?}",
        out.records
    );
    // Each span busy-waits its duration: p50 is the midpoint of the log-linear bucket that
    // holds it: within 6.25% below, one bucket (12.5%) above, plus what scheduling adds.
    for ((_, r), lo) in rows.iter().zip([200_000u64, 500_000, 1_000_000]) {
        let hi = lo * 1125 / 1000 + 20_000;
        let p50 = r["p50_ns"].as_u64().unwrap();
        assert!(
            p50 >= lo * 94 / 100 && p50 <= hi,
            "p50 {p50} not in [{lo}, {hi}]: {r}"
        );
        assert!(r["max_ns"].as_u64().unwrap() >= lo, "{r}");
        assert!(r["p99_ns"].as_u64().unwrap() >= p50, "{r}");
    }
    // The histogram of the span name still counts every span.
    let h: Vec<_> = out.of_type("hist").collect();
    assert_eq!(h[0]["duration"]["count"], 35, "{}", h[0]);
}

#[test]
#[ignore = "needs root"]
fn by_end_probe_argument_and_by_captured_string() {
    let out = agg(&["--hist", "--by", "req__end:arg1"]);
    assert_eq!(
        counts(&by_rows(&out)),
        [("200".into(), 30), ("404".into(), 5)],
        "{:?}",
        out.records
    );
    let out = agg(&["--hist", "--str", "req__start:2", "--by", "str0"]);
    assert_eq!(
        counts(&by_rows(&out)),
        [
            ("\"alpha\"".into(), 20),
            ("\"beta\"".into(), 10),
            ("\"gamma\"".into(), 5)
        ],
        "{:?}",
        out.records
    );
}

#[test]
#[ignore = "needs root"]
fn by_comm_pid_and_probe() {
    let out = agg(&["--hist", "--by", "comm"]);
    assert_eq!(counts(&by_rows(&out)), [("\"agg_keys\"".into(), 35)]);
    let out = agg(&["--hist", "--by", "probe"]);
    assert_eq!(counts(&by_rows(&out)), [("\"ag:req__end\"".into(), 35)]);
    let out = agg(&["--hist", "--by", "pid"]);
    let pid = out.of_type("start").next().unwrap()["pids"][0].clone();
    assert_eq!(counts(&by_rows(&out)), [(pid.to_string(), 35)]);
}

/// Keys of several fields (bpftrace's `@[comm, arg1]`): each combination is a row of its own,
/// counted exactly, and each key's histogram comes with it (JSON buckets that add up to its
/// count; text draws one per key after the table).
#[test]
#[ignore = "needs root"]
fn by_several_fields_counts_each_combination_with_its_own_histogram() {
    let out = agg(&["--hist", "--by", "arg1,req__end:arg1"]);
    let rows = by_rows(&out);
    assert_eq!(
        counts(&rows),
        [
            ("[0,200]".into(), 20),
            ("[1,200]".into(), 10),
            ("[2,404]".into(), 5)
        ],
        "{:?}",
        out.records
    );
    for (k, r) in &rows {
        let in_buckets: u64 = r["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["count"].as_u64().unwrap())
            .sum();
        assert_eq!(in_buckets, r["count"].as_u64().unwrap(), "{k}: {r}");
        // Every bucket lies where that kind's spans last: at least its busy time.
        let lo = r["buckets"][0]["hi"].as_u64().unwrap();
        let want = match k.as_str() {
            "[0,200]" => 200_000,
            "[1,200]" => 500_000,
            _ => 1_000_000,
        };
        assert!(lo > want * 15 / 16, "{k}: {r}");
    }
    // Three fields, one of them the captured string, one the comm (two kernel words).
    let out = agg(&[
        "--hist",
        "--str",
        "req__start:2",
        "--by",
        "comm,str0,req__end:arg1",
    ]);
    assert_eq!(
        counts(&by_rows(&out)),
        [
            ("[\"agg_keys\",\"alpha\",200]".into(), 20),
            ("[\"agg_keys\",\"beta\",200]".into(), 10),
            ("[\"agg_keys\",\"gamma\",404]".into(), 5)
        ],
        "{:?}",
        out.records
    );
    // Counted hits keyed on two fields; `once` has no argument 0: only its total.
    let out = agg(&["--count", "--by", "probe,arg0", "ag:tick", "ag:once"]);
    let keys: Vec<(String, u64)> = out
        .of_type("count")
        .filter(|r| r.get("key").is_some())
        .map(|r| (r["key"].to_string(), r["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        keys,
        [
            ("[\"ag:tick\",0]".into(), 20),
            ("[\"ag:tick\",1]".into(), 10),
            ("[\"ag:tick\",2]".into(), 5)
        ],
        "{:?}",
        out.records
    );
    // Text: the table, then one histogram per key, its rows adding up to the key's count.
    let bin = build_c("agg_keys", &["-O2"]);
    let b = bin.to_str().unwrap();
    let o = watch::run(&["watch", "--hist", "--by", "comm,arg1", "-c", b, b]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("@ag:req by comm,arg1 (3 keys)"), "{text}");
    for (key, n) in [
        ("\"agg_keys\", 0", 20u64),
        ("\"agg_keys\", 1", 10),
        ("\"agg_keys\", 2", 5),
    ] {
        let head = format!("@ag:req[{key}]: {n} spans");
        let after = text
            .split(&head)
            .nth(1)
            .unwrap_or_else(|| panic!("no {head}: {text}"));
        let bars: u64 = after
            .split("\n\n")
            .next()
            .unwrap()
            .lines()
            .filter(|l| l.starts_with('['))
            .map(|l| l.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(bars, n, "{head}: {after}");
    }
}

/// Several fields under concurrency: six threads of known names and counts, keyed on
/// (comm, tid) and (comm, arg0) by two tracers side by side beside a CPU hog: every thread is
/// one row with its own count, never "other".
#[test]
#[ignore = "needs root"]
fn several_field_keys_stay_exact_with_threads_and_tracers_side_by_side() {
    let bin = build_c("agg_threads", &["-O2", "-pthread"]);
    let b = bin.to_str().unwrap();
    let a = watch::Watch::start(&["--hist", "--by", "comm,tid", b]);
    let c = watch::Watch::start(&["--hist", "--by", "comm,arg0", b]);
    let hog = Hog::start();
    let st = std::process::Command::new(&bin).status().unwrap();
    assert!(st.success());
    drop(hog);
    for (i, w) in [a, c].into_iter().enumerate() {
        let out = w.stop();
        assert!(out.status.success(), "{}", out.stderr);
        let rows = by_rows(&out);
        let got: Vec<(String, u64)> = rows
            .iter()
            .map(|(_, r)| {
                let key = r["key"].as_array().unwrap();
                (
                    key[0].as_str().unwrap().to_string(),
                    r["count"].as_u64().unwrap(),
                )
            })
            .collect();
        let want: Vec<(String, u64)> = (0..6)
            .rev()
            .map(|t| (format!("akt{t}"), 50 * (t + 1)))
            .collect();
        assert_eq!(got, want, "tracer {i}: {rows:?}\n{}", out.stderr);
        if i == 1 {
            // (comm, arg0): thread t passes t.
            for (_, r) in &rows {
                let key = r["key"].as_array().unwrap();
                let t: u64 = key[0].as_str().unwrap()[3..].parse().unwrap();
                assert_eq!(key[1], t, "{r}");
            }
        } else {
            // (comm, tid): six distinct thread ids.
            let tids: std::collections::BTreeSet<u64> = rows
                .iter()
                .map(|(_, r)| r["key"][1].as_u64().unwrap())
                .collect();
            assert_eq!(tids.len(), 6, "{rows:?}");
        }
        assert!(
            !out.records
                .iter()
                .any(|r| r["other"] == true || r["unkeyed"] == true),
            "{:?}",
            out.records
        );
    }
}

#[test]
#[ignore = "needs root"]
fn keys_beyond_max_keys_are_counted_as_other_never_dropped() {
    // arg0 is the span's index: 35 keys for a map of 4.
    let out = agg(&["--hist", "--by", "arg0", "--max-keys", "4"]);
    let rows = by_rows(&out);
    let keyed: u64 = rows
        .iter()
        .filter(|(_, r)| r.get("other").is_none())
        .map(|(_, r)| r["count"].as_u64().unwrap())
        .sum();
    let other: Vec<_> = rows.iter().filter(|(_, r)| r["other"] == true).collect();
    assert_eq!(rows.len(), 5, "4 keys and other: {rows:?}");
    assert_eq!(other.len(), 1, "{rows:?}");
    assert_eq!(keyed, 4);
    assert_eq!(other[0].1["count"], 31, "{rows:?}");
    assert_eq!(other[0].1["key"], Value::Null);
    // The span name's own histogram is the sum of its keys' and "other" (the kernel updates
    // only those under --by): every span, with the slowest one's duration as its max.
    let name = out.of_type("hist").next().expect("hist record");
    assert_eq!(name["duration"]["count"], 35, "{name}");
    let max_of_rows = rows
        .iter()
        .map(|(_, r)| r["max_ns"].as_u64().unwrap())
        .max()
        .unwrap();
    assert_eq!(name["duration"]["max_ns"], max_of_rows, "{name}");
    assert!(
        out.stderr.contains("31 spans had keys beyond --max-keys 4"),
        "{}",
        out.stderr
    );
}

/// A CPU hog beside the tracers, until dropped.
struct Hog(
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    Option<std::thread::JoinHandle<()>>,
);

impl Hog {
    fn start() -> Hog {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        Hog(stop, Some(t))
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.1.take() {
            let _ = t.join();
        }
    }
}

/// Four tracers side by side on agg_threads (six threads named akt0..akt5 that start
/// together; akt<t> runs 50 * (t + 1) spans), with a CPU hog beside them. New keys arriving on
/// a CPU at once ran its per-CPU value cache dry (ENOMEM), which was taken for a full map: in
/// half the runs a tracer sent hundreds of spans of these six keys to "other". Every tracer
/// must count every key exactly, with neither "other" nor "unkeyed".
#[test]
#[ignore = "needs root"]
fn by_keys_within_max_keys_are_never_other_with_tracers_side_by_side() {
    let bin = build_c("agg_threads", &["-O2", "-pthread"]);
    let b = bin.to_str().unwrap();
    let want: Vec<(String, u64)> = (0..6)
        .rev()
        .map(|t| (format!("\"akt{t}\""), 50 * (t + 1)))
        .collect();
    // Two rounds: one failed in three of four rounds before.
    for round in 0..2 {
        let watches: Vec<_> = (0..4)
            .map(|_| watch::Watch::start(&["--hist", "--by", "comm", b]))
            .collect();
        let hog = Hog::start();
        let st = std::process::Command::new(&bin).status().unwrap();
        assert!(st.success());
        drop(hog);
        for (i, w) in watches.into_iter().enumerate() {
            let out = w.stop();
            assert!(out.status.success(), "{}", out.stderr);
            let rows = by_rows(&out);
            assert_eq!(
                counts(&rows),
                want,
                "round {round}, tracer {i}: {rows:?}\n{}",
                out.stderr
            );
            assert!(
                !out.stderr.contains("\"other\"") && !out.stderr.contains("unkeyed"),
                "{}",
                out.stderr
            );
            let h: Vec<_> = out.of_type("hist").collect();
            assert_eq!(h[0]["duration"]["count"], 1050, "{}", h[0]);
        }
    }
}

/// `--by str0` rows of agg_strs (see the program) under `args`, for spans (`--hist`, the
/// start's kept string) and for hits (`--count`, read at the hit): key, count, and whether
/// it says it was cut and escaped.
fn string_rows(args: &[&str]) -> [Vec<(String, u64, bool, bool)>; 2] {
    let bin = build_c("agg_strs", &["-O2"]);
    let b = bin.to_str().unwrap();
    let row = |r: &Value| {
        (
            r["key"].as_str().unwrap().to_string(),
            r["count"].as_u64().unwrap(),
            r["key_truncated"] == true,
            r["key_escaped"] == true,
        )
    };
    let run = |mode: &[&str], kind: &str| {
        let mut a: Vec<&str> = mode.to_vec();
        a.extend(args);
        a.extend(["--by", "str0", "-c", b, b]);
        if kind == "count" {
            a.push("ls:q");
        }
        let out = watch::Watch::start(&a).finish();
        assert!(out.status.success(), "{}", out.stderr);
        let mut rows: Vec<_> = out
            .of_type(kind)
            .filter(|r| r.get("key").is_some())
            .map(row)
            .collect();
        rows.sort();
        rows
    };
    [
        run(&["--hist", "--str", "q__start:1"], "hist_by"),
        run(&["--count", "--str", "q:0"], "count"),
    ]
}

#[test]
#[ignore = "needs root"]
fn string_keys_differing_after_byte_255_are_rows_of_their_own() {
    let s = "S".repeat(256);
    let d = "D".repeat(255);
    let want = vec![
        (format!("{d}éx"), 2, false, false),
        (format!("{s}-alpha"), 7, false, false),
        (format!("{s}-beta"), 3, false, false),
    ];
    for rows in string_rows(&["--str-max", "1024"]) {
        assert_eq!(rows, want);
    }
}

#[test]
#[ignore = "needs root"]
fn string_keys_cut_at_str_max_say_so_and_keep_their_bytes() {
    // 256 bytes (the default --str-max): alpha and beta share their first 256, so they share
    // a row, which says it was cut; delta's cut splits "é", whose first byte is kept as \xc3
    // (never U+FFFD).
    let want = vec![
        (format!("{}\\xc3", "D".repeat(255)), 2, true, true),
        ("S".repeat(256), 10, true, false),
    ];
    for rows in string_rows(&[]) {
        assert_eq!(rows, want);
    }
}

#[test]
#[ignore = "needs root"]
fn count_counts_hits_per_probe_and_key_in_the_kernel() {
    let out = agg(&["--count", "--by", "arg0", "ag:tick", "ag:once"]);
    let recs: Vec<_> = out.of_type("count").collect();
    let totals: Vec<(String, u64)> = recs
        .iter()
        .filter(|r| r.get("key").is_none())
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        totals,
        [("tick".into(), 35), ("once".into(), 1)],
        "{recs:?}"
    );
    let keys: Vec<(String, u64)> = recs
        .iter()
        .filter(|r| r.get("key").is_some())
        .map(|r| {
            (
                format!("{}={}", r["name"].as_str().unwrap(), r["key"]),
                r["count"].as_u64().unwrap(),
            )
        })
        .collect();
    // `once` has no argument 0: only its total.
    assert_eq!(
        keys,
        [
            ("tick=0".into(), 20),
            ("tick=1".into(), 10),
            ("tick=2".into(), 5)
        ],
        "{recs:?}"
    );
    // Nothing is paired or shipped per hit.
    assert!(out.spans().is_empty() && out.events().is_empty());
}

#[test]
#[ignore = "needs root"]
fn count_intervals_are_deltas_with_bounds() {
    let out = agg(&["--count", "-i", "10ms", "ag:tick"]);
    let recs: Vec<_> = out.of_type("count").collect();
    let total: Vec<_> = recs.iter().filter(|r| r["total"] == true).collect();
    assert_eq!(total.len(), 1, "{recs:?}");
    assert_eq!(total[0]["count"], 35);
    let deltas: u64 = recs
        .iter()
        .filter(|r| r["total"] == false)
        .map(|r| {
            assert!(
                r["interval_end_ns"].as_u64() > r["interval_start_ns"].as_u64(),
                "{r}"
            );
            r["count"].as_u64().unwrap()
        })
        .sum();
    // Deltas, not running totals: together at most the total.
    assert!(deltas <= 35, "{recs:?}");
}

#[test]
#[ignore = "needs root"]
fn top_keeps_the_slowest_spans_with_arguments_and_split() {
    let out = agg(&["--top", "5"]);
    let top: Vec<_> = out.of_type("top").collect();
    assert_eq!(top.len(), 5, "{:?}", out.records);
    let durs: Vec<u64> = top
        .iter()
        .map(|t| t["span"]["duration_ns"].as_u64().unwrap())
        .collect();
    assert!(durs.windows(2).all(|w| w[0] >= w[1]), "{durs:?}");
    // Five spans last at least 1 ms (gamma), so the five slowest all do.
    assert!(durs.iter().all(|&d| d >= 1_000_000), "{durs:?}");
    for (i, t) in top.iter().enumerate() {
        assert_eq!(t["rank"], i as u64 + 1);
        let s = &t["span"];
        let idx = s["args"][0].as_u64().unwrap();
        assert!(idx < 35, "{s}");
        assert_eq!(s["end_args"][0], idx, "{s}");
        assert!(s["oncpu_ns"].as_u64().is_some(), "time split: {s}");
    }
    assert!(out.spans().is_empty(), "no per-span records with --top");
}

#[test]
#[ignore = "needs root"]
fn by_loads_with_filter_str_and_the_time_split() {
    let out = agg(&[
        "--hist",
        "--by",
        "str0",
        "--str",
        "req__start:2",
        "--filter",
        "comm == agg_keys",
    ]);
    assert_eq!(by_rows(&out).len(), 3, "{:?}", out.records);
    let h: Vec<_> = out.of_type("hist").collect();
    assert_eq!(h[0]["oncpu"]["count"], 35, "time split kept: {}", h[0]);
    let out = agg(&["--top", "3", "--filter", "req:arg1 == 2", "--min", "900us"]);
    let top: Vec<_> = out.of_type("top").collect();
    assert_eq!(top.len(), 3);
    assert!(top.iter().all(|t| t["span"]["args"][1] == 2), "{top:?}");
}

#[test]
#[ignore = "needs root"]
fn demo_server_latency_by_http_status() {
    let (rust_bin, _) = demo_servers();
    let root = util::workspace_root().join("demo-httpserver/www");
    let port = free_port();
    let _server = start_server(rust_bin, port, Some(&root));
    let b = rust_bin.to_str().unwrap();
    let w = watch::Watch::start(&["--hist", "--by", "request__end:arg1", b, "request__*"]);
    let get = |p: &str| format!("GET {p} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    for i in 0..12 {
        let path = if i % 4 == 3 {
            "/missing.html"
        } else {
            "/hello.txt"
        };
        util::http_request(port, &get(path));
    }
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(
        counts(&by_rows(&out)),
        [("200".into(), 9), ("404".into(), 3)],
        "{:?}",
        out.records
    );
}

#[test]
#[ignore = "needs root"]
fn python_function_calls_counted_by_name() {
    // Debian's python3.11 has its probes in the executable (not linked to libpython).
    let py = "/usr/bin/python3.11";
    if !std::path::Path::new(py).exists() {
        eprintln!("skipped: python3.11 with probes not installed");
        return;
    }
    let script = std::env::temp_dir().join("usdt_agg_calls.py");
    std::fs::write(
        &script,
        "def ping(i):\n    pass\ndef pong(i):\n    pass\nlist(map(ping, range(300)))\nlist(map(pong, range(70)))\n",
    )
    .unwrap();
    let cmd = format!("{py} {}", script.display());
    let out = watch::Watch::start(&[
        "--count",
        "--str",
        "function__entry:1",
        "--by",
        "str0",
        py,
        // 3.11 fires function__entry only while line tracing is on: its semaphore too.
        "python:function__entry",
        "python:line",
        "-c",
        &cmd,
    ])
    .finish();
    assert!(out.status.success(), "{}", out.stderr);
    let by = string_key_counts(&out, |r| r["name"] == "function__entry");
    assert_eq!(by.get("ping"), Some(&300), "{by:?}");
    assert_eq!(by.get("pong"), Some(&70), "{by:?}");
}

#[test]
#[ignore = "needs root"]
fn default_selection_with_high_rate_probes_warns_and_points_at_count() {
    let lib = "/usr/bin/python3.11";
    if !std::path::Path::new(lib).exists() {
        eprintln!("skipped: python3.11 with probes not installed");
        return;
    }
    let out = watch::Watch::start(&["-d", "0.2", lib]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("high-rate"))
        .unwrap_or_else(|| panic!("no warning: {}", out.stderr));
    assert!(
        line.contains("python:line") && line.contains("--count"),
        "{line}"
    );
    // Naming the probes is a choice: no warning.
    let out = watch::Watch::start(&["-d", "0.2", lib, "python:gc__*"]).finish();
    assert!(!out.stderr.contains("high-rate"), "{}", out.stderr);
}

#[test]
fn bad_by_keys_are_one_line_errors() {
    let bin = build_c("agg_keys", &["-O2"]);
    let b = bin.to_str().unwrap();
    for (args, want) in [
        (vec!["--by", "arg1"], "--by needs --hist or --count"),
        (vec!["--hist", "--by", "nonsense"], "expected argN"),
        (
            vec!["--hist", "--by", "arg9"],
            "no traced span start has argument 9",
        ),
        (vec!["--hist", "--by", "str1"], "only str0"),
        (vec!["--hist", "--by", "str0"], "add --str"),
        (
            vec!["--hist", "--by", "nosuch:arg0"],
            "no traced probe is named",
        ),
        (vec!["--hist", "--by", "req__end:arg5"], "has no argument 5"),
        (
            vec!["--hist", "--by", "pid,comm,tid,probe,arg0"],
            "at most 4 fields",
        ),
        (
            vec!["--hist", "--by", "comm,comm"],
            "\"comm\" is named twice",
        ),
        (vec!["--hist", "--by", "comm,"], "expected argN"),
        (
            vec!["--hist", "--by", "comm,arg9"],
            "no traced span start has argument 9",
        ),
        (vec!["--count", "--hist"], "cannot be used with"),
        (vec!["--top", "0"], "--top 0"),
        (vec!["-i", "1s"], "--interval needs"),
    ] {
        let mut a = vec!["watch"];
        a.extend(args.iter());
        a.push(b);
        let out = watch::run(&a);
        if want == "cannot be used with" {
            // Found by clap: a usage error in the tool's style, exit 2.
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            assert!(single_error_line(&out).contains(want), "{args:?}");
            continue;
        }
        let line = single_error_line(&out);
        assert!(line.contains(want), "{args:?}: {line}");
    }
}

/// A PostgreSQL cluster of its own (initdb, pg_ctl) on a unix socket, stopped on drop.
struct Postgres {
    dir: std::path::PathBuf,
    port: u16,
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

impl Postgres {
    fn start() -> Option<Postgres> {
        if !std::path::Path::new(&format!("{PG_BIN}/postgres")).exists() {
            return None;
        }
        let dir = std::env::temp_dir().join(format!("usdt_agg_pg_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let status = std::process::Command::new("chown")
            .args(["postgres:", dir.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        let port = free_port();
        let pg = Postgres { dir, port };
        let data = pg.dir.join("data");
        let ok = pg
            .as_postgres(&[
                &format!("{PG_BIN}/initdb"),
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "--no-sync",
            ])
            .status
            .success();
        assert!(ok, "initdb failed");
        let opts = format!("-p {port} -k {} -c listen_addresses=''", pg.dir.display());
        let out = pg.as_postgres(&[
            &format!("{PG_BIN}/pg_ctl"),
            "-D",
            data.to_str().unwrap(),
            "-o",
            &opts,
            "-l",
            pg.dir.join("log").to_str().unwrap(),
            "-w",
            "start",
        ]);
        assert!(out.status.success(), "pg_ctl start: {out:?}");
        Some(pg)
    }

    fn as_postgres(&self, argv: &[&str]) -> std::process::Output {
        let mut cmd = std::process::Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).args(argv);
        usdt_trace_tests::proc::output_within(&mut cmd, Duration::from_secs(60))
    }

    /// Runs each query on one connection with psql.
    fn queries(&self, qs: &[&str]) {
        let port = self.port.to_string();
        let mut argv = vec![
            "/usr/bin/psql",
            "-X",
            "-q",
            "-h",
            self.dir.to_str().unwrap(),
            "-p",
            &port,
            "-d",
            "postgres",
        ];
        for q in qs {
            argv.extend(["-c", q]);
        }
        let out = self.as_postgres(&argv);
        assert!(out.status.success(), "psql: {out:?}");
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = self.as_postgres(&[
            &format!("{PG_BIN}/pg_ctl"),
            "-D",
            data.to_str().unwrap(),
            "-m",
            "immediate",
            "stop",
        ]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
#[ignore = "needs root"]
fn postgres_queries_counted_and_histogrammed_by_query_text() {
    let Some(pg) = Postgres::start() else {
        eprintln!("skipped: PostgreSQL 15 not installed");
        return;
    };
    let bin = format!("{PG_BIN}/postgres");
    // Counts of query__start, keyed by the query text, in the kernel.
    let w = watch::Watch::start(&[
        "--count",
        "--str",
        "query__start:0",
        "--by",
        "str0",
        &bin,
        "postgresql:query__start",
    ]);
    pg.queries(&["SELECT 42 AS agg_a;"; 5]);
    pg.queries(&["SELECT 'agg_b';"; 3]);
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    let by = string_key_counts(&out, |_| true);
    assert_eq!(by.get("SELECT 42 AS agg_a;"), Some(&5), "{by:?}");
    assert_eq!(by.get("SELECT 'agg_b';"), Some(&3), "{by:?}");
    // Latency histograms per query text: query__start -> query__done.
    let w = watch::Watch::start(&[
        "--hist",
        "--str",
        "query__start:0",
        "--by",
        "str0",
        &bin,
        "postgresql:query__start",
        "postgresql:query__done",
    ]);
    pg.queries(&["SELECT pg_sleep(0.02) AS agg_c;"; 4]);
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    let rows: Vec<_> = out
        .of_type("hist_by")
        .filter(|r| r["key"] == "SELECT pg_sleep(0.02) AS agg_c;")
        .collect();
    assert_eq!(rows.len(), 1, "{:?}", out.records);
    assert_eq!(rows[0]["count"], 4, "{}", rows[0]);
    let p50 = rows[0]["p50_ns"].as_u64().unwrap();
    // pg_sleep(0.02) lasts at least 20 ms; a bucket midpoint is within 6.25% below.
    assert!((18_750_000..40_000_000).contains(&p50), "{}", rows[0]);
    assert!(
        rows[0]["max_ns"].as_u64().unwrap() >= 20_000_000,
        "{}",
        rows[0]
    );
}
