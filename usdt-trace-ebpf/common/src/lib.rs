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
pub mod regs;

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
/// Nesting depth of the per-thread span stack. Deeper starts are dropped and counted
/// (`CNT_DEPTH_START`); the thread keeps counting how deep it is past the stack
/// (`ThreadState::overflow`), so their ends are dropped too instead of closing an outer frame.
///
/// The frames live inline in the thread's state: a start and an end each cost one map lookup,
/// whatever the depth. The price is memory: a `ThreadState` is ~12 KB (a 16 KB allocation),
/// made when a thread opens its first span (THREADS is not preallocated) and freed when it
/// exits. Strings are kept apart (`STRS`, one [`StrSet`] per open span that has any) so spans
/// that capture none do not pay for them.
pub const MAX_DEPTH: usize = 64;
/// Log-linear histogram buckets: each power of two is split into this many equal sub-buckets,
/// so a value is known to within 1/HIST_SUB of its octave (a bucket's midpoint is within 1/16
/// = 6.25% of any value in it), enough for quoted percentiles, where log2 buckets are ±50%.
pub const HIST_SUB: usize = 8;
/// Buckets per histogram: 0..8 exactly, then 8 per octave from [8, 16) up to [2^63, 2^64).
pub const HIST_BUCKETS: usize = HIST_SUB + (64 - 3) * HIST_SUB;
/// Log2 buckets, for drawing: 0 holds 0, b holds [2^(b-1), 2^b).
pub const LOG2_BUCKETS: usize = 64;
/// Components of a span histogram, each an index into the component axis of `HISTS`.
pub const HIST_COMPONENTS: usize = 6;
/// Histogram component: the span's wall-clock duration.
pub const HIST_DURATION: usize = 0;
/// Histogram component: time on CPU.
pub const HIST_ONCPU: usize = 1;
/// Histogram component: time runnable, waiting for a CPU.
pub const HIST_RUNQ: usize = 2;
/// Histogram component: time in interruptible sleep.
pub const HIST_SLEEP: usize = 3;
/// Histogram component: time in uninterruptible (I/O) sleep.
pub const HIST_IO: usize = 4;
/// Histogram component: time waiting to be polled (spans with poll markers only: a span one
/// thread ran from start to end has none, and does not count here).
pub const HIST_IDLE: usize = 5;
/// Span names (pairs) that can have histograms.
pub const MAX_PAIRS: u32 = 4096;

/// Index into the `HISTS` per-CPU array of one span name's histogram of `component`.
#[inline(always)]
pub fn hist_slot(pair_id: u32, component: usize) -> u32 {
    pair_id * HIST_COMPONENTS as u32 + component as u32
}

/// `ArgDesc::kind`: how to fetch an argument.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArgKind(pub u8);

impl ArgKind {
    /// No argument.
    pub const NONE: ArgKind = ArgKind(0);
    /// Immediate constant in `val`.
    pub const CONST: ArgKind = ArgKind(1);
    /// Register `base_reg` (a u64 word index into `pt_regs`).
    pub const REG: ArgKind = ArgKind(2);
    /// Memory at `regs[base_reg] + regs[index_reg] * scale + val` (index_reg may be `REG_NONE`).
    pub const MEM: ArgKind = ArgKind(3);
    /// Memory at `ip + val`: `val` is `(symbol + offset) - pc`, which is position independent.
    pub const RIP: ArgKind = ArgKind(4);
    /// The spec could not be decoded or cannot be read (floats, 16-byte structs, %ah, ...).
    pub const UNSUPPORTED: ArgKind = ArgKind(5);
    /// A Go call's identity, constant from entry to `ret` whatever thread runs it and however
    /// Go moves the stack: `(regs[base_reg] << 24) | ((*(regs[base_reg] + val) - regs[index_reg])
    /// & GO_FRAME_DEPTH_MASK)`, i.e. the goroutine `g` (R14) and the stack pointer's distance
    /// below the goroutine stack's top (`g.stack.hi`).
    pub const GO_FRAME: ArgKind = ArgKind(6);
}

/// The stack depth bits of a [`ArgKind::GO_FRAME`] value: 128 MB of goroutine stack (Go's
/// default limit is 1 GB, but a `g` is 8-byte aligned, so `g << 24` leaves 27 bits free).
pub const GO_FRAME_DEPTH_MASK: u64 = (1 << 27) - 1;

/// No register.
pub const REG_NONE: u8 = 0xff;

/// `SiteSpec::role`: what a hit at the site does.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteRole(pub u8);

impl SiteRole {
    /// A point event.
    pub const EVENT: SiteRole = SiteRole(0);
    /// Opens a span.
    pub const START: SiteRole = SiteRole(1);
    /// Closes a span.
    pub const END: SiteRole = SiteRole(2);
    /// A poll marker: the span whose id it carries starts running on this thread.
    pub const ENTER: SiteRole = SiteRole(3);
    /// A poll marker: the span whose id it carries stops running on this thread.
    pub const EXIT: SiteRole = SiteRole(4);
}

/// `SiteSpec::id_arg` when the span pairs on the thread's stack rather than by an id argument.
pub const ID_NONE: u8 = 0xff;
/// `StrDesc::arg` of an unused entry, `StrDesc::len_arg` of a NUL-terminated string.
pub const STR_NONE: u8 = 0xff;
/// `StrSet::state`: the slot holds no string (none captured there).
pub const STRS_NONE: u8 = 0;
/// `StrSet::state`: the whole string is in the slot.
pub const STRS_OK: u8 = 1;
/// `StrSet::state`: the string was longer than `--str-max` and is cut.
pub const STRS_CUT: u8 = 2;
/// `StrSet::state`: the kernel could not read it (not paged in, or a bad pointer).
pub const STRS_FAULT: u8 = 3;
/// `StrSet::state`, set by user space only: read from the live process after a fault.
pub const STRS_LATE: u8 = 4;
/// `StrSet::state`, set by user space only: read late, and cut.
pub const STRS_LATE_CUT: u8 = 5;

