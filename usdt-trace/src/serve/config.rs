//! The `serve --config FILE` file → a checked [`ServeConfig`].   (pure, but for the files
//! `watch`'s own validation looks at)
//!
//! Each definition's keys are `watch`'s flags, spelled the same (`max-keys`, `str`, `span`,
//! ...), plus `targets`, `pids` and `patterns` for the positional arguments. A definition is
//! turned into the argument list `watch --hist ...` would have and goes through clap and
//! [`WatchArgs::validate`](crate::cli::WatchArgs::validate): every option means exactly what
//! it means on the command line, checked by the same code, and a new `watch` check applies
//! here without a change. Only keys that make sense for an exporter are accepted (no `-c`,
//! `-o`, `--json`, `--perfetto`, `--otlp`, `--duration`): the rest are unknown keys.
//!
//! The whole file is checked before anything runs; every problem is one [`ConfigError`]
//! line naming the file, the definition and the problem.

use crate::output::prometheus::listen::{parse_listen, ListenAddr};
use crate::output::prometheus::web::Web;
use crate::watch::WatchConfig;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a definition that failed to attach waits before trying again, by default.
pub const DEFAULT_RETRY: Duration = Duration::from_secs(10);
/// Bounds of `retry-seconds`: a retry loads and verifies the eBPF programs again, so not
/// more often than every second; and a day is the longest wait that is still a retry.
pub const RETRY_RANGE: std::ops::RangeInclusive<u64> = 1..=86_400;
/// A definition's ring buffer, unless it says `ring-kib`: with `--hist` the kernel sends no
/// record per span or event (they go into its maps), so `watch`'s 16 MiB default would sit
/// empty, and each ring is mapped twice into the daemon: 32 MiB of its memory per definition
/// (8 definitions: 571 MB resident, 313 MB with 256 KiB rings).
pub const DEFAULT_RING_KIB: u32 = 256;
/// Most definitions in one file: each loads its own eBPF programs and maps.
pub const MAX_DEFINITIONS: usize = 64;

/// A problem with the config file, as one line.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The file unreadable, or one others could change, no regular file or too large
    /// ([`crate::util::trusted`]).
    #[error(transparent)]
    Trust(#[from] crate::util::trusted::FileError),
    #[error("{file}: {msg}")]
    File { file: String, msg: String },
    #[error("{file}: definition {name:?}: {msg}")]
    Definition {
        file: String,
        name: String,
        msg: String,
    },
    #[error("{file}: definition #{index}: {msg}")]
    Unnamed {
        file: String,
        index: usize,
        msg: String,
    },
}

/// The top level of the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawFile {
    listen: String,
    #[serde(default)]
    retry_seconds: Option<u64>,
    /// `watch --web-config`: who may scrape (TLS, basic auth), an absolute path.
    #[serde(default)]
    web_config: Option<String>,
    /// Kept as tables: each is checked on its own, so that an error can name its definition.
    #[serde(default)]
    definition: Vec<toml::Table>,
}

/// One `[[definition]]` as written: `watch`'s flags by their long names. Compared as a
/// whole on SIGHUP: a definition whose text is unchanged keeps running.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawDefinition {
    pub name: String,
    #[serde(default)]
    pub targets: Vec<String>,
    #[serde(default)]
    pub pids: Vec<u32>,
    /// Process names (`watch --process`): every process so called, now and later.
    #[serde(default)]
    pub processes: Vec<String>,
    #[serde(default)]
    pub patterns: Vec<String>,
    #[serde(default)]
    pub span: Vec<String>,
    pub key: Option<u32>,
    #[serde(default)]
    pub str: Vec<String>,
    pub str_max: Option<u32>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub no_auto_span: bool,
    pub by: Option<String>,
    pub max_keys: Option<u32>,
    pub filter: Option<String>,
    #[serde(default)]
    pub tid: Vec<u32>,
    #[serde(default)]
    pub no_sched: bool,
    pub fn_returns: Option<String>,
    pub ring_kib: Option<u32>,
    pub max_threads: Option<u32>,
    pub max_open_ids: Option<u32>,
    pub attach: Option<String>,
    #[serde(default)]
    pub wait_for_probes: bool,
    pub prometheus_buckets: Option<u32>,
}

/// One checked definition.
#[derive(Debug, Clone)]
pub struct Definition {
    pub raw: RawDefinition,
    /// As `watch --hist` would run it; its `prometheus` holds the bucket resolution only
    /// (the daemon's one listener serves every definition).
    pub cfg: WatchConfig,
}

