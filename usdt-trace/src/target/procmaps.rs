//! `/proc/PID/maps` → the ELF objects a process has mapped.
//!
//! To list or trace the probes of a running process we need every file it mapped, once, and a
//! path this process can open that names the *same inode* the target mapped:
//!
//! - The path in `maps` is as the target sees it. In another mount namespace (a container) it
//!   means nothing here, but `/proc/PID/root/<path>` does.
//! - A file deleted or replaced on disk after it was mapped shows ` (deleted)`; its old inode is
//!   still reachable through `/proc/PID/map_files/START-END` (root only). memfd-backed objects
//!   (`/memfd:name (deleted)`) come through the same door.
//! - Objects are told apart by (device, inode), not by path: one file may be mapped many times
//!   (one mapping per segment) and two paths may name one file.
//!
//! - Paths are bytes, not UTF-8: a file name may hold any byte but `/` and NUL. The kernel writes
//!   a newline in a name as `\012` (so one line is one mapping); that escape is undone here.
//!
//! The parser is pure and tested on sample text; [`mapped_objects`] adds the `/proc` reads.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    /// `r-xp` and the like.
    pub perms: String,
    pub offset: u64,
    /// (major, minor) of the device holding the file; (0, 0) for anonymous memory.
    pub dev: (u32, u32),
    pub inode: u64,
    /// The path or pseudo-name (`[vdso]`, `[heap]`), without the ` (deleted)` suffix and with
    /// the kernel's `\012` escapes undone; None for anonymous mappings.
    pub path: Option<PathBuf>,
    /// The kernel marked the file ` (deleted)`.
    pub deleted: bool,
}

impl MapEntry {
    /// A mapping of a real file (not anonymous memory or a `[pseudo]` region).
    pub fn is_file_backed(&self) -> bool {
        self.inode != 0
            && self
                .path
                .as_deref()
                .is_some_and(|p| p.as_os_str().as_bytes().starts_with(b"/"))
    }
}

/// A distinct file mapped by a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedObject {
    /// The path as the process sees it (bytes; show it with [`MappedObject::shown`]).
    pub path: PathBuf,
    /// A path this process can open for the same inode (what to read and attach to). For a
    /// file not deleted it goes through `/proc/PID/root`, which the target can redirect (an
    /// absolute symlink planted in its own mount namespace resolves on *our* side): check what
    /// it opens against `dev`/`inode` before trusting it (see `target::open_mapped`).
    pub host_path: PathBuf,
    /// `/proc/PID/map_files/START-END` of the first mapping: always the mapped file itself,
    /// but only root can open it.
    pub map_files: PathBuf,
    pub dev: (u32, u32),
    pub inode: u64,
    pub deleted: bool,
    /// Start of the object's first mapping.
    pub start: u64,
}

impl MappedObject {
    /// The path for people: not UTF-8 bytes replaced. Control characters (a newline) are kept
    /// here; text output escapes them with `terminal::clean`.
    pub fn shown(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("no process with PID {pid}")]
    NoSuchProcess { pid: u32 },
    /// Kernel threads map no files and run no user code: there is nothing to list or trace.
    #[error("PID {pid} is a kernel thread ({comm}): it has no user-space code to trace")]
    KernelThread { pid: u32, comm: String },
    #[error("reading /proc/{pid}/maps: {source}")]
    Io {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("/proc/{pid}/maps line {line}: {reason}")]
    BadLine {
        pid: u32,
        line: usize,
        reason: String,
    },
}

/// Parses one line. The path is everything after the inode column and its padding, so paths with
/// spaces survive.
pub fn parse_line(line: &[u8]) -> Result<MapEntry, String> {
    let mut rest = line;
    let mut field = |what: &str| -> Result<&str, String> {
        let start = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
        let t = &rest[start..];
        let end = t.iter().position(|&b| b == b' ').unwrap_or(t.len());
        if end == 0 {
            return Err(format!("missing {what}"));
        }
        rest = &t[end..];
        // The numeric columns are ASCII; anything else is a bad line, not a panic.
        std::str::from_utf8(&t[..end]).map_err(|_| format!("bad {what} (not text)"))
    };
    let hex =
        |s: &str, what: &str| u64::from_str_radix(s, 16).map_err(|_| format!("bad {what} {s:?}"));
    let range = field("address range")?;
    let (start, end) = range
        .split_once('-')
        .ok_or_else(|| format!("bad address range {range:?}"))?;
    let (start, end) = (hex(start, "start")?, hex(end, "end")?);
    let perms = field("permissions")?.to_string();
    let offset = hex(field("offset")?, "offset")?;
    let dev_s = field("device")?;
    let (maj, min) = dev_s
        .split_once(':')
        .ok_or_else(|| format!("bad device {dev_s:?}"))?;
    let dev = (
        u32::from_str_radix(maj, 16).map_err(|_| format!("bad device {dev_s:?}"))?,
        u32::from_str_radix(min, 16).map_err(|_| format!("bad device {dev_s:?}"))?,
    );
    let inode_s = field("inode")?;
    let inode = inode_s
        .parse::<u64>()
        .map_err(|_| format!("bad inode {inode_s:?}"))?;
    // The kernel pads with spaces to a column, then prints the path verbatim but for a
    // newline, written "\012" so that one line is one mapping.
    let start_of_name = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
    let name = &rest[start_of_name..];
    let (path, deleted) = match name.strip_suffix(b" (deleted)") {
        Some(p) => (p, true),
        None => (name, false),
    };
    Ok(MapEntry {
        start,
        end,
        perms,
        offset,
        dev,
        inode,
        path: (!path.is_empty()).then(|| PathBuf::from(OsString::from_vec(unescape(path)))),
        deleted,
    })
}

