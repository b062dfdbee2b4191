//! The reading loop's state and work: [`Reader`] takes each ring-buffer batch, joins strings
//! and stacks to their records, resolves them through the plan and hands them to the sinks,
//! and at intervals and at the end reads back the kernel's histograms and aggregates (`--by`,
//! `--count`, `--top`, kept between blocks in [`Agg`]) and answers `--prometheus` scrapes.
//! Apart from the driver so that `run` only sets the stages up, loops and tears them down.

use super::late_strs::{read_late, LATE_READS_PER_BATCH};
use super::stacks::Stacks;
use super::{PromConfig, WatchConfig, WatchError};
use crate::output::sink::{Fanout, Hists};
use crate::output::{self, Sink, View};
use crate::plan::Plan;
use crate::tracer::Tracer;
use crate::util::clock::{clock_ns, monotonic_ns};
use std::time::Duration;
use usdt_trace_common::{Hist, WaitSums, HIST_COMPONENTS, STRS_RECORD_SENT};

/// Reads records until told to stop, then detaches and drains what is left.
pub(crate) struct Reader {
    /// Grows while tracing when probes are attached late ([`crate::watch::late`]).
    pub(crate) plan: Plan,
    pub(crate) sinks: Fanout,
    /// `--str-max`, for strings read late.
    pub(crate) str_max: usize,
    /// Strings records waiting for their event or span.
    pub(crate) strs: crate::plan::record::StrJoin,
    /// Records that did not decode or named no known site.
    pub(crate) bad_records: u64,
    /// With `--interval`: the cumulative histograms and wait sums at the last block, and when
    /// it was.
    pub(crate) last: Option<(Vec<[Hist; HIST_COMPONENTS]>, Vec<WaitSums>, u64)>,
    pub(crate) t0: u64,
    /// `--stack`: names the stacks, and holds each until its span's record comes.
    pub(crate) stacks: Option<Stacks>,
    pub(crate) agg: Agg,
    /// `--baseline`: this run's spans, per span name, for the comparison at the end.
    pub(crate) live: Option<crate::diff::Run>,
    /// `--perfetto-max-waits`: the off-CPU intervals handed to the sinks, and those past it.
    pub(crate) waits: output::waitcap::WaitCap,
}

/// User-space state of `--by`, `--count` and `--top`: the last cumulative snapshots (for
/// interval deltas) and the top-N heaps.
pub(crate) struct Agg {
    hist: bool,
    count: bool,
    key: Option<crate::output::agg::KeyPlan>,
    max_keys: u32,
    /// The whole run's N slowest spans, and the current interval's (with `--interval`).
    top: Option<crate::output::agg::TopN>,
    top_interval: Option<crate::output::agg::TopN>,
    /// The minimum last pushed into the kernel.
    top_min: u64,
    last_by: crate::output::agg::ByHists,
    last_counts: crate::output::agg::Counts,
    last_t: u64,
    /// `--count`: hits counted over the run (for the summary).
    pub(crate) hits: u64,
}

impl Agg {
    /// Nothing seen yet: `t0` is when tracing started, the first interval's start.
    pub(crate) fn new(cfg: &WatchConfig, key: Option<crate::output::agg::KeyPlan>, t0: u64) -> Agg {
        Agg {
            hist: cfg.hist,
            count: cfg.agg.count,
            key,
            max_keys: cfg.agg.max_keys,
            top: cfg.agg.top.map(crate::output::agg::TopN::new),
            top_interval: cfg
                .agg
                .top
                .filter(|_| cfg.interval.is_some())
                .map(crate::output::agg::TopN::new),
            top_min: 0,
            last_by: Default::default(),
            last_counts: Default::default(),
            last_t: t0,
            hits: 0,
        }
    }
}

