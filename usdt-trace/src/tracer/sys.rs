//! Raw syscalls aya 0.14 does not expose: uprobes with a semaphore (ref_ctr_offset) through
//! perf_event_open, and BPF_LINK_CREATE with a cookie.

use std::{
    ffi::CString,
    io,
    os::fd::{FromRawFd, OwnedFd},
    time::Duration,
};

pub const UPROBE_PMU_TYPE: &str = "/sys/bus/event_source/devices/uprobe/type";
pub const UPROBE_PMU_REF_CTR: &str = "/sys/bus/event_source/devices/uprobe/format/ref_ctr_offset";
pub(super) const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
pub const BPF_PROG_LOAD: libc::c_long = 5;
pub const BPF_LINK_CREATE: libc::c_long = 28;
pub const BPF_PROG_TYPE_KPROBE: u32 = 2;
pub const BPF_PROG_TYPE_TRACING: u32 = 26;
pub const BPF_TRACE_RAW_TP: u32 = 23;
const BPF_PERF_EVENT: u32 = 41;
pub const BPF_TRACE_UPROBE_MULTI: u32 = 48;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;

pub fn uprobe_pmu_type() -> Result<u32, String> {
    let s =
        std::fs::read_to_string(UPROBE_PMU_TYPE).map_err(|e| format!("{UPROBE_PMU_TYPE}: {e}"))?;
    s.trim()
        .parse()
        .map_err(|_| format!("{UPROBE_PMU_TYPE}: unexpected contents {:?}", s.trim()))
}

/// `union bpf_attr` for BPF_PROG_LOAD, up to `log_true_size`.
#[repr(C)]
#[derive(Default)]
pub struct ProgLoadAttr {
    pub prog_type: u32,
    pub insn_cnt: u32,
    pub insns: u64,
    pub license: u64,
    pub log_level: u32,
    pub log_size: u32,
    pub log_buf: u64,
    pub kern_version: u32,
    pub prog_flags: u32,
    pub prog_name: [u8; 16],
    pub prog_ifindex: u32,
    pub expected_attach_type: u32,
    pub prog_btf_fd: u32,
    pub func_info_rec_size: u32,
    pub func_info: u64,
    pub func_info_cnt: u32,
    pub line_info_rec_size: u32,
    pub line_info: u64,
    pub line_info_cnt: u32,
    pub attach_btf_id: u32,
    pub attach_prog_fd: u32,
    pub core_relo_cnt: u32,
    pub fd_array: u64,
    pub core_relos: u64,
    pub core_relo_rec_size: u32,
    pub log_true_size: u32,
}

pub fn sys_bpf(cmd: libc::c_long, attr: *const u8, size: usize) -> i32 {
    // SAFETY: attr points at a zero-padded bpf_attr of `size` bytes.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr, size as u32) as i32 }
}

/// A loaded program's `bpf_prog_info` (BPF_OBJ_GET_INFO_BY_FD) and how many bytes of it the
/// kernel filled (older kernels know fewer fields), or None if the call fails.
fn prog_info(prog_fd: i32) -> Option<(aya_obj::generated::bpf_prog_info, usize)> {
    use aya_obj::generated::bpf_prog_info;
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    // SAFETY: bpf_prog_info is plain integers and pointers: all zeroes is valid.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let info_len = std::mem::size_of::<bpf_prog_info>() as u32;
    // struct { u32 bpf_fd; u32 info_len; u64 info; } of union bpf_attr, zero-padded.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&(prog_fd as u32).to_ne_bytes());
    attr[4..8].copy_from_slice(&info_len.to_ne_bytes());
    attr[8..16].copy_from_slice(&(&mut info as *mut bpf_prog_info as u64).to_ne_bytes());
    if sys_bpf(BPF_OBJ_GET_INFO_BY_FD, attr.as_ptr(), attr.len()) != 0 {
        return None;
    }
    // The kernel writes back how much of the struct it filled.
    let filled = u32::from_ne_bytes(attr[4..8].try_into().ok()?) as usize;
    Some((info, filled))
}

/// `recursion_misses` of a loaded program, or None if the kernel does not report it (older
/// than 5.12) or the call fails.
pub fn prog_recursion_misses(prog_fd: i32) -> Option<u64> {
    let (info, filled) = prog_info(prog_fd)?;
    let end = std::mem::offset_of!(aya_obj::generated::bpf_prog_info, recursion_misses) + 8;
    (filled >= end).then_some(info.recursion_misses)
}

