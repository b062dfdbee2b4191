//! The only module that touches aya and the kernel.
//!
//! It loads the eBPF object built by `build.rs`, fills the spec table, attaches the generic
//! uprobe program at every site, and reads the ring buffer. Each site's attachment carries a
//! BPF cookie, its index in the spec table, and the file offset of its semaphore, which the
//! kernel raises while the probe is attached (`ref_ctr_offset`), unless the caller took it
//! out because usdt-trace counts that semaphore itself (`crate::watch::semaphores::hand_over`).
//!
//! What the kernel supports is probed once ([`features`]) and the attach path is chosen from
//! that and the requested [`AttachMode`] before anything is attached; there is no silent
//! fallback. [`AttachPath::Multi`] is one `BPF_TRACE_UPROBE_MULTI` link per object (see
//! `multi`), which takes offsets, semaphore offsets and cookies for all sites at once and
//! detaches them behind a single grace period. [`AttachPath::Perf`] gives each site a uprobe
//! opened with `perf_event_open` on the uprobe PMU (aya 0.14 cannot set `ref_ctr_offset`) and
//! a `BPF_LINK_CREATE` link with the cookie. Every link and perf event is an owned file
//! descriptor, so when this process exits, however it exits (even SIGKILL), the kernel
//! detaches the probes and lowers the semaphores.

mod agg;
mod attach;
mod load;
mod read;
pub use agg::{ByHists, Counts};
#[allow(unused_imports)]
use attach::*;
pub use load::LoadOptions;
#[allow(unused_imports)]
use load::*;
pub(crate) mod btf;
pub mod calibrate;
mod exechold;
pub mod features;
pub mod mmapwatch;
mod multi;
pub mod steal;
mod sys;
pub(crate) mod syscalls;
mod uprobes;

pub use agg::{AggCounters, AggLoad};
pub use features::{AttachMode, AttachPath, Feature, Features};

use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, ProgramError, UProbe},
    Ebpf, EbpfLoader,
};
use std::{
    os::fd::{AsFd, AsRawFd, OwnedFd},
    rc::Rc,
    time::Duration,
};
use thiserror::Error;
use usdt_trace_common::agg::CFG_AGG_ARGS;
use usdt_trace_common::maps;
use usdt_trace_common::{
    Config, FilterProg, Hist, IdKey, SiteSpec, WaitSums, CFG_ACCT, CFG_FILTER, CFG_HIST, CFG_STACK,
    CFG_STACK_COPY, CFG_STOPPED, CFG_WAITS, CFG_WAITS_CAPPED, HIST_COMPONENTS, HIST_DURATION,
    MAX_PAIRS,
};

/// The eBPF object, built by build.rs (empty when built with USDT_TRACE_SKIP_EBPF=1).
static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/usdt-trace-probes"));

#[derive(Debug, Error)]
pub enum TraceError {
    #[error("this usdt-trace was built without its eBPF programs (USDT_TRACE_SKIP_EBPF=1)")]
    NoObject,
    #[error(
        "permission denied loading eBPF programs: run as root or grant CAP_BPF and CAP_PERFMON"
    )]
    Permission,
    #[error("loading the eBPF programs failed: {0}")]
    Load(String),
    #[error("eBPF program {0} is missing from the object")]
    MissingProgram(&'static str),
    #[error("eBPF map {0} is missing from the object")]
    MissingMap(&'static str),
    #[error("eBPF map {name}: {msg}")]
    Map { name: &'static str, msg: String },
    /// Sites added after the start found the room reserved at load used up.
    #[error(
        "eBPF map {}: no room for {n} more sites (room for {room} in all)",
        maps::SITES
    )]
    SitesFull { n: usize, room: u32 },
    #[error("attaching the tracepoint {name}: {source}")]
    Tracepoint {
        name: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("the kernel's BTF is needed for the scheduler hooks: {0}")]
    Btf(String),
    #[error("attach mode {mode}: {reason}")]
    AttachMode { mode: AttachMode, reason: String },
    /// `point` is the failing site when the kernel's answer names one (always on the perf
    /// path); a uprobe_multi link fails for its object as a whole.
    #[error("attaching {}{path}{}: {msg}",
        if point.is_some() { "at " } else { "" },
        point.map(|p| format!(" offset {:#x}{}", p.offset,
            p.ref_ctr.map(|s| format!(" (semaphore at {s:#x})")).unwrap_or_default()))
            .unwrap_or_default())]
    Attach {
        path: String,
        point: Option<AttachPoint>,
        msg: String,
    },
    #[error("reading the ring buffer: {0}")]
    Poll(std::io::Error),
    #[error(
        "{sites} probe sites are too many for per-site perf events (at most {max}: each one \
         holds the kernel's uprobe mutex for a grace period when attached and detached); use \
         --attach multi (uprobe_multi links, Linux 6.6+) or fewer patterns"
    )]
    TooManyPerfSites { sites: usize, max: usize },
    #[error(
        "{sites} probe sites need {needed} open files with --attach perf (two per site), but \
         the limit is {limit} (ulimit -Hn); raise it, or use --attach multi"
    )]
    PerfFds {
        sites: usize,
        needed: u64,
        limit: u64,
    },
}

