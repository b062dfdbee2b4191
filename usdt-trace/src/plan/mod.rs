//! The plan: which sites `watch` attaches to, and what each one means, decided once.
//!
//! From the parsed objects and the user's patterns and rules, [`build`] derives in one pass,
//! for every chosen site (its index is the BPF cookie of the uprobe attached there):
//! - the [`SiteSpec`] the eBPF program reads: role, span name (pair id), how to read each
//!   argument, which argument carries a span id, which one is a string;
//! - the [`SiteInfo`] the printers need for a record from that site: names, how to show each
//!   argument, the string argument — from the same facts, so the two can never disagree;
//! - per object, the [`AttachPoint`]s (file offset, semaphore offset, cookie) the tracer
//!   attaches.
//!
//! Records come back carrying cookies; [`Plan::resolve`] turns one into a [`View`] for the
//! sinks. Pure: no I/O, unit-tested without root.

pub mod filter;
pub(crate) mod functions;
pub mod record;
mod specs;
mod strings;
pub use specs::*;
#[allow(unused_imports)]
use strings::*;
pub(crate) mod spans;
pub(crate) mod suggest;
pub mod view;

use crate::elf::argspec::ArgSpec;
use crate::elf::{ObjectProbes, SiteInsn, SiteKind};
use crate::plan::spans::{ProbeName, ProbeRef, Role, SpanError, SpanRule, StrRule};
use crate::util::pattern::Pattern;
use record::Record;
use std::collections::BTreeSet;
use usdt_trace_common::{
    ArgDesc, ArgKind, SiteRole, SiteSpec, StrDesc, ID_NONE, MAX_ARGS, MAX_STRS, STR_NONE,
};
use view::{ArgFmt, PairInfo, SiteInfo, StrArg, View};

/// Where one uprobe goes in one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachPoint {
    /// File offset of the probed instruction.
    pub offset: u64,
    /// File offset of the semaphore the kernel raises while attached, if the probe has one.
    pub ref_ctr: Option<u64>,
    /// Index into the spec table, handed to the program as the BPF cookie.
    pub cookie: u32,
    /// A return probe (uretprobe): fires when the function at `offset` returns.
    pub ret: bool,
}

/// The attach points that fall in one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectPlan {
    /// Index of the object in the slice given to [`build`].
    pub object: usize,
    pub points: Vec<AttachPoint>,
}

/// What the user asked for, validated.
#[derive(Clone, Copy, Debug)]
pub struct PlanOptions<'a> {
    /// Sites matching any pattern are traced; none means all.
    pub patterns: &'a [Pattern],
    pub spans: &'a [SpanRule],
    pub strs: &'a [StrRule],
    /// `--args`: names for the arguments of the probes they match.
    pub names: &'a [ArgNames],
    /// Pair probes by naming convention (`X__start`/`X__end`, ...).
    pub auto_span: bool,
    /// The running kernel turns a uprobe on a 5-byte nop into a call
    /// (`tracer::Features::uprobe_optimize`): attach `nop; nop5` sites on their nop5.
    pub optimize: bool,
    /// What a hit costs on this kernel, measured by the tracer (`tracer::calibrate`); None
    /// when not measured: the sites then carry no estimate rather than a made-up one.
    pub costs: Option<ProbeCosts>,
}

/// Per-hit costs in ns, as the tracer measured them on this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeCosts {
    /// A trap on an instruction the kernel emulates (`nop`, `push %reg`, a relative branch).
    pub emulated_ns: u32,
    /// A trap on an instruction the kernel single-steps out of line.
    pub single_step_ns: u32,
    /// What a return probe adds to a call (its share at the entry and its trampoline).
    pub return_probe_ns: u32,
}

