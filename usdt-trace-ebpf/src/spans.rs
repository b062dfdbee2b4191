//! What a probe hit does: emit an event, open a span (push a frame on the thread's stack, or
//! store it under its id), or close one and report it as a record or into the histograms.

use aya_ebpf::{
    bindings::pt_regs,
    cty::c_void,
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns,
    },
    programs::ProbeContext,
    EbpfContext,
};
use usdt_trace_common::{
    agg::{CFG_AGG_ARGS, CFG_AGG_BY},
    hist_slot, str_key_thread, Acct, Config, CpuSteal, EventRecord, Frame, IdFrame, IdKey, IdSlot,
    PollAcct, RecordHeader, RecordKind, SiteRole, SiteSpec, SpanRecord, StackCopyRecord,
    StackRecord, StrsRecord, ThreadState, CFG_FILTER, CFG_HIST, CFG_STACK, CFG_STACK_COPY,
    CFG_STOPPED, CNT_DEPTH_END, CNT_DEPTH_START, CNT_EVENTS, CNT_ID_FULL, CNT_ID_FULL_END,
    CNT_LOST, CNT_SPANS, CNT_THREADS_FULL, CNT_THREADS_FULL_END, CNT_UNMATCHED_END,
    CNT_UNMATCHED_START, END_SP_POPPED, END_SP_SAME, END_SP_TAIL, HIST_COMPONENTS, HIST_DURATION,
    HIST_IDLE, HIST_IO, HIST_ONCPU, HIST_RUNQ, HIST_SLEEP, HIST_STEAL, ID_NONE, ID_SLOT_FILLING,
    ID_SLOT_FREE, ID_SLOT_OPEN, MAX_ARGS, MAX_DEPTH, MAX_PAIRS, NO_ID_SLOT, PAIR_CLOSED,
    SPEC_NO_THREAD_SPLIT, STRS_RECORD_SENT,
};

mod ids;
mod poll;
mod thread;
use ids::*;
use poll::*;
use thread::*;

use crate::args::ArgWords;
use crate::store::{copy_words, copy_words_of, forget, zero, zero_words};
use crate::{
    args::{copy_regs, ctx_sp, read_args, usdt_read_arg_ctx, REGS_WORDS},
    maps::{
        acct_scratch, cas, count, count_n, current_comm_into, existing_thread,
        note_stateless_start, opaque, publish, ringbuf_flags, take_stateless_start, thread_state,
        Scratch, ACCT_NOW, ACCT_SPLIT, CONFIG, EVENTS, FRAME_SCRATCH, HISTS, ID_DROPPED, ID_SLOTS,
        ID_SPANS, OPAQUE_UPROBE, SCRATCH, SITES, WAIT_SUMS,
    },
    sched,
    strs::{drop_strs, usdt_emit_strs, usdt_keep_strs},
};

/// Arguments as a global function takes them.
#[inline(always)]
fn words(args: &[u64; MAX_ARGS]) -> *const ArgWords {
    args as *const _ as *const ArgWords
}

/// One probe hit: what the site is and what the kernel told us about it.
struct Hit<'a, const S: bool> {
    /// The probe's context (its registers), for helpers that walk the stack.
    ctx: *mut c_void,
    spec: &'a SiteSpec,
    cfg: &'a Config,
    regs: &'a [u64; REGS_WORDS],
    now: u64,
    /// The site's BPF cookie: its index in `SITES`.
    cookie: u32,
    tgid: u32,
    tid: u32,
}

