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

/// Kinds of off-CPU wait, from the syscall the thread sleeps in (`SYSCALL_CLASS`): a futex
/// (a lock), the network or a poll, a timer (the nanosleep family), file I/O that put it
/// in uninterruptible sleep (the disk), and an uninterruptible sleep outside any syscall (a
/// page fault being served). `Acct::wait_ns[kind - 1]` and `Acct::waits[kind - 1]`.
pub const WAIT_LOCK: u32 = 1;

pub const WAIT_NET: u32 = 2;

pub const WAIT_TIMER: u32 = 3;

pub const WAIT_DISK: u32 = 4;

/// An uninterruptible sleep while not in a syscall: the thread faulted on a page that must be
/// read in (a major fault: a file's page from disk, a swap-in), or reclaimed memory for one.
pub const WAIT_FAULT: u32 = 5;

pub const WAIT_KINDS: usize = 5;

/// `ThreadState::off_kind` of an off-CPU interval of no known kind, or of a thread not off CPU
/// at all. Zero, the value of a fresh (zeroed) ThreadState. It has no slot of its own: "other"
/// is `sleep + io` less the kinds (kept out of `Acct` so that a frame stays small enough for a
/// ThreadState to fit its 16 KB allocation).
pub const WAIT_OTHER: u32 = 0;

/// Values of the `SYSCALL_CLASS` map, one per syscall number, filled by user space for the
/// machine's architecture.
pub const SC_NONE: u8 = 0;

pub const SC_LOCK: u8 = 1;

pub const SC_NET: u8 = 2;

pub const SC_TIMER: u8 = 3;

/// read/write/fsync and friends (first argument a file descriptor): the disk when the thread
/// sleeps uninterruptibly in them; when it sleeps interruptibly, the network if the file is a
/// socket, else "other" (a pipe, a tty). See [`refine_class`].
pub const SC_FILE: u8 = 4;

/// `poll`/`ppoll` (first argument the `struct pollfd` array): a wait on the network when the
/// first file polled is a socket, else "other" (a tty, a pipe: bash waiting in readline).
pub const SC_POLL: u8 = 6;

/// `select`/`pselect6` (second argument the read set): as [`SC_POLL`], for the lowest file
/// descriptor in the read set.
pub const SC_SELECT: u8 = 7;

/// Not in a syscall at all (the saved syscall number is -1): a thread that sleeps there
/// sleeps in a page fault (or, interruptibly, somewhere no syscall names). Not a value of the
/// `SYSCALL_CLASS` map: the hook reads it from the registers.
pub const SC_USER: u8 = 5;

/// Entries of `SYSCALL_CLASS`: above every syscall number of x86_64 and aarch64.
pub const SYSCALL_CLASS_LEN: u32 = 512;

/// The class of a wait in a syscall of class `class` once the file it waits on is known:
/// `socket` is Some(true) when it is a socket, Some(false) when it is another file (a pipe, a
/// tty, an eventfd), None when that could not be read. A poll or a read is a wait on the
/// network only when the file is a socket; unread, a poll keeps the network (what it waits on
/// most often) and a read stays a file's.
#[inline(always)]
pub fn refine_class(class: u8, socket: Option<bool>) -> u8 {
    match (class, socket) {
        (SC_POLL | SC_SELECT | SC_FILE, Some(true)) => SC_NET,
        (SC_POLL | SC_SELECT, Some(false)) => SC_NONE,
        (SC_POLL | SC_SELECT, None) => SC_NET,
        (c, _) => c,
    }
}

/// The kind of an off-CPU interval that began in state `off_state` (`TS_*`) inside a syscall
/// of class `class` (`SC_*`).
#[inline(always)]
pub fn wait_kind(class: u8, off_state: u32) -> u32 {
    if off_state != TS_SLEEP && off_state != TS_IO {
        return WAIT_OTHER;
    }
    // Each kind nests in one part of the split (lock, net and timer in sleep, disk and fault in
    // io), so that the parts' "other" remainders are never negative.
    match (class, off_state) {
        (SC_LOCK, TS_SLEEP) => WAIT_LOCK,
        (SC_NET, TS_SLEEP) => WAIT_NET,
        (SC_TIMER, TS_SLEEP) => WAIT_TIMER,
        (SC_FILE, TS_IO) => WAIT_DISK,
        (SC_USER, TS_IO) => WAIT_FAULT,
        _ => WAIT_OTHER,
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
