//! Records from the kernel → NDJSON or aligned text, and histograms. Pure: formats into a
//! byte buffer the caller writes out.
//!
//! The ring buffer carries fixed-size `#[repr(C)]` records; [`decode`] checks each one's size
//! before reading it. Site metadata (provider, name, which arguments are signed, which one is a
//! string) was decided once when attaching and is looked up here by the record's site index,
//! so nothing is re-parsed per record. Bytes read from the traced process (comm, strings) are
//! untrusted: they are escaped so the JSON is always valid.

pub mod hist;

use std::io::Write;
use usdt_trace_common::{EventRecord, RecordHeader, RecordKind, SpanRecord, MAX_ARGS, STR_LEN};

/// What the formatter knows about one attached site.
#[derive(Clone, Debug, Default)]
pub struct SiteInfo {
    pub provider: String,
    pub name: String,
    /// Per argument: how to print it.
    pub args: Vec<ArgFmt>,
    /// Index of the argument captured as a string.
    pub str_arg: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgFmt {
    Unsigned,
    Signed,
    /// The tracer cannot read it (float, struct, unsupported operand): printed as null.
    Unreadable,
}

/// A span name, for output.
#[derive(Clone, Debug, Default)]
pub struct PairInfo {
    pub provider: String,
    pub stem: String,
    pub start: String,
    pub end: String,
}

/// One decoded ring buffer record.
pub enum Record<'a> {
    Event(&'a EventRecord),
    Span(&'a SpanRecord),
}

/// Decode a ring buffer record, or None if it is malformed (never trusted blindly).
pub fn decode(buf: &[u8]) -> Option<Record<'_>> {
    if buf.len() < std::mem::size_of::<RecordHeader>() {
        return None;
    }
    // The ring buffer hands out 8-byte aligned samples; check anyway rather than assume.
    let aligned = |align: usize| (buf.as_ptr() as usize).is_multiple_of(align);
    // SAFETY: size checked; RecordHeader is plain data valid for any bits.
    let kind = RecordKind(unsafe { std::ptr::read_unaligned(buf.as_ptr() as *const u32) });
    match kind {
        RecordKind::EVENT if buf.len() >= std::mem::size_of::<EventRecord>() && aligned(8) => {
            // SAFETY: size and alignment checked, EventRecord is valid for any bits.
            Some(Record::Event(unsafe {
                &*(buf.as_ptr() as *const EventRecord)
            }))
        }
        RecordKind::SPAN if buf.len() >= std::mem::size_of::<SpanRecord>() && aligned(8) => {
            // SAFETY: as above.
            Some(Record::Span(unsafe {
                &*(buf.as_ptr() as *const SpanRecord)
            }))
        }
        _ => None,
    }
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
}

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
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
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

fn json_str(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    json_escape(out, s);
    out.push(b'"');
}

fn cstr(b: &[u8]) -> &[u8] {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..n]
}

