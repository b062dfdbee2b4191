//! Builds the eBPF programs (usdt-trace-ebpf) for bpfel-unknown-none with aya-build and
//! bpf-linker, and puts the object where `include_bytes_aligned!` finds it.
use std::{env, path::PathBuf};

fn main() -> anyhow::Result<()> {
    git_revision();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let object = out_dir.join("usdt-trace-probes");
    println!("cargo:rerun-if-env-changed=USDT_TRACE_SKIP_EBPF");
    if env::var_os("USDT_TRACE_SKIP_EBPF").is_some_and(|v| v == "1") {
        // For pure-logic work without the BPF toolchain: `watch` then reports it was built
        // without its eBPF object.
        std::fs::write(&object, b"")?;
        return Ok(());
    }
    // scripts/setup.sh installs bpf-linker here; find it without asking users to edit PATH.
    let tools = env::var_os("USDT_TRACE_TOOLS")
        .map(PathBuf::from)
        .or_else(|| {
            env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share/usdt-trace-tools"))
        });
    if let Some(tools) = tools {
        let bin = tools.join("bin");
        if bin.join("bpf-linker").exists() {
            let path = env::var_os("PATH").unwrap_or_default();
            let mut paths = vec![bin.clone()];
            paths.extend(env::split_paths(&path));
            // SAFETY: build scripts are single-threaded here.
            unsafe { env::set_var("PATH", env::join_paths(paths)?) };
            println!(
                "cargo:rerun-if-changed={}",
                bin.join("bpf-linker").display()
            );
        }
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let root = manifest.join("../usdt-trace-ebpf");
    let root = root.to_str().expect("utf-8 path");
    println!("cargo:rerun-if-changed={root}/common/src");
    // aya-build relays every line the nested cargo prints as a build-script warning; keep it
    // to errors so `cargo build --quiet` stays quiet.
    // SAFETY: build scripts are single-threaded here.
    unsafe { env::set_var("CARGO_TERM_QUIET", "true") };
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "usdt-trace-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}

/// `USDT_TRACE_GIT_REV` for `--version`: the commit this was built from, or "unknown" outside
/// a git checkout (a crate tarball).
fn git_revision() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let rev = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=USDT_TRACE_GIT_REV={rev}");
    // A new commit moves the branch ref (or HEAD itself when detached). Cargo reads a watched
    // path that does not exist as changed on every build (a checkout whose refs are all packed
    // has no loose `refs/heads/main`; a clone may have no `packed-refs`), which recompiled this
    // crate and the eBPF object on every build: watch only paths that exist, and the refs
    // directory itself, where a commit writes a loose ref that was packed before.
    let watch = |p: std::path::PathBuf| {
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    };
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        watch(std::path::Path::new(&dir).join("HEAD"));
    }
    if let Some(common) = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]) {
        let common = std::path::Path::new(&common);
        watch(common.join("refs/heads"));
        watch(common.join("packed-refs"));
    }
}
