//! Function symbols, and the probe sites that trace a function from entry to return.
//!
//! USDT notes exist only where a program's authors put them; every function with a symbol can
//! be traced too. A function probe is two sites at the function's first instruction: an
//! ordinary uprobe (the entry, a span start) and a return probe (the end, fired when the
//! function returns). With those expressed as [`Site`]s, everything `watch` does for notes
//! (pairing in the kernel, recursion included, the time split, histograms, strings) applies
//! unchanged.
//!
//! Symbols come from `.dynsym` (the exported names users know) and `.symtab`: defined
//! `STT_FUNC` symbols of non-zero size (`STT_GNU_IFUNC` symbols name a resolver, not the
//! function the caller ends up in). Aliases at one address are one function with several
//! names, so a function is probed once whatever name matched.
//!
//! Pure: works on the bytes of a file, unit-tested on built test programs.

use super::fnshape::{self, Shape};
use super::gofunc::{self, GoLayout, GO_ARGS};
use super::gopclntab;
use super::sites;
use super::{linked_header, malformed, ElfError, Site, SiteInsn};
use crate::elf::argspec::{parse_arg, Arch, ArgSpec};
use crate::util::pattern::Pattern;
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, Sym};
use object::Endianness;
use serde::Serialize;
use std::collections::BTreeMap;

/// The provider that function sites are shown under (`fn:readline`).
pub use crate::util::pattern::FN_PROVIDER;
/// Suffixes of a function's two sites: the auto-pairing convention Python's USDT probes use,
/// so the span is named after the function.
mod ends;
mod read;
pub use ends::*;
pub use read::*;

pub const ENTRY_SUFFIX: &str = "__entry";
pub const RETURN_SUFFIX: &str = "__return";

/// The x86_64 SysV integer argument registers, in order, and the return value's.
const SYSV_ARGS: [&str; 6] = ["%rdi", "%rsi", "%rdx", "%rcx", "%r8", "%r9"];
const SYSV_RET: [&str; 1] = ["%rax"];
/// AAPCS64: x0..x7 in, x0 out.
const AAPCS64_ARGS: [&str; 8] = ["x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"];
const AAPCS64_RET: [&str; 1] = ["x0"];

/// What role a site plays for a function probe (or none: a note's site).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteKind {
    /// A `.note.stapsdt` site.
    #[default]
    Note,
    /// A function's first instruction: a span start.
    FnEntry,
    /// A return probe at the function's first instruction: fires when the function returns,
    /// with the registers as they are then.
    FnReturn,
    /// A Go function's entry (past its stack check), arguments in ABIInternal registers.
    GoEntry,
    /// An ordinary uprobe on one of a function's `ret` instructions: the span end wherever a
    /// return probe could harm the program.
    FnRetInsn,
    /// An ordinary uprobe on one of a Go function's `ret` instructions (return probes crash Go
    /// programs), results in ABIInternal registers.
    GoRetInsn,
    /// A `ret` of a function this one tail-calls (`jmp`s to): its call ends there, at the
    /// stack pointer of its own entry. Other calls of the tail-called function pass it too,
    /// and close nothing.
    FnTailRet,
}

impl SiteKind {
    pub fn is_note(&self) -> bool {
        *self == SiteKind::Note
    }

    /// Attached as a return probe (uretprobe) rather than an ordinary uprobe.
    pub fn is_return_probe(&self) -> bool {
        *self == SiteKind::FnReturn
    }

    /// A Go function's site: its strings are (pointer, length) pairs, not NUL-terminated.
    pub fn is_go(&self) -> bool {
        matches!(self, SiteKind::GoEntry | SiteKind::GoRetInsn)
    }
}

/// Which symbol table a function's first name came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SymbolTable {
    Dynsym,
    Symtab,
    /// Go's runtime function table, in a Go program without `.symtab`.
    Gopclntab,
}

