//! Kernel-side filters, applied where a record is about to be made.
//!
//! Each decision is a BPF subprogram (`inline(never)`) returning a verdict: the uprobe program
//! is close to the verifier's budget, and a comparison inlined at the record points refines
//! the ranges the verifier tracks on every path there, so it explores many more states. Behind
//! a call, the caller only branches on a fresh 0/1.

use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::map, maps::Array};
use usdt_trace_common::{
    Config, FilterInput, FilterProg, CFG_FILTER, CNT_BELOW_MIN, CNT_FILTER_REJECT, MAX_ARGS,
};

use crate::args::ArgWords;
use crate::maps::{count, current_comm_into, CONFIG};

/// The compiled `--filter` (`usdt_trace::filter`), at index 0.
#[map]
pub static FILTER: Array<FilterProg> = Array::with_max_entries(1, 0);
/// Per site (cookie), which filter terms name its probe. User space sizes it like SITES.
#[map]
pub static FILTER_SITES: Array<u32> = Array::with_max_entries(1, 0);

/// `--min`: whether a span of `dur` ns is too short to record (and counts it if so).
#[inline(never)]
pub fn below_min(cfg: &Config, dur: u64) -> bool {
    if dur < cfg.min_ns {
        count(CNT_BELOW_MIN);
        true
    } else {
        false
    }
}

/// `--filter`: whether the record of a span started at `site` with arguments `args` (or of
/// the event at `site`) is rejected.
#[inline(always)]
pub fn rejects(site: u32, args: &[u64; MAX_ARGS]) -> bool {
    usdt_filter_rejects(site, args as *const _ as *const ArgWords) != 0
}

/// A global BPF function (exported, not inlined): the verifier checks it once, on its own,
/// instead of once per path that reaches a record point. That is what lets an 8-term loop into
/// a uprobe program already close to the verifier's budget. 1 when rejected (and counted).
#[no_mangle]
#[inline(never)]
pub extern "C" fn usdt_filter_rejects(site: u32, args: *const ArgWords) -> u32 {
    // A global function's pointer may be NULL as far as the verifier knows.
    if args.is_null() {
        return 0;
    }
    // SAFETY: non-null, and the verifier checked at the call that it points to an ArgWords.
    let args = unsafe { &(*args).args };
    let Some(cfg) = CONFIG.get(0) else {
        return 0;
    };
    if cfg.flags & CFG_FILTER == 0 {
        return 0;
    }
    let Some(prog) = FILTER.get(0) else {
        return 0;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    // Left uninitialised for the helper to fill (it pads the name, and zeroes the buffer on
    // failure): zeroing it first was a call of a byte-loop `memset` subprogram per span.
    let mut comm = core::mem::MaybeUninit::<[u8; 16]>::uninit();
    // SAFETY: the helper writes all 16 bytes, whatever happens.
    let comm = unsafe {
        current_comm_into(&mut *comm.as_mut_ptr());
        comm.assume_init_ref()
    };
    let input = FilterInput {
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        comm,
        args,
        end_args: None,
        start_mask: FILTER_SITES.get(site).copied().unwrap_or(0),
        end_mask: 0,
    };
    if prog.eval(&input) {
        0
    } else {
        count(CNT_FILTER_REJECT);
        1
    }
}
