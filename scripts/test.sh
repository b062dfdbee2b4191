#!/usr/bin/env bash
# Set up everything (idempotent, quiet when done) and run the whole test suite.
# The end-to-end tests attach eBPF programs to real processes, so run as root (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/setup.sh)"
# The e2e tests run the usdt-trace binary built next to them.
cargo build --workspace --quiet
cargo test --workspace "$@"
