//! The kernel side of `--by`, `--count` and `--top`: map sizes, settings, and reading the
//! aggregates back (summed over CPUs).

use super::{map_err, TraceError, Tracer};
use aya::maps::{Array, MapData, PerCpuArray, PerCpuHashMap};
use aya::EbpfLoader;
use std::collections::HashMap;
use usdt_trace_common::agg::{
    AggConfig, ByKey, BySites, NumKey, AGG_CNT_BY_OTHER, AGG_CNT_BY_SPILLED, AGG_CNT_BY_UNKEYED,
    AGG_CNT_COUNT_OTHER, AGG_CNT_COUNT_SPILLED, AGG_CNT_COUNT_UNKEYED, AGG_COUNTERS, BY_NONE,
    CFG_AGG_ARGS, CFG_AGG_BY, CFG_AGG_COUNT, SPILL_KEYS,
};
use usdt_trace_common::maps;
use usdt_trace_common::{Config, Hist};

/// What the kernel aggregates (all off by default).
#[derive(Clone, Debug, Default)]
pub struct AggLoad {
    /// `--count`: count hits, pair nothing, record nothing.
    pub count: bool,
    /// `--by`: the key's fields and where each is kept (`by[0] == BY_NONE`: off).
    pub by: AggConfig,
    /// The key needs arguments or strings read (also in histogram mode).
    pub by_args: bool,
    /// Per site (cookie), per key field: the argument an `argN` field reads there
    /// (`BY_ARG_NONE`: none).
    pub by_sites: Vec<BySites>,
    /// `--max-keys`: the size of the keyed maps.
    pub max_keys: u32,
}

impl AggLoad {
    /// Whether `--by` is on.
    pub fn keyed(&self) -> bool {
        self.by.by[0] != BY_NONE
    }

    pub(super) fn config_flags(&self) -> u32 {
        let mut f = 0;
        if self.count {
            f |= CFG_AGG_COUNT;
        }
        if self.keyed() {
            f |= CFG_AGG_BY;
            if self.by_args {
                f |= CFG_AGG_ARGS;
            }
        }
        f
    }

    /// Sizes the aggregation maps: the keyed ones only when used, as each entry is a
    /// per-CPU 4 KB histogram at worst.
    pub(super) fn size_maps(&self, l: &mut EbpfLoader, nsites: u32, hist_pairs: u32) {
        let keys = if self.keyed() {
            self.max_keys.max(1)
        } else {
            1
        };
        let str_keys = self.by.str_keys != 0;
        // Only the keyed map this run uses gets --max-keys entries, and its reserve (which is
        // preallocated) SPILL_KEYS.
        let used =
            |count: bool, strs: bool| self.keyed() && count == self.count && strs == str_keys;
        let size = |count: bool, strs: bool| if used(count, strs) { keys } else { 1 };
        let spill = |count: bool, strs: bool| if used(count, strs) { SPILL_KEYS } else { 1 };
        l.map_max_entries(maps::BY_SITES, nsites)
            .map_max_entries(maps::BY_HISTS, size(false, false))
            .map_max_entries(maps::BY_HISTS_STR, size(false, true))
            .map_max_entries(maps::BY_HISTS_SPILL, spill(false, false))
            .map_max_entries(maps::BY_HISTS_STR_SPILL, spill(false, true))
            .map_max_entries(maps::BY_COUNTS_SPILL, spill(true, false))
            .map_max_entries(maps::BY_COUNTS_STR_SPILL, spill(true, true))
            .map_max_entries(maps::BY_OTHER, hist_pairs.max(1))
            .map_max_entries(maps::BY_UNKEYED, hist_pairs.max(1))
            .map_max_entries(maps::BY_COUNT_UNKEYED, if self.count { nsites } else { 1 })
            .map_max_entries(maps::SITE_COUNTS, if self.count { nsites } else { 1 })
            .map_max_entries(maps::BY_COUNTS, size(true, false))
            .map_max_entries(maps::BY_COUNTS_STR, size(true, true))
            .map_max_entries(maps::BY_COUNT_OTHER, if self.count { nsites } else { 1 });
    }
}

/// Counters of the aggregation paths.
#[derive(Clone, Copy, Debug, Default)]
pub struct AggCounters {
    /// Spans counted in a span name's "other" histogram (BY_HISTS full).
    pub by_other: u64,
    /// Hits counted as "other" (BY_COUNTS full).
    pub count_other: u64,
    /// Keys of spans (hits) put in the reserve map: the main one had no memory at hand when
    /// they were new. Their counts are exact; said so that the reserve's size can be judged.
    pub by_spilled: u64,
    pub count_spilled: u64,
    /// Spans (hits) whose key could be kept nowhere though the main map was not full.
    pub by_unkeyed: u64,
    pub count_unkeyed: u64,
}

