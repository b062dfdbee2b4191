//! Aligned text lines for a terminal.
//!
//! `END(s)` is when the span ended (or the event fired), in seconds since `watch` began
//! attaching, so rows come in the order they happened: a nested span ends, and prints, before
//! the span around it. Names and strings come from other people's files and processes, so
//! control characters are shown escaped, never sent to the terminal (see [`clean`]).

use super::decode::{cstr, string_of};
use super::{fmt_duration, ArgFmt, PairInfo, SiteInfo, Summary};
use usdt_trace_common::{EventRecord, RecordHeader, SpanRecord, MAX_ARGS};

fn text_args(out: &mut String, site: &SiteInfo, args: &[u64; MAX_ARGS], s: Option<&[u8]>) {
    use std::fmt::Write as _;
    out.push('(');
    for (i, fmt) in site.args.iter().enumerate().take(MAX_ARGS) {
        if i > 0 {
            out.push_str(", ");
        }
        if site.str_arg == Some(i) {
            match s {
                Some(b) => {
                    let _ = write!(out, "{:?}", String::from_utf8_lossy(b));
                }
                None => out.push_str("null"),
            }
            continue;
        }
        let _ = match fmt {
            ArgFmt::Unsigned => write!(out, "{}", args[i]),
            ArgFmt::Signed => write!(out, "{}", args[i] as i64),
            ArgFmt::Unreadable => write!(out, "?"),
        };
    }
    out.push(')');
}

/// True for characters that must not reach a terminal raw: C0 and C1 controls (escape
/// sequences, `\r`, bell), DEL, and the bidirectional overrides and isolates that reorder
/// what is shown.
pub fn is_unsafe_for_terminal(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every character unsafe for a terminal written as a `\u{..}` escape (a
/// backslash is doubled, so the escaped form is never ambiguous).
pub fn clean(s: &str) -> std::borrow::Cow<'_, str> {
    // Printable ASCII without a backslash, by far the common case, is decided byte by byte:
    // decoding chars made this a seventh of `list`'s time on 50,000 sites.
    if s.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'\\') {
        return std::borrow::Cow::Borrowed(s);
    }
    if !s.chars().any(|c| is_unsafe_for_terminal(c) || c == '\\') {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if is_unsafe_for_terminal(c) => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Column header for text mode.
pub fn text_header() -> String {
    format!(
        "{:<12} {:>7} {:>7} {:<15} {:<32} {:>10}  DETAILS\n",
        "END(s)", "PID", "TID", "COMM", "PROBE", "DURATION"
    )
}

fn text_prefix(h: &RecordHeader, t0: u64, ts: u64, probe: &str, dur: &str) -> String {
    let secs = ts.saturating_sub(t0) as f64 / 1e9;
    let comm = String::from_utf8_lossy(cstr(&h.comm))
        .chars()
        .map(|c| if is_unsafe_for_terminal(c) { '?' } else { c })
        .collect::<String>();
    format!(
        "{:<12.6} {:>7} {:>7} {:<15} {:<32} {:>10}  ",
        secs,
        h.pid,
        h.tid,
        comm,
        clean(probe),
        dur
    )
}

/// One text line for an event; `t0` is the monotonic time `watch` started.
pub fn event_text(site: &SiteInfo, r: &EventRecord, t0: u64) -> String {
    let mut s = text_prefix(
        &r.hdr,
        t0,
        r.hdr.ts_ns,
        &format!("{}:{}", site.provider, site.name),
        "-",
    );
    let st = (r.str_len > 0).then(|| string_of(r.str_len, &r.str));
    text_args(&mut s, site, &r.args, st);
    s.push('\n');
    s
}

/// One text line for a span: duration, arguments, and where the time went.
pub fn span_text(
    pair: &PairInfo,
    start: &SiteInfo,
    end: &SiteInfo,
    r: &SpanRecord,
    t0: u64,
) -> String {
    use std::fmt::Write as _;
    let dur = r.hdr.ts_ns.saturating_sub(r.start_ns);
    let mut s = text_prefix(
        &r.hdr,
        t0,
        r.hdr.ts_ns,
        &format!("{}:{}", pair.provider, pair.stem),
        &fmt_duration(dur),
    );
    let st = (r.str_len > 0).then(|| string_of(r.str_len, &r.str));
    text_args(&mut s, start, &r.args, st);
    // The span's one string is the start's, else the end's (a function's return value).
    let end_str = if start.str_arg.is_none() { st } else { None };
    // A span with several possible ends says which one closed it.
    if pair.ends.len() > 1 {
        s.push_str(" -> ");
        s.push_str(&clean(&end.name));
        text_args(&mut s, end, &r.end_args, end_str);
    } else if !end.args.is_empty() {
        s.push_str(" -> ");
        text_args(&mut s, end, &r.end_args, end_str);
    }
    if r.acct_valid != 0 && dur > 0 {
        let a = &r.acct;
        let pct = |v: u64| v as f64 * 100.0 / dur as f64;
        let _ = write!(
            s,
            "  cpu {:.0}% runq {:.0}% sleep {:.0}% io {:.0}%",
            pct(a.oncpu),
            pct(a.runq),
            pct(a.sleep),
            pct(a.io)
        );
        if r.polls > 0 {
            let _ = write!(
                s,
                " idle {:.0}% ({} poll{} on {} thread{})",
                pct(r.idle_ns),
                r.polls,
                if r.polls == 1 { "" } else { "s" },
                r.threads,
                if r.threads == 1 { "" } else { "s" }
            );
        }
        if r.longest_off_ns > 0 && (r.waker_pid != 0 || r.waker_comm[0] != 0) {
            let _ = write!(
                s,
                "  woken by {}/{} {:?} after {}",
                r.waker_pid,
                r.waker_tid,
                String::from_utf8_lossy(cstr(&r.waker_comm)),
                fmt_duration(r.longest_off_ns)
            );
        }
    }
    if r.start_tid != r.hdr.tid {
        let _ = write!(s, "  (started on tid {})", r.start_tid);
    }
    s.push('\n');
    s
}

/// The text summary at exit.
pub fn summary_text(s: &Summary) -> String {
    let d = &s.dropped;
    let dropped = if d.any() {
        format!(
            ", dropped {} (threads full), {} (id spans full), {} (depth), {} probe hits skipped by the kernel",
            d.threads_full, d.id_spans_full, d.depth, d.kernel_skipped
        )
    } else {
        String::new()
    };
    let filtered = if s.filtered > 0 {
        format!(", {} filtered out (--min/--filter)", s.filtered)
    } else {
        String::new()
    };
    format!(
        "{} spans, {} events, {} lost, {} unmatched starts, {} unmatched ends{dropped}{filtered} in {:.1}s\n",
        s.spans,
        s.events,
        s.lost,
        s.unmatched,
        s.unmatched_end,
        s.duration_ns as f64 / 1e9
    )
}
