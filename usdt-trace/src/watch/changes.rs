//! Noticing that a traced file's content changed while traced. A file overwritten in place
//! (`cp new-build prog` keeps the inode) keeps its uprobes at the old offsets, which in the new
//! content may be the middle of an instruction: the next run of it can crash, or report
//! arguments read from the wrong places. The kernel sees the write (inotify `IN_MODIFY` on the
//! very inode that was parsed, through the descriptor `watch` holds), and the descriptor wakes
//! `watch`'s loop at once; the size and modification time are also compared about once a
//! second, for file systems whose writes inotify does not see (a network file system written
//! from another host). `watch` then detaches the object's uprobes: see [`crate::watch`] and
//! [`crate::watch::late`].

use crate::target::Object;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often the size and modification time are compared besides inotify.
const RECHECK: Duration = Duration::from_secs(1);

/// A traced file whose content changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed {
    /// The path its uprobes were attached through (`/proc/self/fd/N`).
    pub fd_path: PathBuf,
    pub shown: String,
    pub dev: (u32, u32),
    pub inode: u64,
}

struct Watched {
    file: Changed,
    /// (size, mtime, mtime ns) when it was parsed.
    stat: (u64, i64, i64),
    /// Its inotify watch descriptor (-1: none).
    wd: i32,
    /// Reported already.
    changed: bool,
}

/// The traced files, watched for changes.
pub struct ChangeWatch {
    files: Vec<Watched>,
    /// Non-blocking. None: no inotify here; the once-a-second comparison alone remains.
    inotify: Option<OwnedFd>,
    last: Instant,
}

impl Default for ChangeWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl ChangeWatch {
    pub fn new() -> ChangeWatch {
        // SAFETY: inotify_init1 takes flags only.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        ChangeWatch {
            files: Vec::new(),
            // SAFETY: a descriptor just returned to us, owned from here on.
            inotify: (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }),
            last: Instant::now(),
        }
    }

    /// Watches `o` from now on (call before attaching it: a change made the moment it is
    /// attached is still a change).
    pub fn add(&mut self, o: &Object) {
        let Ok(m) = o.file.metadata() else {
            return;
        };
        let fd_path = o.fd_path();
        let wd = self.inotify.as_ref().map_or(-1, |fd| {
            let Ok(path) = std::ffi::CString::new(fd_path.as_os_str().as_encoded_bytes()) else {
                return -1;
            };
            // Through the descriptor: the inode that was parsed, whatever its path names now.
            // SAFETY: a NUL-terminated path and our inotify descriptor.
            unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), libc::IN_MODIFY) }
        });
        self.files.push(Watched {
            file: Changed {
                fd_path,
                shown: o.shown.clone(),
                dev: (libc::major(o.dev), libc::minor(o.dev)),
                inode: o.inode,
            },
            stat: (m.size(), m.mtime(), m.mtime_nsec()),
            wd,
            changed: false,
        });
    }

    /// Stops watching the file added last (it was not attached after all).
    pub fn pop(&mut self) {
        if let Some(f) = self.files.pop() {
            if let (Some(fd), true) = (&self.inotify, f.wd >= 0) {
                // SAFETY: our inotify descriptor and one of its watch descriptors.
                unsafe { libc::inotify_rm_watch(fd.as_raw_fd(), f.wd) };
            }
        }
    }

    /// Stops watching the file with this (device, inode), which is being detached and
    /// closed: once closed, its descriptor's number may name another file.
    pub fn forget(&mut self, dev: (u32, u32), inode: u64) {
        let inotify = &self.inotify;
        self.files.retain(|f| {
            let gone = f.file.dev == dev && f.file.inode == inode;
            if let (Some(fd), true) = (inotify, gone && f.wd >= 0) {
                // SAFETY: our inotify descriptor and one of its watch descriptors.
                unsafe { libc::inotify_rm_watch(fd.as_raw_fd(), f.wd) };
            }
            !gone
        });
    }

    /// The descriptor that becomes readable when a watched file is written.
    pub fn wake_fd(&self) -> Option<i32> {
        self.inotify.as_ref().map(|fd| fd.as_raw_fd())
    }

    /// The watched files changed since the last call, each reported once.
    pub fn take_changed(&mut self) -> Vec<Changed> {
        let mut hit = Vec::new();
        let mut recheck = self.last.elapsed() >= RECHECK;
        if let Some(fd) = &self.inotify {
            let mut buf = [0u8; 4096];
            loop {
                // SAFETY: reading into our buffer from our non-blocking descriptor.
                let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                let Ok(n) = usize::try_from(n) else { break };
                if n == 0 {
                    break;
                }
                let (wds, overflow) = parse_events(&buf[..n]);
                recheck |= overflow;
                for wd in wds {
                    hit.extend(self.files.iter().position(|f| f.wd == wd && wd >= 0));
                }
            }
        }
        if recheck {
            self.last = Instant::now();
            for (i, f) in self.files.iter().enumerate() {
                let Ok(m) = std::fs::metadata(&f.file.fd_path) else {
                    continue;
                };
                if (m.size(), m.mtime(), m.mtime_nsec()) != f.stat {
                    hit.push(i);
                }
            }
        }
        let mut out = Vec::new();
        for i in hit {
            let f = &mut self.files[i];
            if std::mem::replace(&mut f.changed, true) {
                continue;
            }
            // Reported once: a writer that goes on writing no longer wakes the loop.
            if let (Some(fd), true) = (&self.inotify, f.wd >= 0) {
                // SAFETY: our inotify descriptor and one of its watch descriptors.
                unsafe { libc::inotify_rm_watch(fd.as_raw_fd(), f.wd) };
            }
            out.push(f.file.clone());
        }
        out
    }
}

