//! Processes by name: `watch --process NAME` (and `processes` in a `serve` definition) traces
//! the executable of every process called NAME.
//!
//! A process is called NAME when its command name (`/proc/PID/comm`, what `ps` and `pgrep`
//! show; the kernel keeps 15 bytes of it) is NAME, or when its executable's file name is.
//! What is traced is the executable *file* each one runs, found through the process's own
//! mappings (checked by device and inode, as every object a process names), then attached for
//! every process running it: those started later from the same file are traced from their
//! first instruction, with no scan. A process of that name running *another* file (a second
//! install, a new build at the same path) is found by the scan that [`crate::watch::follow`] repeats.
//!
//! Everything read here is the traced process's to choose (it may rename itself, or exec a
//! file named like another): a name only ever selects *which* processes' executables are
//! traced, and each is opened as that process maps it, never by a path it claims.

use crate::target::procmaps::MappedObject;
use std::os::unix::ffi::OsStrExt;

/// The most bytes of a command name the kernel keeps (`TASK_COMM_LEN` less the NUL).
pub const COMM_LEN: usize = 15;

/// Why a `--process` name cannot name a process.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a process name cannot be empty".into());
    }
    if name.contains('/') {
        return Err(format!(
            "{name:?}: a process name has no '/' (a file to trace is a TARGET)"
        ));
    }
    if name.contains('\0') || name.len() > 255 {
        return Err(format!(
            "{:?}: not a file name (at most 255 bytes, no NUL)",
            name.chars().take(40).collect::<String>()
        ));
    }
    Ok(())
}

/// Whether a process whose command name is `comm` (as `/proc/PID/comm` gives it, newline
/// removed) and whose executable's file name is `exe_name` is called `name`. A command name
/// the kernel cut to [`COMM_LEN`] bytes matches only through the executable's name: two
/// programs sharing their first 15 bytes are not one.
pub fn is_named(name: &[u8], comm: &[u8], exe_name: Option<&[u8]>) -> bool {
    exe_name == Some(name) || (name.len() <= COMM_LEN && comm == name)
}

/// The file name of what `/proc/PID/exe` reads (a path, ` (deleted)` after it when the file
/// was removed or replaced since the exec).
pub fn exe_file_name(link: &[u8]) -> &[u8] {
    let path = link.strip_suffix(b" (deleted)").unwrap_or(link);
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// The running processes called `name` (but this one).
#[derive(Debug, Default)]
pub struct Found {
    /// Each one's pid and its executable as it maps it.
    pub procs: Vec<(u32, MappedObject)>,
    /// Those so called by their command name whose executable could not be read: another
    /// user's process, without the right to look into it (root or CAP_SYS_PTRACE).
    pub denied: Vec<u32>,
}

/// The running processes called each of `names` (but this one), one [`Found`] per name, in
/// order, from one walk of /proc (`--process` with several names looks each second).
/// Processes that exit meanwhile and kernel threads are skipped.
pub fn executables<S: AsRef<str>>(names: &[S]) -> Vec<Found> {
    let me = std::process::id();
    let mut found: Vec<Found> = names.iter().map(|_| Found::default()).collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        if pid == me {
            continue;
        }
        let Ok(comm) = std::fs::read(format!("/proc/{pid}/comm")) else {
            continue;
        };
        let comm = comm.strip_suffix(b"\n").unwrap_or(&comm);
        let denied = |e: &std::io::Error| e.kind() == std::io::ErrorKind::PermissionDenied;
        // Kernel threads have no executable: the link does not read.
        let link = match std::fs::read_link(format!("/proc/{pid}/exe")) {
            Ok(l) => l,
            Err(e) => {
                for (name, f) in names.iter().zip(found.iter_mut()) {
                    if denied(&e) && is_named(name.as_ref().as_bytes(), comm, None) {
                        f.denied.push(pid);
                    }
                }
                continue;
            }
        };
        let link = link.as_os_str().as_bytes();
        let exe_name = exe_file_name(link);
        // The maps are read once per process, for the first name it answers to.
        let mut mapped: Option<std::io::Result<Option<MappedObject>>> = None;
        for (name, f) in names.iter().zip(found.iter_mut()) {
            if !is_named(name.as_ref().as_bytes(), comm, Some(exe_name)) {
                continue;
            }
            match mapped.get_or_insert_with(|| executable_of(pid)) {
                Ok(Some(m)) => f.procs.push((pid, m.clone())),
                Ok(None) => {}
                Err(e) if denied(e) => f.denied.push(pid),
                Err(_) => {}
            }
        }
    }
    found
}

