//! `--stack`: the user stack where a recorded span ended.

use aya_ebpf::{
    bindings::{BPF_F_USER_STACK, BPF_RB_NO_WAKEUP},
    cty::c_void,
    helpers::{bpf_get_current_pid_tgid, generated::bpf_get_stack},
};
use usdt_trace_common::{RecordKind, StackRecord};

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
