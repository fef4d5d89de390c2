#!/usr/bin/env bash
# attach.sh - VM scenario (a): `uzram attach --via VIA` with the kernel's own client: nbd (the
# kernel's NBD client, the default) or loop (a loop device on the server's FUSE file). ext4
# made, mounted, a tree copied, page cache dropped, the tree compared byte for byte; rm + fstrim
# reach the engine (orig_data_size falls); detach refused while mounted; e2fsck clean. Then the
# server is stopped under a mounted node with a writer busy, by SIGTERM and by SIGKILL: the
# writer's requests in flight and I/O after it fail within BOUND seconds (no hang), and the
# recovery the man page gives frees the node for the next attach (nbd: umount, nbd-client -d;
# loop: umount, the loop device clears itself, `uzram detach NAME` takes away what a killed
# server left).
#
#   attach.sh [nbd|loop]
set -euo pipefail
source "$(dirname "$0")/lib.bash"

VIA=${1:-nbd}
# attach's nbd-client -timeout (20 s, src/attach/attach.h) plus room for an emulated guest
BOUND=40
vm_init
case $VIA in
nbd) need_module nbd; need_tools nbd-client ;;
loop) need_module loop fuse; need_tools losetup ;;
*) fail "VIA is nbd or loop, not '$VIA'" ;;
esac
need_tools mkfs.ext4 e2fsck fstrim
MNT=$WORK/mnt
mkdir -p "$MNT"
at_exit "umount -l $MNT"

make_tree

# --- the file system round trip ---
start_server fs -s 512M
DEV=$("$UZRAM" attach --via "$VIA" fs 2>"$WORK/attach.err") || fail "attach --via $VIA: $(cat "$WORK/attach.err")"
[[ $DEV =~ ^/dev/$VIA[0-9]+$ ]] || fail "attach --via $VIA printed '$DEV'"
at_exit "$UZRAM detach fs"
fs_round_trip "$DEV" fs "$MNT"

mounted_then_clean fs "$DEV" "$MNT"
"$UZRAM" detach fs || fail "detach after umount"
stop_server fs

# --- the server stops under a mounted node ---
# SIGNAL: TERM or KILL. I/O after it fails within BOUND s; the recovery frees the node (the
# data is gone with the server).
server_gone() {
    local signal=$1 dev
    stop_under_mount "$signal" "$VIA" "$BOUND" "$MNT"
    dev=$STOPPED_DEV
    if [[ $VIA == nbd ]]; then
        timeout "$BOUND" nbd-client -d "$dev" >/dev/null 2>&1 || fail "nbd-client -d $dev after SIG$signal"
        wait_for "$BOUND" "$dev disconnected" bash -c "! [[ -e /sys/block/${dev#/dev/}/pid ]]"
        pass "SIG$signal under a mounted $dev: the write failed after $STOPPED_AFTER; umount, nbd-client -d freed it"
    else
        wait_for "$BOUND" "$dev letting go of its file after the umount" \
            bash -c "[[ -z \$(losetup -n -O BACK-FILE $dev 2>/dev/null) ]]"
        # A killed server leaves its dead FUSE mount and sockets: detach takes them away.
        [[ $signal != KILL ]] || "$UZRAM" detach "srv$signal" >"$WORK/leftovers" 2>&1 ||
            fail "detach of what the killed server left: $(cat "$WORK/leftovers")"
        pass "SIG$signal under a mounted $dev: the write failed after $STOPPED_AFTER; umount freed it (autoclear)"
    fi
}
server_gone TERM
server_gone KILL

# The freed node is usable again.
start_server again -s 64M
dev=$("$UZRAM" attach --via "$VIA" again) || fail "attach after the recoveries"
head -c $((8 << 20)) /dev/urandom >"$WORK/r"
dd if="$WORK/r" of="$dev" bs=1M oflag=direct status=none
cmp -n $((8 << 20)) "$WORK/r" "$dev" || fail "data through $dev after the recoveries"
"$UZRAM" detach again
stop_server again
pass "attach --via $VIA after the recoveries: $dev, 8 MiB round trip"
echo "PASS: attach.sh $VIA"
