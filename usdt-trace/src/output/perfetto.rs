//! `--perfetto FILE`: a Perfetto protobuf trace, written as the run goes.
//!
//! A `Trace` is `repeated TracePacket packet = 1`, so the file is the concatenation of
//! length-delimited packets and is valid at every flush boundary (after Ctrl-C, `--duration`,
//! or a crash between batches). Each batch is encoded into one buffer and written at
//! [`Sink::flush`]; nothing else is kept but the set of tracks already described.
//!
//! Times: records carry CLOCK_MONOTONIC; packets say so (`timestamp_clock_id` =
//! BUILTIN_CLOCK_MONOTONIC) and the first packet is a `ClockSnapshot` of BOOTTIME, MONOTONIC
//! and REALTIME read together, so the trace processor converts to its own (boot) clock and can
//! show wall time.
//!
//! Tracks: one per process, one per thread under it. A span that starts and ends on one
//! thread and nests properly with the other spans of that thread is a slice on the thread's
//! track; a span that crossed threads (or overlaps a sibling without nesting, as spans paired
//! by key can) goes on an async track under its process, reused by later spans that do not
//! overlap it, so no track ever holds crossing slices.
//!
//! The encoder is written by hand from the field numbers of Perfetto's `.proto` files
//! (protos/perfetto/trace/...); the e2e test decodes the file with Perfetto's own generated
//! Python classes.

use super::decode::cstr;
use super::sink::{Sink, View};
use super::{arg_key, arg_value, str_value, ArgValue, RunInfo, SiteInfo, Summary};
use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use usdt_trace_common::{SpanRecord, StrSet, MAX_ARGS};

/// Protobuf wire encoding: just what the trace needs.
pub mod pb {
    pub fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
        varint(out, ((field as u64) << 3) | wire as u64);
    }

    /// uint32/uint64/enum/bool fields.
    pub fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
        key(out, field, 0);
        varint(out, v);
    }

    /// int32/int64 fields: two's complement as a 10-byte varint when negative.
    pub fn int(out: &mut Vec<u8>, field: u32, v: i64) {
        uint(out, field, v as u64);
    }

    pub fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
        key(out, field, 2);
        varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }

    /// A `string` field: protobuf requires UTF-8, and bytes from traced processes may not be.
    pub fn string(out: &mut Vec<u8>, field: u32, b: &[u8]) {
        match std::str::from_utf8(b) {
            Ok(_) => bytes(out, field, b),
            Err(_) => bytes(out, field, String::from_utf8_lossy(b).as_bytes()),
        }
    }

    /// A nested message, encoded by `f` after a length prefix patched in afterwards.
    pub fn message(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
        key(out, field, 2);
        let mut inner = Vec::new();
        f(&mut inner);
        varint(out, inner.len() as u64);
        out.extend_from_slice(&inner);
    }
}

// Field numbers from protos/perfetto/trace/trace_packet.proto and friends.
const TRACE_PACKET: u32 = 1;
mod packet {
    pub const CLOCK_SNAPSHOT: u32 = 6;
    pub const TIMESTAMP: u32 = 8;
    pub const TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const TRACE_PACKET_DEFAULTS: u32 = 59;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    /// TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED.
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
}
mod clock {
    pub const REALTIME: u64 = 1;
    pub const MONOTONIC: u64 = 3;
    pub const BOOTTIME: u64 = 6;
}
mod track {
    pub const UUID: u32 = 1;
    pub const NAME: u32 = 2;
    pub const PROCESS: u32 = 3;
    pub const THREAD: u32 = 4;
    pub const PARENT_UUID: u32 = 5;
}
mod event {
    pub const DEBUG_ANNOTATIONS: u32 = 4;
    pub const TYPE: u32 = 9;
    pub const TRACK_UUID: u32 = 11;
    pub const CATEGORIES: u32 = 22;
    pub const NAME: u32 = 23;
    pub const SLICE_BEGIN: u64 = 1;
    pub const SLICE_END: u64 = 2;
    pub const INSTANT: u64 = 3;
}
mod annot {
    pub const UINT: u32 = 3;
    pub const INT: u32 = 4;
    pub const STRING: u32 = 6;
    pub const NAME: u32 = 10;
}

/// All packets come from one writer, so one sequence.
const SEQ_ID: u64 = 1;

