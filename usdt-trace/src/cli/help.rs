//! What `-h`, `--help` and the man pages show beyond the flags' doc comments: the short help
//! (one line per flag within 100 columns, cut from the doc comment, which stays the long
//! help), each command's examples, and the exit statuses.
//!
//! Every reader of the command line goes through [`command`], so `-h`, the man pages, the
//! completions and docs/flags.md are made from the same tree.

use clap::{Arg, Command};

/// The width `-h` fits in (a test holds every line of every command to it).
pub const HELP_WIDTH: usize = 100;

/// Per command, examples as `(command line, what it does)`: `--help`'s "Examples:" and the man
/// page's EXAMPLES, first after the description as in bpftrace(8).
pub const EXAMPLES: &[(&str, &[(&str, &str)])] = &[
    (
        "",
        &[
            (
                "usdt-trace list --names ./myprog",
                "the probes a program has",
            ),
            (
                "usdt-trace watch ./myprog",
                "every span and event, as they happen",
            ),
            (
                "usdt-trace watch --hist -c './myprog --flag'",
                "start it, histograms at exit",
            ),
            ("usdt-trace doctor", "what this kernel supports"),
        ],
    ),
    (
        "list",
        &[
            (
                "usdt-trace list --names ./myprog",
                "probe names, as bpftrace -l",
            ),
            (
                "usdt-trace list -p 1234 'httpserver:*'",
                "a running process's probes",
            ),
            (
                "usdt-trace list --functions libc getaddr*",
                "functions and how ends are traced",
            ),
        ],
    ),
    (
        "watch",
        &[
            ("usdt-trace watch ./myprog", "every span and event"),
            (
                "usdt-trace watch --json -c './myprog' >run.ndjson",
                "start it, trace it, NDJSON",
            ),
            (
                "usdt-trace watch --hist --by request__end:arg1 ./myprog",
                "histograms by status",
            ),
            (
                "usdt-trace watch --min 2ms --stack ./myprog",
                "slow spans with their stacks",
            ),
            (
                "usdt-trace watch --filter 'request:arg1 >= 500' ./myprog",
                "decided in the kernel",
            ),
            (
                "usdt-trace watch 'uprobe:libc:getaddrinfo' -c 'getent ahosts x'",
                "a function",
            ),
            (
                "usdt-trace watch --hist --prometheus 127.0.0.1:9435 -p 1234",
                "for Prometheus",
            ),
        ],
    ),
    (
        "serve",
        &[
            (
                "usdt-trace serve --config /etc/usdt-trace/serve.toml",
                "the daemon",
            ),
            (
                "usdt-trace serve --check --config serve.toml",
                "check a config, then exit",
            ),
        ],
    ),
    (
        "doctor",
        &[
            (
                "usdt-trace doctor",
                "what this kernel supports, what watch uses",
            ),
            ("usdt-trace doctor --json", "the same as one JSON object"),
        ],
    ),
    (
        "diff",
        &[
            (
                "usdt-trace diff before.ndjson after.ndjson",
                "what got slower, and why",
            ),
            (
                "usdt-trace diff --json before.ndjson after.ndjson",
                "one JSON object per span",
            ),
        ],
    ),
    (
        "completions",
        &[(
            "usdt-trace completions bash >/etc/bash_completion.d/usdt-trace",
            "bash completion",
        )],
    ),
    (
        "man",
        &[
            ("usdt-trace man watch | man -l -", "read watch's page"),
            (
                "usdt-trace man --dir /usr/local/share/man/man1",
                "write every page",
            ),
        ],
    ),
];

/// The examples of `name` ("" for the top level).
pub fn examples(name: &str) -> &'static [(&'static str, &'static str)] {
    EXAMPLES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(&[], |(_, e)| e)
}

/// "Examples:" and the lines under it, each within [`HELP_WIDTH`].
fn examples_text(name: &str) -> Option<String> {
    let ex = examples(name);
    if ex.is_empty() {
        return None;
    }
    let col = ex.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
    let mut s = String::from("Examples:");
    for (c, what) in ex {
        if 2 + col + 3 + what.len() <= HELP_WIDTH {
            s.push_str(&format!("\n  {c:col$}   # {what}"));
        } else {
            s.push_str(&format!("\n  {c}   # {what}"));
        }
    }
    Some(s)
}

/// The command line's tree as every reader sees it: short help, long help and examples.
pub fn command() -> Command {
    use clap::CommandFactory;
    // The top level's description is a line of its own; a command's follows its name.
    let cmd = shorten_about(shorten(super::Cli::command(), ""), HELP_WIDTH);
    cmd.mut_subcommands(|sub| {
        let name = sub.get_name().to_string();
        let sub = shorten(sub, &name);
        // `watch`'s own flags are added when it is built (`Deferred`), shortened there.
        shorten_about(sub, HELP_WIDTH - "  completions  ".len())
    })
}

