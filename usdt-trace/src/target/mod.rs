//! From what the user named — a path, or a PID — to opened, parsed ELF objects.
//!
//! `list` and `watch` both start here. An object is opened once and parsed through that same
//! descriptor, and `watch` later attaches its uprobes through `/proc/self/fd/N` of it, so the
//! kernel resolves the very inode that was parsed even if the path is replaced in between.
//!
//! Files are opened non-blocking and checked to be regular files before any read: a FIFO named
//! as a target would otherwise block `open()` forever. For a process, the objects are the
//! distinct files in `/proc/PID/maps`, reached through `/proc/PID/root` so that processes in
//! other mount namespaces (containers) work. Which failures are fatal is the caller's policy:
//! a file the user named must parse, while a process maps fonts and locale archives too.
//!
//! `/proc/PID/root/<path>` is resolved by *us*, and the target controls what it meets there: in
//! its own user and mount namespace an unprivileged process can put an absolute symlink where
//! its mapped file was, and the symlink then resolves on the host, to any file root can read.
//! So every object opened for a process is first opened `O_PATH` (no read, no device open),
//! checked to be the inode `/proc/PID/maps` names, and only then opened for reading.

pub(crate) mod child;
pub(crate) mod libhint;
pub(crate) mod libname;
pub mod procmaps;
pub(crate) mod procmem;
pub(crate) mod procnames;
pub(crate) mod symbolize;
pub(crate) mod unwind;

use crate::elf::{self, ElfError, ObjectProbes};
use crate::target::procmaps::{MappedObject, ProcError};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why an object could not be opened or parsed.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{path}: {source}")]
    Open {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path}: is a directory, not an ELF object")]
    IsDirectory { path: String },
    #[error("{path}: not a regular file ({kind})")]
    NotRegularFile { path: String, kind: &'static str },
    /// The file opened but is not a usable ELF object; `source` carries no path of its own.
    #[error("{path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: ElfError,
    },
    #[error(transparent)]
    Proc(#[from] ProcError),
    /// What the process's path leads to now is not the file it mapped (replaced, or redirected
    /// by a symlink in the process's own mount namespace): it is refused, not read.
    #[error(
        "{path}: not the file process {pid} mapped (maps says device {}:{} inode {}, the path \
         leads to device {}:{} inode {}); skipped",
        .mapped.0, .mapped.1, .mapped.2, .found.0, .found.1, .found.2
    )]
    NotTheMappedFile {
        path: String,
        pid: u32,
        /// (major, minor, inode) from `/proc/PID/maps`.
        mapped: (u32, u32, u64),
        /// (major, minor, inode) of what the path opened.
        found: (u32, u32, u64),
    },
}

impl TargetError {
    /// The ELF problem, if that is what this is.
    pub fn elf(&self) -> Option<&ElfError> {
        match self {
            TargetError::Parse { source, .. } => Some(source.kind()),
            _ => None,
        }
    }
}

/// One opened and parsed object.
#[derive(Debug)]
pub struct Object {
    /// The name to show: the path as the user or the process sees it.
    pub shown: String,
    /// Kept open: `watch` attaches through `/proc/self/fd/N` of this descriptor.
    pub file: File,
    pub probes: ObjectProbes,
    /// Device and inode of the opened file, for deduplication and identity checks.
    pub dev: u64,
    pub inode: u64,
}

impl Object {
    /// A path naming this object's open descriptor (what the kernel attaches through).
    pub fn fd_path(&self) -> PathBuf {
        fd_path(&self.file)
    }
}

fn fd_path(f: &impl AsRawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// (major, minor, inode) of a stat result.
fn identity(m: &std::fs::Metadata) -> (u32, u32, u64) {
    use std::os::unix::fs::MetadataExt;
    (libc::major(m.dev()), libc::minor(m.dev()), m.ino())
}

/// Opens the object `pid` maps as `m`, after checking that its path leads to the very inode
/// the process mapped; `shown` names it in errors.
pub fn open_mapped(pid: u32, m: &MappedObject, shown: &str) -> Result<Object, TargetError> {
    open_mapped_limited(pid, m, shown, None)
}

/// [`open_mapped`], parsing within `limits` (an object the process chose to map later).
pub fn open_mapped_limited(
    pid: u32,
    m: &MappedObject,
    shown: &str,
    limits: Option<&elf::Limits>,
) -> Result<Object, TargetError> {
    let open_err = |source| TargetError::Open {
        path: shown.to_string(),
        source,
    };
    // O_PATH follows the symlinks but opens nothing: a planted link to a device (a watchdog,
    // a tape) is not opened before it is refused.
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(&m.host_path)
        .map_err(open_err)?;
    let found = identity(&handle.metadata().map_err(open_err)?);
    let mapped = (m.dev.0, m.dev.1, m.inode);
    if found != mapped && !same_as_map_files(m, found) {
        return Err(TargetError::NotTheMappedFile {
            path: shown.to_string(),
            pid,
            mapped,
            found,
        });
    }
    // Reopened through the checked handle: the same inode, whatever the path says by now.
    open_limited(shown, &fd_path(&handle), limits)
}

/// Some file systems (btrfs subvolumes, overlayfs on older kernels) report in maps another
/// device or inode than stat() does for the same file. The mapping itself, through
/// `/proc/PID/map_files` (root only), then settles it.
fn same_as_map_files(m: &MappedObject, found: (u32, u32, u64)) -> bool {
    std::fs::metadata(&m.map_files).is_ok_and(|meta| identity(&meta) == found)
}

fn file_kind(ft: std::fs::FileType) -> &'static str {
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "not a file"
    }
}

