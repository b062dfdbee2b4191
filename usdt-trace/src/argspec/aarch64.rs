//! The aarch64 operand grammar: `x0`, `w7`, `sp`, `5` / `#5`, `[sp, 112]`, `[x29, -12]`.

use super::{parse_int, ArgLoc, Operand, Parsed, Reg};
use usdt_trace_common::regs::aarch64 as word;

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
        "sp" => return mk("sp".into(), word::SP, 8),
        "wsp" => return mk("sp".into(), word::SP, 4),
        "fp" => return mk("x29".into(), word::FP, 8),
        "lr" => return mk("x30".into(), word::LR, 8),
        _ => {}
    }
    let (width, num) = match name.split_at_checked(1) {
        Some(("x", n)) => (8, n),
        Some(("w", n)) => (4, n),
        _ => return Err(format!("unknown register {name:?}")),
    };
    match num.parse::<u8>() {
        Ok(n) if !num.starts_with('+') => match word::x(n) {
            Some(w) => mk(format!("x{n}"), w, width),
            None => Err(format!("unknown register {name:?}")),
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