/// A command's flags given a short help and its examples.
pub(crate) fn shorten(cmd: Command, name: &str) -> Command {
    let col = flag_column(&cmd);
    let cmd = cmd.mut_args(|a| shorten_arg(a, col));
    match examples_text(name) {
        Some(ex) => cmd.after_help(ex.clone()).after_long_help(ex),
        None => cmd,
    }
}

/// `watch`'s deferred flags, shortened when clap defines them.
pub(crate) fn shorten_deferred(cmd: Command) -> Command {
    let col = flag_column(&cmd);
    cmd.mut_args(|a| shorten_arg(a, col))
}

/// A subcommand's one-line description in the top level's list: its first sentence; the
/// whole of it stays its page's description.
fn shorten_about(cmd: Command, room: usize) -> Command {
    let Some(about) = cmd.get_about().map(|a| a.to_string()) else {
        return cmd;
    };
    let short = first_sentence(&about, room);
    if short == about.trim_end_matches('.') {
        return cmd;
    }
    let long = cmd.get_long_about().map(|a| a.to_string()).unwrap_or(about);
    cmd.about(short).long_about(long)
}

/// A command (and its subcommands) described in full, as a man page shows it: the long
/// description in place of the short one.
pub(crate) fn full_about(cmd: Command) -> Command {
    let cmd = match cmd.get_long_about().map(|a| a.to_string()) {
        Some(long) => cmd.about(long),
        None => cmd,
    };
    cmd.mut_subcommands(|sub| match sub.get_long_about().map(|a| a.to_string()) {
        Some(long) => sub.about(long),
        None => sub,
    })
}

/// Where `-h` starts the help text: two spaces, `-x, ` or its room, the longest spelling,
/// two spaces.
fn flag_column(cmd: &Command) -> usize {
    let longest = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .map(|a| {
            // Before the command is built, a flag has a value name too: the action says
            // whether it takes a value.
            let values: usize = match a.get_value_names() {
                Some(v) if a.get_action().takes_values() => v.iter().map(|n| n.len() + 3).sum(),
                _ => 0,
            };
            match a.get_long() {
                Some(l) => 2 + l.len() + values,
                None => values + 3,
            }
        })
        .max()
        .unwrap_or(0);
    2 + 4 + longest + 2
}

fn shorten_arg(a: Arg, col: usize) -> Arg {
    if a.get_long_help().is_some() {
        return a;
    }
    let Some(help) = a.get_help().map(|h| h.to_string()) else {
        return a;
    };
    // What clap adds after the help: the default and the possible values.
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let default_len = if defaults.is_empty() {
        0
    } else {
        " [default: ]".len() + defaults.join(" ").len()
    };
    let possible: Vec<String> = if a.get_action().takes_values() {
        a.get_possible_values()
            .iter()
            .filter(|p| !p.is_hide_set())
            .map(|p| p.get_name().to_string())
            .collect()
    } else {
        Vec::new()
    };
    let possible_len = if possible.is_empty() {
        0
    } else {
        " [possible values: ]".len() + possible.join(", ").len()
    };
    // Where the values leave too little room, the default goes (it is one of the values, and
    // docs/flags.md still names it): one line per flag, every line within the width.
    let (a, room) = match HELP_WIDTH.saturating_sub(col + default_len + possible_len) {
        r if r >= 30 => (a, r),
        _ => (
            a.hide_default_value(true),
            HELP_WIDTH.saturating_sub(col + possible_len).max(12),
        ),
    };
    let short = first_sentence(&help, room);
    if short == help.trim_end_matches('.') {
        return a;
    }
    a.help(short).long_help(help)
}

/// The first sentence of `text` without its parenthetical asides (`(repeatable)` kept), cut at
/// a word to fit `room` characters (with `…` when cut).
pub(crate) fn first_sentence(text: &str, room: usize) -> String {
    let first = text
        .split(". ")
        .next()
        .unwrap_or(text)
        .trim_end_matches('.');
    let mut out = String::new();
    let mut depth = 0usize;
    let mut aside = String::new();
    for c in first.chars() {
        match c {
            '(' => {
                depth += 1;
                aside.push(c);
            }
            ')' if depth > 0 => {
                depth -= 1;
                aside.push(c);
                if depth == 0 {
                    if aside == "(repeatable)" {
                        out.push_str(&aside);
                    } else if out.ends_with(' ') {
                        out.pop();
                    }
                    aside.clear();
                }
            }
            _ if depth > 0 => aside.push(c),
            _ => out.push(c),
        }
    }
    let out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    let out = out.trim_end_matches([':', ';', ',']).to_string();
    if out.chars().count() <= room {
        return out;
    }
    let mut cut = String::new();
    for w in out.split(' ') {
        if cut.chars().count() + 1 + w.chars().count() + 1 > room {
            break;
        }
        if !cut.is_empty() {
            cut.push(' ');
        }
        cut.push_str(w);
    }
    format!("{}…", cut.trim_end_matches([':', ';', ',']))
}

