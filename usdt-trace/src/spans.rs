//! Which probes open and close spans, and what the kernel is told about each site.
//!
//! Probe authors mark the two ends of an operation with a pair of probes: PostgreSQL's
//! `query__start`/`query__done`, Python's `function__entry`/`function__return`, our own
//! `request__start`/`request__end`. `watch` pairs them in the kernel, so it needs, per site, a
//! role (event, start or end) and a pair id shared by the start and end of one span name. This
//! module decides those from the probe names alone (auto-pairing) or from `--span START=END`
//! rules, and turns every site's argument specs into the fixed-size [`SiteSpec`] the eBPF
//! program reads by cookie. Pure: no I/O.

use crate::argspec::{ArgLoc, ArgSpec};
use std::collections::HashMap;
use thiserror::Error;
use usdt_trace_common::{
    ArgDesc, ArgKind, SiteRole, SiteSpec, ID_NONE, MAX_ARGS, REG_NONE, STR_NONE,
};

/// Suffix/prefix conventions, tried in order: (start, end) name forms around a stem.
const AUTO_RULES: &[(Affix, Affix)] = &[
    (Affix::Suffix("__start"), Affix::Suffix("__end")),
    (Affix::Suffix("__start"), Affix::Suffix("__done")),
    (Affix::Suffix("__begin"), Affix::Suffix("__end")),
    (Affix::Suffix("__entry"), Affix::Suffix("__return")),
    (Affix::Suffix("_start"), Affix::Suffix("_end")),
    (Affix::Prefix("start_"), Affix::Prefix("end_")),
];

#[derive(Clone, Copy, Debug)]
enum Affix {
    Suffix(&'static str),
    Prefix(&'static str),
}

impl Affix {
    fn stem<'a>(&self, name: &'a str) -> Option<&'a str> {
        let stem = match self {
            Affix::Suffix(s) => name.strip_suffix(s)?,
            Affix::Prefix(p) => name.strip_prefix(p)?,
        };
        (!stem.is_empty()).then_some(stem)
    }

    fn apply(&self, stem: &str) -> String {
        match self {
            Affix::Suffix(s) => format!("{stem}{s}"),
            Affix::Prefix(p) => format!("{p}{stem}"),
        }
    }
}

/// An explicit `--span START=END` rule; each side is `name` or `provider:name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanRule {
    pub start: ProbeRef,
    pub end: ProbeRef,
}

/// A probe named on the command line: `name` (any provider) or `provider:name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeRef {
    pub provider: Option<String>,
    pub name: String,
}

impl ProbeRef {
    pub fn parse(s: &str) -> Option<ProbeRef> {
        let (provider, name) = match s.split_once(':') {
            Some((p, n)) => (Some(p.to_string()), n),
            None => (None, s),
        };
        if name.is_empty() || name.contains([':', '=']) || provider.as_deref() == Some("") {
            return None;
        }
        Some(ProbeRef {
            provider,
            name: name.to_string(),
        })
    }

    pub fn matches(&self, provider: &str, name: &str) -> bool {
        self.name == name && self.provider.as_deref().is_none_or(|p| p == provider)
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SpanError {
    #[error("--span '{0}': expected START=END, e.g. query__start=query__done")]
    BadRule(String),
    #[error("--str '{0}': expected PROBE:N, e.g. postgresql:query__start:0")]
    BadStr(String),
    #[error("--str '{spec}': argument index {index} is out of range (0..{max})")]
    StrIndex {
        spec: String,
        index: usize,
        max: usize,
    },
    #[error(
        "--span {start}={end}: no traced probe pair matches (check the names and the provider)"
    )]
    RuleMatchesNothing { start: String, end: String },
    #[error("too many span names ({0}); at most {1} can be tracked")]
    TooManyPairs(usize, u32),
}

impl SpanRule {
    pub fn parse(s: &str) -> Result<SpanRule, SpanError> {
        let bad = || SpanError::BadRule(s.to_string());
        let (a, b) = s.split_once('=').ok_or_else(bad)?;
        Ok(SpanRule {
            start: ProbeRef::parse(a.trim()).ok_or_else(bad)?,
            end: ProbeRef::parse(b.trim()).ok_or_else(bad)?,
        })
    }
}

/// `--str PROBE:N`: read argument N of PROBE as a NUL-terminated string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StrRule {
    pub probe: ProbeRef,
    pub index: usize,
}

