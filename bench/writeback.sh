#!/bin/bash
# writeback.sh - writeback benchmark (issue 13): the build image of the recompression benchmark
# written to a device with a backing file: the disk space the written-back pages take against
# their raw size (lz4, lz4 + dedup, and recompressed to zstd before going out; and as writes
# past mem_limit leave it with --writeback-when-full); then random 4 KiB reads over a working
# set of 4x mem_limit (some pages in memory, some on disk) and of 16x (most on disk; also with
# serve's default --threads), against
# nbdkit's file plugin serving the same bytes from a file on the same disk, rounds interleaved.
# The working set is the image's pages that are not same-filled (SET bytes of them).
#
# Usage: bench/writeback.sh [--quick] [--out DIR]
#   --quick   a small image and working set (64 MiB), 1 round of 3 s
#   --out DIR results folder (default build/bench-results); writes DIR/writeback.json
# Environment (optional): UZRAM (default build/uzram), IMAGE (an image to use instead of
# building bench/image.bash's), KERNEL (1: the Linux tree in the image, as bench/recompress.sh;
# default 1, quick 0), CACHE (where the kernel tree is kept, build/bench-cache), SET (working
# set, 512M; quick 64M), ROUNDS (3; quick 1), RUNTIME (seconds per fio run, 10; quick 3),
# STEPS ("space reads": run only some; a step run alone keeps the other's results, so the space
# step, which needs no quiet machine, may run beside other work and only the reads alone),
# SPACE_SIDES (the space step's sides, "lz4 lz4-dedup recompressed when-full"),
# KEEP_IMAGE (a path: keep the image built there, with PATH.desc, for IMAGE= in a later run),
# THREADS (uzram serve --threads for the read sides, 16: nbdkit's default; a read of a page on
# disk waits for the disk, so as many reads as fio keeps in flight must be able to wait at once,
# as nbdkit's 16 threads do).
#
# Caches: uzram reads and writes its backing file with O_DIRECT (the default: written-back
# pages must not come back into memory as page cache); nbdkit serves its file with cache=none,
# which drops what each read brought into the page cache (posix_fadvise DONTNEED; the working set
# file is synced and dropped from the cache before nbdkit starts), and
# fadvise=random. So on both sides every read of a page on disk goes to the disk.
set -u
cd "$(dirname "$0")/.." || exit 2

# shellcheck source=bench/common.bash
. bench/common.bash
if [ "$QUICK" = 1 ]; then
    ROUNDS=${ROUNDS:-1}
    RUNTIME=${RUNTIME:-3}
    KERNEL=${KERNEL:-0}
    SET=${SET:-64M}
else
    ROUNDS=${ROUNDS:-3}
    RUNTIME=${RUNTIME:-10}
    KERNEL=${KERNEL:-1}
    SET=${SET:-512M}
fi
STEPS=${STEPS:-space reads}
THREADS=${THREADS:-16}
step() { [[ " $STEPS " == *" $1 "* ]]; }

die() { echo "writeback.sh: $*" >&2; exit 2; }
[ -x "$UZRAM" ] || die "no uzram binary at $UZRAM (run 'make programs' or set UZRAM)"
UZRAM=$(realpath "$UZRAM")
for tool in nbdcopy mkfs.ext4 fio nbdkit qemu-nbd; do
    command -v $tool >/dev/null || die "$tool is not installed (scripts/deps.sh installs it)"
done
fio --enghelp=nbd >/dev/null 2>&1 || die "this fio has no nbd engine"

mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(realpath "$OUT")
RES=$OUT/writeback
mkdir -p "$RES"
# A step run alone (STEPS) keeps the other step's results: the report puts both together.
rm -f "$RES"/image.* "$RES"/skipped
SPACE_SIDES=${SPACE_SIDES:-lz4 lz4-dedup recompressed when-full}
if step space; then for side in $SPACE_SIDES; do rm -f "$RES/space-$side.json"; done; fi
step reads && rm -f "$RES"/reads-* "$RES"/set.bytes
# The backing files and nbdkit's file live here: one disk for both sides.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-writeback.XXXXXX") || die "mktemp failed"
CACHE=${CACHE:-$(realpath -m build/bench-cache)}
declare -A PIDS=()
export XDG_RUNTIME_DIR=$WORK/run
mkdir -p "$XDG_RUNTIME_DIR"

cleanup() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

IMAGE_FOR=writeback.sh
# shellcheck source=bench/image.bash
. bench/image.bash

# ---- servers ---------------------------------------------------------------------------------
sock() { echo "$XDG_RUNTIME_DIR/uzram/$1.sock"; }
uri() { echo "nbd+unix:///?socket=$(sock "$1")"; }
serve() { # NAME SIZE OPTIONS...
    local name=$1 size=$2
    shift 2
    "$UZRAM" serve -q -n "$name" -s "$size" "$@" >"$WORK/$name.log" 2>&1 &
    PIDS[$name]=$!
    for _ in $(seq 100); do
        [ -S "$(sock "$name")" ] && [ -S "$XDG_RUNTIME_DIR/uzram/$name.ctl" ] && return 0
        kill -0 "${PIDS[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    die "server $name did not start: $(tail -1 "$WORK/$name.log")"
}
nbdkit_file() { # NAME FILE
    mkdir -p "$XDG_RUNTIME_DIR/uzram"
    nbdkit -f --unix "$(sock "$1")" file "$2" cache=none fadvise=random >"$WORK/$1.log" 2>&1 &
    PIDS[$1]=$!
    for _ in $(seq 100); do
        [ -S "$(sock "$1")" ] && return 0
        sleep 0.1
    done
    die "nbdkit did not start: $(tail -1 "$WORK/$1.log")"
}
# qemu-nbd with O_DIRECT (cache=none), as uzram reads its backing file: the reference that
# bypasses the page cache the same way, beside nbdkit (whose cache=none only drops pages after
# they were read, which this kernel does not always do: its read_bytes per read shows it).
qemu_file() { # NAME FILE
    mkdir -p "$XDG_RUNTIME_DIR/uzram"
    qemu-nbd -f raw --cache=none --aio=native --persistent -k "$(sock "$1")" "$2" >"$WORK/$1.log" 2>&1 &
    PIDS[$1]=$!
    for _ in $(seq 100); do
        [ -S "$(sock "$1")" ] && return 0
        sleep 0.1
    done
    die "qemu-nbd did not start: $(tail -1 "$WORK/$1.log")"
}
stop() {
    kill "${PIDS[$1]}" 2>/dev/null
    wait "${PIDS[$1]}" 2>/dev/null
    unset "PIDS[$1]"
}
attr() { "$UZRAM" attr "$@"; }
json() { attr "$1" stat_json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"; }
allocated() { echo $(($(stat -c %b "$1") * $(stat -c %B "$1"))); }

# Wait until the writeback thread has brought the pool under its mark: bd_writes unchanged for
# a second. At most 60 s.
quiet_down() { # NAME
    local last="" now
    for _ in $(seq 60); do
        now=$(json "$1" bd_writes)
        [ "$now" = "$last" ] && return 0
        last=$now
        sleep 1
    done
}

# Wait until the recompression thread has nothing left to do: recomp_pages and mem_used_total
# unchanged for 2 s. At most 10 minutes.
settle() { # NAME
    local last="" now
    for _ in $(seq 600); do
        sleep 1
        now="$(json "$1" recomp_pages) $(json "$1" mem_used_total)"
        if [ "$now" = "$last" ]; then
            sleep 2
            [ "$now" = "$(json "$1" recomp_pages) $(json "$1" mem_used_total)" ] && return 0
        fi
        last=$now
    done
    echo "writeback.sh: warning: $1 still recompressing after 10 minutes" >&2
}

# ---- space: what the written-back pages take on disk -------------------------------------------
# space SIDE: store the image, write back every page (or, when-full, as writes past mem_limit
# leave it), give back what is free, record stat_json and the file's allocated bytes.
space() {
    local side=$1 size limit store=$WORK/store-$1 pages
    size=$(stat -c %s "$WORK/image")
    limit=$((size / 16 / 4096 * 4096))
    case $side in
    lz4) serve s "$size" -a lz4 --backing-file "$store" ;;
    lz4-dedup) serve s "$size" -a lz4 -d --backing-file "$store" ;;
    recompressed)
        # the background thread, as bench/recompress.sh (a recompress attribute over the whole
        # image would outlast the control socket's 5 s deadline)
        serve s "$size" -a lz4 -d --backing-file "$store" --recompress-idle 1 \
            --recompress algo=zstd,level=7
        attr s recompress_rate 0
        ;;
    when-full) serve s "$size" -a lz4 -m "$limit" --backing-file "$store" --writeback-when-full ;;
    esac
    local start end
    start=$(date +%s%N)
    nbdcopy --no-extents -S 0 "$WORK/image" "$(uri s)" || die "nbdcopy into $side failed"
    pages=$((size / 4096))
    case $side in
    recompressed) settle s ;;
    when-full) quiet_down s ;;
    esac
    [ "$side" = when-full ] || attr s writeback "page_indexes=0-$((pages - 1))"
    end=$(date +%s%N)
    attr s compact 1
    attr s stat_json | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
