//! Command-line flags → validated configuration → run → exit code.
//!
//! clap parses into raw structs ([`ListArgs`], [`WatchArgs`]); [`ListArgs::validate`] and
//! [`WatchArgs::validate`] turn those into configs whose fields are already checked (patterns
//! compiled, span rules parsed, targets split from patterns), so the commands never see
//! unvalidated input. Every error ends as one line on stderr and a non-zero exit; a closed
//! output pipe (`| head`) exits 0.

use crate::list::{self, ListConfig};
use crate::output::otlp::{settings as otlp_settings, OtlpConfig};
use crate::pattern::Pattern;
use crate::spans::{SpanRule, StrRule};
use crate::tracer::AttachMode;
use crate::watch::{self, WatchConfig};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `--version`: the crate version and the git revision it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("USDT_TRACE_GIT_REV"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "usdt-trace",
    version = VERSION,
    about = "List and trace USDT probes (.note.stapsdt) with eBPF: latency spans, events, and where each span's time went",
    after_help = "Examples:\n  usdt-trace list /usr/lib/x86_64-linux-gnu/libc.so.6\n  usdt-trace list -p 1234 'httpserver:*'\n  usdt-trace watch --json ./target/release/demo-httpserver\n  usdt-trace watch -p 1234 --span query__start=query__done\n  usdt-trace watch --hist -c './myprog --flag'"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per run: the size of the watch variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show the probe sites of ELF files or of a running process.
    List(ListArgs),
    /// Attach to probe sites and print spans and events as they happen.
    Watch(Deferred<WatchArgs>),
    /// Show what this kernel supports for tracing and what `watch` will use (no root needed).
    Doctor(DoctorArgs),
    /// Compare two `watch --json` runs per span name: mean, p99, which parts of the time
    /// split explain the change, and the dominant cause.
    Diff(DiffArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a man page (roff) to stdout: `usdt-trace man | man -l -`, `usdt-trace man watch`
    /// for a command's page (every flag); or write them all with --dir.
    Man {
        /// The command whose page to print (list, watch, doctor, completions, man); the
        /// top-level page without one.
        #[arg(value_name = "COMMAND", conflicts_with = "dir")]
        command: Option<String>,
        /// Write every page into this directory: usdt-trace.1, usdt-trace-watch.1, ...
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// clap_complete's bash script for a hyphenated binary sets `cmd` to `usdt__trace__subcmd__watch`
/// but its `case` tests `usdt__subcmd__trace__subcmd__watch` (the `-` in the name is turned
/// into `__subcmd__` once more), so no subcommand's options were ever offered. The labels are
/// rewritten to what `cmd` is set to.
pub fn completion_script(shell: clap_complete::Shell) -> Vec<u8> {
    use clap::CommandFactory;
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "usdt-trace", &mut out);
    if shell == clap_complete::Shell::Bash {
        let s = String::from_utf8_lossy(&out).replace("usdt__subcmd__trace", "usdt__trace");
        return s.into_bytes();
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum ManError {
    #[error("man {0}: no such command (list, watch, doctor, completions, man)")]
    NoCommand(String),
    #[error("rendering the man page: {0}")]
    Render(std::io::Error),
}

/// The top-level page, or one command's (`usdt-trace-watch(1)`, which the top-level page
/// points to), with every flag.
pub fn man_page(command: Option<&str>) -> Result<Vec<u8>, ManError> {
    use clap::CommandFactory;
    let mut top = Cli::command();
    top.build();
    let cmd = match command {
        None => top,
        Some(name) => top
            .get_subcommands()
            .find(|c| c.get_name() == name && name != "help")
            .cloned()
            .ok_or_else(|| ManError::NoCommand(name.to_string()))?
            // The page's title and its NAME section: `usdt-trace-watch`. Leaked: clap takes
            // names as &'static str without its `string` feature, and this runs once.
            .name(&*format!("usdt-trace-{name}").leak())
            .bin_name(format!("usdt-trace {name}"))
            // The footer's version, as on the top-level page.
            .version(VERSION),
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(ManError::Render)?;
    Ok(out)
}

/// Every page into `dir`; how many.
fn man_dir(dir: &Path) -> Result<usize, String> {
    use clap::CommandFactory;
    let names: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    let mut n = 0;
    for name in std::iter::once(None).chain(names.iter().map(|n| Some(n.as_str()))) {
        let page = man_page(name).map_err(|e| e.to_string())?;
        let file = match name {
            None => dir.join("usdt-trace.1"),
            Some(c) => dir.join(format!("usdt-trace-{c}.1")),
        };
        std::fs::write(&file, page).map_err(|e| format!("man --dir: {}: {e}", file.display()))?;
        n += 1;
    }
    Ok(n)
}

/// Arguments clap defines only when their subcommand is the one used (`Command::defer`):
/// `watch`'s dozens of flags took a sixth of the instructions of `list` on libjvm.so, and
/// every other command paid for them too. Help, completions and the man page still see them
/// (clap builds the whole tree for those).
#[derive(Debug)]
pub struct Deferred<T>(pub T);

impl<T> std::ops::Deref for Deferred<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Args> Args for Deferred<T> {
    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.defer(T::augment_args)
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        cmd.defer(T::augment_args_for_update)
    }
}

impl<T: clap::FromArgMatches> clap::FromArgMatches for Deferred<T> {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches(m).map(Deferred)
    }
    fn from_arg_matches_mut(m: &mut clap::ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches_mut(m).map(Deferred)
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(m)
    }
    fn update_from_arg_matches_mut(&mut self, m: &mut clap::ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches_mut(m)
    }
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The baseline run: NDJSON written by `usdt-trace watch --json`.
    pub before: PathBuf,
    /// The run to explain, in the same form.
    pub after: PathBuf,
    /// One JSON object per span name per line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// One JSON object: kernel, features and watch, each key with a value and a detail.
    #[arg(long)]
    pub json: bool,
}

/// `--attach MODE`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachArg {
    /// uprobe_multi links when the kernel has them (6.6+), else perf events
    Auto,
    /// one uprobe_multi link per object; an error if the kernel has none
    Multi,
    /// one perf_event_open uprobe + BPF_LINK_CREATE link per site
    Perf,
}

impl From<AttachArg> for AttachMode {
    fn from(a: AttachArg) -> AttachMode {
        match a {
            AttachArg::Auto => AttachMode::Auto,
            AttachArg::Multi => AttachMode::Multi,
            AttachArg::Perf => AttachMode::Perf,
        }
    }
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// One JSON object per probe site per line.
    #[arg(long)]
    pub json: bool,
    /// List every object mapped by this process that has probes.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<u32>,
    /// List the function symbols of one file instead (`list --functions BIN [GLOB...]`):
    /// address, size, file offset and whether the first instruction is single-stepped. GLOBs
    /// match the demangled name; trace them with `watch BIN 'fn:GLOB'`.
    #[arg(long, conflicts_with = "pid")]
    pub functions: bool,
    /// Only the probe names, one `provider:name` per line, sorted and without duplicates
    /// (like `bpftrace -l`).
    #[arg(long, conflicts_with = "json")]
    pub names: bool,
    /// ELF files (executables, shared libraries) and provider:name glob patterns.
    /// An argument naming an existing file, or containing '/', is a file; anything else is a
    /// pattern such as 'postgresql:query__*' or '*:*start'.
    #[arg(value_name = "PATH|PATTERN")]
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// One JSON object per line: spans, events, histograms and a final summary.
    #[arg(long)]
    pub json: bool,
    /// Trace only this process (repeatable). Without a TARGET, trace every object it maps,
    /// including those it maps later (libraries it loads, probes it defines at run time).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Run this command once the probes are live, trace it, and stop when it exits; exit with
    /// its status. If tracing stops first (--duration, Ctrl-C, SIGTERM), the command gets
    /// SIGTERM, then SIGKILL 2 s later, unless --leave-running.
    #[arg(short = 'c', long = "command", value_name = "CMD")]
    pub command: Option<String>,
    /// With -c: when tracing stops before the command exits, leave it running.
    #[arg(long, requires = "command")]
    pub leave_running: bool,
    /// With -p (no TARGET), -c, or a TARGET alone: no probe matching yet (or no probes at
    /// all) is not an error; wait for the processes to define or load them (probes made at
    /// run time with usdt-markers-dyn, libraries loaded later). Such probes are attached as
    /// they appear in any case; this flag only allows starting with none.
    #[arg(long)]
    pub wait_for_probes: bool,
    /// Stop after this long: seconds (`2.5`) or with a unit (`500ms`, `10s`, `1m`, `1h`).
    #[arg(short = 'd', long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Write the records to FILE instead of stdout (so a -c command's own output stays apart).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Pair START with END as a span (repeatable). Each side is NAME or PROVIDER:NAME. Give one
    /// START several ENDs (commit or abort) with several rules; each span says which end
    /// closed it.
    #[arg(long = "span", value_name = "START=END")]
    pub spans: Vec<String>,
    /// Pair the --span rules by argument N (0-based) instead of per thread: a start is closed by
    /// the end whose argument N is equal, for instances that overlap or end in start order
    /// (like bpftrace's `@start[argN]`).
    #[arg(long, value_name = "N", requires = "spans")]
    pub key: Option<usize>,
    /// Read argument N of PROBE as a NUL-terminated string (repeatable: up to 4 strings per
    /// record, a span's start and end strings together), e.g. postgresql:query__start:0;
    /// PROBE:N:len=M reads exactly argument M bytes (strings that are not NUL-terminated, e.g.
    /// hotspot:class__loaded:0:len=1); for functions, fn:GLOB:N (argument N at entry) or
    /// fn:GLOB:ret (the return value). A string the kernel cannot read shows the pointer.
    #[arg(long = "str", value_name = "PROBE:N[:len=M]")]
    pub strs: Vec<String>,
    /// Keep at most N bytes of each --str string (1 to 1024, default 256); a cut string is
    /// marked: `…` after it in text, its argument listed in "truncated" in JSON.
    #[arg(long, value_name = "N", default_value_t = usdt_trace_common::STR_MAX_DEFAULT as u32)]
    pub str_max: u32,
    /// Name PROBE's arguments in the output (repeatable), e.g. request__start=id,parent,req:
    /// text shows (id=1, parent=0, req=2), JSON an object {"id":1,...} instead of an array.
    /// Arguments past the names keep their position (arg3); errors: a probe that matches
    /// nothing, more names than the probe has arguments. Probes made with usdt-markers'
    /// `probe!(p, n, name = value, ...)` carry their names in the binary: no rule needed.
    #[arg(long = "args", value_name = "PROBE=NAME,...")]
    pub arg_names: Vec<String>,
    /// Do not pair probes by name (X__start/X__end, X__entry/X__return, ...); only --span rules.
    #[arg(long)]
    pub no_auto_span: bool,
    /// Keep log-linear histograms (8 buckets per power of two: percentiles within 6.25%, max
    /// exact) of span durations and their on-CPU/run-queue/sleep/I/O split in the kernel
    /// instead of printing each span; draw them at exit, in log2 rows.
    #[arg(long)]
    pub hist: bool,
    /// With --hist, --count or --top, also print what each interval added, every DURATION
    /// (`2`, `500ms`, `1m`): deltas, each block headed by its bounds; the totals follow at exit.
    #[arg(short = 'i', long, value_name = "DURATION")]
    pub interval: Option<String>,
    /// Record only spans at least this long (`2ms`, `500us`, `1.5`): shorter ones are dropped
    /// in the kernel before a record is made. With --hist every span is still counted.
    #[arg(long, value_name = "DURATION")]
    pub min: Option<String>,
    /// With --min: capture the user stack (up to 32 frames, innermost first) where each
    /// recorded span ended, and print it symbolized under the span (JSON: `stack`). The kernel
    /// walks frame pointers: code built without them gives short or wrong stacks. A stack that
    /// could not be read says so (`stack_error`) and is counted in the summary. Not with
    /// --hist or --top (they print no span records to hang a stack on).
    #[arg(long, requires = "min", conflicts_with_all = ["hist", "top"])]
    pub stack: bool,
    /// Record only what passes EXPR, decided in the kernel: comparisons (== != < <= > >=) of
    /// argN, PROBE:argN (only that probe's or span's records), pid, tid or comm (== != a name),
    /// joined by && and || (&& first; no parentheses). E.g. 'request:arg1 >= 500',
    /// 'comm == postgres || pid == 42'. Numbers compare as signed 64-bit values.
    #[arg(long, value_name = "EXPR")]
    pub filter: Option<String>,
    /// Trace only this thread (repeatable), in the kernel; combines with --filter.
    #[arg(long = "tid", value_name = "TID")]
    pub tids: Vec<u32>,
    /// With --hist or --count: also one histogram (count) per KEY value, kept in the kernel:
    /// argN (argument N of the span's start probe; of each probe with --count), PROBE:argN
    /// (that probe's argument: an end's, e.g. request__end:arg1), str0 (the string --str
    /// captures), pid, tid, comm, or probe (the end that closed the span; the probe counted).
    /// Up to 4 of them joined by commas key on their combination (`comm,arg1`, as bpftrace's
    /// `@[comm, arg1]`). At most --max-keys values; the rest are counted as "other". Sorted
    /// by count; with --hist each key's histogram is drawn after the table.
    #[arg(long, value_name = "KEY[,KEY...]")]
    pub by: Option<String>,
    /// With --by: how many key values the kernel keeps (per-CPU, ~4 KB each with --hist).
    #[arg(long, value_name = "N", default_value_t = usdt_trace_common::agg::DEFAULT_MAX_KEYS)]
    pub max_keys: u32,
    /// Count hits per probe in the kernel (nothing is paired or sent per hit) and print the
    /// counts at exit (and per --interval): to find which probes fire before choosing. (When
    /// no PATTERN is given and the probes include high-rate ones, such as line,
    /// function__entry/return, method__entry/return, object__alloc, watch warns and points
    /// here.)
    #[arg(long, conflicts_with_all = ["hist", "top", "perfetto", "otlp", "min"])]
    pub count: bool,
    /// Print only the N slowest spans, with their arguments and time split, at exit (and
    /// per --interval). The kernel records only spans that could still enter the top N.
    #[arg(long, value_name = "N", conflicts_with_all = ["hist", "perfetto", "otlp"])]
    pub top: Option<usize>,
    /// Do not split span time into on-CPU/run-queue/sleep/I/O (skips the scheduler hooks): spans
    /// carry durations only, and cost less (spans paired by id touch no per-thread state; poll
    /// markers are ignored). Without it, a span is split when one thread ran it from start to end, or, when it has usdt-markers
    /// poll markers (NAME__enter/NAME__exit), over the threads that polled it, plus the time
    /// between polls (idle); a span that ended on another thread without them has no split.
    #[arg(long)]
    pub no_sched: bool,
    /// How a function probe (`fn:`) finds a function's end. A return probe rewrites the
    /// return address on the stack, which harms programs where a C++ exception or Rust panic
    /// unwinds through the function, where it returns twice (setjmp) or is jumped over
    /// (longjmp), or where it is not entered by a call (`_start`, gcc's `.cold` fragments);
    /// an ordinary probe on each `ret` instruction changes nothing but costs a single-step
    /// per return. Functions that cannot be traced safely are refused with the reason (see
    /// `list --functions`). Go functions always end at their `ret`s.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = crate::elf::FnReturns::Auto)]
    pub fn_returns: crate::elf::FnReturns,
    /// Ring buffer size in KiB (a power of two, at least 4). Larger buffers absorb bursts.
    #[arg(long, value_name = "KIB", default_value_t = 16384)]
    pub ring_kib: u32,
    /// Threads that may hold per-thread span state at once (a thread holds it from its first
    /// span start until it exits; 16 KB each, allocated as used). Starts on further threads
    /// are dropped and reported in the summary's `dropped.threads_full`.
    #[arg(long, value_name = "N", default_value_t = crate::tracer::DEFAULT_MAX_THREADS)]
    pub max_threads: u32,
    /// Spans paired by id (--key, usdt-markers spans) that may be open at once beyond a fixed
    /// 4096-slot table every start tries first (~0.5 KB each while open). A start whose slot
    /// is taken uses one of these N entries; past them it is dropped and reported in
    /// `dropped.id_spans_full`. So at least N, and up to N + 4096, can be open at once.
    #[arg(long, value_name = "N", default_value_t = crate::tracer::DEFAULT_MAX_OPEN_IDS)]
    pub max_open_ids: u32,
    /// How to attach uprobes (`usdt-trace doctor` shows what this kernel supports).
    #[arg(long, value_name = "MODE", value_enum, default_value_t = AttachArg::Auto)]
    pub attach: AttachArg,
    /// Also write a Perfetto trace (protobuf) to FILE, as the run goes: open it in
    /// ui.perfetto.dev. Spans are slices on their thread's track, events are instants.
    // --hist keeps spans in the kernel: there would be nothing to write.
    #[arg(long, value_name = "FILE", conflicts_with = "hist")]
    pub perfetto: Option<PathBuf>,
    /// Also export spans over OTLP/HTTP (protobuf) to this collector:
    /// `http[s]://HOST[:PORT][/PATH]` (port 4318 for http, 443 for https; path /v1/traces by
    /// default), or `env`: where the OpenTelemetry SDKs' environment says
    /// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT; else
    /// http://localhost:4318/v1/traces). The other OTEL_EXPORTER_OTLP_* variables apply when
    /// their flag is not given. Sent from a background thread: a slow or dead collector drops
    /// spans (counted), it never slows tracing.
    #[arg(long, value_name = "URL", conflicts_with = "hist")]
    pub otlp: Option<String>,
    /// With --otlp: the resource's service.name (default: OTEL_SERVICE_NAME, service.name in
    /// OTEL_RESOURCE_ATTRIBUTES, else the traced executable's file name).
    #[arg(long, value_name = "NAME", requires = "otlp")]
    pub otlp_service: Option<String>,
    /// With --otlp: how many spans may wait for the exporter (queued, waiting for their
    /// parent, batched or in a POST) before new ones are dropped.
    #[arg(long, value_name = "SPANS", requires = "otlp", default_value_t = crate::output::otlp::DEFAULT_QUEUE)]
    pub otlp_queue: usize,
    /// With --otlp: send this HTTP header with every request, e.g. an API key (repeat for
    /// several). Given, it replaces `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS` (`k=v,k2=v2`).
    #[arg(long, value_name = "KEY=VALUE", requires = "otlp")]
    pub otlp_header: Vec<String>,
    /// With --otlp: compress requests, `gzip` or `none` (default: none, or
    /// `OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION`).
    #[arg(long, value_name = "ALGO", requires = "otlp")]
    pub otlp_compression: Option<String>,
    /// With an https:// --otlp: trust the certificate authorities in this PEM file instead of
    /// the system's (default: `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`, else the system's
    /// store).
    #[arg(long, value_name = "FILE", requires = "otlp")]
    pub otlp_ca: Option<PathBuf>,
    /// With --hist: serve Prometheus metrics at http://ADDR/metrics while tracing (ADDR is
    /// HOST:PORT, e.g. 127.0.0.1:9435): per span name (and --by key) a duration histogram
    /// whose buckets are the kernel's own, the time split as counters, events, losses and the
    /// tracer's health. Each scrape reads the kernel's histograms; nothing is added per span.
    #[arg(long, value_name = "ADDR", requires = "hist")]
    pub prometheus: Option<String>,
    /// With --prometheus: histogram buckets exported per power of two, each a kernel bucket
    /// bound from 256 ns to 68.7 s: 8 (every kernel bucket: the error --hist has), 4, 2 or 1.
    /// Fewer make fewer series and coarser quantiles.
    #[arg(long, value_name = "N", requires = "prometheus", default_value_t = 8)]
    pub prometheus_buckets: u32,
    /// With --otlp: how long one POST may take, from connecting to the collector's answer
    /// (default: 5, or `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT` in ms). A batch sent whole without
    /// an answer in time is not resent (the collector may have it; resending could duplicate
    /// its spans): it is counted as unanswered.
    #[arg(long, value_name = "SECS", requires = "otlp")]
    pub otlp_timeout: Option<u64>,
    /// Benchmarks only: attach a program that only returns (`usdt_null`), so nothing is
    /// recorded; what any handler pays for the hit itself (bench/handler.py, bench/goals.py).
    /// Hidden from --help, and said on stderr when used: it must never be what a user runs by
    /// mistake (it was an environment variable, which a shell could leave set unnoticed).
    #[arg(long, hide = true)]
    pub bench_null_program: bool,
    /// The executable or library to trace, then provider:name glob patterns (default: all).
    /// An argument with '/' is a file; without -p, the first other argument is a file when it
    /// names one (here, else a program on PATH); every other argument is a pattern.
    /// `usdt:PATH:PATTERN` (bpftrace's spelling) names both. `fn:GLOB` traces functions
    /// instead of notes: a span from each matching function's entry to its return, with
    /// arguments arg0..arg5 (x86_64 SysV registers; x0..x7 on aarch64) and the return value
    /// as the end's argument 0 (see `list --functions`; `--str fn:GLOB:N` or
    /// `--str fn:GLOB:ret`). In Go programs, never a return probe: the entry past the stack
    /// check and an ordinary uprobe on each `ret`, with Go's register ABI (nine arguments).
    #[arg(value_name = "TARGET|PATTERN")]
    pub args: Vec<String>,
}

/// What separates an error's message from its one hint line (see `WatchError::NoProbesHint`).
pub const HINT_LINE: &str = "\nhint: ";

/// Largest `--max-threads`: 65536 thread states are 1 GB at worst (2 GB with strings).
const MAX_THREADS_LIMIT: u32 = 1 << 16;
/// Largest `--max-keys`: 65536 per-CPU histograms are 256 MB per CPU at worst.
const MAX_KEYS_LIMIT: u32 = 1 << 16;
/// Largest `--top`: the list is printed whole.
const MAX_TOP: usize = 10_000;
/// Largest `--max-open-ids`: 4M open spans are 2 GB at worst.
const MAX_OPEN_IDS_LIMIT: u32 = 1 << 22;
/// Largest `--otlp-queue`: the channel takes room for every slot up front (~350 bytes a span),
/// so 1M spans are ~350 MB; 4 billion asked for 1.4 TB and aborted.
const MAX_OTLP_QUEUE: usize = 1 << 20;
/// Largest `--otlp-timeout`: an hour is no longer a timeout.
const MAX_OTLP_TIMEOUT: u64 = crate::output::otlp::settings::MAX_TIMEOUT.as_secs();

/// A command-line mistake, reported as one line.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error(transparent)]
    Pattern(#[from] crate::pattern::PatternError),
    #[error(transparent)]
    Span(#[from] crate::spans::SpanError),
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    #[error("--duration {0:?}: expected a positive duration: seconds (2.5) or with a unit (500ms, 10s, 1m, 1h)")]
    Duration(String),
    #[error("--interval {0:?}: expected a positive duration: seconds (2.5) or with a unit (500ms, 10s, 1m, 1h)")]
    Interval(String),
    #[error(
        "--min {0:?}: expected a positive duration: seconds (2.5) or with a unit (2ms, 500us, 1s)"
    )]
    Min(String),
    #[error(transparent)]
    Filter(#[from] crate::filter::FilterError),
    #[error(transparent)]
    Agg(#[from] crate::agg::AggError),
    #[error(
        "--interval needs --hist, --count or --top: it prints what they aggregated per interval"
    )]
    IntervalMode,
    #[error("--by needs --hist or --count: it splits their histograms or counts by key")]
    ByMode,
    #[error("{path}: a script for {interpreter}; trace that (its probes are in the interpreter and its libraries)")]
    Script { path: String, interpreter: String },
    #[error("-c: {0:?}: pipelines and command lists are not traced; run one program (redirections and VAR=value are fine)")]
    CommandList(String),
    #[error("--ring-kib {0}: must be a power of two between 4 and 1048576")]
    Ring(u32),
    #[error("--{flag} {value}: must be between 1 and {max}")]
    Limit {
        flag: &'static str,
        /// As given, whatever its size (clap parsed it into a usize or u32).
        value: u64,
        max: u64,
    },
    #[error("-c: empty or unbalanced command {0:?}")]
    Command(String),
    #[error("-c: {0:?} is not an executable file (nor found in PATH)")]
    CommandNotFound(String),
    #[error("nothing to trace: name a TARGET file, give -p PID, or -c CMD")]
    NoTarget,
    #[error("-c cannot be combined with -p")]
    CommandAndPid,
    #[error("--wait-for-probes: with both -p and TARGET no probe is looked for later; drop TARGET (every object of the process is followed) or -p (every process running TARGET is)")]
    WaitWithPidAndTarget,
    #[error(transparent)]
    OutFile(#[from] crate::outfile::OutFileError),
    #[error(transparent)]
    Otlp(#[from] crate::output::otlp::settings::SettingsError),
    #[error(transparent)]
    OtlpCa(#[from] crate::output::otlp::http::CaError),
    #[error(transparent)]
    Prometheus(#[from] crate::output::prometheus::serve::ServeError),
    #[error(
        "--prometheus-buckets {0}: expected 1, 2, 4 or 8 (kernel bucket bounds per power of two)"
    )]
    PromBuckets(u32),
}

/// Split positional arguments into files and patterns, by one rule that never guesses from
/// what happens to exist: `fn:GLOB` is a pattern; an argument with '/' is a file; `usdt:PATH[:PATTERN]` is both; when
/// `first_may_be_file` (no -p), the first other argument is a file if it names one here or a
/// program on PATH; every other argument is a pattern. So `list python3.11 gc__start` filters
/// on gc__start even if a file of that name exists here (write ./gc__start for the file).
fn split_targets(
    args: &[String],
    first_may_be_file: bool,
) -> Result<(Vec<PathBuf>, Vec<Pattern>), UsageError> {
    let mut targets = Vec::new();
    let mut patterns = Vec::new();
    let mut first = first_may_be_file;
    for a in args {
        if let Some(rest) = a.strip_prefix("usdt:") {
            // The path runs to the first ':' after its last '/'.
            let slash = rest.rfind('/').map_or(0, |i| i + 1);
            let (path, pattern) = match rest[slash..].find(':') {
                Some(i) => (&rest[..slash + i], &rest[slash + i + 1..]),
                None => (rest, ""),
            };
            targets.push(resolve_program(path));
            if !pattern.is_empty() {
                patterns.push(Pattern::parse(pattern)?);
            }
        } else if a.starts_with("fn:") {
            // Go function names hold '/' (`fn:net/http.serverHandler.ServeHTTP`).
            patterns.push(Pattern::parse(a)?);
        } else if a.contains('/') {
            targets.push(PathBuf::from(a));
        } else if first && !a.contains([':', '*', '?', '[']) && file_or_program(a).is_some() {
            targets.push(file_or_program(a).unwrap_or_default());
        } else {
            patterns.push(Pattern::parse(a)?);
        }
        first = false;
    }
    for t in &targets {
        check_not_script(t)?;
    }
    Ok((targets, patterns))
}

/// `name` as a file here, else as a program on PATH. Anything here but a directory counts as
/// the file (a FIFO, a device): it is then refused for what it is, not taken for a pattern
/// that matches nothing.
fn file_or_program(name: &str) -> Option<PathBuf> {
    let here = Path::new(name);
    if here.metadata().is_ok_and(|m| !m.is_dir()) {
        return Some(here.to_path_buf());
    }
    which(name)
}

fn resolve_program(p: &str) -> PathBuf {
    if p.contains('/') {
        PathBuf::from(p)
    } else {
        file_or_program(p).unwrap_or_else(|| PathBuf::from(p))
    }
}

/// A `#!` script has no probes of its own: name the interpreter to trace instead.
fn check_not_script(path: &Path) -> Result<(), UsageError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut head = [0u8; 256];
    // O_NONBLOCK, then the type before any read: opening a FIFO for reading would otherwise
    // wait for a writer forever.
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    else {
        return Ok(()); // opening errors are reported, with context, when the target is opened
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        // Not a file: refused for what it is when the target is opened.
        return Ok(());
    }
    let n = f.read(&mut head).unwrap_or(0);
    if let Some(rest) = head[..n].strip_prefix(b"#!") {
        let line = rest.split(|&b| b == b'\n').next().unwrap_or(&[]);
        let line = String::from_utf8_lossy(line);
        let mut words = line.split_whitespace();
        let mut interpreter = words.next().unwrap_or("").to_string();
        // `#!/usr/bin/env python3`: the program env runs.
        if interpreter.ends_with("/env") {
            if let Some(prog) = words.find(|w| !w.starts_with('-')) {
                interpreter = which(prog).map_or(prog.to_string(), |p| p.display().to_string());
            }
        }
        return Err(UsageError::Script {
            path: path.display().to_string(),
            interpreter,
        });
    }
    Ok(())
}

/// A duration: plain seconds (`2.5`) or a number with a unit (`ns`, `us`, `ms`, `s`, `m`, `h`).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ns" => 1e-9,
        "us" => 1e-6,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    let secs = v * scale;
    (secs.is_finite() && secs > 0.0 && secs < 1e9).then(|| Duration::from_secs_f64(secs))
}

/// True when `cmd` needs a shell: redirections, variables, quotes that sh must see.
fn has_shell_syntax(cmd: &str) -> bool {
    cmd.contains(['<', '>', '$', '`', '|', '&', ';', '(', ')', '*', '?', '~'])
        || shlex::split(cmd)
            .and_then(|v| v.first().cloned())
            .is_some_and(|w| is_assignment(&w))
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// The argv to run for `-c CMD`, and the program it ends up executing (what to trace). A
/// command with shell syntax runs as `sh -c 'exec [env VAR=x] CMD'`: sh sets up redirections
/// and then replaces itself, so the traced process is the program itself.
fn command_argv(cmd: &str) -> Result<(Vec<String>, String), UsageError> {
    let words = shlex::split(cmd)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| UsageError::Command(cmd.to_string()))?;
    if !has_shell_syntax(cmd) {
        let prog = words[0].clone();
        return Ok((words, prog));
    }
    // Outside quotes, these make several processes: refuse rather than trace the wrong one.
    let unquoted: String = {
        let mut out = String::new();
        let (mut sq, mut dq) = (false, false);
        for c in cmd.chars() {
            match c {
                '\'' if !dq => sq = !sq,
                '"' if !sq => dq = !dq,
                c if !sq && !dq => out.push(c),
                _ => {}
            }
        }
        out
    };
    // `2>&1`, `<&3` and `&>` are redirections, not background jobs.
    let unquoted = unquoted
        .replace(">&", ">")
        .replace("<&", "<")
        .replace("&>", ">");
    if unquoted.contains(['|', ';', '&', '(', ')', '`']) {
        return Err(UsageError::CommandList(cmd.to_string()));
    }
    let assignments = words.iter().take_while(|w| is_assignment(w)).count();
    let prog = words
        .get(assignments)
        .filter(|w| !w.starts_with(['<', '>']))
        .cloned()
        .ok_or_else(|| UsageError::Command(cmd.to_string()))?;
    let script = if assignments > 0 {
        format!("exec env {cmd}")
    } else {
        format!("exec {cmd}")
    };
    Ok((vec!["/bin/sh".into(), "-c".into(), script], prog))
}

impl ListArgs {
    pub fn validate(&self) -> Result<ListConfig, UsageError> {
        let (targets, patterns) = split_targets(&self.args, self.pid.is_none())?;
        Ok(ListConfig {
            json: self.json,
            names: self.names,
            targets,
            pid: self.pid,
            patterns,
        })
    }
}

/// `list --functions BIN [GLOB...]`: the first argument is the file (a path, or a program on
/// PATH), the rest globs over function names (which may hold `::`, so they are not
/// provider:name patterns).
fn list_functions(a: &ListArgs) -> Result<i32, String> {
    let Some((bin, globs)) = a.args.split_first() else {
        return Err("list --functions: name an ELF file".into());
    };
    let path = resolve_program(bin);
    check_not_script(&path).map_err(|e| e.to_string())?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match crate::functions::list(&path, globs, a.json, &mut out) {
        // As `list BIN PATTERN`: globs that match nothing are an error, not an empty success.
        Ok(0) if !globs.is_empty() => Err(format!(
            "no function of {} matches {}",
            crate::output::text::clean(&path.display().to_string()),
            globs.join(" ")
        )),
        Ok(_) => Ok(0),
        Err(e) if e.is_broken_pipe() => Ok(0),
        Err(e) => Err(e.to_string()),
    }
}

/// Find `prog` the way execvp would.
fn which(prog: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if prog.contains('/') {
        let p = PathBuf::from(prog);
        return runnable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| runnable(p))
}

impl WatchArgs {
    pub fn validate(&self) -> Result<WatchConfig, UsageError> {
        // With -p or -c the program is known: bare words are patterns.
        let first_may_be_file = self.pids.is_empty() && self.command.is_none();
        let (mut targets, patterns) = split_targets(&self.args, first_may_be_file)?;
        let key = match self.key {
            Some(k) if k >= usdt_trace_common::MAX_ARGS => {
                return Err(crate::spans::SpanError::KeyIndex(k).into())
            }
            k => k.map(|k| k as u8),
        };
        let spans = self
            .spans
            .iter()
            .map(|s| SpanRule::parse(s).map(|r| SpanRule { key, ..r }))
            .collect::<Result<Vec<_>, _>>()?;
        let strs = self
            .strs
            .iter()
            .map(|s| StrRule::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        let names = self
            .arg_names
            .iter()
            .map(|s| crate::plan::ArgNames::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        let str_max = self.str_max;
        if !(1..=usdt_trace_common::STR_MAX_CAP as u32).contains(&str_max) {
            return Err(UsageError::Limit {
                flag: "str-max",
                value: str_max.into(),
                max: usdt_trace_common::STR_MAX_CAP as u64,
            });
        }
        let duration = self
            .duration
            .as_deref()
            .map(|d| parse_duration(d).ok_or_else(|| UsageError::Duration(d.to_string())))
            .transpose()?;
        let interval = self
            .interval
            .as_deref()
            .map(|d| parse_duration(d).ok_or_else(|| UsageError::Interval(d.to_string())))
            .transpose()?;
        let min = self
            .min
            .as_deref()
            .map(|d| parse_duration(d).ok_or_else(|| UsageError::Min(d.to_string())))
            .transpose()?;
        let filter = self
            .filter
            .as_deref()
            .map(crate::filter::Filter::parse)
            .transpose()?;
        let filter = crate::filter::Filter::with_tids(filter, &self.tids)?;
        if let Some(f) = filter.as_ref().filter(|f| self.hist && f.reads_args()) {
            return Err(crate::filter::FilterError::HistArgs {
                expr: f.text.clone(),
            }
            .into());
        }
        if interval.is_some() && !(self.hist || self.count || self.top.is_some()) {
            return Err(UsageError::IntervalMode);
        }
        let by = self.by.as_deref().map(crate::agg::By::parse).transpose()?;
        if by.is_some() && !(self.hist || self.count) {
            return Err(UsageError::ByMode);
        }
        if let Some(top) = self.top.filter(|&n| !(1..=MAX_TOP).contains(&n)) {
            return Err(UsageError::Limit {
                flag: "top",
                value: top as u64,
                max: MAX_TOP as u64,
            });
        }
        let agg = crate::watch::AggArgs {
            by,
            count: self.count,
            top: self.top,
            max_keys: self.max_keys,
        };
        if !(4..=1 << 20).contains(&self.ring_kib) || !self.ring_kib.is_power_of_two() {
            return Err(UsageError::Ring(self.ring_kib));
        }
        // Upper bounds keep a typo from asking the kernel for gigabytes at load.
        for (flag, value, max) in [
            ("max-threads", self.max_threads, MAX_THREADS_LIMIT),
            ("max-open-ids", self.max_open_ids, MAX_OPEN_IDS_LIMIT),
            ("max-keys", self.max_keys, MAX_KEYS_LIMIT),
        ] {
            if !(1..=max).contains(&value) {
                return Err(UsageError::Limit {
                    flag,
                    value: value.into(),
                    max: max.into(),
                });
            }
        }
        let command = match &self.command {
            Some(c) => {
                if !self.pids.is_empty() {
                    return Err(UsageError::CommandAndPid);
                }
                let (argv, prog) = command_argv(c)?;
                let exe = which(&prog).ok_or_else(|| UsageError::CommandNotFound(prog.clone()))?;
                if targets.is_empty() {
                    check_not_script(&exe)?;
                    targets.push(exe);
                }
                Some(argv)
            }
            None => None,
        };
        if targets.is_empty() && self.pids.is_empty() {
            return Err(UsageError::NoTarget);
        }
        if self.wait_for_probes && !targets.is_empty() && !self.pids.is_empty() {
            return Err(UsageError::WaitWithPidAndTarget);
        }
        // The same process named twice is traced once.
        let mut pids = self.pids.clone();
        let mut seen = std::collections::HashSet::new();
        pids.retain(|p| seen.insert(*p));
        // Fail before targets are parsed or waited for, and without creating or emptying
        // anything: the run opens them for real, and empties an existing file only once it has
        // attached (see `outfile`).
        if let Some(p) = &self.output {
            crate::outfile::check("-o", p)?;
        }
        if let Some(p) = &self.perfetto {
            crate::outfile::check("--perfetto", p)?;
        }
        let otlp = match &self.otlp {
            Some(url) => {
                if !(1..=MAX_OTLP_QUEUE).contains(&self.otlp_queue) {
                    return Err(UsageError::Limit {
                        flag: "otlp-queue",
                        value: self.otlp_queue as u64,
                        max: MAX_OTLP_QUEUE as u64,
                    });
                }
                if let Some(t) = self.otlp_timeout {
                    if !(1..=MAX_OTLP_TIMEOUT).contains(&t) {
                        return Err(UsageError::Limit {
                            flag: "otlp-timeout",
                            value: t,
                            max: MAX_OTLP_TIMEOUT,
                        });
                    }
                }
                let flags = otlp_settings::Flags {
                    endpoint: (url != otlp_settings::FROM_ENV).then(|| url.clone()),
                    headers: self.otlp_header.clone(),
                    compression: self.otlp_compression.clone(),
                    timeout_secs: self.otlp_timeout,
                    ca: self.otlp_ca.clone(),
                    service: self.otlp_service.clone(),
                };
                let s = otlp_settings::resolve(&flags, &|k| std::env::var(k).ok())?;
                let ca = match &s.ca {
                    Some((path, src)) => Some(crate::output::otlp::http::load_ca(src, path)?),
                    None => None,
                };
                Some(OtlpConfig {
                    endpoint: s.endpoint,
                    service: s.service,
                    resource: s.resource,
                    headers: s.headers,
                    compression: s.compression,
                    ca,
                    queue: self.otlp_queue,
                    timeout: s.timeout,
                })
            }
            None => None,
        };
        if !crate::output::prometheus::BUCKETS_PER_OCTAVE.contains(&self.prometheus_buckets) {
            return Err(UsageError::PromBuckets(self.prometheus_buckets));
        }
        let prometheus = self
            .prometheus
            .as_deref()
            .map(|a| {
                crate::output::prometheus::serve::parse_addr(a).map(|addr| {
                    crate::watch::PromConfig {
                        addr,
                        per_octave: self.prometheus_buckets,
                    }
                })
            })
            .transpose()?;
        Ok(WatchConfig {
            prometheus,
            json: self.json,
            perfetto: self.perfetto.clone(),
            otlp,
            targets,
            pids,
            command,
            duration,
            patterns,
            spans,
            strs,
            str_max,
            names,
            auto_span: !self.no_auto_span,
            hist: self.hist,
            interval,
            sched: !self.no_sched,
            fn_returns: self.fn_returns,
            ring_bytes: self.ring_kib * 1024,
            leave_running: self.leave_running,
            attach: self.attach.into(),
            output: self.output.clone(),
            max_threads: self.max_threads,
            max_open_ids: self.max_open_ids,
            min,
            stack: self.stack,
            filter,
            agg,
            wait_for_probes: self.wait_for_probes,
            bench_null_program: self.bench_null_program,
        })
    }
}

/// Writes generated text to stdout; a closed pipe is not an error.
fn write_stdout(bytes: &[u8]) -> Result<i32, String> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(bytes) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(format!("writing output: {e}")),
    }
}

/// Parse, validate, run; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    let result: Result<i32, String> = match cli.command {
        Command::List(a) if a.functions => list_functions(&a),
        Command::List(a) => match a.validate() {
            Err(e) => Err(e.to_string()),
            Ok(cfg) => {
                let stdout = std::io::stdout();
                let mut out = std::io::BufWriter::new(stdout.lock());
                let mut err = std::io::stderr();
                match list::run(&cfg, &mut out, &mut err).and_then(|n| {
                    std::io::Write::flush(&mut out)
                        .map(|_| n)
                        .map_err(Into::into)
                }) {
                    // As in `watch`: patterns that match nothing are an error, so a script
                    // can tell a typo from a listing.
                    Ok(0) if !cfg.patterns.is_empty() => Err(format!(
                        "no probe matches {}",
                        cfg.patterns
                            .iter()
                            .map(|p| p.to_string())
                            .collect::<Vec<_>>()
                            .join(" ")
                    )),
                    Ok(_) => Ok(0),
                    Err(e) if e.is_broken_pipe() => Ok(0),
                    Err(e) => Err(e.to_string()),
                }
            }
        },
        Command::Watch(a) => match a.validate() {
            Err(e) => Err(e.to_string()),
            Ok(cfg) => match watch::run(&cfg) {
                Ok(code) => Ok(code),
                Err(e) if e.is_broken_pipe() => Ok(0),
                Err(e) => Err(e.to_string()),
            },
        },
        Command::Diff(a) => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            match crate::diff::run(&a.before, &a.after, a.json, &mut out) {
                Ok(()) => Ok(0),
                Err(e) if e.is_broken_pipe() => Ok(0),
                Err(e) => Err(e.to_string()),
            }
        }
        Command::Doctor(a) => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            match crate::doctor::run(a.json, &mut out) {
                Ok(()) => Ok(0),
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
                Err(e) => Err(format!("writing output: {e}")),
            }
        }
        Command::Completions { shell } => write_stdout(&completion_script(shell)),
        Command::Man { command, dir } => match (command, dir) {
            (_, Some(dir)) => man_dir(&dir).map(|n| {
                eprintln!("usdt-trace: wrote {n} man pages to {}", dir.display());
                0
            }),
            (command, None) => man_page(command.as_deref())
                .map_err(|e| e.to_string())
                .and_then(|page| write_stdout(&page)),
        },
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            // One line: nested causes are already folded into the message. An error may end
            // in one `hint: ` line (a command to run instead), kept on its own line.
            let (msg, hint) = match msg.split_once(HINT_LINE) {
                Some((m, h)) => (m.to_string(), Some(h.replace('\n', " "))),
                None => (msg, None),
            };
            eprintln!("usdt-trace: error: {}", msg.replace('\n', " "));
            if let Some(h) = hint {
                eprintln!("hint: {h}");
            }
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(args: &[&str]) -> Result<WatchConfig, UsageError> {
        let mut v = vec!["usdt-trace", "watch"];
        v.extend_from_slice(args);
        match Cli::try_parse_from(v).unwrap().command {
            Command::Watch(w) => w.validate(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn positional_split() {
        let c = watch(&["/bin/true", "p:*start", "x"]).unwrap();
        assert_eq!(c.targets, vec![PathBuf::from("/bin/true")]);
        assert_eq!(c.patterns.len(), 2);
    }

    #[test]
    fn bad_values_are_usage_errors() {
        assert!(matches!(
            watch(&["/bin/true", "--duration=-1"]),
            Err(UsageError::Duration(_))
        ));
        assert!(matches!(
            watch(&["/bin/true", "--ring-kib", "3"]),
            Err(UsageError::Ring(3))
        ));
        assert!(matches!(
            watch(&["/bin/true", "--span", "x"]),
            Err(UsageError::Span(_))
        ));
        assert!(matches!(
            watch(&["/bin/true", "--str", "p:n:99"]),
            Err(UsageError::Span(_))
        ));
        assert!(matches!(watch(&[]), Err(UsageError::NoTarget)));
        assert!(matches!(
            watch(&["-c", "no-such-cmd-xyz"]),
            Err(UsageError::CommandNotFound(_))
        ));
        assert!(matches!(
            watch(&["-c", "'unbalanced"]),
            Err(UsageError::Command(_))
        ));
        assert!(matches!(
            watch(&["-c", "true", "-p", "1"]),
            Err(UsageError::CommandAndPid)
        ));
    }

    #[test]
    fn attach_mode_flag() {
        assert_eq!(watch(&["/bin/true"]).unwrap().attach, AttachMode::Auto);
        assert_eq!(
            watch(&["--attach", "perf", "/bin/true"]).unwrap().attach,
            AttachMode::Perf
        );
        assert_eq!(
            watch(&["--attach=multi", "/bin/true"]).unwrap().attach,
            AttachMode::Multi
        );
        let e = Cli::try_parse_from(["usdt-trace", "watch", "--attach", "kprobe", "/bin/true"])
            .unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
    }

    #[test]
    fn prometheus_flags() {
        let c = watch(&["/bin/true", "--hist", "--prometheus", "127.0.0.1:9435"]).unwrap();
        let p = c.prometheus.unwrap();
        assert_eq!(p.addr.to_string(), "127.0.0.1:9435");
        assert_eq!(p.per_octave, 8);
        let c = watch(&[
            "/bin/true",
            "--hist",
            "--prometheus=[::1]:9",
            "--prometheus-buckets=2",
        ])
        .unwrap();
        assert_eq!(c.prometheus.unwrap().per_octave, 2);
        assert!(watch(&["/bin/true"]).unwrap().prometheus.is_none());
        assert!(matches!(
            watch(&["/bin/true", "--hist", "--prometheus", "9435"]),
            Err(UsageError::Prometheus(_))
        ));
        assert!(matches!(
            watch(&[
                "/bin/true",
                "--hist",
                "--prometheus",
                "127.0.0.1:9",
                "--prometheus-buckets",
                "3"
            ]),
            Err(UsageError::PromBuckets(3))
        ));
        // The exported histograms are the kernel's: only --hist keeps them.
        for args in [
            &["watch", "--prometheus", "127.0.0.1:9", "/bin/true"][..],
            &["watch", "--hist", "--prometheus-buckets", "2", "/bin/true"][..],
        ] {
            let mut v = vec!["usdt-trace"];
            v.extend_from_slice(args);
            assert!(Cli::try_parse_from(v).is_err(), "{args:?}");
        }
    }

    #[test]
    fn export_flags() {
        let c = watch(&[
            "/bin/true",
            "--otlp",
            "http://127.0.0.1:9/x",
            "--otlp-service",
            "s",
        ])
        .unwrap();
        let o = c.otlp.unwrap();
        assert_eq!(o.endpoint.to_string(), "http://127.0.0.1:9/x");
        assert_eq!(o.service.as_deref(), Some("s"));
        assert_eq!(o.queue, crate::output::otlp::DEFAULT_QUEUE);
        assert_eq!(o.timeout, std::time::Duration::from_secs(5));
        let t = watch(&["/bin/true", "--otlp", "http://x", "--otlp-timeout", "12"]).unwrap();
        assert_eq!(t.otlp.unwrap().timeout, std::time::Duration::from_secs(12));
        assert!(matches!(
            watch(&["/bin/true", "--otlp", "http://x", "--otlp-timeout", "0"]),
            Err(UsageError::Limit {
                flag: "otlp-timeout",
                value: 0,
                max: 3600
            })
        ));
        assert!(matches!(
            watch(&["/bin/true", "--otlp", "ftp://x"]),
            Err(UsageError::Otlp(_))
        ));
        let h = watch(&[
            "/bin/true",
            "--otlp",
            "https://x",
            "--otlp-header",
            "x-api-key=k",
            "--otlp-header",
            "x-b=2",
            "--otlp-compression",
            "gzip",
        ])
        .unwrap()
        .otlp
        .unwrap();
        assert!(h.endpoint.tls);
        assert_eq!(h.headers.0.len(), 2);
        assert_eq!(h.compression, otlp_settings::Compression::Gzip);
        // Bad input: one line each, naming the flag.
        for (args, says) in [
            (
                &["--otlp-header", "novalue"][..],
                "--otlp-header \"novalue\": expected KEY=VALUE",
            ),
            (
                &["--otlp-compression", "br"][..],
                "--otlp-compression \"br\": unsupported",
            ),
            (
                &["--otlp-ca", "/nonexistent/ca.pem"][..],
                "--otlp-ca /nonexistent/ca.pem: No such file",
            ),
        ] {
            let mut v = vec!["/bin/true", "--otlp", "https://x"];
            v.extend_from_slice(args);
            let e = watch(&v).unwrap_err().to_string();
            assert!(e.starts_with(says) && !e.contains('\n'), "{e}");
        }
        assert!(matches!(
            watch(&["/bin/true", "--otlp", "http://x", "--otlp-queue", "0"]),
            Err(UsageError::Limit {
                flag: "otlp-queue",
                value: 0,
                ..
            })
        ));
        assert!(
            Cli::try_parse_from(["usdt-trace", "watch", "--otlp-service", "s", "/bin/true"])
                .is_err()
        );
        for flag in ["--perfetto=/tmp/x", "--otlp=http://x"] {
            let e = Cli::try_parse_from(["usdt-trace", "watch", "--hist", flag, "/bin/true"])
                .unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        }
        assert!(matches!(
            watch(&["/bin/true", "--perfetto", "/nonexistent-dir/x.pftrace"]),
            Err(UsageError::OutFile(_))
        ));
    }

    #[test]
    fn sizes_past_their_limit_are_refused_with_the_value_given() {
        let e = watch(&[
            "/bin/true",
            "--otlp",
            "http://x",
            "--otlp-queue",
            "4000000000",
        ])
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--otlp-queue 4000000000: must be between 1 and 1048576"
        );
        assert!(watch(&["/bin/true", "--otlp", "http://x", "--otlp-queue", "1048576"]).is_ok());
        // Not clamped to u32::MAX on the way to the message.
        let e = watch(&["/bin/true", "--top", "99999999999"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--top 99999999999: must be between 1 and 10000"
        );
        let e = watch(&["/bin/true", "--top", "0"]).unwrap_err();
        assert_eq!(e.to_string(), "--top 0: must be between 1 and 10000");
        let e = watch(&["/bin/true", "--max-keys", "4000000000"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--max-keys 4000000000: must be between 1 and 65536"
        );
    }

    #[test]
    fn the_benchmark_null_program_is_a_hidden_flag_not_the_environment() {
        use clap::CommandFactory;
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("watch")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(!help.contains("bench"), "{help}");
        assert!(
            watch(&["/bin/true", "--bench-null-program"])
                .unwrap()
                .bench_null_program
        );
        assert!(!watch(&["/bin/true"]).unwrap().bench_null_program);
    }

    #[test]
    fn command_becomes_target() {
        let c = watch(&["-c", "true --x 'a b'"]).unwrap();
        assert_eq!(c.command.unwrap(), vec!["true", "--x", "a b"]);
        assert!(c.targets[0].ends_with("true"));
    }

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("2.5"), Some(Duration::from_millis(2500)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("10us"), Some(Duration::from_micros(10)));
        for bad in ["", "0", "-1", "1x", "ms", "nan", "1e99"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        assert!(matches!(
            watch(&["/bin/true", "-d", "1fortnight"]),
            Err(UsageError::Duration(_))
        ));
        let c = watch(&["/bin/true", "-d", "1m", "--hist", "-i", "500ms"]).unwrap();
        assert_eq!(c.duration, Some(Duration::from_secs(60)));
        assert_eq!(c.interval, Some(Duration::from_millis(500)));
        let c = watch(&["/bin/true", "--min", "2ms"]).unwrap();
        assert_eq!(c.min, Some(Duration::from_millis(2)));
        assert!(matches!(
            watch(&["/bin/true", "--min", "fast"]),
            Err(UsageError::Min(_))
        ));
    }

    #[test]
    fn one_rule_splits_files_from_patterns() {
        // Tests run in the package directory, where Cargo.toml exists: a file that is not the
        // first argument is still a pattern (no guessing from what happens to exist).
        assert!(Path::new("Cargo.toml").is_file());
        let (t, p) = split_targets(&["sh".into(), "Cargo.toml".into()], true).unwrap();
        assert_eq!(t.len(), 1);
        assert!(t[0].ends_with("sh"), "{t:?}");
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].to_string(), "Cargo.toml");
        // First, it names the file here.
        let (t, p) = split_targets(&["Cargo.toml".into()], true).unwrap();
        assert_eq!((t, p.len()), (vec![PathBuf::from("Cargo.toml")], 0));
        let (t, p) = split_targets(&["./Cargo.toml".into()], false).unwrap();
        assert_eq!((t.len(), p.len()), (1, 0));
        // Without -p or -c freedom (first_may_be_file false), a bare word is a pattern.
        let (t, p) = split_targets(&["sh".into()], false).unwrap();
        assert_eq!((t.len(), p.len()), (0, 1));
        // bpftrace's spelling.
        let (t, p) = split_targets(&["usdt:/bin/sh:python:function__entry".into()], true).unwrap();
        assert_eq!(t, vec![PathBuf::from("/bin/sh")]);
        assert_eq!(p[0].to_string(), "python:function__entry");
        let (t, p) = split_targets(&["usdt:/bin/sh".into()], true).unwrap();
        assert_eq!((t.len(), p.len()), (1, 0));
    }

    #[test]
    fn a_script_names_its_interpreter() {
        let f = std::env::temp_dir().join(format!("usdt-cli-script-{}.py", std::process::id()));
        std::fs::write(&f, b"#!/usr/bin/env sh\nprint(1)\n").unwrap();
        let e = check_not_script(&f).unwrap_err();
        let _ = std::fs::remove_file(&f);
        let msg = e.to_string();
        assert!(
            msg.contains("a script for /")
                && msg.ends_with(
                    "sh; trace that (its probes are in the interpreter and its libraries)"
                ),
            "{msg}"
        );
    }

    #[test]
    fn hist_help_says_log_linear_as_the_buckets_are() {
        use clap::CommandFactory;
        let mut cmd = Cli::command();
        cmd.build();
        let help = cmd
            .find_subcommand_mut("watch")
            .unwrap()
            .render_long_help()
            .to_string();
        let hist = help.split("--hist").nth(1).unwrap_or("");
        assert!(
            hist.contains("log-linear histograms") && hist.contains("6.25%"),
            "{help}"
        );
        assert!(!help.contains("log2 histograms"), "{help}");
    }

    #[test]
    fn commands_with_shell_syntax_run_through_sh_and_exec() {
        let (argv, prog) = command_argv("prog --x 'a b'").unwrap();
        assert_eq!(argv, vec!["prog", "--x", "a b"]);
        assert_eq!(prog, "prog");
        let (argv, prog) = command_argv("prog > out.txt 2>&1").unwrap();
        assert_eq!(argv, vec!["/bin/sh", "-c", "exec prog > out.txt 2>&1"]);
        assert_eq!(prog, "prog");
        let (argv, prog) = command_argv("A=1 B=2 prog x").unwrap();
        assert_eq!(argv, vec!["/bin/sh", "-c", "exec env A=1 B=2 prog x"]);
        assert_eq!(prog, "prog");
        assert!(matches!(
            command_argv("a | b"),
            Err(UsageError::CommandList(_))
        ));
        assert!(matches!(
            command_argv("a; b"),
            Err(UsageError::CommandList(_))
        ));
        // Quoted, they are arguments.
        let (argv, _) = command_argv("grep 'a|b' > o").unwrap();
        assert_eq!(argv[2], "exec grep 'a|b' > o");
    }

    /// Runs `shell` with `script` and returns stdout; None when the shell is not installed
    /// (scripts/setup.sh installs bash, zsh and fish).
    fn run_shell(shell: &str, args: &[&str], script: &[u8]) -> Option<String> {
        let path = std::env::temp_dir().join(format!(
            "usdt-trace-completion-{}-{shell}",
            std::process::id()
        ));
        std::fs::write(&path, script).unwrap();
        let mut cmd = std::process::Command::new(shell);
        cmd.args(args).env("SCRIPT", &path);
        let out = cmd.output();
        let _ = std::fs::remove_file(&path);
        let out = out.ok()?;
        assert!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(String::from_utf8(out.stdout).unwrap())
    }

    /// In a real bash: the function is registered for the command, and a subcommand's options
    /// are offered (before, only the top-level words ever were).
    #[test]
    fn bash_completion_offers_a_subcommands_options() {
        let script = completion_script(clap_complete::Shell::Bash);
        let got = run_shell(
            "bash",
            &[
                "-c",
                r#"source "$SCRIPT"; complete -p usdt-trace
                COMP_WORDS=(usdt-trace watch --otlp-t); COMP_CWORD=2; COMP_LINE="usdt-trace watch --otlp-t"
                COMP_POINT=${#COMP_LINE}; _usdt__trace usdt-trace --otlp-t watch
                printf 'reply %s\n' "${COMPREPLY[@]}"
                COMP_WORDS=(usdt-trace list --fu); COMP_CWORD=2; _usdt__trace usdt-trace --fu list
                printf 'reply %s\n' "${COMPREPLY[@]}""#,
            ],
            &script,
        )
        .expect("bash");
        let lines: Vec<&str> = got.lines().collect();
        assert!(lines[0].starts_with("complete "), "{got}");
        assert!(lines[0].ends_with(" -F _usdt__trace usdt-trace"), "{got}");
        assert_eq!(
            lines[1..],
            ["reply --otlp-timeout", "reply --functions"],
            "{got}"
        );
    }

    #[test]
    fn fish_and_zsh_completion_offer_a_subcommands_options() {
        let fish = completion_script(clap_complete::Shell::Fish);
        if let Some(got) = run_shell(
            "fish",
            &[
                "-c",
                "source $SCRIPT; complete -C 'usdt-trace watch --otlp-t'",
            ],
            &fish,
        ) {
            assert!(got.starts_with("--otlp-timeout\t"), "{got}");
            assert_eq!(got.lines().count(), 1, "{got}");
        }
        let zsh = completion_script(clap_complete::Shell::Zsh);
        // A syntax check in a real zsh; the watch options' spec is in the script.
        if let Some(got) = run_shell("zsh", &["-n", "-c", "source $SCRIPT"], &zsh) {
            assert_eq!(got, "");
        }
        let text = String::from_utf8(zsh).unwrap();
        assert!(text.contains("'--otlp-timeout=[With --otlp"), "{text}");
    }

    /// `usdt-trace man watch`: the page the top-level one points to, with every flag of the
    /// command that --help shows.
    #[test]
    fn man_has_a_page_per_command_with_every_flag() {
        use clap::CommandFactory;
        let top = String::from_utf8(man_page(None).unwrap()).unwrap();
        let mut cli = Cli::command();
        cli.build();
        for sub in cli.get_subcommands().filter(|c| c.get_name() != "help") {
            let name = sub.get_name();
            assert!(top.contains(&format!("usdt\\-trace\\-{name}(1)")), "{name}");
            let page = String::from_utf8(man_page(Some(name)).unwrap()).unwrap();
            let th = format!(".TH usdt-trace-{name} 1  \"usdt-trace-{name} {VERSION}\"");
            assert!(page.contains(&th), "{th}\n{}", &page[..200]);
            let mut flags = 0;
            for a in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(l) = a.get_long() {
                    let roff = format!("\\-\\-{}", l.replace('-', "\\-"));
                    assert!(page.contains(&roff), "{name}: {roff}");
                    flags += 1;
                }
            }
            if name == "watch" {
                assert!(flags > 30, "{flags}");
                assert!(!page.contains("bench\\-null"), "hidden flags stay hidden");
            }
        }
        assert!(matches!(man_page(Some("nope")), Err(ManError::NoCommand(n)) if n == "nope"));
    }
}
