#!/bin/bash
# attach.sh - the /dev node of `uzram attach` against the block devices a user had before it:
# nbdfuse + `losetup --direct-io=on` on the same server, and kernel zram. fio 4 KiB random
# write and read (libaio, direct, iodepth 16, 50%-compressible buffers) and an untar of a fixed
# tree into ext4 + sync, rounds interleaved (each round starts with another side), medians.
#
# Usage: bench/attach.sh [--quick] [--out DIR] [--doc FILE]
#   --quick     2 rounds of 3 s runs instead of 3 of 10 s
#   --out DIR   where attach.json, attach.md and the fio reports go (default build/bench-attach)
#   --doc FILE  also replace the ATTACH RESULTS part of FILE (docs/BENCHMARKS.md)
# Environment: UZRAM (default build/uzram), ROUNDS, RUNTIME (seconds per fio run), SIZE (device
# size, default 1G), REGION (fio's region, default 512M), TREE (the directory tarred once and
# untarred on every side, default /usr/include), SIDES (default "attach attach-uring nbdfuse
# zram").
# Needs root (loop devices, mount, /dev/zram0); a side that cannot run is reported as skipped.
# Run it alone on the machine: it measures latency-bound paths.
set -u
cd "$(dirname "$0")/.." || exit 1

QUICK=0
OUT=build/bench-attach
DOC=
ARGS="$*"
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --out) OUT=$2; shift ;;
    --doc) DOC=$2; shift ;;
    -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "attach.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done
UZRAM=$(realpath "${UZRAM:-build/uzram}")
if [ "$QUICK" = 1 ]; then ROUNDS=${ROUNDS:-2}; RUNTIME=${RUNTIME:-3}; else ROUNDS=${ROUNDS:-3}; RUNTIME=${RUNTIME:-10}; fi
SIZE=${SIZE:-1G}
REGION=${REGION:-512M}
TREE=${TREE:-/usr/include}
SIDES=${SIDES:-"attach attach-uring nbdfuse zram"}
# attach: the FUSE file over /dev/fuse; attach-uring: over io_uring (Linux 6.14+), with the fuse
# module's enable_uring turned on for that side only (and put back as it was at the end).
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING_OLD=$(cat "$URING_PARAM" 2>/dev/null || true)
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

die() { echo "attach.sh: $*" >&2; exit 1; }
[ -x "$UZRAM" ] || die "no uzram binary at $UZRAM (run 'make programs')"
[ "$(id -u)" = 0 ] || die "needs root (loop devices, mount, zram)"
for tool in fio mkfs.ext4 losetup tar; do command -v $tool >/dev/null || die "$tool is not installed"; done
mkdir -p "$OUT/fio" || exit 1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-bench-attach.XXXXXX") || exit 1
export XDG_RUNTIME_DIR=$WORK/run
mkdir -m 700 "$XDG_RUNTIME_DIR" "$WORK/mnt" "$WORK/fuse"
SERVER_PID= NBDFUSE_PID= DEV= CURRENT= ZRAM_TOUCHED=0