/// Undoes the kernel's `\ooo` octal escapes in a maps path (`mangle_path` writes a newline as
/// `\012`). A backslash not followed by three octal digits is kept: the kernel does not escape
/// backslashes, so a name may hold one.
pub fn unescape(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        if name[i] == b'\\' {
            if let Some(d) = name.get(i + 1..i + 4) {
                if d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3' {
                    out.push((d[0] - b'0') << 6 | (d[1] - b'0') << 3 | (d[2] - b'0'));
                    i += 4;
                    continue;
                }
            }
        }
        out.push(name[i]);
        i += 1;
    }
    out
}

/// Parses a whole maps file; errors carry the 1-based line number.
pub fn parse_maps(text: &[u8]) -> Result<Vec<MapEntry>, (usize, String)> {
    text.split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.iter().all(|b| b.is_ascii_whitespace()))
        .map(|(i, l)| parse_line(l).map_err(|e| (i + 1, e)))
        .collect()
}

/// The distinct file-backed objects among `entries`, in address order of first mapping, with
/// host paths under `/proc/PID/`.
pub fn objects_from_entries(pid: u32, entries: &[MapEntry]) -> Vec<MappedObject> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for e in entries.iter().filter(|e| e.is_file_backed()) {
        if !seen.insert((e.dev, e.inode)) {
            continue;
        }
        let path = e.path.clone().unwrap_or_default();
        let map_files = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", e.start, e.end));
        let host_path = if e.deleted {
            map_files.clone()
        } else {
            let mut p = OsString::from(format!("/proc/{pid}/root"));
            p.push(path.as_os_str());
            PathBuf::from(p)
        };
        out.push(MappedObject {
            path,
            host_path,
            map_files,
            dev: e.dev,
            inode: e.inode,
            deleted: e.deleted,
            start: e.start,
        });
    }
    out
}

/// The state letter of a `/proc/PID/stat` line (`R`, `S`, `Z`, ...). It follows the
/// parenthesised comm, which may itself hold `)` and spaces, so look after the last `)`.
pub fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
}

/// The `flags` field of a `/proc/PID/stat` line (the 7th after the comm).
pub fn stat_flags(stat: &str) -> Option<u64> {
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(6))
        .and_then(|f| f.parse().ok())
}

/// `PF_KTHREAD` in `<linux/sched.h>`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Some(comm) when `pid` is a kernel thread.
fn kernel_thread(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    if stat_flags(&stat)? & PF_KTHREAD == 0 {
        return None;
    }
    let comm = stat.split_once('(')?.1.rsplit_once(')')?.0;
    Some(crate::util::terminal::clean(comm).into_owned())
}

