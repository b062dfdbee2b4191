//! Command-line flags → validated configuration → run → exit code.
//!
//! clap parses into raw structs ([`ListArgs`], [`WatchArgs`]); [`ListArgs::validate`] and
//! [`WatchArgs::validate`] turn those into configs whose fields are already checked (patterns
//! compiled, span rules parsed, targets split from patterns), so the commands never see
//! unvalidated input. Every error ends as one line on stderr and a non-zero exit; a closed
//! output pipe (`| head`) exits 0.

use crate::list::{self, ListConfig};
use crate::output::otlp::{http::Endpoint, OtlpConfig};
use crate::pattern::Pattern;
use crate::spans::{SpanRule, StrRule};
use crate::tracer::AttachMode;
use crate::watch::{self, WatchConfig};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "usdt-trace",
    version,
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
    Watch(WatchArgs),
    /// Show what this kernel supports for tracing and what `watch` will use (no root needed).
    Doctor(DoctorArgs),
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
    /// Trace only this process (repeatable). Without a TARGET, trace every object it maps.
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
    /// Stop after this many seconds (fractions allowed).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Pair START with END as a span (repeatable). Each side is NAME or PROVIDER:NAME. Give one
    /// START several ENDs (commit or abort) with several rules; each span says which end
    /// closed it.
    #[arg(long = "span", value_name = "START=END")]
    pub spans: Vec<String>,
    /// Pair the --span rules by argument N (0-based) instead of per thread: a start is closed by
    /// the end whose argument N is equal, for instances that overlap or end in start order
    /// (like bpftrace's @start[argN]).
    #[arg(long, value_name = "N", requires = "spans")]
    pub key: Option<usize>,
    /// Read argument N of PROBE as a NUL-terminated string (repeatable), e.g.
    /// postgresql:query__start:0. Strings are cut at 127 bytes.
    #[arg(long = "str", value_name = "PROBE:N")]
    pub strs: Vec<String>,
    /// Do not pair probes by name (X__start/X__end, X__entry/X__return, ...); only --span rules.
    #[arg(long)]
    pub no_auto_span: bool,
    /// Keep log2 histograms of span durations and their on-CPU/run-queue/sleep/I/O split in
    /// the kernel instead of printing each span; draw them at exit.
    #[arg(long)]
    pub hist: bool,
    /// With --hist, also draw the histograms every SECS seconds.
    #[arg(long, value_name = "SECS", requires = "hist")]
    pub interval: Option<f64>,
    /// Do not split span time into on-CPU/run-queue/sleep/I/O (skips the scheduler hooks).
    #[arg(long)]
    pub no_sched: bool,
    /// Ring buffer size in KiB (a power of two, at least 4). Larger buffers absorb bursts.
    #[arg(long, value_name = "KIB", default_value_t = 16384)]
    pub ring_kib: u32,
    /// How to attach uprobes (`usdt-trace doctor` shows what this kernel supports).
    #[arg(long, value_name = "MODE", value_enum, default_value_t = AttachArg::Auto)]
    pub attach: AttachArg,
    /// Also write a Perfetto trace (protobuf) to FILE, as the run goes: open it in
    /// ui.perfetto.dev. Spans are slices on their thread's track, events are instants.
    // --hist keeps spans in the kernel: there would be nothing to write.
    #[arg(long, value_name = "FILE", conflicts_with = "hist")]
    pub perfetto: Option<PathBuf>,
    /// Also export spans over OTLP/HTTP (protobuf) to this collector: http://HOST[:PORT][/PATH]
    /// (port 4318 and path /v1/traces by default; no TLS). Sent from a background thread: a
    /// slow or dead collector drops spans (counted), it never slows tracing.
    #[arg(long, value_name = "URL", conflicts_with = "hist")]
    pub otlp: Option<String>,
    /// With --otlp: the resource's service.name (default: the traced executable's file name).
    #[arg(long, value_name = "NAME", requires = "otlp")]
    pub otlp_service: Option<String>,
    /// With --otlp: how many spans may wait for the exporter before new ones are dropped.
    #[arg(long, value_name = "SPANS", requires = "otlp", default_value_t = crate::output::otlp::DEFAULT_QUEUE)]
    pub otlp_queue: usize,
    /// The executable or library to trace, then provider:name glob patterns (default: all).
    /// An argument naming an existing file, or containing '/', is a target.
    #[arg(value_name = "TARGET|PATTERN")]
    pub args: Vec<String>,
}

