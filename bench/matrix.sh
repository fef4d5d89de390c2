#!/bin/bash
# matrix.sh - fio throughput matrix (issue 6): seq/rand read, write and 70/30 mix, 4 KiB, iodepth 16,
# static-pattern and 50%-compressible buffers, on uzram (dedup off/on), nbdkit memory and kernel zram.
#
# Usage: bench/matrix.sh [--quick] [--out DIR]
#   --quick   fewer cells (randwrite/randread on 50% data, randwrite on the static pattern),
#             1 s runs, a 64 MiB region: the same table layout in about a minute
#   --out DIR results folder (default build/bench-results); writes DIR/matrix.json and keeps
#             every fio report in DIR/matrix/
# Environment (all optional): UZRAM (default build/uzram), RUNTIME (seconds per fio run, 5; quick
# 1), REGION (bytes the I/O covers, 256M; quick 64M), JOBS ("1 2", and more where cores allow),
# WORKLOADS ("read write rw randread randwrite randrw"), BUFFERS ("static half"), IODEPTH (16),
# SIDES ("uzram-off uzram-on nbdkit-sparse nbdkit-zstd zram"), ZRAM (zram0).
#
# Method. Every side runs as its own server (or device) at once, idle while another side is
# measured. For each buffer kind the servers are started fresh (zram reset) and filled with
# that kind of data, sequentially with 1 MiB writes, so reads find stored pages. Then, for each
# cell (buffer, workload, jobs), all sides run back to back, the order rotated by one side per
# cell, so machine drift (these machines are shared) hits every side alike. Jobs split the region
# (--offset_increment), one NBD connection per job. A side that cannot run here is listed in
# matrix.json with the reason and printed as "skipped"; a run that fails is recorded as failed.
set -u
cd "$(dirname "$0")/.." || exit 2

# shellcheck source=bench/common.bash
. bench/common.bash
IODEPTH=${IODEPTH:-16}
if [ "$QUICK" = 1 ]; then
    RUNTIME=${RUNTIME:-1}
    REGION=${REGION:-64M}
else
    RUNTIME=${RUNTIME:-5}
    REGION=${REGION:-256M}
fi
WORKLOADS=${WORKLOADS:-"read write rw randread randwrite randrw"}
BUFFERS=${BUFFERS:-"static half"}
SIDES=${SIDES:-"uzram-off uzram-on nbdkit-sparse nbdkit-zstd zram"}
# Quick mode keeps the cells the issues' targets are judged on.
QUICK_CELLS="half:randwrite half:randread static:randwrite"
if [ -z "${JOBS:-}" ]; then
    # 1 and 2, then powers of two up to the number of CPUs, and the number of CPUs itself.
    JOBS="1 2"
    CPUS=$(nproc)
    j=4
    while [ "$j" -lt "$CPUS" ]; do JOBS="$JOBS $j"; j=$((j * 2)); done
    [ "$CPUS" -gt 2 ] && JOBS="$JOBS $CPUS"
fi

die() { echo "matrix.sh: $*" >&2; exit 2; }
[ -x "$UZRAM" ] || die "no uzram binary at $UZRAM (run 'make programs' or set UZRAM)"
UZRAM=$(realpath "$UZRAM")
command -v fio >/dev/null || die "fio is not installed (apt-get install fio)"
REGION_BYTES=$("$PY" -c '
import re, sys
m = re.fullmatch(r"(\d+)([KMG]?)", sys.argv[1])
print(int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)])' "$REGION") ||
    die "REGION must look like 256M"

mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(realpath "$OUT")
FIO_DIR=$OUT/matrix
rm -rf "$FIO_DIR"
mkdir -p "$FIO_DIR"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-matrix.XXXXXX") || die "mktemp failed"

