//! Types shared by the usdt-trace eBPF programs and user space.
//!
//! Everything here crosses the kernel/user boundary through BPF maps or the ring buffer, so every
//! type is `#[repr(C)]`, has no padding holes the verifier could complain about, and is plain old
//! data. User space gets `aya::Pod` impls behind the `user` feature; the eBPF side builds this
//! crate `no_std` without features.
//!
//! The data flow is one-way:
//! 1. user space parses the probe sites and writes one [`SiteSpec`] per site into the `SITES`
//!    array; the index is the BPF cookie of every uprobe link attached at that site;
//! 2. the generic uprobe program reads the cookie, decodes the arguments the spec describes,
//!    and either emits an [`EventRecord`], pushes a [`Frame`] (span start) or pops one and emits
//!    a [`SpanRecord`] (span end);
//! 3. the scheduler hooks keep per-thread [`Acct`] counters only while the thread has a span open,
//!    so each span's wall time can be split into on-CPU, run-queue, sleep and I/O time.
#![no_std]

pub mod agg;
pub mod maps;
pub mod regs;
pub mod retemu;

// One file per concern; everything is re-exported here, so users name types from the root.
mod acct;
mod exec;
mod filter;
mod hist;
mod id;
mod poll;
mod record;
mod spec;
mod thread;
mod waits;
pub use acct::*;
pub use exec::*;
pub use filter::*;
pub use hist::*;
pub use id::*;
pub use poll::*;
pub use record::*;
pub use spec::*;
pub use thread::*;
pub use waits::*;

/// At most this many arguments per probe (the SDT format allows 12).
pub const MAX_ARGS: usize = 12;

/// Strings one record carries (`--str`): a span's start and end strings together, or an
/// event's. Each has a slot of its own in [`StrSet`].
pub const MAX_STRS: usize = 4;

/// The largest `--str-max`: bytes kept of one string.
pub const STR_MAX_CAP: usize = 1024;

/// `--str-max` when none is given.
pub const STR_MAX_DEFAULT: usize = 256;

/// Bytes of one string slot: `STR_MAX_CAP` kept, plus room to read one byte more (and the
/// helper's NUL), which is how a cut string is told from one exactly `--str-max` long.
pub const STR_SLOT: usize = STR_MAX_CAP + 8;

