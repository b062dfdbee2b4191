//! Time attribution (on-CPU / run queue / sleep / I/O, waker) against targets whose answer is
//! known: `tests/testprogs/attrib_scen.c` runs one scenario per mode under `watch -c`.
//!
//! Every span is also checked for the invariants `oncpu + steal + offcpu ≈ duration` (1% or
//! 20 µs) and `offcpu == runq + sleep + io`, and against the kernel's own account of its thread, which
//! the target prints around each span (see [`check_truth`]). The target runs at nice -20 in its own autogroup so that other
//! work on a shared machine barely moves the split; the scenarios run one at a time (the
//! contention scenario would otherwise disturb the others on the pinned CPU).
use serde_json::Value;
use std::sync::Mutex;
use usdt_trace_tests::{testprogs, watch};

static SERIAL: Mutex<()> = Mutex::new(());

const MS: f64 = 1e6;

fn num(s: &Value, k: &str) -> f64 {
    s[k].as_u64()
        .unwrap_or_else(|| panic!("span has no numeric {k}: {s}")) as f64
}

#[derive(Debug, Default, Clone, Copy)]
struct Split {
    dur: f64,
    oncpu: f64,
    steal: f64,
    offcpu: f64,
    runq: f64,
    sleep: f64,
    io: f64,
}

impl Split {
    fn of(s: &Value) -> Split {
        Split {
            dur: num(s, "duration_ns"),
            oncpu: num(s, "oncpu_ns"),
            steal: num(s, "steal_ns"),
            offcpu: num(s, "offcpu_ns"),
            runq: num(s, "runq_ns"),
            sleep: num(s, "sleep_ns"),
            io: num(s, "io_ns"),
        }
    }
    fn sum<'a>(spans: impl IntoIterator<Item = &'a Value>) -> Split {
        let mut t = Split::default();
        for s in spans {
            let x = Split::of(s);
            t.dur += x.dur;
            t.oncpu += x.oncpu;
            t.steal += x.steal;
            t.offcpu += x.offcpu;
            t.runq += x.runq;
            t.sleep += x.sleep;
            t.io += x.io;
        }
        t
    }
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "dur {:.2} ms = oncpu {:.2} + steal {:.2} + runq {:.2} + sleep {:.2} + io {:.2} (offcpu {:.2})",
            self.dur / MS,
            self.oncpu / MS,
            self.steal / MS,
            self.runq / MS,
            self.sleep / MS,
            self.io / MS,
            self.offcpu / MS
        )
    }
}

/// oncpu + steal + offcpu ≈ duration (1% or 20 µs, whichever is larger), offcpu = runq +
/// sleep + io.
fn check_invariants(s: &Value) {
    let x = Split::of(s);
    let tol = (x.dur * 0.01).max(20_000.0);
    assert!(
        (x.oncpu + x.steal + x.offcpu - x.dur).abs() <= tol,
        "oncpu + steal + offcpu != duration (tolerance {tol} ns): {x}\n{s}"
    );
    assert_eq!(
        x.offcpu,
        x.runq + x.sleep + x.io,
        "offcpu != runq + sleep + io: {x}\n{s}"
    );
}

/// The kernel's account of a span's thread over a window just wider than the span: its CPU
/// time (CLOCK_THREAD_CPUTIME_ID), its run-queue wait (schedstat run_delay), how many times it
/// got a CPU and how many times it blocked, and its wall time (CLOCK_MONOTONIC), from the
/// target's "truth NAME tid TID cpu_ns N runq_ns M switches S wakeups W wall_ns X in_cpu_ns I"
/// lines (I: the CPU time inside the span, between readings just inside its probes).
#[derive(Debug, Clone, Copy)]
struct Truth {
    cpu: f64,
    /// The CPU time between readings just after the start probe and just before the end
    /// probe: the span's, without the probes' traps.
    in_cpu: f64,
    runq: f64,
    switches: f64,
    wakeups: f64,
    wall: f64,
}

