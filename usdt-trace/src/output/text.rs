//! Aligned text lines for a terminal.
//!
//! `END(s)` is when the span ended (or the event fired), in seconds since `watch` began
//! attaching, so rows come in the order they happened: a nested span ends, and prints, before
//! the span around it. Names and strings come from other people's files and processes, so
//! control characters are shown escaped, never sent to the terminal (see [`clean`]).

use super::{arg_value, fmt_duration, ArgValue, PairInfo, SiteInfo, Summary};
use crate::plan::record::cstr;
use usdt_trace_common::{EventRecord, RecordHeader, SpanRecord, StrSet, MAX_ARGS};

/// A probe's arguments: `(1, "GET", 3)`, or with names `(id=1, method="GET", arg2=3)`.
fn text_args(out: &mut String, site: &SiteInfo, args: &[u64; MAX_ARGS], strs: Option<&StrSet>) {
    use std::fmt::Write as _;
    let named = !site.names.is_empty();
    out.push('(');
    for i in 0..site.args.len().min(MAX_ARGS) {
        if i > 0 {
            out.push_str(", ");
        }
        if named {
            match site.arg_name(i) {
                Some(n) => out.push_str(&clean(n)),
                None => {
                    let _ = write!(out, "arg{i}");
                }
            }
            out.push('=');
        }
        let _ = match arg_value(site, i, args, strs) {
            ArgValue::Unsigned(v) => write!(out, "{v}"),
            ArgValue::Signed(v) => write!(out, "{v}"),
            ArgValue::Unreadable => write!(out, "?"),
            ArgValue::Str { bytes, cut, .. } => {
                quoted(out, bytes);
                // Outside the quotes, so it cannot be mistaken for the string's own bytes.
                if cut {
                    out.push('…');
                }
                Ok(())
            }
        };
    }
    out.push(')');
}

/// `bytes` in double quotes, every byte recoverable: `"` and `\` escaped, characters unsafe
/// for a terminal as `\u{..}` (`\n`, `\t`, `\r` for those), bytes that are not UTF-8 as `\xNN`.
pub fn quoted(out: &mut String, bytes: &[u8]) {
    use std::fmt::Write as _;
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if is_unsafe_for_terminal(c) => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
}

pub use crate::util::terminal::{clean, is_unsafe_for_terminal};

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
pub fn event_text(site: &SiteInfo, r: &EventRecord, strs: Option<&StrSet>, t0: u64) -> String {
    let mut s = text_prefix(
        &r.hdr,
        t0,
        r.hdr.ts_ns,
        &format!("{}:{}", site.provider, site.name),
        "-",
    );
    text_args(&mut s, site, &r.args, strs);
    if super::strs_lost(r.has_strs, strs) {
        s.push_str(STRS_LOST_NOTE);
    }
    s.push('\n');
    s
}

/// After a record whose strings were lost (its string arguments show their pointers).
const STRS_LOST_NOTE: &str = "  [strings lost: ring buffer full]";