impl ProbeCosts {
    /// What one hit of a site costs: by the instruction it is on, or as a return probe.
    pub fn of(&self, insn: SiteInsn, return_probe: bool) -> u32 {
        if return_probe {
            return self.return_probe_ns;
        }
        match insn {
            SiteInsn::Nop | SiteInsn::NopNop5 | SiteInsn::Branch => self.emulated_ns,
            SiteInsn::Push if crate::util::kallsyms::push_emulated() => self.emulated_ns,
            SiteInsn::Nop5 | SiteInsn::Push | SiteInsn::SingleStep | SiteInsn::Unknown => {
                self.single_step_ns
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// `suggest`: `; did you mean P?` naming the closest probe the objects have, or empty.
    #[error("no probe matches {patterns} in {targets}{suggest}")]
    NoMatch {
        patterns: String,
        targets: String,
        suggest: String,
    },
    /// Some patterns matched and these did not: most often a typo that would otherwise go
    /// unnoticed behind the probes the others found.
    #[error("no probe matches {patterns} in {targets} (the other patterns match){suggest}")]
    SomeUnmatched {
        patterns: String,
        targets: String,
        suggest: String,
    },
    #[error(transparent)]
    Span(#[from] SpanError),
    #[error("--str: {what} would capture {n} strings; a record carries at most {max} (start and end strings of a span together)")]
    StrTooMany { what: String, n: usize, max: usize },
    #[error("--args '{0}': expected PROBE=NAME,NAME,..., e.g. request__start=id,parent,req (names are letters, digits and _)")]
    BadArgs(String),
    #[error("--args '{0}': no traced probe matches")]
    ArgsMatchNothing(String),
    #[error("--args '{spec}': {names} names for {probe}, which has {nargs} argument{}", if *nargs == 1 { "" } else { "s" })]
    ArgsTooMany {
        spec: String,
        probe: String,
        names: usize,
        nargs: usize,
    },
}

/// `--args PROBE=NAME,...`: what the arguments of the matching probes are called in the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgNames {
    pub probe: Pattern,
    pub names: Vec<String>,
    /// The rule as given, for error messages.
    pub spec: String,
}

impl ArgNames {
    pub fn parse(s: &str) -> Result<ArgNames, PlanError> {
        let bad = || PlanError::BadArgs(s.to_string());
        let (probe, list) = s.split_once('=').ok_or_else(bad)?;
        if probe.is_empty() {
            return Err(bad());
        }
        let names: Vec<String> = list.split(',').map(|n| n.trim().to_string()).collect();
        // Names become JSON keys and `jq` paths: keep them plain identifiers.
        let ident = |n: &str| {
            n.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if names.is_empty() || names.len() > MAX_ARGS || !names.iter().all(|n| ident(n)) {
            return Err(bad());
        }
        Ok(ArgNames {
            probe: Pattern::parse(probe).map_err(|_| bad())?,
            names,
            spec: s.to_string(),
        })
    }
}

/// Everything decided before attaching; indexed by cookie.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// What the kernel gets, one per cookie.
    pub specs: Vec<SiteSpec>,
    /// What the printers get, one per cookie.
    pub sites: Vec<SiteInfo>,
    /// Span names, indexed by pair id.
    pub pairs: Vec<PairInfo>,
    /// Attach points grouped by object, only for objects with chosen sites.
    pub objects: Vec<ObjectPlan>,
    /// Distinct instructions among the attach points that the kernel must single-step
    /// (an order of magnitude more than a `nop`): a function's `ret`s, often its entry.
    pub single_step: usize,
}

/// A [`PlanError::SomeUnmatched`] naming each of `patterns` that selects no site of `objects`
/// (matched as [`build`] matches them), if any does not.
pub fn check_every_pattern(
    objects: &[(&str, &ObjectProbes)],
    patterns: &[Pattern],
) -> Result<(), PlanError> {
    let missing: Vec<&Pattern> = patterns
        .iter()
        .filter(|pat| {
            !objects.iter().any(|(_, o)| {
                o.sites.iter().any(|s| {
                    pat.matches(&s.provider, crate::elf::function_of(s).unwrap_or(&s.name))
                })
            })
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(PlanError::SomeUnmatched {
        suggest: crate::plan::suggest::probe(objects, &missing),
        patterns: missing
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(" "),
        targets: objects
            .iter()
            .map(|(shown, _)| *shown)
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Decides which sites of `objects` (each with the name it is shown by) are traced and how.
pub fn build(objects: &[(&str, &ObjectProbes)], opts: &PlanOptions) -> Result<Plan, PlanError> {
    let name_matches = |p: &str, n: &str| {
        opts.patterns.is_empty() || opts.patterns.iter().any(|pat| pat.matches(p, n))
    };
    // A function site matches by its function's name, so `fn:readline` selects both ends.
    // `fn:readline__entry` (a site's name, as printed) selects the function too.
    let matches = |s: &crate::elf::Site| match crate::elf::function_of(s) {
        Some(f) => {
            opts.patterns.is_empty() || opts.patterns.iter().any(|pat| pat.matches_function(f))
        }
        None => name_matches(&s.provider, &s.name),
    };
    let poll_spans: Vec<(String, String)> = objects
        .iter()
        .flat_map(|(_, o)| o.poll_spans.iter().cloned())
        .collect();
    // A span's poll markers come with it: its split needs them, and users think of the span.
    let chosen_marker = |p: &str, n: &str| {
        poll_marker(&poll_spans, p, n)
            .is_some_and(|(stem, _)| name_matches(p, &format!("{stem}__start")))
    };
    // (object, site) of every chosen site, in object then note order: the cookie order.
    let chosen: Vec<(usize, usize)> = objects
        .iter()
        .enumerate()
        .flat_map(|(oi, (_, o))| {
            o.sites
                .iter()
                .enumerate()
                .filter(|(_, s)| matches(s) || chosen_marker(&s.provider, &s.name))
                .map(move |(si, _)| (oi, si))
        })
        .collect();
    if chosen.is_empty() {
        let join = |v: Vec<String>| v.join(" ");
        return Err(PlanError::NoMatch {
            suggest: crate::plan::suggest::probe(
                objects,
                &opts.patterns.iter().collect::<Vec<_>>(),
            ),
            patterns: join(opts.patterns.iter().map(|p| p.to_string()).collect()),
            targets: objects
                .iter()
                .map(|(shown, _)| *shown)
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let site = |(oi, si): (usize, usize)| &objects[oi].1.sites[si];
    let chosen_sites = chosen.iter().map(|&c| site(c)).collect::<Vec<_>>();
    let str_args = string_args(&chosen_sites, opts.strs)?;
    let mut arg_names = arg_names(&chosen_sites, opts.names)?;
    // Names the probe's own usdt-markers notes declare, where no --args rule named it.
    for (names, &(oi, si)) in arg_names.iter_mut().zip(&chosen) {
        let s = &objects[oi].1.sites[si];
        let declared = objects[oi]
            .1
            .arg_names
            .iter()
            .find(|(p, n, _)| *p == s.provider && *n == s.name);
        if let Some((_, _, d)) = declared {
            if names.is_empty()
                && d.len() <= s.args.len()
                && !opts
                    .names
                    .iter()
                    .any(|r| r.probe.matches(&s.provider, &s.name))
            {
                *names = d.clone();
            }
        }
    }

    // Roles: which probes open and close spans.
    let names: Vec<ProbeName> = chosen
        .iter()
        .map(|&c| ProbeName {
            provider: site(c).provider.clone(),
            name: site(c).name.clone(),
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let id_spans: Vec<(String, String)> = objects
        .iter()
        .flat_map(|(_, o)| o.id_spans.iter().cloned())
        .collect();
    // A function's entry and return pair by the `__entry`/`__return` convention; without
    // auto-pairing they still must, so they get rules of their own.
    let mut rules = opts.spans.to_vec();
    if !opts.auto_span {
        let fn_ref = |name: &str| ProbeRef {
            provider: Some(crate::elf::FN_PROVIDER.to_string()),
            name: name.to_string(),
        };
        let entries: BTreeSet<&str> = chosen
            .iter()
            .map(|&c| site(c))
            .filter(|s| matches!(s.kind, SiteKind::FnEntry | SiteKind::GoEntry))
            .filter_map(crate::elf::function_of)
            .collect();
        for f in entries {
            rules.push(SpanRule {
                start: fn_ref(&format!("{f}{}", crate::elf::ENTRY_SUFFIX)),
                end: fn_ref(&format!("{f}{}", crate::elf::RETURN_SUFFIX)),
                key: None,
            });
        }
    }
    let mut roles = spans::plan(&names, &rules, &id_spans, opts.auto_span)?;
    // A Go function's span is paired by its goroutine frame (its last argument), not by
    // thread: a goroutine that blocks mid-call resumes on whichever thread the scheduler picks.
    for pair in &mut roles.pairs {
        let go_entry = chosen.iter().map(|&c| site(c)).find(|s| {
            s.kind == SiteKind::GoEntry && s.provider == pair.provider && s.name == pair.start
        });
        if let Some(s) = go_entry {
            pair.key = Some((s.args.len() - 1) as u8);
        }
    }

    let mut plan = Plan {
        pairs: roles
            .pairs
            .iter()
            .map(|p| PairInfo {
                provider: p.provider.clone(),
                stem: p.stem.clone(),
                start: p.start.clone(),
                ends: p.ends.clone(),
            })
            .collect(),
        // Sized up front: grown by doubling, the spec table alone peaked at 20 MB of the
        // tracer's heap for 50,000 sites.
        specs: Vec::with_capacity(chosen.len()),
        sites: Vec::with_capacity(chosen.len()),
        ..Plan::default()
    };
    let costs = opts.costs;
    for (cookie, &c) in chosen.iter().enumerate() {
        let s = site(c);
        let role = roles.role(&s.provider, &s.name);
        let pair = match role {
            Role::Start(id) | Role::End(id) => Some(id),
            Role::Event => None,
        };
        let key = pair.and_then(|id| roles.pairs[id as usize].key);
        if let Some(k) = key {
            // An explicit key must be there to read at both ends; the span id that
            // usdt-markers puts first always is.
            let explicit = opts.spans.iter().any(|r| r.key == Some(k));
            let readable = s.args.get(k as usize).is_some_and(|a| a.readable());
            if explicit && !readable {
                return Err(SpanError::KeyArg {
                    key: k,
                    probe: format!("{}:{}", s.provider, s.name),
                    nargs: s.args.len(),
                }
                .into());
            }
        }
        if str_args[cookie].len() > MAX_STRS {
            return Err(PlanError::StrTooMany {
                what: format!("{}:{}", s.provider, s.name),
                n: str_args[cookie].len(),
                max: MAX_STRS,
            });
        }
        let (offset, pc) = attach_at(s, opts.optimize);
        let mut spec = site_spec(&s.args, pc, role, key, &str_args[cookie]);
        spec.end_sp = end_sp(s.kind, objects[c.0].1.arch);
        // What a hit here costs, when measured: the spans it falls inside count it.
        spec.probe_ns = costs.map_or(0, |c| c.of(s.insn, s.kind.is_return_probe()));
        if s.kind.is_go() {
            spec.flags |= usdt_trace_common::SPEC_NO_THREAD_SPLIT;
        }
        if role == Role::Event {
            if let Some(m) = poll_role(&roles, &poll_spans, &s.provider, &s.name, &s.args) {
                (spec.role, spec.pair_id, spec.id_arg) = m;
            }
        }
        plan.specs.push(spec);
        plan.sites.push(SiteInfo {
            provider: s.provider.clone(),
            name: s.name.clone(),
            args: s.args.iter().map(arg_fmt).collect(),
            strs: Vec::new(),
            names: arg_names[cookie].clone(),
            pair,
            goroutine: s.kind.is_go(),
        });
        let point = AttachPoint {
            offset,
            ref_ctr: s.semaphore_offset,
            cookie: cookie as u32,
            ret: s.kind.is_return_probe(),
        };
        match plan.objects.last_mut() {
            Some(o) if o.object == c.0 => o.points.push(point),
            _ => plan.objects.push(ObjectPlan {
                object: c.0,
                points: vec![point],
            }),
        }
    }
    plan.single_step = chosen
        .iter()
        .map(|&c| (c.0, site(c)))
        .filter(|(_, s)| {
            s.insn == SiteInsn::SingleStep
                || (s.insn == SiteInsn::Push && !crate::util::kallsyms::push_emulated())
        })
        .map(|(o, s)| (o, s.file_offset))
        .collect::<BTreeSet<_>>()
        .len();
    assign_str_slots(&mut plan)?;
    Ok(plan)
}

/// Which start a function's end closes on its thread (`SiteSpec::end_sp`): the one whose
/// stack pointer says it is the same call, so that an end never closes a frame that a
/// `longjmp` or an exception left open above its own.
fn end_sp(kind: SiteKind, arch: Option<crate::elf::argspec::Arch>) -> u8 {
    use usdt_trace_common::{END_SP_ANY, END_SP_POPPED, END_SP_SAME, END_SP_TAIL};
    match kind {
        SiteKind::FnRetInsn => END_SP_SAME,
        SiteKind::FnTailRet => END_SP_TAIL,
        // aarch64 keeps the return address in x30: its stack pointer at the return probe is
        // the entry's.
        SiteKind::FnReturn if arch == Some(crate::elf::argspec::Arch::Aarch64) => END_SP_SAME,
        SiteKind::FnReturn => END_SP_POPPED,
        _ => END_SP_ANY,
    }
}

/// Where the uprobe goes (file offset) and the address it is at (the ip the program sees,
/// which rip-relative arguments are measured from). A `nop; nop5` site is attached on its
/// 5-byte nop only when the kernel will optimize it: elsewhere a uprobe on it costs as much as
/// on the nop or more, so the nop (what every other tool probes) is the safe default. The
/// registers are the same at both: the nop changes nothing.
fn attach_at(s: &crate::elf::Site, optimize: bool) -> (u64, u64) {
    match crate::elf::optimizable_offset(s.insn, s.file_offset) {
        Some(off) if optimize => (off, s.pc.wrapping_add(off - s.file_offset)),
        _ => (s.file_offset, s.pc),
    }
}

/// Whether `provider:name` is a poll marker usdt-markers declared: `(stem, enter?)`.
fn poll_marker<'a>(
    poll_spans: &[(String, String)],
    provider: &str,
    name: &'a str,
) -> Option<(&'a str, bool)> {
    let (stem, enter) = match name.strip_suffix("__enter") {
        Some(stem) => (stem, true),
        None => (name.strip_suffix("__exit")?, false),
    };
    poll_spans
        .iter()
        .any(|(p, st)| p == provider && st == stem)
        .then_some((stem, enter))
}

/// The kernel role of a poll marker: ENTER or EXIT of the span of its stem, reading the span id
/// from its first argument. None (an ordinary event) when the span is not traced, not paired
/// by id, or the marker has no readable id.
fn poll_role(
    roles: &spans::SpanPlan,
    poll_spans: &[(String, String)],
    provider: &str,
    name: &str,
    args: &[ArgSpec],
) -> Option<(SiteRole, u32, u8)> {
    let (stem, enter) = poll_marker(poll_spans, provider, name)?;
    let id = roles
        .pairs
        .iter()
        .position(|p| p.provider == provider && p.stem == stem && p.key == Some(0))?;
    if !args.first().is_some_and(|a| a.readable()) {
        return None;
    }
    let role = if enter {
        SiteRole::ENTER
    } else {
        SiteRole::EXIT
    };
    Some((role, id as u32, 0))
}

impl Plan {
    /// The one line `watch` prints once every probe is live.
    pub fn attached_line(&self) -> String {
        let n = self.sites.len();
        let nobj = self.objects.len();
        let s = |k: usize| if k == 1 { "" } else { "s" };
        let spans = match self.pairs.len() {
            0 => String::new(),
            p => format!(" ({p} span name{})", s(p)),
        };
        let step = match self.single_step {
            0 => String::new(),
            k => format!(", {k} single-stepped (several µs a hit)"),
        };
        format!(
            "Attached {n} probe site{} in {nobj} object{}{spans}{step}; Ctrl-C to stop",
            s(n),
            s(nobj)
        )
    }

    /// Looks up the sites a record names; None for a record that names no known site (a
    /// malformed record, counted as lost by the caller).
    pub fn resolve<'a>(&'a self, rec: Record<'a>) -> Option<View<'a>> {
        match rec {
            Record::Event(r, strs) => Some(View::Event {
                site: self.sites.get(r.hdr.site as usize)?,
                rec: r,
                strs,
            }),
            Record::Span(r, strs) => {
                let end = self.sites.get(r.hdr.site as usize)?;
                let start = self.sites.get(r.start_site as usize)?;
                let pair = self.pairs.get(end.pair? as usize)?;
                Some(View::Span {
                    pair,
                    start,
                    end,
                    rec: r,
                    strs,
                    stack: None,
                })
            }
            // Paired with their span by the reader, never resolved alone; waits name no site
            // and go straight to the sinks.
            Record::Strs(_) | Record::Stack(_) | Record::StackCopy(_) | Record::Wait(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::argspec::{parse_arg, Arch};
    use crate::elf::{Site, SiteInsn};
    use usdt_trace_common::{Acct, EventRecord, RecordHeader, RecordKind, SpanRecord};

    /// A site's strings as (argument, slot), for the printers.
    fn ustrs(s: &SiteInfo) -> Vec<(usize, usize)> {
        s.strs.iter().map(|c| (c.arg, c.slot)).collect()
    }

    /// A spec's strings as (argument, length argument, slot), for the kernel.
    fn kstrs(s: &SiteSpec) -> Vec<(u8, u8, u8)> {
        s.strs[..s.nstrs as usize]
            .iter()
            .map(|d| (d.arg, d.len_arg, d.slot))
            .collect()
    }

    fn site(provider: &str, name: &str, off: u64, sema: Option<u64>, args: &[&str]) -> Site {
        Site {
            provider: provider.into(),
            name: name.into(),
            pc: 0x1000 + off,
            base: 0,
            semaphore: sema.map_or(0, |s| s + 0x4000),
            file_offset: off,
            semaphore_offset: sema,
            semaphore_shared_page: false,
            args_raw: args.join(" "),
            args: args
                .iter()
                .map(|a| parse_arg(a, Arch::X86_64).resolve(|_| None))
                .collect(),
            insn: SiteInsn::Nop,
            insn_bytes: "90".into(),
            kind: crate::elf::SiteKind::Note,
        }
    }

    fn objects() -> (ObjectProbes, ObjectProbes) {
        let a = ObjectProbes {
            sites: vec![
                site(
                    "app",
                    "query__start",
                    0x10,
                    Some(0x20),
                    &["8@%rdi", "-4@%esi"],
                ),
                site("app", "query__done", 0x30, Some(0x22), &["-4@%eax"]),
                site("app", "tick", 0x40, None, &["8@%rdi", "8f@%xmm0"]),
            ],
            ..Default::default()
        };
        let b = ObjectProbes {
            sites: vec![site("lib", "req__start", 0x50, None, &["8@%rdi"])],
            id_spans: vec![("lib".into(), "req".into())],
            ..Default::default()
        };
        (a, b)
    }

    fn opts<'a>(patterns: &'a [Pattern], strs: &'a [StrRule]) -> PlanOptions<'a> {
        PlanOptions {
            patterns,
            spans: &[],
            strs,
            names: &[],
            auto_span: true,
            optimize: false,
            costs: None,
        }
    }

    #[test]
    fn nop_nop5_sites_attach_on_the_nop5_only_when_the_kernel_optimizes() {
        let mut s = site("app", "hit", 0x10, None, &["8@%rdi", "8@counter+8(%rip)"]);
        s.args[1] = parse_arg("8@counter+8(%rip)", Arch::X86_64).resolve(|_| Some(0x3000));
        let plain = s.clone();
        s.insn = SiteInsn::NopNop5;
        let a = ObjectProbes {
            sites: vec![s, plain],
            ..Default::default()
        };
        let optimize = PlanOptions {
            optimize: true,
            costs: None,
            ..opts(&[], &[])
        };
        let plan = build(&[("a", &a)], &optimize).unwrap();
        let offsets: Vec<u64> = plan.objects[0].points.iter().map(|p| p.offset).collect();
        assert_eq!(offsets, [0x11, 0x10]);
        // At the nop5 the ip is pc + 1: rip-relative arguments are measured from there.
        assert_eq!(plan.specs[0].args[1].val, (0x3008u64).wrapping_sub(0x1011));
        assert_eq!(plan.specs[1].args[1].val, (0x3008u64).wrapping_sub(0x1010));
        let plan = build(&[("a", &a)], &opts(&[], &[])).unwrap();
        let offsets: Vec<u64> = plan.objects[0].points.iter().map(|p| p.offset).collect();
        assert_eq!(offsets, [0x10, 0x10]);
        assert_eq!(plan.specs[0].args[1].val, (0x3008u64).wrapping_sub(0x1010));
    }

    #[test]
    fn cookies_index_specs_and_sites_alike_and_group_by_object() {
        let (a, b) = objects();
        let strs = [StrRule::parse("query__start:0").unwrap()];
        let plan = build(&[("a", &a), ("b", &b)], &opts(&[], &strs)).unwrap();
        assert_eq!(plan.specs.len(), 4);
        assert_eq!(plan.sites.len(), 4);
        assert_eq!(plan.pairs.len(), 1);
        assert_eq!(plan.pairs[0].stem, "query");
        // Start and end share the pair id; the event has none.
        assert_eq!(plan.specs[0].role, SiteRole::START);
        assert_eq!(plan.specs[1].role, SiteRole::END);
        assert_eq!(plan.specs[0].pair_id, plan.specs[1].pair_id);
        assert_eq!(plan.specs[2].role, SiteRole::EVENT);
        assert_eq!(plan.sites[0].pair, Some(0));
        assert_eq!(plan.sites[2].pair, None);
        // The string rule reaches the kernel and the printer alike.
        assert_eq!(kstrs(&plan.specs[0]), [(0, STR_NONE, 0)]);
        assert_eq!(ustrs(&plan.sites[0]), [(0, 0)]);
        assert_eq!(kstrs(&plan.specs[1]), []);
        assert_eq!(ustrs(&plan.sites[1]), []);
        assert_eq!(plan.sites[0].args, vec![ArgFmt::Unsigned, ArgFmt::Signed]);
        assert_eq!(plan.sites[2].args[1], ArgFmt::Unreadable);
        assert_eq!(plan.specs[2].args[1].kind, ArgKind::UNSUPPORTED);
        assert_eq!(
            plan.objects,
            vec![
                ObjectPlan {
                    object: 0,
                    points: vec![
                        AttachPoint {
                            offset: 0x10,
                            ref_ctr: Some(0x20),
                            cookie: 0,
                            ret: false
                        },
                        AttachPoint {
                            offset: 0x30,
                            ref_ctr: Some(0x22),
                            cookie: 1,
                            ret: false
                        },
                        AttachPoint {
                            offset: 0x40,
                            ref_ctr: None,
                            cookie: 2,
                            ret: false
                        },
                    ]
                },
                ObjectPlan {
                    object: 1,
                    points: vec![AttachPoint {
                        offset: 0x50,
                        ref_ctr: None,
                        cookie: 3,
                        ret: false
                    }]
                },
            ]
        );
        assert_eq!(
            plan.attached_line(),
            "Attached 4 probe sites in 2 objects (1 span name); Ctrl-C to stop"
        );
    }

    #[test]
    fn string_rules_that_cannot_apply_are_errors_not_nulls() {
        let (a, _) = objects();
        let err = |rule: &str| {
            let strs = [StrRule::parse(rule).unwrap()];
            build(&[("a", &a)], &opts(&[], &strs))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("query__start:1"),
            "--str 'query__start:1': argument 1 of app:query__start is a 4-byte value, not a pointer to a string"
        );
        assert_eq!(
            err("query__done:5"),
            "--str 'query__done:5': app:query__done has 1 argument"
        );
        assert_eq!(err("nope:0"), "--str 'nope:0': no traced probe matches");
        assert_eq!(
            err("tick:1"),
            "--str 'tick:1': argument 1 of app:tick is unreadable, not a pointer to a string"
        );
        // A glob works, and two rules naming the same argument are one.
        let strs = [
            StrRule::parse("*start:0").unwrap(),
            StrRule::parse("query__start:0").unwrap(),
        ];
        let plan = build(&[("a", &a)], &opts(&[], &strs)).unwrap();
        assert_eq!(ustrs(&plan.sites[0]), [(0, 0)]);
    }

    #[test]
    fn patterns_select_sites_and_objects_without_matches_get_no_attach_points() {
        let (a, b) = objects();
        let pats = [Pattern::parse("lib:*").unwrap()];
        let plan = build(&[("a", &a), ("b", &b)], &opts(&pats, &[])).unwrap();
        assert_eq!(plan.sites.len(), 1);
        assert_eq!(plan.objects.len(), 1);
        assert_eq!(plan.objects[0].object, 1);
        assert_eq!(plan.objects[0].points[0].cookie, 0);
        // A lone start is an event: its end was not chosen.
        assert_eq!(plan.specs[0].role, SiteRole::EVENT);
        assert_eq!(
            plan.attached_line(),
            "Attached 1 probe site in 1 object; Ctrl-C to stop"
        );
        let none = [Pattern::parse("nothing:here").unwrap()];
        let e = build(&[("a", &a), ("b", &b)], &opts(&none, &[])).unwrap_err();
        assert_eq!(e.to_string(), "no probe matches nothing:here in a, b");
    }

    #[test]
    fn a_pattern_among_several_that_matches_nothing_is_named() {
        let (a, b) = objects();
        let objs = [("a", &a), ("b", &b)];
        let pats = [
            Pattern::parse("lib:*").unwrap(),
            Pattern::parse("tk:tik__end").unwrap(),
            Pattern::parse("nothing:*").unwrap(),
        ];
        let e = check_every_pattern(&objs, &pats).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no probe matches tk:tik__end nothing:* in a, b (the other patterns match)"
        );
        assert!(check_every_pattern(&objs, &pats[..1]).is_ok());
        assert!(check_every_pattern(&objs, &[]).is_ok());
    }

    #[test]
    fn resolve_finds_sites_and_rejects_unknown_cookies() {
        let (a, _) = objects();
        let plan = build(&[("a", &a)], &opts(&[], &[])).unwrap();
        let hdr = |kind, site| RecordHeader {
            kind,
            site,
            ..Default::default()
        };
        let ev = EventRecord {
            hdr: hdr(RecordKind::EVENT, 2),
            has_strs: 0,
            _pad: 0,
            args: [0; MAX_ARGS],
        };
        match plan.resolve(Record::Event(&ev, None)) {
            Some(View::Event { site, .. }) => assert_eq!(site.name, "tick"),
            _ => panic!("event not resolved"),
        }
        let bad = EventRecord {
            hdr: hdr(RecordKind::EVENT, 99),
            ..ev
        };
        assert!(plan.resolve(Record::Event(&bad, None)).is_none());
        let mut sp = SpanRecord {
            hdr: hdr(RecordKind::SPAN, 1),
            start_site: 0,
            start_tid: 0,
            start_ns: 0,
            acct: Acct::default(),
            acct_valid: 0,
            waker_pid: 0,
            waker_tid: 0,
            has_strs: 0,
            longest_off_ns: 0,
            waker_comm: [0; 16],
            args: [0; MAX_ARGS],
            end_args: [0; MAX_ARGS],
            idle_ns: 0,
            polls: 0,
            threads: 0,
            steal_start: 0,
        };
        match plan.resolve(Record::Span(&sp, None)) {
            Some(View::Span {
                pair, start, end, ..
            }) => {
                assert_eq!(
                    (pair.stem.as_str(), start.name.as_str()),
                    ("query", "query__start")
                );
                assert_eq!(end.name, "query__done");
            }
            _ => panic!("span not resolved"),
        }
        // A span record whose end site is an event site names no span.
        sp.hdr.site = 2;
        assert!(plan.resolve(Record::Span(&sp, None)).is_none());
    }

    #[test]
    fn an_explicit_key_must_be_a_readable_argument_at_both_ends() {
        let (a, _) = objects();
        let rule = |k| SpanRule {
            key: Some(k),
            ..SpanRule::parse("query__start=query__done").unwrap()
        };
        // Argument 0 exists at the start and at the end: both sites pair on it.
        let ok = [rule(0)];
        let o = PlanOptions {
            spans: &ok,
            ..opts(&[], &[])
        };
        let plan = build(&[("a", &a)], &o).unwrap();
        assert_eq!((plan.specs[0].id_arg, plan.specs[1].id_arg), (0, 0));
        // query__done has one argument: key 1 cannot be read there.
        let bad = [rule(1)];
        let o = PlanOptions {
            spans: &bad,
            ..opts(&[], &[])
        };
        let e = build(&[("a", &a)], &o).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--key 1: app:query__done has 1 argument; the key must be one of them and readable"
        );
    }

    #[test]
    fn id_spans_read_the_span_id_from_the_first_argument() {
        let (_, b) = objects();
        let mut b = b;
        b.sites
            .push(site("lib", "req__end", 0x60, None, &["8@%rdi"]));
        let plan = build(&[("b", &b)], &opts(&[], &[])).unwrap();
        assert_eq!(plan.specs[0].id_arg, 0);
        assert_eq!(plan.specs[1].id_arg, 0);
        assert_eq!(plan.specs[0].role, SiteRole::START);
    }

    #[test]
    fn poll_markers_come_with_their_span_and_read_its_id() {
        let (_, mut b) = objects();
        b.sites
            .push(site("lib", "req__end", 0x60, None, &["8@%rdi"]));
        b.sites
            .push(site("lib", "req__enter", 0x70, None, &["8@%rdi"]));
        b.sites
            .push(site("lib", "req__exit", 0x80, None, &["8@%rdi"]));
        // Declared for a span that is not paired by id: an ordinary event.
        b.sites
            .push(site("lib", "other__enter", 0x90, None, &["8@%rdi"]));
        b.poll_spans = vec![("lib".into(), "req".into()), ("lib".into(), "other".into())];
        // Tracing the span's probes by name brings its markers along.
        let pats = [Pattern::parse("lib:req__*t").unwrap()];
        let plan = build(&[("b", &b)], &opts(&pats, &[])).unwrap();
        let names: Vec<&str> = plan.sites.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["req__start", "req__enter", "req__exit"]);
        let plan = build(&[("b", &b)], &opts(&[], &[])).unwrap();
        let roles: Vec<_> = plan
            .specs
            .iter()
            .map(|s| (s.role, s.pair_id, s.id_arg))
            .collect();
        assert_eq!(
            roles,
            [
                (SiteRole::START, 0, 0),
                (SiteRole::END, 0, 0),
                (SiteRole::ENTER, 0, 0),
                (SiteRole::EXIT, 0, 0),
                (SiteRole::EVENT, 0, ID_NONE),
            ]
        );
    }

    /// The two sites of a function probe, as elf::function_sites makes them.
    fn fn_sites(name: &str, off: u64, insn: SiteInsn) -> Vec<Site> {
        let mk = |suffix: &str, args: &[&str], kind| Site {
            insn,
            kind,
            ..site("fn", &format!("{name}{suffix}"), off, None, args)
        };
        vec![
            mk("__entry", &["8@%rdi", "8@%rsi"], SiteKind::FnEntry),
            mk("__return", &["8@%rax"], SiteKind::FnReturn),
        ]
    }

    #[test]
    fn function_probes_pair_entry_with_return_attached_as_a_return_probe() {
        let mut o = ObjectProbes::default();
        o.sites
            .extend(fn_sites("readline", 0x100, SiteInsn::SingleStep));
        o.sites.extend(fn_sites("ns::run", 0x200, SiteInsn::Nop));
        // A note's site whose name would match `readline` alone: not selected by `fn:`.
        o.sites.push(site("app", "readline", 0x300, None, &[]));
        for auto_span in [true, false] {
            let pats = [Pattern::parse("fn:*").unwrap()];
            let strs = [StrRule::parse("fn:readline:ret").unwrap()];
            let o2 = PlanOptions {
                auto_span,
                ..opts(&pats, &strs)
            };
            let plan = build(&[("bash", &o)], &o2).unwrap();
            assert_eq!(plan.sites.len(), 4, "auto_span {auto_span}");
            let mut stems: Vec<&str> = plan.pairs.iter().map(|p| p.stem.as_str()).collect();
            stems.sort();
            assert_eq!(stems, ["ns::run", "readline"]);
            assert_eq!(
                (plan.specs[0].role, plan.specs[1].role),
                (SiteRole::START, SiteRole::END)
            );
            assert_eq!(plan.specs[0].pair_id, plan.specs[1].pair_id);
            // The return value is the end's argument 0, and the string read there.
            assert_eq!(plan.specs[1].args[0].kind, ArgKind::REG);
            assert_eq!(
                (ustrs(&plan.sites[0]), ustrs(&plan.sites[1])),
                (vec![], vec![(0, 0)])
            );
            assert_eq!(kstrs(&plan.specs[1]), [(0, STR_NONE, 0)]);
            let pts = &plan.objects[0].points;
            assert_eq!(
                pts.iter().map(|p| (p.offset, p.ret)).collect::<Vec<_>>(),
                [(0x100, false), (0x100, true), (0x200, false), (0x200, true)]
            );
            // Entry and return share one instruction: one single-stepped site.
            assert_eq!(plan.single_step, 1);
            assert_eq!(
                plan.attached_line(),
                "Attached 4 probe sites in 1 object (2 span names), 1 single-stepped (several µs a \
                 hit); Ctrl-C to stop"
            );
        }
        // `fn:GLOB` matches the function's name, so both ends are chosen; colons are allowed.
        let pats = [Pattern::parse("fn:ns::r*").unwrap()];
        let plan = build(&[("bash", &o)], &opts(&pats, &[])).unwrap();
        assert_eq!(plan.sites.len(), 2);
        assert_eq!(plan.pairs[0].stem, "ns::run");
        assert_eq!(plan.single_step, 0);
        // `fn:F:N` is at the entry; `:ret` never matches a note's site.
        let strs = [StrRule::parse("fn:readline:1").unwrap()];
        let plan = build(&[("bash", &o)], &opts(&[], &strs)).unwrap();
        assert_eq!(
            (ustrs(&plan.sites[0]), ustrs(&plan.sites[1])),
            (vec![(1, 0)], vec![])
        );
        let strs = [StrRule::parse("app:readline:ret").unwrap()];
        let e = build(&[("bash", &o)], &opts(&[], &strs)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--str 'app:readline:ret': no traced probe matches"
        );
        // Go strings are a pointer and a length: sized, never read to a NUL.
        let mut go = ObjectProbes::default();
        go.sites
            .extend(fn_sites("main.f", 0x100, SiteInsn::SingleStep));
        go.sites[0].kind = SiteKind::GoEntry;
        go.sites[1].kind = SiteKind::GoRetInsn;
        let strs = [StrRule::parse("fn:main.f:0").unwrap()];
        let plan = build(&[("srv", &go)], &opts(&[], &strs)).unwrap();
        assert_eq!(kstrs(&plan.specs[0]), [(0, 1, 0)]);
        assert_eq!(ustrs(&plan.sites[0]), [(0, 0)]);
        let strs = [StrRule::parse("fn:main.f:1").unwrap()];
        let e = build(&[("srv", &go)], &opts(&[], &strs)).unwrap_err();
        assert!(e.to_string().contains("the last Go register"), "{e}");
        let plan = build(&[("srv", &go)], &opts(&[], &[])).unwrap();
        assert_eq!(
            (plan.specs[0].role, plan.specs[1].role),
            (SiteRole::START, SiteRole::END)
        );
        assert!(!plan.objects[0].points[1].ret, "never a return probe in Go");
        // Strings at both ends of one span: the end's take the slots after the start's.
        let rules = [
            StrRule::parse("fn:readline:0").unwrap(),
            StrRule::parse("fn:readline:ret").unwrap(),
        ];
        let plan = build(&[("bash", &o)], &opts(&[], &rules)).unwrap();
        assert_eq!(
            (ustrs(&plan.sites[0]), ustrs(&plan.sites[1])),
            (vec![(0, 0)], vec![(0, 1)])
        );
        assert_eq!(kstrs(&plan.specs[1]), [(0, STR_NONE, 1)]);
    }

    #[test]
    fn several_strings_get_slots_start_first_and_too_many_are_an_error() {
        let (a, _) = objects();
        let rule = |r: &str| StrRule::parse(r).unwrap();
        // The same rule twice is one capture; a different length for it is an error.
        let strs = [rule("query__start:0"), rule("*start:0")];
        let plan = build(&[("a", &a)], &opts(&[], &strs)).unwrap();
        assert_eq!(ustrs(&plan.sites[0]), [(0, 0)]);
        let strs = [rule("query__start:0"), rule("query__start:0:len=1")];
        let e = build(&[("a", &a)], &opts(&[], &strs)).unwrap_err();
        assert!(e.to_string().contains("different length"), "{e}");
        // len= names the length's argument; it must be there.
        let strs = [rule("query__start:0:len=1")];
        let plan = build(&[("a", &a)], &opts(&[], &strs)).unwrap();
        assert_eq!(kstrs(&plan.specs[0]), [(0, 1, 0)]);
        assert_eq!(plan.sites[0].strs[0].len_arg, Some(1));
        let strs = [rule("query__start:0:len=5")];
        let e = build(&[("a", &a)], &opts(&[], &strs)).unwrap_err();
        assert!(e.to_string().contains("length argument 5"), "{e}");
    }

    #[test]
    fn more_than_four_strings_in_one_record_is_an_error() {
        let mut o = ObjectProbes::default();
        let p = ["8@%rdi", "8@%rsi", "8@%rdx", "8@%rcx", "8@%r8"];
        o.sites.push(site("app", "req__start", 0x10, None, &p));
        o.sites.push(site("app", "req__end", 0x20, None, &p));
        let rule = |r: &str| StrRule::parse(r).unwrap();
        let mut four: Vec<StrRule> = [0, 1, 2].map(|i| rule(&format!("req__start:{i}"))).to_vec();
        four.push(rule("req__end:4"));
        let plan = build(&[("a", &o)], &opts(&[], &four)).unwrap();
        assert_eq!(ustrs(&plan.sites[0]), [(0, 0), (1, 1), (2, 2)]);
        assert_eq!(
            ustrs(&plan.sites[1]),
            [(4, 3)],
            "the end's after the start's"
        );
        assert_eq!(kstrs(&plan.specs[1]), [(4, STR_NONE, 3)]);
        let mut five = four.clone();
        five.push(rule("req__start:3"));
        let e = build(&[("a", &o)], &opts(&[], &five)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--str: span app:req would capture 5 strings; a record carries at most 4 (start and end strings of a span together)"
        );
    }

    #[test]
    fn argument_names_reach_the_printers_and_bad_rules_are_errors() {
        let (a, _) = objects();
        let names = [ArgNames::parse("query__start=q,n").unwrap()];
        let o = PlanOptions {
            names: &names,
            ..opts(&[], &[])
        };
        let plan = build(&[("a", &a)], &o).unwrap();
        assert_eq!(plan.sites[0].names, ["q", "n"]);
        assert!(plan.sites[1].names.is_empty());
        let err = |r: &str| {
            let names = [ArgNames::parse(r).unwrap()];
            let o = PlanOptions {
                names: &names,
                ..opts(&[], &[])
            };
            build(&[("a", &a)], &o).unwrap_err().to_string()
        };
        assert_eq!(
            err("query__done=a,b"),
            "--args 'query__done=a,b': 2 names for app:query__done, which has 1 argument"
        );
        assert_eq!(err("nope=a"), "--args 'nope=a': no traced probe matches");
        for bad in ["x", "=a", "x=", "x=a,,b", "x=1a", "x=a-b"] {
            assert!(ArgNames::parse(bad).is_err(), "{bad}");
        }
    }
}
