#!/usr/bin/env python3
"""What `watch --stack` costs per stack (root, about 2 minutes with the defaults).

The target (tests/testprogs/bench_stack.c) runs N start/end span pairs whose end fires 12
calls deep, built with frame pointers (`-O2 -fno-omit-frame-pointer`: every method below gets
the right stack) and, for DWARF, also without (`-fomit-frame-pointer`). Per configuration, the
median over --reps runs (interleaved) of:

- target: the target's CPU time per span (user + system: the uprobe trap, the BPF program and
  its stack walk or copy run in its context) minus the untraced loop's;
- tracer: the tracer's own CPU per span after it was ready (reading the ring, unwinding,
  naming, writing the NDJSON to /dev/null);
- lost: stacks the summary says were not read (`stacks_failed`), or bpftrace's lost events.

The target sleeps --gap-us between spans (off CPU: not in its CPU time), so that the tracers
keep up; a configuration that still lost records says so.

Configurations: `watch --json --min 1ns` with no stack, `--stack=fp`, `--stack=dwarf` (both
builds), and bpftrace's `ustack` on the same end probe (`@[ustack] = count()`, kept in the
kernel, and `printf("%s", ustack)`, printed per hit), when bpftrace is installed.

    bench/stack_cost.py [--spans N] [--reps N] [--gap-us N] [--usdt PATH]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Tracer, gcc, log, median, parse_kv  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "testprogs", "bench_stack.c")


def run_target(prog, n, work, gap_us):
    res = os.path.join(work, "res.txt")
    subprocess.run([prog, str(n), res, str(gap_us)], check=True)
    return parse_kv(res)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    # 16.5 KiB per DWARF stack: unpaced, the loop fills the 16 MiB ring in a millisecond.
    ap.add_argument("--gap-us", type=int, default=20)
    ap.add_argument("--usdt", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "usdt-trace"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("stack_cost.py: needs root")
    work = tempfile.mkdtemp(prefix="usdt-stack-bench-")
    fp = gcc(SRC, os.path.join(work, "bench_stack_fp"), "-fno-omit-frame-pointer")
    nofp = gcc(SRC, os.path.join(work, "bench_stack_nofp"), "-fomit-frame-pointer")
    u = a.usdt
    watch = lambda prog, *extra: ([u, "watch", "--json", "--min", "1ns", *extra, prog], "stderr", r"Attached")
    configs = [
        ("none", "watch --json, no stack", fp, watch(fp)),
        ("fp", "watch --stack=fp", fp, watch(fp, "--stack=fp")),
        ("dwarf", "watch --stack=dwarf (frame pointers kept)", fp, watch(fp, "--stack=dwarf")),
        ("dwarf_nofp", "watch --stack=dwarf (-fomit-frame-pointer)", nofp, watch(nofp, "--stack=dwarf")),
    ]
    if shutil.which("bpftrace"):
        for key, label, action in (
            ("bt_count", "bpftrace @[ustack] = count()", "@[ustack] = count();"),
            ("bt_print", "bpftrace printf ustack", 'printf("%s\\n", ustack);'),
        ):
            prog = f'BEGIN {{ printf("READY\\n"); }} usdt:{fp}:bs:op__end {{ {action} }}'
            configs.append((key, label, fp, (["bpftrace", "-e", prog], "stdout", r"READY")))
    base = {}
    rows = {k: [] for k, *_ in configs}
    for rep in range(a.reps):
        for prog in (fp, nofp):
            base.setdefault(prog, []).append(run_target(prog, a.spans, work, a.gap_us)["ns_per_iter_cpu"])
        for key, label, prog, (argv, ready_on, ready_re) in configs:
            out = os.path.join(work, f"{key}.out")
            tr = Tracer(argv, ready_on, ready_re, stdout=out)
            r = run_target(prog, a.spans, work, a.gap_us)
            st = tr.stop()
            lost = 0
            if argv[0] == u:
                for line in open(out, errors="replace"):
                    if '"type":"summary"' in line:
                        s = json.loads(line)
                        lost = s.get("stacks_failed", 0) + s.get("lost", 0)
            else:
                for line in tr.stderr().splitlines():
                    if "Lost" in line:
                        lost += int("".join(c for c in line.split("Lost")[1] if c.isdigit()) or 0)
            rows[key].append((r["ns_per_iter_cpu"], st["cpu_after_ready_ns"] / a.spans, lost))
            log(f"rep {rep + 1} {key}: target {r['ns_per_iter_cpu']:.0f} ns/span, tracer {st['cpu_after_ready_ns'] / a.spans:.0f} ns/span, lost {lost}")
    print(f"\n{a.spans} spans per run, median of {a.reps}; untraced loop: "
          f"{median(base[fp]):.0f} ns (fp build), {median(base[nofp]):.0f} ns (no-fp build) per span\n")
    print("| configuration | target µs/span (added) | tracer µs/span | lost |")
    print("|---|---|---|---|")
    for key, label, prog, _ in configs:
        t = median([x[0] for x in rows[key]]) - median(base[prog])
        c = median([x[1] for x in rows[key]])
        lost = max(x[2] for x in rows[key])
        print(f"| {label} | {t / 1000:.2f} | {c / 1000:.2f} | {lost} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
