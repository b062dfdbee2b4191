//! Which probes open and close spans: the pairing rules.
//!
//! Probe authors mark the two ends of an operation with a pair of probes: PostgreSQL's
//! `query__start`/`query__done`, Python's `function__entry`/`function__return`, our own
//! `request__start`/`request__end`. `watch` pairs them in the kernel, so it needs, per site, a
//! role (event, start or end) and a pair id shared by the start and end of one span name. This
//! module decides those from the probe names alone (auto-pairing) or from `--span START=END`
//! rules; [`crate::plan`] turns the roles into what the kernel and the printers get. Pure: no I/O.

use std::collections::HashMap;
use thiserror::Error;
use usdt_trace_common::MAX_ARGS;

/// Naming conventions, tried in order: a start form and the end forms that close it. The first
/// rule under which any end exists wins, and every end of that rule that exists closes the span
/// (PostgreSQL's transactions end in a commit or an abort).
const AUTO_RULES: &[(Affix, &[Affix])] = &[
    (Affix::Suffix("__start"), &[Affix::Suffix("__end")]),
    (Affix::Suffix("__start"), &[Affix::Suffix("__done")]),
    (
        Affix::Suffix("__start"),
        &[Affix::Suffix("__commit"), Affix::Suffix("__abort")],
    ),
    (Affix::Suffix("__begin"), &[Affix::Suffix("__end")]),
    (Affix::Suffix("__entry"), &[Affix::Suffix("__return")]),
    (Affix::Suffix("_start"), &[Affix::Suffix("_end")]),
    (Affix::Prefix("start_"), &[Affix::Prefix("end_")]),
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

/// An explicit `--span START=END` rule; each side is `name` or `provider:name`. Several rules
/// with one START give that span several ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanRule {
    pub start: ProbeRef,
    pub end: ProbeRef,
    /// `--key N`: pair a start with the end whose argument N is equal (instances that overlap
    /// on one thread, or move between threads) instead of the innermost open start.
    pub key: Option<u8>,
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
    #[error("--str '{0}': expected PROBE:N or PROBE:N:len=M, e.g. postgresql:query__start:0")]
    BadStr(String),
    #[error("--str '{0}': no traced probe matches")]
    StrMatchesNothing(String),
    #[error("--str '{spec}': {probe} has {nargs} argument{}", if *nargs == 1 { "" } else { "s" })]
    StrNoArg {
        spec: String,
        probe: String,
        nargs: usize,
    },
    #[error("--str '{spec}': argument {index} of {probe} is {what}, not a pointer to a string")]
    StrNotPointer {
        spec: String,
        probe: String,
        index: usize,
        what: String,
    },
    #[error("--str '{spec}': another --str rule already reads argument {index} of {probe} with a different length")]
    StrTwice {
        spec: String,
        probe: String,
        index: usize,
    },
    #[error("--str '{spec}': the length argument {len} of {probe} is {what}")]
    StrLenArg {
        spec: String,
        probe: String,
        len: usize,
        what: String,
    },
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
    #[error("--span '{0}': START and END must be different probes")]
    SameStartAndEnd(String),
    #[error("--key {key}: {probe} has {nargs} argument{}; the key must be one of them and readable", if *nargs == 1 { "" } else { "s" })]
    KeyArg {
        key: u8,
        probe: String,
        nargs: usize,
    },
    #[error("--key {0}: the key is an argument index, 0 to 11")]
    KeyIndex(usize),
    #[error("too many span names ({0}); at most {1} can be tracked (each has kernel histograms of its own): narrow the patterns, e.g. fn:main.* rather than fn:*")]
    TooManyPairs(usize, u32),
}

impl SpanRule {
    pub fn parse(s: &str) -> Result<SpanRule, SpanError> {
        let bad = || SpanError::BadRule(s.to_string());
        let (a, b) = s.split_once('=').ok_or_else(bad)?;
        let rule = SpanRule {
            start: ProbeRef::parse(a.trim()).ok_or_else(bad)?,
            end: ProbeRef::parse(b.trim()).ok_or_else(bad)?,
            key: None,
        };
        // A probe that both opens and closes would pair every hit with the one before.
        if rule.start == rule.end {
            return Err(SpanError::SameStartAndEnd(s.to_string()));
        }
        Ok(rule)
    }
}

