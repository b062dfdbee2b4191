//! How an argument spec reads to a person and to a program: `list`'s description
//! (`s32 at [rbp-16]`) and the JSON of its location (`args_decoded`), beside the parsing
//! (`x86_64.rs`, `aarch64.rs`) and the lowering for the kernel (`lower.rs`), so that a new
//! argument form changes `argspec/` and the eBPF reader only.

use super::{ArgLoc, ArgSpec, Reg};

/// `loc` as its derived `Serialize` writes it (tagged by `kind`, in snake case).
pub fn loc_json(buf: &mut Vec<u8>, loc: &ArgLoc) {
    let opt_u64 = |buf: &mut Vec<u8>, v: Option<u64>| match v {
        Some(v) => push_json_int(buf, v),
        None => buf.extend_from_slice(b"null"),
    };
    let opt_reg = |buf: &mut Vec<u8>, r: &Option<Reg>| match r {
        Some(r) => push_json_reg(buf, r),
        None => buf.extend_from_slice(b"null"),
    };
    match loc {
        ArgLoc::Const { value } => {
            buf.extend_from_slice(b"{\"kind\":\"const\",\"value\":");
            push_json_int(buf, *value);
        }
        ArgLoc::Reg { reg } => {
            buf.extend_from_slice(b"{\"kind\":\"reg\",\"reg\":");
            push_json_reg(buf, reg);
        }
        ArgLoc::Mem {
            base,
            index,
            scale,
            disp,
        } => {
            buf.extend_from_slice(b"{\"kind\":\"mem\",\"base\":");
            push_json_reg(buf, base);
            buf.extend_from_slice(b",\"index\":");
            opt_reg(buf, index);
            buf.extend_from_slice(b",\"scale\":");
            push_json_int(buf, *scale);
            buf.extend_from_slice(b",\"disp\":");
            push_json_int(buf, *disp);
        }
        ArgLoc::RipRel {
            symbol,
            offset,
            address,
        } => {
            buf.extend_from_slice(b"{\"kind\":\"rip_rel\",\"symbol\":");
            push_json_str(buf, symbol);
            buf.extend_from_slice(b",\"offset\":");
            push_json_int(buf, *offset);
            buf.extend_from_slice(b",\"address\":");
            opt_u64(buf, *address);
        }
        ArgLoc::SymMem {
            symbol,
            offset,
            base,
            index,
            scale,
            address,
        } => {
            buf.extend_from_slice(b"{\"kind\":\"sym_mem\",\"symbol\":");
            push_json_str(buf, symbol);
            buf.extend_from_slice(b",\"offset\":");
            push_json_int(buf, *offset);
            buf.extend_from_slice(b",\"base\":");
            opt_reg(buf, base);
            buf.extend_from_slice(b",\"index\":");
            opt_reg(buf, index);
            buf.extend_from_slice(b",\"scale\":");
            push_json_int(buf, *scale);
            buf.extend_from_slice(b",\"address\":");
            opt_u64(buf, *address);
        }
        ArgLoc::Unsupported { reason } => {
            buf.extend_from_slice(b"{\"kind\":\"unsupported\",\"reason\":");
            push_json_str(buf, reason);
        }
        ArgLoc::GoFrame => buf.extend_from_slice(b"{\"kind\":\"go_frame\""),
    }
    buf.push(b'}');
}

fn push_json_reg(buf: &mut Vec<u8>, r: &Reg) {
    let Reg {
        name,
        canonical,
        pt_regs_word,
    } = r;
    buf.extend_from_slice(b"{\"name\":");
    push_json_str(buf, name);
    buf.extend_from_slice(b",\"canonical\":");
    push_json_str(buf, canonical);
    buf.extend_from_slice(b",\"pt_regs_word\":");
    push_json_int(buf, *pt_regs_word);
    buf.push(b'}');
}

/// `s` as a JSON string, exactly as serde_json writes it: most strings need no escape, which
/// one pass without an early exit (vectorized) tells; the others go to serde_json.
pub(crate) fn push_json_str(buf: &mut Vec<u8>, s: &str) {
    if s.bytes()
        .fold(true, |ok, b| ok & (b >= 0x20) & (b != b'"') & (b != b'\\'))
    {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
    } else {
        let mut ser = serde_json::Serializer::new(&mut *buf);
        // Into a Vec: the writer cannot fail.
        let _ = serde::Serializer::serialize_str(&mut ser, s);
    }
}

