//! `usdt-trace serve --config FILE`: several `watch --hist` definitions in one process, one
//! `/metrics` endpoint for all of them.
//!
//! - `config`: the file → checked definitions, each a [`WatchConfig`](crate::watch::WatchConfig)
//!   made by `watch`'s own validation (pure);
//! - `definition`: each definition on its own thread, attaching, retrying and answering
//!   scrapes (through [`crate::watch::Session`], the kernel-facing part);
//! - here: the listener, the signals (SIGHUP reloads, SIGTERM/SIGINT stop) and the merged
//!   exposition ([`crate::output::prometheus::render_many`]).

pub mod config;
mod definition;

use crate::output::prometheus::{self, listen::ListenAddr, serve::Server, Part};
use config::{ConfigError, ServeConfig};
use definition::{Report, Runner};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a scrape waits for the definitions' reports, all together. One still loading
/// its programs (a retry) answers with what it last reported.
const REPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the main loop looks at signals (a scrape ends its wait at once).
const TICK: Duration = Duration::from_millis(20);

static STOP: AtomicBool = AtomicBool::new(false);
static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

extern "C" fn on_hup(_: libc::c_int) {
    RELOAD.store(true, Ordering::Relaxed);
}

fn install_signal_handlers() {
    // SAFETY: both handlers only store to an atomic, which is async-signal-safe; the
    // sigaction structs are zeroed then filled as sigaction(2) wants.
    unsafe {
        for (sig, handler) in [
            (libc::SIGINT, on_stop as extern "C" fn(libc::c_int)),
            (libc::SIGTERM, on_stop),
            (libc::SIGHUP, on_hup),
        ] {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// SIGHUP caught from the first instant of `serve` (`cli::main` calls this before parsing the
/// arguments): a `systemctl reload` right after the start must not kill the daemon, and once
/// it runs, a SIGHUP that came before is a reload of the file just read (nothing changes).
pub fn catch_sighup_early() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe; the
    // sigaction struct is zeroed then filled as sigaction(2) wants.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_hup as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGHUP, &sa, std::ptr::null_mut());
    }
}

/// One log line on stderr, about one definition (journald adds the time).
pub(crate) fn log(name: &str, msg: &str) {
    eprintln!(
        "usdt-trace serve: [{name}] {}",
        crate::util::terminal::clean(msg)
    );
}

fn log_daemon(msg: &str) {
    eprintln!("usdt-trace serve: {}", crate::util::terminal::clean(msg));
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Listen(#[from] prometheus::serve::ServeError),
    #[error("starting a definition's thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// What the daemon runs: the definitions by name, in the file's order.
struct Daemon {
    cfg: ServeConfig,
    /// The command line's `watch` parser, for the definitions of a reloaded file.
    watch: config::WatchParser,
    runners: Vec<Runner>,
    /// Each definition's last report: answered again when it does not answer in time.
    last: HashMap<String, Report>,
}

impl Daemon {
    fn scrape(&mut self) -> String {
        let asked: Vec<_> = self.runners.iter().map(|r| r.ask()).collect();
        let deadline = Instant::now() + REPORT_TIMEOUT;
        let mut parts = Vec::new();
        let mut up = Vec::new();
        for (r, rx) in self.runners.iter().zip(asked) {
            let name = r.def.name().to_string();
            let left = deadline.saturating_duration_since(Instant::now());
            let report = match rx.recv_timeout(left) {
                Ok(rep) => {
                    self.last.insert(name.clone(), rep.clone());
                    rep
                }
                Err(_) => self.last.get(&name).cloned().unwrap_or(Report {
                    up: false,
                    snap: None,
                }),
            };
            up.push((name.clone(), report.up));
            if let Some(snap) = report.snap {
                parts.push(Part {
                    labels: vec![("definition", name)],
                    snap,
                    per_octave: r.def.per_octave(),
                });
            }
        }
        prometheus::render_many(parts, up, crate::watch::process_cpu_ns())
    }

    /// SIGHUP: reads the file again; definitions removed or changed stop (changed ones start
    /// again, their counters from 0), new ones start, unchanged ones keep running. A file
    /// that does not check out changes nothing.
    fn reload(&mut self, server: &Server) {
        let new = match config::load(&self.cfg.path, self.watch) {
            Ok(c) => c,
            Err(e) => {
                log_daemon(&format!(
                    "reload refused, the running definitions are kept: {e}"
                ));
                return;
            }
        };
        if new.listen != self.cfg.listen {
            log_daemon(&format!(
                "reload: listen {} → {} needs a restart; still listening on {}",
                self.cfg.listen, new.listen, self.cfg.listen
            ));
        }
        let mut old: Vec<Option<Runner>> = std::mem::take(&mut self.runners)
            .into_iter()
            .map(Some)
            .collect();
        let mut next = Vec::new();
        let (mut kept, mut started, mut stopped) = (0, 0, 0);
        for d in new.definitions.iter().cloned() {
            let same = old.iter_mut().find(|r| {
                r.as_ref()
                    .is_some_and(|r| r.def.name() == d.name() && r.def.raw == d.raw)
            });
            match same.and_then(Option::take) {
                Some(r) => {
                    kept += 1;
                    next.push(r);
                }
                None => {
                    if let Some(r) = old
                        .iter_mut()
                        .find(|r| r.as_ref().is_some_and(|r| r.def.name() == d.name()))
                        .and_then(Option::take)
                    {
                        r.stop("changed in the config; starting it again");
                        self.last.remove(d.name());
                        stopped += 1;
                    }
                    match Runner::spawn(d.clone(), new.retry) {
                        Ok(r) => {
                            log(d.name(), "started");
                            started += 1;
                            next.push(r);
                        }
                        Err(e) => log(d.name(), &format!("cannot start a thread: {e}")),
                    }
                }
            }
        }
        for r in old.into_iter().flatten() {
            self.last.remove(r.def.name());
            r.stop("removed from the config");
            stopped += 1;
        }
        // The web config read again: new users, a renewed certificate, for the connections
        // from now on.
        if new.web_config.is_some() || self.cfg.web_config.is_some() {
            server.set_web(new.web.clone());
            log_daemon(&format!("reload: {}", web_line(&new)));
        }
        log_daemon(&format!(
            "reloaded {}: {kept} kept, {started} started, {stopped} stopped",
            new.path.display()
        ));
        let listen = self.cfg.listen.clone();
        warn_exposed(&new);
        self.cfg = ServeConfig { listen, ..new };
        self.runners = next;
    }
}

/// The definitions whose keys are strings of the traced programs (`--by str0`), exported
/// over TCP with no password or client certificate asked: anyone who can connect reads them
/// (a query's text, a password in it). One line each, at the start and at each reload.
fn warn_exposed(cfg: &ServeConfig) {
    if !matches!(cfg.listen, ListenAddr::Tcp(_)) {
        return;
    }
    let Some(why) = prometheus::web::exposed(cfg.web.as_deref()) else {
        return;
    };
    for d in &cfg.definitions {
        if d.cfg.agg.by.as_ref().is_some_and(|b| b.has_str()) {
            log(
                d.name(),
                &format!(
                    "warning: its keys are strings the traced programs hold, exported at {}, {why} (docs/always-on.md#security)",
                    cfg.listen
                ),
            );
        }
    }
}

/// What the web config asks of a client, for the log and `--check`.
fn web_line(cfg: &ServeConfig) -> String {
    match (&cfg.web_config, &cfg.web) {
        (Some(p), Some(w)) => format!("web-config {}: {}", p.display(), w.describe()),
        _ => "no web-config: no TLS, no auth".into(),
    }
}

/// Reaps the helper processes that detach many perf-event sites in the background
/// (`Tracer::detach_all`): the daemon starts no other children.
fn reap_helpers() {
    loop {
        // SAFETY: waitpid with WNOHANG on any child only reads their status; a null status
        // pointer is allowed.
        let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if pid <= 0 {
            break;
        }
    }
}

/// Checks the file, listens, starts every definition, and runs until SIGTERM or SIGINT.
pub fn run(path: &Path, watch: config::WatchParser) -> Result<i32, ServeError> {
    // Before anything that takes time: loading 64 definitions takes tens of milliseconds, and
    // a SIGHUP (a `systemctl reload` right after the start) meanwhile would kill the daemon
    // with the default action, which `Restart=on-failure` does not undo. Caught, it is a
    // reload of a file just read: nothing changes.
    install_signal_handlers();
    let cfg = config::load(path, watch)?;
    // Listening first: an address in use fails the daemon at once, before anything attaches.
    let server = Server::bind_with(cfg.listen.clone(), cfg.web.clone())?;
    log_daemon(&format!(
        "listening on {}; {} definition{} from {}{}",
        server.url(),
        cfg.definitions.len(),
        if cfg.definitions.len() == 1 { "" } else { "s" },
        cfg.path.display(),
        match cfg.web {
            Some(_) => format!("; {}", web_line(&cfg)),
            None => String::new(),
        }
    ));
    warn_exposed(&cfg);
    let mut runners = Vec::new();
    for d in &cfg.definitions {
        runners.push(Runner::spawn(d.clone(), cfg.retry)?);
    }
    let mut daemon = Daemon {
        cfg,
        watch,
        runners,
        last: HashMap::new(),
    };
    while !STOP.load(Ordering::Relaxed) {
        if RELOAD.swap(false, Ordering::Relaxed) {
            log_daemon("SIGHUP: reloading the config");
            daemon.reload(&server);
        }
        // Waiting for a scrape is the loop's pause: one is answered the moment it comes.
        // Those that came meanwhile get the same exposition: rendered once, one copy held.
        if let Some(s) = server.wait(TICK) {
            let body = std::sync::Arc::new(daemon.scrape());
            s.answer_shared(body.clone());
            while let Some(s) = server.pending() {
                s.answer_shared(body.clone());
            }
        }
        reap_helpers();
    }
    log_daemon("stopping: detaching every definition");
    drop(server);
    for r in std::mem::take(&mut daemon.runners) {
        r.stop("shutting down");
    }
    reap_helpers();
    log_daemon("stopped");
    Ok(0)
}

/// `serve --check`: the file checked, one line saying what it holds.
pub fn check(path: &Path, watch: config::WatchParser) -> Result<String, ServeError> {
    let cfg = config::load(path, watch)?;
    let names: Vec<&str> = cfg.definitions.iter().map(|d| d.name()).collect();
    let web = match &cfg.web {
        Some(_) => format!(" ({})", web_line(&cfg)),
        None => String::new(),
    };
    Ok(format!(
        "{}: ok: listen {}{web}, {} definition{}: {}",
        cfg.path.display(),
        cfg.listen,
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        names.join(", ")
    ))
}
