//! Child processes for the tests: root check, spawning, line reading and waiting, all bounded in
//! time. A blocking read of a child's pipe or a bare `wait()` hangs CI when the child (or a
//! grandchild holding the pipe) misbehaves; everything here gives up after a timeout instead.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// True when running as root (the e2e tests need CAP_BPF + CAP_PERFMON; CI runs as root).
/// Tests that need it are `#[ignore = "needs root"]`; `scripts/test.sh` includes them as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { geteuid() == 0 }
}

extern "C" {
    fn geteuid() -> u32;
    fn kill(pid: i32, sig: i32) -> i32;
    fn clock_gettime(clock: i32, ts: *mut [i64; 2]) -> i32;
    fn wait4(pid: i32, status: *mut i32, options: i32, rusage: *mut [i64; 18]) -> i32;
}

/// CPU time the calling thread has used. Timing comparisons use CPU time, not wall time: on a
/// loaded machine a runnable thread gets a fraction of a CPU, so its wall time says more about
/// the load than about the code.
pub fn thread_cpu_time() -> Duration {
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = [0i64; 2];
    // SAFETY: ts is a valid struct timespec (two 64-bit fields on 64-bit Linux).
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts[0] as u64, ts[1] as u32)
}

/// Runs `cmd` (stdin and stdout to /dev/null) to completion and returns whether it exited 0 and
/// the CPU time (user + system) it used, from wait4's rusage of that one child.
pub fn run_cpu_time(cmd: &mut Command) -> (bool, Duration) {
    // Reaped by the wait4 below, which clippy cannot see.
    #[allow(clippy::zombie_processes)]
    let child = spawn(cmd.stdin(Stdio::null()).stdout(Stdio::null()));
    let mut status = 0;
    // struct rusage: ru_utime and ru_stime (two timevals), then 14 longs.
    let mut ru = [0i64; 18];
    // SAFETY: our own child's pid; status and ru are valid for writes of their C types. The
    // child is reaped here, so `Child::wait` must not be called on it afterwards.
    let rc = unsafe { wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert_eq!(rc, child.id() as i32, "wait4");
    let tv = |sec: i64, usec: i64| Duration::new(sec as u64, (usec * 1000) as u32);
    (status == 0, tv(ru[0], ru[1]) + tv(ru[2], ru[3]))
}

/// Sends signal `sig` (e.g. 2 for SIGINT) to `pid`.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: plain kill(2) on a pid the caller spawned.
    unsafe { kill(pid as i32, sig) };
}

/// Spawns `cmd`, retrying while the executable is "busy" (ETXTBSY).
///
/// Regression (binary_replaced_on_disk... failed with ETXTBSY): a test that has just written an
/// executable can't run it while a child forked at the same moment by another test thread
/// still holds an inherited (close-on-exec, but not yet exec'd) descriptor of the file open
/// for writing. That lasts only until the child execs, so a short retry is the fix.
pub fn spawn(cmd: &mut Command) -> Child {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(26) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(child) => return child,
            Err(e) => panic!("spawn {:?}: {e}", cmd.get_program()),
        }
    }
}

/// The lines of a child's pipe, read on a thread of their own so that every read can time out.
pub struct Lines {
    rx: mpsc::Receiver<String>,
    /// The stream ended (EOF or read error): no more lines will come.
    eof: bool,
}

/// Why [`Lines::next_within`] returned no line.
#[derive(Debug, PartialEq, Eq)]
pub enum NoLine {
    Timeout,
    Eof,
}

impl Lines {
    /// Reads `pipe` line by line (without the trailing newline) on a background thread.
    pub fn new(pipe: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines { rx, eof: false }
    }

    /// The next line, or why there is none within `timeout`.
    pub fn next_within(&mut self, timeout: Duration) -> Result<String, NoLine> {
        if self.eof {
            return Err(NoLine::Eof);
        }
        match self.rx.recv_timeout(timeout) {
            Ok(l) => Ok(l),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(NoLine::Timeout),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.eof = true;
                Err(NoLine::Eof)
            }
        }
    }

    /// The next line; panics naming `what` on EOF or when none comes within `timeout`.
    pub fn expect_within(&mut self, timeout: Duration, what: &str) -> String {
        self.next_within(timeout)
            .unwrap_or_else(|e| panic!("{what}: no line within {timeout:?} ({e:?})"))
    }

    /// Every line until EOF or until `deadline`, whichever comes first; the flag says whether
    /// EOF was reached.
    pub fn rest_until(&mut self, deadline: Instant) -> (Vec<String>, bool) {
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_within(left) {
                Ok(l) => out.push(l),
                Err(NoLine::Eof) => return (out, true),
                Err(NoLine::Timeout) => return (out, false),
            }
        }
    }

    /// Lines until one satisfies `pred` (it is included) or `deadline` passes; the flag says
    /// whether `pred` held.
    pub fn until(
        &mut self,
        deadline: Instant,
        mut pred: impl FnMut(&str) -> bool,
    ) -> (Vec<String>, bool) {
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_within(left) {
                Ok(l) => {
                    let hit = pred(&l);
                    out.push(l);
                    if hit {
                        return (out, true);
                    }
                }
                Err(_) => return (out, false),
            }
        }
    }
}

/// Reads one line of `pipe` (within `timeout`), then closes the pipe, like `| head -1`: the
/// writer's next writes past the pipe buffer fail with EPIPE. (A [`Lines`] reader would keep
/// draining the pipe in the background, so the writer might never see it closed.)
pub fn first_line_then_close(
    pipe: impl Read + Send + 'static,
    timeout: Duration,
) -> Result<String, NoLine> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let n = BufReader::new(pipe).read_line(&mut line).unwrap_or(0);
        // The pipe is dropped here, before the line is handed over.
        let _ = tx.send((n > 0).then_some(line));
    });
    match rx.recv_timeout(timeout) {
        Ok(Some(line)) => Ok(line.trim_end_matches('\n').to_string()),
        Ok(None) => Err(NoLine::Eof),
        Err(_) => Err(NoLine::Timeout),
    }
}

/// Polls `cond` every 20 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The child's exit status once it exits, or None when it is still running after `timeout`.
pub fn wait_within(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return Some(st);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills and reaps a child that has not exited; a no-op for one that has.
pub fn kill_and_reap(child: &mut Child) {
    if matches!(child.try_wait(), Ok(None)) {
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// How long a command the tests run to completion may take before it counts as hung (generous:
/// CI machines are shared and the debug build is slow).
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// [`Command::output`] with stdin closed, the ETXTBSY retry and a time bound: panics (after
/// killing it) when `cmd` has not exited and closed its pipes within `timeout`.
pub fn output_within(cmd: &mut Command, timeout: Duration) -> std::process::Output {
    let mut child = spawn(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let deadline = Instant::now() + timeout;
    let stdout = read_all(child.stdout.take().expect("piped"));
    let stderr = read_all(child.stderr.take().expect("piped"));
    let out = stdout.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    let err = stderr.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    let status = wait_within(
        &mut child,
        deadline.saturating_duration_since(Instant::now()),
    );
    let (Ok(out), Ok(err), Some(status)) = (out, err, status) else {
        kill_and_reap(&mut child);
        panic!("{:?} did not finish within {timeout:?}", cmd.get_program());
    };
    std::process::Output {
        status,
        stdout: out,
        stderr: err,
    }
}

/// Reads `pipe` to its end on a thread of its own; the bytes arrive on the channel.
fn read_all(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    rx
}
