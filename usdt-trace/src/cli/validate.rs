//! Raw flags → checked configurations (ripgrep's "high-level arguments"): patterns compiled,
//! span rules parsed, targets split from patterns, limits enforced; every problem a one-line
//! [`UsageError`].

#[allow(unused_imports)]
use super::*;
use crate::cli::list::ListConfig;
use crate::output::otlp::{settings as otlp_settings, OtlpConfig};
use crate::plan::spans::{SpanRule, StrRule};
use crate::util::pattern::Pattern;
use crate::watch::WatchConfig;
use std::path::Path;
use std::time::Duration;

/// Largest `--max-threads`: 65536 thread states are 1 GB at worst (2 GB with strings).
pub(crate) const MAX_THREADS_LIMIT: u32 = 1 << 16;

/// Largest `--max-keys`: 65536 per-CPU histograms are 256 MB per CPU at worst.
pub(crate) const MAX_KEYS_LIMIT: u32 = 1 << 16;

/// Largest `--top`: the list is printed whole.
pub(crate) const MAX_TOP: usize = 10_000;

/// Largest `--max-open-ids`: 4M open spans are 2 GB at worst.
pub(crate) const MAX_OPEN_IDS_LIMIT: u32 = 1 << 22;

/// Largest `--otlp-queue`: the channel takes room for every slot up front (~350 bytes a span),
/// so 1M spans are ~350 MB; 4 billion asked for 1.4 TB and aborted.
pub(crate) const MAX_OTLP_QUEUE: usize = 1 << 20;

/// Largest `--otlp-timeout`: an hour is no longer a timeout.
pub(crate) const MAX_OTLP_TIMEOUT: u64 = crate::output::otlp::settings::MAX_TIMEOUT.as_secs();

