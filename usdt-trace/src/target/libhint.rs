//! An executable without probes whose libraries have them (`java`: its probes are in
//! `libjvm.so`): which libraries to name instead, for the error that says so.
//!
//! The libraries an executable will load are its `DT_NEEDED` entries, recursively, found the
//! way the dynamic loader looks (`DT_RPATH` when there is no `DT_RUNPATH`, then `DT_RUNPATH`,
//! `$ORIGIN` expanded, then the system directories), plus runtime libraries loaded with
//! `dlopen` at well-known places relative to the executable's real path (the JVM's
//! `lib/server/libjvm.so`, which `libjli` opens). The loader's cache is not read: its
//! directories come from `/etc/ld.so.conf.d` instead. Parsing is pure and unit-tested; the
//! search reads files.

use crate::util::pattern::Pattern;
use object::elf;
use object::read::elf::{Dyn, FileHeader};
use object::Endianness;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// What an object's dynamic section says about the libraries it needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dynamic {
    pub needed: Vec<String>,
    pub rpath: Vec<String>,
    pub runpath: Vec<String>,
}

/// The dynamic section of an ELF object's bytes (empty for a static or non-ELF file).
pub fn dynamic(data: &[u8]) -> Dynamic {
    match data.get(4) {
        Some(&elf::ELFCLASS32) => dynamic_class::<elf::FileHeader32<Endianness>>(data),
        Some(&elf::ELFCLASS64) => dynamic_class::<elf::FileHeader64<Endianness>>(data),
        _ => None,
    }
    .unwrap_or_default()
}

fn dynamic_class<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Option<Dynamic> {
    let header = Elf::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, data).ok()?;
    let (dyns, link) = sections.dynamic(endian, data).ok()??;
    let strings = sections.strings(endian, data, link).ok()?;
    let mut d = Dynamic::default();
    for e in dyns {
        let Some(tag) = e.tag32(endian) else { continue };
        let Ok(s) = e.string(endian, strings) else {
            continue;
        };
        let s = String::from_utf8_lossy(s).into_owned();
        match tag {
            elf::DT_NEEDED => d.needed.push(s),
            elf::DT_RPATH => d.rpath.extend(s.split(':').map(str::to_string)),
            elf::DT_RUNPATH => d.runpath.extend(s.split(':').map(str::to_string)),
            _ => {}
        }
    }
    Some(d)
}

/// `$ORIGIN` (and `${ORIGIN}`) in a search path entry: the directory of the object.
pub fn expand_origin(entry: &str, origin: &Path) -> PathBuf {
    let o = origin.display().to_string();
    PathBuf::from(entry.replace("${ORIGIN}", &o).replace("$ORIGIN", &o))
}

/// The directories to look for `dyn`'s needed libraries in, in the loader's order.
pub fn search_dirs(d: &Dynamic, origin: &Path, system: &[PathBuf]) -> Vec<PathBuf> {
    // DT_RPATH is ignored when DT_RUNPATH is present.
    let own = if d.runpath.is_empty() {
        &d.rpath
    } else {
        &d.runpath
    };
    own.iter()
        .filter(|e| !e.is_empty())
        .map(|e| expand_origin(e, origin))
        .chain(system.iter().cloned())
        .collect()
}

/// Libraries a runtime opens with `dlopen`, relative to the directory of the executable's real
/// path: the JVM's (JDK 9+ and JDK 8 layouts).
pub const RUNTIME_LIBS: &[&str] = &[
    "../lib/server/libjvm.so",
    "../lib/client/libjvm.so",
    "../lib/amd64/server/libjvm.so",
    "../jre/lib/amd64/server/libjvm.so",
    "../lib/aarch64/server/libjvm.so",
];

/// The system library directories: the usual ones and those `/etc/ld.so.conf.d` names.
pub(crate) fn system_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/etc/ld.so.conf.d") {
        let mut confs: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        confs.sort();
        for c in confs {
            let text = std::fs::read_to_string(&c).unwrap_or_default();
            dirs.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| l.starts_with('/'))
                    .map(PathBuf::from),
            );
        }
    }
    for d in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// At most this many libraries are opened in the search (a loop guard, far above real trees).
const MAX_LIBS: usize = 256;

