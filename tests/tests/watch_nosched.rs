//! `--no-sched`: without the scheduler hooks a thread's state never leaves "running", so a
//! split would say every span ran on the CPU the whole time. Spans must carry none instead,
//! whether paired per thread or by id (a program of its own, `usdt_site_nosplit`, serves
//! that mode). The same runs with the hooks are the control: they do show the sleep.
use usdt_trace_tests::{testprogs::build_c, watch};

const N: u64 = 4;
const MS: u64 = 5;

/// The pairing flags: per thread (by name), or by argument 0.
const PAIRINGS: [&[&str]; 2] = [
    &[],
    &[
        "--no-auto-span",
        "--span",
        "nap:t__start=nap:t__end",
        "--key",
        "0",
    ],
];

fn run(pairing: &[&str], extra: &[&str]) -> watch::Output {
    run_gap(pairing, extra, 0)
}

/// With `gap_ms` of sleep outside any span after each span.
fn run_gap(pairing: &[&str], extra: &[&str], gap_ms: u64) -> watch::Output {
    let bin = build_c("nosched_nap", &["-O2"]);
    let bin = bin.to_str().unwrap();
    let cmd = format!("{bin} {N} {MS} {gap_ms}");
    let mut args: Vec<&str> = pairing.to_vec();
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-c", &cmd, bin]);
    let out = watch::Watch::start(&args).finish();
    assert!(out.status.success(), "{}", out.stderr);
    out
}

#[test]
#[ignore = "needs root"]
fn without_sched_hooks_sleeping_spans_carry_no_split() {
    for pairing in PAIRINGS {
        let with = run(pairing, &[]);
        assert_eq!(
            with.spans().len() as u64,
            N,
            "{pairing:?}: {:?}",
            with.records
        );
        for s in with.spans() {
            let sleep = s["sleep_ns"].as_u64().unwrap_or(0);
            assert!(sleep >= (MS - 1) * 1_000_000, "{pairing:?}: control: {s}");
        }
        let without = run(pairing, &["--no-sched"]);
        assert_eq!(
            without.spans().len() as u64,
            N,
            "{pairing:?}: {:?}",
            without.records
        );
        for s in without.spans() {
            assert!(s["duration_ns"].as_u64().unwrap() >= MS * 1_000_000, "{s}");
            for k in [
                "oncpu_ns",
                "steal_ns",
                "offcpu_ns",
                "sleep_ns",
                "runq_ns",
                "io_ns",
            ] {
                assert!(
                    s.get(k).is_none(),
                    "{pairing:?}: --no-sched span has {k}: {s}"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs root"]
fn without_sched_hooks_histograms_have_no_split() {
    for pairing in PAIRINGS {
        for (extra, split) in [
            (&["--hist"][..], true),
            (&["--hist", "--no-sched"][..], false),
        ] {
            let out = run(pairing, extra);
            let h: Vec<_> = out.of_type("hist").collect();
            assert_eq!(h.len(), 1, "{:?}", out.records);
            assert_eq!(h[0]["duration"]["count"], N, "{}", h[0]);
            let sleep = h[0]["sleep"]["count"].as_u64().unwrap();
            let oncpu = h[0]["oncpu"]["count"].as_u64().unwrap();
            if split {
                assert_eq!((oncpu, sleep), (N, N), "{pairing:?}: control: {}", h[0]);
                // A nap does no I/O: the kernel skips zero parts and user space counts them
                // back (fill_zero_parts), so every span is in the I/O histogram's bucket 0.
                assert_eq!(h[0]["io"]["count"], N, "{}", h[0]);
                assert_eq!(h[0]["io"]["sum_ns"], 0, "{}", h[0]);
            } else {
                assert_eq!((oncpu, sleep), (0, 0), "{pairing:?}: {extra:?}: {}", h[0]);
            }
        }
    }
}

/// The scheduler hooks look only at threads that may have a span open: a thread drops out of
/// their filter when it leaves the CPU with no span open (here: sleeping between spans), and
/// its next span's start must bring it back, or that span's sleep would read as on-CPU time.
#[test]
#[ignore = "needs root"]
fn a_thread_that_slept_between_spans_gets_its_next_spans_split() {
    for pairing in PAIRINGS {
        let out = run_gap(pairing, &[], 3 * MS);
        assert_eq!(
            out.spans().len() as u64,
            N,
            "{pairing:?}: {:?}",
            out.records
        );
        for s in out.spans() {
            let sleep = s["sleep_ns"].as_u64().unwrap_or(0);
            let oncpu = s["oncpu_ns"].as_u64().unwrap_or(u64::MAX);
            assert!(sleep >= (MS - 1) * 1_000_000, "{pairing:?}: {s}");
            assert!(oncpu < 1_000_000, "{pairing:?}: a nap is not on CPU: {s}");
        }
    }
}
