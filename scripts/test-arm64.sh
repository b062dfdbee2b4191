#!/usr/bin/env bash
# The arm64 suite: usdt-trace cross-built (scripts/build-arm64.sh) and run in an emulated arm64
# machine made only of Debian packages: qemu-system-aarch64 (TCG: no KVM here), Debian's arm64
# kernels (trixie-backports 7.3; bookworm-backports 6.12; bookworm 6.1, without uprobe_multi,
# whose verifier is the strictest), and an initramfs
# holding busybox-static:arm64, the cross-built binaries and the oracles. The machine needs no
# network: /init mounts what tracing needs, runs tests/arm64's runner and powers off; the
# runner prints one line per test (PASS NAME FIGURES / FAIL NAME WHY), read here off the serial
# console. Exits non-zero on any FAIL, or when a boot did not reach the suite's end.
#
#   scripts/test-arm64.sh [TEST...]          every kernel, the named tests (default: all)
#   USDT_TRACE_ARM64_KERNELS="bookworm" scripts/test-arm64.sh      one kernel
#
# Downloads (kernels, busybox, python3.11) are cached under $USDT_TRACE_TOOLS/arm64 (by default
# ~/.local/share/usdt-trace-tools/arm64), fetched once with apt through a private
# configuration there (the host's apt sources and state are not touched). Each boot's console
# is kept in the stage's logs/ (next to the initramfs: two checkouts testing at once would
# otherwise write one file and read each other's lines).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS="${USDT_TRACE_TOOLS:-$HOME/.local/share/usdt-trace-tools}"
CACHE=$TOOLS/arm64
# All three by default: the old kernels are the ones that refuse what a newer verifier takes
# (docs/arm64.md). Each boot and suite is 30-60 s once built, so all three add about a minute
# and a half to CI, and the first run's three kernel downloads (about 150 MB) once.
KERNELS=${USDT_TRACE_ARM64_KERNELS:-"trixie-backports bookworm-backports bookworm"}
# A boot and the whole suite take under a minute under TCG here; a hung guest ends here.
BOOT_TIMEOUT=${USDT_TRACE_ARM64_TIMEOUT:-900}
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export CARGO_TARGET_DIR
STAGE=$CARGO_TARGET_DIR/arm64-stage

log() { echo "test-arm64: $*" >&2; }

# --- The emulator and cpio (for the initramfs).
need_pkgs=()
for p in qemu-system-arm cpio; do
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

scripts/build-arm64.sh

# --- arm64 packages through apt with a configuration of its own: its sources (Debian's
# bookworm and bookworm-backports, arm64 only), lists, cache and an empty dpkg status under
# $CACHE/apt, so the host's apt is left as it is.
APT_DIR=$CACHE/apt
apt_arm64() {
    "$1" -o Dir::State="$APT_DIR/state" -o Dir::State::status="$APT_DIR/state/status" \
        -o Dir::Cache="$APT_DIR/cache" -o Dir::Etc::SourceList="$APT_DIR/sources.list" \
        -o Dir::Etc::SourceParts="$APT_DIR/parts" -o Dir::Etc::Preferences="$APT_DIR/none" \
        -o Dir::Etc::PreferencesParts="$APT_DIR/parts" \
        -o APT::Architecture=arm64 -o APT::Architectures::=arm64 \
        -o Debug::NoLocking=1 -o APT::Sandbox::User=root "${@:2}"
}
apt_ready=0
apt_update() {
    [ "$apt_ready" = 1 ] && return
    mkdir -p "$APT_DIR"/state/lists/partial "$APT_DIR"/cache/archives/partial "$APT_DIR/parts"
    touch "$APT_DIR/state/status"
    cat >"$APT_DIR/sources.list" <<'EOF'
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie-backports main
EOF
    log "reading Debian's arm64 package lists (once)"
    apt_arm64 apt-get update -qq >/dev/null
    apt_ready=1
}
# Downloads package $1 (apt's spelling, e.g. busybox-static or pkg/suite) into $2.
apt_download() {
    apt_update
    mkdir -p "$2"
    (cd "$2" && apt_arm64 apt-get download -qq "$1" >/dev/null)
}

