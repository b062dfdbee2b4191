//! The kernel's aggregates read back and grouped: `--by` histograms into one table per span
//! name (kernel keys that print alike merged), `--count` counters into one row per probe,
//! `--top`'s heaps; and what one interval adds to the last (`since`).

use super::key::{Key, KeyPlan};
use crate::plan::Plan;
pub use crate::tracer::{ByHists, Counts};
use std::collections::HashMap;
use usdt_trace_common::{Hist, SpanRecord};

fn hist_merge(into: &mut Hist, h: &Hist) {
    for (a, b) in into.buckets.iter_mut().zip(h.buckets.iter()) {
        *a += b;
    }
    into.count += h.count;
    into.sum += h.sum;
    into.max = into.max.max(h.max);
}

use crate::output::hist::delta_one as hist_delta;

impl ByHists {
    /// What this snapshot adds to `before`.
    pub fn since(&self, before: &ByHists) -> ByHists {
        let zero = Hist::default();
        ByHists {
            keys: self
                .keys
                .iter()
                .map(|(k, h)| (*k, hist_delta(h, before.keys.get(k).unwrap_or(&zero))))
                .filter(|(_, h)| h.count > 0)
                .collect(),
            other: self
                .other
                .iter()
                .enumerate()
                .map(|(i, h)| hist_delta(h, before.other.get(i).unwrap_or(&zero)))
                .collect(),
            unkeyed: self
                .unkeyed
                .iter()
                .enumerate()
                .map(|(i, h)| hist_delta(h, before.unkeyed.get(i).unwrap_or(&zero)))
                .collect(),
        }
    }
}

/// One span name's rows: keys by count (largest first), then "other" and "unkeyed".
pub struct KeyTable<T> {
    pub pair: usize,
    pub rows: Vec<(Key, T)>,
    pub other: T,
    pub unkeyed: T,
}

/// Groups a snapshot into one table per span name, keys merged by their printed value.
pub fn by_tables(plan: &Plan, kp: &KeyPlan, h: &ByHists) -> Vec<KeyTable<Hist>> {
    let mut per: Vec<HashMap<Key, Hist>> = vec![HashMap::new(); plan.pairs.len()];
    for (k, hist) in &h.keys {
        if let Some(m) = per.get_mut(k.id as usize) {
            hist_merge(m.entry(kp.value(plan, k)).or_default(), hist);
        }
    }
    // With str0, span names that capture no string would only show one "" key: left out.
    let has_str = |pair: usize| {
        plan.sites
            .iter()
            .any(|s| s.pair == Some(pair as u32) && !s.strs.is_empty())
    };
    per.into_iter()
        .enumerate()
        .filter(|(pair, _)| !kp.by.has_str() || has_str(*pair))
        .filter_map(|(pair, m)| {
            let other = h.other.get(pair).copied().unwrap_or_default();
            let unkeyed = h.unkeyed.get(pair).copied().unwrap_or_default();
            if m.is_empty() && other.count == 0 && unkeyed.count == 0 {
                return None;
            }
            let mut rows: Vec<(Key, Hist)> = m.into_iter().collect();
            rows.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(&b.0)));
            Some(KeyTable {
                pair,
                rows,
                other,
                unkeyed,
            })
        })
        .collect()
}

impl Counts {
    pub fn since(&self, before: &Counts) -> Counts {
        let sub = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter()
                .enumerate()
                .map(|(i, x)| x.saturating_sub(b.get(i).copied().unwrap_or(0)))
                .collect()
        };
        Counts {
            sites: sub(&self.sites, &before.sites),
            keys: self
                .keys
                .iter()
                .map(|(k, c)| {
                    (
                        *k,
                        c.saturating_sub(before.keys.get(k).copied().unwrap_or(0)),
                    )
                })
                .filter(|(_, c)| *c > 0)
                .collect(),
            other: sub(&self.other, &before.other),
            unkeyed: sub(&self.unkeyed, &before.unkeyed),
        }
    }
}

/// Hits of one probe (its sites merged), and per key with `--by`.
pub struct ProbeCount {
    pub provider: String,
    pub name: String,
    pub count: u64,
    pub keys: Vec<(Key, u64)>,
    pub other: u64,
    pub unkeyed: u64,
}

/// Per probe, largest count first; probes that never fired are left out.
pub fn count_table(plan: &Plan, kp: Option<&KeyPlan>, c: &Counts) -> Vec<ProbeCount> {
    let mut idx: HashMap<(&str, &str), usize> = HashMap::new();
    let mut rows: Vec<ProbeCount> = Vec::new();
    let mut keys: Vec<HashMap<Key, u64>> = Vec::new();
    let mut row_of = |site: usize,
                      rows: &mut Vec<ProbeCount>,
                      keys: &mut Vec<HashMap<Key, u64>>|
     -> Option<usize> {
        let s = plan.sites.get(site)?;
        Some(
            *idx.entry((s.provider.as_str(), s.name.as_str()))
                .or_insert_with(|| {
                    rows.push(ProbeCount {
                        provider: s.provider.clone(),
                        name: s.name.clone(),
                        count: 0,
                        keys: Vec::new(),
                        other: 0,
                        unkeyed: 0,
                    });
                    keys.push(HashMap::new());
                    rows.len() - 1
                }),
        )
    };
    for (site, &n) in c.sites.iter().enumerate().filter(|(_, n)| **n > 0) {
        if let Some(r) = row_of(site, &mut rows, &mut keys) {
            rows[r].count += n;
            rows[r].other += c.other.get(site).copied().unwrap_or(0);
            rows[r].unkeyed += c.unkeyed.get(site).copied().unwrap_or(0);
        }
    }
    if let Some(kp) = kp {
        for (k, &n) in &c.keys {
            if let Some(r) = row_of(k.id as usize, &mut rows, &mut keys) {
                *keys[r].entry(kp.value(plan, k)).or_default() += n;
            }
        }
    }
    for (r, m) in rows.iter_mut().zip(keys) {
        r.keys = m.into_iter().collect();
        r.keys.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    }
    rows.retain(|r| r.count > 0);
    rows.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| (&a.provider, &a.name).cmp(&(&b.provider, &b.name)))
    });
    rows
}

/// The N longest spans seen, longest first. Bounded: a span shorter than the N-th is dropped.
#[derive(Clone)]
pub struct TopN {
    pub n: usize,
    spans: Vec<SpanRecord>,
}

pub(super) fn dur(r: &SpanRecord) -> u64 {
    r.hdr.ts_ns.saturating_sub(r.start_ns)
}

impl TopN {
    pub fn new(n: usize) -> TopN {
        TopN {
            n,
            spans: Vec::with_capacity(n + 1),
        }
    }

    /// Offers a span; true when it entered.
    pub fn offer(&mut self, r: &SpanRecord) -> bool {
        let d = dur(r);
        if self.spans.len() == self.n && self.spans.last().is_none_or(|l| dur(l) >= d) {
            return false;
        }
        // After the equal ones: the earlier span keeps its rank.
        let at = self.spans.partition_point(|x| dur(x) >= d);
        self.spans.insert(at, *r);
        self.spans.truncate(self.n);
        true
    }

    /// The shortest duration that could still enter: the N-th longest once there are N,
    /// else 0 (everything could).
    pub fn threshold(&self) -> u64 {
        if self.spans.len() < self.n {
            0
        } else {
            self.spans.last().map_or(0, |l| dur(l).saturating_add(1))
        }
    }

    pub fn spans(&self) -> &[SpanRecord] {
        &self.spans
    }
}
