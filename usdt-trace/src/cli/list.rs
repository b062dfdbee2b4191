//! `usdt-trace list`: the probe sites of files or of a running process, as aligned text or as
//! one JSON object per site.
//!
//! Listing is where a user learns what the tracer will see, so besides what `readelf -n` shows
//! it prints what the tracer derived: the file offset the uprobe goes to, the semaphore's offset
//! (or why it is unusable), how each argument will be read, and whether the site is the usual
//! `nop` or an instruction the kernel must single-step at about twenty times the cost.
//!
//! Every name shown comes from someone else's file or process: text output and warnings pass
//! them through [`clean`], so an escape sequence in a probe name is shown, not obeyed. JSON
//! carries them exactly (its writer escapes control characters).

use crate::elf::argspec::describe::{
    describe_arg_into, hex_len, loc_json, push_decimal, push_hex, push_json_int, push_json_str,
};
use crate::elf::{ElfError, ObjectProbes, Site, SiteInsn};
use crate::target::{self, Object, TargetError};
use crate::util::pattern::Pattern;
use crate::util::terminal::clean;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub struct ListConfig {
    pub json: bool,
    pub targets: Vec<PathBuf>,
    pub pid: Option<u32>,
    /// Sites matching any pattern are listed; none means all.
    pub patterns: Vec<Pattern>,
    /// `--names`: only `provider:name`, one per probe (not per site), sorted.
    pub names: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error(transparent)]
    Target(#[from] TargetError),
    /// Writing the listing failed; a closed pipe (`| head`) is [`ListError::is_broken_pipe`].
    #[error("writing the listing: {0}")]
    Io(#[from] io::Error),
    #[error("nothing to list: name an ELF file or give a PID")]
    NoTargets,
    /// Listed what the other patterns matched; these matched nothing (a typo, most often).
    /// The second field: `; did you mean P?`, or empty.
    #[error("no probe matches {0} (the other patterns match){1}")]
    SomeUnmatched(String, String),
    /// No pattern matched a probe; the second field as [`ListError::SomeUnmatched`]'s.
    #[error("no probe matches {0}{1}")]
    NoMatch(String, String),
}

impl ListError {
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, ListError::Io(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// One object to list: what to show, and whether the user named it.
struct Target {
    shown: String,
    named: bool,
    /// The file as named (None for a process's mappings).
    path: Option<std::path::PathBuf>,
}

/// Lists the probe sites of `cfg`'s files and process; returns how many sites were printed.
pub fn run(cfg: &ListConfig, out: &mut dyn Write, err: &mut dyn Write) -> Result<usize, ListError> {
    let mut targets: Vec<(Target, Result<Object, TargetError>)> = Vec::new();
    for p in &cfg.targets {
        let shown = p.display().to_string();
        let object = target::open(&shown, p);
        targets.push((
            Target {
                shown,
                named: true,
                path: Some(p.clone()),
            },
            object,
        ));
    }
    if let Some(pid) = cfg.pid {
        for m in target::open_process(pid)? {
            targets.push((
                Target {
                    shown: m.shown,
                    named: false,
                    path: None,
                },
                m.object,
            ));
        }
    }
    if targets.is_empty() {
        return Err(ListError::NoTargets);
    }
    // Per pattern: whether it matched any site listed.
    let mut matched = vec![false; cfg.patterns.len()];
    // Sites are formatted into buffers of FLUSH_AT bytes, which pass through this one
    // without a copy (it copies only writes smaller than itself): it gathers the rest.
    let mut out = io::BufWriter::with_capacity(8 * 1024, out);
    // Lines are gathered in a Vec and written on in large pieces: through `dyn Write` each
    // small write is a call, which made JSON output cost more than parsing.
    let mut json_buf = Vec::with_capacity(FLUSH_AT + 4096);
    let mut printed = 0;
    let mut names = std::collections::BTreeSet::new();
    // Every object's probes, kept (never freed, as below) for a pattern's suggestion.
    let mut kept = Vec::new();
    for (t, object) in targets {
        let probes = match object {
            Ok(o) => o.probes,
            Err(e) if t.named => {
                out.flush()?;
                return Err(e.into());
            }
            // A process maps fonts, locale archives and caches too; only ELF damage is news.
            Err(e) => {
                if !matches!(
                    e.elf(),
                    Some(ElfError::NotElf { .. } | ElfError::Truncated { .. })
                ) {
                    // The path is already in front; say only what is wrong.
                    let what = match &e {
                        // Its message names the path itself, cleaned below with the rest.
                        TargetError::NotTheMappedFile { .. } => e.to_string(),
                        _ => {
                            let what = e.elf().map_or_else(|| e.to_string(), |k| k.to_string());
                            format!("{}: {what}", t.shown)
                        }
                    };
                    writeln!(err, "warning: {}", clean(&what))?;
                }
                continue;
            }
        };
        for w in &probes.warnings {
            writeln!(
                err,
                "warning: {}: {}",
                clean(&t.shown),
                clean(&w.to_string())
            )?;
        }
        // An executable whose probes live in the libraries it loads (java: libjvm.so).
        if let (Some(path), true) = (&t.path, probes.sites.is_empty()) {
            if let Some((hint, lib)) = crate::target::libhint::for_executable(path, &cfg.patterns) {
                writeln!(
                    err,
                    "hint: {}: no USDT probes, but {}; list them with: usdt-trace list {}",
                    clean(&t.shown),
                    clean(&hint),
                    clean(&lib.display().to_string())
                )?;
            }
        }
        let sites: Vec<&Site> = probes
            .sites
            .iter()
            .filter(|s| {
                let mut any = cfg.patterns.is_empty();
                // Every pattern is tried (not only up to the first match): each must be
                // known to match something.
                for (p, hit) in cfg.patterns.iter().zip(matched.iter_mut()) {
                    if p.matches(&s.provider, &s.name) {
                        *hit = true;
                        any = true;
                    }
                }
                any
            })
            .collect();
        if cfg.names {
            names.extend(sites.iter().map(|s| format!("{}:{}", s.provider, s.name)));
        } else if cfg.json {
            for s in &sites {
                write_json(
                    &mut json_buf,
                    &t.shown,
                    cfg.pid,
                    s,
                    declared_names(&probes, s),
                )?;
                if json_buf.len() >= FLUSH_AT {
                    out.write_all(&json_buf)?;
                    json_buf.clear();
                }
            }
            out.write_all(&json_buf)?;
            json_buf.clear();
        } else {
            write_text(&mut out, &t, cfg, &probes, &sites)?;
        }
        printed += sites.len();
        // `list` exits right after: freeing every parsed site, argument and string one by one
        // was a tenth of its CPU time on libjvm.so (and on 50,000 sites). The OS takes it back.
        std::mem::forget(sites);
        kept.push(probes);
    }
    for n in &names {
        writeln!(out, "{}", clean(n))?;
    }
    out.flush()?;
    // As `watch`: patterns that match nothing are an error, so a script can tell a typo
    // from a listing; it names the closest probe listed.
    let missing: Vec<&Pattern> = cfg
        .patterns
        .iter()
        .zip(&matched)
        .filter(|(_, &hit)| !hit)
        .map(|(p, _)| p)
        .collect();
    let result = if missing.is_empty() {
        Ok(printed)
    } else {
        let objects: Vec<(&str, &ObjectProbes)> = kept.iter().map(|p| ("", p)).collect();
        let suggest = crate::plan::suggest::probe(&objects, &missing);
        let missing: Vec<String> = missing.iter().map(|p| p.to_string()).collect();
        Err(if printed > 0 {
            ListError::SomeUnmatched(missing.join(" "), suggest)
        } else {
            ListError::NoMatch(missing.join(" "), suggest)
        })
    };
    std::mem::forget(kept);
    result
}

/// The argument names `probes` declares for `s` (usdt-markers' names note), if any.
fn declared_names<'a>(probes: &'a ObjectProbes, s: &Site) -> &'a [String] {
    probes
        .arg_names
        .iter()
        .find(|(p, n, _)| *p == s.provider && *n == s.name)
        .map_or(&[], |(_, _, names)| names.as_slice())
}

/// Appends one NDJSON line for `s` to `buf`.
///
/// Written by hand rather than by serde_json from a struct: its string escaper looks at
/// every byte of every key and value, a sixth of `list --json`'s time on 50,000 sites.
/// `tests::hand_written_json_is_what_serde_writes` holds the layout to what serde writes for
/// the equivalent struct and for `ArgLoc` and `SiteInsn`'s own `Serialize` (fields in order,
/// `pid`, `semaphore_relro_shared`, `struct_size` and `arg_names` only when set); the matches
/// below name every variant and field, so that a new one fails to compile here.
fn write_json(
    buf: &mut Vec<u8>,
    path: &str,
    pid: Option<u32>,
    s: &Site,
    arg_names: &[String],
) -> io::Result<()> {
    buf.extend_from_slice(b"{\"path\":");
    push_json_str(buf, path);
    if let Some(pid) = pid {
        buf.extend_from_slice(b",\"pid\":");
        push_json_int(buf, pid);
    }
    buf.extend_from_slice(b",\"provider\":");
    push_json_str(buf, &s.provider);
    buf.extend_from_slice(b",\"name\":");
    push_json_str(buf, &s.name);
    buf.extend_from_slice(b",\"pc\":");
    push_json_int(buf, s.pc);
    buf.extend_from_slice(b",\"base\":");
    push_json_int(buf, s.base);
    buf.extend_from_slice(b",\"semaphore\":");
    push_json_int(buf, s.semaphore);
    buf.extend_from_slice(b",\"semaphore_offset\":");
    match s.semaphore_offset {
        Some(off) => push_json_int(buf, off),
        None => buf.extend_from_slice(b"null"),
    }
    // lld's packed layout: the kernel alone cannot raise this semaphore in processes started
    // after attach (`watch` raises it itself).
    if s.semaphore_shared_page {
        buf.extend_from_slice(b",\"semaphore_relro_shared\":true");
    }
    buf.extend_from_slice(b",\"file_offset\":");
    push_json_int(buf, s.file_offset);
    buf.extend_from_slice(b",\"args\":");
    push_json_str(buf, &s.args_raw);
    buf.extend_from_slice(b",\"insn\":");
    buf.extend_from_slice(match s.insn {
        SiteInsn::Nop => b"\"nop\"",
        SiteInsn::NopNop5 => b"\"nop_nop5\"",
        SiteInsn::Nop5 => b"\"nop5\"",
        SiteInsn::SingleStep => b"\"single_step\"",
        SiteInsn::Push => b"\"push\"",
        SiteInsn::Branch => b"\"branch\"",
        SiteInsn::Unknown => b"\"unknown\"",
    });
    buf.extend_from_slice(b",\"insn_bytes\":");
    push_json_str(buf, &s.insn_bytes);
    buf.extend_from_slice(b",\"args_decoded\":[");
    for (i, a) in s.args.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        buf.extend_from_slice(b"{\"raw\":");
        push_json_str(buf, &a.raw);
        buf.extend_from_slice(b",\"size\":");
        push_json_int(buf, a.size);
        buf.extend_from_slice(b",\"signed\":");
        push_json_bool(buf, a.signed);
        buf.extend_from_slice(b",\"float\":");
        push_json_bool(buf, a.float);
        buf.extend_from_slice(b",\"loc\":");
        loc_json(buf, &a.loc);
        buf.extend_from_slice(b",\"readable\":");
        push_json_bool(buf, a.readable());
        // The declared size of a struct passed by value, of which `size` bytes are read.
        if let Some(n) = a.struct_size {
            buf.extend_from_slice(b",\"struct_size\":");
            push_json_int(buf, n);
        }
        buf.push(b'}');
    }
    buf.push(b']');
    // The argument names the probe's usdt-markers note declares.
    if !arg_names.is_empty() {
        buf.extend_from_slice(b",\"arg_names\":[");
        for (i, n) in arg_names.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            push_json_str(buf, n);
        }
        buf.push(b']');
    }
    buf.extend_from_slice(b"}\n");
    Ok(())
}

