//! Kernel-side filters, applied where a record is about to be made.
//!
//! Each decision is a BPF subprogram (`inline(never)`) returning a verdict: the uprobe program
//! is close to the verifier's budget, and a comparison inlined at the record points refines
//! the ranges the verifier tracks on every path there, so it explores many more states. Behind
//! a call, the caller only branches on a fresh 0/1.

use usdt_trace_common::{Config, CNT_BELOW_MIN};

use crate::maps::count;

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
