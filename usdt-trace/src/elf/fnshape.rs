//! What a function's code says about how it can be traced without harming the program.
//!
//! A return probe (uretprobe) rewrites the return address at `(%rsp)` when the function is
//! entered and sends the return through the kernel's trampoline. That is only harmless when
//! `(%rsp)` is a return address, the function returns through it exactly once, and nothing
//! walks or unwinds the stack across it while it runs. `_start` (argc at `(%rsp)`), gcc's
//! `.cold` fragments (jumped to), `setjmp` (returns twice), `longjmp`, C++ exceptions and
//! Rust panics unwinding through the frame (the unwinder meets the trampoline's address and
//! calls `std::terminate`) all break that.
//!
//! An ordinary uprobe on each of the function's `ret` instructions changes nothing on the
//! stack, so it is harmless wherever the kernel accepts it; an exit that is not a `ret`
//! (a tail call, `longjmp`, an exception) then leaves an open span that the next end further
//! down the thread's stack counts as unmatched. The kernel single-steps `ret` (several µs a
//! hit on this kind of machine) while a return probe adds ~0.35 µs, so the cheap probe is
//! kept where it is safe by construction: a *leaf*, which calls nothing and leaves only by
//! its own `ret`, so no exception or `longjmp` can cross its frame.
//!
//! This module decodes one function (x86_64 with iced-x86, aarch64 by its fixed-width
//! encodings) and reports its shape; [`function_end`](super::function_end) decides from
//! it. Pure.

use crate::elf::argspec::Arch;
use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Mnemonic, OpKind};
use serde::Serialize;

/// What decoding one function found. Offsets are file offsets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Shape {
    /// The instructions decode one after another to exactly the symbol's end, with no invalid
    /// opcode and every direct branch inside the function landing on an instruction: the
    /// `ret`s found are instructions, not bytes inside one.
    pub decoded: bool,
    /// Every `ret` (x86_64 `ret`, `ret imm16`, `repz ret`, `bnd ret`; aarch64 `ret`).
    pub rets: Vec<u64>,
    /// No call, no indirect jump and no jump out of the function: it leaves only by `ret`.
    pub leaf: bool,
    /// No call and no indirect jump (but a switch's): with no tail call either, a leaf.
    pub no_calls: bool,
    /// Link-time addresses that direct jumps out of the function go to: tail calls. The
    /// function's call ends where the tail-called one returns, at the same stack pointer.
    pub tail_targets: Vec<u64>,
    /// Why uprobes cannot take the first instruction (a LOCK or ES/CS/SS/DS segment prefix,
    /// which the kernel's `is_prefix_bad` refuses with ENOTSUPP), if they cannot.
    pub bad_entry: Option<&'static str>,
    /// Where the entry probe may sit instead of the first instruction: on the first one the
    /// kernel emulates, past instructions that change nothing the probe reads
    /// ([`super::fnentry`]).
    pub entry: super::fnentry::EntryPlaces,
}

/// Decodes `code` (the function's bytes at link-time `address`, file offset `offset`).
pub fn shape(arch: Arch, code: &[u8], address: u64, offset: u64) -> Shape {
    match arch {
        Arch::X86_64 => shape_x86(code, address, offset),
        Arch::Aarch64 => shape_aarch64(code, address, offset),
        _ => Shape::default(),
    }
}

/// `push %reg` (with or without REX.B): the kernel emulates it (`push_emulate_op`).
pub fn is_push_reg(bytes: &[u8]) -> bool {
    matches!(bytes, [0x50..=0x57, ..] | [0x41, 0x50..=0x57, ..])
}