impl Reader {
    pub(crate) fn batch(
        &mut self,
        tracer: &mut Tracer,
        timeout: Duration,
    ) -> Result<usize, WatchError> {
        let mut res = Ok(());
        let mut late_budget = LATE_READS_PER_BATCH;
        let mut name = String::new();
        let n = tracer.poll(timeout, |bytes| {
            // An event's or span's strings (and a span's stack) come just before it: held until
            // it comes.
            let held;
            let rec = match output::decode(bytes) {
                Some(output::Record::Strs(r)) => {
                    self.strs.hold(r);
                    return;
                }
                Some(output::Record::Stack(st)) => {
                    if let Some(stacks) = self.stacks.as_mut() {
                        stacks.add(st);
                    }
                    return;
                }
                Some(output::Record::StackCopy(st)) => {
                    if let Some(stacks) = self.stacks.as_mut() {
                        stacks.add_copy(st);
                    }
                    return;
                }
                // An off-CPU interval: no site to resolve; the sinks that draw them do.
                Some(output::Record::Wait(w)) => {
                    if self.waits.admit() && res.is_ok() {
                        res = self.sinks.wait(w);
                    }
                    return;
                }
                // Only a record whose strings went (`STRS_RECORD_SENT`) has any to join.
                Some(output::Record::Event(r, _)) if r.has_strs == STRS_RECORD_SENT => {
                    held = self.strs.take(&r.hdr);
                    Some(output::Record::Event(r, held.as_deref().map(|h| &h.strs)))
                }
                Some(output::Record::Span(r, _)) if r.has_strs == STRS_RECORD_SENT => {
                    held = self.strs.take(&r.hdr);
                    Some(output::Record::Span(r, held.as_deref().map(|h| &h.strs)))
                }
                other => other,
            };
            let view = rec.and_then(|r| self.plan.resolve(r));
            let Some(mut v) = view else {
                self.bad_records += 1;
                return;
            };
            if res.is_err() {
                return;
            }
            let stack_of_span = match (&v, self.stacks.as_mut()) {
                (View::Span { rec, .. }, Some(stacks)) => {
                    Some(stacks.take(rec.hdr.tid, rec.hdr.ts_ns))
                }
                _ => None,
            };
            if let View::Span { stack, .. } = &mut v {
                *stack = stack_of_span.as_ref();
            }
            if let (Some(run), View::Span { pair, rec, .. }) = (self.live.as_mut(), &v) {
                name.clear();
                name.push_str(&pair.provider);
                name.push(':');
                name.push_str(&pair.stem);
                run.add(&name, &crate::diff::SpanSample::of_record(rec));
            }
            // `--top`: spans go to the heaps, which print at intervals and at the end; events
            // are only counted (name span probes to keep them from being sent at all).
            if let Some(top) = self.agg.top.as_mut() {
                if let View::Span { rec, .. } = v {
                    top.offer(rec);
                    if let Some(t) = self.agg.top_interval.as_mut() {
                        t.offer(rec);
                    }
                }
                return;
            }
            // Strings the kernel could not read: patch a copy of the record's strings.
            if let Some(late) = read_late(&v, self.str_max, &mut late_budget) {
                let v = match v {
                    View::Event { site, rec, .. } => View::Event {
                        site,
                        rec,
                        strs: Some(&late),
                    },
                    View::Span {
                        pair,
                        start,
                        end,
                        rec,
                        stack,
                        ..
                    } => View::Span {
                        pair,
                        start,
                        end,
                        rec,
                        strs: Some(&late),
                        stack,
                    },
                };
                res = self.sinks.record(&v);
                return;
            }
            res = self.sinks.record(&v);
        })?;
        res?;
        self.sinks.flush()?;
        self.push_top_min(tracer)?;
        if self.waits.tell_kernel() {
            tracer.cap_waits()?;
        }
        Ok(n)
    }