# ---- which sides can run here -------------------------------------------------------------
declare -A SKIP PID SOCK
ZRAM_TOUCHED=0
fio_has_nbd=1
fio --enghelp=nbd >/dev/null 2>&1 || fio_has_nbd=0
for side in $SIDES; do
    case $side in
    uzram-off | uzram-on)
        [ "$fio_has_nbd" = 1 ] || SKIP[$side]="this fio has no nbd engine"
        ;;
    nbdkit-sparse | nbdkit-zstd)
        if [ "$fio_has_nbd" != 1 ]; then
            SKIP[$side]="this fio has no nbd engine"
        elif ! command -v nbdkit >/dev/null; then
            SKIP[$side]="nbdkit is not installed (apt-get install nbdkit)"
        elif ! nbdkit -U - memory 1M allocator="${side#nbdkit-}" --run true >/dev/null 2>&1; then
            SKIP[$side]="this nbdkit's memory plugin has no allocator=${side#nbdkit-}"
        fi
        ;;
    zram)
        if [ ! -b "$ZDEV" ]; then
            SKIP[$side]="$ZDEV does not exist (modprobe zram)"
        elif [ "$(id -u)" != 0 ]; then
            SKIP[$side]="not root"
        elif grep -q "^$ZDEV " /proc/swaps /proc/mounts 2>/dev/null; then
            SKIP[$side]="$ZDEV is in use (swap or mounted)"
        elif [ "$(cat "$ZSYS/initstate" 2>/dev/null)" != 0 ] && [ "${ZRAM_FORCE:-0}" != 1 ]; then
            SKIP[$side]="$ZDEV is initialised (someone else's data?); ZRAM_FORCE=1 resets it"
        elif ! grep -qw lz4 "$ZSYS/comp_algorithm" 2>/dev/null; then
            SKIP[$side]="kernel zram has no lz4"
        fi
        ;;
    *) die "unknown side '$side'" ;;
    esac
done
RUN_SIDES=()
for side in $SIDES; do
    [ -n "${SKIP[$side]:-}" ] || RUN_SIDES+=("$side")
done

zram_reset() { echo 1 > "$ZSYS/reset" 2>/dev/null; }

stop_side() {
    local side=$1
    if [ "$side" = zram ]; then
        zram_reset
        return
    fi
    if [ -n "${PID[$side]:-}" ]; then
        kill "${PID[$side]}" 2>/dev/null
        wait "${PID[$side]}" 2>/dev/null
        PID[$side]=
    fi
}

cleanup() {
    for side in "${RUN_SIDES[@]}"; do
        [ "$side" = zram ] || stop_side "$side"
    done
    # zram0 is shared by the whole machine: always hand it back empty.
    if [ "$ZRAM_TOUCHED" = 1 ]; then
        zram_reset || echo "matrix.sh: warning: could not reset $ZDEV" >&2
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_side SIDE: a fresh, empty server (or zram device) of REGION bytes.
start_side() {
    local side=$1 sock
    if [ "$side" = zram ]; then
        ZRAM_TOUCHED=1
        zram_reset &&
            echo lz4 > "$ZSYS/comp_algorithm" &&
            echo "$REGION_BYTES" > "$ZSYS/disksize"
        return
    fi
    stop_side "$side"
    sock=$WORK/$side.sock
    SOCK[$side]=$sock
    rm -f "$sock"
    case $side in
    uzram-off)
        XDG_RUNTIME_DIR=$WORK "$UZRAM" serve -q -s "$REGION_BYTES" -a lz4 -n "$side" \
            --unix "$sock" > "$WORK/$side.log" 2>&1 &
        ;;
    uzram-on)
        XDG_RUNTIME_DIR=$WORK "$UZRAM" serve -q -s "$REGION_BYTES" -a lz4 --dedup -n "$side" \
            --unix "$sock" > "$WORK/$side.log" 2>&1 &
        ;;
    nbdkit-sparse | nbdkit-zstd)
        nbdkit -f --unix "$sock" memory "$REGION_BYTES" allocator="${side#nbdkit-}" \
            > "$WORK/$side.log" 2>&1 &
        ;;
    esac
    PID[$side]=$!
    for _ in $(seq 100); do
        [ -S "$sock" ] && return 0
        kill -0 "${PID[$side]}" 2>/dev/null || break
        sleep 0.1
    done
    cat "$WORK/$side.log" >&2
    return 1
}

