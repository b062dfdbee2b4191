//! Keeping up with what the named files and processes stand for while a run goes on: a
//! deploy that replaces a traced binary (a new file renamed over the path: a new inode), a
//! process of a `--process` name running a file not traced yet.
//!
//! Uprobes belong to an inode. When a path traced by `watch TARGET` (no `-p`) or a `serve`
//! definition comes to name another file, the processes started from then on run the new
//! file, and none of them would be traced. [`Follow::poll`] looks at every named path (a
//! `stat`) and, for `--process` names, at the running processes' executables, once every
//! [`CHECK`]; each file it has not attached yet is opened, planned alone with the run's
//! rules and merged into the running plan ([`crate::watch::late::attach_new`]: span names shared by
//! name, so the same histograms and metric series go on), and attached for every process
//! running it. The old file's attachment stays for the processes still running it. Once the
//! old file is gone from the file system *and* no process maps it any more, nothing can run
//! it again: its probes are detached and its descriptor closed, so a deleted binary is not
//! kept on disk by the tracer (checked every [`REAP`]).
//!
//! A deploy starts the new build at once, and a poll every second lost its first 0.3-0.6 s of
//! spans. So the kernel watches execs too ([`Tracer::hold_execs`]): a process of a followed
//! name that starts a file not seen yet is stopped before its first instruction and reported;
//! the next [`Follow::poll`] looks at once, attaches the new file, and lets the process go
//! (SIGCONT), a few milliseconds after its exec. Where the hook cannot run, polling alone
//! finds new files, as before, and the run says so once.
//!
//! Each file is opened as [`crate::target`] opens any (a regular file, parsed through the
//! descriptor; a process's executable through its own mapping, checked by device and
//! inode), so a path swapped between the `stat` and the open is traced as what was opened.

use crate::plan::Plan;
use crate::target::{self, Object};
use crate::tracer::Tracer;
use crate::util::terminal::{clean, say};
use crate::watch::changes::ChangeWatch;
use crate::watch::late::{attach_new, key_of, running, Joining, Rules};
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use usdt_trace_common::{ExecRecord, FileKey};

/// How often the named paths and process names are looked at again.
pub const CHECK: Duration = Duration::from_secs(1);
/// How often files deleted since they were attached are checked for processes still running
/// them (a walk of every process's maps, so less often).
pub const REAP: Duration = Duration::from_secs(5);

type Key = ((u32, u32), u64);

/// The run's objects (those of the start and those attached since), and what to look at
/// again.
pub struct Follow {
    /// Named paths to `stat` again (TARGETs without `-p`), with the file each named last.
    paths: Vec<(PathBuf, Option<Key>)>,
    /// `--process` names.
    names: Vec<String>,
    /// The `fn:` patterns and how their ends are traced: a new build gets its function
    /// sites as the start's objects did.
    fn_patterns: Vec<crate::util::pattern::Pattern>,
    fn_place: crate::elf::FnPlacement,
    /// Every object attached, kept open: the uprobes were attached through their descriptors.
    objects: Vec<Object>,
    /// Their (device, inode), and those seen that had nothing to trace.
    known: HashSet<Key>,
    /// Objects attached here, watched for writes in place (the start's are watched by the
    /// run's own [`ChangeWatch`]).
    changes: ChangeWatch,
    last_check: Instant,
    last_reap: Instant,
    /// The kernel holds the execs of new files ([`Follow::start_hold`]).
    holding: bool,
    /// Processes held at their exec and let go, and the longest hold, in ns.
    pub held: u64,
    pub held_max_ns: u64,
}

fn stat_key(path: &std::path::Path) -> Option<Key> {
    let m = std::fs::metadata(path).ok()?;
    m.is_file()
        .then(|| ((libc::major(m.dev()), libc::minor(m.dev())), m.ino()))
}

/// The file behind `o`'s descriptor has no name left in any directory.
fn unlinked(o: &Object) -> bool {
    o.file.metadata().is_ok_and(|m| m.nlink() == 0)
}

