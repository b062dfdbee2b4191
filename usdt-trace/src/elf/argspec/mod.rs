//! SDT argument specs (`-4@%edi 8@-16(%rbp) 8@global+8(%rip)`) → typed argument locations.
//!
//! # How sdt.h describes an argument
//!
//! The probe macro does not copy its arguments anywhere. It hands each one to an inline-asm
//! operand with the `nor` constraint and writes the operand's *assembler text* into the note, so
//! the compiler is free to leave the value wherever it already was. What the note says is:
//!
//! ```text
//!   [-]SIZE[f]@OPERAND        e.g. -4@%edi   8@-16(%rbp)   -4@$5   8@mp_+24(%rip)
//! ```
//!
//! `-` means signed, SIZE is the C type's size in bytes and `f` marks floating point. On x86_64
//! the operand is AT&T syntax ([`x86_64`]): a register of any width (the SIZE, not the
//! register's width, says how many bytes count), an immediate, `disp(base,index,scale)` memory,
//! or a rip-relative symbol that only the ELF symbol table can turn into an address. Non-PIE
//! code also uses a symbol as an absolute displacement (`8@arr(,%rax,8)`), readable only in an
//! ET_EXEC. aarch64 ([`aarch64`]) writes `x0`, `5` and `[sp, 112]`. Arguments are separated by
//! spaces, which aarch64 also puts *inside* brackets, so splitting is bracket-aware.
//!
//! The tracer reads a register as a u64 word of `struct pt_regs` ([`Reg::pt_regs_word`], from
//! the tables in [`usdt_trace_common::regs`] that the eBPF side reads with), so every spelling
//! of a register (`%r8d`, `%r8w`, `%r8b`) maps to its full register's slot. Anything it cannot
//! read (high-byte registers, segment overrides, vector registers, floats, structs passed by
//! value) becomes [`ArgLoc::Unsupported`] with a reason, at its own index.
//!
//! # Two steps: parse, then resolve symbols
//!
//! Parsing needs only the text; a symbol operand also needs the object's symbol table. So
//! [`parse_args`] yields [`ParsedArg`]s, which name the symbol they need ([`ParsedArg::symbol`]),
//! and [`ParsedArg::resolve`] turns each into a finished [`ArgSpec`] given that symbol's
//! address (or None when it has none). An `ArgSpec` is therefore never half-built: a
//! `RipRel`/`SymMem` with `address: None` means the lookup was done and failed.
//!
//! Pure: no I/O. Beside the parsers, `lower.rs` turns a spec into what the kernel reads and
//! `describe.rs` into what `list` shows: a new argument form changes this folder and the eBPF
//! reader (`usdt-trace-ebpf/src/args.rs`) only.

pub mod aarch64;
pub mod describe;
pub mod lower;
pub mod x86_64;

use serde::Serialize;
use std::borrow::Cow;

/// The most arguments `sys/sdt.h` can emit (`STAP_PROBE12`), shared with the eBPF side. More
/// means a corrupt note.
pub use usdt_trace_common::MAX_ARGS;

/// Instruction set the spec is written for (from the ELF header's e_machine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    X86_64,
    Aarch64,
    /// Any other machine: specs are kept raw and every argument is unsupported.
    Other,
}

/// A register operand, normalised to the full-width register.
///
/// The names are static strings (an odd spelling such as aarch64's `x07` is owned): `list`
/// parses every argument of every site, and two small allocations per register were a good
/// part of its time and memory on 50,000 sites.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reg {
    /// The name as written in the spec, without `%` (e.g. `"r8d"`, `"x29"`, `"sp"`).
    pub name: Cow<'static, str>,
    /// The canonical full-width name (e.g. `"r8"`, `"x29"`, `"sp"`): always one of a fixed
    /// set.
    pub canonical: &'static str,
    /// Index of the register as a u64 word in the kernel's `struct pt_regs` for this arch
    /// ([`usdt_trace_common::regs`]).
    pub pt_regs_word: u8,
}

