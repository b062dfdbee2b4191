//! `usdt-trace diff BEFORE AFTER`: two runs' NDJSON, per span name: how the mean and p99
//! changed, which parts of the time split explain the change of the mean, and a verdict that
//! names the dominant cause (CPU contention, more work, more I/O, waiting, ...).
//!
//! Pure: reads two files, writes text or NDJSON; `watch --baseline FILE` compares its live
//! run with a file through the same code ([`Run`] collects a run's spans from either source,
//! [`compare_runs`] compares the summaries, [`to_text`] and [`to_json`] write them). Only `{"type":"span"}` lines count; the
//! split comes from their `oncpu_ns`, `runq_ns`, `sleep_ns`, `io_ns` and `idle_ns` fields,
//! which add up to `duration_ns` (see the README, "Where did the time go?"), and what the
//! sleep and io waited on from their `waits` (lock, net, timer within sleep; disk within io):
//! when one kind explains at least half of the part that grew, the verdict names it (lock
//! contention, the network, timers, more I/O or a busier disk).
//!
//! The explanation uses only spans that have a split (a span that crossed threads without
//! poll markers has none): their mean parts add up to their mean duration, so the part deltas
//! add up to the change of that mean exactly. When some spans lack a split the report says
//! how many, instead of spreading the difference over parts it cannot know.

use crate::output::fmt_duration;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a JSON object: {msg}")]
    Parse {
        path: PathBuf,
        line: usize,
        msg: String,
    },
    #[error("{path}:{line}: span line without a numeric duration_ns")]
    NoDuration { path: PathBuf, line: usize },
    #[error("{path}: no span lines (record with `usdt-trace watch --json`)")]
    NoSpans { path: PathBuf },
    #[error("{path}: not a regular file")]
    NotFile { path: PathBuf },
    #[error("writing the report: {0}")]
    Write(#[from] std::io::Error),
}