/// `RecordHeader::kind`: which record follows the header in the ring buffer.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordKind(pub u32);

impl RecordKind {
    /// An [`EventRecord`].
    pub const EVENT: RecordKind = RecordKind(1);
    /// A [`SpanRecord`]: a closed span.
    pub const SPAN: RecordKind = RecordKind(2);
    /// A [`StackRecord`]: the user stack at the end of the span record that follows it.
    pub const STACK: RecordKind = RecordKind(3);
    /// A [`StrsRecord`]: the strings of the next event or span record of its thread.
    pub const STRS: RecordKind = RecordKind(4);
}

/// Indices into the `COUNTERS` per-CPU array. Events seen.
pub const CNT_EVENTS: u32 = 0;
/// Spans closed.
pub const CNT_SPANS: u32 = 1;
/// Event and span records the ring buffer had no room for (a span's strings record is
/// counted apart, in `CNT_STRS_LOST`: loss is counted in spans and events, not records).
pub const CNT_LOST: u32 = 2;
/// Span starts that never got an end (thread exit, mismatched nesting).
pub const CNT_UNMATCHED_START: u32 = 3;
/// Span ends without a start (none that a limit below dropped).
pub const CNT_UNMATCHED_END: u32 = 4;
/// Span starts whose `--str` strings could not be kept until their end (the string map was
/// full, or its allocator had no memory at hand): the span is recorded without them. (Index 5
/// counted PID-filtered hits once; the kernel scopes links to their process now.)
pub const CNT_STRS_DROPPED: u32 = 5;
/// Span starts dropped because `THREADS` was full: the thread could get no state.
pub const CNT_THREADS_FULL: u32 = 6;
/// Ends of those: the thread has no state, and `NO_STATE_TIDS` says a start was dropped.
pub const CNT_THREADS_FULL_END: u32 = 7;
/// Span starts dropped because `ID_SPANS` (open id-paired spans) was full.
pub const CNT_ID_FULL: u32 = 8;
/// Ends of those: no open span under the id, and `ID_DROPPED` remembers its start.
pub const CNT_ID_FULL_END: u32 = 9;
/// Span starts dropped because the thread's stack already held `MAX_DEPTH` frames.
pub const CNT_DEPTH_START: u32 = 10;
/// Ends dropped while the thread was past the stack (`ThreadState::overflow` > 0).
pub const CNT_DEPTH_END: u32 = 11;
/// Closed spans shorter than `--min`: not recorded (histograms still count them).
pub const CNT_BELOW_MIN: u32 = 12;
/// Spans and events that `--filter` rejected.
pub const CNT_FILTER_REJECT: u32 = 13;
/// `--str` strings records the ring buffer had no room for: their event or span still goes,
/// with `has_strs` = [`STRS_RECORD_LOST`].
pub const CNT_STRS_LOST: u32 = 14;
/// Number of counters.
pub const NUM_COUNTERS: u32 = CNT_STRS_LOST + 1;

/// `EventRecord::has_strs`/`SpanRecord::has_strs`: its strings went just before it.
pub const STRS_RECORD_SENT: u32 = 1;
/// `EventRecord::has_strs`/`SpanRecord::has_strs`: it had strings, but the ring buffer had no
/// room for their record: the outputs mark it rather than show the pointers silently.
pub const STRS_RECORD_LOST: u32 = 2;

// Flag 1 is unused (it was the PID filter; the kernel scopes links to their process).
/// `Config::flags`: keep in-kernel histograms and emit no per-span records.
pub const CFG_HIST: u32 = 2;
/// `Config::flags`: set when the scheduler hooks are attached (`--no-sched` leaves them out).
/// The programs do not test it per hit: without the hooks, user space attaches
/// `usdt_site_nosplit`, the span program built without the split (which would read as all
/// on-CPU), where id-paired spans and poll markers touch no thread state.
pub const CFG_ACCT: u32 = 4;

/// `Config::flags`: tracing has stopped; hits during the detach are ignored so the summary
/// counts only what was printed.
pub const CFG_STOPPED: u32 = 8;
/// `Config::flags`: a `--filter` program is in the FILTER map.
pub const CFG_FILTER: u32 = 16;
/// `Config::flags`: `--stack`: each recorded span is preceded by a [`StackRecord`].
pub const CFG_STACK: u32 = 32;

/// Frames a `--stack` capture keeps (the innermost ones).
pub const STACK_DEPTH: usize = 32;

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

/// How to read one argument at a probe site.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArgDesc {
    pub kind: ArgKind,
    /// Size in bytes: 1, 2, 4 or 8.
    pub size: u8,
    /// 1 when the value is sign-extended from `size` bytes.
    pub signed: u8,
    /// Base register as a u64 word index into `pt_regs`, or `REG_NONE`.
    pub base_reg: u8,
    /// Index register as a u64 word index into `pt_regs`, or `REG_NONE`.
    pub index_reg: u8,
    /// Scale for the index register: 1, 2, 4 or 8.
    pub scale: u8,
    pub _pad: [u8; 2],
    /// Constant value, displacement, or rip-relative delta (as i64 bits).
    pub val: u64,
}

/// Everything the eBPF program needs to know about one probe site. Indexed by BPF cookie.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SiteSpec {
    /// Span name index (for histograms and for matching starts with ends).
    pub pair_id: u32,
    pub role: SiteRole,
    /// For spans paired by id: which argument carries the span id; else `ID_NONE`.
    pub id_arg: u8,
    /// Number of arguments to read.
    pub nargs: u8,
    /// Entries of `strs` in use (the first ones): 0 for a site that captures no string.
    pub nstrs: u8,
    /// For an end paired per thread: which stack pointer the start it closes must have had
    /// (`END_SP_*`). A function's end pairs with its own call, never with a frame a `longjmp`
    /// or an exception left open above it.
    pub end_sp: u8,
    /// `SPEC_*` bits.
    pub flags: u8,
    pub _pad: [u8; 6],
    pub args: [ArgDesc; MAX_ARGS],
    pub strs: [StrDesc; MAX_STRS],
}

