//! Spans paired by an id argument rather than by thread (`--span` with a key, id spans):
//! a slot per open id, claimed with a compare-and-swap, found again by the end's id.

use super::*;

/// An open id-paired span, found: where its frame is, and the `ID_SLOTS` slot holding it
/// (null when it is in `ID_SPANS`).
pub(super) struct IdSpan {
    pub(super) span: *mut IdFrame,
    pub(super) slot: *mut IdSlot,
}

impl IdSpan {
    /// The span is over: its slot is free again (after every read of it: the exchange is a
    /// barrier), or its hash entry is deleted.
    #[inline(always)]
    pub(super) fn release(&self, key: &IdKey) {
        if self.slot.is_null() {
            let _ = ID_SPANS.remove(key);
        } else {
            // SAFETY: a live ID_SLOTS value that this span owns.
            publish(unsafe { &mut (*self.slot).state }, ID_SLOT_FREE);
        }
    }
}

/// The open span under `key`: in its slot when it holds the slot, else in `ID_SPANS`.
#[inline(always)]
pub(super) fn find_id_span(key: &IdKey) -> Option<IdSpan> {
    if let Some(slot) = ID_SLOTS.get_ptr_mut(key.slot()) {
        // SAFETY: a live array value. A slot in state OPEN is only written by the span that
        // holds it, whose markers run one after another; the key then is the owner's.
        let sl = unsafe { &mut *slot };
        // SAFETY: `state` is a field of the live value above; read volatile because another
        // CPU may change it (atomically) between reads.
        let state = unsafe { core::ptr::read_volatile(&sl.state) };
        if state == ID_SLOT_OPEN && sl.key == *key {
            return Some(IdSpan {
                span: &mut sl.span,
                slot,
            });
        }
    }
    ID_SPANS.get_ptr_mut(key).map(|span| IdSpan {
        span,
        slot: core::ptr::null_mut(),
    })
}

/// The slot for a span starting under `key`, taken: free, or already held by the same key (a
/// span id started again while open replaces the open one, as the hash insert did). None when
/// another open span holds it.
#[inline(always)]
pub(super) fn claim_slot(key: &IdKey) -> Option<*mut IdSlot> {
    let slot = ID_SLOTS.get_ptr_mut(key.slot())?;
    // SAFETY: a live array value; `state` is only changed atomically.
    let sl = unsafe { &mut *slot };
    if cas(&mut sl.state, ID_SLOT_FREE, ID_SLOT_FILLING) {
        sl.key = *key;
        return Some(slot);
    }
    // SAFETY: as above: a field of a live value, changed only atomically.
    let state = unsafe { core::ptr::read_volatile(&sl.state) };
    (state == ID_SLOT_OPEN && sl.key == *key).then_some(slot)
}

/// A span start that carries an id: store the frame under (pair, process, id), in its slot
/// of `ID_SLOTS` or, when another span holds that, in `ID_SPANS`.
pub(super) fn start_by_id<const S: bool>(hit: &Hit<S>) -> Result<(), ()> {
    // Keep this thread's accounting running so a span that also ends here gets a time split.
    let mut acct_start = None;
    // No split (`--no-sched`): the start touches no thread state, and its end none either.
    if let Some(st) = hit.split().then(|| thread_state(hit.tid)).flatten() {
        let steal = hit.steal();
        sched::resume_accounting(st, hit.now, steal, hit.tgid);
        sched::catch_up(st, hit.now);
        // As for a span paired per thread: its own start's hit is not inside it.
        st.acct.add_probe(hit.spec.probe_ns);
        // In the scratch map (`acct_now`): on the stack, held across the calls below, its
        // words were spilled, and read even when not written (6.1 refuses reads of
        // uninitialized stack).
        acct_start = acct_now(hit, st, steal);
        st.id_open += 1;
    }
    let key = hit.read_id_key();
    let slot = claim_slot(&key).unwrap_or(core::ptr::null_mut());
    let f = if slot.is_null() {
        // Built in per-CPU scratch, then inserted by reference: a frame is too big for the
        // BPF stack.
        // SAFETY: this CPU's slot, which nothing else uses while this program runs.
        unsafe { &mut *FRAME_SCRATCH.get_ptr_mut(0).ok_or(())? }
    } else {
        // SAFETY: the slot is ours (FILLING, or OPEN under our key): nothing else writes it.
        unsafe { &mut (*slot).span }
    };
    let with_args = hit.keeps_args();
    open_frame(hit, &mut f.frame, acct_start, with_args);
    // The frame's previous tenant's polls are still there. (Without a split polls are never
    // read.)
    if hit.split() {
        zero_words(&mut f.poll);
    }
    if with_args && hit.spec.nstrs > 0 {
        // In the slot's own entry of ID_STRS when the span holds a slot.
        let at = if slot.is_null() {
            NO_ID_SLOT
        } else {
            key.slot()
        };
        f.frame.has_strs = usdt_keep_strs(hit.cookie, words(&f.frame.args), &key, at);
    }
    if !slot.is_null() {
        // SAFETY: as above; from here its end (on any CPU) may find it.
        publish(unsafe { &mut (*slot).state }, ID_SLOT_OPEN);
        return Ok(());
    }
    if ID_SPANS.insert(&key, &*f, 0).is_err() {
        drop_strs(f.frame.has_strs, &key);
        // The map is full: the span is dropped, and its id remembered so its end is too.
        count(CNT_ID_FULL);
        let _ = ID_DROPPED.insert(&key, &1, 0);
        release_id_span(hit.tid);
    }
    Ok(())
}

