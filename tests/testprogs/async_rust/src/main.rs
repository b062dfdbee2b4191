//! Request spans with known answers on a two-worker tokio runtime, each wrapped in its poll
//! markers so a tracer can split its time across the threads that polled it:
//!
//! - `timer`: awaits a 20 ms timer: its wall time until it resumes (its end argument) waiting
//!   to be polled, little CPU;
//! - `burn`: 5 ms of CPU, a ~2 ms wait for a task on the other worker to wake it (so it is
//!   polled again over there), 5 ms more: ~10 ms on CPU over two polls on two threads;
//! - `blockread`: awaits a `spawn_blocking` read of a pipe that a writer fills 20 ms after the
//!   read begins: the span's wall time (its end argument, >= 20 ms) is nearly all waiting to be
//!   polled; the blocking thread's own thread-local `blockio` span sleeps from its read to the
//!   write (>= 20 ms, its end argument);
//! - `contend`: on a second runtime whose workers are pinned to CPU 0 beside a CPU hog pinned
//!   there too, 5 ms of CPU, a yield, 5 ms more: ~10 ms on CPU; the run-queue time is the polls'
//!   wall time less their CPU time (the first end argument), mostly the hog's (the second);
//! - `plain`: awaits a 20 ms timer without poll markers: paired by id, but no split when it
//!   ends on another thread than it started.
//!
//! Usage: `async_rust ROUNDS`. Each span starts on the main thread and ends inside its last
//! poll, on a worker. The scenarios run one at a time.
use std::future::Future;
use std::io::Read;
use std::os::fd::FromRawFd;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use usdt_markers::{poll_markers, span};

/// The calling thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Burns `d` of this thread's CPU time (not wall time: a preemption on a loaded machine makes
/// the span longer, not the work smaller). Returns the CPU time it took by the thread's own
/// clock (a little over `d`: the last iteration and the clock reads), which the tests hold
/// the span's on-CPU part to.
fn burn(d: Duration) -> u64 {
    let start = thread_cpu_ns();
    let end = start + d.as_nanos() as u64;
    let mut x = 0u64;
    let mut now = start;
    while now < end {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        now = thread_cpu_ns();
    }
    now - start
}

/// Busy-waits (the point is to hold this worker) for `flag`, at most a second.
fn spin_until(flag: &AtomicBool) {
    let t = std::time::Instant::now();
    while !flag.load(Ordering::Acquire) && t.elapsed() < Duration::from_secs(1) {
        std::hint::spin_loop();
    }
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; the calls only read it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let r = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(r, 0, "sched_setaffinity: {}", std::io::Error::last_os_error());
    }
}

/// CPU time of the thread behind `clock` (from `pthread_getcpuclockid`), ns.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a clock id from pthread_getcpuclockid of a live thread, and a timespec we own.
    let r = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(r, 0, "clock_gettime: {}", std::io::Error::last_os_error());
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// As attrib_scen.c: nice -20 in a session (and autogroup) of our own, so that the other work
/// of a shared machine barely moves the split. Threads inherit it. Failure (not root) is fine.
fn be_favoured() {
    // SAFETY: plain syscalls on this process.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, -20);
        if libc::setsid() >= 0 {
            let _ = std::fs::write("/proc/self/autogroup", "-20");
        }
    }
}