impl<const S: bool> Hit<'_, S> {
    /// `--hist`: spans go into the in-kernel histograms, no records are emitted.
    #[inline(always)]
    fn hist(&self) -> bool {
        self.cfg.flags & CFG_HIST != 0
    }

    /// Whether spans get a time split: only with the scheduler hooks attached. Without them a
    /// thread's state never leaves "running", and every span would read as all on-CPU; so
    /// `--no-sched` spans carry no split, and id-paired ones touch no thread state at all.
    /// A constant of the program (`usdt_site` or `usdt_site_nosplit`), not a flag tested per
    /// hit: each program is verified without the other's paths.
    #[inline(always)]
    fn split(&self) -> bool {
        S
    }

    /// This CPU's steal counter, read where a split is taken (four kernel reads, so only
    /// there): it splits the on-CPU stretch in progress into runtime and the host's steal.
    #[inline(always)]
    fn steal(&self) -> CpuSteal {
        if S {
            // SAFETY: the helper has no preconditions; the task is only read through
            // bpf_probe_read_kernel.
            sched::cpu_steal(unsafe { bpf_get_current_task() } as *const u8)
        } else {
            CpuSteal::UNKNOWN
        }
    }

    /// Whether span starts keep their arguments (and string): always when records are made,
    /// in histogram mode only when a `--by` key needs them.
    #[inline(always)]
    fn keeps_args(&self) -> bool {
        !self.hist() || self.cfg.flags & CFG_AGG_ARGS != 0
    }

    #[inline(always)]
    fn read_args(&self, out: &mut [u64; MAX_ARGS]) {
        read_args(self.spec, self.regs, out);
    }

    /// The key of the span whose id this hit carries.
    #[inline(always)]
    fn key(&self, span_id: u64) -> IdKey {
        IdKey {
            pair_id: self.spec.pair_id,
            tgid: self.tgid,
            span_id,
        }
    }

    /// The span id key of this hit, from its arguments already read into `args`.
    #[inline(always)]
    fn id_key(&self, args: &[u64; MAX_ARGS]) -> IdKey {
        // The bound check keeps the map-supplied index verifiable (and ID_NONE reads as 0).
        let idx = self.spec.id_arg as usize;
        self.key(if idx < MAX_ARGS { args[idx] } else { 0 })
    }

    /// The span id key of this hit, reading only the id argument, from the context: in
    /// histogram mode the registers are not copied at all.
    #[inline(always)]
    fn read_id_key(&self) -> IdKey {
        self.key(match self.spec.args.get(self.spec.id_arg as usize) {
            Some(d) => usdt_read_arg_ctx(self.ctx as *mut pt_regs, d),
            None => 0,
        })
    }

    /// The stack pointer the start this end closes must have had (0: any), see `END_SP_*`.
    #[inline(always)]
    fn start_sp(&self) -> u64 {
        match self.spec.end_sp {
            END_SP_SAME | END_SP_TAIL => ctx_sp(self.ctx),
            END_SP_POPPED => ctx_sp(self.ctx).wrapping_sub(8),
            _ => 0,
        }
    }

    #[inline(always)]
    fn fill_header(&self, h: &mut RecordHeader, kind: RecordKind) {
        h.kind = kind;
        h.site = self.cookie;
        h.pid = self.tgid;
        h.tid = self.tid;
        h.ts_ns = self.now;
        // Straight into the record: the helper writes the destination buffer, no stack copy.
        current_comm_into(&mut h.comm);
    }
}

/// The generic uprobe program: the site's cookie says what this hit is. `S`: whether spans
/// get a time split ([`Hit::split`]).
#[inline(always)]
pub fn on_site<const S: bool>(ctx: &ProbeContext) -> Result<(), ()> {
    // SAFETY: the helper only reads the cookie of the link this program runs for.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let spec = SITES.get(cookie).ok_or(())?;
    let cfg = CONFIG.get(0).ok_or(())?;
    if cfg.flags & CFG_STOPPED != 0 {
        return Ok(());
    }
    // No PID test here: with -p or -c, every link is scoped to its process by the kernel
    // (uprobe_multi's pid, a perf event's target), so other processes' hits never arrive.
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    let hist = cfg.flags & CFG_HIST != 0;
    // Poll markers (ENTER/EXIT) are no events: they keep accounting in --hist mode too.
    if hist && spec.role == SiteRole::EVENT {
        // Histograms are of spans: an event is only counted.
        count(CNT_EVENTS);
        return Ok(());
    }
    // The registers and the end arguments live in a per-CPU scratch map: the BPF stack has
    // only 512 bytes.
    // SAFETY: this CPU's slot, which nothing else uses while this program runs.
    let Scratch { regs, end_args } = unsafe { &mut *SCRATCH.get_ptr_mut(0).ok_or(())? };
    // One copy of the registers: the spec's register numbers index into it. Histograms need
    // no arguments but a span id, which is read from the context itself, so that mode skips
    // the copy unless a `--by` key needs arguments. (`regs` then holds an earlier hit's
    // registers, which nothing reads.)
    if !hist || cfg.flags & CFG_AGG_ARGS != 0 {
        copy_regs(ctx, regs);
    }
    let hit = Hit::<S> {
        ctx: ctx.as_ptr(),
        spec,
        cfg,
        regs,
        // SAFETY: the helper has no preconditions.
        now: unsafe { bpf_ktime_get_ns() },
        cookie,
        tgid,
        tid,
    };
    match spec.role {
        SiteRole::START if spec.id_arg != ID_NONE => start_by_id(&hit),
        SiteRole::START => start_on_thread(&hit),
        SiteRole::END if spec.id_arg != ID_NONE => end_by_id(&hit, end_args),
        SiteRole::END => end_on_thread(&hit),
        SiteRole::ENTER => poll_enter(&hit),
        SiteRole::EXIT => poll_exit(&hit),
        _ => emit_event(&hit, end_args),
    }
}

