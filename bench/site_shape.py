#!/usr/bin/env python3
"""Per-span cost of the probe site shape: usdt-markers' `nop; nop5` (attached on the nop5,
which the kernel optimizes into a call) against the old 1-byte `nop` (a trap per hit), traced
by usdt-trace --hist and --json, and bpftrace's hist() on the same binary. Prints figures and
ratios; it is not a test.

    bench/site_shape.py [--usdt-trace PATH] [--pairs N] [--reps N]

Needs root, gcc, bpftrace (optional). The figure is the target's own CPU time per start/end
pair (tests/testprogs/bench_markers_loop.c) minus the untraced loop's; medians of --reps runs,
interleaved.
"""
import argparse, os, statistics, subprocess, sys, tempfile

from markers_loop import ROOT, build, run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--usdt-trace", default=os.path.join(ROOT, "target/release/usdt-trace"))
    ap.add_argument("--pairs", type=int, default=200000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("site_shape.py needs root (it loads BPF programs)")
    work = tempfile.mkdtemp(prefix="site-shape-", dir="/var/tmp")
    nop5, nop1 = os.path.join(work, "loop_nop5"), os.path.join(work, "loop_nop1")
    build(nop5)
    build(nop1, '-D_USDT_SITE="990: nop\\n"')
    ut = a.usdt_trace
    bt = ("usdt:{b}:bench:op__start {{ @s[tid] = nsecs; }} "
          "usdt:{b}:bench:op__end /@s[tid]/ {{ @h = hist(nsecs - @s[tid]); delete(@s[tid]); }}")
    have_bt = subprocess.run(["which", "bpftrace"], capture_output=True).returncode == 0
    configs = [
        ("untraced nop;nop5", None, nop5),
        ("untraced nop", None, nop1),
        ("usdt-trace --hist, nop;nop5 (optimized)", [ut, "watch", "--hist", "-c"], nop5),
        ("usdt-trace --hist, 1-byte nop (trap)", [ut, "watch", "--hist", "-c"], nop1),
        ("usdt-trace --json, nop;nop5 (optimized)", [ut, "watch", "--json", "-c"], nop5),
        ("usdt-trace --json, 1-byte nop (trap)", [ut, "watch", "--json", "-c"], nop1),
    ]
    if have_bt:
        configs.append(("bpftrace hist(), nop;nop5 (attaches the nop: trap)",
                        ["bpftrace", "-e", bt.format(b=nop5), "-c"], nop5))
    res = {name: [] for name, _, _ in configs}
    for _ in range(a.reps):
        for name, prefix, binary in configs:
            res[name].append(run(prefix, binary, a.pairs, work)[0])
    med = {k: statistics.median(v) for k, v in res.items()}
    base = {nop5: med["untraced nop;nop5"], nop1: med["untraced nop"]}
    added = {}
    print(f"kernel {os.uname().release}, {os.cpu_count()} CPUs, {a.pairs} pairs, "
          f"median of {a.reps}")
    print(f"{'configuration':52} {'cpu ns/pair':>12} {'added ns/pair':>14}")
    for name, prefix, binary in configs:
        add = med[name] - base[binary] if prefix else None
        added[name] = add
        print(f"{name:52} {med[name]:12.1f} {'' if add is None else f'{add:14.1f}'}")
    def ratio(x, y):
        return added[x] / added[y] if added.get(x) and added.get(y) else float("nan")
    print()
    print("ratios of added cost per pair:")
    print(f"  --hist  optimized / trap:      {ratio(configs[2][0], configs[3][0]):.2f}x")
    print(f"  --json  optimized / trap:      {ratio(configs[4][0], configs[5][0]):.2f}x")
    if have_bt:
        print(f"  --hist optimized / bpftrace hist(): {ratio(configs[2][0], configs[6][0]):.2f}x")
        print(f"  --hist trap      / bpftrace hist(): {ratio(configs[3][0], configs[6][0]):.2f}x")
        print(f"  --json optimized / bpftrace hist(): {ratio(configs[4][0], configs[6][0]):.2f}x")


if __name__ == "__main__":
    main()