/// One function: a defined, sized function symbol in an executable segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Function {
    /// The demangled name shown (the first name found at this address).
    pub name: String,
    /// Every demangled name at this address (aliases), `name` first.
    pub names: Vec<String>,
    /// The symbol as written in the file (mangled).
    pub symbol: String,
    pub table: SymbolTable,
    pub address: u64,
    pub size: u64,
    /// File offset of the first instruction (where the uprobe goes).
    pub file_offset: u64,
    /// What the first instruction costs the kernel to step over, as for a probe site.
    pub insn: SiteInsn,
    pub insn_bytes: String,
    /// Go functions only: the entry past the stack check and the `ret` instructions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub go_layout: Option<GoProbes>,
    /// What decoding its code found (its `ret`s, whether it is a leaf): how its end can be
    /// traced without harm. Not for Go functions, whose layout says it.
    #[serde(skip)]
    pub shape: Shape,
    /// The object's entry point (`_start`): entered by the kernel, never returns.
    #[serde(skip)]
    pub entry_point: bool,
    /// Code of Go's ABIInternal (a Go function of a Go binary; not C code linked by cgo).
    #[serde(skip)]
    pub go_abi: bool,
}

/// Where a Go function is probed, with what the entry instruction costs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GoProbes {
    #[serde(flatten)]
    pub layout: GoLayout,
    pub entry_insn: SiteInsn,
}

impl Function {
    /// Matched by `fn:GLOB` under any of its names.
    pub fn matches(&self, pattern: &Pattern) -> bool {
        self.matched_name(&[pattern]).is_some()
    }

    /// The first of its names that one of `patterns` matches: what the user asked for
    /// (`fn:waitpid` traces libc's `__waitpid` and shows it as `waitpid`).
    pub fn matched_name(&self, patterns: &[&Pattern]) -> Option<&str> {
        self.names
            .iter()
            .find(|n| patterns.iter().any(|p| p.matches_function(n)))
            .map(String::as_str)
    }
}

/// The functions of one object, in address order.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Functions {
    pub arch: Option<Arch>,
    /// Built by the Go toolchain (has `.go.buildinfo`): its stacks move, so a return probe
    /// (which overwrites the return address on the stack) would crash it.
    pub go: bool,
    /// The Go release that built it, from inline build info (Go >= 1.18).
    pub go_version: Option<(u32, u32)>,
    pub functions: Vec<Function>,
    /// Names of `STT_GNU_IFUNC` symbols: the resolver picks an implementation at load time,
    /// so a function symbol of the same name (glibc's compat `memcpy@GLIBC_2.2.5`) is not
    /// what the program calls.
    #[serde(skip)]
    pub ifuncs: Vec<String>,
    /// The object has a `.symtab` (it is not stripped).
    #[serde(skip)]
    pub has_symtab: bool,
    /// Why an exception, a panic or a forced unwind may pass through its functions' frames
    /// (what in the object says so), or None when nothing in it can unwind: then a return
    /// probe is safe on every function that is not otherwise excluded ([`function_end`]).
    #[serde(skip)]
    pub unwinds: Option<String>,
}

impl Functions {
    /// Whether its function names came from Go's `.gopclntab` (a stripped Go program).
    pub fn from_gopclntab(&self) -> bool {
        self.functions
            .iter()
            .any(|f| f.table == SymbolTable::Gopclntab)
    }
}

/// Why functions cannot be traced in an object.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FnProbeError {
    #[error("{object}: function probes are supported on x86_64 and aarch64 (Go: x86_64 only); this object is for {arch:?}")]
    Arch { object: String, arch: Option<Arch> },
    #[error("{object}: a Go program built by Go older than 1.18 (or with unreadable build info): its calling convention is not known")]
    OldGo { object: String },
}

/// How function ends are traced (`watch --fn-returns`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum FnReturns {
    /// A return probe wherever nothing can unwind across the frame: every function of a
    /// program with no exception tables or unwinder symbols (a `longjmp` is handled by the
    /// kernel), and leaf functions anywhere; an ordinary probe on each `ret` instruction
    /// elsewhere (C++, Rust, libc, shared libraries).
    #[default]
    Auto,
    /// Never a return probe: an ordinary probe on each `ret` instruction.
    RetInsn,
    /// RISKY: a return probe on every function not known to break with one. It rewrites the
    /// return address on the stack: C++ exceptions or Rust panics unwinding through a traced
    /// function abort the program, and a `longjmp` over one can kill it.
    ReturnProbe,
}