fn truths(out: &watch::Output, name: &str) -> Vec<Truth> {
    out.stderr
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w[..] {
                ["truth", n, "tid", _, "cpu_ns", cpu, "runq_ns", runq, "switches", sw, "wakeups", wk, "wall_ns", wall, "in_cpu_ns", in_cpu]
                    if n == name =>
                {
                    Some(Truth {
                        cpu: cpu.parse().ok()?,
                        in_cpu: in_cpu.parse().ok()?,
                        runq: runq.parse().ok()?,
                        switches: sw.parse().ok()?,
                        wakeups: wk.parse().ok()?,
                        wall: wall.parse().ok()?,
                    })
                }
                _ => None,
            }
        })
        .collect()
}

/// What the target's readings and the probe hits themselves cost outside the span (a pread and
/// a clock read each side).
const WINDOW_SLACK: f64 = 0.1 * MS;
/// Per switch onto a CPU: the kernel's clock for a switch is its runqueue clock, last updated a
/// little before. Measured within ±12 µs per switch (preemptions, no wakeups).
const PER_SWITCH_SLACK: f64 = 0.02 * MS;
/// Per wakeup: when a wakeup preempts the running task the kernel skips the clock update of the
/// switch that follows, so its counters stamp the switch with the time of the wakeup and count
/// the wakeup-to-switch latency as CPU time, not run-queue wait; the tool's timestamps (the same
/// as ftrace's: its split equals the one rebuilt from ftrace's events) file it as run queue.
/// Measured 10-20 µs typically, 150 µs under two CPU hogs; 0.5 ms bounds it with margin and stays
/// well under a misfiled interval (a missed switch-in cost 1-29 ms).
const PER_WAKEUP_SLACK: f64 = 0.5 * MS;

/// Every `name` span against the kernel's account of its thread. One-sided on purpose: time
/// stolen by the hypervisor is on CPU for the tool (wall time) but not CPU time for the kernel,
/// and a preemption between a reading and its probe is run-queue time for the kernel only. So
/// on-CPU can't be less than the CPU time, and run queue can't be more than the kernel's wait.
fn check_truth(out: &watch::Output, name: &str) {
    let spans: Vec<_> = out
        .spans()
        .into_iter()
        .filter(|s| s["name"] == name)
        .collect();
    let truths = truths(out, name);
    assert_eq!(
        spans.len(),
        truths.len(),
        "one truth line per {name} span: {}",
        out.stderr
    );
    for (s, t) in spans.into_iter().zip(truths) {
        let x = Split::of(s);
        let slack = WINDOW_SLACK + PER_SWITCH_SLACK * t.switches + PER_WAKEUP_SLACK * t.wakeups;
        let ctx = format!(
            "{name}: {x}; kernel: cpu {:.2} ms ({:.2} ms inside), runq {:.2} ms, {} switches, {} wakeups; slack {:.2} ms",
            t.cpu / MS,
            t.in_cpu / MS,
            t.runq / MS,
            t.switches,
            t.wakeups,
            slack / MS
        );
        // Against the CPU time read inside the span: the window's also holds the two probes'
        // traps, which a loaded host once made 0.9 ms of CPU around a 50 ms nanosleep whose
        // span itself ran 0.04 ms.
        assert!(
            x.oncpu >= t.in_cpu - slack,
            "on-CPU time lost: less than the thread's CPU time inside the span ({ctx})"
        );
        // Nor more than it, beyond 3% and the same slack: steal is not on-CPU time. (The
        // CPU-burn spans are held to 3% alone, in `cpu_work_ran`. Around a write + fsync
        // the split has filed 1-3 ms of what the kernel counts as run-queue wait as on-CPU,
        // 2 of 13 runs, before and after the run-queue wait began at sched_wakeup: within
        // the slack of its switches and wakeups.)
        assert!(
            x.oncpu <= t.cpu * 1.03 + slack,
            "more on-CPU time than the thread's own CPU clock: steal filed as on-CPU? ({ctx})"
        );
        assert!(
            x.runq <= t.runq + slack,
            "more run-queue time than the kernel's run_delay ({ctx})"
        );
    }
}

/// The one truth line of the `name` span.
fn one_truth(out: &watch::Output, name: &str) -> Truth {
    let t = truths(out, name);
    assert_eq!(t.len(), 1, "one truth line for {name}: {}", out.stderr);
    t[0]
}