/// [`SiteSpec::flags`]: the span is a goroutine's (paired by goroutine frame), not a thread's:
/// the thread's time between its start and end is other goroutines' as much as its own, so
/// it gets no time split.
pub const SPEC_NO_THREAD_SPLIT: u8 = 1;

/// [`SiteSpec::end_sp`]: any frame of the span's name (a note's end).
pub const END_SP_ANY: u8 = 0;
/// The start's stack pointer equals this end's: an end at a `ret` instruction (the return
/// address is still on the stack, where it was at the entry).
pub const END_SP_SAME: u8 = 1;
/// The start's stack pointer is 8 below this end's: an x86_64 return probe, which fires after
/// `ret` popped the return address.
pub const END_SP_POPPED: u8 = 2;
/// As [`END_SP_SAME`], at a `ret` of a function that the span's function tail-calls: most
/// hits there are that function's own calls, which close nothing and are no unmatched end.
pub const END_SP_TAIL: u8 = 3;

/// The pair id of a frame whose span already ended while a function it tail-called is still
/// open above it at the same stack pointer (that function's own end comes at the same `ret`,
/// or just after it for a return probe). No end matches it; the end below pops it.
pub const PAIR_CLOSED: u32 = u32::MAX;

/// One `--str` capture at a site: which argument points at the string, where its length is
/// (or `STR_NONE`: NUL-terminated), and which slot of the record's [`StrSet`] it goes to. A
/// span's start and end captures use different slots, so both reach the one record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StrDesc {
    pub arg: u8,
    pub len_arg: u8,
    pub slot: u8,
    pub _pad: u8,
}

impl StrDesc {
    pub const NONE: StrDesc = StrDesc {
        arg: STR_NONE,
        len_arg: STR_NONE,
        slot: 0,
        _pad: 0,
    };
}

/// The strings of one record (or of an open span, in `STRS`): per slot its state (`STRS_*`),
/// the bytes kept, and the bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StrSet {
    pub state: [u8; MAX_STRS],
    pub _pad: [u8; 4],
    pub len: [u16; MAX_STRS],
    pub data: [[u8; STR_SLOT]; MAX_STRS],
}

impl StrSet {
    /// The bytes of `slot` (empty for one without a string).
    pub fn bytes(&self, slot: usize) -> &[u8] {
        match (self.data.get(slot), self.len.get(slot)) {
            (Some(d), Some(&n)) => &d[..(n as usize).min(STR_MAX_CAP)],
            _ => &[],
        }
    }
}

/// Global settings written once by user space before attaching.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Config {
    /// `CFG_*` flags.
    pub flags: u32,
    /// Wake the reader only once this many bytes are waiting (batching keeps the cost per
    /// record low; the reader also polls on a short timer).
    pub wakeup_bytes: u32,
    /// Offset of `pid` in this kernel's `struct task_struct` (from its BTF): the scheduler
    /// hooks read the thread id of `next` and of the woken task through it.
    pub task_pid_off: u32,
    /// Offsets in `struct task_struct` of `se.sum_exec_runtime` (the thread's CPU time) and
    /// `sched_info.run_delay` (its time runnable but waiting for a CPU), 0 when BTF lacks them:
    /// the hooks read them to account a switch-in that sched_switch never reported.
    pub task_exec_off: u32,
    pub task_delay_off: u32,
    /// `--str-max`: bytes kept of each string (at most `STR_MAX_CAP`).
    pub str_max: u32,
    /// Offset in `struct pt_regs` of the syscall number of a task inside a syscall (x86_64's
    /// `orig_ax`), 0 when unknown: sched_switch reads it to tell what a sleeping thread waits
    /// on (`SYSCALL_CLASS`).
    pub regs_nr_off: u32,
    pub _pad: u32,
    /// `--min`: spans shorter than this many ns make no record (0: every span does).
    pub min_ns: u64,
}

/// Whether a ring buffer record of `size` bytes that leaves `waiting` bytes for the reader
/// wakes it: when it carries the waiting data across a multiple of `threshold`, so a reader
/// is woken once per `threshold` bytes of data however far behind it is (never for a
/// threshold of 0).
#[inline(always)]
pub fn wakes_reader(waiting: u64, size: u64, threshold: u64) -> bool {
    threshold > 0 && waiting / threshold != waiting.saturating_sub(size) / threshold
}

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
    pub oncpu: u64,
    pub runq: u64,
    pub sleep: u64,
    pub io: u64,
    /// Of `sleep + io`, the time off CPU by what the thread waited on (`WAIT_*` index); the
    /// rest is "other" (a pipe, a page fault, a wait outside any known syscall).
    pub wait_ns: [u64; WAIT_KINDS],
    /// How many off-CPU intervals of each kind began (so more waits tell from longer ones).
    pub waits: [u32; WAIT_KINDS],
}

/// Kinds of off-CPU wait, from the syscall the thread sleeps in (`SYSCALL_CLASS`): a futex
/// (a lock), the network or a poll, a timer (the nanosleep family), and file I/O that put it
/// in uninterruptible sleep (the disk). `Acct::wait_ns[kind - 1]` and `Acct::waits[kind - 1]`.
pub const WAIT_LOCK: u32 = 1;
pub const WAIT_NET: u32 = 2;
pub const WAIT_TIMER: u32 = 3;
pub const WAIT_DISK: u32 = 4;
pub const WAIT_KINDS: usize = 4;
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
/// read/write/fsync and friends: the disk when the thread sleeps uninterruptibly in them, "other"
/// (a pipe, a tty, a socket read through `read`) when it sleeps interruptibly.
pub const SC_FILE: u8 = 4;
/// Entries of `SYSCALL_CLASS`: above every syscall number of x86_64 and aarch64.
pub const SYSCALL_CLASS_LEN: u32 = 512;

