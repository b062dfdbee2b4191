//! `--str` on real targets: python3.11's `function__entry` strings against a known script, and
//! the JVM's `class__loaded` names, which are not NUL-terminated (`:len=1`).
use serde_json::json;
use std::path::Path;
use usdt_trace_tests::watch;

const PYTHON: &str = "/usr/bin/python3.11";
const JDK: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

#[test]
#[ignore = "needs root"]
fn python_function_spans_carry_file_function_and_line_and_the_return_s_function() {
    if !Path::new(PYTHON).exists() {
        eprintln!("skipped: {PYTHON} not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("usdt-trace-strs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("known.py");
    std::fs::write(
        &script,
        "def handler(x):\n    return x\nlist(map(handler, [1, 2]))\n",
    )
    .unwrap();
    let cmd = format!("{PYTHON} {}", script.display());
    // python3.11 fires function__entry for calls between Python functions only while its
    // tracing path is on, which raising the `line` semaphore does: trace `line` too.
    let out = watch::Watch::start(&[
        PYTHON,
        "function__*",
        "line",
        "--str",
        "function__entry:0",
        "--str",
        "function__entry:1",
        "--str",
        "function__return:1",
        "--args",
        "function__entry=file,func,line",
        "-c",
        &cmd,
    ])
    .finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    let handler: Vec<_> = spans
        .iter()
        .filter(|s| s["args"]["func"] == "handler")
        .collect();
    assert_eq!(handler.len(), 2, "{:?}", spans);
    let file = script.to_str().unwrap();
    for s in &handler {
        // Two strings and a number at the start, the function's name again at the return.
        assert_eq!(
            s["args"],
            json!({"file": file, "func": "handler", "line": 1})
        );
        assert_eq!(s["end_args"][1], "handler");
        assert!(s["end_args"][0].as_u64().unwrap() > 0x1000, "{s}");
    }
}

#[test]
#[ignore = "needs root"]
fn jvm_class_loaded_names_are_exactly_their_length() {
    let java = Path::new(JDK).join("bin/java");
    if !java.exists() {
        eprintln!("skipped: OpenJDK 17 not installed at {JDK}");
        return;
    }
    let libjvm = Path::new(JDK).join("lib/server/libjvm.so");
    let cmd = format!("{} -version", java.display());
    let out = watch::Watch::start(&[
        libjvm.to_str().unwrap(),
        "class__loaded",
        "--str",
        "class__loaded:0:len=1",
        "-c",
        &cmd,
    ])
    .finish();
    assert!(out.status.success(), "{}", out.stderr);
    let events = out.events();
    // `java -version` loads some four hundred classes.
    assert!(events.len() > 300, "{} classes", events.len());
    // A name is its length's bytes and a valid internal class name: before `len=`, most came
    // with the bytes that follow them in memory.
    let valid = |n: &str| {
        !n.is_empty()
            && n.split('/').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_$[;.+-".contains(c))
            })
    };
    for e in &events {
        let name = e["args"][0].as_str().unwrap_or_else(|| panic!("{e}"));
        assert_eq!(name.len() as u64, e["args"][1].as_u64().unwrap(), "{e}");
        assert!(valid(name), "{e}");
        assert!(
            e.get("truncated").is_none() && e.get("escaped").is_none(),
            "{e}"
        );
    }
    assert!(events.iter().any(|e| e["args"][0] == "java/lang/Object"));
}
