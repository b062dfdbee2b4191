//! Reading probe arguments: the register copy, the `ArgDesc` decoding, and `--str` strings.

use aya_ebpf::{
    bindings::pt_regs,
    helpers::{bpf_probe_read_user, bpf_probe_read_user_buf, bpf_probe_read_user_str_bytes},
    programs::ProbeContext,
};
use usdt_trace_common::regs;

use crate::store::forget;
use usdt_trace_common::{
    ArgDesc, ArgKind, SiteSpec, StrSet, GO_FRAME_DEPTH_MASK, MAX_ARGS, MAX_STRS, REG_NONE,
    STRS_CUT, STRS_FAULT, STRS_OK, STR_MAX_CAP, STR_NONE, STR_SLOT,
};

// The register tables live in the shared crate (`regs`), where user space numbers the words
// it puts in each `ArgDesc`: one home for both sides.

/// The scratch copy has room for the larger of the two register files.
pub const REGS_WORDS: usize = regs::MAX_PT_REGS_WORDS;
/// Bytes of this architecture's register file that the probe context points at.
#[cfg(bpf_target_arch = "aarch64")]
const REGS_BYTES: usize = regs::AARCH64_PT_REGS_WORDS * 8;
#[cfg(not(bpf_target_arch = "aarch64"))]
const REGS_BYTES: usize = regs::X86_64_PT_REGS_WORDS * 8;

/// The word of `pt_regs` holding the instruction pointer (`pc` on aarch64, `ip` on x86_64).
#[cfg(bpf_target_arch = "aarch64")]
pub const IP_WORD: u8 = regs::aarch64::IP;
#[cfg(not(bpf_target_arch = "aarch64"))]
pub const IP_WORD: u8 = regs::x86_64::IP;

/// Copies the probed thread's registers into `regs`, so the spec's register numbers can index
/// them as words. Loads straight from the context (a uprobe program may read its `pt_regs`
/// at constant offsets), not through `bpf_probe_read_kernel`: a helper call and a fault-checked
/// copy cost ~20 ns a hit. Loads from the context cannot fail.
#[inline(always)]
pub fn copy_regs(ctx: &ProbeContext, regs: &mut [u64; REGS_WORDS]) {
    let src = ctx.regs as *const u64;
    // Unrolled, so every load has the constant offset the verifier requires of context reads.
    for (i, r) in regs.iter_mut().enumerate().take(REGS_BYTES / 8) {
        // SAFETY: word i of the probe's pt_regs (i < its size in words). Volatile so that
        // LLVM keeps word copies rather than a `memcpy` call.
        unsafe { core::ptr::write_volatile(r, core::ptr::read_volatile(src.add(i))) };
    }
}

/// The word of `pt_regs` holding the stack pointer.
#[cfg(bpf_target_arch = "aarch64")]
const SP_WORD: usize = regs::aarch64::SP as usize;
#[cfg(not(bpf_target_arch = "aarch64"))]
const SP_WORD: usize = regs::x86_64::SP as usize;

/// The probed thread's stack pointer, loaded from the context (a constant offset).
#[inline(always)]
pub fn ctx_sp(ctx: *mut core::ffi::c_void) -> u64 {
    // SAFETY: the stack pointer's word of the probe's pt_regs, inside it.
    unsafe { core::ptr::read_volatile((ctx as *const u64).add(SP_WORD)) }
}

/// Register word `idx`, or 0 for `REG_NONE` and anything out of range.
#[inline(always)]
pub fn reg(regs: &[u64; REGS_WORDS], idx: u8) -> u64 {
    // The explicit bound is what lets the verifier accept a map-supplied index.
    let i = idx as usize;
    if i < REGS_WORDS {
        regs[i]
    } else {
        0
    }
}

#[inline(always)]
fn read_user(addr: u64, size: u8) -> u64 {
    // Read exactly `size` bytes: a wider read could cross into an unmapped page.
    // SAFETY: bpf_probe_read_user checks the address and fails on a fault; we read nothing
    // through the pointer ourselves.
    unsafe {
        match size {
            1 => bpf_probe_read_user(addr as *const u8)
                .map(|v| v as u64)
                .unwrap_or(0),
            2 => bpf_probe_read_user(addr as *const u16)
                .map(|v| v as u64)
                .unwrap_or(0),
            4 => bpf_probe_read_user(addr as *const u32)
                .map(|v| v as u64)
                .unwrap_or(0),
            _ => bpf_probe_read_user(addr as *const u64).unwrap_or(0),
        }
    }
}

