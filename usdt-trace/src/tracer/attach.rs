//! Attaching and detaching: one uprobe_multi link per object (chunked at the kernel's cap),
//! or a perf_event uprobe and a BPF link per site, bounded by the file descriptors there are;
//! errors that name the site and say why.

use super::*;

impl Tracer {
    /// The program as loaded by aya for perf-event links (loaded on first use).
    pub(super) fn perf_prog(&mut self) -> Result<i32, TraceError> {
        if let Some(fd) = self.prog_fd {
            return Ok(fd);
        }
        let prog: &mut UProbe = self
            .ebpf
            .program_mut(self.site_prog)
            .ok_or(TraceError::MissingProgram("usdt_site"))?
            .try_into()
            .map_err(|e: ProgramError| TraceError::Load(e.to_string()))?;
        prog.load().map_err(|e| {
            if sys::is_permission_error(&format!("{e:#}")) && !sys::is_root() {
                TraceError::Permission
            } else {
                TraceError::Load(error_chain(&e))
            }
        })?;
        let fd = prog
            .fd()
            .map_err(|e| TraceError::Load(e.to_string()))?
            .as_fd()
            .as_raw_fd();
        self.prog_fd = Some(fd);
        Ok(fd)
    }

    /// Adds the specs of sites planned after load, from cookie `first` on, with their
    /// `--filter` masks; they must fit the room reserved at load (`spare_sites`).
    pub fn add_sites(
        &mut self,
        first: u32,
        specs: &[SiteSpec],
        masks: Option<&[u32]>,
    ) -> Result<(), TraceError> {
        let end = first as u64 + specs.len() as u64;
        if end > self.site_capacity as u64 {
            return Err(TraceError::SitesFull {
                n: specs.len(),
                room: self.site_capacity,
            });
        }
        let mut sites: Array<_, SiteSpec> = Array::try_from(
            self.ebpf
                .map_mut(maps::SITES)
                .ok_or(TraceError::MissingMap(maps::SITES))?,
        )
        .map_err(map_err(maps::SITES))?;
        for (i, s) in specs.iter().enumerate() {
            sites
                .set(first + i as u32, *s, 0)
                .map_err(map_err(maps::SITES))?;
        }
        if let Some(masks) = masks {
            let mut f: Array<_, u32> = Array::try_from(
                self.ebpf
                    .map_mut(maps::FILTER_SITES)
                    .ok_or(TraceError::MissingMap(maps::FILTER_SITES))?,
            )
            .map_err(map_err(maps::FILTER_SITES))?;
            for (i, m) in masks.iter().enumerate().filter(|(_, m)| **m != 0) {
                f.set(first + i as u32, *m, 0)
                    .map_err(map_err(maps::FILTER_SITES))?;
            }
        }
        Ok(())
    }

    /// Attach the program at every site of one object. `path` must name the very file that
    /// was parsed (`/proc/self/fd/N`). `pid` limits the uprobes to one process; None traces
    /// every process that maps the file, now or later. One uprobe_multi link, or a perf event
    /// per site, as chosen at load.
    pub fn attach_object(
        &mut self,
        path: &str,
        points: &[AttachPoint],
        pid: Option<u32>,
    ) -> Result<(), TraceError> {
        if points.is_empty() {
            return Ok(());
        }
        let owner: Rc<str> = Rc::from(path);
        match self.path {
            AttachPath::Multi => {
                let prog = self
                    .multi_prog
                    .as_ref()
                    .ok_or(TraceError::MissingProgram("usdt_site"))?;
                // Return probes need a link of their own (the flag is per link); several links
                // when one object has more sites than a link takes.
                let (rets, plain): (Vec<AttachPoint>, Vec<AttachPoint>) =
                    points.iter().partition(|p| p.ret);
                for chunk in multi_chunks(&plain).chain(multi_chunks(&rets)) {
                    let ret = chunk[0].ret;
                    let triples: Vec<(u64, u64, u64)> = chunk
                        .iter()
                        .map(|p| (p.offset, p.ref_ctr.unwrap_or(0), p.cookie as u64))
                        .collect();
                    let link =
                        multi::attach(prog.as_raw_fd(), path, &triples, pid.unwrap_or(0), ret)
                            .map_err(|e| TraceError::Attach {
                                path: path.to_string(),
                                point: (chunk.len() == 1).then(|| chunk[0]),
                                msg: multi_error(&e, chunk),
                            })?;
                    self.multi_links.push(link);
                    self.multi_paths.push((owner.clone(), chunk.len()));
                    self.sites += chunk.len();
                }
            }
            AttachPath::Perf => {
                // The same sites attached for several processes add up.
                check_perf_sites(self.sites + points.len())?;
                for p in points {
                    self.attach_site(path, *p, pid)?;
                    self.fd_paths.push(owner.clone());
                    self.fd_paths.push(owner.clone());
                }
            }
        }
        Ok(())
    }

