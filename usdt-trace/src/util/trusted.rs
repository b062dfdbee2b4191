//! Reading the config file as sshd and sudo read theirs. The daemon runs with the rights to
//! trace any program and export what it reads, so whoever can change its file can make it
//! trace a program they could not read and publish its strings: a file (or a directory on the
//! way to it, or a symlink naming it) that another user could change is refused, with one
//! line saying which and why. A FIFO, a device or a huge file is refused too: reading one
//! would hang the daemon (a reload with it) or fill its memory.
//!
//! The same checks guard every other file the endpoint trusts: the web config (`--web-config`,
//! `web-config`: who may scrape) and the certificates and key it names ([`read_bytes`]).

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A file refused or unreadable, in one line naming it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FileError {
    #[error("{file}: cannot read: {msg}")]
    Read { file: String, msg: String },
    /// A file others could change, or one that is no regular file or too large.
    #[error("{file}: refused: {msg}")]
    Refused { file: String, msg: String },
}

/// Largest file read: a config file with the most definitions allowed, each with long lists,
/// is a few tens of KiB; a certificate chain a few KiB, a bundle of every public CA 220 KiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// What the checks look at of one file, directory or symlink.
#[derive(Clone, Copy, Debug)]
pub struct Facts {
    pub uid: u32,
    /// `st_mode`: the type bits and the permissions.
    pub mode: u32,
    pub size: u64,
}

impl Facts {
    fn of(m: &std::fs::Metadata) -> Facts {
        Facts {
            uid: m.uid(),
            mode: m.mode(),
            size: m.size(),
        }
    }
}

/// An owner trusted with the daemon's rights: root, or the user it runs as.
fn trusted(uid: u32, me: u32) -> bool {
    uid == 0 || uid == me
}

fn owner_line(what: &str, uid: u32, me: u32) -> String {
    format!("{what} is owned by uid {uid}, neither root nor the daemon's user (uid {me})")
}

fn kind(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFSOCK => "a socket",
        libc::S_IFLNK => "a symlink",
        _ => "of an unknown type",
    }
}

/// The file itself, as opened (`fstat`): a regular file, not too large, that only root or the
/// daemon's user can change.   (pure)
pub fn judge_file(f: &Facts, me: u32) -> Result<(), String> {
    if f.mode & libc::S_IFMT != libc::S_IFREG {
        return Err(format!("{}, not a regular file", kind(f.mode)));
    }
    if f.size > MAX_CONFIG_BYTES {
        return Err(format!(
            "{} bytes: such a file is at most {MAX_CONFIG_BYTES} (1 MiB)",
            f.size
        ));
    }
    if !trusted(f.uid, me) {
        return Err(owner_line("it", f.uid, me));
    }
    if f.mode & 0o022 != 0 {
        return Err(format!(
            "it is writable by group or others (mode {:04o}): only root or the daemon's user may change it (chmod go-w)",
            f.mode & 0o7777
        ));
    }
    Ok(())
}

/// A directory on the way to the file: owned by root or the daemon's user and writable by no
/// one else, unless sticky (as /tmp: others may add entries but not replace one they do not
/// own).   (pure)
pub fn judge_dir(dir: &Path, f: &Facts, me: u32) -> Result<(), String> {
    let what = format!("its directory {}", dir.display());
    if !trusted(f.uid, me) {
        return Err(owner_line(&what, f.uid, me));
    }
    if f.mode & 0o022 != 0 && f.mode & libc::S_ISVTX == 0 {
        return Err(format!(
            "{what} is writable by group or others (mode {:04o}): anyone who can write there can replace the file",
            f.mode & 0o7777
        ));
    }
    Ok(())
}

/// A symlink on the way to the file: owned by root or the daemon's user (in a sticky
/// directory such as /tmp, anyone may plant one).   (pure)
pub fn judge_link(link: &Path, f: &Facts, me: u32) -> Result<(), String> {
    if trusted(f.uid, me) {
        Ok(())
    } else {
        Err(owner_line(
            &format!("the symlink {}", link.display()),
            f.uid,
            me,
        ))
    }
}

/// Reads `path` after the checks above; every refusal is one [`FileError`].
pub fn read(path: &Path) -> Result<String, FileError> {
    let bytes = read_bytes(path)?;
    String::from_utf8(bytes).map_err(|_| FileError::Read {
        file: path.display().to_string(),
        msg: "stream did not contain valid UTF-8".into(),
    })
}

