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

`createStringObject` tail-calls and opens with `cmp $0x2c,%rsi` (single-stepped) before an
emulated `ja`, where our entry probe sits; `siphash` is a leaf whose first branch comes after
17 register instructions (our `--hist` entry sits there: it reads no arguments). Prints
throughput, the ratio to untraced, and ours over bpftrace's (higher is better: more requests
served while traced), per round and as medians of --reps interleaved rounds.

Then two nested functions at once (`fn:call fn:processCommand`, processCommand calls call):
processCommand's mean duration by each tool, which is what a user comparing the two reads
(the inner function's probes land inside the outer span), and our estimate of the tracing
inside it. And `fn:*` on the whole server: attach time, throughput, and the server's health
after detach. Not a test.
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


def attach(cmd, ready, timeout=60):
    """Starts a tracer and waits for its readiness line (usdt-trace says it on stderr,
    bpftrace on stdout); the rest of both streams is drained (and kept, in p.lines) so the
    tracer never blocks."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = threading.Event()
    p.lines = []
    p.readers = []

    def drain(stream):
        for line in stream:
            p.lines.append(line)
            if ready in line:
                seen.set()

    for s in (p.stdout, p.stderr):
        t = threading.Thread(target=drain, args=(s,), daemon=True)
        t.start()
        p.readers.append(t)
    if not seen.wait(timeout):
        p.kill()
        sys.exit(f"{cmd[0]} did not attach within {timeout} s")
    return p


def detach(p):
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    for t in p.readers:
        t.join(timeout=10)
    return "".join(p.lines)


def our_mean_us(text, name):
    """The mean of span name `name` in a --hist summary (`@fn:F  N spans, mean 5.4us, ...`),
    in µs, and the tracing estimate of that line (`≈ X of each span is tracing`) if any."""
    m = re.search(r"@" + re.escape(name) + r"\s+\d+ spans, mean ([0-9.]+)(ns|us|ms|s)\b", text)
    if not m:
        sys.exit(f"no mean for {name} in {text!r}")
    scale = {"ns": 1e-3, "us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]
    return float(m.group(1)) * scale


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
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--functions", default="createStringObject,siphash")
    ap.add_argument("--sections", default="single,nested,whole",
                    help="which parts to run: single (one function each), nested, whole (fn:*)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("fn_redis.py needs root (it attaches uprobes)")
    port = 30000 + os.getpid() % 20000
    srv = start_server(port)
    pid = str(srv.pid)
    have_bt = subprocess.run(["which", "bpftrace"], capture_output=True).returncode == 0
    try:
        for fn in (a.functions.split(",") if "single" in a.sections else []):
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
            btk = "bpftrace uprobe+uretprobe hist()"
            bt = med.get(btk)
            print(f"\n## redis-server, fn:{fn} ({os.uname().release}, {os.cpu_count()} CPUs, "
                  f"redis-benchmark -t set,get -n {a.requests} -c 20, medians of {a.reps})\n")
            print("| tracer | requests/s | traced / untraced | ours / bpftrace | lowest round |")
            print("|---|---|---|---|---|")
            for k, v in med.items():
                vs = lo = ""
                if bt and k.startswith("usdt-trace"):
                    vs = f"{v / bt:.2f}x"
                    lo = f"{min(o / b for o, b in zip(res[k], res[btk])):.2f}x"
                print(f"| {k} | {v:,.0f} | {v / base:.2f} | {vs} | {lo} |")
        if have_bt and "nested" in a.sections:
            nested(a, port, pid)
        if "whole" in a.sections:
            whole(a, port, pid)
    finally:
        srv.terminate()
        srv.wait()


def nested(a, port, pid):
    """fn:call and fn:processCommand at once (processCommand calls call): processCommand's
    mean by each tool under the same load, interleaved."""
    ours = [a.usdt_trace, "watch", "--hist", "-p", pid, SERVER, "fn:call", "fn:processCommand"]
    prog = " ".join(
        f"uprobe:{SERVER}:{f} /pid == {pid}/ {{ @s{i}[tid] = nsecs; }} "
        f"uretprobe:{SERVER}:{f} /@s{i}[tid]/ {{ @h{i} = hist(nsecs - @s{i}[tid]); "
        f"@m{i} = avg(nsecs - @s{i}[tid]); delete(@s{i}[tid]); }}"
        for i, f in enumerate(["processCommand", "call"]))
    got = {"ours": [], "bpftrace": [], "estimate": [], "alone": []}
    alone = [a.usdt_trace, "watch", "--hist", "-p", pid, SERVER, "fn:processCommand"]
    for rep in range(a.reps):
        # processCommand with no probe inside it: what the inner probes add is the oracle of
        # our estimate of them.
        t = attach(alone, "Attached")
        rps(port, a.requests)
        got["alone"].append(our_mean_us(detach(t), "fn:processCommand"))
        t = attach(ours, "Attached")
        rps(port, a.requests)
        text = detach(t)
        got["ours"].append(our_mean_us(text, "fn:processCommand"))
        est = re.search(r"@fn:processCommand .*?≈ ([0-9.]+)(ns|us|ms) of each span is tracing", text)
        if est:
            got["estimate"].append(float(est.group(1)) * {"ns": 1e-3, "us": 1, "ms": 1e3}[est.group(2)])
        t = attach(["bpftrace", "-e", prog], "Attaching")
        rps(port, a.requests)
        text = detach(t)
        m = re.search(r"@m0: (\d+)", text)
        if not m:
            sys.exit(f"no bpftrace mean in {text!r}")
        got["bpftrace"].append(int(m.group(1)) / 1000)
        print(f"[nested {rep + 1}/{a.reps}] processCommand mean: ours {got['ours'][-1]:.2f} us, "
              f"bpftrace {got['bpftrace'][-1]:.2f} us", file=sys.stderr)
    o, b = statistics.median(got["ours"]), statistics.median(got["bpftrace"])
    print(f"\n## redis-server, fn:call and fn:processCommand together (medians of {a.reps})\n")
    print("| | processCommand mean | ours / bpftrace |")
    print("|---|---|---|")
    print(f"| usdt-trace --hist (auto) | {o:.2f} us | {o / b:.2f}x |")
    print(f"| bpftrace uprobe+uretprobe hist() avg() | {b:.2f} us | |")
    if got["estimate"]:
        al = statistics.median(got["alone"])
        print(f"\nprocessCommand traced alone (no probe inside it): {al:.2f} us; with call's "
              f"probes inside, {o - al:.2f} us more; our estimate of the tracing inside each "
              f"span: {statistics.median(got['estimate']):.2f} us (medians of the runs).")


def whole(a, port, pid):
    """fn:* on the whole server: attach time, throughput while traced, health after."""
    t0 = time.monotonic()
    t = attach([a.usdt_trace, "watch", "--hist", "-p", pid, SERVER, "fn:*"], "Attached",
               timeout=300)
    attach_s = time.monotonic() - t0
    traced = rps(port, a.requests // 5)
    detach(t)
    after = rps(port, a.requests)
    ok = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True,
                        text=True).stdout.strip() == "PONG"
    print(f"\n## redis-server, fn:* (every function)\n")
    print(f"attach {attach_s:.1f} s; {traced:,.0f} requests/s traced; after detach "
          f"{after:,.0f} requests/s, PING {'PONG' if ok else 'FAILED'}")


if __name__ == "__main__":
    main()
