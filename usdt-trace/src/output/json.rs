//! NDJSON lines, written by hand into a byte buffer (serde's per-field calls cost more than the
//! records are worth at a million spans a second). Untrusted bytes (comm, captured strings) are
//! escaped so that every line is valid JSON.

use super::{
    arg_value, escape_invalid, ArgValue, PairInfo, RunInfo, SiteInfo, Summary, SCHEMA_VERSION,
};
use crate::plan::record::cstr;
use crate::target::symbolize::SpanStack;
use std::io::Write;
use usdt_trace_common::{EventRecord, RecordHeader, SpanRecord, StrSet, MAX_ARGS};

/// Writes JSON string contents (without quotes), escaping anything JSON requires and
/// replacing invalid UTF-8.
pub fn json_escape(out: &mut Vec<u8>, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\t' => out.extend_from_slice(b"\\t"),
                // C0/C1 controls and bidi overrides: JSON allows most of them raw, but a
                // line piped to a terminal (`jq -r`) must not carry them.
                c if crate::util::terminal::is_unsafe_for_terminal(c) => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => {
                    let mut b = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                }
            }
        }
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{fffd}".as_bytes());
        }
    }
}

pub(crate) fn json_str(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    json_escape(out, s);
    out.push(b'"');
}

pub(crate) fn push_u64(out: &mut Vec<u8>, v: u64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

fn push_i64(out: &mut Vec<u8>, v: i64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

/// What a record's strings need said beside its arguments: which were cut at `--str-max`,
/// which had bytes that are not UTF-8 (escaped `\\xNN`), whether any was read late, and
/// whether the record's strings were lost (its string arguments then show their pointers).
#[derive(Default)]
struct StrNotes {
    truncated: Vec<String>,
    escaped: Vec<String>,
    late: bool,
    lost: bool,
}

impl StrNotes {
    fn write(&self, out: &mut Vec<u8>) {
        for (key, list) in [("truncated", &self.truncated), ("escaped", &self.escaped)] {
            if list.is_empty() {
                continue;
            }
            out.extend_from_slice(b",\"");
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(b"\":[");
            for (i, l) in list.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json_str(out, l.as_bytes());
            }
            out.push(b']');
        }
        if self.late {
            out.extend_from_slice(b",\"str_read_late\":true");
        }
        if self.lost {
            out.extend_from_slice(b",\"strs_lost\":true");
        }
    }
}

/// A probe's arguments: an array, or with names (`--args`) an object keyed by them (unnamed
/// ones by position, `arg3`). `prefix` labels them in the notes: `arg` or `end_arg`.
fn json_args(
    out: &mut Vec<u8>,
    site: &SiteInfo,
    args: &[u64; MAX_ARGS],
    strs: Option<&StrSet>,
    prefix: &str,
    notes: &mut StrNotes,
) {
    let named = !site.names.is_empty();
    out.push(if named { b'{' } else { b'[' });
    for i in 0..site.args.len().min(MAX_ARGS) {
        if i > 0 {
            out.push(b',');
        }
        if named {
            match site.arg_name(i) {
                Some(n) => json_str(out, n.as_bytes()),
                None => json_str(out, format!("arg{i}").as_bytes()),
            }
            out.push(b':');
        }
        match arg_value(site, i, args, strs) {
            ArgValue::Unsigned(v) => push_u64(out, v),
            ArgValue::Signed(v) => push_i64(out, v),
            ArgValue::Unreadable => out.extend_from_slice(b"null"),
            ArgValue::Str { bytes, cut, late } => {
                let (s, escaped) = escape_invalid(bytes);
                json_str(out, s.as_bytes());
                if cut {
                    notes.truncated.push(format!("{prefix}{i}"));
                }
                if escaped {
                    notes.escaped.push(format!("{prefix}{i}"));
                }
                notes.late |= late;
            }
        }
    }
    out.push(if named { b'}' } else { b']' });
}

fn json_head(out: &mut Vec<u8>, kind: &str, provider: &str, name: &str, h: &RecordHeader) {
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"provider\":");
    json_str(out, provider.as_bytes());
    out.extend_from_slice(b",\"name\":");
    json_str(out, name.as_bytes());
    out.extend_from_slice(b",\"pid\":");
    push_u64(out, h.pid as u64);
    out.extend_from_slice(b",\"tid\":");
    push_u64(out, h.tid as u64);
    out.extend_from_slice(b",\"comm\":");
    json_str(out, cstr(&h.comm));
}

