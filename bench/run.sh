#!/usr/bin/env bash
# usdt-trace overhead benchmark: prints figures and a markdown table (not a test).
#
#   bench/run.sh            ~3 minutes: 3 runs per configuration, medians
#   bench/run.sh --quick    ~1 minute: 1 run per configuration, smaller loops
#
# Needs root (BPF), gcc and <sys/sdt.h>; bpftrace is optional (its rows are skipped without it).
# See bench/README.md for what is measured and how.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $EUID -ne 0 ]]; then
    echo "bench/run.sh needs root (it loads BPF programs)" >&2
    exit 1
fi
echo "building usdt-trace (release)..." >&2
cargo build --release -q -p usdt-trace >&2
python3 bench/bench.py --usdt-trace target/release/usdt-trace "$@"
# The goal table of docs/performance.md: usdt-markers spans, ratios against bpftrace and the null-program floor.
goals_args=()
[[ " $* " == *" --quick "* ]] && goals_args=(--reps 1 --pairs 100000 --untraced-iters 20000000)
python3 bench/goals.py --usdt-trace target/release/usdt-trace "${goals_args[@]}"
