//! The command `watch -c` runs: forked before the probes are attached, held before `exec` until
//! they are live (so its first probe hits are seen), then released, polled for exit and reaped.
//!
//! The child waits on a pipe for one byte; EOF instead means the tracer failed or died, and the
//! child exits without running the command. A second, close-on-exec pipe reports a failed
//! `exec` back as its errno, so "no such command" is an error of `watch`, not a silent exit.
//!
//! When tracing ends before the command does (`--duration`, Ctrl-C, SIGTERM), the command is
//! ended too: SIGTERM, then SIGKILL after [`GRACE`] — unless the user asked to leave it
//! running. `watch` then exits with the command's own status when the command ended by itself.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::time::{Duration, Instant};

/// How long a command gets to exit after SIGTERM before it is sent SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

/// What [`Child::wait_exec`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Stopped at the start of the program it executed.
    Exec,
    /// Exited (reaped).
    Exited,
    /// Still running when the wait ended.
    Running,
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    fn from_wait_status(st: i32) -> Exit {
        if libc::WIFSIGNALED(st) {
            Exit::Signal(libc::WTERMSIG(st))
        } else {
            Exit::Code(libc::WEXITSTATUS(st))
        }
    }

    /// The exit code a shell would report for it (128 + signal for a killed command).
    pub fn shell_code(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
        }
    }
}

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
    /// Our tracee, followed through its execs ([`Child::run_to_exec`]): ended with SIGKILL
    /// on the way out, since it never ran the program it was followed to.
    traced: bool,
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
        let release_pipe = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        // SAFETY: as above.
        if release_pipe != 0 || unsafe { libc::pipe2(st.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(spawn_err(io::Error::last_os_error()));
        }
        // SAFETY: the child only calls async-signal-safe functions (read, close, execvp, _exit)
        // before exec; everything it touches was allocated before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(spawn_err(io::Error::last_os_error()));
        }
        if pid == 0 {
            // SAFETY: in the forked child: only async-signal-safe calls on fds and pointers
            // made before the fork; it execs or exits.
            unsafe {
                libc::close(fds[1]);
                libc::close(st[0]);
                let mut b = 0u8;
                // Wait for the go-ahead: the probes are live. EOF (tracer died) means don't run.
                if libc::read(fds[0], &mut b as *mut u8 as *mut libc::c_void, 1) != 1 {
                    libc::_exit(126);
                }
                // `t`: stop at the exec (traced by the parent, which resumes it once it has
                // written what the new program must find in its memory). If the kernel
                // refuses, the command runs unstopped and the parent stops waiting.
                if b == b't' {
                    libc::ptrace(
                        libc::PTRACE_TRACEME,
                        0,
                        std::ptr::null_mut::<libc::c_void>(),
                        std::ptr::null_mut::<libc::c_void>(),
                    );
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
            // SAFETY: as above.
            exec_status: Some(unsafe { File::from_raw_fd(st[0]) }),
            status: None,
            traced: false,
        })
    }

    /// Let the child exec, and report whether the exec worked. With `stop_at_exec` the new
    /// program is held stopped before its first instruction (as a tracee of ours): true when
    /// it is, and then [`Child::resume`] lets it run.
    pub fn release(&mut self, stop_at_exec: bool) -> Result<bool, SpawnError> {
        if let Some(mut f) = self.release.take() {
            let _ = f.write_all(if stop_at_exec { b"t" } else { b"g" });
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
        if !stop_at_exec {
            return Ok(false);
        }
        // The exec succeeded (its status pipe closed): a traced child stops with SIGTRAP
        // before the new program's first instruction. One that could not be traced (ptrace
        // refused) runs on: stop waiting after a second.
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            let mut st = 0;
            // SAFETY: waitpid on our own child; __WALL also reports a traced child's stop.
            let r = unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG | libc::__WALL) };
            if r == self.pid {
                if libc::WIFSTOPPED(st) {
                    return Ok(true);
                }
                self.status = Some(st);
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(false)
    }

    /// Lets a child held at an exec (`release(true)` returned true, or [`Child::wait_exec`]
    /// said [`Next::Exec`]) run on to its next `exec`, which [`Child::wait_exec`] then waits
    /// for. Only `exec`s of this process are followed; what it forks runs free.
    pub fn run_to_exec(&mut self) -> io::Result<()> {
        let null = std::ptr::null_mut::<libc::c_void>();
        if !self.traced {
            // From here every exec stops with an event (not a SIGTRAP), and the child is
            // killed if this tracer dies while it is held.
            let opts = (libc::PTRACE_O_TRACEEXEC | libc::PTRACE_O_EXITKILL) as usize;
            // SAFETY: options on our own stopped tracee.
            let r = unsafe { libc::ptrace(libc::PTRACE_SETOPTIONS, self.pid, null, opts) };
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
            self.traced = true;
        }
        // The stop it is in delivers nothing (the exec's SIGTRAP, or the exec event).
        self.cont(0)
    }

    fn cont(&mut self, deliver: usize) -> io::Result<()> {
        let null = std::ptr::null_mut::<libc::c_void>();
        // SAFETY: resuming our own stopped tracee with `deliver` as its signal.
        if unsafe { libc::ptrace(libc::PTRACE_CONT, self.pid, null, deliver) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// After [`Child::run_to_exec`]: waits until the child is stopped at the start of the next
    /// program it executes ([`Next::Exec`]), exits first ([`Next::Exited`]: reaped, see
    /// [`Child::exit`]), or `until` passes ([`Next::Running`]: it runs on, and this may be
    /// called again). Signals it gets meanwhile are passed on.
    pub fn wait_exec(&mut self, until: Instant) -> io::Result<Next> {
        loop {
            let mut st = 0;
            // SAFETY: waitpid on our own child; __WALL reports a tracee's stops.
            let r = unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG | libc::__WALL) };
            if r == 0 {
                if Instant::now() >= until {
                    return Ok(Next::Running);
                }
                // A script may run for long before its exec (or never make one): polled, so
                // that `--duration` and the waiting note can end the wait.
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            if r != self.pid {
                return Err(io::Error::last_os_error());
            }
            if !libc::WIFSTOPPED(st) {
                self.status = Some(st);
                self.traced = false;
                return Ok(Next::Exited);
            }
            if st >> 8 == (libc::SIGTRAP | (libc::PTRACE_EVENT_EXEC << 8)) {
                return Ok(Next::Exec);
            }
            // A signal for the program (SIGCHLD of a shim's subprocess, a SIGTERM): passed on.
            self.cont(libc::WSTOPSIG(st) as usize)?;
        }
    }

    /// Ends a child followed by [`Child::run_to_exec`] that is running (not held at an exec),
    /// as [`Child::terminate`] ends any: a traced child first stops at the SIGTERM sent to
    /// it, and is let go of there with the signal delivered; then SIGKILL after `grace`.
    pub fn end_followed(&mut self, grace: Duration) -> Exit {
        if self.traced && self.status.is_none() {
            // SAFETY: signalling our own unreaped child.
            unsafe { libc::kill(self.pid, libc::SIGTERM) };
            let deadline = Instant::now() + grace;
            while self.traced && Instant::now() < deadline {
                let mut st = 0;
                // SAFETY: waitpid on our own child; __WALL reports a tracee's stops.
                let r = unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG | libc::__WALL) };
                if r == self.pid && !libc::WIFSTOPPED(st) {
                    self.status = Some(st);
                    self.traced = false;
                } else if r == self.pid {
                    // Stopped (at the SIGTERM, or at an exec just before it): detach,
                    // delivering it (a stop at an exec delivers the SIGTERM pending).
                    let sig = match libc::WSTOPSIG(st) {
                        libc::SIGTRAP => 0,
                        s => s as usize,
                    };
                    let null = std::ptr::null_mut::<libc::c_void>();
                    // SAFETY: detaching our own stopped tracee.
                    unsafe { libc::ptrace(libc::PTRACE_DETACH, self.pid, null, sig) };
                    self.traced = false;
                } else {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        // Still traced after the grace: SIGKILL needs no detach.
        self.traced = false;
        self.terminate(grace)
    }

    /// The file the child runs now (while it is held, the program it has just executed).
    pub fn exe(&self) -> io::Result<std::path::PathBuf> {
        std::fs::read_link(format!("/proc/{}/exe", self.pid))
    }

    /// Lets a child held at its exec ([`Child::release`]) run: detached, the exec's SIGTRAP
    /// not delivered.
    pub fn resume(&mut self) {
        self.traced = false;
        // SAFETY: detaching our own stopped tracee; signal 0 suppresses the SIGTRAP.
        unsafe {
            libc::ptrace(
                libc::PTRACE_DETACH,
                self.pid,
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_void>(),
            )
        };
    }

    /// How the child ended, once it has (and was reaped).
    pub fn exit(&mut self) -> Option<Exit> {
        self.exited();
        self.status.map(Exit::from_wait_status)
    }

    /// Ends a child that is still running: SIGTERM, then SIGKILL after `grace`. Returns how
    /// it ended. A child that already exited is only reaped.
    pub fn terminate(&mut self, grace: Duration) -> Exit {
        if let Some(e) = self.exit() {
            return e;
        }
        // Never released: closing the pipe makes it exit without running the command.
        if self.release.take().is_none() {
            // SAFETY: signalling our own unreaped child (its PID cannot have been reused).
            unsafe { libc::kill(self.pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(e) = self.exit() {
                return e;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: as above.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        let mut st = 0;
        // SAFETY: blocking reap of our own child, which SIGKILL ends.
        if unsafe { libc::waitpid(self.pid, &mut st, 0) } == self.pid {
            self.status = Some(st);
        }
        self.status
            .map_or(Exit::Signal(libc::SIGKILL), Exit::from_wait_status)
    }

    /// Lets the child run on after `watch` exits: it is not waited for or signalled.
    pub fn leave_running(mut self) {
        self.status = Some(0);
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
    /// On every way out of `watch`, errors included: never leave the command running
    /// untraced behind a tracer that is gone, and never wait on it forever.
    fn drop(&mut self) {
        if self.traced && self.status.is_none() {
            // Held at an exec and never let run: nothing of it to end gracefully.
            // SAFETY: our own unreaped child.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
        if self.status.is_none() {
            self.terminate(GRACE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawn(cmd: &[&str]) -> Child {
        let argv: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        let mut c = Child::spawn(&argv).unwrap();
        c.release(false).unwrap();
        c
    }

    /// Waits (bounded) for a child that ends by itself.
    fn wait_exit(c: &mut Child) -> Exit {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(e) = c.exit() {
                return e;
            }
            assert!(Instant::now() < deadline, "child did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn exit_codes_and_signals_come_back() {
        let mut c = spawn(&["sh", "-c", "exit 7"]);
        let e = wait_exit(&mut c);
        assert_eq!(e, Exit::Code(7));
        assert_eq!(e.shell_code(), 7);
        // Terminating a child that already ended only reports how it ended.
        assert_eq!(c.terminate(Duration::from_secs(5)), Exit::Code(7));
        let mut c = spawn(&["sh", "-c", "kill -9 $$"]);
        assert_eq!(wait_exit(&mut c), Exit::Signal(libc::SIGKILL));
        assert_eq!(Exit::Signal(libc::SIGKILL).shell_code(), 137);
    }

    #[test]
    fn a_running_command_is_terminated_then_killed() {
        // Honours SIGTERM: ends by it.
        let mut c = spawn(&["sleep", "30"]);
        let t = Instant::now();
        assert_eq!(
            c.terminate(Duration::from_secs(5)),
            Exit::Signal(libc::SIGTERM)
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        // Ignores SIGTERM: SIGKILL after the grace period.
        let ready = std::env::temp_dir().join(format!("usdt-child-ready-{}", std::process::id()));
        let _ = std::fs::remove_file(&ready);
        let script = format!(
            "trap '' TERM; touch {}; while :; do sleep 0.05; done",
            ready.display()
        );
        let mut c = spawn(&["sh", "-c", &script]);
        // The trap is set once the file exists: no race with the SIGTERM below.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready.exists() {
            assert!(Instant::now() < deadline, "child never got ready");
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = std::fs::remove_file(&ready);
        let t = Instant::now();
        assert_eq!(
            c.terminate(Duration::from_millis(300)),
            Exit::Signal(libc::SIGKILL)
        );
        assert!(t.elapsed() >= Duration::from_millis(300));
    }

    #[test]
    fn an_unreleased_child_never_runs_the_command() {
        let argv = vec!["sh".to_string(), "-c".to_string(), "exit 3".to_string()];
        let mut c = Child::spawn(&argv).unwrap();
        // Not released: it exits 126 on EOF without running `exit 3`.
        assert_eq!(c.terminate(Duration::from_secs(5)), Exit::Code(126));
    }
}
