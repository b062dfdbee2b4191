//! `usdt-trace serve` with least privilege: the daemon runs as `nobody` with only the
//! capabilities docs/always-on.md ("Least privilege") and packaging/usdt-trace.service list
//! (`setpriv`: the same uid change, ambient and bounding sets a systemd unit's `User=`,
//! `AmbientCapabilities=` and `CapabilityBoundingSet=` make), over programs run by a third
//! user (uid 4242, neither root nor the daemon's):
//!
//! - `path` traces by `targets` a build only its owner (root) may read (mode 0711: others
//!   may run it, not read it): CAP_DAC_READ_SEARCH;
//! - `pid` traces by `pids` a process of that other user: CAP_SYS_PTRACE (its
//!   /proc/PID/root, through which the daemon opens what the process maps);
//! - `byname` traces that process's program by `processes` (its name): CAP_SYS_PTRACE too
//!   (its /proc/PID/exe);
//! - all load eBPF programs and attach uprobes: CAP_BPF and CAP_PERFMON.
//!
//! Semaphores (is-enabled probes) need nothing more: the kernel raises them through the
//! uprobes' `ref_ctr_offset`, in another user's running process too.
//!
//! With exactly that set each counts the programs' spans exactly. Without any one of them the
//! daemon keeps running, the definitions that need it are down (`usdt_definition_up` 0) with
//! one log line saying what is missing, and the others count as before.
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use usdt_trace_tests::markers::free_port;
use usdt_trace_tests::proc;
use usdt_trace_tests::serve::{Daemon, Metrics};
use usdt_trace_tests::serve_proc as sp;
use usdt_trace_tests::watch::usdt_trace_bin;
use usdt_trace_tests::watch_util::{build_c, Target};

/// Attaching loads and verifies the eBPF programs: slow on a busy machine, never minutes.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(90);
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(30);
const COUNT_DEADLINE: Duration = Duration::from_secs(60);
/// The daemon's user.
const NOBODY: u32 = 65534;
/// The traced programs' user: neither root nor the daemon's.
const OTHER: u32 = 4242;
const PATH_SPANS: u64 = 3;
const PID_SPANS: u64 = 4;

/// What the docs and the unit grant, as setpriv spells them, with each one's bit in
/// /proc/PID/status `CapEff` (linux/capability.h).
const DOCUMENTED: [(&str, u32); 4] = [
    ("bpf", 39),
    ("perfmon", 38),
    ("dac_read_search", 2),
    ("sys_ptrace", 19),
];

/// A work dir every user may enter, with the tracer and the programs copied into it (the
/// build tree may be closed to others), the root-only build at mode 0711.
struct Setup {
    dir: PathBuf,
    tracer: PathBuf,
    public: PathBuf,
    private: PathBuf,
}

