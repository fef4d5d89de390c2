#!/usr/bin/env bash
# ublk.sh - VM scenario: `uzram attach` through the kernel's ublk driver, the default where the
# kernel has it. One queue per CPU; ext4 made, mounted, a tree copied, caches dropped, compared
# byte for byte; rm + fstrim reach the engine; detach refused while mounted and while open;
# fio random writes of 4 KiB to 256 KiB verified at queue depths 1, 16 and 64; on a 4 GiB
# device, blkdiscard of all of it and write-zeroes of 2 GiB and more, with and without
# NOUNMAP, succeed and reach the engine; SIGTERM with an unused node removes it; SIGTERM and
# SIGKILL under a mounted node: I/O fails within UBLK_BOUND seconds, the server exits, and
# nothing is left for the user to clean (the next attach works and reuses the device number).
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

"$UZRAM" detach ub || fail "detach after the last user"
[[ ! -e $DEV ]] || fail "$DEV still exists after detach"
stop_server ub

# --- discard and write-zeroes of 2 GiB and more (issue 39) ---
# A 4 GiB device (sparse: pages never written or discarded hold nothing). The kernel sends
# discards and write-zeroes of up to 4 GiB - 4 KiB in one request (the advertised limits);
# their result was the length as an int, negative from 2 GiB on, and the driver failed them
# after the engine had done the work. blkdiscard -z is BLKZEROOUT, a write-zeroes with
# REQ_NOUNMAP: its pages are stored as zero pages; fallocate --punch-hole sends one without,
# and its pages go (block/ioctl.c and block/fops.c of 6.12).
MIB=$((1 << 20))
GIB=$((1 << 30))
start_server big -s 4G
BIG=$("$UZRAM" attach big 2>"$WORK/attach.err") || fail "attach big: $(cat "$WORK/attach.err")"
head -c $MIB /dev/urandom >"$WORK/r"
errors() { dmesg | grep -E "error, dev ${BIG#/dev/}\b" | head -n 3; }
put_at() { # OFFSET: $WORK/r's MiB there
    dd if="$WORK/r" of="$BIG" bs=1M seek=$(($1 / MIB)) oflag=direct conv=notrunc status=none
}
same_at() { # OFFSET FILE WHAT: the MiB at OFFSET is FILE's first MiB, else fail with WHAT
    cmp -n $MIB -i 0:"$1" "$2" "$BIG" >/dev/null || fail "$3 (the MiB at $1)"
}
for at in 0 $((4 * GIB - MIB)); do put_at "$at"; done
before=$(mm_stat_field big 0)
blkdiscard "$BIG" 2>"$WORK/blkdiscard.err" || fail "blkdiscard of the whole 4 GiB $BIG: $(cat "$WORK/blkdiscard.err"); kernel: $(errors)"
after=$(mm_stat_field big 0)
((before >= 2 * MIB && after == 0)) || fail "blkdiscard of the whole device: orig_data_size $before -> $after, not 0"
[[ -z $(errors) ]] || fail "blkdiscard of the whole device: $(errors)"
pass "blkdiscard of the whole 4 GiB device: orig_data_size $before -> 0, no I/O error"

# Write-zeroes of 2 GiB + 8 MiB from 4 MiB on (one request), with data just before it, at
# its first and last MiB and just after it: a MiB at each.
lo=$((4 * MIB))
len=$((2 * GIB + 8 * MIB))
hi=$((lo + len))
for at in $((lo - MIB)) $lo $((hi - MIB)) $hi; do put_at "$at"; done
zero_range_checks() { # WHAT
    for at in $((lo - MIB)) $hi; do same_at "$at" "$WORK/r" "$1 changed data outside its range"; done
    for at in $lo $((hi - MIB)); do same_at "$at" /dev/zero "$1: its range does not read as zeroes"; done
}
blkdiscard -z -o $lo -l $len "$BIG" 2>"$WORK/blkdiscard.err" || fail "blkdiscard -z of 2 GiB + 8 MiB: $(cat "$WORK/blkdiscard.err"); kernel: $(errors)"
zero_range_checks "blkdiscard -z"
zero=$(mm_stat_field big 5) # same_pages: the marks are random, so these are zero pages
((zero == len / 4096)) || fail "blkdiscard -z (NOUNMAP): same_pages $zero, not the range's $((len / 4096)) pages"
pass "blkdiscard -z of 2 GiB + 8 MiB (NOUNMAP): reads as zeroes, the rest intact, its $zero pages stored as zero pages"
fallocate --punch-hole -o $lo -l $len "$BIG" 2>"$WORK/fallocate.err" || fail "fallocate --punch-hole of 2 GiB + 8 MiB: $(cat "$WORK/fallocate.err"); kernel: $(errors)"
zero_range_checks "fallocate --punch-hole"
read -r -a fields <<<"$("$UZRAM" attr big mm_stat)"
zero=${fields[5]}
stored=${fields[0]}
((zero == 0 && stored == 2 * MIB)) || fail "fallocate --punch-hole (no NOUNMAP): same_pages $zero, orig_data_size $stored: the range's pages not dropped"
[[ -z $(errors) ]] || fail "write-zeroes: $(errors)"
pass "fallocate --punch-hole of 2 GiB + 8 MiB (write-zeroes without NOUNMAP): reads as zeroes, the rest intact, its pages dropped (orig_data_size $stored), no I/O error"
"$UZRAM" detach big || fail "detach big"
stop_server big

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
