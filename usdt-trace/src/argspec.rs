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
//! the operand is AT&T syntax: a register of any width (the SIZE, not the register's width, says
//! how many bytes count), an immediate, `disp(base,index,scale)` memory, or a rip-relative
//! symbol that only the ELF symbol table can turn into an address. Non-PIE code also uses a
//! symbol as an absolute displacement (`8@arr(,%rax,8)`), readable only in an ET_EXEC. aarch64 writes `x0`, `5`
//! and `[sp, 112]`. Arguments are separated by spaces, which aarch64 also puts *inside*
//! brackets, so splitting is bracket-aware.
//!
//! The tracer reads a register as a u64 word of `struct pt_regs` ([`Reg::pt_regs_word`]), so
//! every spelling of a register (`%r8d`, `%r8w`, `%r8b`) maps to its full register's slot.
//! Anything it cannot read (high-byte registers, segment overrides, vector registers, floats,
//! structs passed by value) becomes [`ArgLoc::Unsupported`] with a reason, at its own index.
//!
//! Pure: no I/O. INTERFACE OWNED BY THE LEAD — the types below are what the tracer consumes;
//! keep their names and meanings, add fields/variants only if needed.

use serde::Serialize;

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
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reg {
    /// The name as written in the spec, without `%` (e.g. `"r8d"`, `"x29"`, `"sp"`).
    pub name: String,
    /// The canonical full-width name (e.g. `"r8"`, `"x29"`, `"sp"`).
    pub canonical: String,
    /// Index of the register as a u64 word in the kernel's `struct pt_regs` for this arch
    /// (x86_64: r15=0 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_ax ip cs flags
    /// sp=19 ss; aarch64: x0..x30 = 0..30, sp = 31, pc = 32).
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
    /// address plus offset, when the symbol was found in .symtab/.dynsym (filled by elf.rs).
    RipRel {
        symbol: String,
        offset: i64,
        address: Option<u64>,
    },
    /// `*(symbol + offset + base + index*scale)`: an absolute symbol as the displacement, no
    /// %rip. gcc -no-pie addresses global arrays this way (`a(%rax)`, `a(%rax,%rax)`,
    /// `a(,%rax,4)`), so `base` may be absent (`index` is then present). `address` is the
    /// symbol's address plus offset, filled by elf.rs only in ET_EXEC objects: in a PIE or
    /// shared library the symbol moves with the load bias, which the operand does not carry.
    SymMem {
        symbol: String,
        offset: i64,
        base: Option<Reg>,
        index: Option<Reg>,
        scale: u8,
        address: Option<u64>,
    },
    /// Parsed but cannot be read (float, 16/24-byte struct, %ah, segment, xmm, unknown symbol...)
    /// or could not be parsed at all.
    Unsupported { reason: String },
}

/// One argument of a probe site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ArgSpec {
    /// The argument's text exactly as in the note (e.g. `"-4@%edi"`).
    pub raw: String,
    /// Size in bytes (1, 2, 4, 8; 16/24 are parsed but unsupported). Inferred when omitted.
    pub size: u8,
    pub signed: bool,
    /// `f` suffix: floating point.
    pub float: bool,
    pub loc: ArgLoc,
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

/// The most arguments `sys/sdt.h` can emit (`STAP_PROBE12`). More means a corrupt note.
pub const MAX_ARGS: usize = 12;

/// Why a whole argument string was rejected (a single bad argument never rejects the note: it
/// becomes [`ArgLoc::Unsupported`] at its index).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("{count} arguments (sys/sdt.h emits at most {MAX_ARGS})")]
    TooMany { count: usize },
}

/// Parses a note's whole argument string.
///
/// `""` and `":"` (what sdt.h writes for a probe without arguments) give no arguments. Each
/// argument keeps its index even when it cannot be parsed, so `argN` always means the N-th
/// argument of the probe macro.
pub fn parse_args(raw: &str, arch: Arch) -> Result<Vec<ArgSpec>, ArgsError> {
    let pieces = split_args(raw);
    if pieces.len() == 1 && pieces[0] == ":" {
        return Ok(Vec::new());
    }
    if pieces.len() > MAX_ARGS {
        return Err(ArgsError::TooMany {
            count: pieces.len(),
        });
    }
    Ok(pieces.into_iter().map(|p| parse_arg(p, arch)).collect())
}

