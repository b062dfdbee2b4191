//! Builds the C test programs in `tests/testprogs/` with gcc, once per content and flags.
//!
//! Every test that needs a probe-carrying binary calls [`build_c`] (or [`build_shared`] for a
//! library). Outputs are cached under the Cargo target directory in a folder named by a hash of
//! the sources and flags, so parallel tests and repeated runs reuse one build, and an edited
//! program is rebuilt without any cleaning. Builds go to a temporary name first and are renamed
//! into place, so two test threads building the same program never see a half-written file.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `tests/testprogs/`, where the C sources live.
pub fn testprogs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testprogs")
}

/// Where built programs are cached: `<target>/<profile>/testprogs` next to the running test
/// binary, or a folder in the temp dir when not run from a Cargo target directory.
pub fn cache_dir() -> PathBuf {
    let from_exe = std::env::current_exe().ok().and_then(|exe| {
        let deps = exe.parent()?;
        (deps.file_name()? == "deps").then(|| deps.parent().map(|p| p.join("testprogs")))?
    });
    from_exe.unwrap_or_else(|| std::env::temp_dir().join("usdt-trace-testprogs"))
}

/// Builds `tests/testprogs/<name>.c` into an executable and returns its path.
///
/// `extra_args` go after the source file, so `-O2`, `-fPIE`, `-DSEMA_IN_BSS`, and linker flags
/// such as those from [`link_args`] all work. `-g` is always added.
pub fn build_c(name: &str, extra_args: &[&str]) -> PathBuf {
    build(name, name, &[], extra_args)
}

/// Builds `tests/testprogs/<name>.c` into `lib<name>.so` (with `-fPIC -shared`) and returns its
/// path; the file sits alone in its folder so [`link_args`] can point `-L` at it.
pub fn build_shared(name: &str, extra_args: &[&str]) -> PathBuf {
    build(
        name,
        &format!("lib{name}.so"),
        &["-fPIC", "-shared"],
        extra_args,
    )
}

/// gcc flags that link against a library from [`build_shared`] and find it at run time.
pub fn link_args(lib: &Path) -> Vec<String> {
    let dir = lib.parent().unwrap_or(Path::new(".")).display().to_string();
    let stem = lib
        .file_name()
        .and_then(|f| f.to_str())
        .and_then(|f| f.strip_prefix("lib"))
        .and_then(|f| f.strip_suffix(".so"))
        .unwrap_or("");
    vec![
        format!("-L{dir}"),
        format!("-l{stem}"),
        format!("-Wl,-rpath,{dir}"),
    ]
}

fn build(name: &str, out_name: &str, fixed: &[&str], extra: &[&str]) -> PathBuf {
    // A C++ program (`NAME.cc`) is built with g++, the same way.
    let cxx = testprogs_dir().join(format!("{name}.cc"));
    let (src, compiler) = if cxx.exists() {
        (cxx, "g++")
    } else {
        (testprogs_dir().join(format!("{name}.c")), "gcc")
    };
    let source = std::fs::read(&src).unwrap_or_else(|e| panic!("reading {}: {e}", src.display()));
    let mut h = DefaultHasher::new();
    source.hash(&mut h);
    // Headers shared between programs are part of every program's identity.
    if let Ok(dir) = std::fs::read_dir(testprogs_dir()) {
        let mut headers: Vec<PathBuf> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "h"))
            .collect();
        headers.sort();
        for hdr in headers {
            std::fs::read(&hdr).unwrap_or_default().hash(&mut h);
        }
    }
    out_name.hash(&mut h);
    fixed.hash(&mut h);
    extra.hash(&mut h);
    let dir = cache_dir().join(format!("{name}-{:016x}", h.finish()));
    let out = dir.join(out_name);
    if out.exists() {
        return out;
    }
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let tmp = dir.join(format!(
        ".{out_name}.{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let result = Command::new(compiler)
        .arg("-g")
        .args(fixed)
        .arg(&src)
        .args(extra)
        .arg("-o")
        .arg(&tmp)
        .output()
        .unwrap_or_else(|e| panic!("running {compiler}: {e}"));
    if !result.status.success() {
        let _ = std::fs::remove_file(&tmp);
        panic!(
            "{compiler} {} {:?} failed:\n{}",
            src.display(),
            extra,
            String::from_utf8_lossy(&result.stderr)
        );
    }
    // Publish without replacing: another thread may have built the same program and a test
    // may already be tracing that inode (a rename over it would give the test a new file).
    match std::fs::hard_link(&tmp, &out) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("publishing {}: {e}", out.display()),
    }
    let _ = std::fs::remove_file(&tmp);
    out
}

/// One `.note.stapsdt` note as `readelf -n --wide` prints it (pc and semaphore unadjusted).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReadelfNote {
    pub provider: String,
    pub name: String,
    pub pc: u64,
    pub base: u64,
    pub semaphore: u64,
    pub args: String,
}

/// The stapsdt notes of `path` according to readelf, or None when readelf is missing or fails.
pub fn readelf_stapsdt(path: &Path) -> Option<Vec<ReadelfNote>> {
    let out = Command::new("readelf")
        .args(["-n", "--wide"])
        .arg(path)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(parse_readelf(&String::from_utf8_lossy(&out.stdout)))
}

