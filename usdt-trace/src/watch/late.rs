//! Probes that traced processes define or load after `watch` started: a memfd object made by
//! `usdt-markers-dyn` (libstapsdt's kind), or a library `dlopen`ed later.
//!
//! With `-p`, `-c` or a TARGET alone ([`Scope`]), `watch` keeps a [`Late`] beside its loop.
//! When the kernel reports that a followed process mapped code ([`MmapWatch`]), that
//! process's maps are read again; each object
//! not seen before is opened (a memfd through `/proc/PID/map_files`), planned alone with the
//! user's patterns and rules, merged into the running plan ([`merge`]: new cookies after the
//! last, span names shared by name), its specs written into the room the tracer reserved at
//! load, and attached for that process. The kernel raises the semaphores as it attaches, as
//! for any site, except those it would count wrong, which the run's [`crate::watch::semaphores`]
//! raiser counts (as at the start). A line on stderr says what was added.
//!
//! Without the right to open system-wide perf events the maps are polled instead, once every
//! [`SLOW_POLL`]: probes defined later are then seen within that time.

use crate::elf::{ElfError, Limits, ObjectProbes};
use crate::plan::filter::Filter;
use crate::plan::spans::StrRule;
use crate::plan::{self, AttachPoint, Plan, PlanError, PlanOptions};
use crate::target::{self, Object, TargetError};
use crate::tracer::mmapwatch::MmapWatch;
use crate::tracer::Tracer;
use crate::util::terminal::clean;
use crate::watch::changes::ChangeWatch;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use usdt_trace_common::SiteRole;

/// How often the maps are read when the kernel cannot tell us about new mappings.
pub const SLOW_POLL: Duration = Duration::from_secs(1);
/// Sites and span names the tracer reserves at load for probes added later.
pub const SPARE_SITES: u32 = 1024;
pub const SPARE_PAIRS: u32 = 32;
/// Time [`Late::poll`] spends opening new objects per call: past it, the rest waits for the
/// next call, so that a process mapping object after object cannot keep the loop (and SIGINT)
/// waiting. Each object's own cost is bounded by [`crate::elf::Limits::LATE`].
const POLL_BUDGET: Duration = Duration::from_millis(200);
/// A mapping can change under us while the loader builds it (`map_files` of a range that was
/// just split): a process whose object did not open is read again this many times.
const RETRIES: u32 = 20;

/// Why a late object's sites could not join the plan.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MergeError {
    #[error("no room for more span names ({0} in all; --hist reserves them at start)")]
    Pairs(usize),
}

/// Merges `sub` (planned for one object alone) into `plan`: its cookies follow the plan's
/// last, and a span name the plan already has keeps its id (so a process that unloads and
/// reloads its probes, or a second process, adds to the same histogram). With `pair_room`,
/// new span names must fit it. Returns the attach points with their final cookies.
pub fn merge(
    plan: &mut Plan,
    sub: Plan,
    pair_room: Option<usize>,
) -> Result<Vec<AttachPoint>, MergeError> {
    let mut remap = Vec::with_capacity(sub.pairs.len());
    let mut pairs = plan.pairs.clone();
    for p in sub.pairs {
        let found = pairs
            .iter()
            .position(|q| q.provider == p.provider && q.stem == p.stem && q.start == p.start);
        let id = match found {
            Some(i) => {
                for e in p.ends {
                    if !pairs[i].ends.contains(&e) {
                        pairs[i].ends.push(e);
                    }
                }
                i
            }
            None => {
                if pair_room.is_some_and(|room| pairs.len() >= room) {
                    return Err(MergeError::Pairs(pair_room.unwrap_or(0)));
                }
                pairs.push(p);
                pairs.len() - 1
            }
        };
        remap.push(id as u32);
    }
    plan.pairs = pairs;
    let base = plan.sites.len() as u32;
    for mut spec in sub.specs {
        if spec.role != SiteRole::EVENT {
            spec.pair_id = remap[spec.pair_id as usize];
        }
        plan.specs.push(spec);
    }
    for mut site in sub.sites {
        site.pair = site.pair.map(|p| remap[p as usize]);
        plan.sites.push(site);
    }
    plan.single_step += sub.single_step;
    Ok(sub
        .objects
        .into_iter()
        .flat_map(|o| o.points)
        .map(|p| AttachPoint {
            cookie: p.cookie + base,
            ..p
        })
        .collect())
}

