//! Per-thread state: the open span frames, and the time accounting that splits a span into on-CPU, run-queue, sleep and I/O time.

#[allow(unused_imports)]
use crate::*;

/// Nesting depth of the per-thread span stack. Deeper starts are dropped and counted
/// (`CNT_DEPTH_START`); the thread keeps counting how deep it is past the stack
/// (`ThreadState::overflow`), so their ends are dropped too instead of closing an outer frame.
///
/// The frames live inline in the thread's state: a start and an end each cost one map lookup,
/// whatever the depth. The price is memory: a `ThreadState` is ~16 KB (one 16 KB allocation),
/// made when a thread opens its first span (THREADS is not preallocated) and freed when it
/// exits. Strings are kept apart (`STRS`, one [`StrSet`] per open span that has any) so spans
/// that capture none do not pay for them.
///
/// 59 rather than 64: the `fault` wait kind made a frame 256 bytes, the probe-cost counts
/// ([`Acct::probe_hits`], [`Acct::probe_ns`]) 264, and the host's steal ([`Acct::steal`])
/// 272; 60 of them no longer fit a 16 KB allocation with the rest of the state.
pub const MAX_DEPTH: usize = 59;

/// Thread scheduling states tracked by the scheduler hooks.
pub const TS_RUNNING: u32 = 0;

/// Runnable, waiting for a CPU (preempted or woken and not yet running).
pub const TS_RUNQ: u32 = 1;

/// Interruptible sleep.
pub const TS_SLEEP: u32 = 2;

/// Uninterruptible sleep (disk and other D-state waits).
pub const TS_IO: u32 = 3;

/// The kernel's TASK_UNINTERRUPTIBLE bit of `prev_state` in sched_switch: D-state waits.
pub const TASK_UNINTERRUPTIBLE: u32 = 2;

/// The pair id of a frame whose span already ended while a function it tail-called is still
/// open above it at the same stack pointer (that function's own end comes at the same `ret`,
/// or just after it for a return probe). No end matches it; the end below pops it.
pub const PAIR_CLOSED: u32 = u32::MAX;

/// `*c = [0; 16]` as byte stores. The assignment compiles, for BPF, to a call of a byte-loop
/// `memset` subprogram (LLVM cannot prove the field 8-byte aligned), which ran on every
/// context switch of a traced thread.
#[inline(always)]
pub fn zero_comm(c: &mut [u8; 16]) {
    for b in c.iter_mut() {
        // SAFETY: a byte we hold a unique reference to. Volatile only so that LLVM keeps the
        // stores instead of forming the memset call again.
        unsafe { core::ptr::write_volatile(b, 0) };
    }
}

/// An open span. Its `--str` strings, when it has any, are in `STRS` under its id key, or
/// under [`str_key_thread`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Frame {
    /// Cookie of the start site.
    pub site: u32,
    /// Span name index; an end only closes a frame with the same pair id.
    pub pair_id: u32,
    /// Thread that opened the span.
    pub tid: u32,
    /// Where the start's strings are kept, 0 when it captured none: for a span paired per
    /// thread its depth + 1 (in `STRS`), for one paired by id `KEPT_IN_MAP` or `KEPT_IN_SLOT`.
    pub has_strs: u32,
    /// bpf_ktime_get_ns() at the start.
    pub start_ns: u64,
    /// The stack pointer at the start: what a function's end is paired by (`END_SP_*`).
    pub sp: u64,
    /// The thread's cumulative accounting at the start.
    pub acct_start: Acct,
    /// Longest single off-CPU interval seen while this frame was open.
    pub longest_off_ns: u64,
    /// Who woke the thread after that interval.
    pub waker_pid: u32,
    pub waker_tid: u32,
    pub waker_comm: [u8; 16],
    pub args: [u64; MAX_ARGS],
}

/// One off-CPU interval of a thread, closed when it gets the CPU back: asleep from `slept_ns`
/// (waiting on `kind`) until woken at `woken_ns`, then runnable until `running_ns`. A
/// preempted thread (`off_state` `TS_RUNQ`) was runnable throughout: `woken_ns` is
/// `slept_ns`. The two parts are exactly what the thread's accounting added to the sleep (or
/// io) and wait-kind totals and to the run-queue total for this interval, so the intervals
/// inside a span add up to its split.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffInterval {
    pub slept_ns: u64,
    pub woken_ns: u64,
    pub running_ns: u64,
    /// `WAIT_*` of `[slept_ns, woken_ns]`.
    pub kind: u32,
    /// `TS_*` it left the CPU in: `TS_SLEEP`, `TS_IO` or `TS_RUNQ`.
    pub off_state: u32,
}

