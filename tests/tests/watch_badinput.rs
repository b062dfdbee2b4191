//! Bad input to `watch`: non-zero exit, exactly one `usdt-trace: error:` line, no panic.
//! And a closed stdout (`| head -1`) is not an error.
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use usdt_trace_tests::proc::{self, Lines};
use usdt_trace_tests::testprogs;
use usdt_trace_tests::watch::{run, usdt_trace_bin};
use usdt_trace_tests::watch_util::{build_c, single_error_line};

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

/// A --span rule whose probes exist in no target is an error, like a pattern that matches
/// nothing (it used to be ignored silently: the run went on with auto-pairing off and no span).
#[test]
fn span_rule_naming_missing_probes_is_an_error() {
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

/// `-c` forks, attaches, then lets the child execvp; when exec fails watch says so and exits
/// non-zero (it used to print an empty summary and exit 0, so a typo in -c looked like a quiet
/// program).
#[test]
#[ignore = "needs root"]
fn command_that_cannot_run_exits_nonzero() {
    let bin = build_c("watch_procs", &["-O2"]);
    let e = watch_err(&["-c", "/nonexistent/usdt-trace-cmd", bin.to_str().unwrap()]);
    assert!(e.contains("/nonexistent/usdt-trace-cmd"), "{e}");
}

#[test]
fn no_target_no_pid_no_command() {
    watch_err(&[]);
}

/// Runs `cmd`, reads one stdout line, closes stdout (like `| head -1`), and returns the exit
/// status, that line and all of stderr.
fn first_line_then_close(cmd: &mut Command) -> (std::process::ExitStatus, String, String) {
    let mut child = proc::spawn(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let mut stderr = Lines::new(child.stderr.take().expect("stderr"));
    // The rest of stdout (far more than a pipe buffer) hits EPIPE.
    let first = match proc::first_line_then_close(
        child.stdout.take().expect("stdout"),
        proc::RUN_TIMEOUT,
    ) {
        Ok(line) => line,
        Err(e) => {
            proc::kill_and_reap(&mut child);
            panic!("first stdout line: {e:?}");
        }
    };
    let status = proc::wait_within(&mut child, proc::RUN_TIMEOUT);
    let (err, _) = stderr.rest_until(std::time::Instant::now() + Duration::from_secs(10));
    let Some(status) = status else {
        proc::kill_and_reap(&mut child);
        panic!(
            "no exit within {:?} after stdout closed: {err:?}",
            proc::RUN_TIMEOUT
        );
    };
    (status, first, err.join("\n"))
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
        let (status, first, stderr) = first_line_then_close(cmd.arg(&bin));
        assert!(!first.is_empty());
        assert!(status.success(), "json={json}: {status:?} {stderr}");
        assert!(stderr.is_empty(), "json={json}: {stderr}");
    }
}

/// `usdt-trace watch --json -c ... | head -1`: exits 0 and still cleans up.
#[test]
#[ignore = "needs root"]
fn watch_into_closed_pipe_exits_zero() {
    let bin = build_c("watch_flood", &["-O2"]);
    let cmd = format!("{} 100000", bin.display());
    let (status, first, stderr) = first_line_then_close(
        Command::new(usdt_trace_bin())
            .args(["watch", "--json", "-c", &cmd])
            .arg(&bin),
    );
    assert!(first.starts_with('{'), "{first}");
    assert!(status.success(), "{status:?} {stderr}");
    assert!(
        !stderr.contains("error") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

/// ELF errors name the user's path, not the descriptor path watch parsed through (they used to
/// say "x: /proc/self/fd/3: not an ELF file").
#[test]
fn elf_error_names_the_users_path_not_proc_self_fd() {
    let p = scratch("not-elf-2.txt");
    std::fs::write(&p, "hello\n").unwrap();
    let e = watch_err(&[p.to_str().unwrap()]);
    assert!(!e.contains("/proc/self/fd"), "{e}");
}

/// Without root or CAP_BPF + CAP_PERFMON, `watch` says what is missing in one line (not a map
/// creation error from deep inside the loader).
#[test]
#[ignore = "needs root"]
fn watch_without_privileges_says_so() {
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
        let out = proc::output_within(
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&tracer)
                .arg("watch")
                .arg(&target),
            proc::RUN_TIMEOUT,
        );
        if tries < 20 && String::from_utf8_lossy(&out.stderr).contains("Text file busy") {
            tries += 1;
            std::thread::sleep(Duration::from_millis(50));
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