/// How function probes are placed: how ends are traced (`--fn-returns`), and whether the
/// entry probes read arguments (records, filters, `--by` keys and strings do; a duration
/// histogram does not, so its entry may sit further in, see [`super::fnentry`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FnPlacement {
    pub returns: FnReturns,
    pub entry_args: bool,
}

impl Default for FnPlacement {
    fn default() -> Self {
        FnPlacement {
            returns: FnReturns::Auto,
            entry_args: true,
        }
    }
}

/// Ends traced as `returns` says, entries reading arguments.
impl From<FnReturns> for FnPlacement {
    fn from(returns: FnReturns) -> Self {
        FnPlacement {
            returns,
            entry_args: true,
        }
    }
}

impl FnPlacement {
    /// Where `f`'s entry probe goes, if not on its first instruction.
    pub fn moved_entry(&self, f: &Function) -> Option<super::fnentry::Moved> {
        if self.entry_args {
            f.shape.entry.args
        } else {
            f.shape.entry.timing.or(f.shape.entry.args)
        }
    }
}

/// A function that matched but is not traced, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub name: String,
    pub reason: String,
}

/// The sites of the functions some pattern matched, and those refused.
#[derive(Clone, Debug, Default)]
pub struct FnSites {
    pub sites: Vec<Site>,
    pub refused: Vec<Refusal>,
    /// Matched names that are IFUNCs in this object (see [`Functions::ifuncs`]), with the
    /// function symbols that implement them here.
    pub ifuncs: Vec<(String, Vec<String>)>,
}

