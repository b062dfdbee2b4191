//! Histograms kept in the kernel (`--hist`), drawn like bpftrace's `hist()` with the
//! on-CPU / run-queue / sleep / I/O split beside the duration. The kernel keeps log-linear
//! buckets (8 per power of two), so percentiles are quoted within 6.25%; the drawing folds
//! them into log2 rows.

use super::{fmt_duration, json_escape, PairInfo};
use std::fmt::Write as _;
use usdt_trace_common::{
    hist_bucket_range, log2_bucket, Hist, WaitSums, HIST_BUCKETS, HIST_COMPONENTS, HIST_STEAL,
    LOG2_BUCKETS,
};

/// The percentiles quoted for every histogram.
pub const PERCENTILES: [(&str, f64); 3] = [("p50", 0.50), ("p90", 0.90), ("p99", 0.99)];

/// The value below which a fraction `q` of the counted values lie: the midpoint of the bucket
/// holding the ceil(q * count)-th smallest value (within 6.25% of it), never above `max`.
/// None when nothing was counted.
pub fn percentile(h: &Hist, q: f64) -> Option<u64> {
    let total: u64 = h.buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (b, &c) in h.buckets.iter().enumerate() {
        seen += c;
        if seen >= rank {
            let (lo, hi) = hist_bucket_range(b);
            let mid = lo + (hi - lo) / 2;
            return Some(if h.max > 0 { mid.min(h.max) } else { mid });
        }
    }
    None
}

/// Log2 rows for drawing: each log-linear bucket lies inside one power of two.
fn log2_rows(h: &Hist) -> [u64; LOG2_BUCKETS] {
    let mut rows = [0; LOG2_BUCKETS];
    for (b, &c) in h.buckets.iter().enumerate().filter(|(_, c)| **c > 0) {
        rows[log2_bucket(hist_bucket_range(b).0)] += c;
    }
    rows
}

/// What `now` counts beyond `before`: one interval's histograms from two cumulative reads.
pub fn delta(
    now: &[Hist; HIST_COMPONENTS],
    before: &[Hist; HIST_COMPONENTS],
) -> [Hist; HIST_COMPONENTS] {
    std::array::from_fn(|i| delta_one(&now[i], &before[i]))
}

/// One histogram's [`delta`].
pub fn delta_one(now: &Hist, before: &Hist) -> Hist {
    let mut d = *now;
    for (c, b) in d.buckets.iter_mut().zip(before.buckets.iter()) {
        *c = c.saturating_sub(*b);
    }
    d.count = d.count.saturating_sub(before.count);
    d.sum = d.sum.saturating_sub(before.sum);
    // A new maximum happened in this interval; otherwise the interval's largest value is only
    // known to its bucket (the last non-empty one's upper end).
    if d.max <= before.max {
        d.max = d
            .buckets
            .iter()
            .rposition(|&c| c > 0)
            .map_or(0, |k| hist_bucket_range(k).1 - 1);
    }
    d
}

/// Names of the components, in the kernel's order.
pub const COMPONENTS: [&str; HIST_COMPONENTS] =
    ["duration", "oncpu", "runq", "sleep", "io", "idle", "steal"];

/// Inclusive-exclusive value range of a log2 bucket: 0 holds only 0.
pub fn bucket_range(b: usize) -> (u64, u64) {
    if b == 0 {
        (0, 1)
    } else if b >= 64 {
        (1 << 63, u64::MAX)
    } else {
        (1u64 << (b - 1), if b == 63 { 1 << 63 } else { 1u64 << b })
    }
}

