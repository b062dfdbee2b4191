//! SDT argument specs (`-4@%edi 8@-16(%rbp) 8@global+8(%rip)`) → typed argument locations.
//!
//! Pure: no I/O. INTERFACE OWNED BY THE LEAD — the types below are what the tracer consumes;
//! keep their names and meanings, add fields/variants only if needed.

use serde::Serialize;

/// Instruction set the spec is written for (from the ELF header's e_machine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    X86_64,
    Aarch64,
    /// Any other machine: specs are kept raw and every argument is unsupported.
    Other,
}

/// A register operand, normalised to the full-width register.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reg {
    /// The name as written in the spec, without `%` (e.g. `"r8d"`, `"x29"`, `"sp"`).
    pub name: String,
    /// The canonical full-width name (e.g. `"r8"`, `"x29"`, `"sp"`).
    pub canonical: String,
    /// Index of the register as a u64 word in the kernel's `struct pt_regs` for this arch
    /// (x86_64: r15=0 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_ax ip cs flags
    /// sp=19 ss; aarch64: x0..x30 = 0..30, sp = 31, pc = 32).
    pub pt_regs_word: u8,
}

/// Where an argument's value lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ArgLoc {
    /// An immediate (`$-9`, `$18446744073709551614`, aarch64 `5`). Stored as u64 bits.
    Const { value: u64 },
    /// The value is in a register.
    Reg { reg: Reg },
    /// `*(base + index*scale + disp)`; `index` is None for plain `disp(%reg)` / `[x29, -12]`.
    Mem {
        base: Reg,
        index: Option<Reg>,
        scale: u8,
        disp: i64,
    },
    /// `*(symbol + offset)`, rip-relative on x86_64. `address` is the symbol's link-time
    /// address plus offset, when the symbol was found in .symtab/.dynsym (filled by elf.rs).
    RipRel {
        symbol: String,
        offset: i64,
        address: Option<u64>,
    },
    /// Parsed but cannot be read (float, 16/24-byte struct, %ah, segment, xmm, unknown symbol...)
    /// or could not be parsed at all.
    Unsupported { reason: String },
}

/// One argument of a probe site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ArgSpec {
    /// The argument's text exactly as in the note (e.g. `"-4@%edi"`).
    pub raw: String,
    /// Size in bytes (1, 2, 4, 8; 16/24 are parsed but unsupported). Inferred when omitted.
    pub size: u8,
    pub signed: bool,
    /// `f` suffix: floating point.
    pub float: bool,
    pub loc: ArgLoc,
}

impl ArgSpec {
    /// True when the tracer can read this argument.
    pub fn readable(&self) -> bool {
        !matches!(self.loc, ArgLoc::Unsupported { .. })
            && !self.float
            && matches!(self.size, 1 | 2 | 4 | 8)
            && !matches!(self.loc, ArgLoc::RipRel { address: None, .. })
    }
}
