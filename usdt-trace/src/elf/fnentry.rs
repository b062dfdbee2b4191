//! Where a function's entry probe may sit: on the first instruction the kernel emulates,
//! when the instructions before it change nothing the probe reads.
//!
//! A uprobe on an instruction the kernel cannot emulate is single-stepped out of line
//! (several µs a hit here); `nop`, `push %reg` and relative `jmp`/`call`/`jcc` are emulated
//! (about half a microsecond). Many functions open with a `cmp`, `test`, `endbr64` or a `mov`
//! into a scratch register before their first branch or `push`: moving the probe there costs
//! the span those few nanoseconds of straight-line code and saves a single-step per call.
//!
//! The probe may move past an instruction only when, at the new place, everything the probe
//! and the span rely on is as it was at the first instruction:
//!
//! - the stack pointer and memory: a return probe takes the return address at `(%rsp)`, a
//!   `ret`-instruction end is paired by the stack pointer, and nothing may have been stored;
//! - control flow: the instructions before it run exactly once per call, straight, so the
//!   new place is reached once per call and on every path (nothing in the function branches
//!   into that stretch, and no other function starts inside it: checked by the caller);
//! - for a probe that reads arguments ([`EntryPlaces::args`]), the six SysV argument
//!   registers too. A probe that reads none (a duration histogram) may move past writes to
//!   any other register ([`EntryPlaces::timing`]).
//!
//! Pure: decided from the decoded instructions.

use super::SiteInsn;
use iced_x86::{FlowControl, Instruction, InstructionInfoFactory, OpAccess, Register};
use serde::Serialize;

/// How far past the entry the search goes: the entry blocks that matter are short.
pub const SCAN: usize = 32;

/// A place past the entry where the probe may sit instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Moved {
    /// File offset of the instruction probed instead.
    pub offset: u64,
    /// What the kernel does with it (`Nop`, `Push` or `Branch`: emulated).
    pub insn: SiteInsn,
    /// How many instructions before it were passed over.
    pub skipped: u32,
}

/// Where the entry probe may sit, by what it reads. `None`: at the first instruction (it is
/// emulated already, or nothing cheaper is reachable without changing what the probe sees).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EntryPlaces {
    /// With the argument registers, the stack pointer and memory as at the entry.
    pub args: Option<Moved>,
    /// With the stack pointer and memory as at the entry (other registers may differ): for a
    /// probe that reads no argument.
    pub timing: Option<Moved>,
}

/// What the kernel does with the instruction `bytes` begins with, when it emulates it
/// (arch/x86/kernel/uprobes.c: `branch_setup_xol_ops` takes a 1-byte `nop` and relative
/// `jmp`, `call` and `jcc` without a 0x66 prefix; `push_setup_xol_ops` a `push %reg`).
pub fn emulated(bytes: &[u8]) -> Option<SiteInsn> {
    match bytes {
        [0x90, ..] => Some(SiteInsn::Nop),
        b if super::fnshape::is_push_reg(b) => Some(SiteInsn::Push),
        [0xeb | 0xe9 | 0xe8 | 0x70..=0x7f, ..] | [0x0f, 0x80..=0x8f, ..] => Some(SiteInsn::Branch),
        _ => None,
    }
}

/// The SysV integer argument registers (their full 64-bit names).
const ARG_REGS: [Register; 6] = [
    Register::RDI,
    Register::RSI,
    Register::RDX,
    Register::RCX,
    Register::R8,
    Register::R9,
];

fn writes(a: OpAccess) -> bool {
    matches!(
        a,
        OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
    )
}

/// What passing over one instruction costs the probe: `None` when it may not be passed at
/// all, else whether it leaves the argument registers as they were.
fn passable(factory: &mut InstructionInfoFactory, insn: &Instruction) -> Option<bool> {
    // Only straight-line code: no branch, call, return, syscall, interrupt or trap.
    if insn.flow_control() != FlowControl::Next || insn.has_lock_prefix() {
        return None;
    }
    let info = factory.info(insn);
    if info.used_memory().iter().any(|m| writes(m.access())) {
        return None;
    }
    let mut args_kept = true;
    for r in info.used_registers() {
        if !writes(r.access()) {
            continue;
        }
        let full = r.register().full_register();
        if matches!(full, Register::RSP | Register::RIP) || full.is_segment_register() {
            return None;
        }
        if ARG_REGS.contains(&full) {
            args_kept = false;
        }
    }
    Some(args_kept)
}

