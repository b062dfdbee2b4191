#!/usr/bin/env bash
# Throughput of the demo servers with untraced probes vs. probes compiled out (feature
# `no-probes`), measured with wrk on 127.0.0.1. Prints requests/s and the ratio per server.
#   bench/markers_wrk.sh [DURATION_SECONDS (10)] [CONNECTIONS (50)] [ROUNDS (4)]
# On 2 shared cores single runs vary by +-20% and whichever runs second tends to win, so each
# round alternates the order and the medians are compared.
set -euo pipefail
cd "$(dirname "$0")/.."
DUR="${1:-10}"
CONN="${2:-50}"
ROUNDS="${3:-4}"
TARGET="${MARKERS_BENCH_TARGET:-target/markers-bench}"
command -v wrk >/dev/null || { echo "wrk not installed (scripts/setup.sh installs it)" >&2; exit 1; }

echo "building release servers (probes, and no-probes) ..." >&2
cargo build -q --release -p demo-httpserver --bins --target-dir "$TARGET/probes"
cargo build -q --release -p demo-httpserver --bins --target-dir "$TARGET/noprobes" --features no-probes

port=18490
# Runs one server under wrk; prints "REQ/S CPU_US_PER_REQUEST". CPU time (the server's and its
# reaped children's, from /proc/PID/stat) per request is far steadier than req/s on a VM.
rps() { # BIN
    local bin=$1 pid out reqs ticks hz
    port=$((port + 1))
    hz=$(getconf CLK_TCK)
    "$bin" --port "$port" 2>/dev/null &
    pid=$!
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$port/" && break
        sleep 0.05
    done
    out=$(wrk -t2 -c"$CONN" -d"${DUR}s" "http://127.0.0.1:$port/index.html")
    sleep 0.3 # let the C server reap its children, so their CPU time is counted
    ticks=$(awk '{ sub(/.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$pid/stat")
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    reqs=$(echo "$out" | awk '/requests in/ {print $1}')
    echo "$out" | awk -v t="$ticks" -v hz="$hz" -v n="$reqs" \
        '/Requests\/sec/ { printf "%s %.2f\n", $2, t / hz * 1e6 / n }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-18s %12s %12s %7s %12s %12s %7s\n' server "req/s probes" "req/s none" ratio \
    "cpu_us/req p" "cpu_us/req n" ratio
for name in demo-httpserver demo-httpserver-c; do
    with_all=() without_all=()
    for round in $(seq "$ROUNDS"); do
        if [ $((round % 2)) = 1 ]; then
            with_all+=("$(rps "$TARGET/probes/release/$name")")
            without_all+=("$(rps "$TARGET/noprobes/release/$name")")
        else
            without_all+=("$(rps "$TARGET/noprobes/release/$name")")
            with_all+=("$(rps "$TARGET/probes/release/$name")")
        fi
    done
    w_rps=$(printf '%s\n' "${with_all[@]}" | cut -d' ' -f1 | median)
    n_rps=$(printf '%s\n' "${without_all[@]}" | cut -d' ' -f1 | median)
    w_cpu=$(printf '%s\n' "${with_all[@]}" | cut -d' ' -f2 | median)
    n_cpu=$(printf '%s\n' "${without_all[@]}" | cut -d' ' -f2 | median)
    printf '%-18s %12s %12s %7s %12s %12s %7s\n' "$name" "$w_rps" "$n_rps" \
        "$(awk -v a="$w_rps" -v b="$n_rps" 'BEGIN { printf "%.3f", a / b }')" "$w_cpu" "$n_cpu" \
        "$(awk -v a="$w_cpu" -v b="$n_cpu" 'BEGIN { printf "%.3f", a / b }')"
done
echo "(medians of $ROUNDS alternating rounds, ${DUR}s each, $CONN connections; no tracer attached)"