fn emit_event<const S: bool>(hit: &Hit<S>, args: &mut [u64; MAX_ARGS]) -> Result<(), ()> {
    count(CNT_EVENTS);
    // Inside an open span of this thread the hit is part of that span's time.
    if hit.split() {
        if let Some(st) = existing_thread(hit.tid) {
            if st.active() {
                st.acct.add_probe(hit.spec.probe_ns);
            }
        }
    }
    if hit.hist() {
        return Ok(());
    }
    if hit.cfg.flags & CFG_FILTER != 0 {
        hit.read_args(args);
        if crate::filter::rejects(hit.cookie, args) {
            return Ok(());
        }
    }
    // Strings travel in a record of their own, just before the event's; the strings function
    // reads the arguments itself (NULL), where the verifier checks that code once.
    let mut has_strs = 0;
    if hit.spec.nstrs > 0 {
        has_strs = usdt_emit_strs(hit.cookie, hit.now, 0, core::ptr::null(), core::ptr::null());
    }
    let Some(mut entry) = EVENTS.reserve::<EventRecord>(0) else {
        count(CNT_LOST);
        return Ok(());
    };
    // SAFETY: the reservation is an EventRecord-sized, aligned slot that only we write; every
    // field user space reads is written below.
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    hit.fill_header(&mut rec.hdr, RecordKind::EVENT);
    hit.read_args(&mut rec.args);
    rec.has_strs = has_strs;
    entry.submit(ringbuf_flags(
        hit.cfg,
        record_bytes::<EventRecord>()
            + (has_strs == STRS_RECORD_SENT) as usize * record_bytes::<StrsRecord>(),
    ));
    Ok(())
}

/// Fills a newly opened span's frame. `acct_start`: the thread's time split totals, when the
/// span has a split; `with_args`: capture the start arguments.
#[inline(always)]
fn open_frame<const S: bool>(
    hit: &Hit<S>,
    f: &mut Frame,
    acct_start: Option<&Acct>,
    with_args: bool,
) {
    f.site = hit.cookie;
    f.pair_id = hit.spec.pair_id;
    f.tid = hit.tid;
    f.start_ns = hit.now;
    f.sp = ctx_sp(hit.ctx);
    // Zeroed word by word: a constant all-zero `Acct` stored whole is a `memset` call.
    match acct_start {
        Some(a) => copy_words_of(&mut f.acct_start, a),
        None => zero_words(&mut f.acct_start),
    }
    // Neighbouring zero stores become a call of a byte-loop `memset` subprogram (on every
    // span start); volatile stores stay stores.
    zero(&mut f.longest_off_ns);
    zero(&mut f.waker_pid);
    zero(&mut f.waker_tid);
    zero(&mut f.has_strs);
    if with_args {
        hit.read_args(&mut f.args);
    }
}

