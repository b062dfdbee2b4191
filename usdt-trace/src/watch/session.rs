//! A `watch --hist` run as a value the caller drives, for `serve`: [`Session::start`] does
//! what `run` does before its loop (open the targets, plan, load, raise semaphores,
//! attach), [`Session::step`] one turn of the loop, [`Session::snapshot`] what a
//! `--prometheus` scrape reads, and [`Session::stop`] the detach. Built from the same stages
//! as `run`, so a definition traces exactly what `watch` with its flags would; kept apart
//! from `run` because `run` also owns the command, the sinks' output and the end-of-run
//! summary, which a daemon has none of.

use super::attach::{attach, stop_changed};
use super::planned::{plan_run, Planned};
use super::reader::{Agg, Reader};
use super::targets::open_targets;
use super::{WatchConfig, WatchError};
use crate::output::prometheus::Snapshot;
use crate::output::sink::Fanout;
use crate::target;
use crate::tracer::Tracer;
use crate::util::clock::monotonic_ns;
use std::time::Duration;

/// One definition's live tracing.
pub struct Session {
    cfg: WatchConfig,
    tracer: Tracer,
    reader: Reader,
    raiser: crate::watch::semaphores::Raiser,
    late: Option<crate::watch::late::Late>,
    watched: crate::watch::changes::ChangeWatch,
    /// The objects attached (kept open: the uprobes were attached through their
    /// descriptors), and the named paths and process names looked at again.
    follow: crate::watch::follow::Follow,
    /// What `watch` prints once attached ("Attached N probe sites in ...").
    pub attached: String,
}

impl Session {
    /// Opens, plans, loads and attaches `cfg` (a `--hist` configuration).
    pub fn start(cfg: &WatchConfig) -> Result<Session, WatchError> {
        let objects = open_targets(cfg)?;
        let Planned {
            mut plan,
            key_plan,
            filter_masks,
            watched,
        } = plan_run(cfg, &objects)?;
        let t0 = monotonic_ns();
        let mut tracer =
            Tracer::load(&cfg.load_options(&plan, filter_masks.as_deref(), key_plan.as_ref()))?;
        // As in `run`: the kernel does not count what the raiser counts.
        let affected = crate::watch::semaphores::affected(&objects, &plan);
        crate::watch::semaphores::hand_over(&mut plan, &affected);
        let mut raiser = crate::watch::semaphores::Raiser::new(affected, &cfg.pids);
        if let Some(w) = raiser.warning() {
            crate::util::terminal::say(&crate::util::terminal::clean(&w));
        }
        attach(&mut tracer, &objects, &plan, &cfg.pids)?;
        raiser.poll_now();
        let attached = plan.attached_line();
        let late = cfg.late().then(|| {
            let scope = crate::watch::late::Scope::of_run(None, &cfg.pids, &objects);
            let (l, warning) = crate::watch::late::Late::new(scope, &objects);
            if let Some(w) = warning {
                crate::util::terminal::say(&crate::util::terminal::clean(&w));
            }
            tracer.wake_on(l.wake_fds());
            l
        });
        tracer.wake_on(watched.wake_fd().into_iter().collect());
        let mut follow = crate::watch::follow::Follow::new(cfg, objects);
        tracer.wake_on(follow.wake_fds());
        follow.start_hold(&mut tracer);
        let reader = Reader {
            plan,
            // Nothing is printed: the histograms stay in the kernel and scrapes read them.
            sinks: Fanout(Vec::new()),
            str_max: cfg.str_max as usize,
            strs: Default::default(),
            bad_records: 0,
            last: None,
            t0,
            stacks: None,
            agg: Agg::new(cfg, key_plan, t0),
            // serve runs --hist: no span records, nothing to compare.
            live: None,
            // No --perfetto: no waits.
            waits: Default::default(),
        };
        Ok(Session {
            cfg: cfg.clone(),
            tracer,
            reader,
            raiser,
            late,
            watched,
            follow,
            attached,
        })
    }

    /// One turn of `watch`'s loop: read what the ring buffer holds (waiting at most
    /// `timeout`), detach files changed in place, raise semaphores in new processes, attach
    /// probes loaded late. `Ok(false)` once every `-p` process has exited: nothing is left to
    /// trace.
    pub fn step(&mut self, timeout: Duration) -> Result<bool, WatchError> {
        self.reader.batch(&mut self.tracer, timeout)?;
        stop_changed(
            &self.watched.take_changed(),
            &mut self.tracer,
            Some(&mut self.raiser),
        );
        self.raiser.poll();
        let rules = crate::watch::late::Rules {
            plan: self.cfg.plan_options(),
            filter: self.cfg.filter.as_ref(),
        };
        if let Some(l) = self.late.as_mut() {
            l.poll(
                &mut self.reader.plan,
                &mut self.tracer,
                &rules,
                &mut self.raiser,
            );
        }
        // No room for a new build of a traced file: the definition starts again (its
        // counters carried), rather than go on without tracing what the path now runs.
        self.follow
            .poll(
                &mut self.reader.plan,
                &mut self.tracer,
                &rules,
                &mut self.watched,
                &mut self.raiser,
            )
            .map_err(WatchError::FollowRoom)?;
        Ok(self.cfg.pids.is_empty() || self.cfg.pids.iter().any(|&p| target::pid_alive(p)))
    }

    /// Also ends [`Session::step`]'s wait when `fd` becomes readable (a scrape to answer).
    pub fn wake_on(&mut self, fd: i32) {
        self.tracer.wake_on(vec![fd]);
    }

    /// What a scrape exports now: the kernel's cumulative histograms and counters.
    pub fn snapshot(&self) -> Result<Snapshot, WatchError> {
        self.reader
            .prom_snapshot(&self.tracer, 0, self.cfg.ring_bytes)
    }

    /// Detaches (semaphores drop with the links, and those raised by hand are lowered after),
    /// and returns the last snapshot, read after the detach.
    pub fn stop(mut self) -> Option<Snapshot> {
        self.follow.stop_holding(&mut self.tracer);
        let _ = self.tracer.detach_all();
        self.raiser.lower_all();
        while self
            .reader
            .batch(&mut self.tracer, Duration::ZERO)
            .is_ok_and(|n| n > 0)
        {}
        self.snapshot().ok()
    }
}