impl Definition {
    pub fn name(&self) -> &str {
        &self.raw.name
    }

    /// `--prometheus-buckets`.
    pub fn per_octave(&self) -> u32 {
        self.cfg.prometheus.as_ref().map_or(8, |p| p.per_octave)
    }
}

/// The checked file.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub path: PathBuf,
    /// `HOST:PORT`, or `unix:/PATH` (a socket of mode 0660).
    pub listen: ListenAddr,
    pub retry: Duration,
    pub definitions: Vec<Definition>,
    /// `web-config = "/PATH"`: the web config's path, and (once [`load`]ed) what it says.
    pub web_config: Option<PathBuf>,
    pub web: Option<std::sync::Arc<Web>>,
}

/// Reads (with the care of [`crate::util::trusted::read`]) and checks `path`, and the web config it
/// names (with the same care, and the files that one names).
pub fn load(path: &Path, watch: WatchParser) -> Result<ServeConfig, ConfigError> {
    let text = crate::util::trusted::read(path)?;
    let mut cfg = parse(path, &text, watch)?;
    if let Some(w) = &cfg.web_config {
        cfg.web = Some(Web::load(w).map_err(|e| ConfigError::File {
            file: path.display().to_string(),
            msg: e.to_string(),
        })?);
    }
    Ok(cfg)
}

/// One line of a TOML error: its message and where (toml's own text spans several lines,
/// with the source quoted).
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            // Counted in bytes: a span inside a character must not panic.
            let upto = &text.as_bytes()[..span.start.min(text.len())];
            let line = upto.iter().filter(|&&b| b == b'\n').count() + 1;
            format!("line {line}: {msg}")
        }
        None => msg,
    }
}

/// A definition's name becomes a label value and a log prefix: kept to what reads well in
/// both.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Turns a definition's `watch` command line into its configuration: the command line's own
/// parser and validation, handed down by `cli` (which runs `serve`, so `serve` does not
/// import it): every option means exactly what it means on the command line.
pub type WatchParser = fn(&[String]) -> Result<WatchConfig, String>;

/// Checks the text of a config file (`path` only names it in errors).
pub fn parse(path: &Path, text: &str, watch: WatchParser) -> Result<ServeConfig, ConfigError> {
    let file = path.display().to_string();
    let file_err = |msg: String| ConfigError::File {
        file: file.clone(),
        msg,
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| file_err(toml_error(text, &e)))?;
    let listen = parse_listen(&raw.listen).ok_or_else(|| {
        file_err(format!(
            "listen {:?}: expected HOST:PORT, e.g. 127.0.0.1:9435 or [::]:9435, or unix:/ABSOLUTE/PATH",
            raw.listen
        ))
    })?;
    let web_config = match raw.web_config {
        None => None,
        // The daemon's working directory is /: a relative path would depend on how it started.
        Some(w) if w.starts_with('/') => Some(PathBuf::from(w)),
        Some(w) => {
            return Err(file_err(format!(
                "web-config {w:?}: expected an absolute path"
            )))
        }
    };
    let retry = match raw.retry_seconds {
        None => DEFAULT_RETRY,
        Some(s) if RETRY_RANGE.contains(&s) => Duration::from_secs(s),
        Some(s) => {
            return Err(file_err(format!(
                "retry-seconds {s}: must be between {} and {}",
                RETRY_RANGE.start(),
                RETRY_RANGE.end()
            )))
        }
    };
    if raw.definition.is_empty() {
        return Err(file_err(
            "no [[definition]]: nothing to trace (see docs/always-on.md)".into(),
        ));
    }
    if raw.definition.len() > MAX_DEFINITIONS {
        return Err(file_err(format!(
            "{} definitions: at most {MAX_DEFINITIONS} (each loads its own eBPF programs)",
            raw.definition.len()
        )));
    }
    let mut definitions: Vec<Definition> = Vec::new();
    for (i, table) in raw.definition.into_iter().enumerate() {
        let name = table
            .get("name")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        let def_err = |msg: String| match &name {
            Some(n) => ConfigError::Definition {
                file: file.clone(),
                name: n.clone(),
                msg,
            },
            None => ConfigError::Unnamed {
                file: file.clone(),
                index: i + 1,
                msg,
            },
        };
        let d: RawDefinition = toml::Value::Table(table.clone())
            .try_into()
            .map_err(|e: toml::de::Error| def_err(definition_error(&table, &e)))?;
        if !valid_name(&d.name) {
            return Err(def_err(
                "name: 1 to 64 letters, digits, '_', '-' or '.'".into(),
            ));
        }
        if definitions.iter().any(|o| o.raw.name == d.name) {
            return Err(def_err("defined twice: names must be unique".into()));
        }
        let cfg = watch(&watch_argv(&d).map_err(&def_err)?).map_err(def_err)?;
        definitions.push(Definition { raw: d, cfg });
    }
    Ok(ServeConfig {
        path: path.to_path_buf(),
        listen,
        retry,
        definitions,
        web_config,
        web: None,
    })
}

