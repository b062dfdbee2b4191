//! Changing a u16 in another process's memory so that several writers compose.
//!
//! `/proc/PID/mem` reads and writes, each on its own: there is no atomic add through it, so a
//! read-modify-write can lose another writer's change made between its read and its write
//! (two tracers raising at once end with one raise; the first to lower then turns the other's
//! probes off). Every usdt-trace therefore takes one lock, [`Lock`] (an `flock` on
//! [`LOCK_PATH`]), around its read-modify-writes, so that theirs are serialized, and reads
//! the value back after writing it: a value other than the one written means a writer that
//! does not take the lock (the kernel on behalf of another tracer, another tool) changed it
//! meanwhile, which is reported as [`MemError::Raced`] rather than trusted.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::time::{Duration, Instant};
use thiserror::Error;

/// The lock file every usdt-trace on this machine (in this mount namespace) shares. Under
/// `/run`, which only root can write, in a directory only its owner can enter, so that no
/// unprivileged user can hold the lock and stall the tracers (the systemd unit's
/// `RuntimeDirectory` is the same directory).
pub const LOCK_PATH: &str = "/run/usdt-trace/semaphores.lock";

/// How long to wait for the lock before writing without it. Holders keep it for a few
/// reads and writes of memory; a holder that long means something is wrong with it.
const LOCK_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug, Error)]
pub enum MemError {
    #[error("opening /proc/{pid}/mem: {source}")]
    Open { pid: u32, source: io::Error },
    #[error("reading the semaphore at {addr:#x} of process {pid}: {source}")]
    Read {
        pid: u32,
        addr: u64,
        source: io::Error,
    },
    #[error("writing the semaphore at {addr:#x} of process {pid}: {source}")]
    Write {
        pid: u32,
        addr: u64,
        source: io::Error,
    },
    #[error("the semaphore at {addr:#x} of process {pid} read {found} right after usdt-trace wrote {wrote}: another writer changed it meanwhile")]
    Raced {
        pid: u32,
        addr: u64,
        wrote: u16,
        found: u16,
    },
}

#[derive(Debug, Error)]
pub enum LockError {
    #[error("{LOCK_PATH}: {0}")]
    Open(io::Error),
    #[error("{LOCK_PATH} is not a regular file")]
    NotAFile,
    #[error("{LOCK_PATH}: another process held it for over {} s", LOCK_WAIT.as_secs())]
    Busy,
    #[error("{LOCK_PATH}: flock: {0}")]
    Flock(io::Error),
}

/// The open lock file; [`Lock::hold`] takes the lock until the guard is dropped.
pub struct Lock(File);

impl Lock {
    /// Opens (creating it if need be) the shared lock file. Opened without following a
    /// symbolic link and without blocking (a FIFO planted there would block the open), and
    /// refused when not a regular file.
    pub fn open() -> Result<Lock, LockError> {
        Lock::open_at(std::path::Path::new(LOCK_PATH))
    }

    /// As [`Lock::open`], at `path` (tests use a directory of their own).
    fn open_at(path: &std::path::Path) -> Result<Lock, LockError> {
        let dir = path.parent().unwrap_or(std::path::Path::new("/run"));
        if let Err(e) = std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .or_else(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => Ok(()),
                _ => Err(e),
            })
        {
            return Err(LockError::Open(e));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .or_else(|_| {
                // Created by another user (the daemon's): reading is all flock needs.
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                    .open(path)
            })
            .map_err(LockError::Open)?;
        if !file.metadata().map_err(LockError::Open)?.is_file() {
            return Err(LockError::NotAFile);
        }
        Ok(Lock(file))
    }

