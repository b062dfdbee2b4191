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

use crate::argspec::{ArgLoc, ArgSpec};
use crate::elf::ObjectProbes;
use crate::output::{ArgFmt, PairInfo, Record, SiteInfo, View};
use crate::pattern::Pattern;
use crate::spans::{self, ProbeName, Role, SpanError, SpanRule, StrRule};
use std::collections::BTreeSet;
use usdt_trace_common::{
    ArgDesc, ArgKind, SiteRole, SiteSpec, ID_NONE, MAX_ARGS, REG_NONE, STR_NONE,
};

/// Where one uprobe goes in one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachPoint {
    /// File offset of the probed instruction.
    pub offset: u64,
    /// File offset of the semaphore the kernel raises while attached, if the probe has one.
    pub ref_ctr: Option<u64>,
    /// Index into the spec table, handed to the program as the BPF cookie.
    pub cookie: u32,
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
    /// Pair probes by naming convention (`X__start`/`X__end`, ...).
    pub auto_span: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("no probe matches {patterns} in {targets}")]
    NoMatch { patterns: String, targets: String },
    #[error(transparent)]
    Span(#[from] SpanError),
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
}

/// Decides which sites of `objects` (each with the name it is shown by) are traced and how.
pub fn build(objects: &[(&str, &ObjectProbes)], opts: &PlanOptions) -> Result<Plan, PlanError> {
    let matches = |p: &str, n: &str| {
        opts.patterns.is_empty() || opts.patterns.iter().any(|pat| pat.matches(p, n))
    };
    // (object, site) of every chosen site, in object then note order: the cookie order.
    let chosen: Vec<(usize, usize)> = objects
        .iter()
        .enumerate()
        .flat_map(|(oi, (_, o))| {
            o.sites
                .iter()
                .enumerate()
                .filter(|(_, s)| matches(&s.provider, &s.name))
                .map(move |(si, _)| (oi, si))
        })
        .collect();
    if chosen.is_empty() {
        let join = |v: Vec<String>| v.join(" ");
        return Err(PlanError::NoMatch {
            patterns: join(opts.patterns.iter().map(|p| p.to_string()).collect()),
            targets: objects
                .iter()
                .map(|(shown, _)| *shown)
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let site = |(oi, si): (usize, usize)| &objects[oi].1.sites[si];
    let str_args = string_args(
        &chosen.iter().map(|&c| site(c)).collect::<Vec<_>>(),
        opts.strs,
    )?;

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
    let roles = spans::plan(&names, opts.spans, &id_spans, opts.auto_span)?;

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
        ..Plan::default()
    };
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
        let str_arg = str_args[cookie];
        plan.specs
            .push(site_spec(&s.args, s.pc, role, key, str_arg));
        plan.sites.push(SiteInfo {
            provider: s.provider.clone(),
            name: s.name.clone(),
            args: s.args.iter().map(arg_fmt).collect(),
            str_arg,
            pair,
        });
        let point = AttachPoint {
            offset: s.file_offset,
            ref_ctr: s.semaphore_offset,
            cookie: cookie as u32,
        };
        match plan.objects.last_mut() {
            Some(o) if o.object == c.0 => o.points.push(point),
            _ => plan.objects.push(ObjectPlan {
                object: c.0,
                points: vec![point],
            }),
        }
    }
    Ok(plan)
}

/// Per chosen site, the argument read as a string. A rule must match some traced probe and
/// name, at each probe it matches, an argument that is there and address-sized: anything else
/// is an error rather than a rule quietly ignored (or a number quietly printed as null).
fn string_args(
    sites: &[&crate::elf::Site],
    rules: &[StrRule],
) -> Result<Vec<Option<usize>>, SpanError> {
    let mut out = vec![None; sites.len()];
    for r in rules {
        let mut matched = false;
        for (i, s) in sites.iter().enumerate() {
            if !r.probe.matches(&s.provider, &s.name) {
                continue;
            }
            matched = true;
            let probe = format!("{}:{}", s.provider, s.name);
            let Some(a) = s.args.get(r.index) else {
                return Err(SpanError::StrNoArg {
                    spec: r.spec.clone(),
                    probe,
                    nargs: s.args.len(),
                });
            };
            if !a.readable() || a.size != 8 {
                let what = if !a.readable() {
                    "unreadable".to_string()
                } else {
                    format!("a {}-byte value", a.size)
                };
                return Err(SpanError::StrNotPointer {
                    spec: r.spec.clone(),
                    probe,
                    index: r.index,
                    what,
                });
            }
            match out[i] {
                Some(other) if other != r.index => {
                    return Err(SpanError::StrTwice {
                        spec: r.spec.clone(),
                        probe,
                        other,
                    })
                }
                _ => out[i] = Some(r.index),
            }
        }
        if !matched {
            return Err(SpanError::StrMatchesNothing(r.spec.clone()));
        }
    }
    Ok(out)
}

fn arg_fmt(a: &ArgSpec) -> ArgFmt {
    if !a.readable() {
        ArgFmt::Unreadable
    } else if a.signed {
        ArgFmt::Signed
    } else {
        ArgFmt::Unsigned
    }
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
        format!(
            "Attached {n} probe site{} in {nobj} object{}{spans}; Ctrl-C to stop",
            s(n),
            s(nobj)
        )
    }

    /// Looks up the sites a record names; None for a record that names no known site (a
    /// malformed record, counted as lost by the caller).
    pub fn resolve<'a>(&'a self, rec: Record<'a>) -> Option<View<'a>> {
        match rec {
            Record::Event(r) => Some(View::Event {
                site: self.sites.get(r.hdr.site as usize)?,
                rec: r,
            }),
            Record::Span(r) => {
                let end = self.sites.get(r.hdr.site as usize)?;
                let start = self.sites.get(r.start_site as usize)?;
                let pair = self.pairs.get(end.pair? as usize)?;
                Some(View::Span {
                    pair,
                    start,
                    end,
                    rec: r,
                })
            }
        }
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
    key: Option<u8>,
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
    if let Some(k) = key.filter(|&k| args.get(k as usize).is_some_and(|a| a.readable())) {
        if !matches!(role, Role::Event) {
            spec.id_arg = k;
        }
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
    use crate::argspec::{parse_arg, Arch};
    use crate::elf::{Site, SiteInsn};
    use usdt_trace_common::{Acct, EventRecord, RecordHeader, RecordKind, SpanRecord, STR_LEN};

    fn site(provider: &str, name: &str, off: u64, sema: Option<u64>, args: &[&str]) -> Site {
        Site {
            provider: provider.into(),
            name: name.into(),
            pc: 0x1000 + off,
            base: 0,
            semaphore: sema.map_or(0, |s| s + 0x4000),
            file_offset: off,
            semaphore_offset: sema,
            args_raw: args.join(" "),
            args: args
                .iter()
                .map(|a| parse_arg(a, Arch::X86_64).resolve(|_| None))
                .collect(),
            insn: SiteInsn::Nop,
            insn_bytes: "90".into(),
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
            auto_span: true,
        }
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
        assert_eq!(plan.specs[0].str_arg, 0);
        assert_eq!(plan.sites[0].str_arg, Some(0));
        assert_eq!(plan.specs[1].str_arg, STR_NONE);
        assert_eq!(plan.sites[1].str_arg, None);
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
                            cookie: 0
                        },
                        AttachPoint {
                            offset: 0x30,
                            ref_ctr: Some(0x22),
                            cookie: 1
                        },
                        AttachPoint {
                            offset: 0x40,
                            ref_ctr: None,
                            cookie: 2
                        },
                    ]
                },
                ObjectPlan {
                    object: 1,
                    points: vec![AttachPoint {
                        offset: 0x50,
                        ref_ctr: None,
                        cookie: 3
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
        assert_eq!(plan.sites[0].str_arg, Some(0));
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
            str_len: 0,
            _pad: 0,
            args: [0; MAX_ARGS],
            str: [0; STR_LEN],
        };
        match plan.resolve(Record::Event(&ev)) {
            Some(View::Event { site, .. }) => assert_eq!(site.name, "tick"),
            _ => panic!("event not resolved"),
        }
        let bad = EventRecord {
            hdr: hdr(RecordKind::EVENT, 99),
            ..ev
        };
        assert!(plan.resolve(Record::Event(&bad)).is_none());
        let mut sp = SpanRecord {
            hdr: hdr(RecordKind::SPAN, 1),
            start_site: 0,
            start_tid: 0,
            start_ns: 0,
            acct: Acct::default(),
            acct_valid: 0,
            waker_pid: 0,
            waker_tid: 0,
            str_len: 0,
            longest_off_ns: 0,
            waker_comm: [0; 16],
            args: [0; MAX_ARGS],
            end_args: [0; MAX_ARGS],
            str: [0; STR_LEN],
        };
        match plan.resolve(Record::Span(&sp)) {
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
        assert!(plan.resolve(Record::Span(&sp)).is_none());
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

    /// gcc -no-pie's `sym(%reg)` / `sym(,%idx,s)`: absolute memory once elf.rs resolved it.
    #[test]
    fn symbolic_displacement_maps_to_absolute_mem() {
        use crate::argspec::{parse_arg, Arch};
        let resolved = |s: &str, addr: Option<u64>| {
            let mut a = parse_arg(s, Arch::X86_64).resolve(|_| None);
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

/// Per site (cookie), the `--filter` terms that name its probe (`Filter::site_mask`): events
/// by their own name, span starts by theirs or their span's. Ends get none: a span's arguments
/// are its start's, and end arguments are not filtered. A term naming none of these is an error.
pub fn filter_masks(
    plan: &Plan,
    filter: &crate::filter::Filter,
) -> Result<Vec<u32>, crate::filter::FilterError> {
    let masks: Vec<u32> = plan
        .sites
        .iter()
        .zip(&plan.specs)
        .map(|(s, spec)| match (spec.role, s.pair) {
            (SiteRole::EVENT, _) => filter.site_mask(&s.provider, &s.name, None),
            (SiteRole::START, Some(p)) => {
                let stem = plan.pairs.get(p as usize).map(|p| p.stem.as_str());
                filter.site_mask(&s.provider, &s.name, stem)
            }
            _ => 0,
        })
        .collect();
    filter.check_probes(&masks)?;
    Ok(masks)
}
