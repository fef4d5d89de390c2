# common.bash - what the benchmark scripts share: their options (--quick, --out DIR, --help),
# the paths of the binaries and of kernel zram, and recomp_thread_full_speed.
# Sourced, not run; sets QUICK, OUT, UZRAM, PY, ZRAM, ZDEV and ZSYS.

QUICK=0
OUT=build/bench-results
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --out) OUT=$2; shift ;;
    --out=*) OUT=${1#--out=} ;;
    -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "$(basename "$0"): unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done

UZRAM=${UZRAM:-build/uzram}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
ZRAM=${ZRAM:-zram0}
ZDEV=/dev/$ZRAM
ZSYS=/sys/block/$ZRAM

# recomp_thread_full_speed PID NAME: the recompression thread of server PID runs five nice steps
# below it within a CPU budget (recompress_cpu, default 20% of one CPU; lib/recompress/recompress.c),
# so its work takes minutes where it could take seconds. Where a benchmark measures where the
# thread ends (not what it costs the foreground), it lifts the budget of device NAME
# (recompress_cpu 100) and runs the thread at the normal priority (renice, as root).
recomp_thread_full_speed() {
    local task
    "$UZRAM" attr "$2" recompress_cpu 100 ||
        echo "$(basename "$0"): warning: cannot lift $2's recompression CPU budget" >&2
    for _ in $(seq 50); do
        for task in /proc/"$1"/task/*; do
            [ "$(cat "$task/comm" 2>/dev/null)" = uzram-recomp ] || continue
            chrt -o -p 0 "${task##*/}" >/dev/null 2>&1 && renice -n 0 -p "${task##*/}" >/dev/null 2>&1
            return 0
        done
        sleep 0.1
    done
    echo "$(basename "$0"): warning: no uzram-recomp thread in $1 to run at full speed" >&2
}

# recomp_settle LIMIT NAME: wait until the background recompressor of device NAME has nothing
# left to do: it has started (something recompressed or bundled: a dictionary is trained
# first, for seconds in which nothing moves) and recomp_pages, bundled_pages, dict_mem and
# mem_used_total stayed the same for 5 s while the thread ended 3 passes (recomp_passes: a pass
# that trains a dictionary again spends seconds on it in which nothing moves, so a time alone
# can end the wait too soon); a library without that counter, 16 s. At most LIMIT seconds:
# returns 1 then.
recomp_settle() {
    local last="" now since=0 still=0 passes
    for _ in $(seq "$1"); do
        sleep 1
        now=$("$UZRAM" attr "$2" stat_json | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
print("started" if d["recomp_pages"] + d["bundled_pages"] else "waiting", d["recomp_pages"],
      d["bundled_pages"], d["dict_mem"], d["mem_used_total"], d.get("recomp_passes", -1))')
        passes=${now##* }
        now=${now% *}
        if [ "$now" = "$last" ] && [ "${now%% *}" = started ]; then
            still=$((still + 1))
            if [ "$passes" -ge 0 ]; then
                [ $((passes - since)) -ge 3 ] && [ "$still" -ge 5 ] && return 0
            elif [ "$still" -ge 16 ]; then
                return 0
            fi
        else
            still=0
            since=$passes
        fi
        last=$now
    done
    return 1
}
