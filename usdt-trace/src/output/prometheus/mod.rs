//! `--prometheus ADDR`: the kernel's histograms and counters as Prometheus metrics.   (pure)
//!
//! Nothing here reads the kernel: `watch` reads the maps on each scrape into a [`Snapshot`]
//! (the same cumulative reads `--hist` makes at exit), and this module renders it with the
//! `prometheus-client` crate in the classic text format. The maps are only ever read, never
//! reset, so every counter and bucket is monotonic across scrapes for as long as `watch` runs.
//!
//! Buckets: the kernel keeps 8 log-linear buckets per power of two. Each exported `le` is the
//! last nanosecond one of the kernel's buckets holds (durations are whole nanoseconds, so a
//! kernel bucket `[lo, hi)` is `le = hi - 1` exactly): a cumulative count at a kernel bound is
//! exact, with no re-binning. The set of bounds is fixed for the run (a bucket series that
//! appeared later would start mid-count and skew `rate()`), from [`LE_MIN_NS`] to
//! [`LE_MAX_NS`], at every kernel bound or every 2nd, 4th or 8th (`--prometheus-buckets`).

mod labels;
pub mod listen;
pub mod serve;
mod snapshot;
mod stream;
pub mod web;

use snapshot::merge;

pub use labels::{field_label, key_label};
pub use snapshot::{ByKeys, Counters, Health, KeyBound, Series, Snapshot};

use crate::output::PairInfo;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use usdt_trace_common::{hist_bucket, hist_bucket_range, Hist, HIST_COMPONENTS, HIST_SUB};

/// `Content-Type` of what [`render`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Lowest exported bound: the kernel bucket ending at 256 ns. Shorter spans are all counted
/// in it (the first bucket holds everything below its bound).
pub const LE_MIN_NS: u64 = 1 << 8;
/// Highest exported bound: the kernel bucket ending at 2^36 ns (68.7 s). Longer spans are
/// counted in `+Inf` only.
pub const LE_MAX_NS: u64 = 1 << 36;

/// `--prometheus-buckets`: kernel bounds exported per power of two.
pub const BUCKETS_PER_OCTAVE: [u32; 4] = [1, 2, 4, 8];

/// The exported bounds: per bound, the index of the last kernel bucket it covers and `le` in
/// seconds. Every `8 / per_octave`-th kernel bound from [`LE_MIN_NS`] to [`LE_MAX_NS`].
pub fn bounds(per_octave: u32) -> Vec<(usize, f64)> {
    let step = (HIST_SUB as u32 / per_octave.clamp(1, HIST_SUB as u32)).max(1) as usize;
    let first = hist_bucket(LE_MIN_NS) - 1;
    let last = hist_bucket(LE_MAX_NS) - 1;
    (first..=last)
        .step_by(step)
        .map(|b| {
            let (_, hi) = hist_bucket_range(b);
            (b, (hi - 1) as f64 / 1e9)
        })
        .collect()
}

/// One histogram as the encoder takes it: per exported bound, the kernel buckets counted
/// since the previous bound (the encoder accumulates them); and the total, which is the
/// `+Inf` bucket and `_count`. Both come from the same bucket array, so they always agree.
fn buckets(h: &Hist, bounds: &[(usize, f64)]) -> (Vec<(f64, u64)>, u64) {
    let mut out = Vec::with_capacity(bounds.len());
    let mut from = 0;
    for &(b, le) in bounds {
        let n: u64 = h.buckets[from..=b].iter().sum();
        out.push((le, n));
        from = b + 1;
    }
    (out, h.buckets.iter().sum())
}

/// Names of the split components (indices 1.. of a span name's histograms), as `state`.
const STATES: [&str; HIST_COMPONENTS - 1] = ["oncpu", "runq", "sleep", "io", "idle", "steal"];

fn ns_to_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

