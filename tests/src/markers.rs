//! Helpers for the `markers_*` and `demo_watch` tests: the usdt-markers test programs (Rust and
//! C, built with each linker), a minimal ELF reader to check their layout, and the demo servers.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::proc;
use crate::watch_util::Target;

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The target directory the test binary runs from (`target/`), found from our own path
/// (`target/<profile>/deps/markers_x-HASH`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors()
        .nth(3)
        .expect("target/<profile>/deps/exe")
        .to_path_buf()
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs a nested `cargo build` in a target directory of its own (the outer `cargo test` holds
/// the main one).
pub fn cargo_build(manifest: &Path, target: &Path, rustflags: &str, args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--quiet")
        .arg("--manifest-path")
        .arg(manifest)
        .args(args)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS");
    if !rustflags.is_empty() {
        cmd.env("RUSTFLAGS", rustflags);
    }
    let out = cmd.output().expect("run cargo");
    assert!(
        out.status.success(),
        "cargo build {} failed:\n{}",
        manifest.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds `tests/testprogs/markers_rust` in release mode with the given linker (`None`: Rust's
/// default, rust-lld here; otherwise a `-fuse-ld=` name) and returns the binary.
pub fn rust_testprog(linker: Option<&str>) -> PathBuf {
    let name = linker.unwrap_or("default");
    let target = target_dir().join("markers-testprogs").join(name);
    let flags = linker
        .map(|l| format!("-C link-arg=-fuse-ld={l}"))
        .unwrap_or_default();
    let manifest = workspace_root().join("tests/testprogs/markers_rust/Cargo.toml");
    cargo_build(&manifest, &target, &flags, &["--release"]);
    target.join("release/markers_rust")
}

static C_BUILDS: AtomicU32 = AtomicU32::new(0);

/// Compiles `tests/testprogs/markers_c.c` with gcc and extra flags into a fresh file.
pub fn c_testprog(extra: &[&str]) -> PathBuf {
    let dir = target_dir().join("markers-testprogs/c");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let out = dir.join(format!(
        "markers_c-{}-{}",
        std::process::id(),
        C_BUILDS.fetch_add(1, Ordering::Relaxed)
    ));
    let root = workspace_root();
    let status = Command::new("gcc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("usdt-markers/include"))
        .arg(root.join("tests/testprogs/markers_c.c"))
        .arg("-o")
        .arg(&out)
        .args(extra)
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc failed");
    out
}

/// The rust-lld that ships with rustc, as a `-B` directory for `gcc -fuse-ld=lld`.
pub fn rust_lld_dir() -> Option<PathBuf> {
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    let dir = sysroot.join("lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld");
    dir.join("ld.lld").exists().then_some(dir)
}

// --- a minimal ELF64 little-endian reader, enough to check layouts -------------------------

#[derive(Debug, Clone)]
pub struct Section {
    pub name: String,
    pub kind: u32,
    pub flags: u64,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub align: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct Segment {
    pub kind: u32,
    pub flags: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub memsz: u64,
}

pub struct Elf {
    pub data: Vec<u8>,
    pub sections: Vec<Section>,
    pub segments: Vec<Segment>,
}

fn u16le(d: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([d[o], d[o + 1]])
}
fn u32le(d: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(d[o..o + 4].try_into().expect("4 bytes"))
}
fn u64le(d: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(d[o..o + 8].try_into().expect("8 bytes"))
}

impl Elf {
    pub fn read(path: &Path) -> Elf {
        let data = std::fs::read(path).expect("read ELF");
        assert_eq!(&data[..6], b"\x7fELF\x02\x01", "ELF64 LE");
        let (phoff, shoff) = (u64le(&data, 32) as usize, u64le(&data, 40) as usize);
        let (phentsize, phnum) = (u16le(&data, 54) as usize, u16le(&data, 56) as usize);
        let (shentsize, shnum) = (u16le(&data, 58) as usize, u16le(&data, 60) as usize);
        let shstrndx = u16le(&data, 62) as usize;
        let segments = (0..phnum)
            .map(|i| {
                let o = phoff + i * phentsize;
                Segment {
                    kind: u32le(&data, o),
                    flags: u32le(&data, o + 4),
                    offset: u64le(&data, o + 8),
                    vaddr: u64le(&data, o + 16),
                    filesz: u64le(&data, o + 32),
                    memsz: u64le(&data, o + 40),
                }
            })
            .collect();
        let raw: Vec<(u32, u32, u64, u64, u64, u64, u64)> = (0..shnum)
            .map(|i| {
                let o = shoff + i * shentsize;
                (
                    u32le(&data, o),
                    u32le(&data, o + 4),
                    u64le(&data, o + 8),
                    u64le(&data, o + 16),
                    u64le(&data, o + 24),
                    u64le(&data, o + 32),
                    u64le(&data, o + 48),
                )
            })
            .collect();
        let strtab = raw[shstrndx].4 as usize;
        let sections = raw
            .iter()
            .map(|&(name, kind, flags, addr, offset, size, align)| {
                let start = strtab + name as usize;
                let end = start + data[start..].iter().position(|&b| b == 0).unwrap_or(0);
                Section {
                    name: String::from_utf8_lossy(&data[start..end]).into_owned(),
                    kind,
                    flags,
                    addr,
                    offset,
                    size,
                    align,
                }
            })
            .collect();
        Elf {
            data,
            sections,
            segments,
        }
    }

    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// All notes `(name, type, desc)` of every section called `name`.
    pub fn notes(&self, section: &str) -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        for s in self.sections.iter().filter(|s| s.name == section) {
            let d = &self.data[s.offset as usize..(s.offset + s.size) as usize];
            let mut o = 0;
            while o + 12 <= d.len() {
                let (namesz, descsz, kind) = (
                    u32le(d, o) as usize,
                    u32le(d, o + 4) as usize,
                    u32le(d, o + 8),
                );
                let name_start = o + 12;
                let desc_start = name_start + namesz.div_ceil(4) * 4;
                let name = String::from_utf8_lossy(&d[name_start..name_start + namesz])
                    .trim_end_matches('\0')
                    .to_string();
                out.push((name, kind, d[desc_start..desc_start + descsz].to_vec()));
                o = desc_start + descsz.div_ceil(4) * 4;
            }
        }
        out
    }

    /// The stapsdt notes as `Probe`s.
    pub fn probes(&self) -> Vec<Probe> {
        self.notes(".note.stapsdt")
            .into_iter()
            .filter(|(n, t, _)| n == "stapsdt" && *t == 3)
            .map(|(_, _, d)| {
                let strs: Vec<String> = d[24..]
                    .split(|&b| b == 0)
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect();
                Probe {
                    pc: u64le(&d, 0),
                    base: u64le(&d, 8),
                    semaphore: u64le(&d, 16),
                    provider: strs[0].clone(),
                    name: strs[1].clone(),
                    args: strs[2].clone(),
                }
            })
            .collect()
    }

    /// File offset of a virtual address, through the PT_LOAD that maps it from the file.
    pub fn vaddr_to_offset(&self, vaddr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|p| p.kind == 1 && p.vaddr <= vaddr && vaddr < p.vaddr + p.filesz)
            .map(|p| vaddr - p.vaddr + p.offset)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Probe {
    pub pc: u64,
    pub base: u64,
    pub semaphore: u64,
    pub provider: String,
    pub name: String,
    pub args: String,
}

/// The probe names every test program defines.
pub const TESTPROG_PROBES: &[&str] = &[
    "inner__end",
    "inner__start",
    "op__end",
    "op__start",
    "sizes",
    "text",
    "twelve",
    "zero",
];

/// Starts a markers test program (Rust or C; both answer `fire`, `sema` and `quit` on stdin,
/// one reply line each, and exit on EOF) and checks its `ready` line.
pub fn start_testprog(bin: &Path) -> Target {
    let (t, ready) = Target::spawn(bin, &[]);
    assert_eq!(
        ready,
        format!("ready {}", t.pid()),
        "first line of {}",
        bin.display()
    );
    t
}

/// `(zero, op)` semaphore states as a markers test program sees them.
pub fn sema(t: &mut Target) -> (bool, bool) {
    let reply = t.ask("sema");
    let get = |k: &str| reply.contains(&format!("{k}=1"));
    (get("zero"), get("op"))
}

/// A loopback port nobody in this test process has been given yet.
///
/// Binding port 0 and closing it is racy on its own: two tests running in parallel can be
/// handed the same port, and the second server then fails to bind while the test talks to the
/// first one (regression: the C-server demo test hit "connection refused" once the Rust
/// test's server went away). Ports are remembered, so each is handed out once per process.
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if given.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
}

/// Both demo servers (debug), built once per test binary in a target directory of their own
/// (`markers_demo` and `demo_watch` share it; a no-op rebuild never replaces a file).
pub fn demo_servers() -> &'static (PathBuf, PathBuf) {
    static BUILT: std::sync::OnceLock<(PathBuf, PathBuf)> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let target = target_dir().join("markers-demo");
        let manifest = workspace_root().join("Cargo.toml");
        cargo_build(&manifest, &target, "", &["-p", "demo-httpserver", "--bins"]);
        (
            target.join("debug/demo-httpserver"),
            target.join("debug/demo-httpserver-c"),
        )
    })
}

/// The Rust demo server in release mode (as scripts/demo.sh builds it), in the same target
/// directory as [`demo_servers`]. All its probes sit on the page the read-only segment
/// shares with `.text` (rust-lld's packed layout), where the kernel miscounts semaphores in
/// processes started after attach (the debug build, with two probes there, did not show it
/// in a run here).
pub fn demo_server_release() -> &'static PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let target = target_dir().join("markers-demo");
        let manifest = workspace_root().join("Cargo.toml");
        cargo_build(
            &manifest,
            &target,
            "",
            &[
                "-p",
                "demo-httpserver",
                "--bin",
                "demo-httpserver",
                "--release",
            ],
        );
        target.join("release/demo-httpserver")
    })
}

