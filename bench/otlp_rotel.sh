#!/usr/bin/env bash
# --otlp against a real OpenTelemetry collector (rotel, `pip install rotel`, blackhole
# exporter) while wrk keeps the Rust demo server busy: does the exporter keep up with what
# --json holds on the same load? One watch writes both (--json -o FILE and --otlp), so the
# NDJSON's span count is the oracle; prints spans, exported/unanswered/refused/dropped, spans/s,
# and the CPU time watch used per span (all its threads, from /proc/PID/stat).
#   bench/otlp_rotel.sh [DURATION_SECONDS (10)] [CONNECTIONS (16)]
# Needs root; uses target/release/usdt-trace (cargo build --release -p usdt-trace).
set -euo pipefail
cd "$(dirname "$0")/.."
DUR="${1:-10}"
CONN="${2:-16}"
BIN="${USDT_TRACE:-target/release/usdt-trace}"
command -v wrk >/dev/null || { echo "wrk not installed (scripts/setup.sh installs it)" >&2; exit 1; }
ROTEL=$(python3 -c 'import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), "rotel-agent"))' 2>/dev/null) ||
    { echo "rotel not installed: python3 -m pip install rotel" >&2; exit 1; }
[ -x "$BIN" ] || { echo "$BIN: build it first (cargo build --release -p usdt-trace)" >&2; exit 1; }

echo "building the release demo server ..." >&2
cargo build -q --release -p demo-httpserver --bin demo-httpserver --target-dir target/otlp-bench
SERVER=target/otlp-bench/release/demo-httpserver

tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

otlp_port=14318 http_port=18590
"$ROTEL" start --otlp-http-endpoint "127.0.0.1:$otlp_port" --otlp-grpc-endpoint 127.0.0.1:14317 \
    --exporter blackhole >"$tmp/rotel.log" 2>&1 &
pids+=($!)
"$SERVER" --port "$http_port" 2>/dev/null &
pids+=($!)
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$http_port/" &&
        curl -s -o /dev/null -X POST -H 'Content-Type: application/x-protobuf' \
            "http://127.0.0.1:$otlp_port/v1/traces" && break
    sleep 0.1
done

"$BIN" watch --json -o "$tmp/run.ndjson" --otlp "http://127.0.0.1:$otlp_port" "$SERVER" \
    2>"$tmp/watch.err" &
watch=$!
pids+=("$watch")
for _ in $(seq 200); do grep -q '^Attached' "$tmp/watch.err" 2>/dev/null && break; sleep 0.05; done
wrk -t2 -c"$CONN" -d"${DUR}s" "http://127.0.0.1:$http_port/" >"$tmp/wrk.out"
hz=$(getconf CLK_TCK)
ticks=$(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$watch/stat")
kill -INT "$watch"
wait "$watch" || true

spans=$(grep -c '"type":"span"' "$tmp/run.ndjson" || true)
line=$(grep '^otlp: exported' "$tmp/watch.err")
num() { echo "$line" | grep -o "$1 [0-9]*" | awk '{print $2}' | head -1; }
exported=$(echo "$line" | awk '{print $3}')
echo "$line"
printf '%-10s %10s %10s %10s %10s %10s %10s %12s\n' seconds spans exported unanswered refused \
    dropped "spans/s" "cpu_us/span"
printf '%-10s %10s %10s %10s %10s %10s %10.0f %12.2f\n' "$DUR" "$spans" "$exported" \
    "$(num unanswered || echo 0)" "$(num refused || echo 0)" "$(num dropped)" \
    "$(echo "$spans / $DUR" | bc -l)" "$(echo "$ticks / $hz * 1000000 / ($spans + 1)" | bc -l)"
