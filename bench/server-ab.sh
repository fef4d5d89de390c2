#!/usr/bin/env bash
# server-ab.sh - an A/B of two uzram builds as servers, rounds interleaved (issue 25): each
# build serves `-s 1G --threads 1`, REGION_MIB (512) are filled, then random 4 KiB reads and rewrites
# (16 in flight, 50% compressible) reach it by one path:
#   nbd     `uzram bench nbd` over the Unix socket (the load generator is UZRAM_A's for both);
#   attach  fio (libaio, direct) on `uzram attach --via loop` (FUSE file + loop device; root);
#           with ZRAM=1 kernel zram (/dev/zram0, lz4, reset after) runs as a third side.
# Per side and request kind: medians over the rounds of the server's CPU per request (/proc),
# requests/s, and B/A (and each side over zram). The sides change order every round.
#
# Usage: bench/server-ab.sh nbd|attach UZRAM_A UZRAM_B [ROUNDS] [REQUESTS]
#        (defaults 5 rounds, 200000 requests a run)
# Environment: REGION_MIB (default 512, at most 1024: the MiB filled and then read and rewritten).
set -euo pipefail
[[ $# -ge 3 ]] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
MODE=$1 A=$(realpath "$2") B=$(realpath "$3") ROUNDS=${4:-5} REQUESTS=${5:-200000}
[[ $MODE == nbd || $MODE == attach ]] || { echo "server-ab: the path is nbd or attach" >&2; exit 2; }
REGION_MIB=${REGION_MIB:-512}
[[ $REGION_MIB =~ ^[1-9][0-9]*$ && $REGION_MIB -le 1024 ]] ||
    { echo "server-ab: REGION_MIB is 1 to 1024, not '$REGION_MIB'" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-ab.XXXXXX")
export XDG_RUNTIME_DIR=$WORK
SOCK=$WORK/uzram/ab.sock
SERVER= ATTACHED= ZRAM_USED=0
cleanup() {
    [[ -n $ATTACHED ]] && "$ATTACHED" detach ab >/dev/null 2>&1
    [[ -n $SERVER ]] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
    [[ $ZRAM_USED == 1 ]] && echo 1 >/sys/block/zram0/reset
    rm -rf "$WORK"
}
trap cleanup EXIT
FIO=(fio --name=ab --ioengine=libaio --direct=1 --iodepth=16 --numjobs=1 "--size=${REGION_MIB}M"
    --buffer_compress_percentage=50 --refill_buffers --buffer_pattern=0xdeadbeef
    --output-format=json)

row() { echo "$@" >>"$WORK/rows"; } # LABEL RW ROUND SERVER_US REQ_PER_S

fio_run() { # LABEL RW ROUND DEV: a fixed count of random 4 KiB requests; server CPU from /proc
    local t0=0 t1=0 hz
    hz=$(getconf CLK_TCK)
    [[ -n $SERVER ]] && t0=$(awk '{print $14 + $15}' "/proc/$SERVER/stat")
    "${FIO[@]}" --filename="$4" --rw="rand$2" --bs=4k --norandommap --io_size=$((REQUESTS * 4096)) \
        >"$WORK/fio.json"
    [[ -n $SERVER ]] && t1=$(awk '{print $14 + $15}' "/proc/$SERVER/stat")
    row "$1" "$2" "$3" "$(awk -v t=$((t1 - t0)) -v n="$REQUESTS" -v hz="$hz" 'BEGIN {print t * 1e6 / hz / n}')" \
        "$(/usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; print(j["read"]["iops"] + j["write"]["iops"])' "$WORK/fio.json")"
}

side() { # BIN LABEL ROUND
    local bin=$1 label=$2 round=$3 rw dev
    if [[ $bin == zram ]]; then
        ZRAM_USED=1
        echo 1 >/sys/block/zram0/reset
        echo lz4 >/sys/block/zram0/comp_algorithm
        echo 1G >/sys/block/zram0/disksize
        "${FIO[@]}" --filename=/dev/zram0 --rw=write --bs=1M >/dev/null
        for rw in read write; do fio_run "$label" "$rw" "$round" /dev/zram0; done
        echo 1 >/sys/block/zram0/reset
        return
    fi
    rm -f "$SOCK"
    "$bin" serve -n ab -s 1G --threads 1 -q >"$WORK/server.out" 2>&1 &
    SERVER=$!
    for _ in $(seq 100); do [[ -S $SOCK ]] && break; sleep 0.1; done
    [[ -S $SOCK ]] || { echo "server-ab: $bin did not start: $(cat "$WORK/server.out")" >&2; exit 2; }
    if [[ $MODE == nbd ]]; then
        "$A" bench nbd --unix "$SOCK" --rw write --pattern seq --region ${REGION_MIB}M --block-size 1M \
            --requests "$REGION_MIB" >/dev/null
        for rw in read write; do
            "$A" bench nbd --unix "$SOCK" --rw "$rw" --region ${REGION_MIB}M --requests "$REQUESTS" \
                --server-pid "$SERVER" --json >"$WORK/run.json"
            row "$label" "$rw" "$round" "$(/usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["server_cpu_us_per_request"], r["requests_per_s"])' "$WORK/run.json")"
        done
    else
        dev=$("$bin" attach --via loop ab) || exit 2
        ATTACHED=$bin
        "${FIO[@]}" --filename="$dev" --rw=write --bs=1M >/dev/null
        for rw in read write; do fio_run "$label" "$rw" "$round" "$dev"; done
        "$bin" detach ab >/dev/null
        ATTACHED=
    fi
    kill "$SERVER"
    wait "$SERVER" 2>/dev/null || true
    SERVER=
}

SIDES=("$A A" "$B B")
[[ $MODE == attach && ${ZRAM:-0} == 1 ]] && SIDES+=("zram zram")
for round in $(seq "$ROUNDS"); do
    for i in $(seq 0 $((${#SIDES[@]} - 1))); do
        read -r bin label <<<"${SIDES[$(((i + round) % ${#SIDES[@]}))]}"
        side "$bin" "$label" "$round"
    done
done
echo "path $MODE; A = $A; B = $B"
echo "$ROUNDS rounds of $REQUESTS random 4 KiB requests a run, 16 in flight; load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
/usr/bin/python3 - "$WORK/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
labels = [l for l in ("A", "B", "zram") if any(r[0] == l for r in rows)]
med = {(l, rw): [statistics.median(float(r[i]) for r in rows if r[0] == l and r[1] == rw) for i in (3, 4)]
       for l in labels for rw in ("read", "write")}
print("%-6s %-8s %10s %10s %8s %8s" % ("kind", "side", "server us", "req/s", "vs A", "vs zram"))
for rw in ("read", "write"):
    for l in labels:
        s, q = med[l, rw]
        z = "%.3fx" % (q / med["zram", rw][1]) if "zram" in labels else "-"
        print("%-6s %-8s %10.2f %10.0f %7.3fx %8s" % (rw, l, s, q, q / med["A", rw][1], z))
PY
