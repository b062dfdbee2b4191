#!/usr/bin/env bash
# Cost of tracing a busy server: the Rust demo server under wrk, untraced and with
# `usdt-trace watch` attached in each mode, including the Perfetto and OTLP exports beside
# --json (the OTLP receiver is a minimal loopback HTTP server that accepts and discards, so its
# own CPU competes with the server's here; a real collector runs elsewhere). Prints requests/s, the server's CPU time per request
# (steadier than req/s on a shared VM) and the ratio to untraced. Root.
#   bench/server_traced.sh [DURATION_SECONDS (5)] [CONNECTIONS (20)] [ROUNDS (3)]
set -euo pipefail
cd "$(dirname "$0")/.."
DUR="${1:-5}"
CONN="${2:-20}"
ROUNDS="${3:-3}"
command -v wrk >/dev/null || { echo "wrk not installed (scripts/setup.sh installs it)" >&2; exit 1; }
cargo build -q --release -p usdt-trace -p demo-httpserver
server=target/release/demo-httpserver
tracer=target/release/usdt-trace
work=$(mktemp -d)
port=18590
hz=$(getconf CLK_TCK)
otlp_port=18580
# A stand-in collector: accepts OTLP/HTTP posts and discards them.
python3 - "$otlp_port" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
collector=$!
trap 'kill $collector 2>/dev/null || true; pkill -f "$server --port" 2>/dev/null || true; rm -rf "$work"' EXIT

# One measurement: MODE is "untraced" or the watch flags. Prints "REQ/S CPU_US_PER_REQ".
measure() {
    local mode=$1 pid wpid=
    port=$((port + 1))
    "$server" --port "$port" --root demo-httpserver/www 2>/dev/null &
    pid=$!
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.05; done
    if [ "$mode" = bpftrace ]; then
        # The same in-kernel pairing by span id and a histogram, for both span names.
        local b="usdt:$server:httpserver"
        bpftrace -e "$b:request__start { @r[arg0] = nsecs; } $b:request__end /@r[arg0]/ { @req = hist(nsecs - @r[arg0]); delete(@r[arg0]); } $b:send_message__start { @m[arg0] = nsecs; } $b:send_message__end /@m[arg0]/ { @send = hist(nsecs - @m[arg0]); delete(@m[arg0]); }" >"$work/out" 2>"$work/err" &
        wpid=$!
        until grep -q '^Attaching' "$work/out" 2>/dev/null; do sleep 0.05; done
        sleep 1 # bpftrace prints "Attaching" before it has attached
    elif [ "$mode" != untraced ]; then
        # Removed first: the redirection below truncates the file in the background job, so
        # the wait could otherwise read the previous run's "Attached" and start wrk before this
        # tracer is attached (requests missed, and the verifier's CPU counted as tracing).
        rm -f "$work/err"
        # shellcheck disable=SC2086
        "$tracer" watch $mode "$server" >"$work/out" 2>"$work/err" &
        wpid=$!
        until grep -q '^Attached' "$work/err" 2>/dev/null; do sleep 0.05; done
    fi
    local t0 out reqs ticks
    t0=$(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat")
    out=$(wrk -t2 -c"$CONN" -d"${DUR}s" "http://127.0.0.1:$port/index.html")
    ticks=$(awk -v t0="$t0" '{ sub(/.*\) /, ""); print $12 + $13 - t0 }' "/proc/$pid/stat")
    if [ -n "$wpid" ]; then
        kill -INT "$wpid"; sleep 0.5; kill -INT "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true
        # measure runs in a subshell: name the file after the mode, not a counter.
        local tag
        tag=$(printf '%s' "$mode" | tr -c 'a-z' '_' | cut -c1-40)
        { echo "($mode)"; grep -h '"type":"summary"' "$work/out"; grep -h '^otlp:' "$work/err"; } >"$work/summary.$tag" 2>/dev/null || true
    fi
    kill "$pid"; wait "$pid" 2>/dev/null || true
    reqs=$(echo "$out" | awk '/requests in/ {print $1}')
    echo "$out" | awk -v t="$ticks" -v hz="$hz" -v n="$reqs" \
        '/Requests\/sec/ { printf "%s %.2f\n", $2, t / hz * 1e6 / n }'
}

modes=("untraced" "--hist" "--json" "--json --no-sched" "--json --perfetto $work/trace.pftrace" "--json --otlp http://127.0.0.1:$otlp_port" "bpftrace")
declare -A rps cpu
for r in $(seq "$ROUNDS"); do
    for m in "${modes[@]}"; do
        read -r q c < <(measure "$m")
        rps[$m]+="$q "; cpu[$m]+="$c "
        echo "  round $r: $m: $q req/s, $c us CPU/request" >&2
    done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base_q=$(echo "${rps[untraced]}" | median); base_c=$(echo "${cpu[untraced]}" | median)
echo
echo "| demo-httpserver under wrk (-c$CONN, ${DUR}s, median of $ROUNDS) | req/s | vs untraced | server CPU µs/request | vs untraced |"
echo "|---|---:|---:|---:|---:|"
for m in "${modes[@]}"; do
    q=$(echo "${rps[$m]}" | median); c=$(echo "${cpu[$m]}" | median)
    label=$m
    case "$m" in
    untraced) ;;
    bpftrace) label="bpftrace, hist() of both spans (paired by span id)" ;;
    *) label="usdt-trace watch $m" ;;
    esac
    awk -v l="$label" -v q="$q" -v c="$c" -v bq="$base_q" -v bc="$base_c" \
        'BEGIN { printf "| %s | %.0f | %.2fx | %.1f | %.2fx |\n", l, q, q / bq, c, c / bc }'
done
echo
echo "Summaries of the traced runs (spans seen, lost):"
cat "$work"/summary.* 2>/dev/null