/// On-CPU time of a span that only computed (`want` of CPU work): within 3% of the thread's
/// own CPU clock (the kernel's runtime, which leaves the host's steal out, as the tool's
/// on-CPU part does), and at least 90% of the work. On-CPU plus steal is the time it held a
/// CPU as the guest sees it: within 10% of its wall time less its run-queue wait. `/proc/stat`'s
/// steal over the run is printed: the test cannot command the host's steal.
fn cpu_work_ran(name: &str, out: &watch::Output, x: &Split, want: f64) {
    let t = one_truth(out, name);
    let ctx = format!(
        "{x}; kernel: cpu {:.2} ms; host steal in /proc/stat during the run: {:.2} ms",
        t.cpu / MS,
        out.host_steal_ms()
    );
    eprintln!("{name}: {ctx}");
    let got = x.oncpu;
    within(
        "oncpu vs the thread's own CPU clock",
        got,
        t.cpu,
        0.03,
        WINDOW_SLACK,
        &ctx,
    );
    within10(
        "oncpu + steal vs the thread's own wall - runq",
        got + x.steal,
        t.wall - t.runq,
        &ctx,
    );
    assert!(
        got >= 0.9 * want,
        "oncpu {:.2} ms for {:.2} ms of CPU work ({ctx})",
        got / MS,
        want / MS
    );
}

/// The `name` spans (summed, as `x`) against the thread's own clocks, for spans that both
/// compute and sleep: on CPU at least 90% of its CPU time, asleep at least 95% of the sleep it
/// asked for (a nanosleep never ends early), and the two together within 10% of its wall
/// time less its run-queue wait. Steal (a stopped vCPU, on CPU for the tool) and a late timer
/// (asleep for both) then fail nothing, while time filed under the wrong part still does.
fn check_own(
    out: &watch::Output,
    name: &str,
    x: &Split,
    sleep_asked: f64,
    ctx: &dyn std::fmt::Display,
) {
    let t = truths(out, name);
    assert!(!t.is_empty(), "no truth line for {name}: {}", out.stderr);
    let cpu: f64 = t.iter().map(|t| t.cpu).sum();
    let held: f64 = t.iter().map(|t| t.wall - t.runq).sum();
    assert!(
        x.oncpu >= 0.9 * cpu,
        "{name}: oncpu {:.2} ms for {:.2} ms of CPU time ({ctx})",
        x.oncpu / MS,
        cpu / MS
    );
    assert!(
        x.sleep >= 0.95 * sleep_asked,
        "{name}: asleep {:.2} ms for {:.2} ms of nanosleep ({ctx})",
        x.sleep / MS,
        sleep_asked / MS
    );
    within10(
        &format!("{name}: oncpu + sleep + io vs the thread's own wall - runq"),
        x.oncpu + x.sleep + x.io,
        held,
        ctx,
    );
}

/// |got - want| <= `share` of want + `slack` ns.
fn within(what: &str, got: f64, want: f64, share: f64, slack: f64, ctx: &dyn std::fmt::Display) {
    assert!(
        (got - want).abs() <= want * share + slack,
        "{what}: expected {:.3} ms ±{:.0}% (+{:.3} ms), measured {:.3} ms ({ctx})",
        want / MS,
        share * 100.0,
        slack / MS,
        got / MS
    );
}

/// |got - want| <= 10% of want.
fn within10(what: &str, got: f64, want: f64, ctx: &dyn std::fmt::Display) {
    assert!(
        (got - want).abs() <= want * 0.10,
        "{what}: expected {:.2} ms ±10%, measured {:.2} ms ({ctx})",
        want / MS,
        got / MS
    );
}

/// Run one scenario under `watch --json -c` and return its output, checked for the basics.
fn run(args: &str) -> watch::Output {
    let bin = testprogs::build_c("attrib_scen", &["-O2", "-pthread"]);
    let cmd = format!("{} {args}", bin.display());
    let out = watch::Watch::start(&["-c", &cmd]).finish();
    assert!(out.status.success(), "watch failed: {}", out.stderr);
    let sum = out.summary();
    assert_eq!(sum["lost"], 0, "{sum}");
    assert_eq!(sum["unmatched"], 0, "{sum}");
    for s in out.spans() {
        check_invariants(s);
    }
    let mut names: Vec<&str> = out
        .spans()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        check_truth(&out, name);
    }
    out
}