fn push_u64(out: &mut Vec<u8>, v: u64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

fn push_i64(out: &mut Vec<u8>, v: i64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

fn string_of(str_len: u32, s: &[u8; STR_LEN]) -> &[u8] {
    let n = (str_len as usize).min(STR_LEN);
    cstr(&s[..n])
}

fn json_args(out: &mut Vec<u8>, site: &SiteInfo, args: &[u64; MAX_ARGS], s: Option<&[u8]>) {
    out.push(b'[');
    for (i, fmt) in site.args.iter().enumerate().take(MAX_ARGS) {
        if i > 0 {
            out.push(b',');
        }
        if site.str_arg == Some(i) {
            match s {
                Some(bytes) => json_str(out, bytes),
                None => out.extend_from_slice(b"null"),
            }
            continue;
        }
        match fmt {
            ArgFmt::Unsigned => push_u64(out, args[i]),
            ArgFmt::Signed => push_i64(out, args[i] as i64),
            ArgFmt::Unreadable => out.extend_from_slice(b"null"),
        }
    }
    out.push(b']');
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
pub fn event_json(out: &mut Vec<u8>, site: &SiteInfo, r: &EventRecord) {
    json_head(out, "event", &site.provider, &site.name, &r.hdr);
    out.extend_from_slice(b",\"ts_ns\":");
    push_u64(out, r.hdr.ts_ns);
    out.extend_from_slice(b",\"args\":");
    let s = (r.str_len > 0).then(|| string_of(r.str_len, &r.str));
    json_args(out, site, &r.args, s);
    out.extend_from_slice(b"}\n");
}

/// `{"type":"span",...}` line.
pub fn span_json(
    out: &mut Vec<u8>,
    pair: &PairInfo,
    start: &SiteInfo,
    end: &SiteInfo,
    r: &SpanRecord,
) {
    json_head(out, "span", &pair.provider, &pair.stem, &r.hdr);
    out.extend_from_slice(b",\"start\":");
    json_str(out, pair.start.as_bytes());
    out.extend_from_slice(b",\"end\":");
    json_str(out, pair.end.as_bytes());
    if r.start_tid != r.hdr.tid {
        out.extend_from_slice(b",\"start_tid\":");
        push_u64(out, r.start_tid as u64);
    }
    out.extend_from_slice(b",\"start_ns\":");
    push_u64(out, r.start_ns);
    out.extend_from_slice(b",\"duration_ns\":");
    push_u64(out, r.hdr.ts_ns.saturating_sub(r.start_ns));
    if r.acct_valid != 0 {
        let a = &r.acct;
        for (k, v) in [
            ("oncpu_ns", a.oncpu),
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
    let s = (r.str_len > 0).then(|| string_of(r.str_len, &r.str));
    json_args(out, start, &r.args, s);
    out.extend_from_slice(b",\"end_args\":");
    json_args(out, end, &r.end_args, None);
    out.extend_from_slice(b"}\n");
}

/// The final `{"type":"summary",...}` line.
pub fn summary_json(out: &mut Vec<u8>, s: &Summary) {
    let _ = writeln!(
        out,
        "{{\"type\":\"summary\",\"events\":{},\"spans\":{},\"lost\":{},\"unmatched\":{},\"unmatched_end\":{},\"duration_ns\":{}}}",
        s.events, s.spans, s.lost, s.unmatched, s.unmatched_end, s.duration_ns
    );
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

/// Column header for text mode.
pub fn text_header() -> String {
    format!(
        "{:<12} {:>7} {:>7} {:<15} {:<32} {:>10}  DETAILS\n",
        "TIME(s)", "PID", "TID", "COMM", "PROBE", "DURATION"
    )
}

fn text_prefix(h: &RecordHeader, t0: u64, ts: u64, probe: &str, dur: &str) -> String {
    let secs = ts.saturating_sub(t0) as f64 / 1e9;
    let comm = String::from_utf8_lossy(cstr(&h.comm))
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect::<String>();
    format!(
        "{:<12.6} {:>7} {:>7} {:<15} {:<32} {:>10}  ",
        secs, h.pid, h.tid, comm, probe, dur
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
        r.start_ns,
        &format!("{}:{}", pair.provider, pair.stem),
        &fmt_duration(dur),
    );
    let st = (r.str_len > 0).then(|| string_of(r.str_len, &r.str));
    text_args(&mut s, start, &r.args, st);
    if !end.args.is_empty() {
        s.push_str(" -> ");
        text_args(&mut s, end, &r.end_args, None);
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
    format!(
        "{} spans, {} events, {} lost, {} unmatched starts, {} unmatched ends in {:.1}s\n",
        s.spans,
        s.events,
        s.lost,
        s.unmatched,
        s.unmatched_end,
        s.duration_ns as f64 / 1e9
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use usdt_trace_common::Acct;

    fn site(args: &[ArgFmt], str_arg: Option<usize>) -> SiteInfo {
        SiteInfo {
            provider: "p".into(),
            name: "n".into(),
            args: args.to_vec(),
            str_arg,
        }
    }

    fn event() -> EventRecord {
        EventRecord {
            hdr: header(RecordKind::EVENT),
            str_len: 0,
            _pad: 0,
            args: [0; MAX_ARGS],
            str: [0; STR_LEN],
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
        event_json(&mut out, &s, &r);
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
        let mut r = event();
        let evil = b"\xff\xfe\"\\\n\x7f\xc3(";
        r.str[..evil.len()].copy_from_slice(evil);
        r.str_len = evil.len() as u32 + 1;
        let s = site(&[ArgFmt::Unsigned], Some(0));
        let mut out = Vec::new();
        event_json(&mut out, &s, &r);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(v["args"][0].as_str().unwrap().contains("\"\\\n"));
        // A string whose length field lies is cut at the buffer.
        r.str = [b'x'; STR_LEN];
        r.str_len = 9999;
        let mut out = Vec::new();
        event_json(&mut out, &s, &r);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["args"][0].as_str().unwrap().len(), STR_LEN);
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
            },
            acct_valid: 1,
            waker_pid: 77,
            waker_tid: 78,
            str_len: 0,
            longest_off_ns: 1500,
            waker_comm: *b"holder\0\0\0\0\0\0\0\0\0\0",
            args: [7; MAX_ARGS],
            end_args: [200; MAX_ARGS],
            str: [0; STR_LEN],
        };
        let pair = PairInfo {
            provider: "httpserver".into(),
            stem: "request".into(),
            start: "request__start".into(),
            end: "request__end".into(),
        };
        let mut out = Vec::new();
        span_json(
            &mut out,
            &pair,
            &site(&[ArgFmt::Unsigned], None),
            &site(&[ArgFmt::Unsigned, ArgFmt::Unsigned], None),
            &r,
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["type"], "span");
        assert_eq!(v["name"], "request");
        assert_eq!(v["start"], "request__start");
        assert_eq!(v["end"], "request__end");
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
            0,
        );
        assert!(line.contains("httpserver:request"), "{line}");
        assert!(line.contains("cpu 25% runq 12% sleep 50% io 12%"), "{line}");
    }

    #[test]
    fn decode_checks_sizes() {
        assert!(decode(&[]).is_none());
        assert!(decode(&[1, 0, 0, 0]).is_none());
        let buf = [0u64; 8];
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
            },
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["type"], "summary");
        assert_eq!(v["lost"], 3);
        assert_eq!(v["unmatched"], 4);
    }
}
