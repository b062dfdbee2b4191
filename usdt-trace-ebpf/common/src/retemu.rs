//! Emulating a `ret` in the probe's handler, for kernels that let a uprobe program change the
//! registers (unique uprobes: the kernel skips the probed instruction when the handler moved
//! `ip`).
//!
//! On those kernels a function's end at its `ret` instructions could cost what an emulated
//! trap does instead of a single-step: the handler reads the return address at `sp`, sets
//! `ip` to it and pops it, exactly as the CPU would, and the kernel resumes the thread there.
//! This kernel lacks the feature (`doctor`'s `uprobe_write_regs`), so today the `ret` is
//! single-stepped (or, where nothing can unwind, a return probe is used instead); the
//! emulation is kept here, pure and tested against what `ret` does, for the handler to call
//! where the feature is probed present.
//!
//! Only the forms a decoder reports as `ret` are emulated: `ret` (C3), `ret imm16` (C2 iw),
//! with a `rep` (F3, the AMD branch-predictor idiom `repz ret`) or `bnd` (F2) prefix. A far
//! return (CB, CA) changes `cs` and is never emulated.

/// Where the thread continues after the `ret` at the probe: the new `ip` and `sp`. `insn`
/// is the probed instruction's bytes, `sp` the stack pointer at the probe, `ret_addr` the 8
/// bytes at `sp` (read by the caller from user memory). None for anything that is not a
/// near return: then the instruction must run as it is.
pub fn emulate_ret(insn: &[u8], sp: u64, ret_addr: u64) -> Option<(u64, u64)> {
    let body = match insn {
        [0xf3 | 0xf2, rest @ ..] => rest,
        other => other,
    };
    let pop = match body {
        [0xc3, ..] => 0,
        [0xc2, lo, hi, ..] => u64::from(u16::from_le_bytes([*lo, *hi])),
        _ => return None,
    };
    Some((ret_addr, sp.wrapping_add(8).wrapping_add(pop)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ret_pops_the_return_address_into_ip() {
        let sp = 0x7ffd_0000_1000;
        let ra = 0x5555_5555_1234;
        assert_eq!(emulate_ret(&[0xc3], sp, ra), Some((ra, sp + 8)));
        // repz ret and bnd ret are the same return.
        assert_eq!(emulate_ret(&[0xf3, 0xc3], sp, ra), Some((ra, sp + 8)));
        assert_eq!(emulate_ret(&[0xf2, 0xc3], sp, ra), Some((ra, sp + 8)));
        // ret $16 also drops 16 bytes of arguments (stdcall-style callee cleanup).
        assert_eq!(
            emulate_ret(&[0xc2, 0x10, 0x00], sp, ra),
            Some((ra, sp + 24))
        );
    }

    #[test]
    fn anything_else_runs_as_it_is() {
        for insn in [
            &[0xcb][..],
            &[0xca, 8, 0],
            &[0xc2, 8],
            &[0x90],
            &[],
            &[0xf3, 0x90],
            &[0x48, 0xc3],
        ] {
            assert_eq!(emulate_ret(insn, 0x1000, 0x2000), None, "{insn:x?}");
        }
    }
}
