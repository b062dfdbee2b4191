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

/// At most this many arguments per probe (the SDT format allows 12).
pub const MAX_ARGS: usize = 12;
/// Bytes captured for a `--str` argument, including the terminating NUL.
pub const STR_LEN: usize = 128;
/// Nesting depth of the per-thread span stack. Deeper starts are counted as unmatched.
pub const MAX_DEPTH: usize = 16;
/// Number of log2 buckets per histogram (covers 1 ns up to ~2^63 ns).
pub const HIST_BUCKETS: usize = 64;
/// Components of a span histogram: duration, on-CPU, run-queue, sleep, I/O.
pub const HIST_COMPONENTS: usize = 5;
/// Span names (pairs) that can have histograms.
pub const MAX_PAIRS: u32 = 4096;

/// `ArgDesc::kind`: how to fetch an argument.
pub const ARG_NONE: u8 = 0;
/// Immediate constant in `val`.
pub const ARG_CONST: u8 = 1;
/// Register `base_reg` (a u64 word index into `pt_regs`).
pub const ARG_REG: u8 = 2;
/// Memory at `regs[base_reg] + regs[index_reg] * scale + val` (index_reg may be `REG_NONE`).
pub const ARG_MEM: u8 = 3;
/// Memory at `ip + val`: `val` is `(symbol + offset) - pc`, which is position independent.
pub const ARG_RIP: u8 = 4;
/// The spec could not be decoded or cannot be read (floats, 16-byte structs, %ah, ...).
pub const ARG_UNSUPPORTED: u8 = 5;

/// No register.
pub const REG_NONE: u8 = 0xff;

/// `SiteSpec::role`.
pub const ROLE_EVENT: u8 = 0;
/// Opens a span.
pub const ROLE_START: u8 = 1;
/// Closes a span.
pub const ROLE_END: u8 = 2;

/// `SiteSpec::id_arg` when the span pairs on the thread's stack rather than by an id argument.
pub const ID_NONE: u8 = 0xff;
/// `SiteSpec::str_arg` when no argument is captured as a string.
pub const STR_NONE: u8 = 0xff;

/// Ring buffer record kinds (`RecordHeader::kind`).
pub const REC_EVENT: u32 = 1;
/// A closed span.
pub const REC_SPAN: u32 = 2;

/// Indices into the `COUNTERS` per-CPU array.
pub const CNT_EVENTS: u32 = 0;
/// Spans closed.
pub const CNT_SPANS: u32 = 1;
/// Records the ring buffer had no room for.
pub const CNT_LOST: u32 = 2;
/// Span starts that never got an end (stack overflow, thread exit, mismatched nesting).
pub const CNT_UNMATCHED_START: u32 = 3;
/// Span ends without a start.
pub const CNT_UNMATCHED_END: u32 = 4;
/// Hits filtered out by the PID filter.
pub const CNT_FILTERED: u32 = 5;
/// Per-thread state could not be allocated (map full).
pub const CNT_NO_STATE: u32 = 6;
/// Number of counters.
pub const NUM_COUNTERS: u32 = 8;

/// `Config::flags`: only hits from PIDs in the `PIDS` map count.
pub const CFG_PID_FILTER: u32 = 1;
/// `Config::flags`: keep in-kernel histograms and emit no per-span records.
pub const CFG_HIST: u32 = 2;
/// `Config::flags`: account scheduler time per span.
pub const CFG_ACCT: u32 = 4;

/// `Config::flags`: tracing has stopped; hits during the detach are ignored so the summary
/// counts only what was printed.
pub const CFG_STOPPED: u32 = 8;

/// Thread scheduling states tracked by the scheduler hooks.
pub const TS_RUNNING: u32 = 0;
/// Runnable, waiting for a CPU (preempted or woken and not yet running).
pub const TS_RUNQ: u32 = 1;
/// Interruptible sleep.
pub const TS_SLEEP: u32 = 2;
/// Uninterruptible sleep (disk and other D-state waits).
pub const TS_IO: u32 = 3;

/// How to read one argument at a probe site.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArgDesc {
    /// One of the `ARG_*` constants.
    pub kind: u8,
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
    /// One of `ROLE_*`.
    pub role: u8,
    /// For spans paired by id: which argument carries the span id; else `ID_NONE`.
    pub id_arg: u8,
    /// Number of arguments to read.
    pub nargs: u8,
    /// Argument to capture as a NUL-terminated string, or `STR_NONE`.
    pub str_arg: u8,
    pub args: [ArgDesc; MAX_ARGS],
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
    /// the scheduler hooks read them to account a switch-in they never saw.
    pub task_exec_off: u32,
    pub task_delay_off: u32,
    pub _pad: u32,
}