/// The kind of an off-CPU interval that began in state `off_state` (`TS_*`) inside a syscall
/// of class `class` (`SC_*`).
#[inline(always)]
pub fn wait_kind(class: u8, off_state: u32) -> u32 {
    if off_state != TS_SLEEP && off_state != TS_IO {
        return WAIT_OTHER;
    }
    // Each kind nests in one part of the split (lock, net and timer in sleep, disk in io), so
    // that the parts' "other" remainders are never negative.
    match (class, off_state) {
        (SC_LOCK, TS_SLEEP) => WAIT_LOCK,
        (SC_NET, TS_SLEEP) => WAIT_NET,
        (SC_TIMER, TS_SLEEP) => WAIT_TIMER,
        (SC_FILE, TS_IO) => WAIT_DISK,
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

/// An open span paired by id.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IdFrame {
    pub frame: Frame,
    pub poll: PollAcct,
}

/// Slots of the direct-mapped table of open id-paired spans (`ID_SLOTS`), a power of two.
///
/// A span start takes the slot its key hashes to when the slot is free, and its end frees it:
/// an array lookup and two atomic exchanges, where an insert into and a delete from the
/// `ID_SPANS` hash cost a quarter of a traced span (bucket locks, an allocation, a 300-byte
/// value copy). A start whose slot is taken by another open span goes to `ID_SPANS`.
pub const ID_SLOTS: u32 = 4096;
/// `IdSlot::state`: free, taken by a start still filling it, or holding an open span.
pub const ID_SLOT_FREE: u64 = 0;
pub const ID_SLOT_FILLING: u64 = 1;
pub const ID_SLOT_OPEN: u64 = 2;

/// One slot of `ID_SLOTS`. Ownership moves by atomic compare-and-exchange on `state` (starts
/// on any CPU may race for a slot); `key` and `span` are only written by the owner, and only
/// read while `state` is `ID_SLOT_OPEN`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IdSlot {
    pub state: u64,
    pub key: IdKey,
    pub span: IdFrame,
}

impl IdKey {
    /// The `ID_SLOTS` slot this key hashes to. Span ids are often counters, so the bits are
    /// mixed (a multiplicative hash) rather than taken as they are, and the process and the
    /// span name take part so that equal ids in two processes rarely share a slot.
    #[inline(always)]
    pub fn slot(&self) -> u32 {
        let x = self.span_id ^ ((self.tgid as u64) << 32 | self.pair_id as u64).rotate_left(17);
        (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - ID_SLOTS.trailing_zeros())) as u32
            & (ID_SLOTS - 1)
    }
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

/// `Frame::has_strs` of an id-paired span whose start strings are in `STRS` under its key.
pub const KEPT_IN_MAP: u32 = 1;
/// `Frame::has_strs` of an id-paired span whose start strings are in `ID_STRS`, at the index of
/// the `ID_SLOTS` slot it holds (`IdKey::slot`).
pub const KEPT_IN_SLOT: u32 = 2;

/// No slot of `ID_SLOTS` (a span paired per thread, or one whose slot another span holds).
pub const NO_ID_SLOT: u32 = u32::MAX;

/// `IdKey::pair_id` of a per-thread frame's key in `STRS` (no span name has this id).
pub const STR_KEY_THREAD: u32 = u32::MAX;