pub(super) fn sum_hist(into: &mut Hist, h: &Hist) {
    for (a, b) in into.buckets.iter_mut().zip(h.buckets.iter()) {
        *a += b;
    }
    into.count += h.count;
    into.sum += h.sum;
    into.max = into.max.max(h.max);
}

impl Tracer {
    /// Writes the settings and the per-site key arguments; at load, before attaching.
    pub(super) fn agg_init(&mut self, a: &AggLoad) -> Result<(), TraceError> {
        let mut cfg: Array<_, AggConfig> = Array::try_from(
            self.ebpf
                .map_mut(maps::AGG)
                .ok_or(TraceError::MissingMap(maps::AGG))?,
        )
        .map_err(map_err(maps::AGG))?;
        cfg.set(0, a.by, 0).map_err(map_err(maps::AGG))?;
        if a.keyed() {
            let mut sites: Array<_, BySites> = Array::try_from(
                self.ebpf
                    .map_mut(maps::BY_SITES)
                    .ok_or(TraceError::MissingMap(maps::BY_SITES))?,
            )
            .map_err(map_err(maps::BY_SITES))?;
            for (i, &n) in a.by_sites.iter().enumerate() {
                sites.set(i as u32, n, 0).map_err(map_err(maps::BY_SITES))?;
            }
        }
        self.agg_by = a.keyed().then_some(a.by.str_keys != 0);
        Ok(())
    }

    /// `--top`: spans shorter than `ns` (or than `--min`) make no record from now on: the
    /// kernel's `--min` check, before a ring slot is reserved, does the work.
    pub fn set_top_min(&mut self, ns: u64) -> Result<(), TraceError> {
        let mut cfg: Array<_, Config> = Array::try_from(
            self.ebpf
                .map_mut(maps::CONFIG)
                .ok_or(TraceError::MissingMap(maps::CONFIG))?,
        )
        .map_err(map_err(maps::CONFIG))?;
        let mut c = cfg.get(&0, 0).map_err(map_err(maps::CONFIG))?;
        c.min_ns = ns.max(self.user_min_ns);
        cfg.set(0, c, 0).map_err(map_err(maps::CONFIG))
    }

    fn per_cpu_array_u64(&self, name: &'static str, n: usize) -> Result<Vec<u64>, TraceError> {
        let map: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(self.ebpf.map(name).ok_or(TraceError::MissingMap(name))?)
                .map_err(map_err(name))?;
        let n = n.min(map.len() as usize);
        (0..n)
            .map(|i| {
                map.get(&(i as u32), 0)
                    .map(|v| v.iter().sum())
                    .map_err(map_err(name))
            })
            .collect()
    }

    pub fn agg_counters(&self) -> Result<AggCounters, TraceError> {
        let v = self.per_cpu_array_u64(maps::AGG_COUNTS, AGG_COUNTERS as usize)?;
        let at = |i: u32| v.get(i as usize).copied().unwrap_or(0);
        Ok(AggCounters {
            by_other: at(AGG_CNT_BY_OTHER),
            count_other: at(AGG_CNT_COUNT_OTHER),
            by_spilled: at(AGG_CNT_BY_SPILLED),
            count_spilled: at(AGG_CNT_COUNT_SPILLED),
            by_unkeyed: at(AGG_CNT_BY_UNKEYED),
            count_unkeyed: at(AGG_CNT_COUNT_UNKEYED),
        })
    }

    /// Every (key, per-CPU values) of the per-CPU hash map `name`, `f` applied to each.
    fn each_key<K: aya::Pod, V: aya::Pod>(
        &self,
        name: &'static str,
        mut f: impl FnMut(K, &[V]),
    ) -> Result<(), TraceError> {
        let map: PerCpuHashMap<&MapData, K, V> =
            PerCpuHashMap::try_from(self.ebpf.map(name).ok_or(TraceError::MissingMap(name))?)
                .map_err(map_err(name))?;
        for item in map.iter() {
            let (k, v) = item.map_err(map_err(name))?;
            f(k, &v);
        }
        Ok(())
    }