    /// Attach the program at one site through a perf event. `path` must name the very file
    /// that was parsed (use `/proc/self/fd/N` of the descriptor it was read from). `pid`
    /// limits the uprobe to one process; None traces every process that maps the file, now
    /// or later.
    pub(super) fn attach_site(
        &mut self,
        path: &str,
        point: AttachPoint,
        pid: Option<u32>,
    ) -> Result<(), TraceError> {
        let err = |msg: String| TraceError::Attach {
            path: path.to_string(),
            point: Some(point),
            msg,
        };
        let pmu = self
            .uprobe_type
            .ok_or_else(|| err("the uprobe PMU is missing".into()))?;
        let shift =
            match (point.ref_ctr, self.ref_ctr_shift) {
                (Some(_), None) => return Err(err(
                    "this kernel's uprobe PMU has no ref_ctr_offset: it cannot raise the semaphore"
                        .into(),
                )),
                (_, shift) => shift.unwrap_or(0),
            };
        let pfd = sys::open_uprobe(
            pmu,
            shift,
            path,
            point.offset,
            point.ref_ctr,
            pid,
            point.ret,
        )
        .map_err(|e| {
            err(match e.raw_os_error() {
                Some(libc::EINVAL) => format!(
                    "{e} (another tracer may hold this site with a different semaphore setting)"
                ),
                Some(libc::ESRCH) => "no such process".to_string(),
                _ => e.to_string(),
            })
        })?;
        let prog_fd = self.perf_prog()?;
        let link = sys::link_perf_event(prog_fd, pfd.as_raw_fd(), point.cookie as u64)
            .map_err(|e| err(format!("BPF_LINK_CREATE: {e}")))?;
        self.fds.push(pfd);
        self.fds.push(link);
        self.sites += 1;
        Ok(())
    }

    /// Stop recording (hits during the detach are ignored), then detach every uprobe; the
    /// semaphores drop back to 0.
    ///
    /// The kernel unregisters each perf-event uprobe under a global mutex and waits for an
    /// RCU-tasks grace period while holding it (~0.1 s each here), so 500 sites take close to a
    /// minute to detach however many threads close them. Up to [`INLINE_DETACH`] sites are
    /// detached here; beyond that a forked helper process holds the last references and
    /// detaches them in the background, so `watch` exits at once. Either way nothing is
    /// recorded after this call.
    pub fn detach_all(&mut self) -> Detach {
        if let Some(Ok(mut cfg)) = self
            .ebpf
            .map_mut(maps::CONFIG)
            .map(Array::<_, Config>::try_from)
        {
            if let Ok(mut c) = cfg.get(&0, 0) {
                c.flags |= CFG_STOPPED;
                let _ = cfg.set(0, c, 0);
            }
        }
        // A uprobe_multi link detaches all its sites behind one grace period.
        self.multi_links.clear();
        self.multi_paths.clear();
        self.fd_paths.clear();
        self.owner_names.clear();
        let fds = std::mem::take(&mut self.fds);
        let sites = std::mem::take(&mut self.sites);
        Self::drop_links(fds, sites)
    }

    /// `--perfetto-max-waits` reached: from now on the scheduler hooks count off-CPU intervals
    /// (`CNT_WAITS_CAPPED`) instead of sending them.
    pub fn cap_waits(&mut self) -> Result<(), TraceError> {
        let mut cfg: Array<_, Config> = Array::try_from(
            self.ebpf
                .map_mut(maps::CONFIG)
                .ok_or(TraceError::MissingMap(maps::CONFIG))?,
        )
        .map_err(map_err(maps::CONFIG))?;
        let mut c = cfg.get(&0, 0).map_err(map_err(maps::CONFIG))?;
        c.flags |= CFG_WAITS_CAPPED;
        cfg.set(0, c, 0).map_err(map_err(maps::CONFIG))
    }

