//! Positional arguments → the files to trace and the patterns: paths, programs on PATH,
//! bpftrace's `usdt:`/`uprobe:`/`uretprobe:` spellings with their library names, and the
//! `#!` scripts refused for their interpreter. Apart from `validate` because `list` and
//! `watch` share it.

use super::UsageError;
use crate::util::pattern::Pattern;
use std::path::{Path, PathBuf};

/// Split positional arguments into files and patterns, by one rule that never guesses from
/// what happens to exist: `fn:GLOB` is a pattern; an argument with '/' is a file;
/// bpftrace's `usdt:PATH[:PATTERN]` and `uprobe:PATH:FUNC` / `uretprobe:PATH:FUNC` (our
/// `fn:FUNC`) are both, a PATH without '/' being a program here or on PATH, else a library
/// found in `scope` (see [`crate::target::libname`]); when `first_may_be_file` (no -p), the first other
/// argument is a file if it names one here or a program on PATH; every other argument is a
/// pattern. So `list python3.11 gc__start` filters on gc__start even if a file of that name
/// exists here (write ./gc__start for the file).
pub(crate) fn split_targets(
    args: &[String],
    first_may_be_file: bool,
    scope: &crate::target::libname::Scope,
) -> Result<(Vec<PathBuf>, Vec<Pattern>), UsageError> {
    let mut targets: Vec<PathBuf> = Vec::new();
    let mut patterns = Vec::new();
    let mut first = first_may_be_file;
    for a in args {
        if let Some((kind, rest)) = crate::target::libname::bpftrace_kind(a) {
            let (path, pattern) = if kind == "usdt" {
                let (path, pattern) = crate::target::libname::split_path(rest);
                (path, pattern.to_string())
            } else {
                crate::target::libname::function_probe(kind, rest, a)?
            };
            // A library name is looked for in what a program named before it loads.
            let scope = match (&scope.exe, targets.first()) {
                (None, Some(t)) if scope.pids.is_empty() => crate::target::libname::Scope {
                    exe: Some(t.clone()),
                    pids: vec![],
                },
                _ => scope.clone(),
            };
            targets.push(resolve_object(path, &scope)?);
            if !pattern.is_empty() {
                patterns.push(Pattern::parse(&pattern)?);
            }
        } else if a.starts_with("fn:") {
            // Go function names hold '/' (`fn:net/http.serverHandler.ServeHTTP`).
            patterns.push(Pattern::parse(a)?);
        } else if a.contains('/') {
            targets.push(PathBuf::from(a));
        } else if first && !a.contains([':', '*', '?', '[']) && file_or_program(a).is_some() {
            targets.push(file_or_program(a).unwrap_or_default());
        } else {
            patterns.push(Pattern::parse(a)?);
        }
        first = false;
    }
    for t in &targets {
        check_not_script(t)?;
    }
    Ok((targets, patterns))
}

/// The PATH of a bpftrace spelling: a path, a file here or a program on PATH, else a library
/// name resolved in `scope`.
fn resolve_object(p: &str, scope: &crate::target::libname::Scope) -> Result<PathBuf, UsageError> {
    if p.contains('/') {
        return Ok(PathBuf::from(p));
    }
    match file_or_program(p) {
        Some(f) => Ok(f),
        None => Ok(scope.resolve(p)?),
    }
}

/// `name` as a file here, else as a program on PATH. Anything here but a directory counts as
/// the file (a FIFO, a device): it is then refused for what it is, not taken for a pattern
/// that matches nothing.
pub(crate) fn file_or_program(name: &str) -> Option<PathBuf> {
    let here = Path::new(name);
    if here.metadata().is_ok_and(|m| !m.is_dir()) {
        return Some(here.to_path_buf());
    }
    which(name)
}

pub(crate) fn resolve_program(p: &str) -> PathBuf {
    if p.contains('/') {
        PathBuf::from(p)
    } else {
        file_or_program(p).unwrap_or_else(|| PathBuf::from(p))
    }
}

/// A `#!` script has no probes of its own: name the interpreter to trace instead.
pub(crate) fn check_not_script(path: &Path) -> Result<(), UsageError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Enough for a version manager's shim (pyenv's is ~350 bytes) to show its exec line.
    let mut head = [0u8; 4096];
    // O_NONBLOCK, then the type before any read: opening a FIFO for reading would otherwise
    // wait for a writer forever.
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    else {
        return Ok(()); // opening errors are reported, with context, when the target is opened
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        // Not a file: refused for what it is when the target is opened.
        return Ok(());
    }
    let n = f.read(&mut head).unwrap_or(0);
    if let Some(rest) = head[..n].strip_prefix(b"#!") {
        let line = rest.split(|&b| b == b'\n').next().unwrap_or(&[]);
        let line = String::from_utf8_lossy(line);
        let mut words = line.split_whitespace();
        let mut interpreter = words.next().unwrap_or("").to_string();
        // `#!/usr/bin/env python3`: the program env runs.
        if interpreter.ends_with("/env") {
            if let Some(prog) = words.find(|w| !w.starts_with('-')) {
                interpreter = which(prog).map_or(prog.to_string(), |p| p.display().to_string());
            }
        }
        let shim = match shim_manager(&head[..n]) {
            Some(m) => {
                let name = path
                    .file_name()
                    .map_or(String::new(), |n| n.to_string_lossy().into_owned());
                format!(", but this is a {m} shim: `{m} which {name}` names the program it runs")
            }
            None => String::new(),
        };
        return Err(UsageError::Script {
            path: path.display().to_string(),
            interpreter,
            shim,
        });
    }
    Ok(())
}

/// The version manager (pyenv, rbenv, nodenv, asdf, ...) whose shim `script` is: shims end by
/// handing their own name to the manager, `exec "/root/.pyenv/libexec/pyenv" exec "$program"`.
fn shim_manager(script: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(script);
    text.lines().find_map(|l| {
        let l = l.trim();
        let rest = l.strip_prefix("exec ")?;
        let (manager, args) = rest.split_once(char::is_whitespace)?;
        if !args.trim_start().starts_with("exec") {
            return None;
        }
        let manager = manager.trim_matches('"');
        let name = manager.rsplit('/').next()?;
        (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
            .then(|| name.to_string())
    })
}

/// Find `prog` the way execvp would.
pub(crate) fn which(prog: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if prog.contains('/') {
        let p = PathBuf::from(prog);
        return runnable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| runnable(p))
}
