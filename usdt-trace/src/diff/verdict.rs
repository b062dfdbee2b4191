//! The verdict of a significant change: which cause moved the mean, in words and as a stable
//! key. Each part of the split names a cause (run queue → CPU contention, on-CPU → more work,
//! steal → CPU contention on the host, ...), and the kind of wait within sleep and io names a
//! sharper one when it explains at least half of its part (lock contention, more I/O, ...).
//!
//! A cause is weighed by what it brought with it, not only by its own part: each I/O wait a
//! span adds also costs it CPU (the syscall or the fault handler, the switches out and in) and,
//! after its wakeup, time in the run queue. With small direct reads those are as large as the
//! disk wait itself (64 KiB reads here: ~65 µs of disk wait, ~30–60 µs of CPU, ~160 µs of run
//! queue beside a CPU hog), so twice the reads made on-CPU or the run queue the part that grew
//! most, and the verdict said "more work" or "CPU contention". When an io kind's waits grew in
//! number, the I/O is weighed by the extra waits' own time (their number times the shorter of
//! the two runs' mean wait: the host's cache once served 16 reads a span in 59 µs each where
//! 8 had taken 127 µs, and the disk time fell while the reads doubled) and by what grew with
//! them: the run queue by the extra wakeups at the run-queue time per wait the run with fewer
//! waits had (a busier CPU makes each wait for it longer, not more of them), and on-CPU and
//! steal up to the extra waits' own time (a read that costs more CPU than it waits for the
//! disk is CPU work). The waits that got shorter are a move of their own, against the change.

use super::compare::{fmt_mean, fmt_signed, Part, Stats, KINDS, PARTS};

/// What one span name's comparison found.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// A stable key: `more_work`, `cpu_contention`, `host_steal`, `no_change`, ...
    pub cause: &'static str,
    pub words: String,
    /// The named cause's share of the parts that moved in the direction of the change of the
    /// mean, 0..=1: its part's move, and for I/O what moved with its waits.
    pub share: f64,
}

impl Part {
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
            (Part::Steal, true) => (
                "host_steal",
                "CPU contention on the host (steal): time the hypervisor ran others on this vCPU grew",
            ),
            (Part::Steal, false) => (
                "less_host_steal",
                "less CPU contention on the host (steal): time the hypervisor ran others on this vCPU shrank",
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

    /// Its index in `PARTS` (declared in that order; a test holds them together).
    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// Waits of an io kind "grew in number" when the run with more has at least this many more
/// per span ...
const MIN_MORE_WAITS: f64 = 0.5;
/// ... and at least this share more.
const MIN_REL_MORE_WAITS: f64 = 0.25;

/// An io kind's extra waits and what moved with them, in the direction of the change (ns per
/// span).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct WithWaits {
    /// The `KINDS` index.
    pub kind: usize,
    /// The extra waits' own time: how many more, times the shorter of the two mean waits.
    pub more: f64,
    pub oncpu: f64,
    pub steal: f64,
    pub runq: f64,
}

impl WithWaits {
    fn total(&self) -> f64 {
        self.oncpu + self.steal + self.runq
    }