use features::VMLINUX_BTF;

/// Where one uprobe goes: decided by the pure [`crate::plan`], consumed here.
pub use crate::plan::AttachPoint;

/// Records handed out by one [`Tracer::poll`]: bounds the memory and the time between two
/// checks for a stop, whatever the rate.
pub const MAX_BATCH: usize = 4096;

/// At most this many sites are detached before `detach_all` returns.
pub const INLINE_DETACH: usize = 16;

/// How `detach_all` went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detach {
    /// All uprobes are gone.
    Done(usize),
    /// A helper process is detaching them.
    Background { sites: usize, pid: i32 },
}

/// Counters kept by the kernel side, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub events: u64,
    pub spans: u64,
    pub lost: u64,
    pub unmatched_start: u64,
    pub unmatched_end: u64,
    /// Span starts whose `--str` strings could not be kept until their end.
    pub strs_dropped: u64,
    /// `--str` strings records the ring buffer had no room for.
    pub strs_lost: u64,
    /// `--perfetto`: off-CPU interval records the kernel dropped to keep the ring's room for
    /// spans (or that found it full).
    pub waits_lost: u64,
    /// `--perfetto`: off-CPU intervals not sent once told the cap was reached
    /// ([`Tracer::cap_waits`]).
    pub waits_capped: u64,
    /// Span starts dropped because THREADS (`--max-threads`) was full, and their ends.
    pub threads_full: u64,
    pub threads_full_ends: u64,
    /// Span starts dropped because ID_SPANS (`--max-open-ids`) was full, and their ends.
    pub id_full: u64,
    pub id_full_ends: u64,
    /// Span starts dropped past the per-thread stack (`MAX_DEPTH`), and their ends.
    pub depth: u64,
    pub depth_ends: u64,
    /// Spans shorter than `--min`, not recorded.
    pub below_min: u64,
    /// Spans and events `--filter` rejected.
    pub filter_rejected: u64,
}

/// Default of `--max-threads`: threads that may hold per-thread span state at once. Each one
/// that opens a span takes a ~12 KB `ThreadState` (a 16 KB allocation) until it exits: 64 MB
/// at this many. `--str` strings of open spans are apart (`STRS`, ~4 KB per open span with
/// strings, at most 16384 open at once).
pub const DEFAULT_MAX_THREADS: u32 = 4096;
/// Default of `--max-open-ids`: id-paired spans open at once (~0.5 KB each while open).
pub const DEFAULT_MAX_OPEN_IDS: u32 = 65536;
/// The kernel's cap on the sites of one uprobe_multi link (`MAX_UPROBE_MULTI_CNT`): more
/// fail with E2BIG, so larger objects get several links.
pub const MULTI_LINK_MAX_SITES: usize = 1 << 20;
/// At most this many sites through per-site perf events. Each one is registered and
/// unregistered under the kernel's global uprobe event mutex, one RCU-tasks grace period at
/// a time (~0.1 s): beyond a few thousand, attaching and detaching hold that mutex for minutes.
pub const PERF_MAX_SITES: usize = 4096;

