//! `-o FILE` and `--perfetto FILE`: opened the way a careful root tool opens a path that another
//! user may control.
//!
//! Root often writes its trace into a directory someone else can write (a shared `/tmp/...`, a
//! user's project). That user could have put anything at the path beforehand, so:
//!
//! - The last component is opened `O_NOFOLLOW`. A symlink there is followed only when nobody but
//!   root (or whoever runs us) could have made or swapped it: owned by root or us, in a
//!   directory no other user may change (not writable by others, or sticky and owned by root or
//!   us). Otherwise `out.json -> /etc/shadow` would let that user pick which file root
//!   overwrites.
//! - A regular file with other hard links is refused: the other name may be a root-only file.
//! - It is opened `O_NONBLOCK`, so a FIFO cannot hold `open()` until some reader comes (with
//!   signals not yet handled); FIFOs, sockets, block devices and directories are refused.
//!   Character devices (`/dev/null`, a terminal) are written as they are.
//! - Nothing is truncated when it is opened. An existing file keeps its contents until
//!   [`Pending::commit`], which `watch` calls once the probes are attached; a run that fails
//!   before that leaves the file as it was, and removes a file it created.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why an output path was refused; each names the flag and the path.
#[derive(Debug, thiserror::Error)]
pub enum OutFileError {
    #[error("{flag} {path}: {source}")]
    Open {
        flag: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{flag} {path}: refused: a symlink owned by uid {uid}, which root does not follow (another user could point it at any file); remove it or name the file itself")]
    ForeignSymlink {
        flag: &'static str,
        path: String,
        uid: u32,
    },
    #[error("{flag} {path}: refused: a symlink in {dir}, which {who} can change under us; name the file itself")]
    SymlinkInOpenDir {
        flag: &'static str,
        path: String,
        dir: String,
        /// "uid N", "group N" or "every user".
        who: String,
    },
    #[error("{flag} {path}: refused: not a regular file ({kind}); write to stdout instead, or name a file")]
    NotRegular {
        flag: &'static str,
        path: String,
        kind: &'static str,
    },
    #[error("{flag} {path}: refused: the file has {links} hard links, and another of its names may be a file that must not be overwritten")]
    HardLinks {
        flag: &'static str,
        path: String,
        links: u64,
    },
}

/// An output file opened by [`open`], not yet truncated: see [`Pending::commit`].
#[derive(Debug)]
pub struct Pending {
    flag: &'static str,
    path: PathBuf,
    /// A second descriptor on the same open file, to truncate it and to know it again.
    file: File,
    /// We created it: a run that never starts removes it.
    created: bool,
    /// An existing regular file, emptied at commit.
    truncate: bool,
    committed: bool,
}

impl Pending {
    /// The run starts: an existing regular file is emptied now, not before (nothing has been
    /// written to it yet: the sinks write from `begin` on).
    pub fn commit(&mut self) -> Result<(), OutFileError> {
        if self.truncate {
            self.file.set_len(0).map_err(|source| OutFileError::Open {
                flag: self.flag,
                path: self.path.display().to_string(),
                source,
            })?;
        }
        self.committed = true;
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.created && !self.committed {
            // Only the file we made: if the name leads elsewhere by now, it is left alone.
            let ours = self.file.metadata().ok().map(|m| (m.dev(), m.ino()));
            let there = std::fs::symlink_metadata(&self.path)
                .ok()
                .map(|m| (m.dev(), m.ino()));
            if ours.is_some() && ours == there {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

fn file_kind(m: &Metadata) -> &'static str {
    let ft = m.file_type();
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// Writable as output: a regular file or a character device (`/dev/null`).
fn usable(
    flag: &'static str,
    shown: &str,
    m: &Metadata,
    created: bool,
) -> Result<(), OutFileError> {
    let ft = m.file_type();
    if ft.is_file() {
        if !created && m.nlink() > 1 {
            return Err(OutFileError::HardLinks {
                flag,
                path: shown.to_string(),
                links: m.nlink(),
            });
        }
        return Ok(());
    }
    if ft.is_char_device() {
        return Ok(());
    }
    Err(OutFileError::NotRegular {
        flag,
        path: shown.to_string(),
        kind: file_kind(m),
    })
}

/// Whether the symlink at `path` (described by `link`) may be followed: see the module doc.
fn trust_symlink(
    flag: &'static str,
    shown: &str,
    path: &Path,
    link: &Metadata,
) -> Result<(), OutFileError> {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let trusted = |uid: u32| uid == 0 || uid == me;
    if !trusted(link.uid()) {
        return Err(OutFileError::ForeignSymlink {
            flag,
            path: shown.to_string(),
            uid: link.uid(),
        });
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let d = std::fs::metadata(dir).map_err(|source| OutFileError::Open {
        flag,
        path: shown.to_string(),
        source,
    })?;
    let mode = d.permissions().mode();
    let sticky = mode & 0o1000 != 0;
    // Who, besides root and us, could replace the link: the directory's owner, and its group
    // or everyone when they may write (unless the sticky bit keeps them to their own entries).
    let other_writer = if !trusted(d.uid()) {
        Some(format!("uid {}", d.uid()))
    } else if mode & 0o002 != 0 && !sticky {
        Some("every user".to_string())
    } else if mode & 0o020 != 0 && !sticky {
        Some(format!("group {}", d.gid()))
    } else {
        None
    };
    match other_writer {
        None => Ok(()),
        Some(who) => Err(OutFileError::SymlinkInOpenDir {
            flag,
            path: shown.to_string(),
            dir: dir.display().to_string(),
            who,
        }),
    }
}

/// What [`open`] would refuse, found without opening, creating or truncating anything: run
/// when the flags are checked, so a bad path fails before targets are parsed or waited for.
pub fn check(flag: &'static str, path: &Path) -> Result<(), OutFileError> {
    let shown = path.display().to_string();
    let err = |source| OutFileError::Open {
        flag,
        path: shown.clone(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            trust_symlink(flag, &shown, path, &m)?;
            match std::fs::metadata(path) {
                Ok(target) => usable(flag, &shown, &target, false),
                // A dangling link is created through when opened.
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(err(e)),
            }
        }
        Ok(m) => usable(flag, &shown, &m, false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            let d = std::fs::metadata(dir).map_err(err)?;
            if !d.is_dir() {
                return Err(err(io::Error::from_raw_os_error(libc::ENOTDIR)));
            }
            Ok(())
        }
        Err(e) => Err(err(e)),
    }
}

/// Opens `path` for writing as described in the module doc; `flag` (`-o`, `--perfetto`) names
/// it in errors. The file is not truncated until [`Pending::commit`].
pub fn open(flag: &'static str, path: &Path) -> Result<(File, Pending), OutFileError> {
    let shown = path.display().to_string();
    let err = |source| OutFileError::Open {
        flag,
        path: shown.clone(),
        source,
    };
    let opts = |extra: libc::c_int| {
        let mut o = OpenOptions::new();
        o.write(true)
            .mode(0o666)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | extra);
        o
    };
    // Created here (O_EXCL never follows a symlink), else opened as it is.
    let (file, created) = match opts(libc::O_NOFOLLOW).create_new(true).open(path) {
        Ok(f) => (f, true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            match opts(libc::O_NOFOLLOW).open(path) {
                Ok(f) => (f, false),
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                    let link = std::fs::symlink_metadata(path).map_err(err)?;
                    trust_symlink(flag, &shown, path, &link)?;
                    (opts(0).create(true).open(path).map_err(err)?, false)
                }
                // A FIFO with no reader, or a socket: say which.
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                    return Err(match std::fs::metadata(path) {
                        Ok(m) => usable(flag, &shown, &m, false).err().unwrap_or(err(e)),
                        Err(_) => err(e),
                    });
                }
                Err(e) => return Err(err(e)),
            }
        }
        Err(e) => return Err(err(e)),
    };
    let meta = file.metadata().map_err(err)?;
    // From here a failure drops `pending`, which removes a file we created.
    let pending = Pending {
        flag,
        path: path.to_path_buf(),
        file: file.try_clone().map_err(err)?,
        created,
        truncate: !created && meta.is_file(),
        committed: false,
    };
    usable(flag, &shown, &meta, created)?;
    // Writes block again from here: `-o` is written by its own thread, and non-blocking
    // writes to a terminal would fail with EAGAIN.
    set_blocking(&file).map_err(err)?;
    Ok((file, pending))
}

fn set_blocking(f: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, with flags read from it.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("usdt-outfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Not writable by others: our own symlinks in it may be followed.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let p = dir.join(name);
        let _ = std::fs::remove_file(&p);
        p
    }

    /// Removes the scratch directory once the last test using it has emptied it (remove_dir
    /// fails while another test still has files there).
    fn done(p: &Path) {
        let _ = std::fs::remove_file(p);
        if let Some(dir) = p.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }

    fn mkfifo(p: &Path) {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: plain mkfifo on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn an_existing_file_keeps_its_contents_until_commit() {
        let p = scratch("keep.json");
        std::fs::write(&p, b"fifteen bytes!\n").unwrap();
        let (f, pending) = open("-o", &p).unwrap();
        drop((f, pending));
        // A run that never started: untouched.
        assert_eq!(std::fs::read(&p).unwrap(), b"fifteen bytes!\n");
        let (mut f, mut pending) = open("-o", &p).unwrap();
        pending.commit().unwrap();
        f.write_all(b"new").unwrap();
        drop((f, pending));
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        done(&p);
    }

    #[test]
    fn a_created_file_is_removed_when_the_run_never_starts() {
        let p = scratch("made.json");
        let (f, pending) = open("--perfetto", &p).unwrap();
        assert!(p.exists());
        drop((f, pending));
        assert!(!p.exists());
        let (f, mut pending) = open("--perfetto", &p).unwrap();
        pending.commit().unwrap();
        drop((f, pending));
        assert!(p.exists());
        done(&p);
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let p = scratch("fifo");
        mkfifo(&p);
        // No reader: open(O_NONBLOCK) fails at once instead of waiting for one.
        let e = open("-o", &p).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "-o {}: refused: not a regular file (a FIFO); write to stdout instead, or name a file",
                p.display()
            )
        );
        assert!(matches!(
            check("-o", &p),
            Err(OutFileError::NotRegular { kind: "a FIFO", .. })
        ));
        // With a reader, opening would succeed: still refused (a stalled reader would stall
        // the tracing loop that writes --perfetto).
        let reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&p)
            .unwrap();
        assert!(matches!(
            open("--perfetto", &p),
            Err(OutFileError::NotRegular { kind: "a FIFO", .. })
        ));
        drop(reader);
        done(&p);
    }

