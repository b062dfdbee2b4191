//! A `--by` key: parsed from the flag, checked against the plan (which site supplies each
//! field), and the kernel's raw key turned back into what the user named.

use crate::output::json::json_str;
use crate::output::{escape_invalid, ArgFmt};
use crate::plan::Plan;
use usdt_trace_common::agg::{
    comm_of_words, AggConfig, ByKey, BySites, BY_ARG, BY_ARG_NONE, BY_COMM, BY_FIELDS, BY_PID,
    BY_PROBE, BY_STR, BY_TID,
};
use usdt_trace_common::{SiteRole, MAX_ARGS, STRS_CUT};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AggError {
    #[error("--by {0:?}: expected argN, PROBE:argN, str0, pid, tid, comm or probe (several joined by commas)")]
    BadKey(String),
    #[error("--by {key:?}: only str0 (the first captured string) can be a key today")]
    StrIndex { key: String },
    #[error("--by {key:?}: no traced {what} has argument {n}")]
    NoArg {
        key: String,
        what: &'static str,
        n: usize,
    },
    #[error("--by {key:?}: no traced probe is named {probe:?}")]
    NoProbe { key: String, probe: String },
    #[error("--by {key:?}: probe {probe} has no argument {n} (it has {count}: arg0 to arg{})", .count.saturating_sub(1))]
    ProbeArg {
        key: String,
        probe: String,
        n: usize,
        count: usize,
    },
    #[error("--by {key:?}: arg{n}: probes have at most {MAX_ARGS} arguments (arg0 to arg{})", MAX_ARGS - 1)]
    ArgIndex {
        key: String,
        /// The digits as given (they may not fit any integer).
        n: String,
    },
    #[error("--by str0: no traced probe captures a string; add --str PROBE:N")]
    NoStr,
    #[error("--by {key:?}: at most {BY_FIELDS} fields in one key")]
    TooManyFields { key: String },
    #[error("--by {key:?}: {field:?} is named twice")]
    Repeated { key: String, field: String },
}

/// What one field of a `--by` key is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ByKind {
    /// Argument `n` of the span's start probe, or, with `probe`, of that probe (start or end,
    /// or the probe counted).
    Arg {
        probe: Option<String>,
        n: usize,
    },
    /// The first captured string (`--str`): the start's, else the end's.
    Str,
    Pid,
    Tid,
    Comm,
    /// For spans the end probe that closed it; for counts the probe itself.
    Probe,
}

impl ByKind {
    /// The kernel's `BY_*` code.
    fn code(&self) -> u32 {
        match self {
            ByKind::Arg { .. } => BY_ARG,
            ByKind::Str => BY_STR,
            ByKind::Pid => BY_PID,
            ByKind::Tid => BY_TID,
            ByKind::Comm => BY_COMM,
            ByKind::Probe => BY_PROBE,
        }
    }

    /// Key words the field takes (the string field is kept apart).
    fn words(&self) -> usize {
        match self {
            ByKind::Comm => 2,
            ByKind::Str => 0,
            _ => 1,
        }
    }
}

/// One field of a key, and the word of the kernel key it is kept in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ByField {
    pub kind: ByKind,
    /// As the user wrote it.
    pub text: String,
    pub word: usize,
}

/// A parsed `--by KEY[,KEY...]`: one field, or several (a tuple, as bpftrace's
/// `@[comm, arg1]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct By {
    pub fields: Vec<ByField>,
    /// As the user wrote it, for headings and JSON.
    pub text: String,
}

