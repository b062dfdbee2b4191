//! Request spans with known answers on a two-worker tokio runtime, each wrapped in its poll
//! markers so a tracer can split its time across the threads that polled it:
//!
//! - `timer`: awaits a 20 ms timer: ~20 ms waiting to be polled, little CPU;
//! - `burn`: 5 ms of CPU, a ~2 ms wait for a task on the other worker to wake it (so it is
//!   polled again over there), 5 ms more: ~10 ms on CPU over two polls on two threads;
//! - `plain`: awaits a 20 ms timer without poll markers: paired by id, but no split when it
//!   ends on another thread than it started.
//!
//! Usage: `async_rust ROUNDS`. Each span starts on the main thread and ends inside its last
//! poll, on a worker. The scenarios run one at a time.
use std::future::Future;
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
/// the span longer, not the work smaller).
fn burn(d: Duration) {
    let end = thread_cpu_ns() + d.as_nanos() as u64;
    let mut x = 0u64;
    while thread_cpu_ns() < end {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

/// Busy-waits (the point is to hold this worker) for `flag`, at most a second.
fn spin_until(flag: &AtomicBool) {
    let t = std::time::Instant::now();
    while !flag.load(Ordering::Acquire) && t.elapsed() < Duration::from_secs(1) {
        std::hint::spin_loop();
    }
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
            let s = span!(asyncscen, timer; parent = 0);
            let id = s.id();
            let fut = async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                s.end();
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
            let s = span!(asyncscen, burn; parent = 0);
            let id = s.id();
            let fut = async move {
                burn(Duration::from_millis(5));
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
                burn(Duration::from_millis(5));
                s.end();
            };
            let burner = tokio::spawn(poll_markers!(asyncscen, burn).instrument(id, fut));
            waker.await.expect("waker task");
            burner.await.expect("burn task");
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
    eprintln!("done");
}