impl Follow {
    /// What `cfg` names to follow (its TARGETs when not narrowed by -p or -c, its
    /// `--process` names); `objects`: what the run attached at start.
    pub fn new(cfg: &crate::watch::WatchConfig, objects: Vec<Object>) -> Follow {
        let paths = cfg.follow_paths();
        let names = &cfg.processes;
        Follow {
            fn_patterns: crate::plan::functions::fn_patterns(&cfg.patterns)
                .into_iter()
                .cloned()
                .collect(),
            fn_place: cfg.fn_placement(),
            // None: each path is compared with the start's files at the first look.
            paths: paths.iter().map(|p| (p.clone(), None)).collect(),
            names: names.to_vec(),
            known: objects.iter().map(key_of).collect(),
            objects,
            changes: ChangeWatch::new(),
            last_check: Instant::now(),
            last_reap: Instant::now(),
            holding: false,
            held: 0,
            held_max_ns: 0,
        }
    }

    /// Has the kernel hold every process of a followed name that starts a file not seen yet,
    /// until [`Follow::poll`] has attached it. Says once, and goes on polling alone, where
    /// that cannot be done.
    pub fn start_hold(&mut self, tracer: &mut Tracer) {
        let mut names: Vec<String> = self
            .paths
            .iter()
            .filter_map(|(p, _)| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        names.extend(self.names.iter().cloned());
        if names.is_empty() {
            return;
        }
        let known: Vec<FileKey> = self
            .known
            .iter()
            .map(|&((maj, min), ino)| FileKey::new(maj, min, ino))
            .collect();
        match tracer.hold_execs(&names, &known) {
            Ok(()) => self.holding = true,
            Err(e) => say(&format!(
                "warning: new builds of the followed files are found by a look every {} s, not at their exec (their first spans may be lost): {}",
                CHECK.as_secs(),
                clean(&e.to_string())
            )),
        }
    }

    /// The run's objects: those of the start, and those attached since.
    pub fn objects(&self) -> &[Object] {
        &self.objects
    }

    /// Descriptors readable when an object attached here is written in place.
    pub fn wake_fds(&self) -> Vec<i32> {
        self.changes.wake_fd().into_iter().collect()
    }

    /// Attaches the files the paths and names stand for now and that are not attached yet;
    /// detaches the ones no process can run any more. Problems are warnings, as for objects
    /// mapped late. Err when a new file cannot join the plan for want of room (the tracer
    /// reserved room at load): a daemon then starts its definition again. `watched` watches
    /// the start's objects for writes: a file detached here is taken out of it first.
    pub fn poll(
        &mut self,
        plan: &mut Plan,
        tracer: &mut Tracer,
        rules: &Rules,
        watched: &mut ChangeWatch,
        raiser: &mut crate::watch::semaphores::Raiser,
    ) -> Result<(), String> {
        crate::watch::stop_changed(&self.changes.take_changed(), tracer, Some(&mut *raiser));
        if self.paths.is_empty() && self.names.is_empty() {
            return Ok(());
        }
        let mut result = Ok(());
        // Processes the kernel stopped at their exec: look now, not at the next tick.
        let execs = if self.holding {
            tracer.take_execs()
        } else {
            Vec::new()
        };
        if self.last_check.elapsed() >= CHECK || !execs.is_empty() {
            self.last_check = Instant::now();
            let found = self.new_files();
            for (o, _) in &found {
                let ((maj, min), ino) = key_of(o);
                tracer.know_file(FileKey::new(maj, min, ino));
            }
            for (mut o, what) in found {
                let pats: Vec<&crate::util::pattern::Pattern> = self.fn_patterns.iter().collect();
                if let Err(e) =
                    crate::plan::functions::add_function_sites(&mut o, &pats, self.fn_place)
                {
                    say(&format!(
                        "warning: {}: not traced: {}",
                        clean(&what),
                        clean(&e.to_string())
                    ));
                    continue;
                }
                let ctx = Joining {
                    tracer,
                    rules,
                    changes: &mut self.changes,
                    raiser,
                };
                match attach_new(&o, None, &what, plan, ctx) {
                    Ok(Some(line)) => {
                        say(&line);
                        self.objects.push(o);
                    }
                    Ok(None) => say(&format!(
                        "warning: {}: nothing in it matches the patterns: not traced",
                        clean(&what)
                    )),
                    Err(e) => {
                        say(&format!("warning: {}: not traced", clean(&e.msg)));
                        if e.no_room {
                            result = Err(e.msg);
                        }
                    }
                }
            }
        }
        self.release(tracer, &execs);
        if self.last_reap.elapsed() >= REAP {
            self.last_reap = Instant::now();
            self.reap(tracer, watched);
        }
        result
    }

    /// Stops holding execs and lets go every process held since the last look: before the
    /// run ends, so that none stays stopped.
    pub fn stop_holding(&mut self, tracer: &mut Tracer) {
        if self.holding {
            self.holding = false;
            let execs = tracer.stop_holding();
            self.release(tracer, &execs);
        }
    }

    /// Lets the processes held at their exec go, their files attached (or found with
    /// nothing to trace, or not followed at all: a file of a followed name elsewhere).
    fn release(&mut self, tracer: &mut Tracer, execs: &[ExecRecord]) {
        for e in execs {
            tracer.know_file(e.file);
            if e.stopped == 0 {
                continue;
            }
            // SAFETY: kill has no memory preconditions; a pid that exited meanwhile (or was
            // reused: SIGCONT to a running process does nothing) is harmless.
            unsafe { libc::kill(e.pid as libc::pid_t, libc::SIGCONT) };
            let held = crate::util::clock::monotonic_ns().saturating_sub(e.ts_ns);
            self.held += 1;
            self.held_max_ns = self.held_max_ns.max(held);
            say(&format!(
                "Held pid {} at its exec of {} for {} while its probes were attached",
                e.pid,
                clean(&String::from_utf8_lossy(
                    &e.comm[..e.comm.iter().position(|&b| b == 0).unwrap_or(16)]
                )),
                crate::output::fmt_duration(held)
            ));
        }
    }

    /// The files the paths and names stand for that were not seen before, opened.
    fn new_files(&mut self) -> Vec<(Object, String)> {
        let mut found = Vec::new();
        for (path, last) in &mut self.paths {
            let now = stat_key(path);
            if now == *last {
                continue;
            }
            *last = now;
            let Some(key) = now else { continue };
            if self.known.contains(&key) {
                continue;
            }
            let shown = path.display().to_string();
            match target::open(&shown, path) {
                Ok(o) => {
                    self.known.insert(key_of(&o));
                    found.push((o, format!("{shown} (a new file at that path)")));
                }
                // Half-written, or gone again: looked at the next time its identity changes.
                Err(e) => say(&format!(
                    "warning: {}: not traced: {}",
                    clean(&shown),
                    clean(&e.to_string())
                )),
            }
        }
        // One walk of /proc for every name.
        let per_name = crate::target::procnames::executables(&self.names);
        for (name, found_named) in self.names.iter().zip(per_name) {
            for (pid, m) in found_named.procs {
                if self.known.contains(&(m.dev, m.inode)) {
                    continue;
                }
                let shown = m.shown();
                // One that exited or is mid-exec is found again at the next look if it runs on.
                if let Ok(o) = target::open_mapped(pid, &m, &shown) {
                    self.known.insert(key_of(&o));
                    let what = format!("{shown} (process {name}, pid {pid})");
                    found.push((o, what));
                }
            }
        }
        found
    }

    /// Detaches and closes the objects deleted from the file system that no process maps.
    fn reap(&mut self, tracer: &mut Tracer, watched: &mut ChangeWatch) {
        let gone: Vec<Key> = self
            .objects
            .iter()
            .filter(|o| unlinked(o))
            .map(key_of)
            .collect();
        if gone.is_empty() {
            return;
        }
        let still: HashSet<Key> = running(&gone)
            .into_iter()
            .filter_map(|pid| crate::target::procmaps::mapped_objects(pid).ok())
            .flatten()
            .map(|m| (m.dev, m.inode))
            .collect();
        let mut kept = Vec::new();
        for o in std::mem::take(&mut self.objects) {
            let key = key_of(&o);
            if !gone.contains(&key) || still.contains(&key) {
                kept.push(o);
                continue;
            }
            // Before its descriptor closes and its number is reused.
            watched.forget(key.0, key.1);
            self.changes.forget(key.0, key.1);
            let sites = match tracer.detach_object(&o.fd_path().to_string_lossy()) {
                crate::tracer::Detach::Done(n)
                | crate::tracer::Detach::Background { sites: n, .. } => n,
            };
            // Its inode is free once `o` is closed below, and the file system may give it to
            // the next file written (ext4 does at once: a deploy's next build, written beside
            // the path and renamed over it). Still "known", that build would never be traced.
            self.known.remove(&key);
            tracer.forget_file(FileKey::new(key.0 .0, key.0 .1, key.1));
            say(&format!(
                "Detached {sites} probe site{} in {} (deleted or replaced, and no process runs it any more)",
                if sites == 1 { "" } else { "s" },
                clean(&o.shown)
            ));
        }
        self.objects = kept;
    }
}
