//! Command-line flags → validated configuration → run → exit code.
//!
//! clap parses into raw structs ([`ListArgs`], [`WatchArgs`]); [`ListArgs::validate`] and
//! [`WatchArgs::validate`] turn those into configs whose fields are already checked (patterns
//! compiled, span rules parsed, targets split from patterns), so the commands never see
//! unvalidated input. Every error ends as one line on stderr and a non-zero exit; a closed
//! output pipe (`| head`) exits 0.

//!
//! - `args`: the raw flags (clap structs);
//! - `validate`: raw flags → checked configs, and [`UsageError`];
//! - `docs`: completion scripts and man pages;
//! - here: [`main`], which parses, validates, runs, and maps every error to one line.

mod args;
mod docs;
mod split;
#[cfg(test)]
mod tests;
mod validate;

pub use args::*;
pub use docs::*;
pub(crate) use split::*;
pub use validate::*;

use crate::list::{self};
use crate::watch::{self};
use clap::Parser;

/// What separates an error's message from its one hint line (see `WatchError::NoProbesHint`).
pub const HINT_LINE: &str = "\nhint: ";

/// Writes generated text to stdout; a closed pipe is not an error.
fn write_stdout(bytes: &[u8]) -> Result<i32, String> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(bytes) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(format!("writing output: {e}")),
    }
}

/// A `list` of one file whose patterns are all `fn:` ones: a listing of its functions.
fn only_functions(cfg: &list::ListConfig) -> bool {
    cfg.targets.len() == 1
        && cfg.pid.is_none()
        && !cfg.names
        && !cfg.patterns.is_empty()
        && cfg
            .patterns
            .iter()
            .all(|p| p.provider() == Some(crate::pattern::FN_PROVIDER))
}

/// Parse, validate, run; returns the process exit code.
pub fn main() -> i32 {
    // Before anything else: a SIGHUP during a daemon's start is not its death.
    if std::env::args_os().nth(1).is_some_and(|a| a == "serve") {
        crate::serve::catch_sighup_early();
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    let result: Result<i32, String> = match cli.command {
        Command::List(a) if a.functions => list_functions(&a),
        Command::List(a) => match a.validate() {
            Err(e) => Err(e.to_string()),
            // `list uprobe:libc:getaddr*` (bpftrace's `-l`): the functions, as --functions.
            Ok(cfg) if only_functions(&cfg) => {
                let globs: Vec<String> = cfg
                    .patterns
                    .iter()
                    .map(|p| p.as_str().trim_start_matches("fn:").to_string())
                    .collect();
                functions_of(&cfg.targets[0], &globs, cfg.json)
            }
            Ok(cfg) => {
                let stdout = std::io::stdout();
                let mut out = std::io::BufWriter::new(stdout.lock());
                let mut err = std::io::stderr();
                match list::run(&cfg, &mut out, &mut err).and_then(|n| {
                    std::io::Write::flush(&mut out)
                        .map(|_| n)
                        .map_err(Into::into)
                }) {
                    // As in `watch`: patterns that match nothing are an error, so a script
                    // can tell a typo from a listing.
                    Ok(0) if !cfg.patterns.is_empty() => Err(format!(
                        "no probe matches {}",
                        cfg.patterns
                            .iter()
                            .map(|p| p.to_string())
                            .collect::<Vec<_>>()
                            .join(" ")
                    )),
                    Ok(_) => Ok(0),
                    Err(e) if e.is_broken_pipe() => Ok(0),
                    Err(e) => Err(e.to_string()),
                }
            }
        },
        Command::Watch(a) => match a.validate() {
            Err(e) => Err(e.to_string()),
            Ok(cfg) => match watch::run(&cfg) {
                Ok(code) => Ok(code),
                Err(e) if e.is_broken_pipe() => Ok(0),
                Err(e) => Err(e.to_string()),
            },
        },
        Command::Serve(a) if a.check => crate::serve::check(&a.config)
            .map(|line| {
                println!("{line}");
                0
            })
            .map_err(|e| e.to_string()),
        Command::Serve(a) => crate::serve::run(&a.config).map_err(|e| e.to_string()),
        Command::Diff(a) => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            match crate::diff::run(&a.before, &a.after, a.json, &mut out) {
                Ok(()) => Ok(0),
                Err(e) if e.is_broken_pipe() => Ok(0),
                Err(e) => Err(e.to_string()),
            }
        }
        Command::Doctor(a) => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            match crate::doctor::run(a.json, &mut out) {
                Ok(()) => Ok(0),
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
                Err(e) => Err(format!("writing output: {e}")),
            }
        }
        Command::Completions { shell } => write_stdout(&completion_script(shell)),
        Command::Man { command, dir } => match (command, dir) {
            (_, Some(dir)) => man_dir(&dir).map(|n| {
                eprintln!("usdt-trace: wrote {n} man pages to {}", dir.display());
                0
            }),
            (command, None) => man_page(command.as_deref())
                .map_err(|e| e.to_string())
                .and_then(|page| write_stdout(&page)),
        },
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            // One line: nested causes are already folded into the message. An error may end
            // in one `hint: ` line (a command to run instead), kept on its own line.
            let (msg, hint) = match msg.split_once(HINT_LINE) {
                Some((m, h)) => (m.to_string(), Some(h.replace('\n', " "))),
                None => (msg, None),
            };
            eprintln!("usdt-trace: error: {}", msg.replace('\n', " "));
            if let Some(h) = hint {
                eprintln!("hint: {h}");
            }
            1
        }
    }
}