/// Whether an indirect `jmp` is a switch through a jump table, as gcc and clang emit them:
/// `notrack jmp` (CET marks only switch jumps so), or `movsxd R, [B + idx*4]; add R, B; jmp R`
/// (a PIC table of 4-byte offsets from its own address, which no table of function pointers
/// is). Its targets are the function's own code. An indirect jump of any other shape may be a
/// tail call through a pointer, `jmp [table + idx*8]` included (a switch in non-PIE code, or
/// a table of handlers): not a leaf.
fn is_switch_jump(insn: &iced_x86::Instruction, prev: &[Option<iced_x86::Instruction>; 2]) -> bool {
    use iced_x86::Register;
    if insn.mnemonic() != Mnemonic::Jmp {
        return false;
    }
    if insn.segment_prefix() == Register::DS {
        return true;
    }
    if insn.op0_kind() != OpKind::Register {
        return false;
    }
    let r = insn.op0_register();
    let (Some(load), Some(add)) = (&prev[0], &prev[1]) else {
        return false;
    };
    add.mnemonic() == Mnemonic::Add
        && add.op_count() == 2
        && add.op0_kind() == OpKind::Register
        && add.op0_register() == r
        && add.op1_kind() == OpKind::Register
        && load.mnemonic() == Mnemonic::Movsxd
        && load.op0_register() == r
        && load.op1_kind() == OpKind::Memory
        && load.memory_base() == add.op1_register()
        && load.memory_index_scale() == 4
}

/// The prefixes the kernel refuses to probe (`is_prefix_bad` in arch/x86/kernel/uprobes.c).
fn bad_prefix(insn: &iced_x86::Instruction) -> Option<&'static str> {
    use iced_x86::Register;
    if insn.has_lock_prefix() {
        return Some("its first instruction is LOCK-prefixed, which uprobes cannot take");
    }
    match insn.segment_prefix() {
        Register::ES | Register::CS | Register::SS | Register::DS => Some(
            "its first instruction has an ES/CS/SS/DS segment prefix, which uprobes cannot take",
        ),
        _ => None,
    }
}

fn shape_x86(code: &[u8], address: u64, offset: u64) -> Shape {
    let to_off = |ip: u64| offset + (ip - address);
    let end = address + code.len() as u64;
    let mut dec = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut out = Shape {
        leaf: true,
        no_calls: true,
        ..Shape::default()
    };
    let mut starts: Vec<u64> = Vec::new();
    let mut targets: Vec<u64> = Vec::new();
    let mut valid = true;
    let mut last_end = address;
    // The two instructions before the current one, for recognising a switch's jump table.
    let mut prev: [Option<iced_x86::Instruction>; 2] = [None, None];
    // The first instructions, for placing the entry probe.
    let mut head: Vec<iced_x86::Instruction> = Vec::new();
    for (i, insn) in dec.iter().enumerate() {
        if insn.is_invalid() || insn.code() == Code::INVALID {
            valid = false;
            break;
        }
        if i == 0 {
            out.bad_entry = bad_prefix(&insn);
        }
        starts.push(insn.ip());
        if head.len() < super::fnentry::SCAN {
            head.push(insn);
        }
        last_end = insn.next_ip();
        if insn.mnemonic() == Mnemonic::Ret {
            out.rets.push(to_off(insn.ip()));
        }
        match insn.flow_control() {
            // A switch's jump table stays inside the function: not a way out.
            FlowControl::IndirectBranch if is_switch_jump(&insn, &prev) => {}
            FlowControl::Call | FlowControl::IndirectCall | FlowControl::IndirectBranch => {
                out.leaf = false;
                out.no_calls = false;
            }
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                if matches!(
                    insn.op0_kind(),
                    OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
                ) {
                    let t = insn.near_branch_target();
                    if t < address || t >= end {
                        out.leaf = false;
                        if !out.tail_targets.contains(&t) {
                            out.tail_targets.push(t);
                        }
                    } else {
                        targets.push(t);
                    }
                } else {
                    out.leaf = false;
                    out.no_calls = false;
                }
            }
            // `syscall`, `int`, `ud2`, `hlt`: a syscall returns to the next instruction, and
            // an exception-raising trap ends the program whether traced or not.
            _ => {}
        }
        prev = [prev[1], Some(insn)];
    }
    // Trailing int3/nop padding inside the symbol's size decodes as instructions: fine.
    valid &= last_end == end;
    starts.sort_unstable();
    valid &= targets.iter().all(|t| starts.binary_search(t).is_ok());
    out.decoded = valid;
    if !valid {
        out.rets.clear();
        out.tail_targets.clear();
        out.leaf = false;
        out.no_calls = false;
    }
    if valid {
        out.entry = super::fnentry::places(&head, code, address, offset, &targets);
    }
    out
}

