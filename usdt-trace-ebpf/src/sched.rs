//! Scheduler accounting: for threads with an open span only, how long the thread was on CPU,
//! runnable, asleep or in uninterruptible (I/O) sleep, and who woke it. The arithmetic lives in
//! `usdt_trace_common` (`ThreadState::switch_out` and friends) where it is unit-tested.
//!
//! Which threads to look at at all: `maps::TRACKED_TASKS`, a count per hash of a task's
//! address, that a thread enters in the probe that opens a span and leaves here, in its own
//! `sched_switch`, once it gets off the CPU with no span open.
//!
//! The hooks are BTF tracepoints (raw tracepoints with typed arguments): cheaper than classic
//! tracepoints, which build a perf record before calling BPF, and never skipped because some
//! other BPF program or map syscall is active on the CPU.

use aya_ebpf::{
    bindings::BPF_RB_AVAIL_DATA,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_get_current_task_btf,
        bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel,
        bpf_probe_read_kernel_buf, bpf_probe_read_user, bpf_task_pt_regs,
    },
    programs::BtfTracePointContext,
};
use usdt_trace_common::{
    off_cpu_state, refine_class, str_key_thread, wait_fits, CpuSteal, OffInterval, RecordKind,
    ThreadState, WaitRecord, CFG_WAITS, CFG_WAITS_CAPPED, CNT_UNMATCHED_START, CNT_WAITS_CAPPED,
    CNT_WAITS_LOST, MAX_DEPTH, OFF_NONE, SC_FILE, SC_NONE, SC_POLL, SC_SELECT, SC_USER,
    SYSCALL_CLASS_LEN, TS_RUNNING, TS_RUNQ, TS_SLEEP,
};

use crate::{
    irq,
    maps::{
        any_tracked, count, count_n, current_comm_into, enter_filter, existing_thread,
        leave_filter, maybe_tracked, opaque, ringbuf_flags, untrack, CONFIG, EVENTS, NO_STATE_TIDS,
        OPAQUE_SCHED, STRS, SYSCALL_CLASS, THREADS,
    },
};

/// `--perfetto` (`CFG_WAITS`): sends the off-CPU interval `off` of thread `tid` that just
/// ended, with who woke it. One ring-buffer record per interval, at the switch-in, where all
/// three moments (asleep, woken, running) are known: the hooks only run this for a thread
/// with a span open, so threads without one pay nothing more. Spans come first: once half the
/// ring waits for the reader (`Config::waits_max_bytes`), or it is full, the interval is
/// dropped, counted (`CNT_WAITS_LOST`); the span's split still has its time. A stalled or
/// overrun reader then costs wait slices, never the spans around them.
#[inline(always)]
fn send_wait(st: &ThreadState, task: *const u8, tid: u32, off: &OffInterval) {
    let Some(cfg) = CONFIG.get(0) else {
        return;
    };
    if cfg.flags & CFG_WAITS == 0 {
        return;
    }
    if cfg.flags & CFG_WAITS_CAPPED != 0 {
        count(CNT_WAITS_CAPPED);
        return;
    }
    // Racy across CPUs by at most a record each, which the half left to spans absorbs.
    if !wait_fits(EVENTS.query(BPF_RB_AVAIL_DATA as u64), cfg.waits_max_bytes) {
        count(CNT_WAITS_LOST);
        return;
    }
    let Some(mut entry) = EVENTS.reserve::<WaitRecord>(0) else {
        count(CNT_WAITS_LOST);
        return;
    };
    // SAFETY: the reservation is a WaitRecord-sized, aligned slot that only we write; every
    // field user space reads is written below.
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    rec.hdr.kind = RecordKind::WAIT;
    rec.hdr.site = 0;
    rec.hdr.pid = st.tgid;
    rec.hdr.tid = tid;
    rec.hdr.ts_ns = off.running_ns;
    // The thread's name, for its track: `task` is not the current task at a switch-in.
    let comm_off = cfg.task_comm_off as usize;
    let read = comm_off != 0 && {
        // SAFETY: the helper checks the kernel address and fails on a fault.
        unsafe { bpf_probe_read_kernel_buf(task.wrapping_add(comm_off), &mut rec.hdr.comm) }.is_ok()
    };
    if !read {
        usdt_trace_common::zero_comm(&mut rec.hdr.comm);
    }
    rec.off = *off;
    rec.waker_pid = st.last_waker_pid;
    rec.waker_tid = st.last_waker_tid;
    // Nothing accrues to it off CPU: its total at the switch-out that began this interval.
    rec.steal_total = st.acct.steal;
    // Two word copies: a plain assignment is a call of the byte-loop `memcpy` subprogram.
    const _: () = assert!(core::mem::offset_of!(WaitRecord, waker_comm) % 8 == 0);
    const _: () = assert!(core::mem::offset_of!(ThreadState, last_waker_comm) % 8 == 0);
    let src = st.last_waker_comm.as_ptr() as *const u64;
    let dst = rec.waker_comm.as_mut_ptr() as *mut u64;
    for i in 0..2 {
        // SAFETY: in bounds (16 bytes each) and 8-byte aligned (asserted above).
        unsafe { core::ptr::write_volatile(dst.add(i), core::ptr::read_volatile(src.add(i))) };
    }
    entry.submit(ringbuf_flags(cfg, 8 + core::mem::size_of::<WaitRecord>()));
}

