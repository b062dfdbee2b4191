//! The `fault` kind of wait: a thread that sleeps uninterruptibly outside any syscall is waiting
//! for a page fault to be served. `tests/testprogs/why_scen.c`'s `fault` mode maps a file on a
//! block device with `MADV_RANDOM`, drops its pages from the page cache before each span, and
//! touches one byte in each of P pages inside the span: P major faults, each reading one page
//! from the device. It prints its own truth per span: the thread's major faults and voluntary
//! context switches (its sleeps) in the touching loop (`getrusage(RUSAGE_THREAD)`: `ru_majflt`,
//! `ru_nvcsw`) and the time in the loop.
//!
//! Each major fault that made the thread sleep is one `fault` wait, so a span has at most as
//! many as the program counted, and at most as many as it slept; over a run, at least 90% of
//! its sleeps (the loop does nothing else that sleeps: here the two were equal in every run);
//! the time is within the touching loop's; none of it is filed as `disk` (the thread is in no
//! syscall). A fault the host serves before the thread sleeps makes no wait (the thread's own
//! count of sleeps says so: beside a CPU hog once 1 sleep for 640 faults): when the tool saw
//! fewer than 90% of the faults, the test says so and skips the count against the faults, as
//! the disk tests do.
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use usdt_trace_tests::{testprogs, watch};

/// One run at a time: each drops the pages of the same file.
static SERIAL: Mutex<()> = Mutex::new(());

/// One span's truth: (major faults, voluntary switches, ns in the touching loop).
fn truths(stderr: &str) -> Vec<(u64, u64, f64)> {
    stderr
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w[..] {
                ["truth", "fault", "majflt", m, "nvcsw", v, "touch_ns", t, "pages", _] => {
                    Some((m.parse().ok()?, v.parse().ok()?, t.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect()
}

/// A span's `waits` of one kind: (ns, n).
fn wait(s: &Value, kind: &str) -> (f64, u64) {
    (
        s["waits"][kind]["ns"].as_u64().unwrap_or(0) as f64,
        s["waits"][kind]["n"].as_u64().unwrap_or(0),
    )
}

/// `why_scen fault FILE N P` under `watch --json`, its records kept as `why_LABEL.ndjson`.
fn run(file: &std::path::Path, n: usize, pages: u64, label: &str) -> (PathBuf, watch::Output) {
    let bin = testprogs::build_c("why_scen", &["-O2", "-pthread"]);
    let cmd = format!("{} fault {} {n} {pages}", bin.display(), file.display());
    let out = watch::Watch::start(&["-c", &cmd]).finish();
    assert!(out.status.success(), "watch failed: {}", out.stderr);
    assert_eq!(out.summary()["lost"], 0, "{}", out.summary());
    assert_eq!(out.spans().len(), n, "{:?}", out.records);
    assert_eq!(truths(&out.stderr).len(), n, "{}", out.stderr);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("why_{label}.ndjson"));
    let text: String = out.records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&path, text).expect("write the run");
    (path, out)
}

/// Checks every span against the program's truth; returns the share of its major faults the
/// tool saw as waits over the run.
fn check_faults(out: &watch::Output) -> f64 {
    let (mut waits, mut faults, mut sleeps) = (0, 0, 0);
    for (s, (majflt, nvcsw, touch_ns)) in out.spans().into_iter().zip(truths(&out.stderr)) {
        let (ns, n) = wait(s, "fault");
        // Each major fault sleeps at most once: as many waits as faults, or fewer (served
        // before the thread slept); and each wait is one of the thread's sleeps.
        assert!(
            n <= majflt,
            "{n} fault waits for {majflt} major faults: {s}"
        );
        assert!(n <= nvcsw, "{n} fault waits for {nvcsw} sleeps: {s}");
        // Asleep only inside the touching loop, which also holds the faults' CPU time.
        assert!(
            ns <= touch_ns,
            "{ns} ns of fault waits, {touch_ns} ns in the touching loop: {s}"
        );
        // Not in a syscall: nothing of it is the disk's.
        assert_eq!(wait(s, "disk"), (0.0, 0), "{s}");
        // Nested in io, as disk is.
        let io = s["io_ns"].as_u64().unwrap() as f64;
        assert!(ns <= io, "{s}");
        waits += n;
        faults += majflt;
        sleeps += nvcsw;
    }
    eprintln!(
        "the tool saw {waits} fault waits for {faults} major faults, in which the thread slept \
         {sleeps} times"
    );
    // The sleeps the thread counted in the loop are its faults' (nothing else there sleeps):
    // the tool must see them, whether or not the host made every fault sleep.
    assert!(
        waits as f64 >= 0.9 * sleeps as f64,
        "{waits} fault waits for {sleeps} sleeps in the touching loop"
    );
    waits as f64 / faults.max(1) as f64
}

#[test]
#[ignore = "needs root"]
fn major_faults_are_fault_waits_within_the_programs_count_and_time() {
    let Some(file) = testprogs::disk_file(Path::new(env!("CARGO_TARGET_TMPDIR")), "why_fault.dat")
    else {
        eprintln!("skipped in major_faults_are_fault_waits_within_the_programs_count_and_time: no writable directory on a block device (only tmpfs)");
        return;
    };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_, out) = run(&file, 10, 64, "fault64");
    let faults: u64 = truths(&out.stderr).iter().map(|t| t.0).sum();
    assert!(
        faults >= 10 * 32,
        "the pages were not dropped: {faults} major faults"
    );
    let seen = check_faults(&out);
    if seen < 0.9 {
        eprintln!(
            "skipped in major_faults_are_fault_waits_within_the_programs_count_and_time: the tool saw {:.0}% of the major faults wait \
             (the rest were served without the thread sleeping; its sleeps were checked)",
            100.0 * seen
        );
    }
}

/// Four times the faults per span, each as long: `diff` names more page faults, not more I/O
/// (no disk wait) and not slower ones.
#[test]
#[ignore = "needs root"]
fn four_times_the_faults_is_more_page_faults() {
    let Some(file) = testprogs::disk_file(Path::new(env!("CARGO_TARGET_TMPDIR")), "why_fault.dat")
    else {
        eprintln!("skipped in four_times_the_faults_is_more_page_faults: no writable directory on a block device (only tmpfs)");
        return;
    };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (base, bout) = run(&file, 20, 32, "fault32");
    let (after, aout) = run(&file, 20, 128, "fault128");
    // The verdict weighs more waits against longer ones, so it needs most faults seen, not
    // 90%: on this VM, beside a CI run, a run of 32 pages a span once showed 83% (26 to 32 a
    // span), the rest served while the vCPU was stopped. Faults missed in either run move the
    // count ratio (4) by their share, not past "more".
    let (sb, sa) = (check_faults(&bout), check_faults(&aout));
    if sb < 0.75 || sa < 0.75 {
        eprintln!(
            "skipped in four_times_the_faults_is_more_page_faults: the tool saw {:.0}% and {:.0}% of the major faults wait",
            100.0 * sb,
            100.0 * sa
        );
        return;
    }
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
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(v["verdict"]["cause"], "more_faults", "{v}");
    assert!(
        v["verdict"]["words"]
            .as_str()
            .unwrap()
            .contains("major faults per span"),
        "{v}"
    );
    let n = |run: &str| v[run]["waits"]["fault"]["n"].as_f64().unwrap();
    assert!(n("after") >= 2.5 * n("before"), "{v}");
}