fn push_json_bool(buf: &mut Vec<u8>, v: bool) {
    buf.extend_from_slice(if v { b"true" } else { b"false" });
}

fn write_text(
    out: &mut dyn Write,
    t: &Target,
    cfg: &ListConfig,
    probes: &ObjectProbes,
    sites: &[&Site],
) -> io::Result<()> {
    if sites.is_empty() {
        if t.named {
            let why = if probes.sites.is_empty() {
                "no USDT probes"
            } else {
                "no probes match"
            };
            writeln!(out, "{}: {why}", clean(&t.shown))?;
        }
        return Ok(());
    }
    let plural = if sites.len() == 1 { "" } else { "s" };
    let shown = clean(&t.shown);
    match cfg.pid {
        Some(pid) if !t.named => {
            writeln!(out, "{shown} (pid {pid}): {} site{plural}", sites.len())?
        }
        _ => writeln!(out, "{shown}: {} site{plural}", sites.len())?,
    }
    // Only sites the kernel could optimize depend on whether it does: others never look.
    let optimize = sites
        .iter()
        .any(|s| crate::elf::optimizable_offset(s.insn, s.file_offset).is_some())
        && crate::tracer::features::uprobe_optimize().is_yes();
    // Two passes over the sites, the first measuring the columns, the second writing: cells
    // are not kept as strings in between (five allocations per site on 50,000 sites).
    let header = ["PROBE", "PC", "SEMAPHORE", "OFFSET", "SITE"];
    // Columns are as wide as their widest cell, but a freak name (a file can hold a 100k-char
    // probe name) only overflows its own row instead of padding every other one.
    let mut w = [0; 4];
    for (i, h) in header[..4].iter().enumerate() {
        w[i] = h.len();
    }
    let mut raw_w = 0;
    for s in sites {
        let probe = width(&clean(&s.provider)) + 1 + width(&clean(&s.name));
        w[0] = w[0].max(probe.min(MAX_COLUMN));
        w[1] = w[1].max(hex_len(s.pc));
        w[2] = w[2].max(semaphore_len(s));
        w[3] = w[3].max(hex_len(s.file_offset));
        for a in &s.args {
            raw_w = raw_w.max(width(&clean(&a.raw)));
        }
    }
    let raw_w = raw_w.min(28);
    // Lines are gathered in one buffer and handed on in large writes.
    let mut l = String::with_capacity(FLUSH_AT + 4096);
    l.push_str("  ");
    pad_right(&mut l, header[0], w[0]);
    for i in 1..4 {
        l.push_str("  ");
        pad_left(&mut l, header[i], w[i]);
    }
    l.push_str("  ");
    l.push_str(header[4]);
    l.push('\n');
    let mut desc = String::with_capacity(64);
    for s in sites {
        l.push_str("  ");
        let (provider, name) = (clean(&s.provider), clean(&s.name));
        let probe = width(&provider) + 1 + width(&name);
        l.push_str(&provider);
        l.push(':');
        l.push_str(&name);
        push_spaces(&mut l, w[0].saturating_sub(probe));
        l.push_str("  ");
        push_spaces(&mut l, w[1].saturating_sub(hex_len(s.pc)));
        push_hex(&mut l, s.pc);
        l.push_str("  ");
        push_spaces(&mut l, w[2].saturating_sub(semaphore_len(s)));
        push_semaphore(&mut l, s);
        l.push_str("  ");
        push_spaces(&mut l, w[3].saturating_sub(hex_len(s.file_offset)));
        push_hex(&mut l, s.file_offset);
        l.push_str("  ");
        l.push_str(crate::elf::insn_label(s.insn, s.file_offset, optimize));
        l.push('\n');
        let names = declared_names(probes, s);
        for (i, a) in s.args.iter().enumerate() {
            l.push_str("      arg");
            push_decimal(&mut l, i as u64);
            l.push_str(if i < 10 { "  " } else { " " });
            pad_right(&mut l, &clean(&a.raw), raw_w);
            l.push_str(" -> ");
            desc.clear();
            describe_arg_into(&mut desc, a);
            l.push_str(&clean(&desc));
            if let Some(n) = names.get(i) {
                l.push_str("  (");
                l.push_str(&clean(n));
                l.push(')');
            }
            l.push('\n');
        }
        if l.len() >= FLUSH_AT {
            out.write_all(l.as_bytes())?;
            l.clear();
        }
    }
    out.write_all(l.as_bytes())
}

