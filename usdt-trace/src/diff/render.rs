//! The report: a comparison in text for a terminal, or as an NDJSON line. Span names come
//! from the files compared (or, live, from the traced program's notes): escaped before they
//! reach either.

use super::compare::{fmt_mean, fmt_signed, Comparison, Part, Stats, KINDS, PARTS};
use crate::output::fmt_duration;
use serde_json::{json, Value};
use std::io::Write;

/// Writes one comparison as `usdt-trace diff` does: its text, or its JSON line.
pub fn write_comparison(c: &Comparison, json: bool, out: &mut impl Write) -> std::io::Result<()> {
    if json {
        let mut line = json_line(&to_json(c))?;
        line.push('\n');
        out.write_all(line.as_bytes())
    } else {
        out.write_all(to_text(c).as_bytes())
    }
}

/// `v` as one line of JSON with nothing a terminal would obey: serde_json escapes C0
/// controls but writes DEL, C1 controls (`\u{9b}` is CSI to some terminals) and
/// bidirectional overrides raw; here they are `\u` escapes too, as in `watch --json`. They can
/// only be inside strings (JSON's own syntax is ASCII), where an escape means the same.
fn json_line(v: &Value) -> std::io::Result<String> {
    use crate::util::terminal::is_unsafe_for_terminal;
    let s = serde_json::to_string(v).map_err(std::io::Error::from)?;
    if !s.chars().any(is_unsafe_for_terminal) {
        return Ok(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if is_unsafe_for_terminal(c) {
            // All of them are in the Basic Multilingual Plane: one \uXXXX each.
            use std::fmt::Write as _;
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Parts worth naming: moved by at least 1% of the largest move and by at least 1 µs, largest
/// first.
fn named_parts(d: &[f64; PARTS.len()]) -> Vec<(Part, f64)> {
    let max = d.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let mut v: Vec<(Part, f64)> = PARTS
        .iter()
        .zip(d)
        .filter(|(_, x)| x.abs() >= 1_000.0 && x.abs() >= 0.01 * max)
        .map(|(p, x)| (*p, *x))
        .collect();
    v.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()));
    v
}

/// The text report of one name: a header line with counts, means and p99s, the explanation
/// and the verdict. The span name is escaped for a terminal (`\u{1b}`, `\u{a}`, ...): a name
/// the file chose can neither drive the terminal nor start a line of its own, so every line
/// that starts with `  verdict:` is the tool's.
pub fn to_text(c: &Comparison) -> String {
    let name = crate::util::terminal::clean(&c.name);
    let (b, a) = match (&c.before, &c.after) {
        (Some(b), Some(a)) => (b, a),
        (Some(b), None) => {
            return format!(
                "{}: only before ({} spans, mean {})\n",
                name,
                b.count,
                fmt_mean(b.mean_ns)
            )
        }
        (None, Some(a)) => {
            return format!(
                "{}: only after ({} spans, mean {})\n",
                name,
                a.count,
                fmt_mean(a.mean_ns)
            )
        }
        (None, None) => return String::new(),
    };
    let mut s = format!(
        "{}: {} → {}",
        name,
        fmt_mean(b.mean_ns),
        fmt_mean(a.mean_ns)
    );
    match &c.part_deltas {
        Some(d) => {
            let parts = named_parts(d);
            if parts.is_empty() {
                s.push_str(": no part moved");
            } else {
                s.push_str(": ");
                let words: Vec<String> = parts
                    .iter()
                    .map(|(p, x)| {
                        let kinds: Vec<String> = KINDS
                            .iter()
                            .enumerate()
                            .filter(|(_, (_, kp))| kp == p)
                            .map(|(k, (name, _))| (name, a.kinds_ns[k] - b.kinds_ns[k]))
                            .filter(|(_, d)| d.abs() >= 1_000.0)
                            .map(|(name, d)| format!("{name} {}", fmt_signed(d)))
                            .collect();
                        let kinds = if kinds.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", kinds.join(", "))
                        };
                        format!("{} {}{kinds}", fmt_signed(*x), p.words())
                    })
                    .collect();
                s.push_str(&words.join(", "));
            }
        }
        None => s.push_str(": no time split (spans crossed threads, or --no-sched)"),
    }
    s.push('\n');
    s.push_str(&format!(
        "  spans {} → {}, p99 {} → {}",
        b.count,
        a.count,
        fmt_duration(b.p99_ns),
        fmt_duration(a.p99_ns)
    ));
    for (which, st) in [("before", b), ("after", a)] {
        if st.split_count < st.count && st.split_count > 0 {
            s.push_str(&format!(
                "; split known for {} of {} spans {which}",
                st.split_count, st.count
            ));
        }
    }
    s.push('\n');
    if let Some(v) = &c.verdict {
        s.push_str(&format!("  verdict: {}\n", v.words));
    }
    for v in &c.also {
        s.push_str(&format!("  also: {}\n", v.words));
    }
    s
}

fn stats_json(s: &Stats) -> Value {
    let mut parts = serde_json::Map::new();
    for (p, x) in PARTS.iter().zip(s.parts_ns) {
        parts.insert(p.field().into(), json!(x.round() as u64));
    }
    let mut waits = serde_json::Map::new();
    for (k, (kind, _)) in KINDS.iter().enumerate() {
        waits.insert(
            (*kind).into(),
            json!({"ns": s.kinds_ns[k].round() as u64, "n": (s.kinds_n[k] * 1000.0).round() / 1000.0}),
        );
    }
    json!({
        "count": s.count,
        "mean_ns": s.mean_ns.round() as u64,
        "p99_ns": s.p99_ns,
        "split_count": s.split_count,
        "parts": parts,
        "waits": waits,
    })
}

/// One NDJSON line per name: `{"type":"diff","span","before","after","delta","verdict"}`;
/// before or after is null for a name only one run has.
pub fn to_json(c: &Comparison) -> Value {
    let mut v = json!({
        "type": "diff",
        "span": c.name,
        "before": c.before.as_ref().map(stats_json),
        "after": c.after.as_ref().map(stats_json),
    });
    if let (Some(b), Some(a)) = (&c.before, &c.after) {
        let mut delta = serde_json::Map::new();
        delta.insert(
            "mean_ns".into(),
            json!((a.mean_ns - b.mean_ns).round() as i64),
        );
        delta.insert("p99_ns".into(), json!(a.p99_ns as i64 - b.p99_ns as i64));
        if let Some(d) = &c.part_deltas {
            let mut parts = serde_json::Map::new();
            for (p, x) in PARTS.iter().zip(d) {
                parts.insert(p.field().into(), json!(x.round() as i64));
            }
            delta.insert("parts".into(), Value::Object(parts));
            let mut waits = serde_json::Map::new();
            for (k, (kind, _)) in KINDS.iter().enumerate() {
                waits.insert(
                    (*kind).into(),
                    json!((a.kinds_ns[k] - b.kinds_ns[k]).round() as i64),
                );
            }
            delta.insert("waits_ns".into(), Value::Object(waits));
        }
        if let Some(sig) = &c.significance {
            // Infinite when both runs' spans were all alike: JSON has no infinity.
            let sigmas = if sig.sigmas.is_finite() {
                json!((sig.sigmas * 100.0).round() / 100.0)
            } else {
                Value::Null
            };
            delta.insert("sigmas".into(), sigmas);
            delta.insert("rank_p".into(), json!(sig.rank.map(|r| r.p)));
        }
        v["delta"] = Value::Object(delta);
    }
    if let Some(vd) = &c.verdict {
        v["verdict"] = json!({
            "cause": vd.cause,
            "share": (vd.share * 1000.0).round() / 1000.0,
            "words": vd.words,
        });
    }
    // Only when there is one: the lines' schema is otherwise as it was.
    if !c.also.is_empty() {
        v["also"] = c
            .also
            .iter()
            .map(|a| json!({"cause": a.cause, "words": a.words}))
            .collect();
    }
    v
}
