//! `usdt-trace diff` on runs whose answer is known: `tests/testprogs/why_scen.c` runs six
//! `why:req` spans per mode under `watch --json -c`; each mode against the `base` run (10 ms
//! of CPU per span) must name its own cause: twice the loop is more work, a hog on the same
//! CPU is CPU contention, a mutex another thread holds is lock contention, nanosleep is timers,
//! O_DIRECT reads are I/O (twice the reads, of 512 KiB or of 64 KiB: more I/O; the same reads
//! beside a flood of direct writes: a busy disk).
//!
//! The kinds of wait are also checked against the program's own clocks: the time it spent
//! inside pthread_mutex_lock, nanosleep and pread, from its `truth` lines.
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use usdt_trace_tests::{testprogs, watch};

/// One scenario at a time: the contention run's hog would disturb the others.
static SERIAL: Mutex<()> = Mutex::new(());

/// Run one mode and keep its span records as NDJSON in the file `why_LABEL.ndjson`.
fn record(mode: &str, label: &str) -> PathBuf {
    record_out(mode, label).0
}

/// The program's own account of one span: ns inside pthread_mutex_lock, nanosleep and pread,
/// the number of preads, and its CPU time inside those calls.
#[derive(Debug, Clone, Copy)]
struct Truth {
    lock: f64,
    sleep: f64,
    pread: f64,
    preads: u64,
    call_cpu: f64,
}

fn truths(stderr: &str) -> Vec<Truth> {
    stderr
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w[..] {
                ["truth", "req", "lock_ns", l, "sleep_ns", s, "pread_ns", p, "preads", n, "call_cpu_ns", c] => {
                    Some(Truth {
                        lock: l.parse().ok()?,
                        sleep: s.parse().ok()?,
                        pread: p.parse().ok()?,
                        preads: n.parse().ok()?,
                        call_cpu: c.parse().ok()?,
                    })
                }
                _ => None,
            }
        })
        .collect()
}

fn record_out(mode: &str, label: &str) -> (PathBuf, watch::Output) {
    let bin = testprogs::build_c("why_scen", &["-O2", "-pthread"]);
    let cmd = format!("{} {mode}", bin.display());
    let out = watch::Watch::start(&["-c", &cmd]).finish();
    assert!(out.status.success(), "watch failed: {}", out.stderr);
    assert_eq!(out.summary()["lost"], 0, "{}", out.summary());
    // `disk FILE N R` names its span count; the other modes run 6.
    let n = match mode.split_whitespace().collect::<Vec<_>>()[..] {
        ["disk", _, n, ..] => n.parse().expect("a span count"),
        _ => 6,
    };
    assert_eq!(out.spans().len(), n, "{:?}", out.records);
    assert_eq!(truths(&out.stderr).len(), n, "{}", out.stderr);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("why_{label}.ndjson"));
    let text: String = out.records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&path, text).expect("write the run");
    (path, out)
}

/// A span's `waits` of one kind: (ns, n).
fn wait(s: &Value, kind: &str) -> (f64, u64) {
    (
        s["waits"][kind]["ns"].as_u64().unwrap_or(0) as f64,
        s["waits"][kind]["n"].as_u64().unwrap_or(0),
    )
}

fn baseline() -> &'static PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| record("base", "base"))
}