fn only_span<'a>(out: &'a watch::Output, name: &str) -> &'a Value {
    let spans: Vec<_> = out
        .spans()
        .into_iter()
        .filter(|s| s["name"] == name)
        .collect();
    assert_eq!(
        spans.len(),
        1,
        "one {name} span expected: {:?}",
        out.records
    );
    spans[0]
}

#[test]
#[ignore = "needs root"]
fn cpu_bound_alone_is_on_cpu() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = run("cpu 1");
    let x = Split::of(only_span(&out, "cpu"));
    eprintln!("cpu alone: {x}");
    // Not "oncpu ≈ duration": on a loaded machine the kernel itself reports that the thread
    // waited for its CPU (run_delay 8 ms of a 58 ms span at nice -20); check_truth holds the
    // run-queue share to that.
    cpu_work_ran("cpu", &out, &x, 50.0 * MS);
    assert_eq!(x.sleep + x.io, 0.0, "a busy loop never sleeps: {x}");
}

#[test]
#[ignore = "needs root"]
fn cpu_contention_is_half_run_queue() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = run("contend 1");
    let x = Split::of(only_span(&out, "contend"));
    eprintln!("cpu contention: {x}");
    cpu_work_ran("contend", &out, &x, 50.0 * MS);
    let share = x.runq / x.dur;
    assert!(
        (0.30..=0.70).contains(&share),
        "runq should be about half the span, is {:.1}%: {x}",
        share * 100.0
    );
    let tol = (x.dur * 0.01).max(20_000.0);
    assert!(
        (x.oncpu + x.steal + x.runq - x.dur).abs() <= tol,
        "oncpu + runq should be the whole span: {x}"
    );
}

#[test]
#[ignore = "needs root"]
fn nanosleep_is_sleep() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = run("sleep");
    let x = Split::of(only_span(&out, "sleep"));
    eprintln!("nanosleep: {x}");
    within10("sleep vs duration", x.sleep, x.dur, &x);
    // The thread's own account of its sleep: its wall time less its CPU time and its
    // run-queue wait (a loaded host once woke a 50 ms nanosleep 15 ms late: 65.7 ms asleep).
    let t = one_truth(&out, "sleep");
    within10(
        "sleep vs the thread's own wall - cpu - runq",
        x.sleep,
        t.wall - t.cpu - t.runq,
        &x,
    );
    assert!(x.sleep >= 0.95 * 50.0 * MS, "a 50 ms nanosleep: {x}");
    assert_eq!(x.io, 0.0, "{x}");
}

#[test]
#[ignore = "needs root"]
fn mutex_wait_is_sleep_and_the_holder_is_the_waker() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = run("lock");
    let s = only_span(&out, "lock");
    let x = Split::of(s);
    eprintln!("mutex wait: {x}; waker {}", s["waker"]);
    let waiter = s["args"][0].as_u64().expect("waiter tid");
    let holder = s["args"][1].as_u64().expect("holder tid");
    assert_eq!(s["tid"], waiter, "{s}");
    assert_ne!(waiter, holder);
    within10("sleep vs duration", x.sleep, x.dur, &x);
    assert!(x.dur >= 40.0 * MS, "the holder keeps the lock ~50 ms: {x}");
    assert_eq!(
        s["waker"]["tid"], holder,
        "the waker of the longest off-CPU interval must be the lock holder: {s}"
    );
    assert_eq!(s["waker"]["pid"], s["pid"], "{s}");
    assert!(
        num(&s["waker"], "off_ns") >= 0.9 * x.sleep,
        "the waker's interval is the long wait: {s}"
    );
}

