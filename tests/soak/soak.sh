#!/usr/bin/env bash
# soak.sh - long verified load on one `uzram serve`: checker clients and fio verify jobs, killed
# and restarted at random, compaction and stat reads meanwhile; then a full check. `make soak`.
#
# Environment: SOAK_SECONDS (load phase, default 300; the final checks add well under a minute),
# SOAK_CHECKERS (python clients, default 12), SOAK_FIO_JOBS (fio jobs, default 4), UZRAM (the
# binary, default build/uzram; an ASan build works too and its log is checked), SOAK_SUMMARY
# (also write the summary there). Exit 0 only with zero errors.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/integration/lib.bash

SOAK_SECONDS=${SOAK_SECONDS:-300}
CHECKERS=${SOAK_CHECKERS:-12}
FIO_JOBS=${SOAK_FIO_JOBS:-4}
CHECKER_REGION=$((8 * MiB))
FIO_REGION=$((32 * MiB))
FIO_BASE=$((128 * MiB))
DISK=$((256 * MiB))
CHECKER=$PWD/tests/soak/checker.py

need_python_nbd
if ! command -v fio >/dev/null || ! fio --enghelp=nbd >/dev/null 2>&1; then
    echo "soak: fio with the nbd engine is missing; running checkers only"
    FIO_JOBS=0
fi
((CHECKERS * CHECKER_REGION <= FIO_BASE)) || { echo "soak: at most 16 checkers" >&2; exit 2; }
((FIO_JOBS * FIO_REGION <= DISK - FIO_BASE)) || { echo "soak: at most 4 fio jobs" >&2; exit 2; }
lib_init

start_server soak -s 256M --dedup --threads 4
URI=$(uri_of soak)
PID=${SERVER_PID[soak]}
START=$(date +%s)
DEADLINE=$((START + SOAK_SECONDS))
LOOPS=()
at_exit 'for p in "${LOOPS[@]}"; do kill -TERM "$p"; done; for f in "$WORK"/slot-*.pid; do [[ -f $f ]] && kill -KILL "$(cat "$f")"; done'

echo "soak: ${SOAK_SECONDS}s, $CHECKERS checker clients + $FIO_JOBS fio jobs on a 256 MiB" \
    "--dedup device, server pid $PID, work dir $WORK"

# Each client slot runs one client at a time and starts a new one (a new connection) when the
# killer ended the last one. $WORK/slot-N.pid names the live client for the killer;
# $WORK/slot-N.killed says the end was ours. A client that fails on its own is an error.
slot_ended() { # slot, exit status -> 0 when the killer did it
    local slot=$1 status=$2
    rm -f "$WORK/slot-$slot.pid"
    if [[ -f $WORK/slot-$slot.killed ]]; then
        rm -f "$WORK/slot-$slot.killed"
        echo kill >>"$WORK/slot-$slot.events"
        sleep 1 # let the server finish the dead connection's last request
        return 0
    fi
    return 1
}

checker_slot() {
    local slot=$1 status
    local start=$((slot * CHECKER_REGION))
    while (($(date +%s) < DEADLINE)); do
        echo start >>"$WORK/slot-$slot.events"
        $PY "$CHECKER" run "$URI" "$WORK/checker-$slot" $start $CHECKER_REGION $slot $DEADLINE \
            >>"$WORK/slot-$slot.out" 2>>"$WORK/slot-$slot.err" &
        echo $! >"$WORK/slot-$slot.pid"
        status=0
        wait $! || status=$?
        if ((status != 0)) && ! slot_ended "$slot" $status; then
            echo "error: checker $slot exited with status $status: $(tail -n 3 "$WORK/slot-$slot.err")" \
                >>"$WORK/errors"
            return
        fi
        rm -f "$WORK/slot-$slot.pid"
    done
}

