//! What user space tells the kernel: one `SiteSpec` per site (its arguments, strings, role), and the run's `Config`.

#[allow(unused_imports)]
use crate::*;

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

/// `Config::flags`: `--perfetto`: the scheduler hooks send a [`WaitRecord`] for each off-CPU
/// interval of a thread with a span open, as it gets the CPU back. Only the Perfetto output
/// draws them; without it they would cost a ring-buffer record per context switch for nothing.
pub const CFG_WAITS: u32 = 64;

/// `Config::flags`: `--perfetto-max-waits` was reached: the trace draws no more waits, so the
/// hooks only count them (`CNT_WAITS_CAPPED`) rather than send records the reader would only
/// count (each a ring-buffer reserve per context switch, and room taken from spans).
pub const CFG_WAITS_CAPPED: u32 = 128;

/// `Config::flags`, with [`CFG_STACK`]: `--stack=dwarf`: each recorded span is preceded by a
/// [`StackCopyRecord`] (registers and the stack's top) instead of a [`StackRecord`].
pub const CFG_STACK_COPY: u32 = 256;

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
    pub _pad: [u8; 2],
    /// What a hit of this site costs the thread, in ns, as measured at start for its kind of
    /// probe (an emulated or a single-stepped instruction, a return probe): added to the
    /// thread's [`Acct::probe_ns`] per hit.
    pub probe_ns: u32,
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
    /// 64-bit `orig_ax`, aarch64's 32-bit `syscallno`), 0 when unknown: sched_switch reads it
    /// to tell what a sleeping thread waits on (`SYSCALL_CLASS`).
    pub regs_nr_off: u32,
    /// Offset of `comm` in `struct task_struct`, 0 when unknown: the scheduler hooks name the
    /// thread of a [`WaitRecord`] (`CFG_WAITS`) through it, as they run as another task.
    pub task_comm_off: u32,
    /// Where the steal counter of the CPU a task runs on is ([`crate::CpuSteal`]), from BTF,
    /// each 0 when unknown (then no steal is split off the on-CPU time): the task's
    /// `se.cfs_rq` in `struct task_struct`, that run queue's `rq` in `struct cfs_rq`, and
    /// `clock` and `clock_task` in `struct rq`.
    pub task_cfs_rq_off: u32,
    pub cfs_rq_rq_off: u32,
    pub rq_clock_off: u32,
    pub rq_clock_task_off: u32,
    /// What a thread sleeping in a poll or a read waits on ([`crate::refine_class`]), each
    /// [`OFF_NONE`] when unknown (then a poll is a wait on the network and a read "other", as the syscall
    /// alone says): in `struct pt_regs` the first two syscall arguments; `task_struct.files`,
    /// `files_struct.fdt`, `fdtable.max_fds` and `fdtable.fd`, `file.f_inode` and
    /// `inode.i_mode`, the path from a file descriptor to its file's type.
    pub regs_arg0_off: u32,
    pub regs_arg1_off: u32,
    pub task_files_off: u32,
    pub files_fdt_off: u32,
    pub fdt_max_fds_off: u32,
    pub fdt_fd_off: u32,
    pub file_inode_off: u32,
    pub inode_mode_off: u32,
    /// `--perfetto` (`CFG_WAITS`): a [`WaitRecord`] is sent only while fewer than this many
    /// bytes wait in the ring buffer (half of it), else dropped and counted
    /// (`CNT_WAITS_LOST`): waits are many and cheap to lose, spans are few and are the point,
    /// so waits never take the half of the ring kept for spans. One ring rather than a second
    /// one for waits: a thread's waits then reach user space before the span that holds them,
    /// in the order they happened, with no merge of two rings.
    pub waits_max_bytes: u32,
    pub _pad: u32,
    /// `--min`: spans shorter than this many ns make no record (0: every span does).
    pub min_ns: u64,
}

/// A member offset this kernel's BTF did not have (for members whose offset may be 0).
pub const OFF_NONE: u32 = u32::MAX;

/// Whether a [`WaitRecord`] may be sent with `waiting` bytes already in the ring buffer
/// (`Config::waits_max_bytes`; 0 lets every one through).
#[inline(always)]
pub fn wait_fits(waiting: u64, max_bytes: u32) -> bool {
    max_bytes == 0 || waiting < max_bytes as u64
}

/// Whether a ring buffer record of `size` bytes that leaves `waiting` bytes for the reader
/// wakes it: when it carries the waiting data across a multiple of `threshold`, so a reader
/// is woken once per `threshold` bytes of data however far behind it is (never for a
/// threshold of 0).
#[inline(always)]
pub fn wakes_reader(waiting: u64, size: u64, threshold: u64) -> bool {
    threshold > 0 && waiting / threshold != waiting.saturating_sub(size) / threshold
}
