//! The optimized probe site must never corrupt the red zone.
//!
//! usdt-markers emits `nop; nop5` and `watch` attaches on the nop5 when the kernel optimizes
//! uprobes (Linux 6.18+): after the first hit the kernel rewrites the nop5 into a `call` to a
//! trampoline, and that call (and the trampoline's pushes) write below %rsp. A leaf function's
//! red-zone locals, and probe arguments the compiler placed there, would change from the
//! second hit on. `redzone_c.c` keeps six locals and two arguments in the red zone of leaf
//! functions, checks them after every hit and exits 1 if any changed; the probes carry the same
//! values, checked here one by one, for gcc and clang at -O2 and -O3.
//!
//! The last test builds the same program without the header's guard and expects the
//! corruption: it shows these tests would catch it.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use usdt_trace_tests::markers::{
    cargo_build, have, rust_testprog, target_dir, workspace_root, Elf,
};
use usdt_trace_tests::watch::{run, Watch};

const HITS: u64 = 300;
/// What usdt-markers emits at every x86_64 site: `nop; nopl 0x0(%rax,%rax,1)`.
const SITE: [u8; 6] = [0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00];

/// The kernel rewrites uprobes on 5-byte nops into calls (what `watch` then attaches to).
fn kernel_optimizes() -> bool {
    let syms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    syms.contains(" arch_uprobe_optimize\n") && syms.contains("sys_uprobe\n")
}

fn compilers() -> Vec<&'static str> {
    ["gcc", "clang"].into_iter().filter(|c| have(c)).collect()
}

static BUILDS: AtomicU32 = AtomicU32::new(0);

