//! `--stack=dwarf`: unwinding a copied user stack with the objects' call frame information.
//!
//! The kernel sends the registers at the probe (ip, sp, fp, and lr on aarch64) and the top of
//! the stack from sp up ([`StackCopyRecord`](usdt_trace_common::StackCopyRecord)). Here each
//! frame's rule is looked up by its pc in the object mapped there (`.eh_frame`, then
//! `.debug_frame`: [`cfi`]), the canonical frame address and the caller's registers are
//! computed from it, and the return address becomes the next pc. Where an object has no rule
//! for a pc, the frame pointer is followed instead, when it points into the copy; where neither
//! works the walk stops and says why ([`Stop`]): an address that could not be unwound is never
//! shown as a frame.
//!
//! Everything read here comes from the traced process (its stack, its objects' CFI): every
//! memory read is bounded by the copy, every arithmetic wraps or is checked, the walk is capped
//! at [`MAX_FRAMES`] and must move up the stack, and malformed CFI is an error, never a panic.
//! The walk itself ([`unwind`]) is pure, over a [`Lookup`] of rules, and unit-tested on
//! synthetic stacks; [`process`] adds the process's mappings and the objects' tables (cached
//! per object); [`mode`] picks the method for `--stack=auto`.

pub mod cfi;
pub mod mode;
pub mod process;
#[cfg(test)]
mod tests;

pub use mode::StackMode;

/// Frames a walk gives at most.
pub const MAX_FRAMES: usize = 128;

/// The DWARF register numbers a walk needs, per architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchRegs {
    /// The stack pointer (the CFA is the caller's sp).
    pub sp: u16,
    /// The frame pointer (`rbp`, `x29`).
    pub fp: u16,
    /// The return address column of the CIEs (`rip`'s 16 on x86_64, `x30` on aarch64).
    pub ra: u16,
    /// A link register holding the return address at the innermost frame (aarch64's `x30`).
    pub lr: Option<u16>,
}

impl ArchRegs {
    pub const X86_64: ArchRegs = ArchRegs {
        sp: 7,
        fp: 6,
        ra: 16,
        lr: None,
    };
    pub const AARCH64: ArchRegs = ArchRegs {
        sp: 31,
        fp: 29,
        ra: 30,
        lr: Some(30),
    };

    /// The registers of the machine this tracer runs on (it traces its own architecture).
    pub const fn native() -> ArchRegs {
        if cfg!(target_arch = "aarch64") {
            ArchRegs::AARCH64
        } else {
            ArchRegs::X86_64
        }
    }
}

/// The copied top of a stack: `bytes[0]` is the byte at `base` (the sp at the probe).
#[derive(Clone, Copy, Debug)]
pub struct StackCopy<'a> {
    pub base: u64,
    pub bytes: &'a [u8],
}

impl StackCopy<'_> {
    /// The 8-byte little-endian word at `addr`, when all of it is inside the copy.
    pub fn word(&self, addr: u64) -> Result<u64, Stop> {
        let off = addr
            .checked_sub(self.base)
            .ok_or(Stop::BelowStack { addr })?;
        let off = usize::try_from(off).map_err(|_| self.ends(addr))?;
        let b = self
            .bytes
            .get(off..off.checked_add(8).ok_or(self.ends(addr))?)
            .ok_or(self.ends(addr))?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn ends(&self, addr: u64) -> Stop {
        Stop::CopyEnds {
            addr,
            copied: self.bytes.len(),
        }
    }
}

/// How a register of the caller is found (the part of a CFI row a walk uses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegRule {
    /// Unchanged (also what a register the row does not name gets).
    Same,
    /// Not recoverable: for the return address, the outermost frame.
    Undefined,
    /// Saved at CFA + n.
    AtCfa(i64),
    /// Is CFA + n.
    ValCfa(i64),
    /// Is in register r.
    Reg(u16),
    /// Saved at the address a DWARF expression computes (the CFA pushed first).
    AtExpr(Vec<u8>),
    /// Is the value a DWARF expression computes (the CFA pushed first).
    ValExpr(Vec<u8>),
}

/// How the canonical frame address is found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CfaRule {
    RegOffset { reg: u16, offset: i64 },
    Expr(Vec<u8>),
}

