#!/usr/bin/env python3
"""Function probes on a real server (root, about 3 minutes): Debian's redis-server under
`redis-benchmark -t set,get`, requests/s traced over untraced, one function traced with a
duration histogram, side by side with bpftrace's uprobe + uretprobe + hist() on the same
function, in one run:

  - usdt-trace `--hist` with each `--fn-returns` mode: `auto` (the default: a return probe on
    leaf functions, an ordinary probe on each `ret` elsewhere), `ret-insn` (never a return
    probe) and `return-probe` (the risky one, for comparison);
  - usdt-trace `--hist --no-sched` (durations only, as bpftrace's hist());
  - bpftrace `uprobe:F { @s[tid] = nsecs } uretprobe:F /@s[tid]/ { @h = hist(...) }`.

`createStringObject` tail-calls (its call ends at the `ret` of the function it jumps to);
`siphash` is a leaf. Prints throughput, the ratio to untraced, and ours over bpftrace's
(higher is better: more requests served while traced). Medians of --reps interleaved runs.
Not a test.
"""
import argparse, os, re, signal, statistics, subprocess, sys, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = "/usr/bin/redis-server"


def start_server(port):
    p = subprocess.Popen([SERVER, "--port", str(port), "--save", "", "--appendonly", "no"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        r = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True)
        if r.stdout.strip() == "PONG":
            return p
        time.sleep(0.05)
    sys.exit("redis-server did not start")


def attach(cmd, ready):
    """Starts a tracer and waits for its readiness line (usdt-trace says it on stderr,
    bpftrace on stdout); the rest of both streams is drained so the tracer never blocks."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = threading.Event()

    def drain(stream):
        for line in stream:
            if ready in line:
                seen.set()

    for s in (p.stdout, p.stderr):
        threading.Thread(target=drain, args=(s,), daemon=True).start()
    if not seen.wait(60):
        p.kill()
        sys.exit(f"{cmd[0]} did not attach within 60 s")
    return p


def detach(p):
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def rps(port, n):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set,get", "-n", str(n),
                          "-c", "20", "-q"], capture_output=True, text=True).stdout
    vals = [float(v) for v in re.findall(r"([0-9.]+) requests per second", out)]
    if len(vals) != 2:
        sys.exit(f"no throughput in {out!r}")
    return sum(vals) / len(vals)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--usdt-trace", default=os.path.join(ROOT, "target/release/usdt-trace"))
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--functions", default="createStringObject,siphash")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("fn_redis.py needs root (it attaches uprobes)")
    port = 30000 + os.getpid() % 20000
    srv = start_server(port)
    pid = str(srv.pid)
    have_bt = subprocess.run(["which", "bpftrace"], capture_output=True).returncode == 0
    try:
        for fn in a.functions.split(","):
            configs = [("untraced", None, None)]
            for mode in ["auto", "ret-insn", "return-probe"]:
                configs.append((f"usdt-trace --hist --fn-returns {mode}",
                                [a.usdt_trace, "watch", "--hist", "--fn-returns", mode,
                                 "-p", pid, SERVER, f"fn:{fn}"], "Attached"))
            # Durations only, what bpftrace's hist() measures (no scheduler hooks).
            configs.append(("usdt-trace --hist --no-sched (auto)",
                            [a.usdt_trace, "watch", "--hist", "--no-sched",
                             "-p", pid, SERVER, f"fn:{fn}"], "Attached"))
            if have_bt:
                prog = (f"uprobe:{SERVER}:{fn} /pid == {pid}/ {{ @s[tid] = nsecs; }} "
                        f"uretprobe:{SERVER}:{fn} /@s[tid]/ {{ @h = hist(nsecs - @s[tid]); "
                        f"delete(@s[tid]); }}")
                configs.append(("bpftrace uprobe+uretprobe hist()", ["bpftrace", "-e", prog],
                                "Attaching"))
            res = {c[0]: [] for c in configs}
            for rep in range(a.reps):
                for name, cmd, ready in configs:
                    tracer = attach(cmd, ready) if cmd else None
                    try:
                        res[name].append(rps(port, a.requests))
                    finally:
                        if tracer:
                            detach(tracer)
                print(f"[{fn} {rep + 1}/{a.reps}] " +
                      ", ".join(f"{k} {v[-1]:.0f}" for k, v in res.items()), file=sys.stderr)
            med = {k: statistics.median(v) for k, v in res.items()}
            base = med["untraced"]
            bt = med.get("bpftrace uprobe+uretprobe hist()")
            print(f"\n## redis-server, fn:{fn} ({os.uname().release}, {os.cpu_count()} CPUs, "
                  f"redis-benchmark -t set,get -n {a.requests} -c 20, medians of {a.reps})\n")
            print("| tracer | requests/s | traced / untraced | ours / bpftrace |")
            print("|---|---|---|---|")
            for k, v in med.items():
                vs = f"{v / bt:.2f}x" if bt and k.startswith("usdt-trace") else ""
                print(f"| {k} | {v:,.0f} | {v / base:.2f} | {vs} |")
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()