/// Text gathered before it is written on: a few pages, reused.
const FLUSH_AT: usize = 32 * 1024;

/// Widest a text column grows for alignment; longer cells overflow.
const MAX_COLUMN: usize = 96;

/// Characters `s` takes on a terminal, as the columns count them.
fn width(s: &str) -> usize {
    // Cleaned names are almost always ASCII, where bytes are characters.
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

/// The SEMAPHORE cell: `-`, its address, and why it is special if it is.
fn push_semaphore(out: &mut String, s: &Site) {
    match (s.semaphore, s.semaphore_offset) {
        (0, _) => out.push('-'),
        (a, off) => {
            push_hex(out, a);
            out.push_str(semaphore_suffix(s, off));
        }
    }
}

fn semaphore_suffix(s: &Site, offset: Option<u64>) -> &'static str {
    match offset {
        Some(_) if s.semaphore_shared_page => "(relro-shared)",
        Some(_) => "",
        None => "(unusable)",
    }
}

fn semaphore_len(s: &Site) -> usize {
    match s.semaphore {
        0 => 1,
        a => hex_len(a) + semaphore_suffix(s, s.semaphore_offset).len(),
    }
}

fn push_spaces(out: &mut String, n: usize) {
    // Slices of a row of spaces: pushing chars one by one was a few percent of `list`.
    const SPACES: &str = "                                                                ";
    let mut left = n;
    while left > 0 {
        let k = left.min(SPACES.len());
        out.push_str(&SPACES[..k]);
        left -= k;
    }
}

