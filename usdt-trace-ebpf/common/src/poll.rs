//! Polled spans (async runtimes): the time split of a span whose task is polled on any thread.

#[allow(unused_imports)]
use crate::*;

/// Threads a span's [`PollAcct`] remembers by id; past this many, each further thread that is
/// not among them is counted again (`threads` is then an upper bound).
pub const POLL_TIDS: usize = 4;

/// The accounting of a span paired by id whose work runs in polls (usdt-markers'
/// `<name>__enter`/`<name>__exit` around each poll of a future): while it is entered on a
/// thread, that thread's scheduler time is the span's; between polls the span waits to be polled.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollAcct {
    /// The entered threads' time, summed over the polls that ended.
    pub acct: Acct,
    /// The entered thread's totals at the enter.
    pub enter_acct: Acct,
    /// bpf_ktime_get_ns() at the enter.
    pub enter_ns: u64,
    /// Wall time inside polls that ended: `acct`'s components add up to it.
    pub run_ns: u64,
    /// Thread the span is entered on, 0 between polls.
    pub enter_tid: u32,
    /// Polls entered.
    pub polls: u32,
    /// Distinct threads that entered it (see [`POLL_TIDS`]).
    pub threads: u32,
    pub _pad: u32,
    pub tids: [u32; POLL_TIDS],
}

impl PollAcct {
    /// The span is entered on `tid` at `now`, whose accounting totals are `acct_now`. An enter
    /// while already entered (a nested or lost exit) first closes the open poll at `now`.
    #[inline(always)]
    pub fn enter(&mut self, tid: u32, now: u64, acct_now: &Acct) {
        if self.enter_tid != 0 && self.enter_tid == tid {
            self.exit(tid, now, acct_now);
        }
        self.enter_tid = tid;
        self.enter_ns = now;
        self.enter_acct = *acct_now;
        self.polls = self.polls.saturating_add(1);
        let mut seen = false;
        let mut free = POLL_TIDS;
        let mut j = 0;
        while j < POLL_TIDS {
            if self.tids[j] == tid {
                seen = true;
            } else if self.tids[j] == 0 && free == POLL_TIDS {
                free = j;
            }
            j += 1;
        }
        if !seen {
            self.threads = self.threads.saturating_add(1);
            if free < POLL_TIDS {
                self.tids[free] = tid;
            }
        }
    }

    /// The span leaves `tid` at `now` (its exit marker, or its end inside a poll). Returns
    /// whether a poll on `tid` was open, i.e. whether the thread's hold on accounting ends.
    #[inline(always)]
    pub fn exit(&mut self, tid: u32, now: u64, acct_now: &Acct) -> bool {
        if self.enter_tid == 0 || self.enter_tid != tid {
            return false;
        }
        let d = acct_now.since(&self.enter_acct);
        self.acct.oncpu += d.oncpu;
        self.acct.runq += d.runq;
        self.acct.sleep += d.sleep;
        self.acct.io += d.io;
        self.acct.steal += d.steal;
        self.acct.add_waits(acct_now, &self.enter_acct);
        self.acct.probe_hits = self.acct.probe_hits.wrapping_add(d.probe_hits);
        self.acct.probe_ns = self.acct.probe_ns.wrapping_add(d.probe_ns);
        self.run_ns += now.saturating_sub(self.enter_ns);
        self.enter_tid = 0;
        true
    }

    /// Time the span of duration `dur` spent waiting to be polled: what no poll covered.
    #[inline(always)]
    pub fn idle_ns(&self, dur: u64) -> u64 {
        dur.saturating_sub(self.run_ns)
    }
}