/// Splits on whitespace outside brackets: aarch64 writes memory operands as `8@[sp, 112]`.
fn split_args(raw: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start: Option<usize> = None;
    for (i, c) in raw.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if c.is_whitespace() && depth == 0 {
            if let Some(s) = start.take() {
                out.push(&raw[s..i]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push(&raw[s..]);
    }
    out
}

/// Parses one argument (`-4@%edi`, `8@-16(%rbp)`, `-4@[x29, -12]`...). Never fails: anything
/// the tracer cannot read comes back as [`ArgLoc::Unsupported`] with the reason.
pub fn parse_arg(one: &str, arch: Arch) -> ArgSpec {
    let raw = one.trim();
    let mut spec = ArgSpec {
        raw: raw.to_string(),
        size: 0,
        signed: false,
        float: false,
        loc: ArgLoc::Unsupported {
            reason: String::new(),
        },
    };
    // Hand-written probes may leave the size out entirely (`%eax`), so `@` is optional.
    let (size_part, operand) = match raw.split_once('@') {
        Some((s, o)) => (Some(s), o),
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
        Arch::X86_64 => x86::operand(operand),
        Arch::Aarch64 => arm64::operand(operand),
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
        Some(16 | 24) => {
            spec.loc = unsupported(format!("{}-byte struct passed by value", spec.size));
            return spec;
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

fn unsupported(reason: String) -> ArgLoc {
    ArgLoc::Unsupported { reason }
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
type Operand = Result<(ArgLoc, Option<u8>), String>;

mod x86 {
    use super::{parse_int, ArgLoc, Operand, Reg};

    /// (spelling, canonical, pt_regs word, width in bytes) for every general-purpose register
    /// spelling GAS accepts in AT&T syntax.
    const GPRS: &[(&str, u8)] = &[
        ("rax", 10),
        ("rbx", 5),
        ("rcx", 11),
        ("rdx", 12),
        ("rsi", 13),
        ("rdi", 14),
        ("rbp", 4),
        ("rsp", 19),
        ("r8", 9),
        ("r9", 8),
        ("r10", 7),
        ("r11", 6),
        ("r12", 3),
        ("r13", 2),
        ("r14", 1),
        ("r15", 0),
    ];

    /// Narrower spellings of the legacy registers: (32, 16, 8 bit).
    const LEGACY: &[(&str, [&str; 3])] = &[
        ("rax", ["eax", "ax", "al"]),
        ("rbx", ["ebx", "bx", "bl"]),
        ("rcx", ["ecx", "cx", "cl"]),
        ("rdx", ["edx", "dx", "dl"]),
        ("rsi", ["esi", "si", "sil"]),
        ("rdi", ["edi", "di", "dil"]),
        ("rbp", ["ebp", "bp", "bpl"]),
        ("rsp", ["esp", "sp", "spl"]),
    ];

    pub(super) const RIP_WORD: u8 = 16;

    /// Resolves a register name (without `%`) to its full-width register and the width the
    /// name denotes.
    pub(super) fn reg(name: &str) -> Result<(Reg, u8), String> {
        let mk = |canonical: &str, word: u8, width: u8| {
            Ok((
                Reg {
                    name: name.to_string(),
                    canonical: canonical.to_string(),
                    pt_regs_word: word,
                },
                width,
            ))
        };
        if name == "rip" {
            return mk("rip", RIP_WORD, 8);
        }
        if let Some(&(canon, word)) = GPRS.iter().find(|(n, _)| *n == name) {
            return mk(canon, word, 8);
        }
        for (canon, narrow) in LEGACY {
            if let Some(i) = narrow.iter().position(|n| *n == name) {
                let word = GPRS.iter().find(|(n, _)| n == canon).map_or(0, |g| g.1);
                return mk(canon, word, [4, 2, 1][i]);
            }
        }
        // r8d r8w r8b (and GAS's r8l alias for the low byte).
        let digits_end = name
            .char_indices()
            .skip(1)
            .find(|(_, c)| !c.is_ascii_digit())
            .map_or(name.len(), |(i, _)| i);
        let (full, suffix) = name.split_at(digits_end);
        let width = match suffix {
            "d" => Some(4),
            "w" => Some(2),
            "b" | "l" => Some(1),
            _ => None,
        };
        if let (Some(w), Some(&(canon, word))) = (width, GPRS.iter().find(|(n, _)| *n == full)) {
            if canon.len() > 1 && canon.as_bytes()[1].is_ascii_digit() {
                return mk(canon, word, w);
            }
        }
        Err(match name {
            "ah" | "bh" | "ch" | "dh" => format!("high-byte register %{name}"),
            n if n.starts_with("xmm") || n.starts_with("ymm") || n.starts_with("zmm") => {
                format!("vector register %{n}")
            }
            n if n.starts_with("st") || n.starts_with("mm") => format!("x87/MMX register %{n}"),
            n => format!("unknown register %{n}"),
        })
    }

    fn percent_reg(s: &str) -> Result<(Reg, u8), String> {
        match s.strip_prefix('%') {
            Some(name) => reg(name),
            None => Err(format!("expected a register, found {s:?}")),
        }
    }

    pub(super) fn operand(op: &str) -> Operand {
        if op.is_empty() {
            return Err("empty operand".into());
        }
        if let Some(imm) = op.strip_prefix('$') {
            let value = parse_int(imm).ok_or_else(|| format!("bad constant {op:?}"))?;
            return Ok((
                ArgLoc::Const {
                    value: value as u64,
                },
                None,
            ));
        }
        if op.starts_with('%') && !op.contains('(') {
            if op.contains(':') {
                return Err(format!("segment-relative operand {op:?}"));
            }
            let (r, width) = percent_reg(op)?;
            if r.pt_regs_word == RIP_WORD {
                return Err("%rip as a value".into());
            }
            return Ok((ArgLoc::Reg { reg: r }, Some(width)));
        }
        if op.contains(':') {
            return Err(format!("segment-relative operand {op:?}"));
        }
        let open = op
            .find('(')
            .ok_or_else(|| format!("unrecognised operand {op:?}"))?;
        let inner = op[open + 1..]
            .strip_suffix(')')
            .ok_or_else(|| format!("unbalanced parentheses in {op:?}"))?;
        let disp = &op[..open];
        let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
        if parts.len() > 3 {
            return Err(format!("too many address components in {op:?}"));
        }
        let base = match parts[0] {
            "" => None,
            b => {
                let (base, base_width) = percent_reg(b)?;
                if base_width != 8 {
                    return Err(format!("{}-bit address register in {op:?}", base_width * 8));
                }
                Some(base)
            }
        };
        if base.as_ref().is_some_and(|b| b.pt_regs_word == RIP_WORD) {
            if parts.len() > 1 {
                return Err(format!("%rip with an index in {op:?}"));
            }
            return match symbolic_disp(disp) {
                Some((Some(symbol), offset)) => Ok((
                    ArgLoc::RipRel {
                        symbol: symbol.to_string(),
                        offset,
                        address: None,
                    },
                    None,
                )),
                Some((None, _)) => Err(format!("rip-relative operand without a symbol {op:?}")),
                None => Err(format!("bad rip-relative displacement in {op:?}")),
            };
        }
        let mut index = None;
        let mut scale = 1u8;
        if parts.len() >= 2 {
            let (ix, ix_width) = percent_reg(parts[1])?;
            if ix_width != 8 || ix.canonical == "rsp" || ix.pt_regs_word == RIP_WORD {
                return Err(format!("invalid index register in {op:?}"));
            }
            index = Some(ix);
        }
        if parts.len() == 3 {
            scale = match parts[2] {
                "1" => 1,
                "2" => 2,
                "4" => 4,
                "8" => 8,
                s => return Err(format!("invalid scale {s:?} in {op:?}")),
            };
        }
        let numeric = if disp.is_empty() {
            Some(0)
        } else {
            parse_int(disp)
        };
        match (numeric, base) {
            (Some(disp), Some(base)) => Ok((
                ArgLoc::Mem {
                    base,
                    index,
                    scale,
                    disp,
                },
                None,
            )),
            // gcc -no-pie: `a_s8(%rax)`, `a_s16(%rax,%rax)`, `a_s32(,%rax,4)`.
            (None, base) => match symbolic_disp(disp) {
                Some((Some(symbol), offset)) if base.is_some() || index.is_some() => Ok((
                    ArgLoc::SymMem {
                        symbol: symbol.to_string(),
                        offset,
                        base,
                        index,
                        scale,
                        address: None,
                    },
                    None,
                )),
                Some(_) => Err(format!(
                    "memory operand without a base or index register {op:?}"
                )),
                None => Err(format!("bad symbolic displacement in {op:?}")),
            },
            (Some(_), None) => Err(format!(
                "absolute memory operand without a base register or symbol {op:?}"
            )),
        }
    }

    /// `sym`, `sym+8`, `sym-2`, `24+sym`, `16`: at most one symbol (added, not subtracted)
    /// plus any numeric terms. None when the text is not such a sum.
    fn symbolic_disp(disp: &str) -> Option<(Option<&str>, i64)> {
        let bytes = disp.as_bytes();
        let (mut neg, first) = match bytes.first() {
            Some(b'-') => (true, 1),
            Some(b'+') => (false, 1),
            _ => (false, 0),
        };
        let mut term_start = first;
        let mut symbol: Option<&str> = None;
        let mut offset: i64 = 0;
        for i in first..=bytes.len() {
            if i < bytes.len() && bytes[i] != b'+' && bytes[i] != b'-' {
                continue;
            }
            let term = &disp[term_start..i];
            if term.starts_with(|c: char| c.is_ascii_digit()) {
                let n = parse_int(term)?;
                offset = if neg {
                    offset.wrapping_sub(n)
                } else {
                    offset.wrapping_add(n)
                };
            } else if !neg && symbol.is_none() && is_symbol(term) {
                symbol = Some(term);
            } else {
                return None;
            }
            if i < bytes.len() {
                neg = bytes[i] == b'-';
                term_start = i + 1;
            }
        }
        Some((symbol, offset))
    }

    fn is_symbol(s: &str) -> bool {
        s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '.')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$'))
    }
}

mod arm64 {
    use super::{parse_int, ArgLoc, Operand, Reg};

    fn reg(name: &str) -> Result<(Reg, u8), String> {
        let mk = |canonical: String, word: u8, width: u8| {
            Ok((
                Reg {
                    name: name.to_string(),
                    canonical,
                    pt_regs_word: word,
                },
                width,
            ))
        };
        match name {
            "sp" => return mk("sp".into(), 31, 8),
            "wsp" => return mk("sp".into(), 31, 4),
            "fp" => return mk("x29".into(), 29, 8),
            "lr" => return mk("x30".into(), 30, 8),
            _ => {}
        }
        let (width, num) = match name.split_at_checked(1) {
            Some(("x", n)) => (8, n),
            Some(("w", n)) => (4, n),
            _ => return Err(format!("unknown register {name:?}")),
        };
        match num.parse::<u8>() {
            Ok(n) if n <= 30 && !num.starts_with('+') => mk(format!("x{n}"), n, width),
            _ => Err(format!("unknown register {name:?}")),
        }
    }

    pub(super) fn operand(op: &str) -> Operand {
        if op.is_empty() {
            return Err("empty operand".into());
        }
        if let Some(inner) = op.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| format!("unbalanced brackets in {op:?}"))?;
            let mut parts = inner.split(',').map(str::trim);
            let base = parts.next().unwrap_or("");
            let (base, _) = reg(base)?;
            let disp = match parts.next() {
                None => 0,
                Some(d) => {
                    let d = d.strip_prefix('#').unwrap_or(d);
                    parse_int(d).ok_or_else(|| format!("unsupported offset {d:?} in {op:?}"))?
                }
            };
            if parts.next().is_some() {
                return Err(format!("too many address components in {op:?}"));
            }
            return Ok((
                ArgLoc::Mem {
                    base,
                    index: None,
                    scale: 1,
                    disp,
                },
                None,
            ));
        }
        let imm = op.strip_prefix('#').unwrap_or(op);
        if let Some(v) = parse_int(imm) {
            return Ok((ArgLoc::Const { value: v as u64 }, None));
        }
        let (r, width) = reg(op)?;
        Ok((ArgLoc::Reg { reg: r }, Some(width)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn x86(s: &str) -> ArgSpec {
        parse_arg(s, Arch::X86_64)
    }
    fn a64(s: &str) -> ArgSpec {
        parse_arg(s, Arch::Aarch64)
    }
    fn reg_of(spec: &ArgSpec) -> (&str, u8) {
        match &spec.loc {
            ArgLoc::Reg { reg } => (reg.canonical.as_str(), reg.pt_regs_word),
            other => panic!("{}: expected a register, got {other:?}", spec.raw),
        }
    }
    fn reason(spec: &ArgSpec) -> &str {
        match &spec.loc {
            ArgLoc::Unsupported { reason } => reason,
            other => panic!("{}: expected unsupported, got {other:?}", spec.raw),
        }
    }

    #[test]
    fn x86_registers_of_every_width_map_to_pt_regs() {
        let rows: &[(&str, &str, u8, u8)] = &[
            ("rax", "rax", 10, 8),
            ("eax", "rax", 10, 4),
            ("ax", "rax", 10, 2),
            ("al", "rax", 10, 1),
            ("rbx", "rbx", 5, 8),
            ("bl", "rbx", 5, 1),
            ("rcx", "rcx", 11, 8),
            ("cl", "rcx", 11, 1),
            ("rdx", "rdx", 12, 8),
            ("dx", "rdx", 12, 2),
            ("rsi", "rsi", 13, 8),
            ("esi", "rsi", 13, 4),
            ("si", "rsi", 13, 2),
            ("sil", "rsi", 13, 1),
            ("rdi", "rdi", 14, 8),
            ("dil", "rdi", 14, 1),
            ("rbp", "rbp", 4, 8),
            ("bpl", "rbp", 4, 1),
            ("rsp", "rsp", 19, 8),
            ("spl", "rsp", 19, 1),
            ("r8", "r8", 9, 8),
            ("r8d", "r8", 9, 4),
            ("r8w", "r8", 9, 2),
            ("r8b", "r8", 9, 1),
            ("r9", "r9", 8, 8),
            ("r10d", "r10", 7, 4),
            ("r11w", "r11", 6, 2),
            ("r12b", "r12", 3, 1),
            ("r13", "r13", 2, 8),
            ("r14d", "r14", 1, 4),
            ("r15", "r15", 0, 8),
        ];
        for &(name, canon, word, width) in rows {
            let spec = x86(&format!("%{name}"));
            assert_eq!(reg_of(&spec), (canon, word), "{name}");
            assert_eq!(spec.size, width, "inferred size of %{name}");
            assert!(!spec.signed);
            let spec = x86(&format!("-8@%{name}"));
            assert_eq!(reg_of(&spec), (canon, word));
            assert_eq!(
                (spec.size, spec.signed),
                (8, true),
                "SIZE governs, not the name"
            );
            assert!(spec.readable());
            match &spec.loc {
                ArgLoc::Reg { reg } => assert_eq!(reg.name, name),
                _ => unreachable!(),
            }
        }
    }

    #[test]
    fn x86_sizes_and_signedness() {
        for (s, size, signed) in [
            ("1@%al", 1, false),
            ("-1@%al", 1, true),
            ("2@%ax", 2, false),
            ("-2@%ax", 2, true),
            ("4@%edi", 4, false),
            ("-4@%edi", 4, true),
            ("8@%rdi", 8, false),
            ("-8@%rdi", 8, true),
        ] {
            let spec = x86(s);
            assert_eq!(
                (spec.size, spec.signed, spec.float),
                (size, signed, false),
                "{s}"
            );
            assert!(spec.readable(), "{s}");
        }
    }

    #[test]
    fn x86_constants() {
        assert_eq!(x86("4@$5").loc, ArgLoc::Const { value: 5 });
        assert_eq!(
            x86("-4@$-9").loc,
            ArgLoc::Const {
                value: (-9i64) as u64
            }
        );
        assert_eq!(
            x86("8@$18446744073709551614").loc,
            ArgLoc::Const {
                value: 18446744073709551614
            }
        );
        assert_eq!(x86("8@$0x10").loc, ArgLoc::Const { value: 16 });
        assert_eq!(x86("$7").size, 8, "constant without size defaults to 8");
        assert!(matches!(x86("4@$").loc, ArgLoc::Unsupported { .. }));
        assert!(matches!(x86("4@$abc").loc, ArgLoc::Unsupported { .. }));
    }

    #[test]
    fn x86_memory_operands() {
        let spec = x86("-4@-1204(%rbp)");
        assert_eq!(spec.size, 4);
        match spec.loc {
            ArgLoc::Mem {
                base,
                index,
                scale,
                disp,
            } => {
                assert_eq!((base.canonical.as_str(), base.pt_regs_word), ("rbp", 4));
                assert_eq!((index, scale, disp), (None, 1, -1204));
            }
            other => panic!("{other:?}"),
        }
        match x86("8@(%rsp)").loc {
            ArgLoc::Mem { base, disp: 0, .. } => assert_eq!(base.pt_regs_word, 19),
            other => panic!("{other:?}"),
        }
        match x86("8@8(%rdi)").loc {
            ArgLoc::Mem { base, disp: 8, .. } => assert_eq!(base.pt_regs_word, 14),
            other => panic!("{other:?}"),
        }
        assert_eq!(x86("(%rdi)").size, 8, "memory without size defaults to 8");
        assert!(matches!(
            x86("8@0x10(%r12)").loc,
            ArgLoc::Mem { disp: 16, .. }
        ));
    }

    #[test]
    fn x86_sib_operands() {
        match x86("-4@-96(%rbp,%rax,8)").loc {
            ArgLoc::Mem {
                base,
                index: Some(ix),
                scale: 8,
                disp: -96,
            } => {
                assert_eq!(base.canonical, "rbp");
                assert_eq!((ix.canonical.as_str(), ix.pt_regs_word), ("rax", 10));
            }
            other => panic!("{other:?}"),
        }
        match x86("1@(%rbx,%rcx)").loc {
            ArgLoc::Mem {
                base,
                index: Some(ix),
                scale: 1,
                disp: 0,
            } => assert_eq!((base.pt_regs_word, ix.pt_regs_word), (5, 11)),
            other => panic!("{other:?}"),
        }
        for scale in [1u8, 2, 4, 8] {
            assert!(matches!(
                x86(&format!("8@4(%r8,%r9,{scale})")).loc,
                ArgLoc::Mem { scale: s, .. } if s == scale
            ));
        }
    }

    #[test]
    fn x86_rip_relative_symbols() {
        let rows: &[(&str, &str, i64)] = &[
            ("-4@global(%rip)", "global", 0),
            ("8@sym+8(%rip)", "sym", 8),
            ("1@glob-2(%rip)", "glob", -2),
            ("8@24+mp_(%rip)", "mp_", 24),
            ("8@CheckpointStats+40(%rip)", "CheckpointStats", 40),
            ("4@_ZN3foo3barE+0x10(%rip)", "_ZN3foo3barE", 16),
            ("4@counter.0(%rip)", "counter.0", 0),
        ];
        for &(s, sym, off) in rows {
            match x86(s).loc {
                ArgLoc::RipRel {
                    symbol,
                    offset,
                    address: None,
                } => assert_eq!((symbol.as_str(), offset), (sym, off), "{s}"),
                other => panic!("{s}: {other:?}"),
            }
            assert!(!x86(s).readable(), "unresolved symbol is not readable");
        }
        for bad in [
            "8@16(%rip)",
            "8@a+b(%rip)",
            "8@-sym(%rip)",
            "8@sym(%rip,%rax,8)",
            "8@+(%rip)",
        ] {
            reason(&x86(bad));
        }
    }

    /// gcc -O2 -no-pie: `a_s8(%rax)`, `a_s16(%rax,%rax)`, `a_s32(,%rax,4)`, `sarr+8(%rcx)`.
    #[test]
    fn x86_symbolic_displacement_without_rip() {
        type Row<'a> = (&'a str, &'a str, i64, Option<&'a str>, Option<&'a str>, u8);
        let rows: &[Row] = &[
            ("-1@a_s8(%rax)", "a_s8", 0, Some("rax"), None, 1),
            (
                "-2@a_s16(%rax,%rax)",
                "a_s16",
                0,
                Some("rax"),
                Some("rax"),
                1,
            ),
            (
                "2@a_u16(%rax,%rax,1)",
                "a_u16",
                0,
                Some("rax"),
                Some("rax"),
                1,
            ),
            ("4@a_s32(,%rax,4)", "a_s32", 0, None, Some("rax"), 4),
            ("-8@a_s64(,%rax,8)", "a_s64", 0, None, Some("rax"), 8),
            ("8@glob+8(%rdx)", "glob", 8, Some("rdx"), None, 1),
            ("8@sarr+8(%rcx)", "sarr", 8, Some("rcx"), None, 1),
            (
                "8@16+tab-4(%r12,%r9,2)",
                "tab",
                12,
                Some("r12"),
                Some("r9"),
                2,
            ),
            ("4@buf-0x10(,%rsi)", "buf", -16, None, Some("rsi"), 1),
            ("4@counter.0(%rbx)", "counter.0", 0, Some("rbx"), None, 1),
        ];
        for &(s, sym, off, want_base, want_index, want_scale) in rows {
            let spec = x86(s);
            match &spec.loc {
                ArgLoc::SymMem {
                    symbol,
                    offset,
                    base,
                    index,
                    scale,
                    address: None,
                } => {
                    assert_eq!((symbol.as_str(), *offset), (sym, off), "{s}");
                    assert_eq!(
                        base.as_ref().map(|r| r.canonical.as_str()),
                        want_base,
                        "{s}"
                    );
                    assert_eq!(
                        index.as_ref().map(|r| r.canonical.as_str()),
                        want_index,
                        "{s}"
                    );
                    assert_eq!(*scale, want_scale, "{s}");
                }
                other => panic!("{s}: {other:?}"),
            }
            assert!(!spec.readable(), "{s}: unresolved symbol is not readable");
        }
        let mut resolved = x86("-4@a_s32(,%rax,4)");
        assert_eq!((resolved.size, resolved.signed), (4, true));
        match &mut resolved.loc {
            ArgLoc::SymMem { base, index, .. } => {
                assert!(base.is_none());
                assert_eq!(index.as_ref().unwrap().pt_regs_word, 10);
            }
            other => panic!("{other:?}"),
        }
        if let ArgLoc::SymMem { address, .. } = &mut resolved.loc {
            *address = Some(0x404060);
        }
        assert!(resolved.readable());
        let json = serde_json::to_value(&resolved.loc).unwrap();
        assert_eq!(json["kind"], "sym_mem");
        assert!(json["base"].is_null());
        assert_eq!(json["index"]["canonical"], "rax");
        assert_eq!(json["address"], 0x404060);
        // Numeric displacements keep the plain memory form.
        assert!(matches!(
            x86("8@-8(%rax,%rdx,8)").loc,
            ArgLoc::Mem { disp: -8, .. }
        ));
    }

    #[test]
    fn x86_floats_and_structs_parse_but_are_unreadable() {
        let f = x86("8f@%xmm0");
        assert!(f.float);
        assert_eq!(f.size, 8);
        assert!(!f.readable());
        let f = x86("-8f@-8(%rbp)");
        assert!(f.float && f.signed);
        assert!(reason(&f).contains("floating"));
        for s in ["16@-32(%rbp)", "24@(%rsp)"] {
            let spec = x86(s);
            assert!(reason(&spec).contains("struct"), "{s}");
            assert!(spec.size == 16 || spec.size == 24);
            assert!(!spec.readable());
        }
    }

    #[test]
    fn x86_garbage_is_unsupported_with_a_reason() {
        let rows: &[(&str, &str)] = &[
            ("4@%ah", "high-byte"),
            ("8@%fs:0x28", "segment"),
            ("8@%fs:8(%rax)", "segment"),
            ("16@%xmm0", "vector"),
            ("3@%eax", "invalid size 3"),
            ("8@(%rax,%rdx,3)", "scale"),
            ("4@i%ra+1r", "unrecognised"),
            ("4@%bogus", "unknown register"),
            ("8@(%eax)", "address register"),
            ("8@(,%rax,8)", "base"),
            ("8@16(,%rax,8)", "without a base register or symbol"),
            ("8@sym()", "without a base or index"),
            ("8@a+b(%rax)", "bad symbolic displacement"),
            ("8@-sym(%rax)", "bad symbolic displacement"),
            ("8@sym(%eax)", "address register"),
            ("8@sym(,%rsp,8)", "index"),
            ("8@sym(,%rax,3)", "scale"),
            ("8@(%rax,%rsp)", "index"),
            ("x@%rax", "bad size"),
            ("4@", "empty"),
            ("8@global", "unrecognised"),
            ("8@%rip", "%rip"),
            ("8@4(%rax", "unbalanced"),
            ("-@", "empty"),
        ];
        for &(s, want) in rows {
            let spec = x86(s);
            assert!(!spec.readable());
            let r = reason(&spec);
            assert!(r.contains(want), "{s}: reason {r:?} lacks {want:?}");
            assert_eq!(spec.raw, s);
        }
    }

    #[test]
    fn aarch64_forms() {
        let spec = a64("-4@x0");
        assert_eq!(reg_of(&spec), ("x0", 0));
        assert_eq!((spec.size, spec.signed), (4, true));
        assert_eq!(reg_of(&a64("8@sp")), ("sp", 31));
        assert_eq!(reg_of(&a64("8@x30")), ("x30", 30));
        let w = a64("w7");
        assert_eq!((reg_of(&w), w.size), (("x7", 7), 4));
        assert_eq!(a64("4@5").loc, ArgLoc::Const { value: 5 });
        assert_eq!(
            a64("-4@-5").loc,
            ArgLoc::Const {
                value: (-5i64) as u64
            }
        );
        assert_eq!(a64("4@#5").loc, ArgLoc::Const { value: 5 });
        match a64("8@[sp, 112]").loc {
            ArgLoc::Mem {
                base,
                disp: 112,
                index: None,
                ..
            } => assert_eq!(base.pt_regs_word, 31),
            other => panic!("{other:?}"),
        }
        match a64("-4@[x29, -12]").loc {
            ArgLoc::Mem {
                base, disp: -12, ..
            } => assert_eq!(base.pt_regs_word, 29),
            other => panic!("{other:?}"),
        }
        match a64("8@[x12]").loc {
            ArgLoc::Mem { base, disp: 0, .. } => assert_eq!(base.pt_regs_word, 12),
            other => panic!("{other:?}"),
        }
        for bad in [
            "8@x31",
            "8@[x1, x2]",
            "8@[x1",
            "8@q0",
            "8@%rax",
            "4@[x1, 1, 2]",
        ] {
            reason(&a64(bad));
        }
    }

    #[test]
    fn other_arch_keeps_size_but_not_location() {
        let spec = parse_arg("-4@r3", Arch::Other);
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
    fn bad_arguments_keep_their_index() {
        let args = parse_args("8@%rdi 4@%ah 8@%rsi", Arch::X86_64).unwrap();
        assert!(args[0].readable());
        assert!(!args[1].readable());
        assert_eq!(reg_of(&args[2]), ("rsi", 13));
    }

    #[test]
    fn aarch64_bracketed_operands_are_not_split() {
        let args = parse_args("-4@x0 8@[sp, 112] -4@[x29, -12] 4@5", Arch::Aarch64).unwrap();
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
}
