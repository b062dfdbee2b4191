//! The eBPF side of `usdt-trace watch`.
//!
//! One generic uprobe program serves every probe site. User space attaches it at each site with a
//! BPF cookie that indexes `SITES`, the spec table (what role the site plays and where each
//! argument lives), the way libbpf's USDT support does. So attaching hundreds of sites costs one
//! program and many links, not hundreds of programs (bpftrace generates one program per site).
//!
//! Spans are paired here, in the kernel, so only closed spans cross to user space:
//! - by thread: each thread has a stack of open frames; an end closes the innermost open frame
//!   of the same span name, which makes nested and recursive spans pair correctly;
//! - by id: probes that carry a span id (usdt-markers spans) pair through `ID_SPANS`, so a span
//!   may start on one thread and end on another (async runtimes).
//!
//! Three scheduler tracepoints keep, for threads with an open span only, how long the thread
//! was on CPU, runnable, asleep or in uninterruptible (I/O) sleep. A span's split is the
//! difference of those totals between its end and its start, so nested spans each get their own.
// Built for bpfel-unknown-none by usdt-trace's build.rs; on the host (`cargo build
// --workspace`) it compiles to an empty program so workspace-wide commands keep working.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
#![cfg_attr(not(target_arch = "bpf"), allow(dead_code, unused_imports))]
// Map values are passed by reference on purpose: `insert(key, *frame)` would copy a 400-byte
// frame (or a 5 KB thread state) onto the 512-byte BPF stack.
#![allow(clippy::needless_borrows_for_generic_args)]

use aya_ebpf::{
    bindings::{
        BPF_F_NO_PREALLOC, BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP,
    },
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_current_task, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_buf,
        bpf_probe_read_user, bpf_probe_read_user_str_bytes,
    },
    macros::{btf_tracepoint, map, uprobe},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::{BtfTracePointContext, ProbeContext},
    EbpfContext,
};
use usdt_trace_common::*;

/// Words in x86_64 `struct pt_regs` (aarch64 `user_pt_regs` has 34; we keep room for the larger).
const REGS_WORDS: usize = 34;
#[cfg(bpf_target_arch = "aarch64")]
const REGS_BYTES: usize = 34 * 8;
#[cfg(not(bpf_target_arch = "aarch64"))]
const REGS_BYTES: usize = 21 * 8;

#[map]
static SITES: Array<SiteSpec> = Array::with_max_entries(1, 0);
#[map]
static CONFIG: Array<Config> = Array::with_max_entries(1, 0);
#[map]
static PIDS: HashMap<u32, u8> = HashMap::with_max_entries(4096, 0);
#[map]
static THREADS: HashMap<u32, ThreadState> = HashMap::with_max_entries(16384, BPF_F_NO_PREALLOC);
#[map]
static ID_SPANS: HashMap<IdKey, Frame> = HashMap::with_max_entries(65536, BPF_F_NO_PREALLOC);
/// Never written: a zeroed ThreadState to insert from (too big for the 512-byte BPF stack).
#[map]
static ZERO_THREAD: PerCpuArray<ThreadState> = PerCpuArray::with_max_entries(1, 0);
/// Scratch space for building an id-paired frame before inserting it.
#[map]
static FRAME_SCRATCH: PerCpuArray<Frame> = PerCpuArray::with_max_entries(1, 0);
/// Per-CPU room for the register copy and end arguments: the BPF stack has only 512 bytes.
#[repr(C)]
pub struct Scratch {
    regs: [u64; REGS_WORDS],
    end_args: [u64; MAX_ARGS],
}
#[map]
static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(NUM_COUNTERS, 0);
#[map]
static HISTS: PerCpuArray<Hist> =
    PerCpuArray::with_max_entries(MAX_PAIRS * HIST_COMPONENTS as u32, 0);
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 24, 0);

#[inline(always)]
fn count(idx: u32) {
    if let Some(p) = COUNTERS.get_ptr_mut(idx) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while we run.
        unsafe { *p += 1 };
    }
}

#[inline(always)]
fn count_n(idx: u32, n: u64) {
    if let Some(p) = COUNTERS.get_ptr_mut(idx) {
        unsafe { *p += n };
    }
}