/// Slots of the scheduler hooks' filter (`TRACKED_TASKS`): per slot, how many threads with
/// per-thread state have a `task_struct` whose address hashes there.
pub const TASK_SLOTS: u32 = 16384;

/// A kernel task pointer's slot in `TRACKED_TASKS`. The hooks get `struct task_struct *`
/// pointers (`prev`, `next`, the woken task): hashing the pointer itself decides "not a traced
/// thread" with one array load, without reading the task's pid from kernel memory or looking
/// it up in `THREADS`. Two threads may share a slot; that only costs the lookup it spares.
/// Task structs come from a slab, evenly spaced: a multiplicative hash spreads them.
#[inline(always)]
pub fn task_slot(task: u64) -> u32 {
    (task.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - TASK_SLOTS.trailing_zeros())) as u32
        & (TASK_SLOTS - 1)
}

/// Per-thread state: the span stack and the scheduler accounting.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ThreadState {
    /// Number of frames in use.
    pub depth: u32,
    /// Spans paired by id that this thread opened and that are still open: they keep the
    /// accounting running like frames do.
    pub id_open: u32,
    /// 1 when `exec_snap` and `delay_snap` are valid.
    pub snap_ok: u32,
    /// Starts past `MAX_DEPTH` not yet matched by an end: each end decrements it and is
    /// dropped, so ends never close an outer frame that is not theirs.
    pub overflow: u32,
    /// `TS_*`: what the thread is doing since `since_ns`.
    pub state: u32,
    /// 1 while the thread counts in the scheduler hooks' filter (`TRACKED_TASKS`): from a span
    /// start until it leaves the CPU with no span open. (Also keeps `since_ns` 8-byte aligned
    /// without a hidden padding hole.)
    pub in_filter: u32,
    /// When the current state began.
    pub since_ns: u64,
    /// Totals up to `since_ns`.
    pub acct: Acct,
    /// When the thread last left the CPU (start of the current off-CPU interval).
    pub off_start_ns: u64,
    /// `WAIT_*`: what the thread waits on in the off-CPU interval in progress (`WAIT_OTHER`
    /// when running, in the run queue, or unknown).
    pub off_kind: u32,
    /// `WAIT_*` of the current off-CPU interval's sleep, kept through the run-queue wait that
    /// follows it (`off_kind` is cleared at the wakeup): what its [`OffInterval`] is named.
    pub sleep_kind: u32,
    /// Process (tgid) of the thread, set by the probes: the scheduler hooks see the thread
    /// only as a `task_struct`, and its [`OffInterval`]s go to its process's track.
    pub tgid: u32,
    /// `TS_*` the thread left the CPU in at the start of the current off-CPU interval.
    pub off_state: u32,
    /// Who last woke this thread (recorded by sched_waking).
    pub last_waker_pid: u32,
    pub last_waker_tid: u32,
    pub last_waker_comm: [u8; 16],
    /// The kernel's CPU time and run-queue wait of the thread (`Config::task_exec_off`,
    /// `task_delay_off`) when it last left the CPU.
    pub exec_snap: u64,
    pub delay_snap: u64,
    /// Its CPU's steal counter when the thread's on-CPU stretch in progress began (valid
    /// while `state` is `TS_RUNNING`).
    pub steal_since: CpuSteal,
    pub frames: [Frame; MAX_DEPTH],
}

/// The state a thread leaves the CPU in, from sched_switch's `preempt` and `prev_state`: a
/// preempted or still-runnable thread waits in the run queue, a D-state one waits for I/O.
#[inline(always)]
pub fn off_cpu_state(preempt: bool, prev_state: u32) -> u32 {
    if preempt || prev_state == 0 {
        TS_RUNQ
    } else if prev_state & TASK_UNINTERRUPTIBLE != 0 {
        TS_IO
    } else {
        TS_SLEEP
    }
}

/// Adds a thread's interval in progress (in `state` since `since`, on a CPU whose steal
/// counter read `steal_since` then; `off_kind` its wait) up to `now` to `a`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn accrue_into(
    a: &mut Acct,
    state: u32,
    since: u64,
    steal_since: &CpuSteal,
    off_kind: u32,
    now: u64,
    steal: CpuSteal,
) {
    let d = now.saturating_sub(since);
    if state == TS_RUNNING {
        let s = steal.since(steal_since, d);
        a.steal += s;
        a.oncpu += d - s;
    } else {
        a.add(state, d);
    }
    // `off_kind` is WAIT_OTHER unless the thread sleeps (switch_out sets it).
    a.add_wait(off_kind, d);
}