/// Every span's kinds of wait against the program's own clocks: the time inside
/// pthread_mutex_lock is the lock wait, inside nanosleep the timer wait, inside pread the disk
/// wait. The time inside the call less the CPU time inside it is off CPU: waiting, or in the
/// run queue after a wakeup (which the program cannot tell apart). So a wait is at most that,
/// and at least that less the span's run-queue time (both give 10% or 0.1 ms).
///
/// The disk is looser: a direct read whose completion comes before the reader sleeps never
/// waits (8 reads made 7 disk waits; once, 16 reads none at all), and in a VM the time the
/// hypervisor takes the CPU away counts as off CPU for the program's clocks but as running
/// for the scheduler (measured 0.3 ms over 8 reads). So per span it is at most the time
/// inside pread, with at most as many waits as reads; over the run, at least half of the
/// off-CPU time less the run queue, and at least half as many waits as reads.
///
/// Returns false when the reads mostly did not make the reader sleep at all (fewer waits than
/// half the reads): on this VM the device sometimes serves direct reads while the vCPU is
/// stopped, so the guest's scheduler sees the reader running (48 reads, 4 waits, and the
/// program's clocks 3.3 ms more off CPU than the scheduler saw). There is then no disk wait to
/// find, and the test says so instead of failing or passing on nothing.
fn check_kinds(out: &watch::Output) -> bool {
    let (mut disk_sum, mut disk_n, mut off_sum, mut preads) = (0.0, 0, 0.0, 0);
    for (s, t) in out.spans().into_iter().zip(truths(&out.stderr)) {
        let runq = s["runq_ns"].as_u64().unwrap() as f64;
        let near = |what: &str, got: f64, inside: f64| {
            // Only one kind of call per mode: the CPU time is that call's.
            let want = if inside > 0.0 {
                inside - t.call_cpu
            } else {
                0.0
            };
            let slack = (0.1 * want).max(100_000.0);
            assert!(
                got <= want + slack && got >= want - runq - slack,
                "{what}: {got} ns waited, the program measured {want} ns off CPU in the call: {t:?} {s}"
            );
        };
        near("lock", wait(s, "lock").0, t.lock);
        near("timer", wait(s, "timer").0, t.sleep);
        let (disk, n) = wait(s, "disk");
        let off = if t.pread > 0.0 {
            t.pread - t.call_cpu
        } else {
            0.0
        };
        // Bounded by the wall time inside pread, not by the off-CPU time: once the
        // scheduler saw 0.8 ms of disk wait where the program's clocks left only 0.5 ms of
        // its 1.5 ms in pread off CPU (1.0 ms of CPU time for 8 reads). Not explained yet.
        assert!(
            disk <= t.pread + 100_000.0,
            "disk: {disk} ns waited, the program measured {} ns in pread: {t:?} {s}",
            t.pread
        );
        // Not `n <= preads`: beside a write flood one read once waited several times (11
        // waits for 8 reads in a span); the time bound above holds whatever the count.
        disk_sum += disk;
        disk_n += n;
        off_sum += (off - runq).max(0.0);
        preads += t.preads;
        if t.lock > 0.0 {
            assert_eq!(wait(s, "lock").1, 1, "one futex wait: {s}");
        }
        // What is named is inside sleep and io.
        let sleep = s["sleep_ns"].as_u64().unwrap() as f64;
        let io = s["io_ns"].as_u64().unwrap() as f64;
        assert!(
            wait(s, "lock").0 + wait(s, "net").0 + wait(s, "timer").0 <= sleep,
            "{s}"
        );
        assert!(wait(s, "disk").0 <= io, "{s}");
    }
    if 2 * disk_n < preads {
        eprintln!(
            "the reads did not wait: {disk_n} disk waits for {preads} preads, {off_sum} ns off \
             CPU in them by the program's clocks"
        );
        return false;
    }
    // The same effect in time: once 173 waits for 320 reads held 9.9 ms of the 25.5 ms the
    // program's clocks left off CPU in them. The kinds cannot be checked on such a run.
    if disk_sum < 0.5 * off_sum - 100_000.0 {
        eprintln!(
            "the reads did not wait: {disk_n} disk waits, {disk_sum} ns, for {preads} preads \
             and {off_sum} ns off CPU in them by the program's clocks"
        );
        return false;
    }
    true
}

/// `usdt-trace diff --json BASE AFTER` for the one span name, and the text form for the log.
fn diff(after: &Path) -> Value {
    diff_files(baseline(), after)
}

fn diff_files(base: &Path, after: &Path) -> Value {
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
    let base = {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        baseline()
    };
    check_against(base, mode, cause, Some(10.0)).expect("no disk reads in this mode")
}

