#!/bin/bash
# recompress.sh - recompression benchmark (issues 12, 27): build output in an ext4 image, stored
# by kernel zram lz4 and by uzram lz4 + dedup with background recompression to zstd (without and
# with a trained dictionary, and with the dictionary and bundles of GROUP pages), against zstd +
# dedup written directly; then foreground fio 4 KiB randwrite over NBD with the background thread
# idle and busy (recompressing with the dictionary and bundles), and reads of recompressed pages.
#
# Usage: bench/recompress.sh [--quick] [--out DIR]
#   --quick   a small image (/usr/include/linux and this project's build), 1 round of 3 s
#   --out DIR results folder (default build/bench-results); writes DIR/recompress.json
# Environment (optional): UZRAM (default build/uzram), LEVEL (zstd level of recompression and of
# the direct zstd side, default 7), DICT_SIZE (default 64K), ROUNDS (3; quick 1), RUNTIME (fio
# seconds per run, 10; quick 3), KERNEL (1: add a Linux tinyconfig build tree when the
# linux-source-6.1 package is installed; default 1, quick 0), SWEEP ("3 5 7 9" zstd levels at
# DICT_SIZE and, at LEVEL, the dictionary sizes of DICT_SWEEP "32K 64K 112K", projected by
# `uzram estimate -r` on the same image: how LEVEL and DICT_SIZE were chosen; quick: none),
# GROUP (pages a bundle packs, `group=`, in the bundled memory side and the throughput part;
# default 8), RATE (recompress_rate of the throughput part; default: the library's), RATES (several
# recompress_rate values: each round then has one busy run at each, beside its idle run; how the
# default was chosen), NORMAL (1, the default: each round also has a busy run with the thread at
# the normal CPU priority and without its CPU budget (recompress_cpu 100), at the library's rate or
# RATE: what the foreground pays when the thread gets all it wants; 0: none), STEPS ("memory throughput
# sweep": run only some), SIDES (the memory part's sides, default all: zram lz4-dedup zstd-dedup
# recompress recompress-dict recompress-dict-group), ZRAM (zram0), IMAGE (an
# image to use instead of building bench/image.bash's), KEEP_IMAGE (a path: keep the image there,
# with PATH.desc, for IMAGE= in a later run or in bench/writeback.sh), FULL_SPEED (1, the
# default: the memory part lifts the thread's CPU budget, recompress_cpu 100, and rate; 0: it
# keeps the library's budget and rate, as users run it, and takes minutes longer to settle), SPIN
# (N processes spinning at nice 0 through the throughput part, the other work of a busy machine:
# SPIN=$(nproc) measures what the thread costs the foreground when every CPU is taken; default 0).
#
# The image ("build-tree"): /usr/include, this project's sources with three builds of them
# (-O2, ASan+UBSan, -O0 -g), and, with KERNEL=1, the Linux 6.1 source tree with a tinyconfig
# vmlinux build in it (cached in build/bench-cache/ between runs) - a developer's disk during a
# build, the kind of data the dedup seed measured.
set -u
cd "$(dirname "$0")/.." || exit 2

# shellcheck source=bench/common.bash
. bench/common.bash
LEVEL=${LEVEL:-7}
DICT_SIZE=${DICT_SIZE:-64K}
GROUP=${GROUP:-8}
if [ "$QUICK" = 1 ]; then
    ROUNDS=${ROUNDS:-1}
    RUNTIME=${RUNTIME:-3}
    KERNEL=${KERNEL:-0}
    SWEEP=${SWEEP:-}
    DICT_SWEEP=${DICT_SWEEP:-}
else
    ROUNDS=${ROUNDS:-3}
    RUNTIME=${RUNTIME:-10}
    KERNEL=${KERNEL:-1}
    SWEEP=${SWEEP:-3 5 7 9}
    DICT_SWEEP=${DICT_SWEEP:-32K 64K 112K}
fi
FIO_REGION=256M
STEPS=${STEPS:-memory throughput sweep}
RATE=${RATE:-}
RATES=${RATES:-}
NORMAL=${NORMAL:-1}
FULL_SPEED=${FULL_SPEED:-1}
SPIN=${SPIN:-0}
step() { [[ " $STEPS " == *" $1 "* ]]; }

die() { echo "recompress.sh: $*" >&2; exit 2; }
[ -x "$UZRAM" ] || die "no uzram binary at $UZRAM (run 'make programs' or set UZRAM)"
UZRAM=$(realpath "$UZRAM")
for tool in nbdcopy mkfs.ext4 fio; do
    command -v $tool >/dev/null || die "$tool is not installed (scripts/deps.sh installs it)"
