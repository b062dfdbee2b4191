//! Text mode (header, aligned columns, summary line) and histograms (--hist, --json --hist).
use usdt_trace_tests::watch;
use usdt_trace_tests::watch::run;
use usdt_trace_tests::watch_util::build_c;

#[test]
#[ignore = "needs root"]
fn text_mode_header_aligned_lines_and_summary() {
    let bin = build_c("watch_nest", &["-O2"]);
    let b = bin.to_str().unwrap();
    let out = run(&["watch", "-c", b, b]);
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1 + 7 + 1,
        "header, 7 spans, summary:\n{stdout}"
    );
    let header = lines[0];
    for col in ["END(s)", "PID", "TID", "COMM", "PROBE", "DURATION"] {
        assert!(header.contains(col), "{header}");
    }
    let probe_col = header.find("PROBE").unwrap();
    let rows = &lines[1..8];
    let names: Vec<&str> = rows
        .iter()
        .map(|l| l[probe_col..].split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        names,
        ["wn:inner", "wn:outer", "wn:rec", "wn:rec", "wn:rec", "wn:rec", "wn:rec"]
    );
    assert!(rows[0].contains("(2) -> (-2)"), "{}", rows[0]);
    assert!(rows[6].contains("(5) -> (500)"), "{}", rows[6]);
    for r in rows {
        // Columns line up with the header: PID ends where the header's PID ends, etc.
        let pid_end = header.find("PID").unwrap() + 3;
        assert!(
            r[..pid_end].trim_end().len() == pid_end,
            "PID column: {r:?}\n{header:?}"
        );
        assert_eq!(&r[pid_end..pid_end + 1], " ", "{r:?}");
        let fields: Vec<&str> = r.split_whitespace().collect();
        assert!(fields[0].parse::<f64>().is_ok(), "TIME: {r}");
        assert!(fields[1].parse::<u32>().is_ok(), "PID: {r}");
        assert_eq!(fields[1], fields[2], "single-threaded: PID == TID: {r}");
        assert_eq!(fields[3], "watch_nest");
    }
    assert_eq!(
        lines[8].split(" in ").next().unwrap(),
        "7 spans, 0 events, 0 lost, 1 unmatched starts, 1 unmatched ends"
    );
}

#[test]
#[ignore = "needs root"]
fn text_mode_events() {
    let bin = build_c("watch_procs", &["-O2"]);
    let b = bin.to_str().unwrap();
    let cmd = format!("{b} once 42");
    let out = run(&["watch", "--no-auto-span", "-c", &cmd, b]);
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1 + 2 + 1, "{stdout}");
    assert!(lines[1].contains("wp:job__start"), "{stdout}");
    assert!(lines[2].contains("wp:job__end"), "{stdout}");
    assert!(lines[2].contains("42"), "{stdout}");
    assert!(
        lines[3].starts_with("0 spans, 2 events, 0 lost"),
        "{stdout}"
    );
}

#[test]
#[ignore = "needs root"]
fn hist_json_counts_every_span() {
    let bin = build_c("watch_threads", &["-O2", "-pthread"]);
    let cmd = format!("{} 7", bin.display());
    let out = watch::Watch::start(&["--hist", "-c", &cmd, bin.to_str().unwrap()]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.spans().is_empty(), "--hist prints no individual spans");
    let hists: Vec<_> = out.of_type("hist").collect();
    assert_eq!(hists.len(), 1, "{:?}", out.records);
    let h = hists[0];
    assert_eq!(h["provider"], "wt");
    assert_eq!(h["name"], "op");
    for part in ["duration", "oncpu", "runq", "sleep", "io"] {
        assert_eq!(h[part]["count"], 28, "{part}: {h}");
        let buckets = h[part]["buckets"].as_array().unwrap();
        let total: u64 = buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum();
        assert_eq!(total, 28, "{part} buckets: {h}");
        // Log-linear: 8 buckets per power of two (exact below 8).
        for b in buckets {
            let (lo, hi) = (b["lo"].as_u64().unwrap(), b["hi"].as_u64().unwrap());
            assert!(hi > lo && hi - lo <= (lo / 8).max(1), "{b}");
        }
    }
    // Percentiles, in order, and the exact maximum.
    let d = &h["duration"];
    let p: Vec<u64> = ["p50_ns", "p90_ns", "p99_ns", "max_ns"]
        .iter()
        .map(|k| d[*k].as_u64().unwrap())
        .collect();
    assert!(p.windows(2).all(|w| w[0] <= w[1]) && p[0] >= 100_000, "{d}");
    // Each span sleeps at least 100 us.
    let sum = h["duration"]["sum_ns"].as_u64().unwrap();
    assert!(sum >= 28 * 100_000, "{h}");
    assert_eq!(out.summary()["spans"], 28);
}

#[test]
#[ignore = "needs root"]
fn hist_text_counts_every_span() {
    let bin = build_c("watch_threads", &["-O2", "-pthread"]);
    let b = bin.to_str().unwrap();
    let cmd = format!("{b} 5");
    let out = run(&["watch", "--hist", "-c", &cmd, b]);
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("@wt:op  20 spans, mean "), "{stdout}");
    // The duration count column sums to 20.
    let total: u64 = stdout
        .lines()
        .filter(|l| l.starts_with('['))
        .map(|l| {
            let after = &l[l.find(')').or_else(|| l.find(']')).unwrap() + 1..];
            after
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(total, 20, "{stdout}");
    assert!(stdout
        .trim_end()
        .lines()
        .last()
        .unwrap()
        .starts_with("20 spans, 0 events, 0 lost"));
}

/// A span that crossed threads (export_demo's `job`, paired by key from the main thread to the
/// worker) has no time split; in text it says why, and spans that have one say nothing.
#[test]
#[ignore = "needs root"]
fn text_span_without_a_split_says_it_ended_on_another_thread() {
    let bin = build_c("export_demo", &["-O2", "-pthread"]);
    let b = bin.to_str().unwrap();
    let out = run(&[
        "watch",
        "--span",
        "ex:job__start=ex:job__end",
        "--key",
        "0",
        "-c",
        b,
        b,
    ]);
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no {name}:\n{stdout}"))
    };
    let job = line("ex:job ");
    assert!(
        job.contains("  no split: ended on another thread  (started on tid "),
        "{job}"
    );
    for name in ["ex:outer ", "ex:inner ", "ex:work "] {
        let l = line(name);
        assert!(l.contains("  cpu "), "{l}");
        assert!(!l.contains("no split"), "{l}");
    }
}
