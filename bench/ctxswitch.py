#!/usr/bin/env python3
"""Context-switch cost of the scheduler hooks (root, ~1 minute): a pipe ping-pong between two
processes pinned to one CPU (tests/testprogs/bench_pingpong.c, two context switches per round
trip), CPU time per switch:
  - untraced;
  - `usdt-trace watch` attached to the ping-pong binary, no span ever opened (the hooks' fast
    path: no thread tracked anywhere);
  - the same after one span before the loop (the thread is tracked, no span open: sched_switch
    looks up `next` only);
  - the same with a span around each round trip (per-thread accounting active), and with
    --no-sched (no hooks);
  - with --perfetto (the hooks also send each off-CPU interval of a thread in a span): a
    tracked thread with no span open (must cost what it does without), and a span per round
    trip (one wait record per switch-in);
  - bpftrace with an empty-count sched_switch probe (`tracepoint:sched:sched_switch { @c =
    count(); }`), for scale.
Medians of --reps interleaved runs. --before PATH adds the watch cases run with another
build (e.g. main's), interleaved with these, to measure a change on a shared, noisy machine.
Not a test.
"""
import argparse, os, re, signal, statistics, subprocess, sys, tempfile, time, shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_pp(binp, rts, spans, result):
    subprocess.run([binp, str(rts), spans, "1", result], check=True, stdout=subprocess.DEVNULL)
    with open(result) as f:
        return float(re.search(r"ns_per_rt_cpu=([\d.]+)", f.read()).group(1))


def start(argv, ready_on, pat):
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    stream = p.stderr if ready_on == "stderr" else p.stdout
    deadline = time.time() + 60
    while time.time() < deadline:
        line = stream.readline()
        if not line:
            raise RuntimeError(f"{argv[0]} exited: {p.stderr.read().decode()}")
        if re.search(pat, line.decode(errors="replace")):
            return p
    raise RuntimeError(f"{argv[0]} not ready")


def stop(p):
    p.send_signal(signal.SIGINT)
    try:
        p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--usdt-trace", default=os.path.join(ROOT, "target/release/usdt-trace"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rts", type=int, default=100_000)
    ap.add_argument("--before", help="another usdt-trace build whose watch cases run too")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="usdt-ctxsw.", dir="/var/tmp")
    binp = os.path.join(work, "bench_pingpong")
    subprocess.run(["gcc", "-O2", os.path.join(ROOT, "tests/testprogs/bench_pingpong.c"), "-o", binp], check=True)
    result = os.path.join(work, "result.txt")
    bpftrace = shutil.which("bpftrace")
    usdt = a.usdt_trace
    cases = {
        "untraced": ("0", None),
        "watch, no span open": ("0", ([usdt, "watch", "--json", binp], "stderr", r"^Attached")),
        "watch, tracked thread, no span open": ("2", ([usdt, "watch", "--json", binp], "stderr", r"^Attached")),
        "untraced (span loop)": ("1", None),
        "watch --no-sched, span per round trip": ("1", ([usdt, "watch", "--json", "--no-sched", binp], "stderr", r"^Attached")),
        "watch, span per round trip": ("1", ([usdt, "watch", "--json", binp], "stderr", r"^Attached")),
    }
    trace = os.path.join(work, "pp.pftrace")
    cases["watch --perfetto, tracked thread, no span open"] = ("2", ([usdt, "watch", "--json", "--perfetto", trace, binp], "stderr", r"^Attached"))
    cases["watch --perfetto, span per round trip"] = ("1", ([usdt, "watch", "--json", "--perfetto", trace, binp], "stderr", r"^Attached"))
    if a.before:
        for k, (spans, tracer) in list(cases.items()):
            if tracer and "--perfetto" not in tracer[0]:
                cases[f"before: {k}"] = (spans, ([a.before] + tracer[0][1:], tracer[1], tracer[2]))
    if bpftrace:
        cases["bpftrace sched_switch count()"] = ("0", ([bpftrace, "-e", 'BEGIN { printf("READY\\n"); } tracepoint:sched:sched_switch { @c = count(); }'], "stdout", r"READY"))
    res = {k: [] for k in cases}
    for rep in range(a.reps):
        for k, (spans, tracer) in cases.items():
            p = start(*tracer) if tracer else None
            try:
                res[k].append(run_pp(binp, a.rts, spans, result))
            finally:
                if p:
                    stop(p)
        print(f"[{rep + 1}/{a.reps}] " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in res.items()), file=sys.stderr)
    m = {k: statistics.median(v) for k, v in res.items()}
    print(f"## Context switches ({os.uname().release}, {os.cpu_count()} CPUs): CPU ns per switch, medians of {a.reps}")
    print()
    print("| configuration | ns/switch | added |")
    print("|---|---|---|")
    for k, v in m.items():
        base = m["untraced (span loop)"] if "span" in k and "no span" not in k else m["untraced"]
        print(f"| {k} | {v / 2:.0f} | {(v - base) / 2:+.0f} |")


if __name__ == "__main__":
    main()