/// Where an open span's strings are kept in `STRS`: under its id key when paired by id, else
/// under (thread, depth).
#[inline(always)]
pub fn str_key_thread(tid: u32, depth: u32) -> IdKey {
    IdKey {
        pair_id: STR_KEY_THREAD,
        tgid: tid,
        span_id: depth as u64,
    }
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
    pub fn enter(&mut self, tid: u32, now: u64, acct_now: Acct) {
        if self.enter_tid != 0 && self.enter_tid == tid {
            self.exit(tid, now, acct_now);
        }
        self.enter_tid = tid;
        self.enter_ns = now;
        self.enter_acct = acct_now;
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
    pub fn exit(&mut self, tid: u32, now: u64, acct_now: Acct) -> bool {
        if self.enter_tid == 0 || self.enter_tid != tid {
            return false;
        }
        let d = acct_now.since(&self.enter_acct);
        self.acct.oncpu += d.oncpu;
        self.acct.runq += d.runq;
        self.acct.sleep += d.sleep;
        self.acct.io += d.io;
        self.acct.add_waits(&acct_now, &self.enter_acct);
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
    pub _pad: u32,
    /// Who last woke this thread (recorded by sched_waking).
    pub last_waker_pid: u32,
    pub last_waker_tid: u32,
    pub last_waker_comm: [u8; 16],
    /// The kernel's CPU time and run-queue wait of the thread (`Config::task_exec_off`,
    /// `task_delay_off`) when it last left the CPU.
    pub exec_snap: u64,
    pub delay_snap: u64,
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
        // WAIT_OTHER (0) wraps to an index past the end: no slot.
        if let Some(x) = self.wait_ns.get_mut((kind as usize).wrapping_sub(1)) {
            *x += d;
        }
    }

    /// An off-CPU interval waiting on `kind` begins.
    #[inline(always)]
    pub fn count_wait(&mut self, kind: u32) {
        if let Some(x) = self.waits.get_mut((kind as usize).wrapping_sub(1)) {
            *x = x.wrapping_add(1);
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
            wait_ns: [0; WAIT_KINDS],
            waits: [0; WAIT_KINDS],
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

impl ThreadState {
    /// Accounting runs while the thread has any span open.
    #[inline(always)]
    pub fn active(&self) -> bool {
        self.depth > 0 || self.id_open > 0
    }

    /// Current totals, including the interval in progress.
    #[inline(always)]
    pub fn acct_at(&self, now: u64) -> Acct {
        let mut a = self.acct;
        let d = now.saturating_sub(self.since_ns);
        a.add(self.state, d);
        // `off_kind` is WAIT_OTHER unless the thread sleeps (switch_out sets it).
        a.add_wait(self.off_kind, d);
        a
    }

    /// Closes the interval in progress and starts one in `state`.
    #[inline(always)]
    pub fn set_state(&mut self, now: u64, state: u32) {
        self.acct = self.acct_at(now);
        self.since_ns = now;
        self.state = state;
        // Only switch_out starts a wait; any other change (a wakeup, a switch-in) ends it.
        self.off_kind = WAIT_OTHER;
    }

    /// A span opens on this thread. Accounting only runs while a span is open, so when none
    /// was, restart the clock: the thread is running, and whoever woke it earlier is stale.
    #[inline(always)]
    pub fn resume_accounting(&mut self, now: u64) {
        if !self.active() {
            self.state = TS_RUNNING;
            self.off_kind = WAIT_OTHER;
            self.since_ns = now;
            self.last_waker_pid = 0;
        }
    }

    /// The thread leaves the CPU (sched_switch, as `prev`): an off-CPU interval starts.
    #[inline(always)]
    ///
    /// `class` (`SC_*`): the syscall the thread sleeps in, which names what it waits on.
    pub fn switch_out(&mut self, now: u64, preempt: bool, prev_state: u32, class: u8) {
        let state = off_cpu_state(preempt, prev_state);
        self.set_state(now, state);
        self.off_kind = wait_kind(class, state);
        self.acct.count_wait(self.off_kind);
        self.off_start_ns = now;
        self.last_waker_pid = 0;
        zero_comm(&mut self.last_waker_comm);
    }

    /// The thread gets the CPU back (sched_switch, as `next`). Each open frame remembers the
    /// longest off-CPU interval it saw and who ended it (the last waker).
    #[inline(always)]
    pub fn switch_in(&mut self, now: u64) {
        self.set_state(now, TS_RUNNING);
        self.note_off_interval(now.saturating_sub(self.off_start_ns));
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
    /// `note_waker` also updates each open frame's longest off-CPU interval: the scheduler hook
    /// does; the probe paths do not, because that loop over every frame, inlined into the
    /// uprobe program at each call site, is more than the verifier's budget allows at depth 64
    /// (the next switch-out and switch-in settle the waker anyway).
    #[inline(always)]
    pub fn catch_up_running(
        &mut self,
        now: u64,
        now_exec: Option<u64>,
        now_delay: Option<u64>,
        note_waker: bool,
    ) {
        if self.state == TS_RUNNING {
            return;
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
        // The interval up to the switch-in keeps its state; what the counters say ran, ran.
        self.acct = self.acct_at(now.saturating_sub(oncpu + runq));
        self.acct.oncpu += oncpu;
        self.acct.runq += runq;
        if note_waker {
            self.note_off_interval(now.saturating_sub(self.off_start_ns).saturating_sub(oncpu));
        }
        self.since_ns = now;
        self.state = TS_RUNNING;
        self.off_kind = WAIT_OTHER;
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

/// Key of a span opened by a probe that carries a span id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdKey {
    pub pair_id: u32,
    pub tgid: u32,
    pub span_id: u64,
}

/// Common head of every ring buffer record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordHeader {
    pub kind: RecordKind,
    /// Cookie of the site that fired (the end site for spans).
    pub site: u32,
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// bpf_ktime_get_ns() when it fired.
    pub ts_ns: u64,
    pub comm: [u8; 16],
}

/// A point event.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventRecord {
    pub hdr: RecordHeader,
    /// [`STRS_RECORD_SENT`] when its strings went just before it, in a [`StrsRecord`];
    /// [`STRS_RECORD_LOST`] when that record found no room; 0 without strings.
    pub has_strs: u32,
    pub _pad: u32,
    pub args: [u64; MAX_ARGS],
}

/// The `--str` strings of the event or span record that follows it from the same thread
/// (same `hdr.tid` and `hdr.ts_ns`): records without strings stay small in the ring.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StrsRecord {
    pub hdr: RecordHeader,
    pub strs: StrSet,
}

/// A closed span: start and end arguments, and where its time went.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SpanRecord {
    /// `hdr.site` is the end site, `hdr.ts_ns` the end time, `hdr.tid` the ending thread.
    pub hdr: RecordHeader,
    pub start_site: u32,
    pub start_tid: u32,
    pub start_ns: u64,
    /// Time split, valid when `acct_valid` is 1 (the span started and ended on one thread).
    pub acct: Acct,
    pub acct_valid: u32,
    pub waker_pid: u32,
    pub waker_tid: u32,
    /// [`STRS_RECORD_SENT`] when its strings went just before it, in a [`StrsRecord`];
    /// [`STRS_RECORD_LOST`] when that record found no room; 0 without strings.
    pub has_strs: u32,
    pub longest_off_ns: u64,
    pub waker_comm: [u8; 16],
    pub args: [u64; MAX_ARGS],
    pub end_args: [u64; MAX_ARGS],
    /// For a span with poll markers (`polls` > 0): its time between polls; then `acct` is the
    /// time of the polling threads while it was entered, and the two add up to the duration.
    pub idle_ns: u64,
    /// Polls entered (0: no poll markers fired, `acct` is the one-thread split if any).
    pub polls: u32,
    /// Distinct threads that polled it (exact up to `POLL_TIDS`, an upper bound past that).
    pub threads: u32,
}

/// `--stack`: the user stack where a span ended, as the kernel walked it (frame pointers),
/// innermost first. Emitted just before its span's record, whose `hdr.tid` and `hdr.ts_ns` it
/// carries too: user space pairs them by those, and a span without one lost its stack.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StackRecord {
    /// `kind` is [`RecordKind::STACK`]; `comm` is not filled (the span carries it).
    pub hdr: RecordHeader,
    /// bpf_get_stack's result: bytes of `ips` filled, or a negative errno when the walk failed.
    pub len: i64,
    pub ips: [u64; STACK_DEPTH],
}

/// One histogram: counts per log-linear bucket ([`hist_bucket`]), the sum for means and the
/// largest value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Hist {
    pub buckets: [u64; HIST_BUCKETS],
    pub count: u64,
    pub sum: u64,
    pub max: u64,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            buckets: [0; HIST_BUCKETS],
            count: 0,
            sum: 0,
            max: 0,
        }
    }
}