/// Counts a closed span and reports it: into the histograms, or as a record. `id_key` is the
/// key of a span paired by id (its start strings are kept under it); `acct` the span's time
/// split when it has one; `end_args` the end arguments when already read (else they are read
/// straight into the record).
#[inline(always)]
fn close_span<const S: bool>(
    hit: &Hit<S>,
    f: &Frame,
    id_key: Option<&IdKey>,
    acct: Option<&Acct>,
    end_args: Option<&[u64; MAX_ARGS]>,
    poll: Option<&PollAcct>,
) {
    count(CNT_SPANS);
    let dur = hit.now.saturating_sub(f.start_ns);
    // The flag first: without --filter, no call into the filter function (and its map
    // lookups) per span.
    if hit.cfg.flags & CFG_FILTER != 0 && crate::filter::rejects(f.site, &f.args) {
        return;
    }
    if hit.hist() {
        // Before hist_add, not after: keeping `f` live across it would split the verifier's
        // states there and cost it ~100K insns.
        if hit.cfg.flags & CFG_AGG_BY != 0 {
            let _ = crate::agg::usdt_by_span(
                f,
                f.has_strs,
                id_key.map_or(core::ptr::null(), |k| k as *const IdKey),
                hit.cookie,
                dur,
            );
        }
        // A polled span's idle time counts only in the idle histogram: user space spreads it
        // over all split spans when it adds up the mean (thread-local spans' idle is 0).
        hist_add(
            hit.spec.pair_id,
            // With --by, the span's duration went into its key's histogram (or its name's
            // "other"), whose sum is the name's: user space adds them up.
            (hit.cfg.flags & CFG_AGG_BY == 0).then_some(dur),
            acct,
            poll.map(|p| p.idle_ns(dur)),
        );
        return;
    }
    // `--min`: decided before a ring slot is reserved, so short spans cost no copy at all.
    if crate::filter::below_min(hit.cfg, dur) {
        return;
    }
    if hit.cfg.flags & CFG_STACK_COPY != 0 {
        crate::stack::emit_copy(hit.ctx, hit.cookie, hit.now);
    } else if hit.cfg.flags & CFG_STACK != 0 {
        crate::stack::emit(hit.ctx, hit.cookie, hit.now);
    }
    // Strings travel in a record of their own, just before the span's (`f.has_strs`: where the
    // start's are kept).
    let mut has_strs = 0;
    if f.has_strs != 0 || hit.spec.nstrs > 0 {
        // Without the end arguments (NULL), the strings function reads them itself.
        has_strs = usdt_emit_strs(
            hit.cookie,
            hit.now,
            f.has_strs,
            id_key.map_or(core::ptr::null(), |k| k as *const IdKey),
            end_args.map_or(core::ptr::null(), words),
        );
    }
    let Some(mut entry) = EVENTS.reserve::<SpanRecord>(0) else {
        count(CNT_LOST);
        return;
    };
    // SAFETY: the reservation is a SpanRecord-sized, aligned slot that only we write; every
    // field user space reads is written below.
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    hit.fill_header(&mut rec.hdr, RecordKind::SPAN);
    rec.start_site = f.site;
    rec.start_tid = f.tid;
    rec.start_ns = f.start_ns;
    // As in `open_frame`: a constant zero `Acct` stored whole is a `memset` call.
    match acct {
        Some(a) => copy_words_of(&mut rec.acct, a),
        None => zero_words(&mut rec.acct),
    }
    rec.acct_valid = acct.is_some() as u32;
    match acct {
        Some(_) => rec.steal_start = f.acct_start.steal,
        None => zero(&mut rec.steal_start),
    }
    match poll {
        Some(p) => {
            rec.idle_ns = p.idle_ns(dur);
            rec.polls = p.polls;
            rec.threads = p.threads;
        }
        None => {
            // As in `open_frame`: not a memset call.
            zero(&mut rec.idle_ns);
            zero(&mut rec.polls);
            zero(&mut rec.threads);
        }
    }
    rec.waker_pid = f.waker_pid;
    rec.waker_tid = f.waker_tid;
    copy_waker_comm(rec, f);
    rec.longest_off_ns = f.longest_off_ns;
    copy_words(&mut rec.args, &f.args);
    rec.has_strs = has_strs;
    match end_args {
        Some(a) => copy_words(&mut rec.end_args, a),
        None => hit.read_args(&mut rec.end_args),
    }
    // This span's records: the wakeup check counts them all (the strings and the stack are
    // submitted without one).
    let mut bytes = record_bytes::<SpanRecord>()
        + (has_strs == STRS_RECORD_SENT) as usize * record_bytes::<StrsRecord>();
    if hit.cfg.flags & CFG_STACK_COPY != 0 {
        bytes += record_bytes::<StackCopyRecord>();
    } else if hit.cfg.flags & CFG_STACK != 0 {
        bytes += record_bytes::<StackRecord>();
    }
    entry.submit(ringbuf_flags(hit.cfg, bytes));
}