fn main() {
    let rounds: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    be_favoured();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        for _ in 0..rounds {
            let s = span!(asyncscen, timer; parent = 0; end(u64));
            let t = std::time::Instant::now();
            let id = s.id();
            let fut = async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                // The wait for the first poll, the timer and the wakeup of a worker to poll
                // again: all waiting to be polled.
                s.end(t.elapsed().as_nanos() as u64);
            };
            tokio::spawn(poll_markers!(asyncscen, timer).instrument(id, fut))
                .await
                .expect("timer task");
        }
        for _ in 0..rounds {
            // A waker task holds one worker, so the burner runs on the other. Once the burner
            // is waiting, the waker wakes it from its own worker, and tokio runs a task woken
            // by a worker on that worker next: the second poll is on the other thread.
            let waker_running = Arc::new(AtomicBool::new(false));
            let half_done = Arc::new(AtomicBool::new(false));
            let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
            let (running, half) = (waker_running.clone(), half_done.clone());
            let waker = tokio::spawn(async move {
                running.store(true, Ordering::Release);
                spin_until(&half);
                // Let the burner's poll return Pending first: a wakeup during the poll would
                // have it polled again where it is.
                std::thread::sleep(Duration::from_millis(2));
                let _ = tx.send(());
            });
            spin_until(&waker_running);
            let s = span!(asyncscen, burn; parent = 0; end(u64));
            let id = s.id();
            let fut = async move {
                let mut cpu = burn(Duration::from_millis(5));
                std::future::poll_fn(|cx| {
                    let r = std::pin::Pin::new(&mut rx).poll(cx);
                    // Only once the wakeup is registered: else it could be ready at once.
                    if r.is_pending() {
                        half_done.store(true, Ordering::Release);
                    }
                    r
                })
                .await
                .expect("waker task");
                cpu += burn(Duration::from_millis(5));
                s.end(cpu);
            };
            let burner = tokio::spawn(poll_markers!(asyncscen, burn).instrument(id, fut));
            waker.await.expect("waker task");
            burner.await.expect("burn task");
        }
        // A blocking-pool thread started inside a poll would put its creation (clone, stack
        // mmap: uninterruptible waits on a loaded machine) in the poll; start it beforehand.
        tokio::task::spawn_blocking(|| ()).await.expect("blocking pool");
        for _ in 0..rounds {
            let mut fds = [0; 2];
            // SAFETY: a two-int array for pipe(2) to fill.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
            // SAFETY: fresh descriptors from pipe(2), each owned by one File.
            let (mut rd, mut wr) =
                unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) };
            let s = span!(asyncscen, blockread; parent = 0; end(u64));
            let t = std::time::Instant::now();
            let id = s.id();
            // The writer's 20 ms start when the blocking thread is in its span, about to read
            // (a new blocking thread can take milliseconds to start on a loaded machine), and
            // it writes the moment it wrote, so the reader knows how long the pipe kept it
            // waiting whatever the writer's own scheduling delays.
            let base = std::time::Instant::now();
            let (reading, r) = std::sync::mpsc::channel::<()>();
            let writer = std::thread::spawn(move || {
                r.recv().expect("reader");
                std::thread::sleep(Duration::from_millis(20));
                let at = base.elapsed().as_nanos() as u64;
                std::io::Write::write_all(&mut wr, &at.to_ne_bytes()).expect("write pipe");
            });
            let fut = async move {
                let n = tokio::task::spawn_blocking(move || {
                    let io = span!(asyncscen, blockio; end(u64));
                    let t0 = base.elapsed().as_nanos() as u64;
                    reading.send(()).expect("writer");
                    let mut b = [0u8; 8];
                    rd.read_exact(&mut b).expect("read pipe");
                    // From the read to the write that ended it: the span's sleep.
                    io.end(u64::from_ne_bytes(b).saturating_sub(t0));
                    b.len()
                })
                .await
                .expect("blocking read");
                assert_eq!(n, 8);
                // The span's wall time: the wait for a worker, the pool thread and the read.
                s.end(t.elapsed().as_nanos() as u64);
            };
            tokio::spawn(poll_markers!(asyncscen, blockread).instrument(id, fut))
                .await
                .expect("blockread task");
            writer.join().expect("writer");
        }
        for _ in 0..rounds {
            let s = span!(asyncscen, plain; parent = 0);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                s.end();
            })
            .await
            .expect("plain task");
        }
    });
    contend(rounds);
    eprintln!("done");
}

/// The `contend` scenario: a runtime of its own, all on CPU 0, with a hog there.
fn contend(rounds: u32) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(|| pin_to(0))
        .build()
        .expect("runtime");
    let stop = Arc::new(AtomicBool::new(false));
    let hog_running = Arc::new(AtomicBool::new(false));
    let (st, run) = (stop.clone(), hog_running.clone());
    let hog = std::thread::spawn(move || {
        pin_to(0);
        run.store(true, Ordering::Release);
        let mut x = 0u64;
        while !st.load(Ordering::Relaxed) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    });
    spin_until(&hog_running);
    let mut hog_clock: libc::clockid_t = 0;
    // SAFETY: the hog's pthread_t, alive until joined below.
    let r = unsafe { libc::pthread_getcpuclockid(hog.as_pthread_t(), &mut hog_clock) };
    assert_eq!(r, 0, "pthread_getcpuclockid");
    rt.block_on(async {
        for _ in 0..rounds {
            let s = span!(asyncscen, contend; parent = 0; end(u64, u64, u64));
            let id = s.id();
            let fut = async move {
                // Inside the polls the worker never sleeps: its wall time there less its CPU
                // time is what it waited for a CPU, whoever else ran (the hog, mostly).
                let hog0 = clock_ns(hog_clock);
                let (t, c) = (std::time::Instant::now(), thread_cpu_ns());
                let mut cpu = burn(Duration::from_millis(5));
                let mut waited = (t.elapsed().as_nanos() as u64).saturating_sub(thread_cpu_ns() - c);
                tokio::task::yield_now().await;
                let (t, c) = (std::time::Instant::now(), thread_cpu_ns());
                cpu += burn(Duration::from_millis(5));
                waited += (t.elapsed().as_nanos() as u64).saturating_sub(thread_cpu_ns() - c);
                s.end(waited, clock_ns(hog_clock) - hog0, cpu);
            };
            tokio::spawn(poll_markers!(asyncscen, contend).instrument(id, fut))
                .await
                .expect("contend task");
        }
    });
    stop.store(true, Ordering::Relaxed);
    hog.join().expect("hog");
}
