//! `watch --attach perf`: the per-site perf_event_open(uprobe PMU, ref_ctr_offset) +
//! BPF_LINK_CREATE path, which `auto` never takes on a kernel with uprobe_multi. What only it
//! does is here: one perf link per site, semaphores raised through each event's
//! ref_ctr_offset, `-p PID` among several servers; the scenarios both paths share run through
//! both in `watch_attach_paths.rs`.
//! While `watch` runs, its own file descriptors prove which path it took: `/proc/PID/fdinfo`
//! of a BPF link says `link_type: perf` or `link_type: uprobe_multi`.
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;
use usdt_trace_tests::scenarios;
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, Target};

/// How many BPF links of each uprobe kind process `pid` holds: (perf, uprobe_multi).
fn uprobe_links(pid: u32) -> (usize, usize) {
    let (mut perf, mut multi) = (0, 0);
    let dir = format!("/proc/{pid}/fdinfo");
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let Ok(info) = std::fs::read_to_string(e.expect("fdinfo entry").path()) else {
            continue;
        };
        match info
            .lines()
            .find_map(|l| l.strip_prefix("link_type:"))
            .map(str::trim)
        {
            Some("perf") => perf += 1,
            Some("uprobe_multi") => multi += 1,
            _ => {}
        }
    }
    (perf, multi)
}

/// `watch --attach perf --json ARGS...`, attached.
fn start_perf(args: &[&str]) -> watch::Watch {
    let mut v = vec!["--attach", "perf"];
    v.extend_from_slice(args);
    watch::Watch::start(&v)
}

#[test]
#[ignore = "needs root"]
fn doctor_reports_both_attach_paths() {
    let out = watch::run(&["doctor", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["features"]["privileges"]["value"], "yes");
    assert_eq!(v["features"]["bpf_cookie"]["value"], "yes");
    assert_eq!(v["features"]["ref_ctr_offset"]["value"], "yes");
    // Decided from the running kernel (this one emulates a probed `push %reg`).
    assert_eq!(v["features"]["push_emulate"]["value"], "yes");
    assert_eq!(v["watch"]["attach_perf"]["value"], "perf");
    assert_eq!(v["watch"]["ready"]["value"], "yes", "{v}");
    let text = watch::run(&["doctor"]);
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).expect("utf-8");
    assert!(
        text.lines()
            .any(|l| l.starts_with("--attach perf") && l.contains(" perf ")),
        "{text}"
    );
}

/// `auto` takes uprobe_multi when the kernel has it, `perf` never does.
#[test]
#[ignore = "needs root"]
fn auto_and_perf_take_the_paths_doctor_names() {
    let doctor: Value =
        serde_json::from_slice(&watch::run(&["doctor", "--json"]).stdout).expect("doctor JSON");
    let bin = build_c("watch_smoke", &["-O2", "-DATTACH_PATHS"]);
    let target = bin.to_str().unwrap();
    let w = watch::Watch::start(&[target]);
    let (perf, multi) = uprobe_links(w.pid());
    w.stop();
    if doctor["features"]["uprobe_multi"]["value"] == "yes" {
        assert_eq!(
            (perf, multi),
            (0, 1),
            "auto: one uprobe_multi link for the object"
        );
    } else {
        assert_eq!(
            (perf, multi),
            (3, 0),
            "auto without uprobe_multi: perf links"
        );
    }
    let w = start_perf(&[target]);
    assert_eq!(
        uprobe_links(w.pid()),
        (3, 0),
        "--attach perf: one perf link per site (3 sites)"
    );
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
}

#[test]
#[ignore = "needs root"]
fn perf_semaphores_zero_before_raised_during_zero_after() {
    // Flags of its own: an inode no other test attaches to with another semaphore setting.
    let bin = build_c("watch_sema", &["-O2", "-DATTACH_PERF"]);
    // The kernel raises the semaphores of a running process through each perf event's
    // ref_ctr_offset.
    scenarios::semaphores_zero_raised_zero(&bin, &["--attach", "perf"], |w| {
        assert_eq!(uprobe_links(w.pid()), (3, 0), "one perf link per site")
    });
}

/// Three servers; with -p only the chosen one's events arrive, with and without TARGET.
fn perf_pid_filter(with_target: bool) {
    let bin = build_c("watch_procs", &["-O2", "-DATTACH_PERF"]);
    let mut ts: Vec<Target> = (0..3)
        .map(|_| {
            let (t, ready) = Target::spawn(&bin, &["serve"]);
            assert_eq!(ready, format!("ready {}", t.pid()));
            t
        })
        .collect();
    let pid = ts[1].pid();
    let pid_s = pid.to_string();
    let mut args = vec!["-p", pid_s.as_str()];
    if with_target {
        args.push(bin.to_str().unwrap());
    }
    args.push("wp:ping");
    let mut w = start_perf(&args);
    assert_eq!(uprobe_links(w.pid()), (1, 0), "one site, one process");
    for round in 1..=3 {
        for t in ts.iter_mut() {
            assert_eq!(t.ask("fire"), format!("fired {round}"));
        }
    }
    assert!(
        w.wait_for(Duration::from_secs(5), |r| r["pid"] == pid as u64
            && r["args"][1] == 3)
    );
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    let args: Vec<&Value> = out.events().iter().map(|e| &e["args"]).collect();
    let p = pid as u64;
    assert_eq!(args, [&json!([p, 1]), &json!([p, 2]), &json!([p, 3])]);
    assert!(out.events().iter().all(|e| e["pid"] == p));
    for t in ts {
        assert!(t.quit().success());
    }
}

#[test]
#[ignore = "needs root"]
fn perf_pid_filter_with_target() {
    perf_pid_filter(true);
}

#[test]
#[ignore = "needs root"]
fn perf_pid_filter_without_target() {
    perf_pid_filter(false);
}

/// An explicit mode is honoured or refused in one line, never silently replaced.
#[test]
fn unknown_attach_mode_is_a_usage_error() {
    let out = Command::new(watch::usdt_trace_bin())
        .args(["watch", "--attach", "kprobe", "/bin/true"])
        .output()
        .expect("run usdt-trace");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid value 'kprobe'"), "{stderr}");
    assert!(stderr.contains("auto, multi, perf"), "{stderr}");
}
