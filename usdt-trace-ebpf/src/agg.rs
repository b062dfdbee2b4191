//! `--by` and `--count` in the kernel (`--top` needs nothing here: user space raises the
//! `--min` threshold, `Config::min_ns`, as its heap fills).
//!
//! The per-key work is in global BPF functions (exported, `inline(never)`): the verifier checks
//! each once, on its own, instead of once per path of the uprobe program that reaches it, which
//! is close to its instruction budget. The callers in `spans`/`main` only branch on a flag and
//! make one call.

use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_NOEXIST},
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_probe_read_kernel_buf,
        bpf_probe_read_user_buf, bpf_probe_read_user_str_bytes,
    },
    macros::map,
    maps::{Array, PerCpuArray, PerCpuHashMap},
    programs::ProbeContext,
    EbpfContext,
};
use usdt_trace_common::{
    agg::{
        AggConfig, ByKey, BySites, NumKey, AGG_CNT_BY_OTHER, AGG_CNT_BY_SPILLED,
        AGG_CNT_BY_UNKEYED, AGG_CNT_COUNT_OTHER, AGG_CNT_COUNT_SPILLED, AGG_CNT_COUNT_UNKEYED,
        AGG_COUNTERS, BY_ARG, BY_COMM, BY_FIELDS, BY_NONE, BY_PID, BY_PROBE, BY_STR_LEN, BY_TID,
        BY_WORDS, CFG_AGG_ARGS, CFG_AGG_BY, SPILL_KEYS,
    },
    Frame, Hist, IdKey, CFG_FILTER, CFG_STOPPED, MAX_ARGS, STRS_CUT, STRS_OK, STR_MAX_CAP,
    STR_NONE,
};

use crate::{
    args::{copy_regs, read_arg, read_args, ArgWords},
    filter::usdt_filter_rejects,
    maps::{current_comm_into, CONFIG, SCRATCH, SITES},
    store::forget,
    store::zero,
};

mod insert;
use insert::*;

/// `--count`'s own uprobe program (attached instead of `usdt_site`): a hit is only counted,
/// per site and key; nothing pairs, nothing is recorded. Apart, so that the span program's
/// verification, near the verifier's budget, does not pay for it.
pub fn on_count(ctx: &ProbeContext) -> Result<(), ()> {
    // SAFETY: the helper only reads the cookie of the link this program runs for.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let cfg = CONFIG.get(0).ok_or(())?;
    if cfg.flags & CFG_STOPPED != 0 {
        return Ok(());
    }
    // Links are scoped to the traced processes by the kernel (see `spans::on_site`).
    if cfg.flags & (CFG_AGG_ARGS | CFG_FILTER) != 0 {
        // SAFETY: this CPU's slot, which nothing else uses while this program runs.
        let sc = unsafe { &mut *SCRATCH.get_ptr_mut(0).ok_or(())? };
        copy_regs(ctx, &mut sc.regs);
    }
    let _ = usdt_count(cookie);
    Ok(())
}

#[map]
pub static AGG: Array<AggConfig> = Array::with_max_entries(1, 0);
/// Per site (cookie): for each key field, the argument index an `argN` field keys on there,
/// or `BY_ARG_NONE`. User space sizes it like SITES.
#[map]
pub static BY_SITES: Array<BySites> = Array::with_max_entries(1, 0);
/// `--hist --by`: one duration histogram per (span name, key), for keys without a string, and
/// for string keys (`str0`). User space sizes the one in use (`--max-keys`); allocated as
/// keys appear.
#[map]
pub static BY_HISTS: PerCpuHashMap<NumKey, Hist> =
    PerCpuHashMap::with_max_entries(1024, BPF_F_NO_PREALLOC);
#[map]
pub static BY_HISTS_STR: PerCpuHashMap<ByKey, Hist> =
    PerCpuHashMap::with_max_entries(1024, BPF_F_NO_PREALLOC);
/// The reserves of BY_HISTS and BY_HISTS_STR: keys whose insert there failed for want of
/// memory (not because the map was full). Preallocated, so an insert here needs none; user
/// space adds a key's histogram here to its histogram there. Sized SPILL_KEYS when in use.
#[map]
pub static BY_HISTS_SPILL: PerCpuHashMap<NumKey, Hist> =
    PerCpuHashMap::with_max_entries(SPILL_KEYS, 0);
