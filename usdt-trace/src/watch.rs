//! `usdt-trace watch`: a short driver over stages that each live in their own module.
//!
//! 1. [`target`]: the named files, or every object of the `-p` processes, opened once (the
//!    uprobes attach through the same descriptor, so the kernel resolves the inode we parsed);
//! 2. [`plan`]: the chosen sites → one kernel spec and one printer record per cookie, and the
//!    attach points per object;
//! 3. [`crate::child`]: the `-c` command, forked and held until the probes are live;
//! 4. [`Tracer`]: load, attach, read the ring buffer, detach (the only kernel-facing stage);
//! 5. sinks ([`crate::output::Sink`]): every record, resolved by the plan, goes to them; the
//!    loop does not know which output mode is in use.

use crate::child::{Child, SpawnError, GRACE};
use crate::outfile;
use crate::output::otlp::{OtlpConfig, OtlpSink};
use crate::output::perfetto::PerfettoSink;
use crate::output::sink::{Fanout, Hists};
use crate::output::text::clean;
use crate::output::{self, JsonSink, RunInfo, Sink, Summary, TextSink, View};
use crate::outqueue::{self, QueueHandle};
use crate::pattern::Pattern;
use crate::plan::{self, Plan, PlanError, PlanOptions};
use crate::procmaps::ProcError;
use crate::spans::{SpanRule, StrRule};
use crate::target::{self, Object, TargetError};
use crate::tracer::{AttachMode, LoadOptions, TraceError, Tracer};
use std::collections::BTreeSet;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use usdt_trace_common::{Hist, StrSet, HIST_COMPONENTS, STRS_RECORD_SENT};

/// Validated `watch` settings (built by `cli`).
#[derive(Debug, Clone)]
pub struct WatchConfig {
    pub json: bool,
    pub targets: Vec<PathBuf>,
    pub pids: Vec<u32>,
    /// argv of `-c`.
    pub command: Option<Vec<String>>,
    pub duration: Option<Duration>,
    pub patterns: Vec<Pattern>,
    pub spans: Vec<SpanRule>,
    pub strs: Vec<StrRule>,
    /// `--str-max`: bytes kept of each string.
    pub str_max: u32,
    /// `--args`: argument names.
    pub names: Vec<plan::ArgNames>,
    pub auto_span: bool,
    pub hist: bool,
    pub interval: Option<Duration>,
    pub sched: bool,
    /// `--fn-returns`: how function probes trace a function's end.
    pub fn_returns: crate::elf::FnReturns,
    pub ring_bytes: u32,
    /// With `-c`: leave the command running when tracing stops first.
    pub leave_running: bool,
    /// How uprobes are attached (`--attach`).
    pub attach: AttachMode,
    /// `-o FILE`: records go there instead of stdout.
    pub output: Option<PathBuf>,
    /// `--max-threads`, `--max-open-ids`: kernel map sizes.
    pub max_threads: u32,
    pub max_open_ids: u32,
    /// `--perfetto FILE`: also write a Perfetto trace there.
    pub perfetto: Option<PathBuf>,
    /// `--otlp URL` and its settings: also export spans there.
    pub otlp: Option<OtlpConfig>,
    /// `--min`: spans shorter than this make no record (histograms count them all).
    pub min: Option<Duration>,
    /// `--filter` and `--tid`, combined; evaluated in the kernel.
    pub filter: Option<crate::filter::Filter>,
    /// `--stack`: the user stack at the end of each recorded span.
    pub stack: bool,
    /// `--by`, `--count`, `--top`, `--max-keys`.
    pub agg: AggArgs,
    /// `--wait-for-probes`: start with no matching probe, waiting for late ones.
    pub wait_for_probes: bool,
    /// `--bench-null-program` (hidden): attach `usdt_null`, which records nothing.
    pub bench_null_program: bool,
    /// `--prometheus ADDR`: serve the kernel's histograms at ADDR/metrics.
    pub prometheus: Option<PromConfig>,
}

/// `--prometheus ADDR` and `--prometheus-buckets`.
#[derive(Debug, Clone)]
pub struct PromConfig {
    pub addr: std::net::SocketAddr,
    /// Kernel bucket bounds exported per power of two (1, 2, 4 or 8).
    pub per_octave: u32,
}

/// The aggregation flags (see `crate::agg`).
#[derive(Debug, Clone, Default)]
pub struct AggArgs {
    pub by: Option<crate::agg::By>,
    pub count: bool,
    pub top: Option<usize>,
    pub max_keys: u32,
}

impl WatchConfig {
    /// Also attach to probes the traced processes define or load after the start
    /// ([`crate::late`]): with `-p` (no TARGET), `-c`, or a TARGET alone (the processes
    /// running it); not when both `-p` and TARGET narrow it down.
    fn late(&self) -> bool {
        self.pids.is_empty() || self.targets.is_empty()
    }

    /// `--wait-for-probes` where it applies: no match at start is a warning, not an error.
    fn waits(&self) -> bool {
        self.late() && self.wait_for_probes
    }

