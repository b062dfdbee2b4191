//! Raising semaphores the kernel raises in the wrong place.
//!
//! lld's packed layout maps the file page holding a semaphore twice: once in a read-only
//! segment (RELRO) and once in the writable data segment that covers the semaphore's address.
//! When a process maps the object after the uprobe exists, the kernel raises the copy in the
//! first writable mapping it meets, the one the loader then makes read-only, and the real
//! semaphore stays 0: the program never fires the probe. Processes already running at attach
//! are fine (by then the RELRO mapping is read-only, so the kernel finds the real one).
//!
//! So for every process that starts mapping such an object after attach, this module adds the
//! traced sites' count to the real u16 through `/proc/PID/mem`, and takes it back on detach.
//! New processes are found by scanning `/proc` at most every [`SCAN_EVERY`] while such objects
//! are traced (only the given PIDs with `-p`/`-c`). Every write goes to an address checked
//! against the process's mappings: a private writable mapping of the same file whose offset
//! maps it back to the semaphore's file offset.

use crate::plan::Plan;
use crate::procmaps::{parse_maps, MapEntry};
use crate::target::Object;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// How often `/proc` is scanned for new processes.
pub const SCAN_EVERY: Duration = Duration::from_millis(200);

/// One semaphore to raise: its link-time address, its file offset, and by how much (one per
/// traced site that shares it, as the kernel counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sema {
    pub vaddr: u64,
    pub offset: u64,
    pub count: u16,
}

/// A traced object with semaphores on a shared page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Affected {
    pub dev: (u32, u32),
    pub inode: u64,
    /// The object's lowest PT_LOAD address, page-aligned.
    pub first_load_page: u64,
    pub semas: Vec<Sema>,
    /// `provider:name` of the traced sites concerned, for the warning.
    pub probes: Vec<String>,
}

/// The objects (and semaphores) of the plan that need raising by hand.
pub fn affected(objects: &[Object], plan: &Plan) -> Vec<Affected> {
    let mut out = Vec::new();
    for op in &plan.objects {
        let o = &objects[op.object];
        let mut counts: BTreeMap<u64, u16> = BTreeMap::new();
        for p in &op.points {
            if let Some(off) = p.ref_ctr {
                let c = counts.entry(off).or_default();
                *c = c.saturating_add(1);
            }
        }
        let mut semas: Vec<Sema> = Vec::new();
        let mut probes: Vec<String> = Vec::new();
        for s in &o.probes.sites {
            let Some(off) = s.semaphore_offset.filter(|_| s.semaphore_shared_page) else {
                continue;
            };
            let Some(&count) = counts.get(&off) else {
                continue;
            };
            let name = format!("{}:{}", s.provider, s.name);
            if !probes.contains(&name) {
                probes.push(name);
            }
            if !semas.iter().any(|x| x.offset == off) {
                semas.push(Sema {
                    vaddr: s.semaphore,
                    offset: off,
                    count,
                });
            }
        }
        if !semas.is_empty() {
            out.push(Affected {
                dev: (libc::major(o.dev), libc::minor(o.dev)),
                inode: o.inode,
                first_load_page: o.probes.first_load_page,
                semas,
                probes,
            });
        }
    }
    out
}

