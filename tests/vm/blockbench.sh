#!/usr/bin/env bash
# blockbench.sh - VM benchmark scenario (bench/vm-block.sh runs it): fio 4 KiB random reads and
# writes, libaio, direct, at QD1 and QD16, on one uzram server's device attached through ublk
# (/dev/ublkbN) and through the kernel's NBD client (/dev/nbdN: the same device, one after
# the other), and on the guest's own /dev/zram0 (lz4, as uzram). Rounds interleaved: in each
# round every (target, job) pair runs once, each round starting one target further on. Data
# half compressible (fio --buffer_compress_percentage=50), all 256 MiB written before the reads.
# Writes "blockbench ROUND TARGET JOB IOPS USR_S SYS_S" result lines: only ratios within one
# boot mean anything under emulation. With UZRAM_B (another build of uzram, e.g. an older
# commit's), a second server of that build is measured the same way in the same rounds, as
# targets ublk-b and nbd-b: an A/B of the two builds' /dev node paths.
#
#   blockbench.sh [ROUNDS] [SECONDS] [UZRAM_B]   (default 3 rounds of 10 s per run)
set -euo pipefail
source "$(dirname "$0")/lib.bash"

ROUNDS=${1:-3}
SECONDS_PER_RUN=${2:-10}
UZRAM_B=${3:-}
SIZE=256M
vm_init
need_module ublk_drv nbd zram
need_tools fio nbd-client

start_server bench -s "$SIZE" -a lz4
TARGETS=(ublk nbd zram)
if [[ -n $UZRAM_B ]]; then
    [[ -x $UZRAM_B ]] || fail "UZRAM_B $UZRAM_B is not a program"
    UZRAM=$UZRAM_B start_server benchb -s "$SIZE" -a lz4
    TARGETS=(ublk nbd ublk-b nbd-b zram)
fi
echo 1 >/sys/block/zram0/reset
echo lz4 >/sys/block/zram0/comp_algorithm
echo "$SIZE" >/sys/block/zram0/disksize
at_exit "echo 1 >/sys/block/zram0/reset"

# fio_run DEV RW DEPTH: IOPS, then fio's user and system CPU seconds
fio_run() {
    fio --name=b --filename="$1" --ioengine=libaio --direct=1 --rw="$2" --bs=4k \
        --iodepth="$3" --time_based --runtime="$SECONDS_PER_RUN" --size="$SIZE" \
        --buffer_compress_percentage=50 --refill_buffers --randseed=1 --norandommap \
        --output-format=json --output="$WORK/fio.json" >/dev/null 2>&1 || fail "fio $2 QD$3 on $1"
    /usr/bin/python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
io = j["read"] if sys.argv[2].endswith("read") else j["write"]
print("%.0f %.2f %.2f" % (io["iops"], j["usr_cpu"] * j["elapsed"] / 100, j["sys_cpu"] * j["elapsed"] / 100))
' "$WORK/fio.json" "$2"
}

# fill DEV: every block written once, so that reads find data, not unwritten pages
fill() {
    fio --name=fill --filename="$1" --ioengine=libaio --direct=1 --rw=write --bs=1M --iodepth=4 \
        --size="$SIZE" --buffer_compress_percentage=50 --refill_buffers --output=/dev/null ||
        fail "filling $1"
}

# attach_as TARGET: a server's device through ublk or nbd (the previous node detached first):
# server bench (this build), or benchb (UZRAM_B) for TARGET ublk-b or nbd-b
attach_as() {
    [[ -z ${NODE:-} ]] || "$NODE_UZRAM" detach "$NODE_SERVER" || fail "detach $NODE"
    NODE_UZRAM=$UZRAM NODE_SERVER=bench
    [[ $1 != *-b ]] || NODE_UZRAM=$UZRAM_B NODE_SERVER=benchb
    NODE=$("$NODE_UZRAM" attach --via "${1%-b}" "$NODE_SERVER") || fail "attach --via ${1%-b}"
}

fill /dev/zram0
attach_as ublk
fill "$NODE"
if [[ -n $UZRAM_B ]]; then
    attach_as ublk-b
    fill "$NODE"
fi
for ((round = 1; round <= ROUNDS; round++)); do
    # each round starts one target further on, so that no target always runs first or last
    shift_by=$(((round - 1) % ${#TARGETS[@]}))
    for target in "${TARGETS[@]:shift_by}" "${TARGETS[@]:0:shift_by}"; do
        case $target in
        zram) dev=/dev/zram0 ;;
        *) attach_as "$target" && dev=$NODE ;;
        esac
        for job in randread:1 randread:16 randwrite:1 randwrite:16; do
            read -r iops usr sys < <(fio_run "$dev" "${job%:*}" "${job#*:}")
            result blockbench "$round" "$target" "$job" "$iops" "$usr" "$sys"
        done
    done
done
"$NODE_UZRAM" detach "$NODE_SERVER"
stop_server bench
[[ -z $UZRAM_B ]] || stop_server benchb
pass "$ROUNDS rounds of fio on ${TARGETS[*]}"
echo "PASS: blockbench.sh"
