//! The end of a run: its summary, and the warnings for what the summary line alone does not say (limits that dropped
//! spans, keys counted as "other" or "unkeyed", lost and unwritten records, a detach still
//! going on), printed on stderr once tracing has ended. Apart from the driver because each new
//! limit adds a warning here and nothing to the run loop.

use super::clock::monotonic_ns;
use super::reader::Reader;
use super::{WatchConfig, WatchError};
use crate::output::{self, Summary};
use crate::tracer::{AggCounters, Tracer};

/// What the summary line alone does not say, on stderr once tracing has ended: limits that
/// dropped spans, keys counted as "other", lost and unwritten records, a detach still going on.
pub(crate) fn end_warnings(
    cfg: &WatchConfig,
    summary: &Summary,
    ac: &crate::tracer::AggCounters,
    out_lost: u64,
    unwritten: u64,
    detach: &crate::tracer::Detach,
) {
    for w in summary.dropped.warnings(cfg.max_threads, cfg.max_open_ids) {
        eprintln!("{w}");
    }
    if summary.strings_dropped > 0 {
        eprintln!(
            "warning: --str: {} spans are recorded without their start strings: the kernel could not keep them until the end (too many open at once, or no memory at hand)",
            summary.strings_dropped
        );
    }
    for (n, what) in [(ac.by_other, "spans"), (ac.count_other, "hits")] {
        if n > 0 {
            eprintln!(
                "warning: --by: {n} {what} had keys beyond --max-keys {} and were counted as \"other\"; try a larger --max-keys",
                cfg.agg.max_keys
            );
        }
    }
    if summary.strings_lost > 0 {
        eprintln!(
            "warning: --str: {} strings records were lost with the ring buffer full; their spans and events are marked \"strs_lost\" (try a larger --ring-kib)",
            summary.strings_lost
        );
    }
    if summary.waits_lost > 0 {
        eprintln!(
            "warning: --perfetto: {} off-CPU intervals were lost with the ring buffer full: their wait slices are missing from the trace (their spans' time split still counts them; try a larger --ring-kib)",
            summary.waits_lost
        );
    }
    for (n, what) in [(ac.by_unkeyed, "spans"), (ac.count_unkeyed, "hits")] {
        if n > 0 {
            eprintln!(
                "warning: --by: {n} {what} are counted as \"unkeyed\": the kernel had no memory at hand for their new keys, and its reserve of {} keys was full",
                usdt_trace_common::agg::SPILL_KEYS
            );
        }
    }
    // Exact, but worth knowing: a run that fills the reserve gets "unkeyed" rows.
    let spilled = ac.by_spilled + ac.count_spilled;
    if spilled > 0 {
        eprintln!(
            "note: --by: {spilled} keys are kept in the kernel's reserve map (room for {}): it had no memory at hand when they were new; their counts are exact",
            usdt_trace_common::agg::SPILL_KEYS
        );
    }
    if summary.lost > 0 {
        let ring = summary.lost - out_lost;
        let mut why = Vec::new();
        if ring > 0 {
            why.push(format!(
                "{ring} with the ring buffer full: try a larger --ring-kib"
            ));
        }
        if out_lost > 0 {
            why.push(format!(
                "{out_lost} because the output's reader did not keep up"
            ));
        }
        eprintln!(
            "warning: {} records were lost ({})",
            summary.lost,
            why.join("; ")
        );
    }
    if unwritten > 0 {
        eprintln!(
            "warning: {unwritten} more records, the summary among them, could not be written to stdout (its reader stopped reading)"
        );
    }
    if let crate::tracer::Detach::Background { sites, pid } = *detach {
        eprintln!(
            "Detaching {sites} probe sites in the background (helper PID {pid}): the kernel takes about 0.1 s per site"
        );
    }
}

/// The run's summary: the kernel's counters, the reader's, and what the output queue dropped
/// (`out_lost`), at the end of a run that started at `t0`.
pub(super) fn summarize(
    tracer: &Tracer,
    reader: &Reader,
    ac: &AggCounters,
    out_lost: u64,
    t0: u64,
) -> Result<Summary, WatchError> {
    let c = tracer.counters()?;
    let open = tracer.open_spans().unwrap_or(0);
    // Records the output queue dropped so far (`out_lost`) are lost like those the ring had
    // no room for: printed + lost == hits holds for what the reader sees.
    Ok(Summary {
        events: c.events,
        spans: c.spans,
        lost: c.lost + reader.bad_records + out_lost,
        unmatched: c.unmatched_start + open,
        unmatched_end: c.unmatched_end,
        duration_ns: monotonic_ns().saturating_sub(t0),
        dropped: output::Dropped {
            threads_full: c.threads_full,
            id_spans_full: c.id_full,
            depth: c.depth,
            kernel_skipped: tracer.missed_hits().unwrap_or(0),
        },
        filtered: c.below_min + c.filter_rejected,
        strings_dropped: c.strs_dropped,
        strings_lost: c.strs_lost,
        waits_lost: c.waits_lost,
        stacks_failed: reader.stacks.as_ref().map_or(0, |s| s.symbolizer.failed),
        frames_unnamed: reader.stacks.as_ref().map_or(0, |s| s.symbolizer.unnamed),
        hits: reader.agg.hits,
        by_other: ac.by_other + ac.count_other,
        by_unkeyed: ac.by_unkeyed + ac.count_unkeyed,
    })
}