/// Where an argument's value lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ArgLoc {
    /// An immediate (`$-9`, `$18446744073709551614`, aarch64 `5`). Stored as u64 bits.
    Const { value: u64 },
    /// The value is in a register.
    Reg { reg: Reg },
    /// `*(base + index*scale + disp)`; `index` is None for plain `disp(%reg)` / `[x29, -12]`.
    Mem {
        base: Reg,
        index: Option<Reg>,
        scale: u8,
        disp: i64,
    },
    /// `*(symbol + offset)`, rip-relative on x86_64. `address` is the symbol's link-time
    /// address plus offset; None when the object's .symtab/.dynsym did not give one.
    RipRel {
        symbol: String,
        offset: i64,
        address: Option<u64>,
    },
    /// `*(symbol + offset + base + index*scale)`: an absolute symbol as the displacement, no
    /// %rip. gcc -no-pie addresses global arrays this way (`a(%rax)`, `a(%rax,%rax)`,
    /// `a(,%rax,4)`), so `base` may be absent (`index` is then present). `address` is the
    /// symbol's address plus offset, given only in ET_EXEC objects: in a PIE or shared library
    /// the symbol moves with the load bias, which the operand does not carry.
    SymMem {
        symbol: String,
        offset: i64,
        base: Option<Reg>,
        index: Option<Reg>,
        scale: u8,
        address: Option<u64>,
    },
    /// Parsed but cannot be read (float, %ah, segment, xmm, unknown symbol...)
    /// or could not be parsed at all.
    Unsupported { reason: String },
    /// Not a note's operand: the Go goroutine frame that both ends of a Go function probe carry
    /// (see `elf::gofunc::goroutine_frame_arg`). Read as `(g << 24) | (stack.hi - sp)`: the
    /// goroutine (`%r14` under ABIInternal, `*g + 8` its stack's top), and how deep in its
    /// stack the call is, which Go's stack copying keeps.
    GoFrame,
}

/// One argument of a probe site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ArgSpec {
    /// The argument's text exactly as in the note (e.g. `"-4@%edi"`).
    pub raw: String,
    /// Size in bytes that the tracer reads (1, 2, 4, 8). Inferred when omitted.
    pub size: u8,
    pub signed: bool,
    /// `f` suffix: floating point.
    pub float: bool,
    pub loc: ArgLoc,
    /// A struct passed by value (`16@%rax`, `16@-16(%rsp)`) declares 16 or 24 bytes; `size` is
    /// then 8 and the tracer reads its low 8 bytes (the register, or 8 bytes at the address),
    /// as other USDT tools do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub struct_size: Option<u8>,
}

impl ArgSpec {
    /// True when the tracer can read this argument.
    pub fn readable(&self) -> bool {
        !matches!(self.loc, ArgLoc::Unsupported { .. })
            && !self.float
            && matches!(self.size, 1 | 2 | 4 | 8)
            && !matches!(
                self.loc,
                ArgLoc::RipRel { address: None, .. } | ArgLoc::SymMem { address: None, .. }
            )
    }
}

/// Why a whole argument string was rejected (a single bad argument never rejects the note: it
/// becomes [`ArgLoc::Unsupported`] at its index).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("{count} arguments (sys/sdt.h emits at most {MAX_ARGS})")]
    TooMany { count: usize },
}

/// One argument as parsed from its text, before the symbol it names (if any) is looked up.
/// [`ParsedArg::resolve`] finishes it into an [`ArgSpec`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedArg {
    raw: String,
    size: u8,
    signed: bool,
    float: bool,
    loc: Parsed,
    struct_size: Option<u8>,
}

/// A location, or a symbol operand still missing its address.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Parsed {
    Done(ArgLoc),
    RipRel {
        symbol: String,
        offset: i64,
    },
    SymMem {
        symbol: String,
        offset: i64,
        base: Option<Reg>,
        index: Option<Reg>,
        scale: u8,
    },
}

/// The symbol a [`ParsedArg`] needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymbolRef<'a> {
    pub name: &'a str,
    /// True for an absolute displacement without %rip ([`ArgLoc::SymMem`]): only an ET_EXEC
    /// can give it an address. False for rip-relative operands.
    pub absolute: bool,
}