/// `{"type":"event",...}` line.
pub fn event_json(out: &mut Vec<u8>, site: &SiteInfo, r: &EventRecord, strs: Option<&StrSet>) {
    json_head(out, "event", &site.provider, &site.name, &r.hdr);
    out.extend_from_slice(b",\"ts_ns\":");
    push_u64(out, r.hdr.ts_ns);
    out.extend_from_slice(b",\"args\":");
    let mut notes = StrNotes {
        lost: super::strs_lost(r.has_strs, strs),
        ..StrNotes::default()
    };
    json_args(out, site, &r.args, strs, "arg", &mut notes);
    notes.write(out);
    out.extend_from_slice(b"}\n");
}

/// `{"type":"span",...}` line.
pub fn span_json(
    out: &mut Vec<u8>,
    pair: &PairInfo,
    start: &SiteInfo,
    end: &SiteInfo,
    r: &SpanRecord,
    strs: Option<&StrSet>,
    stack: Option<&SpanStack>,
) {
    json_head(out, "span", &pair.provider, &pair.stem, &r.hdr);
    out.extend_from_slice(b",\"start\":");
    json_str(out, pair.start.as_bytes());
    out.extend_from_slice(b",\"end\":");
    json_str(out, end.name.as_bytes());
    if r.start_tid != r.hdr.tid {
        out.extend_from_slice(b",\"start_tid\":");
        push_u64(out, r.start_tid as u64);
    }
    out.extend_from_slice(b",\"start_ns\":");
    push_u64(out, r.start_ns);
    out.extend_from_slice(b",\"end_ns\":");
    push_u64(out, r.hdr.ts_ns);
    out.extend_from_slice(b",\"duration_ns\":");
    push_u64(out, r.hdr.ts_ns.saturating_sub(r.start_ns));
    if r.acct_valid != 0 {
        let a = &r.acct;
        for (k, v) in [
            ("oncpu_ns", a.oncpu),
            ("steal_ns", a.steal),
            ("offcpu_ns", a.runq + a.sleep + a.io),
            ("runq_ns", a.runq),
            ("sleep_ns", a.sleep),
            ("io_ns", a.io),
        ] {
            out.extend_from_slice(b",\"");
            out.extend_from_slice(k.as_bytes());
            out.extend_from_slice(b"\":");
            push_u64(out, v);
        }
        // What the sleep and io above waited on, only for kinds it waited on (a span that never
        // slept in a known syscall has no `waits`): {"lock":{"ns":..,"n":..},...}.
        let mut first = true;
        for (name, ns, n, _) in super::wait_kinds(a) {
            if ns == 0 && n == 0 {
                continue;
            }
            out.extend_from_slice(if first { b",\"waits\":{\"" } else { b",\"" });
            first = false;
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\":{\"ns\":");
            push_u64(out, ns);
            out.extend_from_slice(b",\"n\":");
            push_u64(out, n as u64);
            out.push(b'}');
        }
        if !first {
            out.push(b'}');
        }
        // Probe hits of this run inside the span, and what they are known to cost here (only
        // when the costs were measured at start): part of `duration_ns`, not taken out of it.
        if a.probe_hits > 0 {
            out.extend_from_slice(b",\"probe_hits\":");
            push_u64(out, a.probe_hits as u64);
            if a.probe_ns > 0 {
                out.extend_from_slice(b",\"probe_ns_estimate\":");
                push_u64(out, a.probe_ns);
            }
        }
        // A polled span: the split above is its polls' time; the rest was between polls.
        if r.polls > 0 {
            for (k, v) in [
                ("idle_ns", r.idle_ns),
                ("polls", r.polls as u64),
                ("threads", r.threads as u64),
            ] {
                out.extend_from_slice(b",\"");
                out.extend_from_slice(k.as_bytes());
                out.extend_from_slice(b"\":");
                push_u64(out, v);
            }
        }
        if r.longest_off_ns > 0 && (r.waker_pid != 0 || r.waker_comm[0] != 0) {
            out.extend_from_slice(b",\"waker\":{\"pid\":");
            push_u64(out, r.waker_pid as u64);
            out.extend_from_slice(b",\"tid\":");
            push_u64(out, r.waker_tid as u64);
            out.extend_from_slice(b",\"comm\":");
            json_str(out, cstr(&r.waker_comm));
            out.extend_from_slice(b",\"off_ns\":");
            push_u64(out, r.longest_off_ns);
            out.push(b'}');
        }
    }
    out.extend_from_slice(b",\"args\":");
    let mut notes = StrNotes {
        lost: super::strs_lost(r.has_strs, strs),
        ..StrNotes::default()
    };
    json_args(out, start, &r.args, strs, "arg", &mut notes);
    out.extend_from_slice(b",\"end_args\":");
    json_args(out, end, &r.end_args, strs, "end_arg", &mut notes);
    notes.write(out);
    if let Some(st) = stack {
        stack_json(out, st);
    }
    out.extend_from_slice(b"}\n");
}

