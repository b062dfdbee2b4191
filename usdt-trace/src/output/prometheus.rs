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

pub mod serve;

use crate::agg::{Key, KeyVal};
use crate::output::PairInfo;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use usdt_trace_common::{
    hist_bucket, hist_bucket_range, Hist, WaitSums, HIST_COMPONENTS, HIST_SUB,
};

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

/// One span name's (or key's) duration histogram, with its labels.
#[derive(Clone, Debug)]
pub struct Series {
    pub labels: Vec<(&'static str, String)>,
    pub hist: Hist,
}

/// What one scrape exports, read from the kernel by `watch`. Every number is cumulative
/// since tracing started.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Per span name: its names and its histograms (duration, then the split), as
    /// `Tracer::hists` returns them.
    pub pairs: Vec<(PairInfo, [Hist; HIST_COMPONENTS])>,
    /// Per span name (same order as `pairs`): what its split spans waited on, by kind, as
    /// `Tracer::wait_sums` returns it. Shorter than `pairs` (or empty) means none waited.
    pub waits: Vec<WaitSums>,
    /// `--by`: the key's text and, per span name, each key's duration histogram and the
    /// "other" one (spans whose key found no room).
    pub by: Option<ByKeys>,
    pub counters: Counters,
    pub health: Health,
}

#[derive(Clone, Debug, Default)]
pub struct ByKeys {
    pub by: String,
    /// (pair index into `Snapshot::pairs`, key, histogram).
    pub keys: Vec<(usize, Key, Hist)>,
    /// Per pair (same order as `Snapshot::pairs`).
    pub other: Vec<Hist>,
    /// `--max-keys`.
    pub max_keys: u32,
}

/// The kernel's and the reader's counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub events: u64,
    pub spans: u64,
    /// Records lost: ring buffer full, undecodable, or the output's reader too slow.
    pub records_lost: u64,
    pub unmatched_ends: u64,
    pub dropped_threads_full: u64,
    pub dropped_open_ids_full: u64,
    pub dropped_depth: u64,
    /// Probe hits the kernel ran no program for (another BPF program was running).
    pub hits_missed: u64,
    pub strings_dropped: u64,
    /// `--by`: spans counted as "other" (beyond `--max-keys`).
    pub keys_other: u64,
}

/// The tracer's own state.
#[derive(Clone, Copy, Debug, Default)]
pub struct Health {
    pub sites: u64,
    pub span_names: u64,
    pub ring_bytes: u64,
    /// This process's CPU time (user + system), nanoseconds.
    pub cpu_ns: u64,
}

/// Names of the split components (indices 1.. of a span name's histograms), as `state`.
const STATES: [&str; HIST_COMPONENTS - 1] = ["oncpu", "runq", "sleep", "io", "idle"];

fn ns_to_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A key's label value: its fields joined by ", " (as the text tables show a `--by comm,arg1`
/// key), each as `field_label` writes it.
pub fn key_label(k: &Key) -> String {
    let parts: Vec<String> = k.0.iter().map(field_label).collect();
    parts.join(", ")
}

/// A key field's label value: numbers in decimal, strings as they are, a byte that is not
/// UTF-8 as `\xNN` (never U+FFFD: two different strings must not print alike), a string cut
/// at `--str-max` followed by `…`.
pub fn field_label(k: &KeyVal) -> String {
    match k {
        KeyVal::Uint(v) => v.to_string(),
        KeyVal::Int(v) => v.to_string(),
        KeyVal::Str(b) => bytes_label(b),
        KeyVal::CutStr(b) => bytes_label(b) + "…",
    }
}

fn bytes_label(mut b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    while !b.is_empty() {
        match std::str::from_utf8(b) {
            Ok(s) => {
                out.push_str(s);
                break;
            }
            Err(e) => {
                let (good, rest) = b.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(good).unwrap_or_default());
                let bad = e.error_len().unwrap_or(rest.len()).max(1);
                for byte in &rest[..bad] {
                    out.push_str(&format!("\\x{byte:02x}"));
                }
                b = &rest[bad..];
            }
        }
    }
    out
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