/// The rules of one pc: the CFA, and the registers the row names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub cfa: CfaRule,
    pub regs: Vec<(u16, RegRule)>,
    /// The CIE's return address column.
    pub ra: u16,
}

/// What is known of a pc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A rule covers it.
    Row(Row),
    /// In a file's executable mapping, but no CFI covers it.
    NoCfi,
    /// The object's CFI could not be read or evaluated for it.
    BadCfi(String),
    /// In executable memory that is no file (JIT code, the vdso): a real frame, no CFI.
    Anonymous,
    /// In no executable mapping: not code, so not a frame.
    NotCode,
}

/// Where the rules of each pc come from: the process's objects, or a test's table.
pub trait Lookup {
    fn find(&mut self, pc: u64) -> Found;
}

/// How a frame was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The probe's own registers (the innermost frame).
    Regs,
    /// The callee's CFI.
    Cfi,
    /// The callee's frame pointer (its object had no CFI for it).
    FramePointer,
}

impl Via {
    /// The JSON and text word.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Regs => "regs",
            Via::Cfi => "cfi",
            Via::FramePointer => "fp",
        }
    }
}

/// Why a walk stopped before the outermost frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Stop {
    #[error("no CFI for 0x{pc:x}, and no frame pointer into the stack copy")]
    NoCfi { pc: u64 },
    #[error("bad CFI for 0x{pc:x}: {why}")]
    BadCfi { pc: u64, why: String },
    #[error("return address 0x{addr:x} is in no executable mapping")]
    NotCode { addr: u64 },
    #[error("the stack copy ends before 0x{addr:x} ({copied} bytes copied)")]
    CopyEnds { addr: u64, copied: usize },
    #[error("0x{addr:x} is below the stack pointer")]
    BelowStack { addr: u64 },
    #[error("CFI for 0x{pc:x} needs register {reg}, which was not captured")]
    NoRegister { pc: u64, reg: u16 },
    #[error("the stack pointer did not move up at 0x{pc:x}")]
    NoProgress { pc: u64 },
    #[error("{MAX_FRAMES} frames")]
    TooDeep,
}

/// A walk: the pcs, innermost first, how each was reached, and why it stopped early.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unwound {
    pub frames: Vec<(u64, Via)>,
    pub stopped: Option<Stop>,
}

/// Register values by DWARF number (only the few a walk tracks).
#[derive(Clone, Debug, Default)]
struct Regs(Vec<(u16, u64)>);

impl Regs {
    fn get(&self, r: u16) -> Option<u64> {
        self.0.iter().find(|(n, _)| *n == r).map(|(_, v)| *v)
    }
    fn set(&mut self, r: u16, v: Option<u64>) {
        self.0.retain(|(n, _)| *n != r);
        if let Some(v) = v {
            self.0.push((r, v));
        }
    }
}

/// The probe's registers (`StackCopyRecord::regs`: ip, sp, fp, lr).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeRegs {
    pub ip: u64,
    pub sp: u64,
    pub fp: u64,
    pub lr: u64,
}