    /// "+240.5us on CPU, +118.0us waiting for a CPU": what is at least 1 µs.
    fn words(&self, sign: f64) -> String {
        [
            (self.oncpu, Part::OnCpu),
            (self.steal, Part::Steal),
            (self.runq, Part::RunQ),
        ]
        .iter()
        .filter(|(x, _)| *x >= 1_000.0)
        .map(|(x, p)| format!("{} {}", fmt_signed(sign * x), p.words()))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// `g`: each part's move in the direction of the change (`sign` times after minus before).
/// When an io kind's waits grew that way in number: their time and what moved with them (see
/// the module's comment); None otherwise.
pub(super) fn with_io_waits(
    g: &[f64; PARTS.len()],
    b: &Stats,
    a: &Stats,
    sign: f64,
) -> Option<WithWaits> {
    let (lo, hi) = if sign > 0.0 { (b, a) } else { (a, b) };
    let dn = |k: usize| hi.kinds_n[k] - lo.kinds_n[k];
    // The mean wait of the run with more; of the shorter of the two when both had some.
    let each = |k: usize| {
        let t_hi = hi.kinds_ns[k] / hi.kinds_n[k];
        if lo.kinds_n[k] > 0.0 {
            t_hi.min(lo.kinds_ns[k] / lo.kinds_n[k])
        } else {
            t_hi
        }
    };
    let more = |k: usize| dn(k) * each(k);
    let kind = KINDS
        .iter()
        .enumerate()
        .filter(|(k, (_, p))| {
            *p == Part::Io && dn(*k) >= MIN_MORE_WAITS.max(MIN_REL_MORE_WAITS * lo.kinds_n[*k])
        })
        .map(|(k, _)| k)
        .max_by(|x, y| more(*x).total_cmp(&more(*y)))?;
    let (dn, more) = (dn(kind), more(kind));
    // The run queue per wait (of any kind: each ends in a wakeup) of the run with fewer; of
    // the other run when that one had none.
    let per_wait = |st: &Stats| {
        let w: f64 = st.kinds_n.iter().sum();
        (w >= MIN_MORE_WAITS).then(|| st.parts_ns[Part::RunQ.index()] / w)
    };
    let runq_each = per_wait(lo).or_else(|| per_wait(hi)).unwrap_or(0.0);
    let runq = (dn * runq_each).clamp(0.0, g[Part::RunQ.index()].max(0.0));
    // On-CPU and steal, up to the extra waits' own time, taken from both alike.
    let (oncpu, steal) = (
        g[Part::OnCpu.index()].max(0.0),
        g[Part::Steal.index()].max(0.0),
    );
    let pool = oncpu + steal;
    let f = if pool > 0.0 {
        pool.min(more) / pool
    } else {
        0.0
    };
    Some(WithWaits {
        kind,
        more,
        oncpu: oncpu * f,
        steal: steal * f,
        runq,
    })
}

/// The verdict of a significant change of the mean whose parts moved by `d` (after minus
/// before, `PARTS` order); `grew`: the mean grew.
pub(super) fn explain(d: &[f64; PARTS.len()], b: &Stats, a: &Stats, grew: bool) -> Verdict {
    let sign = if grew { 1.0 } else { -1.0 };
    let g = d.map(|x| sign * x);
    let with = with_io_waits(&g, b, a, sign);
    let mut by_cause = g;
    if let Some(w) = &with {
        by_cause[Part::OnCpu.index()] -= w.oncpu;
        by_cause[Part::Steal.index()] -= w.steal;
        by_cause[Part::RunQ.index()] -= w.runq;
        // The extra waits count whole; the io part's rest (the other waits got longer, or
        // shorter: a move against the change) as it moved.
        let io = Part::Io.index();
        by_cause[io] = w.more + (g[io] - w.more).max(0.0) + w.total();
    }
    // Causes can also move against the change (a waiter that sleeps longer waits less for a
    // CPU): shares are of the causes that moved the same way, or they could exceed 100%.
    let same_way: f64 = by_cause.iter().filter(|x| **x > 0.0).sum();
    let (i, dmax) = by_cause
        .iter()
        .copied()
        .enumerate()
        .max_by(|x, y| x.1.total_cmp(&y.1))
        .unwrap_or((0, 0.0));
    let share = if same_way > 0.0 {
        (dmax / same_way).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let part = PARTS[i];
    let with = with.filter(|_| part == Part::Io);
    let with_words = with.map(|w| w.words(sign)).filter(|w| !w.is_empty());
    let (cause, what) = match grew
        .then(|| {
            kind_cause(
                part,
                g[i],
                b,
                a,
                with.map(|w| w.kind),
                with_words.as_deref(),
            )
        })
        .flatten()
    {
        Some(named) => named,
        None => {
            let (c, w) = part.cause(grew);
            match &with_words {
                Some(ww) => (c, format!("{w} (with the waits {ww})")),
                None => (c, w.to_string()),
            }
        }
    };
    let dir = if grew { "growth" } else { "drop" };
    Verdict {
        cause,
        words: format!("{what} ({:.0}% of the {dir})", share * 100.0),
        share,
    }
}

/// Causes that are not the verdict's but moved on their own, named after it ("also"): an io
/// kind whose waits grew in number ([`MIN_MORE_WAITS`], [`MIN_REL_MORE_WAITS`]) by at least
/// [`MIN_ALSO_SHARE`] of the before mean in their own time, when the verdict names another
/// cause, or no change. Twice the reads beside a baseline that a CPU hog slowed more is less
/// CPU contention overall, and more I/O all the same: a user asked "why" needs both. The
/// number of waits is the robust half of an I/O change (a count, not a time the host's
/// scheduling moves), which is why only that is named here.
pub(super) fn also(b: &Stats, a: &Stats, verdict: &Verdict) -> Vec<Verdict> {
    let mut found = Vec::new();
    for (k, (_, part)) in KINDS.iter().enumerate() {
        let (nb, na) = (b.kinds_n[k], a.kinds_n[k]);
        let dn = na - nb;
        if *part != Part::Io || na <= 0.0 || dn < MIN_MORE_WAITS.max(MIN_REL_MORE_WAITS * nb) {
            continue;
        }
        let each = if nb > 0.0 {
            (a.kinds_ns[k] / na).min(b.kinds_ns[k] / nb)
        } else {
            a.kinds_ns[k] / na
        };
        if dn * each < MIN_ALSO_SHARE * b.mean_ns {
            continue;
        }
        let d = a.kinds_ns[k] - b.kinds_ns[k];
        let Some((cause, words)) = kind_cause(*part, d, b, a, Some(k), None) else {
            continue;
        };
        // Already the verdict's kind of wait.
        let same = match KINDS[k].0 {
            "fault" => ["more_faults", "slower_faults"],
            _ => ["more_io", "busy_disk"],
        };
        if same.contains(&verdict.cause) {
            continue;
        }
        found.push(Verdict {
            cause,
            words,
            share: 0.0,
        });
    }
    found
}

/// An "also" cause's extra waits take at least this share of the before mean.
const MIN_ALSO_SHARE: f64 = 0.02;

/// When `part` grew by `grew_ns` and the runs know what their waits were: the kind of wait
/// that grew the most within it, as a cause and in words. None when no kind explains at least
/// half of the part's growth (the rest of sleep and io is "other": a pipe, a tty, ...).
/// `more_of`: the kind whose extra waits were weighed ([`with_io_waits`]), named whatever its
/// time did; `with`: what grew with them, in words.
fn kind_cause(
    part: Part,
    grew_ns: f64,
    b: &Stats,
    a: &Stats,
    more_of: Option<usize>,
    with: Option<&str>,
) -> Option<(&'static str, String)> {
    let (k, d) = match more_of {
        Some(k) => (k, a.kinds_ns[k] - b.kinds_ns[k]),
        None => {
            let (k, d) = KINDS
                .iter()
                .enumerate()
                .filter(|(_, (_, p))| *p == part)
                .map(|(k, _)| (k, a.kinds_ns[k] - b.kinds_ns[k]))
                .max_by(|x, y| x.1.total_cmp(&y.1))?;
            if d < 0.5 * grew_ns {
                return None;
            }
            (k, d)
        }
    };
    let share_of_time = 100.0 * a.kinds_ns[k] / a.split_mean_ns.max(1.0);
    let per_span = match with {
        Some(w) => format!("{} per span; with them {w}", fmt_signed(d)),
        None => format!("{} per span", fmt_signed(d)),
    };
    Some(match KINDS[k].0 {
        "lock" => (
            "lock_contention",
            format!("lock contention: {share_of_time:.0}% of the time waiting on futexes ({per_span})"),
        ),
        "net" => (
            "network",
            format!("waiting on the network: {share_of_time:.0}% of the time in socket and poll waits ({per_span})"),
        ),
        "timer" => (
            "timer",
            format!("sleeping on timers: {share_of_time:.0}% of the time in nanosleep ({per_span})"),
        ),
        kind => {
            // More waits of the same length, or as many waits that each take longer: split
            // the growth d = n_a·t_a - n_b·t_b into Δn·(t_b + t_a)/2 + Δt·(n_b + n_a)/2 and
            // name the larger term. The halves share the term of both at once (Δn·Δt) fairly:
            // given wholly to "longer" (Δn·t_b + n_a·Δt), twice the reads of which each took
            // 77% longer (8 of 65 µs → 16 of 116 µs) was a busier disk. A page fault that
            // sleeps reads its page in (from a file or swap): more of them is more paging,
            // each taking longer is slower paging (often the same busier disk).
            let (nb, na) = (b.kinds_n[k], a.kinds_n[k]);
            let tb = if nb > 0.0 { b.kinds_ns[k] / nb } else { 0.0 };
            let ta = if na > 0.0 { a.kinds_ns[k] / na } else { 0.0 };
            let more = (na - nb) * (tb + ta) / 2.0;
            let longer = (ta - tb) * (nb + na) / 2.0;
            // "65.0us each", or "126.8us → 59.3us each" when the waits' length moved too.
            let each = if nb > 0.0 && (ta - tb).abs() > 0.25 * tb {
                format!("{} → {}", fmt_mean(tb), fmt_mean(ta))
            } else {
                fmt_mean(ta)
            };
            match (kind == "fault", nb == 0.0 || more >= longer) {
                (false, true) => (
                    "more_io",
                    format!(
                        "more I/O: {nb:.1} → {na:.1} disk waits per span, {each} each ({per_span})"
                    ),
                ),
                (false, false) => (
                    "busy_disk",
                    format!(
                        "a busier disk: each disk wait {} → {}, {na:.1} per span ({per_span})",
                        fmt_mean(tb),
                        fmt_mean(ta)
                    ),
                ),
                (true, true) => (
                    "more_faults",
                    format!(
                        "more page faults: {nb:.1} → {na:.1} major faults per span, {each} each ({per_span})"
                    ),
                ),
                (true, false) => (
                    "slower_faults",
                    format!(
                        "slower page faults (slower paging or a busier disk): each fault {} → {}, {na:.1} per span ({per_span})",
                        fmt_mean(tb),
                        fmt_mean(ta)
                    ),
                ),
            }
        }
    })
}
