//! Spans paired on their thread: a frame pushed at the start, found and popped at the end
//! (recursion and early returns included), with the thread's time split read at both.

use super::*;

/// A span start paired per thread: push a frame.
pub(super) fn start_on_thread<const S: bool>(hit: &Hit<S>) -> Result<(), ()> {
    let Some(st) = thread_state(hit.tid) else {
        count(CNT_THREADS_FULL);
        note_stateless_start(hit.tid);
        return Ok(());
    };
    // One reading of the CPU's steal counter (four kernel reads) for both uses below.
    let steal = if hit.split() {
        hit.steal()
    } else {
        CpuSteal::UNKNOWN
    };
    if hit.split() {
        sched::resume_accounting(st, hit.now, steal, hit.tgid);
        sched::catch_up(st, hit.now);
    }
    // Counted before the snapshot: the spans open around this one hold the hit whole; this
    // one does not (a span's own start and end probes cost it only the small parts of their
    // traps after and before its two timestamps: measured, a leaf whose entry and `ret` are
    // both single-stepped reads 0.8 µs where each step costs several).
    if hit.split() {
        st.acct.add_probe(hit.spec.probe_ns);
    }
    let acct = if hit.split() {
        acct_now(hit, st, steal)
    } else {
        None
    };
    // A full stack drops the start (and, through the thread's overflow count, its end).
    let Some(depth) = st.push() else {
        count(CNT_DEPTH_START);
        return Ok(());
    };
    // `get_mut` rather than indexing: the bound the verifier needs on the map-held depth,
    // without a panic path.
    let Some(f) = st.frames.get_mut(depth) else {
        return Ok(());
    };
    let with_args = hit.keeps_args();
    open_frame(hit, f, acct, with_args);
    // Only spans with a string argument touch the string map. `has_strs` keeps the depth + 1,
    // to find them again at the end.
    if with_args && hit.spec.nstrs > 0 {
        let key = str_key_thread(hit.tid, depth as u32);
        if usdt_keep_strs(hit.cookie, words(&f.args), &key, NO_ID_SLOT) != 0 {
            f.has_strs = depth as u32 + 1;
        }
    }
    Ok(())
}

/// A span end paired per thread: pop to the innermost open frame of the span's name.
pub(super) fn end_on_thread<const S: bool>(hit: &Hit<S>) -> Result<(), ()> {
    // A tail-called function's `ret` closes a span only when that span's call is there.
    let tail = hit.spec.end_sp == END_SP_TAIL;
    let Some(st) = existing_thread(hit.tid) else {
        if !tail {
            stateless_end(hit.tid);
        }
        return Ok(());
    };
    // Counted for the spans open around it; the span it closes leaves it out (`own_end`).
    if hit.split() {
        st.acct.add_probe(hit.spec.probe_ns);
    }
    // Past the stack, an end belongs to the innermost dropped start, never to a frame below.
    if !tail && st.pop_overflow() {
        count(CNT_DEPTH_END);
        return Ok(());
    }
    let sp = hit.start_sp();
    // Hidden from the verifier before it is tested (see `opaque`): otherwise each depth the
    // search can end at is a verifier path of its own through all that follows.
    let found = opaque(st.find_open_raw(hit.spec.pair_id, sp) as u64, OPAQUE_UPROBE)
        .unwrap_or(MAX_DEPTH as u64) as usize;
    if found >= MAX_DEPTH {
        if !tail {
            stateless_end(hit.tid);
        }
        return Ok(());
    }
    // At a tail-called function's `ret`, that function may still be open right above at the
    // same stack pointer: it returns through this same instruction (its own end comes next),
    // so it stays, and this frame is marked closed for the end below to pop.
    // The frame above's index hidden from LLVM (see `forget`), so that `get` tests it against
    // the constant bound: LLVM kept only `found != MAX_DEPTH - 1`, from which 6.1 learns no
    // bound, and refused the access.
    let keep_above = tail
        && found + 1 < st.depth as usize
        && st
            .frames
            .get(forget(found as u64 + 1) as usize)
            .is_some_and(|a| a.sp == sp);
    if !keep_above {
        // Frames above the one closed never got their end.
        count_n(
            CNT_UNMATCHED_START,
            (st.depth as u64).saturating_sub(found as u64 + 1),
        );
    }
    // Before the pop: the frame being closed takes part in the repair's waker bookkeeping.
    if hit.split() {
        sched::catch_up(st, hit.now);
    }
    if !keep_above {
        st.depth = found as u32;
    }
    let acct_end = if hit.split() {
        acct_now(hit, st, hit.steal())
    } else {
        None
    };
    // Bounded again where it is used (see `forget`): LLVM keeps `found` in a stack slot
    // across the code above, and 6.12 reloaded it with its signed bounds only, refusing the
    // frame's address computed from it.
    let found = forget(found as u64) as usize;
    // `get` rather than indexing: no bounds-check panic path for the verifier to reject.
    let Some(f) = st.frames.get_mut(found) else {
        return Ok(());
    };
    let acct = acct_end.and_then(|end| span_split(hit, end, &f.acct_start));
    close_span(hit, f, None, acct, None, None);
    drop_strs(f.has_strs, core::ptr::null());
    if keep_above {
        f.pair_id = PAIR_CLOSED;
    } else {
        st.pop_closed();
    }
    Ok(())
}