impl Hist {
    /// Counts one value: what the kernel does per span (`--hist`, `--by`), and tests.
    #[inline(always)]
    pub fn add(&mut self, v: u64) {
        let b = hist_bucket(v);
        // hist_bucket is always in range, and LLVM knows it and would drop the check; the
        // verifier does not (leading_zeros is a bit-twiddling sequence in BPF). The volatile
        // read hides the range from LLVM so the check the verifier needs stays (and no
        // indexing panic path is left for it to reject).
        // SAFETY: a read of a local.
        let b = unsafe { core::ptr::read_volatile(&b) };
        if b < HIST_BUCKETS {
            self.buckets[b] += 1;
        }
        self.count += 1;
        self.sum += v;
        if v > self.max {
            self.max = v;
        }
    }
}

/// Completes a span name's histograms as the kernel leaves them: it counts a split span's
/// run-queue, sleep and I/O parts only when they are not zero (most spans of a busy thread have
/// none; each count is a call and a bucket computation in the span's end probe). Every split
/// span has its on-CPU part counted, zero or not, so the zeros the kernel skipped are the
/// difference of the counts. Sums and maxima are unchanged by zeros.
pub fn fill_zero_parts(comps: &mut [Hist; HIST_COMPONENTS]) {
    let split = comps[HIST_ONCPU].count;
    for c in [HIST_RUNQ, HIST_SLEEP, HIST_IO] {
        let zeros = split.saturating_sub(comps[c].count);
        comps[c].buckets[0] += zeros;
        comps[c].count += zeros;
    }
}

/// The log-linear bucket of `v`: `v` itself below 8, else 8 sub-buckets per power of two.
#[inline(always)]
pub fn hist_bucket(v: u64) -> usize {
    if v < HIST_SUB as u64 {
        return v as usize;
    }
    // e >= 3: v is in [2^e, 2^(e+1)); its top 4 bits pick the sub-bucket.
    let e = 63 - v.leading_zeros() as usize;
    let sub = ((v >> (e - 3)) & (HIST_SUB as u64 - 1)) as usize;
    HIST_SUB + (e - 3) * HIST_SUB + sub
}

/// Inclusive-exclusive value range of a [`hist_bucket`] bucket (the last one's end saturates).
pub fn hist_bucket_range(b: usize) -> (u64, u64) {
    if b < HIST_SUB {
        return (b as u64, b as u64 + 1);
    }
    let e = (b - HIST_SUB) / HIST_SUB + 3;
    let sub = ((b - HIST_SUB) % HIST_SUB) as u64;
    let width = 1u64 << (e - 3);
    let lo = (1u64 << e) + sub * width;
    (lo, lo.saturating_add(width))
}

/// The log2 bucket of `v`: 0 for 0, else 1 + floor(log2(v)), clamped.
#[inline(always)]
pub fn log2_bucket(v: u64) -> usize {
    if v == 0 {
        0
    } else {
        let b = 64 - v.leading_zeros() as usize;
        if b >= LOG2_BUCKETS {
            LOG2_BUCKETS - 1
        } else {
            b
        }
    }
}

/// Most comparisons in one `--filter` program.
pub const MAX_FILTER_TERMS: usize = 8;
/// `FilterTerm::field`: argument `arg` of the record (a span's start arguments, or its end
/// arguments when the term names the end probe).
pub const FF_ARG: u8 = 0;
pub const FF_PID: u8 = 1;
pub const FF_TID: u8 = 2;
pub const FF_COMM: u8 = 3;
/// `FilterTerm::op`.
pub const FOP_EQ: u8 = 0;
pub const FOP_NE: u8 = 1;
pub const FOP_LT: u8 = 2;
pub const FOP_LE: u8 = 3;
pub const FOP_GT: u8 = 4;
pub const FOP_GE: u8 = 5;
/// `FilterTerm::flags`: the last comparison of an `&&` group (groups are joined by `||`).
pub const FT_GROUP_END: u8 = 1;
/// `FilterTerm::flags`: the term names a probe; it applies only to records of the sites whose
/// filter mask has its bit, and holds for all others.
pub const FT_PROBE: u8 = 2;

/// One comparison of a compiled `--filter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterTerm {
    pub field: u8,
    pub op: u8,
    pub arg: u8,
    pub flags: u8,
    pub _pad: u32,
    /// Compared as a signed 64-bit number.
    pub value: u64,
    /// `FF_COMM`: the name, NUL-padded as the kernel stores it.
    pub comm: [u8; 16],
}

/// A `--filter` in disjunctive normal form: `&&` groups joined by `||` (the grammar has no
/// parentheses, so precedence alone gives this form). `nterms == 0`: no filter.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterProg {
    pub nterms: u32,
    pub _pad: u32,
    pub terms: [FilterTerm; MAX_FILTER_TERMS],
}

/// What a filter looks at for one record.
pub struct FilterInput<'a> {
    pub pid: u32,
    pub tid: u32,
    pub comm: &'a [u8; 16],
    /// A span's start arguments, or an event's arguments.
    pub args: &'a [u64; MAX_ARGS],
    /// A span's end arguments (None for events).
    pub end_args: Option<&'a [u64; MAX_ARGS]>,
    /// Filter masks (one bit per term with `FT_PROBE`) of the start (or event) site and of
    /// the end site.
    pub start_mask: u32,
    pub end_mask: u32,
}

