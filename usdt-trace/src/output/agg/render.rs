//! Aggregates as text (aligned tables, a histogram per key) and as JSON lines
//! (`hist_by`, `count`, `top`): what the text and JSON sinks write for an [`AggBlock`].

use super::key::KeyPlan;
use super::tables::{KeyTable, ProbeCount, TopN};
use super::{AggBlock, Block};
use crate::output::fmt_duration;
use crate::output::hist::{percentile, PERCENTILES};
use crate::output::json::json_str;
use crate::output::text::clean;
use crate::plan::Plan;
use std::fmt::Write as _;
use usdt_trace_common::Hist;

/// Row label of spans (hits) whose key found no room in a map that was not full.
pub(super) const UNKEYED_LABEL: &str = "unkeyed (no kernel memory)";

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
pub(super) fn display_width(s: &str) -> usize {
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

/// `--top` in text: a heading, then the spans as `watch` prints them, longest first.
pub fn top_text(plan: &Plan, top: &TopN, block: Block, t0: u64) -> String {
    let mut s = block_text(block, t0);
    let _ = writeln!(
        s,
        "@top {} slowest spans ({} seen)",
        top.n,
        top.spans().len()
    );
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

/// fmt::Write over a byte vector.
struct Vec8<'a>(&'a mut Vec<u8>);
impl std::fmt::Write for Vec8<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// A block as text: the `--by` tables (each followed by its keys' histograms), the `--count`
/// table (headed by the interval's bounds), the `--top` spans.
pub fn text(b: &AggBlock) -> String {
    let mut s = String::new();
    if let (Some(tables), Some(kp)) = (&b.by, b.key) {
        s.push_str(&by_text(b.plan, kp, tables, b.max_keys));
    }
    if let Some(rows) = &b.counts {
        s.push_str(&block_text(b.bounds, b.t0));
        s.push_str(&count_text(rows, b.key, b.max_keys));
    }
    if let Some(top) = b.top {
        s.push_str(&top_text(b.plan, top, b.bounds, b.t0));
    }
    s
}

/// A block as JSON lines: `hist_by`, `count`, `top`.
pub fn json(out: &mut Vec<u8>, b: &AggBlock) {
    if let (Some(tables), Some(kp)) = (&b.by, b.key) {
        by_json(out, b.plan, kp, tables, b.bounds);
    }
    if let Some(rows) = &b.counts {
        count_json(out, rows, b.key, b.bounds);
    }
    if let Some(top) = b.top {
        top_json(out, b.plan, top, b.bounds);
    }
}
