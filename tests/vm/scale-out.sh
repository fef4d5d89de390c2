#!/usr/bin/env bash
# scale-out.sh - VM scenario (c): docs/SCALE-OUT.md's md recipes for real, over two uzram
# servers in the guest (on Unix sockets: the recipes' TCP and TLS are the servers' business
# and are tested on the host), each through nbd-client with several connections (-C 2).
# raid1: data written and read back; one server killed: the array degrades, the data still
# reads back equal; a fresh server added back resyncs, and the data then reads back from it
# alone. raid0: data round trip; one server killed: reads of its chunks fail with EIO at once.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

BOUND=60
vm_init
need_module nbd raid1 raid0
need_tools nbd-client mdadm
MD=/dev/md/uzram
at_exit "mdadm --stop $MD"

# connect NAME DEVICE: a server of 64 MiB and nbd-client with two connections to it.
connect() {
    start_server "$1" -s 64M
    nbd-client -unix "$(sock_of "$1")" "$2" -N "$1" -b 4096 -C 2 >"$WORK/nbd-$1.out" 2>&1 ||
        fail "nbd-client -C 2 for $1: $(cat "$WORK/nbd-$1.out")"
    at_exit "nbd-client -d $2"
    [[ $(ls "/sys/block/${2#/dev/}/mq" | wc -l) -eq 2 ]] || fail "$2 has not two connections (hardware queues)"
}

data() { # FILE MIB
    head -c $(($2 << 20)) /dev/urandom >"$1"
}

md_state() { mdadm --detail "$MD" | awk -F' : ' '/State :/ {print $2}'; }

# --- raid1 ---
connect m1 /dev/nbd0
connect m2 /dev/nbd1
mdadm --create "$MD" --run --level=1 --raid-devices=2 --assume-clean --metadata=1.2 \
    /dev/nbd0 /dev/nbd1 >"$WORK/mdadm.out" 2>&1 || fail "mdadm --create raid1: $(cat "$WORK/mdadm.out")"
data "$WORK/data" 16
dd if="$WORK/data" of="$MD" bs=1M oflag=direct status=none || fail "write to the raid1"
cmp -n $((16 << 20)) "$WORK/data" <(dd if="$MD" bs=1M count=16 iflag=direct status=none) ||
    fail "the raid1 read back differs"
pass "raid1 over two servers (nbd-client -C 2 each): 16 MiB round trip"

kill -KILL "${SERVER_PID[m2]}"
unset "SERVER_PID[m2]"
# md notices at the next I/O to the dead member.
dd if="$WORK/data" of="$MD" bs=1M count=4 oflag=direct status=none || fail "a write after one server died"
wait_for "$BOUND" "md marking /dev/nbd1 faulty" bash -c "mdadm --detail $MD | grep -q 'faulty'"
[[ $(md_state) == *degraded* ]] || fail "the array is '$(md_state)', not degraded"
cmp -n $((16 << 20)) "$WORK/data" <(dd if="$MD" bs=1M count=16 iflag=direct status=none) ||
    fail "the degraded raid1 read back differs"
pass "one server killed: array '$(md_state)', the data still reads back equal"

mdadm "$MD" --remove /dev/nbd1 >/dev/null 2>&1 || mdadm "$MD" --remove failed >/dev/null 2>&1 || true
connect m3 /dev/nbd2
mdadm "$MD" --add /dev/nbd2 >"$WORK/mdadm.out" 2>&1 || fail "mdadm --add: $(cat "$WORK/mdadm.out")"
wait_for "$BOUND" "the resync onto the fresh server" bash -c \
    "mdadm --detail $MD | grep -q 'active sync.*/dev/nbd2' && ! grep -q recovery /proc/mdstat"
# The fresh server alone: fail the first one and read.
mdadm "$MD" --fail /dev/nbd0 >/dev/null 2>&1 || fail "mdadm --fail /dev/nbd0"
cmp -n $((16 << 20)) "$WORK/data" <(dd if="$MD" bs=1M count=16 iflag=direct status=none) ||
    fail "the data read from the resynced server alone differs"
read -r -a mm <<<"$("$UZRAM" attr m3 mm_stat)"
((mm[0] >= 16 << 20)) || fail "the fresh server holds ${mm[0]} bytes after the resync"
pass "a fresh server added back: resynced (it holds ${mm[0]} bytes), the data reads back from it alone"
mdadm --stop "$MD" >/dev/null 2>&1
for n in 0 2; do nbd-client -d /dev/nbd$n >/dev/null 2>&1; done
nbd-client -d /dev/nbd1 >/dev/null 2>&1 || true
for name in m1 m3; do stop_server "$name"; done

# --- raid0 ---
connect s1 /dev/nbd3
connect s2 /dev/nbd4
mdadm --create "$MD" --run --level=0 --chunk=512 --raid-devices=2 --metadata=1.2 \
    /dev/nbd3 /dev/nbd4 >"$WORK/mdadm.out" 2>&1 || fail "mdadm --create raid0: $(cat "$WORK/mdadm.out")"
data "$WORK/data" 32
dd if="$WORK/data" of="$MD" bs=1M oflag=direct status=none || fail "write to the raid0"
cmp -n $((32 << 20)) "$WORK/data" <(dd if="$MD" bs=1M count=32 iflag=direct status=none) ||
    fail "the raid0 read back differs"
a=$(mm_stat_field s1 0) b=$(mm_stat_field s2 0)
((a >= 14 << 20 && b >= 14 << 20)) || fail "the stripe is not spread: $a and $b bytes"
pass "raid0 (512 KiB chunks) over two servers: 32 MiB round trip, $a and $b bytes on each"
kill -KILL "${SERVER_PID[s2]}"
unset "SERVER_PID[s2]"
start=$(date +%s)
if timeout "$BOUND" dd if="$MD" of=/dev/null bs=1M count=32 iflag=direct status=none 2>/dev/null; then
    fail "reading the whole raid0 worked with one server dead"
fi
(($(date +%s) - start < BOUND)) || fail "reading the raid0 with one server dead took $BOUND s"
pass "raid0 with one server killed: reading it fails with an I/O error after $(($(date +%s) - start)) s"
mdadm --stop "$MD" >/dev/null 2>&1
stop_server s1
echo "PASS: scale-out.sh"