    fn plan_options(&self) -> PlanOptions<'_> {
        PlanOptions {
            patterns: &self.patterns,
            spans: &self.spans,
            strs: &self.strs,
            names: &self.names,
            auto_span: self.auto_span,
            optimize: crate::tracer::features::uprobe_optimize().is_yes(),
        }
    }

    /// What the tracer is loaded with, from the validated flags and the plan: `filter_masks`
    /// the `--filter` terms per site, `key_plan` the `--by` key. (The traced processes are not
    /// among them: each link is scoped to its process when attached.)
    fn load_options<'a>(
        &'a self,
        plan: &'a Plan,
        filter_masks: Option<&'a [u32]>,
        key_plan: Option<&crate::agg::KeyPlan>,
    ) -> LoadOptions<'a> {
        LoadOptions {
            specs: &plan.specs,
            ring_bytes: self.ring_bytes,
            hist: self.hist,
            // --count pairs nothing: no span for the scheduler hooks to split.
            sched: self.sched && !self.agg.count,
            attach: self.attach,
            max_threads: self.max_threads,
            max_open_ids: self.max_open_ids,
            str_max: self.str_max,
            strs: !self.strs.is_empty(),
            min_ns: self
                .min
                .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64),
            filter: self
                .filter
                .as_ref()
                .zip(filter_masks)
                .map(|(f, m)| (f.compile(), m)),
            stack: self.stack,
            agg: crate::tracer::AggLoad {
                count: self.agg.count,
                by: key_plan.map_or(0, |k| k.by.code()),
                by_args: key_plan.is_some_and(|k| k.by.reads_args()),
                by_sites: key_plan.map(|k| k.by_sites.clone()).unwrap_or_default(),
                max_keys: self.agg.max_keys,
            },
            null_program: self.bench_null_program,
            spare_sites: crate::late::SPARE_SITES * self.late() as u32,
            spare_pairs: crate::late::SPARE_PAIRS * self.late() as u32,
        }
    }

    /// Per site: a start whose spans pair by a usdt-markers span id (argument 0), so that
    /// argument 1 is the parent's id. An explicit `--key` rule on it means the user's own key,
    /// not a markers id.
    fn marked_starts(&self, plan: &Plan) -> Vec<bool> {
        use usdt_trace_common::SiteRole;
        plan.sites
            .iter()
            .zip(plan.specs.iter())
            .map(|(site, spec)| {
                spec.role == SiteRole::START
                    && spec.id_arg == 0
                    && site.args.len() >= 2
                    && !self.spans.iter().any(|r| {
                        r.key.is_some()
                            && r.start.name == site.name
                            && r.start
                                .provider
                                .as_ref()
                                .is_none_or(|p| *p == site.provider)
                    })
            })
            .collect()
    }

    /// The sinks this configuration asks for, and the output writer thread behind them.
    /// The files among them are not emptied until the [`outfile::Pending`]s are committed.
    fn sinks(
        &self,
        plan: &Plan,
    ) -> Result<(Fanout, QueueHandle, Vec<outfile::Pending>), WatchError> {
        let mut pending = Vec::new();
        let (stdout, handle) = match &self.output {
            Some(path) => {
                let (f, p) = outfile::open("-o", path)?;
                pending.push(p);
                outqueue::spawn(Box::new(f) as Box<dyn Write + Send>)
            }
            None => outqueue::spawn(Box::new(io::stdout()) as Box<dyn Write + Send>),
        };
        let sink: Box<dyn Sink> = if self.json {
            Box::new(JsonSink::new(stdout))
        } else {
            // Aggregating modes print blocks, not one line per span under a header.
            let per_span = !self.hist && !self.agg.count && self.agg.top.is_none();
            Box::new(TextSink::new(stdout, per_span))
        };
        let mut sinks = vec![sink];
        if let Some(path) = &self.perfetto {
            let (file, p) = outfile::open("--perfetto", path)?;
            pending.push(p);
            sinks.push(Box::new(PerfettoSink::new(file, self.marked_starts(plan))));
        }
        if let Some(otlp) = &self.otlp {
            sinks.push(Box::new(OtlpSink::new(
                otlp.clone(),
                self.marked_starts(plan),
            )?));
        }
        Ok((Fanout(sinks), handle, pending))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Proc(#[from] ProcError),
    #[error("no USDT probes in {0}")]
    NoProbes(String),
    /// An executable without probes whose libraries have them (`java` and `libjvm.so`).
    #[error("no USDT probes in {what}; {hint}\nhint: {suggestion}")]
    NoProbesHint {
        what: String,
        hint: String,
        suggestion: String,
    },
    #[error(
        "{path} is not mapped by process {pids} (list what it maps with: usdt-trace list -p PID)"
    )]
    NotMapped { path: String, pids: String },
    #[error(transparent)]
    Functions(#[from] crate::functions::FnError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Filter(#[from] crate::filter::FilterError),
    #[error(transparent)]
    Agg(#[from] crate::agg::AggError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("writing output: {0}")]
    Output(#[from] io::Error),
    #[error(transparent)]
    OutFile(#[from] outfile::OutFileError),
    #[error(transparent)]
    Prometheus(#[from] crate::output::prometheus::serve::ServeError),
}

impl WatchError {
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, WatchError::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Monotonic now, in the clock bpf_ktime_get_ns uses.
fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Unix time of CLOCK_MONOTONIC's zero (realtime − monotonic, read back to back).
fn monotonic_zero_unix_ns() -> u64 {
    let real = clock_ns(libc::CLOCK_REALTIME);
    real.saturating_sub(monotonic_ns())
}

/// The object a process maps for a path the user named: the path as the process sees it
/// (a container's `/usr/bin/app`), or a host path to the same file.
fn mapped_by(pid: u32, named: &std::path::Path) -> Result<Option<Object>, WatchError> {
    use std::os::unix::fs::MetadataExt;
    let host = std::fs::metadata(named)
        .ok()
        .map(|m| ((libc::major(m.dev()), libc::minor(m.dev())), m.ino()));
    for m in crate::procmaps::mapped_objects(pid)? {
        let same_path = std::path::Path::new(&m.path) == named;
        let same_file = host == Some((m.dev, m.inode));
        if same_path || same_file {
            // Checked against the mapping (device and inode): a path the process controls
            // cannot redirect root to another file.
            return Ok(Some(target::open_mapped(
                pid,
                &m,
                &named.display().to_string(),
            )?));
        }
    }
    Ok(None)
}

/// The objects to trace: the named files, else every object with probes that the `-p`
/// processes map (each file once).
fn open_targets(cfg: &WatchConfig) -> Result<Vec<Object>, WatchError> {
    let fn_pats = crate::functions::fn_patterns(&cfg.patterns);
    let mut objects: Vec<Object> = Vec::new();
    let mut seen = BTreeSet::new();
    for t in &cfg.targets {
        let o = if cfg.pids.is_empty() {
            target::open(&t.display().to_string(), t)?
        } else {
            // A path named with -p is the process's file: found through its mappings, so
            // that a container's path works and a file the process does not map is an error
            // rather than a silent run with nothing to see.
            if let Some(&pid) = cfg.pids.iter().find(|&&p| !target::pid_alive(p)) {
                return Err(ProcError::NoSuchProcess { pid }.into());
            }
            let mut found = None;
            for &pid in &cfg.pids {
                if let Some(o) = mapped_by(pid, t)? {
                    found = Some(o);
                    break;
                }
            }
            match found {
                Some(o) => o,
                // A library the process will load later is traced from this file (the
                // uprobes wait on its inode), but say so: it may be the wrong file.
                None if t.exists() => {
                    eprintln!(
                        "warning: {} is not mapped by process {} (yet): its probes fire only if the process loads this very file",
                        clean(&t.display().to_string()),
                        join_pids(&cfg.pids)
                    );
                    target::open(&t.display().to_string(), t)?
                }
                None => {
                    return Err(WatchError::NotMapped {
                        path: t.display().to_string(),
                        pids: join_pids(&cfg.pids),
                    })
                }
            }
        };
        let mut o = o;
        crate::functions::add_function_sites(&mut o, &fn_pats, cfg.fn_returns)?;
        // The same file named twice (a path and a symlink to it) is traced once.
        if seen.insert((o.dev, o.inode)) {
            objects.push(o);
        }
    }
    if cfg.targets.is_empty() {
        for &pid in &cfg.pids {
            for m in target::open_process(pid)? {
                // Objects that are not ELF (fonts, locale archives) or have no probes are
                // not what the user is after.
                let Ok(mut o) = m.object else { continue };
                crate::functions::add_function_sites(&mut o, &fn_pats, cfg.fn_returns)?;
                if !o.probes.sites.is_empty() && seen.insert((o.dev, o.inode)) {
                    objects.push(o);
                }
            }
        }
    }
    let mut err = io::stderr();
    for o in &objects {
        for w in &o.probes.warnings {
            let _ = writeln!(
                err,
                "warning: {}: {}",
                clean(&o.shown),
                clean(&w.to_string())
            );
        }
    }
    // With `fn:` patterns, the plan names the pattern that matched no function.
    if objects.iter().all(|o| o.probes.sites.is_empty())
        && (fn_pats.is_empty() || objects.is_empty())
        && !cfg.waits()
    {
        let what = if cfg.targets.is_empty() {
            format!("process {}", join_pids(&cfg.pids))
        } else {
            let shown: Vec<&str> = objects.iter().map(|o| o.shown.as_str()).collect();
            shown.join(", ")
        };
        // Only a file named (or run with -c) gets the hint: a process's mappings were all
        // looked at already.
        let found = if cfg.targets.len() == 1 && cfg.pids.is_empty() {
            crate::libhint::for_executable(&cfg.targets[0], &cfg.patterns)
        } else {
            None
        };
        return Err(match found {
            Some((hint, lib)) => WatchError::NoProbesHint {
                what,
                hint,
                suggestion: crate::libhint::suggestion(&lib, cfg.command.as_deref(), &cfg.patterns),
            },
            None => WatchError::NoProbes(what),
        });
    }
    Ok(objects)
}

fn join_pids(pids: &[u32]) -> String {
    let v: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
    v.join(", ")
}

/// Attaches every object's points, once per traced process (or once for all processes).
fn attach(
    tracer: &mut Tracer,
    objects: &[Object],
    plan: &Plan,
    pids: &[u32],
) -> Result<(), WatchError> {
    let pid_targets: Vec<Option<u32>> = if pids.is_empty() {
        vec![None]
    } else {
        pids.iter().map(|&p| Some(p)).collect()
    };
    for op in &plan.objects {
        let o = &objects[op.object];
        let path = o.fd_path();
        let path = path.to_string_lossy();
        for &pid in &pid_targets {
            tracer
                .attach_object(&path, &op.points, pid)
                .map_err(|e| match e {
                    // Name the file and probe the user knows, not /proc/self/fd/N.
                    TraceError::Attach { point, msg, .. } => {
                        let probe = point
                            .and_then(|p| plan.sites.get(p.cookie as usize))
                            .map(|s| format!(" ({}:{})", s.provider, s.name))
                            .unwrap_or_default();
                        TraceError::Attach {
                            path: format!("{}{probe}", o.shown),
                            point,
                            msg,
                        }
                    }
                    e => e,
                })?;
        }
    }
    Ok(())
}

/// Stops tracing the objects whose content changed ([`crate::changes`]): their uprobes are
/// detached at once, and their semaphores no longer raised by hand, with a warning each. The
/// new content is not traced: planning it again while processes may still run the old one
/// (whose sites no longer match the file) is not safe, so that is left to a new run.
pub(crate) fn stop_changed(
    changed: &[crate::changes::Changed],
    tracer: &mut Tracer,
    mut raiser: Option<&mut crate::semaphores::Raiser>,
) {
    for c in changed {
        let detach = tracer.detach_object(&c.fd_path.to_string_lossy());
        if let Some(r) = raiser.as_deref_mut() {
            r.forget(c.dev, c.inode);
        }
        let sites = match detach {
            crate::tracer::Detach::Done(n) | crate::tracer::Detach::Background { sites: n, .. } => {
                n
            }
        };
        eprintln!(
            "warning: {} was modified in place while traced: its {sites} probe site{} are detached (they sat at the old offsets, which in the new content may be mid-instruction); the new content is not traced: run watch again to trace it",
            clean(&c.shown),
            if sites == 1 { "" } else { "s" }
        );
    }
}

/// Why the reading loop should end now, if it should.
fn should_stop(cfg: &WatchConfig, started: Instant, child: Option<&mut Child>) -> bool {
    STOP.load(Ordering::Relaxed)
        || cfg.duration.is_some_and(|d| started.elapsed() >= d)
        || child.is_some_and(|c| c.exited())
        || (cfg.command.is_none()
            && !cfg.pids.is_empty()
            && cfg.pids.iter().all(|&p| !target::pid_alive(p)))
}

/// Reads records until told to stop, then detaches and drains what is left.
struct Reader {
    /// Grows while tracing when probes are attached late ([`crate::late`]).
    plan: Plan,
    sinks: Fanout,
    /// `--str-max`, for strings read late.
    str_max: usize,
    /// Strings records waiting for their event or span.
    strs: output::decode::StrJoin,
    /// Records that did not decode or named no known site.
    bad_records: u64,
    /// With `--interval`: the cumulative histograms at the last block, and when it was.
    last: Option<(Vec<[Hist; HIST_COMPONENTS]>, u64)>,
    t0: u64,
    /// `--stack`: names the stacks, and holds each until its span's record comes.
    stacks: Option<Stacks>,
    agg: Agg,
}

/// A traced object for `--stack`: its name, a path to its open descriptor, and its symbols
/// once read (None inside: unreadable).
type StackObject = (
    String,
    PathBuf,
    Option<Option<std::rc::Rc<crate::symbolize::SymTable>>>,
);

/// Stack records waiting for the span record that follows them, by (tid, end time).
#[derive(Default)]
struct Stacks {
    symbolizer: crate::symbolize::Symbolizer,
    pending: std::collections::HashMap<(u32, u64), crate::symbolize::SpanStack>,
    /// Per cookie of an end site that is not a return probe: the probe's file offset and its
    /// object (an index into `objects`), to name frames of a process already gone.
    probes: std::collections::HashMap<u32, (u64, usize)>,
    /// Each traced object's name and a path to its open descriptor, and its symbols once read.
    objects: Vec<StackObject>,
}

/// Stacks whose span never came (its record was lost) are dropped past this many.
const MAX_PENDING_STACKS: usize = 4096;

impl Stacks {
    fn new(plan: &Plan, objects: &[Object]) -> Stacks {
        let probes = plan
            .objects
            .iter()
            .flat_map(|op| {
                op.points
                    .iter()
                    .filter(|p| !p.ret)
                    .map(move |p| (p.cookie, (p.offset, op.object)))
            })
            .collect();
        let objects = objects
            .iter()
            .map(|o| (o.shown.clone(), o.fd_path(), None))
            .collect();
        Stacks {
            probes,
            objects,
            ..Stacks::default()
        }
    }

    /// Where the probe that ended the span is, with its object's symbols (read once).
    fn origin(&mut self, cookie: u32) -> Option<crate::symbolize::Origin> {
        let &(offset, oi) = self.probes.get(&cookie)?;
        let (shown, path, table) = self.objects.get_mut(oi)?;
        let table = table
            .get_or_insert_with(|| {
                crate::elf::functions_file(path)
                    .ok()
                    .map(|f| std::rc::Rc::new(crate::symbolize::sym_table(&f)))
            })
            .clone();
        Some(crate::symbolize::Origin {
            offset,
            object: shown.clone(),
            table,
        })
    }

    fn add(&mut self, rec: &usdt_trace_common::StackRecord) {
        if self.pending.len() >= MAX_PENDING_STACKS {
            self.pending.clear();
        }
        let origin = self.origin(rec.hdr.site);
        let st = self.symbolizer.symbolize(rec, origin.as_ref());
        self.pending.insert((rec.hdr.tid, rec.hdr.ts_ns), st);
    }

    /// The stack of the span that ended on `tid` at `ts_ns`: it came first, or was lost.
    fn take(&mut self, tid: u32, ts_ns: u64) -> crate::symbolize::SpanStack {
        match self.pending.remove(&(tid, ts_ns)) {
            Some(st) => st,
            None => self.symbolizer.lost(),
        }
    }
}

/// User-space state of `--by`, `--count` and `--top`: the last cumulative snapshots (for
/// interval deltas) and the top-N heaps.
struct Agg {
    hist: bool,
    count: bool,
    key: Option<crate::agg::KeyPlan>,
    max_keys: u32,
    /// The whole run's N slowest spans, and the current interval's (with `--interval`).
    top: Option<crate::agg::TopN>,
    top_interval: Option<crate::agg::TopN>,
    /// The minimum last pushed into the kernel.
    top_min: u64,
    last_by: crate::agg::ByHists,
    last_counts: crate::agg::Counts,
    last_t: u64,
    /// `--count`: hits counted over the run (for the summary).
    hits: u64,
}

impl Agg {
    /// Nothing seen yet: `t0` is when tracing started, the first interval's start.
    fn new(cfg: &WatchConfig, key: Option<crate::agg::KeyPlan>, t0: u64) -> Agg {
        Agg {
            hist: cfg.hist,
            count: cfg.agg.count,
            key,
            max_keys: cfg.agg.max_keys,
            top: cfg.agg.top.map(crate::agg::TopN::new),
            top_interval: cfg
                .agg
                .top
                .filter(|_| cfg.interval.is_some())
                .map(crate::agg::TopN::new),
            top_min: 0,
            last_by: Default::default(),
            last_counts: Default::default(),
            last_t: t0,
            hits: 0,
        }
    }
}

/// Late string reads allowed per batch: each costs a system call or two, and a flood of
/// failed reads must not slow the loop that keeps the ring buffer drained.
const LATE_READS_PER_BATCH: usize = 256;

/// The kernel reads strings without faulting pages in, so a string on a page the process never
/// touched (a literal in `.rodata`) comes back as a fault. Read such strings from the live
/// process instead, into a copy of the record's strings marked as read late. None when no
/// string needs it (or none could be read).
fn read_late(v: &View, str_max: usize, budget: &mut usize) -> Option<Box<StrSet>> {
    use usdt_trace_common::{STRS_FAULT, STRS_LATE, STRS_LATE_CUT, STR_MAX_CAP};
    let (pid, strs, sides) = match *v {
        View::Event {
            site,
            rec,
            strs: Some(strs),
        } => (rec.hdr.pid, strs, [(site, &rec.args), (site, &rec.args)]),
        View::Span {
            start,
            end,
            rec,
            strs: Some(strs),
            ..
        } => (
            rec.hdr.pid,
            strs,
            [(start, &rec.args), (end, &rec.end_args)],
        ),
        _ => return None,
    };
    if !strs.state.contains(&STRS_FAULT) {
        return None;
    }
    let max = str_max.min(STR_MAX_CAP);
    let mut copy: Option<Box<StrSet>> = None;
    for (site, args) in sides {
        for sa in &site.strs {
            if strs.state.get(sa.slot) != Some(&STRS_FAULT) || *budget == 0 {
                continue;
            }
            let addr = args.get(sa.arg).copied().unwrap_or(0);
            if addr == 0 {
                continue;
            }
            *budget -= 1;
            // One byte more than kept tells a cut string from one exactly `max` long.
            let read = match sa.len_arg {
                Some(l) => {
                    let len = args.get(l).copied().unwrap_or(0);
                    let n = usize::try_from(len).unwrap_or(usize::MAX).min(max + 1);
                    crate::procmem::read_process_bytes(pid, addr, n)
                }
                None => crate::procmem::read_process_string(pid, addr, max + 1),
            };
            let Ok(bytes) = read else {
                continue;
            };
            let c = copy.get_or_insert_with(|| Box::new(*strs));
            let n = bytes.len().min(max);
            c.data[sa.slot][..n].copy_from_slice(&bytes[..n]);
            c.len[sa.slot] = n as u16;
            c.state[sa.slot] = if bytes.len() > max {
                STRS_LATE_CUT
            } else {
                STRS_LATE
            };
        }
    }
    copy
}

impl Reader {
    fn batch(&mut self, tracer: &mut Tracer, timeout: Duration) -> Result<usize, WatchError> {
        let mut res = Ok(());
        let mut late_budget = LATE_READS_PER_BATCH;
        let n = tracer.poll(timeout, |bytes| {
            // An event's or span's strings (and a span's stack) come just before it: held until
            // it comes.
            let held;
            let rec = match output::decode(bytes) {
                Some(output::Record::Strs(r)) => {
                    self.strs.hold(r);
                    return;
                }
                Some(output::Record::Stack(st)) => {
                    if let Some(stacks) = self.stacks.as_mut() {
                        stacks.add(st);
                    }
                    return;
                }
                // Only a record whose strings went (`STRS_RECORD_SENT`) has any to join.
                Some(output::Record::Event(r, _)) if r.has_strs == STRS_RECORD_SENT => {
                    held = self.strs.take(&r.hdr);
                    Some(output::Record::Event(r, held.as_deref().map(|h| &h.strs)))
                }
                Some(output::Record::Span(r, _)) if r.has_strs == STRS_RECORD_SENT => {
                    held = self.strs.take(&r.hdr);
                    Some(output::Record::Span(r, held.as_deref().map(|h| &h.strs)))
                }
                other => other,
            };
            let view = rec.and_then(|r| self.plan.resolve(r));
            let Some(mut v) = view else {
                self.bad_records += 1;
                return;
            };
            if res.is_err() {
                return;
            }
            let stack_of_span = match (&v, self.stacks.as_mut()) {
                (View::Span { rec, .. }, Some(stacks)) => {
                    Some(stacks.take(rec.hdr.tid, rec.hdr.ts_ns))
                }
                _ => None,
            };
            if let View::Span { stack, .. } = &mut v {
                *stack = stack_of_span.as_ref();
            }
            // `--top`: spans go to the heaps, which print at intervals and at the end; events
            // are only counted (name span probes to keep them from being sent at all).
            if let Some(top) = self.agg.top.as_mut() {
                if let View::Span { rec, .. } = v {
                    top.offer(rec);
                    if let Some(t) = self.agg.top_interval.as_mut() {
                        t.offer(rec);
                    }
                }
                return;
            }
            // Strings the kernel could not read: patch a copy of the record's strings.
            if let Some(late) = read_late(&v, self.str_max, &mut late_budget) {
                let v = match v {
                    View::Event { site, rec, .. } => View::Event {
                        site,
                        rec,
                        strs: Some(&late),
                    },
                    View::Span {
                        pair,
                        start,
                        end,
                        rec,
                        stack,
                        ..
                    } => View::Span {
                        pair,
                        start,
                        end,
                        rec,
                        strs: Some(&late),
                        stack,
                    },
                };
                res = self.sinks.record(&v);
                return;
            }
            res = self.sinks.record(&v);
        })?;
        res?;
        self.sinks.flush()?;
        self.push_top_min(tracer)?;
        Ok(n)
    }

    /// `--top`: tells the kernel the shortest span that could still enter a heap, so shorter
    /// ones make no record at all.
    fn push_top_min(&mut self, tracer: &mut Tracer) -> Result<(), WatchError> {
        let Some(top) = &self.agg.top else {
            return Ok(());
        };
        // The interval's heap fills from empty: until then it takes every span.
        let min = match &self.agg.top_interval {
            Some(t) => t.threshold().min(top.threshold()),
            None => top.threshold(),
        };
        if min != self.agg.top_min {
            tracer.set_top_min(min)?;
            self.agg.top_min = min;
        }
        Ok(())
    }

    /// The aggregates (`--by`, `--count`, `--top`) of one block: an interval's deltas, or
    /// the whole run's totals (`total`).
    fn agg_block(
        &mut self,
        tracer: &Tracer,
        now: u64,
        total: bool,
        intervals: bool,
    ) -> Result<(), WatchError> {
        use crate::agg;
        let plan = &self.plan;
        let block =
            intervals.then_some(((if total { self.t0 } else { self.agg.last_t }, now), total));
        let mut text = String::new();
        let mut json = Vec::new();
        if self.agg.hist {
            if let Some(kp) = &self.agg.key {
                let snap = tracer.by_hists(plan.pairs.len())?;
                let shown = if total {
                    snap.clone()
                } else {
                    snap.since(&self.agg.last_by)
                };
                let tables = agg::by_tables(plan, kp, &shown);
                text.push_str(&agg::by_text(plan, kp, &tables, self.agg.max_keys));
                agg::by_json(&mut json, plan, kp, &tables, block);
                if !total {
                    self.agg.last_by = snap;
                }
            }
        }
        if self.agg.count {
            let snap = tracer.counts(plan.sites.len())?;
            if total {
                self.agg.hits = snap.sites.iter().sum();
            }
            let shown = if total {
                snap.clone()
            } else {
                snap.since(&self.agg.last_counts)
            };
            let rows = agg::count_table(plan, self.agg.key.as_ref(), &shown);
            if intervals {
                text.push_str(&agg::block_text(block, self.t0));
            }
            text.push_str(&agg::count_text(
                &rows,
                self.agg.key.as_ref(),
                self.agg.max_keys,
            ));
            agg::count_json(&mut json, &rows, self.agg.key.as_ref(), block);
            if !total {
                self.agg.last_counts = snap;
            }
        }
        let top = if total {
            self.agg.top.as_ref()
        } else {
            self.agg.top_interval.as_ref()
        };
        if let Some(top) = top {
            text.push_str(&agg::top_text(plan, top, block, self.t0));
            agg::top_json(&mut json, plan, top, block);
        }
        if !total {
            if let Some(t) = self.agg.top_interval.as_mut() {
                *t = agg::TopN::new(t.n);
            }
            self.agg.last_t = now;
        }
        self.sinks.block(&text, &json)?;
        Ok(())
    }

    /// One `--interval` block: what the kernel counted since the last one.
    fn interval(&mut self, tracer: &Tracer) -> Result<(), WatchError> {
        let now = monotonic_ns();
        if !self.agg.hist {
            return self.agg_block(tracer, now, false, true);
        }
        let hists = tracer.hists(self.plan.pairs.len())?;
        let (before, since) = self.last.take().unwrap_or_else(|| {
            let zero = vec![[Hist::default(); HIST_COMPONENTS]; hists.len()];
            (zero, self.t0)
        });
        let delta: Vec<_> = hists
            .iter()
            .zip(before.iter())
            .map(|(n, b)| output::hist::delta(n, b))
            .collect();
        self.sinks.hists(&Hists {
            pairs: &self.plan.pairs,
            hists: &delta,
            bounds: Some((since, now)),
            total: false,
        })?;
        self.last = Some((hists, now));
        self.agg_block(tracer, now, false, true)
    }

    /// What one `--prometheus` scrape exports: the kernel's cumulative histograms and
    /// counters, read now (never reset, so nothing exported goes backwards). `out_lost`: the
    /// records the output queue dropped so far.
    fn prom_snapshot(
        &self,
        tracer: &Tracer,
        out_lost: u64,
        ring_bytes: u32,
    ) -> Result<output::prometheus::Snapshot, WatchError> {
        use output::prometheus::{ByKeys, Counters, Health, Snapshot};
        let n = self.plan.pairs.len();
        let hists = tracer.hists(n)?;
        let by = match &self.agg.key {
            Some(kp) => {
                let b = tracer.by_hists(n)?;
                Some(ByKeys {
                    by: kp.by.text.clone(),
                    keys: b
                        .keys
                        .iter()
                        .map(|(k, h)| (k.id as usize, kp.value(&self.plan, k), *h))
                        .collect(),
                    other: b.other,
                    max_keys: self.agg.max_keys,
                })
            }
            None => None,
        };
        let c = tracer.counters()?;
        let ac = tracer.agg_counters()?;
        Ok(Snapshot {
            pairs: self.plan.pairs.iter().cloned().zip(hists).collect(),
            by,
            counters: Counters {
                events: c.events,
                spans: c.spans,
                records_lost: c.lost + self.bad_records + out_lost,
                unmatched_ends: c.unmatched_end,
                dropped_threads_full: c.threads_full,
                dropped_open_ids_full: c.id_full,
                dropped_depth: c.depth,
                hits_missed: tracer.missed_hits().unwrap_or(0),
                strings_dropped: c.strs_dropped,
                keys_other: ac.by_other,
            },
            health: Health {
                sites: tracer.attached_sites() as u64,
                span_names: n as u64,
                ring_bytes: ring_bytes.into(),
                cpu_ns: clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID),
            },
        })
    }

    /// Answers the `--prometheus` scrapes waiting, between batches.
    fn serve_scrapes(
        &self,
        server: &output::prometheus::serve::Server,
        cfg: &PromConfig,
        tracer: &Tracer,
        out_lost: u64,
        ring_bytes: u32,
    ) -> Result<(), WatchError> {
        while let Some(scrape) = server.pending() {
            let snap = self.prom_snapshot(tracer, out_lost, ring_bytes)?;
            scrape.answer(output::prometheus::render(snap, cfg.per_octave));
        }
        Ok(())
    }

    /// The whole run's histograms, at the end.
    fn totals(&mut self, tracer: &Tracer, intervals: bool) -> Result<(), WatchError> {
        let now = monotonic_ns();
        if self.agg.hist {
            let hists = tracer.hists(self.plan.pairs.len())?;
            self.sinks.hists(&Hists {
                pairs: &self.plan.pairs,
                hists: &hists,
                bounds: intervals.then_some((self.t0, now)),
                total: true,
            })?;
        }
        self.agg_block(tracer, now, true, intervals)
    }
}

/// The `-c` command's own status when it ended by itself; ended by us (or no command), 0.
/// One that is still running is left so with `--leave-running`, else terminated.
fn command_status(child: Option<Child>, leave_running: bool) -> i32 {
    match child {
        Some(mut c) => match c.exit() {
            Some(e) => e.shell_code(),
            None if leave_running => {
                c.leave_running();
                0
            }
            None => {
                c.terminate(GRACE);
                0
            }
        },
        None => 0,
    }
}

/// What the summary line alone does not say, on stderr once tracing has ended: limits that
/// dropped spans, keys counted as "other", lost and unwritten records, a detach still going on.
fn end_warnings(
    cfg: &WatchConfig,
    summary: &Summary,
    ac: &crate::tracer::AggCounters,
    out_lost: u64,
    unwritten: u64,
    detach: &crate::tracer::Detach,
) {
    for w in summary.dropped.warnings(cfg.max_threads, cfg.max_open_ids) {
        eprintln!("{w}");
    }
    if summary.strings_dropped > 0 {
        eprintln!(
            "warning: --str: {} spans are recorded without their start strings: the kernel could not keep them until the end (too many open at once, or no memory at hand)",
            summary.strings_dropped
        );
    }
    for (n, what) in [(ac.by_other, "spans"), (ac.count_other, "hits")] {
        if n > 0 {
            eprintln!(
                "warning: --by: {n} {what} had keys beyond --max-keys {} and were counted as \"other\"; try a larger --max-keys",
                cfg.agg.max_keys
            );
        }
    }
    if summary.strings_lost > 0 {
        eprintln!(
            "warning: --str: {} strings records were lost with the ring buffer full; their spans and events are marked \"strs_lost\" (try a larger --ring-kib)",
            summary.strings_lost
        );
    }
    for (n, what) in [(ac.by_unkeyed, "spans"), (ac.count_unkeyed, "hits")] {
        if n > 0 {
            eprintln!(
                "warning: --by: {n} {what} are counted as \"unkeyed\": the kernel had no memory at hand for their new keys, and its reserve of {} keys was full",
                usdt_trace_common::agg::SPILL_KEYS
            );
        }
    }
    // Exact, but worth knowing: a run that fills the reserve gets "unkeyed" rows.
    let spilled = ac.by_spilled + ac.count_spilled;
    if spilled > 0 {
        eprintln!(
            "note: --by: {spilled} keys are kept in the kernel's reserve map (room for {}): it had no memory at hand when they were new; their counts are exact",
            usdt_trace_common::agg::SPILL_KEYS
        );
    }
    if summary.lost > 0 {
        let ring = summary.lost - out_lost;
        let mut why = Vec::new();
        if ring > 0 {
            why.push(format!(
                "{ring} with the ring buffer full: try a larger --ring-kib"
            ));
        }
        if out_lost > 0 {
            why.push(format!(
                "{out_lost} because the output's reader did not keep up"
            ));
        }
        eprintln!(
            "warning: {} records were lost ({})",
            summary.lost,
            why.join("; ")
        );
    }
    if unwritten > 0 {
        eprintln!(
            "warning: {unwritten} more records, the summary among them, could not be written to stdout (its reader stopped reading)"
        );
    }
    if let crate::tracer::Detach::Background { sites, pid } = *detach {
        eprintln!(
            "Detaching {sites} probe sites in the background (helper PID {pid}): the kernel takes about 0.1 s per site"
        );
    }
}

/// Traces until told to stop; returns the exit code: the `-c` command's own when it ended by
/// itself, else 0.
pub fn run(cfg: &WatchConfig) -> Result<i32, WatchError> {
    let objects = open_targets(cfg)?;
    let named: Vec<(&str, &crate::elf::ObjectProbes)> = objects
        .iter()
        .map(|o| (o.shown.as_str(), &o.probes))
        .collect();
    let plan = crate::late::plan_or_wait(
        plan::build(&named, &cfg.plan_options()),
        cfg.waits() && crate::functions::fn_patterns(&cfg.patterns).is_empty(),
        cfg.patterns.is_empty(),
        &cfg.pids,
    )?;
    // Each pattern must find something (one that finds nothing at all failed above); with
    // --wait-for-probes the rest may come later.
    if !plan.sites.is_empty() {
        if let Err(e) = plan::check_every_pattern(&named, &cfg.patterns) {
            if !cfg.waits() {
                return Err(e.into());
            }
            eprintln!(
                "warning: {}: waiting for probes defined or loaded later",
                clean(&e.to_string())
            );
        }
    }
    if cfg.patterns.is_empty() && !cfg.agg.count {
        if let Some(w) = crate::agg::high_rate_warning(&crate::agg::high_rate_probes(&plan)) {
            eprintln!("{}", clean(&w));
        }
    }
    let key_plan = cfg
        .agg
        .by
        .as_ref()
        .map(|b| crate::agg::KeyPlan::new(&plan, b, cfg.agg.count))
        .transpose()?;
    // The files as parsed: taken before attach, so a change made the moment the readiness line
    // appears is still a change.
    let mut watched = crate::changes::ChangeWatch::new();
    for op in &plan.objects {
        watched.add(&objects[op.object]);
    }
    let filter_masks = cfg
        .filter
        .as_ref()
        .map(|f| crate::late::masks_or_wait(plan::filter_masks(&plan, f), cfg.waits(), &plan, f))
        .transpose()?;
    // Before anything is attached: a bad -o path fails first.
    let (sinks, output, mut out_files) = cfg.sinks(&plan)?;
    // Listening before attach too: an address in use fails the run before it starts.
    let prom = cfg
        .prometheus
        .as_ref()
        .map(|p| output::prometheus::serve::Server::bind(p.addr).map(|s| (s, p)))
        .transpose()?;

    // Times count from before the first probe can fire, so none is ever negative.
    let t0 = monotonic_ns();
    let mut child = cfg.command.as_deref().map(Child::spawn).transpose()?;
    let mut pids: Vec<u32> = cfg.pids.clone();
    pids.extend(child.as_ref().map(|c| c.pid as u32));
    if cfg.bench_null_program {
        eprintln!("warning: --bench-null-program: the attached program records nothing; this run measures the cost of a hit, not what the probes did");
    }
    let mut tracer =
        Tracer::load(&cfg.load_options(&plan, filter_masks.as_deref(), key_plan.as_ref()))?;
    // Before attach: processes already mapping the objects get their semaphores from the
    // kernel; only those started later need raising by hand.
    let mut raiser =
        crate::semaphores::Raiser::new(crate::semaphores::affected(&objects, &plan), &pids);
    if let Some(w) = raiser.warning() {
        eprintln!("{}", clean(&w));
    }
    attach(&mut tracer, &objects, &plan, &pids)?;
    // The run has started: only now is an existing -o or --perfetto file emptied (an error
    // above left it as it was, and removed one we created).
    for f in &mut out_files {
        f.commit()?;
    }
    // Before the readiness line: a script may send SIGINT the moment it sees it.
    install_signal_handlers();
    eprintln!("{}", plan.attached_line());
    // Watching for new code starts before the command runs; the first poll reads every
    // process again, for what was mapped since the targets were opened.
    let mut late = cfg.late().then(|| {
        let child = child.as_ref().map(|c| c.pid as u32);
        let scope = crate::late::Scope::of_run(child, &cfg.pids, &objects);
        let (l, warning) = crate::late::Late::new(scope, &objects);
        if let Some(w) = warning {
            eprintln!("{}", clean(&w));
        }
        tracer.wake_on(l.wake_fds());
        l
    });
    // A write to a traced file ends the loop's wait at once.
    tracer.wake_on(watched.wake_fd().into_iter().collect());
    if let Some(c) = child.as_mut() {
        c.release()?;
    }

    let started = Instant::now();
    // Probes attached later (late mappings) are named from the process's maps alone.
    let stacks = cfg.stack.then(|| Stacks::new(&plan, &objects));
    let mut reader = Reader {
        plan,
        sinks,
        str_max: cfg.str_max as usize,
        strs: Default::default(),
        bad_records: 0,
        last: None,
        t0,
        stacks,
        agg: Agg::new(cfg, key_plan, t0),
    };
    reader.sinks.begin(&RunInfo {
        version: env!("CARGO_PKG_VERSION"),
        targets: objects.iter().map(|o| o.shown.clone()).collect(),
        pids: pids.clone(),
        command: cfg.command.as_ref().map(|c| c.join(" ")),
        t0_ns: t0,
        clock_zero_unix_ns: monotonic_zero_unix_ns(),
        sites: reader.plan.sites.len(),
        span_names: reader.plan.pairs.len(),
        split: cfg.sched,
    })?;
    let late_rules = crate::late::Rules {
        patterns: &cfg.patterns,
        spans: &cfg.spans,
        strs: &cfg.strs,
        names: &cfg.names,
        auto_span: cfg.auto_span,
        optimize: cfg.plan_options().optimize,
        filter: cfg.filter.as_ref(),
    };
    let mut last_hist = Instant::now();
    while !should_stop(cfg, started, child.as_mut()) {
        reader.batch(&mut tracer, Duration::from_millis(50))?;
        if let Some((server, p)) = &prom {
            reader.serve_scrapes(server, p, &tracer, output.lost(), cfg.ring_bytes)?;
        }
        if cfg.interval.is_some_and(|iv| last_hist.elapsed() >= iv) {
            last_hist = Instant::now();
            reader.interval(&tracer)?;
        }
        stop_changed(&watched.take_changed(), &mut tracer, Some(&mut raiser));
        raiser.poll();
        if let Some(l) = late.as_mut() {
            l.poll(&mut reader.plan, &mut tracer, &late_rules);
        }
    }

    // Detach first (semaphores drop), then take what is left in the ring.
    let detach = tracer.detach_all();
    // After detach: the kernel's unregister may itself lower the real semaphore (by then the
    // RELRO copy is read-only), and lowering never goes below 0, so the count ends at 0.
    raiser.lower_all();
    while reader.batch(&mut tracer, Duration::ZERO)? > 0 {}
    if cfg.hist || cfg.agg.count || cfg.agg.top.is_some() {
        reader.totals(&tracer, cfg.interval.is_some())?;
    }
    let ac = tracer.agg_counters()?;
    let c = tracer.counters()?;
    let open = tracer.open_spans().unwrap_or(0);
    // Records the output queue dropped so far are lost like those the ring had no room for:
    // printed + lost == hits holds for what the reader sees.
    let out_lost = output.lost();
    let summary = Summary {
        events: c.events,
        spans: c.spans,
        lost: c.lost + reader.bad_records + out_lost,
        unmatched: c.unmatched_start + open,
        unmatched_end: c.unmatched_end,
        duration_ns: monotonic_ns().saturating_sub(t0),
        dropped: output::Dropped {
            threads_full: c.threads_full,
            id_spans_full: c.id_full,
            depth: c.depth,
            kernel_skipped: tracer.missed_hits().unwrap_or(0),
        },
        filtered: c.below_min + c.filter_rejected,
        strings_dropped: c.strs_dropped,
        strings_lost: c.strs_lost,
        stacks_failed: reader.stacks.as_ref().map_or(0, |s| s.symbolizer.failed),
        frames_unnamed: reader.stacks.as_ref().map_or(0, |s| s.symbolizer.unnamed),
        hits: reader.agg.hits,
        by_other: ac.by_other + ac.count_other,
        by_unkeyed: ac.by_unkeyed + ac.count_unkeyed,
    };
    reader.sinks.finish(&summary)?;
    drop(reader);
    // A reader that stopped reading gets a moment, then what it did not take is counted.
    // Bounded so that stopping stays well under a second whatever the reader does.
    let unwritten = output
        .finish(Duration::from_millis(300))
        .saturating_sub(out_lost);
    end_warnings(cfg, &summary, &ac, out_lost, unwritten, &detach);
    Ok(command_status(child, cfg.leave_running))
}
