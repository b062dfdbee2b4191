//! `--by`, `--count` and `--top`: what the kernel aggregates (`usdt-trace-ebpf/src/agg.rs`),
//! set up from the plan and read back into tables, in text and JSON.   (pure)
//!
//! The kernel keys on raw values (an argument word, a string's bytes, a site cookie); here
//! they become what the user named: cookies of one probe merge into its `provider:name`,
//! numbers print signed when the argument is, and rows sort by count, largest first.

use crate::output::hist::{percentile, PERCENTILES};
use crate::output::json::json_str;
use crate::output::text::clean;
use crate::output::{escape_invalid, fmt_duration, ArgFmt};
use crate::plan::Plan;
use std::collections::HashMap;
use std::fmt::Write as _;
use usdt_trace_common::agg::{
    comm_of_words, AggConfig, ByKey, BySites, BY_ARG, BY_ARG_NONE, BY_COMM, BY_FIELDS, BY_PID,
    BY_PROBE, BY_STR, BY_TID,
};
use usdt_trace_common::{Hist, SiteRole, SpanRecord, MAX_ARGS, STRS_CUT};

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
    fn text(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(KeyVal::text).collect();
        parts.join(", ")
    }

    /// `"key":VALUE` for one field, `"key":[VALUE,...]` for several; then for strings what a
    /// span's strings say beside them: `"key_truncated":true` when one was cut at
    /// `--str-max`, `"key_escaped":true` when bytes that are not UTF-8 are written `\\xNN`
    /// (as in span strings, never replaced by U+FFFD).
    fn json(&self, out: &mut Vec<u8>) {
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
}

impl KeyVal {
    /// Strings quoted once, every byte recoverable (`\xNN` for bytes that are not UTF-8,
    /// never U+FFFD), a cut one followed by `…` outside the quotes.
    fn text(&self) -> String {
        match self {
            KeyVal::Uint(v) => v.to_string(),
            KeyVal::Int(v) => v.to_string(),
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
            KeyVal::Str(b) | KeyVal::CutStr(b) => {
                let (s, escaped) = escape_invalid(b);
                json_str(out, s.as_bytes());
                return (matches!(self, KeyVal::CutStr(_)), escaped);
            }
        }
        (false, false)
    }
}

fn hist_merge(into: &mut Hist, h: &Hist) {
    for (a, b) in into.buckets.iter_mut().zip(h.buckets.iter()) {
        *a += b;
    }
    into.count += h.count;
    into.sum += h.sum;
    into.max = into.max.max(h.max);
}

use crate::output::hist::delta_one as hist_delta;

/// The kernel's `--by` histograms at one moment, cumulative: per key, and per span name the
/// "other" histogram of spans whose key found no room (the map full), and the "unkeyed" one
/// of spans whose key could not be kept though the map had room (no kernel memory at hand).
#[derive(Clone, Default)]
pub struct ByHists {
    pub keys: HashMap<ByKey, Hist>,
    pub other: Vec<Hist>,
    pub unkeyed: Vec<Hist>,
}

/// Row label of spans (hits) whose key found no room in a map that was not full.
const UNKEYED_LABEL: &str = "unkeyed (no kernel memory)";

impl ByHists {
    /// What this snapshot adds to `before`.
    pub fn since(&self, before: &ByHists) -> ByHists {
        let zero = Hist::default();
        ByHists {
            keys: self
                .keys
                .iter()
                .map(|(k, h)| (*k, hist_delta(h, before.keys.get(k).unwrap_or(&zero))))
                .filter(|(_, h)| h.count > 0)
                .collect(),
            other: self
                .other
                .iter()
                .enumerate()
                .map(|(i, h)| hist_delta(h, before.other.get(i).unwrap_or(&zero)))
                .collect(),
            unkeyed: self
                .unkeyed
                .iter()
                .enumerate()
                .map(|(i, h)| hist_delta(h, before.unkeyed.get(i).unwrap_or(&zero)))
                .collect(),
        }
    }
}

/// One span name's rows: keys by count (largest first), then "other" and "unkeyed".
pub struct KeyTable<T> {
    pub pair: usize,
    pub rows: Vec<(Key, T)>,
    pub other: T,
    pub unkeyed: T,
}

/// Groups a snapshot into one table per span name, keys merged by their printed value.
pub fn by_tables(plan: &Plan, kp: &KeyPlan, h: &ByHists) -> Vec<KeyTable<Hist>> {
    let mut per: Vec<HashMap<Key, Hist>> = vec![HashMap::new(); plan.pairs.len()];
    for (k, hist) in &h.keys {
        if let Some(m) = per.get_mut(k.id as usize) {
            hist_merge(m.entry(kp.value(plan, k)).or_default(), hist);
        }
    }
    // With str0, span names that capture no string would only show one "" key: left out.
    let has_str = |pair: usize| {
        plan.sites
            .iter()
            .any(|s| s.pair == Some(pair as u32) && !s.strs.is_empty())
    };
    per.into_iter()
        .enumerate()
        .filter(|(pair, _)| !kp.by.has_str() || has_str(*pair))
        .filter_map(|(pair, m)| {
            let other = h.other.get(pair).copied().unwrap_or_default();
            let unkeyed = h.unkeyed.get(pair).copied().unwrap_or_default();
            if m.is_empty() && other.count == 0 && unkeyed.count == 0 {
                return None;
            }
            let mut rows: Vec<(Key, Hist)> = m.into_iter().collect();
            rows.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(&b.0)));
            Some(KeyTable {
                pair,
                rows,
                other,
                unkeyed,
            })
        })
        .collect()
}

/// Interval bounds of a block: (start, end) monotonic ns, and whether it is the whole run.
pub type Block = Option<((u64, u64), bool)>;

fn block_json(out: &mut Vec<u8>, block: Block) {
    if let Some(((a, b), total)) = block {
        let _ = write!(
            Vec8(out),
            ",\"interval_start_ns\":{a},\"interval_end_ns\":{b},\"total\":{total}"
        );
    }
}