# ---- sides: setup prints nothing and sets DEV; teardown undoes it ----
server_start() {
    "$UZRAM" serve -n bench -s "$SIZE" -q >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do [ -S "$XDG_RUNTIME_DIR/uzram/bench.ctl" ] && return 0; sleep 0.05; done
    echo "server did not start: $(cat "$WORK/server.log")"; return 1
}
server_stop() {
    [ -n "$SERVER_PID" ] || return 0
    kill "$SERVER_PID" 2>/dev/null
    for _ in $(seq 200); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    SERVER_PID=
}
set_uring() { # Y|N: the fuse module's enable_uring, where the kernel has it
    [ -z "$URING_OLD" ] || echo "$1" >"$URING_PARAM"
}
setup_attach() {
    set_uring N
    server_start || return 1
    DEV=$("$UZRAM" attach --via loop bench 2>"$WORK/attach.err") || { cat "$WORK/attach.err"; return 1; }
}
setup_attach-uring() {
    [ -w "$URING_PARAM" ] || { echo "this kernel has no FUSE over io_uring ($URING_PARAM)"; return 1; }
    set_uring Y
    server_start || return 1
    DEV=$("$UZRAM" attach --via loop bench 2>"$WORK/attach.err") || { cat "$WORK/attach.err"; return 1; }
    for _ in $(seq 100); do grep -q "FUSE requests over io_uring" "$WORK/server.log" && return 0; sleep 0.05; done
    echo "the server did not serve over io_uring: $(cat "$WORK/server.log")"
    return 1
}
teardown_attach-uring() { teardown_attach; }
teardown_attach() {
    [ -n "$DEV" ] && "$UZRAM" detach bench
    DEV=
    server_stop
}
setup_nbdfuse() {
    command -v nbdfuse >/dev/null || { echo "nbdfuse is not installed"; return 1; }
    server_start || return 1
    rm -f "$WORK/nbdfuse.pid"
    nbdfuse -P "$WORK/nbdfuse.pid" "$WORK/fuse/disk" "nbd+unix:///bench?socket=$XDG_RUNTIME_DIR/uzram/bench.sock" >"$WORK/nbdfuse.log" 2>&1 &
    NBDFUSE_PID=$!
    for _ in $(seq 100); do [ -s "$WORK/nbdfuse.pid" ] && break; sleep 0.05; done
    [ -s "$WORK/nbdfuse.pid" ] || { echo "nbdfuse did not start: $(cat "$WORK/nbdfuse.log")"; return 1; }
    DEV=$(losetup -f --show --direct-io=on "$WORK/fuse/disk") || return 1
}
# nbdfuse MOUNTPOINT/FILE mounts the directory MOUNTPOINT and shows FILE in it: unmount the
# directory. nbdfuse exits once unmounted; it gets 10 s, then SIGKILL, so that a teardown
# can never hold the machine lock for ever.
teardown_nbdfuse() {
    [ -n "$DEV" ] && losetup -d "$DEV"
    DEV=
    if [ -n "$NBDFUSE_PID" ]; then
        fusermount3 -u "$WORK/fuse" 2>/dev/null || umount "$WORK/fuse" 2>/dev/null || umount -l "$WORK/fuse" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$NBDFUSE_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$NBDFUSE_PID" 2>/dev/null
        wait "$NBDFUSE_PID" 2>/dev/null
        mountpoint -q "$WORK/fuse" && umount -l "$WORK/fuse"
        NBDFUSE_PID=
    fi
    server_stop
}
setup_zram() {
    [ -b /dev/zram0 ] || { echo "/dev/zram0 does not exist (modprobe zram?)"; return 1; }
    if grep -q '^/dev/zram0 ' /proc/swaps /proc/mounts 2>/dev/null; then echo "/dev/zram0 is in use"; return 1; fi
    ZRAM_TOUCHED=1
    echo 1 >/sys/block/zram0/reset && echo lz4 >/sys/block/zram0/comp_algorithm &&
        echo "$SIZE" >/sys/block/zram0/disksize || { echo "cannot configure /dev/zram0"; return 1; }
    DEV=/dev/zram0
}
teardown_zram() {
    echo 1 >/sys/block/zram0/reset
    DEV=
}
cleanup() {
    mountpoint -q "$WORK/mnt" && { umount "$WORK/mnt" || umount -l "$WORK/mnt"; }
    [ -n "$CURRENT" ] && "teardown_$CURRENT" >/dev/null 2>&1
    server_stop
    [ "$ZRAM_TOUCHED" = 1 ] && echo 1 >/sys/block/zram0/reset 2>/dev/null
    set_uring "$URING_OLD"
    mountpoint -q "$WORK/fuse" && umount -l "$WORK/fuse"
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# CPU seconds (user + system) of the server and nbdfuse, the user-space side of a path.
server_cpu() {
    local total=0 pid
    for pid in $SERVER_PID $NBDFUSE_PID; do
        [ -r "/proc/$pid/stat" ] || continue
        total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done
    echo "$total"
}

FIO_COMMON=(--ioengine=libaio --direct=1 --bs=4k --iodepth=16 --numjobs=1 --size="$REGION"
    --buffer_compress_percentage=50 --refill_buffers --buffer_pattern=0xdeadbeef
    --output-format=json)
# fio_run SIDE ROUND RW: one timed run, appended to $OUT/runs.txt as "side round rw iops MiB/s cpu_us_per_request"
fio_run() {
    local side=$1 round=$2 rw=$3 report="$OUT/fio/$1-$2-$3.json" cpu0 cpu1
    cpu0=$(server_cpu)
    timeout -k 5 $((RUNTIME + 60)) fio --name="$rw" --filename="$DEV" --rw="$rw" --time_based --runtime="$RUNTIME" "${FIO_COMMON[@]}" >"$report" || return 1
    cpu1=$(server_cpu)
    "$PY" - "$report" "$side" "$round" "$rw" "$((cpu1 - cpu0))" "$(getconf CLK_TCK)" >>"$OUT/runs.txt" <<'EOF'
import json, sys
report, side, rnd, rw, ticks, hz = sys.argv[1:]
job = json.load(open(report))["jobs"][0]["read" if rw == "randread" else "write"]
requests = job["total_ios"]
cpu = "%.1f" % (int(ticks) / int(hz) * 1e6 / requests) if side != "zram" and requests else "-"
print(side, rnd, rw, round(job["iops"]), "%.1f" % (job["bw"] / 1024), cpu)
EOF
}

fio_side() { # SIDE ROUND
    local side=$1 round=$2
    CURRENT=$side
    if ! "setup_$side" >"$WORK/setup.err" 2>&1; then
        echo "$side $round skip $(tr '\n' ' ' <"$WORK/setup.err")" >>"$OUT/runs.txt"
        "teardown_$side" >/dev/null 2>&1
        CURRENT=
        return 0
    fi
    timeout -k 5 300 fio --name=fill --filename="$DEV" --rw=write --bs=1M --ioengine=libaio --direct=1 --iodepth=4 \
        --size="$REGION" --buffer_compress_percentage=50 --refill_buffers --buffer_pattern=0xdeadbeef >/dev/null ||
        echo "$side $round skip fio could not fill $DEV" >>"$OUT/runs.txt"
    fio_run "$side" "$round" randwrite && fio_run "$side" "$round" randread ||
        echo "$side $round skip fio failed on $DEV" >>"$OUT/runs.txt"
    "teardown_$side" >/dev/null 2>&1
    CURRENT=
}

untar_side() { # SIDE ROUND
    local side=$1 round=$2 start end
    CURRENT=$side
    if ! "setup_$side" >"$WORK/setup.err" 2>&1; then
        echo "$side $round skip $(tr '\n' ' ' <"$WORK/setup.err")" >>"$OUT/untar.txt"
        "teardown_$side" >/dev/null 2>&1
        CURRENT=
        return 0
    fi
    if mkfs.ext4 -q -F "$DEV" >/dev/null 2>&1 && mount -t ext4 "$DEV" "$WORK/mnt"; then
        start=$(date +%s.%N)
        timeout -k 5 300 tar -xf "$WORK/tree.tar" -C "$WORK/mnt" && timeout -k 5 120 sync
        end=$(date +%s.%N)
        echo "$side $round untar $(awk "BEGIN {print $end - $start}")" >>"$OUT/untar.txt"
        umount "$WORK/mnt"
    else
        echo "$side $round skip mkfs.ext4 or mount failed on $DEV" >>"$OUT/untar.txt"
    fi
    "teardown_$side" >/dev/null 2>&1
    CURRENT=
}

LOAD=$(cut -d" " -f1-3 /proc/loadavg) # at the start, for the report
echo "### bench/attach.sh${ARGS:+ $ARGS}: $ROUNDS rounds, fio ${RUNTIME} s per run, device $SIZE, region $REGION, tree $TREE; load $(cut -d' ' -f1-3 /proc/loadavg)"
rm -f "$OUT/runs.txt" "$OUT/untar.txt"
tar --sort=name -C "$(dirname "$TREE")" -cf "$WORK/tree.tar" "$(basename "$TREE")" 2>/dev/null ||
    die "cannot tar $TREE"
cat "$WORK/tree.tar" >/dev/null # read from the page cache from now on
TREE_BYTES=$(stat -c %s "$WORK/tree.tar")
TREE_FILES=$(tar -tf "$WORK/tree.tar" | wc -l)
read -r -a SIDE_LIST <<<"$SIDES"
count=${#SIDE_LIST[@]}
for round in $(seq "$ROUNDS"); do
    for i in $(seq 0 $((count - 1))); do
        side=${SIDE_LIST[$(((i + round - 1) % count))]}
        fio_side "$side" "$round"
        untar_side "$side" "$round"
    done
    echo "round $round done: $(grep -c " $round " "$OUT/runs.txt") fio runs, load $(cut -d' ' -f1 /proc/loadavg)"
done

"$PY" - "$OUT" "$TREE" "$TREE_BYTES" "$TREE_FILES" "$ROUNDS" "$RUNTIME" "$SIZE" "$REGION" \
    "bench/attach.sh${ARGS:+ $ARGS}" "$(uname -r)" "$(nproc)" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(
        [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' + uncommitted changes')" \
    "$LOAD" <<'EOF'
import json, os, statistics, sys
out, tree, tree_bytes, tree_files, rounds, runtime, size, region, command, kernel, nproc, git, load = sys.argv[1:]
runs, untars, skips = {}, {}, {}
for line in open(os.path.join(out, "runs.txt")):
    f = line.split()
    if f[2] == "skip":
        skips[f[0]] = " ".join(f[3:])
        continue
    runs.setdefault(f[0], {}).setdefault(f[2], []).append(
        {"round": int(f[1]), "iops": int(f[3]), "MiBps": float(f[4]), "cpu_us": None if f[5] == "-" else float(f[5])})
for line in open(os.path.join(out, "untar.txt")):
    f = line.split()
    if f[2] == "skip":
        skips[f[0]] = " ".join(f[3:])
        continue
    untars.setdefault(f[0], []).append({"round": int(f[1]), "seconds": float(f[3])})
median = lambda xs: statistics.median(xs) if xs else None
result = {"command": command, "kernel": kernel, "nproc": nproc, "git": git, "load": load,
          "rounds": int(rounds), "runtime": int(runtime),
          "size": size, "region": region, "tree": tree, "tree_bytes": int(tree_bytes), "tree_files": int(tree_files),
          "runs": runs, "untar": untars, "skipped": skips, "median": {}}
for side in set(runs) | set(untars):
    m = {}
    for rw, rs in runs.get(side, {}).items():
        m[rw + "_iops"] = median([r["iops"] for r in rs])
        m[rw + "_MiBps"] = median([r["MiBps"] for r in rs])
        cpus = [r["cpu_us"] for r in rs if r["cpu_us"] is not None]
        m[rw + "_cpu_us"] = median(cpus)
    m["untar_s"] = median([u["seconds"] for u in untars.get(side, [])])
    result["median"][side] = m
def ratio(a, b, key):
    x, y = result["median"].get(a, {}).get(key), result["median"].get(b, {}).get(key)
    return x / y if x and y else None
targets = []
for rw in ("randwrite", "randread"):
    targets.append({"what": "fio 4 KiB %s: uzram attach / nbdfuse + losetup" % rw, "target": ">= 4x",
                    "value": ratio("attach", "nbdfuse", rw + "_iops"), "goal": 4.0, "higher": True})
    targets.append({"what": "fio 4 KiB %s: uzram attach / kernel zram" % rw, "target": ">= 0.5x",
                    "value": ratio("attach", "zram", rw + "_iops"), "goal": 0.5, "higher": True})
targets.append({"what": "untar + sync: uzram attach / kernel zram (time)", "target": "<= 1.2x",
                "value": ratio("attach", "zram", "untar_s"), "goal": 1.2, "higher": False})
# Issue 25's targets, for the path it added (FUSE over io_uring).
for rw, goal in (("randread", 0.5), ("randwrite", 0.7)):
    targets.append({"what": "fio 4 KiB %s: uzram attach over io_uring / kernel zram" % rw,
                    "target": ">= %.1fx" % goal, "value": ratio("attach-uring", "zram", rw + "_iops"),
                    "goal": goal, "higher": True})
for rw in ("randwrite", "randread"):
    targets.append({"what": "fio 4 KiB %s: uzram attach over io_uring / over /dev/fuse" % rw,
                    "target": "> 1x", "value": ratio("attach-uring", "attach", rw + "_iops"),
                    "goal": 1.0, "higher": True})
for t in targets:
    t["met"] = None if t["value"] is None else (t["value"] >= t["goal"] if t["higher"] else t["value"] <= t["goal"])
result["targets"] = targets
json.dump(result, open(os.path.join(out, "attach.json"), "w"), indent=1)
EOF
"$PY" bench/report.py "$OUT" --part attach ${DOC:+--doc "$DOC"} || exit 1
