//! The Python runtime-probe module (usdt-markers-dyn/python/usdt_dyn.py) checks what it is
//! given before ctypes narrows it: a name with a NUL and a type code past 32 bits are refused
//! with a ValueError that says why, and a constructor that fails leaves nothing for Python to
//! complain about at exit. No tracing: no root needed.
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use usdt_trace_tests::proc;
use usdt_trace_tests::watch;

/// Debian's interpreter, else whatever `python3` is: the module needs nothing but ctypes.
fn python() -> Option<PathBuf> {
    let debian = PathBuf::from("/usr/bin/python3.11");
    if debian.exists() {
        return Some(debian);
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("python3"))
            .find(|p| p.exists())
    })
}

/// Runs `code` with the module importable and the library `cargo build --workspace` made;
/// returns (stdout, stderr).
fn run_python(py: &PathBuf, code: &str) -> (String, String) {
    let lib = watch::usdt_trace_bin().with_file_name("libusdt_markers_dyn.so");
    assert!(
        lib.exists(),
        "{} is missing: cargo build --workspace",
        lib.display()
    );
    let module_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../usdt-markers-dyn/python");
    let out = proc::output_within(
        Command::new(py)
            .args(["-c", code])
            .env("PYTHONPATH", module_dir)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("USDT_DYN_LIB", lib),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}{stderr}");
    (stdout, stderr)
}

/// Prints `type: message` for what each call raises (or `ok: ...`).
const PROBE_INPUTS: &str = r#"
import usdt_dyn

def attempt(label, f):
    try:
        r = f()
        print(f"{label}: ok: {r!r}")
    except Exception as e:
        print(f"{label}: {type(e).__name__}: {e}")

attempt("nul provider", lambda: usdt_dyn.Provider("a\0b").name)
attempt("bad provider", lambda: usdt_dyn.Provider("not a name!").name)
p = usdt_dyn.Provider("pyinput")
attempt("nul probe", lambda: p.add_probe("x\0y", usdt_dyn.INT32).name)
attempt("wide type", lambda: p.add_probe("wide", 2**32 + 8).types)
attempt("zero type", lambda: p.add_probe("zero", 0).types)
attempt("bool type", lambda: p.add_probe("flag", True).types)
attempt("str type", lambda: p.add_probe("s", "8").types)
attempt("seven args", lambda: p.add_probe("many", *[usdt_dyn.INT64] * 7).types)
attempt("good", lambda: p.add_probe("tick", usdt_dyn.INT32, usdt_dyn.STRING).types)
attempt("probes", lambda: sorted(p.probes))
p.load()
p.close()
"#;

#[test]
fn bad_names_and_type_codes_raise_value_error_and_a_failed_constructor_is_silent_at_exit() {
    let Some(py) = python() else {
        eprintln!("skipped: python3 not installed");
        return;
    };
    let (stdout, stderr) = run_python(&py, PROBE_INPUTS);
    let lines: Vec<&str> = stdout.lines().collect();
    let codes = "[-8, -4, -2, -1, 1, 2, 4, 8] (UINT8 ... INT64, STRING)";
    assert_eq!(
        lines,
        [
            "nul provider: ValueError: provider name 'a\\x00b' contains a NUL character".to_string(),
            // The library's own refusal, unchanged; what matters is the silence at exit.
            "bad provider: UsdtError: provider \"not a name!\": use 1 to 64 letters, digits or '_', not starting with a digit".to_string(),
            "nul probe: ValueError: probe name 'x\\x00y' contains a NUL character".to_string(),
            format!("wide type: ValueError: probe 'wide': argument 0: type code 4294967304 is not one of {codes}"),
            format!("zero type: ValueError: probe 'zero': argument 0: type code 0 is not one of {codes}"),
            format!("bool type: ValueError: probe 'flag': argument 0: type code True is not one of {codes}"),
            format!("str type: ValueError: probe 's': argument 0: type code '8' is not one of {codes}"),
            "seven args: ValueError: probe 'many': 7 arguments, at most 6".to_string(),
            "good: ok: (-4, 8)".to_string(),
            "probes: ok: ['tick']".to_string(),
        ]
    );
    // Two constructors failed: neither leaves an "Exception ignored in ... __del__" behind.
    assert_eq!(stderr, "");
}
