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

use crate::argspec::{ArgLoc, ArgSpec};
use crate::elf::{ElfError, ObjectProbes, Site, SiteInsn};
use crate::output::text::clean;
use crate::pattern::Pattern;
use crate::target::{self, Object, TargetError};
use serde::Serialize;
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
    let mut out = io::BufWriter::with_capacity(64 * 1024, out);
    // serde_json makes many tiny writes: into a Vec they are inlined, through `dyn Write` each
    // one is a call, which made JSON output cost more than parsing.
    let mut json_buf = Vec::with_capacity(1024);
    let mut printed = 0;
    let mut names = std::collections::BTreeSet::new();
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
            if let Some((hint, lib)) = crate::libhint::for_executable(path, &cfg.patterns) {
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
                cfg.patterns.is_empty()
                    || cfg.patterns.iter().any(|p| p.matches(&s.provider, &s.name))
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
                out.write_all(&json_buf)?;
            }
        } else {
            write_text(&mut out, &t, cfg, &probes, &sites)?;
        }
        printed += sites.len();
        // `list` exits right after: freeing every parsed site, argument and string one by one
        // was a tenth of its CPU time on libjvm.so (and on 50,000 sites). The OS takes it back.
        std::mem::forget(sites);
        std::mem::forget(probes);
    }
    for n in &names {
        writeln!(out, "{}", clean(n))?;
    }
    out.flush()?;
    Ok(printed)
}

/// ArgSpec plus `readable`, spelled out: serde's flatten buffers every field and is slow.
#[derive(Serialize)]
struct JsonArg<'a> {
    raw: &'a str,
    size: u8,
    signed: bool,
    float: bool,
    loc: &'a ArgLoc,
    readable: bool,
    /// The declared size of a struct passed by value, of which `size` bytes are read.
    #[serde(skip_serializing_if = "Option::is_none")]
    struct_size: Option<u8>,
}

#[derive(Serialize)]
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
    /// lld's packed layout: the kernel alone cannot raise this semaphore in processes started
    /// after attach (`watch` raises it itself).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    semaphore_relro_shared: bool,
    file_offset: u64,
    args: &'a str,
    insn: SiteInsn,
    insn_bytes: &'a str,
    args_decoded: Vec<JsonArg<'a>>,
    /// The argument names the probe's usdt-markers note declares.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    arg_names: &'a [String],
}

/// The argument names `probes` declares for `s` (usdt-markers' names note), if any.
fn declared_names<'a>(probes: &'a ObjectProbes, s: &Site) -> &'a [String] {
    probes
        .arg_names
        .iter()
        .find(|(p, n, _)| *p == s.provider && *n == s.name)
        .map_or(&[], |(_, _, names)| names.as_slice())
}

/// Replaces `buf` with one NDJSON line for `s`.
fn write_json(
    buf: &mut Vec<u8>,
    path: &str,
    pid: Option<u32>,
    s: &Site,
    arg_names: &[String],
) -> io::Result<()> {
    buf.clear();
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
    serde_json::to_writer(&mut *buf, &rec).map_err(io::Error::from)?;
    buf.push(b'\n');
    Ok(())
}

