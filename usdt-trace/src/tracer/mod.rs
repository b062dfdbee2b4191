//! The only module that touches aya and the kernel.
//!
//! It loads the eBPF object built by `build.rs`, fills the spec table, attaches the generic
//! uprobe program at every site, and reads the ring buffer. Each site's attachment carries a
//! BPF cookie, its index in the spec table, and the file offset of its semaphore, which the
//! kernel raises while the probe is attached (`ref_ctr_offset`), unless the caller took it
//! out because usdt-trace counts that semaphore itself (`crate::semaphores::hand_over`).
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
pub mod calibrate;
mod exechold;
pub mod features;
pub mod mmapwatch;
mod multi;
pub mod steal;
mod sys;

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

/// The uprobe program to attach: `usdt_site`, or without the scheduler hooks
/// `usdt_site_nosplit` (no time split, and id-paired spans touch no thread state), or for
/// benchmarks (`null`, the hidden `--bench-null-program`) `usdt_null`, which only returns (the
/// floor any handler pays: `bench/handler.py`). Not a user option: nothing is traced then.
fn uprobe_program(sched: bool, null: bool) -> &'static str {
    if null {
        "usdt_null"
    } else if sched {
        "usdt_site"
    } else {
        "usdt_site_nosplit"
    }
}

/// The fd of array map `name` (borrowed from `ebpf`).
fn array_fd(ebpf: &Ebpf, name: &'static str) -> Result<std::os::fd::RawFd, TraceError> {
    match ebpf.map(name) {
        Some(aya::maps::Map::Array(d)) => Ok(d.fd().as_fd().as_raw_fd()),
        Some(_) => Err(TraceError::Map {
            name,
            msg: "not an array".into(),
        }),
        None => Err(TraceError::MissingMap(name)),
    }
}

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

/// What to load.
pub struct LoadOptions<'a> {
    /// One per site, indexed by cookie.
    pub specs: &'a [SiteSpec],
    /// Ring buffer size in bytes (a power of two, multiple of the page size).
    pub ring_bytes: u32,
    /// Keep histograms in the kernel instead of sending each span.
    pub hist: bool,
    /// Attach the scheduler tracepoints and split span time (on-CPU, run queue, sleep, I/O).
    pub sched: bool,
    pub attach: AttachMode,
    /// Size of THREADS: threads with per-thread span state at once (`--max-threads`).
    pub max_threads: u32,
    /// Size of ID_SPANS: id-paired spans open at once (`--max-open-ids`).
    pub max_open_ids: u32,
    /// `--min`: spans shorter than this (ns) make no record; histograms count every span.
    pub min_ns: u64,
    /// `--str-max`: bytes kept of each `--str` string (1..=`STR_MAX_CAP`).
    pub str_max: u32,
    /// Any `--str` rule given: room for the start strings of every id-paired span that holds
    /// a slot (`ID_STRS`, ~16 MB of kernel memory).
    pub strs: bool,
    /// `--filter`/`--tid`: the compiled program, and per site (cookie) which terms name it.
    pub filter: Option<(FilterProg, &'a [u32])>,
    /// The filter compares arguments: with `--hist` the starts must then keep them (as a
    /// `--by` key on arguments does), for the filter to read at the span's end.
    pub filter_args: bool,
    /// `--stack`: a user stack record before each span record.
    pub stack: bool,
    /// `--stack=dwarf`: that record is a copy of the stack's top and the registers
    /// (`StackCopyRecord`), not the kernel's frame-pointer walk.
    pub stack_copy: bool,
    /// `--perfetto`: the scheduler hooks send each off-CPU interval of a thread with a span
    /// open (`CFG_WAITS`), for the trace's wait slices.
    pub waits: bool,
    /// `--by`, `--count`, `--top`.
    pub agg: AggLoad,
    /// Attach `usdt_null` (records nothing): `--bench-null-program`, for benchmarks only.
    pub null_program: bool,
    /// Room for sites and span names added after load ([`Tracer::add_sites`]): probes a
    /// traced process defines or loads later.
    pub spare_sites: u32,
    pub spare_pairs: u32,
}

