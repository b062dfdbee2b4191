//! Bad input to `watch`: non-zero exit, exactly one `usdt-trace: error:` line, no panic.
//! And a closed stdout (`| head -1`) is not an error.
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use usdt_trace_tests::watch::{run, usdt_trace_bin};
use usdt_trace_tests::watch_util::{build_c, single_error_line};
use usdt_trace_tests::{require_root, testprogs};

fn scratch(name: &str) -> PathBuf {
    let dir = testprogs::cache_dir().join(format!("watch_badinput-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// `usdt-trace watch ARGS --duration 2`: the duration bounds a run that wrongly succeeds.
fn watch_err(args: &[&str]) -> String {
    let mut all = vec!["watch", "--duration", "2"];
    all.extend_from_slice(args);
    let line = single_error_line(&run(&all));
    eprintln!("{args:?} -> {line}");
    line
}

#[test]
fn non_elf_target() {
    let p = scratch("not-elf.txt");
    std::fs::write(&p, "#!/bin/sh\necho hello\n").unwrap();
    let e = watch_err(&[p.to_str().unwrap()]);
    assert!(e.contains("not-elf.txt"), "{e}");
}

#[test]
fn empty_file_and_directory_targets() {
    let p = scratch("empty");
    std::fs::write(&p, "").unwrap();
    watch_err(&[p.to_str().unwrap()]);
    let d = scratch("a-dir");
    std::fs::create_dir_all(&d).unwrap();
    watch_err(&[d.to_str().unwrap()]);
}

#[test]
fn missing_target_file() {
    let e = watch_err(&["/nonexistent/usdt-trace-test/binary"]);
    assert!(e.contains("/nonexistent/usdt-trace-test/binary"), "{e}");
}

fn dead_pid() -> String {
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    (1..max)
        .rev()
        .find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        .unwrap()
        .to_string()
}

#[test]
fn dead_pid_without_target() {
    let pid = dead_pid();
    let e = watch_err(&["-p", &pid]);
    assert!(e.contains(&pid), "{e}");
}

#[test]
fn dead_pid_with_target() {
    let bin = build_c("watch_procs", &["-O2"]);
    let pid = dead_pid();
    let e = watch_err(&["-p", &pid, bin.to_str().unwrap()]);
    assert!(e.contains(&pid), "{e}");
}

#[test]
fn huge_pid_999999() {
    watch_err(&["-p", "999999"]);
}

#[test]
fn pattern_matching_nothing() {
    let bin = build_c("watch_procs", &["-O2"]);
    let e = watch_err(&[bin.to_str().unwrap(), "nosuchprovider:nosuchprobe"]);
    assert!(e.contains("nosuchprovider:nosuchprobe"), "{e}");
}

#[test]
fn span_rule_without_equals() {
    let bin = build_c("watch_procs", &["-O2"]);
    watch_err(&["--span", "x", bin.to_str().unwrap()]);
}

/// A --span rule whose probes exist in no target is silently ignored (the run proceeds with
/// auto-pairing off and no span at all); a pattern that matches nothing is an error, so this
/// should be one too.
#[test]
fn bug_span_rule_naming_missing_probes_is_ignored() {
    let bin = build_c("watch_procs", &["-O2"]);
    watch_err(&[
        "--span",
        "nope__a=nope__b",
        "--no-auto-span",
        bin.to_str().unwrap(),
    ]);
}

#[test]
fn bad_str_rules() {
    let bin = build_c("watch_procs", &["-O2"]);
    let b = bin.to_str().unwrap();
    watch_err(&["--str", "wp:ping", b]);
    watch_err(&["--str", "wp:ping:x", b]);
    watch_err(&["--str", "wp:ping:12", b]);
}

#[test]
fn bad_ring_size() {
    let bin = build_c("watch_procs", &["-O2"]);
    let b = bin.to_str().unwrap();
    watch_err(&["--ring-kib", "3", b]);
    watch_err(&["--ring-kib", "0", b]);
    watch_err(&["--ring-kib", "6", b]);
}

#[test]
fn binary_without_probes() {
    let bin = build_c("watch_noprobes", &["-O2"]);
    let e = watch_err(&[bin.to_str().unwrap()]);
    assert!(e.contains("watch_noprobes"), "{e}");
}

/// `-c` forks, attaches, then lets the child execvp; when exec fails the child `_exit(127)`s and
/// watch prints an empty summary and exits 0, so a typo in -c looks like a quiet program.
#[test]
fn bug_command_that_cannot_run_exits_zero() {
    require_root!();
    let bin = build_c("watch_procs", &["-O2"]);
    let e = watch_err(&["-c", "/nonexistent/usdt-trace-cmd", bin.to_str().unwrap()]);
    assert!(e.contains("/nonexistent/usdt-trace-cmd"), "{e}");
}

#[test]
fn no_target_no_pid_no_command() {
    watch_err(&[]);
}

/// `usdt-trace list BIG | head -1`: the reader goes away; list exits 0 without a message.
#[test]
fn list_into_closed_pipe_exits_zero() {
    let bin = build_c("watch_many", &["-O2"]);
    for json in [false, true] {
        let mut cmd = Command::new(usdt_trace_bin());
        cmd.arg("list");
        if json {
            cmd.arg("--json");
        }
        let mut child = cmd
            .arg(&bin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        // stdout is dropped here: the rest (far more than a pipe buffer) hits EPIPE.
        assert!(!first.is_empty());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "json={json}: {:?} {stderr}",
            out.status
        );
        assert!(stderr.is_empty(), "json={json}: {stderr}");
    }
}

/// `usdt-trace watch --json -c ... | head -1`: exits 0 and still cleans up.
#[test]
fn watch_into_closed_pipe_exits_zero() {
    require_root!();
    let bin = build_c("watch_flood", &["-O2"]);
    let cmd = format!("{} 100000", bin.display());
    let mut child = Command::new(usdt_trace_bin())
        .args(["watch", "--json", "-c", &cmd])
        .arg(&bin)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with('{'), "{first}");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?} {stderr}", out.status);
    assert!(
        !stderr.contains("error") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

/// ELF errors name the descriptor path watch parsed through (`/proc/self/fd/3`) next to the
/// user's path: "x: /proc/self/fd/3: not an ELF file". Attach errors already map it back.
#[test]
fn bug_error_message_names_proc_self_fd() {
    let p = scratch("not-elf-2.txt");
    std::fs::write(&p, "hello\n").unwrap();
    let e = watch_err(&[p.to_str().unwrap()]);
    assert!(!e.contains("/proc/self/fd"), "{e}");
}

/// Without root or CAP_BPF + CAP_PERFMON, `watch` says what is missing in one line (not a map
/// creation error from deep inside the loader).
#[test]
fn watch_without_privileges_says_so() {
    require_root!(); // to be able to drop to another user
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: setpriv missing");
        return;
    }
    let bin = build_c("watch_procs", &["-O2"]);
    // A copy anyone can execute, outside directories only root may enter.
    let dir = std::env::temp_dir().join(format!("usdt-trace-noroot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let tracer = dir.join("usdt-trace");
    std::fs::copy(usdt_trace_bin(), &tracer).expect("copy");
    let target = dir.join("target");
    std::fs::copy(&bin, &target).expect("copy target");
    use std::os::unix::fs::PermissionsExt;
    for p in [&dir, &tracer, &target] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    // A child forked by another test thread while we copied may briefly hold the new file open
    // for writing (until it execs): retry while the exec says "Text file busy".
    let mut tries = 0;
    let out = loop {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&tracer)
            .arg("watch")
            .arg(&target)
            .output()
            .expect("setpriv");
        if tries < 20 && String::from_utf8_lossy(&out.stderr).contains("Text file busy") {
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        }
        break out;
    };
    let _ = std::fs::remove_dir_all(&dir);
    let line = single_error_line(&out);
    assert!(
        line.contains("run as root or grant CAP_BPF and CAP_PERFMON"),
        "{line}"
    );
}