/// The thread id of a `struct task_struct *`, through the offset user space found in BTF.
#[inline(always)]
fn task_tid(task: *const u8) -> Option<u32> {
    let off = CONFIG.get(0)?.task_pid_off as usize;
    if off == 0 {
        return None;
    }
    // SAFETY: the helper checks the kernel address and fails on a fault.
    unsafe { bpf_probe_read_kernel(task.wrapping_add(off) as *const i32) }
        .ok()
        .map(|p| p as u32)
}

/// A u64 of `struct task_struct` at an offset from BTF (0: this kernel's BTF lacks it).
#[inline(always)]
fn task_u64(task: *const u8, off: u32) -> Option<u64> {
    if off == 0 {
        return None;
    }
    // SAFETY: the helper checks the kernel address and fails on a fault.
    unsafe { bpf_probe_read_kernel(task.wrapping_add(off as usize) as *const u64) }.ok()
}

/// The kernel's CPU time and run-queue wait of `task` (see `Config::task_exec_off`).
#[inline(always)]
fn task_counters(task: *const u8) -> (Option<u64>, Option<u64>) {
    match CONFIG.get(0) {
        Some(cfg) => (
            task_u64(task, cfg.task_exec_off),
            task_u64(task, cfg.task_delay_off),
        ),
        None => (None, None),
    }
}

/// The steal counter of the CPU this runs on ([`CpuSteal`]), through `task`, a task on this
/// CPU (the current one, or `next` at a switch): its `se.cfs_rq->rq` is this CPU's run queue
/// (the kernel points it there whenever the task moves, for every scheduling class). Four
/// checked reads; `UNKNOWN` when BTF lacked a member or a read faulted.
#[inline(always)]
pub fn cpu_steal(task: *const u8) -> CpuSteal {
    let Some(cfg) = CONFIG.get(0) else {
        return CpuSteal::UNKNOWN;
    };
    if cfg.task_cfs_rq_off == 0 || cfg.rq_clock_task_off == 0 {
        return CpuSteal::UNKNOWN;
    }
    // SAFETY: the helper checks each kernel address and fails on a fault.
    let read = |p: u64| unsafe { bpf_probe_read_kernel(p as *const u64) }.ok();
    let Some(cfs_rq) = read(task as u64 + cfg.task_cfs_rq_off as u64) else {
        return CpuSteal::UNKNOWN;
    };
    let Some(rq) = read(cfs_rq + cfg.cfs_rq_rq_off as u64) else {
        return CpuSteal::UNKNOWN;
    };
    match (
        read(rq + cfg.rq_clock_off as u64),
        read(rq + cfg.rq_clock_task_off as u64),
    ) {
        (Some(clock), Some(task_clock)) => CpuSteal {
            ns: clock.saturating_sub(task_clock),
            // SAFETY: the helper has no preconditions.
            cpu: unsafe { bpf_get_smp_processor_id() },
            _pad: 0,
        },
        _ => CpuSteal::UNKNOWN,
    }
}