#[map]
pub static BY_HISTS_STR_SPILL: PerCpuHashMap<ByKey, Hist> =
    PerCpuHashMap::with_max_entries(SPILL_KEYS, 0);
/// Per span name: the spans whose key found no room in BY_HISTS because it was full. Sized
/// like the span names.
#[map]
pub static BY_OTHER: PerCpuArray<Hist> = PerCpuArray::with_max_entries(1, 0);
/// Per span name: the spans whose key could be kept in neither map though BY_HISTS was not
/// full (no memory, and the reserve full). Apart from BY_OTHER: these keys were within
/// --max-keys. Sized like the span names.
#[map]
pub static BY_UNKEYED: PerCpuArray<Hist> = PerCpuArray::with_max_entries(1, 0);
/// `--count`: hits per site (cookie). Sized like SITES.
#[map]
pub static SITE_COUNTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);
/// `--count --by`: hits per (site, key), numeric and string keys. Sized by `--max-keys`.
#[map]
pub static BY_COUNTS: PerCpuHashMap<NumKey, u64> =
    PerCpuHashMap::with_max_entries(1024, BPF_F_NO_PREALLOC);
#[map]
pub static BY_COUNTS_STR: PerCpuHashMap<ByKey, u64> =
    PerCpuHashMap::with_max_entries(1024, BPF_F_NO_PREALLOC);
/// The reserves of BY_COUNTS and BY_COUNTS_STR, as BY_HISTS_SPILL is BY_HISTS'.
#[map]
pub static BY_COUNTS_SPILL: PerCpuHashMap<NumKey, u64> =
    PerCpuHashMap::with_max_entries(SPILL_KEYS, 0);
#[map]
pub static BY_COUNTS_STR_SPILL: PerCpuHashMap<ByKey, u64> =
    PerCpuHashMap::with_max_entries(SPILL_KEYS, 0);
/// Per site: hits whose key found no room in BY_COUNTS because it was full. Sized like SITES.
#[map]
pub static BY_COUNT_OTHER: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);
/// Per site: hits whose key could be kept in neither count map though BY_COUNTS was not full
/// (as BY_UNKEYED). Sized like SITES.
#[map]
pub static BY_COUNT_UNKEYED: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);
#[map]
pub static AGG_COUNTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(AGG_COUNTERS, 0);
/// Where a key is built: a ByKey (over 1 KB) does not fit the BPF stack.
#[map]
static KEY_SCRATCH: PerCpuArray<ByKey> = PerCpuArray::with_max_entries(1, 0);
#[map]
static NUM_SCRATCH: PerCpuArray<NumKey> = PerCpuArray::with_max_entries(1, 0);
/// Never written: zeroes to clear a key's string from.
#[map]
static ZERO_STR: PerCpuArray<KeyStr> = PerCpuArray::with_max_entries(1, 0);
/// Never written: a zeroed histogram to insert new keys from (4 KB, not for the stack).
#[map]
static ZERO_HIST: PerCpuArray<Hist> = PerCpuArray::with_max_entries(1, 0);

/// A key's string bytes, as a map value.
#[repr(C)]
pub struct KeyStr {
    pub b: [u8; BY_STR_LEN],
}

#[inline(always)]
fn bump(map: &PerCpuArray<u64>, idx: u32) {
    if let Some(p) = map.get_ptr_mut(idx) {
        // SAFETY: this CPU's slot; nothing else writes it while this program runs.
        unsafe { *p += 1 };
    }
}

/// The per-CPU key scratch, zeroed: keys hash every byte, so unused ones must be 0.
#[inline(always)]
fn fresh_key(id: u32) -> Option<&'static mut ByKey> {
    let k = KEY_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's slot, used only while this program runs.
    let k = unsafe { &mut *k };
    k.id = id;
    k.str_len = 0;
    zero_words(&mut k.val);
    k.str_state = 0;
    k._pad = 0;
    // One helper call from a zeroed map value, not a long loop the verifier must walk.
    let zero = ZERO_STR.get_ptr(0)?;
    // SAFETY: both are BY_STR_LEN-byte map values; the helper bounds the copy by `k.str`.
    unsafe { bpf_probe_read_kernel_buf(zero as *const u8, &mut k.str) }.ok()?;
    Some(k)
}

