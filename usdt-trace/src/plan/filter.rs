//! `--filter EXPR`: a small predicate language compiled for the kernel, which evaluates it
//! before a record is made (`usdt_trace_common::FilterProg`). Nothing here is ever evaluated in
//! user space on live records: what cannot be compiled is an error.
//!
//! ```text
//! expr  := group ('||' group)*
//! group := cmp ('&&' cmp)*
//! cmp   := field OP value          OP: == != < <= > >=
//! field := [PROBE ':'] 'arg'N | 'pid' | 'tid' | 'comm'
//! value := integer (123, -4, 0x1f) | for comm: a name, bare or quoted ('...' or "...")
//! ```
//!
//! `&&` binds tighter than `||` and there are no parentheses, so an expression is already the
//! `||` of `&&` groups the kernel evaluates. Numbers compare as signed 64-bit values. `argN`
//! is a span's start argument N (an event's argument N). `PROBE:argN` (PROBE a
//! `provider:name` or `name` glob, or a span's name) applies only to records of that probe:
//! argument N of that probe (a start, an end, an event; a span name means its start), and holds
//! for records of other probes, so `request:arg1 >= 500` leaves other probes alone.

use crate::util::pattern::Pattern;
use usdt_trace_common::{
    FilterProg, FilterTerm, FF_ARG, FF_COMM, FF_PID, FF_TID, FOP_EQ, FOP_GE, FOP_GT, FOP_LE,
    FOP_LT, FOP_NE, FT_GROUP_END, FT_PROBE, MAX_ARGS, MAX_FILTER_TERMS,
};

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("--filter {expr:?}: {msg}")]
    Syntax { expr: String, msg: String },
    /// `suggest`: `; did you mean F?` or empty.
    #[error(
        "--filter {expr:?}: {field:?} is not a field (expected argN, PROBE:argN, pid, tid or comm){suggest}"
    )]
    Field {
        expr: String,
        field: String,
        suggest: String,
    },
    /// What the grammar has no place for, at its column (1-based, in characters).
    #[error("--filter {expr:?}: column {col}: {msg}; {GRAMMAR}")]
    At {
        expr: String,
        col: usize,
        msg: String,
    },
    #[error("--filter {expr:?}: arg{index}: probes have at most {MAX_ARGS} arguments (arg0 to arg{})", MAX_ARGS - 1)]
    ArgIndex { expr: String, index: usize },
    #[error("--filter {expr:?}: {value:?} is not a number for {field}")]
    Number {
        expr: String,
        field: String,
        value: String,
    },
    #[error("--filter {expr:?}: comm is compared with == or != only")]
    CommOrder { expr: String },
    #[error("--filter {expr:?}: comm {value:?} is longer than the kernel's 15 bytes")]
    CommLength { expr: String, value: String },
    #[error("--filter {expr:?}: {field} cannot be compiled for the kernel (string arguments are not compared in the kernel; filter them with jq)")]
    NotCompilable { expr: String, field: String },
    #[error(
        "--filter {expr:?}: {n} comparisons, the kernel program takes at most {MAX_FILTER_TERMS}"
    )]
    TooLong { expr: String, n: usize },
    #[error("--filter {expr:?}: {probe:?} matches no traced event, span or span start (a span's arguments are its start's; end arguments are not filtered in the kernel)")]
    NoProbe { expr: String, probe: String },
    #[error("--filter {expr:?}: probe {probe} has no argument {index} (it has {count}); a missing argument would read as 0")]
    ProbeArgCount {
        expr: String,
        probe: String,
        index: u8,
        count: usize,
    },
    #[error("--filter {expr:?}: arg{index}: no traced probe has an argument {index} (the most is {most})")]
    NoArg {
        expr: String,
        index: u8,
        most: usize,
    },
}

/// The grammar in one line, for errors about what it has no place for.
pub const GRAMMAR: &str = "the grammar is FIELD OP VALUE (FIELD: argN, PROBE:argN, pid, tid, comm; OP: == != < <= > >=) joined by && and || (&& first; no parentheses)";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    Arg(u8),
    Pid,
    Tid,
    Comm,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Num(i64),
    Comm([u8; 16]),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    /// Only records of this probe (or span) are tested.
    pub probe: Option<Pattern>,
    pub field: Field,
    pub op: Op,
    pub value: Value,
}