/// Widens a `size`-byte value to 64 bits, sign-extending when `signed` is set.
#[inline(always)]
fn extend(v: u64, size: u8, signed: u8) -> u64 {
    match size {
        1 => {
            if signed != 0 {
                v as u8 as i8 as i64 as u64
            } else {
                v as u8 as u64
            }
        }
        2 => {
            if signed != 0 {
                v as u16 as i16 as i64 as u64
            } else {
                v as u16 as u64
            }
        }
        4 => {
            if signed != 0 {
                v as u32 as i32 as i64 as u64
            } else {
                v as u32 as u64
            }
        }
        _ => v,
    }
}

/// An argument, from a register copy (whose instruction pointer word rip-relative operands
/// are read against).
#[inline(always)]
pub fn read_arg(d: &ArgDesc, regs: &[u64; REGS_WORDS]) -> u64 {
    read_arg_with(d, reg(regs, IP_WORD), |w| reg(regs, w))
}

/// An argument, with register words from `reg`.
#[inline(always)]
fn read_arg_with(d: &ArgDesc, ip: u64, reg: impl Fn(u8) -> u64) -> u64 {
    let raw = match d.kind {
        ArgKind::CONST => d.val,
        ArgKind::REG => reg(d.base_reg),
        ArgKind::MEM => {
            let mut addr = reg(d.base_reg).wrapping_add(d.val);
            if d.index_reg != REG_NONE {
                addr = addr.wrapping_add(reg(d.index_reg).wrapping_mul(d.scale as u64));
            }
            read_user(addr, d.size)
        }
        ArgKind::RIP => read_user(ip.wrapping_add(d.val), d.size),
        ArgKind::GO_FRAME => {
            let g = reg(d.base_reg);
            let hi = read_user(g.wrapping_add(d.val), 8);
            (g << 24) | (hi.wrapping_sub(reg(d.index_reg)) & GO_FRAME_DEPTH_MASK)
        }
        _ => 0,
    };
    extend(raw, d.size, d.signed)
}

/// The register copy as a struct, and the arguments likewise: a global
/// function's pointer argument must point to one (the verifier sizes it from BTF).
#[repr(C)]
pub struct RegWords {
    pub w: [u64; REGS_WORDS],
}
#[repr(C)]
pub struct ArgWords {
    pub args: [u64; MAX_ARGS],
}

/// Reads the site's `nargs` arguments into `out`.
#[inline(always)]
pub fn read_args(spec: &SiteSpec, regs: &[u64; REGS_WORDS], out: &mut [u64; MAX_ARGS]) {
    usdt_read_args(
        spec,
        regs as *const _ as *const RegWords,
        out as *mut _ as *mut ArgWords,
    );
}

/// A global BPF function: the verifier checks it once, on its own, instead of once per path
/// that reads arguments (six call sites, each a 12-iteration loop over four argument kinds and
/// four sizes). That cut the uprobe program's verification from ~700k instructions and 0.9 s
/// to a fraction, and `watch`'s attach time with it.
#[no_mangle]
#[inline(never)]
pub extern "C" fn usdt_read_args(
    spec: *const SiteSpec,
    regs: *const RegWords,
    out: *mut ArgWords,
) -> u32 {
    // A global function's pointers may be NULL as far as the verifier knows.
    if spec.is_null() || regs.is_null() || out.is_null() {
        return 0;
    }
    // SAFETY: non-null, and the verifier checked at the call that each points to its type.
    let (spec, regs, out) = unsafe { (&*spec, &(*regs).w, &mut (*out).args) };
    // Constant loop bound for the verifier; `nargs` comes from a map and only cuts it short.
    let mut i = 0;
    while i < MAX_ARGS {
        if i >= spec.nargs as usize {
            break;
        }
        out[i] = read_arg(&spec.args[i], regs);
        i += 1;
    }
    0
}

/// Register word `idx` of the probe's `pt_regs`, loaded from the context; 0 past its end. A
/// context is read only at constant offsets, hence one match arm per word.
#[inline(always)]
fn ctx_reg(regs: *const u64, idx: u8) -> u64 {
    macro_rules! words {
        ($($n:literal)*) => {
            match idx {
                // SAFETY: word $n of the probe's pt_regs, inside it (the guard).
                $($n if ($n as usize) < REGS_BYTES / 8 => unsafe {
                    core::ptr::read_volatile(regs.add($n))
                },)*
                _ => 0,
            }
        };
    }
    words!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33)
}

