//! Sinks: what consumes decoded records. `watch` resolves each record against the plan once
//! ([`View`]) and hands it to every sink; a sink decides how it looks and where it goes. New
//! outputs (a timeline file, an exporter) are new sinks, and the reading loop never branches on
//! the output mode.

use super::{hist, json, text, PairInfo, RunInfo, Summary, View};
use crate::output::agg::AggBlock;
use std::io::{self, Write};
use usdt_trace_common::{Hist, WaitRecord, WaitSums, HIST_COMPONENTS};

/// Histograms of every span name, in pair order.
pub struct Hists<'a> {
    pub pairs: &'a [PairInfo],
    pub hists: &'a [[Hist; HIST_COMPONENTS]],
    /// What each span name's spans waited on (same order; what these histograms counted).
    pub waits: &'a [WaitSums],
    /// With `--interval`: the monotonic bounds of what these count (`None` for the totals of
    /// a run without intervals), and whether this is the whole run rather than one interval.
    pub bounds: Option<(u64, u64)>,
    pub total: bool,
}

impl Hists<'_> {
    /// Span names that closed at least one span (the others have nothing to draw).
    fn drawn(&self) -> impl Iterator<Item = (&PairInfo, &[Hist; HIST_COMPONENTS], &WaitSums)> {
        // A span name past `waits` (none read) waited on nothing known.
        static NONE: WaitSums = WaitSums {
            ns: [0; usdt_trace_common::WAIT_KINDS],
            n: [0; usdt_trace_common::WAIT_KINDS],
            probe_hits: 0,
            probe_ns: 0,
        };
        self.pairs
            .iter()
            .zip(self.hists.iter())
            .enumerate()
            .filter(|(_, (_, h))| h[0].count > 0)
            .map(|(i, (p, h))| (p, h, self.waits.get(i).unwrap_or(&NONE)))
    }
}

/// `--baseline`: the live run compared with an earlier one, per span name, at the end.
pub struct Compared<'a> {
    /// The baseline file, as given.
    pub baseline: &'a std::path::Path,
    /// Each span name's comparison as `diff` prints it, escaped already (span names come
    /// from the files): rendered by the caller, so that output needs nothing of `diff`.
    pub text: &'a [String],
    /// The same as `diff --json`'s lines, newline-terminated.
    pub json: &'a [u8],
}

/// Consumes records. Each call may buffer; [`Sink::flush`] follows every batch.
pub trait Sink {
    /// Once, before the first record.
    fn begin(&mut self, _run: &RunInfo) -> io::Result<()> {
        Ok(())
    }
    fn record(&mut self, v: &View) -> io::Result<()>;
    /// `--perfetto`: one off-CPU interval of a thread with a span open, as it ended (before
    /// the span that holds it). Only the Perfetto sink draws them.
    fn wait(&mut self, _w: &WaitRecord) -> io::Result<()> {
        Ok(())
    }
    /// After each batch of records: make what was written visible.
    fn flush(&mut self) -> io::Result<()>;
    /// The histograms, at each `--interval` and at the end of a `--hist` run.
    fn hists(&mut self, _h: &Hists) -> io::Result<()> {
        Ok(())
    }
    /// The aggregates (`--by`, `--count`, `--top`) at an interval or at the end: each sink
    /// renders them its own way (text tables, JSON lines), or not at all.
    fn block(&mut self, _b: &AggBlock) -> io::Result<()> {
        Ok(())
    }
    /// `--baseline`: once, at the end, just before [`Sink::finish`].
    fn compared(&mut self, _c: &Compared) -> io::Result<()> {
        Ok(())
    }
    /// Once, at the end.
    fn finish(&mut self, s: &Summary) -> io::Result<()>;
}

/// Writes and empties a sink's buffered batch; nothing at all for an empty one.
fn write_batch(out: &mut impl Write, buf: &mut Vec<u8>) -> io::Result<()> {
    if !buf.is_empty() {
        out.write_all(buf)?;
        buf.clear();
        out.flush()?;
    }
    Ok(())
}

