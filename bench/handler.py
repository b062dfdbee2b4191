#!/usr/bin/env python3
"""The uprobe program's own share of a traced span (root, about a minute): the target's CPU time
per usdt_markers.h start/end pair (tests/testprogs/bench_markers_loop.c, `nop; nop5` sites the
kernel optimizes) minus the untraced loop's, for

  - the null program: `watch --bench-null-program` (hidden from --help) attaches `usdt_null`,
    which only returns, on the same sites (the floor: the optimized call, uprobe dispatch, BPF run);
  - usdt-trace's program per mode: --hist, --json, events (--no-auto-span: start and end are two
    events), strings (--json --str op__start:2, on a loop whose start carries a string);
  - optionally bpftrace hist() for scale.

Each line shows the added ns per pair and the handler's share over the null program
((mode - null) / null). Medians of --reps interleaved runs. Not a test.
"""
import argparse, os, statistics, subprocess, sys, tempfile

from markers_loop import ROOT, build, run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--usdt-trace", default=os.path.join(ROOT, "target/release/usdt-trace"))
    ap.add_argument("--pairs", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-bpftrace", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("handler.py needs root (it loads BPF programs)")
    work = tempfile.mkdtemp(prefix="usdt-handler.", dir="/var/tmp")
    loop = build(os.path.join(work, "loop"))
    loop_str = build(os.path.join(work, "loop_str"), "-DBENCH_STR")
    ut = a.usdt_trace
    configs = [
        ("untraced", None, loop, None),
        ("untraced (string loop)", None, loop_str, None),
        ("null program", [ut, "watch", "--json", "--bench-null-program", "-c"], loop, None),
        ("null program (string loop)", [ut, "watch", "--json", "--bench-null-program", "-c"], loop_str, None),
        ("--hist", [ut, "watch", "--hist", "-c"], loop, None),
        ("--hist --no-sched", [ut, "watch", "--hist", "--no-sched", "-c"], loop, None),
        ("--json", [ut, "watch", "--json", "-c"], loop, None),
        ("--json --no-sched", [ut, "watch", "--json", "--no-sched", "-c"], loop, None),
        ("events (--json --no-auto-span)", [ut, "watch", "--json", "--no-auto-span", "-c"], loop, None),
        ("strings (--json --str op__start:2)", [ut, "watch", "--json", "--str", "op__start:2", "-c"], loop_str, None),
    ]
    have_bt = not a.no_bpftrace and subprocess.run(["which", "bpftrace"], capture_output=True).returncode == 0
    if have_bt:
        bt = ("usdt:{b}:bench:op__start {{ @s[tid] = nsecs; }} "
              "usdt:{b}:bench:op__end /@s[tid]/ {{ @h = hist(nsecs - @s[tid]); delete(@s[tid]); }}")
        configs.append(("bpftrace hist()", ["bpftrace", "-e", bt.format(b=loop), "-c"], loop, None))
    res = {c[0]: [] for c in configs}
    for rep in range(a.reps):
        for name, prefix, binary, env in configs:
            res[name].append(run(prefix, binary, a.pairs, work, env)[0])
        print(f"[{rep + 1}/{a.reps}] " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in res.items()), file=sys.stderr)
    med = {k: statistics.median(v) for k, v in res.items()}
    base = {loop: med["untraced"], loop_str: med["untraced (string loop)"]}
    null = {loop: med["null program"] - base[loop], loop_str: med["null program (string loop)"] - base[loop_str]}
    print(f"## Handler cost per start/end pair ({os.uname().release}, {os.cpu_count()} CPUs, "
          f"{a.pairs} pairs, medians of {a.reps})")
    print()
    print("| configuration | added ns/pair | over the null program |")
    print("|---|---|---|")
    for name, prefix, binary, env in configs:
        if prefix is None:
            continue
        add = med[name] - base[binary]
        over = "" if env else f"{(add - null[binary]) / null[binary] * 100:+.0f}%"
        print(f"| {name} | {add:.0f} | {over} |")


if __name__ == "__main__":
    main()
