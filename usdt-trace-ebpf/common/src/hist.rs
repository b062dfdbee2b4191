//! Histograms kept in the kernel (`--hist`, `--by`): log-linear buckets, and their bounds.

#[allow(unused_imports)]
use crate::*;

/// Log-linear histogram buckets: each power of two is split into this many equal sub-buckets,
/// so a value is known to within 1/HIST_SUB of its octave (a bucket's midpoint is within 1/16
/// = 6.25% of any value in it), enough for quoted percentiles, where log2 buckets are ±50%.
pub const HIST_SUB: usize = 8;

/// Buckets per histogram: 0..8 exactly, then 8 per octave from [8, 16) up to [2^63, 2^64).
pub const HIST_BUCKETS: usize = HIST_SUB + (64 - 3) * HIST_SUB;

/// Log2 buckets, for drawing: 0 holds 0, b holds [2^(b-1), 2^b).
pub const LOG2_BUCKETS: usize = 64;

/// Components of a span histogram, each an index into the component axis of `HISTS`.
pub const HIST_COMPONENTS: usize = 7;

/// Histogram component: the span's wall-clock duration.
pub const HIST_DURATION: usize = 0;

/// Histogram component: time on CPU.
pub const HIST_ONCPU: usize = 1;

/// Histogram component: time runnable, waiting for a CPU.
pub const HIST_RUNQ: usize = 2;

/// Histogram component: time in interruptible sleep.
pub const HIST_SLEEP: usize = 3;

/// Histogram component: time in uninterruptible (I/O) sleep.
pub const HIST_IO: usize = 4;

/// Histogram component: time waiting to be polled (spans with poll markers only: a span one
/// thread ran from start to end has none, and does not count here).
pub const HIST_IDLE: usize = 5;

/// Histogram component: time switched in but not charged to the task (the host's steal, see
/// [`crate::Acct::steal`]). Last, so the components before it keep their places.
pub const HIST_STEAL: usize = 6;

/// Span names (pairs) that can have histograms.
pub const MAX_PAIRS: u32 = 4096;

/// Index into the `HISTS` per-CPU array of one span name's histogram of `component`.
#[inline(always)]
pub fn hist_slot(pair_id: u32, component: usize) -> u32 {
    pair_id * HIST_COMPONENTS as u32 + component as u32
}

/// `--hist`: what a span name's closed spans waited on, summed (the `WAIT_SUMS` per-CPU array,
/// one entry per span name, indexed by its pair id). Per `WAIT_*` kind (`index kind - 1`): the
/// off-CPU ns and how many waits began. One entry holds every kind, so a span that waited adds
/// its waits with one map lookup rather than one per kind. Nested in the split's parts as the
/// span records' `waits` are: lock, net and timer in sleep, disk and fault in io.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitSums {
    pub ns: [u64; WAIT_KINDS],
    pub n: [u64; WAIT_KINDS],
    /// The span name's closed spans' probe hits inside them and their estimated cost
    /// ([`Acct::probe_hits`], [`Acct::probe_ns`]), summed.
    pub probe_hits: u64,
    pub probe_ns: u64,
}

impl WaitSums {
    /// Adds one closed span's waits (`Acct::wait_ns`, `Acct::waits`).
    #[inline(always)]
    pub fn add(&mut self, a: &Acct) {
        let mut k = 0;
        while k < WAIT_KINDS {
            self.ns[k] += a.wait_ns[k];
            self.n[k] += a.waits[k] as u64;
            k += 1;
        }
        self.probe_hits += a.probe_hits as u64;
        self.probe_ns += a.probe_ns;
    }

    /// Adds another CPU's sums (user space, reading the per-CPU values).
    pub fn merge(&mut self, o: &WaitSums) {
        for k in 0..WAIT_KINDS {
            self.ns[k] = self.ns[k].wrapping_add(o.ns[k]);
            self.n[k] = self.n[k].wrapping_add(o.n[k]);
        }
        self.probe_hits = self.probe_hits.wrapping_add(o.probe_hits);
        self.probe_ns = self.probe_ns.wrapping_add(o.probe_ns);
    }