impl FilterTerm {
    #[inline(always)]
    fn holds(&self, i: usize, x: &FilterInput) -> bool {
        let bit = 1u32 << (i as u32 & 31);
        let v: u64 = match self.field {
            FF_PID => x.pid as u64,
            FF_TID => x.tid as u64,
            FF_COMM => {
                let a = u64::from_ne_bytes(word(x.comm, 0));
                let b = u64::from_ne_bytes(word(x.comm, 8));
                let eq = a == u64::from_ne_bytes(word(&self.comm, 0))
                    && b == u64::from_ne_bytes(word(&self.comm, 8));
                return eq == (self.op == FOP_EQ);
            }
            _ => {
                let args = if self.flags & FT_PROBE == 0 || x.start_mask & bit != 0 {
                    x.args
                } else if x.end_mask & bit != 0 {
                    match x.end_args {
                        Some(a) => a,
                        None => return true,
                    }
                } else {
                    // A term about another probe says nothing about this record.
                    return true;
                };
                match args.get(self.arg as usize) {
                    Some(v) => *v,
                    None => return false,
                }
            }
        };
        let (v, w) = (v as i64, self.value as i64);
        match self.op {
            FOP_EQ => v == w,
            FOP_NE => v != w,
            FOP_LT => v < w,
            FOP_LE => v <= w,
            FOP_GT => v > w,
            _ => v >= w,
        }
    }
}

#[inline(always)]
fn word(b: &[u8; 16], at: usize) -> [u8; 8] {
    let mut w = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        w[i] = b[at + i];
        i += 1;
    }
    w
}

impl FilterProg {
    /// Whether the record passes. A bounded loop (MAX_FILTER_TERMS) so the verifier accepts it.
    #[inline(always)]
    pub fn eval(&self, x: &FilterInput) -> bool {
        if self.nterms == 0 {
            return true;
        }
        let mut group = true;
        let mut i = 0;
        while i < MAX_FILTER_TERMS {
            if i as u32 >= self.nterms {
                break;
            }
            let t = &self.terms[i];
            group = group && t.holds(i, x);
            if t.flags & FT_GROUP_END != 0 {
                if group {
                    return true;
                }
                group = true;
            }
            i += 1;
        }
        false
    }
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all of these are repr(C), Copy, and valid for every bit pattern.
    unsafe impl aya::Pod for ArgDesc {}
    unsafe impl aya::Pod for SiteSpec {}
    unsafe impl aya::Pod for Config {}
    unsafe impl aya::Pod for FilterProg {}
    unsafe impl aya::Pod for IdKey {}
    unsafe impl aya::Pod for Hist {}
    unsafe impl aya::Pod for crate::agg::AggConfig {}
    unsafe impl aya::Pod for crate::agg::ByKey {}
    unsafe impl aya::Pod for crate::agg::NumKey {}
    unsafe impl aya::Pod for Acct {}
    unsafe impl aya::Pod for StackRecord {}
    unsafe impl aya::Pod for Frame {}
    unsafe impl aya::Pod for IdFrame {}
    unsafe impl aya::Pod for IdSlot {}
    unsafe impl aya::Pod for PollAcct {}
    unsafe impl aya::Pod for StrSet {}
    unsafe impl aya::Pod for ThreadState {}
}

