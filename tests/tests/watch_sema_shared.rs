//! Semaphores of lld's packed layout, which `watch` counts itself (the kernel is given no
//! `ref_ctr_offset` for them), against the kernel log and against other tracers.
//!
//! - The Rust demo server (release, rust-lld, packed) started after a path-wide `watch` attached: the
//!   kernel log gains no `ref_ctr` or `leaking uprobe` line about it, and the request spans
//!   are the requests; again with a second `watch` attached to the server already running.
//! - Two and three tracers starting and stopping in many orders around a process start, as
//!   many rounds as fit in about a minute: while any is attached the semaphores hold exactly
//!   the sum of their counts, each tracer's records are exactly the probe hits made while it
//!   was attached, and they are 0 again once all have gone.
use std::path::PathBuf;
use std::time::{Duration, Instant};
use usdt_trace_tests::kmsg::{inode, KernelLog};
use usdt_trace_tests::markers::{
    self as util, demo_server_release, free_port, rust_lld_dir, start_server,
};
use usdt_trace_tests::watch::{self, Watch};
use usdt_trace_tests::watch_util::{build_c, Target};

fn get(port: u16) {
    let r = util::http_request(
        port,
        "GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, Some(200), "{:?}", r.head);
}

fn request_spans(w: &mut Watch, n: usize, timeout: Duration) -> bool {
    let mut seen = 0;
    w.wait_for(timeout, |r| {
        if r["type"] == "span" && r["name"] == "request" {
            seen += 1;
        }
        seen >= n
    })
}

/// Requests until one shows as a span: the server's semaphores are raised. Returns how many
/// request spans the tracer has shown by then (those sent before the raise fire nothing).
/// Five requests to the server on `port`, their five spans seen by `w`, then `w` stopped; the
/// kernel unregisters as the links close, before watch exits, its log lines with it (a moment
/// for them to be written).
fn five_requests(mut w: Watch, port: u16) -> usdt_trace_tests::watch::Output {
    for _ in 0..5 {
        get(port);
    }
    assert!(
        request_spans(&mut w, 5, Duration::from_secs(30)),
        "5 request spans"
    );
    let out = w.stop();
    std::thread::sleep(Duration::from_millis(200));
    out
}

fn warm_up(w: &mut Watch, port: u16) -> usize {
    let t0 = Instant::now();
    loop {
        get(port);
        if request_spans(w, 1, Duration::from_millis(300)) {
            return 1;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no request span within 20 s: the semaphores were never raised"
        );
    }
}

#[test]
#[ignore = "needs root"]
fn demo_server_started_after_attach_leaks_no_uprobe() {
    // A copy of its own, a new inode each run: a uprobe leaked on the build's inode (by
    // another tracer, or by an earlier usdt-trace) stays until reboot with its semaphore
    // setting, and the kernel refuses any other setting for the same site.
    let dir = std::env::temp_dir().join(format!("usdt-sema-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bin = &dir.join("demo-httpserver");
    std::fs::copy(demo_server_release(), bin).expect("copy");
    // Packed: some probe sits on a file page two PT_LOADs map (the kernel puts a breakpoint
    // in each mapping and, in a process started after attach, takes back more than it
    // counted).
    let elf = util::Elf::read(bin);
    let shared = elf.probes().iter().any(|p| {
        let off = elf.vaddr_to_offset(p.pc).expect("file-backed pc");
        let page = off / 4096;
        elf.segments
            .iter()
            .filter(|s| s.kind == 1 && s.filesz > 0)
            .filter(|s| s.offset / 4096 <= page && page <= (s.offset + s.filesz - 1) / 4096)
            .count()
            > 1
    });
    assert!(shared, "the Rust demo server is lld-packed");
    let ino = inode(bin);
    let mut log = KernelLog::start();
    let root = util::workspace_root().join("demo-httpserver/www");
    let port = free_port();
    let bin_str = bin.to_str().expect("UTF-8 path");

    // A path-wide watch, then the server.
    let mut a = Watch::start(&[bin_str]);
    let a_pid = a.pid();
    let server = start_server(bin, port, Some(&root));
    let warm = warm_up(&mut a, port);
    let out = five_requests(a, port);
    let others_a = log.assert_clean(
        "a watch attached before the server started",
        &[ino],
        &[a_pid],
    );
    assert!(out.status.success(), "{}", out.stderr);
    let requests = out
        .spans()
        .iter()
        .filter(|s| s["name"] == "request")
        .count();
    assert_eq!(
        requests,
        warm + 5,
        "request spans: the requests after the raise"
    );
    assert!(out.stderr.contains("lld's packed layout"), "{}", out.stderr);

    // Again, the server running at attach (and raised and lowered by the first watch).
    let b = Watch::start(&[bin_str]);
    let b_pid = b.pid();
    let out = five_requests(b, port);
    let others = log.assert_clean("a second watch on the same server", &[ino], &[b_pid]);
    assert!(out.status.success(), "{}", out.stderr);
    let requests = out
        .spans()
        .iter()
        .filter(|s| s["name"] == "request")
        .count();
    assert_eq!(
        requests, 5,
        "request spans: a server running at attach is raised at once"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "demo server after attach: {} + 5 and 5 request spans; kernel log: {} lines in all, 0 about inode {ino:#x} (uprobe reference-counting lines by others during the test: {others_a}, then {others})",
        warm,
        log.lines().len()
    );
}

/// tests/testprogs/watch_sema.c linked by rust-lld, packed; a file of its own (no other test
/// traces its inode).
fn packed_sema_bin() -> PathBuf {
    let dir = rust_lld_dir().expect("rustc ships rust-lld (gcc-ld/ld.lld)");
    let b = format!("-B{}", dir.display());
    build_c(
        "watch_sema",
        &[
            "-O2",
            "-fuse-ld=lld",
            &b,
            "-Wl,-z,noseparate-code",
            "-DSEMA_SHARED_TEST=1",
        ],
    )
}

/// One step of a round: a tracer starts or stops, or the process starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Start(usize),
    Stop(usize),
    Process,
}

/// Round `i`'s steps for `k` tracers: starts in one order, stops in another, the process
/// started at one of the k + 1 places among the starts; the orders cycle through every
/// rotation and its reverse, and the process's place through every position, as `i` grows.
fn round(i: usize, k: usize) -> Vec<Step> {
    let rot = |r: usize, rev: bool| -> Vec<usize> {
        let mut v: Vec<usize> = (0..k).map(|j| (j + r) % k).collect();
        if rev {
            v.reverse();
        }
        v
    };
    let starts = rot(i % k, (i / k) % 2 == 1);
    let stops = rot((i / 2) % k, i % 2 == 1);
    let at = (i / (2 * k)) % (k + 1);
    let mut steps: Vec<Step> = starts.iter().map(|&t| Step::Start(t)).collect();
    steps.insert(at, Step::Process);
    // The stops interleave with the last starts in some rounds: a tracer leaving right after
    // another arrived is the case that lost a raise.
    let mut out = Vec::new();
    for s in steps {
        out.push(s);
    }
    for &t in &stops {
        out.push(Step::Stop(t));
    }
    if i % 3 == 2 && k > 1 {
        // Move the first stop just after the start of the tracer it does not stop.
        let first_stop = out.iter().position(|s| matches!(s, Step::Stop(_)));
        if let Some(p) = first_stop {
            let Step::Stop(t) = out[p] else {
                unreachable!()
            };
            let started = out.iter().position(|s| *s == Step::Start(t)).unwrap_or(0);
            let s = out.remove(p);
            out.insert((started + 1).min(p), s);
        }
    }
    out
}

/// Fires per stable state: each gives 3 records per tracer attached (`one` once, `two` at
/// its two sites).
const FIRES: usize = 2;

fn sema_line(n: usize) -> String {
    format!("sema {} {}", n, 2 * n)
}

#[test]
#[ignore = "needs root"]
fn tracers_in_every_order_count_exactly_their_hits() {
    let bin = packed_sema_bin();
    let bin_str = bin.to_str().expect("UTF-8 path").to_string();
    let ino = inode(&bin);
    let mut log = KernelLog::start();
    let t0 = Instant::now();
    let mut rounds = 0;
    let mut tracer_runs = 0;
    let mut pids = Vec::new();
    // Two and three tracers alternately, until about a minute has gone (at least 4 rounds).
    while rounds < 4 || t0.elapsed() < Duration::from_secs(60) {
        let k = 2 + rounds % 2;
        let steps = round(rounds / 2, k);
        let mut tracers: Vec<Option<Watch>> = (0..k).map(|_| None).collect();
        let mut expected = vec![0usize; k];
        let mut outputs: Vec<Option<watch::Output>> = (0..k).map(|_| None).collect();
        let mut target: Option<Target> = None;
        for (n, step) in steps.iter().enumerate() {
            match *step {
                Step::Start(t) => {
                    let w = Watch::start(&[&bin_str]);
                    pids.push(w.pid());
                    tracers[t] = Some(w);
                    tracer_runs += 1;
                }
                Step::Stop(t) => {
                    let w = tracers[t].take().expect("started");
                    let out = w.stop();
                    assert!(out.status.success(), "{}", out.stderr);
                    outputs[t] = Some(out);
                }
                Step::Process => target = Some(Target::spawn(&bin, &[]).0),
            }
            // Back to back with the next step in some rounds: no look, no fire between.
            let next_is_stop = matches!(steps.get(n + 1), Some(Step::Stop(_)));
            if next_is_stop && matches!(step, Step::Start(_)) && rounds % 4 >= 2 {
                continue;
            }
            let Some(t) = target.as_mut() else { continue };
            let attached = tracers.iter().filter(|w| w.is_some()).count();
            // Each tracer attached holds exactly its own count: never lost, never twice. A
            // process started after the last attach is raised within the scan period.
            let want = sema_line(attached);
            let pid = t.pid();
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let got = t.ask("sema");
                if got == want {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "round {rounds} {steps:?} step {n}: pid {pid}: {got}, not {want}, after 10 s"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            for _ in 0..FIRES {
                let fired = t.ask("fire");
                assert_eq!(fired, want.replace("sema", "fired"), "round {rounds}");
            }
            for (e, w) in expected.iter_mut().zip(&tracers) {
                if w.is_some() {
                    *e += 3 * FIRES;
                }
            }
        }
        let mut t = target.expect("the round started its process");
        assert_eq!(
            t.ask("sema"),
            "sema 0 0",
            "round {rounds}: all gone, back to 0"
        );
        let tpid = t.pid() as u64;
        for (i, out) in outputs.into_iter().enumerate() {
            let out = out.expect("stopped");
            let mine = out.events().iter().filter(|e| e["pid"] == tpid).count();
            assert_eq!(
                mine, expected[i],
                "round {rounds} {steps:?}: tracer {i}'s records; stderr: {}",
                out.stderr
            );
            assert!(
                !out.stderr.contains("another writer"),
                "round {rounds}: tracer {i}: {}",
                out.stderr
            );
        }
        assert!(t.quit().success());
        rounds += 1;
    }
    std::thread::sleep(Duration::from_millis(200));
    let others = log.assert_clean("tracers in every order", &[ino], &pids);
    eprintln!(
        "{rounds} rounds ({tracer_runs} tracer runs) in {:.1} s; kernel log: {} lines, none about inode {ino:#x} (uprobe reference-counting lines by others: {others})",
        t0.elapsed().as_secs_f64(),
        log.lines().len()
    );
}

/// Another writer (here the test, through /proc/PID/mem as a tool that does not take the lock
/// would) sets a semaphore the tracer raised back to 0: the tracer notices within its scan
/// period, raises it again, says so on a warning line, and counts it at the end.
#[test]
#[ignore = "needs root"]
fn a_semaphore_lowered_by_another_writer_is_noticed_and_raised_again() {
    use std::os::unix::fs::FileExt;
    let bin = packed_sema_bin();
    let mut log = KernelLog::start();
    let (mut t, _) = Target::spawn(&bin, &[]);
    let mut w = Watch::start(&[bin.to_str().expect("UTF-8 path")]);
    let wpid = w.pid();
    assert_eq!(t.ask("sema"), "sema 1 2");
    let addrs = t.ask("addr");
    let two = addrs
        .split_whitespace()
        .nth(2)
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| panic!("{addrs}"));
    let mem = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{}/mem", t.pid()))
        .expect("/proc/PID/mem");
    mem.write_all_at(&0u16.to_ne_bytes(), two).expect("write");
    assert_eq!(t.ask("sema"), "sema 1 0", "the other writer's 0");
    let line = w.wait_stderr(Duration::from_secs(5), |l| {
        l.contains("another writer lowered it")
    });
    assert!(line.is_some(), "no warning line within 5 s");
    let deadline = Instant::now() + Duration::from_secs(5);
    while t.ask("sema") != "sema 1 2" {
        assert!(Instant::now() < deadline, "not raised again within 5 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(t.ask("fire"), "fired 1 2");
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("wsem:two in process")
            && out
                .stderr
                .contains("1 times one read under this tracer's own count"),
        "{}",
        out.stderr
    );
    assert_eq!(out.events().len(), 3, "{:?}", out.records);
    assert_eq!(t.ask("sema"), "sema 0 0");
    log.assert_clean(
        "a semaphore lowered by another writer",
        &[inode(&bin)],
        &[wpid],
    );
    assert!(t.quit().success());
}

/// A deploy: a new build renamed over the traced path while `watch` runs (as `serve` does
/// for every deploy). The new file is attached beside the old one, its semaphores counted by
/// hand as well, and a server started from it leaves the kernel log as clean as one from the
/// first file.
#[test]
#[ignore = "needs root"]
fn a_deployed_build_is_counted_by_hand_too() {
    let dir = std::env::temp_dir().join(format!("usdt-sema-follow-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let app = dir.join("app");
    let deploy = || {
        let tmp = dir.join(".app.new");
        std::fs::copy(demo_server_release(), &tmp).expect("copy");
        std::fs::rename(&tmp, &app).expect("rename");
    };
    deploy();
    let first = inode(&app);
    let mut log = KernelLog::start();
    let mut w = Watch::start(&[app.to_str().expect("UTF-8 path")]);
    let wpid = w.pid();
    deploy();
    let second = inode(&app);
    assert_ne!(first, second);
    let attached = w.wait_stderr(Duration::from_secs(15), |l| {
        l.starts_with("Attached") && l.contains("new probe site")
    });
    assert!(attached.is_some(), "the deployed build was not attached");
    let root = util::workspace_root().join("demo-httpserver/www");
    let port = free_port();
    let server = start_server(&app, port, Some(&root));
    let warm = warm_up(&mut w, port);
    let out = five_requests(w, port);
    let others = log.assert_clean("a deployed build", &[first, second], &[wpid]);
    drop(server);
    assert!(out.status.success(), "{}", out.stderr);
    let requests = out
        .spans()
        .iter()
        .filter(|s| s["name"] == "request")
        .count();
    assert_eq!(
        requests,
        warm + 5,
        "request spans: the requests after the raise"
    );
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("deployed build: {warm} + 5 request spans; kernel log: {} lines, none about inodes {first:#x}, {second:#x} (others' uprobe lines: {others})", log.lines().len());
}