    /// What `self` counts beyond `before`, an earlier read of the same sums: one interval's.
    pub fn since(&self, before: &WaitSums) -> WaitSums {
        WaitSums {
            ns: core::array::from_fn(|k| self.ns[k].saturating_sub(before.ns[k])),
            n: core::array::from_fn(|k| self.n[k].saturating_sub(before.n[k])),
            probe_hits: self.probe_hits.saturating_sub(before.probe_hits),
            probe_ns: self.probe_ns.saturating_sub(before.probe_ns),
        }
    }
}

/// One histogram: counts per log-linear bucket ([`hist_bucket`]), the sum for means and the
/// largest value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Hist {
    pub buckets: [u64; HIST_BUCKETS],
    pub count: u64,
    pub sum: u64,
    pub max: u64,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            buckets: [0; HIST_BUCKETS],
            count: 0,
            sum: 0,
            max: 0,
        }
    }
}

impl Hist {
    /// Counts one value: what the kernel does per span (`--hist`, `--by`), and tests.
    #[inline(always)]
    pub fn add(&mut self, v: u64) {
        let b = hist_bucket(v);
        // hist_bucket is always in range, and LLVM knows it and would drop the check; the
        // verifier does not (leading_zeros is a bit-twiddling sequence in BPF). The volatile
        // read hides the range from LLVM so the check the verifier needs stays (and no
        // indexing panic path is left for it to reject).
        // SAFETY: a read of a local.
        let b = unsafe { core::ptr::read_volatile(&b) };
        if b < HIST_BUCKETS {
            self.buckets[b] += 1;
        }
        self.count += 1;
        self.sum += v;
        if v > self.max {
            self.max = v;
        }
    }
}

/// Completes a span name's histograms as the kernel leaves them: it counts a split span's
/// run-queue, sleep, I/O and steal parts only when they are not zero (most spans of a busy thread have
/// none; each count is a call and a bucket computation in the span's end probe). Every split
/// span has its on-CPU part counted, zero or not, so the zeros the kernel skipped are the
/// difference of the counts. Sums and maxima are unchanged by zeros.
pub fn fill_zero_parts(comps: &mut [Hist; HIST_COMPONENTS]) {
    let split = comps[HIST_ONCPU].count;
    for c in [HIST_RUNQ, HIST_SLEEP, HIST_IO, HIST_STEAL] {
        let zeros = split.saturating_sub(comps[c].count);
        comps[c].buckets[0] += zeros;
        comps[c].count += zeros;
    }
}

/// The log-linear bucket of `v`: `v` itself below 8, else 8 sub-buckets per power of two.
#[inline(always)]
pub fn hist_bucket(v: u64) -> usize {
    if v < HIST_SUB as u64 {
        return v as usize;
    }
    // e >= 3: v is in [2^e, 2^(e+1)); its top 4 bits pick the sub-bucket.
    let e = 63 - v.leading_zeros() as usize;
    let sub = ((v >> (e - 3)) & (HIST_SUB as u64 - 1)) as usize;
    HIST_SUB + (e - 3) * HIST_SUB + sub
}

/// Inclusive-exclusive value range of a [`hist_bucket`] bucket (the last one's end saturates).
pub fn hist_bucket_range(b: usize) -> (u64, u64) {
    if b < HIST_SUB {
        return (b as u64, b as u64 + 1);
    }
    let e = (b - HIST_SUB) / HIST_SUB + 3;
    let sub = ((b - HIST_SUB) % HIST_SUB) as u64;
    let width = 1u64 << (e - 3);
    let lo = (1u64 << e) + sub * width;
    (lo, lo.saturating_add(width))
}

/// The log2 bucket of `v`: 0 for 0, else 1 + floor(log2(v)), clamped.
#[inline(always)]
pub fn log2_bucket(v: u64) -> usize {
    if v == 0 {
        0
    } else {
        let b = 64 - v.leading_zeros() as usize;
        if b >= LOG2_BUCKETS {
            LOG2_BUCKETS - 1
        } else {
            b
        }
    }
}
