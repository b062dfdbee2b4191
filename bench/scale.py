#!/usr/bin/env python3
"""Scale benchmark (root; about a minute, most of it gcc): `watch` and `list` on one binary
with 50,000 USDT sites (tests/testprogs/scale_sites.c, built here, never committed).

Prints, medians of --reps runs:
  - watch: time from start to its `Attached` line, from SIGINT to exit (detach: the uprobe_multi
    links close at exit), CPU time, peak RSS; the uprobe program's verified instructions;
  - list (text and --json) against `readelf -n`: CPU time (user + system) per run.
Not a test: nothing fails on a slow result.
"""
import argparse, os, re, resource, signal, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bpf_progs  # noqa: E402


def log(m):
    print(m, file=sys.stderr, flush=True)


def cpu_of(argv):
    """CPU time (s) of one run of argv, output discarded."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def watch_once(usdt, args):
    t0 = time.monotonic()
    p = subprocess.Popen([usdt, "watch", "--json", *args], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = b""
    while True:
        line = p.stderr.readline()
        if not line:
            raise RuntimeError(f"watch exited before attaching: {err.decode()}")
        err += line
        if line.startswith(b"Attached"):
            break
    attach = time.monotonic() - t0
    # The newest usdt_site program is ours (other tracers may have theirs loaded).
    ours = max((pr for pr in bpf_progs.progs() if pr[2] == "usdt_site"), default=None)
    verified = ours[3] if ours else 0
    t1 = time.monotonic()
    p.send_signal(signal.SIGINT)
    p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    detach = time.monotonic() - t1
    if status != 0:
        raise RuntimeError(f"watch exit status {status}")
    return {"attach": attach, "detach": detach, "cpu": ru.ru_utime + ru.ru_stime,
            "maxrss_mib": ru.ru_maxrss / 1024, "verified": verified,
            "line": err.decode().strip().splitlines()[-1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--usdt-trace", default=os.path.join(ROOT, "target/release/usdt-trace"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--bin", help="an already built scale_sites")
    a = ap.parse_args()
    usdt = a.usdt_trace
    work = tempfile.mkdtemp(prefix="usdt-scale.", dir="/var/tmp")
    binp = a.bin
    if not binp:
        binp = os.path.join(work, "scale_sites")
        log("building scale_sites (50,000 sites, ~25 s)...")
        subprocess.run(["gcc", "-O1", "-g", os.path.join(ROOT, "tests/testprogs/scale_sites.c"),
                        "-o", binp], check=True)
    sites = sum(1 for l in subprocess.run(["readelf", "-n", binp], capture_output=True,
                                          text=True).stdout.splitlines() if "Provider:" in l)
    log(f"{binp}: {sites} sites")
    med = statistics.median
    # --- list vs readelf
    for argv in ([usdt, "list", binp], [usdt, "list", "--json", binp], ["readelf", "-n", binp]):
        cpu_of(argv)  # warm the page cache
    lt = med(cpu_of([usdt, "list", binp]) for _ in range(a.reps))
    lj = med(cpu_of([usdt, "list", "--json", binp]) for _ in range(a.reps))
    re_ = med(cpu_of(["readelf", "-n", binp]) for _ in range(a.reps))
    # --- watch attach / detach, all sites, then --hist
    res = {}
    for mode, extra in (("json", []), ("hist", ["--hist"])):
        runs = [watch_once(usdt, extra + [binp]) for _ in range(a.reps)]
        res[mode] = {k: med(r[k] for r in runs) for k in ("attach", "detach", "cpu", "maxrss_mib", "verified")}
        res[mode]["line"] = runs[-1]["line"]
    print(f"## Scale: {sites} USDT sites in one binary ({os.uname().release}, {os.cpu_count()} CPUs), medians of {a.reps}")
    print()
    print("| | attach | detach (SIGINT to exit) | CPU | peak RSS | uprobe program verified insns |")
    print("|---|---|---|---|---|---|")
    for mode in ("json", "hist"):
        r = res[mode]
        print(f"| watch --{mode} | {r['attach']:.3f} s | {r['detach']:.3f} s | {r['cpu']:.3f} s "
              f"| {r['maxrss_mib']:.0f} MiB | {r['verified']:.0f} |")
    print()
    print("| CPU time per run | usdt-trace list | list --json | readelf -n |")
    print("|---|---|---|---|")
    print(f"| {sites} sites | {lt*1e3:.1f} ms | {lj*1e3:.1f} ms | {re_*1e3:.1f} ms |")
    print()
    print(f"watch said: {res['json']['line']}")


if __name__ == "__main__":
    main()
