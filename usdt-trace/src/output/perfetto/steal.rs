//! Where a span's steal goes on its thread's track: one `steal` slice per on-CPU stretch of
//! the span that the host took time from.
//!
//! The kernel learns how much the hypervisor took from a vCPU when it next updates the run
//! queue's clock (a tick, a switch, a wakeup), not when: so steal is known per on-CPU stretch,
//! never at a moment inside one. What the records give is the thread's running total of
//! steal at every cut: each off-CPU interval carries it as the thread left the CPU
//! (`WaitRecord::steal_total`, nothing accrues off CPU), each span at its start
//! (`SpanRecord::steal_start`) and end (plus its `acct.steal`). The steal of a stretch is the
//! difference of the totals at its two ends, so a span's slices add up exactly to its
//! `steal_ns`, however the stretches are cut. Each slice is drawn at the start of its stretch,
//! as long as the amount (one nanosecond short of the stretch at most, so that it never
//! touches the slice that ends the stretch); its `steal_ns` is the amount, exact.
//!
//! Spans end inner first: the stretches of a span already drawn (a child) are left out of its
//! parent's, which draws only around it.

use std::collections::HashMap;

/// Off-CPU intervals and drawn spans kept per thread until an enclosing span ends. Past it
/// the oldest go: the stretches around them merge, and their slices are placed more coarsely
/// (the sums stay exact).
const PER_THREAD: usize = 4096;
/// Threads kept; past it all are forgotten (as above: coarser places, exact sums).
const THREADS: usize = 8192;

/// An off-CPU interval: the thread left its CPU at `slept` with `total` steal so far, and ran
/// again at `running`.
#[derive(Clone, Copy, Debug)]
struct Off {
    slept: u64,
    running: u64,
    total: u64,
}

/// A span whose stretches were drawn: `[start, end]` with the thread's totals there.
#[derive(Clone, Copy, Debug)]
struct Drawn {
    start: u64,
    start_total: u64,
    end: u64,
    end_total: u64,
}

#[derive(Default)]
struct Thread {
    offs: Vec<Off>,
    drawn: Vec<Drawn>,
}

/// One `steal` slice: `[start_ns, start_ns + len_ns]`, of an on-CPU stretch that began at
/// `start_ns` and ran to `stretch_end_ns`, from which the host took `steal_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Piece {
    pub start_ns: u64,
    pub len_ns: u64,
    pub stretch_end_ns: u64,
    pub steal_ns: u64,
}

/// The cuts seen so far, per thread.
#[derive(Default)]
pub(super) struct StealPlacer {
    threads: HashMap<u32, Thread>,
}

/// A cut of a span's time, in time order: an off-CPU interval, or a drawn span inside it.
enum Cut {
    Off(Off),
    Drawn(Drawn),
}

impl Cut {
    fn at(&self) -> u64 {
        match self {
            Cut::Off(o) => o.slept,
            Cut::Drawn(d) => d.start,
        }
    }
}

impl StealPlacer {
    /// Thread `tid` was off CPU from `slept` to `running`, with `total` steal so far.
    pub fn off(&mut self, tid: u32, slept: u64, running: u64, total: u64) {
        if self.threads.len() >= THREADS && !self.threads.contains_key(&tid) {
            self.threads.clear();
        }
        let t = self.threads.entry(tid).or_default();
        if t.offs.len() >= PER_THREAD {
            t.offs.remove(0);
        }
        t.offs.push(Off {
            slept,
            running,
            total,
        });
    }