/// Parses readelf's "Provider/Name/Location/Arguments" lines.
pub fn parse_readelf(text: &str) -> Vec<ReadelfNote> {
    let hex = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap_or(0);
    let mut notes = Vec::new();
    let mut cur: Option<ReadelfNote> = None;
    for line in text.lines() {
        if let Some((_, p)) = line.split_once("Provider: ") {
            cur = Some(ReadelfNote {
                provider: p.to_string(),
                name: String::new(),
                pc: 0,
                base: 0,
                semaphore: 0,
                args: String::new(),
            });
        } else if let Some(n) = cur.as_mut() {
            let t = line.trim_start();
            if let Some(name) = t.strip_prefix("Name: ") {
                n.name = name.to_string();
            } else if let Some(loc) = t.strip_prefix("Location: ") {
                for part in loc.split(", ") {
                    if let Some(v) = part.strip_prefix("Base: ") {
                        n.base = hex(v);
                    } else if let Some(v) = part.strip_prefix("Semaphore: ") {
                        n.semaphore = hex(v);
                    } else {
                        n.pc = hex(part);
                    }
                }
            } else if let Some(a) = t.strip_prefix("Arguments:") {
                n.args = a.strip_prefix(' ').unwrap_or(a).to_string();
                notes.extend(cur.take());
            }
        }
    }
    notes
}

/// Checks `usdt_trace::elf::parse_file` against readelf for one object and returns the number
/// of sites. Every note readelf shows must be a site (or be explained by a warning), with the
/// same provider, name, pc, semaphore and argument string, and every site must sit on a `nop`:
/// that checks the file offset independently of how it was computed.
///
/// Assumes the object was not prelinked (pc as readelf prints it is final), which holds for
/// everything gcc builds here and for Debian's binaries.
pub fn check_against_readelf(path: &Path) -> Result<usize, String> {
    use std::collections::HashSet;
    use usdt_trace::elf::SiteInsn;
    let theirs =
        readelf_stapsdt(path).ok_or_else(|| format!("readelf failed on {}", path.display()))?;
    let ours = usdt_trace::elf::parse_file(path).map_err(|e| e.to_string())?;
    let key = |p: &str, n: &str, pc: u64, sema: u64, args: &str| {
        (p.to_string(), n.to_string(), pc, sema, args.to_string())
    };
    let theirs: HashSet<_> = theirs
        .iter()
        .map(|n| key(&n.provider, &n.name, n.pc, n.semaphore, &n.args))
        .collect();
    let mut seen = HashSet::new();
    for s in &ours.sites {
        let k = key(&s.provider, &s.name, s.pc, s.semaphore, &s.args_raw);
        if !theirs.contains(&k) {
            return Err(format!(
                "{}: site not in readelf's output: {k:?}",
                path.display()
            ));
        }
        if !seen.insert(k.clone()) {
            return Err(format!("{}: duplicate site {k:?}", path.display()));
        }
        if s.insn != SiteInsn::Nop {
            return Err(format!(
                "{}: {k:?} at file offset {:#x} has bytes {} (expected a nop)",
                path.display(),
                s.file_offset,
                s.insn_bytes
            ));
        }
        if s.args.len() != s.args_raw.split_whitespace().filter(|a| *a != ":").count() {
            return Err(format!("{}: {k:?} lost arguments", path.display()));
        }
    }
    let skipped = ours
        .warnings
        .iter()
        .filter(|w| w.to_string().ends_with("skipped"))
        .count();
    let missing = theirs.len() - seen.len();
    if missing != skipped {
        return Err(format!(
            "{}: readelf shows {} distinct notes, we have {} sites and {} skip warnings: {:?}",
            path.display(),
            theirs.len(),
            seen.len(),
            skipped,
            ours.warnings
        ));
    }
    Ok(ours.sites.len())
}

/// A section's header fields as `readelf -SW` prints them.
#[derive(Clone, Copy, Debug)]
pub struct SectionHeader {
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
}

/// The header of section `name` in `path`, from readelf (an independent reader, so tests can
/// check our parser against it and aim corruptions at known bytes).
pub fn readelf_section(path: &Path, name: &str) -> SectionHeader {
    let out = Command::new("readelf")
        .args(["-SW"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("running readelf: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == name))
        .unwrap_or_else(|| panic!("no {name} in {}", path.display()));
    // "[Nr] Name Type Address Off Size ...": after the "]", columns 2, 3, 4.
    let cols: Vec<&str> = line
        .split(']')
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let hex = |i: usize| {
        cols.get(i)
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .unwrap_or_else(|| panic!("unexpected readelf line {line:?}"))
    };
    SectionHeader {
        addr: hex(2),
        offset: hex(3),
        size: hex(4),
    }
}

/// A 16 MiB file named `name` on a block device, written and fsynced (on the device, not only
/// in the page cache: O_DIRECT reads and dropped pages then reach the disk), in `tmp` (a
/// test's `CARGO_TARGET_TMPDIR`) or else `/var/tmp`; None where both are tmpfs.
pub fn disk_file(tmp: &Path, name: &str) -> Option<PathBuf> {
    let dir = [tmp.to_path_buf(), PathBuf::from("/var/tmp")]
        .into_iter()
        .find(|d| {
            let _ = std::fs::create_dir_all(d);
            let fs = Command::new("stat")
                .args(["-f", "-c", "%T"])
                .arg(d)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            !fs.is_empty() && !["tmpfs", "ramfs"].contains(&fs.as_str())
        })?;
    let path = dir.join(name);
    let data: Vec<u8> = (0..16u32 << 20).map(|i| (i * 31 + 7) as u8).collect();
    std::fs::write(&path, data).expect("write the disk file");
    std::fs::File::open(&path)
        .and_then(|f| f.sync_all())
        .expect("fsync");
    Some(path)
}
