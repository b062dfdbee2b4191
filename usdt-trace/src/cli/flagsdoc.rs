//! `docs/flags.md`, the flag reference, rendered from the clap definitions that also make
//! `--help`, the completions and the man page: one source, never a table kept by hand.
//!
//! The test below fails when the checked-in file differs from what the definitions give;
//! `USDT_TRACE_BLESS=1 cargo test -p usdt-trace --lib flags_md` writes it anew.

use std::fmt::Write as _;

/// The whole of `docs/flags.md`.
pub(crate) fn render() -> String {
    let mut cmd = crate::cli::help::command();
    // `watch`'s flags are deferred (`cli::Deferred`): building the tree defines them.
    cmd.build();
    let mut out = String::new();
    out.push_str(
        "<!-- Generated from the clap definitions in usdt-trace/src/cli/args.rs by \
         usdt-trace/src/cli/flagsdoc.rs: do not edit.\n     \
         Regenerate with: USDT_TRACE_BLESS=1 cargo test -p usdt-trace --lib flags_md -->\n\n",
    );
    out.push_str("# Flag reference\n\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", about);
    }
    out.push_str(
        "The same text as `usdt-trace COMMAND --help` and `usdt-trace man`. The \
         [user guide](README.md) shows the flags at work.\n\n",
    );
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let _ = writeln!(out, "- [`usdt-trace {0}`](#usdt-trace-{0})", sub.get_name());
    }
    out.push('\n');
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    for name in names {
        let Some(sub) = cmd.find_subcommand_mut(&name) else {
            continue;
        };
        command(&mut out, sub);
    }
    out
}

fn command(out: &mut String, sub: &mut clap::Command) {
    let _ = writeln!(out, "## usdt-trace {}\n", sub.get_name());
    if let Some(about) = sub.get_long_about().or(sub.get_about()) {
        let _ = writeln!(out, "{}\n", about);
    }
    let usage = sub.render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ").trim();
    let _ = writeln!(out, "```\n{usage}\n```\n");
    let args: Vec<&clap::Arg> = sub
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if args.is_empty() {
        return;
    }
    for a in args {
        arg(out, a);
    }
    out.push('\n');
}

fn arg(out: &mut String, a: &clap::Arg) {
    let values: Vec<String> = a
        .get_value_names()
        .map(|v| v.iter().map(|s| s.to_string()).collect())
        .unwrap_or_default();
    let takes_value = a.get_num_args().is_some_and(|n| n.takes_values());
    let mut spelling = String::new();
    if a.is_positional() {
        let name = if values.is_empty() {
            a.get_id().as_str().to_uppercase()
        } else {
            values.join(" ")
        };
        spelling.push_str(&name);
        if matches!(a.get_action(), clap::ArgAction::Append) {
            spelling.push_str("...");
        }
    } else {
        if let Some(s) = a.get_short() {
            let _ = write!(spelling, "-{s}");
            if a.get_long().is_some() {
                spelling.push_str(", ");
            }
        }
        if let Some(l) = a.get_long() {
            let _ = write!(spelling, "--{l}");
        }
        if takes_value {
            let v = if values.is_empty() {
                a.get_id().as_str().to_uppercase()
            } else {
                values.join(" ")
            };
            // An optional value (`--stack[=MODE]`) is spelled as clap's usage spells it.
            if a.get_num_args().is_some_and(|n| n.min_values() == 0) {
                let eq = if a.is_require_equals_set() { "=" } else { " " };
                let _ = write!(spelling, "[{eq}{v}]");
            } else {
                let _ = write!(spelling, " {v}");
            }
        }
    }
    let help = a
        .get_long_help()
        .or(a.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let _ = write!(out, "- **`{spelling}`**");
    let repeatable = !a.is_positional() && matches!(a.get_action(), clap::ArgAction::Append);
    if repeatable && !help.contains("repeatable") {
        out.push_str(" (repeatable)");
    }
    let mut text = one_paragraph(&help);
    let possible: Vec<clap::builder::PossibleValue> = if takes_value {
        a.get_possible_values()
            .into_iter()
            .filter(|p| !p.is_hide_set())
            .collect()
    } else {
        Vec::new()
    };
    // Enum values without help of their own (clap's shells) fit in a sentence.
    let listed = possible.iter().any(|p| p.get_help().is_some());
    if !possible.is_empty() && !listed {
        let names: Vec<String> = possible
            .iter()
            .map(|p| format!("`{}`", p.get_name()))
            .collect();
        sentence(&mut text, &format!("One of {}", names.join(", ")));
    }
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    if takes_value && !defaults.is_empty() {
        sentence(&mut text, &format!("Default: `{}`", defaults.join(" ")));
    }
    let _ = write!(out, ": {text}");
    if listed {
        for p in &possible {
            let _ = write!(out, "\n  - `{}`", p.get_name());
            if let Some(h) = p.get_help() {
                let _ = write!(out, ": {}", one_paragraph(&h.to_string()));
            }
        }
    }
    out.push('\n');
}

/// Append a sentence to `text`, ending the one before it with a period (clap strips the last).
fn sentence(text: &mut String, add: &str) {
    if !text.is_empty() {
        if !text.ends_with(['.', ':']) {
            text.push('.');
        }
        text.push(' ');
    }
    text.push_str(add);
    text.push('.');
}

/// clap keeps a doc comment's paragraphs apart with blank lines; a list item is one paragraph.
/// `*` and `<` outside code spans would start emphasis or a tag in markdown: escape them.
fn one_paragraph(help: &str) -> String {
    let joined = help
        .split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let mut s = String::with_capacity(joined.len());
    let mut in_code = false;
    for c in joined.chars() {
        match c {
            '`' => in_code = !in_code,
            '*' | '<' if !in_code => s.push('\\'),
            _ => {}
        }
        s.push(c);
    }
    s
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    fn path() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/flags.md")
    }

    #[test]
    fn flags_md_is_generated_from_the_clap_definitions() {
        let want = super::render();
        let path = path();
        if std::env::var_os("USDT_TRACE_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            let line = have
                .lines()
                .zip(want.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(have.lines().count().min(want.lines().count()));
            panic!(
                "docs/flags.md is stale (first difference at line {}): the clap definitions \
                 changed; regenerate it with\n  \
                 USDT_TRACE_BLESS=1 cargo test -p usdt-trace --lib flags_md\nand commit it",
                line + 1
            );
        }
    }

    #[test]
    fn flags_md_names_every_visible_watch_flag() {
        let doc = super::render();
        for flag in [
            "--min DURATION",
            "--str PROBE:N[:len=M]",
            "--attach MODE",
            "-c, --command CMD",
        ] {
            assert!(doc.contains(&format!("**`{flag}`**")), "{flag} missing");
        }
        assert!(
            !doc.contains("bench-null-program"),
            "a hidden flag was documented"
        );
    }
}
