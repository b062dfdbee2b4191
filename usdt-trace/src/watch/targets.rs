//! Opening what `watch` traces: the named files, a file as the `-p` processes map it (a
//! container's path, checked by device and inode), or every object with probes that the
//! processes map, each opened once and with its `fn:` sites added. Also the "no probes" errors
//! and their library hints. Apart from the driver because it is the first stage, and the only
//! one that reads `/proc/PID/maps` before the plan exists.

use super::{WatchConfig, WatchError};
use crate::target::procmaps::ProcError;
use crate::target::{self, Object};
use crate::util::terminal::clean;
use std::collections::BTreeSet;
use std::io::{self, Write};

/// The object a process maps for a path the user named: the path as the process sees it
/// (a container's `/usr/bin/app`), or a host path to the same file.
fn mapped_by(pid: u32, named: &std::path::Path) -> Result<Option<Object>, WatchError> {
    use std::os::unix::fs::MetadataExt;
    let host = std::fs::metadata(named)
        .ok()
        .map(|m| ((libc::major(m.dev()), libc::minor(m.dev())), m.ino()));
    for m in crate::target::procmaps::mapped_objects(pid)? {
        let same_path = std::path::Path::new(&m.path) == named;
        let same_file = host == Some((m.dev, m.inode));
        if same_path || same_file {
            // Checked against the mapping (device and inode): a path the process controls
            // cannot redirect root to another file.
            return Ok(Some(target::open_mapped(
                pid,
                &m,
                &named.display().to_string(),
            )?));
        }
    }
    Ok(None)
}

