//! Raising semaphores the kernel would count in the wrong place.
//!
//! lld's packed layout maps the file page holding a semaphore twice: once in a read-only
//! segment (RELRO) and once in the writable data segment that covers the semaphore's address.
//! When a process maps the object after the uprobe exists, the kernel raises the copy in the
//! first writable mapping it meets, the one the loader then makes read-only, and the real
//! semaphore stays 0; yet when the uprobe goes it lowers the real one (by then the RELRO copy
//! is read-only), which it never raised: "ref_ctr going negative", "ref_ctr decrement
//! failed", and the uprobe is leaked until reboot ("failed to unregister, leaking uprobe").
//!
//! So exactly one party counts each such semaphore, and it is not the kernel: their sites are
//! attached without a `ref_ctr_offset` ([`hand_over`]), and this module adds the traced sites'
//! count to the real u16 through `/proc/PID/mem` in every process that maps the object,
//! those running at attach included, and takes it back on detach. Writes go through [`mem`]:
//! under a lock every usdt-trace takes, each read back. While attached, every semaphore
//! raised is read again at each scan; one found under this tracer's own count (another writer
//! lowered it) is raised again, with a warning, counted. The reasoning is in ARCHITECTURE.md
//! ("Semaphores of lld's packed layout").
//!
//! Processes are found by scanning `/proc` at most every [`SCAN_EVERY`] while such objects
//! are traced (only the given PIDs with `-p`/`-c`). Every write goes to an address checked
//! against the process's mappings: a private writable mapping of the same file whose offset
//! maps it back to the semaphore's file offset.

mod layout;
mod mem;

use crate::plan::{AttachPoint, Plan};
use crate::target::procmaps::{parse_maps, MapEntry};
use crate::target::Object;
use mem::{Lock, LockError, Mem, MemError};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

/// How often `/proc` is scanned for new processes (and raised semaphores read again).
pub const SCAN_EVERY: Duration = Duration::from_millis(200);

/// Warning lines said as they happen, at most; the rest are counted for the end of the run.
const SAY_AT_MOST: u64 = 5;

/// One semaphore to raise: its link-time address, its file offset, by how much (one per
/// traced site that shares it, as the kernel counts), and a probe that uses it (for warnings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sema {
    pub vaddr: u64,
    pub offset: u64,
    pub count: u16,
    pub probe: String,
}

/// A traced object with semaphores on a shared page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Affected {
    /// Its index in the objects the plan was built from.
    pub object: usize,
    pub dev: (u32, u32),
    pub inode: u64,
    /// The object's lowest PT_LOAD address, page-aligned.
    pub first_load_page: u64,
    pub semas: Vec<Sema>,
    /// `provider:name` of the traced sites concerned, for the warning.
    pub probes: Vec<String>,
}

/// The objects (and semaphores) of the plan the kernel would count wrong, so that the
/// [`Raiser`] counts them: a semaphore on a page the RELRO segment also maps (the kernel raises
/// the wrong copy), or one of a probe on a page two segments map ([`layout`]: the kernel
/// takes back more than it counted). Each is counted as the kernel would have: one per traced
/// site that uses it.
pub fn affected(objects: &[Object], plan: &Plan) -> Vec<Affected> {
    plan.objects
        .iter()
        .filter_map(|op| affected_object(&objects[op.object], op.object, &op.points))
        .collect()
}

/// As [`affected`], for one object (`index`: its place among the plan's objects) and its
/// attach points.
pub fn affected_object(o: &Object, index: usize, points: &[AttachPoint]) -> Option<Affected> {
    if points.iter().all(|p| p.ref_ctr.is_none()) {
        return None;
    }
    let ranges = layout::load_ranges(&o.file);
    let mut counts: BTreeMap<u64, u16> = BTreeMap::new();
    let mut text_shared: BTreeSet<u64> = BTreeSet::new();
    for p in points {
        if let Some(off) = p.ref_ctr {
            let c = counts.entry(off).or_default();
            *c = c.saturating_add(1);
            if layout::page_mapped_twice(&ranges, p.offset) {
                text_shared.insert(off);
            }
        }
    }
    let mut semas: Vec<Sema> = Vec::new();
    let mut probes: Vec<String> = Vec::new();
    for s in &o.probes.sites {
        let Some(off) = s
            .semaphore_offset
            .filter(|off| s.semaphore_shared_page || text_shared.contains(off))
        else {
            continue;
        };
        let Some(&count) = counts.get(&off) else {
            continue;
        };
        let name = format!("{}:{}", s.provider, s.name);
        if !probes.contains(&name) {
            probes.push(name.clone());
        }
        if !semas.iter().any(|x| x.offset == off) {
            semas.push(Sema {
                vaddr: s.semaphore,
                offset: off,
                count,
                probe: name,
            });
        }
    }
    (!semas.is_empty()).then(|| Affected {
        object: index,
        dev: (libc::major(o.dev), libc::minor(o.dev)),
        inode: o.inode,
        first_load_page: o.probes.first_load_page,
        semas,
        probes,
    })
}

