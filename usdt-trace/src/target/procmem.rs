//! Reading a string out of another process's memory from user space.
//!
//! The eBPF side reads `--str` arguments with `bpf_probe_read_user_str`, which must not fault:
//! a string literal on a `.rodata` page the process has not touched yet is not in its page
//! tables, so the read fails and the record carries no string. `process_vm_readv` goes through
//! the kernel's page-fault path for the target (like a debugger does), so the same address
//! reads fine a moment later from user space, as long as the process (or at least that mapping)
//! still exists. Needs the right to ptrace the target (root, or the same user without Yama
//! restrictions).

use std::io;

/// Page size for chunking; 4 KiB if sysconf fails (a smaller value only costs more calls).
fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// The NUL-terminated string at `addr` in process `pid`, without its NUL, at most `max` bytes.
///
/// Reads page by page so that a string ending just before an unmapped page is still read: a
/// read crossing into the hole would fail as a whole. If the string runs into unreadable memory
/// (or past `max`) before a NUL, the bytes read so far are returned. An error means not even
/// the first byte could be read (`EFAULT`/`EIO` for an address not mapped, `ESRCH` for a
/// process gone, `EPERM` without the right to ptrace it).
pub fn read_process_string(pid: u32, addr: u64, max: usize) -> io::Result<Vec<u8>> {
    let page = page_size();
    let mut out: Vec<u8> = Vec::with_capacity(max.min(4096));
    let mut at = addr;
    while out.len() < max {
        let to_page_end = page - at % page;
        let want = usize::try_from(to_page_end)
            .unwrap_or(usize::MAX)
            .min(max - out.len());
        let old = out.len();
        out.resize(old + want, 0);
        match read_at(pid, at, &mut out[old..]) {
            Ok(n) => out.truncate(old + n),
            Err(e) if old == 0 => return Err(e),
            // Unreadable past the first page: the string so far is what there is.
            Err(_) => {
                out.truncate(old);
                break;
            }
        }
        if let Some(nul) = out[old..].iter().position(|&b| b == 0) {
            out.truncate(old + nul);
            return Ok(out);
        }
        if out.len() < old + want {
            // A short read without error: nothing more is readable.
            break;
        }
        at = match at.checked_add(want as u64) {
            Some(a) => a,
            None => break,
        };
    }
    Ok(out)
}

/// Exactly `n` bytes at `addr` in process `pid` (a length-delimited string), or fewer when the
/// rest is unreadable; an error when not even the first byte is.
pub fn read_process_bytes(pid: u32, addr: u64, n: usize) -> io::Result<Vec<u8>> {
    let page = page_size();
    let mut out = vec![0u8; n];
    let mut done = 0;
    while done < n {
        let at = addr.wrapping_add(done as u64);
        let want = usize::try_from(page - at % page)
            .unwrap_or(usize::MAX)
            .min(n - done);
        match read_at(pid, at, &mut out[done..done + want]) {
            Ok(got) if got == want => done += got,
            Ok(got) => {
                done += got;
                break;
            }
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        }
    }
    out.truncate(done);
    Ok(out)
}

/// One `process_vm_readv` into `buf` (which never spans a page of the target).
fn read_at(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which is writable for its length; the remote iovec is
    // only an address in the other process, checked by the kernel.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn me() -> u32 {
        std::process::id()
    }

    #[test]
    fn reads_a_string_up_to_its_nul_or_max() {
        static S: &[u8] = b"hello, world\0after";
        let a = S.as_ptr() as u64;
        assert_eq!(read_process_string(me(), a, 127).unwrap(), b"hello, world");
        assert_eq!(read_process_string(me(), a, 5).unwrap(), b"hello");
        assert_eq!(read_process_string(me(), a, 0).unwrap(), b"");
        // Sized: NULs are bytes like any other.
        assert_eq!(
            read_process_bytes(me(), a, 14).unwrap(),
            b"hello, world\0a"[..]
        );
        let heap = b"on the heap\0".to_vec();
        assert_eq!(
            read_process_string(me(), heap.as_ptr() as u64, 64).unwrap(),
            b"on the heap"
        );
    }

    /// Two pages, the second unmapped: a string ending the first page without a NUL is read
    /// up to the hole; an address in the hole is an error.
    #[test]
    fn stops_at_unmapped_memory() {
        let page = page_size() as usize;
        // SAFETY: a fresh anonymous mapping, written and unmapped only here.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let base = p as u64;
        // SAFETY: inside the first page of the mapping; the second is unmapped after.
        unsafe {
            std::ptr::copy_nonoverlapping(b"tail".as_ptr(), (p as *mut u8).add(page - 4), 4);
            libc::munmap((p as *mut u8).add(page).cast(), page);
        }
        let at_end = base + page as u64 - 4;
        assert_eq!(read_process_string(me(), at_end, 127).unwrap(), b"tail");
        assert!(read_process_string(me(), base + page as u64, 127).is_err());
        // SAFETY: unmapping the first page, still ours.
        unsafe { libc::munmap(p, page) };
    }

    /// A file page mapped but never touched is not in the page tables (what makes the eBPF
    /// read fail); process_vm_readv faults it in.
    #[test]
    fn reads_pages_never_touched() {
        use std::os::fd::AsRawFd;
        let path = std::env::temp_dir().join(format!("usdt-procmem-{}", me()));
        std::fs::write(&path, b"never touched\0").unwrap();
        let f = std::fs::File::open(&path).unwrap();
        // SAFETY: a fresh read-only private mapping of a file we hold; never dereferenced here.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                14,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        };
        let _ = std::fs::remove_file(&path);
        assert_ne!(p, libc::MAP_FAILED);
        let r = read_process_string(me(), p as u64, 127);
        // SAFETY: unmapping the mapping made above.
        unsafe { libc::munmap(p, 14) };
        assert_eq!(r.unwrap(), b"never touched");
    }

    #[test]
    fn a_dead_process_is_an_error() {
        static S: &[u8] = b"x\0";
        let e = read_process_string(4_194_304 + 7, S.as_ptr() as u64, 8).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH));
    }
}
