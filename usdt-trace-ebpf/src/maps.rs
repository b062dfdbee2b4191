//! Every map of the object, and the small helpers over them that all programs share.
//!
//! User space finds maps by these static names; renaming one breaks `tracer/`.

use aya_ebpf::{
    bindings::{
        BPF_F_NO_PREALLOC, BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP,
    },
    helpers::bpf_get_current_task,
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use usdt_trace_common::{
    task_slot, Acct, Config, Hist, IdFrame, IdKey, IdSlot, SiteSpec, StrSet, ThreadState, WaitSums,
    HIST_COMPONENTS, MAX_ARGS, MAX_PAIRS, NUM_COUNTERS, SYSCALL_CLASS_LEN,
};

use crate::args::REGS_WORDS;

/// The current task's name, straight into `dst` (the helper NUL-pads it, and zeroes it on
/// failure). aya's `bpf_get_current_comm()` returns it by value from a zeroed stack buffer,
/// and that zeroing is a call of a byte-loop `memset` subprogram: 1.4% of a traced loop's CPU
/// with `--by comm`.
#[inline(always)]
pub fn current_comm_into(dst: &mut [u8; 16]) {
    // SAFETY: `dst` is a 16-byte buffer we own, and its length is passed.
    unsafe {
        aya_ebpf::helpers::generated::bpf_get_current_comm(
            dst.as_mut_ptr() as *mut aya_ebpf::cty::c_void,
            dst.len() as u32,
        )
    };
}

/// The spec of every probe site, indexed by the site's BPF cookie. User space sizes it.
#[map]
pub static SITES: Array<SiteSpec> = Array::with_max_entries(1, 0);
#[map]
pub static CONFIG: Array<Config> = Array::with_max_entries(1, 0);
/// `SC_*` per syscall number: what a thread that sleeps in that syscall waits on. User space
/// fills it for the machine's architecture; unfilled entries are `SC_NONE`.
#[map]
pub static SYSCALL_CLASS: Array<u8> = Array::with_max_entries(SYSCALL_CLASS_LEN, 0);
/// Span stack and scheduler accounting per thread id; an entry exists from a thread's first
/// span start until it exits. User space sizes it (`--max-threads`); past that, starts on new
/// threads are dropped and counted.
#[map]
pub static THREADS: HashMap<u32, ThreadState> = HashMap::with_max_entries(4096, BPF_F_NO_PREALLOC);
/// How many threads have an entry in THREADS, at index 0. The scheduler hooks run on every
/// context switch of the machine: while this is 0 (no thread of a traced process has opened
/// a span yet, or all have exited) they return after this one lookup, which the verifier
/// inlines into a load.
#[map]
pub static TRACKED: Array<u64> = Array::with_max_entries(1, 0);

/// Whether any thread has per-thread state (see TRACKED).
#[inline(always)]
pub fn any_tracked() -> bool {
    match TRACKED.get(0) {
        // SAFETY: an aligned u64 in a map value; a torn read is impossible on 64-bit BPF.
        Some(n) => (unsafe { core::ptr::read_volatile(n) }) != 0,
        None => true,
    }
}

/// Per `task_slot` of a `struct task_struct` address: how many threads that may have a span
/// open hash there (`ThreadState::in_filter`). The scheduler hooks test a task here, one array
/// load, before reading its pid and looking it up in THREADS, so a switch costs a lookup only
/// for a thread that may have a span open.
///
/// Exact in the one direction that matters: a thread with a span open is always counted. Only
/// the thread itself adds to the count, in the probe that opens a span (before the span is
/// there to see); it leaves it in `sched_switch` as it gets off the CPU with no span open, in
/// its own context, where none of its probes can run. Other threads only ever close its id
/// spans, which cannot open one; when that leaves it with none, it stays counted until its
/// next switch-out, which costs one lookup.
#[map]
static TRACKED_TASKS: Array<u64> = Array::with_max_entries(usdt_trace_common::TASK_SLOTS, 0);

/// An atomic add (BPF_ATOMIC) to a u64 shared by all CPUs: threads start and exit on
/// different CPUs at once. The BPF target has no `AtomicU64::fetch_add` (no
/// compare-and-swap), only the intrinsic.
#[inline(always)]
fn atomic_add(p: *mut u64, delta: i64) {
    // SAFETY: an aligned u64 in a map value.
    #[cfg(target_arch = "bpf")]
    unsafe {
        core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
            p,
            delta as u64,
        )
    };
    #[cfg(not(target_arch = "bpf"))]
    let _ = (p, delta);
}

