//! The only module that touches aya and the kernel.
//!
//! It loads the eBPF object built by `build.rs`, fills the spec table, attaches the generic
//! uprobe program at every site, and reads the ring buffer. Each site's attachment carries a
//! BPF cookie, its index in the spec table, and the file offset of its semaphore, which the
//! kernel raises while the probe is attached (`ref_ctr_offset`).
//!
//! Sites are attached with one `BPF_TRACE_UPROBE_MULTI` link per object (see [`multi`]), which
//! takes offsets, semaphore offsets and cookies for all sites at once and detaches them behind
//! a single grace period. Where the kernel has no uprobe_multi, each site gets a uprobe opened
//! with `perf_event_open` on the uprobe PMU (aya 0.14 cannot set `ref_ctr_offset`) and a
//! `BPF_LINK_CREATE` link with the cookie. Every link and perf event is an owned file
//! descriptor, so when this process exits, however it exits (even SIGKILL), the kernel
//! detaches the probes and lowers the semaphores.

mod multi;
mod sys;

use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, ProgramError, UProbe},
    Ebpf, EbpfLoader,
};
use std::{
    os::fd::{AsFd, AsRawFd, OwnedFd},
    time::Duration,
};
use thiserror::Error;
use usdt_trace_common::{
    Config, Hist, IdKey, SiteSpec, CFG_PID_FILTER, CFG_STOPPED, HIST_COMPONENTS, MAX_PAIRS,
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
    #[error("attaching the tracepoint {name}: {source}")]
    Tracepoint {
        name: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("the kernel's BTF is needed for the scheduler hooks: {0}")]
    Btf(String),
    #[error("the uprobe PMU is missing ({0}); is CONFIG_UPROBE_EVENTS enabled?")]
    NoUprobePmu(String),
    #[error("attaching at {path} offset {offset:#x}{}: {msg}", sema.map(|s| format!(" (semaphore at {s:#x})")).unwrap_or_default())]
    Attach {
        path: String,
        offset: u64,
        sema: Option<u64>,
        msg: String,
    },
    #[error("reading the ring buffer: {0}")]
    Poll(std::io::Error),
}

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

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
    pub filtered: u64,
    pub no_state: u64,
}

/// What to load.
pub struct LoadOptions<'a> {
    pub specs: &'a [SiteSpec],
    pub flags: u32,
    /// Ring buffer size in bytes (a power of two, multiple of the page size).
    pub ring_bytes: u32,
    /// Processes to accept when `flags` has CFG_PID_FILTER.
    pub pids: &'a [u32],
    /// Attach the scheduler tracepoints (time attribution, thread-exit cleanup).
    pub sched: bool,
}

