//! Function probes for `list --functions` and `watch 'fn:GLOB'`: the I/O around the pure
//! [`crate::elf::functions`] (reading an opened object, printing the table).
//!
//! Every name printed as text passes through [`clean`]: symbol names come from someone else's
//! file.

use crate::elf::{self, ElfError, FnProbeError, Function, Functions, SiteInsn, FN_PROVIDER};
use crate::output::text::clean;
use crate::pattern::Pattern;
use crate::target::Object;
use serde::Serialize;
use std::io::{self, Write};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum FnError {
    #[error("{path}: {source}")]
    Elf {
        path: String,
        #[source]
        source: ElfError,
    },
    #[error(transparent)]
    Probe(#[from] FnProbeError),
    #[error(transparent)]
    Target(#[from] crate::target::TargetError),
    #[error("writing the listing: {0}")]
    Io(#[from] io::Error),
}

impl FnError {
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, FnError::Io(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// The `fn:` patterns among `patterns`.
pub fn fn_patterns(patterns: &[Pattern]) -> Vec<&Pattern> {
    patterns
        .iter()
        .filter(|p| p.provider() == Some(FN_PROVIDER))
        .collect()
}

fn read_functions(path: &Path, shown: &str) -> Result<Functions, FnError> {
    elf::functions_file(path).map_err(|e| FnError::Elf {
        path: shown.to_string(),
        source: match e {
            ElfError::InFile { source, .. } => *source,
            other => other,
        },
    })
}

/// Adds to `o` the entry and return sites of the functions the `fn:` patterns select, read
/// through the descriptor `o` was parsed from (the very file that will be attached).
pub fn add_function_sites(o: &mut Object, patterns: &[&Pattern]) -> Result<(), FnError> {
    if patterns.is_empty() {
        return Ok(());
    }
    let funcs = read_functions(&o.fd_path(), &o.shown)?;
    let sites = elf::function_sites(&funcs, patterns, &o.shown)?;
    o.probes.sites.extend(sites);
    Ok(())
}

/// `list --functions`: one line (or JSON object) per function of `path` whose name matches
/// one of `globs` (all when none). Returns how many were printed.
pub fn list(
    path: &Path,
    globs: &[String],
    json: bool,
    out: &mut dyn Write,
) -> Result<usize, FnError> {
    let shown = path.display().to_string();
    // Opened as `list` and `watch` open targets, so a FIFO or a directory gets the same words.
    let o = crate::target::open(&shown, path)?;
    let funcs = read_functions(&o.fd_path(), &shown)?;
    let pats: Vec<Pattern> = globs
        .iter()
        .filter_map(|g| Pattern::parse(&format!("{FN_PROVIDER}:{g}")).ok())
        .collect();
    let chosen: Vec<&Function> = funcs
        .functions
        .iter()
        .filter(|f| pats.is_empty() || pats.iter().any(|p| f.matches(p)))
        .collect();
    let mut out = io::BufWriter::with_capacity(64 * 1024, out);
    if json {
        for f in &chosen {
            let rec = JsonFunction {
                path: &shown,
                go: funcs.go,
                f,
            };
            serde_json::to_writer(&mut out, &rec).map_err(io::Error::from)?;
            out.write_all(b"\n")?;
        }
    } else {
        write_text(&mut out, &shown, &funcs, &chosen)?;
    }
    out.flush()?;
    Ok(chosen.len())
}

#[derive(Serialize)]
struct JsonFunction<'a> {
    path: &'a str,
    go: bool,
    #[serde(flatten)]
    f: &'a Function,
}

/// What the entry probe's instruction costs: a Go function's is past its stack check.
fn entry_insn(f: &Function) -> SiteInsn {
    f.go_layout.as_ref().map_or(f.insn, |g| g.entry_insn)
}

fn write_text(
    out: &mut dyn Write,
    shown: &str,
    funcs: &Functions,
    chosen: &[&Function],
) -> io::Result<()> {
    let step = chosen
        .iter()
        .filter(|f| entry_insn(f) == SiteInsn::SingleStep)
        .count();
    let go = if funcs.go {
        " (Go: probed past the stack check and at each ret, never with a return probe)"
    } else {
        ""
    };
    writeln!(
        out,
        "{}: {} function{}, {step} single-stepped at entry (~10 µs a hit){go}",
        clean(shown),
        chosen.len(),
        if chosen.len() == 1 { "" } else { "s" },
    )?;
    if chosen.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  {:<18} {:>8} {:>10}  {:<23} NAME",
        "ADDRESS", "SIZE", "OFFSET", "ENTRY"
    )?;
    for f in chosen {
        let mut name = clean(&f.name).into_owned();
        if f.names.len() > 1 {
            let aliases: Vec<String> = f.names[1..].iter().map(|n| clean(n).into_owned()).collect();
            name.push_str(&format!(" (also {})", aliases.join(", ")));
        }
        writeln!(
            out,
            "  {:<18} {:>8} {:>10}  {:<23} {name}",
            format!("{:#x}", f.address),
            f.size,
            format!("{:#x}", f.file_offset),
            // A function entry is never the 5-byte nop the kernel optimizes.
            crate::list::insn_label(entry_insn(f), f.file_offset, false),
        )?;
    }
    Ok(())
}
