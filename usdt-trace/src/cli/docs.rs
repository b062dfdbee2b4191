//! What the command line documents about itself: shell completion scripts and man pages,
//! generated from the clap definitions.

#[allow(unused_imports)]
use super::*;
use std::path::Path;

/// clap_complete's bash script for a hyphenated binary sets `cmd` to `usdt__trace__subcmd__watch`
/// but its `case` tests `usdt__subcmd__trace__subcmd__watch` (the `-` in the name is turned
/// into `__subcmd__` once more), so no subcommand's options were ever offered. The labels are
/// rewritten to what `cmd` is set to.
pub fn completion_script(shell: clap_complete::Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut help::command(), "usdt-trace", &mut out);
    if shell == clap_complete::Shell::Bash {
        let s = String::from_utf8_lossy(&out).replace("usdt__subcmd__trace", "usdt__trace");
        return s.into_bytes();
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum ManError {
    /// The commands named from the parser itself, so the list never goes stale.
    #[error("man {name}: no such command ({known})")]
    NoCommand { name: String, known: String },
    #[error("rendering the man page: {0}")]
    Render(std::io::Error),
}

/// The top-level page, or one command's (`usdt-trace-watch(1)`, which the top-level page
/// points to), with every flag: NAME, SYNOPSIS, DESCRIPTION, EXAMPLES first (as bpftrace(8)
/// puts them), OPTIONS, COMMANDS, EXIT STATUS, SEE ALSO, VERSION.
pub fn man_page(command: Option<&str>) -> Result<Vec<u8>, ManError> {
    let mut top = help::command();
    top.build();
    let cmd = match command {
        None => top,
        Some(name) => top
            .get_subcommands()
            .find(|c| c.get_name() == name && name != "help")
            .cloned()
            .ok_or_else(|| ManError::NoCommand {
                name: name.to_string(),
                known: top
                    .get_subcommands()
                    .map(|c| c.get_name())
                    .filter(|n| *n != "help")
                    .collect::<Vec<_>>()
                    .join(", "),
            })?
            // The page's title and its NAME section: `usdt-trace-watch`. Leaked: clap takes
            // names as &'static str without its `string` feature, and this runs once.
            .name(&*format!("usdt-trace-{name}").leak())
            .bin_name(format!("usdt-trace {name}"))
            // The footer's version, as on the top-level page.
            .version(VERSION),
    };
    // A page says in full what -h shortens.
    let cmd = help::full_about(cmd);
    let (examples, tail) = help::man_sections(command.unwrap_or(""));
    let has_args = cmd
        .get_arguments()
        .any(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"));
    let has_subcommands = cmd.get_subcommands().any(|s| s.get_name() != "help");
    let man = clap_mangen::Man::new(cmd);
    let mut out = Vec::new();
    (|| {
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        out.extend_from_slice(examples.as_bytes());
        if has_args {
            man.render_options_section(&mut out)?;
        }
        if has_subcommands {
            man.render_subcommands_section(&mut out)?;
        }
        out.extend_from_slice(tail.as_bytes());
        man.render_version_section(&mut out)
    })()
    .map_err(ManError::Render)?;
    Ok(out)
}

/// Every page into `dir`; how many.
pub(crate) fn man_dir(dir: &Path) -> Result<usize, String> {
    let names: Vec<String> = help::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    let mut n = 0;
    for name in std::iter::once(None).chain(names.iter().map(|n| Some(n.as_str()))) {
        let page = man_page(name).map_err(|e| e.to_string())?;
        let file = match name {
            None => dir.join("usdt-trace.1"),
            Some(c) => dir.join(format!("usdt-trace-{c}.1")),
        };
        std::fs::write(&file, page).map_err(|e| format!("man --dir: {}: {e}", file.display()))?;
        n += 1;
    }
    Ok(n)
}
