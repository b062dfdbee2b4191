//! `scripts/demo.sh` installs only what the build and the demo need (`scripts/setup.sh
//! build`); the test tools (Go, clang, Prometheus, the OTLP collector, Perfetto's trace
//! processor, cargo-deb, ...) are `scripts/setup.sh all`'s, which `scripts/test.sh` runs
//! (issue 33: the demo took 7 min on a fresh machine, most of it installing those).
use std::process::Command;
use usdt_trace_tests::markers::workspace_root;

/// What `setup.sh ARG` runs, as `bash -x` traces it (every tool is already installed here,
/// by scripts/test.sh: each step only checks).
fn trace(arg: &str) -> String {
    let out = Command::new("bash")
        .arg("-x")
        .arg(workspace_root().join("scripts/setup.sh"))
        .arg(arg)
        .output()
        .expect("bash");
    assert!(out.status.success(), "setup.sh {arg}: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const TEST_ONLY: [&str; 9] = [
    "golang-go",
    "clang",
    "prometheus",
    "redis-server",
    "rotel",
    "perfetto",
    "npm",
    "cargo-deb",
    "bpftrace",
];

#[test]
fn demo_setup_checks_only_what_the_build_needs() {
    let demo = std::fs::read_to_string(workspace_root().join("scripts/demo.sh")).unwrap();
    assert!(demo.contains("scripts/setup.sh build"), "{demo}");
    let build = trace("build");
    for tool in TEST_ONLY {
        assert!(
            !build.contains(tool),
            "setup.sh build touches {tool}:\n{build}"
        );
    }
    assert!(build.contains("bpf-linker"), "{build}");
    let test = std::fs::read_to_string(workspace_root().join("scripts/test.sh")).unwrap();
    assert!(test.contains("scripts/setup.sh all"), "{test}");
    let all = trace("all");
    for tool in TEST_ONLY {
        assert!(all.contains(tool), "setup.sh all leaves out {tool}");
    }
}