pub fn block_text(block: Block, t0: u64) -> String {
    match block {
        Some(((a, b), total)) => {
            let secs = |t: u64| t.saturating_sub(t0) as f64 / 1e9;
            let what = if total { "total" } else { "interval" };
            format!("--- {what} {:.3}s to {:.3}s ---\n", secs(a), secs(b))
        }
        None => String::new(),
    }
}

/// Columns a (cleaned or quoted, so printable) label takes on a terminal: `format!`'s width
/// counts chars, which misaligned keys of wide (CJK, emoji) or combining characters.
fn display_width(s: &str) -> usize {
    if s.is_ascii() {
        return s.len();
    }
    s.chars()
        .map(|c| match c as u32 {
            0x0300..=0x036f
            | 0x1ab0..=0x1aff
            | 0x1dc0..=0x1dff
            | 0x200b..=0x200d
            | 0x20d0..=0x20ff
            | 0xfe00..=0xfe0f
            | 0xfe20..=0xfe2f => 0,
            0x1100..=0x115f
            | 0x2e80..=0x303e
            | 0x3041..=0x33ff
            | 0x3400..=0x4dbf
            | 0x4e00..=0x9fff
            | 0xa000..=0xa4cf
            | 0xac00..=0xd7a3
            | 0xf900..=0xfaff
            | 0xfe30..=0xfe4f
            | 0xff00..=0xff60
            | 0xffe0..=0xffe6
            | 0x1f300..=0x1f64f
            | 0x1f900..=0x1f9ff
            | 0x20000..=0x3fffd => 2,
            _ => 1,
        })
        .sum()
}

/// Widest the key column of a `--by` table grows; a longer key gets a line of its own, its
/// numbers under the columns on the next.
const KEY_COLUMN_MAX: usize = 64;

/// `indent` and `label` padded to `w` columns (by display width), or when wider, the label on
/// a line of its own and `w` columns of spaces on the next: the numbers that follow stay in
/// their columns either way.
fn label_cell(s: &mut String, indent: &str, label: &str, w: usize) {
    let lw = display_width(label);
    s.push_str(indent);
    s.push_str(label);
    if lw > w {
        s.push('\n');
        s.push_str(indent);
        s.push_str(&" ".repeat(w));
    } else {
        s.push_str(&" ".repeat(w - lw));
    }
}

fn hist_stats_text(s: &mut String, label: &str, w: usize, h: &Hist) {
    let mean = h.sum.checked_div(h.count).unwrap_or(0);
    label_cell(s, "  ", label, w);
    let _ = write!(s, " {:>9} {:>10}", h.count, fmt_duration(mean));
    for (_, q) in PERCENTILES {
        let _ = write!(s, " {:>10}", fmt_duration(percentile(h, q).unwrap_or(0)));
    }
    let _ = writeln!(s, " {:>10}", fmt_duration(h.max));
}

/// `--hist --by` in text: per span name, a row per key sorted by count.
pub fn by_text(plan: &Plan, kp: &KeyPlan, tables: &[KeyTable<Hist>], max_keys: u32) -> String {
    let mut s = String::new();
    for t in tables {
        let Some(p) = plan.pairs.get(t.pair) else {
            continue;
        };
        let _ = writeln!(
            s,
            "@{}:{} by {} ({} keys)",
            crate::output::text::clean(&p.provider),
            crate::output::text::clean(&p.stem),
            kp.by.text,
            t.rows.len()
        );
        // Not `clean`ed: `text` escapes already, and a second pass doubled backslashes.
        let keys: Vec<String> = t.rows.iter().map(|(k, _)| k.text()).collect();
        let other = format!("other (beyond --max-keys {max_keys})");
        let w = keys
            .iter()
            .map(|k| display_width(k))
            .chain([display_width(&other), display_width(UNKEYED_LABEL), 32])
            .filter(|&n| n <= KEY_COLUMN_MAX)
            .max()
            .unwrap_or(32);
        label_cell(&mut s, "  ", "KEY", w);
        let _ = writeln!(
            s,
            " {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "COUNT", "MEAN", "P50", "P90", "P99", "MAX"
        );
        for (k, (_, h)) in keys.iter().zip(&t.rows) {
            hist_stats_text(&mut s, k, w, h);
        }
        if t.other.count > 0 {
            hist_stats_text(&mut s, &other, w, &t.other);
        }
        if t.unkeyed.count > 0 {
            hist_stats_text(&mut s, UNKEYED_LABEL, w, &t.unkeyed);
        }
        s.push('\n');
        // Then each key's histogram, as bpftrace's `@[key] = hist()` draws one per key.
        let head = format!(
            "@{}:{}",
            crate::output::text::clean(&p.provider),
            crate::output::text::clean(&p.stem)
        );
        let drawn = keys
            .iter()
            .map(String::as_str)
            .zip(t.rows.iter().map(|(_, h)| h))
            .chain((t.other.count > 0).then_some((other.as_str(), &t.other)))
            .chain((t.unkeyed.count > 0).then_some((UNKEYED_LABEL, &t.unkeyed)));
        for (label, h) in drawn {
            let _ = writeln!(s, "{head}[{label}]: {} spans", h.count);
            crate::output::hist::draw_bars(&mut s, std::slice::from_ref(h));
            s.push('\n');
        }
    }
    s
}

fn hist_stats_json(out: &mut Vec<u8>, h: &Hist) {
    let _ = write!(Vec8(out), ",\"count\":{},\"sum_ns\":{}", h.count, h.sum);
    if h.count > 0 {
        for (p, q) in PERCENTILES {
            let _ = write!(Vec8(out), ",\"{p}_ns\":{}", percentile(h, q).unwrap_or(0));
        }
        let _ = write!(Vec8(out), ",\"max_ns\":{}", h.max);
    }
}