/// Track uuids: a kind tag above any pid/tid (which are < 2^22) or lane counter.
fn process_uuid(pid: u32) -> u64 {
    (1 << 60) | pid as u64
}
fn thread_uuid(tid: u32) -> u64 {
    (2 << 60) | tid as u64
}
fn async_uuid(n: u64) -> u64 {
    (3 << 60) | n
}

/// How many non-nested intervals per thread are remembered to place later spans. Spans come
/// in end order per thread, so only intervals still open when a later span started matter;
/// an old, forgotten one can at worst let a slice mis-nest in the viewer.
const THREAD_HISTORY: usize = 64;

/// Threads (and processes) remembered as described; see [`PerfettoSink::tracks_for`].
const MAX_TRACKS: usize = 1 << 16;

/// One async lane: the spans of one name in one process that fit end to start.
struct Lane {
    uuid: u64,
    last_end: u64,
}

/// The Perfetto sink. `W` is the file (any writer, for tests).
pub struct PerfettoSink<W: Write> {
    out: W,
    buf: Vec<u8>,
    processes: HashSet<u32>,
    threads: HashSet<u32>,
    /// Per thread: top-level intervals of its slices so far (start, end), oldest first.
    thread_slices: HashMap<u32, Vec<(u64, u64)>>,
    /// Per (pid, span name): async lanes.
    lanes: HashMap<(u32, String), Vec<Lane>>,
    next_lane: u64,
}