/// A running demo server, killed on drop.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        proc::kill_and_reap(&mut self.0);
    }
}

/// Start a demo server on `port` serving `root` (default root when None), and wait until it
/// answers; asserts the answer comes from this server, not another one on a reused port.
pub fn start_server(bin: &Path, port: u16, root: Option<&Path>) -> Server {
    let mut cmd = Command::new(bin);
    cmd.args(["--port", &port.to_string()]);
    if let Some(root) = root {
        cmd.arg("--root").arg(root);
    }
    let mut server = Server(proc::spawn(cmd.stdin(Stdio::null()).stderr(Stdio::null())));
    proc::wait_until(
        &format!("{} listening on {port}", bin.display()),
        std::time::Duration::from_secs(10),
        || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );
    assert!(
        matches!(server.0.try_wait(), Ok(None)),
        "{} exited (port {port} taken?)",
        bin.display()
    );
    server
}

/// A demo server's answer to one request.
pub struct Reply {
    /// The status code from the status line, if there was one.
    pub status: Option<u16>,
    /// Everything before the blank line (all of it when there is none).
    pub head: String,
    /// Everything after the blank line.
    pub body: Vec<u8>,
    /// Whether the blank line ending the head was seen.
    pub head_complete: bool,
}

/// Send `raw` on a connection of its own to 127.0.0.1:`port` and read until the server closes.
pub fn http_request(port: u16, raw: &str) -> Reply {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok();
    s.write_all(raw.as_bytes()).expect("send");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let split = end.unwrap_or(buf.len());
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    Reply {
        status,
        head,
        body: buf.get(split + 4..).unwrap_or_default().to_vec(),
        head_complete: end.is_some(),
    }
}
