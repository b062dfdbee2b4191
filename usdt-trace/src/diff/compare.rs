//! Comparing two runs: each span name's spans summed up ([`Run`] → [`Stats`]), the two
//! summaries compared (is the change significant?), and the verdict that names what moved
//! the mean (`verdict.rs`).

use super::rank::{mann_whitney, RankTest};
pub use super::verdict::Verdict;
use crate::output::fmt_duration;
use std::collections::BTreeMap;

/// One part of a span's wall time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    OnCpu,
    RunQ,
    Sleep,
    Io,
    Idle,
    /// Switched in, but the hypervisor ran another guest on the vCPU: the host's CPU
    /// contention, which the kernel leaves out of the task's runtime (on-CPU).
    Steal,
}

/// Steal last: the order of the parts arrays (`Stats::parts_ns`, the deltas). A run recorded
/// before steal was split off has no `steal_ns`: 0, its stolen time inside `oncpu_ns`.
pub const PARTS: [Part; 6] = [
    Part::OnCpu,
    Part::RunQ,
    Part::Sleep,
    Part::Io,
    Part::Idle,
    Part::Steal,
];

/// The kinds of off-CPU wait of a span line's `waits` object, and the part each is in.
pub const KINDS: [(&str, Part); usdt_trace_common::WAIT_KINDS] = [
    ("lock", Part::Sleep),
    ("net", Part::Sleep),
    ("timer", Part::Sleep),
    ("disk", Part::Io),
    ("fault", Part::Io),
];

impl Part {
    /// The span line's field.
    pub fn field(self) -> &'static str {
        match self {
            Part::OnCpu => "oncpu_ns",
            Part::RunQ => "runq_ns",
            Part::Sleep => "sleep_ns",
            Part::Io => "io_ns",
            Part::Idle => "idle_ns",
            Part::Steal => "steal_ns",
        }
    }

    /// How the explanation names it: "+0.98 ms sleeping".
    pub(super) fn words(self) -> &'static str {
        match self {
            Part::OnCpu => "on CPU",
            Part::RunQ => "waiting for a CPU",
            Part::Sleep => "sleeping",
            Part::Io => "in I/O",
            Part::Idle => "idle between polls",
            Part::Steal => "stolen by the host",
        }
    }
}

/// All spans of one name in one run.
#[derive(Debug, Default, Clone)]
struct Samples {
    durations: Vec<u64>,
    /// Sums over the spans that have a split.
    split_n: u64,
    split_dur: u128,
    parts: [u128; PARTS.len()],
    /// Per kind (`KINDS`): time and number of waits, over the spans that have a split.
    kind_ns: [u128; KINDS.len()],
    kind_n: [u128; KINDS.len()],
}

/// The summary of one name in one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub count: u64,
    pub mean_ns: f64,
    pub p99_ns: u64,
    /// Variance of the durations (for the test of the means).
    var: f64,
    /// The durations, sorted (for the rank test).
    sorted: Vec<u64>,
    /// Spans with a split, their mean duration and mean parts (`PARTS` order).
    pub split_count: u64,
    pub split_mean_ns: f64,
    pub parts_ns: [f64; PARTS.len()],
    /// Per kind of wait (`KINDS`), the mean time and the mean number of waits per split span.
    pub kinds_ns: [f64; KINDS.len()],
    pub kinds_n: [f64; KINDS.len()],
}

impl Samples {
    fn stats(mut self) -> Stats {
        self.durations.sort_unstable();
        let n = self.durations.len() as u64;
        let mean = self.durations.iter().map(|&d| d as f64).sum::<f64>() / n as f64;
        let var = if n > 1 {
            self.durations
                .iter()
                .map(|&d| (d as f64 - mean).powi(2))
                .sum::<f64>()
                / (n - 1) as f64
        } else {
            0.0
        };
        let sn = self.split_n.max(1) as f64;
        let mut parts_ns = [0.0; PARTS.len()];
        for (p, s) in parts_ns.iter_mut().zip(self.parts) {
            *p = s as f64 / sn;
        }
        let mut kinds_ns = [0.0; KINDS.len()];
        let mut kinds_n = [0.0; KINDS.len()];
        for k in 0..KINDS.len() {
            kinds_ns[k] = self.kind_ns[k] as f64 / sn;
            kinds_n[k] = self.kind_n[k] as f64 / sn;
        }
        Stats {
            count: n,
            mean_ns: mean,
            p99_ns: percentile(&self.durations, 99),
            var,
            sorted: self.durations,
            split_count: self.split_n,
            split_mean_ns: self.split_dur as f64 / sn,
            parts_ns,
            kinds_ns,
            kinds_n,
        }
    }
}

