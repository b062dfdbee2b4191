#!/usr/bin/env bash
# Times `usdt-trace list --json` against `readelf -n` on the object with the most USDT probes
# found on this machine (or on the files given as arguments) and prints the ratio.
#
#   bench/list_vs_readelf.sh [OBJECT...]
#
# Uses hyperfine when installed, else a timed loop. Builds target/release/usdt-trace if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${USDT_TRACE_BIN:-${CARGO_TARGET_DIR:-target}/release/usdt-trace}"
if [ ! -x "$BIN" ]; then
    echo "building $BIN" >&2
    cargo build --release -q -p usdt-trace
fi

count_probes() { readelf -n "$1" 2>/dev/null | grep -c 'Provider:' || true; }

if [ $# -gt 0 ]; then
    candidates=("$@")
else
    candidates=()
    for f in /usr/lib/jvm/*/lib/server/libjvm.so /usr/lib/postgresql/*/bin/postgres \
             /usr/lib/x86_64-linux-gnu/libpython3*.so.1.0 /lib/x86_64-linux-gnu/libc.so.6 \
             /lib/x86_64-linux-gnu/libstdc++.so.6 /usr/bin/node /usr/bin/python3; do
        [ -f "$f" ] && candidates+=("$f")
    done
fi
best="" best_n=0
for f in "${candidates[@]}"; do
    n=$(count_probes "$f")
    if [ "$n" -gt "$best_n" ]; then best="$f" best_n="$n"; fi
done
if [ -z "$best" ]; then
    echo "no object with USDT probes found; pass one as an argument" >&2
    exit 1
fi
echo "object: $best ($best_n probe notes, $(stat -c %s "$best") bytes)"

# Sanity: both tools see the same number of sites (readelf also counts exact duplicates).
sites=$("$BIN" list --json "$best" | wc -l)
echo "usdt-trace list sites: $sites"

# A small object without probes measures each tool's start-up, which dominates at this size.
empty=/bin/true
if command -v hyperfine >/dev/null; then
    hyperfine -N --warmup 5 --export-json /tmp/list_vs_readelf.json \
        "$BIN list --json $best" "readelf -n $best" \
        "$BIN list --json $empty" "readelf -n $empty" >&2
    ours=$(jq '.results[0].mean' /tmp/list_vs_readelf.json)
    theirs=$(jq '.results[1].mean' /tmp/list_vs_readelf.json)
    ours0=$(jq '.results[2].mean' /tmp/list_vs_readelf.json)
    theirs0=$(jq '.results[3].mean' /tmp/list_vs_readelf.json)
else
    runs="${RUNS:-100}"
    time_loop() {
        local start end
        start=$(date +%s%N)
        for ((i = 0; i < runs; i++)); do "$@" >/dev/null; done
        end=$(date +%s%N)
        echo "scale=9; ($end - $start) / $runs / 1000000000" | bc
    }
    "$BIN" list --json "$best" >/dev/null; readelf -n "$best" >/dev/null   # warm the page cache
    ours=$(time_loop "$BIN" list --json "$best")
    theirs=$(time_loop readelf -n "$best")
    ours0=$(time_loop "$BIN" list --json "$empty")
    theirs0=$(time_loop readelf -n "$empty")
fi
awk -v o="$ours" -v t="$theirs" -v o0="$ours0" -v t0="$theirs0" 'BEGIN {
    printf "usdt-trace list --json: %8.3f ms  (start-up on %s: %.3f ms)\n", o * 1000, "'"$empty"'", o0 * 1000
    printf "readelf -n:             %8.3f ms  (start-up: %.3f ms)\n", t * 1000, t0 * 1000
    printf "ratio (list / readelf): %.2f\n", o / t
    if (t - t0 > 0) printf "ratio without start-up: %.2f\n", (o - o0) / (t - t0)
}'