/// `--str PROBE:N`: read argument N of PROBE as a NUL-terminated string. PROBE is a glob
/// (`name`, `provider:name`, `'*:query__*'`). For a function probe, `fn:GLOB:N` is argument N
/// at entry and `fn:GLOB:ret` the return value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StrRule {
    pub probe: crate::util::pattern::Pattern,
    pub index: usize,
    /// `:len=M`: the string is exactly argument M bytes long, not NUL-terminated.
    pub len_arg: Option<usize>,
    /// `:ret`: the return value of a function probe (its return site's argument 0).
    pub ret: bool,
    /// The rule as given, for error messages.
    pub spec: String,
}

impl StrRule {
    pub fn parse(s: &str) -> Result<StrRule, SpanError> {
        let bad = || SpanError::BadStr(s.to_string());
        let (mut probe, mut n) = s.rsplit_once(':').ok_or_else(bad)?;
        let mut len_arg = None;
        if let Some(m) = n.strip_prefix("len=") {
            let m: usize = m.parse().map_err(|_| bad())?;
            if m >= MAX_ARGS {
                return Err(SpanError::StrIndex {
                    spec: s.to_string(),
                    index: m,
                    max: MAX_ARGS,
                });
            }
            len_arg = Some(m);
            (probe, n) = probe.rsplit_once(':').ok_or_else(bad)?;
        }
        let ret = n == "ret";
        let index: usize = if ret {
            0
        } else {
            n.parse().map_err(|_| bad())?
        };
        if index >= MAX_ARGS {
            return Err(SpanError::StrIndex {
                spec: s.to_string(),
                index,
                max: MAX_ARGS,
            });
        }
        if probe.is_empty() {
            return Err(bad());
        }
        Ok(StrRule {
            probe: crate::util::pattern::Pattern::parse(probe).map_err(|_| bad())?,
            index,
            len_arg,
            ret,
            spec: s.to_string(),
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
    /// The probes that close it (commit or abort, return or error), in rule order.
    pub ends: Vec<String>,
    /// Paired by the value of this argument (a span id, an instance key) rather than as the
    /// innermost open span of the thread.
    pub key: Option<u8>,
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
    /// Makes `start` open a span that `end` closes. A start that already opens a span gains
    /// another end; otherwise a probe takes one role, and the first rule that claims it wins.
    /// Returns whether the pair (or the extra end) was added.
    fn add(
        &mut self,
        start: &ProbeName,
        stem: &str,
        end: &str,
        key: Option<u8>,
        id_spans: &[(String, String)],
    ) -> bool {
        let e = ProbeName {
            provider: start.provider.clone(),
            name: end.to_string(),
        };
        if self.roles.contains_key(&e) {
            return false;
        }
        match self.roles.get(start) {
            Some(Role::Start(id)) => {
                let id = *id;
                let pair = &mut self.pairs[id as usize];
                // One span name pairs one way: an extra end cannot bring its own key.
                if key.is_some() && key != pair.key {
                    return false;
                }
                pair.ends.push(end.to_string());
                self.roles.insert(e, Role::End(id));
                true
            }
            Some(_) => false,
            None => {
                let id = self.pairs.len() as u32;
                // usdt-markers' spans carry their span id first.
                let marked = id_spans
                    .iter()
                    .any(|(p, st)| *p == start.provider && st == stem);
                self.pairs.push(Pair {
                    provider: start.provider.clone(),
                    stem: stem.to_string(),
                    start: start.name.clone(),
                    ends: vec![end.to_string()],
                    key: key.or(marked.then_some(0)),
                });
                self.roles.insert(start.clone(), Role::Start(id));
                self.roles.insert(e, Role::End(id));
                true
            }
        }
    }

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
    // Explicit rules first: they override the naming conventions.
    for rule in rules {
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
                plan.add(p, &stem, &e.name, rule.key, id_spans);
                matched = true;
            }
        }
        // A typo in a rule would otherwise silently give no spans.
        if !matched {
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
            // Conventions never add ends to a span an explicit rule made.
            if plan.roles.contains_key(p) {
                continue;
            }
            for (start, ends) in AUTO_RULES {
                let Some(stem) = start.stem(&p.name) else {
                    continue;
                };
                let mut any = false;
                for end in *ends {
                    let e = ProbeName {
                        provider: p.provider.clone(),
                        name: end.apply(stem),
                    };
                    if present.contains(&e) {
                        plan.add(p, stem, &e.name, None, id_spans);
                        any = true;
                    }
                }
                if any {
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
        assert_eq!(plan.pairs[0].key, Some(0));
    }

    #[test]
    fn rule_and_str_parsing() {
        assert!(SpanRule::parse("a").is_err());
        assert!(SpanRule::parse("=b").is_err());
        assert!(SpanRule::parse("a=b=c").is_err());
        let r = StrRule::parse("postgresql:query__start:0").unwrap();
        assert_eq!(r.index, 0);
        assert!(r.probe.matches("postgresql", "query__start"));
        assert!(!r.probe.matches("other", "query__start"));
        assert!(matches!(
            StrRule::parse("p:n:12"),
            Err(SpanError::StrIndex { index: 12, .. })
        ));
        assert!(StrRule::parse("p:n:x").is_err());
        let r = StrRule::parse("hotspot:class__loaded:0:len=1").unwrap();
        assert_eq!((r.index, r.len_arg), (0, Some(1)));
        assert!(r.probe.matches("hotspot", "class__loaded"));
        assert_eq!(StrRule::parse("n:3").unwrap().len_arg, None);
        assert!(StrRule::parse("n:0:len=x").is_err());
        assert!(StrRule::parse("n:0:len=").is_err());
        assert!(StrRule::parse("len=1").is_err());
        assert!(matches!(
            StrRule::parse("n:0:len=12"),
            Err(SpanError::StrIndex { index: 12, .. })
        ));
        assert!(StrRule::parse("n:3").unwrap().probe.matches("any", "n"));
    }

    #[test]
    fn common_stems() {
        assert_eq!(common_stem("query__start", "query__done"), "query");
        assert_eq!(common_stem("a", "b"), "a..b");
    }

    #[test]
    fn one_start_may_have_several_ends() {
        let ps = probes(&[
            ("pg", "transaction__start"),
            ("pg", "transaction__commit"),
            ("pg", "transaction__abort"),
        ]);
        // Explicit: both rules apply to one span name.
        let rules = [
            SpanRule::parse("transaction__start=transaction__commit").unwrap(),
            SpanRule::parse("transaction__start=transaction__abort").unwrap(),
        ];
        for (rules, auto) in [(&rules[..], false), (&[][..], true)] {
            let plan = plan(&ps, rules, &[], auto).unwrap();
            assert_eq!(plan.pairs.len(), 1, "auto={auto}");
            let Role::Start(id) = plan.role("pg", "transaction__start") else {
                panic!("auto={auto}")
            };
            assert_eq!(plan.role("pg", "transaction__commit"), Role::End(id));
            assert_eq!(plan.role("pg", "transaction__abort"), Role::End(id));
            assert_eq!(plan.pairs[0].stem, "transaction");
            assert_eq!(
                plan.pairs[0].ends,
                vec!["transaction__commit", "transaction__abort"]
            );
        }
    }

    #[test]
    fn a_key_pairs_by_argument_and_same_start_and_end_is_refused() {
        let ps = probes(&[("jvm", "gc__begin"), ("jvm", "gc__end")]);
        let rule = SpanRule {
            key: Some(2),
            ..SpanRule::parse("gc__begin=gc__end").unwrap()
        };
        let plan = plan(&ps, &[rule], &[], true).unwrap();
        assert_eq!(plan.pairs[0].key, Some(2));
        let auto = super::plan(&ps, &[], &[], true).unwrap();
        assert_eq!(auto.pairs[0].key, None);
        assert_eq!(
            SpanRule::parse("x=x"),
            Err(SpanError::SameStartAndEnd("x=x".into()))
        );
        assert_eq!(
            SpanRule::parse("p:x=p:x").unwrap_err().to_string(),
            "--span 'p:x=p:x': START and END must be different probes"
        );
    }
}