/// Where the entry probe of a decoded x86_64 function may sit. `insns` are its instructions
/// from the first (at link-time `address`, file offset `offset`), `code` its bytes, `targets`
/// the addresses its own branches go to.
pub fn places(
    insns: &[Instruction],
    code: &[u8],
    address: u64,
    offset: u64,
    targets: &[u64],
) -> EntryPlaces {
    let mut out = EntryPlaces::default();
    let mut factory = InstructionInfoFactory::new();
    let mut args_kept = true;
    for (i, insn) in insns.iter().take(SCAN).enumerate() {
        // A branch into the stretch passed over would reach the new place twice in one call.
        if i > 0 && targets.contains(&insn.ip()) {
            break;
        }
        let at = insn.ip().wrapping_sub(address);
        let bytes = usize::try_from(at)
            .ok()
            .and_then(|a| code.get(a..))
            .unwrap_or(&[]);
        if let Some(kind) = emulated(bytes) {
            if i > 0 {
                let moved = Moved {
                    offset: offset + at,
                    insn: kind,
                    skipped: i as u32,
                };
                out.timing = Some(moved);
                out.args = args_kept.then_some(moved);
            }
            break;
        }
        match passable(&mut factory, insn) {
            Some(kept) => args_kept &= kept,
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    fn at(code: &[u8], targets: &[u64]) -> EntryPlaces {
        let insns: Vec<Instruction> = Decoder::with_ip(64, code, 0x1000, DecoderOptions::NONE)
            .into_iter()
            .collect();
        places(&insns, code, 0x1000, 0x100, targets)
    }

    #[test]
    fn a_compare_before_the_first_branch_is_passed_over_with_the_arguments() {
        // redis' createStringObject: cmp $0x2c,%rsi; ja +10; jmp ...
        let p = at(&[0x48, 0x83, 0xfe, 0x2c, 0x77, 0x0a, 0xe9, 0, 0, 0, 0], &[]);
        let moved = Moved {
            offset: 0x104,
            insn: SiteInsn::Branch,
            skipped: 1,
        };
        assert_eq!((p.args, p.timing), (Some(moved), Some(moved)));
        // endbr64; push %rbp: the push.
        let p = at(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0xc3], &[]);
        assert_eq!(
            p.args.map(|m| (m.offset, m.insn)),
            Some((0x104, SiteInsn::Push))
        );
        // Already emulated at the entry: nothing to move.
        assert_eq!(at(&[0x55, 0xc3], &[]), EntryPlaces::default());
    }

    #[test]
    fn a_write_to_an_argument_register_keeps_the_arguments_at_the_entry() {
        // redis' siphash opens with mov (%rdx),%rcx; mov %rsi,%r9 ... then a je.
        let code: &[u8] = &[
            0x48, 0x8b, 0x0a, // mov (%rdx),%rcx
            0x49, 0x89, 0xf1, // mov %rsi,%r9
            0x4c, 0x39, 0xcf, // cmp %r9,%rdi
            0x74, 0x00, // je +0
            0xc3,
        ];
        let p = at(code, &[]);
        assert_eq!(p.args, None);
        assert_eq!(
            p.timing.map(|m| (m.offset, m.insn, m.skipped)),
            Some((0x109, SiteInsn::Branch, 3))
        );
        // A scratch register (rax, r10, r11) is fine for both.
        let p = at(&[0x49, 0x89, 0xfa, 0x48, 0x31, 0xc0, 0x74, 0x00, 0xc3], &[]);
        assert_eq!(p.args.map(|m| m.offset), Some(0x106));
    }

    #[test]
    fn stores_stack_changes_and_calls_stop_the_search() {
        // mov %rdi,(%rsi) (a store); then a nop.
        assert_eq!(
            at(&[0x48, 0x89, 0x3e, 0x90, 0xc3], &[]),
            EntryPlaces::default()
        );
        // sub $8,%rsp; call: the stack pointer moved.
        assert_eq!(
            at(&[0x48, 0x83, 0xec, 0x08, 0xe8, 0, 0, 0, 0, 0xc3], &[]),
            EntryPlaces::default()
        );
        // syscall before a nop: not straight-line.
        assert_eq!(at(&[0x0f, 0x05, 0x90, 0xc3], &[]), EntryPlaces::default());
        // lock cmpxchg: a store, and refused at the entry anyway.
        assert_eq!(
            at(&[0xf0, 0x0f, 0xb1, 0x17, 0x90], &[]),
            EntryPlaces::default()
        );
    }

    #[test]
    fn a_branch_into_the_stretch_keeps_the_entry() {
        // cmp; test; jne: a loop back to the test (0x1004) would pass the jne twice.
        let code: &[u8] = &[0x48, 0x83, 0xfe, 0x2c, 0x48, 0x85, 0xff, 0x75, 0x00, 0xc3];
        assert!(at(code, &[]).args.is_some());
        assert_eq!(at(code, &[0x1004]), EntryPlaces::default());
        // A target at the entry itself is the entry: still fine.
        assert!(at(code, &[0x1000]).args.is_some());
    }

    #[test]
    fn which_instructions_the_kernel_emulates() {
        assert_eq!(emulated(&[0x90]), Some(SiteInsn::Nop));
        assert_eq!(emulated(&[0x41, 0x57]), Some(SiteInsn::Push));
        for b in [
            &[0xeb, 0][..],
            &[0xe9, 0, 0, 0, 0],
            &[0xe8, 0, 0, 0, 0],
            &[0x77, 0],
            &[0x0f, 0x84, 0, 0, 0, 0],
        ] {
            assert_eq!(emulated(b), Some(SiteInsn::Branch), "{b:x?}");
        }
        // 0x66-prefixed branches are refused by the kernel; endbr64, mov: single-stepped.
        for b in [
            &[0x66, 0xe9, 0, 0][..],
            &[0xf3, 0x0f, 0x1e, 0xfa],
            &[0x48, 0x89, 0xe5],
            &[0xc3],
        ] {
            assert_eq!(emulated(b), None, "{b:x?}");
        }
    }
}
