//! The raw flags, as clap parses them (ripgrep's "low-level arguments"): one struct per
//! subcommand, whose doc comments are `--help`, the man pages and docs/flags.md. Nothing here
//! checks anything beyond what clap can; [`super::validate`] does.

#[allow(unused_imports)]
use super::*;
use crate::tracer::AttachMode;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// `--version`: the crate version and the git revision it was built from.
pub(crate) const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("USDT_TRACE_GIT_REV"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "usdt-trace",
    version = VERSION,
    about = "List and trace USDT probes (.note.stapsdt) with eBPF: latency spans, events, and where each span's time went"
)]
// Examples, short help and exit statuses are added in `help::command`, which every reader
// of the command line goes through.
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
    /// Run as a daemon: trace every definition of a config file (each what `watch --hist`
    /// would trace) and serve all their histograms at one Prometheus /metrics endpoint.
    /// SIGHUP reads the file again (definitions added, removed or changed start or stop;
    /// unchanged ones keep running and counting); SIGTERM or SIGINT detaches and exits 0.
    /// See docs/always-on.md.
    Serve(ServeArgs),
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
        /// The command whose page to print (list, watch, serve, diff, doctor, completions, man); the
        /// top-level page without one.
        #[arg(value_name = "COMMAND", conflicts_with = "dir")]
        command: Option<String>,
        /// Write every page into this directory: usdt-trace.1, usdt-trace-watch.1, ...
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
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
        cmd.defer(|c| super::help::shorten_deferred(T::augment_args(c)))
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        cmd.defer(|c| super::help::shorten_deferred(T::augment_args_for_update(c)))
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
pub struct ServeArgs {
    /// The config file (TOML): `listen = "HOST:PORT"` (or `"unix:/PATH"`, a socket of mode
    /// 0660), optionally `web-config = "/PATH"` (TLS and basic auth, as `watch --web-config`;
    /// read again on SIGHUP), then one `[[definition]]` table per traced program, with a `name`, `targets`
    /// (absolute paths), `processes` (names) and/or `pids`, `patterns`,
    /// and `watch`'s flags by their long names (`by`, `str`, `span`, `filter`, `max-keys`,
    /// `prometheus-buckets`, ...). The whole file is checked before anything starts; one that
    /// another user could change (its mode, owner, directory or a symlink to it), or that is
    /// no regular file or over 1 MiB, is refused.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Check the config file, print one line saying what it defines, and exit (0 when it
    /// is good, 1 with the problem when not): for `ExecStartPre=` or before a reload.
    #[arg(long)]
    pub check: bool,
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
    /// Trace every process called NAME (repeatable): its command name, as `ps` and `pgrep`
    /// show it, or its executable's file name. What is traced is the executable file each
    /// one runs, for every process running it, those started later included; a process of
    /// that name running another file (a new build at the same path, a second install) is
    /// found and traced within a second. Not with -p or -c.
    #[arg(long = "process", value_name = "NAME", conflicts_with_all = ["pids", "command"])]
    pub processes: Vec<String>,
    /// Run this command once the probes are live, trace it, and stop when it exits; exit with
    /// its status. If tracing stops first (--duration, Ctrl-C, SIGTERM), the command gets
    /// SIGTERM, then SIGKILL 2 s later, unless --leave-running. A `#!` script with no TARGET
    /// named is followed through its execs (env, shims) to the first program the patterns
    /// match, which is traced from its first instruction.
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
    /// text shows (id=1, parent=0, req=2), JSON an object {"id":1,...} instead of an array;
    /// for a function, fn:GLOB=... (or fn:GLOB__entry) names its arguments at entry,
    /// fn:GLOB__return=... its return value.
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
    /// With --min: capture the user stack where each recorded span ended, and print it
    /// symbolized under the span, innermost first (JSON: `stack`). Plain `--stack` is
    /// `--stack=auto`. A stack that could not be read says so (`stack_error`) and is counted in
    /// the summary. Not with --hist or --top (they print no span records to hang a stack on).
    #[arg(
        long,
        value_name = "MODE",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "auto",
        requires = "min",
        conflicts_with_all = ["hist", "top"]
    )]
    pub stack: Option<crate::target::unwind::StackMode>,
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
    /// ui.perfetto.dev. Spans are slices on their thread's track, events are instants; under
    /// each span, every off-CPU interval of its thread is a slice named by what it waited on
    /// (lock, net, timer, disk, fault, other) with its waker, then `runq` until it ran again (not
    /// with --no-sched).
    // --hist keeps spans in the kernel: there would be nothing to write.
    #[arg(long, value_name = "FILE", conflicts_with = "hist")]
    pub perfetto: Option<PathBuf>,
    /// With --perfetto: write the wait slices of at most N off-CPU intervals (a wait and its
    /// run-queue slice, ~200 bytes of trace), so a run full of short waits makes a trace of
    /// bounded size (2 million waits were 390 MB). The intervals past N are counted, in the
    /// summary and in the trace (an instant on its `usdt-trace` track, where the slices stop);
    /// spans are always written. 0: no limit.
    #[arg(long, value_name = "N", default_value_t = crate::output::perfetto::DEFAULT_MAX_WAITS, requires = "perfetto")]
    pub perfetto_max_waits: u64,
    /// Compare this run's spans with an earlier run's, per span name, as `usdt-trace diff
    /// FILE THIS-RUN` would: FILE is NDJSON an earlier `watch --json` wrote. Printed once
    /// tracing ends, after the summary in text; with --json, as `diff --json`'s lines
    /// (`"type":"diff"`) just before the summary. Not with --hist, --count or --top (they
    /// keep no span records to compare). FILE is read, and checked, before anything attaches.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["hist", "count", "top"])]
    pub baseline: Option<PathBuf>,
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
    /// the system's, and a collector whose certificate is one of them (a self-signed one, as
    /// `curl --cacert` does) (default: `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`, else the
    /// system's store).
    #[arg(long, value_name = "FILE", requires = "otlp")]
    pub otlp_ca: Option<PathBuf>,
    /// With --hist: serve Prometheus metrics at http://ADDR/metrics while tracing (ADDR is
    /// HOST:PORT, e.g. 127.0.0.1:9435; https:// with --web-config's TLS): per span name (and --by key) a duration histogram
    /// whose buckets are the kernel's own, the time split as counters, events, losses and the
    /// tracer's health. Each scrape reads the kernel's histograms; nothing is added per span.
    #[arg(long, value_name = "ADDR", requires = "hist")]
    pub prometheus: Option<String>,
    /// With --prometheus: histogram buckets exported per power of two, each a kernel bucket
    /// bound from 256 ns to 68.7 s: 8 (every kernel bucket: the error --hist has), 4, 2 or 1.
    /// Fewer make fewer series and coarser quantiles.
    #[arg(long, value_name = "N", requires = "prometheus", default_value_t = 8)]
    pub prometheus_buckets: u32,
    /// With --prometheus: who may scrape, in Prometheus' web-config YAML (exporter-toolkit's
    /// `--web.config.file`): `tls_server_config` (`cert_file`, `key_file`; client
    /// certificates with `client_auth_type: RequireAndVerifyClientCert` and `client_ca_file`)
    /// serves https://, and `basic_auth_users` (name: bcrypt hash, e.g. from `htpasswd -nbB`)
    /// answers 401 without the right password. The file and those it names are read as
    /// `serve --config` reads its file (refused when another user could change them).
    /// `serve` takes it as `web-config` in its config file. See docs/prometheus.md.
    #[arg(long, value_name = "FILE", requires = "prometheus")]
    pub web_config: Option<PathBuf>,
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
    /// bpftrace's spellings name both: `usdt:PATH:PATTERN`, and `uprobe:PATH:FUNC` or
    /// `uretprobe:PATH:FUNC` (either is `fn:FUNC` on PATH: the span from entry to return); a
    /// PATH without '/' that is no program is a library, found as the loader finds it for the
    /// -c program, among the -p process's files, else in the system library directories
    /// (`uprobe:libc:getaddrinfo`). `fn:GLOB` traces functions
    /// instead of notes: a span from each matching function's entry to its return, with
    /// arguments arg0..arg5 (x86_64 SysV registers; x0..x7 on aarch64) and the return value
    /// as the end's argument 0 (see `list --functions`; `--str fn:GLOB:N` or
    /// `--str fn:GLOB:ret`). In Go programs, never a return probe: the entry past the stack
    /// check and an ordinary uprobe on each `ret`, with Go's register ABI (nine arguments).
    #[arg(value_name = "TARGET|PATTERN")]
    pub args: Vec<String>,
}
