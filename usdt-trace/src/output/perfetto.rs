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
//! Tracks: one per process, one per thread under it. A slice sits on a thread's track only if
//! it nests strictly there: it started and ended on that thread, it was not polled (a polled
//! span — an async task's — left the thread between its polls, so whatever ran there in
//! between would be drawn as its child), it nests in time with the thread's other slices, and
//! every usdt-markers span it would enclose is its own descendant (two requests interleaved on
//! one worker enclose each other in time without being related). Everything else goes on an
//! async track under its process, reused by later spans that do not overlap it, so no track
//! ever holds crossing slices.
//!
//! Parent links that the tracks cannot show are flows: a markers span whose parent (argument
//! 1) is not the slice enclosing it on its track gets a flow arrow from that parent.
//!
//! The encoder is written by hand from the field numbers of Perfetto's `.proto` files
//! (protos/perfetto/trace/...); the e2e tests decode the file with Perfetto's own generated
//! Python classes and load it into Perfetto's own trace processor (tests/scripts/tp_query.js).

use super::sink::Sink;
use super::{arg_key, arg_value, str_value, ArgValue, RunInfo, SiteInfo, Summary};
use crate::plan::record::cstr;
use crate::plan::view::View;
use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use usdt_trace_common::{
    SpanRecord, StrSet, WaitRecord, MAX_ARGS, TS_IO, TS_RUNQ, WAIT_DISK, WAIT_FAULT, WAIT_LOCK,
    WAIT_NET, WAIT_TIMER,
};

mod annotate;
mod fields;
pub mod pb;
mod steal;
mod tracks;
use annotate::*;
use fields::*;

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
/// The track of the trace's own notes (wait slices left out or dropped).
const NOTES_UUID: u64 = 4 << 60;

/// Default of `--perfetto-max-waits`: off-CPU intervals drawn at most. An interval is ~200
/// bytes of trace (a wait slice and its run-queue slice, ~195 bytes each measured over 2
/// million), so ~20 MB of wait slices at most, which the Perfetto UI opens in seconds; a run
/// of spans whose waits matter is usually far below it (an interval costs the traced thread
/// two context switches).
pub const DEFAULT_MAX_WAITS: u64 = 100_000;

/// The flow from a markers span's parent to it: its (pid, id), mixed (splitmix64's finalizer)
/// so that ids of different processes do not collide in practice; never 0.
fn flow_id(pid: u32, id: u64) -> u64 {
    let mut z = id ^ ((pid as u64) << 40) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).max(1)
}

/// How many non-nested intervals per thread are remembered to place later spans. Spans come
/// in end order per thread, so only intervals still open when a later span started matter;
/// an old, forgotten one can at worst let a slice mis-nest in the viewer.
const THREAD_HISTORY: usize = 64;

/// Threads (and processes) remembered as described; see [`PerfettoSink::tracks_for`].
const MAX_TRACKS: usize = 1 << 16;

/// Markers span ids remembered (with their parents, and the flows waiting for a parent);
/// past this many the tables start over, which at worst loses a flow arrow or lets a slice
/// that would enclose a forgotten span's sibling stay on a thread track.
const MAX_MARKED: usize = 1 << 16;

/// A slice on a thread track, as later spans of that thread see it.
#[derive(Clone, Copy)]
struct Placed {
    start: u64,
    end: u64,
    /// Its markers span id, if paired by one.
    id: Option<u64>,
    /// On the thread's track; else drawn elsewhere but ran here (a markers span only).
    placed: bool,
}

/// A markers child waiting for its parent: the flow that will link them and the child's track.
struct Waiting {
    flow: u64,
    track: u64,
}

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
    /// Per thread: top-level slices so far, oldest first.
    thread_slices: HashMap<u32, Vec<Placed>>,
    /// Per start site: paired by a usdt-markers span id (argument 0, parent in argument 1).
    marked: Vec<bool>,
    /// (pid, markers id) → parent id, for the spans seen.
    parents: HashMap<(u32, u64), u64>,
    /// (pid, parent's markers id) → its children that ended before it.
    waiting: HashMap<(u32, u64), Vec<Waiting>>,
    /// Per (pid, span name): async lanes.
    lanes: HashMap<(u32, String), Vec<Lane>>,
    next_lane: u64,
    /// Off-CPU intervals drawn, and where the last one ended (where the slices stop when
    /// some were left out or dropped).
    waits_drawn: u64,
    last_wait_ns: u64,
    /// Where each thread's spans' steal goes (the `steal` slices).
    steal: steal::StealPlacer,
}