/// `argN` → N; `None` when it is not of that form. An N past what any probe can have is an
/// error that says the limit, rather than that argN was expected.
fn arg_index(key: &str, s: &str) -> Result<Option<usize>, AggError> {
    let Some(digits) = s.strip_prefix("arg") else {
        return Ok(None);
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    match digits.parse::<usize>() {
        Ok(n) if n < MAX_ARGS => Ok(Some(n)),
        _ => Err(AggError::ArgIndex {
            key: key.to_string(),
            n: digits.to_string(),
        }),
    }
}

fn parse_field(s: &str) -> Result<ByKind, AggError> {
    Ok(match s {
        "pid" => ByKind::Pid,
        "tid" => ByKind::Tid,
        "comm" => ByKind::Comm,
        "probe" => ByKind::Probe,
        "str0" => ByKind::Str,
        _ if s.starts_with("str") && s[3..].parse::<u32>().is_ok() => {
            return Err(AggError::StrIndex { key: s.into() })
        }
        _ => match s.rsplit_once(':') {
            Some((probe, a)) if !probe.is_empty() => ByKind::Arg {
                probe: Some(probe.to_string()),
                n: arg_index(s, a)?.ok_or_else(|| AggError::BadKey(s.into()))?,
            },
            Some(_) => return Err(AggError::BadKey(s.into())),
            None => ByKind::Arg {
                probe: None,
                n: arg_index(s, s)?.ok_or_else(|| AggError::BadKey(s.into()))?,
            },
        },
    })
}

impl By {
    pub fn parse(s: &str) -> Result<By, AggError> {
        let mut fields: Vec<ByField> = Vec::new();
        let mut word = 0;
        for f in s.split(',').map(str::trim) {
            if f.is_empty() {
                return Err(AggError::BadKey(s.into()));
            }
            if fields.len() == BY_FIELDS {
                return Err(AggError::TooManyFields { key: s.into() });
            }
            let kind = parse_field(f)?;
            if fields.iter().any(|g| g.kind == kind) {
                return Err(AggError::Repeated {
                    key: s.into(),
                    field: f.into(),
                });
            }
            fields.push(ByField {
                word,
                text: f.to_string(),
                kind: kind.clone(),
            });
            word += kind.words();
        }
        Ok(By {
            fields,
            text: s.to_string(),
        })
    }

    /// The kernel's settings for this key.
    pub fn config(&self) -> AggConfig {
        let mut c = AggConfig::default();
        for (i, f) in self.fields.iter().enumerate().take(BY_FIELDS) {
            c.by[i] = f.kind.code();
            c.word[i] = f.word as u32;
        }
        c.str_keys = self.has_str() as u32;
        c
    }

    /// Whether a field is the captured string.
    pub fn has_str(&self) -> bool {
        self.fields.iter().any(|f| f.kind == ByKind::Str)
    }

    /// Whether the kernel must read arguments (and strings) to build the key.
    pub fn reads_args(&self) -> bool {
        self.fields
            .iter()
            .any(|f| matches!(f.kind, ByKind::Arg { .. } | ByKind::Str))
    }
}

/// `--by` resolved against the plan: what the kernel needs per site, and how to print keys.
#[derive(Clone, Debug)]
pub struct KeyPlan {
    pub by: By,
    /// Per site (cookie), per field: the argument the field is read from there, or
    /// `BY_ARG_NONE`.
    pub by_sites: Vec<BySites>,
    /// Per field: argument keys of spans print as signed numbers (one of the sites supplying
    /// them is signed); counted keys print as their own site's argument does.
    pub signed: Vec<bool>,
    /// Keys are per hit (`--count`): a key's id is its site.
    pub count: bool,
}

fn probe_matches(rule: &str, provider: &str, name: &str) -> bool {
    match rule.split_once(':') {
        Some((p, n)) => p == provider && n == name,
        None => rule == name,
    }
}

impl KeyPlan {
    /// Checks `by` against the traced sites. `count`: keys are per hit (every site can supply
    /// an argument), not per span (an unqualified `argN` is the start's).
    pub fn new(plan: &Plan, by: &By, count: bool) -> Result<KeyPlan, AggError> {
        let mut by_sites = vec![[BY_ARG_NONE; BY_FIELDS]; plan.sites.len()];
        let mut signed = vec![false; by.fields.len()];
        for (fi, field) in by.fields.iter().enumerate() {
            match &field.kind {
                ByKind::Arg { probe: None, n } => {
                    for (i, (site, spec)) in plan.sites.iter().zip(plan.specs.iter()).enumerate() {
                        let eligible = count || spec.role == SiteRole::START;
                        if eligible && site.args.len() > *n {
                            by_sites[i][fi] = *n as u8;
                            signed[fi] |= site.args[*n] == ArgFmt::Signed;
                        }
                    }
                    if by_sites.iter().all(|b| b[fi] == BY_ARG_NONE) {
                        return Err(AggError::NoArg {
                            key: field.text.clone(),
                            what: if count { "probe" } else { "span start" },
                            n: *n,
                        });
                    }
                }
                ByKind::Arg { probe: Some(p), n } => {
                    let mut any = false;
                    for (i, site) in plan.sites.iter().enumerate() {
                        if !probe_matches(p, &site.provider, &site.name) {
                            continue;
                        }
                        any = true;
                        if site.args.len() <= *n {
                            return Err(AggError::ProbeArg {
                                key: field.text.clone(),
                                probe: format!("{}:{}", site.provider, site.name),
                                n: *n,
                                count: site.args.len(),
                            });
                        }
                        by_sites[i][fi] = *n as u8;
                        signed[fi] |= site.args[*n] == ArgFmt::Signed;
                    }
                    if !any {
                        return Err(AggError::NoProbe {
                            key: field.text.clone(),
                            probe: p.clone(),
                        });
                    }
                }
                ByKind::Str if plan.sites.iter().all(|s| s.strs.is_empty()) => {
                    return Err(AggError::NoStr);
                }
                _ => {}
            }
        }
        Ok(KeyPlan {
            by: by.clone(),
            by_sites,
            signed,
            count,
        })
    }

    /// The value of a kernel key, as shown.
    pub fn value(&self, plan: &Plan, k: &ByKey) -> Key {
        let word = |w: usize| k.val.get(w).copied().unwrap_or(0);
        let field = |fi: usize, f: &ByField| -> KeyVal {
            let signed = if self.count {
                let site = plan.sites.get(k.id as usize);
                let n = self
                    .by_sites
                    .get(k.id as usize)
                    .map_or(BY_ARG_NONE, |b| b[fi]) as usize;
                site.and_then(|s| s.args.get(n)) == Some(&ArgFmt::Signed)
            } else {
                self.signed.get(fi).copied().unwrap_or(false)
            };
            match f.kind {
                ByKind::Arg { .. } if signed => KeyVal::Int(word(f.word) as i64),
                ByKind::Arg { .. } | ByKind::Pid | ByKind::Tid => KeyVal::Uint(word(f.word)),
                // Exactly the bytes the kernel kept (the length counts a NUL after them): a
                // string read by its length argument may hold NULs of its own.
                // No string at all (the length counts the NUL, so an empty string is 1).
                ByKind::Str if k.str_len == 0 => KeyVal::NoStr,
                ByKind::Str => {
                    let n = (k.str_len as usize).saturating_sub(1).min(k.str.len());
                    let b = k.str[..n].to_vec();
                    if k.str_state == u32::from(STRS_CUT) {
                        KeyVal::CutStr(b)
                    } else {
                        KeyVal::Str(b)
                    }
                }
                ByKind::Comm => {
                    let b = comm_of_words([word(f.word), word(f.word + 1)]);
                    // Up to the first NUL: a comm shorter than 16 bytes is padded with them.
                    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                    KeyVal::Str(b[..end].to_vec())
                }
                ByKind::Probe => match plan.sites.get(word(f.word) as usize) {
                    Some(s) => KeyVal::Str(format!("{}:{}", s.provider, s.name).into_bytes()),
                    None => KeyVal::Uint(word(f.word)),
                },
            }
        };
        Key(self
            .by
            .fields
            .iter()
            .enumerate()
            .map(|(i, f)| field(i, f))
            .collect())
    }
}

/// A key as printed: one value per field of `--by`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub Vec<KeyVal>);

impl Key {
    /// One field's key (tests, and single-field callers).
    pub fn one(v: KeyVal) -> Key {
        Key(vec![v])
    }

    /// As the text tables show it: the fields joined by ", " (bpftrace's `@[comm, arg1]`).
    pub(super) fn text(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(KeyVal::text).collect();
        parts.join(", ")
    }

    /// `"key":VALUE` for one field, `"key":[VALUE,...]` for several; then for strings what a
    /// span's strings say beside them: `"key_truncated":true` when one was cut at
    /// `--str-max`, `"key_escaped":true` when bytes that are not UTF-8 are written `\\xNN`
    /// (as in span strings, never replaced by U+FFFD).
    pub(super) fn json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b",\"key\":");
        let (mut cut, mut escaped) = (false, false);
        let many = self.0.len() != 1;
        if many {
            out.push(b'[');
        }
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let (c, e) = v.json_value(out);
            cut |= c;
            escaped |= e;
        }
        if many {
            out.push(b']');
        }
        if cut {
            out.extend_from_slice(b",\"key_truncated\":true");
        }
        if escaped {
            out.extend_from_slice(b",\"key_escaped\":true");
        }
    }
}