pub struct Tracer {
    ebpf: Ebpf,
    ring: RingBuf<MapData>,
    uprobe_type: u32,
    /// perf event and link fds (per-site attachments); dropping them detaches.
    fds: Vec<OwnedFd>,
    /// uprobe_multi links, one per object and process; dropping them detaches.
    multi_links: Vec<OwnedFd>,
    /// The program loaded for uprobe_multi links, when the kernel supports them.
    multi_prog: Option<OwnedFd>,
    /// The same program loaded by aya for perf-event attachment (the fallback), on demand.
    prog_fd: Option<i32>,
    /// Sites attached so far.
    sites: usize,
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
        if !sys::may_trace() {
            return Err(TraceError::Permission);
        }
        sys::raise_memlock_limit();
        let uprobe_type = sys::uprobe_pmu_type().map_err(TraceError::NoUprobePmu)?;
        let nsites = opts.specs.len().max(1) as u32;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("SITES", nsites)
            .map_max_entries("EVENTS", opts.ring_bytes)
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
            let mut sites: Array<_, SiteSpec> = Array::try_from(
                ebpf.map_mut("SITES")
                    .ok_or(TraceError::MissingMap("SITES"))?,
            )
            .map_err(map_err("SITES"))?;
            for (i, s) in opts.specs.iter().enumerate() {
                sites.set(i as u32, *s, 0).map_err(map_err("SITES"))?;
            }
        }
        {
            let mut cfg: Array<_, Config> = Array::try_from(
                ebpf.map_mut("CONFIG")
                    .ok_or(TraceError::MissingMap("CONFIG"))?,
            )
            .map_err(map_err("CONFIG"))?;
            let vmlinux = std::fs::read(VMLINUX_BTF)
                .map_err(|e| TraceError::Btf(format!("{VMLINUX_BTF}: {e}")))?;
            let task_pid_off = crate::btf::member_offset(&vmlinux, "task_struct", "pid")
                .map_err(|e| TraceError::Btf(e.to_string()))?;
            // Nested members; optional: without them only the repair of missed switch-ins is off.
            let nested = |s: &str, m: &str, inner: &str, field: &str| {
                let outer = crate::btf::member_offset(&vmlinux, s, m).ok()?;
                Some(outer + crate::btf::member_offset(&vmlinux, inner, field).ok()?)
            };
            let config = Config {
                flags: opts.flags,
                // Wake the reader when an eighth of the ring is full.
                wakeup_bytes: opts.ring_bytes / 8,
                task_pid_off,
                task_exec_off: nested("task_struct", "se", "sched_entity", "sum_exec_runtime")
                    .unwrap_or(0),
                task_delay_off: nested("task_struct", "sched_info", "sched_info", "run_delay")
                    .unwrap_or(0),
                _pad: 0,
            };
            cfg.set(0, config, 0).map_err(map_err("CONFIG"))?;
        }
        if opts.flags & CFG_PID_FILTER != 0 {
            let mut pids: BpfHashMap<_, u32, u8> =
                BpfHashMap::try_from(ebpf.map_mut("PIDS").ok_or(TraceError::MissingMap("PIDS"))?)
                    .map_err(map_err("PIDS"))?;
            for &p in opts.pids {
                pids.insert(p, 1, 0).map_err(map_err("PIDS"))?;
            }
        }
        // Prefer one uprobe_multi link per object; aya's own load is the fallback.
        let multi_prog = multi::load_program(EBPF_OBJECT, "usdt_site", ebpf.maps()).ok();
        // The exit hook always runs: it frees the state of threads that die with open spans.
        let mut hooks: Vec<&'static str> = vec!["sched_process_exit"];
        if opts.sched {
            hooks.extend(["sched_switch", "sched_waking"]);
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
            ebpf.take_map("EVENTS")
                .ok_or(TraceError::MissingMap("EVENTS"))?,
        )
        .map_err(map_err("EVENTS"))?;
        let mut t = Tracer {
            ebpf,
            ring,
            uprobe_type,
            fds: Vec::new(),
            multi_links: Vec::new(),
            multi_prog,
            prog_fd: None,
            sites: 0,
        };
        if t.multi_prog.is_none() {
            t.perf_prog()?;
        }
        Ok(t)
    }

    /// The program as loaded by aya for perf-event links (loaded on first use).
    fn perf_prog(&mut self) -> Result<i32, TraceError> {
        if let Some(fd) = self.prog_fd {
            return Ok(fd);
        }
        let prog: &mut UProbe = self
            .ebpf
            .program_mut("usdt_site")
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

    /// Attach the program at every site of one object: `(file offset, semaphore offset,
    /// cookie)` each. `path` must name the very file that was parsed (`/proc/self/fd/N`).
    /// `pid` limits the uprobes to one process; None traces every process that maps the file,
    /// now or later. One uprobe_multi link when the kernel has them, else a perf event per site.
    pub fn attach_object(
        &mut self,
        path: &str,
        sites: &[(u64, Option<u64>, u32)],
        pid: Option<u32>,
    ) -> Result<(), TraceError> {
        if sites.is_empty() {
            return Ok(());
        }
        if let Some(prog) = &self.multi_prog {
            let triples: Vec<(u64, u64, u64)> = sites
                .iter()
                .map(|&(off, sema, cookie)| (off, sema.unwrap_or(0), cookie as u64))
                .collect();
            match multi::attach(prog.as_raw_fd(), path, &triples, pid.unwrap_or(0)) {
                Ok(link) => {
                    self.multi_links.push(link);
                    self.sites += sites.len();
                    return Ok(());
                }
                // ESRCH is final (no such process); anything else may be a kernel without
                // uprobe_multi: try per-site perf events, whose errors name the site.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    return Err(TraceError::Attach {
                        path: path.to_string(),
                        offset: sites[0].0,
                        sema: None,
                        msg: "no such process".into(),
                    })
                }
                Err(_) => {}
            }
        }
        for &(off, sema, cookie) in sites {
            self.attach_site(path, off, sema, cookie, pid)?;
        }
        Ok(())
    }

    /// Attach the program at one site. `path` must name the very file that was parsed (use
    /// `/proc/self/fd/N` of the descriptor it was read from). `pid` limits the uprobe to one
    /// process; None traces every process that maps the file, now or later.
    fn attach_site(
        &mut self,
        path: &str,
        offset: u64,
        ref_ctr_offset: Option<u64>,
        cookie: u32,
        pid: Option<u32>,
    ) -> Result<(), TraceError> {
        let err = |msg: String| TraceError::Attach {
            path: path.to_string(),
            offset,
            sema: ref_ctr_offset,
            msg,
        };
        let pfd =
            sys::open_uprobe(self.uprobe_type, path, offset, ref_ctr_offset, pid).map_err(|e| {
                err(match e.raw_os_error() {
                    Some(libc::EINVAL) if ref_ctr_offset.is_some() => format!(
                        "{e} (another tracer may hold this site with a different semaphore setting)"
                    ),
                    Some(libc::ESRCH) => "no such process".to_string(),
                    _ => e.to_string(),
                })
            })?;
        let prog_fd = self.perf_prog()?;
        let link = sys::link_perf_event(prog_fd, pfd.as_raw_fd(), cookie as u64)
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
            .map_mut("CONFIG")
            .map(Array::<_, Config>::try_from)
        {
            if let Ok(mut c) = cfg.get(&0, 0) {
                c.flags |= CFG_STOPPED;
                let _ = cfg.set(0, c, 0);
            }
        }
        // A uprobe_multi link detaches all its sites behind one grace period.
        self.multi_links.clear();
        let fds = std::mem::take(&mut self.fds);
        let sites = std::mem::take(&mut self.sites);
        if fds.len() / 2 <= INLINE_DETACH {
            drop(fds);
            return Detach::Done(sites);
        }
        match sys::hand_off_to_reaper(fds) {
            Ok(pid) => Detach::Background { sites, pid },
            Err(_) => Detach::Done(sites),
        }
    }

    /// Wait up to `timeout` for records, then hand each one to `f`. Returns how many were read.
    pub fn poll(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&[u8]),
    ) -> Result<usize, TraceError> {
        let mut n = self.drain(&mut f);
        if n > 0 {
            return Ok(n);
        }
        sys::wait_readable(self.ring.as_fd().as_raw_fd(), timeout).map_err(TraceError::Poll)?;
        n += self.drain(&mut f);
        Ok(n)
    }

    fn drain(&mut self, f: &mut impl FnMut(&[u8])) -> usize {
        let mut n = 0;
        while let Some(item) = self.ring.next() {
            f(&item);
            n += 1;
        }
        n
    }

    pub fn counters(&self) -> Result<Counters, TraceError> {
        let map: PerCpuArray<_, u64> = PerCpuArray::try_from(
            self.ebpf
                .map("COUNTERS")
                .ok_or(TraceError::MissingMap("COUNTERS"))?,
        )
        .map_err(map_err("COUNTERS"))?;
        let mut v = [0u64; NUM_COUNTERS as usize];
        for (i, slot) in v.iter_mut().enumerate() {
            let per_cpu = map.get(&(i as u32), 0).map_err(map_err("COUNTERS"))?;
            *slot = per_cpu.iter().sum();
        }
        use usdt_trace_common::*;
        Ok(Counters {
            events: v[CNT_EVENTS as usize],
            spans: v[CNT_SPANS as usize],
            lost: v[CNT_LOST as usize],
            unmatched_start: v[CNT_UNMATCHED_START as usize],
            unmatched_end: v[CNT_UNMATCHED_END as usize],
            filtered: v[CNT_FILTERED as usize],
            no_state: v[CNT_NO_STATE as usize],
        })
    }

    /// Spans still open right now: starts that have not seen their end.
    pub fn open_spans(&self) -> Result<u64, TraceError> {
        let ids: BpfHashMap<_, IdKey, usdt_trace_common::Frame> = BpfHashMap::try_from(
            self.ebpf
                .map("ID_SPANS")
                .ok_or(TraceError::MissingMap("ID_SPANS"))?,
        )
        .map_err(map_err("ID_SPANS"))?;
        let by_id = ids.keys().filter(|k| k.is_ok()).count() as u64;
        let threads: BpfHashMap<_, u32, usdt_trace_common::ThreadState> = BpfHashMap::try_from(
            self.ebpf
                .map("THREADS")
                .ok_or(TraceError::MissingMap("THREADS"))?,
        )
        .map_err(map_err("THREADS"))?;
        let mut on_threads = 0u64;
        for (_, st) in threads.iter().flatten() {
            on_threads += st.depth as u64;
        }
        Ok(by_id + on_threads)
    }

    /// Histograms of `npairs` span names: for each, the five components summed over CPUs.
    pub fn hists(&self, npairs: usize) -> Result<Vec<[Hist; HIST_COMPONENTS]>, TraceError> {
        let map: PerCpuArray<_, Hist> = PerCpuArray::try_from(
            self.ebpf
                .map("HISTS")
                .ok_or(TraceError::MissingMap("HISTS"))?,
        )
        .map_err(map_err("HISTS"))?;
        let mut out = Vec::with_capacity(npairs);
        for pair in 0..npairs.min(MAX_PAIRS as usize) {
            let mut comps = [Hist::default(); HIST_COMPONENTS];
            for (c, slot) in comps.iter_mut().enumerate() {
                let idx = (pair * HIST_COMPONENTS + c) as u32;
                for h in map.get(&idx, 0).map_err(map_err("HISTS"))?.iter() {
                    for (a, b) in slot.buckets.iter_mut().zip(h.buckets.iter()) {
                        *a += b;
                    }
                    slot.count += h.count;
                    slot.sum += h.sum;
                }
            }
            out.push(comps);
        }
        Ok(out)
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