#[inline(always)]
fn ringbuf_flags(cfg: &Config) -> u64 {
    // Waking the reader for every record costs more than the record itself; wake it only when
    // a batch is waiting. The reader also polls on a timer, so nothing waits long.
    if EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= cfg.wakeup_bytes as u64 {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

#[inline(always)]
fn reg(regs: &[u64; REGS_WORDS], idx: u8) -> u64 {
    let i = idx as usize;
    if i < REGS_WORDS {
        regs[i]
    } else {
        0
    }
}

#[inline(always)]
fn read_user(addr: u64, size: u8) -> u64 {
    // Read exactly `size` bytes: a wider read could cross into an unmapped page.
    unsafe {
        match size {
            1 => bpf_probe_read_user(addr as *const u8)
                .map(|v| v as u64)
                .unwrap_or(0),
            2 => bpf_probe_read_user(addr as *const u16)
                .map(|v| v as u64)
                .unwrap_or(0),
            4 => bpf_probe_read_user(addr as *const u32)
                .map(|v| v as u64)
                .unwrap_or(0),
            _ => bpf_probe_read_user(addr as *const u64).unwrap_or(0),
        }
    }
}

#[inline(always)]
fn extend(v: u64, size: u8, signed: u8) -> u64 {
    match size {
        1 => {
            if signed != 0 {
                v as u8 as i8 as i64 as u64
            } else {
                v as u8 as u64
            }
        }
        2 => {
            if signed != 0 {
                v as u16 as i16 as i64 as u64
            } else {
                v as u16 as u64
            }
        }
        4 => {
            if signed != 0 {
                v as u32 as i32 as i64 as u64
            } else {
                v as u32 as u64
            }
        }
        _ => v,
    }
}

#[inline(always)]
fn read_arg(d: &ArgDesc, regs: &[u64; REGS_WORDS], ip: u64) -> u64 {
    let raw = match d.kind {
        ARG_CONST => d.val,
        ARG_REG => reg(regs, d.base_reg),
        ARG_MEM => {
            let mut addr = reg(regs, d.base_reg).wrapping_add(d.val);
            if d.index_reg != REG_NONE {
                addr = addr.wrapping_add(reg(regs, d.index_reg).wrapping_mul(d.scale as u64));
            }
            read_user(addr, d.size)
        }
        ARG_RIP => read_user(ip.wrapping_add(d.val), d.size),
        _ => 0,
    };
    extend(raw, d.size, d.signed)
}

#[inline(always)]
fn read_args(spec: &SiteSpec, regs: &[u64; REGS_WORDS], ip: u64, out: &mut [u64; MAX_ARGS]) {
    let mut i = 0;
    while i < MAX_ARGS {
        if i >= spec.nargs as usize {
            break;
        }
        out[i] = read_arg(&spec.args[i], regs, ip);
        i += 1;
    }
}

#[inline(always)]
fn read_str(spec: &SiteSpec, args: &[u64; MAX_ARGS], buf: &mut [u8; STR_LEN]) -> u32 {
    let i = spec.str_arg as usize;
    if i >= MAX_ARGS {
        return 0;
    }
    match unsafe { bpf_probe_read_user_str_bytes(args[i] as *const u8, buf) } {
        Ok(s) => s.len() as u32 + 1,
        Err(_) => 0,
    }
}

#[uprobe]
pub fn usdt_site(ctx: ProbeContext) -> u32 {
    let _ = on_site(&ctx);
    0
}

fn on_site(ctx: &ProbeContext) -> Result<(), ()> {
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let spec = SITES.get(cookie).ok_or(())?;
    let cfg = CONFIG.get(0).ok_or(())?;
    if cfg.flags & CFG_STOPPED != 0 {
        return Ok(());
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    if cfg.flags & CFG_PID_FILTER != 0 && unsafe { PIDS.get(&tgid) }.is_none() {
        count(CNT_FILTERED);
        return Ok(());
    }
    let hist = cfg.flags & CFG_HIST != 0;
    if hist && spec.role == ROLE_EVENT {
        // Histograms are of spans: an event is only counted.
        count(CNT_EVENTS);
        return Ok(());
    }
    // One copy of the registers: the spec's register numbers index into it. Histograms of
    // spans paired per thread need no arguments, so that mode skips the copy (and the reads).
    let scratch = unsafe { &mut *SCRATCH.get_ptr_mut(0).ok_or(())? };
    let need_args = !hist || spec.id_arg != ID_NONE;
    if need_args {
        unsafe {
            bpf_probe_read_kernel_buf(
                ctx.regs as *const u8,
                core::slice::from_raw_parts_mut(scratch.regs.as_mut_ptr() as *mut u8, REGS_BYTES),
            )
        }
        .map_err(|_| ())?;
    }
    let regs = &scratch.regs;
    let ip = reg(regs, IP_WORD);
    let now = unsafe { bpf_ktime_get_ns() };
    let hit = Hit {
        spec,
        cfg,
        regs,
        ip,
        now,
        cookie,
        tgid,
        tid,
    };
    match spec.role {
        ROLE_START => {
            if spec.id_arg != ID_NONE {
                start_by_id(&hit)
            } else {
                start_on_thread(&hit)
            }
        }
        ROLE_END => {
            if spec.id_arg != ID_NONE {
                let end_args = unsafe { &mut *core::ptr::addr_of_mut!(scratch.end_args) };
                end_by_id(&hit, end_args)
            } else {
                end_on_thread(&hit)
            }
        }
        _ => emit_event(&hit),
    }
}

#[cfg(bpf_target_arch = "aarch64")]
const IP_WORD: u8 = 32;
#[cfg(not(bpf_target_arch = "aarch64"))]
const IP_WORD: u8 = 16;

/// One probe hit: what the site is and what the kernel told us about it.
#[derive(Clone, Copy)]
struct Hit<'a> {
    spec: &'a SiteSpec,
    cfg: &'a Config,
    regs: &'a [u64; REGS_WORDS],
    ip: u64,
    now: u64,
    /// The site's BPF cookie: its index in `SITES`.
    cookie: u32,
    tgid: u32,
    tid: u32,
}

#[inline(always)]
fn fill_header(h: &mut RecordHeader, kind: u32, site: u32, tgid: u32, tid: u32, now: u64) {
    h.kind = kind;
    h.site = site;
    h.pid = tgid;
    h.tid = tid;
    h.ts_ns = now;
    // Straight into the record: the helper writes the destination buffer.
    unsafe {
        aya_ebpf::helpers::generated::bpf_get_current_comm(
            h.comm.as_mut_ptr() as *mut _,
            h.comm.len() as u32,
        )
    };
}

fn emit_event(hit: &Hit) -> Result<(), ()> {
    let Hit {
        spec,
        cfg,
        regs,
        ip,
        now,
        cookie,
        tgid,
        tid,
    } = *hit;

    count(CNT_EVENTS);
    if cfg.flags & CFG_HIST != 0 {
        return Ok(());
    }
    let Some(mut entry) = EVENTS.reserve::<EventRecord>(0) else {
        count(CNT_LOST);
        return Ok(());
    };
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    fill_header(&mut rec.hdr, REC_EVENT, cookie, tgid, tid, now);
    read_args(spec, regs, ip, &mut rec.args);
    rec.str_len = read_str(spec, &rec.args, &mut rec.str);
    entry.submit(ringbuf_flags(cfg));
    Ok(())
}

/// Current totals of a thread, including the interval in progress.
#[inline(always)]
fn acct_now(st: &ThreadState, now: u64) -> Acct {
    let mut a = st.acct;
    let d = now.saturating_sub(st.since_ns);
    match st.state {
        TS_RUNQ => a.runq += d,
        TS_SLEEP => a.sleep += d,
        TS_IO => a.io += d,
        _ => a.oncpu += d,
    }
    a
}

/// Accounting runs while the thread has any span open.
#[inline(always)]
fn active(st: &ThreadState) -> bool {
    st.depth > 0 || st.id_open > 0
}

#[inline(always)]
fn current_task() -> *const u8 {
    unsafe { bpf_get_current_task() as *const u8 }
}

/// A u64 of `struct task_struct` at an offset from BTF (0: unknown).
#[inline(always)]
fn task_u64(task: *const u8, off: u32) -> Option<u64> {
    if off == 0 {
        return None;
    }
    unsafe { bpf_probe_read_kernel(task.wrapping_add(off as usize) as *const u64) }.ok()
}

/// Remember the kernel's CPU time and run-queue wait of `task` as it leaves the CPU.
#[inline(always)]
fn snap_counters(st: &mut ThreadState, task: *const u8) {
    st.snap_ok = 0;
    let Some(cfg) = CONFIG.get(0) else {
        return;
    };
    if let (Some(exec), Some(delay)) = (
        task_u64(task, cfg.task_exec_off),
        task_u64(task, cfg.task_delay_off),
    ) {
        st.exec_snap = exec;
        st.delay_snap = delay;
        st.snap_ok = 1;
    }
}

/// Who woke the thread, for each open span whose longest off-CPU interval this is.
#[inline(always)]
fn note_off_interval(st: &mut ThreadState, off: u64) {
    let depth = st.depth as usize;
    let mut j = 0;
    while j < MAX_DEPTH {
        if j >= depth {
            break;
        }
        let f = &mut st.frames[j];
        if off > f.longest_off_ns {
            f.longest_off_ns = off;
            f.waker_pid = st.last_waker_pid;
            f.waker_tid = st.last_waker_tid;
            f.waker_comm = st.last_waker_comm;
        }
        j += 1;
    }
}

/// `task` (this thread) is on CPU now, but its state says it is off CPU: the kernel switched it
/// in without sched_switch reaching us. On 6.18 switches out of the idle task and out of some
/// other tasks never reach the tracepoint (ftrace misses them too), and the on-CPU time until
/// the thread's next switch-out or probe was filed as run queue (or sleep). The kernel's own
/// counters since the switch-out that began the interval split it exactly: the run-queue wait
/// (`run_delay` grows when the thread gets the CPU) and, after a sleep, the CPU time
/// (`sum_exec_runtime`, current at a switch-out; in a probe it lags by up to one tick).
#[inline(always)]
fn catch_up_running(st: &mut ThreadState, task: *const u8, now: u64) {
    // No `active` test: end_by_id calls this after releasing the span, and elsewhere an
    // inactive thread was just reset to running.
    if st.state == TS_RUNNING {
        return;
    }
    let d = now.saturating_sub(st.since_ns);
    let (mut oncpu, mut runq) = (0, 0);
    if let Some(cfg) = CONFIG.get(0) {
        if let (1, Some(exec), Some(delay)) = (
            st.snap_ok,
            task_u64(task, cfg.task_exec_off),
            task_u64(task, cfg.task_delay_off),
        ) {
            let waited = delay.saturating_sub(st.delay_snap);
            if st.state == TS_RUNQ {
                runq = waited.min(d);
                oncpu = d - runq;
            } else {
                oncpu = exec.saturating_sub(st.exec_snap).min(d);
                runq = waited.min(d - oncpu);
            }
        }
    }
    // Without the counters the whole interval keeps its state, as before; from now on it runs.
    st.acct = acct_now(st, now.saturating_sub(oncpu + runq));
    st.acct.oncpu += oncpu;
    st.acct.runq += runq;
    note_off_interval(
        st,
        now.saturating_sub(st.off_start_ns).saturating_sub(oncpu),
    );
    st.since_ns = now;
    st.state = TS_RUNNING;
}

#[inline(always)]
fn thread_state(tid: u32) -> Option<*mut ThreadState> {
    if let Some(p) = THREADS.get_ptr_mut(&tid) {
        return Some(p);
    }
    let zero = ZERO_THREAD.get_ptr(0)?;
    THREADS
        .insert(&tid, unsafe { &*zero }, BPF_NOEXIST as u64)
        .ok()?;
    THREADS.get_ptr_mut(&tid)
}

fn start_on_thread(hit: &Hit) -> Result<(), ()> {
    let Hit {
        spec,
        cfg,
        regs,
        ip,
        now,
        cookie,
        tid,
        ..
    } = *hit;

    let Some(st) = thread_state(tid) else {
        count(CNT_NO_STATE);
        return Ok(());
    };
    let st = unsafe { &mut *st };
    if !active(st) {
        // Accounting only runs while a span is open: restart the clock, the thread is running.
        st.state = TS_RUNNING;
        st.since_ns = now;
        st.last_waker_pid = 0;
    }
    catch_up_running(st, current_task(), now);
    let depth = st.depth as usize;
    if depth >= MAX_DEPTH {
        count(CNT_UNMATCHED_START);
        return Ok(());
    }
    let acct = acct_now(st, now);
    let f = &mut st.frames[depth];
    f.site = cookie;
    f.pair_id = spec.pair_id;
    f.tid = tid;
    f.start_ns = now;
    f.acct_start = acct;
    f.longest_off_ns = 0;
    f.waker_pid = 0;
    f.waker_tid = 0;
    if cfg.flags & CFG_HIST == 0 {
        read_args(spec, regs, ip, &mut f.args);
        f.str_len = read_str(spec, &f.args, &mut f.str);
    } else {
        f.str_len = 0;
    }
    st.depth = depth as u32 + 1;
    Ok(())
}

fn end_on_thread(hit: &Hit) -> Result<(), ()> {
    let Hit {
        spec,
        cfg,
        regs,
        ip,
        now,
        cookie,
        tgid,
        tid,
    } = *hit;

    let Some(st) = THREADS.get_ptr_mut(&tid) else {
        count(CNT_UNMATCHED_END);
        return Ok(());
    };
    let st = unsafe { &mut *st };
    // The innermost open frame of this span name; frames above it never got their end.
    let depth = st.depth as usize;
    let mut found = MAX_DEPTH;
    // Scan with a constant-bounded index (the verifier must see j < MAX_DEPTH); the last match
    // below depth is the innermost open frame.
    let mut j = 0;
    while j < MAX_DEPTH {
        if j < depth && st.frames[j].pair_id == spec.pair_id {
            found = j;
        }
        j += 1;
    }
    if found >= MAX_DEPTH {
        count(CNT_UNMATCHED_END);
        return Ok(());
    }
    if depth - 1 - found > 0 {
        count_n(CNT_UNMATCHED_START, (depth - 1 - found) as u64);
    }
    catch_up_running(st, current_task(), now);
    st.depth = found as u32;
    let acct_end = acct_now(st, now);
    let f = &st.frames[found];
    let acct = Acct {
        oncpu: acct_end.oncpu.saturating_sub(f.acct_start.oncpu),
        runq: acct_end.runq.saturating_sub(f.acct_start.runq),
        sleep: acct_end.sleep.saturating_sub(f.acct_start.sleep),
        io: acct_end.io.saturating_sub(f.acct_start.io),
    };
    count(CNT_SPANS);
    let dur = now.saturating_sub(f.start_ns);
    if cfg.flags & CFG_HIST != 0 {
        hist_add(spec.pair_id, dur, Some(&acct));
        return Ok(());
    }
    let Some(mut entry) = EVENTS.reserve::<SpanRecord>(0) else {
        count(CNT_LOST);
        return Ok(());
    };
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    fill_header(&mut rec.hdr, REC_SPAN, cookie, tgid, tid, now);
    rec.start_site = f.site;
    rec.start_tid = f.tid;
    rec.start_ns = f.start_ns;
    rec.acct = acct;
    rec.acct_valid = 1;
    rec.waker_pid = f.waker_pid;
    rec.waker_tid = f.waker_tid;
    rec.waker_comm = f.waker_comm;
    rec.longest_off_ns = f.longest_off_ns;
    rec.args = f.args;
    rec.str_len = f.str_len;
    if f.str_len > 0 {
        rec.str = f.str;
    }
    read_args(spec, regs, ip, &mut rec.end_args);
    entry.submit(ringbuf_flags(cfg));
    Ok(())
}

fn start_by_id(hit: &Hit) -> Result<(), ()> {
    let Hit {
        spec,
        regs,
        ip,
        now,
        cookie,
        tgid,
        tid,
        ..
    } = *hit;

    let f = unsafe { &mut *FRAME_SCRATCH.get_ptr_mut(0).ok_or(())? };
    f.site = cookie;
    f.pair_id = spec.pair_id;
    f.tid = tid;
    f.start_ns = now;
    f.longest_off_ns = 0;
    f.waker_pid = 0;
    read_args(spec, regs, ip, &mut f.args);
    f.str_len = read_str(spec, &f.args, &mut f.str);
    // Keep this thread's accounting running so a span that also ends here gets a time split.
    f.acct_start = Acct::default();
    if let Some(st) = thread_state(tid) {
        let st = unsafe { &mut *st };
        if !active(st) {
            st.state = TS_RUNNING;
            st.since_ns = now;
            st.last_waker_pid = 0;
        }
        catch_up_running(st, current_task(), now);
        f.acct_start = acct_now(st, now);
        st.id_open += 1;
    }
    let idx = spec.id_arg as usize;
    let key = IdKey {
        pair_id: spec.pair_id,
        tgid,
        span_id: if idx < MAX_ARGS { f.args[idx] } else { 0 },
    };
    if ID_SPANS.insert(&key, &*f, 0).is_err() {
        count(CNT_UNMATCHED_START);
        release_id_span(tid);
    }
    Ok(())
}

fn end_by_id(hit: &Hit, end_args: &mut [u64; MAX_ARGS]) -> Result<(), ()> {
    let Hit {
        spec,
        cfg,
        regs,
        ip,
        now,
        cookie,
        tgid,
        tid,
    } = *hit;

    read_args(spec, regs, ip, end_args);
    let idx = spec.id_arg as usize;
    let key = IdKey {
        pair_id: spec.pair_id,
        tgid,
        span_id: if idx < MAX_ARGS { end_args[idx] } else { 0 },
    };
    let Some(f) = ID_SPANS.get_ptr(&key) else {
        count(CNT_UNMATCHED_END);
        return Ok(());
    };
    let f = unsafe { &*f };
    count(CNT_SPANS);
    let dur = now.saturating_sub(f.start_ns);
    release_id_span(f.tid);
    // A split only means something when one thread ran the span from start to end.
    let mut acct = Acct::default();
    let mut acct_valid = 0;
    if f.tid == tid {
        if let Some(st) = THREADS.get_ptr_mut(&tid) {
            let st = unsafe { &mut *st };
            catch_up_running(st, current_task(), now);
            let a = acct_now(st, now);
            acct = Acct {
                oncpu: a.oncpu.saturating_sub(f.acct_start.oncpu),
                runq: a.runq.saturating_sub(f.acct_start.runq),
                sleep: a.sleep.saturating_sub(f.acct_start.sleep),
                io: a.io.saturating_sub(f.acct_start.io),
            };
            acct_valid = 1;
        }
    }
    if cfg.flags & CFG_HIST != 0 {
        hist_add(
            spec.pair_id,
            dur,
            if acct_valid != 0 { Some(&acct) } else { None },
        );
    } else if let Some(mut entry) = EVENTS.reserve::<SpanRecord>(0) {
        let rec = unsafe { &mut *entry.as_mut_ptr() };
        fill_header(&mut rec.hdr, REC_SPAN, cookie, tgid, tid, now);
        rec.start_site = f.site;
        rec.start_tid = f.tid;
        rec.start_ns = f.start_ns;
        rec.acct = acct;
        rec.acct_valid = acct_valid;
        rec.waker_pid = 0;
        rec.waker_tid = 0;
        rec.longest_off_ns = 0;
        rec.args = f.args;
        rec.str_len = f.str_len;
        if f.str_len > 0 {
            rec.str = f.str;
        }
        rec.end_args = *end_args;
        entry.submit(ringbuf_flags(cfg));
    } else {
        count(CNT_LOST);
    }
    let _ = ID_SPANS.remove(&key);
    Ok(())
}

/// An id-paired span that `tid` opened has ended (or was never stored).
#[inline(always)]
fn release_id_span(tid: u32) {
    if let Some(st) = THREADS.get_ptr_mut(&tid) {
        let st = unsafe { &mut *st };
        if st.id_open > 0 {
            st.id_open -= 1;
        }
    }
}

#[inline(always)]
fn hist_one(pair_id: u32, component: u32, v: u64) {
    let idx = pair_id * HIST_COMPONENTS as u32 + component;
    if let Some(h) = HISTS.get_ptr_mut(idx) {
        let h = unsafe { &mut *h };
        let b = log2_bucket(v);
        if b < HIST_BUCKETS {
            h.buckets[b] += 1;
        }
        h.count += 1;
        h.sum += v;
    }
}

#[inline(always)]
fn hist_add(pair_id: u32, dur: u64, acct: Option<&Acct>) {
    if pair_id >= MAX_PAIRS {
        return;
    }
    hist_one(pair_id, 0, dur);
    if let Some(a) = acct {
        hist_one(pair_id, 1, a.oncpu);
        hist_one(pair_id, 2, a.runq);
        hist_one(pair_id, 3, a.sleep);
        hist_one(pair_id, 4, a.io);
    }
}

/// TASK_UNINTERRUPTIBLE: disk and other D-state waits.
const TASK_UNINTERRUPTIBLE: u32 = 2;

/// The thread id of a `struct task_struct *`, through the offset user space found in BTF.
#[inline(always)]
fn task_tid(task: *const u8) -> Option<u32> {
    let off = CONFIG.get(0)?.task_pid_off as usize;
    if off == 0 {
        return None;
    }
    unsafe { bpf_probe_read_kernel(task.wrapping_add(off) as *const i32) }
        .ok()
        .map(|p| p as u32)
}

// The scheduler hooks are BTF tracepoints (raw tracepoints with typed arguments): cheaper than
// classic tracepoints, which build a perf record before calling BPF, and never skipped because
// some other BPF program or map syscall is active on the CPU.

/// sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
/// unsigned int prev_state). `prev` is the current task.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    let prev = bpf_get_current_pid_tgid() as u32;
    if let Some(st) = THREADS.get_ptr_mut(&prev) {
        let st = unsafe { &mut *st };
        if active(st) {
            let now = unsafe { bpf_ktime_get_ns() };
            let preempt: u64 = ctx.arg(0);
            let prev_task: *const u8 = ctx.arg(1);
            let prev_state: u64 = ctx.arg(3);
            let prev_state = prev_state as u32;
            catch_up_running(st, prev_task, now);
            snap_counters(st, prev_task);
            st.acct = acct_now(st, now);
            st.since_ns = now;
            st.off_start_ns = now;
            st.last_waker_pid = 0;
            st.last_waker_comm = [0; 16];
            st.state = if preempt & 1 != 0 || prev_state == 0 {
                TS_RUNQ
            } else if prev_state & TASK_UNINTERRUPTIBLE != 0 {
                TS_IO
            } else {
                TS_SLEEP
            };
        }
    }
    let next: *const u8 = ctx.arg(2);
    let Some(next) = task_tid(next) else {
        return 0;
    };
    if let Some(st) = THREADS.get_ptr_mut(&next) {
        let st = unsafe { &mut *st };
        if active(st) && st.state != TS_RUNNING {
            let now = unsafe { bpf_ktime_get_ns() };
            st.acct = acct_now(st, now);
            st.since_ns = now;
            st.state = TS_RUNNING;
            note_off_interval(st, now.saturating_sub(st.off_start_ns));
        }
    }
    0
}

/// Per CPU: how deep this CPU is in hard IRQ handlers, softirqs and hrtimer callbacks.
#[map]
static IRQ_CTX: PerCpuArray<u32> = PerCpuArray::with_max_entries(3, 0);
const CTX_HARDIRQ: u32 = 0;
const CTX_SOFTIRQ: u32 = 1;
const CTX_TIMER: u32 = 2;

#[inline(always)]
fn ctx_depth(kind: u32) -> u32 {
    IRQ_CTX.get(kind).copied().unwrap_or(0)
}

#[inline(always)]
fn ctx_enter(kind: u32) {
    if let Some(p) = IRQ_CTX.get_ptr_mut(kind) {
        unsafe { *p += 1 };
    }
}

#[inline(always)]
fn ctx_exit(kind: u32) {
    if let Some(p) = IRQ_CTX.get_ptr_mut(kind) {
        // An exit without its entry happens when we attach mid-interrupt.
        unsafe {
            if *p > 0 {
                *p -= 1
            }
        };
    }
}

/// The waker label when the wakeup runs in interrupt context.
#[inline(always)]
fn interrupt_label() -> Option<[u8; 16]> {
    let label: &[u8; 16] = if ctx_depth(CTX_TIMER) > 0 {
        b"[timer]\0\0\0\0\0\0\0\0\0"
    } else if ctx_depth(CTX_SOFTIRQ) > 0 {
        b"[softirq]\0\0\0\0\0\0\0"
    } else if ctx_depth(CTX_HARDIRQ) > 0 {
        b"[irq]\0\0\0\0\0\0\0\0\0\0\0"
    } else {
        return None;
    };
    Some(*label)
}

#[btf_tracepoint(function = "irq_handler_entry")]
pub fn irq_handler_entry(_ctx: BtfTracePointContext) -> i32 {
    ctx_enter(CTX_HARDIRQ);
    0
}

#[btf_tracepoint(function = "irq_handler_exit")]
pub fn irq_handler_exit(_ctx: BtfTracePointContext) -> i32 {
    ctx_exit(CTX_HARDIRQ);
    0
}

#[btf_tracepoint(function = "softirq_entry")]
pub fn softirq_entry(_ctx: BtfTracePointContext) -> i32 {
    ctx_enter(CTX_SOFTIRQ);
    0
}

#[btf_tracepoint(function = "softirq_exit")]
pub fn softirq_exit(_ctx: BtfTracePointContext) -> i32 {
    ctx_exit(CTX_SOFTIRQ);
    0
}

#[btf_tracepoint(function = "hrtimer_expire_entry")]
pub fn hrtimer_expire_entry(_ctx: BtfTracePointContext) -> i32 {
    ctx_enter(CTX_TIMER);
    0
}

#[btf_tracepoint(function = "hrtimer_expire_exit")]
pub fn hrtimer_expire_exit(_ctx: BtfTracePointContext) -> i32 {
    ctx_exit(CTX_TIMER);
    0
}

/// sched_waking(struct task_struct *p): runs in the waker's context.
#[btf_tracepoint(function = "sched_waking")]
pub fn sched_waking(ctx: BtfTracePointContext) -> i32 {
    let p: *const u8 = ctx.arg(0);
    let Some(pid) = task_tid(p) else {
        return 0;
    };
    if let Some(st) = THREADS.get_ptr_mut(&pid) {
        let st = unsafe { &mut *st };
        if active(st) && (st.state == TS_SLEEP || st.state == TS_IO) {
            let now = unsafe { bpf_ktime_get_ns() };
            st.acct = acct_now(st, now);
            st.since_ns = now;
            st.state = TS_RUNQ;
            // The waker is the current task, unless this runs in interrupt context: then the
            // current task is merely whoever the interrupt hit, and the waker is the interrupt.
            if let Some(label) = interrupt_label() {
                st.last_waker_pid = 0;
                st.last_waker_tid = 0;
                st.last_waker_comm = label;
            } else {
                let pid_tgid = bpf_get_current_pid_tgid();
                st.last_waker_pid = (pid_tgid >> 32) as u32;
                st.last_waker_tid = pid_tgid as u32;
                st.last_waker_comm = bpf_get_current_comm().unwrap_or([0; 16]);
            }
        }
    }
    0
}

/// sched_process_exit: runs in the exiting thread.
#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(_ctx: BtfTracePointContext) -> i32 {
    let tid = bpf_get_current_pid_tgid() as u32;
    if let Some(st) = THREADS.get_ptr(&tid) {
        let depth = unsafe { (*st).depth };
        if depth > 0 {
            count_n(CNT_UNMATCHED_START, depth as u64);
        }
        let _ = THREADS.remove(&tid);
    }
    0
}

#[cfg(not(target_arch = "bpf"))]
fn main() {}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