    #[test]
    fn a_character_device_is_written_as_it_is() {
        let (mut f, mut pending) = open("-o", Path::new("/dev/null")).unwrap();
        pending.commit().unwrap();
        f.write_all(b"x").unwrap();
        check("-o", Path::new("/dev/null")).unwrap();
    }

    #[test]
    fn a_directory_is_refused() {
        let e = open("-o", Path::new("/")).unwrap_err();
        assert!(e.to_string().starts_with("-o /: "), "{e}");
        assert!(matches!(
            check("-o", Path::new("/")),
            Err(OutFileError::NotRegular {
                kind: "a directory",
                ..
            })
        ));
    }

    #[test]
    fn a_file_with_another_hard_link_is_refused_and_untouched() {
        let secret = scratch("secret");
        std::fs::write(&secret, b"root only").unwrap();
        let p = scratch("linked.json");
        std::fs::hard_link(&secret, &p).unwrap();
        let e = open("-o", &p).unwrap_err();
        assert!(matches!(e, OutFileError::HardLinks { links: 2, .. }), "{e}");
        assert!(matches!(
            check("-o", &p),
            Err(OutFileError::HardLinks { .. })
        ));
        assert_eq!(std::fs::read(&secret).unwrap(), b"root only");
        let _ = std::fs::remove_file(&p);
        done(&secret);
    }

