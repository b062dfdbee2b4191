//! The kernel's side of a plan: each site's `SiteSpec`, the `--filter` masks per site, and
//! what a run with `--wait-for-probes` does when nothing matches yet.

use super::*;

/// The fixed-size spec the eBPF program reads for one site.
pub fn site_spec(
    args: &[ArgSpec],
    pc: u64,
    role: Role,
    key: Option<u8>,
    strs: &[StrCapture],
) -> SiteSpec {
    let mut spec = SiteSpec {
        pair_id: 0,
        role: SiteRole::EVENT,
        id_arg: ID_NONE,
        nargs: args.len().min(MAX_ARGS) as u8,
        nstrs: 0,
        end_sp: usdt_trace_common::END_SP_ANY,
        flags: 0,
        _pad: [0; 2],
        probe_ns: 0,
        args: [ArgDesc {
            kind: ArgKind::NONE,
            ..Default::default()
        }; MAX_ARGS],
        strs: [StrDesc::NONE; MAX_STRS],
    };
    match role {
        Role::Event => {}
        Role::Start(id) => {
            spec.role = SiteRole::START;
            spec.pair_id = id;
        }
        Role::End(id) => {
            spec.role = SiteRole::END;
            spec.pair_id = id;
        }
    }
    if let Some(k) = key.filter(|&k| args.get(k as usize).is_some_and(|a| a.readable())) {
        if !matches!(role, Role::Event) {
            spec.id_arg = k;
        }
    }
    // Slots are given once every site's role is known (`assign_str_slots`); beyond
    // MAX_STRS that step reports the error, so the extra ones are simply not kept here.
    let ok = |i: usize| i < args.len() && args[i].readable();
    let keep = strs
        .iter()
        .filter(|c| ok(c.arg) && args[c.arg].size == 8 && c.len_arg.is_none_or(ok));
    for (d, c) in spec.strs.iter_mut().zip(keep) {
        *d = StrDesc {
            arg: c.arg as u8,
            len_arg: c.len_arg.map_or(STR_NONE, |l| l as u8),
            slot: 0,
            _pad: 0,
        };
        spec.nstrs += 1;
    }
    for (d, a) in spec.args.iter_mut().zip(args) {
        *d = crate::elf::argspec::lower::arg_desc(a, pc);
    }
    spec
}

/// Per site (cookie), the `--filter` terms that name its probe (`Filter::site_mask`): events
/// by their own name, span starts by theirs or their span's. Ends get none: a span's arguments
/// are its start's, and end arguments are not filtered. A term naming none of these is an error.
pub fn filter_masks(
    plan: &Plan,
    filter: &crate::plan::filter::Filter,
) -> Result<Vec<u32>, crate::plan::filter::FilterError> {
    let masks = masks_from(plan, 0, filter);
    filter.check_probes(&masks)?;
    filter.check_arg_counts(
        plan.sites
            .iter()
            .zip(&masks)
            .map(|(s, &m)| (s.provider.as_str(), s.name.as_str(), s.args.len(), m)),
    )?;
    Ok(masks)
}

/// The `--filter` masks of the sites from cookie `first` on, unchecked: what
/// [`filter_masks`] checks at start, and what sites planned late get (a term may name a probe
/// that is yet to come).
pub fn masks_from(plan: &Plan, first: usize, f: &crate::plan::filter::Filter) -> Vec<u32> {
    plan.sites[first..]
        .iter()
        .zip(&plan.specs[first..])
        .map(|(s, spec)| match (spec.role, s.pair) {
            (SiteRole::EVENT, _) => f.site_mask(&s.provider, &s.name, None),
            (SiteRole::START, Some(p)) => {
                let stem = plan.pairs.get(p as usize).map(|p| p.stem.as_str());
                f.site_mask(&s.provider, &s.name, stem)
            }
            _ => 0,
        })
        .collect()
}

/// With `--wait-for-probes` (`waiting`): a plan that matches nothing yet is an empty plan,
/// and a warning says what is waited for. `pids` name the processes when no object had probes.
pub fn plan_or_wait(
    built: Result<Plan, PlanError>,
    waiting: bool,
    no_patterns: bool,
    pids: &[u32],
) -> Result<Plan, PlanError> {
    match built {
        Err(PlanError::NoMatch {
            targets, patterns, ..
        }) if waiting => {
            let what = if !no_patterns {
                format!("no probe matches {patterns} in {targets}")
            } else if targets.is_empty() {
                let p: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
                format!("no USDT probes in process {}", p.join(", "))
            } else {
                format!("no USDT probes in {targets}")
            };
            eprintln!(
                "warning: {}: waiting for probes defined or loaded later",
                crate::util::terminal::clean(&what)
            );
            Ok(Plan::default())
        }
        r => r,
    }
}

/// With `--wait-for-probes`: a `--filter` term naming a probe no object has yet is a warning
/// (the process may define it later), and the masks are computed without that check.
pub fn masks_or_wait(
    checked: Result<Vec<u32>, crate::plan::filter::FilterError>,
    waiting: bool,
    plan: &Plan,
    f: &crate::plan::filter::Filter,
) -> Result<Vec<u32>, crate::plan::filter::FilterError> {
    match checked {
        Err(e @ crate::plan::filter::FilterError::NoProbe { .. }) if waiting => {
            eprintln!(
                "warning: {} (yet)",
                crate::util::terminal::clean(&e.to_string())
            );
            Ok(masks_from(plan, 0, f))
        }
        r => r,
    }
}