impl ThreadState {
    /// Accounting runs while the thread has any span open.
    #[inline(always)]
    pub fn active(&self) -> bool {
        self.depth > 0 || self.id_open > 0
    }

    /// Current totals, including the interval in progress. `steal`: this CPU's steal counter
    /// now, which splits an on-CPU stretch into the thread's runtime and the host's steal.
    #[inline(always)]
    pub fn acct_at(&self, now: u64, steal: CpuSteal) -> Acct {
        let mut a = self.acct;
        let (state, since, steal_since, off_kind) =
            (self.state, self.since_ns, self.steal_since, self.off_kind);
        accrue_into(&mut a, state, since, &steal_since, off_kind, now, steal);
        a
    }

    /// [`acct_at`](Self::acct_at) into `a`, which holds a copy of the thread's totals (in
    /// the eBPF code a per-CPU map slot, so the copy is not held in registers).
    #[inline(always)]
    pub fn acct_at_onto(&self, a: &mut Acct, now: u64, steal: CpuSteal) {
        let (state, since, steal_since, off_kind) =
            (self.state, self.since_ns, self.steal_since, self.off_kind);
        accrue_into(a, state, since, &steal_since, off_kind, now, steal);
    }

    /// `self.acct = self.acct_at(now, steal)`, in place: in the eBPF code the copy went
    /// through registers and 13 stack words, too many for the 512 bytes a call chain has on
    /// kernels before 6.13 or so.
    #[inline(always)]
    fn accrue(&mut self, now: u64, steal: CpuSteal) {
        let (state, since, steal_since, off_kind) =
            (self.state, self.since_ns, self.steal_since, self.off_kind);
        accrue_into(
            &mut self.acct,
            state,
            since,
            &steal_since,
            off_kind,
            now,
            steal,
        );
    }

    /// Closes the interval in progress and starts one in `state`.
    #[inline(always)]
    pub fn set_state(&mut self, now: u64, steal: CpuSteal, state: u32) {
        self.accrue(now, steal);
        self.since_ns = now;
        self.state = state;
        // Only switch_out starts a wait; any other change (a wakeup, a switch-in) ends it.
        self.off_kind = WAIT_OTHER;
    }

    /// A span opens on this thread. Accounting only runs while a span is open, so when none
    /// was, restart the clock: the thread is running, and whoever woke it earlier is stale.
    #[inline(always)]
    pub fn resume_accounting(&mut self, now: u64, steal: CpuSteal) {
        if !self.active() {
            self.state = TS_RUNNING;
            self.off_kind = WAIT_OTHER;
            self.since_ns = now;
            self.steal_since = steal;
            self.last_waker_pid = 0;
        }
    }

    /// The thread leaves the CPU (sched_switch, as `prev`): an off-CPU interval starts.
    #[inline(always)]
    ///
    /// `class` (`SC_*`): the syscall the thread sleeps in, which names what it waits on.
    pub fn switch_out(
        &mut self,
        now: u64,
        steal: CpuSteal,
        preempt: bool,
        prev_state: u32,
        class: u8,
    ) {
        let state = off_cpu_state(preempt, prev_state);
        self.set_state(now, steal, state);
        self.off_kind = wait_kind(class, state);
        self.sleep_kind = self.off_kind;
        self.off_state = state;
        self.acct.count_wait(self.off_kind);
        self.off_start_ns = now;
        self.last_waker_pid = 0;
        zero_comm(&mut self.last_waker_comm);
    }

    /// The thread is woken by the timer interrupt: a poll (`epoll_wait`, `poll`, `select`)
    /// that its own timeout ended waited on a timer, not on the network. Event loops and
    /// PostgreSQL's `pg_sleep` sleep this way; counting it as `net` named the network where
    /// nothing but time was awaited. Called before the sleep is closed, so its time goes to the
    /// timer too; the wait counted at the switch-out moves with it.
    ///
    /// An interruptible sleep of no known kind that the timer ends waited on time too: a poll
    /// of a pipe or a tty (no longer `net`, see [`refine_class`]) that timed out, a `pause`
    /// cut short by an alarm.
    #[inline(always)]
    pub fn timed_out(&mut self) {
        let other = self.off_kind == WAIT_OTHER && self.off_state == TS_SLEEP;
        if self.off_kind != WAIT_NET && !other {
            return;
        }
        if self.off_kind == WAIT_NET {
            if let Some(x) = self.acct.waits.get_mut(WAIT_NET as usize - 1) {
                *x = x.wrapping_sub(1);
            }
        }
        self.off_kind = WAIT_TIMER;
        self.sleep_kind = WAIT_TIMER;
        self.acct.count_wait(WAIT_TIMER);
    }

