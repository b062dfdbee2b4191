//! `--by`, `--count` and `--top`: what the kernel aggregates (`usdt-trace-ebpf/src/agg.rs`),
//! set up from the plan and read back into tables, in text and JSON.   (pure)
//!
//! The kernel keys on raw values (an argument word, a string's bytes, a site cookie); here
//! they become what the user named: cookies of one probe merge into its `provider:name`,
//! numbers print signed when the argument is, and rows sort by count, largest first.
//!
//! - [`key`]: `--by KEY[,KEY...]` parsed and planned (which site supplies each field), and a
//!   kernel key turned back into its printed value;
//! - [`tables`]: the kernel's maps read back, grouped per span name or probe, interval deltas;
//! - [`render`]: tables as text and JSON lines;
//! - [`AggBlock`]: one block of them (an interval's, or the run's), handed to every sink, each
//!   of which renders it its own way (the text and JSON sinks through [`render`]).

pub mod high_rate;
pub mod key;
pub mod render;
pub mod tables;
#[cfg(test)]
mod tests;

pub use high_rate::{high_rate_probes, high_rate_warning};
pub use key::{AggError, By, Key, KeyPlan, KeyVal, NO_STRING_LABEL};
pub use tables::{by_tables, count_table, ByHists, Counts, KeyTable, ProbeCount, TopN};

use crate::plan::Plan;
use usdt_trace_common::Hist;

/// Interval bounds of a block: (start, end) monotonic ns, and whether it is the whole run;
/// `None` without `--interval`.
pub type Block = Option<((u64, u64), bool)>;

/// One block of aggregates: what `--by`, `--count` and `--top` hold at an interval or at the
/// end of the run, grouped but not rendered. Each sink decides what to write for it.
pub struct AggBlock<'a> {
    pub plan: &'a Plan,
    /// `--by`, when given.
    pub key: Option<&'a KeyPlan>,
    /// `--max-keys`, which the "other" rows name.
    pub max_keys: u32,
    pub bounds: Block,
    /// Monotonic ns that text times count from.
    pub t0: u64,
    /// `--hist --by`: per span name, a row per key.
    pub by: Option<Vec<KeyTable<Hist>>>,
    /// `--count`: per probe, and per key.
    pub counts: Option<Vec<ProbeCount>>,
    /// `--top`: the slowest spans.
    pub top: Option<&'a TopN>,
}
