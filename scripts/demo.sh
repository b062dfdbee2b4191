#!/usr/bin/env bash
# Set up everything, start an annotated web server, attach `usdt-trace watch` to it, send some
# requests, and print the spans. Usage: scripts/demo.sh [rust|c] [--json]
set -euo pipefail
cd "$(dirname "$0")/.."
which_server=${1:-rust}
fmt=${2:-}
# Only what the build and the demo need: the test tools (Go, clang, Prometheus, the OTLP
# collector, Perfetto's trace processor, cargo-deb...) are scripts/test.sh's.
eval "$(scripts/setup.sh build)"
cargo build --release --quiet -p usdt-trace -p demo-httpserver
# Where cargo put them: its CARGO_TARGET_DIR when set, as for the build above.
bin=${CARGO_TARGET_DIR:-target}/release
case "$which_server" in
    rust) server=$bin/demo-httpserver ;;
    c) server=$bin/demo-httpserver-c ;;
    *) echo "usage: $0 [rust|c] [--json]" >&2; exit 2 ;;
esac
port=${DEMO_PORT:-8081}
tmp=$(mktemp -d)
cleanup() {
    [ -n "${watch_pid:-}" ] && kill -INT "$watch_pid" 2>/dev/null || true
    [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

"$server" --port "$port" --root demo-httpserver/www >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.05
done

echo "\$ usdt-trace watch ${fmt:+$fmt }$server" >&2
"$bin/usdt-trace" watch $fmt "$server" >"$tmp/watch.out" 2>"$tmp/watch.err" &
watch_pid=$!
until grep -q '^Attached' "$tmp/watch.err" 2>/dev/null; do
    if ! kill -0 "$watch_pid" 2>/dev/null; then cat "$tmp/watch.err" >&2; exit 1; fi
    sleep 0.05
done
cat "$tmp/watch.err" >&2

for path in / /hello.txt /style.css /data.json /missing.html; do
    curl -s -o /dev/null -w "GET $path -> %{http_code}\n" "http://127.0.0.1:$port$path" >&2
done
curl -s -o /dev/null -X POST -w "POST / -> %{http_code}\n" "http://127.0.0.1:$port/" >&2
sleep 0.3
kill -INT "$watch_pid"
wait "$watch_pid" || true
watch_pid=
cat "$tmp/watch.out"
