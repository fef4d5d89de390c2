#!/bin/bash
# run.sh - the whole benchmark in one command (`make bench`, `make bench-quick`): throughput matrix,
# memory table, `uzram bench` micro-benchmarks, kernel zram comparison, plots and the report.
#
# Usage: bench/run.sh [--quick] [--doc | --no-doc]
#   --quick   the everyday check: fewer cells, 1 s runs, smaller data; the report has the
#             same layout. Results in build/bench-quick/.
#   (default) the full run. Results in build/bench-results/; the
#             report replaces the results part of docs/BENCHMARKS.md and the plots in docs/bench/.
#   --doc / --no-doc  force writing docs/BENCHMARKS.md and docs/bench/ on or off.
# Environment: UZRAM (default build/uzram), UZRAM_GIT (the commit it was built from, for the
# report; default: this checkout's), RESULTS (results folder), PARTS (default
# "matrix memory micro zram-compare recompress writeback attach": run only some), and each
# script's own variables.
# The parts run one after another, never two at once: both the matrix and the memory table
# reset /dev/zram0, and the machine has 2 cores. A part that fails is reported as not run.
# The build image (bench/image.bash: the project compiled into an ext4 file system) is built
# once, by the first part that stores it, and given to the others: the recompression and
# writeback parts, and in quick mode the memory table's build-tree (the same tree and build).
set -u
cd "$(dirname "$0")/.." || exit 1

QUICK=0
DOC=auto
ARGS="$*"
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --doc) DOC=1 ;;
    --no-doc) DOC=0 ;;
    -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$DOC" = auto ] && DOC=$((1 - QUICK))

export UZRAM=${UZRAM:-build/uzram}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
if [ "$QUICK" = 1 ]; then
    RESULTS=${RESULTS:-build/bench-quick}
    MODE=quick
    QUICK_ARG=--quick
else
    RESULTS=${RESULTS:-build/bench-results}
    MODE=full
    QUICK_ARG=
fi
ALL_PARTS="matrix memory micro zram-compare recompress writeback attach"
PARTS=${PARTS:-$ALL_PARTS}
if [ ! -x "$UZRAM" ]; then
    echo "bench/run.sh: no uzram binary at $UZRAM (run 'make programs' first)" >&2
    exit 1
fi
mkdir -p "$RESULTS" || exit 1
rm -f "$RESULTS"/{matrix,memory,micro,micro-dedup,machine,recompress,writeback,attach}.json "$RESULTS"/zram-compare.txt "$RESULTS"/results.md
LOG=$RESULTS/log.txt
if [ "$DOC" = 1 ]; then PLOTS=docs/bench; else PLOTS=$RESULTS/plots; fi

START=$(date +%s)
START_DATE=$(date -u '+%Y-%m-%d %H:%M')
LOADS=""
note_load() { LOADS="$LOADS${LOADS:+, }$1 $(cut -d' ' -f1 /proc/loadavg)"; }
status=0
part() { [[ " $PARTS " == *" $1 "* ]]; }
PART_START=$START
took() { # PART: how long it took, in the log
    echo "### $1 took $(($(date +%s) - PART_START)) s"
    PART_START=$(date +%s)
}
# The shared image: kept by the first part that builds it, then given (IMAGE=) to the others.
SHARED_IMAGE=$RESULTS/image
rm -f "$SHARED_IMAGE" "$SHARED_IMAGE.desc"
image_env() { if [ -f "$SHARED_IMAGE" ]; then echo "IMAGE=$SHARED_IMAGE"; else echo "KEEP_IMAGE=$SHARED_IMAGE"; fi; }