/// The objects to trace: the named files, else every object with probes that the `-p`
/// processes map (each file once).
pub(crate) fn open_targets(cfg: &WatchConfig) -> Result<Vec<Object>, WatchError> {
    let fn_pats = crate::plan::functions::fn_patterns(&cfg.patterns);
    let mut objects: Vec<Object> = Vec::new();
    let mut seen = BTreeSet::new();
    for t in &cfg.targets {
        let o = if cfg.pids.is_empty() {
            target::open(&t.display().to_string(), t)?
        } else {
            // A path named with -p is the process's file: found through its mappings, so
            // that a container's path works and a file the process does not map is an error
            // rather than a silent run with nothing to see.
            if let Some(&pid) = cfg.pids.iter().find(|&&p| !target::pid_alive(p)) {
                return Err(ProcError::NoSuchProcess { pid }.into());
            }
            let mut found = None;
            for &pid in &cfg.pids {
                if let Some(o) = mapped_by(pid, t)? {
                    found = Some(o);
                    break;
                }
            }
            match found {
                Some(o) => o,
                // A library the process will load later is traced from this file (the
                // uprobes wait on its inode), but say so: it may be the wrong file.
                None if t.exists() => {
                    eprintln!(
                        "warning: {} is not mapped by process {} (yet): its probes fire only if the process loads this very file",
                        clean(&t.display().to_string()),
                        join_pids(&cfg.pids)
                    );
                    target::open(&t.display().to_string(), t)?
                }
                None => {
                    return Err(WatchError::NotMapped {
                        path: t.display().to_string(),
                        pids: join_pids(&cfg.pids),
                    })
                }
            }
        };
        let mut o = o;
        crate::plan::functions::add_function_sites(&mut o, &fn_pats, cfg.fn_placement())?;
        // The same file named twice (a path and a symlink to it) is traced once.
        if seen.insert((o.dev, o.inode)) {
            objects.push(o);
        }
    }
    // `--process`: each running one's executable, opened as it maps it, once per file.
    let per_name = crate::target::procnames::executables(&cfg.processes);
    for (name, found) in cfg.processes.iter().zip(per_name) {
        if found.procs.is_empty() {
            return Err(match found.denied.first() {
                Some(&pid) => WatchError::ProcessNotReadable {
                    name: name.clone(),
                    n: found.denied.len(),
                    pid,
                },
                None => WatchError::NoProcessNamed(name.clone()),
            });
        }
        for (pid, m) in found.procs {
            if seen.contains(&(libc::makedev(m.dev.0, m.dev.1), m.inode)) {
                continue;
            }
            // One that exited or exec'd since the scan is passed over; another of the same
            // file still stands for it.
            let Ok(mut o) = target::open_mapped(pid, &m, &m.shown()) else {
                continue;
            };
            crate::plan::functions::add_function_sites(&mut o, &fn_pats, cfg.fn_placement())?;
            if seen.insert((o.dev, o.inode)) {
                objects.push(o);
            }
        }
    }
    // The first file a `-p` process maps that we may not open: when nothing with probes
    // could be opened, that is the error (not "no USDT probes"), and it says what is missing.
    let mut denied: Option<String> = None;
    if cfg.targets.is_empty() && cfg.processes.is_empty() {
        for &pid in &cfg.pids {
            for m in target::open_process(pid)? {
                // Objects that are not ELF (fonts, locale archives) or have no probes are
                // not what the user is after.
                let mut o = match m.object {
                    Ok(o) => o,
                    Err(target::TargetError::Open { path, source })
                        if source.kind() == io::ErrorKind::PermissionDenied =>
                    {
                        denied.get_or_insert_with(|| format!("{path}: {source}"));
                        continue;
                    }
                    Err(_) => continue,
                };
                crate::plan::functions::add_function_sites(&mut o, &fn_pats, cfg.fn_placement())?;
                if !o.probes.sites.is_empty() && seen.insert((o.dev, o.inode)) {
                    objects.push(o);
                }
            }
        }
    }
    let mut err = io::stderr();
    for o in &objects {
        for w in &o.probes.warnings {
            let _ = writeln!(
                err,
                "warning: {}: {}",
                clean(&o.shown),
                clean(&w.to_string())
            );
        }
    }
    if cfg.targets.len() == 1 && cfg.pids.is_empty() {
        function_in_library(cfg, &fn_pats, &objects)?;
    }
    // With `fn:` patterns, the plan names the pattern that matched no function.
    if objects.iter().all(|o| o.probes.sites.is_empty())
        && (fn_pats.is_empty() || objects.is_empty())
        && !cfg.waits()
    {
        if let Some(first) = denied {
            return Err(WatchError::ProcessFilesDenied {
                pids: join_pids(&cfg.pids),
                first,
            });
        }
        let what = if cfg.targets.is_empty() && cfg.processes.is_empty() {
            format!("process {}", join_pids(&cfg.pids))
        } else {
            let shown: Vec<&str> = objects.iter().map(|o| o.shown.as_str()).collect();
            shown.join(", ")
        };
        // Only a file named (or run with -c) gets the hint: a process's mappings were all
        // looked at already.
        let found = if cfg.targets.len() == 1 && cfg.pids.is_empty() {
            crate::target::libhint::for_executable(&cfg.targets[0], &cfg.patterns)
        } else {
            None
        };
        return Err(match found {
            Some((hint, lib)) => WatchError::NoProbesHint {
                what,
                hint,
                suggestion: crate::target::libhint::suggestion(
                    &lib,
                    cfg.command.as_deref(),
                    &cfg.patterns,
                ),
            },
            None => WatchError::NoProbes(what),
        });
    }
    Ok(objects)
}

/// A program that does not define the functions its `fn:` patterns name, but loads a library
/// that does (curl and libc's `getaddrinfo`): the error names the library and the command that
/// traces it there, as for a program whose libraries have the USDT probes.
fn function_in_library(
    cfg: &WatchConfig,
    fn_pats: &[&crate::util::pattern::Pattern],
    objects: &[Object],
) -> Result<(), WatchError> {
    let missing: Vec<&crate::util::pattern::Pattern> = fn_pats
        .iter()
        .copied()
        .filter(|p| {
            !objects.iter().any(|o| {
                o.probes
                    .sites
                    .iter()
                    .any(|s| crate::elf::function_of(s).is_some_and(|f| p.matches_function(f)))
            })
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let libs = crate::target::libhint::function_libraries(&cfg.targets[0], &missing);
    let (Some(hint), Some(lib)) = (
        crate::target::libhint::function_hint(&libs, missing.len()),
        libs.first(),
    ) else {
        return Ok(());
    };
    let shown: Vec<&str> = objects.iter().map(|o| o.shown.as_str()).collect();
    let patterns: Vec<String> = missing.iter().map(|p| p.to_string()).collect();
    Err(WatchError::FunctionInLibrary {
        patterns: patterns.join(" "),
        what: shown.join(", "),
        hint,
        suggestion: crate::target::libhint::suggestion(lib, cfg.command.as_deref(), &cfg.patterns),
    })
}

fn join_pids(pids: &[u32]) -> String {
    let v: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
    v.join(", ")
}
