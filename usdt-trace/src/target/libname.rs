//! bpftrace's probe spellings (`uprobe:PATH:FUNC`, `uretprobe:PATH:FUNC`, `usdt:PATH:PATTERN`)
//! and the short library names they allow (`uprobe:libc:getaddrinfo`).
//!
//! A library named without a `/` is found the way the dynamic loader would find it for what is
//! traced: with `-p`, among the files the process maps; for a program (`-c`, or a TARGET named
//! before it), among the libraries it loads (its `DT_NEEDED` closure, searched as
//! [`crate::target::libhint`] does); with neither, in the system library directories. `libc` names
//! `libc.so.6` (as bpftrace's `uprobe:libc:...` does), `libc.so` and `libc.so.6` too. Splitting
//! the spelling and matching names are pure; the search reads files.

use std::path::{Path, PathBuf};

/// Why a bpftrace spelling or a library name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LibNameError {
    #[error("{spec:?}: {kind}: needs a function ({kind}:PATH:FUNC, e.g. {kind}:libc:getaddrinfo)")]
    NoFunction { spec: String, kind: &'static str },
    #[error("{spec:?}: offsets and addresses are not traced; name a function (FUNC or a glob)")]
    Offset { spec: String },
    #[error("no library called {name} in {scope} (a name without '/' is a library file name: libc, libc.so.6; or give its path)")]
    NotFound { name: String, scope: String },
}

/// The bpftrace prefix of an argument and whether it names functions (`uprobe`, `uretprobe`)
/// rather than notes (`usdt`).
pub fn bpftrace_kind(arg: &str) -> Option<(&'static str, &str)> {
    ["uprobe", "uretprobe", "usdt"].into_iter().find_map(|k| {
        arg.strip_prefix(k)
            .and_then(|r| r.strip_prefix(':'))
            .map(|rest| (k, rest))
    })
}

/// `PATH[:REST]` split where the path ends: at the first ':' after its last '/'.
pub fn split_path(rest: &str) -> (&str, &str) {
    let slash = rest.rfind('/').map_or(0, |i| i + 1);
    match rest[slash..].find(':') {
        Some(i) => (&rest[..slash + i], &rest[slash + i + 1..]),
        None => (rest, ""),
    }
}

/// `uprobe:PATH:FUNC` or `uretprobe:PATH:FUNC` (`rest` is what follows the prefix): the path
/// and our pattern for it, `fn:FUNC`. Both mean the whole span, entry to return.
pub fn function_probe<'a>(
    kind: &'static str,
    rest: &'a str,
    spec: &str,
) -> Result<(&'a str, String), LibNameError> {
    let (path, func) = split_path(rest);
    if func.is_empty() {
        return Err(LibNameError::NoFunction {
            spec: spec.to_string(),
            kind,
        });
    }
    // bpftrace's `FUNC+OFFSET` and `0xADDR` probe one instruction, which a span has no use for.
    if func.contains('+') || func.starts_with("0x") {
        return Err(LibNameError::Offset {
            spec: spec.to_string(),
        });
    }
    Ok((
        path,
        format!("{}:{func}", crate::util::pattern::FN_PROVIDER),
    ))
}

/// Whether the file `file_name` is the library `name` names: the same name, or the name
/// followed by `.so` and a version (`libc` → `libc.so.6`), a `.so` name by its version
/// (`libc.so` → `libc.so.6`), or the name by `-` and a version (`libc-2.31.so`).
pub fn names_library(name: &str, file_name: &str) -> bool {
    if name.is_empty() {
        return false;
    }
    match file_name.strip_prefix(name) {
        Some("") => true,
        Some(rest) => {
            let version = |v: &str| v.starts_with(|c: char| c.is_ascii_digit());
            rest.starts_with(".so")
                // `libc.so` → `libc.so.6`
                || (name.contains(".so") && rest.strip_prefix('.').is_some_and(version))
                || rest
                    .strip_prefix('-')
                    .is_some_and(version)
        }
        None => false,
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn is_elf(p: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"\x7fELF")
}

/// Where a library name is looked for.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// The program whose libraries count (the `-c` program, or a TARGET named before).
    pub exe: Option<PathBuf>,
    /// `-p` processes: the files they map.
    pub pids: Vec<u32>,
}

impl Scope {
    fn describe(&self) -> String {
        if !self.pids.is_empty() {
            let p: Vec<String> = self.pids.iter().map(u32::to_string).collect();
            format!("the files process {} maps", p.join(", "))
        } else if let Some(exe) = &self.exe {
            format!("the libraries {} loads", exe.display())
        } else {
            "the system library directories".to_string()
        }
    }