/// The per-CPU numeric key scratch, zeroed.
#[inline(always)]
fn fresh_num(id: u32) -> Option<&'static mut NumKey> {
    let k = NUM_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's slot, used only while this program runs.
    let k = unsafe { &mut *k };
    k.id = id;
    zero(&mut k._pad);
    zero_words(&mut k.val);
    Some(k)
}

/// Not `*w = [0; BY_WORDS]`: see `spans::zero`.
#[inline(always)]
fn zero_words(w: &mut [u64; BY_WORDS]) {
    for v in w.iter_mut() {
        zero(v);
    }
}

/// Where a key's numeric fields come from: a span (its frame and the end that closed it) or
/// one hit (`--count`).
#[derive(Clone, Copy)]
enum KeySource<'a> {
    Span { f: &'a Frame, end_site: u32 },
    Hit { site: u32 },
}

/// Fills the key's words with its fields but the string (which the caller reads). False when
/// a hit lacks an argument a field keys on: it is then counted only in its total.
#[inline(always)]
fn fill_words(w: &mut [u64; BY_WORDS], agg: &AggConfig, src: KeySource) -> bool {
    let pid_tgid = bpf_get_current_pid_tgid();
    for i in 0..BY_FIELDS {
        let by = agg.by[i];
        if by == BY_NONE {
            break;
        }
        let at = agg.word[i] as usize;
        let v = match by {
            BY_ARG => match src {
                KeySource::Span { f, end_site } => match (by_arg(f.site, i), by_arg(end_site, i)) {
                    (Some(n), _) => f.args.get(n).copied().unwrap_or(0),
                    (None, Some(n)) => hit_arg(end_site, n).unwrap_or(0),
                    _ => 0,
                },
                KeySource::Hit { site } => match by_arg(site, i).and_then(|n| hit_arg(site, n)) {
                    Some(v) => v,
                    None => return false,
                },
            },
            BY_PROBE => match src {
                KeySource::Span { end_site, .. } => end_site as u64,
                KeySource::Hit { site } => site as u64,
            },
            BY_PID => pid_tgid >> 32,
            BY_TID => pid_tgid as u32 as u64,
            BY_COMM => {
                // The name's 16 bytes are two words, in memory order; the bound is for the
                // verifier (user space puts a comm where two words are left).
                if at + 1 < BY_WORDS {
                    // SAFETY: words `at` and `at + 1` are in bounds: 16 bytes of plain
                    // integers, where any bytes are valid.
                    let b = unsafe { &mut *(w.as_mut_ptr().add(at) as *mut [u8; 16]) };
                    current_comm_into(b);
                }
                continue;
            }
            // The string field is the caller's.
            _ => continue,
        };
        if let Some(x) = w.get_mut(at) {
            *x = v;
        }
    }
    true
}

/// The argument index key field `field` reads at `site`, if any.
#[inline(always)]
fn by_arg(site: u32, field: usize) -> Option<usize> {
    let n = *BY_SITES.get(site)?.get(field)? as usize;
    (n < MAX_ARGS).then_some(n)
}

/// Reads the arguments of the hit being handled (site `site`) into the scratch end-argument
/// slot, from the register copy the caller made.
#[inline(always)]
fn hit_args(site: u32) -> Option<&'static [u64; MAX_ARGS]> {
    let spec = SITES.get(site)?;
    let sc = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's slot; the caller is done with it or holds the same values.
    let sc = unsafe { &mut *sc };
    read_args(spec, &sc.regs, &mut sc.end_args);
    Some(&sc.end_args)
}

/// Argument `n` of the hit being handled (site `site`): one read, where `hit_args` reads all
/// of them (the verifier walks every argument's every operand form).
#[inline(always)]
fn hit_arg(site: u32, n: usize) -> Option<u64> {
    let spec = SITES.get(site)?;
    let d = spec.args.get(n)?;
    let sc = SCRATCH.get_ptr(0)?;
    // SAFETY: this CPU's slot, filled by the caller's register copy.
    let regs = unsafe { &(*sc).regs };
    Some(read_arg(d, regs))
}

