//! Records from the kernel → NDJSON or aligned text, and histograms. Pure: formats into byte
//! buffers; the sinks own the writers.
//!
//! | module | job |
//! |---|---|
//! | [`json`] | NDJSON lines (the schema is pinned by the golden tests below) |
//! | [`text`] | aligned text lines |
//! | [`hist`] | in-kernel histograms drawn as text or JSON |
//! | [`sink`] | what consumes records: `watch` hands each record to its sinks and never asks which |
//!
//! The ring buffer carries fixed-size `#[repr(C)]` records; [`crate::plan::record`] checks each
//! one's size before reading it (a record and what it means live with the plan, below output). Site metadata (provider, name, which arguments are signed,
//! which one is a string) was decided once when attaching and is looked up here by the
//! record's site index, so nothing is re-parsed per record. Bytes read from the traced process
//! (comm, strings) are untrusted: they are escaped so the JSON is always valid.

/// Whether the tracing's estimated cost inside a span (`probe_ns`) is a visible share of its
/// duration `dur`: a tenth or more, where a reader comparing durations must know it.
pub fn tracing_visible(probe_ns: u64, dur: u64) -> bool {
    dur > 0 && probe_ns.saturating_mul(10) >= dur
}
pub(crate) mod agg;
pub mod hist;
pub mod json;
pub mod otlp;
pub(crate) mod outfile;
pub(crate) mod outqueue;
pub mod perfetto;
pub mod prometheus;
pub mod sink;
pub mod text;
pub mod waitcap;

pub use crate::plan::record::{decode, Record};
pub use crate::plan::view::{ArgFmt, PairInfo, SiteInfo, StrArg, View};
pub use json::{event_json, json_escape, span_json, start_json, summary_json};
pub use sink::{JsonSink, Sink, TextSink};
pub use text::{event_text, span_text, summary_text, text_header};
use usdt_trace_common::{StrSet, MAX_ARGS};

/// One argument as the outputs show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgValue<'a> {
    Unsigned(u64),
    Signed(i64),
    /// The tracer cannot read it (float, struct, unsupported operand).
    Unreadable,
    /// A `--str` string: its bytes, whether `--str-max` cut it, whether it was read from the
    /// live process after the probe (the kernel could not).
    Str {
        bytes: &'a [u8],
        cut: bool,
        late: bool,
    },
}

/// Argument `i` of `site`: its string when one was captured, else its number. A string rule
/// whose string could not be read shows the pointer, never null: the value exists.
pub fn arg_value<'a>(
    site: &SiteInfo,
    i: usize,
    args: &[u64; MAX_ARGS],
    strs: Option<&'a StrSet>,
) -> ArgValue<'a> {
    use usdt_trace_common::{STRS_CUT, STRS_LATE, STRS_LATE_CUT, STRS_OK};
    if let (Some(slot), Some(set)) = (site.str_slot(i), strs) {
        let state = set.state.get(slot).copied().unwrap_or(0);
        if matches!(state, STRS_OK | STRS_CUT | STRS_LATE | STRS_LATE_CUT) {
            return ArgValue::Str {
                bytes: set.bytes(slot),
                cut: matches!(state, STRS_CUT | STRS_LATE_CUT),
                late: matches!(state, STRS_LATE | STRS_LATE_CUT),
            };
        }
    }
    match site.args.get(i) {
        Some(ArgFmt::Signed) => ArgValue::Signed(args[i.min(MAX_ARGS - 1)] as i64),
        Some(ArgFmt::Unreadable) => ArgValue::Unreadable,
        _ if site.str_slot(i).is_some() => ArgValue::Unsigned(args[i.min(MAX_ARGS - 1)]),
        Some(ArgFmt::Unsigned) => ArgValue::Unsigned(args[i.min(MAX_ARGS - 1)]),
        None => ArgValue::Unreadable,
    }
}

/// Whether a record that says it has strings (`has_strs`, as the kernel set it) comes
/// without them: their record was lost in the kernel ([`usdt_trace_common::STRS_RECORD_LOST`])
/// or never joined it. Its string arguments then show their pointers, and the outputs say so.
pub fn strs_lost(has_strs: u32, strs: Option<&StrSet>) -> bool {
    has_strs != 0 && strs.is_none()
}