/// Every distinct file a live process has mapped.
pub fn mapped_objects(pid: u32) -> Result<Vec<MappedObject>, ProcError> {
    let text = match std::fs::read(format!("/proc/{pid}/maps")) {
        Ok(t) => t,
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ESRCH) =>
        {
            return Err(ProcError::NoSuchProcess { pid })
        }
        Err(source) => return Err(ProcError::Io { pid, source }),
    };
    // A kernel thread, a zombie or a process exiting under us has an empty maps file.
    if text.is_empty() && !Path::new(&format!("/proc/{pid}/exe")).exists() {
        if let Some(comm) = kernel_thread(pid) {
            return Err(ProcError::KernelThread { pid, comm });
        }
        return Err(ProcError::NoSuchProcess { pid });
    }
    let entries =
        parse_maps(&text).map_err(|(line, reason)| ProcError::BadLine { pid, line, reason })?;
    Ok(objects_from_entries(pid, &entries))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stat_state_reads_past_a_comm_with_parens() {
        assert_eq!(stat_state("42 (a) b) c) Z 1 2 3"), Some('Z'));
        assert_eq!(stat_state("7 (bash) S 1"), Some('S'));
        assert_eq!(stat_state("garbage"), None);
    }

    const SAMPLE: &str = "\
55d0c1a00000-55d0c1a02000 r--p 00000000 fd:01 1048602                    /usr/bin/my prog
55d0c1a02000-55d0c1a03000 r-xp 00002000 fd:01 1048602                    /usr/bin/my prog
55d0c2b3e000-55d0c2b5f000 rw-p 00000000 00:00 0                          [heap]
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 
7f1e2d1d4000-7f1e2d1fa000 r--p 00000000 fd:01 1054125                    /usr/lib/x86_64-linux-gnu/libc.so.6
7f1e2d1fa000-7f1e2d34f000 r-xp 00026000 fd:01 1054125                    /usr/lib/x86_64-linux-gnu/libc.so.6
7f1e2d400000-7f1e2d401000 r-xp 00000000 00:05 4321                       /tmp/libold.so (deleted)
7f1e2d500000-7f1e2d501000 r-xp 00000000 00:01 99                         /memfd:jit (deleted)
7ffc8a1b2000-7ffc8a1d3000 rw-p 00000000 00:00 0                          [stack]
7ffc8a1f8000-7ffc8a1fa000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    #[test]
    fn parses_every_kind_of_line() {
        let e = parse_maps(SAMPLE.as_bytes()).unwrap();
        assert_eq!(e.len(), 11);
        assert_eq!(e[0].path.as_deref(), Some(Path::new("/usr/bin/my prog")));
        assert_eq!(e[1].start, 0x55d0c1a02000);
        assert_eq!(e[1].offset, 0x2000);
        assert_eq!(e[1].perms, "r-xp");
        assert_eq!(e[1].dev, (0xfd, 1));
        assert_eq!(e[1].inode, 1048602);
        assert_eq!(e[2].path.as_deref(), Some(Path::new("[heap]")));
        assert!(!e[2].is_file_backed());
        assert_eq!(e[3].path, None);
        assert!(e[6].deleted);
        assert_eq!(e[6].path.as_deref(), Some(Path::new("/tmp/libold.so")));
        assert_eq!(e[9].path.as_deref(), Some(Path::new("[vdso]")));
        assert_eq!(e[10].end, 0xffffffffff601000);
    }

    #[test]
    fn objects_are_distinct_by_inode_with_host_paths() {
        let objs = objects_from_entries(42, &parse_maps(SAMPLE.as_bytes()).unwrap());
        let paths: Vec<String> = objs.iter().map(|o| o.shown()).collect();
        assert_eq!(
            paths,
            [
                "/usr/bin/my prog",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "/tmp/libold.so",
                "/memfd:jit"
            ]
        );
        assert_eq!(
            objs[0].host_path,
            PathBuf::from("/proc/42/root/usr/bin/my prog")
        );
        assert_eq!(
            objs[2].host_path,
            PathBuf::from("/proc/42/map_files/7f1e2d400000-7f1e2d401000")
        );
        assert!(objs[3].deleted);
    }

    #[test]
    fn short_addresses_use_unpadded_map_files_names() {
        let e = parse_line(b"00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/old (deleted)")
            .unwrap();
        let objs = objects_from_entries(7, &[e]);
        assert_eq!(
            objs[0].host_path,
            PathBuf::from("/proc/7/map_files/400000-452000")
        );
    }

    #[test]
    fn bad_lines_are_errors_not_panics() {
        for bad in [
            "",
            "zz-1 r-xp 0 fd:01 1 /x",
            "1-2",
            "1-2 r-xp 0 fd01 1",
            "1-2 r-xp 0 fd:01 x /a",
            "1 r-xp 0 fd:01 1",
        ] {
            assert!(parse_line(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(parse_line(b"1-2 r-xp \xff fd:01 1 /a").is_err());
        assert_eq!(
            parse_maps(b"1-2 r-xp 0 fd:01 1 /a\nbogus\n").unwrap_err().0,
            2
        );
    }

    #[test]
    fn paths_are_bytes_with_newline_escapes_undone() {
        let e =
            parse_line(b"1000-2000 r-xp 00000000 fd:01 7 /tmp/a\\012b\xff c (deleted)").unwrap();
        assert_eq!(e.path.unwrap().as_os_str().as_bytes(), b"/tmp/a\nb\xff c");
        assert!(e.deleted);
        assert_eq!(unescape(b"a\\012b\\\\c\\9xy\\12"), b"a\nb\\\\c\\9xy\\12");
        let objs = objects_from_entries(
            3,
            &[parse_line(b"1000-2000 r-xp 00000000 fd:01 7 /t/\xff\\012").unwrap()],
        );
        assert_eq!(
            objs[0].host_path.as_os_str().as_bytes(),
            b"/proc/3/root/t/\xff\n"
        );
        assert_eq!(objs[0].shown(), "/t/\u{fffd}\n");
    }

    #[test]
    fn kernel_threads_are_told_apart() {
        assert_eq!(
            stat_flags("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0"),
            Some(2129984)
        );
        assert_eq!(stat_flags("2 (a) b) S 0 0 0 0 -1 7"), Some(7));
        assert_eq!(stat_flags("2 (x) S 0"), None);
        // PID 2 is kthreadd on every Linux system.
        match mapped_objects(2) {
            Err(e @ ProcError::KernelThread { .. }) => {
                assert!(e.to_string().contains("kernel thread"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn live_process_and_dead_pid() {
        let objs = mapped_objects(std::process::id()).unwrap();
        assert!(objs.iter().any(|o| o.host_path.exists()));
        // PIDs above pid_max (at most 2^22) never exist.
        assert!(matches!(
            mapped_objects(4_194_304 + 12345),
            Err(ProcError::NoSuchProcess { .. })
        ));
    }
}