# fio_target SIDE: the fio options that reach that side.
fio_target() {
    if [ "$1" = zram ]; then
        echo "--ioengine=libaio --direct=1 --filename=$ZDEV"
    else
        echo "--ioengine=nbd --uri=nbd+unix:///?socket=${SOCK[$1]}"
    fi
}

# A 512-byte pattern from a fixed seed: every written page is the same 4 KiB (8 copies of it),
# which compresses well but is not same-filled (its period is 512 bytes, not one 8-byte word),
# so the static-buffer cells measure dedup, as the seed reviewer's static-buffer test did.
PATTERN=$("$PY" -c 'import random; r = random.Random(20170426); print(bytes(r.getrandbits(8) for _ in range(512)).hex())')
buffer_args() {
    case $1 in
    static) echo "--buffer_pattern=0x$PATTERN --scramble_buffers=0" ;;
    half) echo "--buffer_compress_percentage=50 --refill_buffers=1" ;;
    *) die "unknown buffer kind '$1'" ;;
    esac
}

workload_args() {
    case $1 in
    rw | randrw) echo "--rw=$1 --rwmixread=70" ;;
    read | write | randread | randwrite) echo "--rw=$1" ;;
    *) die "unknown workload '$1'" ;;
    esac
}

# run_fio OUTPUT SIDE [fio options...]; the log goes beside the JSON.
run_fio() {
    local out=$1 side=$2
    shift 2
    # shellcheck disable=SC2046
    fio --output-format=json --output="$out" --name=matrix $(fio_target "$side") --bs=4k \
        --group_reporting "$@" > "${out%.json}.log" 2>&1
}

# ---- the cells --------------------------------------------------------------------------------
CELLS=()
for buffer in $BUFFERS; do
    for workload in $WORKLOADS; do
        if [ "$QUICK" = 1 ] && [[ " $QUICK_CELLS " != *" $buffer:$workload "* ]]; then
            continue
        fi
        for jobs in $JOBS; do CELLS+=("$buffer:$workload:$jobs"); done
    done
done

echo "matrix: ${#CELLS[@]} cells x ${#RUN_SIDES[@]} sides, ${RUNTIME}s each, 4 KiB, iodepth $IODEPTH," \
    "region $REGION, jobs $JOBS; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for side in $SIDES; do
    [ -n "${SKIP[$side]:-}" ] && echo "  $side: skipped: ${SKIP[$side]}"
done