/// Aligned text for a terminal.
pub struct TextSink<W: Write> {
    out: W,
    buf: Vec<u8>,
    /// Monotonic time that `TIME(s)` counts from.
    t0: u64,
    /// Print the column header (not in histogram mode, where no span lines follow).
    header: bool,
    /// Spans carry a time split (not --no-sched): one without says why.
    split: bool,
    /// `--baseline`: the comparison, printed after the summary.
    compared: String,
    /// Spans printed, and those where the tracing was a visible share (said at the end).
    spans: u64,
    tracing_visible: u64,
}

impl<W: Write> TextSink<W> {
    pub fn new(out: W, header: bool) -> Self {
        TextSink {
            out,
            buf: Vec::with_capacity(1 << 16),
            t0: 0,
            header,
            split: false,
            compared: String::new(),
            spans: 0,
            tracing_visible: 0,
        }
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> Sink for TextSink<W> {
    fn begin(&mut self, run: &RunInfo) -> io::Result<()> {
        self.t0 = run.t0_ns;
        self.split = run.split;
        if self.header {
            self.out.write_all(text::text_header().as_bytes())?;
            self.out.flush()?;
        }
        Ok(())
    }

    fn record(&mut self, v: &View) -> io::Result<()> {
        let line = match *v {
            View::Event { site, rec, strs } => text::event_text(site, rec, strs, self.t0),
            View::Span {
                pair,
                start,
                end,
                rec,
                strs,
                stack,
            } => {
                self.spans += 1;
                let dur = rec.hdr.ts_ns.saturating_sub(rec.start_ns);
                if rec.acct_valid != 0 && super::tracing_visible(rec.acct.probe_ns, dur) {
                    self.tracing_visible += 1;
                }
                let mut line = text::span_text(pair, start, end, rec, strs, self.t0, self.split);
                if let Some(st) = stack {
                    text::stack_text(&mut line, st);
                }
                line
            }
        };
        self.buf.extend_from_slice(line.as_bytes());
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        write_batch(&mut self.out, &mut self.buf)
    }

    fn hists(&mut self, h: &Hists) -> io::Result<()> {
        self.flush()?;
        if let Some((a, b)) = h.bounds {
            let secs = |t: u64| t.saturating_sub(self.t0) as f64 / 1e9;
            let what = if h.total { "total" } else { "interval" };
            let line = format!("--- {what} {:.3}s to {:.3}s ---\n", secs(a), secs(b));
            self.buf.extend_from_slice(line.as_bytes());
        }
        for (p, x, w) in h.drawn() {
            self.buf
                .extend_from_slice(hist::render_text(p, x, w).as_bytes());
            self.buf.push(b'\n');
        }
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()
    }

    fn block(&mut self, b: &AggBlock) -> io::Result<()> {
        self.flush()?;
        self.out
            .write_all(crate::output::agg::render::text(b).as_bytes())?;
        self.out.flush()
    }

    fn compared(&mut self, c: &Compared) -> io::Result<()> {
        self.compared = format!(
            "--- compared with the baseline {} ---\n",
            text::clean(&c.baseline.display().to_string())
        );
        // Escaped already: escaping here again would double every backslash, and a name's
        // newline would already be a line.
        for x in c.text {
            self.compared.push_str(x);
        }
        Ok(())
    }

    fn finish(&mut self, s: &Summary) -> io::Result<()> {
        self.flush()?;
        self.out.write_all(text::summary_text(s).as_bytes())?;
        if self.tracing_visible > 0 {
            let line = format!(
                "note: in {} of {} spans the probes inside them were a tenth of the span or more (\"tracing ≈\" on their lines): their durations include that much tracing\n",
                self.tracing_visible, self.spans
            );
            self.out.write_all(line.as_bytes())?;
        }
        self.out
            .write_all(std::mem::take(&mut self.compared).as_bytes())?;
        self.out.flush()
    }
}

/// One JSON object per line (`--json`).
pub struct JsonSink<W: Write> {
    out: W,
    buf: Vec<u8>,
}

impl<W: Write> JsonSink<W> {
    pub fn new(out: W) -> Self {
        JsonSink {
            out,
            buf: Vec::with_capacity(1 << 16),
        }
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> Sink for JsonSink<W> {
    fn begin(&mut self, run: &RunInfo) -> io::Result<()> {
        json::start_json(&mut self.buf, run);
        self.flush()
    }

    fn record(&mut self, v: &View) -> io::Result<()> {
        match *v {
            View::Event { site, rec, strs } => json::event_json(&mut self.buf, site, rec, strs),
            View::Span {
                pair,
                start,
                end,
                rec,
                strs,
                stack,
            } => json::span_json(&mut self.buf, pair, start, end, rec, strs, stack),
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        write_batch(&mut self.out, &mut self.buf)
    }

    fn hists(&mut self, h: &Hists) -> io::Result<()> {
        self.flush()?;
        for (p, x, w) in h.drawn() {
            hist::render_json(&mut self.buf, p, x, w, h.bounds.map(|b| (b, h.total)));
        }
        self.flush()
    }

    fn block(&mut self, b: &AggBlock) -> io::Result<()> {
        self.flush()?;
        crate::output::agg::render::json(&mut self.buf, b);
        self.flush()
    }

    fn compared(&mut self, c: &Compared) -> io::Result<()> {
        self.buf.extend_from_slice(c.json);
        Ok(())
    }

    fn finish(&mut self, s: &Summary) -> io::Result<()> {
        json::summary_json(&mut self.buf, s);
        self.flush()
    }
}

/// Several sinks fed the same records, in order (e.g. text on stdout and a file beside it).
#[derive(Default)]
pub struct Fanout(pub Vec<Box<dyn Sink>>);

impl Sink for Fanout {
    fn begin(&mut self, run: &RunInfo) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.begin(run))
    }
    fn record(&mut self, v: &View) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.record(v))
    }
    fn wait(&mut self, w: &WaitRecord) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.wait(w))
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.flush())
    }
    fn hists(&mut self, h: &Hists) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.hists(h))
    }
    fn block(&mut self, b: &AggBlock) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.block(b))
    }
    fn compared(&mut self, c: &Compared) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.compared(c))
    }
    fn finish(&mut self, s: &Summary) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|x| x.finish(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One comparison of a span name only the baseline has (the simplest to build).
    fn compared() -> Vec<crate::diff::Comparison> {
        let base = "{\"type\":\"span\",\"provider\":\"app\",\"name\":\"x\",\"duration_ns\":1000}\n";
        let spans = crate::diff::read_run(std::path::Path::new("b"), base.as_bytes()).unwrap();
        crate::diff::compare_runs(spans, Default::default())
    }

    #[test]
    fn the_baseline_report_follows_the_summary_in_text_and_precedes_it_in_json() {
        let c = compared();
        let text: Vec<String> = c.iter().map(crate::diff::to_text).collect();
        let mut json = Vec::new();
        for x in &c {
            crate::diff::write_comparison(x, true, &mut json).unwrap();
        }
        let report = Compared {
            baseline: std::path::Path::new("base.ndjson"),
            text: &text,
            json: &json,
        };
        let mut text = TextSink::new(Vec::new(), false);
        text.compared(&report).unwrap();
        text.finish(&Summary::default()).unwrap();
        let text = String::from_utf8(text.into_inner()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1..],
            [
                "--- compared with the baseline base.ndjson ---",
                "app:x: only before (1 spans, mean 1.0us)"
            ],
            "{text}"
        );
        assert!(lines[0].starts_with("0 spans, 0 events"), "{text}");

        let mut json = JsonSink::new(Vec::new());
        json.compared(&report).unwrap();
        json.finish(&Summary::default()).unwrap();
        let json = String::from_utf8(json.into_inner()).unwrap();
        let v: Vec<serde_json::Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(v.len(), 2, "{json}");
        assert_eq!(v[0], crate::diff::to_json(&c[0]));
        assert_eq!(v[0]["type"], "diff");
        assert_eq!(v[1]["type"], "summary");
    }
}
