//! Probes that fire per line, call or allocation: selected by default, they flood the
//! output, so `watch` warns and points at `--count`.

use crate::plan::Plan;

/// Names of probes that fire per line, per call or per allocation in the runtimes that have
/// them (CPython: `line`, `function__entry/return`; HotSpot: `method__entry/return`,
/// `object__alloc`; Ruby, PHP, Node: `method__entry/return`, `cmethod__*`, `function__*`,
/// `object__create`). Tracing them by default is what makes a run slow: they are semaphore
/// guarded, and the semaphore turns on code the runtime otherwise skips.
pub const HIGH_RATE: &[&str] = &[
    "line",
    "function__entry",
    "function__return",
    "method__entry",
    "method__return",
    "cmethod__entry",
    "cmethod__return",
    "object__alloc",
    "object__create",
    "object__free",
];

/// The high-rate probes (by `provider:name`, sorted, once each) among the planned sites.
pub fn high_rate_probes(plan: &Plan) -> Vec<String> {
    let mut v: Vec<String> = plan
        .sites
        .iter()
        .filter(|s| HIGH_RATE.contains(&s.name.as_str()))
        .map(|s| format!("{}:{}", s.provider, s.name))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The stderr warning for a default selection that includes high-rate probes.
pub fn high_rate_warning(probes: &[String]) -> Option<String> {
    if probes.is_empty() {
        return None;
    }
    Some(format!(
        "warning: tracing every probe includes {} high-rate probe{} ({}): each hit costs a trap and turns on the runtime's instrumentation; run with --count first to see which probes fire, then name the ones you want",
        probes.len(),
        if probes.len() == 1 { "" } else { "s" },
        probes.join(", ")
    ))
}