/// The watch descriptors of a buffer of `struct inotify_event`s (wd, mask, cookie, len, then
/// `len` bytes of name), and whether the queue overflowed (events were dropped).
fn parse_events(buf: &[u8]) -> (Vec<i32>, bool) {
    let mut wds = Vec::new();
    let mut overflow = false;
    let mut at = 0;
    while at + 16 <= buf.len() {
        let word = |o: usize| {
            u32::from_ne_bytes([
                buf[at + o],
                buf[at + o + 1],
                buf[at + o + 2],
                buf[at + o + 3],
            ])
        };
        let (wd, mask, len) = (word(0) as i32, word(4), word(12) as usize);
        overflow |= mask & libc::IN_Q_OVERFLOW != 0;
        if wd >= 0 && !wds.contains(&wd) {
            wds.push(wd);
        }
        at = at.saturating_add(16 + len);
    }
    (wds, overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(wd: i32, mask: u32, name: &[u8]) -> Vec<u8> {
        let mut v = wd.to_ne_bytes().to_vec();
        v.extend_from_slice(&mask.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v.extend_from_slice(&(name.len() as u32).to_ne_bytes());
        v.extend_from_slice(name);
        v
    }

    #[test]
    fn events_give_their_watches_once_and_overflow() {
        let mut buf = event(3, libc::IN_MODIFY, &[]);
        buf.extend(event(5, libc::IN_MODIFY, b"name\0\0\0\0"));
        buf.extend(event(3, libc::IN_MODIFY, &[]));
        assert_eq!(parse_events(&buf), (vec![3, 5], false));
        buf.extend(event(-1, libc::IN_Q_OVERFLOW, &[]));
        // A truncated event ends the buffer.
        buf.extend(&event(7, libc::IN_MODIFY, &[])[..10]);
        assert_eq!(parse_events(&buf), (vec![3, 5], true));
    }

    #[test]
    fn a_file_written_through_another_descriptor_is_reported_once() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("usdt-changes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("obj");
        std::fs::write(&path, b"old").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let meta = file.metadata().unwrap();
        let o = Object {
            shown: "obj".into(),
            dev: meta.dev(),
            inode: meta.ino(),
            file,
            probes: Default::default(),
        };
        let mut w = ChangeWatch::new();
        w.add(&o);
        assert!(w.take_changed().is_empty());
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"new").unwrap();
        let got = w.take_changed();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].shown.as_str(), got[0].inode), ("obj", o.inode));
        assert!(w.take_changed().is_empty());
    }
}
