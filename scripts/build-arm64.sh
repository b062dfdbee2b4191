#!/usr/bin/env bash
# Cross-builds, on this x86_64 machine, everything the arm64 suite runs (scripts/test-arm64.sh):
# usdt-trace for aarch64-unknown-linux-gnu (its eBPF object then built for bpf_target_arch
# "aarch64", see usdt-trace/build.rs), the demo servers, the suite's runner (tests/arm64), the
# Rust markers target and the C targets, all linked statically so that the emulated machine
# needs no libraries; and the oracle the list tests compare with: `readelf -n` of each target.
# Idempotent; quiet when everything is built. Prints nothing on success, the stage directory
# is ${CARGO_TARGET_DIR:-target}/arm64-stage:
#   bin/usdt-trace bin/arm64-suite   progs/*   oracle/*.notes (readelf -n)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=aarch64-unknown-linux-gnu
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export CARGO_TARGET_DIR
STAGE=$CARGO_TARGET_DIR/arm64-stage

log() { echo "build-arm64: $*" >&2; }

# --- The cross toolchains: Debian's aarch64 gcc, binutils and libc (static), Rust's target.
need_pkgs=()
for p in gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu libc6-dev-arm64-cross systemtap-sdt-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
    log "installing Debian packages: ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null 2>&1 || {
        apt-get update -qq >/dev/null
        apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
    }
fi
if ! rustup target list --installed | grep -qx "$TARGET"; then
    log "adding the Rust target $TARGET"
    rustup target add "$TARGET" >/dev/null 2>&1
fi
# bpf-linker and nightly rust-src, as for the host build.
eval "$(scripts/setup.sh)"

mkdir -p "$STAGE"/{bin,progs,oracle,include/sys}

# --- Rust: the tracer and the demo servers (the workspace), the runner and the markers target
# (workspaces of their own). Static glibc (crt-static): the guest has no libraries. The linker
# is aarch64-linux-gnu-gcc (.cargo/config.toml). RUSTFLAGS only reach the target's crates when
# --target is given, so the host's build scripts (and the host build) are not rebuilt.
export RUSTFLAGS="-C target-feature=+crt-static"
cargo build --quiet --release --target "$TARGET" -p usdt-trace -p demo-httpserver
cargo build --quiet --release --target "$TARGET" --manifest-path tests/arm64/Cargo.toml
cargo build --quiet --release --target "$TARGET" --manifest-path tests/testprogs/markers_rust/Cargo.toml
unset RUSTFLAGS
OUT=$CARGO_TARGET_DIR/$TARGET/release

# Copies $1 to $2 stripped, when $1 is newer (the release profile keeps debug info: 60 MB).
stage_stripped() {
    if [ ! -e "$2" ] || [ "$1" -nt "$2" ]; then
        aarch64-linux-gnu-strip -o "$2.tmp" "$1"
        mv "$2.tmp" "$2"
    fi
}
stage_stripped "$OUT/usdt-trace" "$STAGE/bin/usdt-trace"
stage_stripped "$OUT/arm64-suite" "$STAGE/bin/arm64-suite"
stage_stripped "$OUT/demo-httpserver" "$STAGE/progs/demo-httpserver"
stage_stripped "$OUT/demo-httpserver-c" "$STAGE/progs/demo-httpserver-c"
# The markers target keeps its symbols: list reads the notes only, but a stripped copy would not
# be the file readelf saw on the host.
if [ ! -e "$STAGE/progs/markers_rust" ] || [ "$OUT/markers_rust" -nt "$STAGE/progs/markers_rust" ]; then
    cp "$OUT/markers_rust" "$STAGE/progs/markers_rust"
fi

# --- C targets. sys/sdt.h (systemtap-sdt-dev) is the same for every architecture, but Debian
# installs it under the host's multiarch include directory, where the cross gcc does not look.
sdt=$(dpkg -L systemtap-sdt-dev | grep '/sys/sdt\.h$' | head -n1)
for h in sdt.h sdt-config.h; do
    cmp -s "$(dirname "$sdt")/$h" "$STAGE/include/sys/$h" 2>/dev/null \
        || cp "$(dirname "$sdt")/$h" "$STAGE/include/sys/$h"
