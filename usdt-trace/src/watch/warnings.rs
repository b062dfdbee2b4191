//! The end of a run: its summary, and the warnings for what the summary line alone does not say (limits that dropped
//! spans, keys counted as "other" or "unkeyed", lost and unwritten records, a detach still
//! going on), printed on stderr once tracing has ended. Apart from the driver because each new
//! limit adds a warning here and nothing to the run loop.

use super::reader::Reader;
use super::{WatchConfig, WatchError};
use crate::output::{self, Summary};
use crate::tracer::{AggCounters, Tracer};
use crate::util::clock::monotonic_ns;

/// What the summary line alone does not say, on stderr once tracing has ended: limits that
/// dropped spans, keys counted as "other", lost and unwritten records, a detach still going on.
pub(crate) fn end_warnings(
    cfg: &WatchConfig,
    summary: &Summary,
    ac: &crate::tracer::AggCounters,
    out_lost: u64,
    unwritten: u64,
    detach: &crate::tracer::Detach,
    probes: &[String],
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
            "warning: --perfetto: {} wait slices dropped so spans were kept: the reader fell behind and the ring buffer was half full, the half waits may use: those off-CPU intervals are missing from the trace (their spans' time split still counts them; try a larger --ring-kib)",
            summary.waits_lost
        );
    }
    if summary.waits_left_out > 0 {
        eprintln!(
            "warning: --perfetto: {} off-CPU intervals left out of the trace past --perfetto-max-waits {} (their spans' time split still counts them; the trace marks where its wait slices stop)",
            summary.waits_left_out, cfg.perfetto_max_waits
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
    if let Some(h) = unmatched_ends_hint(summary.spans, summary.unmatched_end, probes) {
        eprintln!("{h}");
    }
    if let crate::tracer::Detach::Background { sites, pid } = *detach {
        eprintln!(
            "Detaching {sites} probe sites in the background (helper PID {pid}): the kernel takes about 0.1 s per site"
        );
    }
}

/// When most span ends had no start (`5 spans ... 10605 unmatched ends`), one line saying why
/// that happens and what to do; `probes` are the traced probes as `provider:name`.
pub(crate) fn unmatched_ends_hint(
    spans: u64,
    unmatched_end: u64,
    probes: &[String],
) -> Option<String> {
    // More than half of the ends: a few in-progress calls at attach are not worth a line.
    if unmatched_end <= spans {
        return None;
    }
    let traced = |p: &str| probes.iter().any(|q| q == p);
    // Measured on python3.11 (docs/reference.md): its function__entry fires for
    // Python-to-Python calls only while `line` is traced, function__return for every return.
    let python = if traced("python:function__entry") && !traced("python:line") {
        "; python's function__entry fires for Python-to-Python calls only while python:line is traced too: add the pattern 'line' (the interpreter runs much slower), or count first with --count"
    } else {
        ""
    };
    Some(format!(
        "hint: {unmatched_end} of {} span ends had no start: calls already in progress when the probes attached end without one (with -p, start tracing before the work, or run it with -c), and so does every end whose start probe did not fire{python}",
        spans + unmatched_end
    ))
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
        waits_left_out: reader.waits.left_out + c.waits_capped,
        stacks_failed: reader.stacks.as_ref().map_or(0, |s| s.symbolizer.failed),
        frames_unnamed: reader.stacks.as_ref().map_or(0, |s| s.symbolizer.unnamed),
        hits: reader.agg.hits,
        by_other: ac.by_other + ac.count_other,
        by_unkeyed: ac.by_unkeyed + ac.count_unkeyed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmatched_ends_that_dominate_get_one_line_of_why() {
        let probes = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(unmatched_ends_hint(10, 3, &[]), None);
        assert_eq!(unmatched_ends_hint(5, 5, &[]), None);
        let h = unmatched_ends_hint(2, 3, &probes(&["p:a__start", "p:a__end"])).unwrap();
        assert!(
            h.starts_with("hint: 3 of 5 span ends had no start: calls already in progress"),
            "{h}"
        );
        assert!(!h.contains("python"), "{h}");
        assert!(!h.contains('\n'), "{h}");
        let py = probes(&["python:function__entry", "python:function__return"]);
        let h = unmatched_ends_hint(5, 10605, &py).unwrap();
        assert!(
            h.starts_with("hint: 10605 of 10610 span ends had no start"),
            "{h}"
        );
        assert!(h.contains("add the pattern 'line'"), "{h}");
        let mut with_line = py.clone();
        with_line.push("python:line".into());
        assert!(!unmatched_ends_hint(5, 10605, &with_line)
            .unwrap()
            .contains("python"));
    }
}
