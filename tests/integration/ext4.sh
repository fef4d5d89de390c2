#!/usr/bin/env bash
# ext4.sh - integration test: a real filesystem on uzram through nbdfuse + a loop device:
# mkfs.ext4, copy a directory tree in, e2fsck clean, remount, diff byte for byte, fstrim.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

need_tools nbdfuse fusermount3 losetup mount umount mkfs.ext4 e2fsck fstrim mountpoint
[[ -c /dev/fuse ]] || skip "/dev/fuse is not available"
[[ $(id -u) -eq 0 ]] || skip "losetup and mount need root"
[[ -e /dev/loop-control ]] || skip "no loop devices (/dev/loop-control missing)"
lib_init

# The tree to copy: real files of many sizes, ~50-100 MB.
SRC=
for dir in /usr/include /usr/share/doc /usr/lib/python3; do
    [[ -d $dir ]] || continue
    kb=$(du -sk "$dir" | cut -f1)
    if [[ $kb -ge 20000 ]]; then SRC=$dir; break; fi
done
[[ -n $SRC ]] || skip "no directory tree of at least 20 MB to copy (tried /usr/include, /usr/share/doc)"

start_server ext4 -s 512M
URI=$(uri_of ext4)
FUSEDIR=$WORK/fuse
MNT=$WORK/mnt
mkdir "$FUSEDIR" "$MNT"
LOOP=

# Undo everything even after a failure, in reverse order: filesystem, loop device, FUSE.
at_exit 'fusermount3 -u "$FUSEDIR" || umount -l "$FUSEDIR"'
at_exit '[[ -n $LOOP ]] && losetup -d "$LOOP"'
at_exit 'mountpoint -q "$MNT" && { umount "$MNT" || umount -l "$MNT"; }'

# attach: nbdfuse exposes the export as $FUSEDIR/disk, a loop device on top of it -> $LOOP.
attach() {
    rm -f "$WORK/nbdfuse.pid"
    nbdfuse -P "$WORK/nbdfuse.pid" "$FUSEDIR/disk" "$URI" >"$WORK/nbdfuse.log" 2>&1 &
    for _ in $(seq 100); do
        [[ -s $WORK/nbdfuse.pid ]] && break
        sleep 0.1
    done
    [[ -s $WORK/nbdfuse.pid ]] || fail "nbdfuse did not become ready within 10 s: $(cat "$WORK/nbdfuse.log")"
    [[ $(stat -c %s "$FUSEDIR/disk") -eq $((512 * MiB)) ]] || fail "nbdfuse file has the wrong size"
    if ! LOOP=$(losetup -f --show "$FUSEDIR/disk" 2>"$WORK/losetup.err"); then
        # Containers without loop devices end up here.
        skip "losetup could not attach a loop device: $(cat "$WORK/losetup.err")"
    fi
}

# detach: loop device off, FUSE unmounted, and nbdfuse gone (bounded wait), so that no page
# cached on this side survives: the next attach reads everything from the server again.
detach() {
    losetup -d "$LOOP" || fail "losetup -d $LOOP"
    LOOP=
    fusermount3 -u "$FUSEDIR" || fail "fusermount3 -u"
    local pid
    pid=$(cat "$WORK/nbdfuse.pid")
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && fail "nbdfuse still running 10 s after fusermount3 -u"
    return 0
}

attach
pass "nbdfuse exposes the export as a 512 MiB file; loop device $LOOP on it"

mkfs.ext4 -q -F -E nodiscard "$LOOP" >"$WORK/mkfs.log" 2>&1 || fail "mkfs.ext4 on $LOOP: $(cat "$WORK/mkfs.log")"
mount -t ext4 "$LOOP" "$MNT" 2>"$WORK/mount.err" || skip "cannot mount ext4 here: $(cat "$WORK/mount.err")"
pass "mkfs.ext4 and mount on $LOOP"

cp -a "$SRC" "$MNT/tree" || fail "copying $SRC into the filesystem"
# A few large files too: compressible text, random bytes, zeros.
{ yes 'uzram keeps pages compressed in RAM; this line repeats.' | head -c $((8 * MiB)) >"$MNT/text"; } || true
head -c $((8 * MiB)) /dev/urandom >"$MNT/random"
head -c $((4 * MiB)) /dev/zero >"$MNT/zeros"
cp "$MNT/random" "$WORK/random.ref"
sync
umount "$MNT" || fail "umount after the copy"
detach
attach
e2fsck -fn "$LOOP" >"$WORK/fsck.log" 2>&1 || fail "e2fsck -fn is not clean: $(tail -20 "$WORK/fsck.log")"
pass "$SRC copied in ($(du -sh "$SRC" | cut -f1)), unmounted, reattached, e2fsck -fn clean"

mount -t ext4 "$LOOP" "$MNT" || fail "mounting again"
diff -r --no-dereference "$SRC" "$MNT/tree" >"$WORK/diff.log" 2>&1 ||
    fail "diff -r after the remount: $(head -20 "$WORK/diff.log")"
cmp -s "$WORK/random.ref" "$MNT/random" || fail "random file differs after the remount"
cmp -s "$MNT/zeros" <(head -c $((4 * MiB)) /dev/zero) || fail "zero file differs after the remount"
[[ $(sha256sum <"$MNT/text" | cut -d' ' -f1) == $({ yes 'uzram keeps pages compressed in RAM; this line repeats.' | head -c $((8 * MiB)); } | sha256sum | cut -d' ' -f1) ]] ||
    fail "text file differs after the remount"
pass "remounted; tree and files equal byte for byte"

# --- delete + fstrim must reach the server as discards ---
before=$(mm_stat_field ext4 0)
rm -rf "$MNT/tree" "$MNT/random" "$MNT/text"
sync
fstrim -v "$MNT" >"$WORK/fstrim.log" 2>&1 || fail "fstrim: $(cat "$WORK/fstrim.log")"
sync
after=$(mm_stat_field ext4 0)
freed=$((before - after))
# The deleted data was tens of MB; most of it must be gone from the server.
[[ $freed -ge $((16 * MiB)) ]] ||
    fail "orig_data_size went from $before to $after after rm + fstrim: discards did not reach the server"
pass "rm + fstrim freed $((freed / MiB)) MiB on the server ($(cat "$WORK/fstrim.log"))"

cmp -s "$MNT/zeros" <(head -c $((4 * MiB)) /dev/zero) || fail "a file that was not deleted changed after fstrim"
umount "$MNT" || fail "final umount"
e2fsck -fn "$LOOP" >"$WORK/fsck.log" 2>&1 || fail "e2fsck -fn after fstrim: $(tail -20 "$WORK/fsck.log")"
detach
pass "clean teardown: umount, e2fsck clean, loop detached, FUSE unmounted"

stop_server ext4
echo "PASS: ext4.sh"