    /// The thread gets the CPU back (sched_switch, as `next`). Each open frame remembers the
    /// longest off-CPU interval it saw and who ended it (the last waker).
    ///
    /// Returns the off-CPU interval it ends.
    #[inline(always)]
    pub fn switch_in(&mut self, now: u64, steal: CpuSteal) -> OffInterval {
        let off = self.closing_interval(now, 0);
        self.set_state(now, steal, TS_RUNNING);
        self.steal_since = steal;
        self.note_off_interval(now.saturating_sub(self.off_start_ns));
        off
    }

    /// The off-CPU interval in progress, as it ends with the thread back on CPU at `running`
    /// after `runq_tail` ns of run queue that the state does not show yet (a switch-in that
    /// [`ThreadState::catch_up_running`] repairs). Its wakeup is where the run-queue state
    /// began; with none seen, where the run queue tail began.
    #[inline(always)]
    pub fn closing_interval(&self, running: u64, runq_tail: u64) -> OffInterval {
        let woken = if self.state == TS_RUNQ {
            self.since_ns
        } else {
            running.saturating_sub(runq_tail)
        };
        OffInterval {
            slept_ns: self.off_start_ns,
            woken_ns: woken,
            running_ns: running,
            kind: self.sleep_kind,
            off_state: self.off_state,
        }
    }

    /// The thread is seen running (in a probe, or leaving the CPU) while its state says it is
    /// off CPU: the kernel switched it in without sched_switch reaching the hook (on 6.18,
    /// switches out of the idle task and some others never reach the tracepoint; ftrace misses
    /// them too). Until now that on-CPU time would have been filed as run queue or sleep. The
    /// kernel's own counters, `now_exec` (`se.sum_exec_runtime`) and `now_delay`
    /// (`sched_info.run_delay`), against their snapshot at the switch-out that began the
    /// interval, split it: run-queue wait is what `run_delay` grew by, and after a sleep the
    /// CPU time is what `sum_exec_runtime` grew by (in a probe it lags by up to a tick). Without
    /// the counters the interval keeps its state, as before; from now on the thread runs.
    ///
    /// Returns the off-CPU interval it ends, if the thread was off CPU.
    ///
    /// `note_waker` also updates each open frame's longest off-CPU interval: the scheduler hook
    /// does; the probe paths do not, because that loop over every frame, inlined into the
    /// uprobe program at each call site, is more than the verifier's budget allows at full depth (`MAX_DEPTH`)
    /// (the next switch-out and switch-in settle the waker anyway).
    #[inline(always)]
    ///
    /// `steal`: this CPU's steal counter now, where the thread's on-CPU stretch continues.
    pub fn catch_up_running(
        &mut self,
        now: u64,
        now_exec: Option<u64>,
        now_delay: Option<u64>,
        note_waker: bool,
        steal: CpuSteal,
    ) -> Option<OffInterval> {
        if self.state == TS_RUNNING {
            return None;
        }
        let d = now.saturating_sub(self.since_ns);
        let (mut oncpu, mut runq) = (0, 0);
        if let (1, Some(exec), Some(delay)) = (self.snap_ok, now_exec, now_delay) {
            let waited = delay.saturating_sub(self.delay_snap);
            if self.state == TS_RUNQ {
                runq = if waited < d { waited } else { d };
                oncpu = d - runq;
            } else {
                let ran = exec.saturating_sub(self.exec_snap);
                oncpu = if ran < d { ran } else { d };
                let rest = d - oncpu;
                runq = if waited < rest { waited } else { rest };
            }
        }
        let off = self.closing_interval(now.saturating_sub(oncpu), runq);
        // The interval up to the switch-in keeps its state; what the counters say ran, ran.
        // Not running until `now`: no on-CPU stretch, so no steal reading to split.
        self.accrue(now.saturating_sub(oncpu + runq), CpuSteal::UNKNOWN);
        self.acct.oncpu += oncpu;
        self.acct.runq += runq;
        if note_waker {
            self.note_off_interval(now.saturating_sub(self.off_start_ns).saturating_sub(oncpu));
        }
        self.since_ns = now;
        self.steal_since = steal;
        self.state = TS_RUNNING;
        self.off_kind = WAIT_OTHER;
        Some(off)
    }

    /// Remembers the kernel's counters as the thread leaves the CPU, for
    /// [`ThreadState::catch_up_running`].
    #[inline(always)]
    pub fn snap_counters(&mut self, exec: Option<u64>, delay: Option<u64>) {
        match (exec, delay) {
            (Some(e), Some(d)) => {
                self.exec_snap = e;
                self.delay_snap = d;
                self.snap_ok = 1;
            }
            _ => self.snap_ok = 0,
        }
    }