    /// `--top`: tells the kernel the shortest span that could still enter a heap, so shorter
    /// ones make no record at all.
    fn push_top_min(&mut self, tracer: &mut Tracer) -> Result<(), WatchError> {
        let Some(top) = &self.agg.top else {
            return Ok(());
        };
        // The interval's heap fills from empty: until then it takes every span.
        let min = match &self.agg.top_interval {
            Some(t) => t.threshold().min(top.threshold()),
            None => top.threshold(),
        };
        if min != self.agg.top_min {
            tracer.set_top_min(min)?;
            self.agg.top_min = min;
        }
        Ok(())
    }

    /// The aggregates (`--by`, `--count`, `--top`) of one block: an interval's deltas, or
    /// the whole run's totals (`total`).
    fn agg_block(
        &mut self,
        tracer: &Tracer,
        now: u64,
        total: bool,
        intervals: bool,
    ) -> Result<(), WatchError> {
        use crate::output::agg;
        let plan = &self.plan;
        let block =
            intervals.then_some(((if total { self.t0 } else { self.agg.last_t }, now), total));
        let mut by = None;
        if self.agg.hist {
            if let Some(kp) = &self.agg.key {
                let snap = tracer.by_hists(plan.pairs.len())?;
                let shown = if total {
                    snap.clone()
                } else {
                    snap.since(&self.agg.last_by)
                };
                by = Some(agg::by_tables(plan, kp, &shown));
                if !total {
                    self.agg.last_by = snap;
                }
            }
        }
        let mut counts = None;
        if self.agg.count {
            let snap = tracer.counts(plan.sites.len())?;
            if total {
                self.agg.hits = snap.sites.iter().sum();
            }
            let shown = if total {
                snap.clone()
            } else {
                snap.since(&self.agg.last_counts)
            };
            counts = Some(agg::count_table(plan, self.agg.key.as_ref(), &shown));
            if !total {
                self.agg.last_counts = snap;
            }
        }
        let top = if total {
            self.agg.top.as_ref()
        } else {
            self.agg.top_interval.as_ref()
        };
        self.sinks.block(&agg::AggBlock {
            plan,
            key: self.agg.key.as_ref(),
            max_keys: self.agg.max_keys,
            bounds: block,
            t0: self.t0,
            by,
            counts,
            top,
        })?;
        if !total {
            if let Some(t) = self.agg.top_interval.as_mut() {
                *t = agg::TopN::new(t.n);
            }
            self.agg.last_t = now;
        }
        Ok(())
    }

    /// One `--interval` block: what the kernel counted since the last one.
    pub(crate) fn interval(&mut self, tracer: &Tracer) -> Result<(), WatchError> {
        let now = monotonic_ns();
        if !self.agg.hist {
            return self.agg_block(tracer, now, false, true);
        }
        let hists = tracer.hists(self.plan.pairs.len())?;
        let waits = tracer.wait_sums(self.plan.pairs.len())?;
        let (before, waits_before, since) = self.last.take().unwrap_or_else(|| {
            let zero = vec![[Hist::default(); HIST_COMPONENTS]; hists.len()];
            (zero, vec![WaitSums::default(); waits.len()], self.t0)
        });
        let delta: Vec<_> = hists
            .iter()
            .zip(before.iter())
            .map(|(n, b)| output::hist::delta(n, b))
            .collect();
        let waits_delta: Vec<_> = waits
            .iter()
            .zip(waits_before.iter())
            .map(|(n, b)| n.since(b))
            .collect();
        self.sinks.hists(&Hists {
            pairs: &self.plan.pairs,
            hists: &delta,
            waits: &waits_delta,
            bounds: Some((since, now)),
            total: false,
        })?;
        self.last = Some((hists, waits, now));
        self.agg_block(tracer, now, false, true)
    }

