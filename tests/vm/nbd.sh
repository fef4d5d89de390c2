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

# A tree of sources and headers, a few MiB.
TREE=$WORK/tree
mkdir -p "$TREE"
cp -a "$REPO/src" "$REPO/lib" "$REPO/docs" "$TREE/"
cp -a /usr/include/linux "$TREE/include-linux"
head -c $((4 << 20)) /dev/urandom >"$TREE/random"

# --- the file system round trip ---
start_server nb -s 512M
DEV=$("$UZRAM" attach --via nbd nb 2>"$WORK/attach.err") || fail "attach --via nbd: $(cat "$WORK/attach.err")"
[[ $DEV =~ ^/dev/nbd[0-9]+$ ]] || fail "attach --via nbd printed '$DEV'"
at_exit "nbd-client -d $DEV"
mkfs.ext4 -q "$DEV" || fail "mkfs.ext4 $DEV"
mount "$DEV" "$MNT" || fail "mount $DEV"
cp -a "$TREE" "$MNT/tree"
sync
echo 3 >/proc/sys/vm/drop_caches
diff -r "$TREE" "$MNT/tree" >"$WORK/diff" || fail "the tree read back differs: $(head -n 5 "$WORK/diff")"
pass "ext4 on $DEV: a $(du -sh "$TREE" | cut -f1) tree copied, caches dropped, equal byte for byte"

before=$(mm_stat_field nb 0)
rm -rf "$MNT/tree/include-linux" "$MNT/tree/random"
sync
fstrim "$MNT" || fail "fstrim $MNT"
after=$(mm_stat_field nb 0)
((after < before - (4 << 20))) || fail "fstrim: orig_data_size $before -> $after, not down by the 4 MiB file at least"
pass "rm + fstrim: orig_data_size $before -> $after"

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
    local signal=$1 name=srv$1 dev start status
    start_server "$name" -s 256M
    dev=$("$UZRAM" attach --via nbd "$name") || fail "attach --via nbd $name"
    mkfs.ext4 -q "$dev" && mount "$dev" "$MNT" || fail "mkfs/mount $dev"
    head -c $((1 << 20)) /dev/urandom >"$MNT/before"
    sync
    # a writer with requests in flight when the signal comes: a request the server never
    # answers must still fail within the bound (nbd-client -timeout), not hang the journal
    dd if=/dev/zero of="$MNT/busy" bs=64k count=100000 oflag=direct 2>/dev/null &
    local busy=$!
    sleep 1
    kill "-$signal" "${SERVER_PID[$name]}"
    timeout 20 tail --pid="${SERVER_PID[$name]}" -f /dev/null || fail "the server lived on after SIG$signal"
    unset "SERVER_PID[$name]"
    start=$(date +%s)
    timeout "$NBD_BOUND" tail --pid="$busy" -f /dev/null || fail "the writer busy at SIG$signal still runs after $NBD_BOUND s"
    wait "$busy" && fail "the writer busy at SIG$signal succeeded"
    set +e
    timeout "$NBD_BOUND" dd if=/dev/urandom of="$MNT/after" bs=1M count=4 oflag=direct,sync 2>"$WORK/dd.err"
    status=$?
    set -e
    (($(date +%s) - start < NBD_BOUND)) || fail "a write after SIG$signal took $NBD_BOUND s or more (status $status)"
    ((status != 0)) || fail "a write after SIG$signal succeeded"
    timeout "$NBD_BOUND" umount "$MNT" || timeout "$NBD_BOUND" umount -l "$MNT" || fail "umount after SIG$signal"
    timeout "$NBD_BOUND" nbd-client -d "$dev" >/dev/null 2>&1 || fail "nbd-client -d $dev after SIG$signal"
    wait_for "$NBD_BOUND" "$dev disconnected" bash -c "! [[ -e /sys/block/${dev#/dev/}/pid ]]"
    pass "SIG$signal under a mounted $dev: the write failed after $(($(date +%s) - start)) s ($(tail -n 1 "$WORK/dd.err")); umount, nbd-client -d freed it"
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