/// A span's split without its own end's probe hit, which was counted (for the spans around it)
/// before the end's snapshot.
#[inline(always)]
pub(super) fn own_end(mut a: Acct, cost_ns: u32) -> Acct {
    a.probe_hits = a.probe_hits.wrapping_sub(1);
    a.probe_ns = a.probe_ns.wrapping_sub(cost_ns as u64);
    a
}

/// Thread `st`'s totals now (`acct_at`), in this CPU's `ACCT_SCRATCH` slot for them, for a
/// poll's enter or exit or a span's end: built in place, not held in registers (see `span_split`).
#[inline(always)]
pub(super) fn acct_now<const S: bool>(
    hit: &Hit<S>,
    st: &ThreadState,
    steal: CpuSteal,
) -> Option<&'static Acct> {
    let a = acct_scratch(ACCT_NOW)?;
    copy_words_of(a, &st.acct);
    st.acct_at_onto(a, hit.now, steal);
    Some(a)
}

/// A closing span's time split (`end`: its thread's totals now, less `start`, less its own end's hit), in
/// this CPU's `ACCT_SCRATCH` slot rather than in registers: held across the record's helper
/// calls, its 14 words were spilled to the stack, and with the global functions called
/// beneath, the call chain's frames passed the 512 bytes that kernels before 6.13 or so
/// allow (6.12: "combined stack size of 2 calls is 576").
#[inline(always)]
pub(super) fn span_split<const S: bool>(
    hit: &Hit<S>,
    end: &Acct,
    start: &Acct,
) -> Option<&'static Acct> {
    let a = acct_scratch(ACCT_SPLIT)?;
    *a = own_end(end.since(start), hit.spec.probe_ns);
    Some(a)
}

/// An end with no open frame: the end of a start dropped for a full THREADS map, or unmatched.
#[inline(always)]
pub(super) fn stateless_end(tid: u32) {
    if take_stateless_start(tid) {
        count(CNT_THREADS_FULL_END);
    } else {
        count(CNT_UNMATCHED_END);
    }
}

/// [`release_id_span`] for `tid`, through `mine` (the state of `my_tid`, already looked up)
/// when it is that thread.
#[inline(always)]
pub(super) fn release_on(tid: u32, my_tid: u32, mine: &mut Option<&'static mut ThreadState>) {
    if tid == my_tid {
        if let Some(st) = mine.as_deref_mut() {
            if st.id_open > 0 {
                st.id_open -= 1;
            }
        }
    } else {
        release_id_span(tid);
    }
}