/// A directory on a real block device: the Cargo target's tmp dir, else /var/tmp.
fn block_backed_dir() -> Option<std::path::PathBuf> {
    let candidates = [
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
        std::path::PathBuf::from("/var/tmp"),
    ];
    candidates.into_iter().find(|d| {
        let _ = std::fs::create_dir_all(d);
        let fs = std::process::Command::new("stat")
            .args(["-f", "-c", "%T"])
            .arg(d)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        !fs.is_empty() && !["tmpfs", "ramfs"].contains(&fs.as_str())
    })
}

#[test]
#[ignore = "needs root"]
fn write_and_fsync_shows_io_wait() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dir) = block_backed_dir() else {
        eprintln!("skipped: no writable directory on a block device (only tmpfs)");
        return;
    };
    let out = run(&format!("disk {} 16", dir.display()));
    let s = only_span(&out, "disk");
    let x = Split::of(s);
    eprintln!(
        "16 MB write + fsync in {}: {x}; waker {}",
        dir.display(),
        s["waker"]
    );
    assert!(x.io > 0.0, "fsync must wait in D state (io_ns > 0): {x}");
}

#[test]
#[ignore = "needs root"]
fn three_times_the_work_is_three_times_on_cpu_same_off_cpu() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = run("work 1");
    let spans = out.spans();
    let w1: Vec<_> = spans
        .iter()
        .copied()
        .filter(|s| s["name"] == "w1")
        .collect();
    let w3: Vec<_> = spans
        .iter()
        .copied()
        .filter(|s| s["name"] == "w3")
        .collect();
    assert_eq!((w1.len(), w3.len()), (3, 3), "{:?}", out.records);
    let (a, b) = (Split::sum(w1), Split::sum(w3));
    eprintln!(
        "w1 x3: {a}\nw3 x3: {b}\noncpu ratio {:.3}",
        b.oncpu / a.oncpu
    );
    let ctx = format!("w1 {a} / w3 {b}");
    // Three times the work by the kernel's own CPU clock, and the extra work all on CPU for
    // the tool. (Not the ratio of on-CPU times: the host steals time from a running vCPU, on
    // CPU for the tool, and 10 ms of it in w1's 30 ms once made that ratio 2.26.)
    let cpu = |name: &str| truths(&out, name).iter().map(|t| t.cpu).sum::<f64>();
    let (cpu1, cpu3) = (cpu("w1"), cpu("w3"));
    assert!(
        (2.7..=3.3).contains(&(cpu3 / cpu1)),
        "the program's own CPU time w3/w1 {:.3}: {ctx}",
        cpu3 / cpu1
    );
    assert!(
        b.oncpu - a.oncpu >= 0.9 * (cpu3 - cpu1),
        "the extra work ({:.2} ms of CPU) on CPU: {ctx}",
        (cpu3 - cpu1) / MS
    );
    // The off-CPU time the target asks for is the same; its run-queue time is not (it grows
    // with load and with the time spent on CPU), so compare sleep + I/O.
    within10(
        "sleep + io (w3) vs (w1)",
        b.sleep + b.io,
        a.sleep + a.io,
        &ctx,
    );
    assert!(a.oncpu >= 0.9 * 30.0 * MS, "w1: 3 x 10 ms of work: {ctx}");
    check_own(&out, "w1", &a, 90.0 * MS, &ctx);
    check_own(&out, "w3", &b, 90.0 * MS, &ctx);
}

#[test]
#[ignore = "needs root"]
fn nested_spans_each_get_their_own_split() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = run("nested 1");
    let inner = Split::of(only_span(&out, "inner"));
    let outer = Split::of(only_span(&out, "outer"));
    eprintln!("inner: {inner}\nouter: {outer}");
    check_own(&out, "inner", &inner, 30.0 * MS, &inner);
    assert!(
        inner.oncpu >= 0.9 * 10.0 * MS,
        "inner: 10 ms of work: {inner}"
    );
    check_own(&out, "outer", &outer, 30.0 * MS, &outer);
    assert!(
        outer.oncpu >= 0.9 * 40.0 * MS,
        "outer: 20 + 10 + 10 ms of work: {outer}"
    );
    // The outer span contains the inner one entirely.
    assert!(outer.dur > inner.dur, "outer {outer} inner {inner}");
    assert!(outer.sleep >= inner.sleep && outer.oncpu >= inner.oncpu + 25.0 * MS);
}
