//! The kernel log from a test's start on (`/dev/kmsg`), for the lines that say the kernel's
//! uprobe reference counting went wrong: `ref_ctr going negative`, `ref_ctr decrement failed
//! for inode ...` and `failed to unregister, leaking uprobe` (a uprobe leaked until reboot).
//!
//! The log is the machine's: other tests (and other tracers) write to it at the same time, so
//! a line counts against a test only when it names one of the test's inodes or tracer PIDs; a
//! `going negative` line (which names neither) counts with the line after it.
use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;

/// Linux's values on every architecture this crate runs on (the crate does without libc).
const O_NONBLOCK: i32 = 0o4000;
const EPIPE: i32 = 32;

/// The kernel log as it grows from [`KernelLog::start`] on.
pub struct KernelLog {
    file: File,
    lines: Vec<String>,
}

impl KernelLog {
    /// From now on: records already in the log are skipped.
    pub fn start() -> KernelLog {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(O_NONBLOCK)
            .open("/dev/kmsg")
            .expect("/dev/kmsg (tests that read it need root)");
        file.seek(SeekFrom::End(0)).expect("seek /dev/kmsg");
        KernelLog {
            file,
            lines: Vec::new(),
        }
    }

    /// Every message logged since the start (read so far and now).
    pub fn lines(&mut self) -> &[String] {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match self.file.read(&mut buf) {
                Ok(0) => break,
                // One record per read: "PRI,SEQ,TS,FLAGS;message", then continuation lines.
                Ok(n) => {
                    let rec = String::from_utf8_lossy(&buf[..n]);
                    let first = rec.lines().next().unwrap_or_default();
                    let msg = first.split_once(';').map_or(first, |(_, m)| m);
                    self.lines.push(msg.to_string());
                }
                // Records overwritten before they were read: go on with the next.
                Err(e) if e.raw_os_error() == Some(EPIPE) => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("reading /dev/kmsg: {e}"),
            }
        }
        &self.lines
    }

    /// Every `ref_ctr` or `leaking uprobe` line since the start, whoever caused it.
    pub fn uprobe_trouble_all(&mut self) -> Vec<String> {
        self.lines()
            .iter()
            .filter(|l| is_trouble(l))
            .cloned()
            .collect()
    }

    /// The `ref_ctr` and `leaking uprobe` lines since the start that name one of `inodes` or
    /// `pids` (a `going negative` line with the line after it).
    pub fn uprobe_trouble(&mut self, inodes: &[u64], pids: &[u32]) -> Vec<String> {
        let lines = self.lines().to_vec();
        let ours = |l: &str| {
            inodes
                .iter()
                .any(|i| l.contains(&format!("inode: {i:#x} ")))
                || pids
                    .iter()
                    .any(|p| l.contains("leaking uprobe") && l.contains(&format!(":{p} failed")))
        };
        let mut out = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            let next_ours = lines.get(i + 1).is_some_and(|n| ours(n));
            if is_trouble(l) && (ours(l) || (l.contains("going negative") && next_ours)) {
                out.push(l.clone());
            }
        }
        out
    }

    /// Panics when the log gained a line about `inodes` or `pids` (see
    /// [`KernelLog::uprobe_trouble`]); returns how many such lines anyone caused (for figures).
    pub fn assert_clean(&mut self, what: &str, inodes: &[u64], pids: &[u32]) -> usize {
        let ours = self.uprobe_trouble(inodes, pids);
        assert!(
            ours.is_empty(),
            "{what}: the kernel log gained {} uprobe reference-counting lines:\n{}",
            ours.len(),
            ours.join("\n")
        );
        self.uprobe_trouble_all().len()
    }
}

fn is_trouble(l: &str) -> bool {
    l.contains("ref_ctr") || l.contains("leaking uprobe")
}

/// A file's inode number, as the kernel log prints it.
pub fn inode(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .ino()
}