/// The user's choices, as `watch` validated them.
pub struct Rules<'a> {
    /// The options the first plan was made with: late plans are made alike.
    pub plan: PlanOptions<'a>,
    pub filter: Option<&'a Filter>,
}

/// Plans one new object alone. `--str` rules that name none of its probes are left out
/// (they were checked against what existed at start, or name probes yet to come). None when
/// nothing in it is traced.
fn plan_object(shown: &str, probes: &ObjectProbes, r: &Rules) -> Result<Option<Plan>, PlanError> {
    let strs: Vec<StrRule> = r
        .plan
        .strs
        .iter()
        .filter(|s| {
            probes
                .sites
                .iter()
                .any(|site| s.probe.matches(&site.provider, &site.name))
        })
        .cloned()
        .collect();
    // Likewise `--args` rules.
    let names: Vec<crate::plan::ArgNames> = r
        .plan
        .names
        .iter()
        .filter(|n| {
            probes
                .sites
                .iter()
                .any(|site| n.probe.matches(&site.provider, &site.name))
        })
        .cloned()
        .collect();
    let opts = PlanOptions {
        strs: &strs,
        names: &names,
        ..r.plan
    };
    match plan::build(&[(shown, probes)], &opts) {
        Ok(p) => Ok(Some(p)),
        Err(PlanError::NoMatch { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Which processes are followed, and which of their new objects are taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `-p` without a TARGET: these processes, and every object they map later (a library
    /// `dlopen`ed after the start as much as probes defined at run time).
    Pids(Vec<u32>),
    /// `-c`: that process, and the objects it defines at run time (memfd objects) only: the
    /// files to trace were named.
    Child(u32),
    /// TARGET without `-p`: every process that maps one of the named files (device, inode),
    /// now or later, and the objects they define at run time only.
    Running(Vec<((u32, u32), u64)>),
}

impl Scope {
    /// What `watch` follows: the `-c` child, else the `-p` processes, else the processes
    /// running the named `objects`.
    pub fn of_run(child: Option<u32>, pids: &[u32], objects: &[Object]) -> Scope {
        match child {
            Some(pid) => Scope::Child(pid),
            None if !pids.is_empty() => Scope::Pids(pids.to_vec()),
            None => Scope::Running(objects.iter().map(key_of).collect()),
        }
    }
}

/// An object defined at run time: a memfd, which `/proc/PID/maps` shows as `/memfd:NAME`.
pub fn is_runtime_object(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().starts_with(b"/memfd:")
}

/// Watches the traced processes for code they map later.
pub struct Late {
    scope: Scope,
    /// The processes followed (for [`Scope::Running`], found so far and alive).
    pids: Vec<u32>,
    /// None: the kernel would not report mappings; poll every [`SLOW_POLL`].
    watch: Option<MmapWatch>,
    /// (device, inode) of the objects attached at start, for every traced process.
    global: HashSet<((u32, u32), u64)>,
    /// (pid, device, inode) of every object considered since, traced or not.
    known: HashSet<(u32, (u32, u32), u64)>,
    /// Processes to read again: (pid, attempts left).
    pending: Vec<(u32, u32)>,
    last_poll: Instant,
    /// Attached late: kept open (their descriptors are what the uprobes were attached through).
    objects: Vec<Object>,
    /// Those objects, watched for writes in place (detached when one comes).
    changes: ChangeWatch,
}

pub(crate) fn key_of(o: &Object) -> ((u32, u32), u64) {
    ((libc::major(o.dev), libc::minor(o.dev)), o.inode)
}

/// Whether `pid` maps one of `files` now.
fn maps_one_of(pid: u32, files: &[((u32, u32), u64)]) -> bool {
    crate::target::procmaps::mapped_objects(pid)
        .is_ok_and(|objs| objs.iter().any(|m| files.contains(&(m.dev, m.inode))))
}

/// Every process that maps one of `files` now (a walk of `/proc`, once at start).
pub(crate) fn running(files: &[((u32, u32), u64)]) -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| p != me && maps_one_of(p, files))
        .collect()
}

impl Late {
    /// Starts watching. `seen` are the objects `watch` attached at start; every followed
    /// process is read once more at the first [`Late::poll`], for what was mapped between
    /// the start and now.
    pub fn new(scope: Scope, seen: &[Object]) -> (Late, Option<String>) {
        let (watch, warning) = match MmapWatch::open() {
            Ok(w) => (Some(w), None),
            Err(e) => {
                let also = if matches!(scope, Scope::Running(_)) {
                    " in the processes running it now (processes started later are not followed)"
                } else {
                    ""
                };
                (
                    None,
                    Some(format!(
                        "warning: the kernel will not report new mappings ({e}): probes defined later are looked for every {} s{also}",
                        SLOW_POLL.as_secs()
                    )),
                )
            }
        };
        let pids = match &scope {
            Scope::Pids(p) => p.clone(),
            Scope::Child(p) => vec![*p],
            Scope::Running(files) => running(files),
        };
        let late = Late {
            pending: pids.iter().map(|&p| (p, RETRIES)).collect(),
            pids,
            scope,
            watch,
            global: seen.iter().map(key_of).collect(),
            known: HashSet::new(),
            last_poll: Instant::now(),
            objects: Vec::new(),
            changes: ChangeWatch::new(),
        };
        (late, warning)
    }

    /// Descriptors readable when a process mapped code: a poll that includes them wakes at once.
    pub fn wake_fds(&self) -> Vec<i32> {
        let mut fds = self.watch.as_ref().map_or_else(Vec::new, |w| w.fds());
        fds.extend(self.changes.wake_fd());
        fds
    }

    /// Queues `pid` to be read again, unless it already is.
    fn queue(&mut self, pid: u32, tries: u32) {
        if !self.pending.iter().any(|(q, _)| *q == pid) {
            self.pending.push((pid, tries));
        }
    }

    /// Looks for new objects in the followed processes that mapped code since the last call,
    /// and attaches what the rules choose in them. Problems are warnings: tracing goes on.
    pub fn poll(
        &mut self,
        plan: &mut Plan,
        tracer: &mut Tracer,
        rules: &Rules,
        raiser: &mut crate::watch::semaphores::Raiser,
    ) {
        // Objects attached late and since written in place: detached, as those of the start
        // (and their semaphores no longer counted by hand).
        crate::watch::stop_changed(&self.changes.take_changed(), tracer, Some(&mut *raiser));
        match &mut self.watch {
            Some(w) => {
                let m = w.take();
                if m.lost {
                    for p in self.pids.clone() {
                        self.queue(p, RETRIES);
                    }
                }
                // A process that starts running a named file (its exec, a dlopen) maps it:
                // the record names the file, so other processes cost nothing.
                if let Scope::Running(files) = &self.scope {
                    for (p, dev, ino) in &m.files {
                        if files.contains(&(*dev, *ino)) && !self.pids.contains(p) {
                            self.pids.push(*p);
                        }
                    }
                }
                for p in m.pids {
                    if self.pids.contains(&p) {
                        self.queue(p, RETRIES);
                    }
                }
            }
            None if self.last_poll.elapsed() >= SLOW_POLL => {
                self.last_poll = Instant::now();
                for p in self.pids.clone() {
                    self.queue(p, 1);
                }
            }
            None => {}
        }
        let deadline = Instant::now() + POLL_BUDGET;
        for (pid, tries) in std::mem::take(&mut self.pending) {
            if Instant::now() >= deadline {
                self.pending.push((pid, tries));
                continue;
            }
            match self.scan(pid, plan, tracer, rules, raiser, deadline) {
                Scan::Again if tries > 1 => self.pending.push((pid, tries - 1)),
                Scan::Later => self.pending.push((pid, tries)),
                Scan::Gone => {
                    self.pids.retain(|&p| p != pid);
                    self.known.retain(|k| k.0 != pid);
                }
                _ => {}
            }
        }
    }

    /// Reads one process's maps and takes what is new in it.
    fn scan(
        &mut self,
        pid: u32,
        plan: &mut Plan,
        tracer: &mut Tracer,
        rules: &Rules,
        raiser: &mut crate::watch::semaphores::Raiser,
        deadline: Instant,
    ) -> Scan {
        let Ok(maps) = crate::target::procmaps::mapped_objects(pid) else {
            return Scan::Gone;
        };
        let all_objects = matches!(self.scope, Scope::Pids(_));
        let mut again = false;
        for m in maps {
            let key = (pid, m.dev, m.inode);
            if self.global.contains(&(m.dev, m.inode)) || self.known.contains(&key) {
                continue;
            }
            if !all_objects && !is_runtime_object(&m.path) {
                self.known.insert(key);
                continue;
            }
            // Out of time: this object and the rest at the next call.
            if Instant::now() >= deadline {
                return Scan::Later;
            }
            let shown = if m.deleted {
                format!("{} (deleted)", m.shown())
            } else {
                m.shown()
            };
            // Bounded: the process chose this object, and may have made it to be costly.
            let o = match target::open_mapped_limited(pid, &m, &shown, Some(&Limits::LATE)) {
                Ok(o) => o,
                Err(TargetError::Open { .. }) => {
                    again = true;
                    continue;
                }
                // Refused before it was read: one line, and never looked at again.
                Err(e) if matches!(e.elf(), Some(ElfError::TooLarge { .. })) => {
                    self.known.insert(key);
                    let why = e.elf().map(|k| k.to_string()).unwrap_or_default();
                    crate::util::terminal::say(&format!(
                        "warning: {} (pid {pid}): not traced: {why}",
                        clean(&shown)
                    ));
                    continue;
                }
                // Not ELF, not a regular file, or not what was mapped: nothing to trace.
                Err(_) => {
                    self.known.insert(key);
                    continue;
                }
            };
            self.known.insert(key);
            if o.probes.sites.is_empty() {
                continue;
            }
            if let Err(e) = self.add(pid, o, plan, tracer, rules, raiser) {
                crate::util::terminal::say(&format!("warning: {}", clean(&e)));
            }
        }
        if again {
            Scan::Again
        } else {
            Scan::Done
        }
    }

    fn add(
        &mut self,
        pid: u32,
        o: Object,
        plan: &mut Plan,
        tracer: &mut Tracer,
        rules: &Rules,
        raiser: &mut crate::watch::semaphores::Raiser,
    ) -> Result<(), String> {
        let what = format!("{} (pid {pid})", o.shown);
        let ctx = Joining {
            tracer,
            rules,
            changes: &mut self.changes,
            raiser,
        };
        if let Some(line) = attach_new(&o, Some(pid), &what, plan, ctx).map_err(|e| e.msg)? {
            crate::util::terminal::say(&line);
            self.objects.push(o);
        }
        Ok(())
    }
}

/// What joining an object to the running trace changes besides the plan.
pub(crate) struct Joining<'a> {
    pub tracer: &'a mut Tracer,
    pub rules: &'a Rules<'a>,
    pub changes: &'a mut ChangeWatch,
    pub raiser: &'a mut crate::watch::semaphores::Raiser,
}

/// Why an object could not join the running trace.
pub(crate) struct NotJoined {
    /// What to say (naming the object).
    pub msg: String,
    /// For want of the room the tracer reserved at load (span names, sites): the one reason
    /// for which loading the programs again, with fresh room, helps.
    pub no_room: bool,
}

/// Plans `o` alone with the run's rules, merges it into `plan`, writes its specs into the
/// room the tracer reserved and attaches it: for `pid`, or for every process running the
/// file (None). `o` is watched for writes in place from before it is attached. The line to
/// print when something was attached (`what` names the object in it and in errors); None
/// when nothing in `o` is traced.
pub(crate) fn attach_new(
    o: &Object,
    pid: Option<u32>,
    what: &str,
    plan: &mut Plan,
    ctx: Joining<'_>,
) -> Result<Option<String>, NotJoined> {
    let Joining {
        tracer,
        rules,
        changes,
        raiser,
    } = ctx;
    let fail = |e: &dyn std::fmt::Display, no_room: bool| NotJoined {
        msg: format!("{what}: {e}"),
        no_room,
    };
    let sub = match plan_object(&o.shown, &o.probes, rules) {
        Ok(Some(p)) => p,
        Ok(None) => return Ok(None),
        Err(e) => return Err(fail(&e, false)),
    };
    let first = plan.sites.len();
    let nsites = sub.sites.len();
    let mut merged = plan.clone();
    let room = (tracer.hist_capacity() > 0).then(|| tracer.hist_capacity());
    // Merging fails only for want of span names.
    let mut points = merge(&mut merged, sub, room).map_err(|e| fail(&e, true))?;
    // Semaphores the kernel would count wrong are counted by hand, as at the start.
    let handed = crate::watch::semaphores::affected_object(o, usize::MAX, &points);
    if let Some(a) = &handed {
        crate::watch::semaphores::hand_over_points(&mut points, a);
    }
    let masks = rules.filter.map(|f| plan::masks_from(&merged, first, f));
    tracer
        .add_sites(first as u32, &merged.specs[first..], masks.as_deref())
        .map_err(|e| fail(&e, matches!(e, crate::tracer::TraceError::SitesFull { .. })))?;
    let path = o.fd_path();
    // Watched from before it is attached: a write the moment it is attached still counts.
    changes.add(o);
    if let Err(e) = tracer.attach_object(&path.to_string_lossy(), &points, pid) {
        changes.pop();
        return Err(fail(&e, false));
    }
    tracer.name_object(&path.to_string_lossy(), &o.shown);
    if let Some(a) = handed {
        raiser.adopt(a, pid);
    }
    // Records of the new sites are read after this returns, by then with their cookies.
    *plan = merged;
    let spans: std::collections::BTreeSet<u32> =
        plan.sites[first..].iter().filter_map(|s| s.pair).collect();
    let s = |k: usize| if k == 1 { "" } else { "s" };
    Ok(Some(format!(
        "Attached {nsites} new probe site{} in {}{}",
        s(nsites),
        clean(what),
        match spans.len() {
            0 => String::new(),
            k => format!(" ({k} span name{})", s(k)),
        }
    )))
}

/// What reading a process's maps came to.
enum Scan {
    Done,
    /// An object could not be opened yet: read it again.
    Again,
    /// Out of time for this call: read it again, without using up a try.
    Later,
    /// The process is gone.
    Gone,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{PairInfo, SiteInfo};
    use crate::plan::ObjectPlan;
    use usdt_trace_common::SiteSpec;

    fn pair(stem: &str) -> PairInfo {
        PairInfo {
            provider: "p".into(),
            stem: stem.into(),
            start: format!("{stem}__start"),
            ends: vec![format!("{stem}__end")],
        }
    }

    fn site(name: &str, pair: Option<u32>) -> SiteInfo {
        let mut s = SiteInfo::for_test("p", name, &[], &[]);
        s.pair = pair;
        s
    }

    fn spec(role: SiteRole, pair_id: u32) -> SiteSpec {
        let mut s = crate::plan::site_spec(&[], 0, crate::plan::spans::Role::Event, None, &[]);
        s.role = role;
        s.pair_id = pair_id;
        s
    }

    /// A plan of one span `stem` (start, end) and an event, attached at offsets 0x10...
    fn one(stem: &str) -> Plan {
        Plan {
            specs: vec![
                spec(SiteRole::START, 0),
                spec(SiteRole::END, 0),
                spec(SiteRole::EVENT, 0),
            ],
            sites: vec![
                site(&format!("{stem}__start"), Some(0)),
                site(&format!("{stem}__end"), Some(0)),
                site("tick", None),
            ],
            pairs: vec![pair(stem)],
            objects: vec![ObjectPlan {
                object: 0,
                points: (0..3)
                    .map(|i| AttachPoint {
                        offset: 0x10 * (i + 1),
                        ref_ctr: Some(0x1000 + 2 * i),
                        cookie: i as u32,
                        ret: false,
                    })
                    .collect(),
            }],
            single_step: 0,
        }
    }

    #[test]
    fn runtime_objects_are_memfds() {
        use std::path::Path;
        assert!(is_runtime_object(Path::new("/memfd:usdt:pyhttp")));
        assert!(!is_runtime_object(Path::new("/usr/lib/libfoo.so")));
        assert!(!is_runtime_object(Path::new("/tmp/memfd:x")));
    }

    #[test]
    fn merged_sites_follow_and_share_span_names() {
        let mut plan = one("a");
        // The same span again (a reloaded provider): same pair id, cookies 3..6.
        let points = merge(&mut plan, one("a"), None).unwrap();
        assert_eq!(
            points.iter().map(|p| p.cookie).collect::<Vec<_>>(),
            [3, 4, 5]
        );
        assert_eq!(points[1].ref_ctr, Some(0x1002));
        assert_eq!(plan.pairs.len(), 1);
        assert_eq!(plan.sites[3].pair, Some(0));
        assert_eq!(plan.specs[4].pair_id, 0);
        // Another span: a new pair id, used by its start and end, not by the event.
        let points = merge(&mut plan, one("b"), None).unwrap();
        assert_eq!(points[0].cookie, 6);
        assert_eq!(plan.pairs.len(), 2);
        assert_eq!(plan.pairs[1].stem, "b");
        assert_eq!((plan.specs[6].pair_id, plan.specs[7].pair_id), (1, 1));
        assert_eq!(plan.sites[7].pair, Some(1));
        assert_eq!(plan.sites[8].pair, None);
        assert_eq!(plan.sites.len(), plan.specs.len());
    }

    #[test]
    fn an_empty_plan_takes_the_first_object() {
        let mut plan = Plan::default();
        let points = merge(&mut plan, one("a"), Some(4)).unwrap();
        assert_eq!(points[0].cookie, 0);
        assert_eq!(plan.pairs.len(), 1);
    }

    #[test]
    fn span_names_beyond_the_reserved_room_are_refused() {
        let mut plan = one("a");
        let before = plan.clone();
        assert_eq!(
            merge(&mut plan, one("b"), Some(1)),
            Err(MergeError::Pairs(1))
        );
        // Nothing was half-merged.
        assert_eq!(plan.sites.len(), before.sites.len());
        assert_eq!(plan.pairs.len(), 1);
        // A known name needs no room.
        assert!(merge(&mut plan, one("a"), Some(1)).is_ok());
    }

    #[test]
    fn a_span_gains_the_ends_another_object_adds() {
        let mut plan = one("a");
        let mut other = one("a");
        other.pairs[0].ends.push("a__fail".into());
        merge(&mut plan, other, None).unwrap();
        assert_eq!(plan.pairs[0].ends, ["a__end", "a__fail"]);
    }
}