/// Unwinds from the probe's registers through `stack` with the rules `lookup` gives.
pub fn unwind(
    arch: ArchRegs,
    regs: ProbeRegs,
    stack: StackCopy,
    lookup: &mut dyn Lookup,
) -> Unwound {
    let mut out = Unwound::default();
    let mut r = Regs::default();
    r.set(arch.sp, Some(regs.sp));
    r.set(arch.fp, Some(regs.fp));
    if let Some(lr) = arch.lr {
        r.set(lr, Some(regs.lr));
    }
    let mut pc = regs.ip;
    let mut via = Via::Regs;
    // The innermost frame is at its pc; the others at a return address, looked up one byte
    // back (a call may be a function's last instruction).
    let mut found = lookup.find(pc);
    if found == Found::NotCode {
        out.stopped = Some(Stop::NotCode { addr: pc });
        return out;
    }
    loop {
        out.frames.push((pc, via));
        if out.frames.len() >= MAX_FRAMES {
            out.stopped = Some(Stop::TooDeep);
            return out;
        }
        let first = out.frames.len() == 1;
        let step = match &found {
            Found::Row(row) => {
                step_cfi(arch, row, &r, pc, first, stack).map(|s| s.map(|s| (s, Via::Cfi)))
            }
            Found::NoCfi | Found::Anonymous => step_fp(arch, &r, stack)
                .map(|s| Some((s, Via::FramePointer)))
                .map_err(|e| match e {
                    Stop::CopyEnds { .. } => e,
                    _ => Stop::NoCfi { pc },
                }),
            Found::BadCfi(why) => step_fp(arch, &r, stack)
                .map(|s| Some((s, Via::FramePointer)))
                .map_err(|_| Stop::BadCfi {
                    pc,
                    why: why.clone(),
                }),
            // Never reached (a pc in no code is not made a frame), but never a panic either.
            Found::NotCode => Err(Stop::NotCode { addr: pc }),
        };
        let (next, how) = match step {
            Ok(Some(s)) => s,
            // The outermost frame.
            Ok(None) => return out,
            Err(e) => {
                out.stopped = Some(e);
                return out;
            }
        };
        let (old_sp, new_sp) = (
            r.get(arch.sp).unwrap_or(0),
            next.regs.get(arch.sp).unwrap_or(0),
        );
        if new_sp < old_sp || (new_sp == old_sp && next.pc == pc) {
            out.stopped = Some(Stop::NoProgress { pc });
            return out;
        }
        if next.pc == 0 {
            return out;
        }
        found = lookup.find(next.pc.wrapping_sub(1));
        if found == Found::NotCode {
            out.stopped = Some(Stop::NotCode { addr: next.pc });
            return out;
        }
        pc = next.pc;
        r = next.regs;
        via = how;
    }
}

/// The caller's pc and registers.
struct Next {
    pc: u64,
    regs: Regs,
}

/// One step by a CFI row; None at the outermost frame (the return address undefined).
fn step_cfi(
    arch: ArchRegs,
    row: &Row,
    r: &Regs,
    pc: u64,
    first: bool,
    stack: StackCopy,
) -> Result<Option<Next>, Stop> {
    let need = |reg: u16| r.get(reg).ok_or(Stop::NoRegister { pc, reg });
    let cfa = match &row.cfa {
        CfaRule::RegOffset { reg, offset } => need(*reg)?.wrapping_add(*offset as u64),
        CfaRule::Expr(e) => eval_expr(e, None, r, stack).map_err(|e| e.at(pc))?,
    };
    let rule_of = |reg: u16| {
        row.regs
            .iter()
            .find(|(n, _)| *n == reg)
            .map(|(_, rule)| rule.clone())
    };
    let value = |rule: RegRule, reg: u16| -> Result<Option<u64>, Stop> {
        Ok(match rule {
            RegRule::Same => r.get(reg),
            RegRule::Undefined => None,
            RegRule::AtCfa(n) => Some(stack.word(cfa.wrapping_add(n as u64))?),
            RegRule::ValCfa(n) => Some(cfa.wrapping_add(n as u64)),
            RegRule::Reg(o) => r.get(o),
            RegRule::AtExpr(e) => {
                let a = eval_expr(&e, Some(cfa), r, stack).map_err(|e| e.at(pc))?;
                Some(stack.word(a)?)
            }
            RegRule::ValExpr(e) => Some(eval_expr(&e, Some(cfa), r, stack).map_err(|e| e.at(pc))?),
        })
    };
    // The return address: a row that does not name its column means the outermost frame
    // (x86_64's `_start` and thread entries say `DW_CFA_undefined rip`, which reads the same),
    // except at the innermost frame of a link-register machine, where it is still in lr.
    let ra = match rule_of(row.ra) {
        Some(rule) => value(rule, row.ra)?,
        None if first && arch.lr == Some(row.ra) => r.get(row.ra),
        None => None,
    };
    let Some(ra) = ra else {
        return Ok(None);
    };
    let mut regs = Regs::default();
    for reg in [arch.fp].into_iter().chain(arch.lr) {
        let v = match rule_of(reg) {
            Some(rule) => value(rule, reg)?,
            None => r.get(reg),
        };
        regs.set(reg, v);
    }
    regs.set(arch.sp, Some(cfa));
    Ok(Some(Next {
        pc: strip_pac(arch, ra),
        regs,
    }))
}

