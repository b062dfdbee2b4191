//! Function probes for `list --functions` and `watch 'fn:GLOB'`: the I/O around the pure
//! [`crate::elf::functions`](mod@crate::elf::functions) (reading an opened object, printing the
//! table).
//!
//! Every name printed as text passes through [`clean`]: symbol names come from someone else's
//! file.

use crate::elf::{
    self, ElfError, FnEnd, FnPlacement, FnProbeError, FnReturns, FnSites, Function, Functions,
    SiteInsn, FN_PROVIDER,
};
use crate::target::Object;
use crate::util::pattern::Pattern;
use crate::util::terminal::clean;
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
    /// `suggest`: `; did you mean F?` or empty.
    #[error("no function of {path} matches {globs}{suggest}")]
    NoMatch {
        path: String,
        globs: String,
        suggest: String,
    },
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

/// Adds to `o` the entry and end sites of the functions the `fn:` patterns select, read
/// through the descriptor `o` was parsed from (the very file that will be attached), and
/// says on stderr which matched functions are not traced and why.
pub fn add_function_sites(
    o: &mut Object,
    patterns: &[&Pattern],
    place: FnPlacement,
) -> Result<(), FnError> {
    if patterns.is_empty() {
        return Ok(());
    }
    let funcs = read_functions(&o.fd_path(), &o.shown)?;
    let found = elf::function_sites(&funcs, patterns, &o.shown, place)?;
    let mut err = io::stderr().lock();
    for w in fn_warnings(&funcs, &found) {
        let _ = writeln!(err, "warning: {}: {}", clean(&o.shown), clean(&w));
    }
    o.probes.sites.extend(found.sites);
    Ok(())
}

/// One IFUNC named by a pattern: what the program calls instead, and how to trace it.
fn ifunc_warning(funcs: &Functions, name: &str, imps: &[String]) -> String {
    let bare = name.trim_start_matches('_');
    let hint = if !funcs.has_symtab {
        format!("; its implementations are not in this stripped object's symbol table (with debug symbols they are named __{bare}_*)")
    } else if imps.is_empty() {
        String::new()
    } else {
        let shown: Vec<&str> = imps
            .iter()
            .take(REFUSED_SHOWN)
            .map(String::as_str)
            .collect();
        format!(
            "; its implementations here: {}{} (trace them with 'fn:__{bare}_*')",
            shown.join(", "),
            if imps.len() > REFUSED_SHOWN {
                ", ..."
            } else {
                ""
            },
        )
    };
    format!("{name} is an IFUNC: the program calls the implementation its resolver picked at load time, not a function named {name}{hint}")
}

/// Names shown per reason before "and N more".
const REFUSED_SHOWN: usize = 6;

/// What a user must hear about the functions their patterns matched: those refused (one line
/// per reason), IFUNCs, and a stripped object where nothing matched.
pub fn fn_warnings(funcs: &Functions, found: &FnSites) -> Vec<String> {
    let mut out = Vec::new();
    let mut by_reason: Vec<(&str, Vec<&str>)> = Vec::new();
    for r in &found.refused {
        match by_reason.iter_mut().find(|(why, _)| *why == r.reason) {
            Some((_, names)) => names.push(&r.name),
            None => by_reason.push((&r.reason, vec![&r.name])),
        }
    }
    for (why, names) in by_reason {
        let shown: Vec<&str> = names.iter().take(REFUSED_SHOWN).copied().collect();
        let more = names.len().saturating_sub(REFUSED_SHOWN);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        let n = names.len();
        out.push(format!(
            "{n} function{} not traced ({}{more}): {why}",
            if n == 1 { "" } else { "s" },
            shown.join(", "),
        ));
    }
    match found.ifuncs.as_slice() {
        [] => {}
        // Named one by one: the user asked for these (or a glob that caught a few).
        few if few.len() <= 2 => {
            for (name, imps) in few {
                out.push(ifunc_warning(funcs, name, imps));
            }
        }
        many => {
            let shown: Vec<&str> = many
                .iter()
                .take(REFUSED_SHOWN)
                .map(|(n, _)| n.as_str())
                .collect();
            out.push(format!(
                "{} IFUNCs not traced by name ({}{}): the program calls the implementation each resolver picked at load time{}",
                many.len(),
                shown.join(", "),
                if many.len() > REFUSED_SHOWN { ", ..." } else { "" },
                if funcs.has_symtab {
                    "; trace their implementations (__NAME_*) instead"
                } else {
                    "; their implementations are not in this stripped object's symbol table"
                }
            ));
        }
    }
    if found.sites.is_empty()
        && found.refused.is_empty()
        && !funcs.has_symtab
        && !funcs.from_gopclntab()
    {
        out.push(
            "has no symbol table (stripped): only its exported (.dynsym) functions can be matched"
                .into(),
        );
    }
    out
}

