//! The parser against readelf on the probe-carrying binaries and libraries of this machine.
//! Each candidate is skipped when absent, so the test adapts to what is installed.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use usdt_trace_tests::proc;
use usdt_trace_tests::testprogs::check_against_readelf;

/// Well-known homes of USDT probes on Debian, plus whatever a shallow scan of the library
/// folders finds with a `.note.stapsdt` section.
fn candidates() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/lib/x86_64-linux-gnu/libgcc_s.so.1",
        "/lib64/ld-linux-x86-64.so.2",
        "/usr/bin/python3",
        "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
        "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0",
        "/usr/lib/gcc/x86_64-linux-gnu/12/cc1",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    for pattern_dir in ["/usr/lib/postgresql", "/usr/lib/jvm"] {
        if let Ok(entries) = std::fs::read_dir(pattern_dir) {
            for e in entries.flatten() {
                v.push(e.path().join("bin/postgres"));
                v.push(e.path().join("lib/server/libjvm.so"));
            }
        }
    }
    v.retain(|p| p.is_file());
    v.sort();
    v.dedup_by(|a, b| same_file(a, b));
    v
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

#[test]
fn system_objects_agree_with_readelf() {
    let mut checked = 0;
    let mut sites = 0;
    for p in candidates() {
        let n = check_against_readelf(&p).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{}: {n} sites agree with readelf", p.display());
        checked += 1;
        sites += n;
    }
    eprintln!("{checked} objects, {sites} sites");
}

#[test]
fn system_listing_is_faster_than_readelf() {
    // The object with the most probes; a debug build must still keep up with readelf.
    let Some(big) = candidates().into_iter().max_by_key(|p| {
        usdt_trace::elf::parse_file(p)
            .map(|o| o.sites.len())
            .unwrap_or(0)
    }) else {
        eprintln!("no system object with probes; skipped");
        return;
    };
    // CPU time, the least of several rounds each: wall time on a shared machine measures the
    // load (a debug build's 11 ms of CPU spread over 67 ms of wall time failed this).
    let least = |f: &dyn Fn() -> std::time::Duration| (0..5).map(|_| f()).min().expect("rounds");
    let ours = least(&|| {
        let t = proc::thread_cpu_time();
        let (out, _) = usdt_trace::cli::list::list_to_string(&big, true).unwrap();
        assert!(!out.is_empty());
        proc::thread_cpu_time() - t
    });
    let theirs = least(&|| {
        let (ok, cpu) = proc::run_cpu_time(
            std::process::Command::new("readelf")
                .args(["-n", "--wide"])
                .arg(&big),
        );
        assert!(ok, "readelf -n {}", big.display());
        cpu
    });
    eprintln!("{}: list {ours:?}, readelf {theirs:?}", big.display());
    // Generous: this runs unoptimised and readelf includes process start-up.
    assert!(
        ours < theirs * 4 + std::time::Duration::from_millis(20),
        "list {ours:?} vs readelf {theirs:?}"
    );
}