fn shape_aarch64(code: &[u8], address: u64, offset: u64) -> Shape {
    let end = address + code.len() as u64;
    let mut out = Shape {
        decoded: code.len().is_multiple_of(4) && address.is_multiple_of(4),
        leaf: true,
        no_calls: true,
        ..Shape::default()
    };
    if !out.decoded {
        out.leaf = false;
        out.no_calls = false;
        return out;
    }
    for (i, w) in code.chunks_exact(4).enumerate() {
        let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let at = address + 4 * i as u64;
        // RET {Xn}
        if w & 0xffff_fc1f == 0xd65f_0000 {
            out.rets.push(offset + 4 * i as u64);
            continue;
        }
        // BL, BLR, BR: a call or an indirect jump.
        if w & 0xfc00_0000 == 0x9400_0000
            || w & 0xffff_fc1f == 0xd63f_0000
            || w & 0xffff_fc1f == 0xd61f_0000
        {
            out.leaf = false;
            out.no_calls = false;
            continue;
        }
        // B imm26: a jump; out of the function it is a tail call.
        if w & 0xfc00_0000 == 0x1400_0000 {
            let imm = ((w & 0x03ff_ffff) << 6) as i32 >> 6;
            let t = at.wrapping_add_signed(i64::from(imm) * 4);
            if t < address || t >= end {
                out.leaf = false;
                if !out.tail_targets.contains(&t) {
                    out.tail_targets.push(t);
                }
            }
        }
    }
    out
}

/// Functions that return twice (their second return finds the return probe's instance gone:
/// SIGILL) or that leave by rewriting their own stack: never given a return probe.
pub fn returns_twice(name: &str) -> bool {
    let base = name.split('@').next().unwrap_or(name);
    matches!(
        base,
        "setjmp"
            | "_setjmp"
            | "__setjmp"
            | "sigsetjmp"
            | "__sigsetjmp"
            | "__sigsetjmp_cancel"
            | "savectx"
            | "getcontext"
            | "__getcontext"
            | "swapcontext"
            | "__swapcontext"
            | "vfork"
            | "__vfork"
            | "fork"
            | "_Fork"
            | "__libc_fork"
    )
}