impl ParsedArg {
    /// The argument's text exactly as in the note.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The symbol whose address the argument needs, if any.
    pub fn symbol(&self) -> Option<SymbolRef<'_>> {
        match &self.loc {
            Parsed::Done(_) => None,
            Parsed::RipRel { symbol, .. } => Some(SymbolRef {
                name: symbol,
                absolute: false,
            }),
            Parsed::SymMem { symbol, .. } => Some(SymbolRef {
                name: symbol,
                absolute: true,
            }),
        }
    }

    /// Finishes the argument. `lookup` is called only when the argument names a symbol, and
    /// returns the symbol's link-time address (None: unknown, and the argument is unreadable);
    /// the operand's offset is added here.
    pub fn resolve(self, lookup: impl FnOnce(SymbolRef<'_>) -> Option<u64>) -> ArgSpec {
        let address = |symbol: &str, absolute: bool, offset: i64| {
            lookup(SymbolRef {
                name: symbol,
                absolute,
            })
            .map(|v| v.wrapping_add(offset as u64))
        };
        let loc = match self.loc {
            Parsed::Done(loc) => loc,
            Parsed::RipRel { symbol, offset } => ArgLoc::RipRel {
                address: address(&symbol, false, offset),
                symbol,
                offset,
            },
            Parsed::SymMem {
                symbol,
                offset,
                base,
                index,
                scale,
            } => ArgLoc::SymMem {
                address: address(&symbol, true, offset),
                symbol,
                offset,
                base,
                index,
                scale,
            },
        };
        ArgSpec {
            raw: self.raw,
            size: self.size,
            signed: self.signed,
            float: self.float,
            loc,
            struct_size: self.struct_size,
        }
    }
}

/// Parses a note's whole argument string.
///
/// `""` and `":"` (what sdt.h writes for a probe without arguments) give no arguments. Each
/// argument keeps its index even when it cannot be parsed, so `argN` always means the N-th
/// argument of the probe macro.
pub fn parse_args(raw: &str, arch: Arch) -> Result<Vec<ParsedArg>, ArgsError> {
    let (count, args) = parse_args_iter(raw, arch)?;
    let mut out = Vec::with_capacity(count);
    out.extend(args);
    Ok(out)
}

/// [`parse_args`] without collecting: how many arguments there are, and each one parsed as
/// it is taken. The string is checked (count, `:`) before anything is parsed.
pub fn parse_args_iter(
    raw: &str,
    arch: Arch,
) -> Result<(usize, impl Iterator<Item = ParsedArg> + '_), ArgsError> {
    // One pass keeps the pieces and counts them all (the error says how many).
    let mut pieces = [""; MAX_ARGS];
    let mut count = 0;
    let mut keep = |p| {
        if let Some(slot) = pieces.get_mut(count) {
            *slot = p;
        }
        count += 1;
    };
    if raw.is_ascii() {
        // Bytes are characters: no UTF-8 decoding (which was a third of the splitting).
        split_args(raw, raw.bytes().map(char::from).enumerate(), &mut keep);
    } else {
        split_args(raw, raw.char_indices(), &mut keep);
    }
    if count == 1 && pieces[0] == ":" {
        count = 0;
    }
    if count > MAX_ARGS {
        return Err(ArgsError::TooMany { count });
    }
    Ok((count, (0..count).map(move |i| parse_arg(pieces[i], arch))))
}