fio_slot() {
    local slot=$1 job=$2 run=0 status remaining runtime
    local offset=$((FIO_BASE + job * FIO_REGION))
    while remaining=$((DEADLINE - $(date +%s))); ((remaining > 2)); do
        runtime=$((20 + RANDOM % 40))
        ((runtime <= remaining)) || runtime=$remaining
        run=$((run + 1))
        echo start >>"$WORK/slot-$slot.events"
        # Random overwrites of mixed sizes, each verified (crc32c) soon after it was written;
        # half-compressible buffers and some repeated ones so compression and dedup both work.
        (cd "$WORK" && exec fio --name="soak$job" --ioengine=nbd --uri="$URI" \
            --offset=$offset --size=$FIO_REGION --rw=randwrite --bsrange=4k-128k \
            --iodepth=8 --verify=crc32c --verify_backlog=64 --verify_fatal=1 --verify_dump=0 \
            --buffer_compress_percentage=50 --dedupe_percentage=20 --time_based \
            --runtime="$runtime" --output-format=json --output="$WORK/fio-$job-$run.json") \
            >>"$WORK/slot-$slot.out" 2>>"$WORK/slot-$slot.err" &
        echo $! >"$WORK/slot-$slot.pid"
        status=0
        wait $! || status=$?
        if ((status != 0)); then
            if slot_ended "$slot" $status; then
                rm -f "$WORK/fio-$job-$run.json" # an interrupted run verified what it read
                continue
            fi
            echo "error: fio job $job run $run exited with status $status: $(tail -n 3 "$WORK/slot-$slot.err")" \
                >>"$WORK/errors"
            return
        fi
        rm -f "$WORK/slot-$slot.pid"
    done
}

# Every 2 to 8 seconds one client dies by SIGKILL, mid-request or not.
killer() {
    local slots=$((CHECKERS + FIO_JOBS)) slot pid
    while sleep $((2 + RANDOM % 7)); (($(date +%s) < DEADLINE - 3)); do
        slot=$((RANDOM % slots))
        [[ -f $WORK/slot-$slot.pid ]] || continue
        pid=$(cat "$WORK/slot-$slot.pid" 2>/dev/null) || continue
        touch "$WORK/slot-$slot.killed"
        kill -KILL "$pid" 2>/dev/null || rm -f "$WORK/slot-$slot.killed"
    done
}

# Compaction and every kind of statistics read, while the clients work.
maintenance() {
    local n=0
    while (($(date +%s) < DEADLINE)); do
        if ! "$UZRAM" attr soak compact 1 >/dev/null 2>>"$WORK/maintenance.err" ||
            ! "$UZRAM" status --json 2>>"$WORK/maintenance.err" |
            $PY -c 'import json, sys; d = json.load(sys.stdin); assert d and d[0]["name"] == "soak", d' \
                2>>"$WORK/maintenance.err" ||
            ! "$UZRAM" attr soak mm_stat >/dev/null 2>>"$WORK/maintenance.err" ||
            ! "$UZRAM" attr soak io_stat >/dev/null 2>>"$WORK/maintenance.err"; then
            echo "error: compaction or a stat read failed: $(tail -n 3 "$WORK/maintenance.err")" \
                >>"$WORK/errors"
            return
        fi
        n=$((n + 1))
        echo "$n" >"$WORK/maintenance.count"
        sleep 0.5
    done
}

for slot in $(seq 0 $((CHECKERS - 1))); do
    # (bash's "Killed" notices go to the shell log, not the terminal)
    checker_slot "$slot" 2>>"$WORK/shell.err" &
    LOOPS+=($!)
done
for job in $(seq 0 $((FIO_JOBS - 1))); do
    fio_slot $((CHECKERS + job)) "$job" 2>>"$WORK/shell.err" &
    LOOPS+=($!)
done
killer &
LOOPS+=($!)
maintenance &
LOOPS+=($!)

# Progress once a minute, so a long run shows it is alive.
while (($(date +%s) < DEADLINE)); do
    sleep $((DEADLINE - $(date +%s) < 60 ? DEADLINE - $(date +%s) + 1 : 60))
    server_alive soak || { echo "error: the server died" >>"$WORK/errors"; break; }
    echo "soak: $(($(date +%s) - START)) s, mm_stat: $("$UZRAM" attr soak mm_stat 2>/dev/null)"
done
for p in "${LOOPS[@]}"; do
    wait "$p" || true
done
LOOPS=()
LOAD_SECONDS=$(($(date +%s) - START))

# --- final checks ---
# Every checker region read back whole against its model (a kill's last request resolved).
for slot in $(seq 0 $((CHECKERS - 1))); do
    if ! $PY "$CHECKER" verify "$URI" "$WORK/checker-$slot" $((slot * CHECKER_REGION)) \
        $CHECKER_REGION "$slot" >>"$WORK/slot-$slot.out" 2>>"$WORK/slot-$slot.err"; then
        echo "error: final verify of checker $slot: $(tail -n 3 "$WORK/slot-$slot.err")" >>"$WORK/errors"
    fi