type Labels = Vec<(&'static str, String)>;

/// One definition's share of a scrape: its snapshot, its bucket resolution and the labels
/// that name it (`definition="NAME"` under `serve`; none under `watch`), put before every
/// label of its series.
#[derive(Clone, Debug)]
pub struct Part {
    pub labels: Labels,
    pub snap: Snapshot,
    /// `--prometheus-buckets`.
    pub per_octave: u32,
}

/// The exposition, built per scrape from the parts' [`Snapshot`]s (a `Collector` of the
/// crate). Every family is written once, with the series of every part under it: the text
/// format wants one HELP/TYPE per family, its series together.
#[derive(Debug)]
struct Exposition {
    parts: Vec<(Part, Vec<(usize, f64)>)>,
    /// This process's CPU time: one series, whatever the number of parts.
    cpu_ns: u64,
    /// `serve`: per definition, whether it is attached (`usdt_definition_up`).
    up: Option<Vec<(String, bool)>>,
}

fn span_labels(prefix: &Labels, p: &PairInfo) -> Labels {
    let mut l = prefix.clone();
    l.push(("provider", p.provider.clone()));
    l.push(("span", p.stem.clone()));
    l
}

/// The duration histograms of one part: per span name, or per span name and key with
/// `--by`. Merged by label set, so no series is written twice.
fn duration_series(prefix: &Labels, snap: &Snapshot) -> BTreeMap<Labels, Hist> {
    let mut out: BTreeMap<Labels, Hist> = BTreeMap::new();
    match &snap.by {
        // Every span name from the first scrape, at zero before its first span: a series
        // that appears with its first count hides that count from rate() and increase().
        None => {
            for (p, h) in &snap.pairs {
                merge(out.entry(span_labels(prefix, p)).or_default(), &h[0]);
            }
        }
        Some(by) => {
            for (i, k, h) in &by.keys {
                let Some((p, _)) = snap.pairs.get(*i) else {
                    continue;
                };
                let mut l = span_labels(prefix, p);
                l.push(("by", by.by.clone()));
                l.push(("key", key_label(k)));
                merge(out.entry(l).or_default(), h);
            }
            // A label of its own as well as the value: a real string key "other" or
            // "unkeyed" stays a series apart. Together with the keys they add up to every
            // span the kernel counted.
            for (rest, name) in [(&by.other, "other"), (&by.unkeyed, "unkeyed")] {
                for ((p, _), h) in snap.pairs.iter().zip(rest) {
                    if h.count == 0 {
                        continue;
                    }
                    let mut l = span_labels(prefix, p);
                    l.push(("by", by.by.clone()));
                    l.push(("key", name.into()));
                    l.push((name, "true".into()));
                    merge(out.entry(l).or_default(), h);
                }
            }
        }
    }
    out
}

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    rows: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for (l, v) in rows {
        m.encode_family(l)?
            .encode_counter::<NoLabelSet, _, f64>(v, None)?;
    }
    Ok(())
}