#[cfg(feature = "user")]
mod pod {
    use super::*;
    /// Marks plain-old-data map types for aya.
    macro_rules! pod {
        ($($t:ty),* $(,)?) => {
            $(
                // SAFETY: each type named here is `#[repr(C)]`, `Copy`, has no padding the
                // kernel could leave uninitialised (explicit `_pad` fields), and is valid for
                // every bit pattern (integers and arrays of them only).
                unsafe impl aya::Pod for $t {}
            )*
        };
    }
    pod!(
        ArgDesc,
        SiteSpec,
        Config,
        FilterProg,
        IdKey,
        Hist,
        WaitSums,
        crate::agg::AggConfig,
        crate::agg::ByKey,
        crate::agg::NumKey,
        Acct,
        StackRecord,
        StackCopyRecord,
        Frame,
        IdFrame,
        IdSlot,
        PollAcct,
        StrSet,
        ThreadState,
        FileKey,
        ExecRecord,
        ExecConfig,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No steal reading: the accounting of kernels without it (and of most tests here).
    const NO_STEAL: CpuSteal = CpuSteal::UNKNOWN;

    fn steal(ns: u64, cpu: u32) -> CpuSteal {
        CpuSteal { ns, cpu, _pad: 0 }
    }

    #[test]
    fn a_poll_is_net_only_on_a_socket() {
        assert_eq!(refine_class(SC_POLL, Some(true)), SC_NET);
        assert_eq!(refine_class(SC_SELECT, Some(false)), SC_NONE);
        assert_eq!(refine_class(SC_FILE, Some(true)), SC_NET);
        assert_eq!(refine_class(SC_FILE, Some(false)), SC_FILE);
        // Unread: a poll keeps the network, a read its file class (the disk when in D state).
        assert_eq!(refine_class(SC_POLL, None), SC_NET);
        assert_eq!(refine_class(SC_FILE, None), SC_FILE);
        assert_eq!(refine_class(SC_LOCK, Some(true)), SC_LOCK);
        assert_eq!(wait_kind(SC_NONE, TS_SLEEP), WAIT_OTHER);
    }

    #[test]
    fn a_timed_out_poll_of_a_pipe_waited_on_the_timer() {
        let mut st = thread();
        st.resume_accounting(0, NO_STEAL);
        st.depth = 1;
        // A poll of a pipe: "other" when it sleeps; its timeout makes it a timer wait.
        st.switch_out(10, NO_STEAL, false, 1, SC_NONE);
        st.timed_out();
        st.set_state(30, NO_STEAL, TS_RUNQ);
        st.switch_in(31, NO_STEAL);
        let a = st.acct_at(31, NO_STEAL);
        assert_eq!(a.wait_ns[WAIT_TIMER as usize - 1], 20);
        assert_eq!(a.waits[WAIT_TIMER as usize - 1], 1);
        assert_eq!(a.waits[WAIT_NET as usize - 1], 0);
        // An uninterruptible "other" sleep is not a poll: the timer does not rename it.
        st.switch_out(40, NO_STEAL, false, TASK_UNINTERRUPTIBLE, SC_NONE);
        st.timed_out();
        assert_eq!(st.off_kind, WAIT_OTHER);
    }

    #[test]
    fn steal_while_switched_in_is_its_own_part_not_on_cpu() {
        let mut st = thread();
        st.resume_accounting(0, steal(1_000, 1));
        st.depth = 1;
        // In a probe at 400: the run queue saw 100 ns stolen so far.
        let a = st.acct_at(400, steal(1_100, 1));
        assert_eq!((a.oncpu, a.steal), (300, 100));
        // Off at 1000 with 250 stolen in all; the sleep has no steal.
        st.switch_out(1_000, steal(1_250, 1), false, 1, SC_NET);
        st.switch_in(1_500, steal(1_400, 0));
        // On CPU 0 from 1500: 50 ns stolen there by 2000.
        let a = st.acct_at(2_000, steal(1_450, 0));
        assert_eq!((a.oncpu, a.steal, a.sleep), (750 + 450, 250 + 50, 500));
        assert_eq!(a.oncpu + a.steal + a.sleep, 2_000);
    }

    #[test]
    fn steal_from_another_cpu_or_past_the_stretch_is_not_taken() {
        let mut st = thread();
        st.resume_accounting(0, steal(5_000, 1));
        st.depth = 1;
        // Another CPU's counter is unrelated: none of it is steal.
        let a = st.acct_at(100, steal(9_000, 0));
        assert_eq!((a.oncpu, a.steal), (100, 0));
        // More steal than time elapsed (a torn read of the run queue's clocks): bounded.
        let a = st.acct_at(100, steal(5_500, 1));
        assert_eq!((a.oncpu, a.steal), (0, 100));
        // A counter that went back (the same tear, the other way): none.
        let a = st.acct_at(100, steal(4_000, 1));
        assert_eq!((a.oncpu, a.steal), (100, 0));
        // No reading at all: all of it on CPU, as before the steal part existed.
        st.depth = 0;
        st.resume_accounting(0, NO_STEAL);
        let a = st.acct_at(100, NO_STEAL);
        assert_eq!((a.oncpu, a.steal), (100, 0));
    }

    #[test]
    fn a_spans_steal_is_the_difference_of_two_snapshots() {
        let mut st = thread();
        st.resume_accounting(0, steal(0, 3));
        st.depth = 1;
        let start = st.acct_at(100, steal(10, 3));
        st.switch_out(500, steal(60, 3), true, 0, SC_NONE);
        st.switch_in(700, steal(60, 3));
        let d = st.acct_at(900, steal(80, 3)).since(&start);
        // 100..500 on CPU with 50 stolen, 200 in the run queue, 700..900 with 20 stolen.
        assert_eq!((d.oncpu, d.steal, d.runq), (350 + 180, 70, 200));
    }

    #[test]
    fn log_linear_buckets_hold_their_values_within_a_sixteenth() {
        assert_eq!(hist_bucket(0), 0);
        assert_eq!(hist_bucket(7), 7);
        assert_eq!(hist_bucket(8), 8);
        assert_eq!(hist_bucket(9), 9);
        assert_eq!(hist_bucket(16), 16);
        assert_eq!(hist_bucket(u64::MAX), HIST_BUCKETS - 1);
        let mut v = 1u64;
        while v < u64::MAX / 3 {
            for x in [v, v + 1, v * 3 / 2, v * 2 - 1] {
                let (lo, hi) = hist_bucket_range(hist_bucket(x));
                assert!(lo <= x && x < hi, "{x} in [{lo}, {hi})");
                let mid = lo + (hi - lo) / 2;
                assert!(
                    x.abs_diff(mid) as f64 <= x as f64 / 16.0 + 0.5,
                    "{x}: {mid}"
                );
            }
            v = v * 2 + 1;
        }
        // Buckets tile the whole range.
        for b in 1..HIST_BUCKETS {
            assert_eq!(hist_bucket_range(b - 1).1, hist_bucket_range(b).0, "{b}");
        }
    }

    #[test]
    fn log2_buckets() {
        assert_eq!(log2_bucket(0), 0);
        assert_eq!(log2_bucket(1), 1);
        assert_eq!(log2_bucket(2), 2);
        assert_eq!(log2_bucket(3), 2);
        assert_eq!(log2_bucket(1024), 11);
        assert_eq!(log2_bucket(u64::MAX), LOG2_BUCKETS - 1);
    }

    fn thread() -> ThreadState {
        // SAFETY: ThreadState is integers and arrays of integers: all zeroes is a valid value
        // (and the state the kernel side starts a thread in, from ZERO_THREAD).
        unsafe { core::mem::zeroed() }
    }

    fn push(st: &mut ThreadState, pair_id: u32) {
        let d = st.depth as usize;
        st.frames[d].pair_id = pair_id;
        st.depth += 1;
    }

    #[test]
    fn acct_adds_to_the_state_it_was_in() {
        let mut a = Acct::default();
        a.add(TS_RUNNING, 1);
        a.add(TS_RUNQ, 2);
        a.add(TS_SLEEP, 3);
        a.add(TS_IO, 4);
        // Unknown states count as on CPU, like the kernel side always did.
        a.add(99, 10);
        let want = Acct {
            oncpu: 11,
            runq: 2,
            sleep: 3,
            io: 4,
            ..Acct::default()
        };
        assert_eq!(a, want);
    }

    #[test]
    fn sleeps_are_split_by_the_syscall_they_wait_in() {
        let mut st = thread();
        st.depth = 1;
        st.resume_accounting(0, NO_STEAL);
        st.depth = 1;
        // 100 ns in a futex, 50 ns running, 30 ns in pread on a disk (D state), 20 ns in
        // nanosleep, 10 ns preempted in a futex call (run queue: no wait), 40 ns in read on a
        // pipe (interruptible: other).
        st.switch_out(0, NO_STEAL, false, 1, SC_LOCK);
        st.set_state(100, NO_STEAL, TS_RUNQ);
        st.switch_in(100, NO_STEAL);
        st.switch_out(150, NO_STEAL, false, TASK_UNINTERRUPTIBLE, SC_FILE);
        st.switch_in(180, NO_STEAL);
        st.switch_out(180, NO_STEAL, false, 1, SC_TIMER);
        st.switch_in(200, NO_STEAL);
        st.switch_out(200, NO_STEAL, true, 1, SC_LOCK);
        st.switch_in(210, NO_STEAL);
        st.switch_out(210, NO_STEAL, false, 1, SC_FILE);
        let a = st.acct_at(250, NO_STEAL);
        assert_eq!((a.oncpu, a.runq, a.sleep, a.io), (50, 10, 160, 30));
        assert_eq!(a.wait_ns, [100, 0, 20, 30, 0]);
        assert_eq!(a.waits, [1, 0, 1, 1, 0]);
        // A span that began after the futex wait sees only its own waits.
        let start = {
            let mut s = st;
            s.switch_in(250, NO_STEAL);
            s.acct_at(250, NO_STEAL)
        };
        st.switch_in(250, NO_STEAL);
        st.switch_out(260, NO_STEAL, false, 1, SC_NET);
        st.switch_in(300, NO_STEAL);
        let d = st.acct_at(300, NO_STEAL).since(&start);
        assert_eq!(d.wait_ns, [0, 40, 0, 0, 0]);
        assert_eq!(d.waits, [0, 1, 0, 0, 0]);
        assert_eq!(d.sleep, 40);
    }

    #[test]
    fn an_uninterruptible_sleep_outside_any_syscall_is_a_page_fault() {
        // Not in a syscall (orig_ax -1): D state is a fault being served; an interruptible
        // sleep or a preemption there is no fault.
        assert_eq!(wait_kind(SC_USER, TS_IO), WAIT_FAULT);
        assert_eq!(wait_kind(SC_USER, TS_SLEEP), WAIT_OTHER);
        assert_eq!(wait_kind(SC_USER, TS_RUNQ), WAIT_OTHER);
        // In a syscall of no known class (or its number unreadable), D state stays other,
        // and file I/O stays the disk.
        assert_eq!(wait_kind(SC_NONE, TS_IO), WAIT_OTHER);
        assert_eq!(wait_kind(SC_FILE, TS_IO), WAIT_DISK);
        // Two faults of 30 and 50 ns, a disk read of 20: both kinds nest in io.
        let mut st = thread();
        st.depth = 1;
        st.resume_accounting(0, NO_STEAL);
        st.depth = 1;
        st.switch_out(10, NO_STEAL, false, TASK_UNINTERRUPTIBLE, SC_USER);
        st.switch_in(40, NO_STEAL);
        st.switch_out(50, NO_STEAL, false, TASK_UNINTERRUPTIBLE, SC_FILE);
        st.switch_in(70, NO_STEAL);
        st.switch_out(80, NO_STEAL, false, TASK_UNINTERRUPTIBLE | 0x100, SC_USER);
        let a = st.acct_at(130, NO_STEAL);
        assert_eq!(a.io, 100);
        assert_eq!(a.wait_ns, [0, 0, 0, 20, 80]);
        assert_eq!(a.waits, [0, 0, 0, 1, 2]);
        assert!(a.wait_ns[WAIT_DISK as usize - 1] + a.wait_ns[WAIT_FAULT as usize - 1] <= a.io);
    }

    #[test]
    fn a_poll_its_timeout_ended_is_a_timer_wait_and_one_data_ended_stays_net() {
        let mut st = thread();
        st.depth = 1;
        st.resume_accounting(0, NO_STEAL);
        st.depth = 1;
        // epoll_wait with a 100 ns timeout that expires: the timer interrupt wakes it.
        st.switch_out(0, NO_STEAL, false, 1, SC_NET);
        st.timed_out();
        st.set_state(100, NO_STEAL, TS_RUNQ);
        st.switch_in(110, NO_STEAL);
        // epoll_wait woken by data (a socket's softirq, or the sending thread).
        st.switch_out(150, NO_STEAL, false, 1, SC_NET);
        st.set_state(190, NO_STEAL, TS_RUNQ);
        st.switch_in(190, NO_STEAL);
        // A futex wait that a timer ends (a timed lock) stays a lock wait.
        st.switch_out(200, NO_STEAL, false, 1, SC_LOCK);
        st.timed_out();
        st.set_state(230, NO_STEAL, TS_RUNQ);
        st.switch_in(230, NO_STEAL);
        let a = st.acct_at(230, NO_STEAL);
        assert_eq!(a.wait_ns, [30, 40, 100, 0, 0]);
        assert_eq!(a.waits, [1, 1, 1, 0, 0]);
        assert_eq!(a.sleep, 170);
    }

    /// The intervals the hooks close (what `CFG_WAITS` sends) add up, part by part, to what
    /// the accounting filed: the sleep part of each to its kind, the woken part and every
    /// preemption to the run queue, also across a switch-in the hooks never saw.
    #[test]
    fn off_cpu_intervals_add_up_to_the_split_kind_by_kind() {
        let mut st = thread();
        st.depth = 1;
        st.resume_accounting(0, NO_STEAL);
        st.snap_counters(Some(0), Some(0));
        let mut ivs = [OffInterval::default(); 6];
        let mut n = 0;
        let mut push = |iv: OffInterval| {
            ivs[n] = iv;
            n += 1;
        };
        // A futex wait 0..100, woken, run queue until 130.
        st.switch_out(0, NO_STEAL, false, 1, SC_LOCK);
        st.set_state(100, NO_STEAL, TS_RUNQ);
        push(st.switch_in(130, NO_STEAL));
        // Preempted 150..170.
        st.switch_out(150, NO_STEAL, true, 0, SC_NONE);
        push(st.switch_in(170, NO_STEAL));
        // A disk read 200..260 whose wakeup the hooks did not see.
        st.switch_out(200, NO_STEAL, false, TASK_UNINTERRUPTIBLE, SC_FILE);
        push(st.switch_in(260, NO_STEAL));
        // A poll its timeout ended 300..340, then 5 ns of run queue.
        st.switch_out(300, NO_STEAL, false, 1, SC_NET);
        st.timed_out();
        st.set_state(340, NO_STEAL, TS_RUNQ);
        push(st.switch_in(345, NO_STEAL));
        // A nanosleep 400.., its switch-in never seen: seen running at 500 with 20 ns of CPU
        // and 30 ns of run queue since, so asleep until 450, runnable until 480.
        st.switch_out(400, NO_STEAL, false, 1, SC_TIMER);
        push(
            st.catch_up_running(500, Some(20), Some(30), true, NO_STEAL)
                .unwrap(),
        );
        // A pipe read (other) from 520, woken at 560, switch-in never seen: seen running at
        // 600 with 10 ns more of run-queue wait, so runnable until 570.
        st.snap_counters(Some(20), Some(30));
        st.switch_out(520, NO_STEAL, false, 1, SC_FILE);
        st.set_state(560, NO_STEAL, TS_RUNQ);
        push(
            st.catch_up_running(600, Some(30), Some(40), false, NO_STEAL)
                .unwrap(),
        );
        assert_eq!(
            st.catch_up_running(610, None, None, false, NO_STEAL),
            None,
            "running"
        );
        assert_eq!(n, 6);
        let iv = |s, w, r, kind, off_state| OffInterval {
            slept_ns: s,
            woken_ns: w,
            running_ns: r,
            kind,
            off_state,
        };
        assert_eq!(
            ivs,
            [
                iv(0, 100, 130, WAIT_LOCK, TS_SLEEP),
                iv(150, 150, 170, WAIT_OTHER, TS_RUNQ),
                iv(200, 260, 260, WAIT_DISK, TS_IO),
                iv(300, 340, 345, WAIT_TIMER, TS_SLEEP),
                iv(400, 450, 480, WAIT_TIMER, TS_SLEEP),
                iv(520, 560, 570, WAIT_OTHER, TS_SLEEP),
            ]
        );
        let a = st.acct_at(610, NO_STEAL);
        let mut kinds = [0u64; WAIT_KINDS];
        let (mut runq, mut off) = (0, 0);
        for i in &ivs {
            if let Some(k) = kinds.get_mut((i.kind as usize).wrapping_sub(1)) {
                *k += i.woken_ns - i.slept_ns;
            }
            runq += i.running_ns - i.woken_ns;
            off += i.running_ns - i.slept_ns;
        }
        assert_eq!(kinds, a.wait_ns);
        assert_eq!(runq, a.runq);
        assert_eq!(off, a.runq + a.sleep + a.io);
    }

    #[test]
    fn a_missed_switch_in_keeps_only_the_slept_part_as_a_wait() {
        let mut st = thread();
        st.depth = 1;
        st.resume_accounting(0, NO_STEAL);
        st.snap_counters(Some(0), Some(0));
        st.switch_out(0, NO_STEAL, false, 1, SC_LOCK);
        // Seen running at 100 with 30 ns of CPU since: the futex wait was 70 ns.
        st.catch_up_running(100, Some(30), Some(0), false, NO_STEAL);
        let a = st.acct_at(100, NO_STEAL);
        assert_eq!((a.oncpu, a.sleep), (30, 70));
        assert_eq!(a.wait_ns[WAIT_LOCK as usize - 1], 70);
        // Running now: nothing more accrues to the lock.
        assert_eq!(
            st.acct_at(150, NO_STEAL).wait_ns[WAIT_LOCK as usize - 1],
            70
        );
    }

    #[test]
    fn acct_since_saturates() {
        let end = Acct {
            oncpu: 10,
            runq: 5,
            sleep: 0,
            io: 7,
            ..Acct::default()
        };
        let start = Acct {
            oncpu: 4,
            runq: 6,
            sleep: 0,
            io: 7,
            ..Acct::default()
        };
        let d = end.since(&start);
        assert_eq!((d.oncpu, d.runq, d.sleep, d.io), (6, 0, 0, 0));
    }

    #[test]
    fn off_cpu_states() {
        assert_eq!(
            off_cpu_state(true, 1),
            TS_RUNQ,
            "preempted while sleeping-to-be"
        );
        assert_eq!(off_cpu_state(false, 0), TS_RUNQ, "yielded while runnable");
        assert_eq!(off_cpu_state(false, TASK_UNINTERRUPTIBLE), TS_IO);
        assert_eq!(off_cpu_state(false, TASK_UNINTERRUPTIBLE | 0x100), TS_IO);
        assert_eq!(off_cpu_state(false, 1), TS_SLEEP);
    }

    #[test]
    fn accounting_follows_state_changes() {
        let mut st = thread();
        push(&mut st, 0);
        st.resume_accounting(100, NO_STEAL);
        // Already active: a second span must not restart the clock.
        st.since_ns = 100;
        st.resume_accounting(150, NO_STEAL);
        assert_eq!(st.since_ns, 100);
        st.switch_out(130, NO_STEAL, false, 1, SC_NONE);
        assert_eq!(st.state, TS_SLEEP);
        assert_eq!(st.acct.oncpu, 30);
        st.set_state(170, NO_STEAL, TS_RUNQ);
        st.switch_in(175, NO_STEAL);
        assert_eq!(st.state, TS_RUNNING);
        let a = st.acct_at(180, NO_STEAL);
        let want = Acct {
            oncpu: 35,
            runq: 5,
            sleep: 40,
            io: 0,
            ..Acct::default()
        };
        assert_eq!(a, want);
        // A clock that went backwards adds nothing rather than wrapping.
        assert_eq!(st.acct_at(0, NO_STEAL), st.acct);
    }

    #[test]
    fn resume_restarts_an_idle_thread() {
        let mut st = thread();
        st.state = TS_SLEEP;
        st.since_ns = 5;
        st.last_waker_pid = 9;
        st.resume_accounting(50, NO_STEAL);
        assert_eq!(
            (st.state, st.since_ns, st.last_waker_pid),
            (TS_RUNNING, 50, 0)
        );
    }

    #[test]
    fn longest_off_cpu_interval_keeps_its_waker() {
        let mut st = thread();
        push(&mut st, 0);
        push(&mut st, 1);
        st.switch_out(100, NO_STEAL, false, TASK_UNINTERRUPTIBLE, SC_NONE);
        assert_eq!(st.state, TS_IO);
        st.last_waker_pid = 7;
        st.last_waker_tid = 8;
        st.last_waker_comm[0] = b'w';
        st.switch_in(400, NO_STEAL);
        for f in &st.frames[..2] {
            assert_eq!((f.longest_off_ns, f.waker_pid, f.waker_tid), (300, 7, 8));
            assert_eq!(f.waker_comm[0], b'w');
        }
        // Frames above the depth are not open: untouched.
        assert_eq!(st.frames[2].longest_off_ns, 0);
        // switch_out forgets the waker; a shorter interval keeps the longer one's.
        st.switch_out(500, NO_STEAL, true, 1, SC_NONE);
        assert_eq!((st.last_waker_pid, st.last_waker_comm[0]), (0, 0));
        st.last_waker_pid = 70;
        st.switch_in(550, NO_STEAL);
        assert_eq!(
            (st.frames[0].longest_off_ns, st.frames[0].waker_pid),
            (300, 7)
        );
        assert_eq!(st.acct.io, 300);
        assert_eq!(st.acct.runq, 50);
    }

    #[test]
    fn a_switch_in_never_reported_is_split_by_the_kernels_counters() {
        // Preempted at t=1000 with 5000 ns of CPU and 200 ns of run-queue wait so far.
        let mut st = thread();
        st.depth = 1;
        st.snap_counters(Some(5_000), Some(200));
        st.switch_out(1_000, NO_STEAL, true, 0, SC_NONE);
        assert_eq!(st.state, TS_RUNQ);
        // Seen running at t=11000: the kernel says it waited 3000 ns more, so it ran 7000.
        st.catch_up_running(11_000, Some(12_000), Some(3_200), true, NO_STEAL);
        assert_eq!(st.state, TS_RUNNING);
        assert_eq!(st.since_ns, 11_000);
        let a = st.acct_at(11_000, NO_STEAL);
        // 1000 ns running before the switch-out, then 7000 of the 10000 off.
        assert_eq!((a.oncpu, a.runq), (8_000, 3_000));
        // Asleep, then seen running: CPU time is what sum_exec_runtime grew by.
        st.snap_counters(Some(12_000), Some(3_200));
        st.switch_out(11_000, NO_STEAL, false, 1, SC_NONE);
        assert_eq!(st.state, TS_SLEEP);
        st.catch_up_running(21_000, Some(14_000), Some(3_700), true, NO_STEAL);
        let b = st.acct_at(21_000, NO_STEAL).since(&a);
        assert_eq!((b.oncpu, b.runq, b.sleep), (2_000, 500, 7_500));
        // Without counters the interval keeps its state, and the thread runs from now on.
        st.snap_counters(None, None);
        let at_switch = st.acct_at(21_000, NO_STEAL);
        st.switch_out(21_000, NO_STEAL, true, 0, SC_NONE);
        st.catch_up_running(22_000, Some(1), Some(1), true, NO_STEAL);
        let c = st.acct_at(22_000, NO_STEAL).since(&at_switch);
        assert_eq!(st.state, TS_RUNNING);
        assert_eq!(c.runq, 1_000);
        // Already running: nothing to repair.
        let before = st.acct_at(23_000, NO_STEAL);
        st.catch_up_running(23_000, Some(9), Some(9), true, NO_STEAL);
        assert_eq!(st.acct_at(23_000, NO_STEAL), before);
    }

    #[test]
    fn function_ends_pair_by_stack_pointer_and_closed_frames_are_popped() {
        let mut st = thread();
        // f (pair 3) entered at sp 0x1000 left by longjmp; f entered again at 0x1000 later
        // is a different call at the same place: the end closes the innermost one.
        for (pair, sp) in [(3, 0x2000), (3, 0x1000), (5, 0x0f00), (3, 0x1000)] {
            let d = st.push().unwrap();
            st.frames[d].pair_id = pair;
            st.frames[d].sp = sp;
        }
        assert_eq!(
            st.find_open_at(3, 0x2000),
            Some(0),
            "the outer call, not the innermost f"
        );
        assert_eq!(st.find_open_at(3, 0x1000), Some(3));
        assert_eq!(st.find_open_at(3, 0x1234), None);
        assert_eq!(
            st.find_open_at(3, 0),
            Some(3),
            "0: any frame (a note's end)"
        );
        // A tail caller closed under its open callee: the callee's end pops both.
        st.frames[2].pair_id = PAIR_CLOSED;
        st.depth = 3;
        st.pop_closed();
        assert_eq!(st.depth, 2);
        st.frames[1].pair_id = PAIR_CLOSED;
        st.pop_closed();
        assert_eq!(st.depth, 1);
        st.pop_closed();
        assert_eq!(st.depth, 1, "an open frame stays");
    }

    #[test]
    fn woken_only_when_accounted_and_asleep() {
        let mut st = thread();
        st.state = TS_SLEEP;
        assert!(!st.woken_from_sleep(), "no span open");
        st.id_open = 1;
        assert!(st.woken_from_sleep());
        st.state = TS_IO;
        assert!(st.woken_from_sleep());
        st.state = TS_RUNQ;
        assert!(!st.woken_from_sleep());
    }

    #[test]
    fn an_end_closes_the_innermost_open_frame_of_its_name() {
        let mut st = thread();
        assert_eq!(st.find_open(0), None);
        push(&mut st, 3);
        push(&mut st, 5);
        push(&mut st, 3);
        push(&mut st, 8);
        assert_eq!(st.find_open(3), Some(2));
        assert_eq!(st.find_open(5), Some(1));
        assert_eq!(st.find_open(9), None);
        // A frame above the depth is closed already.
        st.depth = 2;
        assert_eq!(st.find_open(3), Some(0));
        assert_eq!(st.find_open(8), None);
        st.depth = MAX_DEPTH as u32;
        st.frames[MAX_DEPTH - 1].pair_id = 42;
        assert_eq!(st.find_open(42), Some(MAX_DEPTH - 1));
    }

    /// What the eBPF side does with a start and an end, on the pure state: an end first
    /// consumes the overflow, then closes the innermost open frame of its name.
    fn start(st: &mut ThreadState, pair_id: u32) -> bool {
        match st.push() {
            Some(d) => {
                st.frames[d].pair_id = pair_id;
                true
            }
            None => false,
        }
    }

    fn end(st: &mut ThreadState, pair_id: u32) -> Option<usize> {
        if st.pop_overflow() {
            return None;
        }
        let found = st.find_open(pair_id)?;
        st.depth = found as u32;
        Some(found)
    }

    #[test]
    fn recursion_past_the_stack_never_mispairs() {
        let mut st = thread();
        let deep = MAX_DEPTH + 16;
        let mut pushed = 0;
        for _ in 0..deep {
            pushed += start(&mut st, 7) as usize;
        }
        assert_eq!(pushed, MAX_DEPTH);
        assert_eq!((st.depth as usize, st.overflow), (MAX_DEPTH, 16));
        // The 16 innermost ends are dropped; then each end closes exactly its own frame,
        // innermost first.
        for i in 0..deep {
            let want = i.checked_sub(16).map(|k| MAX_DEPTH - 1 - k);
            assert_eq!(end(&mut st, 7), want, "end {i}");
        }
        assert_eq!((st.depth, st.overflow), (0, 0));
        assert!(!st.active());
        // An extra end is unmatched, not a depth drop.
        assert_eq!(end(&mut st, 7), None);
        assert_eq!(st.overflow, 0);
    }

    #[test]
    fn a_start_inside_a_dropped_one_is_dropped_too() {
        let mut st = thread();
        for _ in 0..MAX_DEPTH {
            assert!(start(&mut st, 1));
        }
        assert!(!start(&mut st, 2));
        // Even after a user-space reset of the depth, the overflow keeps the stack closed.
        st.depth = 3;
        assert!(!start(&mut st, 3));
        assert_eq!(st.overflow, 2);
    }

    #[test]
    fn zero_parts_skipped_by_the_kernel_are_filled_back() {
        // Three split spans: (oncpu, runq, sleep, io) = (100, 0, 0, 0), (50, 20, 0, 0),
        // (0, 0, 900, 0); the kernel counted on-CPU for all three, the rest only when not zero.
        let mut comps = [Hist::default(); HIST_COMPONENTS];
        for v in [100, 50, 0] {
            comps[HIST_ONCPU].add(v);
        }
        comps[HIST_RUNQ].add(20);
        comps[HIST_SLEEP].add(900);
        let mut full = [Hist::default(); HIST_COMPONENTS];
        for (on, rq, sl, io) in [(100, 0, 0, 0), (50, 20, 0, 0), (0, 0, 900, 0)] {
            full[HIST_ONCPU].add(on);
            full[HIST_RUNQ].add(rq);
            full[HIST_SLEEP].add(sl);
            full[HIST_IO].add(io);
        }
        fill_zero_parts(&mut comps);
        for c in [HIST_ONCPU, HIST_RUNQ, HIST_SLEEP, HIST_IO] {
            assert_eq!(comps[c].buckets, full[c].buckets, "component {c}");
            assert_eq!(
                (comps[c].count, comps[c].sum, comps[c].max),
                (3, full[c].sum, full[c].max)
            );
        }
        // No split span: nothing to fill.
        let mut none = [Hist::default(); HIST_COMPONENTS];
        fill_zero_parts(&mut none);
        assert!(none.iter().all(|h| h.count == 0));
    }

    #[test]
    fn task_slots_spread_slab_spaced_task_pointers() {
        // task_struct objects on this kind of kernel: ~11 KB apart in a slab, 32 KB slabs.
        let base = 0xffff_8880_0400_0000u64;
        for stride in [0x2c40u64, 0x2d00, 0x4000, 0x8000] {
            let mut slots = [0u32; 1000];
            for (i, s) in slots.iter_mut().enumerate() {
                *s = task_slot(base + i as u64 * stride);
            }
            assert!(slots.iter().all(|&s| s < TASK_SLOTS));
            slots.sort_unstable();
            let distinct = 1 + slots.windows(2).filter(|w| w[0] != w[1]).count();
            assert!(distinct >= 960, "stride {stride:#x}: {distinct} distinct");
        }
    }

    #[test]
    fn find_open_at_full_depth() {
        let mut st = thread();
        for i in 0..MAX_DEPTH as u32 {
            assert!(start(&mut st, i));
        }
        assert_eq!(st.find_open(0), Some(0));
        assert_eq!(st.find_open(MAX_DEPTH as u32 - 1), Some(MAX_DEPTH - 1));
        assert_eq!(st.find_open(MAX_DEPTH as u32), None);
    }

    #[test]
    fn thread_state_size_is_known() {
        // The memory figures in docs/reference.md (Limits) come from this: a change must update them.
        assert_eq!(core::mem::size_of::<Acct>(), 112);
        assert_eq!(core::mem::size_of::<Frame>(), 272);
        assert_eq!(core::mem::size_of::<ThreadState>(), 224 + 272 * MAX_DEPTH);
        // With the hash map's element header, one 16 KB (order-2) allocation.
        assert!(core::mem::size_of::<ThreadState>() + 64 <= 16 * 1024);
        assert_eq!(core::mem::size_of::<PollAcct>(), 272);
        assert_eq!(core::mem::size_of::<IdFrame>(), 272 + 272);
        assert_eq!(core::mem::size_of::<IdSlot>(), 8 + 16 + 272 + 272);
        assert_eq!(core::mem::size_of::<StrSet>(), 16 + STR_SLOT * MAX_STRS);
    }

    #[test]
    fn by_key_sizes_are_known() {
        use crate::agg::*;
        // The kernel and user space share these as map keys and values, byte for byte.
        assert_eq!(core::mem::size_of::<AggConfig>(), 40);
        assert_eq!(core::mem::size_of::<NumKey>(), 8 + 8 * BY_WORDS);
        assert_eq!(
            core::mem::size_of::<ByKey>(),
            8 + 8 * BY_WORDS + 8 + BY_STR_LEN
        );
        assert_eq!(core::mem::size_of::<BySites>(), BY_FIELDS);
        // Four distinct fields, at most one comm (two words) and one string (none).
        assert_eq!(BY_WORDS, BY_FIELDS + 1);
    }

    #[test]
    fn reader_woken_once_per_threshold_of_data_however_far_behind() {
        let t = 1000;
        // Below the threshold: no wakeup; the record that reaches it: one.
        assert!(!wakes_reader(600, 300, t));
        assert!(wakes_reader(1000, 300, t));
        assert!(wakes_reader(1100, 300, t));
        // A reader far behind: records between multiples wake nobody (they all did before).
        assert!(!wakes_reader(5500, 300, t));
        assert!(!wakes_reader(5800, 300, t));
        assert!(wakes_reader(6100, 300, t));
        // Records wake it once per threshold of data, whatever their size.
        let woken = (1..=100u64)
            .filter(|n| wakes_reader(n * 128, 128, t))
            .count();
        assert_eq!(woken, 12, "12,800 bytes, a wakeup per 1000");
        assert!(!wakes_reader(5000, 300, 0));
    }

    #[test]
    fn waits_stop_at_their_share_of_the_ring_and_spans_keep_the_rest() {
        let ring = 1 << 24;
        let half = ring / 2;
        assert!(wait_fits(0, half));
        assert!(wait_fits(half as u64 - 1, half));
        // From half full on, waits are dropped; spans still have the other half.
        assert!(!wait_fits(half as u64, half));
        assert!(!wait_fits(ring as u64, half));
        // 0: no limit (a Config left zeroed).
        assert!(wait_fits(ring as u64, 0));
    }

    #[test]
    fn id_slots_spread_counter_ids_of_concurrent_spans() {
        assert!(ID_SLOTS.is_power_of_two());
        // A server's in-flight requests: consecutive ids, in one process and in several.
        for tgids in [1u32, 4] {
            let mut used = [false; ID_SLOTS as usize];
            for t in 0..tgids {
                for id in 0..256u64 {
                    let k = IdKey {
                        pair_id: 2,
                        tgid: 1000 + t,
                        span_id: 5_000_000 + id,
                    };
                    assert!(k.slot() < ID_SLOTS);
                    used[k.slot() as usize] = true;
                }
            }
            let n = 256 * tgids as usize;
            // Few collisions: most starts take a slot, not the hash map.
            let taken = used.iter().filter(|u| **u).count();
            assert!(taken * 100 >= n * 95, "{taken} slots for {n} spans");
        }
        // The span name and the process take part in the slot.
        let a = IdKey {
            pair_id: 0,
            tgid: 7,
            span_id: 1,
        };
        assert_ne!(a.slot(), IdKey { pair_id: 1, ..a }.slot());
        assert_ne!(a.slot(), IdKey { tgid: 8, ..a }.slot());
    }

    #[test]
    fn wait_sums_size_is_known_and_they_add_up() {
        // 96 bytes per span name and CPU: 384 KB per CPU at MAX_PAIRS, sized at load to the
        // span names traced (none without --hist).
        assert_eq!(core::mem::size_of::<WaitSums>(), 96);
        let a = Acct {
            wait_ns: [3000, 0, 10, 400, 70],
            waits: [2, 0, 1, u32::MAX, 3],
            ..Acct::default()
        };
        let mut w = WaitSums::default();
        w.add(&a);
        w.add(&a);
        assert_eq!(w.ns, [6000, 0, 20, 800, 140]);
        // Per span a count fits a u32; summed over spans it does not wrap at 2^32.
        assert_eq!(w.n, [4, 0, 2, 2 * u32::MAX as u64, 6]);
        let mut m = w;
        m.merge(&w);
        assert_eq!(m.ns, [12000, 0, 40, 1600, 280]);
        let d = m.since(&w);
        assert_eq!(d, w);
        assert_eq!(w.since(&m), WaitSums::default());
    }

    #[test]
    fn hist_slots_do_not_overlap() {
        assert_eq!(hist_slot(0, HIST_DURATION), 0);
        assert_eq!(hist_slot(0, HIST_IO), 4);
        assert_eq!(hist_slot(0, HIST_IDLE), 5);
        assert_eq!(hist_slot(0, HIST_STEAL), 6);
        assert_eq!(hist_slot(1, HIST_DURATION), HIST_COMPONENTS as u32);
        assert_eq!(
            hist_slot(MAX_PAIRS - 1, HIST_STEAL),
            MAX_PAIRS * HIST_COMPONENTS as u32 - 1
        );
    }

    #[test]
    fn protocol_values_are_stable() {
        // User space and the eBPF object are built together, but these values also appear in
        // the SITES map and the ring buffer: a change here must be deliberate.
        assert_eq!(
            (SiteRole::EVENT.0, SiteRole::START.0, SiteRole::END.0),
            (0, 1, 2)
        );
        assert_eq!(
            (
                RecordKind::EVENT.0,
                RecordKind::SPAN.0,
                RecordKind::STACK.0,
                RecordKind::STRS.0,
                RecordKind::WAIT.0
            ),
            (1, 2, 3, 4, 5)
        );
        assert_eq!(ArgKind::default(), ArgKind::NONE);
        assert_eq!(
            (ArgKind::CONST.0, ArgKind::RIP.0, ArgKind::UNSUPPORTED.0),
            (1, 4, 5)
        );
        assert_eq!(NUM_COUNTERS, 17);
        assert_eq!(CFG_WAITS, 64);
        assert_eq!(CFG_WAITS_CAPPED, 128);
        assert_eq!(CFG_STACK_COPY, 256);
        assert_eq!(core::mem::size_of::<FilterTerm>(), 32);
    }

    #[test]
    fn record_sizes_are_stable() {
        // The ring buffer protocol relies on these sizes; a change here must be deliberate.
        assert_eq!(core::mem::size_of::<RecordHeader>(), 40);
        assert_eq!(core::mem::size_of::<ArgDesc>(), 16);
        assert_eq!(
            core::mem::size_of::<SiteSpec>(),
            16 + 16 * MAX_ARGS + 4 * MAX_STRS
        );
        assert_eq!(core::mem::size_of::<SpanRecord>(), 424);
        assert_eq!(core::mem::size_of::<EventRecord>(), 144);
        assert_eq!(
            core::mem::size_of::<StrsRecord>(),
            40 + core::mem::size_of::<StrSet>()
        );
        assert_eq!(
            core::mem::size_of::<StackRecord>(),
            40 + 8 + 8 * STACK_DEPTH
        );
        assert_eq!((RecordKind::STACK.0, RecordKind::STRS.0), (3, 4));
        assert_eq!(RecordKind::STACK_COPY.0, 6);
        assert_eq!(
            core::mem::size_of::<StackCopyRecord>(),
            40 + 4 * 8 + 8 + STACK_COPY_BYTES
        );
        assert_eq!(STACK_COPY_BYTES % STACK_COPY_CHUNK, 0);
        assert_eq!(core::mem::offset_of!(StackCopyRecord, stack) % 8, 0);
        assert_eq!((SiteRole::ENTER.0, SiteRole::EXIT.0), (3, 4));
        assert_eq!(core::mem::size_of::<OffInterval>(), 32);
        assert_eq!(core::mem::size_of::<WaitRecord>(), 40 + 32 + 8 + 16 + 8);
        // Written whole by user space: no implicit padding.
        assert_eq!(core::mem::size_of::<Config>(), 22 * 4 + 8);
    }

    fn acct(oncpu: u64, runq: u64, sleep: u64, io: u64) -> Acct {
        Acct {
            oncpu,
            runq,
            sleep,
            io,
            ..Acct::default()
        }
    }

    #[test]
    fn polls_on_two_threads_add_up_with_the_idle_time() {
        // Span from t=0 to t=1000: polled on thread 7 (100..300), idle, then on thread 8
        // (600..900), idle again until the end.
        let mut p = PollAcct::default();
        p.enter(7, 100, &acct(50, 0, 0, 0));
        assert!(p.exit(7, 300, &acct(200, 50, 0, 0)));
        p.enter(8, 600, &acct(1000, 0, 0, 0));
        // An exit on another thread is not this poll's.
        assert!(!p.exit(7, 700, &acct(0, 0, 0, 0)));
        assert!(p.exit(8, 900, &acct(1100, 0, 200, 0)));
        assert!(!p.exit(8, 950, &acct(1100, 0, 200, 0)), "already exited");
        assert_eq!(p.acct, acct(250, 50, 200, 0));
        assert_eq!(p.run_ns, 500);
        let a = p.acct;
        assert_eq!(a.oncpu + a.runq + a.sleep + a.io + p.idle_ns(1000), 1000);
        assert_eq!((p.polls, p.threads, p.enter_tid), (2, 2, 0));
    }

    #[test]
    fn threads_are_counted_once_each() {
        let mut p = PollAcct::default();
        for (i, tid) in [5, 6, 5, 6, 5].into_iter().enumerate() {
            p.enter(tid, i as u64 * 10, &Acct::default());
            p.exit(tid, i as u64 * 10 + 5, &Acct::default());
        }
        assert_eq!((p.polls, p.threads), (5, 2));
        // Past POLL_TIDS remembered threads, new ones still count (an upper bound).
        for tid in 10..10 + POLL_TIDS as u32 {
            p.enter(tid, 100, &Acct::default());
            p.exit(tid, 100, &Acct::default());
        }
        assert_eq!(p.threads, 2 + POLL_TIDS as u32);
    }

    #[test]
    fn a_second_enter_on_the_same_thread_closes_the_open_poll() {
        let mut p = PollAcct::default();
        p.enter(3, 0, &acct(0, 0, 0, 0));
        p.enter(3, 40, &acct(40, 0, 0, 0));
        assert!(p.exit(3, 100, &acct(100, 0, 0, 0)));
        assert_eq!((p.acct.oncpu, p.run_ns, p.polls), (100, 100, 2));
        assert_eq!(p.idle_ns(60), 0, "saturates rather than wrapping");
    }
}
