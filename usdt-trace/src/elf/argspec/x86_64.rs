//! The x86_64 operand grammar (GAS AT&T syntax): `%edi`, `$-9`, `-96(%rbp,%rax,8)`,
//! `mp_+24(%rip)`, and gcc -no-pie's symbol displacements `arr(,%rax,8)`.

use super::{parse_int, ArgLoc, Operand, Parsed, Reg};
use std::borrow::Cow;
use usdt_trace_common::regs::x86_64 as word;

/// The 64-bit general-purpose registers and their `pt_regs` words.
const GPRS: [(&str, u8); 16] = [
    ("rax", word::RAX),
    ("rbx", word::RBX),
    ("rcx", word::RCX),
    ("rdx", word::RDX),
    ("rsi", word::RSI),
    ("rdi", word::RDI),
    ("rbp", word::RBP),
    ("rsp", word::SP),
    ("r8", word::R8),
    ("r9", word::R9),
    ("r10", word::R10),
    ("r11", word::R11),
    ("r12", word::R12),
    ("r13", word::R13),
    ("r14", word::R14),
    ("r15", word::R15),
];

/// `%rip` reads as the `ip` word: at a uprobe it is the probe's address.
const RIP_WORD: u8 = word::IP;

/// A general-purpose register's spellings: (the name, its full register's index in [`GPRS`],
/// the width in bytes it names). The legacy registers' 32, 16 and 8-bit names, r8..r15's
/// `d`, `w`, `b` and GAS's `l` alias for the low byte. A match rather than a scan of tables:
/// `list` looks up a register for most arguments of every site.
fn spelling(name: &str) -> Option<(&'static str, usize, u8)> {
    #[rustfmt::skip]
    let found = match name {
        "rax" => ("rax", 0, 8), "eax" => ("eax", 0, 4), "ax" => ("ax", 0, 2), "al" => ("al", 0, 1),
        "rbx" => ("rbx", 1, 8), "ebx" => ("ebx", 1, 4), "bx" => ("bx", 1, 2), "bl" => ("bl", 1, 1),
        "rcx" => ("rcx", 2, 8), "ecx" => ("ecx", 2, 4), "cx" => ("cx", 2, 2), "cl" => ("cl", 2, 1),
        "rdx" => ("rdx", 3, 8), "edx" => ("edx", 3, 4), "dx" => ("dx", 3, 2), "dl" => ("dl", 3, 1),
        "rsi" => ("rsi", 4, 8), "esi" => ("esi", 4, 4), "si" => ("si", 4, 2), "sil" => ("sil", 4, 1),
        "rdi" => ("rdi", 5, 8), "edi" => ("edi", 5, 4), "di" => ("di", 5, 2), "dil" => ("dil", 5, 1),
        "rbp" => ("rbp", 6, 8), "ebp" => ("ebp", 6, 4), "bp" => ("bp", 6, 2), "bpl" => ("bpl", 6, 1),
        "rsp" => ("rsp", 7, 8), "esp" => ("esp", 7, 4), "sp" => ("sp", 7, 2), "spl" => ("spl", 7, 1),
        "r8" => ("r8", 8, 8), "r8d" => ("r8d", 8, 4), "r8w" => ("r8w", 8, 2), "r8b" => ("r8b", 8, 1), "r8l" => ("r8l", 8, 1),
        "r9" => ("r9", 9, 8), "r9d" => ("r9d", 9, 4), "r9w" => ("r9w", 9, 2), "r9b" => ("r9b", 9, 1), "r9l" => ("r9l", 9, 1),
        "r10" => ("r10", 10, 8), "r10d" => ("r10d", 10, 4), "r10w" => ("r10w", 10, 2), "r10b" => ("r10b", 10, 1), "r10l" => ("r10l", 10, 1),
        "r11" => ("r11", 11, 8), "r11d" => ("r11d", 11, 4), "r11w" => ("r11w", 11, 2), "r11b" => ("r11b", 11, 1), "r11l" => ("r11l", 11, 1),
        "r12" => ("r12", 12, 8), "r12d" => ("r12d", 12, 4), "r12w" => ("r12w", 12, 2), "r12b" => ("r12b", 12, 1), "r12l" => ("r12l", 12, 1),
        "r13" => ("r13", 13, 8), "r13d" => ("r13d", 13, 4), "r13w" => ("r13w", 13, 2), "r13b" => ("r13b", 13, 1), "r13l" => ("r13l", 13, 1),
        "r14" => ("r14", 14, 8), "r14d" => ("r14d", 14, 4), "r14w" => ("r14w", 14, 2), "r14b" => ("r14b", 14, 1), "r14l" => ("r14l", 14, 1),
        "r15" => ("r15", 15, 8), "r15d" => ("r15d", 15, 4), "r15w" => ("r15w", 15, 2), "r15b" => ("r15b", 15, 1), "r15l" => ("r15l", 15, 1),
        _ => return None,
    };
    Some(found)
}

