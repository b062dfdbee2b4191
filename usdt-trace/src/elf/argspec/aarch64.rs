//! The aarch64 operand grammar: `x0`, `w7`, `sp`, `5` / `#5`, `[sp, 112]`, `[x29, -12]`.

use super::{parse_int, ArgLoc, Operand, Parsed, Reg};
use std::borrow::Cow;
use usdt_trace_common::regs::aarch64 as word;

/// x0..x30 and w0..w30 spelled as the assembler writes them.
const X: [&str; 31] = [
    "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14",
    "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27",
    "x28", "x29", "x30",
];
const W: [&str; 31] = [
    "w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9", "w10", "w11", "w12", "w13", "w14",
    "w15", "w16", "w17", "w18", "w19", "w20", "w21", "w22", "w23", "w24", "w25", "w26", "w27",
    "w28", "w29", "w30",
];

/// `s` from a static table when it is spelled as there, else owned.
fn static_or_owned(s: &str, table: &[&'static str]) -> Cow<'static, str> {
    match table.iter().find(|t| **t == s) {
        Some(t) => Cow::Borrowed(t),
        None => Cow::Owned(s.to_string()),
    }
}

fn reg(name: &str) -> Result<(Reg, u8), String> {
    let mk = |name: Cow<'static, str>, canonical: &'static str, word: u8, width: u8| {
        Ok((
            Reg {
                name,
                canonical,
                pt_regs_word: word,
            },
            width,
        ))
    };
    match name {
        "sp" => return mk(Cow::Borrowed("sp"), "sp", word::SP, 8),
        "wsp" => return mk(Cow::Borrowed("wsp"), "sp", word::SP, 4),
        "fp" => return mk(Cow::Borrowed("fp"), "x29", word::FP, 8),
        "lr" => return mk(Cow::Borrowed("lr"), "x30", word::LR, 8),
        _ => {}
    }
    let (width, num, spelled) = match name.split_at_checked(1) {
        Some(("x", n)) => (8, n, &X),
        Some(("w", n)) => (4, n, &W),
        _ => return Err(format!("unknown register {name:?}")),
    };
    match num.parse::<u8>() {
        Ok(n) if !num.starts_with('+') => match (word::x(n), X.get(usize::from(n))) {
            (Some(w), Some(canonical)) => mk(static_or_owned(name, spelled), canonical, w, width),
            _ => Err(format!("unknown register {name:?}")),
        },
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
            Parsed::Done(ArgLoc::Mem {
                base,
                index: None,
                scale: 1,
                disp,
            }),
            None,
        ));
    }
    let imm = op.strip_prefix('#').unwrap_or(op);
    if let Some(v) = parse_int(imm) {
        return Ok((Parsed::Done(ArgLoc::Const { value: v as u64 }), None));
    }
    let (r, width) = reg(op)?;
    Ok((Parsed::Done(ArgLoc::Reg { reg: r }), Some(width)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::testutil::*;
    use super::super::*;

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
}