/// Takes the kernel out of counting the semaphores of `affected`: their attach points lose
/// their `ref_ctr_offset`, as the [`Raiser`] counts them. Both counting the same u16 is what
/// made the kernel find 0 where it expected its own raise, and leak the uprobe.
pub fn hand_over(plan: &mut Plan, affected: &[Affected]) {
    for op in &mut plan.objects {
        if let Some(a) = affected.iter().find(|a| a.object == op.object) {
            hand_over_points(&mut op.points, a);
        }
    }
}

/// As [`hand_over`], for the points of one object.
pub fn hand_over_points(points: &mut [AttachPoint], a: &Affected) {
    for p in points {
        if p.ref_ctr
            .is_some_and(|off| a.semas.iter().any(|s| s.offset == off))
        {
            p.ref_ctr = None;
        }
    }
}

/// Where each semaphore of `a` lives in a process with these mappings: `vaddr + bias`, the
/// bias being where the object's lowest mapping starts minus its lowest PT_LOAD page. Only
/// addresses inside a private writable mapping of the same file, at the semaphore's file
/// offset, are returned; none when the object is not (yet fully) mapped.
pub fn addresses<'a>(maps: &[MapEntry], a: &'a Affected) -> Vec<(u64, &'a Sema)> {
    let mine: Vec<&MapEntry> = maps
        .iter()
        .filter(|m| m.dev == a.dev && m.inode == a.inode && m.inode != 0)
        .collect();
    let Some(lowest) = mine.iter().map(|m| m.start).min() else {
        return Vec::new();
    };
    let bias = lowest.wrapping_sub(a.first_load_page);
    a.semas
        .iter()
        .filter_map(|s| {
            let addr = s.vaddr.wrapping_add(bias);
            let ok = mine.iter().any(|m| {
                let p = m.perms.as_bytes();
                p.get(1) == Some(&b'w')
                    && p.get(3) == Some(&b'p')
                    && addr >= m.start
                    && addr.checked_add(2).is_some_and(|end| end <= m.end)
                    && m.offset.checked_add(addr - m.start) == Some(s.offset)
            });
            ok.then_some((addr, s))
        })
        .collect()
}

/// The process's start time (field 22 of `/proc/PID/stat`): a PID and its start time name
/// one process, so a reused PID is never written as if it were the old one.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    // After the comm: state is field 3, start time field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn maps_of(pid: u32) -> Option<Vec<MapEntry>> {
    let text = std::fs::read(format!("/proc/{pid}/maps")).ok()?;
    parse_maps(&text).ok()
}

/// The warning line naming the probes of `affected`, if any.
fn warning_of(affected: &[Affected]) -> Option<String> {
    let probes: Vec<&str> = affected
        .iter()
        .flat_map(|a| a.probes.iter().map(String::as_str))
        .collect();
    (!probes.is_empty()).then(|| {
        format!(
            "warning: the semaphores of {} would be counted wrong by the kernel (lld's packed layout: their page, or their probes' page, is mapped by two segments), so usdt-trace raises them itself through /proc/PID/mem in every process that maps them (new processes are found every {} ms)",
            probes.join(", "),
            SCAN_EVERY.as_millis()
        )
    })
}

/// One semaphore this tracer raised in one process, by `n`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    /// The object's (device, inode).
    obj: ((u32, u32), u64),
    addr: u64,
    n: u16,
    probe: String,
}

/// What was raised in one process.
struct Raised {
    start: u64,
    at: Vec<Held>,
}

/// What went wrong with the semaphores during the run, for the end-of-run warning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Troubles {
    /// A semaphore this tracer holds read under its own count while attached: another writer
    /// lowered it, and the probes it guards did not fire until it was raised again.
    pub found_low: u64,
    /// A write read back as another value: a writer that does not take the lock.
    pub raced: u64,
    /// Writes that failed in a process still running.
    pub failed: u64,
}