    /// Each open frame remembers the longest off-CPU interval it saw and who ended it.
    #[inline(always)]
    fn note_off_interval(&mut self, off: u64) {
        let depth = self.depth as usize;
        // The verifier needs a constant loop bound: iterate to MAX_DEPTH, stop at depth.
        let mut j = 0;
        while j < MAX_DEPTH {
            if j >= depth {
                break;
            }
            let f = &mut self.frames[j];
            if off > f.longest_off_ns {
                f.longest_off_ns = off;
                f.waker_pid = self.last_waker_pid;
                f.waker_tid = self.last_waker_tid;
                f.waker_comm = self.last_waker_comm;
            }
            j += 1;
        }
    }

    /// Whether a wakeup of this thread matters: it is accounted and asleep.
    #[inline(always)]
    pub fn woken_from_sleep(&self) -> bool {
        self.active() && (self.state == TS_SLEEP || self.state == TS_IO)
    }

    /// The frame an end of span `pair_id` closes: the innermost open frame of that name (frames
    /// above it never got their end), or None.
    #[inline(always)]
    pub fn find_open(&self, pair_id: u32) -> Option<usize> {
        self.find_open_at(pair_id, 0)
    }

    /// [`find_open`](Self::find_open) for an end that names the start's stack pointer (`sp`
    /// non-zero): the innermost frame of that name opened there.
    #[inline(always)]
    pub fn find_open_at(&self, pair_id: u32, sp: u64) -> Option<usize> {
        let found = self.find_open_raw(pair_id, sp);
        (found < MAX_DEPTH).then_some(found)
    }

    /// [`find_open`](Self::find_open) with `MAX_DEPTH` for None: no branch on the result,
    /// for eBPF code that must hide it from the verifier before testing it.
    #[inline(always)]
    pub fn find_open_raw(&self, pair_id: u32, sp: u64) -> usize {
        let depth = self.depth as usize;
        // A sentinel rather than an Option in the loop: one register per iteration in the
        // eBPF code instead of two.
        let mut found = MAX_DEPTH;
        // Bottom up, stopping at the depth: the cost follows the nesting, not MAX_DEPTH. (Top
        // down would stop sooner, but an index computed down from the map-held depth is one
        // the verifier cannot bound; this one counts up from a constant.) The last match is
        // the innermost open frame.
        let mut j = 0;
        while j < MAX_DEPTH {
            if j >= depth {
                break;
            }
            // `sp` 0: any frame of the name; else only the one opened at that stack pointer.
            let Some(f) = self.frames.get(j) else {
                break;
            };
            if f.pair_id == pair_id && (sp == 0 || f.sp == sp) {
                found = j;
            }
            j += 1;
        }
        found
    }

    /// Pops the frames on top that are already closed ([`PAIR_CLOSED`]): after an end, the
    /// tail-calling spans beneath it that ended at the same `ret`.
    #[inline(always)]
    pub fn pop_closed(&mut self) {
        let depth = self.depth as usize;
        // Bottom up from a constant, as in `find_open_raw`: the verifier bounds that index,
        // not one counted down from the map-held depth.
        let mut keep = 0;
        let mut j = 0;
        while j < MAX_DEPTH {
            if j >= depth {
                break;
            }
            if let Some(f) = self.frames.get(j) {
                if f.pair_id != PAIR_CLOSED {
                    keep = j + 1;
                }
            }
            j += 1;
        }
        self.depth = keep as u32;
    }

    /// A span start on this thread. Returns the index of the frame to fill, or None when the
    /// stack is full: then the start is dropped, and the thread remembers how far past the
    /// stack it is so the matching end is dropped too.
    #[inline(always)]
    pub fn push(&mut self) -> Option<usize> {
        let depth = self.depth as usize;
        // While `overflow` > 0 the depth is MAX_DEPTH anyway (ends pop the overflow first);
        // testing both keeps that true even for a state user space zeroed half-way.
        if depth >= MAX_DEPTH || self.overflow > 0 {
            self.overflow = self.overflow.saturating_add(1);
            return None;
        }
        self.depth = depth as u32 + 1;
        Some(depth)
    }

    /// A span end on this thread while it is past the stack: the end belongs to the innermost
    /// dropped start. Returns true when the end was consumed (and must be dropped).
    #[inline(always)]
    pub fn pop_overflow(&mut self) -> bool {
        if self.overflow > 0 {
            self.overflow -= 1;
            true
        } else {
            false
        }
    }
}