/// Appends `s` then spaces up to `width` characters. Done by hand: `format!`'s width must fit
/// in a u16 and panics beyond (a 65,536-character probe name did).
fn pad_right(out: &mut String, s: &str, w: usize) {
    out.push_str(s);
    push_spaces(out, w.saturating_sub(width(s)));
}

/// Appends spaces up to `width` characters, then `s`.
fn pad_left(out: &mut String, s: &str, w: usize) {
    push_spaces(out, w.saturating_sub(width(s)));
    out.push_str(s);
}

/// For tests and tools: the same listing of one file as a string.
pub fn list_to_string(path: &Path, json: bool) -> Result<(String, String), ListError> {
    let cfg = ListConfig {
        json,
        names: false,
        targets: vec![path.to_path_buf()],
        pid: None,
        patterns: Vec::new(),
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    run(&cfg, &mut out, &mut err)?;
    Ok((
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::elf::argspec::{parse_arg, Arch, ArgLoc};
    use crate::elf::SiteInsn;

    /// What `write_json` wrote before it was written by hand: serde's output of this struct.
    #[derive(serde::Serialize)]
    struct JsonArg<'a> {
        raw: &'a str,
        size: u8,
        signed: bool,
        float: bool,
        loc: &'a ArgLoc,
        readable: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        struct_size: Option<u8>,
    }

    #[derive(serde::Serialize)]
    struct JsonSite<'a> {
        path: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        provider: &'a str,
        name: &'a str,
        pc: u64,
        base: u64,
        semaphore: u64,
        semaphore_offset: Option<u64>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        semaphore_relro_shared: bool,
        file_offset: u64,
        args: &'a str,
        insn: SiteInsn,
        insn_bytes: &'a str,
        args_decoded: Vec<JsonArg<'a>>,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        arg_names: &'a [String],
    }

    fn serde_line(path: &str, pid: Option<u32>, s: &Site, arg_names: &[String]) -> String {
        let rec = JsonSite {
            path,
            pid,
            provider: &s.provider,
            name: &s.name,
            pc: s.pc,
            base: s.base,
            semaphore: s.semaphore,
            semaphore_offset: s.semaphore_offset,
            semaphore_relro_shared: s.semaphore_shared_page,
            file_offset: s.file_offset,
            args: &s.args_raw,
            insn: s.insn,
            insn_bytes: &s.insn_bytes,
            args_decoded: s
                .args
                .iter()
                .map(|a| JsonArg {
                    raw: &a.raw,
                    size: a.size,
                    signed: a.signed,
                    float: a.float,
                    loc: &a.loc,
                    readable: a.readable(),
                    struct_size: a.struct_size,
                })
                .collect(),
            arg_names,
        };
        serde_json::to_string(&rec).unwrap() + "\n"
    }

    fn site(provider: &str, name: &str) -> Site {
        Site {
            provider: provider.into(),
            name: name.into(),
            pc: 0x1000,
            base: 0,
            semaphore: 0,
            file_offset: 0x1000,
            semaphore_offset: None,
            semaphore_shared_page: false,
            args_raw: String::new(),
            args: Vec::new(),
            insn: SiteInsn::Nop,
            insn_bytes: "90".into(),
            kind: crate::elf::SiteKind::Note,
        }
    }

    #[test]
    fn hand_written_json_is_what_serde_writes() {
        let args = [
            "-4@%edi",
            "8@-16(%rbp)",
            "-4@$-9",
            "2@-96(%rbp,%rax,8)",
            "8@mp_+24(%rip)",
            "8@sarr+8(%rcx)",
            "-4@a_s32-4(,%rax,4)",
            "8@-24+sym(%rip)",
            "4@$-1",
            "16@%rax",
            "8f@%xmm0",
            "4@%ah",
            "-4@[x29, -12]",
            "8@\"quoted\\\u{1b}[31m\"",
        ];
        let mut sites = Vec::new();
        for (i, raw) in args.iter().enumerate() {
            let arch = if raw.contains('[') {
                Arch::Aarch64
            } else {
                Arch::X86_64
            };
            let mut s = site("prov", &format!("name{i}"));
            s.args = vec![parse_arg(raw, arch).resolve(|_| (i % 2 == 0).then_some(0x4040))];
            s.args_raw = raw.to_string();
            s.pc = 0x1000 + i as u64;
            s.semaphore = if i % 3 == 0 { 0 } else { 0x2000 };
            s.semaphore_offset = (i % 3 == 1).then_some(0x1f00);
            s.semaphore_shared_page = i == 4;
            s.insn = [
                SiteInsn::Nop,
                SiteInsn::NopNop5,
                SiteInsn::Nop5,
                SiteInsn::SingleStep,
                SiteInsn::Unknown,
            ][i % 5];
            s.insn_bytes = "90".repeat(i % 4);
            sites.push(s);
        }
        // Names and paths with what JSON must escape, and none at all.
        let mut odd = site("p\"\\", "n\u{0}\u{7f}\u{202e}é\n\t");
        odd.args_raw = String::new();
        sites.push(odd);
        let names = ["a".to_string(), "b\"c".to_string()];
        for s in &sites {
            for (path, pid, names) in [
                ("/bin/x", None, &[][..]),
                ("/tmp/\u{1b}]x\"y", Some(42), &names[..]),
            ] {
                let mut mine = Vec::new();
                write_json(&mut mine, path, pid, s, names).unwrap();
                assert_eq!(
                    String::from_utf8(mine).unwrap(),
                    serde_line(path, pid, s, names)
                );
            }
        }
    }

    #[test]
    fn no_targets_is_an_error() {
        let cfg = ListConfig {
            json: false,
            names: false,
            targets: vec![],
            pid: None,
            patterns: vec![],
        };
        assert!(matches!(
            run(&cfg, &mut Vec::new(), &mut Vec::new()),
            Err(ListError::NoTargets)
        ));
    }

    #[test]
    fn broken_pipe_is_reported_as_such() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from(io::ErrorKind::BrokenPipe))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let cfg = ListConfig {
            json: true,
            names: false,
            targets: vec![],
            pid: Some(std::process::id()),
            patterns: vec![],
        };
        // The test binary itself has no probes, but libc may; force output with a named file.
        let me = std::env::current_exe().unwrap();
        let cfg = ListConfig {
            json: false,
            names: false,
            targets: vec![me],
            ..cfg
        };
        match run(&cfg, &mut Closed, &mut Vec::new()) {
            Err(e) => assert!(e.is_broken_pipe(), "{e}"),
            Ok(_) => panic!("writes to a closed pipe succeeded"),
        }
    }
}