/// A JSON integer (u64, i64, ...).
pub(crate) fn push_json_int(buf: &mut Vec<u8>, v: impl itoa::Integer) {
    buf.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Length of `{:#x}` of `v`.
pub(crate) fn hex_len(v: u64) -> usize {
    2 + (64 - (v | 1).leading_zeros() as usize).div_ceil(4)
}

/// `{:#x}` of `v`, without the formatting machinery (four numbers on each of every site's
/// lines).
pub(crate) fn push_hex(out: &mut String, v: u64) {
    let mut digits = [0u8; 16];
    let n = hex_len(v) - 2;
    for (i, d) in digits[..n].iter_mut().enumerate() {
        *d = b"0123456789abcdef"[((v >> (4 * (n - 1 - i))) & 0xf) as usize];
    }
    out.push_str("0x");
    // Hex digits are ASCII.
    out.push_str(std::str::from_utf8(&digits[..n]).unwrap_or_default());
}

pub(crate) fn push_decimal(out: &mut String, v: u64) {
    out.push_str(itoa::Buffer::new().format(v));
}

/// A compact reading of one argument: its C type and where the tracer reads it.
pub fn describe_arg(a: &ArgSpec) -> String {
    let mut d = String::with_capacity(48);
    describe_arg_into(&mut d, a);
    d
}

/// [`describe_arg`] appended to `out`: `list` describes every argument of every site
/// (thousands in libjvm.so, 100,000 in a generated binary) into one reused buffer.
pub fn describe_arg_into(out: &mut String, a: &ArgSpec) {
    describe_loc(out, a);
    if let (Some(n), true) = (a.struct_size, a.readable()) {
        out.push_str(" (low 8 bytes of a ");
        push_decimal(out, u64::from(n));
        out.push_str("-byte struct)");
    }
}

/// `SYMBOL` or `SYMBOL+OFFSET` / `SYMBOL-OFFSET`, as an assembler writes a symbolic address.
fn push_symbol_plus(out: &mut String, symbol: &str, offset: i64) {
    use std::fmt::Write as _;
    out.push_str(symbol);
    if offset != 0 {
        let _ = write!(out, "{offset:+}");
    }
}

/// `TYPE at [SYMBOL+OFFSET`: the head every symbol operand's description shares.
fn push_at_symbol(out: &mut String, a: &ArgSpec, symbol: &str, offset: i64) {
    push_type(out, a);
    out.push_str(" at [");
    push_symbol_plus(out, symbol, offset);
}

/// The argument's type: `s32`, `u64`, `f64`...
fn push_type(out: &mut String, a: &ArgSpec) {
    out.push(if a.float {
        'f'
    } else if a.signed {
        's'
    } else {
        'u'
    });
    push_decimal(out, u64::from(a.size) * 8);
}

/// `base+index*scale` of a symbol operand, `+` between those present.
fn push_sym_regs(out: &mut String, base: Option<&Reg>, index: Option<&Reg>, scale: u8) {
    if let Some(b) = base {
        out.push_str(b.canonical);
    }
    if let Some(ix) = index {
        if base.is_some() {
            out.push('+');
        }
        out.push_str(ix.canonical);
        if scale != 1 {
            out.push('*');
            push_decimal(out, u64::from(scale));
        }
    }
}

fn describe_loc(d: &mut String, a: &ArgSpec) {
    use std::fmt::Write as _;
    match &a.loc {
        ArgLoc::Unsupported { reason } => {
            d.push_str("unreadable: ");
            d.push_str(reason);
        }
        ArgLoc::GoFrame => d.push_str("the goroutine and its stack depth (pairs Go calls)"),
        ArgLoc::Const { value } => {
            push_type(d, a);
            d.push_str(" = ");
            push_const_value(d, *value, a.size, a.signed);
        }
        ArgLoc::Reg { reg } => {
            push_type(d, a);
            d.push_str(" in ");
            d.push_str(reg.canonical);
        }
        ArgLoc::Mem {
            base,
            index,
            scale,
            disp,
        } => {
            push_type(d, a);
            d.push_str(" at [");
            d.push_str(base.canonical);
            if let Some(ix) = index {
                d.push('+');
                d.push_str(ix.canonical);
                if *scale > 1 {
                    d.push('*');
                    push_decimal(d, u64::from(*scale));
                }
            }
            if *disp != 0 {
                let _ = write!(d, "{disp:+}");
            }
            d.push(']');
        }
        ArgLoc::RipRel {
            symbol,
            offset,
            address,
        } => match address {
            Some(addr) => {
                push_at_symbol(d, a, symbol, *offset);
                d.push_str(" = ");
                push_hex(d, *addr);
                d.push(']');
            }
            None => {
                d.push_str("unreadable: symbol ");
                d.push_str(symbol);
                d.push_str(" not found (");
                push_at_symbol(d, a, symbol, *offset);
                d.push_str("])");
            }
        },
        ArgLoc::SymMem {
            symbol,
            offset,
            base,
            index,
            scale,
            address,
        } => {
            match address {
                Some(addr) => {
                    push_at_symbol(d, a, symbol, *offset);
                    d.push_str(" = ");
                    push_hex(d, *addr);
                    d.push_str(" + ");
                }
                None => {
                    d.push_str("unreadable: no absolute address for ");
                    d.push_str(symbol);
                    d.push_str(" (not found, or not an ET_EXEC) (");
                    push_at_symbol(d, a, symbol, *offset);
                    d.push_str(" + ");
                }
            }
            push_sym_regs(d, base.as_ref(), index.as_ref(), *scale);
            d.push(']');
            if address.is_none() {
                d.push(')');
            }
        }
    }
}

/// An immediate as the program sees it: truncated to its size, then sign-extended if signed.
fn push_const_value(out: &mut String, v: u64, size: u8, signed: bool) {
    let bits = u32::from(size.clamp(1, 8)) * 8;
    let v = if bits == 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    };
    if signed {
        let shift = 64 - bits;
        out.push_str(itoa::Buffer::new().format(((v << shift) as i64) >> shift));
    } else {
        push_decimal(out, v);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::elf::argspec::{parse_arg, Arch};

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
}
