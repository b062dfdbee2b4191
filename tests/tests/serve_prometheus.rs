//! `usdt-trace serve --config FILE`: the daemon runs several definitions over real programs
//! (tests/testprogs/serve_load.c, N spans of known kinds and durations), and one /metrics
//! carries them all, each series labelled with its definition. The counts scraped are the
//! programs' own; SIGHUP with a changed file stops the removed definition, starts the added
//! one and leaves the unchanged one counting; a definition whose binary is missing is
//! retried and exported as down without holding up the others; SIGTERM detaches and exits 0.
//! A real Prometheus scrapes the daemon once and is asked over its API. And a bad file is
//! one line naming the file and the definition (no root needed for those).
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use usdt_trace_tests::markers::free_port;
use usdt_trace_tests::proc;
use usdt_trace_tests::prometheus::Prometheus;
use usdt_trace_tests::serve::{Daemon, Metrics};
use usdt_trace_tests::watch::usdt_trace_bin;
use usdt_trace_tests::watch_util::{build_c, single_error_line};

/// Attaching loads and verifies the eBPF programs: slow on a busy machine, never minutes.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(90);
const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs a program to its end (bounded).
fn run(bin: &Path, n: u32) {
    let out = proc::output_within(
        Command::new(bin).arg(n.to_string()),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{} {n}: {:?}", bin.display(), out);
}

fn definition(name: &str, bin: &Path, extra: &str) -> String {
    format!(
        "[[definition]]\nname = \"{name}\"\ntargets = [\"{}\"]\npatterns = [\"sv:*\"]\n{extra}\n",
        bin.display()
    )
}

/// Checks one histogram's buckets: cumulative, `+Inf` equal to `_count`, and every kind-0
/// span (busy 100 us) below 16.7 ms while every kind-1 span (asleep 50 ms) is above 33.5 ms:
/// `fast` and `fast + slow` exactly.
fn check_buckets(m: &Metrics, labels: &[(&str, &str)], fast: f64, slow: f64) {
    let mut b: Vec<(f64, f64)> = m
        .find("usdt_span_duration_seconds_bucket", labels)
        .iter()
        .map(|s| {
            let le = &s.labels["le"];
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().expect("le")
            };
            (le, s.value)
        })
        .collect();
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    assert!(b.len() > 2, "{labels:?}: {b:?}");
    assert!(
        b.windows(2).all(|w| w[0].1 <= w[1].1),
        "not cumulative: {b:?}"
    );
    let count = m.one("usdt_span_duration_seconds_count", labels);
    assert_eq!(b.last().map(|x| x.1), Some(count), "+Inf vs _count");
    assert_eq!(count, fast + slow, "{labels:?}");
    let at = |le: f64| b.iter().rev().find(|x| x.0 <= le).map_or(0.0, |x| x.1);
    assert_eq!(at(0.0168), fast, "{labels:?}: below 16.7 ms: {b:?}");
    assert_eq!(at(0.0336), fast, "{labels:?}: below 33.5 ms: {b:?}");
}

