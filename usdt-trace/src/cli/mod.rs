//! Command-line flags → validated configuration → run → exit code.
//!
//! clap parses into raw structs ([`ListArgs`], [`WatchArgs`]); [`ListArgs::validate`] and
//! [`WatchArgs::validate`] turn those into configs whose fields are already checked (patterns
//! compiled, span rules parsed, targets split from patterns), so the commands never see
//! unvalidated input. Every error ends as one line on stderr, `usdt-trace: error: ...`: exit 2
//! for a usage error (clap's or ours, with a `hint:` naming the --help to read), 1 for an
//! error while running ([`EXIT_STATUSES`]); a closed output pipe (`| head`) exits 0.

//!
//! - `args`: the raw flags (clap structs);
//! - `validate`: raw flags → checked configs, and [`UsageError`];
//! - `docs`: completion scripts and man pages;
//! - `help`: the command tree every reader sees (short help, examples, man page sections);
//! - here: [`main`], which parses, validates, runs, and maps every error to one line.

mod args;
mod docs;
pub(crate) mod doctor;
#[cfg(test)]
mod flagsdoc;
pub(crate) mod help;
pub mod list;
mod split;
#[cfg(test)]
mod tests;
mod validate;

pub use args::*;
pub use docs::*;
pub(crate) use split::*;
pub use validate::*;

use crate::watch::{self};

/// What separates an error's message from its one hint line (see `WatchError::NoProbesHint`).
pub const HINT_LINE: &str = "\nhint: ";

/// Exit status: done (also `--help`, a closed output pipe, a trace stopped by Ctrl-C).
pub const EXIT_OK: i32 = 0;
/// Exit status: an error while running (a target, library or probe not found, the kernel
/// refused, a file not readable).
pub const EXIT_ERROR: i32 = 1;
/// Exit status: the command line is wrong (unknown or conflicting flags, a bad value).
pub const EXIT_USAGE: i32 = 2;

/// Every exit status and what it means, for the man page's EXIT STATUS and the reference.
pub const EXIT_STATUSES: [(&str, &str); 4] = [
    ("0", "Success: the command did what it was asked; also --help and --version, a trace stopped by Ctrl-C, SIGTERM or --duration, and a closed output pipe (| head)."),
    ("1", "An error while running: a target, process, library or probe not found, the kernel refused to load or attach, a file that cannot be read or written. One line on stderr, `usdt-trace: error: ...`, sometimes followed by one `hint: ...` line."),
    ("2", "A usage error: an unknown or misspelled flag, flags that conflict or need another, a value that does not parse (a duration, a --filter, a pattern). One line on stderr, `usdt-trace: error: ...`, and a `hint:` line naming the --help to read."),
    ("N", "watch -c CMD: the command's own exit status (128 + the signal's number when a signal killed it, which is also said on stderr), unless one of the errors above came first."),
];

/// The subcommand named on the command line (for the `--help` hint of a usage error).
fn subcommand_of(args: &[std::ffi::OsString]) -> Option<String> {
    let first = args.get(1)?.to_str()?;
    help::command()
        .get_subcommands()
        .any(|c| c.get_name() == first)
        .then(|| first.to_string())
}

/// A usage error in the tool's one style: `usdt-trace: error: MSG` and a hint naming the help
/// to read; clap's own errors (several lines, a usage block) folded the same way.
fn usage_error(msg: &str, command: Option<&str>) -> i32 {
    let help = match command {
        Some(c) => format!("usdt-trace {c} --help"),
        None => "usdt-trace --help".to_string(),
    };
    eprintln!("usdt-trace: error: {}", one_line(msg));
    eprintln!("hint: see '{help}'");
    EXIT_USAGE
}

/// clap's rendered error, `error: MESSAGE\n  more\n\n  tip: ...\n\nUsage: ...`, as its message
/// on one line with its tip, and for a missing argument the usage line (`--min <DURATION>
/// --stack`: which flag needed it); the "For more information" line is dropped (the hint
/// names --help).
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let mut parts = text.split("\n\n");
    let mut msg = one_line(parts.next().unwrap_or_default());
    for p in parts {
        let p = p.trim();
        if let Some(tip) = p.strip_prefix("tip: ") {
            msg = format!("{msg} ({})", one_line(tip));
        } else if let Some(usage) = p.strip_prefix("Usage: ") {
            let usage = one_line(usage);
            if e.kind() == clap::error::ErrorKind::MissingRequiredArgument {
                msg = format!("{msg} (usage: {usage})");
            }
        }
    }
    msg
}

/// Lines joined by single spaces.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

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
            .all(|p| p.provider() == Some(crate::util::pattern::FN_PROVIDER))
}

/// Parse, validate, run; returns the process exit code.
pub fn main() -> i32 {
    // Before anything else: a SIGHUP during a daemon's start is not its death.
    if std::env::args_os().nth(1).is_some_and(|a| a == "serve") {
        crate::serve::catch_sighup_early();
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Only looked up for an error's hint.
    let command = || subcommand_of(&args);
    use clap::FromArgMatches;
    let parsed = help::command()
        .try_get_matches_from(&args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        // --help, --version; and the help a bare `usdt-trace` prints (still a usage error).
        Err(e)
            if !e.use_stderr()
                || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            let _ = e.print();
            return if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
        }
        Err(e) => return usage_error(&clap_message(&e), command().as_deref()),
    };
    // Set where a validation error is the command line's fault (exit 2, with the help hint).
    let mut usage = false;
    let result: Result<i32, String> = match cli.command {
        Command::List(a) if a.functions => list_functions(&a),
        Command::List(a) => match a.validate() {
            Err(e) => {
                usage = e.is_usage();
                Err(e.to_string())
            }
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
            Err(e) => {
                usage = e.is_usage();
                Err(e.to_string())
            }
            Ok(cfg) => match watch::run(&cfg) {
                Ok(code) => Ok(code),
                Err(e) if e.is_broken_pipe() => Ok(0),
                Err(e) => Err(e.to_string()),
            },
        },
        Command::Serve(a) if a.check => crate::serve::check(&a.config, watch_from_argv)
            .map(|line| {
                println!("{line}");
                0
            })
            .map_err(|e| e.to_string()),
        Command::Serve(a) => {
            crate::serve::run(&a.config, watch_from_argv).map_err(|e| e.to_string())
        }
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
            match crate::cli::doctor::run(a.json, &mut out) {
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
                .map_err(|e| {
                    // `man nope`: the command line names no command.
                    usage = matches!(e, ManError::NoCommand { .. });
                    e.to_string()
                })
                .and_then(|page| write_stdout(&page)),
        },
    };
    match result {
        Ok(code) => code,
        Err(msg) if usage => usage_error(&msg, command().as_deref()),
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
            EXIT_ERROR
        }
    }
}

/// A `watch` command line (argv, `usdt-trace` first) through clap and `watch`'s validation:
/// what `serve` makes of each definition, so that it means what it means typed.
pub(crate) fn watch_from_argv(argv: &[String]) -> Result<crate::watch::WatchConfig, String> {
    use clap::Parser;
    let cli = Cli::try_parse_from(argv).map_err(|e| {
        // clap's first line is the error; the rest is usage for a command line.
        let text = e.to_string();
        let first = text.lines().next().unwrap_or_default();
        first.trim_start_matches("error: ").to_string()
    })?;
    let Command::Watch(w) = cli.command else {
        return Err("internal: not a watch command".into());
    };
    w.validate().map_err(|e| e.to_string().replace('\n', " "))
}