    #[test]
    fn our_own_symlink_in_a_closed_directory_is_followed() {
        let real = scratch("real.json");
        std::fs::write(&real, b"old").unwrap();
        let link = scratch("link.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        check("-o", &link).unwrap();
        let (mut f, mut pending) = open("-o", &link).unwrap();
        pending.commit().unwrap();
        f.write_all(b"new").unwrap();
        drop((f, pending));
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        let _ = std::fs::remove_file(&link);
        done(&real);
    }

    #[test]
    fn a_symlink_in_a_directory_others_can_write_is_refused() {
        let dir = std::env::temp_dir().join(format!("usdt-outfile-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // World-writable without the sticky bit: anyone could have swapped our link.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let real = scratch("target-of-open-dir-link");
        std::fs::write(&real, b"keep").unwrap();
        let link = dir.join("out.json");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = open("--perfetto", &link).unwrap_err();
        assert!(matches!(e, OutFileError::SymlinkInOpenDir { .. }), "{e}");
        assert!(matches!(
            check("--perfetto", &link),
            Err(OutFileError::SymlinkInOpenDir { .. })
        ));
        assert_eq!(std::fs::read(&real).unwrap(), b"keep");
        let _ = std::fs::remove_dir_all(&dir);
        done(&real);
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_flag() {
        let e = check("--perfetto", Path::new("/nonexistent-dir/x.pftrace")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--perfetto /nonexistent-dir/x.pftrace: No such file"),
            "{e}"
        );
        assert!(open("--perfetto", Path::new("/nonexistent-dir/x.pftrace")).is_err());
    }
}