# --- busybox, once.
BUSYBOX=$CACHE/busybox
if [ ! -x "$BUSYBOX" ]; then
    tmp=$(mktemp -d)
    apt_download busybox-static "$tmp"
    dpkg-deb --fsys-tarfile "$tmp"/busybox-static_*.deb | tar -x -C "$tmp" ./bin/busybox
    mv "$tmp/bin/busybox" "$BUSYBOX"
    rm -rf "$tmp"
fi

# --- Python for arm64, once: Debian bookworm's python3.11 and what `import ctypes` needs, for
# the test of probes defined at run time from Python (usdt_dyn.py, ctypes only). Extracted
# here and pruned to what the suite runs (no test suites, docs, GUI or network packages,
# extension modules but _ctypes and _json, encodings but UTF-8, ASCII and Latin-1): about 6 MB
# in the initramfs. glibc is the cross toolchain's (scripts/build-arm64.sh stages it): the one
# every dynamic binary here was linked against; python3.11 needs nothing newer than 2.36.
PYTHON_ROOT=$CACHE/python3.11
if [ ! -e "$PYTHON_ROOT/.complete" ]; then
    log "fetching Debian's python3.11 for arm64 (once)"
    tmp=$(mktemp -d)
    for p in python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libffi8 zlib1g libexpat1; do
        apt_download "$p/bookworm" "$tmp/debs"
    done
    mkdir -p "$tmp/root"
    for deb in "$tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
    lib=$tmp/root/usr/lib/python3.11
    rm -rf "$tmp"/root/usr/share "$tmp"/root/usr/lib/binfmt.d "$tmp"/root/etc
    rm -rf "$lib"/{test,idlelib,tkinter,turtledemo,lib2to3,ensurepip,pydoc_data,distutils,email,xml,http,urllib,xmlrpc,html,asyncio,multiprocessing,concurrent,unittest,sqlite3,dbm,curses,venv,wsgiref,zoneinfo,config-3.11-aarch64-linux-gnu}
    find "$lib/lib-dynload" -type f ! -name '_ctypes.cpython*' ! -name '_json.cpython*' -delete
    find "$lib/encodings" -type f ! -name '__init__.py' ! -name aliases.py ! -name utf_8.py \
        ! -name ascii.py ! -name latin_1.py -delete
    rm -rf "$PYTHON_ROOT"
    mv "$tmp/root" "$PYTHON_ROOT"
    touch "$PYTHON_ROOT/.complete"
    rm -rf "$tmp"
fi

# --- A kernel per suite, once: the image its linux-image-arm64 names when first fetched.
kernel_dir() { echo "$CACHE/kernels/$1"; }
for suite in $KERNELS; do
    dir=$(kernel_dir "$suite")
    [ -s "$dir/vmlinuz" ] && continue
    apt_update
    pkg=$(apt_arm64 apt-cache show "linux-image-arm64/$suite" 2>/dev/null \
        | sed -n 's/^Depends: //p' | head -n1 | grep -o 'linux-image-[^ ,]*' | head -n1)
    [ -n "$pkg" ] || { log "no linux-image-arm64 in $suite"; exit 1; }
    log "fetching $pkg ($suite)"
    tmp=$(mktemp -d)
    apt_download "$pkg/$suite" "$tmp"
    # The image is in the linux-image package up to 6.x (/boot/vmlinuz-*); newer Debian kernels
    # keep it in linux-binary-* (/usr/lib/modules/*/vmlinuz), on which linux-image depends.
    image() {
        dpkg-deb -c "$1" >"$tmp/contents"
        awk '{print $NF}' "$tmp/contents" | grep -m1 -E '^\./(boot/vmlinuz-|usr/lib/modules/[^/]*/vmlinuz$)' || true
    }
    deb=$(ls "$tmp"/linux-image-*.deb)
    path=$(image "$deb")
    if [ -z "$path" ]; then
        apt_download "linux-binary-${pkg#linux-image-}/$suite" "$tmp"
        deb=$(ls "$tmp"/linux-binary-*.deb)
        path=$(image "$deb")
    fi
    [ -n "$path" ] || { log "no vmlinuz in $pkg"; exit 1; }
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" "$path"
    mkdir -p "$dir"
    mv "$tmp/$path" "$dir/vmlinuz"
    echo "$pkg" >"$dir/package"
    rm -rf "$tmp"
