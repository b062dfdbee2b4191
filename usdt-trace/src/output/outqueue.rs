//! Output that can never stall tracing.
//!
//! A reader that stops reading (`watch --json | sleep 25`, a slow `pv`, a terminal on hold)
//! would otherwise block `watch` inside `write()`: signals would go unanswered and the probes
//! and semaphores would stay live in the target. So sinks write into a [`QueueWriter`], which
//! hands each flushed batch to a writer thread through a queue bounded in bytes
//! ([`QUEUE_BYTES`]). When the queue is full the batch is dropped and its records are counted
//! as lost; the reading loop goes on, and stopping (detach first) happens on time whatever the
//! reader does. At the end, the writer gets a bounded time to drain; what it could not write is
//! counted, never silently lost.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes the queue holds before new batches are dropped: a reader that keeps up on average
/// never loses a record to a burst, and a stalled one costs at most this much memory.
pub const QUEUE_BYTES: u64 = 16 << 20;

/// What the writer thread and the producers share.
#[derive(Default)]
struct Shared {
    /// Lines (records) dropped because the queue was full or the writer had failed.
    lost_lines: AtomicU64,
    /// Lines handed to the writer thread and not yet written.
    pending_lines: AtomicU64,
    /// Bytes handed to the writer thread and not yet written.
    pending_bytes: AtomicU64,
    /// The writer's first error (a closed pipe ends `watch` as `| head` expects).
    error: Mutex<Option<io::ErrorKind>>,
}

/// The producer side: a `Write` that buffers until `flush`, then queues the batch.
pub struct QueueWriter {
    buf: Vec<u8>,
    tx: Option<Sender<Vec<u8>>>,
    shared: Arc<Shared>,
}

/// The writer thread, for the end of the run.
pub struct QueueHandle {
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    done: mpsc::Receiver<()>,
}

fn lines(b: &[u8]) -> u64 {
    b.iter().filter(|&&c| c == b'\n').count() as u64
}

/// The bytes the kernel writes to a pipe in one piece, never interleaved with another
/// writer's (POSIX `PIPE_BUF`, 4096 on Linux).
const PIPE_BUF: usize = 4096;

/// A writer for an output shared with the `-c` command (`watch --json -c prog`, both on one
/// stdout): each `write()` it makes holds whole lines and at most [`PIPE_BUF`] bytes, so a
/// line the command prints lands between two of ours, never inside one. (A single write of
/// a whole batch can be split by the kernel when the pipe fills, and the command's line would
/// land in the middle of a record.) A line longer than `PIPE_BUF` is written alone.
pub struct LineAtomic<W: Write>(pub W);

impl<W: Write> Write for LineAtomic<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.write_all(b)?;
        Ok(b.len())
    }

    fn write_all(&mut self, mut b: &[u8]) -> io::Result<()> {
        while !b.is_empty() {
            let n = line_chunk(b, PIPE_BUF);
            self.0.write_all(&b[..n])?;
            b = &b[n..];
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// The length of the next chunk of `b` to write: whole lines up to `max` bytes, or the first
/// line alone when it is longer (or all of `b` when it has no newline).
fn line_chunk(b: &[u8], max: usize) -> usize {
    let window = &b[..b.len().min(max)];
    match window.iter().rposition(|&c| c == b'\n') {
        Some(i) => i + 1,
        None => b
            .iter()
            .position(|&c| c == b'\n')
            .map_or(b.len(), |i| i + 1),
    }
}

/// A writer thread over `out` and the `Write` that feeds it.
pub fn spawn<W: Write + Send + 'static>(mut out: W) -> (QueueWriter, QueueHandle) {
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let (done_tx, done) = mpsc::channel();
    let shared = Arc::new(Shared::default());
    let s = Arc::clone(&shared);
    let thread = std::thread::spawn(move || {
        let mut failed = false;
        for batch in rx {
            let n = lines(&batch);
            if !failed {
                if let Err(e) = out.write_all(&batch).and_then(|_| out.flush()) {
                    failed = true;
                    *s.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.kind());
                }
            }
            if failed {
                s.lost_lines.fetch_add(n, Ordering::Relaxed);
            }
            s.pending_lines.fetch_sub(n, Ordering::Relaxed);
            s.pending_bytes
                .fetch_sub(batch.len() as u64, Ordering::Relaxed);
        }
        let _ = done_tx.send(());
    });
    (
        QueueWriter {
            buf: Vec::with_capacity(1 << 16),
            tx: Some(tx),
            shared: Arc::clone(&shared),
        },
        QueueHandle {
            thread: Some(thread),
            shared,
            done,
        },
    )
}