impl StrRule {
    pub fn parse(s: &str) -> Result<StrRule, SpanError> {
        let bad = || SpanError::BadStr(s.to_string());
        let (probe, n) = s.rsplit_once(':').ok_or_else(bad)?;
        let index: usize = n.parse().map_err(|_| bad())?;
        if index >= MAX_ARGS {
            return Err(SpanError::StrIndex {
                spec: s.to_string(),
                index,
                max: MAX_ARGS,
            });
        }
        Ok(StrRule {
            probe: ProbeRef::parse(probe).ok_or_else(bad)?,
            index,
        })
    }
}

/// The identity of one probe (all its sites share it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeName {
    pub provider: String,
    pub name: String,
}

/// A span name: what the start and end probes of one kind of span share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    pub provider: String,
    /// The common stem (`query` for `query__start`/`query__done`).
    pub stem: String,
    pub start: String,
    pub end: String,
    /// Paired by a span id in the first argument rather than per thread.
    pub by_id: bool,
}

/// The role of one probe, as decided by [`plan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Event,
    Start(u32),
    End(u32),
}

/// Roles for every probe and the table of span names.
#[derive(Clone, Debug, Default)]
pub struct SpanPlan {
    pub pairs: Vec<Pair>,
    pub roles: HashMap<ProbeName, Role>,
}

impl SpanPlan {
    pub fn role(&self, provider: &str, name: &str) -> Role {
        self.roles
            .get(&ProbeName {
                provider: provider.to_string(),
                name: name.to_string(),
            })
            .copied()
            .unwrap_or(Role::Event)
    }
}

/// Decide roles. `probes` are the distinct probes being traced; `id_spans` are the
/// (provider, stem) pairs that usdt-markers declared as paired by id.
pub fn plan(
    probes: &[ProbeName],
    rules: &[SpanRule],
    id_spans: &[(String, String)],
    auto: bool,
) -> Result<SpanPlan, SpanError> {
    let mut plan = SpanPlan::default();
    let present: std::collections::HashSet<&ProbeName> = probes.iter().collect();
    let add = |plan: &mut SpanPlan, provider: &str, stem: &str, start: &str, end: &str| {
        let s = ProbeName {
            provider: provider.to_string(),
            name: start.to_string(),
        };
        let e = ProbeName {
            provider: provider.to_string(),
            name: end.to_string(),
        };
        // A probe takes one role: the first rule that claims it wins.
        if plan.roles.contains_key(&s) || plan.roles.contains_key(&e) {
            return;
        }
        let id = plan.pairs.len() as u32;
        let by_id = id_spans.iter().any(|(p, st)| p == provider && st == stem);
        plan.pairs.push(Pair {
            provider: provider.to_string(),
            stem: stem.to_string(),
            start: start.to_string(),
            end: end.to_string(),
            by_id,
        });
        plan.roles.insert(s, Role::Start(id));
        plan.roles.insert(e, Role::End(id));
    };
    // Explicit rules first: they override the naming conventions.
    for rule in rules {
        let before = plan.pairs.len();
        let mut matched = false;
        for p in probes
            .iter()
            .filter(|p| rule.start.matches(&p.provider, &p.name))
        {
            if let Some(e) = probes
                .iter()
                .find(|e| e.provider == p.provider && rule.end.matches(&e.provider, &e.name))
            {
                let stem = common_stem(&p.name, &e.name);
                add(&mut plan, &p.provider, &stem, &p.name, &e.name);
                matched = true;
            }
        }
        // A typo in a rule would otherwise silently give no spans.
        if !matched && plan.pairs.len() == before {
            let show = |r: &ProbeRef| match &r.provider {
                Some(p) => format!("{p}:{}", r.name),
                None => r.name.clone(),
            };
            return Err(SpanError::RuleMatchesNothing {
                start: show(&rule.start),
                end: show(&rule.end),
            });
        }
    }
    if auto {
        let mut sorted: Vec<&ProbeName> = probes.iter().collect();
        sorted.sort();
        for p in sorted {
            for (start, end) in AUTO_RULES {
                let Some(stem) = start.stem(&p.name) else {
                    continue;
                };
                let end_name = end.apply(stem);
                let e = ProbeName {
                    provider: p.provider.clone(),
                    name: end_name.clone(),
                };
                if present.contains(&e) {
                    add(&mut plan, &p.provider, stem, &p.name, &end_name);
                    break;
                }
            }
        }
    }
    if plan.pairs.len() as u32 > usdt_trace_common::MAX_PAIRS {
        return Err(SpanError::TooManyPairs(
            plan.pairs.len(),
            usdt_trace_common::MAX_PAIRS,
        ));
    }
    Ok(plan)
}

