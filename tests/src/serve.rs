//! The `serve` daemon under test: started on a config file, its stderr log read line by line,
//! and its `/metrics` scraped and parsed.
use crate::proc::{self, Lines};
use crate::watch::usdt_trace_bin;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One sample line: its metric name, labels and value.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the text exposition (the label values here hold no escapes).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, v) = l.rsplit_once(' ').expect("sample line");
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once("=\"").expect("label");
                    (k.to_string(), v.trim_end_matches('"').to_string())
                })
                .collect();
            Sample {
                name: name.to_string(),
                labels,
                value: v.parse().expect("value"),
            }
        })
        .collect()
}

pub struct Metrics {
    pub text: String,
    pub samples: Vec<Sample>,
}

impl Metrics {
    pub fn scrape(addr: &str) -> Metrics {
        let out = proc::output_within(
            Command::new("curl")
                .args(["-s", "-f", "--max-time", "10"])
                .arg(format!("http://{addr}/metrics")),
            Duration::from_secs(15),
        );
        assert!(out.status.success(), "scrape of {addr} failed");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let samples = parse(&text);
        Metrics { text, samples }
    }

    /// The samples of `name` whose labels include every one of `want`.
    pub fn find(&self, name: &str, want: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && want
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v))
            })
            .collect()
    }

    /// The one sample of `name` with these labels (panics when there is not exactly one).
    pub fn one(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        let f = self.find(name, want);
        assert_eq!(f.len(), 1, "{name} {want:?}: {f:?}\n{}", self.text);
        f[0].value
    }

    pub fn definitions(&self) -> std::collections::BTreeSet<String> {
        self.samples
            .iter()
            .filter(|s| s.name.starts_with("usdt_span_duration_seconds"))
            .filter_map(|s| s.labels.get("definition").cloned())
            .collect()
    }
}

/// The daemon, its stderr read line by line; killed and reaped at drop if still running.
pub struct Daemon {
    pub child: Child,
    pub stderr: Lines,
    /// Every stderr line read so far.
    pub log: Vec<String>,
}

impl Daemon {
    pub fn start(config: &Path) -> Daemon {
        let mut child = proc::spawn(
            Command::new(usdt_trace_bin())
                .args(["serve", "--config"])
                .arg(config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped()),
        );
        let stderr = Lines::new(child.stderr.take().expect("stderr"));
        Daemon {
            child,
            stderr,
            log: Vec::new(),
        }
    }

    /// Reads stderr until a line contains `what`; panics with the log after `timeout`.
    pub fn wait_log(&mut self, what: &str, timeout: Duration) -> String {
        if let Some(l) = self.log.iter().find(|l| l.contains(what)) {
            return l.clone();
        }
        let (lines, hit) = self
            .stderr
            .until(Instant::now() + timeout, |l| l.contains(what));
        self.log.extend(lines);
        assert!(
            hit,
            "no {what:?} on stderr within {timeout:?}: {:#?}",
            self.log
        );
        self.log.last().cloned().unwrap_or_default()
    }

    /// Lines that came so far without waiting for more.
    pub fn drain(&mut self) {
        let (lines, _) = self
            .stderr
            .rest_until(Instant::now() + Duration::from_millis(200));
        self.log.extend(lines);
    }

    pub fn signal(&self, sig: i32) {
        proc::signal(self.child.id(), sig);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        proc::kill_and_reap(&mut self.child);
    }
}
