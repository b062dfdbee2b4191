//! `--hist` and `--prometheus` say what the sleep and io parts waited on (issue 26), checked
//! against runs whose answer is known: `tests/testprogs/why_scen.c` (as in `why_diff.rs`) waits
//! ~10 ms per span for a mutex another thread holds (`lock`) or in nanosleep (`sleep`), and
//! prints its own clocks' account of each span (`truth` lines: the time inside
//! pthread_mutex_lock or nanosleep, and its CPU time in there).
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use usdt_trace_tests::markers::free_port;
use usdt_trace_tests::{proc, testprogs, watch};

/// One run at a time: the program pins itself to CPU 1, two runs would share it.
static SERIAL: Mutex<()> = Mutex::new(());

/// Spans per run.
const SPANS: usize = 6;

/// The program's own account of one span: ns inside the waiting call, and its CPU time there.
fn truths(stderr: &str) -> Vec<(f64, f64)> {
    stderr
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w[..] {
                ["truth", "req", "lock_ns", l, "sleep_ns", s, "pread_ns", _, "preads", _, "call_cpu_ns", c] => {
                    let (l, s, c): (f64, f64, f64) = (l.parse().ok()?, s.parse().ok()?, c.parse().ok()?);
                    Some((l + s, c))
                }
                _ => None,
            }
        })
        .collect()
}

/// The one `hist` line of a run, for `why:req`.
fn hist_line(out: &watch::Output) -> Value {
    let lines: Vec<&Value> = out
        .of_type("hist")
        .filter(|h| h["provider"] == "why" && h["name"] == "req")
        .collect();
    assert_eq!(lines.len(), 1, "{:?}", out.records);
    lines[0].clone()
}

fn num(v: &Value) -> f64 {
    v.as_u64().unwrap_or(0) as f64
}

/// The kind's sum over the run's spans is the program's off-CPU time in the call, within
/// why_diff.rs's tolerances summed over the spans: 10% (or 0.1 ms a span) above, and below by
/// as much again plus the spans' run-queue time (a wakeup waits for the CPU after the wait).
fn check_against_truth(h: &Value, kind: &str, stderr: &str) {
    let t = truths(stderr);
    assert_eq!(t.len(), SPANS, "{stderr}");
    let want: f64 = t.iter().map(|(inside, cpu)| inside - cpu).sum();
    let got = num(&h["waits"][kind]["ns"]);
    let runq = num(&h["runq"]["sum_ns"]);
    let slack = (0.1 * want).max(100_000.0 * SPANS as f64);
    eprintln!(
        "{kind}: --hist {got} ns in {} waits, the program {want} ns off CPU; runq {runq}",
        h["waits"][kind]["n"]
    );
    assert!(
        got <= want + slack && got >= want - runq - slack,
        "{kind}: {got} ns waited, the program measured {want} ns off CPU in the call: {h}"
    );
    // One wait per span: a futex wait ends when the holder unlocks, a 10 ms nanosleep once.
    assert_eq!(h["waits"][kind]["n"], SPANS as u64, "{h}");
    // Only that kind, and nested in the sleep part.
    let kinds: Vec<&String> = h["waits"].as_object().unwrap().keys().collect();
    assert_eq!(kinds, [kind], "{h}");
    assert!(got <= num(&h["sleep"]["sum_ns"]), "{h}");
}

fn run(mode: &str, extra: &[&str], env: &[(&str, &str)]) -> watch::Watch {
    let bin = testprogs::build_c("why_scen", &["-O2", "-pthread"]);
    let cmd = format!("{} {mode} {SPANS}", bin.display());
    let mut args = vec!["--hist"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-c", &cmd]);
    watch::Watch::start_env(&args, true, env)
}

#[test]
#[ignore = "needs root"]
fn hist_waits_are_what_the_program_waited() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (mode, kind) in [("lock", "lock"), ("sleep", "timer")] {
        let out = run(mode, &[], &[]).finish();
        assert!(out.status.success(), "{}", out.stderr);
        let h = hist_line(&out);
        assert_eq!(h["duration"]["count"], SPANS as u64, "{h}");
        check_against_truth(&h, kind, &out.stderr);
    }
}