/// The first `{"type":"start",...}` line: what is traced, and how to place `*_ns` times
/// (CLOCK_MONOTONIC) in wall-clock time: `unix_ns = clock_zero_unix_ns + ts_ns`.
pub fn start_json(out: &mut Vec<u8>, r: &RunInfo) {
    out.extend_from_slice(b"{\"type\":\"start\",\"schema\":");
    push_u64(out, SCHEMA_VERSION as u64);
    out.extend_from_slice(b",\"version\":");
    json_str(out, r.version.as_bytes());
    out.extend_from_slice(b",\"clock\":\"monotonic\",\"clock_zero_unix_ns\":");
    push_u64(out, r.clock_zero_unix_ns);
    out.extend_from_slice(b",\"start_ns\":");
    push_u64(out, r.t0_ns);
    out.extend_from_slice(b",\"targets\":[");
    for (i, t) in r.targets.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        json_str(out, t.as_bytes());
    }
    out.extend_from_slice(b"],\"pids\":[");
    for (i, p) in r.pids.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_u64(out, *p as u64);
    }
    out.push(b']');
    if let Some(c) = &r.command {
        out.extend_from_slice(b",\"command\":");
        json_str(out, c.as_bytes());
    }
    out.extend_from_slice(b",\"sites\":");
    push_u64(out, r.sites as u64);
    out.extend_from_slice(b",\"span_names\":");
    push_u64(out, r.span_names as u64);
    out.extend_from_slice(b"}\n");
}

/// The final `{"type":"summary",...}` line.
pub fn summary_json(out: &mut Vec<u8>, s: &Summary) {
    let _ = writeln!(
        out,
        "{{\"type\":\"summary\",\"events\":{},\"spans\":{},\"lost\":{},\"unmatched\":{},\"unmatched_end\":{},\"dropped\":{{\"threads_full\":{},\"id_spans_full\":{},\"depth\":{},\"kernel_skipped\":{}}},\"duration_ns\":{}}}",
        s.events,
        s.spans,
        s.lost,
        s.unmatched,
        s.unmatched_end,
        s.dropped.threads_full,
        s.dropped.id_spans_full,
        s.dropped.depth,
        s.dropped.kernel_skipped,
        s.duration_ns
    );
    // Only present with --min/--filter, so runs without them keep the documented line.
    if s.filtered > 0 {
        out.pop();
        out.pop();
        let _ = writeln!(out, ",\"filtered\":{}}}", s.filtered);
    }
    // Likewise only with --stack (when some stack is missing), --count and --by.
    for (name, v) in [
        ("stacks_failed", s.stacks_failed),
        ("frames_unnamed", s.frames_unnamed),
        ("hits", s.hits),
        ("by_other", s.by_other),
        ("by_unkeyed", s.by_unkeyed),
        ("strings_dropped", s.strings_dropped),
        ("strings_lost", s.strings_lost),
        ("waits_lost", s.waits_lost),
        ("waits_left_out", s.waits_left_out),
    ] {
        if v > 0 {
            out.pop();
            out.pop();
            let _ = writeln!(out, ",\"{name}\":{v}}}");
        }
    }
}