/// `list --functions`: one line (or JSON object) per function of `path` whose name matches
/// one of `globs` (all when none), with how `watch` (by `--fn-returns auto`) traces its end or
/// why it refuses it. Returns how many were printed.
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
    // A glob that matches nothing is a typo to report, not a line left out of the listing:
    // checked before anything is printed.
    let missing: Vec<(&String, &Pattern)> = globs
        .iter()
        .zip(&pats)
        .filter(|(_, p)| !funcs.functions.iter().any(|f| f.matches(p)))
        .collect();
    if !missing.is_empty() {
        let names = funcs.functions.iter().flat_map(|f| f.names.iter());
        let best = crate::plan::suggest::closest(missing[0].0, names.map(String::as_str));
        return Err(FnError::NoMatch {
            path: clean(&shown).into_owned(),
            globs: missing
                .iter()
                .map(|(g, _)| clean(g))
                .collect::<Vec<_>>()
                .join(" "),
            suggest: crate::plan::suggest::did_you_mean(best.map(clean).as_deref()),
        });
    }
    let chosen: Vec<&Function> = funcs
        .functions
        .iter()
        .filter(|f| pats.is_empty() || pats.iter().any(|p| f.matches(p)))
        .collect();
    let decide = elf::Ends::new(&funcs);
    let ends: Vec<FnEnd> = chosen
        .iter()
        .map(|f| match elf::ifunc_shadowed(&funcs, f) {
            Some(reason) => FnEnd::Refused { reason },
            None => decide.of(f, FnReturns::Auto),
        })
        .collect();
    let mut out = io::BufWriter::with_capacity(64 * 1024, out);
    if json {
        for (f, end) in chosen.iter().zip(&ends) {
            let hist = FnPlacement {
                returns: FnReturns::Auto,
                entry_args: false,
            };
            let rec = JsonFunction {
                path: &shown,
                go: funcs.go,
                f,
                end,
                end_why: decide.why(f, end, FnReturns::Auto),
                entry: entry_place(f, FnPlacement::default()),
                entry_hist: entry_place(f, hist),
            };
            serde_json::to_writer(&mut out, &rec).map_err(io::Error::from)?;
            out.write_all(b"\n")?;
        }
    } else {
        write_text(&mut out, &shown, &funcs, &chosen, &ends)?;
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
    /// How its end is traced, or why it is not.
    end: &'a FnEnd,
    /// Why its end is traced that way (absent when it is refused: `end.reason` says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    end_why: Option<String>,
    /// Where its entry probe sits when arguments are read, and with `--hist` (no arguments).
    entry: EntryPlace,
    entry_hist: EntryPlace,
}

/// Where an entry probe sits and what the kernel does there.
#[derive(Serialize)]
struct EntryPlace {
    file_offset: u64,
    insn: SiteInsn,
    /// Instructions passed over to reach an emulated one (0: the first instruction).
    skipped: u32,
}

fn entry_place(f: &Function, place: FnPlacement) -> EntryPlace {
    if let Some(g) = &f.go_layout {
        return EntryPlace {
            file_offset: g.layout.entry_offset,
            insn: g.entry_insn,
            skipped: 0,
        };
    }
    match place.moved_entry(f) {
        Some(m) => EntryPlace {
            file_offset: m.offset,
            insn: m.insn,
            skipped: m.skipped,
        },
        None => EntryPlace {
            file_offset: f.file_offset,
            insn: f.insn,
            skipped: 0,
        },
    }
}