    /// Takes the lock, waiting at most [`LOCK_WAIT`].
    pub fn hold(&self) -> Result<Held<'_>, LockError> {
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            // SAFETY: flock on a descriptor this value owns; no memory is involved.
            let rc = unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(Held(self));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) | Some(libc::EINTR) => {}
                _ => return Err(LockError::Flock(e)),
            }
            if Instant::now() >= deadline {
                return Err(LockError::Busy);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The lock held; released when dropped.
pub struct Held<'a>(&'a Lock);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // SAFETY: as in `hold`. An unlock that fails leaves the lock to the close at exit.
        unsafe { libc::flock(self.0 .0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// One process's memory, opened for reading and writing.
pub struct Mem {
    pid: u32,
    file: File,
}

impl Mem {
    pub fn open(pid: u32) -> Result<Mem, MemError> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map(|file| Mem { pid, file })
            .map_err(|source| MemError::Open { pid, source })
    }

    pub fn read(&self, addr: u64) -> Result<u16, MemError> {
        let mut b = [0u8; 2];
        self.file
            .read_exact_at(&mut b, addr)
            .map_err(|source| MemError::Read {
                pid: self.pid,
                addr,
                source,
            })?;
        Ok(u16::from_ne_bytes(b))
    }

    /// Writes `v` and reads it back: [`MemError::Raced`] when the value read is not `v`.
    fn write_checked(&self, addr: u64, v: u16) -> Result<(), MemError> {
        self.file
            .write_all_at(&v.to_ne_bytes(), addr)
            .map_err(|source| MemError::Write {
                pid: self.pid,
                addr,
                source,
            })?;
        let found = self.read(addr)?;
        if found != v {
            return Err(MemError::Raced {
                pid: self.pid,
                addr,
                wrote: v,
                found,
            });
        }
        Ok(())
    }

    /// Adds `n` (saturating); the caller holds the [`Lock`]. Returns the value before.
    pub fn add(&self, addr: u64, n: u16) -> Result<u16, MemError> {
        let v = self.read(addr)?;
        self.write_checked(addr, v.saturating_add(n))?;
        Ok(v)
    }

    /// Takes `n` back, never below 0; the caller holds the [`Lock`]. Returns the value before
    /// (under `n` means another writer lowered what this tracer had raised).
    pub fn sub(&self, addr: u64, n: u16) -> Result<u16, MemError> {
        let v = self.read(addr)?;
        if v != 0 {
            self.write_checked(addr, v.saturating_sub(n))?;
        }
        Ok(v)
    }

    /// Raises the value to at least `n`; the caller holds the [`Lock`]. Returns the value
    /// before.
    pub fn at_least(&self, addr: u64, n: u16) -> Result<u16, MemError> {
        let v = self.read(addr)?;
        if v < n {
            self.write_checked(addr, n)?;
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Through our own /proc/self/mem: add, sub (never below 0), at_least.
    #[test]
    fn add_sub_and_at_least_on_our_own_memory() {
        let cell = Box::new(std::sync::atomic::AtomicU16::new(3));
        let addr = cell.as_ptr() as u64;
        let m = Mem::open(std::process::id()).unwrap();
        assert_eq!(m.add(addr, 4).unwrap(), 3);
        assert_eq!(m.read(addr).unwrap(), 7);
        assert_eq!(m.sub(addr, 5).unwrap(), 7);
        assert_eq!(m.sub(addr, 5).unwrap(), 2);
        assert_eq!(m.read(addr).unwrap(), 0);
        assert_eq!(m.at_least(addr, 2).unwrap(), 0);
        assert_eq!(m.at_least(addr, 1).unwrap(), 2);
        assert_eq!(cell.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    /// Two writers, each with the lock open on its own (as two usdt-trace processes have it),
    /// adding 1 a thousand times each to one u16 through /proc/self/mem: no add is lost.
    #[test]
    fn adds_under_the_lock_compose() {
        let dir = std::env::temp_dir().join(format!("usdt-trace-lock-{}", std::process::id()));
        let path = dir.join("semaphores.lock");
        let cell: &'static std::sync::atomic::AtomicU16 =
            Box::leak(Box::new(std::sync::atomic::AtomicU16::new(0)));
        let addr = cell.as_ptr() as u64;
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let lock = Lock::open_at(&path).unwrap();
                    let m = Mem::open(std::process::id()).unwrap();
                    for _ in 0..1000 {
                        let _held = lock.hold().unwrap();
                        m.add(addr, 1).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(cell.load(std::sync::atomic::Ordering::Relaxed), 2000);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