/// One field's value as printed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyVal {
    Uint(u64),
    Int(i64),
    Str(Vec<u8>),
    /// The first `--str-max` bytes of a longer string: the key of every string that begins
    /// with them, so a row apart from an uncut string of the same bytes.
    CutStr(Vec<u8>),
    /// `str0` of a span that captured no string (its probes have no `--str`): shown as an
    /// empty string in text and JSON, and as [`NO_STRING_LABEL`] in Prometheus, where `""`
    /// cannot be told from no label.
    NoStr,
}

/// The Prometheus label value of [`KeyVal::NoStr`]: a backslash before `(` is no escape the
/// label escaping of real strings writes (theirs are `\\`, `\xNN`, `\u{..}`), so no string a
/// program holds has this label.
pub const NO_STRING_LABEL: &str = "\\(no string)";

impl KeyVal {
    /// Strings quoted once, every byte recoverable (`\xNN` for bytes that are not UTF-8,
    /// never U+FFFD), a cut one followed by `…` outside the quotes.
    fn text(&self) -> String {
        match self {
            KeyVal::Uint(v) => v.to_string(),
            KeyVal::Int(v) => v.to_string(),
            KeyVal::NoStr => "\"\"".to_string(),
            KeyVal::Str(b) | KeyVal::CutStr(b) => {
                let mut s = String::new();
                crate::output::text::quoted(&mut s, b);
                if matches!(self, KeyVal::CutStr(_)) {
                    s.push('…');
                }
                s
            }
        }
    }

    /// The JSON value; (cut, escaped).
    fn json_value(&self, out: &mut Vec<u8>) -> (bool, bool) {
        match self {
            KeyVal::Uint(v) => out.extend_from_slice(v.to_string().as_bytes()),
            KeyVal::Int(v) => out.extend_from_slice(v.to_string().as_bytes()),
            KeyVal::NoStr => out.extend_from_slice(b"\"\""),
            KeyVal::Str(b) | KeyVal::CutStr(b) => {
                let (s, escaped) = escape_invalid(b);
                json_str(out, s.as_bytes());
                return (matches!(self, KeyVal::CutStr(_)), escaped);
            }
        }
        (false, false)
    }
}
