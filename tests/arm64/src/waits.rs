//! What a sleeping thread waited on, on arm64: `tests/arm64/progs/arm64_waits.c` makes spans
//! that each wait one known way (nanosleep, a mutex another thread holds, recv/read/poll/select
//! on a socket, read/poll/select on a pipe) and times them itself. Each span's kind must carry
//! most of the time the thread was not running by the program's clocks (wall time between
//! the probes less its CPU time); a pipe wait names no kind (the x86_64 tests' rule: a pipe is
//! not the network).
//!
//! Checked by shares over the rounds, not by tight times: the emulated vCPU is slow and loses
//! the host CPU now and then, and a wakeup then waits in the run queue, which is no kind.

use crate::{check, clocks, json_lines, of_type, summary, tail, tracer, u, PROGS};
use serde_json::Value;

/// (span name, the kind that must carry its wait; None: no kind, a pipe).
const SPANS: &[(&str, Option<&str>)] = &[
    ("timer", Some("timer")),
    ("lock", Some("lock")),
    ("recv", Some("net")),
    ("readsock", Some("net")),
    ("pollsock", Some("net")),
    ("selectsock", Some("net")),
    ("readpipe", None),
    ("pollpipe", None),
    ("selectpipe", None),
];

const KINDS: &[&str] = &["lock", "net", "timer", "disk", "fault"];

fn kind_ns(s: &Value, kind: &str) -> u64 {
    s["waits"][kind]["ns"].as_u64().unwrap_or(0)
}

pub fn watch_waits() -> Result<String, String> {
    const ROUNDS: usize = 3;
    const MS: u64 = 20;
    let prog = format!("{PROGS}/arm64_waits");
    let cmd = format!("{prog} {ROUNDS} {MS}");
    let out = tracer(&["watch", "--json", "-c", &cmd, &prog])?;
    let clocks = clocks(&out.stderr);
    check(clocks.len() == SPANS.len() * ROUNDS, || {
        format!(
            "the target printed {} clock lines: {}",
            clocks.len(),
            tail(&out.stderr)
        )
    })?;
    let recs = json_lines(&out.stdout);
    let spans = of_type(&recs, "span");
    check(spans.len() == SPANS.len() * ROUNDS, || {
        format!(
            "{} spans, want {}: {}",
            spans.len(),
            SPANS.len() * ROUNDS,
            tail(&out.stdout)
        )
    })?;
    let mut figures = Vec::new();
    for &(name, want) in SPANS {
        // Sums over the rounds: the program's time not running, the span's kinds.
        let (mut not_running, mut kind, mut others, mut sleep) = (0u64, 0u64, 0u64, 0u64);
        for c in clocks.iter().filter(|c| c.name == name) {
            let s = spans
                .iter()
                .find(|s| s["name"] == name && s["args"][0] == c.i)
                .ok_or_else(|| format!("no span {name} {}", c.i))?;
            let dur = u(&s["duration_ns"])?;
            check(u(&s["oncpu_ns"])? + u(&s["offcpu_ns"])? == dur, || {
                format!("oncpu + offcpu != duration: {s}")
            })?;
            not_running += (c.c - c.b).saturating_sub(c.cpu);
            sleep += u(&s["sleep_ns"])?;
            for k in KINDS {
                if Some(*k) == want {
                    kind += kind_ns(s, k);
                    check(s["waits"][k]["n"].as_u64().unwrap_or(0) >= 1, || {
                        format!("{name} {}: no {k} wait: {s}", c.i)
                    })?;
                } else {
                    others += kind_ns(s, k);
                }
            }
            // A pipe is not the network, whatever polled or read it (the x86_64 rule: the
            // net kind exactly 0).
            if want.is_none() {
                check(kind_ns(s, "net") == 0, || {
                    format!("{name} {}: a pipe is not the network: {s}", c.i)
                })?;
            }
        }
        let pct = |x: u64| 100.0 * x as f64 / not_running.max(1) as f64;
        match want {
            Some(k) => {
                // Most of the time not running, and nearly all of the sleep part.
                check(2 * kind >= not_running && 10 * kind >= 9 * sleep, || {
                    format!(
                        "{name}: {k} {kind} ns of {not_running} ns not running ({:.0}%), sleep {sleep} ns, other kinds {others} ns",
                        pct(kind)
                    )
                })?;
                check(10 * others <= not_running, || {
                    format!("{name}: other kinds {others} ns of {not_running} ns not running")
                })?;
                figures.push(format!("{name} {k} {:.0}%", pct(kind)));
            }
            None => {
                // The wait happened (asleep most of the time) and no kind named it.
                check(
                    2 * sleep >= not_running && 10 * others <= not_running,
                    || {
                        format!(
                        "{name}: sleep {sleep} ns, kinds {others} ns of {not_running} ns not running"
                    )
                    },
                )?;
                figures.push(format!(
                    "{name} other {:.0}% (kinds {:.0}%)",
                    pct(sleep),
                    pct(others)
                ));
            }
        }
    }
    let s = summary(&recs)?;
    check(
        s["lost"] == 0 && s["unmatched"] == 0 && s["unmatched_end"] == 0,
        || format!("summary {s}"),
    )?;
    Ok(format!(
        "{} spans, kind's share of the time not running (program's clocks): {}",
        spans.len(),
        figures.join(", ")
    ))
}