#[cfg(test)]
mod tests {
    use super::*;

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
        st.resume_accounting(0);
        st.depth = 1;
        // 100 ns in a futex, 50 ns running, 30 ns in pread on a disk (D state), 20 ns in
        // nanosleep, 10 ns preempted in a futex call (run queue: no wait), 40 ns in read on a
        // pipe (interruptible: other).
        st.switch_out(0, false, 1, SC_LOCK);
        st.set_state(100, TS_RUNQ);
        st.switch_in(100);
        st.switch_out(150, false, TASK_UNINTERRUPTIBLE, SC_FILE);
        st.switch_in(180);
        st.switch_out(180, false, 1, SC_TIMER);
        st.switch_in(200);
        st.switch_out(200, true, 1, SC_LOCK);
        st.switch_in(210);
        st.switch_out(210, false, 1, SC_FILE);
        let a = st.acct_at(250);
        assert_eq!((a.oncpu, a.runq, a.sleep, a.io), (50, 10, 160, 30));
        assert_eq!(a.wait_ns, [100, 0, 20, 30]);
        assert_eq!(a.waits, [1, 0, 1, 1]);
        // A span that began after the futex wait sees only its own waits.
        let start = {
            let mut s = st;
            s.switch_in(250);
            s.acct_at(250)
        };
        st.switch_in(250);
        st.switch_out(260, false, 1, SC_NET);
        st.switch_in(300);
        let d = st.acct_at(300).since(&start);
        assert_eq!(d.wait_ns, [0, 40, 0, 0]);
        assert_eq!(d.waits, [0, 1, 0, 0]);
        assert_eq!(d.sleep, 40);
    }

    #[test]
    fn a_missed_switch_in_keeps_only_the_slept_part_as_a_wait() {
        let mut st = thread();
        st.depth = 1;
        st.resume_accounting(0);
        st.snap_counters(Some(0), Some(0));
        st.switch_out(0, false, 1, SC_LOCK);
        // Seen running at 100 with 30 ns of CPU since: the futex wait was 70 ns.
        st.catch_up_running(100, Some(30), Some(0), false);
        let a = st.acct_at(100);
        assert_eq!((a.oncpu, a.sleep), (30, 70));
        assert_eq!(a.wait_ns[WAIT_LOCK as usize - 1], 70);
        // Running now: nothing more accrues to the lock.
        assert_eq!(st.acct_at(150).wait_ns[WAIT_LOCK as usize - 1], 70);
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
        st.resume_accounting(100);
        // Already active: a second span must not restart the clock.
        st.since_ns = 100;
        st.resume_accounting(150);
        assert_eq!(st.since_ns, 100);
        st.switch_out(130, false, 1, SC_NONE);
        assert_eq!(st.state, TS_SLEEP);
        assert_eq!(st.acct.oncpu, 30);
        st.set_state(170, TS_RUNQ);
        st.switch_in(175);
        assert_eq!(st.state, TS_RUNNING);
        let a = st.acct_at(180);
        let want = Acct {
            oncpu: 35,
            runq: 5,
            sleep: 40,
            io: 0,
            ..Acct::default()
        };
        assert_eq!(a, want);
        // A clock that went backwards adds nothing rather than wrapping.
        assert_eq!(st.acct_at(0), st.acct);
    }

    #[test]
    fn resume_restarts_an_idle_thread() {
        let mut st = thread();
        st.state = TS_SLEEP;
        st.since_ns = 5;
        st.last_waker_pid = 9;
        st.resume_accounting(50);
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
        st.switch_out(100, false, TASK_UNINTERRUPTIBLE, SC_NONE);
        assert_eq!(st.state, TS_IO);
        st.last_waker_pid = 7;
        st.last_waker_tid = 8;
        st.last_waker_comm[0] = b'w';
        st.switch_in(400);
        for f in &st.frames[..2] {
            assert_eq!((f.longest_off_ns, f.waker_pid, f.waker_tid), (300, 7, 8));
            assert_eq!(f.waker_comm[0], b'w');
        }
        // Frames above the depth are not open: untouched.
        assert_eq!(st.frames[2].longest_off_ns, 0);
        // switch_out forgets the waker; a shorter interval keeps the longer one's.
        st.switch_out(500, true, 1, SC_NONE);
        assert_eq!((st.last_waker_pid, st.last_waker_comm[0]), (0, 0));
        st.last_waker_pid = 70;
        st.switch_in(550);
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
        st.switch_out(1_000, true, 0, SC_NONE);
        assert_eq!(st.state, TS_RUNQ);
        // Seen running at t=11000: the kernel says it waited 3000 ns more, so it ran 7000.
        st.catch_up_running(11_000, Some(12_000), Some(3_200), true);
        assert_eq!(st.state, TS_RUNNING);
        assert_eq!(st.since_ns, 11_000);
        let a = st.acct_at(11_000);
        // 1000 ns running before the switch-out, then 7000 of the 10000 off.
        assert_eq!((a.oncpu, a.runq), (8_000, 3_000));
        // Asleep, then seen running: CPU time is what sum_exec_runtime grew by.
        st.snap_counters(Some(12_000), Some(3_200));
        st.switch_out(11_000, false, 1, SC_NONE);
        assert_eq!(st.state, TS_SLEEP);
        st.catch_up_running(21_000, Some(14_000), Some(3_700), true);
        let b = st.acct_at(21_000).since(&a);
        assert_eq!((b.oncpu, b.runq, b.sleep), (2_000, 500, 7_500));
        // Without counters the interval keeps its state, and the thread runs from now on.
        st.snap_counters(None, None);
        let at_switch = st.acct_at(21_000);
        st.switch_out(21_000, true, 0, SC_NONE);
        st.catch_up_running(22_000, Some(1), Some(1), true);
        let c = st.acct_at(22_000).since(&at_switch);
        assert_eq!(st.state, TS_RUNNING);
        assert_eq!(c.runq, 1_000);
        // Already running: nothing to repair.
        let before = st.acct_at(23_000);
        st.catch_up_running(23_000, Some(9), Some(9), true);
        assert_eq!(st.acct_at(23_000), before);
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
        assert_eq!(core::mem::size_of::<Acct>(), 80);
        assert_eq!(core::mem::size_of::<Frame>(), 240);
        assert_eq!(core::mem::size_of::<ThreadState>(), 168 + 240 * MAX_DEPTH);
        // With the hash map's element header, one 16 KB (order-2) allocation.
        assert!(core::mem::size_of::<ThreadState>() + 64 <= 16 * 1024);
        assert_eq!(core::mem::size_of::<PollAcct>(), 208);
        assert_eq!(core::mem::size_of::<IdFrame>(), 240 + 208);
        assert_eq!(core::mem::size_of::<IdSlot>(), 8 + 16 + 240 + 208);
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
    fn hist_slots_do_not_overlap() {
        assert_eq!(hist_slot(0, HIST_DURATION), 0);
        assert_eq!(hist_slot(0, HIST_IO), 4);
        assert_eq!(hist_slot(0, HIST_IDLE), 5);
        assert_eq!(hist_slot(1, HIST_DURATION), HIST_COMPONENTS as u32);
        assert_eq!(
            hist_slot(MAX_PAIRS - 1, HIST_IDLE),
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
                RecordKind::STRS.0
            ),
            (1, 2, 3, 4)
        );
        assert_eq!(ArgKind::default(), ArgKind::NONE);
        assert_eq!(
            (ArgKind::CONST.0, ArgKind::RIP.0, ArgKind::UNSUPPORTED.0),
            (1, 4, 5)
        );
        assert_eq!(NUM_COUNTERS, 15);
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
        assert_eq!(core::mem::size_of::<SpanRecord>(), 384);
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
        assert_eq!((SiteRole::ENTER.0, SiteRole::EXIT.0), (3, 4));
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
        p.enter(7, 100, acct(50, 0, 0, 0));
        assert!(p.exit(7, 300, acct(200, 50, 0, 0)));
        p.enter(8, 600, acct(1000, 0, 0, 0));
        // An exit on another thread is not this poll's.
        assert!(!p.exit(7, 700, acct(0, 0, 0, 0)));
        assert!(p.exit(8, 900, acct(1100, 0, 200, 0)));
        assert!(!p.exit(8, 950, acct(1100, 0, 200, 0)), "already exited");
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
            p.enter(tid, i as u64 * 10, Acct::default());
            p.exit(tid, i as u64 * 10 + 5, Acct::default());
        }
        assert_eq!((p.polls, p.threads), (5, 2));
        // Past POLL_TIDS remembered threads, new ones still count (an upper bound).
        for tid in 10..10 + POLL_TIDS as u32 {
            p.enter(tid, 100, Acct::default());
            p.exit(tid, 100, Acct::default());
        }
        assert_eq!(p.threads, 2 + POLL_TIDS as u32);
    }

    #[test]
    fn a_second_enter_on_the_same_thread_closes_the_open_poll() {
        let mut p = PollAcct::default();
        p.enter(3, 0, acct(0, 0, 0, 0));
        p.enter(3, 40, acct(40, 0, 0, 0));
        assert!(p.exit(3, 100, acct(100, 0, 0, 0)));
        assert_eq!((p.acct.oncpu, p.run_ns, p.polls), (100, 100, 2));
        assert_eq!(p.idle_ns(60), 0, "saturates rather than wrapping");
    }
}
