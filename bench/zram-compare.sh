#!/bin/bash
# zram-compare.sh - kernel zram (fio/dd, psync, direct I/O, 4 KiB, lz4) against the uzram engine
# on the same bytes in the same run, with ratios and targets; the kernel side is skipped without root.
#
# Environment: UZRAM (the uzram binary, default build/uzram), SIZE (bytes of generated pages,
# default 256M), POOL_SOURCE (tree whose tar stream is the real data, default /usr/lib),
# POOL_SIZE (bytes of it, default 512M), REPEAT (runs of each side, best kept, default 3),
# DEDUP_TREES (space-separated paths stored one after another for the dedup comparison;
# default: two releases of the CPython 3.11 standard library when both are installed),
# ZRAM (device name, default zram0), KEEP=1 keeps the work folder.
# Never needed by any test: tests must not depend on zram.
set -u

UZRAM=${UZRAM:-build/uzram}
SIZE=${SIZE:-256M}
POOL_SOURCE=${POOL_SOURCE:-/usr/lib}
POOL_SIZE=${POOL_SIZE:-512M}
ZRAM=${ZRAM:-zram0}
REPEAT=${REPEAT:-3}
ZDEV=/dev/$ZRAM
ZSYS=/sys/block/$ZRAM
# The Debian python: the one with a json module we can rely on in any PATH.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

die() { echo "zram-compare: $*" >&2; exit 1; }
[ -x "$UZRAM" ] || die "no uzram binary at $UZRAM (run 'make programs' or set UZRAM)"
command -v "$PY" >/dev/null || die "python3 is needed to read JSON results"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-compare.XXXXXX") || die "mktemp failed"
ZRAM_TOUCHED=0

zram_reset() {
    echo 1 > "$ZSYS/reset" 2>/dev/null
}

