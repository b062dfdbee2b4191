//! What one scrape exports ([`Snapshot`]), as `watch` and `serve` read it from the kernel,
//! and how a definition that attached again carries what it had counted
//! ([`Snapshot::add_base`]).   (pure)

use crate::output::agg::Key;
use crate::output::PairInfo;
use usdt_trace_common::{Hist, WaitSums, HIST_COMPONENTS};

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
    /// Per pair: spans whose new key the kernel had no memory for (and its reserve was
    /// full), counted as "unkeyed" rather than lost.
    pub unkeyed: Vec<Hist>,
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
    /// `--by`: spans counted as "unkeyed" (no kernel memory for their new key).
    pub keys_unkeyed: u64,
}

/// The tracer's own state.
#[derive(Clone, Debug, Default)]
pub struct Health {
    pub sites: u64,
    /// Sites attached now per object (its path as named or mapped).
    pub objects: Vec<(String, u64)>,
    pub span_names: u64,
    pub ring_bytes: u64,
    /// This process's CPU time (user + system), nanoseconds.
    pub cpu_ns: u64,
}

/// Adds `h` into `into` (the duration histograms of keys whose labels turn out equal: two
/// kernel keys can print alike, e.g. strings that differ only in invalid UTF-8).
pub(super) fn merge(into: &mut Hist, h: &Hist) {
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
                        by.unkeyed.push(Hist::default());
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
                unkeyed: Vec::new(),
                max_keys: bb.max_keys,
            });
            by.other.resize(self.pairs.len(), Hist::default());
            by.unkeyed.resize(self.pairs.len(), Hist::default());
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
            for (bi, h) in bb.unkeyed.iter().enumerate() {
                if let Some(&i) = index.get(bi) {
                    merge(&mut by.unkeyed[i], h);
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
        c.keys_unkeyed += b.keys_unkeyed;
    }
}

/// `--max-keys` as a bound on what is exported. The kernel's key map holds `--max-keys`
/// entries, and a reserve beside it (for keys that found the main map without memory at
/// hand) holds up to 32 more, so a scrape can read more keys than the user asked for: those
/// past the bound are counted as `other`, as the kernel counts keys that find no room.
///
/// Which keys are exported is decided once and kept for the run: the first `max_keys` keys
/// seen (those of one scrape by count, largest first). A key once folded into `other` stays
/// there and one exported stays exported, so no series goes backwards and none vanishes.
#[derive(Clone, Debug, Default)]
pub struct KeyBound {
    /// (provider, span name, key) of each key exported.
    admitted: std::collections::HashSet<(String, String, Key)>,
}

impl KeyBound {
    /// Folds the keys past the bound into their span name's `other` series and counter.
    pub fn apply(&mut self, snap: &mut Snapshot) {
        let Some(by) = snap.by.as_mut() else {
            return;
        };
        let max = by.max_keys as usize;
        let ident = |i: usize, k: &Key| {
            snap.pairs
                .get(i)
                .map(|(p, _)| (p.provider.clone(), p.stem.clone(), k.clone()))
        };
        // Room left: the new keys, largest first (ties by key, so the choice is the same
        // whatever order the kernel's maps were read in).
        let mut new: Vec<(u64, &(usize, Key, Hist))> = by
            .keys
            .iter()
            .filter(|(i, k, _)| ident(*i, k).is_some_and(|id| !self.admitted.contains(&id)))
            .map(|e| (e.2.count, e))
            .collect();
        new.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1 .1.cmp(&b.1 .1)));
        let room = max.saturating_sub(self.admitted.len());
        for (_, (i, k, _)) in new.into_iter().take(room) {
            if let Some(id) = ident(*i, k) {
                self.admitted.insert(id);
            }
        }
        let keys = std::mem::take(&mut by.keys);
        by.other.resize(snap.pairs.len(), Hist::default());
        for (i, k, h) in keys {
            match ident(i, &k) {
                Some(id) if self.admitted.contains(&id) => by.keys.push((i, k, h)),
                Some(_) => {
                    merge(&mut by.other[i], &h);
                    snap.counters.keys_other += h.count;
                }
                None => {}
            }
        }
    }
}