/// Adds `h` into `into` (the duration histograms of keys whose labels turn out equal: two
/// kernel keys can print alike, e.g. strings that differ only in invalid UTF-8).
fn merge(into: &mut Hist, h: &Hist) {
    for (a, b) in into.buckets.iter_mut().zip(h.buckets.iter()) {
        *a += b;
    }
    into.count += h.count;
    into.sum += h.sum;
    into.max = into.max.max(h.max);
}

impl Snapshot {
    /// Adds `base` (what an earlier run of the same definition had counted when it ended)
    /// into this one, so that a definition that detached and attached again goes on from
    /// where it was: counters and buckets never go backwards. Span names and keys are
    /// matched by what they print as; those the earlier run had and this one has not yet
    /// are kept (their series must not vanish). The health gauges stay this run's.
    pub fn add_base(&mut self, base: &Snapshot) {
        let mut index = Vec::with_capacity(base.pairs.len());
        for (p, h) in &base.pairs {
            let i = match self
                .pairs
                .iter()
                .position(|(q, _)| q.provider == p.provider && q.stem == p.stem)
            {
                Some(i) => i,
                None => {
                    self.pairs
                        .push((p.clone(), [Hist::default(); HIST_COMPONENTS]));
                    if let Some(by) = self.by.as_mut() {
                        by.other.push(Hist::default());
                    }
                    self.pairs.len() - 1
                }
            };
            for (into, x) in self.pairs[i].1.iter_mut().zip(h.iter()) {
                merge(into, x);
            }
            index.push(i);
        }
        // The wait sums go with their span names, as the histograms do.
        for (bi, w) in base.waits.iter().enumerate() {
            let Some(&i) = index.get(bi) else { continue };
            if self.waits.len() <= i {
                self.waits.resize(i + 1, Default::default());
            }
            self.waits[i].merge(w);
        }
        if let Some(bb) = &base.by {
            let by = self.by.get_or_insert_with(|| ByKeys {
                by: bb.by.clone(),
                keys: Vec::new(),
                other: Vec::new(),
                max_keys: bb.max_keys,
            });
            by.other.resize(self.pairs.len(), Hist::default());
            for (bi, k, h) in &bb.keys {
                let Some(&i) = index.get(*bi) else { continue };
                match by.keys.iter_mut().find(|(j, kk, _)| *j == i && kk == k) {
                    Some((_, _, into)) => merge(into, h),
                    None => by.keys.push((i, k.clone(), *h)),
                }
            }
            for (bi, h) in bb.other.iter().enumerate() {
                if let Some(&i) = index.get(bi) {
                    merge(&mut by.other[i], h);
                }
            }
        }
        let (c, b) = (&mut self.counters, &base.counters);
        c.events += b.events;
        c.spans += b.spans;
        c.records_lost += b.records_lost;
        c.unmatched_ends += b.unmatched_ends;
        c.dropped_threads_full += b.dropped_threads_full;
        c.dropped_open_ids_full += b.dropped_open_ids_full;
        c.dropped_depth += b.dropped_depth;
        c.hits_missed += b.hits_missed;
        c.strings_dropped += b.strings_dropped;
        c.keys_other += b.keys_other;
    }
}