cleanup() {
    # zram0 holds hundreds of MiB of our data: always hand it back empty.
    if [ "$ZRAM_TOUCHED" = 1 ]; then
        zram_reset || echo "zram-compare: warning: could not reset $ZDEV" >&2
    fi
    if [ "${KEEP:-0}" = 1 ]; then
        echo "work folder kept: $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- can the kernel side run? ------------------------------------------------
ZRAM_OK=1
ZRAM_WHY=""
if [ ! -b "$ZDEV" ]; then
    ZRAM_OK=0; ZRAM_WHY="$ZDEV does not exist (modprobe zram?)"
elif [ "$(id -u)" != 0 ]; then
    ZRAM_OK=0; ZRAM_WHY="not root"
elif ! command -v fio >/dev/null; then
    ZRAM_OK=0; ZRAM_WHY="fio is not installed (apt-get install fio)"
elif grep -q "^$ZDEV " /proc/swaps 2>/dev/null || grep -q "^$ZDEV " /proc/mounts 2>/dev/null; then
    ZRAM_OK=0; ZRAM_WHY="$ZDEV is in use (swap or mounted); not touching it"
elif ! grep -qw lz4 "$ZSYS/comp_algorithm" 2>/dev/null; then
    ZRAM_OK=0; ZRAM_WHY="kernel zram has no lz4"
fi

# Configure the kernel device: reset first, since algorithm and disksize are
# only accepted on an uninitialised device.
zram_setup() { # disksize
    ZRAM_TOUCHED=1
    zram_reset || return 1
    echo lz4 > "$ZSYS/comp_algorithm" || return 1
    echo "$1" > "$ZSYS/disksize" || return 1
}

# fio, psync, direct I/O, 4 KiB, one job, on the whole written range;
# prints bytes per second.
fio_bw() { # rw size [extra fio options...]
    local rw=$1 size=$2
    shift 2
    fio --name="zram-$rw" --filename="$ZDEV" --ioengine=psync --direct=1 --bs=4k \
        --rw="$rw" --size="$size" --numjobs=1 --output-format=json "$@" \
        > "$WORK/fio-$rw.json" 2> "$WORK/fio-$rw.err" || { cat "$WORK/fio-$rw.err" >&2; return 1; }
    "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; print(j[sys.argv[2]]["bw_bytes"])' \
        "$WORK/fio-$rw.json" "$rw"
}

# dd with 1 MiB reads from the file and 4 KiB direct writes to the device:
# the same syscall pattern as fio psync bs=4k direct=1, with our bytes (fio
# cannot take its write data from a file). Prints bytes per second.
dd_write_bw() { # file
    local out secs bytes
    out=$(LC_ALL=C dd if="$1" of="$ZDEV" ibs=1M obs=4k oflag=direct 2>&1) || { echo "$out" >&2; return 1; }
    bytes=$(echo "$out" | awk '/bytes/ && /copied/ {print $1}')
    secs=$(echo "$out" | awk -F', ' '/copied/ {split($(NF-1), a, " "); print a[1]}')
    "$PY" -c 'import sys; print(int(float(sys.argv[1]) / float(sys.argv[2])))' "$bytes" "$secs"
}

# Field of a uzram bench --json "file" result (first entry unless an index is given).
json_field() { # file field [index]
    "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["file"][int(sys.argv[3])][sys.argv[2]])' \
        "$1" "$2" "${3:-0}"
}

mbps() { "$PY" -c 'import sys; print("%.1f" % (float(sys.argv[1]) / 1e6))' "$1"; }

# ratio value target -> "1.234  target >= 1.5  met"
judge() { # label value-numerator value-denominator target
    "$PY" -c '
import sys
label, a, b, t = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
r = a / b if b else 0.0
print("%-46s %7.3f  target >= %-4g %s" % (label, r, t, "met" if r >= t else "NOT MET"))' "$@"
}

echo "zram-compare: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, kernel $(uname -r)"
echo "  cpu: $(LC_ALL=C lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "  load average: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$ZRAM_OK" = 1 ] || echo "kernel zram: skipped: $ZRAM_WHY"

# ---- 1. throughput on ~50%-compressible pages ---------------------------------
echo
echo "== throughput: lz4, 1 thread/job, 4 KiB pages, $SIZE =="
"$UZRAM" bench --dump-data half --size "$SIZE" > "$WORK/half.bin" || die "uzram bench --dump-data failed"
HALF_BYTES=$(stat -c %s "$WORK/half.bin")

# the engine, in-process, on exactly these bytes
"$UZRAM" bench --file "$WORK/half.bin" -a lz4 -t 1 -r "$REPEAT" --json > "$WORK/uz-half.json" ||
    die "uzram bench --file half.bin failed"
UZ_HALF_W=$(json_field "$WORK/uz-half.json" write_MBps)
UZ_HALF_R=$(json_field "$WORK/uz-half.json" read_MBps)
UZ_HALF_RATIO=$(json_field "$WORK/uz-half.json" ratio)
printf '%-34s write %9s MB/s   read %9s MB/s   ratio %s\n' "uzram engine, 'half' data:" \
    "$UZ_HALF_W" "$UZ_HALF_R" "$UZ_HALF_RATIO"

if [ "$ZRAM_OK" = 1 ]; then
    # 'half' data: written with dd (4 KiB direct writes), read with fio
    # best of REPEAT, as the engine side keeps the best of its repetitions
    ZW=0; ZR=0
    for _ in $(seq "$REPEAT"); do
        zram_setup "$SIZE" || die "cannot configure $ZDEV"
        W=$(dd_write_bw "$WORK/half.bin") || die "dd to $ZDEV failed"
        R=$(fio_bw read "$HALF_BYTES") || die "fio read failed"
        [ "$W" -gt "$ZW" ] && ZW=$W
        [ "$R" -gt "$ZR" ] && ZR=$R
    done
    read -r Z_ORIG Z_COMPR _ < "$ZSYS/mm_stat"
    printf '%-34s write %9s MB/s   read %9s MB/s   ratio %s\n' "kernel zram, 'half' data:" \
        "$(mbps "$ZW")" "$(mbps "$ZR")" \
        "$("$PY" -c 'import sys; print("%.3f" % (int(sys.argv[1]) / int(sys.argv[2])))' "$Z_ORIG" "$Z_COMPR")"
    echo "  (kernel write: dd ibs=1M obs=4k oflag=direct; read: fio psync direct=1 bs=4k)"

    # fio's own ~50%-compressible data: fio writes and reads; the exact bytes
    # are then read back from zram and given to the engine.
    FW=0; FR=0
    for _ in $(seq "$REPEAT"); do
        zram_setup "$SIZE" || die "cannot configure $ZDEV"
        W=$(fio_bw write "$HALF_BYTES" --buffer_compress_percentage=50 --refill_buffers=1) ||
            die "fio write failed"
        R=$(fio_bw read "$HALF_BYTES") || die "fio read failed"
        [ "$W" -gt "$FW" ] && FW=$W
        [ "$R" -gt "$FR" ] && FR=$R
    done
    dd if="$ZDEV" of="$WORK/fio.bin" bs=1M count=$((HALF_BYTES / 1048576)) status=none ||
        die "cannot read back $ZDEV"
    # What fio spends generating those buffers, without any device: its rate
    # with the null engine. The kernel's own time per page is 1/FW - 1/GEN.
    # (4x the size: fio times in milliseconds, and this run is short)
    fio --name=gen --ioengine=null --bs=4k --rw=write --size=$((4 * HALF_BYTES)) --numjobs=1 \
        --buffer_compress_percentage=50 --refill_buffers=1 --output-format=json \
        > "$WORK/fio-null.json" 2>/dev/null
    GEN=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["write"]["bw_bytes"])' "$WORK/fio-null.json" 2>/dev/null || echo 0)
    FW_NET=$("$PY" -c '
import sys
fw, gen = float(sys.argv[1]), float(sys.argv[2])
print(int(1 / (1 / fw - 1 / gen)) if gen > fw else int(fw))' "$FW" "$GEN")
    "$UZRAM" bench --file "$WORK/fio.bin" -a lz4 -t 1 -r "$REPEAT" --json > "$WORK/uz-fio.json" ||
        die "uzram bench --file fio.bin failed"
    UZ_FIO_W=$(json_field "$WORK/uz-fio.json" write_MBps)
    UZ_FIO_R=$(json_field "$WORK/uz-fio.json" read_MBps)
    printf '%-34s write %9s MB/s   read %9s MB/s   (fio buffer_compress_percentage=50)\n' \
        "kernel zram, fio data:" "$(mbps "$FW")" "$(mbps "$FR")"
    printf '%-34s write %9s MB/s   (fio buffer generation, %s MB/s, taken out)\n' \
        "kernel zram, fio data, net:" "$(mbps "$FW_NET")" "$(mbps "$GEN")"
    printf '%-34s write %9s MB/s   read %9s MB/s\n' "uzram engine, fio data:" "$UZ_FIO_W" "$UZ_FIO_R"
    zram_reset

    echo
    judge "write, 'half' data: uzram / zram" "$UZ_HALF_W" "$(mbps "$ZW")" 1.5
    judge "read,  'half' data: uzram / zram" "$UZ_HALF_R" "$(mbps "$ZR")" 2
    judge "write, fio data: uzram / zram (fio, gross)" "$UZ_FIO_W" "$(mbps "$FW")" 1.5
    judge "write, fio data: uzram / zram (fio, net)" "$UZ_FIO_W" "$(mbps "$FW_NET")" 1.5
    judge "read,  fio data: uzram / zram (fio)" "$UZ_FIO_R" "$(mbps "$FR")" 2
fi

# ---- 2. pool memory on real data -----------------------------------------------
echo
echo "== pool memory: first $POOL_SIZE of 'tar cf - $POOL_SOURCE', lz4 =="
POOL_BYTES=$("$PY" -c '
import re, sys
m = re.fullmatch(r"(\d+)([KMG]?)", sys.argv[1])
print(int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)])' "$POOL_SIZE") ||
    die "POOL_SIZE must look like 512M"