/// The mapping of `pid`'s executable: the mapped object with the device and inode of the
/// file `/proc/PID/exe` leads to (the kernel's own link to what it executed).
fn executable_of(pid: u32) -> std::io::Result<Option<MappedObject>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(format!("/proc/{pid}/exe"))?;
    let key = (
        (libc::major(meta.dev()), libc::minor(meta.dev())),
        meta.ino(),
    );
    let maps = crate::target::procmaps::mapped_objects(pid).map_err(|e| match e {
        crate::target::procmaps::ProcError::Io { source, .. } => source,
        other => std::io::Error::other(other.to_string()),
    })?;
    Ok(maps.into_iter().find(|m| (m.dev, m.inode) == key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_matches_the_command_name_or_the_executables_file_name() {
        assert!(is_named(b"postgres", b"postgres", Some(b"postgres")));
        // python3 is a symlink: the command name is what was exec'd, the file python3.11.
        assert!(is_named(b"python3", b"python3", Some(b"python3.11")));
        assert!(is_named(b"python3.11", b"python3", Some(b"python3.11")));
        // A process that renamed itself is still its file.
        assert!(is_named(
            b"redis-server",
            b"redis-rdb-bgsave",
            Some(b"redis-server")
        ));
        assert!(!is_named(b"postgres", b"postmaster", Some(b"pg_ctl")));
        assert!(!is_named(b"post", b"postgres", Some(b"postgres")));
    }

    #[test]
    fn a_command_name_cut_to_15_bytes_does_not_match_a_longer_name() {
        let long = b"a-very-long-program-name";
        let comm = &long[..COMM_LEN];
        assert!(!is_named(long, comm, Some(b"another-program")));
        assert!(is_named(long, comm, Some(long)));
        // Exactly 15 bytes: the whole name fits.
        assert!(is_named(comm, comm, None));
    }

    #[test]
    fn the_executables_file_name_drops_the_deleted_mark() {
        assert_eq!(exe_file_name(b"/usr/bin/app"), b"app");
        assert_eq!(exe_file_name(b"/srv/app (deleted)"), b"app");
        assert_eq!(exe_file_name(b"app"), b"app");
        assert_eq!(exe_file_name(b"/"), b"");
    }

    #[test]
    fn bad_names_are_refused_with_a_reason() {
        assert!(check_name("postgres").is_ok());
        assert!(check_name("").unwrap_err().contains("empty"));
        assert!(check_name("/usr/bin/x").unwrap_err().contains("TARGET"));
        assert!(check_name(&"x".repeat(256)).is_err());
        assert!(check_name("a\0b").is_err());
    }

    #[test]
    fn a_child_is_found_by_name_and_the_caller_never() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let name = exe.file_name().unwrap().to_str().unwrap().to_string();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        // Until its exec, the child is a copy of this process: wait for it to be `sleep`.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut found = Vec::new();
        while std::time::Instant::now() < deadline {
            // Two names in one walk: each gets its own.
            let mut both = executables(&["sleep", "no-such-program-here"]);
            assert!(both[1].procs.is_empty());
            found = both.swap_remove(0).procs;
            if found.iter().any(|(p, _)| *p == child.id()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.iter().any(|(p, _)| *p == child.id()), "{found:?}");
        assert!(executables(&[&name])[0]
            .procs
            .iter()
            .all(|(p, _)| *p != std::process::id()));
    }
}
