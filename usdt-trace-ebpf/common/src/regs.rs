//! Which register is which u64 word of the kernel's `struct pt_regs`, per architecture.
//!
//! A uprobe program sees the user registers as the kernel saved them on entry. Argument specs
//! name registers (`%edi`, `x29`); user space turns each name into a word index with these
//! tables and the eBPF program reads `regs[word]`. Both sides must agree, so the tables live
//! here and nowhere else.
//!
//! The layouts are the kernel's (`arch/x86/include/asm/ptrace.h`,
//! `arch/arm64/include/asm/ptrace.h` `user_pt_regs`), which are ABI and never reordered.

/// Words in x86_64 `struct pt_regs`.
pub const X86_64_PT_REGS_WORDS: usize = 21;
/// Words in aarch64 `struct user_pt_regs` (the prefix of the kernel's `pt_regs` a uprobe sees):
/// x0..x30, sp, pc, pstate.
pub const AARCH64_PT_REGS_WORDS: usize = 34;
/// The larger of the two, for buffers that must hold either layout.
pub const MAX_PT_REGS_WORDS: usize = if X86_64_PT_REGS_WORDS > AARCH64_PT_REGS_WORDS {
    X86_64_PT_REGS_WORDS
} else {
    AARCH64_PT_REGS_WORDS
};

/// x86_64 `struct pt_regs` word indices.
pub mod x86_64 {
    pub const R15: u8 = 0;
    pub const R14: u8 = 1;
    pub const R13: u8 = 2;
    pub const R12: u8 = 3;
    pub const RBP: u8 = 4;
    pub const RBX: u8 = 5;
    pub const R11: u8 = 6;
    pub const R10: u8 = 7;
    pub const R9: u8 = 8;
    pub const R8: u8 = 9;
    pub const RAX: u8 = 10;
    pub const RCX: u8 = 11;
    pub const RDX: u8 = 12;
    pub const RSI: u8 = 13;
    pub const RDI: u8 = 14;
    /// The syscall number on syscall entry; not an argument register.
    pub const ORIG_RAX: u8 = 15;
    /// `ip`: at a uprobe, the probed instruction's address (what rip-relative operands need).
    pub const IP: u8 = 16;
    pub const CS: u8 = 17;
    pub const FLAGS: u8 = 18;
    pub const SP: u8 = 19;
    pub const SS: u8 = 20;
}

/// aarch64 `struct user_pt_regs` word indices. `x0`..`x30` are words 0..30:
/// [`x`](aarch64::x) maps them.
pub mod aarch64 {
    /// The highest general register number (`x30`, the link register).
    pub const X_LAST: u8 = 30;
    /// Frame pointer, `x29`.
    pub const FP: u8 = 29;
    /// Link register, `x30`.
    pub const LR: u8 = 30;
    pub const SP: u8 = 31;
    /// `pc`: at a uprobe, the probed instruction's address.
    pub const PC: u8 = 32;
    /// The instruction-pointer word, named like x86_64's for code shared by both.
    pub const IP: u8 = PC;
    pub const PSTATE: u8 = 33;

    /// The word of general register `xN`, None past `x30`.
    pub const fn x(n: u8) -> Option<u8> {
        if n <= X_LAST {
            Some(n)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_word_is_inside_its_struct() {
        let x86 = [
            x86_64::R15,
            x86_64::RDI,
            x86_64::ORIG_RAX,
            x86_64::IP,
            x86_64::SP,
            x86_64::SS,
        ];
        assert!(x86.iter().all(|&w| usize::from(w) < X86_64_PT_REGS_WORDS));
        assert_eq!(usize::from(x86_64::SS) + 1, X86_64_PT_REGS_WORDS);
        assert_eq!(usize::from(aarch64::PSTATE) + 1, AARCH64_PT_REGS_WORDS);
        assert_eq!(MAX_PT_REGS_WORDS, 34);
    }

    #[test]
    fn aarch64_general_registers() {
        assert_eq!(aarch64::x(0), Some(0));
        assert_eq!(aarch64::x(29), Some(aarch64::FP));
        assert_eq!(aarch64::x(30), Some(aarch64::LR));
        assert_eq!(aarch64::x(31), None);
        assert_eq!(aarch64::IP, 32);
    }
}