/// Opens and parses `path`, naming it `shown` in every error.
pub fn open(shown: &str, path: &Path) -> Result<Object, TargetError> {
    open_limited(shown, path, None)
}

/// [`open`], parsing within `limits`.
fn open_limited(
    shown: &str,
    path: &Path,
    limits: Option<&elf::Limits>,
) -> Result<Object, TargetError> {
    let shown = shown.to_string();
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever. It has
    // no effect on the regular files we go on to read.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|source| TargetError::Open {
            path: shown.clone(),
            source,
        })?;
    let meta = file.metadata().map_err(|source| TargetError::Open {
        path: shown.clone(),
        source,
    })?;
    if meta.is_dir() {
        return Err(TargetError::IsDirectory { path: shown });
    }
    if !meta.is_file() {
        return Err(TargetError::NotRegularFile {
            kind: file_kind(meta.file_type()),
            path: shown,
        });
    }
    // Parsed through the descriptor; the error names the path the user knows.
    let probes =
        elf::parse_file_limited(&fd_path(&file), limits).map_err(|e| TargetError::Parse {
            path: shown.clone(),
            source: strip_path(e),
        })?;
    use std::os::unix::fs::MetadataExt;
    Ok(Object {
        shown,
        dev: meta.dev(),
        inode: meta.ino(),
        file,
        probes,
    })
}

/// `parse_file` wraps errors in the (descriptor) path it was given; drop that wrapper.
fn strip_path(e: ElfError) -> ElfError {
    match e {
        ElfError::InFile { source, .. } => *source,
        other => other,
    }
}

/// One file a process maps, opened (or why not).
#[derive(Debug)]
pub struct MappedTarget {
    /// The path as the process sees it, with ` (deleted)` when it was removed.
    pub shown: String,
    pub object: Result<Object, TargetError>,
}

/// Every distinct file `pid` maps, each checked to be the mapped file, opened and parsed.
pub fn open_process(pid: u32) -> Result<Vec<MappedTarget>, TargetError> {
    Ok(procmaps::mapped_objects(pid)?
        .into_iter()
        .map(|m| {
            let path = m.shown();
            let shown = if m.deleted {
                format!("{path} (deleted)")
            } else {
                path.clone()
            };
            MappedTarget {
                object: open_mapped(pid, &m, &path),
                shown,
            }
        })
        .collect())
}

/// Alive and not a zombie (a zombie's probes can never fire again).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => procmaps::stat_state(&s).is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("usdt-target-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: plain mkfifo on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let r = open("fifo", &dir);
        let _ = std::fs::remove_file(&dir);
        match r {
            Err(TargetError::NotRegularFile { kind, .. }) => assert_eq!(kind, "a FIFO"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_name_the_shown_path_not_the_descriptor() {
        let e = open("shown-name", Path::new("/")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "shown-name: is a directory, not an ELF object"
        );
        let e = open("missing", Path::new("/nonexistent/x")).unwrap_err();
        assert!(e.to_string().starts_with("missing: No such file"), "{e}");
        let me = std::env::current_exe().unwrap();
        // A text file is not ELF: the message names our path and says what it starts with.
        let tmp = std::env::temp_dir().join(format!("usdt-target-txt-{}", std::process::id()));
        std::fs::write(&tmp, b"hello world").unwrap();
        let e = open("notes.txt", &tmp).unwrap_err();
        let _ = std::fs::remove_file(&tmp);
        assert!(
            e.to_string().starts_with("notes.txt: not an ELF file"),
            "{e}"
        );
        assert!(matches!(e.elf(), Some(ElfError::NotElf { .. })));
        // Our own test binary is ELF (without probes, most likely): it opens.
        let o = open("me", &me).unwrap();
        assert!(o.inode != 0);
        assert!(o.fd_path().starts_with("/proc/self/fd/"));
    }

    #[test]
    fn a_path_leading_elsewhere_than_the_mapping_is_refused() {
        let me = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        let ours = procmaps::mapped_objects(std::process::id())
            .unwrap()
            .into_iter()
            .find(|m| m.path == me)
            .unwrap();
        assert!(open_mapped(std::process::id(), &ours, "me").is_ok());
        // The same mapping, but its path now leads to another file (as a planted symlink would).
        let other = std::env::temp_dir().join(format!("usdt-target-other-{}", std::process::id()));
        std::fs::write(&other, b"\x7fELF not really").unwrap();
        let forged = MappedObject {
            host_path: other.clone(),
            ..ours
        };
        let r = open_mapped(std::process::id(), &forged, "me");
        let _ = std::fs::remove_file(&other);
        match r {
            Err(e @ TargetError::NotTheMappedFile { .. }) => {
                assert!(e.to_string().starts_with("me: not the file process"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn our_own_process_maps_our_executable() {
        let me = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        let objs = open_process(std::process::id()).unwrap();
        assert!(
            objs.iter()
                .any(|m| Path::new(&m.shown) == me && m.object.is_ok()),
            "{:?}",
            objs.iter().map(|m| &m.shown).collect::<Vec<_>>()
        );
        assert!(pid_alive(std::process::id()));
    }
}