/// Nearest-rank percentile of sorted values: the smallest value with at least `p`% of the
/// values at or below it (the p99 of 10 values is the largest).
pub(super) fn percentile(sorted: &[u64], p: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() as u64 * p).div_ceil(100).max(1);
    sorted[rank as usize - 1]
}

/// One span as the comparison counts it: its duration and, when it has one, its time split.
/// Built from a `watch --json` span line ([`SpanSample::of_json`]) or, in a live `watch
/// --baseline` run, from the kernel's record ([`SpanSample::of_record`]): the same numbers
/// either way (a unit test holds the two to each other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanSample {
    pub duration_ns: u64,
    pub split: Option<SplitSample>,
}

/// A span's time split: its parts (`PARTS` order) and, per kind of wait (`KINDS` order), the
/// time and the number of waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitSample {
    pub parts: [u64; PARTS.len()],
    pub kinds_ns: [u64; KINDS.len()],
    pub kinds_n: [u64; KINDS.len()],
}

impl SpanSample {
    /// From the kernel's record of a span, as `watch --json` would write it
    /// (`output::json::span_json`): the split when the record's accounting is valid, idle time
    /// only for a polled span.
    pub fn of_record(r: &usdt_trace_common::SpanRecord) -> SpanSample {
        let split = (r.acct_valid != 0).then(|| {
            let a = &r.acct;
            let idle = if r.polls > 0 { r.idle_ns } else { 0 };
            let kinds = crate::output::wait_kinds(a);
            let by_name = |want: &str| {
                kinds
                    .iter()
                    .find(|k| k.0 == want)
                    .map_or((0, 0), |k| (k.1, k.2 as u64))
            };
            SplitSample {
                parts: PARTS.map(|p| match p {
                    Part::OnCpu => a.oncpu,
                    Part::Steal => a.steal,
                    Part::RunQ => a.runq,
                    Part::Sleep => a.sleep,
                    Part::Io => a.io,
                    Part::Idle => idle,
                }),
                kinds_ns: KINDS.map(|(kind, _)| by_name(kind).0),
                kinds_n: KINDS.map(|(kind, _)| by_name(kind).1),
            }
        });
        SpanSample {
            duration_ns: r.hdr.ts_ns.saturating_sub(r.start_ns),
            split,
        }
    }
}

/// The span summaries of one run, per span name (`provider:name`): what a comparison takes.
pub type Summaries = BTreeMap<String, Stats>;

/// The spans of one run as they come, per span name; [`Run::summaries`] makes the
/// [`Summaries`] a comparison takes. Keeps each span's duration (8 bytes a span: the p99 and
/// the variance are exact).
#[derive(Debug, Default, Clone)]
pub struct Run {
    by_name: BTreeMap<String, Samples>,
}

