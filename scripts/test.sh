#!/usr/bin/env bash
# Set up everything (idempotent, quiet when done) and run the whole test suite.
# The end-to-end tests attach eBPF programs to real processes: those are #[ignore = "needs root"]
# so that a plain `cargo test` lists them as ignored instead of passing them untested; as root
# (CI runs this as root) they are included.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/setup.sh)"
# The e2e tests run the usdt-trace binary built next to them.
cargo build --workspace --quiet
args=("$@")
if [ "$(id -u)" -eq 0 ]; then
    # Test-binary flags go after a single `--`, which the caller may already have given.
    has_sep=0
    for a in "${args[@]}"; do [ "$a" = "--" ] && has_sep=1; done
    [ "$has_sep" -eq 1 ] || args+=(--)
    args+=(--include-ignored)
else
    echo "not root: the end-to-end tests that attach probes are listed as ignored" >&2
fi
# Every test binary runs even after one fails, so a CI log shows every failure at once.
cargo test --workspace --no-fail-fast "${args[@]}"