START=$(date +%s)
cell_index=0
current_buffer=
declare -A FAILED
for cell in "${CELLS[@]}"; do
    IFS=: read -r buffer workload jobs <<< "$cell"
    if [ "$buffer" != "$current_buffer" ]; then
        # New data kind: fresh servers, filled with it.
        current_buffer=$buffer
        for side in "${RUN_SIDES[@]}"; do
            FAILED[$side]=
            if ! start_side "$side"; then
                FAILED[$side]="could not start"
                echo "  $side: could not start; its cells are recorded as failed" >&2
                continue
            fi
            # shellcheck disable=SC2046
            run_fio "$FIO_DIR/fill-$buffer-$side.json" "$side" --rw=write --bs=1M --iodepth=4 \
                --size="$REGION_BYTES" $(buffer_args "$buffer") ||
                { FAILED[$side]="fill failed"; echo "  $side: fill failed" >&2; }
        done
    fi
    n=${#RUN_SIDES[@]}
    line="[$((cell_index + 1))/${#CELLS[@]}] $buffer $workload j$jobs:"
    for k in $(seq 0 $((n - 1))); do
        side=${RUN_SIDES[$(((k + cell_index) % n))]}
        out=$FIO_DIR/$buffer-$workload-j$jobs-$side.json
        if [ -n "${FAILED[$side]}" ]; then
            echo "${FAILED[$side]}" > "${out%.json}.failed"
            continue
        fi
        per_job=$((REGION_BYTES / jobs / 4096 * 4096))
        echo "{\"order\": $k, \"load\": $(cut -d' ' -f1 /proc/loadavg)}" > "${out%.json}.meta"
        # shellcheck disable=SC2046
        if run_fio "$out" "$side" $(workload_args "$workload") $(buffer_args "$buffer") \
            --iodepth="$IODEPTH" --numjobs="$jobs" --size="$per_job" --offset_increment="$per_job" \
            --time_based --runtime="$RUNTIME"; then
            line="$line $side $("$PY" -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
print("%.0f" % ((j["read"]["bw_bytes"] + j["write"]["bw_bytes"]) / 1e6))' "$out")"
        else
            echo "fio failed: $(tail -1 "${out%.json}.log")" > "${out%.json}.failed"
            line="$line $side FAILED"
        fi
    done
    echo "$line MB/s"
    cell_index=$((cell_index + 1))
done
for side in "${RUN_SIDES[@]}"; do stop_side "$side"; done
END=$(date +%s)

# ---- matrix.json ---------------------------------------------------------------------------
SKIPS=""
for side in $SIDES; do SKIPS="$SKIPS$side=${SKIP[$side]:-}"$'\n'; done
"$PY" - "$FIO_DIR" "$OUT/matrix.json" "$SIDES" "$RUNTIME" "$REGION_BYTES" "$IODEPTH" "$JOBS" \
    "$QUICK" "$((END - START))" "$SKIPS" "${CELLS[@]}" <<'EOF'
import json, os, sys
fio_dir, out, sides, runtime, region, iodepth, jobs, quick, seconds, skips = sys.argv[1:11]
cells = sys.argv[11:]
skip = dict(line.split("=", 1) for line in skips.splitlines() if line)
results = []
for cell in cells:
    buffer, workload, j = cell.split(":")
    for side in sides.split():
        base = os.path.join(fio_dir, f"{buffer}-{workload}-j{j}-{side}")
        row = {"buffer": buffer, "workload": workload, "jobs": int(j), "side": side}
        if skip.get(side):
            row["skipped"] = skip[side]
        elif os.path.exists(base + ".failed"):
            row["failed"] = open(base + ".failed").read().strip()
        else:
            try:
                job = json.load(open(base + ".json"))["jobs"][0]
            except (OSError, ValueError, KeyError, IndexError) as e:
                row["failed"] = f"no fio report ({e})"
            else:
                rd, wr = job["read"], job["write"]
                row.update(read_MBps=rd["bw_bytes"] / 1e6, write_MBps=wr["bw_bytes"] / 1e6,
                           MBps=(rd["bw_bytes"] + wr["bw_bytes"]) / 1e6,
                           iops=rd["iops"] + wr["iops"], errors=job.get("error", 0))
                row.update(json.load(open(base + ".meta")))
        results.append(row)
doc = {"config": {"runtime_s": int(runtime), "region_bytes": int(region), "iodepth": int(iodepth),
                  "jobs": [int(x) for x in jobs.split()], "block_size": 4096,
                  "quick": quick == "1", "seconds": int(seconds),
                  "buffers": {"static": "fio buffer_pattern of 512 fixed random bytes, scramble_buffers=0: every page identical, not same-filled",
                              "half": "fio buffer_compress_percentage=50, refill_buffers=1"},
                  "mixed": "rwmixread=70"},
       "sides": [{"side": s, "skipped": skip.get(s) or None} for s in sides.split()],
       "results": results}
json.dump(doc, open(out, "w"), indent=1)
EOF
echo "matrix: done in $((END - START)) s; $OUT/matrix.json"