/// Splits on whitespace outside brackets: aarch64 writes memory operands as `8@[sp, 112]`.
/// `chars` are `raw`'s characters and their byte offsets; each piece goes to `piece`.
fn split_args<'a>(
    raw: &'a str,
    chars: impl Iterator<Item = (usize, char)>,
    piece: &mut impl FnMut(&'a str),
) {
    let mut depth = 0usize;
    let mut start: Option<usize> = None;
    for (i, c) in chars {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if c.is_whitespace() && depth == 0 {
            if let Some(s) = start.take() {
                piece(&raw[s..i]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        piece(&raw[s..]);
    }
}

/// Parses one argument (`-4@%edi`, `8@-16(%rbp)`, `-4@[x29, -12]`...). Never fails: anything
/// the tracer cannot read comes back as [`ArgLoc::Unsupported`] with the reason.
pub fn parse_arg(one: &str, arch: Arch) -> ParsedArg {
    let raw = one.trim();
    let mut spec = ParsedArg {
        raw: raw.to_string(),
        size: 0,
        signed: false,
        float: false,
        loc: unsupported(String::new()),
        struct_size: None,
    };
    // Hand-written probes may leave the size out entirely (`%eax`), so `@` is optional.
    // Bytes, not a char pattern: the char searcher calls memcmp for each candidate, which
    // showed in `list` on 50,000 sites.
    let (size_part, operand) = match raw.bytes().position(|b| b == b'@') {
        Some(at) => (Some(&raw[..at]), &raw[at + 1..]),
        None => (None, raw),
    };
    let mut size: Option<u32> = None;
    if let Some(mut s) = size_part {
        if let Some(rest) = s.strip_prefix('-') {
            spec.signed = true;
            s = rest;
        }
        if let Some(rest) = s.strip_suffix('f') {
            spec.float = true;
            s = rest;
        }
        if !s.is_empty() {
            match s.parse::<u32>() {
                Ok(n) => {
                    size = Some(n);
                    spec.size = u8::try_from(n).unwrap_or(0);
                }
                Err(_) => {
                    spec.loc = unsupported(format!("bad size {s:?}"));
                    return spec;
                }
            }
        }
    }
    let parsed = match arch {
        Arch::X86_64 => x86_64::operand(operand),
        Arch::Aarch64 => aarch64::operand(operand),
        Arch::Other => Err("argument specs of this architecture are not decoded".to_string()),
    };
    let (loc, width) = match parsed {
        Ok(v) => v,
        Err(reason) => {
            spec.loc = unsupported(reason);
            return spec;
        }
    };
    match size {
        None => spec.size = width.unwrap_or(8),
        Some(1 | 2 | 4 | 8) => {}
        // A struct passed by value: its low 8 bytes are what a u64 read of the register or
        // the memory gives. A vector register holds it only as a whole: the operand says so.
        Some(16 | 24) => {
            spec.struct_size = Some(spec.size);
            spec.size = 8;
        }
        Some(n) => {
            spec.loc = unsupported(format!("invalid size {n}"));
            return spec;
        }
    }
    spec.loc = if spec.float {
        unsupported("floating-point argument".to_string())
    } else {
        loc
    };
    spec
}

fn unsupported(reason: String) -> Parsed {
    Parsed::Done(ArgLoc::Unsupported { reason })
}

/// Parses a decimal or `0x` hex integer with an optional sign. Values up to u64::MAX are kept
/// as their bit pattern: sdt.h prints unsigned 64-bit constants in decimal.
fn parse_int(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    let mag = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => digits.parse::<u64>().ok()?,
    };
    Some(if neg {
        (mag as i64).wrapping_neg()
    } else {
        mag as i64
    })
}

/// Location plus the operand's natural width, used when the spec leaves the size out.
type Operand = Result<(Parsed, Option<u8>), String>;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::testutil::*;
    use super::*;

    #[test]
    fn other_arch_keeps_size_but_not_location() {
        let spec = parse_arg("-4@r3", Arch::Other).resolve(|_| None);
        assert_eq!((spec.size, spec.signed), (4, true));
        assert!(!spec.readable());
    }

    #[test]
    fn whole_strings() {
        assert!(parse_args("", Arch::X86_64).unwrap().is_empty());
        assert!(parse_args(":", Arch::X86_64).unwrap().is_empty());
        assert!(parse_args("   ", Arch::X86_64).unwrap().is_empty());
        let args = parse_args("-4@%edi  8@%rsi\t4@$1", Arch::X86_64).unwrap();
        assert_eq!(args.len(), 3);
        assert_eq!(args[2].raw, "4@$1");
        let twelve = ["8@%rax"; 12].join(" ");
        assert_eq!(parse_args(&twelve, Arch::X86_64).unwrap().len(), 12);
        let thirteen = ["8@%rax"; 13].join(" ");
        assert_eq!(
            parse_args(&thirteen, Arch::X86_64),
            Err(ArgsError::TooMany { count: 13 })
        );
    }

    #[test]
    fn split_on_any_whitespace_outside_brackets() {
        let raws = |s: &str| -> Vec<String> {
            parse_args(s, Arch::Aarch64)
                .unwrap()
                .iter()
                .map(|a| a.raw().to_string())
                .collect()
        };
        // ASCII (split byte by byte) and not (split char by char) alike.
        assert_eq!(
            raws("8@x0\x0b-4@[sp, 12]\t4@5"),
            ["8@x0", "-4@[sp, 12]", "4@5"]
        );
        assert_eq!(
            raws("8@x0\u{a0}-4@[sp,\u{3000}12] é"),
            ["8@x0", "-4@[sp,\u{3000}12]", "é"]
        );
    }

    #[test]
    fn bad_arguments_keep_their_index() {
        let args = resolved(parse_args("8@%rdi 4@%ah 8@%rsi", Arch::X86_64).unwrap());
        assert!(args[0].readable());
        assert!(!args[1].readable());
        assert_eq!(reg_of(&args[2]), ("rsi", 13));
    }

    #[test]
    fn aarch64_bracketed_operands_are_not_split() {
        let args =
            resolved(parse_args("-4@x0 8@[sp, 112] -4@[x29, -12] 4@5", Arch::Aarch64).unwrap());
        assert_eq!(args.len(), 4);
        assert_eq!(args[1].raw, "8@[sp, 112]");
        assert!(args.iter().all(ArgSpec::readable));
    }

    #[test]
    fn never_panics_on_odd_bytes() {
        for s in [
            "@",
            "@@",
            "-",
            "f@",
            "-f@",
            "99999999999@%rax",
            "8@((%rax))",
            "8@(%rax,)",
            "8@[]",
            "8@[,]",
            "é@ü",
            "8@(%r8é)",
            "8@%r",
            "8@%r99d",
            "8@--5(%rax)",
            "8@$--1",
        ] {
            let _ = x86(s);
            let _ = a64(s);
        }
    }

    #[test]
    fn symbols_are_looked_up_only_when_named() {
        let plain = parse_arg("8@%rax", Arch::X86_64);
        assert_eq!(plain.symbol(), None);
        let spec = plain.resolve(|_| panic!("no symbol to look up"));
        assert!(spec.readable());

        let rip = parse_arg("8@mp_+24(%rip)", Arch::X86_64);
        assert_eq!(
            rip.symbol(),
            Some(SymbolRef {
                name: "mp_",
                absolute: false
            })
        );
        let spec = rip.clone().resolve(|_| Some(0x1000));
        assert_eq!(
            spec.loc,
            ArgLoc::RipRel {
                symbol: "mp_".into(),
                offset: 24,
                address: Some(0x1018)
            }
        );
        assert!(spec.readable());
        assert!(
            !rip.resolve(|_| None).readable(),
            "a failed lookup is unreadable"
        );

        let abs = parse_arg("-4@a_s32-4(,%rax,4)", Arch::X86_64);
        assert!(abs.symbol().unwrap().absolute);
        match abs.resolve(|_| Some(0x404064)).loc {
            ArgLoc::SymMem { address, .. } => assert_eq!(address, Some(0x404060)),
            other => panic!("{other:?}"),
        }
        // A float never needs its symbol: it is unreadable whatever the address.
        assert_eq!(parse_arg("8f@x(%rip)", Arch::X86_64).symbol(), None);
    }
}

/// Helpers for the grammar tests of this module and its children.
#[cfg(test)]
mod testutil {
    use super::*;

    /// Finishes arguments with no symbol table.
    pub(super) fn resolved(args: Vec<ParsedArg>) -> Vec<ArgSpec> {
        args.into_iter().map(|a| a.resolve(|_| None)).collect()
    }
    /// Parses with no symbol table: symbol operands stay unresolved.
    pub(super) fn x86(s: &str) -> ArgSpec {
        parse_arg(s, Arch::X86_64).resolve(|_| None)
    }
    pub(super) fn a64(s: &str) -> ArgSpec {
        parse_arg(s, Arch::Aarch64).resolve(|_| None)
    }
    pub(super) fn reg_of(spec: &ArgSpec) -> (&str, u8) {
        match &spec.loc {
            ArgLoc::Reg { reg } => (reg.canonical, reg.pt_regs_word),
            other => panic!("{}: expected a register, got {other:?}", spec.raw),
        }
    }
    pub(super) fn reason(spec: &ArgSpec) -> &str {
        match &spec.loc {
            ArgLoc::Unsupported { reason } => reason,
            other => panic!("{}: expected unsupported, got {other:?}", spec.raw),
        }
    }
}