/// The SITE column: what a hit costs on this kernel (`optimize`: it turns uprobes on 5-byte
/// nops into calls). `optimized` (a call, ~3x cheaper than a trap), `trap` (the kernel
/// emulates a nop, ~0.5 µs), or single-stepped sites, which stand out at ~10 µs a hit.
pub fn insn_label(insn: SiteInsn, file_offset: u64, optimize: bool) -> &'static str {
    let optimizable = crate::elf::optimizable_offset(insn, file_offset).is_some();
    match insn {
        _ if optimizable && optimize => "optimized",
        SiteInsn::Nop | SiteInsn::NopNop5 => "trap",
        // Where the kernel does not optimize it, a nop5 is stepped like any instruction.
        SiteInsn::Nop5 | SiteInsn::SingleStep => "SINGLE-STEP (~20x cost)",
        SiteInsn::Unknown => "?",
    }
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
    let rows: Vec<[String; 5]> = sites
        .iter()
        .map(|s| {
            let sema = match (s.semaphore, s.semaphore_offset) {
                (0, _) => "-".to_string(),
                (a, Some(_)) if s.semaphore_shared_page => format!("{a:#x}(relro-shared)"),
                (a, Some(_)) => format!("{a:#x}"),
                (a, None) => format!("{a:#x}(unusable)"),
            };
            [
                format!("{}:{}", clean(&s.provider), clean(&s.name)),
                format!("{:#x}", s.pc),
                sema,
                format!("{:#x}", s.file_offset),
                insn_label(s.insn, s.file_offset, optimize).to_string(),
            ]
        })
        .collect();
    let header = ["PROBE", "PC", "SEMAPHORE", "OFFSET", "SITE"];
    // Columns are as wide as their widest cell, but a freak name (a file can hold a 100k-char
    // probe name) only overflows its own row instead of padding every other one.
    let mut w = header.map(str::len);
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count().min(MAX_COLUMN));
        }
    }
    let line = |out: &mut dyn Write, r: [&str; 5]| {
        let mut l = String::with_capacity(128);
        l.push_str("  ");
        pad_right(&mut l, r[0], w[0]);
        for i in 1..4 {
            l.push_str("  ");
            pad_left(&mut l, r[i], w[i]);
        }
        l.push_str("  ");
        l.push_str(r[4]);
        writeln!(out, "{l}")
    };
    line(out, header)?;
    let raws: Vec<Vec<std::borrow::Cow<'_, str>>> = sites
        .iter()
        .map(|s| s.args.iter().map(|a| clean(&a.raw)).collect())
        .collect();
    let raw_w = raws
        .iter()
        .flatten()
        .map(|r| r.chars().count())
        .max()
        .unwrap_or(0)
        .min(28);
    for ((s, r), raws) in sites.iter().zip(&rows).zip(&raws) {
        line(out, [&r[0], &r[1], &r[2], &r[3], &r[4]])?;
        let names = declared_names(probes, s);
        for (i, (a, raw)) in s.args.iter().zip(raws).enumerate() {
            let mut l = format!("      arg{i:<2} ");
            pad_right(&mut l, raw, raw_w);
            match names.get(i) {
                Some(n) => writeln!(out, "{l} -> {}  ({})", clean(&describe_arg(a)), clean(n))?,
                None => writeln!(out, "{l} -> {}", clean(&describe_arg(a)))?,
            }
        }
    }
    // As in `run`: the process ends soon, no point freeing each cell.
    std::mem::forget(rows);
    Ok(())
}

/// Widest a text column grows for alignment; longer cells overflow.
const MAX_COLUMN: usize = 96;

/// Appends `s` then spaces up to `width` characters. Done by hand: `format!`'s width must fit
/// in a u16 and panics beyond (a 65,536-character probe name did).
fn pad_right(out: &mut String, s: &str, width: usize) {
    out.push_str(s);
    let n = s.chars().count();
    out.extend(std::iter::repeat_n(' ', width.saturating_sub(n)));
}

/// Appends spaces up to `width` characters, then `s`.
fn pad_left(out: &mut String, s: &str, width: usize) {
    let n = s.chars().count();
    out.extend(std::iter::repeat_n(' ', width.saturating_sub(n)));
    out.push_str(s);
}

/// A compact reading of one argument: its C type and where the tracer reads it.
pub fn describe_arg(a: &ArgSpec) -> String {
    let d = describe_loc(a);
    match a.struct_size {
        Some(n) if a.readable() => format!("{d} (low 8 bytes of a {n}-byte struct)"),
        _ => d,
    }
}

/// `SYMBOL` or `SYMBOL+OFFSET` / `SYMBOL-OFFSET`, as an assembler writes a symbolic address.
fn symbol_plus(symbol: &str, offset: i64) -> String {
    if offset == 0 {
        symbol.to_string()
    } else {
        format!("{symbol}{offset:+}")
    }
}

fn describe_loc(a: &ArgSpec) -> String {
    use std::fmt::Write as _;
    // Pushed piece by piece rather than through format!: `list` describes every argument of
    // every site (thousands in libjvm.so, 100,000 in a generated binary).
    let mut ty = String::with_capacity(48);
    ty.push(if a.float {
        'f'
    } else if a.signed {
        's'
    } else {
        'u'
    });
    let _ = write!(ty, "{}", u32::from(a.size) * 8);
    match &a.loc {
        ArgLoc::Unsupported { reason } => format!("unreadable: {reason}"),
        ArgLoc::Const { value } => format!("{ty} = {}", const_value(*value, a.size, a.signed)),
        ArgLoc::Reg { reg } => {
            ty.push_str(" in ");
            ty.push_str(&reg.canonical);
            ty
        }
        ArgLoc::Mem {
            base,
            index,
            scale,
            disp,
        } => {
            let mut d = ty;
            d.push_str(" at [");
            d.push_str(&base.canonical);
            if let Some(ix) = index {
                d.push('+');
                d.push_str(&ix.canonical);
                if *scale > 1 {
                    let _ = write!(d, "*{scale}");
                }
            }
            if *disp != 0 {
                let _ = write!(d, "{disp:+}");
            }
            d.push(']');
            d
        }
        ArgLoc::RipRel {
            symbol,
            offset,
            address,
        } => {
            let sym = symbol_plus(symbol, *offset);
            match address {
                Some(addr) => format!("{ty} at [{sym} = {addr:#x}]"),
                None => format!("unreadable: symbol {symbol} not found ({ty} at [{sym}])"),
            }
        }
        ArgLoc::SymMem {
            symbol,
            offset,
            base,
            index,
            scale,
            address,
        } => {
            let sym = symbol_plus(symbol, *offset);
            let regs: Vec<String> = base
                .iter()
                .map(|b| b.canonical.clone())
                .chain(index.iter().map(|ix| match scale {
                    1 => ix.canonical.clone(),
                    s => format!("{}*{s}", ix.canonical),
                }))
                .collect();
            let regs = regs.join("+");
            match address {
                Some(addr) => format!("{ty} at [{sym} = {addr:#x} + {regs}]"),
                None => format!(
                    "unreadable: no absolute address for {symbol} (not found, or not an \
                     ET_EXEC) ({ty} at [{sym} + {regs}])"
                ),
            }
        }
    }
}

