//! A slice's debug annotations: the span's arguments and strings, its time split, the
//! tracing's own share, and a wait's waker.

use super::*;

pub(super) fn annotation(out: &mut Vec<u8>, name: &str, value: impl FnOnce(&mut Vec<u8>)) {
    pb::message(out, event::DEBUG_ANNOTATIONS, |a| {
        pb::string(a, annot::NAME, name.as_bytes());
        value(a);
    });
}

/// `arg0`, `arg1`, ... (prefix `end_arg` for end arguments) as typed annotations; unreadable
/// arguments are left out, the captured string is a string.
pub(super) fn args_annotations(
    out: &mut Vec<u8>,
    prefix: &str,
    site: &SiteInfo,
    args: &[u64; MAX_ARGS],
    strs: Option<&StrSet>,
) {
    for i in 0..site.args.len().min(MAX_ARGS) {
        let name = arg_key(site, prefix, i);
        match arg_value(site, i, args, strs) {
            ArgValue::Str { bytes, cut, .. } => {
                let v = str_value(bytes, cut);
                annotation(out, &name, |a| pb::string(a, annot::STRING, v.as_bytes()))
            }
            ArgValue::Unsigned(v) => annotation(out, &name, |a| pb::uint(a, annot::UINT, v)),
            ArgValue::Signed(v) => annotation(out, &name, |a| pb::int(a, annot::INT, v)),
            ArgValue::Unreadable => {}
        }
    }
}

pub(super) fn span_annotations(
    out: &mut Vec<u8>,
    start: &SiteInfo,
    end: &SiteInfo,
    r: &SpanRecord,
    strs: Option<&StrSet>,
    on_async: bool,
) {
    args_annotations(out, "arg", start, &r.args, strs);
    args_annotations(out, "end_arg", end, &r.end_args, strs);
    annotation(out, "end", |a| {
        pb::string(a, annot::STRING, end.name.as_bytes())
    });
    // Off its thread's track, the threads it started and ended on are only said here.
    if on_async || r.start_tid != r.hdr.tid {
        annotation(out, "start_tid", |a| {
            pb::uint(a, annot::UINT, r.start_tid as u64)
        });
        annotation(out, "end_tid", |a| {
            pb::uint(a, annot::UINT, r.hdr.tid as u64)
        });
    }
    if r.acct_valid != 0 {
        let x = &r.acct;
        for (k, v) in [
            ("oncpu_ns", x.oncpu),
            ("steal_ns", x.steal),
            ("offcpu_ns", x.runq + x.sleep + x.io),
            ("runq_ns", x.runq),
            ("sleep_ns", x.sleep),
            ("io_ns", x.io),
        ] {
            annotation(out, k, |a| pb::uint(a, annot::UINT, v));
        }
        // What the sleep and I/O waited on (as the NDJSON's `waits`), only for the kinds it
        // waited on: `wait_lock_ns` and `wait_lock_n`, and so on.
        for (name, ns, n, _) in crate::output::wait_kinds(x) {
            if ns == 0 && n == 0 {
                continue;
            }
            annotation(out, &format!("wait_{name}_ns"), |a| {
                pb::uint(a, annot::UINT, ns)
            });
            annotation(out, &format!("wait_{name}_n"), |a| {
                pb::uint(a, annot::UINT, u64::from(n))
            });
        }
        // A polled span: the split above is its polls' time; the rest was between polls.
        if r.polls > 0 {
            for (k, v) in [
                ("idle_ns", r.idle_ns),
                ("polls", r.polls as u64),
                ("threads", r.threads as u64),
            ] {
                annotation(out, k, |a| pb::uint(a, annot::UINT, v));
            }
        }
        if r.longest_off_ns > 0 && (r.waker_pid != 0 || r.waker_comm[0] != 0) {
            let mut w = cstr(&r.waker_comm).to_vec();
            let _ = write!(w, " {}/{}", r.waker_pid, r.waker_tid);
            annotation(out, "waker", |a| pb::string(a, annot::STRING, &w));
            annotation(out, "waker_off_ns", |a| {
                pb::uint(a, annot::UINT, r.longest_off_ns)
            });
        }
    }
}

/// The waker as the spans' `waker` annotation shows it: `comm pid/tid`, or an interrupt's
/// label alone.
pub(super) fn waker_label(w: &WaitRecord) -> Option<Vec<u8>> {
    let comm = cstr(&w.waker_comm);
    if w.waker_pid == 0 && comm.is_empty() {
        return None;
    }
    let mut s = comm.to_vec();
    if w.waker_pid != 0 {
        let _ = write!(s, " {}/{}", w.waker_pid, w.waker_tid);
    }
    Some(s)
}