/// The class (`SC_*`) of the syscall the current task is in, from the syscall number its
/// entry saved in its user registers (`orig_ax` on x86_64, `syscallno` on aarch64): -1 outside
/// a syscall, e.g. in a page fault, which is `SC_USER`. Only called for a traced thread that
/// goes to sleep.
#[inline(always)]
fn current_syscall_class() -> u8 {
    let off = match CONFIG.get(0) {
        Some(c) if c.regs_nr_off != 0 => c.regs_nr_off as u64,
        _ => return SC_NONE,
    };
    // SAFETY: the helpers have no preconditions; the registers are only read through
    // bpf_probe_read_kernel, which checks the address.
    let nr = unsafe {
        let regs = bpf_task_pt_regs(bpf_get_current_task_btf()) as u64;
        read_syscall_nr((regs + off) as *const u8)
    };
    match nr {
        Some(nr) if (0..SYSCALL_CLASS_LEN as i64).contains(&nr) => {
            SYSCALL_CLASS.get(nr as u32).copied().unwrap_or(SC_NONE)
        }
        Some(-1) => SC_USER,
        _ => SC_NONE,
    }
}

/// The saved syscall number at `p`: x86_64's `orig_ax` is 64 bits; aarch64's `syscallno` is
/// an `s32` (followed by padding), sign-extended so that -1 stays -1.
///
/// # Safety
///
/// None beyond the helper's: it checks the kernel address and fails on a fault.
#[cfg(bpf_target_arch = "aarch64")]
#[inline(always)]
unsafe fn read_syscall_nr(p: *const u8) -> Option<i64> {
    // SAFETY: the helper checks the address.
    unsafe { bpf_probe_read_kernel(p as *const i32) }
        .ok()
        .map(i64::from)
}

/// See the aarch64 version.
///
/// # Safety
///
/// None beyond the helper's: it checks the kernel address and fails on a fault.
#[cfg(not(bpf_target_arch = "aarch64"))]
#[inline(always)]
unsafe fn read_syscall_nr(p: *const u8) -> Option<i64> {
    // SAFETY: the helper checks the address.
    unsafe { bpf_probe_read_kernel(p as *const i64) }.ok()
}

/// Whether the file a sleeping thread (the current task, in its syscall of class `class`)
/// waits on is a socket, for [`refine_class`]: a read's first argument, the first `pollfd`
/// of a poll, the lowest descriptor of a select's read set. None when the class names no
/// file or a read failed (BTF lacked a member, a page of the array is not in memory).
#[inline(always)]
fn waits_on_socket(class: u8) -> Option<bool> {
    if class != SC_FILE && class != SC_POLL && class != SC_SELECT {
        return None;
    }
    let cfg = CONFIG.get(0)?;
    let arg_off = if class == SC_SELECT {
        cfg.regs_arg1_off
    } else {
        cfg.regs_arg0_off
    };
    if arg_off == OFF_NONE || cfg.inode_mode_off == OFF_NONE || cfg.file_inode_off == OFF_NONE {
        return None;
    }
    // SAFETY: the helpers have no preconditions; every address is read through the checked
    // bpf_probe_read_kernel/bpf_probe_read_user helpers.
    let (task, regs) = unsafe {
        let task = bpf_get_current_task_btf();
        (task as u64, bpf_task_pt_regs(task) as u64)
    };
    // SAFETY: as above: the helper checks the kernel address and fails on a fault.
    let kread = |p: u64| unsafe { bpf_probe_read_kernel(p as *const u64) }.ok();
    let arg = kread(regs + arg_off as u64)?;
    let fd: u64 = match class {
        SC_FILE => arg as u32 as u64,
        // struct pollfd { int fd; short events, revents; }: the first one's fd.
        // SAFETY: the helper checks the user address and fails on a fault.
        SC_POLL => unsafe { bpf_probe_read_user(arg as *const i32) }.ok()? as u32 as u64,
        _ => {
            // SAFETY: as above.
            let set = unsafe { bpf_probe_read_user(arg as *const u64) }.ok()?;
            if set == 0 {
                return None;
            }
            set.trailing_zeros() as u64
        }
    };
    // The file table: files->fdt->fd[fd], bounded by fdt->max_fds.
    let files = kread(task + cfg.task_files_off as u64)?;
    let fdt = kread(files + cfg.files_fdt_off as u64)?;
    // SAFETY: as above.
    let max =
        unsafe { bpf_probe_read_kernel((fdt + cfg.fdt_max_fds_off as u64) as *const u32) }.ok()?;
    if fd >= max as u64 {
        return None;
    }
    let fds = kread(fdt + cfg.fdt_fd_off as u64)?;
    let file = kread(fds + fd * 8)?;
    if file == 0 {
        return None;
    }
    let inode = kread(file + cfg.file_inode_off as u64)?;
    // SAFETY: as above.
    let mode =
        unsafe { bpf_probe_read_kernel((inode + cfg.inode_mode_off as u64) as *const u16) }.ok()?;
    const S_IFMT: u16 = 0o170000;
    const S_IFSOCK: u16 = 0o140000;
    Some(mode & S_IFMT == S_IFSOCK)
}