fn counter_u64(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (l, v) in rows {
        m.encode_family(l)?
            .encode_counter::<NoLabelSet, _, f64>(v, None)?;
    }
    Ok(())
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    rows: &[(Labels, i64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (l, v) in rows {
        m.encode_family(l)?.encode_gauge(v)?;
    }
    Ok(())
}

impl prometheus_client::collector::Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        {
            let mut m = enc.encode_descriptor(
                "usdt_span_duration",
                "Span durations from the kernel's histograms: each le is the last nanosecond of one of its buckets.",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            for (part, bounds) in &self.parts {
                for (l, h) in duration_series(&part.labels, &part.snap) {
                    let (b, count) = buckets(&h, bounds);
                    m.encode_family(&l)?.encode_histogram::<NoLabelSet>(
                        ns_to_s(h.sum),
                        count,
                        &b,
                        None,
                    )?;
                }
            }
        }
        // The split is kept per span name only (the kernel's per-key histograms are of the
        // duration alone). Every span name from the start, as the durations.
        let split: Vec<_> = self
            .parts
            .iter()
            .flat_map(|(part, _)| {
                part.snap
                    .pairs
                    .iter()
                    .map(move |(p, h)| (span_labels(&part.labels, p), h))
            })
            .collect();
        let mut time = Vec::new();
        for (l, h) in &split {
            for (state, x) in STATES.iter().zip(&h[1..]) {
                let mut l = l.clone();
                l.push(("state", (*state).into()));
                time.push((l, ns_to_s(x.sum)));
            }
        }
        counter(
            &mut enc,
            "usdt_span_time",
            "Time of split spans by state (oncpu, runq, sleep, io, idle, steal: the host's): per span name, the states add up to the duration of its usdt_span_split spans.",
            Some(&Unit::Seconds),
            &time,
        )?;
        let n: Vec<_> = split.iter().map(|(l, h)| (l.clone(), h[1].count)).collect();
        counter_u64(
            &mut enc,
            "usdt_span_split",
            "Spans whose time was split into states (one thread ran them, or their polls were marked).",
            &n,
        )?;
        let d: Vec<_> = split
            .iter()
            .map(|(l, h)| {
                let parts: u64 = h[1..].iter().map(|x| x.sum).sum();
                (l.clone(), ns_to_s(parts))
            })
            .collect();
        counter(
            &mut enc,
            "usdt_span_split_duration",
            "Duration of the split spans: the sum of their usdt_span_time over states.",
            Some(&Unit::Seconds),
            &d,
        )?;
        // What the sleep and io parts waited on: every kind for every span name, zero or not,
        // so that the set of series is fixed from the first scrape.
        let (mut wait_s, mut wait_n) = (Vec::new(), Vec::new());
        for (part, _) in &self.parts {
            let snap = &part.snap;
            for (i, (p, _)) in snap.pairs.iter().enumerate() {
                let w = snap.waits.get(i).copied().unwrap_or_default();
                for (kind, ns, n, _) in crate::output::wait_sum_kinds(&w) {
                    let mut l = span_labels(&part.labels, p);
                    l.push(("kind", kind.into()));
                    wait_s.push((l.clone(), ns_to_s(ns)));
                    wait_n.push((l, n));
                }
            }
        }
        counter(
            &mut enc,
            "usdt_span_wait",
            "Off-CPU time of split spans by what they waited on (lock, net, timer: part of the sleep state; disk, fault: part of io).",
            Some(&Unit::Seconds),
            &wait_s,
        )?;
        counter_u64(
            &mut enc,
            "usdt_span_waits",
            "Off-CPU waits of split spans by kind: how many began (more waits tell from longer ones).",
            &wait_n,
        )?;
        // Per family, one row per part (with the part's labels, and `reason` where it has one).
        let rows = |f: &dyn Fn(&Counters) -> u64| -> Vec<(Labels, u64)> {
            self.parts
                .iter()
                .map(|(p, _)| (p.labels.clone(), f(&p.snap.counters)))
                .collect()
        };
        let reasons = || -> Vec<(Labels, u64)> {
            let mut out = Vec::new();
            for (p, _) in &self.parts {
                let c = &p.snap.counters;
                for (r, v) in [
                    ("threads_full", c.dropped_threads_full),
                    ("open_ids_full", c.dropped_open_ids_full),
                    ("depth", c.dropped_depth),
                ] {
                    let mut l = p.labels.clone();
                    l.push(("reason", r.to_string()));
                    out.push((l, v));
                }
            }
            out
        };
        for (name, help, rows) in [
            (
                "usdt_events",
                "Events (probes that are not part of a span) the kernel counted.",
                rows(&|c| c.events),
            ),
            ("usdt_spans", "Spans the kernel closed.", rows(&|c| c.spans)),
            (
                "usdt_records_lost",
                "Records lost: ring buffer full, undecodable, or output not read in time.",
                rows(&|c| c.records_lost),
            ),
            (
                "usdt_span_ends_unmatched",
                "Span ends with no start.",
                rows(&|c| c.unmatched_ends),
            ),
            (
                "usdt_spans_dropped",
                "Span starts dropped: threads_full (--max-threads), open_ids_full (--max-open-ids), depth (nesting too deep).",
                reasons(),
            ),
            (
                "usdt_hits_missed",
                "Probe hits the kernel ran no program for (another BPF program was running on that CPU).",
                rows(&|c| c.hits_missed),
            ),
            (
                "usdt_strings_dropped",
                "Span starts whose --str strings could not be kept until their end.",
                rows(&|c| c.strings_dropped),
            ),
        ] {
            counter_u64(&mut enc, name, help, &rows)?;
        }
        let keyed: Vec<_> = self
            .parts
            .iter()
            .filter_map(|(p, _)| p.snap.by.as_ref().map(|by| (p, by)))
            .collect();
        if !keyed.is_empty() {
            let other: Vec<_> = keyed
                .iter()
                .map(|(p, _)| (p.labels.clone(), p.snap.counters.keys_other))
                .collect();
            counter_u64(
                &mut enc,
                "usdt_keys_other_spans",
                "Spans whose --by key found no room (beyond --max-keys), counted under key=\"other\".",
                &other,
            )?;
            let unkeyed: Vec<_> = keyed
                .iter()
                .map(|(p, _)| (p.labels.clone(), p.snap.counters.keys_unkeyed))
                .collect();
            counter_u64(
                &mut enc,
                "usdt_keys_unkeyed_spans",
                "Spans whose new --by key the kernel had no memory for (its reserve full too), counted under key=\"unkeyed\".",
                &unkeyed,
            )?;
            let max: Vec<_> = keyed
                .iter()
                .map(|(p, by)| (p.labels.clone(), by.max_keys as i64))
                .collect();
            gauge(
                &mut enc,
                "usdt_keys_max",
                "--max-keys: key values kept per run before the rest count as other.",
                None,
                &max,
            )?;
        }
        let health = |f: &dyn Fn(&Health) -> u64| -> Vec<(Labels, i64)> {
            self.parts
                .iter()
                .map(|(p, _)| (p.labels.clone(), f(&p.snap.health) as i64))
                .collect()
        };
        gauge(
            &mut enc,
            "usdt_attached_sites",
            "Probe sites attached.",
            None,
            &health(&|h| h.sites),
        )?;
        let objects: Vec<_> = self
            .parts
            .iter()
            .flat_map(|(p, _)| {
                p.snap.health.objects.iter().map(|(o, n)| {
                    let mut l = p.labels.clone();
                    l.push(("object", o.clone()));
                    (l, *n as i64)
                })
            })
            .collect();
        gauge(
            &mut enc,
            "usdt_object_attached_sites",
            "Probe sites attached, per traced object (one per process for a per-process attachment).",
            None,
            &objects,
        )?;
        gauge(
            &mut enc,
            "usdt_span_names",
            "Span names traced.",
            None,
            &health(&|h| h.span_names),
        )?;
        gauge(
            &mut enc,
            "usdt_ring_buffer_size",
            "Size of the ring buffer records go through.",
            Some(&Unit::Bytes),
            &health(&|h| h.ring_bytes),
        )?;
        if let Some(up) = &self.up {
            let rows: Vec<_> = up
                .iter()
                .map(|(name, up)| (vec![("definition", name.clone())], *up as i64))
                .collect();
            gauge(
                &mut enc,
                "usdt_definition_up",
                "1 while the definition's probes are attached, 0 while it waits to retry.",
                None,
                &rows,
            )?;
        }
        counter(
            &mut enc,
            "process_cpu",
            "CPU time (user and system) of the tracer itself.",
            Some(&Unit::Seconds),
            &[(Labels::new(), ns_to_s(self.cpu_ns))],
        )
    }
}

fn encode(e: Exposition) -> String {
    let mut reg = Registry::default();
    reg.register_collector(Box::new(e));
    let mut out = String::new();
    // Writing into a String cannot fail, and every value above is finite.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &reg);
    out
}

/// The text exposition of one `watch` scrape.
pub fn render(snap: Snapshot, per_octave: u32) -> String {
    let cpu_ns = snap.health.cpu_ns;
    encode(Exposition {
        parts: vec![(
            Part {
                labels: Labels::new(),
                snap,
                per_octave,
            },
            bounds(per_octave),
        )],
        cpu_ns,
        up: None,
    })
}

/// The text exposition of one `serve` scrape: every definition's part (each labelled with
/// its name), whether each is up, and this process's CPU time once.
pub fn render_many(parts: Vec<Part>, up: Vec<(String, bool)>, cpu_ns: u64) -> String {
    encode(Exposition {
        parts: parts
            .into_iter()
            .map(|p| {
                let b = bounds(p.per_octave);
                (p, b)
            })
            .collect(),
        cpu_ns,
        up: Some(up),
    })
}

#[cfg(test)]
mod tests;