#[test]
#[ignore = "needs root"]
fn serve_runs_definitions_reloads_on_sighup_and_stops_on_sigterm() {
    let a = build_c("serve_load", &["-O2", "-DVARIANT=1"]);
    let b = build_c("serve_load", &["-O2", "-DVARIANT=2"]);
    let c = build_c("serve_load", &["-O2", "-DVARIANT=3"]);
    let dir = std::env::temp_dir().join(format!("usdt-trace-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("serve.toml");
    let addr = format!("127.0.0.1:{}", free_port());
    let head = format!("listen = \"{addr}\"\nretry-seconds = 1\n\n");
    // "a" keys by kind (arg1); "b" at one bucket bound per power of two; "missing" names a
    // binary that is not there: retried, exported as down, the others unaffected.
    let def_a = definition("a", &a, "by = \"arg1\"\nmax-keys = 10");
    let def_missing = definition("missing", &dir.join("not-built-yet/serve_load"), "");
    std::fs::write(
        &config,
        format!(
            "{head}{def_a}{}{def_missing}",
            definition("b", &b, "prometheus-buckets = 1")
        ),
    )
    .expect("config");

    let mut d = Daemon::start(&config);
    d.wait_log("[a] attached: Attached 2 probe sites", ATTACH_TIMEOUT);
    d.wait_log("[b] attached: Attached 2 probe sites", ATTACH_TIMEOUT);
    d.wait_log("[missing] cannot attach: ", ATTACH_TIMEOUT);
    run(&a, 20);
    run(&b, 30);

    let m = Metrics::scrape(&addr);
    eprintln!("first scrape:\n{}", m.text);
    // "a": 10 spans of each kind, one histogram per key, exact.
    for key in ["0", "1"] {
        let l = [
            ("definition", "a"),
            ("provider", "sv"),
            ("span", "job"),
            ("by", "arg1"),
            ("key", key),
        ];
        let (fast, slow) = if key == "0" { (10.0, 0.0) } else { (0.0, 10.0) };
        check_buckets(&m, &l, fast, slow);
    }
    assert_eq!(m.one("usdt_spans_total", &[("definition", "a")]), 20.0);
    assert_eq!(m.one("usdt_keys_max", &[("definition", "a")]), 10.0);
    // "b": 30 spans, 15 of each kind, buckets at powers of two.
    let lb = [("definition", "b"), ("provider", "sv"), ("span", "job")];
    check_buckets(&m, &lb, 15.0, 15.0);
    assert_eq!(m.one("usdt_spans_total", &[("definition", "b")]), 30.0);
    // 28 powers of two from 256 ns to 68.7 s, and +Inf.
    assert_eq!(
        m.find("usdt_span_duration_seconds_bucket", &lb).len(),
        29 + 1
    );
    assert_eq!(m.one("usdt_definition_up", &[("definition", "a")]), 1.0);
    assert_eq!(m.one("usdt_definition_up", &[("definition", "b")]), 1.0);
    assert_eq!(
        m.one("usdt_definition_up", &[("definition", "missing")]),
        0.0
    );
    assert_eq!(m.one("usdt_attached_sites", &[("definition", "a")]), 2.0);
    // One HELP and TYPE per family, whatever the number of definitions.
    for family in [
        "usdt_span_duration_seconds",
        "usdt_spans_total",
        "usdt_definition_up",
        "process_cpu_seconds_total",
    ] {
        assert_eq!(
            m.text.matches(&format!("# TYPE {family} ")).count(),
            1,
            "{family}"
        );
    }
    assert_eq!(m.find("process_cpu_seconds_total", &[]).len(), 1);
    // The missing binary is retried every second (retry-seconds), with a line each time.
    d.wait_log("[missing] cannot attach: ", Duration::from_secs(1));
    let first_retry = d
        .log
        .iter()
        .filter(|l| l.contains("[missing] cannot attach"))
        .count();
    let deadline = Instant::now() + Duration::from_secs(10);
    while d
        .log
        .iter()
        .filter(|l| l.contains("[missing] cannot attach"))
        .count()
        < first_retry + 2
    {
        assert!(Instant::now() < deadline, "no retries: {:#?}", d.log);
        let (lines, _) = d.stderr.until(deadline, |l| l.contains("[missing]"));
        d.log.extend(lines);
    }
    assert!(
        d.log.iter().any(|l| l.contains("[missing] cannot attach: ")
            && l.contains("retrying in 1s")
            && l.contains("not-built-yet/serve_load")),
        "{:#?}",
        d.log
    );

    // More spans: the same series go on counting.
    run(&a, 20);
    let m2 = Metrics::scrape(&addr);
    for (key, fast, slow) in [("0", 20.0, 0.0), ("1", 0.0, 20.0)] {
        check_buckets(
            &m2,
            &[("definition", "a"), ("by", "arg1"), ("key", key)],
            fast,
            slow,
        );
    }
    // Nothing went backwards between the scrapes (gauges aside).
    for s in &m.samples {
        if s.name.starts_with("usdt_attached") || s.name == "usdt_definition_up" {
            continue;
        }
        let now = m2
            .samples
            .iter()
            .find(|x| x.name == s.name && x.labels == s.labels)
            .unwrap_or_else(|| panic!("{s:?} gone"));
        assert!(now.value >= s.value, "{s:?} then {}", now.value);
    }

    // SIGHUP with "b" removed and "c" added; "a" and "missing" unchanged.
    std::fs::write(
        &config,
        format!(
            "{head}{def_a}{def_missing}{}",
            definition("c", &c, "prometheus-buckets = 2")
        ),
    )
    .expect("config");
    d.signal(SIGHUP);
    d.wait_log(
        "[b] stopped (removed from the config)",
        Duration::from_secs(30),
    );
    d.wait_log("[c] attached: Attached 2 probe sites", ATTACH_TIMEOUT);
    d.wait_log("reloaded ", Duration::from_secs(30));
    run(&c, 10);
    let m3 = Metrics::scrape(&addr);
    eprintln!("after SIGHUP:\n{}", m3.text);
    assert_eq!(
        m3.definitions(),
        ["a", "c"].iter().map(|s| s.to_string()).collect()
    );
    assert!(m3
        .find("usdt_definition_up", &[("definition", "b")])
        .is_empty());
    // "a" kept running and kept its counts.
    assert_eq!(m3.one("usdt_spans_total", &[("definition", "a")]), 40.0);
    check_buckets(
        &m3,
        &[("definition", "a"), ("by", "arg1"), ("key", "1")],
        0.0,
        20.0,
    );
    check_buckets(
        &m3,
        &[("definition", "c"), ("provider", "sv"), ("span", "job")],
        5.0,
        5.0,
    );
    assert_eq!(m3.one("usdt_definition_up", &[("definition", "c")]), 1.0);
    d.drain();
    assert!(
        !d.log
            .iter()
            .any(|l| l.contains("[a] stopped") || l.contains("[a] detached")),
        "{:#?}",
        d.log
    );
    assert!(
        d.log
            .iter()
            .any(|l| l.contains("reloaded") && l.contains("2 kept, 1 started, 1 stopped")),
        "{:#?}",
        d.log
    );

    // A file that does not check out changes nothing.
    std::fs::write(&config, format!("{head}{def_a}ring-kib = 3\n")).expect("config");
    d.signal(SIGHUP);
    let refused = d.wait_log("reload refused", Duration::from_secs(30));
    assert!(
        refused.contains("serve.toml: definition \"a\": --ring-kib 3: "),
        "{refused}"
    );
    let m4 = Metrics::scrape(&addr);
    assert_eq!(m4.definitions(), m3.definitions());

    // A real Prometheus scrapes the daemon: it sees every definition's series.
    if usdt_trace_tests::markers::have("prometheus") {
        let prom = Prometheus::start(&addr);
        let now = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_secs_f64()
        };
        proc::wait_until("a scrape of the daemon", Duration::from_secs(60), || {
            prom.query("up{job=\"usdt\"} == 1", now()).len() == 1
        });
        let at = now();
        assert_eq!(
            prom.one(
                "usdt_span_duration_seconds_count{definition=\"c\",span=\"job\"}",
                at
            ),
            10.0
        );
        assert_eq!(
            prom.one(
                "sum(usdt_span_duration_seconds_count{definition=\"a\"})",
                at
            ),
            40.0
        );
        let up = prom.query("usdt_definition_up", at);
        assert_eq!(up.len(), 3, "{up:?}");
        assert_eq!(
            prom.one("usdt_definition_up{definition=\"missing\"}", at),
            0.0
        );
    } else {
        eprintln!("skipped the Prometheus scrape: prometheus not installed (scripts/setup.sh)");
    }

    // The missing binary appears: the next retry attaches it, the others untouched.
    let late = dir.join("not-built-yet/serve_load");
    std::fs::create_dir_all(late.parent().expect("dir")).expect("dir");
    std::fs::copy(&c, &late).expect("copy");
    d.wait_log("[missing] attached: Attached 2 probe sites", ATTACH_TIMEOUT);
    run(&late, 4);
    let m5 = Metrics::scrape(&addr);
    assert_eq!(
        m5.one("usdt_definition_up", &[("definition", "missing")]),
        1.0
    );
    check_buckets(&m5, &[("definition", "missing"), ("span", "job")], 2.0, 2.0);
    assert_eq!(m5.one("usdt_spans_total", &[("definition", "a")]), 40.0);

    // SIGTERM: every definition detaches, exit 0.
    d.signal(SIGTERM);
    let st = proc::wait_within(&mut d.child, EXIT_TIMEOUT).expect("daemon did not exit");
    d.drain();
    assert!(st.success(), "{st:?}: {:#?}", d.log);
    for want in [
        "[a] detached",
        "[c] detached",
        "[missing] detached",
        "stopped",
    ] {
        assert!(
            d.log.iter().any(|l| l.contains(want)),
            "{want}: {:#?}",
            d.log
        );
    }
    assert!(
        !d.log.iter().any(|l| l.contains("panicked")),
        "{:#?}",
        d.log
    );
    eprintln!("daemon log:\n{}", d.log.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Linux's signal numbers (the test crate has no libc).
const SIGHUP: i32 = 1;
const SIGTERM: i32 = 15;

fn serve_config(text: &str) -> (PathBuf, std::process::Output) {
    let dir = std::env::temp_dir().join(format!(
        "usdt-trace-serve-bad-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("bad.toml");
    std::fs::write(&path, text).expect("config");
    let out = proc::output_within(
        Command::new(usdt_trace_bin())
            .args(["serve", "--config"])
            .arg(&path),
        Duration::from_secs(30),
    );
    let _ = std::fs::remove_dir_all(&dir);
    (path, out)
}

/// A bad file stops the daemon before it starts: one line, naming the file, the definition
/// and the problem; no root needed (nothing is loaded).
#[test]
fn bad_configs_are_one_line_errors() {
    let head =
        "listen = \"127.0.0.1:1\"\n[[definition]]\nname = \"web\"\ntargets = [\"/bin/true\"]\n";
    for (text, want) in [
        (
            format!("{head}by = \"nonsense\"\n"),
            "definition \"web\": --by \"nonsense\"",
        ),
        (
            format!("{head}max-keys = 0\n"),
            "definition \"web\": --max-keys 0",
        ),
        (
            format!("{head}filter = \"arg1 >\"\n"),
            "definition \"web\": --filter",
        ),
        (
            format!("{head}json = true\n"),
            "definition \"web\": json: unknown field `json`",
        ),
        (
            format!("{head}[[definition]]\nname = \"web\"\npids = [1]\n"),
            "definition \"web\": defined twice",
        ),
        (
            "listen = \"127.0.0.1:1\"\n".to_string(),
            "no [[definition]]",
        ),
        ("listen = [\n".to_string(), "line 1"),
    ] {
        let (path, out) = serve_config(&text);
        let line = single_error_line(&out);
        assert!(
            line.starts_with(&format!("usdt-trace: error: {}: ", path.display())),
            "{line}"
        );
        assert!(line.contains(want), "{line:?} lacks {want:?}");
        assert_eq!(out.status.code(), Some(1), "{line}");
    }
}

/// `--check` says what a good file defines and exits 0; a missing file is one line.
#[test]
fn check_a_config() {
    let dir = std::env::temp_dir().join(format!("usdt-trace-serve-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("serve.toml");
    std::fs::write(
        &path,
        "listen = \"127.0.0.1:9435\"\n[[definition]]\nname = \"web\"\ntargets = [\"/bin/true\"]\n[[definition]]\nname = \"db\"\npids = [1]\nby = \"comm\"\n",
    )
    .expect("config");
    let out = proc::output_within(
        Command::new(usdt_trace_bin())
            .args(["serve", "--check", "--config"])
            .arg(&path),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!(
            "{}: ok: listen 127.0.0.1:9435, 2 definitions: web, db",
            path.display()
        )
    );
    let out = proc::output_within(
        Command::new(usdt_trace_bin())
            .args(["serve", "--check", "--config"])
            .arg(dir.join("nope.toml")),
        Duration::from_secs(30),
    );
    assert!(single_error_line(&out).contains("nope.toml: cannot read: "));
    let _ = std::fs::remove_dir_all(&dir);
}