done
fio --enghelp=nbd >/dev/null 2>&1 || die "this fio has no nbd engine"

mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(realpath "$OUT")
RES=$OUT/recompress
rm -rf "$RES"
mkdir -p "$RES"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/uzram-recompress.XXXXXX") || die "mktemp failed"
CACHE=$(realpath -m build/bench-cache)
SERVER_PID=
SPIN_PIDS=()
ZRAM_TOUCHED=0
export XDG_RUNTIME_DIR=$WORK/run
mkdir -p "$XDG_RUNTIME_DIR"

cleanup() {
    spin_stop
    [ -n "$SERVER_PID" ] && { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; }
    [ "$ZRAM_TOUCHED" = 1 ] && { echo 1 > "$ZSYS/reset" 2>/dev/null || echo "recompress.sh: could not reset $ZDEV" >&2; }
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the image (bench/image.bash: the writeback benchmark uses it too) ------------------------
IMAGE_FOR=recompress.sh
# shellcheck source=bench/image.bash
. bench/image.bash

# ---- servers and measurements ------------------------------------------------------------------
wait_sockets() { # NAME
    for _ in $(seq 100); do
        [ -S "$XDG_RUNTIME_DIR/uzram/$1.sock" ] && [ -S "$XDG_RUNTIME_DIR/uzram/$1.ctl" ] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
serve() { # NAME SIZE OPTIONS...
    local name=$1 size=$2
    shift 2
    "$UZRAM" serve -q -n "$name" -s "$size" "$@" >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    wait_sockets "$name" || die "server $name did not start: $(tail -1 "$WORK/server.log")"
}
stop() {
    kill "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    SERVER_PID=
}
attr() { "$UZRAM" attr "$@"; }
uri() { echo "nbd+unix:///?socket=$XDG_RUNTIME_DIR/uzram/$1.sock"; }
json_field() { attr "$1" stat_json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"; }

# Wait until the background thread has nothing left to do (bench/common.bash), at most 10 minutes.
settle() { # NAME
    recomp_settle 600 "$1" || echo "recompress.sh: warning: $1 still recompressing after 10 minutes" >&2
}


# memory SIDE: store the image, then record stat_json (and seconds to store / to settle).
memory() {
    local side=$1 size start mid end
    size=$(stat -c %s "$WORK/image")
    case $side in
    zram)
        ZRAM_TOUCHED=1
        echo 1 > "$ZSYS/reset" && echo lz4 > "$ZSYS/comp_algorithm" && echo "$size" > "$ZSYS/disksize" ||
            { echo '{"failed": "cannot configure '"$ZDEV"'"}' >"$RES/$side.json"; return; }
        dd if="$WORK/image" of="$ZDEV" bs=1M oflag=direct status=none
        read -r -a f < "$ZSYS/mm_stat"
        echo "{\"mem_used_total\": ${f[2]}, \"compr_data_size\": ${f[1]}, \"orig_data_size\": ${f[0]}}" >"$RES/$side.json"
        echo 1 > "$ZSYS/reset"
        return
        ;;
    lz4-dedup) serve m "$size" -a lz4 -d ;;
    zstd-dedup) serve m "$size" -a zstd -l "$LEVEL" -d ;;
    recompress) serve m "$size" -a lz4 -d --recompress-idle 1 --recompress "algo=zstd,level=$LEVEL" ;;
    recompress-dict | recompress-dict-group)
        local spec="algo=zstd,level=$LEVEL,dict=auto"
        [ "$side" = recompress-dict-group ] && spec+=",group=$GROUP"
        serve m "$size" -a lz4 -d --recompress-idle 1 --recompress "$spec"
        attr m algorithm_params "priority=1 level=$LEVEL dict=auto dict_size=$(numfmt --from=iec "$DICT_SIZE")"
        ;;
    esac
    # memory only: the thread may go as fast as it can (the throughput part keeps the default rate)
    if [ "$FULL_SPEED" = 1 ]; then
        case $side in recompress*) attr m recompress_rate 0; recomp_thread_full_speed "$SERVER_PID" m ;; esac
    fi
    start=$(date +%s%N)
    nbdcopy --no-extents -S 0 "$WORK/image" "$(uri m)" || die "nbdcopy into $side failed"
    mid=$(date +%s%N)
    case $side in recompress*) settle m ;; esac
    end=$(date +%s%N)
    # what the thread left by itself, and then what compaction gives back on top
    attr m stat_json >"$WORK/before-compact.json"
    attr m compact 1
    { attr m stat_json | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
d["store_seconds"], d["settle_seconds"] = float(sys.argv[1]), float(sys.argv[2])
before = json.load(open(sys.argv[3]))
d["before_compact"] = {k: before[k] for k in ("mem_used_total", "meta_data_size", "dict_mem")}
print(json.dumps(d))' "$(((mid - start) / 1000000))e-3" "$(((end - mid) / 1000000))e-3" \
        "$WORK/before-compact.json"; } >"$RES/$side.json"
    stop
}