/// Where each semaphore of `a` lives in a process with these mappings: `vaddr + bias`, the
/// bias being where the object's lowest mapping starts minus its lowest PT_LOAD page. Only
/// addresses inside a private writable mapping of the same file, at the semaphore's file
/// offset, are returned; none when the object is not (yet fully) mapped.
pub fn addresses(maps: &[MapEntry], a: &Affected) -> Vec<(u64, u16)> {
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
            ok.then_some((addr, s.count))
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

/// Adds `delta` to the u16 at `addr` of `pid`, never below 0 nor above u16::MAX. Returns
/// whether it was written.
fn adjust(pid: u32, addr: u64, delta: i32) -> bool {
    let Ok(mem) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
    else {
        return false;
    };
    let mut b = [0u8; 2];
    if mem.read_exact_at(&mut b, addr).is_err() {
        return false;
    }
    let v = i32::from(u16::from_ne_bytes(b));
    let new = (v + delta).clamp(0, i32::from(u16::MAX)) as u16;
    new == v as u16 || mem.write_all_at(&new.to_ne_bytes(), addr).is_ok()
}

/// What was raised in one process.
struct Raised {
    start: u64,
    at: Vec<(u64, u16)>,
}

/// Finds the processes that start mapping affected objects and raises their semaphores.
pub struct Raiser {
    affected: Vec<Affected>,
    /// Only these processes (`-p`, `-c`), else every process.
    pids: Vec<u32>,
    /// Semaphores that processes had mapped before attach: the kernel counts those. Keyed by
    /// PID and start time; a library such a process loads later is raised like in a new one.
    before: HashMap<(u32, u64), Vec<(u64, u16)>>,
    raised: HashMap<u32, Raised>,
    last: Option<Instant>,
}

impl Raiser {
    /// Call before attaching: remembers which processes already map the objects.
    pub fn new(affected: Vec<Affected>, pids: &[u32]) -> Raiser {
        let mut r = Raiser {
            affected,
            pids: pids.to_vec(),
            before: HashMap::new(),
            raised: HashMap::new(),
            last: None,
        };
        // Nothing to scan for in the usual case: no process is read at all.
        let pids = if r.affected.is_empty() {
            Vec::new()
        } else {
            r.candidates()
        };
        for pid in pids {
            let (Some(start), Some(maps)) = (start_time(pid), maps_of(pid)) else {
                continue;
            };
            let at: Vec<(u64, u16)> = r
                .affected
                .iter()
                .flat_map(|a| addresses(&maps, a))
                .collect();
            if !at.is_empty() {
                r.before.insert((pid, start), at);
            }
        }
        r
    }

    /// The one warning line naming the affected probes, if any.
    pub fn warning(&self) -> Option<String> {
        let probes: Vec<&str> = self
            .affected
            .iter()
            .flat_map(|a| a.probes.iter().map(String::as_str))
            .collect();
        (!probes.is_empty()).then(|| {
            format!(
                "warning: the semaphores of {} share a file page with a read-only segment (lld's packed layout): the kernel raises the wrong copy in processes started after attach, so usdt-trace raises them itself through /proc/PID/mem (new processes are found every {} ms)",
                probes.join(", "),
                SCAN_EVERY.as_millis()
            )
        })
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

    /// Raises the semaphores in processes that started mapping an affected object since the
    /// last scan; does nothing if the last scan was under [`SCAN_EVERY`] ago.
    pub fn poll(&mut self) {
        if self.affected.is_empty() || self.last.is_some_and(|t| t.elapsed() < SCAN_EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        let me = std::process::id();
        for pid in self.candidates() {
            if pid == me {
                continue;
            }
            let Some(start) = start_time(pid) else {
                continue;
            };
            let Some(maps) = maps_of(pid) else { continue };
            let kernels = self.before.get(&(pid, start));
            let now: Vec<(u64, u16)> = self
                .affected
                .iter()
                .flat_map(|a| addresses(&maps, a))
                .filter(|x| !kernels.is_some_and(|k| k.contains(x)))
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
            // A mapping gone (the library unloaded, the process exec'd another image) has
            // nothing left to lower; a new one (a library loaded later) is raised now.
            r.at.retain(|x| now.contains(x));
            for (addr, n) in now {
                if !r.at.contains(&(addr, n)) && adjust(pid, addr, i32::from(n)) {
                    r.at.push((addr, n));
                }
            }
        }
        // Forget processes that exited, so the map stays as small as what runs.
        self.raised
            .retain(|&pid, r| !r.at.is_empty() && start_time(pid) == Some(r.start));
    }

    /// Stops raising and lowering the semaphores of the object (device, inode): its content
    /// changed, so the addresses worked out from the old content may now hold anything.
    /// What was raised there is left as it is (writing it back could corrupt the new content).
    pub fn forget(&mut self, dev: (u32, u32), inode: u64) {
        self.affected.retain(|a| (a.dev, a.inode) != (dev, inode));
    }

    /// Takes back what was raised, in processes still alive and still mapping the object at
    /// the same place.
    pub fn lower_all(&mut self) {
        for (pid, r) in self.raised.drain() {
            if start_time(pid) != Some(r.start) {
                continue;
            }
            let Some(maps) = maps_of(pid) else { continue };
            let now: Vec<(u64, u16)> = self
                .affected
                .iter()
                .flat_map(|a| addresses(&maps, a))
                .collect();
            for (addr, n) in r.at {
                if now.contains(&(addr, n)) {
                    adjust(pid, addr, -i32::from(n));
                }
            }
        }
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

    fn app() -> Affected {
        // A PIE: lowest PT_LOAD at 0; RELRO at 0x3000 (file 0x2000), data at 0x4010 (file
        // 0x3010) with the semaphore at 0x4020, file 0x3020: file page 0x3000 is mapped twice.
        Affected {
            dev: (8, 1),
            inode: 42,
            first_load_page: 0,
            semas: vec![Sema {
                vaddr: 0x4020,
                offset: 0x3020,
                count: 2,
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
        assert_eq!(addresses(&maps, &app()), [(base + 0x4020, 2)]);
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
        assert_eq!(addresses(&maps, &a), [(0x404020, 2)]);
    }
}