/// The current thread got (+1) or lost (-1) its THREADS entry.
#[inline(always)]
fn tracked_add(delta: i64) {
    if let Some(p) = TRACKED.get_ptr_mut(0) {
        atomic_add(p, delta);
    }
}

/// The current thread, whose state `st` is, may open a span: count it in TRACKED_TASKS (once).
#[inline(always)]
pub fn enter_filter(st: &mut ThreadState) {
    if st.in_filter == 0 {
        st.in_filter = 1;
        filter_add(1);
    }
}

/// The current thread, whose state `st` is, has no span open: it leaves TRACKED_TASKS.
#[inline(always)]
pub fn leave_filter(st: &mut ThreadState) {
    if st.in_filter != 0 {
        st.in_filter = 0;
        filter_add(-1);
    }
}

#[inline(always)]
fn filter_add(delta: i64) {
    // SAFETY: the helper has no preconditions; the address is only hashed.
    let task = unsafe { bpf_get_current_task() };
    if let Some(p) = TRACKED_TASKS.get_ptr_mut(task_slot(task)) {
        atomic_add(p, delta);
    }
}

/// Whether the task at kernel address `task` may have a span open (never false for one that
/// has: see TRACKED_TASKS).
#[inline(always)]
pub fn maybe_tracked(task: u64) -> bool {
    match TRACKED_TASKS.get(task_slot(task)) {
        // SAFETY: an aligned u64 in a map value.
        Some(n) => (unsafe { core::ptr::read_volatile(n) }) != 0,
        None => true,
    }
}

/// The current thread's THREADS entry is gone: one fewer tracked thread.
#[inline(always)]
pub fn untrack() {
    tracked_add(-1);
}

/// Open spans paired by id, first choice: one slot per key hash (`IdKey::slot`), taken and
/// freed with atomic exchanges (see `usdt_trace_common::ID_SLOTS`).
#[map]
pub static ID_SLOTS: Array<IdSlot> = Array::with_max_entries(usdt_trace_common::ID_SLOTS, 0);

/// Compare-and-exchange of a map-held word shared by all CPUs (BPF_CMPXCHG, 64-bit: the BPF
/// target has no 32-bit form without ALU32). True when `*p` was `old` and is now `new`.
#[inline(always)]
pub fn cas(p: *mut u64, old: u64, new: u64) -> bool {
    // SAFETY: an aligned u64 in a map value; the instruction is atomic on every CPU.
    #[cfg(target_arch = "bpf")]
    unsafe {
        core::intrinsics::atomic_cxchg::<
            u64,
            { core::intrinsics::AtomicOrdering::SeqCst },
            { core::intrinsics::AtomicOrdering::SeqCst },
        >(p, old, new)
        .1
    }
    #[cfg(not(target_arch = "bpf"))]
    {
        let _ = (p, old, new);
        false
    }
}

/// An atomic store that orders every access before it (BPF_XCHG is a full barrier): what
/// hands a slot over, after its contents are written or read.
#[inline(always)]
pub fn publish(p: *mut u64, v: u64) {
    // SAFETY: as for `cas`.
    #[cfg(target_arch = "bpf")]
    unsafe {
        core::intrinsics::atomic_xchg::<u64, { core::intrinsics::AtomicOrdering::SeqCst }>(p, v);
    }
    #[cfg(not(target_arch = "bpf"))]
    let _ = (p, v);
}

/// Open spans paired by id whose slot in ID_SLOTS was taken. User space sizes it
/// (`--max-open-ids`).
#[map]
pub static ID_SPANS: HashMap<IdKey, IdFrame> = HashMap::with_max_entries(65536, BPF_F_NO_PREALLOC);
/// The `--str` strings of open spans that captured any at their start, under
/// `str_key_thread(tid, depth)` or the span's id key. User space sizes it (`--max-open-strs`).
/// A frame abandoned by an outer end leaves its entry behind until a span at the same depth
/// replaces it; a full map only costs later spans their start strings.
#[map]
pub static STRS: HashMap<IdKey, StrSet> = HashMap::with_max_entries(16384, BPF_F_NO_PREALLOC);
/// The `--str` strings of the id-paired span holding the same slot of ID_SLOTS, when its start
/// captured any: written in place, where an insert into STRS copies a whole 4 KB `StrSet` and
/// its delete frees it, on every span. Only the slot's owner touches its entry, and only while
/// it holds the slot. User space sizes it to ID_SLOTS with `--str`, else to 1 (16 MB unused).
#[map]
pub static ID_STRS: Array<StrSet> = Array::with_max_entries(usdt_trace_common::ID_SLOTS, 0);
/// Per CPU: a span start's strings are read here, then inserted into STRS.
#[map]
pub static STR_SCRATCH: PerCpuArray<StrSet> = PerCpuArray::with_max_entries(1, 0);
/// Per CPU: a thread's totals at a poll marker ([`ACCT_NOW`]) and a closing span's time
/// split ([`ACCT_SPLIT`]), built here rather than on the stack (see `spans::span_split`).
#[map]
static ACCT_SCRATCH: PerCpuArray<Acct> = PerCpuArray::with_max_entries(2, 0);
pub const ACCT_NOW: u32 = 0;
pub const ACCT_SPLIT: u32 = 1;

