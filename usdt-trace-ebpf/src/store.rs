//! Stores that must stay stores. LLVM's BPF backend turns a struct or array assignment, and
//! neighbouring zero stores, into calls of byte-loop `memcpy`/`memset` subprograms: the
//! verifier walks them a byte at a time on every path that reaches them, and they run a loop
//! per call (one was on every span start and every context switch of a traced thread). These
//! write words, volatile so that LLVM keeps them as they are.

use usdt_trace_common::{Acct, PollAcct, MAX_ARGS};

/// `*v = 0` as a store of its own: LLVM merges neighbouring zero stores into a call of a
/// byte-loop `memset` subprogram, which the verifier walks byte by byte and which runs a loop.
#[inline(always)]
pub fn zero<T: Default>(v: &mut T) {
    // SAFETY: a unique reference to a plain integer.
    unsafe { core::ptr::write_volatile(v, T::default()) };
}

/// `*dst = *src` for argument words, as unrolled word stores: a plain assignment becomes a
/// call to a byte-by-byte `memcpy` subprogram, which the verifier walks one byte at a time on
/// every path (tens of thousands of verified instructions) and which runs a loop per record.
#[inline(always)]
pub fn copy_words(dst: &mut [u64; MAX_ARGS], src: &[u64; MAX_ARGS]) {
    for i in 0..MAX_ARGS {
        // SAFETY: both in bounds; volatile only so LLVM keeps word stores instead of a memcpy.
        unsafe { core::ptr::write_volatile(&mut dst[i], src[i]) };
    }
}

/// `*dst = [0; MAX_ARGS]` as word stores, not a call of a byte-loop `memset` subprogram.
#[inline(always)]
pub fn zero_args(dst: &mut [u64; MAX_ARGS]) {
    for w in dst.iter_mut() {
        zero(w);
    }
}

/// Structs of u64 fields only, 8-byte aligned: all-zero is a valid value, and a word store
/// covers each field.
pub trait Words {}
impl Words for PollAcct {}
impl Words for Acct {}

/// `*dst = *src` as unrolled word copies: a struct assignment from a reference is a call of a
/// byte-loop `memcpy` subprogram.
#[inline(always)]
pub fn copy_words_of<T: Words>(dst: &mut T, src: &T) {
    const {
        assert!(core::mem::size_of::<T>().is_multiple_of(8));
        assert!(core::mem::align_of::<T>() >= 8);
    }
    let d = dst as *mut T as *mut u64;
    let s = src as *const T as *const u64;
    for i in 0..core::mem::size_of::<T>() / 8 {
        // SAFETY: word i of both (the size is a multiple of 8 and both are 8-byte aligned:
        // asserted above); volatile so that LLVM keeps word copies.
        unsafe { core::ptr::write_volatile(d.add(i), core::ptr::read_volatile(s.add(i))) };
    }
}

/// `*v = zeroed` as unrolled word stores: `= Default::default()` on a 112-byte struct became a
/// call to a byte-loop `memset` subprogram, run on every id-paired span start.
#[inline(always)]
pub fn zero_words<T: Words>(v: &mut T) {
    const {
        assert!(core::mem::size_of::<T>().is_multiple_of(8));
        assert!(core::mem::align_of::<T>() >= 8);
    }
    let p = v as *mut T as *mut u64;
    for i in 0..core::mem::size_of::<T>() / 8 {
        // SAFETY: within the struct (size and alignment checked above); all-zero is a valid
        // value of a `Words` type (plain integers).
        unsafe { core::ptr::write_volatile(p.add(i), 0) };
    }
}

/// `v`, with everything LLVM knows about it forgotten, and nothing the verifier knows about it:
/// libbpf's `barrier_var`, an `asm` that may have changed the register, here one register
/// move onto itself (the verifier copies the bounds along; an empty `asm` left two BTF line
/// records at one instruction, which the kernel refuses). So a bound tested after it stays in
/// the code and on the register that is then used. LLVM otherwise drops a test it can prove
/// from earlier ones, e.g. `n <= CAP` from `n = min(len, max)` and `max <= CAP`; but kernels
/// before 6.8 learn nothing from a comparison of two registers that are both unknown
/// (`len > max`), only from one against a constant, and refuse the helper call `n` sizes.
#[inline(always)]
#[cfg_attr(not(target_arch = "bpf"), allow(unused_mut))]
pub fn forget(mut v: u64) -> u64 {
    // SAFETY: one register-to-itself move; it touches no memory and no other register.
    // (BPF syntax: on the host, where this crate builds to an empty program, nothing.)
    #[cfg(target_arch = "bpf")]
    unsafe {
        core::arch::asm!("{0} = {0}", inout(reg) v, options(nomem, nostack, preserves_flags))
    };
    v
}
