//! A real Prometheus server for the export tests: Debian's `prometheus` (installed by
//! scripts/setup.sh) on a port and storage of its own, scraping one target every second,
//! asked over its HTTP API; killed and its storage removed at drop. (Moved here from
//! tests/export_prometheus.rs so that tests/serve_prometheus.rs scrapes the daemon with it.)

use crate::markers::free_port;
use crate::proc;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A Prometheus server of our own: its own port, its own storage, killed at drop.
pub struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Prometheus {
    pub fn start(target: &str) -> Prometheus {
        Prometheus::start_with(target, "")
    }

    /// [`Prometheus::start`] with more settings for the scrape job (`scheme`, `basic_auth`,
    /// `tls_config`, ...): YAML lines indented by four spaces, each ending in a newline.
    pub fn start_with(target: &str, job: &str) -> Prometheus {
        assert!(
            Command::new("prometheus")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()),
            "prometheus is not installed: run scripts/setup.sh"
        );
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("usdt-trace-prom-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("prometheus dir");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: usdt\n{job}    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("config");
        let child = proc::spawn(
            Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg("--log.level=warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let p = Prometheus { child, port, dir };
        proc::wait_until("prometheus ready", Duration::from_secs(60), || {
            p.get("/-/ready").is_some_and(|b| b.contains("Ready"))
        });
        p
    }

    pub fn get(&self, path_and_query: &str) -> Option<String> {
        let out = Command::new("curl")
            .args(["-s", "-f", "--max-time", "5"])
            .arg(format!("http://127.0.0.1:{}{path_and_query}", self.port))
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// An instant query at `at` (Unix seconds): each series' labels and value.
    pub fn query(&self, expr: &str, at: f64) -> Vec<(Value, f64)> {
        let out = Command::new("curl")
            .args(["-s", "-f", "--max-time", "10", "--data-urlencode"])
            .arg(format!("query={expr}"))
            .args(["--data-urlencode", &format!("time={at:.3}")])
            .arg(format!("http://127.0.0.1:{}/api/v1/query", self.port))
            .output()
            .expect("curl");
        let body = String::from_utf8_lossy(&out.stdout);
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("query {expr}: {e}: {body}"));
        assert_eq!(v["status"], "success", "{expr}: {body}");
        let rows: Vec<(Value, f64)> = v["data"]["result"]
            .as_array()
            .expect("vector")
            .iter()
            .map(|r| {
                let val = r["value"][1]
                    .as_str()
                    .expect("value")
                    .parse()
                    .expect("number");
                (r["metric"].clone(), val)
            })
            .collect();
        // What a person would see at the prompt: kept in the test's output (--nocapture).
        eprintln!("PromQL> {expr}\n        {rows:?}");
        rows
    }

    pub fn one(&self, expr: &str, at: f64) -> f64 {
        let rows = self.query(expr, at);
        assert_eq!(rows.len(), 1, "{expr}: {rows:?}");
        rows[0].1
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        proc::kill_and_reap(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