/// A definition that does not deserialize: the message, and which key when it is one
/// value's type (serde's message from a table names the type, not the key). Found by trying
/// each key alone.
fn definition_error(table: &toml::Table, e: &toml::de::Error) -> String {
    let msg = e.message().trim().replace('\n', " ");
    let name = table
        .get("name")
        .cloned()
        .unwrap_or_else(|| toml::Value::String("x".into()));
    for (k, v) in table {
        let mut one = toml::Table::new();
        one.insert("name".into(), name.clone());
        one.insert(k.clone(), v.clone());
        if toml::Value::Table(one).try_into::<RawDefinition>().is_err() {
            return format!("{k}: {msg}");
        }
    }
    msg
}

/// The arguments `watch` would be given for `d`: every value as `--flag=VALUE`, so that a
/// value starting with '-' is never taken for a flag, and the positional arguments after
/// `--`, targets first.
pub fn watch_argv(d: &RawDefinition) -> Result<Vec<String>, String> {
    let mut a: Vec<String> = vec!["usdt-trace".into(), "watch".into(), "--hist".into()];
    // The address is never listened on: it is there so that `--prometheus-buckets` is
    // checked as `watch` checks it (clap wants --prometheus with it).
    a.push("--prometheus=127.0.0.1:0".into());
    let mut one = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            a.push(format!("--{flag}={v}"));
        }
    };
    one("key", d.key.map(|v| v.to_string()));
    one("str-max", d.str_max.map(|v| v.to_string()));
    one("by", d.by.clone());
    one("max-keys", d.max_keys.map(|v| v.to_string()));
    one("filter", d.filter.clone());
    one("fn-returns", d.fn_returns.clone());
    one(
        "ring-kib",
        Some(d.ring_kib.unwrap_or(DEFAULT_RING_KIB).to_string()),
    );
    one("max-threads", d.max_threads.map(|v| v.to_string()));
    one("max-open-ids", d.max_open_ids.map(|v| v.to_string()));
    one("attach", d.attach.clone());
    one(
        "prometheus-buckets",
        d.prometheus_buckets.map(|v| v.to_string()),
    );
    for (flag, vs) in [("span", &d.span), ("str", &d.str), ("args", &d.args)] {
        a.extend(vs.iter().map(|v| format!("--{flag}={v}")));
    }
    a.extend(d.pids.iter().map(|p| format!("--pid={p}")));
    a.extend(d.processes.iter().map(|p| format!("--process={p}")));
    a.extend(d.tid.iter().map(|t| format!("--tid={t}")));
    for (flag, on) in [
        ("no-auto-span", d.no_auto_span),
        ("no-sched", d.no_sched),
        ("wait-for-probes", d.wait_for_probes),
    ] {
        if on {
            a.push(format!("--{flag}"));
        }
    }
    for t in &d.targets {
        // A daemon's working directory is /: a relative path would depend on how it was
        // started. And a target must read as a file, never as a pattern.
        if !t.starts_with('/') {
            return Err(format!("targets: {t:?}: expected an absolute path"));
        }
    }
    if let Some(p) = d
        .patterns
        .iter()
        .find(|p| p.contains('/') && !p.starts_with("fn:"))
    {
        return Err(format!(
            "patterns: {p:?}: a pattern is provider:name (files go in targets)"
        ));
    }
    a.push("--".into());
    a.extend(d.targets.iter().cloned());
    a.extend(d.patterns.iter().cloned());
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<ServeConfig, String> {
        parse(
            Path::new("/etc/usdt-trace/serve.toml"),
            text,
            crate::cli::watch_from_argv,
        )
        .map_err(|e| e.to_string())
    }

    const GOOD: &str = r#"
listen = "127.0.0.1:9435"
retry-seconds = 5

[[definition]]
name = "web"
targets = ["/usr/local/bin/myserver"]
patterns = ["httpserver:request__*"]
by = "request__end:arg1"
max-keys = 50
prometheus-buckets = 2