/// Ring buffer bytes a record of type `T` takes: its 8-byte header, and the size rounded up to
/// 8.
#[inline(always)]
const fn record_bytes<T>() -> usize {
    8 + core::mem::size_of::<T>().next_multiple_of(8)
}

/// The waker's name from the frame into the record, as two word copies: both fields sit at
/// 8-byte offsets of 8-byte-aligned structs (checked below). A plain assignment is a call of
/// the byte-loop `memcpy` subprogram, and `bpf_probe_read_kernel` a helper call (~20 ns).
#[inline(always)]
fn copy_waker_comm(rec: &mut SpanRecord, f: &Frame) {
    const _: () = assert!(core::mem::offset_of!(SpanRecord, waker_comm) % 8 == 0);
    const _: () = assert!(core::mem::offset_of!(Frame, waker_comm) % 8 == 0);
    const _: () = assert!(core::mem::align_of::<SpanRecord>() >= 8);
    const _: () = assert!(core::mem::align_of::<Frame>() >= 8);
    let src = f.waker_comm.as_ptr() as *const u64;
    let dst = rec.waker_comm.as_mut_ptr() as *mut u64;
    for i in 0..2 {
        // SAFETY: in bounds (16 bytes each) and 8-byte aligned (asserted above).
        unsafe { core::ptr::write_volatile(dst.add(i), core::ptr::read_volatile(src.add(i))) };
    }
}

#[inline(always)]
fn hist_one(pair_id: u32, component: usize, v: u64) {
    usdt_hist_one(pair_id, component as u32, v);
}

/// A global BPF function (scalar arguments only): the bucket arithmetic is verified once
/// instead of at each of the five components on every path that closes a span, a fifth of the
/// uprobe program's verification and of `watch`'s attach time.
#[no_mangle]
#[inline(never)]
pub extern "C" fn usdt_hist_one(pair_id: u32, component: u32, v: u64) -> u32 {
    let component = component as usize;
    // Checked again here: a global function is verified for any arguments.
    if component >= HIST_COMPONENTS || pair_id >= MAX_PAIRS {
        return 0;
    }
    if let Some(h) = HISTS.get_ptr_mut(hist_slot(pair_id, component)) {
        // SAFETY: this CPU's slot, which nothing else writes while this program runs.
        unsafe { &mut *h }.add(v);
    }
    0
}

#[inline(always)]
fn hist_add(pair_id: u32, dur: Option<u64>, acct: Option<&Acct>, idle: Option<u64>) {
    // Beyond MAX_PAIRS a pair's slots would run into the end of HISTS (or wrap): no histogram.
    if pair_id >= MAX_PAIRS {
        return;
    }
    if let Some(d) = dur {
        hist_one(pair_id, HIST_DURATION, d);
    }
    if let Some(a) = acct {
        // Zero parts are not counted: user space counts them back from the on-CPU count,
        // which every split span adds to (`usdt_trace_common::fill_zero_parts`). Added
        // last, so a read between these updates never finds more split spans than parts.
        if a.runq != 0 {
            hist_one(pair_id, HIST_RUNQ, a.runq);
        }
        if a.sleep != 0 {
            hist_one(pair_id, HIST_SLEEP, a.sleep);
        }
        if a.io != 0 {
            hist_one(pair_id, HIST_IO, a.io);
        }
        if a.steal != 0 {
            hist_one(pair_id, HIST_STEAL, a.steal);
        }
        // What the sleep and io waited on: every kind nests in one of them, so a span with
        // neither (most spans of a busy thread) waited on nothing and costs no lookup, unless
        // probes fired inside it (their count and cost are summed there too).
        if a.sleep | a.io | a.probe_hits as u64 != 0 {
            if let Some(w) = WAIT_SUMS.get_ptr_mut(pair_id) {
                // SAFETY: this CPU's entry, which nothing else writes while this program runs.
                unsafe { &mut *w }.add(a);
            }
        }
        hist_one(pair_id, HIST_ONCPU, a.oncpu);
    }
    if let Some(i) = idle {
        hist_one(pair_id, HIST_IDLE, i);
    }
}
