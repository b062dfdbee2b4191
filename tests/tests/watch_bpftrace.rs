//! bpftrace's probe spellings as patterns: `uprobe:PATH:FUNC` and `uretprobe:PATH:FUNC` are
//! our `fn:FUNC` span on that object, and a PATH without '/' is a library found the way the
//! loader finds it for the traced program (`-c`) or among the files a `-p` process maps.
//! Each run must trace libc's getaddrinfo as `watch LIBC 'fn:getaddrinfo'` does. And every
//! flag takes a function by each name the tool prints or accepts elsewhere (`--args fn:F`).
use serde_json::Value;
use usdt_trace_tests::watch::{run, Watch};
use usdt_trace_tests::watch_util::named;

/// Its output kept out of watch's JSON on stdout.
const CMD: &str = "getent ahosts localhost >/dev/null";

/// The C library getent loads, as the loader finds it.
fn libc_path() -> String {
    let out = std::process::Command::new("ldd")
        .arg("/usr/bin/getent")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.trim_start().starts_with("libc.so"))
        .and_then(|l| l.split_whitespace().nth(2))
        .unwrap_or_else(|| panic!("no libc in ldd's output: {text}"))
        .to_string()
}

/// One getaddrinfo span whose first argument is the host name, read as a string.
fn one_getaddrinfo(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["--str", "fn:getaddrinfo:0", "-c", CMD]);
    let out = Watch::start(&a).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    let g = named(&spans, "getaddrinfo");
    assert_eq!(g.len(), 1, "{args:?}: {:?}", out.records);
    assert_eq!(g[0]["provider"], "fn");
    let host = &g[0]["args"];
    let host = if host.is_object() {
        &host["node"]
    } else {
        &host[0]
    };
    assert_eq!(host, "localhost", "{:?}", g[0]);
    g[0].clone()
}

#[test]
#[ignore = "needs root"]
fn uprobe_with_a_path_is_the_function_span() {
    let libc = libc_path();
    one_getaddrinfo(&[&format!("uprobe:{libc}:getaddrinfo")]);
    // Ours, for comparison: the same span.
    one_getaddrinfo(&[&libc, "fn:getaddrinfo"]);
}

#[test]
#[ignore = "needs root"]
fn uretprobe_is_the_same_span() {
    let s = one_getaddrinfo(&[&format!("uretprobe:{}:getaddrinfo", libc_path())]);
    assert_eq!(s["end"], "getaddrinfo__return");
}

#[test]
#[ignore = "needs root"]
fn a_short_library_name_is_what_the_command_loads() {
    for name in ["libc", "libc.so.6"] {
        one_getaddrinfo(&[&format!("uprobe:{name}:getaddrinfo")]);
    }
}

/// A child killed and reaped however the test ends (a panic included).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// With -p, the name is looked up among the files the process maps.
#[test]
#[ignore = "needs root"]
fn a_short_library_name_with_pid_is_what_the_process_maps() {
    use std::io::BufRead;
    // Debian's python3 itself (not a wrapper that forks it), and once it has started.
    let mut py = Reaped(std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import socket, time\nprint('ready', flush=True)\nwhile True:\n    socket.getaddrinfo('localhost', 80)\n    time.sleep(0.05)",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap());
    let mut ready = String::new();
    std::io::BufReader::new(py.0.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    let pid = py.0.id().to_string();
    let w = Watch::start(&["-p", &pid, "uprobe:libc:getaddrinfo", "-d", "1"]);
    let out = w.finish();
    drop(py);
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    assert!(
        !named(&spans, "getaddrinfo").is_empty(),
        "{:?} {}",
        out.records,
        out.stderr
    );
}

/// Spellings that cannot be traced are one-line errors that say what to write.
#[test]
fn refused_spellings_say_why() {
    let out = run(&["watch", "uprobe:libnosuch_xyz:f", "-c", CMD]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim(),
        "usdt-trace: error: no library called libnosuch_xyz in the libraries /usr/bin/getent loads (a name without '/' is a library file name: libc, libc.so.6; or give its path)"
    );
    let out = run(&["watch", "uprobe:libc", "-c", CMD]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a function (uprobe:PATH:FUNC"), "{err}");
}

/// `--args` takes a function by the names the tool prints and `--str` accepts: `fn:F` (its
/// entry's arguments) and `fn:F__entry`.
#[test]
#[ignore = "needs root"]
fn args_names_a_function_as_str_does() {
    for probe in ["fn:getaddrinfo", "fn:getaddrinfo__entry"] {
        let rule = format!("{probe}=node,service");
        let s = one_getaddrinfo(&["uprobe:libc:getaddrinfo", "--args", &rule]);
        assert_eq!(s["args"]["node"], "localhost", "{s}");
        assert_eq!(s["args"]["service"], 0, "{s}");
        assert!(s["args"]["arg2"].is_u64(), "{s}");
    }
}

/// `list uprobe:libc:getaddr*` (as `bpftrace -l` takes it): the functions of that library, as
/// `list --functions` shows them.
#[test]
fn list_takes_the_uprobe_spelling() {
    let out = run(&["list", "uprobe:libc:getaddr*"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let first = text.lines().next().unwrap_or_default();
    assert!(first.contains("/libc.so.6: "), "{text}");
    assert!(text.lines().any(|l| l.ends_with(" getaddrinfo")), "{text}");
    let out = run(&["list", &format!("uprobe:{}:nosuch_xyz", libc_path())]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}
