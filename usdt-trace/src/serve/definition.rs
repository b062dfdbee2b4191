//! One definition on a thread of its own: attach, read, answer scrapes; when attaching fails
//! (its binary missing, a process not there yet) or tracing ends (every `pids` process
//! exited), log it and try again every `retry`. Definitions share nothing but the scrape
//! channel, so one that fails or is slow to load never holds up the others.

use crate::output::prometheus::{Health, KeyBound, Snapshot};
use crate::util::wake::Wake;
use crate::watch::Session;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::config::Definition;
use super::log;

/// How long a definition's loop waits for records between looking at its messages.
const POLL: Duration = Duration::from_millis(50);

/// What a definition answers a scrape with.
#[derive(Clone, Debug)]
pub struct Report {
    /// Its probes are attached now.
    pub up: bool,
    /// Everything it counted, this attachment and the ones before (None before anything
    /// was ever attached).
    pub snap: Option<Snapshot>,
}

enum Msg {
    Scrape(SyncSender<Report>),
    Stop,
}

/// A running definition, as the daemon holds it.
pub struct Runner {
    pub def: Definition,
    tx: Sender<Msg>,
    /// Rung with each message: ends the definition's poll of its ring buffer at once.
    wake: Arc<Wake>,
    thread: Option<JoinHandle<()>>,
}

impl Runner {
    pub fn spawn(def: Definition, retry: Duration) -> std::io::Result<Runner> {
        let (tx, rx) = mpsc::channel();
        let d = def.clone();
        let wake = Arc::new(Wake::new()?);
        let w = wake.clone();
        let thread = std::thread::Builder::new()
            .name(format!("def-{}", def.name()))
            .spawn(move || run(d, retry, rx, &w))?;
        Ok(Runner {
            def,
            tx,
            wake,
            thread: Some(thread),
        })
    }

    /// Asks for a report; the answer comes on the returned channel.
    pub fn ask(&self) -> Receiver<Report> {
        let (tx, rx) = mpsc::sync_channel(1);
        let _ = self.tx.send(Msg::Scrape(tx));
        self.wake.ring();
        rx
    }

    /// Detaches and ends the thread (waits for it: a detach takes at most a few hundred
    /// milliseconds, the rest goes to a helper process).
    pub fn stop(mut self, why: &str) {
        let _ = self.tx.send(Msg::Stop);
        self.wake.ring();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        log(self.def.name(), &format!("stopped ({why})"));
    }
}

/// `base` (what earlier attachments counted) added into `now`.
fn with_base(mut now: Snapshot, base: &Option<Snapshot>) -> Snapshot {
    if let Some(b) = base {
        now.add_base(b);
    }
    now
}

fn run(def: Definition, retry: Duration, rx: Receiver<Msg>, wake: &Wake) {
    let name = def.name().to_string();
    // What tracing says on this thread (objects attached late, files replaced or detached)
    // names the definition, as the lines logged here do.
    crate::util::terminal::set_speaker(format!("usdt-trace serve: [{name}] "));
    let mut session: Option<Session> = None;
    // Counted by attachments that ended: added to every later report, so that a definition
    // attaching again goes on counting from where it was.
    let mut base: Option<Snapshot> = None;
    // The last report made while attached: what is kept if reading at the end fails.
    let mut last: Option<Snapshot> = None;
    let mut next_try = Instant::now();
    // `max-keys` as a bound on the keys exported, for the definition's whole life (across
    // its attachments, as its counts are).
    let mut bound = KeyBound::default();
    let end = |s: Session, base: &mut Option<Snapshot>, last: &mut Option<Snapshot>| {
        if let Some(snap) = s.stop().or_else(|| last.take()) {
            *base = Some(with_base(snap, base));
        }
        *last = None;
    };
    loop {
        if session.is_none() && Instant::now() >= next_try {
            match Session::start(&def.cfg) {
                Ok(mut s) => {
                    s.wake_on(wake.fd());
                    let line = s.attached.trim_end_matches("; Ctrl-C to stop").to_string();
                    log(&name, &format!("attached: {line}"));
                    session = Some(s);
                }
                Err(e) => {
                    log(
                        &name,
                        &format!(
                            "cannot attach: {}; retrying in {}s",
                            e.to_string().replace('\n', " "),
                            retry.as_secs()
                        ),
                    );
                    next_try = Instant::now() + retry;
                }
            }
        }
        if let Some(s) = session.as_mut() {
            match s.step(POLL) {
                Ok(true) => {}
                Ok(false) => {
                    log(
                        &name,
                        &format!(
                            "detached: every traced process has exited; retrying in {}s",
                            retry.as_secs()
                        ),
                    );
                    if let Some(s) = session.take() {
                        end(s, &mut base, &mut last);
                    }
                    next_try = Instant::now() + retry;
                }
                Err(e) => {
                    log(
                        &name,
                        &format!(
                            "detached: {}; retrying in {}s",
                            e.to_string().replace('\n', " "),
                            retry.as_secs()
                        ),
                    );
                    if let Some(s) = session.take() {
                        end(s, &mut base, &mut last);
                    }
                    next_try = Instant::now() + retry;
                }
            }
        }
        // Attached, the step above waited; waiting to retry, wait here (for a message or the
        // retry time, whichever is first).
        let wait = if session.is_some() {
            Duration::ZERO
        } else {
            next_try
                .saturating_duration_since(Instant::now())
                .min(POLL * 4)
        };
        // Cleared before the channel is read: a message sent after this rings it again.
        wake.clear();
        let msg = match rx.recv_timeout(wait) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => continue,
            // The daemon is gone without a word: stop as if told.
            Err(RecvTimeoutError::Disconnected) => Msg::Stop,
        };
        match msg {
            Msg::Scrape(reply) => {
                let report = match &session {
                    Some(s) => match s.snapshot() {
                        Ok(snap) => {
                            last = Some(snap.clone());
                            Report {
                                up: true,
                                snap: Some(with_base(snap, &base)),
                            }
                        }
                        Err(e) => {
                            log(&name, &format!("reading the kernel's maps: {e}"));
                            Report {
                                up: true,
                                snap: last.clone().map(|s| with_base(s, &base)),
                            }
                        }
                    },
                    // Down: what was counted stays exported (a series that vanished and came
                    // back would look like a reset); nothing is attached.
                    None => Report {
                        up: false,
                        snap: base.clone().map(|mut b| {
                            b.health = Health::default();
                            b
                        }),
                    },
                };
                let mut report = report;
                if let Some(snap) = report.snap.as_mut() {
                    bound.apply(snap);
                }
                let _ = reply.send(report);
            }
            Msg::Stop => {
                if let Some(s) = session.take() {
                    let _ = s.stop();
                    log(&name, "detached");
                }
                return;
            }
        }
    }
}