/// In a probe, before the current thread opens a span (or enters a polled one): accounting
/// runs from here, and the scheduler hooks must look at this thread from here on. `tgid`: its
/// process, which the hooks cannot cheaply read from the task they see (for its waits).
#[inline(always)]
pub fn resume_accounting(st: &mut ThreadState, now: u64, steal: CpuSteal, tgid: u32) {
    enter_filter(st);
    st.tgid = tgid;
    st.resume_accounting(now, steal);
}

/// In a probe: the current thread runs, whatever its state says. Repair a switch-in that
/// sched_switch never reported (`ThreadState::catch_up_running`); the kernel's counters are
/// read only when the state is wrong, which is rare.
#[inline(always)]
pub fn catch_up(st: &mut ThreadState, now: u64) {
    // Tested here, inline: the repair is rare, the call is not free.
    if st.state != TS_RUNNING {
        usdt_catch_up(st, now);
    }
}

/// A global BPF function: the verifier checks the repair (a loop over the frames with many
/// branches) once, on its own. As a static subprogram it was verified again at each of the
/// six probe paths that call it, most of the uprobe program's ~700k verified instructions and
/// of `watch`'s attach time.
#[no_mangle]
#[inline(never)]
pub extern "C" fn usdt_catch_up(st: *mut ThreadState, now: u64) -> u32 {
    // A global function's pointer may be NULL as far as the verifier knows.
    if st.is_null() {
        return 0;
    }
    // SAFETY: non-null, and the verifier checked at the call that it points to a ThreadState.
    let st = unsafe { &mut *st };
    if st.state != TS_RUNNING {
        // SAFETY: the helper has no preconditions; the pointer is only read through
        // bpf_probe_read_kernel.
        let task = unsafe { bpf_get_current_task() } as *const u8;
        let (exec, delay) = task_counters(task);
        if let Some(off) = st.catch_up_running(now, exec, delay, false, cpu_steal(task)) {
            send_wait(st, task, bpf_get_current_pid_tgid() as u32, &off);
        }
    }
    0
}

/// sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
/// unsigned int prev_state). `prev` is the current task.
#[inline(always)]
pub fn on_switch(ctx: &BtfTracePointContext) {
    // Most switches on a machine involve no traced thread: one load decides.
    if !any_tracked() {
        return;
    }
    // Each side of the switch is looked up only when its task may have a span open (an array
    // load on the task's address), so a switch costs a lookup per side that may, none for the
    // others. (A per-CPU "no open span on this CPU" flag that skipped lookups altogether filed
    // CPU time as run queue in 1 of ~6 attrib_split runs under a CPU hog: this filter is exact
    // in the direction that matters, kept by each thread itself; see `TRACKED_TASKS`.) The
    // hooks run with interrupts off, so `opaque`'s word is theirs alone meanwhile.
    // SAFETY: the helper has no preconditions; `prev` is the current task.
    let st = if maybe_tracked(unsafe { bpf_get_current_task() }) {
        existing_thread(bpf_get_current_pid_tgid() as u32)
    } else {
        None
    };
    if let Some(st) = st {
        // The clock and the arguments are only read for accounted threads: this runs on every
        // context switch of the machine.
        if st.active() {
            // SAFETY: the helper has no preconditions.
            let now = unsafe { bpf_ktime_get_ns() };
            let preempt: u64 = ctx.arg(0);
            let prev_task: *const u8 = ctx.arg(1);
            let prev_state: u64 = ctx.arg(3);
            // It is leaving the CPU, so it ran: repair a switch-in we never saw, then keep the
            // kernel's counters for the next repair.
            let (exec, delay) = task_counters(prev_task);
            // The run queue's clock was brought up to date by this switch: the steal of the
            // stretch now ending is all in.
            let steal = cpu_steal(prev_task);
            if let Some(off) = st.catch_up_running(now, exec, delay, true, steal) {
                send_wait(st, prev_task, bpf_get_current_pid_tgid() as u32, &off);
            }
            st.snap_counters(exec, delay);
            // `preempt` is a bool widened to a register: only its low bit is defined.
            let preempt = preempt & 1 != 0;
            // What it waits on matters only when it goes to sleep: a preempted thread is in
            // the run queue whatever syscall it is in.
            let class = match off_cpu_state(preempt, prev_state as u32) {
                TS_RUNQ => SC_NONE,
                // An interruptible sleep in a poll or a read: named by the file it waits on.
                TS_SLEEP => {
                    let class = current_syscall_class();
                    refine_class(class, waits_on_socket(class))
                }
                _ => current_syscall_class(),
            };
            st.switch_out(now, steal, preempt, prev_state as u32, class);
        } else {
            // No span open: until it opens one, its switches cost no lookup.
            leave_filter(st);
        }
    }
    let next_task: *const u8 = ctx.arg(2);
    if !opaque(next_task as u64, OPAQUE_SCHED).is_none_or(maybe_tracked) {
        return;
    }
    let Some(next) = task_tid(next_task) else {
        return;
    };
    if let Some(st) = existing_thread(next) {
        if st.active() && st.state != TS_RUNNING {
            // SAFETY: the helper has no preconditions.
            let off = st.switch_in(unsafe { bpf_ktime_get_ns() }, cpu_steal(next_task));
            send_wait(st, next_task, next, &off);
        }
    }
}

