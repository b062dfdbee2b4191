#!/usr/bin/env bash
# The attribution table of docs/time-a-span.md: each scenario of tests/testprogs/attrib_scen.c run under
# `usdt-trace watch --json -c`, with every span's wall time split into on-CPU, run-queue, sleep
# and I/O. Usage: bench/attrib_table.sh [path/to/usdt-trace]   (root)
set -euo pipefail
cd "$(dirname "$0")/.."
tracer=${1:-target/release/usdt-trace}
[ -x "$tracer" ] || cargo build --release --quiet -p usdt-trace
work=$(mktemp -d /var/tmp/attrib.XXXXXX)
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -pthread -o "$work/attrib_scen" tests/testprogs/attrib_scen.c
echo "| scenario | span | duration | on-CPU | run-queue | sleep | I/O | waker |"
echo "|---|---|---:|---:|---:|---:|---:|---|"
for mode in cpu contend sleep lock "disk $work" work nested; do
    "$tracer" watch --json -c "$work/attrib_scen $mode" 2>/dev/null \
        | python3 -c '
import json, sys
mode = sys.argv[1].split()[0]
ms = lambda v: "%.1f ms" % (v / 1e6)
for line in sys.stdin:
    r = json.loads(line)
    if r.get("type") != "span":
        continue
    w = r.get("waker")
    waker = "%s (%s)" % (w["comm"], w["tid"]) if w else ""
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (mode, r["name"], ms(r["duration_ns"]),
          ms(r["oncpu_ns"]), ms(r["runq_ns"]), ms(r["sleep_ns"]), ms(r["io_ns"]), waker))
' "$mode"
done