/// Resolves a register name (without `%`) to its full-width register and the width the
/// name denotes.
fn reg(name: &str) -> Result<(Reg, u8), String> {
    if name == "rip" {
        let reg = Reg {
            name: Cow::Borrowed("rip"),
            canonical: "rip",
            pt_regs_word: RIP_WORD,
        };
        return Ok((reg, 8));
    }
    if let Some((spelled, i, width)) = spelling(name) {
        let (canonical, word) = GPRS[i];
        let reg = Reg {
            name: Cow::Borrowed(spelled),
            canonical,
            pt_regs_word: word,
        };
        return Ok((reg, width));
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
            Parsed::Done(ArgLoc::Const {
                value: value as u64,
            }),
            None,
        ));
    }
    // Bytes searched as bytes (see `parse_arg`).
    let has = |b: u8| op.as_bytes().contains(&b);
    if op.starts_with('%') && !has(b'(') {
        if has(b':') {
            return Err(format!("segment-relative operand {op:?}"));
        }
        let (r, width) = percent_reg(op)?;
        if r.pt_regs_word == RIP_WORD {
            return Err("%rip as a value".into());
        }
        return Ok((Parsed::Done(ArgLoc::Reg { reg: r }), Some(width)));
    }
    if has(b':') {
        return Err(format!("segment-relative operand {op:?}"));
    }
    let open = op
        .bytes()
        .position(|b| b == b'(')
        .ok_or_else(|| format!("unrecognised operand {op:?}"))?;
    let inner = op[open + 1..]
        .strip_suffix(')')
        .ok_or_else(|| format!("unbalanced parentheses in {op:?}"))?;
    let disp = &op[..open];
    let mut all = [""; 3];
    let mut n = 0;
    for part in inner.split(',') {
        if n == all.len() {
            return Err(format!("too many address components in {op:?}"));
        }
        all[n] = part.trim();
        n += 1;
    }
    let parts = &all[..n];
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
                Parsed::RipRel {
                    symbol: symbol.to_string(),
                    offset,
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
            Parsed::Done(ArgLoc::Mem {
                base,
                index,
                scale,
                disp,
            }),
            None,
        )),
        // gcc -no-pie: `a_s8(%rax)`, `a_s16(%rax,%rax)`, `a_s32(,%rax,4)`.
        (None, base) => match symbolic_disp(disp) {
            Some((Some(symbol), offset)) if base.is_some() || index.is_some() => Ok((
                Parsed::SymMem {
                    symbol: symbol.to_string(),
                    offset,
                    base,
                    index,
                    scale,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::testutil::*;
    use super::super::*;

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
                assert_eq!((base.canonical, base.pt_regs_word), ("rbp", 4));
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
                assert_eq!((ix.canonical, ix.pt_regs_word), ("rax", 10));
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
                    assert_eq!(base.as_ref().map(|r| r.canonical), want_base, "{s}");
                    assert_eq!(index.as_ref().map(|r| r.canonical), want_index, "{s}");
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
    fn x86_floats_are_unreadable_and_structs_read_low_8_bytes() {
        let f = x86("8f@%xmm0");
        assert!(f.float);
        assert_eq!(f.size, 8);
        assert!(!f.readable());
        let f = x86("-8f@-8(%rbp)");
        assert!(f.float && f.signed);
        assert!(reason(&f).contains("floating"));
        for (s, declared) in [("16@-32(%rbp)", 16), ("24@(%rsp)", 24), ("16@%rax", 16)] {
            let spec = x86(s);
            assert!(spec.readable(), "{s}: {:?}", spec.loc);
            assert_eq!((spec.size, spec.struct_size), (8, Some(declared)), "{s}");
        }
        match x86("16@-16(%rsp)").loc {
            ArgLoc::Mem {
                base, index, disp, ..
            } => assert_eq!((base.canonical, index, disp), ("rsp", None, -16)),
            other => panic!("{other:?}"),
        }
        match x86("16@%rax").loc {
            ArgLoc::Reg { reg } => assert_eq!(reg.canonical, "rax"),
            other => panic!("{other:?}"),
        }
        assert_eq!(x86("8@%rax").struct_size, None);
        assert!(!x86("16@%xmm0").readable());
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
}