fn short(v: u64) -> String {
    // bpftrace-style bucket labels: 1, 2, 4, ... 512, 1K, ... 1M, 1G.
    const UNITS: [(u64, &str); 4] = [
        (1 << 60, "E"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (div, u) in UNITS {
        if v >= div && v.is_multiple_of(div) {
            return format!("{}{u}", v / div);
        }
    }
    v.to_string()
}

/// Draw one span name's histograms. `w`: what its spans waited on, shown after the sleep and
/// io parts as span lines show it (`sleep 4.10ms (lock 3.10ms, net 900.0us)`), per split span
/// like the parts, only the kinds that are not zero.
pub fn render_text(pair: &PairInfo, h: &[Hist; HIST_COMPONENTS], w: &WaitSums) -> String {
    let mut s = String::new();
    let d = &h[0];
    let mean = |x: &Hist| x.sum.checked_div(x.count).unwrap_or(0);
    let _ = write!(
        s,
        "@{}:{}  {} spans, mean {}",
        pair.provider,
        pair.stem,
        d.count,
        fmt_duration(mean(d))
    );
    if d.count > 0 {
        for (name, q) in PERCENTILES {
            let _ = write!(
                s,
                ", {name} {}",
                fmt_duration(percentile(d, q).unwrap_or(0))
            );
        }
        let _ = write!(s, ", max {}", fmt_duration(d.max));
    }
    if h[1].count > 0 {
        // The parts are measured only over spans with a split (one thread ran them from start
        // to end, or their polls were marked); when that is not all of them, say over how
        // many, and add them up to those spans' own mean so that what is shown as a sum is one.
        let n = h[1].count;
        if n != d.count {
            let split_sum: u64 = h[1..].iter().map(|x| x.sum).sum();
            let _ = write!(
                s,
                "; time split over {n} of them: {}",
                fmt_duration(split_sum / n)
            );
        }
        // The kinds nested in a part, each its sum over the same split spans.
        let kinds = |in_sleep: bool| -> String {
            let v: Vec<String> = super::wait_sum_kinds(w)
                .iter()
                .filter(|k| k.3 == in_sleep && k.1 > 0)
                .map(|k| format!("{} {}", k.0, fmt_duration(k.1 / n)))
                .collect();
            if v.is_empty() {
                String::new()
            } else {
                format!(" ({})", v.join(", "))
            }
        };
        // The host's steal only where there was any: on bare metal it is always 0.
        let steal = if h[HIST_STEAL].sum > 0 {
            format!(" + steal {}", fmt_duration(h[HIST_STEAL].sum / n))
        } else {
            String::new()
        };
        let _ = write!(
            s,
            " = on-CPU {}{steal} + runq {} + sleep {}{} + io {}{}",
            fmt_duration(mean(&h[1])),
            fmt_duration(mean(&h[2])),
            fmt_duration(mean(&h[3])),
            kinds(true),
            fmt_duration(mean(&h[4])),
            kinds(false)
        );
        // Only polled spans have idle time (the others' is 0 and not counted): its share of
        // the mean is over all the split spans, and how many were polled is said.
        if h[5].count > 0 {
            let _ = write!(
                s,
                " + idle {} ({} polled)",
                fmt_duration(h[5].sum / n),
                h[5].count
            );
        }
        // The tracing's own share of each split span: the probe hits inside, at the costs
        // measured at start (an estimate, part of the figures above, not taken out of them).
        if w.probe_hits > 0 && w.probe_ns > 0 {
            let _ = write!(
                s,
                "; ≈ {} of each span is tracing ({:.1} probe hits{})",
                fmt_duration(w.probe_ns / n),
                w.probe_hits as f64 / n as f64,
                if super::tracing_visible(w.probe_ns / n, mean(d)) {
                    ": more than a tenth of it"
                } else {
                    ""
                }
            );
        }
    }
    s.push('\n');
    draw_bars(&mut s, h);
    s
}

/// Draws histograms as log2 rows: the first (the duration) as bars, and when the second
/// counted anything (the on-CPU part of a split), the split's components beside it as
/// columns. Nothing when the first is empty.
pub fn draw_bars(s: &mut String, h: &[Hist]) {
    let Some(d) = h.first() else { return };
    if d.count == 0 {
        return;
    }
    let rows: Vec<[u64; LOG2_BUCKETS]> = h.iter().map(log2_rows).collect();
    let used = |x: &[u64; LOG2_BUCKETS]| {
        let lo = x.iter().position(|&c| c > 0);
        let hi = x.iter().rposition(|&c| c > 0);
        lo.zip(hi)
    };
    let mut range: Option<(usize, usize)> = None;
    for (x, _) in rows.iter().zip(h.iter()).filter(|(_, x)| x.count > 0) {
        if let Some((lo, hi)) = used(x) {
            range = Some(match range {
                None => (lo, hi),
                Some((a, b)) => (a.min(lo), b.max(hi)),
            });
        }
    }
    let Some((lo, hi)) = range else { return };
    let max = rows[0].iter().copied().max().unwrap_or(1).max(1);
    let split = h.len() == HIST_COMPONENTS && h[1].count > 0;
    // The split's columns: the steal column only when there was steal, the idle column only
    // when some span was polled.
    let mut cols: Vec<(&str, usize)> = vec![("on-CPU", 1)];
    if split && h[HIST_STEAL].sum > 0 {
        cols.push(("steal", HIST_STEAL));
    }
    cols.extend([("runq", 2), ("sleep", 3), ("io", 4)]);
    if split && h[5].count > 0 {
        cols.push(("idle", 5));
    }
    let _ = write!(s, "{:<20} {:>8} duration", "ns", "count");
    if split {
        // Up to the split's columns, past the bars.
        s.push_str(&" ".repeat(44));
        for (name, _) in &cols {
            let _ = write!(s, " {name:>8}");
        }
    }
    s.push('\n');
    // Zero-valued components (no I/O at all, say) sit in bucket 0, far below the durations;
    // a run of two or more empty rows between is drawn as one `...` row.
    let row_used = |b: usize| rows.iter().any(|x| x[b] > 0);
    let mut b = lo;
    let last = hi.min(LOG2_BUCKETS - 1);
    while b <= last {
        if !row_used(b) {
            let run_end = (b..=last).find(|&k| row_used(k)).unwrap_or(last + 1);
            if run_end - b >= 2 {
                s.push_str("...\n");
                b = run_end;
                continue;
            }
        }
        let (a, z) = bucket_range(b);
        let label = if b == 0 {
            "[0]".to_string()
        } else {
            format!("[{}, {})", short(a), short(z))
        };
        let c = rows[0][b];
        let width = (c as u128 * 50 / max as u128) as usize;
        let _ = write!(s, "{:<20} {:>8} |{:<50}|", label, c, "@".repeat(width));
        if split {
            for &(_, c) in &cols {
                let _ = write!(s, " {:>8}", rows[c][b]);
            }
        }
        s.push('\n');
        b += 1;
    }
}

/// One `{"type":"hist",...}` line per span name. With `--interval`, `block` gives the
/// monotonic bounds of what the line counts and whether it is the whole run. `w`: what the
/// spans waited on, the `waits` object (summed over the split spans; only kinds not zero).
pub fn render_json(
    out: &mut Vec<u8>,
    pair: &PairInfo,
    h: &[Hist; HIST_COMPONENTS],
    w: &WaitSums,
    block: Option<((u64, u64), bool)>,
) {
    out.extend_from_slice(b"{\"type\":\"hist\",\"provider\":\"");
    json_escape(out, pair.provider.as_bytes());
    out.extend_from_slice(b"\",\"name\":\"");
    json_escape(out, pair.stem.as_bytes());
    out.extend_from_slice(b"\"");
    if let Some(((a, b), total)) = block {
        let _ = write!(
            Vec8(out),
            ",\"interval_start_ns\":{a},\"interval_end_ns\":{b},\"total\":{total}"
        );
    }
    for (name, x) in COMPONENTS.iter().zip(h.iter()) {
        let _ = write!(
            Vec8(out),
            ",\"{name}\":{{\"count\":{},\"sum_ns\":{}",
            x.count,
            x.sum
        );
        if x.count > 0 {
            for (p, q) in PERCENTILES {
                let _ = write!(Vec8(out), ",\"{p}_ns\":{}", percentile(x, q).unwrap_or(0));
            }
            let _ = write!(Vec8(out), ",\"max_ns\":{}", x.max);
        }
        buckets_json(out, x);
        out.push(b'}');
    }
    // Always there (empty when the spans waited on no known kind), so that a consumer summing
    // lines needs no case for its absence.
    out.extend_from_slice(b",\"waits\":{");
    let mut first = true;
    for (name, ns, n, _) in super::wait_sum_kinds(w) {
        if ns == 0 && n == 0 {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        let _ = write!(Vec8(out), "\"{name}\":{{\"ns\":{ns},\"n\":{n}}}");
    }
    out.push(b'}');
    // Probe hits inside the split spans and their estimated cost, summed like the waits
    // (only when probes fired inside them).
    if w.probe_hits > 0 {
        let _ = write!(Vec8(out), ",\"probe_hits\":{}", w.probe_hits);
        if w.probe_ns > 0 {
            let _ = write!(Vec8(out), ",\"probe_ns_estimate\":{}", w.probe_ns);
        }
    }
    out.extend_from_slice(b"}\n");
}

/// `,"buckets":[{"lo":..,"hi":..,"count":..},...]`: the histogram's non-empty log-linear
/// buckets, each counting values in [lo, hi) nanoseconds.
pub fn buckets_json(out: &mut Vec<u8>, x: &Hist) {
    out.extend_from_slice(b",\"buckets\":[");
    let mut first = true;
    for (b, &c) in x.buckets.iter().enumerate().take(HIST_BUCKETS) {
        if c == 0 {
            continue;
        }
        let (lo, hi) = hist_bucket_range(b);
        if !first {
            out.push(b',');
        }
        first = false;
        let _ = write!(Vec8(out), "{{\"lo\":{lo},\"hi\":{hi},\"count\":{c}}}");
    }
    out.push(b']');
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
    use usdt_trace_common::hist_bucket;

    #[test]
    fn bucket_ranges_agree_with_kernel_buckets() {
        for v in [0u64, 1, 2, 3, 4, 1000, 1 << 40, u64::MAX / 3] {
            let (lo, hi) = bucket_range(log2_bucket(v));
            assert!(lo <= v && v < hi, "{v} not in [{lo},{hi})");
            let (lo, hi) = hist_bucket_range(hist_bucket(v));
            assert!(lo <= v && v < hi, "{v} not in [{lo},{hi})");
        }
    }

    #[test]
    fn percentiles_are_within_a_sixteenth() {
        let mut h = Hist::default();
        // 1..=10000 us: p50 = 5000 us, p90 = 9000 us, p99 = 9900 us.
        for v in 1..=10_000u64 {
            h.add(v * 1000);
        }
        for (q, want) in [(0.5, 5_000_000f64), (0.9, 9_000_000.0), (0.99, 9_900_000.0)] {
            let got = percentile(&h, q).unwrap() as f64;
            assert!(
                (got - want).abs() / want <= 1.0 / 16.0,
                "p{q}: {got} vs {want}"
            );
        }
        let top = percentile(&h, 1.0).unwrap();
        assert!(
            (10_000_000 - 10_000_000 / 16..=10_000_000).contains(&top),
            "{top}"
        );
        assert_eq!(h.max, 10_000_000);
        assert_eq!(percentile(&Hist::default(), 0.5), None);
        // An interval without a new maximum bounds it by its top bucket.
        let before = [h; HIST_COMPONENTS];
        let mut now = before;
        now[0].add(3000);
        let d = delta(&now, &before);
        let (lo, hi) = hist_bucket_range(hist_bucket(3000));
        assert!(
            d[0].max >= 3000 && d[0].max < hi && lo <= 3000,
            "{}",
            d[0].max
        );
        assert_eq!(d[0].count, 1);
    }

    #[test]
    fn renders_counts_and_json() {
        let mut h = [Hist::default(); HIST_COMPONENTS];
        for v in [1500u64, 1600, 3000] {
            h[0].add(v);
            h[1].add(v / 2);
        }
        let pair = PairInfo {
            provider: "p".into(),
            stem: "q".into(),
            start: "q__start".into(),
            ends: vec!["q__end".into()],
        };
        let t = render_text(&pair, &h, &WaitSums::default());
        assert!(t.contains("@p:q  3 spans"), "{t}");
        // Far-apart buckets: the empty rows between them fold into one "...".
        let mut far = h;
        far[4].buckets[0] = 3;
        far[4].count = 3;
        let t2 = render_text(&pair, &far, &WaitSums::default());
        assert!(t2.contains("[0] ") && t2.contains("\n...\n"), "{t2}");
        assert!(!t2.contains("[4, 8)"), "{t2}");
        assert!(t.contains("[1K, 2K)"), "{t}");
        let mut out = Vec::new();
        render_json(&mut out, &pair, &h, &WaitSums::default(), None);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["duration"]["count"], 3);
        assert_eq!(v["oncpu"]["sum_ns"], 3050);
        // 1500, 1600 and 3000 each have their own log-linear bucket.
        assert_eq!(v["duration"]["buckets"].as_array().unwrap().len(), 3);
        assert_eq!(v["duration"]["max_ns"], 3000);
        // No split waited on anything known: an empty `waits`, always present.
        assert_eq!(v["waits"], serde_json::json!({}));
    }

    #[test]
    fn header_and_json_show_the_kinds_inside_sleep_and_io() {
        let mut h = [Hist::default(); HIST_COMPONENTS];
        // Two split spans, 10ms each: 1ms on CPU + 8ms sleep + 1ms io, and of the sleep
        // 6.2ms lock (3 waits) and 1.8ms net (1), of the io 0.6ms disk (2) and 0.3ms in page
        // faults (5); summed over both.
        for _ in 0..2 {
            for (c, v) in [
                (0, 10_000_000u64),
                (1, 1_000_000),
                (2, 0),
                (3, 8_000_000),
                (4, 1_000_000),
            ] {
                h[c].add(v);
            }
        }
        let mut w = WaitSums {
            ns: [12_400_000, 3_600_000, 0, 1_200_000, 600_000],
            n: [6, 2, 0, 4, 10],
            ..WaitSums::default()
        };
        let pair = PairInfo {
            provider: "p".into(),
            stem: "q".into(),
            start: "q__start".into(),
            ends: vec!["q__end".into()],
        };
        let t = render_text(&pair, &h, &w);
        let first = t.lines().next().unwrap();
        assert!(
            first.ends_with(
                " = on-CPU 1.00ms + runq 0ns + sleep 8.00ms (lock 6.20ms, net 1.80ms) + io 1.00ms (disk 600.0us, fault 300.0us)"
            ),
            "{first}"
        );
        // The parts still add up to the mean, and each part's kinds stay within it.
        let ms = |s: &str| -> f64 {
            let (v, u) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap());
            v.parse::<f64>().unwrap()
                * match u {
                    "ms" => 1e6,
                    "us" => 1e3,
                    "ns" => 1.0,
                    _ => 1e9,
                }
        };
        let eq = first.split(" = ").nth(1).unwrap();
        let mut parts = 0.0;
        for part in eq.split(" + ") {
            let mut it = part.splitn(2, " (");
            let v = ms(it.next().unwrap().rsplit(' ').next().unwrap());
            parts += v;
            if let Some(k) = it.next() {
                let kinds: f64 = k
                    .trim_end_matches(')')
                    .split(", ")
                    .map(|x| ms(x.rsplit(' ').next().unwrap()))
                    .sum();
                assert!(kinds <= v, "{part}");
            }
        }
        assert_eq!(parts, 10_000_000.0, "{first}");
        let mut out = Vec::new();
        render_json(&mut out, &pair, &h, &w, None);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        // Only the kinds waited on, as sums over the split spans (the parts' sum_ns).
        assert_eq!(
            v["waits"],
            serde_json::json!({
                "lock": {"ns": 12_400_000, "n": 6},
                "net": {"ns": 3_600_000, "n": 2},
                "disk": {"ns": 1_200_000, "n": 4},
                "fault": {"ns": 600_000, "n": 10},
            })
        );
        assert_eq!(v["sleep"]["sum_ns"], 16_000_000);
        // A kind the spans never waited on is left out of the header too.
        w.ns[1] = 0;
        w.n[1] = 0;
        let t = render_text(&pair, &h, &w);
        assert!(t.contains("sleep 8.00ms (lock 6.20ms) + io"), "{t}");
    }

    #[test]
    fn header_parts_add_up_and_say_over_how_many_spans() {
        let mut h = [Hist::default(); HIST_COMPONENTS];
        // Four spans; two were split: 100 = 60 + 40 and 300 = 100 + 200 (on-CPU + sleep).
        for v in [100u64, 300, 1000, 3000] {
            h[0].add(v);
        }
        for (cpu, sleep) in [(60u64, 40u64), (100, 200)] {
            for (c, v) in [(1, cpu), (2, 0), (3, sleep), (4, 0)] {
                h[c].add(v);
            }
        }
        let pair = PairInfo {
            provider: "p".into(),
            stem: "q".into(),
            start: "q__start".into(),
            ends: vec!["q__end".into()],
        };
        let t = render_text(&pair, &h, &WaitSums::default());
        let first = t.lines().next().unwrap();
        assert_eq!(
            first,
            "@p:q  4 spans, mean 1.1us, p50 304ns, p90 2.9us, p99 2.9us, max 3.0us; time split over 2 of them: 200ns = on-CPU 80ns + runq 0ns + sleep 120ns + io 0ns"
        );
        // All split: the parts add up to the mean itself, as before.
        let mut all = h;
        all[0] = Hist::default();
        for v in [100u64, 300] {
            all[0].add(v);
        }
        let t = render_text(&pair, &all, &WaitSums::default());
        assert!(
            t.starts_with(
                "@p:q  2 spans, mean 200ns, p50 100ns, p90 300ns, p99 300ns, max 300ns = on-CPU 80ns + runq 0ns + sleep 120ns + io 0ns\n"
            ),
            "{t}"
        );
    }

    #[test]
    fn header_adds_idle_of_polled_spans() {
        let mut h = [Hist::default(); HIST_COMPONENTS];
        // Three split spans: one thread-local (100 = 60 on CPU + 40 sleep), two polled
        // (300 = 100 on CPU + 200 idle, 500 = 50 on CPU + 50 runq + 400 idle).
        for (dur, cpu, runq, sleep, idle) in [
            (100u64, 60u64, 0u64, 40u64, None),
            (300, 100, 0, 0, Some(200u64)),
            (500, 50, 50, 0, Some(400)),
        ] {
            for (c, v) in [(0, dur), (1, cpu), (2, runq), (3, sleep), (4, 0)] {
                h[c].add(v);
            }
            if let Some(i) = idle {
                h[5].add(i);
            }
        }
        let pair = PairInfo {
            provider: "p".into(),
            stem: "q".into(),
            start: "q__start".into(),
            ends: vec!["q__end".into()],
        };
        let t = render_text(&pair, &h, &WaitSums::default());
        let mut lines = t.lines();
        // 300 = 70 + 16 + 13 + 0 + 200 (rounding down each: exact sums over 3 spans).
        assert_eq!(
            lines.next().unwrap(),
            "@p:q  3 spans, mean 300ns, p50 304ns, p90 496ns, p99 496ns, max 500ns = on-CPU 70ns + runq 16ns + sleep 13ns + io 0ns + idle 200ns (2 polled)"
        );
        let head = lines.find(|l| l.starts_with("ns")).unwrap();
        assert!(head.trim_end().ends_with("io     idle"), "{head}");
        // One more span without a split: the header says over how many, idle included.
        h[0].add(10_000);
        let t = render_text(&pair, &h, &WaitSums::default());
        assert!(
            t.lines().next().unwrap().ends_with(
                "; time split over 3 of them: 300ns = on-CPU 70ns + runq 16ns + sleep 13ns + io 0ns + idle 200ns (2 polled)"
            ),
            "{t}"
        );
    }

    #[test]
    fn delta_is_what_an_interval_added() {
        let mut before = [Hist::default(); HIST_COMPONENTS];
        before[0].buckets[3] = 2;
        before[0].count = 2;
        before[0].sum = 10;
        let mut now = before;
        now[0].buckets[3] = 5;
        now[0].buckets[4] = 1;
        now[0].count = 6;
        now[0].sum = 40;
        let d = delta(&now, &before);
        assert_eq!(
            (d[0].buckets[3], d[0].buckets[4], d[0].count, d[0].sum),
            (3, 1, 4, 30)
        );
        assert_eq!(d[1].count, 0);
    }
}
