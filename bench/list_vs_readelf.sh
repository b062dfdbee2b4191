#!/usr/bin/env bash
# CPU time of `usdt-trace list` (text and --json) against `readelf -n` on the same objects:
# libjvm.so (the system object with the most USDT probes, when installed) and a generated
# binary with 50,000 sites (tests/testprogs/scale_sites.c, built once, ~25 s of gcc), or on
# the files given as arguments.
#
#   bench/list_vs_readelf.sh [OBJECT...]
#   ROUNDS=15 RUNS=40 bench/list_vs_readelf.sh      # more rounds on a noisy machine
#
# CPU time (user + system, `perf stat`'s task-clock, else getrusage) per run: each round runs
# every command RUNS times (a tenth of that on objects of more than 10,000 sites), the
# commands interleaved so that the machine's load hits them alike; the figures are the median
# and the range of the ROUNDS round means, and the ratio is taken within each round. Builds
# target/release/usdt-trace if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${USDT_TRACE_BIN:-${CARGO_TARGET_DIR:-target}/release/usdt-trace}"
if [ ! -x "$BIN" ]; then
    echo "building $BIN" >&2
    cargo build --release -q -p usdt-trace
fi
ROUNDS="${ROUNDS:-9}"
RUNS="${RUNS:-40}"

if [ $# -gt 0 ]; then
    objects=("$@")
else
    objects=()
    for f in /usr/lib/jvm/*/lib/server/libjvm.so; do
        [ -f "$f" ] && { objects+=("$f"); break; }
    done
    # Built outside the tree and kept between runs: it is never committed.
    scale="${SCALE_BIN:-${TMPDIR:-/var/tmp}/usdt-trace-bench/scale_sites}"
    if [ ! -x "$scale" ] || [ tests/testprogs/scale_sites.c -nt "$scale" ]; then
        echo "building $scale (50,000 sites, ~25 s)" >&2
        mkdir -p "$(dirname "$scale")"
        gcc -O1 -g tests/testprogs/scale_sites.c -o "$scale.tmp"
        mv "$scale.tmp" "$scale"
    fi
    objects+=("$scale")
fi

exec python3 - "$BIN" "$ROUNDS" "$RUNS" "${objects[@]}" <<'EOF'
import os, resource, shutil, statistics, subprocess, sys

usdt, rounds, runs, objects = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
perf = shutil.which("perf")


def cpu_ms(argv, n):
    """Mean CPU time of n runs of argv, output discarded, in ms."""
    if perf:
        p = subprocess.run([perf, "stat", "-x,", "-e", "task-clock", "-r", str(n), *argv],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in p.stderr.splitlines():
            f = line.split(",")
            if len(f) > 2 and f[2].startswith("task-clock"):
                return float(f[0])
        # perf without access to the counter: fall through to getrusage.
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)) * 1e3 / n


def rng(xs, fmt):
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


print(f"{rounds} rounds, CPU ms per run: median of the round means (range); "
      f"{'perf stat task-clock' if perf else 'getrusage'}")
# Start-up alone, which is most of the cost on a small object.
ver = {"usdt-trace --version": [usdt, "--version"], "readelf --version": ["readelf", "--version"]}
vms = {k: [] for k in ver}
for _ in range(rounds):
    for k, argv in ver.items():
        vms[k].append(cpu_ms(argv, runs))
print("\nstart-up: " + ", ".join(f"{k} {rng(v, '{:.3f}')} ms" for k, v in vms.items()))
for obj in objects:
    out = subprocess.run([usdt, "list", "--json", obj], capture_output=True, text=True).stdout
    sites = out.count("\n")
    n = max(3, runs // 10) if sites > 10000 else runs
    cmds = {"list": [usdt, "list", obj], "list --json": [usdt, "list", "--json", obj],
            "readelf -n": ["readelf", "-n", obj]}
    for argv in cmds.values():  # warm the page cache
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ms = {k: [] for k in cmds}
    for _ in range(rounds):
        for k, argv in cmds.items():
            ms[k].append(cpu_ms(argv, n))
    print(f"\n{obj}: {sites} sites, {os.path.getsize(obj)} bytes, {n} runs a round")
    for k in cmds:
        line = f"  {k:<12} {rng(ms[k], '{:.3f}')} ms"
        if k != "readelf -n":
            ratios = [a / b for a, b in zip(ms[k], ms["readelf -n"])]
            line += f"   ratio to readelf {rng(ratios, '{:.2f}')}"
        print(line)
EOF
