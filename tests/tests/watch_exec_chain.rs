//! `watch -c SCRIPT`: the command is followed through its execs (the kernel's `#!`, `env`, a
//! version manager's shim) to the program that finally runs, and traced there from its first
//! instruction. The interpreter is `interp`, a C program with the probes; its scripts have none.
use std::path::{Path, PathBuf};
use std::process::Output;
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::build_c;

/// A scratch folder with `script` (N lines after its `#!` line) and `bin/interp`, a bash
/// shim that execs the real interpreter, as pyenv's do.
fn setup(what: &str, shebang: &str, lines: usize) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("usdt-exec-chain-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let script = dir.join("script");
    let body: String = (0..lines).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&script, format!("#!{shebang}\n{body}")).unwrap();
    chmod_x(&script);
    let interp = build_c("interp", &["-O2"]);
    let shim = dir.join("bin/interp");
    std::fs::write(
        &shim,
        format!(
            "#!/usr/bin/env bash\nset -e\nprogram=\"${{0##*/}}\"\nexec {} \"$@\"\n",
            interp.display()
        ),
    )
    .unwrap();
    chmod_x(&shim);
    (dir, script)
}

fn chmod_x(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `watch --json -o FILE -c CMD interp:line` with PATH starting at `path_first`; returns the
/// run, the readiness line and the events' line numbers.
fn watch_script(dir: &Path, cmd: &str, path_first: Option<&Path>) -> (Output, String, Vec<i64>) {
    let recs = dir.join("recs.ndjson");
    let mut c = std::process::Command::new(watch::usdt_trace_bin());
    c.args([
        "watch",
        "--json",
        "-o",
        recs.to_str().unwrap(),
        "-c",
        cmd,
        "interp:line",
    ]);
    if let Some(first) = path_first {
        let path = std::env::var("PATH").unwrap_or_default();
        c.env("PATH", format!("{}:{path}", first.display()));
    }
    let out = usdt_trace_tests::proc::output_within(&mut c, usdt_trace_tests::proc::RUN_TIMEOUT);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let ready = stderr
        .lines()
        .find(|l| l.starts_with("Attached"))
        .unwrap_or("")
        .to_string();
    let lines = std::fs::read_to_string(&recs)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "event")
        .map(|r| r["args"][0].as_i64().unwrap())
        .collect();
    (out, ready, lines)
}

#[test]
#[ignore = "needs root"]
fn a_script_is_traced_in_its_interpreter_from_its_first_line() {
    let interp = build_c("interp", &["-O2"]);
    let (dir, script) = setup("direct", interp.to_str().unwrap(), 300);
    let s = script.to_str().unwrap();
    let (out, ready, lines) = watch_script(&dir, s, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "300 lines\n");
    assert!(
        ready.ends_with(&format!("; -c {s} → {}; Ctrl-C to stop", interp.display())),
        "{ready}"
    );
    assert_eq!(lines, (0..300).collect::<Vec<_>>(), "{stderr}");
}

#[test]
#[ignore = "needs root"]
fn env_and_a_shim_first_on_path_are_followed_to_the_program_they_run() {
    let interp = build_c("interp", &["-O2"]);
    let (dir, script) = setup("shim", "/usr/bin/env interp", 200);
    let s = script.to_str().unwrap();
    // `env interp` finds the shim (first on PATH), which execs bash, which execs interp.
    let (out, ready, lines) = watch_script(&dir, s, Some(&dir.join("bin")));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200 lines\n");
    assert!(ready.contains(&format!("; -c {s} → ")), "{ready}");
    assert!(
        ready.ends_with(&format!("bash → {}; Ctrl-C to stop", interp.display())),
        "{ready}"
    );
    assert_eq!(lines, (0..200).collect::<Vec<_>>(), "{stderr}");
    // With a redirection (run through sh), the same.
    let cmd = format!("{s} > {}", dir.join("out").display());
    let (out, ready, lines) = watch_script(&dir, &cmd, Some(&dir.join("bin")));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("out")).unwrap(),
        "200 lines\n"
    );
    assert!(ready.contains(&format!("; -c {cmd} → ")), "{ready}");
    assert_eq!(lines.len(), 200);
}

#[test]
#[ignore = "needs root"]
fn a_script_whose_programs_have_no_such_probes_is_an_error_naming_what_it_ran() {
    let (dir, script) = setup("none", "/bin/cat", 3);
    let (out, _, _) = watch_script(&dir, script.to_str().unwrap(), None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("exited before running a program with probes matching interp:line (it ran /usr/bin/cat), untraced"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// A script that never reaches a program to trace (here it execs `sleep`, which runs on; one
/// that forks its program is the same to `watch`): after 2 s `watch` says what it is waiting
/// for, and `--duration` ends the wait (and the command) as it ends any tracing, instead of
/// waiting for the script to exit. (`exec`: a forked `sleep` would outlive the shell and hold
/// the output pipes this test reads to their end.)
#[test]
#[ignore = "needs root"]
fn duration_bounds_the_wait_for_a_script_that_never_execs_its_program() {
    let (dir, _) = setup("forks", "/bin/sh", 0);
    let script = dir.join("sleeper");
    std::fs::write(&script, "#!/bin/sh\nexec sleep 60\n").unwrap();
    chmod_x(&script);
    let t0 = std::time::Instant::now();
    let out = usdt_trace_tests::proc::output_within(
        std::process::Command::new(watch::usdt_trace_bin()).args([
            "watch",
            "--duration",
            "3",
            "-c",
            script.to_str().unwrap(),
            "interp:line",
        ]),
        usdt_trace_tests::proc::RUN_TIMEOUT,
    );
    let took = t0.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // 3 s, and the command's end (SIGTERM: sleep dies at once).
    assert!(took < 15.0, "took {took:.1}s: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].contains("waiting for it to run a program with probes matching interp:line (it ran /usr/bin/dash → /usr/bin/sleep)"),
        "{stderr}"
    );
    assert!(
        lines[1]
            .contains("--duration ended before it ran a program with probes matching interp:line")
            && lines[1].ends_with("the command was ended, untraced"),
        "{stderr}"
    );
}
