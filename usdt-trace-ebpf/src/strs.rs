//! `--str` strings: a span start's kept in `STRS` until its end, and every record's strings
//! sent as a record of their own just before it.
//!
//! Both entry points are global BPF functions (exported, not inlined): the verifier checks
//! each once, on its own, instead of once per path that reaches a start or a record point, and
//! the uprobe program is close to its budget. Their pointer arguments point to structs of
//! scalars only (the verifier sizes them from BTF and treats what they hold as numbers), so
//! the site's spec is looked up here by cookie rather than passed.

use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use usdt_trace_common::{
    str_key_thread, IdKey, RecordKind, StrSet, StrsRecord, CNT_STRS_DROPPED, KEPT_IN_SLOT,
    MAX_STRS, STRS_NONE, STRS_RECORD_LOST, STRS_RECORD_SENT, STR_SLOT,
};

use crate::{
    args::{read_args, read_strs, ArgWords},
    maps::{count, CONFIG, EVENTS, ID_STRS, SCRATCH, SITES, STRS, STR_ARGS, STR_SCRATCH},
};

/// Reads the strings of the span start at site `cookie` (arguments `args`) and keeps them
/// until its end: in `ID_STRS` at `slot` when the span holds that slot of `ID_SLOTS` (u32::MAX:
/// it holds none), else in `STRS` under `key`. Returns where (`KEPT_IN_SLOT`, or 1 for
/// `STRS`: `KEPT_IN_MAP` for a span paired by id), 0 when not kept (a full map costs the span
/// its start strings, nothing else).
#[no_mangle]
#[inline(never)]
pub extern "C" fn usdt_keep_strs(
    cookie: u32,
    args: *const ArgWords,
    key: *const IdKey,
    slot: u32,
) -> u32 {
    // A global function's pointers may be NULL as far as the verifier knows.
    if args.is_null() || key.is_null() {
        return 0;
    }
    let (Some(spec), Some(cfg)) = (SITES.get(cookie), CONFIG.get(0)) else {
        return 0;
    };
    // SAFETY: `args` and `key` are non-null and checked by the verifier at the call.
    let (args, key) = unsafe { (&(*args).args, &*key) };
    // In place, in the slot's entry (absent when user space sized the map to 1: no --str).
    if let Some(p) = ID_STRS.get_ptr_mut(slot) {
        // SAFETY: the entry of a slot this span holds: nothing else writes it meanwhile.
        let set = unsafe { &mut *p };
        set.state = [STRS_NONE; MAX_STRS];
        read_strs(spec, args, cfg.str_max, set);
        return KEPT_IN_SLOT;
    }
    let Some(p) = STR_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's slot, which nothing else uses while this program runs.
    let set = unsafe { &mut *p };
    set.state = [STRS_NONE; MAX_STRS];
    read_strs(spec, args, cfg.str_max, set);
    // The key from the stack: kernels before 6.4 (or so) take a map key from the stack or a
    // map value only, not from a global function's pointer argument (6.1: "R2 type=mem
    // expected=fp, ..."). Read volatile, so that LLVM does not pass `key` itself again.
    // SAFETY: `key` points to an IdKey (checked above and by the verifier).
    let key: IdKey = unsafe { core::ptr::read_volatile(key) };
    // Inserted from the scratch map by reference: 4 KB does not go through the stack.
    if STRS.insert(&key, &*set, 0).is_ok() {
        return 1;
    }
    // The span goes on without its start strings: said in the summary, not left to look
    // like strings the kernel could not read.
    count(CNT_STRS_DROPPED);
    0
}

/// Where a closed span's start strings are kept: `kept` is its frame's `has_strs` (0: none;
/// for a span paired per thread, its depth + 1), `id_key` its id key (NULL: paired per thread).
#[inline(always)]
fn kept_key(kept: u32, id_key: *const IdKey) -> Option<IdKey> {
    if kept == 0 {
        return None;
    }
    if id_key.is_null() {
        return Some(str_key_thread(
            bpf_get_current_pid_tgid() as u32,
            kept.wrapping_sub(1),
        ));
    }
    // SAFETY: non-null, and checked by the verifier at the call.
    Some(unsafe { *id_key })
}

/// Whether a span's start strings are in its slot's entry of `ID_STRS` (only an id-paired
/// span's can be: for one paired per thread, `kept` is a depth + 1 that may equal it).
#[inline(always)]
fn kept_in_slot(kept: u32, id_key: *const IdKey) -> bool {
    kept == KEPT_IN_SLOT && !id_key.is_null()
}

/// A closed span's kept start strings (`kept`, `id_key`: as for [`usdt_emit_strs`]), if any.
#[inline(always)]
pub fn kept_set(kept: u32, id_key: *const IdKey) -> Option<&'static StrSet> {
    let key = kept_key(kept, id_key)?;
    if kept_in_slot(kept, id_key) {
        // The entry of the slot the span still holds (it is freed after this).
        return ID_STRS.get(key.slot());
    }
    // SAFETY: a live map value, read before this program returns.
    unsafe { STRS.get(&key) }
}

/// Forgets a closed span's kept start strings, if it has any: the test inline, so a span
/// without strings (nearly all) makes no call.
#[inline(always)]
pub fn drop_strs(kept: u32, id_key: *const IdKey) {
    if kept != 0 {
        usdt_drop_strs(kept, id_key);
    }
}