# ---- throughput: foreground randwrite with the thread idle and busy; reads of each form ----------
# The other work of a busy machine: SPIN shell loops at nice 0, for the throughput part only.
spin_start() {
    for _ in $(seq "$SPIN"); do
        (while :; do :; done) &
        SPIN_PIDS+=($!)
    done
}
spin_stop() {
    [ ${#SPIN_PIDS[@]} -gt 0 ] || return 0
    kill "${SPIN_PIDS[@]}" 2>/dev/null
    wait "${SPIN_PIDS[@]}" 2>/dev/null
    SPIN_PIDS=()
}
# recomp_ticks: CPU clock ticks (user + system) the server's recompression thread has used; 0
# while it has none (recompress_idle 0 ends it).
recomp_ticks() {
    local task f ticks=0
    for task in /proc/"$SERVER_PID"/task/*; do
        [ "$(cat "$task/comm" 2>/dev/null)" = uzram-recomp ] || continue
        read -r -a f < <(sed 's/^.*) //' "$task/stat" 2>/dev/null) || continue
        ticks=$((ticks + f[11] + f[12])) # utime, stime: fields 14 and 15 of stat
    done
    echo "$ticks"
}

run_fio() { # OUTPUT OFFSET SIZE RW
    fio --output-format=json --output="$1" --name=fg --ioengine=nbd --uri="$(uri t)" \
        --bs=4k --offset="$2" --size="$3" --rw="$4" --iodepth=16 --time_based --runtime="$RUNTIME" \
        --buffer_compress_percentage=50 --refill_buffers >"$WORK/fio.log" 2>&1 ||
        { cat "$WORK/fio.log" >&2; die "fio $4 failed"; }
}

throughput() {
    local size image_bytes region_offset rates state rate ticks
    image_bytes=$(stat -c %s "$WORK/image")
    region_offset=$(((image_bytes + 1048575) / 1048576 * 1048576))
    size=$((region_offset + $(numfmt --from=iec "$FIO_REGION")))
    serve t "$size" -a lz4 -d --recompress "algo=zstd,level=$LEVEL,dict=auto,group=$GROUP"
    attr t recompress_rate >"$RES/rate" # the library's default
    [ -n "$RATE" ] && attr t recompress_rate "$RATE"
    rates=${RATES:-$(attr t recompress_rate)}
    echo "$rates" >"$RES/rates"
    local normal=
    [ "$NORMAL" = 1 ] && normal=busy-normal-$(attr t recompress_rate)
    run_fio "$WORK/warm.json" "$region_offset" "$FIO_REGION" write
    spin_start
    for round in $(seq "$ROUNDS"); do
        for state in idle $(printf 'busy-%s ' $rates) $normal; do
            # the image in lz4 form again: the thread has all of it to do
            attr t recompress_idle 0
            nbdcopy --no-extents -S 0 "$WORK/image" "$(uri t)" || die "nbdcopy failed"
            [ "$round" = 1 ] && [ "$state" = idle ] &&
                run_fio "$RES/read-lz4.json" 0 "$image_bytes" randread
            sleep 1.1 # so every page is unused for a second
            if [ "$state" != idle ]; then
                rate=${state##*-}
                attr t recompress_rate "$rate"
                attr t recompress_idle 1 # a new thread, within its CPU budget
                [ "$state" = "$normal" ] && recomp_thread_full_speed "$SERVER_PID" t
            fi
            # the thread's work during the run: pages recompressed, and pages bundled (with
            # GROUP, most of its work, which recomp_pages does not count)
            before=$(($(json_field t recomp_pages) + $(json_field t bundled_pages)))
            ticks=$(recomp_ticks)
            run_fio "$RES/randwrite-$state-$round.json" "$region_offset" "$FIO_REGION" randwrite
            echo "$(($(recomp_ticks) - ticks))" >"$RES/randwrite-$state-$round.ticks"
            echo "$(($(json_field t recomp_pages) + $(json_field t bundled_pages) - before))" \
                >"$RES/randwrite-$state-$round.recompressed"
        done
        echo "  round $round of $ROUNDS done" >&2
    done
    spin_stop
    # reads of recompressed pages: let the thread finish, then read the image region. It may go
    # as fast as it can (as in the memory part): what is measured next is reading the pages it
    # recompressed, not how fast it got there, and at the busy runs' rate it would also spend
    # minutes on the fio region's pages.
    attr t recompress_rate 0
    recomp_thread_full_speed "$SERVER_PID" t
    settle t
    attr t recompress_idle 0
    run_fio "$RES/read-recompressed.json" 0 "$image_bytes" randread
    stop
}

START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
GIT=$(git describe --always --dirty 2>/dev/null || echo unknown) # what was built and run
echo "recompress: zstd level $LEVEL, dictionary $DICT_SIZE, $ROUNDS rounds of ${RUNTIME}s; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
if why=$(get_image); then
    echo "  image: $(($(stat -c %s "$WORK/image") >> 20)) MiB, $(cat "$RES/image.desc")"
    stat -c %s "$WORK/image" >"$RES/image.bytes"
    for side in zram lz4-dedup zstd-dedup recompress recompress-dict recompress-dict-group; do
        step memory || { echo '{"skipped": "not in STEPS"}' >"$RES/$side.json"; continue; }
        [[ " ${SIDES:-$side} " == *" $side "* ]] ||
            { echo '{"skipped": "not in SIDES"}' >"$RES/$side.json"; continue; }
        if [ "$side" = zram ] && { [ ! -b "$ZDEV" ] || [ "$(cat "$ZSYS/initstate" 2>/dev/null)" != 0 ]; }; then
            echo '{"skipped": "'"$ZDEV"' missing or in use"}' >"$RES/$side.json"
            continue
        fi
        memory "$side"
        echo "  $side: $(cut -c1-150 "$RES/$side.json")" >&2
    done
    step throughput && throughput
    step sweep || SWEEP= DICT_SWEEP=
    # the choice of level and dictionary size: uzram estimate's projection of each
    for level in $SWEEP; do
        "$UZRAM" estimate -q --json -r "zstd:$level" --dict-size "$DICT_SIZE" --hot 0 "$WORK/image" \
            >"$RES/sweep-$level-$DICT_SIZE.json" || rm -f "$RES/sweep-$level-$DICT_SIZE.json"
    done
    for dict in $DICT_SWEEP; do
        [ "$dict" = "$DICT_SIZE" ] && [[ " $SWEEP " == *" $LEVEL "* ]] && continue
        "$UZRAM" estimate -q --json -r "zstd:$LEVEL" --dict-size "$dict" --hot 0 "$WORK/image" \
            >"$RES/sweep-$LEVEL-$dict.json" || rm -f "$RES/sweep-$LEVEL-$dict.json"
    done
else
    echo "${why:-the image could not be built}" >"$RES/skipped"
    echo "  skipped: $(cat "$RES/skipped")"
fi
END=$(date +%s)

# What was run, on which commit (GIT, at the start): the results section names them.
COMMAND="$(for v in ROUNDS RUNTIME KERNEL RATE RATES SPIN STEPS SIDES SWEEP DICT_SWEEP LEVEL DICT_SIZE GROUP IMAGE KEEP_IMAGE; do
    [ -n "${!v:-}" ] && printf '%s=%q ' "$v" "${!v}"; done)bench/recompress.sh$([ "$QUICK" = 1 ] && echo " --quick")"
"$PY" - "$RES" "$OUT/recompress.json" "$LEVEL" "$DICT_SIZE" "$ROUNDS" "$RUNTIME" "$((END - START))" "$QUICK" \
    "$GIT" "$COMMAND" "$(cut -d' ' -f1-3 /proc/loadavg)" "$LOAD_START" "$GROUP" "$SPIN" \
    "$(getconf CLK_TCK)" <<'EOF'
import glob, json, os, statistics, sys
res, out, level, dict_size, rounds, runtime, seconds, quick, git, command, load, load_start, \
    group, spin, clk_tck = sys.argv[1:16]
doc = {"level": int(level), "dict_size": dict_size, "rounds": int(rounds), "runtime": int(runtime),
       "seconds": int(seconds), "quick": quick == "1", "git": git, "command": command,
       "load_at_end": load, "load_at_start": load_start, "group": int(group), "spinners": int(spin),
       "nproc": os.cpu_count()}
if os.path.exists(os.path.join(res, "skipped")):
    doc["skipped"] = open(os.path.join(res, "skipped")).read().strip()
else:
    doc["image"] = open(os.path.join(res, "image.desc")).read().strip()
    doc["image_bytes"] = int(open(os.path.join(res, "image.bytes")).read())
    doc["sides"] = {}
    for side in ("zram", "lz4-dedup", "zstd-dedup", "recompress", "recompress-dict",
                 "recompress-dict-group"):
        doc["sides"][side] = json.load(open(os.path.join(res, side + ".json")))
    def iops(path):
        job = json.load(open(path))["jobs"][0]
        return job["write"]["iops"] if job["write"]["iops"] else job["read"]["iops"]
    if os.path.exists(os.path.join(res, "rate")):
        doc["rate"] = int(open(os.path.join(res, "rate")).read())
    rates = [int(r) for r in open(os.path.join(res, "rates")).read().split()] \
        if os.path.exists(os.path.join(res, "rates")) else []
    def runs_of(state):
        runs = sorted(glob.glob(os.path.join(res, "randwrite-%s-[0-9]*.json" % state)))
        return ([iops(p) for p in runs],
                [int(open(p.replace(".json", ".recompressed")).read()) for p in runs])
    doc["randwrite_idle"], doc["recompressed_during_idle"] = runs_of("idle")
    # per state, run by run: the thread's share of one CPU, and the foreground's 99th percentile
    # completion latency in microseconds
    doc["runs"] = {}
    for path in sorted(glob.glob(os.path.join(res, "randwrite-*-[0-9]*.json"))):
        state = os.path.basename(path)[len("randwrite-"):-len(".json")].rsplit("-", 1)[0]
        r = doc["runs"].setdefault(state, {"thread_cpu": [], "clat_p99_us": []})
        ticks = path.replace(".json", ".ticks")
        if os.path.exists(ticks):
            r["thread_cpu"].append(int(open(ticks).read()) / int(clk_tck) / int(runtime))
        clat = json.load(open(path))["jobs"][0]["write"]["clat_ns"]
        r["clat_p99_us"].append(clat["percentile"]["99.000000"] / 1000)
    doc["rates"] = rates
    doc["by_rate"] = {}
    for rate in rates:
        busy, done = runs_of("busy-%d" % rate)
        if busy and doc["randwrite_idle"]:
            doc["by_rate"][str(rate)] = {
                "randwrite_busy": busy, "recompressed_during_busy": done,
                "busy_vs_idle": statistics.median(busy) / statistics.median(doc["randwrite_idle"])}
    # the library's default rate, when it was measured (else the first rate)
    main = str(doc.get("rate")) if str(doc.get("rate")) in doc["by_rate"] else \
        next(iter(doc["by_rate"]), None)
    # the same busy runs with the thread at the normal priority (NORMAL=1)
    normal = sorted(glob.glob(os.path.join(res, "randwrite-busy-normal-*-1.json")))
    if normal and doc["randwrite_idle"]:
        state = os.path.basename(normal[0])[len("randwrite-"):-len("-1.json")]
        busy, done = runs_of(state)
        doc["normal_priority"] = {
            "state": state, "rate": int(state.rsplit("-", 1)[1]), "randwrite_busy": busy,
            "recompressed_during_busy": done,
            "busy_vs_idle": statistics.median(busy) / statistics.median(doc["randwrite_idle"])}
    doc["randwrite_busy"] = doc["by_rate"][main]["randwrite_busy"] if main else []
    doc["recompressed_during_busy"] = doc["by_rate"][main]["recompressed_during_busy"] if main else []
    doc["busy_rate"] = int(main) if main else None
    if doc["randwrite_idle"] and doc["randwrite_busy"]:
        doc["randwrite_busy_vs_idle"] = doc["by_rate"][main]["busy_vs_idle"]
        doc["randread_lz4"] = iops(os.path.join(res, "read-lz4.json"))
        doc["randread_recompressed"] = iops(os.path.join(res, "read-recompressed.json"))
    doc["sweep"] = []
    for path in sorted(glob.glob(os.path.join(res, "sweep-*.json"))):
        level, dict_size = os.path.basename(path)[6:-5].split("-")
        e = json.load(open(path))
        r = e["recompression"]
        lz4 = e["total"]["algorithms"][r["primary"]]
        doc["sweep"].append({"level": int(level), "dict_size": dict_size,
                             "kernel_zram_lz4": lz4["kernel_zram"]["total_bytes"],
                             "recompressed": r["recompressed_bytes"],
                             "recompressed_dict": r.get("recompressed_dict_bytes"),
                             "dict_memory": r.get("dictionary_memory")})
    doc["sweep"].sort(key=lambda x: (x["level"], x["dict_size"]))
json.dump(doc, open(out, "w"), indent=1)
EOF
echo "recompress: done in $((END - START)) s; $OUT/recompress.json"