[[definition]]
name = "pg"
targets = ["/usr/lib/postgresql/15/bin/postgres"]
patterns = ["postgresql:query__*"]
str = ["query__start:0"]
by = "str0"
filter = "comm == postgres"
span = ["query__start=query__done"]
"#;

    #[test]
    fn a_good_file_becomes_watch_configs() {
        let c = check(GOOD).expect("good");
        assert_eq!(
            c.listen,
            ListenAddr::Tcp("127.0.0.1:9435".parse().expect("addr"))
        );
        let unix = check(&GOOD.replace("127.0.0.1:9435", "unix:/run/usdt-trace/metrics.sock"))
            .expect("unix");
        assert_eq!(
            unix.listen,
            ListenAddr::Unix("/run/usdt-trace/metrics.sock".into())
        );
        assert_eq!(c.retry, Duration::from_secs(5));
        assert!(c.web_config.is_none() && c.web.is_none());
        // The path only, until `load` reads it (with the config file's own checks).
        let web = check(&GOOD.replace(
            "retry-seconds = 5",
            "web-config = \"/etc/usdt-trace/web.yml\"",
        ))
        .expect("web-config");
        assert_eq!(
            web.web_config.as_deref(),
            Some(Path::new("/etc/usdt-trace/web.yml"))
        );
        assert!(web.web.is_none());
        assert_eq!(c.definitions.len(), 2);
        let web = &c.definitions[0];
        assert_eq!(web.name(), "web");
        assert!(web.cfg.hist);
        assert_eq!(
            web.cfg.targets,
            vec![PathBuf::from("/usr/local/bin/myserver")]
        );
        assert_eq!(web.cfg.patterns.len(), 1);
        assert_eq!(web.cfg.agg.max_keys, 50);
        assert!(web.cfg.agg.by.is_some());
        assert_eq!(web.per_octave(), 2);
        // A ring sized for what --hist sends, not watch's 16 MiB; unless the file says.
        assert_eq!(web.cfg.ring_bytes, DEFAULT_RING_KIB * 1024);
        let big = check(&GOOD.replace("max-keys = 50", "max-keys = 50\nring-kib = 4096"))
            .expect("ring-kib");
        assert_eq!(big.definitions[0].cfg.ring_bytes, 4096 * 1024);
        let pg = &c.definitions[1];
        assert_eq!(pg.per_octave(), 8);
        assert_eq!(pg.cfg.strs.len(), 1);
        assert_eq!(pg.cfg.spans.len(), 1);
        assert!(pg.cfg.filter.is_some());
        let by_name = check(
            "listen = \"127.0.0.1:1\"\n[[definition]]\nname = \"n\"\nprocesses = [\"postgres\", \"python3.11\"]\n",
        )
        .expect("processes");
        assert_eq!(
            by_name.definitions[0].cfg.processes,
            ["postgres", "python3.11"]
        );
        assert!(by_name.definitions[0].cfg.targets.is_empty());
        // Nothing a daemon cannot use slips in.
        assert!(pg.cfg.command.is_none() && pg.cfg.output.is_none() && !pg.cfg.json);
    }

    #[test]
    fn values_that_look_like_flags_stay_values() {
        let c = check(
            "listen = \"[::1]:0\"\n[[definition]]\nname = \"a\"\npids = [1]\npatterns = [\"--json\"]\n",
        );
        // "--json" is a pattern after `--`, never the flag.
        match c {
            Ok(c) => assert!(!c.definitions[0].cfg.json),
            Err(e) => assert!(e.contains("definition \"a\"") && !e.contains('\n'), "{e}"),
        }
    }

    /// Every bad file is one line naming the file, the definition when there is one, and
    /// the problem.
    #[test]
    fn bad_files_are_one_line_errors() {
        let head = "listen = \"127.0.0.1:9435\"\n[[definition]]\nname = \"web\"\n";
        for (text, wants) in [
            ("listen = 9435\n", "line 1"),
            ("[[definition]]\nname = \"x\"\n", "missing field `listen`"),
            ("listen = \"nowhere\"\n[[definition]]\nname=\"a\"\npids=[1]\n", "listen \"nowhere\""),
            ("listen = \"unix:metrics.sock\"\n[[definition]]\nname=\"a\"\npids=[1]\n", "or unix:/ABSOLUTE/PATH"),
            ("listen = \"127.0.0.1:1\"\n", "no [[definition]]"),
            ("listen = \"127.0.0.1:1\"\nretry-seconds = 0\n[[definition]]\nname=\"a\"\npids=[1]\n", "retry-seconds 0"),
            ("listen = \"127.0.0.1:1\"\nbogus = 1\n", "unknown field `bogus`"),
            ("listen = \"127.0.0.1:1\"\nweb-config = \"web.yml\"\n[[definition]]\nname=\"a\"\npids=[1]\n", "web-config \"web.yml\": expected an absolute path"),
            (&format!("{head}targets = [\"/bin/true\"]\nmax-keys = 0\n"), "definition \"web\": --max-keys 0: must be between 1 and 65536"),
            (&format!("{head}targets = [\"/bin/true\"]\nby = \"nonsense\"\n"), "definition \"web\": "),
            (&format!("{head}targets = [\"/bin/true\"]\nprometheus-buckets = 3\n"), "--prometheus-buckets 3"),
            (&format!("{head}targets = [\"/bin/true\"]\nfilter = \"arg1 >\"\n"), "definition \"web\": "),
            (&format!("{head}targets = [\"/bin/true\"]\nspan = [\"nope\"]\n"), "definition \"web\": "),
            (&format!("{head}targets = [\"/bin/true\"]\nattach = \"sideways\"\n"), "definition \"web\": invalid value 'sideways'"),
            (&format!("{head}targets = [\"bin/true\"]\n"), "targets: \"bin/true\": expected an absolute path"),
            (&format!("{head}\n"), "nothing to trace"),
            (&format!("{head}targets = [\"/bin/true\"]\noutput = \"/tmp/x\"\n"), "definition \"web\": output: unknown field `output`"),
            (&format!("{head}targets = [\"/bin/true\"]\n[[definition]]\nname = \"web\"\npids = [1]\n"), "definition \"web\": defined twice"),
            ("listen = \"127.0.0.1:1\"\n[[definition]]\npids = [1]\n", "definition #1: missing field `name`"),
            ("listen = \"127.0.0.1:1\"\n[[definition]]\nname = \"a b\"\npids = [1]\n", "definition \"a b\": name: "),
            (&format!("{head}pids = [\"x\"]\n"), "definition \"web\": pids: invalid type"),
            (&format!("{head}processes = [\"/usr/bin/x\"]\n"), "definition \"web\": --process \"/usr/bin/x\": a process name has no '/'"),
            (&format!("{head}processes = [\"x\"]\npids = [1]\n"), "definition \"web\": "),
            (&format!("{head}pids = [1]\nmax-keys = \"a\"\n"), "definition \"web\": max-keys: invalid type: string \"a\", expected u32"),
        ] {
            let e = check(text).err().unwrap_or_else(|| panic!("accepted:\n{text}"));
            assert!(e.starts_with("/etc/usdt-trace/serve.toml: "), "{e}");
            assert!(e.contains(wants), "{e:?} lacks {wants:?}");
            assert!(!e.contains('\n'), "{e:?}");
        }
    }

    #[test]
    fn an_unreadable_file_names_itself() {
        let e = load(
            Path::new("/nonexistent/serve.toml"),
            crate::cli::watch_from_argv,
        )
        .expect_err("missing");
        assert!(
            e.to_string()
                .starts_with("/nonexistent/serve.toml: cannot read: "),
            "{e}"
        );
    }

    /// The unit grants the capabilities the shipped config needs and no more: it granted
    /// CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE, which only other users' files and processes
    /// need, by default.
    #[test]
    fn the_shipped_unit_grants_the_minimum() {
        let unit = include_str!("../../../packaging/usdt-trace.service");
        for key in ["AmbientCapabilities=", "CapabilityBoundingSet="] {
            let lines: Vec<&str> = unit.lines().filter(|l| l.starts_with(key)).collect();
            assert_eq!(lines, [format!("{key}CAP_BPF CAP_PERFMON")], "{key}");
        }
        assert!(unit.contains("NoNewPrivileges=yes"));
    }

    /// The example shipped in packaging/ (docs/always-on.md shows it) checks.
    #[test]
    fn the_shipped_example_checks() {
        let c = parse(
            Path::new("packaging/serve.toml"),
            include_str!("../../../packaging/serve.toml"),
            crate::cli::watch_from_argv,
        )
        .expect("packaging/serve.toml");
        let names: Vec<&str> = c.definitions.iter().map(|d| d.name()).collect();
        assert_eq!(names, ["web", "postgres"]);
        assert_eq!(c.definitions[1].per_octave(), 4);
    }
}
