//! What the kernel sends through the ring buffer (records) and counts (`CNT_*`).

#[allow(unused_imports)]
use crate::*;

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
    /// A [`WaitRecord`]: one off-CPU interval of a thread with a span open (`CFG_WAITS`).
    pub const WAIT: RecordKind = RecordKind(5);
    /// A [`StackCopyRecord`]: the registers and the top of the user stack at the end of the
    /// span record that follows it (`--stack=dwarf`), unwound in user space.
    pub const STACK_COPY: RecordKind = RecordKind(6);
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

/// [`WaitRecord`]s the ring buffer had no room for (`CFG_WAITS`): those off-CPU intervals
/// are missing from the Perfetto trace, though their time is still in their spans' split.
pub const CNT_WAITS_LOST: u32 = 15;

/// Off-CPU intervals not sent since `--perfetto-max-waits` was reached (`CFG_WAITS_CAPPED`).
pub const CNT_WAITS_CAPPED: u32 = 16;

/// Number of counters.
pub const NUM_COUNTERS: u32 = CNT_WAITS_CAPPED + 1;

/// `EventRecord::has_strs`/`SpanRecord::has_strs`: its strings went just before it.
pub const STRS_RECORD_SENT: u32 = 1;

/// `EventRecord::has_strs`/`SpanRecord::has_strs`: it had strings, but the ring buffer had no
/// room for their record: the outputs mark it rather than show the pointers silently.
pub const STRS_RECORD_LOST: u32 = 2;

/// Frames a `--stack` capture keeps (the innermost ones).
pub const STACK_DEPTH: usize = 32;

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
    /// With `acct_valid`: the thread's running total of [`Acct::steal`] at the span's start
    /// (its total at the end is this plus `acct.steal`). With each [`WaitRecord`]'s
    /// `steal_total` it places the steal inside the span, on-CPU stretch by stretch: the
    /// Perfetto output's `steal` slices.
    pub steal_start: u64,
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

/// Bytes of user stack a [`StackCopyRecord`] has room for. The copy is made page by page from
/// the stack pointer up, so it holds between `STACK_COPY_BYTES - 4095` and `STACK_COPY_BYTES`
/// bytes (less where the stack's mapping ends sooner).
pub const STACK_COPY_BYTES: usize = 16384;

/// Page size the copy is cut by (the smallest page of both architectures: a 4 KiB-aligned
/// chunk never straddles a mapping's end on 16 or 64 KiB pages either).
pub const STACK_COPY_CHUNK: usize = 4096;

/// `StackCopyRecord::regs` indices: the instruction pointer at the probe.
pub const SC_REG_IP: usize = 0;
/// The stack pointer: `stack[0]` is the byte at this address.
pub const SC_REG_SP: usize = 1;
/// The frame pointer (`rbp`, `x29`).
pub const SC_REG_FP: usize = 2;
/// The link register (`x30` on aarch64; 0 on x86_64, whose return address is on the stack).
pub const SC_REG_LR: usize = 3;

/// `--stack=dwarf`: the registers at the probe and a copy of the top of the user stack where
/// a span ended, for user space to unwind with the objects' call frame information
/// (`.eh_frame`, `.debug_frame`): code built without frame pointers gets its stack too. Emitted
/// just before its span's record and paired with it as a [`StackRecord`] is.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StackCopyRecord {
    /// `kind` is [`RecordKind::STACK_COPY`]; `comm` is not filled.
    pub hdr: RecordHeader,
    /// `SC_REG_*`: ip, sp, fp, lr.
    pub regs: [u64; 4],
    /// Bytes of `stack` copied, from `regs[SC_REG_SP]` up (0: not even the first page).
    pub len: u32,
    pub _pad: u32,
    pub stack: [u8; STACK_COPY_BYTES],
}

/// One off-CPU interval of a thread that had a span open, sent by the scheduler hooks as the
/// thread gets the CPU back (`CFG_WAITS`, the Perfetto output only): one record per interval,
/// carrying all three moments, rather than one at each of them. See [`OffInterval`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct WaitRecord {
    /// `kind` [`RecordKind::WAIT`], `site` 0, `pid`/`tid` the thread's, `ts_ns` when it ran
    /// again; `comm` the thread's, read from its task (`Config::task_comm_off`), else empty.
    pub hdr: RecordHeader,
    pub off: OffInterval,
    /// Who woke it (sched_waking): a task, or (pid and tid 0) an interrupt's label in `comm`;
    /// all zero for a preemption or a wakeup the hook did not see.
    pub waker_pid: u32,
    pub waker_tid: u32,
    pub waker_comm: [u8; 16],
    /// The thread's running total of [`Acct::steal`] when it left the CPU (`off.slept_ns`):
    /// what the host took from its on-CPU stretches up to then (see
    /// [`SpanRecord::steal_start`]).
    pub steal_total: u64,
}