/// What the entry probe's instruction costs: a Go function's is past its stack check, any
/// other's on the first instruction the kernel emulates when nothing before it changes what
/// the probe reads (`place` says whether it reads arguments).
fn entry_insn(f: &Function, place: FnPlacement) -> SiteInsn {
    entry_place(f, place).insn
}

/// The END column: how the function's end is traced.
fn end_label(end: &FnEnd) -> String {
    match end {
        FnEnd::RetInsns {
            offsets,
            tail_offsets,
        } if !tail_offsets.is_empty() => {
            format!("{}+{} tail rets", offsets.len(), tail_offsets.len())
        }
        FnEnd::RetInsns { offsets, .. } if offsets.len() == 1 => "1 ret".into(),
        FnEnd::RetInsns { offsets, .. } => format!("{} rets", offsets.len()),
        FnEnd::ReturnProbe => "return probe".into(),
        FnEnd::Refused { .. } => "NOT TRACED".into(),
    }
}

fn write_text(
    out: &mut dyn Write,
    shown: &str,
    funcs: &Functions,
    chosen: &[&Function],
    ends: &[FnEnd],
) -> io::Result<()> {
    let single = |i: SiteInsn| {
        i == SiteInsn::SingleStep
            || (i == SiteInsn::Push && !crate::util::kallsyms::push_emulated())
    };
    let hist = FnPlacement {
        returns: FnReturns::Auto,
        entry_args: false,
    };
    let step = chosen
        .iter()
        .filter(|f| single(entry_insn(f, FnPlacement::default())))
        .count();
    let step_hist = chosen
        .iter()
        .filter(|f| single(entry_insn(f, hist)))
        .count();
    let step_hist = if step_hist == step {
        String::new()
    } else {
        format!(" ({step_hist} with --hist, which reads no arguments)")
    };
    let refused = ends
        .iter()
        .filter(|e| matches!(e, FnEnd::Refused { .. }))
        .count();
    let go = if funcs.go {
        " (Go: probed past the stack check and at each ret, never with a return probe)"
    } else {
        ""
    };
    let refused = match refused {
        0 => String::new(),
        n => format!(", {n} not traced"),
    };
    let stripped = match (funcs.has_symtab, funcs.from_gopclntab()) {
        (true, _) => "",
        (false, true) => " (no symbol table: Go functions from .gopclntab)",
        (false, false) => " (no symbol table: exported functions only)",
    };
    writeln!(
        out,
        "{}: {} function{}, {step} single-stepped at entry{step_hist}{refused}{go}{stripped}",
        clean(shown),
        chosen.len(),
        if chosen.len() == 1 { "" } else { "s" },
    )?;
    if chosen.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  {:<18} {:>8} {:>10}  {:<15} {:<12} NAME",
        "ADDRESS", "SIZE", "OFFSET", "ENTRY", "END"
    )?;
    for (f, end) in chosen.iter().zip(ends) {
        let mut name = clean(&f.name).into_owned();
        if f.names.len() > 1 {
            let aliases: Vec<String> = f.names[1..].iter().map(|n| clean(n).into_owned()).collect();
            name.push_str(&format!(" (also {})", aliases.join(", ")));
        }
        if let FnEnd::Refused { reason } = end {
            name.push_str(&format!(" ({})", clean(reason)));
        }
        writeln!(
            out,
            "  {:<18} {:>8} {:>10}  {:<15} {:<12} {name}",
            format!("{:#x}", f.address),
            f.size,
            format!("{:#x}", f.file_offset),
            // A function entry is never the 5-byte nop the kernel optimizes.
            crate::elf::insn_label(entry_insn(f, FnPlacement::default()), f.file_offset, false),
            end_label(end),
        )?;
    }
    Ok(())
}