/// Strings for tests: per slot, its bytes and `STRS_*` state.
#[cfg(test)]
pub(crate) fn test_strs(slots: &[(usize, &[u8], u8)]) -> Box<StrSet> {
    let mut s = Box::new(StrSet {
        state: [0; usdt_trace_common::MAX_STRS],
        _pad: [0; 4],
        len: [0; usdt_trace_common::MAX_STRS],
        data: [[0; usdt_trace_common::STR_SLOT]; usdt_trace_common::MAX_STRS],
    });
    for &(slot, b, state) in slots {
        s.data[slot][..b.len()].copy_from_slice(b);
        s.len[slot] = b.len() as u16;
        s.state[slot] = state;
    }
    s
}

/// The attribute key of argument `i` in the OTLP and Perfetto outputs: `arg0`, or with a name
/// `arg.id` (`prefix` is `arg` or `end_arg`).
pub fn arg_key(site: &SiteInfo, prefix: &str, i: usize) -> String {
    match site.arg_name(i) {
        Some(n) => format!("{prefix}.{n}"),
        None => format!("{prefix}{i}"),
    }
}

/// A captured string as one UTF-8 value for outputs that have no room for notes: bytes that
/// are not UTF-8 escaped ([`escape_invalid`]), and `…` appended when `--str-max` cut it.
pub fn str_value(bytes: &[u8], cut: bool) -> String {
    let mut s = escape_invalid(bytes).0.into_owned();
    if cut {
        s.push('…');
    }
    s
}

/// `bytes` as a string, with each byte that is not UTF-8 written `\xNN` (so nothing is lost
/// to U+FFFD); when there is such a byte, backslashes are doubled too, so the escapes are never
/// ambiguous. Returns the string and whether any byte was escaped.
pub fn escape_invalid(bytes: &[u8]) -> (std::borrow::Cow<'_, str>, bool) {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return (std::borrow::Cow::Borrowed(s), false);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            use std::fmt::Write as _;
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    (std::borrow::Cow::Owned(out), true)
}

/// Version of the NDJSON schema, in the first (`start`) record. 2 added the `start` record,
/// `end_ns` on spans and the interval bounds on histograms.
pub const SCHEMA_VERSION: u32 = 2;

/// What a run traces, handed to every sink before the first record.
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    pub version: &'static str,
    /// The objects traced, as shown to the user.
    pub targets: Vec<String>,
    pub pids: Vec<u32>,
    /// The `-c` command line.
    pub command: Option<String>,
    /// CLOCK_MONOTONIC when tracing began; text times count from here.
    pub t0_ns: u64,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC at the start, in ns: adding it to a record's
    /// monotonic time gives Unix time.
    pub clock_zero_unix_ns: u64,
    pub sites: usize,
    pub span_names: usize,
    /// The scheduler hooks split spans' time (no --no-sched; not written to the NDJSON).
    pub split: bool,
}

/// Totals printed at exit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub events: u64,
    pub spans: u64,
    pub lost: u64,
    pub unmatched: u64,
    pub unmatched_end: u64,
    pub duration_ns: u64,
    /// Spans dropped at a kernel-side limit: neither reported nor counted as unmatched.
    pub dropped: Dropped,
    /// Spans and events that `--min` or `--filter` kept from being recorded (counted in
    /// `spans`/`events`, never printed).
    pub filtered: u64,
    /// `--stack`: spans whose stack could not be read (the walk failed or its record was lost).
    pub stacks_failed: u64,
    /// `--stack`: frames printed by address alone because their file could not be read safely
    /// (the mapping gone, not a regular file, too large).
    pub frames_unnamed: u64,
    /// `--count`: probe hits counted in the kernel (nothing else is reported per hit).
    pub hits: u64,
    /// `--by`: spans and hits whose key found no room (`--max-keys`), counted as "other".
    pub by_other: u64,
    /// `--by`: spans and hits whose key the kernel could keep nowhere though the map was not
    /// full (no memory at hand, and the reserve full), counted as "unkeyed".
    pub by_unkeyed: u64,
    /// `--str`: spans recorded without their start strings, which the kernel could not keep
    /// until the end (the string map full, or out of memory at that moment).
    pub strings_dropped: u64,
    /// `--str`: strings records the ring buffer had no room for. Their spans and events are
    /// counted in `spans`/`events` and printed (marked) when their own record fit: `lost`
    /// counts spans and events, never these.
    pub strings_lost: u64,
    /// `--perfetto`: off-CPU intervals the kernel dropped so that spans kept their room in the
    /// ring buffer (it was half full: the reader fell behind) or that found it full: missing
    /// from the trace's wait slices (their spans' split still counts their time).
    pub waits_lost: u64,
    /// `--perfetto`: off-CPU intervals past `--perfetto-max-waits`, not drawn.
    pub waits_left_out: u64,
}

