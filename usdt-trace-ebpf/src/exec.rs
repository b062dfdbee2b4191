//! Holding a process that starts a new build of a followed file (`watch PATH`, `serve`,
//! `--process NAME`) until its probes are attached.
//!
//! A deploy renames a new build over a traced path and starts it: uprobes belong to an
//! inode, so none fire in the new process until user space has noticed the new file and
//! attached it; polling for it lost the new process's first 0.3-0.6 s of spans. Here the
//! kernel notices the exec itself: a process whose name (after the exec, its file's name) is
//! one user space follows (`EXEC_COMMS`) and whose file is none it knows (`EXEC_KNOWN`) is
//! sent SIGSTOP, which takes effect before its first instruction, and reported on a ring of
//! its own (`EXECS`, never crowded out by spans). User space attaches the file and sends
//! SIGCONT. A full ring holds nothing (the record that would ask for the SIGCONT could not be
//! sent): the process then runs on as before, counted.

use aya_ebpf::{
    bindings::BPF_RB_FORCE_WAKEUP,
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::map,
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::BtfTracePointContext,
};
use usdt_trace_common::{
    ExecConfig, ExecRecord, FileKey, EXEC_COUNTS as NUM_EXEC_COUNTS, EXEC_HELD, EXEC_RING_FULL,
    SIGSTOP,
};

use crate::maps::current_comm_into;

#[map]
pub static EXEC_CONFIG: Array<ExecConfig> = Array::with_max_entries(1, 0);
/// Command names followed (a TARGET's file name or a `--process` name, cut to 15 bytes).
#[map]
pub static EXEC_COMMS: HashMap<[u8; 16], u8> = HashMap::with_max_entries(256, 0);
/// Files attached, or looked at and found with nothing to trace.
#[map]
pub static EXEC_KNOWN: HashMap<FileKey, u8> = HashMap::with_max_entries(4096, 0);
#[map]
pub static EXECS: RingBuf = RingBuf::with_byte_size(1 << 16, 0);
#[map]
pub static EXEC_COUNTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(NUM_EXEC_COUNTS, 0);

fn count(i: u32) {
    if let Some(c) = EXEC_COUNTS.get_ptr_mut(i) {
        // SAFETY: this CPU's slot, which nothing else writes while this program runs.
        unsafe { *c += 1 };
    }
}

/// A checked read of a kernel u64 at `base + off`.
#[inline(always)]
fn read_u64(base: u64, off: u32) -> Option<u64> {
    // SAFETY: the helper checks the kernel address and fails on a fault.
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const u64) }.ok()
}

/// sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm): runs
/// in the process that exec'd, its new image in place.
#[inline(always)]
pub fn on_exec(ctx: &BtfTracePointContext) -> Option<()> {
    let mut comm = [0u8; 16];
    current_comm_into(&mut comm);
    // SAFETY: a lookup by a key we own; the value is not used.
    unsafe { EXEC_COMMS.get(&comm) }?;
    let cfg = EXEC_CONFIG.get(0)?;
    let bprm: u64 = ctx.arg(2);
    let file = read_u64(bprm, cfg.bprm_file_off)?;
    let inode = read_u64(file, cfg.file_inode_off)?;
    let ino = read_u64(inode, cfg.inode_ino_off)?;
    let sb = read_u64(inode, cfg.inode_sb_off)?;
    // SAFETY: as in read_u64.
    let dev = unsafe { bpf_probe_read_kernel((sb + cfg.sb_dev_off as u64) as *const u32) }.ok()?;
    let key = FileKey { dev, _pad: 0, ino };
    // SAFETY: a lookup by a key we own; the value is not used.
    if unsafe { EXEC_KNOWN.get(&key) }.is_some() {
        return Some(());
    }
    // The record first: a process stopped with no record asking for its SIGCONT would stay
    // stopped.
    let Some(mut entry) = EXECS.reserve::<ExecRecord>(0) else {
        count(EXEC_RING_FULL);
        return Some(());
    };
    // SAFETY: the helper has no preconditions; it signals the current process.
    let sent = unsafe { aya_ebpf::helpers::generated::bpf_send_signal(SIGSTOP) } == 0;
    let rec = ExecRecord {
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        stopped: sent as u32,
        // SAFETY: the helper has no preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        file: key,
        comm,
    };
    entry.write(rec);
    entry.submit(BPF_RB_FORCE_WAKEUP as u64);
    if sent {
        count(EXEC_HELD);
    }
    Some(())
}