/// An immediate as the program sees it: truncated to its size, then sign-extended if signed.
fn const_value(v: u64, size: u8, signed: bool) -> String {
    let bits = u32::from(size.clamp(1, 8)) * 8;
    let v = if bits == 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    };
    if signed {
        let shift = 64 - bits;
        (((v << shift) as i64) >> shift).to_string()
    } else {
        v.to_string()
    }
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
    use crate::argspec::{parse_arg, Arch};

    #[test]
    fn describes_each_kind_of_argument() {
        let d = |s: &str| describe_arg(&parse_arg(s, Arch::X86_64).resolve(|_| None));
        assert_eq!(d("-4@%edi"), "s32 in rdi");
        assert_eq!(d("8@%r8"), "u64 in r8");
        assert_eq!(d("-4@$-9"), "s32 = -9");
        assert_eq!(d("4@$-1"), "u32 = 4294967295");
        assert_eq!(d("-1@$255"), "s8 = -1");
        assert_eq!(d("8@$18446744073709551614"), "u64 = 18446744073709551614");
        assert_eq!(d("-4@-16(%rbp)"), "s32 at [rbp-16]");
        assert_eq!(d("8@(%rsp)"), "u64 at [rsp]");
        assert_eq!(d("2@-96(%rbp,%rax,8)"), "u16 at [rbp+rax*8-96]");
        assert!(d("8@mp_+24(%rip)").starts_with("unreadable: symbol mp_ not found"));
        assert_eq!(d("4@%ah"), "unreadable: high-byte register %ah");
        assert_eq!(d("16@%rax"), "u64 in rax (low 8 bytes of a 16-byte struct)");
        assert_eq!(
            d("16@-16(%rsp)"),
            "u64 at [rsp-16] (low 8 bytes of a 16-byte struct)"
        );
        assert_eq!(
            describe_arg(&parse_arg("-4@[x29, -12]", Arch::Aarch64).resolve(|_| None)),
            "s32 at [x29-12]"
        );
        let mut resolved = parse_arg("8@mp_+24(%rip)", Arch::X86_64).resolve(|_| None);
        if let ArgLoc::RipRel { address, .. } = &mut resolved.loc {
            *address = Some(0x1018);
        }
        assert_eq!(describe_arg(&resolved), "u64 at [mp_+24 = 0x1018]");
        let sym_mem = |s: &str, addr: u64| {
            let mut a = parse_arg(s, Arch::X86_64).resolve(|_| None);
            match &mut a.loc {
                ArgLoc::SymMem { address, .. } => *address = Some(addr),
                other => panic!("{s}: {other:?}"),
            }
            describe_arg(&a)
        };
        assert_eq!(
            sym_mem("-1@a_s8(%rax)", 0x404040),
            "s8 at [a_s8 = 0x404040 + rax]"
        );
        assert_eq!(
            sym_mem("-2@a_s16(%rax,%rax)", 0x404048),
            "s16 at [a_s16 = 0x404048 + rax+rax]"
        );
        assert_eq!(
            sym_mem("4@a_u32(,%rax,4)", 0x404060),
            "u32 at [a_u32 = 0x404060 + rax*4]"
        );
        assert_eq!(
            sym_mem("8@sarr+8(%rcx)", 0x404088),
            "u64 at [sarr+8 = 0x404088 + rcx]"
        );
        assert_eq!(
            d("8@sarr+8(%rcx)"),
            "unreadable: no absolute address for sarr (not found, or not an ET_EXEC) \
             (u64 at [sarr+8 + rcx])"
        );
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