/// One step by the frame pointer: the frame record `[fp] = caller's fp, [fp+8] = return
/// address` (x86_64's `push rbp; mov rsp, rbp`, aarch64's `stp x29, x30`), read only inside
/// the copy and only above the current sp.
fn step_fp(arch: ArchRegs, r: &Regs, stack: StackCopy) -> Result<Next, Stop> {
    let fp = r.get(arch.fp).ok_or(Stop::NoRegister {
        pc: 0,
        reg: arch.fp,
    })?;
    let sp = r.get(arch.sp).unwrap_or(stack.base);
    if fp < sp || fp % 8 != 0 {
        return Err(Stop::BelowStack { addr: fp });
    }
    let caller_fp = stack.word(fp)?;
    let ra = stack.word(fp.wrapping_add(8))?;
    let mut regs = Regs::default();
    regs.set(arch.fp, Some(caller_fp));
    regs.set(arch.sp, Some(fp.wrapping_add(16)));
    Ok(Next {
        pc: strip_pac(arch, ra),
        regs,
    })
}

/// aarch64 return addresses may carry a pointer authentication code in their top bits.
fn strip_pac(arch: ArchRegs, a: u64) -> u64 {
    if arch.lr.is_some() {
        a & 0x0000_ffff_ffff_ffff
    } else {
        a
    }
}

/// Why an expression could not be evaluated (placed at its pc by [`ExprError::at`]).
enum ExprError {
    Stop(Stop),
    Bad(String),
    Reg(u16),
}

impl ExprError {
    fn at(self, pc: u64) -> Stop {
        match self {
            ExprError::Stop(s) => s,
            ExprError::Bad(why) => Stop::BadCfi { pc, why },
            ExprError::Reg(reg) => Stop::NoRegister { pc, reg },
        }
    }
}

/// Operations an expression may run (the PLT's and a realigned `main`'s take under 10).
const MAX_EXPR_STEPS: u32 = 256;

/// Evaluates a CFI expression (`initial`: the CFA, pushed first for register rules), reading
/// memory from the copy alone and registers from those tracked.
fn eval_expr(
    expr: &[u8],
    initial: Option<u64>,
    r: &Regs,
    stack: StackCopy,
) -> Result<u64, ExprError> {
    use gimli::{EvaluationResult, Value};
    let encoding = gimli::Encoding {
        address_size: 8,
        format: gimli::Format::Dwarf32,
        version: 4,
    };
    let bad = |e: gimli::Error| ExprError::Bad(format!("expression: {e}"));
    let mut ev =
        gimli::Expression(gimli::EndianSlice::new(expr, gimli::LittleEndian)).evaluation(encoding);
    ev.set_max_iterations(MAX_EXPR_STEPS);
    if let Some(v) = initial {
        ev.set_initial_value(v);
    }
    let mut res = ev.evaluate().map_err(bad)?;
    loop {
        res = match res {
            EvaluationResult::Complete => break,
            EvaluationResult::RequiresMemory { address, size, .. } => {
                let w = stack.word(address).map_err(ExprError::Stop)?;
                let v = match size {
                    8 => w,
                    1..=7 => w & ((1u64 << (8 * size as u32)) - 1),
                    _ => return Err(ExprError::Bad(format!("memory read of {size} bytes"))),
                };
                ev.resume_with_memory(Value::Generic(v)).map_err(bad)?
            }
            EvaluationResult::RequiresRegister { register, .. } => {
                let v = r.get(register.0).ok_or(ExprError::Reg(register.0))?;
                ev.resume_with_register(Value::Generic(v)).map_err(bad)?
            }
            other => return Err(ExprError::Bad(format!("unsupported: {other:?}"))),
        };
    }
    let pieces = ev.as_result();
    match pieces.first().map(|p| &p.location) {
        Some(gimli::Location::Address { address }) if pieces.len() == 1 => Ok(*address),
        Some(gimli::Location::Value { value }) if pieces.len() == 1 => {
            value.to_u64(u64::MAX).map_err(bad)
        }
        _ => Err(ExprError::Bad("expression gives no address".into())),
    }
}
