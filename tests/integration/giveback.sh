#!/usr/bin/env bash
# giveback.sh - integration test: memory a storm of clients took comes back. A server with
# dedup, a 32 MiB mem_limit, a backing file and writeback when full takes writes from 4 nbdcopy
# runs of 4 connections each (2 MiB requests); after a trim of the whole disk and `compact`,
# its resident memory (VmRSS of /proc/PID/status) is within 4 MiB of what it was fresh: the
# pool, malloc's arenas, the buffers of large requests and the pages of the page table go
# back (issue 24: 33.8 MB against 9.6 MB fresh, in two arenas no counter showed).
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_tools nbdcopy tar
need_python_nbd
lib_init

grep -qaE '__(asan|tsan)_init' "$UZRAM" && skip "$UZRAM is a sanitizer build: its resident memory is the sanitizer's"
SLACK=$((4 * 1024)) # kB
DATA=$WORK/data.img
tar cf - -C /usr/include . 2>/dev/null | head -c $((128 * MiB)) >"$DATA" || true
[[ $(stat -c %s "$DATA") -ge $((32 * MiB)) ]] || skip "not enough of /usr/include for 32 MiB of data"

rss() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB$/\1/p' "/proc/${SERVER_PID[gb]}/status"; }

start_server gb -s 1G --dedup -m 32M --backing-file "$WORK/back" --writeback-when-full
URI=$(uri_of gb)
sleep 0.5 # the threads of a fresh server are all up
fresh=$(rss)

pids=()
for offset in 0 128 256 384; do
    # each copy at its own place, so that the storm stores 4 times the data
    $PY - "$URI" "$DATA" "$offset" <<'EOF' &
import sys
import nbd
uri, path, offset = sys.argv[1], sys.argv[2], int(sys.argv[3]) << 20
data = open(path, "rb").read()
handles = []
for _ in range(4):
    h = nbd.NBD()
    h.connect_uri(uri)
    handles.append(h)
step = 2 << 20
for i, start in enumerate(range(0, len(data) - step + 1, step)):
    handles[i % 4].pwrite(data[start:start + step], offset + start)
for h in handles:
    h.shutdown()
EOF
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "a client of the storm failed"; done
storm=$(rss)
[[ $(stat_json_field gb failed_writes) -eq 0 ]] || fail "failed_writes $(stat_json_field gb failed_writes)"
[[ $(stat_json_field gb bd_objects) -gt 0 ]] || fail "nothing was written back"

$PY - "$URI" <<'EOF' || fail "trim of the whole disk"
import sys
import nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.trim(h.get_size(), 0)
h.shutdown()
EOF
"$UZRAM" attr gb compact 1 || fail "compact"
after=$(rss)
[[ $(stat_json_field gb pages_stored) -eq 0 && $(mm_stat_field gb 2) -eq 0 ]] ||
    fail "after the trim: pages_stored $(stat_json_field gb pages_stored), mem_used_total $(mm_stat_field gb 2)"
((after <= fresh + SLACK)) ||
    fail "VmRSS $after kB after the storm, a trim and compact; $fresh kB fresh ($storm kB after the storm)"
stop_server gb
pass "VmRSS $fresh kB fresh, $storm kB after a storm of 16 connections, $after kB after trim and compact"
echo "PASS: giveback.sh"