/// The libraries `exe` will load, found on disk, without duplicates (by real path).
pub fn libraries_of(exe: &Path) -> Vec<PathBuf> {
    let system = system_dirs();
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut names_seen: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    let Ok(real) = std::fs::canonicalize(exe) else {
        return out;
    };
    seen.insert(real.clone());
    let mut queue = vec![real.clone()];
    while let Some(obj) = queue.pop() {
        if out.len() >= MAX_LIBS {
            break;
        }
        let Ok(data) = std::fs::read(&obj) else {
            continue;
        };
        let d = dynamic(&data);
        let origin = obj.parent().unwrap_or(Path::new("/")).to_path_buf();
        let dirs = search_dirs(&d, &origin, &system);
        for name in &d.needed {
            // The first object that needs a name decides where it is found, as for the loader.
            if !name.contains('/') && !names_seen.insert(name.clone()) {
                continue;
            }
            let found = if name.contains('/') {
                Some(PathBuf::from(name)).filter(|p| p.is_file())
            } else {
                dirs.iter().map(|d| d.join(name)).find(|p| p.is_file())
            };
            if let Some(p) = found.and_then(|p| std::fs::canonicalize(p).ok()) {
                if seen.insert(p.clone()) {
                    out.push(p.clone());
                    queue.push(p);
                }
            }
        }
    }
    if let Some(dir) = real.parent() {
        for rel in RUNTIME_LIBS {
            if let Ok(p) = std::fs::canonicalize(dir.join(rel)) {
                if seen.insert(p.clone()) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// A library with probes, and how many of its sites match the patterns (all, without any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeLib {
    pub path: PathBuf,
    pub sites: usize,
}

/// The libraries `exe` loads that have probe sites matching `patterns` (note patterns only;
/// `fn:` ones are ignored), most sites first.
pub fn probe_libraries(exe: &Path, patterns: &[Pattern]) -> Vec<ProbeLib> {
    let pats: Vec<&Pattern> = patterns
        .iter()
        .filter(|p| p.provider() != Some(crate::elf::FN_PROVIDER))
        .collect();
    let mut libs: Vec<ProbeLib> = libraries_of(exe)
        .into_iter()
        .filter_map(|path| {
            let probes = crate::elf::parse_file(&path).ok()?;
            let sites = probes
                .sites
                .iter()
                .filter(|s| pats.is_empty() || pats.iter().any(|p| p.matches(&s.provider, &s.name)))
                .count();
            (sites > 0).then_some(ProbeLib { path, sites })
        })
        .collect();
    libs.sort_by(|a, b| b.sites.cmp(&a.sites).then_with(|| a.path.cmp(&b.path)));
    libs
}

/// The libraries `exe` loads that define a function `fn_pats` select, in the loader's order.
pub fn function_libraries(exe: &Path, fn_pats: &[&Pattern]) -> Vec<PathBuf> {
    libraries_of(exe)
        .into_iter()
        .filter(|path| {
            crate::elf::functions_file(path).is_ok_and(|f| {
                f.functions.iter().any(|func| {
                    func.names
                        .iter()
                        .any(|n| fn_pats.iter().any(|p| p.matches_function(n)))
                })
            })
        })
        .collect()
}

/// What the error says of `functions` (how many patterns) found in libraries: `libraries it
/// loads define it: A, B and K more`, or None when there is none to name.
pub fn function_hint(libs: &[PathBuf], functions: usize) -> Option<String> {
    libs.first()?;
    let shown: Vec<String> = libs
        .iter()
        .take(SHOWN)
        .map(|l| l.display().to_string())
        .collect();
    let more = match libs.len().saturating_sub(SHOWN) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let it = if functions == 1 { "it" } else { "them" };
    Some(format!(
        "libraries it loads define {it}: {}{more}",
        shown.join(", ")
    ))
}

/// Libraries named in the hint; the rest are counted.
const SHOWN: usize = 3;

/// What the error says: `libraries it loads have them: A (N sites), B (M sites) and K more`,
/// or None when there is none to name.
pub fn hint(libs: &[ProbeLib]) -> Option<String> {
    libs.first()?;
    let shown: Vec<String> = libs
        .iter()
        .take(SHOWN)
        .map(|l| {
            let s = if l.sites == 1 { "" } else { "s" };
            format!("{} ({} site{s})", l.path.display(), l.sites)
        })
        .collect();
    let more = match libs.len().saturating_sub(SHOWN) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    Some(format!(
        "libraries it loads have them: {}{more}",
        shown.join(", ")
    ))
}

/// For an executable without probes: what the error says (see [`hint`]) and the library with
/// the most matching sites, or None when no library it loads has any.
pub fn for_executable(exe: &Path, patterns: &[Pattern]) -> Option<(String, PathBuf)> {
    let libs = probe_libraries(exe, patterns);
    Some((hint(&libs)?, libs.into_iter().next()?.path))
}

/// The command to run instead: the same `watch`, with the richest library as the TARGET.
/// `command` is the `-c` argv (None without -c).
pub fn suggestion(lib: &Path, command: Option<&[String]>, patterns: &[Pattern]) -> String {
    let mut words = vec!["usdt-trace watch".to_string()];
    if let Some(argv) = command {
        // A command that went through sh (`sh -c 'exec ...'`) is not the user's spelling.
        let cmd = if argv.len() == 3 && argv[0] == "sh" && argv[1] == "-c" {
            "CMD".to_string()
        } else {
            argv.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
        };
        let cmd = if cmd == "CMD" { cmd } else { quote(&cmd) };
        words.push(format!("-c {cmd}"));
    }
    words.push(quote(&lib.display().to_string()));
    words.extend(patterns.iter().map(|p| quote(p.as_str())));
    words.join(" ")
}

/// `w` as one shell word.
fn quote(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=+,@%".contains(c))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needed_and_search_paths_of_a_real_executable() {
        // /bin/sh is dynamically linked against libc on every Linux this runs on.
        let data = std::fs::read("/bin/sh").unwrap();
        let d = dynamic(&data);
        assert!(d.needed.iter().any(|n| n.starts_with("libc.so")), "{d:?}");
        assert_eq!(dynamic(b"not an elf file"), Dynamic::default());
        assert_eq!(dynamic(&data[..64]), Dynamic::default(), "truncated");
    }

    #[test]
    fn runpath_hides_rpath_and_origin_expands() {
        let sys = [PathBuf::from("/usr/lib")];
        let mut d = Dynamic {
            needed: vec![],
            rpath: vec!["/old".into()],
            runpath: vec![],
        };
        let origin = Path::new("/opt/jdk/bin");
        assert_eq!(
            search_dirs(&d, origin, &sys),
            [PathBuf::from("/old"), PathBuf::from("/usr/lib")]
        );
        d.runpath = vec!["$ORIGIN/../lib".into(), "${ORIGIN}/x".into(), "".into()];
        assert_eq!(
            search_dirs(&d, origin, &sys),
            [
                PathBuf::from("/opt/jdk/bin/../lib"),
                PathBuf::from("/opt/jdk/bin/x"),
                PathBuf::from("/usr/lib")
            ]
        );
    }

    #[test]
    fn the_hint_names_the_richest_libraries_first_in_one_line() {
        assert_eq!(hint(&[]), None);
        let libs: Vec<ProbeLib> = [
            ("/a/libjvm.so", 517),
            ("/b/libc.so.6", 40),
            ("/c", 1),
            ("/d", 1),
        ]
        .iter()
        .map(|(p, n)| ProbeLib {
            path: PathBuf::from(p),
            sites: *n,
        })
        .collect();
        let h = hint(&libs).unwrap();
        assert_eq!(
            h,
            "libraries it loads have them: /a/libjvm.so (517 sites), /b/libc.so.6 (40 sites), /c (1 site) and 1 more"
        );
    }

    #[test]
    fn the_suggestion_is_a_command_to_paste() {
        let lib = Path::new("/j/libjvm.so");
        let argv: Vec<String> = ["java", "-version"].map(String::from).to_vec();
        let pats = [Pattern::parse("hotspot:gc__*").unwrap()];
        assert_eq!(
            suggestion(lib, Some(&argv), &pats),
            "usdt-trace watch -c 'java -version' /j/libjvm.so 'hotspot:gc__*'"
        );
        assert_eq!(suggestion(lib, None, &[]), "usdt-trace watch /j/libjvm.so");
        let sh: Vec<String> = ["sh", "-c", "exec java >x"].map(String::from).to_vec();
        assert_eq!(
            suggestion(lib, Some(&sh), &[]),
            "usdt-trace watch -c CMD /j/libjvm.so"
        );
        assert_eq!(quote("it's"), r"'it'\''s'");
        let pats = [Pattern::parse("fn:getaddrinfo").unwrap()];
        assert_eq!(
            suggestion(Path::new("/l/libc.so.6"), Some(&argv), &pats),
            "usdt-trace watch -c 'java -version' /l/libc.so.6 fn:getaddrinfo"
        );
    }

    #[test]
    fn a_function_is_found_in_the_library_that_defines_it() {
        let pats = [Pattern::parse("fn:getaddrinfo").unwrap()];
        let pats: Vec<&Pattern> = pats.iter().collect();
        // /bin/sh calls getaddrinfo through the C library, if at all: libc defines it.
        let libs = function_libraries(Path::new("/bin/sh"), &pats);
        assert_eq!(libs.len(), 1, "{libs:?}");
        assert!(
            libs[0].display().to_string().contains("libc.so"),
            "{libs:?}"
        );
        assert_eq!(function_hint(&[], 1), None);
        let many: Vec<PathBuf> = ["/a", "/b", "/c", "/d", "/e"].map(PathBuf::from).to_vec();
        assert_eq!(
            function_hint(&many, 2).unwrap(),
            "libraries it loads define them: /a, /b, /c and 2 more"
        );
        assert_eq!(quote(""), "''");
    }
}
