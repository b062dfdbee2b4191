//! Just enough of a BTF reader to find one struct member's offset in the kernel's own types
//! (`/sys/kernel/btf/vmlinux`). Pure: works on bytes.
//!
//! The scheduler hooks run as BTF tracepoints, whose arguments are `struct task_struct *`.
//! Rust eBPF code has no CO-RE field relocations, so user space looks up where `pid` lives in
//! this kernel's `task_struct` and hands the offset to the programs through their config.
//!
//! Layout (include/uapi/linux/btf.h): a header (magic 0xeb9f, version, flags, hdr_len, then
//! type_off/type_len/str_off/str_len relative to the end of the header), a type section of
//! variable-length records, and a string section. Type ids start at 1 in record order.

use thiserror::Error;

const BTF_MAGIC: u16 = 0xeb9f;
const HEADER_MIN: usize = 24;
/// `struct btf_type`: name_off, info, size/type.
const TYPE_LEN: usize = 12;

const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_ENUM64: u32 = 19;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum BtfError {
    #[error("BTF is truncated ({what})")]
    Truncated { what: &'static str },
    #[error("not BTF (magic {0:#06x}); only little-endian BTF is read")]
    BadMagic(u16),
    #[error("BTF type kind {0} is unknown")]
    UnknownKind(u32),
    #[error("struct {0} is not in the kernel's BTF")]
    NoStruct(String),
    #[error("struct {strukt} has no member {member}")]
    NoMember { strukt: String, member: String },
}

fn u32_at(b: &[u8], off: usize, what: &'static str) -> Result<u32, BtfError> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(BtfError::Truncated { what })
}

fn str_at(strings: &[u8], off: u32) -> &[u8] {
    let s = strings.get(off as usize..).unwrap_or(&[]);
    &s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())]
}

/// Bytes of kind-specific data after a type record.
fn extra_len(kind: u32, vlen: usize) -> Result<usize, BtfError> {
    Ok(match kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
        KIND_ARRAY => 12,
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * vlen,
        KIND_ENUM | KIND_FUNC_PROTO => 8 * vlen,
        2 | 7..=12 | 16 | 18 => 0,
        k => return Err(BtfError::UnknownKind(k)),
    })
}

/// Byte offset of `member` in `struct strukt`, searching the first struct of that name.
pub fn member_offset(btf: &[u8], strukt: &str, member: &str) -> Result<u32, BtfError> {
    if btf.len() < HEADER_MIN {
        return Err(BtfError::Truncated { what: "header" });
    }
    let magic = u16::from_le_bytes([btf[0], btf[1]]);
    if magic != BTF_MAGIC {
        return Err(BtfError::BadMagic(magic));
    }
    let hdr_len = u32_at(btf, 4, "header")? as usize;
    let type_off = u32_at(btf, 8, "header")? as usize;
    let type_len = u32_at(btf, 12, "header")? as usize;
    let str_off = u32_at(btf, 16, "header")? as usize;
    let str_len = u32_at(btf, 20, "header")? as usize;
    let section = |off: usize, len: usize, what| {
        hdr_len
            .checked_add(off)
            .and_then(|s| Some((s, s.checked_add(len)?)))
            .and_then(|(s, e)| btf.get(s..e))
            .ok_or(BtfError::Truncated { what })
    };
    let types = section(type_off, type_len, "type section")?;
    let strings = section(str_off, str_len, "string section")?;
    let mut pos = 0;
    while pos + TYPE_LEN <= types.len() {
        let name_off = u32_at(types, pos, "type")?;
        let info = u32_at(types, pos + 4, "type")?;
        let vlen = (info & 0xffff) as usize;
        let kind = (info >> 24) & 0x1f;
        let kind_flag = info >> 31 != 0;
        let body = pos + TYPE_LEN;
        let next = body + extra_len(kind, vlen)?;
        if next > types.len() {
            return Err(BtfError::Truncated { what: "type" });
        }
        if kind == KIND_STRUCT && str_at(strings, name_off) == strukt.as_bytes() {
            for i in 0..vlen {
                let m = body + 12 * i;
                let m_name = u32_at(types, m, "member")?;
                if str_at(strings, m_name) == member.as_bytes() {
                    let bits = u32_at(types, m + 8, "member")?;
                    // With kind_flag the low 24 bits are the bit offset (bitfields).
                    let bits = if kind_flag { bits & 0x00ff_ffff } else { bits };
                    return Ok(bits / 8);
                }
            }
            return Err(BtfError::NoMember {
                strukt: strukt.into(),
                member: member.into(),
            });
        }
        pos = next;
    }
    Err(BtfError::NoStruct(strukt.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob: int, a pointer, then `struct task_struct { int state; int pid; }`.
    fn blob(kind_flag: bool) -> Vec<u8> {
        let strings = b"\0int\0task_struct\0state\0pid\0".to_vec();
        let mut t = Vec::new();
        let w = |t: &mut Vec<u8>, v: u32| t.extend_from_slice(&v.to_le_bytes());
        // [1] int: name "int"(1), kind INT, size 4, encoding word.
        w(&mut t, 1);
        w(&mut t, KIND_INT << 24);
        w(&mut t, 4);
        w(&mut t, 32);
        // [2] ptr to 1.
        w(&mut t, 0);
        w(&mut t, 2 << 24);
        w(&mut t, 1);
        // [3] struct task_struct, 2 members, size 8.
        w(&mut t, 5);
        w(
            &mut t,
            (KIND_STRUCT << 24) | 2 | if kind_flag { 1 << 31 } else { 0 },
        );
        w(&mut t, 8);
        w(&mut t, 17); // "state"
        w(&mut t, 1);
        w(&mut t, 0);
        w(&mut t, 23); // "pid"
        w(&mut t, 1);
        w(&mut t, 32 | if kind_flag { 5 << 24 } else { 0 });
        let mut b = Vec::new();
        b.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        b.push(1);
        b.push(0);
        w(&mut b, 24);
        w(&mut b, 0);
        w(&mut b, t.len() as u32);
        w(&mut b, t.len() as u32);
        w(&mut b, strings.len() as u32);
        b.extend_from_slice(&t);
        b.extend_from_slice(&strings);
        b
    }

    #[test]
    fn finds_member_offsets() {
        assert_eq!(member_offset(&blob(false), "task_struct", "pid"), Ok(4));
        assert_eq!(member_offset(&blob(false), "task_struct", "state"), Ok(0));
        assert_eq!(member_offset(&blob(true), "task_struct", "pid"), Ok(4));
    }

    #[test]
    fn errors_are_values() {
        let b = blob(false);
        assert!(matches!(
            member_offset(&b, "task_struct", "tgid"),
            Err(BtfError::NoMember { .. })
        ));
        assert!(matches!(
            member_offset(&b, "mm_struct", "pid"),
            Err(BtfError::NoStruct(_))
        ));
        assert!(matches!(
            member_offset(&b[..10], "x", "y"),
            Err(BtfError::Truncated { .. })
        ));
        assert!(matches!(
            member_offset(&[0u8; 40], "x", "y"),
            Err(BtfError::BadMagic(0))
        ));
        // Every truncation fails cleanly, never panics.
        for n in 0..b.len() {
            let _ = member_offset(&b[..n], "task_struct", "pid");
        }
    }

    #[test]
    fn this_kernel_has_task_struct_pid() {
        // The real thing, where the kernel exposes BTF (not on every build machine).
        if let Ok(b) = std::fs::read("/sys/kernel/btf/vmlinux") {
            let off = member_offset(&b, "task_struct", "pid").unwrap();
            assert!(off > 0 && off < 16384, "{off}");
        }
    }
}
