#!/usr/bin/env bash
# nbd.sh - VM scenario (a): `uzram attach --via nbd` with the kernel's NBD client. ext4 made,
# mounted, a tree copied, page cache dropped, the tree compared byte for byte; rm + fstrim
# reach the engine (orig_data_size falls); detach refused while mounted; e2fsck clean. Then
# the server is stopped under a mounted /dev/nbdN with a writer busy, by SIGTERM and by SIGKILL:
# the writer's requests in flight and I/O after it fail within NBD_BOUND seconds (no hang), and the recovery the man page gives (umount, nbd-client
# -d) frees the node for the next attach.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# attach's nbd-client -timeout (20 s, src/attach/attach.h) plus room for an emulated guest
NBD_BOUND=40
vm_init
need_module nbd
need_tools nbd-client mkfs.ext4 e2fsck fstrim
MNT=$WORK/mnt
mkdir -p "$MNT"
at_exit "umount -l $MNT"

make_tree

# --- the file system round trip ---
start_server nb -s 512M
DEV=$("$UZRAM" attach --via nbd nb 2>"$WORK/attach.err") || fail "attach --via nbd: $(cat "$WORK/attach.err")"
[[ $DEV =~ ^/dev/nbd[0-9]+$ ]] || fail "attach --via nbd printed '$DEV'"
at_exit "nbd-client -d $DEV"
fs_round_trip "$DEV" nb "$MNT"

if "$UZRAM" detach nb 2>"$WORK/detach.err"; then fail "detach succeeded while $DEV is mounted"; fi
grep -q "mounted" "$WORK/detach.err" || fail "detach while mounted said: $(cat "$WORK/detach.err")"
pass "detach refused while mounted: $(cat "$WORK/detach.err")"
umount "$MNT"
e2fsck -fn "$DEV" >"$WORK/fsck" 2>&1 || fail "e2fsck: $(tail -n 5 "$WORK/fsck")"
"$UZRAM" detach nb || fail "detach after umount"
stop_server nb

# --- the server stops under a mounted node ---
# SIGNAL: TERM or KILL. I/O after it fails within NBD_BOUND s; umount and nbd-client -d
# recover the node (the data is gone with the server).
server_gone() {
    local signal=$1 dev
    stop_under_mount "$signal" nbd "$NBD_BOUND" "$MNT"
    dev=$STOPPED_DEV
    timeout "$NBD_BOUND" nbd-client -d "$dev" >/dev/null 2>&1 || fail "nbd-client -d $dev after SIG$signal"
    wait_for "$NBD_BOUND" "$dev disconnected" bash -c "! [[ -e /sys/block/${dev#/dev/}/pid ]]"
    pass "SIG$signal under a mounted $dev: the write failed after $STOPPED_AFTER; umount, nbd-client -d freed it"
}
server_gone TERM
server_gone KILL

# The freed node is usable again.
start_server again -s 64M
dev=$("$UZRAM" attach --via nbd again) || fail "attach after the recoveries"
head -c $((8 << 20)) /dev/urandom >"$WORK/r"
dd if="$WORK/r" of="$dev" bs=1M oflag=direct status=none
cmp -n $((8 << 20)) "$WORK/r" "$dev" || fail "data through $dev after the recoveries"
"$UZRAM" detach again
stop_server again
pass "attach after the recoveries: $dev, 8 MiB round trip"
echo "PASS: nbd.sh"