/// `,"stack":[{"addr":..,"sym":..,"offset":..,"object":..},...]`, or `,"stack":null,
/// "stack_error":"why"` when it could not be read. Under `--stack=dwarf` each frame also has
/// `"unwind"` (`regs`, `cfi` or `fp`: how it was reached), and `,"stack_stopped":"why"`
/// follows when the unwinding stopped before the outermost frame.
pub(crate) fn stack_json(out: &mut Vec<u8>, st: &SpanStack) {
    match st {
        SpanStack::Error(e) => {
            out.extend_from_slice(b",\"stack\":null,\"stack_error\":");
            json_str(out, e.as_bytes());
        }
        SpanStack::Frames { frames, stopped } => {
            out.extend_from_slice(b",\"stack\":[");
            for (i, f) in frames.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"addr\":");
                push_u64(out, f.addr);
                out.extend_from_slice(b",\"sym\":");
                match &f.sym {
                    Some((name, off)) => {
                        json_str(out, name.as_bytes());
                        out.extend_from_slice(b",\"offset\":");
                        push_u64(out, *off);
                    }
                    None => out.extend_from_slice(b"null,\"offset\":null"),
                }
                out.extend_from_slice(b",\"object\":");
                match &f.object {
                    Some(o) => json_str(out, o.as_bytes()),
                    None => out.extend_from_slice(b"null"),
                }
                if let Some(via) = f.via {
                    out.extend_from_slice(b",\"unwind\":\"");
                    out.extend_from_slice(via.as_str().as_bytes());
                    out.push(b'"');
                }
                out.push(b'}');
            }
            out.push(b']');
            if let Some(why) = stopped {
                out.extend_from_slice(b",\"stack_stopped\":");
                json_str(out, why.as_bytes());
            }
        }
    }
}

/// Golden lines: the NDJSON schema docs/reference.md documents, byte for byte. A change here is a
/// change of the schema that users' `jq` scripts read, and must be deliberate (and
/// documented in docs/reference.md's schema section).
#[cfg(test)]
mod golden {
    use super::*;
    use crate::output::hist::render_json;
    use crate::output::{test_strs, ArgFmt};
    use usdt_trace_common::{
        Acct, Hist, RecordKind, WaitSums, HIST_COMPONENTS, STRS_CUT, STRS_FAULT, STRS_OK,
    };

    fn hdr(kind: RecordKind) -> RecordHeader {
        let mut comm = [0u8; 16];
        comm[..6].copy_from_slice(b"worker");
        RecordHeader {
            kind,
            site: 0,
            pid: 100,
            tid: 101,
            ts_ns: 9_000,
            comm,
        }
    }

    /// `strs`: (argument, slot) pairs read as strings.
    fn info(name: &str, args: &[ArgFmt], strs: &[(usize, usize)]) -> SiteInfo {
        SiteInfo::for_test("app", name, args, strs)
    }

    fn pair() -> PairInfo {
        PairInfo {
            provider: "app".into(),
            stem: "request".into(),
            start: "request__start".into(),
            ends: vec!["request__end".into()],
        }
    }

    fn span(acct_valid: u32, start_tid: u32) -> SpanRecord {
        SpanRecord {
            hdr: hdr(RecordKind::SPAN),
            start_site: 0,
            start_tid,
            start_ns: 1_000,
            acct: Acct {
                oncpu: 3_000,
                runq: 1_000,
                sleep: 3_500,
                io: 500,
                ..Acct::default()
            },
            acct_valid,
            waker_pid: 7,
            waker_tid: 8,
            has_strs: 0,
            longest_off_ns: 3_500,
            waker_comm: *b"timer\0\0\0\0\0\0\0\0\0\0\0",
            args: [42; MAX_ARGS],
            end_args: [200; MAX_ARGS],
            idle_ns: 0,
            polls: 0,
            threads: 0,
            steal_start: 0,
        }
    }

