//! `-c` through its `exec`s: `watch -c ./script.py` (a `#!` script), `#!/usr/bin/env python3`
//! with another python first on PATH, a pyenv shim that `exec`s bash, then pyenv, then the
//! real interpreter. The program that finally runs is only known once it runs, so the command
//! is started first, as our tracee, and stopped at each `exec`: the first program of the
//! chain in which the patterns find something (in the file itself, or in a library it
//! loads, as `libpython` for a shared build) is the target. It is held there, before its
//! first instruction, while the probes are attached, as any `-c` command is.
//!
//! A stage before [`super::targets`]: it turns the configuration into one with the target
//! named, and hands the held command to the driver. Only `exec`s of the command's own process
//! are followed; a wrapper that forks the program and waits for it is not (said in the
//! error when nothing matched).

use super::{WatchConfig, WatchError};
use crate::target::child::{Child, Next, GRACE};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// More `exec`s than any launcher chain makes (env, a shim, its manager, the interpreter):
/// past this the command is not followed further.
const MAX_EXECS: usize = 16;
/// After this long without reaching a program to trace, `watch` says what it waits for.
const WAIT_NOTE: Duration = Duration::from_secs(2);

/// The command, held at the start of the program it was followed to.
pub(super) struct Followed {
    pub child: Child,
    /// The file to trace: the program, or the library of it that has the probes.
    pub target: PathBuf,
    /// What was followed, for the readiness line: `-c ./script.py → /usr/bin/env → ...`.
    pub chain: String,
}

/// Starts the command and follows it to the first program its patterns match.
pub(super) fn follow(cfg: &WatchConfig) -> Result<Followed, WatchError> {
    let argv = cfg.command.as_deref().unwrap_or_default();
    let shown_cmd = shown_command(argv);
    let mut child = Child::spawn(argv)?;
    if !child.release(true)? {
        return Err(WatchError::ExecChain(format!(
            "-c {shown_cmd}: the command could not be held at its exec (ptrace refused, or it exited at once), so what it runs cannot be followed; name the program to trace after -c"
        )));
    }
    // Our own `sh -c 'exec ...'` (for redirections) and `env` only pass the command on.
    let mut skip_first = argv.first().is_some_and(|a| a == "/bin/sh");
    let mut chain: Vec<String> = Vec::new();
    // `--duration` bounds the following too; a note if it takes a while.
    let deadline = cfg.duration.map(|d| Instant::now() + d);
    let mut note_at = Some(Instant::now() + WAIT_NOTE);
    for _ in 0..MAX_EXECS {
        let exe = child.exe().map_err(|e| {
            WatchError::ExecChain(format!("-c {shown_cmd}: reading what it runs: {e}"))
        })?;
        let passes_on = std::mem::take(&mut skip_first) || is_env(&exe);
        if !passes_on {
            chain.push(exe.display().to_string());
            if let Some(target) = matching_target(cfg, &exe) {
                let chain = format!("-c {shown_cmd} → {}", chain.join(" → "));
                return Ok(Followed {
                    child,
                    target,
                    chain,
                });
            }
        }
        child.run_to_exec().map_err(|e| {
            WatchError::ExecChain(format!("-c {shown_cmd}: following its exec: {e}"))
        })?;
        let next = loop {
            let until = match (note_at, deadline) {
                (Some(n), Some(d)) => n.min(d),
                (Some(n), None) => n,
                (None, Some(d)) => d,
                (None, None) => Instant::now() + Duration::from_secs(3600),
            };
            let next = child.wait_exec(until).map_err(|e| {
                WatchError::ExecChain(format!("-c {shown_cmd}: following its exec: {e}"))
            })?;
            if next != Next::Running {
                break next;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                child.end_followed(GRACE);
                return Err(WatchError::ExecChain(format!(
                    "-c {shown_cmd}: --duration ended before it ran a program with {}{}; the command was ended, untraced",
                    what_is_asked(cfg),
                    ran(&chain)
                )));
            }
            if note_at.is_some_and(|n| now >= n) {
                // Said once: a script that forks the program (rather than exec it) would
                // otherwise keep `watch` silent until it exits.
                note_at = None;
                crate::util::terminal::say(&format!(
                    "usdt-trace: -c {shown_cmd}: waiting for it to run a program with {}{}; a program it forks rather than execs is not followed",
                    what_is_asked(cfg),
                    ran(&chain)
                ));
            }
        };
        if next == Next::Exited {
            return Err(WatchError::ExecChain(format!(
                "-c {shown_cmd}: exited before running a program with {}{}, untraced; a wrapper that forks the program rather than exec it is not followed: name the program after -c",
                what_is_asked(cfg),
                ran(&chain)
            )));
        }
    }
    Err(WatchError::ExecChain(format!(
        "-c {shown_cmd}: more than {MAX_EXECS} execs without a program with {}: name the program after -c",
        what_is_asked(cfg)
    )))
}

/// The command as the user typed it (our `sh -c 'exec CMD'` wrapper taken off).
/// " (it ran A → B)", or nothing before any program ran. The paths are the command's to
/// choose: cleaned for the terminal.
fn ran(chain: &[String]) -> String {
    if chain.is_empty() {
        String::new()
    } else {
        format!(
            " (it ran {})",
            crate::util::terminal::clean(&chain.join(" → "))
        )
    }
}

fn shown_command(argv: &[String]) -> String {
    match argv {
        [sh, c, script] if sh == "/bin/sh" && c == "-c" => script
            .strip_prefix("exec env ")
            .or_else(|| script.strip_prefix("exec "))
            .unwrap_or(script)
            .to_string(),
        _ => argv.join(" "),
    }
}

fn is_env(exe: &Path) -> bool {
    exe.file_name().is_some_and(|n| n == "env")
}

fn what_is_asked(cfg: &WatchConfig) -> String {
    if cfg.patterns.is_empty() {
        "USDT probes".to_string()
    } else {
        let p: Vec<&str> = cfg.patterns.iter().map(|p| p.as_str()).collect();
        format!("probes matching {}", p.join(" "))
    }
}

/// `exe` when the patterns select something in it, else the library of it that has them;
/// None when neither (the chain goes on). Nothing is printed: a launcher is not an error.
fn matching_target(cfg: &WatchConfig, exe: &Path) -> Option<PathBuf> {
    let shown = exe.display().to_string();
    if let Ok(mut o) = crate::target::open(&shown, exe) {
        let fn_pats = crate::plan::functions::fn_patterns(&cfg.patterns);
        if crate::plan::functions::add_function_sites(&mut o, &fn_pats, cfg.fn_placement()).is_ok()
        {
            let named = [(shown.as_str(), &o.probes)];
            if crate::plan::build(&named, &cfg.plan_options()).is_ok_and(|p| !p.sites.is_empty()) {
                return Some(exe.to_path_buf());
            }
        }
    }
    crate::target::libhint::for_executable(exe, &cfg.patterns).map(|(_, lib)| lib)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_is_shown_as_typed_without_our_shell_wrapper() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(shown_command(&v(&["./s.py", "x"])), "./s.py x");
        assert_eq!(
            shown_command(&v(&["/bin/sh", "-c", "exec ./s.py > out"])),
            "./s.py > out"
        );
        assert_eq!(
            shown_command(&v(&["/bin/sh", "-c", "exec env A=1 ./s.py"])),
            "A=1 ./s.py"
        );
    }
}
