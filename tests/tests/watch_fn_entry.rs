//! A function's entry probe moved past its first instructions, onto the first one the kernel
//! emulates, reads the arguments the first instruction has. The oracle is bpftrace beside it:
//! its `uprobe:OBJ:F` sits on each function's first instruction, and every call our moved
//! probe saw must be a call bpftrace saw, with the same six argument registers on the same
//! thread. Checked on libc under `ls` and on redis-server answering commands, over every
//! function whose entry moves (and that the workload calls).
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use usdt_trace_tests::fn_run::{Redis, REDIS_SERVER};
use usdt_trace_tests::proc::{kill_and_reap, output_within, wait_within, RUN_TIMEOUT};
use usdt_trace_tests::watch::{run, usdt_trace_bin, Watch};

const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

/// (function, tid, six arguments): one call as a tool saw it at the function's entry.
type Call = (String, u64, [u64; 6]);

/// The functions of `obj` whose entry probe, reading arguments, sits past the first
/// instruction (and that are traced at all), as `list --functions --json` says.
fn moved(obj: &str) -> Vec<String> {
    let out = run(&["list", "--functions", "--json", obj]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|f| f["entry"]["skipped"].as_u64().unwrap_or(0) > 0)
        .filter(|f| f["end"]["kind"] != "refused")
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect()
}

/// bpftrace on the first instruction of each of `funcs`, printing every call that `pred`
/// (a bpftrace predicate) admits; started and attached (its BEGIN runs after the probes are).
struct Bpftrace {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// Lines read while waiting for a sentinel.
    seen: Vec<String>,
}

impl Bpftrace {
    fn start(obj: &str, funcs: &[String], pred: &str) -> Bpftrace {
        let probes: Vec<String> = funcs.iter().map(|f| format!("uprobe:{obj}:{f}")).collect();
        let prog = format!(
            "BEGIN {{ printf(\"READY\\n\"); }} {} /{pred}/ {{ printf(\"C %s %d %lu %lu %lu %lu %lu %lu\\n\", probe, tid, arg0, arg1, arg2, arg3, arg4, arg5); }}",
            probes.join(", ")
        );
        let mut child = Command::new("bpftrace")
            .args(["-B", "line", "-e", &prog])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bpftrace (scripts/setup.sh installs it)");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) if l == "READY" => break,
                Ok(_) => {}
                Err(_) => {
                    kill_and_reap(&mut child);
                    panic!("bpftrace did not attach within 120 s");
                }
            }
        }
        Bpftrace {
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Makes sure bpftrace printed every call made so far: its perf buffers are per CPU, and
    /// it drops what it has not read when stopped. On each CPU in turn, `trigger(cpu)` makes a
    /// call that `sentinel` recognises in its line; once bpftrace printed that, everything
    /// that CPU's buffer held before was read.
    fn sync(&mut self, trigger: impl Fn(usize), sentinel: impl Fn(&str) -> bool) {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        for cpu in 0..cpus {
            // Under load bpftrace may lose the sentinel's line too (it says so): try again.
            let seen = (0..10).any(|_| {
                trigger(cpu);
                let deadline = Instant::now() + Duration::from_secs(5);
                while let Ok(l) = self
                    .lines
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                {
                    let done = sentinel(&l);
                    self.seen.push(l);
                    if done {
                        return true;
                    }
                }
                false
            });
            assert!(
                seen,
                "bpftrace never printed the sentinel call on CPU {cpu}"
            );
        }
    }

    /// Stops it (SIGINT) and returns the calls it printed, and how many it says it lost (its
    /// perf buffer overflows under load: `Lost N events`).
    fn stop(mut self) -> (Vec<Call>, usize) {
        usdt_trace_tests::proc::signal(self.child.id(), 2);
        let _ = wait_within(&mut self.child, Duration::from_secs(60));
        kill_and_reap(&mut self.child);
        let mut calls = Vec::new();
        let mut lost = 0;
        let rest = std::iter::from_fn(|| self.lines.recv_timeout(Duration::from_secs(5)).ok());
        for l in std::mem::take(&mut self.seen).into_iter().chain(rest) {
            let w: Vec<&str> = l.split_whitespace().collect();
            if let ["Lost", n, "events"] = w[..] {
                lost += n.parse::<usize>().unwrap_or(0);
                continue;
            }
            if w.len() != 9 || w[0] != "C" {
                continue;
            }
            let func = w[1].rsplit(':').next().unwrap().to_string();
            let n = |i: usize| w[i].parse::<u64>().unwrap();
            calls.push((func, n(2), [n(3), n(4), n(5), n(6), n(7), n(8)]));
        }
        (calls, lost)
    }
}