done

# A full discard must give every byte back: no data, no pool memory.
$PY - "$URI" "$DISK" >"$WORK/discard.out" 2>&1 <<'EOF' || echo "error: full discard: $(cat "$WORK/discard.out")" >>"$WORK/errors"
import sys
import nbd
uri, disk = sys.argv[1], int(sys.argv[2])
h = nbd.NBD()
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri(uri)
step = 64 << 20
for offset in range(0, disk, step):
    h.trim(step, offset)
zero = 0
def extent(context, offset, entries, err):
    global zero
    for i in range(0, len(entries), 2):
        if entries[i + 1] & nbd.STATE_ZERO:
            zero += entries[i]
    return 0
offset = 0
while offset < disk:
    before = zero
    h.block_status(min(step, disk - offset), offset, extent)
    if zero == before:
        sys.exit("BLOCK_STATUS: range at %d is not zero after the discard" % offset)
    offset = zero
h.shutdown()
EOF
"$UZRAM" attr soak compact 1 >/dev/null || echo "error: final compaction failed" >>"$WORK/errors"
read -r orig _ used _ <<<"$("$UZRAM" attr soak mm_stat || echo "? ? ? ?")"
[[ $orig -eq 0 && $used -eq 0 ]] ||
    echo "error: after a full discard mm_stat has orig_data_size $orig, mem_used_total $used (want 0 0)" \
        >>"$WORK/errors"

server_alive soak && [[ ${SERVER_PID[soak]} == "$PID" ]] ||
    echo "error: the server (pid $PID) is gone" >>"$WORK/errors"
if grep -q 'ERROR: \(Address\|Leak\|Thread\)Sanitizer\|WARNING: ThreadSanitizer\|runtime error:' \
    "$WORK/server-soak.err"; then
    echo "error: sanitizer report in the server log" >>"$WORK/errors"
fi
# SIGTERM: the server must finish and exit 0 within 20 s.
if server_alive soak; then
    kill -TERM "$PID"
    for _ in $(seq 200); do
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    status=0
    if kill -0 "$PID" 2>/dev/null; then
        echo "error: the server did not exit within 20 s of SIGTERM" >>"$WORK/errors"
    else
        wait "$PID" || status=$?
        unset "SERVER_PID[soak]"
        ((status == 0)) || echo "error: the server exited with status $status" >>"$WORK/errors"
    fi
fi

# --- summary ---
checker_bytes=$(cat "$WORK"/checker-*/stats 2>/dev/null | awk '{b += $2} END {printf "%.0f", b}')
checker_ops=$(cat "$WORK"/checker-*/stats 2>/dev/null | awk '{o += $1} END {printf "%.0f", o}')
fio_bytes=$($PY - "$WORK" <<'EOF'
import glob, json, sys
total = 0
for path in glob.glob(sys.argv[1] + "/fio-*.json"):
    try:
        report = json.load(open(path))
    except ValueError:
        continue
    for job in report["jobs"]:
        if job["error"] == 0:
            total += job["read"]["io_bytes"]  # verify reads of what the job wrote
print(total)
EOF
)
connections=$(cat "$WORK"/slot-*.events 2>/dev/null | grep -c start || true)
kills=$(cat "$WORK"/slot-*.events 2>/dev/null | grep -c kill || true)
errors=$( [[ -f $WORK/errors ]] && grep -c . "$WORK/errors" || echo 0)
summary="soak summary: load ${LOAD_SECONDS}s, after a full discard orig_data_size ${orig:-?} mem_used_total ${used:-?}, $((CHECKERS + FIO_JOBS)) concurrent clients ($CHECKERS checkers, $FIO_JOBS fio jobs), $connections connections, $kills killed and reconnected, $checker_ops checker ops, bytes verified $((checker_bytes + fio_bytes)) (checkers $checker_bytes, fio $fio_bytes), $(cat "$WORK/maintenance.count" 2>/dev/null || echo 0) compaction+stat rounds, server pid $PID unchanged, errors $errors"
echo "$summary"
[[ -n ${SOAK_SUMMARY:-} ]] && echo "$summary" >"$SOAK_SUMMARY"
if ((errors > 0)); then
    sed 's/^/  /' "$WORK/errors"
    dump_server_logs
    exit 1
fi