    /// `--count`: hits per site, and per (site, key) and per site beyond the keys.
    pub fn counts(&self, nsites: usize) -> Result<Counts, TraceError> {
        let sites = self.per_cpu_array_u64(maps::SITE_COUNTS, nsites)?;
        let other = self.per_cpu_array_u64(maps::BY_COUNT_OTHER, nsites)?;
        let unkeyed = self.per_cpu_array_u64(maps::BY_COUNT_UNKEYED, nsites)?;
        let mut keys: HashMap<ByKey, u64> = HashMap::new();
        // A key's count is in the main map or its reserve (or partly in each: it may enter
        // the reserve on one CPU while another inserts it into the main map): the sum.
        if self.agg_by == Some(true) {
            for name in [maps::BY_COUNTS_STR, maps::BY_COUNTS_STR_SPILL] {
                self.each_key(name, |k: ByKey, v: &[u64]| {
                    *keys.entry(k).or_insert(0) += v.iter().sum::<u64>();
                })?;
            }
        } else if self.agg_by == Some(false) {
            for name in [maps::BY_COUNTS, maps::BY_COUNTS_SPILL] {
                self.each_key(name, |k: NumKey, v: &[u64]| {
                    *keys.entry(k.to_by_key()).or_insert(0) += v.iter().sum::<u64>();
                })?;
            }
        }
        Ok(Counts {
            sites,
            keys,
            other,
            unkeyed,
        })
    }

    /// Per span name, the histograms of the per-CPU array `name` (BY_OTHER, BY_UNKEYED).
    fn pair_hists(&self, name: &'static str, npairs: usize) -> Result<Vec<Hist>, TraceError> {
        let map: PerCpuArray<&MapData, Hist> =
            PerCpuArray::try_from(self.ebpf.map(name).ok_or(TraceError::MissingMap(name))?)
                .map_err(map_err(name))?;
        let n = npairs.min(map.len() as usize).min(self.hist_pairs);
        let mut out = vec![Hist::default(); npairs];
        for (i, slot) in out.iter_mut().enumerate().take(n) {
            for h in map.get(&(i as u32), 0).map_err(map_err(name))?.iter() {
                sum_hist(slot, h);
            }
        }
        Ok(out)
    }

    /// `--hist --by`: the histogram per key, and per span name the "other" and "unkeyed" ones.
    pub fn by_hists(&self, npairs: usize) -> Result<ByHists, TraceError> {
        let mut keys: HashMap<ByKey, Hist> = HashMap::new();
        // As for counts: a key's histogram is the sum of its main and reserve entries.
        if self.agg_by == Some(true) {
            for name in [maps::BY_HISTS_STR, maps::BY_HISTS_STR_SPILL] {
                self.each_key(name, |k: ByKey, v: &[Hist]| {
                    let slot = keys.entry(k).or_default();
                    for h in v {
                        sum_hist(slot, h);
                    }
                })?;
            }
        } else if self.agg_by == Some(false) {
            for name in [maps::BY_HISTS, maps::BY_HISTS_SPILL] {
                self.each_key(name, |k: NumKey, v: &[Hist]| {
                    let slot = keys.entry(k.to_by_key()).or_default();
                    for h in v {
                        sum_hist(slot, h);
                    }
                })?;
            }
        }
        Ok(ByHists {
            keys,
            other: self.pair_hists(maps::BY_OTHER, npairs)?,
            unkeyed: self.pair_hists(maps::BY_UNKEYED, npairs)?,
        })
    }
}

// Plain data: what the maps hold, read back. What is derived from them (deltas, tables)
// is `agg`'s, above this stage.

/// The kernel's `--by` histograms at one moment, cumulative: per key, and per span name the
/// "other" histogram of spans whose key found no room (the map full), and the "unkeyed" one
/// of spans whose key could not be kept though the map had room (no kernel memory at hand).
#[derive(Clone, Default)]
pub struct ByHists {
    pub keys: HashMap<ByKey, Hist>,
    pub other: Vec<Hist>,
    pub unkeyed: Vec<Hist>,
}

/// The kernel's `--count` counters at one moment, cumulative.
#[derive(Clone, Default)]
pub struct Counts {
    /// Per site (cookie).
    pub sites: Vec<u64>,
    /// Per (site, key), with `--by`.
    pub keys: HashMap<ByKey, u64>,
    /// Per site: hits whose key found no room (the map full).
    pub other: Vec<u64>,
    /// Per site: hits whose key could not be kept though the map had room.
    pub unkeyed: Vec<u64>,
}
