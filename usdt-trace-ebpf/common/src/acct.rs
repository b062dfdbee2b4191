//! A span's time split ([`Acct`]): on-CPU, the host's steal, run queue, sleep and I/O, the
//! waits by kind, and the probes' own cost; and the CPU steal counter it is split by.

#[allow(unused_imports)]
use crate::*;

/// Cumulative per-thread time, in ns, by scheduling state. Only advanced while a span is open.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Acct {
    /// On CPU as the kernel charges the task (its runtime): the time it ran, less what
    /// [`Acct::steal`] holds.
    pub oncpu: u64,
    pub runq: u64,
    pub sleep: u64,
    pub io: u64,
    /// The time the thread was switched in but the kernel did not charge it: the hypervisor
    /// ran another guest on this vCPU (paravirtual steal accounting). What the run queue's
    /// `clock - clock_task` grew by while the thread was on its CPU ([`CpuSteal`]); 0 on bare
    /// metal and on kernels without the accounting.
    pub steal: u64,
    /// Of `sleep + io`, the time off CPU by what the thread waited on (`WAIT_*` index); the
    /// rest is "other" (a pipe, a tty, a wait in a syscall of no known class).
    pub wait_ns: [u64; WAIT_KINDS],
    /// How many off-CPU intervals of each kind began (so more waits tell from longer ones).
    pub waits: [u32; WAIT_KINDS],
    /// Probe hits of this run on the thread (counted while it has a span open): how many of
    /// them fell inside a span, and what they are known to cost here ([`Acct::probe_ns`]),
    /// so that the tracing's own share of a span can be shown. Wraps like `waits`.
    pub probe_hits: u32,
    /// The sum of those hits' costs (`SiteSpec::probe_ns` each), in ns.
    pub probe_ns: u64,
}

/// A CPU's steal counter at one moment: how far its run queue's `clock_task` (which the
/// tasks' runtimes follow) has fallen behind its `clock`. On a kernel with paravirtual steal
/// accounting and no IRQ time accounting (this one) that is the hypervisor's steal, as the
/// kernel took it into account; with IRQ time accounting it also holds interrupt time, which
/// is not charged to the task either. It advances when the kernel updates the run queue's
/// clock (every switch, wakeup and tick), so a probe sees steal up to a tick late.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSteal {
    pub ns: u64,
    /// The CPU it was read on; [`CpuSteal::UNKNOWN`] when it could not be read.
    pub cpu: u32,
    pub _pad: u32,
}

impl CpuSteal {
    /// No reading: no steal is ever taken from the time it bounds.
    pub const UNKNOWN: CpuSteal = CpuSteal {
        ns: 0,
        cpu: u32::MAX,
        _pad: 0,
    };

    /// The steal since `earlier`, bounded by the `d` ns it happened in. Counters of
    /// different CPUs are unrelated: a thread that (as far as the hooks saw) ran on one
    /// CPU from `earlier` to now, and is on another, gets none.
    #[inline(always)]
    pub fn since(&self, earlier: &CpuSteal, d: u64) -> u64 {
        if self.cpu != earlier.cpu || self.cpu == u32::MAX {
            return 0;
        }
        let s = self.ns.saturating_sub(earlier.ns);
        if s < d {
            s
        } else {
            d
        }
    }
}

impl Acct {
    /// One probe hit of a site whose hit costs `cost_ns` (measured at start).
    #[inline(always)]
    pub fn add_probe(&mut self, cost_ns: u32) {
        self.probe_hits = self.probe_hits.wrapping_add(1);
        self.probe_ns = self.probe_ns.wrapping_add(cost_ns as u64);
    }
}

impl Acct {
    /// Adds `d` ns spent in scheduling state `state` (`TS_*`).
    #[inline(always)]
    pub fn add(&mut self, state: u32, d: u64) {
        match state {
            TS_RUNQ => self.runq += d,
            TS_SLEEP => self.sleep += d,
            TS_IO => self.io += d,
            _ => self.oncpu += d,
        }
    }

    /// Adds `d` ns of off-CPU time waiting on `kind` (`WAIT_*`; `WAIT_OTHER` adds nothing).
    #[inline(always)]
    pub fn add_wait(&mut self, kind: u32, d: u64) {
        // Every slot, each at a constant index, adding `d` or 0: a store per kind under a
        // test of its own was merged by LLVM into one store at a computed index (`kind - 1`),
        // bounds-checked on a copy, which the verifier refused as unbounded (seen once these
        // stores went to a map value rather than to registers). WAIT_OTHER (0) adds nothing.
        let mut k = 0;
        while k < WAIT_KINDS {
            let mask = 0u64.wrapping_sub((kind as usize == k + 1) as u64);
            self.wait_ns[k] += d & mask;
            k += 1;
        }
    }

    /// An off-CPU interval waiting on `kind` begins.
    #[inline(always)]
    pub fn count_wait(&mut self, kind: u32) {
        // As in `add_wait`: constant indices for the verifier.
        let mut k = 0;
        while k < WAIT_KINDS {
            if kind as usize == k + 1 {
                self.waits[k] = self.waits[k].wrapping_add(1);
            }
            k += 1;
        }
    }

    /// The time accrued since `start`, an earlier snapshot of the same thread's totals.
    #[inline(always)]
    pub fn since(&self, start: &Acct) -> Acct {
        let mut d = Acct {
            oncpu: self.oncpu.saturating_sub(start.oncpu),
            runq: self.runq.saturating_sub(start.runq),
            sleep: self.sleep.saturating_sub(start.sleep),
            io: self.io.saturating_sub(start.io),
            steal: self.steal.saturating_sub(start.steal),
            wait_ns: [0; WAIT_KINDS],
            waits: [0; WAIT_KINDS],
            probe_hits: self.probe_hits.wrapping_sub(start.probe_hits),
            probe_ns: self.probe_ns.wrapping_sub(start.probe_ns),
        };
        d.add_waits(self, start);
        d
    }

    /// Adds the waits `end` accrued since `start` (the counts wrap like the thread's totals).
    #[inline(always)]
    pub fn add_waits(&mut self, end: &Acct, start: &Acct) {
        let mut k = 0;
        while k < WAIT_KINDS {
            self.wait_ns[k] += end.wait_ns[k].saturating_sub(start.wait_ns[k]);
            self.waits[k] = self.waits[k].wrapping_add(end.waits[k].wrapping_sub(start.waits[k]));
            k += 1;
        }
    }
}