pub struct Tracer {
    ebpf: Ebpf,
    ring: RingBuf<MapData>,
    /// How sites are attached, chosen once at load.
    path: AttachPath,
    /// The uprobe PMU's type and where its `config` takes `ref_ctr_offset` (perf path).
    uprobe_type: Option<u32>,
    ref_ctr_shift: Option<u32>,
    /// perf event and link fds (per-site attachments); dropping them detaches.
    fds: Vec<OwnedFd>,
    /// The `path` each of `fds` was attached through (one entry per fd), so that one object's
    /// can be detached alone ([`Tracer::detach_object`]).
    fd_paths: Vec<Rc<str>>,
    /// uprobe_multi links, one per object and process; dropping them detaches.
    multi_links: Vec<OwnedFd>,
    /// The path and number of sites of each of `multi_links`.
    multi_paths: Vec<(Rc<str>, usize)>,
    /// What each attach path (`/proc/self/fd/N`) is to the user: the file as named or
    /// mapped (for the per-object health gauge).
    owner_names: std::collections::HashMap<Rc<str>, String>,
    /// The program loaded for uprobe_multi links (multi path).
    multi_prog: Option<OwnedFd>,
    /// The same program loaded by aya for perf-event links (perf path).
    prog_fd: Option<i32>,
    /// Sites attached so far.
    sites: usize,
    /// Span names HISTS has room for (sized at load).
    hist_pairs: usize,
    /// `--by`: on, and whether its keys have a string field (`ByKey`s, not `NumKey`s).
    agg_by: Option<bool>,
    /// Cookies SITES has room for (sized at load).
    site_capacity: u32,
    /// Descriptors that also end a wait in [`Tracer::poll`] (see [`Tracer::wake_on`]).
    wake_fds: Vec<i32>,
    /// The uprobe program attached at every site.
    site_prog: &'static str,
    /// `--min`, which `--top`'s moving minimum never goes below.
    user_min_ns: u64,
    /// The ring of held execs ([`Tracer::hold_execs`]), once holding, and the hook's link.
    execs: Option<RingBuf<MapData>>,
    exec_link: Option<aya::programs::tp_btf::BtfTracePointLinkId>,
}

fn map_err(name: &'static str) -> impl Fn(aya::maps::MapError) -> TraceError {
    move |e| TraceError::Map {
        name,
        msg: e.to_string(),
    }
}

impl Tracer {
    /// Also end [`Tracer::poll`]'s wait when one of `fds` becomes readable (the caller keeps
    /// them open for as long as this tracer polls); added to those given before.
    pub fn wake_on(&mut self, fds: Vec<i32>) {
        self.wake_fds.extend(fds);
    }

    /// Probe sites attached so far (one per process for a per-process uprobe).
    pub fn attached_sites(&self) -> usize {
        self.sites
    }

    /// Names the object attached through `path` (`/proc/self/fd/N`) as the user knows it.
    pub fn name_object(&mut self, path: &str, shown: &str) {
        self.owner_names.insert(Rc::from(path), shown.to_string());
    }

    /// Probe sites attached now, per object as [`Tracer::name_object`] named it (the path
    /// attached through when it was not named), sorted by name.
    pub fn sites_by_object(&self) -> Vec<(String, u64)> {
        let mut by: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
        let name = |p: &Rc<str>| {
            self.owner_names
                .get(p)
                .cloned()
                .unwrap_or_else(|| p.to_string())
        };
        for (p, n) in &self.multi_paths {
            *by.entry(name(p)).or_default() += *n as u64;
        }
        // Two descriptors per perf-event site (the event and its link).
        for p in self.fd_paths.iter().step_by(2) {
            *by.entry(name(p)).or_default() += 1;
        }
        by.into_iter().collect()
    }