/// A span end that carries an id: close the frame stored under the same id.
pub(super) fn end_by_id<const S: bool>(
    hit: &Hit<S>,
    end_args: &mut [u64; MAX_ARGS],
) -> Result<(), ()> {
    // Records carry the end arguments, so they are read once, into scratch; histograms need
    // only the id.
    let (key, end_args) = if hit.hist() {
        (hit.read_id_key(), None)
    } else {
        hit.read_args(end_args);
        (hit.id_key(end_args), Some(&*end_args))
    };
    let Some(found) = find_id_span(&key) else {
        // SAFETY: only the entry's presence is tested.
        if unsafe { ID_DROPPED.get(&key) }.is_some() {
            let _ = ID_DROPPED.remove(&key);
            count(CNT_ID_FULL_END);
        } else {
            count(CNT_UNMATCHED_END);
        }
        return Ok(());
    };
    // SAFETY: a live map value, written only by this span's own markers, which run one after
    // another. A hash entry stays valid until we return even though we delete it below (hash
    // map values are freed after an RCU grace period); a slot is handed back only at the end.
    let IdFrame { frame: f, poll } = unsafe { &mut *found.span };
    // This thread's state, looked up once: in the common case the span started here too, and
    // the release, the poll's close and the time split below are all about it.
    let split = hit.split();
    let mut mine = if split {
        existing_thread(hit.tid)
    } else {
        None
    };
    if split {
        if let Some(st) = mine.as_deref_mut() {
            st.acct.add_probe(hit.spec.probe_ns);
        }
        release_on(f.tid, hit.tid, &mut mine);
    }
    // An end inside a poll (the future ended its span before returning Ready) closes the poll.
    // Without a split no poll is entered, or read: the frame's were not even zeroed.
    if split && poll.enter_tid != 0 {
        let tid = poll.enter_tid;
        if tid == hit.tid {
            if let Some(st) = mine.as_deref_mut() {
                sched::catch_up(st, hit.now);
                if let Some(a) = acct_now(hit, st, hit.steal()) {
                    poll.exit(tid, hit.now, a);
                }
            }
        }
        release_on(tid, hit.tid, &mut mine);
    }
    let (acct, poll) = if !split || hit.spec.flags & SPEC_NO_THREAD_SPLIT != 0 {
        (None, None)
    } else if poll.polls > 0 {
        // Polled: the polling threads' time while entered, the rest idle.
        (Some(&poll.acct), Some(&*poll))
    } else if f.tid == hit.tid {
        // Not polled: a split only means something when one thread ran it from start to end.
        let acct = mine.and_then(|st| {
            sched::catch_up(st, hit.now);
            acct_now(hit, st, hit.steal()).and_then(|end| span_split(hit, end, &f.acct_start))
        });
        (acct, None)
    } else {
        (None, None)
    };
    close_span(hit, f, Some(&key), acct, end_args, poll);
    drop_strs(f.has_strs, &key);
    found.release(&key);
    Ok(())
}

/// An id-paired span that `tid` opened has ended (or was never stored).
#[inline(always)]
pub(super) fn release_id_span(tid: u32) {
    if let Some(st) = existing_thread(tid) {
        if st.id_open > 0 {
            st.id_open -= 1;
        }
    }
}
