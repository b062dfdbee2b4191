//! A daemon that keeps up with its targets. One definition names a binary by path, another
//! by process name (tests/testprogs/follow_load.c: N spans per line read, "done N" after).
//! A deploy renames a new build (its probes at other offsets) over the path while a process
//! still runs the old one: the path's definition attaches the new file, keeps counting the
//! old process, and both go into one series; the name's definition traces every process so
//! called, including one running a second file of that name that appears later. Once the
//! old build is deleted and its last process exits, both detach it. Every count is the
//! programs' own, every process exits 0 (nothing harmed), and the series never go back.
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;
use usdt_trace_tests::markers::free_port;
use usdt_trace_tests::proc;
use usdt_trace_tests::serve::{Daemon, Metrics};
use usdt_trace_tests::watch::Watch;
use usdt_trace_tests::watch_util::build_c;

/// Attaching loads and verifies the eBPF programs: slow on a busy machine, never minutes.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(90);
/// A new file is looked for every second and a deleted one reaped every 5 s (`follow`).
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(60);
const SIGTERM: i32 = 15;
/// The process name: at most 15 bytes, so that the command name matches as well.
const NAME: &str = "usdtfollowtst";

/// A follow_load process, driven line by line.
struct Load {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Load {
    fn start(bin: &Path) -> Load {
        let mut child = proc::spawn(
            Command::new(bin)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
        );
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Load {
            child,
            stdin,
            stdout,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Makes `n` spans and waits until the program says it made them.
    fn spans(&mut self, n: u32) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{n}").expect("write");
        stdin.flush().expect("flush");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read");
        assert_eq!(line.trim(), format!("done {n}"), "pid {}", self.pid());
    }

    /// Ends its input and checks that it exited cleanly (no trap mid-instruction).
    fn finish(mut self) {
        drop(self.stdin.take());
        let status = proc::wait_within(&mut self.child, Duration::from_secs(30));
        assert!(
            status.is_some_and(|s| s.success()),
            "pid {}: {status:?}",
            self.pid()
        );
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        proc::kill_and_reap(&mut self.child);
    }
}

/// Puts a copy of `from` at `to` the way deploys do: written beside it, then renamed over
/// it (a new inode at the same path; a process running the old one keeps it).
fn deploy(from: &Path, to: &Path) {
    let tmp = to.with_extension("new");
    std::fs::copy(from, &tmp).expect("copy");
    std::fs::rename(&tmp, to).expect("rename");
}

/// Waits until `n` lines of the daemon's log contain both `a` and `b`.
fn wait_nth(d: &mut Daemon, a: &str, b: &str, n: usize) {
    let deadline = std::time::Instant::now() + FOLLOW_TIMEOUT;
    loop {
        d.drain();
        if d.log
            .iter()
            .filter(|l| l.contains(a) && l.contains(b))
            .count()
            >= n
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not {n} lines with {a:?} and {b:?}: {:#?}",
            d.log
        );
    }
}

fn count(m: &Metrics, def: &str) -> f64 {
    m.one(
        "usdt_span_duration_seconds_count",
        &[("definition", def), ("span", "job")],
    )
}

/// Scrapes until both definitions count what the programs made (the ring of each may still
/// hold the last records); fails with the last scrape after a while.
fn expect_counts(addr: &str, by_path: f64, by_name: f64) -> Metrics {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let m = Metrics::scrape(addr);
        let got = (count(&m, "bypath"), count(&m, "byname"));
        if got == (by_path, by_name) {
            return m;
        }
        // Counts only ever grow toward the programs' own: past them is a wrong number.
        assert!(
            got.0 <= by_path && got.1 <= by_name,
            "counted {got:?}, the programs made ({by_path}, {by_name})\n{}",
            m.text
        );
        assert!(
            std::time::Instant::now() < deadline,
            "counted {got:?}, the programs made ({by_path}, {by_name})\n{}",
            m.text
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[ignore = "needs root"]
fn serve_follows_a_replaced_binary_and_every_process_of_a_name() {
    let old = build_c("follow_load", &[]);
    let new = build_c("follow_load", &["-DVARIANT=37"]);
    let other = build_c("follow_load", &["-DVARIANT=11"]);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("serve_follow.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).expect("mkdir");
    std::fs::create_dir_all(dir.join("b")).expect("mkdir");
    let path = dir.join("a").join(NAME);
    let second = dir.join("b").join(NAME);
    deploy(&old, &path);
    deploy(&other, &second);
    let ino_first = std::fs::metadata(&path).expect("stat").ino();

    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let config = dir.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"{addr}\"\nretry-seconds = 1\n\
             [[definition]]\nname = \"bypath\"\ntargets = [\"{}\"]\npatterns = [\"sv:*\"]\n\
             [[definition]]\nname = \"byname\"\nprocesses = [\"{NAME}\"]\npatterns = [\"sv:*\"]\n",
            path.display()
        ),
    )
    .expect("config");
    let mut d = Daemon::start(&config);
    d.wait_log("[bypath] attached", ATTACH_TIMEOUT);
    // No process of that name yet: refused with the reason, and retried.
    d.wait_log(
        &format!("[byname] cannot attach: --process {NAME}: no process by that name"),
        ATTACH_TIMEOUT,
    );

    // The first process, of the first build: both definitions see it.
    let mut p1 = Load::start(&path);
    d.wait_log("[byname] attached", ATTACH_TIMEOUT);
    p1.spans(10);
    expect_counts(&addr, 10.0, 10.0);

    // A deploy: the path now names a new build; p1 runs on the old one.
    deploy(&new, &path);
    d.wait_log("(a new file at that path)", FOLLOW_TIMEOUT);
    let mut p2 = Load::start(&path);
    d.wait_log(
        &format!("(process {NAME}, pid {})", p2.pid()),
        FOLLOW_TIMEOUT,
    );
    p2.spans(7);
    p1.spans(5);
    let m = expect_counts(&addr, 22.0, 22.0);
    // Both builds attached under the one path: 2 sites each.
    let shown = path.display().to_string();
    let sites = |m: &Metrics| {
        m.one(
            "usdt_object_attached_sites",
            &[("definition", "bypath"), ("object", &shown)],
        )
    };
    assert_eq!(sites(&m), 4.0, "{}", m.text);

    // Another file of the same name, elsewhere: only the name's definition takes it.
    let mut p3 = Load::start(&second);
    d.wait_log(
        &format!("(process {NAME}, pid {})", p3.pid()),
        FOLLOW_TIMEOUT,
    );
    p3.spans(3);
    expect_counts(&addr, 22.0, 25.0);

    // The old build's last process exits: deleted and unmapped, it is detached by both.
    p1.finish();
    let deadline = std::time::Instant::now() + FOLLOW_TIMEOUT;
    for def in ["bypath", "byname"] {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = d.wait_log(&format!("[{def}] Detached"), left);
        assert!(
            line.contains("deleted or replaced, and no process runs it any more"),
            "{line}"
        );
    }
    // The series go on from where they were.
    p2.spans(2);
    p3.spans(1);
    let m = expect_counts(&addr, 24.0, 28.0);
    assert_eq!(sites(&m), 2.0, "{}", m.text);
    for def in ["bypath", "byname"] {
        assert_eq!(
            m.one("usdt_definition_up", &[("definition", def)]),
            1.0,
            "{}",
            m.text
        );
    }
    // The next deploy: written beside the path, it takes the inode the detached first build
    // had (ext4 gives a freed inode to the next file at once), which must not be taken for
    // that build, gone: it is a new file, and traced.
    deploy(&old, &path);
    let reused = std::fs::metadata(&path).expect("stat").ino() == ino_first;
    wait_nth(&mut d, "[bypath] ", "(a new file at that path)", 2);
    let mut p4 = Load::start(&path);
    d.wait_log(
        &format!("(process {NAME}, pid {})", p4.pid()),
        FOLLOW_TIMEOUT,
    );
    p4.spans(4);
    expect_counts(&addr, 28.0, 32.0);
    println!(
        "third build: inode {} the first build's",
        if reused {
            "reused,"
        } else {
            "not reused (the check is weaker),"
        }
    );
    p4.finish();
    p2.finish();
    p3.finish();
    d.drain();
    println!("the daemon's log:\n{}", d.log.join("\n"));
    // A file detached and closed is not then taken for one written in place.
    assert!(
        !d.log.iter().any(|l| l.contains("modified in place")),
        "{:#?}",
        d.log
    );
    d.signal(SIGTERM);
    let status = proc::wait_within(&mut d.child, Duration::from_secs(60));
    assert!(status.is_some_and(|s| s.success()), "daemon: {status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `watch --process NAME` (the command line's form): the executables of the processes so
/// called, a later process of another file of that name included, each span once.
#[test]
#[ignore = "needs root"]
fn watch_traces_every_process_of_a_name() {
    const NAME: &str = "usdtfollowwch";
    let first = build_c("follow_load", &["-DVARIANT=5"]);
    let other = build_c("follow_load", &["-DVARIANT=23"]);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("watch_process.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["a", "b"] {
        std::fs::create_dir_all(dir.join(sub)).expect("mkdir");
    }
    let (a, b) = (dir.join("a").join(NAME), dir.join("b").join(NAME));
    deploy(&first, &a);
    deploy(&other, &b);
    // No such process: one line, exit 1.
    let none = usdt_trace_tests::watch::run(&["watch", "--process", NAME, "sv:*"]);
    let err = String::from_utf8_lossy(&none.stderr);
    assert_eq!(none.status.code(), Some(1), "{err}");
    assert!(
        err.trim().ends_with(
            "no process by that name is running (its command name or its executable's file name)"
        ) && err.trim().lines().count() == 1,
        "{err}"
    );
    let mut p1 = Load::start(&a);
    let mut w = Watch::start(&["--process", NAME, "sv:*"]);
    p1.spans(4);
    let mut p2 = Load::start(&b);
    let line = w
        .wait_stderr(FOLLOW_TIMEOUT, |l| {
            l.contains(&format!("(process {NAME}, pid {})", p2.pid()))
        })
        .expect("the second file attached");
    assert!(line.starts_with("Attached 2 new probe sites"), "{line}");
    p2.spans(3);
    p1.spans(2);
    let mut seen = 0;
    assert!(
        w.wait_for(Duration::from_secs(30), |v| {
            seen += (v["type"] == "span") as u32;
            seen == 9
        }),
        "{seen} spans of 9"
    );
    let pids = (p1.pid(), p2.pid());
    p1.finish();
    p2.finish();
    let out = w.stop();
    let by_pid = |pid: u32| {
        out.spans()
            .iter()
            .filter(|s| s["pid"].as_u64() == Some(pid.into()))
            .count()
    };
    assert_eq!(out.spans().len(), 9, "{}", out.stderr);
    assert_eq!((by_pid(pids.0), by_pid(pids.1)), (6, 3), "{}", out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `watch TARGET 'fn:main'`: a build deployed over the path while tracing gets its function
/// sites as the first did (found in its own symbols), and its run is a span.
#[test]
#[ignore = "needs root"]
fn watch_gives_a_deployed_build_its_function_sites() {
    let first = build_c("follow_load", &["-DVARIANT=3"]);
    let second = build_c("follow_load", &["-DVARIANT=41"]);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("watch_fn_follow.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let path = dir.join("fnfollow");
    deploy(&first, &path);
    let shown = path.display().to_string();
    let mut w = Watch::start(&[&shown, "fn:main"]);
    deploy(&second, &path);
    w.wait_stderr(FOLLOW_TIMEOUT, |l| l.contains("(a new file at that path)"))
        .expect("the new build attached");
    let mut p = Load::start(&path);
    p.spans(1);
    let pid = p.pid();
    p.finish();
    assert!(
        w.wait_for(Duration::from_secs(30), |v| v["type"] == "span"
            && v["name"] == "main"
            && v["pid"].as_u64() == Some(pid.into())),
        "no fn:main span of the new build"
    );
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}