/// A command-line mistake, reported as one line.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error(transparent)]
    Pattern(#[from] crate::pattern::PatternError),
    #[error(transparent)]
    Span(#[from] crate::spans::SpanError),
    #[error("--duration {0}: must be a positive number of seconds")]
    Duration(f64),
    #[error("--interval {0}: must be a positive number of seconds")]
    Interval(f64),
    #[error("--ring-kib {0}: must be a power of two between 4 and 1048576")]
    Ring(u32),
    #[error("-c: empty or unbalanced command {0:?}")]
    Command(String),
    #[error("-c: {0:?} is not an executable file (nor found in PATH)")]
    CommandNotFound(String),
    #[error("nothing to trace: name a TARGET file, give -p PID, or -c CMD")]
    NoTarget,
    #[error("-c cannot be combined with -p")]
    CommandAndPid,
    #[error("--perfetto {path}: {err}")]
    Perfetto { path: String, err: std::io::Error },
    #[error(transparent)]
    Otlp(#[from] crate::output::otlp::http::UrlError),
    #[error("--otlp-queue {0}: must be at least 1")]
    OtlpQueue(usize),
}

/// Split positional arguments: files first, then patterns.
fn split_targets(args: &[String]) -> Result<(Vec<PathBuf>, Vec<Pattern>), UsageError> {
    let mut targets = Vec::new();
    let mut patterns = Vec::new();
    for a in args {
        if a.contains('/') || Path::new(a).is_file() {
            targets.push(PathBuf::from(a));
        } else {
            patterns.push(Pattern::parse(a)?);
        }
    }
    Ok((targets, patterns))
}

impl ListArgs {
    pub fn validate(&self) -> Result<ListConfig, UsageError> {
        let (targets, patterns) = split_targets(&self.args)?;
        Ok(ListConfig {
            json: self.json,
            targets,
            pid: self.pid,
            patterns,
        })
    }
}

fn seconds(v: f64, err: fn(f64) -> UsageError) -> Result<Duration, UsageError> {
    if v.is_finite() && v > 0.0 && v < 1e9 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(err(v))
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
        let (mut targets, patterns) = split_targets(&self.args)?;
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
        let duration = self
            .duration
            .map(|d| seconds(d, UsageError::Duration))
            .transpose()?;
        let interval = self
            .interval
            .map(|d| seconds(d, UsageError::Interval))
            .transpose()?;
        if !(4..=1 << 20).contains(&self.ring_kib) || !self.ring_kib.is_power_of_two() {
            return Err(UsageError::Ring(self.ring_kib));
        }
        let command = match &self.command {
            Some(c) => {
                if !self.pids.is_empty() {
                    return Err(UsageError::CommandAndPid);
                }
                let argv = shlex::split(c)
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| UsageError::Command(c.clone()))?;
                let exe =
                    which(&argv[0]).ok_or_else(|| UsageError::CommandNotFound(argv[0].clone()))?;
                if targets.is_empty() {
                    targets.push(exe);
                }
                Some(argv)
            }
            None => None,
        };
        if targets.is_empty() && self.pids.is_empty() {
            return Err(UsageError::NoTarget);
        }
        // The same process named twice is traced once.
        let mut pids = self.pids.clone();
        let mut seen = std::collections::HashSet::new();
        pids.retain(|p| seen.insert(*p));
        if let Some(p) = &self.perfetto {
            // Fail before attaching rather than after; the sink truncates it again.
            std::fs::File::create(p).map_err(|err| UsageError::Perfetto {
                path: p.display().to_string(),
                err,
            })?;
        }
        let otlp = match &self.otlp {
            Some(url) => {
                if self.otlp_queue == 0 {
                    return Err(UsageError::OtlpQueue(0));
                }
                Some(OtlpConfig {
                    endpoint: Endpoint::parse(url)?,
                    service: self.otlp_service.clone(),
                    queue: self.otlp_queue,
                })
            }
            None => None,
        };
        Ok(WatchConfig {
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
            auto_span: !self.no_auto_span,
            hist: self.hist,
            interval,
            sched: !self.no_sched,
            ring_bytes: self.ring_kib * 1024,
            leave_running: self.leave_running,
            attach: self.attach.into(),
        })
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
        Command::Doctor(a) => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            match crate::doctor::run(a.json, &mut out) {
                Ok(()) => Ok(0),
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
                Err(e) => Err(format!("writing output: {e}")),
            }
        }
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            // One line: nested causes are already folded into the message.
            eprintln!("usdt-trace: error: {}", msg.replace('\n', " "));
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
        assert!(matches!(
            watch(&["/bin/true", "--otlp", "https://x"]),
            Err(UsageError::Otlp(_))
        ));
        assert!(matches!(
            watch(&["/bin/true", "--otlp", "http://x", "--otlp-queue", "0"]),
            Err(UsageError::OtlpQueue(0))
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
            Err(UsageError::Perfetto { .. })
        ));
    }

    #[test]
    fn command_becomes_target() {
        let c = watch(&["-c", "true --x 'a b'"]).unwrap();
        assert_eq!(c.command.unwrap(), vec!["true", "--x", "a b"]);
        assert!(c.targets[0].ends_with("true"));
    }
}