impl DiffError {
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, DiffError::Write(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

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
    fn words(self) -> &'static str {
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
fn percentile(sorted: &[u64], p: u64) -> u64 {
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
    /// From a `{"type":"span"}` line; None for any other line, an error for a span line
    /// without a numeric `duration_ns`.
    fn of_json(v: &Value) -> Option<Result<SpanSample, ()>> {
        if v["type"] != "span" {
            return None;
        }
        let Some(duration_ns) = v["duration_ns"].as_u64() else {
            return Some(Err(()));
        };
        // A split has at least on-CPU time; idle_ns only exists for polled spans.
        let split = v["oncpu_ns"].is_u64().then(|| SplitSample {
            parts: PARTS.map(|p| v[p.field()].as_u64().unwrap_or(0)),
            // Absent: no wait of that kind (or a run recorded before kinds were known).
            kinds_ns: KINDS.map(|(kind, _)| v["waits"][kind]["ns"].as_u64().unwrap_or(0)),
            kinds_n: KINDS.map(|(kind, _)| v["waits"][kind]["n"].as_u64().unwrap_or(0)),
        });
        Some(Ok(SpanSample { duration_ns, split }))
    }

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

    /// Per span name, its summary.
    pub fn summaries(self) -> Summaries {
        self.by_name
            .into_iter()
            .map(|(k, s)| (k, s.stats()))
            .collect()
    }
}

/// Per span name (`provider:name`), the spans of one NDJSON run.
pub fn read_run(path: &Path, r: impl BufRead) -> Result<Summaries, DiffError> {
    let mut run = Run::default();
    for (i, line) in r.lines().enumerate() {
        let line = line.map_err(|source| DiffError::Read {
            path: path.into(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line).map_err(|e| DiffError::Parse {
            path: path.into(),
            line: i + 1,
            msg: e.to_string(),
        })?;
        let Some(sample) = SpanSample::of_json(&v) else {
            continue;
        };
        let sample = sample.map_err(|()| DiffError::NoDuration {
            path: path.into(),
            line: i + 1,
        })?;
        let name = format!(
            "{}:{}",
            v["provider"].as_str().unwrap_or(""),
            v["name"].as_str().unwrap_or("")
        );
        run.add(&name, &sample);
    }
    if run.is_empty() {
        return Err(DiffError::NoSpans { path: path.into() });
    }
    Ok(run.summaries())
}

/// `watch --baseline FILE`: a run read before tracing starts, compared with the live run's
/// spans when it ends.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub path: PathBuf,
    pub spans: Summaries,
}

impl Baseline {
    pub fn read(path: &Path) -> Result<Baseline, DiffError> {
        Ok(Baseline {
            path: path.into(),
            spans: read_run_file(path)?,
        })
    }
}

/// Reads a whole run from the file at `path`: a regular file (a FIFO or a device would be
/// read forever, or block opening), NDJSON with span lines.
pub fn read_run_file(path: &Path) -> Result<Summaries, DiffError> {
    read_run(path, open(path)?)
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

/// Compare two runs read from `before` and `after`.
#[cfg(test)]
fn diff_readers(
    before: (&Path, impl BufRead),
    after: (&Path, impl BufRead),
) -> Result<Vec<Comparison>, DiffError> {
    let b = read_run(before.0, before.1)?;
    let a = read_run(after.0, after.1)?;
    Ok(compare_runs(b, a))
}

fn open(path: &Path) -> Result<std::io::BufReader<std::fs::File>, DiffError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| DiffError::Read {
        path: path.into(),
        source,
    };
    // O_NONBLOCK: opening a FIFO would otherwise wait for a writer.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(err)?;
    if !f.metadata().map_err(err)?.is_file() {
        return Err(DiffError::NotFile { path: path.into() });
    }
    Ok(std::io::BufReader::new(f))
}

/// Writes one comparison as `usdt-trace diff` does: its text, or its JSON line.
pub fn write_comparison(c: &Comparison, json: bool, out: &mut impl Write) -> std::io::Result<()> {
    if json {
        let mut line = serde_json::to_vec(&to_json(c)).map_err(std::io::Error::from)?;
        line.push(b'\n');
        out.write_all(&line)
    } else {
        out.write_all(to_text(c).as_bytes())
    }
}

/// `usdt-trace diff`: read both files, write the report.
pub fn run(before: &Path, after: &Path, json: bool, out: &mut impl Write) -> Result<(), DiffError> {
    let cmp = compare_runs(read_run_file(before)?, read_run_file(after)?);
    for c in &cmp {
        write_comparison(c, json, out)?;
    }
    out.flush()?;
    Ok(())
}

/// A signed duration: `+0.98ms`, `-12.0us`.
fn fmt_signed(ns: f64) -> String {
    let sign = if ns < 0.0 { '-' } else { '+' };
    format!("{sign}{}", fmt_duration(ns.abs().round() as u64))
}

fn fmt_mean(ns: f64) -> String {
    fmt_duration(ns.round() as u64)
}

/// Parts worth naming: moved by at least 1% of the largest move and by at least 1 µs, largest
/// first.
fn named_parts(d: &[f64; PARTS.len()]) -> Vec<(Part, f64)> {
    let max = d.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let mut v: Vec<(Part, f64)> = PARTS
        .iter()
        .zip(d)
        .filter(|(_, x)| x.abs() >= 1_000.0 && x.abs() >= 0.01 * max)
        .map(|(p, x)| (*p, *x))
        .collect();
    v.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()));
    v
}

/// The text report of one name: a header line with counts, means and p99s, the explanation
/// and the verdict.
pub fn to_text(c: &Comparison) -> String {
    let (b, a) = match (&c.before, &c.after) {
        (Some(b), Some(a)) => (b, a),
        (Some(b), None) => {
            return format!(
                "{}: only before ({} spans, mean {})\n",
                c.name,
                b.count,
                fmt_mean(b.mean_ns)
            )
        }
        (None, Some(a)) => {
            return format!(
                "{}: only after ({} spans, mean {})\n",
                c.name,
                a.count,
                fmt_mean(a.mean_ns)
            )
        }
        (None, None) => return String::new(),
    };
    let mut s = format!(
        "{}: {} → {}",
        c.name,
        fmt_mean(b.mean_ns),
        fmt_mean(a.mean_ns)
    );
    match &c.part_deltas {
        Some(d) => {
            let parts = named_parts(d);
            if parts.is_empty() {
                s.push_str(": no part moved");
            } else {
                s.push_str(": ");
                let words: Vec<String> = parts
                    .iter()
                    .map(|(p, x)| {
                        let kinds: Vec<String> = KINDS
                            .iter()
                            .enumerate()
                            .filter(|(_, (_, kp))| kp == p)
                            .map(|(k, (name, _))| (name, a.kinds_ns[k] - b.kinds_ns[k]))
                            .filter(|(_, d)| d.abs() >= 1_000.0)
                            .map(|(name, d)| format!("{name} {}", fmt_signed(d)))
                            .collect();
                        let kinds = if kinds.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", kinds.join(", "))
                        };
                        format!("{} {}{kinds}", fmt_signed(*x), p.words())
                    })
                    .collect();
                s.push_str(&words.join(", "));
            }
        }
        None => s.push_str(": no time split (spans crossed threads, or --no-sched)"),
    }
    s.push('\n');
    s.push_str(&format!(
        "  spans {} → {}, p99 {} → {}",
        b.count,
        a.count,
        fmt_duration(b.p99_ns),
        fmt_duration(a.p99_ns)
    ));
    for (which, st) in [("before", b), ("after", a)] {
        if st.split_count < st.count && st.split_count > 0 {
            s.push_str(&format!(
                "; split known for {} of {} spans {which}",
                st.split_count, st.count
            ));
        }
    }
    s.push('\n');
    if let Some(v) = &c.verdict {
        s.push_str(&format!("  verdict: {}\n", v.words));
    }
    s
}

