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

use crate::args::ArgWords;
use crate::store::{copy_words, zero, zero_words};
use crate::{
    args::{copy_regs, ctx_sp, read_args, usdt_read_arg_ctx, REGS_WORDS},
    maps::{
        cas, count, count_n, current_comm_into, existing_thread, note_stateless_start, opaque,
        publish, ringbuf_flags, take_stateless_start, thread_state, Scratch, CONFIG, EVENTS,
        FRAME_SCRATCH, HISTS, ID_DROPPED, ID_SLOTS, ID_SPANS, OPAQUE_UPROBE, SCRATCH, SITES,
        WAIT_SUMS,
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
    acct_start: Option<Acct>,
    with_args: bool,
) {
    f.site = hit.cookie;
    f.pair_id = hit.spec.pair_id;
    f.tid = hit.tid;
    f.start_ns = hit.now;
    f.sp = ctx_sp(hit.ctx);
    // Zeroed word by word: a constant all-zero `Acct` stored whole is a `memset` call.
    match acct_start {
        Some(a) => f.acct_start = a,
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
    acct: Option<Acct>,
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
            acct.as_ref(),
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
        Some(a) => rec.acct = a,
        None => zero_words(&mut rec.acct),
    }
    rec.acct_valid = acct.is_some() as u32;
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

/// A span start paired per thread: push a frame.
fn start_on_thread<const S: bool>(hit: &Hit<S>) -> Result<(), ()> {
    let Some(st) = thread_state(hit.tid) else {
        count(CNT_THREADS_FULL);
        note_stateless_start(hit.tid);
        return Ok(());
    };
    if hit.split() {
        sched::resume_accounting(st, hit.now, hit.steal(), hit.tgid);
        sched::catch_up(st, hit.now);
    }
    // Counted before the snapshot: the spans open around this one hold the hit whole; this
    // one does not (a span's own start and end probes cost it only the small parts of their
    // traps after and before its two timestamps: measured, a leaf whose entry and `ret` are
    // both single-stepped reads 0.8 µs where each step costs several).
    if hit.split() {
        st.acct.add_probe(hit.spec.probe_ns);
    }
    let acct = hit.split().then(|| st.acct_at(hit.now, hit.steal()));
    // A full stack drops the start (and, through the thread's overflow count, its end).
    let Some(depth) = st.push() else {
        count(CNT_DEPTH_START);
        return Ok(());
    };
    // `get_mut` rather than indexing: the bound the verifier needs on the map-held depth,
    // without a panic path.
    let Some(f) = st.frames.get_mut(depth) else {
        return Ok(());
    };
    let with_args = hit.keeps_args();
    open_frame(hit, f, acct, with_args);
    // Only spans with a string argument touch the string map. `has_strs` keeps the depth + 1,
    // to find them again at the end.
    if with_args && hit.spec.nstrs > 0 {
        let key = str_key_thread(hit.tid, depth as u32);
        if usdt_keep_strs(hit.cookie, words(&f.args), &key, NO_ID_SLOT) != 0 {
            f.has_strs = depth as u32 + 1;
        }
    }
    Ok(())
}

/// A span end paired per thread: pop to the innermost open frame of the span's name.
fn end_on_thread<const S: bool>(hit: &Hit<S>) -> Result<(), ()> {
    // A tail-called function's `ret` closes a span only when that span's call is there.
    let tail = hit.spec.end_sp == END_SP_TAIL;
    let Some(st) = existing_thread(hit.tid) else {
        if !tail {
            stateless_end(hit.tid);
        }
        return Ok(());
    };
    // Counted for the spans open around it; the span it closes leaves it out (`own_end`).
    if hit.split() {
        st.acct.add_probe(hit.spec.probe_ns);
    }
    // Past the stack, an end belongs to the innermost dropped start, never to a frame below.
    if !tail && st.pop_overflow() {
        count(CNT_DEPTH_END);
        return Ok(());
    }
    let sp = hit.start_sp();
    // Hidden from the verifier before it is tested (see `opaque`): otherwise each depth the
    // search can end at is a verifier path of its own through all that follows.
    let found = opaque(st.find_open_raw(hit.spec.pair_id, sp) as u64, OPAQUE_UPROBE)
        .unwrap_or(MAX_DEPTH as u64) as usize;
    if found >= MAX_DEPTH {
        if !tail {
            stateless_end(hit.tid);
        }
        return Ok(());
    }
    // At a tail-called function's `ret`, that function may still be open right above at the
    // same stack pointer: it returns through this same instruction (its own end comes next),
    // so it stays, and this frame is marked closed for the end below to pop.
    let keep_above = tail
        && found + 1 < st.depth as usize
        && st.frames.get(found + 1).is_some_and(|a| a.sp == sp);
    if !keep_above {
        // Frames above the one closed never got their end.
        count_n(
            CNT_UNMATCHED_START,
            (st.depth as u64).saturating_sub(found as u64 + 1),
        );
    }
    // Before the pop: the frame being closed takes part in the repair's waker bookkeeping.
    if hit.split() {
        sched::catch_up(st, hit.now);
    }
    if !keep_above {
        st.depth = found as u32;
    }
    let acct_end = st.acct_at(hit.now, hit.steal());
    // `get` rather than indexing: no bounds-check panic path for the verifier to reject.
    let Some(f) = st.frames.get_mut(found) else {
        return Ok(());
    };
    close_span(
        hit,
        f,
        None,
        hit.split()
            .then(|| own_end(acct_end.since(&f.acct_start), hit.spec.probe_ns)),
        None,
        None,
    );
    drop_strs(f.has_strs, core::ptr::null());
    if keep_above {
        f.pair_id = PAIR_CLOSED;
    } else {
        st.pop_closed();
    }
    Ok(())
}

/// A span's split without its own end's probe hit, which was counted (for the spans around it)
/// before the end's snapshot.
#[inline(always)]
fn own_end(mut a: Acct, cost_ns: u32) -> Acct {
    a.probe_hits = a.probe_hits.wrapping_sub(1);
    a.probe_ns = a.probe_ns.wrapping_sub(cost_ns as u64);
    a
}

/// An end with no open frame: the end of a start dropped for a full THREADS map, or unmatched.
#[inline(always)]
fn stateless_end(tid: u32) {
    if take_stateless_start(tid) {
        count(CNT_THREADS_FULL_END);
    } else {
        count(CNT_UNMATCHED_END);
    }
}

/// An open id-paired span, found: where its frame is, and the `ID_SLOTS` slot holding it
/// (null when it is in `ID_SPANS`).
struct IdSpan {
    span: *mut IdFrame,
    slot: *mut IdSlot,
}

impl IdSpan {
    /// The span is over: its slot is free again (after every read of it: the exchange is a
    /// barrier), or its hash entry is deleted.
    #[inline(always)]
    fn release(&self, key: &IdKey) {
        if self.slot.is_null() {
            let _ = ID_SPANS.remove(key);
        } else {
            // SAFETY: a live ID_SLOTS value that this span owns.
            publish(unsafe { &mut (*self.slot).state }, ID_SLOT_FREE);
        }
    }
}

/// The open span under `key`: in its slot when it holds the slot, else in `ID_SPANS`.
#[inline(always)]
fn find_id_span(key: &IdKey) -> Option<IdSpan> {
    if let Some(slot) = ID_SLOTS.get_ptr_mut(key.slot()) {
        // SAFETY: a live array value. A slot in state OPEN is only written by the span that
        // holds it, whose markers run one after another; the key then is the owner's.
        let sl = unsafe { &mut *slot };
        // SAFETY: `state` is a field of the live value above; read volatile because another
        // CPU may change it (atomically) between reads.
        let state = unsafe { core::ptr::read_volatile(&sl.state) };
        if state == ID_SLOT_OPEN && sl.key == *key {
            return Some(IdSpan {
                span: &mut sl.span,
                slot,
            });
        }
    }
    ID_SPANS.get_ptr_mut(key).map(|span| IdSpan {
        span,
        slot: core::ptr::null_mut(),
    })
}

/// The slot for a span starting under `key`, taken: free, or already held by the same key (a
/// span id started again while open replaces the open one, as the hash insert did). None when
/// another open span holds it.
#[inline(always)]
fn claim_slot(key: &IdKey) -> Option<*mut IdSlot> {
    let slot = ID_SLOTS.get_ptr_mut(key.slot())?;
    // SAFETY: a live array value; `state` is only changed atomically.
    let sl = unsafe { &mut *slot };
    if cas(&mut sl.state, ID_SLOT_FREE, ID_SLOT_FILLING) {
        sl.key = *key;
        return Some(slot);
    }
    // SAFETY: as above: a field of a live value, changed only atomically.
    let state = unsafe { core::ptr::read_volatile(&sl.state) };
    (state == ID_SLOT_OPEN && sl.key == *key).then_some(slot)
}

/// A span start that carries an id: store the frame under (pair, process, id), in its slot
/// of `ID_SLOTS` or, when another span holds that, in `ID_SPANS`.
fn start_by_id<const S: bool>(hit: &Hit<S>) -> Result<(), ()> {
    // Keep this thread's accounting running so a span that also ends here gets a time split.
    let mut acct_start = None;
    // No split (`--no-sched`): the start touches no thread state, and its end none either.
    if let Some(st) = hit.split().then(|| thread_state(hit.tid)).flatten() {
        sched::resume_accounting(st, hit.now, hit.steal(), hit.tgid);
        sched::catch_up(st, hit.now);
        // As for a span paired per thread: its own start's hit is not inside it.
        st.acct.add_probe(hit.spec.probe_ns);
        acct_start = Some(st.acct_at(hit.now, hit.steal()));
        st.id_open += 1;
    }
    let key = hit.read_id_key();
    let slot = claim_slot(&key).unwrap_or(core::ptr::null_mut());
    let f = if slot.is_null() {
        // Built in per-CPU scratch, then inserted by reference: a frame is too big for the
        // BPF stack.
        // SAFETY: this CPU's slot, which nothing else uses while this program runs.
        unsafe { &mut *FRAME_SCRATCH.get_ptr_mut(0).ok_or(())? }
    } else {
        // SAFETY: the slot is ours (FILLING, or OPEN under our key): nothing else writes it.
        unsafe { &mut (*slot).span }
    };
    let with_args = hit.keeps_args();
    open_frame(hit, &mut f.frame, acct_start, with_args);
    // The frame's previous tenant's polls are still there. (Without a split polls are never
    // read.)
    if hit.split() {
        zero_words(&mut f.poll);
    }
    if with_args && hit.spec.nstrs > 0 {
        // In the slot's own entry of ID_STRS when the span holds a slot.
        let at = if slot.is_null() {
            NO_ID_SLOT
        } else {
            key.slot()
        };
        f.frame.has_strs = usdt_keep_strs(hit.cookie, words(&f.frame.args), &key, at);
    }
    if !slot.is_null() {
        // SAFETY: as above; from here its end (on any CPU) may find it.
        publish(unsafe { &mut (*slot).state }, ID_SLOT_OPEN);
        return Ok(());
    }
    if ID_SPANS.insert(&key, &*f, 0).is_err() {
        drop_strs(f.frame.has_strs, &key);
        // The map is full: the span is dropped, and its id remembered so its end is too.
        count(CNT_ID_FULL);
        let _ = ID_DROPPED.insert(&key, &1, 0);
        release_id_span(hit.tid);
    }
    Ok(())
}

/// A span end that carries an id: close the frame stored under the same id.
fn end_by_id<const S: bool>(hit: &Hit<S>, end_args: &mut [u64; MAX_ARGS]) -> Result<(), ()> {
    // Records carry the end arguments, so they are read once, into scratch; histograms need
    // only the id.
    let (key, end_args) = if hit.hist() {
        (hit.read_id_key(), None)
    } else {
        hit.read_args(end_args);
        (hit.id_key(end_args), Some(&*end_args))
    };
    let Some(found) = find_id_span(&key) else {
        // SAFETY: only the entry's presence is tested.
        if unsafe { ID_DROPPED.get(&key) }.is_some() {
            let _ = ID_DROPPED.remove(&key);
            count(CNT_ID_FULL_END);
        } else {
            count(CNT_UNMATCHED_END);
        }
        return Ok(());
    };
    // SAFETY: a live map value, written only by this span's own markers, which run one after
    // another. A hash entry stays valid until we return even though we delete it below (hash
    // map values are freed after an RCU grace period); a slot is handed back only at the end.
    let IdFrame { frame: f, poll } = unsafe { &mut *found.span };
    // This thread's state, looked up once: in the common case the span started here too, and
    // the release, the poll's close and the time split below are all about it.
    let split = hit.split();
    let mut mine = if split {
        existing_thread(hit.tid)
    } else {
        None
    };
    if split {
        if let Some(st) = mine.as_deref_mut() {
            st.acct.add_probe(hit.spec.probe_ns);
        }
        release_on(f.tid, hit.tid, &mut mine);
    }
    // An end inside a poll (the future ended its span before returning Ready) closes the poll.
    // Without a split no poll is entered, or read: the frame's were not even zeroed.
    if split && poll.enter_tid != 0 {
        let tid = poll.enter_tid;
        if tid == hit.tid {
            if let Some(st) = mine.as_deref_mut() {
                sched::catch_up(st, hit.now);
                poll.exit(tid, hit.now, st.acct_at(hit.now, hit.steal()));
            }
        }
        release_on(tid, hit.tid, &mut mine);
    }
    let (acct, poll) = if !split || hit.spec.flags & SPEC_NO_THREAD_SPLIT != 0 {
        (None, None)
    } else if poll.polls > 0 {
        // Polled: the polling threads' time while entered, the rest idle.
        (Some(poll.acct), Some(&*poll))
    } else if f.tid == hit.tid {
        // Not polled: a split only means something when one thread ran it from start to end.
        let acct = mine.map(|st| {
            sched::catch_up(st, hit.now);
            own_end(
                st.acct_at(hit.now, hit.steal()).since(&f.acct_start),
                hit.spec.probe_ns,
            )
        });
        (acct, None)
    } else {
        (None, None)
    };
    close_span(hit, f, Some(&key), acct, end_args, poll);
    drop_strs(f.has_strs, &key);
    found.release(&key);
    Ok(())
}

/// A poll marker's span: the open id-paired span under the id the marker carries. A marker
/// of a span that is not open (started before tracing, or dropped) is ignored: it has no
/// duration to split.
#[inline(always)]
fn polled_span<const S: bool>(hit: &Hit<S>) -> Option<&'static mut PollAcct> {
    let found = find_id_span(&hit.read_id_key())?;
    // SAFETY: a live map value (see end_by_id); only this span's markers write it, in order.
    Some(unsafe { &mut (*found.span).poll })
}

/// `<name>__enter(span_id)`: the span runs on this thread until its exit marker. Polls only
/// split a span's time, so without a split they are ignored.
fn poll_enter<const S: bool>(hit: &Hit<S>) -> Result<(), ()> {
    if !hit.split() {
        return Ok(());
    }
    let Some(p) = polled_span(hit) else {
        return Ok(());
    };
    let Some(st) = thread_state(hit.tid) else {
        count(CNT_THREADS_FULL);
        return Ok(());
    };
    // An exit lost on another thread: that thread's hold on accounting ends here.
    let prev = p.enter_tid;
    if prev != 0 && prev != hit.tid {
        release_id_span(prev);
        p.enter_tid = 0;
    }
    sched::resume_accounting(st, hit.now, hit.steal(), hit.tgid);
    sched::catch_up(st, hit.now);
    st.acct.add_probe(hit.spec.probe_ns);
    p.enter(hit.tid, hit.now, st.acct_at(hit.now, hit.steal()));
    // The entered span keeps this thread's accounting running, like an open frame does.
    if prev != hit.tid {
        st.id_open += 1;
    }
    Ok(())
}

/// `<name>__exit(span_id)`: the poll on this thread is over.
fn poll_exit<const S: bool>(hit: &Hit<S>) -> Result<(), ()> {
    if !hit.split() {
        return Ok(());
    }
    let Some(p) = polled_span(hit) else {
        return Ok(());
    };
    let Some(st) = existing_thread(hit.tid) else {
        return Ok(());
    };
    sched::catch_up(st, hit.now);
    st.acct.add_probe(hit.spec.probe_ns);
    if p.exit(hit.tid, hit.now, st.acct_at(hit.now, hit.steal())) && st.id_open > 0 {
        st.id_open -= 1;
    }
    Ok(())
}

/// [`release_id_span`] for `tid`, through `mine` (the state of `my_tid`, already looked up)
/// when it is that thread.
#[inline(always)]
fn release_on(tid: u32, my_tid: u32, mine: &mut Option<&'static mut ThreadState>) {
    if tid == my_tid {
        if let Some(st) = mine.as_deref_mut() {
            if st.id_open > 0 {
                st.id_open -= 1;
            }
        }
    } else {
        release_id_span(tid);
    }
}

/// An id-paired span that `tid` opened has ended (or was never stored).
#[inline(always)]
fn release_id_span(tid: u32) {
    if let Some(st) = existing_thread(tid) {
        if st.id_open > 0 {
            st.id_open -= 1;
        }
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