    /// The library `name` names, as the loader would find it in this scope.
    pub fn resolve(&self, name: &str) -> Result<PathBuf, LibNameError> {
        let not_found = || LibNameError::NotFound {
            name: name.to_string(),
            scope: self.describe(),
        };
        if !self.pids.is_empty() {
            // The path as the process sees it: `watch` finds it again through the mappings.
            return self
                .pids
                .iter()
                .filter_map(|&pid| crate::target::procmaps::mapped_objects(pid).ok())
                .flatten()
                .map(|m| m.path)
                .find(|p| names_library(name, &file_name(p)))
                .ok_or_else(not_found);
        }
        if let Some(exe) = &self.exe {
            return std::iter::once(exe.clone())
                .chain(crate::target::libhint::libraries_of(exe))
                .find(|p| names_library(name, &file_name(p)))
                .ok_or_else(not_found);
        }
        for dir in crate::target::libhint::system_dirs() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut found: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                // `libc.so` is the linker's script, not what the loader maps.
                .filter(|p| names_library(name, &file_name(p)) && is_elf(p))
                .collect();
            // `libc.so.6` before `libc.so.6.1`: the shortest name is the loader's soname.
            found.sort_by_key(|p| (file_name(p).len(), p.clone()));
            if let Some(p) = found.into_iter().next() {
                return Ok(p);
            }
        }
        Err(not_found())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefixes_and_where_the_path_ends() {
        assert_eq!(bpftrace_kind("uprobe:/x:f"), Some(("uprobe", "/x:f")));
        assert_eq!(
            bpftrace_kind("uretprobe:libc:f"),
            Some(("uretprobe", "libc:f"))
        );
        assert_eq!(bpftrace_kind("usdt:/x:p:n"), Some(("usdt", "/x:p:n")));
        assert_eq!(bpftrace_kind("uprobes:x"), None);
        assert_eq!(bpftrace_kind("fn:uprobe"), None);
        assert_eq!(split_path("/a:b/c.so:f:g"), ("/a:b/c.so", "f:g"));
        assert_eq!(split_path("libc:getaddrinfo"), ("libc", "getaddrinfo"));
        assert_eq!(split_path("/bin/sh"), ("/bin/sh", ""));
    }

    #[test]
    fn uprobe_and_uretprobe_are_a_function_span() {
        let f = |k, r| function_probe(k, r, "spec");
        assert_eq!(
            f("uprobe", "/lib/x86_64-linux-gnu/libc.so.6:getaddrinfo"),
            Ok(("/lib/x86_64-linux-gnu/libc.so.6", "fn:getaddrinfo".into()))
        );
        assert_eq!(f("uretprobe", "libc:get*"), Ok(("libc", "fn:get*".into())));
        // C++ names keep their colons.
        assert_eq!(f("uprobe", "/x:ns::f"), Ok(("/x", "fn:ns::f".into())));
        assert!(matches!(
            f("uprobe", "/x"),
            Err(LibNameError::NoFunction { .. })
        ));
        assert!(matches!(
            f("uprobe", "/x:f+4"),
            Err(LibNameError::Offset { .. })
        ));
        assert!(matches!(
            f("uprobe", "/x:0x1234"),
            Err(LibNameError::Offset { .. })
        ));
        assert_eq!(
            f("uretprobe", "libc").unwrap_err().to_string(),
            "\"spec\": uretprobe: needs a function (uretprobe:PATH:FUNC, e.g. uretprobe:libc:getaddrinfo)"
        );
    }

    #[test]
    fn library_names_as_bpftrace_spells_them() {
        assert!(names_library("libc", "libc.so.6"));
        assert!(names_library("libc.so", "libc.so.6"));
        assert!(names_library("libc.so.6", "libc.so.6"));
        assert!(names_library("libc", "libc-2.31.so"));
        assert!(!names_library("libc", "libcrypt.so.1"));
        assert!(!names_library("libc", "libc_malloc_debug.so.0"));
        assert!(!names_library("libc", "libc-dev"));
        assert!(!names_library("", "libc.so.6"));
    }

    #[test]
    fn a_short_name_is_found_among_what_a_program_loads() {
        // /bin/sh loads the C library on every Linux this runs on.
        let s = Scope {
            exe: Some(PathBuf::from("/bin/sh")),
            pids: vec![],
        };
        let libc = s.resolve("libc").unwrap();
        assert!(file_name(&libc).starts_with("libc.so"), "{libc:?}");
        // In the system directories: the library, not the linker script `libc.so`.
        let sys = Scope::default().resolve("libc").unwrap();
        assert!(file_name(&sys).starts_with("libc.so."), "{sys:?}");
        let me = Scope {
            exe: None,
            pids: vec![std::process::id()],
        };
        assert!(file_name(&me.resolve("libc").unwrap()).starts_with("libc.so"));
        let e = s.resolve("libnosuch_xyz").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no library called libnosuch_xyz in the libraries /bin/sh loads (a name without '/' is a library file name: libc, libc.so.6; or give its path)"
        );
    }
}
