//! The validated `watch` settings ([`WatchConfig`], built by `cli`) and what the driver derives
//! from them: the planning options, the tracer's load options, the sinks to write to, and
//! whether probes defined or loaded later are followed. Kept apart from the driver so that a
//! new flag touches its field and the one helper that reads it, not the run loop.

use super::WatchError;
use crate::output::otlp::{OtlpConfig, OtlpSink};
use crate::output::outfile;
use crate::output::outqueue::{self, QueueHandle};
use crate::output::perfetto::PerfettoSink;
use crate::output::sink::Fanout;
use crate::output::{JsonSink, Sink, TextSink};
use crate::plan::spans::{SpanRule, StrRule};
use crate::plan::{self, Plan, PlanOptions};
use crate::tracer::{AttachMode, LoadOptions};
use crate::util::pattern::Pattern;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

/// Validated `watch` settings (built by `cli`).
#[derive(Debug, Clone)]
pub struct WatchConfig {
    pub json: bool,
    pub targets: Vec<PathBuf>,
    pub pids: Vec<u32>,
    /// `--process` names: the executables of the processes so called.
    pub processes: Vec<String>,
    /// argv of `-c`.
    pub command: Option<Vec<String>>,
    /// `-c` runs a `#!` script and no target is named: the target is the program the
    /// command finally executes, found by following its execs (`execchain`).
    pub exec_chain: bool,
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
    /// `--perfetto-max-waits`: off-CPU intervals drawn at most (0: all).
    pub perfetto_max_waits: u64,
    /// `--otlp URL` and its settings: also export spans there.
    pub otlp: Option<OtlpConfig>,
    /// `--min`: spans shorter than this make no record (histograms count them all).
    pub min: Option<Duration>,
    /// `--filter` and `--tid`, combined; evaluated in the kernel.
    pub filter: Option<crate::plan::filter::Filter>,
    /// `--stack`: the user stack at the end of each recorded span, and how it is taken.
    pub stack: Option<crate::target::unwind::StackMode>,
    /// `--by`, `--count`, `--top`, `--max-keys`.
    pub agg: AggArgs,
    /// `--wait-for-probes`: start with no matching probe, waiting for late ones.
    pub wait_for_probes: bool,
    /// `--bench-null-program` (hidden): attach `usdt_null`, which records nothing.
    pub bench_null_program: bool,
    /// `--prometheus ADDR`: serve the kernel's histograms at ADDR/metrics.
    pub prometheus: Option<PromConfig>,
    /// `--baseline FILE`: the earlier run, read already, that this run's spans are compared
    /// with when it ends.
    pub baseline: Option<crate::diff::Baseline>,
}

/// `--prometheus ADDR` and `--prometheus-buckets`.
#[derive(Debug, Clone)]
pub struct PromConfig {
    pub addr: std::net::SocketAddr,
    /// Kernel bucket bounds exported per power of two (1, 2, 4 or 8).
    pub per_octave: u32,
    /// `--web-config FILE`, read and checked: TLS, basic auth.
    pub web: Option<std::sync::Arc<crate::output::prometheus::web::Web>>,
}

/// The aggregation flags (see `crate::output::agg`).
#[derive(Debug, Clone, Default)]
pub struct AggArgs {
    pub by: Option<crate::output::agg::By>,
    pub count: bool,
    pub top: Option<usize>,
    pub max_keys: u32,
}

impl WatchConfig {
    /// How function probes are placed: entry probes read the arguments unless nothing of the
    /// run uses them (a duration histogram with no `--by` argument or string, no filter on
    /// arguments, no `--str`), where the entry may sit on a cheaper instruction further in.
    pub(crate) fn fn_placement(&self) -> crate::elf::FnPlacement {
        let entry_args = !self.hist
            || !self.strs.is_empty()
            || self.agg.by.as_ref().is_some_and(|b| b.reads_args())
            || self.filter.as_ref().is_some_and(|f| f.reads_args());
        crate::elf::FnPlacement {
            returns: self.fn_returns,
            entry_args,
        }
    }

    /// Also attach to probes the traced processes define or load after the start
    /// ([`crate::watch::late`]): with `-p` (no TARGET), `-c`, or a TARGET alone (the processes
    /// running it); not when both `-p` and TARGET narrow it down.
    pub(crate) fn late(&self) -> bool {
        self.pids.is_empty() || self.targets.is_empty()
    }

    /// The named files to look at again while tracing ([`crate::watch::follow`]): the TARGETs
    /// when every process running them is traced (not with -p or -c, where the processes'
    /// own files are what was asked for).
    pub(crate) fn follow_paths(&self) -> Vec<PathBuf> {
        if self.pids.is_empty() && self.command.is_none() {
            self.targets.clone()
        } else {
            Vec::new()
        }
    }

    /// `--wait-for-probes` where it applies: no match at start is a warning, not an error.
    pub(crate) fn waits(&self) -> bool {
        self.late() && self.wait_for_probes
    }

    pub(crate) fn plan_options(&self) -> PlanOptions<'_> {
        PlanOptions {
            patterns: &self.patterns,
            spans: &self.spans,
            strs: &self.strs,
            names: &self.names,
            auto_span: self.auto_span,
            optimize: crate::tracer::features::uprobe_optimize().is_yes(),
            costs: crate::tracer::calibrate::known(),
        }
    }

    /// What the tracer is loaded with, from the validated flags and the plan: `filter_masks`
    /// the `--filter` terms per site, `key_plan` the `--by` key. (The traced processes are not
    /// among them: each link is scoped to its process when attached.)
    pub(crate) fn load_options<'a>(
        &'a self,
        plan: &'a Plan,
        filter_masks: Option<&'a [u32]>,
        key_plan: Option<&crate::output::agg::KeyPlan>,
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
            filter_args: self.filter.as_ref().is_some_and(|f| f.reads_args()),
            stack: self.stack.is_some(),
            // Set by `watch` once `auto` is resolved against the traced files.
            stack_copy: self.stack == Some(crate::target::unwind::StackMode::Dwarf),
            // Only the Perfetto output draws the waits; for the others they would cost a
            // record per context switch of a thread in a span.
            waits: self.perfetto.is_some(),
            agg: crate::tracer::AggLoad {
                count: self.agg.count,
                by: key_plan.map(|k| k.by.config()).unwrap_or_default(),
                by_args: key_plan.is_some_and(|k| k.by.reads_args()),
                by_sites: key_plan.map(|k| k.by_sites.clone()).unwrap_or_default(),
                max_keys: self.agg.max_keys,
            },
            null_program: self.bench_null_program,
            spare_sites: crate::watch::late::SPARE_SITES * self.late() as u32,
            spare_pairs: crate::watch::late::SPARE_PAIRS * self.late() as u32,
        }
    }

    /// Per site: a start whose spans pair by a usdt-markers span id (argument 0), so that
    /// argument 1 is the parent's id. An explicit `--key` rule on it means the user's own key,
    /// not a markers id.
    pub(crate) fn marked_starts(&self, plan: &Plan) -> Vec<bool> {
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
    pub(crate) fn sinks(
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
            // Shared with the command's own output: never split a record.
            None if self.command.is_some() => outqueue::spawn(Box::new(outqueue::LineAtomic(
                io::stdout(),
            ))
                as Box<dyn Write + Send>),
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
                &super::signals::NOW,
            )?));
        }
        Ok((Fanout(sinks), handle, pending))
    }
}