/// `--hist --by` in JSON: one `{"type":"hist_by",...}` line per key with its statistics and
/// its log-linear `buckets` (as `hist` lines have), and one with
/// `"other":true` (and `"key":null`) per span name that had keys beyond the map, and one with
/// `"unkeyed":true` per span name whose keys the kernel could not keep for want of memory.
pub fn by_json(
    out: &mut Vec<u8>,
    plan: &Plan,
    kp: &KeyPlan,
    tables: &[KeyTable<Hist>],
    block: Block,
) {
    for t in tables {
        let Some(p) = plan.pairs.get(t.pair) else {
            continue;
        };
        let head = |out: &mut Vec<u8>| {
            out.extend_from_slice(b"{\"type\":\"hist_by\",\"provider\":");
            json_str(out, p.provider.as_bytes());
            out.extend_from_slice(b",\"name\":");
            json_str(out, p.stem.as_bytes());
            out.extend_from_slice(b",\"by\":");
            json_str(out, kp.by.text.as_bytes());
            block_json(out, block);
        };
        for (k, h) in &t.rows {
            head(out);
            k.json(out);
            hist_stats_json(out, h);
            crate::output::hist::buckets_json(out, h);
            out.extend_from_slice(b"}\n");
        }
        if t.other.count > 0 {
            head(out);
            out.extend_from_slice(b",\"key\":null,\"other\":true");
            hist_stats_json(out, &t.other);
            crate::output::hist::buckets_json(out, &t.other);
            out.extend_from_slice(b"}\n");
        }
        if t.unkeyed.count > 0 {
            head(out);
            out.extend_from_slice(b",\"key\":null,\"unkeyed\":true");
            hist_stats_json(out, &t.unkeyed);
            crate::output::hist::buckets_json(out, &t.unkeyed);
            out.extend_from_slice(b"}\n");
        }
    }
}

/// The kernel's `--count` counters at one moment, cumulative.
#[derive(Clone, Default)]
pub struct Counts {
    /// Per site (cookie).
    pub sites: Vec<u64>,
    /// Per (site, key), with `--by`.
    pub keys: HashMap<ByKey, u64>,
    /// Per site: hits whose key found no room (the map full).
    pub other: Vec<u64>,
    /// Per site: hits whose key could not be kept though the map had room.
    pub unkeyed: Vec<u64>,
}

impl Counts {
    pub fn since(&self, before: &Counts) -> Counts {
        let sub = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter()
                .enumerate()
                .map(|(i, x)| x.saturating_sub(b.get(i).copied().unwrap_or(0)))
                .collect()
        };
        Counts {
            sites: sub(&self.sites, &before.sites),
            keys: self
                .keys
                .iter()
                .map(|(k, c)| {
                    (
                        *k,
                        c.saturating_sub(before.keys.get(k).copied().unwrap_or(0)),
                    )
                })
                .filter(|(_, c)| *c > 0)
                .collect(),
            other: sub(&self.other, &before.other),
            unkeyed: sub(&self.unkeyed, &before.unkeyed),
        }
    }
}

/// Hits of one probe (its sites merged), and per key with `--by`.
pub struct ProbeCount {
    pub provider: String,
    pub name: String,
    pub count: u64,
    pub keys: Vec<(Key, u64)>,
    pub other: u64,
    pub unkeyed: u64,
}

/// Per probe, largest count first; probes that never fired are left out.
pub fn count_table(plan: &Plan, kp: Option<&KeyPlan>, c: &Counts) -> Vec<ProbeCount> {
    let mut idx: HashMap<(&str, &str), usize> = HashMap::new();
    let mut rows: Vec<ProbeCount> = Vec::new();
    let mut keys: Vec<HashMap<Key, u64>> = Vec::new();
    let mut row_of = |site: usize,
                      rows: &mut Vec<ProbeCount>,
                      keys: &mut Vec<HashMap<Key, u64>>|
     -> Option<usize> {
        let s = plan.sites.get(site)?;
        Some(
            *idx.entry((s.provider.as_str(), s.name.as_str()))
                .or_insert_with(|| {
                    rows.push(ProbeCount {
                        provider: s.provider.clone(),
                        name: s.name.clone(),
                        count: 0,
                        keys: Vec::new(),
                        other: 0,
                        unkeyed: 0,
                    });
                    keys.push(HashMap::new());
                    rows.len() - 1
                }),
        )
    };
    for (site, &n) in c.sites.iter().enumerate().filter(|(_, n)| **n > 0) {
        if let Some(r) = row_of(site, &mut rows, &mut keys) {
            rows[r].count += n;
            rows[r].other += c.other.get(site).copied().unwrap_or(0);
            rows[r].unkeyed += c.unkeyed.get(site).copied().unwrap_or(0);
        }
    }
    if let Some(kp) = kp {
        for (k, &n) in &c.keys {
            if let Some(r) = row_of(k.id as usize, &mut rows, &mut keys) {
                *keys[r].entry(kp.value(plan, k)).or_default() += n;
            }
        }
    }
    for (r, m) in rows.iter_mut().zip(keys) {
        r.keys = m.into_iter().collect();
        r.keys.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    }
    rows.retain(|r| r.count > 0);
    rows.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| (&a.provider, &a.name).cmp(&(&b.provider, &b.name)))
    });
    rows
}

/// `--count` in text: one line per probe (and an indented line per key).
pub fn count_text(rows: &[ProbeCount], kp: Option<&KeyPlan>, max_keys: u32) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:<48} {:>12}", "PROBE", "COUNT");
    for r in rows {
        let probe = format!("{}:{}", r.provider, r.name);
        label_cell(&mut s, "", &clean(&probe), 48);
        let _ = writeln!(s, " {:>12}", r.count);
        if let Some(kp) = kp {
            for (k, n) in &r.keys {
                let label = format!("{} = {}", clean(&kp.by.text), k.text());
                label_cell(&mut s, "  ", &label, 46);
                let _ = writeln!(s, " {n:>12}");
            }
            if r.other > 0 {
                let label = format!("other (beyond --max-keys {max_keys})");
                label_cell(&mut s, "  ", &label, 46);
                let _ = writeln!(s, " {:>12}", r.other);
            }
            if r.unkeyed > 0 {
                label_cell(&mut s, "  ", UNKEYED_LABEL, 46);
                let _ = writeln!(s, " {:>12}", r.unkeyed);
            }
        }
    }
    s.push('\n');
    s
}