tar cf - "$POOL_SOURCE" 2>/dev/null | head -c "$POOL_BYTES" > "$WORK/pool.tar"
# whole pages only, so both sides store exactly the same bytes
TAR_BYTES=$(stat -c %s "$WORK/pool.tar")
truncate -s $(( (TAR_BYTES + 4095) / 4096 * 4096 )) "$WORK/pool.tar"
TAR_BYTES=$(stat -c %s "$WORK/pool.tar")
echo "data: $TAR_BYTES bytes"

"$UZRAM" bench --file "$WORK/pool.tar" -a lz4 -t 1 -r 1 --json > "$WORK/uz-pool.json" ||
    die "uzram bench --file pool.tar failed"
UZ_COMPR=$(json_field "$WORK/uz-pool.json" compr_data_size)
UZ_MEM=$(json_field "$WORK/uz-pool.json" mem_used_total)
echo "uzram mm_stat:       $(json_field "$WORK/uz-pool.json" mm_stat)"
"$PY" -c '
import sys
c, m = int(sys.argv[1]), int(sys.argv[2])
r = m / c
print("%-46s %7.4f  target <= 1.03 %s" % ("uzram mem_used_total / compr_data_size", r, "met" if r <= 1.03 else "NOT MET"))' "$UZ_COMPR" "$UZ_MEM"

if [ "$ZRAM_OK" = 1 ]; then
    zram_setup $(( TAR_BYTES + 1048576 )) || die "cannot configure $ZDEV"
    dd if="$WORK/pool.tar" of="$ZDEV" bs=1M oflag=direct status=none || die "dd to $ZDEV failed"
    MM=$(cat "$ZSYS/mm_stat")
    zram_reset
    echo "kernel zram mm_stat: $(echo $MM)"
    "$PY" -c '
