//! Holding a process that starts a new build of a followed file until its probes are
//! attached (`sched_process_exec`): the types its maps and ring carry.

/// A file by (device, inode), the kernel's `s_dev` (major << 20 | minor) and `i_ino`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub dev: u32,
    pub _pad: u32,
    pub ino: u64,
}

impl FileKey {
    /// The key of a file whose device user space knows as (major, minor).
    pub fn new(major: u32, minor: u32, ino: u64) -> FileKey {
        FileKey {
            dev: (major << 20) | (minor & 0xf_ffff),
            _pad: 0,
            ino,
        }
    }

    /// (major, minor) of the kernel's `dev_t`.
    pub fn major_minor(&self) -> (u32, u32) {
        (self.dev >> 20, self.dev & 0xf_ffff)
    }
}

/// One exec of an unknown file by a process of a followed name, from the `EXECS` ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecRecord {
    /// The process (tgid) that exec'd, and when (`bpf_ktime_get_ns`).
    pub pid: u32,
    /// 1 when the process was sent SIGSTOP (user space must send SIGCONT), 0 when the signal
    /// could not be sent.
    pub stopped: u32,
    pub ts_ns: u64,
    pub file: FileKey,
    /// Its command name after the exec (the file's name, cut to 15 bytes).
    pub comm: [u8; 16],
}

/// Where `sched_process_exec` finds the exec'd file's identity, from BTF: in `struct
/// linux_binprm` its `file`, in `struct file` its `f_inode`, in `struct inode` its `i_ino`
/// and `i_sb`, in `struct super_block` its `s_dev`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecConfig {
    pub bprm_file_off: u32,
    pub file_inode_off: u32,
    pub inode_ino_off: u32,
    pub inode_sb_off: u32,
    pub sb_dev_off: u32,
    pub _pad: u32,
}

/// `EXEC_COUNTS` indices: processes held, and holds given up because the `EXECS` ring was
/// full (the process then runs on unheld, as before the hold existed).
pub const EXEC_HELD: u32 = 0;
pub const EXEC_RING_FULL: u32 = 1;
pub const EXEC_COUNTS: u32 = 2;

/// SIGSTOP and SIGCONT (the same numbers on x86_64 and aarch64).
pub const SIGSTOP: u32 = 19;