/// Span starts dropped because a kernel-side limit was reached (their ends are dropped with
/// them, not counted as unmatched).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// More threads had per-thread span state than `--max-threads`.
    pub threads_full: u64,
    /// More id-paired spans were open at once than `--max-open-ids`.
    pub id_spans_full: u64,
    /// Nesting deeper than the per-thread stack (`MAX_DEPTH`).
    pub depth: u64,
    /// Probe hits the kernel did not run the program for (another BPF program was running on
    /// that CPU): their spans and events are missing.
    pub kernel_skipped: u64,
}

impl Dropped {
    pub fn any(&self) -> bool {
        self.threads_full + self.id_spans_full + self.depth + self.kernel_skipped > 0
    }

    /// One stderr line per limit that dropped spans: which limit, and how to raise it.
    pub fn warnings(&self, max_threads: u32, max_open_ids: u32) -> Vec<String> {
        let mut w = Vec::new();
        if self.threads_full > 0 {
            w.push(format!(
                "warning: {} span starts dropped: more than {max_threads} threads held span state; raise --max-threads",
                self.threads_full
            ));
        }
        if self.id_spans_full > 0 {
            w.push(format!(
                "warning: {} span starts dropped: more than {max_open_ids} id-paired spans were open at once; raise --max-open-ids",
                self.id_spans_full
            ));
        }
        if self.depth > 0 {
            w.push(format!(
                "warning: {} span starts dropped: spans nested deeper than {} on one thread (a build-time limit, MAX_DEPTH)",
                self.depth,
                usdt_trace_common::MAX_DEPTH
            ));
        }
        if self.kernel_skipped > 0 {
            w.push(format!(
                "warning: {} probe hits were skipped by the kernel (another BPF program was running on that CPU): their spans and events are missing",
                self.kernel_skipped
            ));
        }
        w
    }
}

