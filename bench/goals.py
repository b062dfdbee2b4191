#!/usr/bin/env python3
"""The goal table of docs/performance.md, measured in one run (root, ~2 minutes; not a
test, nothing is asserted). On usdt_markers.h spans (tests/testprogs/bench_markers_loop.c,
`nop; nop5` sites that a 6.18+ kernel optimizes into a call), the target's own CPU time per
start/end pair minus the untraced loop's:

  - the floor: `watch --bench-null-program` (hidden from --help): a program that only returns;
  - usdt-trace --hist, against bpftrace hist() on the same binary (goal <= 0.5x), and
    --hist --no-sched (durations only, no time split: the same question hist() answers);
  - usdt-trace --json into a file, against bpftrace printf() per span into a file
    (goal <= 0.12x), both checked for loss: every one of --pairs spans must be in the file
    (goal: zero loss at 300,000 spans);
  - untraced: the cost of a site that nothing traces, per probe, against the same loop built
    without sites (goal <= 1 ns).

Prints a markdown table naming the kernel and the machine. Medians of --reps interleaved runs.
"""
import argparse, json, os, platform, re, statistics, subprocess, sys, tempfile

from markers_loop import ROOT, build, run


def log(m):
    print(m, file=sys.stderr, flush=True)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            return m.group(1).strip() if m else platform.processor()
    except OSError:
        return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--usdt-trace", default=os.path.join(ROOT, "target/release/usdt-trace"))
    ap.add_argument("--pairs", type=int, default=300_000)
    ap.add_argument("--untraced-iters", type=int, default=50_000_000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("goals.py needs root (it loads BPF programs)")
    work = tempfile.mkdtemp(prefix="usdt-goals.", dir="/var/tmp")
    loop = build(os.path.join(work, "loop"))
    empty = build(os.path.join(work, "loop_noprobes"), "-DBENCH_NO_PROBES")
    ut = a.usdt_trace
    ours_json = os.path.join(work, "spans.ndjson")
    bt_out = os.path.join(work, "bt.txt")
    bt_start = "usdt:{b}:bench:op__start {{ @s[arg0] = nsecs; }} "
    bt_hist = bt_start + "usdt:{b}:bench:op__end /@s[arg0]/ {{ @h = hist(nsecs - @s[arg0]); delete(@s[arg0]); }}"
    bt_printf = bt_start + ('usdt:{b}:bench:op__end /@s[arg0]/ {{ printf("{{\\"id\\":%d,\\"duration_ns\\":%d}}\\n", '
                            'arg0, nsecs - @s[arg0]); delete(@s[arg0]); }}')
    have_bt = subprocess.run(["which", "bpftrace"], capture_output=True).returncode == 0
    configs = [
        ("untraced", None, loop, None),
        ("null", [ut, "watch", "--json", "--bench-null-program", "-c"], loop, None),
        ("hist", [ut, "watch", "--hist", "-c"], loop, None),
        # Durations only, no time split: what bpftrace's hist() measures.
        ("hist_nosched", [ut, "watch", "--hist", "--no-sched", "-c"], loop, None),
        ("json", [ut, "watch", "--json", "-o", ours_json, "-c"], loop, None),
    ]
    if have_bt:
        configs += [
            ("bt_hist", ["bpftrace", "-e", bt_hist.format(b=loop), "-c"], loop, None),
            ("bt_printf", ["bpftrace", "-o", bt_out, "-e", bt_printf.format(b=loop), "-c"], loop, None),
        ]
    res = {c[0]: [] for c in configs}
    loss = {"json": [], "bt_printf": []}
    for rep in range(a.reps):
        for name, prefix, binary, env in configs:
            v, _ = run(prefix, binary, a.pairs, work, env)
            res[name].append(v)
            if name == "json":
                spans, lost = 0, None
                with open(ours_json) as f:
                    for line in f:
                        if line.startswith('{"type":"span"'):
                            spans += 1
                        elif line.startswith('{"type":"summary"'):
                            lost = json.loads(line)["lost"]
                loss["json"].append((a.pairs - spans, lost))
            elif name == "bt_printf":
                with open(bt_out) as f:
                    spans = sum(1 for line in f if line.startswith('{"id"'))
                loss["bt_printf"].append((a.pairs - spans, None))
        log(f"[{rep + 1}/{a.reps}] " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in res.items()))
    # Untraced sites: many more iterations, against the loop without sites.
    unt, emp = [], []
    for _ in range(a.reps):
        unt.append(run(None, loop, a.untraced_iters, work)[0])
        emp.append(run(None, empty, a.untraced_iters, work)[0])
    med = {k: statistics.median(v) for k, v in res.items()}
    base = med["untraced"]
    add = {k: med[k] - base for k in med if k != "untraced"}
    per_probe = (statistics.median(unt) - statistics.median(emp)) / 2

    def ratio(x, y):
        return f"{add[x] / add[y]:.2f}x" if x in add and y in add and add[y] > 0 else "n/a"

    def lossy(k):
        if not loss.get(k):
            return "n/a"
        missing = max(m for m, _ in loss[k])
        lost = max((l for _, l in loss[k] if l is not None), default=None)
        return "none" if missing == 0 and not lost else f"{missing} missing" + (f", {lost} lost" if lost else "")

    kernel = os.uname().release
    print(f"Kernel {kernel}, {os.cpu_count()} vCPUs ({cpu_model()}); usdt_markers.h spans "
          f"(`nop; nop5` sites, optimized by the kernel); {a.pairs} spans per run, medians of {a.reps}.")
    print()
    print("| measure | usdt-trace | null program (floor) | bpftrace | ratio | goal |")
    print("|---|---|---|---|---|---|")
    print(f"| `--hist`, added CPU per span | {add['hist']:.0f} ns | {add['null']:.0f} ns "
          f"| {add.get('bt_hist', float('nan')):.0f} ns (`hist()`) | {ratio('hist', 'bt_hist')} | <= 0.5x |")
    print(f"| `--hist --no-sched` (durations only, as `hist()`) | {add['hist_nosched']:.0f} ns "
          f"| {add['null']:.0f} ns | {add.get('bt_hist', float('nan')):.0f} ns (`hist()`) "
          f"| {ratio('hist_nosched', 'bt_hist')} | |")
    print(f"| the floor alone against `hist()` | | {add['null']:.0f} ns "
          f"| {add.get('bt_hist', float('nan')):.0f} ns | {ratio('null', 'bt_hist')} | |")
    print(f"| `--json` to a file, added CPU per span | {add['json']:.0f} ns | {add['null']:.0f} ns "
          f"| {add.get('bt_printf', float('nan')):.0f} ns (`printf()`) | {ratio('json', 'bt_printf')} | <= 0.12x |")
    print(f"| spans lost of {a.pairs} | {lossy('json')} | | {lossy('bt_printf')} | | none |")
    print(f"| untraced site, per probe | {per_probe:+.2f} ns | | | | <= 1 ns |")
    print(f"| handler over the null program, `--hist` | {(add['hist'] - add['null']) / add['null'] * 100:+.0f}% "
          f"| | | | <= +15% |")
    print(f"| handler over the null program, `--hist --no-sched` "
          f"| {(add['hist_nosched'] - add['null']) / add['null'] * 100:+.0f}% | | | | |")


if __name__ == "__main__":
    main()
