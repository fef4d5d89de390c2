#!/bin/bash
# build.sh - the prototype ublk driver of issue 40's item 4 (docs/design/swap.md, "A synchronous
# ublk driver"): Debian's own drivers/block/ublk_drv.c of the guest's kernel (tests/vm/vm.sh:
# 6.12.118+deb12-amd64) with ublk-sync.patch, built out of tree against that kernel's headers
# into build/ublk-sync/ublk_drv.ko. The patch makes a ublk disk one that Linux swaps to as it
# swaps to kernel zram: BLK_FEAT_SYNCHRONOUS (swap-in skips the swap cache and frees the slot
# at once, no readahead) and swap_slot_free_notify forwarded to the server as discards, held
# in order with later writes of the same slots (the patch's comment says how).
#
# A measurement, not a part of uzram: nothing in lib/ or src/ depends on it, and only
# bench/vm-swap-programs.sh's backends uzram-lz4-sync and uzram-dense-sync load it (in the
# guest, in place of the stock module, for their run only).
#
#   bench/ublk-sync/build.sh     (downloads the kernel's headers, kbuild and source packages
#                                 with apt-get download and unpacks them under build/; it
#                                 installs nothing)
#   bench/ublk-sync/build.sh --help
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
    exit 0
fi
[[ $# == 0 ]] || { echo "build.sh: no arguments (try --help)" >&2; exit 2; }
KVER=6.12.118+deb12-amd64
SRC_VERSION=6.12.118-1~deb12u1
OUT=build/ublk-sync
DEB=$OUT/linux-source-6.12_${SRC_VERSION}_all.deb
ORIG=$OUT/ublk_drv.c.orig
mkdir -p "$OUT"

# The headers (with the matching kbuild): the module's vermagic and symbol versions are theirs.
# Downloaded and unpacked under build/, never installed: installing linux-headers-<kver> pulls in
# that kernel's image package, which runs update-initramfs and repoints /vmlinuz on the host.
HDR=$OUT/headers
KBUILD=$HDR/usr/src/linux-headers-$KVER
if [[ ! -e $HDR/.unpacked ]]; then
    pkgs=("linux-headers-$KVER" "linux-headers-${KVER%-amd64}-common" "linux-kbuild-${KVER%-amd64}")
    echo "build.sh: downloading ${pkgs[*]}"
    rm -rf "$HDR" "$OUT/debs"
    mkdir -p "$HDR" "$OUT/debs"
    (cd "$OUT/debs" && apt-get download "${pkgs[@]}") ||
        (apt-get update && cd "$OUT/debs" && apt-get download "${pkgs[@]}")
    for deb in "$OUT"/debs/*.deb; do dpkg-deb -x "$deb" "$HDR"; done
    # The flavour's Makefile includes the common one by its installed path; point it here.
    sed -i "s|/usr/src/|$PWD/$HDR/usr/src/|" "$KBUILD/Makefile"
    touch "$HDR/.unpacked"
fi

# The driver's source, exactly the kernel's: from the source package of the same version (its
# tar.xz holds the whole tree; only the one file is taken, once).
if [[ ! -s $ORIG ]]; then
    if [[ ! -s $DEB ]]; then
        echo "build.sh: downloading linux-source-6.12=$SRC_VERSION"
        (cd "$OUT" && apt-get download "linux-source-6.12=$SRC_VERSION") ||
            (apt-get update && cd "$OUT" && apt-get download "linux-source-6.12=$SRC_VERSION")
    fi
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    dpkg-deb -x "$DEB" "$tmp"
    tar -xJf "$tmp/usr/src/linux-source-6.12.tar.xz" -C "$tmp" linux-source-6.12/drivers/block/ublk_drv.c
    cp "$tmp/linux-source-6.12/drivers/block/ublk_drv.c" "$ORIG.tmp"
    mv "$ORIG.tmp" "$ORIG"
fi

# Patched and built in a folder of its own (kbuild writes its objects next to the source).
rm -rf "$OUT/src"
mkdir -p "$OUT/src/drivers/block"
cp "$ORIG" "$OUT/src/drivers/block/ublk_drv.c"
patch -s -p1 -d "$OUT/src" <bench/ublk-sync/ublk-sync.patch
cp bench/ublk-sync/Kbuild "$OUT/src/drivers/block/Kbuild"
make -s -C "$KBUILD" M="$PWD/$OUT/src/drivers/block" modules
cp "$OUT/src/drivers/block/ublk_drv.ko" "$OUT/ublk_drv.ko"
magic=$(modinfo -F vermagic "$OUT/ublk_drv.ko")
[[ $magic == "$KVER "* ]] || { echo "build.sh: vermagic '$magic' is not $KVER's" >&2; exit 1; }
echo "build.sh: $OUT/ublk_drv.ko ($magic)"