done

# --- The initramfs: busybox, the stage, /init. Uncompressed: unpacking gzip in an emulated CPU
# costs seconds; QEMU loads the 20 MB as they are. Next to the stage, not in the shared cache:
# two checkouts testing at once would each boot the other's binaries.
INITRD=$STAGE/initramfs.cpio
root=$STAGE/initramfs
rm -rf "$root"
mkdir -p "$root"/{bin,dev,proc,sys,tmp,progs,oracle}
cp "$BUSYBOX" "$root/bin/busybox"
cp "$STAGE"/bin/* "$root/bin/"
cp "$STAGE"/progs/* "$root/progs/"
cp "$STAGE"/oracle/* "$root/oracle/"
# glibc (the dynamic programs' /lib/ld-linux-aarch64.so.1 and libc.so.6) and python3.11.
cp -a "$STAGE"/sysroot/. "$root/"
cp -a "$PYTHON_ROOT"/. "$root/"
rm -f "$root/.complete"
cat >"$root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
ip link set lo up
echo "SUITE-START $(uname -r) uptime $(cut -d' ' -f1 /proc/uptime)"
# The kernel hands its unknown command-line words to init as arguments: the tests to run.
/bin/arm64-suite "$@"
echo "SUITE-UPTIME $(cut -d' ' -f1 /proc/uptime)"
poweroff -f
EOF
chmod +x "$root/init"
(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet >"$INITRD.tmp")
mv "$INITRD.tmp" "$INITRD"
rm -rf "$root"

# --- Boot each kernel and read the suite's lines off its console.
# Per checkout, as the initramfs: two checkouts booting the same kernel at once would otherwise
# write one log and each read the other's results.
mkdir -p "$STAGE/logs"
fails=0
for suite in $KERNELS; do
    dir=$(kernel_dir "$suite")
    pkg=$(cat "$dir/package")
    logf=$STAGE/logs/$suite.log
    t0=$(date +%s.%N)
    rc=0
    # -cpu max: every feature QEMU emulates (pointer authentication included, with QEMU's own
    # cheaper algorithm); -net none: no NIC, whose option ROM Debian's QEMU lacks.
    timeout "$BOOT_TIMEOUT" nice -n 19 qemu-system-aarch64 -M virt -cpu max,pauth-impdef=on \
        -smp 2 -m 2048 -nographic -no-reboot -net none \
        -kernel "$dir/vmlinuz" -initrd "$INITRD" \
        -append "console=ttyAMA0 rdinit=/init panic=-1 loglevel=4 -- $*" \
        </dev/null >"$logf" 2>&1 || rc=$?
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    tr -d '\r' <"$logf" >"$logf.tmp" && mv "$logf.tmp" "$logf"
    start=$(grep -m1 '^SUITE-START' "$logf" || true)
    grep -E '^(PASS|FAIL) ' "$logf" | sed "s/^/$pkg: /" || true
    if [ "$rc" -ne 0 ] || ! grep -q '^SUITE-END' "$logf"; then
        log "$pkg: the boot did not finish (exit $rc after ${secs}s); console in $logf"
        tail -n 20 "$logf" >&2
        fails=$((fails + 1))
        continue
    fi
    n_fail=$(grep -c '^FAIL ' "$logf" || true)
    n_pass=$(grep -c '^PASS ' "$logf" || true)
    fails=$((fails + n_fail))
    printf '%s: %d passed, %d failed; suite reached at %s s of guest uptime, %.0f s wall in all\n' \
        "$pkg" "$n_pass" "$n_fail" "$(echo "$start" | awk '{print $4}')" "$secs"
done
[ "$fails" -eq 0 ]