/// `--count` in JSON: `{"type":"count",...}` per probe, and with `--by` one per key (plus
/// `"other":true` with `"key":null` for hits beyond the map, and `"unkeyed":true` for hits
/// whose key the kernel could not keep).
pub fn count_json(out: &mut Vec<u8>, rows: &[ProbeCount], kp: Option<&KeyPlan>, block: Block) {
    for r in rows {
        let head = |out: &mut Vec<u8>| {
            out.extend_from_slice(b"{\"type\":\"count\",\"provider\":");
            json_str(out, r.provider.as_bytes());
            out.extend_from_slice(b",\"name\":");
            json_str(out, r.name.as_bytes());
            block_json(out, block);
        };
        head(out);
        let _ = writeln!(Vec8(out), ",\"count\":{}}}", r.count);
        let Some(kp) = kp else {
            continue;
        };
        for (k, n) in &r.keys {
            head(out);
            out.extend_from_slice(b",\"by\":");
            json_str(out, kp.by.text.as_bytes());
            k.json(out);
            let _ = writeln!(Vec8(out), ",\"count\":{n}}}");
        }
        if r.other > 0 {
            head(out);
            out.extend_from_slice(b",\"by\":");
            json_str(out, kp.by.text.as_bytes());
            let _ = writeln!(
                Vec8(out),
                ",\"key\":null,\"other\":true,\"count\":{}}}",
                r.other
            );
        }
        if r.unkeyed > 0 {
            head(out);
            out.extend_from_slice(b",\"by\":");
            json_str(out, kp.by.text.as_bytes());
            let _ = writeln!(
                Vec8(out),
                ",\"key\":null,\"unkeyed\":true,\"count\":{}}}",
                r.unkeyed
            );
        }
    }
}

/// The N longest spans seen, longest first. Bounded: a span shorter than the N-th is dropped.
#[derive(Clone)]
pub struct TopN {
    pub n: usize,
    spans: Vec<SpanRecord>,
}

fn dur(r: &SpanRecord) -> u64 {
    r.hdr.ts_ns.saturating_sub(r.start_ns)
}

impl TopN {
    pub fn new(n: usize) -> TopN {
        TopN {
            n,
            spans: Vec::with_capacity(n + 1),
        }
    }

    /// Offers a span; true when it entered.
    pub fn offer(&mut self, r: &SpanRecord) -> bool {
        let d = dur(r);
        if self.spans.len() == self.n && self.spans.last().is_none_or(|l| dur(l) >= d) {
            return false;
        }
        // After the equal ones: the earlier span keeps its rank.
        let at = self.spans.partition_point(|x| dur(x) >= d);
        self.spans.insert(at, *r);
        self.spans.truncate(self.n);
        true
    }

    /// The shortest duration that could still enter: the N-th longest once there are N,
    /// else 0 (everything could).
    pub fn threshold(&self) -> u64 {
        if self.spans.len() < self.n {
            0
        } else {
            self.spans.last().map_or(0, |l| dur(l).saturating_add(1))
        }
    }

    pub fn spans(&self) -> &[SpanRecord] {
        &self.spans
    }
}

/// `--top` in text: a heading, then the spans as `watch` prints them, longest first.
pub fn top_text(plan: &Plan, top: &TopN, block: Block, t0: u64) -> String {
    let mut s = block_text(block, t0);
    let _ = writeln!(s, "@top {} slowest spans ({} seen)", top.n, top.spans.len());
    s.push_str(&crate::output::text_header());
    for r in top.spans() {
        if let Some(crate::output::View::Span {
            pair,
            start,
            end,
            rec,
            ..
        }) = plan.resolve(crate::output::Record::Span(r, None))
        {
            // `false`: the --top list does not say why a span has no split (the block is
            // built without the run's settings).
            s.push_str(&crate::output::span_text(
                pair, start, end, rec, None, t0, false,
            ));
        }
    }
    s.push('\n');
    s
}

/// `--top` in JSON: `{"type":"top","rank":R,...,"span":{...}}` per span, longest first; the
/// span object is the one `--json` prints per span.
pub fn top_json(out: &mut Vec<u8>, plan: &Plan, top: &TopN, block: Block) {
    for (i, r) in top.spans().iter().enumerate() {
        let Some(crate::output::View::Span {
            pair,
            start,
            end,
            rec,
            ..
        }) = plan.resolve(crate::output::Record::Span(r, None))
        else {
            continue;
        };
        let _ = write!(Vec8(out), "{{\"type\":\"top\",\"rank\":{}", i + 1);
        block_json(out, block);
        out.extend_from_slice(b",\"span\":");
        let mut span = Vec::new();
        crate::output::span_json(&mut span, pair, start, end, rec, None, None);
        while span.last() == Some(&b'\n') {
            span.pop();
        }
        out.extend_from_slice(&span);
        out.extend_from_slice(b"}\n");
    }
}

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