impl LoadOptions<'_> {
    /// The eBPF programs' `CFG_*` flags.
    fn config_flags(&self) -> u32 {
        let mut flags = 0;
        if self.hist {
            flags |= CFG_HIST;
        }
        if self.sched {
            flags |= CFG_ACCT;
        }
        if self.filter.is_some() {
            flags |= CFG_FILTER;
        }
        if self.hist && self.filter_args {
            flags |= CFG_AGG_ARGS;
        }
        if self.stack {
            flags |= CFG_STACK;
            if self.stack_copy {
                flags |= CFG_STACK_COPY;
            }
        }
        if self.waits && self.sched {
            flags |= CFG_WAITS;
        }
        flags | self.agg.config_flags()
    }
}

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
    pub fn load(opts: &LoadOptions) -> Result<Tracer, TraceError> {
        if EBPF_OBJECT.is_empty() {
            return Err(TraceError::NoObject);
        }
        if !features::Privileges::current().may_trace() {
            return Err(TraceError::Permission);
        }
        sys::raise_memlock_limit();
        let features = Features::detect();
        let path = features
            .attach_path(opts.attach)
            .map_err(|reason| TraceError::AttachMode {
                mode: opts.attach,
                reason,
            })?;
        // The thread-exit hook is a BTF tracepoint and always attached.
        if !features.tp_btf.is_yes() {
            return Err(TraceError::Btf(format!(
                "BTF tracepoints: {}",
                features.tp_btf.detail
            )));
        }
        if path == AttachPath::Perf {
            check_perf_sites(opts.specs.len())?;
            check_perf_fds(opts.specs.len(), sys::raise_nofile_limit())?;
        }
        let nsites = (opts.specs.len() as u32 + opts.spare_sites).max(1);
        // A log-linear histogram is ~4 KB per CPU: HISTS holds one per span name and component
        // actually traced (none without --hist) rather than MAX_PAIRS of them.
        let hist_pairs = if opts.hist {
            opts.specs
                .iter()
                .filter(|s| s.role != usdt_trace_common::SiteRole::EVENT)
                .map(|s| s.pair_id + 1)
                .max()
                .unwrap_or(0)
                .saturating_add(opts.spare_pairs)
                .min(MAX_PAIRS)
        } else {
            0
        };
        let hist_slots = (hist_pairs * HIST_COMPONENTS as u32).max(1);
        let mut loader = EbpfLoader::new();
        opts.agg.size_maps(&mut loader, nsites, hist_pairs);
        let mut ebpf = loader
            .map_max_entries(maps::SITES, nsites)
            .map_max_entries(maps::FILTER_SITES, nsites)
            .map_max_entries(maps::HISTS, hist_slots)
            .map_max_entries(maps::WAIT_SUMS, hist_pairs.max(1))
            .map_max_entries(maps::EVENTS, opts.ring_bytes)
            .map_max_entries(maps::THREADS, opts.max_threads.max(1))
            .map_max_entries(maps::ID_SPANS, opts.max_open_ids.max(1))
            // Strings of id spans that hold a slot, in place: 16 MB only when asked for.
            .map_max_entries(
                maps::ID_STRS,
                if opts.strs {
                    usdt_trace_common::ID_SLOTS
                } else {
                    1
                },
            )
            .load(EBPF_OBJECT)
            .map_err(|e| {
                let msg = error_chain(&e);
                if sys::is_permission_error(&msg) && !sys::is_root() {
                    TraceError::Permission
                } else {
                    TraceError::Load(error_chain(&e))
                }
            })?;
        {
            let fd = array_fd(&ebpf, maps::SITES)?;
            sys::array_update_batch(fd, 0, opts.specs).map_err(|e| TraceError::Map {
                name: maps::SITES,
                msg: e.to_string(),
            })?;
        }
        {
            let mut cfg: Array<_, Config> = Array::try_from(
                ebpf.map_mut(maps::CONFIG)
                    .ok_or(TraceError::MissingMap(maps::CONFIG))?,
            )
            .map_err(map_err(maps::CONFIG))?;
            let vmlinux = std::fs::read(VMLINUX_BTF)
                .map_err(|e| TraceError::Btf(format!("{VMLINUX_BTF}: {e}")))?;
            let task_pid_off = crate::btf::member_offset(&vmlinux, "task_struct", "pid")
                .map_err(|e| TraceError::Btf(e.to_string()))?;
            // Nested members, optional: without them only the repair of switch-ins that
            // sched_switch never reports is off (ThreadState::catch_up_running).
            let nested = |s: &str, m: &str, inner: &str, field: &str| {
                let outer = crate::btf::member_offset(&vmlinux, s, m).ok()?;
                Some(outer + crate::btf::member_offset(&vmlinux, inner, field).ok()?)
            };
            // 0 is a real offset for some of these (`fdtable.max_fds`, `inode.i_mode`).
            let off = |s: &str, m: &str| {
                crate::btf::member_offset(&vmlinux, s, m).unwrap_or(usdt_trace_common::OFF_NONE)
            };
            let arg_off = |i: usize| {
                crate::syscalls::arg_members().map_or(usdt_trace_common::OFF_NONE, |members| {
                    off(members[i].0, members[i].1)
                })
            };
            let config = Config {
                flags: opts.config_flags(),
                // Wake the reader when an eighth of the ring is full.
                wakeup_bytes: opts.ring_bytes / 8,
                task_pid_off,
                task_exec_off: nested("task_struct", "se", "sched_entity", "sum_exec_runtime")
                    .unwrap_or(0),
                task_delay_off: nested("task_struct", "sched_info", "sched_info", "run_delay")
                    .unwrap_or(0),
                str_max: opts.str_max,
                // Optional like the counters: without it every wait is "other".
                regs_nr_off: crate::syscalls::nr_member()
                    .and_then(|(st, m)| crate::btf::member_offset(&vmlinux, st, m).ok())
                    .unwrap_or(0),
                // Optional: without it a thread first seen in a wait record is named from /proc.
                task_comm_off: crate::btf::member_offset(&vmlinux, "task_struct", "comm")
                    .unwrap_or(0),
                // Optional: without them no steal is split off the on-CPU time, and doctor
                // says so. `se.cfs_rq` exists with group scheduling (every distribution kernel).
                task_cfs_rq_off: nested("task_struct", "se", "sched_entity", "cfs_rq").unwrap_or(0),
                cfs_rq_rq_off: crate::btf::member_offset(&vmlinux, "cfs_rq", "rq").unwrap_or(0),
                rq_clock_off: crate::btf::member_offset(&vmlinux, "rq", "clock").unwrap_or(0),
                rq_clock_task_off: crate::btf::member_offset(&vmlinux, "rq", "clock_task")
                    .unwrap_or(0),
                // Optional: without them a poll is a wait on the network and a read "other".
                regs_arg0_off: arg_off(0),
                regs_arg1_off: arg_off(1),
                task_files_off: off("task_struct", "files"),
                files_fdt_off: off("files_struct", "fdt"),
                fdt_max_fds_off: off("fdtable", "max_fds"),
                fdt_fd_off: off("fdtable", "fd"),
                file_inode_off: off("file", "f_inode"),
                inode_mode_off: off("inode", "i_mode"),
                // Waits may fill half the ring; the other half is the spans' alone.
                waits_max_bytes: opts.ring_bytes / 2,
                _pad: 0,
                min_ns: opts.min_ns,
            };
            cfg.set(0, config, 0).map_err(map_err(maps::CONFIG))?;
        }
        {
            let mut classes: Array<_, u8> = Array::try_from(
                ebpf.map_mut(maps::SYSCALL_CLASS)
                    .ok_or(TraceError::MissingMap(maps::SYSCALL_CLASS))?,
            )
            .map_err(map_err(maps::SYSCALL_CLASS))?;
            for (nr, class) in crate::syscalls::classes() {
                classes
                    .set(nr, class, 0)
                    .map_err(map_err(maps::SYSCALL_CLASS))?;
            }
        }
        if let Some((prog, masks)) = &opts.filter {
            let mut f: Array<_, FilterProg> = Array::try_from(
                ebpf.map_mut(maps::FILTER)
                    .ok_or(TraceError::MissingMap(maps::FILTER))?,
            )
            .map_err(map_err(maps::FILTER))?;
            f.set(0, *prog, 0).map_err(map_err(maps::FILTER))?;
            let fd = array_fd(&ebpf, maps::FILTER_SITES)?;
            sys::array_update_batch(fd, 0, masks).map_err(|e| TraceError::Map {
                name: maps::FILTER_SITES,
                msg: e.to_string(),
            })?;
        }
        // --count attaches its own program at every site (see usdt-trace-ebpf's agg.rs).
        let site_prog = if opts.agg.count {
            "usdt_count_site"
        } else {
            uprobe_program(opts.sched, opts.null_program)
        };
        let multi_prog = match path {
            AttachPath::Multi => Some(
                multi::load_program(EBPF_OBJECT, site_prog, ebpf.maps())
                    .map_err(|e| TraceError::Load(format!("{site_prog} for uprobe_multi: {e}")))?,
            ),
            AttachPath::Perf => None,
        };
        // The exit hook always runs: it frees the state of threads that die with open spans.
        let mut hooks: Vec<&'static str> = vec!["sched_process_exit"];
        if opts.sched {
            hooks.extend(["sched_switch", "sched_waking", "sched_wakeup"]);
            // Interrupt context, so a wakeup from a timer or an IRQ is not blamed on the task
            // the interrupt happened to hit.
            // Exits before entries: an entry attached before its exit could count an
            // interrupt that is never uncounted, and that CPU would then blame every later
            // wakeup on an interrupt. An exit without its entry is ignored.
            hooks.extend([
                "irq_handler_exit",
                "softirq_exit",
                "hrtimer_expire_exit",
                "irq_handler_entry",
                "softirq_entry",
                "hrtimer_expire_entry",
            ]);
        }
        let btf = aya::Btf::from_sys_fs().map_err(|e| TraceError::Btf(e.to_string()))?;
        for name in hooks {
            let tp: &mut BtfTracePoint = ebpf
                .program_mut(name)
                .ok_or(TraceError::MissingProgram("scheduler hook"))?
                .try_into()
                .map_err(|e: ProgramError| TraceError::Load(e.to_string()))?;
            tp.load(name, &btf)
                .map_err(|e| TraceError::Load(error_chain(&e)))?;
            tp.attach()
                .map_err(|source| TraceError::Tracepoint { name, source })?;
        }
        let ring = RingBuf::try_from(
            ebpf.take_map(maps::EVENTS)
                .ok_or(TraceError::MissingMap(maps::EVENTS))?,
        )
        .map_err(map_err(maps::EVENTS))?;
        let mut t = Tracer {
            ebpf,
            ring,
            path,
            uprobe_type: features.uprobe_pmu_type,
            ref_ctr_shift: features.ref_ctr_shift,
            fds: Vec::new(),
            multi_links: Vec::new(),
            fd_paths: Vec::new(),
            multi_paths: Vec::new(),
            owner_names: std::collections::HashMap::new(),
            multi_prog,
            prog_fd: None,
            sites: 0,
            hist_pairs: hist_pairs as usize,
            agg_by: None,
            site_capacity: nsites,
            wake_fds: Vec::new(),
            site_prog,
            user_min_ns: opts.min_ns,
            execs: None,
            exec_link: None,
        };
        t.agg_init(&opts.agg)?;
        if path == AttachPath::Perf {
            t.perf_prog()?;
        }
        // For developers adding to the eBPF programs: how close the uprobe program is to the
        // verifier's budget with this run's options (`tests/tests/watch_verifier.rs` keeps
        // headroom under every option at once).
        if std::env::var_os("USDT_TRACE_VERIFIER_STATS").is_some() {
            match t.verified_insns() {
                Some(n) => {
                    eprintln!("verifier: {site_prog}: {n} instructions processed (budget 1000000)")
                }
                None => eprintln!("verifier: {site_prog}: the kernel does not report it"),
            }
        }
        Ok(t)
    }

    /// Instructions the verifier processed for the uprobe program (see
    /// `sys::prog_verified_insns`).
    pub fn verified_insns(&self) -> Option<u32> {
        let fd = self
            .multi_prog
            .as_ref()
            .map(|f| f.as_raw_fd())
            .or(self.prog_fd)?;
        sys::prog_verified_insns(fd)
    }

    /// The program as loaded by aya for perf-event links (loaded on first use).
    fn perf_prog(&mut self) -> Result<i32, TraceError> {
        if let Some(fd) = self.prog_fd {
            return Ok(fd);
        }
        let prog: &mut UProbe = self
            .ebpf
            .program_mut(self.site_prog)
            .ok_or(TraceError::MissingProgram("usdt_site"))?
            .try_into()
            .map_err(|e: ProgramError| TraceError::Load(e.to_string()))?;
        prog.load().map_err(|e| {
            if sys::is_permission_error(&format!("{e:#}")) && !sys::is_root() {
                TraceError::Permission
            } else {
                TraceError::Load(error_chain(&e))
            }
        })?;
        let fd = prog
            .fd()
            .map_err(|e| TraceError::Load(e.to_string()))?
            .as_fd()
            .as_raw_fd();
        self.prog_fd = Some(fd);
        Ok(fd)
    }

    /// Adds the specs of sites planned after load, from cookie `first` on, with their
    /// `--filter` masks; they must fit the room reserved at load (`spare_sites`).
    pub fn add_sites(
        &mut self,
        first: u32,
        specs: &[SiteSpec],
        masks: Option<&[u32]>,
    ) -> Result<(), TraceError> {
        let end = first as u64 + specs.len() as u64;
        if end > self.site_capacity as u64 {
            return Err(TraceError::SitesFull {
                n: specs.len(),
                room: self.site_capacity,
            });
        }
        let mut sites: Array<_, SiteSpec> = Array::try_from(
            self.ebpf
                .map_mut(maps::SITES)
                .ok_or(TraceError::MissingMap(maps::SITES))?,
        )
        .map_err(map_err(maps::SITES))?;
        for (i, s) in specs.iter().enumerate() {
            sites
                .set(first + i as u32, *s, 0)
                .map_err(map_err(maps::SITES))?;
        }
        if let Some(masks) = masks {
            let mut f: Array<_, u32> = Array::try_from(
                self.ebpf
                    .map_mut(maps::FILTER_SITES)
                    .ok_or(TraceError::MissingMap(maps::FILTER_SITES))?,
            )
            .map_err(map_err(maps::FILTER_SITES))?;
            for (i, m) in masks.iter().enumerate().filter(|(_, m)| **m != 0) {
                f.set(first + i as u32, *m, 0)
                    .map_err(map_err(maps::FILTER_SITES))?;
            }
        }
        Ok(())
    }

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

    /// Attach the program at every site of one object. `path` must name the very file that
    /// was parsed (`/proc/self/fd/N`). `pid` limits the uprobes to one process; None traces
    /// every process that maps the file, now or later. One uprobe_multi link, or a perf event
    /// per site, as chosen at load.
    pub fn attach_object(
        &mut self,
        path: &str,
        points: &[AttachPoint],
        pid: Option<u32>,
    ) -> Result<(), TraceError> {
        if points.is_empty() {
            return Ok(());
        }
        let owner: Rc<str> = Rc::from(path);
        match self.path {
            AttachPath::Multi => {
                let prog = self
                    .multi_prog
                    .as_ref()
                    .ok_or(TraceError::MissingProgram("usdt_site"))?;
                // Return probes need a link of their own (the flag is per link); several links
                // when one object has more sites than a link takes.
                let (rets, plain): (Vec<AttachPoint>, Vec<AttachPoint>) =
                    points.iter().partition(|p| p.ret);
                for chunk in multi_chunks(&plain).chain(multi_chunks(&rets)) {
                    let ret = chunk[0].ret;
                    let triples: Vec<(u64, u64, u64)> = chunk
                        .iter()
                        .map(|p| (p.offset, p.ref_ctr.unwrap_or(0), p.cookie as u64))
                        .collect();
                    let link =
                        multi::attach(prog.as_raw_fd(), path, &triples, pid.unwrap_or(0), ret)
                            .map_err(|e| TraceError::Attach {
                                path: path.to_string(),
                                point: (chunk.len() == 1).then(|| chunk[0]),
                                msg: multi_error(&e, chunk),
                            })?;
                    self.multi_links.push(link);
                    self.multi_paths.push((owner.clone(), chunk.len()));
                    self.sites += chunk.len();
                }
            }
            AttachPath::Perf => {
                // The same sites attached for several processes add up.
                check_perf_sites(self.sites + points.len())?;
                for p in points {
                    self.attach_site(path, *p, pid)?;
                    self.fd_paths.push(owner.clone());
                    self.fd_paths.push(owner.clone());
                }
            }
        }
        Ok(())
    }

    /// Attach the program at one site through a perf event. `path` must name the very file
    /// that was parsed (use `/proc/self/fd/N` of the descriptor it was read from). `pid`
    /// limits the uprobe to one process; None traces every process that maps the file, now
    /// or later.
    fn attach_site(
        &mut self,
        path: &str,
        point: AttachPoint,
        pid: Option<u32>,
    ) -> Result<(), TraceError> {
        let err = |msg: String| TraceError::Attach {
            path: path.to_string(),
            point: Some(point),
            msg,
        };
        let pmu = self
            .uprobe_type
            .ok_or_else(|| err("the uprobe PMU is missing".into()))?;
        let shift =
            match (point.ref_ctr, self.ref_ctr_shift) {
                (Some(_), None) => return Err(err(
                    "this kernel's uprobe PMU has no ref_ctr_offset: it cannot raise the semaphore"
                        .into(),
                )),
                (_, shift) => shift.unwrap_or(0),
            };
        let pfd = sys::open_uprobe(
            pmu,
            shift,
            path,
            point.offset,
            point.ref_ctr,
            pid,
            point.ret,
        )
        .map_err(|e| {
            err(match e.raw_os_error() {
                Some(libc::EINVAL) => format!(
                    "{e} (another tracer may hold this site with a different semaphore setting)"
                ),
                Some(libc::ESRCH) => "no such process".to_string(),
                _ => e.to_string(),
            })
        })?;
        let prog_fd = self.perf_prog()?;
        let link = sys::link_perf_event(prog_fd, pfd.as_raw_fd(), point.cookie as u64)
            .map_err(|e| err(format!("BPF_LINK_CREATE: {e}")))?;
        self.fds.push(pfd);
        self.fds.push(link);
        self.sites += 1;
        Ok(())
    }

    /// Stop recording (hits during the detach are ignored), then detach every uprobe; the
    /// semaphores drop back to 0.
    ///
    /// The kernel unregisters each perf-event uprobe under a global mutex and waits for an
    /// RCU-tasks grace period while holding it (~0.1 s each here), so 500 sites take close to a
    /// minute to detach however many threads close them. Up to [`INLINE_DETACH`] sites are
    /// detached here; beyond that a forked helper process holds the last references and
    /// detaches them in the background, so `watch` exits at once. Either way nothing is
    /// recorded after this call.
    pub fn detach_all(&mut self) -> Detach {
        if let Some(Ok(mut cfg)) = self
            .ebpf
            .map_mut(maps::CONFIG)
            .map(Array::<_, Config>::try_from)
        {
            if let Ok(mut c) = cfg.get(&0, 0) {
                c.flags |= CFG_STOPPED;
                let _ = cfg.set(0, c, 0);
            }
        }
        // A uprobe_multi link detaches all its sites behind one grace period.
        self.multi_links.clear();
        self.multi_paths.clear();
        self.fd_paths.clear();
        self.owner_names.clear();
        let fds = std::mem::take(&mut self.fds);
        let sites = std::mem::take(&mut self.sites);
        Self::drop_links(fds, sites)
    }

    /// `--perfetto-max-waits` reached: from now on the scheduler hooks count off-CPU intervals
    /// (`CNT_WAITS_CAPPED`) instead of sending them.
    pub fn cap_waits(&mut self) -> Result<(), TraceError> {
        let mut cfg: Array<_, Config> = Array::try_from(
            self.ebpf
                .map_mut(maps::CONFIG)
                .ok_or(TraceError::MissingMap(maps::CONFIG))?,
        )
        .map_err(map_err(maps::CONFIG))?;
        let mut c = cfg.get(&0, 0).map_err(map_err(maps::CONFIG))?;
        c.flags |= CFG_WAITS_CAPPED;
        cfg.set(0, c, 0).map_err(map_err(maps::CONFIG))
    }

    /// Detaches every site attached through `path` (one object, for every process), and only
    /// those; the rest keep recording. As [`Tracer::detach_all`], many perf-event sites are
    /// handed to a helper process so that the caller does not wait.
    pub fn detach_object(&mut self, path: &str) -> Detach {
        let mut sites = 0;
        let links = std::mem::take(&mut self.multi_links);
        for (link, (p, n)) in links.into_iter().zip(std::mem::take(&mut self.multi_paths)) {
            if &*p == path {
                // A uprobe_multi link detaches all its sites behind one grace period.
                drop(link);
                sites += n;
            } else {
                self.multi_links.push(link);
                self.multi_paths.push((p, n));
            }
        }
        let mut gone = Vec::new();
        let fds = std::mem::take(&mut self.fds);
        for (fd, p) in fds.into_iter().zip(std::mem::take(&mut self.fd_paths)) {
            if &*p == path {
                gone.push(fd);
            } else {
                self.fds.push(fd);
                self.fd_paths.push(p);
            }
        }
        sites += gone.len() / 2;
        self.sites = self.sites.saturating_sub(sites);
        self.owner_names.remove(path);
        Self::drop_links(gone, sites)
    }

    /// Closes perf-event attachments `fds` (`sites` sites in all): here when few, else in a
    /// helper process (see [`Tracer::detach_all`]).
    fn drop_links(fds: Vec<OwnedFd>, sites: usize) -> Detach {
        if fds.len() / 2 <= INLINE_DETACH {
            drop(fds);
            return Detach::Done(sites);
        }
        match sys::hand_off_to_reaper(fds) {
            Ok(pid) => Detach::Background { sites, pid },
            Err(_) => Detach::Done(sites),
        }
    }

    /// Wait up to `timeout` for records, then hand each one to `f`, at most [`MAX_BATCH`] per
    /// call so that the caller writes and checks for a stop between batches even when
    /// producers never pause. Returns how many were read.
    pub fn poll(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&[u8]),
    ) -> Result<usize, TraceError> {
        let mut n = self.drain(&mut f);
        if n > 0 {
            return Ok(n);
        }
        let mut fds = vec![self.ring.as_fd().as_raw_fd()];
        fds.extend(&self.wake_fds);
        sys::wait_any_readable(&fds, timeout).map_err(TraceError::Poll)?;
        n += self.drain(&mut f);
        Ok(n)
    }

    fn drain(&mut self, f: &mut impl FnMut(&[u8])) -> usize {
        let mut n = 0;
        while n < MAX_BATCH {
            let Some(item) = self.ring.next() else { break };
            f(&item);
            n += 1;
        }
        n
    }

    /// Probe hits the kernel did not run our uprobe program for: it skips a BPF program when
    /// another one is already running on that CPU (a uprobe program can be preempted midway,
    /// and the next thread on the CPU then hits a probe). Those hits never reach the program,
    /// so no counter of ours sees them; the kernel counts them in the program's
    /// `recursion_misses`. None when the kernel does not report it.
    pub fn missed_hits(&self) -> Option<u64> {
        let fds = self
            .multi_prog
            .as_ref()
            .map(|f| f.as_raw_fd())
            .into_iter()
            .chain(self.prog_fd);
        let mut total = None;
        for fd in fds {
            let m = sys::prog_recursion_misses(fd)?;
            *total.get_or_insert(0) += m;
        }
        total
    }

    pub fn counters(&self) -> Result<Counters, TraceError> {
        let map: PerCpuArray<_, u64> = PerCpuArray::try_from(
            self.ebpf
                .map(maps::COUNTERS)
                .ok_or(TraceError::MissingMap(maps::COUNTERS))?,
        )
        .map_err(map_err(maps::COUNTERS))?;
        let mut v = [0u64; NUM_COUNTERS as usize];
        for (i, slot) in v.iter_mut().enumerate() {
            let per_cpu = map.get(&(i as u32), 0).map_err(map_err(maps::COUNTERS))?;
            *slot = per_cpu.iter().sum();
        }
        use usdt_trace_common::*;
        Ok(Counters {
            events: v[CNT_EVENTS as usize],
            spans: v[CNT_SPANS as usize],
            lost: v[CNT_LOST as usize],
            unmatched_start: v[CNT_UNMATCHED_START as usize],
            unmatched_end: v[CNT_UNMATCHED_END as usize],
            strs_dropped: v[CNT_STRS_DROPPED as usize],
            strs_lost: v[CNT_STRS_LOST as usize],
            waits_lost: v[CNT_WAITS_LOST as usize],
            waits_capped: v[CNT_WAITS_CAPPED as usize],
            threads_full: v[CNT_THREADS_FULL as usize],
            threads_full_ends: v[CNT_THREADS_FULL_END as usize],
            id_full: v[CNT_ID_FULL as usize],
            id_full_ends: v[CNT_ID_FULL_END as usize],
            depth: v[CNT_DEPTH_START as usize],
            depth_ends: v[CNT_DEPTH_END as usize],
            below_min: v[CNT_BELOW_MIN as usize],
            filter_rejected: v[CNT_FILTER_REJECT as usize],
        })
    }

    /// Spans still open right now: starts that have not seen their end.
    pub fn open_spans(&self) -> Result<u64, TraceError> {
        let ids: BpfHashMap<_, IdKey, usdt_trace_common::IdFrame> = BpfHashMap::try_from(
            self.ebpf
                .map(maps::ID_SPANS)
                .ok_or(TraceError::MissingMap(maps::ID_SPANS))?,
        )
        .map_err(map_err(maps::ID_SPANS))?;
        let mut by_id = ids.keys().filter(|k| k.is_ok()).count() as u64;
        let slots: aya::maps::Array<_, usdt_trace_common::IdSlot> = aya::maps::Array::try_from(
            self.ebpf
                .map(maps::ID_SLOTS)
                .ok_or(TraceError::MissingMap(maps::ID_SLOTS))?,
        )
        .map_err(map_err(maps::ID_SLOTS))?;
        for slot in slots.iter().flatten() {
            by_id += (slot.state == usdt_trace_common::ID_SLOT_OPEN) as u64;
        }
        let threads: BpfHashMap<_, u32, usdt_trace_common::ThreadState> = BpfHashMap::try_from(
            self.ebpf
                .map(maps::THREADS)
                .ok_or(TraceError::MissingMap(maps::THREADS))?,
        )
        .map_err(map_err(maps::THREADS))?;
        let mut on_threads = 0u64;
        for (_, st) in threads.iter().flatten() {
            on_threads += st.depth as u64;
        }
        Ok(by_id + on_threads)
    }

    /// What the spans of each of `npairs` span names waited on (`--hist`), summed over CPUs:
    /// cumulative, like [`Tracer::hists`].
    pub fn wait_sums(&self, npairs: usize) -> Result<Vec<WaitSums>, TraceError> {
        let map: PerCpuArray<_, WaitSums> = PerCpuArray::try_from(
            self.ebpf
                .map(maps::WAIT_SUMS)
                .ok_or(TraceError::MissingMap(maps::WAIT_SUMS))?,
        )
        .map_err(map_err(maps::WAIT_SUMS))?;
        let mut out = vec![WaitSums::default(); npairs];
        for (pair, w) in out.iter_mut().enumerate().take(self.hist_pairs) {
            for v in map
                .get(&(pair as u32), 0)
                .map_err(map_err(maps::WAIT_SUMS))?
                .iter()
            {
                w.merge(v);
            }
        }
        Ok(out)
    }

    /// Histograms of `npairs` span names: for each, the five components summed over CPUs.
    pub fn hists(&self, npairs: usize) -> Result<Vec<[Hist; HIST_COMPONENTS]>, TraceError> {
        let map: PerCpuArray<_, Hist> = PerCpuArray::try_from(
            self.ebpf
                .map(maps::HISTS)
                .ok_or(TraceError::MissingMap(maps::HISTS))?,
        )
        .map_err(map_err(maps::HISTS))?;
        let mut out = Vec::with_capacity(npairs);
        for pair in 0..npairs {
            let mut comps = [Hist::default(); HIST_COMPONENTS];
            // A span name with no start site has no slot: nothing was counted for it.
            if pair >= self.hist_pairs {
                out.push(comps);
                continue;
            }
            for (c, slot) in comps.iter_mut().enumerate() {
                let idx = (pair * HIST_COMPONENTS + c) as u32;
                for h in map.get(&idx, 0).map_err(map_err(maps::HISTS))?.iter() {
                    agg::sum_hist(slot, h);
                }
            }
            usdt_trace_common::fill_zero_parts(&mut comps);
            out.push(comps);
        }
        // Under --by the kernel counts a span's duration once, in its key's histogram or its
        // name's "other" or "unkeyed", not again in the name's own: the name's is their sum (exact: both
        // are read here, and every span goes to one of them).
        if self.agg_by.is_some() {
            let by = self.by_hists(npairs)?;
            for (k, h) in &by.keys {
                if let Some(comps) = out.get_mut(k.id as usize) {
                    agg::sum_hist(&mut comps[HIST_DURATION], h);
                }
            }
            for hists in [&by.other, &by.unkeyed] {
                for (comps, h) in out.iter_mut().zip(hists) {
                    agg::sum_hist(&mut comps[HIST_DURATION], h);
                }
            }
        }
        Ok(out)
    }
}