/// One text line for a span: duration, arguments, and where the time went.
pub fn span_text(
    pair: &PairInfo,
    start: &SiteInfo,
    end: &SiteInfo,
    r: &SpanRecord,
    strs: Option<&StrSet>,
    t0: u64,
    split: bool,
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
    text_args(&mut s, start, &r.args, strs);
    // A span with several possible ends says which one closed it.
    if pair.ends.len() > 1 {
        s.push_str(" -> ");
        s.push_str(&clean(&end.name));
        text_args(&mut s, end, &r.end_args, strs);
    } else if !end.args.is_empty() {
        s.push_str(" -> ");
        text_args(&mut s, end, &r.end_args, strs);
    }
    if super::strs_lost(r.has_strs, strs) {
        s.push_str(STRS_LOST_NOTE);
    }
    if r.acct_valid != 0 && dur > 0 {
        let a = &r.acct;
        let pct = |v: u64| v as f64 * 100.0 / dur as f64;
        // `sleep 40% (lock 31%, net 9%)`: the kinds of wait inside each part, when any.
        let kinds = |in_sleep: bool| -> String {
            let v: Vec<String> = super::wait_kinds(a)
                .iter()
                .filter(|k| k.3 == in_sleep && k.1 > 0)
                .map(|k| format!("{} {:.0}%", k.0, pct(k.1)))
                .collect();
            if v.is_empty() {
                String::new()
            } else {
                format!(" ({})", v.join(", "))
            }
        };
        // The host's steal only where there was any (never on bare metal).
        let steal = if a.steal > 0 {
            format!(" steal {:.0}%", pct(a.steal))
        } else {
            String::new()
        };
        let _ = write!(
            s,
            "  cpu {:.0}%{steal} runq {:.0}% sleep {:.0}%{} io {:.0}%{}",
            pct(a.oncpu),
            pct(a.runq),
            pct(a.sleep),
            kinds(true),
            pct(a.io),
            kinds(false)
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
        // The tracing's own share, where it is a visible one (a tenth of the span or more):
        // an estimate from the probe hits inside the span, never subtracted from it.
        if super::tracing_visible(a.probe_ns, dur) {
            let _ = write!(
                s,
                "  tracing ≈{} ({} probe hit{})",
                fmt_duration(a.probe_ns),
                a.probe_hits,
                if a.probe_hits == 1 { "" } else { "s" }
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
    // The run splits spans (no --no-sched) but this one has none: say why, rather than
    // leave it looking like a span with nothing to split.
    if split && r.acct_valid == 0 && dur > 0 {
        let why = if start.goroutine {
            "a goroutine's, whose threads ran other goroutines meanwhile"
        } else {
            no_split_reason(r)
        };
        let _ = write!(s, "  no split: {why}");
    }
    if r.start_tid != r.hdr.tid {
        let _ = write!(s, "  (started on tid {})", r.start_tid);
    }
    s.push('\n');
    s
}

/// Why a span of a run with the time split on carries none (`usdt-trace-ebpf`'s `end_id`:
/// an unpolled span is split only when one thread ran it from start to end, and only from
/// that thread's state).
pub fn no_split_reason(r: &SpanRecord) -> &'static str {
    if r.start_tid != r.hdr.tid {
        "ended on another thread"
    } else {
        "its thread had no state (--max-threads full, or it started before tracing)"
    }
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
    let mut filtered = if s.filtered > 0 {
        format!(", {} filtered out (--min/--filter/--top)", s.filtered)
    } else {
        String::new()
    };
    let hits = if s.hits > 0 {
        format!(", {} probe hits counted", s.hits)
    } else {
        String::new()
    };
    let mut other = if s.by_other > 0 {
        format!(", {} counted as \"other\" (--max-keys)", s.by_other)
    } else {
        String::new()
    };
    if s.by_unkeyed > 0 {
        other.push_str(&format!(
            ", {} counted as \"unkeyed\" (no kernel memory)",
            s.by_unkeyed
        ));
    }
    if s.stacks_failed > 0 {
        filtered.push_str(&format!(", {} stacks not read", s.stacks_failed));
    }
    if s.frames_unnamed > 0 {
        filtered.push_str(&format!(
            ", {} stack frames unnamed (their file could not be read safely)",
            s.frames_unnamed
        ));
    }
    if s.strings_dropped > 0 {
        filtered.push_str(&format!(
            ", {} spans without their start strings (not kept)",
            s.strings_dropped
        ));
    }
    if s.strings_lost > 0 {
        filtered.push_str(&format!(", {} strings records lost", s.strings_lost));
    }
    if s.waits_lost > 0 {
        filtered.push_str(&format!(
            ", {} wait slices dropped so spans were kept",
            s.waits_lost
        ));
    }
    if s.waits_left_out > 0 {
        filtered.push_str(&format!(
            ", {} wait slices left out past --perfetto-max-waits",
            s.waits_left_out
        ));
    }
    format!(
        "{} spans, {} events, {} lost, {} unmatched starts, {} unmatched ends{hits}{dropped}{filtered}{other} in {:.1}s\n",
        s.spans,
        s.events,
        s.lost,
        s.unmatched,
        s.unmatched_end,
        s.duration_ns as f64 / 1e9
    )
}

/// `--stack`: the frames under their span's line, innermost first, one per line:
/// `    #0 0x55d0c1a2b3c4 c+0x14 (/path/prog)` (`[fp]` after a frame `--stack=dwarf` reached by
/// the frame pointer, its callee having no CFI), then `    [unwind stopped: why]` when the
/// unwinding stopped before the outermost frame; or why there are none.
pub fn stack_text(out: &mut String, st: &crate::target::symbolize::SpanStack) {
    use std::fmt::Write;
    match st {
        crate::target::symbolize::SpanStack::Error(e) => {
            let _ = writeln!(out, "    (no stack: {})", clean(e));
        }
        crate::target::symbolize::SpanStack::Frames { frames, stopped } => {
            for (i, f) in frames.iter().enumerate() {
                let _ = write!(out, "    #{i:<2} 0x{:x}", f.addr);
                match &f.sym {
                    Some((name, off)) => {
                        let _ = write!(out, " {}+0x{off:x}", clean(name));
                    }
                    None => out.push_str(" ?"),
                }
                if let Some(o) = &f.object {
                    let _ = write!(out, " ({})", clean(o));
                }
                if f.via == Some(crate::target::unwind::Via::FramePointer) {
                    out.push_str(" [fp]");
                }
                out.push('\n');
            }
            if let Some(why) = stopped {
                let _ = writeln!(out, "    [unwind stopped: {}]", clean(why));
            }
        }
    }
}

#[cfg(test)]
mod stack_tests {
    use super::stack_text;
    use crate::output::json::stack_json;
    use crate::target::symbolize::{SpanStack, StackFrame};

    fn frames() -> SpanStack {
        SpanStack::Frames {
            frames: vec![
                StackFrame {
                    addr: 0x1234,
                    sym: Some(("c".into(), 0x11)),
                    object: Some("/bin/p".into()),
                    via: None,
                },
                StackFrame {
                    addr: 0x99,
                    sym: None,
                    object: None,
                    via: None,
                },
            ],
            stopped: None,
        }
    }

    /// A `--stack=dwarf` stack: frames say how they were reached, and where it stopped.
    fn unwound() -> SpanStack {
        use crate::target::unwind::Via;
        SpanStack::Frames {
            frames: vec![
                StackFrame {
                    addr: 0x1234,
                    sym: Some(("c".into(), 0x11)),
                    object: Some("/bin/p".into()),
                    via: Some(Via::Regs),
                },
                StackFrame {
                    addr: 0x1300,
                    sym: Some(("b".into(), 0x20)),
                    object: Some("/bin/p".into()),
                    via: Some(Via::FramePointer),
                },
            ],
            stopped: Some("no CFI for 0x12ff".into()),
        }
    }

    #[test]
    fn an_unwound_stack_marks_frame_pointer_frames_and_says_where_it_stopped() {
        let mut s = String::new();
        stack_text(&mut s, &unwound());
        assert_eq!(
            s,
            "    #0  0x1234 c+0x11 (/bin/p)\n    #1  0x1300 b+0x20 (/bin/p) [fp]\n    \
             [unwind stopped: no CFI for 0x12ff]\n"
        );
        let mut out = b"{\"a\":1".to_vec();
        stack_json(&mut out, &unwound());
        out.push(b'}');
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (
                v["stack"][0]["unwind"].as_str(),
                v["stack"][1]["unwind"].as_str()
            ),
            (Some("regs"), Some("fp"))
        );
        assert_eq!(v["stack_stopped"], "no CFI for 0x12ff");
    }

    #[test]
    fn frames_print_indented_under_the_span() {
        let mut s = String::new();
        stack_text(&mut s, &frames());
        assert_eq!(s, "    #0  0x1234 c+0x11 (/bin/p)\n    #1  0x99 ?\n");
        let mut s = String::new();
        stack_text(&mut s, &SpanStack::Error("lost\u{1b}".into()));
        assert_eq!(s, "    (no stack: lost\\u{1b})\n");
    }

    #[test]
    fn json_frames_and_errors() {
        let mut out = b"{\"a\":1".to_vec();
        stack_json(&mut out, &frames());
        out.push(b'}');
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["stack"],
            serde_json::json!([
                {"addr": 0x1234, "sym": "c", "offset": 0x11, "object": "/bin/p"},
                {"addr": 0x99, "sym": null, "offset": null, "object": null}
            ])
        );
        let mut out = b"{\"a\":1".to_vec();
        stack_json(&mut out, &SpanStack::Error("why".into()));
        out.push(b'}');
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (v["stack"].is_null(), v["stack_error"].as_str()),
            (true, Some("why"))
        );
    }
}
