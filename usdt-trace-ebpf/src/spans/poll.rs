//! Polled spans (async runtimes): the time a span's task is polled, entered and left on
//! whatever thread polls it.

use super::*;

/// A poll marker's span: the open id-paired span under the id the marker carries. A marker
/// of a span that is not open (started before tracing, or dropped) is ignored: it has no
/// duration to split.
#[inline(always)]
pub(super) fn polled_span<const S: bool>(hit: &Hit<S>) -> Option<&'static mut PollAcct> {
    let found = find_id_span(&hit.read_id_key())?;
    // SAFETY: a live map value (see end_by_id); only this span's markers write it, in order.
    Some(unsafe { &mut (*found.span).poll })
}

/// `<name>__enter(span_id)`: the span runs on this thread until its exit marker. Polls only
/// split a span's time, so without a split they are ignored.
pub(super) fn poll_enter<const S: bool>(hit: &Hit<S>) -> Result<(), ()> {
    if !hit.split() {
        return Ok(());
    }
    let Some(p) = polled_span(hit) else {
        return Ok(());
    };
    let Some(st) = thread_state(hit.tid) else {
        count(CNT_THREADS_FULL);
        return Ok(());
    };
    // An exit lost on another thread: that thread's hold on accounting ends here.
    let prev = p.enter_tid;
    if prev != 0 && prev != hit.tid {
        release_id_span(prev);
        p.enter_tid = 0;
    }
    let steal = hit.steal();
    sched::resume_accounting(st, hit.now, steal, hit.tgid);
    sched::catch_up(st, hit.now);
    st.acct.add_probe(hit.spec.probe_ns);
    let Some(a) = acct_now(hit, st, steal) else {
        return Ok(());
    };
    p.enter(hit.tid, hit.now, a);
    // The entered span keeps this thread's accounting running, like an open frame does.
    if prev != hit.tid {
        st.id_open += 1;
    }
    Ok(())
}

/// `<name>__exit(span_id)`: the poll on this thread is over.
pub(super) fn poll_exit<const S: bool>(hit: &Hit<S>) -> Result<(), ()> {
    if !hit.split() {
        return Ok(());
    }
    let Some(p) = polled_span(hit) else {
        return Ok(());
    };
    let Some(st) = existing_thread(hit.tid) else {
        return Ok(());
    };
    sched::catch_up(st, hit.now);
    st.acct.add_probe(hit.spec.probe_ns);
    let Some(a) = acct_now(hit, st, hit.steal()) else {
        return Ok(());
    };
    if p.exit(hit.tid, hit.now, a) && st.id_open > 0 {
        st.id_open -= 1;
    }
    Ok(())
}