/// This CPU's `ACCT_SCRATCH` slot `i`.
#[inline(always)]
pub fn acct_scratch(i: u32) -> Option<&'static mut Acct> {
    // SAFETY: this CPU's slot, which nothing else uses while this program runs (each is
    // written and read within one hit, and a hit takes the slot it names only once at a time).
    ACCT_SCRATCH.get_ptr_mut(i).map(|p| unsafe { &mut *p })
}

/// Per CPU: the arguments `usdt_emit_strs` reads for itself (off its stack, see there).
#[map]
pub static STR_ARGS: PerCpuArray<[u64; MAX_ARGS]> = PerCpuArray::with_max_entries(1, 0);
/// Threads that had span starts dropped because THREADS was full, and how many of those
/// starts are still waiting for their end: such an end is a drop, not an unmatched end.
/// An LRU so it never refuses; an evicted entry only makes later ends count as unmatched.
#[map]
pub static NO_STATE_TIDS: LruHashMap<u32, u32> = LruHashMap::with_max_entries(16384, 0);
/// Ids of spans whose start was dropped because ID_SPANS was full, for the same reason.
#[map]
pub static ID_DROPPED: LruHashMap<IdKey, u8> = LruHashMap::with_max_entries(16384, 0);
/// Never written: a zeroed ThreadState to insert from (too big for the 512-byte BPF stack).
#[map]
pub static ZERO_THREAD: PerCpuArray<ThreadState> = PerCpuArray::with_max_entries(1, 0);
/// Scratch space for building an id-paired frame before inserting it: an IdFrame (~300 bytes)
/// does not fit on the BPF stack next to everything else.
#[map]
pub static FRAME_SCRATCH: PerCpuArray<IdFrame> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU room for the register copy and end arguments: the BPF stack has only 512 bytes.
#[repr(C)]
pub struct Scratch {
    pub regs: [u64; REGS_WORDS],
    pub end_args: [u64; MAX_ARGS],
}
#[map]
pub static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);
/// Per CPU: the words that [`opaque`] passes values through, one per kind of program
/// ([`OPAQUE_UPROBE`], [`OPAQUE_SCHED`]): a uprobe program can be interrupted by a scheduler
/// hook on its CPU, never between its own store and load of its own word.
#[map]
static OPAQUE: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);
pub const OPAQUE_UPROBE: u32 = 0;
pub const OPAQUE_SCHED: u32 = 1;

/// `v`, as a number the verifier knows nothing about: stored to map memory and loaded back.
/// A bounded loop leaves one verifier state per exit, each with its own exact result; a test
/// of that exact value (even `< MAX_DEPTH`) marks it precise, and everything after it is then
/// verified once per possible value. Whether that happened used to hang on how LLVM happened
/// to allocate registers, so a change anywhere could push the program past the 1M budget.
///
/// The scheduler hooks also turn task pointers into plain numbers with it, to hash them: a
/// pointer from BTF admits no arithmetic, but stored to a map it reads back as a number.
#[inline(always)]
pub fn opaque(v: u64, word: u32) -> Option<u64> {
    // None only if the array lookup failed, which it cannot: then `v` itself would be handed
    // back, still a pointer or still a known value.
    let p = OPAQUE.get_ptr_mut(word)?;
    // SAFETY: this CPU's word, which nothing else uses while this program runs.
    unsafe {
        core::ptr::write_volatile(p, v);
        Some(core::ptr::read_volatile(p))
    }
}

