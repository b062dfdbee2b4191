#!/usr/bin/env bash
# Runs the five horsemen (tests/tests/why_diff.rs) N times beside an unrelated CPU hog pinned
# to the last CPU, and tallies each test's passes, failures and skips (a disk test skips,
# saying why, when the host served the reads without the reader waiting). As root.
#
#   tests/scripts/repeat_why.sh [N]        (default 20)
#
# Prints one line per test: passed/failed/skipped of N, then the failures' messages.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-20}
[ "$(id -u)" -eq 0 ] || { echo "repeat_why.sh: needs root (the tests attach uprobes)" >&2; exit 2; }
bin=$(cargo test -p usdt-trace-tests --test why_diff --no-run --message-format=json 2>/dev/null |
    python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="why_diff":
        print(m["executable"])')
[ -x "$bin" ] || { echo "repeat_why.sh: could not build the why_diff test binary" >&2; exit 1; }
cargo build -q -p usdt-trace
last=$(( $(nproc) - 1 ))
taskset -c "$last" sh -c 'while :; do :; done' &
hog=$!
trap 'kill $hog 2>/dev/null' EXIT
out=$(mktemp -d)
for i in $(seq 1 "$n"); do
    "$bin" --include-ignored --nocapture >"$out/run$i.log" 2>&1 || true
    printf '.' >&2
done
echo >&2
python3 - "$out" "$n" <<'EOF'
import re, sys, os, collections
out, n = sys.argv[1], int(sys.argv[2])
tally = collections.defaultdict(lambda: collections.Counter())
fails = []
for i in range(1, n + 1):
    text = open(os.path.join(out, f"run{i}.log"), errors="replace").read()
    for name, res in re.findall(r"^test (\S+) \.\.\. (ok|FAILED)", text, re.M):
        tally[name]["passed" if res == "ok" else "failed"] += 1
    # A skip says "skipped in TEST: why" (and the test passes).
    for name in re.findall(r"skipped in (\w+):", text):
        tally[name]["skipped"] += 1
    for m in re.finditer(r"panicked at (tests/tests/why_diff.rs:\d+:\d+):\n(.*)", text):
        fails.append(f"run {i}: {m.group(1)}: {m.group(2)[:300]}")
for name in sorted(tally):
    c = tally[name]
    print(f"{name}: {c['passed']} passed ({c['skipped']} of them skipped), {c['failed']} failed, of {n}")
for f in fails:
    print(f)
EOF
