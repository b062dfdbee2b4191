//! Log2 histograms kept in the kernel (`--hist`), drawn like bpftrace's `hist()` with the
//! on-CPU / run-queue / sleep / I/O split beside the duration.

use super::{fmt_duration, json_escape, PairInfo};
use std::fmt::Write as _;
use usdt_trace_common::{
    Hist, HIST_BUCKETS, HIST_COMPONENTS, HIST_DURATION, HIST_IO, HIST_ONCPU, HIST_RUNQ, HIST_SLEEP,
};

/// Names of the components, indexed by `HIST_DURATION`, `HIST_ONCPU`, ... (the kernel's order).
pub const COMPONENTS: [&str; HIST_COMPONENTS] = ["duration", "oncpu", "runq", "sleep", "io"];

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

/// Draw one span name's histograms.
pub fn render_text(pair: &PairInfo, h: &[Hist; HIST_COMPONENTS]) -> String {
    let mut s = String::new();
    let d = &h[HIST_DURATION];
    let mean = |x: &Hist| x.sum.checked_div(x.count).unwrap_or(0);
    let _ = write!(
        s,
        "@{}:{}  {} spans, mean {}",
        pair.provider,
        pair.stem,
        d.count,
        fmt_duration(mean(d))
    );
    if h[HIST_ONCPU].count > 0 {
        let _ = write!(
            s,
            " = on-CPU {} + runq {} + sleep {} + io {}",
            fmt_duration(mean(&h[HIST_ONCPU])),
            fmt_duration(mean(&h[HIST_RUNQ])),
            fmt_duration(mean(&h[HIST_SLEEP])),
            fmt_duration(mean(&h[HIST_IO]))
        );
    }
    s.push('\n');
    if d.count == 0 {
        return s;
    }
    let used = |x: &Hist| {
        let lo = x.buckets.iter().position(|&c| c > 0);
        let hi = x.buckets.iter().rposition(|&c| c > 0);
        lo.zip(hi)
    };
    let mut range: Option<(usize, usize)> = None;
    for x in h.iter().filter(|x| x.count > 0) {
        if let Some((lo, hi)) = used(x) {
            range = Some(match range {
                None => (lo, hi),
                Some((a, b)) => (a.min(lo), b.max(hi)),
            });
        }
    }
    let Some((lo, hi)) = range else { return s };
    let max = d.buckets.iter().copied().max().unwrap_or(1).max(1);
    let split = h[HIST_ONCPU].count > 0;
    let _ = write!(s, "{:<20} {:>8} {:<52}", "ns", "count", "duration");
    if split {
        let _ = write!(
            s,
            " {:>8} {:>8} {:>8} {:>8}",
            "on-CPU", "runq", "sleep", "io"
        );
    }
    s.push('\n');
    // Zero-valued components (no I/O at all, say) sit in bucket 0, far below the durations;
    // a run of two or more empty rows between is drawn as one `...` row.
    let row_used = |b: usize| h.iter().any(|x| x.buckets[b] > 0);
    let mut b = lo;
    let last = hi.min(HIST_BUCKETS - 1);
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
        let c = d.buckets[b];
        let width = (c as u128 * 50 / max as u128) as usize;
        let _ = write!(s, "{:<20} {:>8} |{:<50}|", label, c, "@".repeat(width));
        if split {
            for x in &h[1..] {
                let _ = write!(s, " {:>8}", x.buckets[b]);
            }
        }
        s.push('\n');
        b += 1;
    }
    s
}

/// One `{"type":"hist",...}` line per span name.
pub fn render_json(out: &mut Vec<u8>, pair: &PairInfo, h: &[Hist; HIST_COMPONENTS]) {
    out.extend_from_slice(b"{\"type\":\"hist\",\"provider\":\"");
    json_escape(out, pair.provider.as_bytes());
    out.extend_from_slice(b"\",\"name\":\"");
    json_escape(out, pair.stem.as_bytes());
    out.extend_from_slice(b"\"");
    for (name, x) in COMPONENTS.iter().zip(h.iter()) {
        let _ = write!(
            Vec8(out),
            ",\"{name}\":{{\"count\":{},\"sum_ns\":{},\"buckets\":[",
            x.count,
            x.sum
        );
        let mut first = true;
        for (b, &c) in x.buckets.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let (lo, hi) = bucket_range(b);
            if !first {
                out.push(b',');
            }
            first = false;
            let _ = write!(Vec8(out), "{{\"lo\":{lo},\"hi\":{hi},\"count\":{c}}}");
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"}\n");
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
    use usdt_trace_common::log2_bucket;

    #[test]
    fn bucket_ranges_agree_with_kernel_buckets() {
        for v in [0u64, 1, 2, 3, 4, 1000, 1 << 40, u64::MAX / 3] {
            let (lo, hi) = bucket_range(log2_bucket(v));
            assert!(lo <= v && v < hi, "{v} not in [{lo},{hi})");
        }
    }

    #[test]
    fn renders_counts_and_json() {
        let mut h = [Hist::default(); HIST_COMPONENTS];
        for v in [1500u64, 1600, 3000] {
            h[0].buckets[log2_bucket(v)] += 1;
            h[0].count += 1;
            h[0].sum += v;
            h[1].buckets[log2_bucket(v / 2)] += 1;
            h[1].count += 1;
            h[1].sum += v / 2;
        }
        let pair = PairInfo {
            provider: "p".into(),
            stem: "q".into(),
            start: "q__start".into(),
            end: "q__end".into(),
        };
        let t = render_text(&pair, &h);
        assert!(t.contains("@p:q  3 spans"), "{t}");
        // Far-apart buckets: the empty rows between them fold into one "...".
        let mut far = h;
        far[4].buckets[0] = 3;
        far[4].count = 3;
        let t2 = render_text(&pair, &far);
        assert!(t2.contains("[0] ") && t2.contains("\n...\n"), "{t2}");
        assert!(!t2.contains("[4, 8)"), "{t2}");
        assert!(t.contains("[1K, 2K)"), "{t}");
        let mut out = Vec::new();
        render_json(&mut out, &pair, &h);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["duration"]["count"], 3);
        assert_eq!(v["oncpu"]["sum_ns"], 3050);
        assert_eq!(v["duration"]["buckets"].as_array().unwrap().len(), 2);
    }
}
