//! Holding the processes that start a new build of a followed file until it is attached
//! (`sched_process_exec`; the kernel side is `usdt-trace-ebpf`'s `exec.rs`, which says why).
//! [`crate::watch::follow`] decides what to follow and when to let a process go; this module only
//! fills the maps, attaches the hook and reads what it reports.

use super::{error_chain, features::VMLINUX_BTF, map_err, TraceError, Tracer};
use aya::maps::{Array, HashMap as BpfHashMap, PerCpuArray, RingBuf};
use aya::programs::{BtfTracePoint, ProgramError};
use std::os::fd::{AsFd, AsRawFd};
use usdt_trace_common::{maps, ExecConfig, ExecRecord, FileKey, EXEC_HELD, EXEC_RING_FULL};

/// A command name as the kernel keeps it: at most 15 bytes, NUL-padded.
pub fn comm_key(name: &str) -> [u8; 16] {
    let mut k = [0u8; 16];
    let b = name.as_bytes();
    let n = b.len().min(15);
    k[..n].copy_from_slice(&b[..n]);
    k
}

impl Tracer {
    /// Holds every exec of a file not in `known` by a process named one of `names`, until
    /// [`crate::watch::follow`] lets it go. Err when this kernel's BTF lacks what the hook reads or
    /// the hook cannot be attached: new builds are then found by polling alone.
    pub fn hold_execs(&mut self, names: &[String], known: &[FileKey]) -> Result<(), TraceError> {
        let vmlinux = std::fs::read(VMLINUX_BTF)
            .map_err(|e| TraceError::Btf(format!("{VMLINUX_BTF}: {e}")))?;
        let off = |s: &str, m: &str| {
            crate::tracer::btf::member_offset(&vmlinux, s, m)
                .map_err(|e| TraceError::Btf(format!("{s}.{m}: {e}")))
        };
        let cfg = ExecConfig {
            bprm_file_off: off("linux_binprm", "file")?,
            file_inode_off: off("file", "f_inode")?,
            inode_ino_off: off("inode", "i_ino")?,
            inode_sb_off: off("inode", "i_sb")?,
            sb_dev_off: off("super_block", "s_dev")?,
            _pad: 0,
        };
        {
            let mut a: Array<_, ExecConfig> = Array::try_from(
                self.ebpf
                    .map_mut(maps::EXEC_CONFIG)
                    .ok_or(TraceError::MissingMap(maps::EXEC_CONFIG))?,
            )
            .map_err(map_err(maps::EXEC_CONFIG))?;
            a.set(0, cfg, 0).map_err(map_err(maps::EXEC_CONFIG))?;
        }
        {
            let mut comms: BpfHashMap<_, [u8; 16], u8> = BpfHashMap::try_from(
                self.ebpf
                    .map_mut(maps::EXEC_COMMS)
                    .ok_or(TraceError::MissingMap(maps::EXEC_COMMS))?,
            )
            .map_err(map_err(maps::EXEC_COMMS))?;
            for n in names {
                comms
                    .insert(comm_key(n), 1, 0)
                    .map_err(map_err(maps::EXEC_COMMS))?;
            }
        }
        for k in known {
            self.know_file(*k);
        }
        let btf = aya::Btf::from_sys_fs().map_err(|e| TraceError::Btf(e.to_string()))?;
        let name = "sched_process_exec";
        let tp: &mut BtfTracePoint = self
            .ebpf
            .program_mut(name)
            .ok_or(TraceError::MissingProgram("exec hook"))?
            .try_into()
            .map_err(|e: ProgramError| TraceError::Load(e.to_string()))?;
        tp.load(name, &btf)
            .map_err(|e| TraceError::Load(error_chain(&e)))?;
        let link = tp
            .attach()
            .map_err(|source| TraceError::Tracepoint { name, source })?;
        self.exec_link = Some(link);
        let ring = RingBuf::try_from(
            self.ebpf
                .take_map(maps::EXECS)
                .ok_or(TraceError::MissingMap(maps::EXECS))?,
        )
        .map_err(map_err(maps::EXECS))?;
        // A held process is let go from the main loop: its record ends the loop's wait.
        self.wake_fds.push(ring.as_fd().as_raw_fd());
        self.execs = Some(ring);
        Ok(())
    }

    /// Stops holding execs, and returns what was held meanwhile: the hook comes off first, so
    /// that no process is stopped after the last look (it would never be let go).
    pub fn stop_holding(&mut self) -> Vec<ExecRecord> {
        if let Some(link) = self.exec_link.take() {
            let tp: Option<&mut BtfTracePoint> = self
                .ebpf
                .program_mut("sched_process_exec")
                .and_then(|p| p.try_into().ok());
            if let Some(tp) = tp {
                let _ = tp.detach(link);
            }
        }
        self.take_execs()
    }

    /// A file attached, or looked at and found with nothing to trace: its execs are not held.
    pub fn know_file(&mut self, key: FileKey) {
        if let Some(m) = self.ebpf.map_mut(maps::EXEC_KNOWN) {
            if let Ok(mut known) = BpfHashMap::<_, FileKey, u8>::try_from(m) {
                // A full map holds the execs of files past it again: each is let go as soon
                // as it is seen known (`Follow`), so that costs a hold, never a lost one.
                let _ = known.insert(key, 1, 0);
            }
        }
    }

    /// A file detached and closed ([`know_file`](Self::know_file) undone): its inode may be
    /// given to a new file, whose execs must be held again.
    pub fn forget_file(&mut self, key: FileKey) {
        if let Some(m) = self.ebpf.map_mut(maps::EXEC_KNOWN) {
            if let Ok(mut known) = BpfHashMap::<_, FileKey, u8>::try_from(m) {
                let _ = known.remove(&key);
            }
        }
    }

    /// The execs held (or reported) since the last call.
    pub fn take_execs(&mut self) -> Vec<ExecRecord> {
        let mut v = Vec::new();
        if let Some(ring) = self.execs.as_mut() {
            while let Some(item) = ring.next() {
                if item.len() >= std::mem::size_of::<ExecRecord>() {
                    // SAFETY: the record is at least an ExecRecord's size, ExecRecord is plain
                    // data valid for any bytes, and the read is unaligned.
                    v.push(unsafe { std::ptr::read_unaligned(item.as_ptr() as *const ExecRecord) });
                }
            }
        }
        v
    }

    /// Processes held so far, and holds given up because the exec ring was full.
    pub fn exec_counts(&self) -> (u64, u64) {
        let Some(m) = self.ebpf.map(maps::EXEC_COUNTS) else {
            return (0, 0);
        };
        let Ok(a) = PerCpuArray::<_, u64>::try_from(m) else {
            return (0, 0);
        };
        let sum = |i: u32| a.get(&i, 0).map_or(0, |v| v.iter().sum());
        (sum(EXEC_HELD), sum(EXEC_RING_FULL))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_is_cut_to_the_kernels_fifteen_bytes() {
        assert_eq!(&comm_key("usdtfollowtst")[..14], b"usdtfollowtst\0");
        let k = comm_key("a-very-long-program-name");
        assert_eq!(&k[..15], b"a-very-long-pro");
        assert_eq!(k[15], 0);
    }

    #[test]
    fn file_keys_carry_the_kernels_dev_t() {
        let k = FileKey::new(253, 1, 42);
        assert_eq!(k.dev, (253 << 20) | 1);
        assert_eq!(k.major_minor(), (253, 1));
    }
}
