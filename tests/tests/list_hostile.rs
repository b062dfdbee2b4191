//! Hostile input and other people's files: a process redirecting what root opens for it, escape
//! sequences in names and paths, absurd sizes, files truncated under the parser, paths that are
//! not UTF-8, and PIDs that are not processes.
#![allow(clippy::unwrap_used)]

use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use usdt_trace_tests::proc::{self, is_root, Lines};
use usdt_trace_tests::testprogs::{build_c, readelf_section};
use usdt_trace_tests::watch::usdt_trace_bin;

/// `USDT_TRACE_BIN` runs another build (an older one, to see a test fail before its fix).
fn bin() -> PathBuf {
    std::env::var_os("USDT_TRACE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(usdt_trace_bin)
}

fn list(args: &[&std::ffi::OsStr]) -> Output {
    proc::output_within(
        Command::new(bin()).arg("list").args(args),
        Duration::from_secs(60),
    )
}

fn scratch_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("usdt-hostile-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Bytes that must never reach a terminal raw: ESC, BEL, CR, and the C1 CSI (0x9b as U+009B).
fn assert_terminal_safe(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let bad: Vec<char> = text
        .chars()
        .filter(|&c| matches!(c, '\x1b' | '\x07' | '\r' | '\u{9b}'))
        .collect();
    assert!(bad.is_empty(), "{what} holds raw {bad:?}: {text:?}");
}

/// A waiting hostile_wait process (stdin piped; it exits when stdin closes).
struct Waiting {
    child: std::process::Child,
    pid: u32,
}

impl Waiting {
    fn spawn(cmd: &mut Command) -> Waiting {
        let mut child = proc::spawn(cmd.stdin(Stdio::piped()).stdout(Stdio::piped()));
        let mut lines = Lines::new(child.stdout.take().unwrap());
        let ready = lines.expect_within(Duration::from_secs(10), "ready line");
        let pid = ready.strip_prefix("ready ").unwrap().parse().unwrap();
        Waiting { child, pid }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        proc::kill_and_reap(&mut self.child);
    }
}

#[test]
fn a_kernel_thread_is_named_as_such() {
    // PID 2 is kthreadd on every Linux system.
    let out = list(&["-p".as_ref(), "2".as_ref()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("kernel thread"), "{err}");
    assert!(!err.contains("no process"), "{err}");
}

/// Overwrites `from` with `to` (same length) inside the byte range `within` of `bytes`.
fn patch(bytes: &mut [u8], within: std::ops::Range<usize>, from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len(), "{to:?}");
    let area = &mut bytes[within];
    let at = area
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("{:?} not in the note", String::from_utf8_lossy(from)));
    area[at..at + from.len()].copy_from_slice(to);
}

/// Escape sequences in the provider, the probe name, the argument string and the file name:
/// text mode shows them escaped, JSON carries them exactly.
#[test]
fn escape_sequences_in_names_reach_no_terminal() {
    let built = build_c(
        "hostile_wait",
        &["-O2", "-DPROV=provprovprovprov", "-DNAME=namenamenamename"],
    );
    let mut bytes = std::fs::read(&built).unwrap();
    let note = readelf_section(&built, ".note.stapsdt");
    let range = note.offset as usize..(note.offset + note.size) as usize;
    let provider = b"\x1b]0;pwned\x07\x1b[2Jzz";
    let name = b"\x1b[31mred\r\xc2\x9b0mxxx";
    let arg = b"\x1b[1;1H\x1b[31mARG\x1b[0m\x07xxxxxxxxxxxxxxxxxxxx";
    patch(&mut bytes, range.clone(), b"provprovprovprov", provider);
    patch(&mut bytes, range.clone(), b"namenamenamename", name);
    patch(
        &mut bytes,
        range,
        b"argument_name_to_overwrite_xxxxxxxxxxxx",
        arg,
    );
    let dir = scratch_dir("escape");
    let path = dir.join("evil\x1b]0;title\x07\r.bin");
    std::fs::write(&path, &bytes).unwrap();

    let out = list(&[path.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    assert_terminal_safe("list stdout", &out.stdout);
    assert_terminal_safe("list stderr", &out.stderr);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\\u{1b}]0;pwned\\u{7}"), "{text}");
    assert!(text.contains("red\\u{d}"), "{text}");
    assert!(text.contains("evil\\u{1b}]0;title"), "{text}");

    let out = list(&["--json".as_ref(), path.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    let rec: serde_json::Value =
        serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
    assert_eq!(rec["provider"].as_str().unwrap().as_bytes(), provider);
    assert_eq!(rec["name"].as_str().unwrap().as_bytes(), name);
    assert!(rec["args"]
        .as_str()
        .unwrap()
        .as_bytes()
        .ends_with(b"(%rip)"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Column padding of a 70,000-character name panicked ("Formatting argument out of range").
#[test]
fn a_huge_probe_name_lists() {
    let long = "n".repeat(70_000);
    let built = build_c("hostile_wait", &["-O2", &format!("-DNAME={long}")]);
    let out = list(&[built.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("mine:{long}")));
    // The freak row overflows; the header is not padded to 70,000 columns.
    let header = text.lines().find(|l| l.contains("PROBE")).unwrap();
    assert!(header.len() < 300, "{}", header.len());
}

/// A file truncated and rewritten while `list` parses it: every run ends with a listing or an
/// error, never a signal (the file was mapped, and touching a mapping past the new end is
/// SIGBUS: about one run in three died so).
#[test]
fn a_file_truncated_while_listing_is_no_crash() {
    // 10,000 notes: parsing them takes long enough for the truncation to land mid-parse.
    let built = build_c("hostile_many", &["-O2"]);
    let full = std::fs::read(&built).unwrap();
    let dir = scratch_dir("truncate");
    let path = dir.join("many");
    std::fs::write(&path, &full).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, path) = (stop.clone(), path.clone());
        std::thread::spawn(move || {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Cut at varying points of the notes, put the tail back at once, and leave
                // the file whole for a while so that `list` mostly starts on a whole file.
                let cut = (30 + i * 7919 % 60) * full.len() as u64 / 100;
                f.set_len(cut).unwrap();
                f.write_all_at(&full[cut as usize..], cut).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                i += 1;
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut runs = 0;
    let mut signalled = Vec::new();
    while Instant::now() < deadline {
        let out = list(&["--json".as_ref(), path.as_os_str()]);
        if let Some(sig) = out.status.signal() {
            signalled.push(sig);
        }
        runs += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        signalled.is_empty(),
        "{} of {runs} runs died by signal {signalled:?}",
        signalled.len()
    );
}

/// A process whose executable path holds a newline (maps shows "\012") and a byte that is not
/// UTF-8 could not be listed at all ("stream did not contain valid UTF-8").
#[test]
fn a_process_with_a_non_utf8_path_lists() {
    let built = build_c("hostile_wait", &["-O2", "-DPROV=oddpath"]);
    let dir = scratch_dir("nonutf8");
    let exe = dir.join(std::ffi::OsStr::from_bytes(b"odd\nname\xff"));
    std::fs::copy(&built, &exe).unwrap();
    let target = Waiting::spawn(&mut Command::new(&exe));
    let pid = target.pid.to_string();

    let out = list(&["-p".as_ref(), pid.as_ref()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_terminal_safe("list stdout", &out.stdout);
    // The path line, with the newline escaped onto one line.
    assert!(
        text.lines()
            .any(|l| l.contains("odd\\u{a}name\u{fffd}") && l.contains(&format!("(pid {pid})"))),
        "{text}"
    );
    assert!(text.contains("oddpath:tick"), "{text}");

    let out = list(&["--json".as_ref(), "-p".as_ref(), pid.as_ref()]);
    assert!(out.status.success());
    let recs: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ours = recs.iter().find(|r| r["provider"] == "oddpath").unwrap();
    assert!(
        ours["path"]
            .as_str()
            .unwrap()
            .ends_with("odd\nname\u{fffd}"),
        "{ours}"
    );
    drop(target);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A process in its own mount namespace maps its program, then mounts a tmpfs over the
/// program's folder and puts there an absolute symlink of the same name to another ELF (a
/// root-only file on the host). Root's `list -p` followed `/proc/PID/root/<path>` through the
/// symlink, on the host, and listed the other file's probes.
#[test]
#[ignore = "needs root"]
fn a_symlink_planted_in_the_targets_namespace_is_not_followed() {
    assert!(is_root());
    let mine = build_c("hostile_wait", &["-O2", "-DPROV=nsmine"]);
    let secret_src = build_c("hostile_wait", &["-O2", "-DPROV=nssecret"]);
    let dir = scratch_dir("ns");
    let secret = dir.join("secret.bin");
    std::fs::copy(&secret_src, &secret).unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let progdir = dir.join("prog");
    std::fs::create_dir_all(&progdir).unwrap();
    std::fs::copy(&mine, progdir.join("app")).unwrap();
    let ready = dir.join("ready");

    // In a private mount namespace: start the program, wait until it is running, hide its
    // folder under a tmpfs and plant the symlink. The program keeps our stdin (through fd 3: a
    // background job's stdin would be /dev/null) and exits when it closes.
    let script = r#"
        exec 3<&0
        "$1/app" <&3 >"$2" 3<&- &
        while [ ! -s "$2" ]; do sleep 0.01; done
        mount -t tmpfs none "$1" || exit 1
        ln -s "$3" "$1/app" || exit 1
        echo planted
        wait
    "#;
    let mut ns = proc::spawn(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--fork", "sh", "-c"])
            .arg(script)
            .arg("sh")
            .arg(&progdir)
            .arg(&ready)
            .arg(&secret)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut lines = Lines::new(ns.stdout.take().unwrap());
    let planted = lines.expect_within(Duration::from_secs(10), "planted");
    assert_eq!(planted, "planted");
    let pid = std::fs::read_to_string(&ready).unwrap();
    let pid = pid.trim().strip_prefix("ready ").unwrap().to_string();

    let text = list(&["-p".as_ref(), pid.as_ref()]);
    let json = list(&["--json".as_ref(), "-p".as_ref(), pid.as_ref()]);
    drop(ns.stdin.take());
    proc::kill_and_reap(&mut ns);
    let _ = std::fs::remove_dir_all(&dir);

    let (out, err) = (
        String::from_utf8_lossy(&text.stdout),
        String::from_utf8_lossy(&text.stderr),
    );
    assert!(text.status.success(), "{err}");
    assert!(!out.contains("nssecret"), "listed the planted file: {out}");
    assert!(
        !String::from_utf8_lossy(&json.stdout).contains("nssecret"),
        "listed the planted file (JSON)"
    );
    assert!(
        err.lines()
            .any(|l| l.contains("prog/app") && l.contains("not the file process")),
        "no warning for the redirected object: {err}"
    );
}