done
# Not stripped: fn: probes need the functions' symbols, and the notes stay as readelf saw them.
for src in tests/arm64/progs/arm64_args.c tests/arm64/progs/arm64_nest.c \
    tests/testprogs/sdt_args.c tests/testprogs/watch_fn.c; do
    name=$(basename "$src" .c)
    bin=$STAGE/progs/$name
    if [ ! -e "$bin" ] || [ "$src" -nt "$bin" ] || [ "$STAGE/include/sys/sdt.h" -nt "$bin" ]; then
        aarch64-linux-gnu-gcc -O2 -Wall -static -I"$STAGE/include" -o "$bin.tmp" "$src"
        mv "$bin.tmp" "$bin"
    fi
done

# --stack's 12-deep chain, without frame pointers (only CFI unwinds it) and with them.
for v in nofp:-fomit-frame-pointer fp:-fno-omit-frame-pointer; do
    bin=$STAGE/progs/stack_deep_${v%%:*}
    src=tests/testprogs/stack_deep.c
    if [ ! -e "$bin" ] || [ "$src" -nt "$bin" ] || [ "$STAGE/include/sys/sdt.h" -nt "$bin" ]; then
        aarch64-linux-gnu-gcc -O2 "${v#*:}" -Wall -static -I"$STAGE/include" -o "$bin.tmp" "$src"
        mv "$bin.tmp" "$bin"
    fi
done

# The wait kinds' target (tests/arm64/src/waits.rs): threads, pipes, sockets.
src=tests/arm64/progs/arm64_waits.c
bin=$STAGE/progs/arm64_waits
if [ ! -e "$bin" ] || [ "$src" -nt "$bin" ] || [ "$STAGE/include/sys/sdt.h" -nt "$bin" ]; then
    aarch64-linux-gnu-gcc -O2 -Wall -pthread -static -I"$STAGE/include" -o "$bin.tmp" "$src"
    mv "$bin.tmp" "$bin"
fi

# --- The list tests' oracle: the notes as binutils reads them, on the host.
for name in arm64_args sdt_args markers_rust; do
    bin=$STAGE/progs/$name
    notes=$STAGE/oracle/$name.notes
    if [ ! -e "$notes" ] || [ "$bin" -nt "$notes" ]; then
        aarch64-linux-gnu-readelf -n --wide "$bin" >"$notes.tmp"
        mv "$notes.tmp" "$notes"
    fi
done

# --- Dynamically linked targets, for fn: on a shared library's functions and probes defined at
# run time: glibc as the cross toolchain has it (libc6-arm64-cross, the libc they were linked
# against) staged in sysroot/ at the guest's paths, /lib/ld-linux-aarch64.so.1 (their
# PT_INTERP) and /lib/aarch64-linux-gnu (a directory the loader searches by default).
mkdir -p "$STAGE"/sysroot/lib/aarch64-linux-gnu
CROSS_LIB=/usr/aarch64-linux-gnu/lib
for f in ld-linux-aarch64.so.1 aarch64-linux-gnu/libc.so.6 aarch64-linux-gnu/libm.so.6 \
    aarch64-linux-gnu/libgcc_s.so.1; do
    dst=$STAGE/sysroot/lib/$f
    src=$CROSS_LIB/$(basename "$f")
    [ -e "$dst" ] && [ ! "$src" -nt "$dst" ] && continue
    # Not stripped: fn: finds libc's functions in its symbol tables as they are.
    cp -L "$src" "$dst.tmp"
    mv "$dst.tmp" "$dst"
done
src=tests/arm64/progs/libc_calls.c
bin=$STAGE/progs/libc_calls
if [ ! -e "$bin" ] || [ "$src" -nt "$bin" ]; then
    aarch64-linux-gnu-gcc -O2 -Wall -fno-builtin -o "$bin.tmp" "$src"
    mv "$bin.tmp" "$bin"
fi
# usdt-markers-dyn's cdylib, dynamic (no crt-static), for usdt_dyn.py in the guest's python3.11:
# a target directory of its own, so that the static builds above are not rebuilt each time.
cargo build --quiet --release --target "$TARGET" -p usdt-markers-dyn \
    --target-dir "$CARGO_TARGET_DIR/arm64-dynamic"
stage_stripped "$CARGO_TARGET_DIR/arm64-dynamic/$TARGET/release/libusdt_markers_dyn.so" \
    "$STAGE/progs/libusdt_markers_dyn.so"
for f in usdt-markers-dyn/python/usdt_dyn.py tests/arm64/progs/dyn_probes.py; do
    cmp -s "$f" "$STAGE/progs/$(basename "$f")" || cp "$f" "$STAGE/progs/"
done
