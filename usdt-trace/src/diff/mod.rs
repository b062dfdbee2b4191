//! `usdt-trace diff BEFORE AFTER`: two runs' NDJSON, per span name: how the mean and p99
//! changed, which parts of the time split explain the change of the mean, and a verdict that
//! names the dominant cause (CPU contention, more work, more I/O, waiting, ...).
//!
//! Pure: reads two files, writes text or NDJSON; `watch --baseline FILE` compares its live
//! run with a file through the same code ([`Run`] collects a run's spans from either source,
//! [`compare_runs`] compares the summaries, [`to_text`] and [`to_json`] write them). Only `{"type":"span"}` lines count; the
//! split comes from their `oncpu_ns`, `steal_ns`, `runq_ns`, `sleep_ns`, `io_ns` and
//! `idle_ns` fields, which add up to `duration_ns` (see the README, "Where did the time
//! go?"; a run recorded before steal was split off has no `steal_ns`: 0), and what the
//! sleep and io waited on from their `waits` (lock, net, timer within sleep; disk within io):
//! when one kind explains at least half of the part that grew, the verdict names it (lock
//! contention, the network, timers, more I/O or a busier disk).
//!
//! A change is significant when the mean moved by 5% and either the means' test or the rank
//! test (`rank.rs`, Mann–Whitney) says it is beyond the noise; the verdict (`verdict.rs`)
//! weighs each cause with what came with it (an I/O wait's syscall and wakeup).
//!
//! The explanation uses only spans that have a split (a span that crossed threads without
//! poll markers has none): their mean parts add up to their mean duration, so the part deltas
//! add up to the change of that mean exactly. When some spans lack a split the report says
//! how many, instead of spreading the difference over parts it cannot know.

mod compare;
mod rank;
mod read;
mod render;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_robust;
mod verdict;

#[cfg(test)]
pub use compare::Comparison;
pub use compare::{compare_runs, Run, SpanSample};
pub use read::{read_run_file, Baseline};
pub use render::{to_text, write_comparison};
#[cfg(test)]
pub use {read::read_run, render::to_json};

use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a JSON object: {msg}")]
    Parse {
        path: PathBuf,
        line: usize,
        msg: String,
    },
    #[error("{path}:{line}: a line longer than {}: not a run `usdt-trace watch --json` wrote", read::size_words(*max))]
    LineTooLong {
        path: PathBuf,
        line: usize,
        max: usize,
    },
    #[error("{path}:{line}: more than {max} span names: not runs `usdt-trace watch --json` wrote")]
    TooManyNames {
        path: PathBuf,
        line: usize,
        max: usize,
    },
    #[error("{path}:{line}: span line without a numeric duration_ns")]
    NoDuration { path: PathBuf, line: usize },
    #[error("{path}: no span lines (record with `usdt-trace watch --json`)")]
    NoSpans { path: PathBuf },
    #[error("{path}: not a regular file")]
    NotFile { path: PathBuf },
    #[error("writing the report: {0}")]
    Write(#[from] std::io::Error),
}

impl DiffError {
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, DiffError::Write(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// `usdt-trace diff`: read both files, write the report.
pub fn run(before: &Path, after: &Path, json: bool, out: &mut impl Write) -> Result<(), DiffError> {
    let cmp = compare_runs(read_run_file(before)?, read_run_file(after)?);
    for c in &cmp {
        write_comparison(c, json, out)?;
    }
    out.flush()?;
    Ok(())
}