/// A parsed `--filter`: `&&` groups joined by `||`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    pub text: String,
    pub groups: Vec<Vec<Term>>,
}

const OPS: [(&str, Op); 6] = [
    ("==", Op::Eq),
    ("!=", Op::Ne),
    ("<=", Op::Le),
    (">=", Op::Ge),
    ("<", Op::Lt),
    (">", Op::Gt),
];

impl Filter {
    pub fn parse(expr: &str) -> Result<Filter, FilterError> {
        let syntax = |msg: &str| FilterError::Syntax {
            expr: expr.to_string(),
            msg: msg.to_string(),
        };
        if expr.trim().is_empty() {
            return Err(syntax("empty expression"));
        }
        check_chars(expr)?;
        let mut groups = Vec::new();
        let mut n = 0;
        for group in expr.split("||") {
            let mut terms = Vec::new();
            for cmp in group.split("&&") {
                let cmp = cmp.trim();
                if cmp.is_empty() {
                    return Err(syntax("a comparison is missing around && or ||"));
                }
                terms.push(parse_cmp(expr, cmp)?);
                n += 1;
            }
            groups.push(terms);
        }
        if n > MAX_FILTER_TERMS {
            return Err(FilterError::TooLong {
                expr: expr.to_string(),
                n,
            });
        }
        Ok(Filter {
            text: expr.to_string(),
            groups,
        })
    }

    pub fn terms(&self) -> impl Iterator<Item = &Term> {
        self.groups.iter().flatten()
    }

    /// Whether any comparison reads an argument.
    pub fn reads_args(&self) -> bool {
        self.terms().any(|t| matches!(t.field, Field::Arg(_)))
    }

    /// `--tid T...` on top of this filter: `(F) && (tid == T1 || tid == T2 ...)`, distributed
    /// so the program stays `||` of `&&` groups. `None` for the filter alone gives the tid
    /// test alone.
    pub fn with_tids(filter: Option<Filter>, tids: &[u32]) -> Result<Option<Filter>, FilterError> {
        if tids.is_empty() {
            return Ok(filter);
        }
        let tid = |t: u32| Term {
            probe: None,
            field: Field::Tid,
            op: Op::Eq,
            value: Value::Num(t as i64),
        };
        let list = tids.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        let (text, base) = match filter {
            Some(f) => (format!("{} && tid in {}", f.text, list.join(",")), f.groups),
            None => (format!("tid in {}", list.join(",")), vec![vec![]]),
        };
        let groups: Vec<Vec<Term>> = base
            .iter()
            .flat_map(|g| {
                tids.iter().map(move |&t| {
                    let mut g = g.clone();
                    g.push(tid(t));
                    g
                })
            })
            .collect();
        let n = groups.iter().map(Vec::len).sum();
        if n > MAX_FILTER_TERMS {
            return Err(FilterError::TooLong { expr: text, n });
        }
        Ok(Some(Filter { text, groups }))
    }

    /// The kernel program. Term i is bit i of the site masks ([`Filter::site_mask`]).
    pub fn compile(&self) -> FilterProg {
        let mut prog = FilterProg::default();
        let mut i = 0;
        for g in &self.groups {
            for (j, t) in g.iter().enumerate() {
                let mut k = FilterTerm {
                    op: match t.op {
                        Op::Eq => FOP_EQ,
                        Op::Ne => FOP_NE,
                        Op::Lt => FOP_LT,
                        Op::Le => FOP_LE,
                        Op::Gt => FOP_GT,
                        Op::Ge => FOP_GE,
                    },
                    ..FilterTerm::default()
                };
                k.field = match t.field {
                    Field::Arg(n) => {
                        k.arg = n;
                        FF_ARG
                    }
                    Field::Pid => FF_PID,
                    Field::Tid => FF_TID,
                    Field::Comm => FF_COMM,
                };
                match t.value {
                    Value::Num(v) => k.value = v as u64,
                    Value::Comm(c) => k.comm = c,
                }
                if t.probe.is_some() {
                    k.flags |= FT_PROBE;
                }
                if j + 1 == g.len() {
                    k.flags |= FT_GROUP_END;
                }
                prog.terms[i] = k;
                i += 1;
            }
        }
        prog.nterms = i as u32;
        prog
    }

