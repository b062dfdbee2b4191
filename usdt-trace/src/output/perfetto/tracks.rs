//! Where a slice goes: a process's and thread's tracks, made once each; a span on its
//! thread's track when it nests there, else on a lane of async tracks that never overlap.

use super::*;

impl<W: Write> PerfettoSink<W> {
    /// Process and thread tracks, described the first time each is seen.
    pub(super) fn tracks_for(&mut self, pid: u32, tid: u32, comm: &[u8]) {
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
            // A wait record's is empty when this kernel's BTF did not say where it is.
            let comm = if comm.is_empty() {
                std::fs::read(format!("/proc/{pid}/task/{tid}/comm"))
                    .map(|mut n| {
                        while n.last() == Some(&b'\n') {
                            n.pop();
                        }
                        n
                    })
                    .unwrap_or_default()
            } else {
                comm.to_vec()
            };
            self.packet(|p| {
                pb::message(p, packet::TRACK_DESCRIPTOR, |t| {
                    pb::uint(t, track::UUID, thread_uuid(tid));
                    pb::uint(t, track::PARENT_UUID, process_uuid(pid));
                    pb::message(t, track::THREAD, |d| {
                        pb::int(d, 1, pid as i64); // pid
                        pb::int(d, 2, tid as i64); // tid
                        if !comm.is_empty() {
                            pb::string(d, 5, &comm); // thread_name
                        }
                    });
                });
            });
        }
    }

    /// Whether `id` (a markers span of `pid`) descends from `ancestor`, as far as the spans
    /// seen tell.
    pub(super) fn descends(&self, pid: u32, mut id: u64, ancestor: u64) -> bool {
        // Bounded: a parent table with a cycle (ids reused by a long-running program) ends.
        for _ in 0..64 {
            match self.parents.get(&(pid, id)) {
                Some(&p) if p == ancestor => return true,
                Some(&p) if p != 0 => id = p,
                _ => return false,
            }
        }
        false
    }

    /// Whether a span that ran on this thread nests strictly with what the thread's track
    /// already holds, and remembers it either way. `eligible`: it started and ended here and
    /// was not polled. `id`: its markers span id; a markers span that would enclose a markers
    /// span of this thread not its descendant (another request that ran on this worker while
    /// this one waited, wherever that one is drawn) does not nest.
    pub(super) fn place_on_thread(
        &mut self,
        pid: u32,
        tid: u32,
        span: Placed,
        eligible: bool,
    ) -> bool {
        let mut v = self.thread_slices.remove(&tid).unwrap_or_default();
        // Slices that started inside this one ended before it (end order): they nest in it.
        let keep = v
            .iter()
            .position(|p| p.start >= span.start)
            .unwrap_or(v.len());
        let crosses = v[..keep]
            .iter()
            .rev()
            .find(|p| p.placed)
            .is_some_and(|p| p.end > span.start);
        let unrelated = span.id.is_some_and(|me| {
            v[keep..]
                .iter()
                .any(|c| c.id.is_some_and(|cid| !self.descends(pid, cid, me)))
        });
        let placed = eligible && !crosses && !unrelated;
        if placed {
            // What it encloses is checked against it already: a span enclosing it later and
            // not an ancestor of those is not one of this span either.
            v.truncate(keep);
            v.push(Placed { placed, ..span });
        } else if span.id.is_some() {
            v.insert(keep, Placed { placed, ..span });
        }
        if v.len() > THREAD_HISTORY {
            // The oldest span drawn elsewhere goes first: forgetting one only spares a later
            // span the unrelated check, forgetting a placed slice could let a later one cross
            // it (a busy worker ends many polled requests between two of its own slices).
            let i = v.iter().position(|p| !p.placed).unwrap_or(0);
            v.remove(i);
        }
        self.thread_slices.insert(tid, v);
        placed
    }

    /// An async track for a span of `name` in `pid` over [start, end].
    pub(super) fn lane(&mut self, pid: u32, name: &str, start: u64, end: u64) -> u64 {
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
}
