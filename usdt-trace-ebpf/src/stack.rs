//! `--stack`: the user stack where a recorded span ended: walked here by frame pointers
//! ([`emit`]), or copied with the registers for user space to unwind ([`emit_copy`]).

use aya_ebpf::{
    bindings::{BPF_F_USER_STACK, BPF_RB_NO_WAKEUP},
    cty::c_void,
    helpers::{
        bpf_get_current_pid_tgid,
        generated::{bpf_get_stack, bpf_probe_read_user},
    },
};
use usdt_trace_common::{
    regs, RecordKind, StackCopyRecord, StackRecord, SC_REG_FP, SC_REG_IP, SC_REG_LR, SC_REG_SP,
    STACK_COPY_BYTES, STACK_COPY_CHUNK,
};

use crate::maps::EVENTS;

/// Emits the [`StackRecord`] of the span about to be recorded (end site `site`, ended at
/// `now`). A BPF subprogram, not inlined: the uprobe program is close to the verifier's budget,
/// and behind the call the caller's paths gain nothing but the call itself.
///
/// A failed walk is still emitted, with the error in `len`: user space reports it rather than
/// show no stack as if there were none. Without room in the ring, user space finds no stack
/// before the span, says the stack was lost and counts it (`stacks_failed`): not in `lost`,
/// which counts spans and events, so that printed + lost adds up to what the program made.
#[inline(never)]
pub fn emit(ctx: *mut c_void, site: u32, now: u64) {
    let Some(mut entry) = EVENTS.reserve::<StackRecord>(0) else {
        return;
    };
    // SAFETY: a StackRecord-sized, aligned reservation only we write; every field user space
    // reads is written below (the helper fills or zeroes all of `ips`).
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    let pid_tgid = bpf_get_current_pid_tgid();
    rec.hdr.kind = RecordKind::STACK;
    rec.hdr.site = site;
    rec.hdr.pid = (pid_tgid >> 32) as u32;
    rec.hdr.tid = pid_tgid as u32;
    rec.hdr.ts_ns = now;
    usdt_trace_common::zero_comm(&mut rec.hdr.comm);
    // SAFETY: `ctx` is the probe's context, passed down unchanged; the buffer is the record's
    // own `ips`, and its size is passed.
    rec.len = unsafe {
        bpf_get_stack(
            ctx,
            rec.ips.as_mut_ptr() as *mut c_void,
            core::mem::size_of_val(&rec.ips) as u32,
            BPF_F_USER_STACK as u64,
        )
    };
    // The span record reserved right after wakes the reader (or its timer does).
    entry.submit(BPF_RB_NO_WAKEUP as u64);
}

/// The `pt_regs` words of ip, sp, fp and lr (x86_64 has no link register: its word is read
/// but stored as 0).
#[cfg(bpf_target_arch = "aarch64")]
const REG_WORDS: [usize; 4] = [
    regs::aarch64::PC as usize,
    regs::aarch64::SP as usize,
    regs::aarch64::FP as usize,
    regs::aarch64::LR as usize,
];
#[cfg(not(bpf_target_arch = "aarch64"))]
const REG_WORDS: [usize; 4] = [
    regs::x86_64::IP as usize,
    regs::x86_64::SP as usize,
    regs::x86_64::RBP as usize,
    regs::x86_64::IP as usize,
];

const _: () = assert!(SC_REG_IP == 0 && SC_REG_SP == 1 && SC_REG_FP == 2 && SC_REG_LR == 3);

/// Whole chunks copied after the first, partial one (which ends at a page boundary).
const MORE_CHUNKS: usize = STACK_COPY_BYTES / STACK_COPY_CHUNK - 1;

/// `--stack=dwarf`: emits the [`StackCopyRecord`] of the span about to be recorded: the
/// probe's ip, sp, fp (and lr) and the stack from sp up, copied page by page so that a stack
/// whose mapping ends within the window still gives what it has (`bpf_probe_read_user` fails
/// whole on any unmapped byte). As [`emit`], a BPF subprogram; a lost record is counted by user
/// space as a lost stack.
#[inline(never)]
pub fn emit_copy(ctx: *mut c_void, site: u32, now: u64) {
    let Some(mut entry) = EVENTS.reserve::<StackCopyRecord>(0) else {
        return;
    };
    // SAFETY: a StackCopyRecord-sized, aligned reservation only we write; every field user
    // space reads is written below (`stack` up to `len`).
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    let pid_tgid = bpf_get_current_pid_tgid();
    rec.hdr.kind = RecordKind::STACK_COPY;
    rec.hdr.site = site;
    rec.hdr.pid = (pid_tgid >> 32) as u32;
    rec.hdr.tid = pid_tgid as u32;
    rec.hdr.ts_ns = now;
    usdt_trace_common::zero_comm(&mut rec.hdr.comm);
    let words = ctx as *const u64;
    for (i, w) in REG_WORDS.iter().enumerate() {
        // SAFETY: word `w` of the probe's pt_regs, inside it (the regs tables' indices).
        rec.regs[i] = unsafe { core::ptr::read_volatile(words.add(*w)) };
    }
    if cfg!(not(bpf_target_arch = "aarch64")) {
        rec.regs[SC_REG_LR] = 0;
    }
    let sp = rec.regs[SC_REG_SP];
    rec._pad = 0;
    // The first chunk runs from sp to the next page boundary: 1..=CHUNK bytes.
    let first = STACK_COPY_CHUNK - (sp as usize & (STACK_COPY_CHUNK - 1));
    if first == 0 || first > STACK_COPY_CHUNK {
        rec.len = 0;
        entry.submit(BPF_RB_NO_WAKEUP as u64);
        return;
    }
    let dst = rec.stack.as_mut_ptr();
    // SAFETY: `first` <= CHUNK bytes into the record's own `stack`, which is larger.
    let r = unsafe { bpf_probe_read_user(dst as *mut c_void, first as u32, sp as *const c_void) };
    let mut len = 0;
    if r == 0 {
        len = first;
        for i in 0..MORE_CHUNKS {
            let off = first + i * STACK_COPY_CHUNK;
            if off + STACK_COPY_CHUNK > STACK_COPY_BYTES {
                break;
            }
            // SAFETY: off + CHUNK <= STACK_COPY_BYTES (checked just above): inside `stack`.
            let r = unsafe {
                bpf_probe_read_user(
                    dst.add(off) as *mut c_void,
                    STACK_COPY_CHUNK as u32,
                    (sp + off as u64) as *const c_void,
                )
            };
            if r != 0 {
                break;
            }
            len = off + STACK_COPY_CHUNK;
        }
    }
    rec.len = len as u32;
    entry.submit(BPF_RB_NO_WAKEUP as u64);
}
