//! An argument spec lowered to the fixed-size description the eBPF program reads
//! (`ArgDesc`, read by `usdt-trace-ebpf/src/args.rs`).

use super::{ArgLoc, ArgSpec};
use usdt_trace_common::{ArgDesc, ArgKind, REG_NONE};

/// The kernel's view of one argument.
pub fn arg_desc(arg: &ArgSpec, pc: u64) -> ArgDesc {
    let mut d = ArgDesc {
        kind: ArgKind::UNSUPPORTED,
        size: arg.size,
        signed: arg.signed as u8,
        base_reg: REG_NONE,
        index_reg: REG_NONE,
        scale: 1,
        _pad: [0; 2],
        val: 0,
    };
    if !arg.readable() {
        return d;
    }
    match &arg.loc {
        ArgLoc::Const { value } => {
            d.kind = ArgKind::CONST;
            d.val = *value;
        }
        ArgLoc::Reg { reg } => {
            d.kind = ArgKind::REG;
            d.base_reg = reg.pt_regs_word;
        }
        ArgLoc::Mem {
            base,
            index,
            scale,
            disp,
        } => {
            d.kind = ArgKind::MEM;
            d.base_reg = base.pt_regs_word;
            if let Some(i) = index {
                d.index_reg = i.pt_regs_word;
                d.scale = *scale;
            }
            d.val = *disp as u64;
        }
        ArgLoc::RipRel {
            address: Some(addr),
            ..
        } => {
            // At the probe, ip == pc (the kernel rewinds it to the breakpoint), so the delta
            // from pc finds the symbol in any load bias without knowing the process.
            d.kind = ArgKind::RIP;
            d.val = addr.wrapping_sub(pc);
        }
        ArgLoc::SymMem {
            base,
            index,
            scale,
            address: Some(addr),
            ..
        } => {
            // `addr` is absolute (ET_EXEC only). Without a base, REG_NONE reads as 0 in the
            // program (`reg()` returns 0 past the saved registers).
            d.kind = ArgKind::MEM;
            d.base_reg = base.as_ref().map_or(REG_NONE, |b| b.pt_regs_word);
            if let Some(i) = index {
                d.index_reg = i.pt_regs_word;
                d.scale = *scale;
            }
            d.val = *addr;
        }
        ArgLoc::GoFrame => {
            use usdt_trace_common::regs::x86_64::{R14, SP};
            d.kind = ArgKind::GO_FRAME;
            d.base_reg = R14;
            d.index_reg = SP;
            // g.stack.hi: the second word of the goroutine.
            d.val = 8;
        }
        _ => {}
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gcc -no-pie's `sym(%reg)` / `sym(,%idx,s)`: absolute memory once elf.rs resolved it.
    #[test]
    fn symbolic_displacement_maps_to_absolute_mem() {
        use crate::elf::argspec::{parse_arg, Arch};
        let resolved = |s: &str, addr: Option<u64>| {
            let mut a = parse_arg(s, Arch::X86_64).resolve(|_| None);
            match &mut a.loc {
                ArgLoc::SymMem { address, .. } => *address = addr,
                other => panic!("{s}: {other:?}"),
            }
            a
        };
        let d = arg_desc(&resolved("-4@a_s32(,%rax,4)", Some(0x404060)), 0x401000);
        assert_eq!((d.kind, d.size, d.signed), (ArgKind::MEM, 4, 1));
        assert_eq!((d.base_reg, d.index_reg, d.scale), (REG_NONE, 10, 4));
        assert_eq!(d.val, 0x404060);
        let d = arg_desc(&resolved("2@a_u16(%rax,%rax)", Some(0x404050)), 0x401000);
        assert_eq!(
            (d.kind, d.base_reg, d.index_reg, d.scale),
            (ArgKind::MEM, 10, 10, 1)
        );
        assert_eq!(d.val, 0x404050);
        // The offset is already in the resolved address.
        let d = arg_desc(&resolved("8@sarr+8(%rcx)", Some(0x404088)), 0x401000);
        assert_eq!(
            (d.kind, d.base_reg, d.index_reg),
            (ArgKind::MEM, 11, REG_NONE)
        );
        assert_eq!(d.val, 0x404088);
        // Unresolved (PIE, shared library, unknown symbol): not read.
        let d = arg_desc(&resolved("-1@a_s8(%rax)", None), 0x401000);
        assert_eq!(d.kind, ArgKind::UNSUPPORTED);
    }
}