/// `--hist --by`: counts a closed span of duration `dur` under its key. `f` is its frame,
/// `kept`/`id_key` where its start strings are kept (as for `strs::usdt_emit_strs`),
/// `end_site` the cookie of the end that closed it. 1 when the span went to its name's
/// "other" or "unkeyed" histogram.
#[no_mangle]
#[inline(never)]
pub extern "C" fn usdt_by_span(
    f: *const Frame,
    kept: u32,
    id_key: *const IdKey,
    end_site: u32,
    dur: u64,
) -> u32 {
    if f.is_null() {
        return 0;
    }
    // SAFETY: non-null, and the verifier checked at the call that it points to a Frame.
    let f = unsafe { &*f };
    let Some(cfg) = CONFIG.get(0) else {
        return 0;
    };
    if cfg.flags & CFG_AGG_BY == 0 {
        return 0;
    }
    let Some(agg) = AGG.get(0) else {
        return 0;
    };
    // Every span lands in a key's histogram or in its name's "other": user space sums them
    // into the name's duration histogram, which the kernel does not update under --by. So a
    // key that cannot be built (its scratch missing: never seen) goes to "other" too.
    let src = KeySource::Span { f, end_site };
    let h = if agg.str_keys != 0 {
        fresh_key(f.pair_id).map(|k| {
            fill_words(&mut k.val, agg, src);
            // str0 is the start's first string when the start has strings, else the end's
            // first.
            match crate::strs::kept_set(kept, id_key) {
                Some(set) => key_from_set(k, set),
                None if kept == 0 => {
                    if let Some(a) = hit_args(end_site) {
                        key_from_args(k, end_site, a);
                    }
                }
                None => {}
            }
            keyed(&BY_HISTS_STR, &BY_HISTS_STR_SPILL, k)
        })
    } else {
        fresh_num(f.pair_id).map(|k| {
            fill_words(&mut k.val, agg, src);
            keyed(&BY_HISTS, &BY_HISTS_SPILL, k)
        })
    };
    let (h, other) = match h {
        Some(Ok(h)) => (h, 0),
        Some(Err(Miss::NoRoom)) => {
            bump(&AGG_COUNTS, AGG_CNT_BY_UNKEYED);
            match BY_UNKEYED.get_ptr_mut(f.pair_id) {
                Some(h) => (h, 1),
                None => return 1,
            }
        }
        // A full map, or a key that could not be built (its scratch missing: never seen).
        _ => {
            bump(&AGG_COUNTS, AGG_CNT_BY_OTHER);
            match BY_OTHER.get_ptr_mut(f.pair_id) {
                Some(h) => (h, 1),
                None => return 1,
            }
        }
    };
    // SAFETY: this CPU's value of a live entry (or its slot of BY_OTHER).
    unsafe { &mut *h }.add(dur);
    other
}

/// The key's string from slot 0 of a span start's kept strings (nothing when it could not be
/// read: the key is then the empty string): as many bytes as were kept (`--str-max`), and
/// whether they are all of it.
#[inline(always)]
fn key_from_set(k: &mut ByKey, set: &usdt_trace_common::StrSet) {
    let state = set.state[0];
    if state != STRS_OK && state != STRS_CUT {
        return;
    }
    let n = set.len[0] as usize;
    // Kept strings are at most STR_MAX_CAP bytes; the bound is for the verifier.
    let n = if n > STR_MAX_CAP { STR_MAX_CAP } else { n };
    let Some(dst) = k.str.get_mut(..n) else {
        return;
    };
    if n > 0 {
        // SAFETY: a live map value's bytes; the helper bounds the copy by `dst`.
        if unsafe { bpf_probe_read_kernel_buf(set.data[0].as_ptr(), dst) }.is_err() {
            return;
        }
    }
    k.str_len = n as u32 + 1;
    if state == STRS_CUT {
        k.str_state = STRS_CUT as u32;
    }
}