/// gcc's out-of-line fragments that are jumped to from their function, not called:
/// `foo.cold`, `foo.cold.3`. The stem is the function whose returns they hold.
pub fn cold_parent(name: &str) -> Option<&str> {
    // Demangled C++: `inner(long) [clone .cold]`.
    if let Some(i) = name.find(" [clone .cold") {
        return name.ends_with(']').then(|| &name[..i]);
    }
    let i = name.find(".cold")?;
    let rest = &name[i + 5..];
    (rest.is_empty() || rest.starts_with('.')).then(|| &name[..i])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_leaf_with_endbr_and_push_has_its_rets_and_a_cheaper_entry() {
        let code: &[u8] = &[
            0xf3, 0x0f, 0x1e, 0xfa, // endbr64
            0x55, // push rbp
            0x48, 0x85, 0xff, // test rdi, rdi
            0x74, 0x02, // je +2
            0x5d, 0xc3, // pop rbp; ret
            0x5d, 0xf3, 0xc3, // pop rbp; repz ret
        ];
        let s = shape(Arch::X86_64, code, 0x1000, 0x100);
        assert!(s.decoded && s.leaf && s.bad_entry.is_none());
        assert_eq!(s.rets, vec![0x10b, 0x10d]);
        assert_eq!(s.entry.args.map(|m| m.offset), Some(0x104));
    }

    #[test]
    fn calls_tail_jumps_and_loops_to_the_entry_are_seen() {
        // endbr64; push rbx; call +0; pop rbx; jmp (out)
        let code: &[u8] = &[
            0xf3, 0x0f, 0x1e, 0xfa, 0x53, 0xe8, 0, 0, 0, 0, 0x5b, 0xe9, 0x00, 0x10, 0, 0,
        ];
        let s = shape(Arch::X86_64, code, 0x1000, 0x1000);
        assert!(s.decoded && !s.leaf && s.rets.is_empty());
        // The jmp at 0x100b (5 bytes) to +0x1000: a tail call of 0x2010.
        assert_eq!(s.tail_targets, vec![0x2010]);
        // A loop back to the instruction past endbr64 keeps the entry where it is.
        let code: &[u8] = &[0xf3, 0x0f, 0x1e, 0xfa, 0x53, 0x5b, 0xeb, 0xfc, 0xc3];
        let s = shape(Arch::X86_64, code, 0x1000, 0x1000);
        assert_eq!(s.entry.args, None);
        assert!(s.leaf);
    }

    #[test]
    fn a_switch_jump_table_keeps_a_leaf_and_a_pointer_jump_does_not() {
        // lea r8,[rip+0x10]; movsxd rdi,[r8+r10*4]; add rdi,r8; jmp rdi; ret  (redis' siphash)
        let code: &[u8] = &[
            0x4c, 0x8d, 0x05, 0x10, 0, 0, 0, // lea r8, [rip+0x10]
            0x4b, 0x63, 0x3c, 0x90, // movsxd rdi, dword [r8+r10*4]
            0x4c, 0x01, 0xc7, // add rdi, r8
            0xff, 0xe7, // jmp rdi
            0xc3, // ret
        ];
        let s = shape(Arch::X86_64, code, 0x1000, 0x1000);
        assert!(s.decoded && s.leaf, "{s:?}");
        // jmp rax alone: maybe a tail call through a pointer.
        let s = shape(Arch::X86_64, &[0xff, 0xe0, 0xc3], 0x1000, 0x1000);
        assert!(!s.leaf);
        // notrack jmp rax: CET's switch.
        let s = shape(Arch::X86_64, &[0x3e, 0xff, 0xe0, 0xc3], 0x1000, 0x1000);
        assert!(s.leaf, "{s:?}");
        // jmp [table + rax*8]: a switch or a table of handlers, which may be a tail call.
        let s = shape(
            Arch::X86_64,
            &[0xff, 0x24, 0xc5, 0x00, 0x20, 0x40, 0x00, 0xc3],
            0x1000,
            0x1000,
        );
        assert!(!s.leaf, "{s:?}");
    }

    #[test]
    fn bytes_that_do_not_decode_to_the_end_give_no_rets() {
        // A branch into the middle of an instruction: not decodable by a linear sweep.
        let code: &[u8] = &[0xeb, 0x01, 0x48, 0xb8, 0xc3, 0, 0, 0, 0, 0, 0, 0, 0xc3];
        let s = shape(Arch::X86_64, code, 0x1000, 0x1000);
        assert!(!s.decoded && s.rets.is_empty() && !s.leaf);
        // Truncated: the last instruction runs past the symbol's end.
        let s = shape(Arch::X86_64, &[0x48, 0xb8, 1, 2], 0x1000, 0x1000);
        assert!(!s.decoded);
        // LOCK-prefixed entry.
        let s = shape(
            Arch::X86_64,
            &[0xf0, 0x0f, 0xb1, 0x17, 0xc3],
            0x1000,
            0x1000,
        );
        assert!(s.bad_entry.is_some_and(|r| r.contains("LOCK")) && s.decoded);
    }

    #[test]
    fn aarch64_rets_calls_and_tail_branches() {
        let w = |v: u32| v.to_le_bytes();
        let mut code = Vec::new();
        code.extend(w(0xd503_201f)); // nop
        code.extend(w(0xd65f_03c0)); // ret
        let s = shape(Arch::Aarch64, &code, 0x1000, 0x2000);
        assert!(s.leaf && s.rets == vec![0x2004]);
        code.extend(w(0x9400_0000)); // bl
        let s = shape(Arch::Aarch64, &code, 0x1000, 0x2000);
        assert!(!s.leaf);
        // b +0x100: out of a 12-byte function.
        let s = shape(Arch::Aarch64, &w(0x1400_0040), 0x1000, 0x2000);
        assert!(!s.leaf && s.rets.is_empty());
    }

    #[test]
    fn names_that_return_twice_and_cold_fragments() {
        assert!(returns_twice("_setjmp") && returns_twice("vfork@GLIBC_2.2.5"));
        assert!(!returns_twice("setjmp_helper"));
        assert_eq!(cold_parent("compute.cold"), Some("compute"));
        assert_eq!(cold_parent("compute.cold.2"), Some("compute"));
        assert_eq!(cold_parent("compute.part.0"), None);
        assert_eq!(cold_parent("coldstart"), None);
        assert_eq!(
            cold_parent("inner(long) [clone .cold]"),
            Some("inner(long)")
        );
        assert_eq!(cold_parent("f() [clone .cold.1]"), Some("f()"));
    }
}