    fn line(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn event_line() {
        let mut r = EventRecord {
            hdr: hdr(RecordKind::EVENT),
            has_strs: 1,
            _pad: 0,
            args: [0; MAX_ARGS],
        };
        r.args[0] = (-3i64) as u64;
        r.args[1] = 7;
        let strs = test_strs(&[(0, b"/idx", STRS_OK)]);
        let site = info(
            "tick",
            &[
                ArgFmt::Signed,
                ArgFmt::Unsigned,
                ArgFmt::Unreadable,
                ArgFmt::Unsigned,
            ],
            &[(3, 0)],
        );
        assert_eq!(
            line(|o| event_json(o, &site, &r, Some(&strs))),
            r#"{"type":"event","provider":"app","name":"tick","pid":100,"tid":101,"comm":"worker","ts_ns":9000,"args":[-3,7,null,"/idx"]}
"#
        );
    }

    #[test]
    fn span_line_with_time_split_and_waker() {
        let start = info("request__start", &[ArgFmt::Unsigned], &[]);
        let end = info("request__end", &[ArgFmt::Unsigned, ArgFmt::Signed], &[]);
        assert_eq!(
            line(|o| span_json(o, &pair(), &start, &end, &span(1, 101), None, None)),
            r#"{"type":"span","provider":"app","name":"request","pid":100,"tid":101,"comm":"worker","start":"request__start","end":"request__end","start_ns":1000,"end_ns":9000,"duration_ns":8000,"oncpu_ns":3000,"steal_ns":0,"offcpu_ns":5000,"runq_ns":1000,"sleep_ns":3500,"io_ns":500,"waker":{"pid":7,"tid":8,"comm":"timer","off_ns":3500},"args":[42],"end_args":[200,200]}
"#
        );
    }

    #[test]
    fn span_line_names_the_kinds_of_wait_it_had_and_only_those() {
        let start = info("request__start", &[ArgFmt::Unsigned], &[]);
        let end = info("request__end", &[ArgFmt::Unsigned, ArgFmt::Signed], &[]);
        let mut r = span(1, 101);
        // Of sleep 3500: 3000 in two futex waits; of io 500: 300 in one disk read and 150 in
        // three page faults.
        r.acct.wait_ns = [3000, 0, 0, 300, 150];
        r.acct.waits = [2, 0, 0, 1, 3];
        let got = line(|o| span_json(o, &pair(), &start, &end, &r, None, None));
        assert!(
            got.contains(
                r#""io_ns":500,"waits":{"lock":{"ns":3000,"n":2},"disk":{"ns":300,"n":1},"fault":{"ns":150,"n":3}},"waker""#
            ),
            "{got}"
        );
    }

    #[test]
    fn span_line_that_crossed_threads_has_start_tid_and_no_split() {
        let start = info("request__start", &[ArgFmt::Unsigned], &[]);
        let end = info("request__end", &[], &[]);
        assert_eq!(
            line(|o| span_json(o, &pair(), &start, &end, &span(0, 99), None, None)),
            r#"{"type":"span","provider":"app","name":"request","pid":100,"tid":101,"comm":"worker","start":"request__start","end":"request__end","start_tid":99,"start_ns":1000,"end_ns":9000,"duration_ns":8000,"args":[42],"end_args":[]}
"#
        );
    }

    /// In text, a span of a run that splits time but without a split of its own says why;
    /// with --no-sched (no split for any span) nothing is said per span.
    #[test]
    fn text_span_without_a_split_says_why() {
        use crate::output::text::span_text;
        let start = info("request__start", &[ArgFmt::Unsigned], &[]);
        let end = info("request__end", &[], &[]);
        let crossed = span_text(&pair(), &start, &end, &span(0, 99), None, 0, true);
        assert!(
            crossed.ends_with("(42)  no split: ended on another thread  (started on tid 99)\n"),
            "{crossed}"
        );
        let here = span_text(&pair(), &start, &end, &span(0, 101), None, 0, true);
        assert!(
            here.ends_with(
                "(42)  no split: its thread had no state (--max-threads full, or it started before tracing)\n"
            ),
            "{here}"
        );
        let no_sched = span_text(&pair(), &start, &end, &span(0, 99), None, 0, false);
        assert!(
            no_sched.ends_with("(42)  (started on tid 99)\n"),
            "{no_sched}"
        );
        let split = span_text(&pair(), &start, &end, &span(1, 101), None, 0, true);
        assert!(!split.contains("no split"), "{split}");
    }

    #[test]
    fn a_polled_span_that_crossed_threads_has_its_split_and_idle_time() {
        let start = info("request__start", &[ArgFmt::Unsigned], &[]);
        let end = info("request__end", &[], &[]);
        let mut r = span(1, 99);
        r.acct = Acct {
            oncpu: 2_000,
            runq: 500,
            sleep: 0,
            io: 500,
            ..Acct::default()
        };
        r.longest_off_ns = 0;
        (r.idle_ns, r.polls, r.threads) = (5_000, 3, 2);
        let got = line(|o| span_json(o, &pair(), &start, &end, &r, None, None));
        assert!(
            got.contains(r#""start_tid":99,"start_ns":1000,"end_ns":9000,"duration_ns":8000,"oncpu_ns":2000,"steal_ns":0,"offcpu_ns":1000,"runq_ns":500,"sleep_ns":0,"io_ns":500,"idle_ns":5000,"polls":3,"threads":2,"args""#),
            "{got}"
        );
        let v: serde_json::Value = serde_json::from_str(&got).unwrap();
        let sum = ["oncpu_ns", "offcpu_ns", "idle_ns"]
            .iter()
            .map(|k| v[k].as_u64().unwrap())
            .sum::<u64>();
        assert_eq!(sum, v["duration_ns"].as_u64().unwrap());
        let text = crate::output::text::span_text(&pair(), &start, &end, &r, None, 0, true);
        assert!(
            text.contains("cpu 25% runq 6% sleep 0% io 6% idle 62% (3 polls on 2 threads)"),
            "{text}"
        );
        assert!(text.contains("(started on tid 99)"), "{text}");
    }

    #[test]
    fn a_span_whose_strings_record_was_lost_shows_pointers_and_says_so() {
        let u = ArgFmt::Unsigned;
        let start = info("request__start", &[u, u], &[(0, 0)]);
        let end = info("request__end", &[u], &[]);
        let mut r = span(0, 101);
        r.args[0] = 0x7f00_0000_1000;
        r.has_strs = usdt_trace_common::STRS_RECORD_LOST;
        let json = line(|o| span_json(o, &pair(), &start, &end, &r, None, None));
        assert!(
            json.contains(r#""args":[139637976731648,"#)
                && json.ends_with(",\"strs_lost\":true}\n"),
            "{json}"
        );
        let text = crate::output::text::span_text(&pair(), &start, &end, &r, None, 0, true);
        assert!(text.contains("[strings lost: ring buffer full]"), "{text}");
        // A span without strings says nothing of them.
        r.has_strs = 0;
        let json = line(|o| span_json(o, &pair(), &start, &end, &r, None, None));
        assert!(!json.contains("strs_lost"), "{json}");
    }

    #[test]
    fn span_line_with_start_and_end_strings_names_and_notes() {
        let u = ArgFmt::Unsigned;
        // Start: three strings (slots 0..3); end: one more (slot 3) and a number.
        let mut start = info("request__start", &[u, u, u, u], &[(0, 0), (1, 1), (2, 2)]);
        start.names = vec!["file".into(), "func".into(), "line".into()];
        let end = info("request__end", &[u, u], &[(1, 3)]);
        let mut r = span(0, 101);
        r.has_strs = 1;
        r.args[2] = 0x7f00_0000_1000;
        r.end_args[1] = 0x7f00_0000_2000;
        // A cut string, one with bytes that are not UTF-8 (and a backslash), one the kernel
        // could not read (the pointer shows, not null), and the end's.
        let strs = test_strs(&[
            (0, b"/very/long/pa", STRS_CUT),
            (1, b"f\xff\\g", STRS_OK),
            (2, b"", STRS_FAULT),
            (3, b"done", STRS_OK),
        ]);
        assert_eq!(
            line(|o| span_json(o, &pair(), &start, &end, &r, Some(&strs), None)),
            r#"{"type":"span","provider":"app","name":"request","pid":100,"tid":101,"comm":"worker","start":"request__start","end":"request__end","start_ns":1000,"end_ns":9000,"duration_ns":8000,"args":{"file":"/very/long/pa","func":"f\\xff\\\\g","line":139637976731648,"arg3":42},"end_args":[200,"done"],"truncated":["arg0"],"escaped":["arg1"]}
"#
        );
        let text = crate::output::text::span_text(&pair(), &start, &end, &r, Some(&strs), 0, true);
        assert!(
            text.contains(r#"(file="/very/long/pa"…, func="f\xff\\g", line=139637976731648, arg3=42) -> (200, "done")"#),
            "{text}"
        );
    }

    #[test]
    fn hist_line() {
        let mut h = [Hist::default(); HIST_COMPONENTS];
        for (c, v) in [(0, 1500u64), (0, 3000), (1, 700)] {
            h[c].add(v);
        }
        assert_eq!(
            line(|o| render_json(o, &pair(), &h, &WaitSums::default(), None)),
            r#"{"type":"hist","provider":"app","name":"request","duration":{"count":2,"sum_ns":4500,"p50_ns":1472,"p90_ns":2944,"p99_ns":2944,"max_ns":3000,"buckets":[{"lo":1408,"hi":1536,"count":1},{"lo":2816,"hi":3072,"count":1}]},"oncpu":{"count":1,"sum_ns":700,"p50_ns":672,"p90_ns":672,"p99_ns":672,"max_ns":700,"buckets":[{"lo":640,"hi":704,"count":1}]},"runq":{"count":0,"sum_ns":0,"buckets":[]},"sleep":{"count":0,"sum_ns":0,"buckets":[]},"io":{"count":0,"sum_ns":0,"buckets":[]},"idle":{"count":0,"sum_ns":0,"buckets":[]},"steal":{"count":0,"sum_ns":0,"buckets":[]},"waits":{}}
"#
        );
        // A span that slept 800ns, 600 of them in two futex waits: `waits` after the parts.
        h[3].add(800);
        let w = WaitSums {
            ns: [600, 0, 0, 0, 0],
            n: [2, 0, 0, 0, 0],
            ..WaitSums::default()
        };
        let l = line(|o| render_json(o, &pair(), &h, &w, None));
        assert!(
            l.ends_with(
                r#""idle":{"count":0,"sum_ns":0,"buckets":[]},"steal":{"count":0,"sum_ns":0,"buckets":[]},"waits":{"lock":{"ns":600,"n":2}}}
"#
            ),
            "{l}"
        );
    }

    #[test]
    fn start_line() {
        let r = RunInfo {
            version: "0.1.0",
            targets: vec!["/usr/bin/app".into()],
            pids: vec![42],
            command: Some("app --port 1".into()),
            t0_ns: 5_000,
            clock_zero_unix_ns: 1_700_000_000_000_000_000,
            sites: 4,
            span_names: 2,
            split: true,
        };
        assert_eq!(
            line(|o| start_json(o, &r)),
            r#"{"type":"start","schema":2,"version":"0.1.0","clock":"monotonic","clock_zero_unix_ns":1700000000000000000,"start_ns":5000,"targets":["/usr/bin/app"],"pids":[42],"command":"app --port 1","sites":4,"span_names":2}
"#
        );
    }

    #[test]
    fn summary_line() {
        let s = Summary {
            events: 1,
            spans: 2,
            lost: 3,
            unmatched: 4,
            unmatched_end: 5,
            duration_ns: 6,
            dropped: crate::output::Dropped {
                threads_full: 7,
                id_spans_full: 8,
                depth: 9,
                kernel_skipped: 10,
            },
            filtered: 0,
            ..Default::default()
        };
        assert_eq!(
            line(|o| summary_json(o, &s)),
            r#"{"type":"summary","events":1,"spans":2,"lost":3,"unmatched":4,"unmatched_end":5,"dropped":{"threads_full":7,"id_spans_full":8,"depth":9,"kernel_skipped":10},"duration_ns":6}
"#
        );
        // --count and --by add what they counted, and only then.
        let s = Summary {
            hits: 11,
            by_other: 12,
            ..s
        };
        assert_eq!(
            line(|o| summary_json(o, &s)),
            r#"{"type":"summary","events":1,"spans":2,"lost":3,"unmatched":4,"unmatched_end":5,"dropped":{"threads_full":7,"id_spans_full":8,"depth":9,"kernel_skipped":10},"duration_ns":6,"hits":11,"by_other":12}
"#
        );
        // --str: spans whose start strings the kernel could not keep, only when there are.
        let s = Summary {
            strings_dropped: 13,
            ..s
        };
        assert!(
            line(|o| summary_json(o, &s)).ends_with(",\"by_other\":12,\"strings_dropped\":13}\n")
        );
        // --by: keys the kernel could not keep for want of memory, only when there are.
        let s = Summary {
            by_unkeyed: 14,
            ..s
        };
        assert!(line(|o| summary_json(o, &s))
            .ends_with(",\"by_other\":12,\"by_unkeyed\":14,\"strings_dropped\":13}\n"));
    }
}