/// A command-line mistake, reported as one line.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error(transparent)]
    Pattern(#[from] crate::util::pattern::PatternError),
    #[error(transparent)]
    Span(#[from] crate::plan::spans::SpanError),
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
    Filter(#[from] crate::plan::filter::FilterError),
    #[error(transparent)]
    Agg(#[from] crate::output::agg::AggError),
    #[error(
        "--interval needs --hist, --count or --top: it prints what they aggregated per interval"
    )]
    IntervalMode,
    #[error("--by needs --hist or --count: it splits their histograms or counts by key")]
    ByMode,
    #[error("{path}: a script for {interpreter}; trace that (its probes are in the interpreter and its libraries){shim}; `watch -c {path}` follows the script to the program it runs")]
    Script {
        path: String,
        interpreter: String,
        /// Said of a version manager's shim: how to name the program it runs.
        shim: String,
    },
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
    #[error("nothing to trace: name a TARGET file, give -p PID, --process NAME, or -c CMD")]
    NoTarget,
    #[error("--process {0}")]
    ProcessName(String),
    #[error("-c cannot be combined with -p")]
    CommandAndPid,
    #[error("--wait-for-probes: with both -p and TARGET no probe is looked for later; drop TARGET (every object of the process is followed) or -p (every process running TARGET is)")]
    WaitWithPidAndTarget,
    #[error(transparent)]
    OutFile(#[from] crate::output::outfile::OutFileError),
    #[error(transparent)]
    Otlp(#[from] crate::output::otlp::settings::SettingsError),
    #[error(transparent)]
    OtlpCa(#[from] crate::output::otlp::tls::CaError),
    #[error(transparent)]
    Prometheus(#[from] crate::output::prometheus::serve::ServeError),
    #[error(transparent)]
    WebConfig(#[from] crate::output::prometheus::web::WebConfigError),
    #[error(
        "--prometheus-buckets {0}: expected 1, 2, 4 or 8 (kernel bucket bounds per power of two)"
    )]
    PromBuckets(u32),
    #[error("--baseline: {0}")]
    Baseline(crate::diff::DiffError),
    #[error(transparent)]
    LibName(#[from] crate::target::libname::LibNameError),
}

impl UsageError {
    /// Whether the command line itself is wrong (exit status 2, [`EXIT_USAGE`]), rather than
    /// something it names: a file, program or library not found, an address in use, a file
    /// that cannot be read (status 1, [`EXIT_ERROR`], as any error while running).
    pub fn is_usage(&self) -> bool {
        use crate::output::prometheus::serve::ServeError;
        use crate::target::libname::LibNameError;
        !matches!(
            self,
            UsageError::OutFile(_)
                | UsageError::OtlpCa(_)
                | UsageError::Baseline(_)
                | UsageError::CommandNotFound(_)
                | UsageError::Script { .. }
                | UsageError::LibName(LibNameError::NotFound { .. })
                | UsageError::Prometheus(ServeError::Bind { .. })
        )
    }
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
pub(crate) fn has_shell_syntax(cmd: &str) -> bool {
    cmd.contains(['<', '>', '$', '`', '|', '&', ';', '(', ')', '*', '?', '~'])
        || shlex::split(cmd)
            .and_then(|v| v.first().cloned())
            .is_some_and(|w| is_assignment(&w))
}

pub(crate) fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// The argv to run for `-c CMD`, and the program it ends up executing (what to trace). A
/// command with shell syntax runs as `sh -c 'exec [env VAR=x] CMD'`: sh sets up redirections
/// and then replaces itself, so the traced process is the program itself.
pub(crate) fn command_argv(cmd: &str) -> Result<(Vec<String>, String), UsageError> {
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
        let scope = crate::target::libname::Scope {
            exe: None,
            pids: self.pid.into_iter().collect(),
        };
        let (targets, patterns) = split_targets(&self.args, self.pid.is_none(), &scope)?;
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
pub(crate) fn list_functions(a: &ListArgs) -> Result<i32, String> {
    let Some((bin, globs)) = a.args.split_first() else {
        return Err("list --functions: name an ELF file".into());
    };
    let path = resolve_program(bin);
    check_not_script(&path).map_err(|e| e.to_string())?;
    functions_of(&path, globs, a.json)
}

/// The functions of `path` matching `globs` (all without any), listed; none matching is an
/// error.
pub(crate) fn functions_of(path: &Path, globs: &[String], json: bool) -> Result<i32, String> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // As `list BIN PATTERN`: a glob that matches nothing is an error (`FnError::NoMatch`).
    match crate::plan::functions::list(path, globs, json, &mut out) {
        Ok(_) => Ok(0),
        Err(e) if e.is_broken_pipe() => Ok(0),
        Err(e) => Err(e.to_string()),
    }
}

/// `--args fn:F=...` names F's arguments, which are its entry site's (`fn:F__entry`): the
/// function's name is accepted here as it is by `--str fn:F:N` and in the span it prints.
pub(crate) fn fn_entry_names(mut r: crate::plan::ArgNames) -> crate::plan::ArgNames {
    let text = r.probe.as_str();
    let site = ["__entry", "__return"].iter().any(|s| text.ends_with(s));
    if r.probe.provider() == Some(crate::util::pattern::FN_PROVIDER) && !site {
        if let Ok(p) = Pattern::parse(&format!("{text}__entry")) {
            r.probe = p;
        }
    }
    r
}

impl WatchArgs {
    pub fn validate(&self) -> Result<WatchConfig, UsageError> {
        // With -p or -c the program is known: bare words are patterns.
        let first_may_be_file =
            self.pids.is_empty() && self.command.is_none() && self.processes.is_empty();
        // A library named without '/' is the one the -c program (or the -p process) loads.
        let scope = crate::target::libname::Scope {
            exe: self
                .command
                .as_deref()
                .and_then(|c| command_argv(c).ok())
                .and_then(|(_, prog)| which(&prog)),
            pids: self.pids.clone(),
        };
        let (mut targets, patterns) = split_targets(&self.args, first_may_be_file, &scope)?;
        let key = match self.key {
            Some(k) if k >= usdt_trace_common::MAX_ARGS => {
                return Err(crate::plan::spans::SpanError::KeyIndex(k).into())
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
            .map(|s| crate::plan::ArgNames::parse(s).map(fn_entry_names))
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
            .map(crate::plan::filter::Filter::parse)
            .transpose()?;
        let filter = crate::plan::filter::Filter::with_tids(filter, &self.tids)?;
        if interval.is_some() && !(self.hist || self.count || self.top.is_some()) {
            return Err(UsageError::IntervalMode);
        }
        let by = self
            .by
            .as_deref()
            .map(crate::output::agg::By::parse)
            .transpose()?;
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
        let mut exec_chain = false;
        let command = match &self.command {
            Some(c) => {
                if !self.pids.is_empty() {
                    return Err(UsageError::CommandAndPid);
                }
                let (argv, prog) = command_argv(c)?;
                let exe = which(&prog).ok_or_else(|| UsageError::CommandNotFound(prog.clone()))?;
                if targets.is_empty() {
                    // A script's probes are in the program it runs: followed there at run time.
                    match check_not_script(&exe) {
                        Ok(()) => targets.push(exe),
                        Err(UsageError::Script { .. }) => exec_chain = true,
                        Err(e) => return Err(e),
                    }
                }
                Some(argv)
            }
            None => None,
        };
        if targets.is_empty() && self.pids.is_empty() && self.processes.is_empty() && !exec_chain {
            return Err(UsageError::NoTarget);
        }
        for name in &self.processes {
            crate::target::procnames::check_name(name).map_err(UsageError::ProcessName)?;
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
            crate::output::outfile::check("-o", p)?;
        }
        if let Some(p) = &self.perfetto {
            crate::output::outfile::check("--perfetto", p)?;
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
                    Some((path, src)) => Some(crate::output::otlp::tls::load_ca(src, path)?),
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
        // Read whole before anything attaches: a bad file fails the run, not its end.
        let baseline = self
            .baseline
            .as_deref()
            .map(crate::diff::Baseline::read)
            .transpose()
            .map_err(UsageError::Baseline)?;
        if !crate::output::prometheus::BUCKETS_PER_OCTAVE.contains(&self.prometheus_buckets) {
            return Err(UsageError::PromBuckets(self.prometheus_buckets));
        }
        // Read before anything attaches: a bad file (or one another user could change) fails
        // the run at once.
        let web = self
            .web_config
            .as_deref()
            .map(crate::output::prometheus::web::Web::load)
            .transpose()?;
        let prometheus = self
            .prometheus
            .as_deref()
            .map(|a| {
                crate::output::prometheus::serve::parse_addr(a).map(|addr| {
                    crate::watch::PromConfig {
                        addr,
                        per_octave: self.prometheus_buckets,
                        web: web.clone(),
                    }
                })
            })
            .transpose()?;
        Ok(WatchConfig {
            baseline,
            prometheus,
            json: self.json,
            perfetto: self.perfetto.clone(),
            perfetto_max_waits: self.perfetto_max_waits,
            otlp,
            targets,
            pids,
            processes: self.processes.clone(),
            command,
            exec_chain,
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