    /// Span names the histograms have room for.
    pub fn hist_capacity(&self) -> usize {
        self.hist_pairs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// User space finds maps by the names in `usdt_trace_common::maps`; the eBPF side declares
    /// them as statics of those names. A rename on one side fails here, not at load time.
    #[test]
    fn maps_user_space_names_exist_in_the_object() {
        use object::{Object, ObjectSection, ObjectSymbol};
        if EBPF_OBJECT.is_empty() {
            // Built with USDT_TRACE_SKIP_EBPF=1: nothing to check against.
            return;
        }
        let obj = object::File::parse(EBPF_OBJECT).expect("the eBPF object parses");
        let maps = obj.section_by_name("maps").expect("a maps section").index();
        let defined: std::collections::HashSet<&str> = obj
            .symbols()
            .filter(|s| s.section_index() == Some(maps))
            .filter_map(|s| s.name().ok())
            .collect();
        assert!(
            defined.len() >= usdt_trace_common::maps::ALL.len(),
            "{defined:?}"
        );
        for name in usdt_trace_common::maps::ALL {
            assert!(
                defined.contains(name),
                "map {name} is not in the eBPF object"
            );
        }
    }

    fn opts<'a>(hist: bool, sched: bool) -> LoadOptions<'a> {
        LoadOptions {
            specs: &[],
            ring_bytes: 4096,
            hist,
            sched,
            attach: AttachMode::Auto,
            max_threads: DEFAULT_MAX_THREADS,
            max_open_ids: DEFAULT_MAX_OPEN_IDS,
            min_ns: 0,
            str_max: usdt_trace_common::STR_MAX_DEFAULT as u32,
            strs: false,
            filter: None,
            filter_args: false,
            stack: false,
            stack_copy: false,
            waits: false,
            agg: AggLoad::default(),
            null_program: false,
            spare_sites: 0,
            spare_pairs: 0,
        }
    }

    #[test]
    fn multi_links_split_at_the_kernel_cap() {
        let p = |i: usize| AttachPoint {
            offset: i as u64,
            ref_ctr: None,
            cookie: i as u32,
            ret: false,
        };
        let points: Vec<AttachPoint> = (0..MULTI_LINK_MAX_SITES * 2 + 3).map(p).collect();
        let sizes: Vec<usize> = multi_chunks(&points).map(|c| c.len()).collect();
        assert_eq!(
            sizes,
            [MULTI_LINK_MAX_SITES, MULTI_LINK_MAX_SITES, 3],
            "every site once, in order, no link over the cap"
        );
        let last = multi_chunks(&points).last().unwrap();
        assert_eq!(last[0].cookie as usize, MULTI_LINK_MAX_SITES * 2);
        assert_eq!(multi_chunks(&points[..MULTI_LINK_MAX_SITES]).count(), 1);
        assert_eq!(multi_chunks(&points[..1]).count(), 1);
        assert_eq!(multi_chunks(&[]).count(), 0);
    }

    #[test]
    fn perf_path_is_bounded() {
        assert!(check_perf_sites(PERF_MAX_SITES).is_ok());
        assert!(check_perf_fds(1000, 2 * 1000 + FD_RESERVE).is_ok());
        let e = check_perf_fds(1000, 1024).unwrap_err().to_string();
        assert!(
            e.contains("1000 probe sites need 2256 open files") && e.contains("limit is 1024"),
            "{e}"
        );
        assert!(!e.contains('\n'));
        let e = check_perf_sites(PERF_MAX_SITES + 1).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("4097 probe sites") && m.contains("--attach multi"),
            "{m}"
        );
    }

    #[test]
    fn config_flags_from_plain_fields() {
        assert_eq!(opts(false, false).config_flags(), 0);
        assert_eq!(opts(true, false).config_flags(), CFG_HIST);
        assert_eq!(opts(false, true).config_flags(), CFG_ACCT);
        assert_eq!(opts(true, true).config_flags(), CFG_HIST | CFG_ACCT);
    }

    #[test]
    fn attach_error_names_the_site_when_known() {
        let p = AttachPoint {
            offset: 0x1234,
            ref_ctr: Some(0x5000),
            cookie: 3,
            ret: false,
        };
        let e = TraceError::Attach {
            path: "/bin/x (p:n)".into(),
            point: Some(p),
            msg: "boom".into(),
        };
        assert_eq!(
            e.to_string(),
            "attaching at /bin/x (p:n) offset 0x1234 (semaphore at 0x5000): boom"
        );
        let e = TraceError::Attach {
            path: "/bin/x".into(),
            point: None,
            msg: "no such process".into(),
        };
        assert_eq!(e.to_string(), "attaching /bin/x: no such process");
    }

    #[test]
    fn multi_errors_say_why() {
        let p = |ref_ctr| AttachPoint {
            offset: 1,
            ref_ctr,
            cookie: 0,
            ret: false,
        };
        let einval = std::io::Error::from_raw_os_error(libc::EINVAL);
        let esrch = std::io::Error::from_raw_os_error(libc::ESRCH);
        assert_eq!(multi_error(&esrch, &[p(None), p(None)]), "no such process");
        let m = multi_error(&einval, &[p(Some(2)), p(None)]);
        assert!(
            m.starts_with("uprobe_multi link for 2 sites:") && m.contains("perf names the site"),
            "{m}"
        );
        assert!(multi_error(&einval, &[p(Some(2))]).contains("semaphore setting"));
        // Without one too: the other tracer may hold the site with one.
        assert!(multi_error(&einval, &[p(None)]).contains("semaphore setting"));
    }
}
