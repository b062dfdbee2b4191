//! `usdt-trace watch`: targets → probe sites → spec table → attach → records → output.
//!
//! Each stage consumes what the one before produced and nothing is parsed twice: the ELF is
//! parsed once (through the same file descriptor the uprobes are attached through, so the
//! kernel resolves the very inode we parsed), the span plan and argument specs become one
//! [`SiteSpec`](usdt_trace_common::SiteSpec) per site, and output looks sites up by cookie.

use crate::elf::{self, ObjectProbes};
use crate::output::{self, hist, ArgFmt, PairInfo, Record, SiteInfo, Summary};
use crate::pattern::Pattern;
use crate::procmaps::{self, ProcError};
use crate::spans::{self, ProbeName, Role, SpanError, SpanRule, StrRule};
use crate::tracer::{AttachMode, AttachPoint, LoadOptions, TraceError, Tracer};
use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Validated `watch` settings (built by `cli`).
#[derive(Debug, Clone)]
pub struct WatchConfig {
    pub json: bool,
    pub targets: Vec<PathBuf>,
    pub pids: Vec<u32>,
    /// argv of `-c`.
    pub command: Option<Vec<String>>,
    pub duration: Option<Duration>,
    pub patterns: Vec<Pattern>,
    pub spans: Vec<SpanRule>,
    pub strs: Vec<StrRule>,
    pub auto_span: bool,
    pub hist: bool,
    pub interval: Option<Duration>,
    pub sched: bool,
    pub ring_bytes: u32,
    pub attach: AttachMode,
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("{path}: {msg}")]
    Target { path: String, msg: String },
    #[error("{path}: {source}")]
    Open {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Proc(#[from] ProcError),
    #[error("no USDT probes in {0}")]
    NoProbes(String),
    #[error("no probe matches {patterns} in {targets}")]
    NoMatch { patterns: String, targets: String },
    #[error(transparent)]
    Span(#[from] SpanError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("starting {cmd}: {source}")]
    Spawn {
        cmd: String,
        #[source]
        source: io::Error,
    },
    #[error("writing output: {0}")]
    Output(#[from] io::Error),
}

impl WatchError {
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, WatchError::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// One ELF object being traced.
struct Object {
    shown: String,
    /// Kept open: uprobes attach through /proc/self/fd/N of this descriptor.
    file: File,
    probes: ObjectProbes,
}

impl Object {
    fn open(shown: String, path: &std::path::Path) -> Result<Object, WatchError> {
        let file = File::open(path).map_err(|source| WatchError::Open {
            path: shown.clone(),
            source,
        })?;
        // Parsed through the descriptor; errors name the path the user knows.
        let probes = elf::parse_file(&fd_path(&file)).map_err(|e| WatchError::Target {
            path: shown.clone(),
            msg: e.kind().to_string(),
        })?;
        Ok(Object {
            shown,
            file,
            probes,
        })
    }
}

fn fd_path(f: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// A child started by `-c`, held before exec until the probes are live.
struct Child {
    pid: libc::pid_t,
    cmd: String,
    release: Option<File>,
    /// Close-on-exec: EOF means the exec succeeded, 4 bytes are the errno of a failed one.
    exec_status: Option<File>,
    status: Option<i32>,
}

impl Child {
    fn spawn(argv: &[String]) -> Result<Child, WatchError> {
        let cmd = argv.join(" ");
        let spawn_err = |source| WatchError::Spawn {
            cmd: cmd.clone(),
            source,
        };
        let cargs: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| spawn_err(io::Error::from_raw_os_error(libc::EINVAL)))?;
        let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut fds = [0i32; 2];
        let mut st = [0i32; 2];
        // SAFETY: plain pipe2 into 2-int arrays.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0
            || unsafe { libc::pipe2(st.as_mut_ptr(), libc::O_CLOEXEC) } != 0
        {
            return Err(spawn_err(io::Error::last_os_error()));
        }
        // SAFETY: the child only calls async-signal-safe functions (read, close, execvp, _exit)
        // before exec; everything it touches was allocated before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(spawn_err(io::Error::last_os_error()));
        }
        if pid == 0 {
            unsafe {
                libc::close(fds[1]);
                libc::close(st[0]);
                let mut b = 0u8;
                // Wait for the go-ahead: the probes are live. EOF (tracer died) means don't run.
                if libc::read(fds[0], &mut b as *mut u8 as *mut libc::c_void, 1) != 1 {
                    libc::_exit(126);
                }
                libc::execvp(ptrs[0], ptrs.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(st[1], &errno as *const i32 as *const libc::c_void, 4);
                libc::_exit(127);
            }
        }
        // SAFETY: we own these ends; the others are the child's now.
        unsafe {
            libc::close(fds[0]);
            libc::close(st[1]);
        }
        use std::os::fd::FromRawFd;
        Ok(Child {
            pid,
            cmd,
            // SAFETY: fds[1] and st[0] are ours alone.
            release: Some(unsafe { File::from_raw_fd(fds[1]) }),
            exec_status: Some(unsafe { File::from_raw_fd(st[0]) }),
            status: None,
        })
    }

    /// Let the child exec, and report whether the exec worked.
    fn release(&mut self) -> Result<(), WatchError> {
        if let Some(mut f) = self.release.take() {
            let _ = f.write_all(b"g");
        }
        if let Some(mut st) = self.exec_status.take() {
            let mut buf = [0u8; 4];
            use std::io::Read;
            if let Ok(4) = st.read(&mut buf) {
                return Err(WatchError::Spawn {
                    cmd: self.cmd.clone(),
                    source: io::Error::from_raw_os_error(i32::from_ne_bytes(buf)),
                });
            }
        }
        Ok(())
    }

    /// True once the child has exited (reaped).
    fn exited(&mut self) -> bool {
        if self.status.is_some() {
            return true;
        }
        let mut st = 0;
        // SAFETY: waitpid on our own child.
        let r = unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG) };
        if r == self.pid {
            self.status = Some(st);
        }
        self.status.is_some()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // Dropping the release pipe unreleased makes the child exit without running.
        self.release.take();
        if self.status.is_none() {
            let mut st = 0;
            // SAFETY: reap our own child; it runs to completion on its own.
            unsafe { libc::waitpid(self.pid, &mut st, 0) };
        }
    }
}

/// Alive and not a zombie (a zombie's probes can never fire again).
fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the parenthesised comm, which may itself hold ')'.
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Monotonic now, in the clock bpf_ktime_get_ns uses.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One attached site, for output.
struct Attached {
    info: SiteInfo,
    pair: Option<u32>,
}

pub fn run(cfg: &WatchConfig) -> Result<(), WatchError> {
    // 1. Targets: named files, or every object of the -p processes.
    let mut objects: Vec<Object> = Vec::new();
    for t in &cfg.targets {
        objects.push(Object::open(t.display().to_string(), t)?);
    }
    if cfg.targets.is_empty() {
        let mut seen = BTreeSet::new();
        for &pid in &cfg.pids {
            for m in procmaps::mapped_objects(pid)? {
                if !seen.insert((m.dev, m.inode)) {
                    continue;
                }
                // Objects without probes or that are not ELF (fonts, locale archives) are skipped.
                if let Ok(o) = Object::open(m.path.clone(), &m.host_path) {
                    if !o.probes.sites.is_empty() {
                        objects.push(o);
                    }
                }
            }
        }
    } else {
        for &pid in &cfg.pids {
            if !pid_alive(pid) {
                return Err(ProcError::NoSuchProcess { pid }.into());
            }
        }
    }
    let mut err = io::stderr();
    for o in &objects {
        for w in &o.probes.warnings {
            let _ = writeln!(err, "warning: {}: {w}", o.shown);
        }
    }
    if objects.iter().all(|o| o.probes.sites.is_empty()) {
        let what = if cfg.targets.is_empty() {
            format!(
                "process {}",
                cfg.pids
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            objects
                .iter()
                .map(|o| o.shown.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(WatchError::NoProbes(what));
    }

    // 2. Sites that match the patterns.
    let matches = |p: &str, n: &str| {
        cfg.patterns.is_empty() || cfg.patterns.iter().any(|pat| pat.matches(p, n))
    };
    let mut chosen: Vec<(usize, usize)> = Vec::new();
    for (oi, o) in objects.iter().enumerate() {
        for (si, s) in o.probes.sites.iter().enumerate() {
            if matches(&s.provider, &s.name) {
                chosen.push((oi, si));
            }
        }
    }
    if chosen.is_empty() {
        return Err(WatchError::NoMatch {
            patterns: cfg
                .patterns
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            targets: objects
                .iter()
                .map(|o| o.shown.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }

    // 3. Roles: which probes open and close spans.
    let names: Vec<ProbeName> = chosen
        .iter()
        .map(|&(oi, si)| {
            let s = &objects[oi].probes.sites[si];
            ProbeName {
                provider: s.provider.clone(),
                name: s.name.clone(),
            }
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let id_spans: Vec<(String, String)> = objects
        .iter()
        .flat_map(|o| o.probes.id_spans.iter().cloned())
        .collect();
    let plan = spans::plan(&names, &cfg.spans, &id_spans, cfg.auto_span)?;

    // 4. One spec per site; the index is the cookie.
    let mut specs = Vec::with_capacity(chosen.len());
    let mut attached = Vec::with_capacity(chosen.len());
    for &(oi, si) in &chosen {
        let s = &objects[oi].probes.sites[si];
        let role = plan.role(&s.provider, &s.name);
        let pair = match role {
            Role::Start(id) | Role::End(id) => Some(id),
            Role::Event => None,
        };
        let by_id = pair.is_some_and(|id| plan.pairs[id as usize].by_id);
        let str_arg = cfg
            .strs
            .iter()
            .find(|r| r.probe.matches(&s.provider, &s.name))
            .map(|r| r.index);
        let spec = spans::site_spec(&s.args, s.pc, role, by_id, str_arg);
        let info = SiteInfo {
            provider: s.provider.clone(),
            name: s.name.clone(),
            args: s
                .args
                .iter()
                .map(|a| {
                    if !a.readable() {
                        ArgFmt::Unreadable
                    } else if a.signed {
                        ArgFmt::Signed
                    } else {
                        ArgFmt::Unsigned
                    }
                })
                .collect(),
            str_arg: (spec.str_arg as usize != usdt_trace_common::STR_NONE as usize)
                .then_some(spec.str_arg as usize),
        };
        specs.push(spec);
        attached.push(Attached { info, pair });
    }
    let pairs: Vec<PairInfo> = plan
        .pairs
        .iter()
        .map(|p| PairInfo {
            provider: p.provider.clone(),
            stem: p.stem.clone(),
            start: p.start.clone(),
            end: p.end.clone(),
        })
        .collect();

    // 5. Load, then attach every site (per process with -p / -c).
    let mut child = match &cfg.command {
        Some(argv) => Some(Child::spawn(argv)?),
        None => None,
    };
    let mut pids: Vec<u32> = cfg.pids.clone();
    if let Some(c) = &child {
        pids.push(c.pid as u32);
    }
    let mut tracer = Tracer::load(&LoadOptions {
        specs: &specs,
        ring_bytes: cfg.ring_bytes,
        pids: &pids,
        hist: cfg.hist,
        sched: cfg.sched,
        attach: cfg.attach,
    })?;
    let pid_targets: Vec<Option<u32>> = if pids.is_empty() {
        vec![None]
    } else {
        pids.iter().map(|&p| Some(p)).collect()
    };
    // Group the chosen sites by object: one attachment per object (and process).
    let mut by_object: Vec<Vec<AttachPoint>> = vec![Vec::new(); objects.len()];
    for (cookie, &(oi, si)) in chosen.iter().enumerate() {
        let s = &objects[oi].probes.sites[si];
        by_object[oi].push(AttachPoint {
            offset: s.file_offset,
            ref_ctr: s.semaphore_offset,
            cookie: cookie as u32,
        });
    }
    let mut used_objects = 0;
    for (oi, sites) in by_object.iter().enumerate() {
        if sites.is_empty() {
            continue;
        }
        used_objects += 1;
        let o = &objects[oi];
        let path = fd_path(&o.file);
        let path = path.to_string_lossy();
        for &pid in &pid_targets {
            tracer
                .attach_object(&path, sites, pid)
                .map_err(|e| match e {
                    // Name the file the user knows, not /proc/self/fd/N.
                    TraceError::Attach { point, msg, .. } => {
                        let probe = point
                            .and_then(|p| chosen.get(p.cookie as usize))
                            .map(|&(_, si)| &o.probes.sites[si])
                            .map(|s| format!(" ({}:{})", s.provider, s.name))
                            .unwrap_or_default();
                        TraceError::Attach {
                            path: format!("{}{probe}", o.shown),
                            point,
                            msg,
                        }
                    }
                    e => e,
                })?;
        }
    }
    let nobj = used_objects;
    // Before the readiness line: a script may send SIGINT the moment it sees it.
    install_signal_handlers();
    eprintln!(
        "Attached {} probe site{} in {} object{}{}; Ctrl-C to stop",
        chosen.len(),
        if chosen.len() == 1 { "" } else { "s" },
        nobj,
        if nobj == 1 { "" } else { "s" },
        if pairs.is_empty() {
            String::new()
        } else {
            format!(
                " ({} span name{})",
                pairs.len(),
                if pairs.len() == 1 { "" } else { "s" }
            )
        }
    );
    if let Some(c) = child.as_mut() {
        c.release()?;
    }

    // 6. Read until told to stop.
    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let t0 = monotonic_ns();
    let started = Instant::now();
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    if !cfg.json && !cfg.hist {
        out.write_all(output::text_header().as_bytes())?;
        out.flush()?;
    }
    let mut bad_records = 0u64;
    let mut handle = |rec: &[u8], buf: &mut Vec<u8>| match output::decode(rec) {
        Some(Record::Event(r)) => {
            let Some(a) = attached.get(r.hdr.site as usize) else {
                bad_records += 1;
                return;
            };
            if cfg.json {
                output::event_json(buf, &a.info, r);
            } else {
                buf.extend_from_slice(output::event_text(&a.info, r, t0).as_bytes());
            }
        }
        Some(Record::Span(r)) => {
            let (Some(end), Some(start)) = (
                attached.get(r.hdr.site as usize),
                attached.get(r.start_site as usize),
            ) else {
                bad_records += 1;
                return;
            };
            let Some(pair) = end.pair.and_then(|p| pairs.get(p as usize)) else {
                bad_records += 1;
                return;
            };
            if cfg.json {
                output::span_json(buf, pair, &start.info, &end.info, r);
            } else {
                buf.extend_from_slice(
                    output::span_text(pair, &start.info, &end.info, r, t0).as_bytes(),
                );
            }
        }
        None => bad_records += 1,
    };
    let mut last_hist = Instant::now();
    loop {
        let stop_now = STOP.load(Ordering::Relaxed)
            || cfg.duration.is_some_and(|d| started.elapsed() >= d)
            || child.as_mut().is_some_and(|c| c.exited())
            || (cfg.command.is_none()
                && !cfg.pids.is_empty()
                && cfg.pids.iter().all(|&p| !pid_alive(p)));
        if stop_now {
            break;
        }
        tracer.poll(Duration::from_millis(50), |rec| handle(rec, &mut buf))?;
        if !buf.is_empty() {
            out.write_all(&buf)?;
            out.flush()?;
            buf.clear();
        }
        if let Some(iv) = cfg.interval {
            if last_hist.elapsed() >= iv {
                last_hist = Instant::now();
                print_hists(&mut out, &tracer, &pairs, cfg.json)?;
            }
        }
    }

    // 7. Detach first (semaphores drop), then take what is left in the ring.
    let detach = tracer.detach_all();
    while tracer.poll(Duration::from_millis(0), |rec| handle(rec, &mut buf))? > 0 {}
    out.write_all(&buf)?;
    buf.clear();
    if cfg.hist {
        print_hists(&mut out, &tracer, &pairs, cfg.json)?;
    }
    let c = tracer.counters()?;
    let open = tracer.open_spans().unwrap_or(0);
    let summary = Summary {
        events: c.events,
        spans: c.spans,
        lost: c.lost + bad_records,
        unmatched: c.unmatched_start + open,
        unmatched_end: c.unmatched_end,
        duration_ns: monotonic_ns().saturating_sub(t0),
    };
    if cfg.json {
        output::summary_json(&mut buf, &summary);
        out.write_all(&buf)?;
    } else {
        out.write_all(output::summary_text(&summary).as_bytes())?;
    }
    out.flush()?;
    if summary.lost > 0 {
        eprintln!(
            "warning: {} records were lost (ring buffer full); try a larger --ring-kib",
            summary.lost
        );
    }
    if let crate::tracer::Detach::Background { sites, pid } = detach {
        eprintln!(
            "Detaching {sites} probe sites in the background (helper PID {pid}): the kernel takes about 0.1 s per site"
        );
    }
    drop(child);
    Ok(())
}

fn print_hists(
    out: &mut impl Write,
    tracer: &Tracer,
    pairs: &[PairInfo],
    json: bool,
) -> Result<(), WatchError> {
    let hists = tracer.hists(pairs.len())?;
    let mut buf = Vec::new();
    for (p, h) in pairs.iter().zip(hists.iter()) {
        // Span names that never closed a span have nothing to draw.
        if h[0].count == 0 {
            continue;
        }
        if json {
            hist::render_json(&mut buf, p, h);
        } else {
            buf.extend_from_slice(hist::render_text(p, h).as_bytes());
            buf.push(b'\n');
        }
    }
    out.write_all(&buf)?;
    out.flush()?;
    Ok(())
}