/// One argument read straight from the probe's context, without the register copy: the span
/// id (histogram mode needs no other argument). A global function like [`usdt_read_args`]:
/// inlined, every kind-and-size branch of the read leaves a value of its own shape, and the
/// verifier walked the span code after it once per shape; returned from a global function,
/// the value is just a number (and the per-word match is verified once).
#[no_mangle]
#[inline(never)]
pub extern "C" fn usdt_read_arg_ctx(ctx: *mut pt_regs, d: *const ArgDesc) -> u64 {
    if ctx.is_null() || d.is_null() {
        return 0;
    }
    let regs = ctx as *const u64;
    // SAFETY: non-null, and the verifier checked at the call that it points to an ArgDesc.
    let d = unsafe { &*d };
    read_arg_with(d, ctx_reg(regs, IP_WORD), |w| ctx_reg(regs, w))
}

/// `read_one`'s length for a NUL-terminated string.
const NUL_TERMINATED: u64 = u64::MAX;

/// Reads one string into `dst` (a slot of `STR_SLOT` bytes): `ptr`'s bytes up to its NUL, or
/// exactly `len` of them, keeping at most `max`. Returns the `STRS_*` state << 16 | bytes kept
/// (one scalar: BPF functions take five arguments and return one register).
#[inline(never)]
fn read_one(ptr: u64, len: u64, max: usize, dst: &mut [u8; STR_SLOT]) -> u32 {
    let (state, n) = read_one_inner(ptr, len, max, dst);
    (state as u32) << 16 | n as u32
}

#[inline(always)]
fn read_one_inner(ptr: u64, len: u64, max: usize, dst: &mut [u8; STR_SLOT]) -> (u8, u16) {
    let sized = len != NUL_TERMINATED;
    // `max` comes from a map: the explicit bound keeps every slice below verifiable.
    let max = if max > STR_MAX_CAP { STR_MAX_CAP } else { max };
    if sized {
        let (n, state) = if len > max as u64 {
            (max, STRS_CUT)
        } else {
            (len as usize, STRS_OK)
        };
        // Bounded again against a constant (see `forget`): 6.1 learns nothing from
        // `len > max` and refused the read's size as possibly negative.
        let n = forget(n as u64) as usize;
        if n > STR_MAX_CAP {
            return (STRS_FAULT, 0);
        }
        let Some(d) = dst.get_mut(..n) else {
            return (STRS_FAULT, 0);
        };
        if n == 0 {
            return (STRS_OK, 0);
        }
        // SAFETY: the helper checks the user address; the copy is bounded by `d`.
        return match unsafe { bpf_probe_read_user_buf(ptr as *const u8, d) } {
            Ok(()) => (state, n as u16),
            Err(_) => (STRS_FAULT, 0),
        };
    }
    // One byte more than kept, and the helper's NUL: a string that fills `max + 1` is cut.
    let Some(d) = dst.get_mut(..max + 2) else {
        return (STRS_FAULT, 0);
    };
    // SAFETY: the helper checks the user address and bounds the copy by `d`'s length.
    match unsafe { bpf_probe_read_user_str_bytes(ptr as *const u8, d) } {
        Ok(s) if s.len() > max => (STRS_CUT, max as u16),
        Ok(s) => (STRS_OK, s.len() as u16),
        Err(_) => (STRS_FAULT, 0),
    }
}

/// Reads the site's `--str` strings (arguments already in `args`) into their slots of `set`;
/// the other slots are left as they are. Inlined into the two global functions of `strs`,
/// each verified once.
#[inline(always)]
pub fn read_strs(spec: &SiteSpec, args: &[u64; MAX_ARGS], max: u32, set: &mut StrSet) {
    let mut j = 0;
    while j < MAX_STRS {
        if j >= spec.nstrs as usize {
            break;
        }
        let d = spec.strs[j];
        j += 1;
        let (a, slot) = (d.arg as usize, d.slot as usize);
        if a >= MAX_ARGS || slot >= MAX_STRS {
            continue;
        }
        // A length that is not there reads as 0 bytes, never as "up to a NUL".
        let len = match args.get(d.len_arg as usize) {
            _ if d.len_arg == STR_NONE => NUL_TERMINATED,
            Some(&l) if l != NUL_TERMINATED => l,
            _ => 0,
        };
        let r = read_one(args[a], len, max as usize, &mut set.data[slot]);
        set.state[slot] = (r >> 16) as u8;
        set.len[slot] = r as u16;
    }
}