/// Cumulative per-thread time, in ns, by scheduling state. Only advanced while a span is open.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Acct {
    pub oncpu: u64,
    pub runq: u64,
    pub sleep: u64,
    pub io: u64,
}

/// An open span.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Frame {
    /// Cookie of the start site.
    pub site: u32,
    /// Span name index; an end only closes a frame with the same pair id.
    pub pair_id: u32,
    /// Thread that opened the span.
    pub tid: u32,
    /// Length of `str` including the NUL, 0 when none was captured.
    pub str_len: u32,
    /// bpf_ktime_get_ns() at the start.
    pub start_ns: u64,
    /// The thread's cumulative accounting at the start.
    pub acct_start: Acct,
    /// Longest single off-CPU interval seen while this frame was open.
    pub longest_off_ns: u64,
    /// Who woke the thread after that interval.
    pub waker_pid: u32,
    pub waker_tid: u32,
    pub waker_comm: [u8; 16],
    pub args: [u64; MAX_ARGS],
    pub str: [u8; STR_LEN],
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
    /// `TS_*`: what the thread is doing since `since_ns`.
    pub state: u32,
    /// When the current state began.
    pub since_ns: u64,
    /// Totals up to `since_ns`.
    pub acct: Acct,
    /// When the thread last left the CPU (start of the current off-CPU interval).
    pub off_start_ns: u64,
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
    /// `REC_EVENT` or `REC_SPAN`.
    pub kind: u32,
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
    pub str_len: u32,
    pub _pad: u32,
    pub args: [u64; MAX_ARGS],
    pub str: [u8; STR_LEN],
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
    pub str_len: u32,
    pub longest_off_ns: u64,
    pub waker_comm: [u8; 16],
    pub args: [u64; MAX_ARGS],
    pub end_args: [u64; MAX_ARGS],
    pub str: [u8; STR_LEN],
}

/// Key of one histogram bucket row: the span name and the component.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistKey {
    pub pair_id: u32,
    /// 0 duration, 1 on-CPU, 2 run-queue, 3 sleep, 4 I/O.
    pub component: u32,
}

/// One histogram: counts per log2 bucket, plus the sum for means.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Hist {
    pub buckets: [u64; HIST_BUCKETS],
    pub count: u64,
    pub sum: u64,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            buckets: [0; HIST_BUCKETS],
            count: 0,
            sum: 0,
        }
    }
}

/// The log2 bucket of `v`: 0 for 0, else 1 + floor(log2(v)), clamped.
#[inline(always)]
pub fn log2_bucket(v: u64) -> usize {
    if v == 0 {
        0
    } else {
        let b = 64 - v.leading_zeros() as usize;
        if b >= HIST_BUCKETS {
            HIST_BUCKETS - 1
        } else {
            b
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all of these are repr(C), Copy, and valid for every bit pattern.
    unsafe impl aya::Pod for ArgDesc {}
    unsafe impl aya::Pod for SiteSpec {}
    unsafe impl aya::Pod for Config {}
    unsafe impl aya::Pod for IdKey {}
    unsafe impl aya::Pod for HistKey {}
    unsafe impl aya::Pod for Hist {}
    unsafe impl aya::Pod for Acct {}
    unsafe impl aya::Pod for Frame {}
    unsafe impl aya::Pod for ThreadState {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_buckets() {
        assert_eq!(log2_bucket(0), 0);
        assert_eq!(log2_bucket(1), 1);
        assert_eq!(log2_bucket(2), 2);
        assert_eq!(log2_bucket(3), 2);
        assert_eq!(log2_bucket(1024), 11);
        assert_eq!(log2_bucket(u64::MAX), HIST_BUCKETS - 1);
    }

    #[test]
    fn record_sizes_are_stable() {
        // The ring buffer protocol relies on these sizes; a change here must be deliberate.
        assert_eq!(core::mem::size_of::<RecordHeader>(), 40);
        assert_eq!(core::mem::size_of::<ArgDesc>(), 16);
        assert_eq!(core::mem::size_of::<SiteSpec>(), 8 + 16 * MAX_ARGS);
    }
}
