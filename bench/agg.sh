#!/usr/bin/env bash
# What in-kernel aggregation and filtering cost, and what they save. Root. Prints figures and
# ratios; nothing is asserted.
#
# 1. Per span (tests/testprogs/bench_loop.c: a tight loop of start/end pairs): the target's
#    CPU time per pair above the untraced loop, for plain --hist and for --hist with --by
#    (one key: comm; 1024 keys then "other": arg0, the loop index), --min and --filter, and for
#    --count. Ratio: each one's added cost over plain --hist's (the issue's bar: within 1.10).
# 2. A busy server (the Rust demo server under wrk): the CPU time of `usdt-trace watch --json`
#    itself, per request, without --min and with --min thresholds that filter part or all of
#    the spans, next to the share of spans each filtered (from the summary).
#
#   bench/agg.sh [PAIRS (2000000)] [REPS (3)] [WRK_SECONDS (5)]
# USDT_TRACE=path uses that binary instead of building the release one (figures from a debug
# build overstate user-space costs).
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS="${1:-2000000}"
REPS="${2:-3}"
DUR="${3:-5}"
hz=$(getconf CLK_TCK)
if [ -z "${USDT_TRACE:-}" ]; then
    cargo build -q --release -p usdt-trace -p demo-httpserver
    USDT_TRACE=target/release/usdt-trace
fi
server="${SERVER:-target/release/demo-httpserver}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -o "$work/bench_loop" tests/testprogs/bench_loop.c

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# CPU ns per pair of one loop run, traced with FLAGS (or untraced when FLAGS is "untraced").
loop_ns() {
    local flags=$1
    if [ "$flags" = untraced ]; then
        "$work/bench_loop" "$PAIRS" "$work/res"
    else
        # shellcheck disable=SC2086
        "$USDT_TRACE" watch $flags -o /dev/null -c "$work/bench_loop $PAIRS $work/res" "$work/bench_loop" 2>/dev/null
    fi
    sed -n 's/.*ns_per_iter_cpu=\([0-9.]*\).*/\1/p' "$work/res"
}

echo "== per span: target CPU ns per start/end pair above untraced ($PAIRS pairs, median of $REPS)"
modes=("untraced" "--hist" "--hist --by comm" "--hist --by arg0" "--hist --by comm,arg0" "--hist --min 1ms" "--hist --filter comm==bench_loop" "--hist --by comm --filter comm==bench_loop" "--count" "--count --by arg0")
declare -A runs
for _ in $(seq "$REPS"); do
    for m in "${modes[@]}"; do
        runs[$m]+="$(loop_ns "$m") "
    done
done
base=$(echo "${runs[untraced]}" | median)
hist=$(echo "${runs[--hist]}" | median)
hist_added=$(awk -v h="$hist" -v b="$base" 'BEGIN { print h - b }')
printf '%-44s %12s %12s %10s\n' MODE "ns/pair" "added" "vs --hist"
for m in "${modes[@]}"; do
    v=$(echo "${runs[$m]}" | median)
    awk -v m="$m" -v v="$v" -v b="$base" -v h="$hist_added" 'BEGIN {
        a = v - b
        r = (m == "untraced") ? "" : sprintf("%.2f", a / h)
        printf "%-44s %12.1f %12.1f %10s\n", m, v, a, r
    }'
done

echo
echo "== busy server: usdt-trace's own CPU per request with --json (wrk ${DUR}s, 20 connections)"
command -v wrk >/dev/null || { echo "wrk not installed: skipped"; exit 0; }
port=18690
server_run() {
    local flags=$1 pid wpid t0 out reqs ticks filtered spans
    port=$((port + 1))
    "$server" --port "$port" --root demo-httpserver/www 2>/dev/null &
    pid=$!
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.05; done
    # Removed first: the previous run's "Attached" must not be read before this one truncates
    # the file (then the verifier's second of CPU would count as tracing).
    rm -f "$work/err"
    # shellcheck disable=SC2086
    "$USDT_TRACE" watch --json $flags -p "$pid" >"$work/out" 2>"$work/err" &
    wpid=$!
    until grep -q '^Attached' "$work/err" 2>/dev/null; do sleep 0.05; done
    t0=$(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$wpid/stat")
    out=$(wrk -t2 -c20 -d"${DUR}s" "http://127.0.0.1:$port/index.html")
    ticks=$(awk -v t0="$t0" '{ sub(/.*\) /, ""); print $12 + $13 - t0 }' "/proc/$wpid/stat")
    kill -INT "$wpid"; wait "$wpid" 2>/dev/null || true
    kill "$pid"; wait "$pid" 2>/dev/null || true
    reqs=$(echo "$out" | awk '/requests in/ {print $1}')
    spans=$(grep -h '"type":"summary"' "$work/out" | sed -n 's/.*"spans":\([0-9]*\).*/\1/p')
    filtered=$(grep -h '"type":"summary"' "$work/out" | sed -n 's/.*"filtered":\([0-9]*\).*/\1/p')
    awk -v t="$ticks" -v hz="$hz" -v n="$reqs" -v s="${spans:-0}" -v f="${filtered:-0}" \
        'BEGIN { printf "%.2f %.0f\n", t / hz * 1e6 / n, (s > 0 ? 100 * f / s : 0) }'
}
# "plain" is no --min (bash arrays take no empty key).
smodes=("plain" "--min 50us" "--min 200us" "--min 1s")
declare -A scpu sfilt
for _ in $(seq "$REPS"); do
    for m in "${smodes[@]}"; do
        flags=$m
        [ "$m" = plain ] && flags=
        read -r c f < <(server_run "$flags")
        scpu[$m]+="$c "; sfilt[$m]+="$f "
    done
done
plain=$(echo "${scpu[plain]}" | median)
printf '%-20s %16s %12s %14s\n' "--json plus" "tracer us/req" "filtered %" "vs no --min"
for m in "${smodes[@]}"; do
    c=$(echo "${scpu[$m]}" | median)
    f=$(echo "${sfilt[$m]}" | median)
    awk -v m="$m" -v c="$c" -v f="$f" -v p="$plain" \
        'BEGIN { printf "%-20s %16.2f %12s %14.2f\n", m, c, f, (p > 0 ? c / p : 0) }'
done