/// The points of one object split into uprobe_multi links the kernel accepts.
fn multi_chunks(points: &[AttachPoint]) -> std::slice::Chunks<'_, AttachPoint> {
    points.chunks(MULTI_LINK_MAX_SITES)
}

/// Refuses more sites than the perf-event path can attach and detach in reasonable time.
fn check_perf_sites(sites: usize) -> Result<(), TraceError> {
    if sites > PERF_MAX_SITES {
        return Err(TraceError::TooManyPerfSites {
            sites,
            max: PERF_MAX_SITES,
        });
    }
    Ok(())
}

/// Descriptors `watch` holds besides the perf path's two per site (maps, programs, links of
/// the scheduler hooks, the ring buffer, stdio, the objects being read).
const FD_RESERVE: u64 = 256;

/// The perf path holds a perf event and a link per site: refuse up front, with the numbers,
/// when the open-file limit cannot hold them, instead of failing with EMFILE half-way through
/// attaching.
fn check_perf_fds(sites: usize, nofile: u64) -> Result<(), TraceError> {
    let needed = 2 * sites as u64 + FD_RESERVE;
    if needed > nofile {
        return Err(TraceError::PerfFds {
            sites,
            needed,
            limit: nofile,
        });
    }
    Ok(())
}

/// Why a uprobe_multi link failed. The kernel does not say which site, so hint at the mode
/// that does.
fn multi_error(e: &std::io::Error, points: &[AttachPoint]) -> String {
    match e.raw_os_error() {
        Some(libc::ESRCH) => "no such process".to_string(),
        // Also without a semaphore: a site attached without one (counted by hand,
        // `semaphores::hand_over`) is refused while another tracer holds it with one.
        Some(libc::EINVAL) if points.len() > 1 => {
            format!(
                "uprobe_multi link for {} sites: {e} (another tracer may hold one of them with a \
                 different semaphore setting, or hold it no more but leaked it: see the kernel \
                 log for \"leaking uprobe\", which lasts until reboot; attach mode perf names \
                 the site)",
                points.len()
            )
        }
        Some(libc::EINVAL) if points.len() == 1 => {
            format!("{e} (another tracer may hold this site with a different semaphore setting)")
        }
        _ if points.len() > 1 => format!("uprobe_multi link for {} sites: {e}", points.len()),
        _ => e.to_string(),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    // The verifier log can be megabytes on one line; its end is where the reason is.
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    const KEEP: usize = 600;
    if s.len() > KEEP {
        let cut = s.len() - KEEP;
        let cut = (cut..s.len())
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(cut);
        format!("... {}", &s[cut..])
    } else {
        s
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