/// The kinds of off-CPU wait of a span's split (`Acct::wait_ns`, `Acct::waits`): name, ns,
/// count, and whether the kind is part of sleep (else of io). A kind the span never waited on
/// has 0 of both.
pub fn wait_kinds(
    a: &usdt_trace_common::Acct,
) -> [(&'static str, u64, u32, bool); usdt_trace_common::WAIT_KINDS] {
    use usdt_trace_common::{WAIT_DISK, WAIT_FAULT, WAIT_LOCK, WAIT_NET, WAIT_TIMER};
    let k = |kind: u32| (kind - 1) as usize;
    [
        ("lock", a.wait_ns[k(WAIT_LOCK)], a.waits[k(WAIT_LOCK)], true),
        ("net", a.wait_ns[k(WAIT_NET)], a.waits[k(WAIT_NET)], true),
        (
            "timer",
            a.wait_ns[k(WAIT_TIMER)],
            a.waits[k(WAIT_TIMER)],
            true,
        ),
        (
            "disk",
            a.wait_ns[k(WAIT_DISK)],
            a.waits[k(WAIT_DISK)],
            false,
        ),
        (
            "fault",
            a.wait_ns[k(WAIT_FAULT)],
            a.waits[k(WAIT_FAULT)],
            false,
        ),
    ]
}

/// The kinds of off-CPU wait a span name's spans summed (`--hist`'s `WaitSums`), as
/// [`wait_kinds`] gives one span's: name, ns, count, and whether the kind is part of sleep
/// (else of io).
pub fn wait_sum_kinds(
    w: &usdt_trace_common::WaitSums,
) -> [(&'static str, u64, u64, bool); usdt_trace_common::WAIT_KINDS] {
    let one = wait_kinds(&usdt_trace_common::Acct::default());
    std::array::from_fn(|k| (one[k].0, w.ns[k], w.n[k], one[k].3))
}

/// Human-readable duration: `812ns`, `12.3us`, `4.56ms`, `1.234s`.
pub fn fmt_duration(ns: u64) -> String {
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{:.1}us", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2}ms", ns as f64 / 1e6)
    } else {
        format!("{:.3}s", ns as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use usdt_trace_common::{
        Acct, EventRecord, RecordHeader, RecordKind, SpanRecord, StrsRecord, MAX_ARGS, STRS_OK,
        STR_MAX_CAP,
    };

    fn site(args: &[ArgFmt], str_arg: Option<usize>) -> SiteInfo {
        let strs: Vec<(usize, usize)> = str_arg.map(|a| (a, 0)).into_iter().collect();
        SiteInfo::for_test("p", "n", args, &strs)
    }

    fn event() -> EventRecord {
        EventRecord {
            hdr: header(RecordKind::EVENT),
            has_strs: 0,
            _pad: 0,
            args: [0; MAX_ARGS],
        }
    }

    fn header(kind: RecordKind) -> RecordHeader {
        let mut comm = [0u8; 16];
        comm[..5].copy_from_slice(b"a\"b\x01c");
        RecordHeader {
            kind,
            site: 0,
            pid: 10,
            tid: 11,
            ts_ns: 5000,
            comm,
        }
    }

    #[test]
    fn event_json_is_valid_and_signed() {
        let mut r = event();
        r.args[0] = (-5i64) as u64;
        r.args[1] = u64::MAX;
        let s = site(
            &[ArgFmt::Signed, ArgFmt::Unsigned, ArgFmt::Unreadable],
            None,
        );
        let mut out = Vec::new();
        event_json(&mut out, &s, &r, None);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["type"], "event");
        assert_eq!(v["comm"], "a\"b\u{1}c");
        assert_eq!(v["args"][0], -5);
        assert_eq!(v["args"][1], u64::MAX);
        assert!(v["args"][2].is_null());
        assert_eq!(v["ts_ns"], 5000);
    }

    #[test]
    fn untrusted_strings_stay_valid_json() {
        let r = event();
        let evil = b"\xff\xfe\"\\\n\x7f\xc3(";
        let s = site(&[ArgFmt::Unsigned], Some(0));
        let mut out = Vec::new();
        event_json(&mut out, &s, &r, Some(&test_strs(&[(0, evil, STRS_OK)])));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        // Nothing is lost: the bytes that are not UTF-8 are escaped, backslashes doubled.
        assert_eq!(
            v["args"][0].as_str().unwrap(),
            "\\xff\\xfe\"\\\\\n\u{7f}\\xc3("
        );
        assert_eq!(v["escaped"], serde_json::json!(["arg0"]));
        let line = event_text(&s, &r, Some(&test_strs(&[(0, evil, STRS_OK)])), 0);
        assert!(line.contains(r#"("\xff\xfe\"\\\n\u{7f}\xc3(")"#), "{line}");
        // A string whose length field lies is cut at the slot.
        let mut strs = test_strs(&[(0, b"x", STRS_OK)]);
        strs.len[0] = 9999;
        let mut out = Vec::new();
        event_json(&mut out, &s, &r, Some(&strs));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["args"][0].as_str().unwrap().len(), STR_MAX_CAP);
    }

    #[test]
    fn strings_join_the_record_of_their_thread_and_time_only() {
        let mut join = crate::plan::record::StrJoin::default();
        let mut strs = StrsRecord {
            hdr: header(RecordKind::STRS),
            strs: *test_strs(&[(1, b"hi", STRS_OK)]),
        };
        join.hold(&strs);
        // Another thread's record, or this thread's at another time, does not take them.
        let mut other = header(RecordKind::EVENT);
        other.tid = 99;
        assert!(join.take(&other).is_none());
        let mut later = header(RecordKind::EVENT);
        later.ts_ns += 1;
        assert!(join.take(&later).is_none());
        // Taking consumes them, whether or not they matched.
        assert!(join.take(&header(RecordKind::EVENT)).is_none());
        strs.hdr.ts_ns = 7;
        join.hold(&strs);
        let mut h = header(RecordKind::SPAN);
        h.ts_ns = 7;
        assert_eq!(join.take(&h).unwrap().strs.bytes(1), b"hi");
        assert!(join.take(&h).is_none());
    }

    #[test]
    fn span_json_has_schema_fields_and_split() {
        let r = SpanRecord {
            hdr: header(RecordKind::SPAN),
            start_site: 0,
            start_tid: 11,
            start_ns: 1000,
            acct: Acct {
                oncpu: 1000,
                runq: 500,
                sleep: 2000,
                io: 500,
                ..Acct::default()
            },
            acct_valid: 1,
            waker_pid: 77,
            waker_tid: 78,
            has_strs: 0,
            longest_off_ns: 1500,
            waker_comm: *b"holder\0\0\0\0\0\0\0\0\0\0",
            args: [7; MAX_ARGS],
            end_args: [200; MAX_ARGS],
            idle_ns: 0,
            polls: 0,
            threads: 0,
            steal_start: 0,
        };
        let pair = PairInfo {
            provider: "httpserver".into(),
            stem: "request".into(),
            start: "request__start".into(),
            ends: vec!["request__end".into()],
        };
        let mut out = Vec::new();
        span_json(
            &mut out,
            &pair,
            &site(&[ArgFmt::Unsigned], None),
            &site(&[ArgFmt::Unsigned, ArgFmt::Unsigned], None),
            &r,
            None,
            None,
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["type"], "span");
        assert_eq!(v["name"], "request");
        assert_eq!(v["start"], "request__start");
        // "end" names the end site that closed the span.
        assert_eq!(v["end"], "n");
        assert_eq!(v["duration_ns"], 4000);
        assert_eq!(v["oncpu_ns"], 1000);
        assert_eq!(v["offcpu_ns"], 3000);
        assert_eq!(
            v["oncpu_ns"].as_u64().unwrap() + v["offcpu_ns"].as_u64().unwrap(),
            v["duration_ns"].as_u64().unwrap()
        );
        assert_eq!(v["waker"]["comm"], "holder");
        assert_eq!(v["args"], serde_json::json!([7]));
        assert_eq!(v["end_args"], serde_json::json!([200, 200]));
        assert!(v.get("start_tid").is_none());
        let line = span_text(
            &pair,
            &site(&[ArgFmt::Unsigned], None),
            &site(&[], None),
            &r,
            None,
            0,
            true,
        );
        assert!(line.contains("httpserver:request"), "{line}");
        assert!(!line.contains("no split"), "{line}");
        assert!(line.contains("cpu 25% runq 12% sleep 50% io 12%"), "{line}");
        // The kinds of wait follow the part they are in: lock, net and timer in sleep, disk and
        // fault in io.
        let mut r = r;
        r.acct.wait_ns = [1240, 360, 0, 200, 280];
        r.acct.waits = [3, 1, 0, 2, 4];
        let line = span_text(
            &pair,
            &site(&[ArgFmt::Unsigned], None),
            &site(&[], None),
            &r,
            None,
            0,
            true,
        );
        assert!(
            line.contains(
                "cpu 25% runq 12% sleep 50% (lock 31%, net 9%) io 12% (disk 5%, fault 7%)"
            ),
            "{line}"
        );
    }

    #[test]
    fn decode_checks_sizes() {
        assert!(decode(&[]).is_none());
        assert!(decode(&[1, 0, 0, 0]).is_none());
        let buf = [0u64; 8];
        // SAFETY: the 64 bytes of `buf`, which outlives the slice.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, 64) };
        assert!(decode(bytes).is_none()); // kind 0
    }

    #[test]
    fn durations() {
        assert_eq!(fmt_duration(812), "812ns");
        assert_eq!(fmt_duration(12_345), "12.3us");
        assert_eq!(fmt_duration(4_560_000), "4.56ms");
        assert_eq!(fmt_duration(1_234_000_000), "1.234s");
    }

    #[test]
    fn summary_line() {
        let mut out = Vec::new();
        summary_json(
            &mut out,
            &Summary {
                events: 1,
                spans: 2,
                lost: 3,
                unmatched: 4,
                unmatched_end: 5,
                duration_ns: 6,
                dropped: Dropped {
                    threads_full: 7,
                    id_spans_full: 8,
                    depth: 9,
                    kernel_skipped: 0,
                },
                filtered: 0,
                ..Default::default()
            },
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["type"], "summary");
        assert_eq!(v["lost"], 3);
        assert_eq!(v["unmatched"], 4);
        assert_eq!(v["dropped"]["threads_full"], 7);
        assert_eq!(v["dropped"]["id_spans_full"], 8);
        assert_eq!(v["dropped"]["depth"], 9);
    }

    #[test]
    fn drop_warnings_name_the_flag() {
        let none = Dropped::default();
        assert!(!none.any() && none.warnings(8, 16).is_empty());
        let d = Dropped {
            threads_full: 4,
            id_spans_full: 0,
            depth: 16,
            kernel_skipped: 0,
        };
        let w = d.warnings(8, 16);
        assert_eq!(w.len(), 2);
        assert!(w[0].contains("more than 8 threads") && w[0].contains("--max-threads"));
        let deeper = format!("deeper than {}", usdt_trace_common::MAX_DEPTH);
        assert!(w[1].contains(&deeper), "{}", w[1]);
    }
}