impl<W: Write> PerfettoSink<W> {
    pub fn new(out: W) -> Self {
        PerfettoSink {
            out,
            buf: Vec::with_capacity(1 << 16),
            processes: HashSet::new(),
            threads: HashSet::new(),
            thread_slices: HashMap::new(),
            lanes: HashMap::new(),
            next_lane: 1,
        }
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    fn packet(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        pb::message(&mut self.buf, TRACE_PACKET, |p| {
            pb::uint(p, packet::TRUSTED_PACKET_SEQUENCE_ID, SEQ_ID);
            f(p)
        });
    }

    /// Process and thread tracks, described the first time each is seen.
    fn tracks_for(&mut self, pid: u32, tid: u32, comm: &[u8]) {
        // Bounded over a long run of many short-lived threads: a track forgotten is only
        // described again (same uuid), which the trace allows.
        if self.threads.len() >= MAX_TRACKS || self.processes.len() >= MAX_TRACKS {
            self.threads.clear();
            self.processes.clear();
            self.thread_slices.clear();
            self.lanes.clear();
        }
        if self.processes.insert(pid) {
            // The process's name is its main thread's; read it while the process is there.
            let name = std::fs::read(format!("/proc/{pid}/comm"))
                .map(|mut n| {
                    while n.last() == Some(&b'\n') {
                        n.pop();
                    }
                    n
                })
                .unwrap_or_else(|_| {
                    if pid == tid {
                        comm.to_vec()
                    } else {
                        Vec::new()
                    }
                });
            self.packet(|p| {
                pb::message(p, packet::TRACK_DESCRIPTOR, |t| {
                    pb::uint(t, track::UUID, process_uuid(pid));
                    pb::message(t, track::PROCESS, |d| {
                        pb::int(d, 1, pid as i64); // pid
                        if !name.is_empty() {
                            pb::string(d, 6, &name); // process_name
                        }
                    });
                });
            });
        }
        if self.threads.insert(tid) {
            self.packet(|p| {
                pb::message(p, packet::TRACK_DESCRIPTOR, |t| {
                    pb::uint(t, track::UUID, thread_uuid(tid));
                    pb::uint(t, track::PARENT_UUID, process_uuid(pid));
                    pb::message(t, track::THREAD, |d| {
                        pb::int(d, 1, pid as i64); // pid
                        pb::int(d, 2, tid as i64); // tid
                        pb::string(d, 5, comm); // thread_name
                    });
                });
            });
        }
    }

    /// Whether a span of this thread nests with what the thread's track already holds, and
    /// remembers it if so.
    fn nests_on_thread(&mut self, tid: u32, start: u64, end: u64) -> bool {
        let v = self.thread_slices.entry(tid).or_default();
        // Slices that started inside this one ended before it (end order): they nest in it.
        let keep = v.iter().position(|&(s, _)| s >= start).unwrap_or(v.len());
        if let Some(&(_, e)) = v[..keep].last() {
            if e > start {
                return false; // started inside an earlier slice and ends after it
            }
        }
        v.truncate(keep);
        v.push((start, end));
        if v.len() > THREAD_HISTORY {
            v.remove(0);
        }
        true
    }

    /// An async track for a span of `name` in `pid` over [start, end].
    fn lane(&mut self, pid: u32, name: &str, start: u64, end: u64) -> u64 {
        let lanes = self.lanes.entry((pid, name.to_string())).or_default();
        if let Some(l) = lanes.iter_mut().find(|l| l.last_end <= start) {
            l.last_end = end;
            return l.uuid;
        }
        let uuid = async_uuid(self.next_lane);
        self.next_lane += 1;
        lanes.push(Lane {
            uuid,
            last_end: end,
        });
        let n = lanes.len();
        self.packet(|p| {
            pb::message(p, packet::TRACK_DESCRIPTOR, |t| {
                pb::uint(t, track::UUID, uuid);
                pb::uint(t, track::PARENT_UUID, process_uuid(pid));
                pb::string(t, track::NAME, format!("{name} (async {n})").as_bytes());
            });
        });
        uuid
    }

    fn track_event(
        &mut self,
        ts: u64,
        kind: u64,
        uuid: u64,
        name: Option<(&str, &str)>,
        annotations: &[u8],
    ) {
        self.packet(|p| {
            pb::uint(p, packet::TIMESTAMP, ts);
            pb::uint(p, packet::TIMESTAMP_CLOCK_ID, clock::MONOTONIC);
            pb::message(p, packet::TRACK_EVENT, |e| {
                pb::uint(e, event::TYPE, kind);
                pb::uint(e, event::TRACK_UUID, uuid);
                if let Some((provider, name)) = name {
                    pb::string(e, event::CATEGORIES, provider.as_bytes());
                    pb::string(e, event::NAME, format!("{provider}:{name}").as_bytes());
                }
                e.extend_from_slice(annotations);
            });
        });
    }
}

fn annotation(out: &mut Vec<u8>, name: &str, value: impl FnOnce(&mut Vec<u8>)) {
    pb::message(out, event::DEBUG_ANNOTATIONS, |a| {
        pb::string(a, annot::NAME, name.as_bytes());
        value(a);
    });
}

/// `arg0`, `arg1`, ... (prefix `end_arg` for end arguments) as typed annotations; unreadable
/// arguments are left out, the captured string is a string.
fn args_annotations(
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

fn span_annotations(
    out: &mut Vec<u8>,
    start: &SiteInfo,
    end: &SiteInfo,
    r: &SpanRecord,
    strs: Option<&StrSet>,
) {
    args_annotations(out, "arg", start, &r.args, strs);
    args_annotations(out, "end_arg", end, &r.end_args, strs);
    annotation(out, "end", |a| {
        pb::string(a, annot::STRING, end.name.as_bytes())
    });
    if r.start_tid != r.hdr.tid {
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
            ("offcpu_ns", x.runq + x.sleep + x.io),
            ("runq_ns", x.runq),
            ("sleep_ns", x.sleep),
            ("io_ns", x.io),
        ] {
            annotation(out, k, |a| pb::uint(a, annot::UINT, v));
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

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl<W: Write> Sink for PerfettoSink<W> {
    fn begin(&mut self, run: &RunInfo) -> io::Result<()> {
        let mono = clock_ns(libc::CLOCK_MONOTONIC);
        let boot = clock_ns(libc::CLOCK_BOOTTIME);
        let real = run.clock_zero_unix_ns + mono;
        // The sequence's first packet: clears its (empty) incremental state and sets the
        // clock of the packets that follow; the snapshot lets the viewer map it to boot time.
        self.packet(|p| {
            pb::uint(p, packet::TIMESTAMP, boot);
            pb::uint(
                p,
                packet::SEQUENCE_FLAGS,
                packet::SEQ_INCREMENTAL_STATE_CLEARED,
            );
            pb::message(p, packet::TRACE_PACKET_DEFAULTS, |d| {
                pb::uint(d, packet::TIMESTAMP_CLOCK_ID, clock::MONOTONIC);
            });
            pb::message(p, packet::CLOCK_SNAPSHOT, |c| {
                for (id, ts) in [
                    (clock::BOOTTIME, boot),
                    (clock::MONOTONIC, mono),
                    (clock::REALTIME, real),
                ] {
                    pb::message(c, 1, |k| {
                        pb::uint(k, 1, id); // clock_id
                        pb::uint(k, 2, ts); // timestamp
                    });
                }
                pb::uint(c, 2, clock::BOOTTIME); // primary_trace_clock
            });
        });
        self.flush()
    }

    fn record(&mut self, v: &View) -> io::Result<()> {
        match *v {
            View::Event { site, rec, strs } => {
                let h = &rec.hdr;
                self.tracks_for(h.pid, h.tid, cstr(&h.comm));
                let mut ann = Vec::new();
                args_annotations(&mut ann, "arg", site, &rec.args, strs);
                self.track_event(
                    h.ts_ns,
                    event::INSTANT,
                    thread_uuid(h.tid),
                    Some((&site.provider, &site.name)),
                    &ann,
                );
            }
            View::Span {
                pair,
                start,
                end,
                rec,
                strs,
                ..
            } => {
                let h = &rec.hdr;
                self.tracks_for(h.pid, h.tid, cstr(&h.comm));
                let (t0, t1) = (rec.start_ns, h.ts_ns.max(rec.start_ns));
                let uuid = if rec.start_tid == h.tid && self.nests_on_thread(h.tid, t0, t1) {
                    thread_uuid(h.tid)
                } else {
                    let name = format!("{}:{}", pair.provider, pair.stem);
                    self.lane(h.pid, &name, t0, t1)
                };
                let mut ann = Vec::new();
                span_annotations(&mut ann, start, end, rec, strs);
                let name = Some((pair.provider.as_str(), pair.stem.as_str()));
                self.track_event(t0, event::SLICE_BEGIN, uuid, name, &ann);
                self.track_event(t1, event::SLICE_END, uuid, None, &[]);
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            // The file is written from the tracing loop: one write per batch, into the page
            // cache, is cheap next to the batch itself.
            self.out
                .write_all(&self.buf)
                .and_then(|_| self.out.flush())
                .map_err(|e| io::Error::new(e.kind(), format!("--perfetto: {e}")))?;
            self.buf.clear();
        }
        Ok(())
    }

    fn finish(&mut self, _s: &Summary) -> io::Result<()> {
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        let enc = |v: u64| {
            let mut o = Vec::new();
            pb::varint(&mut o, v);
            o
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(1), [1]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(128), [0x80, 0x01]);
        assert_eq!(enc(300), [0xac, 0x02]);
        assert_eq!(enc(u64::MAX).len(), 10);
        // A negative int64 is its two's complement, ten bytes.
        let mut o = Vec::new();
        pb::int(&mut o, 4, -1);
        assert_eq!(
            o,
            [0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
    }

    #[test]
    fn fields_and_nesting() {
        let mut o = Vec::new();
        pb::message(&mut o, 1, |m| {
            pb::uint(m, 8, 150);
            pb::string(m, 23, b"ab");
        });
        // 0x0a = field 1 length-delimited; 0x40 = field 8 varint; 0xba 0x01 = field 23 bytes.
        assert_eq!(
            o,
            [0x0a, 0x08, 0x40, 0x96, 0x01, 0xba, 0x01, 0x02, b'a', b'b']
        );
        // Invalid UTF-8 is replaced, so a decoder never rejects the string.
        let mut o = Vec::new();
        pb::string(&mut o, 1, b"a\xff");
        assert_eq!(o, [0x0a, 0x04, b'a', 0xef, 0xbf, 0xbd]);
    }

    #[test]
    fn thread_nesting_and_lanes() {
        let mut s = PerfettoSink::new(Vec::new());
        // Children end first: inner (20..30), then outer (10..40) contains it.
        assert!(s.nests_on_thread(1, 20, 30));
        assert!(s.nests_on_thread(1, 10, 40));
        // A sibling after it.
        assert!(s.nests_on_thread(1, 50, 60));
        // Starts inside 50..60 and ends after: crossing, so not on the thread track.
        assert!(!s.nests_on_thread(1, 55, 70));
        // Another thread is independent.
        assert!(s.nests_on_thread(2, 55, 70));
        // Lanes: overlapping spans get different lanes, a later one reuses the first.
        let a = s.lane(7, "p:x", 0, 10);
        let b = s.lane(7, "p:x", 5, 15);
        let c = s.lane(7, "p:x", 12, 20);
        assert_ne!(a, b);
        assert_eq!(a, c);
        assert_ne!(s.lane(8, "p:x", 0, 1), a);
    }
}
