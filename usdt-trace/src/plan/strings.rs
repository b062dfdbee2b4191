//! Arguments as the printers and the kernel see them: `--str` rules → which arguments are
//! read as strings and into which of a record's slots, `--args` names, and how each argument
//! prints.

use super::*;

/// One argument read as a string: which, and which argument holds its length (None:
/// NUL-terminated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StrCapture {
    pub arg: usize,
    pub len_arg: Option<usize>,
}

/// Per chosen site, the arguments read as strings, in rule order. A rule must match some
/// traced probe and name, at each probe it matches, an argument that is there and
/// address-sized (and a length argument that is there): anything else is an error rather
/// than a rule quietly ignored (or a number quietly printed as null). A bad rule is an error
/// even when another rule is good.
pub(super) fn string_args(
    sites: &[&crate::elf::Site],
    rules: &[StrRule],
) -> Result<Vec<Vec<StrCapture>>, SpanError> {
    let mut out = vec![Vec::new(); sites.len()];
    for r in rules {
        let mut matched = false;
        for (i, s) in sites.iter().enumerate() {
            // `fn:F:N` reads at F's entry, `fn:F:ret` at its return; `:ret` means nothing at
            // a note's site.
            // A function's site is named by the function (`fn:F:N`, `fn:F:ret`) or by the site
            // itself, as the tool prints it (`fn:F__entry:N`, `fn:F__return:N`).
            let by_site = !s.kind.is_note() && r.probe.matches(&s.provider, &s.name);
            let name = match s.kind {
                SiteKind::Note if r.ret => continue,
                SiteKind::Note => s.name.as_str(),
                _ if by_site && !r.ret => s.name.as_str(),
                SiteKind::FnEntry | SiteKind::GoEntry if r.ret => continue,
                SiteKind::FnReturn
                | SiteKind::FnRetInsn
                | SiteKind::GoRetInsn
                | SiteKind::FnTailRet
                    if !r.ret =>
                {
                    continue
                }
                SiteKind::FnEntry
                | SiteKind::GoEntry
                | SiteKind::FnReturn
                | SiteKind::FnRetInsn
                | SiteKind::GoRetInsn
                | SiteKind::FnTailRet => crate::elf::function_of(s).unwrap_or(&s.name),
            };
            if !r.probe.matches(&s.provider, name) {
                continue;
            }
            matched = true;
            let probe = format!("{}:{}", s.provider, s.name);
            // A Go string is a pointer and the length after it.
            if s.kind.is_go() && r.index + 1 >= s.args.len() {
                return Err(SpanError::StrNotPointer {
                    spec: r.spec.clone(),
                    probe,
                    index: r.index,
                    what: "the last Go register (a Go string is a pointer and a length)".into(),
                });
            }
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
            let len_arg = match r.len_arg {
                Some(m) => {
                    match s.args.get(m) {
                        Some(l) if l.readable() && m != r.index => {}
                        other => {
                            let what = match other {
                                None => format!("missing ({} has {})", probe, s.args.len()),
                                Some(_) if m == r.index => "the string's own pointer".into(),
                                Some(_) => "unreadable".into(),
                            };
                            return Err(SpanError::StrLenArg {
                                spec: r.spec.clone(),
                                probe,
                                len: m,
                                what,
                            });
                        }
                    }
                    Some(m)
                }
                None if s.kind.is_go() => Some(r.index + 1),
                None => None,
            };
            let cap = StrCapture {
                arg: r.index,
                len_arg,
            };
            match out[i].iter().find(|c: &&StrCapture| c.arg == r.index) {
                Some(c) if *c != cap => {
                    return Err(SpanError::StrTwice {
                        spec: r.spec.clone(),
                        probe,
                        index: r.index,
                    })
                }
                Some(_) => {}
                None => out[i].push(cap),
            }
        }
        if !matched {
            return Err(SpanError::StrMatchesNothing(r.spec.clone()));
        }
    }
    Ok(out)
}

/// Per chosen site, the names of its arguments (`--args`; a later rule wins). A rule must
/// match some traced probe and name no more arguments than each probe it matches has.
pub(super) fn arg_names(
    sites: &[&crate::elf::Site],
    rules: &[ArgNames],
) -> Result<Vec<Vec<String>>, PlanError> {
    let mut out = vec![Vec::new(); sites.len()];
    for r in rules {
        let mut matched = false;
        for (i, s) in sites.iter().enumerate() {
            if !r.probe.matches(&s.provider, &s.name) {
                continue;
            }
            matched = true;
            if r.names.len() > s.args.len() {
                return Err(PlanError::ArgsTooMany {
                    spec: r.spec.clone(),
                    probe: format!("{}:{}", s.provider, s.name),
                    names: r.names.len(),
                    nargs: s.args.len(),
                });
            }
            out[i] = r.names.clone();
        }
        if !matched {
            return Err(PlanError::ArgsMatchNothing(r.spec.clone()));
        }
    }
    Ok(out)
}

/// Gives each string capture its slot in the record's strings: an event's and a span start's
/// from 0, a span end's after the most any start of its span takes, so a span's start and end
/// strings all reach its one record. More than `MAX_STRS` in one record is an error.
pub(super) fn assign_str_slots(plan: &mut Plan) -> Result<(), PlanError> {
    let start_n = |plan: &Plan, pair: u32| {
        plan.specs
            .iter()
            .zip(&plan.sites)
            .filter(|(sp, si)| si.pair == Some(pair) && sp.role == SiteRole::START)
            .map(|(sp, _)| sp.nstrs as usize)
            .max()
            .unwrap_or(0)
    };
    for cookie in 0..plan.specs.len() {
        let spec = plan.specs[cookie];
        let n = spec.nstrs as usize;
        if n == 0 {
            continue;
        }
        let site = &plan.sites[cookie];
        let (base, what) = match (spec.role, site.pair) {
            (SiteRole::END, Some(p)) => {
                let pi = &plan.pairs[p as usize];
                (
                    start_n(plan, p),
                    format!("span {}:{}", pi.provider, pi.stem),
                )
            }
            (SiteRole::START, Some(p)) => {
                let pi = &plan.pairs[p as usize];
                (0, format!("span {}:{}", pi.provider, pi.stem))
            }
            _ => (0, format!("{}:{}", site.provider, site.name)),
        };
        if base + n > MAX_STRS {
            return Err(PlanError::StrTooMany {
                what,
                n: base + n,
                max: MAX_STRS,
            });
        }
        let spec = &mut plan.specs[cookie];
        let mut strs = Vec::with_capacity(n);
        for (k, d) in spec.strs.iter_mut().take(n).enumerate() {
            d.slot = (base + k) as u8;
            strs.push(StrArg {
                arg: d.arg as usize,
                slot: base + k,
                len_arg: (d.len_arg != STR_NONE).then_some(d.len_arg as usize),
            });
        }
        plan.sites[cookie].strs = strs;
    }
    Ok(())
}

pub(super) fn arg_fmt(a: &ArgSpec) -> ArgFmt {
    if !a.readable() {
        ArgFmt::Unreadable
    } else if a.signed {
        ArgFmt::Signed
    } else {
        ArgFmt::Unsigned
    }
}