/// The man page's EXAMPLES, EXIT STATUS and SEE ALSO sections, in roff.
pub(crate) fn man_sections(name: &str) -> (String, String) {
    let mut ex = String::new();
    let examples = examples(name);
    if !examples.is_empty() {
        ex.push_str(".SH EXAMPLES\n");
        for (c, what) in examples {
            ex.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(c), roff(what)));
        }
    }
    let mut tail = String::from(".SH \"EXIT STATUS\"\n");
    for (code, what) in super::EXIT_STATUSES {
        tail.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(code), roff(what)));
    }
    tail.push_str(".SH \"SEE ALSO\"\n");
    let mut pages: Vec<String> = EXAMPLES
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| *n != name)
        .map(|n| match n {
            "" => "\\fBusdt-trace\\fR(1)".to_string(),
            n => format!("\\fBusdt\\-trace\\-{n}\\fR(1)"),
        })
        .collect();
    pages.extend(["\\fBbpftrace\\fR(8)", "\\fBperf\\fR(1)"].map(String::from));
    tail.push_str(&pages.join(", "));
    tail.push_str("\n.PP\nThe user guide: docs/README.md in the source tree.\n");
    (ex, tail)
}

/// Text as roff takes it: backslashes and hyphens escaped, no line starting with a control
/// character.
fn roff(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with(['.', '\'']) {
        format!("\\&{s}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of `-h`, for the top level and every command, fits [`HELP_WIDTH`] columns;
    /// `--help` keeps the whole text.
    #[test]
    fn short_help_lines_fit_100_columns_for_every_command() {
        let mut top = command();
        top.build();
        let mut pages = vec![("usdt-trace".to_string(), top.render_help().to_string())];
        let names: Vec<String> = top
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        for n in names {
            let sub = top.find_subcommand_mut(&n).expect("subcommand");
            pages.push((n, sub.render_help().to_string()));
        }
        for (name, page) in &pages {
            for line in page.lines() {
                assert!(
                    line.chars().count() <= HELP_WIDTH,
                    "{name} -h: {} columns: {line}",
                    line.chars().count()
                );
            }
        }
        let watch = top.find_subcommand_mut("watch").expect("watch");
        let long = watch.render_long_help().to_string();
        assert!(
            long.contains("Numbers compare as signed 64-bit values"),
            "{long}"
        );
        assert!(
            long.contains("Examples:\n  usdt-trace watch ./myprog"),
            "{long}"
        );
    }

    /// Every page: EXAMPLES first after the description (as bpftrace(8)), then the options,
    /// EXIT STATUS and SEE ALSO; descriptions in full, never cut as -h cuts them.
    #[test]
    fn man_pages_have_examples_first_exit_status_and_see_also() {
        for name in [None, Some("watch"), Some("serve"), Some("list")] {
            let page = String::from_utf8(super::super::man_page(name).unwrap()).unwrap();
            let at = |s: &str| page.find(s).unwrap_or_else(|| panic!("{name:?}: no {s}"));
            assert!(at(".SH DESCRIPTION") < at(".SH EXAMPLES"), "{name:?}");
            assert!(at(".SH EXAMPLES") < at(".SH \"EXIT STATUS\""), "{name:?}");
            assert!(
                at(".SH \"EXIT STATUS\"") < at(".SH \"SEE ALSO\""),
                "{name:?}"
            );
            assert!(page.contains("\\fBbpftrace\\fR(8)"), "{name:?}");
            let described = page[at(".SH NAME")..at(".SH SYNOPSIS")].to_string();
            assert!(!described.contains('…'), "{name:?}: cut: {described}");
        }
        let watch = String::from_utf8(super::super::man_page(Some("watch")).unwrap()).unwrap();
        assert!(watch.find(".SH EXAMPLES") < watch.find(".SH OPTIONS"));
    }

    #[test]
    fn first_sentence_drops_asides_and_cuts_at_a_word() {
        assert_eq!(
            first_sentence(
                "Trace only this process (repeatable). Without a TARGET, more",
                80
            ),
            "Trace only this process (repeatable)"
        );
        assert_eq!(
            first_sentence(
                "Stop after this long: seconds (`2.5`) or with a unit (`500ms`).",
                80
            ),
            "Stop after this long: seconds or with a unit"
        );
        assert_eq!(first_sentence("one two three four", 12), "one two…");
    }
}