    /// A span of thread `tid` from `start` to `end`, the thread's steal totals there as
    /// given: its slices, stretch by stretch, those with steal only. Its off-CPU intervals and
    /// the spans drawn inside it are then forgotten, and it is remembered as drawn.
    pub fn span(
        &mut self,
        tid: u32,
        (start, start_total): (u64, u64),
        (end, end_total): (u64, u64),
    ) -> Vec<Piece> {
        if self.threads.len() >= THREADS && !self.threads.contains_key(&tid) {
            self.threads.clear();
        }
        let t = self.threads.entry(tid).or_default();
        let inside = |a: u64, b: u64| a >= start && b <= end;
        let mut cuts: Vec<Cut> = t
            .offs
            .iter()
            .filter(|o| inside(o.slept, o.running))
            .map(|o| Cut::Off(*o))
            .chain(
                t.drawn
                    .iter()
                    .filter(|d| inside(d.start, d.end) && (d.start, d.end) != (start, end))
                    .map(|d| Cut::Drawn(*d)),
            )
            .collect();
        cuts.sort_by_key(Cut::at);
        let mut pieces = Vec::new();
        let (mut at, mut total) = (start, start_total);
        let mut stretch = |from: u64, from_total: u64, to: u64, to_total: u64| {
            let steal = to_total.saturating_sub(from_total);
            if steal > 0 {
                pieces.push(Piece {
                    start_ns: from,
                    len_ns: steal.min(to.saturating_sub(from).saturating_sub(1)),
                    stretch_end_ns: to,
                    steal_ns: steal,
                });
            }
        };
        for c in &cuts {
            // A cut before where the walk is (overlapping ones: spans paired by id, or a lost
            // interval's neighbours) only moves the totals on.
            match c {
                Cut::Off(o) => {
                    stretch(at, total, o.slept.max(at), o.total);
                    at = at.max(o.running);
                    total = total.max(o.total);
                }
                Cut::Drawn(d) => {
                    stretch(at, total, d.start.max(at), d.start_total);
                    at = at.max(d.end);
                    total = total.max(d.end_total);
                }
            }
        }
        stretch(at, total, end.max(at), end_total);
        t.offs.retain(|o| !inside(o.slept, o.running));
        t.drawn.retain(|d| !inside(d.start, d.end));
        if t.drawn.len() >= PER_THREAD {
            t.drawn.remove(0);
        }
        t.drawn.push(Drawn {
            start,
            start_total,
            end,
            end_total,
        });
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(p: &[Piece]) -> u64 {
        p.iter().map(|p| p.steal_ns).sum()
    }

    #[test]
    fn a_span_with_no_off_cpu_interval_is_one_stretch() {
        let mut s = StealPlacer::default();
        let p = s.span(7, (1000, 50), (2000, 80));
        assert_eq!(
            p,
            vec![Piece {
                start_ns: 1000,
                len_ns: 30,
                stretch_end_ns: 2000,
                steal_ns: 30
            }]
        );
        assert!(s.span(8, (1000, 50), (2000, 50)).is_empty());
    }

    #[test]
    fn each_stretch_between_waits_gets_the_steal_taken_in_it() {
        let mut s = StealPlacer::default();
        // Ran 100..300 (steal 10 → 25), off 300..500, ran 500..700 (25 → 25), off 700..900,
        // ran 900..1000 (25 → 40).
        s.off(1, 300, 500, 25);
        s.off(1, 700, 900, 25);
        let p = s.span(1, (100, 10), (1000, 40));
        assert_eq!(
            p.iter()
                .map(|p| (p.start_ns, p.steal_ns, p.stretch_end_ns))
                .collect::<Vec<_>>(),
            vec![(100, 15, 300), (900, 15, 1000)]
        );
        assert_eq!(sum(&p), 30);
        // The intervals were used up.
        assert!(s.span(1, (2000, 40), (3000, 40)).is_empty());
    }

    #[test]
    fn a_parent_draws_around_its_children_and_its_sum_holds_theirs() {
        let mut s = StealPlacer::default();
        // Parent 0..1000 (total 0 → 100); child 200..600 (20 → 70) with a wait 300..400
        // (total 40 then); a wait of the parent's 700..800 (total 80).
        s.off(3, 300, 400, 40);
        let child = s.span(3, (200, 20), (600, 70));
        assert_eq!(
            child
                .iter()
                .map(|p| (p.start_ns, p.steal_ns))
                .collect::<Vec<_>>(),
            vec![(200, 20), (400, 30)]
        );
        s.off(3, 700, 800, 80);
        let parent = s.span(3, (0, 0), (1000, 100));
        assert_eq!(
            parent
                .iter()
                .map(|p| (p.start_ns, p.steal_ns, p.stretch_end_ns))
                .collect::<Vec<_>>(),
            vec![(0, 20, 200), (600, 10, 700), (800, 20, 1000)]
        );
        // Every slice under the parent, its children's included, adds up to its steal.
        assert_eq!(sum(&child) + sum(&parent), 100);
    }

    #[test]
    fn a_slice_never_reaches_the_end_of_its_stretch() {
        let mut s = StealPlacer::default();
        // The counter lags: 90 ns of steal, read at the end, for a 50 ns stretch.
        s.off(4, 150, 200, 90);
        let p = s.span(4, (100, 0), (300, 90));
        assert_eq!(p[0].len_ns, 49);
        assert_eq!(p[0].steal_ns, 90);
        assert_eq!(sum(&p), 90);
    }

    #[test]
    fn overlapping_or_lost_cuts_keep_the_sum_exact() {
        let mut s = StealPlacer::default();
        // An interval that is not inside the span is not a cut of it; two intervals that
        // overlap (a clock oddity) only move the totals on.
        s.off(5, 50, 150, 5);
        s.off(5, 300, 500, 30);
        s.off(5, 400, 600, 30);
        let p = s.span(5, (100, 10), (1000, 60));
        assert_eq!(sum(&p), 50);
        assert!(p
            .iter()
            .all(|p| p.start_ns >= 100 && p.start_ns + p.len_ns < 1000));
    }

    #[test]
    fn memory_is_bounded_per_thread_and_in_threads() {
        let mut s = StealPlacer::default();
        for i in 0..(PER_THREAD as u64 + 10) {
            s.off(9, i * 10, i * 10 + 5, i);
        }
        assert_eq!(s.threads[&9].offs.len(), PER_THREAD);
        for tid in 0..(THREADS as u32 + 5) {
            s.off(100 + tid, 0, 1, 0);
        }
        assert!(s.threads.len() <= THREADS);
    }
}