d["file_allocated"], d["seconds"] = int(sys.argv[1]), float(sys.argv[2])
print(json.dumps(d))' "$(allocated "$store")" "$(((end - start) / 1000000))e-3" >"$RES/space-$side.json"
    stop s
}

# ---- reads: random 4 KiB over the working set, uzram against nbdkit file ------------------------
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Bytes the process had read from the disk (not the page cache): both sides must show a read of
# a page on disk going to the disk.
disk_read() { awk '$1 == "read_bytes:" {print $2}' "/proc/$1/io"; }
run_fio() { # SIDE OUTPUT
    fio --output-format=json --output="$2" --name=reads --ioengine=nbd --uri="$(uri "$1")" \
        --bs=4k --size="$SET_BYTES" --rw=randread --iodepth=16 --time_based --runtime="$RUNTIME" \
        >"$WORK/fio.log" 2>&1 || { cat "$WORK/fio.log" >&2; die "fio on $1 failed"; }
}

reads() {
    SET_BYTES=$(numfmt --from=iec "$SET")
    # The working set: the image's pages that are not same-filled (those stay in memory, and
    # would be read from there whatever mem_limit is), in order, up to SET bytes.
    SET_BYTES=$("$PY" - "$WORK/image" "$WORK/set.img" "$SET_BYTES" <<'PYEOF'
import sys
src, dst, limit = open(sys.argv[1], "rb"), open(sys.argv[2], "wb"), int(sys.argv[3])
n = 0
while n < limit:
    page = src.read(4096)
    if len(page) < 4096:
        break
    if page != page[:8] * 512:
        dst.write(page)
        n += 4096
print(n)
PYEOF
) || die "cannot write the working set"
    echo "$SET_BYTES" >"$RES/set.bytes"
    # Written just now, its pages are in the page cache (dirty: cache=none could not drop them):
    # out to the disk and out of the cache, so that nbdkit's reads go to the disk from the start.
    "$PY" -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$WORK/set.img" || die "cannot drop the working set from the page cache"
    nbdkit_file nbdkit "$WORK/set.img"
    qemu_file qemu "$WORK/set.img"
    # 4x: mem_limit a quarter of the working set; 16x: a sixteenth (most pages on disk)
    # x16t: x16 with serve's default --threads (as many workers a connection as CPUs)
    local side x threads
    for side in x4 x16 x16t; do
        x=${side#x}
        x=${x%t}
        threads=(--threads "$THREADS")
        [ "$side" = x16t ] && threads=()
        serve "$side" "$SET_BYTES" -a lz4 -m $((SET_BYTES / x)) --backing-file "$WORK/store-$side" \
            "${threads[@]}" --writeback-when-full
        nbdcopy --no-extents -S 0 "$WORK/set.img" "$(uri "$side")" || die "nbdcopy into $side failed"
        quiet_down "$side"
        attr "$side" stat_json >"$RES/reads-$side-stored.json"
    done
    for round in $(seq "$ROUNDS"); do
        # rotate the order every round, so that no side always runs first
        local sides=(nbdkit qemu x4 x16 x16t)
        local shift_by=$(((round - 1) % 5))
        local order=("${sides[@]:shift_by}" "${sides[@]:0:shift_by}")
        for side in "${order[@]}"; do
            local before bd_before=0 io_before
            before=$(cpu_ticks "${PIDS[$side]}")
            io_before=$(disk_read "${PIDS[$side]}")
            [[ $side == x* ]] && bd_before=$(json "$side" bd_reads)
            run_fio "$side" "$RES/reads-$side-$round.json"
            echo "$(($(cpu_ticks "${PIDS[$side]}") - before))" >"$RES/reads-$side-$round.cpu"
            echo "$(($(disk_read "${PIDS[$side]}") - io_before))" >"$RES/reads-$side-$round.io"
            [[ $side != x* ]] ||
                echo "$(($(json "$side" bd_reads) - bd_before))" >"$RES/reads-$side-$round.bd"
        done
        echo "  round $round of $ROUNDS done" >&2
    done
    for side in x4 x16 x16t; do
        attr "$side" stat_json >"$RES/reads-$side-after.json"
        stop "$side"
    done
    stop nbdkit
    stop qemu
}

START=$(date +%s)
# What each step ran, on which commit, and the load: a step run alone keeps the other's
# results, so each names its own (STEP.run: git, command, load at its end).
GIT=$(git describe --always --dirty 2>/dev/null || echo unknown)
# KERNEL only shapes an image built here: with IMAGE= given it changes nothing, so it is left
# out of the command rather than recorded as if it had chosen the image.
COMMAND="$(for v in ROUNDS RUNTIME KERNEL SET STEPS SPACE_SIDES THREADS IMAGE KEEP_IMAGE; do
    [ "$v" = KERNEL ] && [ -n "${IMAGE:-}" ] && continue
    [ -n "${!v:-}" ] && printf '%s=%q ' "$v" "${!v}"; done)bench/writeback.sh$([ "$QUICK" = 1 ] && echo " --quick")"
