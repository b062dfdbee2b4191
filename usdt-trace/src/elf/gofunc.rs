//! Go functions: where a probe may go without crashing the program.
//!
//! A return probe replaces the return address on the stack with the kernel's trampoline. The
//! Go runtime copies goroutine stacks to grow them and walks them for tracebacks and GC, and a
//! foreign return address breaks both: the program crashes. So a Go function's end is traced
//! with an ordinary uprobe on each of its `ret` instructions, found by decoding the function
//! (iced-x86; Go puts no data in its text, so a linear sweep sees every instruction).
//!
//! The entry goes past the stack-growth check. Go's prologue is
//! `cmp rsp, [r14+16]; jbe morestack` (or `lea r12, [rsp-N]; cmp r12, [r14+16]; jbe ...`), and
//! after growing the stack `morestack` jumps back to the function's first instruction: a probe
//! there would fire twice for one call whose stack grew. The instruction after the `jbe` runs
//! exactly once per call, with the argument registers untouched.
//!
//! Arguments follow ABIInternal (Go >= 1.17): integer arguments and results in RAX, RBX, RCX,
//! RDI, RSI, R8, R9, R10, R11. The build info (`.go.buildinfo`, inline since Go 1.18) says
//! which Go built the program.

use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};
use serde::Serialize;

/// ABIInternal's integer argument (and result) registers.
pub const GO_ARGS: [&str; 9] = [
    "%rax", "%rbx", "%rcx", "%rdi", "%rsi", "%r8", "%r9", "%r10", "%r11",
];

/// Whether a function of a Go binary is Go code (ABIInternal) rather than C linked in by cgo
/// (the platform's C ABI). Go names are package-qualified (`main.handler`,
/// `net/http.(*conn).serve`, `runtime.memmove`); C names carry no dot, but for gcc's clone
/// suffixes (`cmul.cold`, `f.part.0`, `g.isra.0`, `h.constprop.0`), and cgo's own C helpers are
/// `_cgo_*`, `x_cgo_*` and `crosscall*`.
pub fn is_go_name(name: &str) -> bool {
    const GCC_CLONES: [&str; 6] = [
        ".cold",
        ".part.",
        ".isra.",
        ".constprop.",
        ".lto_priv.",
        ".localalias",
    ];
    if name.starts_with("_cgo_") || name.starts_with("x_cgo_") || name.starts_with("crosscall") {
        return false;
    }
    let Some(dot) = name.find('.') else {
        return false;
    };
    if dot == 0 {
        return false;
    }
    !GCC_CLONES.iter().any(|c| name.contains(c))
}

/// The argument both ends of a Go function probe carry last: the call's goroutine frame
/// (see [`crate::elf::argspec::ArgLoc::GoFrame`]). Spans are paired by it, so a goroutine that
/// blocks and resumes on another thread, or recurses, still pairs each end with its own start.
pub fn goroutine_frame_arg() -> crate::elf::argspec::ArgSpec {
    crate::elf::argspec::ArgSpec {
        raw: "goroutine".into(),
        size: 8,
        signed: false,
        float: false,
        loc: crate::elf::argspec::ArgLoc::GoFrame,
        struct_size: None,
    }
}

/// Where to probe one Go function, as file offsets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GoLayout {
    /// The first instruction past the stack-growth check (the function's first instruction
    /// when it has none: a NOSPLIT function).
    pub entry_offset: u64,
    /// Every `ret` instruction.
    pub ret_offsets: Vec<u64>,
}

/// Decodes one function's bytes (`code`, at link-time `address` and file offset `offset`).
pub fn layout(code: &[u8], address: u64, offset: u64) -> GoLayout {
    let to_off = |ip: u64| offset + (ip - address);
    let mut dec = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut entry = address;
    let mut rets = Vec::new();
    let mut cmp_g = false;
    for (i, insn) in dec.iter().enumerate() {
        // The check is the function's first instructions; a `jbe` later is ordinary code.
        if i < 4 {
            let reads_g = insn.op_count() == 2
                && (0..2).any(|k| insn.op_kind(k) == OpKind::Memory)
                && insn.memory_base() == Register::R14;
            if insn.mnemonic() == Mnemonic::Cmp && reads_g {
                cmp_g = true;
            } else if cmp_g && insn.mnemonic() == Mnemonic::Jbe && entry == address {
                entry = insn.next_ip();
            }
        }
        if insn.mnemonic() == Mnemonic::Ret {
            rets.push(to_off(insn.ip()));
        }
    }
    GoLayout {
        entry_offset: to_off(entry),
        ret_offsets: rets,
    }
}

