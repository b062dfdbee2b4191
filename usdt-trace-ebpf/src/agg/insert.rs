//! Keyed per-CPU hash maps filled from a probe: insert-or-get with the kernel's errors told
//! apart (a full map is counted under "other", a key the kernel could not keep "unkeyed").

use super::*;

/// EEXIST: the insert lost a race with another CPU inserting the same key.
pub(super) const EEXIST: i64 = 17;

/// E2BIG: the map holds its maximum of keys. The only insert error that means full: the
/// others (ENOMEM when the per-CPU value cache has run dry, EBUSY/EDEADLK from a bucket lock)
/// pass, and taking them for "full" sent keys well within --max-keys to "other" for the rest
/// of the run (measured: ENOMEM, with four tracers side by side, in half the runs).
pub(super) const E2BIG: i64 = 7;

/// Whether this CPU already found the main map full (E2BIG): keys are never removed while
/// tracing, so a new key would fail again, and its insert attempt (a locked bucket walk) is
/// skipped.
#[inline(always)]
pub(super) fn seen_full(idx: u32) -> bool {
    AGG_COUNTS.get(idx).is_some_and(|n| *n > 0)
}

/// Inserts `k` with value `v` unless it is there (another CPU may have inserted it since the
/// lookup); then its value. `Err(e)`: the insert's error.
#[inline(always)]
pub(super) fn insert_get<K, V>(map: &PerCpuHashMap<K, V>, k: &K, v: &V) -> Result<*mut V, i64> {
    match map.insert(k, v, BPF_NOEXIST as u64) {
        Err(e) if e as i64 != -EEXIST => Err(e as i64),
        // Deleted in between cannot happen: keys are never removed while tracing.
        _ => map.get_ptr_mut(k).ok_or(-EEXIST),
    }
}

/// The value under `k`: in `main`, else in its reserve `spill`, inserted as `v` where there
/// is room. Counts a key put in the reserve in `AGG_COUNTS[spilled]`; `full` is the counter
/// whose being nonzero says `main` was found full on this CPU.
#[inline(always)]
pub(super) fn value_of<K, V>(
    main: &PerCpuHashMap<K, V>,
    spill: &PerCpuHashMap<K, V>,
    k: &K,
    v: &V,
    full: u32,
    spilled: u32,
) -> Result<*mut V, Miss> {
    if let Some(h) = main.get_ptr_mut(k) {
        return Ok(h);
    }
    // Empty nearly always: a lookup of a key that is not there is a short bucket walk.
    if let Some(h) = spill.get_ptr_mut(k) {
        return Ok(h);
    }
    if seen_full(full) {
        return Err(Miss::Full);
    }
    match insert_get(main, k, v) {
        Ok(h) => Ok(h),
        Err(e) if e == -E2BIG => Err(Miss::Full),
        // A passing failure (no memory at hand, a busy bucket): the key is kept in the
        // preallocated reserve, which needs no memory, so its spans stay under their key.
        Err(_) => match insert_get(spill, k, v) {
            Ok(h) => {
                bump(&AGG_COUNTS, spilled);
                Ok(h)
            }
            Err(_) => Err(Miss::NoRoom),
        },
    }
}

/// The histogram under `k`, inserted zeroed when new.
#[inline(always)]
pub(super) fn keyed<K>(
    map: &PerCpuHashMap<K, Hist>,
    spill: &PerCpuHashMap<K, Hist>,
    k: &K,
) -> Result<*mut Hist, Miss> {
    let zero = ZERO_HIST.get_ptr(0).ok_or(Miss::Full)?;
    // SAFETY: a valid per-CPU map value that nothing writes.
    let zero = unsafe { &*zero };
    value_of(map, spill, k, zero, AGG_CNT_BY_OTHER, AGG_CNT_BY_SPILLED)
}

/// Adds one to the count under `k` (inserted as 0 when new).
#[inline(always)]
pub(super) fn count_keyed<K>(
    map: &PerCpuHashMap<K, u64>,
    spill: &PerCpuHashMap<K, u64>,
    k: &K,
) -> Result<(), Miss> {
    let c = value_of(
        map,
        spill,
        k,
        &0,
        AGG_CNT_COUNT_OTHER,
        AGG_CNT_COUNT_SPILLED,
    )?;
    // SAFETY: this CPU's value of a live entry.
    unsafe { *c += 1 };
    Ok(())
}