/// The key's string from the first `--str` rule of `site`, read from the process with the
/// site's arguments `a` (NUL-terminated, or as long as its length argument says), keeping at
/// most `--str-max` bytes as the span strings do.
#[inline(always)]
fn key_from_args(k: &mut ByKey, site: u32, a: &[u64; MAX_ARGS]) {
    let (Some(spec), Some(cfg)) = (SITES.get(site), CONFIG.get(0)) else {
        return;
    };
    if spec.nstrs == 0 {
        return;
    }
    let d = spec.strs[0];
    let Some(&ptr) = a.get(d.arg as usize) else {
        return;
    };
    // From a map: the explicit bound keeps the slices below verifiable.
    let max = cfg.str_max as usize;
    let max = if max > STR_MAX_CAP { STR_MAX_CAP } else { max };
    if d.len_arg == STR_NONE {
        // One byte more than kept, and the helper's NUL: a string that fills `max + 1` is cut.
        let Some(dst) = k.str.get_mut(..max + 2) else {
            return;
        };
        // SAFETY: the helper checks the user address and bounds the copy by `dst`.
        let Ok(s) = (unsafe { bpf_probe_read_user_str_bytes(ptr as *const u8, dst) }) else {
            return;
        };
        if s.len() > max {
            // The byte past the kept ones is not part of the key: strings that begin alike
            // share the cut key whatever follows.
            if let Some(b) = k.str.get_mut(max) {
                *b = 0;
            }
            k.str_len = max as u32 + 1;
            k.str_state = STRS_CUT as u32;
        } else {
            k.str_len = s.len() as u32 + 1;
        }
        return;
    }
    let Some(&len) = a.get(d.len_arg as usize) else {
        return;
    };
    let (n, cut) = if len > max as u64 {
        (max, true)
    } else {
        (len as usize, false)
    };
    // Bounded again against a constant, as in `args::read_one` (see `forget`): 6.1 learns
    // nothing from `len > max` and refused the read's size as possibly negative.
    let n = forget(n as u64) as usize;
    if n > STR_MAX_CAP {
        return;
    }
    let Some(dst) = k.str.get_mut(..n) else {
        return;
    };
    // SAFETY: the helper checks the user address; the copy is bounded by `dst`.
    if n > 0 && unsafe { bpf_probe_read_user_buf(ptr as *const u8, dst) }.is_err() {
        return;
    }
    k.str_len = n as u32 + 1;
    if cut {
        k.str_state = STRS_CUT as u32;
    }
}

/// Why a key has no value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Miss {
    /// The main map is full: the span or hit goes to "other".
    Full,
    /// Neither map could take the key, though the main one is not full: "unkeyed".
    NoRoom,
}

/// `--count`: one hit at `site`, counted (and under its `--by` key). The caller copied the
/// registers into SCRATCH when `CFG_AGG_ARGS` or `CFG_FILTER` is set. 1 when filtered out.
#[no_mangle]
#[inline(never)]
pub extern "C" fn usdt_count(site: u32) -> u32 {
    let Some(cfg) = CONFIG.get(0) else {
        return 0;
    };
    if cfg.flags & CFG_FILTER != 0 {
        let Some(a) = hit_args(site) else {
            return 0;
        };
        if usdt_filter_rejects(site, a as *const _ as *const ArgWords) != 0 {
            return 1;
        }
    }
    bump(&SITE_COUNTS, site);
    if cfg.flags & CFG_AGG_BY == 0 {
        return 0;
    }
    let Some(agg) = AGG.get(0) else {
        return 0;
    };
    let src = KeySource::Hit { site };
    let ok: Result<(), Miss> = if agg.str_keys != 0 {
        let Some(k) = fresh_key(site) else {
            return 0;
        };
        // A probe without an argument a field keys on has only its total.
        if !fill_words(&mut k.val, agg, src) {
            return 0;
        }
        if let Some(a) = hit_args(site) {
            key_from_args(k, site, a);
        }
        count_keyed(&BY_COUNTS_STR, &BY_COUNTS_STR_SPILL, k)
    } else {
        let Some(k) = fresh_num(site) else {
            return 0;
        };
        if !fill_words(&mut k.val, agg, src) {
            return 0;
        }
        count_keyed(&BY_COUNTS, &BY_COUNTS_SPILL, k)
    };
    match ok {
        Ok(()) => {}
        Err(Miss::Full) => {
            bump(&AGG_COUNTS, AGG_CNT_COUNT_OTHER);
            bump(&BY_COUNT_OTHER, site);
        }
        Err(Miss::NoRoom) => {
            bump(&AGG_COUNTS, AGG_CNT_COUNT_UNKEYED);
            bump(&BY_COUNT_UNKEYED, site);
        }
    }
    0
}