fn setup(tag: &str) -> Setup {
    let dir = std::env::temp_dir().join(format!("usdt-trace-caps-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("work dir");
    let mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
    };
    mode(&dir, 0o755);
    let copy = |from: &Path, name: &str, m: u32| {
        let to = dir.join(name);
        std::fs::copy(from, &to).expect("copy");
        mode(&to, m);
        to
    };
    Setup {
        tracer: copy(&usdt_trace_bin(), "usdt-trace", 0o755),
        public: copy(&build_c("serve_restart", &[]), "sr_public", 0o755),
        private: copy(
            &build_c("serve_restart", &["-DVARIANT=1"]),
            "sr_private",
            0o711,
        ),
        dir,
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `setpriv` as `uid` with exactly `caps` (inheritable, ambient and bounding), no groups.
fn setpriv(uid: u32, caps: &[&str]) -> Command {
    let set: String = std::iter::once("-all".to_string())
        .chain(caps.iter().map(|c| format!("+{c}")))
        .collect::<Vec<_>>()
        .join(",");
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(format!("--inh-caps={set}"))
        .arg(format!("--ambient-caps={set}"))
        .arg(format!("--bounding-set={set}"))
        .arg("--");
    c
}

fn have_setpriv() -> bool {
    Command::new("setpriv")
        .arg("--help")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The daemon as `nobody` with `caps`, tracing `path` (the 0711 build) and `pid`.
struct Run {
    daemon: Daemon,
    addr: String,
    target: Target,
    setup: Setup,
}

/// `byname`: with `by_name`, a third definition tracing the `pids` process's program by
/// `processes` (its file's name): the same process, found by a scan of /proc.
fn start(tag: &str, caps: &[&str], by_name: bool) -> Run {
    let setup = setup(tag);
    // The `pids` process, another user's, waiting for a line before it makes its spans.
    let (target, ready) = Target::spawn(
        Path::new("setpriv"),
        &[
            &format!("--reuid={OTHER}"),
            &format!("--regid={OTHER}"),
            "--clear-groups",
            "--",
            setup.public.to_str().expect("utf-8 path"),
            &PID_SPANS.to_string(),
            "wait",
        ],
    );
    assert_eq!(ready, "ready");
    let port = free_port();
    let conf = setup.dir.join("serve.toml");
    std::fs::write(
        &conf,
        format!(
            "listen = \"127.0.0.1:{port}\"\nretry-seconds = 1\n\n\
             [[definition]]\nname = \"path\"\ntargets = [\"{}\"]\npatterns = [\"sr:*\"]\n\n\
             [[definition]]\nname = \"pid\"\npids = [{}]\npatterns = [\"sr:*\"]\n",
            setup.private.display(),
            target.pid()
        ) + if by_name {
            "\n[[definition]]\nname = \"byname\"\nprocesses = [\"sr_public\"]\npatterns = [\"sr:*\"]\n"
        } else {
            ""
        },
    )
    .expect("config");
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let daemon = sp::start(
        setpriv(NOBODY, caps)
            .arg(&setup.tracer)
            .args(["serve", "--config"])
            .arg(&conf),
    );
    Run {
        daemon,
        addr: format!("127.0.0.1:{port}"),
        target,
        setup,
    }
}

impl Run {
    fn wait(&mut self, what: &str) -> String {
        let i = sp::wait_log_from(&mut self.daemon, 0, what, ATTACH_TIMEOUT, |l| {
            l.contains(what)
        });
        self.daemon.log[i].clone()
    }

    /// Runs the 0711 build as the other user to its end.
    fn run_private(&self) {
        let out = proc::output_within(
            setpriv(OTHER, &[])
                .arg(&self.setup.private)
                .arg(PATH_SPANS.to_string()),
            Duration::from_secs(60),
        );
        assert!(out.status.success(), "sr_private as uid {OTHER}: {out:?}");
    }

    /// The `pids` process makes its spans.
    fn go(&mut self) {
        assert_eq!(self.target.ask("go"), "done");
    }

    fn scrape(&self) -> Metrics {
        sp::scrape(&self.addr, SCRAPE_TIMEOUT)
    }

    /// Scrapes until `def` counts `want` spans, then asserts exactly that (and `_count`).
    fn expect_count(&self, def: &str, want: u64) {
        let deadline = Instant::now() + COUNT_DEADLINE;
        loop {
            let m = self.scrape();
            let got = sp::get(&m, "usdt_spans_total", &[("definition", def)]);
            if got == Some(want as f64) || got.is_some_and(|g| g > want as f64) {
                assert_eq!(got, Some(want as f64), "{def}\n{}", m.text);
                let count = sp::get(
                    &m,
                    "usdt_span_duration_seconds_count",
                    &[("definition", def), ("span", "job")],
                );
                assert_eq!(count, Some(want as f64), "{def}: _count\n{}", m.text);
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{def}: usdt_spans_total {got:?}, the programs made {want}\n{}",
                m.text
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn up(&self, def: &str) -> Option<f64> {
        sp::get(&self.scrape(), "usdt_definition_up", &[("definition", def)])
    }

    /// The daemon is still running (nothing crashed) and stops cleanly on SIGTERM.
    fn stop(mut self) {
        assert!(
            matches!(self.daemon.child.try_wait(), Ok(None)),
            "the daemon exited: {:#?}",
            self.daemon.log
        );
        self.daemon.signal(15);
        let st = proc::wait_within(&mut self.daemon.child, Duration::from_secs(60))
            .expect("serve exits after SIGTERM");
        assert!(st.success(), "serve exit status {st:?}");
    }
}

fn names(caps: &[(&str, u32)]) -> Vec<&'static str> {
    DOCUMENTED
        .iter()
        .filter(|(n, _)| caps.iter().any(|(c, _)| c == n))
        .map(|(n, _)| *n)
        .collect()
}

fn documented_but(missing: &str) -> Vec<&'static str> {
    let rest: Vec<(&str, u32)> = DOCUMENTED
        .iter()
        .copied()
        .filter(|(n, _)| *n != missing)
        .collect();
    names(&rest)
}

fn precondition() -> bool {
    assert!(
        proc::is_root(),
        "needs root (run with --include-ignored as root)"
    );
    if !have_setpriv() {
        eprintln!("skipped: setpriv (util-linux) is not installed");
        return false;
    }
    true
}

#[test]
#[ignore = "needs root"]
fn serve_as_nobody_with_the_documented_capabilities_counts_another_users_spans_exactly() {
    if !precondition() {
        return;
    }
    let mut run = start("all", &names(&DOCUMENTED), true);
    // It runs as nobody with exactly these capabilities, none more.
    let pid = run.daemon.child.id();
    sp::wait_log_from(
        &mut run.daemon,
        0,
        "the listening line",
        ATTACH_TIMEOUT,
        |l| l.contains("listening on"),
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |f: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(f))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let want: u64 = DOCUMENTED.iter().map(|(_, bit)| 1u64 << bit).sum();
    for f in ["CapEff:", "CapPrm:", "CapAmb:", "CapBnd:"] {
        assert_eq!(
            u64::from_str_radix(&field(f), 16).expect("hex"),
            want,
            "{f} of the daemon"
        );
    }
    assert!(
        field("Uid:")
            .split_whitespace()
            .all(|u| u == NOBODY.to_string()),
        "Uid: {}",
        field("Uid:")
    );
    println!("daemon: Uid {}, CapEff {}", field("Uid:"), field("CapEff:"));

    let path_line = run.wait("[path] attached:");
    let pid_line = run.wait("[pid] attached:");
    let name_line = run.wait("[byname] attached:");
    println!("{path_line}\n{pid_line}\n{name_line}");
    for _ in 0..2 {
        run.run_private();
    }
    run.go();
    run.expect_count("path", 2 * PATH_SPANS);
    run.expect_count("pid", PID_SPANS);
    run.expect_count("byname", PID_SPANS);
    assert_eq!(run.up("path"), Some(1.0));
    assert_eq!(run.up("pid"), Some(1.0));
    assert_eq!(run.up("byname"), Some(1.0));
    run.stop();
}

#[test]
#[ignore = "needs root"]
fn serve_without_cap_sys_ptrace_says_another_users_pid_needs_it_and_the_rest_still_counts() {
    if !precondition() {
        return;
    }
    let mut run = start("noptrace", &documented_but("sys_ptrace"), true);
    let line = run.wait("[pid] cannot attach:");
    println!("{line}");
    assert!(
        line.contains("cannot open the files process")
            && line.contains("Permission denied")
            && line.contains("CAP_SYS_PTRACE"),
        "{line}"
    );
    // By name: the process is there (its command name is anyone's to read), which file it
    // runs is not.
    let line = run.wait("[byname] cannot attach:");
    println!("{line}");
    assert!(
        // (Other tests' processes of that name may be running too.)
        line.contains("--process sr_public: ")
            && line.contains(" process(es) so called (pid ")
            && line.contains("CAP_SYS_PTRACE"),
        "{line}"
    );
    run.wait("[path] attached:");
    run.run_private();
    run.expect_count("path", PATH_SPANS);
    assert_eq!(run.up("pid"), Some(0.0));
    assert_eq!(run.up("byname"), Some(0.0));
    run.go();
    run.stop();
}

#[test]
#[ignore = "needs root"]
fn serve_without_cap_dac_read_search_says_the_root_only_target_is_denied_and_the_rest_still_counts()
{
    if !precondition() {
        return;
    }
    let mut run = start("nodac", &documented_but("dac_read_search"), false);
    let line = run.wait("[path] cannot attach:");
    println!("{line}");
    let private = run.setup.private.display().to_string();
    assert!(
        line.contains(&format!("{private}: Permission denied")),
        "{line}"
    );
    run.wait("[pid] attached:");
    run.go();
    run.expect_count("pid", PID_SPANS);
    assert_eq!(run.up("path"), Some(0.0));
    run.stop();
}

#[test]
#[ignore = "needs root"]
fn serve_without_cap_bpf_or_cap_perfmon_says_both_are_needed_and_keeps_running() {
    if !precondition() {
        return;
    }
    for missing in ["bpf", "perfmon"] {
        let mut run = start(&format!("no{missing}"), &documented_but(missing), false);
        for def in ["path", "pid"] {
            let line = run.wait(&format!("[{def}] cannot attach:"));
            println!("without {missing}: {line}");
            assert!(
                line.contains(
                    "permission denied loading eBPF programs: run as root or grant CAP_BPF and CAP_PERFMON"
                ),
                "{line}"
            );
        }
        assert_eq!(run.up("path"), Some(0.0));
        assert_eq!(run.up("pid"), Some(0.0));
        run.go();
        run.stop();
    }
}

#[test]
#[ignore = "needs root"]
fn serve_with_cap_bpf_and_cap_perfmon_alone_raises_another_users_semaphores_and_counts_its_events()
{
    if !precondition() {
        return;
    }
    let setup = setup("sema");
    let sema = setup.dir.join("watch_sema");
    std::fs::copy(build_c("watch_sema", &[]), &sema).expect("copy");
    std::fs::set_permissions(&sema, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // Is-enabled probes of a process of another user, running before the daemon attaches.
    let (mut t, ready) = Target::spawn(
        Path::new("setpriv"),
        &[
            &format!("--reuid={OTHER}"),
            &format!("--regid={OTHER}"),
            "--clear-groups",
            "--",
            sema.to_str().expect("utf-8 path"),
        ],
    );
    assert!(ready.starts_with("ready "), "{ready}");
    assert_eq!(t.ask("sema"), "sema 0 0");
    let port = free_port();
    let conf = setup.dir.join("serve.toml");
    std::fs::write(
        &conf,
        format!(
            "listen = \"127.0.0.1:{port}\"\nretry-seconds = 1\n\n\
             [[definition]]\nname = \"sema\"\ntargets = [\"{}\"]\n",
            sema.display()
        ),
    )
    .expect("config");
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut daemon = sp::start(
        setpriv(NOBODY, &["bpf", "perfmon"])
            .arg(&setup.tracer)
            .args(["serve", "--config"])
            .arg(&conf),
    );
    sp::wait_log_from(&mut daemon, 0, "[sema] attached", ATTACH_TIMEOUT, |l| {
        l.contains("[sema] attached:")
    });
    // The kernel raised them (one site on the first semaphore, two on the second).
    assert_eq!(t.ask("sema"), "sema 1 2");
    // Each fire, with both raised, hits the three sites.
    for _ in 0..2 {
        assert_eq!(t.ask("fire"), "fired 1 2");
    }
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + COUNT_DEADLINE;
    loop {
        let m = sp::scrape(&addr, SCRAPE_TIMEOUT);
        let got = sp::get(&m, "usdt_events_total", &[("definition", "sema")]);
        if got == Some(6.0) || got.is_some_and(|g| g > 6.0) || Instant::now() > deadline {
            assert_eq!(got, Some(6.0), "usdt_events_total\n{}", m.text);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    daemon.signal(15);
    let st = proc::wait_within(&mut daemon.child, Duration::from_secs(60))
        .expect("serve exits after SIGTERM");
    assert!(st.success(), "serve exit status {st:?}");
    // Detached: the kernel took them back.
    assert_eq!(t.ask("sema"), "sema 0 0");
}