/// `mode` against `base`: the verdict, and a growth of the mean about `grew_ms` when given.
/// None when the reads of a disk mode did not wait (see `check_kinds`).
fn check_against(base: &Path, mode: &str, cause: &str, grew_ms: Option<f64>) -> Option<Value> {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (after, out) = record_out(mode, &mode.replace([' ', '/'], "_"));
    if !check_kinds(&out) {
        return None;
    }
    let v = diff_files(base, &after);
    assert_eq!(v["verdict"]["cause"], cause, "{v}");
    // Each mode adds ~grew_ms to the span, most of it in the one part. Above: beside a CPU
    // hog on a host that steals vCPU time, a nanosleep run once also gained 3.2 ms on CPU
    // (stolen time was on CPU for the tool then; steal is its own part now) and 1.7 ms of run queue: +15.8 ms, 69% of it the
    // timer, the verdict still right.
    let grew = v["delta"]["mean_ns"].as_i64().unwrap() as f64 / 1e6;
    if let Some(want) = grew_ms {
        assert!(grew >= 0.7 * want && grew <= 1.8 * want, "{v}");
    }
    assert!(v["verdict"]["share"].as_f64().unwrap() >= 0.6, "{v}");
    Some(v)
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
fn a_mutex_held_by_another_thread_is_lock_contention() {
    let v = check("lock", "lock_contention");
    assert!(
        v["delta"]["waits_ns"]["lock"].as_i64().unwrap() >= 8_000_000,
        "{v}"
    );
    assert!(
        v["verdict"]["words"]
            .as_str()
            .unwrap()
            .contains("of the time waiting on futexes"),
        "{v}"
    );
}

#[test]
#[ignore = "needs root"]
fn nanosleep_is_sleeping_on_timers() {
    let v = check("sleep", "timer");
    assert!(
        v["delta"]["waits_ns"]["timer"].as_i64().unwrap() >= 8_000_000,
        "{v}"
    );
}

#[test]
#[ignore = "needs root"]
fn twice_the_direct_reads_is_more_io() {
    // 8 reads of 512 KiB and 1 ms of CPU per span, against 32 (twice the reads, 16, once grew
    // the disk time by only 18% on this VM, whose host cache serves a direct read faster when
    // more follow: +27% of the mean, within the noise of a run with one 34 ms span, was "no
    // significant change" before the rank test). 40 spans, as one slow span in 6 (6.3 ms of a
    // 3 ms mean) made the change not significant to the test of the means.
    more_io("twice_the_direct_reads_is_more_io", 8, 32, 512);
}

/// The case: twice the reads of 64 KiB. Each read's ~65 µs of disk wait comes with
/// about as much CPU (the syscall; steal when the host serves it) and, beside a CPU hog, ~160
/// µs of run queue after its wakeup: the disk wait alone was 25–60% of the growth, and the
/// verdict once said CPU contention and 5 times in 25 more work. `diff` counts what grew with
/// the extra waits with the I/O.
#[test]
#[ignore = "needs root"]
fn twice_the_64k_direct_reads_is_more_io() {
    more_io("twice_the_64k_direct_reads_is_more_io", 8, 16, 64);
}

/// `disk FILE 40 BEFORE KIB` against `disk FILE 40 AFTER KIB`: more I/O, its own baseline.
fn more_io(test: &str, reads_before: u32, reads_after: u32, kib: u32) {
    let Some(file) = testprogs::disk_file(Path::new(env!("CARGO_TARGET_TMPDIR")), "why_disk.dat")
    else {
        eprintln!("skipped in {test}: no writable directory on a block device (only tmpfs)");
        return;
    };
    let f = file.display();
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (base, bout) = record_out(
        &format!("disk {f} 40 {reads_before} {kib}"),
        &format!("disk{reads_before}_{kib}k"),
    );
    let (after, aout) = record_out(
        &format!("disk {f} 40 {reads_after} {kib}"),
        &format!("disk{reads_after}_{kib}k"),
    );
    if !check_kinds(&bout) || !check_kinds(&aout) {
        eprintln!("skipped in {test}: the device served the reads without the reader waiting");
        return;
    }
    // Which of "more waits" and "longer waits" grew is only known for reads the tool saw
    // wait. On this VM the host sometimes serves a direct read while the vCPU is stopped, and
    // the guest sees the reader running: once 11.45 waits per span for 16 reads, and the
    // verdict (rightly, for what was seen) said a busier disk. The oracle is the program's
    // own count of reads: the test asks for the verdict when the tool saw nearly all of them.
    let seen = |out: &watch::Output| {
        let waits: u64 = out.spans().iter().map(|s| wait(s, "disk").1).sum();
        let reads: u64 = truths(&out.stderr).iter().map(|t| t.preads).sum();
        waits as f64 / reads.max(1) as f64
    };
    let (sb, sa) = (seen(&bout), seen(&aout));
    if sb < 0.9 || sa < 0.9 {
        eprintln!(
            "skipped in {test}: the tool saw {:.0}% and {:.0}% of the reads wait (the rest were \
             served while the vCPU was stopped)",
            100.0 * sb,
            100.0 * sa
        );
        return;
    }
    let v = diff_files(&base, &after);
    let cause = v["verdict"]["cause"].as_str().unwrap_or_default();
    if cause == "more_io" {
        // The disk waits and what came with them (the syscalls' CPU, the wakeups' run queue).
        assert!(v["verdict"]["share"].as_f64().unwrap() >= 0.5, "{v}");
    } else {
        // Beside a CPU hog, the baseline's spans may wait for a CPU far longer than those of
        // the run with twice the reads (2.6 ms a span against 0.05 once): that run is faster
        // or no different overall, rightly named so, and its doubled reads are said beside
        // the verdict ("also"). Held to it: the run queue fell by more than the I/O grew.
        let part = |p: &str| v["delta"]["parts"][p].as_f64().unwrap();
        let also_io = v["also"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["cause"] == "more_io"));
        assert!(
            also_io
                && ["less_cpu_contention", "no_change", "mixed"].contains(&cause)
                && -part("runq_ns") > part("io_ns"),
            "{v}"
        );
        eprintln!("{test}: the baseline waited longer for a CPU: {cause}, also more I/O");
    }
    let n = |run: &str| v[run]["waits"]["disk"]["n"].as_f64().unwrap();
    assert!(
        n("after") >= 0.75 * f64::from(reads_after) / f64::from(reads_before) * n("before"),
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

/// Processes flooding the device under `dir` with direct writes and fsyncs, killed (their
/// whole process group) and their files removed on drop.
struct Flood {
    children: Vec<std::process::Child>,
    files: Vec<PathBuf>,
}

impl Flood {
    fn start(dir: &Path) -> Flood {
        use std::os::unix::process::CommandExt;
        let mut children = Vec::new();
        let mut files = Vec::new();
        for i in 0..2 {
            let f = dir.join(format!("why_flood{i}.dat"));
            // Rewrites the same 64 MiB, so the disk use stays bounded however long it runs.
            let script = format!(
                "while :; do dd if=/dev/zero of={} bs=1M count=64 oflag=direct conv=fsync status=none; done",
                f.display()
            );
            let c = std::process::Command::new("sh")
                .args(["-c", &script])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .process_group(0)
                .spawn()
                .expect("start the flood");
            children.push(c);
            files.push(f);
        }
        // Let the writes reach the device before the measured run starts.
        std::thread::sleep(std::time::Duration::from_millis(500));
        Flood { children, files }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        for c in &mut self.children {
            // The group: the shell and the dd it is running.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", c.id())])
                .status();
            let _ = c.wait();
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The program's own mean time per pread over a run: (ns per call, calls).
fn pread_per_call(out: &watch::Output) -> (f64, u64) {
    let t = truths(&out.stderr);
    let ns: f64 = t.iter().map(|t| t.pread).sum();
    let n: u64 = t.iter().map(|t| t.preads).sum();
    (ns / n.max(1) as f64, n)
}

/// A busy disk: the same 8 direct reads per span while two other processes flood the device
/// with direct writes and fsyncs. Each read waits longer, not more often: `diff` must say a
/// busier disk, not more I/O. The oracle is the program's own clock: when its reads got at
/// least twice as slow, the disk was busier; a device the flood does not slow has no busy
/// disk to find, and the test says so.
#[test]
#[ignore = "needs root"]
fn the_same_reads_beside_a_write_flood_are_a_busy_disk() {
    let Some(file) = testprogs::disk_file(Path::new(env!("CARGO_TARGET_TMPDIR")), "why_disk.dat")
    else {
        eprintln!("skipped in the_same_reads_beside_a_write_flood_are_a_busy_disk: no writable directory on a block device (only tmpfs)");
        return;
    };
    let f = file.display();
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 40 spans: under the flood some reads take 10 ms, and with 20 spans a mean 3.4 times the
    // quiet one was once within the noise.
    let mode = format!("disk {f} 40 8");
    let (quiet, qout) = record_out(&mode, "disk8_quiet");
    if !check_kinds(&qout) {
        eprintln!("skipped in the_same_reads_beside_a_write_flood_are_a_busy_disk: the device served the reads without the reader waiting");
        return;
    }
    let (busy, bout) = {
        let _flood = Flood::start(file.parent().expect("a directory"));
        record_out(&mode, "disk8_busy")
    };
    let ((q, qn), (b, bn)) = (pread_per_call(&qout), pread_per_call(&bout));
    assert_eq!(qn, bn, "the same reads in both runs");
    if b < 2.0 * q {
        eprintln!("skipped in the_same_reads_beside_a_write_flood_are_a_busy_disk: the flood did not slow the reads ({q:.0} → {b:.0} ns per pread)");
        return;
    }
    if !check_kinds(&bout) {
        eprintln!("skipped in the_same_reads_beside_a_write_flood_are_a_busy_disk: the device served the busy run's reads without the reader waiting");
        return;
    }
    let v = diff_files(&quiet, &busy);
    assert_eq!(v["verdict"]["cause"], "busy_disk", "{v}");
    // Longer waits. (Not a bound on their number: a read waits once or not at all on a quiet
    // device, this VM saw 4.5 waits per span for 8 reads, but beside the flood one read once
    // waited several times.)
    let n = |run: &str| v[run]["waits"]["disk"]["n"].as_f64().unwrap();
    let per = |run: &str| v[run]["waits"]["disk"]["ns"].as_f64().unwrap() / n(run).max(1.0);
    assert!(per("after") >= 2.0 * per("before"), "{v}");
}

/// A poll is a wait on the network only if the network ended it: `epoll_wait` ended by its
/// own 10 ms timeout is a timer wait (as event loops and PostgreSQL's `pg_sleep` sleep), and
/// `poll` on a socket another thread writes to 10 ms later is a network wait. Each against the
/// program's own clock of its waiting call, as `check_kinds` compares the other kinds.
///
/// The timeout is told by the wakeup coming from the timer interrupt. A span whose wakeup the
/// tool did not see (no waker: the switch back in was missed, which on this kernel happens
/// for switches out of the idle task; 1 span in 6 once, beside a CPU hog) keeps its syscall's
/// kind: its wait is net or timer, and its time still matches.
#[test]
#[ignore = "needs root"]
fn a_poll_its_timeout_ended_is_a_timer_wait_and_socket_data_a_network_wait() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (mode, kind, not) in [("poll", "timer", "net"), ("net", "net", "timer")] {
        let (_, out) = record_out(mode, mode);
        let mut told = 0;
        for (s, t) in out.spans().into_iter().zip(truths(&out.stderr)) {
            let want = t.sleep - t.call_cpu;
            let runq = s["runq_ns"].as_u64().unwrap() as f64;
            let slack = (0.1 * want).max(100_000.0);
            let seen = s.get("waker").is_some();
            let (got, n) = if seen || mode == "net" {
                told += 1;
                assert_eq!(wait(s, not), (0.0, 0), "{mode}: no {not} wait: {s}");
                wait(s, kind)
            } else {
                let (a, b) = (wait(s, kind), wait(s, not));
                (a.0 + b.0, a.1 + b.1)
            };
            assert!(
                got <= want + slack && got >= want - runq - slack && n >= 1,
                "{mode}: {kind} {got} ns in {n} waits, the program measured {want} ns off CPU \
                 in its waiting call: {t:?} {s}"
            );
        }
        assert!(
            told >= 1,
            "{mode}: no span's wakeup was seen: {:?}",
            out.records
        );
    }
}