/// The name two probe names share, for display: `query__start`/`query__done` → `query`.
fn common_stem(a: &str, b: &str) -> String {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let stem = a[..n].trim_end_matches('_');
    if stem.is_empty() {
        format!("{a}..{b}")
    } else {
        stem.to_string()
    }
}

/// The kernel's view of one argument.
pub fn arg_desc(arg: &ArgSpec, pc: u64) -> ArgDesc {
    let mut d = ArgDesc {
        kind: ArgKind::UNSUPPORTED,
        size: arg.size,
        signed: arg.signed as u8,
        base_reg: REG_NONE,
        index_reg: REG_NONE,
        scale: 1,
        _pad: [0; 2],
        val: 0,
    };
    if !arg.readable() {
        return d;
    }
    match &arg.loc {
        ArgLoc::Const { value } => {
            d.kind = ArgKind::CONST;
            d.val = *value;
        }
        ArgLoc::Reg { reg } => {
            d.kind = ArgKind::REG;
            d.base_reg = reg.pt_regs_word;
        }
        ArgLoc::Mem {
            base,
            index,
            scale,
            disp,
        } => {
            d.kind = ArgKind::MEM;
            d.base_reg = base.pt_regs_word;
            if let Some(i) = index {
                d.index_reg = i.pt_regs_word;
                d.scale = *scale;
            }
            d.val = *disp as u64;
        }
        ArgLoc::RipRel {
            address: Some(addr),
            ..
        } => {
            // At the probe, ip == pc (the kernel rewinds it to the breakpoint), so the delta
            // from pc finds the symbol in any load bias without knowing the process.
            d.kind = ArgKind::RIP;
            d.val = addr.wrapping_sub(pc);
        }
        ArgLoc::SymMem {
            base,
            index,
            scale,
            address: Some(addr),
            ..
        } => {
            // `addr` is absolute (ET_EXEC only). Without a base, REG_NONE reads as 0 in the
            // program (`reg()` returns 0 past the saved registers).
            d.kind = ArgKind::MEM;
            d.base_reg = base.as_ref().map_or(REG_NONE, |b| b.pt_regs_word);
            if let Some(i) = index {
                d.index_reg = i.pt_regs_word;
                d.scale = *scale;
            }
            d.val = *addr;
        }
        _ => {}
    }
    d
}