    /// Detaches every site attached through `path` (one object, for every process), and only
    /// those; the rest keep recording. As [`Tracer::detach_all`], many perf-event sites are
    /// handed to a helper process so that the caller does not wait.
    pub fn detach_object(&mut self, path: &str) -> Detach {
        let mut sites = 0;
        let links = std::mem::take(&mut self.multi_links);
        for (link, (p, n)) in links.into_iter().zip(std::mem::take(&mut self.multi_paths)) {
            if &*p == path {
                // A uprobe_multi link detaches all its sites behind one grace period.
                drop(link);
                sites += n;
            } else {
                self.multi_links.push(link);
                self.multi_paths.push((p, n));
            }
        }
        let mut gone = Vec::new();
        let fds = std::mem::take(&mut self.fds);
        for (fd, p) in fds.into_iter().zip(std::mem::take(&mut self.fd_paths)) {
            if &*p == path {
                gone.push(fd);
            } else {
                self.fds.push(fd);
                self.fd_paths.push(p);
            }
        }
        sites += gone.len() / 2;
        self.sites = self.sites.saturating_sub(sites);
        self.owner_names.remove(path);
        Self::drop_links(gone, sites)
    }

    /// Closes perf-event attachments `fds` (`sites` sites in all): here when few, else in a
    /// helper process (see [`Tracer::detach_all`]).
    pub(super) fn drop_links(fds: Vec<OwnedFd>, sites: usize) -> Detach {
        if fds.len() / 2 <= INLINE_DETACH {
            drop(fds);
            return Detach::Done(sites);
        }
        match sys::hand_off_to_reaper(fds) {
            Ok(pid) => Detach::Background { sites, pid },
            Err(_) => Detach::Done(sites),
        }
    }
}

/// The points of one object split into uprobe_multi links the kernel accepts.
pub(super) fn multi_chunks(points: &[AttachPoint]) -> std::slice::Chunks<'_, AttachPoint> {
    points.chunks(MULTI_LINK_MAX_SITES)
}

/// Refuses more sites than the perf-event path can attach and detach in reasonable time.
pub(super) fn check_perf_sites(sites: usize) -> Result<(), TraceError> {
    if sites > PERF_MAX_SITES {
        return Err(TraceError::TooManyPerfSites {
            sites,
            max: PERF_MAX_SITES,
        });
    }
    Ok(())
}

/// Descriptors `watch` holds besides the perf path's two per site (maps, programs, links of
/// the scheduler hooks, the ring buffer, stdio, the objects being read).
pub(super) const FD_RESERVE: u64 = 256;

/// The perf path holds a perf event and a link per site: refuse up front, with the numbers,
/// when the open-file limit cannot hold them, instead of failing with EMFILE half-way through
/// attaching.
pub(super) fn check_perf_fds(sites: usize, nofile: u64) -> Result<(), TraceError> {
    let needed = 2 * sites as u64 + FD_RESERVE;
    if needed > nofile {
        return Err(TraceError::PerfFds {
            sites,
            needed,
            limit: nofile,
        });
    }
    Ok(())
}

/// Why a uprobe_multi link failed. The kernel does not say which site, so hint at the mode
/// that does.
pub(super) fn multi_error(e: &std::io::Error, points: &[AttachPoint]) -> String {
    match e.raw_os_error() {
        Some(libc::ESRCH) => "no such process".to_string(),
        // Also without a semaphore: a site attached without one (counted by hand,
        // `semaphores::hand_over`) is refused while another tracer holds it with one.
        Some(libc::EINVAL) if points.len() > 1 => {
            format!(
                "uprobe_multi link for {} sites: {e} (another tracer may hold one of them with a \
                 different semaphore setting, or hold it no more but leaked it: see the kernel \
                 log for \"leaking uprobe\", which lasts until reboot; attach mode perf names \
                 the site)",
                points.len()
            )
        }
        Some(libc::EINVAL) if points.len() == 1 => {
            format!("{e} (another tracer may hold this site with a different semaphore setting)")
        }
        _ if points.len() > 1 => format!("uprobe_multi link for {} sites: {e}", points.len()),
        _ => e.to_string(),
    }
}

pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    // The verifier log can be megabytes on one line; its end is where the reason is.
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    const KEEP: usize = 600;
    if s.len() > KEEP {
        let cut = s.len() - KEEP;
        let cut = (cut..s.len())
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(cut);
        format!("... {}", &s[cut..])
    } else {
        s
    }
}