/// Finds the processes that map affected objects and raises their semaphores.
pub struct Raiser {
    affected: Vec<Affected>,
    /// Only these processes (`-p`, `-c`), else every process.
    pids: Vec<u32>,
    raised: HashMap<u32, Raised>,
    last: Option<Instant>,
    /// Opened at the first write. Without it (an error, said once) writes go on unlocked:
    /// a tracer that did not raise would miss every hit.
    lock: Option<Result<Lock, LockError>>,
    troubles: Troubles,
    said: u64,
    unlocked_said: bool,
    /// Processes (PID, start time) whose memory could not be opened.
    denied: HashSet<(u32, u64)>,
}

impl Raiser {
    pub fn new(affected: Vec<Affected>, pids: &[u32]) -> Raiser {
        Raiser {
            affected,
            pids: pids.to_vec(),
            raised: HashMap::new(),
            last: None,
            lock: None,
            troubles: Troubles::default(),
            said: 0,
            unlocked_said: false,
            denied: HashSet::new(),
        }
    }

    /// The one warning line naming the affected probes, if any.
    pub fn warning(&self) -> Option<String> {
        warning_of(&self.affected)
    }

    /// Counts the semaphores of an object attached during the run (mapped late for process
    /// `pid`, or a new file at a followed path) as those of the start, from now on: said,
    /// and raised at once in the processes that map it. An object already counted (mapped
    /// late by a second process) is not counted twice; its process joins those scanned when
    /// the run has a list of them. (A path-wide run raises it in every process that maps it,
    /// also where only some processes are traced: the argument code then runs for nothing.)
    pub fn adopt(&mut self, a: Affected, pid: Option<u32>) {
        if let Some(pid) = pid {
            if !self.pids.is_empty() && !self.pids.contains(&pid) {
                self.pids.push(pid);
            }
        }
        if !self
            .affected
            .iter()
            .any(|x| (x.dev, x.inode) == (a.dev, a.inode))
        {
            if let Some(w) = warning_of(std::slice::from_ref(&a)) {
                crate::util::terminal::say(&crate::util::terminal::clean(&w));
            }
            self.affected.push(a);
        }
        self.poll_now();
    }

    /// The end-of-run warning, when something went wrong.
    pub fn end_warning(&self) -> Option<String> {
        let t = self.troubles;
        let mut what = Vec::new();
        if t.found_low > 0 {
            what.push(format!(
                "{} times one read under this tracer's own count while attached (another writer lowered it; raised again, hits in between were missed)",
                t.found_low
            ));
        }
        if t.raced > 0 {
            what.push(format!(
                "{} writes read back changed (another writer at the same moment)",
                t.raced
            ));
        }
        if t.failed > 0 {
            what.push(format!("{} writes failed", t.failed));
        }
        (!what.is_empty()).then(|| {
            format!(
                "warning: semaphores raised through /proc/PID/mem: {}",
                what.join("; ")
            )
        })
    }

    fn say(&mut self, line: &str) {
        self.said += 1;
        if self.said <= SAY_AT_MOST {
            crate::util::terminal::say(&crate::util::terminal::clean(line));
        }
    }

    fn candidates(&self) -> Vec<u32> {
        if !self.pids.is_empty() {
            return self.pids.clone();
        }
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect()
    }

    /// Runs `f` holding the lock every usdt-trace takes around its writes, or without it
    /// when it cannot be had (said once).
    fn locked<R>(&mut self, f: impl FnOnce(&mut Raiser) -> R) -> R {
        let lock = self.lock.take().unwrap_or_else(Lock::open);
        let held = match &lock {
            Ok(l) => l.hold().map(Some),
            Err(_) => Ok(None),
        };
        match (&lock, &held) {
            (Err(e), _) if !self.unlocked_said => {
                self.unlocked_said = true;
                let line = format!("warning: semaphores: {e}: raised and lowered without the lock, so a change another usdt-trace makes at the same moment may be lost");
                self.say(&line);
            }
            (_, Err(e)) => {
                let line = format!("warning: semaphores: {e}: written without the lock this time");
                self.say(&line);
            }
            _ => {}
        }
        let out = f(self);
        drop(held);
        self.lock = Some(lock);
        out
    }

    /// One write's result counted; true when the semaphore now holds this tracer's raise
    /// (a race is counted but the raise kept: the next scan's check sees what it came to).
    fn note(&mut self, r: Result<u16, MemError>, pid: u32, probe: &str) -> Option<u16> {
        match r {
            Ok(v) => Some(v),
            Err(e @ MemError::Raced { .. }) => {
                self.troubles.raced += 1;
                self.say(&format!("warning: semaphore of {probe}: {e}"));
                Some(0)
            }
            Err(e) => {
                // A process that exited meanwhile is no trouble.
                if start_time(pid).is_some() {
                    self.troubles.failed += 1;
                    self.say(&format!("warning: semaphore of {probe}: {e}"));
                }
                None
            }
        }
    }