/// The text header: the kind after the sleep part, and the parts still add up to the mean.
#[test]
#[ignore = "needs root"]
fn hist_text_header_names_the_kind() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bin = testprogs::build_c("why_scen", &["-O2", "-pthread"]);
    let cmd = format!("{} lock {SPANS}", bin.display());
    let out = proc::output_within(
        Command::new(watch::usdt_trace_bin())
            .args(["watch", "--hist", "-c", &cmd])
            .stdin(Stdio::null()),
        proc::RUN_TIMEOUT,
    );
    let all = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{all}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let header = all
        .lines()
        .find(|l| l.starts_with("@why:req"))
        .unwrap_or_else(|| panic!("no header: {all}"));
    eprintln!("{header}");
    let ns = |s: &str| -> f64 {
        let cut = s.find(|c: char| c.is_ascii_alphabetic()).unwrap();
        let (v, u) = s.split_at(cut);
        let scale = match u {
            "ns" => 1.0,
            "us" => 1e3,
            "ms" => 1e6,
            _ => 1e9,
        };
        v.parse::<f64>().unwrap() * scale
    };
    let (head, eq) = header.split_once(" = ").expect("a split");
    let mean = ns(head
        .split(", ")
        .find_map(|p| p.strip_prefix("mean "))
        .or_else(|| head.rsplit(": ").next())
        .unwrap());
    let (mut sum, mut lock) = (0.0, None);
    for part in eq.split(" + ") {
        let (p, kinds) = match part.split_once(" (") {
            Some((p, k)) => (p, Some(k.trim_end_matches(')'))),
            None => (part, None),
        };
        let v = ns(p.rsplit(' ').next().unwrap());
        sum += v;
        if p.starts_with("sleep ") {
            let k = kinds.unwrap_or_else(|| panic!("no kinds after sleep: {header}"));
            let l = ns(k
                .strip_prefix("lock ")
                .unwrap_or_else(|| panic!("{header}")));
            assert!(l <= v, "{header}");
            lock = Some(l);
        } else {
            assert!(kinds.is_none(), "kinds only after sleep: {header}");
        }
    }
    // Each part is rounded to 3 significant digits: within 1% of the mean.
    assert!(
        (sum - mean).abs() <= 0.01 * mean,
        "{sum} vs {mean}: {header}"
    );
    assert!(lock.unwrap() > 5e6, "{header}");
}

/// One scrape of `/metrics`: series → value.
fn scrape(addr: &str) -> Option<BTreeMap<String, f64>> {
    let out = Command::new("curl")
        .args(["-s", "-f", "--max-time", "5"])
        .arg(format!("http://{addr}/metrics"))
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| {
                let (series, v) = l.rsplit_once(' ')?;
                Some((series.to_string(), v.parse().ok()?))
            })
            .collect()
    })
}

/// The counters of a scrape taken once every span closed (the program lingers before it
/// exits) equal the `--hist` JSON the same run prints at its end, and the program's clocks.
#[test]
#[ignore = "needs root"]
fn prometheus_wait_counters_equal_the_hist_totals() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let addr = format!("127.0.0.1:{}", free_port());
    let w = run(
        "lock",
        &["--prometheus", &addr],
        &[("WHY_LINGER_MS", "3000")],
    );
    let labels = "provider=\"why\",span=\"req\"";
    let split = format!("usdt_span_split_total{{{labels}}}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut scrapes = Vec::new();
    let last = loop {
        assert!(
            Instant::now() < deadline,
            "never saw {SPANS} spans: {scrapes:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
        let Some(m) = scrape(&addr) else { continue };
        let done = m.get(&split).copied().unwrap_or(0.0) >= SPANS as f64;
        scrapes.push(m);
        if done {
            break scrapes.last().unwrap().clone();
        }
    };
    let out = w.finish();
    assert!(out.status.success(), "{}", out.stderr);
    let h = hist_line(&out);
    check_against_truth(&h, "lock", &out.stderr);
    let series = |m: &str, kind: &str| format!("{m}{{{labels},kind=\"{kind}\"}}");
    for kind in ["lock", "net", "timer", "disk", "fault"] {
        let secs = last[&series("usdt_span_wait_seconds_total", kind)];
        let n = last[&series("usdt_span_waits_total", kind)];
        let ns = num(&h["waits"][kind]["ns"]);
        eprintln!("{kind}: scrape {secs} s in {n} waits, --hist {ns} ns");
        // The exposition writes seconds as f64: equal to the ns within its precision.
        assert!(
            (secs * 1e9 - ns).abs() <= 1.0,
            "{kind}: {secs} s vs {ns} ns"
        );
        assert_eq!(n, num(&h["waits"][kind]["n"]), "{kind}");
    }
    // Never backwards, scrape to scrape; every kind is there from the first split span on.
    for pair in scrapes.windows(2) {
        for (k, v) in pair[0]
            .iter()
            .filter(|(k, _)| k.starts_with("usdt_span_wait"))
        {
            assert!(pair[1][k] >= *v, "{k}: {v} then {}", pair[1][k]);
        }
    }
}