impl Run {
    /// One span of the span name `name` (`provider:name`).
    pub fn add(&mut self, name: &str, sp: &SpanSample) {
        let s = match self.by_name.get_mut(name) {
            Some(s) => s,
            None => self.by_name.entry(name.to_string()).or_default(),
        };
        s.durations.push(sp.duration_ns);
        if let Some(split) = &sp.split {
            s.split_n += 1;
            s.split_dur += sp.duration_ns as u128;
            for (sum, x) in s.parts.iter_mut().zip(split.parts) {
                *sum += x as u128;
            }
            for k in 0..KINDS.len() {
                s.kind_ns[k] += split.kinds_ns[k] as u128;
                s.kind_n[k] += split.kinds_n[k] as u128;
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// How many span names it has.
    pub fn names(&self) -> usize {
        self.by_name.len()
    }

    /// Per span name, its summary.
    pub fn summaries(self) -> Summaries {
        self.by_name
            .into_iter()
            .map(|(k, s)| (k, s.stats()))
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub name: String,
    pub before: Option<Stats>,
    pub after: Option<Stats>,
    /// Per part, after minus before of the mean (split spans only), `PARTS` order.
    pub part_deltas: Option<[f64; PARTS.len()]>,
    pub verdict: Option<Verdict>,
    /// Causes that moved on their own besides the verdict's ([`super::verdict::also`]).
    pub also: Vec<Verdict>,
    /// How sure the change is: None when a run lacks the name.
    pub significance: Option<Significance>,
}

/// The two tests of a change: the means (how many standard errors of their difference it
/// is) and the ranks ([`RankTest`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Significance {
    pub sigmas: f64,
    pub rank: Option<RankTest>,
}

/// A change of the mean smaller than this share of the before mean is no change.
const MIN_REL_CHANGE: f64 = 0.05;
/// ... and so is one within this many standard errors of the difference of two means,
const MIN_SIGMAS: f64 = 3.0;
/// ... unless the ranks say the spans moved the same way (two-sided p at most 0.1%, about
/// 3.3σ). Not 0.27% like the means: with 6 spans a side the exact test's smallest p is
/// 2/924 = 0.22%, every span of one run above every span of the other, and the same program
/// twice beside a CPU hog did that (the hog cost the first run's spans 0.7 ms more of run
/// queue each: a difference of the runs' surroundings, which spans of one run share). So
/// the ranks decide from 7 spans a side (smallest p 2/3432).
const MAX_RANK_P: f64 = 0.001;

fn compare(name: String, before: Option<Stats>, after: Option<Stats>) -> Comparison {
    let (Some(b), Some(a)) = (&before, &after) else {
        return Comparison {
            name,
            before,
            after,
            part_deltas: None,
            verdict: None,
            also: Vec::new(),
            significance: None,
        };
    };
    let have_split = b.split_count > 0 && a.split_count > 0;
    let deltas = have_split.then(|| {
        let mut d = [0.0; PARTS.len()];
        for (i, x) in d.iter_mut().enumerate() {
            *x = a.parts_ns[i] - b.parts_ns[i];
        }
        d
    });
    let change = a.mean_ns - b.mean_ns;
    let se = (b.var / b.count as f64 + a.var / a.count as f64).sqrt();
    let sig = Significance {
        sigmas: if se > 0.0 {
            change / se
        } else if change == 0.0 {
            0.0
        } else {
            f64::INFINITY.copysign(change)
        },
        rank: mann_whitney(&b.sorted, &a.sorted),
    };
    // The mean must move by the floor either way; then either test will do. The ranks only
    // count in the direction the mean moved: the explanation is of the mean's change, and
    // an outlier that turned it against the ranks leaves nothing consistent to explain.
    let by_means = change.abs() > MIN_SIGMAS * se;
    let by_ranks = sig
        .rank
        .is_some_and(|r| r.p <= MAX_RANK_P && (r.after_longer > 0.5) == (change > 0.0));
    let significant = change.abs() >= MIN_REL_CHANGE * b.mean_ns && (by_means || by_ranks);
    let rel = 100.0 * change / b.mean_ns.max(1.0);
    // The ranks say most spans moved one way, the mean moved the other (or not at all): a
    // few outliers. Not "no change", and no explanation of a mean that moved against them.
    let against = sig
        .rank
        .filter(|r| r.p <= MAX_RANK_P && !by_means && (r.after_longer > 0.5) != (change > 0.0));
    let verdict = if let (false, Some(r)) = (significant, against) {
        let way = if r.after_longer > 0.5 {
            "longer"
        } else {
            "shorter"
        };
        Some(Verdict {
            cause: "mixed",
            words: format!(
                "mixed: most spans got {way} (rank test p {:.1e}, {:.0}% of pairs), but the mean moved {rel:+.1}%: a few outlying spans outweigh them",
                r.p,
                100.0 * r.after_longer.max(1.0 - r.after_longer)
            ),
            share: 0.0,
        })
    } else if !significant {
        Some(Verdict {
            cause: "no_change",
            words: format!("no significant change of the mean ({rel:+.1}%)"),
            share: 0.0,
        })
    } else {
        deltas.map(|d| super::verdict::explain(&d, b, a, change > 0.0))
    };
    let also = match (&verdict, have_split) {
        (Some(v), true) => super::verdict::also(b, a, v),
        _ => Vec::new(),
    };
    Comparison {
        name,
        before,
        after,
        part_deltas: deltas,
        verdict,
        also,
        significance: Some(sig),
    }
}

/// Compare two runs' summaries, per span name in name order: `usdt-trace diff` compares two
/// files, `watch --baseline` a file and the live run.
pub fn compare_runs(mut b: Summaries, mut a: Summaries) -> Vec<Comparison> {
    let mut names: Vec<String> = b.keys().chain(a.keys()).cloned().collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|n| {
            let (sb, sa) = (b.remove(&n), a.remove(&n));
            compare(n, sb, sa)
        })
        .collect()
}

/// A signed duration: `+0.98ms`, `-12.0us`.
pub(super) fn fmt_signed(ns: f64) -> String {
    let sign = if ns < 0.0 { '-' } else { '+' };
    format!("{sign}{}", fmt_duration(ns.abs().round() as u64))
}

pub(super) fn fmt_mean(ns: f64) -> String {
    fmt_duration(ns.round() as u64)
}
