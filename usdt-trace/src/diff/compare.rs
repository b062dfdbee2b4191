//! Comparing two runs: each span name's spans summed up ([`Run`] → [`Stats`]), the two
//! summaries compared, and the verdict that names what moved the mean.

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
}

pub const PARTS: [Part; 5] = [Part::OnCpu, Part::RunQ, Part::Sleep, Part::Io, Part::Idle];

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
        }
    }

    /// The cause when this part grew the most, and a stable key for scripts.
    fn cause(self, grew: bool) -> (&'static str, &'static str) {
        match (self, grew) {
            (Part::OnCpu, true) => ("more_work", "more work: on-CPU time grew"),
            (Part::OnCpu, false) => ("less_work", "less work: on-CPU time shrank"),
            (Part::RunQ, true) => (
                "cpu_contention",
                "CPU contention: time waiting for a CPU grew",
            ),
            (Part::RunQ, false) => (
                "less_cpu_contention",
                "less CPU contention: time waiting for a CPU shrank",
            ),
            (Part::Io, true) => ("more_io", "more I/O or a busier disk: I/O wait grew"),
            (Part::Io, false) => ("less_io", "less I/O: I/O wait shrank"),
            (Part::Sleep, true) => (
                "waiting",
                "waiting: sleep grew (a lock, a socket, a timer, ...)",
            ),
            (Part::Sleep, false) => ("less_waiting", "less waiting: sleep shrank"),
            (Part::Idle, true) => ("idle", "waiting to be polled: time between polls grew"),
            (Part::Idle, false) => ("less_idle", "less time between polls"),
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
    /// Variance of the durations (for the significance test).
    var: f64,
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

/// What one span name's comparison found.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// A stable key: `more_work`, `cpu_contention`, `no_change`, ...
    pub cause: &'static str,
    pub words: String,
    /// The dominant part's share of the parts that moved in the direction of the change of
    /// the mean, 0..=1.
    pub share: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub name: String,
    pub before: Option<Stats>,
    pub after: Option<Stats>,
    /// Per part, after minus before of the mean (split spans only), `PARTS` order.
    pub part_deltas: Option<[f64; PARTS.len()]>,
    pub verdict: Option<Verdict>,
}

/// A change of the mean smaller than this share of the before mean is no change.
const MIN_REL_CHANGE: f64 = 0.05;
/// ... and so is one within this many standard errors of the difference of two means.
const MIN_SIGMAS: f64 = 3.0;

fn compare(name: String, before: Option<Stats>, after: Option<Stats>) -> Comparison {
    let (Some(b), Some(a)) = (&before, &after) else {
        return Comparison {
            name,
            before,
            after,
            part_deltas: None,
            verdict: None,
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
    let significant = change.abs() >= MIN_REL_CHANGE * b.mean_ns && change.abs() > MIN_SIGMAS * se;
    let verdict = if !significant {
        Some(Verdict {
            cause: "no_change",
            words: format!(
                "no significant change of the mean ({:+.1}%)",
                100.0 * change / b.mean_ns.max(1.0)
            ),
            share: 0.0,
        })
    } else {
        deltas.map(|d| {
            let grew = change > 0.0;
            // The part that moved most in the direction of the change of the mean.
            let (i, dmax) = d
                .iter()
                .copied()
                .enumerate()
                .max_by(|x, y| {
                    let (x, y) = if grew { (x.1, y.1) } else { (-x.1, -y.1) };
                    x.total_cmp(&y)
                })
                .unwrap_or((0, 0.0));
            // Its share of the parts that moved the same way: parts can also move against
            // the change (a waiter that sleeps longer waits less for a CPU), and a share of
            // the net change would then exceed 100%.
            let same_way: f64 = d.iter().filter(|x| (**x > 0.0) == grew).sum();
            let share = if same_way != 0.0 {
                (dmax / same_way).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let dir = if grew { "growth" } else { "drop" };
            let (cause, what) = match grew.then(|| kind_cause(PARTS[i], dmax, b, a)).flatten() {
                Some((cause, what)) => (cause, what),
                None => {
                    let (c, w) = PARTS[i].cause(grew);
                    (c, w.to_string())
                }
            };
            Verdict {
                cause,
                words: format!("{what} ({:.0}% of the {dir})", share * 100.0),
                share,
            }
        })
    };
    Comparison {
        name,
        before,
        after,
        part_deltas: deltas,
        verdict,
    }
}

/// When `part` grew by `grew_ns` and the runs know what their waits were: the kind of wait
/// that grew the most within it, as a cause and in words. None when no kind explains at least
/// half of the part's growth (the rest of sleep and io is "other": a pipe, a tty, ...).
fn kind_cause(part: Part, grew_ns: f64, b: &Stats, a: &Stats) -> Option<(&'static str, String)> {
    let (k, d) = KINDS
        .iter()
        .enumerate()
        .filter(|(_, (_, p))| *p == part)
        .map(|(k, _)| (k, a.kinds_ns[k] - b.kinds_ns[k]))
        .max_by(|x, y| x.1.total_cmp(&y.1))?;
    if d < 0.5 * grew_ns {
        return None;
    }
    let share_of_time = 100.0 * a.kinds_ns[k] / a.split_mean_ns.max(1.0);
    let per_span = fmt_signed(d);
    Some(match KINDS[k].0 {
        "lock" => (
            "lock_contention",
            format!("lock contention: {share_of_time:.0}% of the time waiting on futexes ({per_span} per span)"),
        ),
        "net" => (
            "network",
            format!("waiting on the network: {share_of_time:.0}% of the time in socket and poll waits ({per_span} per span)"),
        ),
        "timer" => (
            "timer",
            format!("sleeping on timers: {share_of_time:.0}% of the time in nanosleep ({per_span} per span)"),
        ),
        kind => {
            // More waits of the same length, or as many waits that each take longer: split
            // the growth d = Δn·t_before + n_after·Δt and name the larger term. A page fault
            // that sleeps reads its page in (from a file or swap): more of them is more
            // paging, each taking longer is slower paging (often the same busier disk).
            let (nb, na) = (b.kinds_n[k], a.kinds_n[k]);
            let tb = if nb > 0.0 { b.kinds_ns[k] / nb } else { 0.0 };
            let ta = if na > 0.0 { a.kinds_ns[k] / na } else { 0.0 };
            let more = (na - nb) * tb;
            let longer = na * (ta - tb);
            match (kind == "fault", nb == 0.0 || more >= longer) {
                (false, true) => (
                    "more_io",
                    format!(
                        "more I/O: {nb:.1} → {na:.1} disk waits per span, {} each ({per_span} per span)",
                        fmt_mean(ta)
                    ),
                ),
                (false, false) => (
                    "busy_disk",
                    format!(
                        "a busier disk: each disk wait {} → {}, {na:.1} per span ({per_span} per span)",
                        fmt_mean(tb),
                        fmt_mean(ta)
                    ),
                ),
                (true, true) => (
                    "more_faults",
                    format!(
                        "more page faults: {nb:.1} → {na:.1} major faults per span, {} each ({per_span} per span)",
                        fmt_mean(ta)
                    ),
                ),
                (true, false) => (
                    "slower_faults",
                    format!(
                        "slower page faults (slower paging or a busier disk): each fault {} → {}, {na:.1} per span ({per_span} per span)",
                        fmt_mean(tb),
                        fmt_mean(ta)
                    ),
                ),
            }
        }
    })
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