/// How many instructions the verifier processed to accept a loaded program (`verified_insns`,
/// 5.16+): the figure its 1,000,000-instruction budget applies to.
pub fn prog_verified_insns(prog_fd: i32) -> Option<u32> {
    let (info, filled) = prog_info(prog_fd)?;
    let end = std::mem::offset_of!(aya_obj::generated::bpf_prog_info, verified_insns) + 4;
    (filled >= end && info.verified_insns > 0).then_some(info.verified_insns)
}

/// One eBPF instruction: opcode, registers, offset, immediate (`struct bpf_insn`).
pub const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    code as u64
        | (((dst & 0xf) | (src << 4)) as u64) << 8
        | (off as u16 as u64) << 16
        | (imm as u32 as u64) << 32
}

/// `r0 = 0`
pub const INSN_MOV_R0_0: u64 = insn(0xb7, 0, 0, 0, 0);
/// `exit`
pub const INSN_EXIT: u64 = insn(0x95, 0, 0, 0, 0);
/// `call helper`
pub const fn insn_call(helper: i32) -> u64 {
    insn(0x85, 0, 0, 0, helper)
}

/// Load a tiny GPL program, for probing what the kernel accepts.
pub fn load_probe_program(
    prog_type: u32,
    expected_attach_type: u32,
    attach_btf_id: u32,
    insns: &[u64],
) -> io::Result<OwnedFd> {
    let license = c"GPL";
    let attr = ProgLoadAttr {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        expected_attach_type,
        attach_btf_id,
        ..Default::default()
    };
    let fd = sys_bpf(
        BPF_PROG_LOAD,
        &attr as *const _ as *const u8,
        std::mem::size_of::<ProgLoadAttr>(),
    );
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The leading fields of `struct perf_event_attr` that a uprobe needs (PERF_ATTR_SIZE_VER5).
#[repr(C)]
#[derive(Default)]
pub(super) struct PerfEventAttr {
    pub(super) type_: u32,
    pub(super) size: u32,
    pub(super) config: u64,
    pub(super) sample_period: u64,
    pub(super) sample_type: u64,
    pub(super) read_format: u64,
    pub(super) flags: u64,
    pub(super) wakeup_events: u32,
    pub(super) bp_type: u32,
    pub(super) config1: u64,
    pub(super) config2: u64,
    pub(super) branch_sample_type: u64,
    pub(super) sample_regs_user: u64,
    pub(super) sample_stack_user: u32,
    pub(super) clockid: i32,
    pub(super) sample_regs_intr: u64,
    pub(super) aux_watermark: u32,
    pub(super) sample_max_stack: u16,
    pub(super) reserved: u16,
}

/// Open a uprobe perf event at `path`+`offset`, with the kernel raising the semaphore at
/// `ref_ctr_offset` while it is attached; `ref_ctr_shift` is where the PMU's format puts
/// that offset in `config`.
pub fn open_uprobe(
    pmu: u32,
    ref_ctr_shift: u32,
    path: &str,
    offset: u64,
    ref_ctr_offset: Option<u64>,
    pid: Option<u32>,
    ret: bool,
) -> io::Result<OwnedFd> {
    let cpath = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let attr = PerfEventAttr {
        type_: pmu,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        // The uprobe PMU's `retprobe` format is `config:0` (fixed since Linux 4.17).
        config: ref_ctr_offset.unwrap_or(0) << ref_ctr_shift | u64::from(ret),
        config1: cpath.as_ptr() as u64,
        config2: offset,
        ..Default::default()
    };
    // A uprobe event for every process needs a CPU; the BPF program still runs on all CPUs.
    let (pid, cpu) = match pid {
        Some(p) => (p as libc::pid_t, -1),
        None => (-1, 0),
    };
    // SAFETY: attr is a valid perf_event_attr prefix whose size field says how much to read;
    // cpath outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            pid,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned to us and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    bpf_cookie: u64,
    _rest: [u64; 4],
}

/// Attach `prog_fd` to the perf event with a cookie; the link lives as long as the fd.
pub fn link_perf_event(prog_fd: i32, perf_fd: i32, cookie: u64) -> io::Result<OwnedFd> {
    let attr = LinkCreateAttr {
        prog_fd: prog_fd as u32,
        target_fd: perf_fd as u32,
        attach_type: BPF_PERF_EVENT,
        flags: 0,
        bpf_cookie: cookie,
        _rest: [0; 4],
    };
    // SAFETY: attr is a zero-padded bpf_attr prefix of the size we pass.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_CREATE,
            &attr as *const LinkCreateAttr,
            std::mem::size_of::<LinkCreateAttr>() as u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let link = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // SAFETY: plain ioctl on a perf fd we own.
    unsafe { libc::ioctl(perf_fd, PERF_EVENT_IOC_ENABLE as _, 0) };
    Ok(link)
}

/// Raises the soft limit on open files to the hard limit (the perf path holds two descriptors
/// per site, past the usual soft limit of 1024 from ~500 sites) and returns it.
pub fn raise_nofile_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    lim.rlim_cur
}

