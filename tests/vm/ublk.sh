#!/usr/bin/env bash
# ublk.sh - VM scenario: `uzram attach` through the kernel's ublk driver, the default where the
# kernel has it. One queue per CPU; ext4 made, mounted, a tree copied, caches dropped, compared
# byte for byte; rm + fstrim reach the engine; detach refused while mounted and while open;
# fio random writes of 4 KiB to 256 KiB verified at queue depths 1, 16 and 64; blkdiscard and
# write-zeroes reach the engine; SIGTERM with an unused node removes it; SIGTERM and SIGKILL
# under a mounted node: I/O fails within UBLK_BOUND seconds, the server exits, and nothing is
# left for the user to clean (the next attach works and reuses the device number).
set -euo pipefail
source "$(dirname "$0")/lib.bash"

UBLK_BOUND=30
# --quick (make check): 24 MiB of fio writes per queue depth instead of 96
FIO_SIZE=96M
[[ ${1:-} == --quick ]] && FIO_SIZE=24M
vm_init
need_module ublk_drv
need_tools mkfs.ext4 e2fsck fstrim fio blkdiscard
MNT=$WORK/mnt
mkdir -p "$MNT"
at_exit "umount -l $MNT"
make_tree

# --- the default path, its queues, the file system round trip ---
start_server ub -s 512M
DEV=$("$UZRAM" attach ub 2>"$WORK/attach.err") || fail "attach: $(cat "$WORK/attach.err")"
[[ $DEV =~ ^/dev/ublkb[0-9]+$ ]] || fail "attach without --via printed '$DEV', not a ublk node"
"$UZRAM" status | grep -qE "^ub .*$DEV" || fail "status does not show $DEV: $("$UZRAM" status)"
queues=$(find "/sys/block/${DEV#/dev/}/mq" -mindepth 1 -maxdepth 1 -type d | wc -l)
((queues == $(nproc))) || fail "$DEV has $queues queues, not one per CPU ($(nproc))"
pass "attach took ublk: $DEV with $queues queues"
fs_round_trip "$DEV" ub "$MNT"

mounted_then_clean ub "$DEV" "$MNT"
exec {held}<"$DEV"
if "$UZRAM" detach ub 2>"$WORK/detach.err"; then fail "detach succeeded while $DEV is open"; fi
exec {held}<&-
pass "detach refused while open: $(cat "$WORK/detach.err")"

# --- data through the queues: random writes of 4 KiB to 256 KiB (larger than a request, so the
# block layer splits them), half compressible, each block verified by reading it back ---
for depth in 1 16 64; do
    fio --name=verify --filename="$DEV" --ioengine=libaio --direct=1 --rw=randwrite \
        --bsrange=4k-256k --iodepth="$depth" --size=$FIO_SIZE --buffer_compress_percentage=50 \
        --refill_buffers --verify=crc32c --do_verify=1 --verify_fatal=1 --randseed="$depth" \
        --output="$WORK/fio-$depth.out" >/dev/null 2>&1 || fail "fio verify at QD$depth: $(grep -m 3 -iE 'error|bad|verify' "$WORK/fio-$depth.out")"
    grep -q "err= 0" "$WORK/fio-$depth.out" || fail "fio at QD$depth reported errors: $(grep -m 1 'err=' "$WORK/fio-$depth.out")"
done
pass "fio randwrite 4k-256k, $FIO_SIZE, crc32c verified at QD 1, 16, 64"

# --- discard and write-zeroes reach the engine ---
before=$(mm_stat_field ub 0)
blkdiscard "$DEV" || fail "blkdiscard $DEV"
after=$(mm_stat_field ub 0)
((after == 0)) || fail "blkdiscard of the whole device: orig_data_size $before -> $after, not 0"
head -c $((8 << 20)) /dev/urandom >"$WORK/r"
dd if="$WORK/r" of="$DEV" bs=1M oflag=direct status=none
blkdiscard -z -o $((4 << 20)) -l $((4 << 20)) "$DEV" || fail "blkdiscard -z $DEV"
cmp -n $((4 << 20)) "$WORK/r" "$DEV" || fail "the first 4 MiB changed by write-zeroes after them"
cmp -n $((4 << 20)) -i 0:$((4 << 20)) /dev/zero "$DEV" || fail "write-zeroes: the range does not read back as zeroes"
pass "blkdiscard: orig_data_size $before -> 0; blkdiscard -z reads back zeroes, the rest intact"

"$UZRAM" detach ub || fail "detach after the last user"
[[ ! -e $DEV ]] || fail "$DEV still exists after detach"
stop_server ub

# SIGTERM with an unused node: the node and the driver's device go with the server.
start_server idle -s 64M
dev=$("$UZRAM" attach idle) || fail "attach idle"
id=${dev#/dev/ublkb}
stop_server idle
[[ ! -e $dev && ! -e /sys/class/ublk-char/ublkc$id ]] || fail "SIGTERM left $dev or ublkc$id behind"
pass "SIGTERM with $dev unused: the node and /dev/ublkc$id are gone"

# --- the server stops under a mounted node ---
# SIGNAL: TERM or KILL (stop_under_mount, lib.bash); then the node goes at umount, with nothing
# left to clean by hand.
server_gone() {
    local signal=$1
    stop_under_mount "$signal" ublk "$UBLK_BOUND" "$MNT"
    wait_for "$UBLK_BOUND" "$STOPPED_DEV removed after SIG$signal and umount" bash -c "! [[ -e $STOPPED_DEV ]]"
    pass "SIG$signal under a mounted $STOPPED_DEV: the server exited, the write failed after $STOPPED_AFTER; umount freed it"
}
server_gone TERM
server_gone KILL

# Nothing left for the user: a new server's attach works, and the driver's devices are only
# those of running servers.
start_server again -s 64M
dev=$("$UZRAM" attach again) || fail "attach after the stops: $(cat "$WORK/server-again.err")"
head -c $((8 << 20)) /dev/urandom >"$WORK/r"
dd if="$WORK/r" of="$dev" bs=1M oflag=direct status=none
cmp -n $((8 << 20)) "$WORK/r" "$dev" || fail "data through $dev after the stops"
left=$(find /sys/class/ublk-char -mindepth 1 -maxdepth 1 | wc -l)
((left == 1)) || fail "the driver has $left devices with one server running: $(ls /sys/class/ublk-char)"
"$UZRAM" detach again
stop_server again
pass "attach after SIGTERM and SIGKILL: $dev, 8 MiB round trip, no device of a dead server left"
echo "PASS: ublk.sh"
