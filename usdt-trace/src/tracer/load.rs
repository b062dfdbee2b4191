//! Loading: the eBPF object with this run's configuration and maps sized from the flags,
//! verified once, its programs attached to the scheduler and interrupt tracepoints.

use super::*;

/// The uprobe program to attach: `usdt_site`, or without the scheduler hooks
/// `usdt_site_nosplit` (no time split, and id-paired spans touch no thread state), or for
/// benchmarks (`null`, the hidden `--bench-null-program`) `usdt_null`, which only returns (the
/// floor any handler pays: `bench/handler.py`). Not a user option: nothing is traced then.
pub(super) fn uprobe_program(sched: bool, null: bool) -> &'static str {
    if null {
        "usdt_null"
    } else if sched {
        "usdt_site"
    } else {
        "usdt_site_nosplit"
    }
}

/// The fd of array map `name` (borrowed from `ebpf`).
pub(super) fn array_fd(ebpf: &Ebpf, name: &'static str) -> Result<std::os::fd::RawFd, TraceError> {
    match ebpf.map(name) {
        Some(aya::maps::Map::Array(d)) => Ok(d.fd().as_fd().as_raw_fd()),
        Some(_) => Err(TraceError::Map {
            name,
            msg: "not an array".into(),
        }),
        None => Err(TraceError::MissingMap(name)),
    }
}

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
    pub(super) fn config_flags(&self) -> u32 {
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
            let task_pid_off = crate::tracer::btf::member_offset(&vmlinux, "task_struct", "pid")
                .map_err(|e| TraceError::Btf(e.to_string()))?;
            // Nested members, optional: without them only the repair of switch-ins that
            // sched_switch never reports is off (ThreadState::catch_up_running).
            let nested = |s: &str, m: &str, inner: &str, field: &str| {
                let outer = crate::tracer::btf::member_offset(&vmlinux, s, m).ok()?;
                Some(outer + crate::tracer::btf::member_offset(&vmlinux, inner, field).ok()?)
            };
            // 0 is a real offset for some of these (`fdtable.max_fds`, `inode.i_mode`).
            let off = |s: &str, m: &str| {
                crate::tracer::btf::member_offset(&vmlinux, s, m)
                    .unwrap_or(usdt_trace_common::OFF_NONE)
            };
            let arg_off = |i: usize| {
                crate::tracer::syscalls::arg_members().map_or(
                    usdt_trace_common::OFF_NONE,
                    |members| {
                        let (st, m, plus) = members[i];
                        match off(st, m) {
                            usdt_trace_common::OFF_NONE => usdt_trace_common::OFF_NONE,
                            o => o + plus,
                        }
                    },
                )
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
                regs_nr_off: crate::tracer::syscalls::nr_member()
                    .and_then(|(st, m)| crate::tracer::btf::member_offset(&vmlinux, st, m).ok())
                    .unwrap_or(0),
                // Optional: without it a thread first seen in a wait record is named from /proc.
                task_comm_off: crate::tracer::btf::member_offset(&vmlinux, "task_struct", "comm")
                    .unwrap_or(0),
                // Optional: without them no steal is split off the on-CPU time, and doctor
                // says so. `se.cfs_rq` exists with group scheduling (every distribution kernel).
                task_cfs_rq_off: nested("task_struct", "se", "sched_entity", "cfs_rq").unwrap_or(0),
                cfs_rq_rq_off: crate::tracer::btf::member_offset(&vmlinux, "cfs_rq", "rq")
                    .unwrap_or(0),
                rq_clock_off: crate::tracer::btf::member_offset(&vmlinux, "rq", "clock")
                    .unwrap_or(0),
                rq_clock_task_off: crate::tracer::btf::member_offset(&vmlinux, "rq", "clock_task")
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
            for (nr, class) in crate::tracer::syscalls::classes() {
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
}
