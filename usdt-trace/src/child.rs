//! The command `watch -c` runs: forked before the probes are attached, held before `exec` until
//! they are live (so its first probe hits are seen), then released, polled for exit and reaped.
//!
//! The child waits on a pipe for one byte; EOF instead means the tracer failed or died, and the
//! child exits without running the command. A second, close-on-exec pipe reports a failed
//! `exec` back as its errno, so "no such command" is an error of `watch`, not a silent exit.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};

/// Why the command could not be started.
#[derive(Debug, thiserror::Error)]
#[error("starting {cmd}: {source}")]
pub struct SpawnError {
    pub cmd: String,
    #[source]
    pub source: io::Error,
}

/// A child started by `-c`, held before exec until the probes are live.
pub struct Child {
    pub pid: libc::pid_t,
    cmd: String,
    release: Option<File>,
    /// Close-on-exec: EOF means the exec succeeded, 4 bytes are the errno of a failed one.
    exec_status: Option<File>,
    status: Option<i32>,
}

impl Child {
    pub fn spawn(argv: &[String]) -> Result<Child, SpawnError> {
        let cmd = argv.join(" ");
        let spawn_err = |source| SpawnError {
            cmd: cmd.clone(),
            source,
        };
        let cargs: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| spawn_err(io::Error::from_raw_os_error(libc::EINVAL)))?;
        let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut fds = [0i32; 2];
        let mut st = [0i32; 2];
        // SAFETY: plain pipe2 into 2-int arrays.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0
            || unsafe { libc::pipe2(st.as_mut_ptr(), libc::O_CLOEXEC) } != 0
        {
            return Err(spawn_err(io::Error::last_os_error()));
        }
        // SAFETY: the child only calls async-signal-safe functions (read, close, execvp, _exit)
        // before exec; everything it touches was allocated before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(spawn_err(io::Error::last_os_error()));
        }
        if pid == 0 {
            unsafe {
                libc::close(fds[1]);
                libc::close(st[0]);
                let mut b = 0u8;
                // Wait for the go-ahead: the probes are live. EOF (tracer died) means don't run.
                if libc::read(fds[0], &mut b as *mut u8 as *mut libc::c_void, 1) != 1 {
                    libc::_exit(126);
                }
                libc::execvp(ptrs[0], ptrs.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(st[1], &errno as *const i32 as *const libc::c_void, 4);
                libc::_exit(127);
            }
        }
        // SAFETY: we own these ends; the others are the child's now.
        unsafe {
            libc::close(fds[0]);
            libc::close(st[1]);
        }
        use std::os::fd::FromRawFd;
        Ok(Child {
            pid,
            cmd,
            // SAFETY: fds[1] and st[0] are ours alone.
            release: Some(unsafe { File::from_raw_fd(fds[1]) }),
            exec_status: Some(unsafe { File::from_raw_fd(st[0]) }),
            status: None,
        })
    }

    /// Let the child exec, and report whether the exec worked.
    pub fn release(&mut self) -> Result<(), SpawnError> {
        if let Some(mut f) = self.release.take() {
            let _ = f.write_all(b"g");
        }
        if let Some(mut st) = self.exec_status.take() {
            let mut buf = [0u8; 4];
            use std::io::Read;
            if let Ok(4) = st.read(&mut buf) {
                return Err(SpawnError {
                    cmd: self.cmd.clone(),
                    source: io::Error::from_raw_os_error(i32::from_ne_bytes(buf)),
                });
            }
        }
        Ok(())
    }

    /// True once the child has exited (reaped).
    pub fn exited(&mut self) -> bool {
        if self.status.is_some() {
            return true;
        }
        let mut st = 0;
        // SAFETY: waitpid on our own child.
        let r = unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG) };
        if r == self.pid {
            self.status = Some(st);
        }
        self.status.is_some()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // Dropping the release pipe unreleased makes the child exit without running.
        self.release.take();
        if self.status.is_none() {
            let mut st = 0;
            // SAFETY: reap our own child; it runs to completion on its own.
            unsafe { libc::waitpid(self.pid, &mut st, 0) };
        }
    }
}