    /// The filter mask of a site: bit i when term i names this probe. `span` is the name of
    /// the span this site starts (a span name in a term means its start).
    pub fn site_mask(&self, provider: &str, name: &str, span: Option<&str>) -> u32 {
        let mut mask = 0;
        for (i, t) in self.terms().enumerate() {
            if let Some(p) = &t.probe {
                if p.matches(provider, name) || span.is_some_and(|s| p.matches(provider, s)) {
                    mask |= 1 << i;
                }
            }
        }
        mask
    }

    /// Every argument a term reads must exist: a term that names a probe, on each site it
    /// applies to (`sites` gives each site's name, argument count and mask, as
    /// [`Filter::site_mask`] made it); a term that names none, on some site at least. The
    /// kernel would read a missing argument as 0, so `tick:arg3 == 7` on a probe with two
    /// arguments would quietly test 0 == 7 (bpftrace refuses it too).
    pub fn check_arg_counts<'a>(
        &self,
        sites: impl Iterator<Item = (&'a str, &'a str, usize, u32)> + Clone,
    ) -> Result<(), FilterError> {
        let most = sites.clone().map(|(_, _, n, _)| n).max();
        for (i, t) in self.terms().enumerate() {
            let Field::Arg(index) = t.field else { continue };
            if t.probe.is_some() {
                if let Some((provider, name, count, _)) = sites
                    .clone()
                    .find(|(_, _, count, mask)| mask & (1 << i) != 0 && index as usize >= *count)
                {
                    return Err(FilterError::ProbeArgCount {
                        expr: self.text.clone(),
                        probe: format!("{provider}:{name}"),
                        index,
                        count,
                    });
                }
            } else if let Some(most) = most.filter(|&m| index as usize >= m) {
                return Err(FilterError::NoArg {
                    expr: self.text.clone(),
                    index,
                    most,
                });
            }
        }
        Ok(())
    }

    /// Every term that names a probe must name a traced one: checked against all the sites'
    /// masks, so a typo is an error rather than a filter that holds for everything.
    pub fn check_probes(&self, masks: &[u32]) -> Result<(), FilterError> {
        let all = masks.iter().fold(0, |a, m| a | m);
        for (i, t) in self.terms().enumerate() {
            if let Some(p) = &t.probe {
                if all & (1 << i) == 0 {
                    return Err(FilterError::NoProbe {
                        expr: self.text.clone(),
                        probe: p.to_string(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Parentheses and operators the grammar does not have (`=>`, `=`), outside quoted names,
/// named at their column: splitting on `&&` and `||` first would report them as odd fields.
fn check_chars(expr: &str) -> Result<(), FilterError> {
    let chars: Vec<char> = expr.chars().collect();
    let at = |col: usize, msg: String| FilterError::At {
        expr: expr.to_string(),
        col: col + 1,
        msg,
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' || c == '"' {
            // A quoted comm name: skip to its closing quote.
            i += chars[i + 1..]
                .iter()
                .position(|&q| q == c)
                .map_or(chars.len(), |n| n + 2);
            continue;
        }
        if c == '(' || c == ')' {
            return Err(at(
                i,
                format!("'{c}': parentheses are not part of the grammar"),
            ));
        }
        if "<>=!".contains(c) {
            let run: String = chars[i..]
                .iter()
                .take_while(|c| "<>=!".contains(**c))
                .collect();
            if !OPS.iter().any(|(t, _)| *t == run) {
                let reversed: String = run.chars().rev().collect();
                let meant = match run.as_str() {
                    "=" | "===" => Some("=="),
                    "<>" => Some("!="),
                    _ => OPS.iter().map(|(t, _)| *t).find(|t| *t == reversed),
                };
                return Err(at(
                    i,
                    format!(
                        "{run:?} is not an operator{}",
                        crate::plan::suggest::did_you_mean(meant)
                    ),
                ));
            }
            i += run.chars().count();
            continue;
        }
        i += 1;
    }
    Ok(())
}

fn parse_cmp(expr: &str, cmp: &str) -> Result<Term, FilterError> {
    let (at, op_text, op) = OPS
        .iter()
        .filter_map(|(t, op)| cmp.find(t).map(|at| (at, *t, *op)))
        // Leftmost operator; at one position the longer one (`<=` before `<`), as OPS lists.
        .min_by_key(|(at, _, _)| *at)
        .ok_or_else(|| FilterError::Syntax {
            expr: expr.to_string(),
            msg: format!("{cmp:?}: expected a comparison (== != < <= > >=)"),
        })?;
    let lhs = cmp[..at].trim();
    let rhs = cmp[at + op_text.len()..].trim();
    if rhs.is_empty() || OPS.iter().any(|(t, _)| rhs.starts_with(t)) {
        return Err(FilterError::Syntax {
            expr: expr.to_string(),
            msg: format!("{cmp:?}: expected a value after {op_text}"),
        });
    }
    let (probe, field_text) = match lhs.rsplit_once(':') {
        Some((p, f)) => {
            let probe = Pattern::parse(p).map_err(|e| FilterError::Syntax {
                expr: expr.to_string(),
                msg: e.to_string(),
            })?;
            (Some(probe), f.trim())
        }
        None => (None, lhs),
    };
    let field = match field_text {
        "pid" => Field::Pid,
        "tid" => Field::Tid,
        "comm" => Field::Comm,
        f if f.starts_with("str") && f[3..].chars().all(|c| c.is_ascii_digit()) => {
            return Err(FilterError::NotCompilable {
                expr: expr.to_string(),
                field: f.to_string(),
            })
        }
        f => match f.strip_prefix("arg").map(str::parse::<usize>) {
            Some(Ok(n)) if n < MAX_ARGS => Field::Arg(n as u8),
            Some(Ok(n)) => {
                return Err(FilterError::ArgIndex {
                    expr: expr.to_string(),
                    index: n,
                })
            }
            _ => {
                let args: Vec<String> = (0..MAX_ARGS).map(|n| format!("arg{n}")).collect();
                let fields = ["pid", "tid", "comm"]
                    .into_iter()
                    .chain(args.iter().map(String::as_str));
                return Err(FilterError::Field {
                    expr: expr.to_string(),
                    field: f.to_string(),
                    suggest: crate::plan::suggest::did_you_mean(crate::plan::suggest::closest(
                        f, fields,
                    )),
                });
            }
        },
    };
    if probe.is_some() && !matches!(field, Field::Arg(_)) {
        return Err(FilterError::Syntax {
            expr: expr.to_string(),
            msg: format!("{lhs:?}: only arguments are per probe (pid, tid and comm are not)"),
        });
    }
    let value = if field == Field::Comm {
        if !matches!(op, Op::Eq | Op::Ne) {
            return Err(FilterError::CommOrder {
                expr: expr.to_string(),
            });
        }
        let name = unquote(rhs);
        if name.len() > 15 {
            return Err(FilterError::CommLength {
                expr: expr.to_string(),
                value: name.to_string(),
            });
        }
        let mut c = [0u8; 16];
        c[..name.len()].copy_from_slice(name.as_bytes());
        Value::Comm(c)
    } else {
        Value::Num(parse_num(rhs).ok_or_else(|| FilterError::Number {
            expr: expr.to_string(),
            field: field_text.to_string(),
            value: rhs.to_string(),
        })?)
    };
    Ok(Term {
        probe,
        field,
        op,
        value,
    })
}

fn unquote(s: &str) -> &str {
    for q in ['\'', '"'] {
        if let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    s
}

fn parse_num(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let v = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(h) => u64::from_str_radix(h, 16).ok()?,
        None => digits.parse::<u64>().ok()?,
    };
    if neg {
        0i64.checked_sub_unsigned(v)
    } else {
        // Up to u64::MAX: the bits of an unsigned argument, compared as signed.
        Some(v as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use usdt_trace_common::FilterInput;

    fn input<'a>(args: &'a [u64; MAX_ARGS], comm: &'a [u8; 16]) -> FilterInput<'a> {
        FilterInput {
            pid: 100,
            tid: 101,
            comm,
            args,
            end_args: None,
            start_mask: 0,
            end_mask: 0,
        }
    }

    fn comm(s: &str) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..s.len()].copy_from_slice(s.as_bytes());
        c
    }

    #[test]
    fn grammar() {
        let f = Filter::parse("arg1 >= 500 && pid == 7 || comm == 'postgres'").unwrap();
        assert_eq!(f.groups.len(), 2);
        assert_eq!(f.groups[0].len(), 2);
        assert_eq!(
            f.groups[0][0],
            Term {
                probe: None,
                field: Field::Arg(1),
                op: Op::Ge,
                value: Value::Num(500)
            }
        );
        assert_eq!(f.groups[1][0].value, Value::Comm(comm("postgres")));
        let f = Filter::parse("request:arg1<0x10").unwrap();
        let t = &f.groups[0][0];
        assert_eq!(t.probe.as_ref().unwrap().as_str(), "request");
        assert_eq!((t.field.clone(), t.op), (Field::Arg(1), Op::Lt));
        assert_eq!(t.value, Value::Num(16));
        let f = Filter::parse("app:request__start:arg0 != -3").unwrap();
        assert_eq!(
            f.groups[0][0].probe.as_ref().unwrap().as_str(),
            "app:request__start"
        );
        assert_eq!(f.groups[0][0].value, Value::Num(-3));
        assert_eq!(
            Filter::parse("tid==5").unwrap().groups[0][0].field,
            Field::Tid
        );
    }

    #[test]
    fn grammar_errors_name_the_grammar_and_the_column() {
        let e = |s: &str| Filter::parse(s).unwrap_err().to_string();
        assert_eq!(
            e("(arg1 >= 500)"),
            format!("--filter \"(arg1 >= 500)\": column 1: '(': parentheses are not part of the grammar; {GRAMMAR}")
        );
        assert_eq!(
            e("arg1 => 500"),
            format!("--filter \"arg1 => 500\": column 6: \"=>\" is not an operator; did you mean >=?; {GRAMMAR}")
        );
        assert!(e("pdi == 3")
            .ends_with("(expected argN, PROBE:argN, pid, tid or comm); did you mean pid?"));
        assert!(e("agr1 == 3").ends_with("did you mean arg1?"));
        // Inside a quoted name, parentheses and '=' are the name's.
        assert!(Filter::parse("comm == '(sd-pam)'").is_ok());
        assert!(Filter::parse("comm == \"a=b\" || arg1 != 2").is_ok());
    }

    #[test]
    fn errors_are_clear() {
        let e = |s: &str| Filter::parse(s).unwrap_err();
        assert!(matches!(e(""), FilterError::Syntax { .. }));
        assert!(matches!(e("arg1"), FilterError::Syntax { .. }));
        assert!(matches!(e("arg1 >"), FilterError::Syntax { .. }));
        assert!(matches!(e("arg1 > 1 &&"), FilterError::Syntax { .. }));
        assert!(matches!(e("arg1 = 1"), FilterError::At { col: 6, .. }));
        assert!(matches!(e("foo == 1"), FilterError::Field { .. }));
        assert!(matches!(
            e("arg12 == 1"),
            FilterError::ArgIndex { index: 12, .. }
        ));
        assert!(matches!(e("arg1 == x"), FilterError::Number { .. }));
        assert!(matches!(e("comm < x"), FilterError::CommOrder { .. }));
        assert!(matches!(
            e("comm == averyveryverylongname"),
            FilterError::CommLength { .. }
        ));
        assert!(matches!(
            e("str0 == 'SELECT'"),
            FilterError::NotCompilable { .. }
        ));
        assert!(matches!(e("p:pid == 1"), FilterError::Syntax { .. }));
        let long = ["pid == 1"; MAX_FILTER_TERMS + 1].join(" || ");
        assert!(matches!(e(&long), FilterError::TooLong { .. }));
        let msg = e("arg1 == x").to_string();
        assert_eq!(
            msg,
            "--filter \"arg1 == x\": \"x\" is not a number for arg1"
        );
    }

    #[test]
    fn compiled_programs_evaluate_like_the_expression() {
        let mut args = [0u64; MAX_ARGS];
        args[1] = 600;
        let c = comm("postgres");
        let x = input(&args, &c);
        let eval = |s: &str, x: &FilterInput| Filter::parse(s).unwrap().compile().eval(x);
        assert!(eval("arg1 >= 500", &x));
        assert!(!eval("arg1 < 500", &x));
        assert!(eval("arg1 == 600 && pid == 100 && tid == 101", &x));
        assert!(!eval("arg1 == 600 && pid == 1", &x));
        assert!(eval("pid == 1 || comm == postgres", &x));
        assert!(!eval("comm != postgres", &x));
        assert!(!eval("comm == postgre", &x));
        // && binds tighter than ||.
        assert!(eval("pid == 1 && tid == 1 || arg1 > 5", &x));
        assert!(!eval("pid == 1 || tid == 1 && arg1 > 5000", &x));
        // Signed: an argument holding -1 is less than 0.
        args[0] = -1i64 as u64;
        let x = input(&args, &c);
        assert!(eval("arg0 < 0", &x));
        assert!(eval("arg0 == -1", &x));
    }

    #[test]
    fn tids_join_every_group() {
        let f = Filter::with_tids(
            Some(Filter::parse("pid == 1 || pid == 2").unwrap()),
            &[5, 6],
        )
        .unwrap()
        .unwrap();
        assert_eq!(f.groups.len(), 4);
        let prog = f.compile();
        let args = [0u64; MAX_ARGS];
        let c = comm("x");
        let mut x = input(&args, &c);
        x.pid = 2;
        x.tid = 6;
        assert!(prog.eval(&x));
        x.tid = 7;
        assert!(!prog.eval(&x));
        let only = Filter::with_tids(None, &[7]).unwrap().unwrap().compile();
        assert!(only.eval(&x));
        assert!(Filter::with_tids(None, &[]).unwrap().is_none());
        assert!(matches!(
            Filter::with_tids(None, &[1; MAX_FILTER_TERMS + 1]),
            Err(FilterError::TooLong { .. })
        ));
    }

    #[test]
    fn an_argument_the_probe_does_not_have_is_refused_naming_the_probe_and_its_count() {
        let f = Filter::parse("tick:arg3 == 7").unwrap();
        // (provider, name, arguments, mask): smoke:tick has 2 arguments and the term names it.
        let sites = [("smoke", "op__start", 4, 0), ("smoke", "tick", 2, 1)];
        assert_eq!(
            f.check_arg_counts(sites.iter().copied()).unwrap_err().to_string(),
            "--filter \"tick:arg3 == 7\": probe smoke:tick has no argument 3 (it has 2); a missing argument would read as 0"
        );
        // Another probe's four arguments do not make up for it; its own fourth would.
        let enough = [("smoke", "op__start", 2, 0), ("smoke", "tick", 4, 1)];
        assert!(f.check_arg_counts(enough.iter().copied()).is_ok());
        // Without a probe: some traced probe must have it.
        let any = Filter::parse("arg5 > 1").unwrap();
        assert_eq!(
            any.check_arg_counts(sites.iter().copied()).unwrap_err(),
            FilterError::NoArg {
                expr: "arg5 > 1".into(),
                index: 5,
                most: 4
            }
        );
        assert!(Filter::parse("arg3 > 1")
            .unwrap()
            .check_arg_counts(sites.iter().copied())
            .is_ok());
    }

    #[test]
    fn probe_terms_apply_only_to_their_probe() {
        let f = Filter::parse("request:arg1 >= 500").unwrap();
        assert_eq!(f.site_mask("app", "request__start", Some("request")), 1);
        assert_eq!(f.site_mask("app", "other", None), 0);
        assert!(f.check_probes(&[0, 1]).is_ok());
        assert!(matches!(
            f.check_probes(&[0, 0]),
            Err(FilterError::NoProbe { .. })
        ));
        let prog = f.compile();
        let mut args = [0u64; MAX_ARGS];
        let mut end = [0u64; MAX_ARGS];
        let c = comm("x");
        // Another probe: the term says nothing about it.
        assert!(prog.eval(&input(&args, &c)));
        let mut x = input(&args, &c);
        x.start_mask = 1;
        assert!(!prog.eval(&x));
        args[1] = 500;
        let mut x = input(&args, &c);
        x.start_mask = 1;
        assert!(prog.eval(&x));
        // Named by its end probe: the end arguments are tested.
        let f = Filter::parse("request__end:arg0 == 7").unwrap();
        let prog = f.compile();
        end[0] = 7;
        let mut x = input(&args, &c);
        x.end_args = Some(&end);
        x.end_mask = 1;
        assert!(prog.eval(&x));
        end[0] = 8;
        let mut x = input(&args, &c);
        x.end_args = Some(&end);
        x.end_mask = 1;
        assert!(!prog.eval(&x));
    }
}
