//! `usdt-trace watch`: a short driver over stages that each live in their own module.
//!
//! 1. [`target`]: the named files, or every object of the `-p` processes, opened once (the
//!    uprobes attach through the same descriptor, so the kernel resolves the inode we parsed);
//! 2. [`plan`]: the chosen sites → one kernel spec and one printer record per cookie, and the
//!    attach points per object;
//! 3. [`crate::target::child`]: the `-c` command, forked and held until the probes are live;
//! 4. [`Tracer`]: load, attach, read the ring buffer, detach (the only kernel-facing stage);
//! 5. sinks ([`crate::output::Sink`]): every record, resolved by the plan, goes to them; the
//!    loop does not know which output mode is in use.
//!
//! The stages' helpers live beside this file: `config` (the settings and what is derived from
//! them), `targets` (opening what is traced), `planned` (the plan and what is derived from it:
//! the `--by` key, the `--filter` masks, the files watched for changes), `attach` (attaching
//! and detaching), `reader` (the
//! reading loop's work), `stacks` (`--stack`), `late_strs` (strings read from the live
//! process), `signals`, `session` (a run driven by its caller, for `serve`), `warnings` (the end-of-run summary and warnings) and `error`.

mod attach;
pub(crate) mod changes;
mod config;
mod error;
mod execchain;
pub(crate) mod follow;
pub(crate) mod late;
mod late_strs;
mod planned;
mod reader;
pub(crate) mod semaphores;
mod session;
mod signals;
mod stacks;
mod targets;
mod warnings;

pub(crate) use attach::stop_changed;
pub use config::{AggArgs, PromConfig, WatchConfig};
pub use error::WatchError;
pub use session::Session;

use crate::util::clock::{self, monotonic_ns, monotonic_zero_unix_ns};
use attach::attach;
use planned::{plan_run, Planned};
use reader::{Agg, Reader};
use signals::{install_signal_handlers, STOP};
use stacks::Stacks;
use targets::open_targets;
use warnings::{end_warnings, summarize};

use crate::output::{self, RunInfo, Sink};
use crate::target;
use crate::target::child::{Child, Exit, GRACE};
use crate::tracer::Tracer;
use crate::util::terminal::clean;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// This process's CPU time (user and system), for `serve`'s `process_cpu_seconds_total`.
pub(crate) fn process_cpu_ns() -> u64 {
    clock::clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Why the reading loop should end now, if it should.
fn should_stop(cfg: &WatchConfig, started: Instant, child: Option<&mut Child>) -> bool {
    STOP.load(Ordering::Relaxed)
        || cfg.duration.is_some_and(|d| started.elapsed() >= d)
        || child.is_some_and(|c| c.exited())
        || (cfg.command.is_none()
            && !cfg.pids.is_empty()
            && cfg.pids.iter().all(|&p| !target::pid_alive(p)))
}

/// `SIGSEGV` for 11: the name of a signal that ends programs, or its number.
fn signal_name(sig: i32) -> String {
    const NAMES: [(i32, &str); 14] = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGSYS, "SIGSYS"),
    ];
    match NAMES.iter().find(|(n, _)| *n == sig) {
        Some((_, name)) => (*name).to_string(),
        None => format!("signal {sig}"),
    }
}

/// The `-c` command's own status when it ended by itself; ended by us (or no command), 0.
/// One that is still running is left so with `--leave-running`, else terminated.
fn command_status(child: Option<Child>, leave_running: bool) -> i32 {
    match child {
        Some(mut c) => match c.exit() {
            Some(e) => {
                // A shell says when its command dies by a signal; so does watch, because a
                // traced program that crashed is the first thing a user must hear of.
                if let Exit::Signal(s) = e {
                    eprintln!(
                        "usdt-trace: the command ({}) was killed by {}",
                        c.pid,
                        signal_name(s)
                    );
                }
                e.shell_code()
            }
            None if leave_running => {
                c.leave_running();
                0
            }
            None => {
                c.terminate(GRACE);
                0
            }
        },
        None => 0,
    }
}