ran() { printf '%s\n%s\n%s\n' "$GIT" "$COMMAND" "$(cut -d' ' -f1-3 /proc/loadavg)" >"$RES/$1.run"; }
echo "writeback: working set $SET, $ROUNDS rounds of ${RUNTIME}s; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
if why=$(get_image); then
    echo "  image: $(($(stat -c %s "$WORK/image") >> 20)) MiB, $(cat "$RES/image.desc")"
    stat -c %s "$WORK/image" >"$RES/image.bytes"
    if step space; then
        for side in $SPACE_SIDES; do
            space "$side"
            echo "  space $side: $(cut -c1-120 "$RES/space-$side.json")..." >&2
        done
        ran space
    fi
    step reads && reads && ran reads
else
    echo "${why:-the image could not be built}" >"$RES/skipped"
    echo "  skipped: $(cat "$RES/skipped")"
fi
END=$(date +%s)

"$PY" - "$RES" "$OUT/writeback.json" "$ROUNDS" "$RUNTIME" "$((END - START))" "$QUICK" "$(getconf CLK_TCK)" <<'EOF'
import glob, json, os, statistics, sys
res, out, rounds, runtime, seconds, quick, ticks = sys.argv[1:8]
rounds, ticks = int(rounds), int(ticks)
doc = {"rounds": rounds, "runtime": int(runtime), "seconds": int(seconds), "quick": quick == "1"}
def load(name):
    path = os.path.join(res, name)
    return json.load(open(path)) if os.path.exists(path) else None