pub fn raise_memlock_limit() {
    let lim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain setrlimit; failure only matters on kernels without memcg accounting.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
}

pub fn is_permission_error(msg: &str) -> bool {
    msg.contains("Operation not permitted") || msg.contains("Permission denied")
}

/// Block until one of `fds` is readable or `timeout` passes. EINTR returns early, Ok.
pub fn wait_any_readable(fds: &[i32], timeout: Duration) -> io::Result<bool> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds.len()` valid pollfds.
    let r = unsafe {
        libc::poll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            timeout.as_millis().min(i32::MAX as u128) as i32,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(r > 0)
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Fork a helper that ends up holding the last reference to each of `fds` and closes them one
/// by one (each close may wait ~0.1 s in the kernel); this process closes its own copies at
/// once. Returns the helper's PID.
pub fn hand_off_to_reaper(fds: Vec<OwnedFd>) -> io::Result<i32> {
    use std::os::fd::AsRawFd;
    let mut p = [0i32; 2];
    // SAFETY: plain pipe2 into a 2-int array.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: the child only calls async-signal-safe functions (setsid, signal, read, close,
    // _exit) on memory allocated before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        // SAFETY: closing our own pipe.
        unsafe {
            libc::close(p[0]);
            libc::close(p[1]);
        }
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: in the forked child: only async-signal-safe calls before it exits.
        unsafe {
            libc::close(p[1]);
            // Outlive a Ctrl-C sent to the terminal's process group.
            libc::setsid();
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            // Wait until the parent has closed its copies, so our close is the last one.
            let mut b = 0u8;
            while libc::read(p[0], &mut b as *mut u8 as *mut libc::c_void, 1) < 0 {}
            for fd in raw.iter().rev() {
                libc::close(*fd);
            }
            libc::_exit(0);
        }
    }
    drop(fds);
    // SAFETY: our ends of the pipe; closing the write end releases the helper.
    unsafe {
        libc::close(p[0]);
        libc::close(p[1]);
    }
    Ok(pid)
}

/// `union bpf_attr` for BPF_MAP_*_BATCH.
#[repr(C)]
#[derive(Default)]
struct MapBatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;

/// Writes `values[i]` at index `first + i` of array map `map_fd` in one syscall per
/// `CHUNK` values (BPF_MAP_UPDATE_BATCH, Linux 5.6+): 50,000 sites filled one
/// `BPF_MAP_UPDATE_ELEM` at a time took half of `watch`'s attach time.
pub fn array_update_batch<T: Copy>(map_fd: i32, first: u32, values: &[T]) -> io::Result<()> {
    // The kernel copies keys and values of a batch into its own buffers: bound their size.
    const CHUNK: usize = 8192;
    for (n, chunk) in values.chunks(CHUNK).enumerate() {
        let base = first + (n * CHUNK) as u32;
        let keys: Vec<u32> = (base..base + chunk.len() as u32).collect();
        let attr = MapBatchAttr {
            keys: keys.as_ptr() as u64,
            values: chunk.as_ptr() as u64,
            count: chunk.len() as u32,
            map_fd: map_fd as u32,
            ..Default::default()
        };
        if sys_bpf(
            BPF_MAP_UPDATE_BATCH,
            &attr as *const _ as *const u8,
            std::mem::size_of::<MapBatchAttr>(),
        ) < 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