/// The duration histograms of one part: per span name, or per span name and key with
/// `--by`. Merged by label set, so no series is written twice.
fn duration_series(prefix: &Labels, snap: &Snapshot) -> BTreeMap<Labels, Hist> {
    let mut out: BTreeMap<Labels, Hist> = BTreeMap::new();
    match &snap.by {
        None => {
            for (p, h) in &snap.pairs {
                if h[0].count > 0 {
                    merge(out.entry(span_labels(prefix, p)).or_default(), &h[0]);
                }
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
            for ((p, _), h) in snap.pairs.iter().zip(&by.other) {
                if h.count == 0 {
                    continue;
                }
                // A label of its own as well as the value: a real string key "other"
                // stays a series apart.
                let mut l = span_labels(prefix, p);
                l.push(("by", by.by.clone()));
                l.push(("key", "other".into()));
                l.push(("other", "true".into()));
                merge(out.entry(l).or_default(), h);
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
        // duration alone).
        let split: Vec<_> = self
            .parts
            .iter()
            .flat_map(|(part, _)| {
                part.snap
                    .pairs
                    .iter()
                    .filter(|(_, h)| h[1].count > 0)
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
            "Time of split spans by state (oncpu, runq, sleep, io, idle): per span name, the states add up to the duration of its usdt_span_split spans.",
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
        // What the sleep and io parts waited on: every kind for every split span name, zero
        // or not, so that the set of series is fixed once a span name has split spans.
        let (mut wait_s, mut wait_n) = (Vec::new(), Vec::new());
        for (part, _) in &self.parts {
            let snap = &part.snap;
            for (i, (p, _)) in snap
                .pairs
                .iter()
                .enumerate()
                .filter(|(_, (_, h))| h[1].count > 0)
            {
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
            "Off-CPU time of split spans by what they waited on (lock, net, timer: part of the sleep state; disk: part of io).",
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
mod tests {
    use super::*;

    fn pair(provider: &str, stem: &str) -> PairInfo {
        PairInfo {
            provider: provider.into(),
            stem: stem.into(),
            start: format!("{stem}__start"),
            ends: vec![format!("{stem}__end")],
        }
    }

    fn hist_of(values: &[u64]) -> Hist {
        let mut h = Hist::default();
        for &v in values {
            h.add(v);
        }
        h
    }

    /// The lines of `text` that start with `prefix`.
    fn lines<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    fn value(text: &str, series: &str) -> f64 {
        let l = text
            .lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"));
        l.rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("value")
    }

    #[test]
    fn string_key_labels_keep_every_byte_and_mark_a_cut() {
        assert_eq!(field_label(&KeyVal::Str(b"caf\xc3\xa9".to_vec())), "café");
        assert_eq!(field_label(&KeyVal::CutStr(vec![b'a', 0xc3])), "a\\xc3…");
        assert_eq!(field_label(&KeyVal::Str(vec![0xff, b'z'])), "\\xffz");
        let two = Key(vec![KeyVal::Str(b"bash".to_vec()), KeyVal::Int(-1)]);
        assert_eq!(key_label(&two), "bash, -1");
    }

    #[test]
    fn bounds_are_kernel_bounds() {
        let b = bounds(8);
        assert_eq!(b.len(), 28 * 8 + 1);
        // Each le is the last nanosecond of a kernel bucket: it and the next value fall in
        // adjacent buckets.
        for &(k, le) in &b {
            let ns = (le * 1e9).round() as u64;
            assert_eq!(hist_bucket(ns), k);
            assert_eq!(hist_bucket(ns + 1), k + 1);
        }
        assert_eq!(b[0].1, 255e-9);
        assert_eq!(bounds(1).len(), 29);
        assert_eq!(bounds(2).len(), 57);
        // Every 8th kernel bound is a power of two (minus the nanosecond).
        for (_, le) in bounds(1) {
            let ns = (le * 1e9).round() as u64 + 1;
            assert!(ns.is_power_of_two(), "{ns}");
        }
    }

    #[test]
    fn bucket_counts_are_exact_and_total_is_count() {
        // 100 spans of 1 ms, 10 of 10 ms, 1 of 200 s (beyond the last bound), 5 of 100 ns
        // (below the first).
        let mut v = vec![1_000_000u64; 100];
        v.extend([10_000_000; 10]);
        v.push(200_000_000_000);
        v.extend([100; 5]);
        let h = hist_of(&v);
        let b = bounds(8);
        let (per, total) = buckets(&h, &b);
        assert_eq!(total, 116);
        assert_eq!(per.iter().map(|x| x.1).sum::<u64>(), 115);
        assert_eq!(per[0].1, 5);
        // The 1 ms spans sit in the bucket whose bound is the first at or above 1 ms.
        let i = b.iter().position(|&(_, le)| le >= 1e-3).expect("bound");
        assert_eq!(per[i].1, 100);
    }

    #[test]
    fn renders_histogram_split_and_counters() {
        let mut comps = [Hist::default(); HIST_COMPONENTS];
        comps[0] = hist_of(&[3_000_000, 5_000_000]);
        comps[1] = hist_of(&[1_000_000, 2_000_000]);
        comps[2] = hist_of(&[0, 500_000]);
        comps[3] = hist_of(&[2_000_000, 2_500_000]);
        comps[4] = hist_of(&[0, 0]);
        let snap = Snapshot {
            pairs: vec![
                (pair("demo", "request"), comps),
                // Nothing closed yet: no series.
                (pair("demo", "idle"), [Hist::default(); HIST_COMPONENTS]),
            ],
            // Of the 4.5ms of sleep, 3ms in 2 futex waits and 1ms in one nanosleep.
            waits: vec![WaitSums {
                ns: [3_000_000, 0, 1_000_000, 0],
                n: [2, 0, 1, 0],
            }],
            counters: Counters {
                events: 7,
                spans: 2,
                records_lost: 1,
                ..Counters::default()
            },
            health: Health {
                sites: 4,
                span_names: 2,
                ring_bytes: 1 << 24,
                cpu_ns: 1_500_000_000,
            },
            by: None,
        };
        let t = render(snap, 8);
        assert!(t.contains("# TYPE usdt_span_duration_seconds histogram"));
        let s = "usdt_span_duration_seconds";
        assert_eq!(
            value(
                &t,
                &format!("{s}_bucket{{provider=\"demo\",span=\"request\",le=\"+Inf\"}}")
            ),
            2.0
        );
        assert_eq!(
            value(
                &t,
                &format!("{s}_count{{provider=\"demo\",span=\"request\"}}")
            ),
            2.0
        );
        assert_eq!(
            value(
                &t,
                &format!("{s}_sum{{provider=\"demo\",span=\"request\"}}")
            ),
            0.008
        );
        assert!(lines(&t, &format!("{s}_count{{provider=\"demo\",span=\"idle\"")).is_empty());
        // Buckets are cumulative and never decrease.
        let cum: Vec<f64> = lines(
            &t,
            &format!("{s}_bucket{{provider=\"demo\",span=\"request\""),
        )
        .iter()
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .expect("v")
        })
        .collect();
        assert_eq!(cum.len(), bounds(8).len() + 1);
        assert!(cum.windows(2).all(|w| w[0] <= w[1]));
        let st = |state: &str| {
            value(
                &t,
                &format!(
                    "usdt_span_time_seconds_total{{provider=\"demo\",span=\"request\",state=\"{state}\"}}"
                ),
            )
        };
        assert_eq!(st("oncpu"), 0.003);
        assert_eq!(st("runq"), 0.0005);
        assert_eq!(st("sleep"), 0.0045);
        assert_eq!(st("io"), 0.0);
        assert_eq!(
            value(
                &t,
                "usdt_span_split_duration_seconds_total{provider=\"demo\",span=\"request\"}"
            ),
            0.008
        );
        assert_eq!(
            value(
                &t,
                "usdt_span_split_total{provider=\"demo\",span=\"request\"}"
            ),
            2.0
        );
        let wait = |m: &str, kind: &str| {
            value(
                &t,
                &format!("{m}{{provider=\"demo\",span=\"request\",kind=\"{kind}\"}}"),
            )
        };
        assert!(
            t.contains("# TYPE usdt_span_wait_seconds_total counter"),
            "{t}"
        );
        assert!(t.contains("# TYPE usdt_span_waits_total counter"), "{t}");
        assert_eq!(wait("usdt_span_wait_seconds_total", "lock"), 0.003);
        assert_eq!(wait("usdt_span_wait_seconds_total", "timer"), 0.001);
        assert_eq!(wait("usdt_span_waits_total", "lock"), 2.0);
        assert_eq!(wait("usdt_span_waits_total", "timer"), 1.0);
        // Every kind, zero or not, from the first scrape; none for a name with no split.
        assert_eq!(wait("usdt_span_wait_seconds_total", "net"), 0.0);
        assert_eq!(wait("usdt_span_waits_total", "disk"), 0.0);
        assert!(lines(&t, "usdt_span_waits_total{provider=\"demo\",span=\"idle\"").is_empty());
        // The kinds of the sleep part stay within it.
        assert!(
            wait("usdt_span_wait_seconds_total", "lock")
                + wait("usdt_span_wait_seconds_total", "net")
                + wait("usdt_span_wait_seconds_total", "timer")
                <= st("sleep")
        );
        assert_eq!(value(&t, "usdt_events_total"), 7.0);
        assert_eq!(value(&t, "usdt_records_lost_total"), 1.0);
        assert_eq!(value(&t, "usdt_spans_dropped_total{reason=\"depth\"}"), 0.0);
        assert_eq!(value(&t, "usdt_attached_sites"), 4.0);
        assert_eq!(value(&t, "usdt_ring_buffer_size_bytes"), 16777216.0);
        assert_eq!(value(&t, "process_cpu_seconds_total"), 1.5);
        // No --by: no key series, no key counters.
        assert!(!t.contains("key=\""));
        assert!(!t.contains("usdt_keys_max"));
    }

    #[test]
    fn by_keys_other_and_escaping() {
        let comps = [Hist::default(); HIST_COMPONENTS];
        let snap = Snapshot {
            pairs: vec![(pair("demo", "request"), comps)],
            waits: Vec::new(),
            by: Some(ByKeys {
                by: "str0".into(),
                keys: vec![
                    (
                        0,
                        Key::one(KeyVal::Str(b"/a\"b\n".to_vec())),
                        hist_of(&[1000]),
                    ),
                    (
                        0,
                        Key::one(KeyVal::Str(b"other".to_vec())),
                        hist_of(&[1000, 2000]),
                    ),
                    // Two kernel keys that print alike merge into one series.
                    (
                        0,
                        Key::one(KeyVal::Str(b"x\xff".to_vec())),
                        hist_of(&[1000]),
                    ),
                    (
                        0,
                        Key::one(KeyVal::Str(b"x\xfe".to_vec())),
                        hist_of(&[1000]),
                    ),
                ],
                other: vec![hist_of(&[5000, 6000, 7000])],
                max_keys: 3,
            }),
            counters: Counters {
                keys_other: 3,
                ..Counters::default()
            },
            health: Health::default(),
        };
        let t = render(snap, 1);
        let c = |labels: &str| {
            value(
                &t,
                &format!("usdt_span_duration_seconds_count{{provider=\"demo\",span=\"request\",by=\"str0\",{labels}}}"),
            )
        };
        assert_eq!(c("key=\"/a\\\"b\\n\""), 1.0);
        assert_eq!(c("key=\"other\""), 2.0);
        assert_eq!(c("key=\"other\",other=\"true\""), 3.0);
        // Two strings that differ only in bytes that are not UTF-8 stay two series.
        assert_eq!(c("key=\"x\\\\xff\""), 1.0);
        assert_eq!(c("key=\"x\\\\xfe\""), 1.0);
        assert_eq!(value(&t, "usdt_keys_other_spans_total"), 3.0);
        assert_eq!(value(&t, "usdt_keys_max"), 3.0);
    }

    fn req_snapshot(values: &[u64], spans: u64) -> Snapshot {
        let mut comps = [Hist::default(); HIST_COMPONENTS];
        comps[0] = hist_of(values);
        Snapshot {
            pairs: vec![(pair("demo", "request"), comps)],
            counters: Counters {
                spans,
                ..Counters::default()
            },
            health: Health {
                sites: 2,
                ..Health::default()
            },
            by: None,
            waits: Vec::new(),
        }
    }

    /// `serve`: one HELP/TYPE per family, every definition's series under it with its
    /// `definition` label, `usdt_definition_up` per definition, the process's CPU once.
    #[test]
    fn many_definitions_share_families() {
        let part = |name: &str, snap| Part {
            labels: vec![("definition", name.to_string())],
            snap,
            per_octave: 1,
        };
        let t = render_many(
            vec![
                part("a", req_snapshot(&[1000, 2000], 2)),
                part("b", req_snapshot(&[5000], 1)),
            ],
            vec![("a".into(), true), ("b".into(), true), ("c".into(), false)],
            2_000_000_000,
        );
        for family in [
            "usdt_span_duration_seconds histogram",
            "usdt_spans_total counter",
            "usdt_attached_sites gauge",
            "usdt_definition_up gauge",
            "process_cpu_seconds_total counter",
        ] {
            assert_eq!(
                t.matches(&format!("# TYPE {family}\n")).count(),
                1,
                "{family} in\n{t}"
            );
        }
        let s = "usdt_span_duration_seconds_count";
        assert_eq!(
            value(
                &t,
                &format!("{s}{{definition=\"a\",provider=\"demo\",span=\"request\"}}")
            ),
            2.0
        );
        assert_eq!(
            value(
                &t,
                &format!("{s}{{definition=\"b\",provider=\"demo\",span=\"request\"}}")
            ),
            1.0
        );
        assert_eq!(value(&t, "usdt_spans_total{definition=\"a\"}"), 2.0);
        assert_eq!(
            value(
                &t,
                "usdt_spans_dropped_total{definition=\"b\",reason=\"depth\"}"
            ),
            0.0
        );
        assert_eq!(value(&t, "usdt_definition_up{definition=\"c\"}"), 0.0);
        assert_eq!(value(&t, "usdt_definition_up{definition=\"a\"}"), 1.0);
        assert_eq!(lines(&t, "process_cpu_seconds_total").len(), 1);
        assert_eq!(value(&t, "process_cpu_seconds_total"), 2.0);
        // The families' series are together: a family's lines are not interleaved with
        // another's.
        let names: Vec<&str> = t
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(['{', ' ']).next().unwrap_or_default())
            // A histogram's series are _bucket, _sum, _count per label set.
            .map(|n| {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|x| n.strip_suffix(x))
                    .unwrap_or(n)
            })
            .collect();
        let mut seen = Vec::new();
        for n in names {
            if seen.last() != Some(&n) {
                assert!(!seen.contains(&n), "{n} split in\n{t}");
                seen.push(n);
            }
        }
    }

    /// A definition that attached again adds what it counted before: nothing goes backwards,
    /// and what only the earlier attachment saw stays.
    #[test]
    fn a_base_is_added_and_kept() {
        let mut base = req_snapshot(&[1000, 2000, 3000], 3);
        base.pairs.push((pair("demo", "old"), {
            let mut c = [Hist::default(); HIST_COMPONENTS];
            c[0] = hist_of(&[7000]);
            c
        }));
        base.by = Some(ByKeys {
            by: "arg1".into(),
            keys: vec![(1, Key::one(KeyVal::Uint(7)), hist_of(&[7000]))],
            other: vec![Hist::default(), hist_of(&[9000])],
            max_keys: 10,
        });
        let mut now = req_snapshot(&[1500], 1);
        now.by = Some(ByKeys {
            by: "arg1".into(),
            keys: vec![(0, Key::one(KeyVal::Uint(7)), hist_of(&[1500]))],
            other: vec![Hist::default()],
            max_keys: 10,
        });
        // Waits of "old" (the base's second span name) and of "request" in both.
        base.waits = vec![
            WaitSums {
                ns: [100, 0, 0, 0],
                n: [1, 0, 0, 0],
            },
            WaitSums {
                ns: [0, 0, 50, 0],
                n: [0, 0, 2, 0],
            },
        ];
        now.waits = vec![WaitSums {
            ns: [10, 0, 0, 0],
            n: [1, 0, 0, 0],
        }];
        now.add_base(&base);
        // The wait counters go on from the earlier attachment's, per span name.
        assert_eq!(now.waits.len(), 2);
        assert_eq!((now.waits[0].ns[0], now.waits[0].n[0]), (110, 2));
        assert_eq!((now.waits[1].ns[2], now.waits[1].n[2]), (50, 2));
        assert_eq!(now.counters.spans, 4);
        assert_eq!(now.pairs.len(), 2);
        assert_eq!(now.pairs[0].1[0].count, 4);
        assert_eq!(now.pairs[1].0.stem, "old");
        assert_eq!(now.pairs[1].1[0].count, 1);
        let by = now.by.as_ref().expect("by");
        // Key 7 of "request" (this run) and key 7 of "old" (the base) stay two series.
        assert_eq!(by.keys.len(), 2);
        assert_eq!(by.other.len(), 2);
        assert_eq!(by.other[1].count, 1);
        assert_eq!(now.health.sites, 2);
    }
}
