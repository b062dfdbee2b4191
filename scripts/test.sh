#!/usr/bin/env bash
# Set up everything (idempotent, quiet when done) and run the whole test suite.
# The end-to-end tests attach eBPF programs to real processes: those are #[ignore = "needs root"]
# so that a plain `cargo test` lists them as ignored instead of passing them untested; as root
# (CI runs this as root) they are included.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/setup.sh all)"

# The habits the tests do not check: formatting, lints, and docs that build without warnings.
# Each runs before the (long) tests and stops the run at once, saying which check failed and
# the command that reproduces it.
check() {
    local what=$1
    shift
    echo "test.sh: $what: $*" >&2
    if ! "$@"; then
        echo "test.sh: FAILED: $what ($*); fix it before the tests run" >&2
        exit 1
    fi
}
check "formatting" cargo fmt --all --check
check "clippy" cargo clippy --workspace --all-targets --quiet -- -D warnings -D clippy::undocumented_unsafe_blocks
check "rustdoc" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

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
rc=0
cargo test --workspace --no-fail-fast "${args[@]}" || rc=$?

# Then the arm64 suite, in an emulated arm64 machine (docs/arm64.md), on three kernels (7.3, 6.12,
# 6.1): 30-60 s each when built,
# about 11 minutes from a clean clone on the 2-core CI machine. As root only (it installs the
# cross toolchains and QEMU when missing), and only for the whole suite: a run narrowed to
# some tests is not asking for it.
if [ "$(id -u)" -eq 0 ] && [ $# -eq 0 ]; then
    echo "test.sh: the arm64 suite: scripts/test-arm64.sh" >&2
    scripts/test-arm64.sh || rc=$?
fi
exit "$rc"