/// Traces until told to stop; returns the exit code: the `-c` command's own when it ended by
/// itself, else 0.
pub fn run(cfg: &WatchConfig) -> Result<i32, WatchError> {
    // A `-c` script: run it to the program it ends up executing, held there; that program
    // is the target.
    let followed_cfg;
    let mut held = None;
    let cfg = if cfg.exec_chain {
        let f = execchain::follow(cfg)?;
        followed_cfg = WatchConfig {
            targets: vec![f.target.clone()],
            exec_chain: false,
            ..cfg.clone()
        };
        held = Some(f);
        &followed_cfg
    } else {
        cfg
    };
    let objects = open_targets(cfg)?;
    let Planned {
        mut plan,
        key_plan,
        filter_masks,
        mut watched,
    } = plan_run(cfg, &objects)?;
    // Before anything is attached: a bad -o path fails first.
    let (sinks, output, mut out_files) = cfg.sinks(&plan)?;
    // Listening before attach too: an address in use fails the run before it starts.
    let prom = cfg
        .prometheus
        .as_ref()
        .map(|p| {
            output::prometheus::serve::Server::bind_with(p.addr, p.web.clone()).map(|s| (s, p))
        })
        .transpose()?;
    // Strings of the traced programs as label values, on a port any local user (or more) can
    // connect to without a password: said once, as `serve` says it.
    if let (Some((server, _)), Some(by)) = (&prom, &cfg.agg.by) {
        if by.has_str() {
            if let Some(why) = output::prometheus::web::exposed(server.web().as_deref()) {
                eprintln!(
                    "warning: --by {}: strings the traced programs hold are exported at {}, {why} (docs/always-on.md#security)",
                    by.text,
                    server.url()
                );
            }
        }
    }

    // Times count from before the first probe can fire, so none is ever negative.
    let t0 = monotonic_ns();
    let (mut child, chain) = match held {
        Some(f) => (Some(f.child), Some(f.chain)),
        None => (cfg.command.as_deref().map(Child::spawn).transpose()?, None),
    };
    let mut pids: Vec<u32> = cfg.pids.clone();
    pids.extend(child.as_ref().map(|c| c.pid as u32));
    if cfg.bench_null_program {
        eprintln!("warning: --bench-null-program: the attached program records nothing; this run measures the cost of a hit, not what the probes did");
    }
    // `--stack` (auto): frame pointers when every traced file keeps them, else DWARF.
    let stack_mode = cfg.stack.map(|m| {
        let files: Vec<_> = plan
            .objects
            .iter()
            .filter_map(|op| {
                let sites = op.points.iter().filter(|p| !p.ret).map(|p| p.offset);
                objects
                    .get(op.object)
                    .map(|o| (o.fd_path(), sites.collect()))
            })
            .collect();
        crate::target::unwind::mode::resolve(m, &files)
    });
    let mut load = cfg.load_options(&plan, filter_masks.as_deref(), key_plan.as_ref());
    load.stack_copy = stack_mode == Some(crate::target::unwind::StackMode::Dwarf);
    let mut tracer = Tracer::load(&load)?;
    // Semaphores of lld's packed layout are counted by hand, in every process, and so not by
    // the kernel too: their points are attached without a ref_ctr_offset.
    let affected = crate::watch::semaphores::affected(&objects, &plan);
    crate::watch::semaphores::hand_over(&mut plan, &affected);
    let mut raiser = crate::watch::semaphores::Raiser::new(affected, &pids);
    if let Some(w) = raiser.warning() {
        eprintln!("{}", clean(&w));
    }
    // A scrape ends the loop's wait at once.
    if let Some((server, _)) = &prom {
        tracer.wake_on(vec![server.wake_fd()]);
    }
    attach(&mut tracer, &objects, &plan, &pids)?;
    // Processes running now have their semaphores raised before the readiness line.
    raiser.poll_now();
    // The run has started: only now is an existing -o or --perfetto file emptied (an error
    // above left it as it was, and removed one we created).
    for f in &mut out_files {
        f.commit()?;
    }
    // From here the objects live in `follow`, with those attached later. Its exec hold is on
    // before the readiness line: a deploy may come the moment a script sees it.
    let mut follow = crate::watch::follow::Follow::new(cfg, objects);
    tracer.wake_on(follow.wake_fds());
    follow.start_hold(&mut tracer);
    let objects = follow.objects();
    // Before the readiness line: a script may send SIGINT the moment it sees it.
    install_signal_handlers();
    match &chain {
        Some(chain) => eprintln!(
            "{}",
            plan.attached_line()
                .replacen("; Ctrl-C", &format!("; {chain}; Ctrl-C"), 1)
        ),
        None => eprintln!("{}", plan.attached_line()),
    }
    // Watching for new code starts before the command runs; the first poll reads every
    // process again, for what was mapped since the targets were opened.
    let mut late = cfg.late().then(|| {
        let child = child.as_ref().map(|c| c.pid as u32);
        let scope = crate::watch::late::Scope::of_run(child, &cfg.pids, objects);
        let (l, warning) = crate::watch::late::Late::new(scope, objects);
        if let Some(w) = warning {
            eprintln!("{}", clean(&w));
        }
        tracer.wake_on(l.wake_fds());
        l
    });
    // A write to a traced file ends the loop's wait at once.
    tracer.wake_on(watched.wake_fd().into_iter().collect());
    if let Some(c) = child.as_mut() {
        // Semaphores this tool raises itself (the kernel would count them wrong) must be up
        // before the command's first instruction, as the kernel's would be: the command is
        // held at its exec while they are written.
        // A followed command is held at its exec already.
        if chain.is_some() || c.release(raiser.has_work())? {
            raiser.poll_now();
            c.resume();
        }
    }

    let started = Instant::now();
    // Probes attached later (late mappings) are named from the process's maps alone.
    let stacks = cfg.stack.is_some().then(|| Stacks::new(&plan, objects));
    let mut reader = Reader {
        plan,
        sinks,
        str_max: cfg.str_max as usize,
        strs: Default::default(),
        bad_records: 0,
        last: None,
        t0,
        stacks,
        agg: Agg::new(cfg, key_plan, t0),
        live: cfg.baseline.as_ref().map(|_| Default::default()),
        waits: crate::output::waitcap::WaitCap::new(cfg.perfetto_max_waits),
    };
    reader.sinks.begin(&RunInfo {
        version: env!("CARGO_PKG_VERSION"),
        targets: objects.iter().map(|o| o.shown.clone()).collect(),
        pids: pids.clone(),
        command: cfg.command.as_ref().map(|c| c.join(" ")),
        t0_ns: t0,
        clock_zero_unix_ns: monotonic_zero_unix_ns(),
        sites: reader.plan.sites.len(),
        span_names: reader.plan.pairs.len(),
        split: cfg.sched,
    })?;
    let late_rules = crate::watch::late::Rules {
        plan: cfg.plan_options(),
        filter: cfg.filter.as_ref(),
    };
    let mut last_hist = Instant::now();
    // `--max-keys` as a bound on the keys `--prometheus` exports.
    let mut key_bound = output::prometheus::KeyBound::default();
    while !should_stop(cfg, started, child.as_mut()) {
        reader.batch(&mut tracer, Duration::from_millis(50))?;
        if let Some((server, p)) = &prom {
            reader.serve_scrapes(
                server,
                p,
                &mut key_bound,
                &tracer,
                output.lost(),
                cfg.ring_bytes,
            )?;
        }
        if cfg.interval.is_some_and(|iv| last_hist.elapsed() >= iv) {
            last_hist = Instant::now();
            reader.interval(&tracer)?;
        }
        stop_changed(&watched.take_changed(), &mut tracer, Some(&mut raiser));
        raiser.poll();
        if let Some(l) = late.as_mut() {
            l.poll(&mut reader.plan, &mut tracer, &late_rules, &mut raiser);
        }
        // A file without room in the plan was said in a warning; the run goes on.
        let _ = follow.poll(
            &mut reader.plan,
            &mut tracer,
            &late_rules,
            &mut watched,
            &mut raiser,
        );
    }

    follow.stop_holding(&mut tracer);
    // Execs of new builds that could not be held (the exec ring was full): said, counted.
    let (_, unheld) = tracer.exec_counts();
    if unheld > 0 {
        crate::util::terminal::say(&format!(
            "warning: {unheld} process{} started a new build of a followed file unheld (the exec ring was full): {} first spans may be lost",
            if unheld == 1 { "" } else { "es" },
            if unheld == 1 { "its" } else { "their" }
        ));
    }
    // However the run ended (a signal, --duration, the command's exit), a signal from here on
    // is the one that ends what is still waited for (signals::NOW).
    STOP.store(true, Ordering::Relaxed);
    // Detach first (semaphores drop), then take what is left in the ring.
    let detach = tracer.detach_all();
    // After detach, so that no hit comes between; the kernel counts none of these.
    raiser.lower_all();
    while reader.batch(&mut tracer, Duration::ZERO)? > 0 {}
    if cfg.hist || cfg.agg.count || cfg.agg.top.is_some() {
        reader.totals(&tracer, cfg.interval.is_some())?;
    }
    reader.compare_baseline(cfg.baseline.as_ref())?;
    let ac = tracer.agg_counters()?;
    let out_lost = output.lost();
    let summary = summarize(&tracer, &reader, &ac, out_lost, t0)?;
    reader.sinks.finish(&summary)?;
    // For the end's hints: what was traced, by name.
    let probes: Vec<String> = reader
        .plan
        .sites
        .iter()
        .map(|s| format!("{}:{}", s.provider, s.name))
        .collect();
    drop(reader);
    // A reader that stopped reading gets a moment, then what it did not take is counted.
    // Bounded so that stopping stays well under a second whatever the reader does.
    let unwritten = output
        .finish(Duration::from_millis(300))
        .saturating_sub(out_lost);
    end_warnings(cfg, &summary, &ac, out_lost, unwritten, &detach, &probes);
    if let Some(w) = raiser.end_warning() {
        eprintln!("{}", clean(&w));
    }
    Ok(command_status(child, cfg.leave_running))
}