impl<W: Write> PerfettoSink<W> {
    /// `marked[start_site]`: see the field.
    pub fn new(out: W, marked: Vec<bool>) -> Self {
        PerfettoSink {
            out,
            buf: Vec::with_capacity(1 << 16),
            processes: HashSet::new(),
            threads: HashSet::new(),
            thread_slices: HashMap::new(),
            marked,
            parents: HashMap::new(),
            waiting: HashMap::new(),
            lanes: HashMap::new(),
            next_lane: 1,
            waits_drawn: 0,
            last_wait_ns: 0,
            steal: steal::StealPlacer::default(),
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

    fn track_event(
        &mut self,
        ts: u64,
        kind: u64,
        uuid: u64,
        // (category, name)
        name: Option<(&str, &str)>,
        annotations: &[u8],
        (flows, terminating): (&[u64], Option<u64>),
    ) {
        self.packet(|p| {
            pb::uint(p, packet::TIMESTAMP, ts);
            pb::uint(p, packet::TIMESTAMP_CLOCK_ID, clock::MONOTONIC);
            pb::message(p, packet::TRACK_EVENT, |e| {
                pb::uint(e, event::TYPE, kind);
                pb::uint(e, event::TRACK_UUID, uuid);
                if let Some((category, name)) = name {
                    pb::string(e, event::CATEGORIES, category.as_bytes());
                    pb::string(e, event::NAME, name.as_bytes());
                }
                e.extend_from_slice(annotations);
                for &f in flows {
                    pb::fixed64(e, event::FLOW_IDS, f);
                }
                if let Some(f) = terminating {
                    pb::fixed64(e, event::TERMINATING_FLOW_IDS, f);
                }
            });
        });
    }
}

/// The category of the off-CPU slices: a query (or the UI's filter) tells them from spans by it.
pub const WAIT_CATEGORY: &str = "offcpu";
/// The category of the `steal` slices.
pub const STEAL_CATEGORY: &str = "steal";

/// The slice name of an off-CPU wait of kind `kind` (`WAIT_*`): what the thread waited on, as
/// the spans' `wait_KIND_ns` annotations name it; `other` for the rest of sleep and I/O.
pub fn wait_name(kind: u32) -> &'static str {
    match kind {
        WAIT_LOCK => "lock",
        WAIT_NET => "net",
        WAIT_TIMER => "timer",
        WAIT_DISK => "disk",
        WAIT_FAULT => "fault",
        _ => "other",
    }
}

impl<W: Write> PerfettoSink<W> {
    /// A `steal` slice on thread track `uuid` (see `steal`): the amount exact in `steal_ns`,
    /// placed at the start of the on-CPU stretch it was taken from.
    fn steal_slice(&mut self, uuid: u64, p: &steal::Piece) {
        let mut ann = Vec::new();
        annotation(&mut ann, "steal_ns", |a| {
            pb::uint(a, annot::UINT, p.steal_ns)
        });
        annotation(&mut ann, "on_cpu_until_ns", |a| {
            pb::uint(a, annot::UINT, p.stretch_end_ns)
        });
        annotation(&mut ann, "placed", |a| {
            pb::string(
                a,
                annot::STRING,
                b"at the start of the on-CPU stretch the host took it from: the kernel learns how much, not when",
            )
        });
        let name = Some((STEAL_CATEGORY, "steal"));
        self.track_event(
            p.start_ns,
            event::SLICE_BEGIN,
            uuid,
            name,
            &ann,
            (&[], None),
        );
        let end = p.start_ns + p.len_ns;
        self.track_event(end, event::SLICE_END, uuid, None, &[], (&[], None));
    }
}

impl<W: Write> PerfettoSink<W> {
    /// When wait slices are missing (past `--perfetto-max-waits`, or dropped in the kernel so
    /// spans kept their room), the trace says so itself: an instant on a `usdt-trace` track,
    /// where the last drawn interval ended, named with the counts and carrying them
    /// (`waits_drawn`, `waits_left_out`, `waits_dropped`).
    fn waits_note(&mut self, s: &Summary) {
        if s.waits_left_out == 0 && s.waits_lost == 0 {
            return;
        }
        self.packet(|p| {
            pb::message(p, packet::TRACK_DESCRIPTOR, |t| {
                pb::uint(t, track::UUID, NOTES_UUID);
                pb::string(t, track::NAME, b"usdt-trace");
            });
        });
        let mut name = format!("{} wait slices drawn", self.waits_drawn);
        if s.waits_left_out > 0 {
            name.push_str(&format!(
                ", {} left out past --perfetto-max-waits",
                s.waits_left_out
            ));
        }
        if s.waits_lost > 0 {
            name.push_str(&format!(", {} dropped so spans were kept", s.waits_lost));
        }
        let mut ann = Vec::new();
        for (k, v) in [
            ("waits_drawn", self.waits_drawn),
            ("waits_left_out", s.waits_left_out),
            ("waits_dropped", s.waits_lost),
        ] {
            annotation(&mut ann, k, |a| pb::uint(a, annot::UINT, v));
        }
        let ts = if self.last_wait_ns > 0 {
            self.last_wait_ns
        } else {
            crate::util::clock::clock_ns(libc::CLOCK_MONOTONIC)
        };
        self.track_event(
            ts,
            event::INSTANT,
            NOTES_UUID,
            Some(("usdt-trace", &name)),
            &ann,
            (&[], None),
        );
    }
}

impl<W: Write> Sink for PerfettoSink<W> {
    fn begin(&mut self, run: &RunInfo) -> io::Result<()> {
        let mono = crate::util::clock::clock_ns(libc::CLOCK_MONOTONIC);
        let boot = crate::util::clock::clock_ns(libc::CLOCK_BOOTTIME);
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
                let name = format!("{}:{}", site.provider, site.name);
                self.track_event(
                    h.ts_ns,
                    event::INSTANT,
                    thread_uuid(h.tid),
                    Some((&site.provider, &name)),
                    &ann,
                    (&[], None),
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
                let marker = self
                    .marked
                    .get(rec.start_site as usize)
                    .copied()
                    .unwrap_or(false)
                    .then(|| (rec.args[0], rec.args[1]));
                if self.parents.len() >= MAX_MARKED || self.waiting.len() >= MAX_MARKED {
                    self.parents.clear();
                    self.waiting.clear();
                }
                if let Some((id, parent)) = marker {
                    self.parents.insert((h.pid, id), parent);
                }
                let here = Placed {
                    start: t0,
                    end: t1,
                    id: marker.map(|m| m.0),
                    placed: false,
                };
                let eligible = rec.start_tid == h.tid && rec.polls == 0;
                let uuid = if self.place_on_thread(h.pid, h.tid, here, eligible) {
                    thread_uuid(h.tid)
                } else {
                    let name = format!("{}:{}", pair.provider, pair.stem);
                    self.lane(h.pid, &name, t0, t1)
                };
                // Children that ended before it, on another track than its own: a flow from
                // it to each. Its own link to its parent is made when the parent ends.
                let flows: Vec<u64> = match marker {
                    Some((id, _)) => self
                        .waiting
                        .remove(&(h.pid, id))
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|w| w.track != uuid)
                        .map(|w| w.flow)
                        .collect(),
                    None => Vec::new(),
                };
                let terminating = match marker {
                    Some((id, parent)) if parent != 0 => {
                        let flow = flow_id(h.pid, id);
                        self.waiting
                            .entry((h.pid, parent))
                            .or_default()
                            .push(Waiting { flow, track: uuid });
                        Some(flow)
                    }
                    _ => None,
                };
                let mut ann = Vec::new();
                span_annotations(&mut ann, start, end, rec, strs, uuid != thread_uuid(h.tid));
                let name = format!("{}:{}", pair.provider, pair.stem);
                let name = Some((pair.provider.as_str(), name.as_str()));
                self.track_event(
                    t0,
                    event::SLICE_BEGIN,
                    uuid,
                    name,
                    &ann,
                    (&flows, terminating),
                );
                self.track_event(t1, event::SLICE_END, uuid, None, &[], (&[], None));
                // After the span's own slice: a steal slice that begins where it does sorts
                // inside it.
                if uuid == thread_uuid(h.tid) && rec.acct_valid == 1 && eligible {
                    let end_total = rec.steal_start.saturating_add(rec.acct.steal);
                    for p in self
                        .steal
                        .span(h.tid, (t0, rec.steal_start), (t1, end_total))
                    {
                        self.steal_slice(uuid, &p);
                    }
                }
            }
        }
        Ok(())
    }

    /// One off-CPU interval on its thread's track: the wait (asleep until woken, named by what
    /// it waited on, with the waker), then the run queue until the thread ran (`runq`); a
    /// preemption is a run-queue slice alone. The scheduler hooks send intervals only while
    /// the thread has a span open, and spans begin and end while their thread runs, so an
    /// interval never crosses a slice of the thread's track: it nests in the innermost one
    /// open there (a span on an async track is not on that track: its waits show on the
    /// thread track under whatever is open there, or at the top).
    fn wait(&mut self, w: &WaitRecord) -> io::Result<()> {
        let h = &w.hdr;
        // A thread whose process the probes never noted has no track to go on.
        if h.pid == 0 {
            return Ok(());
        }
        self.tracks_for(h.pid, h.tid, cstr(&h.comm));
        let uuid = thread_uuid(h.tid);
        let o = &w.off;
        self.waits_drawn += 1;
        self.last_wait_ns = self.last_wait_ns.max(o.running_ns);
        let kind = wait_name(o.kind);
        if o.off_state != TS_RUNQ && o.woken_ns > o.slept_ns {
            let mut ann = Vec::new();
            let state: &[u8] = if o.off_state == TS_IO {
                b"io"
            } else {
                b"sleep"
            };
            annotation(&mut ann, "state", |a| pb::string(a, annot::STRING, state));
            if let Some(label) = waker_label(w) {
                annotation(&mut ann, "waker", |a| pb::string(a, annot::STRING, &label));
                if w.waker_pid != 0 {
                    annotation(&mut ann, "waker_pid", |a| {
                        pb::uint(a, annot::UINT, w.waker_pid as u64)
                    });
                    annotation(&mut ann, "waker_tid", |a| {
                        pb::uint(a, annot::UINT, w.waker_tid as u64)
                    });
                }
            }
            let name = Some((WAIT_CATEGORY, kind));
            self.track_event(
                o.slept_ns,
                event::SLICE_BEGIN,
                uuid,
                name,
                &ann,
                (&[], None),
            );
            self.track_event(o.woken_ns, event::SLICE_END, uuid, None, &[], (&[], None));
        }
        self.steal
            .off(h.tid, o.slept_ns, o.running_ns, w.steal_total);
        if o.running_ns > o.woken_ns {
            let mut ann = Vec::new();
            let after = if o.off_state == TS_RUNQ {
                "preempted"
            } else {
                kind
            };
            annotation(&mut ann, "after", |a| {
                pb::string(a, annot::STRING, after.as_bytes())
            });
            let name = Some((WAIT_CATEGORY, "runq"));
            self.track_event(
                o.woken_ns,
                event::SLICE_BEGIN,
                uuid,
                name,
                &ann,
                (&[], None),
            );
            self.track_event(o.running_ns, event::SLICE_END, uuid, None, &[], (&[], None));
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

    fn finish(&mut self, s: &Summary) -> io::Result<()> {
        self.waits_note(s);
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

    impl<W: Write> PerfettoSink<W> {
        fn nests(&mut self, pid: u32, tid: u32, start: u64, end: u64, id: Option<u64>) -> bool {
            let span = Placed {
                start,
                end,
                id,
                placed: false,
            };
            self.place_on_thread(pid, tid, span, true)
        }
    }

    #[test]
    fn thread_nesting_and_lanes() {
        let mut s = PerfettoSink::new(Vec::new(), Vec::new());
        // Children end first: inner (20..30), then outer (10..40) contains it.
        assert!(s.nests(0, 1, 20, 30, None));
        assert!(s.nests(0, 1, 10, 40, None));
        // A sibling after it.
        assert!(s.nests(0, 1, 50, 60, None));
        // Starts inside 50..60 and ends after: crossing, so not on the thread track.
        assert!(!s.nests(0, 1, 55, 70, None));
        // Another thread is independent.
        assert!(s.nests(0, 2, 55, 70, None));
        // Lanes: overlapping spans get different lanes, a later one reuses the first.
        let a = s.lane(7, "p:x", 0, 10);
        let b = s.lane(7, "p:x", 5, 15);
        let c = s.lane(7, "p:x", 12, 20);
        assert_ne!(a, b);
        assert_eq!(a, c);
        assert_ne!(s.lane(8, "p:x", 0, 1), a);
    }

    /// Two requests interleaved on one worker: request 2 ran (and ended) while request 1
    /// waited, so in time it lies inside request 1. Request 1 is not its parent: it may not
    /// enclose it on the thread track. Its own child (send 3, parent 1) may be enclosed.
    #[test]
    fn a_markers_span_never_encloses_an_unrelated_one_on_a_thread_track() {
        let mut s = PerfettoSink::new(Vec::new(), Vec::new());
        let (pid, tid) = (7, 1);
        s.parents.insert((pid, 2), 0);
        s.parents.insert((pid, 3), 1);
        s.parents.insert((pid, 1), 0);
        assert!(s.nests(pid, tid, 20, 30, Some(2)));
        assert!(!s.nests(pid, tid, 10, 40, Some(1)));
        // Its own child alone is fine, and so is a grandchild through a span placed elsewhere.
        assert!(s.nests(pid, 9, 20, 30, Some(3)));
        assert!(s.nests(pid, 9, 10, 40, Some(1)));
        s.parents.insert((pid, 5), 4);
        s.parents.insert((pid, 4), 6);
        s.parents.insert((pid, 6), 0);
        assert!(s.nests(pid, 8, 20, 30, Some(5)));
        assert!(s.nests(pid, 8, 10, 40, Some(6)));
        // Many requests drawn elsewhere end on thread 11 after a slice of its own: that slice
        // is still remembered, so a span crossing it stays off the track.
        assert!(s.nests(pid, 11, 100, 200, None));
        for i in 0..(THREAD_HISTORY as u64 * 2) {
            s.parents.insert((pid, 1000 + i), 0);
            let r = Placed {
                start: 300 + i,
                end: 301 + i,
                id: Some(1000 + i),
                placed: false,
            };
            assert!(!s.place_on_thread(pid, 11, r, false));
        }
        assert!(!s.nests(pid, 11, 150, 1000, None), "crosses 100..200");
        // An unmarked span encloses whatever the kernel paired inside it on its thread.
        assert!(s.nests(pid, 10, 20, 30, Some(2)));
        assert!(s.nests(pid, 10, 10, 40, None));
    }

    /// The slice begins in `buf`, in file order: (ts, track, flow_ids, terminating flow).
    fn slice_begins(buf: &[u8]) -> Vec<(u64, u64, Vec<u64>, Option<u64>)> {
        fn varint(b: &[u8], i: &mut usize) -> u64 {
            let mut v = 0;
            let mut shift = 0;
            loop {
                let x = b[*i];
                *i += 1;
                v |= ((x & 0x7f) as u64) << shift;
                shift += 7;
                if x < 0x80 {
                    return v;
                }
            }
        }
        /// (field, varint or fixed64 value, or the bytes of a length-delimited field).
        fn fields(b: &[u8]) -> Vec<(u32, u64, &[u8])> {
            let (mut i, mut out) = (0, Vec::new());
            while i < b.len() {
                let k = varint(b, &mut i);
                let f = (k >> 3) as u32;
                match k & 7 {
                    0 => out.push((f, varint(b, &mut i), &b[..0])),
                    1 => {
                        let v = u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
                        i += 8;
                        out.push((f, v, &b[..0]));
                    }
                    2 => {
                        let n = varint(b, &mut i) as usize;
                        out.push((f, 0, &b[i..i + n]));
                        i += n;
                    }
                    w => panic!("wire type {w}"),
                }
            }
            out
        }
        let mut got = Vec::new();
        for (_, _, p) in fields(buf) {
            let p = fields(p);
            let ts = p.iter().find(|f| f.0 == packet::TIMESTAMP).map(|f| f.1);
            let Some(ev) = p.iter().find(|f| f.0 == packet::TRACK_EVENT) else {
                continue;
            };
            let ev = fields(ev.2);
            let get = |n| {
                ev.iter()
                    .filter(move |f: &&(u32, u64, &[u8])| f.0 == n)
                    .map(|f| f.1)
            };
            if get(event::TYPE).next() == Some(event::SLICE_BEGIN) {
                got.push((
                    ts.unwrap(),
                    get(event::TRACK_UUID).next().unwrap(),
                    get(event::FLOW_IDS).collect(),
                    get(event::TERMINATING_FLOW_IDS).next(),
                ));
            }
        }
        got
    }

    /// A wait record becomes the wait (asleep → woken, named by its kind) and the run queue
    /// (woken → running) on its thread's track; a preemption only the run queue; a thread of
    /// no known process, nothing.
    #[test]
    fn the_trace_notes_the_wait_slices_it_lacks_where_they_stop() {
        use usdt_trace_common::{OffInterval, TS_SLEEP};
        // SAFETY: a plain-data record; all zeroes is a valid one.
        let mut w: WaitRecord = unsafe { std::mem::zeroed() };
        (w.hdr.pid, w.hdr.tid) = (7, 9);
        w.off = OffInterval {
            slept_ns: 100,
            woken_ns: 150,
            running_ns: 160,
            kind: WAIT_LOCK,
            off_state: TS_SLEEP,
        };
        // None missing: no note.
        let mut s = PerfettoSink::new(Vec::new(), Vec::new());
        s.wait(&w).unwrap();
        s.finish(&Summary::default()).unwrap();
        assert!(!String::from_utf8_lossy(&s.into_inner()).contains("usdt-trace"));
        let mut s = PerfettoSink::new(Vec::new(), Vec::new());
        s.wait(&w).unwrap();
        let sum = Summary {
            waits_left_out: 5,
            waits_lost: 2,
            ..Default::default()
        };
        s.finish(&sum).unwrap();
        let out = s.into_inner();
        let text = String::from_utf8_lossy(&out);
        for want in [
            "usdt-trace",
            "1 wait slices drawn, 5 left out past --perfetto-max-waits, 2 dropped so spans were kept",
            "waits_drawn",
            "waits_left_out",
            "waits_dropped",
        ] {
            assert!(text.contains(want), "{want}");
        }
        // An instant, where the last interval drawn ended: its packet carries timestamp 160.
        let mut ts = Vec::new();
        pb::uint(&mut ts, packet::TIMESTAMP, 160);
        let mut instant = Vec::new();
        pb::uint(&mut instant, event::TYPE, event::INSTANT);
        pb::uint(&mut instant, event::TRACK_UUID, NOTES_UUID);
        let at = |needle: &[u8]| out.windows(needle.len()).rposition(|x| x == needle);
        assert!(at(&instant).is_some_and(|i| at(&ts).is_some_and(|j| j < i)));
    }

    #[test]
    fn an_off_cpu_interval_is_a_wait_slice_then_a_runq_slice_on_its_thread() {
        use usdt_trace_common::{OffInterval, RecordKind, TS_RUNQ, TS_SLEEP};
        let mut s = PerfettoSink::new(Vec::new(), Vec::new());
        let wait = |pid: u32, slept, woken, running, kind, off_state| {
            // SAFETY: a plain-data record; all zeroes is a valid one.
            let mut w: WaitRecord = unsafe { std::mem::zeroed() };
            w.hdr.kind = RecordKind::WAIT;
            w.hdr.pid = pid;
            w.hdr.tid = 9;
            w.hdr.comm[..2].copy_from_slice(b"pp");
            w.off = OffInterval {
                slept_ns: slept,
                woken_ns: woken,
                running_ns: running,
                kind,
                off_state,
            };
            w.waker_pid = 7;
            w.waker_tid = 8;
            w.waker_comm[..1].copy_from_slice(b"h");
            w
        };
        s.wait(&wait(7, 100, 150, 160, WAIT_LOCK, TS_SLEEP))
            .unwrap();
        s.wait(&wait(7, 200, 200, 230, 0, TS_RUNQ)).unwrap();
        // Woken and running at once: no run-queue slice.
        s.wait(&wait(7, 300, 310, 310, WAIT_DISK, TS_IO)).unwrap();
        s.wait(&wait(7, 320, 330, 330, WAIT_FAULT, TS_IO)).unwrap();
        s.wait(&wait(0, 400, 410, 420, WAIT_LOCK, TS_SLEEP))
            .unwrap();
        let t = thread_uuid(9);
        let begins: Vec<(u64, u64)> = slice_begins(&s.buf).iter().map(|b| (b.0, b.1)).collect();
        assert_eq!(begins, [(100, t), (150, t), (200, t), (300, t), (320, t)]);
        let text = String::from_utf8_lossy(&s.buf);
        for want in [
            "lock",
            "runq",
            "disk",
            "fault",
            "preempted",
            "h 7/8",
            "offcpu",
            "pp",
        ] {
            assert!(text.contains(want), "{want}");
        }
        assert!(!text.contains("other"));
    }

    /// The host's steal on a thread track: per span, a `steal` slice at the start of each
    /// on-CPU stretch it took from (around a child's, not over it), after the span's own
    /// slice (so that one beginning with the span sorts inside it), none over an off-CPU one.
    #[test]
    fn steal_is_a_slice_per_on_cpu_stretch_of_its_span() {
        use super::super::PairInfo;
        use crate::output::ArgFmt;
        use usdt_trace_common::{OffInterval, RecordKind, TS_SLEEP};
        let mut s = PerfettoSink::new(Vec::new(), vec![false]);
        let wait = |slept, running, total| {
            // SAFETY: a plain-data record; all zeroes is a valid one.
            let mut w: WaitRecord = unsafe { std::mem::zeroed() };
            w.hdr.kind = RecordKind::WAIT;
            w.hdr.pid = 7;
            w.hdr.tid = 9;
            w.off = OffInterval {
                slept_ns: slept,
                woken_ns: running,
                running_ns: running,
                kind: WAIT_LOCK,
                off_state: TS_SLEEP,
            };
            w.steal_total = total;
            w
        };
        let site = SiteInfo::for_test("app", "req__start", &[ArgFmt::Unsigned], &[]);
        let end = SiteInfo::for_test("app", "req__end", &[ArgFmt::Unsigned], &[]);
        let pair = PairInfo {
            provider: "app".into(),
            stem: "req".into(),
            start: "req__start".into(),
            ends: vec!["req__end".into()],
        };
        let span = |s: &mut PerfettoSink<Vec<u8>>, t0, t1, steal_start, steal| {
            // SAFETY: a plain-data record; all zeroes is a valid one.
            let mut r: SpanRecord = unsafe { std::mem::zeroed() };
            (r.start_ns, r.hdr.ts_ns) = (t0, t1);
            (r.hdr.pid, r.hdr.tid, r.start_tid) = (7, 9, 9);
            r.acct_valid = 1;
            r.acct.steal = steal;
            r.steal_start = steal_start;
            let v = View::Span {
                pair: &pair,
                start: &site,
                end: &end,
                rec: &r,
                strs: None,
                stack: None,
            };
            s.record(&v).unwrap();
        };
        // Parent 100..1000 (steal total 0 → 100), child 200..600 (20 → 70) with a wait
        // 300..400 in it; the parent's own wait 700..800.
        s.wait(&wait(300, 400, 40)).unwrap();
        span(&mut s, 200, 600, 20, 50);
        s.wait(&wait(700, 800, 80)).unwrap();
        span(&mut s, 100, 1000, 0, 100);
        let t = thread_uuid(9);
        let begins: Vec<(u64, u64)> = slice_begins(&s.buf).iter().map(|b| (b.0, b.1)).collect();
        assert_eq!(
            begins,
            [
                (300, t),
                (200, t),
                (200, t),
                (400, t),
                (700, t),
                (100, t),
                (100, t),
                (600, t),
                (800, t)
            ]
        );
        let text = String::from_utf8_lossy(&s.buf);
        assert!(text.contains("steal") && text.contains("the kernel learns how much, not when"));
    }

    /// Through the sink: interleaved requests and a polled one go on async tracks; a child
    /// whose parent is on another track gets a flow from it.
    #[test]
    fn polled_and_interleaved_requests_are_async_with_flows_to_their_children() {
        use super::super::PairInfo;
        use crate::output::ArgFmt;
        // Sites 0 and 2 start markers spans (id, parent); 1 ends them.
        let mut s = PerfettoSink::new(Vec::new(), vec![true, false, true]);
        let site = |name: &str| SiteInfo::for_test("srv", name, &[ArgFmt::Unsigned; 2], &[]);
        let (req_s, end, send_s) = (site("request__start"), site("x__end"), site("send__start"));
        let pair = |stem: &str| PairInfo {
            provider: "srv".into(),
            stem: stem.into(),
            start: format!("{stem}__start"),
            ends: vec!["x__end".into()],
        };
        let (pair_req, pair_send) = (pair("request"), pair("send"));
        let rec = |site: u32, id: u64, parent: u64, t0: u64, t1: u64, polls: u32| {
            // SAFETY: a plain-data record; all zeroes is a valid one.
            let mut r: SpanRecord = unsafe { std::mem::zeroed() };
            r.start_site = site;
            r.args[0] = id;
            r.args[1] = parent;
            r.start_ns = t0;
            r.hdr.ts_ns = t1;
            r.hdr.pid = 7;
            r.hdr.tid = 1;
            r.start_tid = 1;
            r.polls = polls;
            r
        };
        let mut put = |pair: &PairInfo, start: &SiteInfo, r: SpanRecord| {
            let v = View::Span {
                pair,
                start,
                end: &end,
                rec: &r,
                strs: None,
                stack: None,
            };
            s.record(&v).unwrap();
        };
        // send 3 (child of request 1) inside request 2, inside request 1, all on thread 1.
        put(&pair_send, &send_s, rec(2, 3, 1, 25, 26, 0));
        put(&pair_req, &req_s, rec(0, 2, 0, 20, 30, 0));
        put(&pair_req, &req_s, rec(0, 1, 0, 10, 40, 0));
        // A polled request alone on thread 1: still async.
        put(&pair_req, &req_s, rec(0, 4, 0, 50, 60, 2));
        let got = slice_begins(&s.buf);
        let thread = thread_uuid(1);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], (25, thread, vec![], Some(flow_id(7, 3))));
        assert_ne!(got[1].1, thread, "request 2 would enclose request 1's send");
        assert_ne!(got[2].1, thread, "request 1 would enclose request 2");
        assert_ne!(got[2].1, got[1].1, "so on its own lane");
        assert_eq!(
            got[2].2,
            vec![flow_id(7, 3)],
            "a flow from request 1 to its send"
        );
        assert!(got[1].2.is_empty(), "and none from request 2");
        assert_ne!(got[3].1, thread, "a polled request");
        assert_eq!(got[3].1, got[1].1, "request 2's lane, reused");
    }
}
