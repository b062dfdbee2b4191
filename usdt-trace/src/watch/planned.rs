//! The plan stage of a run: the chosen sites of the opened objects, and what is derived from
//! the plan before anything is loaded: the `--by` key plan, the `--filter` masks per site, and
//! the files watched for in-place writes.

use super::{WatchConfig, WatchError};
use crate::plan::{self, Plan};
use crate::target::Object;
use crate::util::terminal::clean;

/// What the plan stage hands to the tracer and the reader.
pub(super) struct Planned {
    pub plan: Plan,
    pub key_plan: Option<crate::output::agg::KeyPlan>,
    pub filter_masks: Option<Vec<u32>>,
    pub watched: crate::watch::changes::ChangeWatch,
}

/// Plans the run over `objects`: an error when nothing (or a pattern) matches, unless
/// `--wait-for-probes` lets probes come later.
pub(super) fn plan_run(cfg: &WatchConfig, objects: &[Object]) -> Result<Planned, WatchError> {
    let named: Vec<(&str, &crate::elf::ObjectProbes)> = objects
        .iter()
        .map(|o| (o.shown.as_str(), &o.probes))
        .collect();
    // What a probe hit costs here, measured once before the first plan: spans count the hits
    // inside them at these costs (only with the time split, which carries the counts). A
    // failure leaves the spans without an estimate, never with a made-up one.
    if cfg.sched {
        let _ = crate::tracer::calibrate::measure_once();
    }
    let plan = plan::plan_or_wait(
        plan::build(&named, &cfg.plan_options()),
        cfg.waits() && crate::plan::functions::fn_patterns(&cfg.patterns).is_empty(),
        cfg.patterns.is_empty(),
        &cfg.pids,
    )?;
    // Each pattern must find something (one that finds nothing at all failed above); with
    // --wait-for-probes the rest may come later.
    if !plan.sites.is_empty() {
        if let Err(e) = plan::check_every_pattern(&named, &cfg.patterns) {
            if !cfg.waits() {
                return Err(e.into());
            }
            eprintln!(
                "warning: {}: waiting for probes defined or loaded later",
                clean(&e.to_string())
            );
        }
    }
    if cfg.patterns.is_empty() && !cfg.agg.count {
        if let Some(w) =
            crate::output::agg::high_rate_warning(&crate::output::agg::high_rate_probes(&plan))
        {
            eprintln!("{}", clean(&w));
        }
    }
    let key_plan = cfg
        .agg
        .by
        .as_ref()
        .map(|b| crate::output::agg::KeyPlan::new(&plan, b, cfg.agg.count))
        .transpose()?;
    // The files as parsed: taken before attach, so a change made the moment the readiness line
    // appears is still a change.
    let mut watched = crate::watch::changes::ChangeWatch::new();
    for op in &plan.objects {
        watched.add(&objects[op.object]);
    }
    let filter_masks = cfg
        .filter
        .as_ref()
        .map(|f| plan::masks_or_wait(plan::filter_masks(&plan, f), cfg.waits(), &plan, f))
        .transpose()?;
    Ok(Planned {
        plan,
        key_plan,
        filter_masks,
        watched,
    })
}