/// The fixed-size spec the eBPF program reads for one site.
pub fn site_spec(
    args: &[ArgSpec],
    pc: u64,
    role: Role,
    by_id: bool,
    str_arg: Option<usize>,
) -> SiteSpec {
    let mut spec = SiteSpec {
        pair_id: 0,
        role: SiteRole::EVENT,
        id_arg: ID_NONE,
        nargs: args.len().min(MAX_ARGS) as u8,
        str_arg: STR_NONE,
        args: [ArgDesc {
            kind: ArgKind::NONE,
            ..Default::default()
        }; MAX_ARGS],
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
    if by_id && !matches!(role, Role::Event) && args.first().is_some_and(|a| a.readable()) {
        spec.id_arg = 0;
    }
    if let Some(i) = str_arg.filter(|&i| i < args.len() && args[i].readable() && args[i].size == 8)
    {
        spec.str_arg = i as u8;
    }
    for (d, a) in spec.args.iter_mut().zip(args) {
        *d = arg_desc(a, pc);
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probes(names: &[(&str, &str)]) -> Vec<ProbeName> {
        names
            .iter()
            .map(|(p, n)| ProbeName {
                provider: p.to_string(),
                name: n.to_string(),
            })
            .collect()
    }

    #[test]
    fn auto_pairs_every_convention() {
        let ps = probes(&[
            ("pg", "query__start"),
            ("pg", "query__done"),
            ("py", "function__entry"),
            ("py", "function__return"),
            ("a", "x__begin"),
            ("a", "x__end"),
            ("b", "y_start"),
            ("b", "y_end"),
            ("c", "start_z"),
            ("c", "end_z"),
            ("c", "lonely__start"),
        ]);
        let plan = plan(&ps, &[], &[], true).unwrap();
        assert_eq!(plan.pairs.len(), 5);
        let q = plan.role("pg", "query__start");
        let Role::Start(id) = q else { panic!("{q:?}") };
        assert_eq!(plan.role("pg", "query__done"), Role::End(id));
        assert_eq!(plan.pairs[id as usize].stem, "query");
        assert_eq!(plan.role("c", "lonely__start"), Role::Event);
        assert!(matches!(plan.role("c", "start_z"), Role::Start(_)));
        assert!(matches!(plan.role("py", "function__return"), Role::End(_)));
    }

    #[test]
    fn start_prefers_end_over_done_and_never_crosses_providers() {
        let ps = probes(&[
            ("p", "q__start"),
            ("p", "q__end"),
            ("p", "q__done"),
            ("other", "r__start"),
            ("p", "r__end"),
        ]);
        let plan = plan(&ps, &[], &[], true).unwrap();
        let Role::Start(id) = plan.role("p", "q__start") else {
            panic!()
        };
        assert_eq!(plan.role("p", "q__end"), Role::End(id));
        assert_eq!(plan.role("p", "q__done"), Role::Event);
        assert_eq!(plan.role("other", "r__start"), Role::Event);
    }

    #[test]
    fn explicit_rule_overrides_auto() {
        let ps = probes(&[("p", "q__start"), ("p", "q__end"), ("p", "q__done")]);
        let bad = [SpanRule::parse("q__start=nope").unwrap()];
        assert!(matches!(
            plan(&ps, &bad, &[], true),
            Err(SpanError::RuleMatchesNothing { .. })
        ));
        let rules = [SpanRule::parse("q__start=p:q__done").unwrap()];
        let plan = plan(&ps, &rules, &[], true).unwrap();
        let Role::Start(id) = plan.role("p", "q__start") else {
            panic!()
        };
        assert_eq!(plan.role("p", "q__done"), Role::End(id));
        assert_eq!(plan.role("p", "q__end"), Role::Event);
        // Without auto-pairing only rules apply.
        let plan = super::plan(&ps, &[], &[], false).unwrap();
        assert!(plan.pairs.is_empty());
    }

    #[test]
    fn id_spans_are_marked() {
        let ps = probes(&[("h", "request__start"), ("h", "request__end")]);
        let plan = plan(&ps, &[], &[("h".into(), "request".into())], true).unwrap();
        assert!(plan.pairs[0].by_id);
    }

    #[test]
    fn rule_and_str_parsing() {
        assert!(SpanRule::parse("a").is_err());
        assert!(SpanRule::parse("=b").is_err());
        assert!(SpanRule::parse("a=b=c").is_err());
        let r = StrRule::parse("postgresql:query__start:0").unwrap();
        assert_eq!(r.index, 0);
        assert_eq!(r.probe.provider.as_deref(), Some("postgresql"));
        assert!(matches!(
            StrRule::parse("p:n:12"),
            Err(SpanError::StrIndex { index: 12, .. })
        ));
        assert!(StrRule::parse("p:n:x").is_err());
        assert_eq!(StrRule::parse("n:3").unwrap().probe.provider, None);
    }

    #[test]
    fn common_stems() {
        assert_eq!(common_stem("query__start", "query__done"), "query");
        assert_eq!(common_stem("a", "b"), "a..b");
    }

    /// gcc -no-pie's `sym(%reg)` / `sym(,%idx,s)`: absolute memory once elf.rs resolved it.
    #[test]
    fn symbolic_displacement_maps_to_absolute_mem() {
        use crate::argspec::{parse_arg, Arch};
        let resolved = |s: &str, addr: Option<u64>| {
            let mut a = parse_arg(s, Arch::X86_64);
            match &mut a.loc {
                ArgLoc::SymMem { address, .. } => *address = addr,
                other => panic!("{s}: {other:?}"),
            }
            a
        };
        let d = arg_desc(&resolved("-4@a_s32(,%rax,4)", Some(0x404060)), 0x401000);
        assert_eq!((d.kind, d.size, d.signed), (ArgKind::MEM, 4, 1));
        assert_eq!((d.base_reg, d.index_reg, d.scale), (REG_NONE, 10, 4));
        assert_eq!(d.val, 0x404060);
        let d = arg_desc(&resolved("2@a_u16(%rax,%rax)", Some(0x404050)), 0x401000);
        assert_eq!(
            (d.kind, d.base_reg, d.index_reg, d.scale),
            (ArgKind::MEM, 10, 10, 1)
        );
        assert_eq!(d.val, 0x404050);
        // The offset is already in the resolved address.
        let d = arg_desc(&resolved("8@sarr+8(%rcx)", Some(0x404088)), 0x401000);
        assert_eq!(
            (d.kind, d.base_reg, d.index_reg),
            (ArgKind::MEM, 11, REG_NONE)
        );
        assert_eq!(d.val, 0x404088);
        // Unresolved (PIE, shared library, unknown symbol): not read.
        let d = arg_desc(&resolved("-1@a_s8(%rax)", None), 0x401000);
        assert_eq!(d.kind, ArgKind::UNSUPPORTED);
    }
}