    /// Raises the semaphores in processes that started mapping an affected object since the
    /// last scan, and raises again those found lowered; does nothing if the last scan was
    /// under [`SCAN_EVERY`] ago.
    pub fn poll(&mut self) {
        if self.last.is_some_and(|t| t.elapsed() < SCAN_EVERY) {
            return;
        }
        self.poll_now();
    }

    /// Whether it has semaphores to raise at all.
    pub fn has_work(&self) -> bool {
        !self.affected.is_empty()
    }

    /// As [`Raiser::poll`], at once: right after attach, so that processes running then are
    /// raised before `watch` says it is attached.
    pub fn poll_now(&mut self) {
        if self.affected.is_empty() {
            return;
        }
        self.last = Some(Instant::now());
        let me = std::process::id();
        for pid in self.candidates() {
            if pid != me {
                self.scan(pid);
            }
        }
        // Forget processes that exited, so the map stays as small as what runs.
        self.raised
            .retain(|&pid, r| !r.at.is_empty() && start_time(pid) == Some(r.start));
        self.denied
            .retain(|&(pid, start)| start_time(pid) == Some(start));
    }

    fn scan(&mut self, pid: u32) {
        let Some(start) = start_time(pid) else {
            return;
        };
        let Some(maps) = maps_of(pid) else { return };
        let now: Vec<Held> = self
            .affected
            .iter()
            .flat_map(|a| {
                addresses(&maps, a).into_iter().map(|(addr, s)| Held {
                    obj: (a.dev, a.inode),
                    addr,
                    n: s.count,
                    probe: s.probe.clone(),
                })
            })
            .collect();
        let r = self.raised.entry(pid).or_insert(Raised {
            start,
            at: Vec::new(),
        });
        // A reused PID: the old process is gone with its semaphores.
        if r.start != start {
            *r = Raised {
                start,
                at: Vec::new(),
            };
        }
        // An object no longer mapped at all (unloaded, or the process exec'd another
        // image) has nothing left to lower. One still mapped is kept even if a scan caught
        // its mappings mid-change: raising it again would count this tracer twice.
        r.at.retain(|h| {
            maps.iter()
                .any(|m| (m.dev, m.inode) == h.obj && m.inode != 0)
        });
        let new: Vec<Held> = now
            .iter()
            .filter(|h| !r.at.iter().any(|x| x.addr == h.addr))
            .cloned()
            .collect();
        let held: Vec<Held> = r.at.clone();
        if new.is_empty() && held.is_empty() {
            return;
        }
        // A process whose memory cannot be opened (another user's, without CAP_SYS_PTRACE)
        // is said and counted once, not at every scan.
        if self.denied.contains(&(pid, start)) {
            return;
        }
        let mem = match Mem::open(pid) {
            Ok(m) => m,
            Err(e) => {
                let probe = new
                    .first()
                    .map_or("the traced probes", |h| h.probe.as_str());
                let probe = probe.to_string();
                if self.note(Err(e), pid, &probe).is_none() {
                    self.denied.insert((pid, start));
                }
                return;
            }
        };
        // Raised before and still ours: read again (no lock for a read); one under this
        // tracer's own count was lowered by another writer.
        let low: Vec<Held> = held
            .into_iter()
            .filter(|h| mem.read(h.addr).is_ok_and(|v| v < h.n))
            .collect();
        if new.is_empty() && low.is_empty() {
            return;
        }
        let done: Vec<Held> = self.locked(|me| {
            let mut done = Vec::new();
            for h in &new {
                if me.note(mem.add(h.addr, h.n), pid, &h.probe).is_some() {
                    done.push(h.clone());
                }
            }
            for h in &low {
                let r = mem.at_least(h.addr, h.n);
                if let Some(v) = me.note(r, pid, &h.probe) {
                    if v < h.n {
                        me.troubles.found_low += 1;
                        me.say(&format!(
                            "warning: the semaphore of {} in process {pid} read {v} while this tracer holds {} of it: another writer lowered it, so its probes did not fire; raised again",
                            h.probe, h.n
                        ));
                    }
                }
            }
            done
        });
        if let Some(r) = self.raised.get_mut(&pid) {
            r.at.extend(done);
        }
    }