import sys
f = [int(x) for x in sys.argv[1].split()]
orig, compr, mem = f[0], f[1], f[2]
print("%-46s %7.4f  (orig %d, compr %d, mem_used_total %d)" % ("zram mem_used_total / compr_data_size", mem / compr, orig, compr, mem))
print("%-46s %7.4f  (< 1: uzram holds less memory)" % ("uzram mem_used_total / zram mem_used_total", int(sys.argv[2]) / mem))' "$MM" "$UZ_MEM"
else
    echo "kernel zram: skipped: $ZRAM_WHY"
fi

# ---- 3. dedup on real data with duplication ------------------------------------
# Two releases of one source tree, each file from a page boundary as a file
# system on the device would place it: what dedup is for.
echo
if [ -z "${DEDUP_TREES:-}" ]; then
    OTHER=$(ls -d "$HOME"/.pyenv/versions/3.11.*/lib/python3.11 /usr/local/lib/python3.11 2>/dev/null |
            while read -r d; do [ -f "$d/os.py" ] && echo "$d"; done | head -1)
    if [ -d /usr/lib/python3.11 ] && [ -n "$OTHER" ]; then
        DEDUP_TREES="/usr/lib/python3.11"
        # the other release's stdlib without its site-packages (not a copy of the tree)
        for entry in "$OTHER"/*; do
            [ "$(basename "$entry")" = site-packages ] || DEDUP_TREES="$DEDUP_TREES $entry"
        done
        DEDUP_LABEL="/usr/lib/python3.11 + $OTHER (without site-packages)"
    fi
else
    DEDUP_LABEL=$DEDUP_TREES
fi
if [ -z "${DEDUP_TREES:-}" ]; then
    echo "== dedup on real data: skipped: no two copies of a tree found; set DEDUP_TREES =="
    exit 0
fi
echo "== dedup on real data: $DEDUP_LABEL, lz4 =="
TREE_ARGS=()
for t in $DEDUP_TREES; do TREE_ARGS+=(--tree "$t"); done
"$UZRAM" bench "${TREE_ARGS[@]}" --dedup -a lz4 -t 1 -r 1 --json > "$WORK/uz-dedup.json" ||
    die "uzram bench --tree --dedup failed"
"$PY" -c '
import json, sys
runs = json.load(open(sys.argv[1]))["file"]
off = [r for r in runs if not r["dedup"]][0]
on = [r for r in runs if r["dedup"]][0]
print("data: %d bytes in pages" % off["orig_data_size"])
for r in (off, on):
    print("uzram dedup %-3s mem_used_total %11d  compr %11d  dup_data %10d  meta %8d  write %7.1f MB/s"
          % ("on" if r["dedup"] else "off", r["mem_used_total"], r["compr_data_size"],
             r["dup_data_size"], r["meta_data_size"], r["write_MBps"]))
saved = 1 - (on["mem_used_total"] + on["meta_data_size"]) / off["mem_used_total"]
print("dedup saves %.1f%% of mem_used_total (metadata included); the seed reports 23-42%% on build outputs" % (100 * saved))
print("UZ_DEDUP_OFF=%d UZ_DEDUP_ON=%d" % (off["mem_used_total"], on["mem_used_total"] + on["meta_data_size"]), file=open(sys.argv[2], "w"))
' "$WORK/uz-dedup.json" "$WORK/uz-dedup.env"
if [ "$ZRAM_OK" = 1 ]; then
    "$UZRAM" bench "${TREE_ARGS[@]}" --dump-data loaded > "$WORK/dedup.bin" ||
        die "uzram bench --dump-data loaded failed"
    zram_setup $(( $(stat -c %s "$WORK/dedup.bin") + 1048576 )) || die "cannot configure $ZDEV"
    dd if="$WORK/dedup.bin" of="$ZDEV" bs=1M oflag=direct status=none || die "dd to $ZDEV failed"
    MM=$(cat "$ZSYS/mm_stat")
    zram_reset
    echo "kernel zram mm_stat: $(echo $MM)"
    . "$WORK/uz-dedup.env"
    "$PY" -c '
import sys
mem = int(sys.argv[1].split()[2])
print("kernel zram mem_used_total %d; uzram dedup off / zram %.3f, dedup on / zram %.3f"
      % (mem, int(sys.argv[2]) / mem, int(sys.argv[3]) / mem))' "$MM" "$UZ_DEDUP_OFF" "$UZ_DEDUP_ON"
else
    echo "kernel zram: skipped: $ZRAM_WHY"
fi
exit 0