impl Write for QueueWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(kind) = *self.shared.error.lock().unwrap_or_else(|e| e.into_inner()) {
            self.shared
                .lost_lines
                .fetch_add(lines(&self.buf), Ordering::Relaxed);
            self.buf.clear();
            return Err(io::Error::from(kind));
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        let batch = std::mem::replace(&mut self.buf, Vec::with_capacity(1 << 16));
        let n = lines(&batch);
        let Some(tx) = &self.tx else {
            self.shared.lost_lines.fetch_add(n, Ordering::Relaxed);
            return Ok(());
        };
        let bytes = batch.len() as u64;
        if self.shared.pending_bytes.load(Ordering::Relaxed) + bytes > QUEUE_BYTES {
            self.shared.lost_lines.fetch_add(n, Ordering::Relaxed);
            return Ok(());
        }
        self.shared.pending_lines.fetch_add(n, Ordering::Relaxed);
        self.shared
            .pending_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        if tx.send(batch).is_err() {
            self.shared.pending_lines.fetch_sub(n, Ordering::Relaxed);
            self.shared
                .pending_bytes
                .fetch_sub(bytes, Ordering::Relaxed);
            self.shared.lost_lines.fetch_add(n, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl Drop for QueueWriter {
    fn drop(&mut self) {
        let _ = self.flush();
        // Closing the channel lets the writer thread finish once it has written the rest.
        self.tx.take();
    }
}

impl QueueHandle {
    /// Records dropped so far because output could not keep up.
    pub fn lost(&self) -> u64 {
        self.shared.lost_lines.load(Ordering::Relaxed)
    }

    /// Waits up to `timeout` for the writer to write what is queued (the producers must be
    /// dropped first). Returns the records that were never written: dropped, or still queued
    /// behind a reader that does not read.
    pub fn finish(mut self, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        let left = deadline.saturating_duration_since(Instant::now());
        if self.done.recv_timeout(left).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
        // A writer still blocked in write() is left behind: the process exits around it.
        self.lost() + self.shared.pending_lines.load(Ordering::Relaxed)
    }

    /// The writer's error, if writing failed.
    #[cfg(test)]
    pub fn error(&self) -> Option<io::ErrorKind> {
        *self.shared.error.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn shared_output_is_written_in_whole_lines_of_at_most_pipe_buf() {
        let line = |n: usize| {
            let mut v = vec![b'x'; n - 1];
            v.push(b'\n');
            v
        };
        // 3 lines of 1500: two fit in 4096, the third goes alone; a 5000-byte line alone;
        // a tail without newline last.
        let mut input = [line(1500), line(1500), line(1500), line(5000)].concat();
        input.extend_from_slice(b"tail");
        let mut chunks = Vec::new();
        let mut b = &input[..];
        while !b.is_empty() {
            let n = super::line_chunk(b, super::PIPE_BUF);
            chunks.push(n);
            b = &b[n..];
        }
        assert_eq!(chunks, [3000, 1500, 5000, 4]);
    }

    use super::*;

    /// A writer that blocks until released, as a pipe nobody reads does.
    struct Stalled(mpsc::Receiver<()>, Arc<Mutex<Vec<u8>>>);
    impl Write for Stalled {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let _ = self.0.recv();
            self.1.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stalled_reader_never_blocks_the_producer_and_loss_is_counted() {
        let (release, gate) = mpsc::channel();
        let written = Arc::new(Mutex::new(Vec::new()));
        let (mut w, h) = spawn(Stalled(gate, Arc::clone(&written)));
        let t = Instant::now();
        // Four times what the queue holds, in 64 KiB batches of 1 KiB lines: none of these
        // calls may block.
        let line = [b'x'; 1023];
        let batches = (4 * QUEUE_BYTES / 65536) as usize;
        for _ in 0..batches {
            for _ in 0..64 {
                w.write_all(&line).unwrap();
                w.write_all(b"\n").unwrap();
            }
            w.flush().unwrap();
        }
        let total = batches as u64 * 64;
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        // At most a queue's worth (plus the batch the writer holds) got through.
        assert!(h.lost() >= total * 3 / 4 - 128, "{} of {total}", h.lost());
        drop(w);
        // Still stalled: finish gives up on time and counts everything unwritten.
        let t = Instant::now();
        let unwritten = h.finish(Duration::from_millis(200));
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(unwritten, total);
        drop(release);
    }

    #[test]
    fn everything_is_written_when_the_reader_keeps_up() {
        let buf = Arc::new(Mutex::new(Vec::new()));
        struct Shared(Arc<Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let (mut w, h) = spawn(Shared(Arc::clone(&buf)));
        for i in 0..10 {
            writeln!(w, "{i}").unwrap();
            w.flush().unwrap();
            // Give the writer a moment so the tiny queue never fills in this test.
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(w);
        assert_eq!(h.finish(Duration::from_secs(10)), 0);
        assert_eq!(
            buf.lock().unwrap().iter().filter(|&&c| c == b'\n').count(),
            10
        );
    }

    #[test]
    fn a_closed_pipe_comes_back_as_broken_pipe() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from(io::ErrorKind::BrokenPipe))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let (mut w, h) = spawn(Closed);
        writeln!(w, "x").unwrap();
        w.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while h.error().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(h.error(), Some(io::ErrorKind::BrokenPipe));
        writeln!(w, "y").unwrap();
        assert_eq!(w.flush().unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }
}