    /// What one `--prometheus` scrape exports: the kernel's cumulative histograms and
    /// counters, read now (never reset, so nothing exported goes backwards). `out_lost`: the
    /// records the output queue dropped so far.
    pub(crate) fn prom_snapshot(
        &self,
        tracer: &Tracer,
        out_lost: u64,
        ring_bytes: u32,
    ) -> Result<output::prometheus::Snapshot, WatchError> {
        use output::prometheus::{ByKeys, Counters, Health, Snapshot};
        let n = self.plan.pairs.len();
        let hists = tracer.hists(n)?;
        let waits = tracer.wait_sums(n)?;
        let by = match &self.agg.key {
            Some(kp) => {
                let b = tracer.by_hists(n)?;
                Some(ByKeys {
                    by: kp.by.text.clone(),
                    keys: b
                        .keys
                        .iter()
                        .map(|(k, h)| (k.id as usize, kp.value(&self.plan, k), *h))
                        .collect(),
                    other: b.other,
                    unkeyed: b.unkeyed,
                    max_keys: self.agg.max_keys,
                })
            }
            None => None,
        };
        let c = tracer.counters()?;
        let ac = tracer.agg_counters()?;
        Ok(Snapshot {
            pairs: self.plan.pairs.iter().cloned().zip(hists).collect(),
            waits,
            by,
            counters: Counters {
                events: c.events,
                spans: c.spans,
                records_lost: c.lost + self.bad_records + out_lost,
                unmatched_ends: c.unmatched_end,
                dropped_threads_full: c.threads_full,
                dropped_open_ids_full: c.id_full,
                dropped_depth: c.depth,
                hits_missed: tracer.missed_hits().unwrap_or(0),
                strings_dropped: c.strs_dropped,
                keys_other: ac.by_other,
                keys_unkeyed: ac.by_unkeyed,
            },
            health: Health {
                sites: tracer.attached_sites() as u64,
                objects: tracer.sites_by_object(),
                span_names: n as u64,
                ring_bytes: ring_bytes.into(),
                cpu_ns: clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID),
            },
        })
    }

    /// Answers the `--prometheus` scrapes waiting, between batches.
    pub(crate) fn serve_scrapes(
        &self,
        server: &output::prometheus::serve::Server,
        cfg: &PromConfig,
        bound: &mut output::prometheus::KeyBound,
        tracer: &Tracer,
        out_lost: u64,
        ring_bytes: u32,
    ) -> Result<(), WatchError> {
        while let Some(scrape) = server.pending() {
            let mut snap = self.prom_snapshot(tracer, out_lost, ring_bytes)?;
            bound.apply(&mut snap);
            scrape.answer(output::prometheus::render(snap, cfg.per_octave));
        }
        Ok(())
    }

    /// `--baseline`: this run's spans against the baseline's, to the sinks (once, at the end).
    pub(crate) fn compare_baseline(
        &mut self,
        baseline: Option<&crate::diff::Baseline>,
    ) -> Result<(), WatchError> {
        let (Some(b), Some(run)) = (baseline, self.live.take()) else {
            return Ok(());
        };
        let comparisons = crate::diff::compare_runs(b.spans.clone(), run.summaries());
        let text: Vec<String> = comparisons.iter().map(crate::diff::to_text).collect();
        let mut json = Vec::new();
        for c in &comparisons {
            crate::diff::write_comparison(c, true, &mut json)?;
        }
        self.sinks.compared(&output::sink::Compared {
            baseline: &b.path,
            text: &text,
            json: &json,
        })?;
        Ok(())
    }

    /// The whole run's histograms, at the end.
    pub(crate) fn totals(&mut self, tracer: &Tracer, intervals: bool) -> Result<(), WatchError> {
        let now = monotonic_ns();
        if self.agg.hist {
            let hists = tracer.hists(self.plan.pairs.len())?;
            let waits = tracer.wait_sums(self.plan.pairs.len())?;
            self.sinks.hists(&Hists {
                pairs: &self.plan.pairs,
                hists: &hists,
                waits: &waits,
                bounds: intervals.then_some((self.t0, now)),
                total: true,
            })?;
        }
        self.agg_block(tracer, now, true, intervals)
    }
}