/// The entry and end sites of every function of `funcs` that some pattern matches (only
/// patterns whose provider is `fn` are looked at), ends traced as `mode` says. `object` names
/// the file in errors.
pub fn function_sites(
    funcs: &Functions,
    patterns: &[&Pattern],
    object: &str,
    place: impl Into<FnPlacement>,
) -> Result<FnSites, FnProbeError> {
    let place: FnPlacement = place.into();
    let mode = place.returns;
    let mut out = FnSites::default();
    // A name that is an IFUNC here: its function symbol of that name (a compat version) is
    // not what the program calls; its implementations are named after it.
    for n in &funcs.ifuncs {
        if patterns.iter().any(|p| p.matches(FN_PROVIDER, n)) {
            let stem = format!("__{}_", n.trim_start_matches('_'));
            let imps: Vec<String> = funcs
                .functions
                .iter()
                .filter(|f| f.name.starts_with(&stem))
                .map(|f| f.name.clone())
                .collect();
            out.ifuncs.push((n.clone(), imps));
        }
    }
    let chosen: Vec<(&Function, &str)> = funcs
        .functions
        .iter()
        .filter_map(|f| Some((f, f.matched_name(patterns)?)))
        .filter(|(f, _)| ifunc_shadowed(funcs, f).is_none())
        .collect();
    if chosen.is_empty() {
        return Ok(out);
    }
    let (arch, args, ret): (Arch, &[&str], &[&str]) = match funcs.arch {
        Some(Arch::X86_64) => (Arch::X86_64, &SYSV_ARGS, &SYSV_RET),
        Some(Arch::Aarch64) => (Arch::Aarch64, &AAPCS64_ARGS, &AAPCS64_RET),
        other => {
            return Err(FnProbeError::Arch {
                object: object.to_string(),
                arch: other,
            })
        }
    };
    let reg = |r: &str| parse_arg(&format!("8@{r}"), arch).resolve(|_| None);
    let ends = Ends::new(funcs);
    out.sites.reserve(2 * chosen.len());
    for (f, name) in chosen {
        let end = ends.of(f, mode);
        let rets = match end {
            FnEnd::Refused { reason } => {
                out.refused.push(Refusal {
                    name: name.to_string(),
                    reason,
                });
                continue;
            }
            FnEnd::RetInsns {
                offsets,
                tail_offsets,
            } => Some((offsets, tail_offsets)),
            FnEnd::ReturnProbe => None,
        };
        if f.go_abi {
            // Go's return instructions are found by an x86_64 decoder only.
            if arch != Arch::X86_64 {
                return Err(FnProbeError::Arch {
                    object: object.to_string(),
                    arch: funcs.arch,
                });
            }
            if funcs.go_version.is_none_or(|v| v < (1, 18)) {
                return Err(FnProbeError::OldGo {
                    object: object.to_string(),
                });
            }
        }
        let go = f.go_layout.as_ref().filter(|_| f.go_abi);
        // Go: ABIInternal registers, then the goroutine frame both ends are paired by.
        let regs: Vec<ArgSpec> = if go.is_some() {
            GO_ARGS
                .iter()
                .map(|r| reg(r))
                .chain([gofunc::goroutine_frame_arg()])
                .collect()
        } else {
            Vec::new()
        };
        let site = |suffix: &str,
                    offset: u64,
                    args: Vec<ArgSpec>,
                    insn: SiteInsn,
                    bytes: String,
                    kind: SiteKind| Site {
            provider: FN_PROVIDER.to_string(),
            name: format!("{name}{suffix}"),
            // Within one segment addresses and offsets move together (a tail-called function
            // may lie before this one).
            pc: f.address.wrapping_add(offset.wrapping_sub(f.file_offset)),
            base: 0,
            semaphore: 0,
            file_offset: offset,
            semaphore_offset: None,
            semaphore_shared_page: false,
            args_raw: args
                .iter()
                .map(|a| a.raw.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            args,
            insn,
            insn_bytes: bytes,
            kind,
        };
        if let Some(g) = go {
            out.sites.push(site(
                ENTRY_SUFFIX,
                g.layout.entry_offset,
                regs.clone(),
                g.entry_insn,
                String::new(),
                SiteKind::GoEntry,
            ));
            for r in rets.map(|r| r.0).unwrap_or_default() {
                // `ret` is not one of the instructions the kernel emulates.
                out.sites.push(site(
                    RETURN_SUFFIX,
                    r,
                    regs.clone(),
                    SiteInsn::SingleStep,
                    String::new(),
                    SiteKind::GoRetInsn,
                ));
            }
            continue;
        }
        let entry_args: Vec<ArgSpec> = args.iter().map(|r| reg(r)).collect();
        let ret_args = || ret.iter().map(|r| reg(r)).collect::<Vec<_>>();
        // On the first emulated instruction, when nothing before it changes what is read.
        let (entry_off, entry_insn, entry_bytes) = match place.moved_entry(f) {
            Some(m) => (m.offset, m.insn, String::new()),
            None => (f.file_offset, f.insn, f.insn_bytes.clone()),
        };
        out.sites.push(site(
            ENTRY_SUFFIX,
            entry_off,
            entry_args,
            entry_insn,
            entry_bytes,
            SiteKind::FnEntry,
        ));
        match rets {
            None => out.sites.push(site(
                RETURN_SUFFIX,
                entry_off,
                ret_args(),
                entry_insn,
                String::new(),
                SiteKind::FnReturn,
            )),
            Some((rets, tails)) => {
                let kinds = rets
                    .into_iter()
                    .map(|r| (r, SiteKind::FnRetInsn))
                    .chain(tails.into_iter().map(|r| (r, SiteKind::FnTailRet)));
                for (r, kind) in kinds {
                    out.sites.push(site(
                        RETURN_SUFFIX,
                        r,
                        ret_args(),
                        SiteInsn::SingleStep,
                        String::new(),
                        kind,
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// The function a function site belongs to (its name without the entry/return suffix);
/// None for a note's site.
pub fn function_of(site: &Site) -> Option<&str> {
    match site.kind {
        SiteKind::Note => None,
        SiteKind::FnEntry | SiteKind::GoEntry => site.name.strip_suffix(ENTRY_SUFFIX),
        SiteKind::FnReturn | SiteKind::FnRetInsn | SiteKind::GoRetInsn | SiteKind::FnTailRet => {
            site.name.strip_suffix(RETURN_SUFFIX)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// tests/testprogs/watch_fn.c built with gcc -O2 (gcc is part of the project's setup).
    fn built_watch_fn() -> Vec<u8> {
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/testprogs/watch_fn.c");
        let dir = std::env::temp_dir().join(format!("usdt-trace-fn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("watch_fn");
        let st = std::process::Command::new("gcc")
            .args(["-O2", "-fcf-protection=full", "-o"])
            .arg(&out)
            .arg(src)
            .status()
            .unwrap();
        assert!(st.success());
        let bytes = std::fs::read(&out).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        bytes
    }

    #[test]
    fn functions_of_a_built_program_and_their_sites() {
        let data = built_watch_fn();
        let funcs = functions(&data).unwrap();
        assert_eq!(funcs.arch, Some(Arch::X86_64));
        assert!(!funcs.go);
        let by_name = |n: &str| funcs.functions.iter().find(|f| f.name == n);
        for n in ["fn_add6", "fn_fact", "fn_greet", "main"] {
            let f = by_name(n).unwrap_or_else(|| panic!("{n} missing"));
            assert!(f.size > 0);
            // A PIE's text: the offset is where the bytes are in the file.
            assert_eq!(f.file_offset, f.address, "{n}");
            // -fcf-protection puts endbr64 first: not a nop, so single-stepped.
            assert_eq!(f.insn_bytes.get(..8), Some("f30f1efa"), "{n}");
            assert_eq!(f.insn, SiteInsn::SingleStep, "{n}");
            assert_eq!(f.table, SymbolTable::Symtab, "{n}");
        }
        // Undefined (printf) and non-function (greeting) symbols are not functions.
        assert!(by_name("printf").is_none() && by_name("greeting").is_none());
        let addrs: Vec<u64> = funcs.functions.iter().map(|f| f.address).collect();
        assert!(
            addrs.windows(2).all(|w| w[0] < w[1]),
            "sorted, one per address"
        );

        let pat = Pattern::parse("fn:fn_fact").unwrap();
        let sites = function_sites(&funcs, &[&pat], "watch_fn", FnReturns::ReturnProbe)
            .unwrap()
            .sites;
        assert_eq!(sites.len(), 2);
        let fact = by_name("fn_fact").unwrap();
        let (entry, ret) = (&sites[0], &sites[1]);
        assert_eq!(
            (entry.provider.as_str(), entry.name.as_str()),
            ("fn", "fn_fact__entry")
        );
        assert_eq!(ret.name, "fn_fact__return");
        assert_eq!(
            (entry.kind, ret.kind),
            (SiteKind::FnEntry, SiteKind::FnReturn)
        );
        // Past endbr64 onto the emulated push that follows (a return probe goes there too).
        assert_eq!(
            fact.shape.entry.args.map(|m| m.offset),
            Some(fact.file_offset + 4)
        );
        assert_eq!(
            (entry.file_offset, ret.file_offset),
            (fact.file_offset + 4, fact.file_offset + 4)
        );
        assert_eq!(entry.insn, SiteInsn::Push);
        // Nothing in a plain C program unwinds: by default even a recursive function (not a
        // leaf) takes the return probe.
        assert_eq!(funcs.unwinds, None);
        let auto = function_sites(&funcs, &[&pat], "watch_fn", FnReturns::Auto).unwrap();
        assert_eq!(
            auto.sites.iter().map(|s| s.kind).collect::<Vec<_>>(),
            [SiteKind::FnEntry, SiteKind::FnReturn]
        );
        // Without return probes it ends at its `ret` instructions, paired by stack pointer.
        let safe = function_sites(&funcs, &[&pat], "watch_fn", FnReturns::RetInsn).unwrap();
        assert!(safe.sites.len() == 1 + fact.shape.rets.len() && safe.refused.is_empty());
        assert!(safe.sites[1..]
            .iter()
            .all(|s| s.kind == SiteKind::FnRetInsn && s.args_raw == "8@%rax"));
        assert_eq!(
            safe.sites[1..]
                .iter()
                .map(|s| s.file_offset)
                .collect::<Vec<_>>(),
            fact.shape.rets
        );
        assert_eq!(entry.args_raw, "8@%rdi 8@%rsi 8@%rdx 8@%rcx 8@%r8 8@%r9");
        assert_eq!(ret.args_raw, "8@%rax");
        assert!(entry
            .args
            .iter()
            .chain(&ret.args)
            .all(|a| a.readable() && a.size == 8));
        assert_eq!(
            (function_of(entry), function_of(ret)),
            (Some("fn_fact"), Some("fn_fact"))
        );
        // An alias is named as the pattern asked.
        let mut aliased = funcs.clone();
        aliased
            .functions
            .iter_mut()
            .find(|f| f.name == "fn_fact")
            .unwrap()
            .names
            .push("factorial".into());
        let pat = Pattern::parse("fn:fact*").unwrap();
        let sites = function_sites(&aliased, &[&pat], "watch_fn", FnReturns::ReturnProbe)
            .unwrap()
            .sites;
        assert_eq!(sites[0].name, "factorial__entry");
        let none = Pattern::parse("fn:nothing*").unwrap();
        assert!(
            function_sites(&funcs, &[&none], "watch_fn", FnReturns::ReturnProbe)
                .unwrap()
                .sites
                .is_empty()
        );
        // Not an ELF file: the same error as for notes.
        assert!(matches!(
            functions(b"#!/bin/sh\n"),
            Err(ElfError::NotElf { .. })
        ));
    }

    #[test]
    fn an_object_that_throws_keeps_ret_ends_and_one_that_cannot_gets_return_probes() {
        let dir = std::env::temp_dir().join(format!("usdt-trace-unw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let build = |cc: &str, name: &str, code: &str| {
            let src = dir.join(name);
            std::fs::write(&src, code).unwrap();
            let out = dir.join(format!("{name}.bin"));
            let st = std::process::Command::new(cc)
                .args(["-O2", "-o"])
                .arg(&out)
                .arg(&src)
                .status()
                .unwrap();
            assert!(st.success());
            functions(&std::fs::read(&out).unwrap()).unwrap()
        };
        let cpp = build(
            "g++",
            "t.cc",
            "#include <stdexcept>\n__attribute__((noinline)) long mid(long x) { if (x > 3) throw std::runtime_error(\"x\"); return x + 1; }\n\
             int main(int argc, char **) { try { return (int)mid(argc); } catch (...) { return 7; } }\n",
        );
        let c = build(
            "gcc",
            "t.c",
            "__attribute__((noinline)) long mid(long x) { return x * 3; }\nint main(int argc, char **argv) { (void)argv; return (int)mid(argc); }\n",
        );
        let _ = std::fs::remove_dir_all(&dir);
        let why = cpp.unwinds.clone().unwrap();
        assert!(
            why.contains(".gcc_except_table") || why.contains("__cxa_throw"),
            "{why}"
        );
        assert_eq!(c.unwinds, None);
        let pat = Pattern::parse("fn:main").unwrap();
        let kinds = |funcs: &Functions| {
            function_sites(funcs, &[&pat], "t", FnReturns::Auto)
                .unwrap()
                .sites
                .iter()
                .map(|s| s.kind)
                .collect::<Vec<_>>()
        };
        // main calls mid: not a leaf. In the C++ object an exception can pass its frame.
        assert!(kinds(&cpp)[1..].iter().all(|k| *k == SiteKind::FnRetInsn));
        assert_eq!(kinds(&c), [SiteKind::FnEntry, SiteKind::FnReturn]);
        let ends = Ends::new(&cpp);
        let main = cpp.functions.iter().find(|f| f.name == "main").unwrap();
        let end = ends.of(main, FnReturns::Auto);
        assert_eq!(ends.why(main, &end, FnReturns::Auto), Some(why));
    }

    #[test]
    fn cpp_names_are_demangled_and_globs_may_hold_colons() {
        let dir = std::env::temp_dir().join(format!("usdt-trace-fncpp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("m.cc");
        std::fs::write(
            &src,
            "namespace ns { struct Calc { long twice(long x); }; long Calc::twice(long x) { return 2 * x; } }\n\
             template <typename T> T add(T a, T b) { return a + b; }\n\
             int main() { ns::Calc c; return (int)c.twice(1) + add<int>(1, 2); }\n",
        )
        .unwrap();
        let out = dir.join("m");
        let st = std::process::Command::new("g++")
            .args(["-O0", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap();
        assert!(st.success());
        let funcs = functions(&std::fs::read(&out).unwrap()).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let names: Vec<&str> = funcs.functions.iter().map(|f| f.name.as_str()).collect();
        assert!(names.contains(&"ns::Calc::twice(long)"), "{names:?}");
        assert!(names.contains(&"int add<int>(int, int)"), "{names:?}");
        let twice = funcs
            .functions
            .iter()
            .find(|f| f.name.starts_with("ns::Calc"))
            .unwrap();
        assert_eq!(twice.symbol, "_ZN2ns4Calc5twiceEl");
        let pat = Pattern::parse("fn:ns::Calc::*").unwrap();
        let sites = function_sites(&funcs, &[&pat], "m", FnReturns::ReturnProbe)
            .unwrap()
            .sites;
        assert_eq!(sites[0].name, "ns::Calc::twice(long)__entry");
    }

    #[test]
    fn go_programs_get_ret_sites_and_other_arches_are_refused() {
        let f = |go, arch| Functions {
            arch: Some(arch),
            go,
            go_version: go.then_some((1, 19)),
            functions: vec![Function {
                name: "main.main".into(),
                names: vec!["main.main".into()],
                symbol: "main.main".into(),
                table: SymbolTable::Symtab,
                address: 0x1000,
                size: 16,
                file_offset: 0x1000,
                insn: SiteInsn::SingleStep,
                insn_bytes: String::new(),
                shape: Shape::default(),
                entry_point: false,
                go_abi: go,
                go_layout: go.then(|| GoProbes {
                    layout: GoLayout {
                        entry_offset: 0x1006,
                        ret_offsets: vec![0x1008, 0x100c],
                    },
                    entry_insn: SiteInsn::SingleStep,
                }),
            }],
            ifuncs: Vec::new(),
            has_symtab: true,
            unwinds: go.then(|| "a Go program".to_string()),
        };
        let pat = Pattern::parse("fn:main.*").unwrap();
        // Go: the entry past the stack check, an ordinary uprobe on each `ret`, ABIInternal.
        let go = function_sites(
            &f(true, Arch::X86_64),
            &[&pat],
            "srv",
            FnReturns::ReturnProbe,
        )
        .unwrap()
        .sites;
        let got: Vec<(&str, u64, SiteKind)> = go
            .iter()
            .map(|s| (s.name.as_str(), s.file_offset, s.kind))
            .collect();
        assert_eq!(
            got,
            [
                ("main.main__entry", 0x1006, SiteKind::GoEntry),
                ("main.main__return", 0x1008, SiteKind::GoRetInsn),
                ("main.main__return", 0x100c, SiteKind::GoRetInsn),
            ]
        );
        assert!(go.iter().all(|s| !s.kind.is_return_probe()));
        assert_eq!(
            go[0].args_raw,
            "8@%rax 8@%rbx 8@%rcx 8@%rdi 8@%rsi 8@%r8 8@%r9 8@%r10 8@%r11 goroutine"
        );
        // Both ends carry the goroutine frame last: the spans are paired by it.
        assert!(go
            .iter()
            .all(|s| s.args.last().unwrap().loc == crate::elf::argspec::ArgLoc::GoFrame));
        assert_eq!(go[0].pc, 0x1006);
        let mut old = f(true, Arch::X86_64);
        old.go_version = None;
        assert!(matches!(
            function_sites(&old, &[&pat], "srv", FnReturns::ReturnProbe),
            Err(FnProbeError::OldGo { .. })
        ));
        assert!(matches!(
            function_sites(
                &f(false, Arch::Other),
                &[&pat],
                "srv",
                FnReturns::ReturnProbe
            ),
            Err(FnProbeError::Arch { .. })
        ));
        let arm = function_sites(
            &f(false, Arch::Aarch64),
            &[&pat],
            "srv",
            FnReturns::ReturnProbe,
        )
        .unwrap()
        .sites;
        assert_eq!(arm[0].args_raw, "8@x0 8@x1 8@x2 8@x3 8@x4 8@x5 8@x6 8@x7");
        assert_eq!(arm[1].args_raw, "8@x0");
        assert!(arm.iter().flat_map(|s| &s.args).all(|a| a.readable()));
        assert_eq!(
            function_sites(
                &f(false, Arch::X86_64),
                &[&pat],
                "srv",
                FnReturns::ReturnProbe
            )
            .unwrap()
            .sites
            .len(),
            2
        );
    }

    #[test]
    fn demangles_rust_and_cpp_and_leaves_c_alone() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("_Z3addii"), "add(int, int)");
        assert_eq!(demangle("readline"), "readline");
        assert_eq!(
            demangle("net/http.serverHandler.ServeHTTP"),
            "net/http.serverHandler.ServeHTTP"
        );
        // Not valid mangling: kept as written.
        assert_eq!(demangle("_Zjunk"), "_Zjunk");
    }
}