    /// Stops raising and lowering the semaphores of the object (device, inode): its content
    /// changed, so the addresses worked out from the old content may now hold anything.
    /// What was raised there is left as it is (writing it back could corrupt the new content).
    pub fn forget(&mut self, dev: (u32, u32), inode: u64) {
        self.affected.retain(|a| (a.dev, a.inode) != (dev, inode));
        for r in self.raised.values_mut() {
            r.at.retain(|h| h.obj != (dev, inode));
        }
    }

    /// Takes back what was raised, in processes still alive and still mapping the object at
    /// the same place, never below 0. Call after the uprobes are detached, so no hit comes
    /// between: the kernel has no count of its own in these semaphores.
    pub fn lower_all(&mut self) {
        let raised: Vec<(u32, Raised)> = self.raised.drain().collect();
        if raised.is_empty() {
            return;
        }
        self.locked(|me| {
            for (pid, r) in raised {
                if start_time(pid) != Some(r.start) {
                    continue;
                }
                let Some(maps) = maps_of(pid) else { continue };
                let Ok(mem) = Mem::open(pid) else { continue };
                for h in r.at {
                    let still = me
                        .affected
                        .iter()
                        .filter(|a| (a.dev, a.inode) == h.obj)
                        .any(|a| addresses(&maps, a).iter().any(|(addr, _)| *addr == h.addr));
                    if still {
                        let _ = me.note(mem.sub(h.addr, h.n), pid, &h.probe);
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entry(start: u64, end: u64, perms: &str, offset: u64, inode: u64) -> MapEntry {
        MapEntry {
            start,
            end,
            perms: perms.into(),
            offset,
            dev: (8, 1),
            inode,
            path: Some("/bin/app".into()),
            deleted: false,
        }
    }

    fn addrs(maps: &[MapEntry], a: &Affected) -> Vec<(u64, u16)> {
        addresses(maps, a)
            .into_iter()
            .map(|(addr, s)| (addr, s.count))
            .collect()
    }

    fn app() -> Affected {
        // A PIE: lowest PT_LOAD at 0; RELRO at 0x3000 (file 0x2000), data at 0x4010 (file
        // 0x3010) with the semaphore at 0x4020, file 0x3020: file page 0x3000 is mapped twice.
        Affected {
            object: 0,
            dev: (8, 1),
            inode: 42,
            first_load_page: 0,
            semas: vec![Sema {
                vaddr: 0x4020,
                offset: 0x3020,
                count: 2,
                probe: "app:a".into(),
            }],
            probes: vec!["app:a".into()],
        }
    }

    #[test]
    fn address_is_checked_against_a_writable_mapping_of_the_file() {
        let base = 0x5555_0000_0000;
        let maps = vec![
            entry(base, base + 0x1000, "r--p", 0, 42),
            entry(base + 0x1000, base + 0x2000, "r-xp", 0x1000, 42),
            // The RELRO copy of file page 0x3000 (at vaddr 0x3000), read-only by now.
            entry(base + 0x3000, base + 0x4000, "r--p", 0x2000, 42),
            entry(base + 0x4000, base + 0x5000, "rw-p", 0x3000, 42),
        ];
        assert_eq!(addrs(&maps, &app()), [(base + 0x4020, 2)]);
        // Not mapped yet, another file, or the data page not writable: nothing to write.
        assert!(addresses(&maps[..2], &app()).is_empty());
        let other: Vec<MapEntry> = maps
            .iter()
            .map(|m| MapEntry {
                inode: 7,
                ..m.clone()
            })
            .collect();
        assert!(addresses(&other, &app()).is_empty());
        let mut ro = maps.clone();
        ro[3].perms = "r--p".into();
        assert!(addresses(&ro, &app()).is_empty());
        // A shared mapping is never written.
        let mut shared = maps.clone();
        shared[3].perms = "rw-s".into();
        assert!(addresses(&shared, &app()).is_empty());
        // A mapping whose offset does not lead back to the semaphore's file offset.
        let mut moved = maps;
        moved[3].offset = 0x4000;
        assert!(addresses(&moved, &app()).is_empty());
    }

    #[test]
    fn non_pie_has_no_bias() {
        let mut a = app();
        a.first_load_page = 0x400000;
        a.semas[0].vaddr = 0x404020;
        let maps = vec![
            entry(0x400000, 0x401000, "r--p", 0, 42),
            entry(0x404000, 0x405000, "rw-p", 0x3000, 42),
        ];
        assert_eq!(addrs(&maps, &a), [(0x404020, 2)]);
    }
}