/// The woken task of a wakeup tracepoint, when it is a traced thread asleep in a span.
#[inline(always)]
fn woken_thread(ctx: &BtfTracePointContext) -> Option<&'static mut ThreadState> {
    if !any_tracked() {
        return None;
    }
    let p: *const u8 = ctx.arg(0);
    if !opaque(p as u64, OPAQUE_SCHED).is_none_or(maybe_tracked) {
        return None;
    }
    let st = existing_thread(task_tid(p)?)?;
    st.woken_from_sleep().then_some(st)
}

/// sched_wakeup(struct task_struct *p): the woken task is on a run queue (or never left
/// one), the moment the kernel's own run-queue wait (`sched_info.run_delay`) starts counting.
/// Its run-queue time starts here, not at sched_waking: between the two the wakeup may travel
/// to another CPU by IPI and that CPU may have to leave idle first (on a VM, the host must run
/// the halted vCPU again), and the kernel files that time under neither run delay nor CPU. It
/// stays in the sleep that the wakeup ends, as the kernel has it.
#[inline(always)]
pub fn on_wakeup(ctx: &BtfTracePointContext) {
    if let Some(st) = woken_thread(ctx) {
        // Asleep until now: no on-CPU stretch ends here, so no steal to read.
        // SAFETY: the helper has no preconditions.
        st.set_state(unsafe { bpf_ktime_get_ns() }, CpuSteal::UNKNOWN, TS_RUNQ);
    }
}

/// sched_waking(struct task_struct *p): runs in the waker's context, which names who woke the
/// thread (the run-queue wait begins at [`on_wakeup`]).
#[inline(always)]
pub fn on_waking(ctx: &BtfTracePointContext) {
    let Some(st) = woken_thread(ctx) else {
        return;
    };
    if irq::woken_by_timer() {
        st.timed_out();
    }
    // The waker is the current task, unless this runs in interrupt context: then the current
    // task is merely whoever the interrupt hit, and the waker is the interrupt.
    if let Some(label) = irq::waker_label() {
        st.last_waker_pid = 0;
        st.last_waker_tid = 0;
        st.last_waker_comm = label;
    } else {
        let pid_tgid = bpf_get_current_pid_tgid();
        st.last_waker_pid = (pid_tgid >> 32) as u32;
        st.last_waker_tid = pid_tgid as u32;
        current_comm_into(&mut st.last_waker_comm);
    }
}

/// sched_process_exit: runs in the exiting thread. Its open frames will never see their end.
/// Starts dropped past the stack or for a full map were counted as drops already.
#[inline(always)]
pub fn on_exit() {
    let tid = bpf_get_current_pid_tgid() as u32;
    if let Some(st) = existing_thread(tid) {
        if st.depth > 0 {
            count_n(CNT_UNMATCHED_START, st.depth as u64);
        }
        // The strings of its open frames go with them (only a thread with state has any).
        let mut d = 0;
        while d < MAX_DEPTH {
            if d >= st.depth as usize {
                break;
            }
            if st.frames[d].has_strs != 0 {
                let _ = STRS.remove(&str_key_thread(tid, d as u32));
            }
            d += 1;
        }
        leave_filter(st);
        if THREADS.remove(&tid).is_ok() {
            untrack();
        }
    }
    // The thread id will be reused: its dropped starts must not swallow a later thread's ends.
    let _ = NO_STATE_TIDS.remove(&tid);
}