/// Builds `redzone_c.c` into a fresh file (tests run in parallel: rewriting a file another one
/// traces would leave its uprobes on the old inode); `guard: false` defines the header's
/// red-zone guard away.
fn build(cc: &str, opt: &str, guard: bool) -> PathBuf {
    let dir = target_dir().join("markers-testprogs/redzone");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let out = dir.join(format!(
        "redzone-{cc}{opt}-{}-{}-{}",
        if guard { "guarded" } else { "unguarded" },
        std::process::id(),
        BUILDS.fetch_add(1, Ordering::Relaxed)
    ));
    let root = workspace_root();
    let mut cmd = Command::new(cc);
    cmd.args([opt, "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("usdt-markers/include"))
        .arg(root.join("tests/testprogs/redzone_c.c"))
        .arg("-o")
        .arg(&out);
    if !guard {
        cmd.arg("-D_USDT_GUARD()=((void)0)");
    }
    let status = cmd.status().expect("run the compiler");
    assert!(status.success(), "{cc} {opt} failed");
    out
}

/// `tests/testprogs/redzone_rust`, the Rust twin of `redzone_c.c`, built in release mode.
fn build_rust() -> PathBuf {
    let target = target_dir().join("markers-testprogs/redzone_rust");
    let manifest = workspace_root().join("tests/testprogs/redzone_rust/Cargo.toml");
    cargo_build(&manifest, &target, "", &["--release"]);
    target.join("release/redzone_rust")
}

/// Every site of `bin` is the 6-byte `nop; nop5` with the note's pc on the nop.
fn assert_sites(bin: &Path) {
    let elf = Elf::read(bin);
    let data = std::fs::read(bin).expect("read");
    let probes = elf.probes();
    assert!(!probes.is_empty(), "{}: no probes", bin.display());
    for p in probes {
        let off = elf.vaddr_to_offset(p.pc).expect("pc in the file") as usize;
        assert_eq!(
            data[off..off + 6],
            SITE,
            "{}: {}:{} at {:#x}",
            bin.display(),
            p.provider,
            p.name,
            p.pc
        );
    }
}

/// The values `redzone_c` passes at hit `i`.
fn expected(i: u64) -> (Vec<u64>, (u64, i64)) {
    let a = 0x1000 + i;
    let b = 0xf7f6f5f4f3f2f1f0u64 ^ i;
    let locals = vec![a, b, a ^ b, a.wrapping_add(b), a.wrapping_mul(3), !a];
    (locals, (0x8000_0000 + i, -(i as i64) - 1))
}

/// Runs `bin HITS` under `watch -c`; returns whether it exited cleanly and every probe value
/// that differs from what the program passed.
fn trace(bin: &Path) -> (bool, Vec<String>) {
    let cmd = format!("{} {HITS}", bin.display());
    let out = Watch::start(&["-c", &cmd]).finish();
    let events = out.events();
    let of =
        |n: &str| -> Vec<&Value> { events.iter().copied().filter(|e| e["name"] == n).collect() };
    let (locals, args) = (of("locals"), of("args"));
    assert_eq!(
        locals.len() as u64,
        HITS,
        "{}: {}",
        bin.display(),
        out.stderr
    );
    assert_eq!(args.len() as u64, HITS, "{}: {}", bin.display(), out.stderr);
    let mut wrong = Vec::new();
    for i in 0..HITS {
        let (want_locals, (x, y)) = expected(i);
        let got: Vec<u64> = locals[i as usize]["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|v| v.as_u64().expect("u64"))
            .collect();
        if got != want_locals {
            wrong.push(format!("hit {i}: locals {got:x?} != {want_locals:x?}"));
        }
        let a = &args[i as usize]["args"];
        if a[0].as_u64() != Some(x) || a[1].as_i64() != Some(y) {
            wrong.push(format!("hit {i}: args {a} != [{x}, {y}]"));
        }
    }
    (out.status.success(), wrong)
}

#[test]
fn sites_are_nop_nop5_in_c_and_rust() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    for cc in compilers() {
        for opt in ["-O2", "-O3"] {
            assert_sites(&build(cc, opt, true));
        }
    }
    assert_sites(&rust_testprog(None));
    assert_sites(&build_rust());
}

#[test]
fn list_says_which_sites_the_kernel_optimizes() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let bin = build("gcc", "-O2", true);
    let out = run(&["list", bin.to_str().expect("utf-8")]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let want = if kernel_optimizes() {
        "optimized"
    } else {
        "trap"
    };
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("redzone:")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows.iter().all(|r| r.trim_end().ends_with(want)), "{text}");
    let json = run(&["list", "--json", bin.to_str().expect("utf-8")]);
    for l in String::from_utf8_lossy(&json.stdout).lines() {
        let v: Value = serde_json::from_str(l).expect("json");
        assert_eq!(v["insn"], "nop_nop5", "{l}");
        assert_eq!(v["insn_bytes"], "900f1f440000", "{l}");
    }
}

#[test]
#[ignore = "needs root"]
fn red_zone_values_and_arguments_survive_every_hit() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    for cc in compilers() {
        for opt in ["-O2", "-O3"] {
            let bin = build(cc, opt, true);
            let (clean, wrong) = trace(&bin);
            assert!(wrong.is_empty(), "{cc} {opt}: {}", wrong.join("\n"));
            assert!(clean, "{cc} {opt}: the program saw its red zone change");
        }
    }
}

/// Rust: the site sits in its own function and its `asm!` may use the stack, so the caller's
/// memory locals and the probe's arguments come through every hit unchanged.
#[test]
#[ignore = "needs root"]
fn rust_values_and_arguments_survive_every_hit() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let (clean, wrong) = trace(&build_rust());
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(clean, "the Rust program saw its locals change");
}

/// The same leaf functions without the guard: gcc and clang keep them leaves with their locals
/// in the red zone, and the optimized site's call overwrites them.
#[test]
#[ignore = "needs root"]
fn without_the_guard_the_red_zone_is_corrupted() {
    if !cfg!(target_arch = "x86_64") || !kernel_optimizes() {
        return;
    }
    for cc in compilers() {
        let bin = build(cc, "-O2", false);
        let (clean, _) = trace(&bin);
        assert!(
            !clean,
            "{cc}: an unguarded leaf kept its red zone: the test cannot see the hazard"
        );
    }
}
