//! Which processes mapped new code: the kernel's `PERF_RECORD_MMAP2` records.
//!
//! A probe a process defines after `watch` started (a memfd object it `dlopen`s, a library it
//! loads) arrives as an executable mapping. One perf "dummy" software event per CPU, opened
//! for every process with `mmap` and `mmap2` set (`mmap_data` clear), makes the kernel write
//! a record for each executable mapping made anywhere, with the PID, the file's device and
//! inode and its name, into a small ring
//! per CPU. The reader looks at the rings' heads (a memory read, no system call) from the loop
//! it already runs, and re-reads `/proc/PID/maps` only for a traced process that mapped code.
//!
//! Why this and not a tracepoint on the `mmap` syscall's exit: the record is made after the
//! mapping exists (the kernel's `perf_event_mmap`), covers every way code gets mapped
//! (`mmap`, `execve`'s own mappings) rather than one syscall, needs no eBPF program or
//! syscall tracepoints (not every kernel has `CONFIG_FTRACE_SYSCALLS`), and costs nothing
//! while nothing is mapped. It needs the right to open system-wide perf events (root or
//! `CAP_PERFMON`); without it the caller falls back to a slow poll of the maps.

use super::sys::{PerfEventAttr, PERF_FLAG_FD_CLOEXEC};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_DUMMY: u64 = 9;
/// `perf_event_attr.mmap`: a record for each executable mapping.
const ATTR_MMAP: u64 = 1 << 8;
/// `perf_event_attr.mmap2`: the records carry the file's device and inode.
const ATTR_MMAP2: u64 = 1 << 23;
const PERF_RECORD_MMAP2: u32 = 10;
/// `misc` flag of an MMAP2 record carrying a build id instead of device and inode.
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
const PERF_RECORD_LOST: u32 = 2;
/// Data pages per CPU (a power of two): a record is ~64 bytes plus the path, and the loop
/// reads them every 50 ms; a full ring only costs a rescan of every traced process.
const DATA_PAGES: usize = 16;
/// Offsets of `data_head`/`data_tail` in `struct perf_event_mmap_page`.
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;

/// What the rings said since the last look.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Mapped {
    /// Processes that mapped code (each once, in order of first record).
    pub pids: Vec<u32>,
    /// (pid, (major, minor), inode) of each file mapped (each once): what a process that
    /// starts running a named file maps.
    pub files: Vec<(u32, (u32, u32), u64)>,
    /// Records were lost: any process may have mapped code.
    pub lost: bool,
}

struct Ring {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// One ring per online CPU.
pub struct MmapWatch {
    rings: Vec<Ring>,
    page: usize,
}

fn online_cpus() -> io::Result<Vec<u32>> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_cpu_list(&s)
        .ok_or_else(|| io::Error::other(format!("/sys/devices/system/cpu/online: {s:?}")))
}

/// `0-3,6,8-9` → the CPUs.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 65536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    (!out.is_empty()).then_some(out)
}

impl MmapWatch {
    pub fn open() -> io::Result<MmapWatch> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = page * (1 + DATA_PAGES);
        let mut rings = Vec::new();
        for cpu in online_cpus()? {
            let attr = PerfEventAttr {
                type_: PERF_TYPE_SOFTWARE,
                size: std::mem::size_of::<PerfEventAttr>() as u32,
                config: PERF_COUNT_SW_DUMMY,
                flags: ATTR_MMAP | ATTR_MMAP2,
                // Readable (poll) after every record: a new mapping wakes the reader at once.
                wakeup_events: 1,
                ..Default::default()
            };
            // SAFETY: attr is a valid perf_event_attr prefix whose size field says how much
            // to read.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    &attr as *const PerfEventAttr,
                    -1,
                    cpu as libc::c_int,
                    -1,
                    PERF_FLAG_FD_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a descriptor just returned to us.
            let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            // SAFETY: mapping the event's ring, as perf_event_open(2) describes.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            rings.push(Ring {
                fd,
                base: base.cast(),
                len,
            });
        }
        Ok(MmapWatch { rings, page })
    }

    /// The rings' descriptors, readable when a record arrives.
    pub fn fds(&self) -> Vec<i32> {
        self.rings.iter().map(|r| r.fd.as_raw_fd()).collect()
    }

    /// Takes every record written since the last call.
    pub fn take(&mut self) -> Mapped {
        let mut out = Mapped::default();
        let size = self.page * DATA_PAGES;
        for r in &self.rings {
            // SAFETY: the control page of our live mapping; the kernel advances data_head,
            // we advance data_tail (the protocol in perf_event_open(2)).
            unsafe {
                let head_p = r.base.add(DATA_HEAD) as *const u64;
                let tail_p = r.base.add(DATA_TAIL) as *mut u64;
                let head = std::ptr::read_volatile(head_p);
                fence(Ordering::Acquire);
                let tail = std::ptr::read_volatile(tail_p);
                if head == tail {
                    continue;
                }
                let data = std::slice::from_raw_parts(r.base.add(self.page), size);
                // The records between tail and head, unwrapped.
                let n = (head - tail).min(size as u64) as usize;
                let start = (tail % size as u64) as usize;
                let mut buf = Vec::with_capacity(n);
                let first = n.min(size - start);
                buf.extend_from_slice(&data[start..start + first]);
                buf.extend_from_slice(&data[..n - first]);
                parse_records(&buf, &mut out);
                fence(Ordering::Release);
                std::ptr::write_volatile(tail_p, head);
            }
        }
        out
    }
}