doc["runs"] = {}
for step in ("space", "reads"):
    path = os.path.join(res, step + ".run")
    if os.path.exists(path):
        git, command, load_at_end = open(path).read().split("\n")[:3]
        doc["runs"][step] = {"git": git, "command": command, "load_at_end": load_at_end}
if os.path.exists(os.path.join(res, "skipped")):
    doc["skipped"] = open(os.path.join(res, "skipped")).read().strip()
else:
    doc["image"] = open(os.path.join(res, "image.desc")).read().strip()
    doc["image_bytes"] = int(open(os.path.join(res, "image.bytes")).read())
    doc["space"] = {}
    for side in ("lz4", "lz4-dedup", "recompressed", "when-full"):
        s = load("space-%s.json" % side)
        if s is None:
            continue
        # raw: the bytes of the pages on disk as the client wrote them; without dedup one page
        # per object (with dedup, the pages that are not same-filled, all written back)
        raw = s["bd_objects"] * 4096 if side == "when-full" else (s["pages_stored"] - s["same_pages"]) * 4096
        doc["space"][side] = {
            "raw_bytes": raw, "file_allocated": s["file_allocated"], "bd_count": s["bd_count"],
            "bd_data_size": s["bd_data_size"], "bd_objects": s["bd_objects"],
            "pages_stored": s["pages_stored"], "same_pages": s["same_pages"],
            "compr_data_size": s["compr_data_size"], "mem_used_total": s["mem_used_total"],
            "failed_writes": s["failed_writes"], "recomp_pages": s.get("recomp_pages", 0),
            "seconds": s["seconds"]}
    if os.path.exists(os.path.join(res, "set.bytes")):
        doc["set_bytes"] = int(open(os.path.join(res, "set.bytes")).read())
        doc["reads"] = {}
        for side in ("nbdkit", "qemu", "x4", "x16", "x16t"):
            runs = []
            for r in range(1, rounds + 1):
                job = json.load(open(os.path.join(res, "reads-%s-%d.json" % (side, r))))["jobs"][0]
                ios = job["read"]["total_ios"]
                cpu = int(open(os.path.join(res, "reads-%s-%d.cpu" % (side, r))).read())
                disk = int(open(os.path.join(res, "reads-%s-%d.io" % (side, r))).read())
                run = {"iops": job["read"]["iops"], "ios": ios,
                       "server_cpu_us": cpu / ticks * 1e6 / max(ios, 1),
                       "disk_bytes_per_read": disk / max(ios, 1)}
                bd = os.path.join(res, "reads-%s-%d.bd" % (side, r))
                if os.path.exists(bd):
                    run["from_disk"] = int(open(bd).read()) / max(ios, 1)
                runs.append(run)
            entry = {"runs": runs, "iops": statistics.median(r["iops"] for r in runs),
                     "server_cpu_us": statistics.median(r["server_cpu_us"] for r in runs),
                     "disk_bytes_per_read": statistics.median(r["disk_bytes_per_read"] for r in runs)}
            if side.startswith("x"):
                entry["from_disk"] = statistics.median(r["from_disk"] for r in runs)
                stored = load("reads-%s-stored.json" % side)
                after = load("reads-%s-after.json" % side)
                entry["mem_limit"] = stored["mem_limit"]
                entry["mem_used_total"] = stored["mem_used_total"]
                entry["bd_objects"] = stored["bd_objects"]
                entry["errors"] = after["failed_writes"] + after["failed_reads"]
            doc["reads"][side] = entry
json.dump(doc, open(out, "w"), indent=1)
EOF
echo "writeback: done in $((END - START)) s; $OUT/writeback.json"
