//! `usdt-trace diff` on runs whose answer is known: `tests/testprogs/why_scen.c` runs six
//! `why:req` spans per mode under `watch --json -c`; each mode against the `base` run (10 ms
//! of CPU per span) must name its own cause: twice the loop is more work, a hog on the same
//! CPU is CPU contention, a mutex another thread holds is waiting.
use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use usdt_trace_tests::{testprogs, watch};

/// One scenario at a time: the contention run's hog would disturb the others.
static SERIAL: Mutex<()> = Mutex::new(());

/// Run one mode and keep its span records as NDJSON in the file `why_LABEL.ndjson`.
fn record(mode: &str, label: &str) -> PathBuf {
    let bin = testprogs::build_c("why_scen", &["-O2", "-pthread"]);
    let cmd = format!("{} {mode}", bin.display());
    let out = watch::Watch::start(&["-c", &cmd]).finish();
    assert!(out.status.success(), "watch failed: {}", out.stderr);
    assert_eq!(out.summary()["lost"], 0, "{}", out.summary());
    assert_eq!(out.spans().len(), 6, "{:?}", out.records);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("why_{label}.ndjson"));
    let text: String = out.records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&path, text).expect("write the run");
    path
}

fn baseline() -> &'static PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| record("base", "base"))
}

/// `usdt-trace diff --json BASE AFTER` for the one span name, and the text form for the log.
fn diff(after: &PathBuf) -> Value {
    let base = baseline();
    let text = watch::run(&["diff", base.to_str().unwrap(), after.to_str().unwrap()]);
    assert!(text.status.success(), "{text:?}");
    eprintln!("{}", String::from_utf8_lossy(&text.stdout));
    let out = watch::run(&[
        "diff",
        "--json",
        base.to_str().unwrap(),
        after.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["span"], "why:req");
    lines[0].clone()
}

fn check(mode: &str, cause: &str) -> Value {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    baseline();
    let v = diff(&record(mode, mode));
    assert_eq!(v["verdict"]["cause"], cause, "{v}");
    // Each mode adds ~10 ms to a 10 ms span, nearly all of it in the one part.
    let grew = v["delta"]["mean_ns"].as_i64().unwrap();
    assert!((7_000_000..=14_000_000).contains(&grew), "{v}");
    assert!(v["verdict"]["share"].as_f64().unwrap() >= 0.8, "{v}");
    v
}

#[test]
#[ignore = "needs root"]
fn twice_the_loop_is_more_work() {
    check("work", "more_work");
}

#[test]
#[ignore = "needs root"]
fn a_hog_on_the_same_cpu_is_cpu_contention() {
    check("contend", "cpu_contention");
}

#[test]
#[ignore = "needs root"]
fn a_mutex_held_by_another_thread_is_waiting() {
    let v = check("lock", "waiting");
    assert!(
        v["delta"]["parts"]["sleep_ns"].as_i64().unwrap() >= 8_000_000,
        "{v}"
    );
}

#[test]
#[ignore = "needs root"]
fn the_same_program_twice_is_no_change() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    baseline();
    let v = diff(&record("base", "base_again"));
    assert_eq!(v["verdict"]["cause"], "no_change", "{v}");
}