{
    echo "### uzram benchmarks, $MODE run: $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
    if part matrix; then
        note_load matrix
        bench/matrix.sh $QUICK_ARG --out "$RESULTS" || { echo "### matrix.sh failed"; status=1; }
        took matrix
    fi
    if part memory; then
        note_load memory
        MEMORY_ENV=()
        [ "$QUICK" = 1 ] && MEMORY_ENV=("$(image_env)")
        env "${MEMORY_ENV[@]}" bench/memory.sh $QUICK_ARG --out "$RESULTS" || { echo "### memory.sh failed"; status=1; }
        took memory
    fi
    if part micro; then
        note_load micro
        if [ "$QUICK" = 1 ]; then
            # shellcheck disable=SC2054 # the commas belong to uzram bench's lists
            MICRO=(-a lz4 -k same,half -s 32M -r 2)
            DEDUP=(-s 32M -r 2)
        else
            MICRO=()
            DEDUP=()
        fi
        echo "### $UZRAM bench ${MICRO[*]} --json"
        "$UZRAM" bench "${MICRO[@]}" --json > "$RESULTS/micro.json" ||
            { echo "### uzram bench failed"; rm -f "$RESULTS/micro.json"; status=1; }
        echo "### $UZRAM bench --dedup ${DEDUP[*]} --json"
        "$UZRAM" bench --dedup "${DEDUP[@]}" --json > "$RESULTS/micro-dedup.json" ||
            { echo "### uzram bench --dedup failed"; rm -f "$RESULTS/micro-dedup.json"; status=1; }
        took micro
    fi
    if part zram-compare; then
        note_load zram-compare
        if [ "$QUICK" = 1 ]; then
            echo "### SIZE=32M REPEAT=1 POOL_SIZE=32M DEDUP_TREES=/usr/include/linux bench/zram-compare.sh"
            SIZE=32M REPEAT=1 POOL_SIZE=32M DEDUP_TREES=/usr/include/linux \
                bench/zram-compare.sh > "$RESULTS/zram-compare.txt" 2>&1 || status=1
        else
            echo "### bench/zram-compare.sh"
            bench/zram-compare.sh > "$RESULTS/zram-compare.txt" 2>&1 || status=1
        fi
        cat "$RESULTS/zram-compare.txt"
        took zram-compare
    fi
    if part recompress; then
        note_load recompress
        env "$(image_env)" bench/recompress.sh $QUICK_ARG --out "$RESULTS" || { echo "### recompress.sh failed"; status=1; }
        took recompress
    fi
    if part writeback; then
        note_load writeback
        env "$(image_env)" bench/writeback.sh $QUICK_ARG --out "$RESULTS" || { echo "### writeback.sh failed"; status=1; }
        took writeback
    fi
    if part attach; then
        note_load attach
        # Its own part of docs/BENCHMARKS.md (bench/report.py --part attach), written by itself.
        ATTACH_DOC=()
        [ "$DOC" = 1 ] && ATTACH_DOC=(--doc docs/BENCHMARKS.md)
        if [ "$(id -u)" != 0 ]; then
            echo "### attach.sh not run: it needs root (loop devices, mount, /dev/zram0)"
        else
            bench/attach.sh $QUICK_ARG --out "$RESULTS" "${ATTACH_DOC[@]}" || { echo "### attach.sh failed"; status=1; }
        fi
        took attach
    fi
    note_load end
    END=$(date +%s)
    rm -f "$SHARED_IMAGE" "$SHARED_IMAGE.desc"

    # What the report says about the machine and the run.
    COMMAND="bench/run.sh${ARGS:+ $ARGS}"
    [ "$PARTS" != "$ALL_PARTS" ] && COMMAND="PARTS='$PARTS' $COMMAND"
    [ "$UZRAM" != build/uzram ] && COMMAND="UZRAM=$UZRAM${UZRAM_GIT:+ UZRAM_GIT=$UZRAM_GIT} $COMMAND"
    [ -n "${MAKELEVEL:-}" ] && COMMAND="make $([ "$QUICK" = 1 ] && echo bench-quick || echo bench) (= $COMMAND)"
    # UZRAM_GIT names the source of a binary built elsewhere (e.g. from `git archive`).
    GIT=${UZRAM_GIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
    [ -z "${UZRAM_GIT:-}" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] &&
        GIT="$GIT + uncommitted changes"
    "$PY" - "$RESULTS/machine.json" <<EOF
import json, sys
json.dump({
    "mode": "$MODE",
    "date": "$START_DATE-$(date -u '+%H:%M') UTC",
    "command": "$COMMAND",
    "total": "$(((END - START) / 60)) min $(((END - START) % 60)) s",
    "cpu": "$(LC_ALL=C lscpu | sed -n 's/^Model name: *//p' | head -1)",
    "nproc": "$(nproc)",
    "memory": "$(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)",
    "kernel": "$(uname -r)",
    "os": "$(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}")",
    "uzram": "$("$UZRAM" --version 2>/dev/null | awk '{print $2}')",
    "git": "$GIT",
    "fio": "$(fio --version 2>/dev/null || echo 'fio not installed')",
    "nbdkit": "$(nbdkit --version 2>/dev/null || echo 'nbdkit not installed')",
    "qemu": "$(qemu-img --version 2>/dev/null | head -1 | sed 's/ (.*//' || echo 'qemu-img not installed')",
    "cc": "$(${CC:-gcc} --version 2>/dev/null | head -1)",
    "loads": "$LOADS",
}, open(sys.argv[1], "w"), indent=1)
EOF
    bench/plot.sh "$RESULTS" "$PLOTS" || status=1
    echo
    if [ "$DOC" = 1 ]; then
        "$PY" bench/report.py "$RESULTS" --plots bench --doc docs/BENCHMARKS.md || status=1
        echo "(docs/BENCHMARKS.md and docs/bench/ updated)"
    else
        "$PY" bench/report.py "$RESULTS" --plots plots || status=1
    fi
    echo "(results in $RESULTS: results.md, *.json, log.txt; took $(((END - START) / 60)) min $(((END - START) % 60)) s)"
    exit $status
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