/// Reads `PERF_RECORD_MMAP2` (pid, device, inode) and `PERF_RECORD_LOST` records; others
/// are skipped, a truncated one ends the buffer.
pub fn parse_records(buf: &[u8], out: &mut Mapped) {
    let mut at = 0;
    while at + 8 <= buf.len() {
        let ty = u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        let size = u16::from_ne_bytes([buf[at + 6], buf[at + 7]]) as usize;
        if size < 8 || at + size > buf.len() {
            return;
        }
        match ty {
            PERF_RECORD_MMAP2 if size >= 56 => {
                let u32_at = |o: usize| {
                    u32::from_ne_bytes([
                        buf[at + o],
                        buf[at + o + 1],
                        buf[at + o + 2],
                        buf[at + o + 3],
                    ])
                };
                let pid = u32_at(8);
                let misc = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
                // pid, tid, addr, len, pgoff, then maj, min, ino (or a build id).
                if misc & MISC_MMAP_BUILD_ID == 0 {
                    let ino = u64::from(u32_at(48)) | u64::from(u32_at(52)) << 32;
                    let f = (pid, (u32_at(40), u32_at(44)), ino);
                    if !out.files.contains(&f) {
                        out.files.push(f);
                    }
                }
                if !out.pids.contains(&pid) {
                    out.pids.push(pid);
                }
            }
            PERF_RECORD_LOST => out.lost = true,
            _ => {}
        }
        at += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ty: u32, body: &[u8]) -> Vec<u8> {
        let mut v = ty.to_ne_bytes().to_vec();
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        v.extend_from_slice(body);
        v
    }

    fn mmap(pid: u32) -> Vec<u8> {
        let mut body = pid.to_ne_bytes().to_vec();
        body.extend_from_slice(&pid.to_ne_bytes()); // tid
        body.extend_from_slice(&[0; 24]); // addr, len, pgoff
        body.extend_from_slice(&0xfdu32.to_ne_bytes()); // maj
        body.extend_from_slice(&1u32.to_ne_bytes()); // min
        body.extend_from_slice(&(1000 + pid as u64).to_ne_bytes()); // ino
        body.extend_from_slice(&[0; 16]); // ino_generation, prot, flags
        body.extend_from_slice(b"/memfd:usdt:x (deleted)\0");
        rec(PERF_RECORD_MMAP2, &body)
    }

    #[test]
    fn records_give_the_pids_that_mapped_code() {
        let mut buf = mmap(42);
        buf.extend(rec(3, &[0; 16])); // PERF_RECORD_COMM: skipped
        buf.extend(mmap(7));
        buf.extend(mmap(42));
        let mut out = Mapped::default();
        parse_records(&buf, &mut out);
        assert_eq!(out.pids, [42, 7]);
        assert_eq!(out.files, [(42, (0xfd, 1), 1042), (7, (0xfd, 1), 1007)]);
        assert!(!out.lost);
        // A truncated record ends the buffer without a panic; LOST is noticed.
        let mut buf = rec(PERF_RECORD_LOST, &[0; 16]);
        buf.extend(&mmap(9)[..12]);
        let mut out = Mapped::default();
        parse_records(&buf, &mut out);
        assert_eq!(
            out,
            Mapped {
                pids: vec![],
                files: vec![],
                lost: true
            }
        );
        parse_records(&[1, 0, 0, 0, 0, 0, 0, 0], &mut out);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-3,7"), Some(vec![0, 2, 3, 7]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}