/// [`read`] for a file of any content (a key, a certificate): the same checks, the bytes.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, FileError> {
    let file = path.display().to_string();
    let read_err = |e: std::io::Error| FileError::Read {
        file: file.clone(),
        msg: e.to_string(),
    };
    let refused = |msg: String| FileError::Refused {
        file: file.clone(),
        msg,
    };
    // SAFETY: geteuid takes nothing and cannot fail.
    let me = unsafe { libc::geteuid() };
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_err(read_err)?.join(path)
    };
    // Where it really is (a missing file is "cannot read", before any other word).
    let real = std::fs::canonicalize(&abs).map_err(read_err)?;
    // The path as named: each symlink on it and each directory it passes through (which
    // may not be on the real path: a directory holding a symlink to the file).
    let mut dirs: Vec<PathBuf> = Vec::new();
    for p in abs.ancestors() {
        if let Ok(m) = std::fs::symlink_metadata(p) {
            if m.file_type().is_symlink() {
                judge_link(p, &Facts::of(&m), me).map_err(refused)?;
            }
        }
        if p != abs {
            dirs.push(p.to_path_buf());
        }
    }
    dirs.extend(real.ancestors().skip(1).map(Path::to_path_buf));
    for d in &dirs {
        let m = std::fs::metadata(d).map_err(read_err)?;
        judge_dir(d, &Facts::of(&m), me).map_err(refused)?;
    }
    // Not even opened when it is no regular file: opening some devices acts on them.
    let m = std::fs::metadata(&real).map_err(read_err)?;
    if !m.file_type().is_file() {
        return Err(refused(format!("{}, not a regular file", kind(m.mode()))));
    }
    // The real path has no symlink left: one swapped in now fails the open (O_NOFOLLOW), and
    // a FIFO swapped in does not block it (O_NONBLOCK); what was opened is judged by fstat.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&real)
        .map_err(read_err)?;
    let m = f.metadata().map_err(read_err)?;
    judge_file(&Facts::of(&m), me).map_err(refused)?;
    // Bounded even if it grows between fstat and read.
    let mut bytes = Vec::with_capacity(m.len() as usize);
    f.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(refused(format!(
            "more than {MAX_CONFIG_BYTES} bytes: such a file is at most 1 MiB"
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u32 = 1000;

    fn facts(uid: u32, mode: u32) -> Facts {
        Facts {
            uid,
            mode,
            size: 100,
        }
    }

    #[test]
    fn files_others_can_change_are_refused() {
        let reg = libc::S_IFREG;
        assert!(judge_file(&facts(0, reg | 0o644), ME).is_ok());
        assert!(judge_file(&facts(ME, reg | 0o600), ME).is_ok());
        let e = judge_file(&facts(0, reg | 0o666), ME).expect_err("0666");
        assert!(e.contains("writable by group or others (mode 0666)"), "{e}");
        assert!(judge_file(&facts(0, reg | 0o664), ME).is_err());
        let e = judge_file(&facts(65534, reg | 0o644), ME).expect_err("nobody's");
        assert!(e.contains("owned by uid 65534"), "{e}");
        for (t, name) in [
            (libc::S_IFIFO, "a FIFO"),
            (libc::S_IFCHR, "a character device"),
            (libc::S_IFDIR, "a directory"),
        ] {
            let e = judge_file(&facts(0, t | 0o644), ME).expect_err(name);
            assert_eq!(e, format!("{name}, not a regular file"));
        }
        let mut big = facts(0, reg | 0o644);
        big.size = MAX_CONFIG_BYTES + 1;
        assert!(judge_file(&big, ME).expect_err("big").contains("1 MiB"));
    }

    #[test]
    fn directories_others_can_change_are_refused_unless_sticky() {
        let d = Path::new("/x");
        let dir = libc::S_IFDIR;
        assert!(judge_dir(d, &facts(0, dir | 0o755), ME).is_ok());
        assert!(judge_dir(d, &facts(0, dir | 0o1777), ME).is_ok());
        let e = judge_dir(d, &facts(0, dir | 0o777), ME).expect_err("0777");
        assert!(e.starts_with("its directory /x is writable"), "{e}");
        assert!(judge_dir(d, &facts(65534, dir | 0o755), ME).is_err());
        let l = Path::new("/tmp/serve.toml");
        let e = judge_link(l, &facts(65534, libc::S_IFLNK | 0o777), ME).expect_err("link");
        assert!(e.starts_with("the symlink /tmp/serve.toml is owned by uid 65534"));
        assert!(judge_link(l, &facts(ME, libc::S_IFLNK | 0o777), ME).is_ok());
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("usdt-cfgfile-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        d
    }

    /// A FIFO is refused at once (reading one blocks until a writer comes); a device and a
    /// file over the cap too, each with one line. No root needed.
    #[test]
    fn fifos_devices_and_huge_files_are_refused_at_once() {
        let d = scratch("types");
        let fifo = d.join("fifo.toml");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("c");
        // SAFETY: a NUL-terminated path and a mode.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = std::time::Instant::now();
        let e = read(&fifo).expect_err("fifo").to_string();
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert!(
            e.ends_with("fifo.toml: refused: a FIFO, not a regular file"),
            "{e}"
        );
        let e = read(Path::new("/dev/zero")).expect_err("zero").to_string();
        assert_eq!(
            e,
            "/dev/zero: refused: a character device, not a regular file"
        );
        let big = d.join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).expect("big");
        let e = read(&big).expect_err("big").to_string();
        assert!(e.contains("at most 1048576 (1 MiB)"), "{e}");
        let open = d.join("open.toml");
        std::fs::write(&open, "listen = \"127.0.0.1:1\"\n").expect("write");
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .expect("chmod");
        let e = read(&open).expect_err("0666").to_string();
        assert!(
            e.contains("refused: it is writable by group or others (mode 0666)"),
            "{e}"
        );
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .expect("chmod");
        assert_eq!(read(&open).expect("ok"), "listen = \"127.0.0.1:1\"\n");
        // Through a symlink of its own user: read; in a directory others may write: refused.
        let link = d.join("link.toml");
        std::os::unix::fs::symlink(&open, &link).expect("symlink");
        assert!(read(&link).is_ok());
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .expect("chmod");
        let e = read(&link).expect_err("dir 0777").to_string();
        assert!(
            e.contains("is writable by group or others (mode 0777)"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