fn stats_json(s: &Stats) -> Value {
    let mut parts = serde_json::Map::new();
    for (p, x) in PARTS.iter().zip(s.parts_ns) {
        parts.insert(p.field().into(), json!(x.round() as u64));
    }
    let mut waits = serde_json::Map::new();
    for (k, (kind, _)) in KINDS.iter().enumerate() {
        waits.insert(
            (*kind).into(),
            json!({"ns": s.kinds_ns[k].round() as u64, "n": (s.kinds_n[k] * 1000.0).round() / 1000.0}),
        );
    }
    json!({
        "count": s.count,
        "mean_ns": s.mean_ns.round() as u64,
        "p99_ns": s.p99_ns,
        "split_count": s.split_count,
        "parts": parts,
        "waits": waits,
    })
}

/// One NDJSON line per name: `{"type":"diff","span","before","after","delta","verdict"}`;
/// before or after is null for a name only one run has.
pub fn to_json(c: &Comparison) -> Value {
    let mut v = json!({
        "type": "diff",
        "span": c.name,
        "before": c.before.as_ref().map(stats_json),
        "after": c.after.as_ref().map(stats_json),
    });
    if let (Some(b), Some(a)) = (&c.before, &c.after) {
        let mut delta = serde_json::Map::new();
        delta.insert(
            "mean_ns".into(),
            json!((a.mean_ns - b.mean_ns).round() as i64),
        );
        delta.insert("p99_ns".into(), json!(a.p99_ns as i64 - b.p99_ns as i64));
        if let Some(d) = &c.part_deltas {
            let mut parts = serde_json::Map::new();
            for (p, x) in PARTS.iter().zip(d) {
                parts.insert(p.field().into(), json!(x.round() as i64));
            }
            delta.insert("parts".into(), Value::Object(parts));
            let mut waits = serde_json::Map::new();
            for (k, (kind, _)) in KINDS.iter().enumerate() {
                waits.insert(
                    (*kind).into(),
                    json!((a.kinds_ns[k] - b.kinds_ns[k]).round() as i64),
                );
            }
            delta.insert("waits_ns".into(), Value::Object(waits));
        }
        v["delta"] = Value::Object(delta);
    }
    if let Some(vd) = &c.verdict {
        v["verdict"] = json!({
            "cause": vd.cause,
            "share": (vd.share * 1000.0).round() / 1000.0,
            "words": vd.words,
        });
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A span line like `watch --json` writes (only the fields diff reads).
    fn span(name: &str, oncpu: u64, runq: u64, sleep: u64, io: u64) -> String {
        format!(
            r#"{{"type":"span","provider":"app","name":"{name}","pid":1,"tid":1,"duration_ns":{},"oncpu_ns":{oncpu},"offcpu_ns":{},"runq_ns":{runq},"sleep_ns":{sleep},"io_ns":{io},"args":[]}}"#,
            oncpu + runq + sleep + io,
            runq + sleep + io
        ) + "\n"
    }

    fn run_of(lines: &[String]) -> String {
        let mut s = String::from(r#"{"type":"start","schema":1}"#);
        s.push('\n');
        for l in lines {
            s.push_str(l);
        }
        s.push_str(r#"{"type":"summary","spans":0}"#);
        s.push('\n');
        s
    }

    fn diff(before: &str, after: &str) -> Vec<Comparison> {
        diff_readers(
            (Path::new("before"), before.as_bytes()),
            (Path::new("after"), after.as_bytes()),
        )
        .unwrap()
    }

    /// `n` spans with parts jittered by ±1% so that the significance test sees some noise.
    fn many(name: &str, n: u64, oncpu: u64, runq: u64, sleep: u64, io: u64) -> Vec<String> {
        (0..n)
            .map(|i| {
                let j = |x: u64| x + x * (i % 3) / 100;
                span(name, j(oncpu), j(runq), j(sleep), j(io))
            })
            .collect()
    }

    #[test]
    fn sleep_that_doubled_the_mean_is_named_in_words_with_its_size() {
        let b = run_of(&[span("request", 1_000_000, 0, 20_000, 0)]);
        let a = run_of(&[span("request", 1_040_000, 0, 1_000_000, 0)]);
        let c = diff(&b, &a);
        assert_eq!(c.len(), 1);
        let text = to_text(&c[0]);
        assert!(
            text.starts_with("app:request: 1.02ms → 2.04ms: +980.0us sleeping, +40.0us on CPU\n"),
            "{text}"
        );
        // One span each: no variance, the change is 100% of the mean.
        assert_eq!(c[0].verdict.as_ref().unwrap().cause, "waiting", "{text}");
        assert!(text.contains("verdict: waiting: sleep grew"), "{text}");
        assert!(text.contains("(96% of the growth)"), "{text}");
    }

    #[test]
    fn each_part_that_grows_names_its_horseman() {
        for (parts, cause) in [
            ([2_000_000, 0, 0, 0], "more_work"),
            ([1_000_000, 1_000_000, 0, 0], "cpu_contention"),
            ([1_000_000, 0, 1_000_000, 0], "waiting"),
            ([1_000_000, 0, 0, 1_000_000], "more_io"),
        ] {
            let b = run_of(&many("x", 50, 1_000_000, 0, 0, 0));
            let a = run_of(&many("x", 50, parts[0], parts[1], parts[2], parts[3]));
            let c = diff(&b, &a);
            let v = c[0].verdict.as_ref().unwrap();
            assert_eq!(v.cause, cause, "{}", to_text(&c[0]));
            assert!(v.share > 0.95, "{v:?}");
        }
    }

    #[test]
    fn a_faster_run_names_what_shrank() {
        let b = run_of(&many("x", 20, 1_000_000, 500_000, 0, 0));
        let a = run_of(&many("x", 20, 1_000_000, 0, 0, 0));
        let c = diff(&b, &a);
        assert_eq!(c[0].verdict.as_ref().unwrap().cause, "less_cpu_contention");
        // The jitter of `many` makes the before run's run queue 505 µs on average.
        assert!(
            to_text(&c[0]).contains(": -504.8us waiting for a CPU\n"),
            "{}",
            to_text(&c[0])
        );
    }

    #[test]
    fn a_change_within_the_noise_is_no_change() {
        // 2% slower: under the 5% floor.
        let b = run_of(&many("x", 30, 1_000_000, 0, 0, 0));
        let a = run_of(&many("x", 30, 1_020_000, 0, 0, 0));
        assert_eq!(diff(&b, &a)[0].verdict.as_ref().unwrap().cause, "no_change");
        // 20% slower on average, but spans vary from 0.1 ms to 10 ms: within 3 standard errors.
        let wild = |k: u64| -> Vec<String> {
            (0..6)
                .map(|i| {
                    span(
                        "x",
                        [100_000, 10_000_000][(i % 2) as usize] * k / 10,
                        0,
                        0,
                        0,
                    )
                })
                .collect()
        };
        let c = diff(&run_of(&wild(10)), &run_of(&wild(12)));
        assert_eq!(c[0].verdict.as_ref().unwrap().cause, "no_change", "{c:?}");
    }

    #[test]
    fn count_mean_and_nearest_rank_p99() {
        // 1..=200 µs: mean 100.5 µs, p99 = the 198th value.
        let lines: Vec<String> = (1..=200).map(|i| span("x", i * 1000, 0, 0, 0)).collect();
        let c = diff(&run_of(&lines), &run_of(&lines));
        let s = c[0].before.as_ref().unwrap();
        assert_eq!(s.count, 200);
        assert_eq!(s.mean_ns, 100_500.0);
        assert_eq!(s.p99_ns, 198_000);
        assert_eq!(percentile(&[5], 99), 5);
        assert_eq!(percentile(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 99), 10);
        assert_eq!(percentile(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 50), 5);
    }

    #[test]
    fn part_deltas_add_up_to_the_change_of_the_mean() {
        let b = run_of(&many("x", 10, 300_000, 100_000, 200_000, 50_000));
        let a = run_of(&many("x", 10, 350_000, 400_000, 100_000, 90_000));
        let c = &diff(&b, &a)[0];
        let sum: f64 = c.part_deltas.unwrap().iter().sum();
        let change = c.after.as_ref().unwrap().mean_ns - c.before.as_ref().unwrap().mean_ns;
        assert!((sum - change).abs() < 1e-6, "{sum} vs {change}");
    }

    #[test]
    fn spans_without_a_split_count_in_the_mean_but_explain_nothing() {
        let nosplit = r#"{"type":"span","provider":"app","name":"x","duration_ns":5000000,"start_tid":9,"args":[]}"#;
        let b = run_of(&[span("x", 1_000_000, 0, 0, 0)]);
        let a = run_of(&[span("x", 2_000_000, 0, 0, 0), format!("{nosplit}\n")]);
        let c = &diff(&b, &a)[0];
        let s = c.after.as_ref().unwrap();
        assert_eq!((s.count, s.split_count), (2, 1));
        assert_eq!(s.mean_ns, 3_500_000.0);
        assert_eq!(s.split_mean_ns, 2_000_000.0);
        assert_eq!(c.part_deltas.unwrap()[0], 1_000_000.0);
        assert!(to_text(c).contains("split known for 1 of 2 spans after"));
        // Neither run with a split: the mean changes, the parts are unknown.
        let c = &diff(
            &run_of(&[format!("{nosplit}\n")]),
            &run_of(&[format!("{nosplit}\n")]),
        )[0];
        assert_eq!(c.part_deltas, None);
        assert!(to_text(c).contains("no time split"));
    }

    #[test]
    fn names_in_one_run_only_are_listed_as_such() {
        let b = run_of(&[span("old", 1000, 0, 0, 0)]);
        let a = run_of(&[span("new", 1000, 0, 0, 0)]);
        let c = diff(&b, &a);
        let text: String = c.iter().map(to_text).collect();
        assert_eq!(
            text,
            "app:new: only after (1 spans, mean 1.0us)\napp:old: only before (1 spans, mean 1.0us)\n"
        );
        assert_eq!(to_json(&c[0])["before"], Value::Null);
    }

    #[test]
    fn json_has_both_runs_the_deltas_and_the_verdict() {
        let b = run_of(&[span("request", 1_000_000, 0, 20_000, 0)]);
        let a = run_of(&[span("request", 1_040_000, 0, 1_000_000, 0)]);
        let v = to_json(&diff(&b, &a)[0]);
        assert_eq!(v["span"], "app:request");
        assert_eq!(v["before"]["count"], 1);
        assert_eq!(v["before"]["mean_ns"], 1_020_000);
        assert_eq!(v["after"]["p99_ns"], 2_040_000);
        assert_eq!(v["delta"]["mean_ns"], 1_020_000);
        assert_eq!(v["delta"]["parts"]["sleep_ns"], 980_000);
        assert_eq!(v["delta"]["parts"]["oncpu_ns"], 40_000);
        assert_eq!(v["delta"]["parts"]["runq_ns"], 0);
        assert_eq!(v["verdict"]["cause"], "waiting");
        assert_eq!(v["verdict"]["share"], 0.961);
    }

    /// A span line with `waits`: (kind, ns, n) triples, inside its sleep and io.
    fn span_waits(oncpu: u64, sleep: u64, io: u64, waits: &[(&str, u64, u64)]) -> String {
        let w: Vec<String> = waits
            .iter()
            .map(|(k, ns, n)| format!(r#""{k}":{{"ns":{ns},"n":{n}}}"#))
            .collect();
        format!(
            r#"{{"type":"span","provider":"app","name":"x","duration_ns":{},"oncpu_ns":{oncpu},"offcpu_ns":{},"runq_ns":0,"sleep_ns":{sleep},"io_ns":{io},"waits":{{{}}},"args":[]}}"#,
            oncpu + sleep + io,
            sleep + io,
            w.join(",")
        ) + "\n"
    }

    #[test]
    fn sleep_that_grew_in_futexes_is_lock_contention() {
        let b = run_of(&[span_waits(1_000_000, 20_000, 0, &[("timer", 20_000, 1)])]);
        let a = run_of(&[span_waits(
            1_000_000,
            1_620_000,
            0,
            &[("timer", 20_000, 1), ("lock", 1_600_000, 3)],
        )]);
        let c = &diff(&b, &a)[0];
        let text = to_text(c);
        assert!(
            text.starts_with("app:x: 1.02ms → 2.62ms: +1.60ms sleeping (lock +1.60ms)\n"),
            "{text}"
        );
        // 1.6 of 2.62 ms: 61% of the after run's time.
        assert!(
            text.contains("verdict: lock contention: 61% of the time waiting on futexes (+1.60ms per span) (100% of the growth)"),
            "{text}"
        );
        assert_eq!(c.verdict.as_ref().unwrap().cause, "lock_contention");
        let v = to_json(c);
        assert_eq!(v["delta"]["waits_ns"]["lock"], 1_600_000);
        assert_eq!(v["after"]["waits"]["lock"]["n"], 3.0);
    }

    #[test]
    fn more_disk_waits_is_more_io_and_longer_ones_a_busy_disk() {
        let base = run_of(&many_waits(1_000_000, 8, 100_000));
        // Twice the reads, each as long.
        let more = run_of(&many_waits(1_000_000, 16, 100_000));
        let c = &diff(&base, &more)[0];
        assert_eq!(
            c.verdict.as_ref().unwrap().cause,
            "more_io",
            "{}",
            to_text(c)
        );
        assert!(to_text(c).contains("more I/O: 8.0 → 16.0 disk waits per span, 100.0us each"));
        // As many reads, each 2.5 times as long.
        let busy = run_of(&many_waits(1_000_000, 8, 250_000));
        let c = &diff(&base, &busy)[0];
        assert_eq!(
            c.verdict.as_ref().unwrap().cause,
            "busy_disk",
            "{}",
            to_text(c)
        );
        assert!(
            to_text(c).contains("a busier disk: each disk wait 100.0us → 250.0us, 8.0 per span")
        );
    }

    /// Ten spans of `oncpu` plus `n` disk waits of `each` ns.
    fn many_waits(oncpu: u64, n: u64, each: u64) -> Vec<String> {
        many_of("disk", oncpu, n, each)
    }

    /// Ten spans of `oncpu` plus `n` io waits of `kind` of `each` ns.
    fn many_of(kind: &str, oncpu: u64, n: u64, each: u64) -> Vec<String> {
        (0..10)
            .map(|_| span_waits(oncpu, 0, n * each, &[(kind, n * each, n)]))
            .collect()
    }

    #[test]
    fn more_page_faults_and_slower_ones_are_told_apart_and_not_called_disk_waits() {
        let base = run_of(&many_of("fault", 1_000_000, 20, 50_000));
        // Three times the faults (a bigger working set, a colder cache), each as long.
        let more = run_of(&many_of("fault", 1_000_000, 60, 50_000));
        let c = &diff(&base, &more)[0];
        assert_eq!(
            c.verdict.as_ref().unwrap().cause,
            "more_faults",
            "{}",
            to_text(c)
        );
        let t = to_text(c);
        assert!(
            t.contains("more page faults: 20.0 → 60.0 major faults per span, 50.0us each"),
            "{t}"
        );
        assert!(!t.contains("disk wait"), "{t}");
        // As many faults, each 4 times as long.
        let slow = run_of(&many_of("fault", 1_000_000, 20, 200_000));
        let c = &diff(&base, &slow)[0];
        assert_eq!(
            c.verdict.as_ref().unwrap().cause,
            "slower_faults",
            "{}",
            to_text(c)
        );
        let t = to_text(c);
        assert!(
            t.contains("slower page faults (slower paging or a busier disk): each fault 50.0us → 200.0us, 20.0 per span"),
            "{t}"
        );
    }

    #[test]
    fn sleep_in_no_known_kind_stays_plain_waiting() {
        // The sleep grew by 1 ms, its futex part by 0.2 ms: less than half, no kind named.
        let b = run_of(&[span_waits(1_000_000, 0, 0, &[])]);
        let a = run_of(&[span_waits(1_000_000, 1_000_000, 0, &[("lock", 200_000, 1)])]);
        let c = &diff(&b, &a)[0];
        assert_eq!(
            c.verdict.as_ref().unwrap().cause,
            "waiting",
            "{}",
            to_text(c)
        );
    }

    #[test]
    fn bad_input_is_an_error_naming_the_file_and_line() {
        let e = diff_readers(
            (
                Path::new("b.ndjson"),
                "{\"type\":\"start\"}\nnot json\n".as_bytes(),
            ),
            (Path::new("a"), "".as_bytes()),
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("b.ndjson:2: not a JSON object"),
            "{e}"
        );
        let e = diff_readers(
            (Path::new("b"), run_of(&[span("x", 1, 0, 0, 0)]).as_bytes()),
            (Path::new("a.ndjson"), "{\"type\":\"start\"}\n".as_bytes()),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "a.ndjson: no span lines (record with `usdt-trace watch --json`)"
        );
        let e = diff_readers(
            (Path::new("b"), "{\"type\":\"span\"}\n".as_bytes()),
            (Path::new("a"), "".as_bytes()),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "b:1: span line without a numeric duration_ns"
        );
    }

    /// A span record as the kernel sends it: `dur` ns long, with this accounting.
    fn record(
        dur: u64,
        acct: Option<usdt_trace_common::Acct>,
        idle_polls: (u64, u32),
    ) -> usdt_trace_common::SpanRecord {
        use usdt_trace_common::*;
        SpanRecord {
            hdr: RecordHeader {
                kind: RecordKind::SPAN,
                site: 1,
                pid: 10,
                tid: 11,
                ts_ns: 5_000_000 + dur,
                comm: *b"app\0\0\0\0\0\0\0\0\0\0\0\0\0",
            },
            start_site: 0,
            start_tid: 11,
            start_ns: 5_000_000,
            acct: acct.unwrap_or_default(),
            acct_valid: acct.is_some() as u32,
            waker_pid: 0,
            waker_tid: 0,
            has_strs: 0,
            longest_off_ns: 0,
            waker_comm: [0; 16],
            args: [0; MAX_ARGS],
            end_args: [0; MAX_ARGS],
            idle_ns: idle_polls.0,
            polls: idle_polls.1,
            threads: idle_polls.1.min(1),
        }
    }

    /// The oracle of `watch --baseline`'s numbers: a live span counts as its `watch --json`
    /// line would in `diff`, whatever its split, waits and polls.
    #[test]
    fn a_live_span_counts_as_its_json_line_would() {
        use crate::output::{json::span_json, PairInfo, SiteInfo};
        use usdt_trace_common::*;
        let acct = |waits: &[(u32, u64, u32)]| {
            let mut a = Acct {
                oncpu: 3_000_000,
                runq: 250_000,
                sleep: 1_200_000,
                io: 700_000,
                ..Acct::default()
            };
            for &(kind, ns, n) in waits {
                a.wait_ns[(kind - 1) as usize] = ns;
                a.waits[(kind - 1) as usize] = n;
            }
            a
        };
        let recs = [
            record(5_150_000, Some(acct(&[])), (0, 0)),
            record(
                5_150_000,
                Some(acct(&[
                    (WAIT_LOCK, 1_000_000, 2),
                    (WAIT_NET, 100_000, 1),
                    (WAIT_TIMER, 50_000, 3),
                    (WAIT_DISK, 650_000, 8),
                    (WAIT_FAULT, 40_000, 2),
                ])),
                (0, 0),
            ),
            // A polled span: idle time between polls.
            record(
                9_000_000,
                Some(acct(&[(WAIT_DISK, 600_000, 1)])),
                (3_850_000, 3),
            ),
            // No split (crossed threads unmarked, or --no-sched).
            record(7_000, None, (0, 0)),
            // idle_ns without polls is not written, so not counted.
            record(5_150_000, Some(acct(&[])), (99, 0)),
        ];
        let pair = PairInfo {
            provider: "app".into(),
            stem: "request".into(),
            start: "request__start".into(),
            ends: vec!["request__end".into()],
        };
        let site = SiteInfo::for_test("app", "request__start", &[], &[]);
        let (mut live, mut file) = (Run::default(), String::new());
        for r in &recs {
            let mut line = Vec::new();
            span_json(&mut line, &pair, &site, &site, r, None, None);
            let v: Value = serde_json::from_slice(&line).unwrap();
            let from_line = SpanSample::of_json(&v).unwrap().unwrap();
            assert_eq!(SpanSample::of_record(r), from_line, "{v}");
            live.add("app:request", &SpanSample::of_record(r));
            file.push_str(std::str::from_utf8(&line).unwrap());
        }
        assert!(SpanSample::of_record(&recs[1])
            .split
            .unwrap()
            .kinds_n
            .iter()
            .all(|&n| n > 0));
        assert_eq!(
            SpanSample::of_record(&recs[2]).split.unwrap().parts[4],
            3_850_000
        );
        assert_eq!(SpanSample::of_record(&recs[3]).split, None);
        // And the summaries, hence every comparison, are the same.
        let from_file = read_run(Path::new("live.ndjson"), file.as_bytes()).unwrap();
        assert_eq!(live.summaries(), from_file);
    }

    #[test]
    fn a_baseline_that_is_missing_not_a_file_or_not_from_watch_is_one_line() {
        let dir = std::env::temp_dir().join(format!("usdt-trace-diff-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = Baseline::read(&dir.join("missing.ndjson")).unwrap_err();
        assert!(
            e.to_string().contains("missing.ndjson: No such file"),
            "{e}"
        );
        let e = Baseline::read(&dir).unwrap_err();
        assert!(e.to_string().ends_with(": not a regular file"), "{e}");
        let text = dir.join("text.out");
        std::fs::write(&text, "END(s) PID TID\n").unwrap();
        let e = Baseline::read(&text).unwrap_err();
        assert!(
            e.to_string().contains("text.out:1: not a JSON object"),
            "{e}"
        );
        assert!(!e.to_string().contains('\n'), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