/// Our span records as calls (name without `fn:`, tid, arguments).
fn ours(records: &[Value]) -> Vec<Call> {
    records
        .iter()
        .filter(|r| r["type"] == "span")
        .map(|r| {
            let args: Vec<u64> = r["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_u64().unwrap())
                .collect();
            (
                r["name"].as_str().unwrap().to_string(),
                r["tid"].as_u64().unwrap(),
                args.try_into().unwrap(),
            )
        })
        .collect()
}

/// Every call we saw is one bpftrace saw (as many times at least), but for as many as bpftrace
/// says it lost, and there were enough of them, over enough functions, to mean something.
fn same_calls(
    what: &str,
    ours: &[Call],
    (theirs, lost): (Vec<Call>, usize),
    min_calls: usize,
    min_funcs: usize,
) {
    let mut left: HashMap<&Call, usize> = HashMap::new();
    for c in &theirs {
        *left.entry(c).or_default() += 1;
    }
    let mut missing = Vec::new();
    for c in ours {
        match left.get_mut(c) {
            Some(n) if *n > 0 => *n -= 1,
            _ => missing.push(c),
        }
    }
    let funcs: std::collections::BTreeSet<&str> = ours.iter().map(|c| c.0.as_str()).collect();
    let alike = ours.len() - missing.len();
    eprintln!(
        "{what}: {alike} calls of {} functions seen by both tools alike ({} by bpftrace, which lost {lost}; {} of ours not among them)",
        funcs.len(),
        theirs.len(),
        missing.len()
    );
    assert!(
        missing.len() <= lost,
        "{what}: {} of our {} calls have arguments bpftrace never saw at the first instruction (it lost {lost}), e.g. {:?}",
        missing.len(),
        ours.len(),
        &missing[..missing.len().min(5)]
    );
    assert!(
        alike >= min_calls && funcs.len() >= min_funcs,
        "{what}: too few calls to compare: {} of {} functions {funcs:?}",
        ours.len(),
        funcs.len()
    );
}

#[test]
#[ignore = "needs root"]
fn libc_entries_past_their_first_instruction_read_what_bpftrace_reads_there() {
    let funcs = moved(LIBC);
    assert!(funcs.len() > 50, "{funcs:?}");
    // The ones `ls -l` calls, and as many others as bpftrace attaches quickly.
    let hot = [
        "__libc_free",
        "_IO_file_xsputn",
        "_IO_do_write",
        "opendir",
        "strverscmp",
        "realpath",
        "freelocale",
        "_IO_doallocbuf",
    ];
    let mut chosen: Vec<String> = funcs
        .iter()
        .filter(|f| hot.contains(&f.as_str()))
        .cloned()
        .collect();
    assert!(chosen.len() >= 4, "{chosen:?}");
    chosen.extend(
        funcs
            .iter()
            .filter(|f| !hot.contains(&f.as_str()))
            .take(60)
            .cloned(),
    );
    // A copy of ls under a name of its own, so that bpftrace counts its calls alone.
    let dir = std::env::temp_dir().join(format!("usdt-fn-entry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ls = dir.join("fnentryls");
    std::fs::copy("/usr/bin/ls", &ls).unwrap();
    let bt = Bpftrace::start(LIBC, &chosen, "comm == \"fnentryls\"");
    let mut args: Vec<String> = vec!["--json".into(), LIBC.into()];
    args.extend(chosen.iter().map(|f| format!("fn:{f}")));
    args.push("-c".into());
    args.push(format!("{} -la /etc", ls.display()));
    let out = output_within(
        Command::new(usdt_trace_bin()).arg("watch").args(&args),
        RUN_TIMEOUT,
    );
    // The sentinel: the same ls once more on each CPU, known by its pid.
    let pid = std::sync::Mutex::new(0u32);
    let mut bt = bt;
    bt.sync(
        |cpu| {
            let c = Command::new("taskset")
                .args(["-c", &cpu.to_string()])
                .arg(&ls)
                .arg("-d")
                .arg("/")
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            *pid.lock().unwrap() = c.id();
            let _ = c.wait_with_output();
        },
        |l| l.split_whitespace().nth(2) == Some(&pid.lock().unwrap().to_string()),
    );
    let theirs = bt.stop();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    same_calls("libc under ls", &ours(&records), theirs, 100, 3);
}

#[test]
#[ignore = "needs root"]
fn redis_entries_past_their_first_instruction_read_what_bpftrace_reads_there() {
    let funcs = moved(REDIS_SERVER);
    let hot = [
        "createStringObject",
        "zmalloc",
        "zfree",
        "sdsfree",
        "lookupKeyReadWithFlags",
        "prepareClientToWrite",
        "string2ll",
        "incrRefCount",
        "listNext",
        "addReplyArrayLen",
        "sdsclear",
        "ztrymalloc_usable",
        "zmalloc_usable",
    ];
    let chosen: Vec<String> = funcs
        .iter()
        .filter(|f| hot.contains(&f.as_str()))
        .cloned()
        .collect();
    assert!(chosen.len() >= 6, "{chosen:?}");
    let srv = Redis::start();
    let cli = |input: &str| srv.cli_script(input);
    let pid = srv.pid().to_string();
    let bt = Bpftrace::start(REDIS_SERVER, &chosen, &format!("pid == {pid}"));
    let mut args: Vec<String> = vec!["-p".into(), pid.clone(), REDIS_SERVER.into()];
    args.extend(chosen.iter().map(|f| format!("fn:{f}")));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let w = Watch::start(&refs);
    let mut cmds = String::new();
    for i in 0..150 {
        cmds.push_str(&format!(
            "SET key:{i} value-{i}\nGET key:{i}\nINCR ctr\nRPUSH list v{i}\n"
        ));
    }
    cmds.push_str("LRANGE list 0 -1\n");
    let replies = cli(&cmds);
    assert_eq!(
        replies.lines().filter(|l| *l == "OK").count(),
        150,
        "{replies}"
    );
    let out = w.stop();
    // The sentinel: redis moved to each CPU in turn, then asked to store a value of a size
    // nothing else allocates (its allocation's size argument, give or take the header).
    let mut bt = bt;
    let big = "x".repeat(12345);
    bt.sync(
        |cpu| {
            let st = Command::new("taskset")
                .args(["-p", "-c", &cpu.to_string(), &pid])
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(st.success());
            assert_eq!(cli(&format!("SET sentinel {big}\n")).trim(), "OK");
        },
        |l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() == 9
                && w[1].contains("malloc")
                && w[3]
                    .parse::<u64>()
                    .is_ok_and(|n| (12345..12400).contains(&n))
        },
    );
    let theirs = bt.stop();
    drop(srv);
    assert!(out.status.success(), "{}", out.stderr);
    same_calls("redis-server", &ours(&out.records), theirs, 300, 4);
}
