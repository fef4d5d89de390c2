#!/bin/bash
# pool-vs-zram.sh - uzram's pool against kernel zram's zsmalloc on the same bytes, lz4, dedup off
# (issue 27): mem_used_total of both (kernel zram measured on /dev/$ZRAM when root and the
# device is free; the uzram engine through `uzram bench --file`), and where each pool's bytes
# past the lz4 bytes go, from bench/pool_model.c (both pools laid out on the same lz4 sizes).
#
# Usage: bench/pool-vs-zram.sh [--doc docs/BENCHMARKS.md]
#   --doc FILE  also put the result between the POOL-VS-ZRAM markers of FILE
# Environment: UZRAM (default build/uzram; build/libuzram.a beside it), SETS (data sets, each
# "NAME:PATH PATH...": the first SIZE bytes of their tar stream; default text = /usr/include
# /usr/share/doc and binaries = /usr/lib), SIZE (default 512M), ZRAM (default zram0).
# Never needed by any test: tests must not depend on zram.
set -u
cd "$(dirname "$0")/.."
. bench/doc.bash
doc_parse "$@"
set -- "${ARGS[@]}"

UZRAM=${UZRAM:-build/uzram}
SIZE_GIVEN=${SIZE:-} # recorded in the doc's command when given
SIZE=${SIZE:-512M}
ZRAM=${ZRAM:-zram0}
ZSYS=/sys/block/$ZRAM
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
LIB=$(dirname "$UZRAM")/libuzram.a
DEFAULT_SETS=$'text:/usr/include /usr/share/doc\nbinaries:/usr/lib'
[ -n "${SETS:-}" ] || SETS=$DEFAULT_SETS

die() { echo "pool-vs-zram: $*" >&2; exit 1; }
[ -x "$UZRAM" ] || die "no uzram binary at $UZRAM (run 'make programs' or set UZRAM)"
[ -f "$LIB" ] || die "no $LIB (run 'make lib')"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-pool.XXXXXX") || die "mktemp failed"
ZRAM_TOUCHED=0
cleanup() {
    # the device holds our data: always hand it back empty
    [ "$ZRAM_TOUCHED" = 1 ] && { echo 1 > "$ZSYS/reset" || echo "pool-vs-zram: could not reset $ZRAM" >&2; }
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cc -std=gnu11 -O2 -Wall -Wextra -I"$ROOT/include" -I"$ROOT/lib" -o "$WORK/pool_model" \
    "$HERE/pool_model.c" "$LIB" -llz4 -lpthread || die "cannot build pool_model"

ZRAM_OK=1 ZRAM_WHY=""
if [ ! -b "/dev/$ZRAM" ]; then ZRAM_OK=0 ZRAM_WHY="/dev/$ZRAM does not exist"
elif [ "$(id -u)" != 0 ]; then ZRAM_OK=0 ZRAM_WHY="not root"
elif [ "$(cat "$ZSYS/disksize")" != 0 ]; then ZRAM_OK=0 ZRAM_WHY="/dev/$ZRAM is in use (disksize set)"
elif ! grep -qw lz4 "$ZSYS/comp_algorithm"; then ZRAM_OK=0 ZRAM_WHY="kernel zram has no lz4"
fi

run() {
echo "pool-vs-zram: $(date -u '+%Y-%m-%d %H:%M UTC'), kernel $(uname -r), uzram git $(bench_git)"
[ "$ZRAM_OK" = 1 ] || echo "kernel zram: skipped: $ZRAM_WHY"
while IFS=: read -r name paths; do
    [ -n "$name" ] || continue
    data=$WORK/$name.bin
    # shellcheck disable=SC2086
    tar cf - $paths 2>/dev/null | head -c "$(numfmt --from=iec "$SIZE")" > "$data"
    bytes=$(stat -c %s "$data")
    bytes=$((bytes / 4096 * 4096))
    truncate -s "$bytes" "$data"
    echo
    echo "== $name: first $bytes bytes of 'tar cf - $paths' =="
    "$WORK/pool_model" "$data" || die "pool_model failed"
    uz=$("$UZRAM" bench --file "$data" -a lz4 -r 1 -t 1 --json |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["file"][0]["mem_used_total"])') ||
        die "uzram bench --file failed"
    echo "uzram engine mem_used_total: $uz"
    if [ "$ZRAM_OK" = 1 ]; then
        ZRAM_TOUCHED=1
        echo 1 > "$ZSYS/reset" && echo lz4 > "$ZSYS/comp_algorithm" && echo "$bytes" > "$ZSYS/disksize" ||
            die "cannot configure $ZRAM"
        dd if="$data" of="/dev/$ZRAM" ibs=1M obs=4k oflag=direct status=none || die "dd to $ZRAM failed"
        read -r _ _ zr _ < "$ZSYS/mm_stat"
        echo 1 > "$ZSYS/reset"
        echo "kernel zram mem_used_total:  $zr"
        awk -v u="$uz" -v z="$zr" 'BEGIN { printf "uzram / kernel zram, measured: %.4f\n", u / z }'
    fi
    rm -f "$data"
done <<< "$SETS"
}

run | tee "$WORK/out"
if [[ -n $DOC ]]; then
    # the command as run: the data sets and size when they are not the defaults
    env_part=""
    [[ $SETS == "$DEFAULT_SETS" ]] || env_part+="SETS=${SETS@Q} "
    [[ -z ${SIZE_GIVEN:-} ]] || env_part+="SIZE=$SIZE_GIVEN "
    { echo "Measured by \`${env_part}bench/pool-vs-zram.sh --doc docs/BENCHMARKS.md\`:"; echo; echo '```'
      cat "$WORK/out"; echo '```'; } > "$WORK/text"
    doc_block "$DOC" "<!-- BEGIN POOL-VS-ZRAM (bench/pool-vs-zram.sh --doc; do not edit by hand) -->" \
        "<!-- END POOL-VS-ZRAM -->" "$WORK/text"
    echo "($DOC updated)" >&2
fi