/// The Go version in a `.go.buildinfo` section (`go1.19.8` → (1, 19)), when it is inline
/// (Go >= 1.18). Older build info holds pointers instead; None then.
pub fn version(section: &[u8]) -> Option<(u32, u32)> {
    const MAGIC: &[u8] = b"\xff Go buildinf:";
    if !section.starts_with(MAGIC) || section.len() < 32 {
        return None;
    }
    // Flag 2: the version and module info are inline, as varint-prefixed strings.
    if section[15] & 2 == 0 {
        return None;
    }
    let (len, n) = uvarint(&section[32..])?;
    let s = section.get(32 + n..32 + n + usize::try_from(len).ok()?)?;
    let v = std::str::from_utf8(s).ok()?.strip_prefix("go")?;
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn uvarint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn entry_skips_the_stack_check_and_every_ret_is_found() {
        // What Go 1.19 emits for a small function with a frame:
        //   cmp rsp, [r14+0x10] ; jbe +0x12 ; push rbp ; mov rbp, rsp ; ...
        //   test rax, rax ; je +2 ; pop rbp ; ret ; pop rbp ; ret ;
        //   call morestack (rel32) ; jmp start
        let code: &[u8] = &[
            0x49, 0x3b, 0x66, 0x10, // cmp rsp, [r14+0x10]
            0x76, 0x0e, // jbe morestack
            0x55, // push rbp
            0x48, 0x89, 0xe5, // mov rbp, rsp
            0x48, 0x85, 0xc0, // test rax, rax
            0x74, 0x02, // je +2
            0x5d, 0xc3, // pop rbp; ret
            0x5d, 0xc3, // pop rbp; ret
            0x90, // nop
            0xe8, 0, 0, 0, 0, // call morestack
            0xeb, 0xe5, // jmp start
        ];
        let l = layout(code, 0x401000, 0x1000);
        assert_eq!(l.entry_offset, 0x1006);
        assert_eq!(l.ret_offsets, vec![0x1010, 0x1012]);
        // A NOSPLIT function has no check: the entry is its first instruction.
        let l = layout(&[0x48, 0x89, 0xc3, 0xc3], 0x401000, 0x1000);
        assert_eq!(l.entry_offset, 0x1000);
        assert_eq!(l.ret_offsets, vec![0x1003]);
        // A jbe that is not after a g-relative cmp moves nothing.
        let l = layout(
            &[0x48, 0x39, 0xc3, 0x76, 0x01, 0x90, 0xc3],
            0x401000,
            0x1000,
        );
        assert_eq!(l.entry_offset, 0x1000);
    }

    #[test]
    fn go_names_and_cgo_c_names() {
        for n in [
            "main.main",
            "net/http.(*conn).serve",
            "runtime.memmove",
            "main.handler.func1",
        ] {
            assert!(is_go_name(n), "{n}");
        }
        for n in [
            "cmul",
            "cmul.cold",
            "f.part.0",
            "_cgo_topofstack",
            "x_cgo_init",
            "crosscall2",
            "main",
        ] {
            assert!(!is_go_name(n), "{n}");
        }
    }

    #[test]
    fn version_from_inline_build_info() {
        let mut s = b"\xff Go buildinf:".to_vec();
        s.extend_from_slice(&[8, 2]);
        s.resize(32, 0);
        s.push(9);
        s.extend_from_slice(b"go1.19.8");
        s.push(0);
        // Length 9 includes the NUL: only the digits matter.
        assert_eq!(version(&s), Some((1, 19)));
        let mut old = s.clone();
        old[15] = 0;
        assert_eq!(version(&old), None);
        assert_eq!(version(b"garbage"), None);
    }
}