/// Forgets a closed span's kept start strings (`kept`, `id_key`: as for [`usdt_emit_strs`]).
#[no_mangle]
#[inline(never)]
pub extern "C" fn usdt_drop_strs(kept: u32, id_key: *const IdKey) -> u32 {
    // Strings kept in a slot's entry stay there: the slot's next tenant writes its own states.
    if kept_in_slot(kept, id_key) {
        return 0;
    }
    if let Some(key) = kept_key(kept, id_key) {
        let _ = STRS.remove(&key);
    }
    0
}

/// A span's kept start strings into its record: the states and lengths, and of each string
/// only its bytes (user space reads no more than `len`). A whole `StrSet` is 4 KB; copying it
/// was a tenth of a traced `--str` span's cost for strings of a few dozen bytes.
#[inline(always)]
fn copy_kept(s: &StrSet, dst: &mut StrSet) {
    dst.state = s.state;
    dst.len = s.len;
    for slot in 0..MAX_STRS {
        if s.state[slot] == STRS_NONE {
            continue;
        }
        // One helper call per string, where a loop of word copies would unroll into a
        // thousand instructions, of one of four constant sizes: LLVM rewrites a length test
        // into tests of merged loads or masks, and the verifier then cannot bound a variable
        // size by the slot (it refused every spelling tried).
        let n = s.len[slot] as usize;
        let size = if n <= 32 {
            32
        } else if n <= 128 {
            128
        } else if n <= 512 {
            512
        } else {
            STR_SLOT
        };
        // SAFETY: `size` bytes fit in both slots (at most STR_SLOT); the helper checks the
        // source.
        let _ = unsafe {
            aya_ebpf::helpers::generated::bpf_probe_read_kernel(
                dst.data[slot].as_mut_ptr() as *mut core::ffi::c_void,
                size as u32,
                s.data[slot].as_ptr() as *const core::ffi::c_void,
            )
        };
    }
}

/// Sends the strings of the event or span at site `cookie` at `ts` as a record of their own,
/// just before its own record (user space joins the two by thread and time): a span's start
/// strings when `kept` (its frame's `has_strs`: 0 none, else for a span paired per thread its
/// depth + 1; `id_key` the key of one paired by id, NULL for one paired per thread), then the
/// site's own, read from `args`, or when `args` is NULL from the arguments read here (from the
/// register copy in `SCRATCH`: read here, verified once, rather than at every end).
/// `STRS_RECORD_SENT` when sent, `STRS_RECORD_LOST` when the ring buffer had no room.
#[no_mangle]
#[inline(never)]
pub extern "C" fn usdt_emit_strs(
    cookie: u32,
    ts: u64,
    kept: u32,
    id_key: *const IdKey,
    args: *const ArgWords,
) -> u32 {
    let (Some(spec), Some(cfg), Some(scratch), Some(own)) = (
        SITES.get(cookie),
        CONFIG.get(0),
        SCRATCH.get_ptr(0),
        STR_ARGS.get_ptr_mut(0),
    ) else {
        return 0;
    };
    // The arguments read here go to a per-CPU map, not this function's stack: the uprobe
    // program's own frame and this one's must fit in 512 bytes together, and kernels before
    // 6.13 or so give it no stack of its own.
    // SAFETY: this CPU's slot, used only by this function while this program runs.
    let own = unsafe { &mut *own };
    let args = if args.is_null() {
        // SAFETY: this CPU's scratch slot, holding this hit's register copy.
        let regs = unsafe { &(*scratch).regs };
        // Zeroed first, as a fresh array was: the words past the site's arguments read 0.
        crate::store::zero_args(own);
        read_args(spec, regs, own);
        &*own
    } else {
        // SAFETY: non-null and checked by the verifier at the call.
        unsafe { &(*args).args }
    };
    let Some(mut entry) = EVENTS.reserve::<StrsRecord>(0) else {
        // Counted apart from lost spans and events: the record it belongs to may still fit,
        // and says that its strings were lost.
        count(usdt_trace_common::CNT_STRS_LOST);
        return STRS_RECORD_LOST;
    };
    // SAFETY: a StrsRecord-sized, aligned slot that only we write; `strs.state` says which
    // slots user space reads, and is written.
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    let pid_tgid = bpf_get_current_pid_tgid();
    rec.hdr.kind = RecordKind::STRS;
    rec.hdr.site = cookie;
    rec.hdr.pid = (pid_tgid >> 32) as u32;
    rec.hdr.tid = pid_tgid as u32;
    rec.hdr.ts_ns = ts;
    usdt_trace_common::zero_comm(&mut rec.hdr.comm);
    let start = kept_set(kept, id_key);
    match start {
        Some(s) => copy_kept(s, &mut rec.strs),
        None => rec.strs.state = [STRS_NONE; MAX_STRS],
    }
    read_strs(spec, args, cfg.str_max, &mut rec.strs);
    // No wakeup: the event or span record right behind it decides that.
    entry.submit(aya_ebpf::bindings::BPF_RB_NO_WAKEUP as u64);
    STRS_RECORD_SENT
}