/// fmt::Write over a byte vector.
struct Vec8<'a>(&'a mut Vec<u8>);
impl std::fmt::Write for Vec8<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{PairInfo, SiteInfo};
    use usdt_trace_common::{RecordHeader, RecordKind, SiteSpec};

    fn spec(pair: u32, role: SiteRole, nargs: u8) -> SiteSpec {
        let mut s = crate::plan::site_spec(&[], 0, crate::spans::Role::Event, None, &[]);
        s.pair_id = pair;
        s.role = role;
        s.nargs = nargs;
        s
    }

    fn site(name: &str, nargs: usize, signed: bool, str_arg: Option<usize>) -> SiteInfo {
        let f = if signed {
            ArgFmt::Signed
        } else {
            ArgFmt::Unsigned
        };
        let strs: Vec<(usize, usize)> = str_arg.map(|a| (a, 0)).into_iter().collect();
        let mut s = SiteInfo::for_test("ag", name, &vec![f; nargs], &strs);
        s.pair = Some(0);
        s
    }

    /// ag:req__start(i, kind, name) -> ag:req__end(i, status: signed), and the event ag:tick(k).
    fn plan() -> Plan {
        let mut tick = site("tick", 1, false, None);
        tick.pair = None;
        Plan {
            specs: vec![
                spec(0, SiteRole::START, 3),
                spec(0, SiteRole::END, 2),
                spec(0, SiteRole::EVENT, 1),
            ],
            sites: vec![
                site("req__start", 3, false, Some(2)),
                site("req__end", 2, true, None),
                tick,
            ],
            pairs: vec![PairInfo {
                provider: "ag".into(),
                stem: "req".into(),
                start: "req__start".into(),
                ends: vec!["req__end".into()],
            }],
            ..Default::default()
        }
    }

    fn key(id: u32, val: u64) -> ByKey {
        let mut k = ByKey {
            id,
            ..Default::default()
        };
        k.val[0] = val;
        k
    }

    fn hist(vals: &[u64]) -> Hist {
        let mut h = Hist::default();
        for &v in vals {
            h.add(v);
        }
        h
    }

    #[test]
    fn parses_keys() {
        let k = |s: &str| By::parse(s).map(|b| b.fields[0].kind.clone());
        assert_eq!(k("arg1"), Ok(ByKind::Arg { probe: None, n: 1 }));
        assert_eq!(
            k("request__end:arg1"),
            Ok(ByKind::Arg {
                probe: Some("request__end".into()),
                n: 1
            })
        );
        assert_eq!(
            k("httpserver:request__end:arg11"),
            Ok(ByKind::Arg {
                probe: Some("httpserver:request__end".into()),
                n: 11
            })
        );
        assert_eq!(k("str0"), Ok(ByKind::Str));
        assert_eq!(k("pid"), Ok(ByKind::Pid));
        assert_eq!(k("comm"), Ok(ByKind::Comm));
        assert_eq!(k("probe"), Ok(ByKind::Probe));
        assert!(matches!(k("str1"), Err(AggError::StrIndex { .. })));
        for bad in ["argx", "", ":arg1", "x:arg", "PID", "arg-1", "arg+1"] {
            assert!(matches!(k(bad), Err(AggError::BadKey(_))), "{bad}");
        }
    }

    #[test]
    fn keys_of_several_fields_take_their_own_words() {
        let by = By::parse("comm,arg1, pid").unwrap();
        let kinds: Vec<(ByKind, usize)> =
            by.fields.iter().map(|f| (f.kind.clone(), f.word)).collect();
        // A comm takes two words, so arg1 is in the third; spaces after commas are allowed.
        assert_eq!(
            kinds,
            [
                (ByKind::Comm, 0),
                (ByKind::Arg { probe: None, n: 1 }, 2),
                (ByKind::Pid, 3)
            ]
        );
        let c = by.config();
        assert_eq!(c.by, [BY_COMM, BY_ARG, BY_PID, 0]);
        assert_eq!(c.word[..3], [0, 2, 3]);
        assert_eq!(c.str_keys, 0);
        assert_eq!(By::parse("str0,arg0").unwrap().config().str_keys, 1);
        // The string is kept apart from the words: arg0 is word 0.
        assert_eq!(By::parse("str0,arg0").unwrap().fields[1].word, 0);
        // The most words four fields can take fit the kernel key.
        let most = By::parse("comm,arg0,pid,tid").unwrap();
        assert_eq!(most.fields[3].word, usdt_trace_common::agg::BY_WORDS - 1);
        let err = |s: &str| By::parse(s).unwrap_err();
        assert!(matches!(
            err("pid,tid,comm,probe,arg0"),
            AggError::TooManyFields { .. }
        ));
        assert_eq!(
            err("pid, pid").to_string(),
            "--by \"pid, pid\": \"pid\" is named twice"
        );
        assert!(matches!(err("pid,"), AggError::BadKey(_)));
        assert!(matches!(err(",pid"), AggError::BadKey(_)));
        assert!(matches!(err("pid,argx"), AggError::BadKey(_)));
    }

    #[test]
    fn several_field_keys_print_each_field_as_named() {
        let p = plan();
        let kp = KeyPlan::new(&p, &By::parse("comm,req__end:arg1,str0").unwrap(), false).unwrap();
        // Per field, per site: only the argument field reads one, at the end probe.
        assert_eq!(
            kp.by_sites.iter().map(|b| b[1]).collect::<Vec<_>>(),
            [BY_ARG_NONE, 1, BY_ARG_NONE]
        );
        assert!(kp
            .by_sites
            .iter()
            .all(|b| b[0] == BY_ARG_NONE && b[2] == BY_ARG_NONE));
        assert_eq!(kp.signed, [false, true, false]);
        let mut k = key(0, 0);
        let comm = *b"worker-1\0\0\0\0\0\0\0\0";
        k.val[0] = u64::from_ne_bytes(comm[..8].try_into().unwrap());
        k.val[1] = u64::from_ne_bytes(comm[8..].try_into().unwrap());
        k.val[2] = -5i64 as u64;
        k.str[..3].copy_from_slice(b"q\xff\0");
        k.str_len = 3;
        let v = kp.value(&p, &k);
        assert_eq!(
            v,
            Key(vec![
                KeyVal::Str(b"worker-1".to_vec()),
                KeyVal::Int(-5),
                KeyVal::Str(b"q\xff".to_vec())
            ])
        );
        assert_eq!(v.text(), "\"worker-1\", -5, \"q\\xff\"");
        let mut out = Vec::new();
        v.json(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#","key":["worker-1",-5,"q\\xff"],"key_escaped":true"#
        );
    }

    #[test]
    fn every_key_gets_its_own_histogram_in_text() {
        let p = plan();
        let kp = KeyPlan::new(&p, &By::parse("arg1").unwrap(), false).unwrap();
        let mut h = ByHists::default();
        h.keys.insert(key(0, 7), hist(&[1000, 1000, 3000]));
        h.keys.insert(key(0, 9), hist(&[100_000]));
        h.other = vec![hist(&[50])];
        let text = by_text(&p, &kp, &by_tables(&p, &kp, &h), 2);
        // After the table, one histogram per key in table order, then "other".
        let heads: Vec<&str> = text.lines().filter(|l| l.starts_with("@ag:req[")).collect();
        assert_eq!(
            heads,
            [
                "@ag:req[7]: 3 spans",
                "@ag:req[9]: 1 spans",
                "@ag:req[other (beyond --max-keys 2)]: 1 spans"
            ],
            "{text}"
        );
        // Key 7's bars: two spans in [512, 1K)... drawn as bpftrace's hist() rows.
        let seven = text.split("@ag:req[7]").nth(1).unwrap();
        let seven = seven.split("\n\n").next().unwrap();
        assert!(
            seven.contains("[512, 1K)") || seven.contains("[1K, 2K)"),
            "{seven}"
        );
        assert!(seven.contains("[2K, 4K)"), "{seven}");
        let counted: u64 = seven
            .lines()
            .filter(|l| l.starts_with('['))
            .map(|l| l.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(counted, 3, "{seven}");
    }

    #[test]
    fn an_argument_past_the_limit_says_the_limit_not_expected_arg_n() {
        let e = By::parse("arg99").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "--by \"arg99\": arg99: probes have at most {MAX_ARGS} arguments (arg0 to arg{})",
                MAX_ARGS - 1
            )
        );
        assert_eq!(
            By::parse("p:arg99999999999999999999").unwrap_err(),
            AggError::ArgIndex {
                key: "p:arg99999999999999999999".into(),
                n: "99999999999999999999".into()
            }
        );
        // A probe that has fewer: its name and its count.
        let e = KeyPlan::new(&plan(), &By::parse("ag:req__end:arg2").unwrap(), false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--by \"ag:req__end:arg2\": probe ag:req__end has no argument 2 (it has 2: arg0 to arg1)"
        );
    }

    #[test]
    fn key_plans_name_the_sites_that_supply_the_key() {
        let p = plan();
        let kp = KeyPlan::new(&p, &By::parse("arg1").unwrap(), false).unwrap();
        // Spans: the start's argument only.
        assert_eq!(
            kp.by_sites.iter().map(|b| b[0]).collect::<Vec<_>>(),
            [1, BY_ARG_NONE, BY_ARG_NONE]
        );
        assert_eq!(kp.signed, [false]);
        // Counts: every probe that has it.
        let kp = KeyPlan::new(&p, &By::parse("arg0").unwrap(), true).unwrap();
        assert_eq!(
            kp.by_sites.iter().map(|b| b[0]).collect::<Vec<_>>(),
            [0, 0, 0]
        );
        let kp = KeyPlan::new(&p, &By::parse("req__end:arg1").unwrap(), false).unwrap();
        assert_eq!(
            kp.by_sites.iter().map(|b| b[0]).collect::<Vec<_>>(),
            [BY_ARG_NONE, 1, BY_ARG_NONE]
        );
        assert_eq!(kp.signed, [true]);
        assert_eq!(
            kp.value(&p, &key(0, -1i64 as u64)),
            Key::one(KeyVal::Int(-1))
        );
        let err = |s: &str| KeyPlan::new(&p, &By::parse(s).unwrap(), false).unwrap_err();
        assert!(matches!(err("arg3"), AggError::NoArg { n: 3, .. }));
        assert!(matches!(err("nosuch:arg0"), AggError::NoProbe { .. }));
        assert!(matches!(
            err("ag:req__end:arg2"),
            AggError::ProbeArg { n: 2, .. }
        ));
        let mut nostr = plan();
        nostr.sites[0].strs.clear();
        assert_eq!(
            KeyPlan::new(&nostr, &By::parse("str0").unwrap(), false).unwrap_err(),
            AggError::NoStr
        );
    }

    #[test]
    fn key_values_print_as_named() {
        let p = plan();
        let kp = |s: &str| KeyPlan::new(&p, &By::parse(s).unwrap(), false).unwrap();
        let mut k = key(0, 0);
        k.str[..6].copy_from_slice(b"alpha\0");
        k.str_len = 6;
        assert_eq!(
            kp("str0").value(&p, &k),
            Key::one(KeyVal::Str(b"alpha".to_vec()))
        );
        assert_eq!(
            kp("probe").value(&p, &key(0, 1)),
            Key::one(KeyVal::Str(b"ag:req__end".to_vec()))
        );
        assert_eq!(kp("pid").value(&p, &key(0, 42)), Key::one(KeyVal::Uint(42)));
    }

    #[test]
    fn string_keys_keep_every_byte_and_say_when_cut() {
        let p = plan();
        let kp = KeyPlan::new(&p, &By::parse("str0").unwrap(), false).unwrap();
        let mut k = key(0, 0);
        // Read by a length argument: a NUL of the string's own is kept, not an end.
        k.str[..4].copy_from_slice(b"a\0b\xc3");
        k.str_len = 5;
        assert_eq!(
            kp.value(&p, &k),
            Key::one(KeyVal::Str(b"a\0b\xc3".to_vec()))
        );
        k.str_state = STRS_CUT as u32;
        let v = kp.value(&p, &k);
        assert_eq!(v, Key::one(KeyVal::CutStr(b"a\0b\xc3".to_vec())));
        // Text: quoted once, the byte that is not UTF-8 as \xNN, the cut after the quotes.
        assert_eq!(v.text(), "\"a\\u{0}b\\xc3\"…");
        let mut out = Vec::new();
        v.json(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#","key":"a\u0000b\\xc3","key_truncated":true,"key_escaped":true"#
        );
        // A whole string of the same bytes is another key.
        assert_ne!(v, Key::one(KeyVal::Str(b"a\0b\xc3".to_vec())));
    }

    #[test]
    fn key_table_columns_align_for_long_and_wide_keys() {
        let p = plan();
        let kp = KeyPlan::new(&p, &By::parse("str0").unwrap(), false).unwrap();
        let mut h = ByHists::default();
        let long = "q".repeat(200);
        for (i, s) in [
            "é".repeat(40),
            "漢字キー".into(),
            long.clone(),
            "e\u{301}".into(),
        ]
        .iter()
        .enumerate()
        {
            let mut k = key(0, 0);
            k.str[..s.len()].copy_from_slice(s.as_bytes());
            k.str_len = s.len() as u32 + 1;
            h.keys.insert(k, hist(&vec![1000; i + 1]));
        }
        let text = by_text(&p, &kp, &by_tables(&p, &kp, &h), 4);
        // The table: up to the blank line before the per-key histograms.
        let lines: Vec<&str> = text.lines().skip(1).take_while(|l| !l.is_empty()).collect();
        // The 200-byte key has a line of its own; every other line (the header, and each
        // row's numbers) ends at the same column.
        let ends: Vec<usize> = lines
            .iter()
            .filter(|l| !l.contains(&long))
            .map(|l| display_width(l))
            .collect();
        assert_eq!(ends.len(), 5, "{text}");
        assert!(ends.iter().all(|&e| e == ends[0]), "{ends:?}\n{text}");
        assert_eq!(display_width("漢字"), 4);
        assert_eq!(display_width("e\u{301}"), 1);
    }

    #[test]
    fn unkeyed_spans_and_hits_get_rows_of_their_own_never_other() {
        let p = plan();
        let kp = KeyPlan::new(&p, &By::parse("arg1").unwrap(), false).unwrap();
        let mut h = ByHists::default();
        h.keys.insert(key(0, 1), hist(&[100]));
        h.other = vec![Hist::default()];
        h.unkeyed = vec![hist(&[200, 300])];
        let t = by_tables(&p, &kp, &h);
        let text = by_text(&p, &kp, &t, 4);
        assert!(!text.contains("other"), "{text}");
        let row = text.lines().find(|l| l.contains(UNKEYED_LABEL)).unwrap();
        assert!(row.contains(" 2 "), "{text}");
        let mut out = Vec::new();
        by_json(&mut out, &p, &kp, &t, None);
        let last = String::from_utf8(out)
            .unwrap()
            .lines()
            .last()
            .unwrap()
            .to_string();
        assert!(
            last.contains(r#""key":null,"unkeyed":true,"count":2,"#),
            "{last}"
        );
        let kp = KeyPlan::new(&p, &By::parse("arg0").unwrap(), true).unwrap();
        let c = Counts {
            sites: vec![3, 0, 0],
            keys: [(key(0, 9), 2)].into(),
            other: vec![0, 0, 0],
            unkeyed: vec![1, 0, 0],
        };
        let rows = count_table(&p, Some(&kp), &c);
        let text = count_text(&rows, Some(&kp), 4);
        assert!(
            !text.contains("other") && text.contains(UNKEYED_LABEL),
            "{text}"
        );
        let mut out = Vec::new();
        count_json(&mut out, &rows, Some(&kp), None);
        assert!(String::from_utf8(out).unwrap().ends_with(
            r#""by":"arg0","key":null,"unkeyed":true,"count":1}
"#
        ),);
    }

    #[test]
    fn key_tables_escape_strings_once() {
        let p = plan();
        let kp = KeyPlan::new(&p, &By::parse("str0").unwrap(), false).unwrap();
        let mut k = key(0, 0);
        let q = b"say \"hi\"\n\\";
        k.str[..q.len()].copy_from_slice(q);
        k.str_len = q.len() as u32 + 1;
        let mut h = ByHists::default();
        h.keys.insert(k, hist(&[100]));
        let text = by_text(&p, &kp, &by_tables(&p, &kp, &h), 4);
        assert!(text.contains(r#""say \"hi\"\n\\""#), "{text}");
        let kp = KeyPlan::new(&p, &By::parse("str0").unwrap(), true).unwrap();
        let c = Counts {
            sites: vec![1, 0, 0],
            keys: [(k, 1)].into(),
            other: vec![0, 0, 0],
            unkeyed: vec![0, 0, 0],
        };
        let text = count_text(&count_table(&p, Some(&kp), &c), Some(&kp), 4);
        assert!(text.contains(r#"str0 = "say \"hi\"\n\\""#), "{text}");
    }

    #[test]
    fn tables_merge_keys_sort_by_count_and_keep_other() {
        let p = plan();
        let kp = KeyPlan::new(&p, &By::parse("probe").unwrap(), false).unwrap();
        let mut h = ByHists::default();
        // Two cookies of one probe merge; the larger count sorts first.
        h.keys.insert(key(0, 1), hist(&[100, 200]));
        h.keys.insert(key(0, 7), hist(&[300]));
        h.other = vec![hist(&[5000])];
        let t = by_tables(&p, &kp, &h);
        assert_eq!(t.len(), 1);
        assert_eq!(
            t[0].rows[0].0,
            Key::one(KeyVal::Str(b"ag:req__end".to_vec()))
        );
        assert_eq!(t[0].rows[0].1.count, 2);
        assert_eq!(t[0].rows[1].0, Key::one(KeyVal::Uint(7)));
        assert_eq!(t[0].other.count, 1);
        let text = by_text(&p, &kp, &t, 4);
        assert!(text.starts_with("@ag:req by probe (2 keys)\n"), "{text}");
        let first = text.lines().nth(2).unwrap();
        assert!(
            first.contains("\"ag:req__end\"") && first.contains(" 2 "),
            "{text}"
        );
        assert!(text.contains("other (beyond --max-keys 4)"), "{text}");
    }

    #[test]
    fn str0_tables_leave_out_span_names_without_a_string() {
        let mut p = plan();
        p.pairs.push(PairInfo {
            provider: "ag".into(),
            stem: "other".into(),
            ..Default::default()
        });
        let kp = KeyPlan::new(&p, &By::parse("str0").unwrap(), false).unwrap();
        let mut h = ByHists::default();
        h.keys.insert(key(0, 0), hist(&[1]));
        h.keys.insert(key(1, 0), hist(&[1]));
        let t = by_tables(&p, &kp, &h);
        assert_eq!(t.iter().map(|t| t.pair).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn interval_deltas_subtract_per_key() {
        let mut before = ByHists::default();
        before.keys.insert(key(0, 1), hist(&[100]));
        let mut now = before.clone();
        now.keys.insert(key(0, 1), hist(&[100, 400]));
        now.keys.insert(key(0, 2), hist(&[50]));
        let d = now.since(&before);
        assert_eq!(d.keys[&key(0, 1)].count, 1);
        assert_eq!(d.keys[&key(0, 1)].max, 400);
        assert_eq!(d.keys[&key(0, 2)].count, 1);
        let c0 = Counts {
            sites: vec![5, 1],
            keys: [(key(0, 3), 5)].into(),
            other: vec![0, 0],
            unkeyed: vec![0, 0],
        };
        let c1 = Counts {
            sites: vec![9, 1],
            keys: [(key(0, 3), 9)].into(),
            other: vec![2, 0],
            unkeyed: vec![1, 0],
        };
        let d = c1.since(&c0);
        assert_eq!(d.sites, [4, 0]);
        assert_eq!(d.keys[&key(0, 3)], 4);
        assert_eq!(d.other, [2, 0]);
        assert_eq!(d.unkeyed, [1, 0]);
    }

    #[test]
    fn top_n_keeps_the_longest_and_says_what_could_still_enter() {
        let rec = |d: u64| {
            let mut r: SpanRecord = unsafe { std::mem::zeroed() };
            r.start_ns = 1_000;
            r.hdr.ts_ns = 1_000 + d;
            r
        };
        let mut t = TopN::new(3);
        assert_eq!(t.threshold(), 0);
        for d in [5, 1, 9, 3] {
            t.offer(&rec(d));
        }
        let durs: Vec<u64> = t.spans().iter().map(dur).collect();
        assert_eq!(durs, [9, 5, 3]);
        assert_eq!(t.threshold(), 4);
        assert!(
            !t.offer(&rec(3)),
            "a tie with the last does not displace it"
        );
        assert!(t.offer(&rec(4)));
        assert_eq!(t.threshold(), 5);
    }

    #[test]
    fn count_rows_merge_sites_of_one_probe() {
        let mut p = plan();
        p.sites.push(site("tick", 1, false, None));
        p.specs.push(spec(0, SiteRole::EVENT, 1));
        let kp = KeyPlan::new(&p, &By::parse("arg0").unwrap(), true).unwrap();
        let c = Counts {
            sites: vec![2, 2, 3, 4],
            keys: [(key(2, 0), 3), (key(3, 0), 4), (key(0, 9), 2)].into(),
            other: vec![0, 0, 0, 0],
            unkeyed: vec![0, 0, 0, 0],
        };
        let rows = count_table(&p, Some(&kp), &c);
        let names: Vec<(&str, u64)> = rows.iter().map(|r| (r.name.as_str(), r.count)).collect();
        assert_eq!(names, [("tick", 7), ("req__end", 2), ("req__start", 2)]);
        // tick's argument is unsigned, whatever other probes' are.
        assert_eq!(rows[0].keys, [(Key::one(KeyVal::Uint(0)), 7)]);
    }

    /// Golden lines: the JSON shapes of `hist_by`, `count` and `top` records.
    #[test]
    fn golden_json() {
        let p = plan();
        let kp = KeyPlan::new(&p, &By::parse("req__end:arg1").unwrap(), false).unwrap();
        let mut h = ByHists::default();
        h.keys.insert(key(0, 404), hist(&[3000]));
        h.other = vec![hist(&[100, 100])];
        let t = by_tables(&p, &kp, &h);
        let mut out = Vec::new();
        by_json(&mut out, &p, &kp, &t, Some(((10, 20), false)));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"type":"hist_by","provider":"ag","name":"req","by":"req__end:arg1","interval_start_ns":10,"interval_end_ns":20,"total":false,"key":404,"count":1,"sum_ns":3000,"p50_ns":2944,"p90_ns":2944,"p99_ns":2944,"max_ns":3000,"buckets":[{"lo":2816,"hi":3072,"count":1}]}
{"type":"hist_by","provider":"ag","name":"req","by":"req__end:arg1","interval_start_ns":10,"interval_end_ns":20,"total":false,"key":null,"other":true,"count":2,"sum_ns":200,"p50_ns":100,"p90_ns":100,"p99_ns":100,"max_ns":100,"buckets":[{"lo":96,"hi":104,"count":2}]}
"#
        );
        let kp = KeyPlan::new(&p, &By::parse("str0").unwrap(), true).unwrap();
        let mut k = key(0, 0);
        k.str[..2].copy_from_slice(b"q\0");
        k.str_len = 2;
        let c = Counts {
            sites: vec![3, 0, 0],
            keys: [(k, 2)].into(),
            other: vec![1, 0, 0],
            unkeyed: vec![0, 0, 0],
        };
        let mut out = Vec::new();
        count_json(&mut out, &count_table(&p, Some(&kp), &c), Some(&kp), None);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"type":"count","provider":"ag","name":"req__start","count":3}
{"type":"count","provider":"ag","name":"req__start","by":"str0","key":"q","count":2}
{"type":"count","provider":"ag","name":"req__start","by":"str0","key":null,"other":true,"count":1}
"#
        );
        let mut r: SpanRecord = unsafe { std::mem::zeroed() };
        r.hdr = RecordHeader {
            kind: RecordKind::SPAN,
            site: 1,
            pid: 7,
            tid: 7,
            ts_ns: 5_000,
            comm: *b"ag\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
        };
        r.start_ns = 1_000;
        r.args[..3].copy_from_slice(&[3, 2, 0]);
        r.end_args[..2].copy_from_slice(&[3, 404]);
        let mut top = TopN::new(2);
        top.offer(&r);
        let mut out = Vec::new();
        top_json(&mut out, &p, &top, Some(((0, 9), true)));
        let line = String::from_utf8(out).unwrap();
        assert!(
            line.starts_with(
                r#"{"type":"top","rank":1,"interval_start_ns":0,"interval_end_ns":9,"total":true,"span":{"type":"span","provider":"ag","name":"req","pid":7,"#
            ),
            "{line}"
        );
        assert!(line.ends_with("}}\n"), "{line}");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["span"]["duration_ns"], 4_000);
        assert_eq!(v["span"]["end_args"], serde_json::json!([3, 404]));
    }

    #[test]
    fn high_rate_probes_are_named_once() {
        let mut p = plan();
        for n in ["line", "line", "function__entry", "gc__start"] {
            let mut s = site(n, 0, false, None);
            s.provider = "python".into();
            p.sites.push(s);
        }
        let v = high_rate_probes(&p);
        assert_eq!(v, ["python:function__entry", "python:line"]);
        let w = high_rate_warning(&v).unwrap();
        assert!(
            w.contains("2 high-rate probes") && w.contains("--count"),
            "{w}"
        );
        assert_eq!(high_rate_warning(&[]), None);
    }
}