/// `CNT_*` counters, summed over CPUs by user space.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(NUM_COUNTERS, 0);
/// `--hist`: one histogram per span name and component, at `hist_slot(pair_id, component)`.
#[map]
pub static HISTS: PerCpuArray<Hist> =
    PerCpuArray::with_max_entries(MAX_PAIRS * HIST_COMPONENTS as u32, 0);
/// `--hist`: per span name (pair id), what its closed spans waited on, by kind. User space
/// sizes it to the span names HISTS has room for.
#[map]
pub static WAIT_SUMS: PerCpuArray<WaitSums> = PerCpuArray::with_max_entries(MAX_PAIRS, 0);
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 24, 0);
/// Per CPU: how deep this CPU is in hard IRQ handlers, softirqs and hrtimer callbacks
/// (indexed by `irq::Ctx`).
#[map]
pub static IRQ_CTX: PerCpuArray<u32> = PerCpuArray::with_max_entries(3, 0);

#[inline(always)]
pub fn count(idx: u32) {
    count_n(idx, 1);
}

#[inline(always)]
pub fn count_n(idx: u32, n: u64) {
    if let Some(p) = COUNTERS.get_ptr_mut(idx) {
        // SAFETY: a valid per-CPU slot, and no other program writes it on this CPU while we run.
        unsafe { *p += n };
    }
}

/// Flags for submitting a ring buffer record of `size` bytes (already reserved).
///
/// Waking the reader for every record costs more than the record itself; it is woken when the
/// data waiting crosses a multiple of `wakeup_bytes`, once per that much data. Not "whenever
/// that much is waiting": while a busy reader caught up, every record then forced a wakeup,
/// each a self-IPI (a VM exit here) in the traced thread, and `--str` spans cost 2.5x the
/// null program instead of 1.4x. The reader also polls on a timer, so nothing waits long.
#[inline(always)]
pub fn ringbuf_flags(cfg: &Config, size: usize) -> u64 {
    // Reserved records count as waiting (the producer position moves at reserve), ours too.
    let after = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    if usdt_trace_common::wakes_reader(after, size as u64, cfg.wakeup_bytes as u64) {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

/// The state of thread `tid`, created zeroed when it has none.
#[inline(always)]
pub fn thread_state(tid: u32) -> Option<&'static mut ThreadState> {
    if let Some(p) = THREADS.get_ptr_mut(&tid) {
        // SAFETY: as in `existing_thread`.
        return Some(unsafe { &mut *p });
    }
    let zero = ZERO_THREAD.get_ptr(0)?;
    // Inserted from a map value, by reference: a 12 KB ThreadState cannot go through the stack.
    // SAFETY: a valid per-CPU map value that nothing writes.
    let zero = unsafe { &*zero };
    THREADS.insert(&tid, zero, BPF_NOEXIST as u64).ok()?;
    tracked_add(1);
    existing_thread(tid)
}

/// The state of thread `tid`, if it has one.
#[inline(always)]
pub fn existing_thread(tid: u32) -> Option<&'static mut ThreadState> {
    let p = THREADS.get_ptr_mut(&tid)?;
    // SAFETY: a live map value: it stays valid until the program returns even if the entry is
    // deleted (RCU). Writers are the thread's own probes and the scheduler hooks for it, which
    // the kernel runs one at a time for a given thread in practice; a rare race (sched_waking
    // on another CPU) can skew one interval's accounting, and the verifier bounds every access.
    Some(unsafe { &mut *p })
}

/// A start on `tid` was dropped because THREADS was full: remember it for its end.
#[inline(always)]
pub fn note_stateless_start(tid: u32) {
    if let Some(n) = NO_STATE_TIDS.get_ptr_mut(&tid) {
        // SAFETY: a live map value; only this thread's own probes write its entry.
        unsafe { *n += 1 };
    } else {
        let _ = NO_STATE_TIDS.insert(&tid, &1, 0);
    }
}

/// An end on `tid` found no open span: whether it belongs to a start dropped because THREADS
/// was full (and then it consumes that start).
#[inline(always)]
pub fn take_stateless_start(tid: u32) -> bool {
    let Some(n) = NO_STATE_TIDS.get_ptr_mut(&tid) else {
        return false;
    };
    // SAFETY: as in `note_stateless_start`.
    let n = unsafe { &mut *n };
    if *n == 0 {
        return false;
    }
    *n -= 1;
    if *n == 0 {
        let _ = NO_STATE_TIDS.remove(&tid);
    }
    true
}
